//! Issue 4's benchmark: append throughput of `mnemo_log::Log` on a pool on /dev/shm, run by
//! `scripts/bench-log.sh` beside libpmemlog (`bench/pmemlog/append.c`) in the same run; the
//! script writes `bench/results/log-append.csv` and the plot.
//!
//! A production build: mnemo-bench does not depend on mnemo-testkit, so the `mutants`
//! feature (whose checks a `cargo bench -p mnemo-log` build would carry) is off.
//! Alone: `cargo run --release -p mnemo-bench --bin log`.
//!
//! Environment: `LOG_BENCH_N` appends per run (default 2,000,000), `LOG_BENCH_RUNS` runs
//! (default 5; the median is reported), `LOG_BENCH_LEN` payload bytes (default 64),
//! `LOG_BENCH_DIR` directory of the pool (default /dev/shm), `LOG_BENCH_TAG` a suffix for
//! the variant names, `LOG_BENCH_FLOORS=0` to skip the floors.
//!
//! Variants: `mnemo-log` (appends are sync points: `Pool::stream_nodrain` + `Pool::sync`
//! of the staged ranges), `mnemo-log-batch8` (`append_many` of 8 entries; figures per
//! entry). (A `mnemo-log-local` variant, appends fenced outside the sync-point pipeline, went
//! with that mode: every durable change is a sync point.) Floors, the medium's cost with no software around it, stores written inline here
//! over the same ring of lines: `floor-clwb1` (64 B stored to the next line, clwb, sfence:
//! one fence of libpmemlog), `floor-clwb2` (that, then 8 B stored to a fixed line, clwb,
//! sfence: libpmemlog's two fences), `floor-nt` (the bytes of one mnemo record, of the
//! record size for the payload, with non-temporal stores at the next position, sfence).
//!
//! Output: one CSV line per variant,
//! `impl,payload_bytes,appends,ns_per_append,appends_per_s,fences_per_append,lines_per_append,cpu_ns_per_append`
//! (`ns`: wall clock; `cpu_ns`: this thread's CPU time, which a fence's wait is part of but
//! other jobs on a shared machine are not).
//! Fences and lines are counted by the log itself ([`mnemo_log::Stats`]); wrap-around is
//! done with `reset` (one header write) inside the timed loop, as libpmemlog's `rewind` is.
#![allow(unsafe_code)]

use std::time::Instant;

use mnemo_log::{Error, Log};
use mnemo_pmem::{cpu, CreateOptions, Pool};

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

/// The floors: `n` rounds of bare stores and one or two fences over a ring of `ring` bytes
/// at `base` (64-byte aligned, mapped, writable), `record` bytes per round for `floor-nt`.
fn floor(kind: &str, base: *mut u8, ring: usize, record: usize, n: u64) -> Run {
    let flush = cpu::choice().flush;
    let src = vec![0x5au8; record.max(64)];
    let header = base; // the fixed line of floor-clwb2 (the ring starts one line later)
    let start = Instant::now();
    let cpu_start = thread_cpu_ns();
    let mut at = 64usize;
    let step = if kind == "floor-nt" {
        record.next_multiple_of(8)
    } else {
        64
    };
    for i in 0..n {
        if at + step > ring {
            at = 64;
        }
        // SAFETY: `at..at + step` and the first line lie inside the caller's ring; the flush
        // kind is the process's chosen (supported) one.
        unsafe {
            let dst = base.add(at);
            match kind {
                "floor-nt" => cpu::copy_nt(dst, src.as_ptr(), record, flush),
                _ => {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, 64);
                    cpu::flush_with(flush, dst, 64);
                }
            }
            cpu::fence();
            if kind == "floor-clwb2" {
                (header as *mut u64).write_volatile(i);
                cpu::flush_with(flush, header, 8);
                cpu::fence();
            }
        }
        at += step;
    }
    let ns = start.elapsed().as_nanos() as f64;
    let cpu_ns = thread_cpu_ns() - cpu_start;
    let fences = if kind == "floor-clwb2" { 2.0 } else { 1.0 };
    let lines = match kind {
        "floor-clwb1" => 1.0,
        "floor-clwb2" => 2.0,
        _ => ((record as f64) / 64.0).ceil(),
    };
    Run {
        ns_per_entry: ns / n as f64,
        cpu_ns_per_entry: cpu_ns / n as f64,
        fences_per_entry: fences,
        lines_per_entry: lines,
    }
}

fn report(name: &str, len: usize, n: u64, mut results: Vec<Run>) {
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
        mnemo_bench::median(&cpu)
    );
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("log.rs"));
    let n = env_or("LOG_BENCH_N", 2_000_000);
    let runs = env_or("LOG_BENCH_RUNS", 5).max(1);
    let len = env_or("LOG_BENCH_LEN", 64) as usize;
    let floors = env_or("LOG_BENCH_FLOORS", 1) != 0;
    let dir = std::env::var("LOG_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into());
    let path = std::path::Path::new(&dir).join(format!("mnemo-log-bench.{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &CreateOptions::new(96 << 20, "log-bench")).expect("pool");
    let info = pool.media_info();
    eprintln!(
        "# pool {} on {:?}, durability {:?}, flush {}",
        path.display(),
        info.kind,
        info.durability,
        info.flush.name()
    );
    let start = pool.data_offset();
    let ring = 32u64 << 20;
    let mut log = Log::create(&pool, start..start + ring).expect("log");
    let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
    // Warm up: one pass over the whole ring, so every page and line has been touched.
    let warm = log.capacity() / Log::<&Pool>::record_size(len) + 1;
    run(&mut log, &data, warm, 1);
    let tag = std::env::var("LOG_BENCH_TAG").unwrap_or_default();
    for (name, batch) in [("mnemo-log", 1usize), ("mnemo-log-batch8", 8)] {
        let results: Vec<Run> = (0..runs).map(|_| run(&mut log, &data, n, batch)).collect();
        report(&format!("{name}{tag}"), len, n, results);
    }
    if floors && info.durability == mnemo_pmem::Durability::CpuFlush {
        // A second ring of the same size after the log's, touched once before timing.
        let offset = (start + ring).next_multiple_of(64);
        let base = pool.ptr(offset, ring).expect("floor ring").as_ptr();
        let record = Log::<&Pool>::record_size(len) as usize;
        for kind in ["floor-clwb1", "floor-clwb2", "floor-nt"] {
            floor(kind, base, ring as usize, record, ring / 64);
            let results: Vec<Run> = (0..runs)
                .map(|_| floor(kind, base, ring as usize, record, n))
                .collect();
            report(&format!("{kind}{tag}"), len, n, results);
        }
    }
    drop(log);
    drop(pool);
    let _ = std::fs::remove_file(&path);
}
