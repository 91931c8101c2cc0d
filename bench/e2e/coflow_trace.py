"""The Facebook coflow trace scaled onto the namespace testbed
(`bench/e2e/run coflow-trace`, docs/coflows.md). Pure: no root, no network;
bench/e2e/test_metrics.py checks it.

How a trace of 150 racks on 1 Gbit/s ports for an hour becomes a replay of
a few minutes on H testbed hosts:
- Racks to hosts: rack p is host 1 + (p mod H). A reducer's bytes come
  evenly from every mapper of its coflow, as in the simulator
  (allocator/sim/coflow_trace.h); the flows that land on one (mapper host,
  reducer host) pair are one block (a map output per coflow and host,
  a partition per reducer host). A flow whose two ends land on one host
  does not cross the fabric and is left out, as a rack-local flow is.
- Sizes: the trace's coflows span 1 MB to 8.5 TB. Each coflow's bytes B
  become S_MIN * (B / B_MIN) ** ALPHA with ALPHA set so the trace's largest
  coflow becomes S_MAX: the order of sizes (all STF and SEBF look at) and
  each coflow's shape (which pairs carry what share) are kept, the range is
  compressed from 8.5 million to 500 so that the whole trace fits a run
  (1.6 GB; a quarter of the blocks are below 64 KB, mice that Flowtune
  does not schedule, as the trace's small flows are).
- Time: arrival gaps are scaled by one factor, chosen so the bytes that
  cross the fabric offer `load` of the hosts' downlinks over the arrivals'
  span (the trace's own load, computed the same way over its racks, is 0.54).
- Bins (short: longest flow < 5 MB; narrow: at most 50 flows) are the
  trace's own, computed on its racks before any mapping, as the simulator's.
"""
import math

MIB = 1 << 20
B_MIN = 1 * MIB           # the trace's smallest coflow
B_MAX = 8_501_205 * MIB   # its largest
S_MIN = 200_000
S_MAX = 100_000_000
ALPHA = math.log(S_MAX / S_MIN) / math.log(B_MAX / B_MIN)


def parse(text):
    """Coflow-Benchmark text -> (ports, [coflow dicts]) in arrival order.
    Raises ValueError naming the line."""
    lines = [l for l in text.splitlines() if l.strip()]
    if not lines:
        raise ValueError("empty trace")
    try:
        ports, count = (int(x) for x in lines[0].split())
    except ValueError:
        raise ValueError("line 1: expected 'PORTS COFLOWS'")
    out = []
    for no, line in enumerate(lines[1:], start=2):
        t = line.split()
        try:
            m = int(t[2])
            mappers = [int(x) for x in t[3:3 + m]]
            r = int(t[3 + m])
            reducers = []
            for x in t[4 + m:4 + m + r]:
                port, mb = x.split(":")
                reducers.append((int(port), float(mb) * MIB))
            if len(mappers) != m or len(reducers) != r or len(t) != 4 + m + r:
                raise ValueError
            if any(not 0 <= p < ports for p in mappers + [p for p, _ in reducers]):
                raise ValueError
        except (ValueError, IndexError):
            raise ValueError("line %d: expected 'ID ARRIVAL_MS M m1..mM R r1:MB..rR:MB' "
                             "with ports below %d" % (no, ports))
        out.append({"id": int(t[0]), "arrival_ms": int(t[1]), "mappers": mappers,
                    "reducers": reducers})
    if len(out) != count:
        raise ValueError("line 1 announces %d coflows, %d follow" % (count, len(out)))
    out.sort(key=lambda c: c["arrival_ms"])
    return ports, out


def trace_bins(c):
    """(short, narrow) by the trace's own racks."""
    m = len(c["mappers"])
    longest, flows = 0.0, 0
    for rp, b in c["reducers"]:
        for mp in c["mappers"]:
            if mp != rp and b > 0:
                flows += 1
                longest = max(longest, b / m)
    return longest < 5 * MIB, flows <= 50


def scaled_bytes(b):
    return S_MIN * (b / B_MIN) ** ALPHA


def fabric_bytes(staged):
    """Bytes that cross the fabric in all the staged coflows."""
    return sum(sum(c["blocks"].values()) for c in staged)


def plan(coflows, hosts, link_bps, load, first=0, count=0):
    """The replay: coflows in arrival order, each {"id", "arrival_s",
    "blocks": {(mapper host, reducer host): bytes}, "short", "narrow",
    "trace_bytes"}; hosts are numbered 1..hosts. Coflows with no byte
    crossing the fabric are left out (returned count)."""
    window = coflows[first:first + count] if count else coflows[first:]
    staged, left_out = [], 0
    for c in window:
        m = len(c["mappers"])
        total = sum(b for _, b in c["reducers"])
        pair = {}
        for rp, b in c["reducers"]:
            for mp in c["mappers"]:
                hm, hr = 1 + mp % hosts, 1 + rp % hosts
                if hm != hr and b > 0:
                    pair[(hm, hr)] = pair.get((hm, hr), 0.0) + b / m
        if not pair or total <= 0:
            left_out += 1
            continue
        k = scaled_bytes(total) / total
        blocks = {p: max(1, int(round(v * k))) for p, v in pair.items()}
        short, narrow = trace_bins(c)
        staged.append({"id": c["id"], "arrival_ms": c["arrival_ms"], "blocks": blocks,
                       "short": short, "narrow": narrow, "trace_bytes": total})
    if not staged:
        return [], left_out, 0.0
    t0 = staged[0]["arrival_ms"]
    span_ms = staged[-1]["arrival_ms"] - t0
    fabric = fabric_bytes(staged)
    # 8 * fabric / (hosts * link * span) = load
    span_s = 8 * fabric / (hosts * link_bps * load)
    scale = span_s / (span_ms / 1000) if span_ms > 0 else 0.0
    for c in staged:
        c["arrival_s"] = (c.pop("arrival_ms") - t0) / 1000 * scale
    return staged, left_out, scale


