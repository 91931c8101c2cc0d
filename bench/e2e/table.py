#!/usr/bin/env python3
"""Markdown tables of bench/e2e/run's results: each headline figure per
scheme, absolute, with the Flowtune / scheme ratio beside it.

  bench/e2e/table.py DIR     (reads DIR/{fairness,coflow,...}.json that exist)
"""
import json
import os
import sys

EXPERIMENTS = [
    ("fairness", None, [("jain_mean", "Jain (mean per 10 ms bin)", "%.3f"),
                        ("tput_std_mbps_mean", "per-sender std (Mbit/s)", "%.1f"),
                        ("goodput_gbps", "goodput (Gbit/s)", "%.3f")]),
    ("coflow", "summary_by_buffer", [("cct_p50_s", "CCT p50 (s)", "%.3f"),
                                     ("cct_p90_s", "p90 (s)", "%.3f"),
                                     ("cct_p95_s", "p95 (s)", "%.3f"),
                                     ("cct_p99_s", "p99 (s)", "%.3f"),
                                     ("queue_p99_ms", "queue p99 (ms)", "%.2f"),
                                     ("ping_p99_ms", "ping p99 (ms)", "%.2f"),
                                     ("drop_fraction", "dropped", "%.4f"),
                                     ("rate_latency_p50_us", "rate latency p50 (µs)", "%d"),
                                     ("rate_latency_p99_us", "p99 (µs)", "%d"),
                                     ("incomplete_runs", "runs timed out", "%d")]),
    ("convergence", "summary_by_buffer", [("converge_ms_median", "median (ms)", "%.0f"),
                           ("converge_ms_p90", "p90 (ms)", "%.0f"),
                           ("never_converged", "events never converged", "%d")]),
    ("interactive", "summary_by_buffer", [("fct_s", "2 MB FCT median (s)", "%.3f"),
                                          ("fct_max_s", "max (s)", "%.3f"),
                                          ("bulk_goodput_fraction", "bulk goodput after", "%.2f"),
                                          ("bulk_recovery_ms", "bulk back to 90% (ms)", "%.0f")]),
    ("tenants", "summary_by_buffer", [("tenant_share_a", "A's share (1 conn.)", "%.3f"),
                                      ("tenant_share_b", "B's share (16)", "%.3f"),
                                      ("bins_within_band", "10 ms bins within 5% of half", "%.2f"),
                                      ("goodput_fraction", "goodput (of the port)", "%.2f"),
                                      ("queue_p99_ms", "queue p99 (ms)", "%.2f"),
                                      ("drop_fraction", "dropped", "%.4f")]),
    ("deadlines", "summary_by_buffer", [("deadlines_met_fraction", "deadlines met", "%.3f"),
                                        ("fct_over_deadline_p50", "FCT / deadline p50", "%.2f"),
                                        ("fct_over_deadline_p90", "p90", "%.2f"),
                                        ("bulk_goodput_fraction", "bulk goodput", "%.2f")]),
    ("coflow-trace", None, [("cct_mean_s", "CCT mean (s)", "%.3f"),
                            ("cct_p95_s", "p95 (s)", "%.3f"),
                            ("cpu_s_per_gb", "host CPU-s per GB", "%.2f"),
                            ("rate_updates_per_flowlet", "rate updates / flowlet", "%.1f"),
                            ("shaper_changes_per_flowlet", "shaper changes / flowlet", "%.1f"),
                            ("failed_blocks", "failed blocks", "%d")]),
    ("queues", None, [("drop_fraction", "dropped", "%.4f"),
                      ("queue_p50_bytes", "queue p50 (B)", "%d"),
                      ("queue_p99_bytes", "queue p99 (B)", "%d"),
                      ("ping_p50_ms", "ping p50 (ms)", "%.3f"),
                      ("ping_p99_ms", "ping p99 (ms)", "%.3f")]),
]


# Counts, not figures of merit: no ratio.
NO_RATIO = {"incomplete_runs", "never_converged", "rate_latency_p50_us", "rate_latency_p99_us",
            "bulk_goodput_fraction", "bulk_recovery_ms", "rate_updates_per_flowlet",
            "shaper_changes_per_flowlet", "failed_blocks"}


def components(summary):
    """Host CPU-seconds by component, a row per scheme (coflow-trace)."""
    names = []
    for v in summary.values():
        names += [k for k in v.get("cpu_s_by_component", {}) if k not in names]
    if not names:
        return ""
    out = ["| scheme | " + " | ".join(n.replace("_", " ") for n in names) + " |",
           "|---|" + "---:|" * len(names)]
    for s, v in summary.items():
        c = v.get("cpu_s_by_component", {})
        out.append("| %s | %s |" % (s, " | ".join("%.2f" % c[n] if n in c else "-" for n in names)))
    return "\n".join(out)


def cell(key, v, fmt, ft):
    if v is None:
        return "-"
    if ft is None or not v or key in NO_RATIO:
        return fmt % v
    r = ft / v
    return "%s (%s×)" % (fmt % v, ("%.2f" % r) if r >= 0.1 else ("%.2g" % r))


def table(summary, cols):
    out = ["| scheme | " + " | ".join(c[1] for c in cols) + " |",
           "|---|" + "---:|" * len(cols)]
    ft = summary.get("flowtune", {})
    for s, v in summary.items():
        row = [cell(k, v.get(k), fmt, None if s == "flowtune" else ft.get(k)) for k, _, fmt in cols]
        out.append("| %s | %s |" % (s, " | ".join(row)))
    return "\n".join(out)


