//! Crash-image tests of the heap under mnemo-testkit's simulator: every fence of the workloads
//! is a crash point; each crash image is recovered (pool open, heap recovery) and checked.
//!
//! Invariants checked on every recovered image (`observe`):
//! * no leak: every live allocation is published (a root, a named region, or an object the
//!   root table points to) or is an acknowledged `pmalloc` not published yet (part of the
//!   model), and no published pointer dangles (each is a live allocation);
//! * no double allocation: live allocations do not overlap;
//! * objects are whole: each object carries its tag twice, in two cache lines, and both match;
//! * acknowledged operations are present, the one in flight is all-or-nothing (the model
//!   state: table of (slot, tag, size), counter, regions).
//!
//! `every_mutant_is_caught` switches each mutant of this crate on and requires a failure.

use mnemo_heap::{testing, Error, Heap, PPtr};
use mnemo_testkit::{explore, pool, Config, Granularity, Run, SimMedia, Workload};

const SLOTS: usize = 8;
const SIZES: [u64; 3] = [128, 400, 70_000];

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    /// Per slot: (tag, size index) of the object it points to.
    table: [Option<(u64, usize)>; SLOTS],
    counter: u64,
    /// Named regions: (name, first word).
    regions: Vec<(String, u64)>,
    /// Acknowledged `pmalloc`s not published yet: (offset, size index).
    loose: Vec<(u64, usize)>,
}

/// Which operations a workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    /// Inserts, updates, deletes, an aborted transaction.
    Transactions,
    /// Allocation-heavy: many objects, frees, reuse, a large object, growth.
    Allocator,
    /// Named regions, roots, atomic and shadow updates.
    Toc,
    /// A fixed script: insert, a last write plus free, an insert of the same size (which
    /// reuses the space once the free is past the durable horizon), updates.
    Reuse,
    /// A fixed script over whole chunks (`CHUNK_REUSE_SCRIPT`): a large object freed with a
    /// last logged write and a large one allocated at once (its chunk must not be the freed
    /// one while the freeing record is replayable), then the freed chunk reused by a new run
    /// of small objects, its bitmap over the old object's bytes. The heap is created over a
    /// data area a previous user left bytes in (`used_area`).
    ChunkReuse,
    /// A fixed script (`RESTART_SCRIPT`): a large object freed with a last logged write, the
    /// process killed (the heap abandoned, nothing closed) and the heap opened again, whose
    /// recovery replays that record; then the freed chunk allocated again.
    Restart,
    /// A fixed script (`HANDOVER_SCRIPT`) whose roots and every operation run on a thread of
    /// their own, one at a time (spawned, joined): deterministic, but each commit is another
    /// thread's, so the heap's cross-thread paths run. Consecutive threads take the two lanes
    /// in turn, so each commit finds its lane's pending record left by a thread that is gone
    /// (adopted: `redo.adopt_stage`), a commit that writes into an object another lane's
    /// pending record wrote fresh (in place, checked by CRC) flushes that record first
    /// (`redo.cover_fresh_stage`), and the heap's close on the main thread flushes both lanes'
    /// pending records (`redo.help_lane_stage`).
    Handover,
}

/// The choices of `Mix::Reuse` (kind = bits 0..8, slot = bits 8..16, size = bits 16..).
const REUSE_SCRIPT: [u64; 6] = [0x0003, 0x0007, 0x0103, 0x0103, 0x0003, 0x0107];

/// The steps of `Mix::Handover` (encoded as `REUSE_SCRIPT`: inserts of 128-byte objects and
/// updates of their tags), each on a thread of its own; the roots' transaction runs on one
/// too (R0). Threads take the lanes in turn, L (the roots') and M: objects X0, X1, X2 in
/// slots 0, 1, 2, record `Ak` of step k on M for odd k and on L for even k.
///
/// 0. M: insert X0 (A1). Its writes to the table and the counter change bytes R0 wrote fresh:
///    R0 is covered (the TOC lines it applied are flushed by nobody else: caught,
///    `redo.cover_fresh_stage`).
/// 1. L: insert X1 (A2); L's pending record R0 was covered: nothing to adopt.
/// 2. M: update X1 (A3): adopts A1, covers A2 (fresh X1).
/// 3. L: update X0 (A4).
/// 4. M: insert X2 (A5): adopts A3, the last write of X1's tags (caught, `redo.adopt_stage`).
/// 5. L: update X2 (A6): adopts A4, covers A5 (fresh X2; its table, counter and bitmap lines
///    are the last anyone writes).
/// 6. M: update X0 (A7).
/// 7. L: update X2: adopts A6 and defers it (A8).
///
/// The heap's close, on the main thread, flushes A7 and A8, pending on lanes it does not hold
/// (caught, `redo.help_lane_stage`), and raises the horizon word past every record: a line
/// the removed site should have flushed is then lost in a crash image.
const HANDOVER_SCRIPT: [u64; 8] = [
    0x0003, 0x0103, 0x0103, 0x0003, 0x0203, 0x0203, 0x0003, 0x0203,
];

