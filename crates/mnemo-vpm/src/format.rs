//! The bytes of the persistent-memory file: configuration section, table of contents, and
//! each region's persistent page table. Every field is little-endian.
//!
//! ```text
//!  offset 0        configuration (one page; written once, at creation)
//!  offset 4096     table of contents: 64 entries of 128 bytes
//!  offset 12288    regions, in allocation order, each:
//!                    page table: one u64 per virtual page, rounded up to a page
//!                    slots: `budget` pages of persistent memory
//! ```
//!
//! Configuration (bytes 0..64 of the file):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `MNEMOVPM` |
//! | 8 | 4 | format version (1) |
//! | 12 | 4 | page size (4096) |
//! | 16 | 8 | bytes of the persistent-memory file |
//! | 24 | 4 | table-of-contents entries (64) |
//! | 28 | 4 | flags (0) |
//! | 32 | 16 | UUID of the space (the swap file carries it too) |
//! | 48 | 8 | offset of the first region (12288) |
//! | 56 | 4 | CRC-32C of bytes 0..56 |
//!
//! Table-of-contents entry (128 bytes; `state` first, so that freeing is one 8-byte store):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | state: 0 empty, 1 live, 2 freed (its space stays taken) |
//! | 8 | 8 | identifier: FNV-1a 64 of the owner name and the sequence number |
//! | 16 | 8 | allocation sequence number (per owner, from 0) |
//! | 24 | 8 | capacity in pages (the virtual size) |
//! | 32 | 8 | budget in pages (slots of persistent memory) |
//! | 40 | 8 | offset of the page table in the persistent-memory file |
//! | 48 | 8 | offset of the first slot in the persistent-memory file |
//! | 56 | 8 | offset of the region's swap area in the swap file |
//! | 64 | 1 | owner name length |
//! | 65 | 55 | owner name (UTF-8, zero padded) |
//! | 120 | 4 | CRC-32C of bytes 8..120 |
//!
//! Page-table entry (u64, written with one atomic store): 0 = never touched (reads as zero);
//! top two bits `01` = resident in slot `low 62 bits`; `10` = in swap at page `low 62 bits`
//! of the region's swap area (today always the page's own number, so the swap area is a
//! sparse image of the region). `11` is invalid.

use crate::limits::{
    CONFIG_SIZE, DATA_OFFSET, OWNER_NAME_MAX, PAGE_SIZE, TOC_ENTRIES, TOC_ENTRY_SIZE,
};

/// Magic at the start of the persistent-memory file.
pub const MAGIC: [u8; 8] = *b"MNEMOVPM";
/// Magic at the start of the swap file (its first page holds the space's UUID).
pub const SWAP_MAGIC: [u8; 8] = *b"MNEMOSWP";
/// Format version of both files.
pub const VERSION: u32 = 1;

const _: () = assert!(DATA_OFFSET % PAGE_SIZE == 0);
const _: () = assert!(PAGE_SIZE % TOC_ENTRY_SIZE == 0);
const _: () = assert!(65 + OWNER_NAME_MAX == 120);
const _: () = assert!(CONFIG_SIZE >= 64);
const _: () = assert!(TOC_ENTRIES * TOC_ENTRY_SIZE % PAGE_SIZE == 0);

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// The configuration section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bytes of the persistent-memory file.
    pub pm_bytes: u64,
    /// Identity of the space (persistent-memory file and swap file together).
    pub uuid: [u8; 16],
}

impl Config {
    /// The 64 bytes of the section.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(PAGE_SIZE as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.pm_bytes.to_le_bytes());
        b[24..28].copy_from_slice(&(TOC_ENTRIES as u32).to_le_bytes());
        b[32..48].copy_from_slice(&self.uuid);
        b[48..56].copy_from_slice(&DATA_OFFSET.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check the section; `Err` says what is wrong.
    pub fn decode(b: &[u8]) -> Result<Config, String> {
        if b.len() < 64 {
            return Err("the configuration section is cut short".into());
        }
        if b[0..8] != MAGIC {
            return Err("not a mnemo persistent-memory file (bad magic)".into());
        }
        if crc32c::crc32c(&b[0..56]) != u32_at(b, 56) {
            return Err("the configuration section's checksum does not match".into());
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(format!(
                "format version {version}; this build reads {VERSION}"
            ));
        }
        if u64::from(u32_at(b, 12)) != PAGE_SIZE
            || u64::from(u32_at(b, 24)) != TOC_ENTRIES
            || u64_at(b, 48) != DATA_OFFSET
        {
            return Err("page size or table-of-contents geometry differs from this build".into());
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[32..48]);
        Ok(Config {
            pm_bytes: u64_at(b, 16),
            uuid,
        })
    }
}

/// State of a table-of-contents entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never used (or an allocation that did not complete).
    Empty,
    /// A region.
    Live,
    /// A freed region: its persistent memory and swap area are free for a later allocation;
    /// the entry stays so that the owner's sequence numbers go on (reused by an allocation
    /// that finds no empty entry, unless it holds its owner's last number).
    Freed,
}

