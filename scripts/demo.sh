#!/usr/bin/env bash
# The quick start's main command, a live demo on loopback:
#   1. flowtune-allocator with 200 Mbit/s host links (so pacing is visible);
#   2. three real iperf3 transfers from 127.0.0.1 to 127.0.0.2, each under
#      flowtune-run (the preload shim), starting one second apart and ending
#      in the same order;
#   3. every half second: each transfer's rate from the allocator
#      (flowtune-ctl) beside the pacing rate the kernel applies (ss -ti),
#      converging to the fair share (200 Mbit/s x 0.99 / n);
#   4. the allocator's summary, then everything is stopped.
# Then the offline solver (flowtune-sim) on the sample problems.
#
#   scripts/demo.sh [--installed] [--allocator ENDPOINT]
# --installed: the installed binaries (the .debs: flowtune-allocator,
# flowtune-ctl, flowtune-run on PATH) instead of building; flowtune-sim is
# not packaged, so its part is left out. --allocator: use the allocator
# already listening there (started with 200 Mbit/s host links, e.g. from a
# config file) instead of starting one.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
installed=0
external=
while [ $# -gt 0 ]; do
  case $1 in
    --installed) installed=1 ;;
    --allocator) external=${2:?--allocator needs an endpoint}; shift ;;
    *) echo "usage: scripts/demo.sh [--installed] [--allocator ENDPOINT]" >&2; exit 2 ;;
  esac
  shift
done
if [ "$installed" = 1 ]; then
  alloc_bin=$(command -v flowtune-allocator) ctl_bin=$(command -v flowtune-ctl) run_bin=$(command -v flowtune-run)
else
  "$top/scripts/build.sh" release flowtune-allocator flowtune-ctl flowtune-run flowtune_preload \
    flowtune-sim >/dev/null
  bin="$top/build/release"
  alloc_bin=$bin/allocator/daemon/flowtune-allocator ctl_bin=$bin/allocator/ctl/flowtune-ctl
  run_bin=$bin/preload/flowtune-run
fi
tmp=$(mktemp -d /tmp/flowtune-demo.XXXXXX)
listen=${external:-"ipc://$tmp/allocator.sock"}
ctl=("$ctl_bin" --allocator "$listen")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

if [ -z "$external" ]; then
  "$alloc_bin" --listen "$listen" --host-gbps 0.2 --log-level warn &
  pids+=($!)
fi
for _ in $(seq 100); do "${ctl[@]}" --timeout-ms 100 >/dev/null 2>&1 && break; done

ports=(5301 5302 5303)
for p in "${ports[@]}"; do
  iperf3 -s -1 -B 127.0.0.2 -p "$p" >/dev/null 2>&1 &
  pids+=($!)
done
sleep 0.3

echo "==> flowtune-allocator on $listen: 200 Mbit/s host links, threshold 1%"
echo "==> three iperf3 transfers 127.0.0.1 -> 127.0.0.2 under flowtune-run, 1 s apart"
for i in 0 1 2; do
  (sleep "$i"; "$run_bin" --allocator "$listen" -- \
     iperf3 -c 127.0.0.2 -p "${ports[$i]}" -B 127.0.0.1 -t 5 >"$tmp/iperf$i.log" 2>&1) &
  pids+=($!)
done

# rate (Mbit/s) per transfer: allocator's view and the kernel's pacing rate
show() {
  local t=$1
  local alloc
  alloc=$("${ctl[@]}" --json flows 2>/dev/null | python3 -c '
import json, sys
flows = json.load(sys.stdin)["flows"]
print(" ".join("%.0f" % (f["rate_bps"] / 1e6) for f in flows) or "-")' 2>/dev/null || echo "-")
  # ss prints "pacing_rate CURRENT/MAX" once SO_MAX_PACING_RATE caps a socket.
  local kernel
  kernel=$(ss -tin dst 127.0.0.2 2>/dev/null | python3 -c '
import re, sys
unit = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
caps = [float(v) * unit[u] for v, u in
        re.findall(r"pacing_rate [0-9.]+[KMG]?bps/([0-9.]+)([KMG]?)bps", sys.stdin.read())]
print(" ".join("%.0f" % (c / 1e6) for c in caps) or "-")' || echo "-")
  local n
  n=$("${ctl[@]}" --json status 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["flows"])' 2>/dev/null || echo 0)
  local fair="-"
  [ "$n" -gt 0 ] 2>/dev/null && fair=$(python3 -c "print('%.0f' % (200 * 0.99 / $n))")
  printf 't=%4.1fs  flowlets %s  fair share %5s Mbit/s | allocator: %-12s | SO_MAX_PACING_RATE (ss -ti): %s\n' \
    "$t" "$n" "$fair" "$alloc" "${kernel:--}"
}
start=$(date +%s.%N)
clients=("${pids[@]:$((${#pids[@]} - 3))}")
alive() { for p in "${clients[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
for _ in $(seq 1 30); do
  sleep 0.4
  show "$(python3 -c "print('%.1f' % ($(date +%s.%N) - $start))")"
  alive || break
done
wait "${clients[@]}" 2>/dev/null || true

echo
echo "==> iperf3's own view (each sender's average; the rates changed as others joined)"
for i in 0 1 2; do grep -E "sender$" "$tmp/iperf$i.log" | sed "s/^/  transfer $i: /" || true; done
echo
echo "==> flowtune-ctl status"
"${ctl[@]}" status
echo
[ "$installed" = 1 ] && exit 0  # flowtune-sim is not packaged
for problem in "$top"/examples/topologies/*.json; do
  echo "==> flowtune-sim solve --table $(basename "$problem")"
  "$top/build/release/allocator/sim/flowtune-sim" solve --table "$problem"
  echo
done
