//! The harness of the differential tests against a real redis-server (`tests/redis_*.rs`, a
//! file per command group): a throwaway redis-server 7.0 and a mnemo server (the real
//! `EventLoop` over a `PersistentEngine` on a pool in a temporary directory, on a thread of
//! its own), both on loopback; [`Pair::connect`] opens one connection to each, and
//! [`Clients::check`] sends the same command on both and records any difference in the
//! replies, errors included. Several connections per server test what is per connection
//! (SELECT, MULTI, WATCH).
//!
//! When `redis-server` is not installed the tests say so and check nothing (they fail instead
//! under `MNEMO_REQUIRE_TOOLS=1`, as `scripts/test.sh` sets).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use mnemo_heap::{Heap, HeapOptions};
use mnemo_kv::engine::PersistentEngine;
use mnemo_kv::server::{EventLoop, SessionConfig, Stopper};
use mnemo_resp::bytes::{Bytes, BytesMut};
use mnemo_resp::{encode_command, Reply, ReplyDecoder};
use mnemo_testkit::redis::RedisServer;

/// A mnemo server on a thread of its own, serving the pool at `path`.
pub struct Mnemo {
    port: u16,
    stopper: Stopper,
    thread: Option<JoinHandle<()>>,
}

impl Mnemo {
    /// Serves the pool at `path` (created if missing) with `databases` databases.
    pub fn start(path: &Path, databases: usize) -> Mnemo {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let (sender, receiver) = mpsc::channel();
        let path: PathBuf = path.to_path_buf();
        let thread = std::thread::spawn(move || {
            let heap = if path.exists() {
                Heap::open_file(&path).expect("open pool")
            } else {
                let options = HeapOptions {
                    lane_count: 2,
                    lane_log_size: 1 << 20,
                    ..HeapOptions::default()
                };
                Heap::create_file(&path, 32 << 20, 256 << 20, &options).expect("create pool")
            };
            let mut engine =
                PersistentEngine::open_with_databases(&heap, databases).expect("open keyspace");
            let config = SessionConfig {
                databases,
                ..SessionConfig::default()
            };
            let (event_loop, stopper) = EventLoop::new(listener, config).expect("event loop");
            sender.send(stopper).expect("send stopper");
            event_loop.run(&mut engine).expect("serve");
        });
        let stopper = receiver.recv().expect("server started");
        Mnemo {
            port,
            stopper,
            thread: Some(thread),
        }
    }

    /// Stops the server and waits for it (the pool is closed cleanly).
    pub fn stop(mut self) {
        self.shutdown();
    }

    pub fn shutdown(&mut self) {
        let _ = self.stopper.stop();
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread");
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A new connection.
    pub fn connect(&self) -> Conn {
        Conn::new(TcpStream::connect(("127.0.0.1", self.port)).expect("connect to mnemo"))
    }
}

impl Drop for Mnemo {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// One client connection, sending commands and decoding replies.
pub struct Conn {
    stream: TcpStream,
    decoder: ReplyDecoder,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        Conn {
            stream,
            decoder: ReplyDecoder::new(),
        }
    }

    /// The socket (to see it closed by the server).
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends one command and waits for its reply.
    pub fn call(&mut self, args: &[Bytes]) -> Reply {
        self.send(args);
        self.reply()
    }

    /// Sends one command without waiting for its reply.
    pub fn send(&mut self, args: &[Bytes]) {
        let mut request = BytesMut::new();
        encode_command(args, &mut request);
        self.stream.write_all(&request).expect("write");
    }

    /// Whether a reply arrives within `wait` (without consuming it).
    pub fn has_reply_within(&mut self, wait: Duration) -> bool {
        if self.decoder.buffered_len() > 0 {
            return true;
        }
        self.stream.set_read_timeout(Some(wait)).expect("timeout");
        let mut buffer = [0u8; 64 * 1024];
        let got = match self.stream.read(&mut buffer) {
            Ok(n) if n > 0 => {
                self.decoder.feed(&buffer[..n]);
                true
            }
            _ => false,
        };
        self.stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        got
    }

