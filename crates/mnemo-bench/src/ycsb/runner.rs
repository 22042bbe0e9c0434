//! YCSB's `Client`: the load phase (insert `recordcount` records) and the run phase
//! (`operationcount` operations of a workload's mix), each with N client threads, each
//! thread with its own connection; per-operation latencies, summarised as YCSB prints them.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use mnemo_resp::bytes::Bytes;

use super::generator::{
    AcknowledgedCounter, Discrete, Rng, ScrambledZipfian, SkewedLatest, Uniform,
};
use super::redis::{Commands, Record, RedisClient, Status};
use super::workload::{CoreWorkload, Distribution};

/// YCSB's measured operation names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `READ`
    Read,
    /// `UPDATE`
    Update,
    /// `INSERT`
    Insert,
    /// `SCAN`
    Scan,
    /// `READ-MODIFY-WRITE` (its read and update are also measured as READ and UPDATE).
    ReadModifyWrite,
}

impl Op {
    /// All, in YCSB's report order.
    pub const ALL: [Op; 5] = [
        Op::Read,
        Op::Update,
        Op::Insert,
        Op::Scan,
        Op::ReadModifyWrite,
    ];

    /// YCSB's label.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "READ",
            Op::Update => "UPDATE",
            Op::Insert => "INSERT",
            Op::Scan => "SCAN",
            Op::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How to run a phase.
#[derive(Clone, Debug)]
pub struct Options {
    /// Server address, host:port.
    pub addr: String,
    /// Client threads (`threadcount`), each with its own connection.
    pub threads: usize,
    /// Commands carrying the binding's operations.
    pub commands: Commands,
    /// Seed of the threads' random streams.
    pub seed: u64,
    /// Longest a phase may run (`maxexecutiontime`); threads stop after it.
    pub max_time: Duration,
    /// Check every reply's shape and keep the chosen keys (costs client time).
    pub validate: bool,
}

/// Latency summary of one operation type, in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct OpSummary {
    /// Which operation.
    pub op: Op,
    /// Operations done.
    pub count: u64,
    /// Of which returned an error status.
    pub errors: u64,
    /// Mean latency.
    pub avg_us: f64,
    /// Lowest.
    pub min_us: f64,
    /// Highest.
    pub max_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 95th percentile.
    pub p95_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// What validation saw (all zero unless [`Options::validate`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checks {
    /// Records read (reads, read-modify-writes and records of scans).
    pub records_read: u64,
    /// Of which did not have exactly `fieldcount` fields `field0..` of `fieldlength` bytes.
    pub bad_records: u64,
    /// Scans done.
    pub scans: u64,
    /// Scans that returned more records than asked for.
    pub scans_too_long: u64,
    /// Scans whose keys were not in non-decreasing hash order from the start key's hash.
    pub scans_out_of_order: u64,
    /// Scans that returned exactly the asked count.
    pub scans_full: u64,
    /// Key numbers chosen for reads, in each thread's order.
    pub read_keys: Vec<i64>,
    /// For each read: the insert counter's acknowledged limit when the key was chosen.
    pub read_limits: Vec<i64>,
}

/// One phase's results.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseResult {
    /// Workload name.
    pub workload: String,
    /// "load" or "run".
    pub phase: &'static str,
    /// Client threads.
    pub threads: usize,
    /// Wall time of the phase.
    pub elapsed: Duration,
    /// Operations done (a read-modify-write counts once).
    pub operations: u64,
    /// Whether `max_time` stopped the phase early.
    pub truncated: bool,
    /// Per operation type, in [`Op::ALL`] order, types not done left out.
    pub ops: Vec<OpSummary>,
    /// Validation.
    pub checks: Checks,
}

