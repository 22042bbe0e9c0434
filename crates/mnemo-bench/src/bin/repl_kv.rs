//! `repl_kv`: replicated key-value SET throughput, `mnemo serve --mirror` against Redis with
//! one replica where each SET is followed by `WAIT 1 0` (Redis's way to know a write reached
//! a replica), in one run.
//!
//! Setups, each started fresh in a temporary directory on /dev/shm, everything on loopback:
//! * `redis+replica, SET+WAIT`: redis-server 7 (no persistence) and a replica
//!   (`--replicaof`); each operation is `SET` and `WAIT 1 0`, pipelined, both replies read.
//! * `redis, SET` (reference): the same primary, no WAIT: what replication costs Redis.
//! * `mnemo mirror syncflush` / `sync`: `mnemo mirror serve` and `mnemo serve --mirror` in
//!   that mode; each operation is a `SET`, acknowledged once durable locally (syncflush) and
//!   at the mirror (both modes).
//! * `mnemo, no mirror` (reference): the same with `--repl-mode local`.
//!
//! Each setup runs `clients` connections (one thread each) for `secs` seconds; rounds
//! alternate the setups. Values 100 bytes, keys random over 10 M. Writes
//! `bench/results/repl-kv.csv`, `.json` (commit, command) and `bench/plots/repl-kv.svg`.
//!
//! usage: `repl_kv <mnemo binary> [clients] [secs] [rounds]` (`scripts/bench-repl-kv.sh`)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemo_bench::plot::bars;
use mnemo_bench::servers::{free_port, wait_port, Proc};
use mnemo_bench::{bench_dir, machine, median, write_csv, write_json};
use mnemo_resp::bytes::BytesMut;
use mnemo_resp::{encode_command, Reply, ReplyDecoder};

fn spawn(cmd: &mut Command) -> Proc {
    Proc(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
    )
}

struct Conn {
    s: TcpStream,
    d: ReplyDecoder,
    out: BytesMut,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_nodelay(true).unwrap();
        Conn {
            s,
            d: ReplyDecoder::new(),
            out: BytesMut::new(),
        }
    }

    fn call(&mut self, commands: &[&[&[u8]]]) -> Vec<Reply> {
        self.out.clear();
        for c in commands {
            encode_command(c, &mut self.out);
        }
        self.s.write_all(&self.out).expect("send");
        let mut replies = Vec::with_capacity(commands.len());
        let mut buf = [0u8; 4096];
        while replies.len() < commands.len() {
            match self.d.next_reply() {
                Ok(Some(r)) => replies.push(r),
                Ok(None) => {
                    let n = self.s.read(&mut buf).expect("receive");
                    assert!(n > 0, "server closed");
                    self.d.feed(&buf[..n]);
                }
                Err(e) => panic!("bad reply: {e:?}"),
            }
        }
        replies
    }
}

fn text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) | Reply::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => format!("{other:?}"),
    }
}

