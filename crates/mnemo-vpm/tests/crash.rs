//! A crash at every step of an eviction loses nothing, and the check can fail.
//!
//! Each case runs this test binary again as a child process (the ignored test
//! `child_writes_until_its_crash_point`), which writes a region beyond its budget with a
//! crash point set: at the chosen step of the chosen eviction the fault handler ends the
//! process with `_exit`, nothing unwound. Each page the child writes it also flushes and
//! fences (as a sync point would) before logging it as written.
//!
//! The child's space runs on a *durability twin* ([`twin`]): its window onto the
//! persistent-memory file records which cache lines were flushed, and copies them into a
//! durable image of the file only at a fence; its swap sync copies the swap file into a
//! durable image. After the crash the parent recovers three images and checks every page
//! against the child's log (a page holds what was last written to it in full, or zeros):
//!
//! * **live**: the files as the dead process left them (every store, as after a process
//!   crash on tmpfs or the page cache);
//! * **fenced**: the durable images only (nothing that was not flushed and fenced, and no
//!   swap write that was not synced, as after a power cut that kept nothing more);
//! * **unfenced lost**: the live files with every line flushed but not yet fenced put back
//!   to its durable value (a power cut after the cache wrote back every dirty line on its
//!   own except those: stores that reach media before what they depend on).
//!
//! Each case runs with evictions made on the fault path, and with the region's evictor thread
//! (the default: evictions ahead of need, whose copies and sync run off the fault path, and
//! whose flushes and fences are ordered by that thread's fences only: the twin gives it a
//! lane of its own). Both run with fault-around (a first touch maps several pages).
//!
//! A removed flush or fence of the fault path (`durable_site!`) or a wrong order of its steps
//! (`mnemo_vpm::fault::MUTANTS`) must make one of the images lose a page.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{check, fill, Dirs, PAGE};
use mnemo_pmem::Media;
use mnemo_vpm::limits::CRASH_EXIT_CODE;
use mnemo_vpm::{RegionOptions, Space, Step};

const PAGES: usize = 48;
const BUDGET: usize = 8;
const SEED_FIRST: u64 = 1;
const SEED_AGAIN: u64 = 2;
/// In the model: a page whose write was interrupted by the crash.
const UNDEFINED: u64 = u64::MAX;

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
    twin::install(&dir);
    let hooks = mnemo_vpm::Hooks {
        wrap_window: twin::wrap,
        sync_swap: twin::sync_swap,
        run_evictor,
    };
    let space = Space::open_with(&dir.join("pm"), &dir.join("swap"), hooks).unwrap();
    let options = RegionOptions {
        evict_ahead: std::env::var("VPM_AHEAD").is_ok(),
        ..RegionOptions::default()
    };
    let region = space.open_region_with("crash", 0, options).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("log"))
        .unwrap();
    match std::env::var("VPM_MUTANT") {
        Ok(name) => {
            let name: &'static str = Box::leak(name.into_boxed_str());
            mnemo_pmem::mutant::with(name, || write(&region, &mut log, round, eviction, step))
        }
        Err(_) => write(&region, &mut log, round, eviction, step),
    }
    // Reaching here means the crash point was never reached.
    std::process::exit(0);
}

/// The evictor thread of the child's region: the twin's lane 2, and the child's mutant
/// (switched on per thread) switched on there too.
fn run_evictor(evictor: &dyn Fn()) {
    twin::set_lane(2);
    match std::env::var("VPM_MUTANT") {
        Ok(name) => mnemo_pmem::mutant::with(Box::leak(name.into_boxed_str()), evictor),
        Err(_) => evictor(),
    }
}

