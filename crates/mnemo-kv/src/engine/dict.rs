//! The persistent hash table: the keyspace and, nested, every hash, set and sorted set.
//!
//! Layout (little-endian words, see `docs/design/kv-engine.md`):
//!
//! ```text
//! header (80 B): kind | count | table0 | buckets0 | table1 | buckets1 | rehash_index
//!                | reclaim_next | reclaim_cursor | extra (keyspace: keys with an expiry)
//! slot array:    slots * (entry offset (0: empty) | hash of its key)
//! entry:         0 | hash | meta (tag, flags, key length) | expire_ms | value | vlen,vcap
//!                | key bytes | inline value bytes (capacity vcap)
//! ```
//!
//! The index is open-addressed with linear probing, and each slot holds its entry's hash:
//! a lookup reads an entry only when its slot's hash is the key's, so inserting a new key
//! reads slots only, and moving slots (resizing, deleting) never reads or writes an entry.
//! The entries, scattered among the values, are thus touched only by the commands that use
//! them: a region of virtual persistent memory (`mnemo-vpm`) keeps the slot arrays resident
//! and pages old entries out without an insert bringing them back (issue 15).
//!
//! Resizing is incremental, like Redis's dict: a second slot array is allocated and every
//! table operation moves the elements of one home slot to it; lookups search both while it
//! lasts. The load stays between 1/8 and 3/4 (grow past 3/4 to twice the slots, shrink below
//! 1/8 to half), so probe runs are short and every operation is O(1). Deletion shifts the
//! following slots of the run back (no tombstones).
//!
//! A move copies the slots into the new array and leaves the old array as it was: an old
//! slot whose home lies below the resize cursor (`rehash`) is *stale*, a copy that every
//! reader skips (its hash, in the slot, says so without reading the entry, which may have
//! been freed since). Stale slots still count as occupied for the old array's probe runs,
//! which only shrink during a resize (inserts go to the new array). So a move writes one
//! slot, where deleting from the old array with shift-back wrote several (layout version 4;
//! a version-3 array, with no stale slot, is a valid version-4 one).

use super::store::Mem;

use super::limits::{
    BUCKETS_MAX, BUCKETS_MIN, RANDOM_BUCKET_TRIES, REHASH_BUCKETS_PER_OP, REHASH_EMPTY_VISITS,
    REHASH_RUN_HOMES,
};
use super::store::{self, corrupt, EngineError, Result};
pub use crate::server::Prefetch;

/// Bytes of a table header.
pub const HEADER_BYTES: u64 = 80;
/// Bytes of an entry before its key.
pub const ENTRY_BYTES: u64 = 48;
/// Bytes of an index slot: the entry's offset (0: an empty slot), then its key's hash.
pub const SLOT_BYTES: u64 = 16;
/// High bits of the first word of every container header: catches stray pointers.
pub const OBJECT_MAGIC: u64 = 0x4d4b_564f_424a_0000; // "MKVOBJ" + kind byte

/// What a container header describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// The top-level keyspace.
    Keyspace = 1,
    /// A hash: field entries with string values.
    Hash = 2,
    /// A set: member entries without values.
    Set = 3,
    /// A sorted set: member entries whose value word is the score's bits.
    Zset = 4,
    /// A list (see `list.rs`; its header shares the first word's format).
    List = 5,
}

impl Kind {
    /// The kind encoded in a header's first word.
    pub fn decode(word: u64) -> Result<Kind> {
        if word & !0xff != OBJECT_MAGIC {
            return corrupt(format!("object header word {word:#x} has no object magic"));
        }
        Ok(match word & 0xff {
            1 => Kind::Keyspace,
            2 => Kind::Hash,
            3 => Kind::Set,
            4 => Kind::Zset,
            5 => Kind::List,
            other => return corrupt(format!("unknown object kind {other}")),
        })
    }

    /// The first word of a header of this kind.
    pub fn word(self) -> u64 {
        OBJECT_MAGIC | self as u64
    }
}

/// Entry tags: the type of a keyspace value, or the role of a nested entry.
pub mod tag {
    /// A string (keyspace) or a hash field's value.
    pub const STRING: u8 = 1;
    /// A list; the value word points at its header.
    pub const LIST: u8 = 2;
    /// A hash; the value word points at a nested table.
    pub const HASH: u8 = 3;
    /// A set; the value word points at a nested table.
    pub const SET: u8 = 4;
    /// A sorted set; the value word points at a nested table.
    pub const ZSET: u8 = 5;
    /// A set member (no value).
    pub const MEMBER: u8 = 6;
    /// A sorted-set member; the value word holds the score's bits.
    pub const SCORED: u8 = 7;
}

/// Entry flag: the string value is stored inside the entry.
pub const FLAG_INLINE: u8 = 1;

/// A table header, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    /// What this table is.
    pub kind: Kind,
    /// Entries.
    pub count: u64,
    /// Slot array of the main table.
    pub t0: u64,
    /// Its slot count (a power of two).
    pub size0: u64,
    /// Slot array being filled while resizing (0 when not).
    pub t1: u64,
    /// Its slot count.
    pub size1: u64,
    /// Next home slot of `t0` to move while resizing.
    pub rehash: u64,
    /// Link in the reclaim queue.
    pub reclaim_next: u64,
    /// Reclaim progress: next bucket to free (over t0 then t1).
    pub cursor: u64,
    /// Keyspace: keys that have an expiry.
    pub extra: u64,
}

/// Word offsets in a header.
pub mod field {
    /// `count`.
    pub const COUNT: u64 = 8;
    /// `rehash`.
    pub const REHASH: u64 = 48;
    /// `reclaim_next`.
    pub const RECLAIM_NEXT: u64 = 56;
    /// `cursor`.
    pub const CURSOR: u64 = 64;
    /// `extra`.
    pub const EXTRA: u64 = 72;
}

impl Header {
    /// Reads and validates the header at `d`.
    pub fn read(tx: &Mem<'_, '_>, d: u64) -> Result<Header> {
        let w = store::words::<10>(tx, d)?;
        let kind = Kind::decode(w[0])?;
        if kind == Kind::List {
            return corrupt(format!("{d:#x}: a list where a table must be"));
        }
        let h = Header {
            kind,
            count: w[1],
            t0: w[2],
            size0: w[3],
            t1: w[4],
            size1: w[5],
            rehash: w[6],
            reclaim_next: w[7],
            cursor: w[8],
            extra: w[9],
        };
        let size_ok = |s: u64| s.is_power_of_two() && (BUCKETS_MIN / 2..=BUCKETS_MAX).contains(&s);
        if h.t0 == 0 || h.t0 > store::OFFSET_MAX || h.t1 > store::OFFSET_MAX || !size_ok(h.size0) {
            return corrupt(format!(
                "{d:#x}: table of {} buckets at {:#x}",
                h.size0, h.t0
            ));
        }
        if h.t1 != 0 && (!size_ok(h.size1) || h.rehash > h.size0) {
            return corrupt(format!("{d:#x}: resize state {} / {}", h.size1, h.rehash));
        }
        Ok(h)
    }

    fn words(&self) -> [u64; 10] {
        [
            self.kind.word(),
            self.count,
            self.t0,
            self.size0,
            self.t1,
            self.size1,
            self.rehash,
            self.reclaim_next,
            self.cursor,
            self.extra,
        ]
    }

    /// Writes the whole header.
    pub fn write(&self, tx: &Mem<'_, '_>, d: u64) -> Result<()> {
        store::set_words(tx, d, &self.words())
    }

    fn rehashing(&self) -> bool {
        self.t1 != 0
    }
}

/// Creates an empty table of `kind`.
pub fn create(tx: &Mem<'_, '_>, kind: Kind) -> Result<u64> {
    create_for(tx, kind, 0)
}

