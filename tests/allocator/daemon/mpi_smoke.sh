#!/usr/bin/env bash
# flowtune-allocator --mpi under mpirun -np R (2 unless given), end to end
# (docs/scale.md): three iperf3 transfers under flowtune-run share a
# 200 Mbit/s host link. The sending host sits in the second rack, so its
# flows' FlowBlock belongs to a rank other than 0 (rank 1 of 2; rank 2 of a
# 2 x 2 grid under the diagonal exchange): their rates come from that
# rank's passes, gathered by rank 0. Passes when every flow is told the
# fair share (within 2%), every iperf3 succeeds, and SIGTERM to rank 0
# stops every rank cleanly.
#   mpi_smoke.sh ALLOCATOR CTL RUN [sanitized|plain] [EXCHANGE [GATHER [R]]]
# EXCHANGE: the allocator's --mpi-exchange (default link-owners); GATHER:
# its --mpi-gather-threshold (default 0).
set -euo pipefail
alloc=$1 ctl=$2 run=$3 exchange=${5:-link-owners} gather=${6:-0} ranks=${7:-2}
if [ "${4:-plain}" = sanitized ]; then
  echo "SKIP: sanitizer build: the shim would be preloaded into an uninstrumented iperf3 (run in the release preset; alloc_mpi_test covers the driver here)"
  exit 77
fi
for tool in mpirun iperf3; do
  command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
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
  tail -n 20 "$dir/alloc.log"
  exit 1
}
cat > "$dir/net.toml" <<'TOML'
kind = "two_tier"
racks = 2
hosts_per_rack = 2
spines = 1
host_gbps = 0.2

[[host]]
index = 0
addresses = ["127.0.0.2"]

[[host]]
index = 2
addresses = ["127.0.0.1"]
TOML
ep="ipc://$dir/allocator.sock"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$exchange" = diagonal ]; then
  # Off the grid (3 ranks): every rank refuses, with the reason, before serving.
  if mpirun -np 3 "$alloc" --mpi --mpi-exchange diagonal --topology "$dir/net.toml" --check-config \
       > "$dir/alloc.log" 2>&1; then
    fail "3 ranks with the diagonal exchange were accepted"
  fi
  grep -q "needs 4^k MPI ranks (1, 4, 16, 64, ...), not 3" "$dir/alloc.log" ||
    fail "3 ranks with the diagonal exchange were refused without the reason"
fi
mpirun -np "$ranks" "$alloc" --mpi --mpi-exchange "$exchange" --mpi-gather-threshold "$gather" \
  --topology "$dir/net.toml" --listen "$ep" \
  > "$dir/alloc.log" 2>&1 &
mpirun_pid=$!
for _ in $(seq 100); do "$ctl" --allocator "$ep" --timeout-ms 100 > /dev/null 2>&1 && break; sleep 0.1; done
grep -q "across $ranks MPI ranks (.*, $exchange exchange" "$dir/alloc.log" ||
  fail "the allocator does not say it runs across $ranks ranks with the $exchange exchange"

ports=(5331 5332 5333)
for p in "${ports[@]}"; do iperf3 -s -1 -B 127.0.0.2 -p "$p" > /dev/null 2>&1 & done
sleep 0.3
clients=()
for p in "${ports[@]}"; do
  "$run" --allocator "$ep" -- iperf3 -c 127.0.0.2 -p "$p" -B 127.0.0.1 -t 8 > "$dir/iperf$p.log" 2>&1 &
  clients+=($!)
done
fair=$(python3 -c 'print(200e6 * 0.99 / 3)')
ok=0
for _ in $(seq 70); do
  sleep 0.1
  rates=$("$ctl" --allocator "$ep" --json flows 2>/dev/null |
          python3 -c 'import json,sys; print(" ".join(str(f["rate_bps"]) for f in json.load(sys.stdin)["flows"]))' || true)
  if python3 -c 'import sys; r=[float(x) for x in sys.argv[2:]]; f=float(sys.argv[1]); sys.exit(0 if len(r) == 3 and all(abs(x - f) <= 0.02 * f for x in r) else 1)' \
       "$fair" $rates; then
    ok=1
    break
  fi
done
[ $ok = 1 ] || fail "three flows never had the fair share $fair bit/s each (last: ${rates:-none})"
for c in "${clients[@]}"; do wait "$c" || fail "an iperf3 client failed"; done
rank0=
for p in $(pgrep -P "$mpirun_pid" -f -- "--mpi"); do
  if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0; then rank0=$p; fi
done
[ -n "$rank0" ] || fail "no rank 0 process under mpirun"
kill -TERM "$rank0"
wait "$mpirun_pid" || fail "mpirun exited with status $? after SIGTERM to rank 0"
grep -q "stopping on SIGTERM" "$dir/alloc.log" || fail "rank 0 did not stop cleanly"
echo "3 flows at the fair share ($fair bit/s) from another rank's FlowBlock ($ranks ranks, $exchange exchange, gather threshold $gather); every rank stopped cleanly"
