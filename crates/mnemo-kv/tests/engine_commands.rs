//! The persistent engine, command family by command family, against the replies Redis 7
//! gives (texts from redis-server 7.0 and its documentation), plus restart, expiry, lazy
//! freeing, pool-full and corruption behaviour.

use mnemo_heap::{Heap, HeapOptions};
use mnemo_kv::engine::{heap_options, PersistentEngine};
use mnemo_kv::server::Engine;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Protocol, Reply};

fn small_options() -> HeapOptions {
    HeapOptions {
        lane_count: 2,
        lane_log_size: 1 << 20,
        ..HeapOptions::default()
    }
}

/// A directory on tmpfs: the engine's behaviour is the same on any medium, and a pool there
/// has no write-ahead file to create and `fdatasync` (the page-cache medium's durability is
/// proven by `engine_crash.rs` and the server's kill -9 tests). On an ordinary disk, the
/// corrupt-words test's 150 pools took 54 s of a 68 s run.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mnemo-kv-engine-")
        .tempdir_in("/dev/shm")
        .expect("scratch dir on /dev/shm")
}

fn create(dir: &tempfile::TempDir, size: u64, max: u64, options: &HeapOptions) -> Heap {
    Heap::create_file(&dir.path().join("pool"), size, max, options).expect("create heap")
}

fn reopen(dir: &tempfile::TempDir) -> Heap {
    Heap::open_file(&dir.path().join("pool")).expect("open heap")
}

fn args(cmd: &[&str]) -> Vec<Bytes> {
    cmd.iter()
        .map(|a| Bytes::from(a.as_bytes().to_vec()))
        .collect()
}

/// One command in a batch of its own.
fn run(engine: &mut PersistentEngine<'_>, cmd: &[&str]) -> Reply {
    run_proto(engine, cmd, Protocol::Resp2)
}

fn run_proto(engine: &mut PersistentEngine<'_>, cmd: &[&str], protocol: Protocol) -> Reply {
    engine.begin();
    let (reply, effect) = engine.execute_args(&args(cmd), protocol);
    if effect.wrote {
        engine.commit().expect("commit");
    } else {
        engine.finish_read_only();
    }
    reply
}

/// `run`, with the reply as a RESP2 client decodes it (doubles become bulk strings).
fn run2(engine: &mut PersistentEngine<'_>, cmd: &[&str]) -> Reply {
    run(engine, cmd).as_seen_by(Protocol::Resp2)
}

