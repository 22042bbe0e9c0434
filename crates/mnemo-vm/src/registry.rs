//! The registry of VMs under a data directory (by default `mnemo-data/vms`; put it on
//! persistent memory, e.g. /dev/shm or a DAX file system). The durable records (each VM's
//! name, configuration, epoch and lifecycle) are in a mnemo pool, `registry.pool`, changed
//! only by heap transactions ([`crate::records`]); each VM's memory and saved state are files
//! in its directory:
//!
//! ```text
//!  vms/
//!    registry.pool      the records (records.rs), mode 0600
//!    registry.lock      flock(2)ed for the length of one registry operation
//!    NAME/              mode 0700
//!      ram              guest RAM (memory-backend-file, share=on), mode 0600
//!      nvdimm           the guest-visible NVDIMM's memory, if configured, mode 0600
//!      kernel, initrd   copies of the boot files (Boot::Kernel)
//!      state            the last fixation: QEMU stream + trailer (state.rs)
//!      state.used       the state the last recovery consumed (kept for inspection)
//!      lock             flock(2)ed by the hypervisor, and inherited by its QEMU
//!      hypervisor.pid   the hypervisor holding the lock
//!      serial.log       the guest's serial console, appended across power cycles
//!      qemu.log         QEMU's own output of its last start
//!      qmp.sock         QEMU's machine protocol socket
//! ```
//!
//! A VM exists when its record does: creation fills the directory first and adds the record
//! last, in one transaction; deletion removes the record first, then the directory.
//!
//! A VM's state, as `mnemo vm list` shows it:
//! * **running**: its lock is held (a hypervisor or its QEMU lives);
//! * **fixed**: not running, and `state` is resumable: its trailer and checksums are whole,
//!   its epoch is the VM's epoch, and the RAM file still holds the sampled pages;
//! * **needs cold boot**: anything else (never booted, died without a completed fixation,
//!   or a state that cannot be resumed, with the reason).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::command::Files;
use crate::config::{validate_name, Boot, VmConfig};
use crate::error::{Error, Result};
use crate::limits;
pub use crate::records::{Lifecycle, Status};
use crate::records::{Record, Session, POOL_FILE};
use crate::state::{parse_state, sample_ram, Trailer, TRAILER_BYTES};

/// The VMs under one data directory.
#[derive(Debug, Clone)]
pub struct Registry {
    root: PathBuf,
}

/// One VM's directory and configuration.
#[derive(Debug, Clone)]
pub struct VmDir {
    root: PathBuf,
    path: PathBuf,
    config: VmConfig,
}

/// The three states of a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VmState {
    Running,
    Fixed,
    NeedsColdBoot,
}

impl std::fmt::Display for VmState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VmState::Running => "running",
            VmState::Fixed => "fixed",
            VmState::NeedsColdBoot => "needs cold boot",
        })
    }
}

/// One line of `mnemo vm list`.
#[derive(Debug, Clone, Serialize)]
pub struct VmSummary {
    pub name: String,
    pub state: VmState,
    pub epoch: u64,
    /// What the registry last recorded (none for a directory the registry does not know).
    pub lifecycle: Option<Lifecycle>,
    pub ram_bytes: u64,
    /// Bytes of the saved state, when fixed.
    pub state_bytes: Option<u64>,
    /// Why, for a VM that needs a cold boot; the hypervisor's pid when running.
    pub detail: String,
}

/// What `state` is worth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateCheck {
    /// There is no `state`.
    Missing,
    /// It can be resumed.
    Resumable(Trailer),
    /// It cannot, and why.
    Unusable(String),
}

/// The held lock of a VM (released when dropped, and when its QEMU, which inherits it, exits).
#[derive(Debug)]
pub struct VmLock {
    file: File,
    /// `hypervisor.pid`, removed on release so that no stale pid is ever signalled.
    pid: PathBuf,
}

impl VmLock {
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for VmLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.pid);
    }
}

impl Registry {
    /// The VMs under `root` (made absolute: QEMU's command line and its `exec:` migration
    /// commands name files by these paths, the same from any working directory).
    pub fn new(root: impl Into<PathBuf>) -> Registry {
        let root = root.into();
        Registry {
            root: std::path::absolute(&root).unwrap_or(root),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The registry pool's path.
    pub fn pool_path(&self) -> PathBuf {
        self.root.join(POOL_FILE)
    }

    /// Creates a VM: its directory, copies of its boot files, its RAM file (mode 0600,
    /// sparse), then its record (epoch 0) in one transaction. The VM exists from that commit
    /// on; a failure before it removes the directory.
    pub fn create(
        &self,
        config: VmConfig,
        kernel: Option<&Path>,
        initrd: Option<&Path>,
    ) -> Result<VmDir> {
        config.validate()?;
        if let Boot::Kernel { initrd: with, .. } = &config.boot {
            if kernel.is_none() || *with != initrd.is_some() {
                return Err(Error::Config(
                    "a kernel boot needs its kernel (and initrd) files".into(),
                ));
            }
        }
        if self.session(true)?.get(&config.name)?.is_some() {
            return Err(self.exists_error(&config.name));
        }
        let vm = VmDir {
            root: self.root.clone(),
            path: self.root.join(&config.name),
            config,
        };
        self.make_dir(&vm.path, vm.name())?;
        let made = vm.populate(kernel, initrd).and_then(|()| {
            self.session(true)?.insert(&Record {
                config: vm.config.clone(),
                status: Status {
                    epoch: 0,
                    lifecycle: Lifecycle::Created,
                    started: "created".into(),
                    started_unix_s: unix_now(),
                },
            })
        });
        if made.is_err() {
            let _ = fs::remove_dir_all(&vm.path);
        }
        made.map(|()| vm)
    }

    /// The registry, open for one operation (`create`: make the directory and the pool if
    /// they do not exist).
    fn session(&self, create: bool) -> Result<Session> {
        Session::open(&self.root, create)?.ok_or_else(|| Error::Registry {
            path: self.pool_path(),
            detail: "there is no registry pool here".into(),
        })
    }

    fn exists_error(&self, name: &str) -> Error {
        Error::Config(format!(
            "VM {name:?} exists already in {}; start it with `mnemo vm run {name}`, or delete it",
            self.root.display()
        ))
    }

    /// Makes a VM's directory (mode 0700). Atomic against a concurrent create of the same
    /// name: mkdir fails if it exists.
    fn make_dir(&self, path: &Path, name: &str) -> Result<()> {
        fs::DirBuilder::new().mode(0o700).create(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                self.stray(name).unwrap_or_else(|| self.exists_error(name))
            } else {
                Error::io("creating", path, e)
            }
        })
    }

