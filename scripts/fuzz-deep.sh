#!/usr/bin/env bash
# scripts/fuzz-deep.sh [--runs N] [--jobs J] [--max-time S] [TARGET...]
#
# Fuzzing at depth (docs/reliability.md): builds the 'fuzz' preset's libFuzzer
# targets (every one listed in build/fuzz/fuzz_targets.tsv, or the TARGETs
# named), runs each for N inputs (default 10,000,000) against a scratch copy
# of its kept corpus in the source tree, then merges what it found back into
# the kept corpus with -merge=1 (only inputs that add coverage are added, so
# the corpus stays small; over 2 MB is reported as a warning). One target at
# a time; --jobs J splits a target's N inputs over J processes. --max-time S
# stops a target after S seconds (its JSON then shows how far it got).
#
# Prints one JSON line per target on stdout: target, runs, seconds, exec_per_s,
# cov and ft (libFuzzer's final figures for the run, the largest over jobs),
# corpus_cov and corpus_ft (the kept corpus after the merge, replayed),
# corpus files before/after, corpus bytes, crashes, seed. A crash (or leak,
# timeout, out-of-memory) stops the script with exit 1 and the reproducer's
# path; rerun it with `BINARY REPRODUCER`. Logs and scratch corpora are under
# build/fuzz/fuzz-deep/TARGET/.
#
# Run it once per change that touches a target's code, and commit the corpus.
# On a shared machine: nice -n 19 scripts/fuzz-deep.sh ...
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
runs=10000000
jobs=1
max_time=0
targets=()
usage() {
  sed -n '2p' "$0" | sed 's/^# /usage: /' >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --max-time) max_time=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz-deep: unknown option $1" >&2; usage ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ "$runs" =~ ^[0-9]+$ && "$jobs" =~ ^[1-9][0-9]*$ && "$max_time" =~ ^[0-9]+$ ]] || usage

cd "$top"
build="$top/build/fuzz"
"$top/scripts/install-deps.sh"
# Configure (or regenerate) so the target list is current.
cmake --preset fuzz >/dev/null
list="$build/fuzz_targets.tsv"
declare -A bin max_len kept
all=()
while IFS=$'\t' read -r name b len dir; do
  [ -n "$name" ] || continue
  bin[$name]=$b max_len[$name]=$len kept[$name]=$dir
  all+=("$name")
done <"$list"
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [ -n "${bin[$t]:-}" ] || { echo "fuzz-deep: no fuzzer '$t' (known: ${all[*]})" >&2; exit 2; }
done
"$top/scripts/build.sh" fuzz "${targets[@]}" >&2

files() { find "$1" -maxdepth 1 -type f ! -name '.*' | wc -l; }
bytes() { find "$1" -maxdepth 1 -type f ! -name '.*' -printf '%s\n' | awk '{s+=$1} END {print s+0}'; }
# The last "cov: X ft: Y" of a log (a status line, or INITED/DONE).
cov_ft() { grep -ho 'cov: [0-9]* ft: [0-9]*' "$@" 2>/dev/null | awk '
  {if ($2 > c) c = $2; if ($4 > f) f = $4} END {print c+0, f+0}'; }

for t in "${targets[@]}"; do
  b=${bin[$t]} len=${max_len[$t]} corpus=${kept[$t]}
  work="$build/fuzz-deep/$t"
  rm -rf "$work"
  mkdir -p "$work/scratch" "$work/artifacts" "$corpus"
  find "$corpus" -maxdepth 1 -type f ! -name '.*' -exec cp -t "$work/scratch" {} +
  before=$(files "$corpus")
  echo "fuzz-deep: $t: $runs inputs (max_len $len, $jobs job(s)), corpus $before files" >&2
  args=(-max_len="$len" -print_final_stats=1 -timeout=30 -artifact_prefix="$work/artifacts/")
  [ "$max_time" -eq 0 ] || args+=(-max_total_time="$max_time")
  start=$(date +%s.%N)
  rc=0
  if [ "$jobs" -eq 1 ]; then
    (cd "$work" && "$b" "${args[@]}" -runs="$runs" scratch >fuzz-0.log 2>&1) || rc=$?
  else
    # Each job a process of its own, all on one scratch corpus; libFuzzer
    # writes fuzz-K.log in the working directory.
    (cd "$work" && "$b" "${args[@]}" -runs=$(((runs + jobs - 1) / jobs)) -jobs="$jobs" \
      -workers="$jobs" scratch >jobs.log 2>&1) || rc=$?
  fi
  end=$(date +%s.%N)
  done_runs=$(grep -h 'stat::number_of_executed_units' "$work"/fuzz-*.log 2>/dev/null |
    awk '{s+=$2} END {print s+0}')
  read -r cov ft < <(cov_ft "$work"/fuzz-*.log)
  seed=$(grep -ho 'Seed: [0-9]*' "$work"/fuzz-*.log 2>/dev/null | head -1 | awk '{print $2}')
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.1f", b - a}')
  rate=$(awk -v n="$done_runs" -v s="$secs" 'BEGIN {printf "%.0f", (s > 0 ? n / s : 0)}')
  mapfile -t found < <(find "$work/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' \
    -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  if [ "$rc" -ne 0 ] || [ ${#found[@]} -gt 0 ]; then
    printf '{"target":"%s","runs":%s,"seconds":%s,"exec_per_s":%s,"cov":%s,"ft":%s,"crashes":%s,"reproducer":"%s","log":"%s"}\n' \
      "$t" "$done_runs" "$secs" "$rate" "$cov" "$ft" "${#found[@]}" "${found[0]:-}" "$work"
    echo "fuzz-deep: $t failed (exit $rc); reproduce with: $b ${found[0]:-<see $work/fuzz-*.log>}" >&2
    exit 1
  fi
  # Only inputs that add coverage join the kept corpus.
  "$b" -merge=1 -max_len="$len" "$corpus" "$work/scratch" >"$work/merge.log" 2>&1
  after=$(files "$corpus")
  size=$(bytes "$corpus")
  read -r ccov cft < <("$b" -runs=0 -max_len="$len" "$corpus" 2>&1 | cov_ft /dev/stdin)
  if [ "$size" -gt $((2 << 20)) ]; then
    echo "fuzz-deep: warning: $corpus holds $size bytes (over 2 MB); minimise it" \
      "(-merge=1 into an empty folder) or lower max_len" >&2
  fi
  printf '{"target":"%s","runs":%s,"seconds":%s,"exec_per_s":%s,"cov":%s,"ft":%s,"corpus_cov":%s,"corpus_ft":%s,"corpus_files_before":%s,"corpus_files_after":%s,"corpus_bytes":%s,"crashes":0,"seed":%s}\n' \
    "$t" "$done_runs" "$secs" "$rate" "$cov" "$ft" "$ccov" "$cft" "$before" "$after" "$size" "${seed:-0}"
done
