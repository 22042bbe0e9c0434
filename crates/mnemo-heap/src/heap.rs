//! [`Heap`]: create/open (with recovery), reads, the atomic and shadow updates, the table of
//! contents and roots.

use std::collections::HashMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard};

use mnemo_pmem::{ByteRange, CreateOptions, OpenOptions, Pool, SyncKind, SyncPoint};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::alloc::{Allocator, HeapStats, PendingFree};
use crate::error::{Error, Result};
use crate::layout::{
    check_lane_slots, toc_decode, toc_entry, ChunkEntry, Geometry, RawSuperblock,
    LANE_COUNT_DEFAULT, LANE_COUNT_MAX, LANE_LOG_SIZE_DEFAULT, LANE_LOG_SIZE_MIN,
    LANE_SLOTS_DEFAULT, NAME_MAX, SUPERBLOCK_SIZE, TOC_ENTRIES_DEFAULT, TOC_ENTRY_SIZE,
    ZONE_HEADER_SIZE,
};
use crate::pptr::{PPtr, Persist};
use crate::redo::{self, Lanes};
use crate::tx::{self, Tx};

/// How to lay out a new heap.
#[derive(Clone, Debug)]
pub struct HeapOptions {
    /// Lanes: how many transactions may commit at the same moment.
    pub lane_count: u32,
    /// Bytes per lane log (a multiple of 4096, at least 16 KiB): a ring of `lane_slots` slots;
    /// a transaction's redo record may use one slot (`lane_log_size / lane_slots` bytes, 16 KiB
    /// by default).
    pub lane_log_size: u64,
    /// Record slots per lane log: a power of two, 4..=16. More slots
    /// mean fewer scans of other lanes when several threads commit (16 by default); fewer mean
    /// larger records for the same log size (a program whose transactions are large and whose
    /// commits come from one thread may take 4).
    pub lane_slots: u32,
    /// Entries of the table of contents (named regions and roots).
    pub toc_entries: u64,
    /// Allocator arenas (volatile; chosen again at every open). 0: twice the CPU count.
    pub arenas: usize,
}

impl Default for HeapOptions {
    fn default() -> Self {
        HeapOptions {
            lane_count: LANE_COUNT_DEFAULT,
            lane_log_size: LANE_LOG_SIZE_DEFAULT,
            lane_slots: LANE_SLOTS_DEFAULT,
            toc_entries: TOC_ENTRIES_DEFAULT,
            arenas: 0,
        }
    }
}

impl HeapOptions {
    fn arenas(&self) -> usize {
        if self.arenas > 0 {
            return self.arenas.min(1024);
        }
        std::thread::available_parallelism()
            .map_or(2, |n| n.get() * 2)
            .min(64)
    }
}

#[derive(Debug)]
struct TocEntry {
    slot: u64,
    offset: u64,
    size: u64,
    /// Token of the transaction creating or freeing it.
    busy: Option<u64>,
    /// Whether the transaction that created it committed.
    committed: bool,
}

#[derive(Debug, Default)]
struct Toc {
    names: HashMap<String, TocEntry>,
    free_slots: Vec<u64>,
}

/// Shared state of an open heap.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) pool: Pool,
    pub(crate) geometry: Geometry,
    pub(crate) lanes: Lanes,
    pub(crate) alloc: Allocator,
    toc: Mutex<Toc>,
    closed: AtomicBool,
    /// Frees whose record is committed but may still be replayed (sequence number, free):
    /// the space is handed out again only once the durable horizon passes the record.
    limbo: Mutex<Vec<(u64, PendingFree)>>,
    /// Smallest sequence number in `limbo` (u64::MAX: empty).
    limbo_min: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle: every pending record fenced, the horizon word past them all (the
        // pool is then closed clean).
        if let Err(e) = self.lanes.settle(&self.pool, &self.geometry) {
            tracing::warn!("settling the heap's redo records at close failed: {e}");
        }
    }
}

