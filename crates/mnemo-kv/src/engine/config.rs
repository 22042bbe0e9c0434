//! CONFIG GET / SET: Redis 7.0's parameters as mnemo answers them.
//!
//! Three kinds of parameter:
//! - **Tunable, no effect here** ([`TUNABLES`]): Redis's encoding thresholds, `save`,
//!   `appendfsync`, `hz`, lazy freeing, defragmentation, slow log... mnemo's structures and
//!   durability do not depend on them (every write is durable at its batch's sync point, with
//!   or without `save`), so CONFIG SET checks the value as Redis does (same types, ranges and
//!   error texts), keeps it, and CONFIG GET reports it back: client libraries and test
//!   suites that set them work unchanged. Values live in memory; a restart forgets them, as
//!   Redis without CONFIG REWRITE does.
//! - **Fixed** ([`FIXED`]): reported with the value that describes mnemo (`databases`,
//!   `maxmemory-policy` noeviction...), refused by CONFIG SET with the reason: they are start
//!   options of `mnemo serve`, or mnemo has no such mechanism. Accepting them silently would
//!   lie (a password that is not required, a memory limit that is not kept).
//! - Anything else: Redis's "Unknown option" error.

use std::collections::HashMap;

use mnemo_resp::bytes::Bytes;
use mnemo_resp::{parse_i64, Reply};

use super::glob;

/// How a tunable parameter's value is checked and shown.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// An integer in `min..=max` (Redis's `string2ll`: no sign but '-', no spaces).
    Integer(i64, i64),
    /// Like `Integer`, then clamped to `min..=max` for display (Redis's `hz`).
    Clamped(i64, i64, i64, i64),
    /// A byte count with an optional unit (b, k, kb, m, mb, g, gb), shown in bytes.
    Memory,
    /// yes / no.
    Bool,
    /// One of the listed words.
    Enum(&'static [&'static str]),
    /// `save`: pairs of seconds (at least 1) and changes (at least 0), or nothing.
    Save,
}

