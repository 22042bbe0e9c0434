//! MULTI / EXEC / DISCARD / WATCH / UNWATCH against a real redis-server 7.0
//! (`common/mod.rs`), with two connections per server so that one can change what the other
//! watches. Every reply the same, errors included.

mod common;

use common::Pair;

#[test]
fn multi_exec_like_redis() {
    let Some(pair) = Pair::start("transaction differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "EXEC",
        "DISCARD",
        "MULTI",
        "MULTI",
        "SET a 1",
        "INCR a",
        "LPUSH a x",
        "GET a",
        "PING",
        "ECHO hi",
        "EXEC",
        "GET a",
        // An HGETALL's reply (encoded as it is read) inside EXEC's.
        "MULTI",
        "HSET th f v",
        "HGETALL th",
        "HGETALL nohash",
        "EXEC",
        // A queuing error (unknown command, arity) aborts the EXEC: nothing runs.
        "MULTI",
        "SET b 1",
        "NOSUCHCOMMAND x",
        "EXEC",
        "EXISTS b",
        "MULTI",
        "SET b 1",
        "GET",
        "EXEC",
        "EXISTS b",
        // DISCARD drops the queue.
        "MULTI",
        "SET c 1",
        "DISCARD",
        "EXISTS c",
        "EXEC",
        // An empty transaction.
        "MULTI",
        "EXEC",
        // Runtime errors stay in the reply; the other commands run.
        "MULTI",
        "SET d 1",
        "LPOP d",
        "INCR d",
        "EXEC",
        // SELECT inside a transaction changes the connection's database after it.
        "MULTI",
        "SELECT 2",
        "SET e2 in2",
        "SELECT 99",
        "EXEC",
        "GET e2",
        "SELECT 0",
        "GET e2",
        // WATCH inside MULTI is refused without aborting.
        "MULTI",
        "WATCH a",
        "SET f 1",
        "EXEC",
        "GET f",
        // Commands that write many keys, and MSET's arity inside MULTI.
        "MULTI",
        "MSET g1 1 g2 2",
        "MSET g3",
        "EXEC",
        "MULTI",
        "MSET g1 1 g2",
        "DEL g1 g2",
        "EXEC",
        "EXISTS g1 g2",
        "UNWATCH",
        "WATCH",
    ]);
    c.assert_same();
}

#[test]
fn watch_like_redis() {
    let Some(pair) = Pair::start("transaction differential test") else {
        return;
    };
    let mut a = pair.connect();
    let mut b = pair.connect();
    // Untouched: EXEC runs.
    a.script(&["SET k 1", "WATCH k", "MULTI", "INCR k", "EXEC", "GET k"]);
    // Touched by another connection between WATCH and EXEC: a null reply, nothing runs.
    a.script(&["WATCH k", "MULTI", "INCR k"]);
    b.script(&["SET k 10"]);
    a.script(&["EXEC", "GET k"]);
    // The watch ends with EXEC: the next transaction runs.
    a.script(&["MULTI", "INCR k", "EXEC"]);
    // Touched before MULTI, by the same connection: aborts too.
    a.script(&["WATCH k", "SET k 5", "MULTI", "INCR k", "EXEC", "GET k"]);
    // UNWATCH forgets.
    a.script(&["WATCH k", "UNWATCH", "MULTI", "INCR k"]);
    b.script(&["INCR k"]);
    a.script(&["EXEC", "GET k"]);
    // DISCARD forgets.
    a.script(&["WATCH k", "MULTI", "DISCARD"]);
    b.script(&["INCR k"]);
    a.script(&["MULTI", "INCR k", "EXEC"]);
    // A write that changes nothing does not touch: SET NX on an existing key.
    a.script(&["WATCH k", "MULTI", "GET k"]);
    b.script(&["SET k 1 NX", "GET nothing"]);
    a.script(&["EXEC"]);
    // A key watched in another database is not touched by a write in this one.
    a.script(&["SELECT 3", "WATCH k", "SELECT 0", "MULTI", "GET k"]);
    b.script(&["SET k 99"]);
    a.script(&["EXEC"]);
    b.script(&["SELECT 3", "SET k 3", "SELECT 0"]);
    a.script(&["MULTI", "GET k", "EXEC"]);
    // Watching a missing key: its creation touches it.
    a.script(&["WATCH fresh", "MULTI", "SET fresh mine"]);
    b.script(&["SET fresh theirs"]);
    a.script(&["EXEC", "GET fresh"]);
    // Deletion, expiry changes, RENAME, MOVE and multi-key commands touch.
    for (setup, touch) in [
        ("SET w 1", "DEL w"),
        ("SET w 1", "EXPIRE w 1000"),
        ("SET w 1", "RENAME w w2"),
        ("SET w 1", "MOVE w 4"),
        ("SET w 1", "MSET x 1 w 2"),
        ("RPUSH w a", "LPUSH w b"),
        ("SADD w a", "SREM w a"),
        ("HSET w f v", "HINCRBY w f 1"),
        ("SET w 1", "SETRANGE w 0 x"),
        ("SET w 1", "FLUSHDB"),
        ("SET w 1", "FLUSHALL"),
        ("SET w 1", "SWAPDB 0 1"),
    ] {
        b.script(&["FLUSHALL", setup]);
        a.script(&["SELECT 0", "WATCH w", "MULTI", "SET w mine"]);
        b.script(&[touch]);
        a.script(&["EXEC", "GET w"]);
    }
    // FLUSHALL of a watched key that does not exist does not touch it (Redis 7.0).
    b.script(&["FLUSHALL"]);
    a.script(&["WATCH absent", "MULTI", "PING"]);
    b.script(&["FLUSHALL"]);
    a.script(&["EXEC"]);
    a.assert_same();
    b.assert_same();
}