    /// Why the directory `name`, which has no record, is there.
    fn stray(&self, name: &str) -> Option<Error> {
        let dir = self.root.join(name);
        if dir.join("config.json").exists() {
            return Some(Error::Config(format!(
                "{} holds VM {name:?} as an earlier mnemo made it (config.json and \
                 status.json); this mnemo keeps VMs in the registry pool {} and does not \
                 migrate them: delete the directory (rm -r {}) and create the VM again",
                dir.display(),
                self.pool_path().display(),
                dir.display()
            )));
        }
        dir.is_dir().then(|| {
            Error::Config(format!(
                "{} is no VM: the registry {} has no record of {name:?}. A create, snapshot \
                 or delete was interrupted there, or is running now; if none runs, remove the \
                 directory (rm -r {})",
                dir.display(),
                self.pool_path().display(),
                dir.display()
            ))
        })
    }

    /// Opens an existing VM: its record, read from the registry pool.
    pub fn open(&self, name: &str) -> Result<VmDir> {
        validate_name(name)?;
        let record = match Session::open(&self.root, false)? {
            Some(session) => session.get(name)?,
            None => None,
        };
        let Some(record) = record else {
            return Err(self.stray(name).unwrap_or_else(|| Error::NoSuchVm {
                name: name.to_string(),
                dir: self.root.clone(),
            }));
        };
        record.config.validate()?;
        Ok(VmDir {
            root: self.root.clone(),
            path: self.root.join(name),
            config: record.config,
        })
    }

    /// Where the record of `name` is in the registry pool file (its byte offset; `None`
    /// without a record), for inspection.
    pub fn record_offset(&self, name: &str) -> Result<Option<u64>> {
        match Session::open(&self.root, false)? {
            Some(session) => session.record_offset(name),
            None => Ok(None),
        }
    }

    /// Whether the registry has a record of `name` (never for a name that is not a VM name).
    pub fn exists(&self, name: &str) -> Result<bool> {
        if validate_name(name).is_err() {
            return Ok(false);
        }
        Ok(match Session::open(&self.root, false)? {
            Some(session) => session.get(name)?.is_some(),
            None => false,
        })
    }

