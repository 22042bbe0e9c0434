//! Selective Persistence Flushing (SPF): dirty tracking behind every sync point.
//!
//! A sync point ([`crate::Pool::msync`], [`crate::Pool::gmsync`]) names ranges that must be
//! durable. Without tracking it flushes every cache line of them, which costs the same for a
//! 1 GiB range whether one byte or all of it changed (13-19 ms on this machine). With
//! tracking it flushes only what changed since the previous sync point:
//!
//! * **Tier 1, writes through mnemo's API** ([`crate::Pool::write`],
//!   [`crate::Pool::copy_nodrain`], [`crate::Pool::write`],
//!   [`crate::Pool::mark_dirty`]): a two-level bitmap ([`DirtyBitmap`]), one bit per 64 B
//!   line (a `u64` per 4 KiB page) plus one summary bit per page. Marking is one atomic OR
//!   per page touched; no faults.
//! * **Tier 2, raw stores into the mapping** (code that writes through [`crate::Pool::ptr`]):
//!   userfaultfd write-protect in asynchronous mode (`UFFD_FEATURE_WP_ASYNC`, Linux 6.7+):
//!   the first store to a protected page takes a fault that the kernel resolves by itself
//!   (about 1.2 us here), marking the page written. A sync point asks the kernel for the
//!   written pages of its ranges with the `PAGEMAP_SCAN` ioctl, which re-protects each page
//!   atomically as it reports it (`PM_SCAN_WP_MATCHING`), so a store racing the scan lands
//!   either in this sync point or in the next one, never in neither.
//!
//! Tier 2 falls back, detected at run time, to write faults on read-only pages
//! ([`RawMethod::Mprotect`], pools up to 16 MiB) and otherwise to flushing everything
//! ([`RawMethod::FlushAll`]) when the kernel lacks the interfaces
//! (`MNEMO_SPF_FALLBACK=mprotect|flush-all` forces one). The fallback is announced in the log
//! and by [`crate::Pool::tracking`]; it is never an error.
//!
//! A range whose narrowed flush would cost more than a linear sweep is flushed whole:
//! `dirty lines + runs * limits::SPF_RUN_COST_LINES > lines of the range` (the measured
//! break-even; `MNEMO_SPF_NARROW_ALWAYS=1` disables the switch, for the benchmark).
//!
//! ## Modes ([`Tracking`])
//! Off by default: tracking changes what a sync point flushes, so it is only correct when
//! every store is seen, and a program must say so. `Api` promises that every store into the
//! pool goes through the marking API (the bitmap is then enough); `Raw` tracks raw stores
//! too. With tracking off the only cost is one relaxed load and branch per write and per
//! sync point. `MNEMO_SPF=off|api|raw` sets the mode of pools opened by [`crate::Pool::open`]
//! and [`crate::Pool::create`].
//!
//! ## Invariants
//! * A line whose store completed before a sync point began is flushed by that sync point or
//!   by an earlier one that collected it after the store. Writers store, then mark with an
//!   atomic read-modify-write (a full barrier on x86: the data leaves the store buffer
//!   before the bit is visible); collectors clear the summary bit, then take the line bits.
//! * A summary bit is never clear while a line bit of its page is set (once writers are
//!   quiet): writers set the summary after the line; collectors put back the summary of a
//!   page whose lines outside the collected range are still set.
//! * Sync points of a tracked pool are serialized: a collector that took a bit must finish
//!   its flush before another sync point may report success.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::limits::{
    CACHE_LINE, PAGE_SIZE, SPF_CHUNK_BYTES, SPF_CHUNK_COST_PAGES, SPF_CHUNK_POOL_MAX,
    SPF_MPROTECT_BYTES_MAX, SPF_RUN_COST_LINES, SPF_SCAN_REGIONS,
};
use crate::sync::ByteRange;

/// Which stores a pool's sync points track.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Tracking {
    /// No tracking: sync points flush whole ranges.
    Off,
    /// Every store goes through mnemo's API (the program promises): the bitmap narrows.
    Api,
    /// Raw stores into the mapping are tracked too (userfaultfd), where the kernel allows.
    Raw,
}

impl Tracking {
    /// Parse `off`, `api` or `raw` (as in `MNEMO_SPF`).
    pub fn parse(text: &str) -> Option<Tracking> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "" => Some(Tracking::Off),
            "api" | "bitmap" => Some(Tracking::Api),
            "raw" | "uffd" | "on" | "1" => Some(Tracking::Raw),
            _ => None,
        }
    }

    /// The mode named by `MNEMO_SPF`, if set and understood.
    pub fn from_env() -> Option<Tracking> {
        let text = std::env::var("MNEMO_SPF").ok()?;
        let mode = Tracking::parse(&text);
        if mode.is_none() {
            tracing::warn!("MNEMO_SPF={text:?} is not one of off, api, raw; tracking stays off");
        }
        mode
    }
}

/// How raw stores into the mapping are tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RawMethod {
    /// Not tracked: the pool is in [`Tracking::Off`] or [`Tracking::Api`] mode.
    None,
    /// userfaultfd asynchronous write-protect + `PAGEMAP_SCAN` (per 4 KiB page).
    UffdWpAsync,
    /// Fallback for pools up to `limits::SPF_MPROTECT_BYTES_MAX`: pages mapped read-only,
    /// the first store to each faults into a SIGSEGV handler that records it.
    Mprotect,
    /// Fallback: sync points flush whole ranges.
    FlushAll,
}

impl RawMethod {
    /// Short name for `mnemo pool info` and logs.
    pub fn name(self) -> &'static str {
        match self {
            RawMethod::None => "none",
            RawMethod::UffdWpAsync => "uffd-wp-async+pagemap-scan",
            RawMethod::Mprotect => "mprotect+sigsegv",
            RawMethod::FlushAll => "flush-all",
        }
    }
}

