//! The media seam: what holds a pool's bytes and makes them durable.
//!
//! Implementations: [`crate::FileMedia`] (a file mapped into memory), the simulated medium
//! of `mnemo-testkit` (records every flush and fence to build crash images), and later
//! virtual persistent memory. The layers above see only this trait, so a medium can be
//! swapped without touching them.
//!
//! # Contract
//! * [`Media::base`] never changes for the life of the medium, including across
//!   [`Media::grow`]: implementations reserve address space for their whole capacity.
//! * Stores are plain CPU stores into `base()..base()+len()`. A store is durable only after a
//!   [`Media::flush`] covering it *followed by* a successful [`Media::drain`].
//! * Every flush and fence of the library goes through these two methods: the crash
//!   simulator and the NVMM emulator hook here and see every event.

use std::fmt::Debug;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::cpu::FlushKind;
use crate::error::MediaError;
use crate::wal::LogFile;

/// Where the bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MediaKind {
    /// A file on tmpfs (such as /dev/shm): the stand-in for NVMM; flushed cache lines are
    /// as durable as this machine's memory.
    Tmpfs,
    /// A file on a DAX file system (`MAP_SYNC` accepted): real persistent memory.
    Dax,
    /// A file in the page cache of an ordinary file system: durable only after `msync(2)`.
    PageCache,
    /// Memory of a simulator (tests).
    Simulated,
    /// Virtual persistent memory.
    Virtual,
}

/// How data is made durable on a medium.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// Flush cache lines, then fence.
    CpuFlush,
    /// The kernel writes dirty pages back: `msync(2)` at every drain.
    Msync,
}

/// A description of a medium, for `mnemo pool info` and logs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MediaInfo {
    /// Where the bytes live.
    pub kind: MediaKind,
    /// How they are made durable.
    pub durability: Durability,
    /// Flush instruction in use (meaningful with [`Durability::CpuFlush`]).
    pub flush: FlushKind,
    /// Why this durability was chosen.
    pub reason: String,
}

/// A persistent medium mapped into this process. See the module documentation.
pub trait Media: Send + Sync + Debug {
    /// First byte of the mapping. Never changes while the medium exists.
    fn base(&self) -> NonNull<u8>;

    /// Bytes currently mapped and usable.
    fn len(&self) -> u64;

    /// Whether nothing is mapped.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Most bytes the medium may grow to without moving.
    fn capacity(&self) -> u64;

    /// Grow to `new_len` bytes (a multiple of the page size). Existing bytes and `base()` stay
    /// where they are. New bytes read as zero. The new length is durable only once a
    /// [`Media::drain`] follows (on a page-cache file, `msync(2)` persists it; until then a
    /// power cut may find the file at its old length).
    fn grow(&self, new_len: u64) -> Result<(), MediaError>;

    /// Make sure `offset..offset+len` is backed by storage, so later stores cannot fail for
    /// lack of space (on a file: `fallocate`). Ranges already backed cost little.
    fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), MediaError>;

    /// Start writing back every cache line overlapping `offset..offset+len`. Not durable
    /// until the next [`Media::drain`]. The range must lie within `len()`.
    fn flush(&self, offset: u64, len: u64);

    /// Wait until every earlier flush (and non-temporal store) of this thread is durable.
    fn drain(&self) -> Result<(), MediaError>;

    /// Copy `src` to `offset` and flush it (non-temporal stores for large copies). Not
    /// durable until the next [`Media::drain`]. The range must lie within `len()`.
    fn copy_nodrain(&self, offset: u64, src: &[u8]);

    /// Like [`Media::copy_nodrain`], but with non-temporal stores whatever the length: for
    /// data written once and not read back soon (log records). Default: `copy_nodrain`.
    fn stream_nodrain(&self, offset: u64, src: &[u8]) {
        self.copy_nodrain(offset, src);
    }

    /// What this medium is.
    fn info(&self) -> MediaInfo;

    /// Charge the emulated read latency of `len` bytes at `offset` read through mnemo's API
    /// (approximate: only the NVMM emulator does anything here). Default: nothing.
    #[inline]
    fn charge_read(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }

    /// Counters of the NVMM emulator, if this medium is emulated. Default: none.
    fn emulation(&self) -> Option<crate::emu::EmuReport> {
        None
    }

    /// Whether the mapping is private (copy-on-write) over a page-cache file: the kernel
    /// never writes a store back, so the file changes only when written to. A flush then
    /// names a range and a drain writes the named ranges through to the file and syncs it;
    /// the write-ahead policy makes everything else durable in its own file and writes its
    /// checkpoints through [`Media::backing`]. Default: no.
    fn private(&self) -> bool {
        false
    }

    /// The file behind a private mapping, for writes from any thread (checkpoints).
    /// Default: none.
    fn backing(&self) -> Option<Arc<dyn LogFile>> {
        None
    }

    /// Make every byte stored so far durable, whether a flush named it or not: on a private
    /// mapping, write every page changed in memory through to the file and sync it (no
    /// other thread may store meanwhile: a clean close). Default: flush everything, drain.
    fn write_back_all(&self) -> Result<(), MediaError> {
        self.flush(0, self.len());
        self.drain()
    }
}

