//! `async_loss`: what a replicated `mnemo serve` loses when its primary dies in each mode,
//! measured (issue 14: "report the loss window measured for async").
//!
//! Each round, fresh on /dev/shm and loopback: `mnemo mirror serve`, `mnemo serve --mirror
//! --repl-mode MODE`; one client SETs `k0, k1, ...` in order without pause and records when
//! each was acknowledged; after 1 s the primary is killed (SIGKILL). The mirror is given
//! 200 ms to take what was already on the wire, stopped, promoted (`mnemo mirror promote`)
//! and served; then every acknowledged key is read back from it. Reported per round: the
//! acknowledged writes missing on the promoted mirror, and the loss window: from the
//! acknowledgement of the first missing write to the kill. The same run measures `sync`,
//! where the loss must be 0 (the peer that shows the harness loses nothing by itself).
//!
//! A SIGKILL leaves the kernel to send what the primary had already written to its socket
//! (and `async` ships a sync point before acknowledging it), so a killed process loses
//! nothing; a machine that loses power loses what its mirror had not yet persisted. That is
//! measured too: while the client writes, a second connection samples `INFO replication`
//! every millisecond, and `mnemo_repl_lag_records` (sync points shipped but not yet
//! acknowledged by the mirror) is what a power cut of the primary at that instant would lose
//! in `async` (each sync point is one SET here); as a time, that many sync points at the
//! round's rate. Every round also checks that the promoted image holds a prefix of the
//! acknowledged writes (each sync point is applied whole and in order): a hole fails it.
//! Writes `bench/results/async-loss.csv` and `.json` (commit, command, machine, rounds).
//!
//! usage: `async_loss <mnemo binary> [rounds]` (`scripts/bench-async-loss.sh`)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemo_bench::resp_conn::{sequential_writer, written_keys_present, Conn};
use mnemo_bench::servers::{free_port, wait_port, Proc};
use mnemo_bench::{machine, median, write_csv, write_json};
use mnemo_resp::Reply;

/// The modes measured: `sync` is the control (nothing acknowledged may be lost).
const MODES: [&str; 2] = ["async", "sync"];

struct Round {
    mode: &'static str,
    acked: usize,
    lost: usize,
    /// From the first lost write's acknowledgement to the kill (0 when nothing was lost).
    window: Duration,
    /// `mnemo_repl_lag_records`, sampled while the client wrote, sorted.
    lag: Vec<f64>,
    /// Acknowledged writes per millisecond.
    rate: f64,
}

/// `mnemo_repl_lag_records` from the server on `port` every millisecond until `stop`.
fn sample_lag(port: u16, stop: &AtomicBool) -> Vec<f64> {
    let mut samples = Vec::new();
    let Ok(mut c) = Conn::new(port) else {
        return samples;
    };
    while !stop.load(Ordering::Relaxed) {
        let Ok(r) = c.call(&[vec![&b"INFO"[..], b"replication"]]) else {
            break;
        };
        if let Reply::Bulk(text) = &r[0] {
            let lag = String::from_utf8_lossy(text)
                .lines()
                .find_map(|l| l.strip_prefix("mnemo_repl_lag_records:"))
                .and_then(|v| v.trim().parse::<f64>().ok());
            samples.extend(lag);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    samples
}

fn round(mnemo: &Path, mode: &'static str, n: usize) -> Round {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("mnemo-bench-async-loss-")
        .tempdir_in("/dev/shm")
        .expect("scratch dir");
    let d = dir.path();
    let secret = d.join("repl.secret");
    std::fs::write(&secret, "benchmark secret, not for real use").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (m, p, q) = (free_port(), free_port(), free_port());
    let mut mirror = Proc::spawn_logged(
        Command::new(mnemo)
            .args(["mirror", "serve", "--port", &m.to_string(), "--dir"])
            .arg(d.join("mirror"))
            .arg("--secret-file")
            .arg(&secret),
        &d.join("mirror.log"),
    );
    wait_port(m);
    let mut primary = Proc::spawn_logged(
        Command::new(mnemo)
            .args(["serve", "--port", &p.to_string(), "--size", "64M", "--pool"])
            .arg(d.join("kv.pool"))
            .args(["--mirror", &format!("127.0.0.1:{m}"), "--repl-mode", mode])
            .arg("--repl-secret-file")
            .arg(&secret),
        &d.join("primary.log"),
    );
    wait_port(p);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = sequential_writer(p, Arc::clone(&stop));
    let sampler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || sample_lag(p, &stop))
    };
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let lag = sorted(sampler.join().expect("sampler"));
    let _ = primary.0.kill();
    let killed = Instant::now();
    let _ = primary.0.wait();
    let acked = writer.join().expect("writer");
    let rate = acked.len() as f64 / (killed - started).as_secs_f64() / 1e3;
    assert!(
        acked.len() > 100,
        "round {n} ({mode}): only {} writes acknowledged in 1 s (see {})",
        acked.len(),
        d.join("primary.log").display()
    );
    // What was already on the wire reaches the mirror; then it stops and is promoted.
    std::thread::sleep(Duration::from_millis(200));
    let _ = mirror.0.kill();
    let _ = mirror.0.wait();
    let promoted = Command::new(mnemo)
        .args(["mirror", "promote", "--dir"])
        .arg(d.join("mirror"))
        .output()
        .expect("mnemo mirror promote");
    assert!(
        promoted.status.success(),
        "round {n} ({mode}): promote failed: {}",
        String::from_utf8_lossy(&promoted.stderr)
    );
    let _served = Proc::spawn_logged(
        Command::new(mnemo)
            .args(["serve", "--port", &q.to_string(), "--pool"])
            .arg(d.join("mirror").join("image")),
        &d.join("promoted.log"),
    );
    wait_port(q);
    let keys: Vec<u64> = acked.iter().map(|&(i, _)| i).collect();
    let here = written_keys_present(q, &keys).expect("reading back from the promoted mirror");
    let lost = here.iter().filter(|&&h| !h).count();
    // Sync points are applied whole and in order: what is there is a prefix.
    let first_missing = here.iter().position(|&h| !h).unwrap_or(here.len());
    assert!(
        here[first_missing..].iter().all(|&h| !h),
        "round {n} ({mode}): the promoted image is not a prefix of history: k{} is missing but a later write is there",
        keys[first_missing]
    );
    let window = acked.get(first_missing).map_or(Duration::ZERO, |&(_, at)| {
        killed.saturating_duration_since(at)
    });
    Round {
        mode,
        acked: acked.len(),
        lost,
        window,
        lag,
        rate,
    }
}