/// Slots of a new table that takes `expected` elements without a resize (at most 3/4
/// full), from [`BUCKETS_MIN`] up to [`BUCKETS_MAX`].
pub fn slots_for(expected: u64) -> u64 {
    expected
        .saturating_mul(4)
        .div_ceil(3)
        .checked_next_power_of_two()
        .unwrap_or(BUCKETS_MAX)
        .clamp(BUCKETS_MIN, BUCKETS_MAX)
}

/// Creates an empty table of `kind` sized for `expected` elements about to be inserted (an
/// HSET of ten new fields makes a table of 16 slots at once, instead of growing from 8 and
/// moving the first elements while the last go in). A table that gets fewer shrinks as
/// usual.
pub fn create_for(tx: &Mem<'_, '_>, kind: Kind, expected: u64) -> Result<u64> {
    let size = slots_for(expected);
    let table = store::zalloc(tx, size * SLOT_BYTES)?;
    new_header(tx, kind, table, size, 0)
}

/// Allocates and writes the header of a table of `kind` whose slot array `t0` of `size0`
/// slots holds `count` elements, not resizing; returns its offset.
fn new_header(tx: &Mem<'_, '_>, kind: Kind, t0: u64, size0: u64, count: u64) -> Result<u64> {
    let d = store::alloc(tx, HEADER_BYTES)?;
    let h = Header {
        kind,
        count,
        t0,
        size0,
        t1: 0,
        size1: 0,
        rehash: 0,
        reclaim_next: 0,
        cursor: 0,
        extra: 0,
    };
    h.write(tx, d)?;
    Ok(d)
}

/// Creates a table of `kind` holding the fresh entries `items` (entry offset, key hash; keys
/// distinct), sized as [`create_for`] sizes one for that many. The slot array is built in
/// memory and written once, with the header's count: a new hash of ten fields (YCSB's
/// insert) costs one write of 16 slots instead of ten probes, slot writes, header reads and
/// count updates. Each entry takes the slot that inserting them in order would give it.
pub fn create_filled(tx: &Mem<'_, '_>, kind: Kind, items: &[(u64, u64)]) -> Result<u64> {
    let n = items.len() as u64;
    let size = slots_for(n);
    // (`slots_for` keeps a table at most 3/4 full, up to its largest size.)
    if n.saturating_mul(4) > size.saturating_mul(3) {
        let d = create_for(tx, kind, n)?;
        for &(e, hash) in items {
            insert(tx, d, e, hash)?;
        }
        return Ok(d);
    }
    let t = Table {
        at: store::alloc(tx, size * SLOT_BYTES)?,
        size,
    };
    // The slot array is built as its byte image, written once.
    let mut image = vec![0u8; (size * SLOT_BYTES) as usize];
    let slot_len = SLOT_BYTES as usize;
    for &(e, hash) in items {
        let mut i = t.home(hash) as usize;
        // Linear probing, as `place` does; an empty slot always remains (at most 3/4 full).
        while image
            .get(i * slot_len..i * slot_len + 8)
            .is_some_and(|w| w != [0u8; 8])
        {
            i = (i + 1) & t.mask() as usize;
        }
        if let Some(slot) = image.get_mut(i * slot_len..(i + 1) * slot_len) {
            slot[..8].copy_from_slice(&e.to_le_bytes());
            slot[8..].copy_from_slice(&hash.to_le_bytes());
        }
    }
    store::set_bytes(tx, t.at, &image)?;
    new_header(tx, kind, t.at, size, n)
}

/// An entry, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Its offset.
    pub off: u64,
    /// Hash of the key.
    pub hash: u64,
    /// What it holds ([`tag`]).
    pub tag: u8,
    /// [`FLAG_INLINE`].
    pub flags: u8,
    /// Key length.
    pub key_len: u64,
    /// Absolute expiry in Unix ms, 0 for none.
    pub expire: i64,
    /// Value word: a pointer, or a score's bits.
    pub val: u64,
    /// String value length.
    pub vlen: u64,
    /// Capacity of the string value's storage.
    pub vcap: u64,
}

/// Word offsets in an entry.
pub mod entry_field {
    /// `expire_ms`.
    pub const EXPIRE: u64 = 24;
    /// The value word.
    pub const VAL: u64 = 32;
    /// `vlen | vcap << 32`.
    pub const VLEN: u64 = 40;
}

impl Entry {
    /// Reads and validates the entry at `off`.
    pub fn read(tx: &Mem<'_, '_>, off: u64) -> Result<Entry> {
        Entry::from_words(off, store::words::<6>(tx, off)?)
    }

    /// Decodes and validates the entry at `off` from its first [`ENTRY_BYTES`] bytes.
    fn decode(off: u64, image: &[u8]) -> Result<Entry> {
        let mut w = [0u64; 6];
        for (word, bytes) in w.iter_mut().zip(image.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            *word = u64::from_le_bytes(b);
        }
        Entry::from_words(off, w)
    }

    fn from_words(off: u64, w: [u64; 6]) -> Result<Entry> {
        let e = Entry {
            off,
            hash: w[1],
            tag: (w[2] & 0xff) as u8,
            flags: ((w[2] >> 8) & 0xff) as u8,
            key_len: w[2] >> 32,
            expire: w[3] as i64,
            val: w[4],
            vlen: w[5] & 0xffff_ffff,
            vcap: w[5] >> 32,
        };
        if !(tag::STRING..=tag::SCORED).contains(&e.tag) || e.vlen > e.vcap && e.is_inline() {
            return corrupt(format!("entry at {off:#x}: tag {} vlen {}", e.tag, e.vlen));
        }
        Ok(e)
    }

    /// Whether the string value lives inside the entry.
    pub fn is_inline(&self) -> bool {
        self.flags & FLAG_INLINE != 0
    }

    /// Offset of the inline value.
    pub fn inline_at(&self) -> u64 {
        self.off + ENTRY_BYTES + self.key_len
    }

    /// The key.
    pub fn key(&self, tx: &Mem<'_, '_>) -> Result<Vec<u8>> {
        store::bytes(tx, self.off + ENTRY_BYTES, self.key_len)
    }

    /// Appends the key to `out` (one buffer for many keys and values: HGETALL).
    pub fn key_into(&self, tx: &Mem<'_, '_>, out: &mut Vec<u8>) -> Result<()> {
        store::bytes_into(tx, self.off + ENTRY_BYTES, self.key_len, out)
    }

    /// Appends the string value (tag STRING) to `out`.
    pub fn string_into(&self, tx: &Mem<'_, '_>, out: &mut Vec<u8>) -> Result<()> {
        let at = if self.is_inline() {
            self.inline_at()
        } else {
            self.val
        };
        store::bytes_into(tx, at, self.vlen, out)
    }

    /// The string value (tag STRING).
    pub fn string(&self, tx: &Mem<'_, '_>) -> Result<Vec<u8>> {
        if self.is_inline() {
            store::bytes(tx, self.inline_at(), self.vlen)
        } else {
            store::bytes(tx, self.val, self.vlen)
        }
    }

    /// The score (tag SCORED).
    pub fn score(&self) -> f64 {
        f64::from_bits(self.val)
    }
}

/// How a new entry holds its value.
#[derive(Debug)]
pub enum Value<'a> {
    /// Nothing (set members).
    None,
    /// A word (container pointer, score bits).
    Word(u64),
    /// A string, inline with this capacity.
    Inline(&'a [u8], u64),
    /// A string in its own allocation: pointer, length, capacity.
    Blob(u64, u64, u64),
}

