//! Durable transactions: a volatile write set, one redo record at commit.
//!
//! The state of a thread's transaction lives in a thread-local (one per heap), so a
//! transaction started inside another on the same heap joins it (nesting is flattened) and
//! the C ABI can begin and commit from separate calls. [`Tx`] is the handle user code gets.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use mnemo_pmem::{ByteRange, SyncKind, SyncPoint};

use crate::alloc::{Claim, MetaOp, PendingFree, Reservation};
use crate::error::{Error, Result};
use crate::heap::{Heap, Inner};
use crate::pptr::{PPtr, Persist};
use crate::redo;

type Hook = Box<dyn FnOnce(&Inner)>;

#[derive(Clone, Copy, Debug)]
enum Op {
    Data { offset: u64, pos: usize, len: usize },
    Meta(MetaOp),
}

/// Up to this many allocations, a transaction finds its fresh objects by a scan (no index to
/// build and drop per transaction); beyond, by `TxState::fresh_index`.
const FRESH_SCAN_MAX: usize = 16;

/// One thread's transaction on one heap.
#[derive(Default)]
pub(crate) struct TxState {
    heap_id: u64,
    token: u64,
    depth: u32,
    poisoned: Option<String>,
    ops: Vec<Op>,
    data: Vec<u8>,
    record_len: usize,
    allocs: Vec<Reservation>,
    /// The same allocations by offset (start -> size), once there are more than
    /// `FRESH_SCAN_MAX`, so `fresh` is a lookup, not a scan:
    /// a batch of the key-value server makes hundreds. They never overlap (frees take effect
    /// at commit, so no space is handed out twice within one transaction).
    fresh_index: BTreeMap<u64, u64>,
    frees: Vec<PendingFree>,
    direct: Vec<ByteRange>,
    data_lo: u64,
    data_hi: u64,
    on_commit: Vec<Hook>,
    on_abort: Vec<Hook>,
}

impl TxState {
    fn reset(&mut self, heap_id: u64) {
        self.heap_id = heap_id;
        self.token = 0; // assigned on first use (`Tx::token`): most transactions never ask
        self.depth = 1;
        self.poisoned = None;
        self.ops.clear();
        self.data.clear();
        self.record_len = redo::RECORD_HEADER;
        self.allocs.clear();
        if !self.fresh_index.is_empty() {
            self.fresh_index.clear();
        }
        self.frees.clear();
        self.direct.clear();
        self.data_lo = u64::MAX;
        self.data_hi = 0;
        if !self.on_commit.is_empty() || !self.on_abort.is_empty() {
            self.on_commit.clear();
            self.on_abort.clear();
        }
    }

    fn is_empty(&self) -> bool {
        self.ops.is_empty()
            && self.direct.is_empty()
            && self.allocs.is_empty()
            && self.frees.is_empty()
    }

    fn grow_record(&mut self, bytes: usize, capacity: u64) -> Result<()> {
        let next = self.record_len + bytes;
        if next as u64 > capacity {
            return Err(Error::TransactionTooLarge {
                needed: next as u64,
                capacity,
            });
        }
        self.record_len = next;
        Ok(())
    }

    fn fresh(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        if self.allocs.len() <= FRESH_SCAN_MAX {
            return self
                .allocs
                .iter()
                .any(|r| r.offset <= offset && end <= r.offset + r.size);
        }
        self.fresh_index
            .range(..=offset)
            .next_back()
            .is_some_and(|(&start, &size)| end <= start + size)
    }

    /// Note an allocation of this transaction (the index is built only past a few).
    fn add_fresh(&mut self, reservation: Reservation) {
        self.allocs.push(reservation);
        if self.allocs.len() > FRESH_SCAN_MAX {
            if self.fresh_index.is_empty() {
                self.fresh_index
                    .extend(self.allocs.iter().map(|r| (r.offset, r.size)));
            } else {
                self.fresh_index
                    .insert(reservation.offset, reservation.size);
            }
        }
    }

    /// Whether `offset` is the start of an allocation of this transaction.
    fn own(&self, offset: u64) -> bool {
        if self.allocs.len() <= FRESH_SCAN_MAX {
            return self.allocs.iter().any(|r| r.offset == offset);
        }
        self.fresh_index.contains_key(&offset)
    }
}

