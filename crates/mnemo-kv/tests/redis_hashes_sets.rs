//! Hash and set commands against a real redis-server 7.0 (`common/mod.rs`): HSETNX,
//! HINCRBYFLOAT, HSTRLEN, HKEYS, HVALS, HRANDFIELD, HSCAN; SMISMEMBER, SRANDMEMBER, SMOVE,
//! SINTER, SUNION, SDIFF and their STORE forms, SINTERCARD, SSCAN. Replies whose order Redis
//! leaves open are compared sorted; random picks are compared by what they may contain.

mod common;

use std::collections::HashSet;

use common::{sorted, Pair};
use mnemo_resp::Reply;

const SCRIPT: &[&str] = &[
    "HSET h a 1 b 2 c 3",
    "HSETNX h a 5",
    "HSETNX h d 4",
    "HGET h d",
    "HSETNX nh f v",
    "HGETALL nh",
    "SADD s x",
    "HSETNX s f v",
    "HINCRBYFLOAT h a 1.5",
    "HINCRBYFLOAT h a 0.1",
    "HINCRBYFLOAT h a -2.6",
    "HINCRBYFLOAT h new 3",
    "HINCRBYFLOAT h a x",
    "HINCRBYFLOAT h a inf",
    "HINCRBYFLOAT h a nan",
    "HINCRBYFLOAT h a {empty}",
    "HSET h str abc",
    "HINCRBYFLOAT h str 1",
    "HINCRBYFLOAT nokey f 2.5",
    "HGET nokey f",
    "HINCRBYFLOAT s f 1",
    "HSTRLEN h str",
    "HSTRLEN h nofield",
    "HSTRLEN nokey f",
    "HSTRLEN s f",
    "HKEYS h",
    "HVALS h",
    "HKEYS nokey",
    "HVALS s",
    "HRANDFIELD nokey",
    "HRANDFIELD nokey 3",
    "HRANDFIELD nokey 3 WITHVALUES",
    "HRANDFIELD h 0",
    "HRANDFIELD h x",
    "HRANDFIELD h 1 FOO",
    "HRANDFIELD h 1 WITHVALUES x",
    "HRANDFIELD h -9223372036854775808",
    "HRANDFIELD h 4611686018427387904 WITHVALUES",
    "HRANDFIELD h 100",
    "HRANDFIELD h 100 WITHVALUES",
    "HRANDFIELD s",
    "HSCAN h 0",
    "HSCAN h x",
    "HSCAN h 0 COUNT 0",
    "HSCAN h 0 MATCH",
    "HSCAN h 0 TYPE string",
    "HSCAN h 0 MATCH [ab]",
    "HSCAN nokey 0",
    "HSCAN nokey x",
    "HSCAN s 0",
    // Sets
    "SADD s1 a b c d",
    "SADD s2 c d e",
    "SADD s3 d e f",
    "SMISMEMBER s1 a z d",
    "SMISMEMBER nokey a b",
    "SMISMEMBER h a",
    "SRANDMEMBER nokey",
    "SRANDMEMBER nokey 5",
    "SRANDMEMBER s1 0",
    "SRANDMEMBER s1 x",
    "SRANDMEMBER s1 1 2",
    "SRANDMEMBER s1 100",
    "SRANDMEMBER h",
    "SMOVE s1 s2 a",
    "SMEMBERS s1",
    "SMEMBERS s2",
    "SMOVE s1 s2 nomember",
    "SMOVE nokey s2 a",
    "SMOVE s1 s1 b",
    "SMOVE s1 s1 nomember",
    "SMOVE s1 h b",
    "SMOVE h s1 b",
    "SMOVE s1 fresh b",
    "SMEMBERS fresh",
    "SADD one x",
    "SMOVE one fresh x",
    "EXISTS one",
    "SINTER s1 s2",
    "SINTER s1 s2 s3",
    "SINTER s1 nokey",
    "SINTER nokey s1",
    "SINTER nokey h",
    "SINTER s1 h",
    "SUNION s1 s2 s3",
    "SUNION nokey",
    "SUNION s1 h",
    "SDIFF s2 s1 s3",
    "SDIFF s2 nokey",
    "SDIFF nokey s2",
    "SDIFF s2 s2",
    "SDIFF s2 h",
    "SINTERSTORE d1 s1 s2",
    "SMEMBERS d1",
    "SUNIONSTORE d2 s1 s3",
    "SMEMBERS d2",
    "SDIFFSTORE d3 s3 s1",
    "SMEMBERS d3",
    "SET d4 string",
    "EXPIRE d4 1000",
    "SINTERSTORE d4 s1 nokey",
    "EXISTS d4",
    "SET d5 string",
    "SUNIONSTORE d5 s1",
    "TYPE d5",
    "TTL d5",
    "SINTERSTORE d6 s1 h",
    "SUNIONSTORE s1 s1 s3",
    "SMEMBERS s1",
    "SINTERCARD 2 s1 s2",
    "SINTERCARD 2 s1 s2 LIMIT 1",
    "SINTERCARD 2 s1 s2 LIMIT 0",
    "SINTERCARD 1 s1",
    "SINTERCARD 0 s1",
    "SINTERCARD x s1",
    "SINTERCARD -1 s1",
    "SINTERCARD 3 s1 s2",
    "SINTERCARD 1 s1 LIMIT -1",
    "SINTERCARD 1 s1 LIMIT x",
    "SINTERCARD 1 s1 LIMIT",
    "SINTERCARD 1 s1 FOO 1",
    "SINTERCARD 2 s1 nokey",
    "SINTERCARD 2 s1 h",
    "SSCAN s1 0",
    "SSCAN s1 0 MATCH [ae]",
    "SSCAN nokey 0",
    "SSCAN h 0",
    "SSCAN s1 x",
];

