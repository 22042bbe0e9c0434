//! DUMP and RESTORE (keyspace group) against a real redis-server 7.0 (`common/mod.rs`):
//! payloads cross over both ways (Redis's DUMP restored into mnemo and mnemo's into Redis,
//! for every type, in small and large encodings: integers, LZF-compressed strings,
//! listpacks, intsets, quicklists, hash tables, skip lists), a damaged payload gets Redis's
//! checksum error on both, RESTORE's options and errors are Redis's, and DUMP of a short
//! string is byte for byte Redis's.

mod common;

use common::{sorted, Clients, Pair};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::Reply;

fn args(words: &[&[u8]]) -> Vec<Bytes> {
    words.iter().map(|w| Bytes::copy_from_slice(w)).collect()
}

/// Sends `words` to both servers and records a difference between the replies.
fn check(c: &mut Clients, words: &[&[u8]]) {
    let request = args(words);
    let (redis, mnemo) = (c.redis.call(&request), c.mnemo.call(&request));
    if redis != mnemo {
        let line: Vec<String> = words
            .iter()
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        c.differences.push(format!(
            "{}: redis {redis:?}, mnemo {mnemo:?}",
            line.join(" ")
        ));
    }
}

fn payload(reply: Reply) -> Bytes {
    match reply {
        Reply::Bulk(bytes) => bytes,
        other => panic!("DUMP: {other:?}"),
    }
}

/// Builds the same keys on both servers: each type small and large.
fn fill(c: &mut Clients) {
    let mut lines = vec![
        "SET str hello".to_string(),
        "SET int 300".to_string(),
        "SET negative -70000".to_string(),
        "SET huge 12345678901234".to_string(),
        format!("SET long {}", "abc".repeat(100)),
        format!("SET mixed {}", "abcdefghijklmnopqrstuvwxyz0123456789"),
        "RPUSH list a b 1 -2 70000 c".to_string(),
        "SADD ints 1 2 3 -5 100000".to_string(),
        "SADD set x y z 1".to_string(),
        "HSET hash f1 v1 f2 2 f3 {empty}".to_string(),
        "ZADD zset 1 a 2.5 b -3 c 1e20 d".to_string(),
    ];
    let many: Vec<String> = (0..150)
        .map(|i| format!("element-{i}-{}", "x".repeat(i % 110)))
        .collect();
    lines.push(format!("RPUSH biglist {}", many.join(" ")));
    lines.push(format!("SADD bigset {}", many.join(" ")));
    let pairs: Vec<String> = many.iter().map(|m| format!("{m} {m}")).collect();
    lines.push(format!("HSET bighash {}", pairs.join(" ")));
    let scored: Vec<String> = (0..150)
        .map(|i| format!("{}.25 {}", i * 7 % 150, many[i]))
        .collect();
    lines.push(format!("ZADD bigzset {}", scored.join(" ")));
    for line in &lines {
        c.check(line);
    }
}

const KEYS: &[&str] = &[
    "str", "int", "negative", "huge", "long", "mixed", "list", "ints", "set", "hash", "zset",
    "biglist", "bigset", "bighash", "bigzset",
];

/// Compares the contents of `key` on both servers.
fn same_contents(c: &mut Clients, key: &str) {
    c.check(&format!("TYPE {key}"));
    c.check(&format!("GET {key}"));
    c.check(&format!("LRANGE {key} 0 -1"));
    c.check_with(&format!("SMEMBERS {key}"), sorted);
    c.check_with(&format!("HGETALL {key}"), |reply| match reply {
        Reply::Array(items) => {
            let mut pairs: Vec<Reply> = items
                .chunks(2)
                .map(|pair| Reply::Array(pair.to_vec()))
                .collect();
            pairs.sort_by_key(|p| format!("{p:?}"));
            Reply::Array(pairs)
        }
        other => other,
    });
    c.check(&format!("ZRANGE {key} 0 -1 WITHSCORES"));
}

