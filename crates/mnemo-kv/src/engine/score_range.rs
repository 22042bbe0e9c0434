//! HMGET, ZRANGEBYSCORE / ZREVRANGEBYSCORE, and the score range that ZRANGE ... BYSCORE
//! shares with them: it seeks to the first member in range through the sorted set's order
//! index (a `BTreeSet` range) instead of walking the set from its lowest score.
//!
//! Replies and errors are Redis 7.0's (`t_hash.c` hmgetCommand, `t_zset.c`
//! zrangeGenericCommand), checked against redis-server by `tests/engine_against_redis.rs`.

use std::ops::Bound;

use mnemo_resp::bytes::Bytes;
use mnemo_resp::{errors, parse_i64, parse_strtod, Reply};

use super::commands::{container, err, scored_reply};
use super::dict::{self, tag};
use super::keyspace::{Ctx, Score, WrongType, SEED};
use super::store::Result;

/// `HMGET key field [field ...]`: one bulk or null per field; every null when the key is
/// missing.
pub fn hmget(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let fields = a.get(2..).unwrap_or_default();
    let d = match container(ctx, &a[1], tag::HASH, false)? {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(Reply::Array(vec![Reply::NullBulk; fields.len()])),
        Err(WrongType) => return Ok(err(errors::WRONG_TYPE)),
    };
    let mut out = Vec::with_capacity(fields.len());
    for field in fields {
        out.push(match dict::find(ctx.tx, d, SEED, field)? {
            Some(f) => Reply::Bulk(Bytes::from(f.entry.string(ctx.tx)?)),
            None => Reply::NullBulk,
        });
    }
    Ok(Reply::Array(out))
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`, and with `rev`
/// `ZREVRANGEBYSCORE key max min ...`. Options are checked first (syntax, LIMIT's
/// integers), then the range, then the key's type, in Redis's order.
pub fn zrangebyscore(ctx: &mut Ctx<'_, '_>, a: &[Bytes], rev: bool) -> Result<Reply> {
    let mut with_scores = false;
    let mut limit = None;
    let mut i = 4;
    while i < a.len() {
        let option = &a[i];
        if option.eq_ignore_ascii_case(b"withscores") {
            with_scores = true;
        } else if option.eq_ignore_ascii_case(b"limit") && i + 2 < a.len() {
            let (Some(offset), Some(count)) = (parse_i64(&a[i + 1]), parse_i64(&a[i + 2])) else {
                return Ok(err(errors::NOT_INTEGER));
            };
            limit = Some((offset, count));
            i += 2;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 1;
    }
    let (min, max) = if rev { (&a[3], &a[2]) } else { (&a[2], &a[3]) };
    by_score(ctx, &a[1], min, max, rev, limit, with_scores)
}

/// The members of the sorted set `key` whose score lies between the bounds `min` and `max`
/// (`1.5`, `(1.5` exclusive, `-inf`, `+inf`), lowest first or with `rev` highest first,
/// after skipping LIMIT's `offset` and taking at most `count` (negative: all).
pub fn by_score(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    min: &[u8],
    max: &[u8],
    rev: bool,
    limit: Option<(i64, i64)>,
    with_scores: bool,
) -> Result<Reply> {
    let (Some(lo), Some(hi)) = (score_bound(min), score_bound(max)) else {
        return Ok(err(errors::MIN_MAX_NOT_FLOAT));
    };
    let d = match container(ctx, key, tag::ZSET, false)? {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(Reply::Array(Vec::new())),
        Err(WrongType) => return Ok(err(errors::WRONG_TYPE)),
    };
    let (offset, count) = limit.unwrap_or((0, -1));
    // Redis skips `offset` members one by one; a negative offset never ends: nothing.
    let Ok(offset) = usize::try_from(offset) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let take = usize::try_from(count).unwrap_or(usize::MAX);
    let resp3 = ctx.resp3;
    let index = ctx.zindex(d)?;
    let Some((start, end)) = seek_bounds(lo, hi) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let range = index.range((start, end));
    let pick = |(score, member): &(Score, Vec<u8>)| (score.0, member.clone());
    let items: Vec<(f64, Vec<u8>)> = if rev {
        range.rev().skip(offset).take(take).map(pick).collect()
    } else {
        range.skip(offset).take(take).map(pick).collect()
    };
    Ok(scored_reply(items, with_scores, resp3))
}

/// The score range `min`..`max` (each `1.5`, `(1.5` exclusive, `-inf`, `+inf`), as
/// `(value, exclusive)` pairs; `None` if either is not a float.
pub fn parse(min: &[u8], max: &[u8]) -> Option<((f64, bool), (f64, bool))> {
    Some((score_bound(min)?, score_bound(max)?))
}

/// The members of the sorted set `d` with a score between `lo` and `hi`, lowest first.
pub fn members_between(
    ctx: &mut Ctx<'_, '_>,
    d: u64,
    lo: (f64, bool),
    hi: (f64, bool),
) -> Result<Vec<(f64, Vec<u8>)>> {
    let index = ctx.zindex(d)?;
    let Some((start, end)) = seek_bounds(lo, hi) else {
        return Ok(Vec::new());
    };
    Ok(index
        .range((start, end))
        .map(|(score, member)| (score.0, member.clone()))
        .collect())
}

/// A score bound: `(value, exclusive)`; `(` makes it exclusive. The value is read as Redis's
/// `zslParseRange` reads it (C `strtod`: "" and "(" are 0, leading spaces are skipped).
fn score_bound(arg: &[u8]) -> Option<(f64, bool)> {
    match arg.strip_prefix(b"(") {
        Some(rest) => parse_strtod(rest).map(|v| (v, true)),
        None => parse_strtod(arg).map(|v| (v, false)),
    }
}

/// A bound of the order index: (score, member), members compared as bytes.
type Key = (Score, Vec<u8>);

/// The index range holding exactly the scores between `lo` and `hi` (each `(value,
/// exclusive)`), or `None` when it is empty. Every member of score `s` sorts at or after
/// `(s, [])`, so "scores >= s" starts at `(s, [])` and "scores > s" at `(next_up(s), [])`.
fn seek_bounds(lo: (f64, bool), hi: (f64, bool)) -> Option<(Bound<Key>, Bound<Key>)> {
    let start = if lo.1 { next_up(lo.0)? } else { lo.0 };
    let end = if hi.1 { Some(hi.0) } else { next_up(hi.0) };
    let end_bound = match end {
        Some(end) => {
            // An empty or inverted range: BTreeSet::range would panic on start > end.
            if Score(start) >= Score(end) {
                return None;
            }
            Bound::Excluded((Score(end), Vec::new()))
        }
        None => Bound::Unbounded,
    };
    Some((Bound::Included((Score(start), Vec::new())), end_bound))
}

/// The smallest double above `x`; `None` above `+inf` (and for NaN, which no score is).
fn next_up(x: f64) -> Option<f64> {
    if x.is_nan() || x == f64::INFINITY {
        return None;
    }
    if x == 0.0 {
        return Some(f64::from_bits(1));
    }
    let bits = x.to_bits();
    Some(f64::from_bits(if x > 0.0 { bits + 1 } else { bits - 1 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_up_steps_one_double() {
        assert_eq!(next_up(1.0), Some(1.0 + f64::EPSILON));
        assert_eq!(next_up(-1.0), Some(-1.0 + f64::EPSILON / 2.0));
        assert_eq!(next_up(0.0), Some(f64::from_bits(1)));
        assert_eq!(next_up(-0.0), Some(f64::from_bits(1)));
        assert_eq!(next_up(-f64::from_bits(1)), Some(-0.0));
        assert_eq!(next_up(f64::NEG_INFINITY), Some(f64::MIN));
        assert_eq!(next_up(f64::MAX), Some(f64::INFINITY));
        assert_eq!(next_up(f64::INFINITY), None);
    }

    /// The seek finds exactly the members a full walk with the bound tests finds, for every
    /// pair of bounds over scores with ties, zeros of both signs and infinities.
    #[test]
    fn seek_equals_filter() {
        let scores = [
            f64::NEG_INFINITY,
            -2.5,
            -1.0,
            -0.0,
            0.0,
            1.0,
            1.0,
            3.0,
            f64::INFINITY,
        ];
        let index: super::super::keyspace::ZIndex = scores
            .iter()
            .enumerate()
            .map(|(i, &s)| (Score(s), vec![b'a' + i as u8]))
            .collect();
        let bounds = [
            f64::NEG_INFINITY,
            -1.0,
            -0.0,
            0.0,
            0.5,
            1.0,
            3.0,
            f64::INFINITY,
        ];
        for &l in &bounds {
            for &h in &bounds {
                for lx in [false, true] {
                    for hx in [false, true] {
                        let inside = |s: f64| {
                            (if lx { s > l } else { s >= l }) && (if hx { s < h } else { s <= h })
                        };
                        let expected: Vec<&Key> = index.iter().filter(|k| inside(k.0 .0)).collect();
                        let got: Vec<&Key> = match seek_bounds((l, lx), (h, hx)) {
                            Some(range) => index.range(range).collect(),
                            None => Vec::new(),
                        };
                        assert_eq!(got, expected, "{l} ({lx}) .. {h} ({hx})");
                    }
                }
            }
        }
    }
}