    /// Every VM of the registry pool, by name, then every directory the pool has no record
    /// of (an earlier mnemo's VM, or what an interrupted create left), with why.
    pub fn list(&self) -> Result<Vec<VmSummary>> {
        let mut records = Vec::new();
        if let Some(session) = Session::open(&self.root, false)? {
            for name in session.names()? {
                // One damaged record does not hide the others: it is listed, with why.
                let record = session.get(&name);
                records.push((name, record));
            }
        }
        let mut summaries: Vec<VmSummary> = records
            .into_iter()
            .map(|(name, record)| {
                record
                    .and_then(|record| {
                        let record = record.ok_or_else(|| Error::NoSuchVm {
                            name: name.clone(),
                            dir: self.root.clone(),
                        })?;
                        let vm = VmDir {
                            root: self.root.clone(),
                            path: self.root.join(&name),
                            config: record.config,
                        };
                        vm.summary_of(&record.status)
                    })
                    .unwrap_or_else(|e| VmSummary {
                        name: name.clone(),
                        state: VmState::NeedsColdBoot,
                        epoch: 0,
                        lifecycle: None,
                        ram_bytes: 0,
                        state_bytes: None,
                        detail: format!("unreadable: {e}"),
                    })
            })
            .collect();
        let known: std::collections::HashSet<String> =
            summaries.iter().map(|s| s.name.clone()).collect();
        let mut strays = Vec::new();
        for entry in fs::read_dir(&self.root).into_iter().flatten().flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir || validate_name(&name).is_err() || known.contains(&name) {
                continue;
            }
            if let Some(why) = self.stray(&name) {
                strays.push(VmSummary {
                    name,
                    state: VmState::NeedsColdBoot,
                    epoch: 0,
                    lifecycle: None,
                    ram_bytes: 0,
                    state_bytes: None,
                    detail: format!("not in the registry: {why}"),
                });
            }
        }
        strays.sort_by(|a, b| a.name.cmp(&b.name));
        summaries.extend(strays);
        Ok(summaries)
    }

    /// Deletes a VM that is not running. Its lock is taken first, so a hypervisor that starts
    /// meanwhile either got it first, and the delete is refused, or cannot start. The record
    /// goes first (the VM is gone at that commit), then the directory.
    /// A VM whose record is damaged can be deleted too.
    pub fn delete(&self, name: &str) -> Result<()> {
        if let Err(e) = self.open(name) {
            // A damaged record can be deleted; a pool that cannot be opened cannot.
            if !matches!(e, Error::Registry { .. }) || self.record_offset(name).is_err() {
                return Err(e);
            }
        }
        let path = self.root.join(name);
        let _lock = lock_vm(&path, name)?;
        self.session(false)?.remove(name)?;
        fs::remove_dir_all(&path).map_err(|e| Error::io("removing", &path, e))
    }

    /// Copies a VM that is fixed (or needs a cold boot) to a new name: configuration, RAM,
    /// boot files and saved state. Recovering the copy continues the guest from the same
    /// instant as the original would: a fork of the VM. The original must not run meanwhile
    /// (its lock is held for the copy). A running VM is copied by its hypervisor
    /// (`Hypervisor::snapshot`). The copy's record, at the original's epoch, is added last.
    pub fn snapshot(&self, name: &str, copy: &str) -> Result<VmDir> {
        let source = self.open(name)?;
        let _lock = source.lock()?;
        let status = source.status()?;
        let target = self.begin_copy(&source, copy)?;
        let copied = (|| {
            copy_memory(&source.file("ram"), &target.file("ram"))?;
            if source.config.nvdimm_bytes.is_some() {
                copy_memory(&source.file("nvdimm"), &target.file("nvdimm"))?;
            }
            let fixed = source.file("state").exists();
            if fixed {
                copy_file(&source.file("state"), &target.file("state"))?;
            }
            sync_dir(&target.path)?;
            self.add_copy(
                &target,
                &source,
                status.epoch,
                if fixed {
                    Lifecycle::Fixed
                } else {
                    status.lifecycle
                },
            )
        })();
        if copied.is_err() {
            let _ = fs::remove_dir_all(&target.path);
        }
        copied.map(|()| target)
    }

    /// The last step of a copy: its record, at `epoch` of `source`, in one transaction.
    pub(crate) fn add_copy(
        &self,
        target: &VmDir,
        source: &VmDir,
        epoch: u64,
        lifecycle: Lifecycle,
    ) -> Result<()> {
        self.session(true)?.insert(&Record {
            config: target.config.clone(),
            status: Status {
                epoch,
                lifecycle,
                started: format!("snapshot of {} in its epoch {epoch}", source.name()),
                started_unix_s: unix_now(),
            },
        })
    }

    /// The first half of a copy of `source` named `copy`: its directory, boot files and
    /// console log. Memory and state are the caller's to add, then the record
    /// ([`Registry::add_copy`]).
    pub(crate) fn begin_copy(&self, source: &VmDir, copy: &str) -> Result<VmDir> {
        validate_name(copy)?;
        if self.session(true)?.get(copy)?.is_some() {
            return Err(Error::Config(format!(
                "VM {copy:?} exists already in {}",
                self.root.display()
            )));
        }
        let mut config = source.config.clone();
        config.name = copy.to_string();
        let target = VmDir {
            root: self.root.clone(),
            path: self.root.join(copy),
            config,
        };
        self.make_dir(&target.path, copy)?;
        let begun = (|| {
            for file in ["kernel", "initrd"] {
                let from = source.path.join(file);
                if from.exists() {
                    copy_file(&from, &target.path.join(file))?;
                }
            }
            create_private(&target.path.join("serial.log")).map(drop)
        })();
        if begun.is_err() {
            let _ = fs::remove_dir_all(&target.path);
        }
        begun.map(|()| target)
    }
}

impl VmDir {
    pub fn name(&self) -> &str {
        &self.config.name
    }

