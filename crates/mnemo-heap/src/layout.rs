//! On-media layout of the heap: limits, the superblock, zones and chunk-table entries, runs,
//! size classes, the table of contents. Byte layouts: `docs/design/media-format.md`.
//!
//! ```text
//! pool data offset (40960: after the pool header copies and the gmsync journal)
//! +0        superblock (one 4 KiB page; the horizon word at +512, the checked word at +576)
//! +4 KiB    table of contents: toc_entries x 128 B
//! ...       lanes: lane_count x lane_log_size (each a ring of lane_slots redo-record slots, 4 KiB aligned)
//! ...       zone 0: chunk table (4096 x 8 B = 32 KiB), then up to 4096 chunks of 256 KiB
//! ...       zone 1: ... (zones appear as the pool grows)
//! ```

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{Error, Result};

/// Chunk: the unit the data area is divided into (PMDK's size; a run of small objects is one chunk).
pub const CHUNK_SIZE: u64 = 256 * 1024;
/// Chunks per zone: one zone's chunk table is 32 KiB; a zone spans 1 GiB of data.
pub const CHUNKS_PER_ZONE: u64 = 4096;
/// Bytes of a zone's chunk table (8 bytes per chunk), page aligned.
pub const ZONE_HEADER_SIZE: u64 = CHUNKS_PER_ZONE * 8;
/// Bytes of one zone: its table plus its chunks.
pub const ZONE_SIZE: u64 = ZONE_HEADER_SIZE + CHUNKS_PER_ZONE * CHUNK_SIZE;
/// Largest single allocation: a large allocation is a run of chunks within one zone.
pub const ALLOC_SIZE_MAX: u64 = CHUNKS_PER_ZONE * CHUNK_SIZE;
/// Superblock page.
pub const SUPERBLOCK_SIZE: u64 = 4096;
/// Bytes of one table-of-contents entry (two cache lines).
pub const TOC_ENTRY_SIZE: u64 = 128;
/// Longest region name in bytes (the entry's 64-byte field keeps a terminating zero).
pub const NAME_MAX: usize = 63;
/// Default number of TOC entries: 256 named regions (32 KiB).
pub const TOC_ENTRIES_DEFAULT: u64 = 256;
/// Record slots per lane of a new heap: a lane is a ring of this many slots, written in turn.
/// Sixteen, not four: a commit must prove the record in the slot after next applied and fenced
/// before it may be overwritten, and proving it means reading every other lane's line (a
/// transfer between CPUs when another thread commits). With four slots that record is only three
/// commits old and nearly every commit scans; with sixteen, one in sixteen does
/// (`docs/design/heap-and-transactions.md`, refinement 11).
pub const LANE_SLOTS_DEFAULT: u32 = 16;
/// Record slots per lane of version 2 and 3 heaps (their superblock has no slot count).
pub const LANE_SLOTS_V3: u32 = 4;
/// Fewest record slots per lane: the deferral rule (refinement 10) needs a ring of four.
pub const LANE_SLOTS_MIN: u32 = 4;
/// Most record slots per lane (a lane's volatile slot table is inline, and measured slower
/// when it was four times this size). The smallest lane log then has slots of 1 KiB.
pub const LANE_SLOTS_MAX: u32 = 16;
/// Default number of lanes: more than the threads that commit at once on the machines we
/// target; each costs its log size of pool space.
pub const LANE_COUNT_DEFAULT: u32 = 16;
/// Default lane log: 256 KiB, a ring of sixteen 16 KiB record slots, so one transaction's
/// record may take up to 16 KiB.
pub const LANE_LOG_SIZE_DEFAULT: u64 = 256 * 1024;
/// Smallest lane log: four pages.
pub const LANE_LOG_SIZE_MIN: u64 = 16 * 1024;
/// Most lanes: bounds the recovery scan and the horizon scan at each commit.
pub const LANE_COUNT_MAX: u32 = 256;
/// Heap format version written by this build. 2: lanes are rings of four slots and the
/// superblock page holds the horizon word (version 1 had two halves per lane). 3: the same
/// layout, but a commit may leave its predecessor's application unflushed, which only a
/// recovery that replays a committed record whose checked bytes a later record changed
/// handles (see `docs/design/heap-and-transactions.md`, refinements 4 and 10): a build that
/// reads only version 2 must not open it. 4: the superblock records the slots per lane
/// (`lane_slots`, 16 by default; versions 2 and 3 have 4), which a build that reads only
/// version 3 would take for 4.
pub const HEAP_VERSION: u32 = 4;

