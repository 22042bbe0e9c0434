//! One VM owned through QMP: cold boot, fixation, recovery.
//!
//! The hypervisor holds the VM's lock for its whole life, and its QEMU inherits the lock's
//! file descriptor, so the lock is free only when neither lives: two QEMU processes never map
//! one RAM file. QEMU also gets the parent-death signal SIGKILL, so a hypervisor that dies
//! takes its QEMU with it (a crash without fixation: the VM then needs a cold boot), and runs
//! in its own process group, so a Ctrl-C at the terminal reaches only the hypervisor, which
//! fixes the VM.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::command::{arguments, sh_quote, Launch};
use crate::error::{Error, Result};
use crate::limits;
use crate::qmp::Qmp;
use crate::registry::{
    copy_memory, create_private, sync_dir, Lifecycle, Registry, StateCheck, Status, VmDir, VmLock,
};
use crate::state::{sample_ram, Trailer, TRAILER_BYTES};

/// How a start may begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    /// Recover a fixed VM; cold-boot one without a saved state; refuse an unusable state.
    Auto,
    /// Recover, or fail.
    RecoverOnly,
    /// Cold-boot, discarding any saved state.
    ColdBoot,
}

/// Why a VM cold-booted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColdBootReason {
    /// Its first start.
    New,
    /// The previous epoch ended without a completed fixation (a crash, a kill, a failed
    /// recovery, or a guest that powered off).
    NoFixation { epoch: u64 },
    /// Asked for; the text says what was discarded.
    Forced(String),
}

impl std::fmt::Display for ColdBootReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ColdBootReason::New => f.write_str("first boot"),
            ColdBootReason::NoFixation { epoch } => write!(
                f,
                "epoch {epoch} ended without a completed fixation: the guest restarts from scratch"
            ),
            ColdBootReason::Forced(what) => write!(f, "cold boot asked for ({what})"),
        }
    }
}

/// How a start went.
#[derive(Debug, Clone)]
pub enum Start {
    ColdBoot(ColdBootReason),
    Recovered(Recovery),
}

/// Timings of a recovery.
#[derive(Debug, Clone, Copy)]
pub struct Recovery {
    /// The epoch of the state resumed.
    pub from_epoch: u64,
    pub state_bytes: u64,
    /// From QEMU's spawn to its answer on QMP.
    pub qemu_start: Duration,
    /// `migrate-incoming` until the VM is paused with its state loaded.
    pub load: Duration,
    /// Everything: the lock taken, the state checked (its checksums and RAM sample), QEMU
    /// started, the state consumed and loaded, `cont`.
    pub total: Duration,
}

/// Timings of a fixation.
#[derive(Debug, Clone, Copy)]
pub struct Fixation {
    pub epoch: u64,
    pub state_bytes: u64,
    /// `stop` returned.
    pub stop: Duration,
    /// The migration stream completed.
    pub migrate: Duration,
    /// The state is published (trailer, syncs of the state and the RAM file, rename, sync
    /// of the directory): the fixation is complete at this instant.
    pub total: Duration,
    /// QEMU exited after `quit` (not part of the fixation: RAM and state are already safe).
    pub quit: Duration,
}

/// A snapshot of a running VM.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The new VM, fixed.
    pub copy: VmDir,
    pub state_bytes: u64,
    /// How long the guest was paused (its state saved and its RAM copied).
    pub pause: Duration,
}

/// A running VM.
#[derive(Debug)]
pub struct Hypervisor {
    vm: VmDir,
    child: Child,
    qmp: Qmp,
    epoch: u64,
    done: bool,
    // Last: the lock is released after QEMU is gone (fields drop in order).
    _lock: VmLock,
}

