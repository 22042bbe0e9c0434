//! The harness can fail: every deliberately broken variant must be caught. If one is not,
//! the harness (or its workloads' invariants) is wrong.
//!
//! Mutants: the named switches of mnemo-pmem (`mnemo_pmem::mutant::KNOWN`) and the
//! simulator's own (`MUTANTS_SIM`): a dropped flush and a dropped fence, tried at every
//! flush / fence position of the workloads.

use mnemo_testkit::pool::{
    CreateWorkload, CyclesWorkload, GmsyncWorkload, GrowWorkload, TrackingWorkload,
};
use mnemo_testkit::{
    explore, measure, replay, Config, Granularity, Medium, Report, Workload, MUTANTS_SIM,
};

fn config(seed: u64) -> Config {
    let mut config = Config::new(seed);
    config.stop_at_first_failure = true;
    config
}

/// Explore `workload` with `tweak` applied; the first failure of a check found, if any. A
/// mutant counts as caught only when an image (a crash image or the shadow replica) fails
/// its check: a workload that errors or panics on its own proves nothing.
fn first_failure<W: Workload>(workload: &W, tweak: impl Fn(&mut Config)) -> Option<String> {
    let mut config = config(7);
    tweak(&mut config);
    let report: Report = explore(workload, &config);
    report.first_caught().map(ToString::to_string)
}

/// Whether the named mnemo-pmem mutant is caught by one of the media-layer workloads.
fn named_caught(name: &'static str) -> Option<String> {
    let with = |c: &mut Config| c.mutant = Some(name);
    first_failure(&CreateWorkload::default(), with)
        .or_else(|| first_failure(&CyclesWorkload { cycles: 2 }, with))
        .or_else(|| first_failure(&GrowWorkload::default(), with))
        .or_else(|| first_failure(&GmsyncWorkload { ops: 9 }, with))
        .or_else(|| first_failure(&TrackingWorkload::default(), with))
        .or_else(|| {
            // On a page-cache file: the length of a grown file is durable only through a sync.
            first_failure(&GrowWorkload::default(), |c| {
                with(c);
                c.medium = Medium::PageCache;
                c.granularity = Granularity::Sector;
            })
        })
        .or_else(|| write_ahead_caught(name))
}

/// Whether the pool workloads with the write-ahead policy (small files: checkpoints often)
/// catch the mutant.
fn write_ahead_caught(name: &'static str) -> Option<String> {
    let on_disk = |c: &mut Config| {
        c.mutant = Some(name);
        c.medium = Medium::PageCache;
        c.granularity = Granularity::Sector;
        // Halves of 1 KiB: the workloads switch epochs, records of 256 bytes at most.
        c.wal_bytes = 10 << 10;
    };
    // A file of 10 KiB takes records of at most 512 bytes: the larger writes are made
    // durable in place, with a checkpoint.
    let large_writes = |c: &mut Config| {
        on_disk(c);
        c.wal_bytes = 10 << 10;
    };
    let grow_large = GrowWorkload {
        grows: 4,
        writes: 3,
        write_max: 900,
    };
    first_failure(&GrowWorkload::default(), on_disk)
        .or_else(|| first_failure(&CyclesWorkload { cycles: 2 }, on_disk))
        .or_else(|| first_failure(&GmsyncWorkload { ops: 9 }, on_disk))
        .or_else(|| first_failure(&grow_large, large_writes))
        .or_else(|| write_ahead_private_caught(name))
}

/// The same workloads with the pool mapped copy-on-write ([`Medium::PagePrivate`], the
/// default under the write-ahead policy): checkpoints write records into the pool file.
fn write_ahead_private_caught(name: &'static str) -> Option<String> {
    let private = |c: &mut Config| {
        c.mutant = Some(name);
        c.medium = Medium::PagePrivate;
        c.granularity = Granularity::Sector;
        c.wal_bytes = 10 << 10;
    };
    let grow_large = GrowWorkload {
        grows: 4,
        writes: 3,
        write_max: 900,
    };
    first_failure(&GrowWorkload::default(), private)
        .or_else(|| first_failure(&mnemo_testkit::pool::DeferredWorkload { ops: 16 }, private))
        .or_else(|| first_failure(&CyclesWorkload { cycles: 2 }, private))
        .or_else(|| first_failure(&GmsyncWorkload { ops: 9 }, private))
        .or_else(|| first_failure(&grow_large, private))
}

