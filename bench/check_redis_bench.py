#!/usr/bin/env python3
"""Checks what bench/redis_bench.py printed that does not depend on timing:
every scheme and workload ran and served requests, and the server's
small-request connections never reached the allocator under the shim (its
replies are all mice: no hello, no event).

Usage: python3 bench/check_redis_bench.py REDIS_BENCH.json
Exit 0 when it holds, 1 with the failing row otherwise.
"""
import json
import sys


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    with open(sys.argv[1]) as f:
        rows = json.load(f)["rows"]
    seen = {(r["workload"], r["scheme"]) for r in rows}
    for want in (("small", "plain"), ("small", "shim"), ("pipelined", "plain"),
                 ("pipelined", "shim")):
        if want not in seen:
            print("check_redis_bench: no row for %s/%s" % want, file=sys.stderr)
            return 1
    for r in rows:
        if r["set_rps"] <= 0 or r["get_rps"] <= 0:
            print("check_redis_bench: no requests served: %s" % r, file=sys.stderr)
            return 1
        if r["workload"] == "small" and r["scheme"] == "shim" and any(r["allocator_heard"].values()):
            print("check_redis_bench: mice reached the allocator: %s" % r, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
