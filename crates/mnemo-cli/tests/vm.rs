//! Persistent VMs, end to end (issue 16): a real guest under QEMU (TCG), driven by `mnemo vm`.
//!
//! The guest (`scripts/vm-guest.sh`, built once and cached under the target directory) prints
//! on its serial console a boot id, random at every boot, and a counter kept in guest memory,
//! every 0.25 s. A guest that survives a power cycle keeps its boot id and its counter goes
//! on by exactly one; a guest that rebooted prints a new `start` line and counts from 1.
//!
//! Needs qemu-system-x86_64, busybox-static, cpio and Debian's registry (the guest kernel);
//! without them the tests are skipped, unless `MNEMO_REQUIRE_TOOLS=1` (scripts/test.sh), where
//! they fail.

mod support;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest wait for the guest to print what a step waits for (a TCG boot takes ~5 s alone,
/// more with the other tests of the suite running on two cores).
const GUEST_TIMEOUT: Duration = Duration::from_secs(90);

fn required() -> bool {
    std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() == Ok("1")
}

/// One guest at a time: a TCG boot keeps a core busy for seconds, and three at once on this
/// 2-core machine (with other work) take longer together than one after another.
fn one_guest_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static GUESTS: Mutex<()> = Mutex::new(());
    GUESTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The guest's kernel and initramfs, built once (cached across runs under the target
/// directory); `None` (a skip) if it cannot be built and the tools are not required.
fn guest() -> Option<(PathBuf, PathBuf)> {
    static BUILD: Mutex<()> = Mutex::new(());
    let _once = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !support::tool("qemu-system-x86_64", "qemu-system-x86") {
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let out = target.join("vm-guest");
    let built = Command::new(root.join("scripts/vm-guest.sh"))
        .arg(&out)
        .output()
        .expect("run scripts/vm-guest.sh");
    if !built.status.success() {
        let why = String::from_utf8_lossy(&built.stderr).to_string();
        assert!(
            !required(),
            "the test guest cannot be built (MNEMO_REQUIRE_TOOLS=1): {why}"
        );
        eprintln!("the test guest cannot be built: test skipped ({why})");
        return None;
    }
    Some((out.join("vmlinuz"), out.join("initrd.gz")))
}

/// One line of the guest's counter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tick {
    boot: String,
    count: u64,
    mem_ok: bool,
}

/// The guest's serial console: its `start` lines (one per boot) and its counter lines.
fn serial(dir: &Path) -> (Vec<String>, Vec<Tick>) {
    let text = std::fs::read_to_string(dir.join("serial.log")).unwrap_or_default();
    let mut starts = Vec::new();
    let mut ticks = Vec::new();
    // Only whole lines: the last one may still be being written.
    let whole = text.rsplit_once('\n').map_or("", |(lines, _)| lines);
    for line in whole.lines() {
        let Some(rest) = line
            .trim_end_matches('\r')
            .strip_prefix("MNEMO-GUEST boot=")
        else {
            continue;
        };
        let mut words = rest.split(' ');
        let boot = words.next().unwrap_or_default().to_string();
        match words.next() {
            Some("start") => starts.push(boot),
            Some(count) if count.starts_with("count=") => ticks.push(Tick {
                boot,
                count: count["count=".len()..].parse().expect("count"),
                mem_ok: words.next() == Some("mem=ok"),
            }),
            _ => {}
        }
    }
    (starts, ticks)
}

/// Waits until the guest's counter reaches `count`; returns the last tick.
fn wait_count(dir: &Path, count: u64) -> Tick {
    let started = Instant::now();
    loop {
        if let Some(last) = serial(dir).1.last() {
            if last.count >= count {
                return last.clone();
            }
        }
        assert!(
            started.elapsed() < GUEST_TIMEOUT,
            "the guest did not count to {count} within {GUEST_TIMEOUT:?}; serial log:\n{}",
            std::fs::read_to_string(dir.join("serial.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The counter ran through 1..=N in one boot: no reboot, no skip, nothing counted twice.
fn assert_one_continuous_boot(dir: &Path) -> Tick {
    let (starts, ticks) = serial(dir);
    assert_eq!(
        starts.len(),
        1,
        "the guest booted more than once: {starts:?}"
    );
    for (i, tick) in ticks.iter().enumerate() {
        assert_eq!(tick.boot, starts[0], "tick {i} of another boot: {tick:?}");
        assert_eq!(
            tick.count,
            i as u64 + 1,
            "the counter jumped at line {i}: {tick:?}"
        );
        assert!(tick.mem_ok, "the guest's memory check failed: {tick:?}");
    }
    ticks.last().expect("ticks").clone()
}

/// A `mnemo vm` hypervisor process (`run` or `recover`, with --json events); killed on drop.
struct Hypervisor {
    child: Child,
    events: PathBuf,
    errors: PathBuf,
}

impl Hypervisor {
    fn start(dir: &Path, args: &[&str]) -> Hypervisor {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let events = dir.join(format!("events-{n}.jsonl"));
        let errors = dir.join(format!("stderr-{n}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .arg("vm")
            .args(args)
            .arg("--json")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&events).unwrap())
            .stderr(std::fs::File::create(&errors).unwrap())
            .spawn()
            .expect("spawn mnemo vm");
        Hypervisor {
            child,
            events,
            errors,
        }
    }

    fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Waits for the event `name` (the VM started, or was fixed).
    fn wait_event(&mut self, name: &str) -> serde_json::Value {
        let started = Instant::now();
        loop {
            if let Some(event) = self.events().into_iter().find(|e| e["event"] == name) {
                return event;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // The event may have been written just before the exit.
                if let Some(event) = self.events().into_iter().find(|e| e["event"] == name) {
                    return event;
                }
                panic!(
                    "mnemo vm exited ({status}) before {name:?}; events {:?}; stderr:\n{}",
                    self.events(),
                    self.stderr()
                );
            }
            assert!(started.elapsed() < GUEST_TIMEOUT, "no {name:?} event");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.errors).unwrap_or_default()
    }

    /// Signal 44, the power failure; returns the "fixed" event after a clean exit.
    fn power_failure(mut self) -> serde_json::Value {
        let pid = i32::try_from(self.child.id()).unwrap();
        mnemo_vm::send_power_failure(pid).expect("signal 44");
        let fixed = self.wait_event("fixed");
        let status = self.child.wait().expect("wait");
        assert!(
            status.success(),
            "hypervisor exit {status}: {}",
            self.stderr()
        );
        fixed
    }

    /// SIGTERM (a service manager's stop): a fixation too.
    fn terminate(mut self) -> serde_json::Value {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.child.id()).unwrap()).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let fixed = self.wait_event("fixed");
        let status = self.child.wait().expect("wait");
        assert!(
            status.success(),
            "hypervisor exit {status}: {}",
            self.stderr()
        );
        fixed
    }

    /// SIGKILL: a crash without fixation.
    fn crash(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("wait");
    }
}

impl Drop for Hypervisor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mnemo vm ARGS`, run to completion.
fn mnemo_vm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .arg("vm")
        .args(args)
        .output()
        .expect("run mnemo vm")
}

/// The VM's entry of `mnemo vm list --json`.
fn listed(vms: &str, name: &str) -> serde_json::Value {
    let out = mnemo_vm(&["list", "--dir", vms, "--json"]);
    assert!(out.status.success());
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("list JSON");
    list.into_iter()
        .find(|vm| vm["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

/// Waits until no process holds the VM's lock (a killed hypervisor's QEMU is gone too).
fn wait_stopped(vms: &str, name: &str) {
    let started = Instant::now();
    while listed(vms, name)["state"] == "running" {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name} still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The proof: a guest counts in memory; signal 44 fixes it; a fresh hypervisor
/// recovers it; three power cycles in a row, and the guest never rebooted, its counter went
/// on by one at every step, and its memory check held.
#[test]
fn three_power_cycles_continue_one_boot() {
    let _guests = one_guest_at_a_time();
    let Some((kernel, initrd)) = guest() else {
        return;
    };
    let tmp = support::shm_dir();
    let vms_path = tmp.path().join("vms");
    let vms = vms_path.to_str().unwrap();
    let (kernel, initrd) = (kernel.to_str().unwrap(), initrd.to_str().unwrap());
    let run = [
        "run", "cycles", "--dir", vms, "--mem", "256M", "--kernel", kernel, "--initrd", initrd,
    ];
    let dir = vms_path.join("cycles");

    let mut hypervisor = Hypervisor::start(tmp.path(), &run);
    let boot = hypervisor.wait_event("cold-boot");
    assert_eq!(boot["epoch"], 1);
    assert_eq!(boot["reason"], "first boot");
    hypervisor.wait_event("running");
    wait_count(&dir, 3);

    // One RAM file, one QEMU: a second hypervisor is refused while the first runs.
    let second = mnemo_vm(&run);
    assert!(!second.status.success());
    assert!(
        stderr_of(&second).contains("is running"),
        "{}",
        stderr_of(&second)
    );
    assert_eq!(listed(vms, "cycles")["state"], "running");

    // Two VMs' hypervisors run at once: the registry pool is open only for the length of
    // each registry operation, so a running VM holds nothing that stops another's start,
    // fixation or delete.
    let other_dir = vms_path.join("other");
    let mut other = Hypervisor::start(
        tmp.path(),
        &[
            "run", "other", "--dir", vms, "--kernel", kernel, "--initrd", initrd,
        ],
    );
    assert_eq!(other.wait_event("cold-boot")["epoch"], 1);
    other.wait_event("running");
    wait_count(&other_dir, 1);
    assert_eq!(listed(vms, "cycles")["state"], "running");
    assert_eq!(listed(vms, "other")["state"], "running");
    assert_eq!(other.power_failure()["epoch"], 1);
    let entry = listed(vms, "other");
    assert_eq!(
        (&entry["state"], &entry["lifecycle"]),
        (&"fixed".into(), &"fixed".into())
    );
    let deleted = mnemo_vm(&["delete", "other", "--dir", vms]);
    assert!(deleted.status.success(), "{}", stderr_of(&deleted));
    assert!(!other_dir.exists());

    // Hardware is fixed at creation: a state loads only into the hardware it came from.
    let other = mnemo_vm(&["run", "cycles", "--dir", vms, "--mem", "512M"]);
    assert!(!other.status.success());
    assert!(
        stderr_of(&other).contains("other hardware (--mem differ)"),
        "{}",
        stderr_of(&other)
    );

    for cycle in 1..=3u64 {
        let before = serial(&dir).1.last().expect("ticks").count;
        let fixed = hypervisor.power_failure();
        assert_eq!(fixed["signal"], 44);
        assert_eq!(fixed["epoch"], cycle);
        let state_bytes = fixed["state_bytes"].as_u64().unwrap();
        assert!(
            (64 << 10..16 << 20).contains(&state_bytes),
            "a state of {state_bytes} bytes: RAM went into it, or nothing did"
        );
        let entry = listed(vms, "cycles");
        assert_eq!(entry["state"], "fixed", "{entry}");
        assert_eq!(entry["state_bytes"], state_bytes);
        // The registry pool recorded the fixation of this epoch.
        assert_eq!(
            (entry["epoch"].as_u64(), entry["lifecycle"].as_str()),
            (Some(cycle), Some("fixed")),
            "{entry}"
        );
        // The last line the guest printed before it was frozen.
        let frozen = serial(&dir).1.last().unwrap().count;

        // A fresh hypervisor (the same command) finds the fixed VM and recovers it; the last
        // cycle goes through `mnemo vm recover`.
        hypervisor = if cycle == 3 {
            Hypervisor::start(tmp.path(), &["recover", "cycles", "--dir", vms])
        } else {
            Hypervisor::start(tmp.path(), &run)
        };
        let recovered = hypervisor.wait_event("recovered");
        assert_eq!(recovered["from_epoch"], cycle);
        assert_eq!(recovered["epoch"], cycle + 1);
        assert_eq!(recovered["state_bytes"], state_bytes);
        let after = wait_count(&dir, frozen + 3);
        assert!(after.count > before);
        assert_one_continuous_boot(&dir);
        assert!(dir.join("state.used").exists() && !dir.join("state").exists());
        let entry = listed(vms, "cycles");
        assert_eq!(
            (entry["epoch"].as_u64(), entry["lifecycle"].as_str()),
            (Some(cycle + 1), Some("started")),
            "{entry}"
        );
    }
    // The records are in the registry pool, not in the VM's directory.
    assert!(vms_path.join("registry.pool").exists());
    assert!(!dir.join("status.json").exists() && !dir.join("config.json").exists());

    // A snapshot of the running VM: the hypervisor pauses the guest, saves its state and
    // copies its RAM into a new VM, and the guest runs on.
    let live = mnemo_vm(&["snapshot", "cycles", "live", "--dir", vms]);
    assert!(live.status.success(), "{}", stderr_of(&live));
    assert!(String::from_utf8_lossy(&live.stdout).contains("while running"));
    hypervisor.wait_event("snapshot");
    assert_eq!(listed(vms, "live")["state"], "fixed");
    assert_eq!(listed(vms, "cycles")["state"], "running");
    let now = serial(&dir).1.last().unwrap().count;
    wait_count(&dir, now + 2);

    // `mnemo vm fix` does what the signal does, and waits for it.
    let fix = mnemo_vm(&["fix", "cycles", "--dir", vms]);
    assert!(fix.status.success(), "{}", stderr_of(&fix));
    assert!(String::from_utf8_lossy(&fix.stdout).contains("fixed (state"));
    hypervisor.wait_event("fixed");
    let last = assert_one_continuous_boot(&dir);
    assert!(last.count >= 12, "{last:?}");

    // A snapshot of the fixed VM is a fork: the copy resumes the same boot, counting on from
    // where the original stopped, in a serial log of its own.
    let snap = mnemo_vm(&["snapshot", "cycles", "fork", "--dir", vms]);
    assert!(snap.status.success(), "{}", stderr_of(&snap));
    assert_eq!(listed(vms, "fork")["state"], "fixed");
    let mut fork = Hypervisor::start(tmp.path(), &["run", "fork", "--dir", vms]);
    assert_eq!(fork.wait_event("recovered")["from_epoch"], 4);
    let fork_dir = vms_path.join("fork");
    wait_count(&fork_dir, last.count + 2);
    let (starts, ticks) = serial(&fork_dir);
    assert!(starts.is_empty(), "the fork rebooted: {starts:?}");
    assert_eq!(ticks[0].count, last.count + 1, "{ticks:?}");
    assert!(ticks.iter().all(|t| t.boot == last.boot && t.mem_ok));
    fork.power_failure();
    assert_eq!(
        listed(vms, "cycles")["state"],
        "fixed",
        "the original is untouched"
    );

    let deleted = mnemo_vm(&["delete", "cycles", "--dir", vms]);
    assert!(deleted.status.success(), "{}", stderr_of(&deleted));
    assert!(!dir.exists());
}

/// The negative controls: a state is resumed at most once (a crash after a recovery leaves
/// nothing to resume; the old state, put back, is refused), and a state whose RAM file was
/// zeroed is refused with a clear message instead of resuming garbage. Nothing is consumed by
/// a refusal, and a forced cold boot starts the guest afresh.
#[test]
fn stale_states_and_zeroed_ram_are_refused() {
    let _guests = one_guest_at_a_time();
    let Some((kernel, initrd)) = guest() else {
        return;
    };
    let tmp = support::shm_dir();
    let vms_path = tmp.path().join("vms");
    let vms = vms_path.to_str().unwrap();
    let (kernel, initrd) = (kernel.to_str().unwrap(), initrd.to_str().unwrap());
    let dir = vms_path.join("neg");
    let create = [
        "run", "neg", "--dir", vms, "--mem", "128M", "--kernel", kernel, "--initrd", initrd,
    ];

    let hypervisor = Hypervisor::start(tmp.path(), &create);
    wait_count(&dir, 2);
    hypervisor.power_failure();
    let old_state = std::fs::read(dir.join("state")).unwrap();

    // Resume, run on, then crash without a fixation.
    let mut hypervisor = Hypervisor::start(tmp.path(), &["run", "neg", "--dir", vms]);
    hypervisor.wait_event("recovered");
    let frozen = serial(&dir).1.last().unwrap().count;
    wait_count(&dir, frozen + 2);
    hypervisor.crash();
    wait_stopped(vms, "neg");

    let entry = listed(vms, "neg");
    assert_eq!(entry["state"], "needs-cold-boot");
    let out = mnemo_vm(&["recover", "neg", "--dir", vms]);
    assert!(!out.status.success());
    let text = stderr_of(&out);
    assert!(
        text.contains("without a completed fixation") && text.contains("cold-boots"),
        "{text}"
    );

    // The consumed state, put back, is stale: refused, and left where it is.
    std::fs::write(dir.join("state"), &old_state).unwrap();
    for args in [
        ["recover", "neg", "--dir", vms],
        ["run", "neg", "--dir", vms],
    ] {
        let out = mnemo_vm(&args);
        assert!(!out.status.success(), "{args:?} resumed a stale state");
        let text = stderr_of(&out);
        assert!(text.contains("resumed at most once"), "{text}");
        assert!(text.contains("--cold-boot"), "{text}");
    }
    assert!(dir.join("state").exists());
    assert_eq!(serial(&dir).0.len(), 1, "a refusal started the guest");

    // A forced cold boot: a new boot of the guest.
    let mut hypervisor =
        Hypervisor::start(tmp.path(), &["run", "neg", "--dir", vms, "--cold-boot"]);
    let boot = hypervisor.wait_event("cold-boot");
    assert!(
        boot["reason"].as_str().unwrap().contains("discarded"),
        "{boot}"
    );
    let started = Instant::now();
    while serial(&dir).0.len() < 2 {
        assert!(started.elapsed() < GUEST_TIMEOUT, "no second boot");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (starts, _) = serial(&dir);
    assert_ne!(starts[0], starts[1], "a new boot has a new boot id");
    let before = serial(&dir).1.len();
    while serial(&dir).1.len() < before + 2 {
        assert!(
            started.elapsed() < GUEST_TIMEOUT,
            "the new boot does not count"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    hypervisor.power_failure();
    assert_eq!(listed(vms, "neg")["state"], "fixed");

    // Zero the RAM file (same size): the state no longer matches its memory.
    let ram = dir.join("ram");
    let size = std::fs::metadata(&ram).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ram)
        .unwrap();
    let sampled: Vec<(u64, Vec<u8>)> =
        mnemo_vm::state::sample_offsets(size, mnemo_vm::limits::RAM_SAMPLE_PAGES)
            .map(|offset| {
                let mut page = vec![0u8; mnemo_vm::limits::RAM_PAGE_BYTES as usize];
                file.read_exact_at(&mut page, offset).unwrap();
                (offset, page)
            })
            .collect();
    file.set_len(0).unwrap();
    file.set_len(size).unwrap();
    let out = mnemo_vm(&["recover", "neg", "--dir", vms]);
    assert!(!out.status.success(), "a zeroed RAM file was resumed");
    let text = stderr_of(&out);
    assert!(
        text.contains("does not hold the memory") && text.contains("zeroed"),
        "{text}"
    );
    let entry = listed(vms, "neg");
    assert_eq!(entry["state"], "needs-cold-boot");
    assert!(
        entry["detail"].as_str().unwrap().contains("zeroed"),
        "{entry}"
    );
    assert!(dir.join("state").exists(), "a refusal consumed the state");
    assert_eq!(serial(&dir).0.len(), 2, "a refusal started the guest");

    // The same zeroed RAM with the sampled pages put back, so mnemo's check passes: QEMU
    // itself then fails to load the state against that memory, and the failure is reported
    // as such. The state was consumed by the attempt; the VM needs a cold boot.
    for (offset, page) in &sampled {
        file.write_all_at(page, *offset).unwrap();
    }
    drop(file);
    assert_eq!(listed(vms, "neg")["state"], "fixed");
    let out = mnemo_vm(&["recover", "neg", "--dir", vms]);
    assert!(!out.status.success(), "a zeroed RAM file was resumed");
    let text = stderr_of(&out);
    assert!(
        text.contains("recovery failed, the VM needs a cold boot") && text.contains("QEMU exited"),
        "{text}"
    );
    let entry = listed(vms, "neg");
    assert_eq!(entry["state"], "needs-cold-boot");
    assert!(!dir.join("state").exists() && dir.join("state.used").exists());
    let out = mnemo_vm(&["recover", "neg", "--dir", vms]);
    assert!(!out.status.success(), "a consumed state was resumed");
    assert_eq!(serial(&dir).0.len(), 2, "the guest was rebooted");
}

/// Lines of the guest's serial log that contain `needle`.
fn serial_lines(dir: &Path, needle: &str) -> Vec<String> {
    std::fs::read_to_string(dir.join("serial.log"))
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Guest-visible persistent memory: with `--nvdimm`, the guest sees /dev/pmem0 (an emulated
/// NVDIMM backed by the VM's `nvdimm` file). A power cycle continues the boot with the device
/// attached, and after a crash without fixation `mnemo vm run` cold-boots (and says why),
/// and the new boot reads the marker the previous boot wrote to its NVDIMM.
#[test]
fn guest_nvdimm_keeps_its_data_across_a_cold_boot() {
    let _guests = one_guest_at_a_time();
    let Some((kernel, initrd)) = guest() else {
        return;
    };
    let tmp = support::shm_dir();
    let vms_path = tmp.path().join("vms");
    let vms = vms_path.to_str().unwrap();
    let (kernel, initrd) = (kernel.to_str().unwrap(), initrd.to_str().unwrap());
    let dir = vms_path.join("nv");
    let append = "console=ttyS0 quiet panic=-1 mnemo.nvdimm";
    let create = [
        "run", "nv", "--dir", vms, "--mem", "128M", "--nvdimm", "16M", "--kernel", kernel,
        "--initrd", initrd, "--append", append,
    ];

    let hypervisor = Hypervisor::start(tmp.path(), &create);
    wait_count(&dir, 2);
    let (starts, _) = serial(&dir);
    let first = &starts[0];
    assert_eq!(
        serial_lines(&dir, "nvdimm"),
        [
            format!("MNEMO-GUEST boot={first} nvdimm previous=[]"),
            format!("MNEMO-GUEST boot={first} nvdimm written"),
        ]
    );
    hypervisor.power_failure();
    let mut hypervisor = Hypervisor::start(tmp.path(), &["run", "nv", "--dir", vms]);
    hypervisor.wait_event("recovered");
    let frozen = serial(&dir).1.last().unwrap().count;
    wait_count(&dir, frozen + 2);
    assert_one_continuous_boot(&dir);
    hypervisor.crash();
    wait_stopped(vms, "nv");

    let mut hypervisor = Hypervisor::start(tmp.path(), &["run", "nv", "--dir", vms]);
    let boot = hypervisor.wait_event("cold-boot");
    let reason = boot["reason"].as_str().unwrap();
    assert!(reason.contains("without a completed fixation"), "{reason}");
    let started = Instant::now();
    while serial_lines(&dir, "nvdimm written").len() < 2 {
        assert!(
            started.elapsed() < GUEST_TIMEOUT,
            "the second boot wrote no marker"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (starts, _) = serial(&dir);
    assert_eq!(starts.len(), 2);
    assert!(
        serial_lines(&dir, "nvdimm previous=").contains(&format!(
            "MNEMO-GUEST boot={} nvdimm previous=[marker-of-boot-{first}]",
            starts[1]
        )),
        "{:?}",
        serial_lines(&dir, "nvdimm")
    );
    // SIGTERM fixes the VM as signal 44 does.
    let fixed = hypervisor.terminate();
    assert_eq!(fixed["signal"], 15);
    assert_eq!(listed(vms, "nv")["state"], "fixed");
}

/// Requests that cannot be served are refused with a clear message, without QEMU.
#[test]
fn bad_requests_are_refused_clearly() {
    let tmp = support::shm_dir();
    let vms_path = tmp.path().join("vms");
    let vms = vms_path.to_str().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["run", "../escape", "--dir", vms], "is not a VM name"),
        (&["run", "new", "--dir", vms], "say what it boots"),
        (&["fix", "nothing", "--dir", vms], "no VM named \"nothing\""),
        (&["recover", "nothing", "--dir", vms], "no VM named"),
        (&["delete", "nothing", "--dir", vms], "no VM named"),
        (
            &["snapshot", "nothing", "copy", "--dir", vms],
            "no VM named",
        ),
    ];
    for (args, expected) in cases {
        let out = mnemo_vm(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr_of(&out).contains(expected),
            "{args:?}: {}",
            stderr_of(&out)
        );
    }
    let list = mnemo_vm(&["list", "--dir", vms]);
    assert!(list.status.success());
    assert!(String::from_utf8_lossy(&list.stdout).starts_with("no VMs in"));
    assert!(
        !vms_path.join("new").exists(),
        "a refused run left a VM behind"
    );
}

/// `mnemo vm list` reads the registry pool: the epoch and lifecycle it shows are the pool's,
/// a damaged record is listed as such (and refused by `run`), a directory without a record
/// is refused with what it is, and a pool that cannot be opened fails the list with its path.
/// No QEMU: the VM is made and started through the library.
#[test]
fn list_reads_the_registry_pool() {
    use mnemo_vm::config::CONFIG_FORMAT;
    let tmp = support::shm_dir();
    let vms_path = tmp.path().join("vms");
    let vms = vms_path.to_str().unwrap();
    let kernel = tmp.path().join("vmlinuz");
    std::fs::write(&kernel, b"kernel").unwrap();
    let registry = mnemo_vm::Registry::new(&vms_path);
    let vm = registry
        .create(
            mnemo_vm::VmConfig {
                format: CONFIG_FORMAT,
                name: "listed".into(),
                ram_bytes: 16 << 20,
                cpus: 1,
                accel: "tcg".into(),
                cpu: "qemu64".into(),
                machine: "pc-q35-7.2".into(),
                qemu: "qemu-system-x86_64".into(),
                boot: mnemo_vm::Boot::Kernel {
                    initrd: false,
                    append: "console=ttyS0".into(),
                },
                nvdimm_bytes: None,
            },
            Some(&kernel),
            None,
        )
        .unwrap();
    let entry = listed(vms, "listed");
    assert_eq!(
        (&entry["epoch"], &entry["lifecycle"], &entry["detail"]),
        (
            &serde_json::json!(0),
            &serde_json::json!("created"),
            &serde_json::json!("never booted")
        )
    );
    // Two epochs begin (as two starts that died without a fixation would leave it).
    let first = vm
        .begin_epoch(&vm.status().unwrap(), "cold boot".into())
        .unwrap();
    vm.begin_epoch(&first, "cold boot".into()).unwrap();
    let entry = listed(vms, "listed");
    assert_eq!(entry["epoch"], 2, "{entry}");
    assert_eq!(entry["lifecycle"], "started");
    assert_eq!(entry["state"], "needs-cold-boot");
    assert_eq!(
        entry["detail"],
        "no completed fixation of epoch 2 (cold boot)"
    );
    let text = mnemo_vm(&["list", "--dir", vms]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.lines()
            .any(|l| l.starts_with("listed ") && l.contains("needs cold boot")),
        "{text}"
    );

    // A directory as an earlier mnemo left it is listed, and `run` refuses it.
    let old = vms_path.join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("config.json"), b"{}").unwrap();
    assert!(listed(vms, "old")["detail"]
        .as_str()
        .unwrap()
        .contains("earlier mnemo"));
    let run = mnemo_vm(&[
        "run",
        "old",
        "--dir",
        vms,
        "--kernel",
        kernel.to_str().unwrap(),
    ]);
    assert!(!run.status.success());
    assert!(
        stderr_of(&run).contains("does not migrate"),
        "{}",
        stderr_of(&run)
    );

    // Damage the record's epoch in the pool file: the list says so, `run` refuses.
    let pool_path = vms_path.join("registry.pool");
    let at = registry.record_offset("listed").unwrap().expect("a record");
    let pool = std::fs::OpenOptions::new()
        .write(true)
        .open(&pool_path)
        .unwrap();
    pool.write_all_at(&[0xEE], at + 16).unwrap();
    let entry = listed(vms, "listed");
    assert!(
        entry["detail"]
            .as_str()
            .unwrap()
            .contains("the record of VM \"listed\" fails its checksum"),
        "{entry}"
    );
    let run = mnemo_vm(&["run", "listed", "--dir", vms]);
    assert!(!run.status.success());
    assert!(
        stderr_of(&run).contains("registry.pool") && stderr_of(&run).contains("fails its checksum"),
        "{}",
        stderr_of(&run)
    );
    // A damaged VM can be deleted (and takes its directory with it).
    let deleted = mnemo_vm(&["delete", "listed", "--dir", vms]);
    assert!(deleted.status.success(), "{}", stderr_of(&deleted));
    assert!(!vms_path.join("listed").exists());

    // A pool whose header copies are overwritten: the list fails, naming the pool.
    pool.write_all_at(&[0u8; 8192], 0).unwrap();
    let list = mnemo_vm(&["list", "--dir", vms]);
    assert!(!list.status.success());
    assert!(
        stderr_of(&list).contains("VM registry") && stderr_of(&list).contains("registry.pool"),
        "{}",
        stderr_of(&list)
    );
}