fn write(
    region: &mnemo_vpm::Region,
    log: &mut std::fs::File,
    round: u64,
    eviction: u64,
    step: Step,
) {
    let base = region.base().as_ptr();
    let helper = std::env::var("VPM_HELPER").is_ok();
    let mutant = mnemo_pmem::mutant::current();
    // With a helper, each page is faulted in by a thread of its own (spawned, joined) and
    // written and made durable by this one: the fault path's flushes are then ordered only
    // by the helper's fences, not by the writer's.
    let touch = |page: usize| {
        if !helper {
            return;
        }
        let at = base as usize + page * PAGE;
        std::thread::spawn(move || {
            twin::set_lane(1);
            let read = || {
                // SAFETY: inside the region; a read faults the page in.
                unsafe { std::ptr::read_volatile(at as *const u8) };
            };
            match mutant {
                Some(name) => mnemo_pmem::mutant::with(name, read),
                None => read(),
            }
        })
        .join()
        .unwrap();
    };
    if round == 1 {
        region.crash_at(eviction, step);
    }
    for page in 0..PAGES {
        touch(page);
        begin(log, page);
        // SAFETY: PAGES pages; one thread at a time.
        unsafe { fill(base, SEED_FIRST, page) };
        persist(region, page);
        log.write_all(format!("1 {page}\n").as_bytes()).unwrap();
    }
    if round == 2 {
        let done = region.stats().evictions;
        region.crash_at(done + eviction, step);
    }
    for page in round_two() {
        touch(page);
        begin(log, page);
        // SAFETY: as above.
        unsafe { fill(base, SEED_AGAIN, page) };
        persist(region, page);
        log.write_all(format!("2 {page}\n").as_bytes()).unwrap();
    }
}

/// Log that `page` is being written: a crash on the evictor thread may come in the middle of
/// the write, which leaves the page's bytes undefined (neither seed is promised).
fn begin(log: &mut std::fs::File, page: usize) {
    log.write_all(format!("? {page}\n").as_bytes()).unwrap();
}

/// Make page `page` durable, as a sync point over it would.
fn persist(region: &mnemo_vpm::Region, page: usize) {
    region.flush((page * PAGE) as u64, PAGE as u64);
    region.drain().expect("fence");
}

/// This test binary running only the ignored child test `name` on `dir` (with `mutant`).
fn child_command(name: &str, dir: &Path, mutant: Option<&str>) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    if let Some(m) = mutant {
        command.env("VPM_MUTANT", m);
    }
    command
        .args(["--ignored", "--exact", name, "--test-threads=1", "--quiet"])
        .env("VPM_CRASH_DIR", dir)
        .stdout(std::process::Stdio::null());
    command
}

fn run_child(
    dir: &Path,
    (ahead, helper, round, eviction, step): Case,
    mutant: Option<&str>,
) -> std::process::ExitStatus {
    let mut command = child_command("child_writes_until_its_crash_point", dir, mutant);
    if helper {
        command.env("VPM_HELPER", "1");
    }
    if ahead {
        command.env("VPM_AHEAD", "1");
    }
    command
        .env("VPM_CRASH_AT", format!("{round},{eviction},{step}"))
        .status()
        .unwrap()
}

/// One crash: (evictor thread, faults on helper threads, round, eviction, step index).
type Case = (bool, bool, u64, u64, usize);

/// Crash at every step of evictions 0 and 5, in round one (first touches) and round two
/// (rewrites that swap pages in), evictions on the fault path or on the evictor thread,
/// and check each recovered region against the log. The first failure, if any.
fn sweep(mutant: Option<&str>, modes: &[bool]) -> Option<String> {
    for &ahead in modes {
        for helper in [false, true] {
            for round in [1, 2] {
                for eviction in [0, 5] {
                    for step_index in 0..Step::ALL.len() {
                        let at = (ahead, helper, round, eviction, step_index);
                        if let Err(e) = one_case(mutant, at) {
                            return Some(e);
                        }
                    }
                }
            }
        }
    }
    None
}

