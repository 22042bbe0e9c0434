//! Hash and set commands beyond issue 6's: HSETNX, HINCRBYFLOAT, HSTRLEN, HKEYS, HVALS,
//! HRANDFIELD, HSCAN; SMISMEMBER, SRANDMEMBER, SMOVE, SINTER, SUNION, SDIFF (and their STORE
//! forms), SINTERCARD, SSCAN. Redis 7.0's checks in its order, its replies and error texts.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_i64, CommandId as Id, Reply};

use super::commands::{
    bulk, ctx_random, drop_if_empty, eq, err, err_owned, int, members, remove_members, wrongtype,
};
use super::dict::{self, tag, Value};
use super::glob;
use super::keyspace::{Ctx, WrongType, SEED};
use super::limits::{REHASH_BUCKETS_PER_OP, SCAN_VISITS_PER_COUNT};
use super::store::{self, Result};

/// Runs one of this module's commands.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    match spec.id {
        Id::Hsetnx => hsetnx(ctx, a),
        Id::Hincrbyfloat => hincrbyfloat(ctx, a),
        Id::Hstrlen => {
            let Some(d) = container!(ctx, &a[1], tag::HASH, false) else {
                return Ok(Reply::Integer(0));
            };
            Ok(int(
                dict::find(ctx.tx, d, SEED, &a[2])?.map_or(0, |f| f.entry.vlen)
            ))
        }
        Id::Hkeys | Id::Hvals => {
            let Some(d) = container!(ctx, &a[1], tag::HASH, false) else {
                return Ok(Reply::Array(Vec::new()));
            };
            let keys = spec.id == Id::Hkeys;
            let mut out = Vec::new();
            dict::for_each(ctx.tx, d, |e| {
                out.push(bulk(if keys {
                    e.key(ctx.tx)?
                } else {
                    e.string(ctx.tx)?
                }));
                Ok(true)
            })?;
            Ok(Reply::Array(out))
        }
        Id::Hrandfield => random_members(ctx, a, tag::HASH),
        Id::Srandmember => random_members(ctx, a, tag::SET),
        Id::Hscan => scan_container(ctx, a, tag::HASH),
        Id::Sscan => scan_container(ctx, a, tag::SET),
        Id::Smismember => {
            let Some(d) = container!(ctx, &a[1], tag::SET, false) else {
                return Ok(Reply::Array(
                    a[2..].iter().map(|_| Reply::Integer(0)).collect(),
                ));
            };
            let mut out = Vec::with_capacity(a.len() - 2);
            for member in &a[2..] {
                let found = dict::find(ctx.tx, d, SEED, member)?.is_some();
                out.push(Reply::Integer(i64::from(found)));
            }
            Ok(Reply::Array(out))
        }
        Id::Smove => smove(ctx, a),
        Id::Sinter => combine(ctx, &a[1..], None, Op::Inter),
        Id::Sunion => combine(ctx, &a[1..], None, Op::Union),
        Id::Sdiff => combine(ctx, &a[1..], None, Op::Diff),
        Id::Sinterstore => combine(ctx, &a[2..], Some(&a[1]), Op::Inter),
        Id::Sunionstore => combine(ctx, &a[2..], Some(&a[1]), Op::Union),
        Id::Sdiffstore => combine(ctx, &a[2..], Some(&a[1]), Op::Diff),
        Id::Sintercard => sintercard(ctx, a),
        _ => Ok(super::commands::wrong_arity(spec)),
    }
}

fn hsetnx(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(d) = container!(ctx, &a[1], tag::HASH, true) else {
        return Ok(Reply::Integer(0));
    };
    if ctx.step_find(d, &a[2])?.is_some() {
        return Ok(Reply::Integer(0));
    }
    ctx.put_string_in(d, tag::STRING, &a[2], None, &a[3], None, false)?;
    Ok(Reply::Integer(1))
}