/// Sorts the elements, at every level (a scan's page, SINTER's set, HKEYS).
fn unordered(reply: Reply) -> Reply {
    match reply {
        Reply::Array(items) => sorted(Reply::Array(items.into_iter().map(unordered).collect())),
        Reply::Set(items) => sorted(Reply::Set(items)),
        other => other,
    }
}

/// Commands whose replies hold random picks: compared by their shape only.
fn random(line: &str) -> bool {
    (line.starts_with("HRANDFIELD") || line.starts_with("SRANDMEMBER"))
        && !line.contains("nokey")
        && !line.ends_with(" 0")
        && !line.ends_with(" 100")
        && !line.ends_with(" 100 WITHVALUES")
}

fn shape(reply: Reply) -> Reply {
    match reply {
        Reply::Bulk(_) => Reply::Bulk("member".into()),
        Reply::Array(items) => Reply::Integer(items.len() as i64),
        other => other,
    }
}

fn run_script(c: &mut common::Clients) {
    for line in SCRIPT {
        if random(line) {
            c.check_with(line, shape);
        } else if line.starts_with("TTL") {
            c.check_with(line, |r| match r {
                Reply::Integer(n) => Reply::Integer(n.signum()),
                other => other,
            });
        } else {
            c.check_with(line, unordered);
        }
    }
}

#[test]
fn hashes_and_sets_like_redis() {
    let Some(pair) = Pair::start("hash and set differential test") else {
        return;
    };
    let mut c = pair.connect();
    run_script(&mut c);
    c.assert_same();
}

#[test]
fn hashes_and_sets_like_redis_in_resp3() {
    let Some(pair) = Pair::start("hash and set differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("HELLO 3");
    c.differences.clear();
    run_script(&mut c);
    c.assert_same();
}

/// Large containers (past Redis's compact encodings): full HSCAN / SSCAN give the same
/// members; random picks come from the container, distinct for a positive count.
#[test]
fn large_containers_scan_and_sample_like_redis() {
    let Some(pair) = Pair::start("hash and set differential test") else {
        return;
    };
    let mut c = pair.connect();
    for i in 0..600 {
        c.check(&format!("SADD big m{i}"));
        c.check(&format!("HSET bighash f{i} v{i}"));
    }
    for (key, options) in [
        ("big", ""),
        ("big", " COUNT 50"),
        ("big", " MATCH m1*"),
        ("bighash", ""),
        ("bighash", " MATCH f2?"),
    ] {
        let kind = if key == "big" { "SSCAN" } else { "HSCAN" };
        let redis = full_scan(&mut c.redis, kind, key, options);
        let mnemo = full_scan(&mut c.mnemo, kind, key, options);
        assert_eq!(mnemo, redis, "{kind} {key}{options}");
    }
    let Reply::Array(items) = c.mnemo.call(&common::words("SRANDMEMBER big 20")) else {
        panic!()
    };
    let distinct: HashSet<String> = items.iter().map(|r| format!("{r:?}")).collect();
    assert_eq!(distinct.len(), 20);
    let Reply::Array(items) = c
        .mnemo
        .call(&common::words("HRANDFIELD bighash -30 WITHVALUES"))
    else {
        panic!()
    };
    assert_eq!(items.len(), 60);
    for pair in items.chunks(2) {
        let (Reply::Bulk(field), Reply::Bulk(value)) = (&pair[0], &pair[1]) else {
            panic!("{pair:?}")
        };
        assert_eq!(&field[1..], &value[1..], "field and value of one entry");
    }
    c.assert_same();
}

fn full_scan(conn: &mut common::Conn, kind: &str, key: &str, options: &str) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut found = Vec::new();
    loop {
        let reply = conn.call(&common::words(&format!("{kind} {key} {cursor}{options}")));
        let Reply::Array(parts) = reply else {
            panic!("{reply:?}")
        };
        let [Reply::Bulk(next), Reply::Array(items)] = parts.as_slice() else {
            panic!("{parts:?}")
        };
        let step = if kind == "HSCAN" { 2 } else { 1 };
        for item in items.chunks(step) {
            found.push(format!("{item:?}"));
        }
        cursor = String::from_utf8_lossy(next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    found.sort();
    found.dedup();
    found
}
