//! The storage engine of `mnemo serve`: a Redis-compatible keyspace that lives in a pool, on
//! the persistent heap and its transactions (`docs/design/kv-engine.md`).
//!
//! - [`PersistentEngine`] implements [`crate::server::Engine`]: one heap transaction per
//!   batch, committed with one sync point; replies are released by the server after it.
//! - Everything is in the pool and found again through one root ([`ROOT_NAME`]): open reads
//!   a few words and serves at once. The only volatile state is the order index of each
//!   sorted set, rebuilt on the first access to that set after open.
//! - A command that fails changes nothing: data commands validate before they mutate; each
//!   command runs under a savepoint of the batch's transaction, and one that fails inside
//!   the heap (pool full, record full, corrupt data) is rolled back to it.
//!
//! The engine borrows its [`Heap`] and holds an open transaction, which belongs to the
//! thread that began it (`Tx` is not `Send`): create the engine on the executor thread.

#![deny(unsafe_code)]

mod admin;
#[macro_use]
mod commands;
mod bitfield;
mod bits;
mod blocking;
mod cjson;
mod cmsgpack;
mod collections;
mod config;
mod databases;
mod decimal;
pub mod dict;
mod dump;
mod geo;
pub(crate) mod glob;
mod hyperloglog;
mod info;
mod keyspace;
mod latency;
pub mod limits;
pub mod list;
mod lists;
mod luastruct;
mod migrate;
mod score_range;
mod scripting;
mod sort;
mod store;
mod strings;
mod transaction;
mod zsets;

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

use mnemo_heap::{Heap, HeapOptions, Tx};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::{self, CommandSpec, Flags};
use mnemo_resp::{errors, parse_i64, CommandId, Encoder, Protocol, Reply};

use crate::server::limits::DATABASES_DEFAULT;
use crate::server::{Effect, Engine, Host, NoHost, Request};
use dict::tag;
use keyspace::{root, Ctx, ZCache, SEED};
pub use store::EngineError;
use store::Mem;
use transaction::Watches;

/// Name of the heap root holding the keyspace.
pub const ROOT_NAME: &str = "kv.keyspace";
/// First word of the root: "MNEMOKV" and a NUL.
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"MNEMOKV\0");
/// Layout version of the keyspace (root word 1): 3 since the tables' open-addressed index
/// with each entry's hash in its slot (`dict.rs`), 4 since a resize leaves stale copies in
/// the old array instead of deleting them. A version-3 keyspace is a valid version-4 one and
/// is marked 4 when opened (a version-3 build then refuses it: it would read the stale
/// copies as elements). Versions 1 (database 0 only) and 2 (numbered databases, chained
/// tables) are refused with an error that says so.
pub const LAYOUT_VERSION: u64 = 4;

/// Heap options suited to the engine when creating a pool: one executor commits, so few
/// lanes, and rings of the fewest slots (more slots only spare scans of other lanes' commits);
/// big lane logs so a batch of large commands (MSET of thousands of keys) fits one redo record
/// (a record may use one of a lane log's four slots: 4 MiB).
pub fn heap_options() -> HeapOptions {
    HeapOptions {
        lane_count: 4,
        lane_log_size: 16 << 20,
        lane_slots: mnemo_heap::layout::LANE_SLOTS_MIN,
        ..HeapOptions::default()
    }
}

/// Counters the engine keeps (volatile; INFO reports them).
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    /// Commands executed (retries after a split commit not counted).
    pub commands: u64,
    /// Batches committed with a sync point.
    pub commits: u64,
    /// Batches finished without writes.
    pub read_only_batches: u64,
    /// Commands rolled back to their savepoint because they failed inside the heap.
    pub rollbacks: u64,
    /// Extra commits made because a batch outgrew one redo record.
    pub split_commits: u64,
    /// EXECs rolled back whole because they outgrew what was left of the batch's record, and
    /// run again alone after an early commit of the batch before them.
    pub exec_alone: u64,
    /// Unix time (s) of the last commit.
    pub last_commit_unix: u64,
    /// Housekeeping steps that failed (undone; retried with the next batch).
    pub housekeeping_errors: u64,
    /// Transactions that freed what a FLUSHALL or FLUSHDB without ASYNC dropped, before
    /// its reply.
    pub reclaim_commits: u64,
}

/// Extra INFO lines from the server: called with a section name ("clients", "server"...),
/// appends `field:value\r\n` lines.
pub type InfoHook<'h> = Box<dyn Fn(&str, &mut String) + 'h>;

