//! String and bitmap commands against a real redis-server 7.0 (`common/mod.rs`): SETNX,
//! SETEX, PSETEX, GETEX, GETDEL, INCRBYFLOAT, SETRANGE, GETRANGE, SUBSTR, MSETNX, SETBIT,
//! GETBIT, BITCOUNT, BITPOS, BITOP and LCS, hand-picked edge cases then random sequences;
//! every reply the same, errors included. TTLs compare by sign (the two clocks differ).

mod common;

use common::Pair;
use mnemo_resp::Reply;

const SCRIPT: &[&str] = &[
    "SETNX a 1",
    "SETNX a 2",
    "GET a",
    "SETNX",
    "SETNX a",
    "LPUSH list x",
    "SETNX list v",
    "SETEX e 100 v",
    "TTL e",
    "SETEX e 0 v",
    "SETEX e -5 v",
    "SETEX e x v",
    "SETEX e 9223372036854775807 v",
    "SETEX e 9223372036854 v",
    "PSETEX e 100000 w",
    "GET e",
    "PSETEX e 0 w",
    "PSETEX e 9223372036854775807 w",
    "SETEX list 10 v",
    "GET list",
    "SETEX e 10",
    // GETEX
    "SET g v",
    "GETEX g",
    "TTL g",
    "GETEX g EX 100",
    "TTL g",
    "GETEX g PERSIST",
    "TTL g",
    "GETEX g PX 100000",
    "PTTL g",
    "GETEX g EXAT 99999999999",
    "GETEX g PXAT 99999999999000",
    "GETEX g EX 0",
    "GETEX g EX -1",
    "GETEX g EX x",
    "GETEX g EX",
    "GETEX g EX 10 PX 10",
    "GETEX g PERSIST EX 10",
    "GETEX g EX 10 PERSIST",
    "GETEX g KEEPTTL",
    "GETEX g FOO",
    "GETEX g EX 9223372036854775807",
    "GETEX nokey EX 10",
    "GETEX nokey FOO",
    "GETEX nokey PX x",
    "GETEX list PX x",
    "GETEX list",
    "GETEX list EX 10",
    "GETEX g EXAT 1",
    "EXISTS g",
    // GETDEL
    "SET d v",
    "GETDEL d",
    "GETDEL d",
    "GETDEL list",
    "EXISTS list",
    // INCRBYFLOAT
    "INCRBYFLOAT f 1.5",
    "INCRBYFLOAT f 0.1",
    "INCRBYFLOAT f -1.6",
    "INCRBYFLOAT f 10",
    "INCRBYFLOAT f .5",
    "INCRBYFLOAT f 5.",
    "INCRBYFLOAT f 0.000001",
    "INCRBYFLOAT f -0.000001",
    "INCRBYFLOAT f 3.0e3",
    "INCRBYFLOAT f x",
    "INCRBYFLOAT f {empty}",
    "INCRBYFLOAT f {sp}1",
    "INCRBYFLOAT f inf",
    "INCRBYFLOAT f -inf",
    "INCRBYFLOAT f nan",
    "GET f",
    "SET fi 7",
    "INCRBYFLOAT fi 0.25",
    "SET fs abc",
    "INCRBYFLOAT fs 1",
    "SET fz 0.1",
    "INCRBYFLOAT fz 0.2",
    "INCRBYFLOAT fz -0.3",
    "INCRBYFLOAT list 1",
    "SETEX ft 1000 1",
    "INCRBYFLOAT ft 1",
    "TTL ft",
    // SETRANGE / GETRANGE / SUBSTR
    "SET r hello",
    "SETRANGE r 6 world",
    "GET r",
    "SETRANGE r 0 J",
    "GET r",
    "SETRANGE r 20 x",
    "STRLEN r",
    "GET r",
    "SETRANGE r -1 x",
    "SETRANGE r x x",
    "SETRANGE r 1 {empty}",
    "SETRANGE nr 5 {empty}",
    "EXISTS nr",
    "SETRANGE nr 2 ab",
    "GET nr",
    "SETRANGE nr 536870912 x",
    "SETRANGE nr 536870911 {empty}",
    "SETRANGE list 0 x",
    "SET gr abcdefgh",
    "GETRANGE gr 0 3",
    "GETRANGE gr -3 -1",
    "GETRANGE gr 5 2",
    "GETRANGE gr -1 -5",
    "GETRANGE gr -100 100",
    "GETRANGE gr 7 7",
    "GETRANGE gr 8 10",
    "GETRANGE gr 0 -100",
    "GETRANGE gr -100 -90",
    "GETRANGE gr x 1",
    "GETRANGE gr 1 x",
    "GETRANGE nokey 0 -1",
    "GETRANGE list 0 1",
    "SUBSTR gr 1 2",
    "SET empty {empty}",
    "GETRANGE empty 0 -1",
    "GETRANGE empty 0 0",
    // MSETNX
    "MSETNX m1 a m2 b",
    "MSETNX m2 c m3 d",
    "EXISTS m3",
    "MSETNX m4 a m4 b",
    "GET m4",
    "MSETNX m5",
    "MSETNX m5 a m6",
    "MSETNX list a",
    // Bitmaps
    "SETBIT b 7 1",
    "GET b",
    "SETBIT b 7 0",
    "SETBIT b 100 1",
    "STRLEN b",
    "GETBIT b 100",
    "GETBIT b 101",
    "GETBIT b 100000",
    "GETBIT nokey 0",
    "SETBIT b -1 1",
    "SETBIT b x 1",
    "SETBIT b 4294967296 1",
    "SETBIT b 4294967295 2",
    "SETBIT b 1 2",
    "SETBIT b 1 -1",
    "SETBIT b 1 x",
    "GETBIT b -1",
    "GETBIT b x",
    "SETBIT list 0 1",
    "GETBIT list 0",
    "SET bc foobar",
    "BITCOUNT bc",
    "BITCOUNT bc 0 0",
    "BITCOUNT bc 1 1",
    "BITCOUNT bc 1 -2",
    "BITCOUNT bc -2 -1",
    "BITCOUNT bc -1 -2",
    "BITCOUNT bc 5 30 BIT",
    "BITCOUNT bc 0 -1 BIT",
    "BITCOUNT bc 3 3 BIT",
    "BITCOUNT bc -5 -1 BIT",
    "BITCOUNT bc 0 1 BYTE",
    "BITCOUNT bc 0 1 FOO",
    "BITCOUNT bc 0",
    "BITCOUNT bc 0 1 BIT x",
    "BITCOUNT bc x 1",
    "BITCOUNT bc 0 100",
    "BITCOUNT bc 100 200",
    "BITCOUNT nokey",
    "BITCOUNT nokey 0 x",
    "BITCOUNT list",
    "BITCOUNT empty",
    "SET bp {sp}",
    "BITPOS bp 1",
    "BITPOS bp 0",
    "SETRANGE bp 0 \u{ff}\u{f0}\u{0}",
    "BITPOS bp 0",
    "BITPOS bp 1 1",
    "BITPOS bp 0 0 -1",
    "BITPOS bp 1 2 -1",
    "BITPOS bp 0 0 -1 BIT",
    "BITPOS bp 1 7 15 BIT",
    "BITPOS bp 0 3 7 BIT",
    "BITPOS bp 0 0 7 BIT",
    "BITPOS bp 1 100",
    "BITPOS bp 0 100",
    "BITPOS bp 2",
    "BITPOS bp x",
    "BITPOS bp 1 x",
    "BITPOS bp 1 0 x",
    "BITPOS bp 1 0 1 FOO",
    "BITPOS bp 1 0 1 BIT x",
    "BITPOS nokey 1",
    "BITPOS nokey 0",
    "BITPOS list 1",
    "BITPOS empty 0",
    "BITPOS empty 1",
    "SET ones \u{7f}",
    "BITPOS ones 0",
    "BITPOS ones 1",
    "SET x1 abc",
    "SET x2 ab",
    "BITOP AND d1 x1 x2",
    "GET d1",
    "BITOP OR d1 x1 x2 nokey",
    "GET d1",
    "BITOP XOR d1 x1 x2",
    "GET d1",
    "BITOP NOT d1 x1",
    "STRLEN d1",
    "BITOP NOT d1 x1 x2",
    "BITOP FOO d1 x1",
    "BITOP AND d1 nokey",
    "EXISTS d1",
    "BITOP AND d1 x1 list",
    "BITOP and d2 x1",
    "GET d2",
    "SETEX d3 100 v",
    "BITOP OR d3 x1",
    "TTL d3",
    "BITOP OR list x1",
    "TYPE list",
    // LCS
    "SET l1 ohmytext",
    "SET l2 mynewtext",
    "LCS l1 l2",
    "LCS l1 l2 LEN",
    "LCS l1 l2 IDX",
    "LCS l1 l2 IDX MINMATCHLEN 4",
    "LCS l1 l2 IDX WITHMATCHLEN",
    "LCS l1 l2 IDX MINMATCHLEN 4 WITHMATCHLEN",
    "LCS l1 l2 IDX MINMATCHLEN -1",
    "LCS l1 l2 IDX LEN",
    "LCS l1 l2 FOO",
    "LCS l1 l2 MINMATCHLEN",
    "LCS l1 l2 MINMATCHLEN x",
    "LCS l1 nokey",
    "LCS nokey nokey2 IDX",
    "LCS l1 list",
    "LCS l1 l1 IDX WITHMATCHLEN",
    "SET l3 abcabcabc",
    "SET l4 cbacbacba",
    "LCS l3 l4 IDX WITHMATCHLEN",
];