/// What a pool's sync points use, for `mnemo pool info`, INFO and logs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TrackingInfo {
    /// The mode asked for.
    pub mode: Tracking,
    /// How raw stores are tracked.
    pub raw: RawMethod,
    /// Why (what detection found, or which variable forced it).
    pub reason: String,
}

impl TrackingInfo {
    /// The state of a pool without tracking.
    pub fn off() -> TrackingInfo {
        TrackingInfo {
            mode: Tracking::Off,
            raw: RawMethod::None,
            reason: "tracking off (sync points flush whole ranges)".into(),
        }
    }
}

/// Counters of the tracker.
#[derive(Debug, Default)]
pub struct TrackStats {
    /// Bytes the sync points named.
    pub named_bytes: AtomicU64,
    /// Bytes the sync points flushed after narrowing.
    pub flushed_bytes: AtomicU64,
    /// Ranges flushed whole because more than the break-even share was dirty.
    pub whole_ranges: AtomicU64,
    /// `PAGEMAP_SCAN` calls.
    pub scans: AtomicU64,
    /// Pages the scans reported written.
    pub scanned_dirty_pages: AtomicU64,
    /// Times the chunk hints were switched off or back on.
    pub hint_switches: AtomicU64,
}

/// A copy of [`TrackStats`] for reports (the key-value server's INFO, logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TrackReport {
    /// Bytes the sync points named.
    pub named_bytes: u64,
    /// Bytes the sync points flushed after narrowing.
    pub flushed_bytes: u64,
    /// Ranges flushed whole by the break-even rule (or a fallback).
    pub whole_ranges: u64,
    /// `PAGEMAP_SCAN` calls.
    pub scans: u64,
    /// Pages the scans reported written.
    pub scanned_dirty_pages: u64,
    /// Times the chunk hints were switched off or back on.
    pub hint_switches: u64,
}

impl TrackStats {
    /// The counters now.
    pub fn report(&self) -> TrackReport {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TrackReport {
            named_bytes: get(&self.named_bytes),
            flushed_bytes: get(&self.flushed_bytes),
            whole_ranges: get(&self.whole_ranges),
            scans: get(&self.scans),
            scanned_dirty_pages: get(&self.scanned_dirty_pages),
            hint_switches: get(&self.hint_switches),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tier 1: the bitmap.

/// Zero-filled anonymous memory viewed as atomic words; `MAP_NORESERVE`, so a bitmap sized
/// for a pool's whole address-space reservation costs memory only where it is touched.
#[derive(Debug)]
struct Words {
    ptr: std::ptr::NonNull<AtomicU64>,
    len: usize,
}

// SAFETY: the words are atomics; the struct owns its mapping and shares it only through
// `&AtomicU64`.
unsafe impl Send for Words {}
// SAFETY: as above: all access goes through atomic operations.
unsafe impl Sync for Words {}

impl Words {
    fn new(len: usize) -> std::io::Result<Words> {
        let bytes = len.max(1).checked_mul(8).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "bitmap too large")
        })?;
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choosing
        // aliases nothing.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                bytes,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::NORESERVE,
            )
        }?;
        let ptr = std::ptr::NonNull::new(ptr.cast::<AtomicU64>())
            .ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        Ok(Words {
            ptr,
            len: len.max(1),
        })
    }

    #[inline(always)]
    fn get(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len, "bitmap word {i} of {}", self.len);
        // SAFETY: `i` is in bounds (asserted); the mapping is zero-filled, 8-byte aligned
        // (page aligned) and lives as long as `self`; AtomicU64 has the layout of u64.
        unsafe { &*self.ptr.as_ptr().add(i) }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        // SAFETY: we own the mapping since `new`; no reference outlives `self`.
        let result = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len * 8) };
        if let Err(err) = result {
            tracing::error!("munmap of a dirty bitmap failed: {err}");
        }
    }
}

const LINES_PER_PAGE: u64 = PAGE_SIZE / CACHE_LINE;
const _: () = assert!(LINES_PER_PAGE == 64, "one u64 of line bits per page");

/// The two-level dirty bitmap of tier 1: one bit per 64 B line (one `u64` per page) and one
/// summary bit per page. Several threads may mark at once; collection is serialized by the
/// owner ([`Tracker`]).
#[derive(Debug)]
pub struct DirtyBitmap {
    lines: Words,
    summary: Words,
    capacity: u64,
}

/// Bits `first..=last` of a word.
#[inline(always)]
fn bit_span(first: u64, last: u64) -> u64 {
    debug_assert!(first <= last && last < 64);
    (u64::MAX >> (63 - last)) & (u64::MAX << first)
}

impl DirtyBitmap {
    /// A bitmap for offsets `0..capacity`.
    pub fn new(capacity: u64) -> std::io::Result<DirtyBitmap> {
        let pages = capacity.div_ceil(PAGE_SIZE);
        let to_usize = |n: u64| {
            usize::try_from(n).map_err(|_| std::io::Error::other("bitmap exceeds address space"))
        };
        Ok(DirtyBitmap {
            lines: Words::new(to_usize(pages)?)?,
            summary: Words::new(to_usize(pages.div_ceil(64))?)?,
            capacity,
        })
    }

