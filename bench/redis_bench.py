#!/usr/bin/env python3
"""What the preload shim costs a small-request server: redis-server's
throughput under flowtune-run as a ratio to the same server without it,
measured in one run.

redis-server listens on 127.0.0.2 (so its replies leave on a loopback
connection the shim manages); redis-benchmark runs plain from 127.0.0.1.
Each round starts a fresh server for each scheme and workload, interleaved,
and the medians over rounds are reported:
  plain        no interposition (the baseline)
  shim         flowtune-run against a live flowtune-allocator
  alt          flowtune-run with another shim library (--alt-preload PATH,
               e.g. an older build), if given
Workloads (SET and GET each, 50 clients):
  small        -d 64: replies of a few bytes, never scheduled
  pipelined    -P 16 -d 1024: 16 replies of 1 KB per write
Besides requests a second it reports the server's CPU time per request
(user + system, from /proc) and what the allocator heard from the server
(hellos and events).

Usage: python3 bench/redis_bench.py [BUILD_DIR] [--rounds N] [--requests N]
                                    [--alt-preload PATH] [--quick]
Needs redis-server and redis-benchmark (Debian: redis-server, redis-tools).
Prints one JSON object.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = {
    "small": ["-d", "64", "-c", "50"],
    "pipelined": ["-P", "16", "-d", "1024", "-c", "50"],
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build", nargs="?", default="build/release")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=200000, help="per test (SET, GET)")
    p.add_argument("--alt-preload", help="another libflowtune-preload.so to compare")
    p.add_argument("--quick", action="store_true", help="one round, 20,000 requests")
    a = p.parse_args()
    if a.quick:
        a.rounds, a.requests = 1, 20000
    return a


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_ready(port, deadline_s=10):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.2", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("redis-server did not answer on port %d" % port)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(prefix, workload, requests):
    """Starts a server under `prefix`, benchmarks it; rps per test and CPU."""
    port = free_port()
    server = subprocess.Popen(prefix + ["redis-server", "--bind", "127.0.0.2", "--port",
                                        str(port), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port)
        cpu0 = cpu_seconds(server.pid)
        out = subprocess.run(["redis-benchmark", "-h", "127.0.0.2", "-p", str(port), "-n",
                              str(requests), "-t", "set,get", "--csv"] + WORKLOADS[workload],
                             capture_output=True, text=True, check=True, timeout=600).stdout
        cpu = cpu_seconds(server.pid) - cpu0
    finally:
        server.terminate()
        server.wait()
    rps = {}
    for line in out.splitlines()[1:]:
        cells = [c.strip('"') for c in line.split(",")]
        rps[cells[0]] = float(cells[1])
    return rps, cpu


def allocator_heard(ctl, endpoint):
    out = subprocess.run([ctl, "--allocator", endpoint, "status", "--json"],
                         capture_output=True, text=True, check=True).stdout
    c = json.loads(out)["counters"]
    return {"hellos": c["hellos"], "events": c["events"]}


def main():
    a = parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit("redis_bench: %s is not installed (apt-get install redis-server redis-tools)"
                     % tool)
    run = os.path.join(a.build, "preload", "flowtune-run")
    allocator = os.path.join(a.build, "allocator", "daemon", "flowtune-allocator")
    ctl = os.path.join(a.build, "allocator", "ctl", "flowtune-ctl")
    tmp = tempfile.mkdtemp(prefix="ft-redis-bench-")
    live = "ipc://" + os.path.join(tmp, "alloc.sock")
    daemon = subprocess.Popen([allocator, "--listen", live, "--host-gbps", "10",
                               "--log-level", "error"])
    time.sleep(0.5)
    schemes = {"plain": [], "shim": [run, "--allocator", live, "--"]}
    if a.alt_preload:
        schemes["alt"] = [run, "--allocator", live, "--preload", a.alt_preload, "--"]
    samples = {}
    heard = {}
    try:
        for _ in range(a.rounds):
            for workload in WORKLOADS:
                for name, prefix in schemes.items():
                    before = allocator_heard(ctl, live)
                    rps, cpu = one_run(prefix, workload, a.requests)
                    after = allocator_heard(ctl, live)
                    for test, v in rps.items():
                        samples.setdefault((workload, name, test), []).append(v)
                    samples.setdefault((workload, name, "cpu_us_per_request"), []).append(
                        cpu * 1e6 / (2 * a.requests))
                    h = heard.setdefault((workload, name), {"hellos": 0, "events": 0})
                    for k in h:
                        h[k] += after[k] - before[k]
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for workload in WORKLOADS:
        for name in schemes:
            row = {"workload": workload, "scheme": name, "args": " ".join(WORKLOADS[workload])}
            for test in ("SET", "GET", "cpu_us_per_request"):
                med = statistics.median(samples[(workload, name, test)])
                base = statistics.median(samples[(workload, "plain", test)])
                key = test.lower() + ("_rps" if test != "cpu_us_per_request" else "")
                row[key] = round(med, 2)
                row[key + "_vs_plain"] = round(med / base, 3)
                row[key + "_runs"] = [round(x, 2) for x in samples[(workload, name, test)]]
            row["allocator_heard"] = heard[(workload, name)]
            rows.append(row)
    print(json.dumps({"benchmark": "redis", "rounds": a.rounds, "requests": a.requests,
                      "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
