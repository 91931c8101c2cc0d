#!/usr/bin/env python3
"""The preload shim's cost per send(), as ratios to the same loop without the
shim and under trickle, measured in one run.

Runs bench's send_loop (a loopback send() loop) in four ways, interleaved in
rounds so the VM's drift hits all alike, and reports medians:
  plain              no interposition (the baseline)
  shim               flowtune-run, allocator unreachable: every wrapper runs,
                     events flow to the runtime, nothing is paced
  shim+allocator     flowtune-run against a live flowtune-allocator whose
                     host links (1 Tbit/s) do not limit the loop
  plain+pacing       no interposition, but the socket capped by the program
                     itself at the rate that allocator grants: the kernel's
                     pacing cost, so shim+allocator / plain+pacing is what
                     the shim adds on top of pacing
  trickle            trickle -s with limits far above the loop's rate
Each row gives the wall time per send() and the sending thread's CPU time
per send() (which a busy machine does not inflate: waiting for a CPU is not
counted), each with its ratio to plain. Prints one JSON object.

  shim+agent         flowtune-run served by a flowtune-agent (docs/agent.md)
                     that holds the session with the same allocator
The other configs run with FLOWTUNE_AGENT=off, so an agent that happens to
listen on the machine does not serve them.

--instructions (needs valgrind) counts instead of timing: the user-space
instructions per send() of every thread (the runtime's included) and of the
sending thread alone, plain and under the shim with the allocator
unreachable, from callgrind runs of the same loop at two lengths (the
difference over the extra sends, so start-up cancels out). Timed ratios on
a shared 2-vCPU VM move by +-15-35% between runs; the counts do not. Cases:
a mouse back to back (mice rate 1 Tbit/s), a mouse after a 2 ms pause, and
a flowlet start (64 KB after a 2 ms pause): the application thread's share
of a start, issue 47's goal 5.

Usage: python3 bench/shim_bench.py [BUILD_DIR] [--rounds N] [--quick]
       python3 bench/shim_bench.py [BUILD_DIR] --instructions [--preload-alt SO]
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def callgrind_instructions(cmd, env):
    """User-space instructions of `cmd` by callgrind: (every thread, the
    main thread alone)."""
    with tempfile.TemporaryDirectory(prefix="ft-shim-cg-") as d:
        out = os.path.join(d, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                        "--callgrind-out-file=" + out] + cmd,
                       env={**os.environ, **env}, capture_output=True, check=True, timeout=600)
        per_thread = {}
        for name in os.listdir(d):
            with open(os.path.join(d, name)) as f:
                for line in f:
                    if line.startswith(("summary:", "totals:")):
                        per_thread[name] = int(line.split()[1])
                        break
        main = [v for k, v in per_thread.items() if k.endswith("-01")]
        if not per_thread or not main:
            raise RuntimeError("callgrind wrote no summary")
        return sum(per_thread.values()), main[0]


def instructions(build, alt):
    """Instructions per send, plain and under the shim (and `alt`, a shim
    library to compare), for a mouse back to back and after a pause."""
    if shutil.which("valgrind") is None:
        sys.exit("shim_bench: --instructions needs valgrind (apt-get install valgrind)")
    loop = os.path.join(build, "bench", "send_loop")
    shim = os.path.abspath(os.path.join(build, "preload", "libflowtune-preload.so"))
    nobody = {"FLOWTUNE_ALLOCATOR": "ipc:///nonexistent/flowtune-shim-bench.sock",
              "FLOWTUNE_AGENT": "off"}
    configs = {"plain": {}, "shim": {"LD_PRELOAD": shim, **nobody}}
    if alt:
        configs["alt"] = {"LD_PRELOAD": os.path.abspath(alt), **nobody}
    # Served by an agent (whose allocator is as unreachable): the process's
    # link thread instead of its own runtime.
    agent_addr = "@ft-shim-bench-cg-%d" % os.getpid()
    agent = subprocess.Popen([os.path.join(build, "agent", "flowtune-agent"), "--listen", agent_addr,
                              "--allocator", nobody["FLOWTUNE_ALLOCATOR"], "--log-level", "0"])
    configs["shim+agent"] = {"LD_PRELOAD": shim, **nobody, "FLOWTUNE_AGENT": agent_addr}
    try:
        rows = instruction_rows(loop, configs)
    finally:
        agent.terminate()
        agent.wait()
    print(json.dumps({"benchmark": "shim_instructions", "rows": rows}, indent=2))


def instruction_rows(loop, configs):
    """callgrind_instructions per send for each case and config."""
    cases = [("mouse back to back", "coalesced", 64, 20000, {"FLOWTUNE_MICE_MBPS": "1000000"}),
             ("mouse after a pause", "starts", 64, 300, {}),
             ("flowlet start after a pause", "starts", 65536, 100, {})]
    rows = []
    for label, mode, size, n, env in cases:
        per = {}
        for name, cfg in configs.items():
            e = {**cfg, **env}
            short = callgrind_instructions([loop, mode, str(size), str(n)], e)
            long = callgrind_instructions([loop, mode, str(size), str(2 * n)], e)
            per[name] = [(b - a) / n for a, b in zip(short, long)]
        for name, (every, app) in per.items():
            rows.append({"case": label, "config": name, "instructions_per_send": round(every, 1),
                         "added": round(every - per["plain"][0], 1),
                         "app_thread_instructions_per_send": round(app, 1),
                         "app_thread_added": round(app - per["plain"][1], 1)})
    return rows


def main():
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__.strip())
        return 0
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--preload-alt" in sys.argv:
        args.remove(sys.argv[sys.argv.index("--preload-alt") + 1])
    build = args[0] if args else "build/release"
    if "--instructions" in sys.argv:
        alt = sys.argv[sys.argv.index("--preload-alt") + 1] if "--preload-alt" in sys.argv else None
        instructions(build, alt)
        return 0
    rounds = 5
    if "--rounds" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
    quick = "--quick" in sys.argv
    if quick:
        rounds = 1
    loop = os.path.join(build, "bench", "send_loop")
    run = os.path.join(build, "preload", "flowtune-run")
    allocator = os.path.join(build, "allocator", "daemon", "flowtune-allocator")
    tmp = tempfile.mkdtemp(prefix="ft-shim-bench-")
    live = "ipc://" + os.path.join(tmp, "alloc.sock")
    dead = "ipc://" + os.path.join(tmp, "nobody.sock")
    daemon = subprocess.Popen([allocator, "--listen", live, "--host-gbps", "1000",
                               "--log-level", "error"])
    agent_addr = "@ft-shim-bench-%d" % os.getpid()
    agent = subprocess.Popen([os.path.join(build, "agent", "flowtune-agent"), "--listen", agent_addr,
                              "--allocator", live, "--log-level", "1"])
    time.sleep(0.5)
    # 1 Tbit/s less the allocator's 1% threshold, in bytes/s.
    pacing = str(int(1e12 * 0.99 / 8))
    off = ["env", "FLOWTUNE_AGENT=off"]
    configs = {
        "plain": [],
        "shim": off + [run, "--allocator", dead, "--"],
        "shim+allocator": off + [run, "--allocator", live, "--"],
        "shim+agent": ["env", "FLOWTUNE_AGENT=" + agent_addr, run, "--allocator", live, "--"],
        "plain+pacing": ["env", "SEND_LOOP_PACING_BYTES_PER_SEC=" + pacing],
    }
    if shutil.which("trickle"):
        configs["trickle"] = ["trickle", "-s", "-u", "100000000", "-d", "100000000"]
    scale = 10 if quick else 1
    # (case, send_loop mode, bytes, sends, environment):
    # mice: 64-byte sends 20 us apart, below the mice rate: never scheduled;
    # mice-b2b: 64-byte sends back to back with the mice rate set to 1 Tbit/s,
    #   so each is a mouse: the gate's whole cost against the bare syscall;
    # starts/64: one mouse after each 2 ms pause; starts/65536: each send
    #   after a pause begins a flowlet (the shim's slow path).
    mice_all = {"FLOWTUNE_MICE_MBPS": "1000000"}
    cases = [("coalesced", "coalesced", 1024, 200000 // scale, {}),
             ("coalesced", "coalesced", 65536, 20000 // scale, {}),
             ("mice", "mice", 64, 20000 // scale, {}),
             ("mice-b2b", "coalesced", 64, 200000 // scale, mice_all),
             ("starts", "starts", 64, 500 // scale, {}),
             ("starts", "starts", 65536, 500 // scale, {})]
    samples = {(c, label, size): [] for c in configs for (label, _, size, _, _) in cases}
    cpu = {(c, label, size): [] for c in configs for (label, _, size, _, _) in cases}
    try:
        for _ in range(rounds):
            for label, mode, size, count, env in cases:
                for name, prefix in configs.items():
                    try:
                        out = subprocess.run(prefix + [loop, mode, str(size), str(count)],
                                             capture_output=True, text=True, check=True,
                                             timeout=120, env={**os.environ, **env}).stdout
                    except subprocess.TimeoutExpired:
                        # trickle has been seen to spin in its own delay
                        # computation; a hung run is reported, not waited on.
                        print(f"shim_bench: {name} {label} {size} timed out", file=sys.stderr)
                        continue
                    result = json.loads(out)
                    samples[(name, label, size)].append(result["ns_per_send"])
                    cpu[(name, label, size)].append(result["cpu_ns_per_send"])
    finally:
        for p in (agent, daemon):
            p.terminate()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    def median(key, of=samples):
        return statistics.median(of[key]) if of[key] else float("nan")

    for mode, _, size, count, _ in cases:
        base = median(("plain", mode, size))
        for name in configs:
            med = median((name, mode, size))
            row = {"config": name, "mode": mode, "bytes": size, "sends": count,
                   "ns_per_send": round(med, 1), "vs_plain": round(med / base, 3),
                   "cpu_ns_per_send": round(median((name, mode, size), cpu), 1),
                   "cpu_added_ns": round(median((name, mode, size), cpu)
                                         - median(("plain", mode, size), cpu), 1)}
            if "trickle" in configs:
                row["vs_trickle"] = round(med / median(("trickle", mode, size)), 3)
            if name in ("shim+allocator", "shim+agent"):
                row["vs_plain_pacing"] = round(med / median(("plain+pacing", mode, size)), 3)
            rows.append(row)
    print(json.dumps({"benchmark": "shim", "rounds": rounds, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
