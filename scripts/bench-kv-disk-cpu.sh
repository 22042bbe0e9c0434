#!/usr/bin/env bash
# Where the time goes at fifty clients (issue 20): server and client CPU for one SET run.
# `mnemo serve` pinned to CPU 0 with its pool under DIR (default /tmp: the disk, write-ahead
# file; /dev/shm: nothing to wait for), redis-benchmark pinned to CPU 1 (SET, 100-byte
# values over 100,000 random keys), under `time`. Prints the run's CSV line, the client's
# user+system CPU and wall time, and the server's CPU (from /proc/PID/stat). Extra arguments
# go to redis-benchmark.
#
#   scripts/bench-kv-disk-cpu.sh /tmp -c 50 -n 200000
#   scripts/bench-kv-disk-cpu.sh /dev/shm -c 50 -n 300000
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
base="${1:-/tmp}"
shift || true
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli --bin mnemo
bin="${CARGO_TARGET_DIR:-$repo/target}/release/mnemo"
port="${KV_PORT:-16398}"
dir="$(mktemp -d "$base/mnemo-cpu.XXXXXX")"
MNEMO_LOG=warn taskset -c 0 "$bin" serve --port "$port" --size 1G --pool "$dir/kv.pool" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$pid/stat")
/usr/bin/time -f "client cpu %U+%S s, wall %e s" taskset -c 1 \
    redis-benchmark -p "$port" -t set -d 100 -r 100000 "$@" --csv 2>&1 | tail -2
read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$pid/stat")
echo "server cpu $(( (u1 + s1 - u0 - s0) * 1000 / $(getconf CLK_TCK) )) ms"
echo "commit $(git -C "$repo" rev-parse --short HEAD)"
