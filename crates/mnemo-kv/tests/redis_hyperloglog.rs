//! HyperLogLog (PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST) against a real redis-server
//! 7.0 (`common/mod.rs`): the same estimates, and the same strings byte for byte (GET after
//! every change: sparse opcodes, their splits and merges, the cached count, the promotion
//! to dense), merges of sparse and dense HLLs, PFDEBUG's views, and the errors (a string
//! that is not an HLL, a damaged one, other types), then random sequences.

mod common;

use common::Pair;

#[test]
fn hyperloglog_like_redis() {
    let Some(pair) = Pair::start("HyperLogLog differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(&[
        "PFADD h a b c",
        "GET h",
        "PFCOUNT h",
        "GET h",
        "PFADD h a",
        "PFADD h d",
        "GET h",
        "PFADD h",
        "PFADD empty",
        "GET empty",
        "PFCOUNT empty",
        "PFCOUNT nokey",
        "PFCOUNT h nokey",
        "PFDEBUG ENCODING h",
        "PFDEBUG DECODE h",
        "PFADD h2 x y z a",
        "PFCOUNT h h2",
        "PFMERGE m h h2",
        "GET m",
        "PFCOUNT m",
        "PFMERGE m",
        "PFMERGE new",
        "GET new",
        "PFSELFTEST",
        // Errors.
        "SET s notanhll",
        "PFADD s a",
        "PFCOUNT s",
        "PFCOUNT h s",
        "PFMERGE m s",
        "PFDEBUG ENCODING s",
        "SET n 12345",
        "PFADD n a",
        "RPUSH l a",
        "PFADD l a",
        "PFCOUNT l",
        "PFCOUNT h l",
        "PFMERGE l h",
        "PFMERGE m l",
        "PFDEBUG ENCODING l",
        "PFDEBUG ENCODING nokey",
        "PFDEBUG FOO h",
        "PFDEBUG FOO nokey",
        "PFDEBUG GETREG",
        "PFADD",
        "PFCOUNT",
        "PFSELFTEST x",
        // A damaged sparse string.
        "PFADD bad a b c",
        "SETRANGE bad 16 zzzz",
        "PFCOUNT bad",
        "PFADD bad q",
        "PFMERGE m bad",
        "PFDEBUG DECODE bad",
        "PFDEBUG TODENSE bad",
        "APPEND h2 x",
        "PFCOUNT h2",
    ]);
    c.assert_same();
}

/// Enough elements to grow past `hll-sparse-max-bytes` and turn dense; merges of a dense
/// and a sparse HLL; PFDEBUG TODENSE and GETREG.
#[test]
fn hyperloglog_turns_dense_like_redis() {
    let Some(pair) = Pair::start("HyperLogLog differential test") else {
        return;
    };
    let mut c = pair.connect();
    for batch in 0..40 {
        let elements: Vec<String> = (0..100).map(|i| format!("e{}", batch * 100 + i)).collect();
        c.check(&format!("PFADD big {}", elements.join(" ")));
        c.check("PFDEBUG ENCODING big");
        c.check("PFCOUNT big");
        c.check("STRLEN big");
        if batch % 8 == 0 {
            c.check("GET big");
        }
    }
    c.check("GET big");
    c.script(&[
        "PFADD small a b c",
        "PFMERGE small2 small",
        "GET small2",
        "PFMERGE small small big",
        "PFDEBUG ENCODING small",
        "GET small",
        "PFCOUNT small big small2",
        "PFADD other x",
        "PFDEBUG TODENSE other",
        "PFDEBUG TODENSE other",
        "GET other",
        "PFDEBUG DECODE other",
        "PFADD other y",
        "PFCOUNT other",
        "GET other",
        "PFADD reg a b",
        "PFDEBUG GETREG reg",
        "PFDEBUG ENCODING reg",
        "GET reg",
    ]);
    c.assert_same();
}

#[test]
fn random_hyperloglogs_like_redis() {
    let Some(pair) = Pair::start("HyperLogLog differential test") else {
        return;
    };
    let mut c = pair.connect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let keys = ["h1", "h2", "h3"];
    for _ in 0..1500 {
        let key = keys[next(3) as usize];
        let line = match next(10) {
            0..=5 => {
                let n = next(12);
                let elements: Vec<String> = (0..n).map(|_| format!("v{}", next(3000))).collect();
                format!("PFADD {key} {}", elements.join(" "))
            }
            6 | 7 => format!("PFCOUNT {key}"),
            8 => format!("PFCOUNT {key} {}", keys[next(3) as usize]),
            _ => format!("PFMERGE {key} {}", keys[next(3) as usize]),
        };
        c.check(&line);
        c.check(&format!("GET {key}"));
    }
    c.assert_same();
}
