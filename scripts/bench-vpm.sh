#!/usr/bin/env bash
# Virtual persistent memory (issue 15): fault, swap-out and swap-in costs per page against
# the kernel's first touch of a tmpfs page, and Temporality's Figure 4: mnemo serve with
# --pm-budget against mnemo serve without, redis-benchmark SET (new keys) then GET (random),
# for MRR 100% down to 40%. Persistent-memory files and pools on /dev/shm, the swap file on
# VPM_BENCH_SWAP_DIR (default /var/tmp, a disk). Server and client pinned to different CPUs.
# Output: bench/results/vpm-faults.csv, vpm-fig4.csv, vpm.json, bench/plots/vpm-fig4.svg.
#
#   scripts/bench-vpm.sh                                   # -n 100000, 3 rounds
#   VPM_BENCH_N=20000 VPM_BENCH_ROUNDS=1 scripts/bench-vpm.sh   # a quick look
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
for tool in redis-benchmark redis-cli taskset; do
    command -v "$tool" >/dev/null || { echo "bench-vpm: $tool not found" >&2; exit 1; }
done
# VPM_BENCH_HOLDS_LOCK=1: the caller created /work/BENCH_LOCK for this run (and removes it).
if [ -e /work/BENCH_LOCK ] && [ "${VPM_BENCH_HOLDS_LOCK:-}" != 1 ]; then
    echo "bench-vpm: /work/BENCH_LOCK exists (another benchmark is timing); try later" >&2
    exit 1
fi
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli --bin mnemo
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-bench --bin vpm
target="${CARGO_TARGET_DIR:-$repo/target}/release"
VPM_BENCH_MNEMO="$target/mnemo" \
VPM_BENCH_COMMAND="$(env | grep -E '^VPM_BENCH_(N|ROUNDS|VALUE|CLIENTS|SWAP_DIR)=' | sort | tr '\n' ' ')scripts/bench-vpm.sh" \
    "$target/vpm"
