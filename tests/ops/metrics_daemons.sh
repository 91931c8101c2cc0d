#!/usr/bin/env bash
# The relay's and the witness's metrics, live: each started with --metrics
# 127.0.0.1:0 beside an allocator; an iperf3 transfer under flowtune-run
# goes through the relay. Passes when promtool check metrics accepts each
# exposition, every flowtune_ metric exposed is in docs/operate.md, and
# the relay's flowtune_relay_messages_up_total (above 0) and the witness's
# flowtune_witness_claims_total equal what flowtune-ctl status shows them.
# Skips (77, with the reason) without promtool, iperf3 or curl, and in
# sanitizer builds.
#   metrics_daemons.sh ALLOCATOR RELAY WITNESS CTL RUN SOURCE_DIR [sanitized|plain]
set -euo pipefail
alloc=$1 relay=$2 witness=$3 ctl=$4 run=$5 src=$6
if [ "${7:-plain}" = sanitized ]; then
  echo "SKIP: sanitizer build: the shim would be preloaded into an uninstrumented iperf3"
  exit 77
fi
for tool in promtool iperf3 curl python3; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed (apt-get install prometheus iperf3 curl)"; exit 77; }
done
. "$(dirname "$0")/../scripts/ops_lib.sh"
value() { sed -n "s/^$2 \([0-9.e+]*\)$/\1/p" "$dir/$1.txt"; }
status() { "$ctl" --allocator "$1" --json status | python3 -c "import json,sys; print(json.load(sys.stdin)$2)"; }

"$alloc" --listen "ipc://$dir/a.sock" --host-gbps 1 > "$dir/alloc.log" 2>&1 &
"$relay" --listen "ipc://$dir/r.sock" --upstream "ipc://$dir/a.sock" --metrics 127.0.0.1:0 > "$dir/relay.log" 2>&1 &
wport=$(free_port)
"$witness" --listen "tcp://127.0.0.1:$wport" --metrics 127.0.0.1:0 > "$dir/witness.log" 2>&1 &
rport=$(metrics_port "$dir/relay.log")
xport=$(metrics_port "$dir/witness.log")

iperf3 -s -1 -B 127.0.0.2 -p 5421 > /dev/null 2>&1 &
sleep 0.3
"$run" --allocator "ipc://$dir/r.sock" -- iperf3 -c 127.0.0.2 -p 5421 -B 127.0.0.1 -n 20M > "$dir/iperf.log" 2>&1 ||
  fail "iperf3 under flowtune-run through the relay"
sleep 0.5  # the endpoint's last messages through the relay

check_exposition relay "$rport" "$src"
up=$(value relay flowtune_relay_messages_up_total)
want=$(status "ipc://$dir/r.sock" '["counters"]["messages_up"]')
echo "relay: messages up $up in the metrics, $want in flowtune-ctl status"
[ "$up" = "$want" ] && [ "$up" -gt 0 ] || fail "relay: flowtune_relay_messages_up_total $up, status $want"

check_exposition witness "$xport" "$src"
claims=$(value witness flowtune_witness_claims_total)
want=$(status "tcp://127.0.0.1:$wport" '["counters"]["claims"]')
[ "$claims" = "$want" ] || fail "witness: flowtune_witness_claims_total $claims, status $want"
echo "PASS: relay and witness expositions pass promtool and match flowtune-ctl status"
