//! The `struct` library Redis gives scripts (Roberto Ierusalimschy's struct 0.2 as Redis
//! builds it): `struct.pack(fmt, ...)`, `struct.unpack(fmt, s [, pos])` and
//! `struct.size(fmt)`, with its format options (`<` `>` `=` `!n` `x` `b` `B` `h` `H` `l` `L`
//! `T` `in` `In` `f` `d` `cn` `s`), the sizes of a 64-bit Linux build, its alignment rule and
//! its error texts.

use mlua::{Lua, MultiValue, Table, Value};

use super::scripting::{format_g, script_position};

/// Largest integer size (`i32`), as the library's MAXINTSIZE.
const INT_SIZE_MAX: usize = 32;
/// `!` without a number: the platform's largest alignment.
const ALIGN_MAX: usize = 8;

fn raise(lua: &Lua, text: String) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{}{text}", script_position(lua)))
}

fn arg_error(lua: &Lua, arg: usize, function: &str, text: &str) -> mlua::Error {
    raise(lua, format!("bad argument #{arg} to '{function}' ({text})"))
}

/// Byte order and maximum alignment, changed by `<`, `>`, `=` and `!`.
struct Header {
    little: bool,
    align: usize,
}

impl Header {
    fn new() -> Header {
        Header {
            little: true,
            align: 1,
        }
    }
}

/// A format string being read.
struct Format<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Format<'_> {
    fn next(&mut self) -> Option<u8> {
        let b = self.bytes.get(self.at).copied();
        self.at += usize::from(b.is_some());
        b
    }

    /// A number following an option, or `default`.
    fn number(&mut self, lua: &Lua, default: usize) -> mlua::Result<usize> {
        if !self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut n: usize = 0;
        while let Some(d) = self.bytes.get(self.at).filter(|d| d.is_ascii_digit()) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(usize::from(d - b'0')))
                .filter(|&n| n <= i32::MAX as usize)
                .ok_or_else(|| raise(lua, "integral size overflow".into()))?;
            self.at += 1;
        }
        Ok(n)
    }

    /// The size an option takes (0 for those that take none, and `c0`).
    fn size(&mut self, lua: &Lua, option: u8) -> mlua::Result<usize> {
        Ok(match option {
            b'b' | b'B' => 1,
            b'h' | b'H' => 2,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'f' => 4,
            b'x' => 1,
            b'c' => self.number(lua, 1)?,
            b'i' | b'I' => {
                let size = self.number(lua, 4)?;
                if size > INT_SIZE_MAX {
                    return Err(raise(
                        lua,
                        format!("integral size {size} is larger than limit of {INT_SIZE_MAX}"),
                    ));
                }
                size
            }
            _ => 0,
        })
    }

    /// `<`, `>`, `=`, `!n`, a space; anything else is an invalid option.
    fn control(
        &mut self,
        lua: &Lua,
        option: u8,
        header: &mut Header,
        function: &str,
    ) -> mlua::Result<()> {
        match option {
            b' ' => {}
            b'>' => header.little = false,
            b'<' | b'=' => header.little = true,
            b'!' => {
                let align = self.number(lua, ALIGN_MAX)?;
                if !align.is_power_of_two() {
                    return Err(raise(lua, format!("alignment {align} is not a power of 2")));
                }
                header.align = align;
            }
            other => {
                return Err(arg_error(
                    lua,
                    1,
                    function,
                    &format!("invalid format option '{}'", char::from(other)),
                ))
            }
        }
        Ok(())
    }
}

/// Padding before an item of `size` at offset `len`.
fn padding(len: usize, header: &Header, option: u8, size: usize) -> usize {
    if size == 0 || option == b'c' {
        return 0;
    }
    // The library's arithmetic as it is (meant for powers of two).
    let size = size.min(header.align);
    let low = size.wrapping_sub(1);
    size.wrapping_sub(len & low) & low
}

fn format_arg(lua: &Lua, args: &MultiValue, function: &str) -> mlua::Result<Vec<u8>> {
    match args.front() {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(i)) => Ok(i.to_string().into_bytes()),
        Some(Value::Number(n)) => Ok(format_g(*n, 14).into_bytes()),
        other => Err(arg_error(
            lua,
            1,
            function,
            &format!(
                "string expected, got {}",
                other.map_or("no value", Value::type_name)
            ),
        )),
    }
}

