//! The client side: decoding replies (RESP2 and RESP3) into [`Reply`] values.
//!
//! Used by tests (encode, decode, compare), by the benchmark drivers that speak the protocol,
//! and by anything that must check what a server answered. Unlike the request decoder it is
//! strict: every line must end in CRLF. An unfinished reply is parsed again from its start
//! when more bytes arrive, which is fine for replies that arrive in a few reads.

use bytes::{Buf, Bytes, BytesMut};

use crate::encode::Reply;
use crate::limits::{ARGS_RESERVE_MAX, REPLY_DEPTH_MAX};
use crate::number::{parse_f64, parse_i64};

/// A reply that is not valid RESP.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// A byte that starts no RESP type.
    #[error("unknown reply type byte 0x{0:02x}")]
    UnknownType(u8),
    /// A line that does not end in CRLF, or a bulk payload not followed by CRLF.
    #[error("reply line not terminated by CRLF")]
    MissingCrlf,
    /// A length, count or integer that is not a valid number.
    #[error("invalid number in reply")]
    InvalidNumber,
    /// Aggregates nested deeper than [`REPLY_DEPTH_MAX`].
    #[error("reply nested too deeply")]
    TooDeep,
}

/// Incremental decoder of server replies.
#[derive(Debug, Default)]
pub struct ReplyDecoder {
    buffer: BytesMut,
}

type Parsed = Result<Option<(Reply, usize)>, ReplyError>;

impl ReplyDecoder {
    /// An empty decoder.
    pub fn new() -> Self {
        ReplyDecoder::default()
    }

    /// Appends bytes received from the server.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Bytes received and not yet returned as replies.
    pub fn buffered_len(&self) -> usize {
        self.buffer.len()
    }

    /// The next complete reply, or `Ok(None)` if more bytes are needed.
    pub fn next_reply(&mut self) -> Result<Option<Reply>, ReplyError> {
        match parse(&self.buffer, 0, 0)? {
            Some((reply, end)) => {
                self.buffer.advance(end.min(self.buffer.len()));
                Ok(Some(reply))
            }
            None => Ok(None),
        }
    }
}

/// Parses the reply starting at `start`, returning it and where it ends.
fn parse(buffer: &[u8], start: usize, depth: usize) -> Parsed {
    if depth > REPLY_DEPTH_MAX {
        return Err(ReplyError::TooDeep);
    }
    let Some((content, next)) = line(buffer, start)? else {
        return Ok(None);
    };
    let Some((&kind, text)) = content.split_first() else {
        return Err(ReplyError::UnknownType(b'\r'));
    };
    let number = || parse_i64(text).ok_or(ReplyError::InvalidNumber);
    let done = |reply: Reply| Ok(Some((reply, next)));
    match kind {
        b'+' => done(Reply::Simple(Bytes::copy_from_slice(text))),
        b'-' => done(Reply::Error(Bytes::copy_from_slice(text))),
        b':' => done(Reply::Integer(number()?)),
        b'_' if text.is_empty() => done(Reply::Null),
        b'#' => match text {
            b"t" => done(Reply::Boolean(true)),
            b"f" => done(Reply::Boolean(false)),
            _ => Err(ReplyError::InvalidNumber),
        },
        b',' => {
            let value = if text.eq_ignore_ascii_case(b"nan") {
                Some(f64::NAN)
            } else {
                parse_f64(text)
            };
            done(Reply::Double(value.ok_or(ReplyError::InvalidNumber)?))
        }
        b'$' | b'=' => {
            let len = number()?;
            if len == -1 && kind == b'$' {
                return done(Reply::NullBulk);
            }
            let len = usize::try_from(len).map_err(|_| ReplyError::InvalidNumber)?;
            let Some(payload) = payload(buffer, next, len)? else {
                return Ok(None);
            };
            let end = next + len + 2;
            if kind == b'$' {
                return Ok(Some((Reply::Bulk(Bytes::copy_from_slice(payload)), end)));
            }
            let (format, text) = match (payload.get(..3), payload.get(3), payload.get(4..)) {
                (Some(&[a, b, c]), Some(b':'), Some(text)) => ([a, b, c], text),
                _ => return Err(ReplyError::InvalidNumber),
            };
            Ok(Some((
                Reply::Verbatim {
                    format,
                    text: Bytes::copy_from_slice(text),
                },
                end,
            )))
        }
        b'*' | b'~' | b'>' | b'%' => {
            let count = number()?;
            if count == -1 && kind == b'*' {
                return done(Reply::NullArray);
            }
            let count = usize::try_from(count).map_err(|_| ReplyError::InvalidNumber)?;
            let items = if kind == b'%' {
                count.checked_mul(2).ok_or(ReplyError::InvalidNumber)?
            } else {
                count
            };
            let Some((mut elements, end)) = parse_elements(buffer, next, items, depth)? else {
                return Ok(None);
            };
            let reply = match kind {
                b'*' => Reply::Array(elements),
                b'~' => Reply::Set(elements),
                b'>' => Reply::Push(elements),
                _ => {
                    let mut pairs = Vec::with_capacity(count.min(ARGS_RESERVE_MAX));
                    let mut drain = elements.drain(..);
                    while let (Some(key), Some(value)) = (drain.next(), drain.next()) {
                        pairs.push((key, value));
                    }
                    Reply::Map(pairs)
                }
            };
            Ok(Some((reply, end)))
        }
        other => Err(ReplyError::UnknownType(other)),
    }
}

