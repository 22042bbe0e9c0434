//! The locks and threads of the write-ahead policy's group commit and of its syncer and
//! checkpoint threads (`wal.rs`), from std or, under `--cfg mnemo_shuttle`, from the
//! shuttle crate (as mnemo-heap's `src/sync.rs` does for the heap's concurrent paths).
//!
//! Under shuttle every thread of a test is a task of one controlled, seeded scheduler that
//! switches only at its own synchronization calls: a std lock or condition variable would
//! block the whole test, and a std thread would run outside the schedule. The cfg is set
//! only by `scripts/test-shuttle.sh` (its own target directory); every other build, product
//! or test, compiles the std types and does not compile shuttle at all (a
//! `cfg(mnemo_shuttle)` target dependency). The rest of this crate keeps std's locks: a
//! task may wait in the policy while it holds one (the pool's header lock over a header sync
//! point, the gmsync journal's over its sync point), but no thread of the policy takes them,
//! so that wait never blocks the scheduler's one OS thread. `docs/design/durability-sites.md`,
//! "Concurrency: the kv server's group commit".

#[cfg(not(mnemo_shuttle))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(mnemo_shuttle))]
pub(crate) use std::thread::{Builder, JoinHandle};

#[cfg(mnemo_shuttle)]
pub(crate) use shuttle::sync::{Condvar, Mutex, MutexGuard};
#[cfg(mnemo_shuttle)]
pub(crate) use shuttle::thread::{Builder, JoinHandle};

/// A blocking call to the file system is about to run (a write, an `fdatasync`): other
/// threads run meanwhile. Under shuttle a scheduling point (the simulated file's calls return
/// at once and take no lock of the scheduler's, so without it no other task could ever run
/// while a group's records are being written and synced); nothing otherwise.
#[inline(always)]
pub(crate) fn blocking_io() {
    #[cfg(mnemo_shuttle)]
    shuttle::thread::yield_now();
}
