//! Typed access to pool words and byte strings through the batch's transaction, and the
//! engine's error type.
//!
//! Every read goes through the open [`Tx`], so a command sees the writes of the commands
//! before it in the same batch. Nothing read from the pool is trusted: lengths are checked
//! against [`limits`](super::limits) before a buffer is sized from them, and null pointers
//! where an object must be are reported as corruption.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use mnemo_heap::{Heap, Tx};

use super::limits::VALUE_BYTES_MAX;

/// Bytes a waiting word that starts a run (of words waiting next to each other, in the order
/// they were first written: what [`Mem::flush`] hands over as one write) may add to the
/// heap's redo record, bounded from above: an entry's 16 bytes of header and 8 of data, or,
/// when the run lies in the heap's reservation of a fresh allocation past the size asked
/// for, a check entry (32).
const RECORD_BYTES_RUN_START: u64 = 32;
/// Bytes each further word of a run adds: its 8 bytes of data (a check entry covers the
/// whole run).
const RECORD_BYTES_RUN_WORD: u64 = 8;
/// Bytes an allocation, a free or a write into a fresh allocation may add to the record.
const RECORD_BYTES_PER_OP: u64 = 32;
/// The record's header, with room to spare.
const RECORD_BYTES_HEADER: u64 = 64;

/// Hashes word offsets (8-aligned) for the overlay's map: one multiply, where the standard
/// hasher's SipHash was a fifth of a batch of MSETs.
#[derive(Clone, Copy, Debug, Default)]
struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (n >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0 ^ self.0 >> 29
    }
}

/// A word the batch wrote: its current value, and whether the heap's transaction has it yet.
#[derive(Clone, Copy, Debug)]
struct Word {
    bytes: [u8; 8],
    pending: bool,
}

/// The open batch's writes outside its own fresh allocations, kept word by word: the batch's
/// write set as the engine sees it.
///
/// * Reads go straight to the pool and are patched with these words, instead of through the
///   transaction's write-set lookup (linear in the batch's writes).
/// * Writes are **not** handed to the heap's transaction one by one: a word written many
///   times in a batch (a key's value and length under MSET, a table's count under SETs of new
///   keys, a list's tail) would become that many redo entries. They wait here and
///   [`Mem::flush`] hands each changed word over once, neighbours merged into one write. The
///   engine flushes before the commit. An upper bound of the record's size is kept, and a
///   command that takes it past the capacity fails ([`Mem::check_size`]), so a too-large
///   record fails in the command that caused it, never at the commit.
/// * `fresh`: allocations made by the batch (offset -> requested size). The heap writes into
///   them in place without logging, so writes there go to the heap at once and are not kept.
///   The requested size is at most the heap's reservation, so "fresh here" implies "fresh
///   for the heap".
#[derive(Debug)]
pub struct Overlay {
    words: RefCell<HashMap<u64, Word, BuildHasherDefault<WordHasher>>>,
    /// Words changed since the last flush (each once).
    pending: RefCell<Vec<u64>>,
    /// Upper bound of the bytes the pending words will add to the record when flushed
    /// (per run [`RECORD_BYTES_RUN_START`], then [`RECORD_BYTES_RUN_WORD`] per word). The same
    /// on a replay of the same commands: it depends on the words' order, not on where the
    /// heap put new objects.
    pending_bytes: Cell<u64>,
    /// Lowest word and end of the highest word kept (a read outside skips the map).
    lo: Cell<u64>,
    hi: Cell<u64>,
    /// Upper bound of the bytes the heap's record holds already (flushed words, allocations,
    /// frees, fresh writes).
    record_bytes: Cell<u64>,
    fresh: RefCell<BTreeMap<u64, u64>>,
    /// Reused by flushes.
    buf: RefCell<Vec<u8>>,
}

impl Default for Overlay {
    fn default() -> Overlay {
        Overlay {
            words: RefCell::default(),
            pending: RefCell::default(),
            pending_bytes: Cell::new(0),
            lo: Cell::new(u64::MAX),
            hi: Cell::new(0),
            record_bytes: Cell::new(RECORD_BYTES_HEADER),
            fresh: RefCell::default(),
            buf: RefCell::default(),
        }
    }
}

impl Overlay {
    /// Forget everything (a new transaction).
    pub fn clear(&self) {
        self.words.borrow_mut().clear();
        self.pending.borrow_mut().clear();
        self.pending_bytes.set(0);
        self.lo.set(u64::MAX);
        self.hi.set(0);
        self.record_bytes.set(RECORD_BYTES_HEADER);
        self.fresh.borrow_mut().clear();
    }

    fn is_fresh(&self, offset: u64, len: u64) -> bool {
        let fresh = self.fresh.borrow();
        fresh
            .range(..=offset)
            .next_back()
            .is_some_and(|(&at, &size)| offset + len <= at + size)
    }

