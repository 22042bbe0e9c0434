//! The data commands: argument parsing and validation first, then the mutation, so a command
//! that fails with WRONGTYPE or a syntax error leaves the keyspace as it found it.

use std::collections::HashMap;

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_f64, parse_i64, BulkMap, CommandError, CommandId as Id, Reply};

use super::dict::{self, entry_field, tag, Value};
use super::glob;
use super::keyspace::{Ctx, Score, WrongType, SEED};
use super::limits::{SCAN_VISITS_PER_COUNT, VALUE_BYTES_MAX};
use super::list;
use super::store::{self, Result};

pub(crate) fn err(text: &'static str) -> Reply {
    Reply::Error(Bytes::from_static(text.as_bytes()))
}

pub(crate) fn err_owned(text: String) -> Reply {
    Reply::Error(Bytes::from(text))
}

/// Redis's error for a name it does not know.
fn unknown_command(args: &[Bytes]) -> Reply {
    Reply::Error(Bytes::from(
        CommandError::unknown_command(args).reply_text(),
    ))
}

/// The arity error of a command whose arguments the table's arity cannot fully check (MSET and
/// HSET pairs, LPOP's count).
pub(super) fn wrong_arity(spec: &'static CommandSpec) -> Reply {
    Reply::Error(Bytes::from(
        CommandError::WrongArity {
            full_name: spec.name,
        }
        .reply_text(),
    ))
}

pub(super) fn wrongtype() -> Reply {
    err(errors::WRONG_TYPE)
}

pub(super) fn bulk(v: Vec<u8>) -> Reply {
    Reply::Bulk(Bytes::from(v))
}

pub(super) fn int(v: u64) -> Reply {
    Reply::Integer(i64::try_from(v).unwrap_or(i64::MAX))
}

/// Unwraps a typed lookup or replies WRONGTYPE.
macro_rules! typed {
    ($ctx:expr, $found:expr, $tag:expr) => {
        match super::keyspace::typed($found, $tag) {
            Ok(found) => found,
            Err(WrongType) => return Ok(wrongtype()),
        }
    };
}

/// Parses an integer argument or replies NOT_INTEGER.
macro_rules! integer {
    ($arg:expr) => {
        match parse_i64($arg) {
            Some(v) => v,
            None => return Ok(err(errors::NOT_INTEGER)),
        }
    };
}

