#!/usr/bin/env bash
# Runs a test binary again and again with the return of every mmap(2) delayed by 3 ms
# (strace's syscall fault injection), counting the runs that die of a signal and keeping
# their core dumps. A window in which part of a mapping's address range is unmapped (a
# failed MAP_FIXED, a munmap before a remap) normally lasts microseconds; here it lasts
# milliseconds, so a race with another thread's mmap shows in a few runs instead of one in
# hundreds. Not a test: a tool for hunting crashes (issue 19's engine_commands SIGSEGV).
#
#   scripts/mmap-window.sh BINARY [RUNS]   # default 20 runs; its temporary files in $TMPDIR
#   scripts/mmap-window.sh --issue19 [RUNS]
#
# --issue19 builds mnemo-kv's engine_commands test binary at 6dc93b3 (the commit the issue
# names) and at 6dc93b3 with cb1804f's fix undone (FileMedia::map probing MAP_SYNC with
# MAP_FIXED over the pool's reservation), under target/mmap-window/, and runs both with pools
# on the disk. Measured 2026-11-26: 15 of 30 runs of the undone fix failed (13 SIGSEGVs in
# a pool access, 2 reads of another pool's header); 0 of 236 of 6dc93b3's. The script's own
# run (--issue19 6): 2 of 6 against 0 of 6. See docs/design/durability-sites.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

if ! command -v strace >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace >/dev/null
    else
        echo "strace is missing (apt-get install strace)" >&2
        exit 1
    fi
fi

# run_many NAME BINARY RUNS: prints one line per run and a summary; cores go to
# target/mmap-window/runs-NAME/.
run_many() {
    local name="$1" bin="$2" runs="$3"
    local out="$root/target/mmap-window/runs-$name"
    mkdir -p "$out"
    local scratch
    scratch="$(mktemp -d "${TMPDIR:-/tmp}/mmap-window.XXXXXX")"
    local signalled=0 failed=0
    for i in $(seq 1 "$runs"); do
        set +e
        (
            cd "$out"
            ulimit -c unlimited
            TMPDIR="$scratch" strace -f -qq -o /dev/null -e trace=mmap \
                -e inject=mmap:delay_exit=3000 "$bin" >"$out/run-$i.log" 2>&1
        )
        local rc=$?
        set -e
        rm -rf "${scratch:?}"/*
        if [ -e "$out/core" ]; then mv "$out/core" "$out/core.$i"; fi
        if [ $rc -gt 128 ]; then
            signalled=$((signalled + 1))
        elif [ $rc -ne 0 ]; then
            failed=$((failed + 1))
        else
            rm -f "$out/run-$i.log"
        fi
        echo "$name run $i: exit $rc"
    done
    rmdir "$scratch" 2>/dev/null || true
    echo "$name: $runs runs, $signalled died of a signal, $failed failed otherwise (logs and cores in $out)"
}

if [ "${1:-}" = "--issue19" ]; then
    runs="${2:-20}"
    base="$root/target/mmap-window"
    mkdir -p "$base"
    for tree in old ctl; do
        rm -rf "$base/src-$tree"
        mkdir -p "$base/src-$tree"
        git archive 6dc93b3 | tar -x -C "$base/src-$tree"
    done
    git show cb1804f -- crates/mnemo-pmem/src/file.rs | patch -s -R -p1 -d "$base/src-ctl"
    # A target directory per tree: the trees' crates have the same names and hashes, and
    # git archive dates every file at the commit, so one directory would reuse old's build.
    declare -A bins
    for tree in old ctl; do
        bins[$tree]="$(cd "$base/src-$tree" &&
            CARGO_TARGET_DIR="$base/target-$tree" cargo test -p mnemo-kv --test engine_commands \
                --no-run --message-format=json 2>/dev/null |
            sed -n 's/.*"executable":"\([^"]*engine_commands[^"]*\)".*/\1/p' | tail -1)"
        cp "${bins[$tree]}" "$base/engine_commands-$tree"
    done
    # The pools must be on an ordinary disk file system: there MAP_SYNC is refused late.
    export TMPDIR="$base"
    run_many ctl "$base/engine_commands-ctl" "$runs"
    run_many old "$base/engine_commands-old" "$runs"
    exit 0
fi

if [ $# -lt 1 ]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi
run_many "$(basename "$1")" "$(realpath "$1")" "${2:-20}"