fn one_case(mutant: Option<&str>, case: Case) -> Result<(), String> {
    let (ahead, helper, round, eviction, step_index) = case;
    let step = Step::ALL[step_index];
    let who = if helper {
        "faults on helper threads"
    } else {
        "one thread"
    };
    let evicts = if ahead {
        "evictor thread"
    } else {
        "evictions on the fault path"
    };
    let case = format!("{evicts}, {who}, round {round}, crash at {step:?} of eviction {eviction}");
    let dirs = Dirs::new();
    let dir = dirs.pm().parent().unwrap().to_path_buf();
    let space = Space::create(&dir.join("pm"), &dir.join("swap"), 2 << 20).unwrap();
    space
        .allocate("crash", (PAGES * PAGE) as u64, (BUDGET * PAGE) as u64)
        .unwrap();
    drop(space);
    std::fs::write(dir.join("log"), b"").unwrap();
    // The durable images start as the files are: created and synced.
    std::fs::copy(dir.join("pm"), dir.join("pm.durable")).unwrap();
    std::fs::copy(dir.join("swap"), dir.join("swap.durable")).unwrap();
    let lines = std::fs::metadata(dir.join("pm")).unwrap().len() as usize / twin::LINE;
    std::fs::write(
        dir.join("pm.pending"),
        vec![0u8; twin::LANES * lines.div_ceil(8)],
    )
    .unwrap();
    let status = run_child(&dir, (ahead, helper, round, eviction, step_index), mutant);
    // A mutant may skip a step (one that records first never reaches "words stored" after
    // the copy): nothing to check in that case.
    if mutant.is_some() && status.code() == Some(0) {
        return Ok(());
    }
    // A workload that fails on its own proves nothing: the child must reach its crash point.
    assert_eq!(
        status.code(),
        Some(CRASH_EXIT_CODE),
        "{case}: the child did not stop at its crash point"
    );
    // The model: the seed each page last received in full, or `UNDEFINED` for a page
    // whose write the crash interrupted.
    let mut model = [0u64; PAGES];
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    for line in log.lines() {
        let (seed, page) = line.split_once(' ').unwrap();
        let page = page.parse::<usize>().unwrap();
        model[page] = match seed {
            // A crash on the fault path comes at the first store of a write, before any
            // byte of it lands: the page holds what it held. One on the evictor thread may
            // come in the middle of the write.
            "?" if !ahead => model[page],
            "?" => UNDEFINED,
            seed => seed.parse().unwrap(),
        };
    }
    for image in [Image::Live, Image::Fenced, Image::UnfencedLost] {
        let at = dir.join(format!("{image:?}"));
        image.build(&dir, &at);
        check_image(&at, &model).map_err(|e| format!("{case}, {image:?} image: {e}"))?;
    }
    Ok(())
}

/// What survives the crash (see the module documentation).
#[derive(Clone, Copy, Debug)]
enum Image {
    Live,
    Fenced,
    UnfencedLost,
}

impl Image {
    /// Write this image's persistent-memory and swap files into `at`.
    fn build(self, dir: &Path, at: &Path) {
        std::fs::create_dir_all(at).unwrap();
        let live_pm = std::fs::read(dir.join("pm")).unwrap();
        let durable_pm = std::fs::read(dir.join("pm.durable")).unwrap();
        let (pm, swap) = match self {
            Image::Live => (live_pm, std::fs::read(dir.join("swap")).unwrap()),
            Image::Fenced => (durable_pm, std::fs::read(dir.join("swap.durable")).unwrap()),
            Image::UnfencedLost => {
                let pending = std::fs::read(dir.join("pm.pending")).unwrap();
                let lane_bytes = pending.len() / twin::LANES;
                let mut pm = live_pm;
                for line in 0..pm.len() / twin::LINE {
                    let bit = 1 << (line % 8);
                    if (0..twin::LANES).any(|l| pending[l * lane_bytes + line / 8] & bit != 0) {
                        let r = line * twin::LINE..(line + 1) * twin::LINE;
                        pm[r.clone()].copy_from_slice(&durable_pm[r]);
                    }
                }
                (pm, std::fs::read(dir.join("swap")).unwrap())
            }
        };
        std::fs::write(at.join("pm"), pm).unwrap();
        std::fs::write(at.join("swap"), swap).unwrap();
    }
}