/// Transactional allocations up to this size come from the thread's cache ([`Cache`]).
const CACHED_SIZE_MAX: u64 = 1024;

/// One thread's allocation cache for one heap: per size class up to [`CACHED_SIZE_MAX`], a
/// [`Claim`] of units taken from a run under the arena's lock once per few dozen
/// allocations, handed out by transactions without a lock. Units never handed out go back
/// when the thread exits (or with the heap, whose volatile state they are part of).
struct Cache {
    heap_id: u64,
    heap: Weak<Inner>,
    claims: Vec<Option<Claim>>,
}

impl Drop for Cache {
    fn drop(&mut self) {
        if let Some(inner) = self.heap.upgrade() {
            for claim in self.claims.iter().flatten() {
                inner.alloc.unclaim(claim);
            }
        }
    }
}

/// A thread's transactions (one per heap it is in), spare states to reuse, and its
/// allocation caches. Boxed states, so taking one out or putting it back moves a pointer,
/// not the state.
#[derive(Default)]
#[allow(clippy::vec_box)] // moved in and out on every transaction: a pointer, not ~300 bytes
struct Txs {
    active: Vec<Box<TxState>>,
    spare: Vec<Box<TxState>>,
    caches: Vec<Cache>,
}

/// The size class of `size` if allocations of it come from the thread's cache.
fn cached_class(size: u64) -> Option<u8> {
    (size > 0 && size <= CACHED_SIZE_MAX)
        .then(|| crate::layout::class_for(size))
        .flatten()
}

/// A reservation of a cached size class from this thread's cache for `heap`, refilled by a
/// claim when empty.
fn cached_reservation(
    caches: &mut Vec<Cache>,
    heap: &Heap,
    class: u8,
) -> Result<(Reservation, MetaOp)> {
    let inner = heap.inner();
    let i = match caches.iter().position(|c| c.heap_id == inner.id) {
        Some(i) => i,
        None => {
            // Caches of heaps that are gone hold nothing worth keeping.
            caches.retain(|c| c.heap.strong_count() > 0);
            caches.push(Cache {
                heap_id: inner.id,
                heap: Arc::downgrade(heap.inner_arc()),
                claims: vec![None; crate::layout::class_count()],
            });
            caches.len() - 1
        }
    };
    let slot = &mut caches[i].claims[class as usize];
    if let Some(taken) = slot.as_mut().and_then(Claim::take) {
        return Ok(taken);
    }
    let publish = |chunk, class| inner.publish_run(chunk, class);
    let mut claim = inner.with_space(|| inner.alloc.claim(&inner.pool, class, &publish))?;
    let taken = claim
        .take()
        .ok_or_else(|| Error::Corrupt("an empty claim".into()))?;
    *slot = Some(claim);
    Ok(taken)
}

thread_local! {
    static TXS: RefCell<Txs> = RefCell::new(Txs::default());
}

fn with_state<R>(heap_id: u64, f: impl FnOnce(&mut TxState) -> Result<R>) -> Result<R> {
    TXS.with_borrow_mut(
        |txs| match txs.active.iter_mut().find(|s| s.heap_id == heap_id) {
            Some(state) => f(state),
            None => Err(Error::InvalidArgument(
                "no transaction is active on this thread".into(),
            )),
        },
    )
}

/// Leave one nesting level; returns the state if it was the outermost.
fn leave(heap_id: u64, poison: Option<&str>) -> Result<Option<Box<TxState>>> {
    TXS.with_borrow_mut(|txs| {
        let i = txs
            .active
            .iter()
            .position(|s| s.heap_id == heap_id)
            .ok_or_else(|| {
                Error::InvalidArgument("no transaction is active on this thread".into())
            })?;
        let state = &mut txs.active[i];
        state.depth -= 1;
        if let Some(reason) = poison {
            state.poisoned.get_or_insert_with(|| reason.to_string());
        }
        Ok((state.depth == 0).then(|| txs.active.swap_remove(i)))
    })
}