/// The samples in ascending order.
fn sorted(samples: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = samples.into_iter().collect();
    v.sort_by(f64::total_cmp);
    v
}

impl Round {
    /// The lag's median, 99th percentile and maximum.
    fn lag_quantiles(&self) -> [f64; 3] {
        [0.5, 0.99, 1.0].map(|q| quantile(&self.lag, q))
    }
}

/// The `q` quantile of sorted samples (0 when there are none).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("async_loss.rs"));
    let args: Vec<String> = std::env::args().collect();
    let Some(mnemo) = args.get(1).map(PathBuf::from) else {
        eprintln!("usage: async_loss <mnemo binary> [rounds]");
        std::process::exit(2);
    };
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut results = Vec::new();
    for n in 1..=rounds {
        for mode in MODES {
            let r = round(&mnemo, mode, n);
            let [p50, p99, max] = r.lag_quantiles();
            println!(
                "round {n}, {mode}: killed: {} acknowledged, {} lost, window {:.2} ms; at risk of a power cut ({} samples): median {} sync points, p99 {}, max {} ({:.1} writes/ms)",
                r.acked,
                r.lost,
                r.window.as_secs_f64() * 1e3,
                r.lag.len(),
                p50,
                p99,
                max,
                r.rate
            );
            results.push(r);
        }
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let commit = mnemo_bench::head_commit();
    let command = std::env::var("MNEMO_BENCH_COMMAND").unwrap_or_else(|_| args.join(" "));
    let csv: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let [p50, p99, max] = r.lag_quantiles();
            format!(
                "{},{},{},{},{:.3},{},{},{},{},{:.2},{commit},\"{command}\"",
                i / MODES.len() + 1,
                r.mode,
                r.acked,
                r.lost,
                r.window.as_secs_f64() * 1e3,
                r.lag.len(),
                p50,
                p99,
                max,
                r.rate
            )
        })
        .collect();
    write_csv(
        "async-loss.csv",
        "round,mode,acked_writes,lost_writes,loss_window_ms,lag_samples,lag_records_p50,lag_records_p99,lag_records_max,writes_per_ms,commit,command",
        &csv,
    )
    .expect("csv");
    let summary = |mode: &str| {
        let rounds = || results.iter().filter(|r| r.mode == mode);
        let of = |f: fn(&Round) -> f64| sorted(rounds().map(f));
        let lost = of(|r| r.lost as f64);
        let window = of(|r| r.window.as_secs_f64() * 1e3);
        let lag = sorted(rounds().flat_map(|r| r.lag.iter().copied()));
        let rate = median(&of(|r| r.rate));
        serde_json::json!({
            "mode": mode,
            "at_risk_sync_points_p50": quantile(&lag, 0.5),
            "at_risk_sync_points_p99": quantile(&lag, 0.99),
            "at_risk_sync_points_max": quantile(&lag, 1.0),
            "at_risk_ms_p50": quantile(&lag, 0.5) / rate.max(1e-9),
            "at_risk_ms_p99": quantile(&lag, 0.99) / rate.max(1e-9),
            "writes_per_ms_median": rate,
            "lost_writes_median": median(&lost),
            "lost_writes_min": lost.first(), "lost_writes_max": lost.last(),
            "loss_window_ms_median": median(&window),
            "loss_window_ms_min": window.first(), "loss_window_ms_max": window.last(),
        })
    };
    let summaries: Vec<_> = MODES.iter().map(|m| summary(m)).collect();
    let json = serde_json::json!({
        "benchmark": "async-loss",
        "commit": commit,
        "command": command,
        "machine": machine(),
        "rounds": rounds,
        "load_avg_before": load_before.trim(), "load_avg_after": load_after.trim(),
        "modes": summaries,
        "rows": results.iter().enumerate().map(|(i, r)| serde_json::json!({
            "round": i / MODES.len() + 1,
            "mode": r.mode,
            "acked_writes": r.acked,
            "lost_writes": r.lost,
            "loss_window_ms": r.window.as_secs_f64() * 1e3,
        })).collect::<Vec<_>>(),
    });
    write_json("async-loss.json", &json).expect("json");
    for s in &summaries {
        println!("{s}");
    }
    let sync_lost: usize = results
        .iter()
        .filter(|r| r.mode == "sync")
        .map(|r| r.lost)
        .sum();
    if sync_lost != 0 {
        eprintln!("async_loss: sync mode lost {sync_lost} acknowledged writes: a bug");
        std::process::exit(1);
    }
}
