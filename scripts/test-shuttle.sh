#!/usr/bin/env bash
# The deterministic concurrency tests (issue 19): mnemo-heap's lanes, allocator arenas and
# free limbo, and the kv server's group commit with the write-ahead policy's syncer and
# checkpoint threads, under the shuttle crate's controlled scheduler, crash images at every
# fence (every sync of the write-ahead and pool files) of every schedule. They need
# `--cfg mnemo_shuttle`, which swaps the heap's locks, atomics and thread-locals
# (crates/mnemo-heap/src/sync.rs) and the write-ahead policy's locks and threads
# (crates/mnemo-pmem/src/conc.rs) for shuttle's, so they build in a target directory of
# their own (target/shuttle): the flag never reaches another build, and the usual target/
# keeps its cache.
#
#   scripts/test-shuttle.sh                      # every concurrency test
#   scripts/test-shuttle.sh NAME                 # the tests whose name holds NAME
#   MNEMO_CONC_REPLAY=pct3:1234 scripts/test-shuttle.sh lanes   # one schedule again
#   MNEMO_CONC_REPLAY=pct2:1234 scripts/test-shuttle.sh group_commit
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
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
cargo test -p mnemo-heap --test concurrency -- --nocapture --test-threads=1 "$@" | tee "$out"
cargo test -p mnemo-kv --test group_commit -- --nocapture --test-threads=1 "$@" | tee -a "$out"
# The suite's summary: every workload's line, and the totals.
lines="$(grep -E '^(test [^ ]+ \.\.\. )?concurrency [^:]+: [0-9]+ schedules' "$out" |
    sed -E 's/^test [^ ]+ \.\.\. //' || true)"
echo "shuttle suite summary:"
[ -z "$lines" ] || echo "$lines" | sed 's/^/  /'
echo "$lines" | awk '
    { for (i = 1; i <= NF; i++) {
        if ($(i + 1) == "schedules") s += $i
        if ($(i + 1) == "crash" && $(i + 2) == "images") im += $i
        if ($(i + 1) == "failures,") f += $i } }
    END { printf "  all: %d schedules, %d crash images recovered and checked, %d failures\n", s, im, f }'