    pub fn config(&self) -> &VmConfig {
        &self.config
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The files QEMU's command line names.
    pub fn files(&self) -> Files {
        Files {
            ram: self.file("ram"),
            nvdimm: self.file("nvdimm"),
            kernel: self.file("kernel"),
            initrd: self.file("initrd"),
            serial: self.file("serial.log"),
            qmp: self.file("qmp.sock"),
        }
    }

    fn populate(&self, kernel: Option<&Path>, initrd: Option<&Path>) -> Result<()> {
        if let Some(kernel) = kernel {
            copy_file(kernel, &self.file("kernel"))?;
        }
        if let Some(initrd) = initrd {
            copy_file(initrd, &self.file("initrd"))?;
        }
        create_memory_file(&self.file("ram"), self.config.ram_bytes)?;
        // QEMU appends to the console log, which keeps the mode it is created with here.
        create_private(&self.file("serial.log"))?;
        if let Some(bytes) = self.config.nvdimm_bytes {
            create_memory_file(&self.file("nvdimm"), bytes)?;
        }
        sync_dir(&self.path)
    }

    /// Takes the VM's lock (non-blocking) and records the caller as its holder.
    pub fn lock(&self) -> Result<VmLock> {
        lock_vm(&self.path, self.name())
    }

    /// Whether the lock is held by anyone.
    pub fn is_running(&self) -> Result<bool> {
        let path = self.file("lock");
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("opening", &path, e)),
        };
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
            Ok(()) => Ok(false),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(true),
            Err(e) => Err(Error::io("locking", &path, e.into())),
        }
    }

    /// The pid recorded by the lock's holder.
    pub fn holder(&self) -> Option<String> {
        holder(&self.path)
    }

    /// The pid of the hypervisor holding the lock, checked: the process's command line names
    /// `vm` and this VM (so a stale pid file never gets another process signalled).
    pub fn hypervisor_pid(&self) -> Option<i32> {
        let pid: i32 = self.holder()?.parse().ok()?;
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let mut args = cmdline.split(|&b| b == 0);
        let ours = args.any(|a| a == b"vm") && args.any(|a| a == self.name().as_bytes());
        ours.then_some(pid)
    }

    fn session(&self) -> Result<Session> {
        Registry::new(&self.root).session(false)
    }

    /// The VM's status, read from the registry pool.
    pub fn status(&self) -> Result<Status> {
        self.session()?
            .get(self.name())?
            .map(|record| record.status)
            .ok_or_else(|| Error::NoSuchVm {
                name: self.name().to_string(),
                dir: self.root.clone(),
            })
    }

    /// Begins a new epoch, durably (one registry transaction), and returns the new status.
    /// `from` is the status the caller judged the VM by: if the epoch moved since, nothing
    /// changes and this is an error. The caller holds the VM's lock.
    pub fn begin_epoch(&self, from: &Status, started: String) -> Result<Status> {
        self.session()?.update(self.name(), |now| {
            if now.epoch != from.epoch {
                return Err(Error::Config(format!(
                    "VM {:?}: its epoch moved from {} to {} meanwhile; nothing was started",
                    self.name(),
                    from.epoch,
                    now.epoch
                )));
            }
            Ok(Status {
                epoch: now.epoch.checked_add(1).ok_or_else(|| {
                    Error::Config(format!("VM {:?}: its epoch is exhausted", self.name()))
                })?,
                lifecycle: Lifecycle::Started,
                started,
                started_unix_s: unix_now(),
            })
        })
    }

    /// Records that a fixation of `epoch` completed (if the VM is still in that epoch).
    pub fn record_fixed(&self, epoch: u64) -> Result<()> {
        self.session()?
            .update(self.name(), |now| {
                let mut next = now.clone();
                if now.epoch == epoch {
                    next.lifecycle = Lifecycle::Fixed;
                }
                Ok(next)
            })
            .map(drop)
    }

    /// Judges `state` against the VM's epoch and its RAM file. Reads 1 MiB of RAM samples.
    pub fn check_state(&self, status: &Status) -> Result<StateCheck> {
        let path = self.file("state");
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StateCheck::Missing),
            Err(e) => return Err(Error::io("opening", &path, e)),
        };
        let len = file
            .metadata()
            .map_err(|e| Error::io("reading the size of", &path, e))?
            .len();
        let unusable = |why: String| Ok(StateCheck::Unusable(why));
        if len < TRAILER_BYTES as u64 || len > limits::STATE_BYTES_MAX {
            return unusable(format!("its state is {len} bytes, not a saved state"));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        (&mut file)
            .take(limits::STATE_BYTES_MAX)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("reading", &path, e))?;
        let trailer = match parse_state(&bytes) {
            Ok(trailer) => trailer,
            Err(why) => return unusable(format!("its state is unusable: {why}")),
        };
        if trailer.ram_bytes != self.config.ram_bytes {
            return unusable(format!(
                "its state was saved from {} bytes of RAM, the VM has {}",
                trailer.ram_bytes, self.config.ram_bytes
            ));
        }
        if trailer.epoch != status.epoch {
            return unusable(format!(
                "its state was saved in epoch {}, but the VM is in epoch {} ({}): \
                 a state is resumed at most once, and resuming an older one would run \
                 the guest's newer memory with older CPU and device state",
                trailer.epoch, status.epoch, status.started
            ));
        }
        let ram_path = self.file("ram");
        let ram = File::open(&ram_path).map_err(|e| Error::io("opening", &ram_path, e))?;
        let ram_len = ram
            .metadata()
            .map_err(|e| Error::io("reading the size of", &ram_path, e))?
            .len();
        if ram_len != self.config.ram_bytes {
            return unusable(format!(
                "its RAM file is {ram_len} bytes, not the {} it was saved with",
                self.config.ram_bytes
            ));
        }
        let sample = sample_ram(&ram, ram_len).map_err(|e| Error::io("reading", &ram_path, e))?;
        if sample != trailer.ram {
            return unusable(format!(
                "its RAM file does not hold the memory its state was saved with: \
                 {} sampled pages differ ({} of them were non-zero at fixation, {} are now); \
                 it was zeroed, re-created or replaced after the fixation",
                sample.pages, trailer.ram.nonzero, sample.nonzero
            ));
        }
        Ok(StateCheck::Resumable(trailer))
    }

    /// The VM's line in `mnemo vm list`.
    pub fn summary(&self) -> Result<VmSummary> {
        self.summary_of(&self.status()?)
    }

    fn summary_of(&self, status: &Status) -> Result<VmSummary> {
        let mut summary = VmSummary {
            name: self.name().to_string(),
            state: VmState::NeedsColdBoot,
            epoch: status.epoch,
            lifecycle: Some(status.lifecycle),
            ram_bytes: self.config.ram_bytes,
            state_bytes: None,
            detail: String::new(),
        };
        if self.is_running()? {
            summary.state = VmState::Running;
            summary.detail = format!(
                "hypervisor pid {}; epoch began: {}",
                self.holder().unwrap_or_else(|| "unknown".into()),
                status.started
            );
            return Ok(summary);
        }
        match self.check_state(status)? {
            StateCheck::Resumable(trailer) => {
                summary.state = VmState::Fixed;
                summary.state_bytes = Some(trailer.stream_len + TRAILER_BYTES as u64);
                summary.detail = "resumable".into();
            }
            StateCheck::Missing if status.epoch == 0 => summary.detail = "never booted".into(),
            StateCheck::Missing if status.lifecycle == Lifecycle::Fixed => {
                summary.detail = format!(
                    "the registry records a fixation of epoch {}, but its state file is gone",
                    status.epoch
                )
            }
            StateCheck::Missing => {
                summary.detail = format!(
                    "no completed fixation of epoch {} ({})",
                    status.epoch, status.started
                )
            }
            StateCheck::Unusable(why) => summary.detail = why,
        }
        Ok(summary)
    }
}

