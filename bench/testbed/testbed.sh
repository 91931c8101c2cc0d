#!/usr/bin/env bash
# A datacenter testbed on one machine: N hosts as network namespaces on one
# bridge, each host's downlink (switch port -> host) shaped by tbf to a chosen
# rate with a chosen buffer, plus a namespace for flowtune-allocator on the
# same bridge, so control traffic competes with data as in the paper (§5.3).
#
#   bench/testbed/testbed.sh up [--hosts N] [--rate RATE] [--buffer BYTES] [--prefix P]
#                               [--topology FILE] [--allocator] [--alloc-args "ARGS"]
#   bench/testbed/testbed.sh shape HOST RATE BUFFER   (re-shape one downlink)
#   bench/testbed/testbed.sh exec HOST CMD...         (run CMD inside host HOST: h0.., ctl)
#   bench/testbed/testbed.sh down [--prefix P]
#   bench/testbed/testbed.sh run [up options] -- CMD...  (up, run CMD, always tear down)
#
# Hosts hI get 10.77.0.(I+1)/16, the allocator namespace 10.77.0.254 and
# listens on tcp://10.77.0.254:5555. Nothing is added to the root namespace:
# the bridge lives in its own namespace (P-sw), and veth pairs are created
# inside the namespaces. `up` first removes namespaces with the same prefix
# left by a crashed run. Needs root.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${FT_TESTBED_PREFIX:-ftb}
hosts=9
rate=1gbit
buffer=100000
topology=""
start_allocator=0
alloc_args=""
allocator_bin=${FT_ALLOCATOR_BIN:-$top/build/release/allocator/daemon/flowtune-allocator}

usage() {
  sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
}

die() {
  echo "testbed: $*" >&2
  exit 2
}

need_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth, tc); run it with sudo"
  command -v ip >/dev/null || die "'ip' (iproute2) is missing"
  command -v tc >/dev/null || die "'tc' (iproute2) is missing"
}

ns() { echo "$prefix-$1"; }

# Host index -> address; the allocator's namespace is "ctl".
addr_of() {
  if [ "$1" = ctl ]; then echo 10.77.0.254; else echo "10.77.0.$(($1 + 1))"; fi
}

# Gbit/s for the topology file from a tc rate such as 1gbit, 100mbit, 500Mbit.
gbps_of() {
  python3 - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)bit", sys.argv[1].lower())
if not m:
    sys.exit("testbed: rate must look like 1gbit or 100mbit, got %r" % sys.argv[1])
print(float(m.group(1)) * {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0}[m.group(2)])
EOF
}

# The bottleneck: tbf on the switch port towards the host, i.e. the host's
# downlink, with BUFFER bytes of queue. The burst is small (a few packets)
# so the link never sends faster than RATE for long; tbf splits GSO
# segments larger than the burst itself.
shape() {
  local h=$1 r=$2 b=$3
  gbps_of "$r" >/dev/null
  [[ "$b" =~ ^[0-9]+$ ]] && [ "$b" -ge 3000 ] || die "buffer must be bytes >= 3000, got '$b'"
  ip netns exec "$(ns sw)" tc qdisc replace dev "p$h" root handle 1: tbf rate "$r" \
    burst 16kb limit "$b"
}

down() {
  local n
  for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(sw|ctl|h[0-9]+)$" || true); do
    # Killing what still runs inside first lets the namespace go at once.
    local pids
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    [ -n "$pids" ] && kill $pids 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  done
}

add_port() {
  local name=$1 addr=$2 nsname
  nsname=$(ns "$name")
  ip netns add "$nsname"
  ip -n "$nsname" link set lo up
  ip -n "$(ns sw)" link add "p$name" type veth peer name eth0 netns "$nsname"
  ip -n "$(ns sw)" link set "p$name" master br0 up
  ip -n "$nsname" addr add "$addr/16" dev eth0
  ip -n "$nsname" link set eth0 up
}

write_topology() {
  local file=$1 n=$2 gbps=$3 i
  {
    echo "# Written by bench/testbed/testbed.sh: $n hosts on one bridge (a big"
    echo "# switch), every host link $gbps Gbit/s."
    echo 'kind = "big_switch"'
    echo "hosts = $n"
    echo "host_gbps = $gbps"
    for ((i = 0; i < n; i++)); do
      echo
      echo "[[host]]"
      echo "name = \"h$i\""
      echo "addresses = [\"$(addr_of "$i")\"]"
    done
  } >"$file"
}

up() {
  need_root
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] && [ "$hosts" -le 200 ] ||
    die "--hosts must be 2..200, got '$hosts'"
  down
  ip netns add "$(ns sw)"
  ip -n "$(ns sw)" link set lo up
  ip -n "$(ns sw)" link add br0 type bridge
  ip -n "$(ns sw)" link set br0 up
  local i
  for ((i = 0; i < hosts; i++)); do
    add_port "h$i" "$(addr_of "$i")"
    shape "h$i" "$rate" "$buffer"
  done
  add_port ctl "$(addr_of ctl)"
  if [ -n "$topology" ]; then
    write_topology "$topology" "$hosts" "$(gbps_of "$rate")"
  fi
  if [ "$start_allocator" = 1 ]; then
    [ -x "$allocator_bin" ] || die "no allocator at $allocator_bin (scripts/build.sh release)"
    [ -n "$topology" ] || die "--allocator needs --topology FILE"
    # shellcheck disable=SC2086
    ip netns exec "$(ns ctl)" "$allocator_bin" --listen "tcp://$(addr_of ctl):5555" \
      --topology "$topology" --log-level warn $alloc_args &
    echo $! >"${topology%.toml}.allocator.pid"
  fi
}

parse_up() {
  while [ $# -gt 0 ]; do
    case $1 in
      --hosts) hosts=${2:?--hosts needs a value}; shift 2 ;;
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --buffer) buffer=${2:?--buffer needs a value}; shift 2 ;;
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --topology) topology=${2:?--topology needs a value}; shift 2 ;;
      --allocator) start_allocator=1; shift ;;
      --alloc-args) alloc_args=${2?--alloc-args needs a value}; shift 2 ;;
      --) shift; rest=("$@"); return ;;
      *) die "unknown option '$1' (see --help)" ;;
    esac
  done
  rest=()
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  -h | --help | help | "") usage ;;
  up) parse_up "$@"; up ;;
  down) parse_up "$@"; need_root; down ;;
  shape) need_root; [ $# -eq 3 ] || die "usage: shape HOST RATE BUFFER"; shape "$@" ;;
  exec)
    need_root
    [ $# -ge 2 ] || die "usage: exec HOST CMD..."
    h=$1; shift
    exec ip netns exec "$(ns "$h")" "$@"
    ;;
  run)
    parse_up "$@"
    [ ${#rest[@]} -gt 0 ] || die "usage: run [up options] -- CMD..."
    need_root
    trap 'down' EXIT
    trap 'exit 130' INT TERM
    up
    "${rest[@]}"
    ;;
  *) die "unknown command '$cmd' (up, down, shape, exec, run; --help)" ;;
esac
