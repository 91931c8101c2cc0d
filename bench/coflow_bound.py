#!/usr/bin/env python3
"""A lower bound on the mean coflow completion time of a Coflow-Benchmark
trace, in flowtune-sim's model (allocator/sim/coflow_trace.cc: each rack one
big-switch port with an uplink and a downlink of --port-gbps, a reducer's
bytes evenly from every mapper, rack-local flows left out, 1 MB = 2^20 B).

No schedule beats either bound:
  isolated   every coflow alone on the fabric (flowtune-sim's `offline`);
  port-SRPT  on one port, the coflows' work there scheduled by preemptive
             shortest-remaining-first with their arrivals as release times
             (optimal for a single port's total completion time), plus the
             other coflows' isolated times; the largest over ports.

  bench/coflow_bound.py [TRACE] [--time-scale S] [--port-gbps G]
"""
import argparse
import heapq
import json
import os
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FB = os.path.join(TOP, "allocator", "sim", "workloads", "fb_coflows.txt")


def parse(text, time_scale=1.0, port_gbps=1.0):
    """[(id, arrival_s, {port: seconds of work})], coflows moving no byte
    over the fabric left out."""
    lines = text.split("\n")
    port_Bps = port_gbps * 1e9 / 8
    out = []
    for ln in lines[1:]:
        t = ln.split()
        if not t:
            continue
        cid, arrival, nm = int(t[0]), float(t[1]) / 1000 * time_scale, int(t[2])
        mappers = [int(x) for x in t[3:3 + nm]]
        nr = int(t[3 + nm])
        load = {}
        for r in t[4 + nm:4 + nm + nr]:
            rp, mb = r.split(":")
            each = float(mb) * 2**20 / len(mappers)
            for mp in mappers:
                if mp == int(rp) or each <= 0:
                    continue
                load[("up", mp)] = load.get(("up", mp), 0) + each
                load[("down", int(rp))] = load.get(("down", int(rp)), 0) + each
        if load:
            out.append((cid, arrival, {p: b / port_Bps for p, b in load.items()}))
    return out


def srpt(jobs):
    """Preemptive shortest-remaining-first on one machine: {id: completion}
    for jobs [(release, size, id)]."""
    jobs = sorted(jobs)
    t, i, heap, done = 0.0, 0, [], {}
    while i < len(jobs) or heap:
        if not heap:
            t = max(t, jobs[i][0])
        while i < len(jobs) and jobs[i][0] <= t:
            heapq.heappush(heap, [jobs[i][1], jobs[i][2]])
            i += 1
        left, j = heap[0]
        nxt = jobs[i][0] if i < len(jobs) else float("inf")
        if t + left <= nxt:
            t += left
            heapq.heappop(heap)
            done[j] = t
        else:
            heap[0][0] -= nxt - t
            t = nxt
    return done


def bounds(coflows):
    iso = {c: max(work.values()) for c, _, work in coflows}
    arrival = {c: a for c, a, _ in coflows}
    total_iso = sum(iso.values())
    best, where = total_iso, None
    by_port = {}
    for c, a, work in coflows:
        for p, s in work.items():
            by_port.setdefault(p, []).append((a, s, c))
    for p, jobs in by_port.items():
        done = srpt(jobs)
        v = sum(done[c] - arrival[c] for c in done) + sum(x for c, x in iso.items() if c not in done)
        if v > best:
            best, where = v, p
    n = len(coflows)
    return {"coflows": n, "isolated_mean_s": total_iso / n, "port_srpt_mean_s": best / n,
            "port": "%s %d" % where if where else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("trace", nargs="?", default=FB)
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--port-gbps", type=float, default=1.0)
    a = ap.parse_args()
    if a.time_scale <= 0 or a.port_gbps <= 0:
        ap.error("--time-scale and --port-gbps must be positive")
    with open(a.trace) as f:
        print(json.dumps(bounds(parse(f.read(), a.time_scale, a.port_gbps))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