fn ttl_sign(reply: Reply) -> Reply {
    match reply {
        Reply::Integer(n) => Reply::Integer(n.signum()),
        other => other,
    }
}

#[test]
fn strings_like_redis() {
    let Some(pair) = Pair::start("string differential test") else {
        return;
    };
    let mut c = pair.connect();
    for line in SCRIPT {
        if line.starts_with("TTL") || line.starts_with("PTTL") {
            c.check_with(line, ttl_sign);
        } else {
            c.check(line);
        }
    }
    c.assert_same();
}

#[test]
fn strings_like_redis_in_resp3() {
    let Some(pair) = Pair::start("string differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("HELLO 3");
    c.differences.clear(); // HELLO's id and version differ; only the protocol matters here.
    for line in SCRIPT {
        if line.starts_with("TTL") || line.starts_with("PTTL") {
            c.check_with(line, ttl_sign);
        } else {
            c.check(line);
        }
    }
    c.assert_same();
}

/// Random sequences of the string and bitmap commands over a few keys, so that types clash
/// and arguments go wrong often.
#[test]
fn random_string_commands_like_redis() {
    let Some(pair) = Pair::start("string differential test") else {
        return;
    };
    let mut c = pair.connect();
    let commands: &[(&str, usize)] = &[
        ("SET", 2),
        ("GET", 0),
        ("SETNX", 1),
        ("SETEX", 2),
        ("PSETEX", 2),
        ("GETEX", 2),
        ("GETDEL", 0),
        ("INCRBYFLOAT", 1),
        ("INCR", 0),
        ("APPEND", 1),
        ("SETRANGE", 2),
        ("GETRANGE", 2),
        ("MSETNX", 3),
        ("SETBIT", 2),
        ("GETBIT", 1),
        ("BITCOUNT", 3),
        ("BITPOS", 4),
        ("BITOP", 3),
        ("LCS", 3),
        ("LPUSH", 1),
        ("STRLEN", 0),
        ("DEL", 0),
    ];
    let keys = ["k1", "k2", "k3"];
    let tokens = [
        "k1", "k2", "0", "1", "-1", "2", "7", "10", "-3", "1.5", "0.1", "x", "", "abc", "EX", "PX",
        "PERSIST", "BIT", "BYTE", "AND", "OR", "XOR", "NOT", "LEN", "IDX", "100", "15",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for _ in 0..4000 {
        let (name, max) = commands[next(commands.len())];
        let mut words = vec![name.to_string()];
        if name == "BITOP" {
            words.push(["AND", "OR", "XOR", "NOT"][next(4)].to_string());
        }
        words.push(keys[next(keys.len())].to_string());
        for _ in 0..next(max + 1) {
            words.push(tokens[next(tokens.len())].to_string());
        }
        // Expiry times that could pass during the run would race the two servers.
        for i in 2..words.len() {
            let timed = matches!(name, "SETEX" | "PSETEX") && i == 2
                || ["EX", "PX"].contains(&words[i - 1].as_str());
            if timed && words[i].parse::<i64>().is_ok_and(|t| t > 0) {
                words[i] = "100000".into();
            }
        }
        let line = words
            .iter()
            .map(|w| if w.is_empty() { "{empty}" } else { w })
            .collect::<Vec<_>>()
            .join(" ");
        c.check(&line);
    }
    c.assert_same();
}