    /// Offsets covered.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Mark `offset..offset+len` dirty. Call after the stores (the atomic OR orders them).
    #[inline]
    pub fn mark(&self, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = offset.saturating_add(len).min(self.capacity);
        if offset >= end {
            return;
        }
        let first_line = offset / CACHE_LINE;
        let last_line = (end - 1) / CACHE_LINE;
        let mut line = first_line;
        while line <= last_line {
            let page = line / LINES_PER_PAGE;
            let page_last = (page + 1) * LINES_PER_PAGE - 1;
            let upto = last_line.min(page_last);
            let bits = bit_span(line % LINES_PER_PAGE, upto % LINES_PER_PAGE);
            self.mark_page(page, bits);
            line = upto + 1;
        }
    }

    #[inline(always)]
    fn mark_page(&self, page: u64, bits: u64) {
        // Always a read-modify-write: a plain load that found the bits set could be ordered
        // before our data stores (x86 lets loads pass stores) while a collector takes the
        // bits and flushes the old data. The RMW drains the store buffer first.
        self.lines
            .get(page as usize)
            .fetch_or(bits, Ordering::SeqCst);
        let word = self.summary.get((page / 64) as usize);
        let bit = 1u64 << (page % 64);
        // After the line RMW, a load suffices: if it sees the summary bit set, the bit was
        // set before any collector cleared it, and that collector takes our line bits after.
        if word.load(Ordering::SeqCst) & bit == 0 {
            word.fetch_or(bit, Ordering::SeqCst);
        }
    }

    /// Mark whole pages `first..first+count` dirty (tier 2 results).
    fn mark_pages(&self, first: u64, count: u64) {
        for page in first..first + count {
            if page * PAGE_SIZE >= self.capacity {
                break;
            }
            self.mark_page(page, u64::MAX);
        }
    }

    /// Take the dirty lines of `range` (clearing them) and report each run of consecutive
    /// dirty lines to `out` as a byte range clamped to `range`. Returns the dirty bytes.
    pub fn collect(&self, range: ByteRange, out: &mut dyn FnMut(ByteRange)) -> u64 {
        let end = range.end().min(self.capacity);
        if range.len == 0 || range.offset >= end {
            return 0;
        }
        let first_line = range.offset / CACHE_LINE;
        let last_line = (end - 1) / CACHE_LINE;
        let first_page = first_line / LINES_PER_PAGE;
        let last_page = last_line / LINES_PER_PAGE;
        let mut run: Option<(u64, u64)> = None; // lines [start, end)
        let mut dirty_lines = 0u64;
        let mut emit = |run: &mut Option<(u64, u64)>| {
            if let Some((a, b)) = run.take() {
                let start = (a * CACHE_LINE).max(range.offset);
                let stop = (b * CACHE_LINE).min(end);
                out(ByteRange::new(start, stop - start));
            }
        };
        let mut word_index = first_page / 64;
        while word_index <= last_page / 64 {
            let lo = if word_index == first_page / 64 {
                first_page % 64
            } else {
                0
            };
            let hi = if word_index == last_page / 64 {
                last_page % 64
            } else {
                63
            };
            let span = bit_span(lo, hi);
            let word = self.summary.get(word_index as usize);
            let mut pages = if word.load(Ordering::SeqCst) & span == 0 {
                0
            } else {
                word.fetch_and(!span, Ordering::SeqCst) & span
            };
            while pages != 0 {
                let bit = u64::from(pages.trailing_zeros());
                pages &= pages - 1;
                let page = word_index * 64 + bit;
                let page_first = page * LINES_PER_PAGE;
                let a = first_line.max(page_first) - page_first;
                let b = last_line.min(page_first + LINES_PER_PAGE - 1) - page_first;
                let mask = bit_span(a, b);
                let old = self
                    .lines
                    .get(page as usize)
                    .fetch_and(!mask, Ordering::SeqCst);
                if old & !mask != 0 {
                    // Lines outside the range stay dirty: keep the page in the summary.
                    word.fetch_or(1 << bit, Ordering::SeqCst);
                }
                let mut taken = old & mask;
                dirty_lines += u64::from(taken.count_ones());
                while taken != 0 {
                    let i = u64::from(taken.trailing_zeros());
                    let ones = u64::from((taken >> i).trailing_ones());
                    let start = page_first + i;
                    let stop = start + ones;
                    match &mut run {
                        Some((_, e)) if *e == start => *e = stop,
                        _ => {
                            emit(&mut run);
                            run = Some((start, stop));
                        }
                    }
                    taken &= if i + ones >= 64 {
                        0
                    } else {
                        !bit_span(0, i + ones - 1)
                    };
                }
            }
            word_index += 1;
        }
        emit(&mut run);
        dirty_lines * CACHE_LINE
    }

    /// Forget every mark in `range` (after the range was flushed whole).
    pub fn clear(&self, range: ByteRange) {
        self.collect(range, &mut |_| {});
    }
}

// ---------------------------------------------------------------------------------------
// Tier 2: userfaultfd asynchronous write-protect + PAGEMAP_SCAN.

/// `struct uffdio_api` (linux/userfaultfd.h).
#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}
/// `struct uffdio_range`.
#[repr(C)]
#[derive(Default)]
struct UffdioRange {
    start: u64,
    len: u64,
}
/// `struct uffdio_register`.
#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}
/// `struct uffdio_writeprotect`.
#[repr(C)]
#[derive(Default)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}
/// `struct pm_scan_arg` (linux/fs.h, 6.7+).
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}
/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const _: () = assert!(std::mem::size_of::<UffdioApi>() == 24);
const _: () = assert!(std::mem::size_of::<UffdioRegister>() == 32);
const _: () = assert!(std::mem::size_of::<UffdioWriteprotect>() == 24);
const _: () = assert!(std::mem::size_of::<PmScanArg>() == 96);
const _: () = assert!(std::mem::size_of::<PageRegion>() == 24);

