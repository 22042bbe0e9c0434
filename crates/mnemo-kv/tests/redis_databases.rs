//! Numbered databases against a real redis-server 7.0 (`common/mod.rs`): SELECT per
//! connection, MOVE, SWAPDB, FLUSHDB / FLUSHALL (SYNC and ASYNC), DBSIZE and INFO keyspace per
//! database, `--databases N`; then what only mnemo has: the databases survive a restart, a
//! keyspace of an older layout version is refused clearly, and a pool holding keys past
//! `--databases` is refused.

mod common;

use common::Pair;
use mnemo_heap::{Heap, HeapOptions, PPtr};
use mnemo_kv::engine::{EngineError, PersistentEngine, ROOT_NAME};
use mnemo_kv::server::Engine;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Protocol, Reply};

const SCRIPT: &[&str] = &[
    "SELECT 0",
    "SET a zero",
    "SELECT 1",
    "GET a",
    "SET a one",
    "RPUSH l x y",
    "DBSIZE",
    "SELECT 15",
    "SELECT 16",
    "SELECT -1",
    "SELECT x",
    "SELECT 99999999999",
    "SELECT {empty}",
    "SELECT 1.5",
    "SELECT 0",
    "GET a",
    "DBSIZE",
    // MOVE: to an empty place, onto an existing key, errors in Redis's order.
    "MOVE a 2",
    "SET b bee",
    "EXPIRE b 1000",
    "MOVE b 2",
    "EXISTS b",
    "SELECT 2",
    "GET a",
    "GET b",
    "TTL b",
    "MOVE a 0",
    "MOVE nokey 0",
    "MOVE a 2",
    "MOVE a 16",
    "MOVE a -1",
    "MOVE a x",
    "MOVE a 99999999999",
    "SELECT 1",
    "MOVE l 3",
    "SELECT 3",
    "LRANGE l 0 -1",
    "TYPE l",
    // SWAPDB: the contents trade places for every connection.
    "SWAPDB 1 3",
    "LRANGE l 0 -1",
    "SELECT 1",
    "LRANGE l 0 -1",
    "GET a",
    "SWAPDB 0 0",
    "SWAPDB 0 16",
    "SWAPDB 16 0",
    "SWAPDB x 0",
    "SWAPDB 0 x",
    "SWAPDB -1 0",
    "SWAPDB 99999999999 0",
    "SWAPDB 0 99999999999",
    // FLUSHDB empties the selected database only; FLUSHALL all of them.
    "SELECT 2",
    "DBSIZE",
    "FLUSHDB",
    "DBSIZE",
    "SELECT 1",
    "DBSIZE",
    "FLUSHDB ASYNC",
    "FLUSHDB SYNC",
    "FLUSHDB FOO",
    "FLUSHDB ASYNC SYNC",
    "SELECT 0",
    "MSET k1 1 k2 2",
    "SELECT 5",
    "SADD s m",
    "FLUSHALL ASYNC",
    "DBSIZE",
    "SELECT 0",
    "DBSIZE",
    "FLUSHALL SYNC",
    "FLUSHALL",
    "CLIENT SETNAME x",
];

#[test]
fn databases_like_redis() {
    let Some(pair) = Pair::start("database differential test") else {
        return;
    };
    let mut a = pair.connect();
    a.script(SCRIPT);
    // Another connection starts in database 0 whatever the first selected, and sees what
    // the first wrote in database 4.
    let mut b = pair.connect();
    a.script(&["SELECT 4", "SET shared v", "SET only4 w"]);
    b.script(&[
        "GET shared",
        "SELECT 4",
        "GET shared",
        "SWAPDB 4 6",
        "GET shared",
    ]);
    a.script(&["GET shared", "SELECT 6", "GET shared", "FLUSHALL"]);
    a.assert_same();
    b.assert_same();
}

