//! Bitmaps (SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP) and LCS: commands on string values read
//! as bit arrays (bit 0 is the most significant bit of byte 0) or byte strings, with Redis
//! 7.0's argument checks, ranges and replies.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::{errors, parse_i64, Reply};

use super::commands::{bulk, eq, err, int, wrongtype};
use super::dict::{tag, Found};
use super::keyspace::{Ctx, WrongType};
use super::limits::VALUE_BYTES_MAX;
use super::store::{self, Result};

const BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";

/// A bit offset argument: 0 up to the last bit of the largest string.
fn bit_offset(arg: &[u8]) -> Option<u64> {
    parse_i64(arg)
        .and_then(|v| u64::try_from(v).ok())
        .filter(|&v| v >> 3 < VALUE_BYTES_MAX)
}

/// The string at `key` for a read: `Ok(None)` if missing.
fn read_string(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
) -> Result<std::result::Result<Option<Vec<u8>>, WrongType>> {
    Ok(
        match super::keyspace::typed(ctx.lookup(key)?, tag::STRING) {
            Ok(Some(f)) => Ok(Some(f.entry.string(ctx.tx)?)),
            Ok(None) => Ok(None),
            Err(w) => Err(w),
        },
    )
}

pub fn setbit(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(offset) = bit_offset(&a[2]) else {
        return Ok(err(BIT_OFFSET));
    };
    let on = match parse_i64(&a[3]) {
        Some(0) => false,
        Some(1) => true,
        _ => return Ok(err("ERR bit is not an integer or out of range")),
    };
    let found = match super::keyspace::typed(ctx.lookup_write(&a[1])?, tag::STRING) {
        Ok(found) => found,
        Err(WrongType) => return Ok(wrongtype()),
    };
    let byte = (offset >> 3) as usize;
    let mask = 0x80u8 >> (offset & 7);
    let mut value = match &found {
        Some(f) => f.entry.string(ctx.tx)?,
        None => Vec::new(),
    };
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let old = value[byte] & mask != 0;
    if on {
        value[byte] |= mask;
    } else {
        value[byte] &= !mask;
    }
    write_string(ctx, &a[1], found.as_ref(), &value)?;
    Ok(Reply::Integer(i64::from(old)))
}

fn write_string(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    found: Option<&Found>,
    value: &[u8],
) -> Result<()> {
    ctx.put_string(key, found, value, None)
}

pub fn getbit(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let Some(offset) = bit_offset(&a[2]) else {
        return Ok(err(BIT_OFFSET));
    };
    let found = typed!(ctx, ctx.lookup(&a[1])?, tag::STRING);
    let Some(f) = found else {
        return Ok(Reply::Integer(0));
    };
    let byte = offset >> 3;
    if byte >= f.entry.vlen {
        return Ok(Reply::Integer(0));
    }
    let at = if f.entry.is_inline() {
        f.entry.inline_at()
    } else {
        f.entry.val
    };
    let mut b = [0u8; 1];
    store::read_into(ctx.tx, at + byte, &mut b)?;
    Ok(Reply::Integer(i64::from(
        b[0] & (0x80 >> (offset & 7)) != 0,
    )))
}

/// A range of bits `[first, last]` of a string, from BITCOUNT's and BITPOS's start, end and
/// unit, normalised as Redis does; `None` when it is empty.
fn bit_range(start: i64, end: i64, bits: bool, len: u64) -> Option<(u64, u64)> {
    let total = i64::try_from(len)
        .unwrap_or(i64::MAX)
        .saturating_mul(if bits { 8 } else { 1 });
    let mut start = if start < 0 {
        total.saturating_add(start)
    } else {
        start
    };
    let mut end = if end < 0 {
        total.saturating_add(end)
    } else {
        end
    };
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    if start > end {
        return None;
    }
    let (start, end) = (start as u64, end as u64);
    Some(if bits {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    })
}

fn bit_at(value: &[u8], bit: u64) -> bool {
    value
        .get((bit >> 3) as usize)
        .is_some_and(|byte| byte & (0x80 >> (bit & 7)) != 0)
}

