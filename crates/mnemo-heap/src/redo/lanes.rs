//! Lanes: the one-fence commit protocol, the help path and the durable horizon.
//!
//! Each lane is a ring of `lane_slots` record slots (see
//! [`crate::layout::LANE_SLOTS_DEFAULT`]), held by one committing thread at a time. A commit
//! copies its record into the lane's next slot, makes it durable with one sync point (the
//! commit point), which also names this thread's earlier applied-but-unflushed records, then
//! applies the entries in place, unflushed: the record is *pending* until a later fence of
//! this thread (or a helper's, [`Lanes::help`]) covers its application. Recovery replays
//! every record with `seq >= max(horizon word, every record's horizon)`, in seq order.
//! The protocol and its argument: `docs/design/heap-and-transactions.md`.
//!
//! # State
//! Per lane, volatile: `inflight` (a lower bound of the seq of the commit in progress, 0:
//! none), `pending` (the seq of the lane's oldest applied record no fence has covered, 0:
//! none; tagged with `PENDING_DEFERRED` while it stands for two records), `applier` (the
//! thread whose fence covers it), `durable_h` (the largest horizon a fenced record of the lane
//! carries), per slot the seq of its record. Durable: the records and the horizon word. `MH`
//! ([`Lanes::durable_horizon`]) is the largest of the horizon word and every `durable_h`.
//!
//! # Invariants
//! Each is stated here once, and `debug_assert!`ed where it must hold.
//!
//! 1. **In flight.** From before a commit takes its seq `s` until its record is pending (or,
//!    in fenced mode, its application fenced), its lane's `inflight` holds a bound
//!    `0 < b <= s`; a commit stores `pending` before it clears `inflight`. So no committed
//!    record whose application is unfenced escapes the minimum a horizon scan takes.
//!    (Asserted by `admit`, `sequence`, `publish`.)
//! 2. **Pending.** `pending` is cleared only after a fence that covers every application it
//!    stands for: the holder's own fence, when the holder applied the record or adopted it
//!    (flushed its ranges again before the fence), or a helper's, which flushed the lane's
//!    pending ranges under the lane's lock; a deferral stores the older seq again, tagged,
//!    so that no helper's compare-and-swap clears it while the newer application is
//!    unfenced. (Asserted by `publish`; `clear_own` takes a `Fenced` proof.)
//! 3. **Horizon.** A record's horizon claims every record below it applied and fenced: it is
//!    at most the counter and every lane's `inflight` and `pending` when the lanes are
//!    scanned, else the lane's `durable_h` (an older true claim: a weaker one). So it never
//!    exceeds the record's seq nor its lane's `pending`. (Asserted by `sequence`.)
//! 4. **Overwrite rule.** A slot holding record `w` is overwritten only when a durable claim
//!    lies above it: `MH > w`. The claim the next overwrite needs is computed one commit
//!    early; when it is missing, the help path makes one. (Asserted by `write`.)
//! 5. **Waits.** A commit that waits for other lanes (`cover_fresh`, the help path) holds no
//!    `inflight` bound meanwhile, and a commit in flight waits for nobody: the help path,
//!    which waits for commits in flight below its target, always ends.
//!
//! Together: every committed record whose application may not be durable has
//! `seq >= MH` and every claim, so it is still in its slot (4) and recovery replays it.

use std::sync::atomic::Ordering;

#[cfg(mnemo_shuttle)]
use crate::sync::LocalRefCell;
use crate::sync::{thread_local, yield_now, AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard};

use mnemo_pmem::{cpu, mutant};
use mnemo_pmem::{ByteRange, Pool, SyncKind, SyncPoint};

use super::ranges::{cap_ranges, push_range};
use super::record::{apply, apply_split, apply_words, atomic_word, seal, WordUpdate};
use crate::error::{Error, Result};
use crate::layout::{Geometry, LANE_SLOTS_MAX};

/// Tag of a lane's `pending` while it covers two records' applications (a deferral): the
/// seq is the older one's; the tag makes compare-and-swaps by threads that saw the untagged
/// value fail.
const PENDING_DEFERRED: u64 = 1 << 63;

/// Commits without fresh bytes after which a lane clears its bit of `fresh_mask`.
const FRESH_CLEAR_AFTER: u32 = 8;

/// What the conflict check of [`Lanes::conflicts`] knows about one slot's record.
#[derive(Debug, Default)]
struct SlotInfo {
    /// Sequence number of the record in the slot (0: none).
    seq: AtomicU64,
    /// Range of user data it changed (lo >= hi: none).
    lo: AtomicU64,
    hi: AtomicU64,
}

/// The words of a lane that other lanes' horizon scans read, on lines of their own: a scan
/// makes the line shared, and the owner's next store to it must fetch it back, so nothing
/// else the owner writes during a commit (its lane state, slot records) may share it.
#[derive(Debug)]
#[repr(align(128))]
struct ScanLine {
    /// Lower bound of the sequence number of the commit in progress (0: none).
    inflight: AtomicU64,
    /// Sequence number of the lane's latest record if it is applied and flushed but not yet
    /// covered by a fence (0: none).
    pending: AtomicU64,
}

/// A lane: a ring of record slots (the heap's `lane_slots`), held by one committing thread at
/// a time.
#[derive(Debug)]
#[repr(align(128))]
pub struct Lane {
    state: Mutex<LaneState>,
    /// The two words every other lane's horizon scan reads.
    scan: ScanLine,
    /// Largest horizon carried by a durable record of this lane (written by the holder only,
    /// so a plain store; `MH` is the maximum over the lanes and the horizon word).
    durable_h: AtomicU64,
    /// Thread (see `thread_id`) that applied the pending record, or adopted it.
    applier: AtomicU64,
    /// Bytes the pending record's transaction wrote in place, unlogged (its check entries;
    /// lo >= hi: none). Written while `pending` is 0.
    fresh_lo: AtomicU64,
    fresh_hi: AtomicU64,
    /// The ring's slots (the first `lane_slots`; inline, so no other lane's data shares
    /// their lines).
    slots: [SlotInfo; LANE_SLOTS_MAX as usize],
}

/// What the holder of a lane uses.
#[derive(Debug)]
pub struct LaneState {
    /// Lane index.
    pub index: u32,
    /// Slot the next record goes into.
    next_slot: u64,
    /// The record being built.
    pub buf: Vec<u8>,
    /// Ranges changed by the lane's pending record (valid while `pending` is non-zero).
    pending_ranges: Vec<ByteRange>,
    /// Scratch ranges for the next apply.
    scratch: Vec<ByteRange>,
    /// The bitmap-word updates of the record being applied, left for the end of the commit.
    words: Vec<WordUpdate>,
    /// Scratch ranges of the next sync point.
    sync: Vec<ByteRange>,
    /// Ranges the commit in progress staged before its record (another lane's pending
    /// application it adopted or covers): its sync point names them too.
    staged: Vec<ByteRange>,
    /// The holding thread (see `thread_id`), set by [`Lanes::acquire`].
    holder: u64,
    /// Commits of this lane since its last horizon scan (a lane scans at least once per turn
    /// of its ring, more often when the overwrite rule needs it).
    since_scan: u32,
    /// Whether this lane's bit in [`Lanes::fresh_mask`] is set.
    fresh_bit: bool,
    /// Commits of this lane since its last one with fresh (CRC-checked) bytes.
    since_fresh: u32,
    /// Sequence number of this lane's latest commit (0: none since open).
    last_seq: u64,
    /// Whether the lane's pending ranges hold two records' applications: the latest commit
    /// left its predecessor's unflushed (see `Lanes::commit`), so the next one flushes.
    deferred: bool,
}

