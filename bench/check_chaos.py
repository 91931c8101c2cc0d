#!/usr/bin/env python3
"""Checks what `bench/chaos/run --quick` wrote (.ci/run): every fault ran
and none was skipped or broken; no byte was lost and no application saw an
error; sockets were unpaced within the lease and rated again within the
limits of the run's config; a killed endpoint's flows went stale in time;
the standby took over without a split brain; the allocator served while its
log disk was full; and the Java NIO sender ran.

Usage: python3 bench/check_chaos.py CHAOS.json
Exit 0 when every fact holds, 1 naming the field that failed, 2 on misuse.
"""
import sys

from check_lib import expect, run

FAULTS = {"kill9_restart", "sigstop", "endpoint_killed", "standby_kill9", "control_drop",
          "control_delay", "clock_step", "disk_full", "relay_killed"}
UNPACED = ("kill9_restart", "sigstop", "control_drop", "relay_killed")
RATED_AGAIN = ("kill9_restart", "sigstop", "control_drop", "control_delay", "clock_step",
               "disk_full", "relay_killed")


def within(s, fault, field, limit):
    v = s[fault][field]
    expect(v is not None and v <= limit, "summary.%s.%s" % (fault, field), v, "<= %r" % limit)


def check(r, _args):
    s, lim = r["summary"], r["config"]["limits_s"]
    expect(set(s) == FAULTS, "summary (faults)", sorted(s), sorted(FAULTS))
    skipped = sorted(f for f, v in s.items() if v.get("skipped"))
    expect(not skipped, "summary[].skipped", skipped, "none (every tool is installed)")
    expect(not r["broken"], "broken", r["broken"], "empty")
    for f, v in s.items():
        expect(v["bytes_lost"] == 0, "summary.%s.bytes_lost" % f, v["bytes_lost"], "0")
        expect(v["app_errors"] == 0, "summary.%s.app_errors" % f, v["app_errors"], "0")
    for f in UNPACED:
        within(s, f, "unpaced_after_s", lim["unpaced_s"])
    for f in RATED_AGAIN:
        within(s, f, "rate_again_after_s", lim["rate_again_s"])
    ek = s["endpoint_killed"]
    expect(ek["stale_flows"] >= 1, "summary.endpoint_killed.stale_flows", ek["stale_flows"], ">= 1")
    within(s, "endpoint_killed", "stale_for_s", lim["stale_s"])
    # The hot standby pair: the standby holds and rates every flow within 2 heartbeats.
    within(s, "standby_kill9", "standby_rated_after_s", lim["rate_again_s"])
    sb = s["standby_kill9"]["split_brain"]
    expect(sb is False, "summary.standby_kill9.split_brain", sb, "false")
    df = s["disk_full"]
    for field in ("allocator_served_while_full", "log_resumed_after_free"):
        expect(bool(df[field]), "summary.disk_full.%s" % field, df[field], "true")
    expect(bool(r["config"]["java"]), "config.java", r["config"]["java"],
           "true (the Java NIO sender ran)")


if __name__ == "__main__":
    sys.exit(run(check, __doc__))
