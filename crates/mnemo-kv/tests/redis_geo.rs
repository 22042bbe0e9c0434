//! Geo commands (GEOADD, GEOPOS, GEODIST, GEOHASH) against a real redis-server 7.0
//! (`common/mod.rs`): the same scores (ZSCORE of the geohash), positions, distances in every
//! unit and geohashes, at the edges of the ranges too, GEOADD's options and errors, other
//! types; then random points. GEOSEARCH and GEORADIUS are not there yet.

mod common;

use common::Pair;

const SCRIPT: &[&str] = &[
    "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
    "ZSCORE g Palermo",
    "ZRANGE g 0 -1 WITHSCORES",
    "GEOPOS g Palermo Catania nosuch",
    "GEODIST g Palermo Catania",
    "GEODIST g Palermo Catania km",
    "GEODIST g Palermo Catania KM",
    "GEODIST g Palermo Catania mi",
    "GEODIST g Palermo Catania ft",
    "GEODIST g Palermo Catania m",
    "GEODIST g Palermo Palermo",
    "GEODIST g Palermo nosuch",
    "GEODIST nokey a b",
    "GEODIST g Palermo Catania yards",
    "GEODIST g Palermo Catania km x",
    "GEOHASH g Palermo Catania nosuch",
    "GEOHASH nokey a",
    "GEOPOS nokey a b",
    "GEOADD g 13.361389 38.115556 Palermo",
    "GEOADD g CH 13.361389 38.2 Palermo 1 1 new",
    "GEOADD g NX 0 0 Palermo 2 2 other",
    "GEOADD g XX 3 3 Palermo 4 4 absent",
    "GEOADD g XX CH 3 3 Palermo",
    "GEOPOS g Palermo new other absent",
    "GEOADD g NX XX 1 1 a",
    "GEOADD g 1 1 a 2",
    "GEOADD g 200 10 x",
    "GEOADD g 10 86 x",
    "GEOADD g 10 -85.06 x",
    "GEOADD g a 10 x",
    "GEOADD g 10 b x",
    "GEOADD g 1 1 ok 200 0 bad",
    "EXISTS ok",
    "ZSCORE g ok",
    "GEOADD g FOO 1 1 a",
    // The edges.
    "GEOADD edges -180 -85.05112878 sw 180 85.05112878 ne 0 0 origin -0.0000001 0.0000001 near",
    "GEOPOS edges sw ne origin near",
    "GEOHASH edges sw ne origin near",
    "GEODIST edges sw ne",
    "GEODIST edges origin near m",
    "GEODIST edges sw origin mi",
    // Other types and plain sorted sets.
    "SET s x",
    "GEOADD s 1 1 a",
    "GEOPOS s a",
    "GEODIST s a b",
    "GEOHASH s a",
    "ZADD z 5 five -1 negative 1e15 big",
    "GEOPOS z five negative big",
    "GEOHASH z five",
    "GEODIST z five big",
];

#[test]
fn geo_like_redis() {
    let Some(pair) = Pair::start("geo differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(SCRIPT);
    c.assert_same();
}

#[test]
fn geo_like_redis_in_resp3() {
    let Some(pair) = Pair::start("geo differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.check("HELLO 3");
    c.differences.clear(); // HELLO's id and version differ; only the protocol matters here.
    c.script(SCRIPT);
    c.assert_same();
}

/// Random points all over the map: the same scores, positions, hashes and distances.
#[test]
fn random_points_like_redis() {
    let Some(pair) = Pair::start("geo differential test") else {
        return;
    };
    let mut c = pair.connect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    for i in 0..300 {
        let longitude = next() * 360.0 - 180.0;
        let latitude = next() * 170.1 - 85.05;
        c.check(&format!("GEOADD r {longitude:.7} {latitude:.7} p{i}"));
        c.check(&format!("ZSCORE r p{i}"));
        c.check(&format!("GEOPOS r p{i}"));
        c.check(&format!("GEOHASH r p{i}"));
        if i > 0 {
            let unit = ["m", "km", "mi", "ft"][i % 4];
            c.check(&format!("GEODIST r p{i} p{} {unit}", i / 2));
        }
    }
    c.assert_same();
}