/// An atomic word alone on its cache line (and the adjacent-line prefetch pair).
#[derive(Debug)]
#[repr(align(128))]
struct OwnLine(AtomicU64);

/// All lanes, the commit sequence counter and the horizon.
#[derive(Debug)]
pub struct Lanes {
    lanes: Box<[Lane]>,
    /// Lanes ever handed out are `0..used` (the horizon scan stops there).
    used: AtomicUsize,
    /// Next sequence number to hand out. Written by every commit, so on a cache line of its
    /// own: the fields beside it are read by every commit of every thread.
    counter: OwnLine,
    /// Lanes whose pending record may have fresh (CRC-checked, in-place) bytes: bit `i` for
    /// lane `i < 63`, bit 63 for every lane from 63 on. A superset (set before such a
    /// record becomes pending, cleared lazily by the lane's holder), so that a commit that
    /// changes data reads other lanes' lines only when one may matter. On a line of its own:
    /// read by every such commit, written rarely.
    fresh_mask: OwnLine,
    /// Every commit fences its application before returning (two fences): for callers that
    /// store to transactional data outside transactions (the C ABI).
    fenced: AtomicBool,
    /// Commits may leave their predecessor's application unflushed (a deferral; heap
    /// format version 3 and later).
    defer: AtomicBool,
    /// The persistent horizon word's value (a durable claim; `MH` is the larger of it and
    /// every lane's `durable_h`).
    word_value: AtomicU64,
    /// The persistent horizon word's value (writes serialized by the lock).
    word: Mutex<u64>,
    /// Round-robin start for threads without a lane preference.
    next_hint: AtomicUsize,
    /// Slots per lane minus one (the count is a power of two).
    slot_mask: u64,
    /// Whether the CPU has `prefetchw`.
    #[cfg_attr(mnemo_shuttle, allow(dead_code))]
    prefetchw: bool,
    /// Process-unique identity, for the thread-local state.
    instance: u64,
}

/// A record this thread applied and flushed whose flushes no fence of it has covered yet.
#[derive(Clone, Copy, Debug)]
struct Pend {
    instance: u64,
    lane: u32,
    seq: u64,
}

/// A thread's lane state: its lane preference (per heap instance, so a new heap starts
/// afresh: deterministic lane and arena choice for the crash simulator's replays), its
/// identity, and the records it left pending.
#[derive(Debug)]
struct ThreadLanes {
    hint_instance: u64,
    hint: usize,
    id: u64,
    pending: Vec<Pend>,
    /// Applied ranges of this thread's pending records, per heap instance: applied in place
    /// and not yet flushed. The thread's next commit on that heap flushes them just before
    /// its fence and names them in its sync point (one unit of the pipeline: "record N +
    /// applied data of N-1").
    ranges: Vec<(u64, ByteRange)>,
}

thread_local! {
    // Const-initialised: every commit reaches it two or three times, without a lazy-init check.
    static THREAD: std::cell::RefCell<ThreadLanes> = const {
        std::cell::RefCell::new(ThreadLanes {
            hint_instance: 0,
            hint: 0,
            id: 0,
            pending: Vec::new(),
            ranges: Vec::new(),
        })
    };
}

fn thread_id(t: &mut ThreadLanes) -> u64 {
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    if t.id == 0 {
        t.id = IDS.fetch_add(1, Ordering::Relaxed);
    }
    t.id
}

/// What [`Lanes::commit`] commits: the record built in the lane's buffer, and what the lanes
/// must know of it.
#[derive(Clone, Copy)]
pub struct Commit<'a> {
    /// Entries in the record (after its zeroed header, in [`LaneState::buf`]).
    pub count: u32,
    /// Bytes written in place and not yet flushed (fresh allocations): staged before the
    /// fence and named by its sync point.
    pub extra: &'a [ByteRange],
    /// Range of user data the entries change (lo >= hi: none).
    pub data: (u64, u64),
    /// Range of `extra`, which the record's check entries cover (lo >= hi: none).
    pub fresh: (u64, u64),
    /// Whether an entry may change `(offset, len)`: the areas records may change.
    pub allowed: &'a dyn Fn(u64, u64) -> bool,
}

impl<'a> Commit<'a> {
    /// A record of `count` entries that changes no user data and wrote nothing in place
    /// (allocator metadata: a bitmap mask, a chunk-table entry).
    pub fn metadata(count: u32, allowed: &'a dyn Fn(u64, u64) -> bool) -> Commit<'a> {
        Commit {
            count,
            extra: &[],
            data: (u64::MAX, 0),
            fresh: (u64::MAX, 0),
            allowed,
        }
    }
}

impl std::fmt::Debug for Commit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Commit")
            .field("count", &self.count)
            .field("extra", &self.extra)
            .field("data", &self.data)
            .field("fresh", &self.fresh)
            .finish_non_exhaustive()
    }
}

/// What the sequence phase of a commit hands on: the lane, the slot the record goes into,
/// its sequence number and the horizon it carries.
#[derive(Clone, Copy, Debug)]
struct Sealed<'a> {
    me: &'a Lane,
    slot: usize,
    seq: u64,
    horizon: u64,
}

/// How far a commit's fence reached.
#[derive(Debug)]
enum Written {
    /// Its sync point named this thread's pending applications too (and the lane's pending
    /// record, adopted or its own): they are covered.
    Covered(Fenced),
    /// It named the record only (a deferral): the lane's pending record, this thread's
    /// previous one (seq), stays pending, now with this record's application too.
    Deferred(u64),
}

/// Proof that a sync point of this thread returned: what it named is durable. Pending
/// records are cleared only with one in hand (invariant 2).
#[derive(Clone, Copy, Debug)]
struct Fenced(());

