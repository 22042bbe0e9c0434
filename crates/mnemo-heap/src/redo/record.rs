//! The redo record: its bytes in a lane slot, how one is built, sealed, decoded and applied.
//!
//! # Record (in a lane slot; little-endian; 8-byte aligned)
//! ```text
//! 0   magic   u32  "REDO"
//! 4   crc     u32  CRC-32C of bytes 8..len
//! 8   seq     u64  global commit sequence number (1, 2, ...)
//! 16  horizon u64  every record with seq < horizon was applied and fenced when this was built
//! 24  count   u32  number of entries
//! 28  len     u32  bytes of the record, header included
//! 32  entries: word0 = kind | len << 32, word1 = offset, payload (len bytes, padded to 8)
//!     kind 1 = data (bytes stored at offset), 2 = or (8-byte mask OR-ed into the word at
//!     offset), 3 = and-not (mask cleared from the word at offset), 4 = check (payload:
//!     len u64, CRC-32C u32 as u64, of bytes written in place before the commit)
//! ```
//!
//! Nothing here knows lanes or sequence-number order: [`crate::redo::Lanes`] decides where a
//! record goes and when; recovery ([`crate::redo::recover`]) which records are replayed.

use std::sync::atomic::{AtomicU64, Ordering};

use mnemo_pmem::cpu::crc32c_words;
use mnemo_pmem::mutant;
use mnemo_pmem::{ByteRange, Pool};

use super::ranges::push_range;
use crate::error::{Error, Result};

/// Record magic, "REDO" read as little-endian bytes.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"REDO");
/// Bytes of the record header.
pub const RECORD_HEADER: usize = 32;
/// Entry kind: data.
pub const KIND_DATA: u64 = 1;
/// Entry kind: OR a mask into a word.
pub const KIND_OR: u64 = 2;
/// Entry kind: clear a mask from a word.
pub const KIND_ANDNOT: u64 = 3;
/// Entry kind: CRC-32C of bytes written in place before the commit (fresh allocations);
/// a record whose checked bytes do not match was never committed.
pub const KIND_CHECK: u64 = 4;

/// Bytes an entry with `len` payload bytes takes in a record.
pub fn entry_size(len: usize) -> usize {
    16 + len.next_multiple_of(8)
}

/// Append entries to a record under construction (the header is filled by `seal`).
pub fn start(buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&[0; RECORD_HEADER]);
}

/// The two words that open an entry.
#[inline]
fn entry_head(kind: u64, len: usize, offset: u64) -> [u8; 16] {
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&(kind | (len as u64) << 32).to_le_bytes());
    head[8..].copy_from_slice(&offset.to_le_bytes());
    head
}

/// Append a data entry.
pub fn push_data(buf: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    if let Ok(word) = <[u8; 8]>::try_from(bytes) {
        // The common transactional store: one copy of the whole entry.
        let mut entry = [0u8; 24];
        entry[..16].copy_from_slice(&entry_head(KIND_DATA, 8, offset));
        entry[16..].copy_from_slice(&word);
        buf.extend_from_slice(&entry);
        return;
    }
    buf.extend_from_slice(&entry_head(KIND_DATA, bytes.len(), offset));
    buf.extend_from_slice(bytes);
    buf.resize(buf.len().next_multiple_of(8), 0);
}

/// Append a check entry: `len` bytes at `offset` must have CRC-32C `crc` for the record to count.
pub fn push_check(buf: &mut Vec<u8>, offset: u64, len: u64, crc: u32) {
    buf.extend_from_slice(&(KIND_CHECK | 16 << 32).to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&(crc as u64).to_le_bytes());
}