/// The persistent keyspace; see the module documentation.
pub struct PersistentEngine<'h> {
    heap: &'h Heap,
    root: u64,
    /// Per database, the word holding its keyspace table's offset.
    slots: Vec<u64>,
    /// The database [`PersistentEngine::execute_args`] runs in (its SELECT changes it).
    db: usize,
    txn: Option<Tx<'h>>,
    poisoned: Option<String>,
    now: i64,
    clock: Option<i64>,
    rng: u64,
    zcache: ZCache,
    /// The keyspace header [`Engine::prefetch`] read in this batch, and its database.
    prefetch_header: Option<(usize, dict::Header)>,
    /// Per database, where the active expiry goes on.
    expire_cursors: Vec<u64>,
    /// Databases the open batch ran commands in: their housekeeping is due at commit.
    batch_dbs: Vec<usize>,
    /// The database whose housekeeping a commit does besides the batch's own (round robin).
    idle_db: usize,
    /// An EXEC is running: a command too large for the batch's record must not commit the
    /// batch early (that would split the EXEC over two sync points).
    in_exec: bool,
    /// A command of the running EXEC outgrew the batch's record.
    exec_overflow: bool,
    /// A FLUSHALL or FLUSHDB without ASYNC ran in the open batch: its commit empties the
    /// reclaim queue before the batch's replies go ([`PersistentEngine::drain_reclaim`]).
    drain_reclaim: bool,
    /// Frees the next batch's housekeeping takes from the reclaim queue (at most
    /// [`limits::RECLAIM_FREES_PER_BATCH`]; less after a step that did not fit).
    reclaim_budget: u64,
    /// Pool writes (and allocations, frees) of the last command: whether it changed
    /// anything, for WATCH.
    writes: u64,
    /// WATCHed keys.
    watch: Watches,
    /// While a request from the server runs outside EXEC: its deadline if it was parked
    /// before (`Some(Some(ms))`), `Some(None)` if not yet; `None` where nothing may block.
    can_block: Option<Option<i64>>,
    /// The running blocking command found nothing and must wait until this deadline (Unix
    /// ms; `i64::MAX` for ever).
    blocked: Option<i64>,
    /// CONFIG's parameters.
    config: config::Config,
    /// Error replies by their first word (INFO errorstats).
    error_counts: std::collections::BTreeMap<String, u64>,
    /// When the engine was opened (INFO uptime) and its run id.
    opened: std::time::Instant,
    run_id: String,
    /// [`PersistentEngine::execute_args`]' MULTI: the commands queued since.
    multi: Option<crate::server::Transaction>,
    stats: EngineStats,
    info_hook: Option<InfoHook<'h>>,
    /// What INFO replication's `role` says: `master`, or `mirror` on a mirror's reader.
    role: &'static str,
    /// SLOWLOG's entries and settings.
    slowlog: admin::SlowLog,
    /// LATENCY's events.
    latency: latency::Monitor,
    /// When the last command (or the batch's `begin`) finished: a command's duration for the
    /// slow log is the time since, one clock read per command.
    clock_mark: std::time::Instant,
    /// The script cache and the Lua interpreter (EVAL, SCRIPT).
    scripts: scripting::Scripts,
}

impl std::fmt::Debug for PersistentEngine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentEngine")
            .field("root", &self.root)
            .field("in_batch", &self.txn.is_some())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Microseconds since the Unix epoch (TIME).
fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl<'h> PersistentEngine<'h> {
    /// Opens the keyspace in `heap` with Redis's 16 databases, creating it on first use:
    /// [`PersistentEngine::open_with_databases`].
    pub fn open(heap: &'h Heap) -> Result<PersistentEngine<'h>, EngineError> {
        PersistentEngine::open_with_databases(heap, DATABASES_DEFAULT)
    }

    /// Opens the keyspace in `heap` with `databases` databases (`--databases`), creating it
    /// on first use. Reads the root, the database array and each database's table header:
    /// no scan, no replay. A keyspace of an older layout version is refused
    /// ([`EngineError::Layout`]). A pool that holds keys in a database at or past
    /// `databases` is refused ([`EngineError::Databases`]). Corrupt root or header: an error.
    pub fn open_with_databases(
        heap: &'h Heap,
        databases: usize,
    ) -> Result<PersistentEngine<'h>, EngineError> {
        if !(1..=limits::DATABASES_MAX).contains(&databases) {
            return Err(EngineError::Databases(format!(
                "{databases} databases asked for; from 1 to {} are possible",
                limits::DATABASES_MAX
            )));
        }
        let root_ptr = heap.root::<[u64; 8]>(ROOT_NAME)?;
        let root = root_ptr.offset();
        let words = heap.get(root_ptr)?;
        let array = heap.tx(|txn| -> mnemo_heap::Result<Result<u64, EngineError>> {
            let tx = &Mem::new(txn, heap);
            match databases::open(tx, root, &words, databases) {
                Err(EngineError::Heap(e)) => Err(e),
                other => Ok(other),
            }
        })??;
        let mut slots = Vec::with_capacity(databases);
        slots.push(root + root::KEYSPACE);
        slots.extend((1..databases as u64).map(|db| array + databases::slot_offset(db)));
        let seed = unix_ms() as u64 | 1;
        Ok(PersistentEngine {
            heap,
            root,
            slots,
            db: 0,
            txn: None,
            poisoned: None,
            now: 0,
            clock: None,
            rng: seed,
            zcache: ZCache::default(),
            prefetch_header: None,
            expire_cursors: vec![0; databases],
            batch_dbs: Vec::new(),
            idle_db: 0,
            in_exec: false,
            exec_overflow: false,
            drain_reclaim: false,
            reclaim_budget: limits::RECLAIM_FREES_PER_BATCH,
            writes: 0,
            watch: Watches::default(),
            can_block: None,
            blocked: None,
            config: config::Config::new(databases),
            error_counts: std::collections::BTreeMap::new(),
            opened: std::time::Instant::now(),
            run_id: format!(
                "{:016x}{:016x}{:08x}",
                seed,
                seed.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15,
                std::process::id()
            ),
            multi: None,
            stats: EngineStats::default(),
            info_hook: None,
            role: "master",
            slowlog: admin::SlowLog::default(),
            latency: latency::Monitor::default(),
            clock_mark: std::time::Instant::now(),
            scripts: scripting::Scripts::default(),
        })
    }

    /// The heap underneath.
    pub fn heap(&self) -> &'h Heap {
        self.heap
    }

    /// Counters.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Fixes the clock (Unix ms) for tests; None returns to the system clock.
    pub fn set_clock(&mut self, now_ms: Option<i64>) {
        self.clock = now_ms;
    }

    /// Lets the server add lines to INFO sections (clients, server...).
    pub fn set_info_hook(&mut self, hook: InfoHook<'h>) {
        self.info_hook = Some(hook);
    }

    /// The role INFO replication reports (`master` by default; a mirror's read endpoint
    /// says `mirror`, a backup's `backup`).
    pub fn set_role(&mut self, role: &'static str) {
        self.role = role;
    }

    /// `busy-reply-threshold` in milliseconds (CONFIG SET's parameter): how long a script runs
    /// before its host is asked what to do with it ([`crate::server::Host::busy`]).
    pub fn set_busy_reply_threshold(&mut self, ms: u64) {
        let args = [
            Bytes::from_static(b"CONFIG"),
            Bytes::from_static(b"SET"),
            Bytes::from_static(b"busy-reply-threshold"),
            Bytes::from(ms.to_string()),
        ];
        let _ = self.config.set(&args);
    }

    /// Runs one command (arguments, name first) in the open batch and returns its reply:
    /// the seam without the server's [`Request`] (tests, tools). Opens a batch if none is.
    /// Finds and checks the command in mnemo-resp's table ([`command::resolve`]), as the
    /// session does for a [`Request`]; keeps what a session would (the selected database,
    /// MULTI's queue; WATCH as connection 0). The reply is the value a client decodes: an
    /// HGETALL's [`Reply::EncodedMap`] comes back as the [`Reply::Map`] it encodes.
    pub fn execute_args(&mut self, args: &[Bytes], protocol: Protocol) -> (Reply, Effect) {
        let (reply, effect) = self.execute_args_encoded(args, protocol);
        (reply.expanded(), effect)
    }

    fn execute_args_encoded(&mut self, args: &[Bytes], protocol: Protocol) -> (Reply, Effect) {
        if self.txn.is_none() {
            self.begin();
        }
        let spec = match command::resolve(args) {
            Ok(spec) => spec,
            Err(error) => {
                if let Some(multi) = &mut self.multi {
                    multi.aborted = true;
                }
                return (
                    Reply::Error(Bytes::from(error.reply_text())),
                    Effect::default(),
                );
            }
        };
        if let Some(reply) = self.queue_locally(spec, args) {
            return (reply, Effect::default());
        }
        let mut db = self.db;
        let result = if matches!(spec.id, CommandId::Exec | CommandId::Discard) {
            let transaction = self.multi.take().unwrap_or_default();
            self.run_transaction(spec, 0, &mut db, Some(&transaction), protocol)
        } else {
            self.run_command(spec, args, 0, &mut db, protocol)
        };
        self.db = db;
        self.count_errors(&result.0);
        result
    }

    /// Counts the error replies in `reply` (EXEC's included) by their first word.
    fn count_errors(&mut self, reply: &Reply) {
        match reply {
            Reply::Error(text) => {
                let code = text.split(|&b| b == b' ').next().unwrap_or_default();
                let code = String::from_utf8_lossy(code).into_owned();
                *self.error_counts.entry(code).or_default() += 1;
            }
            Reply::Array(items) => {
                for item in items {
                    self.count_errors(item);
                }
            }
            _ => {}
        }
    }

    /// [`PersistentEngine::execute_args`]' MULTI, as a session keeps it: the reply if the
    /// command was answered here (MULTI, queued, errors).
    fn queue_locally(&mut self, spec: &'static CommandSpec, args: &[Bytes]) -> Option<Reply> {
        let in_multi = self.multi.is_some();
        let text = |text: &'static str| Some(commands::err(text));
        match spec.id {
            CommandId::Multi if in_multi => text("ERR MULTI calls can not be nested"),
            CommandId::Multi => {
                self.multi = Some(crate::server::Transaction::default());
                Some(Reply::ok())
            }
            CommandId::Exec if !in_multi => text("ERR EXEC without MULTI"),
            CommandId::Discard if !in_multi => text("ERR DISCARD without MULTI"),
            CommandId::Watch if in_multi => text("ERR WATCH inside MULTI is not allowed"),
            CommandId::Exec | CommandId::Discard => None,
            _ if in_multi => {
                let multi = self.multi.as_mut()?;
                let command = mnemo_resp::Command::new(args.to_vec());
                multi.commands.push((spec, command));
                Some(Reply::Simple(Bytes::from_static(b"QUEUED")))
            }
            _ => None,
        }
    }

    /// Runs a command that the table has found (`spec`) in the open batch, dispatching on its
    /// id, in database `*db` (SELECT changes it) for connection `session`. The session has
    /// checked the arity already; it is checked again here, from the same entry (one
    /// comparison), because the handlers index the arguments by it and a [`Request`] built by
    /// hand must not make them panic.
    fn run_command(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        session: u64,
        db: &mut usize,
        protocol: Protocol,
    ) -> (Reply, Effect) {
        if let Err(error) = command::check_arity(spec, args.len()) {
            return (
                Reply::Error(Bytes::from(error.reply_text())),
                Effect::default(),
            );
        }
        // SAVE asks for a sync point: every acknowledged write already had one, but the batch
        // commits (and LASTSAVE moves) as for a write. PFCOUNT, a read, caches the count in
        // the HyperLogLog's string, as Redis does.
        let writes = spec.flags.contains(Flags::WRITE)
            || matches!(spec.id, CommandId::Save | CommandId::Pfcount);
        let mut effect = Effect {
            wrote: writes,
            close: spec.id == CommandId::Shutdown,
            select: None,
            block: None,
        };
        self.stats.commands += 1;
        if let Some(reason) = &self.poisoned {
            return (
                commands::err_owned(format!("ERR batch failed: {reason}")),
                effect,
            );
        }
        if *db >= self.slots.len() {
            return (commands::err(errors::DB_INDEX_OUT_OF_RANGE), effect);
        }
        let resp3 = protocol == Protocol::Resp3;
        if matches!(spec.id, CommandId::Flushall | CommandId::Flushdb)
            && !args
                .get(1)
                .is_some_and(|mode| mode.eq_ignore_ascii_case(b"async"))
        {
            self.drain_reclaim = true;
        }
        let reply = match spec.id {
            CommandId::Ping => Ok(match args.get(1) {
                Some(text) => Reply::Bulk(text.clone()),
                None => Reply::Simple(Bytes::from_static(b"PONG")),
            }),
            CommandId::Echo => Ok(Reply::Bulk(args[1].clone())),
            CommandId::Select => Ok(match parse_i64(&args[1]) {
                None => commands::err(errors::NOT_INTEGER),
                Some(index) if i32::try_from(index).is_err() => commands::err(errors::NOT_I32),
                Some(index) => match usize::try_from(index) {
                    Ok(index) if index < self.slots.len() => {
                        *db = index;
                        effect.select = Some(index);
                        Reply::ok()
                    }
                    _ => commands::err(errors::DB_INDEX_OUT_OF_RANGE),
                },
            }),
            CommandId::Shutdown => Ok(Reply::ok()),
            CommandId::Eval | CommandId::EvalRo | CommandId::Evalsha | CommandId::EvalshaRo => {
                // Inside an EXEC (or from `execute_args`): no server to serve while it runs.
                let (reply, ran) = self.eval(spec, args, session, *db, &mut NoHost);
                effect.wrote = ran.wrote;
                return (reply, effect);
            }
            CommandId::ScriptLoad
            | CommandId::ScriptExists
            | CommandId::ScriptFlush
            | CommandId::ScriptKill
            | CommandId::ScriptHelp => Ok(self.script_command(spec, args)),
            CommandId::Info => Ok(self.info(&args[1..])),
            CommandId::ConfigGet => Ok(self.config.get(&args[2..])),
            CommandId::ConfigSet => {
                let reply = self.config.set(args);
                self.slowlog.threshold_us = self
                    .config
                    .integer("slowlog-log-slower-than")
                    .unwrap_or(10_000);
                self.latency.threshold_ms = self
                    .config
                    .integer("latency-monitor-threshold")
                    .unwrap_or(0);
                // A log turned back on times from now, not from when it was turned off.
                self.clock_mark = std::time::Instant::now();
                let max_len = self.config.integer("slowlog-max-len").unwrap_or(128);
                self.slowlog
                    .set_max_len(usize::try_from(max_len).unwrap_or(usize::MAX));
                Ok(reply)
            }
            CommandId::MemoryUsage => {
                self.under_savepoint(*db, resp3, |ctx| admin::memory_usage(ctx, args))
            }
            CommandId::MemoryStats => Ok(self.memory_stats()),
            CommandId::LatencyLatest
            | CommandId::LatencyHistory
            | CommandId::LatencyReset
            | CommandId::LatencyGraph
            | CommandId::LatencyDoctor => Ok(self.latency.run(spec.id, args)),
            CommandId::MemoryDoctor => Ok(admin::memory_doctor(self.heap.stats().used_bytes)),
            id if admin::handles(id) => {
                let rng = &mut self.rng;
                Ok(admin::run(spec, args, &mut self.slowlog, &mut || {
                    commands::ctx_random(rng)
                }))
            }
            CommandId::ConfigHelp => Ok(config::help()),
            CommandId::ConfigRewrite => Ok(commands::err(
                "ERR The server is running without a config file",
            )),
            CommandId::ConfigResetstat => {
                let last_commit_unix = self.stats.last_commit_unix;
                self.stats = EngineStats {
                    last_commit_unix,
                    ..EngineStats::default()
                };
                self.error_counts.clear();
                Ok(Reply::ok())
            }
            CommandId::Save => Ok(Reply::ok()),
            // Nothing to save in the background: every acknowledged write is durable.
            CommandId::Bgsave => Ok(match args.get(1) {
                None => Reply::Simple(Bytes::from_static(b"Background saving started")),
                Some(opt) if args.len() == 2 && opt.eq_ignore_ascii_case(b"schedule") => {
                    Reply::Simple(Bytes::from_static(b"Background saving started"))
                }
                Some(_) => commands::err(errors::SYNTAX),
            }),
            // No functions (scripting is not supported): nothing to flush or list.
            CommandId::FunctionFlush => Ok(match args.get(2) {
                None => Reply::ok(),
                Some(_) if args.len() > 3 => commands::err_owned(format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION \
                     HELP.",
                    String::from_utf8_lossy(&args[1])
                )),
                Some(mode)
                    if args.len() == 3
                        && (mode.eq_ignore_ascii_case(b"sync")
                            || mode.eq_ignore_ascii_case(b"async")) =>
                {
                    Reply::ok()
                }
                Some(_) => commands::err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
            }),
            CommandId::FunctionList => Ok(function_list(args)),
            CommandId::Lastsave => Ok(Reply::Integer(
                i64::try_from(self.stats.last_commit_unix).unwrap_or(i64::MAX),
            )),
            CommandId::Time => {
                // The clock now, to the microsecond, as Redis answers (inside a script too:
                // the batch's clock, which expiry reads, stands still); a clock fixed by a
                // test answers its own time.
                let micros = match self.clock {
                    Some(ms) => ms.saturating_mul(1000),
                    None => unix_micros(),
                };
                Ok(Reply::Array(vec![
                    Reply::Bulk(Bytes::from(micros.div_euclid(1_000_000).to_string())),
                    Reply::Bulk(Bytes::from(micros.rem_euclid(1_000_000).to_string())),
                ]))
            }
            CommandId::Watch => {
                let stale = self.under_savepoint(*db, false, |ctx| {
                    let mut stale = Vec::with_capacity(args.len() - 1);
                    for key in &args[1..] {
                        stale.push(
                            ctx.lookup_raw(key)?
                                .is_some_and(|f| f.entry.expire != 0 && f.entry.expire <= ctx.now),
                        );
                    }
                    Ok(stale)
                });
                stale.map(|stale| self.watch.add(session, *db, &args[1..], &stale))
            }
            id if blocking::is_blocking(id) && self.can_block.is_some() && !self.in_exec => {
                return (self.run_blocking(spec, args, *db, resp3), effect);
            }
            CommandId::Unwatch => {
                self.watch.remove_session(session);
                Ok(Reply::ok())
            }
            CommandId::Reset => {
                self.watch.remove_session(session);
                Ok(Reply::Simple(Bytes::from_static(b"RESET")))
            }
            _ => {
                let existing = self.watched_existing(spec, args, *db);
                let reply = match self.run_data(spec, args, *db, resp3) {
                    Ok(reply) => reply,
                    Err(e) => self.recover(e, spec, args, *db, resp3),
                };
                let changed = self.writes > 0 && !matches!(reply, Reply::Error(_));
                if changed && !self.watch.is_empty() {
                    self.watch.touch_command(spec, args, *db, existing);
                }
                return (reply, effect);
            }
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => self.recover(e, spec, args, *db, resp3),
        };
        (reply, effect)
    }

    /// A blocking command from the server: served now if a key has elements; else parked
    /// (`self.blocked`) until its deadline, or the timeout's reply once that has passed.
    fn run_blocking(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        db: usize,
        resp3: bool,
    ) -> Reply {
        let timeout = match blocking::timeout_ms(spec, args) {
            Ok(ms) => ms,
            Err(reply) => return reply,
        };
        let existing = self.watched_existing(spec, args, db);
        if self.batch_dbs.last() != Some(&db) && !self.batch_dbs.contains(&db) {
            self.batch_dbs.push(db);
        }
        let served = self.under_savepoint(db, resp3, |ctx| blocking::try_serve(ctx, spec, args));
        match served {
            Ok(Some(reply)) => {
                if self.writes > 0 && !self.watch.is_empty() && !matches!(reply, Reply::Error(_)) {
                    self.watch.touch_command(spec, args, db, existing);
                }
                reply
            }
            Ok(None) => {
                let given = self.can_block.flatten();
                let deadline = given.unwrap_or(if timeout == 0 {
                    i64::MAX
                } else {
                    self.now.saturating_add(timeout)
                });
                if self.now < deadline {
                    self.blocked = Some(deadline);
                }
                blocking::timeout_reply()
            }
            Err(e) => self.recover(e, spec, args, db, resp3),
        }
    }

    fn run_data(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        db: usize,
        resp3: bool,
    ) -> Result<Reply, EngineError> {
        if self.batch_dbs.last() != Some(&db) && !self.batch_dbs.contains(&db) {
            self.batch_dbs.push(db);
        }
        self.under_savepoint(db, resp3, |ctx| commands::run(ctx, spec, args))
    }

    /// Runs `f` in database `db` under a savepoint of the batch's transaction: if it fails,
    /// everything it did is rolled back (the transaction's writes, allocations and frees,
    /// the random state, and the sorted-set indexes it may have changed, which are rebuilt
    /// on next use). A rollback that fails poisons the batch.
    fn under_savepoint<R>(
        &mut self,
        db: usize,
        resp3: bool,
        f: impl FnOnce(&mut Ctx<'_, 'h>) -> Result<R, EngineError>,
    ) -> Result<R, EngineError> {
        let Some(txn) = self.txn.as_ref() else {
            return store::corrupt("no open batch");
        };
        let sp = txn.savepoint()?;
        let rng = self.rng;
        let mem = Mem::new(txn, self.heap);
        let mut ctx = Ctx {
            tx: &mem,
            root: self.root,
            slots: &self.slots,
            db,
            now: self.now,
            rng: &mut self.rng,
            zcache: &mut self.zcache,
            resp3,
            keyspace: Cell::new(0),
            stepped: None,
        };
        let result = f(&mut ctx);
        self.writes = mem.writes();
        if result.is_err() {
            self.rng = rng;
            self.zcache.rolled_back();
            if let Err(e) = txn.rollback_to(&sp) {
                self.poisoned.get_or_insert_with(|| e.to_string());
            }
        }
        if let Err(e) = txn.release(sp) {
            self.poisoned.get_or_insert_with(|| e.to_string());
        }
        result
    }

    /// A command failed inside the heap (and was rolled back): if the batch outgrew a redo
    /// record, commit the batch so far early and retry the command alone; else reply the
    /// error.
    fn recover(
        &mut self,
        e: EngineError,
        spec: &'static CommandSpec,
        args: &[Bytes],
        db: usize,
        resp3: bool,
    ) -> Reply {
        self.stats.rollbacks += 1;
        if let Some(reason) = &self.poisoned {
            return commands::err_owned(format!("ERR batch failed: {reason}"));
        }
        if self.in_exec && e.is_too_large() {
            // No early commit inside an EXEC: the EXEC gives up as a whole, and retries
            // alone in a transaction of its own (`run_transaction`).
            self.exec_overflow = true;
            return commands::err_owned(format!("ERR {e}"));
        }
        let batch_wrote = self.txn.as_ref().is_some_and(|t| !t.is_empty());
        let e = if e.is_too_large() && batch_wrote {
            match self.commit_open() {
                Ok(()) => {
                    self.stats.split_commits += 1;
                    self.begin_txn();
                    match self.run_data(spec, args, db, resp3) {
                        Ok(reply) => return reply,
                        Err(again) => again,
                    }
                }
                Err(failed) => {
                    self.poisoned = Some(failed.to_string());
                    failed
                }
            }
        } else {
            e
        };
        if e.is_out_of_space() {
            commands::err(errors::OUT_OF_MEMORY)
        } else if e.is_too_large() {
            commands::err_owned(format!(
                "ERR command too large for one pool transaction ({e}); split it"
            ))
        } else {
            commands::err_owned(format!("ERR {e}"))
        }
    }

    fn begin_txn(&mut self) {
        self.prefetch_header = None;
        match self.heap.begin() {
            Ok(txn) => self.txn = Some(txn),
            Err(e) => self.poisoned = Some(e.to_string()),
        }
    }

    /// Abandons the open transaction, if any.
    fn abort_open(&mut self) {
        if let Some(txn) = self.txn.take() {
            txn.abort();
        }
        self.zcache.aborted();
    }

    /// Commits the open transaction (one sync point).
    /// A command too large for what was left of its batch's redo record (an EXEC, a
    /// script): commit the batch so far and open a new transaction, where it runs alone. A
    /// failed commit poisons the batch.
    fn commit_early(&mut self) {
        if let Err(e) = self.commit_open() {
            self.poisoned.get_or_insert_with(|| e.to_string());
        } else {
            self.stats.split_commits += 1;
        }
        self.begin_txn();
        self.stats.exec_alone += 1;
    }

    /// FLUSHALL and FLUSHDB without ASYNC free what they dropped before they answer, as
    /// Redis does by default (`lazyfree-lazy-user-flush no`): after the batch commits, the
    /// reclaim queue is emptied in transactions of [`limits::RECLAIM_FREES_PER_DRAIN`]
    /// frees each (one sync point each, so a crash on the way leaves the rest queued, freed
    /// lazily as after an ASYNC). Left lazily freed, a large flush slowed every batch after
    /// it: a reload of 100,000 YCSB records right after a FLUSHALL took 7-12% more server
    /// CPU than the first load (`bench/README.md`, "Runs of stop 27"). A transaction that
    /// fails (too large for the heap's redo record) is tried again with a quarter of the
    /// frees; one that fails with [`limits::RECLAIM_FREES_PER_DRAIN_MIN`] leaves the rest
    /// to the lazy path.
    fn drain_reclaim(&mut self) {
        let mut budget = limits::RECLAIM_FREES_PER_DRAIN;
        loop {
            self.poisoned = None;
            self.begin_txn();
            if self.txn.is_none() {
                break;
            }
            let more = self.under_savepoint(0, false, |ctx| {
                ctx.reclaim_step(budget)?;
                ctx.reclaim_queued()
            });
            // A flush that queued nothing frees nothing: its transaction is empty and
            // commits without a sync point, and is not counted.
            let empty = self.txn.as_ref().is_none_or(|txn| txn.is_empty());
            let committed = self.poisoned.is_none() && more.is_ok() && self.commit_open().is_ok();
            if !committed {
                self.abort_open();
                if budget > limits::RECLAIM_FREES_PER_DRAIN_MIN {
                    budget = smaller_reclaim_budget(budget);
                    continue;
                }
                self.stats.housekeeping_errors += 1;
                break;
            }
            if !empty {
                self.stats.reclaim_commits += 1;
            }
            if !more.unwrap_or(false) {
                break;
            }
        }
        self.poisoned = None;
    }

    fn commit_open(&mut self) -> Result<(), EngineError> {
        let Some(txn) = self.txn.take() else {
            return Ok(());
        };
        match txn.commit() {
            Ok(()) => {
                self.zcache.committed();
                self.stats.commits += 1;
                self.stats.last_commit_unix = (self.now / 1000).max(0) as u64;
                Ok(())
            }
            Err(e) => {
                self.zcache.aborted();
                Err(e.into())
            }
        }
    }

    /// Bounded background work done with a committing batch: keyspace resize steps, active
    /// expiry of a few buckets, lazy freeing from the reclaim queue. Under a savepoint of its
    /// own: if it fails, its partial work is rolled back (and retried with the next batch).
    fn housekeeping(&mut self) -> Result<(), EngineError> {
        let mut dbs = std::mem::take(&mut self.batch_dbs);
        self.idle_db = (self.idle_db + 1) % self.slots.len();
        if !dbs.contains(&self.idle_db) {
            dbs.push(self.idle_db);
        }
        let mut result = Ok(());
        for &db in &dbs {
            result = self.housekeeping_in(db);
            if result.is_err() {
                break;
            }
        }
        dbs.clear();
        self.batch_dbs = dbs;
        result?;
        // A step too large for what is left of the batch's redo record (a heap with small
        // records) is undone; the next batches try a quarter of it, then grow back.
        let budget = self.reclaim_budget;
        let reclaimed = self.under_savepoint(0, false, |ctx| ctx.reclaim_step(budget));
        self.reclaim_budget = if reclaimed.is_ok() {
            (budget * 2).min(limits::RECLAIM_FREES_PER_BATCH)
        } else {
            smaller_reclaim_budget(budget)
        };
        reclaimed
    }

    /// One database's share of [`PersistentEngine::housekeeping`]: a resize step and the
    /// active expiry of a few buckets.
    fn housekeeping_in(&mut self, db: usize) -> Result<(), EngineError> {
        let mut cursor = self.expire_cursors.get(db).copied().unwrap_or(0);
        let mut deleted = Vec::new();
        let result = self.under_savepoint(db, false, |ctx| {
            let ks = ctx.keyspace()?;
            dict::step(ctx.tx, ks, limits::REHASH_BUCKETS_PER_BATCH)?;
            let h = dict::Header::read(ctx.tx, ks)?;
            if h.extra > 0 {
                let mut expired = Vec::new();
                for _ in 0..limits::EXPIRE_BUCKETS_PER_BATCH {
                    let now = ctx.now;
                    cursor = dict::scan(ctx.tx, ks, cursor, |e| {
                        if e.expire != 0 && e.expire <= now {
                            expired.push(e.key(ctx.tx)?);
                        }
                        Ok(())
                    })?;
                    if cursor == 0 {
                        break;
                    }
                }
                for key in expired {
                    ctx.lookup_write(&key)?;
                    deleted.push(key);
                }
            }
            Ok(())
        });
        if result.is_ok() {
            for key in &deleted {
                self.watch.touch_expired(db, key);
            }
            if let Some(at) = self.expire_cursors.get_mut(db) {
                *at = cursor;
            }
        }
        result
    }

    /// Validates the whole keyspace (every database's table: structure and count, every
    /// list's chain) and returns the number of keys. Reads everything: for tests and
    /// checkers.
    pub fn check(&mut self) -> Result<u64, EngineError> {
        let opened = self.txn.is_none();
        if opened {
            self.begin_txn();
        }
        let result = self.check_open();
        if opened {
            self.finish_read_only();
        }
        result
    }

    fn check_open(&self) -> Result<u64, EngineError> {
        let Some(txn) = self.txn.as_ref() else {
            return store::corrupt("no open batch");
        };
        let tx = &Mem::new(txn, self.heap);
        let mut keys = 0;
        let mut tables = std::collections::HashSet::new();
        for &slot in &self.slots {
            let ks = store::word(tx, slot)?;
            if !tables.insert(ks) {
                return store::corrupt("two databases share one keyspace table");
            }
            keys += Self::check_table(tx, ks)?;
        }
        Ok(keys)
    }

    fn check_table(tx: &Mem<'_, '_>, ks: u64) -> Result<u64, EngineError> {
        let n = dict::check(tx, ks, SEED)?;
        let mut expires = 0;
        let mut result = Ok(());
        dict::for_each(tx, ks, |e| {
            if e.expire != 0 {
                expires += 1;
            }
            let checked = match e.tag {
                tag::LIST => list::check(tx, e.val).map(|_| ()),
                tag::HASH | tag::SET | tag::ZSET => dict::check(tx, e.val, SEED).map(|_| ()),
                _ => Ok(()),
            };
            if let Err(err) = checked {
                result = Err(err);
                return Ok(false);
            }
            Ok(true)
        })?;
        result?;
        if expires != dict::Header::read(tx, ks)?.extra {
            return store::corrupt("expiry count does not match the keys with an expiry");
        }
        Ok(n)
    }

    /// Keys and keys with an expiry in database `db` (INFO keyspace).
    fn key_counts(&self, db: usize) -> Option<(u64, u64)> {
        let txn = self.txn.as_ref()?;
        let tx = &Mem::new(txn, self.heap);
        let ks = store::word(tx, *self.slots.get(db)?).ok()?;
        let h = dict::Header::read(tx, ks).ok()?;
        Some((h.count, h.extra))
    }
}

