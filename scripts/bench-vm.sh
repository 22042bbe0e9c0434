#!/usr/bin/env bash
# Persistent VMs (issue 16): fixation and recovery time and state size for guests of several
# RAM sizes, against a cold boot of the same guest in the same run. Results:
# bench/results/vm.csv (one row per power cycle) and bench/results/vm.json (medians and
# ratios), bench/plots/vm.svg. See bench/README.md.
#
#   scripts/bench-vm.sh [SIZES] [ROUNDS]     defaults: "256M 1G 4G" 5
#
# Each round of each size: a fresh VM on /dev/shm (sparse RAM file), cold boot, the guest
# counts to 8 (about 2 s of guest work), signal 44 (fixation), a fresh `mnemo vm run`
# (recovery), the guest counts 4 more, signal 44 again. Timed:
#   cold_boot_ms      spawn of the hypervisor -> the guest's first counter line (service)
#   fixation_ms       the hypervisor's own figure: stop -> state published (synced, renamed)
#   signal_to_exit_ms signal 44 sent -> hypervisor exited (QEMU quit included)
#   recovery_ms       the hypervisor's own figure: state checked -> QEMU started -> state
#                     loaded -> cont
#   resume_ms         spawn of the hypervisor -> the guest's next counter line (service);
#                     the guest prints every 0.25 s, so up to 250 ms of it is the guest's
#                     own sleep
# Needs qemu-system-x86, busybox-static, cpio (scripts/vm-guest.sh), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
# The plot (bench/plots/vm.svg), from bench/results/vm.json: `scripts/bench-vm.sh --plot`
# redraws it from the committed results without running anything.
plot() {
python3 - <<'PY'
import json
d = json.load(open("bench/results/vm.json"))
sizes = list(d["sizes"])
W, H, left, top, bottom = 900, 420, 70, 60, 340
def bars(x0, width, title, series, unit, top_value, target=None):
    out = [f'<text x="{x0 + width / 2}" y="{top - 22}" text-anchor="middle" font-size="14">{title}</text>']
    scale = (bottom - top) / top_value
    for i in range(5):
        v = top_value * i / 4
        y = bottom - v * scale
        out.append(f'<line x1="{x0}" x2="{x0 + width}" y1="{y}" y2="{y}" stroke="#000" stroke-opacity="0.1"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4}" text-anchor="end" font-size="11">{v:g}</text>')
    if target is not None:
        y = bottom - target * scale
        out.append(f'<line x1="{x0}" x2="{x0 + width}" y1="{y}" y2="{y}" stroke="#c00" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{x0 + width}" y="{y - 4}" text-anchor="end" font-size="11" fill="#c00">target {target:g} {unit}</text>')
    group = width / len(sizes)
    bar = group / (len(series) + 1)
    for g, size in enumerate(sizes):
        for k, (key, colour, _) in enumerate(series):
            v = d["sizes"][size][key]
            x = x0 + g * group + bar / 2 + k * bar
            out.append(f'<rect x="{x}" y="{bottom - v * scale}" width="{bar * 0.9}" height="{v * scale}" fill="{colour}"/>')
            out.append(f'<text x="{x + bar * 0.45}" y="{bottom - v * scale - 4}" text-anchor="middle" font-size="10">{v:.0f}</text>')
        out.append(f'<text x="{x0 + g * group + group / 2}" y="{bottom + 16}" text-anchor="middle" font-size="12">{size} guest</text>')
    for k, (_, colour, label) in enumerate(series):
        out.append(f'<rect x="{x0 + k * 170}" y="{bottom + 30}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{x0 + k * 170 + 16}" y="{bottom + 40}" font-size="12">{label}</text>')
    return out
peak = max(max(v["fixation_ms"], v["recovery_ms"]) for v in d["sizes"].values())
left_panel = bars(left, 360, "fixation and recovery, ms (medians)",
                  [("fixation_ms", "#4878d0", "fixation"), ("recovery_ms", "#ee854a", "recovery")],
                  "ms", max(100, peak * 1.15), 100)
peak = max(v["cold_boot_ms"] for v in d["sizes"].values())
right_panel = bars(left + 470, 360, "back in service, ms (medians)",
                   [("cold_boot_ms", "#8c8c8c", "cold boot"), ("resume_ms", "#6acc64", "after a power cycle")],
                   "ms", peak * 1.15)
ratios = ", ".join(f'{s}: {v["cold_boot_vs_resume"]}x' for s, v in d["sizes"].items())
states = ", ".join(f'{s}: {v["state_bytes"]:,.0f} B' for s, v in d["sizes"].items())
svg = [f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif">',
       f'<rect width="{W}" height="{H}" fill="#fff"/>',
       f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="15">mnemo vm: persistent VMs on QEMU 7.2 (TCG), {d["rounds"]} rounds, commit {d["commit"]}</text>',
       *left_panel, *right_panel,
       f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" font-size="11">state size {states}; cold boot / power cycle {ratios}</text>',
       '</svg>']
open("bench/plots/vm.svg", "w").write("\n".join(svg) + "\n")
print("bench/plots/vm.svg")
PY
}
if [ "${1:-}" = --plot ]; then
    plot
    exit 0
