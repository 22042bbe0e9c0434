//! The persistent hash table: the keyspace and, nested, every hash, set and sorted set.
//!
//! Layout (little-endian words, see `docs/design/kv-engine.md`):
//!
//! ```text
//! header (80 B): kind | count | table0 | buckets0 | table1 | buckets1 | rehash_index
//!                | reclaim_next | reclaim_cursor | extra (keyspace: keys with an expiry)
//! table:         buckets * u64, each the offset of the first entry of its chain (0: empty)
//! entry:         next | hash | meta (tag, flags, key length) | expire_ms | value | vlen,vcap
//!                | key bytes | inline value bytes (capacity vcap)
//! ```
//!
//! Resizing is incremental, like Redis's dict: a second table is allocated and every table
//! operation moves a bucket to it; lookups search both while it lasts. The load factor is 1
//! (grow past it, shrink below 1/8), so chains are short and every operation is O(1).

use super::store::Mem;

use super::limits::{BUCKETS_MAX, BUCKETS_MIN, RANDOM_BUCKET_TRIES, REHASH_EMPTY_VISITS};
use super::store::{self, corrupt, Result};
pub use crate::server::Prefetch;

/// Bytes of a table header.
pub const HEADER_BYTES: u64 = 80;
/// Bytes of an entry before its key.
pub const ENTRY_BYTES: u64 = 48;
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
    /// Bucket array of the main table.
    pub t0: u64,
    /// Its bucket count (a power of two).
    pub size0: u64,
    /// Bucket array being filled while resizing (0 when not).
    pub t1: u64,
    /// Its bucket count.
    pub size1: u64,
    /// Next bucket of `t0` to move while resizing.
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
    let table = store::zalloc(tx, BUCKETS_MIN * 8)?;
    let d = store::alloc(tx, HEADER_BYTES)?;
    let h = Header {
        kind,
        count: 0,
        t0: table,
        size0: BUCKETS_MIN,
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

/// An entry, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Its offset.
    pub off: u64,
    /// Next entry of the chain.
    pub next: u64,
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

/// Key bytes a lookup reads together with each entry of the chain.
const KEY_READ_AHEAD: usize = 64;

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
            next: w[0],
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
    let off = store::alloc(tx, size)?;
    let mut image = Vec::with_capacity(size as usize);
    let meta = u64::from(tag) | u64::from(flags) << 8 | (key.len() as u64) << 32;
    store::words_to_bytes(
        &[0, hash, meta, expire as u64, val, vlen | vcap << 32],
        &mut image,
    );
    image.extend_from_slice(key);
    image.extend_from_slice(inline);
    store::set_bytes(tx, off, &image)?;
    Ok(off)
}

/// A found entry and the word that points at it (a bucket or the previous entry's next).
#[derive(Clone, Copy, Debug)]
pub struct Found {
    /// The entry.
    pub entry: Entry,
    /// Offset of the word pointing at it.
    pub link: u64,
}

/// Finds `key` in the table at `d`.
pub fn find(tx: &Mem<'_, '_>, d: u64, seed: u64, key: &[u8]) -> Result<Option<Found>> {
    let h = Header::read(tx, d)?;
    find_in(tx, d, &h, store::hash(seed, key), key)
}

/// Moves up to `buckets` buckets of a resizing table, then finds `key` in it: [`step`] and
/// [`find`] with one read of the header.
pub fn step_find(
    tx: &Mem<'_, '_>,
    d: u64,
    buckets: u64,
    seed: u64,
    key: &[u8],
) -> Result<Option<Found>> {
    let h = step_header(tx, d, buckets)?;
    find_in(tx, d, &h, store::hash(seed, key), key)
}

