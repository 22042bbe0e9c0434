#!/usr/bin/env bash
# YCSB E's scan step alone: `ZRANGEBYSCORE _indices <score> +inf LIMIT 0 100` and the same as
# `ZRANGE ... BYSCORE LIMIT 0 100`, on mnemo serve (pool on /dev/shm) and redis-server 7 (no
# persistence) in the same run, after the YCSB driver loaded RECORDS (100,000) records into
# each. Starts from the lowest score, the median and near the top (rank RECORDS - 50), CALLS
# (200) calls each through one `redis-cli -r` (client start-up included, as in bench/README).
# Servers on CPU 0, clients on CPU 1. Prints one line per server, start and command.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
records="${RECORDS:-100000}"
calls="${CALLS:-200}"
for tool in redis-server redis-cli taskset; do
    command -v "$tool" >/dev/null || { echo "bench-kv-scan: $tool not found (apt-get install redis-server redis-tools util-linux)" >&2; exit 1; }
done
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli -p mnemo-bench --bin mnemo --bin ycsb
target="${CARGO_TARGET_DIR:-$repo/target}/release"
dir="$(mktemp -d /dev/shm/mnemo-scan.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mnemo_port="$(free_port)"
redis_port="$(free_port)"
MNEMO_LOG=warn taskset -c 0 "$target/mnemo" serve --port "$mnemo_port" --pool "$dir/kv.pool" --size 1G >/dev/null 2>&1 &
pids+=($!)
taskset -c 0 redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >/dev/null 2>&1 &
pids+=($!)
for port in "$mnemo_port" "$redis_port"; do
    for _ in $(seq 1 500); do [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break; sleep 0.02; done
    taskset -c 1 "$target/ycsb" phase --addr "127.0.0.1:$port" --workload load --records "$records" --ops "$records" --threads 4 >/dev/null
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $records records; $calls calls per line; LIMIT 0 100"
for server in mnemo redis; do
    port="${server}_port"; port="${!port}"
    for rank in 0 $((records / 2)) $((records - 50)); do
        score="$(redis-cli -p "$port" ZRANGE _indices "$rank" "$rank" WITHSCORES | tail -1)"
        for command in ZRANGEBYSCORE ZRANGE; do
            args=(_indices "$score" +inf)
            [ "$command" = ZRANGE ] && args+=(BYSCORE)
            args+=(LIMIT 0 100)
            start=$(date +%s%N)
            taskset -c 1 redis-cli -p "$port" -r "$calls" "$command" "${args[@]}" >/dev/null
            end=$(date +%s%N)
            printf '%-6s from rank %-6s %-13s %6d us per call\n' "$server" "$rank" "$command" $(( (end - start) / calls / 1000 ))
        done
    done
done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
