//! Issue 20's sync-point benchmark on an ordinary disk: the cost of one sync point (100 bytes
//! written at a random place of the pool, then `Pool::msync` of them) with the local policy
//! (`msync(2)` of the mapping) and with the write-ahead policy (`mnemo_pmem::WalPolicy`: a
//! record appended to `<pool>.wal`, `fdatasync`), for a 256 MiB and a 16 GiB pool (4 GiB if
//! the disk lacks room), in the same run, rounds alternating the four.
//!
//! Run: `cargo run --release -p mnemo-bench --bin disk`. Environment: `DISK_DIR` (where
//! the pools go; default the target directory, on the root file system), `DISK_BENCH_OPS`
//! (sync points per measurement, 400), `DISK_BENCH_ROUNDS` (3). Results:
//! `bench/results/disk-sync.csv` (one row per measurement: round, policy, pool size, ops,
//! median and p99 ns per sync point, mean). On a shared virtual disk the latency of a sync
//! swings by an order of magnitude from second to second: compare the rows of one round.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use mnemo_bench::write_csv;
use mnemo_pmem::limits::DATA_OFFSET;
use mnemo_pmem::{CreateOptions, Pool, SyncPolicy, WalPolicy};

const SMALL: u64 = 256 << 20;
const LARGE: u64 = 16 << 30;
const LARGE_FALLBACK: u64 = 4 << 30;
const WRITE: usize = 100;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Figures {
    median_ns: f64,
    p99_ns: f64,
    mean_ns: f64,
}

/// Create a pool of `size` in `dir` with the policy, run `ops` sync points, close and
/// remove it.
fn measure(dir: &Path, size: u64, wal: bool, ops: u64, seed: u64) -> Result<Figures, String> {
    let path = dir.join(format!("disk-{size}-{wal}.pool"));
    let mut options = CreateOptions::new(size, "disk-bench");
    // Both policies given explicitly: a disk pool created without one gets the write-ahead
    // policy by default now.
    let policy: Arc<dyn SyncPolicy> = if wal {
        Arc::new(
            WalPolicy::beside(&path, mnemo_pmem::wal::WAL_BYTES_DEFAULT)
                .map_err(|e| e.to_string())?,
        )
    } else {
        Arc::new(mnemo_pmem::LocalPolicy)
    };
    options.policy = Some(policy);
    let pool = Pool::create(&path, &options).map_err(|e| e.to_string())?;
    let mut x = seed | 1;
    let mut next = || {
        // xorshift64: offsets spread over the whole pool.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let span = size - DATA_OFFSET - WRITE as u64;
    let mut samples = Vec::with_capacity(ops as usize);
    let bytes = [0x5au8; WRITE];
    for _ in 0..ops {
        let at = DATA_OFFSET + (next() % span) / 8 * 8;
        let started = Instant::now();
        pool.write(at, &bytes).map_err(|e| e.to_string())?;
        pool.msync(at, WRITE as u64).map_err(|e| e.to_string())?;
        samples.push(started.elapsed().as_nanos() as f64);
    }
    pool.close().map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    let mut wal_path = path.into_os_string();
    wal_path.push(".wal");
    let _ = std::fs::remove_file(PathBuf::from(wal_path));
    let mean_ns = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    Ok(Figures {
        median_ns: at(0.5),
        p99_ns: at(0.99),
        mean_ns,
    })
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("disk.rs"));
    let dir = std::env::var("DISK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/disk-bench"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("disk: {}: {e}", dir.display());
        std::process::exit(1);
    }
    let available = rustix::fs::statvfs(&dir)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .unwrap_or(0);
    // The pools are sparse: a run writes a few thousand of their pages. Room for the whole
    // large pool and 4 GiB more is ample.
    let large = if available > LARGE + (4 << 30) {
        LARGE
    } else {
        LARGE_FALLBACK
    };
    let ops = env_u64("DISK_BENCH_OPS", 400);
    let rounds = env_u64("DISK_BENCH_ROUNDS", 3);
    let mut rows = Vec::new();
    let commit = mnemo_bench::head_commit();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    for round in 1..=rounds {
        for (size, wal) in [(SMALL, false), (large, false), (SMALL, true), (large, true)] {
            let policy = if wal { "write-ahead" } else { "local" };
            match measure(&dir, size, wal, ops, round * 7919 + size) {
                Ok(f) => {
                    println!(
                        "round {round} {policy:>11} pool {:>5} MiB: median {:>9.0} ns, p99 {:>10.0} ns, mean {:>9.0} ns per sync point",
                        size >> 20,
                        f.median_ns,
                        f.p99_ns,
                        f.mean_ns
                    );
                    rows.push(format!(
                        "{round},{policy},{size},{ops},{:.0},{:.0},{:.0},{commit},{command}",
                        f.median_ns, f.p99_ns, f.mean_ns
                    ));
                }
                Err(e) => {
                    eprintln!("disk: {policy} {size}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
    match write_csv(
        "disk-sync.csv",
        "round,policy,pool_bytes,ops,median_ns,p99_ns,mean_ns,commit,command",
        &rows,
    ) {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => eprintln!("disk: writing the results: {e}"),
    }
}
