//! The mprotect + SIGSEGV fallback of raw-store tracking, for small regions on kernels
//! without userfaultfd's asynchronous write-protect.
//!
//! A tracked region is mapped read-only. The first store to a page faults; the handler sets
//! the page's bit, makes the page writable again, and returns, so the store is retried and
//! lands. A sync point takes the bits of its range, write-protects those pages again, and
//! only then flushes them: a store that lands before the re-protection is flushed, one after
//! it faults again and is taken by the next sync point.
//!
//! The handler's "set bit, unprotect" and the sync point's "take bits, re-protect" exclude
//! each other with a spin lock per region. Without it, either order of the handler's two
//! steps loses stores: bit after unprotect lets other threads store into the writable page
//! before the bit is set and a sync point skip it meanwhile; bit before unprotect lets a sync
//! point take the bit and re-protect between the two, leaving a writable page with no bit.
//! (The race test found the first with 2 writer threads.) The lock is safe in a handler: its
//! holder outside a handler only runs atomics and `mprotect`, never a store that could fault.
//!
//! Costs 9-15 us per first store to a page per epoch here, and every protected/unprotected
//! boundary splits a kernel VMA (65530 per process), hence only regions up to
//! `limits::SPF_MPROTECT_BYTES_MAX`. Kernel writes into a protected page (`read(2)` into pool
//! memory) fail with EFAULT instead of faulting: a known limit of this method.
//!
//! The handler is async-signal-safe: it reads a fixed table of atomics, calls `mprotect`,
//! and chains to the previous handler (Rust's stack-overflow handler, or the default action)
//! for faults that are not ours. Page bitmaps are never freed (a handler on another thread
//! may still hold one); they are small (a bit per page of at most 16 MiB: 512 bytes).
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::limits::PAGE_SIZE;

const SLOTS: usize = 16;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    /// log2 of the unit a bit stands for (a page, or a chunk of pages).
    shift: AtomicUsize,
    /// Spin lock: the handler's "set bit, unprotect" against a sync point's "take,
    /// re-protect".
    lock: AtomicU32,
    bits: AtomicPtr<AtomicU64>,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        shift: AtomicUsize::new(12),
        lock: AtomicU32::new(0),
        bits: AtomicPtr::new(null_mut()),
    }
}; SLOTS];

/// Serializes claiming and releasing slots (never taken by the handler).
static CLAIM: Mutex<()> = Mutex::new(());

static INSTALLED: crate::sigchain::Installed = crate::sigchain::Installed::new();

const PAGE: usize = PAGE_SIZE as usize;

/// Holds a slot's spin lock; async-signal-safe (atomics only).
struct SpinGuard<'a>(&'a AtomicU32);

