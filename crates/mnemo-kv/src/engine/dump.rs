//! DUMP and RESTORE in Redis's own format: a value in RDB encoding, then the RDB version (2
//! bytes, little-endian) and a CRC-64 of everything before (8 bytes, little-endian; Jones
//! polynomial, reflected, as Redis's `crc64.c`). So a payload DUMPed by mnemo RESTOREs into
//! Redis 7.0 and one DUMPed by Redis 7.0 RESTOREs into mnemo.
//!
//! What DUMP writes: a string as Redis writes one of up to 20 bytes (an integer of 32 bits
//! as an integer encoding, otherwise the bytes; longer strings are never LZF-compressed, so
//! their payload can be longer than Redis's, and equal once loaded); a list, set, hash or
//! sorted set in the general encodings every RDB reader knows (`RDB_TYPE_LIST`, `SET`,
//! `HASH`, `ZSET_2`, the sorted set from its highest score down, as Redis saves it).
//!
//! What RESTORE reads: RDB versions up to 10 (Redis 7.0's) and the encodings Redis 7.0
//! writes: strings (raw, integer, LZF), lists (quicklist 2 of listpacks, and the older plain
//! list), sets (plain, intset), hashes (plain, listpack), sorted sets (`ZSET`, `ZSET_2`,
//! listpack). Streams, modules and the ziplist encodings of Redis before 7.0 answer
//! "Bad data format". Every byte is checked before use: a payload never makes it panic.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::{self, CommandSpec};
use mnemo_resp::{errors, parse_i64, CommandId as Id, Reply};

use super::commands::{self as cmds, err};
use super::dict::{self, tag};
use super::keyspace::Ctx;
use super::list;
use super::store::Result;

/// The RDB version of Redis 7.0: what DUMP writes and the newest RESTORE reads.
const RDB_VERSION: u16 = 10;

const TYPE_STRING: u8 = 0;
const TYPE_LIST: u8 = 1;
const TYPE_SET: u8 = 2;
const TYPE_ZSET: u8 = 3;
const TYPE_HASH: u8 = 4;
const TYPE_ZSET_2: u8 = 5;
const TYPE_SET_INTSET: u8 = 11;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_ZSET_LISTPACK: u8 = 17;
const TYPE_LIST_QUICKLIST_2: u8 = 18;

const CHECKSUM: &str = "ERR DUMP payload version or checksum are wrong";
const BAD_DATA: &str = "ERR Bad data format";

/// Redis's CRC-64 (Jones polynomial 0xad93d23594c935a9, reflected in and out, initial value
/// 0, no final xor), one table lookup per byte.
pub fn crc64(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |crc, &byte| {
        CRC64_TABLE[usize::from((crc as u8) ^ byte)] ^ (crc >> 8)
    })
}

const CRC64_TABLE: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x95ac_9329_ac4b_c9b5
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// A value read out of the keyspace or out of a payload.
#[derive(Debug, PartialEq)]
pub enum Value {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    Zset(Vec<(Vec<u8>, f64)>),
}

