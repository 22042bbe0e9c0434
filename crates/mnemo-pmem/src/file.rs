//! [`FileMedia`]: a pool file mapped into memory.
//!
//! The file system decides how data becomes durable ([`Durability`]):
//! * tmpfs (`/dev/shm`): the NVMM stand-in; flushed lines are durable as far as this machine
//!   can tell, and `msync(2)` is a no-op there;
//! * DAX (the kernel accepts `MAP_SYNC`): flush + fence is the durability point;
//! * anything else: the page cache holds the data, so every drain calls `msync(2)`.
//!
//! `MNEMO_FORCE_PMEM=1` treats a page-cache file as persistent memory (flush only; for
//! benchmarks, like PMDK's `PMEM_IS_PMEM_FORCE`), `MNEMO_FORCE_MSYNC=1` calls `msync(2)` on
//! every medium.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::mm::{MapFlags, ProtFlags};

use crate::cpu::{self, FlushKind};
use crate::error::{Error, MediaError};
use crate::limits::PAGE_SIZE;
use crate::media::{Durability, Media, MediaInfo, MediaKind};
use crate::reserve::{FileMap, Reservation};
use crate::wal::LogFile;

const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// A pool file mapped read-write into a fixed reservation.
#[derive(Debug)]
pub struct FileMedia {
    path: PathBuf,
    file: File,
    reservation: Reservation,
    len: AtomicU64,
    /// Bytes known to be allocated on the file system (`fallocate`d), a page multiple.
    backed: AtomicU64,
    grow_lock: Mutex<()>,
    kind: MediaKind,
    durability: Durability,
    flush: FlushKind,
    reason: String,
    /// Mapped copy-on-write ([`FileMedia::make_private`]): see [`Media::private`].
    private: AtomicBool,
    /// Ranges flushed since the last drain, on a private mapping (the drain writes them
    /// through to the file).
    named: Mutex<Vec<(u64, u64)>>,
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == "1" || v.eq_ignore_ascii_case("true"))
}

/// Whether the environment variable `name` is `0`: a default turned off
/// (`MNEMO_WAL=0`, `MNEMO_WAL_DIRECT=0`, `MNEMO_WAL_SPIN=0`).
pub(crate) fn env_off(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.trim() == "0")
}

impl FileMedia {
    /// Map `len` bytes of the already opened (and locked) `file`. `len` must not exceed the
    /// file's length; `capacity` is the address space reserved for growth.
    pub fn map(path: &Path, file: File, len: u64, capacity: u64) -> Result<FileMedia, Error> {
        let capacity = capacity.max(len);
        let reservation = Reservation::new(capacity)
            .map_err(|e| Error::from_io(path, "reserving address space", e))?;
        let fs_type = rustix::fs::fstatfs(&file)
            .map(|s| s.f_type)
            .map_err(|e| Error::from_io(path, "fstatfs", e.into()))?;
        let tmpfs = fs_type == TMPFS_MAGIC || fs_type == RAMFS_MAGIC;
        // Only a DAX file system accepts MAP_SYNC. Ask with a probe mapping of its own, never
        // with MAP_FIXED over the reservation: ext4 and xfs refuse MAP_SYNC only after the
        // kernel has unmapped the target range, and another thread's mmap could be placed in
        // that hole before the plain mapping replaced it (two owners of one address range).
        let dax = !tmpfs && len > 0 && accepts_map_sync(&file);
        reservation
            .map_file(file.as_fd(), 0, len, dax)
            .map_err(|e| Error::from_io(path, "mmap", e))?;
        let kind = if tmpfs {
            MediaKind::Tmpfs
        } else if dax {
            MediaKind::Dax
        } else {
            MediaKind::PageCache
        };
        let (durability, reason) = if env_flag("MNEMO_FORCE_MSYNC") {
            (Durability::Msync, "MNEMO_FORCE_MSYNC=1".to_string())
        } else if kind == MediaKind::PageCache && env_flag("MNEMO_FORCE_PMEM") {
            (
                Durability::CpuFlush,
                "MNEMO_FORCE_PMEM=1 (page cache treated as persistent memory)".to_string(),
            )
        } else if kind == MediaKind::PageCache {
            (
                Durability::Msync,
                "page-cache file: msync(2) makes data durable".to_string(),
            )
        } else if kind == MediaKind::Dax {
            (
                Durability::CpuFlush,
                "DAX mapping (MAP_SYNC accepted)".to_string(),
            )
        } else {
            (
                Durability::CpuFlush,
                "tmpfs: cache flush is the durability point (NVMM stand-in)".to_string(),
            )
        };
        let flush = cpu::choice().flush;
        tracing::debug!(path = %path.display(), ?kind, ?durability, flush = flush.name(), "pool mapped");
        Ok(FileMedia {
            path: path.to_path_buf(),
            file,
            reservation,
            len: AtomicU64::new(len),
            backed: AtomicU64::new(0),
            grow_lock: Mutex::new(()),
            kind,
            durability,
            flush,
            reason,
            private: AtomicBool::new(false),
            named: Mutex::new(Vec::new()),
        })
    }

