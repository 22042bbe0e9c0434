//! `kv`: redis-benchmark against `mnemo serve` and redis-server 7 in one run (issue 6).
//!
//! Four servers, each started fresh for each client count, on its own loopback port:
//! redis-server without persistence, redis-server with `appendonly yes, appendfsync always`
//! with its directory on the disk (root file system), the same on /dev/shm, and
//! `mnemo serve` with its pool on /dev/shm (every acknowledged write durable). Each runs
//! `redis-benchmark -t <tests> -c <clients> -n <n> --csv` with the server pinned to one CPU
//! and the client to another (`taskset`). Runs alternate servers, in `KV_BENCH_ROUNDS`
//! rounds (3) with the order rotated each round, so that load from other jobs on the
//! machine falls on all of them alike; the figures compared are medians over the rounds,
//! and the medians of the rounds' own ratios (mnemo over its peer in the same round).
//!
//! Each test runs as its own redis-benchmark (in the order given, on the same server), and
//! the server's CPU time (user and system, all threads, from `/proc/PID/stat`) is read
//! around it: the `server_cpu_us` column is the server's own cost per request, which shows
//! even where the client's one thread is the ceiling of the rate. Its medians are plotted
//! in `bench/plots/<name>-cpu.svg`.
//!
//! Writes `bench/results/kv-redis-benchmark.csv` and `.json`, and
//! `bench/plots/kv-redis-benchmark.svg`. Run it with `scripts/bench-kv.sh`.
//!
//! Environment: `KV_MNEMO` (the mnemo binary, required), `KV_BENCH_N` (200000),
//! `KV_BENCH_N_C1` (requests per test with one client; default KV_BENCH_N),
//! `KV_BENCH_N_C1_DISK` (the same against Redis with appendfsync always on the disk),
//! `KV_BENCH_CLIENTS` ("50,1"), `KV_BENCH_TESTS`, `KV_SERVER_CPU` (0), `KV_CLIENT_CPU` (1),
//! `KV_DISK_DIR` (/tmp), `KV_BENCH_ROUNDS` (3), `KV_BENCH_REPLOT=1` (redraw the plot and
//! the JSON from the committed CSV, running nothing), `KV_BENCH_ARGS` (more redis-benchmark
//! arguments: "-P 16 -r 10000000 -d 100" for the pipelined run of issue 17),
//! `KV_BENCH_NAME` (base name of the results and plot files; default kv-redis-benchmark).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mnemo_bench::servers::{Kind, Running, Spec};
use mnemo_bench::{bench_dir, machine, write_csv, write_json};
use plotters::prelude::*;

const TESTS_DEFAULT: &str = "set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,mset";
/// Longest wait for a server to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    RedisNone,
    RedisAofDisk,
    RedisAofShm,
    Mnemo,
}

impl Target {
    const ALL: [Target; 4] = [
        Target::RedisNone,
        Target::RedisAofDisk,
        Target::RedisAofShm,
        Target::Mnemo,
    ];

    fn name(self) -> &'static str {
        match self {
            Target::RedisNone => "redis-no-persistence",
            Target::RedisAofDisk => "redis-aof-always-disk",
            Target::RedisAofShm => "redis-aof-always-shm",
            Target::Mnemo => "mnemo-serve-shm",
        }
    }
}

