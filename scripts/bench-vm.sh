#!/usr/bin/env bash
# Persistent VMs (issue 16): fixation and recovery time and state size for guests of several
# RAM sizes, against a cold boot of the same guest in the same run. Results:
# bench/results/vm.csv (one row per power cycle) and bench/results/vm.json (medians and
# ratios). See bench/README.md.
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
sizes="${1:-256M 1G 4G}"
rounds="${2:-5}"
command="scripts/bench-vm.sh${*:+ $*}"
cargo build --release -q -p mnemo-cli --bin mnemo
mnemo="${CARGO_TARGET_DIR:-target}/release/mnemo"
guest="${CARGO_TARGET_DIR:-target}/vm-guest"
scripts/vm-guest.sh "$guest" >/dev/null
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [ "$commit" != unknown ] && ! git diff --quiet HEAD 2>/dev/null; then commit="$commit+dirty"; fi
work="$(mktemp -d /dev/shm/mnemo-bench-vm.XXXXXX)"
trap 'rm -rf "$work"' EXIT

python3 - "$mnemo" "$guest" "$work" "$rounds" "$commit" "$command" $sizes <<'PY'
import atexit, csv, json, os, re, statistics, subprocess, sys, time

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


def wait(predicate, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.002)
    raise SystemExit("timed out")


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
        wait(lambda: ticks(serial))
        cold = time.monotonic() - t0
        wait(lambda: len(ticks(serial)) >= 8)
        fixed, sig_exit = fix(p, out)
        before = len(ticks(serial))
        out = os.path.join(work, "recover.jsonl")
        t0 = time.monotonic()
        p = hypervisor(["run", "g", *base], out)
        wait(lambda: len(ticks(serial)) > before)
        resume = time.monotonic() - t0
        recovered = wait(lambda: event(out, "recovered"))
        seq = ticks(serial)
        if len({b for b, _ in seq}) != 1 or [c for _, c in seq] != list(range(1, len(seq) + 1)):
            raise SystemExit(f"the guest did not continue: {seq}")
        wait(lambda: len(ticks(serial)) >= before + 4)
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
