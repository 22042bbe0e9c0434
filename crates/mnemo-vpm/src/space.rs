//! [`Space`]: a persistent-memory file and its swap file, holding named regions.
//!
//! The persistent-memory file starts with a configuration section and a table of contents
//! ([`crate::format`]); each region takes a page table and `budget` slots from it, and a
//! swap area of its whole capacity from the swap file. A region is found by its owner's
//! name and allocation sequence number (vpmlib's name-based allocation), so owners can
//! allocate and recover regions in any order. Allocation and freeing take the space's lock
//! (a mutex in this process, `flock` across processes); nothing on the access path does.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mnemo_pmem::{durable_site, mutant, FileMedia, Media};

use crate::error::{Error, Result};
use crate::format::{self, Config, Place, State, TocEntry};
use crate::limits::{
    BUDGET_PAGES_MAX, BUDGET_PAGES_MIN, CAPACITY_PAGES_MAX, DATA_OFFSET, OWNER_NAME_MAX, PAGE_SIZE,
    PM_BYTES_MAX, TOC_ENTRIES, TOC_ENTRY_SIZE,
};
use crate::region::{Region, RegionOptions};

/// What the fault handler and the regions share: the files and the window onto the
/// persistent-memory file.
#[derive(Debug)]
pub(crate) struct SpaceInner {
    pub(crate) pm_path: PathBuf,
    pub(crate) swap_path: PathBuf,
    /// The persistent-memory file mapped whole: page tables and slots are written here
    /// (by the fault handler too), and its flush and drain make them durable. A
    /// `FileMedia`, or a wrapper of it given by [`Hooks::wrap_window`] (crash tests).
    pub(crate) window: Box<dyn Media>,
    /// Makes the swap file's writes durable ([`Hooks::sync_swap`]; `fdatasync`).
    pub(crate) sync_swap: fn(i32) -> bool,
    /// Runs each region's evictor thread ([`Hooks::run_evictor`]).
    pub(crate) run_evictor: fn(&dyn Fn()),
    /// Descriptor of the persistent-memory file (mapped into regions by the handler).
    pub(crate) pm_file: File,
    pub(crate) swap_file: File,
    pub(crate) config: Config,
    /// Allocation and freeing, in this process (`flock` on `pm_file` across processes).
    alloc: Mutex<()>,
    /// Identifiers of the regions open in this process.
    pub(crate) open: Mutex<HashSet<u64>>,
}

/// Deliberately broken variants of the allocation path (`mnemo_pmem::mutant`), each of which
/// the crash test must catch (`tests/crash.rs`).
pub const ALLOCATION_MUTANTS: &[&str] = &[
    // A freed entry is rewritten for a new region without being made empty first: a crash
    // while its new body is written leaves a freed entry with a torn body.
    "vpm.reuse_without_empty",
];

/// Seams for crash tests: what makes the persistent-memory file and the swap file durable.
/// Both run inside the fault handler, so they must be async-signal-safe (no allocation, no
/// lock shared with other code).
#[derive(Clone, Copy, Debug)]
pub struct Hooks {
    /// Wraps the window onto the persistent-memory file (a twin that records flushes and
    /// fences). Default: the `FileMedia` itself.
    pub wrap_window: fn(FileMedia) -> Box<dyn Media>,
    /// Makes every write to the swap file durable; false on failure. Default: `fdatasync`.
    pub sync_swap: fn(i32) -> bool,
    /// Runs the loop of a region's evictor thread (`RegionOptions::evict_ahead`), on that
    /// thread: a crash test sets up the thread's own state around it (the mutant switched
    /// on, the twin's lane). Default: calls it.
    pub run_evictor: fn(&dyn Fn()),
}

fn run_plainly(evictor: &dyn Fn()) {
    evictor()
}

fn plain_window(window: FileMedia) -> Box<dyn Media> {
    Box::new(window)
}

fn fdatasync(fd: i32) -> bool {
    #[allow(unsafe_code)]
    // SAFETY: fdatasync of a descriptor the caller keeps open; async-signal-safe.
    let r = unsafe { libc::fdatasync(fd) };
    r == 0
}

impl Default for Hooks {
    fn default() -> Hooks {
        Hooks {
            wrap_window: plain_window,
            sync_swap: fdatasync,
            run_evictor: run_plainly,
        }
    }
}

