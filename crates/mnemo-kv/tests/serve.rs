//! The server over real loopback sockets, with a fake in-memory engine standing in for the
//! storage engine that does not exist yet. Checks the connection layer: pipelining, many
//! clients, group commit (replies only after a commit), QUIT, and real clients
//! (redis-cli, redis-benchmark) when Debian's redis-tools are installed.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mnemo_kv::server::{Effect, Engine, EventLoop, Request, Server, SessionConfig};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{errors, parse_i64, CommandId, Encoder};

/// GET / SET / INCR / DEL / DBSIZE / FLUSHALL / CONFIG GET over a map; counts commits.
#[derive(Default)]
struct FakeEngine {
    map: HashMap<Bytes, Bytes>,
    commits: Arc<AtomicU64>,
}

impl Engine for FakeEngine {
    type Error = std::convert::Infallible;

    fn begin(&mut self) {}

    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        let args = request.command.args();
        let wrote = Effect {
            wrote: true,
            ..Effect::default()
        };
        match (request.spec.id, args) {
            (CommandId::Set, [_, key, value]) => {
                self.map.insert(key.clone(), value.clone());
                reply.simple(b"OK");
                wrote
            }
            (CommandId::Get, [_, key]) => {
                match self.map.get(key) {
                    Some(value) => reply.bulk(value),
                    None => reply.null_bulk(),
                }
                Effect::default()
            }
            (CommandId::Incr, [_, key]) => {
                let current = self.map.get(key).map_or(Some(0), |value| parse_i64(value));
                match current.and_then(|value| value.checked_add(1)) {
                    Some(next) => {
                        self.map.insert(key.clone(), Bytes::from(next.to_string()));
                        reply.integer(next);
                        wrote
                    }
                    None => {
                        reply.error(errors::NOT_INTEGER.as_bytes());
                        Effect::default()
                    }
                }
            }
            (CommandId::Del, [_, keys @ ..]) => {
                let removed = keys
                    .iter()
                    .filter(|key| self.map.remove(*key).is_some())
                    .count();
                reply.integer(i64::try_from(removed).unwrap_or(i64::MAX));
                wrote
            }
            (CommandId::Dbsize, _) => {
                reply.integer(i64::try_from(self.map.len()).unwrap_or(i64::MAX));
                Effect::default()
            }
            (CommandId::Flushall, _) => {
                self.map.clear();
                reply.simple(b"OK");
                wrote
            }
            (CommandId::ConfigGet, _) => {
                reply.map_len(0);
                Effect::default()
            }
            _ => {
                reply.error(b"ERR not supported by the fake engine");
                Effect::default()
            }
        }
    }

    fn commit(&mut self) -> Result<(), Self::Error> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn finish_read_only(&mut self) {}
}

fn start() -> (Server, Arc<AtomicU64>) {
    let engine = FakeEngine::default();
    let commits = Arc::clone(&engine.commits);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let server = Server::start(listener, engine, SessionConfig::default()).expect("start");
    (server, commits)
}

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.local_addr()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
}

fn read_exactly(stream: &mut TcpStream, len: usize) -> String {
    let mut bytes = vec![0u8; len];
    stream.read_exact(&mut bytes).expect("reply");
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn pipelined_requests_in_order() {
    let (server, commits) = start();
    let mut stream = connect(&server);
    stream
        .write_all(b"SET a 1\r\nPING\r\nGET a\r\nINCR n\r\nINCR n\r\nGET\r\nGET nosuch\r\n")
        .expect("write");
    let expected = "+OK\r\n+PONG\r\n$1\r\n1\r\n:1\r\n:2\r\n-ERR wrong number of arguments for 'get' command\r\n$-1\r\n";
    assert_eq!(read_exactly(&mut stream, expected.len()), expected);
    assert!(commits.load(Ordering::SeqCst) >= 1);
    stream.write_all(b"QUIT\r\n").expect("write");
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).expect("closed after QUIT");
    assert_eq!(rest, b"+OK\r\n");
    server.shutdown().expect("clean shutdown");
}

#[test]
fn many_clients_share_commits() {
    let (server, commits) = start();
    let clients = 8;
    let increments = 200;
    let address = server.local_addr();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(address).expect("connect");
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .expect("timeout");
                let mut reply = [0u8; 64];
                for _ in 0..increments {
                    stream
                        .write_all(b"*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n")
                        .expect("write");
                    let read = stream.read(&mut reply).expect("reply");
                    assert_eq!(reply.get(..1), Some(&b":"[..]), "{read} bytes");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("client");
    }
    let mut stream = connect(&server);
    stream.write_all(b"GET counter\r\n").expect("write");
    let total = (clients * increments).to_string();
    let expected = format!("${}\r\n{total}\r\n", total.len());
    assert_eq!(read_exactly(&mut stream, expected.len()), expected);
    let commits = commits.load(Ordering::SeqCst);
    assert!(
        commits <= clients * increments,
        "at most one commit per write"
    );
    eprintln!(
        "{} writes from {clients} clients in {commits} commits",
        clients * increments
    );
    server.shutdown().expect("clean shutdown");
}

