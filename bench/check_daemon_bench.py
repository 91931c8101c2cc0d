#!/usr/bin/env python3
"""Checks what `daemon_bench --MODE --quick` printed that does not depend on
timing (the CI's smoke runs, .ci/run).

Usage: python3 bench/check_daemon_bench.py MODE DAEMON_BENCH.json
MODE is one of:
  early-rates  every probe answered; early rates off sends none, on sends
               one per probe (at least 0.99) once the gap exceeds 1 ms
  ctl-flood    every kind of ctl reply was served, and the ones that sum
               over every flow shared a pass: at most 4 a second (+5)
  curve        throughput rows without then with CURVE; every latency
               probe answered
  flood        per-source quotas held a flood: flows bounded, legitimate
               probes served and their rates unchanged (at most 1%)
  memory       the heap was trimmed after a storm (RSS below 0.6 of the
               peak) and at least 90% of endpoints' hellos were taken
Exit 0 when every fact holds, 1 naming the field that failed, 2 on misuse.
"""
import sys

from check_lib import expect, run


def early_rates(doc):
    rows = doc["early_rates"]
    for i, x in enumerate(rows):
        expect(x["answered"] == x["probes"], "early_rates[%d].answered" % i, x["answered"],
               "== probes (%r)" % x["probes"])
    m = {x["early_rates"]: x for x in rows if x["gap_ms"] > 1}
    expect("off" in m and "on" in m, "early_rates[].early_rates (gap_ms > 1)", sorted(m),
           "rows for both 'off' and 'on'")
    expect(m["off"]["early_rates_per_probe"] == 0, "early_rates[off].early_rates_per_probe",
           m["off"]["early_rates_per_probe"], "0")
    expect(m["on"]["early_rates_per_probe"] >= 0.99, "early_rates[on].early_rates_per_probe",
           m["on"]["early_rates_per_probe"], ">= 0.99")


def ctl_flood(doc):
    rows = doc["ctl_flood"]
    expect(len(rows) == 2, "len(ctl_flood)", len(rows), "2")
    f = rows[1]
    k = f["ctl_replies_by_kind"]
    for kind in ("status", "endpoints", "flows", "links", "tenants"):
        expect(k[kind] > 0, "ctl_flood[1].ctl_replies_by_kind.%s" % kind, k[kind], "> 0")
    bound = 4 * f["seconds"] + 5
    expect(f["daemon_totals_passes"] <= bound, "ctl_flood[1].daemon_totals_passes",
           f["daemon_totals_passes"], "<= 4 * seconds + 5 (%r)" % bound)
    summed = k["status"] + k["links"] + k["tenants"]
    expect(bound < summed, "ctl_flood[1].ctl_replies_by_kind.status+links+tenants", summed,
           "> 4 * seconds + 5 (%r): the passes must have been shared" % bound)


def curve(doc):
    r = doc["curve"]
    seen = [t["curve"] for t in r["throughput"]]
    expect(seen == [False, True], "curve.throughput[].curve", seen, "[False, True]")
    for i, x in enumerate(r["latency"]):
        expect(x["answered"] == x["probes"], "curve.latency[%d].answered" % i, x["answered"],
               "== probes (%r)" % x["probes"])


def flood(doc):
    r = doc["flood"][0]
    expect(bool(r["quotas"]), "flood[0].quotas", r["quotas"], "true")
    expect(r["max_flows_per_source"] == 8192, "flood[0].max_flows_per_source",
           r["max_flows_per_source"], "8192")
    most = 1000 + 1 + r["max_flows_per_source"]
    expect(r["flows_during_flood"] <= most, "flood[0].flows_during_flood", r["flows_during_flood"],
           "<= 1001 + max_flows_per_source (%r)" % most)
    bytes_bound = 2097152 + 1e6 * r["flood_seconds"]
    expect(r["refused_rate_limited"] > 0 or r["daemon_bytes_in"] < bytes_bound,
           "flood[0].refused_rate_limited / daemon_bytes_in",
           (r["refused_rate_limited"], r["daemon_bytes_in"]),
           "some refused, or fewer than %r bytes in" % bytes_bound)
    for field in ("probe_refused_under_flood", "legit_flows_without_rate"):
        expect(r[field] == 0, "flood[0].%s" % field, r[field], "0")
    expect(r["legit_worst_rate_change"] <= 0.01, "flood[0].legit_worst_rate_change",
           r["legit_worst_rate_change"], "<= 0.01")


def memory(doc):
    p = {x["phase"]: x for x in doc["memory"]["phases"]}
    s, e = p["storm"], p["endpoints"]
    expect(s["rss_mb_after"] < 0.6 * s["rss_mb_peak"], "memory.phases[storm].rss_mb_after",
           s["rss_mb_after"], "< 0.6 * rss_mb_peak (%r)" % (0.6 * s["rss_mb_peak"]))
    expect(s["memory_trims"] >= 1, "memory.phases[storm].memory_trims", s["memory_trims"], ">= 1")
    expect(e["hellos_taken"] >= 0.9 * e["endpoints"], "memory.phases[endpoints].hellos_taken",
           e["hellos_taken"], ">= 0.9 * endpoints (%r)" % (0.9 * e["endpoints"]))


MODES = {"early-rates": early_rates, "ctl-flood": ctl_flood, "curve": curve, "flood": flood,
         "memory": memory}


def check(doc, args):
    if args[0] not in MODES:
        raise KeyError("mode %r (one of %s)" % (args[0], ", ".join(MODES)))
    MODES[args[0]](doc)


if __name__ == "__main__":
    sys.exit(run(check, __doc__, nargs=1))