/// Allocates and writes a new entry (not yet linked).
pub fn new_entry(
    tx: &Mem<'_, '_>,
    tag: u8,
    key: &[u8],
    hash: u64,
    expire: i64,
    value: Value<'_>,
) -> Result<u64> {
    let (flags, val, vlen, vcap, inline): (u8, u64, u64, u64, &[u8]) = match value {
        Value::None => (0, 0, 0, 0, &[]),
        Value::Word(w) => (0, w, 0, 0, &[]),
        Value::Inline(bytes, cap) => (FLAG_INLINE, 0, bytes.len() as u64, cap, bytes),
        Value::Blob(ptr, len, cap) => (0, ptr, len, cap, &[]),
    };
    let size = ENTRY_BYTES + key.len() as u64 + if flags == FLAG_INLINE { vcap } else { 0 };
    let meta = u64::from(tag) | u64::from(flags) << 8 | (key.len() as u64) << 32;
    let words = [0, hash, meta, expire as u64, val, vlen | vcap << 32];
    // The entry's image is built on the stack when it fits (a hash field of YCSB's record:
    // 48 + 6 + 104 bytes), so a new entry costs no allocation of the process.
    let len = ENTRY_BYTES as usize + key.len() + inline.len();
    let mut small = [0u8; NEW_ENTRY_STACK_BYTES];
    if let Some(image) = small.get_mut(..len) {
        for (chunk, w) in image.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        let (_, rest) = image.split_at_mut(ENTRY_BYTES as usize);
        let (k, v) = rest.split_at_mut(key.len());
        k.copy_from_slice(key);
        v.copy_from_slice(inline);
        store::alloc_filled(tx, size, image)
    } else {
        let mut image = Vec::with_capacity(len);
        store::words_to_bytes(&words, &mut image);
        image.extend_from_slice(key);
        image.extend_from_slice(inline);
        store::alloc_filled(tx, size, &image)
    }
}

/// Entries whose image (header, key, inline value) is at most this long are built on the
/// stack by [`new_entry`].
const NEW_ENTRY_STACK_BYTES: usize = 256;

/// A found entry and the index slot that holds it.
#[derive(Clone, Copy, Debug)]
pub struct Found {
    /// The entry.
    pub entry: Entry,
    /// Offset of its slot (whose first word is the entry's offset). Valid until the next
    /// unlink or resize step on the table (either may move slots).
    pub link: u64,
}

/// One of a header's two slot arrays.
#[derive(Clone, Copy, Debug)]
struct Table {
    /// Offset of slot 0.
    at: u64,
    /// Slots (a power of two).
    size: u64,
}

impl Table {
    fn mask(&self) -> u64 {
        self.size - 1
    }

    /// Offset of slot `i`.
    fn slot(&self, i: u64) -> u64 {
        self.at + i * SLOT_BYTES
    }

    /// The slot a hash probes first.
    fn home(&self, hash: u64) -> u64 {
        hash & self.mask()
    }

    /// The slot index of the slot at offset `link`, if it is one of this table's.
    fn index_of(&self, link: u64) -> Option<u64> {
        let rel = link.checked_sub(self.at)?;
        (rel % SLOT_BYTES == 0 && rel / SLOT_BYTES < self.size).then_some(rel / SLOT_BYTES)
    }
}

impl Header {
    fn t0(&self) -> Table {
        Table {
            at: self.t0,
            size: self.size0,
        }
    }

    fn t1(&self) -> Table {
        Table {
            at: self.t1,
            size: self.size1,
        }
    }

    /// The tables a lookup searches: the main one, and the new one while resizing.
    fn tables(&self) -> ([Table; 2], usize) {
        ([self.t0(), self.t1()], if self.rehashing() { 2 } else { 1 })
    }

    /// Whether a slot of `t0` holding `hash` is a stale copy (its home slot has been moved
    /// to `t1`): only while resizing.
    fn stale0(&self, hash: u64) -> bool {
        self.rehashing() && self.t0().home(hash) < self.rehash
    }

    /// The entry offset in slot `i` counted over both tables ([`Header::slots`]), 0 for an
    /// empty slot or a stale one.
    pub fn entry_at(&self, tx: &Mem<'_, '_>, i: u64) -> Result<u64> {
        let [entry, hash] = store::words::<2>(tx, self.slot_at(i))?;
        Ok(if i < self.size0 && self.stale0(hash) {
            0
        } else {
            entry
        })
    }

    /// Slots over both tables (t0's, then t1's while resizing).
    pub fn slots(&self) -> u64 {
        self.size0 + if self.rehashing() { self.size1 } else { 0 }
    }

    /// Offset of slot `i` counted over both tables ([`Header::slots`]).
    pub fn slot_at(&self, i: u64) -> u64 {
        if i < self.size0 {
            self.t0().slot(i)
        } else {
            self.t1().slot(i - self.size0)
        }
    }
}

/// Slots read at once by a probe (a cache line).
const PROBE_READ_SLOTS: u64 = 4;

/// Walks the probe sequence of `t` from slot `from` up to (not including) the first empty
/// slot, calling `f(index, entry, hash)` for each occupied slot until it returns false.
/// Reads a few slots at a time. An array with no empty slot is corruption (inserts always
/// leave one).
fn probe(
    tx: &Mem<'_, '_>,
    t: Table,
    from: u64,
    mut f: impl FnMut(u64, u64, u64) -> Result<bool>,
) -> Result<()> {
    let mut i = from & t.mask();
    let mut seen = 0u64;
    let mut raw = [0u8; (PROBE_READ_SLOTS * SLOT_BYTES) as usize];
    loop {
        let n = PROBE_READ_SLOTS.min(t.size - i);
        let bytes = &mut raw[..(n * SLOT_BYTES) as usize];
        store::read_into(tx, t.slot(i), bytes)?;
        for (k, slot) in bytes.chunks_exact(SLOT_BYTES as usize).enumerate() {
            let (entry, hash) = slot_words(slot);
            if entry == 0 {
                return Ok(());
            }
            if !f(i + k as u64, entry, hash)? {
                return Ok(());
            }
            seen += 1;
            if seen >= t.size {
                return corrupt(format!(
                    "slot array at {:#x} ({} slots) has no empty slot",
                    t.at, t.size
                ));
            }
        }
        i = (i + n) & t.mask();
    }
}

/// Finds `key` in the table at `d`.
pub fn find(tx: &Mem<'_, '_>, d: u64, seed: u64, key: &[u8]) -> Result<Option<Found>> {
    let h = Header::read(tx, d)?;
    find_in(tx, &h, store::hash(seed, key), key)
}

/// Moves up to `buckets` home slots of a resizing table, then finds `key` in it: [`step`] and
/// [`find`] with one read of the header.
pub fn step_find(
    tx: &Mem<'_, '_>,
    d: u64,
    buckets: u64,
    seed: u64,
    key: &[u8],
) -> Result<Option<Found>> {
    let h = step_header(tx, d, buckets)?;
    find_in(tx, &h, store::hash(seed, key), key)
}

/// A slot's two words, (entry offset, hash), from its 16 bytes as read.
fn slot_words(slot: &[u8]) -> (u64, u64) {
    (le_word(slot), le_word(slot.get(8..).unwrap_or_default()))
}

/// Brings into the caches what a lookup of `key` in the table whose header is `h` will read
/// first: a batch of the server prefetches for the requests a few places ahead of the one it
/// runs, so their two cache misses (home slot, then entry) overlap with other work instead
/// of stalling it. Errors are ignored: the lookup itself will meet and report them. The
/// header may be stale (read earlier in the batch, before a resize moved on or ended): a
/// hint is all that is made of it, so a stale one costs at most one read of
/// `PROBE_READ_SLOTS` slots of a freed array.
pub fn prefetch_in(tx: &Mem<'_, '_>, h: &Header, seed: u64, key: &[u8], stage: Prefetch) {
    let hash = store::hash(seed, key);
    let (tables, used) = h.tables();
    for (k, t) in tables[..used].iter().enumerate() {
        if k == 0 && h.stale0(hash) {
            continue;
        }
        let home = t.home(hash);
        match stage {
            Prefetch::Bucket => tx.prefetch(t.slot(home)),
            Prefetch::Entry => {
                // The entry whose hash is the key's among the first slots of the probe (the
                // key's own, nearly always): only its line is brought in, no other entry's.
                let n = PROBE_READ_SLOTS.min(t.size - home);
                let mut raw = [0u8; (PROBE_READ_SLOTS * SLOT_BYTES) as usize];
                let bytes = &mut raw[..(n * SLOT_BYTES) as usize];
                if store::read_into(tx, t.slot(home), bytes).is_err() {
                    return;
                }
                for slot in bytes.chunks_exact(SLOT_BYTES as usize) {
                    let (entry, slot_hash) = slot_words(slot);
                    if entry == 0 {
                        break;
                    }
                    if slot_hash == hash {
                        tx.prefetch(entry);
                        tx.prefetch(entry + 64);
                        break;
                    }
                }
            }
        }
    }
}

