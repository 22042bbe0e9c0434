//! The numbered databases (SELECT, MOVE, SWAPDB): where each database's keyspace table is
//! found, and how open creates, upgrades and checks them.
//!
//! Database 0's table is the one root word 2 points at (where layout version 1 kept the only
//! keyspace). The others are found through the **database array** that root word 4 points
//! at (since layout version 2; versions 3 and 4 changed the tables' index, `dict.rs`):
//!
//! ```text
//! array: magic "MNEMODBS" | count (databases, 0 included) | table of db 1 | ... | db count-1
//! ```
//!
//! Every database has a table from the moment it is counted (an empty one costs about 150
//! bytes), so a lookup never meets a missing table. A database's "slot" is the word that holds
//! its table's offset: SWAPDB swaps two slots, FLUSHDB puts a fresh table in one.

use super::dict::{self, Kind};
use super::keyspace::root;
use super::store::{self, corrupt, Mem, Result};
use super::{EngineError, LAYOUT_VERSION, ROOT_MAGIC, ROOT_NAME};

/// First word of the database array.
pub const ARRAY_MAGIC: u64 = u64::from_le_bytes(*b"MNEMODBS");

/// Bytes of the array's header (magic, count).
const ARRAY_HEADER_BYTES: u64 = 16;

/// Offset in the array of the slot of database `db` (1 or more).
pub fn slot_offset(db: u64) -> u64 {
    ARRAY_HEADER_BYTES + (db - 1) * 8
}

/// Bytes of an array for `count` databases.
fn array_bytes(count: u64) -> u64 {
    slot_offset(count.max(1))
}

/// Creates or checks the keyspace found through the root at `root` (whose words
/// are `words`) for `databases` databases; returns the database array's offset.
pub fn open(tx: &Mem<'_, '_>, root: u64, words: &[u64; 8], databases: usize) -> Result<u64> {
    let wanted = databases as u64;
    if words[0] == 0 {
        if words.iter().any(|&w| w != 0) {
            return corrupt("keyspace root without magic");
        }
        let ks = dict::create(tx, Kind::Keyspace)?;
        let array = create_array(tx, wanted, &[])?;
        store::set_words(tx, root, &[ROOT_MAGIC, LAYOUT_VERSION, ks, 0, array])?;
        return Ok(array);
    }
    if words[0] != ROOT_MAGIC {
        return corrupt(format!(
            "root {ROOT_NAME:?} does not hold a mnemo keyspace (magic {:#x})",
            words[0]
        ));
    }
    match words[1] {
        LAYOUT_VERSION => {
            check_table(tx, words[2], 0)?;
            open_array(tx, root, words[4], wanted)
        }
        3 => {
            // Version 3's arrays hold no stale slot: valid as they are, marked 4.
            check_table(tx, words[2], 0)?;
            store::set_word(tx, root + 8, LAYOUT_VERSION)?;
            open_array(tx, root, words[4], wanted)
        }
        old @ (1 | 2) => Err(EngineError::Layout(format!(
            "the pool's keyspace has layout version {old} (chained hash tables), this build \
             reads versions 3 and {LAYOUT_VERSION} only (open-addressed tables): open it with the \
             mnemo that made it and move the data over (redis-cli --rdb, or MIGRATE), or \
             start from an empty pool"
        ))),
        other => corrupt(format!(
            "keyspace layout version {other} (this build reads {LAYOUT_VERSION})"
        )),
    }
}

/// Checks the array at `array` and fits it to `wanted` databases: grows it (new empty
/// tables), or keeps it longer if the databases past `wanted` are empty.
fn open_array(tx: &Mem<'_, '_>, root: u64, array: u64, wanted: u64) -> Result<u64> {
    let [magic, count] = store::words::<2>(tx, array)?;
    if magic != ARRAY_MAGIC || count == 0 || count > super::limits::DATABASES_MAX as u64 {
        return corrupt(format!(
            "database array at {array:#x}: magic {magic:#x}, {count} databases"
        ));
    }
    let mut tables = Vec::with_capacity(count as usize);
    for db in 1..count {
        let table = store::word(tx, array + slot_offset(db))?;
        let header = check_table(tx, table, db)?;
        if db >= wanted && header.count > 0 {
            return Err(EngineError::Databases(format!(
                "the pool holds {} keys in database {db}: start with at least {} databases",
                header.count,
                db + 1
            )));
        }
        tables.push(table);
    }
    if count >= wanted {
        return Ok(array);
    }
    let grown = create_array(tx, wanted, &tables)?;
    store::set_word(tx, root + root::DATABASES, grown)?;
    store::free(tx, array)?;
    Ok(grown)
}

/// A new array of `count` databases holding `tables` for databases 1.. and new empty tables
/// for the rest.
fn create_array(tx: &Mem<'_, '_>, count: u64, tables: &[u64]) -> Result<u64> {
    let array = store::alloc(tx, array_bytes(count))?;
    store::set_words(tx, array, &[ARRAY_MAGIC, count])?;
    for db in 1..count {
        let table = match tables.get(db as usize - 1) {
            Some(&table) => table,
            None => dict::create(tx, Kind::Keyspace)?,
        };
        store::set_word(tx, array + slot_offset(db), table)?;
    }
    Ok(array)
}

fn check_table(tx: &Mem<'_, '_>, table: u64, db: u64) -> Result<dict::Header> {
    let header = dict::Header::read(tx, table)?;
    if header.kind != Kind::Keyspace {
        return corrupt(format!(
            "database {db} points at another kind of table than a keyspace"
        ));
    }
    Ok(header)
}
