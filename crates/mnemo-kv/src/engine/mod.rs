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

mod commands;
pub mod dict;
mod glob;
mod keyspace;
pub mod limits;
pub mod list;
mod score_range;
mod store;

use std::cell::Cell;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use mnemo_heap::{Heap, HeapOptions, PPtr, Tx};
use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::{self, CommandSpec, Flags};
use mnemo_resp::{errors, CommandId, Encoder, Protocol, Reply};

use crate::server::{Effect, Engine, Request};
use dict::{tag, Kind};
use keyspace::{root, Ctx, ZCache, SEED};
pub use store::EngineError;
use store::Mem;

/// Name of the heap root holding the keyspace.
pub const ROOT_NAME: &str = "kv.keyspace";
/// First word of the root: "MNEMOKV" and a NUL.
pub const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"MNEMOKV\0");
/// Layout version of the keyspace (root word 1).
pub const LAYOUT_VERSION: u64 = 1;

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
    /// Unix time (s) of the last commit.
    pub last_commit_unix: u64,
    /// Housekeeping steps that failed (undone; retried with the next batch).
    pub housekeeping_errors: u64,
}

/// Extra INFO lines from the server: called with a section name ("clients", "server"...),
/// appends `field:value\r\n` lines.
pub type InfoHook<'h> = Box<dyn Fn(&str, &mut String) + 'h>;