impl Inner {
    /// Frees committed by record `seq`: kept from reuse until no recovery can replay that
    /// record (or an older one that wrote the space) over the space's next contents, which a
    /// new owner writes in place, unlogged. Also hands back the earlier frees the durable
    /// horizon has passed (as [`Inner::release_frees`]).
    pub(crate) fn defer_frees(&self, seq: u64, frees: &[PendingFree]) {
        if mnemo_pmem::mutant::active("heap.reuse_before_horizon") {
            for f in frees {
                self.alloc
                    .commit_free(f, &|chunk| self.set_chunk_entry(chunk, ChunkEntry::Free));
            }
            return;
        }
        // One lock for both: add these frees, and take out those the durable horizon has
        // passed (most commits that free find some, so a second lock would be the rule).
        let horizon = self.lanes.durable_horizon();
        let mut ready = Vec::new();
        {
            let mut limbo = self.limbo.lock().unwrap_or_else(|p| p.into_inner());
            limbo.extend(frees.iter().map(|f| (seq, *f)));
            let low = self.limbo_min.load(Ordering::Acquire).min(seq);
            Self::take_ready(&mut limbo, low, horizon, &mut ready, &self.limbo_min);
        }
        self.commit_frees(&ready);
    }

    /// Move the frees of `limbo` below `horizon` into `ready` if its smallest seq (`low`)
    /// is below, and store the smallest seq left in `min`. Called under `limbo`'s lock (the
    /// writers of `min` hold it).
    fn take_ready(
        limbo: &mut Vec<(u64, PendingFree)>,
        low: u64,
        horizon: u64,
        ready: &mut Vec<PendingFree>,
        min: &AtomicU64,
    ) {
        let low = if low < horizon {
            limbo.retain(|&(seq, f)| {
                if seq < horizon {
                    ready.push(f);
                    false
                } else {
                    true
                }
            });
            limbo.iter().map(|&(seq, _)| seq).min().unwrap_or(u64::MAX)
        } else {
            low
        };
        min.store(low, Ordering::Release);
    }

    /// Hand frees whose records no recovery replays back to the allocator.
    pub(crate) fn commit_frees(&self, ready: &[PendingFree]) {
        for f in ready {
            self.alloc
                .commit_free(f, &|chunk| self.set_chunk_entry(chunk, ChunkEntry::Free));
        }
    }

    /// Hand the frees below the durable horizon back to the allocator.
    #[inline]
    pub(crate) fn release_frees(&self) {
        // Every commit calls this; most find nothing waiting.
        let min = self.limbo_min.load(Ordering::Acquire);
        if min != u64::MAX {
            self.release_frees_from(min);
        }
    }

    fn release_frees_from(&self, min: u64) {
        let horizon = self.lanes.durable_horizon();
        if min >= horizon {
            return;
        }
        let mut ready = Vec::new();
        {
            let mut limbo = self.limbo.lock().unwrap_or_else(|p| p.into_inner());
            let low = self.limbo_min.load(Ordering::Acquire);
            Self::take_ready(&mut limbo, low, horizon, &mut ready, &self.limbo_min);
        }
        self.commit_frees(&ready);
    }

    /// Every committed record applied, durable and never replayed again; every deferred
    /// free handed back.
    pub(crate) fn settle(&self) -> Result<()> {
        self.lanes.settle(&self.pool, &self.geometry)?;
        self.release_frees();
        Ok(())
    }

    /// Run an allocator call; if it finds no space while frees wait for the durable horizon
    /// (refinement 6 of the design), settle them and call it once more.
    pub(crate) fn with_space<T>(&self, mut call: impl FnMut() -> Result<T>) -> Result<T> {
        match call() {
            Err(Error::OutOfSpace { .. }) if self.frees_deferred() => {
                self.settle()?;
                call()
            }
            other => other,
        }
    }

    /// Whether frees wait for the durable horizon.
    pub(crate) fn frees_deferred(&self) -> bool {
        self.limbo_min.load(Ordering::Acquire) != u64::MAX
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Whether `offset..offset+len` lies in the zones (objects, chunk tables, bitmaps).
    pub(crate) fn is_data(&self, offset: u64, len: u64) -> bool {
        offset >= self.geometry.zones_offset
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= self.pool.size())
    }

    /// Whether user code may write `offset..offset+len`: the data area, but not a zone's
    /// chunk table (run bitmaps are not checked: writing one is a bug like a wild pointer).
    pub(crate) fn is_user_writable(&self, offset: u64, len: u64) -> bool {
        len > 0
            && self.is_data(offset, len)
            && self.geometry.chunk_of(offset).is_some()
            && self.geometry.chunk_of(offset + len - 1).is_some()
    }

