//! Durable transactions: an explicit handle ([`Tx`]) owning a volatile write set, one redo
//! record at commit.
//!
//! A transaction is an object its caller owns: [`Heap::begin`] returns it, [`Tx::commit`] and
//! [`Tx::abort`] consume it, and dropping it aborts ([`Heap::tx`] wraps the three around a
//! closure). Nothing joins a transaction behind the caller's back: heap calls outside a
//! [`Tx`] are transactions of their own; code that wants them in the transaction calls the
//! [`Tx`]'s methods ([`Tx::alloc_bytes`], [`Tx::free_offset`], [`Tx::nvalloc`]...).
//!
//! The write set:
//!
//! * **Logged writes** are kept as *pieces*: non-overlapping extents in a tree by offset, each
//!   pointing at its bytes in one append-only buffer (`data`). A write replaces the pieces it
//!   covers (trimming the ones it overlaps at its edges), so a read of the transaction's view
//!   is the pool's bytes patched with the pieces a descent of the tree finds (`O(log n + k)`),
//!   skipped when a filter of the cache lines written says none can overlap (most reads of a
//!   large transaction, such as a batch of the key-value server), and
//!   the commit writes one redo entry per run of adjacent pieces: bytes written several
//!   times are logged once, with their last value. (The record size checked at each write
//!   counts an entry per piece: an upper bound, kept without looking at neighbours.) A write
//!   that falls inside one piece overwrites its bytes in place (no new bytes, no new piece):
//!   the common case of a word written again and again, such as a table's count by every
//!   command of a batch. If the piece was written before the innermost open savepoint, its
//!   old bytes are kept first (`piece_undo`), for a rollback to put back.
//! * **Writes into the transaction's own fresh allocations** go to the pool at once, unlogged,
//!   and are checked by CRC at recovery (design, refinement 4).
//! * **Allocations and frees** are allocator reservations plus their metadata entries
//!   (bitmap masks, chunk-table entries), in order.
//!
//! **Savepoints** ([`Tx::savepoint`], [`Tx::rollback_to`], [`Tx::release`]) nest as a stack.
//! A savepoint remembers the lengths of every list above; rolling back truncates them,
//! releases the reservations and un-defers the frees made since (in reverse), runs the abort
//! hooks registered since, puts back the pool bytes of fresh allocations older than the
//! savepoint that were overwritten in place since (their old bytes are kept while a savepoint
//! is open), puts back the logged bytes overwritten in place since (`piece_undo`), and
//! rebuilds the piece index from the log of logged writes (`writes`), cut at the savepoint.
//! Rollbacks are rare (a failed command), so the rebuild is not optimised; a write pays for
//! savepoints only by copying the bytes it overwrites in place, when they are older than
//! the savepoint.

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
#[cfg(mnemo_shuttle)]
use crate::sync::LocalRefCell;

type Hook = Box<dyn FnOnce(&Inner)>;

/// Up to this many allocations, a transaction finds its fresh objects by a scan (no index to
/// build and drop per transaction); beyond, by `TxState::fresh_index`.
const FRESH_SCAN_MAX: usize = 16;

/// One logged write, in write order (`TxState::writes`): the bytes are `data[pos..pos + len]`.
#[derive(Clone, Copy, Debug)]
struct Write {
    offset: u64,
    pos: usize,
    len: usize,
}

/// The latest bytes of `offset..offset + len`: `data[pos..pos + len]`. Pieces never overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    offset: u64,
    pos: usize,
    len: usize,
}

impl Piece {
    fn end(&self) -> u64 {
        self.offset + self.len as u64
    }

    /// The part of this piece from `from` to `to` (both inside it).
    fn cut(&self, from: u64, to: u64) -> Piece {
        Piece {
            offset: from,
            pos: self.pos + (from - self.offset) as usize,
            len: (to - from) as usize,
        }
    }
}

/// A range over more than this many units is not marked unit by unit: the filter then answers
/// "maybe" to everything until the transaction ends.
const SPAN_FILTER_MAX: u64 = 64;

/// A conservative set of the `1 << SHIFT`-byte units some ranges of a transaction cover: "no"
/// is exact, "maybe" sends the caller to its exact structure. Units hash to `SLOTS` slots by
/// their low bits; a slot holds the generation (transaction) that last marked it, so a new
/// transaction starts empty without clearing anything. Ranges dropped by a rollback stay
/// marked (a false "maybe").
#[derive(Debug, Default)]
struct SpanFilter<const SHIFT: u32, const SLOTS: usize> {
    stamps: Vec<u32>,
    generation: u32,
    everything: bool,
}

/// The 64-byte lines the transaction's pieces cover (64 KiB of stamps per thread that runs
/// transactions): most reads and writes of a large transaction touch none, and skip the tree.
type LineFilter = SpanFilter<6, { 1 << 14 }>;

/// The 4 KiB pages the transaction's fresh allocations lie in (16 KiB of stamps): a logged
/// write outside them needs no search of the allocations.
type FreshFilter = SpanFilter<12, { 1 << 12 }>;

impl<const SHIFT: u32, const SLOTS: usize> SpanFilter<SHIFT, SLOTS> {
    fn reset(&mut self) {
        self.everything = false;
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamps.fill(0);
            self.generation = 1;
        }
    }

    fn units(offset: u64, len: u64) -> (u64, u64) {
        let last = offset.saturating_add(len.max(1) - 1);
        (offset >> SHIFT, last >> SHIFT)
    }

    fn mark(&mut self, offset: u64, len: u64) {
        let (first, last) = Self::units(offset, len);
        if last - first >= SPAN_FILTER_MAX {
            self.everything = true;
            return;
        }
        if self.stamps.is_empty() {
            self.stamps = vec![0; SLOTS];
        }
        if self.generation == 0 {
            self.generation = 1;
        }
        for unit in first..=last {
            self.stamps[unit as usize % SLOTS] = self.generation;
        }
    }

    fn may_overlap(&self, offset: u64, len: u64) -> bool {
        if self.everything {
            return true;
        }
        if self.stamps.is_empty() {
            return false;
        }
        let (first, last) = Self::units(offset, len);
        if last - first >= SPAN_FILTER_MAX {
            return true;
        }
        (first..=last).any(|unit| self.stamps[unit as usize % SLOTS] == self.generation)
    }
}

