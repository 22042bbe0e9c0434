//! `mnemo serve` as a program: real clients (redis-cli, redis-benchmark) against the binary,
//! restart, SIGTERM and SHUTDOWN, AUTH, a full pool, a corrupt pool, a second instance on
//! the same pool, and `mnemo kv info`.

mod support;

use std::process::Command;
use std::time::Duration;

use support::repl::{field, info as read_info};
use support::{redis_cli, shm_dir, tool, was_clean, Server};

/// The number after `name:` in INFO's text.
fn number(info: &str, name: &str) -> u64 {
    field(info, name)
        .unwrap_or_else(|| panic!("INFO lacks {name}:\n{info}"))
        .parse()
        .unwrap()
}

/// Every command of issue 6's list at least once, through redis-cli, with Redis's replies
/// (redis-cli prints errors without "(error)" when its output is not a terminal).
#[test]
fn redis_cli_runs_every_command() {
    if !tool("redis-cli", "redis-tools") {
        return;
    }
    let dir = shm_dir();
    let server = Server::start(&dir.path().join("kv.pool"), &[]);
    let port = server.port;
    let cases: &[(&[&str], &str)] = &[
        (&["PING"], "PONG"),
        (&["SELECT", "0"], "OK"),
        (&["SELECT", "16"], "ERR DB index is out of range"),
        (&["CLIENT", "SETNAME", "tester"], "OK"),
        (&["SET", "s", "hello"], "OK"),
        (&["GET", "s"], "hello"),
        (&["GET"], "ERR wrong number of arguments for 'get' command"),
        (
            &["NOSUCHCOMMAND", "x"],
            "ERR unknown command 'NOSUCHCOMMAND', with args beginning with: 'x'",
        ),
        (&["APPEND", "s", " world"], "11"),
        (&["STRLEN", "s"], "11"),
        (&["GETSET", "s", "new"], "hello world"),
        (&["MSET", "a", "1", "b", "2"], "OK"),
        (&["MGET", "a", "b", "nokey"], "1\n2"),
        (&["INCR", "a"], "2"),
        (&["INCRBY", "a", "10"], "12"),
        (&["DECR", "a"], "11"),
        (
            &["INCR", "s"],
            "ERR value is not an integer or out of range",
        ),
        (&["EXISTS", "a", "b", "nokey"], "2"),
        (&["DEL", "b"], "1"),
        (&["EXPIRE", "a", "100"], "1"),
        (&["TTL", "a"], "100"),
        (&["TTL", "nokey"], "-2"),
        (&["LPUSH", "l", "x", "y"], "2"),
        (&["RPUSH", "l", "z"], "3"),
        (&["LRANGE", "l", "0", "-1"], "y\nx\nz"),
        (&["LPOP", "l"], "y"),
        (&["RPOP", "l"], "z"),
        (
            &["LPUSH", "s", "x"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (&["HSET", "h", "f1", "v1", "f2", "v2"], "2"),
        (&["HGET", "h", "f1"], "v1"),
        (&["HDEL", "h", "f2"], "1"),
        (&["HGETALL", "h"], "f1\nv1"),
        (&["HMGET", "h", "nofield", "f1"], "\nv1"),
        (&["SADD", "set", "m1", "m2", "m3"], "3"),
        (&["SREM", "set", "m3"], "1"),
        (&["SCARD", "set"], "2"),
        (&["ZADD", "z", "1", "one", "2", "two", "3", "three"], "3"),
        (&["ZSCORE", "z", "two"], "2"),
        (&["ZRANGE", "z", "0", "1"], "one\ntwo"),
        (&["ZPOPMIN", "z"], "one\n1"),
        (
            &["ZRANGEBYSCORE", "z", "(2", "+inf", "WITHSCORES"],
            "three\n3",
        ),
        (
            &["ZREVRANGEBYSCORE", "z", "+inf", "-inf", "LIMIT", "1", "1"],
            "two",
        ),
        (&["ZADD", "z", "x", "bad"], "ERR value is not a valid float"),
        (&["CONFIG", "GET", "appendfsync"], "appendfsync\nalways"),
        (&["DBSIZE"], "6"),
    ];
    for (args, expected) in cases {
        assert_eq!(redis_cli(port, args), *expected, "redis-cli {args:?}");
    }
    // Replies whose order or content is not fixed.
    let spop = redis_cli(port, &["SPOP", "set"]);
    assert!(spop == "m1" || spop == "m2", "SPOP: {spop}");
    let mut members: Vec<String> = redis_cli(port, &["SMEMBERS", "set"])
        .lines()
        .map(String::from)
        .collect();
    members.sort();
    assert_eq!(members.len(), 1, "SMEMBERS after SPOP: {members:?}");
    let mut keys: Vec<String> = redis_cli(port, &["KEYS", "*"])
        .lines()
        .map(String::from)
        .collect();
    keys.sort();
    assert_eq!(keys, ["a", "h", "l", "s", "set", "z"]);
    let scan = redis_cli(port, &["SCAN", "0", "COUNT", "100"]);
    assert_eq!(
        scan.lines().next(),
        Some("0"),
        "one SCAN covers a small keyspace: {scan}"
    );
    assert_eq!(scan.lines().count(), 7, "cursor and six keys: {scan}");
    let info = redis_cli(port, &["INFO"]);
    for field in [
        "# Persistence",
        "# Pool",
        "sync_points:",
        "pool_media:",
        "pool_size:",
    ] {
        assert!(info.contains(field), "INFO lacks {field}:\n{info}");
    }
    assert!(redis_cli(port, &["COMMAND", "COUNT"])
        .parse::<u64>()
        .is_ok());
    assert_eq!(redis_cli(port, &["FLUSHALL"]), "OK");
    assert_eq!(redis_cli(port, &["DBSIZE"]), "0");
    // QUIT answers OK and closes; SHUTDOWN stops the server (tested below).
    assert_eq!(redis_cli(port, &["QUIT"]), "OK");
    let mut client = server.client();
    assert_eq!(
        client
            .call(&["HELLO", "3"])
            .map(|r| matches!(r, mnemo_resp::Reply::Map(_)))
            .ok(),
        Some(true),
        "HELLO 3 answers a map"
    );
    server.terminate();
}

/// redis-benchmark's default tests, each run to the end (redis-benchmark 7 stops with exit
/// status 1 at the first error reply), then pipelined in RESP3; the INCR counter shows every
/// increment applied once.
#[test]
fn redis_benchmark_default_tests() {
    if !tool("redis-benchmark", "redis-tools") {
        return;
    }
    let dir = shm_dir();
    let server = Server::start(&dir.path().join("kv.pool"), &[]);
    // Every default test (no -t: PING_INLINE and PING_MBULK too).
    let lines = redis_benchmark(server.port, &["-n", "2000"]);
    // 16 tests; LRANGE runs as five (its LPUSH, then 100, 300, 500, 600 elements).
    assert_eq!(lines.len(), 20, "{lines:#?}");
    eprintln!(
        "redis-benchmark -n 2000 against mnemo serve (debug build):\n{}",
        lines.join("\n")
    );
    // Its INCR test increments one key (no -r): every increment was applied once.
    let mut client = server.client();
    assert_eq!(
        client.call(&["GET", "counter:__rand_int__"]).expect("GET"),
        mnemo_resp::Reply::Bulk("2000".into())
    );
    // Pipelined (16 requests per write) and in RESP3 (HELLO 3).
    let lines = redis_benchmark(
        server.port,
        &[
            "-n",
            "2000",
            "-P",
            "16",
            "-3",
            "-t",
            "ping,set,get,incr,lpush,lrange,mset",
        ],
    );
    assert_eq!(lines.len(), 12, "{lines:#?}");
    assert_eq!(
        client.call(&["GET", "counter:__rand_int__"]).expect("GET"),
        mnemo_resp::Reply::Bulk("4000".into())
    );
    assert!(server.log_text().contains("mnemo serve ready"));
    server.terminate();
}

/// Runs redis-benchmark against `port` with `-q` and `args`; returns its "requests per
/// second" lines. Fails on an error reply (redis-benchmark 7 then exits with status 1 and
/// says "Error from server" on stderr).
fn redis_benchmark(port: u16, args: &[&str]) -> Vec<String> {
    let output = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-q"])
        .args(args)
        .output()
        .expect("redis-benchmark");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && !stderr.contains("Error from server"),
        "redis-benchmark {args:?}: {}\n{stderr}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout)
        .split(['\r', '\n'])
        .filter(|line| line.contains("requests per second"))
        .map(|line| line.trim().to_string())
        .collect()
}

/// Data survives SIGTERM and restart, SIGTERM closes the pool cleanly, and SHUTDOWN does too.
#[test]
fn restart_sigterm_and_shutdown() {
    let dir = shm_dir();
    let pool = dir.path().join("data/kv.pool");
    let server = Server::start(&pool, &[]);
    let mut client = server.client();
    for i in 0..100 {
        client
            .call(&["SET", &format!("key:{i}"), &format!("value:{i}")])
            .expect("SET");
    }
    client
        .call(&["RPUSH", "list", "a", "b", "c"])
        .expect("RPUSH");
    drop(client);
    let log = server.log_text();
    assert!(log.contains("start=\"created\""), "{log}");
    let status = server.terminate();
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert!(was_clean(&pool), "SIGTERM left the pool not clean");
    let mode = std::fs::metadata(pool.parent().expect("dir"))
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
        .expect("data dir");
    assert_eq!(mode, 0o700, "the data directory is private");

    let mut server = Server::start(&pool, &[]);
    let log = server.log_text();
    assert!(
        log.contains("start=\"clean\"") && log.contains("keys=101"),
        "{log}"
    );
    let mut client = server.client();
    for i in [0, 42, 99] {
        assert_eq!(
            client.call(&["GET", &format!("key:{i}")]).expect("GET"),
            mnemo_resp::Reply::Bulk(format!("value:{i}").into())
        );
    }
    assert_eq!(
        client.call(&["LRANGE", "list", "0", "-1"]).expect("LRANGE"),
        mnemo_resp::Reply::Array(vec![
            mnemo_resp::Reply::Bulk("a".into()),
            mnemo_resp::Reply::Bulk("b".into()),
            mnemo_resp::Reply::Bulk("c".into())
        ])
    );
    // SHUTDOWN: no reply, the connection closes, the process exits 0 with a clean pool.
    assert!(
        client.call(&["SHUTDOWN"]).is_err(),
        "SHUTDOWN closes without a reply"
    );
    let status = server.wait_exit();
    assert!(status.success(), "exit status after SHUTDOWN: {status}");
    assert!(server.log_text().contains("pool closed cleanly"));
    assert!(was_clean(&pool), "SHUTDOWN left the pool not clean");
}

/// --requirepass (here from the environment, so `ps` does not show it): NOAUTH before AUTH,
/// the password never in the log, and `mnemo kv info` authenticating from the environment.
#[test]
fn requirepass_from_the_environment() {
    let dir = shm_dir();
    let pool = dir.path().join("kv.pool");
    let password = "s3cret-Pa55";
    let server = Server::start_with(&pool, &[], &[("MNEMO_REQUIREPASS", password)]);
    let mut client = server.client();
    assert_eq!(
        client.call(&["GET", "k"]).expect("GET"),
        mnemo_resp::Reply::Error("NOAUTH Authentication required.".into())
    );
    assert_eq!(
        client.call(&["AUTH", "wrong"]).expect("AUTH"),
        mnemo_resp::Reply::Error(
            "WRONGPASS invalid username-password pair or user is disabled.".into()
        )
    );
    assert_eq!(
        client.call(&["AUTH", password]).expect("AUTH"),
        mnemo_resp::Reply::ok()
    );
    assert_eq!(
        client.call(&["SET", "k", "v"]).expect("SET"),
        mnemo_resp::Reply::ok()
    );
    if tool("redis-cli", "redis-tools") {
        assert_eq!(
            redis_cli(
                server.port,
                &["--no-auth-warning", "-a", password, "GET", "k"]
            ),
            "v"
        );
    }
    let info = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["kv", "info", "pool", "--port", &server.port.to_string()])
        .env("MNEMO_REQUIREPASS", password)
        .output()
        .expect("mnemo kv info");
    assert!(
        info.status.success(),
        "{}",
        String::from_utf8_lossy(&info.stderr)
    );
    assert!(String::from_utf8_lossy(&info.stdout).contains("pool_media:"));
    let log = server.log_text();
    assert!(log.contains("auth=\"requirepass\""), "{log}");
    assert!(
        !log.contains(password),
        "the password appears in the log:\n{log}"
    );
    server.terminate();
}

/// `mnemo kv info --json`: sections as objects, numbers as numbers.
#[test]
fn kv_info_json() {
    let dir = shm_dir();
    let server = Server::start(&dir.path().join("kv.pool"), &[]);
    server.client().call(&["SET", "a", "1"]).expect("SET");
    let output = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["kv", "info", "--json", "--port", &server.port.to_string()])
        .output()
        .expect("mnemo kv info");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert!(
        info["persistence"]["sync_points"]
            .as_u64()
            .is_some_and(|n| n >= 1),
        "{info:#}"
    );
    assert_eq!(info["pool"]["pool_media"], "tmpfs", "{info:#}");
    assert_eq!(
        info["keyspace"]["db0"], "keys=1,expires=0,avg_ttl=0",
        "{info:#}"
    );
    // What the server buffers for its clients (backpressure), counted by the event loop.
    assert_eq!(
        info["clients"]["mnemo_output_buffer_limit"].as_u64(),
        Some(mnemo_kv::server::limits::OUTPUT_BUFFER_BYTES_MAX as u64),
        "{info:#}"
    );
    assert!(
        info["clients"]["connected_clients"]
            .as_u64()
            .is_some_and(|n| n >= 1),
        "{info:#}"
    );
    assert!(
        info["clients"]["mnemo_output_buffer_peak"].is_u64(),
        "{info:#}"
    );
    assert_eq!(
        info["server"]["tcp_port"].as_u64(),
        Some(u64::from(server.port))
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["kv", "info", "--port", "1"])
        .output()
        .expect("mnemo kv info");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("cannot connect"));
    server.terminate();
}