/// DUMP key: the payload, or a null bulk for a missing key.
pub fn dump(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Reply> {
    Ok(match read_value(ctx, key)? {
        None => Reply::NullBulk,
        Some(value) => Reply::Bulk(Bytes::from(encode(&value))),
    })
}

/// The value of a live key.
pub fn read_value(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Option<Value>> {
    let Some(found) = ctx.lookup(key)? else {
        return Ok(None);
    };
    let e = found.entry;
    Ok(Some(match e.tag {
        tag::STRING => Value::String(e.string(ctx.tx)?),
        tag::LIST => Value::List(
            list::elements(ctx.tx, e.val)?
                .into_iter()
                .map(|element| list::value(ctx.tx, element))
                .collect::<Result<_>>()?,
        ),
        tag::ZSET => Value::Zset(
            ctx.zindex(e.val)?
                .iter()
                .rev()
                .map(|(score, member)| (member.clone(), score.0))
                .collect(),
        ),
        tag::HASH => {
            let mut pairs = Vec::new();
            dict::for_each(ctx.tx, e.val, |field| {
                pairs.push((field.key(ctx.tx)?, field.string(ctx.tx)?));
                Ok(true)
            })?;
            Value::Hash(pairs)
        }
        _ => {
            let mut members = Vec::new();
            dict::for_each(ctx.tx, e.val, |member| {
                members.push(member.key(ctx.tx)?);
                Ok(true)
            })?;
            Value::Set(members)
        }
    }))
}

/// The payload of `value`: RDB encoding, version, CRC-64.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    match value {
        Value::String(bytes) => {
            out.push(TYPE_STRING);
            put_string(&mut out, bytes);
        }
        Value::List(elements) => {
            out.push(TYPE_LIST);
            put_len(&mut out, elements.len() as u64);
            for element in elements {
                put_string(&mut out, element);
            }
        }
        Value::Set(members) => {
            out.push(TYPE_SET);
            put_len(&mut out, members.len() as u64);
            for member in members {
                put_string(&mut out, member);
            }
        }
        Value::Hash(pairs) => {
            out.push(TYPE_HASH);
            put_len(&mut out, pairs.len() as u64);
            for (field, value) in pairs {
                put_string(&mut out, field);
                put_string(&mut out, value);
            }
        }
        Value::Zset(members) => {
            out.push(TYPE_ZSET_2);
            put_len(&mut out, members.len() as u64);
            for (member, score) in members {
                put_string(&mut out, member);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// An RDB length: 6 bits, 14 bits, or a 32- or 64-bit big-endian number after a marker.
fn put_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.push(0x40 | (len >> 8) as u8);
        out.push(len as u8);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// An RDB string as Redis writes one without compression: a canonical integer of 32 bits
/// (at most 11 bytes) as an integer encoding, anything else as length and bytes.
fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() <= 11 {
        if let Some(v) = parse_i64(bytes).filter(|v| v.to_string().as_bytes() == bytes) {
            if let Ok(v) = i8::try_from(v) {
                out.push(0xc0);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
            if let Ok(v) = i16::try_from(v) {
                out.push(0xc1);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
            if let Ok(v) = i32::try_from(v) {
                out.push(0xc2);
                out.extend_from_slice(&v.to_le_bytes());
                return;
            }
        }
    }
    put_len(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Why a payload was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Too short, a newer RDB version, or the CRC-64 does not match.
    Checksum,
    /// The value's encoding is damaged or not one mnemo reads.
    BadData,
}

/// Checks a payload's footer and decodes its value.
pub fn decode(payload: &[u8]) -> std::result::Result<Value, DecodeError> {
    let Some(body_len) = payload.len().checked_sub(10) else {
        return Err(DecodeError::Checksum);
    };
    let (body, footer) = payload.split_at(body_len);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let mut crc = [0u8; 8];
    crc.copy_from_slice(&footer[2..]);
    if version > RDB_VERSION || crc64(&payload[..body_len + 2]) != u64::from_le_bytes(crc) {
        return Err(DecodeError::Checksum);
    }
    let mut reader = Reader { bytes: body };
    let value = reader.value().ok_or(DecodeError::BadData)?;
    let empty = match &value {
        Value::String(_) => false,
        Value::List(v) | Value::Set(v) => v.is_empty(),
        Value::Hash(v) => v.is_empty(),
        Value::Zset(v) => v.is_empty(),
    };
    if empty {
        return Err(DecodeError::BadData);
    }
    Ok(value)
}

/// A cursor over untrusted bytes: every read is checked; `None` ends the decoding.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// An RDB length; `Err` with the special encoding (0-3) for an encoded string.
    fn len_or_special(&mut self) -> Option<std::result::Result<u64, u8>> {
        let first = self.byte()?;
        Some(match first >> 6 {
            0 => Ok(u64::from(first & 0x3f)),
            1 => Ok(u64::from(first & 0x3f) << 8 | u64::from(self.byte()?)),
            2 if first == 0x80 => {
                let b = self.take(4)?;
                Ok(u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            }
            2 if first == 0x81 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(self.take(8)?);
                Ok(u64::from_be_bytes(b))
            }
            2 => return None,
            _ => Err(first & 0x3f),
        })
    }

    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.len_or_special()?.ok()?).ok()
    }

    /// A count of items each at least one byte long: no more than the bytes left.
    fn count(&mut self) -> Option<usize> {
        self.len().filter(|&n| n <= self.bytes.len())
    }

    fn string(&mut self) -> Option<Vec<u8>> {
        match self.len_or_special()? {
            Ok(len) => Some(self.take(usize::try_from(len).ok()?)?.to_vec()),
            Err(0) => Some(i64::from(self.byte()? as i8).to_string().into_bytes()),
            Err(1) => {
                let b = self.take(2)?;
                Some(i16::from_le_bytes([b[0], b[1]]).to_string().into_bytes())
            }
            Err(2) => {
                let b = self.take(4)?;
                Some(
                    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
                        .to_string()
                        .into_bytes(),
                )
            }
            Err(3) => {
                let compressed_len = self.len()?;
                let len = self.len()?;
                if len > super::limits::VALUE_BYTES_MAX as usize {
                    return None;
                }
                lzf_decompress(self.take(compressed_len)?, len)
            }
            Err(_) => None,
        }
    }

    fn value(&mut self) -> Option<Value> {
        let kind = self.byte()?;
        let value = match kind {
            TYPE_STRING => Value::String(self.string()?),
            TYPE_LIST | TYPE_SET => {
                let n = self.count()?;
                let items = (0..n).map(|_| self.string()).collect::<Option<Vec<_>>>()?;
                if kind == TYPE_LIST {
                    Value::List(items)
                } else {
                    Value::Set(unique(items)?)
                }
            }
            TYPE_HASH => {
                let n = self.count()?;
                let pairs = (0..n)
                    .map(|_| Some((self.string()?, self.string()?)))
                    .collect::<Option<Vec<_>>>()?;
                Value::Hash(unique_pairs(pairs)?)
            }
            TYPE_ZSET | TYPE_ZSET_2 => {
                let n = self.count()?;
                let mut members = Vec::with_capacity(n);
                for _ in 0..n {
                    let member = self.string()?;
                    let score = if kind == TYPE_ZSET_2 {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(self.take(8)?);
                        f64::from_le_bytes(b)
                    } else {
                        self.old_score()?
                    };
                    if score.is_nan() {
                        return None;
                    }
                    members.push((member, score));
                }
                Value::Zset(unique_pairs(members)?)
            }
            TYPE_SET_INTSET => Value::Set(unique(intset(&self.string()?)?)?),
            TYPE_HASH_LISTPACK => {
                let items = listpack(&self.string()?)?;
                if items.len() % 2 != 0 {
                    return None;
                }
                let pairs = items
                    .chunks_exact(2)
                    .map(|pair| (pair[0].clone(), pair[1].clone()))
                    .collect();
                Value::Hash(unique_pairs(pairs)?)
            }
            TYPE_ZSET_LISTPACK => {
                let items = listpack(&self.string()?)?;
                if items.len() % 2 != 0 {
                    return None;
                }
                let mut members = Vec::with_capacity(items.len() / 2);
                for pair in items.chunks_exact(2) {
                    let score = mnemo_resp::parse_f64(&pair[1]).filter(|s| !s.is_nan())?;
                    members.push((pair[0].clone(), score));
                }
                Value::Zset(unique_pairs(members)?)
            }
            TYPE_LIST_QUICKLIST_2 => {
                let nodes = self.count()?;
                let mut elements = Vec::new();
                for _ in 0..nodes {
                    let container = self.len()?;
                    let node = self.string()?;
                    match container {
                        1 => elements.push(node),
                        2 => {
                            let items = listpack(&node)?;
                            if items.is_empty() {
                                return None;
                            }
                            elements.extend(items);
                        }
                        _ => return None,
                    }
                }
                Value::List(elements)
            }
            _ => return None,
        };
        self.bytes.is_empty().then_some(value)
    }

    /// A score of the old sorted-set encoding: a length byte, then the number as text
    /// (253: not a number, 254: +inf, 255: -inf).
    fn old_score(&mut self) -> Option<f64> {
        match self.byte()? {
            253 => Some(f64::NAN),
            254 => Some(f64::INFINITY),
            255 => Some(f64::NEG_INFINITY),
            n => mnemo_resp::parse_f64(self.take(usize::from(n))?),
        }
    }
}

/// Members, refused if one repeats (Redis refuses such a payload too).
fn unique(items: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    items
        .iter()
        .all(|item| seen.insert(item.as_slice()))
        .then_some(())?;
    Some(items)
}

fn unique_pairs<V>(pairs: Vec<(Vec<u8>, V)>) -> Option<Vec<(Vec<u8>, V)>> {
    let mut seen = std::collections::HashSet::with_capacity(pairs.len());
    pairs
        .iter()
        .all(|(key, _)| seen.insert(key.as_slice()))
        .then_some(())?;
    Some(pairs)
}

/// An intset: encoding (2, 4 or 8 bytes per integer), count, then the integers,
/// little-endian.
fn intset(blob: &[u8]) -> Option<Vec<Vec<u8>>> {
    let header = blob.get(..8)?;
    let width = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let count = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    let bytes = width.checked_mul(count)?.checked_add(8)?;
    if !matches!(width, 2 | 4 | 8) || blob.len() != bytes || count == 0 {
        return None;
    }
    let items = blob[8..]
        .chunks_exact(width)
        .map(|b| {
            let v = match width {
                2 => i64::from(i16::from_le_bytes([b[0], b[1]])),
                4 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                _ => i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            };
            v.to_string().into_bytes()
        })
        .collect();
    Some(items)
}

/// The entries of a listpack: total bytes (u32), count (u16), entries (encoding, data,
/// back-length), 0xff. Integers come back as their decimal text.
fn listpack(blob: &[u8]) -> Option<Vec<Vec<u8>>> {
    let header = blob.get(..6)?;
    let total = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if total != blob.len() {
        return None;
    }
    let mut at = 6;
    let mut items = Vec::new();
    loop {
        let first = *blob.get(at)?;
        if first == 0xff {
            break;
        }
        let (item, size) = listpack_entry(blob.get(at..)?)?;
        items.push(item);
        at += size + backlen_size(size);
        if at >= blob.len() {
            return None;
        }
    }
    (at + 1 == blob.len()).then_some(items)
}

/// One listpack entry (without its back-length) and its size.
fn listpack_entry(b: &[u8]) -> Option<(Vec<u8>, usize)> {
    let first = *b.first()?;
    let signed = |raw: u64, bits: u32| -> Vec<u8> {
        let v = if raw >> (bits - 1) & 1 == 1 {
            raw as i64 - (1i64 << bits)
        } else {
            raw as i64
        };
        v.to_string().into_bytes()
    };
    let text = |at: usize, len: usize| -> Option<(Vec<u8>, usize)> {
        Some((b.get(at..at.checked_add(len)?)?.to_vec(), at + len))
    };
    let le = |at: usize, n: usize| -> Option<u64> {
        let bytes = b.get(at..at + n)?;
        Some(bytes.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    match first {
        0x00..=0x7f => Some((first.to_string().into_bytes(), 1)),
        0x80..=0xbf => text(1, usize::from(first & 0x3f)),
        0xc0..=0xdf => {
            let raw = u64::from(first & 0x1f) << 8 | u64::from(*b.get(1)?);
            Some((signed(raw, 13), 2))
        }
        0xe0..=0xef => text(2, usize::from(first & 0x0f) << 8 | usize::from(*b.get(1)?)),
        0xf0 => text(5, usize::try_from(le(1, 4)?).ok()?),
        0xf1 => Some((signed(le(1, 2)?, 16), 3)),
        0xf2 => Some((signed(le(1, 3)?, 24), 4)),
        0xf3 => Some((signed(le(1, 4)?, 32), 5)),
        0xf4 => Some(((le(1, 8)? as i64).to_string().into_bytes(), 9)),
        _ => None,
    }
}

/// Bytes of the back-length after an entry of `size` bytes.
fn backlen_size(size: usize) -> usize {
    match size {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

/// LZF decompression (Redis's `lzf_d.c`) into exactly `len` bytes.
fn lzf_decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    // A back-reference of 2 bytes makes at most 264: no more room than that up front, so a
    // small payload cannot make RESTORE reserve a large buffer it will not fill.
    let mut out: Vec<u8> = Vec::with_capacity(len.min(input.len().saturating_mul(132)));
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            let run = input.get(i..i + ctrl + 1)?;
            out.extend_from_slice(run);
            i += ctrl + 1;
        } else {
            let mut run = ctrl >> 5;
            if run == 7 {
                run += usize::from(*input.get(i)?);
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + usize::from(*input.get(i)?) + 1;
            i += 1;
            let from = out.len().checked_sub(back)?;
            // Byte by byte: a reference may overlap the bytes it produces.
            for at in from..from + run + 2 {
                let byte = *out.get(at)?;
                out.push(byte);
            }
        }
        if out.len() > len {
            return None;
        }
    }
    (out.len() == len).then_some(out)
}

/// RESTORE / RESTORE-ASKING key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f], with
/// Redis's checks in Redis's order. IDLETIME and FREQ are checked and then ignored (mnemo
/// keeps no access times or frequencies).
pub fn restore(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    debug_assert!(matches!(spec.id, Id::Restore | Id::RestoreAsking));
    let mut replace = false;
    let mut absolute = false;
    let (mut idle, mut freq) = (false, false);
    let mut j = 4;
    while j < a.len() {
        let more = a.len() - j - 1;
        let word = &a[j];
        if word.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if word.eq_ignore_ascii_case(b"absttl") {
            absolute = true;
        } else if word.eq_ignore_ascii_case(b"idletime") && more >= 1 && !freq {
            match parse_i64(&a[j + 1]) {
                None => return Ok(err(errors::NOT_INTEGER)),
                Some(v) if v < 0 => return Ok(err("ERR Invalid IDLETIME value, must be >= 0")),
                Some(_) => idle = true,
            }
            j += 1;
        } else if word.eq_ignore_ascii_case(b"freq") && more >= 1 && !idle {
            match parse_i64(&a[j + 1]) {
                None => return Ok(err(errors::NOT_INTEGER)),
                Some(v) if !(0..=255).contains(&v) => {
                    return Ok(err("ERR Invalid FREQ value, must be >= 0 and <= 255"))
                }
                Some(_) => freq = true,
            }
            j += 1;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        j += 1;
    }
    let key = &a[1];
    if !replace && ctx.lookup(key)?.is_some() {
        return Ok(err("BUSYKEY Target key name already exists."));
    }
    let ttl = match parse_i64(&a[2]) {
        None => return Ok(err(errors::NOT_INTEGER)),
        Some(ttl) if ttl < 0 => return Ok(err("ERR Invalid TTL value, must be >= 0")),
        Some(ttl) => ttl,
    };
    let value = match decode(&a[3]) {
        Ok(value) => value,
        Err(DecodeError::Checksum) => return Ok(err(CHECKSUM)),
        Err(DecodeError::BadData) => return Ok(err(BAD_DATA)),
    };
    if let Some(old) = ctx.lookup_write(key)? {
        ctx.delete(&old)?;
    }
    let expire = match ttl {
        0 => None,
        ttl if absolute => Some(ttl),
        ttl => Some(ctx.now.saturating_add(ttl)),
    };
    if expire.is_some_and(|at| at <= ctx.now) {
        return Ok(Reply::ok());
    }
    write_value(ctx, key, &value)?;
    if let Some(at) = expire {
        if let Some(found) = ctx.lookup_raw(key)? {
            ctx.set_expire(&found.entry, at)?;
        }
    }
    Ok(Reply::ok())
}

/// Creates `key` (absent) holding `value`, through the ordinary commands' code (SET, RPUSH,
/// SADD, HSET, ZADD), so that a restored value is built as any other.
fn write_value(ctx: &mut Ctx<'_, '_>, key: &Bytes, value: &Value) -> Result<()> {
    let bytes = |v: &[u8]| Bytes::copy_from_slice(v);
    let (name, mut args): (&[u8], Vec<Bytes>) = match value {
        Value::String(v) => (b"set", vec![bytes(v)]),
        Value::List(items) => (b"rpush", items.iter().map(|v| bytes(v)).collect()),
        Value::Set(items) => (b"sadd", items.iter().map(|v| bytes(v)).collect()),
        Value::Hash(pairs) => (
            b"hset",
            pairs
                .iter()
                .flat_map(|(f, v)| [bytes(f), bytes(v)])
                .collect(),
        ),
        Value::Zset(members) => (
            b"zadd",
            members
                .iter()
                .flat_map(|(m, s)| [Bytes::from(score_text(*s)), bytes(m)])
                .collect(),
        ),
    };
    let Some(spec) = command::lookup(name) else {
        return super::store::corrupt("a command of the table is missing");
    };
    args.insert(0, key.clone());
    args.insert(0, Bytes::from_static(name));
    match cmds::run(ctx, spec, &args)? {
        Reply::Error(text) => super::store::corrupt(format!(
            "restoring a value failed: {}",
            String::from_utf8_lossy(&text)
        )),
        _ => Ok(()),
    }
}

/// A score as ZADD reads it back exactly: Rust's shortest round-trip digits.
fn score_text(score: f64) -> String {
    match score {
        f64::INFINITY => "+inf".to_string(),
        f64::NEG_INFINITY => "-inf".to_string(),
        _ => format!("{score}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_redis() {
        // Redis's crc64.c test vector.
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    /// A payload from redis-server 7.0 (DUMP of SET k hello).
    #[test]
    fn redis_payloads_decode() {
        let hello = b"\x00\x05hello\x0a\x00cr\xdfve4 \x0a";
        assert_eq!(
            decode(hello).map_err(|e| format!("{e:?}")),
            Ok(Value::String(b"hello".to_vec()))
        );
        assert_eq!(encode(&Value::String(b"hello".to_vec())), hello);
    }

    #[test]
    fn round_trips_and_damage() {
        let values = [
            Value::String(b"12345".to_vec()),
            Value::String(vec![7u8; 300]),
            Value::List(vec![b"a".to_vec(), b"-70000".to_vec(), vec![0u8; 70]]),
            Value::Set(vec![b"x".to_vec(), b"1".to_vec()]),
            Value::Hash(vec![(b"f".to_vec(), b"v".to_vec())]),
            Value::Zset(vec![
                (b"m".to_vec(), 1.5),
                (b"n".to_vec(), f64::NEG_INFINITY),
            ]),
        ];
        for value in values {
            let payload = encode(&value);
            assert_eq!(decode(&payload), Ok(value));
            for cut in 0..payload.len() {
                assert!(decode(&payload[..cut]).is_err());
            }
            for at in 0..payload.len() {
                let mut broken = payload.clone();
                broken[at] ^= 0x10;
                assert!(decode(&broken).is_err(), "flipped byte {at}");
            }
        }
    }

    #[test]
    fn listpack_entries() {
        // A listpack of "a", 5, -3 (13-bit), 1000 (13-bit), 70000 (24-bit).
        let mut lp = vec![0, 0, 0, 0, 5, 0];
        lp.extend_from_slice(&[0x81, b'a', 2]);
        lp.extend_from_slice(&[5, 1]);
        lp.extend_from_slice(&[0xdf, 0xfd, 2]);
        lp.extend_from_slice(&[0xc3, 0xe8, 2]);
        lp.extend_from_slice(&[0xf2, 0x70, 0x11, 0x01, 4]);
        lp.push(0xff);
        let total = lp.len() as u32;
        lp[..4].copy_from_slice(&total.to_le_bytes());
        let items = listpack(&lp).map(|items| {
            items
                .into_iter()
                .map(|i| String::from_utf8_lossy(&i).into_owned())
                .collect::<Vec<_>>()
        });
        assert_eq!(
            items,
            Some(vec![
                "a".into(),
                "5".into(),
                "-3".into(),
                "1000".into(),
                "70000".into()
            ])
        );
    }

    /// Random bodies behind a valid footer reach every decoder; none may panic, and what
    /// decodes must encode and decode again to the same value.
    #[test]
    fn random_payloads_never_panic() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let seeds = [
            encode(&Value::List(vec![b"a".to_vec(), b"12".to_vec()])),
            encode(&Value::Zset(vec![(b"m".to_vec(), 2.0)])),
            b"\x12\x01\x02\x0b\x0b\x00\x00\x00\x01\x00\x81a\x02\xff".to_vec(),
        ];
        for round in 0..20_000 {
            let mut body: Vec<u8> = if round % 2 == 0 {
                let seed = &seeds[(next() % 3) as usize];
                let mut body = seed[..seed.len().saturating_sub(10)].to_vec();
                for _ in 0..=next() % 3 {
                    if !body.is_empty() {
                        let at = (next() % body.len() as u64) as usize;
                        body[at] = next() as u8;
                    }
                }
                body
            } else {
                let kind = [0u8, 1, 2, 3, 4, 5, 11, 16, 17, 18][(next() % 10) as usize];
                let len = (next() % 40) as usize;
                std::iter::once(kind)
                    .chain((0..len).map(|_| next() as u8))
                    .collect()
            };
            body.extend_from_slice(&RDB_VERSION.to_le_bytes());
            let crc = crc64(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            if let Ok(value) = decode(&body) {
                assert_eq!(decode(&encode(&value)), Ok(value));
            }
        }
    }

    #[test]
    fn lzf_back_references() {
        // "abcabcabc": literal "abc", then a back-reference of 6 bytes at distance 3.
        let compressed = [2, b'a', b'b', b'c', (4 << 5), 2];
        assert_eq!(lzf_decompress(&compressed, 9), Some(b"abcabcabc".to_vec()));
        assert_eq!(lzf_decompress(&compressed, 8), None);
        assert_eq!(
            lzf_decompress(&[0x20, 5], 2),
            None,
            "reference before the start"
        );
    }
}