/// Copy the sealed record into its slot (at `slot`, `capacity` bytes), on its way to media,
/// not fenced. A deferring commit's record is the fence's only line: whole lines of
/// non-temporal stores then write back faster than store + clwb (measured: 141-183 against
/// 198 ns with the fence); with a clwb'd line in the same fence they are slower.
#[inline]
fn store_record(
    pool: &Pool,
    lane: &mut LaneState,
    slot: u64,
    capacity: u64,
    defer: bool,
) -> Result<()> {
    if mutant::active("tx.skip_record_flush") {
        pool.write(slot, &lane.buf)?; // stored, never flushed
    } else if defer && lane.buf.len().next_multiple_of(64) as u64 <= capacity {
        // The padding lies past the record's length, inside its slot.
        let len = lane.buf.len();
        lane.buf.resize(len.next_multiple_of(64), 0);
        let streamed = mnemo_pmem::durable_site!(
            "redo.record_stream",
            pool.stream_nodrain(slot, &lane.buf),
            pool.write(slot, &lane.buf)
        );
        lane.buf.truncate(len);
        streamed?;
    } else {
        mnemo_pmem::durable_site!(
            "redo.record_copy",
            pool.copy_nodrain(slot, &lane.buf),
            pool.write(slot, &lane.buf)
        )?;
    }
    Ok(())
}

/// A held lane.
pub type LaneGuard<'a> = MutexGuard<'a, LaneState>;

/// What recovery found in one lane: the sequence number in each slot (0: none) and the slot
/// the next record goes into.
#[derive(Clone, Debug)]
pub struct LaneStart {
    /// Per slot, the valid record's sequence number (0: none); one entry per slot of the
    /// ring (a power of two, at most [`LANE_SLOTS_MAX`]).
    pub slot_seq: Vec<u64>,
    /// Slot of the next record.
    pub next_slot: u64,
}

impl LaneStart {
    /// A lane of `slots` empty slots.
    pub fn new(slots: u32) -> LaneStart {
        LaneStart {
            slot_seq: vec![0; slots as usize],
            next_slot: 0,
        }
    }
}

impl Lanes {
    /// Lanes after recovery: `starts[i]` describes lane i; `next_seq` is the first sequence
    /// number to hand out, `word` the persistent horizon word (every record below it is
    /// applied and durable).
    ///
    /// Panics if the lanes' slot counts differ or one is not a power of two in
    /// `LANE_SLOTS_MIN..=LANE_SLOTS_MAX` (the geometry was validated before).
    pub fn new(starts: &[LaneStart], next_seq: u64, word: u64) -> Lanes {
        let slots = starts.first().map_or(1, |s| s.slot_seq.len());
        assert!(
            slots.is_power_of_two()
                && (crate::layout::LANE_SLOTS_MIN as usize..=LANE_SLOTS_MAX as usize)
                    .contains(&slots)
                && starts.iter().all(|s| s.slot_seq.len() == slots),
            "lane slot counts"
        );
        let slot_mask = slots as u64 - 1;
        let lanes = starts
            .iter()
            .enumerate()
            .map(|(i, start)| Lane {
                state: Mutex::new(LaneState {
                    index: i as u32,
                    next_slot: start.next_slot & slot_mask,
                    buf: Vec::new(),
                    pending_ranges: Vec::new(),
                    scratch: Vec::new(),
                    words: Vec::new(),
                    sync: Vec::new(),
                    staged: Vec::new(),
                    holder: 0,
                    since_scan: 0,
                    fresh_bit: false,
                    since_fresh: 0,
                    last_seq: 0,
                    deferred: false,
                }),
                scan: ScanLine {
                    inflight: AtomicU64::new(0),
                    pending: AtomicU64::new(0),
                },
                durable_h: AtomicU64::new(0),
                applier: AtomicU64::new(0),
                fresh_lo: AtomicU64::new(u64::MAX),
                fresh_hi: AtomicU64::new(0),
                slots: std::array::from_fn(|k| SlotInfo {
                    seq: AtomicU64::new(start.slot_seq.get(k).copied().unwrap_or(0)),
                    lo: AtomicU64::new(u64::MAX),
                    hi: AtomicU64::new(0),
                }),
            })
            .collect();
        Lanes {
            lanes,
            used: AtomicUsize::new(0),
            counter: OwnLine(AtomicU64::new(next_seq.max(1))),
            fresh_mask: OwnLine(AtomicU64::new(0)),
            fenced: AtomicBool::new(false),
            defer: AtomicBool::new(false),
            word_value: AtomicU64::new(word),
            word: Mutex::new(word),
            next_hint: AtomicUsize::new(0),
            slot_mask,
            prefetchw: cpu::cpu_has_prefetchw(),
            instance: crate::next_instance(),
        }
    }