fn ok() -> Reply {
    Reply::ok()
}
fn int(n: i64) -> Reply {
    Reply::Integer(n)
}
fn bulk(s: &str) -> Reply {
    Reply::Bulk(Bytes::from(s.as_bytes().to_vec()))
}
fn err(s: &str) -> Reply {
    Reply::Error(Bytes::from(s.as_bytes().to_vec()))
}
fn arr(items: &[&str]) -> Reply {
    Reply::Array(items.iter().map(|s| bulk(s)).collect())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn strings() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    assert_eq!(run(&mut e, &["GET", "k"]), Reply::NullBulk);
    assert_eq!(run(&mut e, &["SET", "k", "abc"]), ok());
    assert_eq!(run(&mut e, &["GET", "k"]), bulk("abc"));
    assert_eq!(run(&mut e, &["SET", "k", "x", "NX"]), Reply::NullBulk);
    assert_eq!(run(&mut e, &["SET", "k2", "x", "XX"]), Reply::NullBulk);
    assert_eq!(run(&mut e, &["SET", "k", "new", "XX", "GET"]), bulk("abc"));
    assert_eq!(
        run(&mut e, &["SET", "k", "v", "NX", "XX"]),
        err("ERR syntax error")
    );
    assert_eq!(
        run(&mut e, &["SET", "k", "v", "EX"]),
        err("ERR syntax error")
    );
    assert_eq!(
        run(&mut e, &["SET", "k", "v", "EX", "0"]),
        err("ERR invalid expire time in 'set' command")
    );
    assert_eq!(
        run(&mut e, &["SET", "k", "v", "EX", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(run(&mut e, &["GETSET", "k", "g"]), bulk("new"));
    assert_eq!(run(&mut e, &["APPEND", "k", "hij"]), int(4));
    assert_eq!(run(&mut e, &["STRLEN", "k"]), int(4));
    assert_eq!(run(&mut e, &["APPEND", "fresh", "a"]), int(1));
    // Appends past the inline size move the value to its own allocation, then grow it.
    let long = "y".repeat(300);
    assert_eq!(run(&mut e, &["APPEND", "k", &long]), int(304));
    assert_eq!(run(&mut e, &["APPEND", "k", "z"]), int(305));
    assert_eq!(run(&mut e, &["GET", "k"]), bulk(&format!("ghij{long}z")));
    assert_eq!(run(&mut e, &["SET", "big", &long]), ok());
    assert_eq!(run(&mut e, &["SET", "big", "small"]), ok());
    assert_eq!(run(&mut e, &["GET", "big"]), bulk("small"));
    assert_eq!(run(&mut e, &["INCR", "n"]), int(1));
    assert_eq!(run(&mut e, &["INCRBY", "n", "41"]), int(42));
    assert_eq!(run(&mut e, &["DECR", "n"]), int(41));
    assert_eq!(run(&mut e, &["DECRBY", "n", "50"]), int(-9));
    assert_eq!(run(&mut e, &["GET", "n"]), bulk("-9"));
    assert_eq!(
        run(&mut e, &["INCR", "k"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(run(&mut e, &["SET", "max", "9223372036854775807"]), ok());
    assert_eq!(
        run(&mut e, &["INCR", "max"]),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        run(&mut e, &["INCRBY", "n", "1x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(run(&mut e, &["MSET", "a", "1", "b", "2"]), ok());
    assert_eq!(
        run(&mut e, &["MSET", "a", "1", "b"]),
        err("ERR wrong number of arguments for 'mset' command")
    );
    assert_eq!(
        run(&mut e, &["MGET", "a", "nothing", "b"]),
        Reply::Array(vec![bulk("1"), Reply::NullBulk, bulk("2")])
    );
    assert_eq!(
        run(&mut e, &["GET"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    assert_eq!(
        run(&mut e, &["NOSUCH", "a"]),
        err("ERR unknown command 'NOSUCH', with args beginning with: 'a' ")
    );
    assert_eq!(e.check().expect("valid"), 7);
}

#[test]
fn keys_and_expiry_survive_restart() {
    let dir = scratch();
    let t0 = 1_700_000_000_000;
    {
        let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
        let mut e = PersistentEngine::open(&heap).expect("open");
        e.set_clock(Some(t0));
        assert_eq!(run(&mut e, &["SET", "a", "1", "EX", "10"]), ok());
        assert_eq!(run(&mut e, &["SET", "b", "2", "PX", "500"]), ok());
        assert_eq!(run(&mut e, &["SET", "c", "3"]), ok());
        assert_eq!(run(&mut e, &["RPUSH", "l", "x"]), int(1));
        assert_eq!(run(&mut e, &["TTL", "a"]), int(10));
        assert_eq!(run(&mut e, &["PTTL", "b"]), int(500));
        assert_eq!(run(&mut e, &["TTL", "c"]), int(-1));
        assert_eq!(run(&mut e, &["TTL", "zz"]), int(-2));
        assert_eq!(run(&mut e, &["EXPIRE", "c", "100"]), int(1));
        assert_eq!(run(&mut e, &["EXPIRE", "c", "50", "GT"]), int(0));
        assert_eq!(run(&mut e, &["EXPIRE", "c", "50", "LT"]), int(1));
        assert_eq!(run(&mut e, &["EXPIRE", "c", "50", "NX"]), int(0));
        assert_eq!(
            run(&mut e, &["EXPIRE", "c", "50", "NX", "XX"]),
            err("ERR NX and XX, GT or LT options at the same time are not compatible")
        );
        assert_eq!(run(&mut e, &["PERSIST", "c"]), int(1));
        assert_eq!(run(&mut e, &["PERSIST", "c"]), int(0));
        assert_eq!(run(&mut e, &["PEXPIRE", "c", "100000"]), int(1));
        assert_eq!(run(&mut e, &["EXPIRE", "missing", "1"]), int(0));
        assert_eq!(
            run(&mut e, &["TYPE", "l"]),
            Reply::Simple(Bytes::from_static(b"list"))
        );
        assert_eq!(
            run(&mut e, &["TYPE", "a"]),
            Reply::Simple(Bytes::from_static(b"string"))
        );
        assert_eq!(
            run(&mut e, &["TYPE", "q"]),
            Reply::Simple(Bytes::from_static(b"none"))
        );
        assert_eq!(run(&mut e, &["EXISTS", "a", "a", "q"]), int(2));
        assert_eq!(run(&mut e, &["DBSIZE"]), int(4));
        e.check().expect("valid");
    }
    let heap = reopen(&dir);
    let mut e = PersistentEngine::open(&heap).expect("reopen");
    e.set_clock(Some(t0 + 1000));
    assert_eq!(
        run(&mut e, &["GET", "b"]),
        Reply::NullBulk,
        "expired while down"
    );
    assert_eq!(run(&mut e, &["TTL", "a"]), int(9));
    assert_eq!(run(&mut e, &["PTTL", "c"]), int(99_000));
    assert_eq!(run(&mut e, &["EXISTS", "b"]), int(0));
    let mut keys = match run(&mut e, &["KEYS", "*"]) {
        Reply::Array(items) => items,
        other => panic!("{other:?}"),
    };
    keys.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(keys, vec![bulk("a"), bulk("c"), bulk("l")]);
    assert_eq!(run(&mut e, &["KEYS", "[ab]"]), arr(&["a"]));
    // Active expiry removes b with the next committed batch.
    assert_eq!(run(&mut e, &["SET", "d", "4"]), ok());
    assert_eq!(run(&mut e, &["DBSIZE"]), int(4));
    assert_eq!(run(&mut e, &["DEL", "a", "c", "q"]), int(2));
    assert_eq!(
        run(&mut e, &["SET", "neg", "1", "EX", "-5"]),
        err("ERR invalid expire time in 'set' command")
    );
    assert_eq!(run(&mut e, &["EXPIRE", "d", "-1"]), int(1));
    assert_eq!(run(&mut e, &["GET", "d"]), Reply::NullBulk);
    e.check().expect("valid");
}

#[test]
fn scan_sees_every_key_across_growth() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    for i in 0..300 {
        run(&mut e, &["SET", &format!("key:{i}"), "v"]);
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = "0".to_string();
    let mut rounds = 0;
    loop {
        let reply = run(&mut e, &["SCAN", &cursor, "COUNT", "7", "MATCH", "key:*"]);
        let Reply::Array(parts) = reply else { panic!() };
        let [Reply::Bulk(c), Reply::Array(keys)] = &parts[..] else {
            panic!()
        };
        for k in keys {
            let Reply::Bulk(k) = k else { panic!() };
            seen.insert(k.clone());
        }
        // Grow the table in the middle of the scan: cursors stay valid.
        if rounds == 3 {
            for i in 300..700 {
                run(&mut e, &["SET", &format!("other:{i}"), "v"]);
            }
        }
        rounds += 1;
        cursor = String::from_utf8(c.to_vec()).expect("ascii");
        if cursor == "0" {
            break;
        }
        assert!(rounds < 10_000);
    }
    assert_eq!(seen.len(), 300);
    assert_eq!(run(&mut e, &["SCAN", "x"]), err("ERR invalid cursor"));
    assert_eq!(
        run(&mut e, &["SCAN", "0", "COUNT", "0"]),
        err("ERR syntax error")
    );
    assert_eq!(e.check().expect("valid"), 700);
}

#[test]
fn lists() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    assert_eq!(run(&mut e, &["RPUSH", "l", "a", "b", "c"]), int(3));
    assert_eq!(run(&mut e, &["LPUSH", "l", "z"]), int(4));
    assert_eq!(
        run(&mut e, &["LRANGE", "l", "0", "-1"]),
        arr(&["z", "a", "b", "c"])
    );
    assert_eq!(run(&mut e, &["LRANGE", "l", "-2", "100"]), arr(&["b", "c"]));
    assert_eq!(run(&mut e, &["LRANGE", "l", "5", "10"]), arr(&[]));
    assert_eq!(run(&mut e, &["LLEN", "l"]), int(4));
    assert_eq!(run(&mut e, &["LINDEX", "l", "-1"]), bulk("c"));
    assert_eq!(run(&mut e, &["LINDEX", "l", "9"]), Reply::NullBulk);
    assert_eq!(run(&mut e, &["LPOP", "l"]), bulk("z"));
    assert_eq!(run(&mut e, &["RPOP", "l", "2"]), arr(&["c", "b"]));
    assert_eq!(run(&mut e, &["LPOP", "l", "0"]), arr(&[]));
    assert_eq!(
        run(&mut e, &["LPOP", "l", "-1"]),
        err("ERR value is out of range, must be positive")
    );
    assert_eq!(run(&mut e, &["RPOP", "l"]), bulk("a"));
    assert_eq!(
        run(&mut e, &["EXISTS", "l"]),
        int(0),
        "emptied lists vanish"
    );
    assert_eq!(run(&mut e, &["LPOP", "l"]), Reply::NullBulk);
    assert_eq!(run(&mut e, &["LPOP", "l", "3"]), Reply::NullArray);
    run(&mut e, &["SET", "s", "x"]);
    assert_eq!(run(&mut e, &["LPUSH", "s", "x"]), err(WRONGTYPE));
    assert_eq!(run(&mut e, &["LRANGE", "s", "0", "1"]), err(WRONGTYPE));
    assert_eq!(
        run(&mut e, &["GET", "s"]),
        bulk("x"),
        "unchanged after WRONGTYPE"
    );
    assert_eq!(
        run(&mut e, &["LRANGE", "l", "a", "1"]),
        err("ERR value is not an integer or out of range")
    );
    // Many pushes at both ends cross many segments.
    for i in 0..500 {
        run(&mut e, &["LPUSH", "m", &format!("l{i}")]);
        run(&mut e, &["RPUSH", "m", &format!("r{i}")]);
    }
    assert_eq!(run(&mut e, &["LLEN", "m"]), int(1000));
    assert_eq!(run(&mut e, &["LINDEX", "m", "0"]), bulk("l499"));
    assert_eq!(run(&mut e, &["LINDEX", "m", "999"]), bulk("r499"));
    assert_eq!(
        run(&mut e, &["LRANGE", "m", "499", "500"]),
        arr(&["l0", "r0"])
    );
    e.check().expect("valid");
}

/// redis-benchmark pushes 200k elements onto one key: each push must cost O(1) pool bytes
/// however long the list is (checked through heap usage, no timing).
#[test]
fn two_hundred_thousand_pushes_cost_constant_space_each() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 1 << 30, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    let mut used = Vec::new();
    for batch in 0..2000 {
        e.begin();
        for _ in 0..100 {
            let (reply, _) = e.execute_args(&args(&["LPUSH", "mylist", "xxx"]), Protocol::Resp2);
            assert!(matches!(reply, Reply::Integer(_)));
        }
        e.commit().expect("commit");
        if batch % 500 == 499 {
            used.push(heap.stats().used_bytes);
        }
    }
    assert_eq!(run(&mut e, &["LLEN", "mylist"]), int(200_000));
    // Equal growth per 50k pushes: no per-push cost grows with the length.
    let steps: Vec<u64> = used.windows(2).map(|w| w[1] - w[0]).collect();
    for s in &steps {
        assert!(*s <= steps[0] + steps[0] / 20, "{steps:?}");
    }
    assert!(
        steps[0] / 50_000 <= 48,
        "bytes per push: {}",
        steps[0] / 50_000
    );
    assert_eq!(run(&mut e, &["LPOP", "mylist"]), bulk("xxx"));
    assert_eq!(
        run(&mut e, &["RPOP", "mylist", "3"]),
        arr(&["xxx", "xxx", "xxx"])
    );
    e.check().expect("valid");
}

#[test]
fn sets_and_hashes() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    assert_eq!(run(&mut e, &["SADD", "s", "a", "b", "a"]), int(2));
    assert_eq!(run(&mut e, &["SCARD", "s"]), int(2));
    assert_eq!(run(&mut e, &["SISMEMBER", "s", "a"]), int(1));
    assert_eq!(run(&mut e, &["SISMEMBER", "s", "z"]), int(0));
    let Reply::Set(mut members) = run(&mut e, &["SMEMBERS", "s"]) else {
        panic!()
    };
    members.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(members, vec![bulk("a"), bulk("b")]);
    assert_eq!(run(&mut e, &["SREM", "s", "a", "q"]), int(1));
    assert_eq!(run(&mut e, &["SPOP", "s"]), bulk("b"));
    assert_eq!(run(&mut e, &["EXISTS", "s"]), int(0));
    assert_eq!(run(&mut e, &["SPOP", "s"]), Reply::NullBulk);
    assert_eq!(run(&mut e, &["SPOP", "s", "2"]), Reply::Set(vec![]));
    for i in 0..100 {
        run(&mut e, &["SADD", "big", &i.to_string()]);
    }
    let Reply::Set(popped) = run(&mut e, &["SPOP", "big", "30"]) else {
        panic!()
    };
    assert_eq!(popped.len(), 30);
    assert_eq!(run(&mut e, &["SCARD", "big"]), int(70));
    assert_eq!(
        run(&mut e, &["SPOP", "big", "-3"]),
        err("ERR value is out of range, must be positive")
    );

    assert_eq!(run(&mut e, &["HSET", "h", "f", "1", "g", "2"]), int(2));
    assert_eq!(run(&mut e, &["HSET", "h", "f", "10"]), int(0));
    assert_eq!(
        run(&mut e, &["HSET", "h", "f"]),
        err("ERR wrong number of arguments for 'hset' command")
    );
    assert_eq!(run(&mut e, &["HGET", "h", "f"]), bulk("10"));
    assert_eq!(run(&mut e, &["HGET", "h", "x"]), Reply::NullBulk);
    assert_eq!(run(&mut e, &["HLEN", "h"]), int(2));
    assert_eq!(run(&mut e, &["HEXISTS", "h", "g"]), int(1));
    assert_eq!(run(&mut e, &["HINCRBY", "h", "f", "5"]), int(15));
    assert_eq!(run(&mut e, &["HINCRBY", "h", "new", "-5"]), int(-5));
    assert_eq!(run(&mut e, &["HSET", "h", "s", "abc"]), int(1));
    assert_eq!(
        run(&mut e, &["HINCRBY", "h", "s", "1"]),
        err("ERR hash value is not an integer")
    );
    let Reply::Map(mut pairs) = run(&mut e, &["HGETALL", "h"]) else {
        panic!()
    };
    pairs.sort_by_key(|(k, _)| format!("{k:?}"));
    assert_eq!(
        pairs,
        vec![
            (bulk("f"), bulk("15")),
            (bulk("g"), bulk("2")),
            (bulk("new"), bulk("-5")),
            (bulk("s"), bulk("abc")),
        ]
    );
    assert_eq!(run(&mut e, &["HDEL", "h", "f", "g", "zz"]), int(2));
    assert_eq!(run(&mut e, &["HDEL", "h", "new", "s"]), int(2));
    assert_eq!(run(&mut e, &["EXISTS", "h"]), int(0));
    run(&mut e, &["SET", "str", "x"]);
    assert_eq!(run(&mut e, &["HSET", "str", "a", "b"]), err(WRONGTYPE));
    assert_eq!(run(&mut e, &["SADD", "str", "a"]), err(WRONGTYPE));
    assert_eq!(run(&mut e, &["HGETALL", "str"]), err(WRONGTYPE));
    assert_eq!(run(&mut e, &["HINCRBY", "str", "a", "1"]), err(WRONGTYPE));
    e.check().expect("valid");
}

/// HGETALL reads an entry's header, field and inline value in one piece when they fit its
/// window, and piece by piece when not (a long field or value, a value in its own
/// allocation): every size around the window's edge gives back what was written, from the
/// pool and from writes of the same batch not yet committed.
#[test]
fn hgetall_returns_fields_of_every_size() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    let sizes = [
        0, 1, 15, 16, 17, 100, 127, 128, 129, 143, 144, 145, 200, 1000, 5000,
    ];
    let mut expected = Vec::new();
    for (i, &field_len) in sizes.iter().enumerate() {
        for (j, &value_len) in sizes.iter().enumerate() {
            let field = format!("{i}.{j}.{}", "f".repeat(field_len));
            let value = format!("{}", (b'a' + (i + j) as u8 % 26) as char).repeat(value_len);
            expected.push((field, value));
        }
    }
    let sorted = |reply: Reply| -> Vec<(Reply, Reply)> {
        let Reply::Map(mut pairs) = reply else {
            panic!("HGETALL gave {reply:?}")
        };
        pairs.sort_by_key(|(k, _)| format!("{k:?}"));
        pairs
    };
    let mut want: Vec<(Reply, Reply)> = expected.iter().map(|(f, v)| (bulk(f), bulk(v))).collect();
    want.sort_by_key(|(k, _)| format!("{k:?}"));
    for (f, v) in &expected {
        run(&mut e, &["HSET", "h", f, v]);
    }
    assert_eq!(sorted(run(&mut e, &["HGETALL", "h"])), want);
    // The same hash written and read in one batch: the reads see the batch's own writes.
    e.begin();
    for (f, v) in &expected {
        e.execute_args(&args(&["HSET", "g", f, v]), Protocol::Resp2);
    }
    let (reply, _) = e.execute_args(&args(&["HGETALL", "g"]), Protocol::Resp2);
    e.commit().expect("commit");
    assert_eq!(sorted(reply), want);
    e.check().expect("valid");
}

#[test]
fn sorted_sets_and_their_index_after_restart() {
    let dir = scratch();
    {
        let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
        let mut e = PersistentEngine::open(&heap).expect("open");
        assert_eq!(
            run2(&mut e, &["ZADD", "z", "1", "a", "2", "b", "1.5", "c"]),
            int(3)
        );
        assert_eq!(run2(&mut e, &["ZADD", "z", "3", "a"]), int(0));
        assert_eq!(
            run2(&mut e, &["ZADD", "z", "CH", "4", "a", "9", "d"]),
            int(2)
        );
        assert_eq!(
            run2(&mut e, &["ZADD", "z", "NX", "XX", "1", "a"]),
            err("ERR XX and NX options at the same time are not compatible")
        );
        assert_eq!(
            run2(&mut e, &["ZADD", "z", "x", "a"]),
            err("ERR value is not a valid float")
        );
        assert_eq!(
            run2(&mut e, &["ZADD", "z", "NX", "1"]),
            err("ERR syntax error")
        );
        assert_eq!(
            run2(&mut e, &["ZADD", "z", "INCR", "1", "a", "2", "b"]),
            err("ERR INCR option supports a single increment-element pair")
        );
        assert_eq!(run2(&mut e, &["ZADD", "z", "INCR", "1", "a"]), bulk("5"));
        assert_eq!(run2(&mut e, &["ZADD", "z", "GT", "1", "a"]), int(0));
        assert_eq!(run2(&mut e, &["ZSCORE", "z", "a"]), bulk("5"));
        assert_eq!(run2(&mut e, &["ZSCORE", "z", "c"]), bulk("1.5"));
        assert_eq!(run2(&mut e, &["ZINCRBY", "z", "0.25", "c"]), bulk("1.75"));
        assert_eq!(run2(&mut e, &["ZCARD", "z"]), int(4));
        assert_eq!(
            run2(&mut e, &["ZRANGE", "z", "0", "-1"]),
            arr(&["c", "b", "a", "d"])
        );
    }
    let heap = reopen(&dir);
    let mut e = PersistentEngine::open(&heap).expect("reopen");
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "0", "1", "WITHSCORES"]),
        arr(&["c", "1.75", "b", "2"])
    );
    assert_eq!(
        run_proto(
            &mut e,
            &["ZRANGE", "z", "0", "0", "WITHSCORES"],
            Protocol::Resp3
        ),
        Reply::Array(vec![Reply::Array(vec![bulk("c"), Reply::Double(1.75)])])
    );
    assert_eq!(run2(&mut e, &["ZRANGE", "z", "0", "0", "REV"]), arr(&["d"]));
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "(2", "+inf", "BYSCORE"]),
        arr(&["a", "d"])
    );
    assert_eq!(
        run2(
            &mut e,
            &["ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", "1", "2"]
        ),
        arr(&["b", "a"])
    );
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "x", "1", "BYSCORE"]),
        err("ERR min or max is not a float")
    );
    assert_eq!(run2(&mut e, &["ZPOPMIN", "z"]), arr(&["c", "1.75"]));
    assert_eq!(
        run2(&mut e, &["ZPOPMIN", "z", "2"]),
        arr(&["b", "2", "a", "5"])
    );
    assert_eq!(run2(&mut e, &["ZREM", "z", "d", "nope"]), int(1));
    assert_eq!(run2(&mut e, &["EXISTS", "z"]), int(0));
    assert_eq!(run2(&mut e, &["ZPOPMIN", "z"]), arr(&[]));
    run2(&mut e, &["SET", "s", "x"]);
    assert_eq!(run2(&mut e, &["ZADD", "s", "1", "a"]), err(WRONGTYPE));
    assert_eq!(run2(&mut e, &["ZSCORE", "s", "a"]), err(WRONGTYPE));
    e.check().expect("valid");
}

