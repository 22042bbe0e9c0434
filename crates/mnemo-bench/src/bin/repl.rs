//! `repl`: the latency of one sync point replicated over loopback TCP, in each mode, beside
//! a raw TCP ping-pong of the same payload measured in the same run (Mojim's Figures 4 and
//! 5, on one machine).
//!
//! A mirror (`mnemo_repl::Mirror`, its directory on /dev/shm) and an echo server run as
//! threads of this process. For each mode (`local`, `async`, `sync`, `syncflush`) a pool on
//! /dev/shm is created with that policy; each operation stores `size` bytes into the pool and
//! calls `Pool::msync` over them (one sync point: in the mirror modes one record, and an
//! acknowledgement to wait for in `sync` and `syncflush`). The ping-pong sends `size` bytes
//! with a 4-byte length, and the echo server answers 32 bytes (an Ack frame's size) once it
//! has them all. Sizes 8 B to 12 KiB; p50 and p99 of `n` operations after 1,000 of warm-up.
//!
//! Writes `bench/results/repl-latency.csv`, `.json` (with the commit and the command) and
//! `bench/plots/repl-latency.svg`, and prints a Markdown table.
//!
//! usage: `repl [n]` (default 20000; run it with `scripts/bench-repl.sh`)

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use mnemo_bench::plot::{loglog, Series};
use mnemo_bench::{bench_dir, machine, write_csv, write_json};
use mnemo_pmem::{CreateOptions, LocalPolicy, Pool, SyncPolicy};
use mnemo_repl::{Mirror, MirrorConfig, MirrorOptions, MirrorPolicy, MirrorStore, Mode, Secret};

const SIZES: [usize; 6] = [8, 64, 512, 1024, 4096, 12288];
const WARMUP: usize = 1000;
const SECRET: &[u8] = b"benchmark secret, not for real use";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Row {
    series: String,
    size: usize,
    p50: f64,
    p99: f64,
    mean: f64,
}

fn summarize(series: &str, size: usize, mut ns: Vec<f64>) -> Row {
    ns.sort_by(f64::total_cmp);
    let mean = ns.iter().sum::<f64>() / ns.len() as f64;
    Row {
        series: series.to_string(),
        size,
        p50: percentile(&ns, 0.5),
        p99: percentile(&ns, 0.99),
        mean,
    }
}

/// Echo server: for each message (u32 length + bytes), answer 32 bytes.
fn echo(listener: TcpListener) {
    for stream in listener.incoming() {
        let Ok(mut s) = stream else { continue };
        let _ = s.set_nodelay(true);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            let reply = [0u8; 32];
            loop {
                let mut len = [0u8; 4];
                if s.read_exact(&mut len).is_err() {
                    return;
                }
                let n = u32::from_le_bytes(len) as usize;
                if n > buf.len() || s.read_exact(&mut buf[..n]).is_err() {
                    return;
                }
                if s.write_all(&reply).is_err() {
                    return;
                }
            }
        });
    }
}

fn ping_pong(addr: std::net::SocketAddr, size: usize, n: usize) -> Vec<f64> {
    let mut s = TcpStream::connect(addr).expect("connect to the echo server");
    s.set_nodelay(true).unwrap();
    let mut msg = (size as u32).to_le_bytes().to_vec();
    msg.extend(std::iter::repeat_n(0xa5u8, size));
    let mut reply = [0u8; 32];
    let mut out = Vec::with_capacity(n);
    for i in 0..WARMUP + n {
        let t = Instant::now();
        s.write_all(&msg).unwrap();
        s.read_exact(&mut reply).unwrap();
        if i >= WARMUP {
            out.push(t.elapsed().as_nanos() as f64);
        }
    }
    out
}

