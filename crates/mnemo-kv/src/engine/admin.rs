//! Server commands of operators and ops tools: SLOWLOG (a real slow log), LATENCY HELP and
//! HISTOGRAM (the monitor itself is `latency.rs`), MEMORY, WAIT, and the commands a standalone
//! Redis with its default configuration answers without doing anything: cluster commands
//! (READONLY, READWRITE, ASKING, CLUSTER), replication (REPLICAOF, SLAVEOF, FAILOVER),
//! BGREWRITEAOF, DEBUG and MODULE (refused with Redis's texts, as `enable-debug-command` and
//! `enable-module-command` default to `no`), ACL of the one user, and LOLWUT.
//!
//! Replies and error texts are redis-server 7.0's (`tests/redis_admin.rs`).

use std::collections::VecDeque;

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_i64, CommandId as Id, Reply};

use super::commands::{err, err_owned};
use super::dict::{self, tag};
use super::keyspace::Ctx;
use super::limits::{SLOWLOG_ARGUMENTS_MAX, SLOWLOG_ARGUMENT_BYTES_MAX};
use super::list;
use super::store::Result;

/// One entry of the slow log, as SLOWLOG GET shows it.
#[derive(Clone, Debug)]
struct SlowEntry {
    id: u64,
    unix_s: i64,
    duration_us: i64,
    args: Vec<Bytes>,
}

/// The slow log: commands that ran longer than `slowlog-log-slower-than` microseconds, the
/// newest first, at most `slowlog-max-len` of them (Redis's `slowlog.c`). Volatile, as in
/// Redis.
#[derive(Debug)]
pub struct SlowLog {
    entries: VecDeque<SlowEntry>,
    next_id: u64,
    /// `slowlog-log-slower-than`: a negative value turns the log off.
    pub threshold_us: i64,
    /// `slowlog-max-len`.
    pub max_len: usize,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog {
            entries: VecDeque::new(),
            next_id: 0,
            threshold_us: 10_000,
            max_len: 128,
        }
    }
}

impl SlowLog {
    /// Records `args` if it ran for `duration_us` or longer than the threshold.
    pub fn record(&mut self, args: &[Bytes], duration_us: i64, unix_s: i64) {
        if self.threshold_us < 0 || duration_us < self.threshold_us {
            return;
        }
        let entry = SlowEntry {
            id: self.next_id,
            unix_s,
            duration_us,
            args: shown_args(args),
        };
        self.next_id += 1;
        self.entries.push_front(entry);
        self.entries.truncate(self.max_len);
    }

    /// `slowlog-max-len` changed: the oldest entries past it go at once, as in Redis.
    pub fn set_max_len(&mut self, max_len: usize) {
        self.max_len = max_len;
        self.entries.truncate(max_len);
    }

    fn get(&self, args: &[Bytes]) -> Reply {
        let count = match args.get(2) {
            None => 10,
            Some(arg) => match parse_i64(arg) {
                Some(-1) => usize::MAX,
                Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                _ => return err("ERR count should be greater than or equal to -1"),
            },
        };
        let entries = self.entries.iter().take(count).map(|entry| {
            Reply::Array(vec![
                Reply::Integer(i64::try_from(entry.id).unwrap_or(i64::MAX)),
                Reply::Integer(entry.unix_s),
                Reply::Integer(entry.duration_us),
                Reply::Array(entry.args.iter().cloned().map(Reply::Bulk).collect()),
                // The engine does not know the client's address or name.
                Reply::Bulk(Bytes::new()),
                Reply::Bulk(Bytes::new()),
            ])
        });
        Reply::Array(entries.collect())
    }
}

