//! `vpm_mechanism`: which fault mechanism virtual persistent memory should use (issue 15: "the
//! fault handler (userfaultfd, or a signal handler with mmap, your choice; measure both)").
//!
//! Every case maps the pages of one file on /dev/shm (the persistent-memory file's stand-in,
//! allocated whole first, as mnemo-vpm allocates its slots) into a range reserved beforehand,
//! on the first touch of each page, and times the touches (one byte stored per page, in page
//! order), ns per page:
//!
//! * `kernel`: the peer, a plain shared mapping of the file (the kernel's own minor fault);
//! * `signal_mmap`: the range reserved `PROT_NONE`; a `SIGSEGV` handler maps the file's page
//!   at the faulting address (`mmap` `MAP_FIXED | MAP_SHARED`), what mnemo-vpm does (without
//!   its page table, fences and eviction: the mechanism alone);
//! * `uffd_mmap`: the range anonymous and registered with userfaultfd (missing-page mode); a
//!   handler thread reads each fault, maps the file's page over the address the same way and
//!   wakes the faulting thread (`UFFDIO_WAKE`): the userfaultfd form that keeps the page in the
//!   file, as persistence needs;
//! * `uffd_copy`: the same registration, but the handler copies the file page's bytes into
//!   anonymous memory (`UFFDIO_COPY`): userfaultfd at its cheapest, shown for scale; unusable
//!   as it is, since stores then land in anonymous memory and never reach the file.
//!
//! Rounds (`VPM_MECH_ROUNDS`, default 5) run the cases in turn; the summary gives the median
//! with min and max. Writes `bench/results/vpm-mechanism.csv` (commit and command on every
//! row) and `vpm-mechanism.json`. Run it with `scripts/bench-vpm-mechanism.sh`.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::Instant;

use mnemo_bench::{head_commit, machine, median, write_csv, write_json};
use userfaultfd::{Event, UffdBuilder};

const PAGE: usize = 4096;
const CASES: [&str; 4] = ["kernel", "signal_mmap", "uffd_mmap", "uffd_copy"];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The file whose pages the cases map: on tmpfs, every page allocated.
struct Backing {
    _dir: tempfile::TempDir,
    file: std::fs::File,
    pages: usize,
}

impl Backing {
    fn new(pages: usize) -> Result<Backing, String> {
        let dir = tempfile::tempdir_in("/dev/shm").map_err(|e| format!("/dev/shm: {e}"))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("pm"))
            .map_err(|e| e.to_string())?;
        rustix::fs::fallocate(
            &file,
            rustix::fs::FallocateFlags::empty(),
            0,
            (pages * PAGE) as u64,
        )
        .map_err(|e| format!("fallocate: {e}"))?;
        Ok(Backing {
            _dir: dir,
            file,
            pages,
        })
    }

    fn len(&self) -> usize {
        self.pages * PAGE
    }
}

/// An address range mapped by `mmap`, unmapped on drop.
struct Range {
    base: *mut u8,
    len: usize,
}