/// Append a mask entry (`KIND_OR` or `KIND_ANDNOT`).
pub fn push_mask(buf: &mut Vec<u8>, kind: u64, offset: u64, mask: u64) {
    let mut entry = [0u8; 24];
    entry[..16].copy_from_slice(&entry_head(kind, 8, offset));
    entry[16..].copy_from_slice(&mask.to_le_bytes());
    buf.extend_from_slice(&entry);
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// CRC-32C of everything after the checksum field (the magic is only a filter).
fn checksum(record: &[u8]) -> u32 {
    crc32c_words(&record[8..])
}

/// Fill in the header of a built record.
pub fn seal(buf: &mut [u8], seq: u64, horizon: u64, count: u32) {
    let len = buf.len() as u32;
    buf[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
    buf[8..16].copy_from_slice(&seq.to_le_bytes());
    buf[16..24].copy_from_slice(&horizon.to_le_bytes());
    buf[24..28].copy_from_slice(&count.to_le_bytes());
    buf[28..32].copy_from_slice(&len.to_le_bytes());
    let crc = checksum(buf);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// One decoded entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// Store bytes.
    Data(u64, &'a [u8]),
    /// OR a mask into an aligned word.
    Or(u64, u64),
    /// Clear a mask from an aligned word.
    AndNot(u64, u64),
    /// Bytes written in place before the commit: (offset, len, crc).
    Check(u64, u64, u32),
}

/// A record read from a lane that passed its checksum.
#[derive(Clone, Debug)]
pub struct Record {
    /// Sequence number.
    pub seq: u64,
    /// Horizon it carries.
    pub horizon: u64,
    /// Entry count.
    pub count: u32,
    /// The whole record.
    pub bytes: Vec<u8>,
}

/// Parse the header of a slot. Returns the record length if the header looks like one.
pub fn header_len(head: &[u8], capacity: usize) -> Option<usize> {
    if head.len() < RECORD_HEADER || word(head, 0) as u32 != RECORD_MAGIC {
        return None;
    }
    let len = u32::from_le_bytes([head[28], head[29], head[30], head[31]]) as usize;
    (RECORD_HEADER..=capacity)
        .contains(&len)
        .then_some(len)
        .filter(|l| l % 8 == 0)
}

/// Validate a complete record: checksum, then every entry's framing. Never panics.
pub fn decode(bytes: Vec<u8>) -> Option<Record> {
    let len = header_len(&bytes, bytes.len())?;
    if len != bytes.len() {
        return None;
    }
    let stored = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if stored != checksum(&bytes) && !mutant::active("redo.skip_checksum") {
        return None;
    }
    let record = Record {
        seq: word(&bytes, 8),
        horizon: word(&bytes, 16),
        count: u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]),
        bytes,
    };
    // Framing must hold for exactly `count` entries.
    let mut n = 0u32;
    for entry in entries(&record.bytes) {
        entry.ok()?;
        n += 1;
    }
    (n == record.count).then_some(record)
}

/// Iterate over the entries of a record (framing errors as `Err`).
pub fn entries(record: &[u8]) -> impl Iterator<Item = Result<Entry<'_>, ()>> {
    let mut at = RECORD_HEADER;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || at >= record.len() {
            return None;
        }
        if at + 16 > record.len() {
            failed = true;
            return Some(Err(()));
        }
        let w0 = word(record, at);
        let offset = word(record, at + 8);
        let (kind, len) = (w0 & 0xffff_ffff, (w0 >> 32) as usize);
        let end = at + 16 + len.next_multiple_of(8);
        if end > record.len() || offset.checked_add(len as u64).is_none() {
            failed = true;
            return Some(Err(()));
        }
        let payload = &record[at + 16..at + 16 + len];
        at = end;
        let entry = match kind {
            KIND_DATA => Entry::Data(offset, payload),
            KIND_OR | KIND_ANDNOT if len == 8 && offset % 8 == 0 => {
                let mask = word(payload, 0);
                if kind == KIND_OR {
                    Entry::Or(offset, mask)
                } else {
                    Entry::AndNot(offset, mask)
                }
            }
            KIND_CHECK if len == 16 => {
                let checked = word(payload, 0);
                if offset.checked_add(checked).is_none() {
                    failed = true;
                    return Some(Err(()));
                }
                Entry::Check(offset, checked, word(payload, 8) as u32)
            }
            _ => {
                failed = true;
                return Some(Err(()));
            }
        };
        Some(Ok(entry))
    })
}

