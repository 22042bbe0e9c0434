//! Deterministic concurrency over the simulated medium (issue 19): the heap's real code, its
//! locks, atomics and thread-locals swapped for the shuttle crate's (`src/sync.rs`), run
//! by shuttle's random and PCT schedulers from a seed; crash images at every fence of every
//! task, each recovered and checked against a model. Built only with `--cfg mnemo_shuttle`:
//! run `scripts/test-shuttle.sh` (its own target directory).
//!
//! Workloads (three threads on two lanes of a ring of 4 slots, so lanes change hands,
//! records are adopted and the overwrite rule binds):
//! * `Lanes`: each thread runs transactions over its own object's three words (two in two
//!   cache lines), half of them, under a lock held until the transaction returns, also
//!   incrementing a shared counter (writes ordered across lanes by the caller's lock); a
//!   quarter of its operations `atomic_update` the third word instead (retiring the
//!   replayable records that wrote it: the help path).
//! * `Arenas`: each thread allocates (small objects from runs, large ones as whole chunks)
//!   and frees in transactions over two arenas, publishing the objects in slots of its own;
//!   freed space waits in the limbo for the durable horizon; the heap grows.
//! * The lane core: two threads of two transactions each under every schedule with at most
//!   two preemptions (`conc::Bounded`).
//!
//! Checked on every image: recovery succeeds; every operation that returned is there and
//! the one each thread had in flight is all or nothing (an object's words as the model has
//! them after that many operations, the counter equal to the shared transactions present,
//! each published object's tags); the allocator consistent: live allocations do not
//! overlap, every published object is live, and every live allocation is published or was
//! there before the threads started (no leak: the limbo is volatile, so a crash leaves
//! none). `every_concurrency_mutant_is_caught`: each of `mnemo_heap::CONCURRENCY_MUTANTS`
//! fails an image of some schedule.
//!
//! A failure prints its schedule, point and cut; `MNEMO_CONC_REPLAY=pct3:SEED` (or
//! `random:SEED`, `bounded2:N`) runs that schedule alone, `MNEMO_CONC_SCHEDULES=N` and
//! `MNEMO_CONC_CUTS=N` change the counts.
#![cfg(mnemo_shuttle)]

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Instant;

use mnemo_heap::layout::Geometry;
use mnemo_heap::{Heap, HeapOptions, PPtr};
use mnemo_pmem::limits::DATA_OFFSET;
use mnemo_testkit::conc::{self, Schedule};
use mnemo_testkit::rng::mix64;
use mnemo_testkit::sim::PointKind;
use mnemo_testkit::{pool, SimMedia, SimOptions, SimRng};

/// Threads of every workload (more than lanes: lanes change hands).
const THREADS: usize = 3;

fn heap_options() -> HeapOptions {
    HeapOptions {
        lane_count: 2,
        lane_log_size: 16 * 1024,
        lane_slots: 4,
        toc_entries: 16,
        arenas: 2,
    }
}

fn pool_size(chunks: u64) -> u64 {
    let o = heap_options();
    Geometry::new(DATA_OFFSET, o.lane_count, o.lane_log_size, o.toc_entries).size_for_chunks(chunks)
}

/// A concurrent workload: setup on one thread, then `THREADS` threads, each a deterministic
/// sequence of operations given the schedule's seed; the model of thread `t` after `k` of
/// them is what `check` compares with.
trait Workload: Send + Sync + 'static {
    /// What the threads and the checks share (offsets of roots).
    type Setup: Clone + Send + Sync + 'static;
    fn name(&self) -> &'static str;
    /// Threads that run the operations.
    fn threads(&self) -> usize {
        THREADS
    }
    /// Pool size at creation and its maximum (growth).
    fn sizes(&self) -> (u64, u64);
    fn setup(&self, heap: &Heap) -> Result<Self::Setup, String>;
    /// Thread `t`'s operations; `ack` after each returns.
    fn thread(
        &self,
        heap: &Heap,
        setup: &Self::Setup,
        seed: u64,
        t: usize,
        ack: &dyn Fn(),
    ) -> Result<(), String>;
    /// Check a recovered heap: thread `t` had `done[t]` operations acknowledged, and its next
    /// one (if any) may be there or not, whole.
    fn check(
        &self,
        heap: &Heap,
        setup: &Self::Setup,
        seed: u64,
        done: &[usize],
    ) -> Result<(), String>;
}

