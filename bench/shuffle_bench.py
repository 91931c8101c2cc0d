#!/usr/bin/env python3
"""flowtune-shuffle's data paths on loopback: throughput and the server's CPU
per GB for io_uring read into a registered buffer + send (`read`), the same
with zero-copy send from two registered halves (`read-zc`), io_uring splice
(`splice`) and the plain baseline, a blocking thread per connection with
sendfile (`sendfile`), measured interleaved in the same run; ratios are
against sendfile. `read-plain` is `read` with its buffer refused
registration (the server runs without CAP_IPC_LOCK under a 128 KiB
RLIMIT_MEMLOCK, through capsh; left out unless root with capsh): what
registered buffers change.

usage: shuffle_bench.py [BUILD_DIR] [--rounds N] [--fetches N] [--maps N]
                        [--block-mib N] [--quick]
Prints JSON on stdout: config, every run (with the server's counters: buffers
registered or refused, zero-copy sends and how many the kernel copied), and
summary.<path> with medians (gbps, cpu_s_per_gb) and gbps_vs_sendfile /
cpu_vs_sendfile.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PATHS = ["sendfile", "read", "read-plain", "read-zc", "splice"]
# Pseudo-paths: (the server's --data-path, a command that runs it).
REFUSED = ["capsh", "--drop=cap_ipc_lock", "--", "-c", 'ulimit -l 128 && exec "$0" "$@"']
RUN_AS = {"read-plain": ("read", REFUSED)}
# The server's counters each run keeps (its JSON line on exit).
COUNTERS = ["buffers_registered", "buffers_refused", "zc_sends", "zc_copied", "zero_copy"]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_run(tool, data, path, fetches, maps):
    data_path, prefix = RUN_AS.get(path, (path, []))
    srv = subprocess.Popen(prefix + [tool, "serve", "--dir", data, "--bind", "127.0.0.1", "--no-flowtune",
                                     "--data-path", data_path], stdout=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline().split()
        if len(line) != 2 or line[0] != "listening":
            raise RuntimeError("flowtune-shuffle serve did not start")
        src = "127.0.0.1:%s:0-%d" % (line[1], maps - 1)
        fetch = [tool, "fetch", "--source", src, "--partition", "0"]
        subprocess.run(fetch, check=True, stdout=subprocess.DEVNULL)  # warm: files open, pages cached
        c0, t0 = cpu_seconds(srv.pid), time.monotonic()
        moved = 0
        for _ in range(fetches):
            out = json.loads(subprocess.run(fetch, check=True, capture_output=True, text=True).stdout)
            if out["failed"]:
                raise RuntimeError("a block failed: %s" % out)
            moved += out["bytes"]
        wall, cpu = time.monotonic() - t0, cpu_seconds(srv.pid) - c0
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            tail = srv.communicate(timeout=10)[0].strip().splitlines()
        except subprocess.TimeoutExpired:
            srv.kill()  # a server that will not stop is not left behind
            srv.communicate()
            raise
    counters = json.loads(tail[-1]) if tail else {}
    if path == "read-plain" and counters.get("buffers_registered", 1) != 0:
        raise RuntimeError("read-plain: the kernel registered the buffer after all: %s" % counters)
    return {"path": path, "bytes": moved, "seconds": wall, "server_cpu_s": cpu,
            "gbps": moved * 8 / wall / 1e9, "cpu_s_per_gb": cpu / (moved / 1e9),
            "server": {k: counters.get(k) for k in COUNTERS}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build/release")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fetches", type=int, default=3)
    ap.add_argument("--maps", type=int, default=4)
    ap.add_argument("--block-mib", type=int, default=128)
    ap.add_argument("--quick", action="store_true", help="1 round of 1 fetch of 4 blocks of 8 MiB")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.fetches, a.block_mib = 1, 1, 8
    tool = os.path.join(a.build, "examples", "shuffle", "flowtune-shuffle")
    if not os.access(tool, os.X_OK):
        sys.exit("shuffle_bench.py: %s not built (scripts/build.sh release flowtune-shuffle)" % tool)
    # capsh drops a capability only as root.
    can_drop = os.geteuid() == 0 and shutil.which(REFUSED[0])
    paths = [p for p in PATHS if p not in RUN_AS or can_drop]
    if paths != PATHS:
        print("shuffle_bench.py: read-plain left out (it needs root and capsh)", file=sys.stderr)
    data = tempfile.mkdtemp(prefix="shuffle_bench_")
    try:
        subprocess.run([tool, "gen", "--dir", data, "--maps", str(a.maps), "--partitions", "1",
                        "--block-bytes", str(a.block_mib << 20)], check=True, stdout=subprocess.DEVNULL)
        runs = [one_run(tool, data, p, a.fetches, a.maps) for _ in range(a.rounds) for p in paths]
    finally:
        shutil.rmtree(data, ignore_errors=True)
    summary = {}
    for p in paths:
        mine = [r for r in runs if r["path"] == p]
        summary[p] = {"gbps": statistics.median(r["gbps"] for r in mine),
                      "cpu_s_per_gb": statistics.median(r["cpu_s_per_gb"] for r in mine)}
    base = summary["sendfile"]
    for p in paths:
        summary[p]["gbps_vs_sendfile"] = summary[p]["gbps"] / base["gbps"]
        summary[p]["cpu_vs_sendfile"] = (summary[p]["cpu_s_per_gb"] / base["cpu_s_per_gb"]
                                         if base["cpu_s_per_gb"] > 0 else None)
    json.dump({"config": vars(a), "runs": runs, "summary": summary}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
