//! [`Region`]: one virtual region, a [`Media`] a pool can live on.
//!
//! The region reserves address space for its whole capacity; no page of it is backed until
//! touched ([`crate::fault`]). Stores are plain CPU stores. A flush goes to the slot that
//! holds the page, through the window onto the persistent-memory file (the virtual address
//! and the window map the same file page, so flushing either writes back the same lines;
//! the window never faults). A page in swap needs no flush: its bytes were made durable
//! there when it was evicted, and a store since would have brought it back. A drain is the
//! window's: a fence on tmpfs or DAX, `msync(2)` on a page-cache file.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use mnemo_pmem::reserve::Reservation;
use mnemo_pmem::{Media, MediaError, MediaInfo, MediaKind};

use crate::error::{Error, Result};
use crate::fault::{Counters, Registration, Shared, Step};
use crate::format::{Place, TocEntry};
use crate::limits::PAGE_SIZE;
use crate::space::SpaceInner;

/// Counters of a region: how much of it is in persistent memory, and the traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Virtual size in pages.
    pub capacity_pages: u64,
    /// Slots of persistent memory.
    pub budget_pages: u64,
    /// Pages in persistent memory now.
    pub resident_pages: u64,
    /// Pages in swap now.
    pub swapped_pages: u64,
    /// Faults handled since the region was opened.
    pub faults: u64,
    /// Pages evicted to swap since open.
    pub swap_outs: u64,
    /// Evictions since open (each takes up to `limits::EVICT_BATCH_PAGES` pages).
    pub evictions: u64,
    /// Evictions made on the fault path, because no slot was free (the others were made
    /// ahead of need by the region's evictor thread).
    pub sync_evictions: u64,
    /// Faults that waited for the evictor thread's eviction in progress (their page was
    /// among its victims, or no slot was free).
    pub fault_waits: u64,
    /// Pages evicted clean (not stored to since their swap-in): nothing written to swap.
    pub clean_evictions: u64,
    /// Pages brought back from swap since open.
    pub swap_ins: u64,
    /// Pages touched for the first time since open (filled with zeros).
    pub zero_fills: u64,
}

impl Stats {
    /// Memory residence ratio (Temporality's MRR): pages in persistent memory over pages
    /// in persistent memory or swap, 1.0 while nothing is in swap.
    pub fn mrr(&self) -> f64 {
        let total = self.resident_pages + self.swapped_pages;
        if total == 0 {
            1.0
        } else {
            self.resident_pages as f64 / total as f64
        }
    }
}

/// A handle on a region's counters that outlives a borrow of the region (the region itself
/// usually disappears into a pool as a `Box<dyn Media>`). It holds the counters only, never
/// the region: once the region is dropped they stop changing.
#[derive(Clone, Debug)]
pub struct StatsHandle {
    counters: Arc<Counters>,
}

impl StatsHandle {
    /// The counters now.
    pub fn stats(&self) -> Stats {
        stats_of(&self.counters)
    }
}

fn stats_of(c: &Counters) -> Stats {
    Stats {
        capacity_pages: c.capacity_pages.load(Ordering::Relaxed),
        budget_pages: c.budget_pages.load(Ordering::Relaxed),
        resident_pages: c.resident.load(Ordering::Relaxed),
        swapped_pages: c.swapped.load(Ordering::Relaxed),
        faults: c.faults.load(Ordering::Relaxed),
        swap_outs: c.swap_outs.load(Ordering::Relaxed),
        evictions: c.evictions.load(Ordering::Relaxed),
        sync_evictions: c.sync_evictions.load(Ordering::Relaxed),
        fault_waits: c.fault_waits.load(Ordering::Relaxed),
        clean_evictions: c.clean_evictions.load(Ordering::Relaxed),
        swap_ins: c.swap_ins.load(Ordering::Relaxed),
        zero_fills: c.zero_fills.load(Ordering::Relaxed),
    }
}

/// How a region is opened ([`crate::Space::open_region_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionOptions {
    /// Evict ahead of need on a thread of the region's own: it keeps a reserve of free slots
    /// (an eviction batch, [`crate::fault::evict_batch`]) so that a fault normally takes a
    /// free slot without writing or syncing swap. Off: every eviction is made by the fault
    /// that finds no free slot.
    pub evict_ahead: bool,
    /// Most pages a first touch maps at once (fault-around; 1 for none; at most a quarter of
    /// the budget is used).
    pub fault_around_pages: u64,
}

