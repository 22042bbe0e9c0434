//! Crash images of the keyspace under mnemo-testkit's simulator: batches of SET / DEL / INCR
//! / LPUSH / RPOP / HSET run through the engine exactly as the server runs them (one transaction and
//! one sync point per batch); every fence is a crash point and each crash image is recovered
//! (pool open, heap recovery, engine open) and checked:
//! * the keyspace's structure is valid: every table's chains in the right buckets, counts
//!   equal to the entries, list chains consistent, expiry count right (`check`);
//! * every acknowledged batch is present and the batch in flight is all or nothing (the
//!   model: string, list and hash keys with their values).

use std::collections::BTreeMap;

use mnemo_heap::{testing, Heap};
use mnemo_kv::engine::{PersistentEngine, ROOT_NAME};
use mnemo_kv::server::Engine;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Protocol, Reply};
use mnemo_testkit::{explore, pool, Config, Run, SimMedia, Workload};

const STRINGS: [&str; 4] = ["s0", "s1", "s2", "s3"];
const LISTS: [&str; 2] = ["l0", "l1"];
const HASHES: [&str; 2] = ["h0", "h1"];

/// Key -> string value, list elements or hash fields.
type Model = BTreeMap<String, Val>;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Val {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn exec(engine: &mut PersistentEngine<'_>, cmd: &[&[u8]]) -> Reply {
    let args: Vec<Bytes> = cmd.iter().map(|a| Bytes::from(a.to_vec())).collect();
    engine.execute_args(&args, Protocol::Resp2).0
}

struct KeyspaceWorkload {
    batches: usize,
}

impl KeyspaceWorkload {
    /// One random command: runs it and applies it to the model.
    fn command(
        engine: &mut PersistentEngine<'_>,
        model: &mut Model,
        choice: u64,
        tag: u64,
    ) -> Result<(), String> {
        let s = STRINGS[(choice >> 8) as usize % STRINGS.len()];
        let l = LISTS[(choice >> 16) as usize % LISTS.len()];
        let h = HASHES[(choice >> 32) as usize % HASHES.len()];
        let value = format!("{tag}").into_bytes();
        let reply = match choice % 7 {
            0 => {
                model.insert(s.into(), Val::Str(value.clone()));
                exec(engine, &[b"SET", s.as_bytes(), &value])
            }
            1 => {
                let key = match (choice & 0x100_0000 == 0, choice & 0x200_0000 == 0) {
                    (true, _) => s,
                    (false, true) => l,
                    (false, false) => h,
                };
                model.remove(key);
                exec(engine, &[b"DEL", key.as_bytes()])
            }
            2 => {
                let n = match model.get(s) {
                    Some(Val::Str(v)) => String::from_utf8_lossy(v).parse::<i64>().unwrap_or(0),
                    _ => 0,
                };
                model.insert(s.into(), Val::Str((n + 1).to_string().into_bytes()));
                exec(engine, &[b"INCR", s.as_bytes()])
            }
            3 | 4 => {
                match model.entry(l.into()).or_insert(Val::List(Vec::new())) {
                    Val::List(items) => items.insert(0, value.clone()),
                    _ => return Err("model: list key holds another type".into()),
                }
                exec(engine, &[b"LPUSH", l.as_bytes(), &value])
            }
            6 => {
                // Three fields, one named twice: a new hash is made in one piece, an existing
                // one updated field by field.
                let (a, b, c) = (
                    value.clone(),
                    format!("{}", tag + 1),
                    format!("{}", tag + 2),
                );
                match model.entry(h.into()).or_insert(Val::Hash(BTreeMap::new())) {
                    Val::Hash(fields) => {
                        fields.insert(b"b".to_vec(), b.clone().into_bytes());
                        fields.insert(b"a".to_vec(), c.clone().into_bytes());
                    }
                    _ => return Err("model: hash key holds another type".into()),
                }
                let cmd: [&[u8]; 8] = [
                    b"HSET",
                    h.as_bytes(),
                    b"a",
                    &a,
                    b"b",
                    b.as_bytes(),
                    b"a",
                    c.as_bytes(),
                ];
                exec(engine, &cmd)
            }
            _ => {
                if let Some(Val::List(items)) = model.get_mut(l) {
                    items.pop();
                    if items.is_empty() {
                        model.remove(l);
                    }
                }
                exec(engine, &[b"RPOP", l.as_bytes()])
            }
        };
        if let Reply::Error(text) = reply {
            return Err(format!(
                "command failed: {}",
                String::from_utf8_lossy(&text)
            ));
        }
        Ok(())
    }
}

impl Workload for KeyspaceWorkload {
    type State = Option<Model>;
    type Recovered = Option<Heap>;

    fn name(&self) -> String {
        format!("keyspace-{}", self.batches)
    }

    fn capacity(&self) -> u64 {
        4 << 20
    }

    fn initial(&self) -> Option<Model> {
        None
    }

    fn run(&self, run: &mut Run<Option<Model>>) -> Result<(), String> {
        let p = pool::create(run.media(), "kv", testing::pool_size(3), 4 << 20)?;
        let heap = testing::create(p)?;
        let mut engine = PersistentEngine::open(&heap).map_err(err)?;
        let mut model = Model::new();
        run.ack(Some(model.clone()));
        for _ in 0..self.batches {
            let commands = 1 + run.rng().next_u64() % 4;
            engine.begin();
            for _ in 0..commands {
                let choice = run.rng().next_u64();
                let tag = run.rng().next_u64() % 1000;
                Self::command(&mut engine, &mut model, choice, tag)?;
            }
            engine.commit().map_err(err)?;
            run.ack(Some(model.clone()));
        }
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Option<Heap>, String> {
        testing::recover(pool::open(media)?)
    }

    fn observe(&self, heap: &Option<Heap>) -> Result<Option<Model>, String> {
        let Some(heap) = heap else { return Ok(None) };
        // The root is created zeroed by one transaction and initialised by the next: before
        // the second commits there is no keyspace yet.
        let Some((root, _)) = heap.region(ROOT_NAME).map_err(err)? else {
            return Ok(None);
        };
        let magic: u64 = heap.get(mnemo_heap::PPtr::from_offset(root)).map_err(err)?;
        if magic == 0 {
            return Ok(None);
        }
        let mut engine = PersistentEngine::open(heap).map_err(err)?;
        let keys = engine
            .check()
            .map_err(|e| format!("invalid keyspace: {e}"))?;
        let mut model = Model::new();
        engine.begin();
        for s in STRINGS {
            match exec(&mut engine, &[b"GET", s.as_bytes()]) {
                Reply::Bulk(v) => {
                    model.insert(s.into(), Val::Str(v.to_vec()));
                }
                Reply::NullBulk => {}
                other => return Err(format!("GET {s}: {other:?}")),
            }
        }
        for l in LISTS {
            match exec(&mut engine, &[b"LRANGE", l.as_bytes(), b"0", b"-1"]) {
                Reply::Array(items) if items.is_empty() => {}
                Reply::Array(items) => {
                    let values = items
                        .into_iter()
                        .map(|r| match r {
                            Reply::Bulk(v) => Ok(v.to_vec()),
                            other => Err(format!("LRANGE {l} element {other:?}")),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    model.insert(l.into(), Val::List(values));
                }
                other => return Err(format!("LRANGE {l}: {other:?}")),
            }
        }
        for h in HASHES {
            match exec(&mut engine, &[b"HGETALL", h.as_bytes()]) {
                Reply::Map(pairs) if pairs.is_empty() => {}
                Reply::Map(pairs) => {
                    let mut fields = BTreeMap::new();
                    for pair in pairs {
                        match pair {
                            (Reply::Bulk(f), Reply::Bulk(v)) => {
                                fields.insert(f.to_vec(), v.to_vec());
                            }
                            other => return Err(format!("HGETALL {h} pair {other:?}")),
                        }
                    }
                    model.insert(h.into(), Val::Hash(fields));
                }
                other => return Err(format!("HGETALL {h}: {other:?}")),
            }
        }
        engine.finish_read_only();
        if keys != model.len() as u64 {
            return Err(format!(
                "keyspace counts {keys} keys, {} readable",
                model.len()
            ));
        }
        Ok(Some(model))
    }

    fn follow_on(&self, heap: Option<Heap>, media: &SimMedia) -> Result<(), String> {
        let Some(heap) = heap else { return Ok(()) };
        {
            let mut engine = PersistentEngine::open(&heap).map_err(err)?;
            engine.begin();
            exec(&mut engine, &[b"LPUSH", b"l0", b"after"]);
            exec(&mut engine, &[b"SET", b"s0", b"after"]);
            engine.commit().map_err(err)?;
            engine.check().map_err(err)?;
        }
        drop(heap);
        let again = self.recover(media.crash())?;
        match self.observe(&again)? {
            Some(model) if model.get("s0") == Some(&Val::Str(b"after".to_vec())) => Ok(()),
            other => Err(format!("follow-on batch lost after reopen: {other:?}")),
        }
    }
}

/// Keys the EXEC workload overwrites before its EXEC (logged in place: they fill the batch's
/// redo record, so that some EXECs no longer fit and take the early-commit path).
const PLAIN_KEYS: usize = 40;
/// Keys every EXEC sets to its batch's tag, with an INCR and an RPUSH beside them.
const EXEC_KEYS: [&str; 4] = ["x0", "x1", "x2", "x3"];

/// The model of the EXEC workload: every key and its value, and for the batch in flight the
/// models after each of its commands before the EXEC (a batch too large for one redo record
/// commits early, before the EXEC, so those are acceptable crash states too; a state with
/// part of an EXEC never is).
#[derive(Clone, Debug, PartialEq)]
struct ExecState {
    model: Model,
    before_exec: Vec<Model>,
}

/// Batches of plain overwrites followed by one EXEC (MULTI, SETs of four keys, INCR, RPUSH,
/// EXEC), run as the server runs them: the EXEC must be all there or not at all after any
/// crash, including when it outgrew what was left of the batch's redo record and ran alone
/// after an early commit of the commands before it.
struct ExecWorkload {
    batches: usize,
    /// The same writes as one EVAL instead of MULTI ... EXEC: a script is one sync point too.
    script: bool,
}

/// The script workload's EVAL: the EXEC's commands, keys and values as KEYS and ARGV.
const EXEC_SCRIPT: &str = "for i = 1, 4 do redis.call('SET', KEYS[i], ARGV[1]) end \
    redis.call('INCR', KEYS[5]) redis.call('RPUSH', KEYS[6], ARGV[2]) return 'done'";

fn value_of(tag: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{tag:04}-").into_bytes();
    v.resize(len, b'v');
    v
}

impl ExecWorkload {
    fn batch(
        &self,
        engine: &mut PersistentEngine<'_>,
        state: &mut ExecState,
        plain: usize,
        tag: u64,
    ) -> Result<(), String> {
        state.before_exec = vec![state.model.clone()];
        for i in 0..plain {
            let key = format!("p{}", (tag as usize + i * 7) % PLAIN_KEYS);
            let value = value_of(tag, 100);
            expect_ok(exec(engine, &[b"SET", key.as_bytes(), &value]))?;
            state.model.insert(key, Val::Str(value));
            state.before_exec.push(state.model.clone());
        }
        if !self.script {
            expect_ok(exec(engine, &[b"MULTI"]))?;
        }
        let value = value_of(tag, 200);
        for key in EXEC_KEYS {
            if !self.script {
                exec(engine, &[b"SET", key.as_bytes(), &value]);
            }
            state.model.insert(key.into(), Val::Str(value.clone()));
        }
        if !self.script {
            exec(engine, &[b"INCR", b"c"]);
        }
        let n = match state.model.get("c") {
            Some(Val::Str(v)) => String::from_utf8_lossy(v).parse::<i64>().unwrap_or(0),
            _ => 0,
        };
        state
            .model
            .insert("c".into(), Val::Str((n + 1).to_string().into_bytes()));
        let tag_text = tag.to_string().into_bytes();
        if !self.script {
            exec(engine, &[b"RPUSH", b"log", &tag_text]);
        }
        match state
            .model
            .entry("log".into())
            .or_insert(Val::List(Vec::new()))
        {
            Val::List(items) => items.push(tag_text.clone()),
            _ => return Err("model: log holds another type".into()),
        }
        if self.script {
            let mut args: Vec<&[u8]> = vec![b"EVAL", EXEC_SCRIPT.as_bytes(), b"6"];
            args.extend(EXEC_KEYS.iter().map(|k| k.as_bytes()));
            args.extend([&b"c"[..], b"log", &value, &tag_text]);
            return match exec(engine, &args) {
                Reply::Bulk(done) if &done[..] == b"done" => Ok(()),
                other => Err(format!("EVAL: {other:?}")),
            };
        }
        match exec(engine, &[b"EXEC"]) {
            Reply::Array(replies) if replies.len() == EXEC_KEYS.len() + 2 => {
                if let Some(error) = replies.iter().find(|r| matches!(r, Reply::Error(_))) {
                    return Err(format!("a command of the EXEC failed: {error:?}"));
                }
                Ok(())
            }
            other => Err(format!("EXEC: {other:?}")),
        }
    }
}

/// A model in one short line: each key with its value's first bytes (the tag) or its list.
fn summary(model: Option<&Model>) -> String {
    let Some(model) = model else {
        return "no keyspace".into();
    };
    let items: Vec<String> = model
        .iter()
        .map(|(key, value)| match value {
            Val::Str(v) => format!("{key}={}", String::from_utf8_lossy(&v[..v.len().min(4)])),
            Val::List(items) => format!("{key}={}", items.len()),
            Val::Hash(fields) => format!("{key}={}", fields.len()),
        })
        .collect();
    items.join(" ")
}

fn expect_ok(reply: Reply) -> Result<(), String> {
    match reply {
        Reply::Error(text) => Err(String::from_utf8_lossy(&text).into_owned()),
        _ => Ok(()),
    }
}

impl Workload for ExecWorkload {
    type State = Option<ExecState>;
    type Recovered = Option<Heap>;

    fn name(&self) -> String {
        let kind = if self.script { "script" } else { "exec" };
        format!("{kind}-{}", self.batches)
    }

    fn capacity(&self) -> u64 {
        4 << 20
    }

    fn initial(&self) -> Option<ExecState> {
        None
    }

    fn run(&self, run: &mut Run<Option<ExecState>>) -> Result<(), String> {
        let p = pool::create(run.media(), "kv", testing::pool_size(3), 4 << 20)?;
        let heap = testing::create(p)?;
        let mut engine = PersistentEngine::open(&heap).map_err(err)?;
        let mut state = ExecState {
            model: Model::new(),
            before_exec: Vec::new(),
        };
        run.ack(Some(state.clone()));
        // The plain keys, created once (this batch may commit early too: its prefixes are
        // acceptable states).
        engine.begin();
        state.before_exec = vec![state.model.clone()];
        for i in 0..PLAIN_KEYS {
            let key = format!("p{i}");
            let value = value_of(0, 100);
            expect_ok(exec(&mut engine, &[b"SET", key.as_bytes(), &value]))?;
            state.model.insert(key, Val::Str(value));
            state.before_exec.push(state.model.clone());
        }
        engine.commit().map_err(err)?;
        run.ack(Some(state.clone()));
        for batch in 1..=self.batches as u64 {
            // About as many overwrites as fill a record of the crash tests' heap (4 KiB):
            // some batches split before the EXEC, some in it.
            let plain = 24 + (run.rng().next_u64() % 12) as usize;
            engine.begin();
            self.batch(&mut engine, &mut state, plain, batch)?;
            engine.commit().map_err(err)?;
            run.ack(Some(state.clone()));
        }
        if engine.stats().exec_alone == 0 {
            return Err(
                "no EXEC (or script) ran alone after an early commit: that path went untested"
                    .into(),
            );
        }
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Option<Heap>, String> {
        testing::recover(pool::open(media)?)
    }

    fn observe(&self, heap: &Option<Heap>) -> Result<Option<ExecState>, String> {
        let Some(heap) = heap else { return Ok(None) };
        let Some((root, _)) = heap.region(ROOT_NAME).map_err(err)? else {
            return Ok(None);
        };
        let magic: u64 = heap.get(mnemo_heap::PPtr::from_offset(root)).map_err(err)?;
        if magic == 0 {
            return Ok(None);
        }
        let mut engine = PersistentEngine::open(heap).map_err(err)?;
        let keys = engine
            .check()
            .map_err(|e| format!("invalid keyspace: {e}"))?;
        let mut model = Model::new();
        engine.begin();
        let names = (0..PLAIN_KEYS)
            .map(|i| format!("p{i}"))
            .chain(EXEC_KEYS.iter().map(|k| k.to_string()))
            .chain(["c".to_string()]);
        for key in names {
            match exec(&mut engine, &[b"GET", key.as_bytes()]) {
                Reply::Bulk(v) => {
                    model.insert(key, Val::Str(v.to_vec()));
                }
                Reply::NullBulk => {}
                other => return Err(format!("GET {key}: {other:?}")),
            }
        }
        match exec(&mut engine, &[b"LRANGE", b"log", b"0", b"-1"]) {
            Reply::Array(items) if items.is_empty() => {}
            Reply::Array(items) => {
                let values = items
                    .into_iter()
                    .map(|r| match r {
                        Reply::Bulk(v) => Ok(v.to_vec()),
                        other => Err(format!("LRANGE log element {other:?}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                model.insert("log".into(), Val::List(values));
            }
            other => return Err(format!("LRANGE log: {other:?}")),
        }
        engine.finish_read_only();
        if keys != model.len() as u64 {
            return Err(format!(
                "keyspace counts {keys} keys, {} readable",
                model.len()
            ));
        }
        Ok(Some(ExecState {
            model,
            before_exec: Vec::new(),
        }))
    }

    fn accept(
        &self,
        observed: &Option<ExecState>,
        acked: &Option<ExecState>,
        in_flight: Option<&Option<ExecState>>,
    ) -> Result<(), String> {
        let model = |s: &Option<ExecState>| s.as_ref().map(|s| s.model.clone());
        let seen = model(observed);
        let in_flight = in_flight.and_then(|s| s.as_ref());
        let acceptable = seen == model(acked)
            || in_flight.is_some_and(|f| {
                seen.as_ref() == Some(&f.model)
                    || f.before_exec.iter().any(|m| seen.as_ref() == Some(m))
            });
        if acceptable {
            return Ok(());
        }
        Err(format!(
            "observed {}: neither the acknowledged state, nor the batch in flight, nor the \
             batch in flight up to its EXEC (an EXEC seen in part?)",
            summary(seen.as_ref())
        ))
    }

    fn follow_on(&self, heap: Option<Heap>, media: &SimMedia) -> Result<(), String> {
        let Some(heap) = heap else { return Ok(()) };
        {
            let mut engine = PersistentEngine::open(&heap).map_err(err)?;
            engine.begin();
            expect_ok(exec(&mut engine, &[b"MULTI"]))?;
            exec(&mut engine, &[b"SET", b"x0", b"after"]);
            exec(&mut engine, &[b"SET", b"x1", b"after"]);
            expect_ok(exec(&mut engine, &[b"EXEC"]))?;
            engine.commit().map_err(err)?;
            engine.check().map_err(err)?;
        }
        drop(heap);
        let again = self.recover(media.crash())?;
        match self.observe(&again)? {
            Some(state)
                if state.model.get("x0") == Some(&Val::Str(b"after".to_vec()))
                    && state.model.get("x1") == Some(&Val::Str(b"after".to_vec())) =>
            {
                Ok(())
            }
            other => Err(format!("follow-on EXEC lost after reopen: {other:?}")),
        }
    }
}

/// Sampling narrowed so the crate's debug test run stays short; `MNEMO_SOAK=1` widens it.
fn config(seed: u64) -> Config {
    let mut config = Config::from_env(seed);
    if !mnemo_testkit::soak() {
        config.sampling.exhaustive_max = 6;
        config.sampling.pairs_all_max = 12;
        config.sampling.pairs_sampled = 24;
        config.sampling.random = 24;
        config.depth2_every = 16;
        config.depth2_images = 4;
        config.follow_on_every = 8;
    }
    config.threads = 2;
    config
}

/// `MNEMO_KV_CRASH_SEEDS=N` runs N seeds instead of one (soak).
#[test]
fn crash_keyspace_batches() {
    let seeds: u64 = std::env::var("MNEMO_KV_CRASH_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for seed in 1..1 + seeds {
        let report = explore(&KeyspaceWorkload { batches: 10 }, &config(seed));
        eprintln!("{}", report.summary(&format!("keyspace seed {seed}")));
        report.assert_ok();
    }
}

/// The checker can fail: with the heap's commit deliberately broken, the keyspace workload
/// must find a bad crash image.
#[test]
fn broken_commits_are_caught() {
    let mut missed = Vec::new();
    for name in [
        "tx.apply_before_commit",
        "tx.skip_record_flush",
        "tx.skip_flush",
    ] {
        let caught = (1..4).any(|seed| {
            let mut config = config(seed);
            config.mutant = Some(name);
            config.stop_at_first_failure = true;
            let report = explore(&KeyspaceWorkload { batches: 10 }, &config);
            if let Some(f) = report.failures.first() {
                eprintln!(
                    "mutant {name} caught: {}",
                    f.to_string().lines().next().unwrap_or_default()
                );
            }
            !report.failures.is_empty()
        });
        if !caught {
            missed.push(name);
        }
    }
    assert!(missed.is_empty(), "mutants not caught: {missed:?}");
}

/// Power loss on an ordinary disk: the keyspace batches on the page-cache medium (a fence is
/// msync of the named pages; any other dirty page written back or not, torn at 512-byte
/// sectors; the file's length durable only through a sync).
#[test]
fn crash_keyspace_batches_on_a_page_cache_file() {
    for (seed, granularity) in [
        (101, mnemo_testkit::Granularity::Sector),
        (102, mnemo_testkit::Granularity::Page),
    ] {
        let config = config(seed).page_cache(granularity);
        let report = explore(&KeyspaceWorkload { batches: 10 }, &config);
        eprintln!(
            "{}",
            report.summary(&format!("keyspace on a page-cache file, seed {seed}"))
        );
        report.assert_ok();
        assert!(report.images_total() >= 100 && report.follow_ons > 0);
    }
}

/// The keyspace batches on a page-cache pool that syncs through the write-ahead policy
/// (`mnemo_pmem::WalPolicy`): each batch's commit a record in a small write-ahead file,
/// checkpoints when it fills, replay at open.
#[test]
fn crash_keyspace_batches_with_the_write_ahead_policy() {
    for (seed, wal_bytes) in [(111, 16 << 10), (112, 64 << 10)] {
        // The second seed with the pool mapped copy-on-write (`MNEMO_WAL_PRIVATE=1`).
        let config = if seed == 112 {
            config(seed).write_ahead_private(mnemo_testkit::Granularity::Sector, wal_bytes)
        } else {
            config(seed).write_ahead(mnemo_testkit::Granularity::Sector, wal_bytes)
        };
        let report = explore(&KeyspaceWorkload { batches: 10 }, &config);
        eprintln!(
            "{}",
            report.summary(&format!("keyspace, write-ahead policy, seed {seed}"))
        );
        report.assert_ok();
        assert!(report.images_total() >= 100 && report.follow_ons > 0);
    }
}

/// An EXEC is one sync point: after a crash at any fence it is all there or not at all, also
/// when it ran alone after the commands before it in its batch were committed early.
#[test]
fn crash_exec_is_all_or_nothing() {
    exec_all_or_nothing(1, false);
}

/// [`ExecWorkload`] of 4 batches from `seed`, fewer sampled cuts per point unless soaking.
fn exec_all_or_nothing(seed: u64, script: bool) {
    let mut config = config(seed);
    if !mnemo_testkit::soak() {
        config.sampling.random = 12;
        config.sampling.pairs_sampled = 12;
    }
    let report = explore(&ExecWorkload { batches: 4, script }, &config);
    let what = if script { "script" } else { "exec" };
    eprintln!("{}", report.summary(&format!("{what} seed {seed}")));
    report.assert_ok();
}

/// A script (EVAL) is one sync point, as an EXEC: after a crash at any fence its writes are
/// all there or none, also when it outgrew what was left of its batch's redo record and ran
/// alone after an early commit of the commands before it.
#[test]
fn crash_script_is_all_or_nothing() {
    exec_all_or_nothing(2, true);
}

/// The EXEC workload's checker can fail: with the heap's commit broken it finds a bad image.
#[test]
fn broken_commits_under_exec_are_caught() {
    let caught = (1..4).any(|seed| {
        let mut config = config(seed);
        config.mutant = Some("tx.apply_before_commit");
        config.stop_at_first_failure = true;
        !explore(
            &ExecWorkload {
                batches: 4,
                script: false,
            },
            &config,
        )
        .failures
        .is_empty()
    });
    assert!(
        caught,
        "tx.apply_before_commit not caught by the EXEC workload"
    );
}

/// The script workload's checker can fail too.
#[test]
fn broken_commits_under_scripts_are_caught() {
    let caught = (1..4).any(|seed| {
        let mut config = config(seed);
        config.mutant = Some("tx.apply_before_commit");
        config.stop_at_first_failure = true;
        !explore(
            &ExecWorkload {
                batches: 4,
                script: true,
            },
            &config,
        )
        .failures
        .is_empty()
    });
    assert!(
        caught,
        "tx.apply_before_commit not caught by the script workload"
    );
}