/// A connection that closes while watching leaves nothing behind (the engine forgets it):
/// later transactions of other connections are not affected.
#[test]
fn a_closed_connection_forgets_its_watches() {
    let Some(pair) = Pair::start("transaction differential test") else {
        return;
    };
    let mut b = pair.connect();
    {
        let mut a = pair.connect();
        a.script(&["SET k 1", "WATCH k", "MULTI", "INCR k"]);
        a.assert_same();
    }
    b.script(&["INCR k", "WATCH k", "MULTI", "INCR k", "EXEC", "GET k"]);
    b.assert_same();
}

/// A SELECT inside a transaction decides the database of the requests pipelined behind the
/// EXEC, which the session takes only once the EXEC has completed.
#[test]
fn requests_pipelined_behind_a_selecting_exec_use_its_database() {
    use std::io::{Read, Write};
    let Some(pair) = Pair::start("transaction differential test") else {
        return;
    };
    let pipeline =
        b"MULTI\r\nSELECT 3\r\nEXEC\r\nSET k in3\r\nSELECT 0\r\nGET k\r\nSELECT 3\r\nGET k\r\n";
    let expected = "+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n+OK\r\n+OK\r\n$-1\r\n+OK\r\n$3\r\nin3\r\n";
    let mut mnemo =
        std::net::TcpStream::connect(("127.0.0.1", pair.mnemo_port())).expect("connect");
    mnemo.write_all(pipeline).expect("write");
    let mut got = Vec::new();
    let mut buffer = [0u8; 1024];
    while got.len() < expected.len() {
        let n = mnemo.read(&mut buffer).expect("read");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buffer[..n]);
    }
    assert_eq!(String::from_utf8_lossy(&got), expected);
    let mut redis = pair.redis.connect();
    redis.write_all(pipeline).expect("write");
    let mut theirs = vec![0u8; expected.len()];
    redis.read_exact(&mut theirs).expect("read");
    assert_eq!(String::from_utf8_lossy(&theirs), expected);
}

/// A watched key that expires between WATCH and EXEC makes the EXEC fail, as in Redis 7.0;
/// one already gone when watched does not.
#[test]
fn watched_keys_that_expire() {
    let Some(pair) = Pair::start("transaction differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&["SET k v PX 100", "WATCH k", "MULTI", "GET k"]);
    std::thread::sleep(std::time::Duration::from_millis(250));
    c.script(&["EXEC", "EXISTS k"]);
    c.script(&["SET gone v PX 1"]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    c.script(&["WATCH gone", "MULTI", "PING", "EXEC"]);
    // Expired while watched, and removed by the servers' own expiry meanwhile.
    c.script(&["SET k2 v PX 50", "WATCH k2"]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    c.script(&["MULTI", "PING", "EXEC"]);
    c.assert_same();
}

/// RESET ends a transaction, forgets watches and subscriptions, selects database 0 and RESP2;
/// ROLE says master.
#[test]
fn reset_and_role_like_redis() {
    let Some(pair) = Pair::start("transaction differential test") else {
        return;
    };
    let (mut a, mut b) = (pair.connect(), pair.connect());
    a.script(&[
        "ROLE", "ROLE x", "RESET x", "SELECT 3", "SET k v", "MULTI", "SET k w", "RESET", "EXEC",
        "GET k", "SELECT 3", "GET k", "WATCH k", "RESET",
    ]);
    b.script(&["SELECT 0", "SET k changed"]);
    a.script(&["MULTI", "PING", "EXEC", "CLIENT GETNAME"]);
    a.assert_same();
    b.assert_same();
}
