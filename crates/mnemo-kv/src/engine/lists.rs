//! List commands beyond issue 6's: LPUSHX, RPUSHX, LSET, LTRIM, LREM, LINSERT, LPOS, LMOVE,
//! RPOPLPUSH, LMPOP (the blocking forms are not here yet). Redis 7.0's checks in its order,
//! its replies and error texts.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_i64, CommandId as Id, Reply};

use super::commands::{bulk, eq, err, err_owned, int, wrong_arity, wrongtype};
use super::dict::{tag, Found};
use super::keyspace::{Ctx, WrongType};
use super::list;
use super::store::{self, Result};

/// Runs one of this module's commands.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    match spec.id {
        Id::Lpushx => pushx(ctx, a, true),
        Id::Rpushx => pushx(ctx, a, false),
        Id::Lset => lset(ctx, a),
        Id::Ltrim => ltrim(ctx, a),
        Id::Lrem => lrem(ctx, a),
        Id::Linsert => linsert(ctx, a),
        Id::Lpos => lpos(ctx, a),
        Id::Lmove => {
            let (Some(from), Some(to)) = (side(&a[3]), side(&a[4])) else {
                return Ok(err(errors::SYNTAX));
            };
            lmove(ctx, &a[1], &a[2], from, to)
        }
        Id::Rpoplpush => lmove(ctx, &a[1], &a[2], false, true),
        Id::Lmpop => lmpop(ctx, a),
        _ => Ok(wrong_arity(spec)),
    }
}

/// LEFT (true) or RIGHT (false).
fn side(arg: &[u8]) -> Option<bool> {
    if eq(arg, "left") {
        Some(true)
    } else if eq(arg, "right") {
        Some(false)
    } else {
        None
    }
}

/// The live list at `key` for a write: `Ok(None)` if missing.
fn list_for_write(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
) -> Result<std::result::Result<Option<Found>, WrongType>> {
    Ok(super::keyspace::typed(ctx.lookup_write(key)?, tag::LIST))
}

/// Deletes `found` (a list key) if its list is now empty.
fn drop_if_empty(ctx: &mut Ctx<'_, '_>, found: &Found, key: &[u8]) -> Result<()> {
    if list::Header::read(ctx.tx, found.entry.val)?.len == 0 {
        // Found again: writes since the lookup may have moved its chain link.
        if let Some(f) = ctx.lookup_write(key)? {
            ctx.delete(&f)?;
        }
    }
    Ok(())
}

fn pushx(ctx: &mut Ctx<'_, '_>, a: &[Bytes], left: bool) -> Result<Reply> {
    let found = match list_for_write(ctx, &a[1])? {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(Reply::Integer(0)),
        Err(WrongType) => return Ok(wrongtype()),
    };
    let mut len = 0;
    for value in &a[2..] {
        len = list::push(ctx.tx, found.entry.val, left, value)?;
    }
    Ok(int(len))
}

fn lset(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let found = match list_for_write(ctx, &a[1])? {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(err(errors::NO_SUCH_KEY)),
        Err(WrongType) => return Ok(wrongtype()),
    };
    let Some(index) = parse_i64(&a[2]) else {
        return Ok(err(errors::NOT_INTEGER));
    };
    let l = found.entry.val;
    let len = i64::try_from(list::Header::read(ctx.tx, l)?.len).unwrap_or(i64::MAX);
    let at = if index < 0 { index + len } else { index };
    if !(0..len).contains(&at) {
        return Ok(err(errors::INDEX_OUT_OF_RANGE));
    }
    let e = list::new_value(ctx.tx, &a[3])?;
    let old = list::replace(ctx.tx, l, at as u64, e)?;
    store::free(ctx.tx, old)?;
    Ok(Reply::ok())
}

fn ltrim(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (Some(start), Some(end)) = (parse_i64(&a[2]), parse_i64(&a[3])) else {
        return Ok(err(errors::NOT_INTEGER));
    };
    let found = match list_for_write(ctx, &a[1])? {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(Reply::ok()),
        Err(WrongType) => return Ok(wrongtype()),
    };
    let l = found.entry.val;
    let len = i64::try_from(list::Header::read(ctx.tx, l)?.len).unwrap_or(i64::MAX);
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 { len + end } else { end };
    let (left, right) = if start > end || start >= len {
        (len, 0)
    } else {
        (start, len - end.min(len - 1) - 1)
    };
    for _ in 0..left {
        list::pop(ctx.tx, l, true)?;
    }
    for _ in 0..right {
        list::pop(ctx.tx, l, false)?;
    }
    drop_if_empty(ctx, &found, &a[1])?;
    Ok(Reply::ok())
}

fn lrem(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(count) = parse_i64(&a[2]) else {
        return Ok(err(errors::NOT_INTEGER));
    };
    let found = match list_for_write(ctx, &a[1])? {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(Reply::Integer(0)),
        Err(WrongType) => return Ok(wrongtype()),
    };
    let l = found.entry.val;
    let mut order = list::elements(ctx.tx, l)?;
    let limit = if count == 0 {
        u64::MAX
    } else {
        count.unsigned_abs()
    };
    let mut removed = Vec::new();
    let indexes: Vec<usize> = if count < 0 {
        (0..order.len()).rev().collect()
    } else {
        (0..order.len()).collect()
    };
    for i in indexes {
        if removed.len() as u64 >= limit {
            break;
        }
        if list::value(ctx.tx, order[i])? == a[3].as_ref() {
            removed.push(i);
        }
    }
    if removed.is_empty() {
        return Ok(Reply::Integer(0));
    }
    removed.sort_unstable();
    for &i in removed.iter().rev() {
        let e = order.remove(i);
        store::free(ctx.tx, e)?;
    }
    list::relayout(ctx.tx, l, &order)?;
    drop_if_empty(ctx, &found, &a[1])?;
    Ok(int(removed.len() as u64))
}

