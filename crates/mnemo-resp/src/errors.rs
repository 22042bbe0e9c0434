//! Error replies worded exactly as Redis 7.0 words them.
//!
//! Clients and their test suites match on these texts (redis-py maps "WRONGTYPE" and
//! "NOAUTH" to exception classes; redis-cli prints them verbatim), so the wording is part of
//! the protocol. Each text is the reply without its leading '-' and trailing CRLF: pass it to
//! [`Encoder::error`](crate::Encoder::error).

use crate::limits::ERROR_ECHO_BYTES_MAX;

/// A command was given an argument it cannot parse, or options in a bad combination.
pub const SYNTAX: &str = "ERR syntax error";
/// An argument that must be an integer is not one, by [`parse_i64`](crate::parse_i64)'s rules.
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// An argument that must be a double is not one, by [`parse_f64`](crate::parse_f64)'s rules.
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
/// ZRANGE BYSCORE / ZRANGEBYSCORE bounds that are not doubles.
pub const MIN_MAX_NOT_FLOAT: &str = "ERR min or max is not a float";
/// The key exists and holds a value of another type than the command works on.
pub const WRONG_TYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// A password is configured and the connection has not authenticated yet.
pub const NO_AUTH: &str = "NOAUTH Authentication required.";
/// AUTH with a wrong password.
pub const WRONG_PASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// AUTH while no password is configured.
pub const AUTH_NOT_CONFIGURED: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";
/// INCR / INCRBY / DECR / DECRBY whose result leaves the `i64` range.
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
/// HINCRBY on a field whose value is not an integer.
pub const HASH_VALUE_NOT_INTEGER: &str = "ERR hash value is not an integer";
/// A count that must be positive (LPOP / RPOP / SPOP count, ...).
pub const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";
/// SELECT of a database other than those configured.
pub const DB_INDEX_OUT_OF_RANGE: &str = "ERR DB index is out of range";
/// SCAN with a cursor that is not an unsigned integer.
pub const INVALID_CURSOR: &str = "ERR invalid cursor";
/// Commands that need an existing key (RENAME, LSET, ...).
pub const NO_SUCH_KEY: &str = "ERR no such key";
/// LSET / LINDEX style index outside the list.
pub const INDEX_OUT_OF_RANGE: &str = "ERR index out of range";
/// APPEND / SETRANGE whose result would exceed `proto-max-bulk-len`.
pub const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
/// HELLO with a protocol version other than 2 or 3.
pub const NO_PROTO: &str = "NOPROTO unsupported protocol version";
/// CLIENT SETNAME with a space, newline or other byte outside '!'..='~'.
pub const INVALID_CLIENT_NAME: &str =
    "ERR Client names cannot contain spaces, newlines or special characters.";
/// Redis's answer when memory is exhausted; mnemo gives it when the pool is full.
pub const OUT_OF_MEMORY: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// ZADD with both XX and NX.
pub const ZADD_XX_AND_NX: &str = "ERR XX and NX options at the same time are not compatible";
/// ZADD with GT, LT and NX in a conflicting combination.
pub const ZADD_GT_LT_NX: &str = "ERR GT, LT, and/or NX options at the same time are not compatible";
/// ZADD INCR with more than one score-member pair.
pub const ZADD_INCR_PAIR: &str = "ERR INCR option supports a single increment-element pair";

/// A 32-bit integer argument (SELECT) outside `i32`; "must between" is Redis's wording.
pub const NOT_I32: &str =
    "ERR value is out of range, value must between -2147483648 and 2147483647";
/// INCRBYFLOAT / HINCRBYFLOAT whose result is not finite.
pub const INCR_NOT_FINITE: &str = "ERR increment would produce NaN or Infinity";
/// ZRANGE ... BYLEX with a bound that does not start with '[', '(', '-' or '+'.
pub const LEX_RANGE_INVALID: &str = "ERR min or max not valid string range item";
/// ZRANGE ... LIMIT without BYSCORE or BYLEX.
pub const ZRANGE_LIMIT_WITHOUT_BY: &str =
    "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX";
/// ZRANGE ... BYLEX WITHSCORES.
pub const ZRANGE_BYLEX_WITHSCORES: &str =
    "ERR syntax error, WITHSCORES not supported in combination with BYLEX";