    /// Areas a redo record may change: the TOC and the zones.
    pub(crate) fn allowed(&self, offset: u64, len: u64) -> bool {
        let Some(end) = offset.checked_add(len) else {
            return false;
        };
        (offset >= self.geometry.toc_offset && end <= self.geometry.lanes_offset)
            || self.is_data(offset, len)
    }

    /// Make a new run durable: its chunk-table entry, in a record of its own (the caller
    /// made the cleared bitmap durable first, with a sync point of its own).
    pub(crate) fn publish_run(&self, chunk: u64, class: u8) -> Result<()> {
        self.set_chunk_entry(chunk, ChunkEntry::Run { class })
    }

    /// Store a chunk-table entry through a record of its own.
    pub(crate) fn set_chunk_entry(&self, chunk: u64, entry: ChunkEntry) -> Result<()> {
        let mut lane = self.lanes.acquire();
        redo::start(&mut lane.buf);
        let value = entry.encode();
        redo::push_data(
            &mut lane.buf,
            self.geometry.chunk_entry_offset(chunk),
            &value.to_le_bytes(),
        );
        let allowed = |o: u64, l: u64| self.allowed(o, l);
        self.lanes.commit(
            &self.pool,
            &self.geometry,
            &mut lane,
            &redo::Commit::metadata(1, &allowed),
        )?;
        Ok(())
    }

    fn lock_toc(&self) -> MutexGuard<'_, Toc> {
        self.toc.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An open persistent heap. Cheap to clone (shared); usable from several threads.
///
/// The pool is closed (marked clean) when the last clone is dropped; [`Heap::close`] makes
/// every clone refuse further calls with [`Error::Closed`].
#[derive(Clone, Debug)]
pub struct Heap {
    inner: Arc<Inner>,
}

static HEAP_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn check_name(name: &str) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong {
            len: name.len(),
            max: NAME_MAX,
        });
    }
    if name.is_empty() || name.contains('\0') {
        return Err(Error::InvalidName(name.to_string()));
    }
    Ok(())
}

