#!/usr/bin/env bash
# flowtune-pacer --metrics, live, in a private network namespace: an
# allocator, a pacer shaping v0 (one end of a veth pair) at 1 Mbit/s, and
# 7,000 raw 1,500-byte frames sent out of v0 at once: 10.5 MB, past the
# tbf's 8 MB queue, so it must drop some. Passes when promtool check metrics accepts the exposition,
# every flowtune_ metric exposed is in docs/operate.md, the pacer says it
# is registered, and flowtune_pacer_qdisc_drops_total is above 0 and equals
# the drops `tc -s -j qdisc show dev v0` reports.
#   metrics_live.sh ALLOCATOR PACER SOURCE_DIR
# Needs root (tc, a network namespace) and promtool: prints SKIP and exits
# 77 otherwise.
set -euo pipefail
if [ "${1:-}" != --inside ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (tc and a network namespace)"; exit 77; fi
  if ! unshare -n true 2>/dev/null; then echo "SKIP: cannot create a network namespace"; exit 77; fi
  for tool in promtool curl python3 tc; do
    command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
  done
  exec unshare -n "$0" --inside "$@"
fi
shift
alloc=$1 pacer=$2 src=$3
. "$(dirname "$0")/../scripts/ops_lib.sh"
ip link set lo up
ip link add v0 type veth peer name v0p
ip link set v0 up
ip link set v0p up
ep=tcp://127.0.0.1:5581
"$alloc" --listen "$ep" --hosts 2 --host-gbps 0.001 > "$dir/alloc.log" 2>&1 &
"$pacer" --dev v0 --host h0 --allocator "$ep" --link-rate 1mbit --metrics 127.0.0.1:0 \
  > "$dir/pacer.out" 2> "$dir/pacer.log" &
for _ in $(seq 100); do grep -q registered "$dir/pacer.out" 2>/dev/null && break; sleep 0.1; done
grep -q registered "$dir/pacer.out" || fail "the pacer did not register"
port=$(metrics_port "$dir/pacer.log")

python3 - <<'PY'
import socket
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.setsockopt(socket.SOL_SOCKET, 32, 64 << 20)  # SO_SNDBUFFORCE: never wait for the socket
s.bind(("v0", 0))
frame = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x00" + b"\x00" * 1486
for _ in range(7000):
    try:
        s.send(frame, socket.MSG_DONTWAIT)
    except OSError:
        pass  # ENOBUFS: the qdisc dropped it
PY
sleep 0.2
check_exposition pacer "$port" "$src"
tc_drops=$(tc -s -j qdisc show dev v0 | python3 -c 'import json,sys; print([q for q in json.load(sys.stdin) if q.get("root")][0]["drops"])')
grep -q '^flowtune_pacer_registered{dev="v0"} 1$' "$dir/pacer.txt" || fail "flowtune_pacer_registered is not 1"
drops=$(sed -n 's/^flowtune_pacer_qdisc_drops_total{dev="v0"} \([0-9]*\)$/\1/p' "$dir/pacer.txt")
echo "drops: $drops in the metrics, $tc_drops from tc -s"
[ -n "$drops" ] && [ "$drops" -gt 0 ] && [ "$drops" = "$tc_drops" ] || fail "qdisc drops: metrics '$drops', tc $tc_drops"
echo "PASS"