/// A persistent-memory file and its swap file. Cheap to clone; regions keep it alive.
#[derive(Clone, Debug)]
pub struct Space {
    inner: Arc<SpaceInner>,
}

/// What the table of contents says about one region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Owner name.
    pub owner: String,
    /// Allocation sequence number of the owner.
    pub seq: u64,
    /// Identifier (from owner and sequence).
    pub id: u64,
    /// Virtual size in bytes.
    pub capacity: u64,
    /// Bytes of persistent memory it may occupy.
    pub budget: u64,
    /// Freed (its persistent memory and swap area are reused by later allocations).
    pub freed: bool,
}

fn open_rw(path: &Path, create: bool) -> Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true).mode(0o600);
    if create {
        o.create_new(true);
    }
    o.open(path)
        .map_err(|e| Error::io(path, if create { "create" } else { "open" }, e))
}

/// The swap file's first page: magic, version, the space's UUID, CRC-32C of the 28 bytes.
fn swap_header(uuid: &[u8; 16]) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..8].copy_from_slice(&format::SWAP_MAGIC);
    b[8..12].copy_from_slice(&format::VERSION.to_le_bytes());
    b[12..28].copy_from_slice(uuid);
    let crc = crc32c::crc32c(&b[0..28]);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    b
}

impl Space {
    /// Create a space: a persistent-memory file of `pm_bytes` at `pm_path` (on tmpfs or a
    /// DAX file system, typically) and an empty swap file at `swap_path` (on a disk). Both
    /// must not exist.
    pub fn create(pm_path: &Path, swap_path: &Path, pm_bytes: u64) -> Result<Space> {
        Space::create_with(pm_path, swap_path, pm_bytes, Hooks::default())
    }

    /// [`Space::create`] with the durability of both files through `hooks` (crash tests:
    /// the configuration section is written through the hooked window).
    pub fn create_with(
        pm_path: &Path,
        swap_path: &Path,
        pm_bytes: u64,
        hooks: Hooks,
    ) -> Result<Space> {
        let pm_bytes = pm_bytes.next_multiple_of(PAGE_SIZE);
        if !(DATA_OFFSET + 2 * PAGE_SIZE..=PM_BYTES_MAX).contains(&pm_bytes) {
            return Err(Error::InvalidArgument(format!(
                "a persistent-memory file of {pm_bytes} bytes is outside {}..={PM_BYTES_MAX}",
                DATA_OFFSET + 2 * PAGE_SIZE
            )));
        }
        let config = Config {
            pm_bytes,
            uuid: *uuid::Uuid::new_v4().as_bytes(),
        };
        let swap_file = open_rw(swap_path, true)?;
        let header = swap_header(&config.uuid);
        swap_file
            .write_all_at(&header, 0)
            .and_then(|()| swap_file.set_len(PAGE_SIZE))
            .and_then(|()| swap_file.sync_all())
            .map_err(|e| Error::io(swap_path, "writing the swap header", e))?;
        if pm_path.exists() {
            return Err(Error::io(
                pm_path,
                "create",
                std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            ));
        }
        // Built under a temporary name and renamed once its configuration is durable: a
        // file at `pm_path` is always a whole space.
        let file_name = pm_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = pm_path.with_file_name(format!(".{file_name}.creating.{}", std::process::id()));
        let result = Space::create_at(pm_path, &temp, swap_path, swap_file, config, hooks);
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result
    }

    fn create_at(
        pm_path: &Path,
        temp: &Path,
        swap_path: &Path,
        swap_file: File,
        config: Config,
        hooks: Hooks,
    ) -> Result<Space> {
        let pm_bytes = config.pm_bytes;
        let pm_file = open_rw(temp, true)?;
        pm_file
            .set_len(pm_bytes)
            .map_err(|e| Error::io(pm_path, "ftruncate", e))?;
        let window = map_window(pm_path, &pm_file, pm_bytes)?;
        // The whole file allocated now: a fault never allocates blocks (on tmpfs, the
        // budget's memory is taken now, not when a full machine cannot give it).
        window
            .ensure_backed(0, pm_bytes)
            .map_err(|e| Error::corrupt(pm_path, format!("allocating the file: {e}")))?;
        let window = (hooks.wrap_window)(window);
        window.copy_nodrain(0, &config.encode());
        durable_site!("vpm.config_fence", window.drain()).map_err(|e| {
            Error::corrupt(pm_path, format!("making the configuration durable: {e}"))
        })?;
        pm_file
            .sync_all()
            .map_err(|e| Error::io(pm_path, "fsync", e))?;
        std::fs::hard_link(temp, pm_path).map_err(|e| Error::io(pm_path, "link", e))?;
        let _ = std::fs::remove_file(temp);
        if let Some(dir) = pm_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(Space::from_parts(
            (pm_path, swap_path),
            window,
            hooks,
            pm_file,
            swap_file,
            config,
        ))
    }

