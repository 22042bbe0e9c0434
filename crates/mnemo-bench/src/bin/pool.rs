//! Issue 2's benchmark: persist cost per flush instruction and with non-temporal copies,
//! against a bare store + clwb + sfence measured in the same run; and `mnemo pool create`
//! against PMDK's `pmempool create obj` on the same medium (/dev/shm).
//!
//! Run: `scripts/bench-pool.sh` (builds release binaries, installs pmdk-tools if missing).
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use mnemo_bench::{median, plot, sample, write_csv, write_json};
use mnemo_pmem::cpu::{self, FlushKind};
use mnemo_pmem::{ByteRange, CreateOptions, Pool, SyncKind, SyncPoint};

const SIZES: [usize; 3] = [64, 4096, 1 << 20];

fn ops_for(size: usize) -> u64 {
    match size {
        64 => 200_000,
        4096 => 20_000,
        _ => 200,
    }
}

struct Row {
    method: String,
    size: usize,
    ns: f64,
}

/// Bare baseline: 64 B of stores, clwb of the line, sfence, written out inline here.
fn bare_clwb_64(buf: *mut u8, ops: u64) {
    for i in 0..ops {
        // SAFETY: `buf` points to 64 writable, 64-byte-aligned bytes of the pool mapping; the
        // CPU supports clwb (checked by the caller).
        unsafe {
            let words = buf as *mut u64;
            for w in 0..8 {
                std::ptr::write_volatile(words.add(w), i);
            }
            std::arch::asm!("clwb [{0}]", in(reg) buf, options(nostack, preserves_flags));
            std::arch::x86_64::_mm_sfence();
        }
    }
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("pool.rs"));
    let features = cpu::detect();
    let dir = tempfile::Builder::new()
        .prefix("mnemo-bench")
        .tempdir_in("/dev/shm")
        .expect("tempdir in /dev/shm");
    let pool = Pool::create(
        &dir.path().join("bench.pool"),
        &CreateOptions::new(64 << 20, "bench"),
    )
    .expect("pool");
    let off = 1 << 20; // 1 MiB into the pool, 64-byte aligned
    let base = pool.ptr(off, 2 << 20).expect("range").as_ptr();
    let src: Vec<u8> = (0..(1 << 20)).map(|i| i as u8).collect();
    let mut rows: Vec<Row> = Vec::new();
    let batches = 15;

    if features.clwb {
        // The target compares these two, so they run interleaved batch by batch: a noisy
        // neighbour then slows both alike.
        let ops = ops_for(64);
        let (mut bare, mut ours) = (Vec::new(), Vec::new());
        bare_clwb_64(base, ops);
        for _ in 0..41 {
            bare.extend(sample(1, ops, || bare_clwb_64(base, ops)));
            ours.extend(sample(1, ops, || {
                for i in 0..ops {
                    // SAFETY: as in `bare_clwb_64`: 64 writable bytes of the mapping.
                    unsafe {
                        let words = base as *mut u64;
                        for w in 0..8 {
                            std::ptr::write_volatile(words.add(w), i);
                        }
                    }
                    pool.msync(off, 64).expect("msync");
                }
            }));
        }
        bare.sort_by(f64::total_cmp);
        ours.sort_by(f64::total_cmp);
        rows.push(Row {
            method: "bare store+clwb+sfence".into(),
            size: 64,
            ns: median(&bare),
        });
        rows.push(Row {
            method: "same stores + mnemo Pool::msync".into(),
            size: 64,
            ns: median(&ours),
        });
    }
    let kinds = [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush];
    for kind in kinds {
        let ok = match kind {
            FlushKind::Clwb => features.clwb,
            FlushKind::Clflushopt => features.clflushopt,
            _ => features.clflush,
        };
        if !ok {
            continue;
        }
        for size in SIZES {
            let ops = ops_for(size);
            let s = sample(batches, ops, || {
                for _ in 0..ops {
                    // SAFETY: base..base+size is inside the mapping; src is a distinct buffer.
                    unsafe {
                        std::ptr::copy_nonoverlapping(src.as_ptr(), base, size);
                        cpu::flush_with(kind, base, size);
                    }
                    cpu::fence();
                }
            });
            rows.push(Row {
                method: format!("store+{}+sfence", kind.name()),
                size,
                ns: median(&s),
            });
        }
    }
    for size in SIZES {
        let ops = ops_for(size);
        let s = sample(batches, ops, || {
            for _ in 0..ops {
                // SAFETY: as above.
                unsafe { cpu::copy_nt(base, src.as_ptr(), size, cpu::choice().flush) };
                cpu::fence();
            }
        });
        rows.push(Row {
            method: "non-temporal copy+sfence".into(),
            size,
            ns: median(&s),
        });
    }
    // mnemo's own paths: a write then Pool::msync (range check, the policy, the chosen
    // instruction), and Pool::copy_nodrain + a staged sync point (NT from 256 B).
    for size in SIZES {
        let ops = ops_for(size);
        let s = sample(batches, ops, || {
            for _ in 0..ops {
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), base, size) };
                pool.msync(off, size as u64).expect("msync");
            }
        });
        rows.push(Row {
            method: format!("mnemo Pool::msync ({})", cpu::choice().flush.name()),
            size,
            ns: median(&s),
        });
        let s = sample(batches, ops, || {
            for _ in 0..ops {
                pool.copy_nodrain(off, &src[..size]).expect("copy");
                pool.sync(&SyncPoint::staged(
                    SyncKind::Data,
                    &[ByteRange::new(off, size as u64)],
                ))
                .expect("sync");
            }
        });
        rows.push(Row {
            method: "mnemo Pool::copy_nodrain+sync".into(),
            size,
            ns: median(&s),
        });
    }
    drop(pool);

    println!("persist cost, median ns per operation (15 batches), pool on /dev/shm");
    println!(
        "{:<36} {:>10} {:>10} {:>12}",
        "method", "64 B", "4 KiB", "1 MiB"
    );
    let mut methods: Vec<String> = Vec::new();
    for r in &rows {
        if !methods.contains(&r.method) {
            methods.push(r.method.clone());
        }
    }
    let cell = |m: &str, size: usize| {
        rows.iter()
            .find(|r| r.method == m && r.size == size)
            .map(|r| r.ns)
    };
    for m in &methods {
        let f = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into());
        println!(
            "{:<36} {:>10} {:>10} {:>12}",
            m,
            f(cell(m, 64)),
            f(cell(m, 4096)),
            f(cell(m, 1 << 20))
        );
    }
    let bare = cell("bare store+clwb+sfence", 64);
    let mnemo64 = cell("same stores + mnemo Pool::msync", 64);
    let persist_ratio = match (bare, mnemo64) {
        (Some(b), Some(m)) => {
            println!(
                "\nmnemo persist of one 64 B line / bare store+clwb+sfence = {:.3} (target <= 1.2)",
                m / b
            );
            Some(m / b)
        }
        _ => None,
    };

    // Pool create: 64 MiB on /dev/shm, mnemo vs pmempool, both as processes and in-process.
    let create = bench_create(dir.path());
    let csv: Vec<String> = rows
        .iter()
        .map(|r| format!("{},{},{:.2}", r.method, r.size, r.ns))
        .collect();
    write_csv("pool-persist.csv", "method,size_bytes,ns_per_op", &csv).expect("csv");
    let json = serde_json::json!({
        "machine": mnemo_bench::machine(),
        "flush_in_use": cpu::choice().flush.name(),
        "persist": rows.iter().map(|r| serde_json::json!({"method": r.method, "size": r.size, "ns": r.ns})).collect::<Vec<_>>(),
        "persist_64b_ratio_vs_bare": persist_ratio,
        "create": create,
        "command": "scripts/bench-pool.sh",
    });
    let path = write_json("pool.json", &json).expect("json");
    let plot_rows: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.size == 64)
        .map(|r| (r.method.clone(), r.ns))
        .collect();
    let svg = mnemo_bench::bench_dir().join("plots/pool-persist-64b.svg");
    if let Err(e) = plot::bars(
        &svg,
        "Persist one 64 B line (ns, lower is better)",
        "ns per persist",
        &plot_rows,
    ) {
        eprintln!("plot: {e}");
    }
    let series: Vec<plot::Series> = methods
        .iter()
        .filter(|m| !m.starts_with("bare"))
        .map(|m| plot::Series {
            name: m.clone(),
            points: SIZES
                .iter()
                .filter_map(|&s| cell(m, s).map(|v| (s as f64, v)))
                .collect(),
        })
        .collect();
    let svg2 = mnemo_bench::bench_dir().join("plots/pool-persist-sizes.svg");
    if let Err(e) = plot::loglog(
        &svg2,
        "Persist cost by size",
        "bytes persisted",
        "ns per persist",
        &series,
    ) {
        eprintln!("plot: {e}");
    }
    println!("\nresults: {}", path.display());
}