/// `_IOWR(type, nr, size)`.
const fn iowr(kind: u8, nr: u8, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | ((kind as u64) << 8) | nr as u64
}
const UFFD_API: u64 = 0xAA;
const UFFDIO_API: u64 = iowr(0xAA, 0x3F, std::mem::size_of::<UffdioApi>());
const UFFDIO_REGISTER: u64 = iowr(0xAA, 0x00, std::mem::size_of::<UffdioRegister>());
const UFFDIO_WRITEPROTECT: u64 = iowr(0xAA, 0x06, std::mem::size_of::<UffdioWriteprotect>());
const PAGEMAP_SCAN: u64 = iowr(b'f', 16, std::mem::size_of::<PmScanArg>());
const _: () = assert!(UFFDIO_API == 0xC018_AA3F);
const _: () = assert!(UFFDIO_REGISTER == 0xC020_AA00);
const _: () = assert!(PAGEMAP_SCAN == 0xC060_6610);

const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFD_USER_MODE_ONLY: u32 = 1;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

/// `ioctl(fd, request, arg)`, returning the non-negative result or the errno.
///
/// # Safety
/// `arg` must point to the struct `request` expects, valid for reads and writes.
unsafe fn ioctl_raw<T>(fd: &OwnedFd, request: u64, arg: *mut T) -> std::io::Result<i64> {
    // SAFETY: forwarded: `arg` matches `request`; `fd` is an open descriptor we own.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(i64::from(r))
    }
}

/// An asynchronous write-protect tracker over a part of this process's address space.
#[derive(Debug)]
struct Uffd {
    uffd: OwnedFd,
    pagemap: OwnedFd,
    /// The scan's result vector, allocated once (12 KiB; zeroing it at every sync point
    /// cost more than the scan of a small range).
    regions: Mutex<Vec<PageRegion>>,
}

impl Uffd {
    /// Open the descriptors and negotiate the features; fails on kernels without them.
    fn open() -> Result<Uffd, String> {
        use rustix::mm::UserfaultfdFlags;
        let flags = UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::NONBLOCK;
        // SAFETY: creating the descriptor has no preconditions; we only use it for
        // write-protect tracking of ranges this process owns.
        let uffd = match unsafe { rustix::mm::userfaultfd(flags) } {
            Ok(fd) => fd,
            // Without CAP_SYS_PTRACE and vm.unprivileged_userfaultfd=0, user-mode-only
            // descriptors are still allowed (5.11+); write faults from user space suffice.
            Err(rustix::io::Errno::PERM) => {
                let user = flags | UserfaultfdFlags::from_bits_retain(UFFD_USER_MODE_ONLY);
                // SAFETY: as above.
                unsafe { rustix::mm::userfaultfd(user) }.map_err(|e| format!("userfaultfd: {e}"))?
            }
            Err(e) => return Err(format!("userfaultfd: {e}")),
        };
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_WP_ASYNC
                | UFFD_FEATURE_WP_UNPOPULATED
                | UFFD_FEATURE_WP_HUGETLBFS_SHMEM,
            ioctls: 0,
        };
        // SAFETY: `api` is a live uffdio_api.
        unsafe { ioctl_raw(&uffd, UFFDIO_API, &mut api) }
            .map_err(|e| format!("UFFDIO_API with WP_ASYNC (Linux 6.7+): {e}"))?;
        let pagemap = rustix::fs::open(
            "/proc/self/pagemap",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("/proc/self/pagemap: {e}"))?;
        let tracker = Uffd {
            uffd,
            pagemap,
            regions: Mutex::new(vec![PageRegion::default(); SPF_SCAN_REGIONS]),
        };
        // Probe PAGEMAP_SCAN on an empty range: old kernels answer ENOTTY.
        let mut one = [PageRegion::default(); 1];
        tracker
            .scan_raw(0, 0, false, &mut one)
            .map_err(|e| format!("PAGEMAP_SCAN (Linux 6.7+): {e}"))?;
        Ok(tracker)
    }

    /// Register `addr..addr+len` for write-protect tracking and protect it.
    fn track(&self, addr: u64, len: u64) -> std::io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        if let Ok(len_usize) = usize::try_from(len) {
            // SAFETY: advice on our own mapping; NOHUGEPAGE changes no contents. Tracking
            // is per 4 KiB page, and a protected huge page would be split at the first store.
            let _ = unsafe {
                rustix::mm::madvise(
                    addr as *mut _,
                    len_usize,
                    rustix::mm::Advice::LinuxNoHugepage,
                )
            };
        }
        let mut reg = UffdioRegister {
            range: UffdioRange { start: addr, len },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: `reg` is a live uffdio_register naming a range of our own mapping.
        unsafe { ioctl_raw(&self.uffd, UFFDIO_REGISTER, &mut reg) }?;
        let mut wp = UffdioWriteprotect {
            range: UffdioRange { start: addr, len },
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        // SAFETY: `wp` is a live uffdio_writeprotect over the range just registered.
        unsafe { ioctl_raw(&self.uffd, UFFDIO_WRITEPROTECT, &mut wp) }?;
        Ok(())
    }

    /// One `PAGEMAP_SCAN` call over `start..end`; returns (regions filled, walk end).
    fn scan_raw(
        &self,
        start: u64,
        end: u64,
        reprotect: bool,
        vec: &mut [PageRegion],
    ) -> std::io::Result<(usize, u64)> {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: if reprotect {
                PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC
            } else {
                0
            },
            start,
            end,
            vec: vec.as_mut_ptr() as u64,
            vec_len: vec.len() as u64,
            // The kernel's fast path: ask for the written category alone, return it alone.
            category_mask: PAGE_IS_WRITTEN,
            return_mask: PAGE_IS_WRITTEN,
            ..PmScanArg::default()
        };
        // SAFETY: `arg` is a live pm_scan_arg whose vec points to `vec.len()` writable
        // page_region structs.
        let n = unsafe { ioctl_raw(&self.pagemap, PAGEMAP_SCAN, &mut arg) }?;
        let n = usize::try_from(n).unwrap_or(0).min(vec.len());
        Ok((n, arg.walk_end))
    }

    /// Report (and re-protect) the written pages of `start..end` (page aligned) to `out`
    /// as (address, length) runs. Returns the written pages.
    fn scan(&self, start: u64, end: u64, out: &mut dyn FnMut(u64, u64)) -> std::io::Result<u64> {
        let mut vec = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        let mut at = start;
        let mut pages = 0;
        while at < end {
            let (n, walk_end) = self.scan_raw(at, end, true, &mut vec[..])?;
            for region in &vec[..n] {
                let a = region.start.max(at);
                let b = region.end.min(end);
                if b > a {
                    pages += (b - a) / PAGE_SIZE;
                    out(a, b - a);
                }
            }
            if n < vec.len() || walk_end <= at || walk_end >= end {
                break;
            }
            at = walk_end;
        }
        Ok(pages)
    }
}

