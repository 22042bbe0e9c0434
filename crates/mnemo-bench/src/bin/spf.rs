//! Issue 5's benchmark: Selective Persistence Flushing and the NVMM emulator.
//!
//! 1. The study's Figure 5: latency of a sync point after a 1-byte modification, against the
//!    size of the synced region (64 B .. 1 GiB), for: flushing every line, SPF page tracking
//!    (userfaultfd + PAGEMAP_SCAN), SPF bitmap (stores through the API), and kernel msync of
//!    a page-cache file on disk. Each op is the store plus the sync point.
//! 2. The same (flush every line, SPF pages) under each emulator preset.
//! 3. Emulation accuracy: measured persist time against the model's, per preset and size.
//! 4. Break-even: dirty share at which tracking stops paying, per tier.
//! 5. Cost of the hooks when off: sync point of a plain pool vs bare flush+fence vs the
//!    emulator with zero delays.
//!
//! Run: `cargo run --release -p mnemo-bench --bin spf` (about 5 minutes, 4 GiB of /dev/shm
//! at most at once). `SPF_BENCH_MAX=64M` stops the sweep earlier.
#![allow(unsafe_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use mnemo_bench::plot::{loglog, Series};
use mnemo_bench::{bench_dir, machine, write_csv, write_json};
use mnemo_pmem::emu::{EmuConfig, EmulatedMedia, PRESETS};
use mnemo_pmem::track::Tracking;
use mnemo_pmem::{cpu, CreateOptions, FileMedia, Pool};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const PAGE: u64 = 4096;

fn sizes(max: u64) -> Vec<u64> {
    let mut v = vec![64, 256, KIB];
    let mut s = 4 * KIB;
    while s <= max {
        v.push(s);
        s *= 4;
    }
    v.retain(|&s| s <= max);
    v
}

fn max_size() -> u64 {
    std::env::var("SPF_BENCH_MAX")
        .ok()
        .and_then(|v| parse_size(&v))
        .unwrap_or(GIB)
}

fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mul) = match v.chars().last()? {
        'K' | 'k' => (&v[..v.len() - 1], KIB),
        'M' | 'm' => (&v[..v.len() - 1], MIB),
        'G' | 'g' => (&v[..v.len() - 1], GIB),
        _ => (v, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mul)
}

/// A pool whose data region (starting at its data offset) holds `region` bytes.
struct Bench {
    pool: Pool,
    _dir: tempfile::TempDir,
}

fn pool_size(region: u64) -> u64 {
    (region + 8192).max(64 * KIB)
}

/// A pool file on /dev/shm (or on disk with `dir`), optionally emulated.
fn make_pool(region: u64, dir: Option<&Path>, emulate: Option<&str>) -> Bench {
    let tmp = match dir {
        Some(d) => tempfile::tempdir_in(d).expect("temp dir"),
        None => tempfile::tempdir_in("/dev/shm").expect("/dev/shm"),
    };
    let path = tmp.path().join("pool");
    let size = pool_size(region);
    let options = CreateOptions::new(size, "spf-bench");
    let pool = match emulate {
        None => Pool::create(&path, &options).expect("create pool"),
        Some(preset) => {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .expect("pool file");
            file.set_len(size).expect("size");
            let media = FileMedia::map(&path, file, size, size).expect("map");
            let config = EmuConfig::preset(preset).expect("preset");
            Pool::create_on(Box::new(EmulatedMedia::new(media, config)), &path, &options)
                .expect("create emulated pool")
        }
    };
    Bench { pool, _dir: tmp }
}

/// Populate the data region (so no method pays first-touch faults) and persist it.
fn prefill(pool: &Pool) {
    let data = pool.data_offset();
    let len = pool.size() - data;
    let p = pool.ptr(data, len).expect("ptr");
    // SAFETY: `data..data+len` is the pool's live mapping; nothing else uses it now.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 0, len as usize) };
    pool.msync(data, len).expect("msync");
}

fn store_byte(pool: &Pool, offset: u64, value: u8) {
    let p = pool.ptr(offset, 1).expect("ptr");
    // SAFETY: one byte inside the live mapping.
    unsafe { std::ptr::write_volatile(p.as_ptr(), value) };
}

fn mix(i: u64) -> u64 {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 29)
}

