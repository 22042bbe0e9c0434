//! The `cmsgpack` library Redis gives scripts (lua-cmsgpack as Redis builds it):
//! `cmsgpack.pack(...)`, `cmsgpack.unpack(s)`, `unpack_one(s, offset)` and
//! `unpack_limit(s, limit, offset)`, with its encodings (the smallest integer form, float32
//! when exact, str8 and up, a table is an array when its keys are exactly 1..n), its nesting
//! bound and its error texts.

use mlua::{Lua, MultiValue, Table, Value};

use super::scripting::script_position;

/// Tables nested deeper than this pack as nil, as lua-cmsgpack's LUACMSGPACK_MAX_NESTING.
const NESTING_MAX: usize = 16;
/// Deepest input unpack follows (each level is a stack frame here); deeper input is refused
/// as bad data.
const UNPACK_DEPTH_MAX: usize = 1000;

fn raise(lua: &Lua, text: &str) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{}{text}", script_position(lua)))
}

/// The `cmsgpack` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(raise(
                    lua,
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            let mut out = Vec::new();
            for value in args.iter() {
                pack(value, 0, &mut out)?;
            }
            lua.create_string(out)
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let bytes = input(lua, &args, "unpack")?;
            let (_, values) = unpack(lua, &bytes, 0, 0)?;
            Ok(MultiValue::from_iter(values))
        })?,
    )?;
    t.set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            let bytes = input(lua, &args, "unpack_one")?;
            let offset = offset_arg(&args, 1);
            let (next, values) = unpack(lua, &bytes, 1, offset)?;
            Ok(MultiValue::from_iter(
                std::iter::once(Value::Integer(next)).chain(values),
            ))
        })?,
    )?;
    t.set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let bytes = input(lua, &args, "unpack_limit")?;
            let limit = offset_arg(&args, 1);
            let offset = offset_arg(&args, 2);
            let (next, values) = unpack(lua, &bytes, limit, offset)?;
            Ok(MultiValue::from_iter(
                std::iter::once(Value::Integer(next)).chain(values),
            ))
        })?,
    )?;
    t.set("_NAME", "cmsgpack")?;
    Ok(t)
}

fn input(lua: &Lua, args: &MultiValue, name: &str) -> mlua::Result<Vec<u8>> {
    match args.front() {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(i)) => Ok(i.to_string().into_bytes()),
        other => Err(raise(
            lua,
            &format!(
                "bad argument #1 to '{name}' (string expected, got {})",
                other.map_or("no value", Value::type_name)
            ),
        )),
    }
}

fn offset_arg(args: &MultiValue, at: usize) -> usize {
    match args.get(at) {
        Some(Value::Integer(i)) => usize::try_from(*i).unwrap_or(0),
        Some(Value::Number(n)) if *n >= 0.0 => *n as usize,
        _ => 0,
    }
}