/// Brings into the caches what a lookup of `key` in the table at `d` will read first: a batch
/// of the server prefetches for the requests a few places ahead of the one it runs, so their
/// two cache misses (bucket, then entry) overlap with other work instead of stalling it.
/// Errors are ignored: the lookup itself will meet and report them.
pub fn prefetch(tx: &Mem<'_, '_>, d: u64, seed: u64, key: &[u8], stage: Prefetch) {
    let Ok(h) = Header::read(tx, d) else {
        return;
    };
    let hash = store::hash(seed, key);
    let tables = [(h.t0, h.size0), (h.t1, h.size1)];
    let used = if h.rehashing() { 2 } else { 1 };
    for &(table, size) in &tables[..used] {
        let link = table + (hash & (size - 1)) * 8;
        match stage {
            Prefetch::Bucket => tx.prefetch(link),
            Prefetch::Entry => {
                if let Ok(at) = store::word(tx, link) {
                    if at != 0 {
                        tx.prefetch(at);
                        tx.prefetch(at + 64);
                    }
                }
            }
        }
    }
}

/// Finds `key` (whose hash is `hash`) in the table at `d`, whose header is `h`.
fn find_in(tx: &Mem<'_, '_>, d: u64, h: &Header, hash: u64, key: &[u8]) -> Result<Option<Found>> {
    let tables = [(h.t0, h.size0), (h.t1, h.size1)];
    let used = if h.rehashing() { 2 } else { 1 };
    for &(table, size) in &tables[..used] {
        let mut link = table + (hash & (size - 1)) * 8;
        let mut at = store::word(tx, link)?;
        let mut steps = 0u64;
        while at != 0 {
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
            if entry.hash == hash
                && entry.key_len == key.len() as u64
                && match key_here {
                    Some(bytes) => bytes == key,
                    None => store::bytes_equal(tx, at + ENTRY_BYTES, key)?,
                }
            {
                return Ok(Some(Found { entry, link }));
            }
            steps += 1;
            if steps > h.count.saturating_add(1).min(tx.objects_max(ENTRY_BYTES)) {
                return corrupt(format!("{d:#x}: a chain longer than the table's count"));
            }
            link = at;
            at = entry.next;
        }
    }
    Ok(None)
}

/// Links the fresh entry `e` (with `hash`) into the table and counts it.
pub fn insert(tx: &Mem<'_, '_>, d: u64, e: u64, hash: u64) -> Result<()> {
    let mut h = Header::read(tx, d)?;
    let (table, size) = if h.rehashing() {
        (h.t1, h.size1)
    } else {
        (h.t0, h.size0)
    };
    let slot = table + (hash & (size - 1)) * 8;
    let head = store::word(tx, slot)?;
    store::set_word(tx, e, head)?;
    store::set_word(tx, slot, e)?;
    h.count += 1;
    store::set_word(tx, d + field::COUNT, h.count)?;
    maybe_resize(tx, d, &mut h)
}

/// Unlinks a found entry and uncounts it (the caller frees it).
pub fn unlink(tx: &Mem<'_, '_>, d: u64, found: &Found) -> Result<()> {
    store::set_word(tx, found.link, found.entry.next)?;
    let mut h = Header::read(tx, d)?;
    h.count = h.count.saturating_sub(1);
    store::set_word(tx, d + field::COUNT, h.count)?;
    maybe_resize(tx, d, &mut h)
}

/// Puts the fresh entry `new` where `found` was (same chain position); the caller frees the
/// old one.
pub fn replace(tx: &Mem<'_, '_>, found: &Found, new: u64) -> Result<()> {
    store::set_word(tx, new, found.entry.next)?;
    store::set_word(tx, found.link, new)
}

/// Starts a resize when the load leaves 1/8..=1.
fn maybe_resize(tx: &Mem<'_, '_>, d: u64, h: &mut Header) -> Result<()> {
    if h.rehashing() {
        return Ok(());
    }
    let target = if h.count > h.size0 && h.size0 < BUCKETS_MAX {
        h.size0 * 2
    } else if h.size0 > BUCKETS_MIN && h.count * 8 < h.size0 {
        (h.count * 2).next_power_of_two().max(BUCKETS_MIN)
    } else {
        return Ok(());
    };
    h.t1 = store::zalloc(tx, target * 8)?;
    h.size1 = target;
    h.rehash = 0;
    h.write(tx, d)
}

