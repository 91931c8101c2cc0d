#!/usr/bin/env bash
# docs/operate.md's table of the allocator's flags against
# `flowtune-allocator --help`: every flag the daemon takes is in the
# table, and the table names no flag the daemon does not take.
#   operate_doc_flags.sh ALLOCATOR SOURCE_DIR
set -euo pipefail
alloc=$1 src=$2
help=$("$alloc" --help | grep -oE '^  --[a-z-]+' | sed 's/^  //' | sort -u)
doc=$(sed -n '/<!-- flags:allocator -->/,/<!-- \/flags:allocator -->/p' "$src/docs/operate.md" |
  grep -oE '^\| `--[a-z-]+' | sed 's/^| `//' | sort -u)
[ -n "$doc" ] || { echo "FAIL: no flag table between <!-- flags:allocator --> markers"; exit 1; }
missing=$(comm -23 <(echo "$help") <(echo "$doc"))
extra=$(comm -13 <(echo "$help") <(echo "$doc"))
[ -z "$missing" ] || { echo "FAIL: flags not in docs/operate.md: $missing"; exit 1; }
[ -z "$extra" ] || { echo "FAIL: docs/operate.md names flags the allocator does not take: $extra"; exit 1; }
echo "PASS: $(echo "$help" | wc -l) flags documented"