/// `luaL_checknumber`: a number, or a string that reads as one.
fn number_arg(lua: &Lua, args: &MultiValue, arg: usize) -> mlua::Result<f64> {
    let value = args.get(arg - 1);
    let parsed = match value {
        Some(Value::Integer(i)) => Some(*i as f64),
        Some(Value::Number(n)) => Some(*n),
        Some(Value::String(s)) => s.to_str().ok().and_then(|s| s.trim().parse::<f64>().ok()),
        _ => None,
    };
    parsed.ok_or_else(|| {
        arg_error(
            lua,
            arg,
            "pack",
            // `pack` pushes a nil of its own after its arguments: a missing one reads as nil.
            &format!(
                "number expected, got {}",
                value.map_or("nil", Value::type_name)
            ),
        )
    })
}

/// `luaL_checklstring`: a string, or a number printed as Lua prints it.
fn string_arg(lua: &Lua, args: &MultiValue, arg: usize) -> mlua::Result<Vec<u8>> {
    match args.get(arg - 1) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(i)) => Ok(i.to_string().into_bytes()),
        Some(Value::Number(n)) => Ok(format_g(*n, 14).into_bytes()),
        other => Err(arg_error(
            lua,
            arg,
            "pack",
            &format!(
                "string expected, got {}",
                other.map_or("nil", Value::type_name)
            ),
        )),
    }
}

fn put_integer(n: f64, size: usize, little: bool, out: &mut Vec<u8>) {
    // C's conversions: a negative number through a signed 64-bit integer.
    let mut value: u64 = if n < 0.0 { n as i64 as u64 } else { n as u64 };
    let mut bytes = vec![0u8; size];
    for i in 0..size {
        let at = if little { i } else { size - 1 - i };
        bytes[at] = (value & 0xff) as u8;
        value = value.checked_shr(8).unwrap_or(0);
    }
    out.extend_from_slice(&bytes);
}

fn pack(lua: &Lua, args: MultiValue) -> mlua::Result<mlua::LuaString> {
    let format = format_arg(lua, &args, "pack")?;
    let mut fmt = Format {
        bytes: &format,
        at: 0,
    };
    let mut header = Header::new();
    let mut arg = 2;
    let mut out = Vec::new();
    while let Some(option) = fmt.next() {
        let mut size = fmt.size(lua, option)?;
        let pad = padding(out.len(), &header, option, size);
        out.resize(out.len() + pad, 0);
        match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = number_arg(lua, &args, arg)?;
                arg += 1;
                put_integer(n, size, header.little, &mut out);
            }
            b'x' => out.push(0),
            b'f' => {
                let f = number_arg(lua, &args, arg)? as f32;
                arg += 1;
                let bytes = if header.little {
                    f.to_le_bytes()
                } else {
                    f.to_be_bytes()
                };
                out.extend_from_slice(&bytes);
            }
            b'd' => {
                let d = number_arg(lua, &args, arg)?;
                arg += 1;
                let bytes = if header.little {
                    d.to_le_bytes()
                } else {
                    d.to_be_bytes()
                };
                out.extend_from_slice(&bytes);
            }
            b'c' | b's' => {
                let s = string_arg(lua, &args, arg)?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    return Err(arg_error(lua, arg, "pack", "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if option == b's' {
                    out.push(0);
                }
            }
            other => fmt.control(lua, other, &mut header, "pack")?,
        }
    }
    lua.create_string(out)
}

fn get_integer(bytes: &[u8], little: bool, signed: bool) -> f64 {
    let mut value: u64 = 0;
    let ordered: Box<dyn Iterator<Item = &u8>> = if little {
        Box::new(bytes.iter().rev())
    } else {
        Box::new(bytes.iter())
    };
    for &b in ordered {
        value = (value << 8) | u64::from(b);
    }
    if !signed {
        return value as f64;
    }
    let bits = bytes.len() * 8;
    if bits == 0 {
        return 0.0;
    }
    let mask = u64::MAX
        .checked_shl(u32::try_from(bits - 1).unwrap_or(63))
        .unwrap_or(0);
    if value & mask != 0 {
        value |= mask;
    }
    value as i64 as f64
}