fn count_bits(value: &[u8], first: u64, last: u64) -> u64 {
    let (first_byte, last_byte) = ((first >> 3) as usize, (last >> 3) as usize);
    let mut count: u64 = value[first_byte..=last_byte]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    for bit in (first_byte as u64 * 8)..first {
        count -= u64::from(bit_at(value, bit));
    }
    for bit in last + 1..(last_byte as u64 * 8 + 8) {
        count -= u64::from(bit_at(value, bit));
    }
    count
}

/// BITCOUNT's and BITPOS's unit argument: `Some(true)` for BIT.
fn unit(arg: Option<&Bytes>) -> Option<bool> {
    match arg {
        None => Some(false),
        Some(u) if eq(u, "bit") => Some(true),
        Some(u) if eq(u, "byte") => Some(false),
        Some(_) => None,
    }
}

/// BITCOUNT. Redis 7.0 looks the key up before it reads the range: a missing key answers 0
/// and a key of another type WRONGTYPE whatever the other arguments.
pub fn bitcount(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let value = match read_string(ctx, &a[1])? {
        Ok(Some(value)) => value,
        Ok(None) => return Ok(Reply::Integer(0)),
        Err(WrongType) => return Ok(wrongtype()),
    };
    let len = value.len() as u64;
    let bits = match a.len() {
        2 => bit_range(0, -1, false, len),
        4 | 5 => {
            let (Some(start), Some(end)) = (parse_i64(&a[2]), parse_i64(&a[3])) else {
                return Ok(err(errors::NOT_INTEGER));
            };
            let Some(bits) = unit(a.get(4)) else {
                return Ok(err(errors::SYNTAX));
            };
            if start < 0 && end < 0 && start > end {
                None
            } else {
                bit_range(start, end, bits, len)
            }
        }
        _ => return Ok(err(errors::SYNTAX)),
    };
    Ok(int(bits.map_or(0, |(first, last)| {
        count_bits(&value, first, last)
    })))
}

pub fn bitpos(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let bit = match parse_i64(&a[2]) {
        None => return Ok(err(errors::NOT_INTEGER)),
        Some(b @ (0 | 1)) => b == 1,
        Some(_) => return Ok(err("ERR The bit argument must be 1 or 0.")),
    };
    let value = match read_string(ctx, &a[1])? {
        Ok(Some(value)) => value,
        Ok(None) => return Ok(Reply::Integer(if bit { -1 } else { 0 })),
        Err(WrongType) => return Ok(wrongtype()),
    };
    let len = value.len() as u64;
    let (range, end_given) = match a.len() {
        3 => (bit_range(0, -1, false, len), false),
        4..=6 => {
            let Some(start) = parse_i64(&a[3]) else {
                return Ok(err(errors::NOT_INTEGER));
            };
            let Some(bits) = unit(a.get(5)) else {
                return Ok(err(errors::SYNTAX));
            };
            let end = match a.get(4) {
                Some(end) => match parse_i64(end) {
                    Some(end) => end,
                    None => return Ok(err(errors::NOT_INTEGER)),
                },
                None => -1,
            };
            (bit_range(start, end, bits, len), a.len() >= 5)
        }
        _ => return Ok(err(errors::SYNTAX)),
    };
    let Some((first, last)) = range else {
        return Ok(Reply::Integer(-1));
    };
    let found = (first..=last).find(|&b| bit_at(&value, b) == bit);
    Ok(Reply::Integer(match found {
        Some(at) => i64::try_from(at).unwrap_or(i64::MAX),
        // No clear bit in range: past the end of the string counts as clear, unless the
        // range's end was given.
        None if !bit && !end_given => i64::try_from(last + 1).unwrap_or(i64::MAX),
        None => -1,
    }))
}

