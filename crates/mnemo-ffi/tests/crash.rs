//! Crash images of the sync points under mnemo-testkit's simulator.
//!
//! The gmsync tests tell the story of a design choice. `mnemo_gmsync` syncs stores the
//! program made *before* the call, and the CPU may write any of their cache lines back on
//! its own before the call. So:
//! * flushing the ranges and one fence (`gmsync_one_fence`) leaves, after a crash before the
//!   fence, any per-word mix of old and new: `one_fence_gmsync_is_not_all_or_nothing`;
//! * a redo record of the call's ranges (commit, apply, flush) cannot undo early write-backs
//!   either; it only seems to, while the previous gmsync's record is still the newest redo
//!   record and recovery replays it. Any unrelated transaction in between ends that:
//!   `redo_record_gmsync_is_not_all_or_nothing`;
//! * the shipped design keeps the previous gmsync's copy of its ranges (the snapshot record)
//!   until the next gmsync commits, independent of other commits, and recovery applies the
//!   newest complete one: `snapshot_gmsync_is_all_or_nothing`, every image, strict check.
//!
//! `sync_points_after_transactions_and_snapshots_survive`: bytes written by a transaction or
//! covered by a snapshot, then changed by raw stores and synced with msync, must survive
//! recovery (which replays redo records and the snapshot): both are released first.
//!
//! `every_mutant_is_caught`: each of `mnemo::MUTANTS` switched on must fail a test above.

use mnemo::handle::PoolEntry;
use mnemo_heap::{testing, PPtr};
use mnemo_pmem::ByteRange;
use mnemo_testkit::explore::{soak, Sampling};
use mnemo_testkit::{explore, pool, Config, Run, SimMedia, Workload};

/// Four words in four cache lines of region "r".
const WORDS: [u64; 4] = [0, 64, 200, 1000];
const REGION: u64 = 1024;

type State = Option<Vec<u64>>;

