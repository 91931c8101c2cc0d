#!/usr/bin/env python3
"""Turns engine_bench JSON (Google Benchmark --benchmark_format=json) into the
markdown tables kept in docs/results/ (engine-iteration.md, engine-threads.md):
time per NED + F-NORM iteration, ns and
core-cycles per flow, and the speed-up over the naive baseline. Prefers the
interleaved A/B benchmark (BM_EngineVsNaive) when the run has it, else pairs
the sequential BM_Naive and BM_Ned_Iteration rows; and the multi-core
driver against the serial engine (BM_ThreadsVsSerial) when the run has it.
Uses the median aggregate when the run had repetitions."""
import json
import re
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = {}
    has_median = any(b.get("aggregate_name") == "median" for b in data["benchmarks"])
    for b in data["benchmarks"]:
        if has_median and b.get("aggregate_name") != "median":
            continue
        m = re.match(r"(BM_\w+(?:/[\w-]+)?)/hosts:(\d+)/flows:(\d+)/threads:(\d+)", b["name"])
        if not m:
            continue
        kind, hosts, flows, threads = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
        rows[(kind, hosts, flows, threads)] = {
            "us": b["real_time"] * scale,
            "ns_per_flow": b.get("ns_per_flow"),
            "cycles": b.get("core_cycles_per_flow"),
            "naive_us": b.get("naive_us"),
            "speedup": b.get("speedup_vs_naive"),
            "serial_us": b.get("serial_us"),
            "speedup_serial": b.get("speedup_vs_serial"),
            "solo_share": b.get("solo_share"),
            "engine_us": b.get("engine_us"),
            "engine_cycles": b.get("engine_core_cycles_per_flow"),
            "speedup_engine": b.get("speedup_vs_engine"),
            "sorts_per_step": b.get("sorts_per_step"),
            "raw": b,
        }
    return data.get("context", {}), rows


