//! Reply encoding, RESP2 and RESP3, with RESP3 types downgraded for RESP2 clients exactly as
//! Redis does.
//!
//! | RESP3 type | RESP3 bytes          | RESP2 bytes (downgrade)      |
//! |------------|----------------------|------------------------------|
//! | map of n   | `%n`                 | `*2n` (keys and values flat) |
//! | set of n   | `~n`                 | `*n`                         |
//! | push of n  | `>n`                 | `*n`                         |
//! | double     | `,1.5`               | `$3 1.5` (bulk string)       |
//! | null       | `_`                  | `$-1` (null bulk)            |
//! | boolean    | `#t` / `#f`          | `:1` / `:0`                  |
//! | verbatim   | `=8 txt:text`        | `$4 text` (bulk string)      |
//!
//! A null bulk and a null array are both `_` under RESP3 (Redis `addReplyNull` /
//! `addReplyNullArray`).

use bytes::{BufMut, Bytes, BytesMut};

use crate::number::{format_f64, I64Text};

/// The protocol version a connection speaks; RESP2 until the client says `HELLO 3`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// RESP2, what every client speaks on connect.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

impl Protocol {
    /// The protocol for a `HELLO` version argument: 2 or 3, else `None` (reply
    /// [`errors::NO_PROTO`](crate::errors::NO_PROTO)).
    pub fn from_version(version: i64) -> Option<Self> {
        match version {
            2 => Some(Protocol::Resp2),
            3 => Some(Protocol::Resp3),
            _ => None,
        }
    }

    /// The number `HELLO` reports as "proto".
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// Writes replies into a buffer for a connection speaking `protocol`.
///
/// Aggregates are written header first: `array_len(2)` then two elements. The encoder does
/// not check that the caller writes as many elements as it announced.
#[derive(Debug)]
pub struct Encoder<'a> {
    out: &'a mut BytesMut,
    protocol: Protocol,
}

impl<'a> Encoder<'a> {
    /// An encoder appending to `out`.
    pub fn new(out: &'a mut BytesMut, protocol: Protocol) -> Self {
        Encoder { out, protocol }
    }

    /// The protocol replies are written in.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// `+text`: a status reply such as "OK" or "PONG". CR and LF in `text` become spaces so
    /// the reply cannot break the framing.
    pub fn simple(&mut self, text: &[u8]) {
        self.line_sanitized(b'+', text);
    }

    /// `-text`: an error reply. `text` starts with the error code ("ERR syntax error",
    /// "WRONGTYPE ..."); see [`errors`](crate::errors). CR and LF become spaces, as in Redis.
    pub fn error(&mut self, text: &[u8]) {
        self.line_sanitized(b'-', text);
    }

    /// `:n`: an integer reply.
    pub fn integer(&mut self, value: i64) {
        self.header(b':', value);
    }

    /// `$len` + bytes: a bulk string reply.
    pub fn bulk(&mut self, bytes: &[u8]) {
        // One growth for the whole string: its header takes at most 23 bytes.
        self.out.reserve(bytes.len() + 25);
        self.header(b'$', length(bytes.len()));
        self.out.put_slice(bytes);
        self.out.put_slice(b"\r\n");
    }

    /// An integer as a bulk string, as Redis replies to INCRBYFLOAT or CONFIG GET numbers.
    pub fn bulk_i64(&mut self, value: i64) {
        self.bulk(I64Text::new(value).as_bytes());
    }

    /// The null bulk string (GET of a missing key): `$-1`, or `_` under RESP3.
    pub fn null_bulk(&mut self) {
        match self.protocol {
            Protocol::Resp2 => self.out.put_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.out.put_slice(b"_\r\n"),
        }
    }

    /// The header of an array of `len` elements.
    pub fn array_len(&mut self, len: usize) {
        self.header(b'*', length(len));
    }

    /// The null array (BLPOP timeout): `*-1`, or `_` under RESP3.
    pub fn null_array(&mut self) {
        match self.protocol {
            Protocol::Resp2 => self.out.put_slice(b"*-1\r\n"),
            Protocol::Resp3 => self.out.put_slice(b"_\r\n"),
        }
    }