/// Takes the lock of the VM `name` in `dir` (non-blocking) and records the caller as its
/// holder.
fn lock_vm(dir: &Path, name: &str) -> Result<VmLock> {
    let path = dir.join("lock");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("opening", &path, e))?;
    // A few tries: `is_running` (mnemo vm list) holds a shared lock for an instant.
    let mut tries = 0;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(rustix::io::Errno::WOULDBLOCK) if tries < limits::LOCK_TRIES => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(Error::Running {
                    name: name.to_string(),
                    pid: holder(dir).unwrap_or_else(|| "unknown".into()),
                })
            }
            Err(e) => return Err(Error::io("locking", &path, e.into())),
        }
    }
    let pid = dir.join("hypervisor.pid");
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&pid)
        .and_then(|mut f| f.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|e| Error::io("writing", &pid, e))?;
    Ok(VmLock { file, pid })
}

/// The pid recorded by the lock's holder.
fn holder(dir: &Path) -> Option<String> {
    let text = fs::read_to_string(dir.join("hypervisor.pid")).ok()?;
    let pid = text.trim();
    (!pid.is_empty() && pid.len() < 12 && pid.bytes().all(|b| b.is_ascii_digit()))
        .then(|| pid.to_string())
}

/// Creates a guest memory file of `bytes` (sparse, mode 0600); never truncates one that
/// exists (its contents are the guest's memory).
fn create_memory_file(path: &Path, bytes: u64) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("creating", path, e))?;
    file.set_len(bytes)
        .map_err(|e| Error::io("sizing", path, e))?;
    file.sync_all().map_err(|e| Error::io("syncing", path, e))
}

/// Creates an empty file of mode 0600 (or leaves an existing one as it is).
pub(crate) fn create_private(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("creating", path, e))
}

/// Copies a guest memory file, keeping it sparse: only its data extents (`SEEK_DATA` /
/// `SEEK_HOLE`) are copied, so a 4 GiB guest that touched 100 MiB costs 100 MiB.
pub(crate) fn copy_memory(from: &Path, to: &Path) -> Result<()> {
    use rustix::fs::SeekFrom;
    use std::os::unix::fs::FileExt;
    let source = File::open(from).map_err(|e| Error::io("opening", from, e))?;
    let len = source
        .metadata()
        .map_err(|e| Error::io("reading the size of", from, e))?
        .len();
    let target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(|e| Error::io("creating", to, e))?;
    target
        .set_len(len)
        .map_err(|e| Error::io("sizing", to, e))?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < len {
        let data = match rustix::fs::seek(&source, SeekFrom::Data(offset)) {
            Ok(data) => data,
            Err(rustix::io::Errno::NXIO) => break, // no data after `offset`
            Err(e) => return Err(Error::io("seeking data in", from, e.into())),
        };
        let hole = rustix::fs::seek(&source, SeekFrom::Hole(data))
            .map_err(|e| Error::io("seeking a hole in", from, e.into()))?
            .min(len);
        let mut at = data;
        while at < hole {
            let chunk = (hole - at).min(buffer.len() as u64) as usize;
            source
                .read_exact_at(&mut buffer[..chunk], at)
                .map_err(|e| Error::io("reading", from, e))?;
            target
                .write_all_at(&buffer[..chunk], at)
                .map_err(|e| Error::io("writing", to, e))?;
            at += chunk as u64;
        }
        offset = hole;
    }
    target.sync_all().map_err(|e| Error::io("syncing", to, e))
}

fn copy_file(from: &Path, to: &Path) -> Result<()> {
    let mut source = File::open(from).map_err(|e| Error::io("opening", from, e))?;
    let mut target = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(|e| Error::io("creating", to, e))?;
    std::io::copy(&mut source, &mut target).map_err(|e| Error::io("copying into", to, e))?;
    target.sync_all().map_err(|e| Error::io("syncing", to, e))
}

