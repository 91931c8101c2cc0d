#!/usr/bin/env python3
"""Turns bench/e2e/run's JSON into PNG plots (one per experiment).

  bench/e2e/plot.py [--out DIR] FILE.json...

Each FILE's "experiment" field picks the plot; files that are missing are
skipped with a message. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on the testbed machine
    import matplotlib.pyplot as plt
    import matplotlib.ticker
except ImportError:  # --help still works; main() says what is missing
    matplotlib = None

COLORS = {"flowtune": "tab:blue", "flowtune-api": "tab:cyan", "flowtune-priority": "tab:purple",
          "flowtune-tenants": "tab:blue", "flowtune-deadline": "tab:blue", "flowtune-pf": "tab:cyan",
          "flowtune-sebf": "tab:green", "flowtune-stf": "tab:olive",
          "bbr": "tab:red", "cubic": "tab:orange", "trickle": "tab:gray"}
DPI = 80  # keeps every PNG well under 200 KB


def timelines(res, title, path, extra):
    """One row per scheme: each sender's throughput over time (first run)."""
    det = res["details"]
    if "summary_by_buffer" in res:  # one figure: the headline (first) buffer
        det = det[next(iter(res["summary_by_buffer"]))]
    schemes = list(det)
    fig, axes = plt.subplots(len(schemes), 1, figsize=(8, 1.8 * len(schemes)), sharex=True,
                             squeeze=False)
    bin_ms = res["config"]["bin_ms"]
    for ax, s in zip(axes[:, 0], schemes):
        series = det[s]["runs"][0]["series_mbps"]
        for h, ys in sorted(series.items(), key=lambda kv: int(kv[0])):
            ax.plot([i * bin_ms / 1000 for i in range(len(ys))], ys, lw=0.8, label="h" + h)
        ax.set_ylabel("Mbit/s")
        ax.set_title("%s  (%s)" % (s, extra(res["summary"][s])), fontsize=9, loc="left")
        ax.set_ylim(0, 1000)
    axes[-1, 0].set_xlabel("time (s), %d ms bins" % bin_ms)
    # One legend above the rows, where it hides no line.
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.legend(handles, labels, fontsize=7, ncol=8, loc="upper center", bbox_to_anchor=(0.5, 0.97),
               frameon=False)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def coflow(res, path):
    bufs = list(res["details"])
    fig, axes = plt.subplots(1, len(bufs), figsize=(5 * len(bufs), 3.2), squeeze=False)
    for ax, b in zip(axes[0], bufs):
        for s, d in res["details"][b].items():
            c = sorted(d["cct_s"])
            ax.step(c, [(i + 1) / len(c) for i in range(len(c))], where="post",
                    color=COLORS.get(s), label=s)
        ax.axvline(res["config"]["ideal_cct_s"], color="k", ls=":", lw=0.8, label="ideal")
        ax.set_xscale("log")
        # Plain seconds on the log axis, not powers of ten.
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=2))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("coflow completion time (s)")
        ax.set_ylabel("CDF over runs")
        ax.set_title("%s buffer (%d KB)" % (b, res["config"]["buffers"][b] // 1000), fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("8 senders x 25 transfers x %d KB -> 1 receiver, %s" % (
        res["config"]["bytes"] // 1000, res["config"]["rate"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def coflow_trace(res, path):
    """CDF of coflow completion times per scheme, and mean CCT by bin."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4))
    for s, d in res["details"].items():
        c = sorted(x for run in d["cct_s"] for x in run if x is not None)
        if c:
            a1.step(c, [(i + 1) / len(c) for i in range(len(c))], where="post",
                    color=COLORS.get(s), label="%s (mean %.2f s)" % (s, res["summary"][s]["cct_mean_s"]))
    # The simulator's fluid model of the same slice, for reference.
    for p, d in (res.get("fluid") or {}).items():
        if p in ("pf", "stf") and "cct_s" in d:
            c = sorted(d["cct_s"])
            a1.step(c, [(i + 1) / len(c) for i in range(len(c))], where="post", linestyle="--",
                    color="grey" if p == "pf" else "black",
                    label="fluid %s (mean %.2f s)" % (p, d["cct_mean_s"]))
    a1.set_xscale("log")
    a1.set_xlabel("coflow completion time (s)")
    a1.set_ylabel("CDF over coflows")
    a1.legend(fontsize=7)
    bins = sorted({b for v in res["summary"].values() for b in v["bins"]})
    schemes = list(res["summary"])
    w = 0.8 / max(1, len(schemes))
    for k, s in enumerate(schemes):
        a2.bar([i + k * w for i in range(len(bins))],
               [res["summary"][s]["bins"].get(b, {}).get("cct_mean_s", 0) for b in bins], w,
               color=COLORS.get(s), label=s)
    a2.set_xticks([i + 0.4 - w / 2 for i in range(len(bins))])
    a2.set_xticklabels(bins, fontsize=7)
    a2.set_yscale("log")
    a2.set_ylabel("mean CCT (s)")
    c = res["config"]
    fig.suptitle("Facebook coflow trace on %d hosts at %s, load %.2f (%d coflows)" % (
        c["hosts"], c["rate"], c["load"], c["coflows"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def bars(ax, labels, values, ylabel):
    ax.bar(range(len(labels)), values, color=[COLORS.get(s, "k") for s in labels])
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7, rotation=20)
    ax.set_ylabel(ylabel, fontsize=8)


def interactive(res, path):
    bufs = list(res["summary_by_buffer"])
    fig, axes = plt.subplots(1, len(bufs), figsize=(4 * len(bufs), 3), squeeze=False)
    for ax, b in zip(axes[0], bufs):
        summ = res["summary_by_buffer"][b]
        bars(ax, list(summ), [summ[s]["fct_s"] for s in summ], "2 MB completion time (s)")
        ax.axhline(res["config"]["fair_share_fct_s"], color="k", ls=":", lw=0.8)
        ax.set_title("%s buffer" % b, fontsize=9)
    fig.suptitle("2 MB transfer amid 2 bulk flows, 100 Mbit/s (dotted: fair share)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def spark(res, path):
    """Shuffle-stage time per scheme, one panel per buffer."""
    bufs = list(res["summary_by_buffer"])
    fig, axes = plt.subplots(1, len(bufs), figsize=(4 * len(bufs), 3), squeeze=False)
    for ax, b in zip(axes[0], bufs):
        summ = res["summary_by_buffer"][b]
        bars(ax, list(summ), [summ[s]["shuffle_stage_s"] or 0 for s in summ], "shuffle stage (s)")
        ax.set_title("%s buffer" % b, fontsize=9)
    c = res["config"]
    fig.suptitle("Spark, one shuffle over %d workers, %s links; answers %s" % (
        c["workers"], c["rate"], "identical" if res["answers_identical"] else "DIFFER"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def tenants(res, path):
    """Tenant A's share of the goodput per bin (first run, headline buffer)."""
    b = next(iter(res["summary_by_buffer"]))
    det = res["details"][b]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    bin_s = res["config"]["bin_ms"] / 1000
    for s, runs in det.items():
        a, bb = runs[0]["series_a_mbps"], runs[0]["series_b_mbps"]
        ys = [x / (x + y) if x + y > 0 else float("nan") for x, y in zip(a, bb)]
        ax.plot([res["config"]["skip_s"] + i * bin_s for i in range(len(ys))], ys, lw=0.9,
                color=COLORS.get(s), label="%s (A %s)" % (
                    s, "%.3f" % res["summary"][s]["tenant_share_a"]
                    if res["summary"][s]["tenant_share_a"] is not None else "-"))
    ax.axhspan(0.475, 0.525, color="k", alpha=0.08, lw=0)
    ax.set_ylim(0, 1)
    ax.set_xlabel("time (s), %d ms bins" % res["config"]["bin_ms"])
    ax.set_ylabel("tenant A's share")
    ax.legend(fontsize=7)
    fig.suptitle("tenant A (1 connection) vs B (16), equal weights, %s, %s buffer (band: 5%% of half)"
                 % (res["config"]["rate"], b), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def deadlines(res, path):
    bufs = list(res["summary_by_buffer"])
    fig, axes = plt.subplots(2, len(bufs), figsize=(4 * len(bufs), 5), squeeze=False)
    for k, b in enumerate(bufs):
        summ = res["summary_by_buffer"][b]
        bars(axes[0, k], list(summ), [summ[s]["deadlines_met_fraction"] for s in summ],
             "deadlines met")
        axes[0, k].set_ylim(0, 1)
        axes[0, k].set_title("%s buffer" % b, fontsize=9)
        bars(axes[1, k], list(summ), [summ[s]["bulk_goodput_fraction"] for s in summ],
             "bulk goodput (of the link)")
        axes[1, k].set_ylim(0, 1)
    fig.suptitle("sized transfers with deadlines amid 6 bulk flows, %s" % res["config"]["rate"],
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def queues(res, path):
    summ = res["summary"]
    labels = list(summ)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3))
    bars(axes[0], labels, [summ[s]["queue_p99_bytes"] / 1000 for s in labels], "queue p99 (KB)")
    bars(axes[1], labels, [summ[s]["ping_p99_ms"] for s in labels], "ping RTT p99 (ms)")
    bars(axes[2], labels, [100 * summ[s]["drop_fraction"] for s in labels], "packets dropped (%)")
    fig.suptitle("bottleneck queue during coflow and convergence rounds", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    if matplotlib is None:
        sys.exit("plot.py: matplotlib is missing for %s (Debian: apt-get install "
                 "python3-matplotlib, then run it with /usr/bin/python3)" % sys.executable)
    for f in a.files:
        if not os.path.exists(f):
            print("plot.py: %s is missing, skipped" % f, file=sys.stderr)
            continue
        with open(f) as fh:
            res = json.load(fh)
        name = res.get("experiment")
        path = os.path.join(a.out, name + ".png")
        if name == "fairness":
            timelines(res, "8 senders -> 1, one joins every 50 ms, then they leave in order", path,
                      lambda s: "Jain mean %.3f" % s["jain_mean"])
        elif name == "convergence":
            timelines(res, "flows join every %d ms up to 5, then leave" % res["config"]["period_ms"],
                      path, lambda s: "median convergence %.0f ms" % s["converge_ms_median"])
        elif name == "coflow":
            coflow(res, path)
        elif name == "interactive":
            interactive(res, path)
        elif name == "queues":
            queues(res, path)
        elif name == "tenants":
            tenants(res, path)
        elif name == "deadlines":
            deadlines(res, path)
        elif name == "coflow-trace":
            coflow_trace(res, path)
        elif name == "spark":
            spark(res, path)
        else:
            print("plot.py: %s: unknown experiment %r" % (f, name), file=sys.stderr)
            continue
        print("plot.py: wrote %s" % path, file=sys.stderr)


if __name__ == "__main__":
    main()
