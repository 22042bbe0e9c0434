//! Sorted-set commands beyond issue 6's: ZCOUNT, ZMSCORE, ZRANK, ZREVRANK, ZREVRANGE,
//! ZPOPMAX, ZREMRANGEBYSCORE, ZREMRANGEBYRANK, ZRANDMEMBER, ZSCAN, ZMPOP, on the member table
//! and its volatile order index (`keyspace::ZIndex`). Redis 7.0's checks in its order, its
//! replies and error texts.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, format_f64, parse_i64, CommandId as Id, Reply};

use super::commands::{
    bulk, clamp_range, container, ctx_random, drop_if_empty, eq, err, err_owned, int,
    remove_members, scored_reply, wrong_arity, wrongtype,
};
use super::dict::{self, tag};
use super::glob;
use super::keyspace::{Ctx, Score, WrongType, SEED};
use super::score_range;
use super::store::Result;

/// Runs one of this module's commands.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    match spec.id {
        Id::Zcount => zcount(ctx, a),
        Id::Zmscore => {
            let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
                return Ok(Reply::Array(
                    a[2..].iter().map(|_| Reply::NullBulk).collect(),
                ));
            };
            let mut out = Vec::with_capacity(a.len() - 2);
            for member in &a[2..] {
                out.push(match dict::find(ctx.tx, d, SEED, member)? {
                    Some(f) => Reply::Double(f.entry.score()),
                    None => Reply::NullBulk,
                });
            }
            Ok(Reply::Array(out))
        }
        Id::Zrank => zrank(ctx, a, false),
        Id::Zrevrank => zrank(ctx, a, true),
        Id::Zrevrange => {
            // The legacy form takes WITHSCORES only.
            if a[4..].iter().any(|o| !eq(o, "withscores")) {
                return Ok(err(errors::SYNTAX));
            }
            let mut args = vec![Bytes::from_static(b"ZRANGE")];
            args.extend_from_slice(&a[1..4]);
            args.push(Bytes::from_static(b"REV"));
            args.extend_from_slice(&a[4..]);
            super::commands::zrange(ctx, &args)
        }
        Id::Zpopmax => super::commands::zpop(ctx, spec, a, true),
        Id::Zremrangebyscore => zremrange(ctx, a, true),
        Id::Zremrangebyrank => zremrange(ctx, a, false),
        Id::Zrandmember => zrandmember(ctx, a),
        Id::Zscan => zscan(ctx, a),
        Id::Zmpop => zmpop(ctx, a),
        Id::Zrangebylex => rangebylex(ctx, a, false),
        Id::Zrangestore => zrangestore(ctx, a),
        Id::Zrevrangebylex => rangebylex(ctx, a, true),
        Id::Zlexcount => lex_count(ctx, a, false),
        Id::Zremrangebylex => lex_count(ctx, a, true),
        Id::Zunion => combine(ctx, spec, a, 1, None, Combine::Union),
        Id::Zinter => combine(ctx, spec, a, 1, None, Combine::Inter),
        Id::Zdiff => combine(ctx, spec, a, 1, None, Combine::Diff),
        Id::Zintercard => combine(ctx, spec, a, 1, None, Combine::InterCard),
        Id::Zunionstore => combine(ctx, spec, a, 2, Some(&a[1]), Combine::Union),
        Id::Zinterstore => combine(ctx, spec, a, 2, Some(&a[1]), Combine::Inter),
        Id::Zdiffstore => combine(ctx, spec, a, 2, Some(&a[1]), Combine::Diff),
        _ => Ok(wrong_arity(spec)),
    }
}

fn zcount(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some((lo, hi)) = score_range::parse(&a[2], &a[3]) else {
        return Ok(err(errors::MIN_MAX_NOT_FLOAT));
    };
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::Integer(0));
    };
    let n = score_range::members_between(ctx, d, lo, hi)?.len();
    Ok(int(n as u64))
}