/// Moves up to `buckets` buckets of a resizing table (a no-op otherwise).
pub fn step(tx: &Mem<'_, '_>, d: u64, buckets: u64) -> Result<()> {
    step_header(tx, d, buckets).map(|_| ())
}

/// [`step`], returning the header as it is after the step.
fn step_header(tx: &Mem<'_, '_>, d: u64, buckets: u64) -> Result<Header> {
    let mut h = Header::read(tx, d)?;
    if !h.rehashing() {
        return Ok(h);
    }
    let mut moved = 0;
    let mut empty = 0;
    while moved < buckets && h.rehash < h.size0 {
        let slot = h.t0 + h.rehash * 8;
        let mut at = store::word(tx, slot)?;
        h.rehash += 1;
        if at == 0 {
            empty += 1;
            if empty >= buckets * REHASH_EMPTY_VISITS {
                break;
            }
            continue;
        }
        let mut steps = 0;
        while at != 0 {
            let [next, hash] = store::words::<2>(tx, at)?;
            let target = h.t1 + (hash & (h.size1 - 1)) * 8;
            let head = store::word(tx, target)?;
            store::set_word(tx, at, head)?;
            store::set_word(tx, target, at)?;
            at = next;
            steps += 1;
            if steps > h.count.saturating_add(1).min(tx.objects_max(ENTRY_BYTES)) {
                return corrupt(format!("{d:#x}: a cycle in a chain"));
            }
        }
        store::set_word(tx, slot, 0)?;
        moved += 1;
    }
    if h.rehash >= h.size0 {
        store::free(tx, h.t0)?;
        h.t0 = h.t1;
        h.size0 = h.size1;
        h.t1 = 0;
        h.size1 = 0;
        h.rehash = 0;
    }
    h.write(tx, d)?;
    Ok(h)
}

/// Reads a whole bucket array.
fn buckets(tx: &Mem<'_, '_>, table: u64, size: u64) -> Result<Vec<u64>> {
    let raw = store::bytes(tx, table, size * 8)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        })
        .collect())
}

/// Calls `f` on each entry of the chain starting at `at`; stops when `f` returns false.
fn walk(
    tx: &Mem<'_, '_>,
    h: &Header,
    mut at: u64,
    f: &mut impl FnMut(&Entry) -> Result<bool>,
) -> Result<bool> {
    let mut steps = 0;
    while at != 0 {
        let entry = Entry::read(tx, at)?;
        if !f(&entry)? {
            return Ok(false);
        }
        at = entry.next;
        steps += 1;
        if steps > h.count.saturating_add(1).min(tx.objects_max(ENTRY_BYTES)) {
            return corrupt(format!(
                "a chain longer than its table's count ({})",
                h.count
            ));
        }
    }
    Ok(true)
}

