#!/usr/bin/env bash
# Durable on an ordinary disk (issue 20): SET with redis-benchmark against, side by side in
# one run, all on the same disk directory (KV_DISK_DIR, default /tmp):
#   redis-server --appendonly yes --appendfsync always
#   mnemo-local: mnemo serve, pool on the disk, MNEMO_WAL=0: the local policy (msync of the
#     mapping per group commit)
#   mnemo-wal: the default: the write-ahead file (one direct write with RWF_DSYNC per group
#     commit, replies after it), the pool mapped shared
#   mnemo-wal-nospin: the same with MNEMO_WAL_SPIN=0: no idle-priority thread keeps the
#     server's CPU busy while a write waits for the disk (crates/mnemo-pmem/src/awake.rs)
#   mnemo-wal-buffered: the same with MNEMO_WAL_DIRECT=0: the write-ahead file through the
#     page cache (pwrite and fdatasync per group commit)
#   mnemo-wal-private: MNEMO_WAL_PRIVATE=1: the pool mapped copy-on-write (its file changes
#     only at checkpoints)
#   mnemo-wal-deferred: the same with MNEMO_DEFER_ACKS=1: replies held in the loop until
#     durable while the next batches run (deferred acknowledgements)
#   mnemo-wal-gather: the default with --commit-gathering (a writing batch waits for the
#     clients just answered when its commits wait for the disk: docs/design/kv-server.md)
# for c=1, c=50 and -P 16 -c 50 (KV_DISK_SERVERS picks the servers, default all but
# mnemo-local; KV_DISK_WORKLOADS picks the workloads, default all three); each round runs
# every server, in the reverse order at every other round. Server and client pinned to
# different CPUs (KV_SERVER_CPU, KV_CLIENT_CPU; a list such as 0,1 unpins).
# KV_CLIENT_THREADS=N runs redis-benchmark's multi-thread mode (`--threads N`) for both
# servers alike.
# SETs of 100 bytes over KV_BENCH_KEYS random keys (redis-benchmark -r; default 100000).
# Output: bench/plots/kv-disk.svg (medians of the run) and bench/results/kv-disk.csv
# (appended rows: commit, round, server, workload,
# requests/s, p50 ms) and bench/results/kv-disk-runs.csv (the same with the command, the
# machine, the load average and the key range of each row).
#
#   scripts/bench-kv-disk.sh                       # -n 100000, 3 rounds
#   KV_BENCH_N=20000 KV_BENCH_ROUNDS=1 scripts/bench-kv-disk.sh   # a quick look
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
for tool in redis-server redis-benchmark redis-cli taskset; do
    command -v "$tool" >/dev/null || { echo "bench-kv-disk: $tool not found" >&2; exit 1; }
done
n="${KV_BENCH_N:-100000}"
n_c1="${KV_BENCH_N_C1:-20000}"
rounds="${KV_BENCH_ROUNDS:-3}"
disk="${KV_DISK_DIR:-/tmp}"
server_cpu="${KV_SERVER_CPU:-0}"
client_cpu="${KV_CLIENT_CPU:-1}"
port="${KV_PORT:-16399}"
keys="${KV_BENCH_KEYS:-100000}"
servers="${KV_DISK_SERVERS:-redis-aof-always mnemo-wal mnemo-wal-private mnemo-wal-deferred}"
workloads="${KV_DISK_WORKLOADS:-c1 c50 p16}"
client_threads="${KV_CLIENT_THREADS:-}"
command_line="KV_BENCH_N=$n KV_BENCH_N_C1=$n_c1 KV_BENCH_ROUNDS=$rounds KV_DISK_DIR=$disk KV_BENCH_KEYS=$keys KV_DISK_SERVERS='$servers' KV_DISK_WORKLOADS='$workloads' KV_SERVER_CPU=$server_cpu KV_CLIENT_CPU=$client_cpu KV_CLIENT_THREADS=$client_threads scripts/bench-kv-disk.sh"
machine="$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(df -T "$disk" | awk 'NR==2 {print $2}') on $(df "$disk" | awk 'NR==2 {print $1}')"
runs="$repo/bench/results/kv-disk-runs.csv"
[ -s "$runs" ] || echo "commit,command,machine,load1,round,server,workload,keys,rps,p50_ms" >"$runs"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-cli --bin mnemo
mnemo="${CARGO_TARGET_DIR:-$repo/target}/release/mnemo"
commit="$(git -C "$repo" rev-parse --short HEAD)"
out="$repo/bench/results/kv-disk.csv"
mkdir -p "$(dirname "$out")"
[ -s "$out" ] || echo "commit,round,server,workload,rps,p50_ms" >"$out"

