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
dir=$(mktemp -d)
cleanup() {
  local pids
  pids=$(jobs -p)
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $1"
  tail -n 5 "$dir"/*.log
  exit 1
}
# The port a daemon's log says its metrics listen on.
metrics_port() {
  local port=
  for _ in $(seq 100); do
    port=$(sed -n 's/.*metrics on .*(port \([0-9]*\)).*/\1/p' "$1")
    [ -n "$port" ] && { echo "$port"; return; }
    sleep 0.1
  done
  fail "no metrics port in $1"
}
# promtool and the manual on one exposition; prints the exposition's file.
check() {
  local name=$1 port=$2
  curl -sf "http://127.0.0.1:$port/metrics" > "$dir/$name.txt" || fail "$name: no /metrics"
  promtool check metrics < "$dir/$name.txt" > "$dir/$name.promtool" 2>&1 ||
    { cat "$dir/$name.promtool"; fail "$name: promtool check metrics"; }
  grep -q "^flowtune_${name}_up 1$" "$dir/$name.txt" || fail "flowtune_${name}_up is not 1"
  for m in $(sed -n 's/^# TYPE \(flowtune_[a-z_]*\) .*/\1/p' "$dir/$name.txt"); do
    grep -q "| \`$m\` |" "$src/docs/operate.md" || fail "$m is exposed but not in docs/operate.md"
  done
}
value() { sed -n "s/^$2 \([0-9.e+]*\)$/\1/p" "$dir/$1.txt"; }
status() { "$ctl" --allocator "$1" --json status | python3 -c "import json,sys; print(json.load(sys.stdin)$2)"; }

"$alloc" --listen "ipc://$dir/a.sock" --host-gbps 1 > "$dir/alloc.log" 2>&1 &
"$relay" --listen "ipc://$dir/r.sock" --upstream "ipc://$dir/a.sock" --metrics 127.0.0.1:0 > "$dir/relay.log" 2>&1 &
wport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$witness" --listen "tcp://127.0.0.1:$wport" --metrics 127.0.0.1:0 > "$dir/witness.log" 2>&1 &
rport=$(metrics_port "$dir/relay.log")
xport=$(metrics_port "$dir/witness.log")

iperf3 -s -1 -B 127.0.0.2 -p 5421 > /dev/null 2>&1 &
sleep 0.3
"$run" --allocator "ipc://$dir/r.sock" -- iperf3 -c 127.0.0.2 -p 5421 -B 127.0.0.1 -n 20M > "$dir/iperf.log" 2>&1 ||
  fail "iperf3 under flowtune-run through the relay"
sleep 0.5  # the endpoint's last messages through the relay

check relay "$rport"
up=$(value relay flowtune_relay_messages_up_total)
want=$(status "ipc://$dir/r.sock" '["counters"]["messages_up"]')
echo "relay: messages up $up in the metrics, $want in flowtune-ctl status"
[ "$up" = "$want" ] && [ "$up" -gt 0 ] || fail "relay: flowtune_relay_messages_up_total $up, status $want"

check witness "$xport"
claims=$(value witness flowtune_witness_claims_total)
want=$(status "tcp://127.0.0.1:$wport" '["counters"]["claims"]')
[ "$claims" = "$want" ] || fail "witness: flowtune_witness_claims_total $claims, status $want"
echo "PASS: relay and witness expositions pass promtool and match flowtune-ctl status"
