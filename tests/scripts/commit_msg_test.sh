#!/usr/bin/env bash
# The commit-msg hook (scripts/git-hooks/commit-msg) against messages that
# keep the rule and messages that break it one way each.
#   commit_msg_test.sh HOOK
set -u
hook=${1:?usage: commit_msg_test.sh HOOK}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
total=0
check() {  # check WANT(0|1) NAME MESSAGE
  printf '%b' "$3" > "$dir/msg"
  "$hook" "$dir/msg" 2> "$dir/err"
  local got=$?
  total=$((total + 1))
  if [ "$got" -ne "$1" ]; then
    echo "FAIL: $2: exit $got, expected $1"; cat "$dir/err"
    failures=$((failures + 1))
  else
    echo "ok: $2"
  fi
}
long_subject="preload: $(printf 'x%.0s' $(seq 64))"   # 73 characters
long_body_line="$(printf 'word %.0s' $(seq 15))"        # 75 characters
check 0 "subject only" "preload: let mice through without an event\n"
check 0 "subject and body" "libflowtune: shield CURVE key derivation\n\nWhy, with the numbers.\nA second line.\n"
check 0 "two components" "bench, docs: measure the shim\n\nBody.\n"
check 0 "git's comments are not the message" "preload: fix a race\n\n# Please enter the commit message\n# $long_body_line\n"
check 0 "a long unbroken token in the body" "docs: cite a file\n\n$(printf 'p%.0s' $(seq 90))\n"
check 0 "fixup commits are folded later" "fixup! preload: anything at all, however long it runs past the limit of 72\n"
check 1 "a subject of 73 characters" "$long_subject\n"
check 1 "no component" "Fix the race in the shim\n"
check 1 "an upper-case component" "Preload: fix the race\n"
check 1 "no space after the colon" "preload:fix the race\n"
check 1 "a full stop at the end" "preload: fix the race.\n"
check 1 "no blank second line" "preload: fix the race\nThe body starts at once.\n"
check 1 "a body line of 75 characters" "preload: fix the race\n\n$long_body_line\n"
check 1 "an empty message" "\n"
echo "$((total - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
