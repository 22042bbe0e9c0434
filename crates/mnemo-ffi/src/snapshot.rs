//! The gmsync snapshot: what makes `mnemo_gmsync` all-or-nothing for ranges that a program
//! updates again and again (a log's size, a record it rewrites).
//!
//! Each gmsync copies the current contents of its ranges into a *snapshot record* in the
//! reserved region [`REGION`], and makes the record and the ranges durable with one fence
//! (one sync point). At open, the newest valid record is applied again. So:
//!
//! * a crash after the fence: the record re-applies exactly what the call made durable;
//! * a crash before it: the new record is incomplete (its checksum fails) and the previous
//!   record is applied instead, which puts back, for every range the *previous* gmsync
//!   named, the contents it made durable: raw stores made to those bytes since then are
//!   rolled back even if the CPU had already written some of them back on its own.
//!
//! Ranges that the previous gmsync did not name have no earlier copy: their raw stores may
//! reach media partly before the commit point (as with any plain store). A record stops
//! applying to bytes that something else made durable later: `mnemo_msync` of them, a
//! transaction writing them, a free of the memory holding them invalidate it first.
//!
//! Record (in one of two slots of [`SLOT_SIZE`] bytes, written alternately; little-endian):
//! ```text
//! 0   magic  u64  "MNEMOGMS"
//! 8   seq    u64  1, 2, ...: the newest valid record wins
//! 16  len    u32  bytes of the record, header included
//! 20  count  u32  entries
//! 24  crc    u32  CRC-32C of bytes 8..24 and 32..len
//! 28  zero   u32
//! 32  entries: offset u64, len u64, bytes (padded to 8)
//! ```

use mnemo_pmem::ByteRange;

use crate::error::{code, Failure, Result};
use crate::handle::{lock, PoolEntry};

/// Name of the region holding the two record slots (names starting "mnemo." are reserved).
pub const REGION: &str = "mnemo.ffi.gmsync";
/// Bytes of one slot: the largest record, so the most a gmsync may name (with overhead).
pub const SLOT_SIZE: u64 = 64 * 1024;
/// Record header bytes.
pub const HEADER: usize = 32;
/// Record magic.
pub const MAGIC: [u8; 8] = *b"MNEMOGMS";

/// Bytes a record for `ranges` takes.
pub fn record_len(ranges: &[ByteRange]) -> u64 {
    HEADER as u64
        + ranges
            .iter()
            .map(|r| 16 + r.len.next_multiple_of(8))
            .sum::<u64>()
}

/// The volatile side of the snapshot of one pool.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Offset of [`REGION`], once it exists.
    area: Option<u64>,
    /// Sequence number of the newest valid record (0: none).
    seq: u64,
    /// Slot the next record goes into.
    next_slot: u64,
    /// Ranges of the newest valid record: the bytes recovery would put back.
    live: Vec<ByteRange>,
}

fn overlaps(a: &ByteRange, b: &ByteRange) -> bool {
    a.offset < b.end() && b.offset < a.end()
}

fn encode(seq: u64, entries: &[(ByteRange, Vec<u8>)]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER];
    for (r, bytes) in entries {
        buf.extend_from_slice(&r.offset.to_le_bytes());
        buf.extend_from_slice(&r.len.to_le_bytes());
        buf.extend_from_slice(bytes);
        buf.resize(buf.len().next_multiple_of(8), 0);
    }
    let len = buf.len() as u32;
    buf[0..8].copy_from_slice(&MAGIC);
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..20].copy_from_slice(&len.to_le_bytes());
    buf[20..24].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    let crc = checksum(&buf);
    buf[24..28].copy_from_slice(&crc.to_le_bytes());
    buf
}

fn checksum(record: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&record[8..24]), &record[HEADER..])
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A decoded record: its sequence number and (range, bytes) entries.
pub type Record<'a> = (u64, Vec<(ByteRange, &'a [u8])>);

/// Decode a slot: the record if it holds a complete, valid one. Never panics.
pub fn decode(slot: &[u8]) -> Option<Record<'_>> {
    if slot.len() < HEADER || slot[0..8] != MAGIC {
        return None;
    }
    let seq = word(slot, 8);
    let len = u32::from_le_bytes(slot[16..20].try_into().ok()?) as usize;
    let count = u32::from_le_bytes(slot[20..24].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(slot[24..28].try_into().ok()?);
    if len < HEADER
        || len > slot.len()
        || len % 8 != 0
        || slot[28..32] != [0; 4]
        || checksum(&slot[..len]) != crc
    {
        return None;
    }
    let mut entries = Vec::with_capacity(count.min(1024));
    let mut at = HEADER;
    for _ in 0..count {
        if at + 16 > len {
            return None;
        }
        let range = ByteRange::new(word(slot, at), word(slot, at + 8));
        let end = (at + 16).checked_add(usize::try_from(range.len).ok()?)?;
        if end > len {
            return None;
        }
        entries.push((range, &slot[at + 16..end]));
        at = end.next_multiple_of(8);
    }
    (at == len).then_some((seq, entries))
}

impl Snapshot {
    /// Whether recovery would put bytes of `range` back.
    pub fn covers(&self, range: &ByteRange) -> bool {
        self.live.iter().any(|r| overlaps(r, range))
    }
}