/// Calls `f` on every entry (both tables while resizing); stops when `f` returns false.
pub fn for_each(tx: &Mem<'_, '_>, d: u64, mut f: impl FnMut(&Entry) -> Result<bool>) -> Result<()> {
    let h = Header::read(tx, d)?;
    let mut tables = vec![(h.t0, h.size0)];
    if h.rehashing() {
        tables.push((h.t1, h.size1));
    }
    for (table, size) in tables {
        for head in buckets(tx, table, size)? {
            if !walk(tx, &h, head, &mut f)? {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// One SCAN step from `cursor`: visits one bucket of the smaller table and every bucket of
/// the larger one it expands to, and returns the next cursor (0 when done). Cursors count
/// in reversed-bit order, so a cursor stays valid across a resize: no element present
/// during the whole scan is missed (some may be returned twice).
pub fn scan(
    tx: &Mem<'_, '_>,
    d: u64,
    cursor: u64,
    mut f: impl FnMut(&Entry) -> Result<()>,
) -> Result<u64> {
    let h = Header::read(tx, d)?;
    let mut visit = |table: u64, index: u64| -> Result<()> {
        let head = store::word(tx, table + index * 8)?;
        walk(tx, &h, head, &mut |e| f(e).map(|()| true)).map(|_| ())
    };
    let next = |v: u64, mask: u64| ((v | !mask).reverse_bits().wrapping_add(1)).reverse_bits();
    let mut v = cursor;
    if !h.rehashing() {
        let m0 = h.size0 - 1;
        visit(h.t0, v & m0)?;
        return Ok(next(v, m0));
    }
    let ((small, s_size), (large, l_size)) = if h.size0 <= h.size1 {
        ((h.t0, h.size0), (h.t1, h.size1))
    } else {
        ((h.t1, h.size1), (h.t0, h.size0))
    };
    let (m0, m1) = (s_size - 1, l_size - 1);
    visit(small, v & m0)?;
    loop {
        visit(large, v & m1)?;
        v = next(v, m1);
        if v & (m0 ^ m1) == 0 {
            break;
        }
    }
    Ok(v)
}

/// A random entry (SPOP): a random non-empty bucket, then a random entry of its chain.
pub fn random(tx: &Mem<'_, '_>, d: u64, rng: &mut impl FnMut() -> u64) -> Result<Option<Found>> {
    let h = Header::read(tx, d)?;
    if h.count == 0 {
        return Ok(None);
    }
    let total = h.size0 + if h.rehashing() { h.size1 } else { 0 };
    let slot_of = |i: u64| {
        if i < h.size0 {
            h.t0 + i * 8
        } else {
            h.t1 + (i - h.size0) * 8
        }
    };
    let mut chosen = None;
    for _ in 0..RANDOM_BUCKET_TRIES {
        let i = rng() % total;
        if store::word(tx, slot_of(i))? != 0 {
            chosen = Some(i);
            break;
        }
    }
    let start = match chosen {
        Some(i) => i,
        None => {
            let from = rng() % total;
            let mut found = None;
            for k in 0..total {
                let i = (from + k) % total;
                if store::word(tx, slot_of(i))? != 0 {
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
    let mut chain = Vec::new();
    let mut link = slot_of(start);
    let mut at = store::word(tx, link)?;
    while at != 0 {
        let entry = Entry::read(tx, at)?;
        chain.push(Found { entry, link });
        if chain.len() as u64 > h.count.saturating_add(1).min(tx.objects_max(ENTRY_BYTES)) {
            return corrupt(format!("{d:#x}: a cycle in a chain"));
        }
        link = at;
        at = entry.next;
    }
    let pick = (rng() % chain.len() as u64) as usize;
    Ok(chain.get(pick).copied())
}

/// Frees every allocation of the table's structure (headers and bucket arrays, not the
/// entries).
pub fn free_structure(tx: &Mem<'_, '_>, d: u64, h: &Header) -> Result<()> {
    store::free(tx, h.t0)?;
    if h.t1 != 0 {
        store::free(tx, h.t1)?;
    }
    store::free(tx, d)
}

/// Checks the table's structure: every entry in the right bucket, the count right.
/// Returns the entry count (tests and crash checks).
pub fn check(tx: &Mem<'_, '_>, d: u64, seed: u64) -> Result<u64> {
    let h = Header::read(tx, d)?;
    let mut n = 0;
    let mut tables = vec![(h.t0, h.size0, true)];
    if h.rehashing() {
        tables.push((h.t1, h.size1, false));
    }
    for (table, size, first) in tables {
        for (i, head) in buckets(tx, table, size)?.into_iter().enumerate() {
            if first && h.rehashing() && (i as u64) < h.rehash && head != 0 {
                return corrupt(format!("{d:#x}: moved bucket {i} not empty"));
            }
            walk(tx, &h, head, &mut |e| {
                let key = e.key(tx)?;
                if store::hash(seed, &key) != e.hash || e.hash & (size - 1) != i as u64 {
                    return corrupt(format!("{d:#x}: entry {:#x} in the wrong bucket", e.off));
                }
                n += 1;
                Ok(true)
            })?;
        }
    }
    if n != h.count {
        return corrupt(format!("{d:#x}: count {} but {n} entries", h.count));
    }
    Ok(n)
}
