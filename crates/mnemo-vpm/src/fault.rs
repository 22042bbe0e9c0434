//! The fault path: a first access to a page of a virtual region maps a slot of the
//! persistent-memory file there, evicting resident pages not touched lately to swap first when the
//! region's budget is used up.
//!
//! # Why a SIGSEGV handler, not userfaultfd
//! A resolved page must *be* a page of the persistent-memory file, at a slot of our
//! choosing. userfaultfd resolves a fault by filling the registered mapping's own backing
//! (`UFFDIO_COPY` into anonymous memory, `UFFDIO_CONTINUE` of the page already at the same
//! file offset): neither puts slot S of another file behind virtual page P. With userfaultfd
//! a handler thread would have to `mmap(MAP_FIXED)` the slot and then wake the faulting
//! thread: the same system calls plus two context switches per fault. A signal handler runs
//! on the faulting thread itself (vpmlib's choice). Its one limit: the kernel does not fault
//! on behalf of system calls, so `read(2)` into a page that is not resident fails with
//! EFAULT; mnemo's layers write pool memory with CPU stores only.
//!
//! # What the handler may do
//! It runs inside a signal handler: no heap allocation, no lock that code outside a handler
//! takes. Everything it needs is allocated when the region opens (the bookkeeping of
//! `Shared`); the handler's table is a fixed array of atomics ([`OPEN_REGIONS_MAX`]
//! entries). Two threads faulting on one region exclude each other with the region's spin
//! lock, which only the handler takes (normal code reads page-table words with atomic
//! loads, and never waits). All signals are blocked while the handler runs, so no other
//! handler can interrupt the lock's holder on its own thread. The system calls it makes
//! (`mmap`, `mprotect`, `pread`, `pwrite`, `fdatasync`, `msync`) take no user-space lock,
//! and it keeps no buffer on its stack (the alternate signal stack is small).
//!
//! # One fault (the region's lock held)
//! 1. The page's table word says resident: a store to a clean page (mapped read-only since
//!    its swap-in) marks it dirty and makes it writable; otherwise (a racing fault, or a
//!    page resident since the region was opened) its slot is mapped. Return.
//! 2. Take a free slot, or evict first: a batch of pages chosen by a two-handed CLOCK over
//!    the ring of resident pages (`Shared::choose_victims`).
//! 3. Fill the slot through the window onto the persistent-memory file: the page's bytes
//!    from swap, or zeros; flush, fence.
//! 4. Record "page -> slot" in the page table: one 8-byte store, flush, fence.
//! 5. Map the slot at the page's address (read-only for a page from swap: clean until its
//!    first store); return, and the access is retried.
//!
//! # One eviction (crash-safe: every step leaves a table that recovers every page)
//! 1. Make the victim pages inaccessible (`PROT_NONE`): from now on a store to one faults
//!    and waits for the lock, so the copies below are final.
//! 2. Write each dirty victim to the region's swap area at its page's own number (a clean
//!    one's swap copy is its bytes already).
//! 3. `fdatasync` the swap file, if anything was written.
//! 4. Record each "page -> swap": 8-byte stores, flushes, one fence.
//!
//! Only then is a slot filled for another page (fault step 3) and recorded as its (fault
//! step 4). A crash before eviction step 4 leaves the victims recorded in their slots, whose
//! bytes are untouched until after step 4; a crash after it finds the victims' bytes
//! durable in swap, and each slot either unrecorded (free at open) or recorded for the new
//! page after that page's bytes were made durable there.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mnemo_pmem::{durable_site, mutant};

use crate::format::Place;
use crate::limits::{CRASH_EXIT_CODE, EVICT_BATCH_PAGES, OPEN_REGIONS_MAX, PAGE_SIZE};
use crate::region::RegionOptions;
use crate::space::SpaceInner;

const PAGE: usize = PAGE_SIZE as usize;

/// Deliberately broken variants of the fault path (`mnemo_pmem::mutant`), each of which the
/// crash test must catch (`tests/crash.rs`).
pub const MUTANTS: &[&str] = &[
    // An eviction records the victim as swapped before its bytes are in swap.
    "vpm.record_before_swap",
    // A fault records the page in its slot before the slot holds the page's bytes.
    "vpm.record_before_fill",
    // A page brought back from swap is mapped writable but counted clean: stores to it are
    // not written to swap when it is evicted again.
    "vpm.swap_in_writable",
];

/// Variants that change only performance (which pages are evicted), for benchmarks and
/// tests that compare: no crash image can catch them, and none should.
pub const POLICY_MUTANTS: &[&str] = &[
    // Victims are the oldest pages, referenced or not (vpmlib's FIFO, without CLOCK).
    "vpm.fifo_only",
];
const FREE: u32 = u32::MAX;

/// A step of an eviction or of a fault, for crash points ([`crate::Region::crash_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    /// The victim is chosen; nothing changed yet.
    Chosen = 1,
    /// The victim's page is inaccessible.
    Protected = 2,
    /// The victim's bytes are written to the swap file (not yet synced).
    Written = 3,
    /// The swap file is synced.
    Synced = 4,
    /// The victim's table word says "in swap", not yet flushed.
    SwapWordStored = 5,
    /// The victim is recorded as swapped, durably; its slot is free.
    Recorded = 6,
    /// The freed slot holds the faulting page's bytes, not yet flushed.
    FillStored = 7,
    /// The freed slot holds the faulting page's bytes, flushed and fenced.
    Filled = 8,
    /// The faulting page's table word names the slot, not yet flushed.
    SlotWordStored = 9,
    /// The faulting page is recorded in the slot, durably.
    Remapped = 10,
}