fn hincrbyfloat(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(by) = super::strings::valid_float(&a[3]) else {
        return Ok(err(errors::NOT_FLOAT));
    };
    if by.is_infinite() {
        return Ok(err("ERR value is NaN or Infinity"));
    }
    let existing = container!(ctx, &a[1], tag::HASH, false);
    let current = match existing {
        Some(d) => match dict::find(ctx.tx, d, SEED, &a[2])? {
            Some(f) => Some(f.entry.string(ctx.tx)?),
            None => None,
        },
        None => None,
    };
    let text = current.clone().unwrap_or_else(|| b"0".to_vec());
    let Some(value) = super::strings::valid_float(&text) else {
        return Ok(err("ERR hash value is not a float"));
    };
    let sum = value + by;
    if !sum.is_finite() {
        return Ok(err(errors::INCR_NOT_FINITE));
    }
    let result =
        super::decimal::add(&text, &a[3]).unwrap_or_else(|| super::strings::format_float(sum));
    let Some(d) = container!(ctx, &a[1], tag::HASH, true) else {
        return Ok(Reply::NullBulk);
    };
    let found = ctx.step_find(d, &a[2])?;
    ctx.put_string_in(
        d,
        tag::STRING,
        &a[2],
        found.as_ref(),
        result.as_bytes(),
        None,
        false,
    )?;
    Ok(Reply::Bulk(Bytes::from(result)))
}

