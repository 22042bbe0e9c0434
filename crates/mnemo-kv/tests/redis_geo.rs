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
    "GEOADD g nan 1 x",
    "GEOADD g inf 1 x",
    "GEOADD g 1 -inf x",
    "GEOADD g 1e400 1 x",
    "GEORADIUS g 0 0 nan km",
    "GEORADIUS g 0 0 inf km",
    "GEOSEARCH g FROMLONLAT 0 0 BYBOX inf 1 km",
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

const SEARCHES: &[&str] = &[
    "GEOADD s 13.361389 38.115556 Palermo 15.087269 37.502669 Catania 12.758489 38.788135 edge1 17.241510 38.788135 edge2 2.35 48.85 Paris -0.12 51.5 London",
    "GEORADIUS s 15 37 200 km",
    "GEORADIUS s 15 37 200 km ASC",
    "GEORADIUS s 15 37 200 km DESC WITHDIST",
    "GEORADIUS s 15 37 200 km WITHCOORD WITHDIST WITHHASH",
    "GEORADIUS s 15 37 200 km COUNT 1",
    "GEORADIUS s 15 37 200 km COUNT 1 ANY",
    "GEORADIUS s 15 37 200 km COUNT 2 DESC",
    "GEORADIUS s 15 37 200 mi WITHDIST",
    "GEORADIUS s 15 37 2000 km",
    "GEORADIUS s 15 37 20000 km",
    "GEORADIUS s 15 37 0 km",
    "GEORADIUS_RO s 15 37 200 km WITHDIST ASC",
    "GEORADIUSBYMEMBER s Palermo 200 km",
    "GEORADIUSBYMEMBER s Palermo 200 km WITHDIST ASC",
    "GEORADIUSBYMEMBER_RO s Paris 1000 km WITHCOORD",
    "GEORADIUSBYMEMBER s nosuch 200 km",
    "GEORADIUSBYMEMBER nokey a 200 km",
    "GEORADIUS nokey 15 37 200 km",
    "GEOSEARCH s FROMLONLAT 15 37 BYRADIUS 200 km ASC",
    "GEOSEARCH s FROMMEMBER Palermo BYBOX 400 400 km ASC WITHDIST",
    "GEOSEARCH s FROMMEMBER Palermo BYBOX 400 400 km",
    "GEOSEARCH s FROMLONLAT 5 45 BYBOX 2000 2000 km WITHCOORD",
    "GEOSEARCH s FROMLONLAT 5 45 BYBOX 20000 200 km",
    "GEOSEARCH s FROMLONLAT 15 37 BYRADIUS 200 km COUNT 1 ANY WITHHASH",
    "GEOSEARCH nokey FROMLONLAT 15 37 BYRADIUS 200 km",
    "GEOSEARCH nokey FROMMEMBER a BYRADIUS 200 km",
    // STORE.
    "GEORADIUS s 15 37 200 km STORE dst",
    "ZRANGE dst 0 -1 WITHSCORES",
    "GEORADIUS s 15 37 200 km STOREDIST dst",
    "ZRANGE dst 0 -1 WITHSCORES",
    "GEORADIUSBYMEMBER s Palermo 1000 km COUNT 2 STORE dst",
    "ZRANGE dst 0 -1 WITHSCORES",
    "GEOSEARCHSTORE dst s FROMLONLAT 15 37 BYRADIUS 200 km",
    "ZRANGE dst 0 -1 WITHSCORES",
    "GEOSEARCHSTORE dst s FROMLONLAT 15 37 BYRADIUS 200 km STOREDIST",
    "ZRANGE dst 0 -1 WITHSCORES",
    "GEOSEARCHSTORE dst s FROMLONLAT 0 0 BYRADIUS 1 km",
    "EXISTS dst",
    "SET dst x",
    "GEOSEARCHSTORE dst nokey FROMLONLAT 0 0 BYRADIUS 1 km",
    "EXISTS dst",
    "GEORADIUS nokey 0 0 1 km STORE dst2",
    // Errors.
    "GEORADIUS s 15 37 -1 km",
    "GEORADIUS s 15 37 x km",
    "GEORADIUS s 15 37 1 parsecs",
    "GEORADIUS s 200 37 1 km",
    "GEORADIUS s x 37 1 km",
    "GEORADIUS s 15 37 1 km COUNT 0",
    "GEORADIUS s 15 37 1 km COUNT x",
    "GEORADIUS s 15 37 1 km ANY",
    "GEORADIUS s 15 37 1 km FOO",
    "GEORADIUS s 15 37 1 km STORE dst WITHDIST",
    "GEORADIUS_RO s 15 37 1 km STORE dst",
    "GEOSEARCHSTORE dst s FROMLONLAT 15 37 BYRADIUS 1 km WITHCOORD",
    "GEOSEARCH s BYRADIUS 1 km",
    "GEOSEARCH s FROMLONLAT 15 37 COUNT 1",
    "GEOSEARCH s FROMLONLAT 15 37 FROMMEMBER Palermo BYRADIUS 1 km",
    "GEOSEARCH s FROMLONLAT 15 37 BYRADIUS 1 km BYBOX 1 1 km",
    "GEOSEARCH s FROMMEMBER nosuch BYRADIUS 1 km",
    "GEOSEARCH s FROMLONLAT 15 37 BYBOX -1 1 km",
    "GEOSEARCH s FROMLONLAT 15 37 BYBOX x 1 km",
    "GEOSEARCH s FROMLONLAT 15 37 BYBOX 1 y km",
    "GEOSEARCH s FROMLONLAT 15 37 BYRADIUS 1 km STORE x",
    "GEOSEARCH s FROMLONLAT 15 37 BYRADIUS 1 km STOREDIST",
    "SET str x",
    "GEOSEARCH str FROMLONLAT 15 37 BYRADIUS 1 km",
    "GEORADIUS str 15 37 1 km",
];