#[test]
fn payloads_cross_over_both_ways() {
    let Some(pair) = Pair::start("DUMP/RESTORE differential test") else {
        return;
    };
    let mut c = pair.connect();
    fill(&mut c);
    for key in KEYS {
        let from_redis = payload(c.redis.call(&args(&[b"DUMP", key.as_bytes()])));
        let from_mnemo = payload(c.mnemo.call(&args(&[b"DUMP", key.as_bytes()])));
        let copy = format!("copy:{key}");
        // Redis's payload into mnemo, mnemo's into Redis: the copies must equal the originals.
        let restored = c
            .mnemo
            .call(&args(&[b"RESTORE", copy.as_bytes(), b"0", &from_redis]));
        assert_eq!(restored, Reply::ok(), "mnemo restoring Redis's {key}");
        let restored = c
            .redis
            .call(&args(&[b"RESTORE", copy.as_bytes(), b"0", &from_mnemo]));
        assert_eq!(restored, Reply::ok(), "Redis restoring mnemo's {key}");
        same_contents(&mut c, &copy);
        // And each server's payload into itself.
        for (name, conn, own) in [
            ("redis", &mut c.redis, &from_redis),
            ("mnemo", &mut c.mnemo, &from_mnemo),
        ] {
            let again = format!("again:{key}");
            let reply = conn.call(&args(&[b"RESTORE", again.as_bytes(), b"0", own]));
            assert_eq!(reply, Reply::ok(), "{name} restoring its own {key}");
        }
        same_contents(&mut c, &format!("again:{key}"));
    }
    c.assert_same();
}

#[test]
fn dump_of_short_strings_is_redis_byte_for_byte() {
    let Some(pair) = Pair::start("DUMP differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "SET s hello",
        "DUMP s",
        "SET e {empty}",
        "DUMP e",
        "SET n 300",
        "DUMP n",
        "SET n -1",
        "DUMP n",
        "SET n 127",
        "DUMP n",
        "SET n -32768",
        "DUMP n",
        "SET n 2147483647",
        "DUMP n",
        "SET n 2147483648",
        "DUMP n",
        "SET n 007",
        "DUMP n",
        "SET n +5",
        "DUMP n",
        "SET n abcdefghijklmnopqrst",
        "DUMP n",
        "SET n abcdefghijklmnopqrstuvwxyz0123456789",
        "DUMP n",
        "DUMP nokey",
        "DUMP",
        "DUMP a b",
    ]);
    c.assert_same();
}

