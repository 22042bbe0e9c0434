//! String and keyspace commands beyond issue 6's: SETNX, SETEX, PSETEX, GETEX, GETDEL,
//! INCRBYFLOAT, SETRANGE, GETRANGE / SUBSTR, MSETNX, the absolute expiries, RENAME, COPY,
//! MOVE, SWAPDB, OBJECT, RANDOMKEY, UNLINK, TOUCH and the bitmaps. Like every command: parse
//! and check first, then mutate, with Redis 7.0's replies and error texts.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_f64, parse_i64, CommandId as Id, Reply};

use super::commands::{
    bulk, eq, err, err_owned, expire, expire_at, int, wrong_arity, wrongtype, zset_score,
};
use super::dict::{self, tag, Found, Value};
use super::keyspace::{Ctx, WrongType, SEED};
use super::limits::VALUE_BYTES_MAX;
use super::list;
use super::store::{self, corrupt, Result};

/// Redis's error for an index that is not a database.
const SAME_OBJECT: &str = "ERR source and destination objects are the same";

/// Runs one of this module's commands.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    match spec.id {
        Id::Setnx => setnx(ctx, &a[1], &a[2]),
        Id::Setex => setex(ctx, spec, a, 1000),
        Id::Psetex => setex(ctx, spec, a, 1),
        Id::Getex => getex(ctx, spec, a),
        Id::Getdel => getdel(ctx, &a[1]),
        Id::Incrbyfloat => incrbyfloat(ctx, &a[1], &a[2]),
        Id::Setrange => setrange(ctx, a),
        Id::Getrange | Id::Substr => getrange(ctx, a),
        Id::Msetnx => msetnx(ctx, spec, a),
        Id::Expireat => expire(ctx, a, 1000, true, spec.name),
        Id::Pexpireat => expire(ctx, a, 1, true, spec.name),
        Id::Expiretime => expiretime(ctx, &a[1], 1000),
        Id::Pexpiretime => expiretime(ctx, &a[1], 1),
        Id::Rename => rename(ctx, &a[1], &a[2], false),
        Id::Renamenx => rename(ctx, &a[1], &a[2], true),
        Id::Copy => copy(ctx, a),
        Id::Move => move_key(ctx, a),
        Id::Swapdb => swapdb(ctx, a),
        Id::ObjectEncoding => object_encoding(ctx, &a[2]),
        Id::ObjectRefcount => object_refcount(ctx, &a[2]),
        Id::ObjectFreq => Ok(match ctx.lookup(&a[2])? {
            None => Reply::NullBulk,
            Some(_) => err(
                "ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
                 Please note that when switching between policies at runtime LRU and LFU data \
                 will take some time to adjust.",
            ),
        }),
        Id::ObjectIdletime => Ok(match ctx.lookup(&a[2])? {
            None => Reply::NullBulk,
            Some(_) => err("ERR OBJECT IDLETIME: mnemo does not track key access times"),
        }),
        Id::ObjectHelp => Ok(object_help()),
        Id::Randomkey => randomkey(ctx),
        Id::Touch => {
            let mut n = 0;
            for key in &a[1..] {
                n += u64::from(ctx.lookup(key)?.is_some());
            }
            Ok(int(n))
        }
        Id::Setbit => super::bits::setbit(ctx, a),
        Id::Getbit => super::bits::getbit(ctx, a),
        Id::Bitcount => super::bits::bitcount(ctx, a),
        Id::Bitpos => super::bits::bitpos(ctx, a),
        Id::Bitop => super::bits::bitop(ctx, a),
        Id::Lcs => super::bits::lcs(ctx, a),
        _ => Ok(wrong_arity(spec)),
    }
}

/// A live string key for a write, or WRONGTYPE.
fn string_for_write(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
) -> Result<std::result::Result<Option<Found>, WrongType>> {
    Ok(super::keyspace::typed(ctx.lookup_write(key)?, tag::STRING))
}

fn setnx(ctx: &mut Ctx<'_, '_>, key: &[u8], value: &[u8]) -> Result<Reply> {
    if ctx.lookup_write(key)?.is_some() {
        return Ok(Reply::Integer(0));
    }
    ctx.put_string(key, None, value, Some(0))?;
    Ok(Reply::Integer(1))
}

/// SETEX (`unit` 1000) and PSETEX (1).
fn setex(
    ctx: &mut Ctx<'_, '_>,
    spec: &'static CommandSpec,
    a: &[Bytes],
    unit: i64,
) -> Result<Reply> {
    let at = match expire_at(ctx, &a[2], unit, false, spec.name) {
        Ok(at) => at,
        Err(reply) => return Ok(reply),
    };
    let found = ctx.lookup_write(&a[1])?;
    ctx.put_string(&a[1], found.as_ref(), &a[3], Some(at))?;
    Ok(Reply::ok())
}

