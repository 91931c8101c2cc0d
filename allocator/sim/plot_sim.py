#!/usr/bin/env python3
"""Turn a `flowtune-sim figure` JSON file into PNG plots beside it.

usage: plot_sim.py DIR/NAME.json   (writes DIR/NAME.png, or NAME-*.png)
Exit status 3 when matplotlib is missing (the JSON stays complete).
"""
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.stderr.write("plot_sim.py: matplotlib is not installed (apt-get install python3-matplotlib)\n")
    sys.exit(3)


def series(points, key, x, y):
    groups = {}
    for p in points:
        groups.setdefault(p[key], []).append((p[x], p[y]))
    return {k: sorted(v) for k, v in groups.items()}


def lines(ax, groups, scale=1.0, style="-o"):
    for name, pts in sorted(groups.items()):
        ax.plot([p[0] for p in pts], [p[1] * scale for p in pts], style, label=str(name))


def finish(fig, ax, title, xlabel, ylabel, path):
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    if path is None:  # one panel of several: the caller saves the figure
        return
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def overallocation(d, base):
    fig, ax = plt.subplots(figsize=(6, 4))
    lines(ax, series(d["points"], "algorithm", "load", "overallocation_gbps_mean"))
    lines(ax, {k + " p99": v for k, v in series(d["points"], "algorithm", "load",
                                                  "overallocation_gbps_p99").items()}, style="--x")
    finish(fig, ax, "Over-allocation without normalization (Fig. 16)", "load",
           "Σ over-capacity allocation (Gbit/s)", base + ".png")


def normalizers(d, base):
    fig, ax = plt.subplots(figsize=(6, 4))
    lines(ax, series(d["points"], "scheme", "load", "fraction_of_optimal"), scale=100)
    ax.axhline(100, color="gray", lw=0.8)
    finish(fig, ax, "Throughput vs optimal (Fig. 17)", "load", "% of optimal throughput",
           base + ".png")
    if d.get("interval_sweep"):
        fig, ax = plt.subplots(figsize=(6, 4))
        lines(ax, series(d["interval_sweep"], "scheme", "iteration_us", "fraction_of_optimal"),
              scale=100)
        sus = [p for p in d["interval_sweep"] if p.get("sustained")]
        if sus:  # the interval each engine sustains on the machine that ran it
            ax.plot([p["iteration_us"] for p in sus], [p["fraction_of_optimal"] * 100 for p in sus],
                    "k*", ms=12, label="at the interval the engine sustains here")
        ax.set_xscale("log")
        ax.axhline(100, color="gray", lw=0.8)
        finish(fig, ax, "Throughput vs optimal at load 0.8, by iteration interval",
               "allocator iteration interval (µs)", "% of optimal throughput",
               base + "-interval.png")


def fairness(d, base):
    fig, ax = plt.subplots(figsize=(6, 4))
    lines(ax, series(d["points"], "scheme", "load", "points_per_flow"))
    ax.axhline(0, color="gray", lw=0.8)
    finish(fig, ax, "Proportional fairness vs optimal (§5.3.3 K)", "load",
           "mean log2(rate / optimal) per flow", base + ".png")


def update_traffic(d, base):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "fraction_from_allocator", "from the allocator"),
                           (axes[1], "fraction_to_allocator", "to the allocator")):
        lines(ax, series(d["points"], "workload", "load", key), scale=100)
        finish_ax = ax
        finish_ax.set_title("Update traffic " + title + " (Fig. 9)")
        finish_ax.set_xlabel("load")
        finish_ax.set_ylabel("% of network capacity")
        finish_ax.grid(alpha=0.3)
        finish_ax.legend()
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=100)
    plt.close(fig)


def threshold(d, base):
    fig, ax = plt.subplots(figsize=(6, 4))
    lines(ax, series(d["points"], "workload", "threshold", "reduction_vs_0_01"), scale=100)
    finish(fig, ax, "Update traffic saved vs threshold 0.01 (Fig. 10)", "threshold",
           "% reduction", base + ".png")


def network_size(d, base):
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = sorted((p["hosts"], p) for p in d["points"])
    for key, label in (("fraction_of_capacity", "total"), ("fraction_from_allocator", "from"),
                       ("fraction_to_allocator", "to")):
        ax.plot([h for h, _ in pts], [p[key] * 100 for _, p in pts], "-o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    finish(fig, ax, "Update traffic vs network size (Fig. 11)", "hosts",
           "% of network capacity", base + ".png")


