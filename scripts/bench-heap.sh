#!/usr/bin/env bash
# Persistent heap benchmark: mnemo-heap against PMDK libpmemobj 1.12 in the same run, both on
# a pool on /dev/shm with cache flushes + fences (mnemo: tmpfs is flushed with clwb/sfence;
# libpmemobj: PMEM_IS_PMEM_FORCE=1). Operations: durable 8-byte transactional update,
# transactional alloc of 64 B, atomic alloc of 64 B, atomic free; 1 thread (pinned to one
# CPU) and 2 threads (pinned to two CPUs), each thread its own objects.
#
# Rounds alternate the programs (mnemo, PMDK, mnemo, PMDK, ...) on the same CPUs, so the
# machine's load hits both alike. Each program prints the median of its runs; the report
# takes the median of the rounds, wall clock and thread CPU time, and writes
# bench/results/heap.csv, bench/results/heap.json, bench/plots/heap.svg and every round's
# lines in bench/results/heap-rounds.csv. Fences and lines
# per op: counted for mnemo (a separate untimed pass over a counting medium), stated for
# PMDK (its test obj_persist_count's expectations).
#
# usage: scripts/bench-heap.sh   (HEAP_BENCH_N ops per thread per run, HEAP_BENCH_RUNS runs
#                                 per program, HEAP_BENCH_ROUNDS rounds, HEAP_BENCH_CPUS the
#                                 two CPUs to pin to, e.g. "0,1")
# needs: cc, libpmemobj-dev (installed when run as root), cargo, taskset
set -euo pipefail
cd "$(dirname "$0")/.."

n=${HEAP_BENCH_N:-150000}
runs=${HEAP_BENCH_RUNS:-3}
rounds=${HEAP_BENCH_ROUNDS:-5}
cpus=${HEAP_BENCH_CPUS:-0,1}
one_cpu=${cpus%%,*}
target_dir=${CARGO_TARGET_DIR:-target}
export MNEMO_BENCH_COMMAND="HEAP_BENCH_N=$n HEAP_BENCH_RUNS=$runs HEAP_BENCH_ROUNDS=$rounds HEAP_BENCH_CPUS=$cpus scripts/bench-heap.sh"

if [ ! -e /usr/include/libpmemobj.h ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "bench-heap: installing libpmemobj-dev (the PMDK peer)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpmemobj-dev >/dev/null
    else
        echo "libpmemobj.h not found: sudo apt-get install libpmemobj-dev" >&2
        exit 1
    fi
fi
peer="$target_dir/pmemobj-heap"
mkdir -p "$target_dir"
cc -O2 -Wall -Wextra -o "$peer" bench/pmemobj/heap.c -lpmemobj -lpthread
# A bin of mnemo-bench (release, no mnemo-testkit in its graph, so mnemo-pmem's `mutants`
# feature is off), not `cargo bench -p mnemo-heap`.
cargo build --release -q -p mnemo-bench --bin heap
ours="$target_dir/release/heap"

raw=$(mktemp)
trap 'rm -f "$raw" /dev/shm/pmemobj-heap-bench.$$' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$rounds"); do
    for threads in 1 2; do
        if [ "$threads" = 1 ]; then pin=$one_cpu; else pin=$cpus; fi
        echo "# round $round/$rounds, $threads thread(s), CPUs $pin, load $(cut -d' ' -f1 /proc/loadavg)" >&2
        taskset -c "$pin" "$ours" run "$n" "$runs" "$threads" | tee -a "$raw" >&2
        PMEM_IS_PMEM_FORCE=1 taskset -c "$pin" "$peer" "/dev/shm/pmemobj-heap-bench.$$" \
            "$n" "$runs" "$threads" | tee -a "$raw" >&2
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
"$ours" report "$raw" "$load_before" "$load_after" "$rounds"
# Every round's lines, for checking the medians.
{
    echo "impl,op,threads,ops_per_thread,wall_ns_per_op,ops_per_s,fences_per_op,lines_per_op,cpu_ns_per_op"
    cat "$raw"
} >bench/results/heap-rounds.csv
echo "load average (1/5/15 min): before $load_before, after $load_after"
