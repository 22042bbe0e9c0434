//! The `cjson` library Redis gives scripts (lua-cjson 2.1 as Redis builds it):
//! `cjson.encode`, `cjson.decode` and `cjson.null`, with its number format (`%.14g`), its
//! escapes (`/` included), its array rule (positive integer keys, not excessively sparse)
//! and its error texts.

use mlua::{LightUserData, Lua, LuaString, MultiValue, Table, Value};

use super::scripting::{format_g, script_position};

/// Nesting past which encode and decode give up, as lua-cjson's default.
const DEPTH_MAX: usize = 1000;

/// `cjson.null`: the light userdata NULL.
fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

/// An error raised from the script's line, as `luaL_error` words it.
fn raise(lua: &Lua, text: String) -> mlua::Error {
    mlua::Error::RuntimeError(format!("{}{text}", script_position(lua)))
}

/// The `cjson` table.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "encode",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise(
                    lua,
                    "bad argument #1 to 'encode' (expected 1 argument)".into(),
                ));
            }
            let mut out = Vec::new();
            encode(lua, &args[0], 0, &mut out)?;
            lua.create_string(out)
        })?,
    )?;
    t.set(
        "decode",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Err(raise(
                    lua,
                    "bad argument #1 to 'decode' (expected 1 argument)".into(),
                ));
            }
            let text: Vec<u8> = match &args[0] {
                Value::String(s) => s.as_bytes().to_vec(),
                Value::Integer(i) => i.to_string().into_bytes(),
                Value::Number(n) => format_g(*n, 14).into_bytes(),
                other => {
                    return Err(raise(
                        lua,
                        format!(
                            "bad argument #1 to 'decode' (string expected, got {})",
                            other.type_name()
                        ),
                    ))
                }
            };
            let mut parser = Parser {
                lua,
                text: &text,
                at: 0,
                error_at: None,
            };
            let value = parser.value(0)?;
            let (token, start) = parser.token()?;
            if token != Token::End {
                return Err(parser.expected("the end", token, start));
            }
            Ok(value)
        })?,
    )?;
    t.set("null", null())?;
    t.set("_NAME", "cjson")?;
    t.set("_VERSION", "2.1.0")?;
    Ok(t)
}

fn encode_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => {
                out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
            }
            b => out.push(b),
        }
    }
    out.push(b'"');
}

fn encode_number(lua: &Lua, n: f64, out: &mut Vec<u8>) -> mlua::Result<()> {
    if !n.is_finite() {
        return Err(raise(
            lua,
            "Cannot serialise number: must not be NaN or Inf".into(),
        ));
    }
    out.extend_from_slice(format_g(n, 14).as_bytes());
    Ok(())
}

/// The table's array length, lua-cjson's way: `Some(max)` if every key is a positive
/// integer (and the array is not excessively sparse), `None` for an object.
fn array_length(lua: &Lua, t: &Table) -> mlua::Result<Option<usize>> {
    let mut max = 0usize;
    let mut count = 0usize;
    for pair in t.pairs::<Value, Value>() {
        let (key, _) = pair?;
        let index = match key {
            Value::Integer(i) if i >= 1 => usize::try_from(i).ok(),
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 && n < 9.0e15 => Some(n as usize),
            _ => None,
        };
        let Some(index) = index else {
            return Ok(None);
        };
        max = max.max(index);
        count += 1;
    }
    if max > 10 && max > count * 2 {
        return Err(raise(
            lua,
            "Cannot serialise table: excessively sparse array".into(),
        ));
    }
    Ok((max > 0).then_some(max))
}

fn encode(lua: &Lua, value: &Value, depth: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => encode_number(lua, *i as f64, out)?,
        Value::Number(n) => encode_number(lua, *n, out)?,
        Value::String(s) => encode_string(&s.as_bytes(), out),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth > DEPTH_MAX {
                return Err(raise(
                    lua,
                    format!("Cannot serialise, excessive nesting ({depth})"),
                ));
            }
            match array_length(lua, t)? {
                Some(len) => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        encode(lua, &t.raw_get::<Value>(i)?, depth, out)?;
                    }
                    out.push(b']');
                }
                None => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.pairs::<Value, Value>() {
                        let (key, item) = pair?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &key {
                            Value::String(s) => encode_string(&s.as_bytes(), out),
                            Value::Integer(i) => {
                                encode_string(format_g(*i as f64, 14).as_bytes(), out)
                            }
                            Value::Number(n) => encode_string(format_g(*n, 14).as_bytes(), out),
                            other => {
                                return Err(raise(
                                    lua,
                                    format!(
                                        "Cannot serialise {}: table key must be a number or \
                                         string",
                                        other.type_name()
                                    ),
                                ))
                            }
                        }
                        out.push(b':');
                        encode(lua, &item, depth, out)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(raise(
                lua,
                format!("Cannot serialise {}: type not supported", other.type_name()),
            ))
        }
    }
    Ok(())
}