/// The oldest heap format version this build opens (version 2 heaps keep their version and
/// commit without deferral, so the builds that wrote them can still open them).
pub const HEAP_VERSION_MIN: u32 = 2;
/// Offset of the persistent horizon word in the superblock page (its own cache line, outside
/// the checksummed superblock): every redo record with a smaller sequence number is applied
/// and durable, and is never replayed.
pub const HORIZON_WORD_OFFSET: u64 = 512;
/// Offset of the checked word in the superblock page (the next cache line): every redo
/// record with a smaller sequence number is known to have committed (recovery's verdict on
/// its check entries, made durable before it replays anything).
pub const CHECKED_WORD_OFFSET: u64 = 576;
/// The superblock's first 8 bytes.
pub const HEAP_MAGIC: [u8; 8] = *b"MNEMOHP\0";
/// Largest small (run) allocation; larger requests take whole chunks.
pub const SMALL_SIZE_MAX: u64 = 64 * 1024;
/// Allocation granularity and alignment of small objects.
pub const UNIT_ALIGN: u64 = 16;

/// The heap superblock as it lies on media.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Clone, Copy, Debug)]
#[repr(C)]
pub struct RawSuperblock {
    /// [`HEAP_MAGIC`].
    pub magic: [u8; 8],
    /// [`HEAP_VERSION`].
    pub version: U32,
    /// Number of lanes.
    pub lane_count: U32,
    /// Bytes per lane log.
    pub lane_log_size: U64,
    /// [`CHUNK_SIZE`] at creation.
    pub chunk_size: U64,
    /// [`CHUNKS_PER_ZONE`] at creation.
    pub chunks_per_zone: U64,
    /// Offset of the table of contents.
    pub toc_offset: U64,
    /// Entries of the table of contents.
    pub toc_entries: U64,
    /// Offset of lane 0.
    pub lanes_offset: U64,
    /// Offset of zone 0.
    pub zones_offset: U64,
    /// Record slots per lane (version 4 on; zero, meaning [`LANE_SLOTS_V3`], before).
    pub lane_slots: U32,
    /// Reserved, zero.
    pub reserved: [u8; 176],
    /// CRC-32C of every byte before it.
    pub checksum: U32,
}

const _: () = assert!(std::mem::size_of::<RawSuperblock>() == 256);

/// The decoded superblock: where everything is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Heap format version (of the superblock read, or [`HEAP_VERSION`] for a new heap).
    pub version: u32,
    /// Offset of the superblock (the pool's data offset).
    pub base: u64,
    /// Number of lanes.
    pub lane_count: u32,
    /// Bytes per lane log.
    pub lane_log_size: u64,
    /// Record slots per lane log.
    pub lane_slots: u32,
    /// Offset of the TOC.
    pub toc_offset: u64,
    /// TOC entries.
    pub toc_entries: u64,
    /// Offset of lane 0.
    pub lanes_offset: u64,
    /// Offset of zone 0.
    pub zones_offset: u64,
}

const fn page_up(x: u64) -> u64 {
    x.div_ceil(4096) * 4096
}

impl Geometry {
    /// The geometry of a new heap at `base`, with [`LANE_SLOTS_DEFAULT`] slots per lane (set
    /// `lane_slots` for another count).
    pub fn new(base: u64, lane_count: u32, lane_log_size: u64, toc_entries: u64) -> Geometry {
        let toc_offset = base + SUPERBLOCK_SIZE;
        let lanes_offset = page_up(toc_offset + toc_entries * TOC_ENTRY_SIZE);
        let zones_offset = page_up(lanes_offset + lane_count as u64 * lane_log_size);
        Geometry {
            version: HEAP_VERSION,
            base,
            lane_count,
            lane_log_size,
            lane_slots: LANE_SLOTS_DEFAULT,
            toc_offset,
            toc_entries,
            lanes_offset,
            zones_offset,
        }
    }

