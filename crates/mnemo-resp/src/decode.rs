//! The request decoder: bytes from a client in, commands out, no I/O.
//!
//! Two request forms exist, chosen by the first byte of each request as Redis does:
//! - multibulk (`*<n>\r\n` then n times `$<len>\r\n<bytes>\r\n`), what every client library
//!   sends;
//! - inline (`SET k v\r\n`), what telnet users and some scripts send; see [`crate::inline`].
//!
//! Requests may be pipelined (many in one read) and may arrive cut anywhere: the decoder keeps
//! what it has parsed of an unfinished multibulk request, so a large request arriving in small
//! pieces is scanned once, not once per piece.
//!
//! Fidelity to Redis 7 (`processMultibulkBuffer`, `processInlineBuffer`), including its
//! leniencies, so that clients see the same behaviour:
//! - The byte after a length line's CR and the two bytes after a bulk's payload are skipped
//!   without being checked to be LF / CRLF.
//! - `*0` and `*-1` (any count <= 0) are consumed silently: no command, no reply.
//! - An empty inline line is consumed silently.
//!
//! One divergence: Redis searches lines with `strchr`, which stops at a NUL byte, so a NUL in
//! a length line or an inline request makes Redis wait for more input (until the 64 KiB
//! limit). We find the line end regardless: a malformed length is reported at once, and an
//! inline request is split up to its NUL, as Redis's `sdssplitargs` would split it.

use bytes::{Buf, Bytes, BytesMut};

use crate::inline;
use crate::limits::{
    ARGS_RESERVE_MAX, BULK_BYTES_MAX, IDLE_BUFFER_BYTES_MAX, INLINE_BYTES_MAX, MULTIBULK_ARGS_MAX,
    UNAUTHENTICATED_ARGS_MAX, UNAUTHENTICATED_BULK_BYTES_MAX,
};
use crate::number::parse_i64;

/// A malformed request. Redis replies with [`reply_text`](ProtocolError::reply_text) and then
/// closes the connection; so must the embedder (see [`Decoder::must_close`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// `*<count>` that is not an integer, or more than [`MULTIBULK_ARGS_MAX`].
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// `$<len>` that is not an integer, negative, or more than [`BULK_BYTES_MAX`].
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// A multibulk element that does not start with '$'.
    #[error("Protocol error: expected '$', got '{}'", .0.escape_ascii())]
    ExpectedDollar(u8),
    /// No CR within [`INLINE_BYTES_MAX`] bytes after '*'.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// No CR within [`INLINE_BYTES_MAX`] bytes after a multibulk element's start.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// No LF within [`INLINE_BYTES_MAX`] bytes of an inline request.
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    /// An inline request whose quotes do not balance.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// More than [`UNAUTHENTICATED_ARGS_MAX`] arguments before authentication.
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// A bulk over [`UNAUTHENTICATED_BULK_BYTES_MAX`] bytes before authentication.
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
}

impl ProtocolError {
    /// The error reply Redis sends, without '-' and CRLF: "ERR Protocol error: ...". The byte
    /// in "expected '$', got 'x'" is sent as is (CR and LF as spaces), like Redis's `%c`.
    pub fn reply_text(&self) -> Vec<u8> {
        let mut text = b"ERR ".to_vec();
        match self {
            ProtocolError::ExpectedDollar(byte) => {
                text.extend_from_slice(b"Protocol error: expected '$', got '");
                text.push(if *byte == b'\r' || *byte == b'\n' {
                    b' '
                } else {
                    *byte
                });
                text.push(b'\'');
            }
            other => text.extend_from_slice(other.to_string().as_bytes()),
        }
        text
    }
}

/// One request: its arguments, the command name first. Never empty when it comes from the
/// decoder. Multibulk arguments share one allocation with the bytes they were read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    args: Vec<Bytes>,
}

impl Command {
    /// A command from its arguments (for tests and internal callers).
    pub fn new(args: Vec<Bytes>) -> Self {
        Command { args }
    }

    /// The arguments, the command name first.
    pub fn args(&self) -> &[Bytes] {
        &self.args
    }