#[test]
fn info_and_config() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    run(&mut e, &["SET", "a", "1"]);
    let Reply::Verbatim { text, .. } = run(&mut e, &["INFO"]) else {
        panic!()
    };
    let text = String::from_utf8(text.to_vec()).expect("utf8");
    for needle in [
        "# Server",
        "# Persistence",
        "sync_points:",
        "# Keyspace",
        "db0:keys=1,expires=0",
        "# Pool",
        "pool_fragmentation:",
    ] {
        assert!(text.contains(needle), "{needle} missing in {text}");
    }
    let Reply::Verbatim { text, .. } = run(&mut e, &["INFO", "pool"]) else {
        panic!()
    };
    assert!(text.starts_with(b"# Pool\r\n"));
    assert_eq!(
        run(&mut e, &["CONFIG", "GET", "save"]),
        Reply::Map(vec![(bulk("save"), bulk(""))])
    );
    assert_eq!(
        run(&mut e, &["CONFIG", "GET", "nothing"]),
        Reply::Map(vec![])
    );
    let Reply::Map(pairs) = run(&mut e, &["CONFIG", "GET", "max*"]) else {
        panic!()
    };
    assert_eq!(pairs.len(), 3);
    // Subcommands and their arities come from mnemo-resp's table, with Redis's texts.
    assert_eq!(
        run(&mut e, &["CONFIG", "GET"]),
        err("ERR wrong number of arguments for 'config|get' command")
    );
    // Redis's tunables are checked, kept and reported back; unknown names are refused.
    assert_eq!(
        run(&mut e, &["config", "set", "save", "1"]),
        err(
            "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"
        )
    );
    assert_eq!(run(&mut e, &["config", "set", "save", "60 1"]), ok());
    assert_eq!(
        run(&mut e, &["CONFIG", "GET", "save"]),
        Reply::Map(vec![(bulk("save"), bulk("60 1"))])
    );
    assert_eq!(
        run(&mut e, &["config", "set", "nosuch", "1"]),
        err("ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'")
    );
    assert_eq!(run(&mut e, &["CONFIG", "RESETSTAT"]), ok());
    assert_eq!(
        run(&mut e, &["CONFIG", "nosuch"]),
        err("ERR unknown subcommand 'nosuch'. Try CONFIG HELP.")
    );
    // Connection commands are the session's: the engine does not know them.
    assert_eq!(
        run(&mut e, &["AUTH", "pw"]),
        err("ERR unknown command 'AUTH', with args beginning with: 'pw' ")
    );
    assert_eq!(run(&mut e, &["FLUSHALL"]), ok());
    assert_eq!(run(&mut e, &["DBSIZE"]), int(0));
}