fn recycle(mut state: Box<TxState>) {
    // Hooks are rare: skip the (out-of-line) drop of empty vectors of boxed closures.
    if !state.on_commit.is_empty() || !state.on_abort.is_empty() {
        state.on_commit.clear();
        state.on_abort.clear();
    }
    TXS.with_borrow_mut(|txs| {
        if txs.spare.len() < 4 {
            txs.spare.push(state);
        }
    });
}

/// Start a transaction (or join the thread's current one on this heap).
pub(crate) fn begin(heap: &Heap) -> Result<()> {
    let inner = heap.inner();
    inner.check_open()?;
    TXS.with_borrow_mut(|txs| {
        if let Some(state) = txs.active.iter_mut().find(|s| s.heap_id == inner.id) {
            state.depth += 1;
        } else {
            let mut state = txs.spare.pop().unwrap_or_default();
            state.reset(inner.id);
            txs.active.push(state);
        }
    });
    Ok(())
}

/// End one nesting level; the outermost commits.
pub(crate) fn commit(heap: &Heap) -> Result<()> {
    let inner = heap.inner();
    let Some(state) = leave(inner.id, None)? else {
        return Ok(());
    };
    if let Some(reason) = state.poisoned.clone() {
        abort_state(inner, state);
        return Err(Error::Aborted(reason));
    }
    if let Err(e) = inner.check_open() {
        abort_state(inner, state);
        return Err(e);
    }
    if state.is_empty() {
        finish_commit(inner, state, None);
        return Ok(());
    }
    let mut checks = Vec::with_capacity(state.direct.len());
    for range in &state.direct {
        let mut bytes = vec![0u8; range.len as usize];
        if let Err(e) = inner.pool.read(range.offset, &mut bytes) {
            abort_state(inner, state);
            return Err(e.into());
        }
        checks.push((range.offset, range.len, crc32c::crc32c(&bytes)));
    }
    let fresh = state.direct.iter().fold((u64::MAX, 0), |(lo, hi), r| {
        (lo.min(r.offset), hi.max(r.end()))
    });
    let mut lane = inner.lanes.acquire();
    let buf = &mut lane.buf;
    redo::start(buf);
    let mut count = 0u32;
    for op in &state.ops {
        match *op {
            Op::Data { offset, pos, len } => {
                redo::push_data(buf, offset, &state.data[pos..pos + len])
            }
            Op::Meta(op) => push_meta(buf, op),
        }
        count += 1;
    }
    for &(offset, len, crc) in &checks {
        redo::push_check(buf, offset, len, crc);
        count += 1;
    }
    let allowed = |o: u64, l: u64| inner.allowed(o, l);
    let result = inner.lanes.commit(
        &inner.pool,
        &inner.geometry,
        &mut lane,
        &redo::Commit {
            count,
            extra: &state.direct,
            data: (state.data_lo, state.data_hi),
            fresh,
            allowed: &allowed,
        },
    );
    drop(lane);
    match result {
        Ok(seq) => {
            finish_commit(inner, state, Some(seq));
            Ok(())
        }
        Err(e @ Error::TransactionTooLarge { .. }) => {
            abort_state(inner, state);
            Err(e)
        }
        Err(e) => {
            // The record may be durable: keep the allocator's view as committed, its frees
            // never handed back (a leak until the next open, never a double allocation).
            finish_commit(inner, state, None);
            Err(e)
        }
    }
}

/// The commit of record `seq` (None: nothing committed, or the outcome is unknown).
fn finish_commit(inner: &Inner, mut state: Box<TxState>, seq: Option<u64>) {
    for r in &state.allocs {
        inner.alloc.commit_alloc(r);
    }
    match seq {
        // Freed space waits until record `seq` can no longer be replayed (and earlier frees
        // the horizon has passed go back, under the same lock).
        Some(seq) if !state.frees.is_empty() => inner.defer_frees(seq, &state.frees),
        _ => inner.release_frees(),
    }
    if !state.on_commit.is_empty() {
        for hook in std::mem::take(&mut state.on_commit) {
            hook(inner);
        }
    }
    recycle(state);
}

fn abort_state(inner: &Inner, mut state: Box<TxState>) {
    for f in state.frees.iter().rev() {
        inner.alloc.abort_free(f);
    }
    for r in state.allocs.iter().rev() {
        inner.alloc.abort_alloc(r);
    }
    for hook in state.on_abort.drain(..).rev() {
        hook(inner);
    }
    recycle(state);
}

