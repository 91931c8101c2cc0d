#!/usr/bin/env bash
# The operator's path of docs/operate.md, on the CI machine: build the
# .debs (lintian: no error), install them with apt, check the installed
# units with systemd-analyze verify, start the installed allocator from a
# config file as its unit does (no systemd runs in CI's container), wait
# for `flowtune-ctl health`, run the quick-start demo against the
# installed binaries, and see its flowlets in the allocator's metrics
# (promtool check metrics). Purges the packages on exit.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
mapfile -t debs < <(scripts/package.sh)
tmp=$(mktemp -d)
apid=
cleanup() {
  [ -z "$apid" ] || kill "$apid" 2>/dev/null || true
  wait 2>/dev/null || true
  apt-get purge -y -qq flowtune-allocator flowtune-run flowtune-pacer flowtune-relay flowtune-witness flowtune-agent \
    libflowtune-dev libflowtune0.2 > /dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
apt-get install -y -qq "${debs[@]}" > "$tmp/apt.log" 2>&1 || { tail -n 20 "$tmp/apt.log"; exit 1; }
for u in flowtune-allocator.service flowtune-relay.service flowtune-witness.service flowtune-pacer@eth0.service \
         flowtune-agent.service; do
  out=$(systemd-analyze verify "$u" 2>&1) && [ -z "$out" ] || { echo "systemd-analyze verify $u: $out"; exit 1; }
done
# The installed example, with the demo's 200 Mbit/s links and a private
# listener; as the unit starts it: --check-config, then the daemon.
ep="ipc://$tmp/allocator.sock"
sed -e "s|^listen = .*|listen = \"$ep\"|; s|^host-gbps = .*|host-gbps = 0.2|" \
    -e 's|^metrics = .*|metrics = "127.0.0.1:0"|' /etc/flowtune/allocator.toml > "$tmp/allocator.toml"
flowtune-allocator --config "$tmp/allocator.toml" --check-config > /dev/null
flowtune-allocator --config "$tmp/allocator.toml" > "$tmp/allocator.log" 2>&1 &
apid=$!
for _ in $(seq 50); do flowtune-ctl --allocator "$ep" health > /dev/null 2>&1 && break; sleep 0.1; done
flowtune-ctl --allocator "$ep" health
scripts/demo.sh --installed --allocator "$ep" > "$tmp/demo.log" 2>&1 || { cat "$tmp/demo.log"; exit 1; }
grep -E "^t=|sender" "$tmp/demo.log" | tail -n 6
port=$(sed -n 's/.*metrics on .*(port \([0-9]*\)).*/\1/p' "$tmp/allocator.log")
curl -sf "http://127.0.0.1:$port/metrics" > "$tmp/metrics.txt"
promtool check metrics < "$tmp/metrics.txt"
# Flowlets taken up, from starts and from the resync an endpoint sends
# when it connects (which carries the flowlet that made it connect).
flowlets=$(python3 -c '
import re, sys
print(int(sum(float(v) for v in re.findall(r"^flowtune_allocator_flows_started_total\{[^}]*\} (\S+)$", open(sys.argv[1]).read(), re.M))))' "$tmp/metrics.txt")
[ "$flowlets" -ge 3 ] || { echo "flowtune_allocator_flows_started_total sums to $flowlets after the demo's three transfers"; exit 1; }
# The host agent's settings may hold the host's CURVE secret: root's alone.
[ "$(stat -c %a:%U /etc/default/flowtune-agent)" = 600:root ] ||
  { echo "/etc/default/flowtune-agent is $(stat -c %a:%U /etc/default/flowtune-agent), not 600:root"; exit 1; }
flowtune-agent --help > /dev/null
echo "packages: installed, demo ran against them, $flowlets flowlets in the metrics"
