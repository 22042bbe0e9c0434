//! Server commands against a real redis-server 7.0 (`common/mod.rs`): CONFIG GET / SET of
//! Redis's parameters (those that do not apply to mnemo are accepted with Redis's checks and
//! reported back; those mnemo cannot honour are refused with the reason), CONFIG HELP /
//! REWRITE, INFO's sections, TIME, LASTSAVE.

mod common;

use common::{Clients, Pair};
use mnemo_resp::Reply;

/// CONFIG GET's pairs, sorted by name (Redis lists them in its hash table's order).
fn pairs(reply: Reply) -> Reply {
    match reply {
        Reply::Array(items) => {
            let mut pairs: Vec<Reply> = items
                .chunks(2)
                .map(|pair| Reply::Array(pair.to_vec()))
                .collect();
            pairs.sort_by_key(|p| format!("{p:?}"));
            Reply::Array(pairs)
        }
        Reply::Map(mut pairs) => {
            pairs.sort_by_key(|p| format!("{p:?}"));
            Reply::Map(pairs)
        }
        other => other,
    }
}

const TUNED: &[&str] = &[
    "hash-max-listpack-entries",
    "hash-max-ziplist-entries",
    "hash-max-listpack-value",
    "zset-max-listpack-entries",
    "zset-max-ziplist-value",
    "set-max-intset-entries",
    "list-max-listpack-size",
    "list-compress-depth",
    "stream-node-max-bytes",
    "active-expire-effort",
    "activerehashing",
    "lazyfree-lazy-user-del",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "hz",
    "save",
];

#[test]
fn config_like_redis() {
    let Some(pair) = Pair::start("server differential test") else {
        return;
    };
    let mut c = pair.connect();
    // Defaults of the tunables (appendfsync differs on purpose: mnemo syncs every write).
    for name in TUNED {
        c.check_with(&format!("CONFIG GET {name}"), pairs);
    }
    c.check_with("CONFIG GET *max-*-entries*", pairs);
    c.check_with("CONFIG GET hash-max-* zset-max-listpack-*", pairs);
    c.check_with("CONFIG GET HZ", pairs);
    c.check_with("CONFIG GET nosuchparameter", pairs);
    c.check_with("CONFIG GET databases maxmemory-policy", pairs);
    let script = [
        "CONFIG SET hash-max-listpack-entries 1000",
        "CONFIG SET hash-max-ziplist-entries 7",
        "CONFIG SET hash-max-listpack-value 1kb",
        "CONFIG SET zset-max-listpack-value 2k",
        "CONFIG SET stream-node-max-bytes {empty}",
        "CONFIG SET set-max-intset-entries abc",
        "CONFIG SET set-max-intset-entries -1",
        "CONFIG SET set-max-intset-entries +5",
        "CONFIG SET list-max-listpack-size -5",
        "CONFIG SET list-max-listpack-size 99999999999",
        "CONFIG SET list-compress-depth -1",
        "CONFIG SET hash-max-listpack-value +5",
        "CONFIG SET hash-max-listpack-value 1gbb",
        "CONFIG SET hash-max-listpack-value -1",
        "CONFIG SET hash-max-listpack-value 9223372036854775808",
        "CONFIG SET active-expire-effort 0",
        "CONFIG SET active-expire-effort 11",
        "CONFIG SET active-expire-effort 5",
        "CONFIG SET activerehashing maybe",
        "CONFIG SET activerehashing NO",
        "CONFIG SET lazyfree-lazy-user-del Yes",
        "CONFIG SET appendfsync sometimes",
        "CONFIG SET hz 1000",
        "CONFIG SET hz 0",
        "CONFIG SET hz x",
        "CONFIG SET hz 20 hz 30",
        "CONFIG SET hz 20 HZ 30",
        "CONFIG SET hz 20 lfu-log-factor 5 list-compress-depth",
        "CONFIG SET hz 25 lfu-log-factor x",
        "CONFIG SET hz 25 lfu-log-factor 7",
        "CONFIG SET save 100",
        "CONFIG SET save 0{sp}1",
        "CONFIG SET save 1{sp}-1",
        "CONFIG SET save 0100{sp}010{sp}60{sp}5",
        "CONFIG SET save {sp}100{sp}10",
        "CONFIG SET save {empty}",
        "CONFIG SET nosuchparameter 1",
        "CONFIG SET databases 3",
        "CONFIG SET hz",
        "CONFIG SET",
        "CONFIG GET",
        "CONFIG REWRITE",
        "CONFIG HELP",
        "CONFIG RESETSTAT",
        "CONFIG FOO",
    ];
    for line in script {
        c.check(line);
    }
    for name in TUNED {
        c.check_with(&format!("CONFIG GET {name}"), pairs);
    }
    c.check_with("CONFIG GET lfu-log-factor", pairs);
    c.check_with("CONFIG GET appendfsync", |_| Reply::Null);
    c.assert_same();
}