/// Read-modify-write of an aligned pool word, atomically (concurrent commits of different
/// allocations may touch the same bitmap word).
pub fn update_word(pool: &Pool, offset: u64, or: u64, and_not: u64) -> Result<()> {
    let atomic = atomic_word(pool, offset)?;
    if or != 0 {
        atomic.fetch_or(or, Ordering::AcqRel);
    }
    if and_not != 0 {
        atomic.fetch_and(!and_not, Ordering::AcqRel);
    }
    Ok(())
}

/// An atomic view of the aligned pool word at `offset`, valid while the pool is open.
pub fn atomic_word(pool: &Pool, offset: u64) -> Result<&AtomicU64> {
    if offset % 8 != 0 {
        return Err(Error::InvalidArgument(format!(
            "word offset {offset:#x} is not 8-byte aligned"
        )));
    }
    let ptr = pool.ptr(offset, 8)?;
    // SAFETY: `ptr` is inside the live mapping (checked by `Pool::ptr`), which stays mapped at
    // the same address while `pool` lives (the returned borrow is tied to it); it is 8-byte
    // aligned (the mapping is page aligned, the offset a multiple of 8, checked above); and pool
    // memory is only ever accessed through raw copies or atomics, so an atomic view is sound.
    #[allow(unsafe_code)]
    let atomic = unsafe { AtomicU64::from_ptr(ptr.as_ptr().cast::<u64>()) };
    Ok(atomic)
}

/// Apply the entries of a record in place (not flushed); the changed ranges are appended to
/// `ranges`. `allowed` rejects entries outside the areas records may change. Framing errors
/// are `Corrupt` (recovery applies only records that [`decode`] accepted; a commit, the
/// record it just built). A direct walk over the words, not [`entries`]: this runs in every
/// commit.
pub fn apply(
    pool: &Pool,
    record: &[u8],
    allowed: &dyn Fn(u64, u64) -> bool,
    ranges: &mut Vec<ByteRange>,
) -> Result<()> {
    apply_split(pool, record, allowed, ranges, None)
}

/// A read-modify-write of a bitmap word left for later by [`apply_split`]: (offset, or, and-not).
pub type WordUpdate = (u64, u64, u64);

/// [`apply`], with the read-modify-write entries (bitmap masks) collected in `deferred`
/// instead of applied, when given: the caller applies them with [`apply_words`] once its
/// other work after the fence is done. They are locked instructions, and the first locked
/// instruction after a fence waits for the fence's write-backs: every plain instruction
/// before it runs in the fence's shadow.
pub fn apply_split(
    pool: &Pool,
    record: &[u8],
    allowed: &dyn Fn(u64, u64) -> bool,
    ranges: &mut Vec<ByteRange>,
    mut deferred: Option<&mut Vec<WordUpdate>>,
) -> Result<()> {
    let framing = || Error::Corrupt("redo record framing".into());
    let mut at = RECORD_HEADER;
    while at < record.len() {
        if at + 16 > record.len() {
            return Err(framing());
        }
        let w0 = word(record, at);
        let offset = word(record, at + 8);
        let (kind, len) = (w0 & 0xffff_ffff, w0 >> 32);
        let payload = at + 16;
        let end = (len as usize)
            .checked_next_multiple_of(8)
            .and_then(|padded| payload.checked_add(padded))
            .filter(|&end| end <= record.len())
            .ok_or_else(framing)?;
        at = end;
        let changed = match kind {
            KIND_CHECK if len == 16 => continue,
            KIND_DATA | KIND_OR | KIND_ANDNOT => len,
            _ => return Err(framing()),
        };
        if (kind != KIND_DATA && (len != 8 || offset % 8 != 0)) || !allowed(offset, changed) {
            return Err(Error::Corrupt(format!(
                "redo entry {kind} {offset:#x}+{len} outside the heap's areas or misaligned"
            )));
        }
        match kind {
            KIND_DATA if len == 8 && offset % 8 == 0 => {
                // One aligned word (the common transactional store): a plain store through
                // the atomic view instead of a copy call.
                atomic_word(pool, offset)?.store(word(record, payload), Ordering::Relaxed);
                pool.mark_dirty(offset, 8)?;
            }
            KIND_DATA => pool.write(offset, &record[payload..payload + len as usize])?,
            _ => {
                let mask = word(record, payload);
                let (or, and_not) = if kind == KIND_OR {
                    (mask, 0)
                } else {
                    (0, mask)
                };
                match deferred.as_deref_mut() {
                    Some(later) => later.push((offset, or, and_not)),
                    None => update_word(pool, offset, or, and_not)?,
                }
            }
        }
        push_range(ranges, offset, changed);
    }
    Ok(())
}