/// Recover the space in `at` and check every page against `model`, then go on using it.
fn check_image(at: &Path, model: &[u64; PAGES]) -> Result<(), String> {
    let space = Space::open(&at.join("pm"), &at.join("swap")).map_err(|e| e.to_string())?;
    let region = space.open_region("crash", 0).map_err(|e| e.to_string())?;
    let stats = region.stats();
    if stats.resident_pages > BUDGET as u64 {
        return Err(format!("more pages resident than slots: {stats:?}"));
    }
    for (page, &seed) in model.iter().enumerate() {
        if seed == UNDEFINED {
            continue;
        }
        // SAFETY: PAGES pages; this thread alone.
        let got = unsafe { check(region.base().as_ptr(), seed, page) };
        if got != Ok(seed != 0) {
            return Err(format!(
                "page {page} (last written with seed {seed}): {got:?}"
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
            return Err(format!("page {page} does not read back after recovery"));
        }
    }
    Ok(())
}

#[test]
fn crash_at_every_step_of_an_eviction_loses_nothing() {
    if let Some(failure) = sweep(None, &[false, true]) {
        panic!("{failure}");
    }
}

/// Sites of the allocation path the allocation child catches
/// (`a_region_allocated_over_a_freed_one_survives_a_crash`). `vpm.entry_fence` only in the
/// images between fences (one line of a fence written back alone): without it the state
/// word's fence is the first to make the entry's body and the table's zeros durable, and a
/// cache that wrote the state word's line back before that fence leaves a live entry over a
/// torn body or a stale table.
const ALLOCATION: &[&str] = &[
    "vpm.table_zero_flush",
    "vpm.state_flush",
    "vpm.state_fence",
    "vpm.entry_fence",
];

/// Sites of space creation the creation child catches (`a_space_created_then_a_crash_opens`).
const CREATION: &[&str] = &["vpm.config_fence"];

#[test]
#[ignore = "the child of a_region_allocated_over_a_freed_one_survives_a_crash"]
fn child_frees_and_allocates_then_dies() {
    let Ok(dir) = std::env::var("VPM_CRASH_DIR") else {
        panic!("run by a_region_allocated_over_a_freed_one_survives_a_crash only");
    };
    let dir = PathBuf::from(dir);
    twin::install(&dir);
    let hooks = mnemo_vpm::Hooks {
        wrap_window: twin::wrap,
        sync_swap: twin::sync_swap,
        run_evictor,
    };
    let space = Space::open_with(&dir.join("pm"), &dir.join("swap"), hooks).unwrap();
    let work = || {
        space.free("crash", 0).unwrap();
        let capacity = (PAGES * PAGE) as u64;
        assert_eq!(
            space
                .allocate("fresh", capacity, (BUDGET * PAGE) as u64)
                .unwrap(),
            0
        );
    };
    match std::env::var("VPM_MUTANT") {
        Ok(name) => mnemo_pmem::mutant::with(Box::leak(name.into_boxed_str()), work),
        Err(_) => work(),
    }
    // Freed and allocated: a crash now must find both done.
    // SAFETY: _exit ends the process at once, as a crash would.
    unsafe { libc::_exit(CRASH_EXIT_CODE) };
}

/// A region allocated over a freed one (its page table and slots reused, and, the table of
/// contents being full, the entry of another freed region) and a crash right after: the
/// freed region stays freed, the new one exists and every page of it reads as zeros, not as
/// the freed region's pages (whose words were in the reused page table). Then images
/// between the child's fences (see below): every one is a state the child passed through.
fn allocation_case(mutant: Option<&str>) -> Result<(), String> {
    let dirs = Dirs::new();
    let dir = dirs.pm().parent().unwrap().to_path_buf();
    // Room for one large region only, beside the fillers: the new one must reuse the freed
    // one's space. Every entry of the table of contents is taken (the large region and 63
    // one-page fillers), and filler 0 is freed: the new region must reuse its entry.
    let small = mnemo_vpm::format::table_bytes(1) + PAGE as u64;
    let fillers = mnemo_vpm::limits::TOC_ENTRIES - 1;
    let one = mnemo_vpm::limits::DATA_OFFSET
        + mnemo_vpm::format::table_bytes(PAGES as u64)
        + (BUDGET * PAGE) as u64
        + fillers * small;
    let space = Space::create(&dir.join("pm"), &dir.join("swap"), one).unwrap();
    space
        .allocate("crash", (PAGES * PAGE) as u64, (BUDGET * PAGE) as u64)
        .unwrap();
    for _ in 0..fillers {
        space.allocate("filler", PAGE as u64, PAGE as u64).unwrap();
    }
    space.free("filler", 0).unwrap();
    let region = space.open_region("crash", 0).unwrap();
    for page in 0..PAGES {
        // SAFETY: PAGES pages; this thread alone.
        unsafe { fill(region.base().as_ptr(), SEED_FIRST, page) };
    }
    drop(region);
    drop(space);
    std::fs::copy(dir.join("pm"), dir.join("pm.durable")).unwrap();
    std::fs::copy(dir.join("pm"), dir.join("pm.durable.start")).unwrap();
    std::fs::copy(dir.join("swap"), dir.join("swap.durable")).unwrap();
    let lines = std::fs::metadata(dir.join("pm")).unwrap().len() as usize / twin::LINE;
    std::fs::write(
        dir.join("pm.pending"),
        vec![0u8; twin::LANES * lines.div_ceil(8)],
    )
    .unwrap();
    // Log each fence's lines (`twin::FENCE_LOG`).
    std::fs::write(dir.join("pm.fence-log"), []).unwrap();
    let status = child_command("child_frees_and_allocates_then_dies", &dir, mutant)
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(CRASH_EXIT_CODE),
        "the allocation child failed"
    );
    let check_allocated = |at: &Path, image: &str| -> Result<(), String> {
        let space = Space::open(&at.join("pm"), &at.join("swap"))
            .map_err(|e| format!("{image} image: {e}"))?;
        if space.open_region("crash", 0).is_ok() {
            return Err(format!("{image} image: the freed region is back"));
        }
        let region = space
            .open_region("fresh", 0)
            .map_err(|e| format!("{image} image: the new region: {e}"))?;
        for page in 0..PAGES {
            // SAFETY: PAGES pages; this thread alone.
            let got = unsafe { check(region.base().as_ptr(), 0, page) };
            if got != Ok(false) {
                return Err(format!(
                    "{image} image: page {page} of the new region is not zero: {got:?}"
                ));
            }
        }
        Ok(())
    };
    for image in [Image::Live, Image::Fenced, Image::UnfencedLost] {
        let at = dir.join(format!("{image:?}"));
        image.build(&dir, &at);
        check_allocated(&at, &format!("{image:?}"))?;
    }
    // Between its fences the child's durable file is the one after the previous fence, plus
    // any of the lines flushed since that the cache wrote back on its own. For every fence,
    // each image of the file before it with one of its lines written back must open to a
    // state the child passed through: the large region live and the new one absent, or the
    // large one freed and the new one absent, or the new one live with every page zero.
    let log = std::fs::read(dir.join("pm.fence-log")).unwrap();
    let mut durable = std::fs::read(dir.join("pm.durable.start")).unwrap();
    let mut fence: Vec<(usize, &[u8])> = Vec::new();
    let mut fences = 0;
    for record in log.chunks_exact(twin::LOG_RECORD) {
        let line = u64::from_le_bytes(record[..8].try_into().unwrap());
        if line != u64::MAX {
            fence.push((line as usize, &record[8..]));
            continue;
        }
        for &(line, bytes) in &fence {
            let at = dir.join(format!("fence-{fences}-line-{line}"));
            std::fs::create_dir_all(&at).unwrap();
            let mut pm = durable.clone();
            pm[line * twin::LINE..(line + 1) * twin::LINE].copy_from_slice(bytes);
            std::fs::write(at.join("pm"), pm).unwrap();
            std::fs::copy(dir.join("swap.durable"), at.join("swap")).unwrap();
            check_between(&at).map_err(|e| format!("fence {fences}, line {line} alone: {e}"))?;
        }
        for &(line, bytes) in &fence {
            durable[line * twin::LINE..(line + 1) * twin::LINE].copy_from_slice(bytes);
        }
        fence.clear();
        fences += 1;
    }
    assert!(fences >= 3, "the child fenced ({fences} fences)");
    Ok(())
}

/// A state the allocation child passes through (see `allocation_case`).
fn check_between(at: &Path) -> Result<(), String> {
    let space = Space::open(&at.join("pm"), &at.join("swap")).map_err(|e| e.to_string())?;
    let live = |owner: &str| -> Result<bool, String> {
        Ok(space
            .regions()
            .map_err(|e| e.to_string())?
            .iter()
            .any(|r| r.owner == owner && !r.freed))
    };
    if !live("fresh")? {
        return Ok(());
    }
    if live("crash")? {
        return Err("the new region and the freed one both live".into());
    }
    let region = space
        .open_region("fresh", 0)
        .map_err(|e| format!("the new region: {e}"))?;
    for page in 0..PAGES {
        // SAFETY: PAGES pages; this thread alone.
        let got = unsafe { check(region.base().as_ptr(), 0, page) };
        if got != Ok(false) {
            return Err(format!(
                "page {page} of the new region is not zero: {got:?}"
            ));
        }
    }
    Ok(())
}

#[test]
#[ignore = "the child of a_space_created_then_a_crash_opens"]
fn child_creates_then_dies() {
    let Ok(dir) = std::env::var("VPM_CRASH_DIR") else {
        panic!("run by a_space_created_then_a_crash_opens only");
    };
    let dir = PathBuf::from(dir);
    twin::install(&dir);
    let hooks = mnemo_vpm::Hooks {
        wrap_window: twin::wrap,
        sync_swap: twin::sync_swap,
        run_evictor,
    };
    let bytes = std::fs::metadata(dir.join("pm.durable")).unwrap().len();
    let work = || {
        Space::create_with(&dir.join("pm"), &dir.join("swap"), bytes, hooks).unwrap();
    };
    match std::env::var("VPM_MUTANT") {
        Ok(name) => mnemo_pmem::mutant::with(Box::leak(name.into_boxed_str()), work),
        Err(_) => work(),
    }
    // Created: a file under its name is a whole space.
    // SAFETY: _exit ends the process at once, as a crash would.
    unsafe { libc::_exit(CRASH_EXIT_CODE) };
}

/// A space created and a crash right after: every image of its persistent-memory file (the
/// file is under its name once `create` returns) opens, and a region can be allocated,
/// written and read back in it.
fn creation_case(mutant: Option<&str>) -> Result<(), String> {
    let dirs = Dirs::new();
    let dir = dirs.pm().parent().unwrap().to_path_buf();
    let bytes = mnemo_vpm::limits::DATA_OFFSET
        + mnemo_vpm::format::table_bytes(PAGES as u64)
        + (BUDGET * PAGE) as u64;
    let bytes = bytes.next_multiple_of(PAGE as u64);
    std::fs::write(dir.join("pm.durable"), vec![0u8; bytes as usize]).unwrap();
    std::fs::write(dir.join("swap.durable"), []).unwrap();
    let lines = bytes as usize / twin::LINE;
    std::fs::write(
        dir.join("pm.pending"),
        vec![0u8; twin::LANES * lines.div_ceil(8)],
    )
    .unwrap();
    let status = child_command("child_creates_then_dies", &dir, mutant)
        .status()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(CRASH_EXIT_CODE),
        "the creation child failed"
    );
    // The swap file's header was written and fsync'ed by `create` (a disk file: fsync is
    // its durability point), so every image takes the live swap file.
    for image in [Image::Live, Image::Fenced, Image::UnfencedLost] {
        let at = dir.join(format!("{image:?}"));
        image.build(&dir, &at);
        std::fs::copy(dir.join("swap"), at.join("swap")).unwrap();
        let space = Space::open(&at.join("pm"), &at.join("swap"))
            .map_err(|e| format!("{image:?} image of a new space: {e}"))?;
        space
            .allocate("after", (PAGES * PAGE) as u64, (BUDGET * PAGE) as u64)
            .map_err(|e| format!("{image:?} image: allocating: {e}"))?;
        let region = space
            .open_region("after", 0)
            .map_err(|e| format!("{image:?} image: opening: {e}"))?;
        for page in 0..PAGES {
            // SAFETY: PAGES pages; this thread alone.
            unsafe { fill(region.base().as_ptr(), SEED_FIRST, page) };
        }
        for page in 0..PAGES {
            // SAFETY: as above.
            let got = unsafe { check(region.base().as_ptr(), SEED_FIRST, page) };
            if got != Ok(true) {
                return Err(format!("{image:?} image: page {page} reads {got:?}"));
            }
        }
    }
    Ok(())
}

