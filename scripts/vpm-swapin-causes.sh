#!/usr/bin/env bash
# Where the key-value server's swap-ins come from (issue 15): runs `mnemo serve` on a virtual
# region of BUDGET pages, redis-benchmark's SET of new keys (Temporality's linear SET) against
# it under `perf record` (the swap file's pread64, which only a swap-in calls, and the
# SIGSEGV each fault raises, with the faulting thread's stack), then attributes each swap-in
# to the function of mnemo-kv that faulted (the SIGSEGV just before its pread).
#
#   scripts/vpm-swapin-causes.sh [MNEMO] [BUDGET_PAGES] [N]
#       (defaults: target/release/mnemo, 3273 pages = MRR 60% of the linear SET at 9c2a82a,
#        100000 requests)
#
# Needs perf with the syscalls and signal tracepoints (root or perf_event_paranoid <= 1).
# The server runs slower under perf: the counts matter here, not the rates.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
mnemo=${1:-$repo/target/release/mnemo}
pages=${2:-3273}
n=${3:-100000}
for tool in perf redis-benchmark redis-cli taskset python3; do
    command -v "$tool" >/dev/null || { echo "vpm-swapin-causes: $tool not found" >&2; exit 1; }
done
work=$(mktemp -d /dev/shm/vpm-causes.XXXXXX)
disk=$(mktemp -d /var/tmp/vpm-causes.XXXXXX)
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work" "$disk"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MNEMO_LOG=warn taskset -c 0 "$mnemo" serve --port "$port" --size 512M --pool "$work/kv.pool" \
    --pm-budget $((pages * 4096)) --swap "$disk/kv.swap" >/dev/null 2>&1 &
server=$!
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
perf record -q -e syscalls:sys_enter_pread64 -e signal:signal_generate --call-graph dwarf,32768 \
    -p "$server" -o "$work/perf.data" 2>/dev/null &
perf=$!
sleep 1
taskset -c 1 redis-benchmark -p "$port" -t set -c 50 -n "$n" -r 1000000000 -d 100 -q
redis-cli -p "$port" info persistence | grep -E "mnemo_vpm_(mrr|faults|swap_outs|swap_ins):"
kill -INT "$perf"
wait "$perf" || true
perf script -i "$work/perf.data" -F event,ip,sym 2>/dev/null > "$work/perf.txt"
python3 - "$work/perf.txt" <<'PY'
import collections, re, sys
blocks = open(sys.argv[1]).read().split("\n\n")
last, causes, swapins = None, collections.Counter(), 0
def frames(block):
    out = []
    for line in block.split("\n")[1:]:
        m = re.match(r"\s*[0-9a-f]+ (.*)", line)
        if m:
            out.append(m.group(1).replace(" (inlined)", ""))
    return out
for block in blocks:
    block = block.strip("\n")
    if not block:
        continue
    head = block.split("\n")[0]
    if "signal_generate" in head:
        last = frames(block)
    elif "pread64" in head:
        swapins += 1
        kv = [f for f in (last or []) if f.startswith("mnemo_kv::engine")]
        table = [f for f in kv if "engine::dict::" in f]
        causes[(table or kv or ["(not in mnemo-kv)"])[0]] += 1
        last = None
print(f"swap-ins seen by perf: {swapins} (perf may drop events under load)")
for cause, count in causes.most_common(12):
    print(f"{count:8d} {100 * count / max(swapins, 1):5.1f}%  {cause}")
PY
