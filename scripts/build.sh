#!/usr/bin/env bash
# scripts/build.sh PRESET [targets...]: configure (once) and build one CMake
# preset (release, asan, tsan, debug), installing dependencies if missing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
preset=${1:?usage: scripts/build.sh PRESET [targets...]}
shift
"$top/scripts/install-deps.sh"
cd "$top"
if [ ! -f "build/$preset/CMakeCache.txt" ]; then
  cmake --preset "$preset" >/dev/null
fi
jobs=$(nproc)
if [ $# -gt 0 ]; then
  cmake --build "build/$preset" -j "$jobs" --target "$@"
else
  cmake --build "build/$preset" -j "$jobs"
fi