/// `CHUNK_REUSE_SCRIPT`'s step that settles the heap (`Heap::retire_committed`: every record
/// unreplayable, deferred frees handed back) instead of an operation.
const SETTLE: u64 = u64::MAX;

/// A step of the scripts that abandons the heap as a killed process would (no close, no
/// settle: memory stays as it was, as the page cache keeps a killed process's stores) and
/// opens it again on the same medium, recovering it.
const KILL: u64 = u64::MAX - 1;

/// The steps of `Mix::Restart`: the roots' two runs and the first large object fill the
/// three chunks; the object is freed by a record that also writes its tags; after the kill,
/// recovery replays that record (it is above every horizon) and must make its horizon word
/// durable before the heap is used: the next large object takes the freed chunk at once (the
/// rebuilt allocator knows no limbo), and a horizon word lost at the next crash would let the
/// freeing record's replay put its tags over the new object's (caught:
/// `heap.recover_horizon`).
const RESTART_SCRIPT: [u64; 8] = [
    0x2_0003,
    0x0007,
    KILL,
    0x2_0103,
    0x2_0103,
    0x0203,
    0x0007 | 0x0100,
    0x0303,
];

/// The steps of `Mix::ChunkReuse` (encoded as `REUSE_SCRIPT`; sizes: 0 = 128 B, 2 = a whole
/// chunk). Three chunks are in use after the roots' two runs and the first large object, so
/// the third step takes a chunk the pool grows by (or, with `heap.reuse_before_horizon`, the
/// one just freed: the freeing record's replay puts the old tag over the new object's).
/// After the settle the freed chunk is the only free span of one chunk, and the first
/// 128-byte object makes it a run: its bitmap lies over the old object's tags (words 0 and 8,
/// 56 random bits each), so a bitmap not zeroed on media before the run's record publishes it
/// shows units nobody allocated (caught: `alloc.run_bitmap`, as a leak). Updates follow, so
/// the crash points after them see bitmap lines flushed by later commits and lines not.
const CHUNK_REUSE_SCRIPT: [u64; 8] = [
    0x2_0003, 0x0007, 0x2_0103, SETTLE, 0x0203, 0x0203, 0x0303, 0x0103,
];