impl PersistentEngine<'_> {
    /// MEMORY STATS: the fields of Redis's reply that apply to a pool (bytes allocated, keys,
    /// bytes per key), and the pool's size and maximum.
    fn memory_stats(&self) -> Reply {
        let heap = self.heap.stats();
        let keys: u64 = (0..self.slots.len())
            .filter_map(|db| self.key_counts(db))
            .map(|(keys, _)| keys)
            .sum();
        let pool = self.heap.pool();
        let field = |name: &'static str, value: u64| {
            (
                Reply::Bulk(Bytes::from_static(name.as_bytes())),
                Reply::Integer(i64::try_from(value).unwrap_or(i64::MAX)),
            )
        };
        Reply::Map(vec![
            field("total.allocated", heap.used_bytes),
            field("keys.count", keys),
            field(
                "keys.bytes-per-key",
                heap.used_bytes.checked_div(keys).unwrap_or(0),
            ),
            field("dataset.bytes", heap.used_bytes),
            field("mnemo.pool.size", pool.size()),
            field("mnemo.pool.free", heap.free_bytes),
        ])
    }
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]: there are no libraries.
fn function_list(args: &[Bytes]) -> Reply {
    let mut i = 2;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"withcode") {
            i += 1;
        } else if args[i].eq_ignore_ascii_case(b"libraryname") {
            if i + 1 >= args.len() {
                return commands::err("ERR library name argument was not given");
            }
            i += 2;
        } else {
            return commands::err_owned(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(&args[i])
            ));
        }
    }
    Reply::Array(Vec::new())
}