    /// Patches `out` (pool bytes at `offset`) with the kept words it overlaps.
    fn patch(&self, offset: u64, out: &mut [u8]) {
        let end = offset + out.len() as u64;
        if out.is_empty() || end <= self.lo.get() || offset >= self.hi.get() {
            return;
        }
        let words = self.words.borrow();
        let first = offset & !7;
        let mut apply = |word: u64, bytes: &[u8; 8]| {
            let (lo, hi) = (word.max(offset), (word + 8).min(end));
            out[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&bytes[(lo - word) as usize..(hi - word) as usize]);
        };
        let count = (end - first).div_ceil(8);
        if count as usize <= words.len() {
            for i in 0..count {
                let word = first + i * 8;
                if let Some(w) = words.get(&word) {
                    apply(word, &w.bytes);
                }
            }
        } else {
            for (&word, w) in words.iter() {
                if word + 8 > offset && word < end {
                    apply(word, &w.bytes);
                }
            }
        }
    }

    /// Keeps `bytes` as the new value of `word`.
    fn set(&self, word: u64, bytes: [u8; 8]) {
        let mut words = self.words.borrow_mut();
        match words.get_mut(&word) {
            Some(w) => {
                w.bytes = bytes;
                if !w.pending {
                    w.pending = true;
                    self.push_pending(word);
                }
            }
            None => {
                words.insert(
                    word,
                    Word {
                        bytes,
                        pending: true,
                    },
                );
                self.push_pending(word);
                self.lo.set(self.lo.get().min(word));
                self.hi.set(self.hi.get().max(word + 8));
            }
        }
    }

    fn push_pending(&self, word: u64) {
        let mut pending = self.pending.borrow_mut();
        let continues = word
            .checked_sub(8)
            .is_some_and(|w| pending.last() == Some(&w));
        let bytes = if continues {
            RECORD_BYTES_RUN_WORD
        } else {
            RECORD_BYTES_RUN_START
        };
        self.pending_bytes.set(self.pending_bytes.get() + bytes);
        pending.push(word);
    }

    fn add_record_bytes(&self, bytes: u64) {
        self.record_bytes
            .set(self.record_bytes.get().saturating_add(bytes));
    }
}

/// The batch's transaction with its [`Overlay`]: every access of the engine goes through it.
#[derive(Debug)]
pub struct Mem<'a, 'h> {
    tx: &'a Tx<'h>,
    heap: &'h Heap,
    overlay: &'a Overlay,
}

impl<'a, 'h> Mem<'a, 'h> {
    /// Wraps the open transaction of `heap`.
    pub fn new(tx: &'a Tx<'h>, heap: &'h Heap, overlay: &'a Overlay) -> Mem<'a, 'h> {
        Mem { tx, heap, overlay }
    }

    fn read_bytes(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let result = self.heap.read_bytes(offset, out);
        if result.is_ok() {
            self.overlay.patch(offset, out);
        }
        // A read the heap refuses went through a pointer from the pool: corruption.
        result.map_err(|e| match e {
            mnemo_heap::Error::Closed => EngineError::Heap(e),
            other => EngineError::Corrupt(format!(
                "read of {} bytes at {offset:#x}: {other}",
                out.len()
            )),
        })
    }

    /// The most objects of `size` bytes the pool could hold: a walk longer than that is a
    /// cycle, whatever the (possibly corrupt) counts say.
    pub fn objects_max(&self, size: u64) -> u64 {
        self.heap.pool().size() / size.max(1)
    }

    fn read_words<const N: usize>(&self, offset: u64) -> Result<[u64; N]> {
        let mut raw = [[0u8; 8]; N];
        self.read_bytes(offset, raw.as_flattened_mut())?;
        Ok(raw.map(u64::from_le_bytes))
    }

    /// Whether the bytes at `offset` equal `expected` (compared in pieces: no allocation).
    fn bytes_equal(&self, offset: u64, expected: &[u8]) -> Result<bool> {
        let mut chunk = [0u8; 64];
        let mut done = 0;
        while done < expected.len() {
            let n = (expected.len() - done).min(chunk.len());
            self.read_bytes(offset + done as u64, &mut chunk[..n])?;
            if chunk[..n] != expected[done..done + n] {
                return Ok(false);
            }
            done += n;
        }
        Ok(true)
    }