/// Median ns of `op(i)` over at least `min_ops` runs and about `budget`, after a warm-up.
fn measure(min_ops: usize, budget: Duration, mut op: impl FnMut(u64)) -> f64 {
    op(u64::MAX);
    let started = Instant::now();
    let mut v = Vec::new();
    let mut i = 0;
    while v.len() < min_ops || (started.elapsed() < budget && v.len() < 2000) {
        let t = Instant::now();
        op(i);
        v.push(t.elapsed().as_nanos() as f64);
        i += 1;
    }
    v.sort_by(f64::total_cmp);
    mnemo_bench::median(&v)
}

/// As [`measure`], but `op` returns the time of its own part worth timing.
fn measure_part(min_ops: usize, budget: Duration, mut op: impl FnMut(u64) -> f64) -> f64 {
    op(u64::MAX);
    let started = Instant::now();
    let mut v = Vec::new();
    let mut i = 0;
    while v.len() < min_ops || (started.elapsed() < budget && v.len() < 2000) {
        v.push(op(i));
        i += 1;
    }
    v.sort_by(f64::total_cmp);
    mnemo_bench::median(&v)
}

fn timed_msync(pool: &Pool, offset: u64, len: u64) -> f64 {
    let t = Instant::now();
    pool.msync(offset, len).expect("msync");
    t.elapsed().as_nanos() as f64
}

#[derive(Clone, Copy, PartialEq)]
enum Method {
    FlushAll,
    SpfPages,
    SpfMprotect,
    SpfChunks,
    SpfBitmap,
    KernelMsync,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::FlushAll => "flush every line",
            Method::SpfPages => "SPF pages (uffd)",
            Method::SpfMprotect => "SPF pages (mprotect fallback)",
            Method::SpfChunks => "SPF pages (uffd + 256 KiB chunk hints)",
            Method::SpfBitmap => "SPF bitmap",
            Method::KernelMsync => "kernel msync (ext4)",
        }
    }
}

/// One-byte modification + sync point of `region` bytes, per op.
fn one_byte_sync(pool: &Pool, method: Method, region: u64, i: u64) {
    let data = pool.data_offset();
    let at = data + mix(i) % region;
    if method == Method::SpfBitmap {
        pool.write(at, &[i as u8]).expect("write");
    } else {
        store_byte(pool, at, i as u8);
    }
    pool.msync(data, region).expect("msync");
}

fn budget_for(region: u64) -> (usize, Duration) {
    if region >= 256 * MIB {
        (3, Duration::from_millis(300))
    } else {
        (5, Duration::from_millis(120))
    }
}

/// Figure 5 for one pool and method over all sizes.
fn sweep(pool: &Pool, method: Method, sizes: &[u64]) -> Vec<(u64, f64)> {
    sizes
        .iter()
        .map(|&s| {
            let (n, b) = budget_for(s);
            let ns = measure(n, b, |i| one_byte_sync(pool, method, s, i));
            (s, ns)
        })
        .collect()
}