/// The arguments as Redis keeps them in its slow log: at most 32 (the last one saying how
/// many more there were), each cut at 128 bytes (saying how many more bytes it had).
fn shown_args(args: &[Bytes]) -> Vec<Bytes> {
    let kept = args.len().min(SLOWLOG_ARGUMENTS_MAX);
    let mut shown = Vec::with_capacity(kept);
    for (index, arg) in args.iter().take(kept).enumerate() {
        if index == SLOWLOG_ARGUMENTS_MAX - 1 && args.len() > SLOWLOG_ARGUMENTS_MAX {
            let more = args.len() - SLOWLOG_ARGUMENTS_MAX + 1;
            shown.push(Bytes::from(format!("... ({more} more arguments)")));
        } else if arg.len() > SLOWLOG_ARGUMENT_BYTES_MAX {
            let mut cut = arg[..SLOWLOG_ARGUMENT_BYTES_MAX].to_vec();
            let more = arg.len() - SLOWLOG_ARGUMENT_BYTES_MAX;
            cut.extend_from_slice(format!("... ({more} more bytes)").as_bytes());
            shown.push(Bytes::from(cut));
        } else {
            shown.push(arg.clone());
        }
    }
    shown
}

/// Whether `id` is one of this module's commands.
pub fn handles(id: Id) -> bool {
    matches!(
        id,
        Id::SlowlogGet
            | Id::SlowlogLen
            | Id::SlowlogReset
            | Id::SlowlogHelp
            | Id::LatencyHelp
            | Id::LatencyHistogram
            | Id::MemoryHelp
            | Id::MemoryMallocStats
            | Id::MemoryPurge
            | Id::Wait
            | Id::Readonly
            | Id::Readwrite
            | Id::Asking
            | Id::Cluster
            | Id::Replicaof
            | Id::Slaveof
            | Id::Failover
            | Id::Bgrewriteaof
            | Id::Debug
            | Id::ModuleHelp
            | Id::ModuleList
            | Id::ModuleLoad
            | Id::ModuleLoadex
            | Id::ModuleUnload
            | Id::AclCat
            | Id::AclGenpass
            | Id::AclLog
            | Id::AclUsers
            | Id::AclWhoami
            | Id::Lolwut
    )
}

/// Runs one of this module's commands (MEMORY STATS and USAGE read the pool: the engine
/// answers those).
pub fn run(
    spec: &'static CommandSpec,
    args: &[Bytes],
    slowlog: &mut SlowLog,
    rng: &mut impl FnMut() -> u64,
) -> Reply {
    match spec.id {
        Id::SlowlogGet if args.len() > 3 => subcommand_error(args, "SLOWLOG"),
        Id::SlowlogGet => slowlog.get(args),
        Id::SlowlogLen => count(slowlog.entries.len()),
        Id::SlowlogReset => {
            slowlog.entries.clear();
            Reply::ok()
        }
        Id::SlowlogHelp => help(SLOWLOG_HELP),
        // No per-command histograms are kept.
        Id::LatencyHistogram => Reply::Map(Vec::new()),
        Id::LatencyHelp => help(LATENCY_HELP),
        Id::MemoryHelp => help(MEMORY_HELP),
        Id::MemoryMallocStats => Reply::Verbatim {
            format: *b"txt",
            text: Bytes::from_static(b"Stats not supported for the current allocator"),
        },
        Id::MemoryPurge => Reply::ok(),
        Id::Wait => wait(args),
        Id::Readonly | Id::Readwrite | Id::Asking | Id::Cluster => {
            err("ERR This instance has cluster support disabled")
        }
        Id::Replicaof | Id::Slaveof => replicaof(args),
        Id::Failover => failover(args),
        // There is no append-only file to rewrite: every acknowledged write is in the pool.
        Id::Bgrewriteaof => Reply::Simple(Bytes::from_static(
            b"Background append only file rewriting started",
        )),
        Id::Debug => err(DEBUG_REFUSED),
        Id::ModuleList => Reply::Array(Vec::new()),
        Id::ModuleLoad | Id::ModuleLoadex | Id::ModuleUnload => err(MODULE_REFUSED),
        Id::ModuleHelp => help(MODULE_HELP),
        Id::AclCat => acl_cat(args),
        Id::AclGenpass => acl_genpass(args, rng),
        Id::AclLog => match args.get(2) {
            None => Reply::Array(Vec::new()),
            Some(arg) if args.len() == 3 && arg.eq_ignore_ascii_case(b"reset") => Reply::ok(),
            Some(arg) if args.len() == 3 => match parse_i64(arg) {
                Some(_) => Reply::Array(Vec::new()),
                None => err(errors::NOT_INTEGER),
            },
            Some(_) => subcommand_error(args, "ACL"),
        },
        Id::AclUsers => Reply::Array(vec![Reply::Bulk(Bytes::from_static(b"default"))]),
        Id::AclWhoami => Reply::Bulk(Bytes::from_static(b"default")),
        Id::Lolwut => lolwut(args),
        _ => err("ERR not a server command"),
    }
}

