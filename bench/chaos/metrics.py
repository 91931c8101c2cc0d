"""The chaos suite's figures, computed from what bench/chaos/run recorded.

No processes and no clocks (file_check reads the two files it compares):
bench/chaos/test_metrics.py checks each function against hand-built cases. Times are CLOCK_MONOTONIC seconds.

A sample is {"t": seconds, "caps": {program: max SO_MAX_PACING_RATE over its
sockets, bit/s}}; a program with no socket in a sample is absent from it.
"""
import hashlib

# Faults where the allocator disappears for the endpoints: the promise is that
# every socket is unpaced within a lease of the disappearance.
DISAPPEAR = ("kill9_restart", "sigstop", "control_drop", "relay_killed")


def caps_by_program(socks, matchers):
    """[[local_port, peer_port, cap_bps], ...] -> {program: largest cap}.

    matchers: {program: ("local" | "peer", port)}."""
    caps = {}
    for lport, pport, cap in socks:
        for prog, (side, port) in matchers.items():
            if (lport if side == "local" else pport) == port:
                caps[prog] = max(caps.get(prog, 0.0), cap)
    return caps


def all_rated(sample, progs):
    """Every program in progs has a socket with a cap."""
    return all(sample["caps"].get(p, 0.0) > 0 for p in progs)


def none_capped(sample, progs):
    """No socket of any program in progs has a cap (a program gone counts as uncapped)."""
    return all(sample["caps"].get(p, 0.0) == 0 for p in progs)


def first_after(samples, t0, pred, t_end=None):
    """Seconds from t0 to the first sample at or after t0 (and at or before
    t_end) for which pred holds; None if there is none."""
    for s in samples:
        if s["t"] < t0:
            continue
        if t_end is not None and s["t"] > t_end:
            break
        if pred(s):
            return s["t"] - t0
    return None


def unpaced_after_s(samples, t_gone, progs, t_end=None):
    return first_after(samples, t_gone, lambda s: none_capped(s, progs), t_end)


def rate_again_after_s(samples, t_back, progs, t_end=None):
    return first_after(samples, t_back, lambda s: all_rated(s, progs), t_end)


def settled_after_s(samples, t0, t1, progs):
    """Seconds from t0 to the start of the last unbroken run of samples in
    [t0, t1] with every program rated, the run reaching t1's last sample;
    0 if every sample was rated, None if the last sample was not."""
    window = [s for s in samples if t0 <= s["t"] <= t1]
    if not window or not all_rated(window[-1], progs):
        return None
    start = None  # the first sample of the last rated run, when a sample before it was not
    for prev, cur in zip(window, window[1:]):
        if not all_rated(prev, progs):
            start = cur["t"]
    return 0.0 if start is None else start - t0


def lapses(samples, t0, t1, progs):
    """How many times in [t0, t1] the samples went from every program rated to not."""
    window = [s for s in samples if t0 <= s["t"] <= t1]
    return sum(1 for a, b in zip(window, window[1:]) if all_rated(a, progs) and not all_rated(b, progs))


def rated_fraction(samples, t0, t1, progs):
    """Share of the samples in [t0, t1] in which every program was rated; None if none."""
    window = [s for s in samples if t0 <= s["t"] <= t1]
    if not window:
        return None
    return sum(1 for s in window if all_rated(s, progs)) / len(window)


def rated_at(samples, t):
    """Programs with a cap in the last sample at or before t."""
    last = None
    for s in samples:
        if s["t"] > t:
            break
        last = s
    return sorted(p for p, c in (last or {"caps": {}})["caps"].items() if c > 0)


def stale(polls, t_kill):
    """Flows the allocator kept for a dead endpoint: polls are (t, flows of
    that endpoint the allocator listed, or None when it did not answer).
    Returns (the most listed after the kill, seconds until it listed none;
    None if it still did at the last poll)."""
    after = [(t, n) for t, n in polls if t >= t_kill and n is not None]
    most = max((n for _, n in after), default=0)
    gone = next((t - t_kill for t, n in after if n == 0), None)
    return most, gone


