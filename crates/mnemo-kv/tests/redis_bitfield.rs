//! BITFIELD and BITFIELD_RO (strings and bitmaps group) against a real redis-server 7.0
//! (`common/mod.rs`): signed and unsigned fields of every width at bit and `#` offsets, GET /
//! SET / INCRBY under OVERFLOW WRAP, SAT and FAIL, strings padded to the highest written bit
//! (also when an operation fails), the errors (type, offset, value, OVERFLOW, BITFIELD_RO's
//! writes, WRONGTYPE) and their order, then random commands. Every reply the same, and the
//! strings' bytes after each write.

mod common;

use common::Pair;

const SCRIPT: &[&str] = &[
    "BITFIELD k GET u8 0",
    "EXISTS k",
    "BITFIELD k SET u8 0 255 GET u8 0 GET i8 0",
    "GET k",
    "BITFIELD k SET i5 3 -3 GET i5 3 GET u5 3",
    "GET k",
    "BITFIELD k INCRBY u2 100 1 OVERFLOW SAT INCRBY u2 102 1",
    "STRLEN k",
    "BITFIELD k SET u8 #2 65 GET u8 16 GET u8 #2",
    "GET k",
    "BITFIELD k GET i64 0 GET u63 1 GET i1 0 GET u1 0",
    "BITFIELD k SET i64 0 -1 GET i64 0 GET u63 0",
    "BITFIELD k SET i64 0 9223372036854775807 INCRBY i64 0 1",
    "BITFIELD k OVERFLOW SAT SET i64 0 9223372036854775807 INCRBY i64 0 1",
    "BITFIELD k OVERFLOW SAT SET i64 0 -9223372036854775808 INCRBY i64 0 -1",
    "BITFIELD k OVERFLOW FAIL INCRBY i64 0 -1 INCRBY i64 0 -1",
    // Overflow policies on small fields.
    "DEL c",
    "BITFIELD c INCRBY u8 0 250 INCRBY u8 0 10",
    "BITFIELD c OVERFLOW SAT INCRBY u8 0 250 INCRBY u8 0 -300",
    "BITFIELD c OVERFLOW FAIL INCRBY u8 0 300 INCRBY u8 0 1 GET u8 0",
    "BITFIELD c OVERFLOW WRAP INCRBY i8 8 127 INCRBY i8 8 1 INCRBY i8 8 -1",
    "BITFIELD c OVERFLOW SAT INCRBY i8 8 -200 INCRBY i8 8 500",
    "BITFIELD c OVERFLOW FAIL SET i8 8 200 SET i8 8 -129 SET i8 8 -128 SET u4 16 16 SET u4 16 15",
    "BITFIELD c SET u4 16 -1 GET u4 16",
    "BITFIELD c OVERFLOW SAT SET u4 16 -1 GET u4 16 SET u4 16 99 GET u4 16",
    "BITFIELD c OVERFLOW sat SET i4 20 -100 GET i4 20 OVERFLOW wrap SET i4 20 100 GET i4 20",
    "GET c",
    // A failing write still pads the string to its bit.
    "DEL f",
    "BITFIELD f OVERFLOW FAIL INCRBY u8 100 1000",
    "STRLEN f",
    "BITFIELD f GET u8 100",
    // Reads past the end are zero; nothing is created.
    "BITFIELD nokey GET i16 1000",
    "EXISTS nokey",
    "BITFIELD_RO k GET u8 0 GET i16 #1",
    "BITFIELD_RO nokey GET u8 0",
    "BITFIELD k",
    "BITFIELD_RO k",
    "BITFIELD nokey",
    // Errors.
    "BITFIELD k GET u64 0",
    "BITFIELD k GET i65 0",
    "BITFIELD k GET i0 0",
    "BITFIELD k GET x8 0",
    "BITFIELD k GET u8 -1",
    "BITFIELD k GET u8 x",
    "BITFIELD k GET u8 #-1",
    "BITFIELD k GET u8 4294967296",
    "BITFIELD k GET u8 4294967295",
    "BITFIELD k SET u8 0 x",
    "BITFIELD k INCRBY u8 0",
    "BITFIELD k GET u8",
    "BITFIELD k OVERFLOW",
    "BITFIELD k OVERFLOW FOO GET u8 0",
    "BITFIELD k FOO",
    "BITFIELD k GET u8 0 FOO",
    "BITFIELD k SET u8 0 1 GET u64 0",
    "BITFIELD_RO k SET u8 0 1",
    "BITFIELD_RO k INCRBY u8 0 1",
    "BITFIELD_RO k OVERFLOW SAT GET u8 0",
    "BITFIELD_RO k GET u64 0 SET u8 0 1",
    "BITFIELD_RO k SET u8 0 x",
    "RPUSH list a",
    "BITFIELD list GET u8 0",
    "BITFIELD list SET u8 0 1",
    "BITFIELD_RO list GET u8 0",
    "BITFIELD list FOO",
    "GET k",
    "BITFIELD",
];

#[test]
fn bitfield_like_redis() {
    let Some(pair) = Pair::start("BITFIELD differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(SCRIPT);
    c.assert_same();
}

#[test]
fn bitfield_like_redis_in_resp3() {
    let Some(pair) = Pair::start("BITFIELD differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("HELLO 3");
    c.differences.clear(); // HELLO's id and version differ; only the protocol matters here.
    c.script(SCRIPT);
    c.assert_same();
}

/// Random BITFIELDs over one key: random types, offsets, values and policies; the string's
/// bytes compared after each.
#[test]
fn random_bitfields_like_redis() {
    let Some(pair) = Pair::start("BITFIELD differential test") else {
        return;
    };
    let mut c = pair.connect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let values = [
        "0",
        "1",
        "-1",
        "127",
        "-128",
        "255",
        "256",
        "1000",
        "-1000",
        "9223372036854775807",
        "-9223372036854775808",
        "4611686018427387904",
    ];
    for _ in 0..1500 {
        let mut line = "BITFIELD r".to_string();
        for _ in 0..=next(3) {
            let signed = next(2) == 0;
            let bits = 1 + next(if signed { 64 } else { 63 });
            let kind = if signed { "i" } else { "u" };
            let offset = if next(4) == 0 {
                format!("#{}", next(6))
            } else {
                next(90).to_string()
            };
            let value = values[next(values.len() as u64) as usize];
            let op = match next(4) {
                0 => format!("GET {kind}{bits} {offset}"),
                1 => format!("SET {kind}{bits} {offset} {value}"),
                2 => format!("INCRBY {kind}{bits} {offset} {value}"),
                _ => format!("OVERFLOW {}", ["WRAP", "SAT", "FAIL"][next(3) as usize]),
            };
            line.push(' ');
            line.push_str(&op);
        }
        c.check(&line);
        let before = c.differences.len();
        c.check("GET r");
        if c.differences.len() > before {
            c.differences.push(format!("(the string after {line})"));
            break;
        }
    }
    c.assert_same();
}