/// End one nesting level by aborting: an inner abort dooms the whole (flattened) transaction.
pub(crate) fn abort(heap: &Heap, reason: &str) {
    let inner = heap.inner();
    if let Ok(Some(state)) = leave(inner.id, Some(reason)) {
        abort_state(inner, state);
    }
}

/// Whether this thread has a transaction open on `heap`.
pub(crate) fn active_on(heap: &Heap) -> bool {
    let id = heap.inner().id;
    TXS.with_borrow(|txs| txs.active.iter().any(|s| s.heap_id == id))
}

/// Append the entry of an allocator metadata change to a record.
fn push_meta(buf: &mut Vec<u8>, op: MetaOp) {
    match op {
        MetaOp::Or(offset, mask) => redo::push_mask(buf, redo::KIND_OR, offset, mask),
        MetaOp::AndNot(offset, mask) => redo::push_mask(buf, redo::KIND_ANDNOT, offset, mask),
        MetaOp::Entry(offset, value) => redo::push_data(buf, offset, &value.to_le_bytes()),
    }
}

/// An allocation that is a transaction of its own, when none is open on this thread (the
/// caller checked). A small size sets its unit's bitmap bit directly (one sync point over
/// that word, no record); a large one commits the same record as
/// `transaction(|tx| tx.alloc_bytes(size))` (one entry), without the transaction's state.
pub(crate) fn alloc_alone(heap: &Heap, size: u64) -> Result<u64> {
    let inner = heap.inner();
    inner.check_open()?;
    let (reservation, op) = match cached_class(size) {
        // From this thread's cache, without the arena lock: the unit is reserved to this
        // thread until the bit set below makes it live (as a transaction's commit does).
        Some(class) => {
            TXS.with_borrow_mut(|txs| cached_reservation(&mut txs.caches, heap, class))?
        }
        None => {
            let publish = |chunk, class| inner.publish_run(chunk, class);
            inner.with_space(|| inner.alloc.alloc_as(&inner.pool, size, false, &publish))?
        }
    };
    if let MetaOp::Or(word, mask) = op {
        // A unit of an existing (published) run: one persistent word changes, so no record.
        // Set the bit atomically (other units of the word may change concurrently), then one
        // sync point over the word. A crash before the fence loses an allocation nobody was
        // told of; no replayable record can clear the bit afterwards (records change other
        // bits of bitmap words by masks, and the record that freed this very unit, if any, is
        // below the durable horizon: refinement 6 of the design). Large allocations and new
        // runs keep their records (`publish_run` made this run's durable before returning).
        redo::atomic_word(&inner.pool, word)?.fetch_or(mask, Ordering::AcqRel);
        let range = [ByteRange::new(word, 8)];
        let synced = if mnemo_pmem::mutant::active("alloc.direct_skip_flush") {
            // Broken: the word is claimed staged, so nothing flushes it.
            inner.pool.sync(&SyncPoint::staged(SyncKind::Data, &range))
        } else {
            mnemo_pmem::durable_site!(
                "tx.direct_alloc",
                inner.pool.sync(&SyncPoint::new(SyncKind::Data, &range))
            )
        };
        // On an error the bit may be durable: a leak until the next open, never a double
        // allocation (as a record's commit error).
        inner.release_frees();
        synced?;
        return Ok(reservation.offset);
    }
    let mut lane = inner.lanes.acquire();
    redo::start(&mut lane.buf);
    push_meta(&mut lane.buf, op);
    let allowed = |o: u64, l: u64| inner.allowed(o, l);
    let result = inner.lanes.commit(
        &inner.pool,
        &inner.geometry,
        &mut lane,
        &redo::Commit::metadata(1, &allowed),
    );
    drop(lane);
    // The unit was marked live at once (nobody knows its offset before this returns). On an
    // error the record may still be durable: the allocation stays (a leak until the next
    // open, never a double allocation), as a transaction's commit does.
    inner.release_frees();
    result.map(|_| reservation.offset)
}

/// The handle a transaction's code works through. Not `Send`: a transaction belongs to
/// the thread that began it.
#[derive(Debug)]
pub struct Tx<'h> {
    heap: &'h Heap,
    _thread_bound: PhantomData<*const ()>,
}