fn zrank(ctx: &mut Ctx<'_, '_>, a: &[Bytes], rev: bool) -> Result<Reply> {
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::NullBulk);
    };
    let Some(f) = dict::find(ctx.tx, d, SEED, &a[2])? else {
        return Ok(Reply::NullBulk);
    };
    let key = (Score(f.entry.score()), a[2].to_vec());
    let index = ctx.zindex(d)?;
    let below = index.range(..&key).count();
    Ok(int(if rev {
        (index.len() - below - 1) as u64
    } else {
        below as u64
    }))
}

/// ZREMRANGEBYSCORE (`by_score`) and ZREMRANGEBYRANK: the range is read first, then the key.
fn zremrange(ctx: &mut Ctx<'_, '_>, a: &[Bytes], by_score: bool) -> Result<Reply> {
    let bounds = if by_score {
        match score_range::parse(&a[2], &a[3]) {
            Some(b) => Ok(b),
            None => return Ok(err(errors::MIN_MAX_NOT_FLOAT)),
        }
    } else {
        match (parse_i64(&a[2]), parse_i64(&a[3])) {
            (Some(start), Some(stop)) => Err((start, stop)),
            _ => return Ok(err(errors::NOT_INTEGER)),
        }
    };
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::Integer(0));
    };
    let victims: Vec<Bytes> = match bounds {
        Ok((lo, hi)) => score_range::members_between(ctx, d, lo, hi)?
            .into_iter()
            .map(|(_, m)| Bytes::from(m))
            .collect(),
        Err((start, stop)) => {
            let index = ctx.zindex(d)?;
            match clamp_range(start, stop, index.len() as u64) {
                Some((s, e)) => index
                    .iter()
                    .skip(s as usize)
                    .take((e - s + 1) as usize)
                    .map(|(_, m)| Bytes::from(m.clone()))
                    .collect(),
                None => Vec::new(),
            }
        }
    };
    let n = remove_members(ctx, d, &victims, true)?;
    drop_if_empty(ctx, &a[1], d)?;
    Ok(int(n))
}

fn zrandmember(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let mut with_scores = false;
    let count = match a.get(2) {
        None => None,
        Some(arg) => {
            let n = match parse_i64(arg) {
                None => return Ok(err(errors::NOT_INTEGER)),
                Some(i64::MIN) => {
                    return Ok(err_owned(format!(
                        "ERR value is out of range, value must between {} and {}",
                        -i64::MAX,
                        i64::MAX
                    )))
                }
                Some(n) => n,
            };
            match a.get(3) {
                None if a.len() == 3 => {}
                Some(opt) if a.len() == 4 && eq(opt, "withscores") => {
                    with_scores = true;
                    if !(-i64::MAX / 2..=i64::MAX / 2).contains(&n) {
                        return Ok(err("ERR value is out of range"));
                    }
                }
                _ => return Ok(err(errors::SYNTAX)),
            }
            Some(n)
        }
    };
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(match count {
            None => Reply::NullBulk,
            Some(_) => Reply::Array(Vec::new()),
        });
    };
    let Some(n) = count else {
        let mut rng = || ctx_random(ctx.rng);
        return Ok(match dict::random(ctx.tx, d, &mut rng)? {
            Some(f) => bulk(f.entry.key(ctx.tx)?),
            None => Reply::NullBulk,
        });
    };
    let mut entries = Vec::new();
    dict::for_each(ctx.tx, d, |e| {
        entries.push(*e);
        Ok(true)
    })?;
    let mut picked = Vec::new();
    if n < 0 {
        for _ in 0..n.unsigned_abs() {
            if entries.is_empty() {
                break;
            }
            let i = (ctx_random(ctx.rng) % entries.len() as u64) as usize;
            picked.push(entries[i]);
        }
    } else {
        let take = (n as u64).min(entries.len() as u64) as usize;
        for i in 0..take {
            let j = i + (ctx_random(ctx.rng) % (entries.len() - i) as u64) as usize;
            entries.swap(i, j);
        }
        picked.extend_from_slice(&entries[..take]);
    }
    let mut items = Vec::with_capacity(picked.len());
    for e in picked {
        items.push((e.score(), e.key(ctx.tx)?));
    }
    Ok(scored_reply(items, with_scores, ctx.resp3))
}

