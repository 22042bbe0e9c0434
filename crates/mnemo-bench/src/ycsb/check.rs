//! Checks of the driver against a live server (Redis first, before its numbers are trusted):
//! the load leaves `recordcount` records and index entries, records have YCSB's shape, the
//! keys chosen follow the distributions, D reads recent inserts, E scans are bounded and
//! in key-hash order, and YCSB's own commands give the same answers as the substitutes.

use std::collections::HashMap;
use std::time::Duration;

use mnemo_resp::Reply;

use super::generator::{Rng, ScrambledZipfian, Zipfian, SCRAMBLED_ZETAN, ZIPFIAN_CONSTANT};
use super::redis::{Commands, Record, RedisClient, Status, INDEX_KEY};
use super::runner::{self, Options, PhaseResult};
use super::workload::CoreWorkload;

/// One checked fact.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// What was seen.
    pub observed: String,
    /// What YCSB's definition implies.
    pub expected: String,
    /// Whether they agree.
    pub pass: bool,
}

/// Checks collected so far.
#[derive(Debug, Default)]
pub struct Report {
    /// In order of checking.
    pub checks: Vec<Check>,
    /// The phases run, with their YCSB reports.
    pub phases: Vec<PhaseResult>,
}

impl Report {
    fn add(&mut self, name: &str, observed: String, expected: String, pass: bool) {
        self.checks.push(Check {
            name: name.to_string(),
            observed,
            expected,
            pass,
        });
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }

    /// One line per check.
    pub fn text(&self) -> String {
        self.checks
            .iter()
            .map(|c| {
                format!(
                    "{} {}: observed {}, expected {}\n",
                    if c.pass { "PASS" } else { "FAIL" },
                    c.name,
                    c.observed,
                    c.expected
                )
            })
            .collect()
    }
}

fn io(e: std::io::Error) -> String {
    format!("connection failed: {e}")
}

fn integer(client: &mut RedisClient, args: &[&[u8]]) -> Result<Option<i64>, String> {
    Ok(match client.call(args).map_err(io)? {
        Reply::Integer(n) => Some(n),
        _ => None,
    })
}

/// Entries of `_indices` (ZCARD, or ZRANGE 0 -1 where ZCARD is missing).
fn index_count(client: &mut RedisClient) -> Result<Option<i64>, String> {
    if let Some(n) = integer(client, &[b"ZCARD", INDEX_KEY])? {
        return Ok(Some(n));
    }
    Ok(
        match client
            .call(&[b"ZRANGE", INDEX_KEY, b"0", b"-1"])
            .map_err(io)?
        {
            Reply::Array(items) => Some(items.len() as i64),
            _ => None,
        },
    )
}

/// Frequency tolerance for probability `p` over `n` samples: 5 standard deviations.
fn tol(p: f64, n: usize) -> f64 {
    5.0 * (p * (1.0 - p) / n.max(1) as f64).sqrt()
}

fn phase_clean(report: &mut Report, r: &PhaseResult) {
    let errors: u64 = r.ops.iter().map(|s| s.errors).sum();
    let c = &r.checks;
    report.add(
        &format!("workload {} {}: errors, bad records", r.workload, r.phase),
        format!(
            "{errors} errors, {} bad of {} records read",
            c.bad_records, c.records_read
        ),
        "none".into(),
        errors == 0 && c.bad_records == 0 && !r.truncated,
    );
}

