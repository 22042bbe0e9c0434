//! The keyspace as commands see it: lookups with lazy expiry, typed access, string values,
//! deletion with lazy freeing of big values (the reclaim queue), and the volatile sorted-set
//! indexes.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};

use super::store::Mem;

use super::dict::{self, entry_field, field, tag, Entry, Found, Header, Kind, Value};
use super::limits::{FREE_INLINE_ELEMENTS_MAX, INLINE_VALUE_BYTES_MAX};
use super::list;
use super::store::{self, corrupt, Result};

/// The hash seed of every table (persistent: it must never change).
pub const SEED: u64 = 0x6d6e_656d_6f2d_6b76;

/// Root word offsets (the root named [`super::ROOT_NAME`]).
pub mod root {
    /// The keyspace table of database 0.
    pub const KEYSPACE: u64 = 16;
    /// First object of the reclaim queue.
    pub const RECLAIM: u64 = 24;
    /// The database array (layout version 2; `databases.rs`).
    pub const DATABASES: u64 = 32;
}

/// A score ordered as Redis orders sorted-set members: by score, `-0` equal to `0`.
#[derive(Clone, Copy, Debug)]
pub struct Score(pub f64);

impl Score {
    fn key(self) -> f64 {
        if self.0 == 0.0 {
            0.0
        } else {
            self.0
        }
    }
}
impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().total_cmp(&other.key())
    }
}

/// One sorted set's order: (score, member).
pub type ZIndex = BTreeSet<(Score, Vec<u8>)>;

/// Volatile ordered indexes of sorted sets, keyed by their table's offset, built on first
/// use after open (one scan of that set only). Indexes changed by the open batch are
/// dropped if it aborts, and rebuilt from the pool when next used.
#[derive(Debug, Default)]
pub struct ZCache {
    map: HashMap<u64, ZIndex>,
    dirty: HashSet<u64>,
}

impl ZCache {
    /// The batch committed: its changes are the truth now.
    pub fn committed(&mut self) {
        self.dirty.clear();
    }

    /// A command of the batch was rolled back: forget the indexes the batch changed (the
    /// command may have changed them halfway); they are rebuilt from the transaction's view
    /// on next use, and still forgotten if the batch aborts.
    pub fn rolled_back(&mut self) {
        for d in &self.dirty {
            self.map.remove(d);
        }
    }

    /// The batch aborted: forget what it changed.
    pub fn aborted(&mut self) {
        for d in self.dirty.drain() {
            self.map.remove(&d);
        }
    }

    /// Forget everything (FLUSHALL).
    pub fn clear(&mut self) {
        self.map.clear();
        self.dirty.clear();
    }

    fn forget(&mut self, d: u64) {
        self.map.remove(&d);
    }
}

/// What a command works with: the batch's transaction and the engine's volatile state.
#[derive(Debug)]
pub struct Ctx<'a, 'h> {
    /// The batch's transaction.
    pub tx: &'a Mem<'a, 'h>,
    /// Offset of the root.
    pub root: u64,
    /// Per database, the word holding its keyspace table's offset.
    pub slots: &'a [u64],
    /// The database the command runs in.
    pub db: usize,
    /// The batch's clock (Unix ms), one for the whole batch.
    pub now: i64,
    /// Random state (SPOP), put back when the command is rolled back.
    pub rng: &'a mut u64,
    /// Sorted-set indexes.
    pub zcache: &'a mut ZCache,
    /// Whether the reply is RESP3.
    pub resp3: bool,
    /// The keyspace table of [`Ctx::db`] once read by this command (0: not yet): a key write
    /// needs it twice, MSET twice per key. Only FLUSHDB, FLUSHALL and SWAPDB change it,
    /// through [`Ctx::set_keyspace`] and [`Ctx::swap_databases`].
    pub keyspace: std::cell::Cell<u64>,
    /// (table, key hash) of the last [`Ctx::step_find`] (a [`Ctx::lookup_write`], HSET's
    /// field lookup) that found its key absent: that lookup made the resize step the key's
    /// insert owes, so [`Ctx::put_string_in`] and [`Ctx::link_container`] insert that key
    /// without another ([`dict::insert_stepped`]). Taken by that insert.
    pub stepped: Option<(u64, u64)>,
}

/// A key's value type, as TYPE names it.
pub fn type_name(t: u8) -> &'static str {
    match t {
        tag::STRING => "string",
        tag::LIST => "list",
        tag::HASH => "hash",
        tag::SET => "set",
        tag::ZSET => "zset",
        _ => "none",
    }
}