fn mnemo_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let candidate = exe.parent()?.join("mnemo");
    candidate.exists().then_some(candidate)
}

fn time_process(mut cmd: Command) -> Option<f64> {
    let started = Instant::now();
    let status = cmd.status().ok()?;
    status
        .success()
        .then(|| started.elapsed().as_secs_f64() * 1e3)
}

fn bench_create(dir: &Path) -> serde_json::Value {
    let reps = 15;
    let mut lib_ms = Vec::new();
    let mut cli_ms = Vec::new();
    let mut pmdk_ms = Vec::new();
    let mnemo = mnemo_binary();
    for i in 0..reps {
        let p = dir.join(format!("lib{i}.pool"));
        let started = Instant::now();
        Pool::create(&p, &CreateOptions::new(64 << 20, "bench"))
            .expect("create")
            .close()
            .expect("close");
        lib_ms.push(started.elapsed().as_secs_f64() * 1e3);
        let _ = std::fs::remove_file(&p);
        if let Some(bin) = &mnemo {
            let p = dir.join(format!("cli{i}.pool"));
            let mut cmd = Command::new(bin);
            cmd.args(["pool", "create"])
                .arg(&p)
                .args(["--size", "64M"])
                .stdout(std::process::Stdio::null());
            if let Some(ms) = time_process(cmd) {
                cli_ms.push(ms);
            }
            let _ = std::fs::remove_file(&p);
        }
        let p = dir.join(format!("pmdk{i}.pool"));
        let mut cmd = Command::new("pmempool");
        cmd.args(["create", "obj", "--size", "64M"])
            .arg(&p)
            .env("PMEM_IS_PMEM_FORCE", "1");
        if let Some(ms) = time_process(cmd) {
            pmdk_ms.push(ms);
        }
        let _ = std::fs::remove_file(&p);
    }
    for v in [&mut lib_ms, &mut cli_ms, &mut pmdk_ms] {
        v.sort_by(f64::total_cmp);
    }
    let (lib, cli, pmdk) = (median(&lib_ms), median(&cli_ms), median(&pmdk_ms));
    println!("\npool create, 64 MiB on /dev/shm, median of {reps} (ms):");
    println!("  mnemo library Pool::create   {lib:.3}");
    if !cli_ms.is_empty() {
        println!("  mnemo pool create (process) {cli:.3}");
    }
    if pmdk_ms.is_empty() {
        println!("  pmempool create obj          not run (install pmdk-tools)");
    } else {
        println!("  pmempool create obj          {pmdk:.3}");
        println!(
            "  speed-up, process vs process: {:.1}x (target >= 5x)",
            pmdk / cli
        );
        println!("  speed-up, library vs pmempool: {:.1}x", pmdk / lib);
    }
    serde_json::json!({
        "size_bytes": 64u64 << 20, "medium": "/dev/shm", "reps": reps,
        "mnemo_library_ms": lib, "mnemo_cli_ms": cli, "pmempool_ms": pmdk,
        "speedup_process": pmdk / cli, "speedup_library": pmdk / lib,
        "pmempool_env": "PMEM_IS_PMEM_FORCE=1",
    })
}