fn rng_of(seed: u64, t: usize) -> SimRng {
    SimRng::new(seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t as u64 + 1)))
}

/// Every live allocation, sorted; an error if two overlap.
fn live_checked(heap: &Heap) -> Result<Vec<(u64, u64)>, String> {
    let live = heap.live_allocations();
    for pair in live.windows(2) {
        if pair[0].0 + pair[0].1 > pair[1].0 {
            return Err(format!(
                "double allocation: live allocations {:#x}+{} and {:#x}+{} overlap",
                pair[0].0, pair[0].1, pair[1].0, pair[1].1
            ));
        }
    }
    Ok(live)
}

// ---------------------------------------------------------------------------------------
// Lanes: per-thread objects and a shared counter.

/// Transactions per thread.
const LANE_OPS: usize = 6;

/// `threads` threads of `ops` transactions each; `mixed`: which transactions increment the
/// shared counter is drawn from the seed, else the first does not and the others do.
struct Lanes {
    threads: usize,
    ops: usize,
    mixed: bool,
}

const LANES: Lanes = Lanes {
    threads: THREADS,
    ops: LANE_OPS,
    mixed: true,
};

#[derive(Clone, Debug)]
struct LanesSetup {
    objs: u64,
    counter: u64,
    live: Vec<(u64, u64)>,
    /// The caller's lock over the counter, held until the transaction returns (a shuttle
    /// lock, so a schedule may switch while a thread waits for it).
    lock: Arc<shuttle::sync::Mutex<()>>,
}

/// One operation of a `Lanes` thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LaneOp {
    /// A transaction writing the thread's three words (and the shared counter if `shared`).
    Tx { shared: bool },
    /// `Heap::atomic_update` of the thread's third word, which its transactions also write:
    /// a replayable record that wrote it must be retired first (the help path).
    Atomic,
}

impl Lanes {
    /// Thread `t`'s operations: drawn from the seed when `mixed` (a quarter atomic updates,
    /// half the transactions shared), else a transaction on its own words, then shared ones.
    fn plan(&self, seed: u64, t: usize) -> Vec<LaneOp> {
        let mut rng = rng_of(seed, t);
        (0..self.ops)
            .map(|j| {
                if !self.mixed {
                    LaneOp::Tx { shared: j > 0 }
                } else if rng.chance(0.25) {
                    LaneOp::Atomic
                } else {
                    LaneOp::Tx {
                        shared: rng.chance(0.5),
                    }
                }
            })
            .collect()
    }

    /// Thread `t`'s words after `k` operations: (the two transactional words, the third).
    fn words_after(plan: &[LaneOp], k: usize) -> (u64, u64) {
        let last_tx = plan[..k]
            .iter()
            .rposition(|op| matches!(op, LaneOp::Tx { .. }))
            .map_or(0, |j| j as u64 + 1);
        (last_tx, k as u64)
    }
}

/// Offsets of thread `t`'s words in the `objs` root: two in two lines, transactional only,
/// and a third beside the first, also atomically updated.
fn lane_words(objs: u64, t: usize) -> [u64; 3] {
    let base = objs + t as u64 * 128;
    [base, base + 64, base + 32]
}

impl Workload for Lanes {
    type Setup = LanesSetup;

    fn name(&self) -> &'static str {
        "lanes"
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn sizes(&self) -> (u64, u64) {
        (pool_size(2), pool_size(2))
    }

