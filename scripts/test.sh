#!/usr/bin/env bash
# The quick start's test command: builds and runs every test, first in the
# release build, then under AddressSanitizer + UndefinedBehaviorSanitizer, then
# with clang + libFuzzer (ASan + UBSan, short fuzzing runs), then the endpoint
# library's tests under ThreadSanitizer.
#   scripts/test.sh            release + asan + fuzz + tsan
#   scripts/test.sh release    one preset only (release, asan, fuzz, tsan, debug)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan fuzz tsan)
for preset in "${presets[@]}"; do
  echo "==> building and testing preset '$preset'"
  if [ "$preset" = tsan ]; then
    # Only the libflowtune suites (application threads + runtime thread):
    # Debian's oneTBB is not instrumented, so the TBB driver's tests would
    # report false races here.
    echo "tsan: running the libflowtune tests only (oneTBB is not TSan-instrumented)"
    "$top/scripts/build.sh" tsan session_test client_test pacing_test flowtune-allocator
    ctest --test-dir "$top/build/tsan" --output-on-failure -j "$(nproc)" --timeout 600 -L libflowtune
    continue
  fi
  "$top/scripts/build.sh" "$preset"
  ctest --test-dir "$top/build/$preset" --output-on-failure -j "$(nproc)" --timeout 600
done
