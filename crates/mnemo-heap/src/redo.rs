//! Redo records and lanes: the commit protocol, and recovery.
//!
//! # Record (in a lane slot; little-endian; 8-byte aligned)
//! ```text
//! 0   magic   u32  "REDO"
//! 4   crc     u32  CRC-32C of bytes 8..len
//! 8   seq     u64  global commit sequence number (1, 2, ...)
//! 16  horizon u64  every record with seq < horizon was fully applied when this one was built
//! 24  count   u32  number of entries
//! 28  len     u32  bytes of the record, header included
//! 32  entries: word0 = kind | len << 32, word1 = offset, payload (len bytes, padded to 8)
//!     kind 1 = data (bytes stored at offset), 2 = or (8-byte mask OR-ed into the word at
//!     offset), 3 = and-not (mask cleared from the word at offset)
//! ```
//!
//! # Commit (two fences)
//! 1. Build the record, take a sequence number, copy the record into the lane's free half,
//!    flush, fence: the commit point.
//! 2. Apply the entries in place, then a sync point over the changed ranges (flush, fence).
//!
//! Each lane has two halves and alternates between them, so the lane's latest complete
//! record survives while the next one is written (a torn record fails its checksum). A
//! record is replayed at recovery only if its `seq` is at least the largest `horizon` of all
//! valid records: an applied record that later writes overwrote (a free, then the object
//! reused) is never replayed over them. See `docs/design/heap-and-transactions.md`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use mnemo_pmem::mutant;
use mnemo_pmem::{ByteRange, Pool};

use crate::error::{Error, Result};
use crate::layout::Geometry;

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
    buf.resize(RECORD_HEADER, 0);
}