def ab_table(ctx, rows):
    """The interleaved A/B benchmark: engine and naive timed in alternating
    blocks, so the speed-up is taken under the same machine state."""
    ab = {k: r for k, r in rows.items() if k[0].startswith("BM_EngineVsNaive/")}
    if not ab:
        return False
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz (TSC); "
          f"{ctx.get('date', '')}\n")
    print("| hosts | flows | precision | threads | engine µs / iteration | naive µs (same run) "
          "| speed-up | ns / flow | core-cycles / flow |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for (k, h, f, t) in sorted(ab, key=lambda k: (k[1], k[2], k[0], k[3])):
        r = ab[(k, h, f, t)]
        tlabel = "serial" if t == 0 else f"{t} threads"
        print(f"| {h} | {f} | {k.split('/')[1]} | {tlabel} | {r['us']:.1f} | {r['naive_us']:.1f} | "
              f"{r['speedup']:.2f}× | {r['ns_per_flow']:.2f} | {r['cycles']:.1f} |")
    return True


def threads_table(rows):
    """The multi-core driver against the serial engine, interleaved in the
    same run (BM_ThreadsVsSerial/<schedule>): speed-up > 1 means the threads
    paid off."""
    tv = {k: r for k, r in rows.items() if k[0].startswith("BM_ThreadsVsSerial/")}
    if not tv:
        return False
    print("\n| hosts | flows | schedule | threads | driver µs / iteration | serial µs (same run) "
          "| speed-up vs serial | iterations run solo |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for (k, h, f, t) in sorted(tv, key=lambda k: (k[1], k[2], k[0], k[3])):
        r = tv[(k, h, f, t)]
        print(f"| {h} | {f} | {k.split('/')[1]} | {t} | {r['us']:.1f} | {r['serial_us']:.1f} | "
              f"{r['speedup_serial']:.2f}× | {100 * r['solo_share']:.0f}% |")
    return True


def clos_table(rows):
    """The Clos layout against the general engine and the naive baseline,
    interleaved in the same run (BM_ClosVsEngine/<real>), and both under
    churn (BM_ChurnStep/<engine>): the tables in docs/results/engine-clos.md."""
    cv = {k: r for k, r in rows.items() if k[0].startswith("BM_ClosVsEngine/")}
    if cv:
        print("\n| hosts | flows | real | naive µs | engine µs | Clos µs | engine cycles / flow "
              "| Clos cycles / flow | Clos vs engine | Clos vs naive |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for (k, h, f, t) in sorted(cv, key=lambda k: (k[0], k[1], k[2])):
            r = cv[(k, h, f, t)]
            print(f"| {h:,} | {f:,} | {k.split('/')[1]} | {r['naive_us']:.1f} | {r['engine_us']:.1f} | "
                  f"{r['us']:.1f} | {r['engine_cycles']:.1f} | {r['cycles']:.1f} | "
                  f"{r['speedup_engine']:.2f}× | {r['speedup']:.2f}× |")
    churn = {(h, f): {} for (k, h, f, t) in rows if k.startswith("BM_ChurnStep/")}
    for (k, h, f, t), r in rows.items():
        if k.startswith("BM_ChurnStep/"):
            churn[(h, f)][k.split("/")[1]] = r
    if churn:
        print("\n| hosts | flows | engine µs / step | Clos µs / step | Clos vs engine | Clos sorts / step |")
        print("|---:|---:|---:|---:|---:|---:|")
        for (h, f) in sorted(churn):
            e, c = churn[(h, f)].get("engine"), churn[(h, f)].get("clos")
            if e and c:
                print(f"| {h:,} | {f:,} | {e['us']:.1f} | {c['us']:.1f} | {e['us'] / c['us']:.2f}× | "
                      f"{c['sorts_per_step']:.3f} |")
    return bool(cv or churn)


def floor_table(rows):
    """F-NORM folded into the next pass against its own (BM_ClosFoldVsSeparate/
    <real>), and the per-flow floor under any Clos layout beside the Clos
    engine's iteration (BM_ClosFloor): the tables in docs/results/engine-clos.md."""
    fold = {k: r for k, r in rows.items() if k[0].startswith("BM_ClosFoldVsSeparate/")}
    if fold:
        print("\n| hosts | flows | real | separate F-NORM cycles / flow | folded cycles / flow | folded vs separate |")
        print("|---:|---:|---|---:|---:|---:|")
        for (k, h, f, t) in sorted(fold, key=lambda k: (k[0], k[1], k[2])):
            r = fold[(k, h, f, t)]["raw"]
            print(f"| {h:,} | {f:,} | {k.split('/')[1]} | {r['separate_cycles_per_flow']:.1f} | "
                  f"{r['core_cycles_per_flow']:.1f} | {r['speedup_vs_separate']:.2f}× |")
    floor = {k: r for k, r in rows.items() if k[0] == "BM_ClosFloor" and "stream_cycles_per_flow" in r["raw"]}
    if floor:
        print("\n| hosts | flows | streams | + gather | gather + add | gather + add + folded F-NORM "
              "| pull (gather by permutation, run sums) | pull layout (gather + F-NORM + pull) "
              "| Clos engine iteration |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for (k, h, f, t) in sorted(floor):
            r = floor[(k, h, f, t)]["raw"]
            fnorm = r["fused_cycles_per_flow"] - r["gather_add_cycles_per_flow"]
            pull_layout = r["gather_cycles_per_flow"] + fnorm + r["pull_cycles_per_flow"]
            print(f"| {h:,} | {f:,} | {r['stream_cycles_per_flow']:.2f} | {r['gather_cycles_per_flow']:.2f} | "
                  f"{r['gather_add_cycles_per_flow']:.2f} | {r['fused_cycles_per_flow']:.2f} | "
                  f"{r['pull_cycles_per_flow']:.2f} | {pull_layout:.2f} | "
                  f"{r['clos_iteration_cycles_per_flow']:.2f} |")
    return bool(fold or floor)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: engine_table.py RESULTS.json")
    ctx, rows = load(sys.argv[1])
    printed = ab_table(ctx, rows)
    printed = threads_table(rows) or printed
    printed = clos_table(rows) or printed
    printed = floor_table(rows) or printed
    if printed:
        return
    naive = {(h, f): r["us"] for (k, h, f, t), r in rows.items() if k == "BM_Naive"}
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz (TSC); "
          f"{ctx.get('date', '')}\n")
    print("| hosts | flows | variant | threads | µs / iteration | ns / flow | core-cycles / flow "
          "| speed-up vs naive |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for (h, f) in sorted(naive):
        print(f"| {h} | {f} | naive (serial) | 1 | {naive[(h, f)]:.1f} | "
              f"{rows[('BM_Naive', h, f, 0)]['ns_per_flow']:.2f} | "
              f"{rows[('BM_Naive', h, f, 0)]['cycles']:.1f} | 1.00 |")
        variants = defaultdict(list)
        for (k, hh, ff, t), r in rows.items():
            if hh == h and ff == f and k != "BM_Naive":
                variants[k].append((t, r))
        for k in sorted(variants):
            for t, r in sorted(variants[k]):
                label = k.replace("BM_Ned_Iteration/", "engine ")
                tlabel = "serial" if t == 0 else f"{t} threads"
                print(f"| {h} | {f} | {label} | {tlabel} | {r['us']:.1f} | {r['ns_per_flow']:.2f} | "
                      f"{r['cycles']:.1f} | {naive[(h, f)] / r['us']:.2f} |")


if __name__ == "__main__":
    main()