/// Names (an alias second, as Redis 7.0 keeps the old "ziplist" names), kind and default.
const TUNABLES: &[(&str, Option<&str>, Kind, &str)] = &[
    ("active-defrag-cycle-max", None, Kind::Integer(1, 99), "25"),
    ("active-defrag-cycle-min", None, Kind::Integer(1, 99), "1"),
    (
        "active-defrag-ignore-bytes",
        None,
        Kind::Memory,
        "104857600",
    ),
    (
        "active-defrag-max-scan-fields",
        None,
        Kind::Integer(1, i64::MAX),
        "1000",
    ),
    (
        "active-defrag-threshold-lower",
        None,
        Kind::Integer(0, 1000),
        "10",
    ),
    (
        "active-defrag-threshold-upper",
        None,
        Kind::Integer(0, 1000),
        "100",
    ),
    ("active-expire-effort", None, Kind::Integer(1, 10), "1"),
    ("activedefrag", None, Kind::Bool, "no"),
    ("activerehashing", None, Kind::Bool, "yes"),
    ("aof-load-truncated", None, Kind::Bool, "yes"),
    ("aof-rewrite-incremental-fsync", None, Kind::Bool, "yes"),
    ("aof-timestamp-enabled", None, Kind::Bool, "no"),
    ("aof-use-rdb-preamble", None, Kind::Bool, "yes"),
    // mnemo makes every write durable before it replies: "always" describes it.
    (
        "appendfsync",
        None,
        Kind::Enum(&["everysec", "always", "no"]),
        "always",
    ),
    ("auto-aof-rewrite-min-size", None, Kind::Memory, "67108864"),
    (
        "auto-aof-rewrite-percentage",
        None,
        Kind::Integer(0, i32::MAX as i64),
        "100",
    ),
    // How long a script runs before the server answers others BUSY and takes SCRIPT KILL
    // (engine/scripting.rs); `lua-time-limit` is its old name.
    (
        "busy-reply-threshold",
        Some("lua-time-limit"),
        Kind::Integer(0, i64::MAX),
        "5000",
    ),
    ("dynamic-hz", None, Kind::Bool, "yes"),
    (
        "hash-max-listpack-entries",
        Some("hash-max-ziplist-entries"),
        Kind::Integer(0, i64::MAX),
        "512",
    ),
    (
        "hash-max-listpack-value",
        Some("hash-max-ziplist-value"),
        Kind::Memory,
        "64",
    ),
    ("hll-sparse-max-bytes", None, Kind::Memory, "3000"),
    ("hz", None, Kind::Clamped(0, i32::MAX as i64, 1, 500), "10"),
    (
        "latency-monitor-threshold",
        None,
        Kind::Integer(0, i64::MAX),
        "0",
    ),
    ("lazyfree-lazy-eviction", None, Kind::Bool, "no"),
    ("lazyfree-lazy-expire", None, Kind::Bool, "no"),
    ("lazyfree-lazy-server-del", None, Kind::Bool, "no"),
    ("lazyfree-lazy-user-del", None, Kind::Bool, "no"),
    ("lazyfree-lazy-user-flush", None, Kind::Bool, "no"),
    (
        "lfu-decay-time",
        None,
        Kind::Integer(0, i32::MAX as i64),
        "1",
    ),
    (
        "lfu-log-factor",
        None,
        Kind::Integer(0, i32::MAX as i64),
        "10",
    ),
    (
        "list-compress-depth",
        None,
        Kind::Integer(0, i32::MAX as i64),
        "0",
    ),
    (
        "list-max-listpack-size",
        Some("list-max-ziplist-size"),
        Kind::Integer(i32::MIN as i64, i32::MAX as i64),
        "-2",
    ),
    ("no-appendfsync-on-rewrite", None, Kind::Bool, "no"),
    ("rdb-save-incremental-fsync", None, Kind::Bool, "yes"),
    ("rdbchecksum", None, Kind::Bool, "yes"),
    ("rdbcompression", None, Kind::Bool, "yes"),
    // No snapshots: nothing to schedule (every write is already durable).
    ("save", None, Kind::Save, ""),
    (
        "set-max-intset-entries",
        None,
        Kind::Integer(0, i64::MAX),
        "512",
    ),
    (
        "slowlog-log-slower-than",
        None,
        Kind::Integer(-1, i64::MAX),
        "10000",
    ),
    ("slowlog-max-len", None, Kind::Integer(0, i64::MAX), "128"),
    ("stop-writes-on-bgsave-error", None, Kind::Bool, "yes"),
    ("stream-node-max-bytes", None, Kind::Memory, "4096"),
    (
        "stream-node-max-entries",
        None,
        Kind::Integer(0, i64::MAX),
        "100",
    ),
    (
        "zset-max-listpack-entries",
        Some("zset-max-ziplist-entries"),
        Kind::Integer(0, i64::MAX),
        "128",
    ),
    (
        "zset-max-listpack-value",
        Some("zset-max-ziplist-value"),
        Kind::Memory,
        "64",
    ),
];

/// Parameters reported but not settable, with the reason CONFIG SET gives. `databases` is
/// filled in from the engine; Redis itself calls it immutable.
const FIXED: &[(&str, &str, &str)] = &[
    (
        "appendonly",
        "no",
        "mnemo has no append-only file: every write is durable in the pool",
    ),
    ("databases", "", "can't set immutable config"),
    ("maxclients", "10000", "not supported by mnemo"),
    (
        "maxmemory",
        "0",
        "the pool's size is a start option of mnemo serve (--size-max)",
    ),
    ("maxmemory-policy", "noeviction", "mnemo never evicts keys"),
    (
        "notify-keyspace-events",
        "",
        "keyspace notifications are not supported by mnemo",
    ),
    ("proto-max-bulk-len", "536870912", "not supported by mnemo"),
    (
        "requirepass",
        "",
        "a start option of mnemo serve (--requirepass)",
    ),
    ("tcp-keepalive", "300", "not supported by mnemo"),
    ("timeout", "0", "not supported by mnemo"),
];

