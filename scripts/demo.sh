#!/usr/bin/env bash
# The quick start's main command: builds flowtune-sim and solves two sample
# problems with the real engine, printing the allocation.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh" release flowtune-sim >/dev/null
sim="$top/build/release/allocator/sim/flowtune-sim"
for problem in "$top"/examples/topologies/*.json; do
  echo "==> flowtune-sim solve --table $(basename "$problem")"
  "$sim" solve --table "$problem"
  echo
done