impl Heap {
    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    pub(crate) fn inner_arc(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Create a pool file at `path` of `size` bytes (growable to `size_max`) holding a new heap.
    pub fn create_file(
        path: &Path,
        size: u64,
        size_max: u64,
        options: &HeapOptions,
    ) -> Result<Heap> {
        let mut create = CreateOptions::new(size, "mnemo-heap");
        create.size_max = size_max.max(size);
        let pool = Pool::create(path, &create)?;
        Heap::create(pool, options)
    }

    /// Open the heap in the pool file at `path` (recovering it if needed).
    pub fn open_file(path: &Path) -> Result<Heap> {
        let pool = Pool::open(path, &OpenOptions::default())?;
        Heap::open(pool)
    }

    /// Format a new heap in `pool` (whose data area must be unused) and open it.
    ///
    /// Errors: `InvalidArgument` (options), `OutOfSpace` (the pool cannot hold the metadata), `Pool`.
    pub fn create(pool: Pool, options: &HeapOptions) -> Result<Heap> {
        if options.lane_count == 0 || options.lane_count > LANE_COUNT_MAX {
            return Err(Error::InvalidArgument(format!(
                "lane_count must be 1..={LANE_COUNT_MAX}"
            )));
        }
        if options.lane_log_size < LANE_LOG_SIZE_MIN
            || options.lane_log_size % 4096 != 0
            || options.lane_log_size > 1 << 30
        {
            return Err(Error::InvalidArgument(
                "lane_log_size must be a multiple of 4096, 16 KiB..=1 GiB".into(),
            ));
        }
        if options.toc_entries == 0 || options.toc_entries > 1 << 20 {
            return Err(Error::InvalidArgument(
                "toc_entries must be 1..=1048576".into(),
            ));
        }
        check_lane_slots(options.lane_slots).map_err(Error::InvalidArgument)?;
        let geometry = Geometry {
            lane_slots: options.lane_slots,
            ..Geometry::new(
                pool.data_offset(),
                options.lane_count,
                options.lane_log_size,
                options.toc_entries,
            )
        };
        let needed = geometry.size_for_chunks(1);
        if pool.size() < needed {
            pool.grow(needed).map_err(|e| Error::OutOfSpace {
                needed,
                detail: format!("a heap with these options needs a pool of {needed} bytes: {e}"),
            })?;
        }
        let meta_len = geometry.zones_offset + ZONE_HEADER_SIZE - geometry.base;
        pool.ensure_backed(geometry.base, meta_len)
            .map_err(|e| Error::OutOfSpace {
                needed: meta_len,
                detail: e.to_string(),
            })?;
        // Everything but the lanes' bodies starts zeroed: TOC, zone 0's chunk table, the
        // first line of every lane slot (no record there) and the horizon word.
        let zeros =
            vec![0u8; (geometry.toc_entries * TOC_ENTRY_SIZE).max(ZONE_HEADER_SIZE) as usize];
        let toc_len = geometry.toc_entries * TOC_ENTRY_SIZE;
        let mut ranges = vec![
            ByteRange::new(geometry.toc_offset, toc_len),
            ByteRange::new(geometry.zone_offset(0), ZONE_HEADER_SIZE),
            ByteRange::new(geometry.horizon_word_offset(), 8),
            ByteRange::new(geometry.checked_word_offset(), 8),
        ];
        for lane in 0..geometry.lane_count {
            for slot in 0..geometry.lane_slots as u64 {
                ranges.push(ByteRange::new(geometry.slot_offset(lane, slot), 64));
            }
        }
        for r in &ranges {
            pool.write(r.offset, &zeros[..r.len as usize])?;
        }
        // As many sync points as the limit on ranges asks for; all of them before the
        // superblock's.
        for part in ranges.chunks(mnemo_pmem::limits::GMSYNC_RANGES_MAX) {
            mnemo_pmem::durable_site!(
                "heap.create_meta",
                pool.sync(&SyncPoint::new(SyncKind::Metadata, part))
            )?;
        }
        // The superblock last: a crash before this point leaves "no heap", not half a heap.
        let raw = geometry.encode();
        pool.write(geometry.base, raw.as_bytes())?;
        mnemo_pmem::durable_site!(
            "heap.create_superblock",
            pool.sync(&SyncPoint::new(
                SyncKind::Metadata,
                &[ByteRange::new(geometry.base, SUPERBLOCK_SIZE)],
            ))
        )?;
        Heap::open_with(pool, options)
    }

    /// Open the heap in `pool`: recover (replay committed records), then rebuild the
    /// allocator and the table of contents from media.
    ///
    /// Errors: `NotAHeap`, `Corrupt` (superblock, record entries, chunk tables, TOC), `Pool`.
    pub fn open(pool: Pool) -> Result<Heap> {
        Heap::open_with(pool, &HeapOptions::default())
    }

    /// [`Heap::open`] with volatile options (arena count).
    pub fn open_with(pool: Pool, options: &HeapOptions) -> Result<Heap> {
        let base = pool.data_offset();
        if pool.size() < base + SUPERBLOCK_SIZE {
            return Err(Error::NotAHeap(format!(
                "{}: pool too small",
                pool.name().display()
            )));
        }
        let mut raw = RawSuperblock::new_zeroed();
        pool.read(base, raw.as_mut_bytes())?;
        let geometry = Geometry::decode(&raw, base, pool.size()).map_err(|e| match e {
            Error::NotAHeap(_) => Error::NotAHeap(pool.name().display().to_string()),
            other => other,
        })?;
        let lanes = redo::recover(&pool, &geometry)?;
        lanes.set_deferral(geometry.version >= 3);
        let alloc = Allocator::load(&pool, geometry, options.arenas())?;
        let toc = load_toc(&pool, &geometry, &alloc)?;
        Ok(Heap {
            inner: Arc::new(Inner {
                id: HEAP_IDS.fetch_add(1, Ordering::Relaxed),
                pool,
                geometry,
                lanes,
                alloc,
                toc: Mutex::new(toc),
                closed: AtomicBool::new(false),
                limbo: Mutex::new(Vec::new()),
                limbo_min: AtomicU64::new(u64::MAX),
            }),
        })
    }

    /// Refuse every further call on every clone of this handle ([`Error::Closed`]). The pool
    /// file is released when the last clone is dropped.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
    }

