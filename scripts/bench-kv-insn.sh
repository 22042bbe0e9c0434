#!/usr/bin/env bash
# Instructions per request of `mnemo serve` (issue 17's per-command cost), counted by
# valgrind's callgrind, so that two builds compare on a busy machine (this VM exposes no
# hardware counters to perf). Runs BIN under callgrind with a pool on /dev/shm, sends N
# requests of TEST with redis-benchmark (-P 16 -c 50, random keys over 10 M, 100-byte
# values), and prints the instructions the server executed in user space. Run it at two
# values of N and divide the difference by the extra requests: that cancels start-up and
# shutdown.
#
#   scripts/bench-kv-insn.sh target/release/mnemo 50000 set
#   scripts/bench-kv-insn.sh target/release/mnemo 150000 set
#
# TEST ycsb-load sends YCSB's load of N records instead (HMSET of ten 100-byte fields and
# ZADD per record, 8 client threads, each waiting for its replies) with the `ycsb` driver
# built beside BIN (cargo build --release -p mnemo-bench --bin ycsb): per_request is then
# per record.
#
#   scripts/bench-kv-insn.sh target/release/mnemo 10000 ycsb-load
#   scripts/bench-kv-insn.sh target/release/mnemo 30000 ycsb-load
#
# TEST ycsb-a .. ycsb-f loads 5,000 records first (the same at every N, so it cancels), then
# runs N operations of that workload: per_request is then per operation.
#
#   scripts/bench-kv-insn.sh target/release/mnemo 10000 ycsb-a
#   scripts/bench-kv-insn.sh target/release/mnemo 30000 ycsb-a
#
# BIN "redis" counts redis-server (no persistence) the same way, for the peer's figures; its
# YCSB driver is YCSB_BIN, else target/release/ycsb.
#
#   scripts/bench-kv-insn.sh redis 10000 ycsb-a
set -uo pipefail
bin=$1; n=$2; t=${3:-set}
repo="$(cd "$(dirname "$0")/.." && pwd)"
for tool in valgrind redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "bench-kv-insn: $tool not found" >&2; exit 1; }
done
if [ "$bin" = redis ]; then
    ycsb="${YCSB_BIN:-${CARGO_TARGET_DIR:-$repo/target}/release/ycsb}"
else
    ycsb="${YCSB_BIN:-$(dirname "$bin")/ycsb}"
fi
if [ "${t#ycsb-}" != "$t" ] && [ ! -x "$ycsb" ]; then
    echo "bench-kv-insn: $ycsb not found (cargo build --release -p mnemo-bench --bin ycsb)" >&2
    exit 1
fi
d=$(mktemp -d /dev/shm/kv-insn.XXXX)
port=$((8300 + RANDOM % 400))
if [ "$bin" = redis ]; then
    valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" redis-server --port "$port" \
        --bind 127.0.0.1 --save '' --appendonly no --dir "$d" >/dev/null 2>"$d/valgrind.log" &
else
    # --size-max: valgrind refuses the default 64 GiB address-space reservation.
    valgrind --tool=callgrind --callgrind-out-file="$d/cg.out" "$bin" serve --pool "$d/kv.pool" \
        --port "$port" --size 1G --size-max 1G >/dev/null 2>"$d/valgrind.log" &
fi
pid=$!
for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
redis-cli -p "$port" ping >/dev/null 2>&1 || { echo "bench-kv-insn: server did not start" >&2; cat "$d/valgrind.log" >&2; kill $pid; rm -rf "$d"; exit 1; }
if [ "$t" = ycsb-load ]; then
    "$ycsb" phase --addr "127.0.0.1:$port" --workload load --records "$n" --threads 8 >/dev/null 2>&1
elif [ "${t#ycsb-}" != "$t" ]; then
    "$ycsb" phase --addr "127.0.0.1:$port" --workload load --records 5000 --threads 8 >/dev/null 2>&1
    "$ycsb" phase --addr "127.0.0.1:$port" --workload "${t#ycsb-}" --records 5000 --ops "$n" \
        --threads 8 >/dev/null 2>&1
else
    redis-benchmark -p "$port" -t "$t" -n "$n" -P 16 -c 50 -r 10000000 -d 100 -q >/dev/null 2>&1
fi
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1
wait $pid
awk -v b="$bin" -v n="$n" -v t="$t" '/^summary|^totals/ {printf "%s %s n=%d instructions=%.0f per_request=%.0f\n", b, t, n, $2, $2/n; exit}' "$d/cg.out"
# INSN_KEEP=FILE keeps callgrind's output there (for callgrind_annotate).
if [ -n "${INSN_KEEP:-}" ]; then cp "$d/cg.out" "$INSN_KEEP"; fi
rm -rf "$d"