/// Every write-ahead mutant is caught with the pool mapped copy-on-write too, not only on
/// the shared mapping.
#[test]
fn write_ahead_mutants_are_caught_on_a_private_mapping() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../mnemo-pmem/src");
    // The write-ahead mutants of the registry, and every site of wal.rs.
    let mut names: Vec<&'static str> = NAMED
        .iter()
        .copied()
        .filter(|n| n.starts_with("wal."))
        .collect();
    names.extend(
        mnemo_testkit::site_mutants(&src, 14)
            .into_iter()
            // `wal.checkpoint_pool` is the shared mapping's checkpoint (an msync of the
            // pool), which a private mapping never runs (it has `wal.checkpoint_pool_file`).
            .filter(|s| s.starts_with("site:wal.") && *s != "site:wal.checkpoint_pool"),
    );
    let mut missed = Vec::new();
    for name in names {
        match write_ahead_private_caught(name) {
            Some(why) => eprintln!(
                "{name}: caught ({})",
                why.lines().next().unwrap_or_default()
            ),
            None => missed.push(name),
        }
    }
    assert!(
        missed.is_empty(),
        "not caught on a private mapping: {missed:?}"
    );
}

fn clean_run_counts() -> (u64, u64) {
    let report = measure(&GrowWorkload::default(), &Config::new(7));
    report.assert_ok();
    (report.flushes, report.fences)
}

/// Positions `0..count` at which dropping the call is caught, and those where it is not.
/// The sweep uses a lighter sampling (no random cuts, no depth 2, no follow-on): the images
/// that expose a lost flush or fence are the "none" and "single unit" ones.
fn positions_caught(count: u64, tweak: impl Fn(&mut Config, u64)) -> (u64, Vec<u64>) {
    let mut missed = Vec::new();
    for n in 0..count {
        let light = |c: &mut Config| {
            c.sampling.random = 0;
            c.depth2_every = 0;
            c.follow_on_every = 0;
            tweak(c, n);
        };
        if first_failure(&GrowWorkload::default(), light).is_none() {
            missed.push(n);
        }
    }
    (count - missed.len() as u64, missed)
}

/// Positions where dropping the call changes nothing a crash can observe (equivalent
/// mutants), in the growth workload: flush 0 persists header generation 1 into copy 1, which
/// generation 2 (copy 0) supersedes before anything is acknowledged and generation 3
/// overwrites; fences 0 and 1 are the two fences of creation (fence 2 persists both copies
/// before the first acknowledged write; until then either copy keeps the same pool). (`close`
/// used to fence once with nothing flushed before its header update: that bare fence was
/// redundant, and went when every fence became a sync point.) Fences 5, 10, 15 and 20 make
/// the length of the grown file durable before the header records it (`pool.grow_length`):
/// growth of the persistent-memory medium is durable at once, so they are equivalent there;
/// the page-cache medium catches their removal (the site sweep below).
const EQUIVALENT_FLUSHES: &[u64] = &[0];
const EQUIVALENT_FENCES: &[u64] = &[0, 1, 5, 10, 15, 20];

/// mnemo-pmem mutants outside the media seam this harness drives (dirty-page tracking of
/// file pools), with the tests that catch them.
const TESTED_ELSEWHERE: &[(&str, &str)] = &[
    ("spf.collect_before_scan", "crates/mnemo-pmem/tests/spf.rs"),
    (
        "sync.staged_unnamed",
        "crates/mnemo-log/tests/crash.rs, crates/mnemo-heap/tests/crash.rs (the pool workloads stage nothing)",
    ),
    (
        "wal.durable_before_sync",
        "crates/mnemo-kv/tests/group_commit.rs under shuttle, scripts/test-shuttle.sh (only another thread reads the marks in the window)",
    ),
];

/// mnemo-pmem mutants the pool workloads must catch.
const NAMED: &[&str] = &[
    "header.skip_checksum",
    "grow.header_first",
    "header.skip_flush",
    "header.outside_policy",
    "journal.skip_record",
    "journal.skip_release",
    "wal.ack_before_sync",
    "wal.checkpoint_skip_pool",
    "wal.skip_replay",
    "wal.replay_one_epoch",
    "wal.deferred_durable_early",
];

fn assert_named(name: &'static str) {
    let failure = named_caught(name);
    assert!(
        failure.is_some(),
        "mutant {name} was not caught: the harness is wrong"
    );
    eprintln!(
        "mutant {name} caught: {}",
        failure
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or_default()
    );
}

#[test]
fn mutant_header_skip_checksum_is_caught() {
    assert_named("header.skip_checksum");
}

#[test]
fn mutant_grow_header_first_is_caught() {
    assert_named("grow.header_first");
}

#[test]
fn mutant_header_skip_flush_is_caught() {
    assert_named("header.skip_flush");
}