impl Step {
    /// Every step in order.
    pub const ALL: [Step; 10] = [
        Step::Chosen,
        Step::Protected,
        Step::Written,
        Step::Synced,
        Step::SwapWordStored,
        Step::Recorded,
        Step::FillStored,
        Step::Filled,
        Step::SlotWordStored,
        Step::Remapped,
    ];
}

/// Counters of one region, updated by the fault handler (relaxed atomics).
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) capacity_pages: AtomicU64,
    pub(crate) budget_pages: AtomicU64,
    pub(crate) faults: AtomicU64,
    pub(crate) swap_outs: AtomicU64,
    pub(crate) clean_evictions: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) sync_evictions: AtomicU64,
    pub(crate) fault_waits: AtomicU64,
    pub(crate) swap_ins: AtomicU64,
    pub(crate) zero_fills: AtomicU64,
    pub(crate) resident: AtomicU64,
    pub(crate) swapped: AtomicU64,
}

/// The handler's volatile bookkeeping: which page each slot holds, the FIFO of resident
/// slots and the stack of free ones. Preallocated at open; touched only under the lock.
#[derive(Debug)]
struct Book {
    /// Page held by each slot, or `FREE`.
    owner: Box<[u32]>,
    /// Ring of resident slots, oldest at `head`.
    fifo: Box<[u32]>,
    head: usize,
    len: usize,
    /// Free slots.
    free: Box<[u32]>,
    free_len: usize,
    /// Slots of the eviction in progress (as many as one eviction takes).
    batch: Box<[u32]>,
    /// Per slot: `MAPPED` (at its page's address) and `DIRTY` (stored to since its bytes
    /// last matched its swap copy; a clean page is mapped read-only).
    flags: Box<[u8]>,
    /// An eviction by the evictor thread is between its choice and its record: its victims
    /// are `EVICTING`, out of the ring, and their slots not free yet.
    inflight: bool,
}

/// The victims of the evictor thread's eviction in progress: (slot, page, dirty). Touched
/// by the evictor thread only (its copies and sync run without the region's lock).
#[derive(Debug)]
struct Ahead {
    victims: Box<[(u32, u32, bool)]>,
    n: usize,
}

const MAPPED: u8 = 1;
const DIRTY: u8 = 2;
/// Accessed since the front hand armed it (an access found it armed).
const REFERENCED: u8 = 4;
/// Made inaccessible by the front hand (its slot stays mapped): the next access faults and
/// sets `REFERENCED`.
const ARMED: u8 = 8;
/// Chosen by the evictor thread, whose copy to swap is in progress (its page is
/// inaccessible): a fault on it waits until the eviction is recorded, then swaps it in.
const EVICTING: u8 = 16;

/// Everything the fault path of one region needs, allocated before the region is
/// registered with the handler.
#[derive(Debug)]
pub(crate) struct Shared {
    /// First address of the region.
    pub(crate) start: usize,
    /// Pages of the region.
    pub(crate) pages: u64,
    /// Offsets in the persistent-memory file.
    pub(crate) table_offset: u64,
    pub(crate) slots_offset: u64,
    /// Offset of the swap area in the swap file.
    pub(crate) swap_offset: u64,
    pm_fd: RawFd,
    swap_fd: RawFd,
    /// The space: its window onto the persistent-memory file, and the files themselves.
    pub(crate) space: Arc<SpaceInner>,
    /// Only the fault handler takes it.
    lock: AtomicU32,
    book: UnsafeCell<Book>,
    /// Shared with the region's stats handles, which may outlive the region.
    pub(crate) counters: Arc<Counters>,
    /// Crash point: `(eviction number + 1) << 8 | step`, 0 for none.
    pub(crate) crash_at: AtomicU64,
    /// Number + 1 of the last eviction recorded whose freed slots no fault has taken from
    /// yet (0: none): the fill steps of a crash point belong to the next fault that takes a
    /// slot after it.
    last_recorded: AtomicU64,
    /// The reserve: the evictor thread evicts while fewer slots than this are free (0: no
    /// evictor thread).
    low_water: usize,
    /// Most pages a first touch maps at once.
    fault_around: usize,
    /// The evictor's futex word: bumped to wake it.
    wake: AtomicU32,
    /// Bumped (under the lock) each time the evictor thread ends an eviction: faults that
    /// wait for it sleep on this futex word.
    evicted: AtomicU32,
    /// A fault asked the evictor to run and it has not started on it yet.
    wake_pending: AtomicBool,
    /// The region is being dropped: the evictor returns.
    stop: AtomicBool,
    /// The evictor thread's eviction in progress.
    ahead: UnsafeCell<Ahead>,
}

// SAFETY: `book` is touched only under `lock` (the handler and the evictor thread) or with
// `&mut` before the region is registered; `ahead` only by the evictor thread (one per
// region); every other field is immutable or atomic.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw descriptors are owned by `space`, which outlives `Shared`.
unsafe impl Send for Shared {}

/// The (slot, page) pairs of the first `n` slots of the eviction in progress.
fn victims(book: &Book, n: usize) -> impl Iterator<Item = (u64, u64)> + Clone + '_ {
    book.batch[..n]
        .iter()
        .map(|&slot| (u64::from(slot), u64::from(book.owner[slot as usize])))
}

