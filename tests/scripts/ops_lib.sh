# Sourced by the operations tests' scripts (metrics, config file, health,
# pacer metrics): a scratch folder $dir, removed on exit with every
# background job (stopped ones are continued first); fail(), which prints
# the tail of every log in $dir; the metrics port a daemon logs; and the
# checks every exposition must pass.

dir=$(mktemp -d)
ops_cleanup() {
  local pids
  pids=$(jobs -p)
  if [ -n "$pids" ]; then
    kill -CONT $pids 2>/dev/null || true
    kill $pids 2>/dev/null || true
  fi
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap ops_cleanup EXIT

fail() {
  echo "FAIL: $1"
  local f
  for f in "$dir"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f")"
    tail -n 15 "$f"
  done
  exit 1
}

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The port LOG says "metrics on ... (port N)" for, waiting up to 10 s.
metrics_port() {
  local port=
  for _ in $(seq 100); do
    port=$(sed -n 's/.*metrics on .*(port \([0-9]*\)).*/\1/p' "$1" 2>/dev/null)
    [ -n "$port" ] && { echo "$port"; return; }
    sleep 0.1
  done
  fail "no metrics port in $(basename "$1")"
}

# check_exposition NAME PORT SOURCE_DIR: fetches /metrics into $dir/NAME.txt;
# promtool check metrics must pass, flowtune_NAME_up must be 1, and every
# flowtune_ metric exposed must be in docs/operate.md.
check_exposition() {
  local name=$1 port=$2 src=$3 m
  curl -sf "http://127.0.0.1:$port/metrics" > "$dir/$name.txt" || fail "$name: no /metrics"
  promtool check metrics < "$dir/$name.txt" > "$dir/promtool.out" 2>&1 ||
    { cat "$dir/promtool.out"; fail "$name: promtool check metrics"; }
  grep -q "^flowtune_${name}_up 1$" "$dir/$name.txt" || fail "flowtune_${name}_up is not 1"
  for m in $(sed -n 's/^# TYPE \(flowtune_[a-z_]*\) .*/\1/p' "$dir/$name.txt"); do
    grep -q "| \`$m\` |" "$src/docs/operate.md" || fail "$m is exposed but not in docs/operate.md"
  done
}
