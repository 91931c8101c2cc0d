#!/usr/bin/env python3
"""Checks what `mpirun -np N mpi_bench --quick` and bench/mpi_model.py
printed that does not depend on timing (.ci/run).

Usage: python3 bench/check_mpi_bench.py KIND FILE.json
KIND is one of:
  np2    2 ranks, 18 rows: the gather receives fewer rates per iteration
         than the mirror at the same size; every iteration took time;
         every exchange but the mirror sent bytes; the neighbours exchange
         counts never and the link owners every iteration
  np4    4 ranks, not skipped: the diagonal exchange has 3 sizes, the same
         as the link owners', and sends fewer bytes per rank at each, in 2
         arrays
  model  mpi_model.py's fit used 6 runs, predicts something, and projects
         the diagonal exchange in doubles at 16, 64, 256 and 1024 ranks
Exit 0 when every fact holds, 1 naming the field that failed, 2 on misuse.
"""
import sys

from check_lib import expect, run


def size(e):
    return (e["hosts"], e["flows"])


def np2(r):
    x = r["results"]
    expect(r["ranks"] == 2, "ranks", r["ranks"], "2")
    expect(len(x) == 18, "len(results)", len(x), "18")
    for m in (e for e in x if e["exchange"] == "mirror (--mpi)"):
        for g in (e for e in x if e.get("gather_threshold", 0) > 0 and size(e) == size(m)):
            expect(g["rates_received_per_iteration"] < m["rates_received_per_iteration"],
                   "results[%s, gather_threshold %r].rates_received_per_iteration"
                   % (g["exchange"], g["gather_threshold"]),
                   g["rates_received_per_iteration"],
                   "< the mirror's (%r) at %r" % (m["rates_received_per_iteration"], size(m)))
    for e in x:
        where = "results[%s at %r]" % (e["exchange"], size(e))
        expect(e["iteration_us_p50"] > 0, where + ".iteration_us_p50", e["iteration_us_p50"], "> 0")
        if "mirror" not in e["exchange"]:
            expect(e["bytes_sent_per_iteration_max_rank"] > 0,
                   where + ".bytes_sent_per_iteration_max_rank",
                   e["bytes_sent_per_iteration_max_rank"], "> 0")
        if e["exchange"] in ("neighbors", "link-owners"):
            want = 0 if e["exchange"] == "neighbors" else r["iterations"]
            expect(e["counts_exchanges_max_rank"] == want, where + ".counts_exchanges_max_rank",
                   e["counts_exchanges_max_rank"], repr(want))


def np4(r):
    x = r["results"]
    d = {size(e): e for e in x if e["exchange"] == "diagonal"}
    o = {size(e): e for e in x if e["exchange"] == "link-owners"}
    expect(r["ranks"] == 4, "ranks", r["ranks"], "4")
    expect(not r["skipped"], "skipped", r["skipped"], "false")
    expect(len(d) == 3, "results[diagonal] sizes", sorted(d), "3 sizes")
    expect(d.keys() == o.keys(), "results[diagonal] sizes", sorted(d),
           "the link owners' sizes %r" % sorted(o))
    for k in d:
        expect(d[k]["bytes_sent_per_iteration_max_rank"] < o[k]["bytes_sent_per_iteration_max_rank"],
               "results[diagonal at %r].bytes_sent_per_iteration_max_rank" % (k,),
               d[k]["bytes_sent_per_iteration_max_rank"],
               "< the link owners' (%r)" % o[k]["bytes_sent_per_iteration_max_rank"])
        expect(d[k]["arrays_sent_per_iteration_max_rank"] == 2,
               "results[diagonal at %r].arrays_sent_per_iteration_max_rank" % (k,),
               d[k]["arrays_sent_per_iteration_max_rank"], "2")


def model(m):
    expect(len(m["fit"]["on_runs"]) == 6, "len(fit.on_runs)", len(m["fit"]["on_runs"]), "6")
    expect(bool(m["predictions"]), "predictions", m["predictions"], "non-empty")
    ranks = [d["ranks"] for d in m["diagonal"] if d["real"] == "double"]
    expect(ranks == [16, 64, 256, 1024], "diagonal[real=double].ranks", ranks,
           "[16, 64, 256, 1024]")


KINDS = {"np2": np2, "np4": np4, "model": model}


def check(doc, args):
    if args[0] not in KINDS:
        raise KeyError("kind %r (one of %s)" % (args[0], ", ".join(KINDS)))
    KINDS[args[0]](doc)


if __name__ == "__main__":
    sys.exit(run(check, __doc__, nargs=1))
