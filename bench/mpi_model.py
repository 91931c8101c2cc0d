#!/usr/bin/env python3
"""The engine across MPI ranks: a cost model fitted to bench/mpi_bench runs,
and its prediction for a large network (docs/scale.md#the-engine-on-mpi).

usage: bench/mpi_model.py NP1.json NP2.json [--machines 32] [--cores 16]
         [--hosts 100000] [--flows 1000000] [--net-gbps 100] [--net-alpha-us 2]
         [--hosts-per-rack 48] [--spines 16] [--efficiency 1.0]
         [--shm-alpha-us A] [--shm-ns-per-kb B]

Fitted here (kLinkOwners rows of the runs given):
  own work of a rank   t = a * flows + b * entries          (least squares)
  its time in MPI      m = c0 + c1 * bytes, ranks > 1       (least squares)
--shm-alpha-us and --shm-ns-per-kb replace the fitted MPI costs (a machine
whose per-call cost in shared memory is known, or a what-if).
Assumed (flags): the machines' network (latency per step, bandwidth), one
rank per core, and how evenly a rank's work runs next to 15 others
(--efficiency). Entries per rank follow from the topology: a FlowBlock
holds F / B^2 flows between H / B source and H / B destination hosts, and
keeps one entry per link its flows touch (host up- and down-links, rack-to-
spine and spine-to-rack links; an occupancy estimate, n (1 - e^(-f/n))).
Prints JSON: the fit, its error on the runs, and the prediction per machine
count, double and float; and ("diagonal") the paper's log-step exchange's
prediction where the ranks are 4^k: the same own work, and per iteration
log2(n) steps each way on an n x n grid (Z order: a machine's cores are a
square of it, so its first log4(cores) steps stay in shared memory), each
step one LinkBlock array of (hosts + racks * spines) / n links, sent at
the fitted shared-memory cost or over the network; two small collectives
(classes, stats) besides.
"""
import argparse
import json
import math
import sys


def lstsq(rows, ys):
    """Least squares for 1 or 2 unknowns, no numpy needed."""
    k = len(rows[0])
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    if k == 1:
        return [aty[0] / ata[0][0]]
    det = ata[0][0] * ata[1][1] - ata[0][1] * ata[1][0]
    return [(aty[0] * ata[1][1] - aty[1] * ata[0][1]) / det,
            (ata[0][0] * aty[1] - ata[1][0] * aty[0]) / det]


def occupancy(links, flows):
    return links * (1 - math.exp(-flows / links)) if links > 0 else 0