    /// Offset of the persistent horizon word.
    pub fn horizon_word_offset(&self) -> u64 {
        self.base + HORIZON_WORD_OFFSET
    }

    /// Offset of the checked word.
    pub fn checked_word_offset(&self) -> u64 {
        self.base + CHECKED_WORD_OFFSET
    }

    /// Offset of lane `i`'s log.
    pub fn lane_offset(&self, lane: u32) -> u64 {
        self.lanes_offset + lane as u64 * self.lane_log_size
    }

    /// Bytes of one record slot: the largest redo record a transaction may write.
    pub fn slot_size(&self) -> u64 {
        // `lane_slots` is a power of two (`check_lane_slots`, at create and decode): a shift,
        // not a 64-bit division, on every transactional write's size check.
        debug_assert!(self.lane_slots.is_power_of_two());
        self.lane_log_size >> self.lane_slots.trailing_zeros()
    }

    /// Offset of slot `slot` (`< lane_slots`) of lane `lane`.
    pub fn slot_offset(&self, lane: u32, slot: u64) -> u64 {
        self.lane_offset(lane) + slot * self.slot_size()
    }

    /// Offset of zone `z`.
    pub fn zone_offset(&self, zone: u64) -> u64 {
        self.zones_offset + zone * ZONE_SIZE
    }

    /// Offset of the chunk-table entry of global chunk `c`.
    pub fn chunk_entry_offset(&self, chunk: u64) -> u64 {
        self.zone_offset(chunk / CHUNKS_PER_ZONE) + (chunk % CHUNKS_PER_ZONE) * 8
    }

    /// Offset of the first byte of global chunk `c`.
    pub fn chunk_offset(&self, chunk: u64) -> u64 {
        self.zone_offset(chunk / CHUNKS_PER_ZONE)
            + ZONE_HEADER_SIZE
            + (chunk % CHUNKS_PER_ZONE) * CHUNK_SIZE
    }

    /// The chunk holding `offset`, if it lies in some chunk (not a zone header).
    pub fn chunk_of(&self, offset: u64) -> Option<u64> {
        let rel = offset.checked_sub(self.zones_offset)?;
        let zone = rel / ZONE_SIZE;
        let in_zone = (rel % ZONE_SIZE).checked_sub(ZONE_HEADER_SIZE)?;
        Some(zone * CHUNKS_PER_ZONE + in_zone / CHUNK_SIZE)
    }

    /// How many chunks fit (entirely) in a pool of `pool_size` bytes.
    pub fn chunks_in(&self, pool_size: u64) -> u64 {
        let mut chunks = 0;
        let mut zone = 0;
        loop {
            let start = self.zone_offset(zone) + ZONE_HEADER_SIZE;
            if start >= pool_size {
                return chunks;
            }
            let n = ((pool_size - start) / CHUNK_SIZE).min(CHUNKS_PER_ZONE);
            chunks += n;
            if n < CHUNKS_PER_ZONE {
                return chunks;
            }
            zone += 1;
        }
    }

    /// Pool size needed to hold `chunks` chunks.
    pub fn size_for_chunks(&self, chunks: u64) -> u64 {
        if chunks == 0 {
            return self.zones_offset + ZONE_HEADER_SIZE;
        }
        self.chunk_offset(chunks - 1) + CHUNK_SIZE
    }

    /// Encode as a superblock.
    pub fn encode(&self) -> RawSuperblock {
        let mut raw = RawSuperblock {
            magic: HEAP_MAGIC,
            version: self.version.into(),
            lane_count: self.lane_count.into(),
            lane_log_size: self.lane_log_size.into(),
            chunk_size: CHUNK_SIZE.into(),
            chunks_per_zone: CHUNKS_PER_ZONE.into(),
            toc_offset: self.toc_offset.into(),
            toc_entries: self.toc_entries.into(),
            lanes_offset: self.lanes_offset.into(),
            zones_offset: self.zones_offset.into(),
            lane_slots: if self.version >= 4 {
                self.lane_slots
            } else {
                0
            }
            .into(),
            reserved: [0; 176],
            checksum: 0.into(),
        };
        let bytes = raw.as_bytes();
        raw.checksum = crc32c::crc32c(&bytes[..bytes.len() - 4]).into();
        raw
    }

