#!/usr/bin/env bash
# The quick start's test command: builds and runs every test, first in the
# release build, then under AddressSanitizer + UndefinedBehaviorSanitizer, then
# with clang + libFuzzer (ASan + UBSan, short fuzzing runs), then the endpoint
# library's tests and the engine's persistent team under ThreadSanitizer.
#   scripts/test.sh            release + asan + fuzz + tsan
#   scripts/test.sh release    one preset only (release, asan, fuzz, tsan, debug)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan fuzz tsan)
for preset in "${presets[@]}"; do
  echo "==> building and testing preset '$preset'"
  if [ "$preset" = tsan ]; then
    # The libflowtune suites (application threads + runtime thread) and the
    # engine's persistent worker team: Debian's oneTBB is not instrumented,
    # so the TBB driver's tests would report false races here.
    echo "tsan: libflowtune and the persistent engine team only (oneTBB is not TSan-instrumented)"
    "$top/scripts/build.sh" tsan session_test client_test pacing_test shim_stress_test \
      flowtune-allocator alloc_parallel_test
    ctest --test-dir "$top/build/tsan" --output-on-failure -j "$(nproc)" --timeout 600 -L libflowtune
    ctest --test-dir "$top/build/tsan" --output-on-failure --timeout 600 --no-tests=error \
      -R '[Pp]ersistent|/team'
    continue
  fi
  "$top/scripts/build.sh" "$preset"
  ctest --test-dir "$top/build/$preset" --output-on-failure -j "$(nproc)" --timeout 600
done
