//! Operators' and ops tools' commands against a real redis-server 7.0 (`common/mod.rs`):
//! SLOWLOG (a real slow log: with `slowlog-log-slower-than 0` both log the same commands
//! with the same ids and arguments), LATENCY (monitoring off, Redis's default), MEMORY, WAIT
//! (no replicas), the cluster, replication, module, DEBUG and ACL commands a standalone
//! Redis with its default configuration answers, LOLWUT, COMMAND GETKEYS, CLIENT NO-EVICT,
//! and COMMAND COUNT. Every reply the same, errors included, but for what each says about
//! itself (times, durations, client addresses, version): those are compared by shape.

mod common;

use common::{Clients, Pair};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::Reply;

/// SLOWLOG GET's entries with the time, the duration and the client's address and name
/// blanked (they differ between two servers; the ids and the arguments must not).
fn slow_entries(reply: Reply) -> Reply {
    let Reply::Array(entries) = reply else {
        return reply;
    };
    let blank = |entry: Reply| match entry {
        Reply::Array(fields) if fields.len() == 6 => {
            let mut fields = fields;
            assert!(matches!(fields[1], Reply::Integer(t) if t > 1_600_000_000));
            assert!(matches!(fields[2], Reply::Integer(us) if us >= 0));
            fields[1] = Reply::Integer(0);
            fields[2] = Reply::Integer(0);
            fields[4] = Reply::Null;
            fields[5] = Reply::Null;
            Reply::Array(fields)
        }
        other => other,
    };
    Reply::Array(entries.into_iter().map(blank).collect())
}

#[test]
fn slowlog_like_redis() {
    let Some(pair) = Pair::start("slowlog differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "SLOWLOG LEN",
        "SLOWLOG GET",
        "SLOWLOG RESET",
        "SLOWLOG HELP",
        "SLOWLOG GET x",
        "SLOWLOG GET -2",
        "SLOWLOG GET 1 2",
        "SLOWLOG LEN x",
        "SLOWLOG FOO",
        "SLOWLOG",
        "CONFIG SET slowlog-log-slower-than 0",
        "SET a 1",
        "GET a",
        "RPUSH l x y z",
    ]);
    let long = "v".repeat(200);
    c.check(&format!("SET long {long}"));
    let many: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    c.check(&format!("DEL {}", many.join(" ")));
    c.check("SLOWLOG LEN");
    c.check_with("SLOWLOG GET", slow_entries);
    c.check_with("SLOWLOG GET 2", slow_entries);
    c.check_with("SLOWLOG GET -1", slow_entries);
    c.check_with("SLOWLOG GET 0", slow_entries);
    // A shorter log drops the oldest entries at once.
    c.check("CONFIG SET slowlog-max-len 3");
    c.check("SLOWLOG LEN");
    c.check_with("SLOWLOG GET -1", slow_entries);
    c.check("SLOWLOG RESET");
    c.check("SLOWLOG LEN");
    // Off: nothing is logged.
    c.check("CONFIG SET slowlog-log-slower-than -1");
    c.script(&[
        "SET a 2",
        "GET a",
        "SLOWLOG RESET",
        "SET a 3",
        "SLOWLOG LEN",
    ]);
    c.check_with("SLOWLOG GET", slow_entries);
    c.assert_same();
}

