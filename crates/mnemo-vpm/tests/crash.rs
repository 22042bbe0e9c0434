//! A crash at every step of an eviction loses nothing.
//!
//! Each case runs this test binary again as a child process (the ignored test
//! `child_writes_until_its_crash_point`), which writes a region beyond its budget with a
//! crash point set: at the chosen step of the chosen eviction the fault handler ends the
//! process with `_exit`, nothing unwound or flushed. The parent then opens the files again
//! and checks every page against a model: a page holds what was last written to it in full
//! (the child logs each page it finished), or, if never finished, zeros.
//!
//! The child dies as a process does, so the files hold every store made before the crash
//! point, flushed or not (the page cache and tmpfs keep them): this proves the order of the
//! steps (each prefix of an eviction recovers), not the flushes that make each step durable
//! on real persistent memory; those are argued in `docs/design/vpm.md` ("Crash safety").

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{check, fill, Dirs, PAGE};
use mnemo_pmem::Media;
use mnemo_vpm::limits::CRASH_EXIT_CODE;
use mnemo_vpm::{Space, Step};

const PAGES: usize = 48;
const BUDGET: usize = 8;
const SEED_FIRST: u64 = 1;
const SEED_AGAIN: u64 = 2;

/// The order in which round two rewrites pages: a fixed shuffle that swaps pages in.
fn round_two() -> Vec<usize> {
    (0..PAGES).map(|i| (i * 29 + 7) % PAGES).collect()
}

#[test]
#[ignore = "the child of crash_at_every_step_of_an_eviction_loses_nothing"]
fn child_writes_until_its_crash_point() {
    let (Ok(dir), Ok(at)) = (
        std::env::var("VPM_CRASH_DIR"),
        std::env::var("VPM_CRASH_AT"),
    ) else {
        panic!("run by crash_at_every_step_of_an_eviction_loses_nothing only");
    };
    let dir = PathBuf::from(dir);
    let mut parts = at.split(',').map(|p| p.parse::<u64>().unwrap());
    let (round, eviction, step) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let step = Step::ALL[step as usize];
    let space = Space::open(&dir.join("pm"), &dir.join("swap")).unwrap();
    let region = space.open_region("crash", 0).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("log"))
        .unwrap();
    match std::env::var("VPM_MUTANT")
        .ok()
        .and_then(|m| mnemo_vpm::fault::MUTANTS.iter().find(|&&k| k == m))
    {
        Some(&name) => {
            mnemo_pmem::mutant::with(name, || write(&region, &mut log, round, eviction, step))
        }
        None => write(&region, &mut log, round, eviction, step),
    }
    // Reaching here means the crash point was never reached.
    std::process::exit(0);
}

fn write(
    region: &mnemo_vpm::Region,
    log: &mut std::fs::File,
    round: u64,
    eviction: u64,
    step: Step,
) {
    let base = region.base().as_ptr();
    if round == 1 {
        region.crash_at(eviction, step);
    }
    for page in 0..PAGES {
        // SAFETY: PAGES pages; this thread alone.
        unsafe { fill(base, SEED_FIRST, page) };
        log.write_all(format!("1 {page}\n").as_bytes()).unwrap();
    }
    if round == 2 {
        let done = region.stats().swap_outs;
        region.crash_at(done + eviction, step);
    }
    for page in round_two() {
        // SAFETY: as above.
        unsafe { fill(base, SEED_AGAIN, page) };
        log.write_all(format!("2 {page}\n").as_bytes()).unwrap();
    }
}

fn run_child(
    dir: &Path,
    (round, eviction, step): (u64, u64, usize),
    mutant: Option<&str>,
) -> std::process::ExitStatus {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if let Some(m) = mutant {
        command.env("VPM_MUTANT", m);
    }
    command
        .args([
            "--ignored",
            "--exact",
            "child_writes_until_its_crash_point",
            "--test-threads=1",
            "--quiet",
        ])
        .env("VPM_CRASH_DIR", dir)
        .env("VPM_CRASH_AT", format!("{round},{eviction},{step}"))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
}

/// Crash at every step of evictions 0 and 5, in round one (first touches) and round two
/// (rewrites that swap pages in), and check each recovered region against the log. The
/// first failure, if any.
fn sweep(mutant: Option<&str>) -> Option<String> {
    for round in [1, 2] {
        for eviction in [0, 5] {
            for step_index in 0..Step::ALL.len() {
                if let Err(e) = one_case(mutant, (round, eviction, step_index)) {
                    return Some(e);
                }
            }
        }
    }
    None
}

fn one_case(
    mutant: Option<&str>,
    (round, eviction, step_index): (u64, u64, usize),
) -> Result<(), String> {
    let step = Step::ALL[step_index];
    let case = format!("round {round}, crash at {step:?} of eviction {eviction}");
    let dirs = Dirs::new();
    let dir = dirs.pm().parent().unwrap().to_path_buf();
    let space = Space::create(&dir.join("pm"), &dir.join("swap"), 2 << 20).unwrap();
    space
        .allocate("crash", (PAGES * PAGE) as u64, (BUDGET * PAGE) as u64)
        .unwrap();
    drop(space);
    std::fs::write(dir.join("log"), b"").unwrap();
    let status = run_child(&dir, (round, eviction, step_index), mutant);
    // A workload that fails on its own proves nothing: the child must reach its crash point.
    assert_eq!(
        status.code(),
        Some(CRASH_EXIT_CODE),
        "{case}: the child did not stop at its crash point"
    );
    // The model: the seed each page last received in full.
    let mut model = [0u64; PAGES];
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    for line in log.lines() {
        let (seed, page) = line.split_once(' ').unwrap();
        model[page.parse::<usize>().unwrap()] = seed.parse().unwrap();
    }
    let space =
        Space::open(&dir.join("pm"), &dir.join("swap")).map_err(|e| format!("{case}: {e}"))?;
    let region = space
        .open_region("crash", 0)
        .map_err(|e| format!("{case}: {e}"))?;
    let stats = region.stats();
    if stats.resident_pages > BUDGET as u64 {
        return Err(format!("{case}: more pages resident than slots: {stats:?}"));
    }
    for (page, &seed) in model.iter().enumerate() {
        // SAFETY: PAGES pages; this thread alone.
        let got = unsafe { check(region.base().as_ptr(), seed, page) };
        if got != Ok(seed != 0) {
            return Err(format!(
                "{case}: page {page} (last written with seed {seed}): {got:?}"
            ));
        }
    }
    // And it goes on working: every page rewritten and read back.
    for page in 0..PAGES {
        // SAFETY: as above.
        unsafe { fill(region.base().as_ptr(), 9, page) };
    }
    for page in 0..PAGES {
        // SAFETY: as above.
        if unsafe { check(region.base().as_ptr(), 9, page) } != Ok(true) {
            return Err(format!(
                "{case}: page {page} does not read back after recovery"
            ));
        }
    }
    Ok(())
}

#[test]
fn crash_at_every_step_of_an_eviction_loses_nothing() {
    if let Some(failure) = sweep(None) {
        panic!("{failure}");
    }
}

/// The check can fail: each broken order of the fault path is caught.
#[test]
fn every_fault_path_mutant_is_caught() {
    for &name in mnemo_vpm::fault::MUTANTS {
        let failure = sweep(Some(name));
        assert!(failure.is_some(), "mutant {name} was not caught");
        eprintln!("{name} caught: {}", failure.unwrap());
    }
}