# The headline table: (experiment, where in the JSON, label, figures, format,
# scale). Several figures in one row share a cell: "a / b (ra / rb×)".
HEADLINE = [
    ("fairness", ("summary",), "Jain mean (higher is better)", ["jain_mean"], "%.3f", 1),
    ("coflow", ("summary_by_buffer", "shallow"), "coflow, shallow: CCT p50 / p90 / p95 (s)",
     ["cct_p50_s", "cct_p90_s", "cct_p95_s"], "%.2f", 1),
    ("coflow", ("summary_by_buffer", "deep"), "coflow, deep: CCT p50 / p90 / p95 (s)",
     ["cct_p50_s", "cct_p90_s", "cct_p95_s"], "%.2f", 1),
    ("convergence", ("summary_by_buffer", "shallow"), "convergence, shallow: median (ms)",
     ["converge_ms_median"], "%.0f", 1),
    ("convergence", ("summary_by_buffer", "deep"), "convergence, deep: median (ms)",
     ["converge_ms_median"], "%.0f", 1),
    ("interactive", ("summary_by_buffer", "shallow"), "interactive, shallow: 2 MB FCT (s)",
     ["fct_s"], "%.3f", 1),
    ("interactive", ("summary_by_buffer", "deep"), "interactive, deep: 2 MB FCT (s)",
     ["fct_s"], "%.3f", 1),
    ("queues", ("summary",), "queues, pooled: dropped (%) / queue p99 (KB) / ping p99 (ms)",
     ["drop_fraction", "queue_p99_bytes", "ping_p99_ms"], "%.3g", (100, 1e-3, 1)),
    ("queues", ("by_experiment", "convergence"), "convergence rounds, shallow: queue p50 / p99 (KB)",
     ["queue_p50_bytes", "queue_p99_bytes"], "%.3g", 1e-3),
    ("queues", ("by_experiment", "convergence"), "convergence rounds, shallow: ping p50 / p99 (ms)",
     ["ping_p50_ms", "ping_p99_ms"], "%.3g", 1),
    ("queues", ("by_experiment", "convergence, deep buffer"),
     "convergence rounds, deep: queue p50 / p99 (KB)", ["queue_p50_bytes", "queue_p99_bytes"],
     "%.3g", 1e-3),
    ("queues", ("by_experiment", "convergence, deep buffer"),
     "convergence rounds, deep: ping p50 / p99 (ms)", ["ping_p50_ms", "ping_p99_ms"], "%.3g", 1),
]
SCHEMES = ["flowtune", "bbr", "cubic", "trickle", "flowtune-api"]


def headline(d):
    rows = []
    for exp, where, label, keys, fmt, scale in HEADLINE:
        path = os.path.join(d, exp + ".json")
        if not os.path.exists(path):
            continue
        node = json.load(open(path))
        for w in where:
            node = node.get(w, {}) if isinstance(node, dict) else {}
        if not node:
            continue
        scales = scale if isinstance(scale, tuple) else (scale,) * len(keys)
        ft = node.get("flowtune", {})
        cells = []
        for s in SCHEMES:
            v = node.get(s)
            if v is None:
                cells.append("")
                continue
            vals = [v.get(k) for k in keys]
            text = " / ".join("-" if x is None else fmt % (x * m) for x, m in zip(vals, scales))
            if s != "flowtune" and ft:
                rs = [(ft.get(k) / x) if (x and ft.get(k) is not None) else None
                      for k, x in zip(keys, vals)]
                text += " (%s×)" % " / ".join(
                    "-" if r is None else ("%.2f" % r if r >= 0.1 else "%.2g" % r) for r in rs)
            cells.append(text)
        rows.append("| %s | %s |" % (label, " | ".join(cells)))
    if not rows:
        return ""
    return "\n".join(["| figure | " + " | ".join(SCHEMES) + " |",
                      "|---|" + "---:|" * len(SCHEMES)] + rows)


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) == 2 else 2
    d = sys.argv[1]
    print("Cells: absolute value (Flowtune / scheme). For Jain's index higher is "
          "better; for every other figure lower is better.\n")
    h = headline(d)
    if h:
        print("### headline\n\n" + h + "\n")
    for name, by, cols in EXPERIMENTS:
        path = os.path.join(d, name + ".json")
        if not os.path.exists(path):
            continue
        res = json.load(open(path))
        m = res.get("machine", {})
        print("### %s\n" % name)
        print("commit %s%s, %s, %d vCPUs, kernel %s, %s%s\n" % (
            m.get("commit"), " (dirty)" if m.get("dirty") else "", m.get("cpu"), m.get("cpus", 0),
            m.get("kernel"), m.get("date_utc"), ", --quick" if res.get("quick") else ""))
        if name == "queues":
            print("pooled over both:\n")
            print(table(res["summary"], cols) + "\n")
            by = "by_experiment"
        if by and by not in res:  # JSON from before this table had buffers
            by = None
            print(table(res["summary"], cols) + "\n")
        if by:
            for b, summ in res[by].items():
                print("%s:\n" % (b if by == "by_experiment" else b + " buffer"))
                print(table(summ, cols) + "\n")
        elif name != "queues":
            print(table(res["summary"], cols) + "\n")
        if name == "coflow-trace" and components(res["summary"]):
            print("host CPU-seconds by component, all rounds:\n")
            print(components(res["summary"]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