/// ZSCAN: like SSCAN, members with their scores as strings; a set Redis would keep in a
/// listpack comes back whole.
fn zscan(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(cursor) = super::commands::scan_cursor(&a[2]) else {
        return Ok(err(errors::INVALID_CURSOR));
    };
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(b"0")),
            Reply::Array(Vec::new()),
        ]));
    };
    let (mut pattern, mut count): (Option<&[u8]>, u64) = (None, 10);
    let mut i = 3;
    while i < a.len() {
        if i + 1 >= a.len() {
            return Ok(err(errors::SYNTAX));
        }
        if eq(&a[i], "match") {
            pattern = Some(&a[i + 1][..]).filter(|p| *p != b"*");
        } else if eq(&a[i], "count") {
            let Some(n) = parse_i64(&a[i + 1]) else {
                return Ok(err(errors::NOT_INTEGER));
            };
            if n < 1 {
                return Ok(err(errors::SYNTAX));
            }
            count = n as u64;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 2;
    }
    let size = dict::Header::read(ctx.tx, d)?.count;
    let mut compact = size <= 128;
    let mut entries = Vec::new();
    dict::for_each(ctx.tx, d, |e| {
        compact &= e.key_len <= 64;
        entries.push(*e);
        Ok(true)
    })?;
    let mut next = 0;
    if !compact {
        entries.clear();
        next = cursor;
        let mut visits = count.saturating_mul(super::limits::SCAN_VISITS_PER_COUNT);
        loop {
            next = dict::scan(ctx.tx, d, next, |e| {
                entries.push(*e);
                Ok(())
            })?;
            visits = visits.saturating_sub(1);
            if next == 0 || entries.len() as u64 >= count || visits == 0 {
                break;
            }
        }
    }
    let mut found = Vec::new();
    for e in entries {
        let key = e.key(ctx.tx)?;
        if pattern.is_none_or(|p| glob::matches(p, &key)) {
            found.push(bulk(key));
            found.push(Reply::Bulk(Bytes::from(format_f64(e.score()))));
        }
    }
    Ok(Reply::Array(vec![
        bulk(next.to_string().into_bytes()),
        Reply::Array(found),
    ]))
}

fn zmpop(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let numkeys = match parse_i64(&a[1]) {
        Some(n) if n >= 1 => n as usize,
        _ => return Ok(err("ERR numkeys should be greater than 0")),
    };
    let Some(where_at) = numkeys.checked_add(2).filter(|&w| w < a.len()) else {
        return Ok(err(errors::SYNTAX));
    };
    let max = if eq(&a[where_at], "max") {
        true
    } else if eq(&a[where_at], "min") {
        false
    } else {
        return Ok(err(errors::SYNTAX));
    };
    let mut count = None;
    let mut i = where_at + 1;
    while i < a.len() {
        if count.is_none() && eq(&a[i], "count") && i + 1 < a.len() {
            match parse_i64(&a[i + 1]) {
                Some(n) if n >= 1 => count = Some(n as u64),
                _ => return Ok(err("ERR count should be greater than 0")),
            }
            i += 2;
        } else {
            return Ok(err(errors::SYNTAX));
        }
    }
    let count = count.unwrap_or(1);
    for key in &a[2..where_at] {
        let d = match container(ctx, key, tag::ZSET, false)? {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(WrongType) => return Ok(wrongtype()),
        };
        let popped = super::commands::pop_members(ctx, d, count, max)?;
        if popped.is_empty() {
            continue;
        }
        drop_if_empty(ctx, key, d)?;
        let pairs = popped
            .into_iter()
            .map(|(score, member)| Reply::Array(vec![bulk(member), Reply::Double(score)]))
            .collect();
        return Ok(Reply::Array(vec![
            Reply::Bulk(key.clone()),
            Reply::Array(pairs),
        ]));
    }
    Ok(Reply::NullArray)
}

/// How ZUNION and ZINTER combine a member's scores.
#[derive(Clone, Copy, PartialEq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Which of the combining commands runs.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Combine {
    Union,
    Inter,
    Diff,
    /// ZINTERCARD: the intersection's size only.
    InterCard,
}

/// ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD: `at` is the position of
/// numkeys; `store` the destination. Sources may be sorted sets or sets (score 1). Redis
/// 7.0's order: numkeys, then the keys (WRONGTYPE), then the options.
pub(super) fn combine(
    ctx: &mut Ctx<'_, '_>,
    spec: &'static CommandSpec,
    a: &[Bytes],
    at: usize,
    store: Option<&Bytes>,
    op: Combine,
) -> Result<Reply> {
    let Some(numkeys) = parse_i64(&a[at]) else {
        return Ok(err(errors::NOT_INTEGER));
    };
    if numkeys < 1 {
        return Ok(err_owned(format!(
            "ERR at least 1 input key is needed for '{}' command",
            spec.name
        )));
    }
    let numkeys = numkeys as usize;
    if numkeys > a.len() - at - 1 {
        return Ok(err(errors::SYNTAX));
    }
    // The sources: Some((table, is_zset)) or None for a missing key.
    let mut sources = Vec::with_capacity(numkeys);
    for key in &a[at + 1..at + 1 + numkeys] {
        match ctx.lookup(key)? {
            None => sources.push(None),
            Some(f) if f.entry.tag == tag::ZSET => sources.push(Some((f.entry.val, true))),
            Some(f) if f.entry.tag == tag::SET => sources.push(Some((f.entry.val, false))),
            Some(_) => return Ok(wrongtype()),
        }
    }
    let mut weights = vec![1.0f64; numkeys];
    let mut aggregate = Aggregate::Sum;
    let (mut with_scores, mut limit) = (false, 0u64);
    let card = op == Combine::InterCard;
    let mut j = at + 1 + numkeys;
    while j < a.len() {
        let remaining = a.len() - j;
        if op != Combine::Diff && !card && remaining > numkeys && eq(&a[j], "weights") {
            for (i, weight) in weights.iter_mut().enumerate() {
                match super::strings::valid_float(&a[j + 1 + i]) {
                    Some(w) => *weight = w,
                    None => return Ok(err("ERR weight value is not a float")),
                }
            }
            j += 1 + numkeys;
        } else if op != Combine::Diff && !card && remaining >= 2 && eq(&a[j], "aggregate") {
            aggregate = if eq(&a[j + 1], "sum") {
                Aggregate::Sum
            } else if eq(&a[j + 1], "min") {
                Aggregate::Min
            } else if eq(&a[j + 1], "max") {
                Aggregate::Max
            } else {
                return Ok(err(errors::SYNTAX));
            };
            j += 2;
        } else if store.is_none() && !card && eq(&a[j], "withscores") {
            with_scores = true;
            j += 1;
        } else if card && remaining >= 2 && eq(&a[j], "limit") {
            match parse_i64(&a[j + 1]) {
                Some(n) if n >= 0 => limit = n as u64,
                _ => return Ok(err("ERR LIMIT can't be negative")),
            }
            j += 2;
        } else {
            return Ok(err(errors::SYNTAX));
        }
    }
    // Every source's members with their weighted scores (NaN counts as 0, as in Redis).
    let mut members: Vec<Option<std::collections::HashMap<Vec<u8>, f64>>> = Vec::new();
    for (i, source) in sources.iter().enumerate() {
        members.push(match source {
            None => None,
            Some((d, zset)) => {
                let mut map = std::collections::HashMap::new();
                let weight = weights[i];
                let zset = *zset;
                dict::for_each(ctx.tx, *d, |e| {
                    let score = if zset { e.score() } else { 1.0 };
                    let weighted = weight * score;
                    map.insert(
                        e.key(ctx.tx)?,
                        if weighted.is_nan() { 0.0 } else { weighted },
                    );
                    Ok(true)
                })?;
                Some(map)
            }
        });
    }
    let combine = |acc: f64, v: f64| match aggregate {
        Aggregate::Sum => {
            let sum = acc + v;
            if sum.is_nan() {
                0.0
            } else {
                sum
            }
        }
        Aggregate::Min => acc.min(v),
        Aggregate::Max => acc.max(v),
    };
    let mut result: Vec<(f64, Vec<u8>)> = Vec::new();
    match op {
        Combine::Union => {
            let mut all: std::collections::HashMap<Vec<u8>, f64> = std::collections::HashMap::new();
            for map in members.iter().flatten() {
                for (member, &score) in map {
                    all.entry(member.clone())
                        .and_modify(|acc| *acc = combine(*acc, score))
                        .or_insert(score);
                }
            }
            result.extend(all.into_iter().map(|(m, s)| (s, m)));
        }
        Combine::Inter | Combine::InterCard => {
            if members.iter().all(Option::is_some) {
                let maps: Vec<&std::collections::HashMap<Vec<u8>, f64>> =
                    members.iter().flatten().collect();
                let smallest = (0..maps.len()).min_by_key(|&i| maps[i].len()).unwrap_or(0);
                for (member, _) in maps[smallest].iter() {
                    let mut score: Option<f64> = None;
                    let mut everywhere = true;
                    for map in &maps {
                        match map.get(member) {
                            Some(&s) => score = Some(score.map_or(s, |acc| combine(acc, s))),
                            None => {
                                everywhere = false;
                                break;
                            }
                        }
                    }
                    if let (true, Some(score)) = (everywhere, score) {
                        result.push((score, member.clone()));
                        if card && limit != 0 && result.len() as u64 >= limit {
                            break;
                        }
                    }
                }
            }
        }
        Combine::Diff => {
            if let Some(Some(first)) = members.first() {
                for (member, &score) in first {
                    if !members[1..]
                        .iter()
                        .flatten()
                        .any(|m| m.contains_key(member))
                    {
                        result.push((score, member.clone()));
                    }
                }
            }
        }
    }
    if card {
        return Ok(int(result.len() as u64));
    }
    result.sort_by(|x, y| Score(x.0).cmp(&Score(y.0)).then_with(|| x.1.cmp(&y.1)));
    let Some(target) = store else {
        return Ok(scored_reply(result, with_scores, ctx.resp3));
    };
    if let Some(f) = ctx.lookup_write(target)? {
        ctx.delete(&f)?;
    }
    if result.is_empty() {
        return Ok(Reply::Integer(0));
    }
    let d = ctx.create_container(target, tag::ZSET)?;
    for (score, member) in &result {
        super::commands::zset_score(ctx, d, member, *score)?;
    }
    Ok(int(result.len() as u64))
}