fn fig5(sizes: &[u64], rows: &mut Vec<String>, summary: &mut serde_json::Value) -> Vec<Series> {
    let max = *sizes.last().unwrap_or(&GIB);
    let mut series = Vec::new();
    // Flush every line and the 1 GiB target share one pool each.
    let flush_all = make_pool(max, None, None);
    prefill(&flush_all.pool);
    let spf_pages = make_pool(max, None, None);
    prefill(&spf_pages.pool);
    let info = spf_pages
        .pool
        .enable_tracking(Tracking::Raw)
        .expect("tracking");
    eprintln!("raw tracking: {} ({})", info.raw.name(), info.reason);
    summary["raw_tracking"] = serde_json::json!(info);
    for (method, pool) in [
        (Method::FlushAll, &flush_all.pool),
        (Method::SpfPages, &spf_pages.pool),
    ] {
        let points = sweep(pool, method, sizes);
        push(rows, "native", method, &points, &mut series);
    }
    // Target: the largest region with 0.1 % of its pages dirty.
    let pages = max / PAGE;
    let dirty = (pages / 1000).max(1);
    let epoch = |pool: &Pool, i: u64| {
        let data = pool.data_offset();
        for k in 0..dirty {
            let page = mix(i * 7919 + k) % pages;
            store_byte(pool, data + page * PAGE + 8, k as u8);
        }
        pool.msync(data, max).expect("msync");
    };
    let full = measure(5, Duration::from_millis(500), |i| epoch(&flush_all.pool, i));
    let spf = measure(5, Duration::from_millis(500), |i| epoch(&spf_pages.pool, i));
    eprintln!(
        "target: {} MiB, {dirty} pages dirty: flush every line {:.2} ms, SPF {:.3} ms (x{:.1})",
        max / MIB,
        full / 1e6,
        spf / 1e6,
        full / spf
    );
    summary["target_0p1_percent"] = serde_json::json!({
        "region_bytes": max, "dirty_pages": dirty,
        "flush_all_ns": full, "spf_pages_ns": spf, "speedup": full / spf,
    });
    drop(spf_pages);
    // Userfaultfd tracking with chunk hints (mprotect): flat in the region's size, but
    // a SIGSEGV per chunk first stored to.
    let chunked = make_pool(max, None, None);
    prefill(&chunked.pool);
    let info = chunked
        .pool
        .enable_tracking_with(mnemo_pmem::track::TrackerOptions {
            mode: Tracking::Raw,
            fallback: None,
            chunk_hints: true,
        })
        .expect("tracking");
    eprintln!("chunk hints: {}", info.reason);
    let points = sweep(&chunked.pool, Method::SpfChunks, sizes);
    push(rows, "native", Method::SpfChunks, &points, &mut series);
    let chunk_spf = measure(5, Duration::from_millis(500), |i| epoch(&chunked.pool, i));
    let full = measure(5, Duration::from_millis(500), |i| epoch(&flush_all.pool, i));
    eprintln!(
        "target with chunk hints: flush every line {:.2} ms, SPF {:.3} ms (x{:.1})",
        full / 1e6,
        chunk_spf / 1e6,
        full / chunk_spf
    );
    summary["target_0p1_percent_chunk_hints"] = serde_json::json!({
        "flush_all_ns": full, "spf_chunks_ns": chunk_spf, "speedup": full / chunk_spf,
    });
    drop(chunked);
    drop(flush_all);
    let bitmap = make_pool(max, None, None);
    prefill(&bitmap.pool);
    bitmap
        .pool
        .enable_tracking(Tracking::Api)
        .expect("tracking");
    let points = sweep(&bitmap.pool, Method::SpfBitmap, sizes);
    push(rows, "native", Method::SpfBitmap, &points, &mut series);
    drop(bitmap);
    // The mprotect fallback, on pools up to its size limit.
    let small: Vec<u64> = sizes
        .iter()
        .copied()
        .filter(|&s| s <= mnemo_pmem::limits::SPF_MPROTECT_BYTES_MAX - 8192)
        .collect();
    let mp = make_pool(*small.last().unwrap_or(&KIB), None, None);
    prefill(&mp.pool);
    mp.pool
        .enable_tracking_with(mnemo_pmem::track::TrackerOptions {
            mode: Tracking::Raw,
            fallback: Some(mnemo_pmem::track::RawMethod::Mprotect),
            chunk_hints: false,
        })
        .expect("tracking");
    let points = sweep(&mp.pool, Method::SpfMprotect, &small);
    push(rows, "native", Method::SpfMprotect, &points, &mut series);
    drop(mp);
    let disk = make_pool(max, Some(Path::new("/var/tmp")), None);
    let points = sweep(&disk.pool, Method::KernelMsync, sizes);
    push(rows, "native", Method::KernelMsync, &points, &mut series);
    series
}

fn push(
    rows: &mut Vec<String>,
    preset: &str,
    method: Method,
    points: &[(u64, f64)],
    series: &mut Vec<Series>,
) {
    for &(s, ns) in points {
        rows.push(format!("{},{preset},{s},{ns:.0}", method.name()));
        eprintln!(
            "{:<22} {preset:<14} {:>12} B {:>14.0} ns",
            method.name(),
            s,
            ns
        );
    }
    series.push(Series {
        name: if preset == "native" {
            method.name().to_string()
        } else {
            format!("{preset}: {}", method.name())
        },
        points: points.iter().map(|&(s, ns)| (s as f64, ns)).collect(),
    });
}

