//! The locks, atomics and thread-locals of the heap's concurrent paths (lanes, allocator
//! arenas, free limbo), from std or, under `--cfg mnemo_shuttle`, from the shuttle crate.
//!
//! Shuttle runs every thread of a test as a task on one OS thread and switches between them
//! only at its own synchronization calls, so the heap's real code runs under a controlled,
//! seeded scheduler (random or PCT) there: a std lock would block the whole test, a std
//! thread-local would be shared by every task, and a spin loop on `std::thread::yield_now`
//! would never let another task run. The cfg is set only by `scripts/test-shuttle.sh` (its
//! own target directory); every other build, product or test, compiles the std types and
//! does not compile shuttle at all (a `cfg(mnemo_shuttle)` target dependency). Global id
//! counters and atomics over pool memory stay std's: no schedule depends on them.
//! `docs/design/durability-sites.md`, "Concurrency".

#[cfg(not(mnemo_shuttle))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(not(mnemo_shuttle))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(mnemo_shuttle))]
pub(crate) use std::thread::yield_now;
#[cfg(not(mnemo_shuttle))]
pub(crate) use std::thread_local;

#[cfg(mnemo_shuttle)]
pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
#[cfg(mnemo_shuttle)]
pub(crate) use shuttle::sync::{Mutex, MutexGuard};
#[cfg(mnemo_shuttle)]
pub(crate) use shuttle::thread::yield_now;
#[cfg(mnemo_shuttle)]
pub(crate) use shuttle::thread_local;

/// std's `LocalKey<RefCell<T>>::with_borrow{,_mut}`, which shuttle's `LocalKey` lacks.
#[cfg(mnemo_shuttle)]
pub(crate) trait LocalRefCell<T> {
    fn with_borrow<R>(&'static self, f: impl FnOnce(&T) -> R) -> R;
    fn with_borrow_mut<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> R;
}

#[cfg(mnemo_shuttle)]
impl<T: 'static> LocalRefCell<T> for shuttle::thread::LocalKey<std::cell::RefCell<T>> {
    fn with_borrow<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        self.with(|c| f(&c.borrow()))
    }
    fn with_borrow_mut<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> R {
        self.with(|c| f(&mut c.borrow_mut()))
    }
}