    /// Decode and validate a superblock read at `base` of a pool of `pool_size` bytes.
    pub fn decode(raw: &RawSuperblock, base: u64, pool_size: u64) -> Result<Geometry> {
        let bytes = raw.as_bytes();
        if raw.magic != HEAP_MAGIC {
            return Err(Error::NotAHeap(format!("no heap magic at offset {base}")));
        }
        if crc32c::crc32c(&bytes[..bytes.len() - 4]) != raw.checksum.get() {
            return Err(Error::Corrupt("heap superblock checksum mismatch".into()));
        }
        let version = raw.version.get();
        if !(HEAP_VERSION_MIN..=HEAP_VERSION).contains(&version) {
            return Err(Error::Corrupt(format!(
                "heap format version {version} found; this build reads versions \
                 {HEAP_VERSION_MIN} to {HEAP_VERSION} (version 1 heaps, with two-half \
                 lanes, are not converted: recreate the heap; a newer version needs a newer \
                 mnemo)"
            )));
        }
        if raw.chunk_size.get() != CHUNK_SIZE || raw.chunks_per_zone.get() != CHUNKS_PER_ZONE {
            return Err(Error::Corrupt(
                "heap chunk geometry differs from this build's".into(),
            ));
        }
        let lane_count = raw.lane_count.get();
        let lane_log_size = raw.lane_log_size.get();
        let toc_entries = raw.toc_entries.get();
        if lane_count == 0 || lane_count > LANE_COUNT_MAX {
            return Err(Error::Corrupt(format!("lane count {lane_count}")));
        }
        if !(LANE_LOG_SIZE_MIN..=(1 << 30)).contains(&lane_log_size) || lane_log_size % 4096 != 0 {
            return Err(Error::Corrupt(format!("lane log size {lane_log_size}")));
        }
        if toc_entries == 0 || toc_entries > 1 << 20 {
            return Err(Error::Corrupt(format!("toc entries {toc_entries}")));
        }
        let lane_slots = match (version, raw.lane_slots.get()) {
            (..=3, 0) => LANE_SLOTS_V3,
            (..=3, n) => {
                return Err(Error::Corrupt(format!(
                    "a version {version} superblock with a slot count ({n}) in its reserved bytes"
                )))
            }
            (_, n) => n,
        };
        check_lane_slots(lane_slots).map_err(Error::Corrupt)?;
        let geometry = Geometry {
            version,
            lane_slots,
            ..Geometry::new(base, lane_count, lane_log_size, toc_entries)
        };
        if geometry.toc_offset != raw.toc_offset.get()
            || geometry.lanes_offset != raw.lanes_offset.get()
            || geometry.zones_offset != raw.zones_offset.get()
        {
            return Err(Error::Corrupt("heap area offsets are inconsistent".into()));
        }
        if geometry.zones_offset + ZONE_HEADER_SIZE > pool_size {
            return Err(Error::Corrupt(
                "the pool is shorter than the heap's metadata".into(),
            ));
        }
        Ok(geometry)
    }
}

/// Whether a lane log may be a ring of `lane_slots` slots: a power of two in
/// [`LANE_SLOTS_MIN`]`..=`[`LANE_SLOTS_MAX`]. (Every slot is then a whole number of cache
/// lines, at least 1 KiB: lane logs are multiples of 4096 bytes, at least 16 KiB.)
pub fn check_lane_slots(lane_slots: u32) -> std::result::Result<(), String> {
    if !lane_slots.is_power_of_two() || !(LANE_SLOTS_MIN..=LANE_SLOTS_MAX).contains(&lane_slots) {
        return Err(format!(
            "lane_slots {lane_slots}: must be a power of two, {LANE_SLOTS_MIN}..={LANE_SLOTS_MAX}"
        ));
    }
    Ok(())
}

