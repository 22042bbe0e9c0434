//! Typed access to pool words and byte strings through the batch's transaction, and the
//! engine's error type.
//!
//! Every read goes through the open [`Tx`], so a command sees the writes of the commands
//! before it in the same batch. Nothing read from the pool is trusted: lengths are checked
//! against [`limits`](super::limits) before a buffer is sized from them, and null pointers
//! where an object must be are reported as corruption.

use mnemo_heap::{PPtr, Tx};

use super::limits::VALUE_BYTES_MAX;

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
pub(crate) fn word(tx: &Tx<'_>, offset: u64) -> Result<u64> {
    nonnull(offset)?;
    Ok(tx.read(PPtr::<u64>::from_offset(offset))?)
}

/// `N` consecutive words at `offset`.
pub(crate) fn words<const N: usize>(tx: &Tx<'_>, offset: u64) -> Result<[u64; N]> {
    nonnull(offset)?;
    Ok(tx.read(PPtr::<[u64; N]>::from_offset(offset))?)
}

/// Store the word `value` at `offset` when the batch commits.
pub(crate) fn set_word(tx: &Tx<'_>, offset: u64, value: u64) -> Result<()> {
    nonnull(offset)?;
    Ok(tx.write(PPtr::<u64>::from_offset(offset), &value)?)
}

/// Store consecutive words.
pub(crate) fn set_words<const N: usize>(tx: &Tx<'_>, offset: u64, values: &[u64; N]) -> Result<()> {
    nonnull(offset)?;
    Ok(tx.write(PPtr::<[u64; N]>::from_offset(offset), values)?)
}

/// `len` bytes at `offset`, length checked before the buffer is made.
pub(crate) fn bytes(tx: &Tx<'_>, offset: u64, len: u64) -> Result<Vec<u8>> {
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
pub(crate) fn set_bytes(tx: &Tx<'_>, offset: u64, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    nonnull(offset)?;
    Ok(tx.write_bytes(offset, data)?)
}

/// Allocate `size` bytes (contents unspecified; the caller writes all it later reads).
pub(crate) fn alloc(tx: &Tx<'_>, size: u64) -> Result<u64> {
    Ok(tx.alloc_bytes(size.max(8))?)
}

/// Allocate `size` zeroed bytes.
pub(crate) fn zalloc(tx: &Tx<'_>, size: u64) -> Result<u64> {
    Ok(tx.zalloc_bytes(size.max(8))?)
}

/// Free the allocation at `offset` when the batch commits.
pub(crate) fn free(tx: &Tx<'_>, offset: u64) -> Result<()> {
    nonnull(offset)?;
    Ok(tx.free_offset(offset)?)
}

fn nonnull(offset: u64) -> Result<()> {
    if offset == 0 {
        return corrupt("a null pointer where an object must be");
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