/// The persistent keyspace; see the module documentation.
pub struct PersistentEngine<'h> {
    heap: &'h Heap,
    root: u64,
    txn: Option<Tx<'h>>,
    poisoned: Option<String>,
    now: i64,
    clock: Option<i64>,
    rng: u64,
    zcache: ZCache,
    expire_cursor: u64,
    stats: EngineStats,
    info_hook: Option<InfoHook<'h>>,
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

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl<'h> PersistentEngine<'h> {
    /// Opens the keyspace in `heap`, creating it on first use. Reads the root and the
    /// keyspace table's header only: no scan, no replay. Corrupt root or header: an error.
    pub fn open(heap: &'h Heap) -> Result<PersistentEngine<'h>, EngineError> {
        let root_ptr = heap.root::<[u64; 8]>(ROOT_NAME)?;
        let root = root_ptr.offset();
        let words = heap.get(root_ptr)?;
        heap.tx(|txn| -> mnemo_heap::Result<Result<(), EngineError>> {
            let tx = &Mem::new(txn, heap);
            if words[0] == 0 {
                if words.iter().any(|&w| w != 0) {
                    return Ok(store::corrupt("keyspace root without magic"));
                }
                let ks = match dict::create(tx, Kind::Keyspace) {
                    Ok(ks) => ks,
                    Err(EngineError::Heap(e)) => return Err(e),
                    Err(e) => return Ok(Err(e)),
                };
                txn.write(
                    PPtr::<[u64; 4]>::from_offset(root),
                    &[ROOT_MAGIC, LAYOUT_VERSION, ks, 0],
                )?;
                return Ok(Ok(()));
            }
            if words[0] != ROOT_MAGIC {
                return Ok(store::corrupt(format!(
                    "root {ROOT_NAME:?} does not hold a mnemo keyspace (magic {:#x})",
                    words[0]
                )));
            }
            if words[1] != LAYOUT_VERSION {
                return Ok(store::corrupt(format!(
                    "keyspace layout version {} (this build reads {LAYOUT_VERSION})",
                    words[1]
                )));
            }
            let checked = dict::Header::read(tx, words[2]).and_then(|h| {
                if h.kind == Kind::Keyspace {
                    Ok(())
                } else {
                    store::corrupt("the keyspace root points at another kind of table")
                }
            });
            Ok(checked)
        })??;
        let seed = unix_ms() as u64 | 1;
        Ok(PersistentEngine {
            heap,
            root,
            txn: None,
            poisoned: None,
            now: 0,
            clock: None,
            rng: seed,
            zcache: ZCache::default(),
            expire_cursor: 0,
            stats: EngineStats::default(),
            info_hook: None,
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

    /// Runs one command (arguments, name first) in the open batch and returns its reply:
    /// the seam without the server's [`Request`] (tests, tools). Opens a batch if none is.
    /// Finds and checks the command in mnemo-resp's table ([`command::resolve`]), as the
    /// session does for a [`Request`].
    pub fn execute_args(&mut self, args: &[Bytes], protocol: Protocol) -> (Reply, Effect) {
        if self.txn.is_none() {
            self.begin();
        }
        match command::resolve(args) {
            Ok(spec) => self.run_command(spec, args, protocol),
            Err(error) => (
                Reply::Error(Bytes::from(error.reply_text())),
                Effect::default(),
            ),
        }
    }

    /// Runs a command that the table has found (`spec`) in the open batch, dispatching on its
    /// id. The session has checked the arity already; it is checked again here, from the same
    /// entry (one comparison), because the handlers index the arguments by it and a
    /// [`Request`] built by hand must not make them panic.
    fn run_command(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        protocol: Protocol,
    ) -> (Reply, Effect) {
        if let Err(error) = command::check_arity(spec, args.len()) {
            return (
                Reply::Error(Bytes::from(error.reply_text())),
                Effect::default(),
            );
        }
        let writes = spec.flags.contains(Flags::WRITE);
        let effect = Effect {
            wrote: writes,
            close: spec.id == CommandId::Shutdown,
        };
        self.stats.commands += 1;
        if let Some(reason) = &self.poisoned {
            return (
                commands::err_owned(format!("ERR batch failed: {reason}")),
                effect,
            );
        }
        let resp3 = protocol == Protocol::Resp3;
        let reply = match spec.id {
            CommandId::Ping => Ok(match args.get(1) {
                Some(text) => Reply::Bulk(text.clone()),
                None => Reply::Simple(Bytes::from_static(b"PONG")),
            }),
            CommandId::Echo => Ok(Reply::Bulk(args[1].clone())),
            CommandId::Select => Ok(match args[1].as_ref() {
                b"0" => Reply::ok(),
                _ => commands::err(errors::DB_INDEX_OUT_OF_RANGE),
            }),
            CommandId::Shutdown => Ok(Reply::ok()),
            CommandId::Info => Ok(self.info(&args[1..])),
            CommandId::ConfigGet => Ok(config_get(args)),
            CommandId::ConfigSet => Ok(config_set(args)),
            CommandId::ConfigResetstat => Ok(Reply::ok()),
            _ => self.run_data(spec, args, resp3),
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => self.recover(e, spec, args, resp3),
        };
        (reply, effect)
    }

    fn run_data(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        resp3: bool,
    ) -> Result<Reply, EngineError> {
        self.under_savepoint(resp3, |ctx| commands::run(ctx, spec, args))
    }

    /// Runs `f` under a savepoint of the batch's transaction: if it fails, everything it did
    /// is rolled back (the transaction's writes, allocations and frees, the random state,
    /// and the sorted-set indexes it may have changed, which are rebuilt on next use). A
    /// rollback that fails poisons the batch.
    fn under_savepoint<R>(
        &mut self,
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
            now: self.now,
            rng: &mut self.rng,
            zcache: &mut self.zcache,
            resp3,
            keyspace: Cell::new(0),
        };
        let result = f(&mut ctx);
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
        resp3: bool,
    ) -> Reply {
        self.stats.rollbacks += 1;
        if let Some(reason) = &self.poisoned {
            return commands::err_owned(format!("ERR batch failed: {reason}"));
        }
        let batch_wrote = self.txn.as_ref().is_some_and(|t| !t.is_empty());
        let e = if e.is_too_large() && batch_wrote {
            match self.commit_open() {
                Ok(()) => {
                    self.stats.split_commits += 1;
                    self.begin_txn();
                    match self.run_data(spec, args, resp3) {
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
        let mut cursor = self.expire_cursor;
        let result = self.under_savepoint(false, |ctx| {
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
                }
            }
            ctx.reclaim_step(limits::RECLAIM_FREES_PER_BATCH)
        });
        if result.is_ok() {
            self.expire_cursor = cursor;
        }
        result
    }

    /// Validates the whole keyspace (every table's structure and count, every list's chain)
    /// and returns the number of keys. Reads everything: for tests and checkers.
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
        let ks = store::word(tx, self.root + root::KEYSPACE)?;
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

    fn info(&self, args: &[Bytes]) -> Reply {
        let wanted: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| w == "all" || w == "everything" || w == "default");
        let mut out = String::new();
        let sections = [
            "server",
            "clients",
            "memory",
            "persistence",
            "stats",
            "replication",
            "keyspace",
            "pool",
        ];
        for section in sections {
            if !all && !wanted.iter().any(|w| w == section) {
                continue;
            }
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            let mut title = section.to_string();
            title[..1].make_ascii_uppercase();
            let _ = write!(out, "# {title}\r\n");
            self.info_section(section, &mut out);
            if let Some(hook) = &self.info_hook {
                hook(section, &mut out);
            }
        }
        Reply::Verbatim {
            format: *b"txt",
            text: Bytes::from(out),
        }
    }

    fn info_section(&self, section: &str, out: &mut String) {
        let heap_stats = self.heap.stats();
        let pool = self.heap.pool();
        let mut line = |k: &str, v: &dyn std::fmt::Display| {
            let _ = write!(out, "{k}:{v}\r\n");
        };
        match section {
            "server" => {
                line("redis_version", &"7.0.0");
                line("mnemo_version", &env!("CARGO_PKG_VERSION"));
                line("redis_mode", &"standalone");
                line("process_id", &std::process::id());
            }
            "memory" => {
                line("used_memory", &heap_stats.used_bytes);
                line("used_memory_human", &human(heap_stats.used_bytes));
                line("maxmemory", &pool.size());
                line("maxmemory_policy", &"noeviction");
                line(
                    "mem_fragmentation_ratio",
                    &format!("{:.2}", 1.0 + heap_stats.fragmentation()),
                );
            }
            "persistence" => {
                let s = pool.stats();
                let load =
                    |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
                line("loading", &0);
                line("durability", &"every write, at its batch's sync point");
                line("sync_points", &load(&s.sync_points));
                line("sync_ranges", &load(&s.sync_ranges));
                line("bytes_synced", &load(&s.sync_bytes));
                line("batches_committed", &self.stats.commits);
                line("last_commit_time", &self.stats.last_commit_unix);
                line("rdb_changes_since_last_save", &0);
                line("aof_enabled", &0);
            }
            "stats" => {
                line("total_commands_processed", &self.stats.commands);
                line("read_only_batches", &self.stats.read_only_batches);
                line("command_rollbacks", &self.stats.rollbacks);
                line("split_commits", &self.stats.split_commits);
                line("housekeeping_errors", &self.stats.housekeeping_errors);
            }
            "keyspace" => {
                if let Some((keys, expires)) = self.key_counts() {
                    if keys > 0 {
                        line("db0", &format!("keys={keys},expires={expires},avg_ttl=0"));
                    }
                }
            }
            "pool" => {
                line("pool_path", &pool.name().display());
                line("pool_size", &pool.size());
                line("pool_used", &heap_stats.used_bytes);
                line("pool_free", &heap_stats.free_bytes);
                line("pool_chunks", &heap_stats.chunks);
                line("pool_chunks_free", &heap_stats.chunks_free);
                line(
                    "pool_fragmentation",
                    &format!("{:.4}", heap_stats.fragmentation()),
                );
            }
            _ => {}
        }
    }

    fn key_counts(&self) -> Option<(u64, u64)> {
        let txn = self.txn.as_ref()?;
        let tx = &Mem::new(txn, self.heap);
        let ks = store::word(tx, self.root + root::KEYSPACE).ok()?;
        let h = dict::Header::read(tx, ks).ok()?;
        Some((h.count, h.extra))
    }
}

fn human(bytes: u64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2}{}", units[u])
}

/// CONFIG GET: the parameters matching any of the patterns. Values describe mnemo's behaviour
/// in Redis's terms.
fn config_get(args: &[Bytes]) -> Reply {
    const PARAMS: &[(&str, &str)] = &[
        ("appendfsync", "always"),
        ("appendonly", "no"),
        ("databases", "1"),
        ("maxclients", "10000"),
        ("maxmemory", "0"),
        ("maxmemory-policy", "noeviction"),
        ("proto-max-bulk-len", "536870912"),
        ("save", ""),
        ("timeout", "0"),
        ("tcp-keepalive", "300"),
    ];
    let mut pairs = Vec::new();
    for (name, value) in PARAMS {
        if args[2..]
            .iter()
            .any(|p| glob::matches(&p.to_ascii_lowercase(), name.as_bytes()))
        {
            pairs.push((
                Reply::Bulk(Bytes::from_static(name.as_bytes())),
                Reply::Bulk(Bytes::from_static(value.as_bytes())),
            ));
        }
    }
    Reply::Map(pairs)
}

/// CONFIG SET: no parameter can be changed at run time.
fn config_set(args: &[Bytes]) -> Reply {
    commands::err_owned(format!(
        "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
        String::from_utf8_lossy(&args[2])
    ))
}

impl Engine for PersistentEngine<'_> {
    type Error = EngineError;

    fn begin(&mut self) {
        self.abort_open();
        self.poisoned = None;
        self.now = self.clock.unwrap_or_else(unix_ms);
        self.begin_txn();
    }

    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        if self.txn.is_none() {
            self.begin();
        }
        let (value, effect) =
            self.run_command(request.spec, request.command.args(), reply.protocol());
        if !(effect.close && matches!(value, Reply::Simple(_))) {
            reply.reply(&value);
        }
        effect
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        if self.txn.is_some() && self.poisoned.is_none() && self.housekeeping().is_err() {
            // Rolled back to its savepoint; retried with the next batch.
            self.stats.housekeeping_errors += 1;
        }
        if let Some(reason) = self.poisoned.take() {
            self.abort_open();
            return Err(EngineError::RollbackFailed(reason));
        }
        self.commit_open()
    }

    fn finish_read_only(&mut self) {
        self.abort_open();
        self.poisoned = None;
        self.stats.read_only_batches += 1;
    }
}