/// Detect whether raw-store tracking works in this process, without tracking anything.
/// Returns the method and why.
pub fn detect() -> (RawMethod, String) {
    if let Some((method, why)) = forced_fallback() {
        return (method, why);
    }
    match Uffd::open() {
        Ok(_) => (
            RawMethod::UffdWpAsync,
            "userfaultfd WP_ASYNC and PAGEMAP_SCAN available".into(),
        ),
        Err(why) => (
            RawMethod::Mprotect,
            format!("{why}; mprotect + SIGSEGV for pools up to 16 MiB, flush-all above"),
        ),
    }
}

/// The fallback `MNEMO_SPF_FALLBACK` forces, if any.
fn forced_fallback() -> Option<(RawMethod, String)> {
    let v = std::env::var("MNEMO_SPF_FALLBACK").ok()?;
    match v.trim() {
        "flush-all" | "1" => Some((
            RawMethod::FlushAll,
            "MNEMO_SPF_FALLBACK=flush-all (forced)".into(),
        )),
        "mprotect" => Some((
            RawMethod::Mprotect,
            "MNEMO_SPF_FALLBACK=mprotect (forced)".into(),
        )),
        other => {
            tracing::warn!("MNEMO_SPF_FALLBACK={other:?} is not flush-all or mprotect; ignored");
            None
        }
    }
}

/// The optional chunk hints over userfaultfd tracking, and a note for the reason.
fn chunk_hints(
    base: u64,
    len: u64,
    options: TrackerOptions,
) -> (Option<crate::segv::Region>, String) {
    let wanted =
        options.chunk_hints || std::env::var("MNEMO_SPF_CHUNKS").is_ok_and(|v| v.trim() == "1");
    if !wanted {
        return (None, String::new());
    }
    if len > SPF_CHUNK_POOL_MAX {
        return (
            None,
            format!("; no chunk hints above {SPF_CHUNK_POOL_MAX} bytes"),
        );
    }
    let region = usize::try_from(base)
        .ok()
        .zip(usize::try_from(len).ok())
        .ok_or_else(|| "address out of range".to_string())
        .and_then(|(b, l)| crate::segv::Region::with_unit(b, l, SPF_CHUNK_BYTES as usize));
    match region {
        Ok(region) => (
            Some(region),
            format!(" + {} KiB chunk hints (mprotect)", SPF_CHUNK_BYTES >> 10),
        ),
        Err(e) => (None, format!("; chunk hints unavailable: {e}")),
    }
}

/// Raw tracking as chosen for one mapping.
struct RawChoice {
    method: RawMethod,
    reason: String,
    uffd: Option<Uffd>,
    segv: Option<crate::segv::Region>,
    chunks: Option<crate::segv::Region>,
}

fn choose_raw(base: u64, len: u64, options: TrackerOptions) -> RawChoice {
    let fallback = options.fallback;
    let flush_all = |reason: String| RawChoice {
        method: RawMethod::FlushAll,
        reason,
        uffd: None,
        segv: None,
        chunks: None,
    };
    let mprotect = |why: String| {
        if len > SPF_MPROTECT_BYTES_MAX {
            return flush_all(format!(
                "{why}; the pool ({len} bytes) is too large for mprotect tracking \
                 (at most {SPF_MPROTECT_BYTES_MAX}); flushing whole ranges"
            ));
        }
        let region = usize::try_from(base)
            .ok()
            .zip(usize::try_from(len).ok())
            .ok_or_else(|| "address out of range".to_string())
            .and_then(|(b, l)| crate::segv::Region::new(b, l));
        match region {
            Ok(region) => RawChoice {
                method: RawMethod::Mprotect,
                reason: format!("{why}; mprotect + SIGSEGV"),
                uffd: None,
                segv: Some(region),
                chunks: None,
            },
            Err(e) => flush_all(format!(
                "{why}; mprotect tracking: {e}; flushing whole ranges"
            )),
        }
    };
    let forced = match fallback {
        Some(method) => Some((method, "fallback forced by option".to_string())),
        None => forced_fallback(),
    };
    match forced {
        Some((RawMethod::Mprotect, why)) => return mprotect(why),
        Some((_, why)) => return flush_all(why),
        None => {}
    }
    match Uffd::open() {
        Ok(u) => match u.track(base, len) {
            Ok(()) => {
                let (chunks, note) = chunk_hints(base, len, options);
                RawChoice {
                    method: RawMethod::UffdWpAsync,
                    reason: format!("userfaultfd WP_ASYNC + PAGEMAP_SCAN{note}"),
                    uffd: Some(u),
                    segv: None,
                    chunks,
                }
            }
            Err(e) => mprotect(format!("UFFDIO_REGISTER/WRITEPROTECT: {e}")),
        },
        Err(why) => mprotect(why),
    }
}

