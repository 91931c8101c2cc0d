#!/usr/bin/env python3
"""Checks what `swarm_bench --quick` printed that does not depend on timing:
four runs, direct and through flowtune-relay alternately, in which the
allocator saw at least 99% of the flowlet events, at most 1% of flowlets
started without a rate, and no relay dropped a message.

Usage: python3 bench/check_swarm_bench.py SWARM_BENCH.json
Exit 0 when every fact holds, 1 naming the field that failed, 2 on misuse.
"""
import sys

from check_lib import expect, run


def check(doc, _args):
    runs = doc["runs"]
    expect(len(runs) == 4, "len(runs)", len(runs), "4")
    relayed = [x["relays"] > 0 for x in runs]
    expect(relayed == [False, True, False, True], "runs[].relays > 0", relayed,
           "[False, True, False, True]")
    for i, x in enumerate(runs):
        ev = x["flowlet_events"]
        expect(ev > 0, "runs[%d].flowlet_events" % i, ev, "> 0")
        expect(x["events_seen_by_allocator"] >= 0.99 * ev, "runs[%d].events_seen_by_allocator" % i,
               x["events_seen_by_allocator"], ">= 0.99 * flowlet_events (%r)" % (0.99 * ev))
        expect(x["starts_unrated"] <= 0.01 * ev, "runs[%d].starts_unrated" % i, x["starts_unrated"],
               "<= 0.01 * flowlet_events (%r)" % (0.01 * ev))
        expect(x["relay_dropped"] == 0, "runs[%d].relay_dropped" % i, x["relay_dropped"], "0")


if __name__ == "__main__":
    sys.exit(run(check, __doc__))
