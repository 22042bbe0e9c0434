#!/usr/bin/env bash
# Restart-to-serving time of mnemo serve with a ~1 GiB dataset (issue 6: under 1 s).
# Loads KEYS keys of 1 KiB values (default 1,000,000: 1 GiB of values) through redis-cli
# --pipe into a pool on /dev/shm, then, ROUNDS times each: SIGKILL (recovery on open) and
# SIGTERM (clean open), restart, and time until PING answers and GET of a known key returns
# its value. Prints one line per restart; the log's startup_ms is the server's own figure.
# RESTART_DIR puts the pool elsewhere: RESTART_DIR=/tmp for an ordinary disk, where the pool
# syncs through its write-ahead file and a restart after SIGKILL replays it (issue 20).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
keys="${KEYS:-1000000}"
rounds="${ROUNDS:-3}"
port="${PORT:-17399}"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli --bin mnemo
mnemo="${CARGO_TARGET_DIR:-$repo/target}/release/mnemo"
dir="$(mktemp -d "${RESTART_DIR:-/dev/shm}/mnemo-restart.XXXXXX")"
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

start() {
    MNEMO_LOG=info NO_COLOR=1 "$mnemo" serve --port "$port" --pool "$dir/kv.pool" --size 2G \
        2>>"$dir/serve.log" &
    pid=$!
}
wait_ping() {
    for _ in $(seq 1 200000); do
        [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && return 0
    done
    echo "no PING answer" >&2; exit 1
}

start; wait_ping
echo "loading $keys keys of 1 KiB..."
t0=$(date +%s.%N)
python3 - "$keys" <<'PY' | redis-cli -p "$port" --pipe >/dev/null
import sys
n = int(sys.argv[1]); out = sys.stdout.buffer
for i in range(n):
    key = b"key:%d" % i
    value = (b"%010d" % i) * 102 + b"abcd"          # 1024 bytes, unique per key
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1024\r\n%s\r\n" % (len(key), key, value))
PY
t1=$(date +%s.%N)
echo "loaded in $(echo "$t1 - $t0" | bc) s: $(redis-cli -p "$port" DBSIZE) keys"
redis-cli -p "$port" INFO memory | grep -E "^used_memory_human" || true
ls -la "$dir/kv.pool"
known="key:$((keys / 2))"
expect="$(printf '%010d' $((keys / 2)))"
for round in $(seq 1 "$rounds"); do
    for signal in KILL TERM; do
        kill "-$signal" "$pid"; wait "$pid" 2>/dev/null || true
        t0=$(date +%s%N)
        start; wait_ping
        got="$(redis-cli -p "$port" GET "$known")"
        t1=$(date +%s%N)
        [ "${got:0:10}" = "$expect" ] || { echo "GET $known returned the wrong value" >&2; exit 1; }
        startup="$(grep -o 'startup_ms="[0-9.]*"' "$dir/serve.log" | tail -1)"
        replayed="$(redis-cli -p "$port" INFO persistence | tr -d '\r' | grep -E '^mnemo_wal_replayed_at_open' || true)"
        echo "round $round after SIG$signal: serving (PING + GET $known) in $(( (t1 - t0) / 1000000 )) ms; server $startup ${replayed}"
    done
done
grep -E "mnemo serve ready" "$dir/serve.log" | tail -1