/// At open: apply the newest valid record again, and load the volatile state.
pub fn recover(entry: &PoolEntry) -> Result<()> {
    let heap = &entry.heap;
    let Some((area, size)) = heap.region(REGION)? else {
        return Ok(());
    };
    if size != 2 * SLOT_SIZE {
        return Err(Failure::new(
            code::ECORRUPT,
            format!(
                "the reserved region {REGION:?} has {size} bytes, not {}",
                2 * SLOT_SIZE
            ),
        ));
    }
    let mut bytes = vec![0u8; size as usize];
    heap.pool().read(area, &mut bytes)?;
    let (first, second) = bytes.split_at(SLOT_SIZE as usize);
    let best = [(0u64, decode(first)), (1, decode(second))]
        .into_iter()
        .filter_map(|(slot, d)| d.map(|d| (slot, d)))
        .max_by_key(|(_, (seq, _))| *seq);
    let mut state = lock(&entry.snapshot);
    state.area = Some(area);
    let Some((slot, (seq, entries))) = best else {
        return Ok(());
    };
    for (range, data) in &entries {
        crate::sync::check_data(entry, range.offset, range.len).map_err(|f| {
            Failure::new(
                code::ECORRUPT,
                format!("gmsync snapshot record {seq}: {}", f.message),
            )
        })?;
        heap.pool().write(range.offset, data)?;
        heap.pool().flush(range.offset, range.len)?;
    }
    heap.pool().drain()?;
    state.seq = seq;
    state.next_slot = slot ^ 1;
    state.live = entries.iter().map(|(r, _)| *r).collect();
    Ok(())
}

/// Make the record unable to put back any byte of `ranges` (zero both slots' headers, one
/// fence), if it covers one of them. Call before something else makes those bytes durable.
///
/// The whole header, not only the magic: a later record torn while it is written into the
/// slot could bring back just the magic word, and with the old seq, length and checksum
/// still in place the old record would decode as valid again (found by the simulator: the
/// third gmsync of a word torn this way put back the first one's value).
pub fn release(entry: &PoolEntry, ranges: &[ByteRange]) -> Result<()> {
    let mut state = lock(&entry.snapshot);
    if !ranges.iter().any(|r| state.covers(r)) {
        return Ok(());
    }
    let Some(area) = state.area else {
        return Ok(());
    };
    let pool = entry.heap.pool();
    for slot in 0..2 {
        let at = area + slot * SLOT_SIZE;
        pool.write(at, &[0u8; HEADER])?;
        pool.flush(at, HEADER as u64)?;
    }
    pool.drain()?;
    state.live.clear();
    Ok(())
}

/// `mnemo_gmsync` over `ranges` (validated, non-empty): record, then one sync point.
pub fn gmsync(entry: &PoolEntry, ranges: &[ByteRange]) -> Result<()> {
    let needed = record_len(ranges);
    if needed > SLOT_SIZE {
        return Err(Failure::new(
            code::ETXTOOBIG,
            format!(
                "the ranges need a snapshot record of {needed} bytes; at most {SLOT_SIZE} fit (split the call)"
            ),
        ));
    }
    let area = ensure_area(entry)?;
    let pool = entry.heap.pool();
    let mut state = lock(&entry.snapshot);
    let mut entries = Vec::with_capacity(ranges.len());
    for r in ranges {
        let mut bytes = vec![0u8; r.len as usize];
        pool.read(r.offset, &mut bytes)?;
        entries.push((*r, bytes));
    }
    let seq = state.seq + 1;
    let record = encode(seq, &entries);
    let slot = area + state.next_slot * SLOT_SIZE;
    if !mnemo_pmem::mutant::active("ffi.gmsync_skip_snapshot") {
        pool.copy_nodrain(slot, &record)?;
        pool.flush(slot, record.len() as u64)?;
    }
    // One sync point: flushes the ranges, then the fence that also covers the record.
    pool.gmsync(ranges)?;
    state.seq = seq;
    state.next_slot ^= 1;
    state.live = ranges.to_vec();
    Ok(())
}

/// The record region, created on first use (a transaction of its own: heap calls never join
/// the C caller's open transaction).
fn ensure_area(entry: &PoolEntry) -> Result<u64> {
    if let Some(area) = lock(&entry.snapshot).area {
        return Ok(area);
    }
    let area = entry.heap.nvalloc(REGION, 2 * SLOT_SIZE)?;
    lock(&entry.snapshot).area = Some(area);
    Ok(area)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_damage() {
        let entries = vec![
            (ByteRange::new(4096, 5), b"hello".to_vec()),
            (ByteRange::new(8192, 8), 7u64.to_le_bytes().to_vec()),
        ];
        let record = encode(9, &entries);
        assert_eq!(
            record.len() as u64,
            record_len(&[entries[0].0, entries[1].0])
        );
        let mut slot = record.clone();
        slot.resize(1024, 0xee);
        let (seq, got) = decode(&slot).expect("valid");
        assert_eq!(seq, 9);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (ByteRange::new(4096, 5), &b"hello"[..]));
        for i in 0..record.len() {
            let mut bad = slot.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_none(), "flip at {i} accepted");
        }
        assert!(decode(&slot[..record.len() - 8]).is_none());
        assert!(decode(&[0u8; 64]).is_none());
        assert!(decode(&[]).is_none());
    }
}