/// Pages one eviction takes from a region of `budget` slots: a swap sync and a fence are
/// shared by the batch, but a batch also empties that much of persistent memory at once,
/// so at most a quarter of the budget.
pub fn evict_batch(budget: u64) -> usize {
    (budget / 4).clamp(1, EVICT_BATCH_PAGES) as usize
}

/// Spins on a region's lock before sleeping on it.
const LOCK_SPINS: u32 = 200;

/// The lock of one region: 0 free, 1 held, 2 held with sleepers. It spins a little, then
/// sleeps on the word (futex), since its holder may be preempted on the very CPU the waiter
/// runs on (a server pinned to one CPU shares it with its evictor thread: a pure spin lock
/// there burnt whole time slices). Async-signal-safe: atomics and system calls only.
struct SpinGuard<'a>(&'a AtomicU32);

impl<'a> SpinGuard<'a> {
    fn lock(word: &'a AtomicU32) -> SpinGuard<'a> {
        for _ in 0..LOCK_SPINS {
            if word
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinGuard(word);
            }
            std::hint::spin_loop();
        }
        // Contended: say so (2), and sleep until the holder's unlock wakes us.
        while word.swap(2, Ordering::Acquire) != 0 {
            futex_wait(word, 2, 1_000_000_000);
        }
        SpinGuard(word)
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        if self.0.swap(0, Ordering::Release) == 2 {
            futex_wake(self.0);
        }
    }
}

/// A failed system call inside the handler: nothing can be returned to the faulting store,
/// so say what failed on stderr (`write(2)` only) and abort, as a mapped file's I/O error
/// ends a process with SIGBUS.
fn die(what: &str) -> ! {
    let msg = b"mnemo-vpm: fault handler failed: ";
    // SAFETY: write(2) of valid buffers to stderr; async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::write(2, what.as_ptr().cast(), what.len());
        libc::write(2, b"\n".as_ptr().cast(), 1);
        libc::abort();
    }
}