/// A second server on the same pool is refused with the pool's "in use" error.
#[test]
fn second_instance_is_refused() {
    let dir = shm_dir();
    let pool = dir.path().join("kv.pool");
    let server = Server::start(&pool, &[]);
    let log = dir.path().join("second.log");
    let status = support::serve_command(&pool, 1, &log, &[])
        .status()
        .expect("second mnemo serve");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!status.success());
    assert!(text.contains("in use by another process"), "{text}");
    server.terminate();
}

/// A pool whose headers are overwritten: a non-zero exit and the pool layer's message.
#[test]
fn corrupt_pool_is_refused_with_a_clear_message() {
    let dir = shm_dir();
    let pool = dir.path().join("kv.pool");
    Server::start(&pool, &[]).terminate();
    let mut bytes = std::fs::read(&pool).expect("read pool");
    for byte in bytes.iter_mut().take(8192).skip(64) {
        *byte ^= 0x5a;
    }
    std::fs::write(&pool, &bytes).expect("write pool");
    let log = dir.path().join("corrupt.log");
    let status = support::serve_command(&pool, 1, &log, &[])
        .status()
        .expect("mnemo serve");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(!status.success());
    assert!(
        text.contains("corrupt") && text.contains("mnemo pool check"),
        "{text}"
    );
}

