//! The blocking pops against a real redis-server 7.0 (`common/mod.rs`): BLPOP, BRPOP,
//! BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP served at once, timing out, woken
//! by another connection's write (first blocked, first served), inside MULTI (never block),
//! and a client that leaves while blocked.

mod common;

use std::time::{Duration, Instant};

use common::{words, Clients, Pair};
use mnemo_resp::Reply;

const SCRIPT: &[&str] = &[
    "RPUSH q a b c",
    "BLPOP q 0",
    "BRPOP q 0",
    "BLPOP nokey q 0",
    "LLEN q",
    "EXISTS q",
    "BLPOP q 0.05",
    "BRPOP q nokey 0.01",
    "BLPOP q x",
    "BLPOP q -1",
    "BLPOP q {empty}",
    "BLPOP q {sp}1",
    "SET s v",
    "BLPOP s 0",
    "BLPOP nokey s 0",
    "BLPOP q",
    "RPUSH src 1 2",
    "BLMOVE src dst LEFT RIGHT 0",
    "BRPOPLPUSH src dst 0",
    "LRANGE dst 0 -1",
    "BLMOVE src dst LEFT RIGHT 0.02",
    "BRPOPLPUSH src dst 0.02",
    "BLMOVE src dst UP RIGHT 0",
    "BLMOVE src dst LEFT RIGHT x",
    "BLMOVE s dst LEFT RIGHT 0",
    "RPUSH m a b c",
    "BLMPOP 0 2 nokey m LEFT COUNT 2",
    "BLMPOP 0.02 1 nokey RIGHT",
    "BLMPOP x 1 m LEFT",
    "BLMPOP 0 0 m LEFT",
    "BLMPOP 0 1 m UP",
    "BLMPOP 0 1 s LEFT",
    "ZADD z 1 a 2 b 3 c",
    "BZPOPMIN z 0",
    "BZPOPMAX z 0",
    "BZPOPMIN nokey z 0",
    "BZPOPMIN z 0.02",
    "BZPOPMAX s 0",
    "ZADD z2 1 a 2 b",
    "BZMPOP 0 1 z2 MAX COUNT 5",
    "BZMPOP 0.02 1 z2 MIN",
    "BZMPOP 0 1 s MIN",
    "MULTI",
    "BLPOP q 0",
    "BLMOVE q dst LEFT LEFT 0",
    "BZPOPMIN nothing 0",
    "EXEC",
];

#[test]
fn blocking_pops_like_redis() {
    let Some(pair) = Pair::start("blocking differential test") else {
        return;
    };
    let mut c = pair.connect();
    for line in SCRIPT {
        c.check(line);
    }
    c.check("HELLO 3");
    c.differences.retain(|d| !d.starts_with("HELLO"));
    for line in SCRIPT {
        c.check(line);
    }
    c.assert_same();
}

/// A timeout is kept: an empty BLPOP with 0.2 s answers null after about 0.2 s.
#[test]
fn a_blocked_pop_times_out() {
    let Some(pair) = Pair::start("blocking differential test") else {
        return;
    };
    let mut c = pair.connect();
    for conn in [&mut c.redis, &mut c.mnemo] {
        let started = Instant::now();
        assert_eq!(conn.call(&words("BLPOP empty 0.2")), Reply::NullArray);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(190), "{waited:?}");
        assert!(waited < Duration::from_secs(3), "{waited:?}");
    }
}

/// Sends `line` to both servers of `c` without waiting.
fn send(c: &mut Clients, line: &str) {
    c.redis.send(&words(line));
    c.mnemo.send(&words(line));
}

/// Both servers' next replies must be equal.
fn same_reply(c: &mut Clients, what: &str) {
    let (redis, mnemo) = (c.redis.reply(), c.mnemo.reply());
    assert_eq!(mnemo, redis, "{what}");
}

/// Whether each server has a reply pending on `c` within a short wait: must agree.
fn both_waiting(c: &mut Clients) -> bool {
    let wait = Duration::from_millis(100);
    let (redis, mnemo) = (
        c.redis.has_reply_within(wait),
        c.mnemo.has_reply_within(wait),
    );
    assert_eq!(mnemo, redis, "one server answered, the other did not");
    !redis
}

#[test]
fn writes_wake_blocked_clients_first_come_first_served() {
    let Some(pair) = Pair::start("blocking differential test") else {
        return;
    };
    let (mut a, mut b, mut writer) = (pair.connect(), pair.connect(), pair.connect());
    send(&mut a, "BLPOP jobs 0");
    assert!(both_waiting(&mut a));
    send(&mut b, "BLPOP other jobs 5");
    assert!(both_waiting(&mut b));
    writer.check("RPUSH jobs first");
    same_reply(&mut a, "the first blocked client gets the first element");
    assert!(both_waiting(&mut b));
    writer.check("RPUSH jobs second third");
    same_reply(&mut b, "the second gets the next");
    writer.check("LRANGE jobs 0 -1");
    // A blocked connection takes no other command until it is served.
    send(&mut a, "BRPOPLPUSH empty target 0");
    send(&mut a, "PING");
    assert!(both_waiting(&mut a));
    writer.check("LPUSH empty x");
    same_reply(&mut a, "BRPOPLPUSH served");
    same_reply(&mut a, "then the PING");
    writer.check("LRANGE target 0 -1");
    // Sorted sets and BLMPOP.
    send(&mut a, "BZPOPMAX zs 0");
    send(&mut b, "BLMPOP 0 2 l1 l2 RIGHT COUNT 2");
    assert!(both_waiting(&mut a));
    assert!(both_waiting(&mut b));
    writer.check("ZADD zs 1 low 2 high");
    same_reply(&mut a, "BZPOPMAX served");
    writer.check("RPUSH l2 x y z");
    same_reply(&mut b, "BLMPOP served");
    writer.check("ZRANGE zs 0 -1");
    writer.check("LRANGE l2 0 -1");
    // A client that leaves while blocked takes nothing.
    {
        let mut gone = pair.connect();
        send(&mut gone, "BLPOP leave 0");
        assert!(both_waiting(&mut gone));
    }
    std::thread::sleep(Duration::from_millis(100));
    writer.check("RPUSH leave kept");
    writer.check("LRANGE leave 0 -1");
    for c in [&a, &b, &writer] {
        c.assert_same();
    }
}