    /// Whether the heap lets user code write there: the data area, inside chunks (what
    /// `Tx::write_bytes` checks, done here because the write reaches the heap later).
    fn writable(&self, offset: u64, len: u64) -> bool {
        let g = self.heap.geometry();
        offset >= g.zones_offset
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= self.heap.pool().size())
            && g.chunk_of(offset).is_some()
            && g.chunk_of(offset + len - 1).is_some()
    }

    fn write_bytes(&self, offset: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        if len == 0 {
            return Ok(());
        }
        if self.overlay.is_fresh(offset, len) {
            // The heap writes it in place (unlogged, checked by CRC at recovery).
            self.tx.write_bytes(offset, data)?;
            self.overlay.add_record_bytes(RECORD_BYTES_PER_OP);
            return Ok(());
        }
        if !self.writable(offset, len) {
            return corrupt(format!(
                "a write of {len} bytes at {offset:#x}, outside the heap's data"
            ));
        }
        // Keep the words this write changes, whole (their other bytes as read now).
        let end = offset + len;
        let mut word = offset & !7;
        while word < end {
            let (lo, hi) = (word.max(offset), (word + 8).min(end));
            let mut bytes = [0u8; 8];
            if hi - lo < 8 {
                self.read_bytes(word, &mut bytes)?;
            }
            bytes[(lo - word) as usize..(hi - word) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            self.overlay.set(word, bytes);
            word += 8;
        }
        Ok(())
    }

    /// Hands the words changed since the last flush to the heap's transaction: each once, in
    /// the order they were first written, a run of neighbouring words (a multi-word write) as
    /// one write. (Sorting them to merge more cost more than the entries it saved.)
    pub fn flush(&self) -> Result<()> {
        let mut pending = self.overlay.pending.borrow_mut();
        if pending.is_empty() {
            return Ok(());
        }
        let mut words = self.overlay.words.borrow_mut();
        let mut buf = self.overlay.buf.borrow_mut();
        let mut i = 0;
        while i < pending.len() {
            let start = pending[i];
            buf.clear();
            while i < pending.len() && pending[i] == start + buf.len() as u64 {
                if let Some(w) = words.get_mut(&pending[i]) {
                    buf.extend_from_slice(&w.bytes);
                    w.pending = false;
                }
                i += 1;
            }
            if buf.is_empty() {
                // Not kept (cannot happen): skip it rather than loop.
                i += 1;
                continue;
            }
            self.tx.write_bytes(start, &buf)?;
            self.overlay.add_record_bytes(16 + buf.len() as u64);
        }
        pending.clear();
        self.overlay.pending_bytes.set(0);
        Ok(())
    }

    /// Fails with the heap's `TransactionTooLarge` if the batch's redo record could outgrow
    /// its capacity (one of a lane log's slots), by an upper bound of its size. A too-large
    /// batch then fails here, in the command that grew it, never in the final flush before
    /// the commit; and a replay of the commands before it (after a rollback) stays under the
    /// same bound, so it cannot fail where they first passed. (The exact size is no such
    /// guard: it differs between runs, since entries of neighbouring allocations merge and a
    /// replay allocates elsewhere. Flushing to measure it once made a replay fail and
    /// poison the batch.)
    pub fn check_size(&self) -> Result<()> {
        let waiting = self.overlay.pending_bytes.get();
        let capacity = self.heap.geometry().slot_size();
        let needed = self.overlay.record_bytes.get().saturating_add(waiting);
        if needed > capacity {
            return Err(EngineError::Heap(mnemo_heap::Error::TransactionTooLarge {
                needed,
                capacity,
            }));
        }
        Ok(())
    }

    fn alloc_bytes(&self, size: u64) -> Result<u64> {
        let offset = self.tx.alloc_bytes(size)?;
        self.overlay.add_record_bytes(RECORD_BYTES_PER_OP);
        self.overlay.fresh.borrow_mut().insert(offset, size);
        Ok(offset)
    }

    fn zalloc_bytes(&self, size: u64) -> Result<u64> {
        let offset = self.tx.zalloc_bytes(size)?;
        // The allocation and its zeroing (a fresh range).
        self.overlay.add_record_bytes(2 * RECORD_BYTES_PER_OP);
        self.overlay.fresh.borrow_mut().insert(offset, size);
        Ok(offset)
    }

    fn free_offset(&self, offset: u64) -> Result<()> {
        self.tx.free_offset(offset)?;
        self.overlay.add_record_bytes(RECORD_BYTES_PER_OP);
        Ok(())
    }
}

/// Why a command (or open, or commit) could not complete.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The heap failed: out of space, transaction too large, media error...
    #[error(transparent)]
    Heap(#[from] mnemo_heap::Error),
    /// Keyspace data read from the pool is invalid.
    #[error("keyspace data in the pool is corrupt: {0}")]
    Corrupt(String),
    /// A replay after a failed command did not reproduce the batch; the batch must not be
    /// acknowledged.
    #[error("the batch could not be replayed after a failed command: {0}")]
    ReplayFailed(String),
}

