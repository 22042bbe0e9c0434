#!/usr/bin/env bash
# A/B of the persistent heap against an earlier commit: builds mnemo-bench's `heap` bin at
# BASE (default: origin of the last merge, or HEAD~1) in a temporary worktree, then runs it
# and this tree's alternately, ROUNDS times each, pinned to the same CPUs, and prints the
# median thread CPU ns per op of each operation and the ratio new/old. Noise on this 2-vCPU
# VM is about 2 % (the `floor2` row runs no mnemo code); 2-thread runs are bimodal here
# (cache-line hand-over between the vCPUs changes with the host's placement), so compare
# 1 thread first.
#
#   scripts/bench-heap-ab.sh [BASE] [THREADS]    (HEAP_AB_ROUNDS=6, HEAP_AB_N=150000)
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-HEAD~1}
threads=${2:-1}
rounds=${HEAP_AB_ROUNDS:-6}
n=${HEAP_AB_N:-150000}
cpus=$([ "$threads" = 1 ] && echo 0 || echo 0,1)
repo=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# BASE is checked out and built under target/ab/ (kept: a second run builds nothing).
rev=$(git rev-parse --short "$base")
src="$repo/target/ab/src-$rev"
[ -d "$src" ] || git worktree add --detach "$src" "$rev" >/dev/null
echo "building $rev and $(git rev-parse --short HEAD) (release)..." >&2
(cd "$src" && CARGO_TARGET_DIR="$repo/target/ab/target-old" cargo build --release -q -p mnemo-bench --bin heap)
cargo build --release -q -p mnemo-bench --bin heap
old="$repo/target/ab/target-old/release/heap"
new="${CARGO_TARGET_DIR:-$repo/target}/release/heap"
for _ in $(seq 1 "$rounds"); do
    taskset -c "$cpus" "$old" run "$n" 3 "$threads" | sed 's/^/old,/'
    taskset -c "$cpus" "$new" run "$n" 3 "$threads" | sed 's/^/new,/'
done >"$work/rounds.csv"
python3 - "$work/rounds.csv" "$base" "$(git rev-parse --short HEAD)" "$threads" <<'PY'
import csv, statistics, sys, collections
d = collections.defaultdict(list)
for row in csv.reader(open(sys.argv[1])):
    try:
        d[(row[2], row[0])].append(float(row[-1]))
    except (IndexError, ValueError):
        pass
print(f"thread CPU ns/op, median of rounds, {sys.argv[4]} thread(s): {sys.argv[2]} (old) vs {sys.argv[3]} (new)")
for op in sorted({k[0] for k in d}):
    old, new = d[(op, "old")], d[(op, "new")]
    if old and new:
        o, n = statistics.median(old), statistics.median(new)
        print(f"{op:10} old {o:7.1f}  new {n:7.1f}  new/old {n / o:.3f}")
PY