/// A pool that may not grow: writes get Redis's -OOM reply, the server logs why, reads and
/// deletes still work, and the space comes back.
#[test]
fn full_pool_answers_oom() {
    let dir = shm_dir();
    let pool = dir.path().join("kv.pool");
    let server = Server::start(&pool, &["--size", "96M", "--size-max", "96M"]);
    let mut client = server.client();
    let value = "v".repeat(1 << 20);
    let mut stored = 0;
    let mut refused = None;
    for i in 0..200 {
        match client
            .call(&["SET", &format!("big:{i}"), &value])
            .expect("SET")
        {
            mnemo_resp::Reply::Simple(_) => stored += 1,
            other => {
                refused = Some(other);
                break;
            }
        }
    }
    assert_eq!(
        refused,
        Some(mnemo_resp::Reply::Error(
            "OOM command not allowed when used memory > 'maxmemory'.".into()
        )),
        "after {stored} values of 1 MiB"
    );
    assert!(stored > 0);
    assert_eq!(
        client.call(&["DBSIZE"]).expect("DBSIZE"),
        mnemo_resp::Reply::Integer(stored)
    );
    assert_eq!(
        client
            .call(&["DEL", "big:0", "big:1", "big:2"])
            .expect("DEL"),
        mnemo_resp::Reply::Integer(3)
    );
    // Freed space is reusable (possibly after the engine's lazy freeing catches up).
    let mut again = false;
    for _ in 0..50 {
        if client.call(&["SET", "after", "small"]).expect("SET") == mnemo_resp::Reply::ok() {
            again = true;
            break;
        }
    }
    assert!(again, "a small write after DEL");
    let log = server.log_text();
    assert!(log.contains("-OOM") && log.contains("--size-max"), "{log}");
    server.terminate();
}

