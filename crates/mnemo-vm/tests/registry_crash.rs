//! The registry survives a crash at any point: a child process loops over registry
//! operations (epoch raises, fixations recorded, creates and deletes of other VMs) and is
//! killed with SIGKILL at a random instant, again and again. After every kill the registry
//! opens, every record reads, the epoch never went back and is at most one past the last
//! raise the child saw committed, and every VM that has a record has its directory.
//!
//! The child is this test binary itself, run with `MNEMO_VM_CRASH_CHILD` set.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mnemo_vm::config::CONFIG_FORMAT;
use mnemo_vm::{Boot, Registry, VmConfig, VmState};

const CHILD_ENV: &str = "MNEMO_VM_CRASH_CHILD";

fn config(name: &str) -> VmConfig {
    VmConfig {
        format: CONFIG_FORMAT,
        name: name.into(),
        ram_bytes: 16 << 20,
        cpus: 1,
        accel: "tcg".into(),
        cpu: "qemu64".into(),
        machine: "pc-q35-7.2".into(),
        qemu: "qemu-system-x86_64".into(),
        boot: Boot::Kernel {
            initrd: false,
            append: "console=ttyS0".into(),
        },
        nvdimm_bytes: None,
    }
}

fn kernel(dir: &Path) -> PathBuf {
    dir.join("vmlinuz")
}

/// The child: registry operations in a loop until it is killed. It prints each epoch after
/// its raise committed, and each create and delete after it returned.
#[test]
fn child_loops_over_registry_operations() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return; // run as an ordinary test: nothing to do
    };
    let dir = PathBuf::from(dir);
    let registry = Registry::new(dir.join("vms"));
    let vm = registry.open("guest").unwrap();
    let mut round = 0u64;
    loop {
        round += 1;
        let status = vm.status().unwrap();
        let next = vm.begin_epoch(&status, "cold boot".into()).unwrap();
        println!("epoch {}", next.epoch);
        if round % 2 == 0 {
            vm.record_fixed(next.epoch).unwrap();
        }
        if round % 3 == 0 {
            let name = format!("tmp-{round}");
            registry
                .create(config(&name), Some(&kernel(&dir)), None)
                .unwrap();
            println!("created {name}");
            registry.delete(&name).unwrap();
            println!("deleted {name}");
        }
    }
}

/// A pseudo-random number from the clock (no dependency for one number a round).
fn jitter(max: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    (nanos / 1000) % max
}

#[test]
fn registry_operations_survive_sigkill_at_any_point() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(kernel(dir.path()), b"kernel").unwrap();
    let registry = Registry::new(dir.path().join("vms"));
    registry
        .create(config("guest"), Some(&kernel(dir.path())), None)
        .unwrap();
    let mut last_epoch = 0u64;
    let mut kills_mid_run = 0;
    for round in 0..16 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_loops_over_registry_operations",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let reader = {
            let lines = Arc::clone(&lines);
            let stdout = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            })
        };
        // Let it run a while (past its start-up), then kill it wherever it is.
        let wait = 30 + jitter(200);
        std::thread::sleep(Duration::from_millis(wait));
        let alive = child.try_wait().unwrap().is_none();
        child.kill().unwrap();
        let exit = child.wait().unwrap();
        reader.join().unwrap();
        if !alive {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            panic!("the child stopped by itself ({exit}): {stderr}");
        }
        let lines = lines.lock().unwrap().clone();
        let seen = lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("epoch "))
            .map(|e| e.parse::<u64>().unwrap());
        if seen.is_some() {
            kills_mid_run += 1;
        }

        // The registry opens and every record reads.
        let list = registry.list().unwrap();
        for summary in &list {
            assert!(
                summary.lifecycle.is_some() || summary.detail.starts_with("not in the registry"),
                "round {round}: {summary:?}"
            );
            assert!(
                !summary.detail.starts_with("unreadable"),
                "round {round}: {summary:?}"
            );
        }
        let status = registry.open("guest").unwrap().status().unwrap();
        // Monotonic, and every raise the child saw committed is there; at most one more (a
        // raise that committed before the child could print it).
        assert!(
            status.epoch >= last_epoch,
            "round {round}: the epoch went back from {last_epoch} to {}",
            status.epoch
        );
        if let Some(seen) = seen {
            assert!(
                status.epoch == seen || status.epoch == seen + 1,
                "round {round}: the child saw epoch {seen} committed, the registry has {}",
                status.epoch
            );
        }
        last_epoch = status.epoch;

        // A VM with a record has its directory (created last, deleted first); a directory
        // without a record is what an interrupted create or delete leaves, reported as such.
        // Clear both away for the next round, as a user would.
        for summary in list.iter().filter(|s| s.name != "guest") {
            let path = registry.root().join(&summary.name);
            if summary.lifecycle.is_some() {
                assert!(path.join("ram").exists(), "round {round}: {summary:?}");
                assert_eq!(summary.state, VmState::NeedsColdBoot);
                registry.delete(&summary.name).unwrap();
            } else {
                assert!(
                    registry.open(&summary.name).is_err(),
                    "round {round}: {summary:?}"
                );
                std::fs::remove_dir_all(&path).unwrap();
            }
        }
        assert_eq!(registry.list().unwrap().len(), 1);
    }
    eprintln!("16 kills ({kills_mid_run} after the first raise); the epoch reached {last_epoch}");
    assert!(
        kills_mid_run >= 8,
        "only {kills_mid_run} of 16 kills came after the child's first raise"
    );
    assert!(
        last_epoch > 16,
        "the child raised the epoch {last_epoch} times"
    );
}
