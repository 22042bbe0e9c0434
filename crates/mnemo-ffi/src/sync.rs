//! `mnemo_msync` and `mnemo_gmsync` over raw stores, and the retirement of redo records
//! that raw stores would otherwise race at recovery.

use mnemo_pmem::limits::{GMSYNC_RANGES_MAX, JOURNAL_SLOT_SIZE};
use mnemo_pmem::{mutant, ByteRange, SyncKind, SyncPoint};

use crate::error::{code, Failure, Result};
use crate::handle::{lock, PoolEntry};

/// Check that `offset..offset+len` lies in the heap's data area (objects and regions).
pub fn check_data(entry: &PoolEntry, offset: u64, len: u64) -> Result<()> {
    let lo = entry.heap.geometry().zones_offset;
    let size = entry.heap.pool().size();
    match offset.checked_add(len) {
        Some(end) if offset >= lo && end <= size => Ok(()),
        _ => Err(Failure::invalid(format!(
            "range {offset:#x}+{len} is outside the pool's data area ({lo:#x}..{size:#x})"
        ))),
    }
}

/// The pool offset of address `addr` (which must lie in the mapping's data area with `len`
/// bytes after it).
pub fn offset_of(entry: &PoolEntry, addr: usize, len: u64) -> Result<u64> {
    let base = entry.heap.pool().ptr(0, 0)?.as_ptr() as usize;
    let offset = addr
        .checked_sub(base)
        .ok_or_else(|| Failure::invalid(format!("address {addr:#x} is not in the pool")))?
        as u64;
    check_data(entry, offset, len)?;
    Ok(offset)
}

/// Commit one transaction built by `body` and note what it wrote as replayable.
pub fn commit_tracked(
    entry: &PoolEntry,
    written: &[ByteRange],
    body: impl FnOnce(&mnemo_heap::Tx<'_>) -> mnemo_heap::Result<()>,
) -> Result<()> {
    entry.heap.tx(body)?;
    note_committed(entry, written);
    Ok(())
}

/// Note that a commit that has just returned wrote `written` (replayable until the heap's
/// durable horizon passes it).
pub fn note_committed(entry: &PoolEntry, written: &[ByteRange]) {
    let bound = entry.heap.next_commit_seq();
    let horizon = entry.heap.durable_horizon();
    lock(&entry.replayable).committed(horizon, bound, written);
}

/// Make every redo record committed so far unreplayable: the heap raises its durable
/// horizon past every record committed so far ([`mnemo_heap::Heap::retire_committed`]).
pub fn retire(entry: &PoolEntry) -> Result<()> {
    entry.heap.retire_committed()?;
    lock(&entry.replayable).forget(entry.heap.durable_horizon());
    Ok(())
}

/// Retire if a replayable record wrote any byte of `ranges`.
pub fn retire_if_overlapping(entry: &PoolEntry, ranges: &[ByteRange]) -> Result<()> {
    let overlapping = {
        let mut replayable = lock(&entry.replayable);
        replayable.forget(entry.heap.durable_horizon());
        ranges.iter().any(|&r| replayable.overlaps(r))
    };
    if overlapping {
        retire(entry)?;
    }
    Ok(())
}

/// `mnemo_msync`: one sync point over one range.
/// The pool releases a gmsync journal record that covers some of the bytes (in the same
/// sync point); a redo record that wrote them is retired here first.
pub fn msync(entry: &PoolEntry, range: ByteRange) -> Result<()> {
    if !mutant::active("ffi.msync_skip_retire") {
        retire_if_overlapping(entry, &[range])?;
    }
    mnemo_pmem::durable_site!(
        "ffi.msync",
        entry.heap.pool().msync(range.offset, range.len)
    )?;
    Ok(())
}

/// `mnemo_gmsync`: [`mnemo_pmem::Pool::gmsync`], the ranges' current contents durable in
/// one sync point with a journal record that makes ranges updated again and again
/// all-or-nothing ([`mnemo_pmem::journal`]), after retiring redo records that wrote them.
///
/// Why a journal record of the contents and not just a redo record of this call. The stores being synced were made
/// before the call with plain stores, and the CPU may write any of their cache lines back at
/// any moment before the call: nothing done *inside* the call can undo that. A redo record of
/// the call's ranges (commit, apply, flush: two fences) therefore reaches exactly the crash
/// states that flushing the ranges and one fence reaches. What can undo early write-backs is
/// a copy taken *earlier*: the previous gmsync's record, applied again at recovery when the
/// current call did not reach its commit point. `tests/crash.rs` explores all three designs
/// under the crash simulator.
pub fn gmsync(entry: &PoolEntry, ranges: &[ByteRange]) -> Result<()> {
    if ranges.len() > GMSYNC_RANGES_MAX {
        return Err(Failure::invalid(format!(
            "{} ranges; at most {GMSYNC_RANGES_MAX} per call",
            ranges.len()
        )));
    }
    let ranges: Vec<ByteRange> = ranges.iter().copied().filter(|r| r.len > 0).collect();
    if ranges.is_empty() {
        return Ok(());
    }
    let needed = mnemo_pmem::journal::record_len(&ranges);
    if needed > JOURNAL_SLOT_SIZE {
        return Err(Failure::new(
            code::ETXTOOBIG,
            format!(
                "the ranges need a gmsync journal record of {needed} bytes; at most {JOURNAL_SLOT_SIZE} fit (split the call)"
            ),
        ));
    }
    for r in &ranges {
        check_data(entry, r.offset, r.len)?;
    }
    retire_if_overlapping(entry, &ranges)?;
    mnemo_pmem::durable_site!("ffi.gmsync", entry.heap.pool().gmsync(&ranges))?;
    Ok(())
}

/// The variant without a journal: flush the ranges, one fence (kept for the crash test that
/// compares the designs).
pub fn gmsync_one_fence(entry: &PoolEntry, ranges: &[ByteRange]) -> Result<()> {
    retire_if_overlapping(entry, ranges)?;
    mnemo_pmem::durable_site!(
        "ffi.gmsync_one_fence",
        entry
            .heap
            .pool()
            .sync(&SyncPoint::new(SyncKind::Data, ranges))
    )?;
    Ok(())
}