fi
sizes="${1:-256M 1G 4G}"
rounds="${2:-5}"
command="scripts/bench-vm.sh${*:+ $*}"
work="$(mktemp -d /dev/shm/mnemo-bench-vm.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cargo build --release -q -p mnemo-cli --bin mnemo
# A private copy of the binary, taken right after the build: a build of another checkout in
# a shared target directory (CARGO_TARGET_DIR) during the run would otherwise swap it.
cp "${CARGO_TARGET_DIR:-target}/release/mnemo" "$work/mnemo"
mnemo="$work/mnemo"
guest="${CARGO_TARGET_DIR:-target}/vm-guest"
scripts/vm-guest.sh "$guest" >/dev/null
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then commit="$commit+dirty"; fi

python3 - "$mnemo" "$guest" "$work" "$rounds" "$commit" "$command" $sizes <<'PY'
import atexit, csv, glob, json, os, re, statistics, subprocess, sys, time

mnemo, guest, work, rounds, commit, command = sys.argv[1:7]
sizes = sys.argv[7:]
rounds = int(rounds)
POWER = 44
TICK = re.compile(rb"^MNEMO-GUEST boot=(\w+) count=(\d+)", re.M)


def ticks(path):
    try:
        with open(path, "rb") as f:
            return [(m.group(1), int(m.group(2))) for m in TICK.finditer(f.read())]
    except FileNotFoundError:
        return []


def wait(predicate, what, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.002)
    # Say what was awaited, and what the hypervisors and the guest said (the work directory
    # is removed at exit).
    report = [f"timed out after {timeout} s waiting for {what}"]
    for name in ("boot.jsonl", "recover.jsonl"):
        path = os.path.join(work, name)
        if os.path.exists(path):
            report.append(f"--- {name}:\n" + open(path, errors="replace").read()[-4000:])
    for serial in glob.glob(os.path.join(work, "*", "g", "serial.log")):
        report.append(f"--- {serial} (end):\n" + open(serial, errors="replace").read()[-1500:])
    raise SystemExit("\n".join(report))


children = []
# A failed run leaves no hypervisor behind (its QEMU follows it: parent-death signal).
atexit.register(lambda: [c.kill() for c in children if c.poll() is None])


