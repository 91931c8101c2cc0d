#!/bin/bash
# What a rate change costs a host shaper: one iperf3 flow (cubic) through a
# qdisc at a fixed rate between two namespaces, while the qdisc is "changed"
# N times a second to the same rate (alternately +0.1%), as flowtune-pacer
# changes it when the allocator moves the host's rate. tbf refills its bucket
# on every change (tbf_change sets tokens = buffer), so each change can let a
# bucket through above the rate; htb keeps a class's tokens. Goodput is
# reported beside the same layout and bucket with no changes, measured in the
# same run (ratio > 1: changes leak bytes; < 1: changes stall the shaper).
# Rows are interleaved so a drifting machine shifts all of them alike.
#
# usage: sudo bench/e2e/shaper_changes.sh [--rate-mbit R] [--buckets "B ..."]
#          [--changes "N ..."] [--layouts "tbf htb"] [--runs K] [--seconds S]
# Prints one JSON object: {"rate_mbit":..,"rows":[{layout,bucket_bytes,
# changes_per_s,runs,goodput_mbps:[..],median_mbps,ratio}]}.
set -euo pipefail

rate_mbit=200 buckets="3028 25000" changes="0 1000" layouts="tbf htb" runs=3 seconds=4
while [ $# -gt 0 ]; do
  case $1 in
    --rate-mbit) rate_mbit=$2; shift 2 ;;
    --buckets) buckets=$2; shift 2 ;;
    --changes) changes=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "shaper_changes.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "shaper_changes.sh: needs root (namespaces, tc)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "shaper_changes.sh: needs iperf3 (scripts/install-deps.sh)" >&2; exit 2; }

A=ftsc-a$$ Z=ftsc-z$$
teardown() { ip netns del "$A" 2>/dev/null || true; ip netns del "$Z" 2>/dev/null || true; }
trap teardown EXIT

rate_bit=$((rate_mbit * 1000000))
# The tc line that sets the shaper to RATE with BUCKET (verb: add | change).
shape() { # layout verb rate bucket
  if [ "$1" = tbf ]; then
    echo "qdisc $2 dev va root handle 1: tbf rate ${3}bit burst $4 peakrate $((rate_bit * 1000))bit mtu 3028 limit 8000000"
  else
    echo "class $2 dev va parent 1: classid 1:2 htb rate ${3}bit ceil ${3}bit burst $4 cburst $4 quantum 65536"
  fi
}

one() { # layout bucket changes_per_s -> goodput Mbit/s
  local layout=$1 bucket=$2 cps=$3 gen=
  teardown
  ip netns add "$A"; ip netns add "$Z"
  ip link add va netns "$A" type veth peer name vz netns "$Z"
  ip -n "$A" addr add 10.77.0.1/24 dev va; ip -n "$Z" addr add 10.77.0.2/24 dev vz
  ip -n "$A" link set va up; ip -n "$Z" link set vz up
  if [ "$layout" = tbf ]; then
    # shellcheck disable=SC2046
    ip netns exec "$A" tc $(shape tbf replace "$rate_bit" "$bucket")
  else
    ip netns exec "$A" tc qdisc replace dev va root handle 1: htb default 2
    # shellcheck disable=SC2046
    ip netns exec "$A" tc $(shape htb add "$rate_bit" "$bucket")
  fi
  ip netns exec "$Z" iperf3 -s -1 -D -B 10.77.0.2 >/dev/null
  sleep 0.3
  if [ "$cps" -gt 0 ]; then
    python3 - "$cps" "$rate_bit" "$(shape "$layout" change RATE "$bucket")" "$((seconds + 1))" <<'PY' |
import sys, time
cps, rate, line, secs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
end, i = time.time() + secs, 0
while time.time() < end:
    r = rate if i % 2 == 0 else rate + rate // 1000
    sys.stdout.write(line.replace("RATE", str(r)) + "\n")
    sys.stdout.flush()
    i += 1
    time.sleep(1.0 / cps)
PY
      ip netns exec "$A" tc -force -batch - &
    gen=$!
  fi
  ip netns exec "$A" iperf3 -c 10.77.0.2 -t "$seconds" -J -C cubic |
    python3 -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))'
  [ -n "$gen" ] && wait "$gen" 2>/dev/null || true
}

declare -A got
for ((r = 0; r < runs; r++)); do
  for layout in $layouts; do
    for b in $buckets; do
      for c in $changes; do
        got[$layout,$b,$c]+="$(one "$layout" "$b" "$c") "
      done
    done
  done
done

{
  for layout in $layouts; do
    for b in $buckets; do
      for c in $changes; do echo "$layout $b $c ${got[$layout,$b,$c]}"; done
    done
  done
} | python3 -c '
import json, statistics, sys
rate = float(sys.argv[1]); rows = []; base = {}
for line in sys.stdin:
    f = line.split(); g = [float(x) for x in f[3:]]
    row = {"layout": f[0], "bucket_bytes": int(f[1]), "changes_per_s": int(f[2]),
           "runs": len(g), "goodput_mbps": g, "median_mbps": statistics.median(g)}
    if row["changes_per_s"] == 0: base[(f[0], f[1])] = row["median_mbps"]
    rows.append(row)
for row in rows:
    b = base.get((row["layout"], str(row["bucket_bytes"])))
    row["ratio"] = round(row["median_mbps"] / b, 3) if b else None
print(json.dumps({"rate_mbit": rate, "max_goodput_mbps": round(rate * 1448 / 1514, 1), "rows": rows}, indent=1))
' "$rate_mbit"
