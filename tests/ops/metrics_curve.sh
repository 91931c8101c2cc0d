#!/usr/bin/env bash
# The allocator's metrics with CURVE on: the scrape speaks the allocator's
# own key pair, so with that public key among --curve-ctl keys it reads
# status (flowtune_allocator_up 1, and the auth metrics appear), and
# without it the handshake is refused (flowtune_allocator_up 0 alone).
#   metrics_curve.sh ALLOCATOR CTL
set -euo pipefail
alloc=$1 ctl=$2
command -v curl > /dev/null || { echo "SKIP: curl is not installed"; exit 77; }
. "$(dirname "$0")/../scripts/ops_lib.sh"
cd "$dir"
"$ctl" keygen allocator > /dev/null
"$ctl" keygen h0 --hosts h0 > /dev/null
mkdir clients ctl-with ctl-without
cp h0.pub clients/
cp allocator.pub ctl-with/
# $1: the --curve-ctl directory; $2: a name for its files. Prints the
# exposition once the allocator says its port.
scrape() {
  "$alloc" --listen "ipc://$dir/$2.sock" --hosts 1 --curve-secret allocator.key --curve-clients clients \
    --curve-ctl "$1" --metrics 127.0.0.1:0 > "$2.log" 2>&1 &
  curl -sf "http://127.0.0.1:$(metrics_port "$dir/$2.log")/metrics"
}
scrape ctl-with with > with.txt
grep -q '^flowtune_allocator_up 1$' with.txt || fail "own key listed: flowtune_allocator_up is not 1"
grep -q '^flowtune_allocator_auth_accepted_total [1-9]' with.txt || fail "own key listed: no accepted handshake counted"
scrape ctl-without without > without.txt
grep -q '^flowtune_allocator_up 0$' without.txt || fail "own key not listed: flowtune_allocator_up is not 0"
[ "$(grep -c '^flowtune_' without.txt)" = 1 ] || fail "own key not listed: more than up was exposed"
echo "PASS"