    /// Map the whole file copy-on-write from now on (the write-ahead policy's mapping, see
    /// [`Media::private`]): what the shared mapping held is in the page cache, so the private
    /// one reads the same bytes. Only on a page-cache file synced with `msync`; call it
    /// before any other thread uses the medium. `Ok(false)`: left shared.
    pub fn make_private(&self) -> Result<bool, MediaError> {
        if self.kind != MediaKind::PageCache || self.durability != Durability::Msync {
            return Ok(false);
        }
        let _guard = self.grow_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.reservation
            .map_file_as(self.file.as_fd(), 0, self.len(), FileMap::Private)
            .map_err(|e| MediaError::io("mmap (private)", e))?;
        self.private.store(true, Ordering::Release);
        tracing::debug!(path = %self.path.display(), "pool mapped copy-on-write");
        Ok(true)
    }

    fn is_private(&self) -> bool {
        self.private.load(Ordering::Acquire)
    }

    /// Write `offset..offset+len` of the mapping through to the file.
    fn write_through(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        self.assert_range(offset, len);
        // SAFETY: the range lies within the live mapping (asserted above); the bytes are
        // only read, and a racing store makes them a mix the caller allowed (no store it
        // named as durable races with its own sync point).
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr(offset), len as usize) };
        self.file
            .write_all_at(bytes, offset)
            .map_err(|e| MediaError::io("writing the pool file", e))
    }

    /// The file behind the mapping.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn ptr(&self, offset: u64) -> *mut u8 {
        // The offset was checked by the caller against len().
        self.reservation
            .base()
            .as_ptr()
            .wrapping_add(offset as usize)
    }

    fn assert_range(&self, offset: u64, len: u64) {
        let end = offset.checked_add(len);
        assert!(
            end.is_some_and(|end| end <= self.len()),
            "media range {offset}+{len} outside the mapping of {} bytes",
            self.len()
        );
    }
}

impl Media for FileMedia {
    fn base(&self) -> NonNull<u8> {
        self.reservation.base()
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    fn capacity(&self) -> u64 {
        self.reservation.capacity()
    }

    fn grow(&self, new_len: u64) -> Result<(), MediaError> {
        let _guard = self.grow_lock.lock().unwrap_or_else(|p| p.into_inner());
        let old_len = self.len();
        if new_len <= old_len {
            return Ok(());
        }
        if new_len > self.capacity() {
            return Err(MediaError::CapacityExceeded {
                requested: new_len,
                capacity: self.capacity(),
            });
        }
        debug_assert_eq!(new_len % PAGE_SIZE, 0);
        self.ensure_backed_locked(old_len, new_len - old_len)?;
        let file_len = self
            .file
            .metadata()
            .map_err(|e| MediaError::io("stat", e))?
            .len();
        if file_len < new_len {
            self.file
                .set_len(new_len)
                .map_err(|e| MediaError::io("ftruncate", e))?;
            if self.kind == MediaKind::Dax {
                // A DAX drain is a CPU fence, which does not persist the file's length (on a
                // page-cache file, the pool's next sync point, an msync, does).
                self.file
                    .sync_data()
                    .map_err(|e| MediaError::io("fdatasync", e))?;
            }
        }
        let mode = if self.kind == MediaKind::Dax {
            FileMap::Sync
        } else if self.is_private() {
            FileMap::Private
        } else {
            FileMap::Shared
        };
        self.reservation
            .map_file_as(self.file.as_fd(), old_len, new_len - old_len, mode)
            .map_err(|e| MediaError::io("mmap", e))?;
        self.len.store(new_len, Ordering::Release);
        Ok(())
    }

    fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        if offset.saturating_add(len) <= self.backed.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.grow_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.ensure_backed_locked(offset, len)
    }