/// On an ordinary disk the write-ahead policy is the default, and INFO persistence shows it:
/// records, group commits (fdatasyncs) and the last one's time, bytes a crash would replay,
/// checkpoints. `MNEMO_WAL=0` keeps the local policy for a new pool.
#[test]
fn info_persistence_shows_the_write_ahead_file() {
    // The pool on the root file system (page cache), not /dev/shm.
    let dir = tempfile::Builder::new()
        .prefix("mnemo-serve-wal")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let pool = dir.path().join("kv.pool");
    let local = dir.path().join("local.pool");
    let server = Server::start_with(&local, &["--size", "8M"], &[("MNEMO_WAL", "0")]);
    let mut client = server.client();
    client.call(&["SET", "k", "v"]).unwrap();
    let info = read_info(&mut client, "persistence");
    assert!(info.contains("mnemo_sync_policy:local"), "{info}");
    drop(client);
    assert!(server.terminate().success());

    let server = Server::start_with(&pool, &["--size", "8M"], &[]);
    let info = info_after_twenty_sets(&server, "persistence", Duration::ZERO);
    let field = |name: &str| number(&info, name);
    assert!(info.contains("mnemo_sync_policy:write-ahead"), "{info}");
    assert!(field("mnemo_wal_records") >= 20, "{info}");
    assert!(field("mnemo_wal_fdatasyncs") >= 1, "{info}");
    assert!(field("mnemo_wal_last_fdatasync_us") > 0, "{info}");
    assert!(field("mnemo_wal_pending_bytes") > 0, "{info}");
    field("mnemo_wal_checkpoints");
    // The default: the pool mapped shared, replies after each group's fdatasync.
    assert_eq!(field("mnemo_wal_private_mapping"), 0, "{info}");
    assert_eq!(field("mnemo_wal_deferred_acks"), 0, "{info}");
    assert!(server.terminate().success());
}