    /// Hold a lane: this thread's usual one if free, else any free one, else wait for the usual.
    /// Sets the lane's in-flight bound for the commit that follows: every `acquire` is followed
    /// by [`Lanes::commit`] on the lane (which clears it, whatever its outcome).
    pub fn acquire(&self) -> LaneGuard<'_> {
        let n = self.lanes.len();
        let (first, tid) = THREAD.with_borrow_mut(|t| {
            if t.hint_instance != self.instance {
                t.hint = self.next_hint.fetch_add(1, Ordering::Relaxed);
                t.hint_instance = self.instance;
            }
            (t.hint % n, thread_id(t))
        });
        let mut guard = (0..n)
            .find_map(|k| self.lanes[(first + k) % n].state.try_lock().ok())
            .unwrap_or_else(|| {
                self.lanes[first]
                    .state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
            });
        if guard.index as usize != first {
            // Another thread holds this thread's usual lane (two threads came to prefer the
            // same one, e.g. after one moved off a blocked lane below): keep the lane found
            // instead, so that the two stop meeting at every commit (each meeting hands the
            // lanes' lines between CPUs and makes the next holder adopt a pending record).
            let hint = guard.index as usize;
            THREAD.with_borrow_mut(|t| t.hint = hint);
        }
        if self.blocked(&guard) {
            // The lane's next slot holds a record no durable claim passes yet (another
            // lane's pending record holds the horizon back): rather than the help path (a
            // fence, a horizon-word write, maybe waiting for the other commit), move to a
            // free lane whose next slot is free to overwrite, and stay there. Any thread may
            // commit on any free lane; this only chooses which.
            let index = guard.index as usize;
            let other = (1..n).find_map(|k| {
                let lane = self.lanes[(index + k) % n].state.try_lock().ok()?;
                (!self.blocked(&lane)).then_some(lane)
            });
            if let Some(other) = other {
                let hint = other.index as usize;
                guard = other;
                THREAD.with_borrow_mut(|t| t.hint = hint);
            }
        }
        if guard.last_seq != 0 {
            // The commit's lower bound, stored now rather than just before its fetch_add:
            // other CPUs' horizon scans read this line, so the store usually misses, and the
            // fetch_add (a locked instruction) would wait for it; here the miss overlaps
            // building the record. Any bound below the commit's seq is a valid one.
            self.lanes[guard.index as usize]
                .scan
                .inflight
                .store(guard.last_seq + 1, Ordering::Release);
        }
        // The counter's line is usually in the other committing CPU's cache: ask for it now,
        // so that the transfer overlaps building the record instead of stalling the fetch_add
        // (a locked instruction) of the commit.
        // (Under shuttle the counter is shuttle's atomic, and a prefetch means nothing.)
        #[cfg(not(mnemo_shuttle))]
        cpu::prefetch_for_write(self.prefetchw, &self.counter.0);
        let end = guard.index as usize + 1;
        if self.used.load(Ordering::Relaxed) < end {
            self.used.fetch_max(end, Ordering::SeqCst);
        }
        guard.holder = tid;
        guard
    }

    /// Whether the next commit on `lane` would need the help path: its next slot holds a
    /// record that no durable claim passes (the overwrite rule).
    fn blocked(&self, lane: &LaneState) -> bool {
        let me = &self.lanes[lane.index as usize];
        let w = me.slots[lane.next_slot as usize]
            .seq
            .load(Ordering::Acquire);
        w != 0 && me.durable_h.load(Ordering::Acquire) <= w && self.durable_horizon() <= w
    }

    /// The slots of `lane`'s ring.
    fn ring<'a>(&self, lane: &'a Lane) -> &'a [SlotInfo] {
        &lane.slots[..=self.slot_mask as usize]
    }

    fn used_lanes(&self) -> &[Lane] {
        let used = self.used.load(Ordering::SeqCst).min(self.lanes.len());
        &self.lanes[..used]
    }

    /// Every record with a smaller sequence number is applied and its application fenced
    /// (conservative). Per lane, `inflight` is read before `pending`: a commit stores its
    /// pending sequence number before it clears `inflight`.
    fn horizon(&self) -> u64 {
        let mut h = self.counter.0.load(Ordering::Acquire);
        for lane in self.used_lanes() {
            let s = lane.scan.inflight.load(Ordering::Acquire);
            if s != 0 && s < h {
                h = s;
            }
            let p = lane.scan.pending.load(Ordering::Acquire) & !PENDING_DEFERRED;
            // Broken: other lanes' pending records (applied, not yet fenced) are passed over,
            // so a record claims them fenced too early.
            if p != 0 && p < h && !mutant::active("redo.horizon_early") {
                h = p;
            }
        }
        h
    }

    /// The sequence number the next commit takes: every commit that has returned has a
    /// smaller one.
    pub fn next_seq(&self) -> u64 {
        self.counter.0.load(Ordering::Acquire)
    }

    /// `MH`: the largest horizon known to be durable; records below it are never replayed.
    pub fn durable_horizon(&self) -> u64 {
        self.used_lanes()
            .iter()
            .map(|lane| lane.durable_h.load(Ordering::Acquire))
            .fold(self.word_value.load(Ordering::Acquire), u64::max)
    }

    /// Largest sequence number of a durable record present in a slot (the horizon word may
    /// claim at most one more: recovery checks it against what it finds).
    fn durable_max(&self) -> u64 {
        self.used_lanes()
            .iter()
            .flat_map(|lane| self.ring(lane).iter())
            .map(|slot| slot.seq.load(Ordering::Acquire))
            .fold(
                self.word_value.load(Ordering::Acquire).saturating_sub(1),
                u64::max,
            )
    }

    /// After a fence issued by this thread (`_fence`): its pending records of this heap are
    /// covered.
    fn clear_own(&self, t: &mut ThreadLanes, _fence: Fenced) {
        let mut others = false;
        for p in &t.pending {
            if p.instance != self.instance {
                others = true;
                continue;
            }
            let lane = &self.lanes[p.lane as usize];
            let cur = lane.scan.pending.load(Ordering::Acquire);
            // A tagged value (two records pending after a deferral) is this thread's to clear
            // only if it applied them: its fence then covered both (its own ranges, or lines
            // it flushed when adopting the lane).
            let mine = cur == p.seq | PENDING_DEFERRED
                && t.id != 0
                && lane.applier.load(Ordering::Acquire) == t.id;
            if cur == p.seq || mine {
                let _ =
                    lane.scan
                        .pending
                        .compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Acquire);
            }
        }
        if others {
            t.pending.retain(|p| p.instance != self.instance);
            t.ranges.retain(|&(instance, _)| instance != self.instance);
        } else {
            // The usual case, one heap: ranges exist only beside a pending record of theirs.
            t.pending.clear();
            t.ranges.clear();
        }
    }

    /// Commit the record built in `lane.buf` (entries after a zeroed header, `op.count` of
    /// them) with one fence: the record is copied into the lane's next slot and flushed, then
    /// one sync point (the commit point) makes it durable together with this thread's
    /// earlier applied-but-unfenced records and `op.extra` (written in place and not yet
    /// flushed); then the entries are applied in place, not flushed: the record is *pending*
    /// until this thread's next fence (or a helper's) covers it. Returns the sequence number.
    ///
    /// Four phases, each keeping the invariants stated at the top of this module: *admit*
    /// (the record fits; the lane's pending record adopted if another thread applied it;
    /// other lanes' pending in-place bytes this commit changes covered; the overwrite rule
    /// met for the lane's next slot; the in-flight bound stored), *sequence* (the sequence
    /// number, the horizon, the sealed record), *write* (the record into its slot, the sync
    /// point, the entries applied in place) and *publish* (what the lanes and the thread know
    /// of the record: slot, durable horizon, pending record; the bitmap masks; then
    /// `inflight` cleared).
    pub fn commit(
        &self,
        pool: &Pool,
        geometry: &Geometry,
        lane: &mut LaneState,
        op: &Commit<'_>,
    ) -> Result<u64> {
        let me = &self.lanes[lane.index as usize];
        if let Err(e) = self.admit(me, pool, geometry, lane, op) {
            me.scan.inflight.store(0, Ordering::Release);
            return Err(e);
        }
        let sealed = self.sequence(me, lane, op.count);
        let mut applied = std::mem::take(&mut lane.scratch);
        applied.clear();
        let written = self.write(pool, geometry, lane, op, &sealed, &mut applied);
        self.publish(pool, lane, op, &sealed, written, applied)
    }

    /// Phase 1 of [`Lanes::commit`]: what must hold before the sequence number is taken.
    /// Ends with the lane's `inflight` bound stored (invariant 1); on an error the caller
    /// clears it.
    #[inline]
    fn admit(
        &self,
        me: &Lane,
        pool: &Pool,
        geometry: &Geometry,
        lane: &mut LaneState,
        op: &Commit<'_>,
    ) -> Result<()> {
        let capacity = geometry.slot_size();
        if lane.buf.len() as u64 > capacity {
            return Err(Error::TransactionTooLarge {
                needed: lane.buf.len() as u64,
                capacity,
            });
        }
        self.adopt(me, pool, lane)?;
        let index = lane.index as usize;
        // A commit that waits for other lanes (below) must not hold its `inflight` bound
        // meanwhile (the early one of `acquire`): two such commits would wait for each other
        // (invariant 5). Both waits are rare; the bound is stored again before the fetch_add.
        // Whether `acquire`'s bound is still stored (it stores one unless this is the lane's
        // first commit since open):
        let mut bound_stored = lane.last_seq != 0;
        debug_assert!(
            !bound_stored || me.scan.inflight.load(Ordering::Relaxed) == lane.last_seq + 1,
            "in flight: lane {index} was acquired without its bound"
        );
        // Bytes another thread's pending record wrote in place (checked by CRC at recovery):
        // this commit changes them, so that record's application must be durable first.
        if op.data.0 < op.data.1 && self.fresh_mask.0.load(Ordering::SeqCst) != 0 {
            me.scan.inflight.store(0, Ordering::Release);
            bound_stored = false;
            self.cover_fresh(pool, index, lane.holder, op.data, &mut lane.staged)?;
        }
        // The overwrite rule: the slot's record may go only once a durable claim exceeds it.
        let w = me.slots[lane.next_slot as usize]
            .seq
            .load(Ordering::Acquire);
        if w != 0
            && me.durable_h.load(Ordering::Acquire) <= w
            && self.durable_horizon() <= w
            && !mutant::active("redo.ignore_overwrite_rule")
        {
            me.scan.inflight.store(0, Ordering::Release);
            bound_stored = false;
            self.help(pool, geometry, w + 1)?;
        }
        // Release/acquire suffice here and below (plain stores on x86, no locked
        // instruction): a builder that reads the counter past `seq` synchronizes with the
        // fetch_add and sees `inflight`; one that reads `inflight` cleared sees the `pending`
        // stored before.
        // The lower bound: one past the lane's latest seq (the counter only grows), so the
        // counter's line is not read before its fetch_add (a second transfer of it between
        // CPUs); the counter itself only for the lane's first commit.
        // Stored again only if a wait above cleared it (storing the same value again could
        // miss, if a scan read the line since, and the fetch_add would wait for that store).
        if !bound_stored {
            let bound = if lane.last_seq != 0 {
                lane.last_seq + 1
            } else {
                self.counter.0.load(Ordering::Acquire).max(1)
            };
            me.scan.inflight.store(bound, Ordering::Release);
        }
        Ok(())
    }

    /// A pending record left on this lane by another thread: flush its lines again
    /// (write-back works by address from any CPU) and name them in this commit's sync point,
    /// so this thread's fence covers it (invariant 2); it becomes this thread's.
    #[inline]
    fn adopt(&self, me: &Lane, pool: &Pool, lane: &mut LaneState) -> Result<()> {
        let tid = lane.holder;
        let p = me.scan.pending.load(Ordering::SeqCst);
        if p == 0 || me.applier.load(Ordering::Acquire) == tid {
            return Ok(());
        }
        if mutant::active("redo.reuse_lane_unretired") {
            // Broken: the lane is taken over as if its pending record were this thread's,
            // neither flushed again nor named, and this commit clears it: the record counts
            // as fenced, and later horizons pass it, while its application may still be lost.
            me.applier.store(tid, Ordering::Release);
            return Ok(());
        }
        for r in &lane.pending_ranges {
            mnemo_pmem::durable_site!("redo.adopt_stage", pool.stage(r.offset, r.len))?;
        }
        let LaneState {
            pending_ranges,
            staged,
            ..
        } = &mut *lane;
        staged.extend_from_slice(pending_ranges);
        me.applier.store(tid, Ordering::Release);
        self.note_own(lane.index as usize, p);
        Ok(())
    }

    /// Phase 2 of [`Lanes::commit`]: take the sequence number, choose the horizon the record
    /// carries, and seal the record.
    #[inline]
    fn sequence<'l>(&self, me: &'l Lane, lane: &mut LaneState, count: u32) -> Sealed<'l> {
        let seq = self.counter.0.fetch_add(1, Ordering::AcqRel);
        lane.last_seq = seq;
        debug_assert!(
            (1..=seq).contains(&me.scan.inflight.load(Ordering::Relaxed)),
            "in flight: seq {seq} taken on lane {} without a bound at or below it",
            lane.index
        );
        // The horizon: any value below the true one is a valid (weaker) claim, so a commit
        // carries the lane's last durable one, already computed, unless a larger one is
        // needed: when the next commit of this lane would otherwise find its slot's record
        // not below a durable claim (the claim must be durable before that slot is
        // overwritten, so it is computed now, one commit early), and at least once per turn
        // of the ring (freed space waits for the durable horizon). Scanning reads every
        // lane's line, written by other CPUs: the cross-CPU traffic of a commit. The longer
        // the ring, the older the record in the slot after next, and the rarer the scans
        // (with 16 slots, about one commit in 16 scans; with 4, most did).
        let k = lane.next_slot as usize;
        let own_h = me.durable_h.load(Ordering::Relaxed);
        let next = me.slots[(k + 1) & self.slot_mask as usize]
            .seq
            .load(Ordering::Acquire);
        let scan = (next != 0 && own_h <= next) || u64::from(lane.since_scan) >= self.slot_mask;
        let horizon = if mutant::active("redo.no_horizon") {
            0
        } else if scan {
            lane.since_scan = 0;
            self.horizon()
        } else {
            lane.since_scan += 1;
            own_h
        };
        debug_assert!(
            mutant::active("redo.horizon_early")
                || horizon <= seq && {
                    let p = me.scan.pending.load(Ordering::Relaxed) & !PENDING_DEFERRED;
                    p == 0 || horizon <= p
                },
            "horizon: record {seq} of lane {} would claim {horizon}, past its own in-flight \
             or pending record",
            lane.index
        );
        seal(&mut lane.buf, seq, horizon, count);
        Sealed {
            me,
            slot: k,
            seq,
            horizon,
        }
    }

    /// Phase 3 of [`Lanes::commit`], the media work: the record into its slot, the one
    /// sync point, the entries applied in place (not flushed; the bitmap masks left in
    /// `lane.words` for [`Lanes::publish`]). `applied` receives the applied ranges.
    #[inline]
    fn write(
        &self,
        pool: &Pool,
        geometry: &Geometry,
        lane: &mut LaneState,
        op: &Commit<'_>,
        sealed: &Sealed,
        applied: &mut Vec<ByteRange>,
    ) -> Result<Written> {
        let me = sealed.me;
        debug_assert!(
            !self.blocked(lane) || mutant::active("redo.ignore_overwrite_rule"),
            "overwrite rule: slot {} of lane {} holds a record no durable claim passes",
            sealed.slot,
            lane.index
        );
        let capacity = geometry.slot_size();
        let slot = geometry.slot_offset(lane.index, sealed.slot as u64);
        // This thread's previous application (its lane's pending record) may stay unflushed
        // through this commit when neither record wrote bytes in place: a record is replayed
        // until a horizon passes it, and horizons stay below the lane's pending seq, which
        // stays the older record's; the next commit flushes both. Every other commit then
        // flushes, which a ring of 4 slots (the fewest) allows: the horizon a commit computes
        // lies at most two records behind it, above the record its next overwrite needs
        // claimed (three behind). Repeated writes to the same lines (bitmap words of
        // consecutive allocations, a hot counter) then cost one flush per two commits.
        let may_defer = self.defer.load(Ordering::Relaxed)
            && !self.fenced.load(Ordering::Relaxed)
            && op.extra.is_empty()
            && op.fresh.0 >= op.fresh.1
            && me.fresh_lo.load(Ordering::Acquire) >= me.fresh_hi.load(Ordering::Acquire);
        let allowed = op.allowed;
        if mutant::active("tx.apply_before_commit") {
            apply(pool, &lane.buf, allowed, applied)?;
        }
        for r in op.extra {
            mnemo_pmem::durable_site!("redo.extra_stage", pool.stage(r.offset, r.len))?;
        }
        // The one fence, the commit point, as one unit of the sync-point pipeline: this
        // record, the applied data of this thread's pending records (flushed only now, so
        // that their write-back overlaps this record's and no locked instruction in between
        // waits for it), the in-place bytes.
        let skip_apply_flush = mutant::active("tx.skip_flush");
        let mut sync = std::mem::take(&mut lane.sync);
        sync.clear();
        sync.push(ByteRange::new(slot, lane.buf.len() as u64));
        sync.append(&mut lane.staged);
        let pending = me.scan.pending.load(Ordering::Acquire);
        let flushed = THREAD.with_borrow(|t| -> Result<Option<u64>> {
            // Defer when the only unfenced application of this thread is this lane's
            // previous record, and this commit writes nothing in place (above).
            let mut own = t.pending.iter().filter(|p| p.instance == self.instance);
            let defer = may_defer
                && !lane.deferred
                && pending != 0
                && own
                    .next()
                    .is_some_and(|p| p.lane == lane.index && p.seq == pending)
                && own.next().is_none();
            store_record(pool, lane, slot, capacity, defer)?;
            if defer {
                return Ok(Some(pending));
            }
            for &(instance, r) in &t.ranges {
                if instance == self.instance {
                    if !skip_apply_flush {
                        mnemo_pmem::durable_site!(
                            "redo.pending_stage",
                            pool.stage(r.offset, r.len)
                        )?;
                    }
                    sync.push(r);
                }
            }
            Ok(None)
        });
        sync.extend_from_slice(op.extra);
        cap_ranges(&mut sync, mnemo_pmem::limits::GMSYNC_RANGES_MAX);
        let fenced = flushed.and_then(|deferred| {
            mnemo_pmem::durable_site!(
                "redo.commit",
                pool.sync(&SyncPoint::staged(SyncKind::Data, &sync))
            )?;
            Ok(match deferred {
                Some(older) => Written::Deferred(older),
                None => Written::Covered(Fenced(())),
            })
        });
        lane.sync = sync;
        let written = fenced?;
        lane.words.clear();
        if !mutant::active("tx.apply_before_commit") {
            // Bitmap masks are applied at the end of the commit (`Lanes::publish`).
            apply_split(pool, &lane.buf, allowed, applied, Some(&mut lane.words))?;
        }
        Ok(written)
    }

    /// Phase 4 of [`Lanes::commit`]: publish what the lanes and this thread know of the
    /// record (its slot, the lane's durable horizon and pending record), apply the bitmap
    /// masks, and clear `inflight` (invariant 1: after `pending` is stored).
    #[inline]
    fn publish(
        &self,
        pool: &Pool,
        lane: &mut LaneState,
        op: &Commit<'_>,
        sealed: &Sealed,
        written: Result<Written>,
        applied: Vec<ByteRange>,
    ) -> Result<u64> {
        let index = lane.index as usize;
        let me = sealed.me;
        let Sealed { slot: k, seq, .. } = *sealed;
        let (data, fresh) = (op.data, op.fresh);
        // The slot's record: this one if it is durable, else unknown (0: no constraint).
        me.slots[k]
            .seq
            .store(if written.is_ok() { seq } else { 0 }, Ordering::Release);
        me.slots[k].lo.store(data.0.min(fresh.0), Ordering::Release);
        me.slots[k].hi.store(data.1.max(fresh.1), Ordering::Release);
        lane.next_slot = (lane.next_slot + 1) & self.slot_mask;
        // Whether the record stays pending when it leaves flight (not in fenced mode).
        let published = match written {
            Ok(Written::Deferred(older)) => self.keep_pending(pool, lane, sealed, older, applied),
            Ok(Written::Covered(fence)) => self.hand_over(pool, lane, op, sealed, applied, fence),
            Err(e) => {
                lane.scratch = applied;
                Err(e)
            }
        };
        debug_assert!(
            !published.as_ref().is_ok_and(|&stays_pending| stays_pending) || {
                let p = me.scan.pending.load(Ordering::Relaxed) & !PENDING_DEFERRED;
                p != 0 && p <= seq
            },
            "in flight: record {seq} of lane {index} leaves flight before it is pending"
        );
        me.scan.inflight.store(0, Ordering::Release);
        published.map(|_| seq)
    }

    /// [`Lanes::publish`] after a deferral: the lane's pending record stays the previous one
    /// (its seq, its fresh range: none), now with this record's applied ranges added. Its seq
    /// is stored again, tagged: another thread that flushed and fenced the older record (a
    /// helper, a covering commit, an adopting thread) clears `pending` with a
    /// compare-and-swap against the value it saw, after releasing the lane, and must not
    /// clear it now that this record's application is unfenced too (invariant 2). Returns
    /// that the record stays pending.
    #[inline]
    fn keep_pending(
        &self,
        pool: &Pool,
        lane: &mut LaneState,
        sealed: &Sealed,
        older: u64,
        applied: Vec<ByteRange>,
    ) -> Result<bool> {
        let index = lane.index as usize;
        let me = sealed.me;
        let Sealed { seq, horizon, .. } = *sealed;
        debug_assert!(
            older < seq && {
                let p = me.scan.pending.load(Ordering::Relaxed) & !PENDING_DEFERRED;
                p == 0 || p == older
            },
            "pending: lane {index} deferred record {seq} behind {older}, not its pending one"
        );
        me.scan
            .pending
            .store(older | PENDING_DEFERRED, Ordering::Release);
        if horizon > me.durable_h.load(Ordering::Relaxed) {
            me.durable_h.store(horizon, Ordering::Release);
        }
        if mutant::active("redo.defer_forgets") {
            // Broken: the deferred application's lines are forgotten, never flushed.
            lane.pending_ranges.clear();
            THREAD.with_borrow_mut(|t| t.ranges.retain(|&(instance, _)| instance != self.instance));
        }
        for r in &applied {
            push_range(&mut lane.pending_ranges, r.offset, r.len);
        }
        THREAD.with_borrow_mut(|t| {
            for &r in &applied {
                match t.ranges.last_mut() {
                    Some((instance, last)) if *instance == self.instance && *last == r => {}
                    _ => t.ranges.push((self.instance, r)),
                }
            }
        });
        lane.scratch = applied;
        lane.deferred = true;
        apply_words(pool, &lane.words)?;
        Ok(true)
    }

    /// [`Lanes::publish`] after a fence that covered this thread's earlier pending records
    /// and the lane's previous one (applied or adopted by this thread): this record becomes
    /// the lane's pending record, and this thread's; in fenced mode its application is
    /// fenced at once instead. Returns whether the record stays pending.
    #[inline]
    fn hand_over(
        &self,
        pool: &Pool,
        lane: &mut LaneState,
        op: &Commit<'_>,
        sealed: &Sealed,
        applied: Vec<ByteRange>,
        fence: Fenced,
    ) -> Result<bool> {
        let index = lane.index as usize;
        let me = sealed.me;
        let tid = lane.holder;
        let Sealed { seq, horizon, .. } = *sealed;
        let fresh = op.fresh;
        lane.deferred = false;
        self.note_fresh(lane, fresh);
        if horizon > me.durable_h.load(Ordering::Relaxed) {
            me.durable_h.store(horizon, Ordering::Release);
        }
        debug_assert!(
            me.scan.pending.load(Ordering::Relaxed) == 0
                || me.applier.load(Ordering::Relaxed) == tid,
            "pending: lane {index}'s pending record is cleared by a fence that did not cover it"
        );
        me.scan.pending.store(0, Ordering::Release);
        me.fresh_lo.store(fresh.0, Ordering::Release);
        me.fresh_hi.store(fresh.1, Ordering::Release);
        me.applier.store(tid, Ordering::Release);
        lane.scratch = std::mem::replace(&mut lane.pending_ranges, applied);
        let fenced = self.fenced.load(Ordering::Relaxed);
        THREAD.with_borrow_mut(|t| {
            self.clear_own(t, fence);
            if fenced {
                return;
            }
            t.pending.push(Pend {
                instance: self.instance,
                lane: lane.index,
                seq,
            });
            for &r in &lane.pending_ranges {
                t.ranges.push((self.instance, r));
            }
        });
        // Last: the bitmap masks, locked instructions (see `apply_split`). The record is
        // still in flight (`inflight` is set), so no horizon passes it.
        if let Err(e) = apply_words(pool, &lane.words) {
            me.scan.pending.store(seq, Ordering::Release);
            return Err(e);
        }
        if fenced {
            let point = SyncPoint::new(SyncKind::Data, &lane.pending_ranges);
            if let Err(e) = mnemo_pmem::durable_site!("redo.fenced_apply", pool.sync(&point)) {
                me.scan.pending.store(seq, Ordering::Release);
                self.note_own(index, seq);
                return Err(e.into());
            }
        } else {
            me.scan.pending.store(seq, Ordering::Release);
        }
        Ok(!fenced)
    }

    /// Keep this lane's bit of `fresh_mask` a superset: set before a record with fresh bytes
    /// becomes the lane's pending record; cleared (one locked instruction) only after
    /// `FRESH_CLEAR_AFTER` commits without, so that alternating commits do not each pay one.
    /// Called after the fence that covers the lane's previous pending record.
    fn note_fresh(&self, lane: &mut LaneState, fresh: (u64, u64)) {
        let index = lane.index as u64;
        let bit = 1u64 << index.min(63);
        if fresh.0 < fresh.1 {
            lane.since_fresh = 0;
            if !lane.fresh_bit {
                self.fresh_mask.0.fetch_or(bit, Ordering::SeqCst);
                lane.fresh_bit = true;
            }
        } else if lane.fresh_bit {
            lane.since_fresh += 1;
            if lane.since_fresh >= FRESH_CLEAR_AFTER && index < 63 {
                self.fresh_mask.0.fetch_and(!bit, Ordering::SeqCst);
                lane.fresh_bit = false;
            }
        }
    }

    /// Note a pending record this thread's next fence covers.
    fn note_own(&self, lane: usize, seq: u64) {
        THREAD.with_borrow_mut(|t| {
            t.pending.push(Pend {
                instance: self.instance,
                lane: lane as u32,
                seq,
            })
        });
    }

    /// Before a commit that changes `data`: a pending record of another thread whose
    /// in-place (CRC-checked) bytes overlap it is flushed again by this thread, so this
    /// commit's fence makes its application durable before the bytes change; recovery would
    /// otherwise find its check failing and drop it while part of it is lost. A lane held by
    /// a committer is waited for (its fence covers the record).
    fn cover_fresh(
        &self,
        pool: &Pool,
        mine: usize,
        tid: u64,
        data: (u64, u64),
        staged: &mut Vec<ByteRange>,
    ) -> Result<()> {
        if data.0 >= data.1 {
            return Ok(());
        }
        let mask = self.fresh_mask.0.load(Ordering::SeqCst);
        if mask == 0 {
            return Ok(());
        }
        for (i, lane) in self.used_lanes().iter().enumerate() {
            if i == mine || mask & (1u64 << i.min(63)) == 0 {
                continue;
            }
            loop {
                let p = lane.scan.pending.load(Ordering::SeqCst);
                if p == 0 || lane.applier.load(Ordering::Acquire) == tid {
                    break;
                }
                let lo = lane.fresh_lo.load(Ordering::Acquire);
                let hi = lane.fresh_hi.load(Ordering::Acquire);
                if lane.scan.pending.load(Ordering::SeqCst) != p {
                    continue;
                }
                if !(lo < data.1 && data.0 < hi) {
                    break;
                }
                if let Ok(guard) = lane.state.try_lock() {
                    if lane.scan.pending.load(Ordering::SeqCst) == p {
                        for r in &guard.pending_ranges {
                            mnemo_pmem::durable_site!(
                                "redo.cover_fresh_stage",
                                pool.stage(r.offset, r.len)
                            )?;
                        }
                        staged.extend_from_slice(&guard.pending_ranges);
                        self.note_own(i, p);
                    }
                    break;
                }
                std::hint::spin_loop();
                yield_now();
            }
        }
        Ok(())
    }

    /// Every later commit fences its application before returning (for callers that store
    /// outside transactions to bytes transactions write, like the C ABI).
    pub fn set_fenced(&self, fenced: bool) {
        self.fenced.store(fenced, Ordering::Relaxed);
    }

    /// Whether a commit may leave its predecessor's application unflushed (only for heaps
    /// whose recovery is known to handle it: format version 3 and later).
    pub fn set_deferral(&self, defer: bool) {
        self.defer.store(defer, Ordering::Relaxed);
    }

    /// Make a durable claim of at least `target`: every record below it applied, fenced, and
    /// never replayed again. This thread fences its own pending records; pending records of
    /// free lanes are flushed again and fenced by this thread; commits in flight below the
    /// target are waited for (they never wait for other lanes). Then the persistent horizon
    /// word is raised (one more fence). Used when the overwrite rule blocks, by
    /// `atomic_update` over a replayable record, and to settle the heap.
    pub fn help(&self, pool: &Pool, geometry: &Geometry, target: u64) -> Result<()> {
        let target = target.min(self.durable_max() + 1);
        loop {
            let mut helped: Vec<(usize, u64)> = Vec::new();
            // Every range staged here, named by the sync point below.
            let mut staged: Vec<ByteRange> = Vec::new();
            // This thread's own pending records: flush their applied lines (left unflushed
            // by their commits) so the fence below covers them. At thread exit, when the last
            // handle is dropped by a thread-local destructor, this thread's list may be gone
            // already: its records are then still their lanes' pending ones, flushed below.
            let own = THREAD
                .try_with(|t| -> Result<bool> {
                    let t = t.borrow();
                    let mut own = false;
                    for &(instance, r) in &t.ranges {
                        if instance == self.instance {
                            mnemo_pmem::durable_site!(
                                "redo.help_own_stage",
                                pool.stage(r.offset, r.len)
                            )?;
                            staged.push(r);
                        }
                    }
                    for p in &t.pending {
                        own |= p.instance == self.instance;
                    }
                    Ok(own)
                })
                .unwrap_or(Ok(false))?;
            for (i, lane) in self.used_lanes().iter().enumerate() {
                let p = lane.scan.pending.load(Ordering::SeqCst);
                if p == 0 || p & !PENDING_DEFERRED >= target {
                    continue;
                }
                if let Ok(guard) = lane.state.try_lock() {
                    if lane.scan.pending.load(Ordering::SeqCst) == p {
                        for r in &guard.pending_ranges {
                            mnemo_pmem::durable_site!(
                                "redo.help_lane_stage",
                                pool.stage(r.offset, r.len)
                            )?;
                        }
                        staged.extend_from_slice(&guard.pending_ranges);
                        helped.push((i, p));
                    }
                }
            }
            if own || !helped.is_empty() {
                cap_ranges(&mut staged, mnemo_pmem::limits::GMSYNC_RANGES_MAX);
                mnemo_pmem::durable_site!(
                    "redo.help",
                    pool.sync(&SyncPoint::staged(SyncKind::Data, &staged))
                )?;
                let fence = Fenced(());
                let _ = THREAD.try_with(|t| self.clear_own(&mut t.borrow_mut(), fence));
                for (i, p) in helped {
                    let _ = self.lanes[i].scan.pending.compare_exchange(
                        p,
                        0,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
            }
            let h = self.horizon().min(self.durable_max() + 1);
            if h >= target {
                return self.raise_word(pool, geometry, h);
            }
            std::hint::spin_loop();
            yield_now();
        }
    }

    /// Persist the horizon word as `h` (if larger) and raise `MH`.
    fn raise_word(&self, pool: &Pool, geometry: &Geometry, h: u64) -> Result<()> {
        let mut word = self.word.lock().unwrap_or_else(|p| p.into_inner());
        if h > *word {
            let at = geometry.horizon_word_offset();
            atomic_word(pool, at)?.store(h, Ordering::Release);
            mnemo_pmem::durable_site!(
                "redo.horizon_word",
                pool.sync(&SyncPoint::new(
                    SyncKind::Metadata,
                    &[ByteRange::new(at, 8)],
                ))
            )?;
            *word = h;
        }
        self.word_value.fetch_max(*word, Ordering::AcqRel);
        Ok(())
    }

    /// Make every committed record applied, durable and unreplayable (close, the C ABI's
    /// raw stores): [`Lanes::help`] up to the counter.
    pub fn settle(&self, pool: &Pool, geometry: &Geometry) -> Result<()> {
        self.help(pool, geometry, self.counter.0.load(Ordering::SeqCst))
    }

    /// The latest still-replayable record of any lane that changed the word at `offset`, if
    /// any: a non-logged store there must first make its replay impossible
    /// ([`Lanes::retire`] of it retires every older one too). The latest, not the first
    /// found: with several replayable records over the word (a deferral, other threads'
    /// pending records holding the horizon back), retiring an older one would leave a newer
    /// one to be replayed over the store (found by the concurrency tests, `atomic_update`
    /// over a word the thread's transactions also write).
    pub fn conflicts(&self, offset: u64) -> Option<u64> {
        let durable = self.durable_horizon();
        self.used_lanes()
            .iter()
            .flat_map(|lane| self.ring(lane).iter())
            .filter_map(|slot| {
                let seq = slot.seq.load(Ordering::Acquire);
                let lo = slot.lo.load(Ordering::Acquire);
                let hi = slot.hi.load(Ordering::Acquire);
                (seq != 0 && seq >= durable && lo <= offset && offset < hi).then_some(seq)
            })
            .max()
    }

    /// Make sure no record with a sequence number up to `seq` is ever replayed again.
    pub fn retire(&self, pool: &Pool, geometry: &Geometry, seq: u64) -> Result<()> {
        if self.durable_horizon() > seq {
            return Ok(());
        }
        self.help(pool, geometry, seq + 1)
    }
}

#[cfg(all(test, not(mnemo_shuttle)))]
mod tests {
    use super::*;

    /// Publish `seq` in `slot` of `lane` as a record that wrote bytes `lo..hi`.
    fn publish(lanes: &Lanes, lane: usize, slot: usize, seq: u64, lo: u64, hi: u64) {
        let s = &lanes.lanes[lane].slots[slot];
        s.seq.store(seq, Ordering::Release);
        s.lo.store(lo, Ordering::Release);
        s.hi.store(hi, Ordering::Release);
        lanes.used.fetch_max(lane + 1, Ordering::SeqCst);
    }

    #[test]
    fn conflicts_names_the_latest_replayable_record_over_the_word() {
        let lanes = Lanes::new(&[LaneStart::new(4), LaneStart::new(4)], 10, 0);
        assert_eq!(lanes.conflicts(0x1000), None);
        // Three replayable records over the word, the latest neither first in lane order
        // nor first in its lane's ring; a fourth, later one elsewhere.
        publish(&lanes, 0, 0, 5, 0x1000, 0x1040);
        publish(&lanes, 0, 1, 7, 0x1000, 0x1040);
        publish(&lanes, 1, 2, 6, 0x0fc0, 0x1008);
        publish(&lanes, 1, 3, 9, 0x2000, 0x2040);
        assert_eq!(lanes.conflicts(0x1000), Some(7));
        assert_eq!(lanes.conflicts(0x0fc0), Some(6));
        assert_eq!(lanes.conflicts(0x1040), None);
        // Records below the durable horizon are never replayed: no conflict.
        lanes.word_value.store(8, Ordering::Release);
        assert_eq!(lanes.conflicts(0x1000), None);
        assert_eq!(lanes.conflicts(0x2000), Some(9));
    }
}