/// The loop stops reading a socket after a read shorter than its buffer (the socket is
/// empty then) instead of reading again for `EAGAIN`. Nothing may be stranded by it: a
/// request that arrives in pieces, with pauses between them, is answered once whole; a burst
/// larger than the read buffer is read in full; and a client that sends and then closes its
/// side is closed by the server (its end of file is read), while the others are served.
#[test]
fn requests_in_pieces_bursts_and_hang_ups_are_all_read() {
    let (server, _) = start();
    let mut stream = connect(&server);
    // (The key is "pieces", six bytes: with "$5" the key would be "piece", and the two
    // bytes after it skipped unchecked, as Redis skips them.)
    for piece in [&b"*2\r\n$4\r"[..], b"\nINCR\r\n$6", b"\r\npiece", b"s\r\n"] {
        stream.write_all(piece).expect("write");
        std::thread::sleep(Duration::from_millis(30));
    }
    assert_eq!(read_exactly(&mut stream, 4), ":1\r\n");
    // 4,000 PINGs in one write: more than one read buffer (16 KiB) of requests.
    let burst = "PING\r\n".repeat(4000);
    stream.write_all(burst.as_bytes()).expect("write");
    let replies = "+PONG\r\n".repeat(4000);
    assert_eq!(read_exactly(&mut stream, replies.len()), replies);
    let mut leaving = connect(&server);
    leaving.write_all(b"INCR pieces\r\n").expect("write");
    leaving
        .shutdown(std::net::Shutdown::Write)
        .expect("half close");
    let mut rest = Vec::new();
    leaving
        .read_to_end(&mut rest)
        .expect("the server closes a connection whose client hung up");
    assert!(rest.is_empty() || rest == b":2\r\n", "{rest:?}");
    stream.write_all(b"GET pieces\r\n").expect("write");
    let got = read_exactly(&mut stream, 4);
    assert!(got == "$1\r\n", "{got:?}");
    server.shutdown().expect("clean shutdown");
}

#[test]
fn protocol_error_closes_the_connection() {
    let (server, _) = start();
    let mut stream = connect(&server);
    stream.write_all(b"PING\r\n*1\r\n$x\r\n").expect("write");
    let mut all = Vec::new();
    stream.read_to_end(&mut all).expect("closed");
    assert_eq!(
        all,
        b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"
    );
    server.shutdown().expect("clean shutdown");
}

/// The loop can run on the caller's thread with a borrowed engine (one that borrows its heap),
/// and is stopped from another thread.
#[test]
fn event_loop_with_a_borrowed_engine() {
    let mut engine = FakeEngine::default();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let (event_loop, stopper) = EventLoop::new(listener, SessionConfig::default()).expect("loop");
    let address = event_loop.local_addr();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut stream = TcpStream::connect(address).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            stream.write_all(b"SET kept yes\r\n").expect("write");
            assert_eq!(read_exactly(&mut stream, 5), "+OK\r\n");
            stopper.stop().expect("stop");
        });
        event_loop.run(&mut engine).expect("clean stop");
    });
    assert_eq!(
        engine.map.get(&b"kept"[..]).map(|value| &value[..]),
        Some(&b"yes"[..])
    );
}

