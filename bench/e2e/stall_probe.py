#!/usr/bin/env python3
"""Fail-safe probe: what an allocator stall does to real programs under the shim.

Measures, for a long transfer whose flowlet lives through the stall (iperf3,
and nginx serving a large file to a reader slower than the link), on loopback
(127.0.0.1 -> 127.0.0.2): the allocator is SIGSTOPped for longer than a lease,
then SIGCONTed. The kernel's SO_MAX_PACING_RATE on the sender's socket is read
with `ss -tin` every few ms. Reported per program and round: whether the cap
lapsed during the stall (fail-open), and how long after SIGCONT the cap was in
force again (the rate round trip, plus ss's sampling period).

    python3 bench/e2e/stall_probe.py [--build build/release] [--rounds 3]
        [--stall-ms 1000] [--lease-ms 300] [--out stall.json]

Prints one JSON document. Needs iperf3, nginx-light and curl
(scripts/install-deps.sh installs them); a missing program is skipped with a
reason in the JSON.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PACING = re.compile(r"pacing_rate [0-9.]+[KMG]?bps/([0-9.]+)([KMG]?)bps")
UNIT = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]


def max_pacing_bps(side, port):
    """The largest SO_MAX_PACING_RATE (bit/s) on sockets whose `side` (src or
    dst) is 127.0.0.2:port, 0 if none."""
    out = subprocess.run(["ss", "-tin", side, f"127.0.0.2:{port}"], capture_output=True,
                         text=True).stdout
    rates = [float(v) * UNIT[u] for v, u in PACING.findall(out)]
    return max(rates, default=0.0)


def wait_for(pred, timeout_s, period_s=0.005):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(period_s)
    return pred()


def stall_round(alloc, read_cap, stall_s, lease_s):
    """One stall of a live transfer; returns the round's figures."""
    if not wait_for(lambda: read_cap() > 0, 5):
        return {"error": "the transfer never got a cap before the stall"}
    before = read_cap()
    os.kill(alloc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    lapsed_at = None
    while time.monotonic() - t0 < stall_s:
        if lapsed_at is None and read_cap() == 0:
            lapsed_at = time.monotonic() - t0
        time.sleep(0.005)
    woke = time.monotonic()
    os.kill(alloc.pid, signal.SIGCONT)
    back = wait_for(lambda: read_cap() > 0, 5, period_s=0.002)
    back_ms = (time.monotonic() - woke) * 1e3 if back else None
    return {"cap_before_mbps": before / 1e6, "lapsed": lapsed_at is not None,
            "lapsed_after_ms": None if lapsed_at is None else lapsed_at * 1e3,
            "cap_back": back, "back_after_sigcont_ms": back_ms,
            "cap_after_mbps": read_cap() / 1e6, "lease_ms": lease_s * 1e3}


def stall_rounds(args, read_cap, procs):
    """args.rounds stalls of the live transfer; then the transfer's processes go."""
    try:
        return [stall_round(args.alloc, read_cap, args.stall_ms / 1000, args.lease_ms / 1000)
                for _ in range(args.rounds)]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def start_allocator(build, endpoint, lease_ms):
    return subprocess.Popen(
        [f"{build}/allocator/daemon/flowtune-allocator", "--listen", endpoint, "--host-gbps", "0.2",
         "--lease-ms", str(lease_ms), "--lease-refresh-ms", str(max(1, lease_ms // 3)),
         "--endpoint-timeout-ms", str(lease_ms * 20), "--log-level", "warn"],
        stderr=subprocess.DEVNULL)


def run_env(build, endpoint):
    env = dict(os.environ)
    env["FLOWTUNE_ALLOCATOR"] = endpoint
    env["FLOWTUNE_LOG"] = "1"
    return env, [f"{build}/preload/flowtune-run", "--preload", f"{build}/preload/libflowtune-preload.so",
                 "--"]


def probe_iperf3(build, endpoint, args):
    if shutil.which("iperf3") is None:
        return {"skipped": "iperf3 is not installed"}
    port = free_port()
    srv = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.2", "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    env, wrap = run_env(build, endpoint)
    secs = int(args.rounds * (args.stall_ms / 1000 + 2.5)) + 3
    cli = subprocess.Popen(wrap + ["iperf3", "-c", "127.0.0.2", "-p", str(port), "-t", str(secs),
                                   "-B", "127.0.0.1"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return stall_rounds(args, lambda: max_pacing_bps("dst", port), [cli, srv])


def probe_nginx(build, endpoint, args):
    if shutil.which("nginx") is None or shutil.which("curl") is None:
        return {"skipped": "nginx or curl is not installed"}
    port = free_port()
    d = tempfile.mkdtemp(prefix="ft-stall-")
    with open(f"{d}/big", "wb") as f:
        f.truncate(2 << 30)  # sparse: nginx sends it with sendfile
    conf = f"""daemon off; master_process off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{}}
http {{ access_log off; sendfile on;
  server {{ listen 127.0.0.2:{port}; root {d}; }} }}
"""
    with open(f"{d}/nginx.conf", "w") as f:
        f.write(conf)
    env, wrap = run_env(build, endpoint)
    srv = subprocess.Popen(wrap + ["nginx", "-p", d, "-c", f"{d}/nginx.conf"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    # A reader slower than the link: the socket's queue never drains, so its
    # flowlet lives through every stall.
    cli = subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--limit-rate", "5M",
                            f"http://127.0.0.2:{port}/big"])
    try:
        return stall_rounds(args, lambda: max_pacing_bps("src", port), [cli, srv])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build/release")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stall-ms", type=int, default=1000)
    p.add_argument("--lease-ms", type=int, default=300)
    p.add_argument("--out")
    args = p.parse_args()
    if args.stall_ms <= args.lease_ms:
        p.error("--stall-ms must exceed --lease-ms (the probe is about a lapsed lease)")
    for f in ("allocator/daemon/flowtune-allocator", "preload/flowtune-run",
              "preload/libflowtune-preload.so"):
        if not os.path.exists(f"{args.build}/{f}"):
            p.error(f"{args.build}/{f} is missing: scripts/build.sh release flowtune-allocator "
                    "flowtune-run flowtune_preload")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    args.alloc = start_allocator(args.build, endpoint, args.lease_ms)
    time.sleep(0.3)
    try:
        result = {"what": "cap lapse and recovery across an allocator stall, under the shim",
                  "stall_ms": args.stall_ms, "lease_ms": args.lease_ms,
                  "sample": "ss -tin polled every 2-5 ms (each call takes a few ms)",
                  "iperf3": probe_iperf3(args.build, endpoint, args),
                  "nginx_slow_reader": probe_nginx(args.build, endpoint, args)}
    finally:
        try:
            os.kill(args.alloc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        args.alloc.kill()
        args.alloc.wait()
    backs = [r["back_after_sigcont_ms"] for k in ("iperf3", "nginx_slow_reader")
             if isinstance(result[k], list) for r in result[k] if r.get("back_after_sigcont_ms")]
    result["summary"] = {
        "rounds": sum(len(result[k]) for k in ("iperf3", "nginx_slow_reader")
                      if isinstance(result[k], list)),
        "all_lapsed": all(r.get("lapsed") for k in ("iperf3", "nginx_slow_reader")
                          if isinstance(result[k], list) for r in result[k]),
        "all_back": all(r.get("cap_back") for k in ("iperf3", "nginx_slow_reader")
                        if isinstance(result[k], list) for r in result[k]),
        "back_after_sigcont_ms_max": max(backs, default=None),
        "back_after_sigcont_ms_median": sorted(backs)[len(backs) // 2] if backs else None}
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if result["summary"]["all_back"] else 1


if __name__ == "__main__":
    sys.exit(main())
