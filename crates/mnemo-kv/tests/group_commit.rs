//! The kv server's group commit under a controlled scheduler, with crash images (issue 19).
//!
//! Built only with `--cfg mnemo_shuttle` (run `scripts/test-shuttle.sh`): the heap's locks
//! (mnemo-heap `src/sync.rs`) and the write-ahead policy's locks and threads (mnemo-pmem
//! `src/conc.rs`) are shuttle's there, so one seeded scheduler decides every interleaving of
//! the threads below.
//!
//! The server as `mnemo serve` runs it on a disk with `MNEMO_WAL_PRIVATE=1
//! MNEMO_DEFER_ACKS=1`, the sockets aside: a pool mapped copy-on-write on the testkit's
//! page-cache medium (torn at 512-byte sectors) syncs through the write-ahead policy, whose
//! own syncer thread (and checkpoint threads) make the records durable
//! ([`Engine::defer_acks`]). Several client threads send commands concurrently; the server
//! thread gathers what has arrived from every client into one batch, runs it with the real
//! batch runner ([`mnemo_kv::server::run_batch`]: one transaction, one commit) on the real
//! engine, and hands the replies over only when [`AckQueue`] (the event loop's own rule)
//! releases them, after the storage's durable mark covers the batch. A client acknowledges an
//! operation when its replies arrive. A second mode runs `mnemo serve`'s default instead: the
//! pool mapped shared, deferred acknowledgements refused, each commit durable when it returns
//! (the server thread leads the write-ahead file's group commit and runs the checkpoints it
//! owes), the replies released after it.
//!
//! Each operation of client `c` is `SET k<c> <j>`, `INCR total`, `RPUSH log <c>:<j>`, in one
//! message: all three land in the same batch, with other clients' operations. Crash points
//! are every sync of the write-ahead file, every sync or fence of the pool file (checkpoints,
//! header writes), every acknowledgement and the end; every crash image (sampled cuts of the pending sectors) is
//! recovered (pool open with write-ahead replay, heap recovery, engine open and its
//! structural check) and must hold the state after some *prefix* of the batches in commit
//! order, whole (no batch half-applied: `total`, every `k<c>` and the `log` list all agree
//! with the same prefix), that includes every operation acknowledged before the crash point.
//!
//! `every_group_commit_mutant_is_caught`: the write-ahead policy's concurrency mutant
//! (`wal.durable_before_sync`, the syncer raising the durable mark before its `fdatasync`),
//! `wal.deferred_durable_early`, and the event loop's `release_unacked` (replies released as
//! the commit returns, before it is durable) each fail an image of some schedule; in the
//! synchronous mode, `wal.ack_before_sync`.
//!
//! A failure prints its schedule; `MNEMO_CONC_REPLAY=pct3:SEED scripts/test-shuttle.sh
//! group_commit` runs it alone; `MNEMO_CONC_SCHEDULES=N` and `MNEMO_CONC_CUTS=N` change the
//! counts.
#![cfg(mnemo_shuttle)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Instant;

use mnemo_heap::testing;
use mnemo_kv::engine::PersistentEngine;
use mnemo_kv::server::{
    run_batch, Ack, AckQueue, Completion, Engine, Request, Session, SessionConfig,
};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Protocol, Reply};
use mnemo_testkit::conc;
use mnemo_testkit::rng::mix64;
use mnemo_testkit::sim::PointKind;
use mnemo_testkit::{pool, Granularity, Medium, SimMedia, SimOptions, SimRng};
use shuttle::sync::{Condvar, Mutex};

/// Client threads.
const CLIENTS: usize = 3;
/// Operations per client.
const OPS: usize = 3;
/// Bytes of the write-ahead file: halves of about 12 KiB, so that epochs switch and the
/// syncer's checkpoint threads run within a schedule.
const WAL_BYTES: u64 = 32 << 10;
/// Pool capacity.
const CAPACITY: u64 = 2 << 20;

/// The medium: the pool mapped copy-on-write (`deferred`: acknowledgements deferred, the
/// syncer thread) or shared (every commit durable when it returns, `mnemo serve`'s default).
fn options(deferred: bool) -> SimOptions {
    SimOptions {
        medium: if deferred {
            Medium::PagePrivate
        } else {
            Medium::PageCache
        },
        granularity: Granularity::Sector,
        wal_bytes: WAL_BYTES,
        ..SimOptions::default()
    }
}

