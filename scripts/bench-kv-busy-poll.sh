#!/usr/bin/env bash
# mnemo serve with different busy-poll windows (--busy-poll-us) beside redis-server without
# persistence: redis-benchmark SET and GET, 100-byte values, random keys over 10 M, the
# server pinned to CPU 0 and the client to CLIENT_CPU (1; 0 puts both on one CPU). Servers
# rotate each round. Prints one line per run: round, server, test, requests/s, and the
# server's CPU per request in ns (user+system from /proc/PID/stat, 10 ms ticks).
#
#   scripts/bench-kv-busy-poll.sh                         # 5 rounds, c=50, 300,000 requests
#   CLIENTS=1 N=30000 scripts/bench-kv-busy-poll.sh       # one client
#   CLIENTS=1 N=30000 CLIENT_CPU=0 scripts/bench-kv-busy-poll.sh   # sharing the server's CPU
#   DIR=/tmp TESTS=set N=100000 scripts/bench-kv-busy-poll.sh      # the pool on the disk
#   EXTRA="-P 16" N=1000000 scripts/bench-kv-busy-poll.sh          # pipelined
#
# Environment: WINDOWS ("0 50": --busy-poll-us values), ROUNDS (5), N, CLIENTS (50),
# CLIENT_CPU (1), TESTS ("set get"), DIR (/dev/shm: where pools and Redis's files go),
# EXTRA (more redis-benchmark arguments). See docs/design/kv-server.md, "Polling before
# sleeping".
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
for tool in redis-server redis-benchmark redis-cli taskset python3; do
    command -v "$tool" >/dev/null || { echo "bench-kv-busy-poll: $tool not found (apt-get install redis-server redis-tools util-linux)" >&2; exit 1; }
done
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli --bin mnemo
bin="${CARGO_TARGET_DIR:-$repo/target}/release/mnemo"
rounds="${ROUNDS:-5}"
n="${N:-300000}"
servers=(redis)
for w in ${WINDOWS:-0 50}; do servers+=("mnemo-$w"); done
echo "# commit $(git -C "$repo" rev-parse --short HEAD), $(date -u +%FT%TZ), clients ${CLIENTS:-50}, n $n, client CPU ${CLIENT_CPU:-1}, dir ${DIR:-/dev/shm}, extra '${EXTRA:-}'"
echo "# round server test requests_per_s server_cpu_ns_per_request"
pid=""
dir=""
# A failed or interrupted run leaves no server spinning on CPU 0 and no pool behind.
cleanup() {
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    if [ -n "$dir" ]; then rm -rf "$dir"; fi
    pid=""
    dir=""
}
trap cleanup EXIT
cpu_ticks() {
    [ -r "/proc/$pid/stat" ] || { echo "bench-kv-busy-poll: $1 exited during the run" >&2; exit 1; }
    awk '{print $14 + $15}' "/proc/$pid/stat"
}
run_one() {
    local server=$1 round=$2 port up=""
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    dir=$(mktemp -d "${DIR:-/dev/shm}/busy-poll.XXXXXX")
    case $server in
        redis) taskset -c 0 redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null 2>&1 & ;;
        mnemo-*) MNEMO_LOG=warn taskset -c 0 "$bin" serve --busy-poll-us "${server#mnemo-}" --port "$port" --size 1G --pool "$dir/kv.pool" >/dev/null 2>&1 & ;;
    esac
    pid=$!
    for _ in $(seq 100); do
        if redis-cli -p "$port" ping >/dev/null 2>&1; then up=1; break; fi
        sleep 0.1
    done
    [ -n "$up" ] || { echo "bench-kv-busy-poll: $server did not answer on port $port within 10 s" >&2; exit 1; }
    for test in ${TESTS:-set get}; do
        t0=$(cpu_ticks "$server")
        # shellcheck disable=SC2086 # EXTRA is a list of arguments
        rps=$(taskset -c "${CLIENT_CPU:-1}" redis-benchmark -p "$port" -t "$test" -d 100 -r 10000000 \
            -c "${CLIENTS:-50}" -n "$n" ${EXTRA:-} --csv | tail -1 | cut -d, -f2 | tr -d '"')
        t1=$(cpu_ticks "$server")
        echo "$round $server $test $rps $(( (t1 - t0) * 1000000000 / $(getconf CLK_TCK) / n ))"
    done
    cleanup
}
for round in $(seq "$rounds"); do
    k=$(( (round - 1) % ${#servers[@]} ))
    for server in "${servers[@]:$k}" "${servers[@]:0:$k}"; do run_one "$server" "$round"; done
done
