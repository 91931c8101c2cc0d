#!/usr/bin/env python3
"""Runs Flowtune in the packet-level model (flowtune-packet) and in the
flow-level model (flowtune-sim run) on the same flowlets and compares each
flowlet's throughput (docs/packet.md, "Agreement with the flow-level model").

The packet model runs first with zero control delay (--control instant),
zero propagation delay, the allocator's turn equal to the fluid model's
iteration interval and deep buffers, and writes its flowlets as a flow list
(--flows-out: sizes, arrivals, hosts and each flowlet's ECMP hash, so the
same spine). The fluid model then runs exactly that list (--flows).

Per-flowlet throughput is payload bytes x 8 / FCT, FCT from the arrival to
the last byte at the receiver, in both models; ratio = packet / fluid.
Output: JSON with every flowlet's pair and the summaries (median and p90 of
|ratio - 1|, the fraction within 5%), over all flowlets and per size bucket
in packets of MSS. With --check-* the exit status says whether the
agreement holds (1: it does not, the reason on stderr); 77: a binary is
missing (the reason on stderr).
"""

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

# Per data packet in the packet model: IPv4 20 + TCP 20 + timestamps 12 + PPP 2.
HEADER_BYTES = 54
BUCKETS = [(1, 1, "1"), (2, 10, "2-10"), (11, 100, "11-100"), (101, 1000, "101-1000"),
           (1001, math.inf, ">1000")]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--packet", required=True, help="flowtune-packet binary")
    p.add_argument("--sim", required=True, help="flowtune-sim binary")
    p.add_argument("--racks", type=int, default=2)
    p.add_argument("--hosts-per-rack", type=int, default=4)
    p.add_argument("--spines", type=int, default=2)
    p.add_argument("--host-gbps", type=float, default=10)
    p.add_argument("--workload", default="web")
    p.add_argument("--load", type=float, default=0.5)
    p.add_argument("--duration-ms", type=float, default=2)
    p.add_argument("--drain-ms", type=float, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--turn-us", type=int, default=10,
                   help="the packet model's turn and the fluid model's iteration (µs)")
    p.add_argument("--link-delay-us", type=float, default=0)
    p.add_argument("--buffer-packets", type=int, default=10000)
    p.add_argument("--mss", type=int, default=1448, help="the packet model's TCP segment")
    p.add_argument("--control", choices=["instant", "network"], default="instant")
    p.add_argument("--packet-flag", action="append", default=[],
                   help="one more flowtune-packet argument (repeatable)")
    p.add_argument("--work-dir", help="keep the runs' files here (default: a temporary folder)")
    p.add_argument("--out", help="write the JSON here (default: standard output)")
    p.add_argument("--flows", action="store_true", help="every flowlet's pair in the JSON")
    p.add_argument("--check-min-packets", type=int, default=1,
                   help="checks count flowlets of at least this many packets")
    p.add_argument("--check-median", type=float, help="fail if median |ratio-1| exceeds this")
    p.add_argument("--check-p90", type=float, help="fail if p90 |ratio-1| exceeds this")
    p.add_argument("--check-within", type=float,
                   help="fail if fewer than this fraction of flowlets are within 5%%")
    return p.parse_args(argv)


def commands(a, work):
    core = a.hosts_per_rack * a.host_gbps / a.spines  # full bisection, as flowtune-sim's
    packet = [a.packet, "--schemes", "flowtune", "--racks", str(a.racks), "--hosts-per-rack",
              str(a.hosts_per_rack), "--spines", str(a.spines), "--host-gbps", str(a.host_gbps),
              "--core-gbps", str(core), "--workload", a.workload, "--load", str(a.load),
              "--duration-ms", str(a.duration_ms), "--drain-ms", str(a.drain_ms), "--seed",
              str(a.seed), "--turn-us", str(a.turn_us), "--control", a.control,
              "--link-delay-us", str(a.link_delay_us), "--buffer-packets",
              str(a.buffer_packets), "--mss", str(a.mss), "--flows-out", os.path.join(work, "packet-flows.csv"),
              "--out", os.path.join(work, "packet.json")] + a.packet_flag
    sim = [a.sim, "run", "--racks", str(a.racks), "--hosts-per-rack", str(a.hosts_per_rack),
           "--spines", str(a.spines), "--host-gbps", str(a.host_gbps), "--iteration-us",
           str(a.turn_us), "--warmup-ms", "0", "--duration-ms", str(a.duration_ms + a.drain_ms),
           "--sample-every", "0", "--no-progress", "--flows",
           os.path.join(work, "packet-flows.csv"), "--flows-out",
           os.path.join(work, "sim-flows.csv"), "--out", os.path.join(work, "sim.json")]
    return packet, sim


def read_flows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def quantile(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q * len(v)) - 1))]