impl Default for RegionOptions {
    fn default() -> RegionOptions {
        RegionOptions {
            evict_ahead: true,
            fault_around_pages: crate::limits::FAULT_AROUND_PAGES,
        }
    }
}

/// The region's evictor thread, stopped and joined when the region is dropped.
#[derive(Debug)]
struct Evictor(Option<std::thread::JoinHandle<()>>);

/// The address of a registered `Shared`, sent to the evictor thread.
struct SharedPtr(*const Shared);

// SAFETY: `Shared` is `Sync`; the pointee outlives the thread (joined before the
// registration that owns it is dropped, in `Region::drop`).
unsafe impl Send for SharedPtr {}

/// An open virtual region. Dropping it unregisters it from the fault handler, then
/// releases its address space.
#[derive(Debug)]
pub struct Region {
    /// Declared first: unregistered before the reservation is unmapped, so a stray access
    /// afterwards is an ordinary crash, never a slot mapped into freed address space.
    registration: Registration,
    reservation: Reservation,
    evictor: Evictor,
    owner: String,
    seq: u64,
    id: u64,
    capacity: u64,
    /// Held while the region is open: `flock` on `<pm file>.region-<id>.lock`, so a second
    /// process opening the region is refused instead of mapping the same slots. Declared
    /// last: released after the region is unmapped.
    _lock: std::fs::File,
}