/// What a savepoint restores: the lengths of the write set's lists when it was taken, and the
/// few values that later calls change in place.
#[derive(Clone, Copy, Debug)]
struct Marks {
    serial: u64,
    writes: usize,
    data: usize,
    meta: usize,
    /// The last metadata entry (later allocations from the same bitmap word merge into it).
    last_meta: Option<MetaOp>,
    allocs: usize,
    frees: usize,
    direct: usize,
    /// The last in-place range (`redo::push_range` extends it).
    last_direct: Option<ByteRange>,
    record_len: usize,
    data_lo: u64,
    data_hi: u64,
    on_commit: usize,
    on_abort: usize,
    undo: usize,
    undo_data: usize,
    piece_undo: usize,
    piece_undo_data: usize,
}

/// A transaction's volatile state (reused from transaction to transaction on a thread).
#[derive(Default)]
pub(crate) struct TxState {
    heap_id: u64,
    token: u64,
    poisoned: Option<String>,
    /// Bytes of logged writes, appended (pieces and writes point into it).
    data: Vec<u8>,
    /// Logged writes in order: the source the piece index is rebuilt from after a rollback.
    writes: Vec<Write>,
    /// The index: non-overlapping pieces by offset. A tree, not a sorted vector: a batch of
    /// the key-value server logs thousands of scattered words, and inserting each into a
    /// sorted vector moved half of it (15% of a pipelined SET's time, measured).
    pieces: BTreeMap<u64, Piece>,
    /// Reused by [`TxState::splice`] for the offsets of the pieces a write replaces.
    replaced_keys: Vec<u64>,
    /// The cache lines the pieces may cover: most reads and writes of a large transaction
    /// touch none, and skip the tree.
    lines: LineFilter,
    /// Allocator metadata entries, in order.
    meta: Vec<MetaOp>,
    record_len: usize,
    allocs: Vec<Reservation>,
    /// The pages `allocs` lie in: a write outside them is not to a fresh allocation, found
    /// without a search (most logged writes of a batch of the key-value server).
    fresh_pages: FreshFilter,
    /// The first `fresh_indexed` allocations by offset (start -> (size, index in `allocs`)),
    /// so `fresh` is a lookup, not a scan, once there are more than `FRESH_SCAN_MAX`: a
    /// batch of the key-value server makes hundreds. Brought up to date only when a lookup
    /// needs it (most writes to fresh allocations go to the newest, and most other writes
    /// miss `fresh_pages`). The allocations never overlap (frees take effect at commit, so
    /// no space is handed out twice within one transaction).
    fresh_index: BTreeMap<u64, (u64, usize)>,
    fresh_indexed: usize,
    frees: Vec<PendingFree>,
    direct: Vec<ByteRange>,
    data_lo: u64,
    data_hi: u64,
    on_commit: Vec<Hook>,
    on_abort: Vec<Hook>,
    /// Open savepoints, outermost first.
    savepoints: Vec<Marks>,
    serial: u64,
    /// Pool bytes of fresh allocations overwritten in place while a savepoint was open
    /// (offset, position in `undo_data`, length), to put back on rollback.
    undo: Vec<(u64, usize, usize)>,
    undo_data: Vec<u8>,
    /// Logged bytes written before the innermost open savepoint and overwritten in place
    /// since (position in `data`, position in `piece_undo_data`, length), to put back on
    /// rollback: a word written again and again (a table's count) stays one piece.
    piece_undo: Vec<(usize, usize, usize)>,
    piece_undo_data: Vec<u8>,
    /// Reused by the commit to gather a run of adjacent pieces into one entry.
    scratch: Vec<u8>,
}

impl TxState {
    fn reset(&mut self, heap_id: u64) {
        self.heap_id = heap_id;
        self.token = 0; // assigned on first use (`Tx::token`): most transactions never ask
        self.poisoned = None;
        self.data.clear();
        self.writes.clear();
        self.pieces.clear();
        self.lines.reset();
        self.meta.clear();
        self.record_len = redo::RECORD_HEADER;
        self.allocs.clear();
        self.fresh_pages.reset();
        if !self.fresh_index.is_empty() {
            self.fresh_index.clear();
        }
        self.fresh_indexed = 0;
        self.frees.clear();
        self.direct.clear();
        self.data_lo = u64::MAX;
        self.data_hi = 0;
        if !self.on_commit.is_empty() || !self.on_abort.is_empty() {
            self.on_commit.clear();
            self.on_abort.clear();
        }
        self.savepoints.clear();
        self.undo.clear();
        self.undo_data.clear();
        self.piece_undo.clear();
        self.piece_undo_data.clear();
    }

    fn is_empty(&self) -> bool {
        self.pieces.is_empty()
            && self.meta.is_empty()
            && self.direct.is_empty()
            && self.allocs.is_empty()
            && self.frees.is_empty()
    }

    fn check_record(&self, next: usize, capacity: u64) -> Result<()> {
        if next as u64 > capacity {
            return Err(Error::TransactionTooLarge {
                needed: next as u64,
                capacity,
            });
        }
        Ok(())
    }

    fn grow_record(&mut self, bytes: usize, capacity: u64) -> Result<()> {
        let next = self.record_len + bytes;
        self.check_record(next, capacity)?;
        self.record_len = next;
        Ok(())
    }

    /// The index in `allocs` of this transaction's allocation holding `offset..offset+len`.
    fn fresh(&mut self, offset: u64, len: u64) -> Option<usize> {
        let end = offset.saturating_add(len);
        // Most writes to fresh allocations go to the newest (an object is filled right after
        // it is allocated): one comparison before any filter, scan or lookup.
        let last = self.allocs.len().checked_sub(1)?;
        let r = &self.allocs[last];
        if r.offset <= offset && end <= r.offset + r.size {
            return Some(last);
        }
        if !self.fresh_pages.may_overlap(offset, len) {
            return None;
        }
        if self.allocs.len() <= FRESH_SCAN_MAX {
            return self
                .allocs
                .iter()
                .position(|r| r.offset <= offset && end <= r.offset + r.size);
        }
        self.index_fresh();
        self.fresh_index
            .range(..=offset)
            .next_back()
            .filter(|(&start, &(size, _))| end <= start + size)
            .map(|(_, &(_, i))| i)
    }