    /// The header of a map of `pairs` key-value pairs; write `2 * pairs` elements after it.
    pub fn map_len(&mut self, pairs: usize) {
        match self.protocol {
            Protocol::Resp2 => self.header(b'*', length(pairs.saturating_mul(2))),
            Protocol::Resp3 => self.header(b'%', length(pairs)),
        }
    }

    /// The header of a set of `len` members.
    pub fn set_len(&mut self, len: usize) {
        let kind = match self.protocol {
            Protocol::Resp2 => b'*',
            Protocol::Resp3 => b'~',
        };
        self.header(kind, length(len));
    }

    /// The header of an out-of-band push of `len` elements (pub/sub messages).
    pub fn push_len(&mut self, len: usize) {
        let kind = match self.protocol {
            Protocol::Resp2 => b'*',
            Protocol::Resp3 => b'>',
        };
        self.header(kind, length(len));
    }

    /// A double, formatted like C's `%.17g` (ZSCORE, ZINCRBY): `,1.5` or, under RESP2, the
    /// bulk string "1.5".
    pub fn double(&mut self, value: f64) {
        let text = format_f64(value);
        match self.protocol {
            Protocol::Resp2 => self.bulk(text.as_bytes()),
            Protocol::Resp3 => {
                self.out.put_u8(b',');
                self.out.put_slice(text.as_bytes());
                self.out.put_slice(b"\r\n");
            }
        }
    }

    /// The RESP3 null: `_`, or the null bulk `$-1` under RESP2.
    pub fn null(&mut self) {
        self.null_bulk();
    }

    /// A boolean: `#t` / `#f`, or the integers 1 / 0 under RESP2.
    pub fn boolean(&mut self, value: bool) {
        match self.protocol {
            Protocol::Resp2 => self.integer(i64::from(value)),
            Protocol::Resp3 => self
                .out
                .put_slice(if value { b"#t\r\n" } else { b"#f\r\n" }),
        }
    }

    /// A verbatim string with a three-letter format ("txt", "mkd"), as INFO replies under
    /// RESP3; a plain bulk string of `text` under RESP2.
    pub fn verbatim(&mut self, format: [u8; 3], text: &[u8]) {
        match self.protocol {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.header(b'=', length(text.len().saturating_add(4)));
                self.out.put_slice(&format);
                self.out.put_u8(b':');
                self.out.put_slice(text);
                self.out.put_slice(b"\r\n");
            }
        }
    }

    /// A whole [`Reply`] value.
    pub fn reply(&mut self, reply: &Reply) {
        match reply {
            Reply::Simple(text) => self.simple(text),
            Reply::Error(text) => self.error(text),
            Reply::Integer(value) => self.integer(*value),
            Reply::Bulk(bytes) => self.bulk(bytes),
            Reply::NullBulk => self.null_bulk(),
            Reply::Array(items) => self.aggregate(Aggregate::Array, items),
            Reply::NullArray => self.null_array(),
            Reply::Map(pairs) => {
                self.map_len(pairs.len());
                for (key, value) in pairs {
                    self.reply(key);
                    self.reply(value);
                }
            }
            Reply::Set(items) => self.aggregate(Aggregate::Set, items),
            Reply::Push(items) => self.aggregate(Aggregate::Push, items),
            Reply::Double(value) => self.double(*value),
            Reply::Null => self.null(),
            Reply::Boolean(value) => self.boolean(*value),
            Reply::Verbatim { format, text } => self.verbatim(*format, text),
            Reply::EncodedMap { pairs, body } => {
                self.map_len(*pairs);
                self.out.put_slice(body);
            }
        }
    }

    fn aggregate(&mut self, kind: Aggregate, items: &[Reply]) {
        match kind {
            Aggregate::Array => self.array_len(items.len()),
            Aggregate::Set => self.set_len(items.len()),
            Aggregate::Push => self.push_len(items.len()),
        }
        for item in items {
            self.reply(item);
        }
    }

    fn header(&mut self, kind: u8, value: i64) {
        // Most lengths of a reply (a field's, a value's, an aggregate's) have one to three
        // digits: written as one fixed-size copy, without the general formatting.
        match value {
            0..=9 => {
                let d = value as u8;
                self.out.extend_from_slice(&[kind, b'0' + d, b'\r', b'\n']);
                return;
            }
            10..=99 => {
                let (t, d) = ((value / 10) as u8, (value % 10) as u8);
                self.out
                    .extend_from_slice(&[kind, b'0' + t, b'0' + d, b'\r', b'\n']);
                return;
            }
            100..=999 => {
                let (h, t, d) = (
                    (value / 100) as u8,
                    (value / 10 % 10) as u8,
                    (value % 10) as u8,
                );
                self.out
                    .extend_from_slice(&[kind, b'0' + h, b'0' + t, b'0' + d, b'\r', b'\n']);
                return;
            }
            _ => {}
        }
        let text = I64Text::new(value);
        self.out.reserve(text.as_bytes().len() + 3);
        self.out.put_u8(kind);
        self.out.put_slice(text.as_bytes());
        self.out.put_slice(b"\r\n");
    }

    fn line_sanitized(&mut self, kind: u8, text: &[u8]) {
        self.out.reserve(text.len() + 3);
        self.out.put_u8(kind);
        for &byte in text {
            self.out.put_u8(if byte == b'\r' || byte == b'\n' {
                b' '
            } else {
                byte
            });
        }
        self.out.put_slice(b"\r\n");
    }
}