    /// The command name as sent (any case), or empty if there are no arguments.
    pub fn name(&self) -> &[u8] {
        self.args.first().map(|name| &name[..]).unwrap_or_default()
    }

    /// How many arguments, the name included (Redis's `argc`).
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// Whether there are no arguments at all.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// The arguments, by value.
    pub fn into_args(self) -> Vec<Bytes> {
        self.args
    }
}

/// What is known of the multibulk request being read.
#[derive(Debug, Default)]
struct Multibulk {
    /// Arguments still to read; 0 when no multibulk request is open.
    args_left: u64,
    /// The length of the next argument, once its `$<len>` line has been read.
    bulk_len: Option<usize>,
    /// Bytes of the buffer this request has used so far (the request starts at offset 0).
    consumed: usize,
    /// Where each argument read so far lies in the buffer.
    spans: Vec<(usize, usize)>,
}

/// What a search for a length line found.
enum Line {
    /// The line's content lies in `start..cr`; the next line starts at `next`.
    Found { cr: usize, next: usize },
    /// The line has not fully arrived.
    Incomplete,
    /// No CR within the limit.
    TooLong,
}

/// Incremental, sans-IO decoder of client requests.
///
/// Feed it bytes with [`feed`](Decoder::feed) (or read straight into
/// [`buffer_mut`](Decoder::buffer_mut)), then call [`next_command`](Decoder::next_command)
/// until it returns `Ok(None)`. After an error the decoder is closed: it keeps returning that
/// error and ignores further input, and the connection should be closed once the error
/// reply is written.
#[derive(Debug)]
pub struct Decoder {
    buffer: BytesMut,
    multibulk: Multibulk,
    authenticated: bool,
    failed: Option<ProtocolError>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder for a new connection, with no limits tied to authentication.
    pub fn new() -> Self {
        Decoder {
            buffer: BytesMut::new(),
            multibulk: Multibulk::default(),
            authenticated: true,
            failed: None,
        }
    }

    /// Whether the connection has authenticated. While it has not (set `false` when a
    /// password is required), requests are limited to [`UNAUTHENTICATED_ARGS_MAX`] arguments
    /// and bulks to [`UNAUTHENTICATED_BULK_BYTES_MAX`] bytes, as redis-server 7.0.15 does.
    pub fn set_authenticated(&mut self, authenticated: bool) {
        self.authenticated = authenticated;
    }

