//! Keep a CPU awake while a thread on it waits for the disk.
//!
//! A thread that blocks in a durable write (the write-ahead file's `pwritev2` with
//! `RWF_DSYNC`, or its `fdatasync`) leaves its CPU with nothing to run, so the CPU idles.
//! On a virtual machine an idle CPU halts: the hypervisor takes the vCPU off its host CPU,
//! and the interrupt that completes the write must first put it back, tens of microseconds
//! that the waiting thread adds to every sync. Measured on the VM this was built on (kernel
//! cpuidle `haltpoll` with `guest_halt_poll_ns=0`, so the guest never polls before halting;
//! `bench/probes/wal_spin.c`): a direct write of 8 KiB made durable took 172-206 us in the
//! median, and 136-138 us while another thread kept that CPU busy. Bare metal pays the
//! same way, less, when the idle CPU enters a deep C-state.
//!
//! [`Awake`] is that other thread. It runs at `SCHED_IDLE` priority, so it only ever takes
//! CPU time nobody else wants: a thread of any other policy that wakes on its CPU preempts
//! it at once, and the scheduler counts a CPU running only `SCHED_IDLE` threads as idle when
//! it places a waking thread. While at least one [`Awake::hold`] guard lives, the thread
//! follows the holder to its CPU (its affinity set to that CPU) and spins there on a load of
//! the holders' count, with no `PAUSE` (a long run of `PAUSE` makes a hypervisor with
//! pause-loop exiting take the vCPU away, the very thing to avoid); otherwise it sleeps
//! (`thread::park`). A spin lasts [`SPIN_MAX`] at most: a disk slower than that pays its
//! wake-up, and the CPU is not burnt for it.
//!
//! Off with `MNEMO_WAL_SPIN=0`; wherever the thread cannot be made `SCHED_IDLE` (then it
//! would compete with the thread it serves); and in a cgroup with a CPU quota (v2 `cpu.max`,
//! v1 `cpu.cfs_quota_us`, at the process's cgroup or one above it), where idle priority
//! does not help: the spin would spend the quota the server needs, and get it throttled.
//! Then [`Awake::start`] returns `None` and callers wait as before. Not built under `--cfg mnemo_shuttle` (the model checker schedules its own
//! threads, and this one changes no state anyone reads).

// One libc call: sched_setscheduler, which rustix does not wrap.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest one spin lasts before the thread sleeps though a holder still waits.
pub const SPIN_MAX: Duration = Duration::from_millis(1);

/// Whether `MNEMO_WAL_SPIN=0` asks durable writes to let their CPU idle.
fn wanted() -> bool {
    !crate::file::env_off("MNEMO_WAL_SPIN")
}

struct Shared {
    /// Live [`Hold`] guards.
    holders: AtomicU32,
    /// Set when the [`Awake`] is dropped: the thread ends.
    stop: AtomicBool,
    /// The CPU the thread's affinity names (-1: none set yet).
    cpu: AtomicI32,
    /// Spins begun, and spins that ran out ([`SPIN_MAX`]): for tests and benchmarks.
    spins: AtomicU32,
    timeouts: AtomicU32,
}

/// A thread that keeps the CPU of a waiting thread busy at idle priority (module doc).
pub struct Awake {
    shared: Arc<Shared>,
    /// The thread's kernel id, for its affinity.
    tid: rustix::thread::Pid,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Awake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Awake")
            .field("holders", &self.shared.holders.load(Ordering::Relaxed))
            .field("cpu", &self.shared.cpu.load(Ordering::Relaxed))
            .finish()
    }
}

/// While it lives, the [`Awake`] thread spins on the CPU this guard was taken on.
#[must_use = "the CPU is kept awake only while the guard lives"]
#[derive(Debug)]
pub struct Hold<'a> {
    awake: &'a Awake,
}

