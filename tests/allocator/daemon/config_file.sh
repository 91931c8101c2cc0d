#!/usr/bin/env bash
# flowtune-allocator --config FILE.toml, end to end:
#   - a file and the same flags on the command line give the same
#     --check-config summary; a flag on the command line overrides the key;
#   - bad files exit 2 naming the file, line and key;
#   - SIGHUP re-reads the file: a count limit applies (flowtune-ctl status
#     shows it), a key that needs a restart is named and keeps its running
#     value, a bad file is refused and the running configuration stays;
#     flowtune-ctl reload does the same.
#   config_file.sh ALLOCATOR CTL
set -euo pipefail
alloc=$1 ctl=$2
. "$(dirname "$0")/../../scripts/ops_lib.sh"
ep="ipc://$dir/a.sock"
cat > "$dir/a.toml" <<TOML
listen = "$ep"
hosts = 4
[engine]
gamma = 0.3
early-rates = false
[limits]
max-flows-per-source = 100
TOML
from_file=$("$alloc" --config "$dir/a.toml" --check-config | sed 's/^configuration ok: config [^;]*; //')
from_flags=$("$alloc" --listen "$ep" --hosts 4 --gamma 0.3 --early-rates off --max-flows-per-source 100 \
  --check-config | sed 's/^configuration ok: //')
[ "$from_file" = "$from_flags" ] || fail "the file and the flags differ:
  file:  $from_file
  flags: $from_flags"
"$alloc" --config "$dir/a.toml" --gamma 0.5 --check-config | grep -q "gamma 0.500000" ||
  fail "--gamma on the command line did not override the file"

refused() {  # FILE-TEXT EXPECTED-MESSAGE
  printf '%s\n' "$1" > "$dir/bad.toml"
  local rc=0 out
  out=$("$alloc" --config "$dir/bad.toml" --check-config 2>&1) || rc=$?
  [ "$rc" = 2 ] || fail "'$1' exited $rc, not 2"
  case "$out" in *"$2"*) ;; *) fail "'$1' said: $out; expected: $2" ;; esac
}
refused 'threads = "four"' "bad.toml:1: key 'threads': --threads expects an integer 0-256, got 'four'"
refused 'treads = 2' "bad.toml:1: key 'treads': unknown option '--treads'"
refused 'listen = "tcp://127.0.0.1"' "--listen:"

"$alloc" --config "$dir/a.toml" > "$dir/alloc.log" 2>&1 &
apid=$!
cap() { "$ctl" --allocator "$ep" --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["max_flows_per_source"])'; }
for _ in $(seq 50); do cap > /dev/null 2>&1 && break; sleep 0.1; done
[ "$(cap)" = 100 ] || fail "max-flows-per-source from the file is $(cap), not 100"

sed -i 's/max-flows-per-source = 100/max-flows-per-source = 200/; s/gamma = 0.3/gamma = 0.35/' "$dir/a.toml"
kill -HUP "$apid"
for _ in $(seq 50); do [ "$(cap)" = 200 ] && break; sleep 0.1; done
[ "$(cap)" = 200 ] || fail "SIGHUP did not apply max-flows-per-source 200 (status: $(cap))"
grep -q "applied max-flows-per-source; needs a restart, the running value stays: gamma" "$dir/alloc.log" ||
  fail "SIGHUP did not say that gamma needs a restart"
"$ctl" --allocator "$ep" --json status | grep -q '"gamma": 0.3[,}]' || fail "gamma changed without a restart"

sed -i 's/max-flows-per-source = 200/max-flows-per-source = "lots"/' "$dir/a.toml"
kill -HUP "$apid"
for _ in $(seq 50); do grep -q "refused, the running configuration stays" "$dir/alloc.log" && break; sleep 0.1; done
grep -q "a.toml refused, the running configuration stays: .*a.toml:.*key 'max-flows-per-source'" "$dir/alloc.log" ||
  fail "a bad file on SIGHUP was not refused with its key"
[ "$(cap)" = 200 ] || fail "a refused file changed the limit"

sed -i 's/max-flows-per-source = "lots"/max-flows-per-source = 300/' "$dir/a.toml"
"$ctl" --allocator "$ep" reload | grep -q "applied max-flows-per-source" || fail "flowtune-ctl reload did not re-read the file"
[ "$(cap)" = 300 ] || fail "flowtune-ctl reload did not apply the limit"
echo "PASS"
