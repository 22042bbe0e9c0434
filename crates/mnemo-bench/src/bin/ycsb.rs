//! `ycsb`: the YCSB core workloads A-F against servers that speak the Redis protocol
//! (issue 6), through [`mnemo_bench::ycsb`].
//!
//! ```text
//! ycsb phase --addr HOST:PORT --workload load|a|b|c|d|e|f [--records N] [--ops N]
//!            [--threads T] [--commands ycsb|compat] [--read-fields one|all] [--validate]
//! ycsb check --addr HOST:PORT [--records 2000] [--ops 20000] [--threads 4] [--commands ..]
//! ycsb bench --mnemo PATH [--records 100000] [--ops 100000] [--e-ops 5000] [--threads 8]
//!            [--server-cpu 0] [--disk-dir /var/tmp] [--targets redis,redis-aof-disk,mnemo]
//!            [--check-records 2000] [--repeat 2]
//! ```
//!
//! `bench` starts each server on its own loopback port, pinned to `--server-cpu` with
//! taskset (run the driver itself under `taskset -c <other cpu>`: `scripts/bench-ycsb.sh`
//! does), checks the driver against each with `check` at small counts, then runs YCSB's
//! recommended sequence: load, A, B, C, F, D; FLUSHALL, load, E. Every step runs on each
//! server in turn, so that load from other jobs on the machine falls on all servers alike:
//! the servers in memory take turns first and the one that writes to the disk goes last
//! (`step_order`). With `--repeat N` each step runs N times on the servers in memory, the
//! order of their turns reversed at each repetition (`repeat_order`), so that every step
//! measures each of them both first and second (a load is repeated after a FLUSHALL); the
//! AOF server runs once per step, after the last repetition. Before each server's phase it
//! waits until no Redis server runs a background AOF rewrite or save (a forked child on the
//! servers' CPU).
//! Servers are stopped on exit (drop guards).
//! Writes `bench/results/ycsb.csv` and `.json` and `bench/plots/ycsb.svg`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mnemo_bench::plot_groups::{grouped_bars, GroupSeries};
use mnemo_bench::servers::{Kind, Running, Spec};
use mnemo_bench::ycsb::{self, check, Commands, CoreWorkload, Options, PhaseResult, RedisClient};
use mnemo_bench::{bench_dir, machine, write_csv, write_json};

/// Longest wait for a server to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest one phase may run before its threads stop (YCSB's `maxexecutiontime`).
const PHASE_TIME_MAX: Duration = Duration::from_secs(240);

/// What `--help` prints (the modes and options of the doc comment above).
const USAGE: &str = "\
ycsb: the YCSB core workloads A-F against servers that speak the Redis protocol

usage:
  ycsb phase --addr HOST:PORT --workload load|a|b|c|d|e|f [--records N] [--ops N]
             [--threads T] [--commands ycsb|compat] [--read-fields one|all] [--validate]
  ycsb check --addr HOST:PORT [--records 2000] [--ops 20000] [--threads 4] [--commands ..]
  ycsb bench --mnemo PATH [--records 100000] [--ops 100000] [--e-ops 5000] [--threads 8]
             [--server-cpu 0] [--disk-dir /var/tmp] [--targets redis,redis-aof-disk,mnemo]
             [--check-records 2000] [--repeat 2]

phase runs one load or workload against a running server; check verifies the driver's
reads against a server; bench starts Redis and mnemo itself and runs the whole sequence,
writing bench/results/ycsb.{csv,json} and bench/plots/ycsb.svg (scripts/bench-ycsb.sh).";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .iter()
        .any(|a| a == "--help" || a == "-h" || a == "help")
    {
        println!("{USAGE}");
        return;
    }
    if let Err(e) = run(&args) {
        eprintln!("ycsb: {e}");
        std::process::exit(1);
    }
}

/// `--name value` options.
struct Args<'a> {
    rest: &'a [String],
}