    /// Brings `fresh_index` up to date with `allocs`.
    fn index_fresh(&mut self) {
        let from = self.fresh_indexed;
        self.fresh_index.extend(
            self.allocs[from..]
                .iter()
                .enumerate()
                .map(|(i, r)| (r.offset, (r.size, from + i))),
        );
        self.fresh_indexed = self.allocs.len();
    }

    /// Note an allocation of this transaction.
    fn add_fresh(&mut self, reservation: Reservation) {
        self.fresh_pages.mark(reservation.offset, reservation.size);
        self.allocs.push(reservation);
    }

    /// Drops the allocations from `keep` on, newest first, calling `each` on each.
    fn truncate_allocs(&mut self, keep: usize, mut each: impl FnMut(&Reservation)) {
        for (i, r) in self.allocs.iter().enumerate().skip(keep).rev() {
            each(r);
            if i < self.fresh_indexed {
                self.fresh_index.remove(&r.offset);
            }
        }
        self.allocs.truncate(keep);
        self.fresh_indexed = self.fresh_indexed.min(keep);
    }

    /// Whether `offset` is the start of an allocation of this transaction.
    fn own(&mut self, offset: u64) -> bool {
        if !self.fresh_pages.may_overlap(offset, 1) {
            return false;
        }
        if self.allocs.len() <= FRESH_SCAN_MAX {
            return self.allocs.iter().any(|r| r.offset == offset);
        }
        self.index_fresh();
        self.fresh_index.contains_key(&offset)
    }

    /// Bytes of `data` from this position on were written after the innermost open
    /// savepoint: a rollback drops them all, so they may be overwritten in place.
    fn keep_below(&self) -> usize {
        self.savepoints.last().map_or(0, |m| m.data)
    }

    /// The pieces overlapping `offset..end`, from the last to the first: those starting
    /// before `end`, walked back while they reach past `offset` (pieces do not overlap, so
    /// their ends grow with their offsets). One descent of the tree.
    fn overlapping(&self, offset: u64, end: u64) -> impl Iterator<Item = &Piece> {
        self.pieces
            .range(..end)
            .rev()
            .map(|(_, p)| p)
            .take_while(move |p| p.end() > offset)
    }

    /// Log a write of `bytes` at `offset` (not into a fresh allocation).
    fn put(&mut self, offset: u64, bytes: &[u8], capacity: u64) -> Result<()> {
        let end = offset + bytes.len() as u64;
        if !self.lines.may_overlap(offset, bytes.len() as u64) {
            // Nothing logged near: a new piece, no neighbour to look at.
            let record_len = self.record_len + redo::entry_size(bytes.len());
            self.check_record(record_len, capacity)?;
            self.record_len = record_len;
            let new = Piece {
                offset,
                pos: self.data.len(),
                len: bytes.len(),
            };
            self.data.extend_from_slice(bytes);
            self.writes.push(Write {
                offset,
                pos: new.pos,
                len: new.len,
            });
            self.lines.mark(offset, new.len as u64);
            self.pieces.insert(offset, new);
            return Ok(());
        }
        if let Some((_, &p)) = self.pieces.range(..=offset).next_back() {
            if end <= p.end() {
                // Inside one piece: overwrite its bytes (the write that made the piece owns
                // them, and no later write covers them, so a rebuild from `writes` finds
                // these bytes too). Bytes written before the innermost savepoint are kept
                // first, for a rollback to put back.
                let at = p.pos + (offset - p.offset) as usize;
                if p.pos < self.keep_below() {
                    self.piece_undo
                        .push((at, self.piece_undo_data.len(), bytes.len()));
                    self.piece_undo_data
                        .extend_from_slice(&self.data[at..at + bytes.len()]);
                }
                self.data[at..at + bytes.len()].copy_from_slice(bytes);
                return Ok(());
            }
        }
        let new = Piece {
            offset,
            pos: self.data.len(),
            len: bytes.len(),
        };
        let (replaced, record_len) = self.replacement(new);
        self.check_record(record_len, capacity)?;
        self.record_len = record_len;
        self.data.extend_from_slice(bytes);
        self.writes.push(Write {
            offset,
            pos: new.pos,
            len: new.len,
        });
        self.splice(new, replaced);
        Ok(())
    }

    /// The pieces that replace those `new` overlaps when it is written over them (the parts of
    /// the first and last that stick out, and `new`), and the record length after.
    fn replacement(&self, new: Piece) -> ([Option<Piece>; 3], usize) {
        let mut len = self.record_len + redo::entry_size(new.len);
        let mut out = [None, Some(new), None];
        let mut first = None;
        let mut last = None;
        for &p in self.overlapping(new.offset, new.end()) {
            len -= redo::entry_size(p.len);
            last.get_or_insert(p);
            first = Some(p);
        }
        if let Some(first) = first.filter(|f| f.offset < new.offset) {
            let left = first.cut(first.offset, new.offset);
            len += redo::entry_size(left.len);
            out[0] = Some(left);
        }
        if let Some(last) = last.filter(|l| l.end() > new.end()) {
            let right = last.cut(new.end(), last.end());
            len += redo::entry_size(right.len);
            out[2] = Some(right);
        }
        (out, len)
    }

    /// Replaces the pieces `new` overlaps with `replaced` (from [`TxState::replacement`]).
    fn splice(&mut self, new: Piece, replaced: [Option<Piece>; 3]) {
        let mut keys = std::mem::take(&mut self.replaced_keys);
        keys.clear();
        keys.extend(self.overlapping(new.offset, new.end()).map(|p| p.offset));
        for key in &keys {
            self.pieces.remove(key);
        }
        self.lines.mark(new.offset, new.len as u64);
        for p in replaced.into_iter().flatten() {
            self.pieces.insert(p.offset, p);
        }
        self.replaced_keys = keys;
    }

