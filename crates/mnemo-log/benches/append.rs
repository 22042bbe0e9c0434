//! Append throughput of `mnemo_log::Log` on a pool on /dev/shm (a benchmark, not a test).
//!
//! `scripts/bench-log.sh` runs it beside libpmemlog in the same run and writes
//! `bench/results/log-append.csv`. Alone: `cargo bench -p mnemo-log --bench append`.
//!
//! Environment: `LOG_BENCH_N` appends per run (default 2,000,000), `LOG_BENCH_RUNS` runs
//! (default 5; the median is reported), `LOG_BENCH_LEN` payload bytes (default 64),
//! `LOG_BENCH_DIR` directory of the pool (default /dev/shm), `LOG_BENCH_TAG` a suffix for
//! the variant names (the script runs once more with `MNEMO_MOVNT_THRESHOLD=64`).
//!
//! Variants: `mnemo-log` (appends are sync points: stores, `Pool::gmsync`), `mnemo-log-local`
//! (`set_sync_points(false)`: `Pool::copy_nodrain` + `Pool::drain`), `mnemo-log-batch8`
//! (`append_many` of 8 entries, sync points; figures per entry).
//!
//! Output: one CSV line per variant,
//! `impl,payload_bytes,appends,ns_per_append,appends_per_s,fences_per_append,lines_per_append,cpu_ns_per_append`
//! (`ns`: wall clock; `cpu_ns`: this thread's CPU time, which a fence's wait is part of but
//! other jobs on a shared machine are not).
//! Fences and lines are counted by the log itself ([`mnemo_log::Stats`]); wrap-around is
//! done with `reset` (one header write) inside the timed loop, as libpmemlog's `rewind` is.

use std::time::Instant;

use mnemo_log::{Error, Log};
use mnemo_pmem::{CreateOptions, Pool};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn thread_cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

struct Run {
    ns_per_entry: f64,
    cpu_ns_per_entry: f64,
    fences_per_entry: f64,
    lines_per_entry: f64,
}

/// Append `n` entries of `data`, `batch` per call; wrap with `reset` when full.
fn run(log: &mut Log<&Pool>, data: &[u8], n: u64, batch: usize) -> Run {
    let refs: Vec<&[u8]> = vec![data; batch];
    let before = log.stats();
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let mut done = 0u64;
    while done < n {
        let result = if batch == 1 {
            log.append(data).map(|_| ())
        } else {
            log.append_many(&refs).map(|_| ())
        };
        match result {
            Ok(()) => done += batch as u64,
            Err(Error::Full { .. }) => log.reset().expect("reset"),
            Err(e) => panic!("append: {e}"),
        }
    }
    let ns = start.elapsed().as_nanos() as f64;
    let cpu_ns = thread_cpu_ns() - cpu_start;
    let after = log.stats();
    Run {
        ns_per_entry: ns / done as f64,
        cpu_ns_per_entry: cpu_ns / done as f64,
        fences_per_entry: (after.fences - before.fences) as f64 / done as f64,
        lines_per_entry: (after.lines_flushed - before.lines_flushed) as f64 / done as f64,
    }
}

fn main() {
    let n = env_or("LOG_BENCH_N", 2_000_000);
    let runs = env_or("LOG_BENCH_RUNS", 5).max(1);
    let len = env_or("LOG_BENCH_LEN", 64) as usize;
    let dir = std::env::var("LOG_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into());
    let path = std::path::Path::new(&dir).join(format!("mnemo-log-bench.{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &CreateOptions::new(64 << 20, "log-bench")).expect("pool");
    let info = pool.media_info();
    eprintln!(
        "# pool {} on {:?}, durability {:?}, flush {}",
        path.display(),
        info.kind,
        info.durability,
        info.flush.name()
    );
    let start = pool.data_offset();
    let mut log = Log::create(&pool, start..start + (32 << 20)).expect("log");
    let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
    // Warm up: one pass over the whole ring, so every page and line has been touched.
    let warm = log.capacity() / Log::<&Pool>::record_size(len) + 1;
    run(&mut log, &data, warm, 1);
    let tag = std::env::var("LOG_BENCH_TAG").unwrap_or_default();
    for (name, batch, sync_points) in [
        ("mnemo-log", 1usize, true),
        ("mnemo-log-local", 1, false),
        ("mnemo-log-batch8", 8, true),
    ] {
        let name = format!("{name}{tag}");
        log.set_sync_points(sync_points);
        let mut results: Vec<Run> = (0..runs).map(|_| run(&mut log, &data, n, batch)).collect();
        results.sort_by(|a, b| a.ns_per_entry.total_cmp(&b.ns_per_entry));
        let median = &results[results.len() / 2];
        let mut cpu: Vec<f64> = results.iter().map(|r| r.cpu_ns_per_entry).collect();
        cpu.sort_by(f64::total_cmp);
        println!(
            "{name},{len},{n},{:.1},{:.0},{:.3},{:.3},{:.1}",
            median.ns_per_entry,
            1e9 / median.ns_per_entry,
            median.fences_per_entry,
            median.lines_per_entry,
            cpu[cpu.len() / 2]
        );
    }
    drop(pool);
    let _ = std::fs::remove_file(&path);
}
