//! Geo commands on sorted sets (GEOADD, GEOPOS, GEODIST, GEOHASH), as Redis 7.0's `geo.c`
//! and `geohash.c`: a position is stored as the score of its member, a 52-bit geohash
//! (latitude bits at even positions, longitude bits at odd ones, 26 steps over longitude
//! -180..180 and latitude -85.05112878..85.05112878, Web Mercator's limits); GEOPOS answers
//! the centre of the hash's cell, GEODIST the haversine distance on Redis's earth radius,
//! GEOHASH the standard 11-character geohash of the position (re-encoded over latitude
//! -90..90). So a key written by either server reads the same on both.
//!
//! The searches (GEOSEARCH, GEOSEARCHSTORE, GEORADIUS, GEORADIUSBYMEMBER and the _RO forms)
//! scan the nine cells Redis scans (`geohashCalculateAreasByShapeWGS84`: the step from the
//! radius, the centre cell and its neighbours, those that cannot hold a match left out), in
//! its order and by score within a cell, and keep the members within the radius or box:
//! so an unsorted answer, and COUNT ... ANY, come out as Redis's do.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::{self, CommandSpec};
use mnemo_resp::{parse_f64, CommandId as Id, Reply};

use super::commands::{self as cmds, err, err_owned, wrongtype};
use super::dict::{self, tag};
use super::keyspace::{typed, Ctx, Score, WrongType, SEED};
use super::store::Result;

const STEP: u32 = 26;
const LONG_MIN: f64 = -180.0;
const LONG_MAX: f64 = 180.0;
const LAT_MIN: f64 = -85.051_128_78;
const LAT_MAX: f64 = 85.051_128_78;
const EARTH_RADIUS_M: f64 = 6_372_797.560_856;
const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";

/// Spreads the 32 bits of `x` to the even bit positions of a 64-bit word.
fn spread(x: u32) -> u64 {
    let mut x = u64::from(x);
    x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bits of `x`, packed.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x >> 4)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x >> 8)) & 0x0000_ffff_0000_ffff;
    ((x | (x >> 16)) & 0x0000_0000_ffff_ffff) as u32
}

/// `geohashEncode` over the given latitude range; `None` outside it (or Web Mercator's).
fn encode(longitude: f64, latitude: f64, lat_min: f64, lat_max: f64) -> Option<u64> {
    let outside = |v: f64, min: f64, max: f64| !(min..=max).contains(&v);
    if outside(longitude, LONG_MIN, LONG_MAX)
        || outside(latitude, LAT_MIN, LAT_MAX)
        || outside(latitude, lat_min, lat_max)
    {
        return None;
    }
    let scale = (1u64 << STEP) as f64;
    let lat_offset = (latitude - lat_min) / (lat_max - lat_min) * scale;
    let long_offset = (longitude - LONG_MIN) / (LONG_MAX - LONG_MIN) * scale;
    Some(spread(lat_offset as u32) | (spread(long_offset as u32) << 1))
}