const _: () = assert!(LANE_LOG_SIZE_MIN / LANE_SLOTS_MAX as u64 >= 1024);

/// A chunk-table entry (8 bytes, little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkEntry {
    /// Free, or the continuation of a large allocation (the walk skips those).
    Free,
    /// A run of small objects of size class `class`.
    Run {
        /// Size-class index.
        class: u8,
    },
    /// First chunk of a large allocation of `chunks` chunks.
    Large {
        /// Length in chunks.
        chunks: u32,
    },
}

const KIND_FREE: u64 = 0;
const KIND_RUN: u64 = 1;
const KIND_LARGE: u64 = 2;

impl ChunkEntry {
    /// Encode: kind in bits 0..8, class in bits 8..16, chunk count in bits 32..64.
    pub fn encode(self) -> u64 {
        match self {
            ChunkEntry::Free => KIND_FREE,
            ChunkEntry::Run { class } => KIND_RUN | (class as u64) << 8,
            ChunkEntry::Large { chunks } => KIND_LARGE | (chunks as u64) << 32,
        }
    }

    /// Decode, or None if the word is no valid entry.
    pub fn decode(word: u64) -> Option<ChunkEntry> {
        match word & 0xff {
            KIND_FREE if word == 0 => Some(ChunkEntry::Free),
            KIND_RUN if word >> 16 == 0 && (((word >> 8) & 0xff) as usize) < class_count() => {
                Some(ChunkEntry::Run {
                    class: (word >> 8) as u8,
                })
            }
            KIND_LARGE if word & 0xffff_ff00 == 0 && word >> 32 != 0 => Some(ChunkEntry::Large {
                chunks: (word >> 32) as u32,
            }),
            _ => None,
        }
    }
}

/// Size classes: 16..=128 in steps of 16, then four classes per doubling (25% steps) up to
/// [`SMALL_SIZE_MAX`]. Worst-case internal fragmentation is about 20%.
pub fn class_sizes() -> &'static [u64] {
    static CLASSES: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    CLASSES.get_or_init(|| {
        let mut v: Vec<u64> = (1..=8).map(|i| i * 16).collect();
        let mut base = 128;
        while base < SMALL_SIZE_MAX {
            for q in 1..=4 {
                v.push(base + base / 4 * q);
            }
            base *= 2;
        }
        v
    })
}

/// Number of size classes.
pub fn class_count() -> usize {
    class_sizes().len()
}

/// The smallest class holding `size` bytes (`size` ≤ [`SMALL_SIZE_MAX`]).
pub fn class_for(size: u64) -> Option<u8> {
    // Sizes up to 1 KiB (the common ones) by a table per 16 bytes; larger by a search.
    static SMALL: std::sync::OnceLock<[u8; 65]> = std::sync::OnceLock::new();
    if size <= 1024 {
        let table = SMALL.get_or_init(|| {
            let sizes = class_sizes();
            std::array::from_fn(|i| sizes.partition_point(|&s| s < (i as u64 * 16).max(1)) as u8)
        });
        return Some(table[size.div_ceil(16) as usize]);
    }
    let sizes = class_sizes();
    let i = sizes.partition_point(|&s| s < size);
    (i < sizes.len()).then_some(i as u8)
}

/// Layout of a run of class `class`: (units, offset of unit 0 from the chunk start). The
/// bitmap (one bit per unit, 1 = allocated) sits at the chunk start, padded to 64 bytes.
pub fn run_layout(class: u8) -> (u64, u64) {
    let size = class_sizes()[class as usize];
    let mut units = CHUNK_SIZE / size;
    loop {
        let header = (units.div_ceil(64) * 8).next_multiple_of(64);
        let fit = (CHUNK_SIZE - header) / size;
        if fit >= units {
            return (units, header);
        }
        units = fit;
    }
}

/// Bytes of a run's bitmap (whole 8-byte words).
pub fn bitmap_words(units: u64) -> u64 {
    units.div_ceil(64)
}

