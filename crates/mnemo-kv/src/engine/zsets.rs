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