    /// Open an existing space; every byte read is checked before it is used.
    pub fn open(pm_path: &Path, swap_path: &Path) -> Result<Space> {
        Space::open_with(pm_path, swap_path, Hooks::default())
    }

    /// [`Space::open`] with the durability of both files through `hooks` (crash tests).
    pub fn open_with(pm_path: &Path, swap_path: &Path, hooks: Hooks) -> Result<Space> {
        let pm_file = open_rw(pm_path, false)?;
        let mut head = [0u8; 64];
        pm_file
            .read_exact_at(&mut head, 0)
            .map_err(|e| Error::io(pm_path, "reading the configuration", e))?;
        let config = Config::decode(&head).map_err(|d| Error::corrupt(pm_path, d))?;
        let len = pm_file
            .metadata()
            .map_err(|e| Error::io(pm_path, "stat", e))?
            .len();
        if len < config.pm_bytes || config.pm_bytes > PM_BYTES_MAX {
            return Err(Error::corrupt(
                pm_path,
                format!(
                    "file is {len} bytes; its configuration says {}",
                    config.pm_bytes
                ),
            ));
        }
        let swap_file = open_rw(swap_path, false)?;
        let mut swap_head = [0u8; 32];
        swap_file
            .read_exact_at(&mut swap_head, 0)
            .map_err(|e| Error::io(swap_path, "reading the swap header", e))?;
        if swap_head != swap_header(&config.uuid) {
            return Err(Error::corrupt(
                swap_path,
                "not the swap file of this persistent-memory file (header or identity differs)",
            ));
        }
        let window = map_window(pm_path, &pm_file, config.pm_bytes)?;
        Ok(Space::from_parts(
            (pm_path, swap_path),
            (hooks.wrap_window)(window),
            hooks,
            pm_file,
            swap_file,
            config,
        ))
    }