impl Region {
    /// Takes the region's lock file, or says who holds it.
    pub(crate) fn lock(space: &SpaceInner, entry: &TocEntry) -> Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut name = space.pm_path.as_os_str().to_os_string();
        name.push(format!(".region-{:016x}.lock", entry.id));
        let path = std::path::PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io(&path, "opening the region's lock file", e))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(Error::InUse {
                owner: entry.owner.clone(),
                seq: entry.seq,
                lock: path,
            }),
            Err(e) => Err(Error::io(&path, "flock", e.into())),
        }
    }

    pub(crate) fn open(
        space: Arc<SpaceInner>,
        entry: TocEntry,
        options: RegionOptions,
    ) -> Result<Region> {
        {
            let mut open = space.open.lock().unwrap_or_else(|p| p.into_inner());
            if !open.insert(entry.id) {
                return Err(Error::Busy {
                    owner: entry.owner,
                    seq: entry.seq,
                });
            }
        }
        let result = Region::lock(&space, &entry)
            .and_then(|lock| Region::open_unregistered(Arc::clone(&space), &entry, lock, options));
        if result.is_err() {
            space
                .open
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&entry.id);
        }
        result
    }

    fn open_unregistered(
        space: Arc<SpaceInner>,
        entry: &TocEntry,
        lock: std::fs::File,
        options: RegionOptions,
    ) -> Result<Region> {
        let capacity = entry.capacity_pages * PAGE_SIZE;
        let (resident, swapped) = space.scan_table(entry)?;
        let reservation = Reservation::new(capacity)
            .map_err(|e| Error::io(&space.pm_path, "reserving address space", e))?;
        let (pm_fd, swap_fd) = (space.pm_fd(), space.swap_fd());
        let shared = Shared::new(
            reservation.base().as_ptr() as usize,
            entry.capacity_pages,
            entry.budget_pages,
            (entry.table_offset, entry.slots_offset, entry.swap_offset),
            (pm_fd, swap_fd),
            Arc::clone(&space),
            &resident,
            swapped,
            options,
        );
        let registration = Registration::new(Box::new(shared)).map_err(Error::Full)?;
        let evictor = if options.evict_ahead {
            let ptr = SharedPtr(registration.shared());
            let run = space.run_evictor;
            let handle = std::thread::Builder::new()
                .name("mnemo-vpm-evict".into())
                .spawn(move || {
                    let ptr = ptr;
                    // SAFETY: see `SharedPtr`.
                    let shared = unsafe { &*ptr.0 };
                    run(&|| shared.evictor_loop());
                })
                .map_err(|e| Error::io(&space.pm_path, "starting the evictor thread", e))?;
            Evictor(Some(handle))
        } else {
            Evictor(None)
        };
        Ok(Region {
            registration,
            reservation,
            evictor,
            owner: entry.owner.clone(),
            seq: entry.seq,
            id: entry.id,
            capacity,
            _lock: lock,
        })
    }

    /// The owner's name.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The owner's allocation sequence number of this region.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The region's counters now.
    pub fn stats(&self) -> Stats {
        stats_of(&self.shared().counters)
    }

    /// A handle on the counters that stays valid after the region is boxed into a pool.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            counters: Arc::clone(&self.shared().counters),
        }
    }

    /// Crash tests only: end the process (`_exit`, exit code
    /// [`crate::limits::CRASH_EXIT_CODE`]) when the `eviction`-th eviction since open
    /// (from 0; [`Stats::evictions`] counts them) reaches `step`; nothing is flushed or
    /// unwound, as in a crash.
    pub fn crash_at(&self, eviction: u64, step: Step) {
        self.shared()
            .crash_at
            .store((eviction + 1) << 8 | step as u64, Ordering::Relaxed);
    }

    /// The bytes of the region, as a slice (faulting pages in as they are read).
    ///
    /// # Safety
    /// No other thread may write the region while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the reservation covers `capacity` bytes; pages fault in on access; the
        // caller promises no concurrent writer.
        unsafe {
            std::slice::from_raw_parts(self.reservation.base().as_ptr(), self.capacity as usize)
        }
    }

    /// Copy `out.len()` bytes at `offset` out of the region (faulting pages in as needed).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        if offset
            .checked_add(out.len() as u64)
            .is_none_or(|end| end > self.capacity)
        {
            return Err(Error::InvalidArgument(format!(
                "range {offset}+{} outside the region of {} bytes",
                out.len(),
                self.capacity
            )));
        }
        // SAFETY: the range lies inside the reservation (checked); pages fault in on access;
        // `out` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.reservation.base().as_ptr().add(offset as usize),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    fn shared(&self) -> &Shared {
        self.registration.shared()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(handle) = self.evictor.0.take() {
            self.shared().stop_evictor();
            // A panic there was already reported on stderr; the region goes away anyway.
            let _ = handle.join();
        }
        self.shared()
            .space
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl Media for Region {
    fn base(&self) -> NonNull<u8> {
        self.reservation.base()
    }

    fn len(&self) -> u64 {
        self.capacity
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn grow(&self, new_len: u64) -> Result<(), MediaError> {
        if new_len > self.capacity {
            return Err(MediaError::CapacityExceeded {
                requested: new_len,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        // Slots and swap were allocated with the region.
        self.grow(offset.saturating_add(len))
    }

    fn flush(&self, offset: u64, len: u64) {
        let end = offset.checked_add(len);
        assert!(
            end.is_some_and(|end| end <= self.capacity),
            "media range {offset}+{len} outside the region of {} bytes",
            self.capacity
        );
        let s = self.shared();
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let page = at / PAGE_SIZE;
            let in_page = at % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(end - at);
            // Swapped or untouched: nothing of it is in a cache line (see the module doc).
            // A slot read here and reused by an eviction meanwhile is flushed for nothing:
            // the evicted page's bytes were made durable in swap.
            if let Some(Place::Resident(slot)) =
                Place::decode(s.entry(page).load(Ordering::Acquire))
            {
                s.space.window.flush(s.slot_offset(slot) + in_page, n);
            }
            at += n;
        }
    }

    fn drain(&self) -> Result<(), MediaError> {
        self.shared().space.window.drain()
    }

    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        let end = offset.checked_add(src.len() as u64);
        assert!(
            end.is_some_and(|end| end <= self.capacity),
            "media range {offset}+{} outside the region of {} bytes",
            src.len(),
            self.capacity
        );
        // SAFETY: the destination lies inside the reservation (asserted); pages not resident
        // fault in; `src` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.reservation.base().as_ptr().add(offset as usize),
                src.len(),
            )
        };
        self.flush(offset, src.len() as u64);
    }

    fn info(&self) -> MediaInfo {
        let window = self.shared().space.window.info();
        let stats = self.stats();
        MediaInfo {
            kind: MediaKind::Virtual,
            durability: window.durability,
            flush: window.flush,
            reason: format!(
                "virtual persistent memory: {} of {} pages may stay in {} ({:?}: {}), the rest in swap {}",
                stats.budget_pages,
                stats.capacity_pages,
                self.shared().space.pm_path.display(),
                window.kind,
                window.reason,
                self.shared().space.swap_path.display()
            ),
        }
    }
}