impl PhaseResult {
    /// Overall throughput.
    pub fn throughput(&self) -> f64 {
        self.operations as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// YCSB's text report.
    pub fn report(&self) -> String {
        let mut out = format!(
            "[OVERALL], RunTime(ms), {:.0}\n[OVERALL], Throughput(ops/sec), {:.1}\n",
            self.elapsed.as_secs_f64() * 1e3,
            self.throughput()
        );
        for s in &self.ops {
            let n = s.op.name();
            out.push_str(&format!(
                "[{n}], Operations, {}\n[{n}], AverageLatency(us), {:.1}\n\
                 [{n}], MinLatency(us), {:.1}\n[{n}], MaxLatency(us), {:.1}\n\
                 [{n}], 50thPercentileLatency(us), {:.1}\n\
                 [{n}], 95thPercentileLatency(us), {:.1}\n\
                 [{n}], 99thPercentileLatency(us), {:.1}\n[{n}], Return=OK, {}\n",
                s.count,
                s.avg_us,
                s.min_us,
                s.max_us,
                s.p50_us,
                s.p95_us,
                s.p99_us,
                s.count - s.errors
            ));
            if s.errors > 0 {
                out.push_str(&format!("[{n}], Return=ERROR, {}\n", s.errors));
            }
        }
        if self.truncated {
            out.push_str("[OVERALL], Truncated by max time, true\n");
        }
        out
    }
}

/// What one thread measured.
#[derive(Default)]
struct ThreadLog {
    latencies: [Vec<u64>; 5],
    errors: [u64; 5],
    operations: u64,
    truncated: bool,
    checks: Checks,
}

impl ThreadLog {
    fn measure(&mut self, op: Op, started: Instant, status: Status) {
        let ns = started.elapsed().as_nanos() as u64;
        self.latencies[op.index()].push(ns);
        if status != Status::Ok {
            self.errors[op.index()] += 1;
        }
    }

    fn check_record(&mut self, w: &CoreWorkload, record: &Record) {
        self.checks.records_read += 1;
        // A whole record, or with readallfields=false the one field asked for.
        let good = if w.readallfields {
            whole_record(w, record)
        } else {
            record.len() == 1
                && record
                    .iter()
                    .all(|(f, v)| f.starts_with(b"field") && v.len() == w.fieldlength)
        };
        if !good {
            self.checks.bad_records += 1;
        }
    }
}

/// Whether `record` has every field of `w`, each `fieldlength` bytes long, and nothing else.
pub(super) fn whole_record(w: &CoreWorkload, record: &Record) -> bool {
    record.len() == w.fieldcount
        && (0..w.fieldcount).all(|i| {
            let name = CoreWorkload::field_name(i);
            record
                .iter()
                .any(|(f, v)| f[..] == name[..] && v.len() == w.fieldlength)
        })
}

/// State the threads share in the run phase.
struct Shared {
    /// `transactioninsertkeysequence`: the run phase's inserts, acknowledged.
    run_keys: AcknowledgedCounter,
}

/// A thread's key chooser (`keychooser`).
enum KeyChooser {
    Uniform(Uniform),
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest),
}

/// Most draws `next_keynum` makes before settling for the newest acknowledged key: draws
/// past it (keys not yet inserted) are rare, so this never binds in practice.
const KEY_DRAWS_MAX: usize = 10_000;

impl KeyChooser {
    fn new(w: &CoreWorkload, shared: &Shared) -> KeyChooser {
        match w.distribution {
            Distribution::Uniform => KeyChooser::Uniform(Uniform::new(0, w.recordcount - 1)),
            Distribution::Zipfian => {
                // YCSB sizes the key space for the inserts expected, with a fudge factor 2.
                let expected_new = (w.operationcount as f64 * w.insert * 2.0) as i64;
                KeyChooser::Zipfian(ScrambledZipfian::new(0, w.recordcount + expected_new))
            }
            Distribution::Latest => KeyChooser::Latest(SkewedLatest::new(&shared.run_keys)),
        }
    }

    /// `nextKeynum`: a key at or below the acknowledged limit.
    fn next(&mut self, rng: &mut Rng, shared: &Shared) -> i64 {
        let limit = shared.run_keys.last_value();
        for _ in 0..KEY_DRAWS_MAX {
            let k = match self {
                KeyChooser::Uniform(g) => g.next(rng),
                KeyChooser::Zipfian(g) => g.next(rng),
                KeyChooser::Latest(g) => g.next(rng, &shared.run_keys),
            };
            if k <= limit {
                return k;
            }
        }
        limit
    }
}

/// Operations thread `t` of `threads` does out of `total` (YCSB's split).
fn share(total: i64, threads: usize, t: usize) -> i64 {
    let threads = threads as i64;
    total / threads + i64::from((t as i64) < total % threads)
}