    fn flush(&self, offset: u64, len: u64) {
        self.assert_range(offset, len);
        if self.is_private() {
            if len > 0 {
                let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
                named.push((offset, len));
            }
            return;
        }
        if self.durability == Durability::CpuFlush {
            // SAFETY: the range lies within the live mapping (asserted above).
            unsafe { cpu::flush_with(self.flush, self.ptr(offset), len as usize) };
        }
    }

    fn drain(&self) -> Result<(), MediaError> {
        if self.is_private() {
            let named = std::mem::take(&mut *self.named.lock().unwrap_or_else(|p| p.into_inner()));
            for (offset, len) in named {
                self.write_through(offset, len)?;
            }
            // Also what persists a grown file's length.
            return rustix::fs::fdatasync(&self.file)
                .map_err(|e| MediaError::io("fdatasync of the pool file", e.into()));
        }
        match self.durability {
            Durability::CpuFlush => {
                cpu::fence();
                Ok(())
            }
            Durability::Msync => {
                // The kernel tracks dirty pages, so syncing the whole mapping costs about the
                // same as syncing one page (measured: 72-143 us vs 74-154 us on ext4). Whole
                // mapping also covers pages dirtied by other threads, which must not be lost.
                let len = self.len() as usize;
                // SAFETY: base..base+len is our live shared mapping.
                unsafe {
                    rustix::mm::msync(
                        self.base().as_ptr().cast(),
                        len,
                        rustix::mm::MsyncFlags::SYNC,
                    )
                }
                .map_err(|e| MediaError::io("msync", e.into()))
            }
        }
    }

    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        self.assert_range(offset, src.len() as u64);
        // SAFETY: destination within the mapping (asserted); `src` is a distinct Rust slice
        // and cannot alias pool memory mutably.
        unsafe {
            if self.durability == Durability::CpuFlush {
                cpu::copy_nodrain(self.ptr(offset), src.as_ptr(), src.len());
            } else {
                std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr(offset), src.len());
            }
        }
    }

    fn stream_nodrain(&self, offset: u64, src: &[u8]) {
        if self.durability != Durability::CpuFlush || cpu::choice().movnt_threshold.is_none() {
            return self.copy_nodrain(offset, src);
        }
        self.assert_range(offset, src.len() as u64);
        // SAFETY: as in `copy_nodrain`; the flush kind is the process's chosen (supported) one.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            cpu::copy_nt(self.ptr(offset), src.as_ptr(), src.len(), self.flush)
        };
        #[cfg(not(target_arch = "x86_64"))]
        self.copy_nodrain(offset, src);
    }

    fn private(&self) -> bool {
        self.is_private()
    }

    fn backing(&self) -> Option<Arc<dyn LogFile>> {
        if !self.is_private() {
            return None;
        }
        // A new open file description of the same file (not a dup): the pool's lock
        // (`flock`, held by the description the pool opened) goes with the pool, not with
        // a policy that outlives it.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.file);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{fd}"))
            .map_err(|e| tracing::warn!(path = %self.path.display(), "cannot reopen the pool file for checkpoints: {e}"))
            .ok()?;
        Some(Arc::new(PoolFile { file }))
    }

    fn write_back_all(&self) -> Result<(), MediaError> {
        if !self.is_private() {
            self.flush(0, self.len());
            return self.drain();
        }
        for (offset, len) in self.changed_pages()? {
            self.write_through(offset, len)?;
        }
        self.named.lock().unwrap_or_else(|p| p.into_inner()).clear();
        rustix::fs::fdatasync(&self.file)
            .map_err(|e| MediaError::io("fdatasync of the pool file", e.into()))
    }

    fn info(&self) -> MediaInfo {
        MediaInfo {
            kind: self.kind,
            durability: self.durability,
            flush: self.flush,
            reason: self.reason.clone(),
        }
    }
}