#[test]
fn a_space_created_then_a_crash_opens() {
    if let Err(e) = creation_case(None) {
        panic!("{e}");
    }
}

#[test]
fn a_region_allocated_over_a_freed_one_survives_a_crash() {
    if let Err(e) = allocation_case(None) {
        panic!("{e}");
    }
}

/// The check can fail: each broken order of the fault path, and the removal of each flush,
/// fence and sync of the fault path, is caught by one of the images, with evictions on the
/// fault path and again with the evictor thread (which runs the eviction's copies, sync,
/// flushes and fences on a thread of its own).
#[test]
fn every_fault_path_mutant_and_site_is_caught() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sites = mnemo_pmem::mutant::sites_in(&src);
    assert!(sites.len() >= 10, "sites found: {sites:?}");
    for name in ALLOCATION.iter().chain(CREATION) {
        assert!(
            sites.iter().any(|s| s == name),
            "{name} is not a site any more"
        );
    }
    let mut names: Vec<String> = mnemo_vpm::fault::MUTANTS
        .iter()
        .map(|m| m.to_string())
        .collect();
    names.extend(
        sites
            .iter()
            .filter(|s| !ALLOCATION.contains(&s.as_str()) && !CREATION.contains(&s.as_str()))
            .map(|s| format!("site:{s}")),
    );
    let mut missed = Vec::new();
    for name in ALLOCATION {
        let name = format!("site:{name}");
        match allocation_case(Some(&name)) {
            Ok(()) => missed.push(format!("{name} (allocation over a freed region)")),
            Err(failure) => eprintln!("{name} caught: {failure}"),
        }
    }
    for name in mnemo_vpm::space::ALLOCATION_MUTANTS {
        match allocation_case(Some(name)) {
            Ok(()) => missed.push(format!("{name} (allocation over a freed region)")),
            Err(failure) => eprintln!("{name} caught: {failure}"),
        }
    }
    for name in CREATION {
        let name = format!("site:{name}");
        match creation_case(Some(&name)) {
            Ok(()) => missed.push(format!("{name} (creation)")),
            Err(failure) => eprintln!("{name} caught: {failure}"),
        }
    }
    for name in &names {
        for ahead in [false, true] {
            match sweep(Some(name), &[ahead]) {
                Some(failure) => eprintln!("{name} caught: {failure}"),
                None => missed.push(format!("{name} (evictor thread: {ahead})")),
            }
        }
    }
    assert!(missed.is_empty(), "not caught: {missed:?}");
}