pub fn bitop(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    #[derive(PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = if eq(&a[1], "and") {
        Op::And
    } else if eq(&a[1], "or") {
        Op::Or
    } else if eq(&a[1], "xor") {
        Op::Xor
    } else if eq(&a[1], "not") {
        Op::Not
    } else {
        return Ok(err(errors::SYNTAX));
    };
    if op == Op::Not && a.len() != 4 {
        return Ok(err(
            "ERR BITOP NOT must be called with a single source key.",
        ));
    }
    let mut sources = Vec::with_capacity(a.len() - 3);
    for key in &a[3..] {
        match read_string(ctx, key)? {
            Ok(value) => sources.push(value.unwrap_or_default()),
            Err(WrongType) => return Ok(wrongtype()),
        }
    }
    let length = sources.iter().map(Vec::len).max().unwrap_or(0);
    let mut result = vec![0u8; length];
    for (i, out) in result.iter_mut().enumerate() {
        let mut bytes = sources.iter().map(|s| s.get(i).copied().unwrap_or(0));
        let first = bytes.next().unwrap_or(0);
        *out = match op {
            Op::Not => !first,
            Op::And => bytes.fold(first, |acc, b| acc & b),
            Op::Or => bytes.fold(first, |acc, b| acc | b),
            Op::Xor => bytes.fold(first, |acc, b| acc ^ b),
        };
    }
    let target = ctx.lookup_write(&a[2])?;
    if length == 0 {
        if let Some(f) = target {
            ctx.delete(&f)?;
        }
    } else {
        ctx.put_string(&a[2], target.as_ref(), &result, Some(0))?;
    }
    Ok(int(length as u64))
}

/// Transient memory LCS may use for its table (Redis bounds it by `proto-max-bulk-len`).
const LCS_TABLE_BYTES_MAX: u64 = VALUE_BYTES_MAX;

pub fn lcs(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let mut strings = Vec::with_capacity(2);
    for key in &a[1..3] {
        match read_string(ctx, key)? {
            Ok(value) => strings.push(value.unwrap_or_default()),
            Err(WrongType) => return Ok(err("ERR The specified keys must contain string values")),
        }
    }
    let (mut idx, mut len, mut with_len, mut min_len) = (false, false, false, 0u64);
    let mut i = 3;
    while i < a.len() {
        let more = i + 1 < a.len();
        if eq(&a[i], "idx") {
            idx = true;
        } else if eq(&a[i], "len") {
            len = true;
        } else if eq(&a[i], "withmatchlen") {
            with_len = true;
        } else if eq(&a[i], "minmatchlen") && more {
            let Some(n) = parse_i64(&a[i + 1]) else {
                return Ok(err(errors::NOT_INTEGER));
            };
            min_len = u64::try_from(n).unwrap_or(0);
            i += 1;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        i += 1;
    }
    if idx && len {
        return Ok(err(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    let (x, y) = (&strings[0], &strings[1]);
    let cells = (x.len() as u64 + 1).saturating_mul(y.len() as u64 + 1);
    if cells.saturating_mul(4) > LCS_TABLE_BYTES_MAX {
        return Ok(err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let width = y.len() + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=x.len() {
        for j in 1..=y.len() {
            table[i * width + j] = if x[i - 1] == y[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let total = table[x.len() * width + y.len()];
    if len {
        return Ok(Reply::Integer(i64::from(total)));
    }
    // Walk back from the end, as Redis does, collecting the string and the matching ranges
    // (emitted last to first).
    let mut common = vec![0u8; total as usize];
    let mut at = total as usize;
    let mut matches = Vec::new();
    let (mut i, mut j) = (x.len(), y.len());
    let unset = x.len();
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (unset, 0, 0, 0);
    while i > 0 && j > 0 {
        let mut emit = false;
        if x[i - 1] == y[j - 1] {
            common[at - 1] = x[i - 1];
            if a_start == unset {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            at -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != unset {
                emit = true;
            }
        }
        let match_len = (a_end + 1).wrapping_sub(a_start) as u64;
        if emit {
            if idx && (min_len == 0 || match_len >= min_len) {
                let pair = |s: usize, e: usize| Reply::Array(vec![int(s as u64), int(e as u64)]);
                let mut item = vec![pair(a_start, a_end), pair(b_start, b_end)];
                if with_len {
                    item.push(int(match_len));
                }
                matches.push(Reply::Array(item));
            }
            a_start = unset;
        }
    }
    if idx {
        return Ok(Reply::Map(vec![
            (
                Reply::Bulk(Bytes::from_static(b"matches")),
                Reply::Array(matches),
            ),
            (
                Reply::Bulk(Bytes::from_static(b"len")),
                Reply::Integer(i64::from(total)),
            ),
        ]));
    }
    Ok(bulk(common))
}