#[derive(Clone, Copy)]
enum Aggregate {
    Array,
    Set,
    Push,
}

/// A length as the protocol writes it. Lengths of values in memory fit in `i64` on every
/// platform Rust supports; saturate rather than wrap if one ever does not.
fn length(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

/// Writes a request as clients send it: an array of bulk strings (`*2\r\n$3\r\nGET\r\n...`).
pub fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut BytesMut) {
    let mut encoder = Encoder::new(out, Protocol::Resp2);
    encoder.array_len(args.len());
    for arg in args {
        encoder.bulk(arg.as_ref());
    }
}

/// A reply as a value: what the command layer builds when it does not stream, and what
/// [`ReplyDecoder`](crate::ReplyDecoder) yields on the client side.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+text`
    Simple(Bytes),
    /// `-text`, the error code included ("ERR ...").
    Error(Bytes),
    /// `:n`
    Integer(i64),
    /// `$len` + bytes
    Bulk(Bytes),
    /// `$-1`
    NullBulk,
    /// `*n` + elements
    Array(Vec<Reply>),
    /// `*-1`
    NullArray,
    /// RESP3 `%n` + pairs
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~n` + members
    Set(Vec<Reply>),
    /// RESP3 `>n` + elements
    Push(Vec<Reply>),
    /// RESP3 `,value`
    Double(f64),
    /// RESP3 `_`
    Null,
    /// RESP3 `#t` / `#f`
    Boolean(bool),
    /// RESP3 `=len` + "fmt:" + text
    Verbatim {
        /// Three bytes naming the format: "txt" or "mkd".
        format: [u8; 3],
        /// The text after the "fmt:" prefix.
        text: Bytes,
    },
    /// A map of bulk strings given already encoded: `pairs` pairs, `body` their 2·`pairs`
    /// bulk strings (`$len` + bytes each, key then value), which RESP2 and RESP3 write
    /// alike; the header follows the protocol (`%n`, or `*2n` under RESP2). HGETALL answers
    /// with one, so that a read builds no value per field. Built by [`BulkMap`];
    /// [`Reply::expanded`] gives the [`Reply::Map`] a client decodes. Never decoded.
    EncodedMap {
        /// The number of key-value pairs.
        pairs: usize,
        /// The pairs' bulk strings, in RESP.
        body: Bytes,
    },
}

/// Builds a [`Reply::EncodedMap`]: each pair is encoded as it is pushed.
#[derive(Debug, Default)]
pub struct BulkMap {
    body: BytesMut,
    pairs: usize,
}

