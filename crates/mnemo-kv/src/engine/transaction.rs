//! MULTI / EXEC / DISCARD / WATCH / UNWATCH on the engine's side.
//!
//! The session queues a connection's commands between MULTI and EXEC and hands them over with
//! the EXEC ([`crate::server::Transaction`]); the engine runs them one after the other inside
//! the batch's heap transaction, under one savepoint of its own, so **an EXEC is part of one
//! commit, one sync point**: after a crash it is all there or not at all. A batch that grows
//! too large for one redo record is normally committed early and the command retried
//! (`PersistentEngine::recover`); inside an EXEC that would split the EXEC over two sync
//! points, so the EXEC is rolled back as a whole instead, the batch before it committed, and
//! the EXEC retried alone in a transaction of its own. An EXEC too large even alone fails
//! whole, with nothing applied.
//!
//! WATCH is kept here because only the engine sees every write: [`Watches`] maps each watched
//! (database, key) to the connections watching it; a command that changed the pool (its
//! writes counted by `Mem`) marks its key arguments (the table's key positions) as touched,
//! and the connections watching them "dirty": their EXEC answers a null array and runs
//! nothing. FLUSHDB, FLUSHALL and SWAPDB touch the watched keys that existed in the databases
//! they change, as Redis does.

use std::collections::{HashMap, HashSet};

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{parse_i64, CommandId, Protocol, Reply};

use super::{commands, PersistentEngine};
use crate::server::{Effect, Transaction};

/// Redis's reply to an EXEC after a queuing error.
const EXEC_ABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

/// The WATCHed keys of every connection.
#[derive(Debug, Default)]
pub struct Watches {
    /// (database, key) -> the connections watching it.
    keys: HashMap<(usize, Vec<u8>), Vec<u64>>,
    /// Connection -> the keys it watches, each with whether it had already expired (still
    /// in the table, past its expiry) when watched.
    sessions: HashMap<u64, Vec<(usize, Vec<u8>, bool)>>,
    /// Connections one of whose watched keys was touched since it was watched.
    dirty: HashSet<u64>,
}

impl Watches {
    /// Whether no key is watched (then nothing needs marking).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// WATCH `keys` in `db` for `session`; `stale[i]` says whether key `i` had already
    /// expired (Redis then does not count its expiry as a change).
    pub fn add(&mut self, session: u64, db: usize, keys: &[Bytes], stale: &[bool]) -> Reply {
        for (key, &stale) in keys.iter().zip(stale) {
            let id = (db, key.to_vec());
            let watchers = self.keys.entry(id.clone()).or_default();
            if !watchers.contains(&session) {
                watchers.push(session);
                self.sessions
                    .entry(session)
                    .or_default()
                    .push((id.0, id.1, stale));
            }
        }
        Reply::ok()
    }

    /// The keys `session` watches that had not expired when watched.
    pub fn fresh_keys_of(&self, session: u64) -> Vec<(usize, Vec<u8>)> {
        self.sessions
            .get(&session)
            .into_iter()
            .flatten()
            .filter(|(_, _, stale)| !stale)
            .map(|(db, key, _)| (*db, key.clone()))
            .collect()
    }

    /// The active expiry deleted `key` of `db`: a change for the connections that watched
    /// it before it expired (not for those that watched it already expired).
    pub fn touch_expired(&mut self, db: usize, key: &[u8]) {
        let Some(watchers) = self.keys.get(&(db, key.to_vec())) else {
            return;
        };
        for &session in watchers {
            let stale = self.sessions.get(&session).is_some_and(|keys| {
                keys.iter()
                    .any(|(d, k, stale)| *d == db && k.as_slice() == key && *stale)
            });
            if !stale {
                self.dirty.insert(session);
            }
        }
    }

    /// Marks `session` dirty: its EXEC will fail.
    pub fn mark(&mut self, session: u64) {
        self.dirty.insert(session);
    }

    /// UNWATCH (also EXEC, DISCARD, a closed connection).
    pub fn remove_session(&mut self, session: u64) {
        self.dirty.remove(&session);
        for (db, key, _) in self.sessions.remove(&session).unwrap_or_default() {
            let id = (db, key);
            if let Some(watchers) = self.keys.get_mut(&id) {
                watchers.retain(|&s| s != session);
                if watchers.is_empty() {
                    self.keys.remove(&id);
                }
            }
        }
    }

    /// Whether a watched key of `session` was touched.
    pub fn is_dirty(&self, session: u64) -> bool {
        self.dirty.contains(&session)
    }

