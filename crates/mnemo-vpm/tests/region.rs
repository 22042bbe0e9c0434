//! A virtual region larger than its budget of persistent memory: data written beyond the
//! budget reads back, before and after the region is reopened (at another address), in
//! sequential and random order, with several regions and owners at once.

mod common;

use common::{check, fill, Dirs, PAGE};
use mnemo_pmem::Media;
use mnemo_vpm::{Error, RegionOptions, Space};

const MIB: u64 = 1 << 20;

fn base(region: &mnemo_vpm::Region) -> *mut u8 {
    region.base().as_ptr()
}

/// The ways a region may run, each test of paging runs in all: evictions on the fault path
/// one page per fault, on the fault path with fault-around, and the default (an evictor
/// thread ahead of need, with fault-around).
const MODES: [RegionOptions; 3] = [
    RegionOptions {
        evict_ahead: false,
        fault_around_pages: 1,
    },
    RegionOptions {
        evict_ahead: false,
        fault_around_pages: mnemo_vpm::limits::FAULT_AROUND_PAGES,
    },
    RegionOptions {
        evict_ahead: true,
        fault_around_pages: mnemo_vpm::limits::FAULT_AROUND_PAGES,
    },
];

/// A small deterministic generator (xorshift64*), so a failing order can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn sequential_writes_beyond_the_budget_read_back_before_and_after_reopening() {
    for options in MODES {
        sequential(options);
    }
}

fn sequential(options: RegionOptions) {
    let dirs = Dirs::new();
    let space = dirs.create(4 * MIB);
    let pages = 64;
    let seq = space
        .allocate("seq", (pages * PAGE) as u64, 8 * PAGE as u64)
        .unwrap();
    assert_eq!(seq, 0);
    let region = space.open_region_with("seq", 0, options).unwrap();
    for page in 0..pages {
        // SAFETY: the region has `pages` pages and only this thread uses it.
        unsafe { fill(base(&region), 1, page) };
    }
    let stats = region.stats();
    // The evictor thread keeps a reserve of free slots (a batch: 2 of 8), and may be
    // evicting still.
    let least = if options.evict_ahead { 6 } else { 8 };
    assert!(
        (least..=8).contains(&stats.resident_pages),
        "{options:?} {stats:?}"
    );
    assert_eq!(stats.resident_pages + stats.swapped_pages, pages as u64);
    assert_eq!(
        stats.swap_outs, stats.swapped_pages,
        "{options:?} {stats:?}"
    );
    assert_eq!(stats.zero_fills, pages as u64);
    if !options.evict_ahead {
        assert!((stats.mrr() - 8.0 / 64.0).abs() < 1e-9);
        assert_eq!(stats.sync_evictions, stats.evictions);
    }
    if options.fault_around_pages == 1 {
        assert_eq!(stats.faults, pages as u64, "{stats:?}");
    }
    for page in 0..pages {
        // SAFETY: as above.
        let got = unsafe { check(base(&region), 1, page) };
        assert_eq!(got, Ok(true), "page {page}");
    }
    let stats = region.stats();
    assert!(stats.swap_ins >= (pages - 8) as u64, "{stats:?}");
    drop(region);
    drop(space);

    // Reopened by another Space: every page found at its slot or in swap.
    let space = dirs.open();
    // Another region opened first takes address space, so this one comes back at an
    // address of the kernel's choosing: nothing in the files depends on it.
    space
        .allocate("other", 64 * PAGE as u64, 4 * PAGE as u64)
        .unwrap();
    let _other = space.open_region("other", 0).unwrap();
    let region = space.open_region_with("seq", 0, options).unwrap();
    let reopened = region.stats();
    assert_eq!(
        reopened.resident_pages + reopened.swapped_pages,
        pages as u64
    );
    assert!(
        (least..=8).contains(&reopened.resident_pages),
        "{reopened:?}"
    );
    for page in (0..pages).rev() {
        // SAFETY: as above.
        let got = unsafe { check(base(&region), 1, page) };
        assert_eq!(got, Ok(true), "page {page}");
    }
}