    fn setup(&self, heap: &Heap) -> Result<LanesSetup, String> {
        let objs = heap
            .root::<[u64; 16 * THREADS]>("objs")
            .map_err(|e| e.to_string())?;
        let counter = heap.root::<u64>("counter").map_err(|e| e.to_string())?;
        Ok(LanesSetup {
            objs: objs.offset(),
            counter: counter.offset(),
            live: heap.live_allocations(),
            lock: Arc::new(shuttle::sync::Mutex::new(())),
        })
    }

    fn thread(
        &self,
        heap: &Heap,
        setup: &LanesSetup,
        seed: u64,
        t: usize,
        ack: &dyn Fn(),
    ) -> Result<(), String> {
        let plan = self.plan(seed, t);
        let [w0, w8, wa] = lane_words(setup.objs, t).map(PPtr::<u64>::from_offset);
        let counter = PPtr::<u64>::from_offset(setup.counter);
        for (j, &op) in plan.iter().enumerate() {
            let value = j as u64 + 1;
            let done = match op {
                LaneOp::Atomic => heap.atomic_update(wa, value),
                LaneOp::Tx { shared } => {
                    let held = shared.then(|| setup.lock.lock().unwrap_or_else(|p| p.into_inner()));
                    let done = heap.tx(|tx| {
                        tx.write(w0, &value)?;
                        tx.write(wa, &value)?;
                        if shared {
                            let c = tx.read(counter)?;
                            tx.write(counter, &(c + 1))?;
                        }
                        tx.write(w8, &value)
                    });
                    drop(held);
                    done
                }
            };
            done.map_err(|e| format!("thread {t} operation {value} ({op:?}): {e}"))?;
            ack();
        }
        Ok(())
    }

