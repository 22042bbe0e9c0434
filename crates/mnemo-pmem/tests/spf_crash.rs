//! Sync points with dirty tracking under the crash simulator lose nothing: after every
//! sync point, the simulator's durable image of the synced range equals what the program
//! sees, and a crash then reopens to the same bytes.

use std::path::Path;

use mnemo_pmem::track::{RawMethod, TrackerOptions, Tracking};
use mnemo_pmem::{CreateOptions, OpenOptions, Pool};
use mnemo_testkit::{SimMedia, SimRng};

const SIZE: u64 = 256 << 10;

fn run(mode: Tracking, fallback: Option<RawMethod>, raw_stores: bool, seed: u64) -> RawMethod {
    run_with(mode, fallback, false, raw_stores, seed)
}

fn run_with(
    mode: Tracking,
    fallback: Option<RawMethod>,
    chunk_hints: bool,
    raw_stores: bool,
    seed: u64,
) -> RawMethod {
    let sim = SimMedia::new(4 * SIZE);
    let pool = Pool::create_on(
        Box::new(sim.clone()),
        Path::new("sim"),
        &CreateOptions::new(SIZE, "spf-crash"),
    )
    .unwrap();
    let info = pool
        .enable_tracking_with(TrackerOptions {
            mode,
            fallback,
            chunk_hints,
        })
        .unwrap();
    let mut rng = SimRng::new(seed);
    let data = pool.data_offset();
    let mut below = |n: u64| rng.next_u64() % n;
    for step in 0..120 {
        for _ in 0..below(8) {
            let len = 1 + below(300);
            let at = data + below(SIZE - data - len);
            let byte = below(255) as u8 + 1;
            if raw_stores {
                let p = pool.ptr(at, len).unwrap();
                // SAFETY: `at..at+len` lies in the live mapping (checked by `ptr`); this test
                // is the only code touching the pool.
                unsafe { std::ptr::write_bytes(p.as_ptr(), byte, len as usize) };
            } else {
                pool.write(at, &vec![byte; len as usize]).unwrap();
            }
        }
        let (a, b) = if below(4) == 0 {
            (data, SIZE)
        } else {
            let a = data + below(SIZE - data);
            (a, a + 1 + below(SIZE - a))
        };
        pool.msync(a, b - a).unwrap();
        let durable = sim.durable_image();
        let volatile = sim.volatile_image();
        let (a, b) = (a as usize, b as usize);
        if let Some(i) = (a..b).find(|&i| durable[i] != volatile[i]) {
            panic!(
                "seed {seed} step {step}: byte {i} of synced range {a}..{b} not durable ({info:?})"
            );
        }
    }
    pool.msync(data, SIZE - data).unwrap();
    let expected = sim.volatile_image();
    drop(pool);
    let crashed = sim.crash();
    let reopened = Pool::open_on(
        Box::new(crashed.clone()),
        Path::new("sim"),
        &OpenOptions::default(),
    )
    .unwrap();
    let image = crashed.volatile_image();
    assert_eq!(
        image[data as usize..SIZE as usize],
        expected[data as usize..SIZE as usize],
        "seed {seed}: data lost across the crash"
    );
    drop(reopened);
    info.raw
}

#[test]
fn api_tracking_loses_nothing() {
    for seed in 1..=3 {
        run(Tracking::Api, None, false, seed);
    }
}

#[test]
fn raw_tracking_loses_nothing() {
    for seed in 1..=3 {
        let method = run(Tracking::Raw, None, true, seed);
        eprintln!("raw tracking on the simulator: {method:?}");
    }
}

#[test]
fn chunk_hints_lose_nothing() {
    for seed in 1..=2 {
        run_with(Tracking::Raw, None, true, true, 20 + seed);
    }
}

#[test]
fn mprotect_tracking_loses_nothing() {
    assert_eq!(
        run(Tracking::Raw, Some(RawMethod::Mprotect), true, 5),
        RawMethod::Mprotect
    );
}

#[test]
fn forced_fallback_loses_nothing() {
    assert_eq!(
        run(Tracking::Raw, Some(RawMethod::FlushAll), true, 7),
        RawMethod::FlushAll
    );
}

/// The check can fail: sync points that flush what the scan found one sync point late leave
/// synced bytes out of the durable image.
#[test]
fn late_flushes_are_caught() {
    let caught = std::panic::catch_unwind(|| {
        mnemo_pmem::mutant::with("spf.collect_before_scan", || {
            run(Tracking::Raw, None, true, 11)
        })
    });
    let method = mnemo_pmem::track::detect().0;
    if method == RawMethod::UffdWpAsync {
        assert!(caught.is_err(), "late flushes went unnoticed");
    }
}