impl Hypervisor {
    /// Takes the VM's lock and starts it as `mode` says.
    pub fn start(vm: VmDir, mode: StartMode) -> Result<(Hypervisor, Start)> {
        let started = Instant::now();
        let lock = vm.lock()?;
        let status = vm.status()?;
        let check = vm.check_state(&status)?;
        let name = vm.name().to_string();
        match (mode, check) {
            (StartMode::ColdBoot, check) => {
                let what = match check {
                    StateCheck::Missing => "no saved state".to_string(),
                    StateCheck::Resumable(t) => {
                        format!("the saved state of epoch {} is discarded", t.epoch)
                    }
                    StateCheck::Unusable(why) => format!("an unusable state is discarded: {why}"),
                };
                Hypervisor::cold_boot(vm, lock, status, ColdBootReason::Forced(what))
            }
            (_, StateCheck::Resumable(trailer)) => {
                Hypervisor::recover(vm, lock, status, trailer, started)
            }
            (StartMode::Auto, StateCheck::Missing) => {
                let reason = if status.epoch == 0 {
                    ColdBootReason::New
                } else {
                    ColdBootReason::NoFixation {
                        epoch: status.epoch,
                    }
                };
                Hypervisor::cold_boot(vm, lock, status, reason)
            }
            (StartMode::RecoverOnly, StateCheck::Missing) => Err(Error::Unrecoverable {
                reason: if status.epoch == 0 {
                    "it never booted".into()
                } else {
                    format!(
                        "epoch {} ({}) ended without a completed fixation, so there is no \
                         state to resume; `mnemo vm run {name}` cold-boots it",
                        status.epoch, status.started
                    )
                },
                name,
            }),
            (_, StateCheck::Unusable(why)) => Err(Error::Unrecoverable {
                reason: format!(
                    "{why}. Nothing was changed; `mnemo vm run {name} --cold-boot` discards \
                     the state and boots the guest afresh"
                ),
                name,
            }),
        }
    }

    fn cold_boot(
        vm: VmDir,
        lock: VmLock,
        status: Status,
        reason: ColdBootReason,
    ) -> Result<(Hypervisor, Start)> {
        let ram = vm.file("ram");
        let len = fs::metadata(&ram)
            .map_err(|e| Error::io("reading the size of", &ram, e))?
            .len();
        if len != vm.config().ram_bytes {
            return Err(Error::Config(format!(
                "{} is {len} bytes, the VM's RAM is {}",
                ram.display(),
                vm.config().ram_bytes
            )));
        }
        // The new epoch is durable (one registry transaction) before QEMU starts.
        let epoch = vm.begin_epoch(&status, "cold boot".into())?.epoch;
        remove_if_exists(&vm.file("state"))?;
        let (child, qmp) = spawn(&vm, &lock, Launch::Boot)?;
        let mut hypervisor = Hypervisor {
            vm,
            child,
            qmp,
            epoch,
            done: false,
            _lock: lock,
        };
        // Set now, so that a fixation is only stop + migrate.
        hypervisor.qmp.ignore_shared()?;
        Ok((hypervisor, Start::ColdBoot(reason)))
    }

    fn recover(
        vm: VmDir,
        lock: VmLock,
        status: Status,
        trailer: Trailer,
        started: Instant,
    ) -> Result<(Hypervisor, Start)> {
        let spawned = Instant::now();
        let (child, qmp) = spawn(&vm, &lock, Launch::Incoming)?;
        let qemu_start = spawned.elapsed();
        let mut hypervisor = Hypervisor {
            vm,
            child,
            qmp,
            epoch: status.epoch,
            done: false,
            _lock: lock,
        };
        hypervisor.qmp.ignore_shared()?;
        // Consume the state: from here on it can never be resumed again, whatever happens.
        // One registry transaction: at its commit the state's epoch is no longer the VM's.
        let epoch = hypervisor
            .vm
            .begin_epoch(&status, format!("recovery from epoch {}", trailer.epoch))?
            .epoch;
        hypervisor.epoch = epoch;
        let state = hypervisor.vm.file("state");
        let used = hypervisor.vm.file("state.used");
        fs::rename(&state, &used).map_err(|e| Error::io("renaming", &state, e))?;
        sync_dir(hypervisor.vm.path())?;
        let load_started = Instant::now();
        let loaded = hypervisor.load(&used, trailer.stream_len);
        let load = load_started.elapsed();
        if let Err(e) = loaded.and_then(|()| hypervisor.qmp.execute("cont", None).map(drop)) {
            let name = hypervisor.vm.name().to_string();
            hypervisor.kill();
            return Err(Error::RecoveryFailed {
                name,
                detail: e.to_string(),
            });
        }
        let recovery = Recovery {
            from_epoch: trailer.epoch,
            state_bytes: trailer.stream_len + TRAILER_BYTES as u64,
            qemu_start,
            load,
            total: started.elapsed(),
        };
        Ok((hypervisor, Start::Recovered(recovery)))
    }