impl Shared {
    /// The bookkeeping for `budget` slots with `resident` as (slot, page) pairs found in
    /// the page table at open (in slot order: their FIFO order).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        start: usize,
        pages: u64,
        budget: u64,
        (table_offset, slots_offset, swap_offset): (u64, u64, u64),
        (pm_fd, swap_fd): (RawFd, RawFd),
        space: Arc<SpaceInner>,
        resident: &[(u32, u32)],
        swapped: u64,
        options: RegionOptions,
    ) -> Shared {
        let budget_usize = budget as usize;
        let mut owner = vec![FREE; budget_usize].into_boxed_slice();
        let mut fifo = vec![0u32; budget_usize].into_boxed_slice();
        for (i, &(slot, page)) in resident.iter().enumerate() {
            owner[slot as usize] = page;
            fifo[i] = slot;
        }
        // A page resident at open is not mapped yet, and whether its swap copy (if any) is
        // its bytes is not known: dirty, so that an eviction writes it.
        let mut flags = vec![0u8; budget_usize].into_boxed_slice();
        for &(slot, _) in resident {
            flags[slot as usize] = DIRTY;
        }
        let mut free = vec![0u32; budget_usize].into_boxed_slice();
        let mut free_len = 0;
        // Free slots are handed out lowest first: pushed in descending order.
        for slot in (0..budget_usize).rev() {
            if owner[slot] == FREE {
                free[free_len] = slot as u32;
                free_len += 1;
            }
        }
        let counters = Arc::new(Counters::default());
        counters
            .resident
            .store(resident.len() as u64, Ordering::Relaxed);
        counters.swapped.store(swapped, Ordering::Relaxed);
        counters.capacity_pages.store(pages, Ordering::Relaxed);
        counters.budget_pages.store(budget, Ordering::Relaxed);
        Shared {
            start,
            pages,
            table_offset,
            slots_offset,
            swap_offset,
            pm_fd,
            swap_fd,
            space,
            lock: AtomicU32::new(0),
            book: UnsafeCell::new(Book {
                owner,
                fifo,
                head: 0,
                len: resident.len(),
                free,
                free_len,
                batch: vec![0u32; evict_batch(budget)].into_boxed_slice(),
                flags,
                inflight: false,
            }),
            counters,
            crash_at: AtomicU64::new(0),
            last_recorded: AtomicU64::new(0),
            low_water: if options.evict_ahead {
                evict_batch(budget)
            } else {
                0
            },
            // At most a quarter of the budget: the next eviction's victims are the oldest
            // pages (a quarter at most), so the pages one fault maps are not among them
            // unless every older page was touched again (a writer in a small region saw the
            // page it was filling evicted from under it).
            fault_around: options.fault_around_pages.min(budget / 4).max(1) as usize,
            wake: AtomicU32::new(0),
            evicted: AtomicU32::new(0),
            wake_pending: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            ahead: UnsafeCell::new(Ahead {
                victims: vec![(0, 0, false); evict_batch(budget)].into_boxed_slice(),
                n: 0,
            }),
        }
    }

    /// The page-table word of `page`, in the window onto the persistent-memory file.
    #[inline]
    pub(crate) fn entry(&self, page: u64) -> &AtomicU64 {
        debug_assert!(page < self.pages);
        let at = self.table_offset + page * 8;
        // SAFETY: the table lies inside the window's live mapping (checked when the region
        // was opened), 8-byte aligned; the window outlives `self` (held by `space`).
        unsafe {
            &*self
                .space
                .window
                .base()
                .as_ptr()
                .add(at as usize)
                .cast::<AtomicU64>()
        }
    }

    #[inline]
    fn entry_offset(&self, page: u64) -> u64 {
        self.table_offset + page * 8
    }

    #[inline]
    pub(crate) fn slot_offset(&self, slot: u64) -> u64 {
        self.slots_offset + slot * PAGE_SIZE
    }

    fn window_ptr(&self, offset: u64) -> *mut u8 {
        // SAFETY (of the callers' use): offsets come from the region's checked geometry.
        self.space
            .window
            .base()
            .as_ptr()
            .wrapping_add(offset as usize)
    }

    fn page_addr(&self, page: u64) -> *mut c_void {
        (self.start + page as usize * PAGE) as *mut c_void
    }

    /// Stop the process at a crash point, if one is set for this step of this eviction.
    #[inline]
    fn crash_point(&self, eviction: u64, step: Step) {
        let at = self.crash_at.load(Ordering::Relaxed);
        if at != 0 && at == ((eviction + 1) << 8 | step as u64) {
            // SAFETY: _exit is async-signal-safe; nothing is flushed or unwound: a crash.
            unsafe { libc::_exit(CRASH_EXIT_CODE) };
        }
    }

    /// Record pages `page..page + run` in slots `slot..slot + run`: the 8-byte words stored,
    /// flushed (they are neighbours), one fence; `stored`: the crash point between the
    /// stores and their flush.
    fn record_run(&self, page: u64, slot: u64, run: u64, stored: Option<(u64, Step)>) {
        for i in 0..run {
            self.entry(page + i)
                .store(Place::Resident(slot + i).word(), Ordering::Release);
        }
        if let Some((eviction, step)) = stored {
            self.crash_point(eviction, step);
        }
        let window = &self.space.window;
        durable_site!("vpm.table_flush", {
            window.flush(self.entry_offset(page), 8 * run);
            Ok::<(), ()>(())
        })
        .ok();
        if durable_site!("vpm.table_fence", window.drain()).is_err() {
            die("fence after a page-table update");
        }
    }

    /// Map slots `slot..slot + run` of the persistent-memory file at pages
    /// `page..page + run` (one mapping).
    /// `writable`: read-write, else read-only (a page whose swap copy is still its bytes:
    /// the first store faults again and marks it dirty).
    fn map_run(&self, page: u64, slot: u64, run: u64, writable: bool) {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: the pages lie inside this region's reservation, which only this module
        // maps; MAP_FIXED replaces the reservation's pages (or the same slots mapped by a
        // racing fault) with the slots, pages of the file inside its length.
        let p = unsafe {
            libc::mmap(
                self.page_addr(page),
                PAGE * run as usize,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.pm_fd,
                self.slot_offset(slot) as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            die("mmap of a persistent-memory slot");
        }
    }

    /// Map `slot` at `page` (see [`Shared::map_run`]).
    fn map_slot(&self, page: u64, slot: u64, writable: bool) {
        self.map_run(page, slot, 1, writable);
    }

    /// Change the protection of a mapped page (clean and dirty pages, the clock's arming).
    fn protect(&self, page: u64, prot: libc::c_int) {
        // SAFETY: the page is mapped (a slot of this region); only its protection changes.
        let r = unsafe { libc::mprotect(self.page_addr(page), PAGE, prot) };
        if r != 0 {
            die("mprotect of a resident page");
        }
    }

    /// Make `page` inaccessible again: the reservation's PROT_NONE page replaces the slot.
    fn unmap(&self, page: u64) {
        // SAFETY: the page lies inside this region's reservation (see `map_slot`).
        let p = unsafe {
            libc::mmap(
                self.page_addr(page),
                PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            die("mmap PROT_NONE over an evicted page");
        }
    }

    /// Resolve a fault at `addr` (inside the region). Called by the signal handler.
    /// `write`: the access is known to be a store (the CPU says so), so a page brought in
    /// for it is dirty at once and mapped writable (no second fault for the store).
    fn fault(&self, addr: usize, write: bool) {
        let page = ((addr - self.start) / PAGE) as u64;
        self.counters.faults.fetch_add(1, Ordering::Relaxed);
        let mut waited = false;
        loop {
            let done = {
                let _guard = SpinGuard::lock(&self.lock);
                // SAFETY: the lock is held; nothing else touches the book meanwhile.
                let book = unsafe { &mut *self.book.get() };
                if self.resolve(book, page, write) {
                    return;
                }
                // Read under the lock: the evictor bumps it under the lock when it ends.
                self.evicted.load(Ordering::SeqCst)
            };
            // The page, or the slot it needs, waits for the evictor thread's eviction in
            // progress (a copy to swap and its sync): asleep, since the evictor may need
            // this very CPU (a server pinned to one shares it with its evictor).
            if !waited {
                waited = true;
                self.counters.fault_waits.fetch_add(1, Ordering::Relaxed);
            }
            futex_wait(&self.evicted, done, WAIT_FOR_EVICTION_NS);
        }
    }

    /// Resolve a fault on `page`, the lock held: false if it must wait for the evictor
    /// thread's eviction in progress.
    fn resolve(&self, book: &mut Book, page: u64, write: bool) -> bool {
        let place = match Place::decode(self.entry(page).load(Ordering::Acquire)) {
            Some(place) => place,
            None => die("invalid page-table word"),
        };
        if let Place::Resident(slot) = place {
            let flags = &mut book.flags[slot as usize];
            if *flags & EVICTING != 0 {
                return false;
            }
            if *flags & ARMED != 0 {
                // An access to a page the clock hand armed: referenced. Its protection comes
                // back (read-only if clean and read: a store then faults once more, below).
                if write {
                    *flags |= DIRTY;
                }
                let prot = if *flags & DIRTY != 0 {
                    libc::PROT_READ | libc::PROT_WRITE
                } else {
                    libc::PROT_READ
                };
                self.protect(page, prot);
                *flags = (*flags & !ARMED) | REFERENCED;
                return true;
            }
            if *flags & MAPPED != 0 && *flags & DIRTY == 0 {
                // A store to a clean page (mapped read-only at its swap-in): from now on
                // its swap copy is stale. (A racing read fault lands here too: the page is
                // then marked dirty for nothing.)
                self.protect(page, libc::PROT_READ | libc::PROT_WRITE);
                *flags |= DIRTY;
                return true;
            }
            // Mapped by a racing fault meanwhile, or resident since the region was opened
            // (its swap copy, if any, unknown: dirty).
            self.map_slot(page, slot, true);
            *flags = MAPPED | DIRTY;
            return true;
        }
        if book.free_len == 0 {
            if book.inflight {
                // The evictor's eviction in progress frees slots soon: no second eviction
                // (and swap sync) on the fault path.
                return false;
            }
            let eviction = self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            self.counters.sync_evictions.fetch_add(1, Ordering::Relaxed);
            self.evict_batch(book, eviction);
        }
        let slot = u64::from(book.free[book.free_len - 1]);
        let run = self.run_length(book, page, place, slot);
        book.free_len -= run as usize;
        // The fill steps of a crash point: those of the first fault to take a slot after
        // the eviction that freed it.
        let eviction = self.last_recorded.swap(0, Ordering::Relaxed).checked_sub(1);
        let stored = eviction.map(|e| (e, Step::SlotWordStored));
        if mutant::active("vpm.record_before_fill") {
            self.record_run(page, slot, run, stored);
            if let Some(e) = eviction {
                self.crash_point(e, Step::Filled);
            }
            self.fill(slot, run, place, eviction);
        } else {
            self.fill(slot, run, place, eviction);
            if let Some(e) = eviction {
                self.crash_point(e, Step::Filled);
            }
            self.record_run(page, slot, run, stored);
        }
        if let Some(e) = eviction {
            self.crash_point(e, Step::Remapped);
        }
        // A page from swap stays clean (read-only) until its first store; a new page has
        // no swap copy.
        let writable_anyway = mutant::active("vpm.swap_in_writable");
        let clean = matches!(place, Place::Swapped(_)) && !write;
        self.map_run(page, slot, run, !clean || writable_anyway);
        for i in 0..run {
            let s = (slot + i) as usize;
            book.flags[s] = if clean { MAPPED } else { MAPPED | DIRTY };
            book.owner[s] = (page + i) as u32;
            let tail = (book.head + book.len) % book.fifo.len();
            book.fifo[tail] = s as u32;
            book.len += 1;
        }
        self.counters.resident.fetch_add(run, Ordering::Relaxed);
        if let Place::Swapped(_) = place {
            self.counters.swapped.fetch_sub(1, Ordering::Relaxed);
        }
        self.request_eviction(book);
        true
    }

    /// Pages a fault on `page` maps into slots from `slot` (the top of the free stack): 1,
    /// or for a first touch (fault-around) also the untouched pages after it, as long as the
    /// free slots below the top continue `slot` contiguously (one mapping of the file).
    fn run_length(&self, book: &Book, page: u64, place: Place, slot: u64) -> u64 {
        if place != Place::Untouched {
            return 1;
        }
        let most = self.fault_around.min(book.free_len) as u64;
        let mut run = 1;
        while run < most
            && page + run < self.pages
            && u64::from(book.free[book.free_len - 1 - run as usize]) == slot + run
            && Place::decode(self.entry(page + run).load(Ordering::Acquire))
                == Some(Place::Untouched)
        {
            run += 1;
        }
        run
    }

    /// Wake the evictor thread if the reserve of free slots ran low (once per request).
    fn request_eviction(&self, book: &Book) {
        if book.free_len < self.low_water
            && !book.inflight
            && !self.wake_pending.swap(true, Ordering::SeqCst)
        {
            self.wake.fetch_add(1, Ordering::SeqCst);
            futex_wake(&self.wake);
        }
    }

    /// Put pages' bytes into slots `slot..slot + run` (from swap for one page, or zeros)
    /// and make them durable there (one fence).
    fn fill(&self, slot: u64, run: u64, place: Place, eviction: Option<u64>) {
        let dst = self.window_ptr(self.slot_offset(slot));
        match place {
            Place::Swapped(at) => {
                debug_assert_eq!(run, 1);
                let offset = self.swap_offset + at * PAGE_SIZE;
                read_full(self.swap_fd, dst, offset);
                self.counters.swap_ins.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                // SAFETY: the slots lie inside the window's mapping.
                unsafe { std::ptr::write_bytes(dst, 0, PAGE * run as usize) };
                self.counters.zero_fills.fetch_add(run, Ordering::Relaxed);
            }
        }
        if let Some(e) = eviction {
            self.crash_point(e, Step::FillStored);
        }
        let window = &self.space.window;
        durable_site!("vpm.slot_flush", {
            window.flush(self.slot_offset(slot), PAGE_SIZE * run);
            Ok::<(), ()>(())
        })
        .ok();
        if durable_site!("vpm.slot_fence", window.drain()).is_err() {
            die("fence after filling a slot");
        }
    }

    /// Make the swap file's writes durable (`fdatasync`).
    fn sync_swap(&self) {
        if durable_site!("vpm.swap_sync", {
            if (self.space.sync_swap)(self.swap_fd) {
                Ok(())
            } else {
                Err(())
            }
        })
        .is_err()
        {
            die("fdatasync of the swap file");
        }
    }

    /// The victims' slots are free (recorded in swap): to the free stack, the first victim's
    /// slot on top; `written` of the `victims` were written to swap (the others were clean).
    fn release(
        &self,
        book: &mut Book,
        victims: impl DoubleEndedIterator<Item = u32>,
        written: u64,
    ) {
        let mut n = 0;
        for slot in victims.rev() {
            book.owner[slot as usize] = FREE;
            book.flags[slot as usize] = 0;
            book.free[book.free_len] = slot;
            book.free_len += 1;
            n += 1;
        }
        self.counters.swap_outs.fetch_add(n, Ordering::Relaxed);
        self.counters
            .clean_evictions
            .fetch_add(n - written, Ordering::Relaxed);
        self.counters.resident.fetch_sub(n, Ordering::Relaxed);
        self.counters.swapped.fetch_add(n, Ordering::Relaxed);
    }

    /// Evict a batch of resident pages (chosen by CLOCK) to swap, on the fault path; their
    /// slots go to the free stack, the first chosen on top. One swap sync and one fence for
    /// the batch.
    fn evict_batch(&self, book: &mut Book, eviction: u64) {
        if book.len == 0 {
            die("no resident page to evict (budget of zero pages)");
        }
        let n = self.choose_victims(book);
        self.crash_point(eviction, Step::Chosen);
        for (_, victim) in victims(book, n) {
            self.unmap(victim);
        }
        self.crash_point(eviction, Step::Protected);
        // The mutant records first: a crash at the next point finds the victims "in swap"
        // with their bytes not there.
        let record_first = mutant::active("vpm.record_before_swap");
        if record_first {
            self.record_swapped(victims(book, n), None);
            self.crash_point(eviction, Step::Written);
        }
        // A clean victim's swap copy is its bytes already (synced when it was last
        // evicted, and not stored to since its swap-in: it was mapped read-only).
        let mut written = 0;
        for (slot, victim) in victims(book, n) {
            if book.flags[slot as usize] & DIRTY == 0 {
                continue;
            }
            let src = self.window_ptr(self.slot_offset(slot));
            write_full(self.swap_fd, src, self.swap_offset + victim * PAGE_SIZE);
            written += 1;
        }
        if !record_first {
            self.crash_point(eviction, Step::Written);
        }
        if written > 0 {
            self.sync_swap();
        }
        self.crash_point(eviction, Step::Synced);
        if !record_first {
            self.record_swapped(victims(book, n), Some(eviction));
        }
        self.crash_point(eviction, Step::Recorded);
        let batch = std::mem::take(&mut book.batch);
        self.release(book, batch[..n].iter().copied(), written);
        book.batch = batch;
        self.last_recorded.store(eviction + 1, Ordering::Relaxed);
    }

    /// One eviction ahead of need, on the evictor thread: the same steps as
    /// [`Shared::evict_batch`], but the copies to swap and the sync run without the lock
    /// (faults go on meanwhile; one on a victim waits, see `EVICTING`). False if the
    /// reserve is full, or there is nothing to evict.
    fn evict_ahead(&self) -> bool {
        // SAFETY: only the evictor thread, this one, touches `ahead`.
        let ahead = unsafe { &mut *self.ahead.get() };
        let eviction = {
            let _guard = SpinGuard::lock(&self.lock);
            // SAFETY: the lock is held.
            let book = unsafe { &mut *self.book.get() };
            if book.free_len >= self.low_water || book.len == 0 || book.inflight {
                return false;
            }
            let eviction = self.counters.evictions.fetch_add(1, Ordering::Relaxed);
            let n = self.choose_victims(book);
            self.crash_point(eviction, Step::Chosen);
            for i in 0..n {
                let slot = book.batch[i];
                let page = book.owner[slot as usize];
                let flags = &mut book.flags[slot as usize];
                ahead.victims[i] = (slot, page, *flags & DIRTY != 0);
                *flags |= EVICTING;
                self.unmap(u64::from(page));
            }
            ahead.n = n;
            book.inflight = true;
            self.crash_point(eviction, Step::Protected);
            eviction
        };
        // The victims are inaccessible (a store to one waits): their slots' bytes are
        // final, and no fault takes their slots until they are released below.
        let chosen = &ahead.victims[..ahead.n];
        let victims = chosen
            .iter()
            .map(|&(slot, page, _)| (u64::from(slot), u64::from(page)));
        let record_first = mutant::active("vpm.record_before_swap");
        if record_first {
            self.record_swapped(victims.clone(), None);
            self.crash_point(eviction, Step::Written);
        }
        let mut written = 0;
        for &(slot, page, dirty) in chosen {
            if dirty {
                let src = self.window_ptr(self.slot_offset(u64::from(slot)));
                let at = self.swap_offset + u64::from(page) * PAGE_SIZE;
                write_full(self.swap_fd, src, at);
                written += 1;
            }
        }
        if !record_first {
            self.crash_point(eviction, Step::Written);
        }
        if written > 0 {
            self.sync_swap();
        }
        self.crash_point(eviction, Step::Synced);
        let _guard = SpinGuard::lock(&self.lock);
        // SAFETY: the lock is held.
        let book = unsafe { &mut *self.book.get() };
        if !record_first {
            self.record_swapped(victims, Some(eviction));
        }
        self.crash_point(eviction, Step::Recorded);
        self.release(book, chosen.iter().map(|&(slot, _, _)| slot), written);
        book.inflight = false;
        self.last_recorded.store(eviction + 1, Ordering::Relaxed);
        self.evicted.fetch_add(1, Ordering::SeqCst);
        drop(_guard);
        futex_wake_all(&self.evicted);
        true
    }

    /// The evictor thread's loop: evict while the reserve is short, sleep until a fault asks
    /// again (or a second passes), return when the region is dropped. Every signal is
    /// blocked on this thread, so the fault handler never runs on it while it holds the
    /// region's lock (it touches the region's pages only through the window, never faults).
    pub(crate) fn evictor_loop(&self) {
        // SAFETY: a full signal set, blocked on this thread only.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, null_mut());
        }
        loop {
            let seen = self.wake.load(Ordering::SeqCst);
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            self.wake_pending.store(false, Ordering::SeqCst);
            // Each turn is a whole eviction (copies, a swap sync), not a spin.
            while !self.stop.load(Ordering::SeqCst) {
                if !self.evict_ahead() {
                    break;
                }
            }
            futex_wait(&self.wake, seen, 1_000_000_000);
        }
    }

    /// Tell the evictor thread to return (the region is being dropped).
    pub(crate) fn stop_evictor(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.fetch_add(1, Ordering::SeqCst);
        futex_wake(&self.wake);
    }

    /// Choose the batch's victims by a two-handed CLOCK over the FIFO ring. The front hand,
    /// half the ring ahead of the back, arms pages (inaccessible, slot still mapped): an
    /// access to an armed page faults and marks it referenced. At the back hand (the ring's
    /// head) a referenced page goes back to the tail (second chance); one not referenced
    /// since it was armed is a victim. Returns how many victims are in `book.batch`.
    fn choose_victims(&self, book: &mut Book) -> usize {
        let want = book.batch.len().min(book.len);
        let fifo_only = mutant::active("vpm.fifo_only");
        let mut n = 0;
        let mut chances = book.len;
        while n < want {
            let slot = book.fifo[book.head];
            book.head = (book.head + 1) % book.fifo.len();
            book.len -= 1;
            let flags = &mut book.flags[slot as usize];
            if !fifo_only && chances > 0 && *flags & REFERENCED != 0 {
                chances -= 1;
                *flags &= !REFERENCED;
                let tail = (book.head + book.len) % book.fifo.len();
                book.fifo[tail] = slot;
                book.len += 1;
                continue;
            }
            book.batch[n] = slot;
            n += 1;
        }
        if !fifo_only {
            self.arm_middle(book, n);
        }
        n
    }

    /// The front hand: arm up to `count` mapped pages not armed yet, from the middle of the
    /// ring towards its tail.
    fn arm_middle(&self, book: &mut Book, count: usize) {
        let mut armed = 0;
        for i in book.len / 2..book.len {
            if armed == count {
                break;
            }
            let slot = book.fifo[(book.head + i) % book.fifo.len()] as usize;
            let flags = &mut book.flags[slot];
            if *flags & MAPPED != 0 && *flags & ARMED == 0 {
                self.protect(u64::from(book.owner[slot]), libc::PROT_NONE);
                *flags = (*flags | ARMED) & !REFERENCED;
                armed += 1;
            }
        }
    }

    /// Record every victim as swapped: the words stored, flushed, one fence.
    fn record_swapped(
        &self,
        victims: impl Iterator<Item = (u64, u64)> + Clone,
        eviction: Option<u64>,
    ) {
        for (_, victim) in victims.clone() {
            self.entry(victim)
                .store(Place::Swapped(victim).word(), Ordering::Release);
        }
        if let Some(e) = eviction {
            self.crash_point(e, Step::SwapWordStored);
        }
        let window = &self.space.window;
        for (_, victim) in victims {
            durable_site!("vpm.evict_flush", {
                window.flush(self.entry_offset(victim), 8);
                Ok::<(), ()>(())
            })
            .ok();
        }
        if durable_site!("vpm.evict_fence", window.drain()).is_err() {
            die("fence after recording evicted pages");
        }
    }
}