fn presets(sizes: &[u64], rows: &mut Vec<String>) -> (Vec<Series>, Vec<Series>) {
    let max = *sizes.last().unwrap_or(&GIB);
    let (mut all, mut spf) = (Vec::new(), Vec::new());
    for preset in PRESETS {
        let b = make_pool(max, None, Some(preset));
        prefill(&b.pool);
        let points = sweep(&b.pool, Method::FlushAll, sizes);
        push(rows, preset, Method::FlushAll, &points, &mut all);
        b.pool.enable_tracking(Tracking::Raw).expect("tracking");
        let points = sweep(&b.pool, Method::SpfPages, sizes);
        push(rows, preset, Method::SpfPages, &points, &mut spf);
        if let Some(r) = b.pool.emulation() {
            eprintln!(
                "{preset}: {} fences, {} lines, {} bytes charged, {} ms modelled, {} ms delay",
                r.fences,
                r.flushed_lines,
                r.charged_bytes,
                r.modelled_ns / 1_000_000,
                r.delay_ns / 1_000_000
            );
        }
    }
    (all, spf)
}

/// Measured vs modelled persist time per preset and size.
fn accuracy(rows: &mut Vec<String>, summary: &mut serde_json::Value) -> Vec<Series> {
    let sizes = [
        64,
        256,
        KIB,
        4 * KIB,
        16 * KIB,
        64 * KIB,
        256 * KIB,
        MIB,
        4 * MIB,
    ];
    let mut series = Vec::new();
    let mut worst_at_1us: f64 = 0.0;
    let mut worst_1us_1ms: f64 = 0.0;
    let (mut within, mut counted) = (0, 0);
    let mut all_points = Vec::new();
    for preset in PRESETS.iter().filter(|p| **p != "native") {
        let b = make_pool(4 * MIB, None, Some(preset));
        prefill(&b.pool);
        let data = b.pool.data_offset();
        let mut points = Vec::new();
        for &s in &sizes {
            let mut measured = Vec::new();
            let mut modelled = Vec::new();
            let ops = if s >= MIB { 31 } else { 301 };
            for _ in 0..ops {
                let before = b.pool.emulation().expect("emulated").modelled_ns;
                let t = Instant::now();
                b.pool.msync(data, s).expect("msync");
                measured.push(t.elapsed().as_nanos() as f64);
                let after = b.pool.emulation().expect("emulated").modelled_ns;
                modelled.push((after - before) as f64);
            }
            measured.sort_by(f64::total_cmp);
            modelled.sort_by(f64::total_cmp);
            let (m, model) = (measured[ops / 2], modelled[ops / 2]);
            let err = if model > 0.0 {
                m / model - 1.0
            } else {
                f64::NAN
            };
            if model >= 1000.0 {
                worst_at_1us = worst_at_1us.max(err.abs());
                counted += 1;
                within += usize::from(err.abs() <= 0.05);
                if model <= 1e6 {
                    worst_1us_1ms = worst_1us_1ms.max(err.abs());
                }
            }
            rows.push(format!("{preset},{s},{m:.0},{model:.0},{err:.4}"));
            eprintln!(
                "accuracy {preset:<14} {s:>9} B measured {m:>11.0} ns model {model:>11.0} ns error {:+.1} %",
                err * 100.0
            );
            if model > 0.0 {
                points.push((model, m));
                all_points.push(model);
            }
        }
        series.push(Series {
            name: preset.to_string(),
            points,
        });
    }
    summary["accuracy_worst_abs_error_at_ge_1us"] = serde_json::json!(worst_at_1us);
    // Spins of several ms are preempted on a busy 2-vCPU host (4 ms ticks): reported apart.
    summary["accuracy_worst_abs_error_1us_to_1ms"] = serde_json::json!(worst_1us_1ms);
    summary["accuracy_points_ge_1us_within_5_percent"] =
        serde_json::json!(format!("{within}/{counted}"));
    all_points.sort_by(f64::total_cmp);
    if let (Some(&lo), Some(&hi)) = (all_points.first(), all_points.last()) {
        series.push(Series {
            name: "model (y = x)".into(),
            points: vec![(lo, lo), (hi, hi)],
        });
    }
    series
}

