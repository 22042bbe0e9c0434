#!/usr/bin/env bash
# One YCSB workload, build against build (issue 17): ROUNDS rounds, in each of which every
# server given runs scripts/bench-ycsb-cpu.sh in turn (a fresh pool or redis-server without
# persistence on CPU 0, the driver on CPU 1: a load of RECORDS records, then OPS operations
# of WORKLOAD), so that this VM's drift falls on all of them. Prints that script's lines
# (server CPU per operation and throughput, load and workload) under a header naming the
# run; redirect them under bench/results/ to keep them.
#
#   scripts/bench-ycsb-ab.sh d 100000 100000 3 /tmp/mnemo-before target/release/mnemo redis
#
# A server is a mnemo binary or the word "redis"; YCSB_BIN as for bench-ycsb-cpu.sh.
set -uo pipefail
if [ $# -lt 5 ]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
workload=$1; records=$2; ops=$3; rounds=$4; shift 4
here="$(cd "$(dirname "$0")" && pwd)"
echo "# $(date -u +%FT%TZ) workload=$workload records=$records ops=$ops rounds=$rounds commit=$(git -C "$here" rev-parse --short HEAD)"
for round in $(seq "$rounds"); do
    for server in "$@"; do
        "$here/bench-ycsb-cpu.sh" "$server" "$records" "$ops" "$workload" | sed "s/^/round=$round /"
    done
done
