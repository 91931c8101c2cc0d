#!/usr/bin/env bash
# The quick start's test command: builds and runs every test, first in the
# release build, then under AddressSanitizer + UndefinedBehaviorSanitizer, then
# with clang + libFuzzer (ASan + UBSan, a short differential fuzzing run).
#   scripts/test.sh            release + asan + fuzz
#   scripts/test.sh release    one preset only (release, asan, fuzz, tsan, debug)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan fuzz)
for preset in "${presets[@]}"; do
  echo "==> building and testing preset '$preset'"
  "$top/scripts/build.sh" "$preset"
  ctest --test-dir "$top/build/$preset" --output-on-failure -j "$(nproc)" --timeout 600
done
