//! List commands against a real redis-server 7.0 (`common/mod.rs`): LPUSHX, RPUSHX, LSET,
//! LTRIM, LREM, LINSERT, LPOS, LMOVE, RPOPLPUSH, LMPOP; hand-picked edge cases (in RESP2 and
//! RESP3), lists longer than a segment, and random sequences; every reply the same.

mod common;

use common::Pair;

const SCRIPT: &[&str] = &[
    "LPUSHX l a",
    "RPUSHX l a",
    "EXISTS l",
    "RPUSH l a b c a b c a",
    "LPUSHX l z y",
    "RPUSHX l w",
    "LRANGE l 0 -1",
    "SET s v",
    "LPUSHX s a",
    "RPUSHX s a",
    // LSET
    "LSET l 0 first",
    "LSET l -1 last",
    "LSET l 3 mid",
    "LRANGE l 0 -1",
    "LSET l 100 x",
    "LSET l -100 x",
    "LSET l x x",
    "LSET nokey 0 x",
    "LSET nokey x x",
    "LSET s 0 x",
    "LSET s x x",
    // LPOS
    "LPOS l a",
    "LPOS l a RANK 2",
    "LPOS l a RANK -1",
    "LPOS l a RANK -2",
    "LPOS l a COUNT 0",
    "LPOS l a COUNT 2",
    "LPOS l a COUNT 2 RANK -1",
    "LPOS l a MAXLEN 3",
    "LPOS l a MAXLEN 3 COUNT 0",
    "LPOS l a RANK 2 MAXLEN 5 COUNT 0",
    "LPOS l nothing",
    "LPOS l nothing COUNT 1",
    "LPOS nokey a",
    "LPOS nokey a COUNT 1",
    "LPOS s a",
    "LPOS l a RANK 0",
    "LPOS l a RANK x",
    "LPOS l a RANK -9223372036854775808",
    "LPOS l a COUNT -1",
    "LPOS l a COUNT x",
    "LPOS l a MAXLEN -1",
    "LPOS l a RANK",
    "LPOS l a FOO 1",
    // LINSERT
    "LINSERT l BEFORE mid new1",
    "LINSERT l AFTER mid new2",
    "LINSERT l AFTER last tail",
    "LINSERT l BEFORE first head",
    "LINSERT l BEFORE nothing x",
    "LINSERT l MIDDLE mid x",
    "LINSERT nokey BEFORE a x",
    "LINSERT s BEFORE a x",
    "LRANGE l 0 -1",
    // LREM
    "LREM l 1 b",
    "LREM l -1 c",
    "LREM l 0 a",
    "LREM l 0 nothing",
    "LREM l x a",
    "LREM nokey 0 a",
    "LREM s 0 a",
    "LRANGE l 0 -1",
    "RPUSH gone x x",
    "LREM gone 0 x",
    "EXISTS gone",
    // LTRIM
    "RPUSH t 0 1 2 3 4 5 6 7 8 9",
    "LTRIM t 1 -2",
    "LRANGE t 0 -1",
    "LTRIM t -3 100",
    "LRANGE t 0 -1",
    "LTRIM t 1 0",
    "EXISTS t",
    "LTRIM nokey 0 1",
    "LTRIM s 0 1",
    "LTRIM t x 1",
    "LTRIM nokey x 1",
    // LMOVE / RPOPLPUSH
    "RPUSH src a b c",
    "LMOVE src dst LEFT RIGHT",
    "LMOVE src dst RIGHT LEFT",
    "LRANGE src 0 -1",
    "LRANGE dst 0 -1",
    "LMOVE src src LEFT RIGHT",
    "LRANGE src 0 -1",
    "LMOVE src dst UP LEFT",
    "LMOVE src dst LEFT DOWN",
    "LMOVE nokey dst LEFT LEFT",
    "LMOVE src s LEFT LEFT",
    "LMOVE s dst LEFT LEFT",
    "RPOPLPUSH src dst",
    "EXISTS src",
    "RPOPLPUSH nokey dst",
    "RPOPLPUSH dst dst",
    "LRANGE dst 0 -1",
    "RPUSH one x",
    "RPOPLPUSH one one",
    "LRANGE one 0 -1",
    // LMPOP
    "RPUSH m1 a b c",
    "RPUSH m2 d e",
    "LMPOP 2 nokey m1 LEFT",
    "LMPOP 2 m1 m2 RIGHT COUNT 5",
    "LMPOP 2 m1 m2 LEFT COUNT 5",
    "LMPOP 2 m1 m2 LEFT",
    "LMPOP 1 nokey LEFT",
    "LMPOP 0 m1 LEFT",
    "LMPOP x m1 LEFT",
    "LMPOP 3 m1 m2 LEFT",
    "LMPOP 2 m1 m2",
    "LMPOP 1 m1 UP",
    "LMPOP 1 m1 LEFT COUNT 0",
    "LMPOP 1 m1 LEFT COUNT x",
    "LMPOP 1 m1 LEFT COUNT 1 COUNT 1",
    "LMPOP 1 m1 LEFT FOO",
    "LMPOP 2 s m1 LEFT",
    "LMPOP 2 nokey s LEFT",
];