/// Only commands slower than the threshold are logged: a SORT of a long list by other keys'
/// values (tens of milliseconds in a debug build) is, a GET (tens of microseconds) is not.
#[test]
fn slowlog_keeps_only_slow_commands() {
    let Some(pair) = Pair::start("slowlog threshold test") else {
        return;
    };
    let mut c = pair.connect();
    c.mnemo
        .call(&common::words("CONFIG SET slowlog-log-slower-than 5000"));
    let values: Vec<String> = (0..20000)
        .map(|i| ((i * 7919) % 20000).to_string())
        .collect();
    // In pieces: the test pool's redo records are small.
    for chunk in values.chunks(200) {
        let line = format!("RPUSH big {}", chunk.join(" "));
        assert!(matches!(
            c.mnemo.call(&common::words(&line)),
            Reply::Integer(_)
        ));
    }
    c.mnemo.call(&common::words("SLOWLOG RESET"));
    c.mnemo.call(&common::words("GET a"));
    c.mnemo.call(&common::words("SORT big BY w_* GET # ALPHA"));
    let Reply::Array(entries) = c.mnemo.call(&common::words("SLOWLOG GET")) else {
        panic!("SLOWLOG GET is an array");
    };
    let logged: Vec<Reply> = entries
        .into_iter()
        .filter_map(|entry| match entry {
            Reply::Array(fields) => fields.get(3).cloned(),
            _ => None,
        })
        .collect();
    let sort = Reply::Array(
        ["SORT", "big", "BY", "w_*", "GET", "#", "ALPHA"]
            .iter()
            .map(|w| Reply::Bulk(Bytes::from(*w)))
            .collect(),
    );
    assert!(
        logged.contains(&sort),
        "SORT not in the slow log: {logged:?}"
    );
    let get = Reply::Array(vec![
        Reply::Bulk(Bytes::from("GET")),
        Reply::Bulk(Bytes::from("a")),
    ]);
    assert!(!logged.contains(&get), "GET in the slow log: {logged:?}");
}

#[test]
fn latency_memory_and_wait_like_redis() {
    let Some(pair) = Pair::start("latency and memory differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "SET s hello",
        "LATENCY LATEST",
        "LATENCY HISTORY command",
        "LATENCY GRAPH command",
        "LATENCY RESET",
        "LATENCY RESET command fork",
        "LATENCY DOCTOR",
        "LATENCY HELP",
        "LATENCY FOO",
        "LATENCY HISTORY",
        // Monitoring on, with a threshold no command here reaches: still nothing sampled.
        "CONFIG SET latency-monitor-threshold 5000",
        "SET k v",
        "LATENCY LATEST",
        "LATENCY HISTORY command",
        "LATENCY DOCTOR",
        "LATENCY RESET",
        "CONFIG SET latency-monitor-threshold 0",
        "LATENCY DOCTOR",
        "MEMORY USAGE nokey",
        "MEMORY USAGE s SAMPLES x",
        "MEMORY USAGE s SAMPLES -1",
        "MEMORY USAGE s FOO",
        "MEMORY USAGE s SAMPLES",
        "MEMORY USAGE",
        "MEMORY PURGE",
        "MEMORY HELP",
        "MEMORY FOO",
        "WAIT 0 0",
        "WAIT 1 10",
        "WAIT x 0",
        "WAIT 0 x",
        "WAIT 1 -1",
        "WAIT 1",
    ]);
    c.assert_same();
    // Sizes are each server's own: an integer for a key, growing with the value.
    let usage = |c: &mut Clients, line: &str| match c.mnemo.call(&common::words(line)) {
        Reply::Integer(bytes) => bytes,
        other => panic!("{line}: {other:?}"),
    };
    let small = usage(&mut c, "MEMORY USAGE s");
    c.mnemo
        .call(&common::words(&format!("SET big {}", "x".repeat(5000))));
    let big = usage(&mut c, "MEMORY USAGE big");
    assert!(small > 5 && big > small + 4900, "{small} {big}");
    let values: Vec<String> = (0..100).map(|i| format!("member-{i}")).collect();
    c.mnemo
        .call(&common::words(&format!("SADD set {}", values.join(" "))));
    let sampled = usage(&mut c, "MEMORY USAGE set");
    let whole = usage(&mut c, "MEMORY USAGE set SAMPLES 0");
    assert!(whole > 100 * 8 && sampled > 100 * 8, "{sampled} {whole}");
    // A map: in RESP2, name and value in turn.
    let Reply::Array(stats) = c.mnemo.call(&common::words("MEMORY STATS")) else {
        panic!("MEMORY STATS is a map");
    };
    let keys = stats
        .chunks(2)
        .find(|pair| pair[0] == Reply::Bulk(Bytes::from("keys.count")));
    assert_eq!(keys.map(|pair| pair[1].clone()), Some(Reply::Integer(4)));
    // Both hold less than 5 MiB: too little for the doctor, in the same words.
    c.check("MEMORY DOCTOR");
    c.assert_same();
}

