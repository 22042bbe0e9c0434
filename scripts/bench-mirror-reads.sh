#!/usr/bin/env bash
# Readers on the mirror (issue 14): what reads on a sync-mode mirror's --read-port cost, and
# what they cost the primary. A release `mnemo mirror serve --read-port` and `mnemo serve
# --mirror --repl-mode sync` on /dev/shm, driven by redis-benchmark (50 clients, random keys
# among 100,000): per round, SET on the primary alone; GET on the primary alone (the peer of
# the read port, measured in the same run); GET on the mirror's read port with the primary
# idle; then SET on the primary and GET on the read port at once. ROUNDS rounds (default 3),
# N requests per case (default 50000). Results: bench/results/mirror-reads.csv (round, case,
# test, rps, p50_ms, p99_ms, commit, command) and the read port's views built. See
# bench/README.md.
#
#   scripts/bench-mirror-reads.sh        # 3 rounds
#   N=100000 scripts/bench-mirror-reads.sh 5
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
n="${N:-50000}"
command -v redis-benchmark >/dev/null || { echo "bench-mirror-reads: needs redis-benchmark (Debian redis-tools)" >&2; exit 1; }
cargo build --release -q -p mnemo-cli --bin mnemo
bin="${CARGO_TARGET_DIR:-target}/release/mnemo"
dir="$(mktemp -d /dev/shm/mnemo-bench-reads.XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
until_listening() { for _ in $(seq 200); do (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; echo "port $1 never listened" >&2; exit 1; }

head -c 32 /dev/urandom | base64 > "$dir/secret"
chmod 600 "$dir/secret"
repl="$(free_port)"; reads="$(free_port)"; port="$(free_port)"
MNEMO_LOG=warn "$bin" mirror serve --dir "$dir/mirror" --port "$repl" --read-port "$reads" \
    --secret-file "$dir/secret" 2>"$dir/mirror.log" &
pids+=($!)
until_listening "$repl"
MNEMO_LOG=warn "$bin" serve --pool "$dir/primary/kv.pool" --port "$port" --mirror "127.0.0.1:$repl" \
    --repl-mode sync --repl-secret-file "$dir/secret" 2>"$dir/primary.log" &
pids+=($!)
until_listening "$port"

# One redis-benchmark run: "rps,p50,p99" from its CSV line.
run() {
    local p="$1" test="$2"
    redis-benchmark -p "$p" -t "$test" -n "$n" -r 100000 -c 50 --csv 2>/dev/null |
        awk -F'"' 'NR == 2 { printf "%s,%s,%s\n", $4, $10, $14 }'
}

out=bench/results/mirror-reads.csv
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates scripts || echo +dirty)"
command_line="N=$n scripts/bench-mirror-reads.sh $rounds"
echo "round,case,test,rps,p50_ms,p99_ms,commit,command" > "$out"
# Each row: what run() printed, then the commit and the command that made it.
row() { echo "$1,$commit,\"$command_line\""; }
# Every key the GETs ask for exists (values of 3 bytes, as redis-benchmark's SET writes).
redis-benchmark -p "$port" -t set -n 200000 -r 100000 -c 50 -q >/dev/null 2>&1
for round in $(seq "$rounds"); do
    row "$round,alone,set,$(run "$port" set)" >> "$out"
    row "$round,primary,get,$(run "$port" get)" >> "$out"
    row "$round,read-port,get,$(run "$reads" get)" >> "$out"
    run "$port" set > "$dir/set.csv" &
    setter=$!
    row "$round,both,get,$(run "$reads" get)" >> "$out"
    wait "$setter"
    row "$round,both,set,$(cat "$dir/set.csv")" >> "$out"
done
views="$(redis-cli -p "$reads" info replication | tr -d '\r' | grep -E '^mnemo_read_view' | tr '\n' ' ')"
column -s, -t < "$out"
echo "read port: $views"
echo "(medians per case: sort -t, -k2,3 $out)"