def summarize(pairs):
    errors = [abs(p["ratio"] - 1) for p in pairs]
    ratios = [p["ratio"] for p in pairs]
    return {"flows": len(pairs),
            "median_abs_error": quantile(errors, 0.5),
            "p90_abs_error": quantile(errors, 0.9),
            "within_5pct": sum(e <= 0.05 for e in errors) / len(errors) if errors else None,
            "median_ratio": quantile(ratios, 0.5),
            "p10_ratio": quantile(ratios, 0.1),
            "p90_ratio": quantile(ratios, 0.9)}


def pair_flows(packet_rows, sim_rows, hosts_per_rack):
    if len(packet_rows) != len(sim_rows):
        raise SystemExit(f"the models ran {len(packet_rows)} and {len(sim_rows)} flowlets")
    pairs, unfinished = [], 0
    for p, s in zip(packet_rows, sim_rows):
        if (p["src"], p["dst"], p["bytes"], p["ecmp_hash"]) != (
                s["src"], s["dst"], s["bytes"], s["ecmp_hash"]):
            raise SystemExit(f"flow {p['flow']} differs between the two lists")
        start, p_end, s_end = float(p["start_s"]), float(p["end_s"]), float(s["end_s"])
        if p_end < 0 or s_end < 0:
            unfinished += 1
            continue
        bits = int(p["bytes"]) * 8
        packet_bps, fluid_bps = bits / (p_end - start), bits / (s_end - start)
        pairs.append({"flow": int(p["flow"]), "bytes": int(p["bytes"]),
                      "cross_rack": int(p["src"]) // hosts_per_rack != int(p["dst"]) // hosts_per_rack,
                      "packet_fct_us": (p_end - start) * 1e6, "fluid_fct_us": (s_end - start) * 1e6,
                      "packet_gbps": packet_bps / 1e9, "fluid_gbps": fluid_bps / 1e9,
                      "ratio": packet_bps / fluid_bps})
    return pairs, unfinished


def report(a, pairs, unfinished, cmds):
    by_bucket = {}
    for lo, hi, name in BUCKETS:
        inside = [p for p in pairs if lo <= math.ceil(p["bytes"] / a.mss) <= hi]
        by_bucket[name] = summarize(inside)
    checked = [p for p in pairs if math.ceil(p["bytes"] / a.mss) >= a.check_min_packets]
    out = {"definition": "per-flowlet throughput = payload bytes x 8 / FCT (arrival to last "
                         "byte at the receiver) in each model; ratio = packet / fluid",
           "payload_share": a.mss / (a.mss + HEADER_BYTES),
           "commands": {"packet": cmds[0], "sim": cmds[1]},
           "unfinished": unfinished,
           "all": summarize(pairs),
           "by_packets": by_bucket,
           "checked": dict(summarize(checked), min_packets=a.check_min_packets)}
    if a.flows:
        out["flows"] = pairs
    return out


def check(a, out):
    c = out["checked"]
    why = []
    checking = any(x is not None for x in (a.check_median, a.check_p90, a.check_within))
    if c["flows"] == 0 and checking:
        why.append("no flowlet to check")
    elif a.check_median is not None and c["median_abs_error"] > a.check_median:
        why.append(f"median |ratio-1| {c['median_abs_error']:.4f} > {a.check_median}")
    if c["flows"] and a.check_p90 is not None and c["p90_abs_error"] > a.check_p90:
        why.append(f"p90 |ratio-1| {c['p90_abs_error']:.4f} > {a.check_p90}")
    if c["flows"] and a.check_within is not None and c["within_5pct"] < a.check_within:
        why.append(f"within 5%: {c['within_5pct']:.3f} < {a.check_within}")
    if out["unfinished"] and checking:
        why.append(f"{out['unfinished']} flowlets did not finish")
    return why


def run(a, work):
    cmds = commands(a, work)
    for cmd in cmds:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"{os.path.basename(cmd[0])} failed with status {done.returncode}")
    pairs, unfinished = pair_flows(read_flows(os.path.join(work, "packet-flows.csv")),
                                   read_flows(os.path.join(work, "sim-flows.csv")),
                                   a.hosts_per_rack)
    return report(a, pairs, unfinished, cmds)


def main(argv):
    a = parse_args(argv)
    for binary in (a.packet, a.sim):
        if not os.access(binary, os.X_OK):
            print(f"compare_models: skipped: {binary} is not built", file=sys.stderr)
            return 77
    if a.work_dir:
        os.makedirs(a.work_dir, exist_ok=True)
        out = run(a, a.work_dir)
    else:
        with tempfile.TemporaryDirectory() as work:
            out = run(a, work)
    why = check(a, out)
    out["check"] = "failed: " + "; ".join(why) if why else "passed"
    text = json.dumps(out, indent=2) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if why:
        print("compare_models: " + "; ".join(why), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