#[test]
fn standalone_server_commands_like_redis() {
    let Some(pair) = Pair::start("standalone server differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "READONLY",
        "READWRITE",
        "ASKING",
        "CLUSTER INFO",
        "CLUSTER SLOTS",
        "CLUSTER",
        "READONLY x",
        "REPLICAOF NO ONE",
        "SLAVEOF no one",
        "REPLICAOF host port",
        "REPLICAOF host 99999",
        "REPLICAOF a",
        "FAILOVER",
        "FAILOVER ABORT",
        "FAILOVER TO host x",
        "FAILOVER TIMEOUT 0",
        "FAILOVER TIMEOUT x",
        "FAILOVER FOO",
        "FAILOVER TO h 1 TIMEOUT 10",
        "BGREWRITEAOF",
        "BGREWRITEAOF x",
        "DEBUG SLEEP 0",
        "DEBUG OBJECT k",
        "DEBUG",
        "MODULE LIST",
        "MODULE LOAD /tmp/nosuch.so",
        "MODULE UNLOAD x",
        "MODULE HELP",
        "MODULE FOO",
        "ACL WHOAMI",
        "ACL USERS",
        "ACL CAT",
        "ACL CAT nosuch",
        "ACL LOG",
        "ACL LOG 5",
        "ACL LOG RESET",
        "ACL LOG x",
        "ACL GENPASS 0",
        "ACL GENPASS 4097",
        "ACL GENPASS x",
        "ACL FOO",
        "LOLWUT VERSION x",
    ]);
    c.assert_same();
    // Random passwords: the same length, hexadecimal.
    for (line, digits) in [
        ("ACL GENPASS", 64),
        ("ACL GENPASS 5", 2),
        ("ACL GENPASS 64", 16),
    ] {
        let (redis, mnemo) = c.both(line);
        for reply in [redis, mnemo] {
            let Reply::Bulk(text) = reply else {
                panic!("{line}: {reply:?}");
            };
            assert_eq!(text.len(), digits, "{line}");
            assert!(text.iter().all(u8::is_ascii_hexdigit), "{line}");
        }
    }
    // LOLWUT ends with the version line (Redis draws art above it for versions 5 and 6).
    let (redis, mnemo) = c.both("LOLWUT VERSION 1");
    for reply in [redis, mnemo] {
        let Reply::Bulk(text) = reply else {
            panic!("LOLWUT: {reply:?}");
        };
        assert!(text.starts_with(b"Redis ver. 7.0."), "{text:?}");
    }
}