    /// The keys `(db, key)` watched by anyone, in databases `dbs` (all if `None`).
    pub fn watched_in(&self, dbs: Option<&[usize]>) -> Vec<(usize, Vec<u8>)> {
        self.keys
            .keys()
            .filter(|(db, _)| dbs.is_none_or(|dbs| dbs.contains(db)))
            .cloned()
            .collect()
    }

    /// Marks `key` of `db` as changed.
    pub fn touch(&mut self, db: usize, key: &[u8]) {
        if let Some(watchers) = self.keys.get(&(db, key.to_vec())) {
            self.dirty.extend(watchers.iter().copied());
        }
    }

    /// A command that changed the pool ran in `db`: marks its key arguments (by the table's
    /// key positions, plus MOVE's and COPY's targets in their database), and `existing`
    /// (the watched keys that existed where FLUSHDB, FLUSHALL or SWAPDB changed them).
    pub fn touch_command(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        db: usize,
        existing: Vec<(usize, Vec<u8>)>,
    ) {
        for (db, key) in existing {
            self.touch(db, &key);
        }
        // SORT reads its first key: only its STORE target changes (below).
        if spec.id != CommandId::Sort {
            for key in key_arguments(spec, args) {
                self.touch(db, key);
            }
        }
        // LMPOP's keys follow their count (the table has no fixed positions for them).
        if matches!(spec.id, CommandId::Blmpop | CommandId::Bzmpop) {
            let keys = super::blocking::numkeys(args);
            for key in args.iter().skip(3).take(keys) {
                self.touch(db, key);
            }
        }
        // SORT's and GEORADIUS's STORE target and MIGRATE's KEYS sit where the table cannot
        // say.
        if matches!(
            spec.id,
            CommandId::Sort
                | CommandId::Migrate
                | CommandId::Georadius
                | CommandId::Georadiusbymember
        ) {
            let positions = mnemo_resp::command::key_positions(spec, args).unwrap_or_default();
            let written = positions
                .into_iter()
                .filter(|&at| spec.id != CommandId::Sort || at != 1);
            for key in written.filter_map(|at| args.get(at)) {
                self.touch(db, key);
            }
        }
        if matches!(spec.id, CommandId::Lmpop | CommandId::Zmpop) {
            let count = args.get(1).and_then(|n| parse_i64(n)).unwrap_or(0);
            let keys = usize::try_from(count).unwrap_or(0);
            for key in args.iter().skip(2).take(keys) {
                self.touch(db, key);
            }
        }
        let other_db = match spec.id {
            CommandId::Move => args.get(2),
            CommandId::Copy => args
                .iter()
                .position(|a| a.eq_ignore_ascii_case(b"db"))
                .and_then(|at| args.get(at + 1)),
            _ => None,
        };
        let other_db = other_db.and_then(|a| parse_i64(a)).map(usize::try_from);
        if let Some(Ok(other)) = other_db {
            let key = if spec.id == CommandId::Move {
                args.get(1)
            } else {
                args.get(2)
            };
            if let Some(key) = key {
                self.touch(other, key);
            }
        }
    }
}

/// The key arguments of a command, by its table entry's first key, last key and step.
fn key_arguments<'a>(
    spec: &'static CommandSpec,
    args: &'a [Bytes],
) -> impl Iterator<Item = &'a Bytes> + 'a {
    let argc = i64::try_from(args.len()).unwrap_or(i64::MAX);
    let first = i64::from(spec.first_key);
    let last = match i64::from(spec.last_key) {
        last if last < 0 => argc + last,
        last => last,
    };
    let step = usize::try_from(spec.key_step.max(1)).unwrap_or(1);
    let range = if first > 0 && last >= first {
        usize::try_from(first).unwrap_or(0)..usize::try_from(last + 1).unwrap_or(0)
    } else {
        0..0
    };
    range.step_by(step).filter_map(move |at| args.get(at))
}