    /// Appends bytes received from the client.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buffer.extend_from_slice(bytes);
        }
    }

    /// The receive buffer, for reading from a socket without an extra copy. Only append to it:
    /// bytes already in it may belong to a request being parsed. (Other edits cannot cause a
    /// panic, only garbage commands or protocol errors.)
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buffer
    }

    /// Bytes received and not yet returned as commands.
    pub fn buffered_len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether a protocol error occurred: reply with it, then close the connection.
    pub fn must_close(&self) -> bool {
        self.failed.is_some()
    }

    /// The protocol error that closed this decoder, if any.
    pub fn error(&self) -> Option<&ProtocolError> {
        self.failed.as_ref()
    }

    /// The next complete command, `Ok(None)` if more bytes are needed, or the protocol error
    /// (the same one again on every later call).
    pub fn next_command(&mut self) -> Result<Option<Command>, ProtocolError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        match self.decode() {
            Ok(command) => {
                if self.buffer.is_empty() && self.buffer.capacity() > IDLE_BUFFER_BYTES_MAX {
                    self.buffer = BytesMut::new();
                }
                Ok(command)
            }
            Err(error) => {
                self.failed = Some(error.clone());
                self.buffer.clear();
                self.multibulk = Multibulk::default();
                Err(error)
            }
        }
    }

    fn decode(&mut self) -> Result<Option<Command>, ProtocolError> {
        loop {
            if self.multibulk.args_left == 0 {
                let Some(&first) = self.buffer.first() else {
                    return Ok(None);
                };
                if first != b'*' {
                    match self.decode_inline()? {
                        None => return Ok(None),
                        Some(args) if args.is_empty() => continue,
                        Some(args) => return Ok(Some(Command { args })),
                    }
                }
                if !self.open_multibulk()? {
                    return Ok(None);
                }
                if self.multibulk.args_left == 0 {
                    continue; // "*0" or "*-1": consumed, nothing to run.
                }
            }
            return self.continue_multibulk();
        }
    }

    /// Reads the `*<count>` line. Returns false if it has not fully arrived.
    fn open_multibulk(&mut self) -> Result<bool, ProtocolError> {
        let (cr, next) = match self.find_line(0) {
            Line::Found { cr, next } => (cr, next),
            Line::Incomplete => return Ok(false),
            Line::TooLong => return Err(ProtocolError::TooBigMultibulkCount),
        };
        let count = self.buffer.get(1..cr).and_then(parse_i64);
        let count = match count {
            Some(count) if count <= i64::try_from(MULTIBULK_ARGS_MAX).unwrap_or(i64::MAX) => count,
            _ => return Err(ProtocolError::InvalidMultibulkLength),
        };
        if !self.authenticated
            && count > i64::try_from(UNAUTHENTICATED_ARGS_MAX).unwrap_or(i64::MAX)
        {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        match u64::try_from(count) {
            Ok(args @ 1..) => {
                self.multibulk.args_left = args;
                self.multibulk.consumed = next;
                let reserve = usize::try_from(args)
                    .unwrap_or(ARGS_RESERVE_MAX)
                    .min(ARGS_RESERVE_MAX);
                self.multibulk.spans.reserve(reserve);
            }
            _ => self.buffer.advance(next.min(self.buffer.len())),
        }
        Ok(true)
    }

    /// Reads arguments until the request is complete (returning it) or the input runs out.
    fn continue_multibulk(&mut self) -> Result<Option<Command>, ProtocolError> {
        while self.multibulk.args_left > 0 {
            let start = self.multibulk.consumed;
            let len = match self.multibulk.bulk_len {
                Some(len) => len,
                None => {
                    let (len, next) = match self.short_bulk_header(start) {
                        Some(found) => found,
                        None => {
                            let (cr, next) = match self.find_line(start) {
                                Line::Found { cr, next } => (cr, next),
                                Line::Incomplete => return Ok(None),
                                Line::TooLong => return Err(ProtocolError::TooBigBulkCount),
                            };
                            (self.bulk_header(start, cr)?, next)
                        }
                    };
                    self.multibulk.bulk_len = Some(len);
                    self.multibulk.consumed = next;
                    len
                }
            };
            let payload = self.multibulk.consumed;
            let end = payload.saturating_add(len);
            if end.saturating_add(2) > self.buffer.len() {
                return Ok(None);
            }
            self.multibulk.spans.push((payload, end));
            self.multibulk.consumed = end + 2;
            self.multibulk.bulk_len = None;
            self.multibulk.args_left -= 1;
        }
        let consumed = self.multibulk.consumed.min(self.buffer.len());
        let request = self.buffer.split_to(consumed).freeze();
        let args = self
            .multibulk
            .spans
            .drain(..)
            .map(|(start, end)| {
                if start <= end && end <= request.len() {
                    request.slice(start..end)
                } else {
                    Bytes::new()
                }
            })
            .collect();
        self.multibulk.consumed = 0;
        Ok(Some(Command { args }))
    }

    /// The usual `$<len>` line, read in one pass: `$`, one to [`SHORT_BULK_DIGITS`] digits
    /// without a leading zero, CR and one more byte. Returns the length and where the payload
    /// starts, or `None` for anything else (longer, malformed, incomplete or over a limit),
    /// which [`Decoder::bulk_header`] then reads and judges as it does every line.
    fn short_bulk_header(&self, start: usize) -> Option<(usize, usize)> {
        let line = self.buffer.get(start..)?;
        if line.first() != Some(&b'$') {
            return None;
        }
        let mut len: u64 = 0;
        let mut at = 1;
        while let Some(&digit) = line.get(at).filter(|d| d.is_ascii_digit()) {
            if at > SHORT_BULK_DIGITS || (at == 2 && len == 0) {
                return None;
            }
            len = len * 10 + u64::from(digit - b'0');
            at += 1;
        }
        // The line is complete once one more byte (its LF, unchecked) follows the CR.
        if at == 1 || line.get(at) != Some(&b'\r') || at + 2 > line.len() {
            return None;
        }
        Some((self.allowed_bulk_len(len).ok()?, start + at + 2))
    }

    /// Checks a `$<len>` line lying in `start..cr` and returns the length.
    fn bulk_header(&self, start: usize, cr: usize) -> Result<usize, ProtocolError> {
        // The line has at least its CR, so there is a byte at `start`.
        let first = self.buffer.get(start).copied().unwrap_or(b'\r');
        if first != b'$' {
            return Err(ProtocolError::ExpectedDollar(first));
        }
        let len = self.buffer.get(start + 1..cr).and_then(parse_i64);
        match len.and_then(|len| u64::try_from(len).ok()) {
            Some(len) => self.allowed_bulk_len(len),
            None => Err(ProtocolError::InvalidBulkLength),
        }
    }

    /// A bulk length within the limits of this connection (the larger once it is
    /// authenticated), for both ways of reading a `$<len>` line.
    fn allowed_bulk_len(&self, len: u64) -> Result<usize, ProtocolError> {
        if len > BULK_BYTES_MAX {
            return Err(ProtocolError::InvalidBulkLength);
        }
        if !self.authenticated && len > UNAUTHENTICATED_BULK_BYTES_MAX {
            return Err(ProtocolError::UnauthenticatedBulkLength);
        }
        usize::try_from(len).map_err(|_| ProtocolError::InvalidBulkLength)
    }

    /// Finds the CR ending the line that starts at `start`, Redis style: the line is complete
    /// once one more byte (its LF, unchecked) follows the CR.
    fn find_line(&self, start: usize) -> Line {
        let Some(rest) = self.buffer.get(start..) else {
            return Line::Incomplete;
        };
        match memchr::memchr(b'\r', rest) {
            Some(offset) if offset + 2 <= rest.len() => Line::Found {
                cr: start + offset,
                next: start + offset + 2,
            },
            Some(_) => Line::Incomplete,
            None if rest.len() > INLINE_BYTES_MAX => Line::TooLong,
            None => Line::Incomplete,
        }
    }

    /// Reads one inline request: `None` if its LF has not arrived, else its arguments (empty
    /// for a blank line).
    fn decode_inline(&mut self) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let Some(newline) = memchr::memchr(b'\n', &self.buffer) else {
            if self.buffer.len() > INLINE_BYTES_MAX {
                return Err(ProtocolError::TooBigInline);
            }
            return Ok(None);
        };
        let line = self.buffer.get(..newline).unwrap_or_default();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let args =
            inline::split(line).map_err(|inline::Unbalanced| ProtocolError::UnbalancedQuotes)?;
        self.buffer.advance(newline + 1);
        Ok(Some(args.into_iter().map(Bytes::from).collect()))
    }
}