/// The CONFIG parameters' current values (the tunables CONFIG SET changed).
#[derive(Debug, Default)]
pub struct Config {
    values: HashMap<&'static str, String>,
    databases: usize,
}

fn error(name: &str, why: &str) -> Reply {
    Reply::Error(Bytes::from(format!(
        "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
    )))
}

impl Config {
    /// Defaults, with `databases` databases.
    pub fn new(databases: usize) -> Config {
        Config {
            values: HashMap::new(),
            databases,
        }
    }

    fn value(&self, name: &'static str, default: &'static str) -> String {
        self.values
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }

    /// A tunable integer parameter's value (its default until CONFIG SET changes it).
    pub fn integer(&self, name: &str) -> Option<i64> {
        let &(_, _, _, default) = TUNABLES.iter().find(|t| t.0 == name)?;
        parse_i64(
            self.values
                .get(name)
                .map_or(default, String::as_str)
                .as_bytes(),
        )
    }

    /// Every parameter as (name, value): tunables under both names, then the fixed ones.
    fn all(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for &(name, alias, _, default) in TUNABLES {
            let value = self.value(name, default);
            if let Some(alias) = alias {
                out.push((alias, value.clone()));
            }
            out.push((name, value));
        }
        for &(name, value, _) in FIXED {
            let value = if name == "databases" {
                self.databases.to_string()
            } else {
                value.to_string()
            };
            out.push((name, value));
        }
        out
    }

    /// CONFIG GET pattern...: every parameter matching a pattern, once. A pattern without
    /// glob characters is a name, found in any letter case and answered under the name as
    /// given, as Redis 7.0 does.
    pub fn get(&self, patterns: &[Bytes]) -> Reply {
        let all = self.all();
        let mut pairs: Vec<(Reply, Reply)> = Vec::new();
        let mut seen: Vec<&'static str> = Vec::new();
        for pattern in patterns {
            let lower = pattern.to_ascii_lowercase();
            let exact = !pattern.iter().any(|b| matches!(b, b'*' | b'?' | b'['));
            for (name, value) in &all {
                let hit = if exact {
                    name.as_bytes() == lower.as_slice()
                } else {
                    glob::matches(&lower, name.as_bytes())
                };
                if hit && !seen.contains(name) {
                    seen.push(name);
                    let shown = if exact {
                        pattern.clone()
                    } else {
                        Bytes::from_static(name.as_bytes())
                    };
                    pairs.push((Reply::Bulk(shown), Reply::Bulk(Bytes::from(value.clone()))));
                }
            }
        }
        Reply::Map(pairs)
    }

    /// CONFIG SET name value [name value ...]: all or nothing, as Redis 7.0 does.
    pub fn set(&mut self, args: &[Bytes]) -> Reply {
        let pairs = &args[2..];
        if pairs.len() % 2 != 0 {
            return Reply::Error(Bytes::from_static(b"ERR syntax error"));
        }
        let mut changes: Vec<(&'static str, String)> = Vec::new();
        for pair in pairs.chunks_exact(2) {
            let given = String::from_utf8_lossy(&pair[0]).into_owned();
            let asked = given.to_ascii_lowercase();
            let tunable = TUNABLES
                .iter()
                .find(|(name, alias, _, _)| *name == asked || *alias == Some(asked.as_str()));
            let Some(&(name, _, kind, _)) = tunable else {
                return match FIXED.iter().find(|(name, _, _)| *name == asked) {
                    Some((_, _, why)) => error(&given, why),
                    None => Reply::Error(Bytes::from(format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                        String::from_utf8_lossy(&pair[0])
                    ))),
                };
            };
            if changes.iter().any(|(changed, _)| *changed == name) {
                return error(&given, "duplicate parameter");
            }
            match check(kind, &pair[1]) {
                Ok(value) => changes.push((name, value)),
                Err(why) => return error(&given, &why),
            }
        }
        self.values.extend(changes);
        Reply::ok()
    }
}

