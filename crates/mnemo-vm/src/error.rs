//! The errors of the persistent-VM layer. Every message says what happened and, where there
//! is one, what to do.

use std::path::PathBuf;

/// A result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// File or socket trouble, with what was being done to which path.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A VM name that cannot be a directory name.
    #[error("{0:?} is not a VM name: use 1 to 63 letters, digits, '-', '_' or '.', not starting with '.'")]
    InvalidName(String),
    /// A configuration that cannot describe a VM, or a request that does not fit the saved one.
    #[error("{0}")]
    Config(String),
    /// The registry pool cannot be opened, is damaged, or refused a change.
    #[error("VM registry {}: {detail}", path.display())]
    Registry { path: PathBuf, detail: String },
    /// No VM of that name in the registry.
    #[error("no VM named {name:?} in {}", dir.display())]
    NoSuchVm { name: String, dir: PathBuf },
    /// Another hypervisor owns the VM (its lock is held): two QEMU processes must never share
    /// one RAM file.
    #[error("VM {name:?} is running (hypervisor pid {pid}); stop it first (mnemo vm fix {name})")]
    Running { name: String, pid: String },
    /// The VM has no hypervisor.
    #[error("VM {0:?} is not running")]
    NotRunning(String),
    /// The QEMU program could not be run.
    #[error("cannot run {program}: {source} (apt-get install qemu-system-x86, or set MNEMO_QEMU)")]
    NoQemu {
        program: String,
        source: std::io::Error,
    },
    /// QEMU exited (or never started) where it should be running.
    #[error("QEMU exited ({status}) {when}; its output:\n{output}")]
    QemuExited {
        when: &'static str,
        status: String,
        output: String,
    },
    /// The QMP peer broke the protocol (a line that is not JSON, a reply of the wrong shape).
    #[error("QMP protocol: {0}")]
    Protocol(String),
    /// QEMU refused a QMP command.
    #[error("QEMU refused {command}: {class}: {desc}")]
    Qmp {
        command: String,
        class: String,
        desc: String,
    },
    /// Something did not happen in time.
    #[error("timed out after {seconds:.1} s {what}")]
    Timeout { what: String, seconds: f64 },
    /// A migration (fixation or recovery) ended in failure.
    #[error("{what} failed: {detail}")]
    Migration { what: &'static str, detail: String },
    /// The saved state cannot be resumed; nothing was consumed. The text says why.
    #[error("VM {name:?} cannot be recovered: {reason}")]
    Unrecoverable { name: String, reason: String },
    /// Recovery consumed the state and then failed: the VM needs a cold boot.
    #[error(
        "VM {name:?}: recovery failed, the VM needs a cold boot (mnemo vm run {name}): {detail}"
    )]
    RecoveryFailed { name: String, detail: String },
}

impl Error {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