impl Range {
    fn map(
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: libc::c_int,
    ) -> Result<Range, String> {
        // SAFETY: a fresh mapping at an address the kernel chooses; nothing else refers to it.
        let base = unsafe { libc::mmap(null_mut(), len, prot, flags, fd, 0) };
        if base == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Range {
            base: base.cast(),
            len,
        })
    }

    /// Store one byte in each page, in order; ns per page.
    fn touch_all(&self) -> f64 {
        let pages = self.len / PAGE;
        let started = Instant::now();
        for page in 0..pages {
            // SAFETY: inside the range; the case's mechanism makes the page writable at the
            // first touch (or the kernel does, for the plain mapping).
            unsafe { std::ptr::write_volatile(self.base.add(page * PAGE), 1) };
        }
        started.elapsed().as_nanos() as f64 / pages as f64
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `map` and nothing uses it any more.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Map page `page` of file `fd` at `at`, shared and writable, over whatever is there.
///
/// # Safety
/// `at` must be a page of a range this process reserved for the purpose.
unsafe fn map_page(at: *mut c_void, fd: libc::c_int, page: usize) -> bool {
    // SAFETY: the caller's contract: `at` is a page of a reserved range.
    let got = unsafe {
        libc::mmap(
            at,
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            (page * PAGE) as libc::off_t,
        )
    };
    got == at
}

fn kernel(b: &Backing) -> Result<f64, String> {
    let r = Range::map(
        b.len(),
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
        b.file.as_raw_fd(),
    )?;
    Ok(r.touch_all())
}

// The signal case's state, read by the handler (async-signal-safe: atomics only).
static SIG_BASE: AtomicUsize = AtomicUsize::new(0);
static SIG_LEN: AtomicUsize = AtomicUsize::new(0);
static SIG_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_segv(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let base = SIG_BASE.load(Ordering::Relaxed);
    let len = SIG_LEN.load(Ordering::Relaxed);
    if addr < base || addr >= base + len {
        // Not ours: the default action at the re-executed access.
        // SAFETY: resetting a signal's disposition is async-signal-safe.
        unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        return;
    }
    let page = (addr - base) / PAGE;
    // SAFETY: the page is inside the range reserved by `signal_mmap`.
    if !unsafe {
        map_page(
            (base + page * PAGE) as *mut c_void,
            SIG_FD.load(Ordering::Relaxed),
            page,
        )
    } {
        // SAFETY: abort is async-signal-safe; a failed mapping would fault forever.
        unsafe { libc::abort() };
    }
}

fn signal_mmap(b: &Backing) -> Result<f64, String> {
    let r = Range::map(
        b.len(),
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
    )?;
    SIG_BASE.store(r.base as usize, Ordering::Relaxed);
    SIG_LEN.store(r.len, Ordering::Relaxed);
    SIG_FD.store(b.file.as_raw_fd(), Ordering::Relaxed);
    // SAFETY: a zeroed sigaction is valid; the handler only touches atomics and makes
    // async-signal-safe calls; the previous action is restored below.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above, a zeroed sigaction is a valid value to fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_segv as *const () as usize;
    action.sa_flags = libc::SA_SIGINFO;
    // SAFETY: installing a handler for SIGSEGV with valid structures.
    if unsafe { libc::sigaction(libc::SIGSEGV, &action, &mut old) } != 0 {
        return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
    }
    let ns = r.touch_all();
    // SAFETY: restoring the action saved above.
    unsafe { libc::sigaction(libc::SIGSEGV, &old, null_mut()) };
    SIG_LEN.store(0, Ordering::Relaxed);
    Ok(ns)
}

/// The userfaultfd cases: `copy` false maps the file's page over the fault, true copies it.
fn uffd(b: &Backing, copy: bool) -> Result<f64, String> {
    let r = Range::map(
        b.len(),
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
    )?;
    // The copy's source: the file mapped whole, read by the handler.
    let source = Range::map(
        b.len(),
        libc::PROT_READ,
        libc::MAP_SHARED,
        b.file.as_raw_fd(),
    )?;
    let uffd = UffdBuilder::new()
        .close_on_exec(true)
        .non_blocking(false)
        .user_mode_only(true)
        .create()
        .map_err(|e| format!("userfaultfd: {e} (vm.unprivileged_userfaultfd, or run as root)"))?;
    uffd.register(r.base.cast(), r.len)
        .map_err(|e| format!("UFFDIO_REGISTER: {e}"))?;
    let base = r.base as usize;
    let src = source.base as usize;
    let fd = b.file.as_raw_fd();
    let pages = b.pages;
    std::thread::scope(|s| -> Result<f64, String> {
        let handler = s.spawn(|| -> Result<(), String> {
            for _ in 0..pages {
                let Some(Event::Pagefault { addr, .. }) =
                    uffd.read_event().map_err(|e| format!("read: {e}"))?
                else {
                    return Err("an event that is not a page fault".into());
                };
                let at = addr as usize & !(PAGE - 1);
                let page = (at - base) / PAGE;
                if copy {
                    // SAFETY: source and destination are pages of the two ranges above.
                    unsafe {
                        uffd.copy(
                            (src + page * PAGE) as *const c_void,
                            at as *mut c_void,
                            PAGE,
                            true,
                        )
                    }
                    .map_err(|e| format!("UFFDIO_COPY: {e}"))?;
                } else {
                    // SAFETY: `at` is a page of the registered range.
                    if !unsafe { map_page(at as *mut c_void, fd, page) } {
                        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
                    }
                    uffd.wake(at as *mut c_void, PAGE)
                        .map_err(|e| format!("UFFDIO_WAKE: {e}"))?;
                }
            }
            Ok(())
        });
        let ns = r.touch_all();
        handler
            .join()
            .map_err(|_| "the handler thread panicked".to_string())??;
        Ok(ns)
    })
}

fn run() -> Result<(), String> {
    let pages = env_usize("VPM_MECH_PAGES", 16384);
    let rounds = env_usize("VPM_MECH_ROUNDS", 5);
    let command = std::env::var("VPM_MECH_COMMAND").unwrap_or_else(|_| "vpm_mechanism".into());
    let commit = head_commit();
    let mut rows = Vec::new();
    let mut all: Vec<Vec<f64>> = vec![Vec::new(); CASES.len()];
    for round in 1..=rounds {
        let mut line = Vec::new();
        for (i, case) in CASES.iter().enumerate() {
            // A fresh file each time: no case finds pages another case left mapped.
            let b = Backing::new(pages)?;
            let ns = match *case {
                "kernel" => kernel(&b)?,
                "signal_mmap" => signal_mmap(&b)?,
                "uffd_mmap" => uffd(&b, false)?,
                _ => uffd(&b, true)?,
            };
            all[i].push(ns);
            rows.push(format!(
                "{commit},{command:?},{round},{case},{pages},{ns:.0}"
            ));
            line.push(format!("{case} {ns:.0}"));
        }
        eprintln!("round {round}: {} ns per page", line.join(", "));
    }
    write_csv(
        "vpm-mechanism.csv",
        "commit,command,round,case,pages,ns_per_page",
        &rows,
    )
    .map_err(|e| e.to_string())?;
    let mut summary = serde_json::Map::new();
    println!(
        "case          median ns/page   min      max    (over {rounds} rounds of {pages} pages)"
    );
    for (i, case) in CASES.iter().enumerate() {
        all[i].sort_by(f64::total_cmp);
        let (med, min, max) = (median(&all[i]), all[i][0], all[i][all[i].len() - 1]);
        println!("{case:<13} {med:>10.0} {min:>10.0} {max:>8.0}");
        summary.insert(
            case.to_string(),
            serde_json::json!({"median_ns": med, "min_ns": min, "max_ns": max}),
        );
    }
    write_json(
        "vpm-mechanism.json",
        &serde_json::json!({
            "commit": commit,
            "command": command,
            "pages": pages,
            "rounds": rounds,
            "machine": machine(),
            "ns_per_page": summary,
        }),
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("vpm_mechanism.rs"));
    if let Err(e) = run() {
        eprintln!("vpm_mechanism: {e}");
        std::process::exit(1);
    }
}
