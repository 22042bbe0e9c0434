#!/usr/bin/env bash
# Replication latency: one sync point over loopback TCP in each mode (local, async, sync,
# syncflush) against a raw TCP ping-pong of the same payload, in one run. Results:
# bench/results/repl-latency.{csv,json}, bench/plots/repl-latency.svg. See bench/README.md.
#
# With `threads`: sync-point throughput vs writing threads (1, 2, 4, 8) over 1, 2 and 4
# connections per link, beside as many TCP ping-pongs. Results:
# bench/results/repl-threads.{csv,json}, bench/plots/repl-threads.svg.
#
#   scripts/bench-repl.sh [N]                (N operations per point, default 20000)
#   scripts/bench-repl.sh threads [SECONDS]  (seconds per point, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
# The results record the exact command that made them.
export MNEMO_BENCH_COMMAND="scripts/bench-repl.sh${*:+ $*}"
cargo build --release -q -p mnemo-bench --bin repl
"${CARGO_TARGET_DIR:-target}/release/repl" "$@"
