#!/usr/bin/env bash
# Lints the project's own C and C++ sources (not build/, not generated code):
#   clang-format --dry-run -Werror   every tracked *.h *.hpp *.c *.cc file
#   clang-tidy readability-function-size (LineThreshold 80)
#                                    every translation unit in
#                                    build/release/compile_commands.json and
#                                    the project headers they include
# in parallel (one job per CPU). What is listed in scripts/lint-allow.txt
# passes; anything else fails, so a new unformatted file or a new function
# over 80 lines fails CI while the old ones are split.
#
#   scripts/lint.sh                  check (exit 1 on a finding not allowed)
#   scripts/lint.sh --list           print every finding as an allow-list line
#   scripts/lint.sh --format-only    skip clang-tidy (seconds instead of minutes)
#
# Needs clang-format and clang-tidy (scripts/install-deps.sh) and a configured
# release build (cmake --preset release) for compile_commands.json.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
mode=check tidy=1
for a in "$@"; do
  case "$a" in
    --list) mode=list ;;
    --format-only) tidy=0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "lint.sh: unknown argument '$a' (see --help)" >&2; exit 2 ;;
  esac
done
for tool in clang-format clang-tidy; do
  command -v "$tool" > /dev/null || { echo "lint.sh: $tool is missing: scripts/install-deps.sh" >&2; exit 2; }
done
db=build/release/compile_commands.json
if [ "$tidy" = 1 ] && [ ! -f "$db" ]; then
  echo "lint.sh: $db is missing: run 'cmake --preset release' first" >&2
  exit 2
fi
jobs=$(nproc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# clang-format: one "format PATH" finding per file it would change.
git ls-files -z '*.h' '*.hpp' '*.c' '*.cc' |
  xargs -0 -r -n 8 -P "$jobs" sh -c 'for f; do clang-format --dry-run -Werror "$f" > /dev/null 2>&1 || echo "format $f"; done' sh \
  > "$out/format.txt"

# clang-tidy: one "function PATH" finding per file with a function over 80
# lines (a file, not a function name: names repeat across overloads and
# lambdas). clang-tidy exits non-zero on a unit it cannot parse; what it
# found in the others still counts.
if [ "$tidy" = 1 ]; then
  cfg='{Checks: "-*,readability-function-size", CheckOptions: [{key: readability-function-size.LineThreshold, value: 80}]}'
  python3 - "$db" "$top" > "$out/units.txt" <<'PY'
import json, sys
db, top = sys.argv[1], sys.argv[2] + "/"
for e in json.load(open(db)):
    f = e["file"]
    if f.startswith(top) and not f.startswith(top + "build/"):
        print(f)
PY
  # Project headers only: not build/ (generated Cap'n Proto code), not /usr.
  filter="^$top/(allocator|bench|common|examples|libflowtune|pacer|preload|relay|schema|tests)/"
  tr '\n' '\0' < "$out/units.txt" |
    xargs -0 -r -n 2 -P "$jobs" clang-tidy -p build/release --quiet --config="$cfg" \
      --header-filter="$filter" 2> /dev/null > "$out/tidy.txt" || true
  sed -nE "s#^$top/([^:]+):[0-9]+:[0-9]+: warning: function '[^']+' exceeds recommended size.*#function \1#p" \
    "$out/tidy.txt" > "$out/function.txt"
else
  : > "$out/function.txt"
fi

sort -u "$out/format.txt" "$out/function.txt" > "$out/found.txt"
if [ "$mode" = list ]; then
  cat "$out/found.txt"
  exit 0
fi
allow=scripts/lint-allow.txt
grep -vE '^[[:space:]]*(#|$)' "$allow" | sort -u > "$out/allowed.txt"
if [ "$tidy" = 0 ]; then  # the function lines were not checked: do not call them stale
  grep '^format ' "$out/allowed.txt" > "$out/allowed.f" || true
  mv "$out/allowed.f" "$out/allowed.txt"
fi
comm -23 "$out/found.txt" "$out/allowed.txt" > "$out/new.txt"
comm -13 "$out/found.txt" "$out/allowed.txt" > "$out/stale.txt"
if [ -s "$out/stale.txt" ]; then
  echo "lint.sh: fixed, so these lines can leave $allow:"
  sed 's/^/  /' "$out/stale.txt"
fi
if [ -s "$out/new.txt" ]; then
  echo "lint.sh: findings not in $allow (format: run clang-format -i FILE;" \
    "function: split it under 80 lines):" >&2
  sed 's/^/  /' "$out/new.txt" >&2
  exit 1
fi
echo "lint.sh: clean ($(wc -l < "$out/found.txt") allowed findings remain in $allow)"