impl PersistentEngine<'_> {
    /// EXEC or DISCARD for connection `session`, whose MULTI queued `transaction`.
    pub(super) fn run_transaction(
        &mut self,
        spec: &'static CommandSpec,
        session: u64,
        db: &mut usize,
        transaction: Option<&Transaction>,
        protocol: Protocol,
    ) -> (Reply, Effect) {
        // A watched key that expired since it was watched counts as changed (Redis 7.0).
        for (watched_db, key) in self.watch.fresh_keys_of(session) {
            let expired = self.under_savepoint(watched_db, false, |ctx| {
                Ok(ctx
                    .lookup_raw(&key)?
                    .is_some_and(|f| f.entry.expire != 0 && f.entry.expire <= ctx.now))
            });
            if expired.unwrap_or(false) {
                self.watch.mark(session);
            }
        }
        let dirty = self.watch.is_dirty(session);
        self.watch.remove_session(session);
        let Some(transaction) = transaction else {
            let name = spec.name.to_ascii_uppercase();
            return (
                commands::err_owned(format!("ERR {name} without MULTI")),
                Effect::default(),
            );
        };
        if spec.id == CommandId::Discard {
            return (Reply::ok(), Effect::default());
        }
        if transaction.aborted {
            return (commands::err(EXEC_ABORT), Effect::default());
        }
        if dirty {
            return (Reply::NullArray, Effect::default());
        }
        let start_db = *db;
        match self.exec_once(session, db, transaction, protocol) {
            Some(done) => done,
            None => {
                // Too large for what was left of the batch's record: commit the batch so
                // far, and run the EXEC alone.
                *db = start_db;
                let batch_wrote = self.txn.as_ref().is_some_and(|t| !t.is_empty());
                if batch_wrote {
                    self.commit_early();
                    if let Some(done) = self.exec_once(session, db, transaction, protocol) {
                        return done;
                    }
                    *db = start_db;
                }
                (
                    commands::err("ERR EXEC too large for one pool transaction; nothing done"),
                    Effect::default(),
                )
            }
        }
    }

    /// Runs the queued commands under one savepoint; `None` (everything rolled back) if one
    /// of them outgrew the batch's redo record.
    fn exec_once(
        &mut self,
        session: u64,
        db: &mut usize,
        transaction: &Transaction,
        protocol: Protocol,
    ) -> Option<(Reply, Effect)> {
        let start_db = *db;
        let savepoint = match self.txn.as_ref().map(|txn| txn.savepoint()) {
            Some(Ok(savepoint)) => savepoint,
            Some(Err(e)) => {
                return Some((commands::err_owned(format!("ERR {e}")), Effect::default()))
            }
            None => {
                return Some((commands::err("ERR no open batch"), Effect::default()));
            }
        };
        let rng = self.rng;
        self.in_exec = true;
        self.exec_overflow = false;
        let mut replies = Vec::with_capacity(transaction.commands.len());
        let mut effect = Effect::default();
        for (spec, command) in &transaction.commands {
            let (reply, one) = self.run_command(spec, command.args(), session, db, protocol);
            replies.push(reply);
            effect.wrote |= one.wrote;
            effect.close |= one.close;
            if self.exec_overflow {
                break;
            }
        }
        self.in_exec = false;
        let txn = self.txn.as_ref()?;
        if self.exec_overflow {
            self.exec_overflow = false;
            self.rng = rng;
            self.zcache.rolled_back();
            if let Err(e) = txn.rollback_to(&savepoint) {
                self.poisoned.get_or_insert_with(|| e.to_string());
            }
            if let Err(e) = txn.release(savepoint) {
                self.poisoned.get_or_insert_with(|| e.to_string());
            }
            return None;
        }
        if let Err(e) = txn.release(savepoint) {
            self.poisoned.get_or_insert_with(|| e.to_string());
        }
        if *db != start_db {
            effect.select = Some(*db);
        }
        Some((Reply::Array(replies), effect))
    }

    /// Before FLUSHDB, FLUSHALL or SWAPDB: the watched keys that exist in the databases it
    /// changes (Redis touches those only). Empty for every other command, or when nothing
    /// is watched.
    pub(super) fn watched_existing(
        &mut self,
        spec: &'static CommandSpec,
        args: &[Bytes],
        db: usize,
    ) -> Vec<(usize, Vec<u8>)> {
        if self.watch.is_empty() {
            return Vec::new();
        }
        let dbs: Vec<usize> = match spec.id {
            CommandId::Flushall => (0..self.slots.len()).collect(),
            CommandId::Flushdb => vec![db],
            CommandId::Swapdb => args[1..]
                .iter()
                .filter_map(|a| parse_i64(a).and_then(|n| usize::try_from(n).ok()))
                .filter(|&n| n < self.slots.len())
                .collect(),
            _ => return Vec::new(),
        };
        let mut existing = Vec::new();
        for (watched_db, key) in self.watch.watched_in(Some(&dbs)) {
            // SWAPDB: a key that exists in either database changes.
            let candidates: &[usize] = if spec.id == CommandId::Swapdb {
                &dbs
            } else {
                std::slice::from_ref(&watched_db)
            };
            let mut exists = false;
            for &in_db in candidates {
                let found =
                    self.under_savepoint(in_db, false, |ctx| Ok(ctx.lookup(&key)?.is_some()));
                exists |= found.unwrap_or(true);
            }
            if exists {
                existing.push((watched_db, key));
            }
        }
        existing
    }
}