    /// `migrate-incoming` of the first `len` bytes of `state`, until QEMU is paused with it.
    fn load(&mut self, state: &std::path::Path, len: u64) -> Result<()> {
        let uri = format!("exec:head -c {len} {}", sh_quote(state)?);
        let loaded = self
            .qmp
            .execute("migrate-incoming", Some(json!({ "uri": uri })))
            .and_then(|_| {
                let deadline = Instant::now() + limits::MIGRATION_TIMEOUT;
                loop {
                    let status = self.qmp.status()?;
                    if status != "inmigrate" {
                        return Ok(status);
                    }
                    if Instant::now() > deadline {
                        return Err(Error::Timeout {
                            what: "loading the saved state".into(),
                            seconds: limits::MIGRATION_TIMEOUT.as_secs_f64(),
                        });
                    }
                    std::thread::sleep(limits::MIGRATION_POLL);
                }
            });
        match loaded {
            Ok(status) if status == "paused" => Ok(()),
            Ok(status) => {
                let detail = self
                    .qmp
                    .execute("query-migrate", None)
                    .map_or_else(|e| e.to_string(), |v| v.to_string());
                Err(Error::Migration {
                    what: "loading the state",
                    detail: format!("QEMU is {status:?} instead of paused: {detail}"),
                })
            }
            Err(e) => {
                // QEMU exits when a state does not load: its own words say why.
                match wait_exit(&mut self.child, Duration::from_secs(5)) {
                    Some(status) => Err(Error::QemuExited {
                        when: "while loading the saved state",
                        status: status.to_string(),
                        output: qemu_output(&self.vm),
                    }),
                    None => Err(e),
                }
            }
        }
    }

    /// Fixation: stop the VM, save its virtual environment durably and atomically, quit
    /// QEMU. If saving fails, the VM continues running and the error is returned.
    pub fn fix(&mut self) -> Result<Fixation> {
        if self.done {
            return Err(Error::NotRunning(self.vm.name().to_string()));
        }
        let started = Instant::now();
        self.qmp.execute("stop", None)?;
        let stop = started.elapsed();
        let saved = self.save();
        let (trailer, migrate) = match saved {
            Ok(saved) => saved,
            Err(e) => {
                // Back to running: an unfinished fixation must not cost the guest.
                let _ = self.qmp.execute("cont", None);
                return Err(e);
            }
        };
        let total = started.elapsed();
        let _ = self.qmp.execute("quit", None);
        if wait_exit(&mut self.child, limits::QEMU_EXIT_TIMEOUT).is_none() {
            self.kill();
        }
        self.done = true;
        let quit = started.elapsed() - total;
        // The fixation is complete (the state's trailer carries its epoch): the registry's
        // lifecycle is a record of it, written after QEMU is gone, off the outage path.
        if let Err(e) = self.vm.record_fixed(self.epoch) {
            tracing::warn!(
                vm = self.vm.name(),
                "the fixation is complete, but recording it in the registry failed: {e}"
            );
        }
        Ok(Fixation {
            epoch: self.epoch,
            state_bytes: trailer.stream_len + TRAILER_BYTES as u64,
            stop,
            migrate,
            total,
            quit,
        })
    }

    /// The migration to `state.tmp`, the trailer, the syncs and the rename.
    fn save(&mut self) -> Result<(Trailer, Duration)> {
        let started = Instant::now();
        let tmp = self.vm.file("state.tmp");
        self.migrate_to(&tmp)?;
        let migrate = started.elapsed();
        let trailer = publish(&self.vm, self.epoch, &tmp)?;
        Ok((trailer, migrate))
    }

