//! The gmsync journal: what makes [`crate::Pool::gmsync`] all-or-nothing for ranges that a
//! program updates again and again (a log's size, a record it rewrites in place).
//!
//! The stores a gmsync publishes were made *before* the call, and the CPU may write any of
//! their cache lines back at any moment: nothing done inside the call can take such an early
//! write-back back; only a copy taken *earlier* can. So each gmsync copies the current
//! contents of its ranges into a *record* in one of two journal slots (written alternately),
//! and makes the record and the ranges durable with one sync point. At open, the newest valid
//! record is applied again. After a crash:
//! * past the sync point: the record re-applies exactly what the call made durable;
//! * before it: the new record is incomplete (its checksum fails) and the previous one is
//!   applied, which puts back, for every range the *previous* gmsync named, the contents it
//!   made durable, even where the CPU had already written newer bytes back.
//!
//! Ranges the previous gmsync did not name have no earlier copy: their bytes hold, per
//! aligned 8-byte word, old or new values (as after any crash before a sync point). A record
//! stops applying to bytes something else makes durable: any other sync point naming them
//! first zeroes the older slot's header (a sync point of its own), then the newer one's in
//! that same sync point (`Journal::releases`), so recovery never puts older bytes back over
//! newer durable ones.
//!
//! Record (little-endian; byte table in `docs/design/media-format.md`):
//! ```text
//! 0   magic  u64  "MNEMOGMS"
//! 8   seq    u64  1, 2, ...: the newest valid record wins
//! 16  len    u32  bytes of the record, header included (a multiple of 8)
//! 20  count  u32  entries
//! 24  crc    u32  CRC-32C of bytes 8..24 and 32..len
//! 28  zero   u32
//! 32  entries: offset u64, len u64, bytes (zero-padded to 8)
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::limits::{JOURNAL_OFFSET, JOURNAL_SLOT_SIZE};
use crate::sync::ByteRange;

/// Record magic.
pub const MAGIC: [u8; 8] = *b"MNEMOGMS";
/// Record header bytes.
pub const HEADER: usize = 32;

/// Bytes a record for `ranges` takes.
pub fn record_len(ranges: &[ByteRange]) -> u64 {
    HEADER as u64
        + ranges
            .iter()
            .map(|r| 16 + r.len.next_multiple_of(8))
            .sum::<u64>()
}

/// Pool offset of slot `slot` (0 or 1).
pub fn slot_offset(slot: u64) -> u64 {
    JOURNAL_OFFSET + slot * JOURNAL_SLOT_SIZE
}

/// Encode a record of `entries` (ranges with their current bytes) as number `seq`.
pub fn encode(seq: u64, entries: &[(ByteRange, &[u8])]) -> Vec<u8> {
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

/// The newest valid record of the two slots (`both`: the journal's bytes) and its slot.
pub fn newest(both: &[u8]) -> Option<(u64, Record<'_>)> {
    let (first, second) = both.split_at(both.len().min(JOURNAL_SLOT_SIZE as usize));
    [(0u64, decode(first)), (1, decode(second))]
        .into_iter()
        .filter_map(|(slot, d)| d.map(|d| (slot, d)))
        .max_by_key(|(_, (seq, _))| *seq)
}

/// The volatile side of a pool's journal.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    /// Whether a record may put bytes back (`State::live` is not empty): one load on every
    /// sync point's path, the lock only when set.
    live: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Sequence number of the newest valid record (0: none).
    pub seq: u64,
    /// Slot the next record goes into.
    pub next_slot: u64,
    /// Ranges of the newest valid record: the bytes recovery would put back.
    pub live: Vec<ByteRange>,
}

impl Journal {
    /// The state, locked (gmsync calls are serialised by it).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record that `state.live` changed.
    pub fn publish(&self, state: &State) {
        self.live.store(!state.live.is_empty(), Ordering::Release);
    }

    /// If the newest record would put back bytes of one of `ranges`: the headers to zero,
    /// `(older, newer)`, and the live state is cleared. The older record must be invalid
    /// before the newer one is: zeroing both in one fence could leave the newer one torn
    /// (invalid) and the older one whole, and recovery would apply the *older* record, putting
    /// back bytes the newer one published. Cheap when no record is live (one load).
    pub fn releases<'a>(
        &self,
        ranges: impl IntoIterator<Item = &'a ByteRange>,
    ) -> Option<(ByteRange, ByteRange)> {
        if !self.live.load(Ordering::Acquire) {
            return None;
        }
        let mut state = self.lock();
        let hit = ranges
            .into_iter()
            .any(|r| state.live.iter().any(|l| overlaps(l, r)));
        if !hit {
            return None;
        }
        state.live.clear();
        self.publish(&state);
        // The next record goes into the older record's slot.
        let header = |slot| ByteRange::new(slot_offset(slot), HEADER as u64);
        Some((header(state.next_slot), header(state.next_slot ^ 1)))
    }
}

fn overlaps(a: &ByteRange, b: &ByteRange) -> bool {
    a.offset < b.end() && b.offset < a.end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_damage() {
        let data = [b"hello".as_slice(), &7u64.to_le_bytes()];
        let entries = vec![
            (ByteRange::new(4096, 5), data[0]),
            (ByteRange::new(8192, 8), data[1]),
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