/// Apply the word updates [`apply_split`] deferred.
pub fn apply_words(pool: &Pool, updates: &[WordUpdate]) -> Result<()> {
    for &(offset, or, and_not) in updates {
        update_word(pool, offset, or, and_not)?;
    }
    Ok(())
}

/// Whether every check entry of a record matches the bytes on media (recovery).
pub fn checks_hold(pool: &Pool, record: &[u8], allowed: &dyn Fn(u64, u64) -> bool) -> bool {
    entries(record).all(|entry| match entry {
        Ok(Entry::Check(offset, len, crc)) => {
            if !allowed(offset, len) {
                return false;
            }
            let mut bytes = vec![0u8; len as usize];
            pool.read(offset, &mut bytes).is_ok() && crc32c::crc32c(&bytes) == crc
        }
        Ok(_) => true,
        Err(()) => false,
    })
}

/// Whether an entry of one of `later` (records after `record`) changes bytes that a check
/// entry of `record` covers.
pub fn checks_overwritten(record: &[u8], later: &[Record]) -> bool {
    let checked: Vec<(u64, u64)> = entries(record)
        .filter_map(|entry| match entry {
            Ok(Entry::Check(offset, len, _)) => Some((offset, offset.saturating_add(len))),
            _ => None,
        })
        .collect();
    if checked.is_empty() {
        return false;
    }
    later.iter().any(|other| {
        entries(&other.bytes).any(|entry| {
            let (offset, len) = match entry {
                Ok(Entry::Data(offset, bytes)) => (offset, bytes.len() as u64),
                Ok(Entry::Or(offset, _) | Entry::AndNot(offset, _)) => (offset, 8),
                _ => return false,
            };
            let end = offset.saturating_add(len);
            checked.iter().any(|&(lo, hi)| offset < hi && lo < end)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_damage() {
        let mut buf = Vec::new();
        start(&mut buf);
        push_data(&mut buf, 4096, b"hello");
        push_mask(&mut buf, KIND_OR, 8192, 0b1010);
        push_mask(&mut buf, KIND_ANDNOT, 8200, 1);
        seal(&mut buf, 7, 5, 3);
        let rec = decode(buf.clone()).expect("valid");
        assert_eq!((rec.seq, rec.horizon, rec.count), (7, 5, 3));
        let got: Vec<_> = entries(&rec.bytes).map(|e| e.unwrap()).collect();
        assert_eq!(
            got,
            vec![
                Entry::Data(4096, b"hello"),
                Entry::Or(8192, 0b1010),
                Entry::AndNot(8200, 1)
            ]
        );
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            assert!(decode(bad).is_none(), "flip at {i} accepted");
        }
        assert!(decode(buf[..buf.len() - 8].to_vec()).is_none());
        assert!(decode(vec![0; 64]).is_none());
        assert!(decode(Vec::new()).is_none());
    }
}
