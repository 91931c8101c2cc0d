#!/usr/bin/env bash
# flowtune-pacer follows a rotation of the allocator's CURVE key without a
# restart (docs/security.md#rotating-keys-without-a-restart). In a private
# network namespace: an allocator under CURVE and two pacers, each shaping
# one end of a veth pair. Pacer h0 names the allocator's key by its file;
# pacer h1 is given the key itself (40 characters), so it cannot follow.
# The clients' file changes first, then the allocator's secret and a
# SIGHUP. Passes when the allocator hears h0 again after the rotation (its
# message count grows, it is not idle) and h1 falls silent; fails, with
# both logs, otherwise.
#   key_follow.sh ALLOCATOR PACER CTL
# Needs root (tc, a network namespace): prints SKIP and exits 77 otherwise.
set -euo pipefail
if [ "${1:-}" != --inside ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (tc and a network namespace)"; exit 77; fi
  if ! unshare -n true 2>/dev/null; then echo "SKIP: cannot create a network namespace"; exit 77; fi
  exec unshare -n "$0" --inside "$@"
fi
shift
alloc=$1 pacer=$2 ctl=$3
dir=$(mktemp -d)
cleanup() {
  local pids
  pids=$(jobs -p)
  [ -z "$pids" ] || kill $pids 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
ip link set lo up
ip link add v0 type veth peer name v0p
ip link add v1 type veth peer name v1p
for d in v0 v0p v1 v1p; do ip link set "$d" up; done
cd "$dir"
for k in allocator new-allocator ops; do "$ctl" keygen "$k" > /dev/null; done
"$ctl" keygen h0 --hosts h0 > /dev/null
"$ctl" keygen h1 --hosts h1 > /dev/null
mkdir clients admin
cp h0.pub h1.pub clients/
cp ops.pub admin/
cp allocator.pub server.pub  # the file pacer h0 and flowtune-ctl read
ep=tcp://127.0.0.1:5571
"$alloc" --listen "$ep" --hosts 2 --curve-secret allocator.key --curve-clients clients \
  --curve-admin admin > alloc.log 2>&1 &
apid=$!
"$pacer" --dev v0 --host h0 --allocator "$ep" --curve-server server.pub --curve-key h0.key > h0.log 2>&1 &
fixed=$(sed -n 's/^public-key = "\(.*\)"$/\1/p' allocator.pub)
"$pacer" --dev v1 --host h1 --allocator "$ep" --curve-server "$fixed" --curve-key h1.key > h1.log 2>&1 &

fail() {
  echo "FAIL: $1"
  for f in alloc.log h0.log h1.log; do echo "--- $f"; tail -n 20 "$f"; done
  exit 1
}
# "messages idle_ms" of the endpoint on HOST; nothing if it has none or the
# allocator did not answer (it may be rebinding).
seen() {
  { "$ctl" --allocator "$ep" --curve-server server.pub --curve-key ops.key --json endpoints 2>/dev/null || true; } |
    python3 -c 'import json,sys
text = sys.stdin.read()
for e in json.loads(text) if text.strip() else []:  # the endpoints, every page joined
    if e["host"] == sys.argv[1]: print(e["messages"], int(e["idle_ms"]))' "$1"
}
wait_for() {  # CONDITION SECONDS WHAT (a CONDITION may use set --)
  local cond=$1 what=$3 end=$((SECONDS + $2))
  until eval "$cond"; do
    [ $SECONDS -lt $end ] || fail "$what"
    sleep 0.2
  done
}
wait_for '[ -n "$(seen h0)" ] && [ -n "$(seen h1)" ]' 10 "the pacers never registered"

# The rotation: clients' file first, then the allocator's key and a reload.
cp new-allocator.pub server.pub
cp new-allocator.key allocator.key
kill -HUP "$apid"
wait_for 'grep -q "key changed" h0.log' 10 "pacer h0 did not follow the allocator's key file"
wait_for '[ -n "$(seen h0)" ]' 10 "the allocator did not answer after the rotation"
before=$(seen h0 | cut -d' ' -f1)
wait_for 'set -- $(seen h0); [ -n "${1:-}" ] && [ "$1" -gt "$before" ] && [ "$2" -lt 2000 ]' 10 \
  "the allocator did not hear pacer h0 after the rotation"
# The control: pacer h1 holds the old key and is not heard again.
wait_for 'set -- $(seen h1); [ -z "${2:-}" ] || [ "$2" -ge 3000 ]' 15 \
  "pacer h1, given the old key itself, was still heard: the test cannot tell following from not"
grep -q "key changed" h1.log && fail "pacer h1 claims to have followed a key it was given as text"
echo "pacer h0 followed the rotation (messages $before -> $(seen h0 | cut -d' ' -f1)); h1 fell silent"