#[test]
fn random_access_reads_what_was_written_last() {
    for options in MODES {
        random(options);
    }
}

fn random(options: RegionOptions) {
    let dirs = Dirs::new();
    let space = dirs.create(4 * MIB);
    let pages = 100;
    space
        .allocate("rand", (pages * PAGE) as u64, 10 * PAGE as u64)
        .unwrap();
    let region = space.open_region_with("rand", 0, options).unwrap();
    let b = base(&region);
    // The model: which seed each page was last written with (0: never written).
    let mut model = vec![0u64; pages];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for step in 0..2000 {
        let page = (rng.next() % pages as u64) as usize;
        if rng.next() % 3 == 0 {
            let seed = step + 1;
            // SAFETY: page < pages; one thread.
            unsafe { fill(b, seed, page) };
            model[page] = seed;
        } else {
            // SAFETY: as above.
            let got = unsafe { check(b, model[page], page) };
            assert_eq!(
                got,
                Ok(model[page] != 0),
                "{options:?} step {step} page {page}"
            );
        }
    }
    let stats = region.stats();
    assert!(
        stats.swap_outs > 100 && stats.swap_ins > 100,
        "{options:?} {stats:?}"
    );
    // Pages only read since their swap-in go back without a write to swap.
    assert!(
        stats.clean_evictions > 0 && stats.clean_evictions < stats.swap_outs,
        "{stats:?}"
    );
    drop(region);
    let region = dirs.open().open_region_with("rand", 0, options).unwrap();
    for (page, &seed) in model.iter().enumerate() {
        // SAFETY: as above.
        let got = unsafe { check(base(&region), seed, page) };
        assert_eq!(
            got,
            Ok(seed != 0),
            "{options:?} page {page} after reopening"
        );
    }
}

#[test]
fn owners_allocate_and_recover_their_regions_in_any_order() {
    let dirs = Dirs::new();
    let space = dirs.create(8 * MIB);
    // Interleaved allocations of three owners.
    for owner in ["b", "a", "c", "a", "b"] {
        space
            .allocate(owner, 32 * PAGE as u64, 4 * PAGE as u64)
            .unwrap();
    }
    let names = [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)];
    // Each owner's regions written on its own thread, at once.
    std::thread::scope(|s| {
        for (i, &(owner, seq)) in names.iter().enumerate() {
            let space = &space;
            s.spawn(move || {
                let region = space.open_region(owner, seq).unwrap();
                for page in 0..32 {
                    // SAFETY: 32 pages; this thread alone uses this region.
                    unsafe { fill(base(&region), i as u64 + 10, page) };
                }
            });
        }
    });
    drop(space);
    // Recovered in another order, several open at once.
    let space = dirs.open();
    let regions: Vec<_> = names
        .iter()
        .enumerate()
        .rev()
        .map(|(i, &(owner, seq))| (i, space.open_region(owner, seq).unwrap()))
        .collect();
    for (i, region) in &regions {
        for page in 0..32 {
            // SAFETY: as above.
            let got = unsafe { check(base(region), *i as u64 + 10, page) };
            assert_eq!(got, Ok(true), "region {i} page {page}");
        }
    }
    let listed = space.regions().unwrap();
    assert_eq!(listed.len(), 5);
    assert!(matches!(space.open_region("a", 0), Err(Error::Busy { .. })));
    // The same files opened again, as a second process would: the region's lock file
    // refuses it, with a message saying so.
    let other = dirs.open();
    let refused = other
        .open_region("a", 0)
        .expect_err("a second opener is refused");
    assert!(matches!(refused, Error::InUse { .. }), "{refused}");
    assert!(
        refused.to_string().contains("in use by another process"),
        "{refused}"
    );
    drop(regions);
    // Closed by its first opener, the region opens for the other.
    drop(other.open_region("a", 0).expect("free again"));
    drop(other);
    space.free("b", 0).unwrap();
    assert!(matches!(
        space.open_region("b", 0),
        Err(Error::NotFound { .. })
    ));
    assert!(space
        .regions()
        .unwrap()
        .iter()
        .any(|r| r.owner == "b" && r.freed));
    // Sequence numbers go on after a freed region.
    assert_eq!(
        space
            .allocate("b", 8 * PAGE as u64, 4 * PAGE as u64)
            .unwrap(),
        2
    );
}