/// Break-even: epochs that dirty a share of a 64 MiB region, tracked vs flush every line.
fn break_even(rows: &mut Vec<String>, summary: &mut serde_json::Value) -> Vec<Series> {
    let region = 64 * MIB;
    let permille = [1u64, 5, 10, 20, 50, 100, 200, 500, 1000];
    // Narrowing everywhere, so the curves show where it stops paying.
    std::env::set_var("MNEMO_SPF_NARROW_ALWAYS", "1");
    let plain = make_pool(region, None, None);
    prefill(&plain.pool);
    let pages_pool = make_pool(region, None, None);
    prefill(&pages_pool.pool);
    pages_pool
        .pool
        .enable_tracking(Tracking::Raw)
        .expect("tracking");
    let bitmap_pool = make_pool(region, None, None);
    prefill(&bitmap_pool.pool);
    bitmap_pool
        .pool
        .enable_tracking(Tracking::Api)
        .expect("tracking");
    std::env::remove_var("MNEMO_SPF_NARROW_ALWAYS");
    let pages = region / PAGE;
    let lines = region / 64;
    let mut curves: Vec<Series> = [
        "epoch: flush every line (page stores)",
        "epoch: SPF pages",
        "epoch: flush every line (line stores)",
        "epoch: SPF bitmap",
        "sync only: flush every line",
        "sync only: SPF pages",
        "sync only: SPF bitmap",
    ]
    .iter()
    .map(|n| Series {
        name: n.to_string(),
        points: Vec::new(),
    })
    .collect();
    let (mut be_pages, mut be_lines, mut be_sync) = (None, None, None);
    for &pm in &permille {
        let k_pages = (pages * pm / 1000).max(1);
        let k_lines = (lines * pm / 1000).max(1);
        let page_epoch = |pool: &Pool, i: u64| {
            let data = pool.data_offset();
            let first = mix(i) % pages;
            for k in 0..k_pages {
                // A stride that visits distinct pages (odd stride, power-of-two count).
                let page = (first + k * 40_503) % pages;
                store_byte(pool, data + page * PAGE, k as u8);
            }
            timed_msync(pool, data, region)
        };
        let line_epoch = |pool: &Pool, i: u64, api: bool| {
            let data = pool.data_offset();
            let first = mix(i) % lines;
            for k in 0..k_lines {
                let line = (first + k * 40_503) % lines;
                if api {
                    pool.write(data + line * 64, &[k as u8]).expect("write");
                } else {
                    store_byte(pool, data + line * 64, k as u8);
                }
            }
            timed_msync(pool, data, region)
        };
        let budget = Duration::from_millis(300);
        let fa_p = measure(5, budget, |i| {
            page_epoch(&plain.pool, i);
        });
        let spf_p = measure(5, budget, |i| {
            page_epoch(&pages_pool.pool, i);
        });
        let fa_l = measure(5, budget, |i| {
            line_epoch(&plain.pool, i, false);
        });
        let spf_l = measure(5, budget, |i| {
            line_epoch(&bitmap_pool.pool, i, true);
        });
        let sync_fa = measure_part(5, budget, |i| line_epoch(&plain.pool, i, false));
        let sync_p = measure_part(5, budget, |i| page_epoch(&pages_pool.pool, i));
        let sync_l = measure_part(5, budget, |i| line_epoch(&bitmap_pool.pool, i, true));
        let pct = pm as f64 / 10.0;
        rows.push(format!(
            "{pct},{fa_p:.0},{spf_p:.0},{fa_l:.0},{spf_l:.0},{sync_fa:.0},{sync_p:.0},{sync_l:.0}"
        ));
        eprintln!(
            "break-even {pct:>5} %: epoch pages flush-all {fa_p:.0} SPF {spf_p:.0} | lines flush-all {fa_l:.0} bitmap {spf_l:.0} | sync only: flush-all {sync_fa:.0} pages {sync_p:.0} bitmap {sync_l:.0} ns"
        );
        for (c, v) in curves
            .iter_mut()
            .zip([fa_p, spf_p, fa_l, spf_l, sync_fa, sync_p, sync_l])
        {
            c.points.push((pct, v));
        }
        if be_pages.is_none() && spf_p >= fa_p {
            be_pages = Some(pct);
        }
        if be_lines.is_none() && spf_l >= fa_l {
            be_lines = Some(pct);
        }
        if be_sync.is_none() && sync_l >= sync_fa {
            be_sync = Some(pct);
        }
    }
    summary["break_even_percent"] = serde_json::json!({
        "spf_pages_first_share_not_faster": be_pages,
        "spf_bitmap_first_share_not_faster": be_lines,
        "bitmap_sync_only_first_share_not_faster": be_sync,
    });
    curves
}

