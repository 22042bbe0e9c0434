//! Address-space reservations: a pool keeps one base address for its whole life, across
//! growth, because it reserves `PROT_NONE` address space for its maximum size up front and
//! maps the file (or anonymous memory) into the start of it.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsFd;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

/// How [`Reservation::map_file_as`] maps a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileMap {
    /// `MAP_SHARED`: stores reach the file (through the page cache).
    Shared,
    /// `MAP_SHARED_VALIDATE | MAP_SYNC` (DAX only).
    Sync,
    /// `MAP_PRIVATE`: copy-on-write; the kernel never writes a store back to the file.
    Private,
}

/// A reserved, initially inaccessible range of address space.
#[derive(Debug)]
pub struct Reservation {
    base: NonNull<u8>,
    capacity: usize,
}

// SAFETY: the reservation is a range of addresses; the struct holds no thread-bound state.
// Access to the bytes behind it is synchronized by its users.
unsafe impl Send for Reservation {}
// SAFETY: as above; `&Reservation` methods only call mmap on sub-ranges that the caller owns.
unsafe impl Sync for Reservation {}

fn to_usize(n: u64) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "size exceeds the address space",
        )
    })
}

impl Reservation {
    /// Reserve `capacity` bytes of address space (page-rounded), costing no memory.
    pub fn new(capacity: u64) -> io::Result<Reservation> {
        let capacity = to_usize(capacity.next_multiple_of(crate::limits::PAGE_SIZE))?;
        // SAFETY: a fresh anonymous PROT_NONE mapping at an address the kernel chooses
        // aliases nothing.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                capacity,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }?;
        let base =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Reservation { base, capacity })
    }

    /// First address of the reservation.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Reserved bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity as u64
    }

    fn check(&self, offset: u64, len: u64) -> io::Result<(usize, usize)> {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        if end > self.capacity as u64 || offset % crate::limits::PAGE_SIZE != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range outside the reservation",
            ));
        }
        Ok((to_usize(offset)?, to_usize(len)?))
    }

    /// Map `len` bytes of `fd` starting at file offset `offset` read-write and shared at the
    /// same offset of the reservation. `sync`: ask for `MAP_SYNC` (DAX only; fails elsewhere).
    ///
    /// Do not use a failure here as a probe: the kernel may unmap the target range before it
    /// refuses the mapping (ext4 and xfs refuse `MAP_SYNC` that late), and until the range is
    /// mapped again another thread's `mmap` can be placed in the hole, which the next
    /// `MAP_FIXED` mapping here would then replace. Find out first (`FileMedia::map` probes
    /// `MAP_SYNC` with a separate mapping), then map once.
    pub fn map_file(&self, fd: impl AsFd, offset: u64, len: u64, sync: bool) -> io::Result<()> {
        let mode = if sync { FileMap::Sync } else { FileMap::Shared };
        self.map_file_as(fd, offset, len, mode)
    }

    /// [`Reservation::map_file`] with the sharing mode spelled out: [`FileMap::Private`]
    /// maps the file copy-on-write, so stores never reach the file unless written to it.
    pub fn map_file_as(
        &self,
        fd: impl AsFd,
        offset: u64,
        len: u64,
        mode: FileMap,
    ) -> io::Result<()> {
        let (off, len) = self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let flags = match mode {
            FileMap::Sync => MapFlags::SHARED_VALIDATE | MapFlags::SYNC | MapFlags::FIXED,
            FileMap::Shared => MapFlags::SHARED | MapFlags::FIXED,
            FileMap::Private => MapFlags::PRIVATE | MapFlags::FIXED,
        };
        // SAFETY: the target range lies inside our own reservation (checked above), so
        // MAP_FIXED replaces only addresses this reservation owns.
        let mapped = unsafe {
            rustix::mm::mmap(
                self.base.as_ptr().add(off).cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
                fd,
                offset,
            )
        };
        if let Err(err) = mapped {
            // The kernel may have unmapped the range before refusing: reserve it again at
            // once, so no other mapping is placed in a hole inside the pool's range.
            self.reserve_again(off, len);
            return Err(err.into());
        }
        Ok(())
    }

    /// Make `off..off+len` of the reservation `PROT_NONE` again after a failed mapping.
    fn reserve_again(&self, off: usize, len: usize) {
        // SAFETY: the range is inside our reservation; whatever is left there (our old
        // PROT_NONE pages, or nothing) is ours to replace.
        let restored = unsafe {
            rustix::mm::mmap_anonymous(
                self.base.as_ptr().add(off).cast(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED,
            )
        };
        if let Err(err) = restored {
            tracing::error!("re-reserving pool address space after a failed mapping: {err}");
        }
    }

    /// Map zeroed private anonymous memory at `offset..offset+len` of the reservation.
    pub fn map_anonymous(&self, offset: u64, len: u64) -> io::Result<()> {
        let (off, len) = self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: as in `map_file`, the range is inside our reservation.
        let mapped = unsafe {
            rustix::mm::mmap_anonymous(
                self.base.as_ptr().add(off).cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        };
        if let Err(err) = mapped {
            self.reserve_again(off, len);
            return Err(err.into());
        }
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: we own the whole range [base, base+capacity) since `new`; nothing may use
        // it after the reservation is dropped (its owners hold it for their lifetime).
        let result = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.capacity) };
        if let Err(err) = result {
            tracing::error!("munmap of a pool reservation failed: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether any mapping covers `len` bytes at `addr`: a `MAP_FIXED_NOREPLACE` probe there
    /// fails with EEXIST if so (and is undone if it succeeds).
    fn still_reserved(addr: *mut u8, len: usize) -> bool {
        // SAFETY: FIXED_NOREPLACE never replaces an existing mapping; a successful probe is a
        // fresh mapping of our own, unmapped at once.
        match unsafe {
            rustix::mm::mmap_anonymous(
                addr.cast(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE,
            )
        } {
            Ok(p) => {
                // SAFETY: the probe mapping just made, nothing else.
                let _ = unsafe { rustix::mm::munmap(p, len) };
                false
            }
            Err(_) => true,
        }
    }

    /// ext4 refuses `MAP_SYNC` only after unmapping the target range: the reservation must
    /// hold the range again afterwards (issue 19: a failed MAP_FIXED left a hole).
    #[test]
    fn a_failed_mapping_leaves_no_hole() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(1 << 20).unwrap();
        let r = Reservation::new(4 << 20).unwrap();
        let at = r.base().as_ptr();
        assert!(still_reserved(at, 1 << 20));
        // MAP_SYNC outside DAX: refused (late on ext4/xfs, early elsewhere).
        assert!(r.map_file(&file, 0, 1 << 20, true).is_err());
        assert!(
            still_reserved(at, 1 << 20),
            "a hole was left in the reservation"
        );
        // A read-only descriptor cannot be mapped writable and shared.
        let ro = std::fs::File::open(&path).unwrap();
        assert!(r.map_file(&ro, 0, 1 << 20, false).is_err());
        assert!(still_reserved(at, 1 << 20));
        r.map_file(&file, 0, 1 << 20, false)
            .expect("a good mapping still works");
    }
}
