//! Address-space reservations: a pool keeps one base address for its whole life, across
//! growth, because it reserves `PROT_NONE` address space for its maximum size up front and
//! maps the file (or anonymous memory) into the start of it.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsFd;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

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
        let (off, len) = self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let flags = if sync {
            MapFlags::SHARED_VALIDATE | MapFlags::SYNC | MapFlags::FIXED
        } else {
            MapFlags::SHARED | MapFlags::FIXED
        };
        // SAFETY: the target range lies inside our own reservation (checked above), so
        // MAP_FIXED replaces only addresses this reservation owns.
        unsafe {
            rustix::mm::mmap(
                self.base.as_ptr().add(off).cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
                fd,
                offset,
            )
        }?;
        Ok(())
    }

    /// Map zeroed private anonymous memory at `offset..offset+len` of the reservation.
    pub fn map_anonymous(&self, offset: u64, len: u64) -> io::Result<()> {
        let (off, len) = self.check(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: as in `map_file`, the range is inside our reservation.
        unsafe {
            rustix::mm::mmap_anonymous(
                self.base.as_ptr().add(off).cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        }?;
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