fn run_script(c: &mut common::Clients) {
    for line in SCRIPT {
        c.check(line);
    }
}

#[test]
fn lists_like_redis() {
    let Some(pair) = Pair::start("list differential test") else {
        return;
    };
    let mut c = pair.connect();
    run_script(&mut c);
    c.assert_same();
}

#[test]
fn lists_like_redis_in_resp3() {
    let Some(pair) = Pair::start("list differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("HELLO 3");
    c.differences.clear();
    run_script(&mut c);
    c.assert_same();
}

/// Lists of several segments (64 elements each) and random commands over them.
#[test]
fn long_lists_and_random_commands_like_redis() {
    let Some(pair) = Pair::start("list differential test") else {
        return;
    };
    let mut c = pair.connect();
    for i in 0..300 {
        c.check(&format!("RPUSH k1 v{}", i % 7));
        c.check(&format!("LPUSH k2 v{}", i % 5));
    }
    let commands: &[(&str, usize)] = &[
        ("LPUSH", 2),
        ("RPUSH", 2),
        ("LPUSHX", 2),
        ("RPUSHX", 2),
        ("LPOP", 1),
        ("RPOP", 1),
        ("LSET", 2),
        ("LTRIM", 2),
        ("LREM", 2),
        ("LINSERT", 3),
        ("LPOS", 4),
        ("LMOVE", 3),
        ("RPOPLPUSH", 1),
        ("LRANGE", 2),
        ("LLEN", 0),
        ("LINDEX", 1),
    ];
    let keys = ["k1", "k2", "k3"];
    let tokens = [
        "k1", "k2", "k3", "0", "1", "-1", "2", "-3", "10", "100", "-100", "v0", "v1", "v3", "v6",
        "x", "LEFT", "RIGHT", "BEFORE", "AFTER", "RANK", "COUNT", "MAXLEN",
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for _ in 0..3000 {
        let (name, max) = commands[next(commands.len())];
        let mut words = vec![name.to_string(), keys[next(keys.len())].to_string()];
        for _ in 0..next(max + 1) {
            words.push(tokens[next(tokens.len())].to_string());
        }
        c.check(&words.join(" "));
    }
    for key in keys {
        c.check(&format!("LRANGE {key} 0 -1"));
    }
    c.assert_same();
}

/// After LREM, LINSERT (which lay a list's segments out again), LSET and LTRIM on a list of
/// several segments, the keyspace's structure is valid (segment chain, counts) and stays so
/// across a restart. The expected replies are redis-server 7.0's for the same commands.
#[test]
fn rewritten_lists_stay_valid() {
    use mnemo_heap::{Heap, HeapOptions};
    use mnemo_kv::engine::PersistentEngine;
    use mnemo_kv::server::Engine;
    use mnemo_resp::bytes::Bytes;
    use mnemo_resp::{Protocol, Reply};

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pool");
    let options = HeapOptions {
        lane_count: 2,
        lane_log_size: 1 << 20,
        ..HeapOptions::default()
    };
    let run = |engine: &mut PersistentEngine<'_>, line: &str| {
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
    };
    {
        let heap = Heap::create_file(&path, 32 << 20, 256 << 20, &options).expect("create");
        let mut engine = PersistentEngine::open(&heap).expect("open");
        for i in 0..200 {
            run(&mut engine, &format!("RPUSH l v{}", i % 3));
        }
        assert_eq!(run(&mut engine, "LREM l 50 v1"), Reply::Integer(50));
        assert_eq!(
            run(&mut engine, "LINSERT l BEFORE v2 new"),
            Reply::Integer(151)
        );
        assert_eq!(
            run(&mut engine, "LSET l 100 set"),
            Reply::Simple(Bytes::from("OK"))
        );
        assert_eq!(
            run(&mut engine, "LTRIM l 10 -10"),
            Reply::Simple(Bytes::from("OK"))
        );
        assert_eq!(run(&mut engine, "LREM l 0 v0"), Reply::Integer(59));
        assert_eq!(engine.check().expect("valid after the rewrites"), 1);
    }
    let heap = Heap::open_file(&path).expect("reopen");
    let mut engine = PersistentEngine::open(&heap).expect("open");
    assert_eq!(engine.check().expect("valid after a restart"), 1);
    assert_eq!(run(&mut engine, "LLEN l"), Reply::Integer(73));
    assert_eq!(run(&mut engine, "LPOS l set"), Reply::Integer(45));
}