#[test]
fn command_getkeys_and_client_no_evict_like_redis() {
    let Some(pair) = Pair::start("COMMAND GETKEYS differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "COMMAND GETKEYS get k",
        "COMMAND GETKEYS set k v EX 10",
        "COMMAND GETKEYS mset a 1 b 2 c 3",
        "COMMAND GETKEYS del a b c",
        "COMMAND GETKEYS blpop a b 0",
        "COMMAND GETKEYS bitop and d a b",
        "COMMAND GETKEYS object encoding k",
        "COMMAND GETKEYS memory usage k",
        "COMMAND GETKEYS zunion 2 a b",
        "COMMAND GETKEYS zunionstore d 2 a b weights 1 2",
        "COMMAND GETKEYS zinterstore d 1 a",
        "COMMAND GETKEYS zdiff 1 a",
        "COMMAND GETKEYS sintercard 2 a b LIMIT 1",
        "COMMAND GETKEYS lmpop 2 a b left",
        "COMMAND GETKEYS blmpop 0 2 a b left",
        "COMMAND GETKEYS bzmpop 0 1 a min",
        "COMMAND GETKEYS zmpop 1 a min",
        "COMMAND GETKEYS sort k",
        "COMMAND GETKEYS sort k by x store d",
        "COMMAND GETKEYS sort k limit 0 1 get # store d",
        "COMMAND GETKEYS sort_ro k by x",
        "COMMAND GETKEYS lmove a b left right",
        "COMMAND GETKEYS migrate h 1 k 0 10",
        "COMMAND GETKEYS migrate h 1 {empty} 0 10 AUTH pw KEYS a b",
        "COMMAND GETKEYS migrate h 1 {empty} 0 10 AUTH2 u pw COPY KEYS a",
        "COMMAND GETKEYS spublish ch msg",
        "COMMAND GETKEYS ssubscribe a b",
        "COMMAND GETKEYS dump k",
        "COMMAND GETKEYS restore k 0 x",
        "COMMAND GETKEYS bitfield k GET u8 0",
        "COMMAND GETKEYS georadius k 0 0 1 km STORE d",
        "COMMAND GETKEYS georadius k 0 0 1 km STOREDIST d COUNT 1",
        "COMMAND GETKEYS georadiusbymember k m 1 km STORE d",
        "COMMAND GETKEYS georadius_ro k 0 0 1 km",
        "COMMAND GETKEYS geosearchstore d k FROMMEMBER m BYRADIUS 1 km",
        "COMMAND GETKEYS pfmerge d a b",
        "COMMAND GETKEYS pfcount a b",
        "COMMAND GETKEYS zunion x a",
        "COMMAND GETKEYS sintercard 3 a b",
        "COMMAND GETKEYS zunion 0 a",
        "COMMAND GETKEYS config get x",
        "COMMAND GETKEYS ping x",
        "COMMAND GETKEYS nosuch k",
        "COMMAND GETKEYS set k",
        "COMMAND GETKEYS get",
        "COMMAND GETKEYS",
        "CLIENT NO-EVICT on",
        "CLIENT NO-EVICT OFF",
        "CLIENT NO-EVICT maybe",
        "CLIENT NO-EVICT",
    ]);
    c.assert_same();
}

/// Issue 17's coverage target.
#[test]
fn command_count_reaches_200() {
    let Some(pair) = Pair::start("COMMAND COUNT test") else {
        return;
    };
    let mut c = pair.connect();
    let Reply::Integer(count) = c.mnemo.call(&common::words("COMMAND COUNT")) else {
        panic!("COMMAND COUNT is an integer");
    };
    let Reply::Array(names) = c.mnemo.call(&common::words("COMMAND LIST")) else {
        panic!("COMMAND LIST is an array");
    };
    // COMMAND LIST names subcommands too ("config|get"), as Redis 7.0's does.
    let top = names.iter().filter(|name| match name {
        Reply::Bulk(name) => !name.contains(&b'|'),
        _ => false,
    });
    assert_eq!(usize::try_from(count).ok(), Some(top.count()));
    assert!(count >= 200, "COMMAND COUNT {count}");
    // Every name mnemo lists, Redis 7.0 lists too (but CLIENT SETINFO, which clients of
    // Redis 7.2 send at connection).
    let Reply::Array(theirs) = c.redis.call(&common::words("COMMAND LIST")) else {
        panic!("COMMAND LIST is an array");
    };
    for name in names
        .iter()
        .filter(|n| **n != Reply::Bulk(Bytes::from("client|setinfo")))
    {
        assert!(theirs.contains(name), "{name:?} is not a Redis 7.0 command");
    }
}