/// Most digits of a bulk length [`Decoder::short_bulk_header`] reads (the largest allowed,
/// 512 MiB, has nine); longer lines take the general path.
const SHORT_BULK_DIGITS: usize = 9;

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> (Vec<Vec<Vec<u8>>>, Option<ProtocolError>) {
        let mut decoder = Decoder::new();
        decoder.feed(input);
        let mut commands = Vec::new();
        loop {
            match decoder.next_command() {
                Ok(Some(command)) => {
                    commands.push(command.args().iter().map(|arg| arg.to_vec()).collect())
                }
                Ok(None) => return (commands, None),
                Err(error) => return (commands, Some(error)),
            }
        }
    }

    fn args(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|arg| arg.as_bytes().to_vec()).collect()
    }

    /// The one-pass reading of a bulk length agrees with the general one on every line it
    /// accepts, and declines every line the general one refuses (which then answers with its
    /// own error), around each limit and leading zero.
    #[test]
    fn short_bulk_lengths_read_as_the_general_path_reads_them() {
        let mut lines: Vec<String> = ["0", "00", "01", "007", "1", "9", "10", "-1", "+5", "", " 1"]
            .iter()
            .map(|digits| digits.to_string())
            .collect();
        for limit in [BULK_BYTES_MAX, UNAUTHENTICATED_BULK_BYTES_MAX] {
            for len in [limit - 1, limit, limit + 1, limit * 10] {
                lines.push(len.to_string());
            }
        }
        lines.push("99999999999999999999".into());
        for authenticated in [true, false] {
            for digits in &lines {
                let mut decoder = Decoder::new();
                decoder.set_authenticated(authenticated);
                decoder.feed(format!("${digits}\r\nx").as_bytes());
                let cr = 1 + digits.len();
                let general = decoder.bulk_header(0, cr);
                match decoder.short_bulk_header(0) {
                    Some((len, next)) => {
                        assert_eq!(general, Ok(len), "${digits}");
                        assert_eq!(next, cr + 2, "${digits}");
                    }
                    None => assert!(
                        general.is_err() || digits.len() > SHORT_BULK_DIGITS,
                        "${digits} declined, though the general path reads {general:?}"
                    ),
                }
            }
        }
        // Incomplete: no byte after the CR yet.
        let mut decoder = Decoder::new();
        decoder.feed(b"$5\r");
        assert_eq!(decoder.short_bulk_header(0), None);
    }

    #[test]
    fn multibulk_and_inline_pipelined() {
        let (commands, error) = decode_all(
            b"*1\r\n$4\r\nPING\r\nSET a \"b c\"\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\nPING\n",
        );
        assert_eq!(error, None);
        assert_eq!(
            commands,
            vec![
                args(&["PING"]),
                args(&["SET", "a", "b c"]),
                args(&["GET", "a"]),
                args(&["PING"])
            ]
        );
    }

    #[test]
    fn empty_requests_are_skipped() {
        let (commands, error) = decode_all(b"*0\r\n*-1\r\n\r\n   \r\n\n*1\r\n$0\r\n\r\n");
        assert_eq!(error, None);
        assert_eq!(commands, vec![args(&[""])]);
    }

    #[test]
    fn partial_input_waits() {
        for input in [
            &b"*"[..],
            b"*2",
            b"*2\r",
            b"*2\r\n$3",
            b"*2\r\n$3\r\nGET\r",
            b"*2\r\n$3\r\nGET\r\n",
            b"PING",
        ] {
            assert_eq!(
                decode_all(input),
                (vec![], None),
                "{:?}",
                input.escape_ascii().to_string()
            );
        }
    }

    /// Each case is a malformed request and the error redis-server 7 replies with (except
    /// `*1048577`, which Redis 7 accepts and Redis 6 rejects: see `MULTIBULK_ARGS_MAX`).
    #[test]
    fn errors_match_redis() {
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", "ERR Protocol error: invalid multibulk length"),
            (b"*\r\n", "ERR Protocol error: invalid multibulk length"),
            (b"*+1\r\n", "ERR Protocol error: invalid multibulk length"),
            (b"*01\r\n", "ERR Protocol error: invalid multibulk length"),
            (
                b"*1048577\r\n",
                "ERR Protocol error: invalid multibulk length",
            ),
            (b"*1\r\n$x\r\n", "ERR Protocol error: invalid bulk length"),
            (b"*1\r\n$-1\r\n", "ERR Protocol error: invalid bulk length"),
            (
                b"*1\r\n$536870913\r\n",
                "ERR Protocol error: invalid bulk length",
            ),
            (b"*1\r\nx3\r\n", "ERR Protocol error: expected '$', got 'x'"),
            (b"*1\r\n\r\n", "ERR Protocol error: expected '$', got ' '"),
            (
                b"*2\r\n$1\r\na\r\n:1\r\n",
                "ERR Protocol error: expected '$', got ':'",
            ),
            (
                b"SET \"a\r\n",
                "ERR Protocol error: unbalanced quotes in request",
            ),
            (
                b"SET 'a'b\r\n",
                "ERR Protocol error: unbalanced quotes in request",
            ),
        ];
        for (input, reply) in cases {
            let (_, error) = decode_all(input);
            let error = error
                .unwrap_or_else(|| panic!("no error for {:?}", input.escape_ascii().to_string()));
            assert_eq!(String::from_utf8_lossy(&error.reply_text()), *reply);
        }
    }

    #[test]
    fn size_limits() {
        let (_, error) = decode_all(&vec![b'a'; INLINE_BYTES_MAX + 1]);
        assert_eq!(error, Some(ProtocolError::TooBigInline));
        assert_eq!(decode_all(&vec![b'a'; INLINE_BYTES_MAX]), (vec![], None));

        let mut count = b"*".to_vec();
        count.extend(std::iter::repeat_n(b'1', INLINE_BYTES_MAX + 1));
        assert_eq!(
            decode_all(&count).1,
            Some(ProtocolError::TooBigMultibulkCount)
        );

        let mut header = b"*1\r\n$".to_vec();
        header.extend(std::iter::repeat_n(b'1', INLINE_BYTES_MAX + 1));
        assert_eq!(decode_all(&header).1, Some(ProtocolError::TooBigBulkCount));

        // Exactly the maximum bulk length is accepted (the payload is still awaited).
        assert_eq!(decode_all(b"*1\r\n$536870912\r\n"), (vec![], None));
        assert_eq!(decode_all(b"*1048576\r\n"), (vec![], None));
    }

    #[test]
    fn unauthenticated_limits() {
        let run = |input: &[u8]| {
            let mut decoder = Decoder::new();
            decoder.set_authenticated(false);
            decoder.feed(input);
            decoder.next_command()
        };
        assert_eq!(
            run(b"*11\r\n"),
            Err(ProtocolError::UnauthenticatedMultibulkLength)
        );
        assert_eq!(run(b"*10\r\n"), Ok(None));
        assert_eq!(
            run(b"*1\r\n$16385\r\n"),
            Err(ProtocolError::UnauthenticatedBulkLength)
        );
        assert_eq!(run(b"*1\r\n$16384\r\n"), Ok(None));
    }

    #[test]
    fn error_closes_the_decoder() {
        let mut decoder = Decoder::new();
        decoder.feed(b"PING\r\n*x\r\nPING\r\n");
        assert!(matches!(decoder.next_command(), Ok(Some(_))));
        assert_eq!(
            decoder.next_command(),
            Err(ProtocolError::InvalidMultibulkLength)
        );
        assert!(decoder.must_close());
        decoder.feed(b"PING\r\n");
        assert_eq!(
            decoder.next_command(),
            Err(ProtocolError::InvalidMultibulkLength)
        );
        assert_eq!(decoder.buffered_len(), 0);
    }

    /// Redis does not check the bytes after a CR or after a payload; neither do we.
    #[test]
    fn redis_leniency_is_kept() {
        let (commands, error) = decode_all(b"*1\rX$3\rXfooYZ");
        assert_eq!(error, None);
        assert_eq!(commands, vec![args(&["foo"])]);
    }

    #[test]
    fn arguments_are_slices_of_one_buffer() {
        let mut decoder = Decoder::new();
        decoder.feed(b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n");
        let command = decoder.next_command().expect("valid").expect("complete");
        let [name, key] = command.args() else {
            panic!("two arguments")
        };
        // Both point into the same frozen request: the key starts 9 bytes after the name.
        assert_eq!(key.as_ptr() as usize - name.as_ptr() as usize, 9);
    }

    #[test]
    fn large_requests_do_not_pin_memory() {
        let mut decoder = Decoder::new();
        let value = vec![b'v'; 4 * 1024 * 1024];
        let mut request =
            format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        decoder.feed(&request);
        let command = decoder.next_command().expect("valid").expect("complete");
        assert_eq!(
            command.args().get(2).map(|arg| arg.len()),
            Some(value.len())
        );
        assert!(decoder.buffer_mut().capacity() <= IDLE_BUFFER_BYTES_MAX);
    }

    #[test]
    fn truncating_the_buffer_does_not_panic() {
        let mut decoder = Decoder::new();
        decoder.feed(b"*2\r\n$3\r\nGET\r\n$5\r\nke");
        assert_eq!(decoder.next_command(), Ok(None));
        decoder.buffer_mut().truncate(3);
        decoder.feed(b"xxxxxxxxxxxxxxxxxxxxxxxxxx\r\n");
        let _ = decoder.next_command();
    }
}
