//! Sorted-set commands against a real redis-server 7.0 (`common/mod.rs`): ZCOUNT, ZMSCORE,
//! ZRANK, ZREVRANK, ZREVRANGE, ZPOPMAX, ZREMRANGEBYSCORE, ZREMRANGEBYRANK, ZRANDMEMBER, ZSCAN,
//! ZMPOP; hand-picked edge cases in RESP2 and RESP3, then random sequences. Random picks are
//! compared by shape, scans by their full contents.

mod common;

use common::Pair;
use mnemo_resp::Reply;

const SCRIPT: &[&str] = &[
    "ZADD z 1 a 2 b 2 c 3.5 d -1 e",
    "ZCOUNT z -inf +inf",
    "ZCOUNT z (1 3.5",
    "ZCOUNT z 2 2",
    "ZCOUNT z (2 2",
    "ZCOUNT z 5 1",
    "ZCOUNT z x 1",
    "ZCOUNT nokey 0 1",
    "ZCOUNT nokey x 1",
    "SET s v",
    "ZCOUNT s 0 1",
    "ZCOUNT s x 1",
    "ZMSCORE z a d nope",
    "ZMSCORE nokey a b",
    "ZMSCORE s a",
    "ZRANK z a",
    "ZRANK z e",
    "ZRANK z c",
    "ZRANK z nope",
    "ZRANK nokey a",
    "ZRANK s a",
    "ZREVRANK z a",
    "ZREVRANK z d",
    "ZREVRANK z nope",
    "ZREVRANGE z 0 -1",
    "ZREVRANGE z 0 1 WITHSCORES",
    "ZREVRANGE z 1 0",
    "ZREVRANGE z -2 -1 withscores",
    "ZREVRANGE z 0 -1 REV",
    "ZREVRANGE z 0 -1 WITHSCORES WITHSCORES",
    "ZREVRANGE z x 1",
    "ZREVRANGE nokey 0 -1",
    "ZREVRANGE s 0 -1",
    "ZPOPMAX z",
    "ZPOPMAX z 2",
    "ZPOPMAX z 0",
    "ZPOPMAX z -1",
    "ZPOPMAX z 1 2",
    "ZPOPMAX nokey",
    "ZPOPMAX nokey 2",
    "ZPOPMAX s",
    "ZADD r 1 a 2 b 3 c 4 d 5 e 6 f",
    "ZREMRANGEBYSCORE r (1 2",
    "ZRANGE r 0 -1",
    "ZREMRANGEBYSCORE r 10 20",
    "ZREMRANGEBYSCORE r x 1",
    "ZREMRANGEBYSCORE nokey 0 1",
    "ZREMRANGEBYSCORE nokey x 1",
    "ZREMRANGEBYSCORE s 0 1",
    "ZREMRANGEBYRANK r 0 0",
    "ZREMRANGEBYRANK r -1 -1",
    "ZRANGE r 0 -1 WITHSCORES",
    "ZREMRANGEBYRANK r 5 10",
    "ZREMRANGEBYRANK r x 1",
    "ZREMRANGEBYRANK nokey 0 1",
    "ZREMRANGEBYRANK s 0 1",
    "ZREMRANGEBYRANK r 0 -1",
    "EXISTS r",
    "ZADD q 1 a 2 b 3 c",
    "ZRANDMEMBER nokey",
    "ZRANDMEMBER nokey 3",
    "ZRANDMEMBER nokey 3 WITHSCORES",
    "ZRANDMEMBER q 0",
    "ZRANDMEMBER q x",
    "ZRANDMEMBER q 1 FOO",
    "ZRANDMEMBER q 1 WITHSCORES x",
    "ZRANDMEMBER q -9223372036854775808",
    "ZRANDMEMBER q 4611686018427387904 WITHSCORES",
    "ZRANDMEMBER q 10 WITHSCORES",
    "ZRANDMEMBER s",
    "ZSCAN q 0",
    "ZSCAN q 0 MATCH [ab]",
    "ZSCAN q x",
    "ZSCAN q 0 COUNT 0",
    "ZSCAN nokey 0",
    "ZSCAN s 0",
    "ZADD m1 1 a 2 b 3 c",
    "ZADD m2 10 x",
    "ZMPOP 2 nokey m1 MIN",
    "ZMPOP 2 m1 m2 MAX COUNT 5",
    "ZMPOP 2 m1 m2 MIN COUNT 5",
    "ZMPOP 1 m1 MIN",
    "ZMPOP 0 m1 MIN",
    "ZMPOP x m1 MIN",
    "ZMPOP 3 m1 m2 MIN",
    "ZMPOP 1 m1 UP",
    "ZMPOP 1 m1 MIN COUNT 0",
    "ZMPOP 1 m1 MIN COUNT 1 COUNT 1",
    "ZMPOP 2 s m1 MIN",
    // ZUNION, ZINTER, ZDIFF and their STORE forms, ZINTERCARD; sets count as score 1.
    "ZADD u1 1 a 2 b 3 c",
    "ZADD u2 10 b 20 c 30 d",
    "SADD uset c d e",
    "ZUNION 2 u1 u2",
    "ZUNION 2 u1 u2 WITHSCORES",
    "ZUNION 3 u1 u2 uset WITHSCORES",
    "ZUNION 2 u1 u2 WEIGHTS 2 0.5 WITHSCORES",
    "ZUNION 2 u1 u2 AGGREGATE MIN WITHSCORES",
    "ZUNION 2 u1 u2 AGGREGATE max WITHSCORES",
    "ZUNION 2 u1 nokey WITHSCORES",
    "ZUNION 2 u1 u2 WEIGHTS 1",
    "ZUNION 2 u1 u2 WEIGHTS 1 x",
    "ZUNION 2 u1 u2 AGGREGATE foo",
    "ZUNION 2 u1 u2 AGGREGATE",
    "ZUNION 2 u1 u2 LIMIT 1",
    "ZUNION 0 u1",
    "ZUNION x u1",
    "ZUNION 3 u1 u2",
    "ZUNION 2 u1 s",
    "ZUNION 2 s u1 FOO",
    "ZINTER 2 u1 u2 WITHSCORES",
    "ZINTER 3 u1 u2 uset WITHSCORES",
    "ZINTER 2 u1 u2 WEIGHTS -1 1 AGGREGATE MAX WITHSCORES",
    "ZINTER 2 u1 nokey",
    "ZINTER 1 u1 WITHSCORES WITHSCORES",
    "ZDIFF 2 u1 u2 WITHSCORES",
    "ZDIFF 2 u2 uset WITHSCORES",
    "ZDIFF 1 u1 WEIGHTS 1",
    "ZDIFF 2 nokey u1",
    "ZINTERCARD 2 u1 u2",
    "ZINTERCARD 2 u1 u2 LIMIT 1",
    "ZINTERCARD 2 u1 u2 LIMIT -1",
    "ZINTERCARD 2 u1 u2 WITHSCORES",
    "ZINTERCARD 0 u1",
    "ZINTERCARD 2 u1 nokey",
    "ZUNIONSTORE dst 2 u1 u2 WEIGHTS 1 2",
    "ZRANGE dst 0 -1 WITHSCORES",
    "ZINTERSTORE dst 2 u1 u2 AGGREGATE MIN",
    "ZRANGE dst 0 -1 WITHSCORES",
    "ZDIFFSTORE dst 2 u1 u2",
    "ZRANGE dst 0 -1 WITHSCORES",
    "ZINTERSTORE dst 2 u1 nokey",
    "EXISTS dst",
    "ZUNIONSTORE dst 2 u1 u2 WITHSCORES",
    "ZUNIONSTORE dst 0 u1",
    "ZUNIONSTORE s 1 u1",
    "TYPE s",
    // Lexicographic ranges (every member of the same score).
    "ZADD lex 0 a 0 b 0 c 0 d 0 e 0 f 0 g",
    "ZRANGEBYLEX lex - +",
    "ZRANGEBYLEX lex [b (e",
    "ZRANGEBYLEX lex (b [e",
    "ZRANGEBYLEX lex [aa +",
    "ZRANGEBYLEX lex - (c",
    "ZRANGEBYLEX lex + -",
    "ZRANGEBYLEX lex - + LIMIT 1 2",
    "ZRANGEBYLEX lex - + LIMIT -1 2",
    "ZRANGEBYLEX lex - + LIMIT 2 -1",
    "ZRANGEBYLEX lex - + LIMIT 1",
    "ZRANGEBYLEX lex - + LIMIT x 1",
    "ZRANGEBYLEX lex - + WITHSCORES",
    "ZRANGEBYLEX lex - + FOO",
    "ZRANGEBYLEX lex a +",
    "ZRANGEBYLEX lex - {empty}",
    "ZRANGEBYLEX nokey - +",
    "ZRANGEBYLEX nokey x +",
    "ZRANGEBYLEX s - +",
    "ZREVRANGEBYLEX lex + -",
    "ZREVRANGEBYLEX lex (e [b",
    "ZREVRANGEBYLEX lex + - LIMIT 1 2",
    "ZREVRANGEBYLEX lex - +",
    "ZRANGE lex [b [d BYLEX",
    "ZRANGE lex [d [b BYLEX REV",
    "ZRANGE lex - + BYLEX LIMIT 2 3",
    "ZRANGE lex - + BYLEX WITHSCORES",
    "ZRANGE lex - + BYLEX BYSCORE",
    "ZRANGE lex x + BYLEX",
    "ZLEXCOUNT lex - +",
    "ZLEXCOUNT lex [b (d",
    "ZLEXCOUNT lex x +",
    "ZLEXCOUNT nokey - +",
    "ZLEXCOUNT nokey x +",
    "ZLEXCOUNT s - +",
    "ZREMRANGEBYLEX lex [b (d",
    "ZRANGE lex 0 -1",
    "ZREMRANGEBYLEX lex x +",
    "ZREMRANGEBYLEX nokey - +",
    "ZREMRANGEBYLEX lex - +",
    "EXISTS lex",
    // ZRANGESTORE
    "ZADD zr 1 a 2 b 3 c 4 d",
    "ZRANGESTORE out zr 1 2",
    "ZRANGE out 0 -1 WITHSCORES",
    "ZRANGESTORE out zr (1 +inf BYSCORE LIMIT 1 1",
    "ZRANGE out 0 -1 WITHSCORES",
    "ZRANGESTORE out zr +inf -inf BYSCORE REV",
    "ZRANGE out 0 -1 WITHSCORES",
    "ZRANGESTORE out zr [b [c BYLEX",
    "ZRANGE out 0 -1 WITHSCORES",
    "ZRANGESTORE out zr 10 20",
    "EXISTS out",
    "ZRANGESTORE out nokey 0 -1",
    "ZRANGESTORE out zr 0 -1 WITHSCORES",
    "ZRANGESTORE out zr x 1",
    "ZRANGESTORE out s 0 -1",
    "ZRANGESTORE s zr 0 0",
    "TYPE s",
    "ZRANGESTORE zr zr 0 1",
    "ZRANGE zr 0 -1 WITHSCORES",
];

