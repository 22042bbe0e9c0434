#!/usr/bin/env bash
# Issue 2's benchmark: persist costs per flush instruction and mnemo pool create vs PMDK's
# pmempool create, in one run on this machine. Writes bench/results/pool.{json,csv} and
# bench/plots/pool-persist-*.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v pmempool >/dev/null || need+=(pmdk-tools)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build --release -p mnemo-cli -p mnemo-bench --bins
# Pin to one CPU so both sides run under the same conditions.
taskset -c 1 "${CARGO_TARGET_DIR:-target}/release/pool"