/// EXPIRE with NX and any of XX, GT, LT.
pub const EXPIRE_NX_WITH_OTHERS: &str =
    "ERR NX and XX, GT or LT options at the same time are not compatible";
/// EXPIRE with both GT and LT.
pub const EXPIRE_GT_AND_LT: &str = "ERR GT and LT options at the same time are not compatible";

/// `ERR Unknown option or number of arguments for CONFIG SET - '<option>'`.
pub fn config_set_unknown(option: &[u8]) -> Vec<u8> {
    let mut text = b"ERR Unknown option or number of arguments for CONFIG SET - '".to_vec();
    text.extend_from_slice(option);
    text.push(b'\'');
    text
}

/// `ERR invalid expire time in '<command>' command` (SET EX 0, EXPIRE overflow, ...).
pub fn invalid_expire_time(command: &str) -> String {
    format!("ERR invalid expire time in '{command}' command")
}

/// Why a request cannot be executed, found before execution from the command table alone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The request had no arguments at all (the decoder never yields one; a caller might).
    #[error("ERR empty command")]
    Empty,
    /// No command by that name.
    #[error("{}", String::from_utf8_lossy(&unknown_command_text(name, args)))]
    UnknownCommand {
        /// The name as the client sent it.
        name: Vec<u8>,
        /// The first arguments, as many as the error echoes.
        args: Vec<Vec<u8>>,
    },
    /// A container command (CONFIG, CLIENT, COMMAND) with a subcommand it does not have.
    #[error("{}", String::from_utf8_lossy(&unknown_subcommand_text(container, subcommand)))]
    UnknownSubcommand {
        /// The container's name as the command table has it ("config"); the text upper-cases
        /// it, as Redis shows it.
        container: &'static str,
        /// The subcommand as the client sent it.
        subcommand: Vec<u8>,
    },
    /// The command exists but the argument count does not match its arity.
    #[error("ERR wrong number of arguments for '{full_name}' command")]
    WrongArity {
        /// The lower-case name, "config|get" for a subcommand.
        full_name: &'static str,
    },
}

impl CommandError {
    /// The exact error reply text, without '-' and CRLF. Arguments echoed from the client are
    /// copied byte for byte (Redis does not re-encode them), then CR and LF become spaces.
    pub fn reply_text(&self) -> Vec<u8> {
        let mut text = match self {
            CommandError::UnknownCommand { name, args } => unknown_command_text(name, args),
            CommandError::UnknownSubcommand {
                container,
                subcommand,
            } => unknown_subcommand_text(container, subcommand),
            other => other.to_string().into_bytes(),
        };
        for byte in &mut text {
            if *byte == b'\r' || *byte == b'\n' {
                *byte = b' ';
            }
        }
        text
    }

    /// Builds the "unknown command" error for a request `argv` (name first).
    pub fn unknown_command<A: AsRef<[u8]>>(argv: &[A]) -> Self {
        let (name, rest) = match argv.split_first() {
            Some((name, rest)) => (
                c_string_max(name.as_ref(), ERROR_ECHO_BYTES_MAX).to_vec(),
                rest,
            ),
            None => return CommandError::Empty,
        };
        // Keep only what the text can echo: 128 bytes in all, so at most 64 arguments ("'' ").
        let args = rest
            .iter()
            .take(ERROR_ECHO_BYTES_MAX / 2)
            .map(|arg| c_string_max(arg.as_ref(), ERROR_ECHO_BYTES_MAX).to_vec())
            .collect();
        CommandError::UnknownCommand { name, args }
    }
}

/// The bytes a C `%s` prints: up to the first NUL.
fn c_string(bytes: &[u8]) -> &[u8] {
    let end = memchr::memchr(0, bytes).unwrap_or(bytes.len());
    bytes.get(..end).unwrap_or_default()
}

/// `%.<precision>s`: at most `precision` bytes, stopping at a NUL.
fn c_string_max(bytes: &[u8], precision: usize) -> &[u8] {
    let bytes = c_string(bytes);
    bytes.get(..precision.min(bytes.len())).unwrap_or_default()
}