    /// Patch `out` (pool bytes at `offset`) with the pieces it overlaps.
    fn overlay(&self, offset: u64, out: &mut [u8]) {
        if self.pieces.is_empty() || !self.lines.may_overlap(offset, out.len() as u64) {
            return;
        }
        let end = offset + out.len() as u64;
        for p in self.overlapping(offset, end) {
            let (lo, hi) = (p.offset.max(offset), p.end().min(end));
            let src = p.pos + (lo - p.offset) as usize;
            out[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&self.data[src..src + (hi - lo) as usize]);
        }
    }

    /// Rebuild the piece index from `writes` (after a rollback cut it).
    fn rebuild(&mut self) {
        self.pieces.clear();
        let record_len = self.record_len;
        for k in 0..self.writes.len() {
            let w = self.writes[k];
            let new = Piece {
                offset: w.offset,
                pos: w.pos,
                len: w.len,
            };
            let (replaced, _) = self.replacement(new);
            self.splice(new, replaced);
        }
        self.record_len = record_len;
    }

    fn marks(&mut self) -> Marks {
        self.serial += 1;
        Marks {
            serial: self.serial,
            writes: self.writes.len(),
            data: self.data.len(),
            meta: self.meta.len(),
            last_meta: self.meta.last().copied(),
            allocs: self.allocs.len(),
            frees: self.frees.len(),
            direct: self.direct.len(),
            last_direct: self.direct.last().copied(),
            record_len: self.record_len,
            data_lo: self.data_lo,
            data_hi: self.data_hi,
            on_commit: self.on_commit.len(),
            on_abort: self.on_abort.len(),
            undo: self.undo.len(),
            undo_data: self.undo_data.len(),
            piece_undo: self.piece_undo.len(),
            piece_undo_data: self.piece_undo_data.len(),
        }
    }

    /// The logged writes as they were when `m` was taken: bytes overwritten in place since
    /// get their old values back (newest first), the bytes and writes appended since are cut,
    /// and the piece index is rebuilt if writes were cut.
    fn cut_log(&mut self, m: &Marks) {
        for &(pos, at, len) in self.piece_undo[m.piece_undo..].iter().rev() {
            self.data[pos..pos + len].copy_from_slice(&self.piece_undo_data[at..at + len]);
        }
        self.piece_undo.truncate(m.piece_undo);
        self.piece_undo_data.truncate(m.piece_undo_data);
        let cut = self.writes.len() > m.writes || self.data.len() > m.data;
        self.writes.truncate(m.writes);
        self.data.truncate(m.data);
        self.record_len = m.record_len;
        if cut {
            self.rebuild();
        }
    }

