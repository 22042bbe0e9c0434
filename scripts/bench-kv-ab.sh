#!/usr/bin/env bash
# A/B of `mnemo serve` against an earlier commit: builds the `mnemo` binary at BASE (default
# HEAD~1) in a temporary worktree and this tree's, then runs redis-benchmark against each in
# turn, ROUNDS times, on a fresh pool on /dev/shm (server pinned to CPU 0, client to CPU 1),
# and prints the median requests/s of each test and the ratio new/old. No Redis: this asks
# only whether a change made the server slower (for the ratio against Redis, see
# scripts/bench-kv.sh).
#
#   scripts/bench-kv-ab.sh [BASE]   (KV_AB_ROUNDS=5, KV_AB_N=200000, KV_AB_CLIENTS=50,
#                                    KV_AB_PIPELINE=1, KV_AB_TESTS=set,get)
#
# BASE is checked out under target/ab/ and built there (kept, so a second run builds
# nothing); KV_AB_OLD_BIN / KV_AB_NEW_BIN use binaries built already instead.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in redis-benchmark redis-cli taskset git python3; do
    command -v "$tool" >/dev/null || { echo "bench-kv-ab: $tool not found (apt-get install redis-tools util-linux)" >&2; exit 1; }
done
base=${1:-HEAD~1}
rounds=${KV_AB_ROUNDS:-5}
n=${KV_AB_N:-200000}
clients=${KV_AB_CLIENTS:-50}
pipeline=${KV_AB_PIPELINE:-1}
tests=${KV_AB_TESTS:-set,get}
port=${KV_AB_PORT:-7391}
repo=$(pwd)
work=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work" /dev/shm/mnemo-kv-ab.$$.pool
}
trap cleanup EXIT
old_bin=${KV_AB_OLD_BIN:-}
new_bin=${KV_AB_NEW_BIN:-}
if [ -z "$old_bin" ]; then
    rev=$(git rev-parse --short "$base")
    src="$repo/target/ab/src-$rev"
    [ -d "$src" ] || git worktree add --detach "$src" "$rev" >/dev/null
    echo "building $rev (release) in $src..." >&2
    (cd "$src" && CARGO_TARGET_DIR="$repo/target/ab/target-old" cargo build --release -q -p mnemo-cli --bin mnemo)
    old_bin="$repo/target/ab/target-old/release/mnemo"
fi
if [ -z "$new_bin" ]; then
    echo "building $(git rev-parse --short HEAD) (release)..." >&2
    cargo build --release -q -p mnemo-cli --bin mnemo
    new_bin="${CARGO_TARGET_DIR:-$repo/target}/release/mnemo"
fi

run() { # label binary
    local pool=/dev/shm/mnemo-kv-ab.$$.pool
    rm -f "$pool"
    taskset -c 0 "$2" serve --pool "$pool" --size 1G --port "$port" >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 1 100); do
        [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
        sleep 0.1
    done
    taskset -c 1 redis-benchmark -p "$port" -t "$tests" -c "$clients" -n "$n" -P "$pipeline" \
        -r 10000000 -d 100 --csv | sed 1d | sed "s/^/$1,/"
    kill "$server"
    wait "$server" 2>/dev/null || true
    server=
    rm -f "$pool"
}
for round in $(seq 1 "$rounds"); do
    echo "# round $round/$rounds" >&2
    run old "$old_bin"
    run new "$new_bin"
done >"$work/rounds.csv"
python3 - "$work/rounds.csv" "$base" "$(git rev-parse --short HEAD)" "$clients" "$pipeline" <<'PY'
import csv, statistics, sys, collections
d = collections.defaultdict(list)
for row in csv.reader(open(sys.argv[1])):
    try:
        d[(row[1], row[0])].append(float(row[2]))
    except (IndexError, ValueError):
        pass
print(f"requests/s, median of rounds, -c {sys.argv[4]} -P {sys.argv[5]}: {sys.argv[2]} (old) vs {sys.argv[3]} (new)")
for test in sorted({k[0] for k in d}):
    old, new = d[(test, "old")], d[(test, "new")]
    if old and new:
        o, n = statistics.median(old), statistics.median(new)
        print(f"{test:6} old {o:10.0f}  new {n:10.0f}  new/old {n / o:.3f}   (old {min(old):.0f}-{max(old):.0f}, new {min(new):.0f}-{max(new):.0f})")
PY
