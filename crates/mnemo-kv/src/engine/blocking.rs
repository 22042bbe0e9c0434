//! The blocking pops: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP.
//!
//! The engine serves one at once when a key has elements ([`try_serve`]); otherwise it tells
//! the server to park the request until its deadline (`Effect::block`), and the server runs
//! it again after every batch that wrote and when the deadline passes (`server/net.rs`).
//! Inside EXEC, and through `PersistentEngine::execute_args`, nothing blocks: an empty
//! source answers the timeout's null at once, as Redis does inside MULTI.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_i64, CommandId as Id, Reply};

use super::commands::{bulk, container, eq, err, pop_members, wrongtype};
use super::dict::tag;
use super::keyspace::{Ctx, WrongType};
use super::list;
use super::store::Result;

/// Whether `id` is a blocking command.
pub fn is_blocking(id: Id) -> bool {
    matches!(
        id,
        Id::Blpop
            | Id::Brpop
            | Id::Blmove
            | Id::Brpoplpush
            | Id::Blmpop
            | Id::Bzpopmin
            | Id::Bzpopmax
            | Id::Bzmpop
    )
}

/// The argument position of the timeout.
fn timeout_at(spec: &'static CommandSpec, a: &[Bytes]) -> usize {
    match spec.id {
        Id::Blmpop | Id::Bzmpop => 1,
        _ => a.len() - 1,
    }
}

/// The command's arguments checked before its timeout (BLMOVE's directions): an error reply.
fn check_before_timeout(spec: &'static CommandSpec, a: &[Bytes]) -> Option<Reply> {
    if spec.id == Id::Blmove
        && [&a[3], &a[4]]
            .iter()
            .any(|arg| !eq(arg, "left") && !eq(arg, "right"))
    {
        return Some(err(errors::SYNTAX));
    }
    None
}

/// The timeout in milliseconds (0: wait for ever), or the error reply, as Redis 7.0 reads
/// it: seconds as a float, rounded up to the millisecond.
pub fn timeout_ms(spec: &'static CommandSpec, a: &[Bytes]) -> std::result::Result<i64, Reply> {
    if let Some(reply) = check_before_timeout(spec, a) {
        return Err(reply);
    }
    let arg = &a[timeout_at(spec, a)];
    let seconds = super::strings::valid_float(arg)
        .ok_or_else(|| err("ERR timeout is not a float or out of range"))?;
    let ms = (seconds * 1000.0).ceil();
    if !(0.0..9.2e18).contains(&ms) {
        return Err(err("ERR timeout is negative"));
    }
    Ok(ms as i64)
}

/// The reply when the timeout passes with nothing to pop: a null array, as Redis 7.0 answers
/// every timed-out blocked client.
pub fn timeout_reply() -> Reply {
    Reply::NullArray
}

/// The reply when nothing may block (inside EXEC) and there is nothing to pop: BLMOVE and
/// BRPOPLPUSH answer a null bulk there, the others a null array.
pub fn empty_reply(spec: &'static CommandSpec) -> Reply {
    match spec.id {
        Id::Blmove | Id::Brpoplpush => Reply::NullBulk,
        _ => Reply::NullArray,
    }
}

/// Serves the command now if one of its keys has elements: `Some(reply)` (errors included),
/// or `None` when it must wait.
pub fn try_serve(
    ctx: &mut Ctx<'_, '_>,
    spec: &'static CommandSpec,
    a: &[Bytes],
) -> Result<Option<Reply>> {
    match spec.id {
        Id::Blpop | Id::Brpop => {
            let left = spec.id == Id::Blpop;
            for key in &a[1..a.len() - 1] {
                let found = match super::keyspace::typed(ctx.lookup_write(key)?, tag::LIST) {
                    Ok(found) => found,
                    Err(WrongType) => return Ok(Some(wrongtype())),
                };
                let Some(f) = found else { continue };
                let Some(value) = list::pop(ctx.tx, f.entry.val, left)? else {
                    continue;
                };
                if list::Header::read(ctx.tx, f.entry.val)?.len == 0 {
                    if let Some(f) = ctx.lookup_write(key)? {
                        ctx.delete(&f)?;
                    }
                }
                return Ok(Some(Reply::Array(vec![
                    Reply::Bulk(key.clone()),
                    bulk(value),
                ])));
            }
            Ok(None)
        }
        Id::Blmove | Id::Brpoplpush => {
            match super::keyspace::typed(ctx.lookup_write(&a[1])?, tag::LIST) {
                Err(WrongType) => return Ok(Some(wrongtype())),
                Ok(None) => return Ok(None),
                Ok(Some(_)) => {}
            }
            let lmove = mnemo_resp::command::lookup(b"lmove").unwrap_or(spec);
            let args: Vec<Bytes> = if spec.id == Id::Blmove {
                a[..5].to_vec()
            } else {
                vec![
                    Bytes::from_static(b"LMOVE"),
                    a[1].clone(),
                    a[2].clone(),
                    Bytes::from_static(b"RIGHT"),
                    Bytes::from_static(b"LEFT"),
                ]
            };
            super::lists::run(ctx, lmove, &args).map(Some)
        }
        Id::Blmpop => {
            let lmpop = mnemo_resp::command::lookup(b"lmpop").unwrap_or(spec);
            let mut args = vec![Bytes::from_static(b"LMPOP")];
            args.extend_from_slice(&a[2..]);
            match super::lists::run(ctx, lmpop, &args)? {
                Reply::NullArray => Ok(None),
                other => Ok(Some(other)),
            }
        }
        Id::Bzpopmin | Id::Bzpopmax => {
            let max = spec.id == Id::Bzpopmax;
            for key in &a[1..a.len() - 1] {
                let d = match container(ctx, key, tag::ZSET, false)? {
                    Ok(Some(d)) => d,
                    Ok(None) => continue,
                    Err(WrongType) => return Ok(Some(wrongtype())),
                };
                let popped = pop_members(ctx, d, 1, max)?;
                let Some((score, member)) = popped.into_iter().next() else {
                    continue;
                };
                super::commands::drop_if_empty(ctx, key, d)?;
                return Ok(Some(Reply::Array(vec![
                    Reply::Bulk(key.clone()),
                    bulk(member),
                    Reply::Double(score),
                ])));
            }
            Ok(None)
        }
        Id::Bzmpop => {
            let zmpop = mnemo_resp::command::lookup(b"zmpop").unwrap_or(spec);
            let mut args = vec![Bytes::from_static(b"ZMPOP")];
            args.extend_from_slice(&a[2..]);
            match super::zsets::run(ctx, zmpop, &args)? {
                Reply::NullArray => Ok(None),
                other => Ok(Some(other)),
            }
        }
        _ => Ok(Some(super::commands::wrong_arity(spec))),
    }
}

/// The blocking command run without blocking (EXEC, a retry after an early commit): served
/// now, or the timeout's null.
pub fn run_now(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    if let Err(reply) = timeout_ms(spec, a) {
        return Ok(reply);
    }
    Ok(try_serve(ctx, spec, a)?.unwrap_or_else(|| empty_reply(spec)))
}

/// LMPOP/BLMPOP's and BZMPOP's keys start after numkeys; for WATCH.
pub fn numkeys(a: &[Bytes]) -> usize {
    a.get(2)
        .and_then(|n| parse_i64(n))
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}