/// With `latency-monitor-threshold` 1 ms, a slow SORT (tens of milliseconds in a debug
/// build) is a `command` event: LATEST, HISTORY, DOCTOR and RESET show it, then forget it.
#[test]
fn latency_monitor_samples_slow_commands() {
    let Some(pair) = Pair::start("latency monitor test") else {
        return;
    };
    let mut c = pair.connect();
    let mut call = |line: &str| c.mnemo.call(&common::words(line));
    let values: Vec<String> = (0..20000)
        .map(|i| ((i * 7919) % 20000).to_string())
        .collect();
    for chunk in values.chunks(200) {
        assert!(matches!(
            call(&format!("RPUSH big {}", chunk.join(" "))),
            Reply::Integer(_)
        ));
    }
    assert_eq!(call("CONFIG SET latency-monitor-threshold 1"), Reply::ok());
    call("SORT big BY w_* GET # ALPHA");
    let Reply::Array(latest) = call("LATENCY LATEST") else {
        panic!("LATENCY LATEST is an array");
    };
    let [Reply::Array(event)] = &latest[..] else {
        panic!("one event: {latest:?}");
    };
    assert_eq!(event[0], Reply::Bulk(Bytes::from("command")));
    let (Reply::Integer(time), Reply::Integer(ms), Reply::Integer(max)) =
        (&event[1], &event[2], &event[3])
    else {
        panic!("{event:?}");
    };
    assert!(*time > 1_600_000_000 && *ms >= 1 && max >= ms, "{event:?}");
    let Reply::Array(history) = call("LATENCY HISTORY command") else {
        panic!("LATENCY HISTORY is an array");
    };
    assert_eq!(history.len(), 1);
    let Reply::Bulk(doctor) = call("LATENCY DOCTOR") else {
        panic!("LATENCY DOCTOR is text");
    };
    assert!(String::from_utf8_lossy(&doctor).contains("1. command: 1 latency spikes"));
    assert_eq!(
        call("LATENCY GRAPH fast-command"),
        Reply::Error(Bytes::from(
            "ERR No samples available for event 'fast-command'"
        ))
    );
    assert_eq!(call("LATENCY RESET fast-command"), Reply::Integer(0));
    assert_eq!(call("LATENCY RESET"), Reply::Integer(1));
    assert_eq!(call("LATENCY LATEST"), Reply::Array(Vec::new()));
}

/// CLIENT REPLY OFF / SKIP / ON: the same replies dropped and sent, local answers (PING,
/// errors) and the engine's (SET, GET) alike, pub/sub events still sent; and the
/// tracking subcommands of a server where tracking is never on.
#[test]
fn client_reply_like_redis() {
    let Some(pair) = Pair::start("CLIENT REPLY differential test") else {
        return;
    };
    let mut c = pair.connect();
    let lines = [
        "CLIENT REPLY OFF",
        "SET a 1",
        "GET a",
        "PING",
        "NOSUCH",
        "CLIENT REPLY SKIP",
        "GET a",
        "CLIENT REPLY ON",
        "GET a",
        "CLIENT REPLY SKIP",
        "CLIENT REPLY ON",
        "PING",
        "CLIENT REPLY SKIP",
        "INCR a",
        "GET a",
        "CLIENT REPLY SKIP",
        "CLIENT REPLY OFF",
        "PING",
        "CLIENT REPLY ON",
        "CLIENT REPLY FOO",
        "CLIENT REPLY OFF",
        "CLIENT REPLY FOO",
        "RESET",
        "GET a",
        "CLIENT REPLY",
    ];
    for line in lines {
        c.redis.send(&common::words(line));
        c.mnemo.send(&common::words(line));
    }
    // What both sent back, until neither sends more.
    let wait = std::time::Duration::from_millis(300);
    let mut replies = (Vec::new(), Vec::new());
    while c.redis.has_reply_within(wait) {
        replies.0.push(c.redis.reply());
    }
    while c.mnemo.has_reply_within(wait) {
        replies.1.push(c.mnemo.reply());
    }
    assert_eq!(replies.1, replies.0);
    assert_eq!(replies.0.len(), 10, "{:?}", replies.0);
    // Messages still arrive with replies off.
    let mut publisher = pair.connect();
    for line in ["CLIENT REPLY OFF", "SUBSCRIBE ch"] {
        c.redis.send(&common::words(line));
        c.mnemo.send(&common::words(line));
    }
    // The subscription's confirmation and the message: pushes, sent all the same.
    let (redis, mnemo) = (c.redis.reply(), c.mnemo.reply());
    assert_eq!(redis, mnemo);
    publisher.check("PUBLISH ch hello");
    let (redis, mnemo) = (c.redis.reply(), c.mnemo.reply());
    assert_eq!(redis, mnemo);
    let mut d = pair.connect();
    d.script(&[
        "CLIENT GETREDIR",
        "CLIENT TRACKINGINFO",
        "CLIENT CACHING yes",
        "CLIENT CACHING maybe",
        "CLIENT GETREDIR x",
    ]);
    d.assert_same();
    publisher.assert_same();
}