/// The value to keep for `kind` given `value`, or why it is refused (Redis's words).
fn check(kind: Kind, value: &[u8]) -> Result<String, String> {
    let range = |min: i64, max: i64| format!("argument must be between {min} and {max} inclusive");
    match kind {
        Kind::Integer(min, max) | Kind::Clamped(min, max, _, _) => {
            let n = parse_i64(value)
                .ok_or_else(|| "argument couldn't be parsed into an integer".to_string())?;
            if !(min..=max).contains(&n) {
                return Err(range(min, max));
            }
            Ok(match kind {
                Kind::Clamped(_, _, low, high) => n.clamp(low, high),
                _ => n,
            }
            .to_string())
        }
        Kind::Memory => {
            let bytes =
                memory(value).ok_or_else(|| "argument must be a memory value".to_string())?;
            if bytes > i64::MAX as u64 {
                return Err(range(0, i64::MAX));
            }
            Ok(bytes.to_string())
        }
        Kind::Bool => match value.to_ascii_lowercase().as_slice() {
            b"yes" => Ok("yes".into()),
            b"no" => Ok("no".into()),
            _ => Err("argument must be 'yes' or 'no'".into()),
        },
        Kind::Enum(words) => {
            let lower = String::from_utf8_lossy(value).to_ascii_lowercase();
            match words.iter().find(|w| **w == lower) {
                Some(word) => Ok(word.to_string()),
                None => Err(format!(
                    "argument(s) must be one of the following: {}",
                    words.join(", ")
                )),
            }
        }
        Kind::Save => save(value).ok_or_else(|| "Invalid save parameters".to_string()),
    }
}

/// A memory value: digits and an optional unit (b, k = 1000, kb = 1024, m, mb, g, gb); the
/// empty string is 0, as Redis takes it.
fn memory(value: &[u8]) -> Option<u64> {
    let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, unit) = value.split_at(digits);
    let multiplier: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    if number.is_empty() {
        return (value.is_empty()).then_some(0);
    }
    let n: u64 = std::str::from_utf8(number).ok()?.parse().ok()?;
    n.checked_mul(multiplier)
}

/// `save`: "" or pairs "seconds changes" (seconds at least 1, changes at least 0), each
/// written back as a plain integer.
fn save(value: &[u8]) -> Option<String> {
    if value.is_empty() {
        return Some(String::new());
    }
    let words: Vec<&[u8]> = value.split(|&b| b == b' ').collect();
    if words.len() % 2 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let text = std::str::from_utf8(word).ok()?;
        if text.is_empty() || text.starts_with('+') {
            return None;
        }
        let n: i64 = text.parse().ok()?;
        if n < if i % 2 == 0 { 1 } else { 0 } {
            return None;
        }
        out.push(n.to_string());
    }
    Some(out.join(" "))
}

/// CONFIG HELP, as Redis 7.0 prints it.
pub fn help() -> Reply {
    const LINES: &[&str] = &[
        "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
        "REWRITE",
        "    Rewrite the configuration file.",
        "HELP",
        "    Prints this help.",
    ];
    Reply::Array(
        LINES
            .iter()
            .map(|line| Reply::Simple(Bytes::from_static(line.as_bytes())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::{memory, save};

    #[test]
    fn memory_values() {
        assert_eq!(memory(b"64"), Some(64));
        assert_eq!(memory(b"1k"), Some(1000));
        assert_eq!(memory(b"1KB"), Some(1024));
        assert_eq!(memory(b"2gb"), Some(2 << 30));
        assert_eq!(memory(b""), Some(0));
        assert_eq!(memory(b"+5"), None);
        assert_eq!(memory(b"1gbb"), None);
        assert_eq!(memory(b"kb"), None);
        assert_eq!(memory(b"-1"), None);
    }

    #[test]
    fn save_values() {
        assert_eq!(save(b"").as_deref(), Some(""));
        assert_eq!(save(b"0100 010").as_deref(), Some("100 10"));
        assert_eq!(save(b"3600 1 300 100").as_deref(), Some("3600 1 300 100"));
        assert_eq!(save(b"100"), None);
        assert_eq!(save(b"0 1"), None);
        assert_eq!(save(b"1 -1"), None);
        assert_eq!(save(b"  100   10  "), None);
    }
}