impl Awake {
    /// Start the thread, or `None`: turned off (`MNEMO_WAL_SPIN=0`), or the thread could
    /// not be started or made `SCHED_IDLE`.
    pub fn start() -> Option<Awake> {
        if !wanted() || cfg!(mnemo_shuttle) {
            return None;
        }
        if cpu_quota_here() {
            tracing::debug!("a cgroup caps this process's CPU: durable writes let it idle");
            return None;
        }
        let shared = Arc::new(Shared {
            holders: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            cpu: AtomicI32::new(-1),
            spins: AtomicU32::new(0),
            timeouts: AtomicU32::new(0),
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("mnemo-awake".into())
            .spawn(move || {
                let param = libc::sched_param { sched_priority: 0 };
                // SAFETY: sched_setscheduler of the calling thread (pid 0), reading a valid
                // parameter block that outlives the call.
                let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0;
                let _ = ready_tx.send(idle.then(rustix::thread::gettid));
                if idle {
                    run(&theirs);
                }
            })
            .ok()?;
        let Ok(Some(tid)) = ready_rx.recv() else {
            let _ = thread.join();
            tracing::debug!("no SCHED_IDLE thread: durable writes let their CPU idle");
            return None;
        };
        Some(Awake {
            shared,
            tid,
            thread: Some(thread),
        })
    }

    /// Keep this CPU busy until the guard drops (the caller is about to block on the disk).
    pub fn hold(&self) -> Hold<'_> {
        let shared = &self.shared;
        if shared.holders.fetch_add(1, Ordering::AcqRel) == 0 {
            let cpu = rustix::thread::sched_getcpu();
            if let Ok(at) = i32::try_from(cpu) {
                if cpu < rustix::thread::CpuSet::MAX_CPU && shared.cpu.load(Ordering::Relaxed) != at
                {
                    let mut set = rustix::thread::CpuSet::new();
                    set.set(cpu);
                    // A failure leaves the old CPU: the next hold tries again.
                    if rustix::thread::sched_setaffinity(Some(self.tid), &set).is_ok() {
                        shared.cpu.store(at, Ordering::Relaxed);
                    }
                }
            }
            if let Some(thread) = &self.thread {
                thread.thread().unpark();
            }
        }
        Hold { awake: self }
    }

    /// Spins begun and spins that ran out before their holder was done.
    pub fn spins(&self) -> (u32, u32) {
        (
            self.shared.spins.load(Ordering::Relaxed),
            self.shared.timeouts.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.awake.shared.holders.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Awake {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// Whether a cgroup of this process caps its CPU time (cgroup v2 `cpu.max`, v1
/// `cpu.cfs_quota_us`, at its own cgroup or any above it): then time spent spinning is
/// taken from the container's quota, and whoever would spin should not.
pub fn cpu_quota_here() -> bool {
    std::fs::read_to_string("/proc/self/cgroup")
        .is_ok_and(|cgroups| cpu_quota_in(&cgroups, |path| std::fs::read_to_string(path).ok()))
}

/// Whether the cgroups of `/proc/self/cgroup` (`cgroups`: lines `id:controllers:path`) cap
/// CPU time with a quota, at the process's cgroup or any above it; `read` reads a control
/// file. cgroup v2 (`0::path`, mounted at `/sys/fs/cgroup` or, on hybrid systems, under it
/// at `unified`): `cpu.max` other than `max ...`. v1 (a line naming the `cpu` controller,
/// mounted under `/sys/fs/cgroup` by its controllers' names): a positive
/// `cpu.cfs_quota_us`. Files that cannot be read count as no quota.
fn cpu_quota_in(cgroups: &str, read: impl Fn(&std::path::Path) -> Option<String>) -> bool {
    let root = std::path::Path::new("/sys/fs/cgroup");
    cgroups.lines().any(|line| {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return false;
        };
        let (mounts, file): (Vec<std::path::PathBuf>, &str) = if controllers.is_empty() {
            (vec![root.to_path_buf(), root.join("unified")], "cpu.max")
        } else if controllers.split(',').any(|c| c == "cpu") {
            (
                vec![
                    root.join(controllers),
                    root.join("cpu"),
                    root.join("cpu,cpuacct"),
                ],
                "cpu.cfs_quota_us",
            )
        } else {
            return false;
        };
        let limited = |text: String| {
            let first = text.split_whitespace().next().unwrap_or("max");
            if file == "cpu.max" {
                first != "max"
            } else {
                first.parse::<i64>().is_ok_and(|quota| quota > 0)
            }
        };
        let mut dir = Some(std::path::Path::new(path.trim()));
        while let Some(at) = dir {
            let relative = at.strip_prefix("/").unwrap_or(at);
            if mounts
                .iter()
                .any(|mount| read(&mount.join(relative).join(file)).is_some_and(limited))
            {
                return true;
            }
            dir = at.parent();
        }
        false
    })
}

/// The thread: sleep until held, spin while held (at most [`SPIN_MAX`] per hold).
fn run(shared: &Shared) {
    loop {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        if shared.holders.load(Ordering::Acquire) == 0 {
            std::thread::park();
            continue;
        }
        shared.spins.fetch_add(1, Ordering::Relaxed);
        let began = Instant::now();
        'spin: loop {
            for _ in 0..256 {
                if shared.holders.load(Ordering::Acquire) == 0 {
                    break 'spin;
                }
            }
            if began.elapsed() >= SPIN_MAX {
                shared.timeouts.fetch_add(1, Ordering::Relaxed);
                // Sleep until the next hold (or a spurious wake-up, which finds the same
                // holder and spins again: harmless).
                std::thread::park();
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Control files of a made-up cgroup tree.
    fn tree<'a>(
        files: &'a [(&'a str, &'a str)],
    ) -> impl Fn(&std::path::Path) -> Option<String> + 'a {
        move |path| {
            files
                .iter()
                .find(|(name, _)| std::path::Path::new(name) == path)
                .map(|(_, text)| text.to_string())
        }
    }

    #[test]
    fn a_cpu_quota_is_found_at_the_cgroup_or_above_it() {
        let v2 = "0::/system.slice/mnemo.service\n";
        let none = tree(&[
            (
                "/sys/fs/cgroup/system.slice/mnemo.service/cpu.max",
                "max 100000\n",
            ),
            ("/sys/fs/cgroup/system.slice/cpu.max", "max 100000\n"),
        ]);
        assert!(!cpu_quota_in(v2, none));
        let own = tree(&[(
            "/sys/fs/cgroup/system.slice/mnemo.service/cpu.max",
            "50000 100000\n",
        )]);
        assert!(cpu_quota_in(v2, own));
        let parent = tree(&[
            (
                "/sys/fs/cgroup/system.slice/mnemo.service/cpu.max",
                "max 100000\n",
            ),
            ("/sys/fs/cgroup/system.slice/cpu.max", "200000 100000\n"),
        ]);
        assert!(cpu_quota_in(v2, parent));
        let hybrid = tree(&[("/sys/fs/cgroup/unified/system.slice/cpu.max", "1 100000")]);
        assert!(cpu_quota_in(v2, hybrid));
        // v1: the cpu controller's hierarchy, -1 for no quota.
        let v1 = "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n";
        let unlimited = tree(&[(
            "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us",
            "-1\n",
        )]);
        assert!(!cpu_quota_in(v1, unlimited));
        let capped = tree(&[(
            "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us",
            "150000\n",
        )]);
        assert!(cpu_quota_in(v1, capped));
        let by_link = tree(&[("/sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us", "150000\n")]);
        assert!(cpu_quota_in(v1, by_link));
        // Another controller's quota-like file, or nothing readable: no quota.
        let memory_only = "4:memory:/docker/abc\n";
        let capped_memory = tree(&[("/sys/fs/cgroup/memory/docker/abc/cpu.cfs_quota_us", "1000")]);
        assert!(!cpu_quota_in(memory_only, capped_memory));
        assert!(!cpu_quota_in("garbage\n\n1:2\n", tree(&[])));
    }

    /// The scheduling policy of thread `tid`.
    fn policy(tid: i32) -> i32 {
        // SAFETY: sched_getscheduler reads nothing from the caller.
        unsafe { libc::sched_getscheduler(tid) }
    }

    /// A hold puts the thread at idle priority on the holder's CPU, spinning while the
    /// holder blocks; a hold longer than [`SPIN_MAX`] lets it sleep; a drop ends it.
    #[test]
    fn a_hold_spins_on_the_holders_cpu_at_idle_priority() {
        let Some(awake) = Awake::start() else {
            // Turned off by the environment or a CPU quota: nothing to check.
            assert!(
                !wanted() || cpu_quota_here(),
                "the thread could not be made SCHED_IDLE"
            );
            return;
        };
        let tid = awake.tid.as_raw_nonzero().get();
        assert_eq!(policy(tid), libc::SCHED_IDLE);
        assert_eq!(awake.spins(), (0, 0), "spun before any hold");
        {
            let _hold = awake.hold();
            let cpu = rustix::thread::sched_getcpu();
            // Block as a durable write would: the CPU is left to the spinning thread.
            std::thread::sleep(Duration::from_micros(300));
            let set = rustix::thread::sched_getaffinity(Some(awake.tid)).expect("affinity");
            assert!(set.is_set(cpu), "not on the holder's CPU {cpu}");
            assert_eq!(set.count(), 1, "not pinned to one CPU");
        }
        // On a busy machine an idle-priority thread may wait long for a CPU: hold until
        // it has spun, then until a hold has outlasted a spin.
        let deadline = Instant::now() + Duration::from_secs(10);
        while awake.spins().0 == 0 && Instant::now() < deadline {
            let _hold = awake.hold();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(awake.spins().0 >= 1, "never spun");
        while awake.spins().1 == 0 && Instant::now() < deadline {
            let _hold = awake.hold();
            std::thread::sleep(SPIN_MAX * 20);
        }
        assert!(
            awake.spins().1 >= 1,
            "a long hold never ran out: {:?}",
            awake.spins()
        );
        let shared = Arc::clone(&awake.shared);
        drop(awake);
        assert!(shared.stop.load(Ordering::Acquire));
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "the thread outlived its Awake"
        );
    }
}