/// The durability twin of the child's space: a window that keeps a durable image of the
/// persistent-memory file (lines copied there at a fence, if flushed before it) and a swap
/// sync that copies the swap file to its durable image. Async-signal-safe: atomics and
/// system calls only (it runs inside the fault handler).
#[allow(unsafe_code)]
mod twin {
    use std::os::fd::IntoRawFd;
    use std::path::Path;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering};

    use mnemo_pmem::{FileMedia, ForwardMedia, Media, MediaError};

    pub const LINE: usize = 64;
    /// Threads are told apart by lane: 0 the writer, 1 the helpers that fault pages in, 2
    /// the region's evictor thread. A fence makes durable only the lines its own lane
    /// flushed, as a CPU fence orders only its own thread's flushes.
    pub const LANES: usize = 3;

    thread_local! {
        static LANE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    pub fn set_lane(lane: usize) {
        LANE.with(|l| l.set(lane));
    }

    fn lane() -> usize {
        LANE.with(std::cell::Cell::get)
    }

    static DURABLE_PM: AtomicI32 = AtomicI32::new(-1);
    static DURABLE_SWAP: AtomicI32 = AtomicI32::new(-1);
    /// When the parent made `pm.fence-log` (the allocation child): each fence appends a
    /// record per line it makes durable (the line's number, then its 64 bytes), then an end
    /// record (number `u64::MAX`). So after the crash the parent can rebuild the durable
    /// image as it was before each fence, and which lines that fence wrote.
    static FENCE_LOG: AtomicI32 = AtomicI32::new(-1);
    /// Bytes of a fence-log record.
    pub const LOG_RECORD: usize = 8 + LINE;

    /// Appends one record to the fence log (`line` u64::MAX: the end of a fence).
    fn log_line(base: *const u8, line: u64) {
        let mut record = [0u8; LOG_RECORD];
        record[..8].copy_from_slice(&line.to_le_bytes());
        if line != u64::MAX {
            // SAFETY: the line lies inside the window's mapping (flushed ranges do).
            let bytes = unsafe { std::slice::from_raw_parts(base.add(line as usize * LINE), LINE) };
            record[8..].copy_from_slice(bytes);
        }
        // SAFETY: write of a local buffer to a descriptor kept open (O_APPEND).
        let n = unsafe {
            libc::write(
                FENCE_LOG.load(Ordering::Acquire),
                record.as_ptr().cast(),
                LOG_RECORD,
            )
        };
        assert_eq!(n, LOG_RECORD as isize);
    }
    /// One bit per line of the persistent-memory file: flushed, not yet fenced. In a shared
    /// mapping of `pm.pending`, so the parent reads it after the child's death.
    static PENDING: AtomicPtr<AtomicU8> = AtomicPtr::new(std::ptr::null_mut());
    static PENDING_BYTES: AtomicU64 = AtomicU64::new(0);

    fn open(path: &Path) -> i32 {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
            .into_raw_fd()
    }

    /// Open the durable images and map the pending bitmap in `dir` (made by the parent).
    pub fn install(dir: &Path) {
        DURABLE_PM.store(open(&dir.join("pm.durable")), Ordering::Release);
        DURABLE_SWAP.store(open(&dir.join("swap.durable")), Ordering::Release);
        if dir.join("pm.fence-log").exists() {
            let log = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("pm.fence-log"))
                .unwrap();
            FENCE_LOG.store(log.into_raw_fd(), Ordering::Release);
        }
        let fd = open(&dir.join("pm.pending"));
        let len = std::fs::metadata(dir.join("pm.pending")).unwrap().len();
        // SAFETY: a new shared mapping of a file of `len` bytes at an address the kernel
        // picks; kept for the life of the process.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        PENDING_BYTES.store(len, Ordering::Release);
        PENDING.store(p.cast(), Ordering::Release);
    }

    /// Bytes of one lane's bitmap.
    fn lane_bytes() -> usize {
        PENDING_BYTES.load(Ordering::Acquire) as usize / LANES
    }

    fn pending(lane: usize, byte: usize) -> &'static AtomicU8 {
        assert!(byte < lane_bytes() && lane < LANES);
        // SAFETY: inside the live mapping made by `install`.
        unsafe {
            &*PENDING
                .load(Ordering::Acquire)
                .add(lane * lane_bytes() + byte)
        }
    }

    #[derive(Debug)]
    pub struct Twin(FileMedia);

    pub fn wrap(window: FileMedia) -> Box<dyn Media> {
        Box::new(Twin(window))
    }

    impl Twin {
        fn mark(&self, offset: u64, len: u64) {
            let (first, end) = (offset as usize / LINE, (offset + len) as usize);
            for line in first..end.div_ceil(LINE) {
                pending(lane(), line / 8).fetch_or(1 << (line % 8), Ordering::SeqCst);
            }
        }

        fn base(&self) -> NonNull<u8> {
            self.0.base()
        }
    }

    impl ForwardMedia for Twin {
        type Inner = FileMedia;

        fn inner(&self) -> &FileMedia {
            &self.0
        }

        fn flush(&self, offset: u64, len: u64) {
            self.0.flush(offset, len);
            self.mark(offset, len);
        }

        fn copy_nodrain(&self, offset: u64, src: &[u8]) {
            self.0.copy_nodrain(offset, src);
            self.mark(offset, src.len() as u64);
        }

        fn drain(&self) -> Result<(), MediaError> {
            self.0.drain()?;
            let fd = DURABLE_PM.load(Ordering::Acquire);
            let logging = FENCE_LOG.load(Ordering::Acquire) >= 0;
            for byte in 0..lane_bytes() {
                let bits = pending(lane(), byte).swap(0, Ordering::SeqCst);
                for bit in 0..8 {
                    if bits & (1 << bit) == 0 {
                        continue;
                    }
                    let line = byte * 8 + bit;
                    if logging {
                        log_line(self.base().as_ptr(), line as u64);
                    }
                    // SAFETY: the line lies inside the window's mapping (flushed ranges do);
                    // pwrite of it to the durable image at the same offset.
                    let n = unsafe {
                        libc::pwrite(
                            fd,
                            self.base().as_ptr().add(line * LINE).cast(),
                            LINE,
                            (line * LINE) as libc::off_t,
                        )
                    };
                    assert_eq!(n, LINE as isize);
                }
            }
            if logging {
                log_line(self.base().as_ptr(), u64::MAX);
            }
            Ok(())
        }
    }

    /// fdatasync, then the whole swap file copied into its durable image (by the kernel:
    /// the handler runs on the thread's small alternate signal stack, no room for a buffer).
    pub fn sync_swap(fd: i32) -> bool {
        // SAFETY: fdatasync of a descriptor kept open.
        if unsafe { libc::fdatasync(fd) } != 0 {
            return false;
        }
        copy_whole(fd, DURABLE_SWAP.load(Ordering::Acquire))
    }

    /// The whole file `from` copied over the start of `to` (by the kernel: no buffer).
    fn copy_whole(fd: i32, to: i32) -> bool {
        // SAFETY: system calls on descriptors kept open, with offsets passed by pointer to
        // locals.
        unsafe {
            let len = libc::lseek(fd, 0, libc::SEEK_END);
            let (mut from_at, mut to_at): (libc::loff_t, libc::loff_t) = (0, 0);
            while from_at < len {
                let n = libc::copy_file_range(
                    fd,
                    &mut from_at,
                    to,
                    &mut to_at,
                    (len - from_at) as usize,
                    0,
                );
                if n <= 0 {
                    return false;
                }
            }
            true
        }
    }
}