impl Engine for PersistentEngine<'_> {
    type Error = EngineError;

    /// The keyspace lookup of a command whose first key is its first argument (GET, SET,
    /// INCR, HSET...): the bucket words, then the entries, of that key.
    fn prefetch(&mut self, request: &Request, stage: crate::server::Prefetch) {
        if request.transaction.is_some() || request.spec.first_key != 1 {
            return;
        }
        let (Some(key), Some(txn), Some(&slot)) = (
            request.command.args().get(1),
            self.txn.as_ref(),
            self.slots.get(request.db),
        ) else {
            return;
        };
        let mem = Mem::new(txn, self.heap);
        // The keyspace's header is read once per batch and database for the hints: each
        // request needs two (Bucket, then Entry), and a stale one only wastes a hint.
        let header = match self.prefetch_header {
            Some((db, h)) if db == request.db => h,
            _ => {
                let Ok(h) = store::word(&mem, slot).and_then(|ks| dict::Header::read(&mem, ks))
                else {
                    return;
                };
                self.prefetch_header = Some((request.db, h));
                h
            }
        };
        dict::prefetch_in(&mem, &header, SEED, key, stage);
    }

    fn begin(&mut self) {
        self.abort_open();
        self.poisoned = None;
        self.now = self.clock.unwrap_or_else(unix_ms);
        self.begin_txn();
        self.clock_mark = std::time::Instant::now();
    }

    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        self.execute_hosted(request, reply, &mut NoHost)
    }

    fn execute_hosted(
        &mut self,
        request: &Request,
        reply: &mut Encoder<'_>,
        host: &mut dyn Host,
    ) -> Effect {
        if self.txn.is_none() {
            self.begin();
        }
        let mut db = request.db;
        self.can_block = Some(request.deadline);
        self.blocked = None;
        let (value, mut effect) = match &request.transaction {
            Some(transaction) => self.run_transaction(
                request.spec,
                request.session,
                &mut db,
                Some(transaction),
                reply.protocol(),
            ),
            None if matches!(request.spec.id, CommandId::Exec | CommandId::Discard) => self
                .run_transaction(
                    request.spec,
                    request.session,
                    &mut db,
                    None,
                    reply.protocol(),
                ),
            None if matches!(
                request.spec.id,
                CommandId::Eval | CommandId::EvalRo | CommandId::Evalsha | CommandId::EvalshaRo
            ) && command::check_arity(request.spec, request.command.args().len())
                .is_ok() =>
            {
                // A script's commands never block (Redis runs them as if the timeout passed).
                self.can_block = None;
                self.stats.commands += 1;
                self.eval(
                    request.spec,
                    request.command.args(),
                    request.session,
                    db,
                    host,
                )
            }
            None => self.run_command(
                request.spec,
                request.command.args(),
                request.session,
                &mut db,
                reply.protocol(),
            ),
        };
        self.can_block = None;
        // The slow log's and latency monitor's one clock read per command (about 33 ns on
        // the 2-core test machine; Redis reads its clock twice per command), skipped while
        // both are off.
        let took = (self.slowlog.threshold_us >= 0 || self.latency.on()).then(|| {
            let finished = std::time::Instant::now();
            let took = finished.saturating_duration_since(self.clock_mark);
            self.clock_mark = finished;
            took
        });
        if let Some(deadline) = self.blocked.take() {
            // Parked by the server: no reply yet.
            effect.block = Some(deadline);
            return effect;
        }
        if let Some(took) = took {
            let took_us = i64::try_from(took.as_micros()).unwrap_or(i64::MAX);
            self.slowlog
                .record(request.command.args(), took_us, self.now / 1000);
            let fast = request.spec.flags.contains(Flags::FAST);
            self.latency.record(fast, took_us / 1000, self.now / 1000);
        }
        self.count_errors(&value);
        if !(effect.close && matches!(value, Reply::Simple(_))) {
            reply.reply(&value);
        }
        effect
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        // This batch's request to drain, whatever becomes of its commit.
        let drain = std::mem::take(&mut self.drain_reclaim);
        if self.txn.is_some() && self.poisoned.is_none() && self.housekeeping().is_err() {
            // Rolled back to its savepoint; retried with the next batch.
            self.stats.housekeeping_errors += 1;
        }
        if let Some(reason) = self.poisoned.take() {
            self.abort_open();
            return Err(EngineError::RollbackFailed(reason));
        }
        self.commit_open()?;
        if drain {
            self.drain_reclaim();
        }
        Ok(())
    }

    fn finish_read_only(&mut self) {
        self.abort_open();
        self.poisoned = None;
        self.batch_dbs.clear();
        self.stats.read_only_batches += 1;
    }

    fn disconnected(&mut self, session: u64) {
        self.watch.remove_session(session);
    }

    fn defer_acks(&mut self, notify: std::sync::Arc<dyn Fn() + Send + Sync>) -> bool {
        self.heap.pool().defer_acks(notify)
    }

    fn ack_marks(&self) -> Option<Result<(u64, u64), String>> {
        self.heap
            .pool()
            .ack_marks()
            .map(|marks| marks.map_err(|e| e.to_string()))
    }
}

/// The budget to try after a transaction of `budget` reclaim frees failed (too large for
/// what is left of the heap's redo record): a quarter of it, not below
/// [`limits::RECLAIM_FREES_PER_DRAIN_MIN`]. Both the flush's drain and the lazy step shrink
/// this way.
fn smaller_reclaim_budget(budget: u64) -> u64 {
    (budget / 4).max(limits::RECLAIM_FREES_PER_DRAIN_MIN)
}