impl EngineError {
    /// The pool is full (after the heap tried to grow it).
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self,
            EngineError::Heap(mnemo_heap::Error::OutOfSpace { .. })
        )
    }

    /// The batch's redo record would not fit a lane log.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            EngineError::Heap(mnemo_heap::Error::TransactionTooLarge { .. })
        )
    }
}

/// Result of engine internals.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// A corruption error.
pub(crate) fn corrupt<T>(what: impl Into<String>) -> Result<T> {
    Err(EngineError::Corrupt(what.into()))
}

/// The 8-byte word at `offset`.
pub(crate) fn word(tx: &Mem<'_, '_>, offset: u64) -> Result<u64> {
    nonnull(offset)?;
    Ok(tx.read_words::<1>(offset)?[0])
}

/// `N` consecutive words at `offset`.
pub(crate) fn words<const N: usize>(tx: &Mem<'_, '_>, offset: u64) -> Result<[u64; N]> {
    nonnull(offset)?;
    tx.read_words::<N>(offset)
}

/// Store the word `value` at `offset` when the batch commits.
pub(crate) fn set_word(tx: &Mem<'_, '_>, offset: u64, value: u64) -> Result<()> {
    nonnull(offset)?;
    tx.write_bytes(offset, &value.to_le_bytes())
}

/// Store consecutive words.
pub(crate) fn set_words<const N: usize>(
    tx: &Mem<'_, '_>,
    offset: u64,
    values: &[u64; N],
) -> Result<()> {
    nonnull(offset)?;
    let image = values.map(u64::to_le_bytes);
    tx.write_bytes(offset, image.as_flattened())
}

/// Fills `out` with the bytes at `offset`.
pub(crate) fn read_into(tx: &Mem<'_, '_>, offset: u64, out: &mut [u8]) -> Result<()> {
    nonnull(offset)?;
    tx.read_bytes(offset, out)
}

/// Whether the `expected.len()` bytes at `offset` equal `expected` (no allocation).
pub(crate) fn bytes_equal(tx: &Mem<'_, '_>, offset: u64, expected: &[u8]) -> Result<bool> {
    if expected.is_empty() {
        return Ok(true);
    }
    nonnull(offset)?;
    tx.bytes_equal(offset, expected)
}

/// `len` bytes at `offset`, length checked before the buffer is made.
pub(crate) fn bytes(tx: &Mem<'_, '_>, offset: u64, len: u64) -> Result<Vec<u8>> {
    if len > VALUE_BYTES_MAX {
        return corrupt(format!("a length of {len} bytes at {offset:#x}"));
    }
    let mut out = vec![0u8; len as usize];
    if len > 0 {
        nonnull(offset)?;
        tx.read_bytes(offset, &mut out)?;
    }
    Ok(out)
}

/// Store bytes at `offset`.
pub(crate) fn set_bytes(tx: &Mem<'_, '_>, offset: u64, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    nonnull(offset)?;
    tx.write_bytes(offset, data)
}

/// Allocate `size` bytes (contents unspecified; the caller writes all it later reads).
pub(crate) fn alloc(tx: &Mem<'_, '_>, size: u64) -> Result<u64> {
    tx.alloc_bytes(size.max(8))
}

/// Allocate `size` zeroed bytes.
pub(crate) fn zalloc(tx: &Mem<'_, '_>, size: u64) -> Result<u64> {
    tx.zalloc_bytes(size.max(8))
}

/// Free the allocation at `offset` when the batch commits.
pub(crate) fn free(tx: &Mem<'_, '_>, offset: u64) -> Result<()> {
    nonnull(offset)?;
    tx.free_offset(offset)
}

/// Largest offset believed when read from the pool (pools are far smaller): offsets and
/// lengths read from the pool can then be added without overflow.
pub(crate) const OFFSET_MAX: u64 = 1 << 56;

fn nonnull(offset: u64) -> Result<()> {
    if offset == 0 {
        return corrupt("a null pointer where an object must be");
    }
    if offset > OFFSET_MAX {
        return corrupt(format!("an offset of {offset:#x}"));
    }
    Ok(())
}

/// Words as little-endian bytes (the heap stores native integers on little-endian targets).
pub(crate) fn words_to_bytes(words: &[u64], out: &mut Vec<u8>) {
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// The keyed hash of every table: stable across processes and versions (it is persistent).
/// A multiply-rotate mix over 8-byte words, then a final avalanche.
pub(crate) fn hash(seed: u64, key: &[u8]) -> u64 {
    const M1: u64 = 0x9e37_79b9_7f4a_7c15;
    const M2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M1);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(w).wrapping_mul(M2))
            .rotate_left(31)
            .wrapping_mul(M1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w).wrapping_mul(M2))
            .rotate_left(31)
            .wrapping_mul(M1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(M2);
    h ^= h >> 29;
    h = h.wrapping_mul(M1);
    h ^ (h >> 32)
}
