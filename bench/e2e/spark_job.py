"""The Spark job of `bench/e2e/run spark`: one shuffle of generated rows.

Run by spark-submit on the testbed's master. Every row (a 64-bit id, a key
and a payload of hex digits that lz4 cannot shrink much) is made on the map
side, moved by key to its reduce partition (the shuffle: every executor
fetches a part from every other), and aggregated per key there. The answer
is the per-key count, id sum and payload-hash sum; its fingerprint (SHA-256
of the sorted rows) must be the same under every scheme, and its totals must
match what the rows add up to without the shuffle (checked here).

  spark-submit ... spark_job.py --rows N --payload-bytes B --partitions P --out FILE
"""
import argparse
import hashlib
import json
import sys
import time

from pyspark.sql import SparkSession, functions as F

KEYS = 1000
MASK32 = 0xFFFFFFFF


def rows_of(spark, rows, payload_bytes, partitions):
    """The map side's rows: id, key, payload (up to 16 hex digits per
    xxhash64: hex drops leading zeros)."""
    df = spark.range(0, rows, numPartitions=partitions)
    words = max(1, payload_bytes // 16)
    payload = F.concat(*[F.hex(F.xxhash64("id", F.lit(i))) for i in range(words)])
    return df.select("id", F.pmod(F.xxhash64("id"), F.lit(KEYS)).alias("key"),
                     payload.alias("payload"))


def digest():
    """count, id sum and 32-bit payload-hash sum: long-safe for 2^31 rows."""
    return [F.count("*").alias("n"), F.sum("id").alias("ids"),
            F.sum(F.xxhash64("payload").bitwiseAND(MASK32)).alias("h")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--payload-bytes", type=int, default=96)
    ap.add_argument("--partitions", type=int, required=True,
                    help="map tasks and reduce partitions")
    ap.add_argument("--out", required=True, help="where the JSON answer goes")
    a = ap.parse_args()
    if a.rows <= 0 or a.partitions <= 0 or a.payload_bytes <= 0:
        ap.error("--rows, --partitions and --payload-bytes must be positive")
    spark = SparkSession.builder.appName("flowtune-spark-shuffle").getOrCreate()
    df = rows_of(spark, a.rows, a.payload_bytes, a.partitions)
    started = time.time()
    # repartition by key is the shuffle; the groupBy after it is local (the
    # rows are already partitioned by key), so the job has one shuffle.
    answer = sorted(df.repartition(a.partitions, "key").groupBy("key").agg(*digest()).collect())
    shuffle_job_s = time.time() - started
    # The same totals with no shuffle of rows (one partial row per map task).
    whole = df.agg(*digest()).collect()[0]
    totals = [sum(r[k] for r in answer) for k in ("n", "ids", "h")]
    ok = (totals == [whole["n"], whole["ids"], whole["h"]] and whole["n"] == a.rows
          and whole["ids"] == a.rows * (a.rows - 1) // 2)
    text = "\n".join("%d %d %d %d" % (r["key"], r["n"], r["ids"], r["h"]) for r in answer)
    result = {"rows": a.rows, "keys": len(answer), "fingerprint": hashlib.sha256(text.encode()).hexdigest(),
              "totals_match": ok, "shuffle_job_s": shuffle_job_s,
              "app_id": spark.sparkContext.applicationId}
    with open(a.out, "w") as f:
        json.dump(result, f)
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
