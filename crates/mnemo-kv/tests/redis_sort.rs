//! SORT and SORT_RO (keyspace group) against a real redis-server 7.0 (`common/mod.rs`):
//! lists, sets and sorted sets sorted as numbers and as strings, ASC / DESC, LIMIT, BY
//! patterns (string keys, hash fields, BY nosort), GET patterns (`#`, keys, hash fields,
//! missing keys), STORE (a list; an empty result deletes the target), the errors and their
//! order, then random commands. Every reply the same; a set's own order is Redis's hash
//! order, so a set is only compared where the result is sorted.

mod common;

use common::Pair;

const SCRIPT: &[&str] = &[
    "RPUSH nums 3 10 -1 2.5 7 0 10",
    "SORT nums",
    "SORT nums DESC",
    "SORT nums ASC LIMIT 1 3",
    "SORT nums LIMIT 2 -1",
    "SORT nums LIMIT -5 2",
    "SORT nums LIMIT 6 10",
    "SORT nums LIMIT 7 1",
    "SORT nums LIMIT 0 0",
    "SORT nums ALPHA",
    "SORT nums ALPHA DESC LIMIT 0 3",
    "SORT nums DESC ASC",
    "SORT_RO nums DESC",
    "RPUSH words banana apple cherry apple {empty}",
    "SORT words",
    "SORT words ALPHA",
    "SORT words ALPHA DESC",
    "SORT_RO words ALPHA LIMIT 1 2",
    // Weights from other keys.
    "MSET w_3 30 w_10 1 w_-1 5 w_2.5 2 w_7 -4 w_0 x",
    "SORT nums BY w_*",
    "DEL w_0",
    "SORT nums BY w_*",
    "SORT nums BY w_* DESC",
    "SORT nums BY w_* ALPHA",
    "SORT nums BY nosort",
    "SORT nums BY nosort DESC LIMIT 1 2",
    "SORT nums BY w_* GET #",
    "MSET o_3 three o_10 ten o_7 seven",
    "SORT nums GET o_* GET #",
    "SORT nums BY nosort GET o_*",
    "SORT nums GET nostar",
    "HSET h_3 f x3 g 1",
    "HSET h_10 f x10 g 2",
    "HSET h_7 g 3",
    "SORT nums BY h_*->g GET h_*->f",
    "SORT nums BY h_*->g DESC GET # GET h_*->f",
    "SORT nums GET h_*->",
    "SORT nums BY h_*-> ALPHA",
    "SORT nums GET o_*->f",
    "SORT nums GET h_*",
    // Sorted sets: their own order with BY nosort, else sorted.
    "ZADD z 3 c 1 a 2 b 5 e 4 d",
    "SORT z BY nosort",
    "SORT z BY nosort DESC",
    "SORT z BY nosort LIMIT 1 2",
    "SORT z BY nosort DESC LIMIT 1 2",
    "SORT z ALPHA",
    "SORT z ALPHA DESC LIMIT 0 2",
    "SORT z",
    "ZADD zn 1 30 2 20 3 10",
    "SORT zn",
    "SORT zn BY nosort",
    // Sets, compared sorted.
    "SADD s 5 3 9 1",
    "SORT s",
    "SORT s DESC LIMIT 1 2",
    "SADD sw pear fig kiwi",
    "SORT sw ALPHA",
    // STORE.
    "SORT nums STORE dst",
    "LRANGE dst 0 -1",
    "TYPE dst",
    "SORT nums DESC LIMIT 0 2 STORE dst",
    "LRANGE dst 0 -1",
    "SORT nums GET o_* STORE dst",
    "LRANGE dst 0 -1",
    "SET dst string",
    "SORT words ALPHA STORE dst",
    "LRANGE dst 0 -1",
    "SORT nokey STORE dst",
    "EXISTS dst",
    "SORT sw BY nosort STORE dst",
    "LRANGE dst 0 -1",
    "SORT nums STORE nums",
    "LRANGE nums 0 -1",
    // Errors, in Redis's order.
    "SORT words",
    "SORT words STORE dst",
    "SET str x",
    "SORT str",
    "SORT str FOO",
    "HSET hash a 1",
    "SORT hash",
    "SORT nokey",
    "SORT nokey FOO",
    "SORT nums LIMIT 1",
    "SORT nums LIMIT x 1",
    "SORT nums LIMIT 1 y",
    "SORT nums BY",
    "SORT nums GET",
    "SORT nums STORE",
    "SORT_RO nums STORE dst",
    "SORT nums FOO",
    "SORT",
    "SORT_RO",
];

#[test]
fn sort_like_redis() {
    let Some(pair) = Pair::start("SORT differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(SCRIPT);
    c.assert_same();
}

#[test]
fn sort_like_redis_in_resp3() {
    let Some(pair) = Pair::start("SORT differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("HELLO 3");
    c.differences.clear(); // HELLO's id and version differ; only the protocol matters here.
    c.script(SCRIPT);
    c.assert_same();
}

/// Random SORTs of random lists over weights and values that are sometimes numbers,
/// sometimes not, sometimes missing.
#[test]
fn random_sorts_like_redis() {
    let Some(pair) = Pair::start("SORT differential test") else {
        return;
    };
    let mut c = pair.connect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let values = [
        "1", "2", "3", "10", "-4", "0.5", "a", "b", "ab", "7", "7", "1e3",
    ];
    let options = [
        "DESC",
        "ALPHA",
        "LIMIT 0 3",
        "LIMIT 2 -1",
        "LIMIT 1 1",
        "BY w_*",
        "BY nosort",
        "BY h_*->f",
        "GET #",
        "GET v_*",
        "GET h_*->g",
        "STORE out",
    ];
    for round in 0..400 {
        if round % 20 == 0 {
            c.check("DEL l w_1 w_2 w_3 w_a w_b v_1 v_2 v_10 h_1 h_3 h_a");
            let n = next(9);
            let items: Vec<&str> = (0..n).map(|_| values[next(values.len())]).collect();
            if !items.is_empty() {
                c.check(&format!("RPUSH l {}", items.join(" ")));
            }
            c.script(&[
                "MSET w_1 9 w_2 x w_3 -1 w_a 4 w_b 4.5",
                "MSET v_1 one v_2 two v_10 ten",
                "HSET h_1 f 3 g first",
                "HSET h_3 f 2 g third",
                "HSET h_a f zz g letter",
            ]);
        }
        let mut line = "SORT l".to_string();
        for _ in 0..next(4) {
            line.push(' ');
            line.push_str(options[next(options.len())]);
        }
        c.check(&line);
        if line.contains("STORE") {
            c.check("LRANGE out 0 -1");
        }
    }
    c.assert_same();
}

/// A SORT ... STORE changes its target: a transaction watching the target fails, one
/// watching only the source does not (the source is read).
#[test]
fn sort_store_touches_watched_target_like_redis() {
    let Some(pair) = Pair::start("SORT differential test") else {
        return;
    };
    let (mut watcher, mut other) = (pair.connect(), pair.connect());
    other.check("RPUSH src 3 1 2");
    for watched in ["dst", "src"] {
        watcher.check(&format!("WATCH {watched}"));
        other.check("SORT src STORE dst");
        watcher.script(&["MULTI", "LRANGE dst 0 -1", "EXEC"]);
    }
    // The first EXEC was aborted, the second ran.
    let (redis, mnemo) = watcher.both("LRANGE dst 0 -1");
    assert_eq!(redis, mnemo);
    watcher.assert_same();
    other.assert_same();
}
