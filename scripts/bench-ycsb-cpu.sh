#!/usr/bin/env bash
# Server CPU time per YCSB operation (issue 17): starts BIN (a mnemo binary with its pool
# on /dev/shm, or "redis" for redis-server without persistence) pinned to CPU 0, runs the
# YCSB driver's phases on CPU 1 with 8 threads (load of RECORDS records, then each
# workload given, OPS operations each), and prints for every phase the server's user+system
# CPU time (/proc/PID/stat) divided by the phase's operations (a load's operation is one
# record: HMSET and ZADD) beside the driver's throughput. Comparing two builds: run them
# alternately, several times. Used for the per-command figures of docs/design/kv-server.md.
#
#   scripts/bench-ycsb-cpu.sh target/release/mnemo 20000 100000 c a
#   scripts/bench-ycsb-cpu.sh redis 20000 100000 c reload   # reload: FLUSHALL, load again
#
# YCSB_BIN: the driver (default: the ycsb binary beside BIN, else target/release/ycsb).
# PERF_OUT=FILE: record the server with `perf record ${PERF_ARGS:--g}` during the phases (not the
# first load) into FILE.WORKLOAD.
set -uo pipefail
bin=$1; records=$2; ops=$3; shift 3
phases=("$@")
repo="$(cd "$(dirname "$0")/.." && pwd)"
ycsb="${YCSB_BIN:-}"
if [ -z "$ycsb" ]; then
  if [ "$bin" != redis ] && [ -x "$(dirname "$bin")/ycsb" ]; then ycsb="$(dirname "$bin")/ycsb"
  else ycsb="${CARGO_TARGET_DIR:-$repo/target}/release/ycsb"; fi
fi
d=$(mktemp -d /dev/shm/ycpu.XXXX)
port=$((7900 + RANDOM % 400))
if [ "$bin" = redis ]; then
  taskset -c 0 redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir $d >/dev/null 2>&1 &
else
  MNEMO_LOG=warn taskset -c 0 $bin serve --pool $d/kv.pool --port $port --size 1G >/dev/null 2>&1 &
fi
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf $d' EXIT
for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
tck=$(getconf CLK_TCK)
phase() { # workload, operations
  local w=$1 n=$2 u0 s0 u1 s1 out perf_pid=""
  read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
  if [ -n "${PERF_OUT:-}" ] && [ -z "${first:-}" ]; then
    perf record ${PERF_ARGS:--g} -p $pid -o "$PERF_OUT.$w" >/dev/null 2>&1 &
    perf_pid=$!
    sleep 0.5
  fi
  out=$(taskset -c 1 "$ycsb" phase --addr 127.0.0.1:$port --workload "$w" --records "$records" \
        --ops "$n" --threads 8 2>&1 | grep '^\[OVERALL\], Throughput' | awk -F', ' '{print $3}')
  [ -n "$perf_pid" ] && { kill -INT $perf_pid; wait $perf_pid 2>/dev/null; }
  read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
  echo "$bin $w cpu_us_per_op=$(echo "scale=2; ($u1+$s1-$u0-$s0)*1000000/$tck/$n" | bc) user=$((u1-u0)) sys=$((s1-s0)) ops_per_s=${out%.*}"
}
first=1 phase load "$records"
for w in "${phases[@]}"; do
  if [ "$w" = reload ]; then # FLUSHALL, then the load again (measured and profiled)
    redis-cli -p $port flushall >/dev/null; phase load "$records"
  else phase "$w" "$ops"; fi
done