/// Writes `value` as JSON to `path` durably and atomically: a temporary file, synced, renamed
/// over `path`, and the directory synced.
pub(crate) fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::Config(format!("cannot encode {}: {e}", path.display())))?;
    text.push(b'\n');
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| Error::io("creating", &tmp, e))?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io("writing", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| Error::io("renaming into place", path, e))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let file = File::open(path).map_err(|e| Error::io("opening", path, e))?;
    let mut text = Vec::new();
    file.take(limits::JSON_FILE_BYTES_MAX)
        .read_to_end(&mut text)
        .map_err(|e| Error::io("reading", path, e))?;
    serde_json::from_slice(&text)
        .map_err(|e| Error::Config(format!("{} is damaged: {e}", path.display())))
}

/// fsync(2) of a directory, so that renames and creations in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("syncing the directory", dir, e))
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::example;
    use std::os::unix::fs::{FileExt, PermissionsExt};

    fn registry() -> (tempfile::TempDir, Registry, VmDir) {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(dir.path().join("vms"));
        let kernel = dir.path().join("vmlinuz");
        let initrd = dir.path().join("initrd.gz");
        fs::write(&kernel, b"kernel").unwrap();
        fs::write(&initrd, b"initrd").unwrap();
        let mut config = example();
        config.ram_bytes = 16 << 20;
        let vm = registry
            .create(config, Some(&kernel), Some(&initrd))
            .unwrap();
        (dir, registry, vm)
    }

    /// Writes a state as a fixation would, for the VM's current epoch.
    fn fake_fixation(vm: &VmDir, epoch: u64) {
        let stream = b"QEVM fake stream".to_vec();
        let ram = File::open(vm.file("ram")).unwrap();
        let trailer = Trailer {
            epoch,
            stream_len: stream.len() as u64,
            ram_bytes: vm.config().ram_bytes,
            stream_crc: crc32c::crc32c(&stream),
            ram: sample_ram(&ram, vm.config().ram_bytes).unwrap(),
        };
        let mut bytes = stream;
        bytes.extend_from_slice(&trailer.encode());
        fs::write(vm.file("state"), bytes).unwrap();
    }

    fn set_epoch(vm: &VmDir, epoch: u64) {
        vm.session()
            .unwrap()
            .update(vm.name(), |_| {
                Ok(Status {
                    epoch,
                    lifecycle: Lifecycle::Started,
                    started: "test".into(),
                    started_unix_s: 0,
                })
            })
            .unwrap();
    }

    #[test]
    fn create_open_list_delete() {
        let (_dir, registry, vm) = registry();
        let mode = |name: &str| fs::metadata(vm.file(name)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("ram"), 0o600);
        assert_eq!(mode("serial.log"), 0o600);
        assert_eq!(
            fs::metadata(registry.pool_path())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        assert!(
            !vm.file("config.json").exists() && !vm.file("status.json").exists(),
            "the records are in the pool, not in the directory"
        );
        let status = vm.status().unwrap();
        assert_eq!(
            (status.epoch, status.lifecycle, status.started.as_str()),
            (0, Lifecycle::Created, "created")
        );
        assert_eq!(
            fs::metadata(vm.path()).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(fs::metadata(vm.file("ram")).unwrap().len(), 16 << 20);
        assert_eq!(fs::read(vm.file("kernel")).unwrap(), b"kernel");
        let again = registry.create(
            vm.config().clone(),
            Some(&vm.file("kernel")),
            Some(&vm.file("initrd")),
        );
        assert!(matches!(again, Err(Error::Config(text)) if text.contains("exists already")));
        assert_eq!(registry.open("guest-1").unwrap().config(), vm.config());
        assert!(matches!(
            registry.open("other"),
            Err(Error::NoSuchVm { .. })
        ));
        let list = registry.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(
            (list[0].state, list[0].detail.as_str()),
            (VmState::NeedsColdBoot, "never booted")
        );
        registry.delete("guest-1").unwrap();
        assert!(registry.list().unwrap().is_empty());
    }

    #[test]
    fn one_lock_holder_and_running_state() {
        let (_dir, registry, vm) = registry();
        let lock = vm.lock().unwrap();
        assert!(vm.is_running().unwrap());
        match vm.lock() {
            Err(Error::Running { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("a second lock was granted: {other:?}"),
        }
        // This test process is no `mnemo vm` of this VM: its pid is not signalled.
        assert_eq!(vm.hypervisor_pid(), None);
        assert!(matches!(
            registry.delete("guest-1"),
            Err(Error::Running { .. })
        ));
        assert_eq!(registry.list().unwrap()[0].state, VmState::Running);
        drop(lock);
        assert!(!vm.is_running().unwrap());
        assert_eq!(vm.holder(), None, "the pid file goes with the lock");
    }

    #[test]
    fn a_state_is_resumable_only_in_its_epoch_and_with_its_ram() {
        let (_dir, registry, vm) = registry();
        let ram = OpenOptions::new().write(true).open(vm.file("ram")).unwrap();
        ram.write_all_at(&[7u8; 8192], 0).unwrap();
        set_epoch(&vm, 3);
        fake_fixation(&vm, 3);
        let status = vm.status().unwrap();
        assert!(
            matches!(vm.check_state(&status).unwrap(), StateCheck::Resumable(t) if t.epoch == 3)
        );
        assert_eq!(registry.list().unwrap()[0].state, VmState::Fixed);

        // The VM started again (its epoch rose): the state is stale.
        set_epoch(&vm, 4);
        let stale = vm.check_state(&vm.status().unwrap()).unwrap();
        assert!(
            matches!(&stale, StateCheck::Unusable(why) if why.contains("at most once")),
            "{stale:?}"
        );
        assert_eq!(registry.list().unwrap()[0].state, VmState::NeedsColdBoot);

        // Zeroed RAM under a state of the current epoch.
        set_epoch(&vm, 3);
        ram.write_all_at(&[0u8; 8192], 0).unwrap();
        let zeroed = vm.check_state(&vm.status().unwrap()).unwrap();
        assert!(
            matches!(&zeroed, StateCheck::Unusable(why) if why.contains("zeroed")),
            "{zeroed:?}"
        );

        // A torn state (trailer cut off).
        ram.write_all_at(&[7u8; 8192], 0).unwrap();
        let bytes = fs::read(vm.file("state")).unwrap();
        fs::write(vm.file("state"), &bytes[..bytes.len() - 10]).unwrap();
        assert!(matches!(
            vm.check_state(&vm.status().unwrap()).unwrap(),
            StateCheck::Unusable(_)
        ));
        // A flipped byte in the stream.
        let mut flipped = bytes.clone();
        flipped[3] ^= 1;
        fs::write(vm.file("state"), &flipped).unwrap();
        let damaged = vm.check_state(&vm.status().unwrap()).unwrap();
        assert!(
            matches!(&damaged, StateCheck::Unusable(why) if why.contains("damaged")),
            "{damaged:?}"
        );
        fs::write(vm.file("state"), &bytes).unwrap();
        assert!(matches!(
            vm.check_state(&vm.status().unwrap()).unwrap(),
            StateCheck::Resumable(_)
        ));
    }

    #[test]
    fn snapshot_copies_a_fixed_vm() {
        let (_dir, registry, vm) = registry();
        let ram = OpenOptions::new().write(true).open(vm.file("ram")).unwrap();
        ram.write_all_at(b"guest memory", 1 << 20).unwrap();
        set_epoch(&vm, 1);
        fake_fixation(&vm, 1);
        let copy = registry.snapshot("guest-1", "guest-1-copy").unwrap();
        assert_eq!(copy.config().name, "guest-1-copy");
        let list = registry.list().unwrap();
        assert_eq!(
            list.iter().map(|s| s.state).collect::<Vec<_>>(),
            [VmState::Fixed, VmState::Fixed]
        );
        assert!(
            registry.snapshot("guest-1", "guest-1-copy").is_err(),
            "the name is taken"
        );
    }

    #[test]
    fn memory_copies_stay_sparse() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        let file = File::create(&from).unwrap();
        file.set_len(64 << 20).unwrap();
        file.write_all_at(b"start", 0).unwrap();
        file.write_all_at(&[9u8; 3 << 20], 20 << 20).unwrap();
        file.write_all_at(b"end", (64 << 20) - 3).unwrap();
        copy_memory(&from, &to).unwrap();
        assert_eq!(fs::read(&from).unwrap(), fs::read(&to).unwrap());
        let blocks = |p: &Path| fs::metadata(p).unwrap().blocks() * 512;
        assert!(
            blocks(&to) < 16 << 20,
            "the copy filled its holes: {} bytes",
            blocks(&to)
        );
        assert!(
            copy_memory(&from, &to).is_err(),
            "an existing file is never overwritten"
        );
    }

    #[test]
    fn epochs_rise_by_one_and_only_from_the_status_judged() {
        let (_dir, registry, vm) = registry();
        let created = vm.status().unwrap();
        let first = vm.begin_epoch(&created, "cold boot".into()).unwrap();
        assert_eq!((first.epoch, first.lifecycle), (1, Lifecycle::Started));
        // A caller that judged the VM by epoch 0 must not start it again.
        let stale = vm.begin_epoch(&created, "cold boot".into());
        assert!(
            matches!(&stale, Err(Error::Config(why)) if why.contains("moved from 0 to 1")),
            "{stale:?}"
        );
        vm.record_fixed(1).unwrap();
        assert_eq!(vm.status().unwrap().lifecycle, Lifecycle::Fixed);
        // A fixation of an older epoch records nothing.
        let second = vm.begin_epoch(&vm.status().unwrap(), "recovery from epoch 1".into());
        assert_eq!(second.unwrap().epoch, 2);
        vm.record_fixed(1).unwrap();
        let status = registry.open("guest-1").unwrap().status().unwrap();
        assert_eq!(
            (status.epoch, status.lifecycle, status.started.as_str()),
            (2, Lifecycle::Started, "recovery from epoch 1")
        );
        // Without a state, the list says which epoch ended without a fixation.
        let list = registry.list().unwrap();
        assert_eq!(
            list[0].detail,
            "no completed fixation of epoch 2 (recovery from epoch 1)"
        );
        assert_eq!(list[0].lifecycle, Some(Lifecycle::Started));
    }

    /// Flips one byte of the record of `name` in the pool file, and returns where.
    fn damage_record(registry: &Registry, name: &str, at: u64) -> u64 {
        let offset = registry.record_offset(name).unwrap().unwrap();
        let pool = OpenOptions::new()
            .read(true)
            .write(true)
            .open(registry.pool_path())
            .unwrap();
        let mut byte = [0u8];
        pool.read_exact_at(&mut byte, offset + at).unwrap();
        pool.write_all_at(&[byte[0] ^ 0x10], offset + at).unwrap();
        offset
    }

    #[test]
    fn a_damaged_record_is_a_clear_error_and_hides_no_other_vm() {
        let (dir, registry, vm) = registry();
        let other = registry
            .create(
                VmConfig {
                    name: "guest-2".into(),
                    ..vm.config().clone()
                },
                Some(&dir.path().join("vmlinuz")),
                Some(&dir.path().join("initrd.gz")),
            )
            .unwrap();
        // The epoch's bytes (offset 16): the record's checksum no longer matches.
        damage_record(&registry, "guest-1", 16);
        let opened = registry.open("guest-1");
        match &opened {
            Err(e @ Error::Registry { path, detail }) => {
                assert_eq!(path, &registry.pool_path());
                assert!(detail.contains("\"guest-1\" fails its checksum"), "{e}");
                assert!(e.to_string().contains("registry.pool"), "{e}");
            }
            other => panic!("a damaged record was read: {other:?}"),
        }
        assert!(matches!(vm.status(), Err(Error::Registry { .. })));
        let list = registry.list().unwrap();
        assert_eq!(list.len(), 2, "{list:?}");
        assert!(list[0].detail.contains("fails its checksum"), "{list:?}");
        assert_eq!(list[1].name, "guest-2");
        assert_eq!(list[1].detail, "never booted");
        assert!(other.status().is_ok());
        // The damaged VM can still be deleted, and the other is untouched.
        registry.delete("guest-1").unwrap();
        assert_eq!(registry.list().unwrap().len(), 1);
        assert_eq!(registry.open("guest-2").unwrap().config(), other.config());
    }

    #[test]
    fn a_damaged_configuration_or_pool_is_a_clear_error() {
        let (_dir, registry, _vm) = registry();
        // The configuration pointer (offset 32) moved by 16 bytes: the record's checksum
        // catches it.
        damage_record(&registry, "guest-1", 32);
        let e = registry.open("guest-1").unwrap_err();
        assert!(e.to_string().contains("fails its checksum"), "{e}");
        damage_record(&registry, "guest-1", 32);
        assert!(registry.open("guest-1").is_ok(), "flipped back");

        // Both copies of the pool's header overwritten: open fails, and says where.
        let pool = OpenOptions::new()
            .write(true)
            .open(registry.pool_path())
            .unwrap();
        pool.write_all_at(&[0xA5; 8192], 0).unwrap();
        for e in [
            registry.open("guest-1").unwrap_err(),
            registry.list().unwrap_err(),
        ] {
            let text = e.to_string();
            assert!(
                matches!(e, Error::Registry { .. }) && text.contains("registry.pool"),
                "{text}"
            );
            assert!(text.contains("cannot open it"), "{text}");
        }
        // A truncated pool.
        pool.set_len(100).unwrap();
        let e = registry.open("guest-1").unwrap_err();
        assert!(matches!(e, Error::Registry { .. }), "{e}");
    }

    #[test]
    fn directories_without_a_record_are_refused_clearly() {
        let (_dir, registry, vm) = registry();
        // A VM as an earlier mnemo made it: config.json and status.json in its directory.
        let legacy = registry.root().join("old-vm");
        fs::create_dir(&legacy).unwrap();
        fs::write(legacy.join("config.json"), b"{}").unwrap();
        fs::write(legacy.join("status.json"), b"{}").unwrap();
        let e = registry.open("old-vm").unwrap_err().to_string();
        assert!(
            e.contains("earlier mnemo") && e.contains("does not migrate"),
            "{e}"
        );
        let again = registry.create(
            VmConfig {
                name: "old-vm".into(),
                ..vm.config().clone()
            },
            Some(&vm.file("kernel")),
            Some(&vm.file("initrd")),
        );
        assert!(
            matches!(&again, Err(Error::Config(e)) if e.contains("earlier mnemo")),
            "{again:?}"
        );
        assert!(legacy.join("config.json").exists(), "nothing was removed");
        // What an interrupted create leaves: a directory without a record.
        fs::create_dir(registry.root().join("half")).unwrap();
        let e = registry.open("half").unwrap_err().to_string();
        assert!(e.contains("was interrupted"), "{e}");
        let list = registry.list().unwrap();
        let names: Vec<_> = list.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["guest-1", "half", "old-vm"]);
        assert!(
            list[1].detail.starts_with("not in the registry"),
            "{list:?}"
        );
        assert!(list[2].detail.contains("earlier mnemo"), "{list:?}");
        assert_eq!(list[2].lifecycle, None);
    }

    #[test]
    fn a_failed_create_leaves_nothing() {
        let (dir, registry, vm) = registry();
        let missing = dir.path().join("no-such-kernel");
        let failed = registry.create(
            VmConfig {
                name: "guest-2".into(),
                ..vm.config().clone()
            },
            Some(&missing),
            Some(&vm.file("initrd")),
        );
        assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
        assert!(!registry.root().join("guest-2").exists());
        assert!(!registry.exists("guest-2").unwrap());
        assert_eq!(registry.list().unwrap().len(), 1);
    }

    #[test]
    fn no_registry_means_no_vms() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::new(dir.path().join("vms"));
        assert!(registry.list().unwrap().is_empty());
        assert!(!registry.exists("guest-1").unwrap());
        assert!(matches!(
            registry.open("guest-1"),
            Err(Error::NoSuchVm { .. })
        ));
        assert!(
            !registry.root().exists(),
            "reading creates neither the directory nor the pool"
        );
    }
}
