//! Address-space reservations: a pool keeps one base address for its whole life, across
//! growth, because it reserves `PROT_NONE` address space for its maximum size up front and
//! maps the file (or anonymous memory) into the start of it.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::Mutex;

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
    /// Page runs (offset, length) that another mapping took after a mapping here failed
    /// late (see [`Reservation::reserve_again`]): never mapped over, never unmapped here.
    lost: Mutex<Vec<(usize, usize)>>,
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
        Ok(Reservation {
            base,
            capacity,
            lost: Mutex::new(Vec::new()),
        })
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
        let (off, len) = (to_usize(offset)?, to_usize(len)?);
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        if lost.iter().any(|&(at, n)| at < off + len && off < at + n) {
            return Err(io::Error::other(
                "part of the range belongs to another mapping since a mapping here failed",
            ));
        }
        Ok((off, len))
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

    /// Make `off..off+len` of the reservation `PROT_NONE` again after a failed mapping,
    /// without ever replacing another thread's mapping.
    ///
    /// A refusal comes either before the kernel touched the range (our `PROT_NONE` pages are
    /// all still there) or after it unmapped the whole range (ext4 and xfs refuse `MAP_SYNC`
    /// that late). In the second case another thread's `mmap` may have been placed in the
    /// hole meanwhile, and re-reserving with `MAP_FIXED` would replace it under that thread.
    /// So only free pages are taken back (`MAP_FIXED_NOREPLACE`). If any page was free, the
    /// refusal came late, and a page that is not free belongs to someone else: it is
    /// recorded as lost, never mapped over nor unmapped by this reservation. If none was
    /// free the refusal came early and the range is still ours. That case cannot be told
    /// apart from a stranger covering the whole hole.
    fn reserve_again(&self, off: usize, len: usize) {
        if self.reserve_free(off, len) {
            return;
        }
        let page = crate::limits::PAGE_SIZE as usize;
        let mut taken = Vec::new();
        let mut any_free = false;
        for at in (off..off + len).step_by(page) {
            if self.reserve_free(at, page) {
                any_free = true;
            } else {
                match taken.last_mut() {
                    Some((start, n)) if *start + *n == at => *n += page,
                    _ => taken.push((at, page)),
                }
            }
        }
        if any_free && !taken.is_empty() {
            tracing::error!(
                "another mapping took {} page runs of a pool reservation after a failed \
                 mapping; they are left to it",
                taken.len()
            );
            self.lost
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(taken);
        }
    }

    /// Map `PROT_NONE` over `off..off+len` of the reservation if nothing is mapped there;
    /// false if something is.
    fn reserve_free(&self, off: usize, len: usize) -> bool {
        // SAFETY: the range is inside our reservation, and MAP_FIXED_NOREPLACE maps only if
        // nothing is there, so it replaces no mapping of anyone.
        let restored = unsafe {
            rustix::mm::mmap_anonymous(
                self.base.as_ptr().add(off).cast(),
                len,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED_NOREPLACE,
            )
        };
        match restored {
            Ok(_) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(err) => {
                tracing::error!("re-reserving pool address space after a failed mapping: {err}");
                false
            }
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
        let mut lost = std::mem::take(self.lost.get_mut().unwrap_or_else(|p| p.into_inner()));
        lost.sort_unstable();
        lost.push((self.capacity, 0));
        let mut at = 0;
        for (start, len) in lost {
            if start > at {
                // SAFETY: we own [base, base+capacity) since `new`, except the lost runs
                // skipped here; nothing may use it after the reservation is dropped (its
                // owners hold it for their lifetime).
                let result =
                    unsafe { rustix::mm::munmap(self.base.as_ptr().add(at).cast(), start - at) };
                if let Err(err) = result {
                    tracing::error!("munmap of a pool reservation failed: {err}");
                }
            }
            at = at.max(start + len);
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

    /// The permissions /proc/self/maps gives the mapping holding `addr` ("rw-p", "---p"),
    /// or None if nothing is mapped there.
    fn protection_at(addr: usize) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        maps.lines().find_map(|line| {
            let mut fields = line.split_whitespace();
            let (range, perms) = (fields.next()?, fields.next()?);
            let (lo, hi) = range.split_once('-')?;
            let lo = usize::from_str_radix(lo, 16).ok()?;
            let hi = usize::from_str_radix(hi, 16).ok()?;
            (lo <= addr && addr < hi).then(|| perms.to_string())
        })
    }

    /// Issue 19, the engine_commands SIGSEGV: a mapping refused late leaves a hole in the
    /// reservation, and another thread's mmap can be placed in it before the reservation
    /// takes the range back. Re-reserving with MAP_FIXED replaced that thread's memory with
    /// PROT_NONE under it, and the reservation's drop would unmap it later: that thread's
    /// next access is a SIGSEGV. The hole and the stranger are made by hand here, as the
    /// kernel and the other thread would make them.
    #[test]
    fn a_mapping_placed_in_the_hole_is_never_replaced() {
        let page = crate::limits::PAGE_SIZE as usize;
        let r = Reservation::new(4 << 20).unwrap();
        let base = r.base().as_ptr();
        // The late refusal: the kernel has unmapped the first MiB...
        // SAFETY: the first MiB of our own reservation, not used by anything.
        unsafe { rustix::mm::munmap(base.cast(), 1 << 20) }.unwrap();
        // ...and another thread's mmap lands in the hole, 64 KiB in.
        // SAFETY: FIXED_NOREPLACE maps only where nothing is mapped: inside the hole.
        let stranger = unsafe {
            rustix::mm::mmap_anonymous(
                base.add(64 << 10).cast(),
                page,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE,
            )
        }
        .expect("a page in the hole")
        .cast::<u8>();
        // SAFETY: the stranger's page, mapped read-write just above.
        unsafe { stranger.write(0x5a) };
        r.reserve_again(0, 1 << 20);
        assert_eq!(
            protection_at(stranger as usize).as_deref(),
            Some("rw-p"),
            "the other thread's page was replaced by the re-reservation"
        );
        // SAFETY: still the stranger's read-write page (checked just above).
        assert_eq!(unsafe { stranger.read() }, 0x5a);
        // The rest of the hole is the reservation's again.
        assert_eq!(protection_at(base as usize).as_deref(), Some("---p"));
        // SAFETY: the page after the stranger's, inside our reservation.
        let after = unsafe { stranger.add(page) };
        assert_eq!(protection_at(after as usize).as_deref(), Some("---p"));
        // Mapping over the stranger is refused; mapping elsewhere still works.
        assert!(r.map_anonymous(0, 1 << 20).is_err());
        r.map_anonymous(1 << 20, 1 << 20)
            .expect("a mapping beside the lost page");
        // The reservation's unmap leaves the stranger's page alone.
        drop(r);
        assert_eq!(protection_at(stranger as usize).as_deref(), Some("rw-p"));
        // SAFETY: as above; the stranger's page, still mapped.
        assert_eq!(unsafe { stranger.read() }, 0x5a);
        // SAFETY: the stranger's page, mapped by this test and used by nothing else.
        unsafe { rustix::mm::munmap(stranger.cast(), page) }.unwrap();
    }
}
