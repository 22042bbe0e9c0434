#!/usr/bin/env bash
# Log append benchmark: mnemo-log against libpmemlog (PMDK 1.12) in the same run, both on a
# pool on /dev/shm with cache flushes + fences (mnemo: tmpfs is flushed with clwb/sfence;
# libpmemlog: PMEM_IS_PMEM_FORCE=1). Rounds alternate the two programs so machine load hits
# both alike; each program reports the median of its runs, and the script the median of the
# rounds. Writes bench/results/log-append.csv and bench/plots/log-append.svg.
#
# usage: scripts/bench-log.sh          (LOG_BENCH_N, LOG_BENCH_RUNS, LOG_BENCH_ROUNDS,
#                                       LOG_BENCH_LEN override the defaults below)
# needs: cc, libpmemlog-dev (installed when run as root), cargo, python3
set -euo pipefail
cd "$(dirname "$0")/.."

export LOG_BENCH_N=${LOG_BENCH_N:-1000000}
export LOG_BENCH_RUNS=${LOG_BENCH_RUNS:-5}
export LOG_BENCH_LEN=${LOG_BENCH_LEN:-64}
rounds=${LOG_BENCH_ROUNDS:-3}
target_dir=${CARGO_TARGET_DIR:-target}
out=bench/results/log-append.csv

if [ ! -e /usr/include/libpmemlog.h ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "bench-log: installing libpmemlog-dev (the PMDK peer)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpmemlog-dev >/dev/null
    else
        echo "libpmemlog.h not found: sudo apt-get install libpmemlog-dev" >&2
        exit 1
    fi
fi
peer="$target_dir/pmemlog-append"
mkdir -p "$target_dir"
cc -O2 -Wall -Wextra -o "$peer" bench/pmemlog/append.c -lpmemlog
# mnemo-bench's log bin: a production build (no mnemo-testkit, so no `mutants` checks).
cargo build --release -p mnemo-bench --bin log 2>/dev/null
ours="$target_dir/release/log"

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for round in $(seq 1 "$rounds"); do
    echo "# round $round/$rounds" >&2
    "$ours" >>"$raw"
    PMEM_IS_PMEM_FORCE=1 "$peer" "/dev/shm/pmemlog-bench.$$" "$LOG_BENCH_N" "$LOG_BENCH_RUNS" "$LOG_BENCH_LEN" >>"$raw"
done

python3 - "$raw" "$out" "$rounds" <<'PY'
import csv, datetime, statistics, sys, platform
raw, out, rounds = sys.argv[1], sys.argv[2], sys.argv[3]
rows = {}
for line in open(raw):
    f = line.strip().split(",")
    if len(f) == 8:
        rows.setdefault(f[0], []).append(f)
cpu = "unknown"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name"):
        cpu = line.split(":", 1)[1].strip()
        break
def median_row(rs):
    rs = sorted(rs, key=lambda r: float(r[3]))
    return rs[len(rs) // 2]
peer = median_row(rows["pmemlog"])
peer_ns = float(peer[3])
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
with open(out, "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["date", "cpu", "load_avg_1m", "impl", "payload_bytes", "appends_per_run",
                "rounds", "ns_per_append", "appends_per_s", "speedup_vs_pmemlog",
                "cpu_ns_per_append", "cpu_appends_per_s", "cpu_speedup_vs_pmemlog",
                "fences_per_append", "lines_per_append"])
    load = open("/proc/loadavg").read().split()[0]
    peer_cpu = statistics.median(float(r[7]) for r in rows["pmemlog"])
    for name in ["mnemo-log", "mnemo-log-batch8", "pmemlog", "floor-nt", "floor-clwb1", "floor-clwb2"]:
        if name not in rows:
            continue
        r = median_row(rows[name])
        ns = float(r[3])
        cpu_ns = statistics.median(float(x[7]) for x in rows[name])
        w.writerow([when, cpu, load, name, r[1], r[2], rounds, f"{ns:.1f}", f"{1e9/ns:.0f}",
                    f"{peer_ns/ns:.2f}", f"{cpu_ns:.1f}", f"{1e9/cpu_ns:.0f}",
                    f"{peer_cpu/cpu_ns:.2f}", r[5], r[6]])
        print(f"{name:17} wall {ns:7.1f} ns {1e9/ns/1e6:5.2f} M/s x{peer_ns/ns:.2f} | "
              f"cpu {cpu_ns:7.1f} ns {1e9/cpu_ns/1e6:5.2f} M/s x{peer_cpu/cpu_ns:.2f} | "
              f"fences {r[5]} lines {r[6]}  (load {load})")
print(f"written {out}")

# A bar chart of the same figures (no plotting library needed): ns per append, wall and CPU.
plot = out.replace("results/", "plots/").replace(".csv", ".svg")
data = [r for r in csv.DictReader(open(out))]
width, bar, gap, left = 760, 16, 14, 190
top = 50
height = top + len(data) * (2 * bar + gap) + 40
scale = (width - left - 90) / max(float(r["ns_per_append"]) for r in data)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
       f'font-family="sans-serif" font-size="12">',
       f'<text x="10" y="20" font-size="14">64-byte log append on /dev/shm: ns per append '
       f'(lower is better), load {data[0]["load_avg_1m"]}</text>',
       f'<rect x="{left}" y="30" width="12" height="10" fill="#4878a8"/>'
       f'<text x="{left + 16}" y="39">wall clock</text>'
       f'<rect x="{left + 100}" y="30" width="12" height="10" fill="#e0a040"/>'
       f'<text x="{left + 116}" y="39">thread CPU time</text>']
y = top
for r in data:
    wall, cpu_t = float(r["ns_per_append"]), float(r["cpu_ns_per_append"])
    svg.append(f'<text x="10" y="{y + bar + 4}">{r["impl"]}</text>')
    svg.append(f'<rect x="{left}" y="{y}" width="{wall * scale:.1f}" height="{bar}" fill="#4878a8"/>')
    svg.append(f'<text x="{left + wall * scale + 4:.1f}" y="{y + 12}">{wall:.0f} '
               f'(x{r["speedup_vs_pmemlog"]})</text>')
    svg.append(f'<rect x="{left}" y="{y + bar}" width="{cpu_t * scale:.1f}" height="{bar}" fill="#e0a040"/>')
    svg.append(f'<text x="{left + cpu_t * scale + 4:.1f}" y="{y + bar + 12}">{cpu_t:.0f} '
               f'(x{r["cpu_speedup_vs_pmemlog"]})</text>')
    y += 2 * bar + gap
svg.append(f'<text x="10" y="{height - 12}">fences/append: mnemo 1, batch8 0.125, pmemlog 2; '
           f'floors: bare stores + fences, no software. {data[0]["date"]}</text>')
svg.append('</svg>')
open(plot, "w").write("\n".join(svg) + "\n")
print(f"written {plot}")
PY
