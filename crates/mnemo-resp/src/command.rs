//! The command table: every command the server knows, with Redis 7.0's arity, flags and key
//! positions, so that `COMMAND`, `COMMAND COUNT`, `COMMAND INFO` and argument-count checks
//! answer as Redis does.
//!
//! It is the server's only list of commands. Each entry carries a [`CommandId`]: the session
//! finds a request's entry once ([`resolve`]: name, subcommand, arity), and the session and
//! the engine then dispatch with a `match` on the id, never again on a name or an arity.
//!
//! Arity follows Redis: a positive number is the exact argument count (name included); a
//! negative one is the minimum. Key positions are Redis's legacy triple (first key, last key,
//! step), with last key -1 meaning "to the end" and 0 0 0 for commands without keys.

use crate::encode::Encoder;
use crate::errors::CommandError;

/// Command flags, as COMMAND INFO lists them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u16);

impl Flags {
    /// Modifies the keyspace.
    pub const WRITE: Flags = Flags(1 << 0);
    /// Only reads the keyspace.
    pub const READONLY: Flags = Flags(1 << 1);
    /// May grow memory use: refused when the pool is full.
    pub const DENYOOM: Flags = Flags(1 << 2);
    /// Administrative (CONFIG, SHUTDOWN).
    pub const ADMIN: Flags = Flags(1 << 3);
    /// Not allowed from scripts.
    pub const NOSCRIPT: Flags = Flags(1 << 4);
    /// Allowed while the dataset is loading.
    pub const LOADING: Flags = Flags(1 << 5);
    /// Allowed on a replica with stale data.
    pub const STALE: Flags = Flags(1 << 6);
    /// O(1) or O(log n): never blocks the server for long.
    pub const FAST: Flags = Flags(1 << 7);
    /// Allowed before authentication (AUTH, HELLO, QUIT).
    pub const NO_AUTH: Flags = Flags(1 << 8);