impl State {
    /// The state word.
    pub fn word(self) -> u64 {
        match self {
            State::Empty => 0,
            State::Live => 1,
            State::Freed => 2,
        }
    }
}

/// A table-of-contents entry: where a region's page table, slots and swap area are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TocEntry {
    /// Live or freed (empty entries decode to `None`).
    pub state: State,
    /// Identifier derived from the owner and the sequence number ([`region_id`]).
    pub id: u64,
    /// Owner name.
    pub owner: String,
    /// Allocation sequence number of the owner.
    pub seq: u64,
    /// Virtual size in pages.
    pub capacity_pages: u64,
    /// Slots of persistent memory.
    pub budget_pages: u64,
    /// Page table offset in the persistent-memory file.
    pub table_offset: u64,
    /// First slot's offset in the persistent-memory file.
    pub slots_offset: u64,
    /// Offset of the swap area in the swap file.
    pub swap_offset: u64,
}

/// The identifier of an owner's `seq`-th region: FNV-1a 64 over the owner's bytes, a zero
/// byte, and the sequence number (little-endian). Never 0.
pub fn region_id(owner: &str, seq: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in owner
        .as_bytes()
        .iter()
        .chain([0u8].iter())
        .chain(&seq.to_le_bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// Bytes of a page table for `capacity_pages` pages, rounded up to a page.
pub fn table_bytes(capacity_pages: u64) -> u64 {
    (capacity_pages * 8).next_multiple_of(PAGE_SIZE)
}

impl TocEntry {
    /// Bytes 8..128 of the entry (the state word is written separately).
    pub fn encode_body(&self) -> [u8; 120] {
        let mut e = [0u8; 128];
        e[8..16].copy_from_slice(&self.id.to_le_bytes());
        e[16..24].copy_from_slice(&self.seq.to_le_bytes());
        e[24..32].copy_from_slice(&self.capacity_pages.to_le_bytes());
        e[32..40].copy_from_slice(&self.budget_pages.to_le_bytes());
        e[40..48].copy_from_slice(&self.table_offset.to_le_bytes());
        e[48..56].copy_from_slice(&self.slots_offset.to_le_bytes());
        e[56..64].copy_from_slice(&self.swap_offset.to_le_bytes());
        let name = self.owner.as_bytes();
        let n = name.len().min(OWNER_NAME_MAX);
        e[64] = n as u8;
        e[65..65 + n].copy_from_slice(&name[..n]);
        let crc = crc32c::crc32c(&e[8..120]);
        e[120..124].copy_from_slice(&crc.to_le_bytes());
        let mut body = [0u8; 120];
        body.copy_from_slice(&e[8..128]);
        body
    }

    /// The end of this region's page table and slots in the persistent-memory file.
    pub fn pm_end(&self) -> u64 {
        self.slots_offset + self.budget_pages * PAGE_SIZE
    }

    /// The end of this region's swap area in the swap file.
    pub fn swap_end(&self) -> u64 {
        self.swap_offset + self.capacity_pages * PAGE_SIZE
    }

    /// Decode one 128-byte entry: `Ok(None)` for an empty one (or one whose allocation did
    /// not complete), `Err` for a live entry that does not check or does not fit `pm_bytes`.
    pub fn decode(e: &[u8], pm_bytes: u64) -> Result<Option<TocEntry>, String> {
        if e.len() < TOC_ENTRY_SIZE as usize {
            return Err("table-of-contents entry cut short".into());
        }
        let state = match u64_at(e, 0) {
            0 => return Ok(None),
            1 => State::Live,
            2 => State::Freed,
            other => return Err(format!("table-of-contents entry in unknown state {other}")),
        };
        if crc32c::crc32c(&e[8..120]) != u32_at(e, 120) {
            return Err("table-of-contents entry's checksum does not match".into());
        }
        let n = usize::from(e[64]);
        if n > OWNER_NAME_MAX {
            return Err("owner name longer than its field".into());
        }
        let owner = std::str::from_utf8(&e[65..65 + n])
            .map_err(|_| "owner name is not UTF-8".to_string())?
            .to_string();
        let entry = TocEntry {
            state,
            id: u64_at(e, 8),
            seq: u64_at(e, 16),
            capacity_pages: u64_at(e, 24),
            budget_pages: u64_at(e, 32),
            table_offset: u64_at(e, 40),
            slots_offset: u64_at(e, 48),
            swap_offset: u64_at(e, 56),
            owner,
        };
        entry.check(pm_bytes)?;
        Ok(Some(entry))
    }

    fn check(&self, pm_bytes: u64) -> Result<(), String> {
        let fits = self.capacity_pages > 0
            && self.capacity_pages <= crate::limits::CAPACITY_PAGES_MAX
            && (1..=crate::limits::BUDGET_PAGES_MAX.min(self.capacity_pages))
                .contains(&self.budget_pages)
            && self.table_offset >= DATA_OFFSET
            && self.table_offset % PAGE_SIZE == 0
            && self
                .table_offset
                .checked_add(table_bytes(self.capacity_pages))
                .is_some_and(|end| end <= self.slots_offset)
            && self.slots_offset % PAGE_SIZE == 0
            && self.pm_end() <= pm_bytes
            && self.swap_offset % PAGE_SIZE == 0
            && self.swap_offset >= PAGE_SIZE
            && self
                .swap_offset
                .checked_add(self.capacity_pages * PAGE_SIZE)
                .is_some();
        if !fits {
            return Err(format!(
                "region {} of {:?} does not fit the file (capacity {} pages, budget {} pages, table at {}, slots at {})",
                self.seq,
                self.owner,
                self.capacity_pages,
                self.budget_pages,
                self.table_offset,
                self.slots_offset
            ));
        }
        if self.id != region_id(&self.owner, self.seq) {
            return Err("region identifier does not match its owner and sequence".into());
        }
        Ok(())
    }
}

/// Where a virtual page is, as its page-table entry says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Never touched: reads as zero.
    Untouched,
    /// In persistent memory, in this slot of the region.
    Resident(u64),
    /// In the swap area, at this page of the region's swap area.
    Swapped(u64),
}

const TAG_SHIFT: u32 = 62;
const LOW_MASK: u64 = (1 << TAG_SHIFT) - 1;

impl Place {
    /// The page-table word.
    #[inline]
    pub fn word(self) -> u64 {
        match self {
            Place::Untouched => 0,
            Place::Resident(slot) => (1 << TAG_SHIFT) | (slot & LOW_MASK),
            Place::Swapped(page) => (2 << TAG_SHIFT) | (page & LOW_MASK),
        }
    }

    /// Decode a page-table word; `None` if its tag is invalid.
    #[inline]
    pub fn decode(word: u64) -> Option<Place> {
        match word >> TAG_SHIFT {
            0 if word == 0 => Some(Place::Untouched),
            1 => Some(Place::Resident(word & LOW_MASK)),
            2 => Some(Place::Swapped(word & LOW_MASK)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_and_rejects_damage() {
        let c = Config {
            pm_bytes: 1 << 24,
            uuid: [7; 16],
        };
        let mut b = c.encode();
        assert_eq!(Config::decode(&b), Ok(c));
        b[20] ^= 1;
        assert!(Config::decode(&b).unwrap_err().contains("checksum"));
        assert!(Config::decode(&b[..10]).is_err());
    }

    #[test]
    fn toc_entry_round_trips_and_rejects_damage() {
        let entry = TocEntry {
            state: State::Live,
            id: region_id("kv", 3),
            owner: "kv".into(),
            seq: 3,
            capacity_pages: 100,
            budget_pages: 10,
            table_offset: DATA_OFFSET,
            slots_offset: DATA_OFFSET + PAGE_SIZE,
            swap_offset: PAGE_SIZE,
        };
        let mut e = [0u8; 128];
        e[0..8].copy_from_slice(&State::Live.word().to_le_bytes());
        e[8..].copy_from_slice(&entry.encode_body());
        assert_eq!(TocEntry::decode(&e, 1 << 20), Ok(Some(entry.clone())));
        // Too small a file for the region.
        assert!(TocEntry::decode(&e, DATA_OFFSET + PAGE_SIZE).is_err());
        // An allocation that never set its state is no entry.
        let mut empty = e;
        empty[0..8].fill(0);
        assert_eq!(TocEntry::decode(&empty, 1 << 20), Ok(None));
        e[70] ^= 0x40;
        assert!(TocEntry::decode(&e, 1 << 20).is_err());
        // A budget of no page, or of more pages than the region has, is refused (with a
        // valid CRC: the fault path must never see one).
        for budget_pages in [0, 101] {
            let bad = TocEntry {
                budget_pages,
                ..entry.clone()
            };
            let mut b = [0u8; 128];
            b[0..8].copy_from_slice(&State::Live.word().to_le_bytes());
            b[8..].copy_from_slice(&bad.encode_body());
            assert!(TocEntry::decode(&b, 1 << 20).is_err(), "{budget_pages}");
        }
    }

    #[test]
    fn page_table_words_round_trip() {
        for place in [
            Place::Untouched,
            Place::Resident(5),
            Place::Swapped(1 << 40),
        ] {
            assert_eq!(Place::decode(place.word()), Some(place));
        }
        assert_eq!(Place::decode(3 << 62), None);
        assert_eq!(
            Place::decode(7),
            None,
            "tag 0 with bits set is not untouched"
        );
    }

    #[test]
    fn identifiers_differ_by_owner_and_sequence() {
        assert_ne!(region_id("a", 0), region_id("a", 1));
        assert_ne!(region_id("a", 0), region_id("b", 0));
        assert_ne!(region_id("a\0", 0), region_id("a", 0));
    }
}
