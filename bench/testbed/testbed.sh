#!/usr/bin/env bash
# A datacenter testbed on one machine: N hosts as network namespaces on one
# bridge, each host's downlink (switch port -> host) shaped by tbf to a chosen
# rate with a chosen buffer, plus a namespace for flowtune-allocator on the
# same bridge, so control traffic competes with data as in the paper (§5.3).
#
#   bench/testbed/testbed.sh up [--hosts N] [--rate RATE] [--buffer BYTES] [--prefix P]
#                               [--racks R [--uplink-rate RATE]]
#                               [--topology FILE] [--allocator] [--alloc-args "ARGS"]
#   bench/testbed/testbed.sh shape HOST RATE BUFFER   (re-shape one downlink)
#   bench/testbed/testbed.sh exec HOST CMD...         (run CMD inside host HOST: h0.., ctl)
#   bench/testbed/testbed.sh down [--prefix P]
#   bench/testbed/testbed.sh run [up options] -- CMD...  (up, run CMD, always tear down)
#
# With --racks R, hosts are split into R racks: each rack's hosts hang off
# a ToR bridge (namespace P-torK) whose link to the core bridge is shaped in
# both directions to --uplink-rate (default: the rack's hosts' sum, full
# bisection), and the topology file is a two-tier network with one spine.
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
racks=1
uplink_rate=""
start_allocator=0
alloc_args=""
allocator_bin=${FT_ALLOCATOR_BIN:-$top/build/release/allocator/daemon/flowtune-allocator}

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
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

add_bridge() {
  ip netns add "$(ns "$1")"
  ip -n "$(ns "$1")" link set lo up
  ip -n "$(ns "$1")" link add br0 type bridge
  ip -n "$(ns "$1")" link set br0 up
}

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
  local where
  where=$(port_ns "p$h") || die "no switch port for host '$h'"
  ip netns exec "$where" tc qdisc replace dev "p$h" root handle 1: tbf rate "$r" \
    burst 16kb limit "$b"
}

# The switch namespace (core or ToR) that holds port $1.
port_ns() {
  local n
  for n in $(ip netns list | awk '{print $1}' | grep -E "^$prefix-(sw|tor[0-9]+)$"); do
    ip -n "$n" link show "$1" >/dev/null 2>&1 && { echo "$n"; return 0; }
  done
  return 1
}

down() {
  local n
  for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(sw|ctl|tor[0-9]+|h[0-9]+)$" || true); do
    # Kill what still runs inside first, or it lives on in a namespace no
    # longer named; again until none is left, since a dying process may
    # fork (a sender that forks a child per connection).
    local pids try
    for try in 1 2 3 4 5 6 7 8 9 10; do
      pids=$(ip netns pids "$n" 2>/dev/null || true)
      [ -z "$pids" ] && break
      # shellcheck disable=SC2086
      kill $([ "$try" -gt 3 ] && echo -9) $pids 2>/dev/null || true
      sleep 0.1
    done
    ip netns del "$n" 2>/dev/null || true
  done
}

# add_port NAME ADDR [SWITCH]: namespace NAME on SWITCH's bridge (default sw).
add_port() {
  local name=$1 addr=$2 sw=${3:-sw} nsname
  nsname=$(ns "$name")
  ip netns add "$nsname"
  ip -n "$nsname" link set lo up
  ip -n "$(ns "$sw")" link add "p$name" type veth peer name eth0 netns "$nsname"
  ip -n "$(ns "$sw")" link set "p$name" master br0 up
  ip -n "$nsname" addr add "$addr/16" dev eth0
  ip -n "$nsname" link set eth0 up
}

write_topology() {
  local file=$1 n=$2 gbps=$3 i
  {
    if [ "$racks" -gt 1 ]; then
      echo "# Written by bench/testbed/testbed.sh: $racks racks of $((n / racks)) hosts, one"
      echo "# core bridge as the spine; host links $gbps Gbit/s."
      echo 'kind = "two_tier"'
      echo "racks = $racks"
      echo "hosts_per_rack = $((n / racks))"
      echo "spines = 1"
      echo "host_gbps = $gbps"
      echo "spine_gbps = $(gbps_of "$uplink_rate")"
    else
      echo "# Written by bench/testbed/testbed.sh: $n hosts on one bridge (a big"
      echo "# switch), every host link $gbps Gbit/s."
      echo 'kind = "big_switch"'
      echo "hosts = $n"
      echo "host_gbps = $gbps"
    fi
    for ((i = 0; i < n; i++)); do
      echo
      echo "[[host]]"
      echo "index = $i"
      echo "name = \"h$i\""
      echo "addresses = [\"$(addr_of "$i")\"]"
    done
  } >"$file"
}

up() {
  need_root
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] && [ "$hosts" -le 200 ] ||
    die "--hosts must be 2..200, got '$hosts'"
  [[ "$racks" =~ ^[0-9]+$ ]] && [ "$racks" -ge 1 ] && [ $((hosts % racks)) -eq 0 ] ||
    die "--racks must divide --hosts ($hosts), got '$racks'"
  down
  add_bridge sw
  local i k per=$((hosts / racks))
  if [ "$racks" -gt 1 ]; then
    [ -n "$uplink_rate" ] || uplink_rate="$(python3 -c "print('%gmbit' % ($(gbps_of "$rate") * 1000 * $per))")"
    for ((k = 0; k < racks; k++)); do
      add_bridge "tor$k"
      # ToR k's uplink: u<k> in the ToR, r<k> on the core; each direction
      # shaped where it leaves a switch.
      ip -n "$(ns "tor$k")" link add "u$k" type veth peer name "r$k" netns "$(ns sw)"
      ip -n "$(ns "tor$k")" link set "u$k" master br0 up
      ip -n "$(ns sw)" link set "r$k" master br0 up
      ip netns exec "$(ns "tor$k")" tc qdisc replace dev "u$k" root tbf rate "$uplink_rate" \
        burst 16kb limit "$buffer"
      ip netns exec "$(ns sw)" tc qdisc replace dev "r$k" root tbf rate "$uplink_rate" \
        burst 16kb limit "$buffer"
    done
  fi
  for ((i = 0; i < hosts; i++)); do
    if [ "$racks" -gt 1 ]; then
      add_port "h$i" "$(addr_of "$i")" "tor$((i / per))"
    else
      add_port "h$i" "$(addr_of "$i")"
    fi
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
      --racks) racks=${2:?--racks needs a value}; shift 2 ;;
      --uplink-rate) uplink_rate=${2:?--uplink-rate needs a value}; gbps_of "$uplink_rate" >/dev/null; shift 2 ;;
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
  up)
    parse_up "$@"
    # A failure half-way leaves nothing behind.
    trap 'rc=$?; [ "$rc" -eq 0 ] || down; exit "$rc"' EXIT
    trap 'exit 130' INT TERM
    up
    trap - EXIT INT TERM
    ;;
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