// ---------------------------------------------------------------------------------------
// The tracker a pool owns.

/// Dirty tracking of one pool: the bitmap, the userfaultfd tracker when raw stores are
/// tracked, and the lock that serializes sync points.
#[derive(Debug)]
pub struct Tracker {
    info: TrackingInfo,
    bitmap: DirtyBitmap,
    uffd: Option<Uffd>,
    /// The mprotect fallback's region.
    segv: Option<crate::segv::Region>,
    /// Chunk hints over userfaultfd tracking: which chunks were stored to.
    chunks: Option<crate::segv::Region>,
    /// Whether sync points use the chunk hints now (switched by the break-even).
    hints_on: AtomicBool,
    /// Raw tracking lost track of some pages (a failed re-protect): flush whole from now on.
    broken: AtomicBool,
    base: u64,
    /// Never flush a range whole (benchmarks of the break-even).
    narrow_always: bool,
    /// Bytes from offset 0 registered with userfaultfd.
    tracked_len: AtomicU64,
    /// Held across collect + flush + fence of a sync point; holds the sync point's buffer of
    /// narrowed ranges, reused from one to the next.
    pub(crate) sync_lock: Mutex<Vec<ByteRange>>,
    stats: TrackStats,
}

/// Options of [`Tracker::new`].
#[derive(Clone, Copy, Debug)]
pub struct TrackerOptions {
    /// The mode.
    pub mode: Tracking,
    /// Skip detection and use this method for raw stores: [`RawMethod::FlushAll`] or
    /// [`RawMethod::Mprotect`] (as `MNEMO_SPF_FALLBACK`); tests simulate old kernels so.
    pub fallback: Option<RawMethod>,
    /// With userfaultfd tracking, also write-protect chunks of `limits::SPF_CHUNK_BYTES`
    /// with mprotect so a sync point scans only the chunks stored to (`MNEMO_SPF_CHUNKS=1`;
    /// pools up to `limits::SPF_CHUNK_POOL_MAX`): a cost flat in the size of the range
    /// (≈21-31 us from 64 B to 1 GiB here) instead of the scan's ≈2 ns per page, but a
    /// SIGSEGV and two mprotects (≈20 us) per chunk first stored to in an epoch, so it loses
    /// when stores scatter over many chunks.
    pub chunk_hints: bool,
}

impl Tracker {
    /// Track a mapping at `base` with `len` bytes mapped now, growable to `capacity`.
    /// Raw tracking that the kernel refuses falls back to flush-all, with a log message.
    pub fn new(
        base: *const u8,
        len: u64,
        capacity: u64,
        options: TrackerOptions,
    ) -> std::io::Result<Tracker> {
        let bitmap = DirtyBitmap::new(capacity)?;
        let choice = match options.mode {
            Tracking::Off | Tracking::Api => RawChoice {
                method: RawMethod::None,
                reason: if options.mode == Tracking::Off {
                    "tracking off".to_string()
                } else {
                    "api: stores through mnemo's API mark a line bitmap".to_string()
                },
                uffd: None,
                segv: None,
                chunks: None,
            },
            Tracking::Raw => choose_raw(base as u64, len, options),
        };
        let RawChoice {
            method: raw,
            reason,
            uffd,
            segv,
            chunks,
        } = choice;
        if raw == RawMethod::FlushAll {
            tracing::warn!("dirty tracking of raw stores unavailable: {reason}");
        } else {
            tracing::info!(raw = raw.name(), "dirty tracking: {reason}");
        }
        Ok(Tracker {
            info: TrackingInfo {
                mode: options.mode,
                raw,
                reason,
            },
            bitmap,
            tracked_len: AtomicU64::new(match (&uffd, &segv) {
                (Some(_), _) => len,
                (None, Some(region)) => region.len() as u64,
                (None, None) => 0,
            }),
            uffd,
            segv,
            chunks,
            hints_on: AtomicBool::new(true),
            broken: AtomicBool::new(false),
            base: base as u64,
            narrow_always: std::env::var("MNEMO_SPF_NARROW_ALWAYS").is_ok_and(|v| v.trim() == "1"),
            sync_lock: Mutex::new(Vec::new()),
            stats: TrackStats::default(),
        })
    }

    /// What is in use.
    pub fn info(&self) -> &TrackingInfo {
        &self.info
    }

    /// Counters.
    pub fn stats(&self) -> &TrackStats {
        &self.stats
    }

    /// The bitmap (tier 1).
    pub fn bitmap(&self) -> &DirtyBitmap {
        &self.bitmap
    }

    /// Mark a range written through the API.
    #[inline]
    pub fn mark(&self, offset: u64, len: u64) {
        self.bitmap.mark(offset, len);
    }