/// The hooks' cost when off: 1-byte store + 4 KiB sync point, four ways on the same
/// store pattern: bare flush + fence; the sync point built by the caller (`Pool::sync` with
/// a `SyncPoint`, no tracking check of its own); `Pool::msync` with tracking and emulation
/// off; and the emulator with zero delays (the hook's own cost).
fn off_cost(summary: &mut serde_json::Value) {
    use mnemo_pmem::{ByteRange, SyncKind, SyncPoint};
    let region = 4 * KIB;
    let plain = make_pool(MIB, None, None);
    prefill(&plain.pool);
    let native = make_pool(MIB, None, Some("native"));
    prefill(&native.pool);
    let data = plain.pool.data_offset();
    let bare_ptr = plain.pool.ptr(data, region).expect("ptr").as_ptr();
    let ops = 20_000u64;
    let run = |f: &dyn Fn(u64)| {
        let mut v: Vec<f64> = (0..15)
            .map(|_| {
                let t = Instant::now();
                for i in 0..ops {
                    f(i);
                }
                t.elapsed().as_nanos() as f64 / ops as f64
            })
            .collect();
        v.sort_by(f64::total_cmp);
        mnemo_bench::median(&v)
    };
    let bare_op = |i: u64| {
        // SAFETY: `bare_ptr..+region` is inside the plain pool's live mapping.
        unsafe {
            std::ptr::write_volatile(bare_ptr.add((mix(i) % region) as usize), i as u8);
            cpu::flush(bare_ptr, region as usize);
        }
        cpu::fence();
    };
    let policy_op = |i: u64| {
        store_byte(&plain.pool, data + mix(i) % region, i as u8);
        plain
            .pool
            .sync(&SyncPoint::new(
                SyncKind::Data,
                &[ByteRange::new(data, region)],
            ))
            .expect("sync");
    };
    // Interleaved rounds; the best median of each, so no variant pays for another's noise.
    let mut best = [f64::MAX; 4];
    for _ in 0..3 {
        best[0] = best[0].min(run(&bare_op));
        best[1] = best[1].min(run(&policy_op));
        best[2] = best[2].min(run(&|i| {
            one_byte_sync(&plain.pool, Method::FlushAll, region, i)
        }));
        best[3] = best[3].min(run(&|i| {
            one_byte_sync(&native.pool, Method::FlushAll, region, i)
        }));
    }
    let [bare, policy, pool_off, emu_native] = best;
    eprintln!(
        "off cost, 1-byte store + 4 KiB sync point: bare flush+fence {bare:.0} ns, Pool::sync {policy:.0} ns, Pool::msync (tracking and emulation off) {pool_off:.0} ns (x{:.3} of direct), emulator with zero delays {emu_native:.0} ns (x{:.3} of Pool::msync)",
        pool_off / policy,
        emu_native / pool_off
    );
    summary["off_cost_4k_ns"] = serde_json::json!({
        "bare_flush_fence": bare, "media_pipeline_direct": policy, "pool_msync_off": pool_off,
        "emulator_native": emu_native, "pool_off_over_direct": pool_off / policy,
        "emulator_native_over_pool_off": emu_native / pool_off,
    });
}