pub(super) fn eq(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Runs one data command: `spec` is its entry in mnemo-resp's table, found and checked
/// (arity) by the caller.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, args: &[Bytes]) -> Result<Reply> {
    let a = args;
    match spec.id {
        Id::Get => get(ctx, &a[1]),
        Id::Set => set(ctx, spec, a),
        Id::Getset => getset(ctx, &a[1], &a[2]),
        Id::Append => append(ctx, &a[1], &a[2]),
        Id::Strlen => strlen(ctx, &a[1]),
        Id::Incr => incr(ctx, &a[1], 1),
        Id::Decr => incr(ctx, &a[1], -1),
        Id::Incrby => Ok(match parse_i64(&a[2]) {
            Some(by) => return incr(ctx, &a[1], by),
            None => err(errors::NOT_INTEGER),
        }),
        Id::Decrby => Ok(match parse_i64(&a[2]) {
            Some(i64::MIN) => err("ERR decrement would overflow"),
            Some(by) => return incr(ctx, &a[1], -by),
            None => err(errors::NOT_INTEGER),
        }),
        Id::Mget => mget(ctx, &a[1..]),
        Id::Mset => mset(ctx, spec, a),
        Id::Del => del(ctx, &a[1..]),
        Id::Exists => exists(ctx, &a[1..]),
        Id::Expire => expire(ctx, a, 1000, false, spec.name),
        Id::Pexpire => expire(ctx, a, 1, false, spec.name),
        Id::Ttl => ttl(ctx, &a[1], false),
        Id::Pttl => ttl(ctx, &a[1], true),
        Id::Persist => persist(ctx, &a[1]),
        Id::Type => Ok(Reply::Simple(Bytes::from_static(
            super::keyspace::type_name(ctx.lookup(&a[1])?.map_or(0, |f| f.entry.tag)).as_bytes(),
        ))),
        Id::Keys => keys(ctx, &a[1]),
        Id::Scan => scan(ctx, a),
        Id::Dbsize => Ok(int(dict::Header::read(ctx.tx, ctx.keyspace()?)?.count)),
        Id::Flushall | Id::Flushdb => flush(ctx, spec, a),
        Id::Lpush => push(ctx, a, true),
        Id::Rpush => push(ctx, a, false),
        Id::Lpop => pop(ctx, spec, a, true),
        Id::Rpop => pop(ctx, spec, a, false),
        Id::Lrange => lrange(ctx, a),
        Id::Llen => llen(ctx, &a[1]),
        Id::Lindex => lindex(ctx, a),
        Id::Sadd => sadd(ctx, a),
        Id::Srem => srem(ctx, a),
        Id::Smembers => smembers(ctx, &a[1]),
        Id::Scard => card(ctx, &a[1], tag::SET),
        Id::Sismember => sismember(ctx, &a[1], &a[2]),
        Id::Spop => spop(ctx, spec, a),
        Id::Hset | Id::Hmset => hset(ctx, spec, a),
        Id::Hget => hget(ctx, &a[1], &a[2]),
        Id::Hgetall => hgetall(ctx, &a[1]),
        Id::Hmget => super::score_range::hmget(ctx, a),
        Id::Hdel => hdel(ctx, a),
        Id::Hlen => card(ctx, &a[1], tag::HASH),
        Id::Hexists => hexists(ctx, &a[1], &a[2]),
        Id::Hincrby => hincrby(ctx, a),
        Id::Zadd => zadd(ctx, a, false),
        Id::Zscore => zscore(ctx, &a[1], &a[2]),
        Id::Zincrby => zadd(ctx, a, true),
        Id::Zcard => card(ctx, &a[1], tag::ZSET),
        Id::Zrem => zrem(ctx, a),
        Id::Zrange => zrange(ctx, a),
        Id::Zrangebyscore => super::score_range::zrangebyscore(ctx, a, false),
        Id::Zrevrangebyscore => super::score_range::zrangebyscore(ctx, a, true),
        Id::Zpopmin => zpop(ctx, spec, a, false),
        Id::Blpop
        | Id::Brpop
        | Id::Blmove
        | Id::Brpoplpush
        | Id::Blmpop
        | Id::Bzpopmin
        | Id::Bzpopmax
        | Id::Bzmpop => super::blocking::run_now(ctx, spec, a),
        Id::Zcount
        | Id::Zmscore
        | Id::Zrank
        | Id::Zrevrank
        | Id::Zrevrange
        | Id::Zpopmax
        | Id::Zremrangebyscore
        | Id::Zremrangebyrank
        | Id::Zrandmember
        | Id::Zscan
        | Id::Zmpop
        | Id::Zunion
        | Id::Zinter
        | Id::Zdiff
        | Id::Zintercard
        | Id::Zunionstore
        | Id::Zinterstore
        | Id::Zdiffstore
        | Id::Zrangebylex
        | Id::Zrevrangebylex
        | Id::Zlexcount
        | Id::Zremrangebylex
        | Id::Zrangestore => super::zsets::run(ctx, spec, a),
        Id::Setnx
        | Id::Setex
        | Id::Psetex
        | Id::Getex
        | Id::Getdel
        | Id::Incrbyfloat
        | Id::Setrange
        | Id::Getrange
        | Id::Substr
        | Id::Msetnx
        | Id::Expireat
        | Id::Pexpireat
        | Id::Expiretime
        | Id::Pexpiretime
        | Id::Rename
        | Id::Renamenx
        | Id::Copy
        | Id::Move
        | Id::Swapdb
        | Id::ObjectEncoding
        | Id::ObjectRefcount
        | Id::ObjectFreq
        | Id::ObjectIdletime
        | Id::ObjectHelp
        | Id::Randomkey
        | Id::Touch
        | Id::Setbit
        | Id::Getbit
        | Id::Bitcount
        | Id::Bitpos
        | Id::Bitop
        | Id::Lcs => super::strings::run(ctx, spec, a),
        Id::Sort | Id::SortRo => super::sort::run(ctx, spec, a),
        Id::Dump => super::dump::dump(ctx, &a[1]),
        Id::Migrate => super::migrate::migrate(ctx, a),
        Id::Geoadd | Id::Geodist | Id::Geohash | Id::Geopos => super::geo::run(ctx, spec, a),
        Id::Georadius
        | Id::GeoradiusRo
        | Id::Georadiusbymember
        | Id::GeoradiusbymemberRo
        | Id::Geosearch
        | Id::Geosearchstore => super::geo::radius(ctx, spec, a),
        Id::Pfadd | Id::Pfcount | Id::Pfmerge | Id::Pfdebug | Id::Pfselftest => {
            super::hyperloglog::run(ctx, spec, a)
        }
        Id::Restore | Id::RestoreAsking => super::dump::restore(ctx, spec, a),
        Id::Bitfield | Id::BitfieldRo => super::bitfield::run(ctx, spec, a),
        Id::Unlink => del(ctx, &a[1..]),
        Id::Hsetnx
        | Id::Hincrbyfloat
        | Id::Hstrlen
        | Id::Hkeys
        | Id::Hvals
        | Id::Hrandfield
        | Id::Hscan
        | Id::Smismember
        | Id::Srandmember
        | Id::Smove
        | Id::Sinter
        | Id::Sinterstore
        | Id::Sunion
        | Id::Sunionstore
        | Id::Sdiff
        | Id::Sdiffstore
        | Id::Sintercard
        | Id::Sscan => super::collections::run(ctx, spec, a),
        Id::Lpushx
        | Id::Rpushx
        | Id::Lset
        | Id::Ltrim
        | Id::Lrem
        | Id::Linsert
        | Id::Lpos
        | Id::Lmove
        | Id::Rpoplpush
        | Id::Lmpop => super::lists::run(ctx, spec, a),
        // Not data commands: the engine answers PING, ECHO, SELECT, SHUTDOWN, INFO and CONFIG
        // itself (`PersistentEngine::run_command`), the session the others (connection state),
        // which the engine does not know.
        Id::Ping
        | Id::Echo
        | Id::Select
        | Id::Multi
        | Id::Exec
        | Id::Discard
        | Id::Watch
        | Id::Unwatch
        | Id::Lastsave
        | Id::Reset
        | Id::Role
        | Id::Subscribe
        | Id::Psubscribe
        | Id::Unsubscribe
        | Id::Punsubscribe
        | Id::Publish
        | Id::Pubsub
        | Id::PubsubChannels
        | Id::PubsubNumpat
        | Id::PubsubNumsub
        | Id::PubsubShardchannels
        | Id::PubsubShardnumsub
        | Id::Spublish
        | Id::Ssubscribe
        | Id::Sunsubscribe
        | Id::Save
        | Id::Bgsave
        | Id::Function
        | Id::FunctionFlush
        | Id::FunctionList
        | Id::Time
        | Id::Object
        | Id::Shutdown
        | Id::Info
        | Id::Config
        | Id::ConfigGet
        | Id::ConfigHelp
        | Id::ConfigResetstat
        | Id::ConfigRewrite
        | Id::ConfigSet
        | Id::Auth
        | Id::Hello
        | Id::Quit
        | Id::Client
        | Id::ClientGetname
        | Id::ClientId
        | Id::ClientInfo
        | Id::ClientSetinfo
        | Id::ClientSetname
        | Id::Command
        | Id::CommandCount
        | Id::CommandDocs
        | Id::CommandInfo
        | Id::CommandList
        | Id::CommandGetkeys
        | Id::ClientNoEvict
        | Id::ClientReply
        | Id::ClientGetredir
        | Id::ClientTrackinginfo
        | Id::ClientCaching
        | Id::Slowlog
        | Id::SlowlogGet
        | Id::SlowlogHelp
        | Id::SlowlogLen
        | Id::SlowlogReset
        | Id::Latency
        | Id::LatencyDoctor
        | Id::LatencyGraph
        | Id::LatencyHelp
        | Id::LatencyHistogram
        | Id::LatencyHistory
        | Id::LatencyLatest
        | Id::LatencyReset
        | Id::Memory
        | Id::MemoryDoctor
        | Id::MemoryHelp
        | Id::MemoryMallocStats
        | Id::MemoryPurge
        | Id::MemoryStats
        | Id::MemoryUsage
        | Id::Module
        | Id::ModuleHelp
        | Id::ModuleList
        | Id::ModuleLoad
        | Id::ModuleLoadex
        | Id::ModuleUnload
        | Id::Acl
        | Id::AclCat
        | Id::AclGenpass
        | Id::AclLog
        | Id::AclUsers
        | Id::AclWhoami
        | Id::Wait
        | Id::Readonly
        | Id::Readwrite
        | Id::Asking
        | Id::Cluster
        | Id::Replicaof
        | Id::Slaveof
        | Id::Failover
        | Id::Bgrewriteaof
        | Id::Debug
        | Id::Lolwut
        | Id::Eval
        | Id::EvalRo
        | Id::Evalsha
        | Id::EvalshaRo
        | Id::Script
        | Id::ScriptExists
        | Id::ScriptFlush
        | Id::ScriptHelp
        | Id::ScriptKill
        | Id::ScriptLoad
        | Id::ClientKill
        | Id::ClientList
        | Id::ClientPause
        | Id::ClientUnpause => Ok(unknown_command(args)),
    }
}