    /// Undo everything done since `m` was taken.
    fn roll_back(&mut self, inner: &Inner, m: Marks) -> Result<()> {
        // Fresh bytes first, newest first, while the allocations they lie in are still ours.
        let mut restored = Ok(());
        for &(offset, pos, len) in self.undo[m.undo..].iter().rev() {
            if let Err(e) = inner.pool.write(offset, &self.undo_data[pos..pos + len]) {
                restored = Err(e.into());
            }
        }
        self.undo.truncate(m.undo);
        self.undo_data.truncate(m.undo_data);
        for f in self.frees[m.frees..].iter().rev() {
            inner.alloc.abort_free(f);
        }
        self.frees.truncate(m.frees);
        self.truncate_allocs(m.allocs, |r| inner.alloc.abort_alloc(r));
        for hook in self.on_abort.drain(m.on_abort..).rev() {
            hook(inner);
        }
        self.on_commit.truncate(m.on_commit);
        self.meta.truncate(m.meta);
        if let (Some(last), Some(saved)) = (self.meta.last_mut(), m.last_meta) {
            *last = saved;
        }
        self.direct.truncate(m.direct);
        if let (Some(last), Some(saved)) = (self.direct.last_mut(), m.last_direct) {
            *last = saved;
        }
        self.cut_log(&m);
        self.data_lo = m.data_lo;
        self.data_hi = m.data_hi;
        restored
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

/// A thread's spare transaction states (their buffers are reused) and its allocation
/// caches. Boxed states, so taking one out or putting it back moves a pointer, not the state.
#[derive(Default)]
#[allow(clippy::vec_box)] // moved in and out on every transaction: a pointer, not ~500 bytes
struct Local {
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

crate::sync::thread_local! {
    static LOCAL: RefCell<Local> = RefCell::new(Local::default());
}

/// A fresh state for a transaction on heap `heap_id`: a spare one of this thread's if any.
fn fresh_state(heap_id: u64) -> Box<TxState> {
    let mut state = LOCAL
        .try_with(|l| l.borrow_mut().spare.pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    state.reset(heap_id);
    state
}

fn recycle(mut state: Box<TxState>) {
    // Hooks are rare: skip the (out-of-line) drop of empty vectors of boxed closures.
    if !state.on_commit.is_empty() || !state.on_abort.is_empty() {
        state.on_commit.clear();
        state.on_abort.clear();
    }
    // A thread that is exiting (its locals destroyed) drops the state instead.
    let _ = LOCAL.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            if l.spare.len() < 4 {
                l.spare.push(state);
            }
        }
    });
}

/// Commit `state`: one redo record (none if it is empty), then the allocator's bookkeeping.
fn commit_state(inner: &Inner, mut state: Box<TxState>) -> Result<()> {
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
    // Read through a buffer on the stack, not a zeroed allocation per range: a batch of
    // the key-value server writes hundreds of fresh entries.
    let mut chunk = [0u8; 1024];
    for range in &state.direct {
        let mut crc = 0;
        let mut at = range.offset;
        let end = range.end();
        while at < end {
            let n = (end - at).min(chunk.len() as u64) as usize;
            if let Err(e) = inner.pool.read(at, &mut chunk[..n]) {
                abort_state(inner, state);
                return Err(e.into());
            }
            crc = crc32c::crc32c_append(crc, &chunk[..n]);
            at += n as u64;
        }
        checks.push((range.offset, range.len, crc));
    }
    let fresh = state.direct.iter().fold((u64::MAX, 0), |(lo, hi), r| {
        (lo.min(r.offset), hi.max(r.end()))
    });
    let mut lane = inner.lanes.acquire();
    let buf = &mut lane.buf;
    redo::start(buf);
    let mut count = 0u32;
    count += push_pieces(buf, &mut state);
    for &op in &state.meta {
        push_meta(buf, op);
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

/// Append the data entries of `state`'s pieces to a record: one entry per run of adjacent
/// pieces (a run's bytes gathered in `state.scratch`). Returns the number of entries.
fn push_pieces(buf: &mut Vec<u8>, state: &mut TxState) -> u32 {
    let TxState {
        pieces,
        data,
        scratch,
        ..
    } = state;
    let bytes = |p: &Piece| &data[p.pos..p.pos + p.len];
    let mut count = 0;
    let mut pieces = pieces.values().peekable();
    while let Some(first) = pieces.next() {
        let mut end = first.end();
        if pieces.peek().is_some_and(|p| p.offset == end) {
            scratch.clear();
            scratch.extend_from_slice(bytes(first));
            while let Some(p) = pieces.next_if(|p| p.offset == end) {
                scratch.extend_from_slice(bytes(p));
                end = p.end();
            }
            redo::push_data(buf, first.offset, scratch);
        } else {
            redo::push_data(buf, first.offset, bytes(first));
        }
        count += 1;
    }
    count
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

/// Append the entry of an allocator metadata change to a record.
fn push_meta(buf: &mut Vec<u8>, op: MetaOp) {
    match op {
        MetaOp::Or(offset, mask) => redo::push_mask(buf, redo::KIND_OR, offset, mask),
        MetaOp::AndNot(offset, mask) => redo::push_mask(buf, redo::KIND_ANDNOT, offset, mask),
        MetaOp::Entry(offset, value) => redo::push_data(buf, offset, &value.to_le_bytes()),
    }
}

/// An allocation that is a transaction of its own. A small size sets its unit's bitmap bit
/// directly (one sync point over that word, no record); a large one commits the same record
/// as `tx(|tx| tx.alloc_bytes(size))` (one entry), without a transaction's state.
pub(crate) fn alloc_alone(heap: &Heap, size: u64) -> Result<u64> {
    let inner = heap.inner();
    inner.check_open()?;
    let (reservation, op) = match cached_class(size) {
        // From this thread's cache, without the arena lock: the unit is reserved to this
        // thread until the bit set below makes it live (as a transaction's commit does).
        Some(class) => LOCAL.with_borrow_mut(|l| cached_reservation(&mut l.caches, heap, class))?,
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

/// The heap a transaction works on: borrowed (Rust callers, no reference count touched per
/// transaction) or owned (a transaction kept across calls of the C ABI).
#[derive(Debug)]
enum HeapRef<'h> {
    Borrowed(&'h Heap),
    Owned(Heap),
}

/// A marker of a point in a transaction to roll back to ([`Tx::savepoint`]).
#[derive(Debug)]
#[must_use = "a savepoint stays open until released or its transaction ends"]
pub struct Savepoint {
    token: u64,
    depth: usize,
    serial: u64,
}

/// A durable transaction, owned by its caller: begun by [`Heap::begin`] (or run by
/// [`Heap::tx`]), ended by [`Tx::commit`] or [`Tx::abort`]; dropping it aborts it. All its
/// writes, allocations and frees take effect together at commit, or none does. Reads through
/// it see its own writes. Not `Send`: a transaction belongs to the thread that began it
/// (its allocations come from that thread's cache).
pub struct Tx<'h> {
    heap: HeapRef<'h>,
    /// `None` only once ended (commit and abort consume the handle).
    state: RefCell<Option<Box<TxState>>>,
    _thread_bound: PhantomData<*const ()>,
}

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

fn ended() -> Error {
    Error::InvalidArgument("the transaction has ended".into())
}

impl<'h> Tx<'h> {
    fn start(heap: HeapRef<'h>) -> Result<Tx<'h>> {
        let id = {
            let h = match &heap {
                HeapRef::Borrowed(h) => *h,
                HeapRef::Owned(h) => h,
            };
            h.inner().check_open()?;
            h.inner().id
        };
        Ok(Tx {
            heap,
            state: RefCell::new(Some(fresh_state(id))),
            _thread_bound: PhantomData,
        })
    }

    pub(crate) fn begin(heap: &'h Heap) -> Result<Tx<'h>> {
        Tx::start(HeapRef::Borrowed(heap))
    }

    /// The heap this transaction works on.
    pub fn heap(&self) -> &Heap {
        match &self.heap {
            HeapRef::Borrowed(h) => h,
            HeapRef::Owned(h) => h,
        }
    }

    pub(crate) fn inner(&self) -> &Inner {
        self.heap().inner()
    }

    fn state<R>(&self, f: impl FnOnce(&mut TxState, &Inner) -> Result<R>) -> Result<R> {
        let inner = self.inner();
        inner.check_open()?;
        let mut state = self.state.borrow_mut();
        let state = state.as_deref_mut().ok_or_else(ended)?;
        f(state, inner)
    }

    /// Commit: one redo record and one sync point (none for an empty transaction); on
    /// `Ok` every write, allocation and free is durable.
    ///
    /// Errors: `Aborted` ([`Tx::doom`] was called), `Closed`, `TransactionTooLarge`
    /// (nothing applied), `Pool` (the commit may or may not have taken effect).
    pub fn commit(mut self) -> Result<()> {
        let state = self.state.get_mut().take().ok_or_else(ended)?;
        commit_state(self.inner(), state)
    }

    /// Abort: discard every write, allocation and free.
    pub fn abort(self) {
        drop(self);
    }

    /// Make the commit fail with `Aborted(reason)` (and abort) whatever happens next: for
    /// callers that must not let a failed step be followed by a commit (the C ABI's rule).
    /// The first reason is kept.
    pub fn doom(&self, reason: &str) {
        if let Some(state) = self.state.borrow_mut().as_deref_mut() {
            state.poisoned.get_or_insert_with(|| reason.to_string());
        }
    }

    /// Whether the transaction has nothing to commit (no write, allocation or free).
    pub fn is_empty(&self) -> bool {
        self.state.borrow().as_deref().is_none_or(TxState::is_empty)
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

    /// Mark this point of the transaction: [`Tx::rollback_to`] undoes everything done after
    /// it. Savepoints nest; release them ([`Tx::release`]) when they are no longer needed
    /// (an open savepoint makes later writes keep the bytes they replace).
    pub fn savepoint(&self) -> Result<Savepoint> {
        let token = self.token()?;
        self.state(|s, _| {
            let marks = s.marks();
            s.savepoints.push(marks);
            Ok(Savepoint {
                token,
                depth: s.savepoints.len() - 1,
                serial: marks.serial,
            })
        })
    }

    fn check_savepoint(s: &TxState, sp: &Savepoint) -> Result<Marks> {
        match s.savepoints.get(sp.depth) {
            Some(m) if s.token == sp.token && m.serial == sp.serial => Ok(*m),
            _ => Err(Error::InvalidArgument(
                "the savepoint is not open in this transaction (released, or rolled back past)"
                    .into(),
            )),
        }
    }

    /// Undo every write, allocation (its reservation released) and free (un-deferred) made
    /// since `sp`, and run the abort hooks registered since; savepoints taken after `sp`
    /// close, `sp` stays open. The commit writes only what survives. A doomed transaction
    /// ([`Tx::doom`]) stays doomed.
    ///
    /// Errors: `InvalidArgument` (not an open savepoint of this transaction), `Closed`,
    /// `Pool` (the pool bytes of a fresh allocation could not be put back: everything else
    /// is rolled back; the transaction is doomed).
    pub fn rollback_to(&self, sp: &Savepoint) -> Result<()> {
        self.state(|s, inner| {
            let marks = Self::check_savepoint(s, sp)?;
            s.savepoints.truncate(sp.depth + 1);
            let result = s.roll_back(inner, marks);
            if let Err(e) = &result {
                s.poisoned
                    .get_or_insert_with(|| format!("a rollback failed: {e}"));
            }
            result
        })
    }

    /// Close `sp` and every savepoint taken after it, keeping what was done since.
    ///
    /// Errors: `InvalidArgument` (not an open savepoint of this transaction), `Closed`.
    pub fn release(&self, sp: Savepoint) -> Result<()> {
        self.state(|s, _| {
            Self::check_savepoint(s, &sp)?;
            s.savepoints.truncate(sp.depth);
            Ok(())
        })
    }

    /// Store `value` at `ptr` when the transaction commits.
    pub fn write<T: Persist>(&self, ptr: PPtr<T>, value: &T) -> Result<()> {
        self.write_bytes(ptr.offset(), value.as_bytes())
    }

    /// Store `bytes` at `offset` (in the heap's data area) when the transaction commits.
    ///
    /// Errors: `InvalidArgument` (outside the data area), `TransactionTooLarge` (the redo
    /// record would outgrow a lane's slot; nothing changed), `Closed`.
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
        if bytes.is_empty() {
            return Ok(());
        }
        let slot = self.inner().geometry.slot_size();
        self.state(|s, inner| {
            let len = bytes.len() as u64;
            if user {
                if let Some(i) = s.fresh(offset, len) {
                    return Self::write_fresh(s, inner, i, offset, bytes, slot);
                }
            }
            s.put(offset, bytes, slot)?;
            if user {
                s.data_lo = s.data_lo.min(offset);
                s.data_hi = s.data_hi.max(offset + len);
            }
            Ok(())
        })
    }

    /// A write into allocation `i` of this transaction: nothing refers to it until the
    /// commit, so it is written in place and checked by CRC at recovery (no logging). Its old
    /// bytes are kept if a savepoint older than the allocation is open.
    fn write_fresh(
        s: &mut TxState,
        inner: &Inner,
        i: usize,
        offset: u64,
        bytes: &[u8],
        slot: u64,
    ) -> Result<()> {
        let len = bytes.len() as u64;
        let before = s.direct.len();
        let last = s.direct.last().copied();
        redo::push_range(&mut s.direct, offset, len);
        if s.direct.len() > before {
            if let Err(e) = s.grow_record(redo::entry_size(16), slot) {
                s.direct.pop();
                return Err(e);
            }
        }
        if s.savepoints.last().is_some_and(|m| i < m.allocs) {
            let pos = s.undo_data.len();
            s.undo_data.resize(pos + bytes.len(), 0);
            if let Err(e) = inner.pool.read(offset, &mut s.undo_data[pos..]) {
                s.undo_data.truncate(pos);
                s.direct.truncate(before);
                if let (Some(l), Some(saved)) = (s.direct.last_mut(), last) {
                    *l = saved;
                }
                return Err(e.into());
            }
            s.undo.push((offset, pos, bytes.len()));
        }
        inner.pool.write(offset, bytes)?;
        Ok(())
    }

    /// Read the value at `ptr` as this transaction sees it (its own writes included).
    pub fn read<T: Persist>(&self, ptr: PPtr<T>) -> Result<T> {
        let mut value = T::new_zeroed();
        self.read_bytes(ptr.offset(), value.as_mut_bytes())?;
        Ok(value)
    }

    /// Read bytes as this transaction sees them: the pool's, patched with the transaction's
    /// logged writes (found by lookup).
    ///
    /// Errors: `Pool` (outside the pool), `Closed`.
    pub fn read_bytes(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let inner = self.inner();
        inner.check_open()?;
        let state = self.state.borrow();
        let state = state.as_deref().ok_or_else(ended)?;
        inner.pool.read(offset, out)?;
        state.overlay(offset, out);
        Ok(())
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
    ///
    /// Errors: `InvalidArgument` (0 bytes), `OutOfSpace`, `TransactionTooLarge`, `Closed`.
    pub fn alloc_bytes(&self, size: u64) -> Result<u64> {
        let slot = self.inner().geometry.slot_size();
        self.state(|s, inner| self.alloc_in(s, inner, size, slot))
    }

    /// Allocate `size` bytes and write `image` at their start (the rest unspecified): one
    /// call where [`Tx::alloc_bytes`] and [`Tx::write_bytes`] make two, for an object built
    /// whole before it is stored (the key-value server's entries).
    ///
    /// Errors: `InvalidArgument` (0 bytes, or an image longer than `size`), and those of
    /// [`Tx::alloc_bytes`].
    pub fn alloc_filled(&self, size: u64, image: &[u8]) -> Result<u64> {
        if image.len() as u64 > size {
            return Err(Error::InvalidArgument(format!(
                "an image of {} bytes for an allocation of {size}",
                image.len()
            )));
        }
        let slot = self.inner().geometry.slot_size();
        self.state(|s, inner| {
            let offset = self.alloc_in(s, inner, size, slot)?;
            if !image.is_empty() {
                Self::write_fresh(s, inner, s.allocs.len() - 1, offset, image, slot)?;
            }
            Ok(offset)
        })
    }

    /// [`Tx::alloc_bytes`] inside the transaction's state.
    fn alloc_in(&self, s: &mut TxState, inner: &Inner, size: u64, slot: u64) -> Result<u64> {
        let class = cached_class(size);
        s.grow_record(redo::entry_size(8), slot)?;
        let publish = |chunk, class| inner.publish_run(chunk, class);
        let taken = match class {
            Some(class) => {
                LOCAL.with_borrow_mut(|l| cached_reservation(&mut l.caches, self.heap(), class))
            }
            None => inner.with_space(|| inner.alloc.alloc(&inner.pool, size, &publish)),
        };
        let (reservation, op) = match taken {
            Ok(taken) => taken,
            Err(e) => {
                s.record_len -= redo::entry_size(8);
                return Err(e);
            }
        };
        s.add_fresh(reservation);
        if mnemo_pmem::mutant::active("alloc.skip_bitmap") {
            return Ok(reservation.offset);
        }
        // Allocations from the same bitmap word share one entry (a rollback puts the
        // entry's mask back as it was at the savepoint: `Marks::last_meta`).
        if let (MetaOp::Or(word, mask), Some(MetaOp::Or(last, last_mask))) = (op, s.meta.last_mut())
        {
            if *last == word {
                *last_mask |= mask;
                s.record_len -= redo::entry_size(8);
                return Ok(reservation.offset);
            }
        }
        s.meta.push(op);
        Ok(reservation.offset)
    }

    /// Free the object at `ptr` when the transaction commits.
    pub fn free<T>(&self, ptr: PPtr<T>) -> Result<()> {
        self.free_offset(ptr.offset())
    }

    /// Free the object at `offset` when the transaction commits.
    ///
    /// Errors: `InvalidFree` (not the start of a live allocation, or already freed),
    /// `TransactionTooLarge`, `Closed`.
    pub fn free_offset(&self, offset: u64) -> Result<()> {
        let slot = self.inner().geometry.slot_size();
        self.state(|s, inner| {
            s.check_record(s.record_len + redo::entry_size(8), slot)?;
            let own = s.own(offset);
            let (pending, op) = inner.alloc.free(&inner.pool, offset, own)?;
            s.record_len += redo::entry_size(8);
            if mnemo_pmem::mutant::active("heap.free_before_commit") {
                // Broken: the space goes back to the allocator at once, before the freeing
                // record commits (or the durable horizon passes it): another thread may
                // allocate it while the free may still not happen.
                inner.commit_frees(&[pending]);
            } else {
                s.frees.push(pending);
            }
            s.meta.push(op);
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

    /// Run `hook` if the transaction aborts (or rolls back past this point).
    pub(crate) fn on_abort(&self, hook: impl FnOnce(&Inner) + 'static) -> Result<()> {
        self.state(|s, _| {
            s.on_abort.push(Box::new(hook));
            Ok(())
        })
    }
}

impl Tx<'static> {
    pub(crate) fn begin_owned(heap: &Heap) -> Result<Tx<'static>> {
        Tx::start(HeapRef::Owned(heap.clone()))
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.state.get_mut().take() {
            abort_state(self.heap().inner(), state);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::TxState;
    use crate::alloc::Reservation;

    /// The bytes the pieces say were written, checked for order and overlap.
    fn logged(state: &TxState) -> BTreeMap<u64, u8> {
        let mut out = BTreeMap::new();
        let mut end = 0;
        for (&key, p) in &state.pieces {
            assert_eq!(key, p.offset, "a piece filed under another offset");
            assert!(p.offset >= end, "pieces overlap or are out of order");
            assert!(p.len > 0, "an empty piece");
            end = p.end();
            for (i, &b) in state.data[p.pos..p.pos + p.len].iter().enumerate() {
                out.insert(p.offset + i as u64, b);
            }
        }
        out
    }

    fn write_strategy() -> impl Strategy<Value = (u64, usize, u8)> {
        // Offsets over 4 MiB (the line filter's 16 Ki slots alias every 1 MiB), mostly small
        // writes near each other, some long ones (past the filter's span limit).
        (
            prop_oneof![0u64..4096, 0u64..(4 << 20)],
            prop_oneof![4 => 1usize..=16, 1 => 1usize..=9000],
            any::<u8>(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        /// Every read of the transaction's view (pool bytes patched by `overlay`) matches a
        /// byte map of the writes, with the line filter answering for most of them; and a
        /// rebuild from a cut of the write log matches the map of that prefix.
        #[test]
        fn pieces_match_a_byte_map(
            writes in proptest::collection::vec(write_strategy(), 1..120),
            probes in proptest::collection::vec((0u64..(4 << 20) + 9000, 1usize..200), 1..40),
            cut in 0usize..120,
        ) {
            let mut state = TxState::default();
            state.reset(1);
            let mut model = BTreeMap::new();
            // A savepoint before write `cut`: later writes may not overwrite older bytes in
            // place, and rolling back to it cuts the write log there.
            let cut = cut % writes.len();
            let mut saved = None;
            for (k, &(offset, len, value)) in writes.iter().enumerate() {
                if k == cut {
                    let marks = state.marks();
                    state.savepoints.push(marks);
                    saved = Some((marks, model.clone()));
                }
                let bytes: Vec<u8> = (0..len).map(|i| value.wrapping_add(i as u8)).collect();
                state.put(offset, &bytes, u64::MAX).expect("no capacity limit");
                for (i, &b) in bytes.iter().enumerate() {
                    model.insert(offset + i as u64, b);
                }
            }
            prop_assert_eq!(&logged(&state), &model);
            let check = |state: &TxState, model: &BTreeMap<u64, u8>| -> Result<(), TestCaseError> {
                for &(offset, len) in &probes {
                    let mut out = vec![0xEEu8; len];
                    state.overlay(offset, &mut out);
                    for (i, &b) in out.iter().enumerate() {
                        let want = model.get(&(offset + i as u64)).copied().unwrap_or(0xEE);
                        prop_assert_eq!(b, want, "byte {} of a read at {:#x}", i, offset);
                    }
                }
                Ok(())
            };
            check(&state, &model)?;
            // Rolling back: the write log and the bytes cut at the savepoint, the index rebuilt.
            let (marks, before) = saved.expect("the savepoint was taken");
            state.savepoints.pop();
            state.cut_log(&marks);
            prop_assert_eq!(&logged(&state), &before);
            check(&state, &before)?;
        }
    }

    #[derive(Clone, Debug)]
    enum FreshOp {
        /// Allocate `size` bytes `gap` bytes past the previous allocation (below it when
        /// `down`: the allocator hands out space in no particular order).
        Alloc {
            gap: u64,
            size: u64,
            down: bool,
        },
        Mark,
        /// Roll back to the mark `k % marks`, if any.
        Rollback(usize),
        /// Ask about a range inside allocation `k % allocations`, inside one rolled back, or
        /// anywhere.
        Inside {
            k: usize,
            at: u64,
            len: u64,
        },
        Dropped {
            k: usize,
            at: u64,
        },
        Anywhere {
            offset: u64,
            len: u64,
        },
    }

    fn fresh_op() -> impl Strategy<Value = FreshOp> {
        prop_oneof![
            6 => (0u64..20_000, prop_oneof![9 => 1u64..=600, 1 => 1u64..=(300 << 10)], any::<bool>())
                .prop_map(|(gap, size, down)| FreshOp::Alloc { gap, size, down }),
            1 => Just(FreshOp::Mark),
            1 => any::<usize>().prop_map(FreshOp::Rollback),
            6 => (any::<usize>(), any::<u64>(), 1u64..=64)
                .prop_map(|(k, at, len)| FreshOp::Inside { k, at, len }),
            2 => (any::<usize>(), any::<u64>()).prop_map(|(k, at)| FreshOp::Dropped { k, at }),
            4 => (0u64..(64 << 20), 1u64..=64).prop_map(|(offset, len)| FreshOp::Anywhere { offset, len }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// `fresh` names the allocation that holds a range, and `own` the one that starts at
        /// an offset, as a scan of a list of the live allocations does: over more allocations
        /// than the scan limit (the index, brought up to date lazily), with allocations rolled
        /// back (dropped from the index), large ones (the page filter's "everything") and ranges
        /// in no allocation (the page filter's "no").
        #[test]
        fn fresh_finds_what_a_scan_finds(ops in proptest::collection::vec(fresh_op(), 1..200)) {
            let mut state = TxState::default();
            state.reset(1);
            let mut live: Vec<(u64, u64)> = Vec::new();
            let mut marks: Vec<usize> = Vec::new();
            let mut dropped: Vec<(u64, u64)> = Vec::new();
            // Allocations go up from 32 MiB and down from there, never overlapping.
            let (mut top, mut bottom) = (32u64 << 20, 32u64 << 20);
            let scan = |live: &[(u64, u64)], offset: u64, len: u64| {
                live.iter().position(|&(o, s)| o <= offset && offset + len <= o + s)
            };
            for op in ops {
                match op {
                    FreshOp::Alloc { gap, size, down } => {
                        let offset = if down && bottom > gap + size {
                            bottom -= gap + size;
                            bottom
                        } else {
                            top += gap;
                            top += size;
                            top - size
                        };
                        state.add_fresh(Reservation::for_test(offset, size));
                        live.push((offset, size));
                    }
                    FreshOp::Mark => marks.push(live.len()),
                    FreshOp::Rollback(k) if !marks.is_empty() => {
                        let keep = marks[k % marks.len()];
                        marks.truncate(k % marks.len() + 1);
                        let mut each = 0;
                        state.truncate_allocs(keep, |_| each += 1);
                        prop_assert_eq!(each, live.len() - keep);
                        dropped.extend(live.drain(keep..));
                    }
                    FreshOp::Rollback(_) => {}
                    FreshOp::Inside { k, at, len } if !live.is_empty() => {
                        let (o, s) = live[k % live.len()];
                        let offset = o + at % s;
                        prop_assert_eq!(state.fresh(offset, len), scan(&live, offset, len));
                        prop_assert!(state.own(o), "the start of a live allocation");
                        prop_assert_eq!(state.own(offset), live.iter().any(|&(o, _)| o == offset));
                    }
                    FreshOp::Inside { .. } => {}
                    FreshOp::Dropped { k, at } if !dropped.is_empty() => {
                        let (o, s) = dropped[k % dropped.len()];
                        let offset = o + at % s;
                        prop_assert_eq!(state.fresh(offset, 1), None);
                        prop_assert!(!state.own(o), "the start of an allocation rolled back");
                    }
                    FreshOp::Dropped { .. } => {}
                    FreshOp::Anywhere { offset, len } => {
                        prop_assert_eq!(state.fresh(offset, len), scan(&live, offset, len));
                        prop_assert_eq!(state.own(offset), live.iter().any(|&(o, _)| o == offset));
                    }
                }
            }
        }
    }
}
