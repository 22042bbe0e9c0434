//! The allocator's volatile state, rebuilt at open from the chunk tables and run bitmaps.
//!
//! Persistent state (chunk-table entries, run bitmaps) changes only through redo records:
//! the allocator hands back a [`MetaOp`] for each reservation or free, and the transaction
//! puts it in its record. Volatile state tracks, per unit, "used" (allocated or reserved),
//! "reserved" (by a transaction, resolved against the run's bitmap word in the pool: a
//! committed one left its mark, see `Run::uncommitted`) and "pending" (freed by a transaction not
//! yet committed), so a unit is reusable only once the record that freed it is applied.
//!
//! Scalability: runs belong to arenas; a thread allocates from its arena (threads are spread
//! over arenas round-robin), so threads rarely share a lock. Whole chunks come from one
//! global index (best fit over free spans, coalesced within a zone).
//!
//! Lock order: arena, then chunks, then a lane (run creation commits a record). Commit
//! effects run after the committing thread released its lane.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::{thread_local, Mutex, MutexGuard};

use mnemo_pmem::{ByteRange, Pool, SyncKind, SyncPoint};

use crate::error::{Error, Result};
use crate::layout::{
    bitmap_words, class_count, class_for, class_sizes, run_layout, ChunkEntry, Geometry,
    CHUNKS_PER_ZONE, CHUNK_SIZE, SMALL_SIZE_MAX,
};

/// A persistent metadata change for the transaction's redo record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaOp {
    /// OR a mask into a bitmap word.
    Or(u64, u64),
    /// Clear a mask from a bitmap word.
    AndNot(u64, u64),
    /// Store a chunk-table entry.
    Entry(u64, u64),
}

/// An allocation made by a transaction that has not committed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Offset of the object.
    pub offset: u64,
    /// Usable size.
    pub size: u64,
    kind: Kind,
}

#[cfg(test)]
impl Reservation {
    /// A small allocation's reservation at `offset`, for tests of a transaction's bookkeeping.
    pub(crate) fn for_test(offset: u64, size: u64) -> Reservation {
        Reservation {
            offset,
            size,
            kind: Kind::Small {
                arena: 0,
                chunk: 0,
                unit: 0,
            },
        }
    }
}

/// A thread cache's claim (see [`Allocator::claim`]) holds about this many bytes of units.
pub const CLAIM_BYTES: u64 = 4096;

/// Units of one bitmap word of a run, claimed by one thread's allocation cache: marked used
/// and reserved in the run, handed out one by one without the allocator's locks.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    arena: u16,
    chunk: u64,
    /// Unit size.
    size: u64,
    /// Index of the bitmap word.
    word: u64,
    /// Claimed units not handed out yet (bits of the word).
    avail: u64,
    /// Offset of unit 0 and of the run's bitmap.
    data: u64,
    bitmap: u64,
}

impl Claim {
    fn of(run: &Run, arena: u16, chunk: u64, word: u64, mask: u64) -> Claim {
        Claim {
            arena,
            chunk,
            size: class_sizes()[run.class as usize],
            word,
            avail: mask,
            data: run.data,
            bitmap: run.bitmap,
        }
    }

    /// Hand out the lowest claimed unit: its reservation and the record entry that sets its
    /// bitmap bit.
    pub fn take(&mut self) -> Option<(Reservation, MetaOp)> {
        if self.avail == 0 {
            return None;
        }
        let bit = self.avail.trailing_zeros() as u64;
        self.avail &= self.avail - 1;
        let unit = self.word * 64 + bit;
        Some((
            Reservation {
                offset: self.data + unit * self.size,
                size: self.size,
                kind: Kind::Small {
                    arena: self.arena,
                    chunk: self.chunk,
                    unit,
                },
            },
            MetaOp::Or(self.bitmap + self.word * 8, 1 << bit),
        ))
    }
}

/// A free requested by a transaction that has not committed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingFree {
    /// Offset of the object.
    pub offset: u64,
    kind: Kind,
    /// Large: the status before the free.
    prev: Status,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Small { arena: u16, chunk: u64, unit: u64 },
    Large { chunk: u64, chunks: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Reserved,
    Live,
    Freeing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    Free,
    Run { arena: u16 },
    Large { chunks: u32, status: Status },
    Continuation,
}

#[derive(Debug, Default)]
struct Chunks {
    state: Vec<ChunkState>,
    by_size: BTreeSet<(u64, u64)>,
    by_start: BTreeMap<u64, u64>,
}