// ---- strings ----

fn get(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup(key)?, tag::STRING);
    Ok(match found {
        Some(f) => bulk(f.entry.string(ctx.tx)?),
        None => Reply::NullBulk,
    })
}

/// Milliseconds from an EX/PX-style argument, or the error reply.
pub(super) fn expire_at(
    ctx: &Ctx<'_, '_>,
    arg: &[u8],
    unit: i64,
    absolute: bool,
    cmd: &str,
) -> std::result::Result<i64, Reply> {
    let v = parse_i64(arg).ok_or_else(|| err(errors::NOT_INTEGER))?;
    let invalid = || err_owned(errors::invalid_expire_time(cmd));
    if v <= 0 {
        return Err(invalid());
    }
    let ms = v.checked_mul(unit).ok_or_else(invalid)?;
    if absolute {
        Ok(ms)
    } else {
        ms.checked_add(ctx.now).ok_or_else(invalid)
    }
}

fn set(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    let (mut nx, mut xx, mut get, mut keep) = (false, false, false, false);
    let mut expire: Option<i64> = None;
    let mut i = 3;
    while i < a.len() {
        let opt = &a[i];
        let has_next = i + 1 < a.len();
        if eq(opt, "nx") && !xx {
            nx = true;
        } else if eq(opt, "xx") && !nx {
            xx = true;
        } else if eq(opt, "get") {
            get = true;
        } else if eq(opt, "keepttl") && expire.is_none() {
            keep = true;
        } else if (eq(opt, "ex") || eq(opt, "px") || eq(opt, "exat") || eq(opt, "pxat"))
            && expire.is_none()
            && !keep
            && has_next
        {
            let unit = if eq(opt, "ex") || eq(opt, "exat") {
                1000
            } else {
                1
            };
            let absolute = opt.len() == 4;
            match expire_at(ctx, &a[i + 1], unit, absolute, spec.name) {
                Ok(at) => expire = Some(at),
                Err(reply) => return Ok(reply),
            }
            i += 1;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 1;
    }
    let key = &a[1];
    let found = ctx.lookup_write(key)?;
    if get && found.as_ref().is_some_and(|f| f.entry.tag != tag::STRING) {
        return Ok(wrongtype());
    }
    let old = match (&found, get) {
        (Some(f), true) => bulk(f.entry.string(ctx.tx)?),
        _ => Reply::NullBulk,
    };
    if (nx && found.is_some()) || (xx && found.is_none()) {
        return Ok(if get { old } else { Reply::NullBulk });
    }
    let new_expire = if keep {
        None
    } else {
        Some(expire.unwrap_or(0))
    };
    if let Some(at) = expire {
        if at <= ctx.now {
            // Already in the past (EXAT/PXAT): Redis deletes the key.
            if let Some(f) = &found {
                ctx.delete(f)?;
            }
            return Ok(if get { old } else { Reply::ok() });
        }
    }
    ctx.put_string(key, found.as_ref(), &a[2], new_expire)?;
    Ok(if get { old } else { Reply::ok() })
}

fn getset(ctx: &mut Ctx<'_, '_>, key: &[u8], value: &[u8]) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup_write(key)?, tag::STRING);
    let old = match &found {
        Some(f) => bulk(f.entry.string(ctx.tx)?),
        None => Reply::NullBulk,
    };
    ctx.put_string(key, found.as_ref(), value, Some(0))?;
    Ok(old)
}

fn append(ctx: &mut Ctx<'_, '_>, key: &[u8], tail: &[u8]) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup_write(key)?, tag::STRING);
    Ok(match found {
        Some(f) => {
            if f.entry.vlen + tail.len() as u64 > VALUE_BYTES_MAX {
                return Ok(err(errors::STRING_TOO_LONG));
            }
            int(ctx.append(&f, tail)?)
        }
        None => {
            ctx.put_string(key, None, tail, Some(0))?;
            int(tail.len() as u64)
        }
    })
}

fn strlen(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup(key)?, tag::STRING);
    Ok(int(found.map_or(0, |f| f.entry.vlen)))
}

fn incr(ctx: &mut Ctx<'_, '_>, key: &[u8], by: i64) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup_write(key)?, tag::STRING);
    let current = match &found {
        Some(f) => {
            let v = f.entry.string(ctx.tx)?;
            match parse_i64(&v) {
                Some(n) => n,
                None => return Ok(err(errors::NOT_INTEGER)),
            }
        }
        None => 0,
    };
    let Some(next) = current.checked_add(by) else {
        return Ok(err(errors::OVERFLOW));
    };
    let mut text = Vec::with_capacity(20);
    mnemo_resp::write_i64(&mut text, next);
    ctx.put_string(key, found.as_ref(), &text, None)?;
    Ok(Reply::Integer(next))
}

fn mget(ctx: &mut Ctx<'_, '_>, keys: &[Bytes]) -> Result<Reply> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        out.push(match ctx.lookup(key)? {
            Some(f) if f.entry.tag == tag::STRING => bulk(f.entry.string(ctx.tx)?),
            _ => Reply::NullBulk,
        });
    }
    Ok(Reply::Array(out))
}

fn mset(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    if a.len() % 2 == 0 {
        return Ok(wrong_arity(spec));
    }
    for pair in a[1..].chunks_exact(2) {
        let found = ctx.lookup_write(&pair[0])?;
        ctx.put_string(&pair[0], found.as_ref(), &pair[1], Some(0))?;
    }
    Ok(Reply::ok())
}

// ---- keys ----

fn del(ctx: &mut Ctx<'_, '_>, keys: &[Bytes]) -> Result<Reply> {
    let mut n = 0;
    for key in keys {
        if let Some(f) = ctx.lookup_write(key)? {
            ctx.delete(&f)?;
            n += 1;
        }
    }
    Ok(int(n))
}

fn exists(ctx: &mut Ctx<'_, '_>, keys: &[Bytes]) -> Result<Reply> {
    let mut n = 0;
    for key in keys {
        if ctx.lookup(key)?.is_some() {
            n += 1;
        }
    }
    Ok(int(n))
}

