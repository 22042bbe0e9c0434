//! Typed access to pool words and byte strings through the batch's transaction, and the
//! engine's error type.
//!
//! Every read goes through the open [`Tx`], so a command sees the writes of the commands
//! before it in the same batch. Nothing read from the pool is trusted: lengths are checked
//! against [`limits`](super::limits) before a buffer is sized from them, and null pointers
//! where an object must be are reported as corruption.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use mnemo_heap::{Heap, Tx};

use super::limits::VALUE_BYTES_MAX;

/// The open batch's logged writes, kept word by word, so that every read goes straight to
/// the pool and is patched here, instead of through the transaction's write-set lookup
/// (linear in the batch's writes: a batch of a thousand commands made it quadratic).
///
/// * `logged`: the current value of every 8-byte word written by a logged write. The pool
///   holds the committed bytes and the unlogged writes into this batch's fresh allocations;
///   pool bytes patched with these words are exactly what the transaction would return.
/// * `fresh`: allocations made by the batch (offset -> requested size). The heap writes into
///   them in place without logging, so writes inside them are not kept here. The requested
///   size is at most the heap's reservation, so "fresh here" implies "fresh for the heap":
///   the shortcut errs only towards keeping a word.
#[derive(Debug, Default)]
pub struct Overlay {
    logged: RefCell<HashMap<u64, [u8; 8]>>,
    fresh: RefCell<BTreeMap<u64, u64>>,
}

impl Overlay {
    /// Forget everything (a new transaction).
    pub fn clear(&self) {
        self.logged.borrow_mut().clear();
        self.fresh.borrow_mut().clear();
    }

    fn is_fresh(&self, offset: u64, len: u64) -> bool {
        let fresh = self.fresh.borrow();
        fresh
            .range(..=offset)
            .next_back()
            .is_some_and(|(&at, &size)| offset + len <= at + size)
    }

    /// Patches `out` (pool bytes at `offset`) with the logged words it overlaps.
    fn patch(&self, offset: u64, out: &mut [u8]) {
        let logged = self.logged.borrow();
        if logged.is_empty() || out.is_empty() {
            return;
        }
        let end = offset + out.len() as u64;
        let first = offset & !7;
        let mut apply = |word: u64, bytes: &[u8; 8]| {
            for (i, byte) in bytes.iter().enumerate() {
                let at = word + i as u64;
                if at >= offset && at < end {
                    out[(at - offset) as usize] = *byte;
                }
            }
        };
        let words = (end - first).div_ceil(8);
        if words as usize <= logged.len() {
            for i in 0..words {
                if let Some(bytes) = logged.get(&(first + i * 8)) {
                    apply(first + i * 8, bytes);
                }
            }
        } else {
            for (&word, bytes) in logged.iter() {
                if word >= first && word < end {
                    apply(word, bytes);
                }
            }
        }
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

    fn write_bytes(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.tx.write_bytes(offset, data)?;
        let len = data.len() as u64;
        if len == 0 || self.overlay.is_fresh(offset, len) {
            return Ok(());
        }
        // Keep the words this logged write changes, whole (their other bytes as read now).
        let (first, end) = (offset & !7, offset + len);
        let mut word = first;
        while word < end {
            let mut bytes = [0u8; 8];
            self.read_bytes(word, &mut bytes)?;
            for (i, byte) in bytes.iter_mut().enumerate() {
                let at = word + i as u64;
                if at >= offset && at < end {
                    *byte = data[(at - offset) as usize];
                }
            }
            self.overlay.logged.borrow_mut().insert(word, bytes);
            word += 8;
        }
        Ok(())
    }

    fn alloc_bytes(&self, size: u64) -> Result<u64> {
        let offset = self.tx.alloc_bytes(size)?;
        self.overlay.fresh.borrow_mut().insert(offset, size);
        Ok(offset)
    }

    fn zalloc_bytes(&self, size: u64) -> Result<u64> {
        let offset = self.tx.zalloc_bytes(size)?;
        self.overlay.fresh.borrow_mut().insert(offset, size);
        Ok(offset)
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
    let mut image = Vec::with_capacity(N * 8);
    words_to_bytes(values, &mut image);
    tx.write_bytes(offset, &image)
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
    Ok(tx.tx.free_offset(offset)?)
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
