//! Pub/sub against a real redis-server 7.0 (`common/mod.rs`): SUBSCRIBE, PSUBSCRIBE,
//! UNSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB CHANNELS / NUMSUB / NUMPAT, the subscribed
//! context of RESP2 (only the subscription commands and PING), messages as RESP2 arrays and
//! RESP3 pushes, and a subscriber that leaves; sharded pub/sub (SSUBSCRIBE, SUNSUBSCRIBE,
//! SPUBLISH, PUBSUB SHARDCHANNELS / SHARDNUMSUB), a namespace of its own as in a Redis
//! without cluster.

mod common;

use std::time::Duration;

use common::{sorted, words, Clients, Pair};

fn send(c: &mut Clients, line: &str) {
    c.redis.send(&words(line));
    c.mnemo.send(&words(line));
}

/// The next `n` replies (messages included) of both servers must be equal, as sets when
/// `unordered` (UNSUBSCRIBE without names goes through a hash table in Redis).
fn same(c: &mut Clients, n: usize, unordered: bool, what: &str) {
    let mut redis: Vec<String> = (0..n).map(|_| format!("{:?}", c.redis.reply())).collect();
    let mut mnemo: Vec<String> = (0..n).map(|_| format!("{:?}", c.mnemo.reply())).collect();
    if unordered {
        redis.sort();
        mnemo.sort();
    }
    assert_eq!(mnemo, redis, "{what}");
}

fn nothing_pending(c: &mut Clients) {
    let wait = Duration::from_millis(100);
    assert!(!c.redis.has_reply_within(wait), "redis sent more");
    assert!(!c.mnemo.has_reply_within(wait), "mnemo sent more");
}

fn pubsub_session(resp3: bool) {
    let Some(pair) = Pair::start("pub/sub differential test") else {
        return;
    };
    let (mut sub, mut publisher) = (pair.connect(), pair.connect());
    if resp3 {
        sub.check("HELLO 3");
        sub.differences.clear();
    }
    send(&mut sub, "SUBSCRIBE news sport");
    same(&mut sub, 2, false, "SUBSCRIBE answers once per channel");
    send(&mut sub, "PSUBSCRIBE n*");
    same(&mut sub, 1, false, "PSUBSCRIBE");
    publisher.check("PUBLISH news hello");
    same(&mut sub, 2, false, "a message and a pattern message");
    publisher.check("PUBLISH nothing x");
    same(&mut sub, 1, false, "the pattern only");
    publisher.check("PUBLISH other x");
    nothing_pending(&mut sub);
    publisher.check_with("PUBSUB CHANNELS", sorted);
    publisher.check_with("PUBSUB CHANNELS n*", sorted);
    publisher.check("PUBSUB NUMSUB news sport none");
    publisher.check("PUBSUB NUMPAT");
    publisher.check("PUBSUB FOO");
    publisher.check("PUBLISH x");
    sub.check("PING");
    sub.check("PING hi");
    sub.check("GET k");
    sub.check("CONFIG GET hz");
    send(&mut sub, "UNSUBSCRIBE news");
    same(&mut sub, 1, false, "UNSUBSCRIBE one");
    send(&mut sub, "UNSUBSCRIBE");
    same(&mut sub, 1, true, "UNSUBSCRIBE the rest");
    send(&mut sub, "PUNSUBSCRIBE");
    same(&mut sub, 1, false, "PUNSUBSCRIBE all");
    send(&mut sub, "UNSUBSCRIBE");
    same(&mut sub, 1, false, "UNSUBSCRIBE with none left");
    sub.check("GET k");
    publisher.check("PUBLISH news gone");
    nothing_pending(&mut sub);
    // A subscriber that leaves stops counting.
    {
        let mut leaving = pair.connect();
        send(&mut leaving, "SUBSCRIBE temp");
        same(&mut leaving, 1, false, "SUBSCRIBE temp");
    }
    std::thread::sleep(Duration::from_millis(100));
    publisher.check("PUBLISH temp x");
    publisher.check("PUBSUB NUMSUB temp");
    sub.assert_same();
    publisher.assert_same();
}

#[test]
fn pubsub_like_redis() {
    pubsub_session(false);
}

#[test]
fn pubsub_like_redis_in_resp3() {
    pubsub_session(true);
}

fn sharded_session(resp3: bool) {
    let Some(pair) = Pair::start("sharded pub/sub differential test") else {
        return;
    };
    let (mut sub, mut publisher) = (pair.connect(), pair.connect());
    if resp3 {
        sub.check("HELLO 3");
        sub.differences.clear();
    }
    send(&mut sub, "SSUBSCRIBE orders stock");
    same(
        &mut sub,
        2,
        false,
        "SSUBSCRIBE answers once per shard channel",
    );
    send(&mut sub, "SUBSCRIBE orders");
    same(
        &mut sub,
        1,
        false,
        "SUBSCRIBE counts ordinary channels only",
    );
    send(&mut sub, "PSUBSCRIBE o*");
    same(&mut sub, 1, false, "PSUBSCRIBE");
    publisher.check("SPUBLISH orders one");
    same(
        &mut sub,
        1,
        false,
        "an smessage, not seen by patterns or channels",
    );
    nothing_pending(&mut sub);
    publisher.check("PUBLISH orders two");
    same(&mut sub, 2, false, "PUBLISH does not reach shard channels");
    nothing_pending(&mut sub);
    publisher.check("SPUBLISH nobody x");
    publisher.check_with("PUBSUB SHARDCHANNELS", sorted);
    publisher.check_with("PUBSUB SHARDCHANNELS s*", sorted);
    publisher.check_with("PUBSUB CHANNELS", sorted);
    publisher.check("PUBSUB SHARDNUMSUB orders stock none");
    publisher.check("PUBSUB SHARDNUMSUB");
    publisher.check("PUBSUB NUMSUB orders stock");
    publisher.check("SPUBLISH x");
    publisher.check("SSUBSCRIBE");
    sub.check("GET k");
    send(&mut sub, "SUNSUBSCRIBE orders");
    same(&mut sub, 1, false, "SUNSUBSCRIBE one");
    send(&mut sub, "UNSUBSCRIBE");
    same(&mut sub, 1, false, "UNSUBSCRIBE leaves shard channels");
    send(&mut sub, "PUNSUBSCRIBE");
    same(&mut sub, 1, false, "PUNSUBSCRIBE");
    sub.check("GET k");
    send(&mut sub, "SUNSUBSCRIBE");
    same(&mut sub, 1, true, "SUNSUBSCRIBE the rest");
    send(&mut sub, "SUNSUBSCRIBE");
    same(&mut sub, 1, false, "SUNSUBSCRIBE with none left");
    sub.check("GET k");
    publisher.check("SPUBLISH stock gone");
    nothing_pending(&mut sub);
    {
        let mut leaving = pair.connect();
        send(&mut leaving, "SSUBSCRIBE temp");
        same(&mut leaving, 1, false, "SSUBSCRIBE temp");
    }
    // The connection is gone once the server has seen it close.
    std::thread::sleep(Duration::from_millis(100));
    publisher.check("PUBSUB SHARDNUMSUB temp");
    sub.assert_same();
    publisher.assert_same();
}

#[test]
fn sharded_pubsub_like_redis() {
    sharded_session(false);
}

#[test]
fn sharded_pubsub_like_redis_in_resp3() {
    sharded_session(true);
}
