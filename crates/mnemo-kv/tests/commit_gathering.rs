//! Commit gathering (`src/server/gather.rs`) over real loopback sockets, with a fake engine
//! whose commit sleeps as an `fdatasync` on a disk would: quick clients behind slow commits
//! share them; a client that thinks between requests is not waited for; replies still
//! leave only after the commit that covers them.

mod loop_thread;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use loop_thread::{connect, LoopThread};
use mnemo_kv::server::{Effect, Engine, Request};
use mnemo_resp::{CommandId, Encoder};

/// Counts what it is asked to do; a commit sleeps `commit` and then marks the writes of the
/// batch durable.
struct SlowCommits {
    commit: Duration,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    commits: AtomicU64,
    writes: AtomicU64,
    /// Writes covered by a finished commit (a SET's reply is its write's number: the client
    /// checks it is covered when the reply arrives).
    durable: AtomicU64,
}

impl Engine for SlowCommits {
    type Error = std::convert::Infallible;

    fn begin(&mut self) {}

    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        match request.spec.id {
            CommandId::Set => {
                let number = self.counts.writes.fetch_add(1, Ordering::SeqCst) + 1;
                reply.integer(i64::try_from(number).unwrap_or(i64::MAX));
                Effect {
                    wrote: true,
                    ..Effect::default()
                }
            }
            _ => {
                reply.simple(b"OK");
                Effect::default()
            }
        }
    }

    fn commit(&mut self) -> Result<(), Self::Error> {
        thread::sleep(self.commit);
        self.counts.commits.fetch_add(1, Ordering::SeqCst);
        let durable = self.counts.writes.load(Ordering::SeqCst);
        self.counts.durable.store(durable, Ordering::SeqCst);
        Ok(())
    }

    fn finish_read_only(&mut self) {}
}

/// The loop and its fake engine's counts.
struct Running {
    lp: LoopThread,
    counts: Arc<Counts>,
}

fn start(commit: Duration, gathering: bool) -> Running {
    let counts = Arc::new(Counts::default());
    let engine = SlowCommits {
        commit,
        counts: Arc::clone(&counts),
    };
    let lp = LoopThread::start(engine, |event_loop| {
        event_loop.set_commit_gathering(gathering)
    });
    Running { lp, counts }
}

const SET: &[u8] = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";

/// Reads one integer reply (a write's number).
fn integer(stream: &mut TcpStream) -> u64 {
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        stream.read_exact(&mut byte).expect("reply");
        reply.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&reply);
    text.trim_start_matches(':')
        .trim_end()
        .parse()
        .unwrap_or_else(|_| panic!("integer reply, got {text:?}"))
}

/// Sends SET and reads its reply.
fn set(stream: &mut TcpStream) -> u64 {
    stream.write_all(SET).expect("send");
    integer(stream)
}

/// A client's time per reply in [`closed_loop`].
const CLIENT_WORK: Duration = Duration::from_micros(100);

/// One client thread driving `clients` connections as redis-benchmark does: each
/// connection's reply is read in turn and its next request sent at once, `rounds` times.
/// Returns the commits the loop made; checks every reply left after a commit covering its
/// write.
fn closed_loop(running: &Running, clients: usize, rounds: usize) -> u64 {
    let mut streams: Vec<TcpStream> = (0..clients).map(|_| connect(running.lp.addr)).collect();
    for stream in &mut streams {
        stream.write_all(SET).expect("send");
    }
    for round in 0..rounds {
        for stream in &mut streams {
            let number = integer(stream);
            assert!(
                running.counts.durable.load(Ordering::SeqCst) >= number,
                "the reply to write {number} left before its commit"
            );
            if round + 1 < rounds {
                // The client's own work per reply (redis-benchmark's is a few microseconds
                // for each of fifty connections): the requests come back spread out.
                let start = std::time::Instant::now();
                while start.elapsed() < CLIENT_WORK {
                    std::hint::spin_loop();
                }
                stream.write_all(SET).expect("send");
            }
        }
    }
    running.counts.commits.load(Ordering::SeqCst)
}

#[test]
fn quick_clients_behind_slow_commits_share_them() {
    const CLIENTS: usize = 10;
    const ROUNDS: usize = 30;
    // Ten clients' work (1 ms) fits in the longest wait (4 ms), with room for a loaded
    // machine.
    let commit = Duration::from_millis(20);
    let on = start(commit, true);
    let gathered = closed_loop(&on, CLIENTS, ROUNDS);
    let gathers = on.lp.stats.commit_gathers.load(Ordering::SeqCst);
    on.lp.stop();
    let off = start(commit, false);
    let alone = closed_loop(&off, CLIENTS, ROUNDS);
    assert_eq!(off.lp.stats.commit_gathers.load(Ordering::SeqCst), 0);
    off.lp.stop();
    let writes = (CLIENTS * ROUNDS) as f64;
    eprintln!(
        "{CLIENTS} clients x {ROUNDS} writes, 20 ms commits: {gathered} commits gathering \
         ({gathers} waits), {alone} without"
    );
    assert!(gathers > 0, "no batch waited");
    // Gathering: about one commit per round (all ten clients in it).
    assert!(
        writes / gathered as f64 >= 0.7 * CLIENTS as f64,
        "{gathered} commits for {writes} writes: the clients were not gathered"
    );
    // Without it the clients split into cohorts, each waiting for two commits a request.
    assert!(
        alone as f64 >= 1.3 * gathered as f64,
        "without gathering {alone} commits, with it {gathered}: the comparison shows nothing"
    );
}

#[test]
fn a_client_that_thinks_is_not_waited_for() {
    let commit = Duration::from_millis(4);
    let running = start(commit, true);
    let addr = running.lp.addr;
    // One client writes once every 60 ms, the other back to back.
    let thinker = thread::spawn(move || {
        let mut stream = connect(addr);
        for _ in 0..8 {
            set(&mut stream);
            thread::sleep(Duration::from_millis(60));
        }
    });
    let mut busy = connect(addr);
    let started = std::time::Instant::now();
    let mut writes = 0;
    while !thinker.is_finished() {
        set(&mut busy);
        writes += 1;
    }
    thinker.join().expect("thinker");
    let timeouts = running
        .lp
        .stats
        .commit_gather_timeouts
        .load(Ordering::SeqCst);
    eprintln!(
        "{writes} back-to-back writes in {:?} beside a thinking client: {timeouts} waits ran out",
        started.elapsed()
    );
    running.lp.stop();
    // The thinker is waited for at most once after each of its few quick returns (never,
    // here: it is never quick), not after each of its eight writes.
    assert!(
        timeouts <= 2,
        "{timeouts} waits ran out for a client that thinks 60 ms between writes"
    );
}
