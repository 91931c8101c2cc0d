#!/usr/bin/env python3
"""Markdown tables from daemon_bench JSON: throughput, latency, control bytes,
early rates, flowtune-ctl floods and floods (the sections the file holds).

Usage: python3 bench/daemon_table.py daemon.json [more.json ...]
"""
import json
import sys


def heading(title, columns, align):
    """A table's title, header and alignment rows; align: one character a
    column, 'r' right, 'l' left."""
    print(f"### {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---:" if a == "r" else "---" for a in align) + "|")


def throughput(d):
    if not d.get("throughput"):
        return
    heading(f"Events absorbed ({d['transport']})",
            ["engine threads", "active flows", "events/s", "vs 1M goal", "daemon CPU (cores)",
             "iterations/s", "iteration p50 (us)", "bytes in / event", "bytes out / rate update"],
            "r" * 9)
    for r in d.get("throughput", []):
        print(f"| {r['threads']} | {r['active_flows']:,} | {r['events_per_s'] / 1e6:.2f} M | "
              f"{r['events_per_s'] / 1e6:.2f}x | {r['daemon_cpu_fraction']:.2f} | "
              f"{r['iterations'] / r['seconds']:,.0f} | {r['iteration_p50_us']:.0f} | "
              f"{r['bytes_in_per_event']:.1f} | {r['bytes_out_per_rate_update']:.1f} |")
    print()


def latency(d):
    if not d.get("latency"):
        return
    base = d.get("zmq_echo_baseline")
    if isinstance(base, dict):
        base = [base]
    heading(f"Start-to-rate latency ({d['transport']})",
            ["engine threads", "active flows", "probe gap (ms)", "busy-poll (us)", "p50 (us)",
             "p99 (us)", "p99.9 (us)", "echo p50 (us)", "p50 / echo", "daemon turn p50 (us)",
             "iterations / probe"], "r" * 11)
    for r in d.get("latency", []):
        echo = r.get("echo_p50_us", base[0]["p50_us"] if base else float("nan"))
        print(f"| {r['threads']} | {r['active_flows']:,} | {r['gap_ms']:g} | {r.get('busy_poll_us', 0)} | "
              f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['p999_us']:.0f} | {echo:.0f} | "
              f"{r['p50_us'] / echo:.1f}x | {r.get('daemon_turn_p50_us', float('nan')):.0f} | "
              f"{r.get('iterations_per_probe', float('nan')):.1f} |")
    for b in base or []:
        print(f"\nZeroMQ echo baseline (same run, {b['message_bytes']} B, gap {b.get('gap_ms', 0):g} ms): "
              f"p50 {b['p50_us']:.0f} us, p99 {b['p99_us']:.0f} us, p99.9 {b['p999_us']:.0f} us")
    print()


def early_rates(d):
    rows = d.get("early_rates")
    if not rows:
        return
    heading(f"Early rates: what the daemon adds to ZeroMQ's echo ({d['transport']})",
            ["active flows", "probe gap (ms)", "round", "early rates", "p50 (us)", "p99 (us)",
             "echo p50 / p99 (us)", "added p50 (us)", "added p99 (us)", "iteration p50 (us)",
             "early answer p50 (us)", "corrected / probe"], "rrrlrrlrrrrr")
    for r in rows:
        print(f"| {r['active_flows']:,} | {r['gap_ms']:g} | {r['round']} | {r['early_rates']} | "
              f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['echo_p50_us']:.0f} / {r['echo_p99_us']:.0f} | "
              f"{r['added_p50_us']:.0f} | {r['added_p99_us']:.0f} | {r['daemon_iteration_p50_us']:.0f} | "
              f"{r['daemon_early_answer_p50_us']:.0f} | {r['early_rates_corrected_per_probe']:.3f} |")
    print()


def flood(d):
    rows = d.get("flood")
    if not rows:
        return
    heading(f"A flood from another address: the probe's start-to-rate latency ({d['transport']})",
            ["quotas", "apart", "flood endpoints", "MB reached the daemon", "flows held",
             "iteration p50 (us)", "turn p99 (us)", "tick call p99 (us)",
             "probe p50 idle -> flood (us)", "probe p99 idle -> flood (us)", "p99 / idle",
             "probe refused", "worst legitimate rate move"], "llrrrrrrllrrr")
    # --apart under the kernel's real-time throttle (rt_runtime_us >= 0):
    # the busy daemon is stopped for the rest of each period.
    rt = d.get("rt_runtime_us")
    throttled = ", RT throttle on" if rt is not None and rt >= 0 else ""
    for r in rows:
        apart = f"yes{throttled}" if r.get("apart") else "no"
        print(f"| {'on' if r['quotas'] else 'off'} | {apart} | "
              f"{r['flood_endpoints']} | {r['daemon_bytes_in'] / 1e6:,.0f} | {r['flows_during_flood']:,} | "
              f"{r['iteration_p50_us']:.0f} | {r['turn_p99_us']:.0f} | {r.get('timer_p99_us', float('nan')):.0f} | "
              f"{r['probe_p50_us_idle']:.0f} -> {r['probe_p50_us_flood']:.0f} | "
              f"{r['probe_p99_us_idle']:.0f} -> {r['probe_p99_us_flood']:.0f} | {r['probe_p99_vs_idle']:.2f}x | "
              f"{r['probe_refused_under_flood']} | {r['legit_worst_rate_change']:.3g} |")
    print()


def ctl_flood(d):
    rows = d.get("ctl_flood")
    if not rows:
        return
    heading(f"A flowtune-ctl flood: the probe's start-to-rate latency and the loop's turns ({d['transport']})",
            ["round", "active flows", "tenants", "ctl dumps / s", "replies", "retries", "reply bytes (mean)",
             "probe p50 (us)", "probe p99 (us)", "p99 / idle", "turn p99 (us)", "turn p99 / idle"],
            "r" * 12)
    idle = {}
    for r in rows:
        if r["ctl_requests_per_s"] == 0:
            idle[r.get("round", 0)] = r
    for r in rows:
        base = idle.get(r.get("round", 0))
        p99 = r["p99_us"] / base["p99_us"] if base and base["p99_us"] > 0 else float("nan")
        turn = (r["daemon_turn_p99_us"] / base["daemon_turn_p99_us"]
                if base and base["daemon_turn_p99_us"] > 0 else float("nan"))
        print(f"| {r.get('round', 0)} | {r['active_flows']:,} | {r.get('tenants', 0):,} | "
              f"{r['ctl_requests_per_s']:g} | {r['ctl_replies']:,} | {r['ctl_retries']:,} | "
              f"{r['ctl_reply_bytes_mean']:,.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {p99:.2f}x | "
              f"{r['daemon_turn_p99_us']:.0f} | {turn:.2f}x |")
    print()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for path in sys.argv[1:]:
        with open(path) as f:
            d = json.load(f)
        throughput(d)
        latency(d)
        early_rates(d)
        ctl_flood(d)
        flood(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