/// How long a fault sleeps at most before it looks again for the evictor thread's eviction
/// to end (it is woken when it does; this bounds a lost wake-up).
const WAIT_FOR_EVICTION_NS: u64 = 10_000_000;

/// Sleep until `word` is no longer `seen` (or a wake-up, or `ns` nanoseconds);
/// async-signal-safe (a system call).
fn futex_wait(word: &AtomicU32, seen: u32, ns: u64) {
    let timeout = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a live, aligned u32, with a timeout read from a local.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &timeout as *const libc::timespec,
        )
    };
}

/// Wake the thread sleeping on `word`; async-signal-safe (a system call).
fn futex_wake(word: &AtomicU32) {
    futex_wake_n(word, 1);
}

/// Wake every thread sleeping on `word`.
fn futex_wake_all(word: &AtomicU32) {
    futex_wake_n(word, i32::MAX);
}

fn futex_wake_n(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE on a live, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
        )
    };
}

fn read_full(fd: RawFd, dst: *mut u8, offset: u64) {
    let mut done = 0;
    while done < PAGE {
        // SAFETY: `dst..dst+PAGE` is a slot inside the window's mapping.
        let n = unsafe {
            libc::pread(
                fd,
                dst.add(done).cast(),
                PAGE - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n > 0 {
            done += n as usize;
        } else if n == 0 {
            // Past the end of the swap file: a page never written there reads as zero.
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(dst.add(done), 0, PAGE - done) };
            return;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            die("pread from the swap file");
        }
    }
}

fn write_full(fd: RawFd, src: *const u8, offset: u64) {
    let mut done = 0;
    while done < PAGE {
        // SAFETY: `src..src+PAGE` is a slot inside the window's mapping.
        let n = unsafe {
            libc::pwrite(
                fd,
                src.add(done).cast(),
                PAGE - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n > 0 {
            done += n as usize;
        } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        } else {
            die("pwrite to the swap file");
        }
    }
}

// --- The process-wide handler table -------------------------------------------------------

struct Entry {
    start: AtomicUsize,
    end: AtomicUsize,
    shared: AtomicPtr<Shared>,
}

static TABLE: [Entry; OPEN_REGIONS_MAX] = [const {
    Entry {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        shared: AtomicPtr::new(null_mut()),
    }
}; OPEN_REGIONS_MAX];

/// Serializes registering and unregistering regions (never taken by the handler).
static CLAIM: Mutex<()> = Mutex::new(());

static INSTALLED: mnemo_pmem::sigchain::Installed = mnemo_pmem::sigchain::Installed::new();

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid siginfo_t.
    let addr = unsafe { (*info).si_addr() } as usize;
    for entry in &TABLE {
        let start = entry.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= entry.end.load(Ordering::Acquire) {
            continue;
        }
        let shared = entry.shared.load(Ordering::Acquire);
        if shared.is_null() {
            continue;
        }
        // SAFETY: a registered `Shared` lives until its region unregisters it, which it
        // does only when no thread may touch the region any more (the region is dropped).
        unsafe { (*shared).fault(addr, is_write(ctx)) };
        return;
    }
    chain(sig, info, ctx);
}

/// Whether the faulting access was a store: bit 1 of the page-fault error code the kernel
/// saves in the signal context (x86-64). Elsewhere unknown: false (a page from swap is then
/// mapped read-only and a store faults once more).
fn is_write(ctx: *mut c_void) -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
    {
        if ctx.is_null() {
            return false;
        }
        // SAFETY: for an SA_SIGINFO handler the third argument is the thread's ucontext_t.
        let err =
            unsafe { (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_ERR as usize] };
        err & 2 != 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu")))]
    {
        let _ = ctx;
        false
    }
}

/// Hand a fault that is not ours to the handler that was there before.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    INSTALLED.forward(sig, info, ctx);
}

