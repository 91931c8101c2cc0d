#!/usr/bin/env bash
# The allocator's metrics read by a real Prometheus server (Debian's
# prometheus package), while iperf3 transfers run under flowtune-run:
#   - promtool check metrics passes on the exposition, idle and under load;
#   - every flowtune_ metric exposed is in docs/operate.md's table;
#   - through PromQL over Prometheus's HTTP API, the flowlet-start rate is
#     above 0, and flowtune_allocator_flows equals what flowtune-ctl status
#     reports at the same moment (asked before and after the query, equal).
# Skips (exit 77, with the reason) without prometheus, promtool, iperf3 or
# curl, and in sanitizer builds.
#   metrics_prometheus.sh ALLOCATOR CTL RUN SOURCE_DIR [sanitized|plain]
set -euo pipefail
alloc=$1 ctl=$2 run=$3 src=$4
if [ "${5:-plain}" = sanitized ]; then
  echo "SKIP: sanitizer build: the shim would be preloaded into an uninstrumented iperf3 (run in the release preset)"
  exit 77
fi
for tool in prometheus promtool iperf3 curl python3; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed (apt-get install prometheus iperf3 curl)"; exit 77; }
done
. "$(dirname "$0")/../../scripts/ops_lib.sh"
ep="ipc://$dir/allocator.sock"

"$alloc" --listen "$ep" --host-gbps 0.2 --metrics 127.0.0.1:0 > "$dir/alloc.log" 2>&1 &
mport=$(metrics_port "$dir/alloc.log")
check_exposition allocator "$mport" "$src"  # idle

pport=$(free_port)
cat > "$dir/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: flowtune-allocator
    static_configs:
      - targets: ["127.0.0.1:$mport"]
YML
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
  --web.listen-address="127.0.0.1:$pport" > "$dir/prom.log" 2>&1 &
# The value of an instant PromQL query (the first series), or "none".
query() {
  curl -sf --get "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "none")' 2>/dev/null || echo none
}
ctl_flows() { "$ctl" --allocator "$ep" --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["flows"])'; }

# Traffic: one long transfer (a steady flow), and short ones every 0.7 s
# (flowlet starts), each under flowtune-run.
iperf3 -s -B 127.0.0.2 -p 5411 > /dev/null 2>&1 &
iperf3 -s -B 127.0.0.2 -p 5412 > /dev/null 2>&1 &
sleep 0.3
"$run" --allocator "$ep" -- iperf3 -c 127.0.0.2 -p 5411 -B 127.0.0.1 -t 40 > "$dir/long.log" 2>&1 &
( while :; do
    "$run" --allocator "$ep" -- iperf3 -c 127.0.0.2 -p 5412 -B 127.0.0.1 -n 2M > /dev/null 2>&1 || true
    sleep 0.7
  done ) &

up=none
for _ in $(seq 60); do
  up=$(query 'up{job="flowtune-allocator"}')
  [ "$up" = 1 ] && break
  sleep 0.5
done
[ "$up" = 1 ] || fail "Prometheus did not scrape the allocator (up = $up)"
check_exposition allocator "$mport" "$src"  # under load

rate=none
for _ in $(seq 40); do
  rate=$(query 'rate(flowtune_allocator_flowlet_starts_total[10s])')
  python3 -c "import sys; sys.exit(0 if '$rate' != 'none' and float('$rate') > 0 else 1)" && break
  sleep 0.5
done
python3 -c "import sys; sys.exit(0 if '$rate' != 'none' and float('$rate') > 0 else 1)" ||
  fail "rate(flowtune_allocator_flowlet_starts_total[10s]) = $rate, not above 0"
echo "flowlet-start rate from Prometheus: $rate /s"

# The same moment: flowtune-ctl before and after the query agree, and so
# does Prometheus's latest sample (scraped within the last second).
for i in $(seq 30); do
  before=$(ctl_flows)
  prom=$(query 'flowtune_allocator_flows')
  after=$(ctl_flows)
  echo "attempt $i: flowtune-ctl $before, Prometheus $prom, flowtune-ctl $after"
  if [ "$before" = "$after" ] && [ "$before" -gt 0 ] && [ "$prom" = "$before" ]; then
    echo "PASS: flows $prom in Prometheus and flowtune-ctl; flowlet starts at $rate /s"
    exit 0
  fi
  sleep 0.4
done
fail "flowtune_allocator_flows in Prometheus never matched flowtune-ctl status in 30 tries"