/// A header made durable outside the sync policy is locally perfect: only the shadow replica
/// (fed by the policy alone) can see that a replica would miss it.
#[test]
fn mutant_header_outside_policy_is_caught_by_the_shadow_only() {
    assert_named("header.outside_policy");
    let failure = named_caught("header.outside_policy").unwrap_or_default();
    assert!(failure.contains("shadow replica"), "{failure}");
    let without_shadow = |c: &mut Config| {
        c.mutant = Some("header.outside_policy");
        c.shadow = false;
    };
    assert_eq!(
        first_failure(&CyclesWorkload { cycles: 2 }, without_shadow),
        None,
        "crash images alone cannot see a change a replica misses"
    );
}

#[test]
fn mutant_dropped_flush_is_caught() {
    // Flush 2 is the first data write's msync (0 and 1 persist the two header copies).
    let failure = first_failure(&GrowWorkload::default(), |c| c.drop_flush = Some(2));
    assert!(failure.is_some(), "a dropped flush was not caught");
}

#[test]
fn mutant_dropped_fence_is_caught() {
    let failure = first_failure(&GrowWorkload::default(), |c| c.drop_fence = Some(2));
    assert!(failure.is_some(), "a dropped fence was not caught");
}

/// Every mutant, and each simulator mutant at every flush / fence position of the growth
/// workload: caught / total must be 100%.
#[test]
fn every_mutant_is_caught() {
    let started = std::time::Instant::now();
    for &name in mnemo_pmem::mutant::KNOWN {
        let elsewhere = TESTED_ELSEWHERE.iter().find(|(n, _)| *n == name);
        assert!(
            NAMED.contains(&name) || elsewhere.is_some(),
            "mnemo-pmem mutant {name} is new: add a workload that catches it (or name the test that does)"
        );
        if let Some((_, test)) = elsewhere {
            eprintln!("mutant {name}: outside the simulated media seam, caught by {test}");
        }
    }
    let mut caught = 0;
    let mut total = 0;
    for &name in NAMED {
        total += 1;
        let hit = named_caught(name).is_some();
        caught += u32::from(hit);
        eprintln!(
            "mutant {name}: {}",
            if hit { "caught" } else { "NOT CAUGHT" }
        );
    }
    let (flushes, fences) = clean_run_counts();
    let (flush_hits, flush_missed) = positions_caught(flushes, |c, n| c.drop_flush = Some(n));
    let (fence_hits, fence_missed) = positions_caught(fences, |c, n| c.drop_fence = Some(n));
    let sim = [
        (
            MUTANTS_SIM[0],
            flush_hits,
            flushes,
            &flush_missed,
            EQUIVALENT_FLUSHES,
        ),
        (
            MUTANTS_SIM[1],
            fence_hits,
            fences,
            &fence_missed,
            EQUIVALENT_FENCES,
        ),
    ];
    for (name, hits, count, missed, equivalent) in sim {
        total += 1;
        let hit = missed.as_slice() == equivalent;
        caught += u32::from(hit);
        eprintln!(
            "mutant {name}: caught at {hits} of {count} positions; not at {missed:?} (equivalent: {equivalent:?}): {}",
            if hit { "caught" } else { "NOT CAUGHT" }
        );
    }
    eprintln!(
        "testkit mutants: {caught} of {total} caught ({:.0}%), {} simulator positions tried, {:.1}s",
        f64::from(caught) * 100.0 / f64::from(total),
        flushes + fences,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(caught, total, "every mutant must be caught");
}

/// A failure replays exactly from what it prints: seed, crash point and cut.
#[test]
fn a_failure_replays_from_its_seed_point_and_cut() {
    let mut config = config(7);
    config.mutant = Some("grow.header_first");
    let workload = GrowWorkload::default();
    let report = explore(&workload, &config);
    let failure = report.failures.first().expect("the mutant is caught");
    let (point, cut) = (
        failure.point.expect("a crash point"),
        failure.cut.clone().expect("a cut"),
    );
    let replayed = replay(&workload, &config, point, &cut);
    assert!(replayed.is_err(), "replaying {failure} passed");
    config.mutant = None;
    assert_eq!(
        replay(&workload, &config, point, &cut),
        Ok(()),
        "without the mutant the image is fine"
    );
}

/// Every flush, fence and sync-point site of mnemo-pmem (`durable_site!` in its `src/`),
/// removed in turn, is caught by the media-layer workloads.
#[test]
fn every_durable_site_is_needed() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../mnemo-pmem/src");
    let sites = mnemo_testkit::site_mutants(&src, 14);
    mnemo_testkit::assert_caught("pmem durability sites", &sites, &[], named_caught);
}