fn install() -> Result<(), String> {
    // Every signal blocked while the handler runs: none can interrupt the holder of a
    // region's lock on its own thread.
    INSTALLED.install(handler, true)
}

/// A region registered with the handler; unregistered on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    index: usize,
    shared: Box<Shared>,
}

impl Registration {
    /// Register `shared` (its pages inaccessible until faulted in). Fails if the handler
    /// cannot be installed or every entry of its table is taken.
    pub(crate) fn new(shared: Box<Shared>) -> Result<Registration, String> {
        install()?;
        let _claim = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
        let (start, end) = (shared.start, shared.start + shared.pages as usize * PAGE);
        // Two registrations over one address range would resolve faults with the wrong
        // region's page table (a region's range is reused once its reservation is gone):
        // refuse rather than corrupt.
        if TABLE.iter().any(|e| {
            let s = e.start.load(Ordering::Acquire);
            s != 0 && s < end && start < e.end.load(Ordering::Acquire)
        }) {
            return Err("address range already registered to another virtual region".into());
        }
        let index = TABLE
            .iter()
            .position(|e| e.start.load(Ordering::Acquire) == 0)
            .ok_or_else(|| format!("more than {OPEN_REGIONS_MAX} virtual regions open"))?;
        let e = &TABLE[index];
        let ptr: *const Shared = &*shared;
        e.shared.store(ptr.cast_mut(), Ordering::Release);
        e.end.store(
            shared.start + shared.pages as usize * PAGE,
            Ordering::Release,
        );
        e.start.store(shared.start, Ordering::Release);
        Ok(Registration { index, shared })
    }

    /// The registered state.
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _claim = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
        // Wait for a fault in progress (none should be: the region is being dropped).
        let _guard = SpinGuard::lock(&self.shared.lock);
        let e = &TABLE[self.index];
        e.start.store(0, Ordering::Release);
        e.end.store(0, Ordering::Release);
        e.shared.store(null_mut(), Ordering::Release);
    }
}