    /// Whether [`Heap::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The pool underneath.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Where the heap's areas are.
    pub fn geometry(&self) -> Geometry {
        self.inner.geometry
    }

    /// Space accounting, with fragmentation figures (frees still waiting for the durable
    /// horizon are settled first).
    pub fn stats(&self) -> HeapStats {
        self.settle_frees();
        self.inner.alloc.stats(&self.inner.pool)
    }

    /// Every live allocation as (offset, usable size), sorted (checkers and tests).
    pub fn live_allocations(&self) -> Vec<(u64, u64)> {
        self.settle_frees();
        self.inner.alloc.live(&self.inner.pool)
    }

    /// Usable size of the live object starting at `offset`.
    pub fn usable_size(&self, offset: u64) -> Option<u64> {
        self.settle_frees();
        self.inner.alloc.usable_size(&self.inner.pool, offset)
    }

    fn settle_frees(&self) {
        if self.inner.frees_deferred() && self.inner.check_open().is_ok() {
            if let Err(e) = self.inner.settle() {
                tracing::warn!("settling deferred frees failed: {e}");
            }
        }
    }

    /// Make every later commit on this heap (all clones) durable *including its application
    /// in place* before it returns: two fences per transaction instead of one. For callers
    /// that change bytes written by transactions with plain stores outside transactions (the
    /// C ABI), which must not race a pending application.
    pub fn set_fenced_commits(&self, fenced: bool) {
        self.inner.lanes.set_fenced(fenced);
    }

    /// Records of commits with a sequence number below this are never replayed by recovery
    /// (the largest durable horizon). Compare with [`Heap::next_commit_seq`] read after a
    /// commit returned: once this reaches it, that commit's record is final.
    pub fn durable_horizon(&self) -> u64 {
        self.inner.lanes.durable_horizon()
    }

    /// The sequence number the next commit will take: every commit that has returned has a
    /// smaller one.
    pub fn next_commit_seq(&self) -> u64 {
        self.inner.lanes.next_seq()
    }

    /// Make every transaction committed so far applied, durable and final: recovery will
    /// not replay any of their records again. Needed before bytes a transaction wrote are
    /// changed by plain stores outside transactions (the C ABI's `mnemo_msync` over raw
    /// stores); [`Heap::atomic_update`] does it by itself. Costs up to two fences.
    ///
    /// Errors: `Closed`, `Pool`.
    pub fn retire_committed(&self) -> Result<()> {
        self.inner.check_open()?;
        self.inner.settle()
    }

    /// Read a copy of the value at `ptr` (committed state; not a transaction's pending writes).
    ///
    /// Errors: `Closed`, `InvalidArgument` (outside the data area).
    pub fn get<T: Persist>(&self, ptr: PPtr<T>) -> Result<T> {
        let mut value = T::new_zeroed();
        self.read_bytes(ptr.offset(), value.as_mut_bytes())?;
        Ok(value)
    }

    /// Read bytes of the data area.
    pub fn read_bytes(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.inner.check_open()?;
        if !self.inner.is_data(offset, out.len() as u64) {
            return Err(Error::InvalidArgument(format!(
                "read at {offset:#x} is outside the heap's data area"
            )));
        }
        self.inner.pool.read(offset, out)?;
        Ok(())
    }