/// What GETEX does to the key's expiry.
enum GetexMode<'a> {
    Keep,
    Persist,
    /// EX, PX, EXAT or PXAT: the unit (ms per unit), whether absolute, and the argument.
    At(i64, bool, &'a [u8]),
}

/// GETEX. Redis 7.0 checks the options' syntax, then looks the key up (null if missing,
/// WRONGTYPE if not a string), and only then reads the expiry's value.
fn getex(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    let mut mode = GetexMode::Keep;
    let mut chosen = false;
    let mut i = 2;
    while i < a.len() {
        let opt = &a[i];
        let has_next = i + 1 < a.len();
        let timed = eq(opt, "ex") || eq(opt, "px") || eq(opt, "exat") || eq(opt, "pxat");
        if timed && has_next && !chosen {
            let unit = if eq(opt, "ex") || eq(opt, "exat") {
                1000
            } else {
                1
            };
            mode = GetexMode::At(unit, opt.len() == 4, &a[i + 1]);
            i += 1;
        } else if eq(opt, "persist") && !chosen {
            mode = GetexMode::Persist;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        chosen = true;
        i += 1;
    }
    let found = ctx.lookup_write(&a[1])?;
    let Some(f) = found else {
        return Ok(Reply::NullBulk);
    };
    if f.entry.tag != tag::STRING {
        return Ok(wrongtype());
    }
    let at = match mode {
        GetexMode::At(unit, absolute, arg) => {
            match expire_at(ctx, arg, unit, absolute, spec.name) {
                Ok(at) => Some(at),
                Err(reply) => return Ok(reply),
            }
        }
        _ => None,
    };
    let value = bulk(f.entry.string(ctx.tx)?);
    match (mode, at) {
        (GetexMode::Persist, _) => ctx.set_expire(&f.entry, 0)?,
        (_, Some(at)) if at <= ctx.now => ctx.delete(&f)?,
        (_, Some(at)) => ctx.set_expire(&f.entry, at)?,
        _ => {}
    }
    Ok(value)
}

fn getdel(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let found = match string_for_write(ctx, key)? {
        Ok(found) => found,
        Err(WrongType) => return Ok(wrongtype()),
    };
    let Some(f) = found else {
        return Ok(Reply::NullBulk);
    };
    let value = bulk(f.entry.string(ctx.tx)?);
    ctx.delete(&f)?;
    Ok(value)
}

fn incrbyfloat(ctx: &mut Ctx<'_, '_>, key: &[u8], by: &[u8]) -> Result<Reply> {
    let found = match string_for_write(ctx, key)? {
        Ok(found) => found,
        Err(WrongType) => return Ok(wrongtype()),
    };
    let current = match &found {
        Some(f) => f.entry.string(ctx.tx)?,
        None => b"0".to_vec(),
    };
    let (Some(x), Some(y)) = (valid_float(&current), valid_float(by)) else {
        return Ok(err(errors::NOT_FLOAT));
    };
    let sum = x + y;
    if !sum.is_finite() {
        return Ok(err(errors::INCR_NOT_FINITE));
    }
    let text = super::decimal::add(&current, by).unwrap_or_else(|| format_float(sum));
    ctx.put_string(key, found.as_ref(), text.as_bytes(), None)?;
    Ok(Reply::Bulk(Bytes::from(text)))
}

/// A float as Redis's `string2ld` takes it: no leading space, not NaN.
pub(super) fn valid_float(text: &[u8]) -> Option<f64> {
    if text.first().is_some_and(u8::is_ascii_whitespace) {
        return None;
    }
    parse_f64(text).filter(|v| !v.is_nan())
}

/// A float as INCRBYFLOAT prints it: fixed point, no exponent, no trailing zeros (the
/// shortest digits that read back as the same double).
pub(super) fn format_float(v: f64) -> String {
    let text = format!("{v}");
    if text == "-0" {
        "0".into()
    } else {
        text
    }
}

fn setrange(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(offset) = parse_i64(&a[2]) else {
        return Ok(err(errors::NOT_INTEGER));
    };
    if offset < 0 {
        return Ok(err("ERR offset is out of range"));
    }
    let value = &a[3];
    let found = match string_for_write(ctx, &a[1])? {
        Ok(found) => found,
        Err(WrongType) => return Ok(wrongtype()),
    };
    let old_len = found.as_ref().map_or(0, |f| f.entry.vlen);
    if value.is_empty() {
        return Ok(int(old_len));
    }
    let offset = offset as u64;
    let end = offset.saturating_add(value.len() as u64);
    if end > VALUE_BYTES_MAX {
        return Ok(err(errors::STRING_TOO_LONG));
    }
    let mut current = match &found {
        Some(f) => f.entry.string(ctx.tx)?,
        None => Vec::new(),
    };
    if (current.len() as u64) < end {
        current.resize(end as usize, 0);
    }
    current[offset as usize..end as usize].copy_from_slice(value);
    ctx.put_string(&a[1], found.as_ref(), &current, None)?;
    Ok(int(current.len() as u64))
}

fn getrange(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (Some(start), Some(end)) = (parse_i64(&a[2]), parse_i64(&a[3])) else {
        return Ok(err(errors::NOT_INTEGER));
    };
    let found = typed!(ctx, ctx.lookup(&a[1])?, tag::STRING);
    let empty = Reply::Bulk(Bytes::new());
    let Some(f) = found else {
        return Ok(empty);
    };
    let len = i64::try_from(f.entry.vlen).unwrap_or(i64::MAX);
    if start < 0 && end < 0 && start > end {
        return Ok(empty);
    }
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return Ok(empty);
    }
    let at = if f.entry.is_inline() {
        f.entry.inline_at()
    } else {
        f.entry.val
    };
    let bytes = store::bytes(ctx.tx, at + start as u64, (end - start + 1) as u64)?;
    Ok(bulk(bytes))
}