/// A bound of a lexicographic range: `-`, `+`, `[member` (inclusive), `(member` (exclusive).
#[derive(Clone, Debug)]
enum Lex {
    Min,
    Max,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

fn lex_bound(arg: &[u8]) -> Option<Lex> {
    match arg.split_first() {
        Some((b'-', [])) => Some(Lex::Min),
        Some((b'+', [])) => Some(Lex::Max),
        Some((b'[', rest)) => Some(Lex::Inclusive(rest.to_vec())),
        Some((b'(', rest)) => Some(Lex::Exclusive(rest.to_vec())),
        _ => None,
    }
}

/// Whether `member` lies at or above `min` and at or below `max`.
fn in_lex(member: &[u8], min: &Lex, max: &Lex) -> bool {
    let above = match min {
        Lex::Min => true,
        Lex::Max => false,
        Lex::Inclusive(m) => member >= m.as_slice(),
        Lex::Exclusive(m) => member > m.as_slice(),
    };
    let below = match max {
        Lex::Min => false,
        Lex::Max => true,
        Lex::Inclusive(m) => member <= m.as_slice(),
        Lex::Exclusive(m) => member < m.as_slice(),
    };
    above && below
}

/// The members of the sorted set `d` in the lex range, in index order (Redis's lex ranges
/// assume every member has the same score; then that order is the members' byte order).
fn lex_members(ctx: &mut Ctx<'_, '_>, d: u64, min: &Lex, max: &Lex) -> Result<Vec<Vec<u8>>> {
    Ok(ctx
        .zindex(d)?
        .iter()
        .filter(|(_, m)| in_lex(m, min, max))
        .map(|(_, m)| m.clone())
        .collect())
}

/// ZRANGE ... BYLEX, ZRANGEBYLEX and ZREVRANGEBYLEX: the range is read first, then the key.
pub(super) fn by_lex(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    min: &[u8],
    max: &[u8],
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Result<Reply> {
    let (Some(min), Some(max)) = (lex_bound(min), lex_bound(max)) else {
        return Ok(err(errors::LEX_RANGE_INVALID));
    };
    let Some(d) = container!(ctx, key, tag::ZSET, false) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let mut members = lex_members(ctx, d, &min, &max)?;
    if rev {
        members.reverse();
    }
    let (offset, count) = limit.unwrap_or((0, -1));
    let Ok(offset) = usize::try_from(offset) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let take = usize::try_from(count).unwrap_or(usize::MAX);
    Ok(Reply::Array(
        members
            .into_iter()
            .skip(offset)
            .take(take)
            .map(bulk)
            .collect(),
    ))
}

/// ZRANGEBYLEX key min max [LIMIT offset count] and ZREVRANGEBYLEX (max first).
fn rangebylex(ctx: &mut Ctx<'_, '_>, a: &[Bytes], rev: bool) -> Result<Reply> {
    let (mut limit, mut with_scores) = (None, false);
    let mut i = 4;
    while i < a.len() {
        if eq(&a[i], "withscores") {
            with_scores = true;
            i += 1;
        } else if eq(&a[i], "limit") && i + 2 < a.len() {
            let (Some(offset), Some(count)) = (parse_i64(&a[i + 1]), parse_i64(&a[i + 2])) else {
                return Ok(err(errors::NOT_INTEGER));
            };
            limit = Some((offset, count));
            i += 3;
        } else {
            return Ok(err(errors::SYNTAX));
        }
    }
    if with_scores {
        return Ok(err(errors::ZRANGE_BYLEX_WITHSCORES));
    }
    let (min, max) = if rev { (&a[3], &a[2]) } else { (&a[2], &a[3]) };
    by_lex(ctx, &a[1], min, max, rev, limit)
}

/// ZLEXCOUNT and ZREMRANGEBYLEX (`remove`).
fn lex_count(ctx: &mut Ctx<'_, '_>, a: &[Bytes], remove: bool) -> Result<Reply> {
    let (Some(min), Some(max)) = (lex_bound(&a[2]), lex_bound(&a[3])) else {
        return Ok(err(errors::LEX_RANGE_INVALID));
    };
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::Integer(0));
    };
    let members = lex_members(ctx, d, &min, &max)?;
    if !remove {
        return Ok(int(members.len() as u64));
    }
    let victims: Vec<Bytes> = members.into_iter().map(Bytes::from).collect();
    let n = remove_members(ctx, d, &victims, true)?;
    drop_if_empty(ctx, &a[1], d)?;
    Ok(int(n))
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]: ZRANGE's
/// selection (without WITHSCORES, which it refuses) written to `dst` with the members'
/// scores; an empty selection deletes `dst`.
fn zrangestore(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    if a[5..].iter().any(|o| eq(o, "withscores")) {
        return Ok(err(errors::SYNTAX));
    }
    let mut args = vec![Bytes::from_static(b"ZRANGE")];
    args.extend_from_slice(&a[2..]);
    let resp3 = std::mem::replace(&mut ctx.resp3, false);
    let selected = super::commands::zrange(ctx, &args);
    ctx.resp3 = resp3;
    let members = match selected? {
        Reply::Array(items) => items,
        other => return Ok(other),
    };
    let mut items = Vec::with_capacity(members.len());
    if let Some(source) = container!(ctx, &a[2], tag::ZSET, false) {
        for member in members {
            let Reply::Bulk(member) = member else {
                continue;
            };
            if let Some(f) = dict::find(ctx.tx, source, SEED, &member)? {
                items.push((f.entry.score(), member.to_vec()));
            }
        }
    }
    if let Some(f) = ctx.lookup_write(&a[1])? {
        ctx.delete(&f)?;
    }
    if items.is_empty() {
        return Ok(Reply::Integer(0));
    }
    let d = ctx.create_container(&a[1], tag::ZSET)?;
    for (score, member) in &items {
        super::commands::zset_score(ctx, d, member, *score)?;
    }
    Ok(int(items.len() as u64))
}