/// A token of lua-cjson's decoder, named as its errors name them.
#[derive(Debug, PartialEq)]
enum Token {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    /// What went wrong reading a token ("invalid token", "invalid escape code"...).
    Error(&'static str),
}

impl Token {
    fn name(&self) -> &'static str {
        match self {
            Token::ObjBegin => "T_OBJ_BEGIN",
            Token::ObjEnd => "T_OBJ_END",
            Token::ArrBegin => "T_ARR_BEGIN",
            Token::ArrEnd => "T_ARR_END",
            Token::Str(_) => "T_STRING",
            Token::Number(_) => "T_NUMBER",
            Token::Boolean(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(what) => what,
        }
    }
}

struct Parser<'a> {
    lua: &'a Lua,
    text: &'a [u8],
    at: usize,
    /// Where a string's bad escape is: the error names it, not the string's start.
    error_at: Option<usize>,
}

impl Parser<'_> {
    fn expected(&self, what: &str, found: Token, start: usize) -> mlua::Error {
        raise(
            self.lua,
            format!(
                "Expected {what} but found {} at character {}",
                found.name(),
                start + 1
            ),
        )
    }

    /// The next token and where it starts.
    fn token(&mut self) -> mlua::Result<(Token, usize)> {
        while self
            .text
            .get(self.at)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
        let start = self.at;
        let Some(&b) = self.text.get(self.at) else {
            return Ok((Token::End, start));
        };
        let simple = match b {
            b'{' => Some(Token::ObjBegin),
            b'}' => Some(Token::ObjEnd),
            b'[' => Some(Token::ArrBegin),
            b']' => Some(Token::ArrEnd),
            b':' => Some(Token::Colon),
            b',' => Some(Token::Comma),
            _ => None,
        };
        if let Some(token) = simple {
            self.at += 1;
            return Ok((token, start));
        }
        if b == b'"' {
            let token = self.string();
            return Ok((token, self.error_at.take().unwrap_or(start)));
        }
        for (word, token) in [
            (&b"true"[..], Token::Boolean(true)),
            (b"false", Token::Boolean(false)),
            (b"null", Token::Null),
        ] {
            if self.text[self.at..].starts_with(word) {
                self.at += word.len();
                return Ok((token, start));
            }
        }
        if b == b'-' || b.is_ascii_digit() || matches!(b, b'i' | b'I' | b'n' | b'N') {
            return Ok((self.number(), start));
        }
        Ok((Token::Error("invalid token"), start))
    }

    /// A number as strtod reads it (hexadecimal, inf and nan included, as lua-cjson accepts).
    fn number(&mut self) -> Token {
        let rest = &self.text[self.at..];
        let len = rest
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')))
            .unwrap_or(rest.len());
        let word = String::from_utf8_lossy(&rest[..len]).to_ascii_lowercase();
        let (negative, body) = match word.strip_prefix('-') {
            Some(body) => (true, body.to_string()),
            None => (false, word.clone()),
        };
        let parsed = if let Some(hex) = body.strip_prefix("0x") {
            u64::from_str_radix(hex, 16).ok().map(|n| n as f64)
        } else if body == "inf" || body == "infinity" {
            Some(f64::INFINITY)
        } else if body == "nan" {
            Some(f64::NAN)
        } else if body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            body.parse::<f64>().ok()
        } else {
            None
        };
        match parsed {
            Some(n) => {
                self.at += len;
                Token::Number(if negative { -n } else { n })
            }
            None => Token::Error("invalid number"),
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.text.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    }

    /// A string token, its escapes decoded (`\u` to UTF-8, surrogate pairs joined).
    fn string(&mut self) -> Token {
        let mut out = Vec::new();
        let mut i = self.at + 1;
        loop {
            let Some(&b) = self.text.get(i) else {
                return Token::Error("unexpected end of string");
            };
            match b {
                b'"' => {
                    self.at = i + 1;
                    return Token::Str(out);
                }
                b'\\' => {
                    self.error_at = Some(i);
                    let Some(&e) = self.text.get(i + 1) else {
                        return Token::Error("invalid escape code");
                    };
                    let simple = match e {
                        b'"' => Some(b'"'),
                        b'\\' => Some(b'\\'),
                        b'/' => Some(b'/'),
                        b'b' => Some(0x08),
                        b'f' => Some(0x0c),
                        b'n' => Some(b'\n'),
                        b'r' => Some(b'\r'),
                        b't' => Some(b'\t'),
                        _ => None,
                    };
                    if let Some(c) = simple {
                        self.error_at = None;
                        out.push(c);
                        i += 2;
                        continue;
                    }
                    if e != b'u' {
                        return Token::Error("invalid escape code");
                    }
                    let Some(mut code) = self.hex4(i + 2) else {
                        return Token::Error("invalid unicode escape code");
                    };
                    i += 6;
                    if (0xd800..0xdc00).contains(&code) {
                        let low = (self.text.get(i) == Some(&b'\\')
                            && self.text.get(i + 1) == Some(&b'u'))
                        .then(|| self.hex4(i + 2))
                        .flatten()
                        .filter(|low| (0xdc00..0xe000).contains(low));
                        let Some(low) = low else {
                            return Token::Error("invalid unicode escape code");
                        };
                        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
                        i += 6;
                    } else if (0xdc00..0xe000).contains(&code) {
                        return Token::Error("invalid unicode escape code");
                    }
                    let Some(c) = char::from_u32(code) else {
                        return Token::Error("invalid unicode escape code");
                    };
                    self.error_at = None;
                    let mut buffer = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
    }

    fn value(&mut self, depth: usize) -> mlua::Result<Value> {
        let (token, start) = self.token()?;
        self.value_from(token, start, depth)
    }

    fn value_from(&mut self, token: Token, start: usize, depth: usize) -> mlua::Result<Value> {
        match token {
            Token::Str(s) => Ok(Value::String(self.lua.create_string(s)?)),
            Token::Number(n) => Ok(Value::Number(n)),
            Token::Boolean(b) => Ok(Value::Boolean(b)),
            Token::Null => Ok(null()),
            Token::ObjBegin | Token::ArrBegin => {
                let depth = depth + 1;
                if depth > DEPTH_MAX {
                    return Err(raise(
                        self.lua,
                        format!(
                            "Found too many nested data structures ({depth}) at character {}",
                            start + 1
                        ),
                    ));
                }
                if token == Token::ObjBegin {
                    self.object(depth)
                } else {
                    self.array(depth)
                }
            }
            other => Err(self.expected("value", other, start)),
        }
    }

    fn object(&mut self, depth: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        let (mut token, mut start) = self.token()?;
        if token == Token::ObjEnd {
            return Ok(Value::Table(t));
        }
        loop {
            let Token::Str(key) = token else {
                return Err(self.expected("object key string", token, start));
            };
            let key: LuaString = self.lua.create_string(key)?;
            let (colon, at) = self.token()?;
            if colon != Token::Colon {
                return Err(self.expected("colon", colon, at));
            }
            let value = self.value(depth)?;
            t.raw_set(key, value)?;
            let (next, at) = self.token()?;
            match next {
                Token::ObjEnd => return Ok(Value::Table(t)),
                Token::Comma => {}
                other => return Err(self.expected("comma or object end", other, at)),
            }
            (token, start) = self.token()?;
        }
    }

    fn array(&mut self, depth: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        let (token, start) = self.token()?;
        if token == Token::ArrEnd {
            return Ok(Value::Table(t));
        }
        let mut value = self.value_from(token, start, depth)?;
        let mut index = 1;
        loop {
            t.raw_set(index, value)?;
            index += 1;
            let (next, at) = self.token()?;
            match next {
                Token::ArrEnd => return Ok(Value::Table(t)),
                Token::Comma => {}
                other => return Err(self.expected("comma or array end", other, at)),
            }
            value = self.value(depth)?;
        }
    }
}