/// The centre of the cell of a 52-bit hash (`geohashDecodeToLongLatWGS84`).
fn decode(bits: u64) -> (f64, f64) {
    let lat_cell = squash(bits);
    let long_cell = squash(bits >> 1);
    let scale = (1u64 << STEP) as f64;
    let lat_span = LAT_MAX - LAT_MIN;
    let long_span = LONG_MAX - LONG_MIN;
    let lat_lo = LAT_MIN + (f64::from(lat_cell) * 1.0 / scale) * lat_span;
    let lat_hi = LAT_MIN + ((f64::from(lat_cell) + 1.0) * 1.0 / scale) * lat_span;
    let long_lo = LONG_MIN + (f64::from(long_cell) * 1.0 / scale) * long_span;
    let long_hi = LONG_MIN + ((f64::from(long_cell) + 1.0) * 1.0 / scale) * long_span;
    let longitude = ((long_lo + long_hi) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let latitude = ((lat_lo + lat_hi) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (longitude, latitude)
}

/// A score as the 64-bit hash C's `(uint64_t)score` makes of it on x86-64, where Redis
/// runs: a negative score wraps (-1 is all ones), one of 2^64 or more is 0. Only a score
/// that GEOADD did not write can be such; GEOPOS answers for it what Redis answers.
fn hash_bits(score: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if score.is_nan() {
        1 << 63
    } else if score < TWO_63 {
        (score as i64) as u64
    } else if score < 2.0 * TWO_63 {
        ((score - TWO_63) as i64 as u64) ^ (1 << 63)
    } else {
        0
    }
}

fn radians(degrees: f64) -> f64 {
    degrees * (std::f64::consts::PI / 180.0)
}

/// Haversine distance in metres (`geohashGetDistance`, its shortcut for equal longitudes
/// included).
fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let v = ((radians(lon2) - radians(lon1)) / 2.0).sin();
    if v == 0.0 {
        return EARTH_RADIUS_M * (radians(lat2) - radians(lat1)).abs();
    }
    let (lat1, lat2) = (radians(lat1), radians(lat2));
    let u = ((lat2 - lat1) / 2.0).sin();
    let a = u * u + lat1.cos() * lat2.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// A coordinate as Redis prints one (`%.17Lf`, trailing zeros and point dropped).
fn human(value: f64) -> String {
    let text = format!("{value:.17}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// GEOADD, GEOPOS, GEODIST, GEOHASH.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    match spec.id {
        Id::Geoadd => geoadd(ctx, a),
        Id::Geodist => geodist(ctx, a),
        Id::Geohash => members(ctx, a, false),
        _ => members(ctx, a, true),
    }
}

/// GEOADD key [NX|XX] [CH] longitude latitude member...: a ZADD of the members' geohashes.
fn geoadd(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let mut at = 2;
    let (mut nx, mut xx) = (false, false);
    while at < a.len() {
        let option = &a[at];
        if option.eq_ignore_ascii_case(b"nx") {
            nx = true;
        } else if option.eq_ignore_ascii_case(b"xx") {
            xx = true;
        } else if !option.eq_ignore_ascii_case(b"ch") {
            break;
        }
        at += 1;
    }
    if (a.len() - at) % 3 != 0 || (nx && xx) {
        return Ok(err(mnemo_resp::errors::SYNTAX));
    }
    let mut zadd: Vec<Bytes> = a[..at].to_vec();
    zadd[0] = Bytes::from_static(b"zadd");
    for triple in a[at..].chunks_exact(3) {
        let (Some(longitude), Some(latitude)) = (parse_f64(&triple[0]), parse_f64(&triple[1]))
        else {
            return Ok(err("ERR value is not a valid float"));
        };
        let Some(bits) = encode(longitude, latitude, LAT_MIN, LAT_MAX) else {
            return Ok(err_owned(format!(
                "ERR invalid longitude,latitude pair {longitude:.6},{latitude:.6}"
            )));
        };
        zadd.push(Bytes::from(bits.to_string()));
        zadd.push(triple[2].clone());
    }
    let Some(spec) = command::lookup(b"zadd") else {
        return super::store::corrupt("ZADD is missing from the table");
    };
    cmds::run(ctx, spec, &zadd)
}

/// The scores of `members` in the sorted set at `key` (`None` for a missing member); the
/// error reply for another type.
fn scores(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    members: &[Bytes],
) -> Result<std::result::Result<Vec<Option<f64>>, Reply>> {
    let found = match typed(ctx.lookup(key)?, tag::ZSET) {
        Ok(found) => found,
        Err(WrongType) => return Ok(Err(wrongtype())),
    };
    let mut out = Vec::with_capacity(members.len());
    for member in members {
        out.push(match &found {
            None => None,
            Some(f) => dict::find(ctx.tx, f.entry.val, SEED, member)?.map(|m| m.entry.score()),
        });
    }
    Ok(Ok(out))
}

/// GEOPOS (`positions`) or GEOHASH: one answer per member, null for a missing one.
fn members(ctx: &mut Ctx<'_, '_>, a: &[Bytes], positions: bool) -> Result<Reply> {
    let scores = match scores(ctx, &a[1], &a[2..])? {
        Ok(scores) => scores,
        Err(reply) => return Ok(reply),
    };
    let resp3 = ctx.resp3;
    let answers = scores.into_iter().map(|score| match score {
        None if positions => Reply::NullArray,
        None => Reply::NullBulk,
        Some(score) => {
            let (longitude, latitude) = decode(hash_bits(score));
            if positions {
                // RESP3 has a double type: Redis sends the same 17 decimals as its text.
                let coordinate = |v: f64| {
                    if resp3 {
                        Reply::Double(human(v).parse().unwrap_or(v))
                    } else {
                        Reply::Bulk(Bytes::from(human(v)))
                    }
                };
                Reply::Array(vec![coordinate(longitude), coordinate(latitude)])
            } else {
                let bits = encode(longitude, latitude, -90.0, 90.0).unwrap_or(0);
                let text: Vec<u8> = (0..11)
                    .map(|i| {
                        let index = if i == 10 {
                            0
                        } else {
                            (bits >> (52 - (i + 1) * 5)) & 0x1f
                        };
                        ALPHABET[index as usize]
                    })
                    .collect();
                Reply::Bulk(Bytes::from(text))
            }
        }
    });
    Ok(Reply::Array(answers.collect()))
}

/// GEODIST key member1 member2 [M|KM|FT|MI].
fn geodist(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let to_meters = match a.get(4) {
        _ if a.len() > 5 => return Ok(err(mnemo_resp::errors::SYNTAX)),
        None => 1.0,
        Some(unit) => match unit.to_ascii_lowercase().as_slice() {
            b"m" => 1.0,
            b"km" => 1000.0,
            b"ft" => 0.3048,
            b"mi" => 1609.34,
            _ => {
                return Ok(err(
                    "ERR unsupported unit provided. please use M, KM, FT, MI",
                ))
            }
        },
    };
    let scores = match scores(ctx, &a[1], &a[2..4])? {
        Ok(scores) => scores,
        Err(reply) => return Ok(reply),
    };
    let (Some(first), Some(second)) = (scores[0], scores[1]) else {
        return Ok(Reply::NullBulk);
    };
    let (lon1, lat1) = decode(hash_bits(first));
    let (lon2, lat2) = decode(hash_bits(second));
    let meters = distance(lon1, lat1, lon2, lat2) / to_meters;
    Ok(Reply::Bulk(Bytes::from(format!("{meters:.4}"))))
}

const MERCATOR_MAX: f64 = 20_037_726.37;

/// A hash of `step` bits per coordinate (`GeoHashBits`); `step` 0 is "no area".
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Cell {
    bits: u64,
    step: u32,
}

/// A cell's bounds: (longitude min, max, latitude min, max), as `geohashDecode`.
fn bounds(cell: Cell) -> (f64, f64, f64, f64) {
    let scale = (1u64 << cell.step) as f64;
    let lat_cell = f64::from(squash(cell.bits));
    let long_cell = f64::from(squash(cell.bits >> 1));
    let lat_span = LAT_MAX - LAT_MIN;
    let long_span = LONG_MAX - LONG_MIN;
    (
        LONG_MIN + (long_cell * 1.0 / scale) * long_span,
        LONG_MIN + ((long_cell + 1.0) * 1.0 / scale) * long_span,
        LAT_MIN + (lat_cell * 1.0 / scale) * lat_span,
        LAT_MIN + ((lat_cell + 1.0) * 1.0 / scale) * lat_span,
    )
}

/// `geohashEncode` at `step` bits per coordinate over Web Mercator's ranges.
fn encode_step(longitude: f64, latitude: f64, step: u32) -> Cell {
    let lat_offset = (latitude - LAT_MIN) / (LAT_MAX - LAT_MIN) * (1u64 << step) as f64;
    let long_offset = (longitude - LONG_MIN) / (LONG_MAX - LONG_MIN) * (1u64 << step) as f64;
    Cell {
        bits: spread(lat_offset as u32) | (spread(long_offset as u32) << 1),
        step,
    }
}

/// The cell `dx` cells east and `dy` cells north (`geohash_move_x` / `geohash_move_y`).
fn moved(cell: Cell, dx: i8, dy: i8) -> Cell {
    let shift = 64 - cell.step * 2;
    let mut x = cell.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let mut y = cell.bits & 0x5555_5555_5555_5555;
    if dx != 0 {
        let zz = 0x5555_5555_5555_5555u64 >> shift;
        x = if dx > 0 {
            x.wrapping_add(zz + 1)
        } else {
            (x | zz).wrapping_sub(zz + 1)
        };
        x &= 0xaaaa_aaaa_aaaa_aaaau64 >> shift;
    }
    if dy != 0 {
        let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> shift;
        y = if dy > 0 {
            y.wrapping_add(zz + 1)
        } else {
            (y | zz).wrapping_sub(zz + 1)
        };
        y &= 0x5555_5555_5555_5555u64 >> shift;
    }
    Cell {
        bits: x | y,
        step: cell.step,
    }
}

/// The search: where from, what shape (a radius, or a box's width and height), in metres
/// per unit.
#[derive(Clone, Copy, Debug)]
struct Shape {
    longitude: f64,
    latitude: f64,
    radius: f64,
    box_wh: Option<(f64, f64)>,
    to_meters: f64,
}

/// `geohashEstimateStepsByRadius`.
fn steps_for(mut range: f64, latitude: f64) -> u32 {
    if range == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&latitude) {
        step -= 1;
        if !(-80.0..=80.0).contains(&latitude) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u32
}

fn degrees(radians: f64) -> f64 {
    radians * (180.0 / std::f64::consts::PI)
}

/// The nine cells to scan, centre first, then north, south, east, west, north-east,
/// north-west, south-east, south-west; `None` for those that cannot hold a match
/// (`geohashCalculateAreasByShapeWGS84`).
fn areas(shape: &Shape) -> [Option<Cell>; 9] {
    let (half_h, half_w) = match shape.box_wh {
        Some((w, h)) => (h / 2.0, w / 2.0),
        None => (shape.radius, shape.radius),
    };
    let (height, width) = (shape.to_meters * half_h, shape.to_meters * half_w);
    let lat_delta = degrees(height / EARTH_RADIUS_M);
    let long_delta_top =
        degrees(width / EARTH_RADIUS_M / radians(shape.latitude + lat_delta).cos());
    let long_delta_bottom =
        degrees(width / EARTH_RADIUS_M / radians(shape.latitude - lat_delta).cos());
    let southern = shape.latitude < 0.0;
    let long_delta = if southern {
        long_delta_bottom
    } else {
        long_delta_top
    };
    let (min_lon, max_lon) = (shape.longitude - long_delta, shape.longitude + long_delta);
    let (min_lat, max_lat) = (shape.latitude - lat_delta, shape.latitude + lat_delta);
    let radius_m = match shape.box_wh {
        None => shape.radius,
        Some((w, h)) => ((w / 2.0) * (w / 2.0) + (h / 2.0) * (h / 2.0)).sqrt(),
    } * shape.to_meters;
    let mut steps = steps_for(radius_m, shape.latitude);
    let mut centre = encode_step(shape.longitude, shape.latitude, steps);
    let neighbour = |c: Cell, dx, dy| bounds(moved(c, dx, dy));
    let too_small = |c: Cell| {
        neighbour(c, 0, 1).3 < max_lat
            || neighbour(c, 0, -1).2 > min_lat
            || neighbour(c, 1, 0).1 < max_lon
            || neighbour(c, -1, 0).0 > min_lon
    };
    if steps > 1 && too_small(centre) {
        steps -= 1;
        centre = encode_step(shape.longitude, shape.latitude, steps);
    }
    let moves: [(i8, i8); 9] = [
        (0, 0),
        (0, 1),
        (0, -1),
        (1, 0),
        (-1, 0),
        (1, 1),
        (-1, 1),
        (1, -1),
        (-1, -1),
    ];
    let mut cells = moves.map(|(dx, dy)| Some(moved(centre, dx, dy)));
    if steps >= 2 {
        let (lon_lo, lon_hi, lat_lo, lat_hi) = bounds(centre);
        // Indexes: 1 N, 2 S, 3 E, 4 W, 5 NE, 6 NW, 7 SE, 8 SW.
        let mut drop = |which: [usize; 3]| {
            for i in which {
                cells[i] = None;
            }
        };
        if lat_lo < min_lat {
            drop([2, 8, 7]);
        }
        if lat_hi > max_lat {
            drop([1, 5, 6]);
        }
        if lon_lo < min_lon {
            drop([4, 8, 6]);
        }
        if lon_hi > max_lon {
            drop([3, 7, 5]);
        }
    }
    cells
}

/// Whether a point lies in the shape; its distance from the centre in metres if so.
fn within(shape: &Shape, longitude: f64, latitude: f64) -> Option<f64> {
    match shape.box_wh {
        None => {
            let d = distance(shape.longitude, shape.latitude, longitude, latitude);
            (d <= shape.radius * shape.to_meters).then_some(d)
        }
        Some((w, h)) => {
            let (width, height) = (w * shape.to_meters, h * shape.to_meters);
            let lat_distance = EARTH_RADIUS_M * (radians(shape.latitude) - radians(latitude)).abs();
            if lat_distance > height / 2.0 {
                return None;
            }
            if distance(longitude, latitude, shape.longitude, latitude) > width / 2.0 {
                return None;
            }
            Some(distance(
                shape.longitude,
                shape.latitude,
                longitude,
                latitude,
            ))
        }
    }
}

/// A match: member, score (its hash), distance (metres), position.
struct Point {
    member: Vec<u8>,
    score: f64,
    meters: f64,
    longitude: f64,
    latitude: f64,
}

/// The members in the shape, in Redis's order of discovery (cell by cell, by score within
/// a cell), at most `limit` (0: all) (`membersOfAllNeighbors`).
fn scan_cells(ctx: &mut Ctx<'_, '_>, d: u64, shape: &Shape, limit: usize) -> Result<Vec<Point>> {
    let cells = areas(shape);
    let index = ctx.zindex(d)?;
    let mut found = Vec::new();
    // Redis skips a cell equal to the last one scanned after the centre (a huge radius
    // makes neighbours coincide), never one equal to the centre itself.
    let mut last: Option<Cell> = None;
    for (i, cell) in cells.into_iter().enumerate() {
        let Some(cell) = cell else {
            continue;
        };
        if last == Some(cell) {
            continue;
        }
        if limit > 0 && found.len() >= limit {
            break;
        }
        let shift = 52 - cell.step * 2;
        let min = (cell.bits << shift) as f64;
        let max = ((cell.bits + 1) << shift) as f64;
        for (score, member) in index.range((Score(min), Vec::new())..) {
            if score.0 >= max {
                break;
            }
            let (longitude, latitude) = decode(hash_bits(score.0));
            if let Some(meters) = within(shape, longitude, latitude) {
                found.push(Point {
                    member: member.clone(),
                    score: score.0,
                    meters,
                    longitude,
                    latitude,
                });
                if limit > 0 && found.len() >= limit {
                    break;
                }
            }
        }
        if i > 0 {
            last = Some(cell);
        }
    }
    Ok(found)
}

/// Which search command runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Search {
    /// GEORADIUS[_RO] key lon lat radius unit ...
    Coords,
    /// GEORADIUSBYMEMBER[_RO] key member radius unit ...
    Member,
    /// GEOSEARCH key ... / GEOSEARCHSTORE dest key ...
    Shape,
}

/// A radius (or box side) and its unit, with Redis's errors.
fn distance_arg(value: &[u8], what: &'static str) -> std::result::Result<f64, Reply> {
    match parse_f64(value) {
        None => Err(err_owned(format!("ERR need numeric {what}"))),
        Some(v) => Ok(v),
    }
}

fn unit(arg: &[u8]) -> std::result::Result<f64, Reply> {
    match arg.to_ascii_lowercase().as_slice() {
        b"m" => Ok(1.0),
        b"km" => Ok(1000.0),
        b"ft" => Ok(0.3048),
        b"mi" => Ok(1609.34),
        _ => Err(err(
            "ERR unsupported unit provided. please use M, KM, FT, MI",
        )),
    }
}

fn lon_lat(a: &[Bytes]) -> std::result::Result<(f64, f64), Reply> {
    let (Some(longitude), Some(latitude)) = (parse_f64(&a[0]), parse_f64(&a[1])) else {
        return Err(err("ERR value is not a valid float"));
    };
    if encode(longitude, latitude, LAT_MIN, LAT_MAX).is_none() {
        return Err(err_owned(format!(
            "ERR invalid longitude,latitude pair {longitude:.6},{latitude:.6}"
        )));
    }
    Ok((longitude, latitude))
}

/// The position of `member` in the sorted set `d`.
fn member_position(ctx: &mut Ctx<'_, '_>, d: u64, member: &[u8]) -> Result<Option<(f64, f64)>> {
    Ok(dict::find(ctx.tx, d, SEED, member)?.map(|m| decode(hash_bits(m.entry.score()))))
}

/// GEORADIUS, GEORADIUSBYMEMBER (and _RO), GEOSEARCH, GEOSEARCHSTORE: Redis's
/// `georadiusGeneric`, its checks in its order.
pub fn radius(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    let (kind, source, can_store) = match spec.id {
        Id::Georadius => (Search::Coords, 1, true),
        Id::GeoradiusRo => (Search::Coords, 1, false),
        Id::Georadiusbymember => (Search::Member, 1, true),
        Id::GeoradiusbymemberRo => (Search::Member, 1, false),
        Id::Geosearchstore => (Search::Shape, 2, true),
        _ => (Search::Shape, 1, false),
    };
    match search_command(ctx, kind, source, can_store, a)? {
        Ok(reply) | Err(reply) => Ok(reply),
    }
}

fn search_command(
    ctx: &mut Ctx<'_, '_>,
    kind: Search,
    source: usize,
    can_store: bool,
    a: &[Bytes],
) -> Result<std::result::Result<Reply, Reply>> {
    let set = match typed(ctx.lookup(&a[source])?, tag::ZSET) {
        Ok(found) => found.map(|f| f.entry.val),
        Err(WrongType) => return Ok(Err(wrongtype())),
    };
    let mut shape = Shape {
        longitude: 0.0,
        latitude: 0.0,
        radius: 0.0,
        box_wh: None,
        to_meters: 1.0,
    };
    let radius_of = |shape: &mut Shape, args: &[Bytes]| -> std::result::Result<(), Reply> {
        let r = distance_arg(&args[0], "radius")?;
        if r < 0.0 {
            return Err(err("ERR radius cannot be negative"));
        }
        shape.radius = r;
        shape.to_meters = unit(&args[1])?;
        Ok(())
    };
    let base = match kind {
        Search::Coords => {
            (shape.longitude, shape.latitude) = match lon_lat(&a[2..4]) {
                Ok(position) => position,
                Err(reply) => return Ok(Err(reply)),
            };
            if let Err(reply) = radius_of(&mut shape, &a[4..6]) {
                return Ok(Err(reply));
            }
            6
        }
        Search::Member => {
            if let Some(d) = set {
                let Some(position) = member_position(ctx, d, &a[2])? else {
                    return Ok(Err(err("ERR could not decode requested zset member")));
                };
                (shape.longitude, shape.latitude) = position;
                if let Err(reply) = radius_of(&mut shape, &a[3..5]) {
                    return Ok(Err(reply));
                }
            }
            5
        }
        Search::Shape => source + 1,
    };
    let (mut withdist, mut withhash, mut withcoord, mut any) = (false, false, false, false);
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) =
        (false, false, false, false);
    let mut sort: Option<bool> = None; // Some(true): ascending.
    let mut count: i64 = 0;
    let mut store: Option<(Bytes, bool)> = match kind {
        Search::Shape if can_store => Some((a[1].clone(), false)),
        _ => None,
    };
    let search = kind == Search::Shape;
    let rest = &a[base..];
    let mut i = 0;
    while i < rest.len() {
        let arg = &rest[i];
        let left = rest.len() - i - 1;
        let is = |word: &str| arg.eq_ignore_ascii_case(word.as_bytes());
        if is("withdist") {
            withdist = true;
        } else if is("withhash") {
            withhash = true;
        } else if is("withcoord") {
            withcoord = true;
        } else if is("any") {
            any = true;
        } else if is("asc") {
            sort = Some(true);
        } else if is("desc") {
            sort = Some(false);
        } else if is("count") && left >= 1 {
            match mnemo_resp::parse_i64(&rest[i + 1]) {
                None => return Ok(Err(err(mnemo_resp::errors::NOT_INTEGER))),
                Some(n) if n <= 0 => return Ok(Err(err("ERR COUNT must be > 0"))),
                Some(n) => count = n,
            }
            i += 1;
        } else if (is("store") || is("storedist")) && left >= 1 && can_store && !search {
            store = Some((rest[i + 1].clone(), is("storedist")));
            i += 1;
        } else if is("storedist") && search && can_store {
            if let Some((_, dist)) = store.as_mut() {
                *dist = true;
            }
        } else if is("frommember") && left >= 1 && search && !from_lonlat {
            if let Some(d) = set {
                let Some(position) = member_position(ctx, d, &rest[i + 1])? else {
                    return Ok(Err(err("ERR could not decode requested zset member")));
                };
                (shape.longitude, shape.latitude) = position;
            }
            from_member = true;
            i += 1;
        } else if is("fromlonlat") && left >= 2 && search && !from_member {
            (shape.longitude, shape.latitude) = match lon_lat(&rest[i + 1..i + 3]) {
                Ok(position) => position,
                Err(reply) => return Ok(Err(reply)),
            };
            from_lonlat = true;
            i += 2;
        } else if is("byradius") && left >= 2 && search && !by_box {
            if let Err(reply) = radius_of(&mut shape, &rest[i + 1..i + 3]) {
                return Ok(Err(reply));
            }
            shape.box_wh = None;
            by_radius = true;
            i += 2;
        } else if is("bybox") && left >= 3 && search && !by_radius {
            let width = match distance_arg(&rest[i + 1], "width") {
                Ok(w) => w,
                Err(reply) => return Ok(Err(reply)),
            };
            let height = match distance_arg(&rest[i + 2], "height") {
                Ok(h) => h,
                Err(reply) => return Ok(Err(reply)),
            };
            if width < 0.0 || height < 0.0 {
                return Ok(Err(err("ERR height or width cannot be negative")));
            }
            shape.to_meters = match unit(&rest[i + 3]) {
                Ok(u) => u,
                Err(reply) => return Ok(Err(reply)),
            };
            shape.box_wh = Some((width, height));
            by_box = true;
            i += 3;
        } else {
            return Ok(Err(err(mnemo_resp::errors::SYNTAX)));
        }
        i += 1;
    }
    let name = String::from_utf8_lossy(&a[0]).into_owned();
    if store.is_some() && (withdist || withhash || withcoord) {
        let what = if search {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return Ok(Err(err_owned(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ))));
    }
    if search && !(from_member || from_lonlat) {
        return Ok(Err(err_owned(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ))));
    }
    if search && !(by_radius || by_box) {
        return Ok(Err(err_owned(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ))));
    }
    if any && count == 0 {
        return Ok(Err(err("ERR the ANY argument requires COUNT argument")));
    }
    let Some(d) = set else {
        return Ok(Ok(match store {
            Some((target, _)) => {
                if let Some(old) = ctx.lookup_write(&target)? {
                    ctx.delete(&old)?;
                }
                Reply::Integer(0)
            }
            None => Reply::Array(Vec::new()),
        }));
    };
    if count != 0 && sort.is_none() && !any {
        sort = Some(true);
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let mut found = scan_cells(ctx, d, &shape, if any { count } else { 0 })?;
    if let Some(ascending) = sort {
        found.sort_by(|x, y| {
            let order = x
                .meters
                .partial_cmp(&y.meters)
                .unwrap_or(std::cmp::Ordering::Equal);
            if ascending {
                order
            } else {
                order.reverse()
            }
        });
    }
    if count > 0 {
        found.truncate(count);
    }
    let Some((target, store_dist)) = store else {
        let resp3 = ctx.resp3;
        let options = usize::from(withdist) + usize::from(withhash) + usize::from(withcoord);
        let items = found.into_iter().map(|p| {
            let member = Reply::Bulk(Bytes::from(p.member));
            if options == 0 {
                return member;
            }
            let mut item = vec![member];
            if withdist {
                let shown = p.meters / shape.to_meters;
                item.push(Reply::Bulk(Bytes::from(format!("{shown:.4}"))));
            }
            if withhash {
                item.push(Reply::Integer(p.score as i64));
            }
            if withcoord {
                let coordinate = |v: f64| {
                    if resp3 {
                        Reply::Double(human(v).parse().unwrap_or(v))
                    } else {
                        Reply::Bulk(Bytes::from(human(v)))
                    }
                };
                item.push(Reply::Array(vec![
                    coordinate(p.longitude),
                    coordinate(p.latitude),
                ]));
            }
            Reply::Array(item)
        });
        return Ok(Ok(Reply::Array(items.collect())));
    };
    // Stored as a sorted set of the hashes (or, STOREDIST, of the distances in the unit).
    let stored = found.len();
    if let Some(old) = ctx.lookup_write(&target)? {
        ctx.delete(&old)?;
    }
    if stored > 0 {
        let mut zadd = vec![Bytes::from_static(b"zadd"), target];
        for p in found {
            let score = if store_dist {
                p.meters / shape.to_meters
            } else {
                p.score
            };
            zadd.push(Bytes::from(format!("{score}")));
            zadd.push(Bytes::from(p.member));
        }
        let Some(spec) = command::lookup(b"zadd") else {
            return super::store::corrupt("ZADD is missing from the table");
        };
        if let Reply::Error(text) = cmds::run(ctx, spec, &zadd)? {
            return Ok(Err(Reply::Error(text)));
        }
    }
    Ok(Ok(Reply::Integer(stored as i64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from redis-server 7.0 (GEOADD g 13.361389 38.115556 Palermo; ZSCORE, GEOPOS,
    /// GEOHASH; GEODIST to Catania at 15.087269 37.502669: 166.2742 km).
    #[test]
    fn palermo_as_redis() {
        let bits = encode(13.361389, 38.115556, LAT_MIN, LAT_MAX);
        assert_eq!(bits, Some(3_479_099_956_230_698));
        let (longitude, latitude) = decode(3_479_099_956_230_698);
        assert_eq!(human(longitude), "13.36138933897018433");
        assert_eq!(human(latitude), "38.11555639549629859");
        let catania = encode(15.087269, 37.502669, LAT_MIN, LAT_MAX).unwrap_or(0);
        let (lon2, lat2) = decode(catania);
        let km = distance(longitude, latitude, lon2, lat2) / 1000.0;
        assert_eq!(format!("{km:.4}"), "166.2742");
        assert_eq!(squash(spread(0xdead_beef)), 0xdead_beef);
    }
}