    fn from_parts(
        (pm_path, swap_path): (&Path, &Path),
        window: Box<dyn Media>,
        hooks: Hooks,
        pm_file: File,
        swap_file: File,
        config: Config,
    ) -> Space {
        Space {
            inner: Arc::new(SpaceInner {
                pm_path: pm_path.to_path_buf(),
                swap_path: swap_path.to_path_buf(),
                window,
                sync_swap: hooks.sync_swap,
                run_evictor: hooks.run_evictor,
                pm_file,
                swap_file,
                config,
                alloc: Mutex::new(()),
                open: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// Bytes of the persistent-memory file.
    pub fn pm_bytes(&self) -> u64 {
        self.inner.config.pm_bytes
    }

    /// Every region of the table of contents, live and freed.
    pub fn regions(&self) -> Result<Vec<RegionInfo>> {
        Ok(self
            .inner
            .toc()?
            .into_iter()
            .flatten()
            .map(|e| RegionInfo {
                owner: e.owner.clone(),
                seq: e.seq,
                id: e.id,
                capacity: e.capacity_pages * PAGE_SIZE,
                budget: e.budget_pages * PAGE_SIZE,
                freed: e.state == State::Freed,
            })
            .collect())
    }

    /// Allocate a region of `capacity` bytes (virtual) of which at most `budget` bytes
    /// stay in persistent memory, for `owner`; returns its sequence number (the owner's
    /// regions are numbered from 0 in allocation order). The global lock is held meanwhile.
    pub fn allocate(&self, owner: &str, capacity: u64, budget: u64) -> Result<u64> {
        if owner.is_empty() || owner.len() > OWNER_NAME_MAX {
            return Err(Error::InvalidArgument(format!(
                "owner name must be 1..={OWNER_NAME_MAX} bytes"
            )));
        }
        let capacity_pages = capacity.div_ceil(PAGE_SIZE);
        let budget_pages = (budget / PAGE_SIZE).min(capacity_pages);
        if capacity_pages == 0 || capacity_pages > CAPACITY_PAGES_MAX {
            return Err(Error::InvalidArgument(format!(
                "capacity of {capacity} bytes is outside 1..={} pages",
                CAPACITY_PAGES_MAX
            )));
        }
        if !(BUDGET_PAGES_MIN.min(capacity_pages)..=BUDGET_PAGES_MAX).contains(&budget_pages) {
            return Err(Error::InvalidArgument(format!(
                "a budget of {budget} bytes is outside {BUDGET_PAGES_MIN}..={BUDGET_PAGES_MAX} pages"
            )));
        }
        let inner = &self.inner;
        let _lock = inner.lock_global()?;
        let toc = inner.toc()?;
        let seq = toc
            .iter()
            .flatten()
            .filter(|e| e.owner == owner)
            .map(|e| e.seq + 1)
            .max()
            .unwrap_or(0);
        let index = entry_for_allocation(&toc).ok_or_else(|| {
            Error::Full(format!(
                "all {TOC_ENTRIES} entries of the table of contents are taken (by live regions, \
                 and by freed ones that hold their owner's last sequence number)"
            ))
        })?;
        // Space is taken by live regions only: a freed region's page table, slots and swap
        // area are reused (first fit).
        let live: Vec<&TocEntry> = toc
            .iter()
            .flatten()
            .filter(|e| e.state == State::Live)
            .collect();
        let pm_len = format::table_bytes(capacity_pages) + budget_pages * PAGE_SIZE;
        let pm_taken = live.iter().map(|e| (e.table_offset, e.pm_end())).collect();
        let pm_next = first_fit(pm_taken, DATA_OFFSET, pm_len);
        let swap_taken = live.iter().map(|e| (e.swap_offset, e.swap_end())).collect();
        let swap_next = first_fit(swap_taken, PAGE_SIZE, capacity_pages * PAGE_SIZE);
        let table_offset = pm_next;
        let slots_offset = table_offset + format::table_bytes(capacity_pages);
        let entry = TocEntry {
            state: State::Live,
            id: format::region_id(owner, seq),
            owner: owner.to_string(),
            seq,
            capacity_pages,
            budget_pages,
            table_offset,
            slots_offset,
            swap_offset: swap_next,
        };
        debug_assert_eq!(entry.pm_end(), pm_next + pm_len);
        if entry.pm_end() > inner.config.pm_bytes {
            return Err(Error::Full(format!(
                "the persistent-memory file has no free range of {pm_len} bytes for the region \
                 (the first large enough would end at {} of {} bytes)",
                entry.pm_end(),
                inner.config.pm_bytes
            )));
        }
        inner.reserve_swap(&entry)?;
        if toc[index].is_some() && !mutant::active("vpm.reuse_without_empty") {
            // A freed entry reused: made empty (durably) before its body is overwritten, so
            // a crash in between leaves an empty entry, never a freed one with a torn body.
            inner.set_state(index as u64, State::Empty)?;
        }
        inner.publish(index as u64, &entry)?;
        tracing::debug!(owner, seq, capacity, budget, "virtual region allocated");
        Ok(seq)
    }

    /// Open (and recover) region `seq` of `owner`: every page is reconnected to its slot or
    /// its swap page, at whatever address the region is reserved this time.
    pub fn open_region(&self, owner: &str, seq: u64) -> Result<Region> {
        self.open_region_with(owner, seq, RegionOptions::default())
    }

    /// [`Space::open_region`] with options other than the defaults (the eviction thread and
    /// fault-around, both on by default).
    pub fn open_region_with(
        &self,
        owner: &str,
        seq: u64,
        options: RegionOptions,
    ) -> Result<Region> {
        let entry = self
            .inner
            .toc()?
            .into_iter()
            .flatten()
            .find(|e| e.state == State::Live && e.owner == owner && e.seq == seq)
            .ok_or_else(|| Error::NotFound {
                owner: owner.to_string(),
                seq,
            })?;
        Region::open(Arc::clone(&self.inner), entry, options)
    }

    /// Free region `seq` of `owner` (open in no process): its entry is marked freed, its
    /// swap area's blocks released; a later allocation reuses its persistent memory and its
    /// swap area. Its entry stays until an allocation finds no empty entry (and for good if
    /// it holds the owner's last sequence number: the owner's numbers go on after it).
    pub fn free(&self, owner: &str, seq: u64) -> Result<()> {
        let inner = &self.inner;
        let _lock = inner.lock_global()?;
        let id = format::region_id(owner, seq);
        if inner
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id)
        {
            return Err(Error::Busy {
                owner: owner.to_string(),
                seq,
            });
        }
        let toc = inner.toc()?;
        let (index, entry) = toc
            .iter()
            .enumerate()
            .find_map(|(i, e)| {
                e.as_ref()
                    .filter(|e| {
                        e.state == State::Live && e.id == id && e.owner == owner && e.seq == seq
                    })
                    .map(|e| (i, e))
            })
            .ok_or_else(|| Error::NotFound {
                owner: owner.to_string(),
                seq,
            })?;
        // Open in another process: refused (its slots are about to be reused). The region's
        // lock is held until the entry says freed.
        let _region_lock = Region::lock(inner, entry)?;
        inner.set_state(index as u64, State::Freed)?;
        // Give the swap area's blocks back (the region's bytes are gone now).
        let _ = rustix::fs::fallocate(
            &inner.swap_file,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            entry.swap_offset,
            entry.capacity_pages * PAGE_SIZE,
        );
        Ok(())
    }
}

/// The entry a new region takes: the first empty one, else the first freed one whose owner
/// has a region (live or freed) with a higher sequence number. A freed entry holding its
/// owner's last sequence number is kept: the owner's next allocation is numbered from it, so
/// an owner's numbers never go back (a number names one region over the file's life).
fn entry_for_allocation(toc: &[Option<TocEntry>]) -> Option<usize> {
    toc.iter().position(Option::is_none).or_else(|| {
        toc.iter().position(|e| {
            e.as_ref().is_some_and(|e| {
                e.state == State::Freed
                    && toc
                        .iter()
                        .flatten()
                        .any(|o| o.owner == e.owner && o.seq > e.seq)
            })
        })
    })
}

/// The first offset from `start` where `len` bytes overlap none of the `taken` ranges
/// (`[from, to)`).
fn first_fit(mut taken: Vec<(u64, u64)>, start: u64, len: u64) -> u64 {
    taken.sort_unstable();
    let mut at = start;
    for (from, to) in taken {
        if from >= at.saturating_add(len) {
            break;
        }
        at = at.max(to);
    }
    at
}

fn map_window(path: &Path, file: &File, pm_bytes: u64) -> Result<FileMedia> {
    let clone = file.try_clone().map_err(|e| Error::io(path, "dup", e))?;
    Ok(FileMedia::map(path, clone, pm_bytes, pm_bytes)?)
}

/// Holds the space's lock across processes (`flock`) and in this process.
pub(crate) struct GlobalLock<'a> {
    _guard: std::sync::MutexGuard<'a, ()>,
    file: &'a File,
}

impl Drop for GlobalLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.file, rustix::fs::FlockOperation::Unlock);
    }
}

