#!/usr/bin/env bash
# CI smoke test of the end-to-end testbed (a few seconds, root).
#
# Brings up 3 namespace hosts behind a 200 Mbit/s bottleneck with the
# allocator on the same bridge, then sends 4 x 2 MB from h1 under
# flowtune-run (the shim) and 4 x 2 MB from h2 through the explicit
# libflowtune API, both to h0. It asserts only facts that do not depend on
# timing: every byte arrived, the allocator registered both hosts and saw
# every flowlet start, it sent rates, the explicit client applied rates, and
# the shim's sockets carried a SO_MAX_PACING_RATE cap while they sent.
# Then the host pacer: h1 sends under flowtune-run --pacer while h2 shares
# the bottleneck; h1's egress must carry a tbf below the link rate (the
# allocator's rate for h1, not a constant), a second pacer on the same device
# must step aside, every byte must arrive, and the qdisc must be gone once
# the command exits. Last, the pacer's packet-size setting
# (net.ipv4.tcp_tso_rtt_log): 0 while its host is shaped below
# --small-tso-below, put back on exit, and after a SIGKILL by the next pacer;
# with --qdisc htb, its filters around the tbf.
# Exits non-zero with the failed check's message; always tears down.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${FT_BUILD_DIR:-$top/build/release}
testbed=$top/bench/testbed/testbed.sh
export FT_TESTBED_PREFIX=ftsmoke
traffic=$bin/bench/e2e/flowtune-traffic
ctl=$bin/allocator/ctl/flowtune-ctl
ep=tcp://10.77.0.254:5555

# The metrics first (these experiments' and the chaos suite's): they need
# neither root nor a network.
python3 "$top/bench/e2e/test_metrics.py" 2>&1 | tail -1 | grep -q '^OK' ||
  { python3 "$top/bench/e2e/test_metrics.py"; echo "smoke: FAIL: bench/e2e/test_metrics.py" >&2; exit 1; }
python3 "$top/bench/chaos/test_metrics.py" 2>&1 | tail -1 | grep -q '^OK' ||
  { python3 "$top/bench/chaos/test_metrics.py"; echo "smoke: FAIL: bench/chaos/test_metrics.py" >&2; exit 1; }

if [ "$(id -u)" -ne 0 ]; then
  echo "smoke: SKIP: needs root to create network namespaces"
  exit 0
fi
if ! ip netns add ftsmoke-probe 2>/dev/null; then
  echo "smoke: SKIP: this machine cannot create network namespaces"
  exit 0
