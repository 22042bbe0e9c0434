#!/usr/bin/env bash
# mnemo serve against redis-server 7 (no persistence; appendfsync always on the disk; on
# /dev/shm) with redis-benchmark, 50 clients and 1 client, server and client pinned to
# different CPUs. Results: bench/results/kv-redis-benchmark.{csv,json},
# bench/plots/kv-redis-benchmark.svg. See bench/README.md.
#
#   scripts/bench-kv.sh                      # -n 200000, ~15 min on 2 vCPUs
#   KV_BENCH_N=20000 scripts/bench-kv.sh     # a quick look
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
for tool in redis-server redis-benchmark taskset; do
    command -v "$tool" >/dev/null || { echo "bench-kv: $tool not found (apt-get install redis-server redis-tools util-linux)" >&2; exit 1; }
done
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli -p mnemo-bench --bin mnemo --bin kv
target="${CARGO_TARGET_DIR:-$repo/target}/release"
KV_MNEMO="$target/mnemo" exec "$target/kv" "$@"