/// A pool that cannot grow: writes fail with Redis's OOM text, nothing half-done stays, and
/// the batch's earlier commands still commit.
#[test]
fn full_pool_replies_oom_and_keeps_the_batch() {
    let dir = scratch();
    let heap = create(&dir, 8 << 20, 8 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    let value = "v".repeat(4000);
    let mut stored = 0;
    let mut oom = false;
    for i in 0..10_000 {
        e.begin();
        let (ok_reply, _) =
            e.execute_args(&args(&["SET", &format!("before{i}"), "x"]), Protocol::Resp2);
        let (reply, _) = e.execute_args(&args(&["SET", &format!("k{i}"), &value]), Protocol::Resp2);
        let (after, _) = e.execute_args(&args(&["INCR", "counter"]), Protocol::Resp2);
        e.commit().expect("commit");
        assert_eq!(ok_reply, ok());
        assert!(
            matches!(after, Reply::Integer(_))
                || after == err("OOM command not allowed when used memory > 'maxmemory'.")
        );
        if reply == err("OOM command not allowed when used memory > 'maxmemory'.") {
            oom = true;
            break;
        }
        assert_eq!(reply, ok());
        stored += 1;
    }
    assert!(oom && stored > 100, "stored {stored}");
    assert_eq!(run(&mut e, &["GET", &format!("before{stored}")]), bulk("x"));
    assert_eq!(run(&mut e, &["EXISTS", &format!("k{stored}")]), int(0));
    // Deleting makes room again (freed lazily, with the next batches).
    for i in 0..stored {
        run(&mut e, &["DEL", &format!("k{i}")]);
    }
    assert_eq!(run(&mut e, &["SET", "again", &value]), ok());
    e.check().expect("valid");
}

/// Big values are freed a bounded amount per batch, and the space comes back.
#[test]
fn big_deletes_are_reclaimed_lazily() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    let base = heap.stats().used_bytes;
    for batch in 0..50 {
        e.begin();
        for i in batch * 100..batch * 100 + 100 {
            e.execute_args(&args(&["RPUSH", "l", &i.to_string()]), Protocol::Resp2);
            e.execute_args(&args(&["HSET", "h", &i.to_string(), "v"]), Protocol::Resp2);
            e.execute_args(
                &args(&["ZADD", "z", &i.to_string(), &i.to_string()]),
                Protocol::Resp2,
            );
        }
        e.commit().expect("commit");
    }
    assert_eq!(run(&mut e, &["ZCARD", "z"]), int(5000));
    assert_eq!(run(&mut e, &["DEL", "l", "h", "z"]), int(3));
    assert_eq!(run(&mut e, &["DBSIZE"]), int(0));
    for _ in 0..200 {
        run(&mut e, &["SET", "tick", "1"]);
    }
    let after = heap.stats().used_bytes;
    assert_eq!(e.stats().housekeeping_errors, 0);
    assert!(
        after < base + 4096,
        "base {base}, after {after}: {:?}",
        heap.live_allocations()
    );
    e.check().expect("valid");
}