/// What CONFIG SET refuses, because accepting would lie, and what it reports instead.
#[test]
fn config_refuses_what_mnemo_cannot_honour() {
    let Some(pair) = Pair::start("server differential test") else {
        return;
    };
    let mut c = pair.connect();
    for (line, reason) in [
        ("CONFIG SET requirepass secret", "--requirepass"),
        ("CONFIG SET maxmemory 1gb", "--size-max"),
        ("CONFIG SET appendonly yes", "append-only"),
        ("CONFIG SET maxmemory-policy allkeys-lru", "never evicts"),
        ("CONFIG SET notify-keyspace-events KEA", "notifications"),
    ] {
        match c.mnemo.call(&common::words(line)) {
            Reply::Error(text) => {
                let text = String::from_utf8_lossy(&text);
                assert!(text.starts_with("ERR CONFIG SET failed"), "{line}: {text}");
                assert!(text.contains(reason), "{line}: {text}");
            }
            other => panic!("{line}: {other:?}"),
        }
    }
    // The appendfsync mnemo reports describes it; a client may still set it.
    assert_eq!(get(&mut c, "appendfsync"), "always");
    c.check("CONFIG SET appendfsync everysec");
    assert_eq!(get(&mut c, "appendfsync"), "everysec");
    c.assert_same();
}