    /// Waits for the next reply.
    pub fn reply(&mut self) -> Reply {
        let mut buffer = [0u8; 64 * 1024];
        loop {
            if let Some(reply) = self.decoder.next_reply().expect("valid reply") {
                return reply;
            }
            let read = self.stream.read(&mut buffer).expect("read");
            assert!(read > 0, "the server closed the connection");
            self.decoder.feed(&buffer[..read]);
        }
    }
}

/// A redis-server and a mnemo server side by side.
pub struct Pair {
    pub redis: RedisServer,
    pub mnemo: Mnemo,
    /// Holds the pool.
    pub dir: tempfile::TempDir,
}

impl Pair {
    /// Both servers with Redis's 16 databases; `None` (skipped, saying so) without
    /// redis-server.
    pub fn start(what: &str) -> Option<Pair> {
        Pair::start_with(what, 16)
    }

    /// Both servers with `databases` databases.
    pub fn start_with(what: &str, databases: usize) -> Option<Pair> {
        let count = databases.to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        // SAVE and BGSAVE write Redis's dump.rdb there, not into the source tree.
        let redis_dir = dir.path().to_string_lossy().into_owned();
        let redis =
            RedisServer::start_or_skip(&["--databases", &count, "--dir", &redis_dir], what)?;
        let mnemo = Mnemo::start(&dir.path().join("pool"), databases);
        Some(Pair { redis, mnemo, dir })
    }

    /// mnemo's port.
    pub fn mnemo_port(&self) -> u16 {
        self.mnemo.port()
    }

    /// A connection to each server.
    pub fn connect(&self) -> Clients {
        Clients {
            redis: Conn::new(self.redis.connect()),
            mnemo: self.mnemo.connect(),
            differences: Vec::new(),
        }
    }

    /// Stops mnemo and starts it again on the same pool with `databases` databases (a
    /// restart; Redis keeps running).
    pub fn restart_mnemo(&mut self, databases: usize) {
        self.mnemo.shutdown();
        self.mnemo = Mnemo::start(&self.dir.path().join("pool"), databases);
    }
}

/// One connection to each server, and the differences seen on them.
pub struct Clients {
    pub redis: Conn,
    pub mnemo: Conn,
    pub differences: Vec<String>,
}

/// Splits a command line on spaces; `{sp}` stands for a space, `{empty}` for nothing.
pub fn words(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .map(|w| Bytes::from(w.replace("{sp}", " ").replace("{empty}", "")))
        .collect()
}

impl Clients {
    /// Sends `line` to both servers; records a difference between the replies.
    pub fn check(&mut self, line: &str) {
        self.check_with(line, |reply| reply);
    }

    /// [`Clients::check`], comparing the replies after `normalise` (unordered replies, times).
    pub fn check_with(&mut self, line: &str, normalise: impl Fn(Reply) -> Reply) {
        let args = words(line);
        let expected = normalise(self.redis.call(&args));
        let got = normalise(self.mnemo.call(&args));
        if got != expected {
            self.differences
                .push(format!("{line}: redis {expected:?}, mnemo {got:?}"));
        }
    }

    /// Runs every line with [`Clients::check`].
    pub fn script(&mut self, lines: &[&str]) {
        for line in lines {
            self.check(line);
        }
    }

    /// Sends `line` to both and returns both replies (redis, mnemo), without comparing.
    pub fn both(&mut self, line: &str) -> (Reply, Reply) {
        let args = words(line);
        (self.redis.call(&args), self.mnemo.call(&args))
    }

    /// Fails the test with every difference seen.
    pub fn assert_same(&self) {
        assert!(
            self.differences.is_empty(),
            "{} differences:\n{}",
            self.differences.len(),
            self.differences.join("\n")
        );
    }
}

/// Sorts the elements of an array reply (and of nested arrays one level down: SCAN's keys),
/// for replies whose order is unspecified.
pub fn sorted(reply: Reply) -> Reply {
    let sort = |mut items: Vec<Reply>| {
        items.sort_by_key(|r| format!("{r:?}"));
        items
    };
    match reply {
        Reply::Array(items) => Reply::Array(sort(items)),
        Reply::Set(items) => Reply::Set(sort(items)),
        other => other,
    }
}