impl Args<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.rest
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.rest.get(i + 1))
            .map(String::as_str)
    }

    fn flag(&self, name: &str) -> bool {
        self.rest.iter().any(|a| a == name)
    }

    fn num(&self, name: &str, default: i64) -> Result<i64, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("{name}: not a number: {v}")),
        }
    }

    fn commands(&self) -> Result<Commands, String> {
        match self.get("--commands").unwrap_or("ycsb") {
            "compat" => Ok(Commands::Compat),
            "ycsb" => Ok(Commands::Ycsb),
            other => Err(format!("--commands: compat or ycsb, not {other}")),
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let (mode, rest) = args
        .split_first()
        .ok_or("usage: ycsb phase|check|bench ... (see the doc comment of src/bin/ycsb.rs)")?;
    let a = Args { rest };
    match mode.as_str() {
        "phase" => {
            let addr = a.get("--addr").ok_or("--addr HOST:PORT required")?;
            let which = a.get("--workload").ok_or("--workload required")?;
            let (records, ops) = (a.num("--records", 1000)?, a.num("--ops", 1000)?);
            let options = Options {
                addr: addr.to_string(),
                threads: a.num("--threads", 1)? as usize,
                commands: a.commands()?,
                seed: a.num("--seed", 1)? as u64,
                max_time: PHASE_TIME_MAX,
                validate: a.flag("--validate"),
            };
            let result = if which == "load" {
                let w = CoreWorkload::core("a", records, ops).ok_or("no workload")?;
                ycsb::load(&w, &options)?
            } else {
                let mut w = CoreWorkload::core(which, records, ops)
                    .ok_or_else(|| format!("unknown workload {which}"))?;
                w.readallfields = match a.get("--read-fields").unwrap_or("all") {
                    "all" => true,
                    "one" => false,
                    other => return Err(format!("--read-fields: all or one, not {other}")),
                };
                ycsb::run(&w, &options)?
            };
            print!("{}", result.report());
            Ok(())
        }
        "check" => {
            let addr = a.get("--addr").ok_or("--addr HOST:PORT required")?;
            let report = check::check(
                addr,
                a.num("--records", 2000)?,
                a.num("--ops", 20_000)?,
                a.num("--threads", 4)? as usize,
                a.commands()?,
            )?;
            print!("{}", report.text());
            if report.passed() {
                Ok(())
            } else {
                Err("some checks failed".into())
            }
        }
        "bench" => bench(&a),
        other => Err(format!("unknown mode {other}: phase, check or bench")),
    }
}

/// A server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Redis,
    RedisAofDisk,
    Mnemo,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Redis => "redis-no-persistence",
            Target::RedisAofDisk => "redis-aof-always-disk",
            Target::Mnemo => "mnemo-serve-shm",
        }
    }

    fn parse(text: &str) -> Result<Target, String> {
        match text {
            "redis" => Ok(Target::Redis),
            "redis-aof-disk" => Ok(Target::RedisAofDisk),
            "mnemo" => Ok(Target::Mnemo),
            other => Err(format!(
                "unknown target {other}: redis, redis-aof-disk, mnemo"
            )),
        }
    }
}

/// A running server and what it is.
struct Started {
    target: Target,
    server: Running,
}

impl Started {
    fn addr(&self) -> String {
        self.server.addr()
    }
}

fn start(target: Target, mnemo: &Path, cpu: &str, disk: &str) -> Result<Started, String> {
    let shm = Path::new("/dev/shm");
    let (kind, dir_in) = match target {
        Target::Redis => (Kind::RedisNoPersistence, shm),
        Target::RedisAofDisk => (Kind::RedisAofAlways, Path::new(disk)),
        Target::Mnemo => (
            Kind::Mnemo {
                binary: mnemo,
                size: "4G",
            },
            shm,
        ),
    };
    let server = Running::start(&Spec {
        kind,
        name: target.name(),
        cpu,
        dir_in,
        start_timeout: START_TIMEOUT,
    })?;
    Ok(Started { target, server })
}

/// One measured phase of one server.
struct Row {
    target: Target,
    step: &'static str,
    /// Which repetition of the step (0-based; `--repeat`).
    rep: usize,
    result: PhaseResult,
}