impl BulkMap {
    /// An empty map whose body has room for `bytes` without growing.
    pub fn with_capacity(bytes: usize) -> Self {
        BulkMap {
            body: BytesMut::with_capacity(bytes),
            pairs: 0,
        }
    }

    /// Appends the pair `key`, `value`.
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        // Bulk strings are the same bytes in RESP2 and RESP3.
        let mut encoder = Encoder::new(&mut self.body, Protocol::Resp2);
        encoder.bulk(key);
        encoder.bulk(value);
        self.pairs += 1;
    }

    /// The reply.
    pub fn finish(self) -> Reply {
        Reply::EncodedMap {
            pairs: self.pairs,
            body: self.body.freeze(),
        }
    }
}

impl Reply {
    /// `+OK`
    pub fn ok() -> Self {
        Reply::Simple(Bytes::from_static(b"OK"))
    }

    /// An error reply from one of the [`errors`](crate::errors) texts.
    pub fn error(text: impl Into<Bytes>) -> Self {
        Reply::Error(text.into())
    }

    /// A bulk string reply.
    pub fn bulk(bytes: impl Into<Bytes>) -> Self {
        Reply::Bulk(bytes.into())
    }

    /// Appends this reply to `out` in `protocol`.
    pub fn encode(&self, protocol: Protocol, out: &mut BytesMut) {
        Encoder::new(out, protocol).reply(self);
    }

