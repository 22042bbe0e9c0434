//! Recovery of the lanes at open: find the valid records, judge their check entries, replay
//! the ones above the durable horizon in sequence order, and hand back the lanes.
//!
//! 1. Read every slot of every lane; keep the records whose header, checksum and framing
//!    hold; clear the header line of a slot that holds bytes but no valid record (a torn
//!    record: sequence numbers restart after the largest valid one, and a later record torn
//!    the right way must not complete it).
//! 2. `H = max(horizon word, every record's horizon)`; the horizon word and the checked word
//!    above `max seq + 1` are `Corrupt`.
//! 3. For records with `seq >= H`: judge their check entries on the image as found, replay
//!    the committed ones in `seq` order, persist them with the cleared torn headers.
//! 4. Set the horizon word to `max seq + 1`: nothing found is replayed again; the counter
//!    continues after `max seq`.

use mnemo_pmem::{ByteRange, Pool, SyncKind, SyncPoint};

use super::lanes::{LaneStart, Lanes};
use super::ranges::cap_ranges;
use super::record::{
    apply, atomic_word, checks_hold, checks_overwritten, decode, header_len, RECORD_HEADER,
};
use crate::error::{Error, Result};
use crate::layout::Geometry;

/// Replay the committed records that may not have been applied; returns the lanes, ready.
pub(crate) fn recover(pool: &Pool, geometry: &Geometry) -> Result<Lanes> {
    let capacity = geometry.slot_size();
    let mut records = Vec::new();
    // Headers of torn records, cleared in place: durable with the next sync point below.
    let mut cleared: Vec<ByteRange> = Vec::new();
    let mut starts = vec![LaneStart::new(geometry.lane_slots); geometry.lane_count as usize];
    for lane in 0..geometry.lane_count {
        let start = &mut starts[lane as usize];
        let mut latest = 0u64;
        let slots = geometry.lane_slots as u64;
        for k in 0..slots {
            let slot = geometry.slot_offset(lane, k);
            let mut head = [0u8; RECORD_HEADER];
            pool.read(slot, &mut head)?;
            let record = match header_len(&head, capacity as usize) {
                Some(len) => {
                    let mut bytes = vec![0u8; len];
                    pool.read(slot, &mut bytes)?;
                    decode(bytes)
                }
                None => None,
            };
            match record {
                Some(record) => {
                    start.slot_seq[k as usize] = record.seq;
                    if record.seq >= latest {
                        latest = record.seq;
                        start.next_slot = (k + 1) % slots;
                    }
                    records.push(record);
                }
                None if head.iter().any(|&b| b != 0) => {
                    // A torn record (its commit never completed). Clear its header before
                    // anything is written into this slot again: sequence numbers restart
                    // after the largest *valid* one, so a later record torn the right way
                    // could otherwise supply exactly the words this one misses and
                    // resurrect a transaction this recovery rolled back.
                    pool.write(slot, &[0u8; 64])?;
                    cleared.push(ByteRange::new(slot, 64));
                }
                None => {}
            }
        }
    }
    let max_seq = records.iter().map(|r| r.seq).max().unwrap_or(0);
    let word_at = geometry.horizon_word_offset();
    let mut word_bytes = [0u8; 8];
    pool.read(word_at, &mut word_bytes)?;
    let word = u64::from_le_bytes(word_bytes);
    if word > max_seq + 1 {
        // The word claims records that are nowhere: believing it could skip committed ones.
        return Err(Error::Corrupt(format!(
            "heap horizon word {word} exceeds the largest redo record found ({max_seq}) + 1"
        )));
    }
    let horizon = records
        .iter()
        .map(|r| r.horizon)
        .max()
        .unwrap_or(0)
        .max(word);
    records.retain(|r| r.seq >= horizon && r.count > 0);
    records.sort_by_key(|r| r.seq);
    let zones = geometry.zones_offset;
    let toc = (geometry.toc_offset, geometry.lanes_offset);
    let size = pool.size();
    let allowed = |o: u64, l: u64| {
        o.checked_add(l)
            .is_some_and(|end| (o >= toc.0 && end <= toc.1) || (o >= zones && end <= size))
    };
    // Which of them committed: a record's check entries (in-place bytes of its fresh
    // allocations) are read on the image as found, before anything is replayed. A recovery
    // interrupted after some replay judges again on a half-replayed image, and may only
    // reach the same verdicts: replay changes a record's checked bytes only through a later
    // record that writes into them, which proves the commit (`checks_overwritten`); an
    // earlier record above the horizon cannot write there, since the space is reused only
    // after the horizon passes its freeing (docs/design/durability-sites.md). The checked
    // word (records below it committed), which earlier versions of recovery persisted, is
    // still honoured: sequence numbers continue above it, so it stays true.
    let checked_at = geometry.checked_word_offset();
    pool.read(checked_at, &mut word_bytes)?;
    let checked = u64::from_le_bytes(word_bytes);
    if checked > max_seq + 1 {
        return Err(Error::Corrupt(format!(
            "heap checked word {checked} exceeds the largest redo record found ({max_seq}) + 1"
        )));
    }
    let mut verdicts = Vec::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        // A later record that writes into the checked bytes proves the commit: its
        // transaction knew the object, which nobody can before the commit returns. Those
        // bytes changed after a committed record; skipping it would let replays of older
        // records roll back its other effects.
        let holds = record.seq < checked
            || checks_hold(pool, &record.bytes, &allowed)
            || checks_overwritten(&record.bytes, &records[i + 1..]);
        if !holds {
            tracing::info!(
                seq = record.seq,
                "record's in-place bytes do not match: it never committed"
            );
        }
        verdicts.push(holds);
    }
    let mut ranges: Vec<ByteRange> = Vec::new();
    let mut replayed = 0;
    for (record, holds) in records.iter().zip(verdicts) {
        if holds {
            apply(pool, &record.bytes, &allowed, &mut ranges)?;
            replayed += 1;
        }
    }
    // One sync point over every replayed range and the cleared torn headers (durable before
    // recovery returns, so before any new record can be written into their slots).
    ranges.append(&mut cleared);
    mnemo_pmem::durable_site!("heap.recover_replay", sync_capped(pool, &mut ranges))?;
    if replayed > 0 {
        tracing::info!(
            replayed,
            horizon,
            max_seq,
            "heap recovery replayed redo records"
        );
    }
    // Everything found is applied and durable: the horizon word says so, and no record found
    // is replayed again (this replaces a retire record; the torn slots' headers, cleared
    // above, become durable with it).
    let next = max_seq + 1;
    // (When the word is already right, the sync point above made everything durable.)
    if word != next {
        atomic_word(pool, word_at)?.store(next, std::sync::atomic::Ordering::Release);
        mnemo_pmem::durable_site!(
            "heap.recover_horizon",
            pool.sync(&SyncPoint::new(
                SyncKind::Metadata,
                &[ByteRange::new(word_at, 8)],
            ))
        )?;
    }
    Ok(Lanes::new(&starts, next, next))
}

/// One metadata sync point over `ranges`, merged into fewer ranges first if there are more
/// than a sync point may name (the merged ranges cover the same bytes and more).
fn sync_capped(pool: &Pool, ranges: &mut Vec<ByteRange>) -> Result<()> {
    cap_ranges(ranges, mnemo_pmem::limits::GMSYNC_RANGES_MAX);
    pool.sync(&SyncPoint::new(SyncKind::Metadata, ranges))?;
    Ok(())
}
