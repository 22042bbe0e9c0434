//! What the sync-point counters cost, one and two threads: a staged `Pool::sync` of one
//! 64-byte range per call on a pool on /dev/shm (the per-thread counters inside), against
//! the same calls followed by the three shared `fetch_add`s the counters used to be (one
//! cache line written by every thread). Nothing is stored, so each fence has nothing to wait
//! for and the bookkeeping shows. A measurement, not a test:
//! `cargo run --release -p mnemo-pmem --example sync_counters [-- CALLS]`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use mnemo_pmem::{ByteRange, CreateOptions, Pool, SyncKind, SyncPoint};

/// The old layout: three counters side by side, shared by every thread.
#[derive(Default)]
struct Shared {
    points: AtomicU64,
    ranges: AtomicU64,
    bytes: AtomicU64,
}

fn run(pool: &Pool, threads: u64, calls: u64, shared: Option<&Shared>) -> f64 {
    let barrier = Barrier::new(threads as usize);
    let ns = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let range = [ByteRange::new(pool.data_offset() + 4096 * t, 64)];
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..calls {
                        pool.sync(&SyncPoint::staged(SyncKind::Data, &range))
                            .expect("sync point");
                        if let Some(c) = shared {
                            c.points.fetch_add(1, Ordering::Relaxed);
                            c.ranges.fetch_add(1, Ordering::Relaxed);
                            c.bytes.fetch_add(64, Ordering::Relaxed);
                        }
                    }
                    start.elapsed().as_nanos() as f64 / calls as f64
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .sum::<f64>()
    });
    ns / threads as f64
}

fn main() {
    let calls: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm");
    let pool = Pool::create(
        &dir.path().join("counters.pool"),
        &CreateOptions::new(1 << 20, "counters"),
    )
    .expect("pool");
    println!("threads,variant,ns_per_sync_point (load {})", {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .next()
            .unwrap_or("?")
            .to_string()
    });
    for threads in [1, 2] {
        for round in 0..3 {
            let shared = Shared::default();
            let per_thread = run(&pool, threads, calls, None);
            let old = run(&pool, threads, calls, Some(&shared));
            println!("{threads},per-thread counters (round {round}),{per_thread:.1}");
            println!("{threads},plus 3 shared fetch_add (round {round}),{old:.1}");
        }
    }
    let synced = pool.stats().sync_points.load(Ordering::Relaxed);
    assert_eq!(synced, 3 * 2 * calls * 3, "every sync point counted");
}
