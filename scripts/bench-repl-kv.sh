#!/usr/bin/env bash
# Replicated key-value SET throughput: mnemo serve --mirror (syncflush, sync) against Redis 7
# with one replica and SET+WAIT 1 0, in one run, on loopback, files on /dev/shm. Results:
# bench/results/repl-kv.{csv,json}, bench/plots/repl-kv.svg. See bench/README.md.
#
#   scripts/bench-repl-kv.sh [CLIENTS] [SECONDS] [ROUNDS]     (default 50 5 3)
set -euo pipefail
cd "$(dirname "$0")/.."
# The results record the exact command that made them.
export MNEMO_BENCH_COMMAND="scripts/bench-repl-kv.sh${*:+ $*}"
command -v redis-server >/dev/null || { echo "bench-repl-kv: redis-server not found (apt-get install redis-server)" >&2; exit 1; }
cargo build --release -q -p mnemo-cli -p mnemo-bench --bin mnemo --bin repl_kv
target="${CARGO_TARGET_DIR:-target}/release"
"$target/repl_kv" "$target/mnemo" "$@"