wait_port() {
    for _ in $(seq 1 300); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "bench-kv-disk: server on $port did not start" >&2
    return 1
}

start() { # server dir
    case "$1" in
    redis-aof-always)
        taskset -c "$server_cpu" redis-server --port "$port" --bind 127.0.0.1 --save '' \
            --appendonly yes --appendfsync always --dir "$2" >/dev/null 2>&1 &
        ;;
    mnemo-local)
        MNEMO_WAL=0 MNEMO_LOG=warn taskset -c "$server_cpu" "$mnemo" serve --port "$port" \
            --size 1G --pool "$2/kv.pool" >/dev/null 2>&1 &
        ;;
    mnemo-wal-buffered)
        MNEMO_WAL_DIRECT=0 MNEMO_LOG=warn taskset -c "$server_cpu" "$mnemo" serve --port "$port" \
            --size 1G --pool "$2/kv.pool" >/dev/null 2>&1 &
        ;;
    mnemo-wal-nospin)
        MNEMO_WAL_SPIN=0 MNEMO_LOG=warn taskset -c "$server_cpu" "$mnemo" serve --port "$port" \
            --size 1G --pool "$2/kv.pool" >/dev/null 2>&1 &
        ;;
    mnemo-wal-private)
        MNEMO_WAL_PRIVATE=1 MNEMO_LOG=warn taskset -c "$server_cpu" "$mnemo" serve --port "$port" \
            --size 1G --pool "$2/kv.pool" >/dev/null 2>&1 &
        ;;
    mnemo-wal-deferred)
        MNEMO_WAL_PRIVATE=1 MNEMO_DEFER_ACKS=1 MNEMO_LOG=warn taskset -c "$server_cpu" "$mnemo" serve --port "$port" \
            --size 1G --pool "$2/kv.pool" >/dev/null 2>&1 &
        ;;
    mnemo-wal-gather)
        MNEMO_LOG=warn taskset -c "$server_cpu" "$mnemo" serve --port "$port" \
            --size 1G --pool "$2/kv.pool" --commit-gathering >/dev/null 2>&1 &
        ;;
    mnemo-wal)
        MNEMO_LOG=warn taskset -c "$server_cpu" "$mnemo" serve --port "$port" \
            --size 1G --pool "$2/kv.pool" >/dev/null 2>&1 &
        ;;
    esac
    pid=$!
    wait_port
}

measure() { # server round
    for workload in $workloads; do
        dir="$(mktemp -d "$disk/mnemo-bench-disk.XXXXXX")"
        start "$1" "$dir"
        case "$workload" in
        c1) args=(-c 1 -n "$n_c1") ;;
        c50) args=(-c 50 -n "$n") ;;
        p16) args=(-c 50 -P 16 -n "$n") ;;
        esac
        # A run with client threads is its own workload in the results (c50-t2, ...).
        label="$workload"
        [ -z "$client_threads" ] || { args+=(--threads "$client_threads"); label="$workload-t$client_threads"; }
        load1="$(cut -d' ' -f1 /proc/loadavg)"
        line="$(taskset -c "$client_cpu" redis-benchmark -p "$port" -t set -d 100 -r "$keys" "${args[@]}" --csv | tail -1)"
        rps="$(echo "$line" | cut -d, -f2 | tr -d '"')"
        p50="$(echo "$line" | cut -d, -f5 | tr -d '"')"
        echo "$commit,$2,$1,$label,$rps,$p50" | tee -a "$out"
        echo "$commit,\"$command_line\",\"$machine\",$load1,$2,$1,$label,$keys,$rps,$p50" >>"$runs"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        rm -rf "$dir"
    done
}

# Every other round runs the servers in the reverse order: measured one after the other,
# whichever ran second of two did several percent better (bench/README.md, "Runs of stop
# 27"), so a fixed order would lean the ratios.
reversed="$(echo $servers | tr ' ' '\n' | tac | tr '\n' ' ')"
for round in $(seq 1 "$rounds"); do
    order="$servers"
    [ $((round % 2)) -eq 0 ] && order="$reversed"
    for server in $order; do
        measure "$server" "$round"
    done
done

# The plot: medians of this run's rounds (bench/plots/kv-disk.svg).
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" -p mnemo-bench --bin plot_csv
"${CARGO_TARGET_DIR:-$repo/target}/release/plot_csv" --csv "$out" --svg "$repo/bench/plots/kv-disk.svg" \
    --series server --group workload --value rps --commit "$commit" \
    --title "SET on an ordinary disk, 100-byte values, $keys random keys" --y-label "requests/s"
