#!/usr/bin/env bash
# Failover time with etcd: SIGKILL of a replicated `mnemo serve` (sync mode) until its mirror
# serves as primary, with every acknowledged write checked on it. Results:
# bench/results/failover.{csv,json}. See bench/README.md.
#
#   scripts/bench-failover.sh [ROUNDS]     (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
# The results record the exact command that made them.
export MNEMO_BENCH_COMMAND="scripts/bench-failover.sh${*:+ $*}"
command -v etcd >/dev/null || { echo "bench-failover: etcd not found (apt-get install etcd-server)" >&2; exit 1; }
cargo build --release -q -p mnemo-cli -p mnemo-bench --bin mnemo --bin failover
target="${CARGO_TARGET_DIR:-target}/release"
"$target/failover" "$target/mnemo" "$@"