fn msetnx(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    if a.len() % 2 == 0 {
        return Ok(wrong_arity(spec));
    }
    for pair in a[1..].chunks_exact(2) {
        if ctx.lookup(&pair[0])?.is_some() {
            return Ok(Reply::Integer(0));
        }
    }
    for pair in a[1..].chunks_exact(2) {
        let found = ctx.lookup_write(&pair[0])?;
        ctx.put_string(&pair[0], found.as_ref(), &pair[1], Some(0))?;
    }
    Ok(Reply::Integer(1))
}

fn expiretime(ctx: &mut Ctx<'_, '_>, key: &[u8], unit: i64) -> Result<Reply> {
    Ok(Reply::Integer(match ctx.lookup(key)? {
        None => -2,
        Some(f) if f.entry.expire == 0 => -1,
        Some(f) => f.entry.expire / unit,
    }))
}

fn rename(ctx: &mut Ctx<'_, '_>, from: &[u8], to: &[u8], nx: bool) -> Result<Reply> {
    let Some(source) = ctx.lookup_write(from)? else {
        return Ok(err(errors::NO_SUCH_KEY));
    };
    let done = if nx { Reply::Integer(1) } else { Reply::ok() };
    if from == to {
        return Ok(if nx { Reply::Integer(0) } else { Reply::ok() });
    }
    if let Some(target) = ctx.lookup_write(to)? {
        if nx {
            return Ok(Reply::Integer(0));
        }
        ctx.delete(&target)?;
    }
    // The target's deletion (and the lookups' rehash steps) may have moved the source's
    // chain link: find it again.
    let _ = source;
    let Some(source) = ctx.lookup_write(from)? else {
        return corrupt("RENAME: the source key vanished");
    };
    let db = ctx.db;
    ctx.rekey(&source, to, db)?;
    Ok(done)
}

/// The database index argument of MOVE and COPY ... DB: `Err(reply)` if it is not one.
fn db_index(ctx: &Ctx<'_, '_>, arg: &[u8]) -> std::result::Result<usize, Reply> {
    let index = parse_i64(arg).ok_or_else(|| err(errors::NOT_INTEGER))?;
    if i32::try_from(index).is_err() {
        return Err(err(errors::NOT_I32));
    }
    usize::try_from(index)
        .ok()
        .filter(|&i| i < ctx.slots.len())
        .ok_or_else(|| err(errors::DB_INDEX_OUT_OF_RANGE))
}

fn move_key(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let target = match db_index(ctx, &a[2]) {
        Ok(db) => db,
        Err(reply) => return Ok(reply),
    };
    if target == ctx.db {
        return Ok(err(SAME_OBJECT));
    }
    let Some(source) = ctx.lookup_write(&a[1])? else {
        return Ok(Reply::Integer(0));
    };
    if ctx.in_db(target, |ctx| ctx.lookup_write(&a[1]))?.is_some() {
        return Ok(Reply::Integer(0));
    }
    ctx.rekey(&source, &a[1], target)?;
    Ok(Reply::Integer(1))
}