    /// The mapping grew from `old_len` to `new_len`: track the new part.
    pub fn grew(&self, old_len: u64, new_len: u64) -> std::io::Result<()> {
        if let Some(uffd) = &self.uffd {
            uffd.track(self.base + old_len, new_len - old_len)?;
            self.tracked_len.fetch_max(new_len, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Switch the chunk hints back on: forget the chunk bits, write-protect every chunk, then
    /// scan the whole chunk region for the stores made while the hints were off (a store
    /// after the protection faults and sets its chunk's bit). Returns false if tracking lost
    /// pages (the caller flushes whole); a failed protection leaves the hints off, which is
    /// safe (plain scans).
    fn rearm_hints(&self, uffd: &Uffd, chunks: &crate::segv::Region) -> bool {
        if let Err(e) = chunks.rearm() {
            tracing::warn!("re-protecting chunks failed: {e}; chunk hints stay off");
            return true;
        }
        self.stats.scans.fetch_add(1, Ordering::Relaxed);
        let end = self.base + chunks.len() as u64;
        let scanned = uffd.scan(self.base, end, &mut |addr, len| {
            let offset = addr - self.base;
            self.bitmap.mark_pages(offset / PAGE_SIZE, len / PAGE_SIZE);
        });
        if let Err(e) = scanned {
            tracing::error!("PAGEMAP_SCAN failed: {e}; flushing whole ranges from now on");
            self.broken.store(true, Ordering::Release);
            return false;
        }
        self.hints_on.store(true, Ordering::Release);
        self.stats.hint_switches.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Narrow `range` to what must be flushed, reporting the ranges to `out`. Clears what it
    /// reports. The caller holds `sync_lock` until its flush and fence are done.
    pub fn narrow(&self, range: ByteRange, out: &mut dyn FnMut(ByteRange)) {
        self.stats
            .named_bytes
            .fetch_add(range.len, Ordering::Relaxed);
        let whole = |tracker: &Tracker, out: &mut dyn FnMut(ByteRange)| {
            tracker.bitmap.clear(range);
            tracker
                .stats
                .flushed_bytes
                .fetch_add(range.len, Ordering::Relaxed);
            out(range);
        };
        // The mutant takes the bitmap before the scan has added to it: pages the scan finds
        // wait for the next sync point, which breaks the contract.
        let early = crate::mutant::active("spf.collect_before_scan");
        let mut runs = Vec::new();
        let mut dirty = 0;
        if early {
            dirty = self.bitmap.collect(range, &mut |r| runs.push(r));
        }
        if self.info.mode == Tracking::Raw && self.broken.load(Ordering::Acquire) {
            return whole(self, out);
        }
        if self.info.mode == Tracking::Raw && self.uffd.is_none() {
            let tracked = self.tracked_len.load(Ordering::Acquire);
            let Some(region) = self.segv.as_ref().filter(|_| range.end() <= tracked) else {
                // Raw stores outside tracking (flush-all fallback, or beyond the tracked part).
                return whole(self, out);
            };
            let first = (range.offset / PAGE_SIZE) as usize;
            let count = (range.end().div_ceil(PAGE_SIZE) - range.offset / PAGE_SIZE) as usize;
            let taken = region.take(first, count, &mut |page, pages| {
                self.bitmap.mark_pages(page as u64, pages as u64);
            });
            match taken {
                Ok(pages) => {
                    self.stats
                        .scanned_dirty_pages
                        .fetch_add(pages, Ordering::Relaxed);
                }
                Err(e) => {
                    // Pages whose bits were taken may be writable and unrecorded now.
                    tracing::error!(
                        "mprotect failed: {e}; sync points flush whole ranges from now on"
                    );
                    self.broken.store(true, Ordering::Release);
                    return whole(self, out);
                }
            }
        }
        // Chunks whose hints would cost more than the scan they save: range pages / cost.
        let chunk_budget = (range.len.div_ceil(PAGE_SIZE) / SPF_CHUNK_COST_PAGES).max(1);
        let hinted = self
            .chunks
            .as_ref()
            .filter(|_| self.hints_on.load(Ordering::Acquire));
        if let (Some(uffd), Some(chunks)) = (&self.uffd, hinted) {
            if range.end() > chunks.len() as u64 {
                // Grown beyond the chunk-protected part: stores there set no chunk bit.
                return whole(self, out);
            }
            let unit = chunks.unit() as u64;
            let first = range.offset / unit;
            let count = range.end().div_ceil(unit) - first;
            let mut hot = Vec::new();
            // Chunks come back write-protected before they are scanned: a store after that
            // faults and marks its chunk for the next sync point.
            let taken = chunks.take(first as usize, count as usize, &mut |a, n| {
                hot.push((a as u64, n as u64));
            });
            if let Err(e) = taken {
                tracing::error!("mprotect failed: {e}; sync points flush whole ranges from now on");
                self.broken.store(true, Ordering::Release);
                return whole(self, out);
            }
            let limit = chunks.len() as u64;
            if hot.iter().map(|&(_, n)| n).sum::<u64>() > chunk_budget {
                // Stores scatter over too many chunks: plain scans from the next sync point,
                // and no more chunk faults until the hints come back.
                self.hints_on.store(false, Ordering::Release);
                if let Err(e) = chunks.disarm() {
                    tracing::warn!("unprotecting chunks failed: {e}; they fault until re-armed");
                }
                self.stats.hint_switches.fetch_add(1, Ordering::Relaxed);
            }
            for (a, n) in hot {
                let start = a * unit;
                let end = ((a + n) * unit).min(limit);
                self.stats.scans.fetch_add(1, Ordering::Relaxed);
                // Whole chunks are scanned: pages outside the range go into the bitmap and
                // wait there for the sync point that names them.
                let scanned = uffd.scan(self.base + start, self.base + end, &mut |addr, len| {
                    let offset = addr - self.base;
                    self.bitmap.mark_pages(offset / PAGE_SIZE, len / PAGE_SIZE);
                });
                match scanned {
                    Ok(pages) => {
                        self.stats
                            .scanned_dirty_pages
                            .fetch_add(pages, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::error!(
                            "PAGEMAP_SCAN failed: {e}; flushing whole ranges from now on"
                        );
                        self.broken.store(true, Ordering::Release);
                        return whole(self, out);
                    }
                }
            }
        } else if self.info.mode == Tracking::Raw && self.segv.is_none() {
            let tracked = self.tracked_len.load(Ordering::Acquire);
            let Some(uffd) = self.uffd.as_ref().filter(|_| range.end() <= tracked) else {
                // Raw stores outside tracking (fallback, or beyond the tracked part).
                return whole(self, out);
            };
            let start = range.offset - range.offset % PAGE_SIZE;
            let end = range.end().next_multiple_of(PAGE_SIZE).min(tracked);
            self.stats.scans.fetch_add(1, Ordering::Relaxed);
            let scanned = uffd.scan(self.base + start, self.base + end, &mut |addr, len| {
                let offset = addr - self.base;
                self.bitmap.mark_pages(offset / PAGE_SIZE, len / PAGE_SIZE);
            });
            match scanned {
                Ok(pages) => {
                    self.stats
                        .scanned_dirty_pages
                        .fetch_add(pages, Ordering::Relaxed);
                    if let Some(chunks) = &self.chunks {
                        if pages <= chunk_budget && !self.rearm_hints(uffd, chunks) {
                            return whole(self, out);
                        }
                    }
                }
                Err(e) => {
                    // The kernel refused the scan: pages it had already reported are in the
                    // bitmap; flush the whole range so nothing is lost.
                    tracing::warn!("PAGEMAP_SCAN failed: {e}; flushing the whole range");
                    return whole(self, out);
                }
            }
        }
        // Decide by the break-even: collect into a buffer; flush whole if too dirty.
        if !early {
            dirty = self.bitmap.collect(range, &mut |r| runs.push(r));
        }
        let cost_lines =
            dirty / CACHE_LINE + (runs.len() as u64).saturating_mul(SPF_RUN_COST_LINES);
        if !self.narrow_always && cost_lines > range.len.div_ceil(CACHE_LINE) {
            self.stats.whole_ranges.fetch_add(1, Ordering::Relaxed);
            self.stats
                .flushed_bytes
                .fetch_add(range.len, Ordering::Relaxed);
            out(range);
            return;
        }
        self.stats.flushed_bytes.fetch_add(dirty, Ordering::Relaxed);
        for r in runs {
            out(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(b: &DirtyBitmap, r: ByteRange) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        b.collect(r, &mut |x| v.push((x.offset, x.len)));
        v
    }

    #[test]
    fn bit_spans() {
        assert_eq!(bit_span(0, 63), u64::MAX);
        assert_eq!(bit_span(0, 0), 1);
        assert_eq!(bit_span(63, 63), 1 << 63);
        assert_eq!(bit_span(2, 4), 0b11100);
    }

    #[test]
    fn marks_collect_once_as_runs() {
        let b = DirtyBitmap::new(1 << 20).unwrap();
        b.mark(10, 1); // line 0
        b.mark(4096 - 1, 2); // lines 63 and 64 (two pages)
        b.mark(100_000, 300); // lines 1562..=1567
        let all = ByteRange::new(0, 1 << 20);
        assert_eq!(collect(&b, all), vec![(0, 64), (4032, 128), (99_968, 384)]);
        assert!(collect(&b, all).is_empty(), "collected bits are cleared");
    }

    #[test]
    fn partial_ranges_keep_the_rest() {
        let b = DirtyBitmap::new(1 << 20).unwrap();
        b.mark(0, 4096 * 3);
        // Take the middle page's second half only; the rest stays dirty.
        assert_eq!(
            collect(&b, ByteRange::new(4096 + 2048, 2048)),
            vec![(6144, 2048)]
        );
        assert_eq!(
            collect(&b, ByteRange::new(0, 1 << 20)),
            vec![(0, 6144), (8192, 4096)]
        );
        // Clamped to the range even when the line starts before it.
        b.mark(0, 64);
        assert_eq!(collect(&b, ByteRange::new(10, 5)), vec![(10, 5)]);
        // Flushing bytes 10..15 wrote the whole line back: it is clean now.
        assert!(collect(&b, ByteRange::new(0, 64)).is_empty());
    }

    #[test]
    fn marks_beyond_capacity_are_ignored() {
        let b = DirtyBitmap::new(8192).unwrap();
        b.mark(8000, 10_000);
        assert_eq!(collect(&b, ByteRange::new(0, 1 << 30)), vec![(8000, 192)]);
    }

    #[test]
    fn concurrent_marks_are_never_lost() {
        let b = std::sync::Arc::new(DirtyBitmap::new(1 << 22).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let marked: Vec<_> = (0..2u64)
            .map(|t| {
                let (b, stop) = (b.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let line = (n * 7919 + t * 31) % (1 << 16);
                        b.mark(line * 64, 1);
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut seen = vec![false; 1 << 16];
        for _ in 0..2000 {
            b.collect(ByteRange::new(0, 1 << 22), &mut |r| {
                for line in r.offset / 64..r.end().div_ceil(64) {
                    seen[line as usize] = true;
                }
            });
        }
        stop.store(true, Ordering::Relaxed);
        let counts: Vec<u64> = marked.into_iter().map(|h| h.join().unwrap()).collect();
        b.collect(ByteRange::new(0, 1 << 22), &mut |r| {
            for line in r.offset / 64..r.end().div_ceil(64) {
                seen[line as usize] = true;
            }
        });
        for (t, &n) in counts.iter().enumerate() {
            for k in 0..n.min(1 << 16) {
                let line = (k * 7919 + t as u64 * 31) % (1 << 16);
                assert!(
                    seen[line as usize],
                    "line {line} marked by thread {t} was lost"
                );
            }
        }
    }
}