/// `clients` connections writing for `secs`: operations per second.
fn drive(port: u16, clients: usize, secs: f64, wait: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let (stop, total) = (Arc::clone(&stop), Arc::clone(&total));
            std::thread::spawn(move || {
                let mut conn = Conn::new(port);
                let value = vec![b'x'; 100];
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (c as u64 + 1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = format!("key:{:08}", x % 10_000_000);
                    let set: &[&[u8]] = &[b"SET", key.as_bytes(), &value];
                    let replies = if wait {
                        conn.call(&[set, &[b"WAIT", b"1", b"0"]])
                    } else {
                        conn.call(&[set])
                    };
                    assert_eq!(text(&replies[0]), "OK", "SET: {:?}", replies[0]);
                    if wait {
                        assert!(
                            matches!(replies[1], Reply::Integer(1)),
                            "WAIT: {:?}",
                            replies[1]
                        );
                    }
                    n += 1;
                }
                total.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("client thread");
    }
    total.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn redis_pair(dir: &Path) -> (Proc, Proc, u16) {
    let (p, r) = (free_port(), free_port());
    let common = |port: u16, name: &str| {
        let mut c = Command::new("redis-server");
        c.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--dir"])
        .arg(dir.join(name));
        std::fs::create_dir_all(dir.join(name)).unwrap();
        c
    };
    let primary = spawn(&mut common(p, "primary"));
    wait_port(p);
    let replica = spawn(common(r, "replica").args(["--replicaof", "127.0.0.1", &p.to_string()]));
    wait_port(r);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = Conn::new(r);
    while !text(&c.call(&[&[b"INFO", b"replication"]])[0]).contains("master_link_status:up") {
        assert!(
            Instant::now() < deadline,
            "the Redis replica did not connect"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (primary, replica, p)
}

fn mnemo_pair(mnemo: &Path, dir: &Path, mode: &str) -> (Proc, Proc, u16) {
    use std::os::unix::fs::PermissionsExt;
    let secret = dir.join("repl.secret");
    std::fs::write(&secret, "benchmark secret, not for real use").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (m, p) = (free_port(), free_port());
    let mirror = spawn(
        Command::new(mnemo)
            .args(["mirror", "serve", "--port", &m.to_string(), "--dir"])
            .arg(dir.join("mirror"))
            .arg("--secret-file")
            .arg(&secret)
            .env("MNEMO_LOG", "warn"),
    );
    wait_port(m);
    let primary = spawn(
        Command::new(mnemo)
            .args(["serve", "--port", &p.to_string(), "--size", "1G", "--pool"])
            .arg(dir.join("kv.pool"))
            .args(["--mirror", &format!("127.0.0.1:{m}"), "--repl-mode", mode])
            .arg("--repl-secret-file")
            .arg(&secret)
            .env("MNEMO_LOG", "warn"),
    );
    wait_port(p);
    let mut c = Conn::new(p);
    let info = text(&c.call(&[&[b"INFO", b"replication"]])[0]);
    assert!(
        mode == "local" || info.contains("mnemo_repl_mirror_in_sync:1"),
        "mnemo is not in sync with its mirror: {info}"
    );
    (primary, mirror, p)
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("repl_kv.rs"));
    let args: Vec<String> = std::env::args().collect();
    let Some(mnemo) = args.get(1).map(PathBuf::from) else {
        eprintln!("usage: repl_kv <mnemo binary> [clients] [secs] [rounds]");
        std::process::exit(2);
    };
    let clients: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50);
    let secs: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let rounds: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(3);
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let setups = [
        "redis+replica, SET+WAIT",
        "redis+replica, SET (no WAIT)",
        "mnemo mirror syncflush, SET",
        "mnemo mirror sync, SET",
        "mnemo, no mirror, SET",
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); setups.len()];
    for round in 1..=rounds {
        for (i, setup) in setups.iter().enumerate() {
            let dir = tempfile::Builder::new()
                .prefix("mnemo-bench-repl-kv-")
                .tempdir_in("/dev/shm")
                .expect("scratch dir");
            let rate = match i {
                0 | 1 => {
                    let (_p, _r, port) = redis_pair(dir.path());
                    drive(port, clients, secs, i == 0)
                }
                _ => {
                    let mode = ["", "", "syncflush", "sync", "local"][i];
                    let (_p, _m, port) = mnemo_pair(&mnemo, dir.path(), mode);
                    drive(port, clients, secs, false)
                }
            };
            eprintln!("round {round}/{rounds}: {setup}: {rate:.0} SET/s");
            results[i].push(rate);
        }
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let meds: Vec<f64> = results
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.sort_by(f64::total_cmp);
            median(&r)
        })
        .collect();
    let base = meds[0];
    let commit = mnemo_bench::head_commit();
    // The exact command: the script passes its own command line, else this program's.
    let command = std::env::var("MNEMO_BENCH_COMMAND")
        .unwrap_or_else(|_| std::env::args().collect::<Vec<_>>().join(" "));
    println!("| setup | SET/s (median of {rounds} rounds) | rounds | vs Redis SET+WAIT |");
    println!("|---|---|---|---|");
    let mut csv = Vec::new();
    for (i, setup) in setups.iter().enumerate() {
        let all: Vec<String> = results[i].iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "| {setup} | {:.0} | {} | {:.2}x |",
            meds[i],
            all.join(" / "),
            meds[i] / base
        );
        csv.push(format!(
            "\"{setup}\",{clients},{:.0},{},{:.3},{commit},\"{command}\"",
            meds[i],
            all.join(" "),
            meds[i] / base
        ));
    }
    write_csv(
        "repl-kv.csv",
        "setup,clients,set_per_s_median,set_per_s_rounds,vs_redis_set_wait,commit,command",
        &csv,
    )
    .expect("csv");
    let json = serde_json::json!({
        "benchmark": "repl-kv",
        "commit": commit,
        "command": command,
        "clients": clients, "seconds_per_round": secs, "rounds": rounds,
        "value_bytes": 100, "keys": "random over 10,000,000",
        "machine": machine(),
        "load_avg_before": load_before.trim(), "load_avg_after": load_after.trim(),
        "rows": setups.iter().enumerate().map(|(i, s)| serde_json::json!({
            "setup": s, "set_per_s_median": meds[i], "set_per_s_rounds": results[i],
            "vs_redis_set_wait": meds[i] / base,
        })).collect::<Vec<_>>(),
    });
    write_json("repl-kv.json", &json).expect("json");
    let bars_data: Vec<(String, f64)> = setups
        .iter()
        .zip(&meds)
        .map(|(s, m)| ((*s).to_string(), m / 1e3))
        .collect();
    let svg = bench_dir().join("plots").join("repl-kv.svg");
    match bars(
        &svg,
        &format!("Replicated SET throughput, {clients} clients (commit {commit})"),
        "thousand SET per second",
        &bars_data,
    ) {
        Ok(p) => eprintln!("plot: {}", p.display()),
        Err(e) => eprintln!("no plot: {e}"),
    }
}