    fn check(
        &self,
        heap: &Heap,
        setup: &LanesSetup,
        seed: u64,
        done: &[usize],
    ) -> Result<(), String> {
        let mut present_shared = 0u64;
        for (t, &d) in done.iter().enumerate() {
            let mut words = [0u64; 3];
            for (value, offset) in words.iter_mut().zip(lane_words(setup.objs, t)) {
                *value = heap
                    .get(PPtr::<u64>::from_offset(offset))
                    .map_err(|e| e.to_string())?;
            }
            let [w0, w8, wa] = words;
            if w0 != w8 {
                return Err(format!(
                    "thread {t}: a transaction half applied ({w0} and {w8})"
                ));
            }
            let plan = self.plan(seed, t);
            // The operations present: those acknowledged, or one more (in flight).
            let k = (d..=(d + 1).min(self.ops))
                .find(|&k| Lanes::words_after(&plan, k) == (w0, wa))
                .ok_or_else(|| {
                    format!(
                        "thread {t}: words ({w0}, {wa}); {d} operations acknowledged: \
                         ({:?}) or, in flight, ({:?})",
                        Lanes::words_after(&plan, d),
                        (d < self.ops).then(|| Lanes::words_after(&plan, d + 1))
                    )
                })?;
            present_shared += plan[..k]
                .iter()
                .filter(|&&op| op == LaneOp::Tx { shared: true })
                .count() as u64;
        }
        let c = heap
            .get(PPtr::<u64>::from_offset(setup.counter))
            .map_err(|e| e.to_string())?;
        if c != present_shared {
            return Err(format!(
                "shared counter {c}, but {present_shared} transactions that increment it are present"
            ));
        }
        let live = live_checked(heap)?;
        if live != setup.live {
            return Err(format!(
                "allocations changed: {live:x?}, expected {:x?}",
                setup.live
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Arenas: allocations and frees across arenas, the free limbo, growth.

/// Operations per thread.
const ARENA_OPS: usize = 6;
/// Slots per thread.
const ARENA_SLOTS: usize = 3;
/// Object sizes: two small classes (runs) and a whole chunk; slot 0 only takes large ones
/// half the time, the others never (bounded growth).
const ARENA_SIZES: [u64; 3] = [128, 400, 90_000];

struct Arenas;

#[derive(Clone, Debug)]
struct ArenasSetup {
    slots: u64,
    live: Vec<(u64, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArenaOp {
    Alloc { slot: usize, size: u64, tag: u64 },
    Free { slot: usize },
}

/// A thread's slots: (tag, size) of the object each points to.
type ArenaSlots = [Option<(u64, u64)>; ARENA_SLOTS];

/// Thread `t`'s operations, and its slots after each (index k: after k operations).
fn arena_plan(seed: u64, t: usize) -> (Vec<ArenaOp>, Vec<ArenaSlots>) {
    let mut rng = rng_of(seed, t);
    let mut slots = [None; ARENA_SLOTS];
    let mut states = vec![slots];
    let mut ops = Vec::new();
    for j in 0..ARENA_OPS {
        let slot = rng.below(ARENA_SLOTS as u64) as usize;
        let op = match slots[slot] {
            Some(_) => {
                slots[slot] = None;
                ArenaOp::Free { slot }
            }
            None => {
                let size = if slot == 0 && rng.chance(0.5) {
                    ARENA_SIZES[2]
                } else {
                    ARENA_SIZES[rng.below(2) as usize]
                };
                let tag = ((seed & 0xffff_ffff) << 24) | ((t as u64) << 16) | (j as u64 + 1);
                slots[slot] = Some((tag, size));
                ArenaOp::Alloc { slot, size, tag }
            }
        };
        ops.push(op);
        states.push(slots);
    }
    (ops, states)
}

impl Workload for Arenas {
    type Setup = ArenasSetup;

    fn name(&self) -> &'static str {
        "arenas"
    }

    fn sizes(&self) -> (u64, u64) {
        (pool_size(2), pool_size(8))
    }

    fn setup(&self, heap: &Heap) -> Result<ArenasSetup, String> {
        let slots = heap
            .root::<[u64; ARENA_SLOTS * THREADS]>("slots")
            .map_err(|e| e.to_string())?;
        Ok(ArenasSetup {
            slots: slots.offset(),
            live: heap.live_allocations(),
        })
    }

    fn thread(
        &self,
        heap: &Heap,
        setup: &ArenasSetup,
        seed: u64,
        t: usize,
        ack: &dyn Fn(),
    ) -> Result<(), String> {
        let (ops, _) = arena_plan(seed, t);
        let slot_ptr = |slot: usize| {
            PPtr::<u64>::from_offset(setup.slots + ((t * ARENA_SLOTS + slot) * 8) as u64)
        };
        for (j, op) in ops.iter().enumerate() {
            let done = match *op {
                ArenaOp::Alloc { slot, size, tag } => heap.tx(|tx| {
                    let p = tx.alloc_bytes(size)?;
                    // The tags go in place (a fresh allocation), checked by CRC at recovery.
                    tx.write_bytes(p, &tag.to_le_bytes())?;
                    tx.write_bytes(p + 64, &tag.to_le_bytes())?;
                    tx.write(slot_ptr(slot), &p)
                }),
                ArenaOp::Free { slot } => heap.tx(|tx| {
                    let p = tx.read(slot_ptr(slot))?;
                    tx.free_offset(p)?;
                    tx.write(slot_ptr(slot), &0u64)
                }),
            };
            done.map_err(|e| format!("thread {t} operation {} ({op:?}): {e}", j + 1))?;
            ack();
        }
        Ok(())
    }

    fn check(
        &self,
        heap: &Heap,
        setup: &ArenasSetup,
        seed: u64,
        done: &[usize],
    ) -> Result<(), String> {
        let live = live_checked(heap)?;
        let mut published = Vec::new();
        for (t, &d) in done.iter().enumerate() {
            let (_, states) = arena_plan(seed, t);
            let mut observed = [None; ARENA_SLOTS];
            for (slot, seen) in observed.iter_mut().enumerate() {
                let p = heap
                    .get(PPtr::<u64>::from_offset(
                        setup.slots + ((t * ARENA_SLOTS + slot) * 8) as u64,
                    ))
                    .map_err(|e| e.to_string())?;
                if p == 0 {
                    continue;
                }
                let Some(&(_, size)) = live.iter().find(|&&(o, _)| o == p) else {
                    return Err(format!(
                        "thread {t} slot {slot}: {p:#x} is not a live allocation"
                    ));
                };
                let mut tags = [0u8; 8];
                heap.read_bytes(p, &mut tags).map_err(|e| e.to_string())?;
                let tag = u64::from_le_bytes(tags);
                heap.read_bytes(p + 64, &mut tags)
                    .map_err(|e| e.to_string())?;
                if u64::from_le_bytes(tags) != tag {
                    return Err(format!("thread {t} slot {slot}: object {p:#x} torn"));
                }
                // The model's size, as the usable size's class: the tag says which it was.
                let model = states
                    .iter()
                    .flat_map(|s| s[slot])
                    .find(|&(m, _)| m == tag)
                    .map_or(0, |(_, s)| s);
                if size < model {
                    return Err(format!("thread {t} slot {slot}: object {p:#x} of {size} bytes holds tag {tag:#x} of a {model}-byte one"));
                }
                *seen = Some((tag, model));
                published.push(p);
            }
            let acked = &states[d];
            let next = states.get(d + 1);
            if observed != *acked && next != Some(&observed) {
                return Err(format!(
                    "thread {t}: slots {observed:x?}; acknowledged {acked:x?}, in flight {next:x?}"
                ));
            }
        }
        for &(offset, size) in &live {
            if !published.contains(&offset) && !setup.live.contains(&(offset, size)) {
                return Err(format!(
                    "leak: live allocation {offset:#x}+{size} is published nowhere"
                ));
            }
        }
        for &(offset, size) in &setup.live {
            if !live.contains(&(offset, size)) {
                return Err(format!("the root {offset:#x}+{size} is gone"));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The harness.

/// What schedules of one workload found.
#[derive(Debug, Default)]
struct Totals {
    schedules: u64,
    points: u64,
    images: u64,
    failures: Vec<String>,
    /// Failures that are a crash image failing its check (not a run that failed by itself).
    caught: Vec<String>,
    /// Per schedule, a digest of its run: every crash point's kind, acknowledgements and
    /// pending words, and the order of the acknowledgements (replay must give the same).
    digests: Vec<u64>,
}

/// Images per crash point: `default`, or `MNEMO_CONC_CUTS` if set.
fn cuts_per_point(default: usize) -> usize {
    std::env::var("MNEMO_CONC_CUTS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Run `schedule` of `workload`, with `mutant` on (for the run and every recovery), and
/// check every image of every fence.
fn run_schedule<W: Workload>(
    workload: &Arc<W>,
    schedule: Schedule,
    mutant: Option<&'static str>,
    cuts: usize,
    totals: &Arc<StdMutex<Totals>>,
) {
    let w = Arc::clone(workload);
    let out = Arc::clone(totals);
    let seed = schedule.seed;
    let body = move |real: bool| {
        let run = || run_once(&w, &schedule.to_string(), seed, real, cuts, &out);
        match mutant {
            Some(name) => mnemo_pmem::mutant::with(name, run),
            None => run(),
        }
    };
    let result = conc::run(schedule, body);
    let mut totals = totals.lock().unwrap_or_else(|p| p.into_inner());
    totals.schedules += 1;
    if let Err(panic) = result {
        totals.failures.push(format!(
            "{} schedule {schedule} (seed {seed}): a thread panicked: {panic}",
            workload.name()
        ));
    }
}

/// One execution of `w`: setup, its threads, then (if `real`) every fence's images checked.
/// `schedule` names the schedule in failures; `seed` drives the workload and the cuts.
fn run_once<W: Workload>(
    w: &Arc<W>,
    schedule: &str,
    seed: u64,
    real: bool,
    cuts: usize,
    totals: &StdMutex<Totals>,
) {
    let fail = |what: String| {
        let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
        t.failures.push(format!(
            "{} schedule {schedule}: {what} (replay: MNEMO_CONC_REPLAY={schedule} scripts/test-shuttle.sh)",
            w.name()
        ));
    };
    let (size, size_max) = w.sizes();
    let options = heap_options();
    let media = SimMedia::with_options(size_max, SimOptions::default());
    let made = pool::create(media.clone(), "conc", size, size_max)
        .and_then(|pool| Heap::create(pool, &options).map_err(|e| e.to_string()));
    let heap = match made {
        Ok(heap) => heap,
        Err(e) => return fail(format!("setup: {e}")),
    };
    let setup = match w.setup(&heap) {
        Ok(setup) => setup,
        Err(e) => return fail(format!("setup: {e}")),
    };
    // Acknowledgements in the order the medium counted them: thread ids.
    let acks: Arc<StdMutex<Vec<usize>>> = Arc::default();
    media.set_recording(true);
    let handles: Vec<_> = (0..w.threads())
        .map(|t| {
            let (heap, setup, media, acks) = (
                heap.clone(),
                setup.clone(),
                media.clone(),
                Arc::clone(&acks),
            );
            let w = Arc::clone(w);
            shuttle::thread::spawn(move || {
                // No shuttle call between the two: no other task runs in between, so the
                // medium's count and the list agree.
                let ack = || {
                    media.mark_ack();
                    acks.lock().unwrap_or_else(|p| p.into_inner()).push(t);
                };
                w.thread(&heap, &setup, seed, t, &ack)
            })
        })
        .collect();
    let mut errors = Vec::new();
    for (t, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push(format!("thread {t} panicked")),
        }
    }
    media.mark_end();
    media.set_recording(false);
    drop(heap);
    if !errors.is_empty() {
        // Its images are checked all the same (a mutant may make a run fail by itself, and
        // the acknowledgements so far still hold).
        fail(format!("the run failed: {}", errors.join("; ")));
    }
    if !real {
        return;
    }
    let points = media.take_points();
    let acks = acks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut digest = acks.iter().fold(0u64, |d, &t| mix64(d ^ t as u64));
    for point in &points {
        digest =
            mix64(digest ^ mix64(format!("{:?}", point.kind).len() as u64 ^ point.acked as u64));
        for word in &point.words {
            // The pool header's values hold the pool's random identity: offsets only there.
            let value = if word.offset >= DATA_OFFSET {
                word.new
            } else {
                0
            };
            digest = mix64(digest ^ word.offset ^ mix64(value));
        }
    }
    totals
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .digests
        .push(digest);
    let mut rng = SimRng::new(seed ^ 0xc0ff_ee00);
    let (mut npoints, mut nimages) = (0u64, 0u64);
    for (index, point) in points.iter().enumerate() {
        if !matches!(point.kind, PointKind::Fence(_) | PointKind::End) {
            continue;
        }
        npoints += 1;
        let mut done = vec![0usize; w.threads()];
        for &t in &acks[..point.acked.min(acks.len())] {
            done[t] += 1;
        }
        for cut in conc::sample_cuts(point.units.len(), cuts, &mut rng) {
            nimages += 1;
            let image = conc::image(point, &cut);
            let media = SimMedia::from_image(&image, size_max, SimOptions::default());
            let checked = pool::open(media)
                .and_then(|pool| pool.ok_or_else(|| "no pool in the image".to_string()))
                .and_then(|pool| {
                    Heap::open_with(pool, &options).map_err(|e| format!("recovery failed: {e}"))
                })
                .and_then(|heap| w.check(&heap, &setup, seed, &done));
            if let Err(e) = checked {
                let what = format!(
                    "point {index} ({:?}, {} acknowledged: {done:?}), {cut}: {e}",
                    point.kind, point.acked
                );
                fail(what.clone());
                let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
                t.caught
                    .push(format!("{} schedule {schedule}: {what}", w.name()));
                t.points += npoints;
                t.images += nimages;
                return;
            }
        }
    }
    let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
    t.points += npoints;
    t.images += nimages;
}

/// Run `count` schedules of `workload` (or only `MNEMO_CONC_REPLAY`'s), `mutant` on.
fn explore<W: Workload>(
    workload: W,
    base: u64,
    count: u64,
    mutant: Option<&'static str>,
    stop_at_first_failure: bool,
    cuts: usize,
) -> Totals {
    let workload = Arc::new(workload);
    let totals = Arc::new(StdMutex::new(Totals::default()));
    let schedules = match conc::replay_target() {
        Some(one) => vec![one],
        None => conc::schedules(base, count),
    };
    for schedule in schedules {
        run_schedule(&workload, schedule, mutant, cuts, &totals);
        if stop_at_first_failure && !totals.lock().unwrap().caught.is_empty() {
            break;
        }
    }
    let totals = std::mem::take(&mut *totals.lock().unwrap());
    totals
}

/// Whether `MNEMO_CONC_REPLAY` names a schedule starting with `prefix` (another test's: this
/// one then does nothing).
fn replaying(prefix: &str) -> bool {
    std::env::var("MNEMO_CONC_REPLAY").is_ok_and(|v| v.trim().starts_with(prefix))
}

/// Random and PCT schedules of each workload per run (`MNEMO_CONC_SCHEDULES` changes it).
const LANES_SCHEDULES: u64 = 1500;
const ARENAS_SCHEDULES: u64 = 1000;

fn report(name: &str, kind: &str, totals: &Totals, started: Instant) {
    println!(
        "concurrency {name}: {} schedules ({kind}), {} crash points (fences), \
         {} crash images recovered and checked, {} failures, {:.1} s",
        totals.schedules,
        totals.points,
        totals.images,
        totals.failures.len(),
        started.elapsed().as_secs_f64()
    );
    for f in totals.failures.iter().take(5) {
        println!("  {f}");
    }
}

#[test]
fn lanes_under_random_and_pct_schedules() {
    let started = Instant::now();
    if replaying("bounded") {
        return;
    }
    let totals = explore(
        LANES,
        0x1a7e5,
        conc::schedule_count(LANES_SCHEDULES),
        None,
        false,
        cuts_per_point(2),
    );
    report("lanes", "random, PCT depth 2 and 3", &totals, started);
    assert!(
        totals.failures.is_empty(),
        "{} failures",
        totals.failures.len()
    );
    assert!(totals.images > 0);
}

#[test]
fn arenas_under_random_and_pct_schedules() {
    let started = Instant::now();
    if replaying("bounded") {
        return;
    }
    let totals = explore(
        Arenas,
        0xa7e4a,
        conc::schedule_count(ARENAS_SCHEDULES),
        None,
        false,
        cuts_per_point(2),
    );
    report("arenas", "random, PCT depth 2 and 3", &totals, started);
    assert!(
        totals.failures.is_empty(),
        "{} failures",
        totals.failures.len()
    );
    assert!(totals.images > 0);
}

/// Durability sites (`durable_site!`) whose removal only the concurrent workloads catch.
const CONCURRENT_SITES: &[&str] = &["site:redo.help_own_stage"];

/// Each concurrency mutant (`mnemo_heap::CONCURRENCY_MUTANTS`) makes a crash image of some
/// schedule fail its check, within this many schedules of each workload.
const MUTANT_SCHEDULES: u64 = 300;

#[test]
fn every_concurrency_mutant_is_caught() {
    if replaying("") {
        return;
    }
    let started = Instant::now();
    let caught_by = |name: &'static str| -> Option<String> {
        let lanes = explore(LANES, 0x3a7a, MUTANT_SCHEDULES, Some(name), true, 4);
        if let Some(c) = lanes.caught.first() {
            return Some(format!("{c} (after {} schedules)", lanes.schedules));
        }
        let arenas = explore(Arenas, 0xa3a7a, MUTANT_SCHEDULES, Some(name), true, 4);
        arenas
            .caught
            .first()
            .map(|c| format!("{c} (after {} schedules)", arenas.schedules))
    };
    // And the durability sites the single-threaded sweep cannot catch
    // (`tests/crash.rs`, `BLIND`): the concurrent workloads reach them.
    let names: Vec<&'static str> = mnemo_heap::CONCURRENCY_MUTANTS
        .iter()
        .copied()
        .chain(CONCURRENT_SITES.iter().copied())
        .collect();
    mnemo_testkit::assert_caught("heap concurrency mutants", &names, &[], caught_by);
    println!(
        "concurrency mutants: {} mutants and sites caught in {:.1} s",
        names.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Preemptions the systematic search of the lane core allows.
const CORE_BOUND: usize = 2;

/// The lanes' core (the in-flight bound, the pending record, the horizon scan, adoption)
/// under every schedule of two threads committing two transactions each on two lanes with
/// at most `CORE_BOUND` preemptions ([`conc::Bounded`]), crash images at every fence of each.
/// `MNEMO_CONC_REPLAY=bounded2:N` checks schedule N alone.
#[test]
fn lane_core_every_schedule_with_two_preemptions() {
    if replaying("random") || replaying("pct") {
        return;
    }
    let started = Instant::now();
    let workload = Arc::new(Lanes {
        threads: 2,
        ops: 2,
        mixed: false,
    });
    let cuts = cuts_per_point(1);
    let only = std::env::var("MNEMO_CONC_REPLAY").ok().and_then(|v| {
        v.strip_prefix(&format!("bounded{CORE_BOUND}:"))?
            .parse::<usize>()
            .ok()
    });
    let totals = Arc::new(StdMutex::new(Totals::default()));
    let (w, out) = (Arc::clone(&workload), Arc::clone(&totals));
    let ran = conc::run_bounded(CORE_BOUND, only.map(|n| n + 1), move |n| {
        let label = format!("bounded{CORE_BOUND}:{n}");
        let check = only.is_none_or(|o| o == n);
        run_once(&w, &label, 7, check, cuts, &out);
    });
    let mut totals = std::mem::take(&mut *totals.lock().unwrap());
    match ran {
        Ok(n) => totals.schedules = n as u64,
        Err(e) => totals.failures.push(e),
    }
    report(
        "lane core",
        &format!("every one with at most {CORE_BOUND} preemptions"),
        &totals,
        started,
    );
    assert!(
        totals.failures.is_empty(),
        "{} failures",
        totals.failures.len()
    );
    assert!(totals.schedules > 100 && totals.images > 0);
}

/// A schedule replays exactly: run twice from its seed, the same acknowledgements in the same
/// order, the same crash points with the same pending words (their values from the heap's
/// area on: the pool header holds the pool's random identity), which `MNEMO_CONC_REPLAY`
/// relies on.
#[test]
fn a_schedule_replays_exactly() {
    if replaying("") {
        return;
    }
    for workload in 0..2 {
        let run = || match workload {
            0 => explore(LANES, 0x5eed, 6, None, false, 1),
            _ => explore(Arenas, 0x5eed, 6, None, false, 1),
        };
        let (first, second) = (run(), run());
        assert!(first.failures.is_empty() && second.failures.is_empty());
        assert_eq!(first.digests.len(), 6);
        assert_eq!(first.digests, second.digests, "workload {workload}");
        let distinct: std::collections::HashSet<_> = first.digests.iter().collect();
        assert!(distinct.len() > 1, "the schedules differ from each other");
    }
}
