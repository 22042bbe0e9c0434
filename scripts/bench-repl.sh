#!/usr/bin/env bash
# Replication latency: one sync point over loopback TCP in each mode (local, async, sync,
# syncflush) against a raw TCP ping-pong of the same payload, in one run. Results:
# bench/results/repl-latency.{csv,json}, bench/plots/repl-latency.svg. See bench/README.md.
#
#   scripts/bench-repl.sh [N]     (N operations per point, default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
# The results record the exact command that made them.
export MNEMO_BENCH_COMMAND="scripts/bench-repl.sh${*:+ $*}"
cargo build --release -q -p mnemo-bench --bin repl
"${CARGO_TARGET_DIR:-target}/release/repl" "$@"