fn swapdb(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let index = |arg: &[u8], which: &'static str| -> std::result::Result<i64, Reply> {
        parse_i64(arg)
            .filter(|&i| i32::try_from(i).is_ok())
            .ok_or_else(|| err_owned(format!("ERR invalid {which} DB index")))
    };
    let (first, second) = match (index(&a[1], "first"), index(&a[2], "second")) {
        (Ok(first), Ok(second)) => (first, second),
        (Err(reply), _) | (_, Err(reply)) => return Ok(reply),
    };
    let count = ctx.slots.len();
    let valid = |i: i64| usize::try_from(i).ok().filter(|&i| i < count);
    let (Some(first), Some(second)) = (valid(first), valid(second)) else {
        return Ok(err(errors::DB_INDEX_OUT_OF_RANGE));
    };
    if first != second {
        ctx.swap_databases(first, second)?;
    }
    Ok(Reply::ok())
}

fn copy(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (mut replace, mut target_db) = (false, ctx.db);
    let mut i = 3;
    while i < a.len() {
        if eq(&a[i], "replace") {
            replace = true;
        } else if eq(&a[i], "db") && i + 1 < a.len() {
            target_db = match db_index(ctx, &a[i + 1]) {
                Ok(db) => db,
                Err(reply) => return Ok(reply),
            };
            i += 1;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 1;
    }
    let (from, to) = (&a[1], &a[2]);
    if target_db == ctx.db && from == to {
        return Ok(err(SAME_OBJECT));
    }
    let Some(source) = ctx.lookup(from)? else {
        return Ok(Reply::Integer(0));
    };
    let existing = ctx.in_db(target_db, |ctx| ctx.lookup_write(to))?;
    if existing.is_some() && !replace {
        return Ok(Reply::Integer(0));
    }
    let e = source.entry;
    let value = Snapshot::take(ctx, &e)?;
    ctx.in_db(target_db, |ctx| {
        if let Some(target) = ctx.lookup_write(to)? {
            ctx.delete(&target)?;
        }
        value.restore(ctx, to, e.expire)
    })?;
    Ok(Reply::Integer(1))
}

/// A value read out of the pool, to be written again under another key (COPY).
enum Snapshot {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    Set(Vec<Vec<u8>>),
    Zset(Vec<(Vec<u8>, f64)>),
}

impl Snapshot {
    fn take(ctx: &mut Ctx<'_, '_>, e: &dict::Entry) -> Result<Snapshot> {
        Ok(match e.tag {
            tag::STRING => Snapshot::String(e.string(ctx.tx)?),
            tag::LIST => {
                let len = list::Header::read(ctx.tx, e.val)?.len;
                Snapshot::List(if len == 0 {
                    Vec::new()
                } else {
                    list::range(ctx.tx, e.val, 0, len - 1)?
                })
            }
            tag::HASH => {
                let mut pairs = Vec::new();
                dict::for_each(ctx.tx, e.val, |f| {
                    pairs.push((f.key(ctx.tx)?, f.string(ctx.tx)?));
                    Ok(true)
                })?;
                Snapshot::Hash(pairs)
            }
            tag::SET => {
                let mut members = Vec::new();
                dict::for_each(ctx.tx, e.val, |f| {
                    members.push(f.key(ctx.tx)?);
                    Ok(true)
                })?;
                Snapshot::Set(members)
            }
            _ => {
                let mut members = Vec::new();
                dict::for_each(ctx.tx, e.val, |f| {
                    members.push((f.key(ctx.tx)?, f.score()));
                    Ok(true)
                })?;
                Snapshot::Zset(members)
            }
        })
    }

    /// Creates `key` (absent) with this value and `expire`.
    fn restore(self, ctx: &mut Ctx<'_, '_>, key: &[u8], expire: i64) -> Result<()> {
        let t = match self {
            Snapshot::String(value) => {
                ctx.put_string(key, None, &value, Some(expire))?;
                return Ok(());
            }
            Snapshot::List(items) => {
                let l = ctx.create_container(key, tag::LIST)?;
                for item in items {
                    list::push(ctx.tx, l, false, &item)?;
                }
                tag::LIST
            }
            Snapshot::Hash(pairs) => {
                let d = ctx.create_container(key, tag::HASH)?;
                for (field, value) in pairs {
                    ctx.put_string_in(d, tag::STRING, &field, None, &value, None, false)?;
                }
                tag::HASH
            }
            Snapshot::Set(members) => {
                let d = ctx.create_container(key, tag::SET)?;
                for member in members {
                    let hash = store::hash(SEED, &member);
                    let e = dict::new_entry(ctx.tx, tag::MEMBER, &member, hash, 0, Value::None)?;
                    dict::insert(ctx.tx, d, e, hash)?;
                }
                tag::SET
            }
            Snapshot::Zset(members) => {
                let d = ctx.create_container(key, tag::ZSET)?;
                for (member, score) in members {
                    zset_score(ctx, d, &member, score)?;
                }
                tag::ZSET
            }
        };
        if expire != 0 {
            if let Some(f) = ctx.lookup_write(key)? {
                debug_assert_eq!(f.entry.tag, t);
                ctx.set_expire(&f.entry, expire)?;
            }
        }
        Ok(())
    }
}

/// Redis 7.0's encoding thresholds (its defaults, which CONFIG SET accepts but mnemo does
/// not use: its structures are the same at every size).
const LISTPACK_ENTRIES_MAX: u64 = 128;
const LISTPACK_VALUE_BYTES_MAX: u64 = 64;
const INTSET_ENTRIES_MAX: u64 = 512;
const EMBSTR_BYTES_MAX: u64 = 44;

/// OBJECT ENCODING: the encoding Redis 7.0 would use for the value as it is now, from its
/// default thresholds. Redis never converts back to a compact encoding when a value shrinks,
/// and keeps APPENDed strings "raw"; mnemo answers from the value's present contents.
fn object_encoding(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let Some(f) = ctx.lookup(key)? else {
        return Ok(Reply::NullBulk);
    };
    let e = f.entry;
    let name = match e.tag {
        tag::STRING => {
            let value = e.string(ctx.tx)?;
            if value.len() <= 20 && parse_i64(&value).is_some() {
                "int"
            } else if e.vlen <= EMBSTR_BYTES_MAX {
                "embstr"
            } else {
                "raw"
            }
        }
        tag::LIST => "quicklist",
        tag::SET => {
            let h = dict::Header::read(ctx.tx, e.val)?;
            let mut integers = h.count <= INTSET_ENTRIES_MAX;
            if integers {
                dict::for_each(ctx.tx, e.val, |m| {
                    integers = parse_i64(&m.key(ctx.tx)?).is_some();
                    Ok(integers)
                })?;
            }
            if integers {
                "intset"
            } else {
                "hashtable"
            }
        }
        t => {
            let h = dict::Header::read(ctx.tx, e.val)?;
            let mut small = h.count <= LISTPACK_ENTRIES_MAX;
            if small {
                dict::for_each(ctx.tx, e.val, |m| {
                    small = m.key_len <= LISTPACK_VALUE_BYTES_MAX
                        && (t != tag::HASH || m.vlen <= LISTPACK_VALUE_BYTES_MAX);
                    Ok(small)
                })?;
            }
            match (small, t) {
                (true, _) => "listpack",
                (false, tag::HASH) => "hashtable",
                (false, _) => "skiplist",
            }
        }
    };
    Ok(Reply::Bulk(Bytes::from_static(name.as_bytes())))
}

/// OBJECT REFCOUNT: Redis shares the integers 0..10000 (a reference count of `INT_MAX`);
/// every other value has one reference.
fn object_refcount(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    let Some(f) = ctx.lookup(key)? else {
        return Ok(Reply::NullBulk);
    };
    let shared = f.entry.tag == tag::STRING && f.entry.vlen <= 5 && {
        let value = f.entry.string(ctx.tx)?;
        parse_i64(&value).is_some_and(|n| (0..10_000).contains(&n))
    };
    Ok(Reply::Integer(if shared { i64::from(i32::MAX) } else { 1 }))
}

fn object_help() -> Reply {
    const LINES: &[&str] = &[
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>. The returned integer is",
        "    proportional to the logarithm of the recent access frequency of the key.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(
        LINES
            .iter()
            .map(|line| Reply::Simple(Bytes::from_static(line.as_bytes())))
            .collect(),
    )
}

fn randomkey(ctx: &mut Ctx<'_, '_>) -> Result<Reply> {
    let ks = ctx.keyspace()?;
    let now = ctx.now;
    // Keys with an expiry in the past are skipped; a keyspace of nothing but expired keys
    // answers null after a bounded number of tries, as Redis does.
    for _ in 0..100 {
        let mut rng = || super::commands::ctx_random(ctx.rng);
        let Some(f) = dict::random(ctx.tx, ks, &mut rng)? else {
            return Ok(Reply::NullBulk);
        };
        if f.entry.expire == 0 || f.entry.expire > now {
            return Ok(bulk(f.entry.key(ctx.tx)?));
        }
    }
    Ok(Reply::NullBulk)
}
