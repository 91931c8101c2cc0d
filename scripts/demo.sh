#!/usr/bin/env bash
# The quick start's main command: builds the allocator, starts it on loopback
# with 1 Gbit/s host links, plays four endpoints whose flowlets into one
# receiver join and leave (rates converge to the fair share at each step),
# shows the allocator's own view with flowtune-ctl, and stops it. Then solves
# the sample problems offline with flowtune-sim.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh" release flowtune-allocator flowtune-ctl allocator_demo flowtune-sim >/dev/null
bin="$top/build/release"
listen="ipc:///tmp/flowtune-demo-$$.sock"

"$bin/allocator/daemon/flowtune-allocator" --listen "$listen" --host-gbps 1 --log-level warn &
allocator=$!
trap 'kill "$allocator" 2>/dev/null; wait "$allocator" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  "$bin/allocator/ctl/flowtune-ctl" --allocator "$listen" --timeout-ms 100 >/dev/null 2>&1 && break
done

echo "==> flowtune-allocator on $listen (1 Gbit/s host links, threshold 1%)"
echo "==> four senders start flowlets into 10.0.0.100, one per step, then end them"
"$bin/examples/allocator_demo" --allocator "$listen" --link-gbps 1 --step-ms 300 &
demo=$!
sleep 1.1  # three flowlets are live here
echo
echo "==> flowtune-ctl flows, links (mid-run)"
"$bin/allocator/ctl/flowtune-ctl" --allocator "$listen" flows
"$bin/allocator/ctl/flowtune-ctl" --allocator "$listen" links
echo
wait "$demo"
echo
echo "==> flowtune-ctl status"
"$bin/allocator/ctl/flowtune-ctl" --allocator "$listen" status
echo

for problem in "$top"/examples/topologies/*.json; do
  echo "==> flowtune-sim solve --table $(basename "$problem")"
  "$bin/allocator/sim/flowtune-sim" solve --table "$problem"
  echo
done
