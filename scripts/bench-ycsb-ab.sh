#!/usr/bin/env bash
# One YCSB workload, build against build (issue 17): for each of ROUNDS rounds, each server
# given in turn gets a fresh pool (or a fresh redis-server without persistence), pinned to
# CPU 0, loaded with RECORDS records by the YCSB driver on CPU 1 (8 threads), then runs OPS
# operations of WORKLOAD; prints one line per server and round with both phases' throughput.
# The servers alternate within every round, so that this VM's drift falls on all of them.
# Results go to standard output (redirect them under bench/results/ to keep them).
#
#   scripts/bench-ycsb-ab.sh d 100000 100000 3 /tmp/mnemo-before target/release/mnemo redis
#
# A server is a mnemo binary or the word "redis". YCSB_BIN: the driver (default
# ${CARGO_TARGET_DIR:-target}/release/ycsb; cargo build --release -p mnemo-bench --bin ycsb).
set -uo pipefail
if [ $# -lt 5 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
workload=$1; records=$2; ops=$3; rounds=$4; shift 4
servers=("$@")
repo="$(cd "$(dirname "$0")/.." && pwd)"
ycsb="${YCSB_BIN:-${CARGO_TARGET_DIR:-$repo/target}/release/ycsb}"
for tool in redis-server redis-cli taskset "$ycsb"; do
    command -v "$tool" >/dev/null || { echo "bench-ycsb-ab: $tool not found" >&2; exit 1; }
done
for s in "${servers[@]}"; do
    [ "$s" = redis ] || [ -x "$s" ] || { echo "bench-ycsb-ab: $s is not an executable (or \"redis\")" >&2; exit 1; }
done
throughput() { grep '^\[OVERALL\], Throughput' | awk -F', ' '{printf "%.0f", $3}'; }
echo "# $(date -u +%FT%TZ) workload=$workload records=$records ops=$ops rounds=$rounds commit=$(git -C "$repo" rev-parse --short HEAD)"
for round in $(seq "$rounds"); do
    for s in "${servers[@]}"; do
        d=$(mktemp -d /dev/shm/ycsb-ab.XXXX)
        port=$((7500 + RANDOM % 400))
        if [ "$s" = redis ]; then
            taskset -c 0 redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir "$d" >/dev/null 2>&1 &
        else
            MNEMO_LOG=warn taskset -c 0 "$s" serve --pool "$d/kv.pool" --port $port --size 1G >/dev/null 2>&1 &
        fi
        pid=$!
        for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
        load=$(taskset -c 1 "$ycsb" phase --addr 127.0.0.1:$port --workload load --records "$records" --threads 8 2>&1 | throughput)
        run=$(taskset -c 1 "$ycsb" phase --addr 127.0.0.1:$port --workload "$workload" --records "$records" --ops "$ops" --threads 8 2>&1 | throughput)
        echo "round=$round server=$s load_ops_s=${load:-failed} ${workload}_ops_s=${run:-failed}"
        kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$d"
    done
done