/// The count argument of HRANDFIELD and SRANDMEMBER: -LONG_MAX..=LONG_MAX.
fn random_count(arg: &[u8]) -> std::result::Result<i64, Reply> {
    match parse_i64(arg) {
        None => Err(err(errors::NOT_INTEGER)),
        Some(i64::MIN) => Err(err_owned(format!(
            "ERR value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        ))),
        Some(n) => Ok(n),
    }
}

/// HRANDFIELD key [count [WITHVALUES]] and SRANDMEMBER key [count]: without a count one
/// random member (or null); a positive count that many distinct members at most; a negative
/// count that many, possibly repeated.
fn random_members(ctx: &mut Ctx<'_, '_>, a: &[Bytes], t: u8) -> Result<Reply> {
    let hash = t == tag::HASH;
    let mut with_values = false;
    let count = match a.get(2) {
        None => None,
        Some(arg) => {
            let n = match random_count(arg) {
                Ok(n) => n,
                Err(reply) => return Ok(reply),
            };
            match a.get(3) {
                None if a.len() == 3 => {}
                Some(opt) if hash && a.len() == 4 && eq(opt, "withvalues") => {
                    with_values = true;
                    if !(-i64::MAX / 2..=i64::MAX / 2).contains(&n) {
                        return Ok(err("ERR value is out of range"));
                    }
                }
                _ => return Ok(err(errors::SYNTAX)),
            }
            Some(n)
        }
    };
    let Some(d) = container!(ctx, &a[1], t, false) else {
        return Ok(match count {
            None => Reply::NullBulk,
            Some(_) => Reply::Array(Vec::new()),
        });
    };
    let size = dict::Header::read(ctx.tx, d)?.count;
    let item = |ctx: &mut Ctx<'_, '_>, e: &dict::Entry| -> Result<Reply> {
        let key = bulk(e.key(ctx.tx)?);
        if !with_values {
            return Ok(key);
        }
        // A pair; RESP2 flattens the pairs below.
        Ok(Reply::Array(vec![key, bulk(e.string(ctx.tx)?)]))
    };
    let Some(n) = count else {
        let mut rng = || ctx_random(ctx.rng);
        return Ok(match dict::random(ctx.tx, d, &mut rng)? {
            Some(f) => bulk(f.entry.key(ctx.tx)?),
            None => Reply::NullBulk,
        });
    };
    let mut picked = Vec::new();
    if n < 0 {
        for _ in 0..n.unsigned_abs() {
            let mut rng = || ctx_random(ctx.rng);
            match dict::random(ctx.tx, d, &mut rng)? {
                Some(f) => picked.push(item(ctx, &f.entry)?),
                None => break,
            }
        }
    } else if n as u64 >= size {
        let mut entries = Vec::new();
        dict::for_each(ctx.tx, d, |e| {
            entries.push(*e);
            Ok(true)
        })?;
        for e in entries {
            picked.push(item(ctx, &e)?);
        }
    } else {
        // Distinct members: sample entries, skipping repeats (n < size, so this ends; a
        // partial shuffle of all offsets bounds the work for n close to size).
        let mut entries = Vec::new();
        dict::for_each(ctx.tx, d, |e| {
            entries.push(*e);
            Ok(true)
        })?;
        for i in 0..n as usize {
            let j = i + (ctx_random(ctx.rng) % (entries.len() - i) as u64) as usize;
            entries.swap(i, j);
        }
        for e in entries.iter().take(n as usize) {
            picked.push(item(ctx, e)?);
        }
    }
    if with_values && !ctx.resp3 {
        // RESP2: field, value, field, value...
        let flat = picked
            .into_iter()
            .flat_map(|pair| match pair {
                Reply::Array(items) => items,
                other => vec![other],
            })
            .collect();
        return Ok(Reply::Array(flat));
    }
    Ok(Reply::Array(picked))
}

/// Whether Redis 7.0 would keep a container of `t` with these entries in a compact
/// encoding (listpack, intset), which SSCAN / HSCAN return whole in one call.
fn compact(ctx: &mut Ctx<'_, '_>, d: u64, t: u8) -> Result<bool> {
    let count = dict::Header::read(ctx.tx, d)?.count;
    let mut small = if t == tag::SET {
        count <= 512
    } else {
        count <= 128
    };
    if small {
        dict::for_each(ctx.tx, d, |e| {
            small = if t == tag::SET {
                parse_i64(&e.key(ctx.tx)?).is_some()
            } else {
                e.key_len <= 64 && e.vlen <= 64
            };
            Ok(small)
        })?;
    }
    Ok(small)
}

/// HSCAN and SSCAN: the cursor is read first, then the key (missing: an empty scan), then
/// MATCH and COUNT. A container Redis would keep compact comes back whole with cursor 0, as
/// Redis does; a larger one by buckets, like SCAN.
fn scan_container(ctx: &mut Ctx<'_, '_>, a: &[Bytes], t: u8) -> Result<Reply> {
    let Some(cursor) = super::commands::scan_cursor(&a[2]) else {
        return Ok(err(errors::INVALID_CURSOR));
    };
    let empty = || {
        Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(b"0")),
            Reply::Array(Vec::new()),
        ])
    };
    let Some(d) = container!(ctx, &a[1], t, false) else {
        return Ok(empty());
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
    let hash = t == tag::HASH;
    let mut found = Vec::new();
    let take = |ctx: &Ctx<'_, '_>, e: &dict::Entry, found: &mut Vec<Reply>| -> Result<()> {
        let key = e.key(ctx.tx)?;
        if pattern.is_none_or(|p| glob::matches(p, &key)) {
            let value = if hash { Some(e.string(ctx.tx)?) } else { None };
            found.push(bulk(key));
            if let Some(value) = value {
                found.push(bulk(value));
            }
        }
        Ok(())
    };
    let mut next = 0;
    if compact(ctx, d, t)? {
        let mut entries = Vec::new();
        dict::for_each(ctx.tx, d, |e| {
            entries.push(*e);
            Ok(true)
        })?;
        for e in &entries {
            take(ctx, e, &mut found)?;
        }
    } else {
        next = cursor;
        let mut visits = count.saturating_mul(SCAN_VISITS_PER_COUNT);
        let mut entries = Vec::new();
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
        for e in &entries {
            take(ctx, e, &mut found)?;
        }
    }
    Ok(Reply::Array(vec![
        bulk(next.to_string().into_bytes()),
        Reply::Array(found),
    ]))
}

fn smove(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (from, to, member) = (&a[1], &a[2], &a[3]);
    let source = ctx.lookup_write(from)?;
    let target = ctx.lookup_write(to)?;
    let Some(source) = source else {
        return Ok(Reply::Integer(0));
    };
    if source.entry.tag != tag::SET || target.is_some_and(|f| f.entry.tag != tag::SET) {
        return Ok(wrongtype());
    }
    let d = source.entry.val;
    if from == to {
        return Ok(Reply::Integer(i64::from(
            dict::find(ctx.tx, d, SEED, member)?.is_some(),
        )));
    }
    if remove_members(ctx, d, std::slice::from_ref(member), false)? == 0 {
        return Ok(Reply::Integer(0));
    }
    drop_if_empty(ctx, from, d)?;
    let Some(target) = container!(ctx, to, tag::SET, true) else {
        return Ok(Reply::Integer(0));
    };
    add_member(ctx, target, member)?;
    Ok(Reply::Integer(1))
}

/// Adds `member` to the set table `d` if absent; true if it was added.
fn add_member(ctx: &mut Ctx<'_, '_>, d: u64, member: &[u8]) -> Result<bool> {
    if dict::step_find(ctx.tx, d, REHASH_BUCKETS_PER_OP, SEED, member)?.is_some() {
        return Ok(false);
    }
    let hash = store::hash(SEED, member);
    let e = dict::new_entry(ctx.tx, tag::MEMBER, member, hash, 0, Value::None)?;
    dict::insert_stepped(ctx.tx, d, e, hash)?;
    Ok(true)
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The sets at `keys` (missing keys as `None`), or WRONGTYPE at the first key of another
/// type, as Redis checks them in order.
fn sets(
    ctx: &mut Ctx<'_, '_>,
    keys: &[Bytes],
) -> Result<std::result::Result<Vec<Option<u64>>, WrongType>> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        match super::keyspace::typed(ctx.lookup(key)?, tag::SET) {
            Ok(found) => out.push(found.map(|f| f.entry.val)),
            Err(w) => return Ok(Err(w)),
        }
    }
    Ok(Ok(out))
}