/// Narrower than the defaults (these workloads have many pending words per fence and run in
/// every `cargo test`); `MNEMO_SOAK=1` widens them as everywhere.
fn config(seed: u64) -> Config {
    let mut config = Config::from_env(seed);
    if !soak() {
        config.sampling = Sampling {
            exhaustive_max: 8,
            pairs_all_max: 24,
            pairs_sampled: 64,
            random: 64,
        };
        config.depth2_every = 16;
        config.follow_on_every = 8;
    }
    config
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn fail(f: mnemo::error::Failure) -> String {
    f.message
}

fn create(run: &mut Run<State>) -> Result<(PoolEntry, u64), String> {
    let p = pool::create(run.media(), "ffi", testing::pool_size(2), 3 << 20)?;
    let heap = testing::create(p)?;
    let region = heap.nvalloc("r", REGION).map_err(err)?;
    Ok((PoolEntry::new(1, heap), region))
}

/// Pool open, heap recovery, then this layer's: the snapshot record applied again.
fn recover_entry(media: SimMedia) -> Result<Option<PoolEntry>, String> {
    let Some(heap) = testing::recover(pool::open(media)?)? else {
        return Ok(None);
    };
    PoolEntry::open(1, heap).map(Some).map_err(fail)
}

fn observe_words(entry: &Option<PoolEntry>) -> Result<State, String> {
    let Some(entry) = entry else { return Ok(None) };
    let Some((region, _)) = entry.heap.region("r").map_err(err)? else {
        return Ok(None);
    };
    let mut words = Vec::new();
    for w in WORDS {
        words.push(
            entry
                .heap
                .get(PPtr::<u64>::from_offset(region + w))
                .map_err(err)?,
        );
    }
    Ok(Some(words))
}

/// After recovery the pool must work, and what recovery put back must stay: a raw store and
/// msync of one word (which releases the snapshot record recovery applied again), a gmsync
/// and a transaction on the region; then a crash (`media`'s durable image only), and the
/// words recovered again must be the first recovery's, as the follow-on changed them. The
/// msync releases a record of several ranges, so the ones it does not name must already be
/// durable as recovery restored them (caught: `ffi.snapshot_recover`).
fn follow_on_entry(entry: Option<PoolEntry>, media: &SimMedia) -> Result<(), String> {
    let before = observe_words(&entry)?;
    let (Some(entry), Some(mut expected)) = (entry, before) else {
        return Ok(());
    };
    let Some((region, _)) = entry.heap.region("r").map_err(err)? else {
        return Ok(());
    };
    let pool = entry.heap.pool();
    pool.write(region, &40u64.to_le_bytes()).map_err(err)?;
    mnemo::sync::msync(&entry, ByteRange::new(region, 8)).map_err(fail)?;
    let word = PPtr::<u64>::from_offset(region + WORDS[1]);
    pool.write(region, &41u64.to_le_bytes()).map_err(err)?;
    mnemo::sync::gmsync(&entry, &[ByteRange::new(region, 8)]).map_err(fail)?;
    entry.heap.tx(|tx| tx.write(word, &42)).map_err(err)?;
    match entry.heap.get(word).map_err(err)? {
        42 => {}
        other => return Err(format!("follow-on transaction wrote 42, read {other}")),
    }
    expected[0] = 41;
    expected[1] = 42;
    // A crash now, the pool still open: only what the calls made durable.
    let again = observe_words(&recover_entry(media.crash())?)?;
    if again != Some(expected.clone()) {
        return Err(format!(
            "after the follow-on and a crash, recovery found {again:?}, not {expected:?}"
        ));
    }
    Ok(())
}

/// Each word as acknowledged or as in flight (what plain stores promise).
fn per_word(observed: &State, acked: &State, in_flight: Option<&State>) -> Result<(), String> {
    if observed == acked || in_flight == Some(observed) {
        return Ok(());
    }
    if let (Some(o), Some(a), Some(Some(f))) = (observed, acked, in_flight) {
        if o.iter().zip(a).zip(f).all(|((o, a), f)| o == a || o == f) {
            return Ok(());
        }
    }
    Err(format!(
        "observed {observed:?}; each word must be as acknowledged {acked:?} or as in flight {in_flight:?}"
    ))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The shipped `mnemo::sync::gmsync`: snapshot record plus one sync point.
    Snapshot,
    /// `mnemo::sync::gmsync_one_fence`: flush every range, one fence.
    OneFence,
    /// A redo record with a copy of every range, committed as a heap transaction.
    RedoRecord,
}

/// Raw stores of `i` to the four words, [unrelated commits,] gmsync; three times.
struct Gmsync {
    variant: Variant,
    /// Check all-or-nothing (true) or only per word (false).
    strict: bool,
}

impl Gmsync {
    fn sync(&self, entry: &PoolEntry, ranges: &[ByteRange]) -> Result<(), String> {
        match self.variant {
            Variant::Snapshot => mnemo::sync::gmsync(entry, ranges).map_err(fail),
            Variant::OneFence => mnemo::sync::gmsync_one_fence(entry, ranges).map_err(fail),
            Variant::RedoRecord => entry
                .heap
                .tx(|tx| {
                    for r in ranges {
                        let mut bytes = vec![0u8; r.len as usize];
                        entry.heap.pool().read(r.offset, &mut bytes)?;
                        tx.write_bytes(r.offset, &bytes)?;
                    }
                    Ok(())
                })
                .map_err(err),
        }
    }
}

impl Workload for Gmsync {
    type State = State;
    type Recovered = Option<PoolEntry>;

    fn name(&self) -> String {
        format!("ffi gmsync {:?}", self.variant)
    }

    fn initial(&self) -> State {
        None
    }

    fn run(&self, run: &mut Run<State>) -> Result<(), String> {
        let (entry, region) = create(run)?;
        let ranges: Vec<ByteRange> = WORDS
            .iter()
            .map(|&w| ByteRange::new(region + w, 8))
            .collect();
        // The first gmsync of the ranges (of their zeros) starts their protection.
        self.sync(&entry, &ranges)?;
        run.ack(Some(vec![0; WORDS.len()]));
        let pool = entry.heap.pool();
        for i in 1..=3u64 {
            for r in &ranges {
                pool.write(r.offset, &i.to_le_bytes()).map_err(err)?; // raw stores
            }
            // Something else the program does meanwhile: allocations and frees, 8 heap
            // commits a round (each free is one; a small pmalloc writes no record). Over the
            // rounds the lane completes a turn of its ring of 16 slots and scans for a
            // horizon that passes the earlier rounds' records: until then recovery would
            // replay them and put every word back, hiding a tear.
            for _ in 0..8 {
                let scratch = entry.heap.pmalloc(64).map_err(err)?;
                entry.heap.pfree(scratch).map_err(err)?;
            }
            self.sync(&entry, &ranges)?;
            run.ack(Some(vec![i; WORDS.len()]));
        }
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Self::Recovered, String> {
        recover_entry(media)
    }

    fn observe(&self, entry: &Self::Recovered) -> Result<State, String> {
        observe_words(entry)
    }

    fn accept(
        &self,
        observed: &State,
        acked: &State,
        in_flight: Option<&State>,
    ) -> Result<(), String> {
        if self.strict {
            if observed == acked || in_flight == Some(observed) {
                return Ok(());
            }
            return Err(format!(
                "observed {observed:?}; all-or-nothing allows {acked:?} or {in_flight:?}"
            ));
        }
        per_word(observed, acked, in_flight)
    }

    fn follow_on(&self, entry: Self::Recovered, media: &SimMedia) -> Result<(), String> {
        follow_on_entry(entry, media)
    }
}

fn check_fails(workload: &Gmsync) {
    let mut narrow = config(7);
    narrow.stop_at_first_failure = true;
    let report = explore(workload, &narrow);
    eprintln!("{}", report.summary(&workload.name()));
    assert!(
        !report.is_ok(),
        "{:?}: expected a crash image that is not all-or-nothing",
        workload.variant
    );
}

#[test]
fn snapshot_gmsync_is_all_or_nothing() {
    let workload = Gmsync {
        variant: Variant::Snapshot,
        strict: true,
    };
    let report = explore(&workload, &config(7));
    eprintln!("{}", report.summary(&workload.name()));
    report.assert_ok();
}

#[test]
fn one_fence_gmsync_is_not_all_or_nothing() {
    for strict in [false, true] {
        let workload = Gmsync {
            variant: Variant::OneFence,
            strict,
        };
        if strict {
            check_fails(&workload);
        } else {
            explore(&workload, &config(7)).assert_ok();
        }
    }
}

#[test]
fn redo_record_gmsync_is_not_all_or_nothing() {
    for strict in [false, true] {
        let workload = Gmsync {
            variant: Variant::RedoRecord,
            strict,
        };
        if strict {
            check_fails(&workload);
        } else {
            explore(&workload, &config(7)).assert_ok();
        }
    }
}

/// Sync points after a transaction and after a snapshot: every value made durable by
/// msync must survive recovery (never put back by a redo record or the snapshot). Four
/// rounds: the third gmsync rewrites the first one's record slot after an msync released
/// both. With `later_tx`, each round commits a transaction on other bytes (w2) between w0's
/// transaction and the raw store to w0: that later commit does not retire w0's record (a
/// record may carry a horizon below its own seq), so msync must still retire it.
struct SyncAfter {
    later_tx: bool,
}

impl Workload for SyncAfter {
    type State = State;
    type Recovered = Option<PoolEntry>;

    fn name(&self) -> String {
        format!(
            "ffi sync points after transactions and snapshots{}",
            if self.later_tx {
                ", later transactions"
            } else {
                ""
            }
        )
    }

    fn initial(&self) -> State {
        None
    }

    fn run(&self, run: &mut Run<State>) -> Result<(), String> {
        let (entry, region) = create(run)?;
        let mut state = vec![0; WORDS.len()];
        run.ack(Some(state.clone()));
        let pool = entry.heap.pool();
        let w0 = ByteRange::new(region, 8);
        let w1 = ByteRange::new(region + WORDS[1], 8);
        let raw = |range: ByteRange, value: u64| pool.write(range.offset, &value.to_le_bytes());
        for i in 1..=4u64 {
            // A transaction writes w0 (as mnemo_tx_write + mnemo_tx_commit do it; the pool
            // releases a journal record covering w0 at the sync point that makes it durable).
            mnemo::sync::commit_tracked(&entry, &[w0], |tx| {
                tx.write(PPtr::<u64>::from_offset(w0.offset), &i)
            })
            .map_err(fail)?;
            state[0] = i;
            run.ack(Some(state.clone()));
            let w2 = ByteRange::new(region + WORDS[2], 8);
            if self.later_tx {
                mnemo::sync::commit_tracked(&entry, &[w2], |tx| {
                    tx.write(PPtr::<u64>::from_offset(w2.offset), &i)
                })
                .map_err(fail)?;
                state[2] = i;
                run.ack(Some(state.clone()));
            }
            // Raw store to w0 and msync: the redo record must not put i back.
            raw(w0, 100 + i).map_err(err)?;
            mnemo::sync::msync(&entry, w0).map_err(fail)?;
            state[0] = 100 + i;
            run.ack(Some(state.clone()));
            // gmsync of w1, then a raw store and msync: the snapshot must not put it back.
            raw(w1, 200 + i).map_err(err)?;
            mnemo::sync::gmsync(&entry, &[w1]).map_err(fail)?;
            state[1] = 200 + i;
            run.ack(Some(state.clone()));
            raw(w1, 300 + i).map_err(err)?;
            mnemo::sync::msync(&entry, w1).map_err(fail)?;
            state[1] = 300 + i;
            run.ack(Some(state.clone()));
        }
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Self::Recovered, String> {
        recover_entry(media)
    }

    fn observe(&self, entry: &Self::Recovered) -> Result<State, String> {
        observe_words(entry)
    }

    fn follow_on(&self, entry: Self::Recovered, media: &SimMedia) -> Result<(), String> {
        follow_on_entry(entry, media)
    }
}

#[test]
fn sync_points_after_transactions_and_snapshots_survive() {
    for later_tx in [false, true] {
        let workload = SyncAfter { later_tx };
        let report = explore(&workload, &config(11));
        eprintln!("{}", report.summary(&workload.name()));
        report.assert_ok();
    }
}

/// Power loss on an ordinary disk: the C ABI's workloads (raw stores, msync, gmsync over
/// transactional data) on the page-cache medium (a fence is msync of the named pages; any
/// other dirty page written back or not, torn at 512-byte sectors).
#[test]
fn c_abi_workloads_survive_power_loss_on_a_page_cache_file() {
    let gmsync = |variant, strict| Gmsync { variant, strict };
    let runs: [&dyn Fn(&Config) -> mnemo_testkit::Report; 3] = [
        &|c| explore(&gmsync(Variant::Snapshot, true), c),
        &|c| explore(&SyncAfter { later_tx: false }, c),
        &|c| explore(&SyncAfter { later_tx: true }, c),
    ];
    for (k, run) in runs.into_iter().enumerate() {
        let granularity = if k == 2 {
            mnemo_testkit::Granularity::Page
        } else {
            mnemo_testkit::Granularity::Sector
        };
        let report = run(&config(21 + k as u64).page_cache(granularity));
        eprintln!("{}", report.summary("C ABI on a page-cache file"));
        report.assert_ok();
        assert!(report.images_total() >= 50);
    }
}

/// The C ABI's workloads on a page-cache pool that syncs through the write-ahead policy
/// (`mnemo_pmem::WalPolicy`; a small file: checkpoints when it fills).
#[test]
fn c_abi_workloads_survive_power_loss_with_the_write_ahead_policy() {
    let gmsync = |variant, strict| Gmsync { variant, strict };
    let runs: [&dyn Fn(&Config) -> mnemo_testkit::Report; 3] = [
        &|c| explore(&gmsync(Variant::Snapshot, true), c),
        &|c| explore(&SyncAfter { later_tx: false }, c),
        &|c| explore(&SyncAfter { later_tx: true }, c),
    ];
    for (k, run) in runs.into_iter().enumerate() {
        let mut config = config(31 + k as u64).write_ahead(
            mnemo_testkit::Granularity::Sector,
            [16 << 10, 64 << 10][k % 2],
        );
        if !soak() {
            // The file's sectors add units to every point: sample fewer cuts per point.
            config.sampling.random = 16;
            config.sampling.pairs_sampled = 16;
            config.depth2_every = 32;
        }
        let report = run(&config);
        eprintln!("{}", report.summary("C ABI, write-ahead policy"));
        report.assert_ok();
        assert!(report.images_total() >= 50);
    }
}

#[test]
fn every_mutant_is_caught() {
    // The C ABI's own, and the pool journal's (mnemo_gmsync is Pool::gmsync).
    let names: Vec<&'static str> = mnemo::MUTANTS
        .iter()
        .copied()
        .chain(["journal.skip_record", "journal.skip_release"])
        .collect();
    mnemo_testkit::assert_caught("C ABI mutants", &names, &[], caught_by);
}

/// The first failure of a check (a crash image or the shadow replica) that `mutant` causes
/// in the C ABI's workloads, if any.
fn caught_by(mutant: &'static str) -> Option<String> {
    let gmsync = |variant, strict| Gmsync { variant, strict };
    let runs: [&dyn Fn(&Config) -> mnemo_testkit::Report; 4] = [
        &|c| explore(&gmsync(Variant::Snapshot, true), c),
        &|c| explore(&gmsync(Variant::OneFence, false), c),
        &|c| explore(&SyncAfter { later_tx: false }, c),
        &|c| explore(&SyncAfter { later_tx: true }, c),
    ];
    for run in runs {
        let mut config = config(13);
        config.mutant = Some(mutant);
        config.stop_at_first_failure = true;
        if let Some(f) = run(&config).first_caught() {
            return Some(f.to_string());
        }
    }
    None
}

/// Every flush, fence and sync-point site of the C ABI (`durable_site!` in `src/`), and the
/// heap's fenced-commit site (reached only through the C ABI), removed in turn, is caught.
#[test]
fn every_durable_site_is_needed() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sites = mnemo_testkit::site_mutants(&src, 3);
    sites.push("site:redo.fenced_apply");
    mnemo_testkit::assert_caught("C ABI durability sites", &sites, &[], caught_by);
}