/// Whether the kernel maps `file` with `MAP_SYNC` (a DAX file system). Probes with one page
/// mapped at an address of the kernel's choosing and unmaps it at once.
fn accepts_map_sync(file: &File) -> bool {
    // SAFETY: a new shared mapping at an address the kernel picks replaces nothing; it is
    // never accessed and is unmapped below.
    let probe = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            PAGE_SIZE as usize,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED_VALIDATE | MapFlags::SYNC,
            file.as_fd(),
            0,
        )
    };
    match probe {
        Ok(ptr) => {
            // SAFETY: `ptr` is the page mapped just above, used by nothing else.
            if let Err(e) = unsafe { rustix::mm::munmap(ptr, PAGE_SIZE as usize) } {
                tracing::error!("munmap of the MAP_SYNC probe failed: {e}");
            }
            true
        }
        Err(_) => false,
    }
}

impl FileMedia {
    fn ensure_backed_locked(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        let backed = self.backed.load(Ordering::Acquire);
        let end = offset.saturating_add(len).next_multiple_of(PAGE_SIZE);
        if end <= backed {
            return Ok(());
        }
        // A range that reaches back to what is known to be backed extends it (fallocate of an
        // allocated range is cheap). A range past it (the heap takes chunks best fit, so a new
        // pool's first chunks lie in its last zone, gigabytes in; a grown heap's zone tables)
        // is backed alone and leaves the mark where it is: backing every page up to it took
        // the memory of a pool on tmpfs at once (3.1 GiB of /dev/shm for a 4 GiB pool, whose
        // first stores then paid for first touches of that memory).
        let start = offset - offset % PAGE_SIZE;
        let extends = start <= backed;
        match rustix::fs::fallocate(
            &self.file,
            rustix::fs::FallocateFlags::KEEP_SIZE,
            start,
            end - start,
        ) {
            Ok(()) => {}
            // File systems without fallocate: nothing to reserve ahead of time.
            Err(rustix::io::Errno::OPNOTSUPP) => {}
            Err(e) => return Err(MediaError::io("fallocate", e.into())),
        }
        if extends {
            self.backed.fetch_max(end, Ordering::AcqRel);
        }
        Ok(())
    }
}

impl FileMedia {
    /// The runs of pages of a private mapping that differ from the file: copied on write
    /// (present and anonymous) or such copies swapped out, from `/proc/self/pagemap` (bit 63
    /// present, 62 swapped, 61 a page of the file). As `(offset, len)`, page multiples.
    fn changed_pages(&self) -> Result<Vec<(u64, u64)>, MediaError> {
        const PRESENT: u64 = 1 << 63;
        const SWAPPED: u64 = 1 << 62;
        const FILE_PAGE: u64 = 1 << 61;
        let pagemap = File::open("/proc/self/pagemap")
            .map_err(|e| MediaError::io("opening /proc/self/pagemap", e))?;
        let pages = self.len() / PAGE_SIZE;
        let first = self.base().as_ptr() as u64 / PAGE_SIZE;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut chunk = vec![0u8; 8 * 4096];
        let mut page = 0;
        while page < pages {
            let n = (pages - page).min(4096);
            let bytes = &mut chunk[..(n * 8) as usize];
            pagemap
                .read_exact_at(bytes, (first + page) * 8)
                .map_err(|e| MediaError::io("reading /proc/self/pagemap", e))?;
            for (k, entry) in bytes.chunks_exact(8).enumerate() {
                let word = u64::from_le_bytes(entry.try_into().unwrap_or_default());
                let changed = (word & PRESENT != 0 && word & FILE_PAGE == 0) || word & SWAPPED != 0;
                if !changed {
                    continue;
                }
                let offset = (page + k as u64) * PAGE_SIZE;
                match runs.last_mut() {
                    Some((start, len)) if *start + *len == offset => *len += PAGE_SIZE,
                    _ => runs.push((offset, PAGE_SIZE)),
                }
            }
            page += n;
        }
        Ok(runs)
    }
}

/// The pool file behind a private mapping, as the write-ahead policy writes its checkpoints
/// into it ([`Media::backing`]).
#[derive(Debug)]
struct PoolFile {
    file: File,
}

impl LogFile for PoolFile {
    fn len(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0)
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), MediaError> {
        self.file
            .read_exact_at(out, offset)
            .map_err(|e| MediaError::io("reading the pool file", e))
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), MediaError> {
        self.file
            .write_all_at(bytes, offset)
            .map_err(|e| MediaError::io("writing the pool file", e))
    }

    fn sync(&self) -> Result<(), MediaError> {
        rustix::fs::fdatasync(&self.file)
            .map_err(|e| MediaError::io("fdatasync of the pool file", e.into()))
    }
}