/// Runs the checks against the server at `addr` with `records` records and `ops`
/// operations per workload. Empties the server first (FLUSHALL).
pub fn check(
    addr: &str,
    records: i64,
    ops: i64,
    threads: usize,
    commands: Commands,
) -> Result<Report, String> {
    let mut report = Report::default();
    let options = Options {
        addr: addr.to_string(),
        threads,
        commands,
        seed: 0x5eed,
        max_time: Duration::from_secs(300),
        validate: true,
    };
    let mut client = RedisClient::connect(addr, commands).map_err(io)?;
    client.call(&[b"FLUSHALL".as_slice()]).map_err(io)?;

    // Load: recordcount records, each indexed.
    let base = CoreWorkload::core("a", records, ops).ok_or("no workload a")?;
    let load = runner::load(&base, &options)?;
    phase_clean(&mut report, &load);
    let dbsize = integer(&mut client, &[b"DBSIZE".as_slice()])?;
    report.add(
        "load: DBSIZE",
        format!("{dbsize:?}"),
        format!("Some({}) (records + _indices)", records + 1),
        dbsize == Some(records + 1),
    );
    let indexed = index_count(&mut client)?;
    report.add(
        "load: entries of _indices",
        format!("{indexed:?}"),
        format!("Some({records})"),
        indexed == Some(records),
    );
    let mut bad = 0;
    let mut record = Record::new();
    for k in 0..records {
        let status = client
            .read(base.key_name(k).as_bytes(), &mut record)
            .map_err(io)?;
        bad += i64::from(status != Status::Ok || !runner::whole_record(&base, &record));
    }
    report.add(
        "load: every record has 10 fields field0..field9 of 100 bytes",
        format!("{bad} bad of {records}"),
        "0 bad".into(),
        bad == 0,
    );
    report.phases.push(load);

    // The substitutes answer as YCSB's commands do, where the server has both.
    let mut rng = Rng::new(7);
    let mut other = RedisClient::connect(addr, Commands::Ycsb).map_err(io)?;
    let mut compat = RedisClient::connect(addr, Commands::Compat).map_err(io)?;
    let (mut same, mut compared, mut unsupported) = (0, 0, false);
    for _ in 0..50 {
        let start = base.key_name((rng.next_f64() * records as f64) as i64);
        let a = other.scan_keys(start.as_bytes(), 20).map_err(io)?;
        let b = compat.scan_keys(start.as_bytes(), 20).map_err(io)?;
        match (a, b) {
            (Some(a), Some(b)) => {
                compared += 1;
                same += i32::from(a == b);
            }
            _ => unsupported = true,
        }
    }
    let hmset = other
        .call(&[b"HMSET".as_slice(), b"ycsb-check", b"f", b"v"])
        .map_err(io)?;
    other
        .call(&[b"DEL".as_slice(), b"ycsb-check"])
        .map_err(io)?;
    report.add(
        "ZRANGEBYSCORE .. LIMIT and ZRANGE .. BYSCORE LIMIT return the same keys",
        if unsupported {
            "ZRANGEBYSCORE or ZRANGE BYSCORE not supported by this server".into()
        } else {
            format!("{same} of {compared} equal")
        },
        "all equal (or one command missing)".into(),
        unsupported || same == compared,
    );
    // HMGET (reads of given fields, readallfields=false) gives each field HGETALL gives,
    // and leaves out a field the record lacks.
    let (mut hmget_same, mut hmget_compared) = (0, 0);
    let mut fields: Vec<Vec<u8>> = (0..base.fieldcount).map(CoreWorkload::field_name).collect();
    fields.push(b"nofield".to_vec());
    for _ in 0..50 {
        let key = base.key_name((rng.next_f64() * records as f64) as i64);
        let (mut whole, mut picked) = (Record::new(), Record::new());
        other.read(key.as_bytes(), &mut whole).map_err(io)?;
        let status = other
            .read_fields(key.as_bytes(), Some(&fields), &mut picked)
            .map_err(io)?;
        hmget_compared += 1;
        whole.sort();
        picked.sort();
        hmget_same += i32::from(status == Status::Ok && whole == picked && !whole.is_empty());
    }
    report.add(
        "HMGET of every field (and one missing) returns what HGETALL returns",
        format!("{hmget_same} of {hmget_compared} equal"),
        "all equal".into(),
        hmget_same == hmget_compared,
    );
    report.add(
        "HMSET supported",
        format!("{hmset:?}"),
        "Simple(\"OK\") on Redis".into(),
        true,
    );

    // C: reads only; the most popular key is chosen with probability ~1/ZETAN.
    let c = CoreWorkload::core("c", records, ops).ok_or("no workload c")?;
    let run_c = runner::run(&c, &options)?;
    phase_clean(&mut report, &run_c);
    let chooser = ScrambledZipfian::new(0, records);
    let keys = &run_c.checks.read_keys;
    let mut counts: HashMap<i64, usize> = HashMap::new();
    for &k in keys {
        *counts.entry(k).or_default() += 1;
    }
    for rank in 0..3 {
        let key = chooser.key_of_rank(rank);
        let p = chooser.rank_probability(rank);
        let got = counts.get(&key).copied().unwrap_or(0) as f64 / keys.len().max(1) as f64;
        report.add(
            &format!("C: frequency of the zipfian rank-{rank} key"),
            format!("{:.4} over {} reads", got, keys.len()),
            format!(
                "{p:.4} (YCSB's sampler; rank 0: 1/ZETAN = {:.4})",
                1.0 / SCRAMBLED_ZETAN
            ),
            key < records && (got - p).abs() < tol(p, keys.len()) + 2.0 / records as f64,
        );
    }
    let mut top: Vec<i64> = (0..10).map(|r| chooser.key_of_rank(r)).collect();
    top.sort_unstable();
    top.dedup();
    let top10: usize = top
        .iter()
        .map(|k| counts.get(k).copied().unwrap_or(0))
        .sum();
    let p10 = chooser.rank_cdf(9);
    let got10 = top10 as f64 / keys.len().max(1) as f64;
    // Other ranks folding onto these keys add about one key's uniform share each.
    let fold = top.len() as f64 / records as f64;
    report.add(
        "C: share of reads on the keys of zipfian ranks 0-9",
        format!("{got10:.4}"),
        format!("{p10:.4} + up to {fold:.4} from hash folding"),
        got10 > p10 - tol(p10, keys.len()) && got10 < p10 + fold + tol(p10, keys.len()),
    );
    report.phases.push(run_c);

    for letter in ["a", "b", "f"] {
        let w = CoreWorkload::core(letter, records, ops).ok_or("no workload")?;
        let r = runner::run(&w, &options)?;
        phase_clean(&mut report, &r);
        report.phases.push(r);
    }

    // D: reads go to the newest keys; inserts grow the database.
    let d = CoreWorkload::core("d", records, ops).ok_or("no workload d")?;
    let run_d = runner::run(&d, &options)?;
    phase_clean(&mut report, &run_d);
    let inserted = run_d
        .ops
        .iter()
        .find(|s| s.op == runner::Op::Insert)
        .map_or(0, |s| s.count as i64);
    let dbsize = integer(&mut client, &[b"DBSIZE".as_slice()])?;
    report.add(
        "D: DBSIZE after the run",
        format!("{dbsize:?}"),
        format!(
            "Some({}) (records + inserts + _indices)",
            records + inserted + 1
        ),
        dbsize == Some(records + inserted + 1),
    );
    let reads = &run_d.checks;
    let n = reads.read_keys.len();
    let newest = reads
        .read_keys
        .iter()
        .zip(&reads.read_limits)
        .filter(|(k, l)| k == l)
        .count();
    let recent = reads
        .read_keys
        .iter()
        .zip(&reads.read_limits)
        .filter(|(k, l)| **l - **k < records / 100)
        .count();
    // The sampler's law at each read's key count (the count grows with the inserts).
    let mut limits = reads.read_limits.clone();
    limits.sort_unstable();
    let mut latest = Zipfian::new(0, records - 2, ZIPFIAN_CONSTANT, None);
    let (mut p_newest, mut p_recent) = (0.0, 0.0);
    for &limit in &limits {
        latest.grow(limit);
        p_newest += latest.probability(0);
        p_recent += latest.cdf(records / 100 - 1);
    }
    p_newest /= n.max(1) as f64;
    p_recent /= n.max(1) as f64;
    let got = newest as f64 / n.max(1) as f64;
    report.add(
        "D: reads of the newest acknowledged key",
        format!("{got:.4} over {n} reads"),
        format!("about {p_newest:.4} (1/zeta(n, 0.99), n = keys at each read)"),
        (got - p_newest).abs() < tol(p_newest, n),
    );
    let got_recent = recent as f64 / n.max(1) as f64;
    report.add(
        "D: reads within the newest 1 % of keys",
        format!("{got_recent:.4}"),
        format!("about {p_recent:.4}"),
        (got_recent - p_recent).abs() < tol(p_recent, n),
    );
    report.phases.push(run_d);

    // E: scans of at most maxscanlength records, in key-hash order.
    let e = CoreWorkload::core("e", records, ops / 10).ok_or("no workload e")?;
    let run_e = runner::run(&e, &options)?;
    phase_clean(&mut report, &run_e);
    let s = &run_e.checks;
    report.add(
        "E: scans longer than asked (max 100) / out of key-hash order",
        format!(
            "{} / {} of {} scans ({} returned the full length)",
            s.scans_too_long, s.scans_out_of_order, s.scans, s.scans_full
        ),
        "0 / 0".into(),
        s.scans > 0 && s.scans_too_long == 0 && s.scans_out_of_order == 0,
    );
    report.phases.push(run_e);

    // Delete: DEL + ZREM, then the record is gone.
    let victim = base.key_name(0);
    let deleted = client.delete(victim.as_bytes()).map_err(io)?;
    let after = client.read(victim.as_bytes(), &mut record).map_err(io)?;
    report.add(
        "delete: DEL + ZREM, then read",
        format!("{deleted:?}, read {after:?}"),
        "Ok, read Error".into(),
        deleted == Status::Ok && after == Status::Error,
    );
    Ok(report)
}