#[test]
fn threads_faulting_on_one_region_lose_nothing() {
    for options in MODES {
        threads(options);
    }
}

fn threads(options: RegionOptions) {
    let dirs = Dirs::new();
    let space = dirs.create(4 * MIB);
    let pages = 64;
    space
        .allocate("mt", (pages * PAGE) as u64, 6 * PAGE as u64)
        .unwrap();
    let region = space.open_region_with("mt", 0, options).unwrap();
    let b = base(&region) as usize;
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                for round in 0..3 {
                    for page in (t..pages).step_by(4) {
                        // SAFETY: each thread writes its own pages.
                        unsafe { fill(b as *mut u8, round, page) };
                    }
                }
            });
        }
    });
    for page in 0..pages {
        // SAFETY: no writer any more.
        let got = unsafe { check(b as *const u8, 2, page) };
        assert_eq!(got, Ok(true), "{options:?} page {page}");
    }
    drop(region);
    let region = dirs.open().open_region_with("mt", 0, options).unwrap();
    for page in 0..pages {
        // SAFETY: this thread alone.
        let got = unsafe { check(base(&region), 2, page) };
        assert_eq!(got, Ok(true), "{options:?} page {page} after reopening");
    }
}

/// With the evictor thread, a fault that leaves the reserve of free slots short wakes it,
/// and it evicts one batch (its copy and swap sync off the fault path) while the writer
/// waits for nothing: no eviction is made by a fault.
#[test]
fn the_evictor_thread_evicts_ahead_of_need() {
    let dirs = Dirs::new();
    let space = dirs.create(4 * MIB);
    let (pages, budget) = (256usize, 64u64);
    space
        .allocate("ahead", (pages * PAGE) as u64, budget * PAGE as u64)
        .unwrap();
    let region = space.open_region("ahead", 0).unwrap();
    let batch = mnemo_vpm::fault::evict_batch(budget) as u64;
    // Pages 0..56: 8 slots left free, fewer than the reserve of a batch (16).
    for page in 0..56 {
        // SAFETY: `pages` pages; this thread alone.
        unsafe { fill(base(&region), 3, page) };
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while region.stats().swapped_pages == 0 {
        assert!(std::time::Instant::now() < deadline, "{:?}", region.stats());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // One batch, and the reserve is whole again: nothing more to do.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let stats = region.stats();
    assert_eq!(stats.evictions, 1, "{stats:?}");
    assert_eq!(stats.sync_evictions, 0, "{stats:?}");
    assert_eq!(stats.swapped_pages, batch, "{stats:?}");
    assert!(budget - stats.resident_pages >= batch, "{stats:?}");
    // Then every page, well beyond the budget, and all of it back.
    for page in 0..pages {
        // SAFETY: as above.
        unsafe { fill(base(&region), 4, page) };
    }
    for page in 0..pages {
        // SAFETY: as above.
        let got = unsafe { check(base(&region), 4, page) };
        assert_eq!(got, Ok(true), "page {page}");
    }
    let stats = region.stats();
    assert!(stats.evictions > stats.sync_evictions, "{stats:?}");
}

/// A first touch maps the untouched pages after it into contiguous free slots, with one
/// fault: a linear writer takes one fault per `FAULT_AROUND_PAGES` pages, and the mapped
/// neighbours read as zeros until written.
#[test]
fn fault_around_maps_the_next_untouched_pages_at_once() {
    let around = mnemo_vpm::limits::FAULT_AROUND_PAGES as usize;
    for fault_around_pages in [1, around as u64] {
        let dirs = Dirs::new();
        let space = dirs.create(4 * MIB);
        let pages = 4 * around;
        space
            .allocate("around", (pages * PAGE) as u64, (pages * PAGE) as u64)
            .unwrap();
        let options = RegionOptions {
            evict_ahead: false,
            fault_around_pages,
        };
        let region = space.open_region_with("around", 0, options).unwrap();
        // The second page of each run stays unwritten: it must read as zeros.
        for page in (0..pages).filter(|p| p % around != 1) {
            // SAFETY: `pages` pages; this thread alone.
            unsafe { fill(base(&region), 6, page) };
        }
        let stats = region.stats();
        if fault_around_pages == 1 {
            assert_eq!(stats.faults, (pages - 4) as u64, "{stats:?}");
            assert_eq!(stats.zero_fills, (pages - 4) as u64, "{stats:?}");
        } else {
            assert_eq!(stats.faults, 4, "{stats:?}");
            assert_eq!(stats.zero_fills, pages as u64, "{stats:?}");
        }
        drop(region);
        let region = dirs.open().open_region_with("around", 0, options).unwrap();
        for page in 0..pages {
            let written = page % around != 1;
            // SAFETY: as above.
            let got = unsafe { check(base(&region), if written { 6 } else { 0 }, page) };
            assert_eq!(got, Ok(written), "page {page}");
        }
    }
}

#[test]
fn bad_files_and_arguments_are_errors() {
    let dirs = Dirs::new();
    assert!(Space::create(&dirs.pm(), &dirs.swap(), 1).is_err());
    let space = dirs.create(MIB);
    assert!(matches!(
        space.allocate("", 4096, 4096),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        space.allocate("x", 1 << 30, 1 << 30),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        space.allocate("x", 1 << 30, 1 << 20),
        Err(Error::Full(_))
    ));
    drop(space);
    // A damaged configuration section: an error, not a panic.
    let mut bytes = std::fs::read(dirs.pm()).unwrap();
    bytes[17] ^= 0xff;
    std::fs::write(dirs.pm(), &bytes).unwrap();
    assert!(matches!(
        Space::open(&dirs.pm(), &dirs.swap()),
        Err(Error::Corrupt { .. })
    ));
}

/// Regression: a stats handle used to keep the region's fault-handler registration alive
/// after the region was dropped. A region opened again could get the same address range,
/// and its faults were then resolved with the old registration's stale bookkeeping: one
/// page's slot handed to another (the heap found redo-log bytes in its chunk table, in
/// about half the runs, depending on where the kernel placed the reservation).
#[test]
fn stats_handles_outlive_their_region_without_holding_its_address_range() {
    let dirs = Dirs::new();
    let space = dirs.create(2 * MIB);
    let pages = 40;
    space
        .allocate("again", (pages * PAGE) as u64, 4 * PAGE as u64)
        .unwrap();
    let mut handles = Vec::new();
    for round in 0..12u64 {
        let region = space.open_region("again", 0).unwrap();
        handles.push(region.stats_handle());
        for page in 0..pages {
            if round > 0 {
                // SAFETY: `pages` pages; this thread alone.
                let got = unsafe { check(base(&region), round - 1, page) };
                assert_eq!(got, Ok(true), "round {round} page {page}");
            }
            // SAFETY: as above.
            unsafe { fill(base(&region), round, page) };
        }
    }
    assert!(handles.iter().all(|h| h.stats().swap_outs > 0));
}

/// Victims are chosen by a two-handed CLOCK: a page touched after the front hand armed it is
/// passed over by the back hand, while vpmlib's plain FIFO evicts it in its turn and must bring it
/// back again and again.
#[test]
fn a_hot_page_stays_resident_under_clock_and_not_under_fifo() {
    let run = |fifo: bool| {
        let dirs = Dirs::new();
        let space = dirs.create(2 * MIB);
        space
            .allocate("hot", 96 * PAGE as u64, 8 * PAGE as u64)
            .unwrap();
        // Evictions on the fault path, on this thread: the FIFO mutant is switched on for
        // this thread only.
        let options = RegionOptions {
            evict_ahead: false,
            ..RegionOptions::default()
        };
        let region = space.open_region_with("hot", 0, options).unwrap();
        let mut byte = [0u8; 1];
        let mut work = || {
            for page in 1..96 {
                // SAFETY: 96 pages; this thread alone.
                unsafe { fill(base(&region), 5, page) };
                region.read(0, &mut byte).unwrap();
            }
        };
        if fifo {
            mnemo_pmem::mutant::with("vpm.fifo_only", work);
        } else {
            work();
        }
        let stats = region.stats();
        for page in 1..96 {
            // SAFETY: as above.
            let got = unsafe { check(base(&region), 5, page) };
            assert_eq!(got, Ok(true), "page {page}");
        }
        stats
    };
    let clock = run(false);
    let fifo = run(true);
    // Once: the hot page reaches the back hand before the front hand ever armed it.
    assert!(clock.swap_ins <= 1, "the hot page was evicted: {clock:?}");
    assert!(fifo.swap_ins > 5, "FIFO kept the hot page: {fifo:?}");
}

/// A freed region's page table, slots and swap area go to the next allocation: in a
/// persistent-memory file with room for one region, a second fits only once the first is
/// freed, and it starts empty although its slots and swap area still hold the first's bytes.
#[test]
fn a_freed_region_s_memory_is_reused() {
    let dirs = Dirs::new();
    let (pages, budget) = (64usize, 16usize);
    let one = mnemo_vpm::limits::DATA_OFFSET
        + mnemo_vpm::format::table_bytes(pages as u64)
        + (budget * PAGE) as u64;
    let space = dirs.create(one + 8 * PAGE as u64);
    let (capacity, budget_bytes) = ((pages * PAGE) as u64, (budget * PAGE) as u64);
    assert_eq!(space.allocate("first", capacity, budget_bytes).unwrap(), 0);
    let full = space.allocate("second", capacity, budget_bytes);
    assert!(matches!(full, Err(Error::Full(_))), "{full:?}");
    let region = space.open_region("first", 0).unwrap();
    for page in 0..pages {
        // SAFETY: `pages` pages; this thread alone.
        unsafe { fill(base(&region), 1, page) };
    }
    drop(region);
    // Open in another process (another Space on the same files): not freed.
    let other = dirs.open();
    let held = other.open_region("first", 0).unwrap();
    let refused = space.free("first", 0);
    assert!(matches!(refused, Err(Error::InUse { .. })), "{refused:?}");
    drop(held);
    drop(other);
    space.free("first", 0).unwrap();
    assert_eq!(space.allocate("second", capacity, budget_bytes).unwrap(), 0);
    let region = space.open_region("second", 0).unwrap();
    for page in 0..pages {
        // SAFETY: as above.
        let got = unsafe { check(base(&region), 2, page) };
        assert_eq!(got, Ok(false), "page {page} of the new region is not zero");
    }
    for page in 0..pages {
        // SAFETY: as above.
        unsafe { fill(base(&region), 2, page) };
    }
    drop(region);
    drop(space);
    let space = dirs.open();
    let region = space.open_region("second", 0).unwrap();
    for page in (0..pages).rev() {
        // SAFETY: as above.
        let got = unsafe { check(base(&region), 2, page) };
        assert_eq!(got, Ok(true), "page {page} after reopening");
    }
    let listed = space.regions().unwrap();
    assert!(listed.iter().any(|r| r.owner == "first" && r.freed));
    assert!(listed.iter().any(|r| r.owner == "second" && !r.freed));
    // The first owner's numbering goes on after its freed region; no room for it now.
    let again = space.allocate("first", capacity, budget_bytes);
    assert!(matches!(again, Err(Error::Full(_))), "{again:?}");
}

/// A store that brings a page back from swap maps it writable and dirty at once (the CPU
/// says the access is a store); a load maps it read-only and clean, and a store after it
/// faults once more to mark it dirty.
#[test]
#[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
fn a_store_that_swaps_a_page_in_takes_one_fault() {
    let dirs = Dirs::new();
    let space = dirs.create(4 * MIB);
    let pages = 32;
    space
        .allocate("w", (pages * PAGE) as u64, 8 * PAGE as u64)
        .unwrap();
    let options = RegionOptions {
        evict_ahead: false,
        fault_around_pages: 1,
    };
    let region = space.open_region_with("w", 0, options).unwrap();
    for page in 0..pages {
        // SAFETY: `pages` pages; this thread alone.
        unsafe { fill(base(&region), 1, page) };
    }
    let before = region.stats();
    // SAFETY: as above. Page 0 is in swap: a store brings it back.
    unsafe { fill(base(&region), 2, 0) };
    let stored = region.stats();
    assert_eq!(stored.faults, before.faults + 1, "{stored:?}");
    assert_eq!(stored.swap_ins, before.swap_ins + 1, "{stored:?}");
    // Page 1, in swap too: a load brings it back clean, the store after it faults again.
    // SAFETY: as above.
    assert_eq!(unsafe { check(base(&region), 1, 1) }, Ok(true));
    let loaded = region.stats();
    assert_eq!(loaded.faults, stored.faults + 1, "{loaded:?}");
    // SAFETY: as above.
    unsafe { fill(base(&region), 2, 1) };
    assert_eq!(region.stats().faults, loaded.faults + 1);
    drop(region);
    let region = dirs.open().open_region_with("w", 0, options).unwrap();
    for page in 0..pages {
        let seed = if page < 2 { 2 } else { 1 };
        // SAFETY: as above.
        let got = unsafe { check(base(&region), seed, page) };
        assert_eq!(got, Ok(true), "page {page}");
    }
}

/// Table-of-contents entries of freed regions are reused, but never the one holding its
/// owner's last sequence number: an owner's numbers go on after a free, whatever the other
/// owners allocated meanwhile, and a file takes any number of allocations over its life.
#[test]
fn freed_entries_are_reused_and_sequence_numbers_never_go_back() {
    let dirs = Dirs::new();
    let entries = mnemo_vpm::limits::TOC_ENTRIES;
    let one = mnemo_vpm::format::table_bytes(1) + PAGE as u64;
    let space = dirs.create(mnemo_vpm::limits::DATA_OFFSET + entries * one + PAGE as u64);
    let page = PAGE as u64;
    for seq in 0..entries {
        assert_eq!(space.allocate("a", page, page).unwrap(), seq);
    }
    let full = space.allocate("b", page, page);
    assert!(matches!(full, Err(Error::Full(_))), "{full:?}");
    for seq in 0..entries {
        space.free("a", seq).unwrap();
    }
    // Every entry of "a" but its last is taken by "b".
    for seq in 0..entries - 1 {
        assert_eq!(space.allocate("b", page, page).unwrap(), seq);
    }
    let full = space.allocate("c", page, page);
    assert!(matches!(full, Err(Error::Full(_))), "{full:?}");
    // "a" allocates again: numbered after its last, not from 0.
    space.free("b", 0).unwrap();
    assert_eq!(space.allocate("a", page, page).unwrap(), entries);
    // Its freed last entry is no longer its last: reused now.
    space.free("b", 1).unwrap();
    assert_eq!(space.allocate("c", page, page).unwrap(), 0);
    assert_eq!(space.allocate("c", page, page).unwrap(), 1);
    let full = space.allocate("c", page, page);
    assert!(matches!(full, Err(Error::Full(_))), "{full:?}");
    let region = space.open_region("a", entries).unwrap();
    // SAFETY: one page; this thread alone.
    unsafe { fill(base(&region), 7, 0) };
    drop(region);
    drop(space);
    let space = dirs.open();
    let listed = space.regions().unwrap();
    assert_eq!(listed.len() as u64, entries);
    assert!(listed.iter().all(|r| !r.freed), "{listed:?}");
    assert!(
        space.open_region("a", 0).is_err(),
        "a freed number stays freed"
    );
    let region = space.open_region("a", entries).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { check(base(&region), 7, 0) }, Ok(true));
    drop(region);
    assert_eq!(space.open_region("b", 2).unwrap().stats().capacity_pages, 1);
}
