#!/usr/bin/env bash
# Virtual persistent memory (issue 15): the fault mechanism alone, a SIGSEGV handler that maps
# the file's page (what mnemo-vpm does) against userfaultfd (a handler thread mapping the page
# and waking the faulting thread, or copying the bytes into anonymous memory), beside the
# kernel's own first touch of a mapped tmpfs page. Needs userfaultfd (root, or
# vm.unprivileged_userfaultfd=1). Output: bench/results/vpm-mechanism.csv and .json.
#
#   scripts/bench-vpm-mechanism.sh                                  # 16384 pages, 5 rounds
#   VPM_MECH_PAGES=4096 VPM_MECH_ROUNDS=2 scripts/bench-vpm-mechanism.sh   # a quick look
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -e /work/BENCH_LOCK ]; then
    echo "bench-vpm-mechanism: /work/BENCH_LOCK exists (another benchmark is timing); try later" >&2
    exit 1
fi
# userfaultfd-sys generates its bindings with bindgen at build time: it needs libclang.
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
    echo "bench-vpm-mechanism: building needs libclang (apt-get install libclang-14-dev)" >&2
    exit 1
fi
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-bench --bin vpm_mechanism
target="${CARGO_TARGET_DIR:-$repo/target}/release"
VPM_MECH_COMMAND="$(env | grep -E '^VPM_MECH_(PAGES|ROUNDS)=' | sort | tr '\n' ' ')scripts/bench-vpm-mechanism.sh" \
    "$target/vpm_mechanism"