/// Backpressure: a client that pipelines GETs and reads nothing makes the server stop reading
/// it once its unsent replies reach the output limit, instead of buffering every reply. Other
/// clients are served meanwhile; once the client reads, every reply arrives, complete and in
/// order; and the server never buffered more than the limit plus one wake-up's replies.
#[test]
fn a_client_that_does_not_read_stalls_itself_not_the_server() {
    const LIMIT: usize = 2 << 20;
    const VALUE: usize = 1024;
    const GETS: usize = 40_000;
    let value = vec![b'v'; VALUE];
    let mut reply = format!("${VALUE}\r\n").into_bytes();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\n");
    // Replies to 40,000 GETs: ~41 MB, 20 times the limit.
    let total = reply.len() * GETS;
    // One wake-up takes at most this many requests from a connection.
    let bound =
        (LIMIT + mnemo_kv::server::limits::REQUESTS_PER_CONNECTION_WAKEUP * reply.len()) as u64;

    let mut engine = FakeEngine::default();
    engine
        .map
        .insert(Bytes::from_static(b"k"), Bytes::from(value));
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let (mut event_loop, stopper) =
        EventLoop::new(listener, SessionConfig::default()).expect("loop");
    event_loop.set_output_buffer_limit(LIMIT);
    let stats = event_loop.stats();
    let address = event_loop.local_addr();
    /// Stops the loop when the test ends, failed or not, so the scope can end.
    struct StopOnDrop(mnemo_kv::server::Stopper);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            let _ = self.0.stop();
        }
    }
    std::thread::scope(|scope| {
        scope.spawn(|| event_loop.run(&mut engine).expect("clean stop"));
        let _stop = StopOnDrop(stopper);

        let mut greedy = TcpStream::connect(address).expect("connect");
        greedy
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut writer = greedy.try_clone().expect("clone");
        // Writes every request without reading; blocks once the server stops reading it.
        let sender = scope.spawn(move || {
            let request = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".repeat(1000);
            for _ in 0..GETS / 1000 {
                writer.write_all(&request).expect("write requests");
            }
        });

        // Wait until the server holds the client back, then a little longer.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while stats.output_limit_pauses.load(Ordering::Relaxed) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the server never paused the client"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        let buffered = stats.output_buffer_bytes.load(Ordering::Relaxed);
        assert!(
            buffered <= bound,
            "{buffered} reply bytes buffered while the client reads nothing (bound {bound})"
        );
        // (Whether the writer is blocked by now depends on the kernel's socket buffers,
        // which hold up to several MB of requests on loopback.)

        // Another client is served while the first is stalled.
        let mut other = TcpStream::connect(address).expect("connect");
        other
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        other.write_all(b"PING\r\nSET x 1\r\n").expect("write");
        assert_eq!(read_exactly(&mut other, 12), "+PONG\r\n+OK\r\n");

        // Now read everything: every reply, whole and in order.
        let mut received = vec![0u8; total];
        greedy.read_exact(&mut received).expect("every reply");
        sender.join().expect("writer");
        for (at, got) in received.chunks(reply.len()).enumerate() {
            assert!(got == &reply[..], "reply {at} differs");
        }
        let peak = stats.output_buffer_peak.load(Ordering::Relaxed);
        assert!(
            peak <= bound,
            "a connection had {peak} reply bytes buffered (bound {bound})"
        );
        eprintln!(
            "backpressure: {total} reply bytes sent, at most {peak} buffered (limit {LIMIT}), {} pauses",
            stats.output_limit_pauses.load(Ordering::Relaxed)
        );
    });
}

/// redis-cli and redis-benchmark (Debian's redis-tools) against the server, if installed.
#[test]
fn real_clients() {
    if Command::new("redis-benchmark")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "redis-tools is not installed and MNEMO_REQUIRE_TOOLS=1 (apt-get install redis-tools)"
        );
        eprintln!(
            "redis-tools not installed: real-client test skipped (apt-get install redis-tools)"
        );
        return;
    }
    let (server, commits) = start();
    let port = server.local_addr().port().to_string();
    let cli = Command::new("redis-cli")
        .args(["-p", &port, "SET", "greeting", "hello"])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "OK");
    let cli = Command::new("redis-cli")
        .args(["-p", &port, "GET", "greeting"])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "hello");
    let cli = Command::new("redis-cli")
        .args(["-p", &port, "-3", "PING"])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), "PONG");

    let before = commits.load(Ordering::SeqCst);
    let bench = Command::new("redis-benchmark")
        .args([
            "-p",
            &port,
            "-t",
            "set,get,incr",
            "-n",
            "20000",
            "-c",
            "20",
            "-q",
        ])
        .output()
        .expect("redis-benchmark");
    assert!(
        bench.status.success(),
        "{}",
        String::from_utf8_lossy(&bench.stderr)
    );
    // -q still prints progress, separated by CRs; keep the final line of each test.
    let output: Vec<String> = String::from_utf8_lossy(&bench.stdout)
        .split(['\r', '\n'])
        .filter(|line| line.contains("requests per second"))
        .map(|line| line.trim().to_owned())
        .collect();
    assert_eq!(output.len(), 3, "{output:?}");
    let output = output.join("\n");
    let commits = commits.load(Ordering::SeqCst) - before;
    // Fake engine, nothing durable: these numbers measure the connection layer alone.
    eprintln!(
        "redis-benchmark against the fake engine ({commits} commits for 40000 writes):\n{output}"
    );
    server.shutdown().expect("clean shutdown");
}