fn parse_elements(
    buffer: &[u8],
    mut next: usize,
    count: usize,
    depth: usize,
) -> Result<Option<(Vec<Reply>, usize)>, ReplyError> {
    let mut elements = Vec::with_capacity(count.min(ARGS_RESERVE_MAX));
    for _ in 0..count {
        let Some((element, end)) = parse(buffer, next, depth + 1)? else {
            return Ok(None);
        };
        elements.push(element);
        next = end;
    }
    Ok(Some((elements, next)))
}

/// The line starting at `start` (without CRLF) and where the next one starts.
fn line(buffer: &[u8], start: usize) -> Result<Option<(&[u8], usize)>, ReplyError> {
    let Some(rest) = buffer.get(start..) else {
        return Ok(None);
    };
    let Some(cr) = memchr::memchr(b'\r', rest) else {
        return Ok(None);
    };
    match rest.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((rest.get(..cr).unwrap_or_default(), start + cr + 2))),
        Some(_) => Err(ReplyError::MissingCrlf),
    }
}

/// The `len` bytes at `start`, once they and their CRLF have arrived.
fn payload(buffer: &[u8], start: usize, len: usize) -> Result<Option<&[u8]>, ReplyError> {
    let end = start.checked_add(len).ok_or(ReplyError::InvalidNumber)?;
    match (
        buffer.get(start..end),
        buffer.get(end..end.saturating_add(2)),
    ) {
        (Some(payload), Some(b"\r\n")) => Ok(Some(payload)),
        (Some(_), Some(_)) => Err(ReplyError::MissingCrlf),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(input: &[u8]) -> Result<Option<Reply>, ReplyError> {
        let mut decoder = ReplyDecoder::new();
        decoder.feed(input);
        decoder.next_reply()
    }

    #[test]
    fn every_type() {
        assert_eq!(decode(b"+OK\r\n"), Ok(Some(Reply::ok())));
        assert_eq!(decode(b"-ERR x\r\n"), Ok(Some(Reply::error("ERR x"))));
        assert_eq!(decode(b":-3\r\n"), Ok(Some(Reply::Integer(-3))));
        assert_eq!(decode(b"$3\r\nabc\r\n"), Ok(Some(Reply::bulk("abc"))));
        assert_eq!(decode(b"$-1\r\n"), Ok(Some(Reply::NullBulk)));
        assert_eq!(decode(b"*-1\r\n"), Ok(Some(Reply::NullArray)));
        assert_eq!(
            decode(b"*1\r\n:1\r\n"),
            Ok(Some(Reply::Array(vec![Reply::Integer(1)])))
        );
        assert_eq!(
            decode(b"%1\r\n+a\r\n#f\r\n"),
            Ok(Some(Reply::Map(vec![(
                Reply::Simple("a".into()),
                Reply::Boolean(false)
            )])))
        );
        assert_eq!(decode(b"~0\r\n"), Ok(Some(Reply::Set(vec![]))));
        assert_eq!(
            decode(b">1\r\n_\r\n"),
            Ok(Some(Reply::Push(vec![Reply::Null])))
        );
        assert_eq!(decode(b",1.5\r\n"), Ok(Some(Reply::Double(1.5))));
        assert_eq!(
            decode(b"=6\r\ntxt:hi\r\n"),
            Ok(Some(Reply::Verbatim {
                format: *b"txt",
                text: "hi".into()
            }))
        );
    }

    #[test]
    fn incomplete_and_malformed() {
        assert_eq!(decode(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(decode(b"$3\r\nab"), Ok(None));
        assert_eq!(decode(b"+OK\r"), Ok(None));
        assert_eq!(decode(b"+OK\rx"), Err(ReplyError::MissingCrlf));
        assert_eq!(decode(b"$1\r\nabc"), Err(ReplyError::MissingCrlf));
        assert_eq!(decode(b"?\r\n"), Err(ReplyError::UnknownType(b'?')));
        assert_eq!(decode(b":x\r\n"), Err(ReplyError::InvalidNumber));
        assert_eq!(
            decode(&b"*1\r\n".repeat(REPLY_DEPTH_MAX + 2)),
            Err(ReplyError::TooDeep)
        );
    }
}