    /// This reply with every [`Reply::EncodedMap`] in it (aggregates searched) decoded into
    /// the [`Reply::Map`] of bulk strings it encodes; a reply without one is cloned.
    pub fn expanded(&self) -> Reply {
        let all = |items: &[Reply]| items.iter().map(Reply::expanded).collect::<Vec<_>>();
        match self {
            Reply::EncodedMap { pairs, body } => {
                let mut decoder = crate::ReplyDecoder::new();
                decoder.feed(body);
                let mut out = Vec::with_capacity(*pairs);
                // The body was encoded by BulkMap: bulk strings, two per pair.
                while let Ok(Some(key)) = decoder.next_reply() {
                    let Ok(Some(value)) = decoder.next_reply() else {
                        break;
                    };
                    out.push((key, value));
                }
                Reply::Map(out)
            }
            Reply::Array(items) => Reply::Array(all(items)),
            Reply::Set(items) => Reply::Set(all(items)),
            Reply::Push(items) => Reply::Push(all(items)),
            Reply::Map(pairs) => Reply::Map(
                pairs
                    .iter()
                    .map(|(key, value)| (key.expanded(), value.expanded()))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The value a client decodes after this reply was encoded in `protocol`: RESP3 types
    /// downgraded for RESP2; null bulk and null array become [`Reply::Null`] under RESP3;
    /// doubles go through their `%.17g` text; CR/LF in simple strings and errors become spaces.
    pub fn as_seen_by(&self, protocol: Protocol) -> Reply {
        let resp2 = protocol == Protocol::Resp2;
        let all = |items: &[Reply]| {
            items
                .iter()
                .map(|item| item.as_seen_by(protocol))
                .collect::<Vec<_>>()
        };
        match self {
            Reply::Simple(text) => Reply::Simple(sanitized(text)),
            Reply::Error(text) => Reply::Error(sanitized(text)),
            Reply::Integer(value) => Reply::Integer(*value),
            Reply::Bulk(bytes) => Reply::Bulk(bytes.clone()),
            Reply::NullBulk | Reply::NullArray | Reply::Null if !resp2 => Reply::Null,
            Reply::NullBulk | Reply::Null => Reply::NullBulk,
            Reply::NullArray => Reply::NullArray,
            Reply::Array(items) => Reply::Array(all(items)),
            Reply::Map(pairs) if resp2 => Reply::Array(
                pairs
                    .iter()
                    .flat_map(|(key, value)| [key.as_seen_by(protocol), value.as_seen_by(protocol)])
                    .collect(),
            ),
            Reply::Map(pairs) => Reply::Map(
                pairs
                    .iter()
                    .map(|(key, value)| (key.as_seen_by(protocol), value.as_seen_by(protocol)))
                    .collect(),
            ),
            Reply::Set(items) if resp2 => Reply::Array(all(items)),
            Reply::Set(items) => Reply::Set(all(items)),
            Reply::Push(items) if resp2 => Reply::Array(all(items)),
            Reply::Push(items) => Reply::Push(all(items)),
            Reply::Double(value) if resp2 => Reply::Bulk(Bytes::from(format_f64(*value))),
            Reply::Double(value) => Reply::Double(
                crate::number::parse_f64(format_f64(*value).as_bytes()).unwrap_or(f64::NAN),
            ),
            Reply::Boolean(value) if resp2 => Reply::Integer(i64::from(*value)),
            Reply::Boolean(value) => Reply::Boolean(*value),
            Reply::EncodedMap { .. } => self.expanded().as_seen_by(protocol),
            Reply::Verbatim { text, .. } if resp2 => Reply::Bulk(text.clone()),
            Reply::Verbatim { format, text } => Reply::Verbatim {
                format: *format,
                text: text.clone(),
            },
        }
    }
}

fn sanitized(text: &Bytes) -> Bytes {
    if memchr::memchr2(b'\r', b'\n', text).is_none() {
        return text.clone();
    }
    text.iter()
        .map(|&byte| {
            if byte == b'\r' || byte == b'\n' {
                b' '
            } else {
                byte
            }
        })
        .collect::<Vec<u8>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(protocol: Protocol, write: impl FnOnce(&mut Encoder<'_>)) -> String {
        let mut out = BytesMut::new();
        write(&mut Encoder::new(&mut out, protocol));
        String::from_utf8(out.to_vec()).expect("utf-8")
    }

    #[test]
    fn resp2_basic_types() {
        let r2 = Protocol::Resp2;
        assert_eq!(encoded(r2, |e| e.simple(b"OK")), "+OK\r\n");
        assert_eq!(
            encoded(r2, |e| e.error(b"ERR bad\r\nthing")),
            "-ERR bad  thing\r\n"
        );
        assert_eq!(encoded(r2, |e| e.integer(-42)), ":-42\r\n");
        assert_eq!(
            encoded(r2, |e| e.integer(i64::MIN)),
            ":-9223372036854775808\r\n"
        );
        assert_eq!(encoded(r2, |e| e.bulk(b"hi")), "$2\r\nhi\r\n");
        assert_eq!(encoded(r2, |e| e.bulk(b"")), "$0\r\n\r\n");
        assert_eq!(encoded(r2, |e| e.bulk_i64(10)), "$2\r\n10\r\n");
        assert_eq!(encoded(r2, |e| e.null_bulk()), "$-1\r\n");
        assert_eq!(encoded(r2, |e| e.array_len(3)), "*3\r\n");
        assert_eq!(encoded(r2, |e| e.null_array()), "*-1\r\n");
    }

    /// The short paths for one to three digits write what the general one writes, at
    /// every boundary between them.
    #[test]
    fn integers_and_lengths_of_every_width() {
        let r2 = Protocol::Resp2;
        for value in (-1_001..=1_001).chain([9_999, 10_000, i64::MAX]) {
            assert_eq!(encoded(r2, |e| e.integer(value)), format!(":{value}\r\n"));
        }
        for len in [0, 1, 9, 10, 99, 100, 999, 1_000, 4_096] {
            let bytes = vec![b'x'; len];
            let text = "x".repeat(len);
            assert_eq!(
                encoded(r2, |e| e.bulk(&bytes)),
                format!("${len}\r\n{text}\r\n")
            );
        }
    }

    #[test]
    fn resp3_types_and_their_resp2_downgrades() {
        let (r2, r3) = (Protocol::Resp2, Protocol::Resp3);
        assert_eq!(encoded(r3, |e| e.map_len(2)), "%2\r\n");
        assert_eq!(encoded(r2, |e| e.map_len(2)), "*4\r\n");
        assert_eq!(encoded(r3, |e| e.set_len(2)), "~2\r\n");
        assert_eq!(encoded(r2, |e| e.set_len(2)), "*2\r\n");
        assert_eq!(encoded(r3, |e| e.push_len(3)), ">3\r\n");
        assert_eq!(encoded(r2, |e| e.push_len(3)), "*3\r\n");
        assert_eq!(encoded(r3, |e| e.double(1.1)), ",1.1000000000000001\r\n");
        assert_eq!(
            encoded(r2, |e| e.double(1.1)),
            "$18\r\n1.1000000000000001\r\n"
        );
        assert_eq!(encoded(r3, |e| e.double(f64::INFINITY)), ",inf\r\n");
        assert_eq!(
            encoded(r2, |e| e.double(f64::NEG_INFINITY)),
            "$4\r\n-inf\r\n"
        );
        assert_eq!(encoded(r3, |e| e.null()), "_\r\n");
        assert_eq!(encoded(r2, |e| e.null()), "$-1\r\n");
        assert_eq!(encoded(r3, |e| e.null_bulk()), "_\r\n");
        assert_eq!(encoded(r3, |e| e.null_array()), "_\r\n");
        assert_eq!(encoded(r3, |e| e.boolean(true)), "#t\r\n");
        assert_eq!(encoded(r2, |e| e.boolean(false)), ":0\r\n");
        assert_eq!(
            encoded(r3, |e| e.verbatim(*b"txt", b"hi")),
            "=6\r\ntxt:hi\r\n"
        );
        assert_eq!(encoded(r2, |e| e.verbatim(*b"txt", b"hi")), "$2\r\nhi\r\n");
    }

    #[test]
    fn nested_reply_values() {
        let reply = Reply::Map(vec![(
            Reply::bulk("a"),
            Reply::Set(vec![Reply::Integer(1), Reply::Boolean(true)]),
        )]);
        assert_eq!(
            encoded(Protocol::Resp3, |e| e.reply(&reply)),
            "%1\r\n$1\r\na\r\n~2\r\n:1\r\n#t\r\n"
        );
        assert_eq!(
            encoded(Protocol::Resp2, |e| e.reply(&reply)),
            "*2\r\n$1\r\na\r\n*2\r\n:1\r\n:1\r\n"
        );
    }

    /// A [`BulkMap`] writes the bytes of the map of bulk strings it stands for, in both
    /// protocols, alone and inside an aggregate, and expands back to that map.
    #[test]
    fn encoded_maps_write_what_maps_of_bulks_write() {
        for pairs in [0usize, 1, 2, 10, 300] {
            let mut map = BulkMap::with_capacity(16);
            let mut plain = Vec::new();
            for i in 0..pairs {
                let (key, value) = (format!("field{i}"), "v".repeat(i % 130));
                map.push(key.as_bytes(), value.as_bytes());
                plain.push((Reply::bulk(key), Reply::bulk(value)));
            }
            let (map, plain) = (map.finish(), Reply::Map(plain));
            let (in_array, plain_in_array) = (
                Reply::Array(vec![map.clone(), Reply::Integer(1)]),
                Reply::Array(vec![plain.clone(), Reply::Integer(1)]),
            );
            for protocol in [Protocol::Resp2, Protocol::Resp3] {
                for (reply, want) in [(&map, &plain), (&in_array, &plain_in_array)] {
                    assert_eq!(
                        encoded(protocol, |e| e.reply(reply)),
                        encoded(protocol, |e| e.reply(want)),
                        "{pairs} pairs, {protocol:?}"
                    );
                    assert_eq!(reply.as_seen_by(protocol), want.as_seen_by(protocol));
                }
            }
            assert_eq!(map.expanded(), plain);
            assert_eq!(in_array.expanded(), plain_in_array);
        }
    }

    #[test]
    fn command_encoding() {
        let mut out = BytesMut::new();
        encode_command(&["SET", "k", "v"], &mut out);
        assert_eq!(&out[..], b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
    }
}
