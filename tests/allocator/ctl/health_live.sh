#!/usr/bin/env bash
# flowtune-ctl health against live allocators: ready (0) when serving;
# 1 when stopped (SIGSTOP: listening, but its loop does not turn), both
# for --live and readiness; 0 again after SIGCONT. A standby whose peer
# never answers is not ready (1) until it takes over, then ready (0).
#   health_live.sh ALLOCATOR CTL
set -euo pipefail
alloc=$1 ctl=$2
. "$(dirname "$0")/../../scripts/ops_lib.sh"
# The exit status of a health probe, its line on our output.
probe() {
  local rc=0
  "$ctl" --allocator "$1" --timeout-ms 300 health "${@:2}" || rc=$?
  return $rc
}
a="ipc://$dir/a.sock"
"$alloc" --listen "$a" --hosts 2 > "$dir/a.log" 2>&1 &
apid=$!
for _ in $(seq 50); do probe "$a" --live > /dev/null 2>&1 && break; sleep 0.1; done
probe "$a" --live || fail "a serving allocator is not live"
probe "$a" || fail "a serving allocator is not ready"
kill -STOP "$apid"
rc=0; probe "$a" --live 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a stopped allocator: --live exited $rc, not 1"
rc=0; probe "$a" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a stopped allocator: health exited $rc, not 1"
kill -CONT "$apid"
probe "$a" || fail "the allocator is not ready again after SIGCONT"

# A standby whose peer is silent: not ready until it takes over (2 s).
s="ipc://$dir/s.sock"
"$alloc" --listen "$s" --hosts 2 --standby-of "ipc://$dir/nobody.sock" --takeover-ms 2000 > "$dir/s.log" 2>&1 &
for _ in $(seq 50); do probe "$s" --live > /dev/null 2>&1 && break; sleep 0.1; done
rc=0; probe "$s" || rc=$?
[ "$rc" = 1 ] || fail "a standby that has not heard its peer: health exited $rc, not 1"
sleep 2.5
probe "$s" || fail "the standby took over but is not ready"
echo "PASS"
