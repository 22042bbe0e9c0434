//! Typed access to pool words and byte strings through the batch's transaction, and the
//! engine's error type.
//!
//! Every read goes through the open [`Tx`], so a command sees the writes of the commands
//! before it in the same batch. Nothing read from the pool is trusted: lengths are checked
//! against [`limits`](super::limits) before a buffer is sized from them, and null pointers
//! where an object must be are reported as corruption.

use mnemo_heap::{Heap, Tx};

use super::limits::VALUE_BYTES_MAX;

/// The batch's transaction, as the engine reads and writes through it. Reads see the
/// batch's earlier writes (the heap's write set finds them by lookup); words written again
/// and again reach the redo record once (the heap keeps their last value); writes into the
/// batch's own new allocations go to the pool at once (unlogged). A command that outgrows
/// the record fails in the write that did (`TransactionTooLarge`), and the engine rolls it
/// back to its savepoint.
#[derive(Debug)]
pub struct Mem<'a, 'h> {
    tx: &'a Tx<'h>,
    heap: &'h Heap,
    /// Start of the heap's data area: a read below it went through a corrupt pointer.
    data_start: u64,
    /// Writes, allocations and frees made through this wrapper: whether a command changed
    /// anything (WATCH).
    writes: std::cell::Cell<u64>,
}

impl<'a, 'h> Mem<'a, 'h> {
    /// Wraps the open transaction of `heap`.
    pub fn new(tx: &'a Tx<'h>, heap: &'h Heap) -> Mem<'a, 'h> {
        Mem {
            tx,
            heap,
            data_start: heap.geometry().zones_offset,
            writes: std::cell::Cell::new(0),
        }
    }

    /// Writes, allocations and frees made through this wrapper so far.
    pub fn writes(&self) -> u64 {
        self.writes.get()
    }

    fn count_write(&self) {
        self.writes.set(self.writes.get() + 1);
    }

    fn read_bytes(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        // A read the heap refuses went through a pointer from the pool: corruption.
        let len = out.len();
        let refused = |detail: String| {
            EngineError::Corrupt(format!("read of {len} bytes at {offset:#x}: {detail}"))
        };
        if offset < self.data_start {
            return Err(refused("outside the heap's data area".into()));
        }
        self.tx.read_bytes(offset, out).map_err(|e| match e {
            mnemo_heap::Error::Closed => EngineError::Heap(e),
            other => refused(other.to_string()),
        })
    }

    /// A hint that the line at `offset` will be read soon ([`mnemo_heap::Heap::pool`]'s
    /// prefetch): nothing is read, nothing checked.
    pub fn prefetch(&self, offset: u64) {
        self.heap.pool().prefetch(offset);
    }

    /// The pool's size in bytes: no read reaches past it.
    fn pool_size(&self) -> u64 {
        self.heap.pool().size()
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

    fn write_bytes(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.count_write();
        self.tx.write_bytes(offset, data).map_err(|e| match e {
            // A pointer read from the pool led outside the data area.
            mnemo_heap::Error::InvalidArgument(detail) => EngineError::Corrupt(detail),
            other => EngineError::Heap(other),
        })
    }

    fn alloc_bytes(&self, size: u64) -> Result<u64> {
        self.count_write();
        Ok(self.tx.alloc_bytes(size)?)
    }

    fn alloc_filled(&self, size: u64, image: &[u8]) -> Result<u64> {
        self.count_write();
        Ok(self.tx.alloc_filled(size, image)?)
    }

    fn zalloc_bytes(&self, size: u64) -> Result<u64> {
        self.count_write();
        Ok(self.tx.zalloc_bytes(size)?)
    }

    fn free_offset(&self, offset: u64) -> Result<()> {
        self.count_write();
        Ok(self.tx.free_offset(offset)?)
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
    /// A failed command could not be rolled back (or the batch could not continue after
    /// it); the batch must not be acknowledged.
    #[error("the batch could not be rolled back after a failed command: {0}")]
    RollbackFailed(String),
    /// The pool's databases do not fit the number asked for (`--databases`).
    #[error("databases: {0}")]
    Databases(String),
    /// The pool's keyspace has a layout version this build does not read.
    #[error("keyspace layout: {0}")]
    Layout(String),
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

/// Fills as much of `out` with the bytes at `offset` as the pool holds (less near its end)
/// and returns how many it read: one read for an object whose length is known only once its
/// header is read (an entry with its key and inline value).
pub(crate) fn read_window(tx: &Mem<'_, '_>, offset: u64, out: &mut [u8]) -> Result<usize> {
    nonnull(offset)?;
    let room = tx.pool_size().saturating_sub(offset);
    let n = usize::try_from(room).map_or(out.len(), |room| room.min(out.len()));
    tx.read_bytes(offset, &mut out[..n])?;
    Ok(n)
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

/// Appends the `len` bytes at `offset` to `out`, length checked before `out` grows.
pub(crate) fn bytes_into(tx: &Mem<'_, '_>, offset: u64, len: u64, out: &mut Vec<u8>) -> Result<()> {
    if len > VALUE_BYTES_MAX {
        return corrupt(format!("a length of {len} bytes at {offset:#x}"));
    }
    if len > 0 {
        nonnull(offset)?;
        let start = out.len();
        out.resize(start + len as usize, 0);
        tx.read_bytes(offset, &mut out[start..])?;
    }
    Ok(())
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

/// Allocate `size` bytes holding `image` at their start (the rest unspecified): one call
/// for an object built whole before it is stored.
pub(crate) fn alloc_filled(tx: &Mem<'_, '_>, size: u64, image: &[u8]) -> Result<u64> {
    tx.alloc_filled(size.max(8), image)
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