    /// Begin a transaction: the returned [`Tx`] is the caller's, ended by [`Tx::commit`] or
    /// [`Tx::abort`] (dropping it aborts). Heap calls made meanwhile (`pmalloc`, `nvalloc`,
    /// another `begin`) are not part of it: use the [`Tx`]'s methods for that.
    ///
    /// Errors: `Closed`.
    pub fn begin(&self) -> Result<Tx<'_>> {
        Tx::begin(self)
    }

    /// [`Heap::begin`] for a transaction that outlives this borrow of the heap (it holds a
    /// clone of the handle): the C ABI keeps one per thread between calls.
    ///
    /// Errors: `Closed`.
    pub fn begin_owned(&self) -> Result<Tx<'static>> {
        Tx::begin_owned(self)
    }

    /// Run `f` as one durable, atomic transaction: all its writes, allocations and frees take
    /// effect together at commit, or none does (on `Err` or panic, which is re-raised after
    /// the abort). Roll back part of it with [`Tx::savepoint`] and [`Tx::rollback_to`].
    ///
    /// Errors: `Closed`, whatever `f` returns, `TransactionTooLarge`, `Aborted` (`f` doomed
    /// it: [`Tx::doom`]), `Pool`.
    pub fn tx<R>(&self, f: impl FnOnce(&Tx<'_>) -> Result<R>) -> Result<R> {
        let tx = self.begin()?;
        match catch_unwind(AssertUnwindSafe(|| f(&tx))) {
            Ok(Ok(value)) => {
                tx.commit()?;
                Ok(value)
            }
            Ok(Err(e)) => {
                tx.abort();
                Err(e)
            }
            Err(panic) => {
                tx.abort();
                resume_unwind(panic)
            }
        }
    }

    /// Allocate `size` bytes (contents unspecified), durably on return, as a transaction of
    /// its own: a small size sets its bitmap bit with one sync point and no redo record; a
    /// large one commits a one-entry record. Leaks if never published: prefer
    /// [`Heap::alloc_into`] (or [`Tx::alloc_bytes`]).
    ///
    /// Errors: `Closed`, `InvalidArgument` (0 bytes), `OutOfSpace`.
    pub fn pmalloc(&self, size: u64) -> Result<u64> {
        if mnemo_pmem::mutant::active("alloc.skip_bitmap") {
            return self.tx(|tx| tx.alloc_bytes(size));
        }
        tx::alloc_alone(self, size)
    }

    /// Allocate a zeroed `T`.
    pub fn alloc<T: Persist>(&self) -> Result<PPtr<T>> {
        self.tx(|tx| tx.alloc::<T>())
    }

    /// Allocate a `T` holding `value` and store its pointer into `dest`, atomically: after a
    /// crash either both happened or neither (PMDK's `pmemobj_alloc` with a destination).
    pub fn alloc_into<T: Persist>(&self, dest: PPtr<PPtr<T>>, value: &T) -> Result<PPtr<T>> {
        self.tx(|tx| {
            let ptr =
                PPtr::<T>::from_offset(tx.alloc_bytes(std::mem::size_of::<T>().max(1) as u64)?);
            tx.write(ptr, value)?;
            tx.write(dest, &ptr)?;
            Ok(ptr)
        })
    }

    /// Free the object at `offset` (a transaction of its own).
    ///
    /// Errors: `Closed`, `InvalidFree` (not the start of a live allocation, or already freed).
    pub fn pfree(&self, offset: u64) -> Result<()> {
        self.tx(|tx| tx.free_offset(offset))
    }

    /// Free the object at `ptr`.
    pub fn free<T>(&self, ptr: PPtr<T>) -> Result<()> {
        self.pfree(ptr.offset())
    }

    /// Consistent update 1: store an 8-byte value with one aligned store and make it durable
    /// (one fence; a sync point). Not transactional: use it on words no concurrent
    /// transaction writes.
    ///
    /// Errors: `Closed`, `InvalidArgument` (size not 8, misaligned, outside the data area).
    pub fn atomic_update<T: Persist>(&self, ptr: PPtr<T>, value: T) -> Result<()> {
        let inner = &*self.inner;
        inner.check_open()?;
        let offset = ptr.offset();
        if std::mem::size_of::<T>() != 8 || offset % 8 != 0 || !inner.is_data(offset, 8) {
            return Err(Error::InvalidArgument(format!(
                "atomic_update needs an 8-byte type at an 8-byte aligned offset of the data area (got {} bytes at {offset:#x})",
                std::mem::size_of::<T>()
            )));
        }
        // A redo record that wrote this word and could still be replayed must be retired
        // first, or a recovery would put its older value back.
        if let Some(seq) = inner.lanes.conflicts(offset) {
            inner.lanes.retire(&inner.pool, &inner.geometry, seq)?;
        }
        let word = u64::read_from_bytes(value.as_bytes())
            .map_err(|_| Error::InvalidArgument("size".into()))?;
        redo::atomic_word(&inner.pool, offset)?.store(word, Ordering::Release);
        mnemo_pmem::durable_site!("heap.atomic_update", inner.pool.msync(offset, 8))?;
        Ok(())
    }

    /// Consistent update 3, shadow update: build a new version of the object `slot` points
    /// to in a fresh allocation, then publish it and free the old version in one redo record.
    /// `build` receives the current version (None if the slot is null).
    ///
    /// Errors: `Closed`, `OutOfSpace`, `InvalidFree` (the slot held a pointer to no live object).
    pub fn shadow_update<T: Persist>(
        &self,
        slot: PPtr<PPtr<T>>,
        build: impl FnOnce(Option<T>) -> T,
    ) -> Result<PPtr<T>> {
        self.tx(|tx| {
            let old: PPtr<T> = tx.read(slot)?;
            let current = if old.is_null() {
                None
            } else {
                Some(tx.read(old)?)
            };
            let value = build(current);
            let new =
                PPtr::<T>::from_offset(tx.alloc_bytes(std::mem::size_of::<T>().max(1) as u64)?);
            tx.write(new, &value)?;
            tx.write(slot, &new)?;
            if !old.is_null() {
                tx.free(old)?;
            }
            Ok(new)
        })
    }

    /// Temporality's `nvalloc`: the region named `name`, created zeroed with `size` bytes if
    /// it does not exist (a transaction of its own; [`Tx::nvalloc`] in a transaction). An
    /// existing region of another size is an error.
    ///
    /// Errors: `Closed`, `NameTooLong`, `InvalidName`, `InvalidArgument` (size 0), `SizeMismatch`, `TocFull`, `NameBusy`, `OutOfSpace`.
    pub fn nvalloc(&self, name: &str, size: u64) -> Result<u64> {
        self.tx(|tx| tx.nvalloc(name, size))
    }

    /// Temporality's `nvfree`: free the region named `name` and remove the name (a
    /// transaction of its own; [`Tx::nvfree`] in a transaction).
    ///
    /// Errors: `Closed`, `NameTooLong`, `InvalidName`, `NoSuchRegion`, `NameBusy`.
    pub fn nvfree(&self, name: &str) -> Result<()> {
        self.tx(|tx| tx.nvfree(name))
    }

    /// The region named `name`, as (offset, size), if it exists (committed).
    pub fn region(&self, name: &str) -> Result<Option<(u64, u64)>> {
        self.inner.check_open()?;
        let toc = self.inner.lock_toc();
        Ok(toc
            .names
            .get(name)
            .filter(|e| e.committed)
            .map(|e| (e.offset, e.size)))
    }

    /// Every named region: (name, offset, size), sorted by name.
    pub fn regions(&self) -> Result<Vec<(String, u64, u64)>> {
        self.inner.check_open()?;
        let toc = self.inner.lock_toc();
        let mut out: Vec<_> = toc
            .names
            .iter()
            .filter(|(_, e)| e.committed)
            .map(|(n, e)| (n.clone(), e.offset, e.size))
            .collect();
        out.sort();
        Ok(out)
    }

    /// A persistent "static variable": the root named `name`, created zeroed on first use.
    pub fn root<T: Persist>(&self, name: &str) -> Result<PPtr<T>> {
        Ok(PPtr::from_offset(
            self.nvalloc(name, std::mem::size_of::<T>().max(1) as u64)?,
        ))
    }
}