impl SpaceInner {
    fn lock_global(&self) -> Result<GlobalLock<'_>> {
        let guard = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
        rustix::fs::flock(&self.pm_file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::io(&self.pm_path, "flock", e.into()))?;
        Ok(GlobalLock {
            _guard: guard,
            file: &self.pm_file,
        })
    }

    /// Bytes `offset..offset+len` of the window (inside the file: checked by callers).
    fn bytes(&self, offset: u64, len: u64) -> &[u8] {
        // SAFETY: the range lies inside the window's live mapping; other threads may store
        // into it (the handler into page tables, never into the table of contents), and
        // every value read is checked before it is used.
        unsafe {
            std::slice::from_raw_parts(
                self.window.base().as_ptr().add(offset as usize),
                len as usize,
            )
        }
    }

    /// The table of contents: `None` for empty entries; an error for a damaged one.
    pub(crate) fn toc(&self) -> Result<Vec<Option<TocEntry>>> {
        (0..TOC_ENTRIES)
            .map(|i| {
                let at = crate::limits::CONFIG_SIZE + i * TOC_ENTRY_SIZE;
                TocEntry::decode(self.bytes(at, TOC_ENTRY_SIZE), self.config.pm_bytes).map_err(
                    |d| Error::corrupt(&self.pm_path, format!("table-of-contents entry {i}: {d}")),
                )
            })
            .collect()
    }

    /// Make sure the swap area of `entry` is allocated on the file system (an error now
    /// rather than an abort in the fault handler later).
    fn reserve_swap(&self, entry: &TocEntry) -> Result<()> {
        match rustix::fs::fallocate(
            &self.swap_file,
            rustix::fs::FallocateFlags::empty(),
            entry.swap_offset,
            entry.capacity_pages * PAGE_SIZE,
        ) {
            Ok(()) | Err(rustix::io::Errno::OPNOTSUPP) => {}
            Err(e) => return Err(Error::io(&self.swap_path, "fallocate", e.into())),
        }
        let len = self
            .swap_file
            .metadata()
            .map_err(|e| Error::io(&self.swap_path, "stat", e))?
            .len();
        if len < entry.swap_end() {
            self.swap_file
                .set_len(entry.swap_end())
                .map_err(|e| Error::io(&self.swap_path, "ftruncate", e))?;
        }
        self.swap_file
            .sync_all()
            .map_err(|e| Error::io(&self.swap_path, "fsync", e))
    }

    /// Write a new region's entry: its page table zeroed and its body made durable first,
    /// then its state word (one 8-byte store): a crash before that leaves an empty entry.
    fn publish(&self, index: u64, entry: &TocEntry) -> Result<()> {
        let w = &self.window;
        let table = format::table_bytes(entry.capacity_pages);
        // SAFETY: the table lies inside the window (checked against pm_bytes by the caller).
        unsafe {
            std::ptr::write_bytes(
                w.base().as_ptr().add(entry.table_offset as usize),
                0,
                table as usize,
            )
        };
        let at = crate::limits::CONFIG_SIZE + index * TOC_ENTRY_SIZE;
        durable_site!("vpm.table_zero_flush", {
            w.flush(entry.table_offset, table);
            Ok::<(), ()>(())
        })
        .ok();
        w.copy_nodrain(at + 8, &entry.encode_body());
        durable_site!("vpm.entry_fence", w.drain())
            .map_err(|e| Error::corrupt(&self.pm_path, format!("allocating a region: {e}")))?;
        self.set_state(index, State::Live)
    }

    fn set_state(&self, index: u64, state: State) -> Result<()> {
        let at = crate::limits::CONFIG_SIZE + index * TOC_ENTRY_SIZE;
        // SAFETY: entry `index`'s first word lies inside the window, 8-byte aligned; the
        // global lock is held, so no other writer.
        let word = unsafe {
            &*self
                .window
                .base()
                .as_ptr()
                .add(at as usize)
                .cast::<AtomicU64>()
        };
        word.store(state.word(), Ordering::Release);
        durable_site!("vpm.state_flush", {
            self.window.flush(at, 8);
            Ok::<(), ()>(())
        })
        .ok();
        durable_site!("vpm.state_fence", self.window.drain())
            .map_err(|e| Error::corrupt(&self.pm_path, format!("recording a region's state: {e}")))
    }

    /// Page-table words of `entry`, checked: the resident (slot, page) pairs in slot
    /// order, and how many pages are in swap.
    pub(crate) fn scan_table(&self, entry: &TocEntry) -> Result<(Vec<(u32, u32)>, u64)> {
        let mut owner = vec![u32::MAX; entry.budget_pages as usize];
        let mut swapped = 0;
        let words = self.bytes(entry.table_offset, entry.capacity_pages * 8);
        for (page, w) in words.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            let bad = |what: &str| {
                Error::corrupt(
                    &self.pm_path,
                    format!(
                        "region {} of {:?}: page {page}: {what}",
                        entry.seq, entry.owner
                    ),
                )
            };
            match Place::decode(u64::from_le_bytes(b)) {
                None => return Err(bad("invalid page-table word")),
                Some(Place::Untouched) => {}
                Some(Place::Resident(slot)) => {
                    let Some(o) = owner.get_mut(slot as usize) else {
                        return Err(bad("slot outside the region's budget"));
                    };
                    if *o != u32::MAX {
                        return Err(bad("slot already holds another page"));
                    }
                    *o = page as u32;
                }
                Some(Place::Swapped(at)) => {
                    if at != page as u64 {
                        return Err(bad("swap page other than its own"));
                    }
                    swapped += 1;
                }
            }
        }
        let resident = owner
            .iter()
            .enumerate()
            .filter(|(_, &p)| p != u32::MAX)
            .map(|(slot, &p)| (slot as u32, p))
            .collect();
        Ok((resident, swapped))
    }

    pub(crate) fn pm_fd(&self) -> i32 {
        self.pm_file.as_raw_fd()
    }

    pub(crate) fn swap_fd(&self) -> i32 {
        self.swap_file.as_raw_fd()
    }
}
