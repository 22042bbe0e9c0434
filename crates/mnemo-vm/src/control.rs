//! Requests to a running hypervisor from other processes. The hypervisor owns QEMU's QMP
//! connection alone, so other commands talk to the hypervisor, by signal:
//!
//! * **fix** (`mnemo vm fix`): the power-failure signal ([`crate::power_failure_signal`]);
//!   the answer is the released lock and the saved state.
//! * **snapshot** (`mnemo vm snapshot` of a running VM): the request file
//!   `snapshot.request` (the copy's name), then SIGUSR1; the hypervisor answers in
//!   `snapshot.reply` (JSON). Requests are serialized by `flock` on `snapshot.lock`.
//!
//! A signal is sent only to the pid in `hypervisor.pid` whose command line names `vm` and
//! the VM ([`VmDir::hypervisor_pid`]).

use std::fs::{self, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::validate_name;
use crate::error::{Error, Result};
use crate::hypervisor::Hypervisor;
use crate::registry::{read_json, write_json, VmDir};

/// Longest wait for a snapshot's reply: the guest's RAM is copied while it is paused (about
/// a second per GiB touched on tmpfs).
pub const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(300);

/// The hypervisor's answer to a snapshot request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotReply {
    pub copy: String,
    /// Empty on success.
    pub error: String,
    pub state_bytes: u64,
    /// How long the guest was paused, in microseconds.
    pub pause_us: u64,
}

/// Asks the hypervisor of the running `vm` for a snapshot named `copy`, and waits for it.
pub fn request_snapshot(vm: &VmDir, copy: &str) -> Result<SnapshotReply> {
    validate_name(copy)?;
    let lock_path = vm.file("snapshot.lock");
    let lock = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| Error::io("opening", &lock_path, e))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io("locking", &lock_path, e.into()))?;
    let reply_path = vm.file("snapshot.reply");
    remove(&reply_path)?;
    write_json(&vm.file("snapshot.request"), &copy)?;
    let pid = vm
        .hypervisor_pid()
        .ok_or_else(|| Error::NotRunning(vm.name().to_string()))?;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).ok_or_else(|| Error::NotRunning(pid.to_string()))?,
        rustix::process::Signal::USR1,
    )
    .map_err(|e| Error::io("signalling the hypervisor of", vm.path(), e.into()))?;
    let started = Instant::now();
    loop {
        if reply_path.exists() {
            let reply: SnapshotReply = read_json(&reply_path)?;
            remove(&reply_path)?;
            return Ok(reply);
        }
        if !vm.is_running()? {
            return Err(Error::NotRunning(vm.name().to_string()));
        }
        if started.elapsed() > SNAPSHOT_TIMEOUT {
            let _ = remove(&vm.file("snapshot.request"));
            return Err(Error::Timeout {
                what: format!("waiting for the snapshot of {}", vm.name()),
                seconds: SNAPSHOT_TIMEOUT.as_secs_f64(),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The hypervisor's side, on SIGUSR1: takes the pending request (if any), makes the snapshot
/// and writes the reply. Returns the reply, or `None` when no request was pending.
pub fn serve_snapshot(hypervisor: &mut Hypervisor) -> Result<Option<SnapshotReply>> {
    let vm = hypervisor.vm().clone();
    let request = vm.file("snapshot.request");
    if !request.exists() {
        return Ok(None);
    }
    let copy: Result<String> = read_json(&request);
    remove(&request)?;
    let made = copy.and_then(|copy| hypervisor.snapshot(&copy).map(|s| (copy, s)));
    let reply = match made {
        Ok((copy, snapshot)) => SnapshotReply {
            copy,
            error: String::new(),
            state_bytes: snapshot.state_bytes,
            pause_us: u64::try_from(snapshot.pause.as_micros()).unwrap_or(u64::MAX),
        },
        Err(e) => SnapshotReply {
            copy: String::new(),
            error: e.to_string(),
            state_bytes: 0,
            pause_us: 0,
        },
    };
    write_json(&vm.file("snapshot.reply"), &reply)?;
    Ok(Some(reply))
}

fn remove(path: &std::path::Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", path, e)),
    }
}
