#!/usr/bin/env python3
"""The bench/check_*.py scripts against hand-made benchmark output: each
passes a document in which every fact holds, and fails (exit 1, naming the
field) a copy in which one field is broken, so a check that can no longer
fail is caught.

Usage: python3 tests/scripts/bench_checks_test.py BENCH_DIR
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

BENCH = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../bench")
failures = []


def mpi_row(exchange, hosts, flows, **kw):
    row = {"exchange": exchange, "hosts": hosts, "flows": flows, "iteration_us_p50": 5.0,
           "bytes_sent_per_iteration_max_rank": 100, "rates_received_per_iteration": 50,
           "counts_exchanges_max_rank": 0 if exchange == "neighbors" else 10,
           "arrays_sent_per_iteration_max_rank": 2}
    row.update(kw)
    return row


def mpi_np2():
    rows = []
    for size in ((8, 64), (16, 128), (32, 256)):
        rows.append(mpi_row("mirror (--mpi)", *size, rates_received_per_iteration=100))
        rows.append(mpi_row("gather", *size, gather_threshold=4, rates_received_per_iteration=10))
        for ex in ("neighbors", "link-owners", "diagonal", "owners-gather"):
            rows.append(mpi_row(ex, *size))
    return {"ranks": 2, "iterations": 10, "results": rows}


def mpi_np4():
    rows = []
    for size in ((8, 64), (16, 128), (32, 256)):
        rows.append(mpi_row("diagonal", *size, bytes_sent_per_iteration_max_rank=50))
        rows.append(mpi_row("link-owners", *size, bytes_sent_per_iteration_max_rank=80))
    return {"ranks": 4, "skipped": False, "iterations": 10, "results": rows}


def swarm_run(relays):
    return {"relays": relays, "flowlet_events": 1000, "events_seen_by_allocator": 1000,
            "starts_unrated": 3, "relay_dropped": 0}


def chaos():
    s = {f: {"bytes_lost": 0, "app_errors": 0, "unpaced_after_s": 1.0, "rate_again_after_s": 2.0}
         for f in ("kill9_restart", "sigstop", "endpoint_killed", "standby_kill9", "control_drop",
                   "control_delay", "clock_step", "disk_full", "relay_killed")}
    s["endpoint_killed"].update(stale_flows=2, stale_for_s=3.0)
    s["standby_kill9"].update(standby_rated_after_s=2.0, split_brain=False)
    s["disk_full"].update(allocator_served_while_full=True, log_resumed_after_free=True)
    return {"summary": s, "broken": [], "config": {"java": True, "limits_s": {
        "unpaced_s": 5, "rate_again_s": 4, "stale_s": 10}}}


def spark():
    alloc = {"hellos": 4, "starts": 10, "coflow_plans": 2}
    v = {"failed_jobs": 0, "shuffle_stage_s": 3.5}
    return {"summary": {"flowtune-sebf": dict(v), "cubic": dict(v)}, "answers_identical": True,
            "details": {"shallow": {"flowtune-sebf": [{"allocator": dict(alloc)}] * 2}}}


# (script, leading args, a good document, [(field named in the failure, a
# function that breaks the document)]).
CASES = [
    ("check_daemon_bench.py", ["early-rates"], {"early_rates": [
        {"early_rates": "off", "gap_ms": 5, "answered": 10, "probes": 10, "early_rates_per_probe": 0},
        {"early_rates": "on", "gap_ms": 5, "answered": 10, "probes": 10, "early_rates_per_probe": 1.0},
        {"early_rates": "on", "gap_ms": 0, "answered": 10, "probes": 10, "early_rates_per_probe": 0.2}]},
     [("early_rates[on].early_rates_per_probe", lambda d: d["early_rates"][1].update(early_rates_per_probe=0.5)),
      ("early_rates[2].answered", lambda d: d["early_rates"][2].update(answered=9))]),
    ("check_daemon_bench.py", ["ctl-flood"], {"ctl_flood": [{}, {
        "seconds": 2, "daemon_totals_passes": 9, "ctl_replies_by_kind": {
            "status": 10, "endpoints": 1, "flows": 1, "links": 10, "tenants": 10}}]},
     [("ctl_replies_by_kind.flows", lambda d: d["ctl_flood"][1]["ctl_replies_by_kind"].update(flows=0)),
      ("daemon_totals_passes", lambda d: d["ctl_flood"][1].update(daemon_totals_passes=20))]),
    ("check_daemon_bench.py", ["curve"], {"curve": {
        "throughput": [{"curve": False}, {"curve": True}], "latency": [{"answered": 3, "probes": 3}]}},
     [("curve.throughput[].curve", lambda d: d["curve"]["throughput"].pop()),
      ("curve.latency[0].answered", lambda d: d["curve"]["latency"][0].update(answered=2))]),
    ("check_daemon_bench.py", ["flood"], {"flood": [{
        "quotas": True, "max_flows_per_source": 8192, "flows_during_flood": 9000,
        "refused_rate_limited": 5, "daemon_bytes_in": 1e9, "flood_seconds": 2,
        "probe_refused_under_flood": 0, "legit_flows_without_rate": 0, "legit_worst_rate_change": 0.0}]},
     [("flood[0].legit_worst_rate_change", lambda d: d["flood"][0].update(legit_worst_rate_change=0.5)),
      ("flood[0].flows_during_flood", lambda d: d["flood"][0].update(flows_during_flood=9194))]),
    ("check_daemon_bench.py", ["memory"], {"memory": {"phases": [
        {"phase": "storm", "rss_mb_after": 50, "rss_mb_peak": 200, "memory_trims": 1},
        {"phase": "endpoints", "hellos_taken": 95, "endpoints": 100}]}},
     [("phases[storm].rss_mb_after", lambda d: d["memory"]["phases"][0].update(rss_mb_after=150)),
      ("phases[endpoints].hellos_taken", lambda d: d["memory"]["phases"][1].update(hellos_taken=80))]),
    ("check_swarm_bench.py", [], {"runs": [swarm_run(0), swarm_run(2), swarm_run(0), swarm_run(2)]},
     [("runs[3].relay_dropped", lambda d: d["runs"][3].update(relay_dropped=1)),
      ("runs[].relays", lambda d: d["runs"][1].update(relays=0))]),
    ("check_mpi_bench.py", ["np2"], mpi_np2(),
     [("rates_received_per_iteration", lambda d: d["results"][1].update(rates_received_per_iteration=500)),
      ("counts_exchanges_max_rank", lambda d: d["results"][2].update(counts_exchanges_max_rank=3))]),
    ("check_mpi_bench.py", ["np4"], mpi_np4(),
     [("bytes_sent_per_iteration_max_rank", lambda d: d["results"][0].update(bytes_sent_per_iteration_max_rank=90)),
      ("skipped", lambda d: d.update(skipped=True))]),
    ("check_mpi_bench.py", ["model"], {"fit": {"on_runs": [1] * 6}, "predictions": [{}],
                                       "diagonal": [{"ranks": r, "real": "double"} for r in (16, 64, 256, 1024)]},
     [("fit.on_runs", lambda d: d["fit"]["on_runs"].pop()),
      ("diagonal[real=double].ranks", lambda d: d["diagonal"].pop())]),
    ("check_e2e.py", ["coflow-trace"], {"summary": {
        "flowtune-sebf": {"incomplete": 0, "failed_blocks": 0}, "cubic": {"incomplete": 0, "failed_blocks": 0}}},
     [("summary[cubic].failed_blocks", lambda d: d["summary"]["cubic"].update(failed_blocks=1))]),
    ("check_e2e.py", ["spark"], spark(),
     [("answers_identical", lambda d: d.update(answers_identical=False)),
      ("allocator.hellos", lambda d: d["details"]["shallow"]["flowtune-sebf"].__setitem__(
          0, {"allocator": {"hellos": 1, "starts": 1, "coflow_plans": 1}}))]),
    ("check_chaos.py", [], chaos(),
     [("summary.sigstop.bytes_lost", lambda d: d["summary"]["sigstop"].update(bytes_lost=4)),
      ("summary.clock_step.rate_again_after_s", lambda d: d["summary"]["clock_step"].update(rate_again_after_s=None)),
      ("config.java", lambda d: d["config"].update(java=False))]),
]


def run_check(script, args, doc):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(doc, f)
    try:
        p = subprocess.run([sys.executable, os.path.join(BENCH, script)] + args + [f.name],
                           capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(f.name)
    return p.returncode, p.stderr


for script, args, good, breaks in CASES:
    rc, err = run_check(script, args, good)
    if rc != 0:
        failures.append("%s %s: a good document failed (%d): %s" % (script, args, rc, err.strip()))
    for field, breaker in breaks:
        bad = copy.deepcopy(good)
        breaker(bad)
        rc, err = run_check(script, args, bad)
        if rc != 1 or field not in err:
            failures.append("%s %s: breaking %s gave exit %d and %r" % (script, args, field, rc, err.strip()))
    rc, err = run_check(script, args, {})
    if rc != 1 or "missing" not in err:
        failures.append("%s %s: an empty document gave exit %d and %r" % (script, args, rc, err.strip()))

for f in failures:
    print("FAIL:", f)
print("%d checkers, %d failures" % (len(CASES), len(failures)))
sys.exit(1 if failures else 0)