    /// Migrates the stopped VM's virtual environment (RAM excluded) into the file `tmp`.
    fn migrate_to(&mut self, tmp: &std::path::Path) -> Result<()> {
        remove_if_exists(tmp)?;
        // `cat >` truncates the file and keeps the mode it is created with here.
        create_private(tmp)?;
        let uri = format!("exec:cat > {}", sh_quote(tmp)?);
        self.qmp.execute("migrate", Some(json!({ "uri": uri })))?;
        let deadline = Instant::now() + limits::MIGRATION_TIMEOUT;
        loop {
            let reply = self.qmp.execute("query-migrate", None)?;
            match reply.get("status").and_then(Value::as_str) {
                Some("completed") => return Ok(()),
                Some(status @ ("failed" | "cancelled")) => {
                    return Err(Error::Migration {
                        what: "saving the state",
                        detail: format!(
                            "migration {status}: {}",
                            reply
                                .get("error-desc")
                                .and_then(Value::as_str)
                                .unwrap_or("no reason given")
                        ),
                    })
                }
                _ => {}
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: "saving the state".into(),
                    seconds: limits::MIGRATION_TIMEOUT.as_secs_f64(),
                });
            }
            std::thread::sleep(limits::MIGRATION_POLL);
        }
    }

    /// A snapshot of the running VM: a new VM `copy` beside it, fixed at this instant (its
    /// RAM a copy of this one's, its state saved now). The guest pauses for the copy of its
    /// RAM, then runs on; recovering the copy continues the guest from the pause (a fork).
    pub fn snapshot(&mut self, copy: &str) -> Result<Snapshot> {
        if self.done {
            return Err(Error::NotRunning(self.vm.name().to_string()));
        }
        let registry = Registry::new(self.vm.path().parent().unwrap_or(std::path::Path::new(".")));
        let target = registry.begin_copy(&self.vm, copy)?;
        let started = Instant::now();
        if let Err(e) = self.qmp.execute("stop", None) {
            let _ = fs::remove_dir_all(target.path());
            return Err(e);
        }
        let made = (|| {
            let tmp = target.file("state.tmp");
            self.migrate_to(&tmp)?;
            copy_memory(&self.vm.file("ram"), &target.file("ram"))?;
            if self.vm.config().nvdimm_bytes.is_some() {
                copy_memory(&self.vm.file("nvdimm"), &target.file("nvdimm"))?;
            }
            let trailer = publish(&target, self.epoch, &tmp)?;
            // The copy exists from this commit on.
            registry.add_copy(&target, &self.vm, self.epoch, Lifecycle::Fixed)?;
            Ok(trailer)
        })();
        let resumed = self.qmp.execute("cont", None);
        let pause = started.elapsed();
        match made {
            Ok(trailer) => {
                resumed?;
                Ok(Snapshot {
                    copy: target,
                    state_bytes: trailer.stream_len + TRAILER_BYTES as u64,
                    pause,
                })
            }
            Err(e) => {
                let _ = fs::remove_dir_all(target.path());
                Err(e)
            }
        }
    }

    /// QEMU's exit, if it exited by itself (the guest powered off, or QEMU failed).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.done {
            return None;
        }
        let status = self.child.try_wait().ok().flatten()?;
        self.done = true;
        Some(status)
    }

    pub fn qemu_pid(&self) -> u32 {
        self.child.id()
    }

    pub fn vm(&self) -> &VmDir {
        &self.vm
    }

    /// The epoch this start began.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// QEMU's output so far (its log file).
    pub fn qemu_output(&self) -> String {
        qemu_output(&self.vm)
    }

    /// Kills QEMU without fixation (the VM then needs a cold boot).
    pub fn kill(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.done = true;
        }
    }
}

