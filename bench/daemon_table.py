#!/usr/bin/env python3
"""Markdown tables from daemon_bench JSON: throughput, latency, control bytes.

Usage: python3 bench/daemon_table.py daemon.json [more.json ...]
"""
import json
import sys


def throughput(d):
    print(f"### Events absorbed ({d['transport']})\n")
    print("| engine threads | active flows | events/s | vs 1M goal | daemon CPU (cores) | iterations/s | iteration p50 (us) | bytes in / event | bytes out / rate update |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in d.get("throughput", []):
        print(f"| {r['threads']} | {r['active_flows']:,} | {r['events_per_s'] / 1e6:.2f} M | "
              f"{r['events_per_s'] / 1e6:.2f}x | {r['daemon_cpu_fraction']:.2f} | "
              f"{r['iterations'] / r['seconds']:,.0f} | {r['iteration_p50_us']:.0f} | "
              f"{r['bytes_in_per_event']:.1f} | {r['bytes_out_per_rate_update']:.1f} |")
    print()


def latency(d):
    base = d.get("zmq_echo_baseline")
    if isinstance(base, dict):
        base = [base]
    print(f"### Start-to-rate latency ({d['transport']})\n")
    print("| engine threads | active flows | probe gap (ms) | busy-poll (us) | p50 (us) | p99 (us) | p99.9 (us) | echo p50 (us) | p50 / echo | daemon turn p50 (us) | iterations / probe |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
    print(f"### Early rates: what the daemon adds to ZeroMQ's echo ({d['transport']})\n")
    print("| active flows | probe gap (ms) | round | early rates | p50 (us) | p99 (us) | echo p50 / p99 (us) | added p50 (us) | added p99 (us) | iteration p50 (us) | early answer p50 (us) | corrected / probe |")
    print("|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['active_flows']:,} | {r['gap_ms']:g} | {r['round']} | {r['early_rates']} | "
              f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['echo_p50_us']:.0f} / {r['echo_p99_us']:.0f} | "
              f"{r['added_p50_us']:.0f} | {r['added_p99_us']:.0f} | {r['daemon_iteration_p50_us']:.0f} | "
              f"{r['daemon_early_answer_p50_us']:.0f} | {r['early_rates_corrected_per_probe']:.3f} |")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