/// A broken variant to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutant {
    /// A named mnemo-pmem mutant (`mnemo_pmem::mutant`), switched on for the run and every
    /// recovery.
    Pmem(&'static str),
    /// The event loop's `release_unacked` (`mnemo_kv::server::mutant`): deferred
    /// acknowledgements granted, but the replies leave as the commit returns, as `net.rs`
    /// runs with that mutant on (its [`AckQueue`] not holding).
    ReleaseUnacked,
}

impl std::fmt::Display for Mutant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mutant::Pmem(name) => f.write_str(name),
            Mutant::ReleaseUnacked => f.write_str("release_unacked"),
        }
    }
}

/// What the clients and the server share: the bytes each client sent and the server has not
/// read, each client's reply bytes, and whether the storage said more became durable.
#[derive(Default)]
struct Wire {
    inbox: VecDeque<(usize, Vec<u8>)>,
    replies: Vec<Vec<u8>>,
    /// The write-ahead syncer's notification since the server last looked.
    woken: bool,
    /// Clients that received every reply.
    done: usize,
}

struct Shared {
    wire: Mutex<Wire>,
    /// The server waits here for requests or the syncer's notification.
    server: Condvar,
    /// The clients wait here for their replies.
    clients: Condvar,
}

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Client `c`'s operation `j`: three commands in one message.
fn operation(c: usize, j: usize) -> Vec<u8> {
    let mut out = encode(&["SET", &format!("k{c}"), &j.to_string()]);
    out.extend(encode(&["INCR", "total"]));
    out.extend(encode(&["RPUSH", "log", &format!("{c}:{j}")]));
    out
}

/// The keyspace after a prefix of the batches.
#[derive(Debug, PartialEq, Eq)]
struct State {
    keys: Vec<Option<usize>>,
    total: usize,
    log: Vec<String>,
}

fn state_after(batches: &[Vec<(usize, usize)>]) -> State {
    let mut s = State {
        keys: vec![None; CLIENTS],
        total: 0,
        log: Vec::new(),
    };
    for batch in batches {
        for &(c, j) in batch {
            s.keys[c] = Some(j);
            s.total += 1;
            s.log.push(format!("{c}:{j}"));
        }
    }
    s
}

fn exec(engine: &mut PersistentEngine<'_>, args: &[&str]) -> Reply {
    let args: Vec<Bytes> = args
        .iter()
        .map(|a| Bytes::from(a.as_bytes().to_vec()))
        .collect();
    engine.execute_args(&args, Protocol::Resp2).0
}

fn bulk_number(reply: Reply, what: &str) -> Result<Option<usize>, String> {
    match reply {
        Reply::NullBulk => Ok(None),
        Reply::Bulk(v) => String::from_utf8_lossy(&v)
            .parse()
            .map(Some)
            .map_err(|_| format!("{what} holds {v:?}")),
        other => Err(format!("{what}: {other:?}")),
    }
}