#[test]
fn flushall_reclaims_and_reopen_works() {
    let dir = scratch();
    {
        let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
        let mut e = PersistentEngine::open(&heap).expect("open");
        e.begin();
        for i in 0..3000 {
            e.execute_args(&args(&["SET", &format!("k{i}"), "v"]), Protocol::Resp2);
        }
        e.commit().expect("commit");
        assert_eq!(run(&mut e, &["FLUSHALL"]), ok());
        assert_eq!(run(&mut e, &["SET", "after", "1"]), ok());
    }
    let heap = reopen(&dir);
    let mut e = PersistentEngine::open(&heap).expect("reopen");
    assert_eq!(run(&mut e, &["DBSIZE"]), int(1));
    for _ in 0..30 {
        run(&mut e, &["INCR", "after"]);
    }
    assert_eq!(e.check().expect("valid"), 1);
}

/// FLUSHALL and FLUSHDB without ASYNC free what they dropped before they answer (Redis's
/// default, `lazyfree-lazy-user-flush no`); with ASYNC it is freed a bounded amount per
/// batch afterwards. Also with the heap's default redo records (16 KiB), too small for a
/// drain transaction's first budget: it goes on with smaller ones.
#[test]
fn a_flush_frees_before_it_answers_unless_async() {
    flush_frees_before_it_answers(&small_options());
    flush_frees_before_it_answers(&HeapOptions::default());
}

