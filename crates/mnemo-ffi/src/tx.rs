//! Transactions begun from C: the heap's explicit transaction ([`Tx`]), kept in this thread's
//! state between calls, and a stack of the levels C has begun on it.
//!
//! The outermost `mnemo_tx_begin` on a pool begins a [`Tx`] (owning a handle of the heap, so
//! it outlives the call) and keeps it in its level; a nested begin on the same pool adds a
//! level that works on the same transaction (flattened: only the outermost level's end
//! commits or aborts it). Levels end in LIFO order per pool. A failing call dooms the whole
//! transaction (PMDK's rule): [`Tx::doom`], so the outermost commit aborts and reports
//! [`code::EABORTED`]; so does an inner level's abort. Heap calls that C makes on the pool
//! meanwhile (`mnemo_pmalloc`, `mnemo_nvalloc`...) join through [`joined`]; everything else
//! calls the heap directly, which never joins.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex};

use mnemo_heap::Tx;
use mnemo_pmem::ByteRange;

use crate::error::{code, Failure, Result};
use crate::handle::{self, lock, Kind, PoolEntry};

/// One open level of a thread's transaction on one pool.
struct Level {
    handle: usize,
    pool: Arc<PoolEntry>,
    /// The transaction, on the outermost level of its pool only.
    tx: Option<Tx<'static>>,
    /// Ranges written with `mnemo_tx_write` (kept on the outermost level).
    written: Vec<ByteRange>,
    /// Whether the transaction certainly produces a redo record.
    nonempty: bool,
}

impl Drop for Level {
    fn drop(&mut self) {
        // A level dropped with its transaction (the thread exits with it open) aborts it:
        // `Tx`'s own drop, after this.
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
    let tx = if open_on(pool.handle) {
        None
    } else {
        Some(pool.heap.begin_owned()?)
    };
    let handle = handle::new_handle(Kind::Tx);
    pool.open_txs.fetch_add(1, Ordering::AcqRel);
    lock(&LIVE).insert(handle);
    let level = Level {
        handle,
        pool,
        tx,
        written: Vec::new(),
        nonempty: false,
    };
    STACK.with_borrow_mut(|s| s.push(level));
    Ok(handle)
}

/// The transaction of `pool` among this thread's levels.
fn tx_of(levels: &[Level], pool: usize) -> Option<&Tx<'static>> {
    levels
        .iter()
        .find(|l| l.pool.handle == pool)
        .and_then(|l| l.tx.as_ref())
}

/// Run `f` on the transaction of level `handle` of this thread. On failure the transaction
/// is doomed.
pub fn with<R>(handle: usize, f: impl FnOnce(&Tx<'static>) -> Result<R>) -> Result<R> {
    // `f` runs with the stack borrowed (shared): it may ask `open_on`, never begin or end.
    STACK.with_borrow(|s| {
        let level = s
            .iter()
            .find(|l| l.handle == handle)
            .ok_or_else(|| not_here(handle))?;
        let tx = tx_of(s, level.pool.handle)
            .ok_or_else(|| Failure::new(code::ECLOSED, "the transaction has ended"))?;
        let result = f(tx);
        if let Err(failure) = &result {
            tx.doom(&failure.message);
        }
        result
    })
}

/// Run `f` in this thread's transaction on `pool`, if it has one (the heap calls C makes
/// inside a transaction join it); `None` if it has none. A failure dooms the transaction.
pub fn joined<R>(pool: usize, f: impl FnOnce(&Tx<'static>) -> Result<R>) -> Option<Result<R>> {
    let result = STACK
        .try_with(|s| {
            let s = s.borrow();
            let tx = tx_of(&s, pool)?;
            let result = f(tx);
            if let Err(failure) = &result {
                tx.doom(&failure.message);
            }
            Some(result)
        })
        .ok()
        .flatten()?;
    if result.is_ok() {
        STACK.with_borrow_mut(|s| {
            if let Some(outer) = s.iter_mut().find(|l| l.pool.handle == pool) {
                outer.nonempty = true;
            }
        });
    }
    Some(result)
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
    let mut level = STACK.with_borrow_mut(|s| {
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
        let level = s.remove(i);
        if level.tx.is_none() {
            // An inner level: hand what it noted to the outermost one; an abort dooms it.
            if let Some(outer) = s.iter_mut().find(|l| l.pool.handle == pool) {
                outer.written.extend_from_slice(&level.written);
                outer.nonempty |= level.nonempty;
                if !commit {
                    if let Some(tx) = &outer.tx {
                        tx.doom("an inner level was aborted");
                    }
                }
            }
        }
        Ok(level)
    })?;
    let Some(tx) = level.tx.take() else {
        return Ok(());
    };
    if !commit {
        tx.abort();
        return Ok(());
    }
    tx.commit()?;
    if level.nonempty || !level.written.is_empty() {
        crate::sync::note_committed(&level.pool, &level.written);
    }
    Ok(())
}