impl Chunks {
    fn insert_span(&mut self, mut start: u64, mut len: u64) {
        for c in start..start + len {
            self.state[c as usize] = ChunkState::Free;
        }
        let zone = start / CHUNKS_PER_ZONE;
        if let Some((&ps, &pl)) = self.by_start.range(..start).next_back() {
            if ps + pl == start && ps / CHUNKS_PER_ZONE == zone {
                self.by_start.remove(&ps);
                self.by_size.remove(&(pl, ps));
                start = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.by_start.get(&(start + len)) {
            if (start + len) / CHUNKS_PER_ZONE == zone {
                self.by_start.remove(&(start + len));
                self.by_size.remove(&(nl, start + len));
                len += nl;
            }
        }
        self.by_start.insert(start, len);
        self.by_size.insert((len, start));
    }

    fn take(&mut self, n: u64) -> Option<u64> {
        let &(len, start) = self.by_size.range((n, 0)..).next()?;
        self.by_size.remove(&(len, start));
        self.by_start.remove(&start);
        if len > n {
            self.by_start.insert(start + n, len - n);
            self.by_size.insert((len - n, start + n));
        }
        Some(start)
    }

    /// Add chunks `from..to` (new pool space) as free spans, split at zone boundaries.
    fn add(&mut self, from: u64, to: u64) {
        self.state.resize(to as usize, ChunkState::Free);
        let mut c = from;
        while c < to {
            let zone_end = (c / CHUNKS_PER_ZONE + 1) * CHUNKS_PER_ZONE;
            let end = zone_end.min(to);
            self.insert_span(c, end - c);
            c = end;
        }
    }

    /// Chunks a pool must have so that `n` contiguous free chunks exist in one zone.
    fn needed_for(&self, n: u64) -> u64 {
        let total = self.state.len() as u64;
        let tail = self
            .by_start
            .range(..total)
            .next_back()
            .filter(|(&s, &l)| s + l == total)
            .map_or(0, |(_, &l)| l);
        let in_zone = total % CHUNKS_PER_ZONE;
        if in_zone + (n - tail.min(n)) <= CHUNKS_PER_ZONE {
            total + (n - tail.min(n))
        } else {
            (total / CHUNKS_PER_ZONE + 1) * CHUNKS_PER_ZONE + n
        }
    }
}

#[derive(Debug)]
struct Run {
    class: u8,
    units: u64,
    data: u64,
    bitmap: u64,
    used: Vec<u64>,
    reserved: Vec<u64>,
    pending: Vec<u64>,
    free: u64,
    listed: bool,
    hint: usize,
}

impl Run {
    fn new(geometry: &Geometry, chunk: u64, class: u8, persistent: &[u64]) -> Run {
        let (units, header) = run_layout(class);
        let words = bitmap_words(units) as usize;
        let mut used: Vec<u64> = persistent.to_vec();
        used.resize(words, 0);
        // Bits past the last unit read as used, so the search never hands them out.
        if units % 64 != 0 {
            used[words - 1] |= !0u64 << (units % 64);
        }
        let free = words as u64 * 64 - used.iter().map(|w| w.count_ones() as u64).sum::<u64>();
        let base = geometry.chunk_offset(chunk);
        Run {
            class,
            units,
            data: base + header,
            bitmap: base,
            used,
            reserved: vec![0; words],
            pending: vec![0; words],
            free,
            listed: false,
            hint: 0,
        }
    }

    /// Whether unit (`w`, `bit`) is reserved by a transaction that has not committed.
    ///
    /// A commit does not clear its units' `reserved` marks (that would take the arena's lock
    /// a second time per allocation, after the fence): the mark is resolved here instead,
    /// under the arena's lock, by the run's bitmap word in the pool. A commit applies its
    /// record (which sets the unit's bit there) before it returns, and a unit is free in
    /// `used` only once its bit there is clear (a freeing record applied, an aborted
    /// reservation never set it, a new run's bitmap is zeroed): so a reserved unit whose bit
    /// is set belongs to a committed transaction. Such a stale mark is cleared.
    fn uncommitted(&mut self, pool: &Pool, w: usize, bit: u64) -> bool {
        self.reserved[w] & bit != 0 && self.resolve(pool, w) & bit != 0
    }

    /// How many units are reserved by transactions that have not committed (or held in a
    /// thread's cache), as [`Run::uncommitted`] judges them; stale marks are cleared.
    fn uncommitted_units(&mut self, pool: &Pool) -> u64 {
        let mut count = 0;
        for w in 0..self.reserved.len() {
            if self.reserved[w] != 0 {
                count += self.resolve(pool, w).count_ones() as u64;
            }
        }
        count
    }

    /// Clear the marks of bitmap word `w` whose bits the pool's bitmap word has (committed);
    /// returns the marks left (not committed).
    fn resolve(&mut self, pool: &Pool, w: usize) -> u64 {
        let applied = crate::redo::atomic_word(pool, self.bitmap + w as u64 * 8)
            .map_or(0, |word| word.load(Ordering::Acquire));
        self.reserved[w] &= !applied;
        self.reserved[w]
    }

    /// The first bitmap word with a free unit, searching from the hint round the run.
    fn free_word(&self) -> Option<usize> {
        let n = self.used.len();
        (0..n)
            .map(|k| (self.hint + k) % n)
            .find(|&w| self.used[w] != u64::MAX)
    }

    fn take_unit(&mut self) -> Option<u64> {
        let w = self.free_word()?;
        let bit = (!self.used[w]).trailing_zeros() as u64;
        self.used[w] |= 1 << bit;
        self.reserved[w] |= 1 << bit;
        self.free -= 1;
        self.hint = w;
        Some(w as u64 * 64 + bit)
    }
}

/// Chunk numbers are small distinct integers: a multiply is hash enough (SipHash showed up
/// in allocation profiles).
#[derive(Default)]
struct ChunkHasher(u64);

impl std::hash::Hasher for ChunkHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type RunMap = HashMap<u64, Run, std::hash::BuildHasherDefault<ChunkHasher>>;

#[derive(Debug)]
struct Arena {
    runs: RunMap,
    avail: Vec<Vec<u64>>,
}

impl Arena {
    fn list(&mut self, chunk: u64) {
        if let Some(run) = self.runs.get_mut(&chunk) {
            if !run.listed && run.free > 0 {
                run.listed = true;
                self.avail[run.class as usize].push(chunk);
            }
        }
    }
}

/// Per-class figures of [`HeapStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Object size of the class.
    pub size: u64,
    /// Runs of the class.
    pub runs: u64,
    /// Units in those runs.
    pub units: u64,
    /// Units of committed allocations.
    pub used: u64,
}

/// Space accounting of a heap (fragmentation report).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Chunks in the pool.
    pub chunks: u64,
    /// Chunks not in use.
    pub chunks_free: u64,
    /// Largest span of free chunks (the largest large allocation possible without growth).
    pub largest_free_span: u64,
    /// Bytes of committed allocations (class sizes, whole chunks for large allocations).
    pub used_bytes: u64,
    /// Bytes free: free units of runs plus free chunks. Units reserved by transactions that
    /// have not committed, or held in threads' allocation caches (at most `CLAIM_BYTES` per
    /// size class per thread), count as free.
    pub free_bytes: u64,
    /// Large allocations live.
    pub large_allocations: u64,
    /// Per size class (only classes with runs).
    pub classes: Vec<ClassStats>,
}