fn linsert(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let after = if eq(&a[2], "after") {
        true
    } else if eq(&a[2], "before") {
        false
    } else {
        return Ok(err(errors::SYNTAX));
    };
    let found = match list_for_write(ctx, &a[1])? {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(Reply::Integer(0)),
        Err(WrongType) => return Ok(wrongtype()),
    };
    let l = found.entry.val;
    let mut order = list::elements(ctx.tx, l)?;
    let mut pivot = None;
    for (i, &e) in order.iter().enumerate() {
        if list::value(ctx.tx, e)? == a[3].as_ref() {
            pivot = Some(i);
            break;
        }
    }
    let Some(i) = pivot else {
        return Ok(Reply::Integer(-1));
    };
    let e = list::new_value(ctx.tx, &a[4])?;
    order.insert(if after { i + 1 } else { i }, e);
    list::relayout(ctx.tx, l, &order)?;
    Ok(int(order.len() as u64))
}

/// A non-negative LPOS option, or its error (`what can't be negative`).
fn positive(arg: &[u8], what: &str) -> std::result::Result<u64, Reply> {
    parse_i64(arg)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| err_owned(format!("ERR {what} can't be negative")))
}

fn lpos(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (mut rank, mut count, mut maxlen): (i64, Option<u64>, u64) = (1, None, 0);
    let mut i = 3;
    while i < a.len() {
        let more = i + 1 < a.len();
        if eq(&a[i], "rank") && more {
            rank =
                match parse_i64(&a[i + 1]) {
                    None => return Ok(err(errors::NOT_INTEGER)),
                    Some(0) => return Ok(err(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                         second ... or use negative to start from the end of the list",
                    )),
                    Some(r) => r,
                };
        } else if eq(&a[i], "count") && more {
            count = match positive(&a[i + 1], "COUNT") {
                Ok(n) => Some(n),
                Err(reply) => return Ok(reply),
            };
        } else if eq(&a[i], "maxlen") && more {
            maxlen = match positive(&a[i + 1], "MAXLEN") {
                Ok(n) => n,
                Err(reply) => return Ok(reply),
            };
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 2;
    }
    let none = || match count {
        Some(_) => Reply::Array(Vec::new()),
        None => Reply::NullBulk,
    };
    let found = typed!(ctx, ctx.lookup(&a[1])?, tag::LIST);
    let Some(f) = found else {
        return Ok(none());
    };
    let order = list::elements(ctx.tx, f.entry.val)?;
    let len = order.len();
    // Redis 7.0 takes the absolute value of the rank in a C long: the most negative one
    // stays negative, and every match counts from the first (from the tail).
    let skip = if rank == i64::MIN {
        0
    } else {
        rank.unsigned_abs() - 1
    };
    let wanted = match count {
        Some(0) => u64::MAX,
        Some(n) => n,
        None => 1,
    };
    let mut matches = 0u64;
    let mut out = Vec::new();
    for step in 0..len {
        if maxlen != 0 && step as u64 >= maxlen {
            break;
        }
        let index = if rank < 0 { len - 1 - step } else { step };
        if list::value(ctx.tx, order[index])? == a[2].as_ref() {
            matches += 1;
            if matches > skip {
                out.push(Reply::Integer(index as i64));
                if out.len() as u64 >= wanted {
                    break;
                }
            }
        }
    }
    Ok(match count {
        Some(_) => Reply::Array(out),
        None => out.pop().unwrap_or_else(none),
    })
}

/// LMOVE and RPOPLPUSH: pops from `from`'s `left` or right end and pushes onto `to`'s.
fn lmove(
    ctx: &mut Ctx<'_, '_>,
    from: &[u8],
    to: &[u8],
    from_left: bool,
    to_left: bool,
) -> Result<Reply> {
    let source = match list_for_write(ctx, from)? {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(Reply::NullBulk),
        Err(WrongType) => return Ok(wrongtype()),
    };
    if list::Header::read(ctx.tx, source.entry.val)?.len == 0 {
        return Ok(Reply::NullBulk);
    }
    if super::keyspace::typed(ctx.lookup_write(to)?, tag::LIST).is_err() {
        return Ok(wrongtype());
    }
    let Some(value) = list::pop(ctx.tx, source.entry.val, from_left)? else {
        return Ok(Reply::NullBulk);
    };
    let target = match ctx.lookup_write(to)? {
        Some(f) => f.entry.val,
        None => ctx.create_container(to, tag::LIST)?,
    };
    list::push(ctx.tx, target, to_left, &value)?;
    drop_if_empty(ctx, &source, from)?;
    Ok(bulk(value))
}

fn lmpop(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let numkeys = match parse_i64(&a[1]) {
        Some(n) if n >= 1 => n as usize,
        _ => return Ok(err("ERR numkeys should be greater than 0")),
    };
    let Some(where_at) = numkeys.checked_add(2).filter(|&w| w < a.len()) else {
        return Ok(err(errors::SYNTAX));
    };
    let Some(left) = side(&a[where_at]) else {
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
        let found = match list_for_write(ctx, key)? {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(WrongType) => return Ok(wrongtype()),
        };
        let mut popped = Vec::new();
        for _ in 0..count {
            match list::pop(ctx.tx, found.entry.val, left)? {
                Some(v) => popped.push(bulk(v)),
                None => break,
            }
        }
        if popped.is_empty() {
            continue;
        }
        drop_if_empty(ctx, &found, key)?;
        return Ok(Reply::Array(vec![
            Reply::Bulk(key.clone()),
            Reply::Array(popped),
        ]));
    }
    Ok(Reply::NullArray)
}