    /// Flag names in the order Redis prints them.
    const NAMES: [(Flags, &'static str); 9] = [
        (Flags::WRITE, "write"),
        (Flags::READONLY, "readonly"),
        (Flags::DENYOOM, "denyoom"),
        (Flags::ADMIN, "admin"),
        (Flags::NOSCRIPT, "noscript"),
        (Flags::LOADING, "loading"),
        (Flags::STALE, "stale"),
        (Flags::FAST, "fast"),
        (Flags::NO_AUTH, "no_auth"),
    ];

    /// No flags.
    pub const fn empty() -> Flags {
        Flags(0)
    }

    /// Both sets of flags.
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Whether every flag in `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the flags set, in Redis's order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Flags::NAMES
            .into_iter()
            .filter(move |(flag, _)| self.contains(*flag))
            .map(|(_, name)| name)
    }
}

/// One command (or subcommand) of the table.
#[derive(Debug, PartialEq, Eq)]
pub struct CommandSpec {
    /// Which command this is: what the server dispatches on once the table has found it.
    pub id: CommandId,
    /// Lower-case full name: "get", or "config|get" for a subcommand.
    pub name: &'static str,
    /// Redis arity: exact count if positive, minimum count if negative (name included; for a
    /// subcommand, the container's name and the subcommand's both count).
    pub arity: i32,
    /// What the command does, for COMMAND INFO and for the server's checks.
    pub flags: Flags,
    /// Position of the first key argument, 0 if none.
    pub first_key: i32,
    /// Position of the last key argument; -1 for the last argument.
    pub last_key: i32,
    /// Distance between key arguments.
    pub key_step: i32,
    /// Subcommands, sorted by name, for containers (CONFIG, CLIENT, COMMAND).
    pub subcommands: &'static [CommandSpec],
    /// `name` after the container's, cut once when the table is built: lookups compare it.
    short_name: &'static str,
}

impl CommandSpec {
    /// The name after the container's: "get" for "config|get".
    pub fn short_name(&self) -> &'static str {
        self.short_name
    }

    /// Whether `argc` arguments (name included) satisfy the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity >= 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// This command's entry in the COMMAND / COMMAND INFO reply, in Redis 7.0's 10-element
    /// layout: name, arity, flags, first key, last key, step, ACL categories, tips, key
    /// specifications, subcommands. Categories, tips and key specifications are left empty.
    pub fn encode_info(&self, encoder: &mut Encoder<'_>) {
        encoder.array_len(10);
        encoder.bulk(self.name.as_bytes());
        encoder.integer(i64::from(self.arity));
        encoder.set_len(self.flags.names().count());
        for name in self.flags.names() {
            encoder.simple(name.as_bytes());
        }
        encoder.integer(i64::from(self.first_key));
        encoder.integer(i64::from(self.last_key));
        encoder.integer(i64::from(self.key_step));
        encoder.set_len(0);
        encoder.set_len(0);
        encoder.set_len(0);
        encoder.array_len(self.subcommands.len());
        for sub in self.subcommands {
            sub.encode_info(encoder);
        }
    }
}

/// The whole table, sorted by name.
pub fn commands() -> &'static [CommandSpec] {
    COMMANDS
}

/// The command named `name`, in any letter case, without allocating.
pub fn lookup(name: &[u8]) -> Option<&'static CommandSpec> {
    find(COMMANDS, name)
}

/// The subcommand of `container` named `name` ("get" of "config"), in any letter case.
pub fn lookup_subcommand(container: &CommandSpec, name: &[u8]) -> Option<&'static CommandSpec> {
    find(container.subcommands, name)
}

/// A command by its full name, "get" or "config|get", as COMMAND INFO takes it.
pub fn lookup_full_name(name: &[u8]) -> Option<&'static CommandSpec> {
    match name.iter().position(|&byte| byte == b'|') {
        None => lookup(name),
        Some(bar) => {
            let container = lookup(name.get(..bar)?)?;
            lookup_subcommand(container, name.get(bar + 1..)?)
        }
    }
}

/// The error Redis gives if `argc` arguments do not fit `spec`'s arity.
pub fn check_arity(spec: &'static CommandSpec, argc: usize) -> Result<(), CommandError> {
    if spec.arity_ok(argc) {
        Ok(())
    } else {
        Err(CommandError::WrongArity {
            full_name: spec.name,
        })
    }
}

/// Finds the command a request runs and checks its argument count, in Redis's order: unknown
/// command, then unknown subcommand of a container, then arity. A container named alone
/// (`CONFIG`) fails the container's own arity.
pub fn resolve<A: AsRef<[u8]>>(argv: &[A]) -> Result<&'static CommandSpec, CommandError> {
    let Some(name) = argv.first() else {
        return Err(CommandError::Empty);
    };
    let Some(spec) = lookup(name.as_ref()) else {
        return Err(CommandError::unknown_command(argv));
    };
    let spec = match argv.get(1) {
        Some(sub) if !spec.subcommands.is_empty() => {
            let Some(found) = lookup_subcommand(spec, sub.as_ref()) else {
                return Err(CommandError::UnknownSubcommand {
                    container: spec.name,
                    subcommand: sub.as_ref().to_vec(),
                });
            };
            found
        }
        _ => spec,
    };
    check_arity(spec, argv.len())?;
    Ok(spec)
}

/// The positions in `args` (the command's name first) of its key arguments, as COMMAND
/// GETKEYS finds them: from the entry's key positions, or for the commands whose keys move
/// (a `numkeys` argument, SORT's STORE) from the arguments themselves. `None` when the
/// arguments do not say where the keys are (a `numkeys` that is not a number, or larger than
/// the arguments that follow). Empty for a command without keys.
pub fn key_positions<A: AsRef<[u8]>>(spec: &CommandSpec, args: &[A]) -> Option<Vec<usize>> {
    let numkeys = |at: usize, first: Option<usize>| -> Option<Vec<usize>> {
        let text = std::str::from_utf8(args.get(at)?.as_ref()).ok()?;
        let count: usize = text.parse().ok().filter(|&n| n > 0)?;
        let keys = at + 1..at + 1 + count;
        if keys.end > args.len() {
            return None;
        }
        Some(first.into_iter().chain(keys).collect())
    };
    match spec.id {
        CommandId::Zunion
        | CommandId::Zinter
        | CommandId::Zdiff
        | CommandId::Zintercard
        | CommandId::Sintercard
        | CommandId::Lmpop
        | CommandId::Zmpop => numkeys(1, None),
        CommandId::Blmpop | CommandId::Bzmpop => numkeys(2, None),
        CommandId::Eval | CommandId::EvalRo | CommandId::Evalsha | CommandId::EvalshaRo => {
            numkeys(2, None)
        }
        CommandId::Zunionstore | CommandId::Zinterstore | CommandId::Zdiffstore => {
            numkeys(2, Some(1))
        }
        // Shard channels sit at key positions (for cluster slots) but are not keys.
        CommandId::Spublish | CommandId::Ssubscribe | CommandId::Sunsubscribe => Some(Vec::new()),
        CommandId::Migrate => {
            let mut i = 6;
            while i < args.len() {
                let arg = args[i].as_ref();
                if arg.eq_ignore_ascii_case(b"auth") {
                    i += 1;
                } else if arg.eq_ignore_ascii_case(b"auth2") {
                    i += 2;
                } else if arg.eq_ignore_ascii_case(b"keys") {
                    if !args[3].as_ref().is_empty() {
                        return None;
                    }
                    return Some((i + 1..args.len()).collect());
                }
                i += 1;
            }
            Some(vec![3])
        }
        CommandId::Georadius | CommandId::Georadiusbymember => {
            let mut store = None;
            let first_option = if spec.id == CommandId::Georadius {
                6
            } else {
                5
            };
            let mut i = first_option;
            while i < args.len() {
                let arg = args[i].as_ref();
                let stores =
                    arg.eq_ignore_ascii_case(b"store") || arg.eq_ignore_ascii_case(b"storedist");
                if stores && i + 1 < args.len() {
                    store = Some(i + 1);
                    i += 1;
                }
                i += 1;
            }
            Some([1].into_iter().chain(store).collect())
        }
        CommandId::Sort => {
            let mut store = None;
            let mut i = 2;
            while i < args.len() {
                let arg = args[i].as_ref();
                if arg.eq_ignore_ascii_case(b"limit") {
                    i += 2;
                } else if arg.eq_ignore_ascii_case(b"get") || arg.eq_ignore_ascii_case(b"by") {
                    i += 1;
                } else if arg.eq_ignore_ascii_case(b"store") && i + 1 < args.len() {
                    store = Some(i + 1);
                    i += 1;
                }
                i += 1;
            }
            Some([1].into_iter().chain(store).collect())
        }
        _ if spec.first_key <= 0 => Some(Vec::new()),
        _ => {
            let first = usize::try_from(spec.first_key).ok()?;
            let last = if spec.last_key < 0 {
                let back = usize::try_from(spec.last_key.unsigned_abs()).ok()?;
                args.len().checked_sub(back)?
            } else {
                usize::try_from(spec.last_key).ok()?
            };
            let step = usize::try_from(spec.key_step).ok()?.max(1);
            Some(
                (first..=last.min(args.len().saturating_sub(1)))
                    .step_by(step)
                    .collect(),
            )
        }
    }
}

/// Binary search with a case-insensitive comparison: table names are lower case.
fn find(table: &'static [CommandSpec], name: &[u8]) -> Option<&'static CommandSpec> {
    table
        .binary_search_by(|spec| {
            spec.short_name
                .bytes()
                .cmp(name.iter().map(u8::to_ascii_lowercase))
        })
        .ok()
        .and_then(|index| table.get(index))
}

const W: Flags = Flags::WRITE;
const R: Flags = Flags::READONLY;
const WM: Flags = Flags::WRITE.union(Flags::DENYOOM);
const WMF: Flags = WM.union(Flags::FAST);
const WF: Flags = Flags::WRITE.union(Flags::FAST);
const RF: Flags = Flags::READONLY.union(Flags::FAST);
const LS: Flags = Flags::LOADING.union(Flags::STALE);
const NLS: Flags = Flags::NOSCRIPT.union(LS);
const ANLS: Flags = Flags::ADMIN.union(NLS);
const AN: Flags = Flags::ADMIN.union(Flags::NOSCRIPT);
const NLS_FAST_NO_AUTH: Flags = NLS.union(Flags::FAST).union(Flags::NO_AUTH);
const NONE: Flags = Flags::empty();
/// EVAL and its kin: a script may write, so they are not "write"; `noscript stale`.
const NS: Flags = Flags::NOSCRIPT.union(Flags::STALE);

const fn spec(
    id: CommandId,
    name: &'static str,
    arity: i32,
    flags: Flags,
    keys: (i32, i32, i32),
) -> CommandSpec {
    CommandSpec {
        id,
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        key_step: keys.2,
        subcommands: &[],
        short_name: after_bar(name),
    }
}

const fn container(
    id: CommandId,
    name: &'static str,
    arity: i32,
    flags: Flags,
    subcommands: &'static [CommandSpec],
) -> CommandSpec {
    CommandSpec {
        id,
        name,
        arity,
        flags,
        first_key: 0,
        last_key: 0,
        key_step: 0,
        subcommands,
        short_name: after_bar(name),
    }
}

/// `name` after its last '|' ("get" for "config|get"), at compile time.
const fn after_bar(name: &'static str) -> &'static str {
    let mut head = name.as_bytes();
    while let [rest @ .., last] = head {
        if *last == b'|' {
            break;
        }
        head = rest;
    }
    let (_, tail) = name.as_bytes().split_at(head.len());
    match std::str::from_utf8(tail) {
        Ok(short) => short,
        Err(_) => name,
    }
}

/// Declares [`CommandId`] and the tables from one list, so that each command is written once:
/// `Id => spec(name, arity, flags, keys)` or `Id => container(name, arity, flags, subtable)`.
/// A variant per entry, in the tables' order; an id used twice does not compile.
macro_rules! command_table {
    ($(
        $(#[$doc:meta])*
        const $table:ident = [$($id:ident => $make:ident($name:literal $(, $arg:expr)*),)*];
    )*) => {
        /// Which command (or subcommand) a [`CommandSpec`] is, one variant per entry of the
        /// table. The server finds a request's spec once ([`resolve`]) and then dispatches
        /// with a `match` on its id, never on its name.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum CommandId {
            $($(
                #[doc = concat!("`", $name, "`")]
                $id,
            )*)*
        }

        $(
            $(#[$doc])*
            const $table: &[CommandSpec] = &[$($make(CommandId::$id, $name $(, $arg)*),)*];
        )*
    };
}

const NO_KEYS: (i32, i32, i32) = (0, 0, 0);
const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
const ALL_KEYS: (i32, i32, i32) = (1, -1, 1);

command_table! {
    const CLIENT = [
        ClientCaching => spec("client|caching", 3, NLS, NO_KEYS),
        ClientGetname => spec("client|getname", 2, NLS, NO_KEYS),
        ClientGetredir => spec("client|getredir", 2, NLS, NO_KEYS),
        ClientId => spec("client|id", 2, NLS, NO_KEYS),
        ClientInfo => spec("client|info", 2, NLS, NO_KEYS),
        ClientKill => spec("client|kill", -3, ANLS, NO_KEYS),
        ClientList => spec("client|list", -2, ANLS, NO_KEYS),
        ClientNoEvict => spec("client|no-evict", 3, ANLS, NO_KEYS),
        ClientPause => spec("client|pause", -3, ANLS, NO_KEYS),
        ClientReply => spec("client|reply", 3, NLS, NO_KEYS),
        ClientSetinfo => spec("client|setinfo", 4, NLS, NO_KEYS),
        ClientSetname => spec("client|setname", 3, NLS, NO_KEYS),
        ClientTrackinginfo => spec("client|trackinginfo", 2, NLS, NO_KEYS),
        ClientUnpause => spec("client|unpause", 2, ANLS, NO_KEYS),
    ];

    const COMMAND = [
        CommandCount => spec("command|count", 2, LS, NO_KEYS),
        CommandDocs => spec("command|docs", -2, LS, NO_KEYS),
        CommandGetkeys => spec("command|getkeys", -4, LS, NO_KEYS),
        CommandInfo => spec("command|info", -2, LS, NO_KEYS),
        CommandList => spec("command|list", -2, LS, NO_KEYS),
    ];

    const CONFIG = [
        ConfigGet => spec("config|get", -3, ANLS, NO_KEYS),
        ConfigHelp => spec("config|help", 2, LS, NO_KEYS),
        ConfigResetstat => spec("config|resetstat", 2, ANLS, NO_KEYS),
        ConfigRewrite => spec("config|rewrite", 2, ANLS, NO_KEYS),
        ConfigSet => spec("config|set", -4, ANLS, NO_KEYS),
    ];

    const FUNCTION = [
        FunctionFlush => spec("function|flush", -2, W.union(Flags::NOSCRIPT), NO_KEYS),
        FunctionList => spec("function|list", -2, Flags::NOSCRIPT, NO_KEYS),
    ];

    const PUBSUB = [
        PubsubChannels => spec("pubsub|channels", -2, LS, NO_KEYS),
        PubsubNumpat => spec("pubsub|numpat", 2, LS, NO_KEYS),
        PubsubNumsub => spec("pubsub|numsub", -2, LS, NO_KEYS),
        PubsubShardchannels => spec("pubsub|shardchannels", -2, LS, NO_KEYS),
        PubsubShardnumsub => spec("pubsub|shardnumsub", -2, LS, NO_KEYS),
    ];

    const ACL = [
        AclCat => spec("acl|cat", -2, NLS, NO_KEYS),
        AclGenpass => spec("acl|genpass", -2, NLS, NO_KEYS),
        AclLog => spec("acl|log", -2, ANLS, NO_KEYS),
        AclUsers => spec("acl|users", 2, ANLS, NO_KEYS),
        AclWhoami => spec("acl|whoami", 2, NLS, NO_KEYS),
    ];

    const LATENCY = [
        LatencyDoctor => spec("latency|doctor", 2, ANLS, NO_KEYS),
        LatencyGraph => spec("latency|graph", 3, ANLS, NO_KEYS),
        LatencyHelp => spec("latency|help", 2, LS, NO_KEYS),
        LatencyHistogram => spec("latency|histogram", -2, ANLS, NO_KEYS),
        LatencyHistory => spec("latency|history", 3, ANLS, NO_KEYS),
        LatencyLatest => spec("latency|latest", 2, ANLS, NO_KEYS),
        LatencyReset => spec("latency|reset", -2, ANLS, NO_KEYS),
    ];

    const MEMORY = [
        MemoryDoctor => spec("memory|doctor", 2, NONE, NO_KEYS),
        MemoryHelp => spec("memory|help", 2, LS, NO_KEYS),
        MemoryMallocStats => spec("memory|malloc-stats", 2, NONE, NO_KEYS),
        MemoryPurge => spec("memory|purge", 2, NONE, NO_KEYS),
        MemoryStats => spec("memory|stats", 2, NONE, NO_KEYS),
        MemoryUsage => spec("memory|usage", -3, R, (2, 2, 1)),
    ];

    const MODULE = [
        ModuleHelp => spec("module|help", 2, LS, NO_KEYS),
        ModuleList => spec("module|list", 2, AN, NO_KEYS),
        ModuleLoad => spec("module|load", -3, AN, NO_KEYS),
        ModuleLoadex => spec("module|loadex", -3, AN, NO_KEYS),
        ModuleUnload => spec("module|unload", 3, AN, NO_KEYS),
    ];

    const SCRIPT = [
        ScriptExists => spec("script|exists", -3, Flags::NOSCRIPT, NO_KEYS),
        ScriptFlush => spec("script|flush", -2, Flags::NOSCRIPT, NO_KEYS),
        ScriptHelp => spec("script|help", 2, LS, NO_KEYS),
        ScriptKill => spec("script|kill", 2, Flags::NOSCRIPT, NO_KEYS),
        ScriptLoad => spec("script|load", 3, Flags::NOSCRIPT.union(Flags::STALE), NO_KEYS),
    ];

    const SLOWLOG = [
        SlowlogGet => spec("slowlog|get", -2, Flags::ADMIN.union(LS), NO_KEYS),
        SlowlogHelp => spec("slowlog|help", 2, LS, NO_KEYS),
        SlowlogLen => spec("slowlog|len", 2, Flags::ADMIN.union(LS), NO_KEYS),
        SlowlogReset => spec("slowlog|reset", 2, Flags::ADMIN.union(LS), NO_KEYS),
    ];

    const OBJECT = [
        ObjectEncoding => spec("object|encoding", 3, R, (2, 2, 1)),
        ObjectFreq => spec("object|freq", 3, R, (2, 2, 1)),
        ObjectHelp => spec("object|help", 2, LS, NO_KEYS),
        ObjectIdletime => spec("object|idletime", 3, R, (2, 2, 1)),
        ObjectRefcount => spec("object|refcount", 3, R, (2, 2, 1)),
    ];

    /// Every command the server answers: issue 6's, and issue 17's so far (databases,
    /// strings and bitmaps with BITFIELD, the keyspace with SORT, lists with the blocking
    /// pops, hashes, sets, sorted sets, transactions, scripting, CONFIG, INFO, SAVE, SLOWLOG, LATENCY,
    /// MEMORY, and the server commands a standalone Redis answers without doing anything:
    /// cluster, replication and module commands). Values from Redis 7.0's command table (the
    /// flags this table knows), checked against a real redis-server by
    /// `tests/against_redis.rs`.
    const COMMANDS = [
        Acl => container("acl", -2, NONE, ACL),
        Append => spec("append", 3, WMF, ONE_KEY),
        Asking => spec("asking", 1, Flags::FAST, NO_KEYS),
        Auth => spec("auth", -2, NLS_FAST_NO_AUTH, NO_KEYS),
        Bgrewriteaof => spec("bgrewriteaof", 1, AN, NO_KEYS),
        Bgsave => spec("bgsave", -1, AN, NO_KEYS),
        Bitcount => spec("bitcount", -2, R, ONE_KEY),
        Bitfield => spec("bitfield", -2, WM, ONE_KEY),
        BitfieldRo => spec("bitfield_ro", -2, RF, ONE_KEY),
        Bitop => spec("bitop", -4, WM, (2, -1, 1)),
        Bitpos => spec("bitpos", -3, R, ONE_KEY),
        Blmove => spec("blmove", 6, WM.union(Flags::NOSCRIPT), (1, 2, 1)),
        Blmpop => spec("blmpop", -5, W, NO_KEYS),
        Blpop => spec("blpop", -3, W.union(Flags::NOSCRIPT), (1, -2, 1)),
        Brpop => spec("brpop", -3, W.union(Flags::NOSCRIPT), (1, -2, 1)),
        Brpoplpush => spec("brpoplpush", 4, WM.union(Flags::NOSCRIPT), (1, 2, 1)),
        Bzmpop => spec("bzmpop", -5, W, NO_KEYS),
        Bzpopmax => spec("bzpopmax", -3, WF.union(Flags::NOSCRIPT), (1, -2, 1)),
        Bzpopmin => spec("bzpopmin", -3, WF.union(Flags::NOSCRIPT), (1, -2, 1)),
        Client => container("client", -2, NONE, CLIENT),
        Cluster => spec("cluster", -2, NONE, NO_KEYS),
        Command => container("command", -1, LS, COMMAND),
        Config => container("config", -2, NONE, CONFIG),
        Copy => spec("copy", -3, WM, (1, 2, 1)),
        Dbsize => spec("dbsize", 1, RF, NO_KEYS),
        Debug => spec("debug", -2, ANLS, NO_KEYS),
        Decr => spec("decr", 2, WMF, ONE_KEY),
        Decrby => spec("decrby", 3, WMF, ONE_KEY),
        Del => spec("del", -2, W, ALL_KEYS),
        Discard => spec("discard", 1, NLS.union(Flags::FAST), NO_KEYS),
        Dump => spec("dump", 2, R, ONE_KEY),
        Echo => spec("echo", 2, LS.union(Flags::FAST), NO_KEYS),
        Eval => spec("eval", -3, NS, NO_KEYS),
        EvalRo => spec("eval_ro", -3, R.union(NS), NO_KEYS),
        Evalsha => spec("evalsha", -3, NS, NO_KEYS),
        EvalshaRo => spec("evalsha_ro", -3, R.union(NS), NO_KEYS),
        Exec => spec("exec", 1, NLS, NO_KEYS),
        Exists => spec("exists", -2, RF, ALL_KEYS),
        Expire => spec("expire", -3, WF, ONE_KEY),
        Expireat => spec("expireat", -3, WF, ONE_KEY),
        Expiretime => spec("expiretime", 2, RF, ONE_KEY),
        Failover => spec("failover", -1, AN.union(Flags::STALE), NO_KEYS),
        Flushall => spec("flushall", -1, W, NO_KEYS),
        Flushdb => spec("flushdb", -1, W, NO_KEYS),
        Function => container("function", -2, NONE, FUNCTION),
        Geoadd => spec("geoadd", -5, WM, ONE_KEY),
        Geodist => spec("geodist", -4, R, ONE_KEY),
        Geohash => spec("geohash", -2, R, ONE_KEY),
        Geopos => spec("geopos", -2, R, ONE_KEY),
        Georadius => spec("georadius", -6, WM, ONE_KEY),
        GeoradiusRo => spec("georadius_ro", -6, R, ONE_KEY),
        Georadiusbymember => spec("georadiusbymember", -5, WM, ONE_KEY),
        GeoradiusbymemberRo => spec("georadiusbymember_ro", -5, R, ONE_KEY),
        Geosearch => spec("geosearch", -7, R, ONE_KEY),
        Geosearchstore => spec("geosearchstore", -8, WM, (1, 2, 1)),
        Get => spec("get", 2, RF, ONE_KEY),
        Getbit => spec("getbit", 3, RF, ONE_KEY),
        Getdel => spec("getdel", 2, WF, ONE_KEY),
        Getex => spec("getex", -2, WF, ONE_KEY),
        Getrange => spec("getrange", 4, R, ONE_KEY),
        Getset => spec("getset", 3, WMF, ONE_KEY),
        Hdel => spec("hdel", -3, WF, ONE_KEY),
        Hello => spec("hello", -1, NLS_FAST_NO_AUTH, NO_KEYS),
        Hexists => spec("hexists", 3, RF, ONE_KEY),
        Hget => spec("hget", 3, RF, ONE_KEY),
        Hgetall => spec("hgetall", 2, R, ONE_KEY),
        Hincrby => spec("hincrby", 4, WMF, ONE_KEY),
        Hincrbyfloat => spec("hincrbyfloat", 4, WMF, ONE_KEY),
        Hkeys => spec("hkeys", 2, R, ONE_KEY),
        Hlen => spec("hlen", 2, RF, ONE_KEY),
        Hmget => spec("hmget", -3, RF, ONE_KEY),
        Hmset => spec("hmset", -4, WMF, ONE_KEY),
        Hrandfield => spec("hrandfield", -2, R, ONE_KEY),
        Hscan => spec("hscan", -3, R, ONE_KEY),
        Hset => spec("hset", -4, WMF, ONE_KEY),
        Hsetnx => spec("hsetnx", 4, WMF, ONE_KEY),
        Hstrlen => spec("hstrlen", 3, RF, ONE_KEY),
        Hvals => spec("hvals", 2, R, ONE_KEY),
        Incr => spec("incr", 2, WMF, ONE_KEY),
        Incrby => spec("incrby", 3, WMF, ONE_KEY),
        Incrbyfloat => spec("incrbyfloat", 3, WMF, ONE_KEY),
        Info => spec("info", -1, LS, NO_KEYS),
        Keys => spec("keys", 2, R, NO_KEYS),
        Lastsave => spec("lastsave", 1, LS.union(Flags::FAST), NO_KEYS),
        Latency => container("latency", -2, NONE, LATENCY),
        Lcs => spec("lcs", -3, R, (1, 2, 1)),
        Lindex => spec("lindex", 3, R, ONE_KEY),
        Linsert => spec("linsert", 5, WM, ONE_KEY),
        Llen => spec("llen", 2, RF, ONE_KEY),
        Lmove => spec("lmove", 5, WM, (1, 2, 1)),
        Lmpop => spec("lmpop", -4, W, NO_KEYS),
        Lolwut => spec("lolwut", -1, RF, NO_KEYS),
        Lpop => spec("lpop", -2, WF, ONE_KEY),
        Lpos => spec("lpos", -3, R, ONE_KEY),
        Lpush => spec("lpush", -3, WMF, ONE_KEY),
        Lpushx => spec("lpushx", -3, WMF, ONE_KEY),
        Lrange => spec("lrange", 4, R, ONE_KEY),
        Lrem => spec("lrem", 4, W, ONE_KEY),
        Lset => spec("lset", 4, WM, ONE_KEY),
        Ltrim => spec("ltrim", 4, W, ONE_KEY),
        Memory => container("memory", -2, NONE, MEMORY),
        Mget => spec("mget", -2, RF, ALL_KEYS),
        Migrate => spec("migrate", -6, W, (3, 3, 1)),
        Module => container("module", -2, NONE, MODULE),
        Move => spec("move", 3, WF, ONE_KEY),
        Mset => spec("mset", -3, WM, (1, -1, 2)),
        Msetnx => spec("msetnx", -3, WM, (1, -1, 2)),
        Multi => spec("multi", 1, NLS.union(Flags::FAST), NO_KEYS),
        Object => container("object", -2, NONE, OBJECT),
        Persist => spec("persist", 2, WF, ONE_KEY),
        Pexpire => spec("pexpire", -3, WF, ONE_KEY),
        Pexpireat => spec("pexpireat", -3, WF, ONE_KEY),
        Pexpiretime => spec("pexpiretime", 2, RF, ONE_KEY),
        Pfadd => spec("pfadd", -2, WMF, ONE_KEY),
        Pfcount => spec("pfcount", -2, R, ALL_KEYS),
        Pfdebug => spec("pfdebug", 3, WM.union(Flags::ADMIN), (2, 2, 1)),
        Pfmerge => spec("pfmerge", -2, WM, ALL_KEYS),
        Pfselftest => spec("pfselftest", 1, Flags::ADMIN, NO_KEYS),
        Ping => spec("ping", -1, Flags::FAST, NO_KEYS),
        Psetex => spec("psetex", 4, WM, ONE_KEY),
        Psubscribe => spec("psubscribe", -2, NLS, NO_KEYS),
        Pttl => spec("pttl", 2, RF, ONE_KEY),
        Publish => spec("publish", 3, LS.union(Flags::FAST), NO_KEYS),
        Pubsub => container("pubsub", -2, NONE, PUBSUB),
        Punsubscribe => spec("punsubscribe", -1, NLS, NO_KEYS),
        Quit => spec("quit", -1, NLS_FAST_NO_AUTH, NO_KEYS),
        Randomkey => spec("randomkey", 1, R, NO_KEYS),
        Readonly => spec("readonly", 1, LS.union(Flags::FAST), NO_KEYS),
        Readwrite => spec("readwrite", 1, LS.union(Flags::FAST), NO_KEYS),
        Rename => spec("rename", 3, W, (1, 2, 1)),
        Renamenx => spec("renamenx", 3, WF, (1, 2, 1)),
        Replicaof => spec("replicaof", 3, AN.union(Flags::STALE), NO_KEYS),
        Reset => spec("reset", 1, NLS_FAST_NO_AUTH, NO_KEYS),
        Restore => spec("restore", -4, WM, ONE_KEY),
        RestoreAsking => spec("restore-asking", -4, WM, ONE_KEY),
        Role => spec("role", 1, NLS.union(Flags::FAST), NO_KEYS),
        Rpop => spec("rpop", -2, WF, ONE_KEY),
        Rpoplpush => spec("rpoplpush", 3, WM, (1, 2, 1)),
        Rpush => spec("rpush", -3, WMF, ONE_KEY),
        Rpushx => spec("rpushx", -3, WMF, ONE_KEY),
        Sadd => spec("sadd", -3, WMF, ONE_KEY),
        Save => spec("save", 1, AN, NO_KEYS),
        Scan => spec("scan", -2, R, NO_KEYS),
        Scard => spec("scard", 2, RF, ONE_KEY),
        Script => container("script", -2, NONE, SCRIPT),
        Sdiff => spec("sdiff", -2, R, ALL_KEYS),
        Sdiffstore => spec("sdiffstore", -3, WM, ALL_KEYS),
        Select => spec("select", 2, LS.union(Flags::FAST), NO_KEYS),
        Set => spec("set", -3, WM, ONE_KEY),
        Setbit => spec("setbit", 4, WM, ONE_KEY),
        Setex => spec("setex", 4, WM, ONE_KEY),
        Setnx => spec("setnx", 3, WMF, ONE_KEY),
        Setrange => spec("setrange", 4, WM, ONE_KEY),
        Shutdown => spec("shutdown", -1, ANLS, NO_KEYS),
        Sinter => spec("sinter", -2, R, ALL_KEYS),
        Sintercard => spec("sintercard", -3, R, NO_KEYS),
        Sinterstore => spec("sinterstore", -3, WM, ALL_KEYS),
        Sismember => spec("sismember", 3, RF, ONE_KEY),
        Slaveof => spec("slaveof", 3, AN.union(Flags::STALE), NO_KEYS),
        Slowlog => container("slowlog", -2, NONE, SLOWLOG),
        Smembers => spec("smembers", 2, R, ONE_KEY),
        Smismember => spec("smismember", -3, RF, ONE_KEY),
        Smove => spec("smove", 4, WF, (1, 2, 1)),
        Sort => spec("sort", -2, WM, ONE_KEY),
        SortRo => spec("sort_ro", -2, R, ONE_KEY),
        Spop => spec("spop", -2, WF, ONE_KEY),
        Spublish => spec("spublish", 3, LS.union(Flags::FAST), ONE_KEY),
        Srandmember => spec("srandmember", -2, R, ONE_KEY),
        Srem => spec("srem", -3, WF, ONE_KEY),
        Sscan => spec("sscan", -3, R, ONE_KEY),
        Ssubscribe => spec("ssubscribe", -2, NLS, ALL_KEYS),
        Strlen => spec("strlen", 2, RF, ONE_KEY),
        Subscribe => spec("subscribe", -2, NLS, NO_KEYS),
        Substr => spec("substr", 4, R, ONE_KEY),
        Sunion => spec("sunion", -2, R, ALL_KEYS),
        Sunionstore => spec("sunionstore", -3, WM, ALL_KEYS),
        Sunsubscribe => spec("sunsubscribe", -1, NLS, ALL_KEYS),
        Swapdb => spec("swapdb", 3, WF, NO_KEYS),
        Time => spec("time", 1, LS.union(Flags::FAST), NO_KEYS),
        Touch => spec("touch", -2, RF, ALL_KEYS),
        Ttl => spec("ttl", 2, RF, ONE_KEY),
        Type => spec("type", 2, RF, ONE_KEY),
        Unlink => spec("unlink", -2, WF, ALL_KEYS),
        Unsubscribe => spec("unsubscribe", -1, NLS, NO_KEYS),
        Unwatch => spec("unwatch", 1, NLS.union(Flags::FAST), NO_KEYS),
        Wait => spec("wait", 3, Flags::NOSCRIPT, NO_KEYS),
        Watch => spec("watch", -2, NLS.union(Flags::FAST), ALL_KEYS),
        Zadd => spec("zadd", -4, WMF, ONE_KEY),
        Zcard => spec("zcard", 2, RF, ONE_KEY),
        Zcount => spec("zcount", 4, RF, ONE_KEY),
        Zdiff => spec("zdiff", -3, R, NO_KEYS),
        Zdiffstore => spec("zdiffstore", -4, WM, ONE_KEY),
        Zincrby => spec("zincrby", 4, WMF, ONE_KEY),
        Zinter => spec("zinter", -3, R, NO_KEYS),
        Zintercard => spec("zintercard", -3, R, NO_KEYS),
        Zinterstore => spec("zinterstore", -4, WM, ONE_KEY),
        Zlexcount => spec("zlexcount", 4, RF, ONE_KEY),
        Zmpop => spec("zmpop", -4, W, NO_KEYS),
        Zmscore => spec("zmscore", -3, RF, ONE_KEY),
        Zpopmax => spec("zpopmax", -2, WF, ONE_KEY),
        Zpopmin => spec("zpopmin", -2, WF, ONE_KEY),
        Zrandmember => spec("zrandmember", -2, R, ONE_KEY),
        Zrange => spec("zrange", -4, R, ONE_KEY),
        Zrangebylex => spec("zrangebylex", -4, R, ONE_KEY),
        Zrangebyscore => spec("zrangebyscore", -4, R, ONE_KEY),
        Zrangestore => spec("zrangestore", -5, WM, (1, 2, 1)),
        Zrank => spec("zrank", 3, RF, ONE_KEY),
        Zrem => spec("zrem", -3, WF, ONE_KEY),
        Zremrangebylex => spec("zremrangebylex", 4, W, ONE_KEY),
        Zremrangebyrank => spec("zremrangebyrank", 4, W, ONE_KEY),
        Zremrangebyscore => spec("zremrangebyscore", 4, W, ONE_KEY),
        Zrevrange => spec("zrevrange", -4, R, ONE_KEY),
        Zrevrangebylex => spec("zrevrangebylex", -4, R, ONE_KEY),
        Zrevrangebyscore => spec("zrevrangebyscore", -4, R, ONE_KEY),
        Zrevrank => spec("zrevrank", 3, RF, ONE_KEY),
        Zscan => spec("zscan", -3, R, ONE_KEY),
        Zscore => spec("zscore", 3, RF, ONE_KEY),
        Zunion => spec("zunion", -3, R, NO_KEYS),
        Zunionstore => spec("zunionstore", -4, WM, ONE_KEY),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn tables_are_sorted_lower_case_and_unique() {
        let mut tables = vec![COMMANDS];
        tables.extend(
            COMMANDS
                .iter()
                .map(|spec| spec.subcommands)
                .filter(|subs| !subs.is_empty()),
        );
        for table in tables {
            for pair in table.windows(2) {
                if let [a, b] = pair {
                    assert!(
                        a.short_name() < b.short_name(),
                        "{} before {}",
                        a.name,
                        b.name
                    );
                }
            }
            for spec in table {
                assert_eq!(spec.name, spec.name.to_ascii_lowercase());
                assert!(spec.arity != 0, "{}", spec.name);
                for sub in spec.subcommands {
                    assert!(
                        sub.name.starts_with(&format!("{}|", spec.name)),
                        "{}",
                        sub.name
                    );
                }
            }
        }
    }

    /// Every command issue 6 lists must be in the table.
    #[test]
    fn issue_6_commands_are_present() {
        let required =
            "PING SET GET INCR LPUSH RPUSH LPOP RPOP SADD HSET SPOP ZADD ZPOPMIN LRANGE MSET \
            DEL EXISTS EXPIRE TTL MGET GETSET APPEND STRLEN INCRBY DECR HGET HGETALL HDEL SMEMBERS \
            SREM SCARD ZRANGE ZSCORE KEYS SCAN DBSIZE FLUSHALL SELECT INFO CONFIG AUTH CLIENT \
            COMMAND QUIT SHUTDOWN HELLO";
        for name in required.split_whitespace() {
            assert!(lookup(name.as_bytes()).is_some(), "{name}");
        }
        let config = lookup(b"config").expect("config");
        assert!(lookup_subcommand(config, b"GET").is_some());
        let client = lookup(b"client").expect("client");
        assert!(lookup_subcommand(client, b"SetName").is_some());
    }

    /// Each id is its entry's name in CamelCase ("config|get" is `ConfigGet`), each short
    /// name is the part after the '|', and finding an entry by its name gives back that entry.
    #[test]
    fn ids_follow_names() {
        let subcommands = COMMANDS.iter().flat_map(|spec| spec.subcommands);
        for spec in COMMANDS.iter().chain(subcommands) {
            let id = format!("{:?}", spec.id).to_ascii_lowercase();
            assert_eq!(id, spec.name.replace(['|', '_', '-'], ""));
            let short = spec.name.rsplit('|').next().unwrap_or_default();
            assert_eq!(spec.short_name(), short);
            let found = lookup_full_name(spec.name.to_ascii_uppercase().as_bytes());
            assert_eq!(found.map(|found| found.id), Some(spec.id), "{}", spec.name);
        }
        assert!(lookup_full_name(b"config|").is_none());
        assert!(lookup_full_name(b"get|x").is_none());
        assert!(lookup_full_name(b"|get").is_none());
    }

    #[test]
    fn lookup_is_case_insensitive() {
        assert_eq!(lookup(b"GeT").map(|spec| spec.name), Some("get"));
        assert_eq!(lookup(b"ZPOPMIN").map(|spec| spec.name), Some("zpopmin"));
        assert!(lookup(b"").is_none());
        assert!(lookup(b"gett").is_none());
        assert!(lookup(b"ge").is_none());
        assert!(lookup(b"config|get").is_none());
    }

    fn resolved(argv: &[&str]) -> Result<&'static str, String> {
        resolve(argv)
            .map(|spec| spec.name)
            .map_err(|error| String::from_utf8_lossy(&error.reply_text()).into_owned())
    }

    /// Expected errors are redis-server 7.0's replies.
    #[test]
    fn resolve_matches_redis() {
        assert_eq!(resolved(&["get", "k"]), Ok("get"));
        assert_eq!(
            resolved(&["GET"]),
            Err("ERR wrong number of arguments for 'get' command".into())
        );
        assert_eq!(
            resolved(&["get", "a", "b"]),
            Err("ERR wrong number of arguments for 'get' command".into())
        );
        assert_eq!(
            resolved(&["set", "k"]),
            Err("ERR wrong number of arguments for 'set' command".into())
        );
        assert_eq!(resolved(&["set", "k", "v", "EX", "10"]), Ok("set"));
        assert_eq!(resolved(&["mset", "a", "1", "b"]), Ok("mset")); // pairing is the command's job
        assert_eq!(resolved(&["ping"]), Ok("ping"));
        assert_eq!(resolved(&["CONFIG", "GET", "save"]), Ok("config|get"));
        assert_eq!(
            resolved(&["config"]),
            Err("ERR wrong number of arguments for 'config' command".into())
        );
        assert_eq!(
            resolved(&["config", "get"]),
            Err("ERR wrong number of arguments for 'config|get' command".into())
        );
        assert_eq!(
            resolved(&["config", "foo"]),
            Err("ERR unknown subcommand 'foo'. Try CONFIG HELP.".into())
        );
        assert_eq!(resolved(&["command"]), Ok("command"));
        assert_eq!(resolved(&["COMMAND", "DOCS"]), Ok("command|docs"));
        assert_eq!(
            resolved(&["foo", "bar"]),
            Err("ERR unknown command 'foo', with args beginning with: 'bar' ".into())
        );
    }

    #[test]
    fn arity_checks() {
        let get = lookup(b"get").expect("get");
        assert!(check_arity(get, 2).is_ok());
        assert!(check_arity(get, 1).is_err());
        let del = lookup(b"del").expect("del");
        assert!(check_arity(del, 1).is_err());
        assert!(check_arity(del, 2).is_ok());
        assert!(check_arity(del, 200).is_ok());
    }

    /// `COMMAND INFO get` as Redis 7.0 sends it, minus categories, tips and key specs.
    #[test]
    fn command_info_layout() {
        let mut out = BytesMut::new();
        lookup(b"get")
            .expect("get")
            .encode_info(&mut Encoder::new(&mut out, crate::Protocol::Resp2));
        let expected = "*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n";
        assert_eq!(String::from_utf8_lossy(&out), expected);
    }
}
