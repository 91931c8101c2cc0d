#!/usr/bin/env bash
# The systemd units of packaging/systemd: `systemd-analyze verify` accepts
# each (with ExecStart pointing at this build's binaries, since /usr/bin has
# none before the packages are installed) and prints nothing: verify exits
# 0 on an unknown key or a bad value, so any output fails. Then the
# hardening the issue asks for: Restart=on-failure and NoNewPrivileges
# everywhere, no root and no capability for the allocator, the relay and
# the witness (DynamicUser, an empty bounding set), CAP_NET_ADMIN alone for
# the pacer, and root with an empty bounding set for the host agent (its
# processes trust only root or their own user). Skips (77) without
# systemd-analyze.
#   units_verify.sh SOURCE_DIR ALLOCATOR RELAY WITNESS PACER AGENT
set -euo pipefail
src=$1 alloc=$2 relay=$3 witness=$4 pacer=$5 agent=$6
command -v systemd-analyze > /dev/null || { echo "SKIP: systemd-analyze is not installed (apt-get install systemd)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $1"; exit 1; }
for u in "$src"/packaging/systemd/*.service; do
  sed -e "s|/usr/bin/flowtune-allocator|$alloc|g; s|/usr/bin/flowtune-relay|$relay|g" \
      -e "s|/usr/bin/flowtune-witness|$witness|g; s|/usr/bin/flowtune-pacer|$pacer|g" \
      -e "s|/usr/bin/flowtune-agent|$agent|g" "$u" > "$dir/$(basename "$u")"
done
cp "$dir/flowtune-pacer@.service" "$dir/flowtune-pacer@eth0.service"
for u in flowtune-allocator.service flowtune-relay.service flowtune-witness.service flowtune-pacer@eth0.service \
         flowtune-agent.service; do
  out=$(cd "$dir" && systemd-analyze verify "./$u" 2>&1) || fail "systemd-analyze verify $u: $out"
  [ -z "$out" ] || fail "systemd-analyze verify $u said: $out"
  echo "verify $u: ok"
done
key() { sed -n "s/^$2=//p" "$src/packaging/systemd/$1"; }
for u in flowtune-allocator.service flowtune-relay.service flowtune-witness.service flowtune-pacer@.service \
         flowtune-agent.service; do
  [ "$(key "$u" Restart)" = on-failure ] || fail "$u: Restart is not on-failure"
  [ "$(key "$u" NoNewPrivileges)" = yes ] || fail "$u: NoNewPrivileges is not yes"
done
for u in flowtune-allocator.service flowtune-relay.service flowtune-witness.service; do
  [ "$(key "$u" DynamicUser)" = yes ] || fail "$u runs as root (no DynamicUser=yes)"
  grep -qx 'CapabilityBoundingSet=' "$src/packaging/systemd/$u" || fail "$u keeps capabilities"
  [ -z "$(key "$u" User)" ] || fail "$u names a User"
done
[ "$(key flowtune-pacer@.service CapabilityBoundingSet)" = CAP_NET_ADMIN ] || fail "the pacer's bounding set is not CAP_NET_ADMIN alone"
[ "$(key flowtune-pacer@.service AmbientCapabilities)" = CAP_NET_ADMIN ] || fail "the pacer's ambient set is not CAP_NET_ADMIN alone"
grep -qx 'CapabilityBoundingSet=' "$src/packaging/systemd/flowtune-agent.service" || fail "the agent keeps capabilities"
grep -qx 'AmbientCapabilities=' "$src/packaging/systemd/flowtune-agent.service" || fail "the agent is given capabilities"
[ -z "$(key flowtune-agent.service User)$(key flowtune-agent.service DynamicUser)" ] ||
  fail "the agent runs as another user than root: processes would not trust its socket"
grep -q '^PrivateNetwork=yes' "$src/packaging/systemd/flowtune-agent.service" &&
  fail "the agent runs in a network namespace of its own: the host's processes would not find it"
echo "PASS"