fn summarise(logs: &[ThreadLog]) -> Vec<OpSummary> {
    let mut out = Vec::new();
    for op in Op::ALL {
        let mut all: Vec<u64> = logs
            .iter()
            .flat_map(|l| l.latencies[op.index()].iter().copied())
            .collect();
        if all.is_empty() {
            continue;
        }
        all.sort_unstable();
        let us = |ns: u64| ns as f64 / 1e3;
        let pct = |p: f64| {
            let rank = ((p * all.len() as f64).ceil() as usize).clamp(1, all.len());
            us(all[rank - 1])
        };
        out.push(OpSummary {
            op,
            count: all.len() as u64,
            errors: logs.iter().map(|l| l.errors[op.index()]).sum(),
            avg_us: all.iter().map(|&n| n as f64).sum::<f64>() / all.len() as f64 / 1e3,
            min_us: us(all[0]),
            max_us: us(all[all.len() - 1]),
            p50_us: pct(0.50),
            p95_us: pct(0.95),
            p99_us: pct(0.99),
        });
    }
    out
}

/// Runs `body` on `options.threads` threads, each with its own connection and its own
/// state from `init`; collects their logs.
fn on_threads<S, I, F>(
    w: &CoreWorkload,
    phase: &'static str,
    total: i64,
    options: &Options,
    init: I,
    body: F,
) -> Result<PhaseResult, String>
where
    I: Fn() -> S + Sync,
    F: Fn(&mut S, &mut RedisClient, &mut Rng, &mut ThreadLog) -> Result<(), String> + Sync,
{
    let threads = options.threads.max(1);
    let mut clients = Vec::with_capacity(threads);
    for _ in 0..threads {
        clients.push(
            RedisClient::connect(&options.addr, options.commands)
                .map_err(|e| format!("connect to {}: {e}", options.addr))?,
        );
    }
    let deadline = Instant::now() + options.max_time;
    let started = Instant::now();
    let logs: Vec<Result<ThreadLog, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(t, mut client)| {
                let (body, init) = (&body, &init);
                let seed = options.seed ^ (t as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D);
                s.spawn(move || {
                    let mut rng = Rng::new(seed);
                    let mut log = ThreadLog::default();
                    let mut state = init();
                    for _ in 0..share(total, threads, t) {
                        if Instant::now() > deadline {
                            log.truncated = true;
                            break;
                        }
                        body(&mut state, &mut client, &mut rng, &mut log)?;
                        log.operations += 1;
                    }
                    Ok(log)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("client thread panicked".into()))
            })
            .collect()
    });
    let elapsed = started.elapsed();
    let logs = logs.into_iter().collect::<Result<Vec<_>, _>>()?;
    let mut checks = Checks::default();
    for l in &logs {
        let c = &l.checks;
        checks.records_read += c.records_read;
        checks.bad_records += c.bad_records;
        checks.scans += c.scans;
        checks.scans_too_long += c.scans_too_long;
        checks.scans_out_of_order += c.scans_out_of_order;
        checks.scans_full += c.scans_full;
        checks.read_keys.extend_from_slice(&c.read_keys);
        checks.read_limits.extend_from_slice(&c.read_limits);
    }
    Ok(PhaseResult {
        workload: w.name.to_string(),
        phase,
        threads,
        elapsed,
        operations: logs.iter().map(|l| l.operations).sum(),
        truncated: logs.iter().any(|l| l.truncated),
        ops: summarise(&logs),
        checks,
    })
}

fn io(e: std::io::Error) -> String {
    format!("connection failed: {e}")
}

/// The load phase: inserts records `0..recordcount` (`doInsert`).
pub fn load(w: &CoreWorkload, options: &Options) -> Result<PhaseResult, String> {
    let keys = AtomicI64::new(0);
    on_threads(
        w,
        "load",
        w.recordcount,
        options,
        || (),
        |_, client, rng, log| {
            let keynum = keys.fetch_add(1, Ordering::Relaxed);
            let key = w.key_name(keynum);
            let values = w.all_values(rng);
            let t = Instant::now();
            let status = client.insert(key.as_bytes(), &values).map_err(io)?;
            log.measure(Op::Insert, t, status);
            Ok(())
        },
    )
}