/// Twenty SETs from one client, `pause` apart, then INFO `section` (the client is closed
/// before the server is stopped).
fn info_after_twenty_sets(server: &Server, section: &str, pause: Duration) -> String {
    let mut client = server.client();
    for i in 0..20 {
        let key = format!("k{i}");
        client.call(&["SET", key.as_str(), "value"]).unwrap();
        std::thread::sleep(pause);
    }
    read_info(&mut client, section)
}

/// `--commit-gathering` reaches the loop: its figures show in INFO clients, with the
/// commits' measured storage wait (an `fdatasync` on the disk pool).
#[test]
fn commit_gathering_shows_in_info_clients() {
    let dir = tempfile::Builder::new()
        .prefix("mnemo-serve-gather")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let pool = dir.path().join("kv.pool");
    let server = Server::start_with(&pool, &["--size", "8M", "--commit-gathering"], &[]);
    let info = info_after_twenty_sets(&server, "clients", Duration::ZERO);
    let field = |name: &str| number(&info, name);
    // Twenty fdatasyncs measured: a wait of at least a microsecond.
    assert!(field("mnemo_commit_wait_us") > 0, "{info}");
    // One client is in its own batch: nobody to wait for.
    assert_eq!(field("mnemo_commit_gathers"), 0, "{info}");
    field("mnemo_commit_gather_timeouts");
    field("mnemo_client_turnaround_us");
    assert!(server.terminate().success());
}