#[test]
fn geo_searches_like_redis() {
    let Some(pair) = Pair::start("geo differential test") else {
        return;
    };
    let mut c = pair.connect();
    c.script(SEARCHES);
    c.assert_same();
    c.check("HELLO 3");
    c.differences.clear();
    c.script(&[
        "GEORADIUS s 15 37 200 km WITHCOORD WITHDIST WITHHASH",
        "GEOSEARCH s FROMLONLAT 5 45 BYBOX 2000 2000 km WITHCOORD",
    ]);
    c.assert_same();
}

/// Random points near the poles, the antimeridian and anywhere, searched by random radii
/// and boxes from random places: the same members in the same order (the cells Redis scans,
/// in its order), with and without COUNT, ANY and sorting.
#[test]
fn random_searches_like_redis() {
    let Some(pair) = Pair::start("geo differential test") else {
        return;
    };
    let mut c = pair.connect();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let clusters = [
        (0.0, 0.0),
        (179.5, 10.0),
        (-179.5, 10.0),
        (20.0, 84.0),
        (-60.0, -84.5),
        (13.0, 38.0),
    ];
    for (i, &(lon, lat)) in clusters.iter().enumerate() {
        for j in 0..60 {
            let longitude = (lon + (next() - 0.5) * 6.0).clamp(-180.0, 180.0);
            let latitude = (lat + (next() - 0.5) * 2.0).clamp(-85.05, 85.05);
            c.check(&format!("GEOADD pts {longitude:.6} {latitude:.6} m{i}-{j}"));
        }
    }
    for _ in 0..300 {
        let (lon, lat) = clusters[(next() * clusters.len() as f64) as usize];
        let longitude = (lon + (next() - 0.5) * 4.0).clamp(-180.0, 180.0);
        let latitude = (lat + (next() - 0.5) * 2.0).clamp(-85.0, 85.0);
        let size = [1.0, 10.0, 50.0, 150.0, 400.0, 3000.0, 8000.0][(next() * 7.0) as usize];
        let by = if next() < 0.5 {
            format!("BYRADIUS {size} km")
        } else {
            format!("BYBOX {size} {} km", size * (0.5 + next()))
        };
        let extra = [
            "",
            " ASC",
            " DESC",
            " COUNT 3",
            " COUNT 5 ANY",
            " WITHDIST",
            " COUNT 2 DESC WITHCOORD",
        ][(next() * 7.0) as usize];
        c.check(&format!(
            "GEOSEARCH pts FROMLONLAT {longitude:.5} {latitude:.5} {by}{extra}"
        ));
    }
    c.assert_same();
    // The searches found something: a wide one finds a whole cluster.
    let (redis, mnemo) = c.both("GEOSEARCH pts FROMLONLAT 0 0 BYRADIUS 500 km ASC");
    assert_eq!(redis, mnemo);
    assert!(
        matches!(mnemo, mnemo_resp::Reply::Array(ref found) if found.len() == 60),
        "{mnemo:?}"
    );
}
