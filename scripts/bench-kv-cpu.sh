#!/usr/bin/env bash
# Server CPU time per request (issue 17's per-command cost): starts BIN (a mnemo binary, or
# "redis" for redis-server without persistence) pinned to CPU 0 with a pool on /dev/shm,
# fills 300,000 keys, then runs redis-benchmark -t TEST -n N -P 16 -c 50 over 10 M random
# keys with 100-byte values on CPU 1, and prints the server's user+system CPU time divided
# by N (from /proc/PID/stat) beside redis-benchmark's rate. Comparing two builds: run them
# alternately, several times; the CPU time per request moves less with the machine's load
# than the rate does. Used for the per-command figures of docs/design/kv-server.md.
#
#   scripts/bench-kv-cpu.sh target/release/mnemo set 1000000
#   scripts/bench-kv-cpu.sh redis get 1000000
set -uo pipefail
bin=$1; t=$2; n=$3; shift 3
d=$(mktemp -d /dev/shm/cpr.XXXX)
port=$((7500 + RANDOM % 400))
if [ "$bin" = redis ]; then
  taskset -c 0 redis-server --port $port --save '' --appendonly no --dir $d >/dev/null 2>&1 &
else
  MNEMO_LOG=warn taskset -c 0 $bin serve --pool $d/kv.pool --port $port --size 2G >/dev/null 2>&1 &
fi
pid=$!
for i in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
# warm: fill keys
taskset -c 1 redis-benchmark -p $port -t set -n 300000 -P 16 -c 50 -r 10000000 -d 100 -q >/dev/null 2>&1
read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
out=$(taskset -c 1 redis-benchmark -p $port -t $t -n $n -P 16 -c 50 -r 10000000 -d 100 -q "$@" 2>/dev/null | tr '\r' '\n' | grep "requests per second" | tail -1)
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
kill $pid; wait $pid 2>/dev/null; rm -rf $d
tck=$(getconf CLK_TCK)
echo "$bin $t cpu_us_per_req=$(echo "scale=3; ($u1+$s1-$u0-$s0)*1000000/$tck/$n" | bc) user=$((u1-u0)) sys=$((s1-s0)) $out"
