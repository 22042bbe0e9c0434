//! Geo commands on sorted sets (GEOADD, GEOPOS, GEODIST, GEOHASH), as Redis 7.0's `geo.c`
//! and `geohash.c`: a position is stored as the score of its member, a 52-bit geohash
//! (latitude bits at even positions, longitude bits at odd ones, 26 steps over longitude
//! -180..180 and latitude -85.05112878..85.05112878, Web Mercator's limits); GEOPOS answers
//! the centre of the hash's cell, GEODIST the haversine distance on Redis's earth radius,
//! GEOHASH the standard 11-character geohash of the position (re-encoded over latitude
//! -90..90). So a key written by either server reads the same on both.
//!
//! Not here yet: GEOSEARCH, GEOSEARCHSTORE, GEORADIUS and GEORADIUSBYMEMBER (and their _RO
//! forms), which answer "not supported".

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::{self, CommandSpec};
use mnemo_resp::{parse_f64, CommandId as Id, Reply};

use super::commands::{self as cmds, err, err_owned, wrongtype};
use super::dict::{self, tag};
use super::keyspace::{typed, Ctx, WrongType, SEED};
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
