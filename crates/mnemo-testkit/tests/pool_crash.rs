//! Crash-image exploration of the media layer's workloads: pool creation, open/close cycles
//! and growth while data is written. A normal `cargo test` run checks at least 100,000 crash
//! images; `MNEMO_SOAK=1` runs more seeds with wider sampling (see the crate docs).

use mnemo_testkit::pool::{CreateWorkload, CyclesWorkload, GrowWorkload, TrackingWorkload};
use mnemo_testkit::{explore, soak, Config, Granularity, Report, Workload};

fn seeds(normal: u64) -> u64 {
    if soak() {
        std::env::var("MNEMO_SOAK_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(64)
    } else {
        normal
    }
}

fn run<W: Workload>(workload: &W, seed: u64, granularity: Granularity, total: &mut Report) {
    let mut config = Config::from_env(seed);
    config.granularity = granularity;
    config.threads = 2;
    let report = explore(workload, &config);
    report.assert_ok();
    if std::env::var("MNEMO_TESTKIT_VERBOSE").is_ok() {
        eprintln!("{}", report.summary(&workload.name()));
    }
    total.merge(&report);
}

/// The figures of issue 3: every crash image of the workloads recovers to an
/// acceptable state; at least 100,000 images per normal run.
#[test]
fn pool_header_and_growth_survive_every_crash_image() {
    let mut total = Report::default();
    let started = std::time::Instant::now();
    for seed in 0..seeds(2) {
        run(
            &CreateWorkload::default(),
            seed,
            Granularity::Word,
            &mut total,
        );
    }
    run(
        &CreateWorkload::default(),
        100,
        Granularity::Line,
        &mut total,
    );
    for seed in 0..seeds(3) {
        run(
            &CyclesWorkload { cycles: 3 },
            seed,
            Granularity::Word,
            &mut total,
        );
    }
    for seed in 0..seeds(18) {
        let write_max = [96, 600, 256, 16][seed as usize % 4];
        run(
            &GrowWorkload {
                grows: 4,
                writes: 3,
                write_max,
            },
            seed,
            Granularity::Word,
            &mut total,
        );
    }
    run(&GrowWorkload::default(), 200, Granularity::Line, &mut total);
    for seed in 0..seeds(2) {
        run(
            &TrackingWorkload::default(),
            400 + seed,
            Granularity::Word,
            &mut total,
        );
    }
    let flush_points = Config {
        points_at_flush: true,
        threads: 2,
        ..Config::from_env(300)
    };
    let report = explore(&CyclesWorkload { cycles: 2 }, &flush_points);
    report.assert_ok();
    total.merge(&report);
    total.elapsed = started.elapsed();
    eprintln!("{}", total.summary("pool header + growth"));
    assert!(
        soak() || total.images_checked >= 100_000,
        "only {} crash images checked",
        total.images_checked
    );
    assert!(total.intervals_exhaustive > 0 && total.intervals_sampled > 0);
    assert!(total.depth2_images > 0 && total.follow_ons > 0);
}

/// `Pool::gmsync` is all-or-nothing for ranges it publishes again and again: every crash
/// image holds one published state whole (and an msync'd word survives the journal).
#[test]
fn gmsync_publishes_all_or_nothing() {
    let mut total = Report::default();
    for seed in 0..seeds(2) {
        run(
            &mnemo_testkit::pool::GmsyncWorkload { ops: 12 },
            seed,
            Granularity::Word,
            &mut total,
        );
    }
    eprintln!("{}", total.summary("gmsync"));
    assert!(total.images_checked > 1_000, "{}", total.summary("gmsync"));
}

/// Power loss on an ordinary disk: the same workloads on the page-cache medium (msync of the
/// named pages at every fence; any other dirty page written back or not, torn at sectors;
/// the file's length durable only through a sync). Sectors for most seeds, whole pages for
/// one of each (the order in which pages are written back, with fewer images).
#[test]
fn pool_header_and_growth_survive_power_loss_on_a_page_cache_file() {
    let mut total = Report::default();
    let started = std::time::Instant::now();
    let mut on_disk = |workload: &dyn Fn(&Config) -> Report, seed: u64, g: Granularity| {
        let mut config = Config::from_env(seed).page_cache(g);
        config.threads = 2;
        let report = workload(&config);
        report.assert_ok();
        total.merge(&report);
    };
    for seed in 0..seeds(6) {
        on_disk(
            &|c| explore(&CreateWorkload::default(), c),
            seed,
            Granularity::Sector,
        );
        on_disk(
            &|c| explore(&CyclesWorkload { cycles: 3 }, c),
            seed,
            Granularity::Sector,
        );
        on_disk(
            &|c| explore(&GrowWorkload::default(), c),
            seed,
            Granularity::Sector,
        );
        on_disk(
            &|c| explore(&mnemo_testkit::pool::GmsyncWorkload { ops: 12 }, c),
            seed,
            Granularity::Sector,
        );
        on_disk(
            &|c| explore(&TrackingWorkload::default(), c),
            400 + seed,
            Granularity::Sector,
        );
    }
    on_disk(
        &|c| explore(&GrowWorkload::default(), c),
        200,
        Granularity::Page,
    );
    on_disk(
        &|c| explore(&CyclesWorkload { cycles: 3 }, c),
        200,
        Granularity::Page,
    );
    total.elapsed = started.elapsed();
    eprintln!("{}", total.summary("pool on a page-cache file"));
    assert!(
        total.images_checked >= 1_000,
        "only {} crash images checked",
        total.images_checked
    );
    assert!(total.depth2_images > 0 && total.follow_ons > 0);
}

/// The write-ahead policy (`mnemo_pmem::WalPolicy`) on the page-cache medium: every sync
/// point a record in a simulated write-ahead file, the pool's pages written back whenever,
/// checkpoints when the file is full (a small file: often), replay at open. Power loss
/// anywhere keeps every acknowledged state.
#[test]
fn pool_workloads_survive_power_loss_with_the_write_ahead_policy() {
    let mut total = Report::default();
    let mut on_disk = |workload: &dyn Fn(&Config) -> Report, seed: u64, wal_bytes: u64| {
        let granularity = if seed % 3 == 2 {
            Granularity::Page
        } else {
            Granularity::Sector
        };
        // Odd seeds copy-on-write (`MNEMO_WAL_PRIVATE=1`), even ones on the shared mapping.
        let mut config = if seed % 2 == 1 {
            Config::from_env(seed).write_ahead_private(granularity, wal_bytes)
        } else {
            Config::from_env(seed).write_ahead(granularity, wal_bytes)
        };
        config.threads = 2;
        let report = workload(&config);
        report.assert_ok();
        total.merge(&report);
    };
    for seed in 0..seeds(3) {
        let wal_bytes = [12 << 10, 16 << 10, 64 << 10][seed as usize % 3];
        on_disk(&|c| explore(&CreateWorkload::default(), c), seed, wal_bytes);
        on_disk(
            &|c| explore(&CyclesWorkload { cycles: 3 }, c),
            seed,
            wal_bytes,
        );
        on_disk(&|c| explore(&GrowWorkload::default(), c), seed, wal_bytes);
        on_disk(
            &|c| explore(&mnemo_testkit::pool::GmsyncWorkload { ops: 12 }, c),
            seed,
            wal_bytes,
        );
        on_disk(
            &|c| explore(&TrackingWorkload::default(), c),
            400 + seed,
            wal_bytes,
        );
    }
    eprintln!("{}", total.summary("pool, write-ahead policy"));
    assert!(total.images_checked >= 1_000 && total.follow_ons > 0);
}

/// Deferred acknowledgements (what `mnemo serve` does on a disk): sync points return once
/// appended, the records are made durable in groups, operations are acknowledged when the
/// durable mark covers them. Power loss anywhere leaves a prefix of the operations that holds
/// every acknowledged one (small files: checkpoints run between groups too).
#[test]
fn deferred_acknowledgements_survive_power_loss() {
    let mut total = Report::default();
    for seed in 0..seeds(24) {
        let granularity = if seed % 3 == 2 {
            Granularity::Page
        } else {
            Granularity::Sector
        };
        let wal_bytes = [12 << 10, 16 << 10, 64 << 10][seed as usize % 3];
        let config = Config::from_env(900 + seed).write_ahead_private(granularity, wal_bytes);
        let report = explore(&mnemo_testkit::pool::DeferredWorkload { ops: 40 }, &config);
        report.assert_ok();
        total.merge(&report);
    }
    eprintln!("{}", total.summary("pool, deferred acknowledgements"));
    assert!(
        total.images_checked >= 1_000,
        "{}",
        total.summary("deferred")
    );
}