/// Append a data entry.
pub fn push_data(buf: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    buf.extend_from_slice(&(KIND_DATA | (bytes.len() as u64) << 32).to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
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
    buf.extend_from_slice(&(kind | 8 << 32).to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(&mask.to_le_bytes());
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// CRC-32C of everything after the checksum field (the magic is only a filter).
fn checksum(record: &[u8]) -> u32 {
    crc32c::crc32c(&record[8..])
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
/// `ranges`. `allowed` rejects entries outside the areas records may change.
pub fn apply(
    pool: &Pool,
    record: &[u8],
    allowed: &dyn Fn(u64, u64) -> bool,
    ranges: &mut Vec<ByteRange>,
) -> Result<()> {
    for entry in entries(record) {
        let entry = entry.map_err(|()| Error::Corrupt("redo record framing".into()))?;
        let (offset, len) = match entry {
            Entry::Data(offset, bytes) => (offset, bytes.len() as u64),
            Entry::Or(offset, _) | Entry::AndNot(offset, _) => (offset, 8),
            Entry::Check(..) => continue,
        };
        if !allowed(offset, len) {
            return Err(Error::Corrupt(format!(
                "redo entry {offset:#x}+{len} outside the heap's areas"
            )));
        }
        match entry {
            Entry::Data(offset, bytes) => pool.write(offset, bytes)?,
            Entry::Or(offset, mask) => update_word(pool, offset, mask, 0)?,
            Entry::AndNot(offset, mask) => update_word(pool, offset, 0, mask)?,
            Entry::Check(..) => {}
        }
        push_range(ranges, offset, len);
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

/// Append a range, merging it with the previous one when they touch the same cache lines.
pub fn push_range(ranges: &mut Vec<ByteRange>, offset: u64, len: u64) {
    if let Some(last) = ranges.last_mut() {
        let line = |x: u64| x / 64;
        let (last_first, last_end) = (line(last.offset), line(last.end().saturating_sub(1)));
        let (first, end) = (line(offset), line((offset + len).saturating_sub(1)));
        if first <= last_end + 1 && last_first <= end + 1 {
            let start = last.offset.min(offset);
            let end = last.end().max(offset + len);
            *last = ByteRange::new(start, end - start);
            return;
        }
    }
    ranges.push(ByteRange::new(offset, len));
}

/// Reduce `ranges` to at most `max` by merging neighbours (sorted first); a sync point names
/// at most `GMSYNC_RANGES_MAX` ranges.
pub fn cap_ranges(ranges: &mut Vec<ByteRange>, max: usize) {
    if ranges.len() <= max {
        return;
    }
    ranges.sort_by_key(|r| r.offset);
    while ranges.len() > max {
        let merged: Vec<ByteRange> = ranges
            .chunks(2)
            .map(|pair| {
                let start = pair[0].offset;
                let end = pair.iter().map(ByteRange::end).max().unwrap_or(start);
                ByteRange::new(start, end - start)
            })
            .collect();
        *ranges = merged;
    }
}

/// A lane: a log of two halves, held by one committing thread at a time.
#[derive(Debug)]
#[repr(align(128))]
pub struct Lane {
    state: Mutex<LaneState>,
    /// Lower bound of the sequence number of the commit in progress (0: none).
    inflight: AtomicU64,
    /// Sequence number of the latest record written in this lane.
    last_seq: AtomicU64,
    /// Range of user data its latest record changed (lo >= hi: none).
    data_lo: AtomicU64,
    data_hi: AtomicU64,
}

/// What the holder of a lane uses.
#[derive(Debug)]
pub struct LaneState {
    /// Lane index.
    pub index: u32,
    /// Half the next record goes into.
    next_half: u64,
    /// The record being built.
    pub buf: Vec<u8>,
    /// Ranges of the sync point.
    pub ranges: Vec<ByteRange>,
}

/// All lanes, the commit sequence counter and the horizon.
#[derive(Debug)]
pub struct Lanes {
    lanes: Box<[Lane]>,
    /// Next sequence number to hand out.
    counter: AtomicU64,
    /// Largest horizon carried by a durable record.
    durable_horizon: AtomicU64,
    /// Round-robin start for threads without a lane preference.
    next_hint: AtomicUsize,
    /// Process-unique identity, for the thread-local hint.
    instance: u64,
}

thread_local! {
    // (instance, hint): a thread's choice, per instance so a new heap starts afresh
    // (deterministic lane and arena choice for the crash simulator's replays).
    static LANE_HINT: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// A held lane.
pub type LaneGuard<'a> = MutexGuard<'a, LaneState>;

impl Lanes {
    /// Lanes after recovery: `next_half[i]` is where lane i writes next; `next_seq` the first
    /// sequence number to hand out.
    pub fn new(next_half: &[u64], next_seq: u64, horizon: u64) -> Lanes {
        let lanes = next_half
            .iter()
            .enumerate()
            .map(|(i, &half)| Lane {
                state: Mutex::new(LaneState {
                    index: i as u32,
                    next_half: half,
                    buf: Vec::new(),
                    ranges: Vec::new(),
                }),
                inflight: AtomicU64::new(0),
                last_seq: AtomicU64::new(0),
                data_lo: AtomicU64::new(u64::MAX),
                data_hi: AtomicU64::new(0),
            })
            .collect();
        Lanes {
            lanes,
            counter: AtomicU64::new(next_seq),
            durable_horizon: AtomicU64::new(horizon),
            next_hint: AtomicUsize::new(0),
            instance: crate::next_instance(),
        }
    }

    /// Hold a lane: this thread's usual one if free, else any free one, else wait for the usual.
    pub fn acquire(&self) -> LaneGuard<'_> {
        let n = self.lanes.len();
        let (instance, mut hint) = LANE_HINT.with(|h| h.get());
        if instance != self.instance {
            hint = self.next_hint.fetch_add(1, Ordering::Relaxed);
            LANE_HINT.with(|h| h.set((self.instance, hint)));
        }
        let first = hint % n;
        for k in 0..n {
            let i = (first + k) % n;
            if let Ok(guard) = self.lanes[i].state.try_lock() {
                return guard;
            }
        }
        self.lanes[first]
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Every record with a smaller sequence number is fully applied (conservative).
    fn horizon(&self) -> u64 {
        let mut h = self.counter.load(Ordering::SeqCst);
        for lane in self.lanes.iter() {
            let s = lane.inflight.load(Ordering::SeqCst);
            if s != 0 && s < h {
                h = s;
            }
        }
        h
    }

    /// Commit the record built in `lane.buf` (entries after a zeroed header, `count` of
    /// them): fence 1 makes it durable, then it is applied and a sync point over the changed
    /// ranges (plus `extra`, already written in place) makes the data durable (fence 2).
    /// `data` is the range of user data it changes, for [`Lanes::conflicts`].
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &self,
        pool: &Pool,
        geometry: &Geometry,
        lane: &mut LaneState,
        count: u32,
        extra: &[ByteRange],
        data: (u64, u64),
        allowed: &dyn Fn(u64, u64) -> bool,
    ) -> Result<u64> {
        let half = geometry.lane_log_size / 2;
        if lane.buf.len() as u64 > half {
            return Err(Error::TransactionTooLarge {
                needed: lane.buf.len() as u64,
                capacity: half,
            });
        }
        let me = &self.lanes[lane.index as usize];
        me.inflight
            .store(self.counter.load(Ordering::SeqCst).max(1), Ordering::SeqCst);
        let seq = self.counter.fetch_add(1, Ordering::SeqCst);
        let horizon = if mutant::active("redo.no_horizon") {
            0
        } else {
            self.horizon()
        };
        seal(&mut lane.buf, seq, horizon, count);
        let slot = geometry.lane_offset(lane.index) + lane.next_half * half;
        let mut ranges = std::mem::take(&mut lane.ranges);
        ranges.clear();
        let result = (|| {
            if mutant::active("tx.apply_before_commit") {
                apply(pool, &lane.buf, allowed, &mut ranges)?;
            }
            for r in extra {
                pool.flush(r.offset, r.len)?;
            }
            if mutant::active("tx.skip_record_flush") {
                pool.write(slot, &lane.buf)?; // stored, never flushed
            } else {
                pool.copy_nodrain(slot, &lane.buf)?;
            }
            pool.drain()?; // fence 1: the commit point
            self.durable_horizon.fetch_max(horizon, Ordering::AcqRel);
            if !mutant::active("tx.apply_before_commit") {
                apply(pool, &lane.buf, allowed, &mut ranges)?;
            }
            ranges.extend_from_slice(extra);
            cap_ranges(&mut ranges, mnemo_pmem::limits::GMSYNC_RANGES_MAX);
            if mutant::active("tx.skip_flush") {
                pool.drain()?;
            } else {
                pool.gmsync(&ranges)?; // fence 2: the sync point
            }
            Ok(())
        })();
        lane.ranges = ranges;
        lane.next_half ^= 1;
        me.last_seq.store(seq, Ordering::Release);
        me.data_lo.store(data.0, Ordering::Release);
        me.data_hi.store(data.1, Ordering::Release);
        me.inflight.store(0, Ordering::SeqCst);
        result.map(|()| seq)
    }

    /// Whether a still-replayable record of some lane changed the word at `offset`: a
    /// non-logged store there must first make that record's replay impossible.
    pub fn conflicts(&self, offset: u64) -> Option<u64> {
        let durable = self.durable_horizon.load(Ordering::Acquire);
        self.lanes.iter().find_map(|lane| {
            let lo = lane.data_lo.load(Ordering::Acquire);
            let hi = lane.data_hi.load(Ordering::Acquire);
            let seq = lane.last_seq.load(Ordering::Acquire);
            (lo <= offset && offset < hi && seq >= durable).then_some(seq)
        })
    }

    /// Write and persist an empty record whose horizon exceeds `seq`, so that no record with
    /// a sequence number up to `seq` is ever replayed again. Waits (briefly) for commits in
    /// flight with smaller sequence numbers.
    pub fn retire(&self, pool: &Pool, geometry: &Geometry, seq: u64) -> Result<()> {
        while self.horizon() <= seq {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        let mut lane = self.acquire();
        start(&mut lane.buf);
        self.commit(pool, geometry, &mut lane, 0, &[], (u64::MAX, 0), &|_, _| {
            false
        })?;
        Ok(())
    }
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

    #[test]
    fn ranges_merge_and_cap() {
        let mut r = Vec::new();
        push_range(&mut r, 0, 8);
        push_range(&mut r, 8, 8);
        push_range(&mut r, 4096, 8);
        assert_eq!(r, vec![ByteRange::new(0, 16), ByteRange::new(4096, 8)]);
        let mut many: Vec<_> = (0..3000).map(|i| ByteRange::new(i * 1000, 8)).collect();
        cap_ranges(&mut many, 1024);
        assert!(many.len() <= 1024);
        assert_eq!(many[0].offset, 0);
        assert!(many.last().unwrap().end() >= 2999 * 1000 + 8);
    }
}
