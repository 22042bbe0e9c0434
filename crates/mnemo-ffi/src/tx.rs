//! Transactions begun from C: a thread-local stack of open levels.
//!
//! The heap keeps a thread's transaction in its own thread-local state and flattens
//! nesting; each `mnemo_tx_begin` holds one level of it as a [`TxHandle`]. Levels end in
//! LIFO order per pool. A failing call dooms the whole transaction (PMDK's rule): the heap
//! poisons it and the outermost commit aborts and reports [`code::EABORTED`].

use std::cell::RefCell;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex};

use mnemo_heap::{Heap, TxHandle};
use mnemo_pmem::ByteRange;

use crate::error::{code, Failure, Result};
use crate::handle::{self, lock, Kind, PoolEntry};

/// One open level of a thread's transaction on one pool.
struct Level {
    handle: usize,
    pool: Arc<PoolEntry>,
    /// The heap level; `None` once ended. Borrows `*heap`.
    tx: Option<TxHandle<'static>>,
    /// A leaked box, freed in `Drop` after `tx` (see the SAFETY comments).
    heap: *mut Heap,
    /// Ranges written with `mnemo_tx_write` (kept on the outermost level).
    written: Vec<ByteRange>,
    /// Whether the transaction certainly produces a redo record.
    nonempty: bool,
}

impl Level {
    fn tx(&self) -> Result<&TxHandle<'static>> {
        self.tx
            .as_ref()
            .ok_or_else(|| Failure::new(code::ECLOSED, "the transaction has ended"))
    }
}

impl Drop for Level {
    fn drop(&mut self) {
        // Dropping an unended level aborts it (the thread exits with a transaction open).
        // The heap's own thread-local state may already be gone then: its panic is caught.
        if let Some(tx) = self.tx.take() {
            let _ = catch_unwind(AssertUnwindSafe(|| drop(tx)));
        }
        // SAFETY: `heap` came from `Box::into_raw` in `begin` and is freed only here, once;
        // the only borrow of it, `tx`, was dropped just above.
        drop(unsafe { Box::from_raw(self.heap) });
        self.pool.open_txs.fetch_sub(1, Ordering::AcqRel);
        lock(&LIVE).remove(&self.handle);
    }
}

thread_local! {
    static STACK: RefCell<Vec<Level>> = const { RefCell::new(Vec::new()) };
}

/// Handles of every open level of every thread (to tell "another thread's" from "ended").
static LIVE: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(Default::default);

fn not_here(handle: usize) -> Failure {
    if lock(&LIVE).contains(&handle) {
        Failure::new(
            code::ETXSTATE,
            "the transaction belongs to another thread; a transaction is used only by the thread that began it",
        )
    } else {
        handle::missing(handle, Kind::Tx)
    }
}

/// Whether this thread has a transaction open on `pool`.
pub fn open_on(pool: usize) -> bool {
    STACK
        .try_with(|s| s.borrow().iter().any(|l| l.pool.handle == pool))
        .unwrap_or(false)
}

/// The pool of this thread's open level `handle`.
pub fn pool_of(handle: usize) -> Result<Arc<PoolEntry>> {
    STACK
        .with_borrow(|s| {
            s.iter()
                .find(|l| l.handle == handle)
                .map(|l| l.pool.clone())
        })
        .ok_or_else(|| not_here(handle))
}

/// Begin a level on `pool`; returns its handle.
pub fn begin(pool: Arc<PoolEntry>) -> Result<usize> {
    let heap: &'static Heap = Box::leak(Box::new(pool.heap.clone()));
    let heap_ptr = heap as *const Heap as *mut Heap;
    let tx = match heap.begin() {
        Ok(tx) => tx,
        Err(e) => {
            // SAFETY: the box was leaked just above and nothing borrows it any more.
            drop(unsafe { Box::from_raw(heap_ptr) });
            return Err(e.into());
        }
    };
    let handle = handle::new_handle(Kind::Tx);
    pool.open_txs.fetch_add(1, Ordering::AcqRel);
    lock(&LIVE).insert(handle);
    let level = Level {
        handle,
        pool,
        tx: Some(tx),
        heap: heap_ptr,
        written: Vec::new(),
        nonempty: false,
    };
    STACK.with_borrow_mut(|s| s.push(level));
    Ok(handle)
}

/// Run `f` on the level `handle` of this thread. On failure the transaction is doomed.
pub fn with<R>(handle: usize, f: impl FnOnce(&TxHandle<'static>) -> Result<R>) -> Result<R> {
    let found = STACK.with_borrow(|s| {
        s.iter()
            .find(|l| l.handle == handle)
            .map(|l| (l.pool.heap.clone(), l.tx.is_some()))
    });
    let Some((heap, true)) = found else {
        return Err(not_here(handle));
    };
    // `f` runs with the stack borrowed: heap calls never re-enter this module.
    let result = STACK.with_borrow(|s| {
        let level = s
            .iter()
            .find(|l| l.handle == handle)
            .ok_or_else(|| not_here(handle))?;
        f(level.tx()?)
    });
    if result.is_err() {
        doom(&heap);
    }
    result
}

/// Doom the thread's transaction on `heap`: an inner level begun and aborted poisons it.
fn doom(heap: &Heap) {
    if let Ok(inner) = heap.begin() {
        inner.abort();
    }
}

/// Note that level `handle` wrote `range` (for [`handle::Replayable`]).
pub fn note_write(handle: usize, range: Option<ByteRange>) {
    STACK.with_borrow_mut(|s| {
        let Some(pool) = s.iter().find(|l| l.handle == handle).map(|l| l.pool.handle) else {
            return;
        };
        if let Some(outer) = s.iter_mut().find(|l| l.pool.handle == pool) {
            outer.nonempty = true;
            if let Some(r) = range {
                outer.written.push(r);
            }
        }
    });
}

/// End level `handle` (commit or abort). Only the innermost open level of its pool may end.
pub fn end(handle: usize, commit: bool) -> Result<()> {
    let level = STACK.with_borrow_mut(|s| {
        let i = s
            .iter()
            .position(|l| l.handle == handle)
            .ok_or_else(|| not_here(handle))?;
        let pool = s[i].pool.handle;
        if s[i + 1..].iter().any(|l| l.pool.handle == pool) {
            return Err(Failure::new(
                code::ETXSTATE,
                "a transaction level must end after the levels begun inside it (commit or abort the innermost first)",
            ));
        }
        Ok(s.remove(i))
    })?;
    finish(level, commit)
}

fn finish(mut level: Level, commit: bool) -> Result<()> {
    let outermost = !open_on(level.pool.handle);
    let tx = level
        .tx
        .take()
        .ok_or_else(|| Failure::new(code::ECLOSED, "the transaction has ended"))?;
    if !commit {
        tx.abort();
        return Ok(());
    }
    if !outermost {
        // Flattened: hand what this level noted to the enclosing one.
        let written = std::mem::take(&mut level.written);
        let nonempty = level.nonempty;
        let pool = level.pool.handle;
        STACK.with_borrow_mut(|s| {
            if let Some(outer) = s.iter_mut().find(|l| l.pool.handle == pool) {
                outer.written.extend(written);
                outer.nonempty |= nonempty;
            }
        });
        return tx.commit().map_err(Into::into);
    }
    let entry = level.pool.clone();
    tx.commit()?;
    if level.nonempty || !level.written.is_empty() {
        crate::sync::note_committed(&entry, &level.written);
    }
    Ok(())
}
