#!/usr/bin/env bash
# What a replicated mnemo serve loses when its primary is killed, per replication mode
# (issue 14's async loss window): the async_loss bin, ROUNDS rounds (default 5) of async and
# of sync (the control: nothing acknowledged may be lost). Results:
# bench/results/async-loss.{csv,json}. See bench/README.md.
#
#   scripts/bench-async-loss.sh        # 5 rounds
#   scripts/bench-async-loss.sh 10
set -euo pipefail
cd "$(dirname "$0")/.."
export MNEMO_BENCH_COMMAND="scripts/bench-async-loss.sh${*:+ $*}"
cargo build --release -q -p mnemo-cli -p mnemo-bench --bin mnemo --bin async_loss
target="${CARGO_TARGET_DIR:-target}/release"
"$target/async_loss" "$target/mnemo" "$@"