#[test]
fn info_keyspace_and_client_list_the_database() {
    let Some(pair) = Pair::start("database differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "SELECT 3",
        "SET a 1",
        "SET b 2",
        "EXPIRE b 100",
        "SELECT 9",
        "SET c 3",
    ]);
    let (redis, mnemo) = c.both("INFO keyspace");
    assert_eq!(keyspace_lines(&mnemo), keyspace_lines(&redis));
    assert_eq!(
        keyspace_lines(&mnemo),
        ["db3:keys=2,expires=1", "db9:keys=1,expires=0"]
    );
    let (redis, mnemo) = c.both("CLIENT INFO");
    assert!(text(&redis).contains(" db=9 "), "{redis:?}");
    assert!(text(&mnemo).contains(" db=9 "), "{mnemo:?}");
    c.check("CONFIG GET databases");
    c.assert_same();
}

#[test]
fn a_smaller_databases_setting_is_redis_s() {
    let Some(pair) = Pair::start_with("database differential test", 4) else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "SELECT 3",
        "SELECT 4",
        "MOVE a 4",
        "SWAPDB 0 4",
        "CONFIG GET databases",
    ]);
    c.assert_same();
}

fn text(reply: &Reply) -> String {
    match reply {
        Reply::Bulk(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Reply::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => format!("{other:?}"),
    }
}

/// The `dbN:keys=..,expires=..` part of each INFO keyspace line (avg_ttl differs by timing).
fn keyspace_lines(reply: &Reply) -> Vec<String> {
    text(reply)
        .lines()
        .filter(|line| line.starts_with("db"))
        .map(|line| line.split(",avg_ttl").next().unwrap_or(line).to_string())
        .collect()
}

/// Every database's keys and expiries survive a restart of the server on the same pool.
#[test]
fn databases_survive_a_restart() {
    let Some(mut pair) = Pair::start("database restart test") else {
        return;
    };
    {
        let mut c = pair.connect();
        for db in 0..16 {
            c.script(&[&format!("SELECT {db}"), &format!("SET k{db} v{db}")]);
        }
        c.script(&[
            "SELECT 7",
            "RPUSH list a b c",
            "EXPIRE list 1000",
            "SWAPDB 7 8",
        ]);
        c.assert_same();
    }
    pair.restart_mnemo(16);
    let mut c = pair.connect();
    for db in 0..16 {
        c.script(&[&format!("SELECT {db}"), &format!("GET k{db}"), "DBSIZE"]);
    }
    c.script(&[
        "SELECT 8",
        "LRANGE list 0 -1",
        "GET k7",
        "SELECT 7",
        "EXISTS list",
    ]);
    c.check_with("TTL list", |r| match r {
        Reply::Integer(n) => Reply::Integer(n.signum()),
        other => other,
    });
    c.check("SELECT 8");
    c.check_with("TTL list", |r| match r {
        Reply::Integer(n) => Reply::Integer(n.signum()),
        other => other,
    });
    c.assert_same();
}

fn heap_in(dir: &std::path::Path) -> Heap {
    let options = HeapOptions {
        lane_count: 2,
        lane_log_size: 1 << 20,
        ..HeapOptions::default()
    };
    Heap::create_file(&dir.join("pool"), 32 << 20, 256 << 20, &options).expect("create")
}

fn run(engine: &mut PersistentEngine<'_>, line: &str) -> Reply {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|w| Bytes::from(w.to_string()))
        .collect();
    let (reply, effect) = engine.execute_args(&args, Protocol::Resp2);
    if effect.wrote {
        engine.commit().expect("commit");
    } else {
        engine.finish_read_only();
    }
    reply
}

/// A keyspace of an older layout (version 1: one database, chained tables; version 2:
/// numbered databases, chained tables) is refused with an error that names its version and
/// what to do, and the pool is left as it was: this build's tables are open-addressed
/// (layout versions 3 and 4), and reading chained bucket arrays as slot arrays would misread
/// every key. The old roots are made here by writing the old version over a fresh root (the
/// code that wrote them is gone; only the version word tells them apart at open). A version-3
/// root (open-addressed, no stale slots) opens and is marked 4; a newer version than this
/// build's is refused as corrupt.
#[test]
fn an_older_layout_version_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let heap = heap_in(dir.path());
    {
        let mut engine = PersistentEngine::open(&heap).expect("open");
        run(&mut engine, "SET old value");
    }
    let root = heap.root::<[u64; 8]>(ROOT_NAME).expect("root");
    let words = heap.get(root).expect("root words");
    assert_eq!(words[1], 4, "a new keyspace has layout version 4");
    for old in [1u64, 2] {
        let mut changed = words;
        changed[1] = old;
        heap.tx(|tx| tx.write(PPtr::<[u64; 8]>::from_offset(root.offset()), &changed))
            .expect("write an old root");
        match PersistentEngine::open(&heap) {
            Err(EngineError::Layout(why)) => {
                assert!(why.contains(&format!("layout version {old}")), "{why}");
                assert!(why.contains("reads versions 3 and 4 only"), "{why}");
            }
            other => panic!("version {old}: expected a refusal, got {other:?}"),
        }
        assert_eq!(
            heap.get(root).expect("root"),
            changed,
            "the refusal writes nothing"
        );
    }
    let mut newer = words;
    newer[1] = 5;
    heap.tx(|tx| tx.write(PPtr::<[u64; 8]>::from_offset(root.offset()), &newer))
        .expect("write a newer root");
    match PersistentEngine::open(&heap) {
        Err(EngineError::Corrupt(why)) => assert!(why.contains("layout version 5"), "{why}"),
        other => panic!("version 5: expected a refusal, got {other:?}"),
    }
    let mut v3 = words;
    v3[1] = 3;
    heap.tx(|tx| tx.write(PPtr::<[u64; 8]>::from_offset(root.offset()), &v3))
        .expect("write a version-3 root");
    let mut engine = PersistentEngine::open(&heap).expect("open version 3");
    assert_eq!(
        run(&mut engine, "GET old"),
        Reply::Bulk(Bytes::from("value"))
    );
    drop(engine);
    assert_eq!(
        heap.get(root).expect("root")[1],
        4,
        "a version-3 keyspace is marked 4 when opened"
    );
}