#[test]
fn restore_options_and_errors_like_redis() {
    let Some(pair) = Pair::start("RESTORE differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("SET src value");
    let good = payload(c.redis.call(&args(&[b"DUMP", b"src"])));
    let mut damaged = good.to_vec();
    damaged[3] ^= 0x01;
    let mut newer = good.to_vec();
    let at = newer.len() - 10;
    newer[at] = 11;
    let good = &good[..];
    let cases: &[&[&[u8]]] = &[
        &[b"RESTORE", b"k", b"0", good],
        &[b"GET", b"k"],
        &[b"RESTORE", b"k", b"0", good],
        &[b"RESTORE", b"k", b"0", good, b"REPLACE"],
        &[b"RESTORE", b"k", b"0", b"garbage"],
        &[b"RESTORE", b"k", b"0", b"garbage", b"REPLACE"],
        &[b"RESTORE", b"k2", b"0", &damaged],
        &[b"RESTORE", b"k2", b"0", &newer],
        &[b"RESTORE", b"k2", b"0", b""],
        &[b"RESTORE", b"k2", b"-1", good],
        &[b"RESTORE", b"k2", b"x", good],
        &[b"RESTORE", b"k", b"-1", good],
        &[b"RESTORE", b"k2", b"0", good, b"FOO"],
        &[b"RESTORE", b"k2", b"0", good, b"IDLETIME", b"-1"],
        &[b"RESTORE", b"k2", b"0", good, b"IDLETIME", b"x"],
        &[b"RESTORE", b"k2", b"0", good, b"FREQ", b"256"],
        &[b"RESTORE", b"k2", b"0", good, b"FREQ", b"-1"],
        &[
            b"RESTORE",
            b"k2",
            b"0",
            good,
            b"IDLETIME",
            b"5",
            b"FREQ",
            b"5",
        ],
        &[b"RESTORE", b"k2", b"0", good, b"IDLETIME"],
        &[b"RESTORE", b"k2", b"0", good, b"IDLETIME", b"100"],
        &[b"RESTORE", b"k3", b"0", good, b"FREQ", b"10", b"REPLACE"],
        &[b"GET", b"k3"],
        &[b"RESTORE", b"k4", b"1", good, b"ABSTTL"],
        &[b"EXISTS", b"k4"],
        &[b"SET", b"k5", b"old"],
        &[b"RESTORE", b"k5", b"1", good, b"ABSTTL", b"REPLACE"],
        &[b"EXISTS", b"k5"],
        &[b"RESTORE", b"k6", b"99999999999999", good, b"ABSTTL"],
        &[b"RESTORE-ASKING", b"k7", b"0", good],
        &[b"GET", b"k7"],
        &[b"RESTORE-ASKING", b"k7", b"0", good],
        &[b"RESTORE", b"k", b"0"],
        &[b"LPUSH", b"l", b"x"],
        &[b"RESTORE", b"l", b"0", good],
        &[b"RESTORE", b"l", b"0", good, b"REPLACE"],
        &[b"TYPE", b"l"],
    ];
    for case in cases {
        check(&mut c, case);
    }
    // A relative TTL: both keep the key with a TTL of about the same.
    check(&mut c, &[b"RESTORE", b"t", b"100000", good]);
    let (redis, mnemo) = c.both("PTTL t");
    for ttl in [redis, mnemo] {
        assert!(
            matches!(ttl, Reply::Integer(ms) if ms > 90_000 && ms <= 100_000),
            "{ttl:?}"
        );
    }
    c.assert_same();
}

/// Sends `redis_line` to Redis and `mnemo_line` to mnemo (the same MIGRATE, each aimed at
/// the other server); records a difference between the replies.
fn cross(c: &mut Clients, redis_line: &str, mnemo_line: &str) {
    let redis = c.redis.call(&common::words(redis_line));
    let mnemo = c.mnemo.call(&common::words(mnemo_line));
    if redis != mnemo {
        c.differences
            .push(format!("{mnemo_line}: redis {redis:?}, mnemo {mnemo:?}"));
    }
}

/// MIGRATE between the two: Redis's keys into mnemo and mnemo's into Redis (so each reads
/// the other's payloads and requests), with COPY, REPLACE, KEYS, TTLs, the target's errors
/// and Redis's own errors.
#[test]
fn migrate_between_redis_and_mnemo() {
    let Some(pair) = Pair::start("MIGRATE differential test") else {
        return;
    };
    let mut c = pair.connect();
    fill(&mut c);
    c.check("SET ttl v PX 100000");
    let (to_mnemo, to_redis) = (pair.mnemo_port(), pair.redis.port());
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let same = |c: &mut Clients, tail: &str| {
        cross(
            c,
            &format!("MIGRATE 127.0.0.1 {to_mnemo} {tail}"),
            &format!("MIGRATE 127.0.0.1 {to_redis} {tail}"),
        );
    };
    // Errors found before connecting, then a refused connection.
    for tail in [
        "str 0 1000 FOO",
        "str 0 1000 AUTH",
        "str 0 1000 AUTH2 user",
        "str 0 1000 KEYS a",
        "str x 1000",
        "str 0 x",
        "nokey 0 1000",
        "{empty} 0 1000 KEYS nokey other",
        "str 0",
    ] {
        same(&mut c, tail);
    }
    c.check(&format!("MIGRATE 127.0.0.1 {closed} str 0 1000"));
    // Every key, copied into database 3 of the other server.
    let all = KEYS.join(" ");
    same(
        &mut c,
        &format!("{{empty}} 3 5000 COPY KEYS {all} ttl nokey"),
    );
    c.check("DBSIZE");
    c.check("SELECT 3");
    let (redis, mnemo) = c.both("DBSIZE");
    let expected = Reply::Integer(KEYS.len() as i64 + 1);
    assert_eq!((redis, mnemo), (expected.clone(), expected), "keys copied");
    for key in KEYS {
        same_contents(&mut c, key);
    }
    let (redis, mnemo) = c.both("PTTL ttl");
    for ttl in [redis, mnemo] {
        assert!(matches!(ttl, Reply::Integer(ms) if ms > 90_000), "{ttl:?}");
    }
    c.check("SELECT 0");
    // Again: the target has the keys now.
    same(&mut c, "str 3 5000 COPY");
    same(&mut c, "{empty} 3 5000 COPY KEYS list set");
    same(&mut c, "str 3 5000 COPY REPLACE");
    // A move: gone here once the target has it.
    same(&mut c, "hash 4 5000");
    let (redis, mnemo) = c.both("EXISTS hash");
    assert_eq!(
        (redis, mnemo),
        (Reply::Integer(0), Reply::Integer(0)),
        "moved"
    );
    same(&mut c, "hash 4 5000");
    // The target refuses the password: its error comes back.
    same(&mut c, "str 5 5000 AUTH secret");
    same(&mut c, "str 99 5000");
    c.check("EXISTS str");
    c.assert_same();
}