def hypervisor(args, out):
    child = subprocess.Popen([mnemo, "vm", *args, "--json"], stdout=open(out, "w"),
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    children.append(child)
    return child


def event(path, name):
    with open(path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == name:
                return e
    return None


def fix(proc, out):
    t = time.monotonic()
    os.kill(proc.pid, POWER)
    proc.wait(60)
    elapsed = time.monotonic() - t
    fixed = event(out, "fixed")
    if proc.returncode != 0 or not fixed:
        raise SystemExit(f"fixation failed: {open(out).read()}")
    return fixed, elapsed


rows = []
for size in sizes:
    for r in range(rounds):
        vms = os.path.join(work, f"{size}-{r}")
        serial = os.path.join(vms, "g", "serial.log")
        base = ["--dir", vms]
        out = os.path.join(work, "boot.jsonl")
        t0 = time.monotonic()
        p = hypervisor(["run", "g", *base, "--mem", size, "--kernel", f"{guest}/vmlinuz",
                        "--initrd", f"{guest}/initrd.gz"], out)
        wait(lambda: ticks(serial), "the first counter line after a cold boot")
        cold = time.monotonic() - t0
        wait(lambda: len(ticks(serial)) >= 8, "8 counter lines")
        fixed, sig_exit = fix(p, out)
        before = len(ticks(serial))
        out = os.path.join(work, "recover.jsonl")
        t0 = time.monotonic()
        p = hypervisor(["run", "g", *base], out)
        wait(lambda: len(ticks(serial)) > before, "a counter line after the recovery")
        resume = time.monotonic() - t0
        recovered = wait(lambda: event(out, "recovered"), "the recovered event")
        seq = ticks(serial)
        if len({b for b, _ in seq}) != 1 or [c for _, c in seq] != list(range(1, len(seq) + 1)):
            raise SystemExit(f"the guest did not continue: {seq}")
        wait(lambda: len(ticks(serial)) >= before + 4, "4 counter lines after the recovery")
        fix(p, out)
        row = {
            "size": size, "round": r + 1,
            "cold_boot_ms": round(cold * 1e3, 1),
            "fixation_ms": fixed["fixation_us"] / 1e3,
            "migrate_ms": fixed["migrate_us"] / 1e3,
            "signal_to_exit_ms": round(sig_exit * 1e3, 1),
            "state_bytes": fixed["state_bytes"],
            "recovery_ms": recovered["recovery_us"] / 1e3,
            "qemu_start_ms": recovered["qemu_start_us"] / 1e3,
            "load_ms": recovered["load_us"] / 1e3,
            "resume_ms": round(resume * 1e3, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        subprocess.run(["rm", "-rf", vms])

fields = list(rows[0].keys()) + ["commit", "command"]
os.makedirs("bench/results", exist_ok=True)
with open("bench/results/vm.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    for row in rows:
        w.writerow({**row, "commit": commit, "command": command})
summary = {"commit": commit, "command": command, "rounds": rounds, "sizes": {}}
for size in sizes:
    rs = [r for r in rows if r["size"] == size]
    med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k not in ("size", "round")}
    med["max_fixation_ms"] = max(r["fixation_ms"] for r in rs)
    med["max_recovery_ms"] = max(r["recovery_ms"] for r in rs)
    med["cold_boot_vs_resume"] = round(med["cold_boot_ms"] / med["resume_ms"], 1)
    summary["sizes"][size] = med
with open("bench/results/vm.json", "w") as f:
    json.dump(summary, f, indent=1)
    f.write("\n")
print(f"{'size':>6} {'fixation':>9} {'max':>7} {'state B':>8} {'recovery':>9} {'max':>7} "
      f"{'cold boot':>10} {'resume':>8} {'ratio':>6}   (medians, ms; {rounds} rounds)")
for size, m in summary["sizes"].items():
    print(f"{size:>6} {m['fixation_ms']:>9.1f} {m['max_fixation_ms']:>7.1f} {m['state_bytes']:>8.0f} "
          f"{m['recovery_ms']:>9.1f} {m['max_recovery_ms']:>7.1f} {m['cold_boot_ms']:>10.0f} "
          f"{m['resume_ms']:>8.0f} {m['cold_boot_vs_resume']:>5.1f}x")
PY
plot