fn get(c: &mut Clients, name: &str) -> String {
    match c.mnemo.call(&common::words(&format!("CONFIG GET {name}"))) {
        Reply::Array(items) => match items.get(1) {
            Some(Reply::Bulk(value)) => String::from_utf8_lossy(value).into_owned(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn text(reply: &Reply) -> String {
    match reply {
        Reply::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Reply::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => format!("{other:?}"),
    }
}

/// The section titles of an INFO reply, in order.
fn titles(reply: &Reply) -> Vec<String> {
    text(reply)
        .split("\r\n")
        .filter(|line| line.starts_with("# "))
        .map(str::to_string)
        .collect()
}

/// The value of `field` in an INFO reply.
fn field(reply: &Reply, field: &str) -> Option<String> {
    text(reply)
        .split("\r\n")
        .find_map(|line| line.strip_prefix(&format!("{field}:")).map(str::to_string))
}

#[test]
fn info_sections_like_redis() {
    let Some(pair) = Pair::start("server differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&["SET a 1", "GET a b", "LPUSH a x", "NOSUCHCOMMAND"]);
    c.differences.clear();
    for (line, extra) in [
        ("INFO", &["# Pool"][..]),
        ("INFO default", &["# Pool"][..]),
        ("INFO server", &[][..]),
        ("INFO SERVER clients", &[][..]),
        ("INFO replication cpu modules cluster", &[][..]),
        ("INFO keyspace errorstats", &[][..]),
        ("INFO persistence stats memory", &[][..]),
        ("INFO nosuchsection", &[][..]),
    ] {
        let (redis, mnemo) = c.both(line);
        let mut expected = titles(&redis);
        expected.extend(extra.iter().map(|s| s.to_string()));
        assert_eq!(titles(&mnemo), expected, "{line}");
    }
    let (redis, mnemo) = c.both("INFO nosuchsection");
    assert_eq!(text(&mnemo), text(&redis));
    let (redis, mnemo) = c.both("INFO");
    for name in [
        "redis_mode",
        "arch_bits",
        "multiplexing_api",
        "role",
        "connected_slaves",
        "master_failover_state",
        "master_repl_offset",
        "second_repl_offset",
        "repl_backlog_active",
        "cluster_enabled",
        "loading",
        "async_loading",
        "aof_enabled",
        "rdb_bgsave_in_progress",
        "rdb_last_bgsave_status",
        "maxmemory_policy",
        "db0",
        "used_cpu_sys_children",
    ] {
        assert!(field(&redis, name).is_some(), "redis has no {name}");
        assert_eq!(field(&mnemo, name), field(&redis, name), "{name}");
    }
    for name in [
        "redis_version",
        "os",
        "process_id",
        "run_id",
        "uptime_in_seconds",
        "used_memory",
        "used_cpu_user",
        "used_cpu_sys_main_thread",
        "master_replid",
        "total_commands_processed",
        "total_error_replies",
    ] {
        assert!(field(&mnemo, name).is_some(), "mnemo has no {name}");
    }
    assert_eq!(field(&mnemo, "os"), field(&redis, "os"));
    // Engine errors are counted by their code (the session's own, such as unknown commands,
    // are not yet: Redis counts 2 ERR here, mnemo 1).
    assert_eq!(
        field(&mnemo, "errorstat_WRONGTYPE"),
        field(&redis, "errorstat_WRONGTYPE")
    );
    c.assert_same();
}

#[test]
fn time_and_lastsave() {
    let Some(pair) = Pair::start("server differential test") else {
        return;
    };
    let mut c = pair.connect();
    let (redis, mnemo) = c.both("TIME");
    let seconds = |reply: &Reply| match reply {
        Reply::Array(parts) => match parts.as_slice() {
            [Reply::Bulk(s), Reply::Bulk(us)] => {
                let us: i64 = String::from_utf8_lossy(us).parse().expect("microseconds");
                assert!((0..1_000_000).contains(&us));
                String::from_utf8_lossy(s).parse::<i64>().expect("seconds")
            }
            other => panic!("TIME: {other:?}"),
        },
        other => panic!("TIME: {other:?}"),
    };
    assert!((seconds(&redis) - seconds(&mnemo)).abs() <= 2);
    c.check("SET k v");
    match c.mnemo.call(&common::words("LASTSAVE")) {
        Reply::Integer(at) => assert!((at - seconds(&redis)).abs() <= 2, "{at}"),
        other => panic!("LASTSAVE: {other:?}"),
    }
    c.check_with("LASTSAVE x", |r| r);
    c.assert_same();
}

/// SAVE (a sync point: LASTSAVE moves), BGSAVE, FUNCTION FLUSH / LIST (no functions exist:
/// scripting is not supported) as Redis answers them.
#[test]
fn save_and_function_like_redis() {
    let Some(pair) = Pair::start("server differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "SAVE",
        "SAVE x",
        "BGSAVE",
        "BGSAVE foo",
        "BGSAVE SCHEDULE x",
        "FUNCTION FLUSH",
        "FUNCTION FLUSH ASYNC",
        "FUNCTION FLUSH sync",
        "FUNCTION FLUSH foo",
        "FUNCTION FLUSH ASYNC x",
        "FUNCTION LIST",
        "FUNCTION LIST WITHCODE",
        "FUNCTION LIST LIBRARYNAME x* WITHCODE",
        "FUNCTION LIST foo",
        "FUNCTION LIST LIBRARYNAME",
        "FUNCTION",
        "FUNCTION NOSUCH",
    ]);
    c.assert_same();
    // The families mnemo does not have say so.
    for (line, what) in [
        ("XADD s * a 1", "streams are"),
        ("FCALL f 0", "functions are"),
    ] {
        let Reply::Error(text) = c.mnemo.call(&common::words(line)) else {
            panic!("{line}")
        };
        let text = String::from_utf8_lossy(&text);
        assert!(text.starts_with("ERR "), "{text}");
        assert!(
            text.contains(&format!("{what} not supported by mnemo")),
            "{text}"
        );
    }
}