fn flushall(addr: &str) -> Result<(), String> {
    let mut c = RedisClient::connect(addr, Commands::Compat).map_err(|e| e.to_string())?;
    c.call(&[b"FLUSHALL".as_slice()])
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Longest wait for a Redis server's background rewrite or save to end before a phase.
const QUIET_TIMEOUT: Duration = Duration::from_secs(120);

/// Waits until no Redis server of `servers` runs a background AOF rewrite or RDB save (Redis
/// with AOF rewrites its log once it has doubled: during a load, a forked child on the
/// servers' CPU), so that it does not run during the next server's phase; returns how long
/// it waited. Every server runs on the same CPU, so a child left running would be charged
/// to whichever server comes next (mnemo, after the AOF server, in both loads).
fn wait_for_background_saves(servers: &[Started]) -> Result<Duration, String> {
    let started = Instant::now();
    for s in servers.iter().filter(|s| s.target != Target::Mnemo) {
        let mut c = RedisClient::connect(&s.addr(), Commands::Compat).map_err(|e| e.to_string())?;
        loop {
            let info = match c.call(&[b"INFO".as_slice(), b"persistence"]) {
                Ok(mnemo_resp::Reply::Bulk(text)) => String::from_utf8_lossy(&text).into_owned(),
                Ok(other) => return Err(format!("INFO persistence: {other:?}")),
                Err(e) => return Err(e.to_string()),
            };
            let busy = info.lines().any(|line| {
                matches!(
                    line.trim().split_once(':'),
                    Some((
                        "aof_rewrite_in_progress"
                            | "aof_rewrite_scheduled"
                            | "rdb_bgsave_in_progress",
                        "1"
                    ))
                )
            });
            if !busy {
                break;
            }
            if started.elapsed() > QUIET_TIMEOUT {
                return Err(format!(
                    "{} still rewriting or saving after {QUIET_TIMEOUT:?}",
                    s.target.name()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(started.elapsed())
}

/// The order in which step `i` runs the servers (indices into `targets`): those in memory
/// take turns first, and Redis with AOF on the disk goes last. A phase that wrote to the disk
/// slows the VM for a while after it; with the plain rotation, mnemo came right after the
/// AOF server in six of the eight steps (Redis without persistence in none), and its load
/// measured 0.62-0.98x Redis there against 1.01-1.06x right after Redis (`bench/README.md`,
/// "Runs of stop 26"). The first phase of a step pays for the one before it, so the turns
/// skip one at the second load (step 6): with two servers in memory each goes first in one
/// of the two loads and in four of the eight steps.
fn step_order(targets: &[Target], i: usize) -> Vec<usize> {
    let (mut order, disk): (Vec<usize>, Vec<usize>) =
        (0..targets.len()).partition(|&k| targets[k] != Target::RedisAofDisk);
    if !order.is_empty() {
        let n = order.len();
        order.rotate_left((i + i / 6) % n);
    }
    order.extend(disk);
    order
}

/// The order of repetition `rep` of step `i`: [`step_order`]'s servers in memory, reversed
/// at every odd repetition, then (at the last repetition only) the AOF server. Measured with
/// the two servers in memory run one after the other, fresh each time (`bench/README.md`,
/// "Runs of stop 27"), whichever ran second in a pair did 8-10% better than when it ran
/// first, so a single order per step leans each ratio by about that much; with an even
/// number of repetitions each server runs first in half of them.
fn repeat_order(targets: &[Target], i: usize, rep: usize, repeats: usize) -> Vec<usize> {
    let order = step_order(targets, i);
    let (mut memory, disk): (Vec<usize>, Vec<usize>) = order
        .into_iter()
        .partition(|&k| targets[k] != Target::RedisAofDisk);
    if rep % 2 == 1 {
        memory.reverse();
    }
    if rep + 1 == repeats {
        memory.extend(disk);
    }
    memory
}

/// The median of `values` (the mean of the middle two for an even count; NaN when empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn bench(a: &Args<'_>) -> Result<(), String> {
    let records = a.num("--records", 100_000)?;
    let ops = a.num("--ops", 100_000)?;
    let e_ops = a.num("--e-ops", 5_000)?;
    let threads = a.num("--threads", 8)? as usize;
    let check_records = a.num("--check-records", 2000)?;
    let repeats = a.num("--repeat", 2)?;
    if !(1..=16).contains(&repeats) {
        return Err(format!(
            "--repeat {repeats}: give 1 to 16 repetitions per step"
        ));
    }
    let repeats = repeats as usize;
    let cpu = a.get("--server-cpu").unwrap_or("0").to_string();
    let disk = a.get("--disk-dir").unwrap_or("/var/tmp").to_string();
    let mnemo = PathBuf::from(a.get("--mnemo").unwrap_or("mnemo"));
    let targets = a
        .get("--targets")
        .unwrap_or("redis,redis-aof-disk,mnemo")
        .split(',')
        .map(Target::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let commands = a.commands()?;
    let client_cpus = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Cpus_allowed_list"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let redis_version = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();

    let mut servers = Vec::new();
    for &t in &targets {
        servers.push(start(t, &mnemo, &cpu, &disk)?);
        eprintln!(
            "started {} on port {}",
            t.name(),
            servers.last().map_or(0, |s| s.server.port())
        );
    }

    // The driver is checked against each server before its numbers are taken.
    let mut checks = serde_json::Map::new();
    if check_records > 0 {
        for s in &servers {
            let report = check::check(&s.addr(), check_records, check_records * 10, 4, commands)?;
            println!(
                "== checks against {} ==\n{}",
                s.target.name(),
                report.text()
            );
            checks.insert(
                s.target.name().into(),
                serde_json::json!({
                    "passed": report.passed(),
                    "checks": report.checks.iter().map(|c| serde_json::json!({
                        "name": c.name, "observed": c.observed, "expected": c.expected, "pass": c.pass,
                    })).collect::<Vec<_>>(),
                }),
            );
            flushall(&s.addr())?;
        }
    }

    let options = |s: &Started, seed: u64| Options {
        addr: s.addr(),
        threads,
        commands,
        seed,
        max_time: PHASE_TIME_MAX,
        validate: false,
    };
    let steps: [(&str, &str, i64); 8] = [
        ("load", "load", ops),
        ("A", "a", ops),
        ("B", "b", ops),
        ("C", "c", ops),
        ("F", "f", ops),
        ("D", "d", ops),
        ("load (for E)", "load-e", ops),
        ("E", "e", e_ops),
    ];
    let started = Instant::now();
    let mut rows = Vec::new();
    for (i, &(step, which, count)) in steps.iter().enumerate() {
        for rep in 0..repeats {
            for k in repeat_order(&targets, i, rep, repeats) {
                let s = &servers[k];
                let waited = wait_for_background_saves(&servers)?;
                if waited > Duration::from_millis(100) {
                    eprintln!(
                        "waited {:.1} s for a Redis background rewrite or save to end before {} {step}",
                        waited.as_secs_f64(),
                        s.target.name()
                    );
                }
                // The same operations for every server at one repetition, new ones at the next.
                let seed = (i * 16 + rep) as u64;
                let result = match which {
                    "load" | "load-e" => {
                        if which == "load-e" || rep > 0 {
                            flushall(&s.addr())?;
                        }
                        let w = CoreWorkload::core("a", records, count).ok_or("no workload")?;
                        ycsb::load(&w, &options(s, seed))?
                    }
                    _ => {
                        let w = CoreWorkload::core(which, records, count).ok_or("no workload")?;
                        ycsb::run(&w, &options(s, seed))?
                    }
                };
                println!(
                    "== {} {step}, repetition {} of {repeats} ({} threads) ==\n{}",
                    s.target.name(),
                    rep + 1,
                    threads,
                    result.report()
                );
                rows.push(Row {
                    target: s.target,
                    step,
                    rep,
                    result,
                });
            }
        }
    }
    let elapsed = started.elapsed();
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    drop(servers);

    let commit = mnemo_bench::head_commit();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut csv = Vec::new();
    for r in &rows {
        // server..truncated, the same on the phase's OVERALL row and on each operation's.
        let phase = format!(
            "{},{},{},{},{},{:.1},{:.3},{}",
            r.target.name(),
            r.step,
            r.rep,
            r.result.phase,
            r.result.threads,
            r.result.throughput(),
            r.result.elapsed.as_secs_f64(),
            r.result.truncated,
        );
        csv.push(format!(
            "{phase},OVERALL,{},0,,,,,,{commit}",
            r.result.operations
        ));
        for s in &r.result.ops {
            csv.push(format!(
                "{phase},{},{},{},{:.1},{:.1},{:.1},{:.1},{:.1},{commit}",
                s.op.name(),
                s.count,
                s.errors,
                s.avg_us,
                s.p50_us,
                s.p95_us,
                s.p99_us,
                s.max_us,
            ));
        }
    }
    let csv_path = write_csv(
        "ycsb.csv",
        "server,workload,repeat,phase,threads,throughput_ops_s,elapsed_s,truncated,op,count,errors,avg_us,p50_us,p95_us,p99_us,max_us,commit",
        &csv,
    )
    .map_err(|e| e.to_string())?;
    let json_rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "server": r.target.name(),
                "workload": r.step,
                "repeat": r.rep,
                "phase": r.result.phase,
                "threads": r.result.threads,
                "operations": r.result.operations,
                "elapsed_s": r.result.elapsed.as_secs_f64(),
                "throughput_ops_s": r.result.throughput(),
                "truncated": r.result.truncated,
                "ops": r.result.ops.iter().map(|s| serde_json::json!({
                    "op": s.op.name(), "count": s.count, "errors": s.errors,
                    "avg_us": s.avg_us, "min_us": s.min_us, "max_us": s.max_us,
                    "p50_us": s.p50_us, "p95_us": s.p95_us, "p99_us": s.p99_us,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let json_path = write_json(
        "ycsb.json",
        &serde_json::json!({
            "benchmark": "YCSB core workloads A-F (mnemo_bench::ycsb, Redis binding)",
            "commit": commit,
            "command": command,
            "recordcount": records,
            "operationcount": ops,
            "operationcount_e": e_ops,
            "threads": threads,
            "repeats": repeats,
            "commands": format!("{commands:?}"),
            "server_cpu": cpu,
            "client_cpus": client_cpus,
            "redis": redis_version,
            "loadavg_before": load_before.trim(),
            "loadavg_after": load_after.trim(),
            "elapsed_s": elapsed.as_secs_f64(),
            "machine": machine(),
            "checks": checks,
            "results": json_rows,
        }),
    )
    .map_err(|e| e.to_string())?;
    let groups: Vec<String> = steps.iter().map(|s| s.0.to_string()).collect();
    let series: Vec<GroupSeries> = targets
        .iter()
        .map(|&t| GroupSeries {
            name: t.name().to_string(),
            values: steps
                .iter()
                .map(|&(step, _, _)| {
                    median(
                        rows.iter()
                            .filter(|r| r.target == t && r.step == step)
                            .map(|r| r.result.throughput())
                            .collect(),
                    )
                })
                .collect(),
        })
        .collect();
    // mnemo over each other server, step by step, from the medians of the repetitions.
    if let Some(m) = series.iter().find(|g| g.name == Target::Mnemo.name()) {
        for peer in series.iter().filter(|g| g.name != m.name) {
            let ratios: Vec<String> = groups
                .iter()
                .zip(m.values.iter().zip(&peer.values))
                .map(|(step, (a, b))| format!("{step} {:.2}x", a / b))
                .collect();
            eprintln!("mnemo over {}: {}", peer.name, ratios.join(", "));
        }
    }
    let load1 = |text: &str| text.split_whitespace().next().unwrap_or("?").to_string();
    let svg = grouped_bars(
        &bench_dir().join("plots").join("ycsb.svg"),
        &format!(
            "YCSB, {records} records of 1 KB, {ops} ops (E: {e_ops}), {threads} clients, \
             median of {repeats}; server CPU {cpu}, client CPU {client_cpus}; load avg {}..{}",
            load1(&load_before),
            load1(&load_after)
        ),
        "throughput (operations/s, log scale; higher is better)",
        &groups,
        &series,
    )?;
    eprintln!(
        "wrote {}, {}, {} in {:.0} s; load average before {} after {}",
        csv_path.display(),
        json_path.display(),
        svg.display(),
        elapsed.as_secs_f64(),
        load_before.trim(),
        load_after.trim()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over YCSB's eight steps the AOF server always runs last, and the two in-memory
    /// servers each go first four times, one of them at each load (steps 0 and 6).
    #[test]
    fn the_disk_server_goes_last_and_the_others_take_turns_first() {
        let targets = [Target::Redis, Target::RedisAofDisk, Target::Mnemo];
        let mut first = [0; 3];
        for i in 0..8 {
            let order = step_order(&targets, i);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2], "step {i}: {order:?}");
            assert_eq!(order[2], 1, "step {i}: {order:?}");
            first[order[0]] += 1;
        }
        assert_eq!(first, [4, 0, 4]);
        assert_ne!(step_order(&targets, 0)[0], step_order(&targets, 6)[0]);
        assert_eq!(step_order(&[Target::RedisAofDisk], 3), [0]);
        assert_eq!(step_order(&[Target::Mnemo, Target::Redis], 1), [1, 0]);
    }

    /// With an even number of repetitions each server in memory runs first in half of every
    /// step's repetitions and second in the other half; the AOF server runs once per step,
    /// last.
    #[test]
    fn repetitions_reverse_the_turns_and_run_the_disk_server_once() {
        let targets = [Target::Redis, Target::RedisAofDisk, Target::Mnemo];
        for repeats in [2, 4] {
            for i in 0..8 {
                let mut first = [0; 3];
                let mut runs = [0; 3];
                for rep in 0..repeats {
                    let order = repeat_order(&targets, i, rep, repeats);
                    first[order[0]] += 1;
                    for k in &order {
                        runs[*k] += 1;
                    }
                    assert_eq!(
                        order.contains(&1),
                        rep + 1 == repeats,
                        "{i}/{rep}: {order:?}"
                    );
                    if order.contains(&1) {
                        assert_eq!(order.last(), Some(&1), "{i}/{rep}: {order:?}");
                    }
                }
                assert_eq!(first, [repeats / 2, 0, repeats / 2], "step {i}");
                assert_eq!(runs, [repeats, 1, repeats], "step {i}");
            }
        }
        assert_eq!(repeat_order(&targets, 0, 0, 1), step_order(&targets, 0));
    }

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }
}