impl<'h> Tx<'h> {
    pub(crate) fn new(heap: &'h Heap) -> Tx<'h> {
        Tx {
            heap,
            _thread_bound: PhantomData,
        }
    }

    fn inner(&self) -> &Inner {
        self.heap.inner()
    }

    fn state<R>(&self, f: impl FnOnce(&mut TxState, &Inner) -> Result<R>) -> Result<R> {
        let inner = self.inner();
        inner.check_open()?;
        with_state(inner.id, |s| f(s, inner))
    }

    /// A number identifying this transaction (unique in the process).
    pub fn token(&self) -> Result<u64> {
        static TOKENS: AtomicU64 = AtomicU64::new(1);
        self.state(|s, _| {
            if s.token == 0 {
                s.token = TOKENS.fetch_add(1, Ordering::Relaxed);
            }
            Ok(s.token)
        })
    }

    /// Store `value` at `ptr` when the transaction commits.
    pub fn write<T: Persist>(&self, ptr: PPtr<T>, value: &T) -> Result<()> {
        self.write_bytes(ptr.offset(), value.as_bytes())
    }

    /// Store `bytes` at `offset` (in the heap's data area) when the transaction commits.
    pub fn write_bytes(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        let inner = self.inner();
        if !bytes.is_empty() && !inner.is_user_writable(offset, bytes.len() as u64) {
            return Err(Error::InvalidArgument(format!(
                "write of {} bytes at {offset:#x} is outside the heap's data area",
                bytes.len()
            )));
        }
        self.log_write(offset, bytes, true)
    }

    /// A write to heap metadata (TOC entries) from this crate.
    pub(crate) fn write_meta(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        self.log_write(offset, bytes, false)
    }

    fn log_write(&self, offset: u64, bytes: &[u8], user: bool) -> Result<()> {
        let slot = self.inner().geometry.slot_size();
        self.state(|s, inner| {
            let len = bytes.len() as u64;
            if user && s.fresh(offset, len) {
                // Allocated by this transaction: nothing refers to it until the commit, so it
                // is written in place and checked by CRC at recovery (no logging).
                let before = s.direct.len();
                redo::push_range(&mut s.direct, offset, len);
                if s.direct.len() > before {
                    if let Err(e) = s.grow_record(redo::entry_size(16), slot) {
                        s.direct.pop();
                        return Err(e);
                    }
                }
                inner.pool.write(offset, bytes)?;
                return Ok(());
            }
            s.grow_record(redo::entry_size(bytes.len()), slot)?;
            let pos = s.data.len();
            s.data.extend_from_slice(bytes);
            s.ops.push(Op::Data {
                offset,
                pos,
                len: bytes.len(),
            });
            if user {
                s.data_lo = s.data_lo.min(offset);
                s.data_hi = s.data_hi.max(offset + len);
            }
            Ok(())
        })
    }

    /// Read the value at `ptr` as this transaction sees it (its own writes included).
    pub fn read<T: Persist>(&self, ptr: PPtr<T>) -> Result<T> {
        let mut value = T::new_zeroed();
        self.read_bytes(ptr.offset(), value.as_mut_bytes())?;
        Ok(value)
    }

    /// Read bytes as this transaction sees them.
    pub fn read_bytes(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.state(|s, inner| {
            inner.pool.read(offset, out)?;
            let end = offset + out.len() as u64;
            for op in &s.ops {
                if let Op::Data {
                    offset: o,
                    pos,
                    len,
                } = *op
                {
                    let (lo, hi) = (o.max(offset), (o + len as u64).min(end));
                    if lo < hi {
                        let src = &s.data[pos + (lo - o) as usize..pos + (hi - o) as usize];
                        out[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
                    }
                }
            }
            Ok(())
        })
    }

    /// Allocate a zeroed `T`; it exists only if the transaction commits.
    pub fn alloc<T: Persist>(&self) -> Result<PPtr<T>> {
        Ok(PPtr::from_offset(
            self.zalloc_bytes(std::mem::size_of::<T>().max(1) as u64)?,
        ))
    }

    /// Allocate `size` bytes, zeroed.
    pub fn zalloc_bytes(&self, size: u64) -> Result<u64> {
        let offset = self.alloc_bytes(size)?;
        let zero = vec![0u8; size as usize];
        self.log_write(offset, &zero, true)?;
        Ok(offset)
    }

    /// Allocate `size` bytes whose contents are unspecified (whatever the space held).
    pub fn alloc_bytes(&self, size: u64) -> Result<u64> {
        let inner = self.inner();
        let slot = inner.geometry.slot_size();
        inner.check_open()?;
        let class = cached_class(size);
        TXS.with_borrow_mut(|txs| {
            let Txs { active, caches, .. } = txs;
            let s = active
                .iter_mut()
                .find(|s| s.heap_id == inner.id)
                .ok_or_else(|| {
                    Error::InvalidArgument("no transaction is active on this thread".into())
                })?;
            s.grow_record(redo::entry_size(8), slot)?;
            let publish = |chunk, class| inner.publish_run(chunk, class);
            let (reservation, op) = match class {
                Some(class) => cached_reservation(caches, self.heap, class)?,
                None => inner.with_space(|| inner.alloc.alloc(&inner.pool, size, &publish))?,
            };
            s.add_fresh(reservation);
            if mnemo_pmem::mutant::active("alloc.skip_bitmap") {
                return Ok(reservation.offset);
            }
            // Allocations from the same bitmap word share one entry.
            if let (MetaOp::Or(word, mask), Some(Op::Meta(MetaOp::Or(last, last_mask)))) =
                (op, s.ops.last_mut())
            {
                if *last == word {
                    *last_mask |= mask;
                    s.record_len -= redo::entry_size(8);
                    return Ok(reservation.offset);
                }
            }
            s.ops.push(Op::Meta(op));
            Ok(reservation.offset)
        })
    }

    /// Free the object at `ptr` when the transaction commits.
    pub fn free<T>(&self, ptr: PPtr<T>) -> Result<()> {
        self.free_offset(ptr.offset())
    }

    /// Free the object at `offset` when the transaction commits.
    pub fn free_offset(&self, offset: u64) -> Result<()> {
        let slot = self.inner().geometry.slot_size();
        self.state(|s, inner| {
            s.grow_record(redo::entry_size(8), slot)?;
            let own = s.own(offset);
            let (pending, op) = inner.alloc.free(&inner.pool, offset, own)?;
            s.frees.push(pending);
            s.ops.push(Op::Meta(op));
            Ok(())
        })
    }

    /// Run `hook` after the transaction commits.
    pub(crate) fn on_commit(&self, hook: impl FnOnce(&Inner) + 'static) -> Result<()> {
        self.state(|s, _| {
            s.on_commit.push(Box::new(hook));
            Ok(())
        })
    }

    /// Run `hook` if the transaction aborts.
    pub(crate) fn on_abort(&self, hook: impl FnOnce(&Inner) + 'static) -> Result<()> {
        self.state(|s, _| {
            s.on_abort.push(Box::new(hook));
            Ok(())
        })
    }
}

/// An explicitly begun transaction (the C ABI's begin/commit/abort). Dropping it without
/// [`TxHandle::commit`] aborts it.
#[derive(Debug)]
pub struct TxHandle<'h> {
    tx: Tx<'h>,
    done: bool,
}

impl<'h> TxHandle<'h> {
    pub(crate) fn new(heap: &'h Heap) -> TxHandle<'h> {
        TxHandle {
            tx: Tx::new(heap),
            done: false,
        }
    }

    /// Commit (the outermost level) or leave this nesting level.
    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        commit(self.tx.heap)
    }

    /// Abort: discards every write, allocation and free of the whole transaction.
    pub fn abort(mut self) {
        self.done = true;
        abort(self.tx.heap, "aborted by the caller");
    }

    pub(crate) fn abort_because(mut self, reason: &str) {
        self.done = true;
        abort(self.tx.heap, reason);
    }
}

impl<'h> std::ops::Deref for TxHandle<'h> {
    type Target = Tx<'h>;
    fn deref(&self) -> &Tx<'h> {
        &self.tx
    }
}

impl Drop for TxHandle<'_> {
    fn drop(&mut self) {
        if !self.done {
            abort(
                self.tx.heap,
                "the transaction handle was dropped without commit",
            );
        }
    }
}