impl HeapStats {
    /// Share of free bytes that sits in partly used runs rather than free chunks
    /// (0: none; near 1: the free space is scattered).
    pub fn fragmentation(&self) -> f64 {
        let in_runs = self
            .free_bytes
            .saturating_sub(self.chunks_free * CHUNK_SIZE);
        if self.free_bytes == 0 {
            0.0
        } else {
            in_runs as f64 / self.free_bytes as f64
        }
    }
}

/// An arena's lock on cache lines of its own (and the adjacent-line prefetch pair): arenas
/// of different threads side by side would share a line, and every allocation takes its
/// arena's lock.
#[derive(Debug)]
#[repr(align(128))]
struct ArenaSlot(Mutex<Arena>);

/// The allocator.
#[derive(Debug)]
pub struct Allocator {
    geometry: Geometry,
    chunks: Mutex<Chunks>,
    arenas: Box<[ArenaSlot]>,
    next_arena: AtomicUsize,
    /// Process-unique identity, for the thread-local hint.
    instance: u64,
}

thread_local! {
    // (instance, hint): a thread's choice, per instance so a new heap starts afresh
    // (deterministic lane and arena choice for the crash simulator's replays).
    static ARENA_HINT: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, 0)) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read_words(pool: &Pool, offset: u64, n: usize) -> Result<Vec<u64>> {
    let mut bytes = vec![0u8; n * 8];
    pool.read(offset, &mut bytes)?;
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

impl Allocator {
    /// Rebuild from media: walk every zone's chunk table, read every run's bitmap.
    pub fn load(pool: &Pool, geometry: Geometry, arenas: usize) -> Result<Allocator> {
        let total = geometry.chunks_in(pool.size());
        let mut chunks = Chunks {
            state: vec![ChunkState::Free; total as usize],
            ..Chunks::default()
        };
        let mut arena_list: Vec<Arena> = (0..arenas)
            .map(|_| Arena {
                runs: RunMap::default(),
                avail: vec![Vec::new(); class_count()],
            })
            .collect();
        let mut next_arena = 0usize;
        let mut zone = 0;
        while zone * CHUNKS_PER_ZONE < total {
            let first = zone * CHUNKS_PER_ZONE;
            let in_zone = (total - first).min(CHUNKS_PER_ZONE);
            let table = read_words(pool, geometry.zone_offset(zone), in_zone as usize)?;
            let mut i = 0u64;
            let mut free_start: Option<u64> = None;
            while i < in_zone {
                let c = first + i;
                let entry = ChunkEntry::decode(table[i as usize]).ok_or_else(|| {
                    Error::Corrupt(format!(
                        "chunk {c}: invalid chunk-table entry {:#x}",
                        table[i as usize]
                    ))
                })?;
                if entry != ChunkEntry::Free {
                    if let Some(s) = free_start.take() {
                        chunks.insert_span(s, c - s);
                    }
                }
                match entry {
                    ChunkEntry::Free => {
                        free_start.get_or_insert(c);
                        i += 1;
                    }
                    ChunkEntry::Run { class } => {
                        let (units, _) = run_layout(class);
                        let bitmap = read_words(
                            pool,
                            geometry.chunk_offset(c),
                            bitmap_words(units) as usize,
                        )?;
                        let arena = next_arena % arenas;
                        next_arena += 1;
                        let run = Run::new(&geometry, c, class, &bitmap);
                        chunks.state[c as usize] = ChunkState::Run {
                            arena: arena as u16,
                        };
                        arena_list[arena].runs.insert(c, run);
                        arena_list[arena].list(c);
                        i += 1;
                    }
                    ChunkEntry::Large { chunks: n } => {
                        if i + n as u64 > in_zone {
                            return Err(Error::Corrupt(format!(
                                "chunk {c}: large allocation of {n} chunks overruns its zone"
                            )));
                        }
                        chunks.state[c as usize] = ChunkState::Large {
                            chunks: n,
                            status: Status::Live,
                        };
                        for k in 1..n as u64 {
                            chunks.state[(c + k) as usize] = ChunkState::Continuation;
                        }
                        i += n as u64;
                    }
                }
            }
            if let Some(s) = free_start.take() {
                chunks.insert_span(s, first + in_zone - s);
            }
            zone += 1;
        }
        Ok(Allocator {
            geometry,
            chunks: Mutex::new(chunks),
            arenas: arena_list
                .into_iter()
                .map(|a| ArenaSlot(Mutex::new(a)))
                .collect(),
            next_arena: AtomicUsize::new(0),
            instance: crate::next_instance(),
        })
    }

    fn my_arena(&self) -> usize {
        let (instance, mut hint) = ARENA_HINT.with(|h| h.get());
        if instance != self.instance {
            hint = self.next_arena.fetch_add(1, Ordering::Relaxed);
            ARENA_HINT.with(|h| h.set((self.instance, hint)));
        }
        hint % self.arenas.len()
    }

    /// Take `n` contiguous chunks, growing the pool if needed; backed by storage on return.
    fn take_chunks(&self, pool: &Pool, n: u64) -> Result<u64> {
        let mut chunks = lock(&self.chunks);
        let start = match chunks.take(n) {
            Some(s) => s,
            None => {
                self.grow(pool, &mut chunks, n)?;
                chunks.take(n).ok_or_else(|| Error::OutOfSpace {
                    needed: n * CHUNK_SIZE,
                    detail: "no free span after growth".into(),
                })?
            }
        };
        let offset = self.geometry.chunk_offset(start);
        if let Err(e) = pool.ensure_backed(offset, n * CHUNK_SIZE) {
            chunks.insert_span(start, n);
            return Err(Error::OutOfSpace {
                needed: n * CHUNK_SIZE,
                detail: e.to_string(),
            });
        }
        Ok(start)
    }

    fn grow(&self, pool: &Pool, chunks: &mut Chunks, n: u64) -> Result<()> {
        let total = chunks.state.len() as u64;
        let needed = chunks.needed_for(n);
        let limit = pool.header().size_max.min(pool.capacity());
        let max_chunks = self.geometry.chunks_in(limit);
        if needed > max_chunks {
            return Err(Error::OutOfSpace {
                needed: n * CHUNK_SIZE,
                detail: format!(
                    "pool maximum size {limit} bytes holds {max_chunks} chunks, {needed} needed"
                ),
            });
        }
        // Grow by half the heap at least (amortized), but never past the maximum.
        let generous = needed.max(total + total / 2).max(total + 4).min(max_chunks);
        let mut grown = None;
        for target in [generous, needed] {
            match pool.grow(self.geometry.size_for_chunks(target)) {
                Ok(()) => {
                    grown = Some(target);
                    break;
                }
                Err(e) => tracing::debug!("pool growth to {target} chunks failed: {e}"),
            }
        }
        let Some(target) = grown else {
            return Err(Error::OutOfSpace {
                needed: n * CHUNK_SIZE,
                detail: "the pool could not grow".into(),
            });
        };
        let target = target.min(self.geometry.chunks_in(pool.size()));
        // New zone tables read as zero (new pool bytes do) but must be backed before use:
        // each alone, not the gigabyte of chunks between two of them (on tmpfs that is memory,
        // taken when the chunks are).
        for zone in total / CHUNKS_PER_ZONE..=(target - 1) / CHUNKS_PER_ZONE {
            pool.ensure_backed(
                self.geometry.zone_offset(zone),
                crate::layout::ZONE_HEADER_SIZE,
            )
            .map_err(|e| Error::OutOfSpace {
                needed: n * CHUNK_SIZE,
                detail: e.to_string(),
            })?;
        }
        chunks.add(total, target);
        tracing::debug!(from = total, to = target, "heap grew");
        Ok(())
    }

    /// Reserve `size` bytes. `publish_run` makes a new run durable (an internal record) when
    /// the arena has no room in that class.
    pub fn alloc(
        &self,
        pool: &Pool,
        size: u64,
        publish_run: &dyn Fn(u64, u8) -> Result<()>,
    ) -> Result<(Reservation, MetaOp)> {
        self.alloc_as(pool, size, true, publish_run)
    }

    /// [`Allocator::alloc`]; with `reserve` false the unit is marked live at once, so no
    /// [`Allocator::commit_alloc`] follows (an allocation committed on its own, whose offset
    /// nobody can know, hence free, before its record is durable).
    pub fn alloc_as(
        &self,
        pool: &Pool,
        size: u64,
        reserve: bool,
        publish_run: &dyn Fn(u64, u8) -> Result<()>,
    ) -> Result<(Reservation, MetaOp)> {
        if size == 0 {
            return Err(Error::InvalidArgument("allocation of 0 bytes".into()));
        }
        match class_for(size) {
            Some(class) if size <= SMALL_SIZE_MAX => {
                self.alloc_small(pool, class, reserve, publish_run)
            }
            _ => self.alloc_large(pool, size, reserve),
        }
    }

    fn alloc_small(
        &self,
        pool: &Pool,
        class: u8,
        reserve: bool,
        publish_run: &dyn Fn(u64, u8) -> Result<()>,
    ) -> Result<(Reservation, MetaOp)> {
        self.with_run(pool, class, publish_run, |run, arena, chunk| {
            let unit = run
                .take_unit()
                .ok_or_else(|| Error::Corrupt("listed run without a free unit".into()))?;
            if !reserve {
                run.reserved[(unit / 64) as usize] &= !(1 << (unit % 64));
            }
            Claim::of(run, arena, chunk, unit / 64, 1 << (unit % 64))
                .take()
                .ok_or_else(|| Error::Corrupt("empty claim".into()))
        })
    }

    /// Claim units of class `class` for one thread's cache: up to `CLAIM_BYTES` worth (at
    /// least one, at most a bitmap word's 64) of the free units of one bitmap word of a run,
    /// marked used and reserved here as one reservation each would be. The thread hands
    /// them out with [`Claim::take`] without this allocator's locks; each then commits or
    /// aborts like any reservation, and the ones never handed out go back with
    /// [`Allocator::unclaim`].
    pub fn claim(
        &self,
        pool: &Pool,
        class: u8,
        publish_run: &dyn Fn(u64, u8) -> Result<()>,
    ) -> Result<Claim> {
        let limit = (CLAIM_BYTES / class_sizes()[class as usize]).clamp(1, 64) as u32;
        self.with_run(pool, class, publish_run, |run, arena, chunk| {
            let w = run
                .free_word()
                .ok_or_else(|| Error::Corrupt("listed run without a free unit".into()))?;
            // The lowest `limit` free bits of the word.
            let mut mask = 0u64;
            let mut free = !run.used[w];
            for _ in 0..limit {
                if free == 0 {
                    break;
                }
                let low = free & free.wrapping_neg();
                mask |= low;
                free &= !low;
            }
            run.used[w] |= mask;
            run.reserved[w] |= mask;
            run.free -= mask.count_ones() as u64;
            run.hint = w;
            Ok(Claim::of(run, arena, chunk, w as u64, mask))
        })
    }

    /// Give back the units of `claim` never handed out.
    pub fn unclaim(&self, claim: &Claim) {
        if claim.avail == 0 {
            return;
        }
        let mut guard = lock(&self.arenas[claim.arena as usize].0);
        if let Some(run) = guard.runs.get_mut(&claim.chunk) {
            let w = claim.word as usize;
            run.used[w] &= !claim.avail;
            run.reserved[w] &= !claim.avail;
            run.free += claim.avail.count_ones() as u64;
        }
        guard.list(claim.chunk);
    }

    /// Run `f` on a run of `class` with a free unit, in this thread's arena (under its lock),
    /// making a new run when the arena has none.
    fn with_run<R>(
        &self,
        pool: &Pool,
        class: u8,
        publish_run: &dyn Fn(u64, u8) -> Result<()>,
        f: impl FnOnce(&mut Run, u16, u64) -> Result<R>,
    ) -> Result<R> {
        let a = self.my_arena();
        let mut arena = lock(&self.arenas[a].0);
        let chunk = loop {
            match arena.avail[class as usize].last().copied() {
                Some(c) => {
                    let run = arena.runs.get_mut(&c).filter(|r| r.free > 0);
                    match run {
                        Some(_) => break c,
                        None => {
                            arena.avail[class as usize].pop();
                            if let Some(r) = arena.runs.get_mut(&c) {
                                r.listed = false;
                            }
                        }
                    }
                }
                None => {
                    let c = self.new_run(pool, class, a, publish_run)?;
                    let (units, _) = run_layout(class);
                    arena.runs.insert(
                        c,
                        Run::new(
                            &self.geometry,
                            c,
                            class,
                            &vec![0; bitmap_words(units) as usize],
                        ),
                    );
                    arena.list(c);
                    break c;
                }
            }
        };
        let run = arena
            .runs
            .get_mut(&chunk)
            .ok_or_else(|| Error::Corrupt("run vanished".into()))?;
        f(run, a as u16, chunk)
    }

    fn new_run(
        &self,
        pool: &Pool,
        class: u8,
        arena: usize,
        publish_run: &dyn Fn(u64, u8) -> Result<()>,
    ) -> Result<u64> {
        let chunk = self.take_chunks(pool, 1)?;
        let (units, _) = run_layout(class);
        let base = self.geometry.chunk_offset(chunk);
        // The chunk is free, so nothing refers to its bytes: clear the bitmap in place, and
        // make it durable with a sync point of its own before the run's record publishes the
        // chunk-table entry (a crash between them leaves a free chunk with a clear bitmap).
        let zero = vec![0u8; (bitmap_words(units) * 8) as usize];
        let result = pool.write(base, &zero).map_err(Error::from).and_then(|()| {
            mnemo_pmem::durable_site!(
                "alloc.run_bitmap",
                pool.sync(&SyncPoint::new(
                    SyncKind::Metadata,
                    &[ByteRange::new(base, zero.len() as u64)],
                ))
            )?;
            publish_run(chunk, class)
        });
        let mut chunks = lock(&self.chunks);
        match result {
            Ok(()) => {
                chunks.state[chunk as usize] = ChunkState::Run {
                    arena: arena as u16,
                };
                Ok(chunk)
            }
            Err(e) => {
                chunks.insert_span(chunk, 1);
                Err(e)
            }
        }
    }

    fn alloc_large(&self, pool: &Pool, size: u64, reserve: bool) -> Result<(Reservation, MetaOp)> {
        let n = size.div_ceil(CHUNK_SIZE);
        if n > CHUNKS_PER_ZONE {
            return Err(Error::OutOfSpace {
                needed: size,
                detail: format!(
                    "the largest allocation is {} bytes",
                    CHUNKS_PER_ZONE * CHUNK_SIZE
                ),
            });
        }
        let start = self.take_chunks(pool, n)?;
        let mut chunks = lock(&self.chunks);
        chunks.state[start as usize] = ChunkState::Large {
            chunks: n as u32,
            status: if reserve {
                Status::Reserved
            } else {
                Status::Live
            },
        };
        for k in 1..n {
            chunks.state[(start + k) as usize] = ChunkState::Continuation;
        }
        let entry = ChunkEntry::Large { chunks: n as u32 }.encode();
        let op = MetaOp::Entry(self.geometry.chunk_entry_offset(start), entry);
        let offset = self.geometry.chunk_offset(start);
        Ok((
            Reservation {
                offset,
                size: n * CHUNK_SIZE,
                kind: Kind::Large {
                    chunk: start,
                    chunks: n as u32,
                },
            },
            op,
        ))
    }

    /// Mark the object at `offset` to be freed at commit. `own` is true when the calling
    /// transaction reserved it itself.
    pub fn free(&self, pool: &Pool, offset: u64, own: bool) -> Result<(PendingFree, MetaOp)> {
        let invalid = |detail| Error::InvalidFree { offset, detail };
        let chunk = self
            .geometry
            .chunk_of(offset)
            .ok_or_else(|| invalid("not inside the heap's data area"))?;
        let mut chunks = lock(&self.chunks);
        let state = *chunks
            .state
            .get(chunk as usize)
            .ok_or_else(|| invalid("beyond the end of the heap"))?;
        match state {
            ChunkState::Free => Err(invalid(
                "in a free chunk (never allocated, or already freed)",
            )),
            ChunkState::Continuation => Err(invalid("inside a large allocation, not its start")),
            ChunkState::Large { chunks: n, status } => {
                if offset != self.geometry.chunk_offset(chunk) {
                    return Err(invalid("inside a large allocation, not its start"));
                }
                match status {
                    Status::Freeing => {
                        return Err(invalid("already freed by a transaction in progress"))
                    }
                    Status::Reserved if !own => {
                        return Err(invalid("allocated by a transaction that has not committed"))
                    }
                    _ => {}
                }
                chunks.state[chunk as usize] = ChunkState::Large {
                    chunks: n,
                    status: Status::Freeing,
                };
                let op = MetaOp::Entry(
                    self.geometry.chunk_entry_offset(chunk),
                    ChunkEntry::Free.encode(),
                );
                Ok((
                    PendingFree {
                        offset,
                        kind: Kind::Large { chunk, chunks: n },
                        prev: status,
                    },
                    op,
                ))
            }
            ChunkState::Run { arena: a } => {
                drop(chunks);
                let mut arena = lock(&self.arenas[a as usize].0);
                let run = arena
                    .runs
                    .get_mut(&chunk)
                    .ok_or_else(|| invalid("run state missing"))?;
                let size = class_sizes()[run.class as usize];
                let rel = offset
                    .checked_sub(run.data)
                    .ok_or_else(|| invalid("in a run's bitmap, not an object"))?;
                if rel % size != 0 || rel / size >= run.units {
                    return Err(invalid("not the start of an object"));
                }
                let unit = rel / size;
                let (w, bit) = ((unit / 64) as usize, 1u64 << (unit % 64));
                if run.used[w] & bit == 0 {
                    return Err(invalid("not allocated (never allocated, or already freed)"));
                }
                if run.pending[w] & bit != 0 {
                    return Err(invalid("already freed by a transaction in progress"));
                }
                if !own && run.uncommitted(pool, w, bit) {
                    return Err(invalid("allocated by a transaction that has not committed"));
                }
                run.pending[w] |= bit;
                let op = MetaOp::AndNot(run.bitmap + w as u64 * 8, bit);
                let kind = Kind::Small {
                    arena: a,
                    chunk,
                    unit,
                };
                Ok((
                    PendingFree {
                        offset,
                        kind,
                        prev: Status::Live,
                    },
                    op,
                ))
            }
        }
    }

    fn with_unit(&self, arena: u16, chunk: u64, unit: u64, f: impl FnOnce(&mut Run, usize, u64)) {
        let mut arena_guard = lock(&self.arenas[arena as usize].0);
        if let Some(run) = arena_guard.runs.get_mut(&chunk) {
            f(run, (unit / 64) as usize, 1 << (unit % 64));
        }
        arena_guard.list(chunk);
    }

    /// The transaction that reserved `r` committed (its record applied). A unit of a run
    /// needs nothing: its `reserved` mark now reads as committed (see `Run::uncommitted`).
    pub fn commit_alloc(&self, r: &Reservation) {
        match r.kind {
            Kind::Small { .. } => {}
            Kind::Large { chunk, chunks: n } => {
                let mut chunks = lock(&self.chunks);
                if let ChunkState::Large {
                    status: s @ Status::Reserved,
                    ..
                } = &mut chunks.state[chunk as usize]
                {
                    *s = Status::Live;
                }
                let _ = n;
            }
        }
    }

    /// The transaction that reserved `r` aborted.
    pub fn abort_alloc(&self, r: &Reservation) {
        match r.kind {
            Kind::Small { arena, chunk, unit } => {
                self.with_unit(arena, chunk, unit, |run, w, bit| {
                    run.used[w] &= !bit;
                    run.reserved[w] &= !bit;
                    run.pending[w] &= !bit;
                    run.free += 1;
                })
            }
            Kind::Large { chunk, chunks: n } => lock(&self.chunks).insert_span(chunk, n as u64),
        }
    }

    /// The transaction that freed `f` committed: the space is reusable now. A run left empty
    /// while its arena has another run of the class with room goes back to the chunk pool;
    /// `release_run` makes that durable (a record of its own setting the chunk entry to free).
    pub fn commit_free(&self, f: &PendingFree, release_run: &dyn Fn(u64) -> Result<()>) {
        match f.kind {
            Kind::Small { arena, chunk, unit } => {
                let mut guard = lock(&self.arenas[arena as usize].0);
                let Some(run) = guard.runs.get_mut(&chunk) else {
                    return;
                };
                let (w, bit) = ((unit / 64) as usize, 1u64 << (unit % 64));
                run.used[w] &= !bit;
                run.reserved[w] &= !bit;
                run.pending[w] &= !bit;
                run.free += 1;
                let (class, empty) = (run.class, run.free == run.units);
                guard.list(chunk);
                if !empty {
                    return;
                }
                let other = guard.avail[class as usize]
                    .iter()
                    .any(|&c| c != chunk && guard.runs.get(&c).is_some_and(|r| r.free > 0));
                if !other {
                    return;
                }
                let Some(run) = guard.runs.remove(&chunk) else {
                    return;
                };
                if let Err(e) = release_run(chunk) {
                    tracing::debug!("releasing empty run {chunk} failed: {e}");
                    guard.runs.insert(chunk, run);
                    return;
                }
                guard.avail[class as usize].retain(|&c| c != chunk);
                drop(guard);
                lock(&self.chunks).insert_span(chunk, 1);
            }
            Kind::Large { chunk, chunks: n } => lock(&self.chunks).insert_span(chunk, n as u64),
        }
    }

    /// The transaction that freed `f` aborted.
    pub fn abort_free(&self, f: &PendingFree) {
        match f.kind {
            Kind::Small { arena, chunk, unit } => {
                self.with_unit(arena, chunk, unit, |run, w, bit| run.pending[w] &= !bit)
            }
            Kind::Large { chunk, chunks: n } => {
                lock(&self.chunks).state[chunk as usize] = ChunkState::Large {
                    chunks: n,
                    status: f.prev,
                };
            }
        }
    }

    /// Usable size of the live object at `offset`, if it is the start of one.
    pub fn usable_size(&self, pool: &Pool, offset: u64) -> Option<u64> {
        let chunk = self.geometry.chunk_of(offset)?;
        let state = *lock(&self.chunks).state.get(chunk as usize)?;
        match state {
            ChunkState::Large {
                chunks,
                status: Status::Live | Status::Freeing,
            } if offset == self.geometry.chunk_offset(chunk) => Some(chunks as u64 * CHUNK_SIZE),
            ChunkState::Run { arena } => {
                let mut arena = lock(&self.arenas[arena as usize].0);
                let run = arena.runs.get_mut(&chunk)?;
                let size = class_sizes()[run.class as usize];
                let rel = offset.checked_sub(run.data)?;
                let unit = rel / size;
                let (w, bit) = ((unit / 64) as usize, 1u64 << (unit % 64));
                let live = rel % size == 0
                    && unit < run.units
                    && run.used[w] & bit != 0
                    && !run.uncommitted(pool, w, bit);
                live.then_some(size)
            }
            _ => None,
        }
    }

    /// Every live allocation (offset, usable size), in offset order (tests, checkers).
    pub fn live(&self, pool: &Pool) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        {
            let chunks = lock(&self.chunks);
            for (c, s) in chunks.state.iter().enumerate() {
                if let ChunkState::Large {
                    chunks: n,
                    status: Status::Live | Status::Freeing,
                } = s
                {
                    out.push((self.geometry.chunk_offset(c as u64), *n as u64 * CHUNK_SIZE));
                }
            }
        }
        for arena in self.arenas.iter() {
            let mut arena = lock(&arena.0);
            for run in arena.runs.values_mut() {
                let size = class_sizes()[run.class as usize];
                for unit in 0..run.units {
                    let (w, bit) = ((unit / 64) as usize, 1u64 << (unit % 64));
                    if run.used[w] & bit != 0 && !run.uncommitted(pool, w, bit) {
                        out.push((run.data + unit * size, size));
                    }
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Space accounting.
    pub fn stats(&self, pool: &Pool) -> HeapStats {
        let mut stats = HeapStats::default();
        {
            let chunks = lock(&self.chunks);
            stats.chunks = chunks.state.len() as u64;
            for s in &chunks.state {
                match s {
                    ChunkState::Free => stats.chunks_free += 1,
                    ChunkState::Large { chunks: n, .. } => {
                        stats.large_allocations += 1;
                        stats.used_bytes += *n as u64 * CHUNK_SIZE;
                    }
                    _ => {}
                }
            }
            stats.largest_free_span = chunks.by_size.iter().next_back().map_or(0, |&(l, _)| l);
        }
        stats.free_bytes = stats.chunks_free * CHUNK_SIZE;
        let mut classes: Vec<ClassStats> = class_sizes()
            .iter()
            .map(|&size| ClassStats {
                size,
                ..ClassStats::default()
            })
            .collect();
        for arena in self.arenas.iter() {
            let mut arena = lock(&arena.0);
            for run in arena.runs.values_mut() {
                let c = &mut classes[run.class as usize];
                let used = run.units - run.free - run.uncommitted_units(pool);
                c.runs += 1;
                c.units += run.units;
                c.used += used;
                stats.used_bytes += used * c.size;
                stats.free_bytes += (run.units - used) * c.size;
            }
        }
        stats.classes = classes.into_iter().filter(|c| c.runs > 0).collect();
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_coalesce_within_a_zone_only() {
        let mut c = Chunks::default();
        c.add(0, CHUNKS_PER_ZONE + 10);
        // Two spans: the rest of zone 0 and the start of zone 1, never merged.
        assert_eq!(c.by_start.len(), 2);
        assert_eq!(c.by_start.get(&0), Some(&CHUNKS_PER_ZONE));
        assert_eq!(c.take(CHUNKS_PER_ZONE), Some(0));
        assert_eq!(c.take(11), None, "zone 1 has only 10 chunks");
        assert_eq!(c.take(4), Some(CHUNKS_PER_ZONE));
        c.insert_span(0, CHUNKS_PER_ZONE);
        c.insert_span(CHUNKS_PER_ZONE, 4);
        assert_eq!(c.by_start.len(), 2);
        assert_eq!(c.by_start.get(&CHUNKS_PER_ZONE), Some(&10));
    }

    #[test]
    fn growth_target_respects_zones() {
        let mut c = Chunks::default();
        c.add(0, CHUNKS_PER_ZONE - 6);
        assert_eq!(c.take(CHUNKS_PER_ZONE - 8), Some(0));
        // Tail span of 2 chunks at the end of zone 0.
        assert_eq!(c.needed_for(4), CHUNKS_PER_ZONE - 6 + 2);
        assert_eq!(
            c.needed_for(8),
            CHUNKS_PER_ZONE,
            "the tail plus the rest of zone 0"
        );
        assert_eq!(
            c.needed_for(9),
            CHUNKS_PER_ZONE + 9,
            "does not fit zone 0: starts zone 1"
        );
        c.add(CHUNKS_PER_ZONE - 6, CHUNKS_PER_ZONE + 9);
        assert_eq!(c.take(9), Some(CHUNKS_PER_ZONE));
        assert_eq!(c.take(8), Some(CHUNKS_PER_ZONE - 8));
    }
}
