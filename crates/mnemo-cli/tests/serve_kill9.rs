//! Issue 6's durability test: client threads write (SET of unique values, INCR, RPUSH) while
//! the server is killed with SIGKILL at random moments; after every restart each
//! acknowledged write must be there, and nothing unacknowledged may be visible half-done.
//!
//! Per client thread, what was sent and what was acknowledged is known exactly:
//! - `SET t{c}:k{i} v{i}:{padding}`: every acknowledged key holds exactly its value; the one
//!   write possibly in flight at the kill either holds its whole value or is absent.
//! - `INCR t{c}:n`: acknowledged increments <= value <= sent increments.
//! - `RPUSH t{c}:l {i}`: the list is exactly 0, 1, ..., n-1 with acknowledged <= n <= sent.
//!
//! Normal runs do a few cycles; `MNEMO_SOAK=1` does at least 100 (`MNEMO_SOAK_CYCLES=n`
//! sets the count).

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemo_resp::Reply;
use support::{shm_dir, was_clean, Client, Server};

const CLIENTS: usize = 4;
/// Kill cycles in the normal suite.
const CYCLES_QUICK: usize = 6;
/// Kill cycles with MNEMO_SOAK=1.
const CYCLES_SOAK: usize = 100;
/// Bound on writes per client per cycle (the kill normally comes first).
const WRITES_PER_CYCLE_MAX: u64 = 50_000;
/// Keys checked per pipelined round trip.
const VERIFY_CHUNK: usize = 500;

/// What one client thread sent and had acknowledged, across cycles.
#[derive(Clone, Debug, Default)]
struct Ledger {
    /// SETs acknowledged: the next key index is `sets_acked` (keys below are all acked).
    sets_acked: u64,
    /// A SET sent at the kill, not acknowledged: its key index.
    set_in_flight: Option<u64>,
    incr_sent: u64,
    incr_acked: u64,
    push_sent: u64,
    push_acked: u64,
}

fn value(client: usize, i: u64) -> String {
    // Values of varying length (up to ~2 KiB), so a torn write would show.
    let pad = (i as usize * 37 + client * 11) % 2000;
    format!("v{i}:{}", "x".repeat(pad))
}

/// A small deterministic generator (xorshift64*), seeded per run and printed on failure.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One client's writes until the connection dies (the kill) or the bound is reached.
fn write_until_killed(port: u16, id: usize, ledger: &mut Ledger, stop: &AtomicBool, seed: u64) {
    let Ok(mut client) = Client::connect(port) else {
        return;
    };
    let mut rng = Rng(seed | 1);
    for _ in 0..WRITES_PER_CYCLE_MAX {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match rng.below(3) {
            0 => {
                let i = ledger.sets_acked;
                ledger.set_in_flight = Some(i);
                let key = format!("t{id}:k{i}");
                match client.call(&["SET", &key, &value(id, i)]) {
                    Ok(Reply::Simple(_)) => {
                        ledger.sets_acked += 1;
                        ledger.set_in_flight = None;
                    }
                    Ok(other) => panic!("SET {key}: {other:?}"),
                    Err(_) => return,
                }
            }
            1 => {
                ledger.incr_sent += 1;
                match client.call(&["INCR", &format!("t{id}:n")]) {
                    Ok(Reply::Integer(n)) => {
                        ledger.incr_acked += 1;
                        assert!(n as u64 >= ledger.incr_acked, "INCR went backwards");
                    }
                    Ok(other) => panic!("INCR: {other:?}"),
                    Err(_) => return,
                }
            }
            _ => {
                let i = ledger.push_sent;
                ledger.push_sent += 1;
                match client.call(&["RPUSH", &format!("t{id}:l"), &i.to_string()]) {
                    Ok(Reply::Integer(_)) => ledger.push_acked += 1,
                    Ok(other) => panic!("RPUSH: {other:?}"),
                    Err(_) => return,
                }
            }
        }
    }
}