fn flush_frees_before_it_answers(options: &HeapOptions) {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, options);
    let mut e = PersistentEngine::open(&heap).expect("open");
    let fill = |e: &mut PersistentEngine<'_>| {
        e.begin();
        for i in 0..2000 {
            e.execute_args(
                &args(&["HSET", &format!("h{i}"), "a", "1", "b", "2", "c", "3"]),
                Protocol::Resp2,
            );
        }
        e.commit().expect("commit");
    };
    let empty = heap.stats().used_bytes;
    for sync in [vec!["FLUSHALL"], vec!["FLUSHALL", "SYNC"], vec!["FLUSHDB"]] {
        fill(&mut e);
        let full = heap.stats().used_bytes;
        let before = e.stats().reclaim_commits;
        assert_eq!(run(&mut e, &sync), ok());
        let after = heap.stats().used_bytes;
        assert!(
            after <= empty + (full - empty) / 50,
            "{sync:?}: {after} bytes in use after it, {empty} before the fill, {full} full"
        );
        assert!(e.stats().reclaim_commits > before, "{sync:?}");
    }
    // Nothing to free: the drain's transaction is empty, no sync point and not counted.
    let before = e.stats().reclaim_commits;
    assert_eq!(run(&mut e, &["FLUSHALL"]), ok());
    assert_eq!(e.stats().reclaim_commits, before, "an empty flush");
    fill(&mut e);
    let full = heap.stats().used_bytes;
    let before = e.stats().reclaim_commits;
    assert_eq!(run(&mut e, &["FLUSHALL", "ASYNC"]), ok());
    assert!(
        heap.stats().used_bytes > empty + (full - empty) / 2,
        "ASYNC freed at once"
    );
    assert_eq!(e.stats().reclaim_commits, before);
    for _ in 0..200 {
        run(&mut e, &["SET", "k", "v"]);
    }
    assert!(
        heap.stats().used_bytes <= empty + (full - empty) / 50,
        "ASYNC: freed by the batches after it"
    );
    assert_eq!(e.check().expect("valid"), 1);
}