fn count(n: usize) -> Reply {
    Reply::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

fn help(lines: &[&'static str]) -> Reply {
    Reply::Array(
        lines
            .iter()
            .map(|line| Reply::Simple(Bytes::from_static(line.as_bytes())))
            .collect(),
    )
}

/// Redis's error for a known subcommand given the wrong arguments.
fn subcommand_error(args: &[Bytes], container: &str) -> Reply {
    err_owned(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {container} HELP.",
        String::from_utf8_lossy(&args[1])
    ))
}

/// WAIT numreplicas timeout: there are no replicas, so none acknowledged anything; Redis
/// without replicas answers 0 at once, whatever the timeout.
fn wait(args: &[Bytes]) -> Reply {
    if parse_i64(&args[1]).is_none() {
        return err(errors::NOT_INTEGER);
    }
    match parse_i64(&args[2]) {
        None => err("ERR timeout is not an integer or out of range"),
        Some(timeout) if timeout < 0 => err("ERR timeout is negative"),
        Some(_) => Reply::Integer(0),
    }
}

/// REPLICAOF NO ONE: already a master. REPLICAOF host port: mnemo does not replicate from a
/// Redis master (it ships sync points to a mirror: `mnemo serve --mirror`).
fn replicaof(args: &[Bytes]) -> Reply {
    if args[1].eq_ignore_ascii_case(b"no") && args[2].eq_ignore_ascii_case(b"one") {
        return Reply::ok();
    }
    match parse_i64(&args[2]) {
        Some(port) if (0..=65535).contains(&port) => err(
            "ERR mnemo does not replicate from a Redis master: its writes reach a mirror \
             through sync points (mnemo serve --mirror)",
        ),
        _ => err("ERR Invalid master port"),
    }
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms]: a server without replicas has
/// none to fail over to.
fn failover(args: &[Bytes]) -> Reply {
    let mut i = 1;
    let mut abort = false;
    while i < args.len() {
        let arg = &args[i];
        if arg.eq_ignore_ascii_case(b"abort") {
            abort = true;
            i += 1;
        } else if arg.eq_ignore_ascii_case(b"to") && i + 2 < args.len() {
            if parse_i64(&args[i + 2]).is_none() {
                return err(errors::NOT_INTEGER);
            }
            i += 3;
        } else if arg.eq_ignore_ascii_case(b"timeout") && i + 1 < args.len() {
            match parse_i64(&args[i + 1]) {
                None => return err(errors::NOT_INTEGER),
                Some(ms) if ms <= 0 => return err("ERR FAILOVER timeout must be greater than 0"),
                Some(_) => i += 2,
            }
        } else if arg.eq_ignore_ascii_case(b"force") {
            i += 1;
        } else {
            return err(errors::SYNTAX);
        }
    }
    if abort {
        return err("ERR No failover in progress.");
    }
    err("ERR FAILOVER requires connected replicas.")
}

/// ACL CAT: the categories Redis 7.0 knows; ACL CAT category: its commands (mnemo's table
/// keeps no categories, so only the error for an unknown one is Redis's).
fn acl_cat(args: &[Bytes]) -> Reply {
    match args.get(2) {
        None => Reply::Array(
            ACL_CATEGORIES
                .iter()
                .map(|name| Reply::Bulk(Bytes::from_static(name.as_bytes())))
                .collect(),
        ),
        Some(_) if args.len() > 3 => subcommand_error(args, "ACL"),
        Some(name) => {
            let known = ACL_CATEGORIES
                .iter()
                .any(|c| c.as_bytes().eq_ignore_ascii_case(name));
            if known {
                err("ERR ACL CAT of a category is not supported by mnemo")
            } else {
                err_owned(format!(
                    "ERR Unknown category '{}'",
                    String::from_utf8_lossy(name)
                ))
            }
        }
    }
}

/// ACL GENPASS [bits]: a random password of `bits` bits (256 by default) in hexadecimal,
/// rounded up to whole hex digits.
fn acl_genpass(args: &[Bytes], rng: &mut impl FnMut() -> u64) -> Reply {
    let bits = match args.get(2) {
        None => 256,
        Some(_) if args.len() > 3 => return subcommand_error(args, "ACL"),
        Some(arg) => match parse_i64(arg) {
            None => return err(errors::NOT_INTEGER),
            Some(bits) if (1..=4096).contains(&bits) => bits,
            Some(_) => {
                return err(
                    "ERR ACL GENPASS argument must be the number of bits for the output \
                     password, a positive number up to 4096",
                )
            }
        },
    };
    let digits = usize::try_from((bits + 3) / 4).unwrap_or(64);
    let mut text = String::with_capacity(digits + 16);
    while text.len() < digits {
        text.push_str(&format!("{:016x}", rng()));
    }
    text.truncate(digits);
    Reply::Bulk(Bytes::from(text))
}

/// LOLWUT [VERSION v]: the version line (Redis draws computer art above it for versions 5
/// and 6; mnemo draws none).
fn lolwut(args: &[Bytes]) -> Reply {
    if args.len() == 3 && args[1].eq_ignore_ascii_case(b"version") && parse_i64(&args[2]).is_none()
    {
        return err(errors::NOT_INTEGER);
    }
    let text = format!("Redis ver. {}\n", crate::server::limits::REDIS_VERSION);
    Reply::Verbatim {
        format: *b"txt",
        text: Bytes::from(text),
    }
}

/// Bytes of a keyspace or container entry before its key (`next | hash | meta | expire_ms |
/// value | vlen,vcap`, kv-engine.md "Persistent layout").
const ENTRY_HEADER_BYTES: u64 = 48;
/// Bytes of a container's header (tables and lists alike).
const CONTAINER_HEADER_BYTES: u64 = 80;

/// MEMORY USAGE key [SAMPLES count]: the bytes of the key's entry and value, from the
/// layout's sizes (entry header, key and inline value rounded to words, out-of-line string,
/// bucket word); for a container, its header plus its elements, of which `count` (5 by
/// default, 0 for all) are measured and the rest taken to be of their average size, as Redis
/// samples. Null for a missing key.
pub fn memory_usage(ctx: &mut Ctx<'_, '_>, args: &[Bytes]) -> Result<Reply> {
    let mut samples: u64 = 5;
    match args.len() {
        3 => {}
        5 if args[3].eq_ignore_ascii_case(b"samples") => match parse_i64(&args[4]) {
            Some(0) => samples = u64::MAX,
            Some(n) => match u64::try_from(n) {
                Ok(n) => samples = n,
                Err(_) => return Ok(err(errors::SYNTAX)),
            },
            None => return Ok(err(errors::NOT_INTEGER)),
        },
        _ => return Ok(err(errors::SYNTAX)),
    }
    let Some(found) = ctx.lookup(&args[2])? else {
        return Ok(Reply::NullBulk);
    };
    let e = &found.entry;
    let words = |n: u64| n.div_ceil(8) * 8;
    let mut bytes = 8 + ENTRY_HEADER_BYTES + words(e.key_len);
    match e.tag {
        tag::STRING if e.is_inline() => bytes += words(e.vcap.max(e.vlen)),
        tag::STRING => bytes += words(e.vlen),
        tag::LIST => {
            let elements = list::elements(ctx.tx, e.val)?;
            let segments = list::Header::read(ctx.tx, e.val)?.segs;
            let mut sampled = (0u64, 0u64);
            for &element in elements
                .iter()
                .take(usize::try_from(samples).unwrap_or(usize::MAX))
            {
                sampled.0 += 1;
                sampled.1 += 8 + words(list::value(ctx.tx, element)?.len() as u64);
            }
            bytes += CONTAINER_HEADER_BYTES + segments * 544;
            bytes += scaled(sampled, elements.len() as u64);
        }
        tag::HASH | tag::SET | tag::ZSET => {
            let header = dict::Header::read(ctx.tx, e.val)?;
            let mut sampled = (0u64, 0u64);
            dict::for_each(ctx.tx, e.val, |member| {
                sampled.0 += 1;
                sampled.1 += ENTRY_HEADER_BYTES + words(member.key_len);
                if member.tag == tag::STRING || member.is_inline() {
                    sampled.1 += words(member.vcap.max(member.vlen));
                }
                Ok(sampled.0 < samples)
            })?;
            bytes += CONTAINER_HEADER_BYTES + dict::SLOT_BYTES * (header.size0 + header.size1);
            bytes += scaled(sampled, header.count);
        }
        _ => {}
    }
    Ok(Reply::Integer(i64::try_from(bytes).unwrap_or(i64::MAX)))
}

/// `count` elements of which `sampled.0` measured `sampled.1` bytes together.
fn scaled(sampled: (u64, u64), count: u64) -> u64 {
    match sampled.0 {
        0 => 0,
        n => sampled.1.saturating_mul(count) / n,
    }
}

const DEBUG_REFUSED: &str = "ERR DEBUG command not allowed. If the enable-debug-command option \
    is set to \"local\", you can run it from a local connection, otherwise you need to set this \
    option in the configuration file, and then restart the server.";

const MODULE_REFUSED: &str = "ERR MODULE command not allowed. If the enable-module-command option \
    is set to \"local\", you can run it from a local connection, otherwise you need to set this \
    option in the configuration file, and then restart the server.";

/// MEMORY DOCTOR with `used` bytes allocated: Redis's texts for an instance below 5 MiB
/// (too little to judge) and for one with no issue (mnemo looks for none of Redis's
/// allocator issues: a pool has no fragmentation ratio or RSS to report).
pub fn memory_doctor(used: u64) -> Reply {
    let text: &'static [u8] = if used < 5 << 20 {
        b"Hi Sam, this instance is empty or is using very little memory, my issues detector \
        can't be used in these conditions. Please, leave for your mission on Earth and fill it \
        with some data. The new Sam and I will be back to our programming as soon as I \
        finished rebooting.\n"
    } else {
        b"Hi Sam, I can't find any memory issue in your instance. I can only account for what \
        occurs on this base.\n"
    };
    Reply::Verbatim {
        format: *b"txt",
        text: Bytes::from_static(text),
    }
}

