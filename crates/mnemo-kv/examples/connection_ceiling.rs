//! The connection layer's ceiling: redis-benchmark against `Server` with an engine that does
//! no work (SET answers +OK, GET answers nil, every write "commits" instantly), side by side
//! with redis-server without persistence, in the same run. Whatever the storage engine costs
//! comes on top of this, so it bounds what `mnemo serve` can reach against Redis.
//!
//! `cargo run --release -p mnemo-kv --example connection_ceiling` (needs Debian's
//! redis-server and redis-tools).

use std::net::TcpListener;
use std::process::Command;

use mnemo_kv::server::{Effect, Engine, Request, Server, SessionConfig};
use mnemo_resp::command::Flags;
use mnemo_resp::{CommandId, Encoder};
use mnemo_testkit::redis::RedisServer;

struct NoWork;

impl Engine for NoWork {
    type Error = std::convert::Infallible;
    fn begin(&mut self) {}
    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        match request.spec.id {
            CommandId::Get => reply.null_bulk(),
            CommandId::ConfigGet => reply.map_len(0),
            _ => reply.simple(b"OK"),
        }
        Effect {
            wrote: request.spec.flags.contains(Flags::WRITE),
            ..Effect::default()
        }
    }
    fn commit(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
    fn finish_read_only(&mut self) {}
}

/// Requests per second per test, from redis-benchmark's CSV output.
fn bench(port: u16, clients: &str) -> Vec<(String, f64)> {
    let output = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-t",
            "set,get",
            "-n",
            "100000",
            "-c",
            clients,
            "--csv",
        ])
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split(',').map(|field| field.trim_matches('"'));
            Some((fields.next()?.to_owned(), fields.next()?.parse().ok()?))
        })
        .collect()
}

fn main() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let server = Server::start(listener, NoWork, SessionConfig::default()).expect("start");
    let ours_port = server.local_addr().port();
    let redis = RedisServer::start(&[]).expect("redis-server");
    let redis_port = redis.port();
    for clients in ["1", "50"] {
        let ours = bench(ours_port, clients);
        let theirs = bench(redis_port, clients);
        for ((test, ours), (_, theirs)) in ours.iter().zip(&theirs) {
            println!(
                "-c {clients:>2} {test}: mnemo connection layer {ours:>9.0}/s, redis (no persistence) {theirs:>9.0}/s, ratio {:.2}",
                ours / theirs
            );
        }
    }
    drop(redis);
    server.shutdown().expect("shutdown");
}