/// `--busy-poll-us` reaches the loop: with the longest window (10 ms), a client that sends
/// again 2 ms after each reply finds the server polling (INFO clients counts the hits);
/// with 0, it never polls. Sending at once is no test: a debug build on a busy machine may
/// find the next request already there when it looks, which is not counted as a poll.
#[test]
fn busy_poll_window_shows_in_info_clients() {
    for (window, polls) in [("10000", true), ("0", false)] {
        let dir = shm_dir();
        let pool = dir.path().join("kv.pool");
        let server = Server::start_with(&pool, &["--size", "8M", "--busy-poll-us", window], &[]);
        let info = info_after_twenty_sets(&server, "clients", Duration::from_millis(2));
        let field = |name: &str| number(&info, name);
        if polls {
            // Most of the twenty came back within the window (a busy CI machine may stall
            // a few past it).
            assert!(field("mnemo_busy_poll_hits") >= 10, "{info}");
            assert!(
                field("mnemo_busy_polls") >= field("mnemo_busy_poll_hits"),
                "{info}"
            );
        } else {
            assert_eq!(field("mnemo_busy_polls"), 0, "{info}");
            assert_eq!(field("mnemo_busy_poll_hits"), 0, "{info}");
        }
        assert!(server.terminate().success());
    }
}

/// With its log collector gone (stderr a pipe whose reader closed, as in `mnemo serve 2>&1 |
/// head -3`) the server keeps serving, logs nothing more, and still stops on SIGTERM.
#[test]
fn a_closed_log_pipe_neither_stops_the_server_nor_loses_sigterm() {
    use std::process::Stdio;
    let dir = shm_dir();
    let pool = dir.path().join("kv.pool");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["serve", "--port", &port.to_string(), "--pool"])
        .arg(&pool)
        .env("MNEMO_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before the start-up lines are written.
    drop(child.stderr.take());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut client = loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("mnemo serve exited when its log pipe closed: {status}");
        }
        if let Ok(c) = support::Client::connect(port) {
            break c;
        }
        assert!(std::time::Instant::now() < deadline, "never answered");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    for i in 0..50 {
        let key = format!("k{i}");
        assert!(client.call(&["SET", key.as_str(), "v"]).is_ok());
    }
    drop(client);
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("SIGTERM was lost: the server did not stop");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(was_clean(&pool), "closed cleanly");
}

/// `MNEMO_WAL_PRIVATE=1 MNEMO_DEFER_ACKS=1`: the pool mapped copy-on-write, replies held in
/// the loop until durable; every SET acknowledged is there after a restart, and INFO says so.
#[test]
fn copy_on_write_and_deferred_acks_serve_and_restart() {
    let dir = tempfile::Builder::new()
        .prefix("mnemo-serve-cow")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let pool = dir.path().join("kv.pool");
    let env = [("MNEMO_WAL_PRIVATE", "1"), ("MNEMO_DEFER_ACKS", "1")];
    let server = Server::start_with(&pool, &["--size", "8M"], &env);
    let mut client = server.client();
    for i in 0..200 {
        let key = format!("k{i}");
        let value = format!("v{i}");
        client.call(&["SET", key.as_str(), value.as_str()]).unwrap();
    }
    let info = read_info(&mut client, "persistence");
    assert!(info.contains("mnemo_wal_private_mapping:1"), "{info}");
    assert!(info.contains("mnemo_wal_deferred_acks:1"), "{info}");
    drop(client);
    assert!(server.terminate().success());
    let server = Server::start_with(&pool, &["--size", "8M"], &[]);
    let mut client = server.client();
    for i in [0, 99, 199] {
        let key = format!("k{i}");
        assert_eq!(
            client.call(&["GET", key.as_str()]).unwrap(),
            mnemo_resp::Reply::Bulk(format!("v{i}").into_bytes().into())
        );
    }
    drop(client);
    assert!(server.terminate().success());
}

/// A script run by `mnemo serve` reaches the server around it (its host): a PUBLISH inside
/// EVAL is delivered to the subscribers, and its count says so. (`mnemo serve` wraps the
/// engine; the wrapper once dropped the host, so a script's PUBLISH reached nobody and
/// BUSY / SCRIPT KILL never saw the loop.)
#[test]
fn a_script_publishes_through_the_server() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let server = Server::start_with(&dir.path().join("kv.pool"), &["--size", "8M"], &[]);
    let mut subscriber = server.client();
    subscriber.call(&["SUBSCRIBE", "news"]).unwrap();
    let mut client = server.client();
    let delivered = client
        .call(&["EVAL", "return redis.call('PUBLISH', 'news', 'hello')", "0"])
        .unwrap();
    assert_eq!(
        delivered,
        mnemo_resp::Reply::Integer(1),
        "the subscriber was not reached"
    );
    drop((client, subscriber));
    assert!(server.terminate().success());
}
