//! BITFIELD and BITFIELD_RO: signed and unsigned integers of 1 to 64 bits (unsigned: 63) at
//! any bit offset of a string, read (GET), written (SET, replying the old value) and
//! incremented (INCRBY, replying the new value) under an overflow policy (OVERFLOW WRAP, the
//! default; SAT; FAIL, which writes nothing and replies null). Redis 7.0's `bitops.c`: every
//! operation is parsed before any runs, bits are numbered from the most significant bit of
//! byte 0, bytes past the string read as zero, and a command with a SET or INCRBY pads the
//! string with zeroes up to its highest written bit even when an operation fails.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_i64, CommandId as Id, Reply};

use super::commands::{err, wrongtype};
use super::dict::tag;
use super::keyspace::{typed, Ctx, WrongType};
use super::limits::VALUE_BYTES_MAX;
use super::store::Result;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Get,
    Set(i64),
    Incrby(i64),
}

#[derive(Clone, Copy, Debug)]
struct Field {
    op: Op,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

/// Parses `i8`, `u16`...: Redis's error for anything else.
fn field_type(arg: &[u8]) -> Option<(bool, u32)> {
    let (&first, digits) = arg.split_first()?;
    let signed = match first.to_ascii_lowercase() {
        b'i' => true,
        b'u' => false,
        _ => return None,
    };
    let bits = u32::try_from(parse_i64(digits)?).ok()?;
    let max = if signed { 64 } else { 63 };
    (1..=max).contains(&bits).then_some((signed, bits))
}

/// A bit offset, or `#n` for the n-th field of this type's width.
fn field_offset(arg: &[u8], bits: u32) -> Option<u64> {
    let (by_index, digits) = match arg.first() {
        Some(b'#') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let n = parse_i64(digits)?;
    let offset = if by_index {
        n.checked_mul(i64::from(bits))?
    } else {
        n
    };
    u64::try_from(offset)
        .ok()
        .filter(|&offset| offset >> 3 < VALUE_BYTES_MAX)
}

fn parse(a: &[Bytes], read_only: bool) -> std::result::Result<Vec<Field>, Reply> {
    const TYPE: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is \
                        not supported but i64 is.";
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < a.len() {
        let left = a.len() - j - 1;
        let word = &a[j];
        let (kind, needs) = if word.eq_ignore_ascii_case(b"get") {
            (0, 2)
        } else if word.eq_ignore_ascii_case(b"set") {
            (1, 3)
        } else if word.eq_ignore_ascii_case(b"incrby") {
            (2, 3)
        } else if word.eq_ignore_ascii_case(b"overflow") {
            (3, 1)
        } else {
            return Err(err(errors::SYNTAX));
        };
        if left < needs {
            return Err(err(errors::SYNTAX));
        }
        if kind == 3 {
            let policy = &a[j + 1];
            overflow = if policy.eq_ignore_ascii_case(b"wrap") {
                Overflow::Wrap
            } else if policy.eq_ignore_ascii_case(b"sat") {
                Overflow::Sat
            } else if policy.eq_ignore_ascii_case(b"fail") {
                Overflow::Fail
            } else {
                return Err(err("ERR Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        }
        let Some((signed, bits)) = field_type(&a[j + 1]) else {
            return Err(err(TYPE));
        };
        let Some(offset) = field_offset(&a[j + 2], bits) else {
            return Err(err("ERR bit offset is not an integer or out of range"));
        };
        let op = match kind {
            0 => Op::Get,
            _ => {
                let Some(value) = parse_i64(&a[j + 3]) else {
                    return Err(err(errors::NOT_INTEGER));
                };
                if read_only {
                    return Err(err("ERR BITFIELD_RO only supports the GET subcommand"));
                }
                if kind == 1 {
                    Op::Set(value)
                } else {
                    Op::Incrby(value)
                }
            }
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        });
        j += needs + 1;
    }
    Ok(fields)
}

/// BITFIELD / BITFIELD_RO.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    let fields = match parse(a, spec.id == Id::BitfieldRo) {
        Ok(fields) => fields,
        Err(reply) => return Ok(reply),
    };
    let highest_write = fields
        .iter()
        .filter(|f| !matches!(f.op, Op::Get))
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max();
    let found = match highest_write {
        Some(_) => ctx.lookup_write(&a[1])?,
        None => ctx.lookup(&a[1])?,
    };
    let found = match typed(found, tag::STRING) {
        Ok(found) => found,
        Err(WrongType) => return Ok(wrongtype()),
    };
    let mut value = match &found {
        Some(f) => f.entry.string(ctx.tx)?,
        None => Vec::new(),
    };
    if let Some(bit) = highest_write {
        let bytes = usize::try_from(bit >> 3).unwrap_or(usize::MAX) + 1;
        if value.len() < bytes {
            value.resize(bytes, 0);
        }
    }
    let mut replies = Vec::with_capacity(fields.len());
    for field in &fields {
        replies.push(apply(&mut value, field));
    }
    if highest_write.is_some() {
        ctx.put_string(&a[1], found.as_ref(), &value, None)?;
    }
    Ok(Reply::Array(replies))
}

/// Runs one operation on the string's bytes; its reply.
fn apply(value: &mut [u8], f: &Field) -> Reply {
    let old = read(value, f.offset, f.bits, f.signed);
    let (new, reply_value) = match f.op {
        Op::Get => return Reply::Integer(old),
        Op::Set(v) => (checked(v, 0, f), old),
        Op::Incrby(by) => {
            let new = checked(old, by, f);
            (new, new.unwrap_or(0))
        }
    };
    match new {
        None => Reply::NullBulk,
        Some(new) => {
            write(value, f.offset, f.bits, new as u64);
            match f.op {
                Op::Incrby(_) => Reply::Integer(new),
                _ => Reply::Integer(reply_value),
            }
        }
    }
}

/// `value + incr` in the field's range under its overflow policy; `None` when it overflows
/// under FAIL. Redis's `checkSignedBitfieldOverflow` / `checkUnsignedBitfieldOverflow`
/// statement for statement, their 64-bit wrapping included: in Redis, SET i13 of
/// -9223372036854775808 under SAT stores the maximum (`max - value` wraps negative, which
/// reads as an overflow upwards), and so does mnemo.
fn checked(value: i64, incr: i64, f: &Field) -> Option<i64> {
    let bits = f.bits;
    // Some(true): over the maximum; Some(false): under the minimum.
    let (out_of_range, min, max) = if f.signed {
        let max = if bits == 64 {
            i64::MAX
        } else {
            (1i64 << (bits - 1)) - 1
        };
        let min = -max - 1;
        let max_incr = max.wrapping_sub(value);
        let min_incr = min.wrapping_sub(value);
        let high = value > max
            || (bits != 64 && incr > max_incr)
            || (value >= 0 && incr > 0 && incr > max_incr);
        let low = value < min
            || (bits != 64 && incr < min_incr)
            || (value < 0 && incr < 0 && incr < min_incr);
        (
            if high {
                Some(true)
            } else if low {
                Some(false)
            } else {
                None
            },
            min,
            max,
        )
    } else {
        let unsigned = value as u64;
        let max = (1u64 << bits) - 1;
        let max_incr = max.wrapping_sub(unsigned) as i64;
        let min_incr = (unsigned as i64).wrapping_neg();
        let high = unsigned > max || (incr > 0 && incr > max_incr);
        let low = incr < 0 && incr < min_incr;
        (
            if high {
                Some(true)
            } else if low {
                Some(false)
            } else {
                None
            },
            0,
            max as i64,
        )
    };
    match (out_of_range, f.overflow) {
        (None, _) => Some(value.wrapping_add(incr)),
        (Some(_), Overflow::Fail) => None,
        (Some(true), Overflow::Sat) => Some(max),
        (Some(false), Overflow::Sat) => Some(min),
        (Some(_), Overflow::Wrap) => Some(wrap(
            (value as u64).wrapping_add(incr as u64),
            bits,
            f.signed,
        )),
    }
}

/// The low `bits` of `raw`, sign-extended for a signed field.
fn wrap(raw: u64, bits: u32, signed: bool) -> i64 {
    if bits == 64 {
        return raw as i64;
    }
    let mask = u64::MAX << bits;
    if signed && raw & (1u64 << (bits - 1)) != 0 {
        (raw | mask) as i64
    } else {
        (raw & !mask) as i64
    }
}

/// The field at bit `offset`: bytes past the end read as zero.
fn read(value: &[u8], offset: u64, bits: u32, signed: bool) -> i64 {
    let mut raw: u64 = 0;
    for j in 0..u64::from(bits) {
        let bit = offset + j;
        let byte = usize::try_from(bit >> 3)
            .ok()
            .and_then(|i| value.get(i))
            .copied()
            .unwrap_or(0);
        raw = (raw << 1) | u64::from((byte >> (7 - (bit & 7))) & 1);
    }
    wrap(raw, bits, signed)
}

/// Writes the low `bits` of `raw` at bit `offset` (the string is long enough).
fn write(value: &mut [u8], offset: u64, bits: u32, raw: u64) {
    for j in 0..u64::from(bits) {
        let on = (raw >> (u64::from(bits) - 1 - j)) & 1 == 1;
        let bit = offset + j;
        let Some(byte) = usize::try_from(bit >> 3)
            .ok()
            .and_then(|i| value.get_mut(i))
        else {
            continue;
        };
        let mask = 0x80u8 >> (bit & 7);
        if on {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(signed: bool, bits: u32, overflow: Overflow) -> Field {
        Field {
            op: Op::Get,
            signed,
            bits,
            offset: 0,
            overflow,
        }
    }

    #[test]
    fn reads_and_writes_big_endian_bits() {
        let mut value = vec![0u8; 3];
        write(&mut value, 4, 8, 0xab);
        assert_eq!(value, [0x0a, 0xb0, 0]);
        assert_eq!(read(&value, 4, 8, false), 0xab);
        assert_eq!(read(&value, 4, 8, true), 0xab_u8 as i8 as i64);
        assert_eq!(read(&value, 20, 16, false), 0, "past the end reads zero");
    }

    /// Values from redis-server 7.0 (BITFIELD k OVERFLOW x INCRBY type 0 n).
    #[test]
    fn overflow_policies_match_redis() {
        let wrap = field(false, 8, Overflow::Wrap);
        assert_eq!(checked(250, 10, &wrap), Some(4));
        assert_eq!(checked(5, -10, &wrap), Some(251));
        let sat = field(true, 8, Overflow::Sat);
        assert_eq!(checked(120, 10, &sat), Some(127));
        assert_eq!(checked(-120, -10, &sat), Some(-128));
        let fail = field(true, 8, Overflow::Fail);
        assert_eq!(checked(120, 10, &fail), None);
        assert_eq!(checked(120, 7, &fail), Some(127));
        let wrap_signed = field(true, 8, Overflow::Wrap);
        assert_eq!(checked(127, 1, &wrap_signed), Some(-128));
        let wide = field(true, 64, Overflow::Wrap);
        assert_eq!(checked(i64::MAX, 1, &wide), Some(i64::MIN));
        let set_unsigned = field(false, 4, Overflow::Wrap);
        assert_eq!(checked(-1, 0, &set_unsigned), Some(15));
        let quirk = field(true, 13, Overflow::Sat);
        assert_eq!(checked(i64::MIN, 0, &quirk), Some(4095));
    }

    #[test]
    fn types_and_offsets() {
        assert_eq!(field_type(b"i64"), Some((true, 64)));
        assert_eq!(field_type(b"U63"), Some((false, 63)));
        assert_eq!(field_type(b"u64"), None);
        assert_eq!(field_type(b"i0"), None);
        assert_eq!(field_offset(b"#3", 8), Some(24));
        assert_eq!(field_offset(b"-1", 8), None);
    }
}
