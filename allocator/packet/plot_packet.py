#!/usr/bin/env python3
"""Turn a flowtune-packet JSON file into PNG plots beside it.

usage: plot_packet.py RUN.json   (writes RUN-fct.png and RUN-queues.png)
RUN-fct.png: p50 and p99 FCT slowdown per size bucket, one bar per scheme.
RUN-queues.png: p99 queueing delay per hop, one bar per scheme.
Empty buckets get no bar. Exit status 3 when matplotlib is missing (the JSON stays complete).
"""
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.stderr.write("plot_packet.py: matplotlib is not installed (apt-get install python3-matplotlib)\n")
    sys.exit(3)

BUCKETS = ["1", "2-10", "11-100", "101-1000", ">1000"]
HOPS = ["host_up", "tor_up", "spine_down", "tor_down"]


def bars(ax, runs, labels, value, log=True):
    width = 0.8 / max(len(runs), 1)
    for i, run in enumerate(runs):
        xs = [j + i * width for j in range(len(labels))]
        ax.bar(xs, [value(run, label) for label in labels], width, label=run["config"]["scheme"])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(labels))])
    ax.set_xticklabels(labels)
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="small")


def title(run):
    c = run["config"]
    net = (f'{c["racks"]}x{c["hosts_per_rack"]} Clos, {c["spines"]} spines' if c["topology"] == "clos"
           else f'star of {c["star_hosts"]}')
    return f'{net}, {c["traffic"]} {c["workload"]} load {c["load"]}, {c["duration_ms"]} ms'


def main(path):
    runs = json.load(open(path))["runs"]
    stem = os.path.splitext(path)[0]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, q in zip(axes, ["p50", "p99"]):
        bars(ax, runs, BUCKETS, lambda r, b, q=q: (r["fct_slowdown"][b][q] if r["fct_slowdown"][b]["count"]
                                                   else float("nan")))
        ax.set_title(f"{q} FCT slowdown by size (packets)")
        ax.set_ylabel("FCT / ideal FCT")
    fig.suptitle(title(runs[0]))
    fig.tight_layout()
    fig.savefig(stem + "-fct.png", dpi=110)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    # A hop the network lacks (a star has no spines) has no samples: no bar.
    bars(ax, runs, HOPS, lambda r, h: (max(r["hops"][h]["queue_delay_us"]["p99"], 1e-2)
                                       if r["hops"][h]["queue_delay_us"]["count"] else float("nan")))
    ax.set_title("p99 queueing delay per hop, µs\n" + title(runs[0]))
    fig.tight_layout()
    fig.savefig(stem + "-queues.png", dpi=110)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