/// The value is of another type than the command needs.
#[derive(Debug)]
pub struct WrongType;

/// A live key's entry if it has type `t`; `Err(WrongType)` if it has another.
pub fn typed(found: Option<Found>, t: u8) -> std::result::Result<Option<Found>, WrongType> {
    match found {
        Some(f) if f.entry.tag != t => Err(WrongType),
        other => Ok(other),
    }
}

impl Ctx<'_, '_> {
    /// The keyspace table of the command's database.
    pub fn keyspace(&self) -> Result<u64> {
        match self.keyspace.get() {
            0 => {
                let ks = self.keyspace_of(self.db)?;
                self.keyspace.set(ks);
                Ok(ks)
            }
            ks => Ok(ks),
        }
    }

    /// The keyspace table of database `db`.
    pub fn keyspace_of(&self, db: usize) -> Result<u64> {
        match self.slots.get(db) {
            Some(&slot) => store::word(self.tx, slot),
            None => corrupt(format!("no database {db}")),
        }
    }

    /// Makes `ks` the keyspace table of database `db` (FLUSHDB, FLUSHALL).
    pub fn set_keyspace(&self, db: usize, ks: u64) -> Result<()> {
        let Some(&slot) = self.slots.get(db) else {
            return corrupt(format!("no database {db}"));
        };
        store::set_word(self.tx, slot, ks)?;
        if db == self.db {
            self.keyspace.set(ks);
        }
        Ok(())
    }

    /// Exchanges the tables of two databases (SWAPDB).
    pub fn swap_databases(&self, a: usize, b: usize) -> Result<()> {
        let (ka, kb) = (self.keyspace_of(a)?, self.keyspace_of(b)?);
        self.set_keyspace(a, kb)?;
        self.set_keyspace(b, ka)
    }

    /// The same context in database `db` (MOVE, COPY ... DB).
    pub fn in_db<R>(&mut self, db: usize, f: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let (saved_db, saved_ks) = (self.db, self.keyspace.get());
        self.db = db;
        self.keyspace.set(0);
        let result = f(self);
        self.db = saved_db;
        self.keyspace.set(saved_ks);
        result
    }

    fn expired(&self, e: &Entry) -> bool {
        e.expire != 0 && e.expire <= self.now
    }

    /// Finds a key's entry, expired or not.
    pub fn lookup_raw(&self, key: &[u8]) -> Result<Option<Found>> {
        let ks = self.keyspace()?;
        dict::find(self.tx, ks, SEED, key)
    }

    /// Finds a live key (expired keys read as missing; reads do not delete them).
    pub fn lookup(&self, key: &[u8]) -> Result<Option<Found>> {
        let ks = self.keyspace()?;
        Ok(dict::find(self.tx, ks, SEED, key)?.filter(|f| !self.expired(&f.entry)))
    }

    /// [`dict::step_find`] of `key` in the table `d`, for a write: when the key is absent,
    /// the resize step it made is the one its insert by [`Ctx::put_string_in`] owes
    /// ([`Ctx::stepped`]).
    pub fn step_find(&mut self, d: u64, key: &[u8]) -> Result<Option<Found>> {
        let found = dict::step_find(self.tx, d, super::limits::REHASH_BUCKETS_PER_OP, SEED, key)?;
        if found.is_none() {
            self.stepped = Some((d, store::hash(SEED, key)));
        }
        Ok(found)
    }

    /// Finds a key for a write: moves a bucket if the keyspace is resizing, and deletes the
    /// key first if it has expired.
    pub fn lookup_write(&mut self, key: &[u8]) -> Result<Option<Found>> {
        let ks = self.keyspace()?;
        match self.step_find(ks, key)? {
            Some(f) if self.expired(&f.entry) => {
                self.delete(&f)?;
                Ok(None)
            }
            other => Ok(other),
        }
    }

    /// Deletes a found keyspace entry and its value.
    pub fn delete(&mut self, found: &Found) -> Result<()> {
        let ks = self.keyspace()?;
        dict::unlink(self.tx, ks, found)?;
        if found.entry.expire != 0 {
            self.add_expires(ks, -1)?;
        }
        self.drop_value(&found.entry)?;
        store::free(self.tx, found.entry.off)
    }

    fn add_expires(&self, ks: u64, delta: i64) -> Result<()> {
        let n = store::word(self.tx, ks + field::EXTRA)?;
        store::set_word(self.tx, ks + field::EXTRA, n.saturating_add_signed(delta))
    }