struct Config {
    mnemo: PathBuf,
    n: u64,
    /// Requests per test with one client (`KV_BENCH_N_C1`, default `n`).
    n_c1: u64,
    /// Requests per test with one client against Redis with appendfsync always on the disk,
    /// which may sync at a few hundred writes per second on a busy disk
    /// (`KV_BENCH_N_C1_DISK`, default `n_c1`).
    n_c1_disk: u64,
    clients: Vec<u32>,
    tests: String,
    server_cpu: String,
    client_cpu: String,
    disk_dir: PathBuf,
    /// Runs of the whole set per server (`KV_BENCH_ROUNDS`); figures are medians.
    rounds: usize,
    /// More redis-benchmark arguments (`KV_BENCH_ARGS`, e.g. "-P 16 -r 10000000 -d 100").
    extra: Vec<String>,
    /// Base name of the results and the plot (`KV_BENCH_NAME`, default kv-redis-benchmark).
    name: String,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

impl Config {
    fn from_env() -> Result<Config, String> {
        let mnemo = PathBuf::from(
            std::env::var("KV_MNEMO")
                .map_err(|_| "set KV_MNEMO to the mnemo binary (scripts/bench-kv.sh does)")?,
        );
        let clients = env_or("KV_BENCH_CLIENTS", "50,1")
            .split(',')
            .map(|c| {
                c.trim()
                    .parse()
                    .map_err(|e| format!("KV_BENCH_CLIENTS: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let n: u64 = env_or("KV_BENCH_N", "200000")
            .parse()
            .map_err(|e| format!("KV_BENCH_N: {e}"))?;
        let n_c1: u64 = env_or("KV_BENCH_N_C1", &n.to_string())
            .parse()
            .map_err(|e| format!("KV_BENCH_N_C1: {e}"))?;
        let n_c1_disk = env_or("KV_BENCH_N_C1_DISK", &n_c1.to_string())
            .parse()
            .map_err(|e| format!("KV_BENCH_N_C1_DISK: {e}"))?;
        Ok(Config {
            mnemo,
            n,
            n_c1,
            n_c1_disk,
            clients,
            tests: env_or("KV_BENCH_TESTS", TESTS_DEFAULT),
            server_cpu: env_or("KV_SERVER_CPU", "0"),
            client_cpu: env_or("KV_CLIENT_CPU", "1"),
            disk_dir: PathBuf::from(env_or("KV_DISK_DIR", "/tmp")),
            rounds: env_or("KV_BENCH_ROUNDS", "3")
                .parse()
                .map_err(|e| format!("KV_BENCH_ROUNDS: {e}"))?,
            extra: env_or("KV_BENCH_ARGS", "")
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            name: env_or("KV_BENCH_NAME", "kv-redis-benchmark"),
        })
    }
}

impl Config {
    /// Requests per test for this server and client count.
    fn requests(&self, target: Target, clients: u32) -> u64 {
        match (clients, target) {
            (1, Target::RedisAofDisk) => self.n_c1_disk,
            (1, _) => self.n_c1,
            _ => self.n,
        }
    }
}

fn start(target: Target, config: &Config) -> Result<Running, String> {
    let shm = Path::new("/dev/shm");
    let (kind, dir_in) = match target {
        Target::RedisNone => (Kind::RedisNoPersistence, shm),
        Target::RedisAofDisk => (Kind::RedisAofAlways, config.disk_dir.as_path()),
        Target::RedisAofShm => (Kind::RedisAofAlways, shm),
        Target::Mnemo => (
            Kind::Mnemo {
                binary: &config.mnemo,
                size: "1G",
            },
            shm,
        ),
    };
    Running::start(&Spec {
        kind,
        name: target.name(),
        cpu: &config.server_cpu,
        dir_in,
        start_timeout: START_TIMEOUT,
    })
}

/// One line of redis-benchmark's CSV.
#[derive(Clone, Debug)]
struct Row {
    target: Target,
    round: usize,
    clients: u32,
    test: String,
    rps: f64,
    avg_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// The commit of the code measured (`git rev-parse --short HEAD` when it ran).
    commit: String,
    /// The server's CPU time (user and system, all threads) per request of this test, in
    /// microseconds: what the server itself spent, whatever the client's ceiling.
    server_cpu_us: f64,
}

fn run_benchmark(target: Target, clients: u32, config: &Config) -> Result<Vec<Row>, String> {
    let server = start(target, config)?;
    let n = config.requests(target, clients);
    let mut rows = Vec::new();
    // One redis-benchmark per test (in the order given, on the same server, as `-t a,b`
    // runs them), so the server's CPU time can be read around each.
    for test in config
        .tests
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let before = server.cpu_time();
        let output = Command::new("taskset")
            .args(["-c", &config.client_cpu, "redis-benchmark"])
            .args(["-p", &server.port().to_string(), "-t", test])
            .args(["-c", &clients.to_string(), "-n", &n.to_string(), "--csv"])
            .args(&config.extra)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-benchmark: {e}"))?;
        let after = server.cpu_time();
        if !output.status.success() {
            return Err(format!(
                "redis-benchmark against {} failed: {}",
                target.name(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let mut got = Vec::new();
        for line in text.lines().skip(1) {
            let fields: Vec<String> = line
                .split(',')
                .map(|f| f.trim_matches('"').to_string())
                .collect();
            let number = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            let Some(name) = fields.first() else { continue };
            got.push(Row {
                target,
                round: 0,
                clients,
                test: name.clone(),
                rps: number(1),
                avg_ms: number(2),
                p50_ms: number(4),
                p99_ms: number(6),
                commit: mnemo_bench::head_commit(),
                server_cpu_us: f64::NAN,
            });
        }
        if got.is_empty() {
            return Err(format!(
                "no CSV from redis-benchmark against {}: {text}",
                target.name()
            ));
        }
        // A test that prints several lines (`-t lrange`: LRANGE_100, ...) shares its time.
        if let (Some(before), Some(after)) = (before, after) {
            let per_request =
                after.saturating_sub(before).as_secs_f64() * 1e6 / (n as f64 * got.len() as f64);
            for row in &mut got {
                row.server_cpu_us = per_request;
            }
        }
        rows.extend(got);
    }
    Ok(rows)
}

/// The rows of a previous run (`KV_BENCH_REPLOT=1` redraws the plot and the JSON from them).
fn read_csv(name: &str) -> Result<Vec<Row>, String> {
    let path = bench_dir().join("results").join(format!("{name}.csv"));
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let number = |i: usize| {
            f.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        let target = Target::ALL
            .into_iter()
            .find(|t| f.first() == Some(&t.name()))
            .ok_or_else(|| format!("unknown server in {line:?}"))?;
        rows.push(Row {
            target,
            round: f.get(2).and_then(|v| v.parse().ok()).unwrap_or(0),
            clients: f.get(1).and_then(|v| v.parse().ok()).unwrap_or(0),
            test: f.get(3).unwrap_or(&"").to_string(),
            rps: number(4),
            avg_ms: number(5),
            p50_ms: number(6),
            p99_ms: number(7),
            commit: f.get(8).unwrap_or(&"unknown").to_string(),
            // Absent from the results written before it was measured.
            server_cpu_us: number(9),
        });
    }
    Ok(rows)
}

/// Median requests per second over the rounds.
fn rps(rows: &[Row], target: Target, clients: u32, test: &str) -> Option<f64> {
    median_of(rows, target, clients, test, |r| r.rps)
}

/// Median server CPU microseconds per request over the rounds that measured it.
fn cpu_us(rows: &[Row], target: Target, clients: u32, test: &str) -> Option<f64> {
    median_of(rows, target, clients, test, |r| r.server_cpu_us)
}

/// The median over the rounds of `value` (NaN, not measured, left out); of two rounds,
/// their mean, not the higher one.
fn median_of(
    rows: &[Row],
    target: Target,
    clients: u32,
    test: &str,
    value: fn(&Row) -> f64,
) -> Option<f64> {
    let mut values: Vec<f64> = rows
        .iter()
        .filter(|r| r.target == target && r.clients == clients && r.test == test)
        .map(value)
        .filter(|v| v.is_finite())
        .collect();
    values.sort_by(f64::total_cmp);
    (!values.is_empty()).then(|| mnemo_bench::median(&values))
}

/// `{test: ratio}` to two decimals, for the tests that have one.
fn per_test_ratio(tests: &[String], ratio: impl Fn(&str) -> Option<f64>) -> serde_json::Value {
    let per_test: serde_json::Map<String, serde_json::Value> = tests
        .iter()
        .filter_map(|test| {
            let ratio = ratio(test)?;
            Some((
                test.clone(),
                serde_json::json!((ratio * 100.0).round() / 100.0),
            ))
        })
        .collect();
    serde_json::Value::Object(per_test)
}

/// The median over the rounds of mnemo's rate over `peer`'s in the same round: less
/// swayed than a ratio of medians by a round where the machine was slow for both.
fn round_ratio(rows: &[Row], peer: Target, clients: u32, test: &str) -> Option<f64> {
    let rate = |target: Target, round: usize| {
        rows.iter()
            .find(|r| {
                r.target == target && r.clients == clients && r.test == test && r.round == round
            })
            .map(|r| r.rps)
    };
    let mut ratios: Vec<f64> = rows
        .iter()
        .filter(|r| r.target == Target::Mnemo && r.clients == clients && r.test == test)
        .filter_map(|r| Some(r.rps / rate(peer, r.round)?))
        .filter(|v| v.is_finite())
        .collect();
    ratios.sort_by(f64::total_cmp);
    (!ratios.is_empty()).then(|| mnemo_bench::median(&ratios))
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("kv.rs"));
    if let Err(e) = run() {
        eprintln!("kv bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let config = Config::from_env()?;
    let redis_version = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .map_err(|e| format!("redis-server: {e} (apt-get install redis-server)"))?;
    if std::env::var("KV_BENCH_REPLOT").as_deref() == Ok("1") {
        let rows = read_csv(&config.name)?;
        return report(&config, &rows, &redis_version);
    }
    let mut rows = Vec::new();
    for &clients in &config.clients {
        for round in 0..config.rounds {
            // Rotate the order each round, so no server always runs first or last.
            let mut order = Target::ALL;
            order.rotate_left(round % Target::ALL.len());
            for target in order {
                let started = Instant::now();
                let mut got = run_benchmark(target, clients, &config)?;
                for row in &mut got {
                    row.round = round;
                }
                for row in &got {
                    println!(
                        "c={clients:<3} {:<24} {:<22} {:>10.0} req/s  p50 {:.3} ms  p99 {:.3} ms",
                        target.name(),
                        row.test,
                        row.rps,
                        row.p50_ms,
                        row.p99_ms
                    );
                }
                eprintln!(
                    "  ({} c={clients}: {:.0} s)",
                    target.name(),
                    started.elapsed().as_secs_f64()
                );
                rows.extend(got);
            }
        }
    }
    report(&config, &rows, &redis_version)
}

fn report(config: &Config, rows: &[Row], redis_version: &str) -> Result<(), String> {
    let csv: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{},{},{},{},{:.0},{:.3},{:.3},{:.3},{},{:.3}",
                r.target.name(),
                r.clients,
                r.round,
                r.test,
                r.rps,
                r.avg_ms,
                r.p50_ms,
                r.p99_ms,
                r.commit,
                r.server_cpu_us
            )
        })
        .collect();
    let csv_path = write_csv(
        &format!("{}.csv", config.name),
        "server,clients,round,test,requests_per_s,avg_ms,p50_ms,p99_ms,commit,server_cpu_us",
        &csv,
    )
    .map_err(|e| e.to_string())?;
    // Ratios the targets name: 50 clients against Redis without persistence, one
    // client against Redis with appendfsync always on disk.
    let mut ratios = serde_json::Map::new();
    let mut round_ratios = serde_json::Map::new();
    let tests: Vec<String> = rows
        .iter()
        .filter(|r| r.target == Target::Mnemo)
        .map(|r| r.test.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    for &clients in &config.clients {
        let peer = if clients == 1 {
            Target::RedisAofDisk
        } else {
            Target::RedisNone
        };
        // The ratio of the medians, and the median of the rounds' own ratios.
        let of_medians = |peer: Target| {
            per_test_ratio(&tests, |test| {
                Some(rps(rows, Target::Mnemo, clients, test)? / rps(rows, peer, clients, test)?)
            })
        };
        ratios.insert(
            format!("c{clients}_mnemo_over_{}", peer.name()),
            of_medians(peer),
        );
        round_ratios.insert(
            format!("c{clients}_mnemo_over_{}", peer.name()),
            per_test_ratio(&tests, |test| round_ratio(rows, peer, clients, test)),
        );
        // Both durable, both in memory: mnemo's pool and Redis's AOF on /dev/shm.
        ratios.insert(
            format!("c{clients}_mnemo_over_{}", Target::RedisAofShm.name()),
            of_medians(Target::RedisAofShm),
        );
    }
    for (key, value) in &ratios {
        println!("{key}: {value}");
    }
    for (key, value) in &round_ratios {
        println!("median of the rounds' ratios, {key}: {value}");
    }
    let cpu = cpu_medians(config, rows, &tests);
    println!("server CPU us per request (medians): {cpu}");
    let command = format!(
        "taskset -c {} redis-benchmark -p PORT -t {} -c CLIENTS -n N --csv {}",
        config.client_cpu,
        config.tests,
        config.extra.join(" ")
    );
    let json = serde_json::json!({
        "benchmark": config.name,
        "extra_args": config.extra.join(" "),
        "commit": rows.first().map(|r| r.commit.as_str()).unwrap_or("unknown"),
        "command": "scripts/bench-kv.sh (KV_BENCH_* settings: see \"n\" and \"rounds\"; bench/README.md)",
        "machine": machine(),
        "redis_server": redis_version,
        "client_command": command,
        "clients": config.clients,
        "n": { "default": config.n, "one_client": config.n_c1,
               "one_client_redis_aof_always_disk": config.n_c1_disk },
        "server_cpu": config.server_cpu,
        "client_cpu": config.client_cpu,
        "servers": {
            "redis-no-persistence": "redis-server --save '' --appendonly no (dir on /dev/shm)",
            "redis-aof-always-disk": format!("redis-server --save '' --appendonly yes --appendfsync always --dir {}/...", config.disk_dir.display()),
            "redis-aof-always-shm": "redis-server --save '' --appendonly yes --appendfsync always --dir /dev/shm/...",
            "mnemo-serve-shm": "mnemo serve --pool /dev/shm/.../kv.pool --size 1G (every acknowledged write durable)",
        },
        "targets": {
            "c50_over_redis_no_persistence": ">= 0.9",
            "c1_over_redis_aof_always_disk": ">= 5",
        },
        "rounds": config.rounds,
        "ratios_of_medians": ratios,
        "medians_of_round_ratios": round_ratios,
        "medians": medians(config, rows, &tests),
        "server_cpu_us_per_request_medians": cpu,
        "rows": rows.iter().map(|r| serde_json::json!({
            "server": r.target.name(), "clients": r.clients, "round": r.round, "test": r.test,
            "requests_per_s": r.rps, "avg_ms": r.avg_ms, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
            "server_cpu_us": r.server_cpu_us.is_finite().then_some(r.server_cpu_us),
        })).collect::<Vec<_>>(),
    });
    let json_path =
        write_json(&format!("{}.json", config.name), &json).map_err(|e| e.to_string())?;
    let svg = bench_dir()
        .join("plots")
        .join(format!("{}.svg", config.name));
    plot(&svg, config, rows, &tests, Metric::Rate)?;
    println!(
        "wrote {}, {}, {}",
        csv_path.display(),
        json_path.display(),
        svg.display()
    );
    if rows.iter().any(|r| r.server_cpu_us.is_finite()) {
        let svg = bench_dir()
            .join("plots")
            .join(format!("{}-cpu.svg", config.name));
        plot(&svg, config, rows, &tests, Metric::ServerCpu)?;
        println!("wrote {}", svg.display());
    }
    Ok(())
}

/// Median server CPU microseconds per request per client count, server and test (only
/// where measured).
fn cpu_medians(config: &Config, rows: &[Row], tests: &[String]) -> serde_json::Value {
    per_server(config, tests, |target, clients, test| {
        let us = cpu_us(rows, target, clients, test)?;
        Some(serde_json::json!((us * 100.0).round() / 100.0))
    })
}

/// Median requests per second per client count, server and test.
fn medians(config: &Config, rows: &[Row], tests: &[String]) -> serde_json::Value {
    per_server(config, tests, |target, clients, test| {
        Some(serde_json::json!(rps(rows, target, clients, test)?.round()))
    })
}

/// `{"c<clients> <server>": {test: value}}` over the run's client counts and servers;
/// a server with no value for any test is left out.
fn per_server(
    config: &Config,
    tests: &[String],
    value: impl Fn(Target, u32, &str) -> Option<serde_json::Value>,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for &clients in &config.clients {
        for target in Target::ALL {
            let per_test: serde_json::Map<String, serde_json::Value> = tests
                .iter()
                .filter_map(|t| Some((t.clone(), value(target, clients, t)?)))
                .collect();
            if !per_test.is_empty() {
                out.insert(
                    format!("c{clients} {}", target.name()),
                    serde_json::Value::Object(per_test),
                );
            }
        }
    }
    serde_json::Value::Object(out)
}

const COLORS: [RGBColor; 4] = [
    RGBColor(127, 127, 127),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(31, 119, 180),
];

/// What a plot's bars show.
#[derive(Clone, Copy)]
enum Metric {
    /// Thousands of requests per second (median over the rounds).
    Rate,
    /// The server's CPU microseconds per request (median over the rounds).
    ServerCpu,
}

impl Metric {
    fn value(self, rows: &[Row], target: Target, clients: u32, test: &str) -> Option<f64> {
        match self {
            Metric::Rate => rps(rows, target, clients, test).map(|r| r / 1e3),
            Metric::ServerCpu => cpu_us(rows, target, clients, test),
        }
    }

    fn axis(self) -> &'static str {
        match self {
            Metric::Rate => "thousand requests / s",
            Metric::ServerCpu => "server CPU us / request",
        }
    }
}

/// One panel per client count: per test, a group of bars (one per server), thousands of
/// requests per second or the server's CPU time per request.
fn plot(
    path: &Path,
    config: &Config,
    rows: &[Row],
    tests: &[String],
    metric: Metric,
) -> Result<(), String> {
    mnemo_bench::plot::init_font()?;
    let panels = config.clients.len() as u32;
    let root = SVGBackend::new(path, (1100, 420 * panels)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((config.clients.len(), 1));
    // Integer x: each test is a group of one unit per server plus a unit of gap, and the
    // group's name is the tick label at its middle.
    let width = Target::ALL.len() as i32 + 1;
    let groups = i32::try_from(tests.len()).map_err(|e| e.to_string())?;
    for (area, &clients) in areas.iter().zip(&config.clients) {
        let max = Target::ALL
            .iter()
            .flat_map(|&t| {
                tests
                    .iter()
                    .filter_map(move |x| metric.value(rows, t, clients, x))
            })
            .fold(1.0, f64::max);
        let x_max = groups * width;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "redis-benchmark -c {clients} -n {} {}(server CPU {}, client CPU {})",
                    config.requests(Target::Mnemo, clients),
                    config
                        .extra
                        .iter()
                        .map(|a| format!("{a} "))
                        .collect::<String>(),
                    config.server_cpu,
                    config.client_cpu
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0..x_max, 0.0..max * 1.15)
            .map_err(|e| e.to_string())?;
        let labels = tests.to_vec();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(usize::try_from(x_max + 1).unwrap_or(0))
            .x_label_formatter(&|x| {
                if x % width == (width - 1) / 2 {
                    labels
                        .get(usize::try_from(x / width).unwrap_or(usize::MAX))
                        .cloned()
                        .unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(metric.axis())
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
        for (t, target) in Target::ALL.iter().enumerate() {
            let color = COLORS[t];
            let bars: Vec<_> = tests
                .iter()
                .enumerate()
                .filter_map(|(g, test)| {
                    let value = metric.value(rows, *target, clients, test)?;
                    let x0 = i32::try_from(g).ok()? * width + i32::try_from(t).ok()?;
                    Some(Rectangle::new([(x0, 0.0), (x0 + 1, value)], color.filled()))
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(|e| e.to_string())?
                .label(target.name())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
