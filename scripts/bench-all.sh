#!/usr/bin/env bash
# Re-runs every committed comparison, one after the other, and regenerates their results
# and plots under bench/ (issue 19: figures anyone can reproduce). Each benchmark's own
# script installs or builds what it needs; this one checks the machine is quiet first,
# logs each run to target/bench-all/NAME.log and goes on after a failure, then lists what
# passed. Several hours in all on a 2-vCPU machine; BENCH_ONLY="kv ycsb" runs a subset.
#
#   scripts/bench-all.sh                  # everything
#   BENCH_ONLY="kv-pipelined kv-c50" scripts/bench-all.sh
#   BENCH_FORCE=1 scripts/bench-all.sh    # run even on a busy machine
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
logs="$repo/target/bench-all"
mkdir -p "$logs"

# name | command (run from the repository's root)
benches=(
    "pool|scripts/bench-pool.sh"
    "log|scripts/bench-log.sh"
    "heap|scripts/bench-heap.sh"
    "spf|cargo run --release -q -p mnemo-bench --bin spf"
    "kv|scripts/bench-kv.sh"
    "kv-pipelined|env KV_BENCH_CLIENTS=50 KV_BENCH_TESTS=set,get KV_BENCH_ARGS='-P 16 -r 10000000 -d 100' KV_BENCH_N=1000000 KV_BENCH_ROUNDS=5 KV_BENCH_NAME=kv-pipelined scripts/bench-kv.sh"
    "kv-c50|env KV_BENCH_CLIENTS=50 KV_BENCH_TESTS=set,get KV_BENCH_ARGS='-r 10000000 -d 100' KV_BENCH_N=200000 KV_BENCH_ROUNDS=5 KV_BENCH_NAME=kv-c50 scripts/bench-kv.sh"
    "kv-restart|scripts/bench-kv-restart.sh"
    "kv-scan|scripts/bench-kv-scan.sh"
    "ycsb|scripts/bench-ycsb.sh"
    "disk-sync|cargo run --release -q -p mnemo-bench --bin disk"
    "kv-disk|env KV_BENCH_ROUNDS=5 scripts/bench-kv-disk.sh"
    "repl|scripts/bench-repl.sh 20000"
    "repl-kv|scripts/bench-repl-kv.sh 50 5 5"
    "failover|scripts/bench-failover.sh 5"
    "async-loss|scripts/bench-async-loss.sh 5"
    "vm|scripts/bench-vm.sh"
)
[ -x scripts/bench-vpm.sh ] && benches+=("vpm|scripts/bench-vpm.sh")
[ -x scripts/bench-vpm-mechanism.sh ] && benches+=("vpm-mechanism|scripts/bench-vpm-mechanism.sh")

load="$(cut -d' ' -f1 /proc/loadavg)"
if [ "${BENCH_FORCE:-0}" != 1 ] && awk -v l="$load" 'BEGIN { exit !(l > 1.0) }'; then
    echo "bench-all: load average $load: the machine is busy, and ratios measured now would" >&2
    echo "say more about the other jobs than about mnemo. Busiest processes:" >&2
    ps aux --sort=-%cpu | head -6 >&2
    echo "Wait for them, or set BENCH_FORCE=1." >&2
    exit 1
fi

passed=()
failed=()
for entry in "${benches[@]}"; do
    name="${entry%%|*}"
    command="${entry#*|}"
    if [ -n "${BENCH_ONLY:-}" ] && [[ " $BENCH_ONLY " != *" $name "* ]]; then
        continue
    fi
    echo "== $name: $command (log: $logs/$name.log)"
    started=$(date +%s)
    if bash -c "$command" >"$logs/$name.log" 2>&1; then
        passed+=("$name ($(( $(date +%s) - started )) s)")
    else
        failed+=("$name")
        echo "   failed: tail of $logs/$name.log:" >&2
        tail -5 "$logs/$name.log" >&2
    fi
done
echo "passed: ${passed[*]:-none}"
echo "failed: ${failed[*]:-none}"
echo "results and plots: bench/results, bench/plots (git diff shows what changed)"
[ "${#failed[@]}" -eq 0 ]