fn pack_unsigned(n: u64, out: &mut Vec<u8>) {
    if n < 128 {
        out.push(n as u8);
    } else if n <= 0xff {
        out.extend_from_slice(&[0xcc, n as u8]);
    } else if n <= 0xffff {
        out.push(0xcd);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else if n <= 0xffff_ffff {
        out.push(0xce);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_integer(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        return pack_unsigned(n.unsigned_abs(), out);
    }
    if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_number(n: f64, out: &mut Vec<u8>) {
    // An integer when `(int64_t)n == n` (what x86 gives for out-of-range values never is).
    let integral =
        (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) && n.trunc() == n;
    if integral {
        return pack_integer(n as i64, out);
    }
    let single = n as f32;
    if f64::from(single) == n {
        out.push(0xca);
        out.extend_from_slice(&single.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_length(len: usize, small: u8, small_max: usize, codes: [u8; 2], out: &mut Vec<u8>) {
    if len <= small_max {
        out.push(small | len as u8);
    } else if len <= 0xffff {
        out.push(codes[0]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(codes[1]);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

/// Whether the table's keys are exactly 1..n (lua-cmsgpack's test), and n.
fn array_length(t: &Table) -> mlua::Result<Option<usize>> {
    let (mut max, mut count) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (key, _) = pair?;
        let index = match key {
            Value::Integer(i) if i > 0 => usize::try_from(i).ok(),
            Value::Number(n) if n > 0.0 && n.trunc() == n && n < 9.0e15 => Some(n as usize),
            _ => None,
        };
        let Some(index) = index else {
            return Ok(None);
        };
        max = max.max(index);
        count += 1;
    }
    Ok((max == count).then_some(max))
}

fn pack(value: &Value, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => pack_integer(*i, out),
        Value::Number(n) => pack_number(*n, out),
        Value::String(s) => {
            let bytes = s.as_bytes();
            let len = bytes.len();
            if len < 32 {
                out.push(0xa0 | len as u8);
            } else if len <= 0xff {
                out.extend_from_slice(&[0xd9, len as u8]);
            } else {
                pack_length(len, 0xa0, 0, [0xda, 0xdb], out);
            }
            out.extend_from_slice(&bytes);
        }
        Value::Table(t) if depth < NESTING_MAX => match array_length(t)? {
            Some(len) => {
                pack_length(len, 0x90, 15, [0xdc, 0xdd], out);
                for i in 1..=len {
                    pack(&t.raw_get::<Value>(i)?, depth + 1, out)?;
                }
            }
            None => {
                let pairs: Vec<(Value, Value)> =
                    t.pairs::<Value, Value>().collect::<mlua::Result<_>>()?;
                pack_length(pairs.len(), 0x80, 15, [0xde, 0xdf], out);
                for (k, v) in &pairs {
                    pack(k, depth + 1, out)?;
                    pack(v, depth + 1, out)?;
                }
            }
        },
        // nil, functions, userdata, and tables past the nesting bound.
        _ => out.push(0xc0),
    }
    Ok(())
}

/// Decodes up to `limit` objects (0: all) from `offset`; returns the offset after them (-1
/// at the end of the input) and the values.
fn unpack(lua: &Lua, bytes: &[u8], limit: usize, offset: usize) -> mlua::Result<(i64, Vec<Value>)> {
    let mut reader = Reader {
        lua,
        bytes,
        at: offset.min(bytes.len()),
        depth: 0,
    };
    let mut values = Vec::new();
    while reader.at < bytes.len() && (limit == 0 || values.len() < limit) {
        values.push(reader.value()?);
    }
    let next = if reader.at >= bytes.len() {
        -1
    } else {
        i64::try_from(reader.at).unwrap_or(-1)
    };
    Ok((next, values))
}

struct Reader<'a> {
    lua: &'a Lua,
    bytes: &'a [u8],
    at: usize,
    depth: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> mlua::Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(raise(self.lua, "Missing bytes in input."));
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn uint(&mut self, n: usize) -> mlua::Result<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn int(&mut self, n: usize) -> mlua::Result<i64> {
        let raw = self.uint(n)?;
        let shift = 64 - 8 * n as u32;
        Ok(((raw << shift) as i64) >> shift)
    }

    fn string(&mut self, len: usize) -> mlua::Result<Value> {
        let bytes = self.take(len)?.to_vec();
        Ok(Value::String(self.lua.create_string(bytes)?))
    }

    fn array(&mut self, len: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        for i in 1..=len {
            let value = self.value()?;
            t.raw_set(i, value)?;
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, len: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        for _ in 0..len {
            let key = self.value()?;
            let value = self.value()?;
            if !matches!(key, Value::Nil) {
                t.raw_set(key, value)?;
            }
        }
        Ok(Value::Table(t))
    }

    fn value(&mut self) -> mlua::Result<Value> {
        self.depth += 1;
        let value = self.value_at_depth();
        self.depth -= 1;
        value
    }

    fn value_at_depth(&mut self) -> mlua::Result<Value> {
        if self.depth > UNPACK_DEPTH_MAX {
            return Err(raise(self.lua, "Bad data format in input."));
        }
        let code = self.take(1)?[0];
        let number = |n: f64| Ok(Value::Number(n));
        match code {
            0x00..=0x7f => Ok(Value::Integer(i64::from(code))),
            0x80..=0x8f => self.map(usize::from(code & 0x0f)),
            0x90..=0x9f => self.array(usize::from(code & 0x0f)),
            0xa0..=0xbf => self.string(usize::from(code & 0x1f)),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xca => {
                let raw = self.uint(4)? as u32;
                number(f64::from(f32::from_bits(raw)))
            }
            0xcb => number(f64::from_bits(self.uint(8)?)),
            0xcc => number(self.uint(1)? as f64),
            0xcd => number(self.uint(2)? as f64),
            0xce => number(self.uint(4)? as f64),
            0xcf => number(self.uint(8)? as f64),
            0xd0 => number(self.int(1)? as f64),
            0xd1 => number(self.int(2)? as f64),
            0xd2 => number(self.int(4)? as f64),
            0xd3 => number(self.int(8)? as f64),
            0xd9 => {
                let len = self.uint(1)? as usize;
                self.string(len)
            }
            0xda => {
                let len = self.uint(2)? as usize;
                self.string(len)
            }
            0xdb => {
                let len = self.uint(4)? as usize;
                self.string(len)
            }
            0xdc => {
                let len = self.uint(2)? as usize;
                self.array(len)
            }
            0xdd => {
                let len = self.uint(4)? as usize;
                self.array(len)
            }
            0xde => {
                let len = self.uint(2)? as usize;
                self.map(len)
            }
            0xdf => {
                let len = self.uint(4)? as usize;
                self.map(len)
            }
            0xe0..=0xff => Ok(Value::Integer(i64::from(code as i8))),
            _ => Err(raise(self.lua, "Bad data format in input.")),
        }
    }
}