/// EXPIRE, PEXPIRE (relative: `absolute` false) and EXPIREAT, PEXPIREAT.
pub(super) fn expire(
    ctx: &mut Ctx<'_, '_>,
    a: &[Bytes],
    unit: i64,
    absolute: bool,
    cmd: &str,
) -> Result<Reply> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &a[3..] {
        if eq(opt, "nx") {
            nx = true;
        } else if eq(opt, "xx") {
            xx = true;
        } else if eq(opt, "gt") {
            gt = true;
        } else if eq(opt, "lt") {
            lt = true;
        } else {
            return Ok(err_owned(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if nx && (xx || gt || lt) {
        return Ok(err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Ok(err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let v = integer!(&a[2]);
    let invalid = || err_owned(errors::invalid_expire_time(cmd));
    let base = if absolute { 0 } else { ctx.now };
    let Some(at) = v.checked_mul(unit).and_then(|ms| ms.checked_add(base)) else {
        return Ok(invalid());
    };
    let Some(f) = ctx.lookup_write(&a[1])? else {
        return Ok(Reply::Integer(0));
    };
    let current = f.entry.expire;
    let blocked = (nx && current != 0)
        || (xx && current == 0)
        || (gt && (current == 0 || at <= current))
        || (lt && current != 0 && at >= current);
    if blocked {
        return Ok(Reply::Integer(0));
    }
    if at <= ctx.now {
        ctx.delete(&f)?;
    } else {
        ctx.set_expire(&f.entry, at)?;
    }
    Ok(Reply::Integer(1))
}

fn ttl(ctx: &mut Ctx<'_, '_>, key: &[u8], ms: bool) -> Result<Reply> {
    Ok(Reply::Integer(match ctx.lookup(key)? {
        None => -2,
        Some(f) if f.entry.expire == 0 => -1,
        Some(f) => {
            let left = f.entry.expire.saturating_sub(ctx.now).max(0);
            if ms {
                left
            } else {
                left.saturating_add(500) / 1000
            }
        }
    }))
}

fn persist(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    Ok(match ctx.lookup_write(key)? {
        Some(f) if f.entry.expire != 0 => {
            ctx.set_expire(&f.entry, 0)?;
            Reply::Integer(1)
        }
        _ => Reply::Integer(0),
    })
}

fn keys(ctx: &mut Ctx<'_, '_>, pattern: &[u8]) -> Result<Reply> {
    let ks = ctx.keyspace()?;
    let mut out = Vec::new();
    let all = pattern == b"*";
    let now = ctx.now;
    dict::for_each(ctx.tx, ks, |e| {
        if e.expire == 0 || e.expire > now {
            let key = e.key(ctx.tx)?;
            if all || glob::matches(pattern, &key) {
                out.push(bulk(key));
            }
        }
        Ok(true)
    })?;
    Ok(Reply::Array(out))
}

/// A SCAN cursor as Redis reads it (`strtoul`): an optional sign, then decimal digits (none
/// at all is cursor 0); a minus sign wraps around ("-1" is the largest cursor); overflow and
/// anything else is invalid.
pub(super) fn scan_cursor(arg: &[u8]) -> Option<u64> {
    let (negative, digits) = match arg.first() {
        Some(b'-') => (true, &arg[1..]),
        Some(b'+') => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() {
        return (!negative && arg.is_empty()).then_some(0);
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

fn scan(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(cursor) = scan_cursor(&a[1]) else {
        return Ok(err(errors::INVALID_CURSOR));
    };
    let (mut pattern, mut count, mut kind): (Option<&[u8]>, u64, Option<&[u8]>) = (None, 10, None);
    let mut i = 2;
    while i < a.len() {
        if i + 1 >= a.len() {
            return Ok(err(errors::SYNTAX));
        }
        if eq(&a[i], "match") {
            pattern = Some(&a[i + 1])
                .filter(|p| p.as_ref() != b"*")
                .map(|p| &p[..]);
        } else if eq(&a[i], "count") {
            let n = integer!(&a[i + 1]);
            if n < 1 {
                return Ok(err(errors::SYNTAX));
            }
            count = n as u64;
        } else if eq(&a[i], "type") {
            kind = Some(&a[i + 1]);
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 2;
    }
    let ks = ctx.keyspace()?;
    let now = ctx.now;
    let mut found = Vec::new();
    let mut cursor = cursor;
    let mut visits = count.saturating_mul(SCAN_VISITS_PER_COUNT);
    loop {
        cursor = dict::scan(ctx.tx, ks, cursor, |e| {
            if e.expire != 0 && e.expire <= now {
                return Ok(());
            }
            if kind.is_some_and(|k| !eq(k, super::keyspace::type_name(e.tag))) {
                return Ok(());
            }
            let key = e.key(ctx.tx)?;
            if pattern.is_none_or(|p| glob::matches(p, &key)) {
                found.push(bulk(key));
            }
            Ok(())
        })?;
        visits = visits.saturating_sub(1);
        if cursor == 0 || found.len() as u64 >= count || visits == 0 {
            break;
        }
    }
    Ok(Reply::Array(vec![
        bulk(cursor.to_string().into_bytes()),
        Reply::Array(found),
    ]))
}

/// FLUSHDB (the command's database) and FLUSHALL (every database): the old table is queued
/// for freeing. With ASYNC it is freed lazily, a bounded amount per batch; otherwise (SYNC,
/// or no argument, as Redis with `lazyfree-lazy-user-flush no`) the batch's commit frees it
/// all before the reply goes (`PersistentEngine::drain_reclaim`).
fn flush(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    match a.get(1) {
        None => {}
        Some(mode) if a.len() == 2 && (eq(mode, "sync") || eq(mode, "async")) => {}
        Some(_) => return Ok(err(errors::SYNTAX)),
    }
    let dbs = if spec.id == Id::Flushall {
        0..ctx.slots.len()
    } else {
        ctx.db..ctx.db + 1
    };
    for db in dbs {
        let old = ctx.keyspace_of(db)?;
        let h = dict::Header::read(ctx.tx, old)?;
        if h.count == 0 {
            continue;
        }
        let new = dict::create(ctx.tx, dict::Kind::Keyspace)?;
        ctx.set_keyspace(db, new)?;
        // The old table and everything in it: freed at the batch's commit, or lazily.
        let head = store::word(ctx.tx, ctx.root + super::keyspace::root::RECLAIM)?;
        store::set_word(ctx.tx, old + dict::field::RECLAIM_NEXT, head)?;
        store::set_word(ctx.tx, ctx.root + super::keyspace::root::RECLAIM, old)?;
        ctx.zcache.clear();
    }
    Ok(Reply::ok())
}

// ---- lists ----

fn push(ctx: &mut Ctx<'_, '_>, a: &[Bytes], left: bool) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup_write(&a[1])?, tag::LIST);
    let l = match found {
        Some(f) => f.entry.val,
        None => ctx.create_container(&a[1], tag::LIST)?,
    };
    let mut len = 0;
    for value in &a[2..] {
        len = list::push(ctx.tx, l, left, value)?;
    }
    Ok(int(len))
}

/// Parses an optional count argument: Ok(None) without one, Err(reply) if invalid. Extra
/// arguments: LPOP/RPOP answer with the arity error, SPOP/ZPOPMIN with a syntax error.
pub(super) fn count_arg(
    spec: &'static CommandSpec,
    a: &[Bytes],
    at: usize,
) -> std::result::Result<Option<u64>, Reply> {
    match a.get(at) {
        None => Ok(None),
        Some(_) if a.len() > at + 1 => Err(match spec.id {
            Id::Lpop | Id::Rpop => wrong_arity(spec),
            _ => err(errors::SYNTAX),
        }),
        Some(arg) => match parse_i64(arg) {
            Some(n) if n >= 0 => Ok(Some(n as u64)),
            _ => Err(err(errors::MUST_BE_POSITIVE)),
        },
    }
}

fn pop(
    ctx: &mut Ctx<'_, '_>,
    spec: &'static CommandSpec,
    a: &[Bytes],
    left: bool,
) -> Result<Reply> {
    let count = match count_arg(spec, a, 2) {
        Ok(c) => c,
        Err(reply) => return Ok(reply),
    };
    let found = typed!(ctx, ctx.lookup_write(&a[1])?, tag::LIST);
    let Some(f) = found else {
        return Ok(if count.is_some() {
            Reply::NullArray
        } else {
            Reply::NullBulk
        });
    };
    let l = f.entry.val;
    let mut out = Vec::new();
    for _ in 0..count.unwrap_or(1) {
        match list::pop(ctx.tx, l, left)? {
            Some(v) => out.push(bulk(v)),
            None => break,
        }
    }
    if list::Header::read(ctx.tx, l)?.len == 0 {
        ctx.delete(&f)?;
    }
    Ok(match count {
        Some(_) => Reply::Array(out),
        None => out.pop().unwrap_or(Reply::NullBulk),
    })
}

/// Redis's index normalisation for ranges: Some((start, stop)) inclusive, None if empty.
pub(super) fn clamp_range(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { stop + len } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as u64, stop.min(len - 1) as u64))
}

fn lrange(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (start, stop) = (integer!(&a[2]), integer!(&a[3]));
    let found = typed!(ctx, ctx.lookup(&a[1])?, tag::LIST);
    let Some(f) = found else {
        return Ok(Reply::Array(Vec::new()));
    };
    let len = list::Header::read(ctx.tx, f.entry.val)?.len;
    Ok(Reply::Array(match clamp_range(start, stop, len) {
        Some((s, e)) => list::range(ctx.tx, f.entry.val, s, e)?
            .into_iter()
            .map(bulk)
            .collect(),
        None => Vec::new(),
    }))
}

fn llen(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup(key)?, tag::LIST);
    Ok(int(match found {
        Some(f) => list::Header::read(ctx.tx, f.entry.val)?.len,
        None => 0,
    }))
}

fn lindex(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let found = typed!(ctx, ctx.lookup(&a[1])?, tag::LIST);
    let Some(f) = found else {
        return Ok(Reply::NullBulk);
    };
    let index = integer!(&a[2]);
    let len = list::Header::read(ctx.tx, f.entry.val)?.len;
    let len_i = i64::try_from(len).unwrap_or(i64::MAX);
    let i = if index < 0 { index + len_i } else { index };
    if i < 0 || i >= len_i {
        return Ok(Reply::NullBulk);
    }
    let mut v = list::range(ctx.tx, f.entry.val, i as u64, i as u64)?;
    Ok(v.pop().map_or(Reply::NullBulk, bulk))
}

// ---- sets and hashes (nested tables) ----

/// A lookup result, or the key has another type.
type Typed<T> = std::result::Result<T, WrongType>;

/// The nested table of `key` if it has type `t`, creating it when `create`.
pub(super) fn container(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    t: u8,
    create: bool,
) -> Result<Typed<Option<u64>>> {
    container_for(ctx, key, t, create, 0)
}

/// [`container`] for a command about to add up to `expected` elements (a new table is sized
/// for them).
pub(super) fn container_for(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    t: u8,
    create: bool,
    expected: u64,
) -> Result<Typed<Option<u64>>> {
    let found = if create {
        ctx.lookup_write(key)?
    } else {
        ctx.lookup(key)?
    };
    let found = match super::keyspace::typed(found, t) {
        Ok(f) => f,
        Err(w) => return Ok(Err(w)),
    };
    Ok(Ok(match found {
        Some(f) => Some(f.entry.val),
        None if create => Some(ctx.create_container_for(key, t, expected)?),
        None => None,
    }))
}

macro_rules! container {
    ($ctx:expr, $key:expr, $tag:expr, $create:expr) => {
        container!($ctx, $key, $tag, $create, 0)
    };
    ($ctx:expr, $key:expr, $tag:expr, $create:expr, $expected:expr) => {
        match $crate::engine::commands::container_for($ctx, $key, $tag, $create, $expected)? {
            Ok(c) => c,
            Err(WrongType) => return Ok(wrongtype()),
        }
    };
}

/// Deletes `key` if its nested table is now empty.
pub(super) fn drop_if_empty(ctx: &mut Ctx<'_, '_>, key: &[u8], d: u64) -> Result<()> {
    if dict::Header::read(ctx.tx, d)?.count == 0 {
        if let Some(f) = ctx.lookup_write(key)? {
            ctx.delete(&f)?;
        }
    }
    Ok(())
}

fn sadd(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(d) = container!(
        ctx,
        &a[1],
        tag::SET,
        true,
        (a.len() as u64).saturating_sub(2)
    ) else {
        return Ok(Reply::Integer(0));
    };
    let mut added = 0;
    for member in &a[2..] {
        if dict::step_find(
            ctx.tx,
            d,
            super::limits::REHASH_BUCKETS_PER_OP,
            SEED,
            member,
        )?
        .is_none()
        {
            let hash = store::hash(SEED, member);
            let e = dict::new_entry(ctx.tx, tag::MEMBER, member, hash, 0, Value::None)?;
            dict::insert_stepped(ctx.tx, d, e, hash)?;
            added += 1;
        }
    }
    Ok(int(added))
}

/// Removes members (set, hash fields, sorted-set members) from a table; returns how many.
pub(super) fn remove_members(
    ctx: &mut Ctx<'_, '_>,
    d: u64,
    members: &[Bytes],
    zset: bool,
) -> Result<u64> {
    let mut removed = 0;
    for member in members {
        if let Some(f) = dict::step_find(
            ctx.tx,
            d,
            super::limits::REHASH_BUCKETS_PER_OP,
            SEED,
            member,
        )? {
            dict::unlink(ctx.tx, d, &f)?;
            ctx.drop_value(&f.entry)?;
            store::free(ctx.tx, f.entry.off)?;
            if zset {
                let score = Score(f.entry.score());
                ctx.zindex(d)?.remove(&(score, member.to_vec()));
                ctx.zdirty(d);
            }
            removed += 1;
        }
    }
    Ok(removed)
}

fn srem(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(d) = container!(ctx, &a[1], tag::SET, false) else {
        return Ok(Reply::Integer(0));
    };
    let n = remove_members(ctx, d, &a[2..], false)?;
    drop_if_empty(ctx, &a[1], d)?;
    Ok(int(n))
}

pub(super) fn members(ctx: &mut Ctx<'_, '_>, d: u64) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    dict::for_each(ctx.tx, d, |e| {
        out.push(e.key(ctx.tx)?);
        Ok(true)
    })?;
    Ok(out)
}

fn smembers(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let Some(d) = container!(ctx, key, tag::SET, false) else {
        return Ok(Reply::Set(Vec::new()));
    };
    Ok(Reply::Set(members(ctx, d)?.into_iter().map(bulk).collect()))
}

fn card(ctx: &mut Ctx<'_, '_>, key: &[u8], t: u8) -> Result<Reply> {
    let Some(d) = container!(ctx, key, t, false) else {
        return Ok(Reply::Integer(0));
    };
    Ok(int(dict::Header::read(ctx.tx, d)?.count))
}

fn sismember(ctx: &mut Ctx<'_, '_>, key: &[u8], member: &[u8]) -> Result<Reply> {
    let Some(d) = container!(ctx, key, tag::SET, false) else {
        return Ok(Reply::Integer(0));
    };
    Ok(Reply::Integer(i64::from(
        dict::find(ctx.tx, d, SEED, member)?.is_some(),
    )))
}

fn spop(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    let count = match count_arg(spec, a, 2) {
        Ok(c) => c,
        Err(reply) => return Ok(reply),
    };
    let Some(d) = container!(ctx, &a[1], tag::SET, false) else {
        return Ok(match count {
            Some(_) => Reply::Set(Vec::new()),
            None => Reply::NullBulk,
        });
    };
    let mut out = Vec::new();
    for _ in 0..count.unwrap_or(1) {
        dict::step(ctx.tx, d, super::limits::REHASH_BUCKETS_PER_OP)?;
        let mut rng = || ctx_random(ctx.rng);
        let Some(f) = dict::random(ctx.tx, d, &mut rng)? else {
            break;
        };
        out.push(bulk(f.entry.key(ctx.tx)?));
        dict::unlink(ctx.tx, d, &f)?;
        store::free(ctx.tx, f.entry.off)?;
    }
    drop_if_empty(ctx, &a[1], d)?;
    Ok(match count {
        Some(_) => Reply::Set(out),
        None => out.pop().unwrap_or(Reply::NullBulk),
    })
}

pub(super) fn ctx_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// HSET, and HMSET (the same but for its reply).
fn hset(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    if a.len() % 2 != 0 {
        return Ok(wrong_arity(spec));
    }
    let reply = |added: u64| {
        if spec.id == Id::Hmset {
            Reply::ok()
        } else {
            int(added)
        }
    };
    let found = match super::keyspace::typed(ctx.lookup_write(&a[1])?, tag::HASH) {
        Ok(found) => found,
        Err(WrongType) => return Ok(wrongtype()),
    };
    let d = match found {
        Some(f) => f.entry.val,
        None => return Ok(reply(hset_new(ctx, &a[1], &a[2..])?)),
    };
    let mut added = 0;
    for pair in a[2..].chunks_exact(2) {
        let found = ctx.step_find(d, &pair[0])?;
        if found.is_none() {
            added += 1;
        }
        ctx.put_string_in(
            d,
            tag::STRING,
            &pair[0],
            found.as_ref(),
            &pair[1],
            None,
            false,
        )?;
    }
    Ok(reply(added))
}

/// HSET of a key that does not exist: the hash is made with its fields in one piece
/// ([`dict::create_filled`]), not field by field into an empty table. A field named twice
/// keeps its first place and its last value, as inserting in order would. Returns the number
/// of fields.
fn hset_new(ctx: &mut Ctx<'_, '_>, key: &[u8], pairs: &[Bytes]) -> Result<u64> {
    if pairs.is_empty() {
        return Ok(0);
    }
    // (field, value, field's hash): indices into `pairs`, each field once.
    let mut fields: Vec<(usize, usize, u64)> = Vec::with_capacity(pairs.len() / 2);
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    let few = pairs.len() <= 2 * HSET_NEW_LINEAR_FIELDS;
    for (i, pair) in pairs.chunks_exact(2).enumerate() {
        let hash = store::hash(SEED, &pair[0]);
        // A few fields are compared directly (by hash first); a map only for many.
        let earlier = if few {
            fields
                .iter()
                .position(|&(f, _, h)| h == hash && pairs[f] == pair[0])
        } else {
            seen.get(&pair[0][..]).copied()
        };
        match earlier {
            Some(j) => fields[j].1 = 2 * i + 1,
            None => {
                if !few {
                    seen.insert(&pair[0][..], fields.len());
                }
                fields.push((2 * i, 2 * i + 1, hash));
            }
        }
    }
    let mut items = Vec::with_capacity(fields.len());
    for &(f, v, hash) in &fields {
        let entry = ctx.string_entry(tag::STRING, &pairs[f], &pairs[v], 0, Some(hash))?;
        items.push((entry, hash));
    }
    let d = dict::create_filled(ctx.tx, dict::Kind::Hash, &items)?;
    ctx.link_container(key, tag::HASH, d)?;
    Ok(fields.len() as u64)
}

/// Up to this many fields, [`hset_new`] finds a repeated field by comparing it with each
/// earlier one; past it, with a hash map.
const HSET_NEW_LINEAR_FIELDS: usize = 16;

fn hget(ctx: &mut Ctx<'_, '_>, key: &[u8], field: &[u8]) -> Result<Reply> {
    let Some(d) = container!(ctx, key, tag::HASH, false) else {
        return Ok(Reply::NullBulk);
    };
    Ok(match dict::find(ctx.tx, d, SEED, field)? {
        Some(f) => bulk(f.entry.string(ctx.tx)?),
        None => Reply::NullBulk,
    })
}

fn hgetall(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let Some(d) = container!(ctx, key, tag::HASH, false) else {
        return Ok(Reply::Map(Vec::new()));
    };
    // Every field and value is encoded into one buffer as it is read, which the reply
    // carries as it is: no value per field, one copy into the connection's output (YCSB's
    // read).
    let h = dict::Header::read(ctx.tx, d)?;
    let expected = usize::try_from(h.count.min(HGETALL_RESERVE_FIELDS)).unwrap_or(0);
    let mut map = BulkMap::with_capacity(expected * HGETALL_RESERVE_BYTES);
    dict::for_each_pair(ctx.tx, &h, |field, value| {
        map.push(field, value);
        Ok(true)
    })?;
    Ok(map.finish())
}

/// HGETALL reserves its buffer for this many fields at most (more grow it)...
const HGETALL_RESERVE_FIELDS: u64 = 1024;
/// ... of about this many bytes each, field and value encoded (YCSB's: `field0` and 100
/// bytes, 122 with their headers).
const HGETALL_RESERVE_BYTES: usize = 128;

fn hdel(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(d) = container!(ctx, &a[1], tag::HASH, false) else {
        return Ok(Reply::Integer(0));
    };
    let n = remove_members(ctx, d, &a[2..], false)?;
    drop_if_empty(ctx, &a[1], d)?;
    Ok(int(n))
}

fn hexists(ctx: &mut Ctx<'_, '_>, key: &[u8], field: &[u8]) -> Result<Reply> {
    let Some(d) = container!(ctx, key, tag::HASH, false) else {
        return Ok(Reply::Integer(0));
    };
    Ok(Reply::Integer(i64::from(
        dict::find(ctx.tx, d, SEED, field)?.is_some(),
    )))
}

fn hincrby(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let by = integer!(&a[3]);
    let existing = container!(ctx, &a[1], tag::HASH, false);
    let field = &a[2];
    let current = match existing {
        Some(d) => match dict::find(ctx.tx, d, SEED, field)? {
            Some(f) => match parse_i64(&f.entry.string(ctx.tx)?) {
                Some(n) => n,
                None => return Ok(err(errors::HASH_VALUE_NOT_INTEGER)),
            },
            None => 0,
        },
        None => 0,
    };
    let Some(next) = current.checked_add(by) else {
        return Ok(err(errors::OVERFLOW));
    };
    let Some(d) = container!(ctx, &a[1], tag::HASH, true) else {
        return Ok(Reply::Integer(0));
    };
    let found = ctx.step_find(d, field)?;
    let mut text = Vec::with_capacity(20);
    mnemo_resp::write_i64(&mut text, next);
    ctx.put_string_in(d, tag::STRING, field, found.as_ref(), &text, None, false)?;
    Ok(Reply::Integer(next))
}

// ---- sorted sets ----

/// Sets a member's score in a sorted set's table and index; true if it was added.
pub(super) fn zset_score(ctx: &mut Ctx<'_, '_>, d: u64, member: &[u8], score: f64) -> Result<bool> {
    let found = dict::step_find(
        ctx.tx,
        d,
        super::limits::REHASH_BUCKETS_PER_OP,
        SEED,
        member,
    )?;
    ctx.zdirty(d);
    match found {
        Some(f) => {
            let old = f.entry.score();
            if old.to_bits() == score.to_bits() {
                // The same score again (a plain ZADD does not look first): nothing to write.
                return Ok(false);
            }
            store::set_word(ctx.tx, f.entry.off + entry_field::VAL, score.to_bits())?;
            // One copy of the member: the key removed is the key inserted, its score changed.
            let mut key = (Score(old), member.to_vec());
            let index = ctx.zindex(d)?;
            index.remove(&key);
            key.0 = Score(score);
            index.insert(key);
            Ok(false)
        }
        None => {
            let hash = store::hash(SEED, member);
            let e = dict::new_entry(
                ctx.tx,
                tag::SCORED,
                member,
                hash,
                0,
                Value::Word(score.to_bits()),
            )?;
            dict::insert_stepped(ctx.tx, d, e, hash)?;
            ctx.zindex(d)?.insert((Score(score), member.to_vec()));
            Ok(true)
        }
    }
}

/// ZADD, and ZINCRBY (`incr`: Redis runs it as ZADD with INCR, options included).
fn zadd(ctx: &mut Ctx<'_, '_>, a: &[Bytes], incr: bool) -> Result<Reply> {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, incr);
    let mut i = 2;
    while i < a.len() {
        let o = &a[i];
        if eq(o, "nx") {
            nx = true;
        } else if eq(o, "xx") {
            xx = true;
        } else if eq(o, "gt") {
            gt = true;
        } else if eq(o, "lt") {
            lt = true;
        } else if eq(o, "ch") {
            ch = true;
        } else if eq(o, "incr") {
            incr = true;
        } else {
            break;
        }
        i += 1;
    }
    let pairs = &a[i..];
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Ok(err(errors::SYNTAX));
    }
    if nx && xx {
        return Ok(err(errors::ZADD_XX_AND_NX));
    }
    if ((gt || lt) && nx) || (gt && lt) {
        return Ok(err(errors::ZADD_GT_LT_NX));
    }
    if incr && pairs.len() > 2 {
        return Ok(err(errors::ZADD_INCR_PAIR));
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks_exact(2) {
        match parse_f64(&pair[0]) {
            Some(s) if !s.is_nan() => scores.push(s),
            _ => return Ok(err(errors::NOT_FLOAT)),
        }
    }
    // Nothing can be added with XX to a missing key: no key is created.
    let existing = container!(ctx, &a[1], tag::ZSET, false);
    if existing.is_none() && xx {
        return Ok(if incr {
            Reply::NullBulk
        } else {
            Reply::Integer(0)
        });
    }
    // A plain ZADD (YCSB's insert) needs no member's current score: setting a score again
    // is no change it reports. Every other form looks each member up first.
    let plain = !(incr || ch || nx || xx || gt || lt);
    // Check INCR's NaN before creating anything.
    let mut plan = Vec::with_capacity(scores.len());
    for (pair, score) in pairs.chunks_exact(2).zip(scores) {
        let current = match existing {
            Some(d) if !plain => dict::find(ctx.tx, d, SEED, &pair[1])?.map(|f| f.entry.score()),
            _ => None,
        };
        // Redis keeps small sorted sets in a listpack, which stores -0 as 0.
        let mut target = if score == 0.0 { 0.0 } else { score };
        if incr {
            target = current.unwrap_or(0.0) + score;
            if target.is_nan() {
                return Ok(err("ERR resulting score is not a number (NaN)"));
            }
        }
        let skip = match current {
            Some(c) => nx || (gt && target <= c) || (lt && target >= c),
            None => xx,
        };
        plan.push((&pair[1], current, target, skip));
    }
    if plan.iter().all(|p| p.3) && existing.is_none() {
        return Ok(if incr {
            Reply::NullBulk
        } else {
            Reply::Integer(0)
        });
    }
    // The sorted set found above is the one to write (no second lookup of the key).
    let d = match existing {
        Some(d) => d,
        None => {
            let Some(d) = container!(ctx, &a[1], tag::ZSET, true, pairs.len() as u64 / 2) else {
                return Ok(Reply::Integer(0));
            };
            d
        }
    };
    let (mut added, mut changed) = (0, 0);
    let mut last = None;
    for (member, current, target, skip) in plan {
        if skip {
            continue;
        }
        if current == Some(target) {
            last = Some(target);
            continue;
        }
        if zset_score(ctx, d, member, target)? {
            added += 1;
        } else {
            changed += 1;
        }
        last = Some(target);
    }
    Ok(if incr {
        last.map_or(Reply::NullBulk, Reply::Double)
    } else if ch {
        int(added + changed)
    } else {
        int(added)
    })
}

fn zscore(ctx: &mut Ctx<'_, '_>, key: &[u8], member: &[u8]) -> Result<Reply> {
    let Some(d) = container!(ctx, key, tag::ZSET, false) else {
        return Ok(Reply::NullBulk);
    };
    Ok(match dict::find(ctx.tx, d, SEED, member)? {
        Some(f) => Reply::Double(f.entry.score()),
        None => Reply::NullBulk,
    })
}

fn zrem(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::Integer(0));
    };
    let n = remove_members(ctx, d, &a[2..], true)?;
    drop_if_empty(ctx, &a[1], d)?;
    Ok(int(n))
}

/// A ZRANGE BYSCORE bound: value and exclusiveness.
pub(super) fn scored_reply(items: Vec<(f64, Vec<u8>)>, with_scores: bool, resp3: bool) -> Reply {
    let mut out = Vec::new();
    for (score, member) in items {
        if !with_scores {
            out.push(bulk(member));
        } else if resp3 {
            out.push(Reply::Array(vec![bulk(member), Reply::Double(score)]));
        } else {
            out.push(bulk(member));
            out.push(Reply::Double(score));
        }
    }
    Reply::Array(out)
}

pub(super) fn zrange(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (mut by_score, mut by_lex, mut rev, mut with_scores) = (false, false, false, false);
    let mut limit: Option<(i64, i64)> = None;
    let mut i = 4;
    while i < a.len() {
        let o = &a[i];
        if eq(o, "byscore") {
            by_score = true;
        } else if eq(o, "bylex") {
            by_lex = true;
        } else if eq(o, "rev") {
            rev = true;
        } else if eq(o, "withscores") {
            with_scores = true;
        } else if eq(o, "limit") && i + 2 < a.len() {
            limit = Some((integer!(&a[i + 1]), integer!(&a[i + 2])));
            i += 2;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 1;
    }
    // By rank, Redis accepts only the no-op LIMIT (offset 0, negative count).
    if limit.is_some_and(|(offset, count)| offset != 0 || count >= 0) && !by_score && !by_lex {
        return Ok(err(errors::ZRANGE_LIMIT_WITHOUT_BY));
    }
    if by_score && by_lex {
        return Ok(err(errors::SYNTAX));
    }
    if by_lex {
        if with_scores {
            return Ok(err(errors::ZRANGE_BYLEX_WITHSCORES));
        }
        let (min, max) = if rev { (&a[3], &a[2]) } else { (&a[2], &a[3]) };
        return super::zsets::by_lex(ctx, &a[1], min, max, rev, limit);
    }
    if by_score {
        let (min, max) = if rev { (&a[3], &a[2]) } else { (&a[2], &a[3]) };
        return super::score_range::by_score(ctx, &a[1], min, max, rev, limit, with_scores);
    }
    let resp3 = ctx.resp3;
    let (start, stop) = (integer!(&a[2]), integer!(&a[3]));
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let index = ctx.zindex(d)?;
    let Some((s, e)) = clamp_range(start, stop, index.len() as u64) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let n = (e - s + 1) as usize;
    let items: Vec<(f64, Vec<u8>)> = if rev {
        index
            .iter()
            .rev()
            .skip(s as usize)
            .take(n)
            .map(|(sc, m)| (sc.0, m.clone()))
            .collect()
    } else {
        index
            .iter()
            .skip(s as usize)
            .take(n)
            .map(|(sc, m)| (sc.0, m.clone()))
            .collect()
    };
    Ok(scored_reply(items, with_scores, resp3))
}

/// ZPOPMIN and ZPOPMAX (`max`).
pub(super) fn zpop(
    ctx: &mut Ctx<'_, '_>,
    spec: &'static CommandSpec,
    a: &[Bytes],
    max: bool,
) -> Result<Reply> {
    let count = match count_arg(spec, a, 2) {
        Ok(c) => c,
        Err(reply) => return Ok(reply),
    };
    let Some(d) = container!(ctx, &a[1], tag::ZSET, false) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let popped = pop_members(ctx, d, count.unwrap_or(1), max)?;
    drop_if_empty(ctx, &a[1], d)?;
    let resp3 = ctx.resp3 && count.is_some();
    Ok(scored_reply(popped, true, resp3))
}

/// Removes up to `count` members with the lowest (or, with `max`, highest) scores from the
/// sorted set `d`; returns them in that order. The caller drops an emptied key.
pub(super) fn pop_members(
    ctx: &mut Ctx<'_, '_>,
    d: u64,
    count: u64,
    max: bool,
) -> Result<Vec<(f64, Vec<u8>)>> {
    let mut popped = Vec::new();
    for _ in 0..count {
        let index = ctx.zindex(d)?;
        let next = if max { index.last() } else { index.first() };
        let Some(first) = next.cloned() else {
            break;
        };
        let member = Bytes::from(first.1.clone());
        remove_members(ctx, d, std::slice::from_ref(&member), true)?;
        popped.push((first.0 .0, first.1));
    }
    Ok(popped)
}