fn as_u64(reply: &Reply) -> Option<u64> {
    match reply {
        Reply::Bulk(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        Reply::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// Checks one client's keys against its ledger; returns the acknowledged writes checked.
/// Afterwards the ledger reflects what the server holds (the in-flight writes that landed
/// count as done), so the next cycle continues from there.
fn verify(client: &mut Client, id: usize, ledger: &mut Ledger, context: &str) -> u64 {
    let mut checked = 0;
    let keys: Vec<u64> = (0..ledger.sets_acked).collect();
    for chunk in keys.chunks(VERIFY_CHUNK) {
        let commands: Vec<Vec<String>> = chunk
            .iter()
            .map(|i| vec!["GET".to_string(), format!("t{id}:k{i}")])
            .collect();
        let replies = client.pipeline(&commands).expect("GET pipeline");
        for (i, reply) in chunk.iter().zip(replies) {
            assert_eq!(
                reply,
                Reply::Bulk(value(id, *i).into()),
                "{context}: acknowledged SET t{id}:k{i} lost or changed"
            );
            checked += 1;
        }
    }
    if let Some(i) = ledger.set_in_flight.take() {
        match client.call(&["GET", &format!("t{id}:k{i}")]).expect("GET") {
            Reply::NullBulk => {}
            Reply::Bulk(found) => {
                assert_eq!(
                    found,
                    value(id, i).as_bytes(),
                    "{context}: unacknowledged SET t{id}:k{i} visible half-done"
                );
                // It landed: later cycles count it as written.
                ledger.sets_acked += 1;
            }
            other => panic!("{context}: GET t{id}:k{i}: {other:?}"),
        }
    }
    let counter = client.call(&["GET", &format!("t{id}:n")]).expect("GET");
    let n = if ledger.incr_sent == 0 {
        0
    } else {
        as_u64(&counter).unwrap_or_else(|| panic!("{context}: counter t{id}:n: {counter:?}"))
    };
    assert!(
        ledger.incr_acked <= n && n <= ledger.incr_sent,
        "{context}: counter t{id}:n = {n}, acknowledged {}, sent {}",
        ledger.incr_acked,
        ledger.incr_sent
    );
    checked += ledger.incr_acked;
    ledger.incr_acked = n;
    ledger.incr_sent = n;
    let list = client
        .call(&["LRANGE", &format!("t{id}:l"), "0", "-1"])
        .expect("LRANGE");
    let Reply::Array(items) = list else {
        panic!("{context}: LRANGE t{id}:l: {list:?}");
    };
    let len = items.len() as u64;
    assert!(
        ledger.push_acked <= len && len <= ledger.push_sent,
        "{context}: list t{id}:l has {len} items, acknowledged {}, sent {}",
        ledger.push_acked,
        ledger.push_sent
    );
    for (at, item) in items.iter().enumerate() {
        assert_eq!(
            as_u64(item),
            Some(at as u64),
            "{context}: list t{id}:l item {at}"
        );
    }
    checked += ledger.push_acked;
    ledger.push_acked = len;
    ledger.push_sent = len;
    checked
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let soak = std::env::var("MNEMO_SOAK").as_deref() == Ok("1");
    let cycles = std::env::var("MNEMO_SOAK_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if soak { CYCLES_SOAK } else { CYCLES_QUICK });
    let seed = std::env::var("MNEMO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("kill -9 durability: {cycles} cycles, {CLIENTS} clients, MNEMO_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let dir = shm_dir();
    let pool = dir.path().join("kv.pool");
    let mut ledgers = vec![Ledger::default(); CLIENTS];
    let mut server = Server::start(&pool, &[]);
    let mut checked_total = 0u64;
    let mut acked_total = 0u64;
    let started = Instant::now();
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let port = server.port;
        let before: u64 = ledgers
            .iter()
            .map(|l| l.sets_acked + l.incr_acked + l.push_acked)
            .sum();
        let threads: Vec<_> = ledgers
            .drain(..)
            .enumerate()
            .map(|(id, mut ledger)| {
                let stop = Arc::clone(&stop);
                let seed = rng.next();
                std::thread::spawn(move || {
                    write_until_killed(port, id, &mut ledger, &stop, seed);
                    ledger
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20 + rng.below(300)));
        server.kill();
        stop.store(true, Ordering::Relaxed);
        ledgers = threads
            .into_iter()
            .map(|t| t.join().expect("client thread"))
            .collect();
        let after: u64 = ledgers
            .iter()
            .map(|l| l.sets_acked + l.incr_acked + l.push_acked)
            .sum();
        acked_total += after - before;
        server = Server::start(&pool, &[]);
        let context = format!("cycle {cycle} (MNEMO_SEED={seed})");
        let mut client = server.client();
        for (id, ledger) in ledgers.iter_mut().enumerate() {
            checked_total += verify(&mut client, id, ledger, &context);
        }
        assert!(
            server.log_text().contains("recovered after a crash"),
            "{context}: the restart did not see a crash:\n{}",
            server.log_text()
        );
    }
    let status = server.terminate();
    assert!(status.success());
    assert!(was_clean(&pool));
    eprintln!(
        "kill -9 durability: {cycles} cycles in {:.1} s, {acked_total} writes acknowledged, {checked_total} acknowledged-write checks, 0 lost",
        started.elapsed().as_secs_f64()
    );
}
