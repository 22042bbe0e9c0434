//! [`ViewMedia`]: a pool file mapped copy-on-write for reading, never written to.
//!
//! A replication mirror keeps a byte-for-byte image of a primary's pool and answers reads
//! from it. The image as received is a crash image (a redo record may be committed and not
//! yet applied): only the heap's recovery turns it into the state the primary acknowledged,
//! and recovery writes. Those writes must never reach the image (the mirror's own recovery,
//! and the records still to come, are defined on the bytes it received), so a reader opens
//! the image through this medium:
//!
//! * the file is mapped `MAP_PRIVATE`: a store copies its page into this process, the file
//!   never changes;
//! * flushes do nothing and drains succeed: nothing is durable, nothing needs to be;
//! * the medium cannot grow; a pool that recorded a size larger than its file (zeros the
//!   primary grew by, never shipped) reads zeros past the file's end.
//!
//! **Pages not yet copied follow the file.** Linux shares a private mapping's untouched
//! pages with the page cache: when the file changes, they show the change, while copied
//! pages keep the bytes of the moment they were copied. A view is therefore one consistent
//! state only while nobody writes the file: its owner must exclude the file's writer for
//! as long as it reads (the mirror's readers hold the store's lock), and open a new view
//! once the file changed. [`ViewDetach::detach`] replaces the mapping with zeros, so that a
//! stale view can be dropped (its heap settles, its pool closes: stores) even after the file
//! shrank, without touching the file's pages.
#![allow(unsafe_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, MediaError};
use crate::limits::PAGE_SIZE;
use crate::media::{Durability, Media, MediaInfo, MediaKind};
use crate::reserve::{FileMap, Reservation};

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// Kept open for the mapping's life (read-only).
    _file: File,
    reservation: Reservation,
    len: u64,
    kind: MediaKind,
    detached: AtomicBool,
}

/// A read-only, copy-on-write view of a pool file: see the module documentation.
#[derive(Debug)]
pub struct ViewMedia {
    inner: Arc<Inner>,
}

/// The owner's handle on a [`ViewMedia`] handed to a pool: detaches the view from its file.
#[derive(Debug)]
pub struct ViewDetach {
    inner: Arc<Inner>,
}

impl ViewDetach {
    /// Replace the view's mapping with zeroed private memory: from now on the view no longer
    /// reads the file (call before dropping a pool or heap opened on a view whose file may
    /// have changed or shrunk). Idempotent.
    pub fn detach(&self) {
        if self.inner.detached.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(e) = self.inner.reservation.map_anonymous(0, self.inner.len) {
            tracing::error!(path = %self.inner.path.display(), "detaching a read-only view failed: {e}");
        }
    }
}

impl ViewMedia {
    /// Map `path` copy-on-write as a medium of `len` bytes (at least the file's length is
    /// mapped from the file; the rest, if `len` is larger, reads zeros). The file is opened
    /// read-only and is never written.
    pub fn open(path: &Path, len: u64) -> Result<(ViewMedia, ViewDetach), Error> {
        let file = File::open(path).map_err(|e| Error::from_io(path, "open", e))?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::from_io(path, "stat", e))?
            .len();
        let len = len.max(file_len).next_multiple_of(PAGE_SIZE);
        let reservation = Reservation::new(len.max(PAGE_SIZE))
            .map_err(|e| Error::from_io(path, "reserving address space", e))?;
        // The file's pages (its last partial page included: past its end within that page
        // reads zeros), then anonymous zeros up to `len`.
        let from_file = file_len.next_multiple_of(PAGE_SIZE).min(len);
        reservation
            .map_file_as(&file, 0, from_file, FileMap::Private)
            .map_err(|e| Error::from_io(path, "mmap (private view)", e))?;
        reservation
            .map_anonymous(from_file, len - from_file)
            .map_err(|e| Error::from_io(path, "mmap (zeros past the file)", e))?;
        let fs_type = rustix::fs::fstatfs(&file)
            .map(|s| s.f_type)
            .map_err(|e| Error::from_io(path, "fstatfs", e.into()))?;
        #[allow(clippy::unnecessary_cast)] // the field's type differs between targets
        let kind = if matches!(fs_type as i64, 0x0102_1994 | 0x8584_58f6) {
            MediaKind::Tmpfs
        } else {
            MediaKind::PageCache
        };
        let inner = Arc::new(Inner {
            path: path.to_path_buf(),
            _file: file,
            reservation,
            len,
            kind,
            detached: AtomicBool::new(false),
        });
        Ok((
            ViewMedia {
                inner: Arc::clone(&inner),
            },
            ViewDetach { inner },
        ))
    }

    fn assert_range(&self, offset: u64, len: u64) {
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.inner.len),
            "view range {offset}+{len} outside the mapping of {} bytes",
            self.inner.len
        );
    }
}

impl Media for ViewMedia {
    fn base(&self) -> NonNull<u8> {
        self.inner.reservation.base()
    }

    fn len(&self) -> u64 {
        self.inner.len
    }

    fn capacity(&self) -> u64 {
        self.inner.len
    }

    fn grow(&self, new_len: u64) -> Result<(), MediaError> {
        if new_len <= self.inner.len {
            return Ok(());
        }
        Err(MediaError::CapacityExceeded {
            requested: new_len,
            capacity: self.inner.len,
        })
    }

    fn ensure_backed(&self, _offset: u64, _len: u64) -> Result<(), MediaError> {
        Ok(())
    }

    fn flush(&self, offset: u64, len: u64) {
        self.assert_range(offset, len);
    }

    fn drain(&self) -> Result<(), MediaError> {
        Ok(())
    }

    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        self.assert_range(offset, src.len() as u64);
        // SAFETY: the destination lies within the live mapping (asserted above), a private
        // one (stores stay in this process); `src` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.base().as_ptr().add(offset as usize),
                src.len(),
            );
        }
    }

    fn info(&self) -> MediaInfo {
        MediaInfo {
            kind: self.inner.kind,
            durability: Durability::CpuFlush,
            flush: crate::cpu::choice().flush,
            reason: "read-only view: stores stay in this process, nothing is made durable"
                .to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_view_never_writes_its_file_and_reads_zeros_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        let mut f = File::create(&path).unwrap();
        f.write_all(&[7u8; 4096]).unwrap();
        drop(f);
        let (view, detach) = ViewMedia::open(&path, 3 * 4096).unwrap();
        assert_eq!(view.len(), 3 * 4096);
        // SAFETY: every offset read is below the view's length (3 pages), all mapped.
        let byte = |at: u64| unsafe { *view.base().as_ptr().add(at as usize) };
        assert_eq!(byte(10), 7);
        assert_eq!(byte(8192), 0);
        view.copy_nodrain(0, &[1, 2, 3]);
        view.flush(0, 3);
        view.drain().unwrap();
        assert_eq!(byte(1), 2);
        assert_eq!(std::fs::read(&path).unwrap()[..3], [7, 7, 7]);
        assert!(view.grow(4 * 4096).is_err());
        detach.detach();
        assert_eq!(byte(10), 0);
    }
}