    /// Frees what an entry's value owns (not the entry): a string's own allocation, a
    /// container at once if small, else through the reclaim queue.
    pub fn drop_value(&mut self, e: &Entry) -> Result<()> {
        match e.tag {
            tag::STRING if !e.is_inline() => store::free(self.tx, e.val)?,
            tag::LIST => {
                let h = list::Header::read(self.tx, e.val)?;
                if h.len <= FREE_INLINE_ELEMENTS_MAX {
                    let mut budget = u64::MAX;
                    list::destroy_step(self.tx, e.val, &mut budget)?;
                } else {
                    self.enqueue(e.val, list::RECLAIM_NEXT)?;
                }
            }
            tag::HASH | tag::SET | tag::ZSET => {
                self.zcache.forget(e.val);
                let h = Header::read(self.tx, e.val)?;
                if h.count <= FREE_INLINE_ELEMENTS_MAX {
                    let mut budget = u64::MAX;
                    self.destroy_table_step(e.val, &mut budget)?;
                } else {
                    self.enqueue(e.val, field::RECLAIM_NEXT)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn enqueue(&self, object: u64, link_at: u64) -> Result<()> {
        let head = store::word(self.tx, self.root + root::RECLAIM)?;
        store::set_word(self.tx, object + link_at, head)?;
        store::set_word(self.tx, self.root + root::RECLAIM, object)
    }

    /// Frees up to about `budget` entries of a table (from its reclaim cursor); true once
    /// the table is gone.
    pub fn destroy_table_step(&mut self, d: u64, budget: &mut u64) -> Result<bool> {
        let h = Header::read(self.tx, d)?;
        let total = h.slots();
        let mut cursor = h.cursor;
        while cursor < total {
            if *budget == 0 {
                store::set_word(self.tx, d + field::CURSOR, cursor)?;
                return Ok(false);
            }
            // (A stale slot of a half-resized table reads as empty: its entry is freed
            // through the new array's copy.)
            let at = h.entry_at(self.tx, cursor)?;
            if at != 0 {
                let e = Entry::read(self.tx, at)?;
                self.drop_value(&e)?;
                store::free(self.tx, at)?;
                *budget = budget.saturating_sub(1);
            }
            cursor += 1;
        }
        dict::free_structure(self.tx, d, &h)?;
        *budget = budget.saturating_sub(1);
        Ok(true)
    }

    /// Whether the reclaim queue holds anything (a flushed table not yet freed).
    pub fn reclaim_queued(&self) -> Result<bool> {
        Ok(store::word(self.tx, self.root + root::RECLAIM)? != 0)
    }

    /// Frees up to `budget` allocations from the reclaim queue.
    pub fn reclaim_step(&mut self, mut budget: u64) -> Result<()> {
        while budget > 0 {
            let head = store::word(self.tx, self.root + root::RECLAIM)?;
            if head == 0 {
                return Ok(());
            }
            let kind = Kind::decode(store::word(self.tx, head)?)?;
            let (next, done) = if kind == Kind::List {
                let next = store::word(self.tx, head + list::RECLAIM_NEXT)?;
                (next, list::destroy_step(self.tx, head, &mut budget)?)
            } else {
                let next = store::word(self.tx, head + field::RECLAIM_NEXT)?;
                (next, self.destroy_table_step(head, &mut budget)?)
            };
            if !done {
                return Ok(());
            }
            store::set_word(self.tx, self.root + root::RECLAIM, next)?;
        }
        Ok(())
    }

    /// Sets a key's expiry (0: none), keeping the count of keys with one.
    pub fn set_expire(&self, e: &Entry, expire: i64) -> Result<()> {
        if e.expire == expire {
            return Ok(());
        }
        let ks = self.keyspace()?;
        store::set_word(self.tx, e.off + entry_field::EXPIRE, expire as u64)?;
        match (e.expire != 0, expire != 0) {
            (false, true) => self.add_expires(ks, 1),
            (true, false) => self.add_expires(ks, -1),
            _ => Ok(()),
        }
    }

    /// Stores a string value for `key`. `found` is the key's live entry if any (any type);
    /// `expire`: None keeps the current expiry, Some(0) clears it.
    pub fn put_string(
        &mut self,
        key: &[u8],
        found: Option<&Found>,
        value: &[u8],
        expire: Option<i64>,
    ) -> Result<()> {
        let ks = self.keyspace()?;
        self.put_string_in(ks, tag::STRING, key, found, value, expire, true)
    }

    /// [`Ctx::put_string`] into any table (`d`); `keyspace` says whether expiry counts.
    #[allow(clippy::too_many_arguments)]
    pub fn put_string_in(
        &mut self,
        d: u64,
        t: u8,
        key: &[u8],
        found: Option<&Found>,
        value: &[u8],
        expire: Option<i64>,
        keyspace: bool,
    ) -> Result<()> {
        let len = value.len() as u64;
        if let Some(f) = found {
            let e = &f.entry;
            if e.tag == tag::STRING && e.is_inline() && len <= e.vcap {
                // Zero-padded to the end of its last word when the capacity reaches it (bytes
                // past the length are never read): a write of whole words needs no read.
                let at = e.inline_at();
                let end = (at + len).next_multiple_of(8).min(at + e.vcap);
                let mut padded = [0u8; INLINE_VALUE_BYTES_MAX as usize + 8];
                let image = match padded.get_mut(..(end - at) as usize) {
                    Some(image) if end > at + len => {
                        image[..value.len()].copy_from_slice(value);
                        &image[..]
                    }
                    _ => value,
                };
                store::set_bytes(self.tx, at, image)?;
                // A value of the length it had (YCSB's updates) leaves the length word as it
                // is: one logged write, not two.
                if len != e.vlen {
                    store::set_word(self.tx, e.off + entry_field::VLEN, len | e.vcap << 32)?;
                }
                if let Some(x) = expire {
                    self.set_expire(e, x)?;
                }
                return Ok(());
            }
        }
        let old_expire = found.map_or(0, |f| f.entry.expire);
        let new_expire = expire.unwrap_or(old_expire);
        let new = self.string_entry(t, key, value, new_expire, found.map(|f| f.entry.hash))?;
        match found {
            Some(f) => {
                dict::replace(self.tx, f, new)?;
                self.drop_value(&f.entry)?;
                store::free(self.tx, f.entry.off)?;
                if keyspace && (old_expire != 0) != (new_expire != 0) {
                    self.add_expires(d, if new_expire != 0 { 1 } else { -1 })?;
                }
            }
            None => {
                self.insert_owed(d, new, store::hash(SEED, key))?;
                if keyspace && new_expire != 0 {
                    self.add_expires(d, 1)?;
                }
            }
        }
        Ok(())
    }

    /// A new entry for `key` holding the string `value` (inline when it is short, else in a
    /// blob of its own), not yet linked into any table. `hash`: the key's, if known.
    pub fn string_entry(
        &self,
        t: u8,
        key: &[u8],
        value: &[u8],
        expire: i64,
        hash: Option<u64>,
    ) -> Result<u64> {
        let hash = hash.unwrap_or_else(|| store::hash(SEED, key));
        let len = value.len() as u64;
        if len <= INLINE_VALUE_BYTES_MAX {
            let cap = len.next_multiple_of(8).max(8);
            dict::new_entry(self.tx, t, key, hash, expire, Value::Inline(value, cap))
        } else {
            let blob = store::alloc(self.tx, len)?;
            store::set_bytes(self.tx, blob, value)?;
            dict::new_entry(self.tx, t, key, hash, expire, Value::Blob(blob, len, len))
        }
    }

    /// Appends to a string entry (in place when it fits, else into a new allocation with
    /// room to grow); returns the new length.
    pub fn append(&mut self, f: &Found, tail: &[u8]) -> Result<u64> {
        let e = &f.entry;
        let len = e.vlen + tail.len() as u64;
        if len <= e.vcap && tail.len() as u64 <= super::limits::APPEND_IN_PLACE_BYTES_MAX {
            let at = if e.is_inline() { e.inline_at() } else { e.val };
            store::set_bytes(self.tx, at + e.vlen, tail)?;
            store::set_word(self.tx, e.off + entry_field::VLEN, len | e.vcap << 32)?;
            return Ok(len);
        }
        let mut value = e.string(self.tx)?;
        value.extend_from_slice(tail);
        if len <= INLINE_VALUE_BYTES_MAX {
            let key = e.key(self.tx)?;
            self.put_string(&key, Some(f), &value, None)?;
            return Ok(len);
        }
        let cap = (len * 2).min(super::limits::VALUE_BYTES_MAX).max(len);
        let blob = store::alloc(self.tx, cap)?;
        store::set_bytes(self.tx, blob, &value)?;
        if e.is_inline() {
            let key = e.key(self.tx)?;
            let new = dict::new_entry(
                self.tx,
                e.tag,
                &key,
                e.hash,
                e.expire,
                Value::Blob(blob, len, cap),
            )?;
            dict::replace(self.tx, f, new)?;
            store::free(self.tx, e.off)?;
        } else {
            store::free(self.tx, e.val)?;
            store::set_words(self.tx, e.off + entry_field::VAL, &[blob, len | cap << 32])?;
        }
        Ok(len)
    }

    /// Moves a found entry of the command's database to `key` in database `db` (RENAME,
    /// MOVE): a new entry holding the same value (the value itself is not copied: a string's
    /// own allocation and a container move with it) and expiry; the old entry is unlinked
    /// and freed. `key` must be absent from `db`.
    pub fn rekey(&mut self, found: &Found, key: &[u8], db: usize) -> Result<()> {
        let e = found.entry;
        let inline;
        let value = if e.tag == tag::STRING && e.is_inline() {
            inline = e.string(self.tx)?;
            Value::Inline(&inline, e.vcap)
        } else if e.tag == tag::STRING {
            Value::Blob(e.val, e.vlen, e.vcap)
        } else {
            Value::Word(e.val)
        };
        let hash = store::hash(SEED, key);
        let new = dict::new_entry(self.tx, e.tag, key, hash, e.expire, value)?;
        let source = self.keyspace()?;
        dict::unlink(self.tx, source, found)?;
        if e.expire != 0 {
            self.add_expires(source, -1)?;
        }
        store::free(self.tx, e.off)?;
        let target = self.keyspace_of(db)?;
        dict::insert(self.tx, target, new, hash)?;
        if e.expire != 0 {
            self.add_expires(target, 1)?;
        }
        Ok(())
    }

    /// Creates `key` holding a new empty container of type `t` (LIST, HASH, SET, ZSET);
    /// returns the container's offset.
    pub fn create_container(&mut self, key: &[u8], t: u8) -> Result<u64> {
        self.create_container_for(key, t, 0)
    }

    /// [`Ctx::create_container`] for a command about to add `expected` elements: a table is
    /// sized for them at once ([`dict::create_for`]).
    pub fn create_container_for(&mut self, key: &[u8], t: u8, expected: u64) -> Result<u64> {
        let object = match t {
            tag::LIST => list::create(self.tx)?,
            tag::HASH => dict::create_for(self.tx, Kind::Hash, expected)?,
            tag::SET => dict::create_for(self.tx, Kind::Set, expected)?,
            tag::ZSET => {
                let d = dict::create_for(self.tx, Kind::Zset, expected)?;
                self.zcache.map.insert(d, ZIndex::new());
                self.zcache.dirty.insert(d);
                d
            }
            other => return corrupt(format!("no container of tag {other}")),
        };
        self.link_container(key, t, object)?;
        Ok(object)
    }

    /// Adds `key` to the command's database, holding the new container `object` of type `t`
    /// (a table that [`dict::create_filled`] made with its elements).
    pub fn link_container(&mut self, key: &[u8], t: u8, object: u64) -> Result<()> {
        let ks = self.keyspace()?;
        let hash = store::hash(SEED, key);
        let e = dict::new_entry(self.tx, t, key, hash, 0, Value::Word(object))?;
        self.insert_owed(ks, e, hash)
    }

    /// Inserts entry `e` of a key absent from table `d`: without a resize step when this
    /// command's lookup of that key made it ([`Ctx::stepped`]; HSET of a new key looks it up,
    /// builds the hash, then links it here).
    fn insert_owed(&mut self, d: u64, e: u64, hash: u64) -> Result<()> {
        if self.stepped == Some((d, hash)) {
            self.stepped = None;
            dict::insert_stepped(self.tx, d, e, hash)
        } else {
            dict::insert(self.tx, d, e, hash)
        }
    }

    /// The sorted set's order index, built from the pool on first use.
    pub fn zindex(&mut self, d: u64) -> Result<&mut ZIndex> {
        if !self.zcache.map.contains_key(&d) {
            let mut index = ZIndex::new();
            dict::for_each(self.tx, d, |e| {
                index.insert((Score(e.score()), e.key(self.tx)?));
                Ok(true)
            })?;
            self.zcache.map.insert(d, index);
        }
        match self.zcache.map.get_mut(&d) {
            Some(index) => Ok(index),
            None => corrupt("sorted-set index vanished"),
        }
    }

    /// Marks a sorted set's index as changed by this batch.
    pub fn zdirty(&mut self, d: u64) {
        self.zcache.dirty.insert(d);
    }
}