const ACL_CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

const SLOWLOG_HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help.",
];

const LATENCY_HELP: &[&str] = &[
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return a human readable latency analysis report.",
    "GRAPH <event>",
    "    Return an ASCII latency graph for the <event> class.",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HISTOGRAM [COMMAND ...]",
    "    Return a cumulative distribution of latencies in the format of a histogram for the \
     specified command names.",
    "    If no commands are specified then all histograms are replied.",
    "HELP",
    "    Prints this help.",
];

const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

const MODULE_HELP: &[&str] = &[
    "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LIST",
    "    Return a list of loaded modules.",
    "LOAD <path> [<arg> ...]",
    "    Load a module library from <path>, passing to it any optional arguments.",
    "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
    "    Load a module library from <path>, while passing it module configurations and \
     optional arguments.",
    "UNLOAD <name>",
    "    Unload a module.",
    "HELP",
    "    Prints this help.",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|w| Bytes::from(w.to_string()))
            .collect()
    }

    #[test]
    fn slowlog_keeps_the_newest_up_to_its_length() {
        let mut log = SlowLog {
            threshold_us: 100,
            ..SlowLog::default()
        };
        log.record(&args("get fast"), 99, 1);
        assert!(log.entries.is_empty());
        for i in 0..5 {
            log.record(&args(&format!("set k{i} v")), 100 + i, 2);
        }
        log.set_max_len(3);
        let ids: Vec<u64> = log.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids, [4, 3, 2]);
        log.threshold_us = -1;
        log.record(&args("get slow"), 1_000_000, 3);
        assert_eq!(log.entries.len(), 3);
    }

    #[test]
    fn slowlog_cuts_long_arguments_as_redis() {
        let mut many = vec![Bytes::from_static(b"del")];
        many.extend((0..40).map(|i| Bytes::from(format!("k{i}"))));
        let shown = shown_args(&many);
        assert_eq!(shown.len(), 32);
        assert_eq!(&shown[31][..], b"... (10 more arguments)");
        let long = vec![Bytes::from(vec![b'x'; 130])];
        let shown = shown_args(&long);
        assert_eq!(shown[0].len(), 128 + b"... (2 more bytes)".len());
    }
}