def convergence(d, base):
    five = d["five_flows"]
    fig, axes = plt.subplots(1, len(five), figsize=(6 * len(five), 4), squeeze=False)
    for ax, (algo, data) in zip(axes[0], sorted(five.items())):
        width = max((len(s["gbps"]) for s in data["series"]), default=0)
        for f in range(width):
            ts = [s["t_ms"] for s in data["series"]]
            ys = [s["gbps"][f] if f < len(s["gbps"]) else None for s in data["series"]]
            ax.plot(ts, ys, lw=1, label=f"flow slot {f}")
        ax.set_title(f"{algo} + F-NORM: five flows joining and leaving (Fig. 8)")
        ax.set_xlabel("time (ms)")
        ax.set_ylabel("rate (Gbit/s)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(base + "-five-flows.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, r in sorted(d["random"].items()):
        for key, style in (("per_event_to_1pct", "-"), ("per_event_to_10pct", "--")):
            v = sorted(r[key])
            if v:
                ax.step([x * d["iteration_us"] for x in v],
                        [(i + 1) / len(v) for i in range(len(v))], style,
                        label=f"{algo}, {'1%' if '1pct' in key else '10%'}")
    ax.set_xscale("log")
    finish(fig, ax, "Time to reach the new optimum after one event", "simulated µs",
           "fraction of events", base + ".png")


def policies(d, base):
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, q in zip(axes, ("p50", "p99")):
        for who, label in (("tagged_short_fct_us", "tagged 10%"), ("other_short_fct_us", "other 90%")):
            for mode, style in (("class0", "-o"), ("one_class", "--x")):
                pts = sorted((p["load"], p[who][q]) for p in d["points"] if p["mode"] == mode)
                ax.plot([x for x, _ in pts], [y for _, y in pts], style,
                        label="%s (%s)" % (label, "tagged in class 0" if mode == "class0" else "all in one class"))
        ax.set_yscale("log")
        finish(fig, ax, "short flowlets' FCT %s (web)" % q, "load", "FCT (µs)", None)
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=100)
    plt.close(fig)


def coflow_trace(d, base):
    # Left: mean CCT per policy at each load; right: by Varys's bins at the
    # native load (time scale 1).
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    policies = [p for p in ["pf", "stf", "sebf", "bssi", "offline"]
                if any(q["policy"] == p for q in d["points"])]
    loads = sorted({p["summary"]["offered_load"] for p in d["points"]})
    width = 0.8 / len(policies)
    for k, pol in enumerate(policies):
        ys = [next((p["summary"]["cct_mean_s"] for p in d["points"]
                    if p["policy"] == pol and p["summary"]["offered_load"] == l), 0) for l in loads]
        axes[0].bar([i + k * width for i in range(len(loads))], ys, width, label=pol)
    axes[0].set_xticks([i + 0.4 - width / 2 for i in range(len(loads))])
    axes[0].set_xticklabels(["%.2f" % l for l in loads])
    axes[0].set_yscale("log")
    finish(fig, axes[0], "mean coflow completion time", "offered load", "CCT (s)", None)
    bins = ["short_narrow", "long_narrow", "short_wide", "long_wide"]
    native = [p for p in d["points"] if p["time_scale"] == 1.0]
    for k, pol in enumerate(policies):
        ys = [next((p["summary"]["bins"][b]["cct_mean_s"] for p in native if p["policy"] == pol), 0)
              for b in bins]
        axes[1].bar([i + k * width for i in range(len(bins))], ys, width, label=pol)
    axes[1].set_xticks([i + 0.4 - width / 2 for i in range(len(bins))])
    axes[1].set_xticklabels([b.replace("_", "\n") for b in bins])
    axes[1].set_yscale("log")
    finish(fig, axes[1], "mean CCT by coflow bin (native load)", "", "CCT (s)", None)
    fig.tight_layout()
    fig.savefig(base + ".png", dpi=100)
    plt.close(fig)


PLOTS = {
    "overallocation": overallocation,
    "normalizers": normalizers,
    "fairness": fairness,
    "update-traffic": update_traffic,
    "threshold": threshold,
    "network-size": network_size,
    "convergence": convergence,
    "policies": policies,
    "coflow-trace": coflow_trace,
}


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    path = sys.argv[1]
    with open(path) as f:
        d = json.load(f)
    name = d.get("figure")
    if name not in PLOTS:
        sys.stderr.write(f"plot_sim.py: {path}: unknown figure {name!r}\n")
        return 2
    PLOTS[name](d, os.path.splitext(path)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