impl Tx<'_> {
    /// [`Heap::nvalloc`] in this transaction: the region and its name exist only if it
    /// commits (the name is reserved to it meanwhile: `NameBusy` for others).
    ///
    /// Errors: `Closed`, `NameTooLong`, `InvalidName`, `InvalidArgument` (size 0), `SizeMismatch`, `TocFull`, `NameBusy`, `OutOfSpace`.
    pub fn nvalloc(&self, name: &str, size: u64) -> Result<u64> {
        check_name(name)?;
        if size == 0 {
            return Err(Error::InvalidArgument("region of 0 bytes".into()));
        }
        let token = self.token()?;
        let inner = self.inner();
        let slot = {
            let mut toc = inner.lock_toc();
            if let Some(e) = toc.names.get(name) {
                match (e.committed, e.busy) {
                    (_, Some(t)) if t != token => return Err(Error::NameBusy(name.to_string())),
                    (true, Some(_)) => return Err(Error::NameBusy(name.to_string())),
                    _ => {}
                }
                if e.size != size {
                    return Err(Error::SizeMismatch {
                        name: name.to_string(),
                        existing: e.size,
                        requested: size,
                    });
                }
                return Ok(e.offset);
            }
            let slot = toc
                .free_slots
                .pop()
                .ok_or(Error::TocFull(inner.geometry.toc_entries))?;
            toc.names.insert(
                name.to_string(),
                TocEntry {
                    slot,
                    offset: 0,
                    size,
                    busy: Some(token),
                    committed: false,
                },
            );
            slot
        };
        let owned = name.to_string();
        self.on_abort(move |inner| {
            let mut toc = inner.lock_toc();
            toc.names.remove(&owned);
            toc.free_slots.push(slot);
        })?;
        let offset = self.zalloc_bytes(size)?;
        if let Some(e) = inner.lock_toc().names.get_mut(name) {
            e.offset = offset;
        }
        let entry_offset = inner.geometry.toc_offset + slot * TOC_ENTRY_SIZE;
        self.write_meta(entry_offset, &toc_entry(name, offset, size))?;
        let owned = name.to_string();
        self.on_commit(move |inner| {
            if let Some(e) = inner.lock_toc().names.get_mut(&owned) {
                e.busy = None;
                e.committed = true;
            }
        })?;
        Ok(offset)
    }

    /// [`Heap::nvfree`] in this transaction.
    ///
    /// Errors: `Closed`, `NameTooLong`, `InvalidName`, `NoSuchRegion`, `NameBusy`.
    pub fn nvfree(&self, name: &str) -> Result<()> {
        check_name(name)?;
        let token = self.token()?;
        let inner = self.inner();
        let (slot, offset) = {
            let mut toc = inner.lock_toc();
            let e = toc
                .names
                .get_mut(name)
                .filter(|e| e.committed)
                .ok_or_else(|| Error::NoSuchRegion(name.to_string()))?;
            if e.busy.is_some() {
                return Err(Error::NameBusy(name.to_string()));
            }
            e.busy = Some(token);
            (e.slot, e.offset)
        };
        let owned = name.to_string();
        self.on_abort(move |inner| {
            if let Some(e) = inner.lock_toc().names.get_mut(&owned) {
                e.busy = None;
            }
        })?;
        self.free_offset(offset)?;
        self.write_meta(
            inner.geometry.toc_offset + slot * TOC_ENTRY_SIZE,
            &[0u8; 64],
        )?;
        let owned = name.to_string();
        self.on_commit(move |inner| {
            let mut toc = inner.lock_toc();
            toc.names.remove(&owned);
            toc.free_slots.push(slot);
        })?;
        Ok(())
    }

    /// [`Heap::root`] in this transaction.
    pub fn root<T: Persist>(&self, name: &str) -> Result<PPtr<T>> {
        Ok(PPtr::from_offset(
            self.nvalloc(name, std::mem::size_of::<T>().max(1) as u64)?,
        ))
    }
}
fn load_toc(pool: &Pool, geometry: &Geometry, alloc: &Allocator) -> Result<Toc> {
    let mut bytes = vec![0u8; (geometry.toc_entries * TOC_ENTRY_SIZE) as usize];
    pool.read(geometry.toc_offset, &mut bytes)?;
    let mut toc = Toc::default();
    for slot in (0..geometry.toc_entries).rev() {
        let at = (slot * TOC_ENTRY_SIZE) as usize;
        match toc_decode(&bytes[at..at + TOC_ENTRY_SIZE as usize])? {
            None => toc.free_slots.push(slot),
            Some((name, offset, size)) => {
                if alloc
                    .usable_size(pool, offset)
                    .is_none_or(|usable| usable < size)
                {
                    return Err(Error::Corrupt(format!(
                        "region {name:?} points at {offset:#x}+{size}, which is no live allocation of that size"
                    )));
                }
                if toc
                    .names
                    .insert(
                        name.clone(),
                        TocEntry {
                            slot,
                            offset,
                            size,
                            busy: None,
                            committed: true,
                        },
                    )
                    .is_some()
                {
                    return Err(Error::Corrupt(format!(
                        "region name {name:?} appears twice"
                    )));
                }
            }
        }
    }
    Ok(toc)
}