fi
ip netns del ftsmoke-probe
for b in "$traffic" "$ctl" "$bin/preload/flowtune-run" "$bin/allocator/daemon/flowtune-allocator"; do
  [ -x "$b" ] || { echo "smoke: FAIL: $b is missing (scripts/build.sh release)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/ft-smoke.XXXXXX)
pacer=""
cleanup() {
  [ -z "$pacer" ] || kill -TERM "$pacer" 2>/dev/null || true
  "$testbed" down --prefix ftsmoke || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "smoke: FAIL: $*" >&2
  exit 1
}

"$testbed" up --prefix ftsmoke --hosts 3 --rate 200mbit --topology "$tmp/topology.toml" --allocator
ctl_json() { ip netns exec ftsmoke-ctl "$ctl" --allocator "$ep" --timeout-ms 500 --json "$@"; }
for _ in $(seq 50); do ctl_json status >/dev/null 2>&1 && break; sleep 0.1; done
ctl_json status >/dev/null || fail "the allocator does not answer on $ep"

"$testbed" exec h0 "$traffic" recv --listen 10.77.0.1:7000 --expect 8 --timeout-s 30 \
  >"$tmp/recv.json" &
recv=$!
for _ in $(seq 50); do grep -q ready "$tmp/recv.json" 2>/dev/null && break; sleep 0.05; done

"$testbed" exec h1 "$bin/preload/flowtune-run" --allocator "$ep" --host h1 -- \
  "$traffic" send --to 10.77.0.1:7000 --sender 1 --flows 4 --bytes 2000000 --cc cubic \
  >"$tmp/send1.json" &
s1=$!
FLOWTUNE_ALLOCATOR=$ep FLOWTUNE_HOST=h2 "$testbed" exec h2 "$traffic" send --to 10.77.0.1:7000 \
  --sender 2 --flows 4 --bytes 2000000 --cc cubic --api explicit --wait-rate-ms 500 \
  >"$tmp/send2.json" &
s2=$!
# While h1 sends, look for a pacing cap on its sockets (ss shows
# "pacing_rate CURRENT/MAX" only when SO_MAX_PACING_RATE is set).
# Also keep the allocator's flow table as it goes: a flowlet that started
# before its endpoint's hello reaches the allocator in a resync, not as a
# start, so the start counter alone does not show every flowlet. Sample
# until both senders are done: either may finish first.
capped=0
n=0
while kill -0 "$s1" 2>/dev/null || kill -0 "$s2" 2>/dev/null; do
  if ip netns exec ftsmoke-h1 ss -tin dst 10.77.0.1 2>/dev/null | grep -Eq 'pacing_rate [0-9.]+[KMG]?bps/'; then
    capped=1
  fi
  ctl_json flows >"$tmp/flows.$n.json" 2>/dev/null || true
  n=$((n + 1))
  sleep 0.02
done
wait "$s1" || fail "the shim sender failed: $(cat "$tmp/send1.json")"
wait "$s2" || fail "the explicit-API sender failed: $(cat "$tmp/send2.json")"
wait "$recv" || fail "the receiver failed"

python3 - "$tmp" "$capped" "$ctl" <<'EOF' || exit 1
import json, subprocess, sys
tmp, capped = sys.argv[1], sys.argv[2] == "1"
def fail(msg):
    print("smoke: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)
lines = open(tmp + "/recv.json").read().splitlines()
recv = json.loads(lines[-1])
tr = recv["transfers"]
if len(tr) != 8:
    fail("the receiver saw %d transfers, expected 8" % len(tr))
for t in tr:
    if not t["complete"] or t["bytes"] != 2000000:
        fail("transfer %s arrived incomplete: %d of 2000000 bytes" % ((t["sender"], t["flow"]), t["bytes"]))
api = json.loads(open(tmp + "/send2.json").read().splitlines()[-1])["ft"]
if api["connected"] != 1:
    fail("the explicit-API client never reached the allocator: %s" % api)
if api["flowlets_started"] != 4 or api["flowlets_ended"] != 4:
    fail("the explicit-API client reported %s, expected 4 flowlets started and ended" % api)
if api["rates_applied"] < 1:
    fail("the explicit-API client applied no rate: %s" % api)
ep = "tcp://10.77.0.254:5555"
def ctl(*args):
    r = subprocess.run(["ip", "netns", "exec", "ftsmoke-ctl", sys.argv[3], "--allocator", ep,
                        "--json"] + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        fail("flowtune-ctl %s: %s" % (" ".join(args), r.stderr.strip()))
    return json.loads(r.stdout)
st = ctl("status")
c = st["counters"]
hosts = sorted(e["host"] for e in ctl("endpoints"))
if hosts != ["h1", "h2"]:
    fail("the allocator's endpoints are on hosts %s, expected h1 and h2" % hosts)
import glob
seen = set()
rated = set()
for f in glob.glob(tmp + "/flows.*.json"):
    try:
        flows = json.load(open(f))["flows"]
    except (ValueError, KeyError):
        continue
    for fl in flows:
        seen.add((fl["src"], fl["dst"]))
        if fl["rate_bps"] > 0:
            rated.add(fl["src"])
if seen != {("h1", "h0"), ("h2", "h0")}:
    fail("the allocator's flow table held flows %s, expected h1->h0 and h2->h0" % sorted(seen))
if rated != {"h1", "h2"}:
    fail("the allocator gave rates to flows from %s only, expected h1 and h2" % sorted(rated))
if c["starts"] + c["resyncs"] < 2 or c["ends"] < 1:
    fail("the allocator saw %d starts, %d resyncs, %d ends" % (c["starts"], c["resyncs"], c["ends"]))
if c["rate_updates"] < 8:
    fail("the allocator sent %d rate updates, expected at least one per flowlet" % c["rate_updates"])
bad = {k: v for k, v in c["errors"].items() if v}
if bad:
    fail("the allocator refused messages: %s" % bad)
if not capped:
    fail("no SO_MAX_PACING_RATE cap was seen on h1's sockets while the shim sent")
print("smoke: OK: 8 x 2 MB arrived; allocator: hosts %s, flows %s rated, %d starts, %d rate "
      "updates; explicit client applied %d rates; shim sockets paced" % (
          hosts, sorted(rated), c["starts"], c["rate_updates"], api["rates_applied"]))
EOF

# ---- the host pacer (flowtune-pacer through flowtune-run --pacer)
[ -x "$bin/pacer/flowtune-pacer" ] || fail "$bin/pacer/flowtune-pacer is missing (scripts/build.sh release)"
"$testbed" exec h0 "$traffic" recv --listen 10.77.0.1:7001 --expect 4 --timeout-s 30 \
  >"$tmp/recv-p.json" &
recv=$!
for _ in $(seq 50); do grep -q ready "$tmp/recv-p.json" 2>/dev/null && break; sleep 0.05; done
"$testbed" exec h1 "$bin/preload/flowtune-run" --allocator "$ep" --host h1 --pacer eth0 \
  --link-rate 200mbit -- "$traffic" send --to 10.77.0.1:7001 --sender 1 --flows 2 \
  --bytes 8000000 --cc cubic >"$tmp/send-p1.json" 2>"$tmp/send-p1.err" &
s1=$!
FLOWTUNE_ALLOCATOR=$ep FLOWTUNE_HOST=h2 "$testbed" exec h2 "$traffic" send --to 10.77.0.1:7001 \
  --sender 2 --flows 2 --bytes 8000000 --cc cubic --api explicit >"$tmp/send-p2.json" &
s2=$!
rates=""
busy=""
while kill -0 "$s1" 2>/dev/null; do
  r=$(ip netns exec ftsmoke-h1 tc qdisc show dev eth0 | sed -n 's/.*tbf 1: root.* rate \([0-9.]*[KMG]\?bit\).*/\1/p')
  [ -n "$r" ] && rates="$rates $r"
  if [ -z "$busy" ] && [ -n "$r" ]; then
    busy=$(ip netns exec ftsmoke-h1 "$bin/pacer/flowtune-pacer" --dev eth0 --host h1 \
      --allocator "$ep" 2>/dev/null; echo "exit=$?")
  fi
  sleep 0.05
done
wait "$s1" || fail "the paced sender failed: $(cat "$tmp/send-p1.json" "$tmp/send-p1.err")"
wait "$s2" || fail "the second sender failed: $(cat "$tmp/send-p2.json")"
wait "$recv" || fail "the receiver failed"
gone=0
for _ in $(seq 40); do
  ip netns exec ftsmoke-h1 tc qdisc show dev eth0 | grep -q "tbf 1: root" || { gone=1; break; }
  sleep 0.05
done
python3 - "$tmp" "$rates" "$busy" "$gone" <<'EOF' || exit 1
import json, re, sys
tmp, rates, busy, gone = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4] == "1"
def fail(msg):
    print("smoke: FAIL: pacer: " + msg, file=sys.stderr)
    sys.exit(1)
tr = json.loads(open(tmp + "/recv-p.json").read().splitlines()[-1])["transfers"]
if len(tr) != 4 or any(not t["complete"] or t["bytes"] != 8000000 for t in tr):
    fail("not every byte arrived: %s" % [(t["sender"], t["bytes"]) for t in tr])
def bps(r):
    m = re.fullmatch(r"([0-9.]+)([KMG]?)bit", r)
    return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
seen = sorted({bps(r) for r in rates})
if not seen:
    fail("no tbf on h1's eth0 while it sent under flowtune-run --pacer")
# h1 holds about half of the 200 Mbit/s bottleneck while h2 sends: the tbf
# must have followed the allocator below the link rate at some point.
if not any(20e6 < r < 190e6 for r in seen):
    fail("h1's tbf never took an allocated rate: saw %s bit/s" % seen)
if busy.split()[-1:] != ["exit=3"] or not busy.startswith("busy"):
    fail("a second pacer on the same device did not step aside: %r" % busy)
if not gone:
    fail("the tbf outlived the command on h1's eth0")
print("smoke: OK: pacer: h1's egress shaped to %.0f-%.0f Mbit/s while sharing the bottleneck; "
      "a second pacer stepped aside; 4 x 8 MB arrived; the qdisc left with the command" % (
          min(seen) / 1e6, max(seen) / 1e6))
EOF

# ---- the pacer's packet-size setting (--small-tso-below): set to 0 while the
# host is shaped below the threshold (here: any rate under 1 Gbit/s), put back
# on SIGTERM, and put back by the next pacer after a SIGKILL.
tso=/proc/sys/net/ipv4/tcp_tso_rtt_log
if ! ip netns exec ftsmoke-h2 test -e "$tso"; then
  echo "smoke: SKIP: pacer packet size: this kernel has no $tso"
else
  orig=$(ip netns exec ftsmoke-h2 cat "$tso")
  [ "$orig" != 0 ] || ip netns exec ftsmoke-h2 sh -c "echo 9 > $tso"
  orig=$(ip netns exec ftsmoke-h2 cat "$tso")
  pacer_until_small() {  # starts a pacer on h2; waits for it to register and the setting to be 0
    ip netns exec ftsmoke-h2 "$bin/pacer/flowtune-pacer" --dev eth0 --host h2 --allocator "$ep" \
      --link-rate 200mbit --small-tso-below 1gbit --qdisc htb >"$tmp/pacer-tso.out" 2>"$tmp/pacer-tso.err" &
    pacer=$!
    # Registered means past start-up (signals handled, the setting read), so
    # a 0 left by a killed pacer is not mistaken for this one's.
    for _ in $(seq 100); do
      grep -q registered "$tmp/pacer-tso.out" 2>/dev/null &&
        [ "$(ip netns exec ftsmoke-h2 cat "$tso")" = 0 ] && return 0
      sleep 0.05
    done
    fail "pacer packet size: $tso stayed $(ip netns exec ftsmoke-h2 cat "$tso") under a pacer shaping below --small-tso-below ($(cat "$tmp/pacer-tso.err"))"
  }
  pacer_until_small
  # --qdisc htb: small IPv4 and IPv6 packets and the allocator's traffic go
  # around the tbf, by three filters into class 1:1.
  n=$(ip netns exec ftsmoke-h2 tc filter show dev eth0 | grep -c "flowid 1:1" || true)
  [ "$n" -ge 3 ] || fail "pacer --qdisc htb: $n filters around the tbf on h2's eth0, not 3"
  ip netns exec ftsmoke-h2 tc qdisc show dev eth0 | grep -q "tbf 10: parent 1:2" ||
    fail "pacer --qdisc htb: no tbf under the data class on h2's eth0"
  kill -TERM "$pacer"; wait "$pacer" || true
  [ "$(ip netns exec ftsmoke-h2 cat "$tso")" = "$orig" ] ||
    fail "pacer packet size: $tso is $(ip netns exec ftsmoke-h2 cat "$tso") after SIGTERM, not $orig"
  pacer_until_small
  kill -KILL "$pacer"; wait "$pacer" 2>/dev/null || true
  pacer_until_small  # finds 0 and the saved value
  kill -TERM "$pacer"; wait "$pacer" || true
  [ "$(ip netns exec ftsmoke-h2 cat "$tso")" = "$orig" ] ||
    fail "pacer packet size: $tso is $(ip netns exec ftsmoke-h2 cat "$tso") after a SIGKILL and the next pacer's exit, not $orig"
  echo "smoke: OK: pacer packet size: $tso 0 while shaped below the threshold, back to $orig on exit and after a SIGKILL; --qdisc htb installs its filters"
fi