def entries_per_block(hosts, flows, blocks_per_side, hosts_per_rack, spines):
    f = flows / blocks_per_side ** 2
    g = hosts / blocks_per_side
    rack_links = hosts / hosts_per_rack * spines / blocks_per_side
    return 2 * occupancy(g, f) + 2 * occupancy(rack_links, f)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", help="mpi_bench JSON outputs (1 rank, 2 ranks, ...)")
    p.add_argument("--machines", type=int, default=32)
    p.add_argument("--cores", type=int, default=16)
    p.add_argument("--hosts", type=int, default=100000)
    p.add_argument("--flows", type=int, default=1000000)
    p.add_argument("--hosts-per-rack", type=int, default=48)
    p.add_argument("--spines", type=int, default=16)
    p.add_argument("--net-gbps", type=float, default=100.0)
    p.add_argument("--net-alpha-us", type=float, default=2.0)
    p.add_argument("--efficiency", type=float, default=1.0,
                   help="a rank's speed next to 15 others, relative to alone")
    p.add_argument("--shm-alpha-us", type=float, default=None,
                   help="an MPI call's fixed cost in shared memory (default: fitted)")
    p.add_argument("--shm-ns-per-kb", type=float, default=None,
                   help="its cost per KB sent in shared memory (default: fitted)")
    a = p.parse_args()

    rows, ys, mrows, mys, points = [], [], [], [], []
    for path in a.runs:
        run = json.load(open(path))
        for r in run["results"]:
            if r["exchange"] != "link-owners":
                continue
            rows.append([r["flows_on_largest_rank"], r["entries_per_iteration_max_rank"]])
            ys.append(r["compute_us_p50"])
            points.append((run["ranks"], r))
            if run["ranks"] > 1:
                mrows.append([1.0, r["bytes_sent_per_iteration_max_rank"]])
                mys.append(r["mpi_us_p50"])
    if not rows or not mrows:
        sys.exit("mpi_model: need link-owners rows from a 1-rank and a 2-rank run")
    per_flow_us, per_entry_us = lstsq(rows, ys)
    shm_alpha_us, shm_us_per_byte = lstsq(mrows, mys)
    fitted_shm = (shm_alpha_us, shm_us_per_byte)
    # Sizes whose entries grow in step with their flows cannot tell the two
    # costs apart (mpi_bench --quick runs few): said, not hidden.
    warnings = []
    for name, v in (("per_flow", per_flow_us), ("per_entry", per_entry_us),
                    ("shm_alpha", shm_alpha_us), ("shm_per_byte", shm_us_per_byte)):
        if v < 0:
            warnings.append(f"{name} fitted negative ({v:.4g} us): run mpi_bench on more sizes")
    fit = []
    for ranks, r in points:
        own = per_flow_us * r["flows_on_largest_rank"] + per_entry_us * r["entries_per_iteration_max_rank"]
        mpi = shm_alpha_us + shm_us_per_byte * r["bytes_sent_per_iteration_max_rank"] if ranks > 1 else 0
        fit.append({"ranks": ranks, "hosts": r["hosts"], "flows": r["flows"],
                    "measured_us": r["iteration_us_p50"], "model_us": own + mpi})

    # The what-if costs replace the fitted ones for the predictions only.
    if a.shm_alpha_us is not None:
        shm_alpha_us = a.shm_alpha_us
    if a.shm_ns_per_kb is not None:
        shm_us_per_byte = a.shm_ns_per_kb / 1e6
    # Prediction: one rank per core; blocks per side enough for one block per rank.
    predictions = []
    m = 1
    while m <= max(a.machines, 1) * 2:
        ranks = m * a.cores
        b = min(64, math.ceil(math.sqrt(ranks)))
        blocks_per_rank = b * b / ranks
        entries = entries_per_block(a.hosts, a.flows, b, a.hosts_per_rack,
                                    a.spines) * blocks_per_rank
        flows = a.flows / ranks
        compute = (per_flow_us * flows + per_entry_us * entries) / a.efficiency
        for real, size in (("double", 8), ("float", 4)):
            entry_bytes = (4 + 2 * size + (4 if size == 8 else 0)) + 2 * size  # out + answer
            # Off-machine share of a machine's entries, both ways at once (full duplex).
            net_bytes = a.cores * entries * entry_bytes * (m - 1) / m
            net_us = net_bytes / (a.net_gbps * 1e9 / 8) * 1e6
            shm_bytes = entries * entry_bytes * (a.cores - 1) / ranks
            # The 2-rank intercept is one step of the iteration's 4 collectives
            # in shared memory; a machine's cores take log2(cores) such steps,
            # the machines log2(machines) network steps per collective.
            steps = (shm_alpha_us * math.ceil(math.log2(a.cores)) +
                     4 * math.ceil(math.log2(m)) * a.net_alpha_us) if ranks > 1 else 0
            comm = steps + net_us + shm_bytes * shm_us_per_byte
            predictions.append({"machines": m, "ranks": ranks, "real": real,
                                "blocks": b * b, "flows_per_rank": flows,
                                "entries_per_rank": entries, "compute_us": compute,
                                "latency_us": steps, "network_us": net_us,
                                "iteration_us": compute + comm})
        m *= 2

    # The diagonal exchange: only where cores * machines is a power of 4.
    diagonal = []
    racks = math.ceil(a.hosts / a.hosts_per_rack)
    up_links = a.hosts + racks * a.spines
    m = 1
    while m <= max(a.machines, 1) * 4:
        ranks = m * a.cores
        n = math.isqrt(ranks)
        if n * n != ranks or n & (n - 1):
            m *= 2
            continue
        b = min(64, n)
        entries = entries_per_block(a.hosts, a.flows, b, a.hosts_per_rack, a.spines) * b * b / ranks
        flows = a.flows / ranks
        compute = (per_flow_us * flows + per_entry_us * entries) / a.efficiency
        steps = int(math.log2(n))
        on_machine = min(steps, int(math.log2(math.isqrt(a.cores)))) if a.cores > 1 else 0
        for real, size in (("double", 8), ("float", 4)):
            array = math.ceil(up_links / n) * 2 * size
            shm_step = shm_alpha_us + shm_us_per_byte * array
            net_step = a.net_alpha_us + array / (a.net_gbps * 1e9 / 8) * 1e6
            small = (shm_alpha_us * math.ceil(math.log2(a.cores)) +
                     math.ceil(math.log2(m)) * a.net_alpha_us) if ranks > 1 else 0
            comm = 2 * (on_machine * shm_step + (steps - on_machine) * net_step) + 2 * small
            diagonal.append({"machines": m, "ranks": ranks, "grid": n, "real": real, "blocks": b * b,
                             "flows_per_rank": flows, "compute_us": compute, "steps_each_way": steps,
                             "network_steps_each_way": steps - on_machine, "array_bytes": array,
                             "exchange_us": comm, "iteration_us": compute + comm})
        m *= 2
    out = {"fit": {"per_flow_ns": per_flow_us * 1e3, "per_entry_ns": per_entry_us * 1e3,
                   "shm_alpha_us": fitted_shm[0], "shm_ns_per_kb": fitted_shm[1] * 1e6,
                   "on_runs": fit},
           "assumed": {**{k: getattr(a, k) for k in ("hosts", "flows", "hosts_per_rack", "spines", "cores",
                                                     "net_gbps", "net_alpha_us", "efficiency")},
                       "shm_alpha_us": shm_alpha_us, "shm_ns_per_kb": shm_us_per_byte * 1e6},
           "predictions": predictions, "diagonal": diagonal, "warnings": warnings}
    for w in warnings:
        print("mpi_model: " + w, file=sys.stderr)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