/// The run phase: `operationcount` operations of the workload's mix (`doTransaction`).
pub fn run(w: &CoreWorkload, options: &Options) -> Result<PhaseResult, String> {
    let shared = Shared {
        run_keys: AcknowledgedCounter::new(w.recordcount),
    };
    let mut mix = Vec::new();
    for (weight, op) in [
        (w.read, Op::Read),
        (w.update, Op::Update),
        (w.insert, Op::Insert),
        (w.scan, Op::Scan),
        (w.read_modify_write, Op::ReadModifyWrite),
    ] {
        if weight > 0.0 {
            mix.push((weight, op));
        }
    }
    let chooser = Discrete::new(mix);
    let scan_length = Uniform::new(w.min_scan_length, w.max_scan_length);
    let validate = options.validate;
    // Each thread has its own key chooser (the same distribution; zeta(n) is per thread).
    let init = || KeyChooser::new(w, &shared);
    on_threads(
        w,
        "run",
        w.operationcount,
        options,
        init,
        |keys, client, rng, log| {
            let Some(op) = chooser.next(rng) else {
                return Ok(());
            };
            let mut record = Record::new();
            match op {
                Op::Read => {
                    let limit = shared.run_keys.last_value();
                    let keynum = keys.next(rng, &shared);
                    if validate {
                        log.checks.read_keys.push(keynum);
                        log.checks.read_limits.push(limit);
                    }
                    let key = w.key_name(keynum);
                    let fields = w.read_fields(rng);
                    let t = Instant::now();
                    let status = client
                        .read_fields(key.as_bytes(), fields.as_deref(), &mut record)
                        .map_err(io)?;
                    log.measure(Op::Read, t, status);
                    if validate {
                        log.check_record(w, &record);
                    }
                }
                Op::Update => {
                    let key = w.key_name(keys.next(rng, &shared));
                    let values = w.update_values(rng);
                    let t = Instant::now();
                    let status = client.update(key.as_bytes(), &values).map_err(io)?;
                    log.measure(Op::Update, t, status);
                }
                Op::Insert => {
                    let keynum = shared.run_keys.next();
                    let key = w.key_name(keynum);
                    let values = w.all_values(rng);
                    let t = Instant::now();
                    let result = client.insert(key.as_bytes(), &values);
                    shared.run_keys.acknowledge(keynum);
                    log.measure(Op::Insert, t, result.map_err(io)?);
                }
                Op::Scan => {
                    let start = w.key_name(keys.next(rng, &shared));
                    let len = scan_length.next(rng);
                    let (mut found, mut records) = (Vec::<Bytes>::new(), Vec::new());
                    let t = Instant::now();
                    let status = client
                        .scan(start.as_bytes(), len, &mut found, &mut records)
                        .map_err(io)?;
                    log.measure(Op::Scan, t, status);
                    if validate {
                        check_scan(w, log, start.as_bytes(), len, &found, &records);
                    }
                }
                Op::ReadModifyWrite => {
                    let key = w.key_name(keys.next(rng, &shared));
                    let fields = w.read_fields(rng);
                    let values = w.update_values(rng);
                    let t = Instant::now();
                    let status = client
                        .read_fields(key.as_bytes(), fields.as_deref(), &mut record)
                        .map_err(io)?;
                    log.measure(Op::Read, t, status);
                    let u = Instant::now();
                    let status = client.update(key.as_bytes(), &values).map_err(io)?;
                    log.measure(Op::Update, u, status);
                    log.measure(Op::ReadModifyWrite, t, status);
                    if validate {
                        log.check_record(w, &record);
                    }
                }
            }
            Ok(())
        },
    )
}

fn check_scan(
    w: &CoreWorkload,
    log: &mut ThreadLog,
    start: &[u8],
    len: i64,
    keys: &[Bytes],
    records: &[Record],
) {
    log.checks.scans += 1;
    if keys.len() as i64 > len {
        log.checks.scans_too_long += 1;
    }
    if keys.len() as i64 == len {
        log.checks.scans_full += 1;
    }
    let mut previous = RedisClient::index_score(start);
    for key in keys {
        let h = RedisClient::index_score(key);
        if h < previous {
            log.checks.scans_out_of_order += 1;
            break;
        }
        previous = h;
    }
    for r in records {
        log.check_record(w, r);
    }
}