fn random(line: &str) -> bool {
    line.starts_with("ZRANDMEMBER q")
        && !line.ends_with(" 0")
        && !line.contains(" 10 ")
        && !line.contains("x")
        && !line.contains("FOO")
        && !line.contains("922")
        && !line.contains("461")
}

fn shape(reply: Reply) -> Reply {
    match reply {
        Reply::Bulk(_) => Reply::Bulk("member".into()),
        Reply::Array(items) => Reply::Integer(items.len() as i64),
        other => other,
    }
}

fn sorted_all(reply: Reply) -> Reply {
    match reply {
        Reply::Array(items) => {
            common::sorted(Reply::Array(items.into_iter().map(sorted_all).collect()))
        }
        other => other,
    }
}

fn run_script(c: &mut common::Clients) {
    for line in SCRIPT {
        if random(line) {
            c.check_with(line, shape);
        } else if line.starts_with("ZSCAN") || line.contains(" 10 WITHSCORES") {
            c.check_with(line, sorted_all);
        } else {
            c.check(line);
        }
    }
}

#[test]
fn zsets_like_redis() {
    let Some(pair) = Pair::start("sorted-set differential test") else {
        return;
    };
    let mut c = pair.connect();
    run_script(&mut c);
    c.assert_same();
}

#[test]
fn zsets_like_redis_in_resp3() {
    let Some(pair) = Pair::start("sorted-set differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("HELLO 3");
    c.differences.clear();
    run_script(&mut c);
    c.assert_same();
}

#[test]
fn random_zset_commands_like_redis() {
    let Some(pair) = Pair::start("sorted-set differential test") else {
        return;
    };
    let mut c = pair.connect();
    let commands: &[(&str, usize)] = &[
        ("ZADD", 4),
        ("ZCOUNT", 2),
        ("ZMSCORE", 3),
        ("ZRANK", 1),
        ("ZREVRANK", 1),
        ("ZREVRANGE", 3),
        ("ZPOPMAX", 1),
        ("ZPOPMIN", 1),
        ("ZREMRANGEBYSCORE", 2),
        ("ZREMRANGEBYRANK", 2),
        ("ZRANGE", 3),
        ("ZCARD", 0),
    ];
    let keys = ["k1", "k2"];
    let tokens = [
        "0",
        "1",
        "-1",
        "2",
        "3",
        "(1",
        "-inf",
        "+inf",
        "1.5",
        "x",
        "m1",
        "m2",
        "m3",
        "m4",
        "WITHSCORES",
        "10",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for _ in 0..3000 {
        let (name, max) = commands[next(commands.len())];
        let mut words = vec![name.to_string(), keys[next(keys.len())].to_string()];
        if name == "ZADD" {
            words.push(["1", "2", "-1", "2.5"][next(4)].to_string());
            words.push(["m1", "m2", "m3", "m4", "m5"][next(5)].to_string());
        } else {
            for _ in 0..next(max + 1) {
                words.push(tokens[next(tokens.len())].to_string());
            }
        }
        c.check(&words.join(" "));
    }
    c.assert_same();
}