/// Encode a TOC entry: name (zero padded to 64), offset, size, zero padding.
pub fn toc_entry(name: &str, offset: u64, size: u64) -> [u8; TOC_ENTRY_SIZE as usize] {
    let mut entry = [0u8; TOC_ENTRY_SIZE as usize];
    entry[..name.len()].copy_from_slice(name.as_bytes());
    entry[64..72].copy_from_slice(&offset.to_le_bytes());
    entry[72..80].copy_from_slice(&size.to_le_bytes());
    entry
}

/// Decode a TOC entry: None if empty, Err if malformed.
pub fn toc_decode(entry: &[u8]) -> Result<Option<(String, u64, u64)>> {
    if entry.len() != TOC_ENTRY_SIZE as usize {
        return Err(Error::Corrupt("short TOC entry".into()));
    }
    if entry[0] == 0 {
        return Ok(None);
    }
    let len = entry[..64].iter().position(|&b| b == 0).unwrap_or(64);
    if len > NAME_MAX {
        return Err(Error::Corrupt("TOC name without terminator".into()));
    }
    let name = std::str::from_utf8(&entry[..len])
        .map_err(|_| Error::Corrupt("TOC name is not UTF-8".into()))?;
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&entry[at..at + 8]);
        u64::from_le_bytes(b)
    };
    Ok(Some((name.to_string(), word(64), word(72))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_sorted_aligned_and_fit() {
        let sizes = class_sizes();
        assert_eq!(sizes[0], 16);
        assert_eq!(*sizes.last().unwrap(), SMALL_SIZE_MAX);
        for w in sizes.windows(2) {
            assert!(w[0] < w[1]);
            assert!(w[1] as f64 / w[0] as f64 <= 2.0);
        }
        for (i, &s) in sizes.iter().enumerate() {
            assert_eq!(s % UNIT_ALIGN, 0);
            let (units, header) = run_layout(i as u8);
            assert!(units >= 1);
            assert!(header + units * s <= CHUNK_SIZE);
            assert!(bitmap_words(units) * 8 <= header);
        }
        assert_eq!(class_for(1), Some(0));
        assert_eq!(class_for(16), Some(0));
        assert_eq!(class_for(17), Some(1));
        assert_eq!(class_for(SMALL_SIZE_MAX + 1), None);
        for size in 0..=2048u64 {
            let sizes = class_sizes();
            let expect = sizes.partition_point(|&s| s < size.max(1)) as u8;
            assert_eq!(class_for(size), Some(expect), "size {size}");
        }
    }

    #[test]
    fn chunk_entries_round_trip_and_reject_garbage() {
        for e in [
            ChunkEntry::Free,
            ChunkEntry::Run { class: 3 },
            ChunkEntry::Large { chunks: 17 },
        ] {
            assert_eq!(ChunkEntry::decode(e.encode()), Some(e));
        }
        assert_eq!(ChunkEntry::decode(7), None);
        assert_eq!(ChunkEntry::decode(KIND_RUN | 200 << 8), None);
        assert_eq!(ChunkEntry::decode(KIND_LARGE), None);
        assert_eq!(ChunkEntry::decode(u64::MAX), None);
    }

    #[test]
    fn geometry_maps_chunks_both_ways() {
        let g = Geometry::new(8192, 4, 16384, 16);
        for c in [0, 1, 4095, 4096, 9000] {
            let off = g.chunk_offset(c);
            assert_eq!(g.chunk_of(off), Some(c));
            assert_eq!(g.chunk_of(off + CHUNK_SIZE - 1), Some(c));
        }
        assert_eq!(g.chunk_of(g.zone_offset(1) + 5), None);
        assert_eq!(g.chunks_in(g.size_for_chunks(5)), 5);
        assert_eq!(g.chunks_in(g.size_for_chunks(4097)), 4097);
        let raw = g.encode();
        assert_eq!(Geometry::decode(&raw, 8192, 1 << 30).unwrap(), g);
        let mut bad = raw;
        bad.lane_count = 0.into();
        assert!(Geometry::decode(&bad, 8192, 1 << 30).is_err());
    }
}