fn sync_points(pool: &Pool, size: usize, n: usize) -> Vec<f64> {
    let base = pool.data_offset() + (1 << 20);
    let slots = (4 << 20) / size.next_multiple_of(64) as u64;
    let data = vec![0x5au8; size];
    let mut out = Vec::with_capacity(n);
    for i in 0..WARMUP + n {
        let off = base + (i as u64 % slots) * size.next_multiple_of(64) as u64;
        pool.write(off, &data).unwrap();
        let t = Instant::now();
        pool.msync(off, size as u64).unwrap();
        if i >= WARMUP {
            out.push(t.elapsed().as_nanos() as f64);
        }
    }
    out
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("repl.rs"));
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let dir = tempfile::Builder::new()
        .prefix("mnemo-bench-repl-")
        .tempdir_in("/dev/shm")
        .expect("scratch dir on /dev/shm");
    let secret = Secret::new(SECRET).unwrap();
    let store =
        MirrorStore::open(&dir.path().join("mirror"), MirrorOptions::default()).expect("mirror");
    let mirror = Mirror::new(store, secret.clone());
    let mirror_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mirror_addr = mirror_listener.local_addr().unwrap();
    std::thread::spawn(move || mirror.serve(mirror_listener));
    let echo_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let echo_addr = echo_listener.local_addr().unwrap();
    std::thread::spawn(move || echo(echo_listener));

    let mut rows = Vec::new();
    for size in SIZES {
        rows.push(summarize(
            "tcp-ping-pong",
            size,
            ping_pong(echo_addr, size, n),
        ));
    }
    for mode in [Mode::Local, Mode::Async, Mode::Sync, Mode::SyncFlush] {
        let policy: Arc<dyn SyncPolicy> = match mode {
            Mode::Local => Arc::new(LocalPolicy),
            m => Arc::new(MirrorPolicy::new(MirrorConfig::new(
                mirror_addr,
                secret.clone(),
                m,
            ))),
        };
        let mut options = CreateOptions::new(64 << 20, "bench-repl");
        options.policy = Some(policy);
        let path = dir.path().join(format!("primary-{}.pool", mode.name()));
        let pool = Pool::create(&path, &options).expect("primary pool");
        for size in SIZES {
            rows.push(summarize(mode.name(), size, sync_points(&pool, size, n)));
        }
        pool.close().expect("close");
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let commit = mnemo_bench::head_commit();
    // The exact command: the script passes its own command line, else this program's.
    let command = std::env::var("MNEMO_BENCH_COMMAND")
        .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" "));
    let tcp = |size: usize| {
        rows.iter()
            .find(|r| r.series == "tcp-ping-pong" && r.size == size)
            .map_or(f64::NAN, |r| r.p50)
    };
    println!("| series | size (B) | p50 (us) | p99 (us) | mean (us) | p50 / TCP ping-pong p50 |");
    println!("|---|---|---|---|---|---|");
    let mut csv = Vec::new();
    for r in &rows {
        let ratio = r.p50 / tcp(r.size);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} |",
            r.series,
            r.size,
            r.p50 / 1e3,
            r.p99 / 1e3,
            r.mean / 1e3,
            ratio
        );
        csv.push(format!(
            "{},{},{:.0},{:.0},{:.0},{:.3},{commit},\"{command}\"",
            r.series, r.size, r.p50, r.p99, r.mean, ratio
        ));
    }
    write_csv(
        "repl-latency.csv",
        "series,size_bytes,p50_ns,p99_ns,mean_ns,p50_vs_tcp_ping_pong,commit,command",
        &csv,
    )
    .expect("csv");
    let json = serde_json::json!({
        "benchmark": "repl-latency",
        "commit": commit,
        "command": command,
        "ops_per_point": n,
        "warmup": WARMUP,
        "machine": machine(),
        "load_avg_before": load_before.trim(),
        "load_avg_after": load_after.trim(),
        "rows": rows.iter().map(|r| serde_json::json!({
            "series": r.series, "size_bytes": r.size, "p50_ns": r.p50, "p99_ns": r.p99,
            "mean_ns": r.mean, "p50_vs_tcp_ping_pong": r.p50 / tcp(r.size),
        })).collect::<Vec<_>>(),
    });
    write_json("repl-latency.json", &json).expect("json");
    let series: Vec<Series> = ["tcp-ping-pong", "local", "async", "sync", "syncflush"]
        .iter()
        .map(|name| Series {
            name: (*name).to_string(),
            points: rows
                .iter()
                .filter(|r| r.series == *name)
                .map(|r| (r.size as f64, r.p50 / 1e3))
                .collect(),
        })
        .collect();
    let svg = bench_dir().join("plots").join("repl-latency.svg");
    match loglog(
        &svg,
        &format!("Sync-point latency over loopback, p50 (commit {commit})"),
        "bytes per sync point",
        "microseconds",
        &series,
    ) {
        Ok(p) => eprintln!("plot: {}", p.display()),
        Err(e) => eprintln!("no plot: {e}"),
    }
    eprintln!(
        "load average before: {}, after: {}",
        load_before.trim(),
        load_after.trim()
    );
}