/// Tier 1's marking cost: 64 B `Pool::write`s (sequential and random over 64 MiB) with
/// tracking off and with the bitmap on.
fn mark_cost(summary: &mut serde_json::Value) {
    let region = 64 * MIB;
    let off = make_pool(region, None, None);
    prefill(&off.pool);
    let on = make_pool(region, None, None);
    prefill(&on.pool);
    on.pool.enable_tracking(Tracking::Api).expect("tracking");
    let data = off.pool.data_offset();
    let lines = region / 64;
    let buf = [7u8; 64];
    let ops = 1u64 << 20;
    let run = |pool: &Pool, random: bool| {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            for i in 0..ops {
                let line = if random { mix(i) % lines } else { i % lines };
                pool.write(data + line * 64, &buf).expect("write");
            }
            best = best.min(t.elapsed().as_nanos() as f64 / ops as f64);
            pool.msync(data, region).expect("msync");
        }
        best
    };
    let (seq_off, seq_on) = (run(&off.pool, false), run(&on.pool, false));
    let (rnd_off, rnd_on) = (run(&off.pool, true), run(&on.pool, true));
    eprintln!(
        "mark cost, 64 B Pool::write: sequential {seq_off:.1} -> {seq_on:.1} ns, random {rnd_off:.1} -> {rnd_on:.1} ns (tracking off -> bitmap)"
    );
    summary["mark_cost_64b_write_ns"] = serde_json::json!({
        "sequential_off": seq_off, "sequential_bitmap": seq_on,
        "random_off": rnd_off, "random_bitmap": rnd_on,
    });
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("spf.rs"));
    for var in ["MNEMO_EMULATE", "MNEMO_SPF", "MNEMO_SPF_FALLBACK"] {
        if std::env::var_os(var).is_some() {
            eprintln!("note: {var} is set; the benchmark sets its own modes");
            std::env::remove_var(var);
        }
    }
    let only = std::env::var("SPF_BENCH_ONLY").unwrap_or_default();
    let want = |part: &str| only.is_empty() || only.split(',').any(|p| p == part);
    let sizes = sizes(max_size());
    let plots = bench_dir().join("plots");
    let mut summary = serde_json::json!({ "machine": machine() });
    if want("off") {
        off_cost(&mut summary);
    }
    if want("mark") {
        mark_cost(&mut summary);
    }
    if want("fig5") {
        let mut rows = Vec::new();
        let series = fig5(&sizes, &mut rows, &mut summary);
        let flat: Vec<f64> = rows
            .iter()
            .filter(|r| r.starts_with("SPF pages"))
            .filter_map(|r| {
                let f: Vec<&str> = r.split(',').collect();
                let s: u64 = f.get(2)?.parse().ok()?;
                (s >= 4 * KIB).then(|| f.get(3)?.parse().ok())?
            })
            .collect();
        if let (Some(lo), Some(hi)) = (
            flat.iter().copied().reduce(f64::min),
            flat.iter().copied().reduce(f64::max),
        ) {
            summary["spf_pages_4k_to_max_ratio_max_over_min"] = serde_json::json!(hi / lo);
        }
        write_csv("spf-fig5.csv", "method,preset,region_bytes,ns", &rows).expect("csv");
        report(loglog(
            &plots.join("spf-fig5.svg"),
            "Sync point after a 1-byte store vs region size",
            "region (bytes)",
            "store + sync point (ns, median)",
            &series,
        ));
    }
    if want("presets") {
        let mut rows = Vec::new();
        let (all, spf) = presets(&sizes, &mut rows);
        write_csv("spf-presets.csv", "method,preset,region_bytes,ns", &rows).expect("csv");
        report(loglog(
            &plots.join("spf-presets-flush-all.svg"),
            "Emulated: flush every line, 1-byte store",
            "region (bytes)",
            "store + sync point (ns, median)",
            &all,
        ));
        report(loglog(
            &plots.join("spf-presets-spf.svg"),
            "Emulated: SPF page tracking, 1-byte store",
            "region (bytes)",
            "store + sync point (ns, median)",
            &spf,
        ));
    }
    if want("accuracy") {
        let mut rows = Vec::new();
        let series = accuracy(&mut rows, &mut summary);
        write_csv(
            "spf-accuracy.csv",
            "preset,bytes,measured_ns,modelled_ns,error",
            &rows,
        )
        .expect("csv");
        report(loglog(
            &plots.join("spf-accuracy.svg"),
            "Emulated persist: measured vs model (median)",
            "modelled (ns)",
            "measured (ns)",
            &series,
        ));
    }
    if want("breakeven") {
        let mut rows = Vec::new();
        let series = break_even(&mut rows, &mut summary);
        write_csv(
            "spf-breakeven.csv",
            "dirty_percent,epoch_pages_flush_all_ns,epoch_spf_pages_ns,epoch_lines_flush_all_ns,epoch_spf_bitmap_ns,sync_flush_all_ns,sync_spf_pages_ns,sync_spf_bitmap_ns",
            &rows,
        )
        .expect("csv");
        report(loglog(
            &plots.join("spf-breakeven.svg"),
            "64 MiB epoch: stores to a share of it + sync point",
            "dirty share (%)",
            "epoch (ns, median)",
            &series,
        ));
    }
    let name = if only.is_empty() {
        "spf.json".to_string()
    } else {
        format!("spf-{}.json", only.replace(',', "-"))
    };
    write_json(&name, &summary).expect("json");
    println!("{summary:#}");
}

fn report(r: Result<std::path::PathBuf, String>) {
    match r {
        Ok(p) => eprintln!("wrote {}", p.display()),
        Err(e) => eprintln!("plot failed: {e}"),
    }
}