fn unpack(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    let format = format_arg(lua, &args, "unpack")?;
    let data: Vec<u8> = match args.get(1) {
        Some(Value::String(s)) => s.as_bytes().to_vec(),
        Some(Value::Integer(i)) => i.to_string().into_bytes(),
        Some(Value::Number(n)) => format_g(*n, 14).into_bytes(),
        other => {
            return Err(arg_error(
                lua,
                2,
                "unpack",
                &format!(
                    "string expected, got {}",
                    other.map_or("no value", Value::type_name)
                ),
            ))
        }
    };
    let start = match args.get(2) {
        None | Some(Value::Nil) => 1,
        Some(Value::Integer(i)) => *i,
        Some(Value::Number(n)) => *n as i64,
        Some(other) => {
            return Err(arg_error(
                lua,
                3,
                "unpack",
                &format!("number expected, got {}", other.type_name()),
            ))
        }
    };
    if start <= 0 {
        return Err(arg_error(lua, 3, "unpack", "offset must be 1 or greater"));
    }
    let mut pos = usize::try_from(start - 1).unwrap_or(usize::MAX);
    let mut fmt = Format {
        bytes: &format,
        at: 0,
    };
    let mut header = Header::new();
    let mut results: Vec<Value> = Vec::new();
    let too_short = |lua: &Lua| arg_error(lua, 2, "unpack", "data string too short");
    while let Some(option) = fmt.next() {
        let mut size = fmt.size(lua, option)?;
        pos = pos.saturating_add(padding(pos, &header, option, size));
        if size > data.len() || pos > data.len() - size {
            return Err(too_short(lua));
        }
        match option {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = get_integer(
                    &data[pos..pos + size],
                    header.little,
                    option.is_ascii_lowercase(),
                );
                results.push(Value::Number(n));
            }
            b'x' => {}
            b'f' => {
                let mut raw = [0u8; 4];
                raw.copy_from_slice(&data[pos..pos + 4]);
                let f = if header.little {
                    f32::from_le_bytes(raw)
                } else {
                    f32::from_be_bytes(raw)
                };
                results.push(Value::Number(f64::from(f)));
            }
            b'd' => {
                let mut raw = [0u8; 8];
                raw.copy_from_slice(&data[pos..pos + 8]);
                let d = if header.little {
                    f64::from_le_bytes(raw)
                } else {
                    f64::from_be_bytes(raw)
                };
                results.push(Value::Number(d));
            }
            b'c' => {
                if size == 0 {
                    let previous = match results.last() {
                        Some(Value::Number(n)) if *n >= 0.0 => Some(*n as usize),
                        Some(Value::Integer(i)) => usize::try_from(*i).ok(),
                        _ => None,
                    };
                    let Some(previous) = previous else {
                        return Err(raise(lua, "format 'c0' needs a previous size".into()));
                    };
                    results.pop();
                    size = previous;
                    if size > data.len() || pos > data.len() - size {
                        return Err(too_short(lua));
                    }
                }
                results.push(Value::String(lua.create_string(&data[pos..pos + size])?));
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err(raise(lua, "unfinished string in data".into()));
                };
                results.push(Value::String(lua.create_string(&data[pos..pos + end])?));
                size = end + 1;
            }
            other => fmt.control(lua, other, &mut header, "unpack")?,
        }
        pos += size;
    }
    results.push(Value::Integer(i64::try_from(pos).unwrap_or(i64::MAX) + 1));
    Ok(MultiValue::from_iter(results))
}

fn size(lua: &Lua, args: MultiValue) -> mlua::Result<i64> {
    let format = format_arg(lua, &args, "size")?;
    let mut fmt = Format {
        bytes: &format,
        at: 0,
    };
    let mut header = Header::new();
    let mut pos = 0usize;
    while let Some(option) = fmt.next() {
        let size = fmt.size(lua, option)?;
        pos += padding(pos, &header, option, size);
        if option == b's' {
            return Err(arg_error(lua, 1, "size", "option 's' has no fixed size"));
        }
        if option == b'c' && size == 0 {
            return Err(arg_error(lua, 1, "size", "option 'c0' has no fixed size"));
        }
        if !option.is_ascii_alphanumeric() {
            fmt.control(lua, option, &mut header, "size")?;
        }
        pos += size;
    }
    Ok(i64::try_from(pos).unwrap_or(i64::MAX))
}

/// The `struct` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("pack", lua.create_function(pack)?)?;
    t.set("unpack", lua.create_function(unpack)?)?;
    t.set("size", lua.create_function(size)?)?;
    Ok(t)
}