impl<'a> SpinGuard<'a> {
    fn lock(word: &'a AtomicU32) -> SpinGuard<'a> {
        while word
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        SpinGuard(word)
    }
}

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid siginfo_t.
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in &TABLE {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= slot.end.load(Ordering::Acquire) {
            continue;
        }
        // A slot's fields change only under its lock (a region claiming or releasing it), so
        // they are read again, together, under it: never one region's range with another's
        // bits.
        let _guard = SpinGuard::lock(&slot.lock);
        let start = slot.start.load(Ordering::Acquire);
        let end = slot.end.load(Ordering::Acquire);
        let bits = slot.bits.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= end || bits.is_null() {
            continue;
        }
        let shift = slot.shift.load(Ordering::Acquire);
        let page = (addr - start) >> shift;
        let page_addr = start + (page << shift);
        let unit = (1usize << shift).min(end - page_addr);
        // SAFETY: `bits` points to a leaked array with a bit for every unit of the slot's
        // region (`Region::with_unit`), never freed.
        unsafe { (*bits.add(page / 64)).fetch_or(1 << (page % 64), Ordering::SeqCst) };
        // SAFETY: the unit lies in a region this module protected; making it writable again
        // restores the mapping's original protection.
        let r = unsafe {
            libc::mprotect(
                page_addr as *mut c_void,
                unit,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if r != 0 {
            break;
        }
        return;
    }
    chain(sig, info, ctx);
}

/// Hand a fault that is not ours to the handler that was there before.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    INSTALLED.forward(sig, info, ctx);
}

fn install() -> Result<(), String> {
    INSTALLED.install(handler, false)
}

fn protect(addr: usize, len: usize, writable: bool) -> std::io::Result<()> {
    let prot = if writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: callers pass page-aligned ranges of a region registered here, which belongs to
    // a live shared mapping of its pool; only the protection changes.
    let r = unsafe { libc::mprotect(addr as *mut c_void, len, prot) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A region tracked by write faults, one bit per unit (a page, or a chunk of pages).
#[derive(Debug)]
pub(crate) struct Region {
    slot: usize,
    start: usize,
    len: usize,
    shift: u32,
    bits: &'static [AtomicU64],
}

impl Region {
    /// Protect `start..start+len` (page aligned) and track stores into it per page.
    pub(crate) fn new(start: usize, len: usize) -> Result<Region, String> {
        Region::with_unit(start, len, PAGE)
    }

    /// As [`Region::new`], one bit per `unit` bytes (a power of two, at least a page).
    pub(crate) fn with_unit(start: usize, len: usize, unit: usize) -> Result<Region, String> {
        if start % PAGE != 0 || len % PAGE != 0 || len == 0 {
            return Err("region not page aligned".into());
        }
        if !unit.is_power_of_two() || unit < PAGE {
            return Err("tracking unit not a power-of-two multiple of the page".into());
        }
        install()?;
        let shift = unit.trailing_zeros();
        let pages = len.div_ceil(unit);
        let bits: &'static [AtomicU64] = Box::leak(
            (0..pages.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let _claim = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
        let slot = TABLE
            .iter()
            .position(|s| s.start.load(Ordering::Acquire) == 0)
            .ok_or_else(|| format!("more than {SLOTS} regions tracked by mprotect"))?;
        let s = &TABLE[slot];
        {
            let _guard = SpinGuard::lock(&s.lock);
            s.bits.store(bits.as_ptr().cast_mut(), Ordering::Release);
            s.shift.store(shift as usize, Ordering::Release);
            s.end.store(start + len, Ordering::Release);
            s.start.store(start, Ordering::Release);
        }
        if let Err(e) = protect(start, len, false) {
            let _guard = SpinGuard::lock(&s.lock);
            s.start.store(0, Ordering::Release);
            return Err(format!("mprotect: {e}"));
        }
        Ok(Region {
            slot,
            start,
            len,
            shift,
            bits,
        })
    }

    /// Bytes tracked from the region's start.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Make the whole region writable and forget every bit (hints switched off: no more
    /// faults while sync points scan everything).
    pub(crate) fn disarm(&self) -> std::io::Result<()> {
        let _guard = SpinGuard::lock(&TABLE[self.slot].lock);
        protect(self.start, self.len, true)?;
        for word in self.bits {
            word.store(0, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Forget every bit, then write-protect the whole region again (hints switched back
    /// on). A store after the protection faults and sets its bit; the caller scans for those
    /// made before it.
    pub(crate) fn rearm(&self) -> std::io::Result<()> {
        let _guard = SpinGuard::lock(&TABLE[self.slot].lock);
        for word in self.bits {
            word.store(0, Ordering::SeqCst);
        }
        protect(self.start, self.len, false)
    }

    /// The unit one bit stands for, in bytes.
    pub(crate) fn unit(&self) -> usize {
        1 << self.shift
    }

    /// Take the written units of `first..first+count` (unit indices in the region),
    /// write-protect them again, and report each run (first unit, units) to `out`. Runs are
    /// reported only after their protection is back; an error leaves units untracked.
    pub(crate) fn take(
        &self,
        first: usize,
        count: usize,
        out: &mut dyn FnMut(usize, usize),
    ) -> std::io::Result<u64> {
        let unit = self.unit();
        let end = (first + count).min(self.len.div_ceil(unit));
        let _guard = SpinGuard::lock(&TABLE[self.slot].lock);
        let mut run: Option<(usize, usize)> = None;
        let mut pages = 0;
        let mut flush_run = |run: &mut Option<(usize, usize)>| -> std::io::Result<()> {
            if let Some((a, n)) = run.take() {
                let offset = a * unit;
                protect(
                    self.start + offset,
                    (n * unit).min(self.len - offset),
                    false,
                )?;
                out(a, n);
            }
            Ok(())
        };
        let mut page = first;
        while page < end {
            let word = page / 64;
            let lo = page % 64;
            let hi = (end - word * 64).min(64);
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            let mut taken = self.bits[word].fetch_and(!mask, Ordering::SeqCst) & mask;
            while taken != 0 {
                let bit = taken.trailing_zeros() as usize;
                taken &= taken - 1;
                let p = word * 64 + bit;
                pages += 1;
                match &mut run {
                    Some((a, n)) if *a + *n == p => *n += 1,
                    _ => {
                        flush_run(&mut run)?;
                        run = Some((p, 1));
                    }
                }
            }
            page = (word + 1) * 64;
        }
        flush_run(&mut run)?;
        Ok(pages)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _claim = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
        // Writable first, then the slot released: a store in between must still find its
        // region (a fault that finds none goes to the previous handler, a crash).
        if let Err(e) = protect(self.start, self.len, true) {
            tracing::warn!("restoring write access after mprotect tracking: {e}");
        }
        let slot = &TABLE[self.slot];
        let _guard = SpinGuard::lock(&slot.lock);
        slot.start.store(0, Ordering::Release);
    }
}