struct HeapWorkload {
    mix: Mix,
    ops: usize,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

struct Roots {
    table: PPtr<[PPtr<u64>; SLOTS]>,
    counter: PPtr<u64>,
}

/// Both roots, created together by one transaction.
fn roots(heap: &Heap) -> Result<Roots, String> {
    heap.tx(|tx| {
        Ok(Roots {
            table: tx.root("table")?,
            counter: tx.root("counter")?,
        })
    })
    .map_err(err)
}

/// Run `f` on a thread of its own and wait for it (its thread-local state, lane state and
/// allocation cache, gone with it), the mutant in force here switched on there too
/// (`Mix::Handover`).
fn on_own_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let mutant = mnemo_pmem::mutant::current();
    std::thread::scope(|s| {
        s.spawn(|| match mutant {
            Some(name) => mnemo_pmem::mutant::with(name, f),
            None => f(),
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

fn slot_ptr(roots: &Roots, i: usize) -> PPtr<PPtr<u64>> {
    roots.table.byte_add(i as u64 * 8)
}

/// Write an object: tag at offset 0 and at offset 64 (another cache line).
fn write_object(tx: &mnemo_heap::Tx<'_>, obj: u64, tag: u64) -> mnemo_heap::Result<()> {
    tx.write_bytes(obj, &tag.to_le_bytes())?;
    tx.write_bytes(obj + 64, &tag.to_le_bytes())
}

impl HeapWorkload {
    fn step(
        &self,
        heap: &Heap,
        r: &Roots,
        model: &mut Model,
        choice: u64,
        tag: u64,
    ) -> Result<(), String> {
        let slot = (choice >> 8) as usize % SLOTS;
        let size = (choice >> 16) as usize % SIZES.len();
        let kind = choice % 8;
        let mix = match self.mix {
            Mix::Reuse | Mix::ChunkReuse | Mix::Restart | Mix::Handover => Mix::Allocator,
            other => other,
        };
        match (mix, kind, model.table[slot]) {
            (Mix::Toc, 0 | 1, _) => {
                let name = format!("region{}", slot % 3);
                if let Some(i) = model.regions.iter().position(|(n, _)| *n == name) {
                    heap.nvfree(&name).map_err(err)?;
                    model.regions.remove(i);
                } else {
                    let off = heap.nvalloc(&name, 200).map_err(err)?;
                    heap.tx(|tx| tx.write_bytes(off, &tag.to_le_bytes()))
                        .map_err(err)?;
                    model.regions.push((name, tag));
                    model.regions.sort();
                }
            }
            (Mix::Toc, 2, _) => {
                // A logged write of the counter, then an atomic update of the same word.
                heap.tx(|tx| tx.write(r.counter, &tag)).map_err(err)?;
                heap.atomic_update(r.counter, tag + 1).map_err(err)?;
                model.counter = tag + 1;
            }
            (Mix::Toc, 3 | 4, _) => {
                let slot_p = slot_ptr(r, slot);
                // The new version is a whole `[u64; 16]` object, tags at words 0 and 8.
                heap.shadow_update(slot_p.cast::<PPtr<[u64; 16]>>(), |_| {
                    let mut v = [0u64; 16];
                    v[0] = tag;
                    v[8] = tag;
                    v
                })
                .map_err(err)?;
                model.table[slot] = Some((tag, 0));
            }
            (Mix::Transactions, 6, _) | (Mix::Allocator, 6, _) => {
                // Aborted: nothing may remain.
                let result = heap.tx(|tx| {
                    let obj = tx.alloc_bytes(SIZES[size])?;
                    write_object(tx, obj, tag)?;
                    tx.write(slot_ptr(r, slot), &PPtr::from_offset(obj))?;
                    Err::<(), _>(Error::InvalidArgument("abort".into()))
                });
                if result.is_ok() {
                    return Err("aborted transaction committed".into());
                }
            }
            (Mix::Allocator, 4 | 5, None)
                if matches!(self.mix, Mix::Allocator) && model.loose.is_empty() =>
            {
                // `pmalloc` outside a transaction (a small size sets its bitmap bit without a
                // record); the object is published by the next insert (caught:
                // `alloc.direct_skip_flush`).
                let off = heap.pmalloc(SIZES[size]).map_err(err)?;
                model.loose.push((off, size));
            }
            (_, _, None) if !model.loose.is_empty() => {
                let (obj, size) = model.loose[0];
                heap.tx(|tx| {
                    write_object(tx, obj, tag)?;
                    tx.write(slot_ptr(r, slot), &PPtr::from_offset(obj))?;
                    let c = tx.read(r.counter)?;
                    tx.write(r.counter, &(c + 1))
                })
                .map_err(err)?;
                model.loose.clear();
                model.table[slot] = Some((tag, size));
                model.counter += 1;
            }
            (_, _, None) => {
                let size = if matches!(mix, Mix::Transactions) {
                    size.min(1)
                } else {
                    size
                };
                heap.tx(|tx| {
                    let obj = tx.alloc_bytes(SIZES[size])?;
                    write_object(tx, obj, tag)?;
                    if matches!(mix, Mix::Transactions) {
                        // Work rolled back before the commit leaves no trace in any image:
                        // no leaked object, no stray write, the in-place tags put back.
                        let sp = tx.savepoint()?;
                        let ghost = tx.alloc_bytes(SIZES[0])?;
                        write_object(tx, ghost, tag + 1)?;
                        write_object(tx, obj, tag + 1)?;
                        tx.write(r.counter, &u64::MAX)?;
                        tx.rollback_to(&sp)?;
                        tx.release(sp)?;
                    }
                    tx.write(slot_ptr(r, slot), &PPtr::from_offset(obj))?;
                    let c = tx.read(r.counter)?;
                    tx.write(r.counter, &(c + 1))
                })
                .map_err(err)?;
                model.table[slot] = Some((tag, size));
                model.counter += 1;
            }
            (Mix::Allocator, 7, Some(_)) => {
                // A last logged write to the object in the transaction that frees it: its
                // space must not be reused (and written in place, unlogged) while this record
                // can still be replayed (caught: `heap.reuse_before_horizon`).
                heap.tx(|tx| {
                    let obj: PPtr<u64> = tx.read(slot_ptr(r, slot))?;
                    write_object(tx, obj.offset(), tag)?;
                    tx.free(obj)?;
                    tx.write(slot_ptr(r, slot), &PPtr::null())
                })
                .map_err(err)?;
                model.table[slot] = None;
            }
            (_, 0..=2, Some(_)) => {
                heap.tx(|tx| {
                    let obj: PPtr<u64> = tx.read(slot_ptr(r, slot))?;
                    tx.free(obj)?;
                    tx.write(slot_ptr(r, slot), &PPtr::null())
                })
                .map_err(err)?;
                model.table[slot] = None;
            }
            (_, _, Some((_, s))) => {
                heap.tx(|tx| {
                    let obj: PPtr<u64> = tx.read(slot_ptr(r, slot))?;
                    write_object(tx, obj.offset(), tag)
                })
                .map_err(err)?;
                model.table[slot] = Some((tag, s));
            }
        }
        Ok(())
    }
}

/// Leave seeded bytes (made durable) where the heap keeps metadata that its creation zeroes:
/// the horizon and checked words, a line of the TOC, the first line of zone 0's chunk table
/// (entries of chunks the heap has and of chunks it grows into) and a redo slot's header
/// line, as a previous user of the pool's data area would. Creation must make its zeroes
/// durable before the superblock that makes them a heap (caught: `heap.create_meta`; a
/// checked word above every record is a corrupt heap).
fn used_area(p: &mnemo_pmem::Pool, run: &mut Run<Option<Model>>) -> Result<(), String> {
    let o = testing::options();
    let geometry = mnemo_heap::layout::Geometry::new(
        mnemo_pmem::limits::DATA_OFFSET,
        o.lane_count,
        o.lane_log_size,
        o.toc_entries,
    );
    let ranges = [
        mnemo_pmem::ByteRange::new(geometry.horizon_word_offset(), 8),
        mnemo_pmem::ByteRange::new(geometry.checked_word_offset(), 8),
        mnemo_pmem::ByteRange::new(geometry.toc_offset + 128, 64),
        mnemo_pmem::ByteRange::new(geometry.zone_offset(0), 64),
        mnemo_pmem::ByteRange::new(geometry.slot_offset(1, 3), 64),
    ];
    for r in &ranges {
        let mut bytes = vec![0u8; r.len as usize];
        run.rng().fill(&mut bytes);
        p.write(r.offset, &bytes).map_err(err)?;
    }
    p.gmsync(&ranges).map_err(err)
}

fn size_index(heap: &Heap, off: u64) -> Result<usize, String> {
    let usable = heap
        .usable_size(off)
        .ok_or_else(|| format!("published object {off:#x} is not allocated (dangling)"))?;
    SIZES
        .iter()
        .position(|&s| s <= usable && (usable < s * 2 || s > 65536))
        .ok_or_else(|| format!("object {off:#x} has unexpected size {usable}"))
}

impl Workload for HeapWorkload {
    type State = Option<Model>;
    type Recovered = Option<Heap>;

    fn name(&self) -> String {
        format!("heap-{:?}-{}", self.mix, self.ops)
    }

    fn capacity(&self) -> u64 {
        2 << 20
    }

    fn initial(&self) -> Option<Model> {
        None
    }

    fn run(&self, run: &mut Run<Option<Model>>) -> Result<(), String> {
        let p = pool::create(run.media(), "heap", testing::pool_size(3), 2 << 20)?;
        if matches!(self.mix, Mix::ChunkReuse) {
            used_area(&p, run)?;
        }
        let mut heap = testing::create(p)?;
        let handover = matches!(self.mix, Mix::Handover);
        let r = if handover {
            on_own_thread(|| roots(&heap))?
        } else {
            roots(&heap)?
        };
        let mut model = Model::default();
        run.ack(Some(model.clone()));
        for i in 0..self.ops {
            let choice = match self.mix {
                Mix::Reuse => REUSE_SCRIPT[i % REUSE_SCRIPT.len()],
                Mix::ChunkReuse => CHUNK_REUSE_SCRIPT[i % CHUNK_REUSE_SCRIPT.len()],
                Mix::Restart => RESTART_SCRIPT[i % RESTART_SCRIPT.len()],
                Mix::Handover => HANDOVER_SCRIPT[i % HANDOVER_SCRIPT.len()],
                _ => run.rng().next_u64(),
            };
            let tag = run.rng().next_u64() >> 8;
            if choice == SETTLE {
                heap.retire_committed().map_err(err)?;
                continue;
            }
            if choice == KILL {
                std::mem::forget(heap);
                heap = self.recover(run.media())?.ok_or("no heap after the kill")?;
                continue;
            }
            if handover {
                on_own_thread(|| self.step(&heap, &r, &mut model, choice, tag))?;
            } else {
                self.step(&heap, &r, &mut model, choice, tag)?;
            }
            run.ack(Some(model.clone()));
        }
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Option<Heap>, String> {
        testing::recover(pool::open(media)?)
    }

    fn observe(&self, heap: &Option<Heap>) -> Result<Option<Model>, String> {
        let Some(heap) = heap else { return Ok(None) };
        let live = heap.live_allocations();
        for w in live.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("allocations overlap: {w:?}"));
            }
        }
        let regions = heap.regions().map_err(err)?;
        let mut published: Vec<u64> = regions.iter().map(|r| r.1).collect();
        let mut model = Model::default();
        let table = regions.iter().find(|r| r.0 == "table");
        let counter = regions.iter().find(|r| r.0 == "counter");
        if let (Some(t), Some(c)) = (table, counter) {
            model.counter = heap.get(PPtr::<u64>::from_offset(c.1)).map_err(err)?;
            let slots: [PPtr<u64>; SLOTS] = heap.get(PPtr::from_offset(t.1)).map_err(err)?;
            for (i, obj) in slots.iter().enumerate() {
                if obj.is_null() {
                    continue;
                }
                let size = size_index(heap, obj.offset())?;
                let a: u64 = heap.get(*obj).map_err(err)?;
                let b: u64 = heap.get(obj.byte_add::<u64>(64)).map_err(err)?;
                if a != b {
                    return Err(format!("object in slot {i} is torn: {a:#x} / {b:#x}"));
                }
                model.table[i] = Some((a, size));
                published.push(obj.offset());
            }
        } else if table.is_some() != counter.is_some() {
            // Roots are created one per transaction; one without the other is a legal
            // in-flight state only before the first ack, which the model cannot express.
            return Err("only one of the two roots exists".into());
        }
        for r in &regions {
            if r.0.starts_with("region") {
                let first: u64 = heap.get(PPtr::from_offset(r.1)).map_err(err)?;
                model.regions.push((r.0.clone(), first));
            }
        }
        model.regions.sort();
        published.sort();
        let live_offsets: Vec<u64> = live.iter().map(|l| l.0).collect();
        let dangling: Vec<_> = published
            .iter()
            .filter(|o| !live_offsets.contains(o))
            .collect();
        if !dangling.is_empty() {
            return Err(format!("dangling pointers {dangling:x?}"));
        }
        // Live but unpublished: an acknowledged `pmalloc` (the model says so) or a leak (the
        // model comparison fails).
        for &off in live_offsets.iter().filter(|o| !published.contains(o)) {
            model.loose.push((off, size_index(heap, off)?));
        }
        if table.is_none() {
            if !model.loose.is_empty() {
                return Err(format!(
                    "leaked allocations before the roots: {:x?}",
                    model.loose
                ));
            }
            return Ok(Some(Model::default()));
        }
        Ok(Some(model))
    }

    fn accept(
        &self,
        observed: &Option<Model>,
        acked: &Option<Model>,
        in_flight: Option<&Option<Model>>,
    ) -> Result<(), String> {
        if observed == acked || in_flight == Some(observed) {
            return Ok(());
        }
        // A region being created and then written (two transactions) may be seen created
        // and zeroed; an atomic_update after its logged write may be seen with either value.
        if let (Some(o), Some(a), Some(Some(f))) = (observed, acked, in_flight) {
            let mut relaxed = o.clone();
            for (name, first) in relaxed.regions.iter_mut() {
                if *first == 0 {
                    if let Some((_, v)) = f.regions.iter().find(|(n, _)| n == name) {
                        *first = *v;
                    }
                }
            }
            if relaxed == *f {
                return Ok(());
            }
            if o.counter + 1 == f.counter
                && (Model {
                    counter: f.counter,
                    ..o.clone()
                }) == *f
                && o.counter != a.counter
            {
                return Ok(());
            }
        }
        Err(format!("observed {observed:?}; acceptable: {acked:?} (acknowledged) or {in_flight:?} (in flight)"))
    }

    fn follow_on(&self, heap: Option<Heap>, media: &SimMedia) -> Result<(), String> {
        let Some(heap) = heap else { return Ok(()) };
        // One more allocation must not collide with anything live, and the result survives.
        // A heap the workload filled may have no room for it (no leak: `observe` checks
        // that): out of space is an answer, not a failure (it failed seed 3 of the allocator
        // mix with or without a mutant, so that mix "caught" mutants it never saw).
        let live = heap.live_allocations();
        match heap.pmalloc(128) {
            Ok(off) => {
                if live.iter().any(|&(o, s)| o <= off && off < o + s) {
                    return Err(format!(
                        "follow-on allocation {off:#x} overlaps a live object"
                    ));
                }
                heap.pfree(off).map_err(err)?;
            }
            Err(Error::OutOfSpace { .. }) => {}
            Err(e) => return Err(err(e)),
        }
        drop(heap);
        let again = self.recover(media.crash())?;
        self.observe(&again).map(|_| ())
    }
}

/// Sampling narrowed so the crate's debug test run stays short; `MNEMO_SOAK=1` widens it.
fn config(seed: u64) -> Config {
    let mut config = Config::from_env(seed);
    if !mnemo_testkit::soak() {
        config.sampling.exhaustive_max = 6;
        config.sampling.pairs_all_max = 12;
        config.sampling.pairs_sampled = 24;
        config.sampling.random = 24;
        config.depth2_every = 16;
        config.depth2_images = 4;
        config.follow_on_every = 8;
    }
    config.threads = 2;
    config
}

/// `MNEMO_HEAP_CRASH_SEEDS=N` runs N seeds per workload instead of one (soak).
fn check(mix: Mix, ops: usize, first_seed: u64) {
    let seeds: u64 = std::env::var("MNEMO_HEAP_CRASH_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in first_seed..first_seed + seeds {
        let report = explore(&HeapWorkload { mix, ops }, &config(seed));
        eprintln!("{}", report.summary(&format!("heap {mix:?} seed {seed}")));
        report.assert_ok();
    }
}

/// Power loss on an ordinary disk: every mix on the page-cache medium (a fence is msync of
/// the named pages; any other dirty page written back or not, torn at 512-byte sectors; the
/// file's length durable only through a sync), one seed each; whole pages for two mixes.
#[test]
fn crash_on_a_page_cache_file() {
    let mut total = mnemo_testkit::Report::default();
    for (k, mix) in SEARCH.into_iter().enumerate() {
        let ops = match mix {
            Mix::ChunkReuse => CHUNK_REUSE_SCRIPT.len(),
            Mix::Restart => RESTART_SCRIPT.len(),
            Mix::Handover => HANDOVER_SCRIPT.len(),
            Mix::Reuse => 6,
            _ => 8,
        };
        let granularity = if k % 3 == 2 {
            Granularity::Page
        } else {
            Granularity::Sector
        };
        let config = config(7001 + k as u64).page_cache(granularity);
        let report = explore(&HeapWorkload { mix, ops }, &config);
        eprintln!(
            "{}",
            report.summary(&format!("heap {mix:?} on a page-cache file"))
        );
        report.assert_ok();
        total.merge(&report);
    }
    eprintln!("{}", total.summary("heap on a page-cache file"));
    assert!(total.images_total() >= 1_000);
}

#[test]
fn crash_transactions() {
    check(Mix::Transactions, 8, 1);
}

#[test]
fn crash_allocator() {
    check(Mix::Allocator, 8, 1001);
}

#[test]
fn crash_reuse_after_free() {
    check(Mix::Reuse, 6, 3001);
}

#[test]
fn crash_chunk_reuse() {
    check(Mix::ChunkReuse, CHUNK_REUSE_SCRIPT.len(), 4001);
}

#[test]
fn crash_restart() {
    check(Mix::Restart, RESTART_SCRIPT.len(), 5001);
}

#[test]
fn crash_handover() {
    check(Mix::Handover, HANDOVER_SCRIPT.len(), 6001);
}

#[test]
fn crash_toc_roots_atomic_shadow() {
    check(Mix::Toc, 8, 2001);
}

/// The mixes and seeds the mutant searches run; each passes without a mutant
/// (`mutant_search_runs_pass_clean`), so a failure in one is the mutant's.
const SEARCH: [Mix; 7] = [
    Mix::Transactions,
    Mix::Toc,
    Mix::Allocator,
    Mix::Reuse,
    Mix::ChunkReuse,
    Mix::Restart,
    Mix::Handover,
];
const SEARCH_SEEDS: std::ops::Range<u64> = 1..4;

#[test]
fn mutant_search_runs_pass_clean() {
    for mix in SEARCH {
        for seed in SEARCH_SEEDS {
            let report = explore(&HeapWorkload { mix, ops: 8 }, &self::config(seed));
            report.assert_ok();
        }
    }
}

/// The first failure of a check (a crash image or the shadow replica) that `mutant` causes in
/// one of the workloads, if any; a workload that errors on its own catches nothing.
///
/// The mixes are tried in `SEARCH` order, except that a mutant `TARGETED` names is tried
/// first on the scripted mix written to reach it (only to save time: without it, each of them
/// would first run every other mix whole).
fn caught_by(mutant: &'static str) -> Option<String> {
    let first = TARGETED
        .iter()
        .find(|(name, _)| *name == mutant)
        .map(|&(_, mix)| mix);
    let rest = SEARCH.into_iter().filter(|&mix| Some(mix) != first);
    for mix in first.into_iter().chain(rest) {
        for seed in SEARCH_SEEDS {
            let mut config = self::config(seed);
            config.mutant = Some(mutant);
            config.stop_at_first_failure = true;
            config.threads = 2;
            let report = explore(&HeapWorkload { mix, ops: 8 }, &config);
            if let Some(f) = report.first_caught() {
                return Some(f.to_string());
            }
        }
    }
    None
}

/// Every mix on a page-cache pool that syncs through the write-ahead policy
/// (`mnemo_pmem::WalPolicy`): commits are records in a small write-ahead file (16 or 64
/// KiB: checkpoints when it fills, larger records in place with a checkpoint), the pool's
/// pages written back whenever; replay at open.
#[test]
fn crash_with_the_write_ahead_policy() {
    let mut total = mnemo_testkit::Report::default();
    for (k, mix) in SEARCH.into_iter().enumerate() {
        let ops = match mix {
            Mix::ChunkReuse => CHUNK_REUSE_SCRIPT.len(),
            Mix::Restart => RESTART_SCRIPT.len(),
            Mix::Handover => HANDOVER_SCRIPT.len(),
            Mix::Reuse => 6,
            _ => 8,
        };
        let wal_bytes = [16 << 10, 64 << 10][k % 2];
        // Every other mix with the pool mapped copy-on-write (`MNEMO_WAL_PRIVATE=1`).
        let mut config = if k % 2 == 1 {
            config(8001 + k as u64).write_ahead_private(Granularity::Sector, wal_bytes)
        } else {
            config(8001 + k as u64).write_ahead(Granularity::Sector, wal_bytes)
        };
        if !mnemo_testkit::soak() {
            // The file's sectors add units to every point: sample fewer cuts per point.
            config.sampling.random = 12;
            config.sampling.pairs_sampled = 12;
        }
        let report = explore(&HeapWorkload { mix, ops }, &config);
        eprintln!(
            "{}",
            report.summary(&format!("heap {mix:?}, write-ahead policy"))
        );
        report.assert_ok();
        total.merge(&report);
    }
    eprintln!("{}", total.summary("heap, write-ahead policy"));
    assert!(total.images_total() >= 1_000);
}

/// The page-cache medium catches broken commits too: a record or an application left out of
/// its sync point is a page no msync names, which the kernel may never have written back.
#[test]
fn broken_commits_are_caught_on_a_page_cache_file() {
    let mut missed = Vec::new();
    for name in [
        "tx.skip_record_flush",
        "tx.skip_flush",
        "tx.apply_before_commit",
        "alloc.direct_skip_flush",
        "site:redo.commit",
        "site:redo.pending_stage",
    ] {
        let caught = SEARCH.into_iter().any(|mix| {
            SEARCH_SEEDS.into_iter().any(|seed| {
                let mut config = self::config(seed).page_cache(Granularity::Sector);
                config.mutant = Some(name);
                config.stop_at_first_failure = true;
                let report = explore(&HeapWorkload { mix, ops: 8 }, &config);
                report.first_caught().is_some()
            })
        });
        eprintln!(
            "{name} on a page-cache file: {}",
            if caught { "caught" } else { "NOT CAUGHT" }
        );
        if !caught {
            missed.push(name);
        }
    }
    assert!(
        missed.is_empty(),
        "not caught on a page-cache file: {missed:?}"
    );
}

/// Mutants and sites only a scripted mix reaches, with that mix.
const TARGETED: &[(&str, Mix)] = &[
    ("heap.reuse_before_horizon", Mix::ChunkReuse),
    ("site:alloc.run_bitmap", Mix::ChunkReuse),
    ("site:heap.create_meta", Mix::ChunkReuse),
    ("site:heap.recover_horizon", Mix::Restart),
    ("site:redo.adopt_stage", Mix::Handover),
    ("site:redo.cover_fresh_stage", Mix::Handover),
    ("site:redo.help_lane_stage", Mix::Handover),
];

/// Mutants these workloads do not catch, tried in soak runs (where they must still be missed).
///
/// `redo.no_horizon` is equivalent in effect, not a blind spot of the workloads: it seals
/// every record with horizon 0, and the in-memory claim of what is durable (each lane's
/// `durable_h`) is taken only from the horizons records carry, so it stays 0 as well. Every
/// decision that trusts a durable claim (reuse of freed space past the limbo, the overwrite
/// rule, `atomic_update`'s conflict check) then waits for the horizon word, which the help
/// path and recovery write with a true value; recovery replays more records, all present, in
/// seq order. The mutant costs help-path fences, not correctness (the scripted
/// `Mix::ChunkReuse`, which catches `heap.reuse_before_horizon`, passes with it). A mutant
/// that breaks the claim would zero the sealed horizon while `durable_h` still took the
/// computed one (a change to `redo.rs`, not made here).
const UNCAUGHT: &[(&str, &str)] = &[("redo.no_horizon", "equivalent in effect (see above)")];

#[test]
fn every_mutant_is_caught() {
    // The heap's own, and the pipeline's: a commit's staged record hidden from the policy is
    // durable here but missing on a replica (only the shadow replica can see it).
    // The concurrency mutants need threads committing at once: `tests/concurrency.rs`.
    let names: Vec<&'static str> = mnemo_heap::MUTANTS
        .iter()
        .copied()
        .filter(|m| !mnemo_heap::CONCURRENCY_MUTANTS.contains(m))
        .chain(["sync.staged_unnamed"])
        .collect();
    mnemo_testkit::assert_caught("heap mutants", &names, UNCAUGHT, caught_by);
}

/// Sites whose removal these workloads do not catch, with the workload that does
/// (`docs/design/durability-sites.md`).
const BLIND: &[(&str, &str)] = &[
    (
        "redo.fenced_apply",
        "fenced commits (the C ABI's mode): crates/mnemo-ffi/tests/crash.rs runs them",
    ),
    (
        "redo.help_own_stage",
        "the help path over the thread's own pending records: caught by tests/concurrency.rs \
         (atomic updates while other threads commit); the Toc mix caught it only while \
         atomic_update retired the first replayable record found, not the latest",
    ),
];

/// Every flush, fence and sync-point site of the heap (`durable_site!` in `src/`), removed in
/// turn, is caught, except the listed blind spots.
#[test]
fn every_durable_site_is_needed() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sites = mnemo_testkit::site_mutants(&src, 15);
    mnemo_testkit::assert_caught("heap durability sites", &sites, BLIND, caught_by);
}