impl Drop for Hypervisor {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Appends the trailer to the stream QEMU wrote to `tmp` (a file of `vm`'s directory), makes
/// stream and memory durable, and renames the state into place: the state is published.
fn publish(vm: &VmDir, epoch: u64, tmp: &std::path::Path) -> Result<Trailer> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .open(tmp)
        .map_err(|e| Error::io("opening", tmp, e))?;
    let mut stream = Vec::new();
    (&mut file)
        .take(limits::STATE_BYTES_MAX + 1)
        .read_to_end(&mut stream)
        .map_err(|e| Error::io("reading", tmp, e))?;
    if stream.len() as u64 > limits::STATE_BYTES_MAX {
        return Err(Error::Migration {
            what: "saving the state",
            detail: format!(
                "the state is larger than {} bytes: guest RAM went into it (is the RAM \
                 backend share=on?)",
                limits::STATE_BYTES_MAX
            ),
        });
    }
    let ram_path = vm.file("ram");
    let ram = File::open(&ram_path).map_err(|e| Error::io("opening", &ram_path, e))?;
    let trailer = Trailer {
        epoch,
        stream_len: stream.len() as u64,
        ram_bytes: vm.config().ram_bytes,
        stream_crc: crc32c::crc32c(&stream),
        ram: sample_ram(&ram, vm.config().ram_bytes)
            .map_err(|e| Error::io("sampling", &ram_path, e))?,
    };
    file.write_all(&trailer.encode())
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io("writing", tmp, e))?;
    // Guest memory written back too (free on persistent memory and tmpfs; on a disk file it
    // costs the write-back of every dirty page, which is why RAM belongs on pmem).
    ram.sync_all()
        .map_err(|e| Error::io("syncing", &ram_path, e))?;
    if vm.config().nvdimm_bytes.is_some() {
        let path = vm.file("nvdimm");
        File::open(&path)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io("syncing", &path, e))?;
    }
    let state = vm.file("state");
    fs::rename(tmp, &state).map_err(|e| Error::io("renaming into place", &state, e))?;
    sync_dir(vm.path())?;
    Ok(trailer)
}

/// Starts QEMU for `vm` and connects to its QMP socket.
fn spawn(vm: &VmDir, lock: &VmLock, launch: Launch) -> Result<(Child, Qmp)> {
    let config = vm.config();
    let files = vm.files();
    let args = arguments(config, &files, launch)?;
    remove_if_exists(&files.qmp)?;
    let log_path = vm.file("qemu.log");
    let log = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| Error::io("creating", &log_path, e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| Error::io("cloning", &log_path, e))?;
    let lock_fd = lock.file().as_raw_fd();
    let mut command = Command::new(&config.qemu);
    command
        .args(&args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0);
    // SAFETY: the closure runs in the forked child before exec and makes only two system
    // calls (prctl, fcntl), which are async-signal-safe; it allocates nothing and takes no
    // lock. `lock_fd` stays open in the parent until after spawn returns (the lock outlives
    // this function), so the child's copy of it is valid.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // Inherit the VM's lock: it stays held while QEMU lives, even past the hypervisor.
            let fd = std::os::fd::BorrowedFd::borrow_raw(lock_fd);
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            Ok(())
        });
    }
    tracing::debug!(qemu = %config.qemu, args = %args.join(" "), "starting QEMU");
    let mut child = command.spawn().map_err(|source| Error::NoQemu {
        program: config.qemu.clone(),
        source,
    })?;
    let connected = Qmp::connect(&files.qmp, limits::QMP_CONNECT_TIMEOUT, || {
        match child.try_wait() {
            Ok(Some(status)) => Err(Error::QemuExited {
                when: "at start",
                status: status.to_string(),
                output: qemu_output(vm),
            }),
            _ => Ok(()),
        }
    });
    match connected {
        Ok(qmp) => Ok((child, qmp)),
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

fn qemu_output(vm: &VmDir) -> String {
    let text = fs::read(vm.file("qemu.log")).unwrap_or_default();
    let tail = &text[text.len().saturating_sub(4096)..];
    String::from_utf8_lossy(tail).trim_end().to_string()
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn remove_if_exists(path: &std::path::Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", path, e)),
    }
}
