#!/usr/bin/env bash
# YCSB core workloads A-F against redis-server 7 (no persistence; appendonly with
# appendfsync always, its directory on the disk) and mnemo serve (pool on /dev/shm, every
# acknowledged write durable), with mnemo-bench's YCSB driver (issue 6). Servers pinned to
# CPU 0, the driver to CPU 1 (YCSB_SERVER_CPU / YCSB_CLIENT_CPU). The driver starts and
# stops the servers itself (drop guards), each on its own free loopback port.
# Results: bench/results/ycsb.{csv,json}, bench/plots/ycsb.svg. See bench/README.md.
#
#   scripts/bench-ycsb.sh                                   # 100k records, 100k ops
#   scripts/bench-ycsb.sh --records 10000 --ops 10000 --e-ops 1000   # a quick look
#   scripts/bench-ycsb.sh --targets redis                   # Redis only
#
# Other options (passed to `ycsb bench`): --e-ops N (workload E's operation count, default
# 5000: each scan reads up to 100 records), --threads N (8), --disk-dir DIR (/var/tmp),
# --check-records N (2000; 0 skips the checks of the driver against each server),
# --repeat N (2: each step runs N times on the servers in memory, their order reversed at
# each repetition, so that each runs first in half of them; the plot and the ratios printed
# at the end are medians over the repetitions, ycsb.csv keeps every one).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
for tool in redis-server taskset; do
    command -v "$tool" >/dev/null || { echo "bench-ycsb: $tool not found (apt-get install redis-server util-linux)" >&2; exit 1; }
done
server_cpu="${YCSB_SERVER_CPU:-0}"
client_cpu="${YCSB_CLIENT_CPU:-1}"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli -p mnemo-bench --bin mnemo --bin ycsb
target="${CARGO_TARGET_DIR:-$repo/target}/release"
# The whole run is bounded: each phase stops after 240 s; the run after 30 min.
exec timeout 1800 taskset -c "$client_cpu" "$target/ycsb" bench --mnemo "$target/mnemo" --server-cpu "$server_cpu" "$@"