/// SINTER, SUNION, SDIFF, and with `store` their STORE forms (the result replaces the
/// destination, which is deleted if the result is empty; the reply is its size).
fn combine(ctx: &mut Ctx<'_, '_>, keys: &[Bytes], store: Option<&Bytes>, op: Op) -> Result<Reply> {
    let sets = match sets(ctx, keys)? {
        Ok(sets) => sets,
        Err(WrongType) => return Ok(wrongtype()),
    };
    let result: Vec<Vec<u8>> = match op {
        Op::Inter if sets.iter().any(Option::is_none) => Vec::new(),
        Op::Inter => {
            // Walk the smallest set, probe the others.
            let mut tables: Vec<u64> = sets.iter().flatten().copied().collect();
            let mut sizes = Vec::with_capacity(tables.len());
            for &d in &tables {
                sizes.push(dict::Header::read(ctx.tx, d)?.count);
            }
            let smallest = (0..tables.len()).min_by_key(|&i| sizes[i]).unwrap_or(0);
            let first = tables.swap_remove(smallest);
            let mut out = Vec::new();
            for member in members(ctx, first)? {
                let mut everywhere = true;
                for &d in &tables {
                    if dict::find(ctx.tx, d, SEED, &member)?.is_none() {
                        everywhere = false;
                        break;
                    }
                }
                if everywhere {
                    out.push(member);
                }
            }
            out
        }
        Op::Union => {
            let mut seen = std::collections::HashSet::new();
            for d in sets.iter().flatten() {
                for member in members(ctx, *d)? {
                    seen.insert(member);
                }
            }
            seen.into_iter().collect()
        }
        Op::Diff => match sets.first().copied().flatten() {
            None => Vec::new(),
            Some(first) => {
                let mut out = Vec::new();
                for member in members(ctx, first)? {
                    let mut elsewhere = false;
                    for d in sets[1..].iter().flatten() {
                        if dict::find(ctx.tx, *d, SEED, &member)?.is_some() {
                            elsewhere = true;
                            break;
                        }
                    }
                    if !elsewhere {
                        out.push(member);
                    }
                }
                out
            }
        },
    };
    let Some(target) = store else {
        return Ok(Reply::Set(result.into_iter().map(bulk).collect()));
    };
    if let Some(f) = ctx.lookup_write(target)? {
        ctx.delete(&f)?;
    }
    if result.is_empty() {
        return Ok(Reply::Integer(0));
    }
    let d = ctx.create_container(target, tag::SET)?;
    for member in &result {
        add_member(ctx, d, member)?;
    }
    Ok(int(result.len() as u64))
}

fn sintercard(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let numkeys = match parse_i64(&a[1]) {
        Some(n) if n >= 1 => n as usize,
        _ => return Ok(err("ERR numkeys should be greater than 0")),
    };
    if numkeys > a.len() - 2 {
        return Ok(err(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let mut limit = 0u64;
    let mut i = 2 + numkeys;
    while i < a.len() {
        if eq(&a[i], "limit") && i + 1 < a.len() {
            match parse_i64(&a[i + 1]) {
                Some(n) if n >= 0 => limit = n as u64,
                _ => return Ok(err("ERR LIMIT can't be negative")),
            }
            i += 2;
        } else {
            return Ok(err(errors::SYNTAX));
        }
    }
    let sets = match sets(ctx, &a[2..2 + numkeys])? {
        Ok(sets) => sets,
        Err(WrongType) => return Ok(wrongtype()),
    };
    if sets.iter().any(Option::is_none) {
        return Ok(Reply::Integer(0));
    }
    let tables: Vec<u64> = sets.into_iter().flatten().collect();
    let mut count = 0u64;
    for member in members(ctx, tables[0])? {
        let mut everywhere = true;
        for &d in &tables[1..] {
            if dict::find(ctx.tx, d, SEED, &member)?.is_none() {
                everywhere = false;
                break;
            }
        }
        if everywhere {
            count += 1;
            if limit != 0 && count >= limit {
                break;
            }
        }
    }
    Ok(int(count))
}
