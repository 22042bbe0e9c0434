//! Persistent virtual machines, after Temporality (Sartakov et al.): a guest whose RAM lives
//! in persistent memory survives a power failure without rebooting. On the failure signal the
//! hypervisor *fixes* the VM: it stops it and saves only its *virtual environment* (CPU and
//! device state, a few hundred KiB whatever the RAM size), since RAM is already persistent.
//! *Recovery* starts an empty VM with the same hardware on the same RAM, loads the virtual
//! environment, and the guest continues where it stopped.
//!
//! Built on stock QEMU (7.2 and later), through its machine protocol:
//!
//! ```text
//!  boot      qemu ARGV                          (guest RAM: memory-backend-file, share=on)
//!            QMP migrate-set-capabilities x-ignore-shared   (set early, off the outage path)
//!  fixation  QMP stop; migrate "exec:cat > state.tmp"        (RAM skipped: it is shared)
//!            + trailer (epoch, checksums, RAM sample); fsync; rename -> state; fsync dir;
//!            QMP quit
//!  recovery  check state (trailer, checksums, epoch, RAM sample)
//!            qemu ARGV -S -incoming defer        (ARGV identical, byte for byte)
//!            epoch += 1 (one registry transaction), state -> state.used   <- consumed here
//!            QMP migrate-incoming "exec:head -c LEN state.used"; wait "paused"; cont
//! ```
//!
//! The one invariant of exactly-once resumption: **a state is resumable only if its epoch is
//! the VM's current epoch, and every start of the VM (cold boot or recovery) raises the epoch
//! durably before the guest runs.** So a state is resumed at most once, and a VM that died
//! without a completed fixation has no resumable state: it cold-boots, and says so.
//!
//! * [`qmp`]: the QMP client (JSON lines over a Unix socket);
//! * [`config`]: a VM's saved hardware, and [`command`]: the QEMU command line built from it;
//! * [`state`]: the saved state's trailer and the RAM sample, sans I/O (never panics);
//! * [`registry`]: the VMs, their status (running / fixed / needs cold boot), locks; their
//!   durable records (configuration, epoch, lifecycle) are in a mnemo pool ([`records`]),
//!   changed by heap transactions;
//! * [`hypervisor`]: one running VM owned through QMP: boot, fix, recover, snapshot;
//! * [`control`]: requests to a running hypervisor from other processes (by signal).
//!
//! The design, the state machine and the file formats: `docs/design/persistent-vms.md`.

pub mod command;
pub mod config;
pub mod control;
pub mod error;
pub mod hypervisor;
pub mod limits;
pub mod qmp;
pub mod records;
pub mod registry;
pub mod state;

pub use config::{Boot, VmConfig};
pub use error::{Error, Result};
pub use hypervisor::{ColdBootReason, Fixation, Hypervisor, Recovery, Snapshot, Start, StartMode};
pub use registry::{Registry, VmDir, VmState, VmSummary};

/// The power-failure signal: real-time signal 44, as in the paper, which is `SIGRTMIN + 10`
/// with glibc (glibc keeps the first two real-time signals for itself, so `SIGRTMIN` is 34).
pub fn power_failure_signal() -> i32 {
    libc::SIGRTMIN() + 10
}

/// Send the power-failure signal to the hypervisor process `pid`.
pub fn send_power_failure(pid: i32) -> std::io::Result<()> {
    if pid <= 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        ));
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is positive,
    // so it names one process, never a process group.
    let rc = unsafe { libc::kill(pid, power_failure_signal()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