/// With the heap's default lane logs (16 KiB records) a batch of big commands outgrows one redo
/// record: the engine commits early and goes on; one command too big alone gets an error.
#[test]
fn batches_larger_than_a_redo_record_are_split() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &HeapOptions::default());
    let mut e = PersistentEngine::open(&heap).expect("open");
    e.begin();
    for i in 0..400 {
        let (reply, _) = e.execute_args(
            &args(&["SET", &format!("k{i}"), &"x".repeat(200)]),
            Protocol::Resp2,
        );
        assert_eq!(reply, ok());
        let (reply, _) = e.execute_args(
            &args(&["SET", &format!("k{i}"), &"y".repeat(100)]),
            Protocol::Resp2,
        );
        assert_eq!(reply, ok());
    }
    e.commit().expect("commit");
    assert!(e.stats().split_commits > 0);
    assert_eq!(run(&mut e, &["DBSIZE"]), int(400));
    let mut mset = vec!["MSET".to_string()];
    for i in 0..3000 {
        mset.push(format!("m{i}"));
        mset.push("y".repeat(100));
    }
    let refs: Vec<&str> = mset.iter().map(String::as_str).collect();
    let Reply::Error(text) = run(&mut e, &refs) else {
        panic!()
    };
    assert!(text.starts_with(b"ERR command too large"));
    assert_eq!(run(&mut e, &["DBSIZE"]), int(400));
    e.check().expect("valid");
}

/// A command that fails halfway rolls back to its savepoint, including what it wrote in
/// place into an object an earlier command of the batch created (the heap writes a batch's
/// new objects unlogged): here MSET overwrites the new key's inline value, then outgrows the
/// redo record; the batch so far is committed early (split) with the first value, and the
/// MSET, retried alone, is refused.
#[test]
fn a_failed_command_rolls_back_its_in_place_writes() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &HeapOptions::default());
    let mut e = PersistentEngine::open(&heap).expect("open");
    let in_batch =
        |e: &mut PersistentEngine<'_>, cmd: &[&str]| e.execute_args(&args(cmd), Protocol::Resp2).0;
    e.begin();
    assert_eq!(in_batch(&mut e, &["SET", "k", "first"]), ok());
    assert_eq!(in_batch(&mut e, &["RPUSH", "l", "a", "b"]), int(2));
    let mut mset = vec!["MSET".to_string(), "k".into(), "other".into()];
    for i in 0..3000 {
        mset.push(format!("m{i}"));
        mset.push("y".repeat(100));
    }
    let refs: Vec<&str> = mset.iter().map(String::as_str).collect();
    let reply = in_batch(&mut e, &refs);
    let Reply::Error(text) = reply else {
        panic!("{reply:?}")
    };
    assert!(text.starts_with(b"ERR command too large"));
    assert_eq!(in_batch(&mut e, &["GET", "k"]), bulk("first"));
    assert_eq!(in_batch(&mut e, &["RPUSH", "l", "c"]), int(3));
    e.commit().expect("commit");
    assert_eq!(e.stats().rollbacks, 1);
    assert_eq!(e.stats().split_commits, 1);
    drop(e);
    drop(heap);
    let heap = reopen(&dir);
    let mut e = PersistentEngine::open(&heap).expect("reopen");
    assert_eq!(run(&mut e, &["GET", "k"]), bulk("first"));
    assert_eq!(
        run(&mut e, &["LRANGE", "l", "0", "-1"]),
        arr(&["a", "b", "c"])
    );
    assert_eq!(e.check().expect("valid"), 2);
}

#[test]
fn corrupt_root_is_an_error_at_open() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let root = heap.root::<[u64; 8]>("kv.keyspace").expect("root");
    heap.tx(|tx| tx.write(root, &[7, 1, 2, 3, 0, 0, 0, 0]))
        .expect("write");
    let error = PersistentEngine::open(&heap).expect_err("corrupt");
    assert!(
        error.to_string().contains("does not hold a mnemo keyspace"),
        "{error}"
    );
    heap.tx(|tx| {
        tx.write(
            root,
            &[
                u64::from_le_bytes(*b"MNEMOKV\0"),
                mnemo_kv::engine::LAYOUT_VERSION,
                4096,
                0,
                0,
                0,
                0,
                0,
            ],
        )
    })
    .expect("write");
    let error = PersistentEngine::open(&heap).expect_err("corrupt");
    assert!(error.to_string().contains("corrupt"), "{error}");
}