/// The keyspace of a recovered image.
fn observe(media: SimMedia) -> Result<State, String> {
    let pool = pool::open(media)?.ok_or("no pool in the image")?;
    let heap = testing::recover(Some(pool))?.ok_or("no heap in the image")?;
    let mut engine = PersistentEngine::open(&heap).map_err(|e| format!("engine open: {e}"))?;
    engine
        .check()
        .map_err(|e| format!("invalid keyspace: {e}"))?;
    engine.begin();
    let keys = (0..CLIENTS)
        .map(|c| bulk_number(exec(&mut engine, &["GET", &format!("k{c}")]), "k"))
        .collect::<Result<Vec<_>, _>>()?;
    let total = bulk_number(exec(&mut engine, &["GET", "total"]), "total")?.unwrap_or(0);
    let log = match exec(&mut engine, &["LRANGE", "log", "0", "-1"]) {
        Reply::Array(items) => items
            .into_iter()
            .map(|r| match r {
                Reply::Bulk(v) => Ok(String::from_utf8_lossy(&v).into_owned()),
                other => Err(format!("log element {other:?}")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        other => return Err(format!("LRANGE log: {other:?}")),
    };
    engine.finish_read_only();
    Ok(State { keys, total, log })
}

/// The checker: `found` must be the state after some prefix of `batches` (commit order),
/// holding every operation of `acked`.
fn check(
    found: &State,
    batches: &[Vec<(usize, usize)>],
    acked: &[(usize, usize)],
) -> Result<(), String> {
    let mut count = 0;
    let prefix = (0..=batches.len()).find(|&p| {
        if p > 0 {
            count += batches[p - 1].len();
        }
        count == found.total
    });
    let Some(p) = prefix else {
        return Err(format!(
            "total is {}: no prefix of the {} batches has that many operations",
            found.total,
            batches.len()
        ));
    };
    let want = state_after(&batches[..p]);
    if *found != want {
        return Err(format!(
            "a batch half-applied: found {found:?}, the first {p} batches make {want:?}"
        ));
    }
    for &(c, j) in acked {
        if !batches[..p].iter().any(|b| b.contains(&(c, j))) {
            return Err(format!(
                "client {c}'s operation {j} was acknowledged but is not in the image \
                 (the first {p} of {} batches)",
                batches.len()
            ));
        }
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Totals {
    schedules: u64,
    points: u64,
    images: u64,
    batches: u64,
    checkpoints: u64,
    failures: Vec<String>,
    /// Digests of each schedule's acknowledgements and crash points (replay check).
    digests: Vec<u64>,
}

/// Images per crash point: `MNEMO_CONC_CUTS` or `default`.
fn cuts_per_point(default: usize) -> usize {
    std::env::var("MNEMO_CONC_CUTS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// One execution: the server on this (the main) task, the clients and the write-ahead
/// syncer on tasks of their own; then, if `real`, every crash point's images checked.
fn run_once(
    schedule: &str,
    seed: u64,
    deferred: bool,
    mutant: Option<Mutant>,
    real: bool,
    cuts: usize,
    totals: &StdMutex<Totals>,
) {
    let fail = |what: String| {
        let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
        let mutant = mutant.map(|m| format!(" (mutant {m})")).unwrap_or_default();
        t.failures.push(format!(
            "group commit schedule {schedule}{mutant}: {what} (replay: \
             MNEMO_CONC_REPLAY={schedule} scripts/test-shuttle.sh group_commit)"
        ));
    };
    let media = SimMedia::with_options(CAPACITY, options(deferred));
    let heap = match pool::create(media.clone(), "kv", testing::pool_size(3), CAPACITY)
        .and_then(testing::create)
    {
        Ok(heap) => heap,
        Err(e) => return fail(format!("setup: {e}")),
    };
    let shared = Arc::new(Shared {
        wire: Mutex::new(Wire {
            replies: vec![Vec::new(); CLIENTS],
            ..Wire::default()
        }),
        server: Condvar::new(),
        clients: Condvar::new(),
    });
    // Operations acknowledged, in the order the medium counted them.
    let acks: Arc<StdMutex<Vec<(usize, usize)>>> = Arc::default();
    // Each batch's operations, in commit order.
    let mut batches: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut errors = Vec::new();
    {
        let mut engine = match PersistentEngine::open(&heap) {
            Ok(engine) => engine,
            Err(e) => return fail(format!("engine open: {e}")),
        };
        let notified = Arc::clone(&shared);
        let granted = engine.defer_acks(Arc::new(move || {
            let mut wire = notified.wire.lock().unwrap_or_else(|p| p.into_inner());
            wire.woken = true;
            notified.server.notify_all();
        }));
        if granted != deferred {
            return fail(format!(
                "deferred acknowledgements {} on a {} write-ahead pool",
                if granted { "granted" } else { "refused" },
                if deferred { "private" } else { "shared" }
            ));
        }
        let mut queue = AckQueue::new(granted && mutant != Some(Mutant::ReleaseUnacked));
        media.set_recording(true);
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (shared, media, acks) = (Arc::clone(&shared), media.clone(), Arc::clone(&acks));
                shuttle::thread::spawn(move || {
                    for j in 0..OPS {
                        let mut wire = shared.wire.lock().unwrap_or_else(|p| p.into_inner());
                        wire.inbox.push_back((c, operation(c, j)));
                        shared.server.notify_all();
                        // Three replies: +OK, :N, :N.
                        while wire.replies[c].iter().filter(|&&b| b == b'\n').count() < 3 {
                            wire = shared.clients.wait(wire).unwrap_or_else(|p| p.into_inner());
                        }
                        let reply = std::mem::take(&mut wire.replies[c]);
                        if !reply.starts_with(b"+OK\r\n:") {
                            return Err(format!("client {c} operation {j}: replies {reply:?}"));
                        }
                        // No shuttle call between the two: the medium's count and the list
                        // agree.
                        media.mark_ack();
                        acks.lock().unwrap_or_else(|p| p.into_inner()).push((c, j));
                        if j + 1 == OPS {
                            wire.done += 1;
                            shared.server.notify_all();
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let mut sessions: Vec<Session> = (0..CLIENTS)
            .map(|c| Session::new(c as u64, SessionConfig::default()))
            .collect();
        let deliver = |shared: &Shared,
                       sessions: &mut [Session],
                       acks: Vec<Ack<(Vec<Request>, Vec<Completion>)>>|
         -> Result<(), String> {
            if acks.is_empty() {
                return Ok(());
            }
            let mut wire = shared.wire.lock().unwrap_or_else(|p| p.into_inner());
            for ack in acks {
                let (_, completions) = match ack {
                    Ack::Release(batch) => batch,
                    Ack::Lost(_) => return Err("the write-ahead file failed".into()),
                };
                for completion in completions {
                    let c = completion.session as usize;
                    sessions[c].complete(&completion.reply, completion.close);
                    let out = sessions[c].take_output();
                    wire.replies[c].extend_from_slice(&out);
                }
            }
            shared.clients.notify_all();
            Ok(())
        };
        // The server: as the event loop's wake-up, the held batches released first, then
        // what arrived run as one batch, then released again.
        loop {
            let arrived: Vec<(usize, Vec<u8>)> = {
                let mut wire = shared.wire.lock().unwrap_or_else(|p| p.into_inner());
                while wire.inbox.is_empty() && !wire.woken && wire.done < CLIENTS {
                    wire = shared.server.wait(wire).unwrap_or_else(|p| p.into_inner());
                }
                if wire.inbox.is_empty() && wire.done == CLIENTS {
                    break;
                }
                wire.woken = false;
                wire.inbox.drain(..).collect()
            };
            let mut released = Vec::new();
            queue.release(
                queue.holding().then(|| engine.ack_marks()).flatten(),
                &mut released,
            );
            if let Err(e) = deliver(&shared, &mut sessions, released) {
                errors.push(e);
                break;
            }
            let mut batch = Vec::new();
            for (c, bytes) in arrived {
                sessions[c].receive(&bytes);
                batch.extend(std::iter::from_fn(|| sessions[c].poll_request()));
            }
            if batch.is_empty() {
                continue;
            }
            let ops: Vec<(usize, usize)> = batch
                .iter()
                .filter(|r| r.command.args()[0].eq_ignore_ascii_case(b"SET"))
                .filter_map(|r| {
                    let j = std::str::from_utf8(&r.command.args()[2])
                        .ok()?
                        .parse()
                        .ok()?;
                    Some((r.session as usize, j))
                })
                .collect();
            // Listed before the commit: a crash during it may keep the batch.
            batches.push(ops);
            let completions = match run_batch(&mut engine, &batch) {
                Ok(completions) => completions,
                Err(e) => {
                    errors.push(format!("commit failed: {e}"));
                    break;
                }
            };
            let marks = queue.holding().then(|| engine.ack_marks()).flatten();
            let mut released: Vec<_> = queue
                .committed(marks, (batch, completions))
                .into_iter()
                .collect();
            queue.release(
                queue.holding().then(|| engine.ack_marks()).flatten(),
                &mut released,
            );
            if let Err(e) = deliver(&shared, &mut sessions, released) {
                errors.push(e);
                break;
            }
        }
        for (c, h) in clients.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(format!("client {c} panicked")),
            }
        }
        media.mark_end();
        media.set_recording(false);
        if real {
            let stats = heap.pool().write_ahead();
            let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
            t.batches += batches.len() as u64;
            t.checkpoints += stats.map_or(0, |s| s.checkpoints);
        }
    }
    drop(heap);
    if !errors.is_empty() {
        fail(format!("the run failed: {}", errors.join("; ")));
    }
    if !real {
        return;
    }
    let points = media.take_points();
    let acks = acks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut digest = acks
        .iter()
        .fold(0u64, |d, &(c, j)| mix64(d ^ (c * 16 + j) as u64));
    for batch in &batches {
        digest = mix64(
            digest
                ^ batch
                    .iter()
                    .fold(7, |d, &(c, j)| mix64(d ^ (c * 16 + j) as u64)),
        );
    }
    for point in &points {
        digest =
            mix64(digest ^ mix64(format!("{:?}", point.kind).len() as u64 ^ point.acked as u64));
    }
    totals
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .digests
        .push(digest);
    let mut rng = SimRng::new(seed ^ 0x6c0_ffee);
    let (mut npoints, mut nimages) = (0u64, 0u64);
    let mut run_checks = || -> Result<(), String> {
        for (index, point) in points.iter().enumerate() {
            if !matches!(
                point.kind,
                PointKind::Fence(_)
                    | PointKind::FileSync(_)
                    | PointKind::PoolSync(_)
                    | PointKind::Ack(_)
                    | PointKind::End
            ) {
                continue;
            }
            npoints += 1;
            let acked = &acks[..point.acked.min(acks.len())];
            for cut in conc::sample_cuts(point.unit_count(), cuts, &mut rng) {
                nimages += 1;
                let (image, file) = conc::images_with_file(point, &cut);
                let media =
                    SimMedia::from_images(&image, file.as_deref(), CAPACITY, options(deferred));
                observe(media)
                    .and_then(|found| check(&found, &batches, acked))
                    .map_err(|e| {
                        format!(
                            "point {index} ({}, {} acknowledged), {cut}: {e}",
                            point.kind, point.acked
                        )
                    })?;
            }
        }
        Ok(())
    };
    let checked = run_checks();
    let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
    t.points += npoints;
    t.images += nimages;
    drop(t);
    if let Err(e) = checked {
        fail(e);
    }
}

/// Run `count` schedules (or only `MNEMO_CONC_REPLAY`'s) from `base`, `mutant` on; stop at the
/// first failure if `stop`.
fn explore(
    base: u64,
    count: u64,
    deferred: bool,
    mutant: Option<Mutant>,
    stop: bool,
    cuts: usize,
) -> Totals {
    let totals = Arc::new(StdMutex::new(Totals::default()));
    let schedules = match conc::replay_target() {
        Some(one) => vec![one],
        None => conc::schedules(base, count),
    };
    for schedule in schedules {
        let out = Arc::clone(&totals);
        let seed = schedule.seed;
        let label = schedule.to_string();
        let body = move |real: bool| {
            let run = || run_once(&label, seed, deferred, mutant, real, cuts, &out);
            match mutant {
                Some(Mutant::Pmem(name)) => mnemo_pmem::mutant::with(name, run),
                _ => run(),
            }
        };
        let result = conc::run(schedule, body);
        let mut t = totals.lock().unwrap_or_else(|p| p.into_inner());
        t.schedules += 1;
        if let Err(panic) = result {
            t.failures.push(format!(
                "group commit schedule {schedule}: a thread panicked: {panic}"
            ));
        }
        if stop && !t.failures.is_empty() {
            break;
        }
    }
    let totals = std::mem::take(&mut *totals.lock().unwrap_or_else(|p| p.into_inner()));
    totals
}

/// Random and PCT schedules per run of each mode (`MNEMO_CONC_SCHEDULES` changes both).
const SCHEDULES_DEFERRED: u64 = 150;
const SCHEDULES_SYNCHRONOUS: u64 = 100;

fn explore_and_report(deferred: bool, base: u64, count: u64) {
    if std::env::var("MNEMO_CONC_REPLAY").is_ok_and(|v| v.trim().starts_with("bounded")) {
        return;
    }
    let started = Instant::now();
    let totals = explore(
        base,
        conc::schedule_count(count),
        deferred,
        None,
        false,
        cuts_per_point(3),
    );
    let mode = if deferred {
        "deferred acknowledgements"
    } else {
        "synchronous commits"
    };
    println!(
        "concurrency group commit ({mode}): {} schedules (random, PCT depth 2 and 3), {} \
         batches, {} checkpoints, {} crash points (fences, file syncs, acknowledgements), {} \
         crash images recovered and checked, {} failures, {:.1} s",
        totals.schedules,
        totals.batches,
        totals.checkpoints,
        totals.points,
        totals.images,
        totals.failures.len(),
        started.elapsed().as_secs_f64()
    );
    for f in totals.failures.iter().take(5) {
        println!("  {f}");
    }
    assert!(
        totals.failures.is_empty(),
        "{} failures",
        totals.failures.len()
    );
    // Batches gather several clients' operations (fewer batches than operations), and the
    // write-ahead file switches epochs: the paths under test ran.
    if conc::replay_target().is_none() {
        assert!(totals.batches < totals.schedules * (CLIENTS * OPS) as u64);
    }
    assert!(totals.checkpoints > 0 && totals.images > 0);
}

/// `MNEMO_WAL_PRIVATE=1 MNEMO_DEFER_ACKS=1`: the syncer thread, replies held until durable.
#[test]
fn group_commit_under_random_and_pct_schedules() {
    explore_and_report(true, 0x9c0_3317, SCHEDULES_DEFERRED);
}

/// `mnemo serve`'s default on a disk: the pool mapped shared, each batch's commit durable
/// when it returns (the server thread leads the write-ahead file's group commit and runs the
/// checkpoints it owes), replies released after it.
#[test]
fn group_commit_with_synchronous_commits_under_random_and_pct_schedules() {
    explore_and_report(false, 0x5c0_3317, SCHEDULES_SYNCHRONOUS);
}

/// Schedules each mutant gets to be caught in.
const MUTANT_SCHEDULES: u64 = 150;

#[test]
fn every_group_commit_mutant_is_caught() {
    if std::env::var("MNEMO_CONC_REPLAY").is_ok() {
        return;
    }
    let started = Instant::now();
    // Each with the mode it breaks: deferred acknowledgements, or synchronous commits.
    let mut mutants: Vec<(Mutant, bool)> = mnemo_pmem::mutant::CONCURRENCY_MUTANTS
        .iter()
        .map(|&m| (Mutant::Pmem(m), true))
        .collect();
    mutants.push((Mutant::Pmem("wal.deferred_durable_early"), true));
    mutants.push((Mutant::ReleaseUnacked, true));
    mutants.push((Mutant::Pmem("wal.ack_before_sync"), false));
    let mut missed = Vec::new();
    for (mutant, deferred) in mutants {
        let totals = explore(
            0x3c0_3317,
            MUTANT_SCHEDULES,
            deferred,
            Some(mutant),
            true,
            4,
        );
        match totals.failures.first() {
            Some(f) => println!(
                "group commit mutant {mutant}: caught after {} schedules: {f}",
                totals.schedules
            ),
            None => missed.push(mutant.to_string()),
        }
    }
    println!(
        "concurrency group commit mutants: caught in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(missed.is_empty(), "not caught: {missed:?}");
}

/// A schedule replays exactly: twice from its seed, the same batches, acknowledgements and
/// crash points.
#[test]
fn a_group_commit_schedule_replays_exactly() {
    if std::env::var("MNEMO_CONC_REPLAY").is_ok() {
        return;
    }
    // Three schedules of each mode.
    let run = || {
        let mut totals = explore(0x5eed, 3, true, None, false, 1);
        let other = explore(0x5eed, 3, false, None, false, 1);
        totals.failures.extend(other.failures);
        totals.digests.extend(other.digests);
        totals
    };
    let (first, second) = (run(), run());
    assert!(
        first.failures.is_empty() && second.failures.is_empty(),
        "{:?}",
        first.failures
    );
    assert_eq!(first.digests.len(), 6);
    assert_eq!(first.digests, second.digests);
    let distinct: std::collections::HashSet<_> = first.digests.iter().collect();
    assert!(distinct.len() > 1, "the schedules differ from each other");
}

/// The checker itself: a prefix passes, a half-applied batch and a lost acknowledged
/// operation fail.
#[test]
fn the_checker_refuses_half_batches_and_lost_acknowledgements() {
    let batches = vec![vec![(0, 0), (1, 0)], vec![(2, 0), (0, 1)]];
    let one = state_after(&batches[..1]);
    assert!(check(&one, &batches, &[(1, 0)]).is_ok());
    assert!(
        check(&one, &batches, &[(0, 1)]).is_err(),
        "acknowledged, not there"
    );
    let mut half = state_after(&batches[..1]);
    half.total = 3;
    half.keys[2] = Some(0);
    half.log.push("2:0".into());
    assert!(check(&half, &batches, &[]).is_err(), "half of batch 2");
    let mut torn = state_after(&batches);
    torn.keys[0] = Some(0);
    assert!(
        check(&torn, &batches, &[]).is_err(),
        "total of 2 batches, a key of 1"
    );
}
