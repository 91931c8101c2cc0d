#!/usr/bin/env bash
# The quick start's test command: builds and runs every test, first in the
# release build, then under AddressSanitizer + UndefinedBehaviorSanitizer, then
# the libFuzzer targets (clang, ASan + UBSan, short fuzzing runs), then the
# endpoint library's tests and the engine's persistent team under
# ThreadSanitizer.
#   scripts/test.sh            release + asan + fuzz + tsan (the full matrix, CI)
#   scripts/test.sh --quick    release only: the day-to-day check
#   scripts/test.sh PRESET...  those presets only (release, asan, fuzz, tsan, debug)
# Each preset checks what no other one does:
#   release  every test, optimized as shipped (benchmarks built too)
#   asan     every test under ASan + UBSan (gcc)
#   fuzz     only the libFuzzer targets and their short runs (ctest label
#            'fuzz'): the unit suite under ASan + UBSan is asan's job, so the
#            fuzz preset neither builds nor runs it again
#   tsan     libflowtune's threads, the host agent and the engine's persistent team
# At the end it prints how long each preset spent building and testing.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
presets=()
for a in "$@"; do
  case "$a" in
    --quick) presets+=(release) ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "test.sh: unknown option '$a' (see --help)" >&2; exit 2 ;;
    *) presets+=("$a") ;;
  esac
done
[ ${#presets[@]} -gt 0 ] || presets=(release asan fuzz tsan)
jobs=$(nproc)
timings=()

# Runs "$@" and appends its wall time in seconds to the variable named $1.
timed() {
  local var=$1 t0=$SECONDS
  shift
  "$@"
  printf -v "$var" '%d' $((SECONDS - t0))
}

# The fuzz preset's libFuzzer targets, as its configure step lists them.
fuzz_targets() {
  if [ ! -f "$top/build/fuzz/CMakeCache.txt" ]; then
    (cd "$top" && cmake --preset fuzz > /dev/null)
  fi
  cut -f1 "$top/build/fuzz/fuzz_targets.tsv" | grep -v '^$'
}

build_preset() {
  case "$1" in
    tsan)
      # The libflowtune suites (application threads + runtime thread) and the
      # engine's persistent worker team: Debian's oneTBB is not instrumented,
      # so the TBB driver's tests would report false races here.
      "$top/scripts/build.sh" tsan session_test client_test pacing_test shim_stress_test \
        flowtune-allocator alloc_parallel_test agent_test flowtune-agent ;;
    fuzz)
      local targets
      mapfile -t targets < <(fuzz_targets)
      [ ${#targets[@]} -gt 0 ] || { echo "test.sh: the fuzz preset lists no fuzz targets" >&2; exit 1; }
      "$top/scripts/build.sh" fuzz "${targets[@]}" ;;
    *) "$top/scripts/build.sh" "$1" ;;
  esac
}

test_preset() {
  local dir="$top/build/$1"
  case "$1" in
    tsan)
      echo "tsan: libflowtune, the host agent and the persistent engine team only (oneTBB is not TSan-instrumented)"
      ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600 -L 'libflowtune|agent'
      ctest --test-dir "$dir" --output-on-failure --timeout 600 --no-tests=error \
        -R '[Pp]ersistent|/team' ;;
    fuzz) ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600 --no-tests=error -L fuzz ;;
    *) ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 600 ;;
  esac
}

for preset in "${presets[@]}"; do
  echo "==> building and testing preset '$preset'"
  build_s=0 test_s=0
  timed build_s build_preset "$preset"
  timed test_s test_preset "$preset"
  timings+=("$(printf '%-8s %6ss %6ss' "$preset" "$build_s" "$test_s")")
done
echo "==> time per preset ($jobs CPUs)"
printf '%-8s %7s %7s\n' preset build tests
printf '%s\n' "${timings[@]}"
