//! Crash-image exploration of the log with the simulator of `mnemo-testkit`: every fence of a
//! workload of appends, batches, truncations and resets on a small ring that wraps several
//! times; each crash image is recovered (pool, then log) and must hold every acknowledged
//! entry and the entry (or batch, or truncation) in flight all or nothing. Then the log's
//! mutants must each be caught.

use mnemo_log::{Error, Log, Lsn};
use mnemo_pmem::limits::DATA_OFFSET;
use mnemo_pmem::Pool;
use mnemo_testkit::{explore, pool, soak, Config, Granularity, Report, Run, SimMedia, Workload};

/// Live entries as (LSN, data); `None` before the log exists.
type State = Option<Vec<(u64, Vec<u8>)>>;

type Recovered = Option<(Log<Box<Pool>>, u64)>;

struct LogWorkload {
    /// Bytes of the entries area (small, so the ring wraps).
    area: u64,
    /// Operations after create.
    ops: u32,
}

impl LogWorkload {
    fn range(&self) -> std::ops::Range<u64> {
        DATA_OFFSET..DATA_OFFSET + 128 + self.area
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn entries_of(log: &Log<Box<Pool>>) -> Result<Vec<(u64, Vec<u8>)>, String> {
    log.iter()
        .map(|e| e.map(|e| (e.lsn.get(), e.data)).map_err(err))
        .collect()
}

impl Workload for LogWorkload {
    type State = State;
    type Recovered = Recovered;

    fn name(&self) -> String {
        format!("log(area {}, ops {})", self.area, self.ops)
    }

    fn initial(&self) -> State {
        None
    }

    fn run(&self, run: &mut Run<State>) -> Result<(), String> {
        let pool = pool::create(run.media(), "log", 64 << 10, 1 << 20)?;
        let mut log = Log::create(Box::new(pool), self.range()).map_err(err)?;
        let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
        run.ack(Some(model.clone()));
        for _ in 0..self.ops {
            let choice = run.rng().below(10);
            if choice < 6 {
                // One append, often the 64-byte size of the benchmark.
                let len = if run.rng().chance(0.4) {
                    64
                } else {
                    run.rng().below(90) as usize
                };
                let mut data = vec![0u8; len];
                run.rng().fill(&mut data);
                match log.append(&data) {
                    Ok(lsn) => model.push((lsn.get(), data)),
                    Err(Error::Full { .. }) => {
                        // Make room: drop the older half.
                        let keep = model.len() / 2;
                        let to = model
                            .get(model.len() - keep)
                            .map_or(log.tail(), |e| Lsn::from_raw(e.0));
                        log.truncate_front(to).map_err(err)?;
                        model.drain(..model.len() - keep);
                    }
                    Err(e) => return Err(err(e)),
                }
            } else if choice < 8 {
                let n = run.rng().range(2, 3) as usize;
                let batch: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        let mut d = vec![0u8; run.rng().below(20) as usize];
                        run.rng().fill(&mut d);
                        d
                    })
                    .collect();
                let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                match log.append_many(&refs) {
                    Ok(lsns) => model.extend(lsns.into_iter().map(Lsn::get).zip(batch)),
                    Err(Error::Full { .. }) => {
                        log.reset().map_err(err)?;
                        model.clear();
                    }
                    Err(e) => return Err(err(e)),
                }
            } else if choice < 9 && !model.is_empty() {
                let k = run.rng().below(model.len() as u64 + 1) as usize;
                let to = model.get(k).map_or(log.tail(), |e| Lsn::from_raw(e.0));
                log.truncate_front(to).map_err(err)?;
                model.drain(..k);
            } else {
                log.reset().map_err(err)?;
                model.clear();
            }
            run.ack(Some(model.clone()));
        }
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Recovered, String> {
        let Some(pool) = pool::open(media)? else {
            return Ok(None);
        };
        match Log::open(Box::new(pool), self.range()) {
            Ok(opened) => Ok(Some(opened)),
            Err(Error::NotFormatted { .. }) => Ok(None),
            Err(e) => Err(format!("log open: {e}")),
        }
    }

    fn observe(&self, recovered: &Recovered) -> Result<State, String> {
        let Some((log, count)) = recovered else {
            return Ok(None);
        };
        let entries = entries_of(log)?;
        if entries.len() as u64 != *count || log.len() != *count {
            return Err(format!(
                "open counted {count}, iteration found {}",
                entries.len()
            ));
        }
        if log.used() + log.free() != log.capacity() {
            return Err("used + free != capacity".into());
        }
        Ok(Some(entries))
    }

    fn follow_on(&self, recovered: Recovered, media: &SimMedia) -> Result<(), String> {
        let Some((mut log, _)) = recovered else {
            return Ok(());
        };
        // A short append right at the recovered tail (where a torn append's leftovers would
        // be), then the durable image must hold exactly the recovered entries plus it.
        let mut expect = entries_of(&log)?;
        match log.append(b"z") {
            Ok(lsn) => expect.push((lsn.get(), b"z".to_vec())),
            Err(Error::Full { .. }) => {}
            Err(e) => return Err(format!("follow-on append: {e}")),
        }
        drop(log);
        let reopened = self.recover(media.crash())?;
        let got = self.observe(&reopened)?;
        if got != Some(expect.clone()) {
            return Err(format!(
                "after follow-on append: {got:?}, expected {expect:?}"
            ));
        }
        Ok(())
    }
}

fn config(seed: u64) -> Config {
    let mut config = Config::from_env(seed);
    config.threads = 2;
    config
}

/// Every crash image of the log workload recovers to an acceptable state.
#[test]
fn log_survives_every_crash_image() {
    let seeds = if soak() { 32 } else { 2 };
    let mut total = Report::default();
    let started = std::time::Instant::now();
    for seed in 0..seeds {
        let report = explore(&LogWorkload { area: 512, ops: 40 }, &config(seed));
        report.assert_ok();
        total.merge(&report);
    }
    let mut line = config(99);
    line.granularity = Granularity::Line;
    let report = explore(
        &LogWorkload {
            area: 1024,
            ops: 20,
        },
        &line,
    );
    report.assert_ok();
    total.merge(&report);
    total.elapsed = started.elapsed();
    eprintln!("{}", total.summary("log"));
    assert!(
        total.images_total() >= 10_000,
        "only {} images",
        total.images_total()
    );
    assert!(total.follow_ons > 0);
}

/// Power loss on an ordinary disk: the log on the page-cache medium (a fence is msync of
/// the named pages; any other dirty page written back or not, torn at 512-byte sectors).
#[test]
fn log_survives_power_loss_on_a_page_cache_file() {
    let mut total = Report::default();
    for seed in 0..if soak() { 32 } else { 8 } {
        let config = config(seed).page_cache(Granularity::Sector);
        let report = explore(&LogWorkload { area: 512, ops: 40 }, &config);
        report.assert_ok();
        total.merge(&report);
    }
    let report = explore(
        &LogWorkload {
            area: 1024,
            ops: 20,
        },
        &config(99).page_cache(Granularity::Page),
    );
    report.assert_ok();
    total.merge(&report);
    eprintln!("{}", total.summary("log on a page-cache file"));
    // Page-cache units are sectors, not words: fewer distinct images per crash point.
    assert!(total.images_total() >= 500 && total.follow_ons > 0);
}

/// The log on a page-cache pool that syncs through the write-ahead policy
/// (`mnemo_pmem::WalPolicy`): appends are records in a small write-ahead file, checkpoints
/// when it fills.
#[test]
fn log_survives_power_loss_with_the_write_ahead_policy() {
    let mut total = Report::default();
    for seed in 0..if soak() { 32 } else { 4 } {
        let wal_bytes = [12 << 10, 16 << 10][seed as usize % 2];
        let config = config(seed).write_ahead(Granularity::Sector, wal_bytes);
        let report = explore(&LogWorkload { area: 512, ops: 40 }, &config);
        report.assert_ok();
        total.merge(&report);
    }
    eprintln!("{}", total.summary("log, write-ahead policy"));
    assert!(total.images_total() >= 500 && total.follow_ons > 0);
}

/// The first failure of a check that `mutant` causes in the log workload (four seeds).
fn caught_by(mutant: &'static str) -> Option<String> {
    let workload = LogWorkload { area: 512, ops: 40 };
    (0..4).find_map(|seed| {
        let mut config = config(seed);
        config.mutant = Some(mutant);
        config.stop_at_first_failure = true;
        config.follow_on_every = 1;
        explore(&workload, &config)
            .first_caught()
            .map(ToString::to_string)
    })
}

/// Each of the log's mutants is caught by the harness.
#[test]
fn log_mutants_are_caught() {
    // The log's own, and the pipeline's: an append's staged records hidden from the policy
    // are durable here but missing on a replica (only the shadow replica can see it).
    let names: Vec<&'static str> = mnemo_log::MUTANTS
        .iter()
        .copied()
        .chain(["sync.staged_unnamed"])
        .collect();
    mnemo_testkit::assert_caught("log mutants", &names, &[], caught_by);
}

/// Every flush, fence and sync-point site of the log (`durable_site!` in `src/`), removed in
/// turn, is caught by a crash image or the shadow replica.
#[test]
fn every_durable_site_is_needed() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sites = mnemo_testkit::site_mutants(&src, 6);
    mnemo_testkit::assert_caught("log durability sites", &sites, &[], caught_by);
}
