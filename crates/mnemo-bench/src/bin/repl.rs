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
//! `repl threads [seconds]` measures throughput instead (Mojim's Figures 8 and 9, and its
//! multiple queues): `sync` sync points of 1 KiB per second for 1, 2, 4 and 8 writing
//! threads over 1, 2 and 4 connections per link (`MirrorConfig::connections`), beside the
//! same number of threads each doing a raw TCP ping-pong of that payload on a connection of
//! its own (the ceiling: round trips that share nothing), measured in the same run; each
//! point runs `seconds` (default 2) after 0.3 s of warm-up. Writes
//! `bench/results/repl-threads.{csv,json}` and `bench/plots/repl-threads.svg`.
//!
//! usage: `repl [n]` (default 20000), `repl threads [seconds]` (run them with
//! `scripts/bench-repl.sh`)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Run `threads` copies of `op` (given the thread's index and its iteration) for `secs`
/// after a warm-up: operations per second, all threads together.
fn throughput(threads: usize, secs: f64, op: impl Fn(usize, u64) + Sync) -> f64 {
    let counting = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let elapsed = std::thread::scope(|scope| {
        for t in 0..threads {
            let (op, counting, stop, done) = (&op, &counting, &stop, &done);
            scope.spawn(move || {
                let mut i = 0u64;
                let mut counted = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    op(t, i);
                    i += 1;
                    if counting.load(Ordering::Relaxed) {
                        counted += 1;
                    }
                }
                done.fetch_add(counted, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        counting.store(true, Ordering::Relaxed);
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        counting.store(false, Ordering::Relaxed);
        let elapsed = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        elapsed
    });
    // Read once every thread ended (the scope joined them) and added its count.
    done.load(Ordering::Relaxed) as f64 / elapsed
}

const THREADS: [usize; 4] = [1, 2, 4, 8];
const CONNECTIONS: [usize; 3] = [1, 2, 4];
const THREADS_PAYLOAD: usize = 1024;

/// Throughput vs threads, for 1, 2 and 4 connections, beside TCP ping-pongs.
fn threads_main(secs: f64, mirror_addr: SocketAddr, echo_addr: SocketAddr, secret: &Secret) {
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let dir = tempfile::Builder::new()
        .prefix("mnemo-bench-repl-threads-")
        .tempdir_in("/dev/shm")
        .expect("scratch dir on /dev/shm");
    let size = THREADS_PAYLOAD;
    // (series, threads, ops/s)
    let mut rows: Vec<(String, usize, f64)> = Vec::new();
    for threads in THREADS {
        let streams: Vec<std::sync::Mutex<TcpStream>> = (0..threads)
            .map(|_| {
                let s = TcpStream::connect(echo_addr).expect("connect to the echo server");
                s.set_nodelay(true).unwrap();
                std::sync::Mutex::new(s)
            })
            .collect();
        let mut msg = (size as u32).to_le_bytes().to_vec();
        msg.extend(std::iter::repeat_n(0xa5u8, size));
        let ops = throughput(threads, secs, |t, _| {
            let mut s = streams[t].lock().unwrap();
            let mut reply = [0u8; 32];
            s.write_all(&msg).unwrap();
            s.read_exact(&mut reply).unwrap();
        });
        eprintln!("tcp-ping-pong, {threads} threads: {ops:.0}/s");
        rows.push(("tcp-ping-pong".into(), threads, ops));
    }
    for connections in CONNECTIONS {
        for threads in THREADS {
            let config = MirrorConfig::new(mirror_addr, secret.clone(), Mode::Sync)
                .with_connections(connections);
            let policy = Arc::new(MirrorPolicy::new(config));
            let mut options = CreateOptions::new(64 << 20, "bench-repl-threads");
            options.policy = Some(Arc::clone(&policy) as Arc<dyn SyncPolicy>);
            let path = dir
                .path()
                .join(format!("primary-{connections}-{threads}.pool"));
            let pool = Pool::create(&path, &options).expect("primary pool");
            let base = pool.data_offset() + (1 << 20);
            let data = vec![0x5au8; size];
            // Each thread its own 256 KiB of the pool, a slot of `size` per iteration.
            let ops = throughput(threads, secs, |t, i| {
                let off = base + (t as u64) * (256 << 10) + (i % 200) * size as u64;
                pool.write(off, &data).unwrap();
                pool.msync(off, size as u64).unwrap();
            });
            let stats = policy.stats();
            assert!(
                stats.in_sync && stats.link_losses == 0,
                "the link was lost during the run: {stats:?}"
            );
            eprintln!("sync, {connections} connections, {threads} threads: {ops:.0}/s");
            rows.push((format!("sync-{connections}conn"), threads, ops));
            pool.close().expect("close");
            let _ = std::fs::remove_file(&path);
        }
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let commit = mnemo_bench::head_commit();
    let command = std::env::var("MNEMO_BENCH_COMMAND")
        .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" "));
    let find = |series: &str, threads: usize| {
        rows.iter()
            .find(|r| r.0 == series && r.1 == threads)
            .map_or(f64::NAN, |r| r.2)
    };
    println!(
        "| series | threads | sync points/s | / 1 connection | / TCP ping-pong, same threads |"
    );
    println!("|---|---|---|---|---|");
    let mut csv = Vec::new();
    for (series, threads, ops) in &rows {
        let vs_one = ops / find("sync-1conn", *threads);
        let vs_tcp = ops / find("tcp-ping-pong", *threads);
        println!("| {series} | {threads} | {ops:.0} | {vs_one:.2} | {vs_tcp:.2} |");
        csv.push(format!(
            "{series},{threads},{size},{ops:.0},{vs_one:.3},{vs_tcp:.3},{commit},\"{command}\""
        ));
    }
    write_csv(
        "repl-threads.csv",
        "series,threads,size_bytes,ops_per_s,vs_1_connection,vs_tcp_ping_pong,commit,command",
        &csv,
    )
    .expect("csv");
    let json = serde_json::json!({
        "benchmark": "repl-threads",
        "commit": commit,
        "command": command,
        "seconds_per_point": secs,
        "size_bytes": size,
        "mode": "sync",
        "machine": machine(),
        "load_avg_before": load_before.trim(),
        "load_avg_after": load_after.trim(),
        "rows": rows.iter().map(|(series, threads, ops)| serde_json::json!({
            "series": series, "threads": threads, "ops_per_s": ops,
            "vs_1_connection": ops / find("sync-1conn", *threads),
            "vs_tcp_ping_pong": ops / find("tcp-ping-pong", *threads),
        })).collect::<Vec<_>>(),
    });
    write_json("repl-threads.json", &json).expect("json");
    let names = ["tcp-ping-pong", "sync-1conn", "sync-2conn", "sync-4conn"];
    let series: Vec<Series> = names
        .iter()
        .map(|name| Series {
            name: (*name).to_string(),
            points: rows
                .iter()
                .filter(|r| r.0 == *name)
                .map(|r| (r.1 as f64, r.2))
                .collect(),
        })
        .collect();
    plot_and_report(
        "repl-threads.svg",
        &format!("sync sync points of 1 KiB per second over loopback (commit {commit})"),
        ("writing threads", "sync points per second"),
        &series,
        (&load_before, &load_after),
    );
}

/// Draws `series` into `bench/plots/NAME` and says where, then the load averages around
/// the run.
fn plot_and_report(
    name: &str,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    (load_before, load_after): (&str, &str),
) {
    let svg = bench_dir().join("plots").join(name);
    match loglog(&svg, title, x_label, y_label, series) {
        Ok(p) => eprintln!("plot: {}", p.display()),
        Err(e) => eprintln!("no plot: {e}"),
    }
    eprintln!(
        "load average before: {}, after: {}",
        load_before.trim(),
        load_after.trim()
    );
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("repl.rs"));
    let threads_mode = std::env::args().nth(1).as_deref() == Some("threads");
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
    if threads_mode {
        let secs = std::env::args()
            .nth(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(2.0);
        threads_main(secs, mirror_addr, echo_addr, &secret);
        return;
    }

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
    plot_and_report(
        "repl-latency.svg",
        &format!("Sync-point latency over loopback, p50 (commit {commit})"),
        ("bytes per sync point", "microseconds"),
        &series,
        (&load_before, &load_after),
    );
}