/// Key bytes a lookup reads together with the entry whose hash matched.
const KEY_READ_AHEAD: usize = 64;

/// Finds `key` (whose hash is `hash`) in the tables of header `h`. Only entries whose slot
/// holds the same hash are read: a lookup of a missing key reads slots only.
fn find_in(tx: &Mem<'_, '_>, h: &Header, hash: u64, key: &[u8]) -> Result<Option<Found>> {
    let (tables, used) = h.tables();
    for (k, &t) in tables[..used].iter().enumerate() {
        // A key whose old home slot was moved is in the new array, if anywhere (its stale
        // copies in the old one are skipped: a slot with its hash has its home).
        if k == 0 && h.stale0(hash) {
            continue;
        }
        let mut found = None;
        probe(tx, t, t.home(hash), |i, at, slot_hash| {
            if slot_hash != hash {
                return Ok(true);
            }
            // The entry and, in the same read, as many bytes as the key has (they are the
            // entry's key if its length matches; past a short entry's end the read may fail:
            // then the key is read apart).
            let mut image = [0u8; ENTRY_BYTES as usize + KEY_READ_AHEAD];
            let n = ENTRY_BYTES as usize + key.len();
            let ahead = n <= image.len() && store::read_into(tx, at, &mut image[..n]).is_ok();
            let (entry, key_here) = if ahead {
                (
                    Entry::decode(at, &image[..n])?,
                    Some(&image[ENTRY_BYTES as usize..n]),
                )
            } else {
                (Entry::read(tx, at)?, None)
            };
            if entry.hash != hash {
                return corrupt(format!(
                    "entry at {at:#x} has hash {:#x}, its slot says {hash:#x}",
                    entry.hash
                ));
            }
            if entry.key_len == key.len() as u64
                && match key_here {
                    Some(bytes) => bytes == key,
                    None => store::bytes_equal(tx, at + ENTRY_BYTES, key)?,
                }
            {
                found = Some(Found {
                    entry,
                    link: t.slot(i),
                });
                return Ok(false);
            }
            Ok(true)
        })?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Writes `(entry, hash)` into the first empty slot of `hash`'s probe sequence in `t`.
fn place(tx: &Mem<'_, '_>, t: Table, entry: u64, hash: u64) -> Result<()> {
    let mut last = None;
    probe(tx, t, t.home(hash), |i, _, _| {
        last = Some(i);
        Ok(true)
    })?;
    let free = match last {
        Some(i) => (i + 1) & t.mask(),
        None => t.home(hash),
    };
    store::set_words(tx, t.slot(free), &[entry, hash])
}

/// Slots of one window of [`Windows`]: sixteen (four cache lines), or the whole array when it
/// is smaller.
const WINDOW_SLOTS: usize = 16;

/// Windows [`Windows`] keeps at once: a resize step's elements go to two runs of the new array
/// (its two halves when growing).
const WINDOWS: usize = 4;

/// [`place`] for many elements at once: the slots of the array are read a window at a time
/// and written back once per window (one logged write per run of changed slots), where
/// `place` read the probe run and logged a write per element. A resize step moves about
/// twelve elements into two or three windows. The slots chosen are those `place` would
/// choose, element by element in the same order.
struct Windows {
    t: Table,
    /// Slots per window: a power of two, at most the array's size, so a window never
    /// crosses the array's end.
    len: u64,
    used: usize,
    /// Per window: its first slot, the first and one past the last slot changed (relative),
    /// and its slots as (entry, hash) words.
    base: [u64; WINDOWS],
    dirty: [(usize, usize); WINDOWS],
    words: [[u64; 2 * WINDOW_SLOTS]; WINDOWS],
}

impl Windows {
    fn new(t: Table) -> Windows {
        Windows {
            t,
            len: t.size.min(WINDOW_SLOTS as u64),
            used: 0,
            base: [0; WINDOWS],
            dirty: [(0, 0); WINDOWS],
            words: [[0; 2 * WINDOW_SLOTS]; WINDOWS],
        }
    }

    /// Places one element (not in the array yet) in the first empty slot from its home on.
    fn place(&mut self, tx: &Mem<'_, '_>, entry: u64, hash: u64) -> Result<()> {
        let mut i = self.t.home(hash);
        for _ in 0..self.t.size {
            let w = self.window(tx, i)?;
            let k = (i - self.base[w]) as usize;
            if self.words[w][2 * k] == 0 {
                self.words[w][2 * k] = entry;
                self.words[w][2 * k + 1] = hash;
                let (lo, hi) = &mut self.dirty[w];
                if lo == hi {
                    (*lo, *hi) = (k, k + 1);
                } else {
                    (*lo, *hi) = ((*lo).min(k), (*hi).max(k + 1));
                }
                return Ok(());
            }
            i = (i + 1) & self.t.mask();
        }
        corrupt(format!(
            "slot array at {:#x} ({} slots) has no empty slot",
            self.t.at, self.t.size
        ))
    }

    /// The window holding slot `i`, read first if it is not held (writing all back when
    /// every window is in use).
    fn window(&mut self, tx: &Mem<'_, '_>, i: u64) -> Result<usize> {
        let base = i & !(self.len - 1);
        if let Some(w) = self.base[..self.used].iter().position(|&b| b == base) {
            return Ok(w);
        }
        if self.used == WINDOWS {
            self.write_back(tx)?;
        }
        let w = self.used;
        let n = self.len as usize;
        let mut raw = [0u8; WINDOW_SLOTS * SLOT_BYTES as usize];
        let raw = &mut raw[..n * SLOT_BYTES as usize];
        store::read_into(tx, self.t.slot(base), raw)?;
        for (word, bytes) in self.words[w].iter_mut().zip(raw.chunks_exact(8)) {
            *word = le_word(bytes);
        }
        self.base[w] = base;
        self.dirty[w] = (0, 0);
        self.used += 1;
        Ok(w)
    }

    /// Writes the changed slots of every window held (one logged write per window) and
    /// forgets them.
    fn write_back(&mut self, tx: &Mem<'_, '_>) -> Result<()> {
        for w in 0..self.used {
            let (lo, hi) = self.dirty[w];
            if lo < hi {
                let mut image = [0u8; WINDOW_SLOTS * SLOT_BYTES as usize];
                let image = &mut image[..(hi - lo) * SLOT_BYTES as usize];
                for (bytes, word) in image
                    .chunks_exact_mut(8)
                    .zip(&self.words[w][2 * lo..2 * hi])
                {
                    bytes.copy_from_slice(&word.to_le_bytes());
                }
                store::set_bytes(tx, self.t.slot(self.base[w] + lo as u64), image)?;
            }
        }
        self.used = 0;
        Ok(())
    }
}

/// Empties slot `i` of `t` and moves the slots after it back into the hole where their probe
/// sequence allows (backward-shift deletion: no tombstones, every probe sequence stays
/// unbroken).
fn delete_at(tx: &Mem<'_, '_>, t: Table, i: u64) -> Result<()> {
    let mut hole = i & t.mask();
    let mut moves = Vec::new();
    probe(tx, t, hole + 1, |j, entry, hash| {
        // The slot at j may move into the hole unless its home lies after the hole (up to
        // j itself): its probe sequence would then no longer pass through the hole.
        let from_hole = |x: u64| x.wrapping_sub(hole) & t.mask();
        let home = from_hole(t.home(hash));
        if home == 0 || home > from_hole(j) {
            moves.push((hole, entry, hash));
            hole = j;
        }
        Ok(true)
    })?;
    for (to, entry, hash) in moves {
        store::set_words(tx, t.slot(to), &[entry, hash])?;
    }
    store::set_words(tx, t.slot(hole), &[0, 0])
}

/// Links the fresh entry `e` (with `hash`) into the table and counts it. While the table is
/// resizing it first moves one home slot, so the new array never fills before the old one is
/// emptied.
pub fn insert(tx: &Mem<'_, '_>, d: u64, e: u64, hash: u64) -> Result<()> {
    let h = step_header(tx, d, REHASH_BUCKETS_PER_OP)?;
    insert_into(tx, d, h, e, hash)
}

/// [`insert`] without its resize step, for the insert that follows a [`step_find`] of the
/// same key in `d` that found it absent, in the same command: that lookup made the step the
/// insert owes. (While a resize runs, every insert must take a step that moves at least one
/// home slot holding elements, or skips up to ten empty ones, so that the new array is
/// emptied of the old one's before it fills: see `maybe_resize`.) Saves a second read and
/// write of the header and a second probe of the old array per new key.
pub fn insert_stepped(tx: &Mem<'_, '_>, d: u64, e: u64, hash: u64) -> Result<()> {
    insert_into(tx, d, Header::read(tx, d)?, e, hash)
}

fn insert_into(tx: &Mem<'_, '_>, d: u64, mut h: Header, e: u64, hash: u64) -> Result<()> {
    let t = if h.rehashing() { h.t1() } else { h.t0() };
    // One slot always stays empty (probes end there): a table at the largest size and full
    // takes no more. (While resizing, `count` counts the old array's elements too; the new
    // one, twice or half the old, is emptied before it could fill: see `maybe_resize`.)
    if h.count + 1 >= t.size {
        return Err(EngineError::Heap(mnemo_heap::Error::OutOfSpace {
            needed: SLOT_BYTES,
            detail: format!(
                "a table holds at most {} elements ({} slots)",
                BUCKETS_MAX - 1,
                BUCKETS_MAX
            ),
        }));
    }
    place(tx, t, e, hash)?;
    h.count += 1;
    store::set_word(tx, d + field::COUNT, h.count)?;
    maybe_resize(tx, d, &mut h, true)
}

/// Unlinks a found entry and uncounts it (the caller frees it).
pub fn unlink(tx: &Mem<'_, '_>, d: u64, found: &Found) -> Result<()> {
    let mut h = Header::read(tx, d)?;
    let (tables, used) = h.tables();
    let Some((t, i)) = tables[..used]
        .iter()
        .find_map(|t| t.index_of(found.link).map(|i| (*t, i)))
    else {
        return corrupt(format!("{d:#x}: slot {:#x} is not the table's", found.link));
    };
    delete_at(tx, t, i)?;
    h.count = h.count.saturating_sub(1);
    store::set_word(tx, d + field::COUNT, h.count)?;
    maybe_resize(tx, d, &mut h, false)
}

/// Puts the fresh entry `new` (with the same key) where `found` was; the caller frees the
/// old one.
pub fn replace(tx: &Mem<'_, '_>, found: &Found, new: u64) -> Result<()> {
    store::set_word(tx, found.link, new)
}

/// Starts a resize when the load leaves 1/8..=3/4: twice the slots after an insert, or half
/// after a deletion (`grown`: an insert; a table sized for elements about to come, by
/// [`create_for`], is not shrunk by the first of them).
fn maybe_resize(tx: &Mem<'_, '_>, d: u64, h: &mut Header, grown: bool) -> Result<()> {
    if h.rehashing() {
        return Ok(());
    }
    let target = if grown && h.count * 4 > h.size0 * 3 && h.size0 < BUCKETS_MAX {
        h.size0 * 2
    } else if !grown && h.size0 > BUCKETS_MIN && h.count * 8 < h.size0 {
        // Half, not down to the count at once: the new array must take the inserts made
        // while the old one is emptied (each moves at least one home slot holding elements,
        // or 10 empty ones), and at most 1/8 of the old home slots hold any.
        h.size0 / 2
    } else {
        return Ok(());
    };
    h.t1 = store::zalloc(tx, target * SLOT_BYTES)?;
    h.size1 = target;
    h.rehash = 0;
    h.write(tx, d)
}

/// Moves up to `buckets` home slots of a resizing table (a no-op otherwise).
pub fn step(tx: &Mem<'_, '_>, d: u64, buckets: u64) -> Result<()> {
    step_header(tx, d, buckets).map(|_| ())
}

/// [`step`], returning the header as it is after the step. A step takes the home slots
/// from `rehash` on, up to the first empty slot after it or [`REHASH_RUN_HOMES`] of them,
/// whichever comes first: every element of the old array whose home is one of them lies on
/// the run of occupied slots from `rehash` to that empty slot (a home's elements sit between
/// it and the first empty slot after it), so one read of the run finds them all. Each is
/// copied into the new array (through [`Windows`]: one logged write per window of sixteen
/// slots, not one per element); the old slots stay, stale from then on (`rehash` is past
/// their home), and both stay valid arrays. No entry is read or written (the hash is in the
/// slot).
/// Taking one home slot per read instead read a run as long as the cluster once per home
/// slot of it.
fn step_header(tx: &Mem<'_, '_>, d: u64, buckets: u64) -> Result<Header> {
    let mut h = Header::read(tx, d)?;
    if !h.rehashing() {
        return Ok(h);
    }
    let (t0, t1) = (h.t0(), h.t1());
    let mut moved = 0;
    let mut empty = 0;
    let mut into = Windows::new(t1);
    while moved < buckets && h.rehash < h.size0 {
        let r = h.rehash;
        let limit = r.saturating_add(REHASH_RUN_HOMES).min(h.size0);
        // `end`: one past the last occupied slot of the run, while it has not wrapped past
        // the array's end (a wrapped run covers every home from r to the end).
        let mut end = r;
        let mut wrapped = false;
        let mut any = false;
        // (Writing the new array while the old one's run is read is safe: they never
        // overlap.)
        probe(tx, t0, r, |i, entry, hash| {
            let home = t0.home(hash);
            if i < r {
                wrapped = true;
            } else {
                end = i + 1;
                if home > i {
                    // Its probe wrapped around the array's end to reach slot i: so the slots
                    // from its home to the end and from 0 to i are all occupied, this run
                    // cannot wrap (it would fill the array), and its home lies past this
                    // run's end: a later step's.
                    return Ok(true);
                }
            }
            if (r..limit).contains(&home) {
                into.place(tx, entry, hash)?;
                any = true;
            }
            Ok(true)
        })?;
        // The run ends at its first empty slot: homes from there on hold elements of other
        // runs, not read here.
        h.rehash = if wrapped {
            limit
        } else {
            end.clamp(r + 1, limit)
        };
        #[cfg(test)]
        if tests::REHASH_PAST_RUN.with(std::cell::Cell::get) {
            h.rehash = limit;
        }
        if any {
            moved += 1;
        } else {
            empty += h.rehash - r;
            if empty >= buckets * REHASH_EMPTY_VISITS {
                break;
            }
        }
    }
    into.write_back(tx)?;
    if h.rehash >= h.size0 {
        store::free(tx, h.t0)?;
        h.t0 = h.t1;
        h.size0 = h.size1;
        h.t1 = 0;
        h.size1 = 0;
        h.rehash = 0;
        h.write(tx, d)?;
    } else {
        // Only the next home slot changed: one logged word, not the header's ten.
        store::set_word(tx, d + field::REHASH, h.rehash)?;
    }
    Ok(h)
}

/// Reads a whole slot array: (entry, hash) per slot.
fn slots(tx: &Mem<'_, '_>, t: Table) -> Result<Vec<(u64, u64)>> {
    let raw = store::bytes(tx, t.at, t.size * SLOT_BYTES)?;
    Ok(raw
        .chunks_exact(SLOT_BYTES as usize)
        .map(slot_words)
        .collect())
}

/// Calls `f` on every entry (both tables while resizing); stops when `f` returns false.
/// The slots are read sixteen at a time into a buffer on the stack: no allocation (HGETALL,
/// YCSB's read, walks a table of 16 slots per request).
pub fn for_each(tx: &Mem<'_, '_>, d: u64, f: impl FnMut(&Entry) -> Result<bool>) -> Result<()> {
    for_each_of(tx, &Header::read(tx, d)?, f)
}

/// Slots [`for_each`] reads at once (four cache lines).
const FOR_EACH_READ_SLOTS: u64 = 16;

/// [`for_each`] over the table whose header `h` the caller has read.
pub fn for_each_of(
    tx: &Mem<'_, '_>,
    h: &Header,
    mut f: impl FnMut(&Entry) -> Result<bool>,
) -> Result<()> {
    for_each_at(tx, h, |at| f(&Entry::read(tx, at)?))
}

/// Calls `f` with the key and string value of every entry of the table whose header `h` the
/// caller has read (a hash's fields and values: HGETALL); stops when `f` returns false.
/// An entry whose inline value fits [`PAIR_WINDOW_BYTES`] with its header and key is read
/// in one piece, not three (header, key, value): YCSB's record is ten such fields.
pub fn for_each_pair(
    tx: &Mem<'_, '_>,
    h: &Header,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
) -> Result<()> {
    let mut window = [0u8; PAIR_WINDOW_BYTES];
    let mut spill = Vec::new();
    for_each_at(tx, h, |at| {
        let n = store::read_window(tx, at, &mut window)?;
        if n < ENTRY_BYTES as usize {
            return corrupt(format!("entry at {at:#x}: past the pool's end"));
        }
        let e = Entry::decode(at, &window[..ENTRY_BYTES as usize])?;
        // Both lengths are 32-bit fields: the sum cannot overflow.
        let key_end = ENTRY_BYTES + e.key_len;
        let end = key_end + e.vlen;
        if e.is_inline() && end <= n as u64 {
            return f(
                &window[ENTRY_BYTES as usize..key_end as usize],
                &window[key_end as usize..end as usize],
            );
        }
        spill.clear();
        e.key_into(tx, &mut spill)?;
        let k = spill.len();
        e.string_into(tx, &mut spill)?;
        let (key, value) = spill.split_at(k);
        f(key, value)
    })
}

/// The bytes [`for_each_pair`] reads at an entry at once: the header, a key of up to 16 bytes
/// and an inline value of up to 128.
pub const PAIR_WINDOW_BYTES: usize = 192;

/// Calls `f` on the offset of every entry of the table whose header `h` the caller has
/// read; stops when `f` returns false.
fn for_each_at(tx: &Mem<'_, '_>, h: &Header, mut f: impl FnMut(u64) -> Result<bool>) -> Result<()> {
    let (tables, used) = h.tables();
    let mut raw = [0u8; (FOR_EACH_READ_SLOTS * SLOT_BYTES) as usize];
    for (k, &t) in tables[..used].iter().enumerate() {
        let mut first = 0;
        while first < t.size {
            let n = (t.size - first).min(FOR_EACH_READ_SLOTS);
            let chunk = &mut raw[..(n * SLOT_BYTES) as usize];
            store::read_into(tx, t.slot(first), chunk)?;
            for slot in chunk.chunks_exact(SLOT_BYTES as usize) {
                let (at, hash) = slot_words(slot);
                if at != 0 && !(k == 0 && h.stale0(hash)) && !f(at)? {
                    return Ok(());
                }
            }
            first += n;
        }
    }
    Ok(())
}

/// The little-endian word in the first 8 bytes of `bytes` (0 if shorter).
fn le_word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    if let Some(b) = bytes.get(..8) {
        w.copy_from_slice(b);
    }
    u64::from_le_bytes(w)
}

/// Calls `f` on every entry of `t` whose home slot is `home` (they are on the run of
/// occupied slots from `home`).
fn visit_home(
    tx: &Mem<'_, '_>,
    t: Table,
    home: u64,
    f: &mut impl FnMut(&Entry) -> Result<()>,
) -> Result<()> {
    let mut mine = Vec::new();
    probe(tx, t, home, |_, entry, hash| {
        if t.home(hash) == home {
            mine.push(entry);
        }
        Ok(true)
    })?;
    for at in mine {
        f(&Entry::read(tx, at)?)?;
    }
    Ok(())
}

/// One SCAN step from `cursor`: visits one home slot of the smaller table and every home
/// slot of the larger one it expands to, and returns the next cursor (0 when done). Cursors
/// count in reversed-bit order, so a cursor stays valid across a resize: no element present
/// during the whole scan is missed (some may be returned twice). An element belongs to its
/// home slot (its hash's low bits), wherever probing placed it, as it belonged to its bucket
/// in a chained table.
pub fn scan(
    tx: &Mem<'_, '_>,
    d: u64,
    cursor: u64,
    mut f: impl FnMut(&Entry) -> Result<()>,
) -> Result<u64> {
    let h = Header::read(tx, d)?;
    let next = |v: u64, mask: u64| ((v | !mask).reverse_bits().wrapping_add(1)).reverse_bits();
    let mut v = cursor;
    if !h.rehashing() {
        let t = h.t0();
        visit_home(tx, t, v & t.mask(), &mut f)?;
        return Ok(next(v, t.mask()));
    }
    // The old array's home slots below the cursor hold only stale copies: not visited.
    let visit = |t: Table, home: u64, f: &mut _| {
        if t.at == h.t0 && home < h.rehash {
            return Ok(());
        }
        visit_home(tx, t, home, f)
    };
    let (small, large) = if h.size0 <= h.size1 {
        (h.t0(), h.t1())
    } else {
        (h.t1(), h.t0())
    };
    let (m0, m1) = (small.mask(), large.mask());
    visit(small, v & m0, &mut f)?;
    loop {
        visit(large, v & m1, &mut f)?;
        v = next(v, m1);
        if v & (m0 ^ m1) == 0 {
            break;
        }
    }
    Ok(v)
}

/// A random entry (SPOP): a random occupied slot.
pub fn random(tx: &Mem<'_, '_>, d: u64, rng: &mut impl FnMut() -> u64) -> Result<Option<Found>> {
    let h = Header::read(tx, d)?;
    if h.count == 0 {
        return Ok(None);
    }
    let total = h.slots();
    let mut chosen = None;
    for _ in 0..RANDOM_BUCKET_TRIES {
        let i = rng() % total;
        if h.entry_at(tx, i)? != 0 {
            chosen = Some(i);
            break;
        }
    }
    let i = match chosen {
        Some(i) => i,
        None => {
            let from = rng() % total;
            let mut found = None;
            for k in 0..total {
                let i = (from + k) % total;
                if h.entry_at(tx, i)? != 0 {
                    found = Some(i);
                    break;
                }
            }
            match found {
                Some(i) => i,
                None => return corrupt(format!("{d:#x}: count {} but no entry", h.count)),
            }
        }
    };
    let link = h.slot_at(i);
    let entry = Entry::read(tx, h.entry_at(tx, i)?)?;
    Ok(Some(Found { entry, link }))
}

/// Frees every allocation of the table's structure (headers and slot arrays, not the
/// entries).
pub fn free_structure(tx: &Mem<'_, '_>, d: u64, h: &Header) -> Result<()> {
    store::free(tx, h.t0)?;
    if h.t1 != 0 {
        store::free(tx, h.t1)?;
    }
    store::free(tx, d)
}

/// Checks the table's structure: every entry's hash in its slot and the key's, every entry
/// reachable from its home slot (no empty slot between), the count right. Returns the entry
/// count (tests and crash checks). Stale slots of the old array are skipped unread: their
/// entries may have been freed since they were copied.
pub fn check(tx: &Mem<'_, '_>, d: u64, seed: u64) -> Result<u64> {
    let h = Header::read(tx, d)?;
    let mut n = 0;
    let (tables, used) = h.tables();
    for (k, &t) in tables[..used].iter().enumerate() {
        let all = slots(tx, t)?;
        for (i, &(at, hash)) in all.iter().enumerate() {
            if at == 0 || k == 0 && h.stale0(hash) {
                continue;
            }
            let i = i as u64;
            let e = Entry::read(tx, at)?;
            if store::hash(seed, &e.key(tx)?) != hash || e.hash != hash {
                return corrupt(format!("{d:#x}: entry {at:#x} under a wrong hash"));
            }
            let home = t.home(hash);
            let mut j = home;
            while j != i {
                if all[j as usize].0 == 0 {
                    return corrupt(format!("{d:#x}: entry {at:#x} past an empty slot"));
                }
                j = (j + 1) & t.mask();
            }
            n += 1;
        }
    }
    if n != h.count {
        return corrupt(format!("{d:#x}: count {} but {n} entries", h.count));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use mnemo_heap::{Heap, HeapOptions};

    use super::*;

    const SEED: u64 = 0x5eed;

    thread_local! {
        /// A deliberately broken resize step, for this module's tests only (per thread, so
        /// tests running in parallel never see it): `rehash` goes to the step's limit even
        /// past the run's first empty slot.
        pub(super) static REHASH_PAST_RUN: std::cell::Cell<bool> =
            const { std::cell::Cell::new(false) };
    }

    fn heap(dir: &std::path::Path) -> Heap {
        let options = HeapOptions {
            lane_count: 2,
            lane_log_size: 4 << 20,
            ..HeapOptions::default()
        };
        Heap::create_file(&dir.join("pool"), 32 << 20, 256 << 20, &options).expect("create")
    }

    /// Runs `f` in one committed transaction of `heap`.
    fn with<R>(heap: &Heap, f: impl FnOnce(&Mem<'_, '_>) -> Result<R>) -> R {
        heap.tx(|txn| Ok(f(&Mem::new(txn, heap))))
            .expect("transaction")
            .expect("table operation")
    }

    fn key(i: u64) -> Vec<u8> {
        format!("key:{i:012}").into_bytes()
    }

    /// SET of a new key as the keyspace does it: a lookup (a resize step if resizing), then
    /// a new entry linked in without another step.
    fn add(tx: &Mem<'_, '_>, d: u64, k: &[u8], value: u64) -> Result<()> {
        if step_find(tx, d, 1, SEED, k)?.is_some() {
            return corrupt("the key is there already");
        }
        let hash = store::hash(SEED, k);
        let e = new_entry(tx, tag::STRING, k, hash, 0, Value::Word(value))?;
        insert_stepped(tx, d, e, hash)
    }

    /// Inserts 5,000 keys, 250 per transaction (the table resizes eight times), checking
    /// after each transaction that the table is sound and every key is found.
    fn grow_and_find(heap: &Heap) -> std::result::Result<(), String> {
        let d = with(heap, |tx| create(tx, Kind::Hash));
        for round in 0..20u64 {
            let result = heap
                .tx(|txn| {
                    let tx = &Mem::new(txn, heap);
                    let run = || -> Result<()> {
                        for k in round * 250..(round + 1) * 250 {
                            add(tx, d, &key(k), k)?;
                        }
                        check(tx, d, SEED)?;
                        for k in 0..(round + 1) * 250 {
                            match find(tx, d, SEED, &key(k))? {
                                Some(f) if f.entry.val == k => {}
                                other => return corrupt(format!("key {k}: {other:?}")),
                            }
                        }
                        Ok(())
                    };
                    Ok(run())
                })
                .map_err(|e| e.to_string())?;
            result.map_err(|e| format!("round {round}: {e}"))?;
        }
        Ok(())
    }

    /// A resize step takes the home slots of one run: every key stays found through eight
    /// resizes. A step that moved `rehash` past the run's first empty slot (skipping home
    /// slots whose elements sit in the next runs) is caught.
    #[test]
    fn a_resize_step_takes_only_the_home_slots_its_run_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        grow_and_find(&heap(dir.path())).expect("every key found through the resizes");
        let dir = tempfile::tempdir().expect("tempdir");
        REHASH_PAST_RUN.with(|m| m.set(true));
        let broken = grow_and_find(&heap(dir.path()));
        REHASH_PAST_RUN.with(|m| m.set(false));
        assert!(broken.is_err(), "the broken step was not caught");
    }

    /// [`Windows`] puts elements where [`place`] would, one by one in the same order: into
    /// arrays of 8 to 1,024 slots already holding elements, with clusters, probes that wrap
    /// past the array's end, and more windows than it holds at once. (Hand mutants caught:
    /// the changed range not widened; the windows dropped, not written back, when all are in
    /// use.)
    #[test]
    fn windows_place_elements_where_place_would() {
        let dir = tempfile::tempdir().expect("tempdir");
        let heap = heap(dir.path());
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for size in [8u64, 16, 32, 64, 1024] {
            for round in 0..20 {
                let before = size / 4 + next() % (size / 4);
                let more = 1 + next() % (size / 2 - 1);
                // Hashes crowd into a few homes (long clusters), near the end in some
                // rounds (probes wrap around).
                let spread = if round % 2 == 0 { size } else { 4 };
                let base = if round % 3 == 0 {
                    size - 2
                } else {
                    next() % size
                };
                let mut hash = || (base + next() % spread) % size + size * (next() % 1000);
                let old: Vec<u64> = (0..before).map(|_| hash()).collect();
                let new: Vec<u64> = (0..more).map(|_| hash()).collect();
                let arrays = with(&heap, |tx| {
                    let mut arrays = Vec::new();
                    for by_windows in [false, true] {
                        let t = Table {
                            at: store::zalloc(tx, size * SLOT_BYTES)?,
                            size,
                        };
                        for (i, &h) in old.iter().enumerate() {
                            place(tx, t, 0x1000 + i as u64 * 64, h)?;
                        }
                        let mut into = Windows::new(t);
                        for (i, &h) in new.iter().enumerate() {
                            let entry = 0x10_0000 + i as u64 * 64;
                            if by_windows {
                                into.place(tx, entry, h)?;
                            } else {
                                place(tx, t, entry, h)?;
                            }
                        }
                        into.write_back(tx)?;
                        arrays.push(slots(tx, t)?);
                    }
                    Ok(arrays)
                });
                assert_eq!(
                    arrays[0], arrays[1],
                    "{size} slots, round {round}: windows placed elements elsewhere"
                );
            }
        }
    }

    /// What inserting new keys touches: slots only. Every old entry is overwritten with
    /// bytes no entry can have (a lookup that read one would fail as corrupt, a resize that
    /// read one's hash would misplace it), then thousands of new keys go in, through several
    /// resizes, and are all found. With entries chained through their own `next` words and
    /// hashed from them, the first insert into a non-empty bucket or the first rehash step
    /// read a poisoned entry.
    #[test]
    fn inserting_new_keys_reads_no_old_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let heap = heap(dir.path());
        let d = with(&heap, |tx| create(tx, Kind::Keyspace));
        for batch in 0..4 {
            with(&heap, |tx| {
                (batch * 500..(batch + 1) * 500).try_for_each(|i| add(tx, d, &key(i), i))
            });
        }
        let old = with(&heap, |tx| {
            let mut offsets = Vec::new();
            for_each(tx, d, |e| {
                offsets.push(e.off);
                Ok(true)
            })?;
            Ok(offsets)
        });
        assert_eq!(old.len(), 2000);
        with(&heap, |tx| {
            old.iter()
                .try_for_each(|&at| store::set_bytes(tx, at, &[0xff; ENTRY_BYTES as usize]))
        });
        for batch in 4..40 {
            with(&heap, |tx| {
                (batch * 500..(batch + 1) * 500).try_for_each(|i| add(tx, d, &key(i), i))
            });
        }
        with(&heap, |tx| {
            let h = Header::read(tx, d)?;
            assert_eq!(h.count, 20_000);
            assert!(h.size0 >= 16_384, "the table grew: {h:?}");
            for i in 2000..20_000 {
                let found = find(tx, d, SEED, &key(i))?.expect("a new key is found");
                assert_eq!(found.entry.val, i);
            }
            Ok(())
        });
    }

    /// A table made for the elements a command is about to add takes them all without a
    /// resize (HSET of ten new fields: 16 slots at once), and the size follows the load rule.
    #[test]
    fn a_table_sized_for_its_elements_takes_them_without_resizing() {
        assert_eq!(slots_for(0), BUCKETS_MIN);
        assert_eq!(slots_for(6), 8, "6 of 8 is the 3/4 limit");
        assert_eq!(slots_for(7), 16);
        assert_eq!(slots_for(10), 16);
        assert_eq!(slots_for(u64::MAX), BUCKETS_MAX);
        let dir = tempfile::tempdir().expect("tempdir");
        let heap = heap(dir.path());
        for n in [1u64, 6, 7, 10, 100, 1000] {
            let d = with(&heap, |tx| {
                let d = create_for(tx, Kind::Hash, n)?;
                (0..n).try_for_each(|i| add(tx, d, &key(i), i))?;
                Ok(d)
            });
            with(&heap, |tx| {
                let h = Header::read(tx, d)?;
                assert!(!h.rehashing(), "{n} elements: no resize started: {h:?}");
                assert_eq!(h.size0, slots_for(n));
                assert_eq!(check(tx, d, SEED)?, n);
                Ok(())
            });
        }
    }

    /// A table made whole by `create_filled` is the one inserting the same entries one by
    /// one into a table sized for them makes: same header, every slot the same.
    #[test]
    fn a_filled_table_is_the_one_inserts_in_order_make() {
        let dir = tempfile::tempdir().expect("tempdir");
        let heap = heap(dir.path());
        for n in [1u64, 6, 7, 10, 100, 1000] {
            let (filled, inserted) = with(&heap, |tx| {
                let mut items = Vec::new();
                let inserted = create_for(tx, Kind::Hash, n)?;
                for i in 0..n {
                    let hash = store::hash(SEED, &key(i));
                    let e = new_entry(tx, tag::STRING, &key(i), hash, 0, Value::Word(i))?;
                    items.push((e, hash));
                    insert(tx, inserted, e, hash)?;
                }
                Ok((create_filled(tx, Kind::Hash, &items)?, inserted))
            });
            with(&heap, |tx| {
                let (a, b) = (Header::read(tx, filled)?, Header::read(tx, inserted)?);
                assert_eq!(a.words()[1..2], b.words()[1..2], "{n}: count");
                assert_eq!((a.size0, a.t1, a.rehash), (b.size0, b.t1, b.rehash), "{n}");
                assert_eq!(slots(tx, a.t0())?, slots(tx, b.t0())?, "{n}: slots");
                assert_eq!(check(tx, filled, SEED)?, n);
                for i in 0..n {
                    let found = find(tx, filled, SEED, &key(i))?.expect("every key found");
                    assert_eq!(found.entry.val, i);
                }
                Ok(())
            });
        }
    }

    /// A small deterministic generator (xorshift).
    fn rng(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Random inserts, replacements and deletions against a `HashMap`, through growth and
    /// shrinking (the key count swings between a handful and thousands), small tables whose
    /// probe runs wrap around the end, and resizes left half done between transactions:
    /// after each transaction the structure checks (every entry reachable from its home
    /// slot, none left in moved home slots, the count right), every key of the model is found
    /// with its value and no other, and a whole SCAN returns every key.
    #[test]
    fn the_index_matches_a_model_through_resizes_and_deletions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let heap = heap(dir.path());
        let d = with(&heap, |tx| create(tx, Kind::Hash));
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut resizing_seen = 0;
        for round in 0..120u64 {
            // Phases: grow to a few thousand, shrink to a few, grow again.
            let target = match (round / 20) % 3 {
                0 => 3000,
                1 => 4,
                _ => 600,
            };
            let ops = 1 + rng(&mut state) % 300;
            with(&heap, |tx| {
                for _ in 0..ops {
                    let k = rng(&mut state) % 6000;
                    let value = rng(&mut state);
                    let grow = (model.len() as u64) < target;
                    let found = step_find(tx, d, 1, SEED, &key(k))?;
                    match (found, model.contains_key(&k)) {
                        (None, false) if grow => {
                            add(tx, d, &key(k), value)?;
                            model.insert(k, value);
                        }
                        (None, false) => {}
                        (Some(f), true) if grow => {
                            let hash = store::hash(SEED, &key(k));
                            let e =
                                new_entry(tx, tag::STRING, &key(k), hash, 0, Value::Word(value))?;
                            replace(tx, &f, e)?;
                            store::free(tx, f.entry.off)?;
                            model.insert(k, value);
                        }
                        (Some(f), true) => {
                            unlink(tx, d, &f)?;
                            store::free(tx, f.entry.off)?;
                            model.remove(&k);
                        }
                        (f, there) => panic!("key {k}: table has {f:?}, model has it: {there}"),
                    }
                    // Deletions of random keys rarely meet one: delete a known one too.
                    if !grow {
                        if let Some(&k) = model.keys().next() {
                            let f = find(tx, d, SEED, &key(k))?.expect("a model key is found");
                            unlink(tx, d, &f)?;
                            store::free(tx, f.entry.off)?;
                            model.remove(&k);
                        }
                    }
                }
                Ok(())
            });
            with(&heap, |tx| {
                if Header::read(tx, d)?.rehashing() {
                    resizing_seen += 1;
                }
                assert_eq!(check(tx, d, SEED)?, model.len() as u64, "round {round}");
                for (&k, &v) in &model {
                    let f = find(tx, d, SEED, &key(k))?.expect("a model key is found");
                    assert_eq!(f.entry.val, v, "round {round} key {k}");
                }
                let mut scanned = std::collections::HashSet::new();
                let mut cursor = 0;
                loop {
                    cursor = scan(tx, d, cursor, |e| {
                        scanned.insert(e.key(tx)?);
                        Ok(())
                    })?;
                    if cursor == 0 {
                        break;
                    }
                }
                assert_eq!(
                    scanned.len(),
                    model.len(),
                    "round {round}: SCAN saw every key"
                );
                // Stale copies left by a resize are no elements: every walk skips them.
                let mut walked = std::collections::HashSet::new();
                for_each(tx, d, |e| {
                    assert!(
                        walked.insert(e.key(tx)?),
                        "round {round}: a key walked twice"
                    );
                    Ok(true)
                })?;
                assert_eq!(
                    walked, scanned,
                    "round {round}: for_each walks the elements"
                );
                let mut picks = state;
                for _ in 0..20 {
                    if let Some(f) = random(tx, d, &mut || rng(&mut picks))? {
                        assert!(scanned.contains(&f.entry.key(tx)?), "round {round}: random");
                    }
                }
                Ok(())
            });
        }
        assert!(
            resizing_seen > 5,
            "resizes were left half done: {resizing_seen}"
        );
    }
}