/// A medium that wraps another one (emulation, fault injection, counting, recording) and
/// forwards to it every method it does not override. Implement this instead of [`Media`]:
/// name the wrapped medium in [`ForwardMedia::inner`] and override only what the wrapper
/// changes; every type implementing `ForwardMedia` is a [`Media`] through the blanket
/// implementation, whose methods call these. (Where both traits are in scope, a method
/// called on the wrapper's own type needs the trait named: `Media::flush(&wrapper, ..)`.)
pub trait ForwardMedia: Send + Sync + Debug {
    /// The medium this one wraps (`FileMedia`, `dyn Media`, ...).
    type Inner: Media + ?Sized;

    /// The wrapped medium.
    fn inner(&self) -> &Self::Inner;

    /// [`Media::base`].
    #[inline]
    fn base(&self) -> NonNull<u8> {
        self.inner().base()
    }

    /// [`Media::len`].
    #[inline]
    fn len(&self) -> u64 {
        self.inner().len()
    }

    /// Whether nothing is mapped ([`Media::is_empty`]).
    #[inline]
    fn is_empty(&self) -> bool {
        self.inner().is_empty()
    }

    /// [`Media::capacity`].
    #[inline]
    fn capacity(&self) -> u64 {
        self.inner().capacity()
    }

    /// [`Media::grow`].
    fn grow(&self, new_len: u64) -> Result<(), MediaError> {
        self.inner().grow(new_len)
    }

    /// [`Media::ensure_backed`].
    fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        self.inner().ensure_backed(offset, len)
    }

    /// [`Media::flush`].
    #[inline]
    fn flush(&self, offset: u64, len: u64) {
        self.inner().flush(offset, len)
    }

    /// [`Media::drain`].
    #[inline]
    fn drain(&self) -> Result<(), MediaError> {
        self.inner().drain()
    }

    /// [`Media::copy_nodrain`].
    #[inline]
    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        self.inner().copy_nodrain(offset, src)
    }

    /// [`Media::stream_nodrain`].
    #[inline]
    fn stream_nodrain(&self, offset: u64, src: &[u8]) {
        self.inner().stream_nodrain(offset, src)
    }

    /// [`Media::info`].
    fn info(&self) -> MediaInfo {
        self.inner().info()
    }

    /// [`Media::charge_read`].
    #[inline]
    fn charge_read(&self, offset: u64, len: u64) {
        self.inner().charge_read(offset, len)
    }

    /// [`Media::emulation`].
    fn emulation(&self) -> Option<crate::emu::EmuReport> {
        self.inner().emulation()
    }

    /// [`Media::private`].
    fn private(&self) -> bool {
        self.inner().private()
    }

    /// [`Media::backing`].
    fn backing(&self) -> Option<Arc<dyn LogFile>> {
        self.inner().backing()
    }

    /// [`Media::write_back_all`].
    fn write_back_all(&self) -> Result<(), MediaError> {
        self.inner().write_back_all()
    }
}

impl<T: ForwardMedia> Media for T {
    #[inline]
    fn base(&self) -> NonNull<u8> {
        ForwardMedia::base(self)
    }

    #[inline]
    fn len(&self) -> u64 {
        ForwardMedia::len(self)
    }

    #[inline]
    fn is_empty(&self) -> bool {
        ForwardMedia::is_empty(self)
    }

    #[inline]
    fn capacity(&self) -> u64 {
        ForwardMedia::capacity(self)
    }

    fn grow(&self, new_len: u64) -> Result<(), MediaError> {
        ForwardMedia::grow(self, new_len)
    }

    fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        ForwardMedia::ensure_backed(self, offset, len)
    }

    #[inline]
    fn flush(&self, offset: u64, len: u64) {
        ForwardMedia::flush(self, offset, len)
    }

    #[inline]
    fn drain(&self) -> Result<(), MediaError> {
        ForwardMedia::drain(self)
    }

    #[inline]
    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        ForwardMedia::copy_nodrain(self, offset, src)
    }

    #[inline]
    fn stream_nodrain(&self, offset: u64, src: &[u8]) {
        ForwardMedia::stream_nodrain(self, offset, src)
    }

    fn info(&self) -> MediaInfo {
        ForwardMedia::info(self)
    }

    #[inline]
    fn charge_read(&self, offset: u64, len: u64) {
        ForwardMedia::charge_read(self, offset, len)
    }

    fn emulation(&self) -> Option<crate::emu::EmuReport> {
        ForwardMedia::emulation(self)
    }

    fn private(&self) -> bool {
        ForwardMedia::private(self)
    }

    fn backing(&self) -> Option<Arc<dyn LogFile>> {
        ForwardMedia::backing(self)
    }

    fn write_back_all(&self) -> Result<(), MediaError> {
        ForwardMedia::write_back_all(self)
    }
}
