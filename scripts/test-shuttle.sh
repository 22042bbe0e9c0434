#!/usr/bin/env bash
# The deterministic concurrency tests (issue 19): mnemo-heap's lanes, allocator arenas and
# free limbo under the shuttle crate's controlled scheduler, crash images at every fence of
# every schedule. They need `--cfg mnemo_shuttle`, which swaps the heap's locks, atomics and
# thread-locals for shuttle's (crates/mnemo-heap/src/sync.rs), so they build in a target
# directory of their own (target/shuttle): the flag never reaches another build, and the
# usual target/ keeps its cache.
#
#   scripts/test-shuttle.sh                      # every concurrency test
#   scripts/test-shuttle.sh NAME                 # the tests whose name holds NAME
#   MNEMO_CONC_REPLAY=pct3:1234 scripts/test-shuttle.sh lanes   # one schedule again
#   MNEMO_CONC_SCHEDULES=N                       # schedules per workload (default in the test)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${MNEMO_SHUTTLE_TARGET:-$PWD/target/shuttle}"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg mnemo_shuttle"
export RUSTDOCFLAGS="${RUSTDOCFLAGS:-} --cfg mnemo_shuttle"
# Optimized, with debug assertions still on (the heap's invariants are debug_assert!s, and
# mutants switch only in builds with them): the schedules and their crash images run ~3x
# faster, which pays for the longer build many times over. Only this target directory.
export CARGO_PROFILE_DEV_OPT_LEVEL="${CARGO_PROFILE_DEV_OPT_LEVEL:-2}"
cargo test -p mnemo-heap --test concurrency -- --nocapture --test-threads=1 "$@"