def pattern_loss(sent, received, intact):
    """Bytes of a checksummed stream that did not arrive intact.

    sent: bytes the sender's write calls took (None: not known, the
    sender was killed); received / intact: bytes the receiver read, and how
    many of them from the start matched. A killed sender's missing tail is
    not a loss; any byte after the first mismatch is."""
    corrupt = received - intact
    if sent is None:
        return corrupt
    return max(0, sent - intact)


def file_check(received_path, original_path, block=1 << 20):
    """(bytes received, how many from the start match the original, sha256
    of what was received); (0, 0, None) if nothing was received."""
    try:
        f = open(received_path, "rb")
    except OSError:
        return 0, 0, None
    h = hashlib.sha256()
    got = intact = 0
    with f, open(original_path, "rb") as g:
        while True:
            a, b = f.read(block), g.read(block)
            if not a:
                break
            h.update(a)
            if intact == got:  # no mismatch yet
                if a == b:
                    intact += len(a)
                else:
                    intact += next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                                   min(len(a), len(b)))
            got += len(a)
    return got, intact, (h.hexdigest() if got else None)


def file_loss(size, got, intact):
    """Bytes of a file download lost: missing or wrong, plus any past its end."""
    return max(0, size - intact) + max(0, got - size)


def worst(values):
    """The largest of the rounds' figures; None if any round has none (a
    promise not met in that round) or there are no rounds."""
    if not values or any(v is None for v in values):
        return None
    return max(values)


def verdicts(summary, limits):
    """Broken promises, one line each. summary: {fault: figures}; limits:
    {"unpaced_s", "rate_again_s", "stale_s"}. Skipped faults are not judged."""
    bad = []
    for fault, s in sorted(summary.items()):
        if s.get("skipped"):
            continue
        if s.get("bytes_lost", 0) != 0:
            bad.append("%s: %d bytes lost" % (fault, s["bytes_lost"]))
        if s.get("app_errors", 0) != 0:
            bad.append("%s: %d application errors" % (fault, s["app_errors"]))
        def late(value, limit, text, missing):
            """text names the time with %s; missing stands for a time never seen."""
            if value is None or value > limit:
                bad.append("%s: %s (limit %.3f s)"
                           % (fault, text % (missing if value is None else "%.3f s" % value), limit))

        if fault in DISAPPEAR:
            late(s.get("unpaced_after_s"), limits["unpaced_s"],
                 "sockets still paced %s after the allocator went", "at the end")
        if "rate_again_after_s" in s:
            late(s["rate_again_after_s"], limits["rate_again_s"],
                 "flowlets without a rate %s after the allocator came back", "at the end")
        if fault == "endpoint_killed":
            late(s["stale_for_s"], limits["stale_s"],
                 "a dead endpoint's flows stayed %s", "past the end")
        if "standby_rated_after_s" in s:
            late(s["standby_rated_after_s"], limits["rate_again_s"],
                 "the standby held and rated every flow %s after kill -9 of the active allocator",
                 "never")
        if s.get("split_brain"):
            bad.append("%s: the old primary, restarted, did not stand by (split brain)" % fault)
        if s.get("not_rated_at_start"):
            bad.append("%s: not every program had a rate before the fault" % fault)
        if s.get("allocator_died"):
            bad.append("%s: the allocator exited" % fault)
    return bad


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "%.3f%s" % (v, unit)
    return "%s%s" % (v, unit)


def table(summary):
    """A short text table of the summary, one fault a line."""
    cols = ("bytes_lost", "app_errors", "unpaced_after_s", "rate_again_after_s", "standby_rated_after_s", "stale_flows",
            "stale_for_s")
    head = ["fault"] + list(cols)
    rows = [head]
    for fault, s in summary.items():
        if s.get("skipped"):
            rows.append([fault, "skipped: " + s["skipped"]] + [""] * (len(cols) - 1))
            continue
        rows.append([fault] + [fmt(s.get(c)) for c in cols])
    widths = [max(len(r[i]) for r in rows if i < len(r) and not (len(r) > 1 and r[1].startswith("skipped")))
              for i in range(len(head))]
    lines = []
    for r in rows:
        if len(r) > 1 and r[1].startswith("skipped"):
            lines.append(r[0].ljust(widths[0]) + "  " + r[1])
        else:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)