def reducer_plans(staged, hosts, addr, port):
    """Per reducer host, the lines of its `flowtune-shuffle stages` plan: one
    fetch per coflow it receives from, partition = its host number, shuffle =
    the coflow's index in `staged`, coflow id = the trace's id."""
    lines = {h: [] for h in range(1, hosts + 1)}
    for i, c in enumerate(staged):
        senders = {}
        for (hm, hr), _ in c["blocks"].items():
            senders.setdefault(hr, []).append(hm)
        for hr, hms in senders.items():
            srcs = " ".join("%s:%d:0-0" % (addr(hm), port) for hm in sorted(hms))
            lines[hr].append("%.3f %d %d %d %s" % (c["arrival_s"] * 1000, i, hr, c["id"], srcs))
    return lines


def map_outputs(staged, hosts):
    """Per mapper host, (shuffle, [bytes of partition 0..hosts]) for each
    coflow it sends in: one map output whose partition r goes to host r."""
    out = {h: [] for h in range(1, hosts + 1)}
    for i, c in enumerate(staged):
        per = {}
        for (hm, hr), b in c["blocks"].items():
            per.setdefault(hm, [0] * (hosts + 1))[hr] = b
        for hm, sizes in per.items():
            out[hm].append((i, sizes))
    return out


def sim_trace(staged, hosts):
    """The staged replay in the trace format flowtune-sim reads (ports =
    hosts, arrivals in ms), so the simulator's fluid model can replay the
    same slice as a reference. Per reducer host its exact received bytes;
    the simulator splits them evenly over the coflow's mapper hosts and
    leaves out a mapper's share to its own host, so a reducer that is also
    a mapper is given M / (M - 1) of them. Every host receives exactly what
    it receives on the testbed; where racks merged unevenly onto hosts a
    pair's bytes, and so a mapper host's sent total, come out even instead."""
    lines = ["%d %d" % (hosts, len(staged))]
    for c in staged:
        mappers = sorted({m for m, _ in c["blocks"]})
        received = {}
        for (_, r), b in c["blocks"].items():
            received[r] = received.get(r, 0) + b
        red = []
        for r, b in sorted(received.items()):
            m = len(mappers)
            red.append("%d:%.9f" % (r - 1, b * m / (m - 1 if r in mappers else m) / MIB))
        lines.append("%d %.3f %d %s %d %s" % (c["id"], c["arrival_s"] * 1000, len(mappers),
                                              " ".join(str(m - 1) for m in mappers), len(red),
                                              " ".join(red)))
    return "\n".join(lines) + "\n"


def ccts(staged, fetches):
    """Coflow completion times from every reducer's fetches ({"coflow",
    "shuffle", "finish_s", "bytes", "failed"}), from each coflow's arrival to
    its last fetch's last byte; None for a coflow with a failed or missing
    fetch."""
    need = {}
    for i, c in enumerate(staged):
        need[i] = {hr for (_, hr) in c["blocks"]}
    got = {i: {} for i in need}
    for f in fetches:
        got.setdefault(f["shuffle"], {})[f["partition"]] = f
    out = []
    for i, c in enumerate(staged):
        fs = got.get(i, {})
        ok = set(fs) == need[i] and all(f["failed"] == 0 for f in fs.values())
        want = {hr: sum(b for (hm, r), b in c["blocks"].items() if r == hr) for hr in need[i]}
        ok = ok and all(fs[hr]["bytes"] == want[hr] for hr in need[i])
        out.append(max(f["finish_s"] for f in fs.values()) - c["arrival_s"] if ok else None)
    return out


def summarize(staged, cct, pct, censor_s):
    """cct_mean_s, cct_p50_s, cct_p95_s, cct_small_mean_s (short and
    narrow) and by bin; a coflow that did not complete (None) counts as
    done at censor_s (seconds from the replay's start), so a scheme that
    loses or stalls a fetch is not flattered by leaving it out."""
    full = [x if x is not None else censor_s - c["arrival_s"] for x, c in zip(cct, staged)]
    small = [x for x, c in zip(full, staged) if c["short"] and c["narrow"]]
    bins = {}
    for x, c in zip(full, staged):
        name = ("short" if c["short"] else "long") + "_" + ("narrow" if c["narrow"] else "wide")
        bins.setdefault(name, []).append(x)
    return {"coflows": len(full), "incomplete": sum(1 for x in cct if x is None),
            "cct_mean_s": sum(full) / len(full) if full else None,
            "cct_p50_s": pct(full, 50) if full else None,
            "cct_p95_s": pct(full, 95) if full else None,
            "cct_small_mean_s": sum(small) / len(small) if small else None,
            "bins": {k: {"coflows": len(v), "cct_mean_s": sum(v) / len(v)}
                     for k, v in sorted(bins.items())}}