/// Fewer databases than the pool uses: refused while a database past the new count holds
/// keys, accepted once it is empty; more databases than before: the array grows.
#[test]
fn the_database_count_can_change_between_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let heap = heap_in(dir.path());
    {
        let mut engine = PersistentEngine::open_with_databases(&heap, 8).expect("open");
        run(&mut engine, "SELECT 6");
        run(&mut engine, "SET k v");
    }
    match PersistentEngine::open_with_databases(&heap, 4) {
        Err(EngineError::Databases(why)) => assert!(why.contains("database 6"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    {
        let mut engine = PersistentEngine::open_with_databases(&heap, 32).expect("grow");
        assert_eq!(
            run(&mut engine, "SELECT 6"),
            Reply::Simple(Bytes::from("OK"))
        );
        assert_eq!(run(&mut engine, "GET k"), Reply::Bulk(Bytes::from("v")));
        assert_eq!(
            run(&mut engine, "SELECT 31"),
            Reply::Simple(Bytes::from("OK"))
        );
        run(&mut engine, "SET far away");
        assert_eq!(engine.check().expect("valid"), 2);
        run(&mut engine, "FLUSHALL");
    }
    let mut engine = PersistentEngine::open_with_databases(&heap, 4).expect("empty past 4");
    assert_eq!(
        run(&mut engine, "SELECT 4"),
        Reply::Error(Bytes::from("ERR DB index is out of range"))
    );
    assert!(PersistentEngine::open_with_databases(&heap, 0).is_err());
}
