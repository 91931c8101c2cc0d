#!/usr/bin/env bash
# The quick start's test command: builds and runs every test, first in the
# release build, then under AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/test.sh            release + asan
#   scripts/test.sh release    one preset only (release, asan, tsan, debug)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan)
for preset in "${presets[@]}"; do
  echo "==> building and testing preset '$preset'"
  "$top/scripts/build.sh" "$preset"
  ctest --test-dir "$top/build/$preset" --output-on-failure -j "$(nproc)" --timeout 600
done