#[test]
fn default_heap_options_open() {
    let dir = scratch();
    let heap = create(&dir, 128 << 20, 1 << 30, &heap_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    assert_eq!(run(&mut e, &["SET", "a", "b"]), ok());
}

/// The seam the server uses: sessions decode requests, `run_batch` runs them on the engine
/// in one transaction and releases the replies after the commit.
#[test]
fn runs_under_the_server_batch_runner() {
    use mnemo_kv::server::{run_batch, Session, SessionConfig};
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 256 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    let mut a = Session::new(1, SessionConfig::default());
    let mut b = Session::new(2, SessionConfig::default());
    a.receive(b"SET k 1\r\nINCR k\r\nLPUSH l x y\r\n");
    b.receive(b"GET k\r\nZADD z 1.5 m\r\nZSCORE z m\r\n");
    let mut batch: Vec<_> = std::iter::from_fn(|| a.poll_request()).collect();
    batch.extend(std::iter::from_fn(|| b.poll_request()));
    let syncs = |heap: &Heap| {
        heap.pool()
            .stats()
            .sync_points
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let completions = run_batch(&mut e, &batch).expect("commit");
    for c in completions {
        let session = if c.session == 1 { &mut a } else { &mut b };
        session.complete(&c.reply, c.close);
    }
    assert_eq!(&a.take_output()[..], b"+OK\r\n:2\r\n:2\r\n");
    assert_eq!(&b.take_output()[..], b"$1\r\n2\r\n:1\r\n$3\r\n1.5\r\n");
    // Once the allocator has runs of these sizes (publishing a new run costs the heap a
    // sync point of its own), a batch costs exactly one sync point.
    a.receive(b"SET k2 1\r\nINCR k2\r\nLPUSH l2 x y\r\nZADD z2 2 n\r\n");
    let batch: Vec<_> = std::iter::from_fn(|| a.poll_request()).collect();
    let before = syncs(&heap);
    run_batch(&mut e, &batch).expect("commit");
    assert_eq!(syncs(&heap) - before, 1, "one sync point for the batch");
    // A read-only batch has no sync point.
    b.receive(b"GET k\r\n");
    let batch: Vec<_> = std::iter::from_fn(|| b.poll_request()).collect();
    let before = syncs(&heap);
    run_batch(&mut e, &batch).expect("read-only");
    assert_eq!(syncs(&heap), before);
}

/// Bytes read from the pool are never trusted: a keyspace with one random word overwritten
/// (in any live object) gives errors or wrong values, never a panic or a hang.
#[test]
fn corrupt_words_give_errors_not_panics() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let long = "L".repeat(400);
    let setup: Vec<Vec<&str>> = vec![
        vec!["SET", "s", "short"],
        vec!["SET", "b", &long],
        vec!["SET", "t", "1", "EX", "1000"],
        vec!["RPUSH", "l", "a", "b", "c"],
        vec!["HSET", "h", "f", "v", "g", &long],
        vec!["SADD", "set", "x", "y"],
        vec!["ZADD", "z", "1", "m", "2", "n"],
    ];
    let probes: Vec<Vec<&str>> = vec![
        vec!["GET", "s"],
        vec!["GET", "b"],
        vec!["TTL", "t"],
        vec!["LRANGE", "l", "0", "-1"],
        vec!["HGETALL", "h"],
        vec!["SMEMBERS", "set"],
        vec!["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        vec!["KEYS", "*"],
        vec!["SCAN", "0"],
        vec!["DBSIZE"],
        vec!["INFO", "keyspace"],
        vec!["SET", "s", "again"],
        vec!["APPEND", "b", "x"],
        vec!["LPUSH", "l", "z"],
        vec!["RPOP", "l"],
        vec!["HSET", "h", "new", "1"],
        vec!["SPOP", "set"],
        vec!["ZADD", "z", "5", "m"],
        vec!["ZPOPMIN", "z"],
        vec!["INCR", "new"],
        vec!["DEL", "l", "h", "set", "z", "b"],
        vec!["FLUSHALL"],
    ];
    for _ in 0..150 {
        let dir = scratch();
        let heap = create(&dir, 16 << 20, 64 << 20, &small_options());
        let baseline: Vec<(u64, u64)> = heap.live_allocations();
        {
            let mut e = PersistentEngine::open(&heap).expect("open");
            for cmd in &setup {
                run(&mut e, cmd);
            }
        }
        // Corrupt one word of one of the keyspace's objects (or its root).
        let objects: Vec<(u64, u64)> = heap
            .live_allocations()
            .into_iter()
            .filter(|a| !baseline.contains(a) || a.1 <= 64)
            .collect();
        let (offset, size) = objects[(next() % objects.len() as u64) as usize];
        let at = offset + (next() % (size / 8).max(1)) * 8;
        let word = match next() % 4 {
            0 => 0,
            1 => next(),
            2 => offset,
            _ => next() % 64,
        };
        heap.tx(|tx| tx.write_bytes(at, &word.to_le_bytes()))
            .expect("corrupt");
        let Ok(mut e) = PersistentEngine::open(&heap) else {
            continue;
        };
        for cmd in &probes {
            e.begin();
            let (_, effect) = e.execute_args(&args(cmd), Protocol::Resp2);
            if effect.wrote {
                let _ = e.commit();
            } else {
                e.finish_read_only();
            }
        }
        let _ = e.check();
    }
}

/// Two corners found by the differential tests, with the replies redis-server 7.0.15 gives:
/// a score of -0 reads back as 0 (small sorted sets live in a listpack), and ZRANGE by rank
/// accepts only the LIMIT that changes nothing (offset 0, negative count).
#[test]
fn zset_negative_zero_and_rank_limit_like_redis() {
    let dir = scratch();
    let heap = create(&dir, 64 << 20, 64 << 20, &small_options());
    let mut e = PersistentEngine::open(&heap).expect("open");
    assert_eq!(
        run2(&mut e, &["ZADD", "z", "1", "a", "2", "b", "-0", "c"]),
        int(3)
    );
    assert_eq!(run2(&mut e, &["ZSCORE", "z", "c"]), bulk("0"));
    assert_eq!(run2(&mut e, &["ZINCRBY", "z", "-0", "c"]), bulk("0"));
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]),
        arr(&["c", "0", "a", "1", "b", "2"])
    );
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "0", "-1", "LIMIT", "0", "-1"]),
        arr(&["c", "a", "b"])
    );
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "0", "-1", "LIMIT", "0", "-5"]),
        arr(&["c", "a", "b"])
    );
    let limit_err = err(
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
    );
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "0", "-1", "LIMIT", "0", "1"]),
        limit_err
    );
    assert_eq!(
        run2(&mut e, &["ZRANGE", "z", "0", "-1", "LIMIT", "1", "-1"]),
        limit_err
    );
}