/// `ERR unknown command '<name>', with args beginning with: '<a>' '<b>' `: Redis quotes each
/// argument followed by a space while the list is shorter than 128 bytes, and truncates each
/// argument so that the list stays within 128 bytes.
fn unknown_command_text(name: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
    let mut listed = Vec::new();
    for arg in args {
        if listed.len() >= ERROR_ECHO_BYTES_MAX {
            break;
        }
        listed.push(b'\'');
        listed.extend_from_slice(c_string_max(arg, ERROR_ECHO_BYTES_MAX - listed.len() + 1));
        listed.extend_from_slice(b"' ");
    }
    let mut text = b"ERR unknown command '".to_vec();
    text.extend_from_slice(c_string_max(name, ERROR_ECHO_BYTES_MAX));
    text.extend_from_slice(b"', with args beginning with: ");
    text.extend_from_slice(&listed);
    text
}

/// `ERR unknown subcommand '<sub>'. Try <CONTAINER> HELP.`
fn unknown_subcommand_text(container: &str, subcommand: &[u8]) -> Vec<u8> {
    let mut text = b"ERR unknown subcommand '".to_vec();
    text.extend_from_slice(c_string_max(subcommand, ERROR_ECHO_BYTES_MAX));
    text.extend_from_slice(b"'. Try ");
    text.extend_from_slice(container.to_ascii_uppercase().as_bytes());
    text.extend_from_slice(b" HELP.");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(argv: &[&[u8]]) -> String {
        String::from_utf8(CommandError::unknown_command(argv).reply_text()).expect("ascii")
    }

    /// Expected texts are what redis-server 7.0 replies.
    #[test]
    fn unknown_command_matches_redis() {
        assert_eq!(
            unknown(&[b"foo"]),
            "ERR unknown command 'foo', with args beginning with: "
        );
        assert_eq!(
            unknown(&[b"foo", b"a", b"b"]),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            unknown(&[b"fo\r\no", b"a\nb"]),
            "ERR unknown command 'fo  o', with args beginning with: 'a b' "
        );
        assert_eq!(
            unknown(&[b"x\0y", b"a\0b"]),
            "ERR unknown command 'x', with args beginning with: 'a' "
        );
    }

    #[test]
    fn unknown_command_truncates_like_redis() {
        // One long argument: "'%.*s' " with precision 128 - 0.
        let long = vec![b'a'; 300];
        let text = unknown(&[b"foo", &long]);
        let listed = text
            .split_once("with: ")
            .map(|(_, rest)| rest)
            .unwrap_or_default();
        assert_eq!(listed.len(), 1 + 128 + 2);
        // Many short arguments: the loop stops once the list reaches 128 bytes.
        let args: Vec<&[u8]> = std::iter::once(&b"foo"[..])
            .chain(std::iter::repeat_n(&b"abcdefgh"[..], 40))
            .collect();
        let text = unknown(&args);
        let listed = text
            .split_once("with: ")
            .map(|(_, rest)| rest)
            .unwrap_or_default();
        // Each "'abcdefgh' " is 11 bytes; after 11 of them (121 bytes) the 12th is cut to the
        // 7 bytes left ("'abcdefg' "), the list reaches 131 >= 128 and the loop stops.
        assert_eq!(listed.len(), 11 * 11 + 10);
        assert!(listed.ends_with("'abcdefgh' 'abcdefg' "));
        // The name is cut at 128 bytes.
        let text = unknown(&[&long]);
        assert!(text.starts_with(&format!("ERR unknown command '{}'", "a".repeat(128))));
    }

    #[test]
    fn other_command_errors() {
        let arity = CommandError::WrongArity { full_name: "get" };
        assert_eq!(
            arity.reply_text(),
            b"ERR wrong number of arguments for 'get' command"
        );
        let sub = CommandError::UnknownSubcommand {
            container: "config",
            subcommand: b"foo".to_vec(),
        };
        assert_eq!(
            sub.reply_text(),
            b"ERR unknown subcommand 'foo'. Try CONFIG HELP."
        );
        assert_eq!(
            invalid_expire_time("set"),
            "ERR invalid expire time in 'set' command"
        );
    }
}
