//! Readers on a mirror (and a backup): `mnemo mirror serve --read-port PORT`.
//!
//! A read-only Redis-protocol endpoint answering the read commands of `mnemo serve` from the
//! mirror's image. Writes get Redis's own replica error
//! (`-READONLY You can't write against a read only replica.`).
//!
//! # Readers see only complete sync points
//!
//! * **The image as received is a crash image.** A sync point ships the heap's commit
//!   record with the bytes applied for the records before it, not this record's own
//!   application (`docs/design/heap-and-transactions.md`): only the heap's recovery (replaying
//!   the records past the horizon) yields the state the primary acknowledged. Recovery writes,
//!   and the image must never change but by the primary's records, so a reader opens the
//!   image through a copy-on-write view ([`mnemo_pmem::ViewMedia`]: `MAP_PRIVATE`, stores
//!   stay in this process, flushes do nothing) and runs the heap's recovery there.
//! * **Reads exclude the mirror's writer.** A record is logged, acknowledged and applied
//!   under the mirror store's lock; so is every step of a full copy. A reader takes the same
//!   lock for each command: it builds its view, if stale, and runs the command under it, so a
//!   command never sees a record half applied (a view's untouched pages follow the file:
//!   without the lock a command could read pages of two records, mutant
//!   `repl.read_unlocked`). Each command sees one state: after some record, whole.
//! * **The engine's volatile state never goes stale.** What `PersistentEngine` caches at
//!   open (the databases' table slots) or builds on first use (a sorted set's order index,
//!   the expiry cursor) is only true of the image it read: the engine is opened anew for each
//!   command, on the current view; the view (pool, heap and its allocator state) is rebuilt
//!   whenever the store's [`MirrorStore::generation`] moved, i.e. a record was applied or a copy
//!   stepped since.
//! * **Strongly consistent in sync modes.** The mirror applies a record right after its
//!   acknowledgement, before it releases the lock (the checkpoint only makes the image
//!   durable and empties the log; nothing waits for it). A client that saw its write
//!   acknowledged by a `sync`-mode primary then reads it on the mirror: the mirror's ack came
//!   first, and the reader's lock waits for that record's application. In `async` mode a read
//!   sees a prefix of the acknowledged writes.
//! * **During a full copy** (and before the first) the image is no pool: reads get
//!   `-LOADING`, as a Redis replica loading its dataset answers.
//!
//! * **A script holds the lock at most [`SCRIPT_HOLD_MS`].** The primary's sync points wait
//!   for the mirror, whose records wait for the lock: a script still running then on the
//!   read port is killed (Redis's SCRIPT KILL error), so that a reader's loop never stalls
//!   the primary's writes (a read-only script is always killable; other commands are
//!   bounded by their own work, as on Redis).
//!
//! Cost: a command waits for the record being applied (microseconds) or a backup's full copy
//! (which holds the store); after each change of the image the next command rebuilds the
//! view (maps the file, recovers the heap, loads its allocator's state) while the mirror's
//! records wait for the lock.

use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use mnemo_heap::Heap;
use mnemo_kv::engine::{heap_options, PersistentEngine};
use mnemo_kv::server::{
    Busy, Effect, Engine, EventLoop, Host, NoHost, Request, SessionConfig, Stopper,
};
use mnemo_pmem::{OpenOptions, Pool, ViewDetach, ViewMedia};
use mnemo_repl::backup::Forwarder;
use mnemo_repl::MirrorStore;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::Flags;
use mnemo_resp::{CommandId, Encoder, Reply};

/// Redis's answer to a write on a read-only replica, word for word.
pub const READONLY: &[u8] = b"READONLY You can't write against a read only replica.";

/// The answer while the image holds no complete copy (Redis answers LOADING while a replica
/// loads its dataset).
const LOADING: &[u8] =
    b"LOADING the mirror holds no complete copy of the primary's pool yet (a full copy is arriving)";

/// Deliberately broken variants of the read endpoint (compiled in only with mnemo-pmem's
/// `mutants` feature, in test builds), each caught by this module's tests.
#[cfg_attr(not(test), allow(dead_code))] // read by the tests
pub const MUTANTS: &[&str] = &[
    // The view is built under the store's lock, but commands read it without: records
    // applied meanwhile show through the view's untouched pages.
    "repl.read_unlocked",
];

/// A consistent view of the image at one generation: a pool and heap, recovered, on a
/// copy-on-write mapping.
struct View {
    generation: u64,
    heap: Option<Heap>,
    detach: ViewDetach,
}

impl Drop for View {
    fn drop(&mut self) {
        // The file may have changed or shrunk since (a full copy resets it): cut the view
        // from it before the heap settles and the pool closes (stores into the view).
        self.detach.detach();
        drop(self.heap.take());
    }
}

/// Open a view of `store`'s image (the caller holds the store's lock).
fn open_view(store: &MirrorStore) -> Result<View, String> {
    let path = store.image_path();
    let len = recorded_size(&path).max(store.state().pool_size);
    let (media, detach) = ViewMedia::open(&path, len).map_err(|e| e.to_string())?;
    let options = OpenOptions {
        layout: Some(crate::serve::LAYOUT.to_string()),
        ..OpenOptions::default()
    };
    let pool = match Pool::open_on(Box::new(media), &path, &options) {
        Ok(pool) => pool,
        Err(e) => {
            detach.detach();
            return Err(format!("the mirror's image does not open as a pool: {e}"));
        }
    };
    match Heap::open_with(pool, &heap_options()) {
        Ok(heap) => Ok(View {
            generation: store.generation(),
            heap: Some(heap),
            detach,
        }),
        Err(e) => {
            detach.detach();
            Err(format!(
                "the mirror's image holds no heap that recovers: {e}"
            ))
        }
    }
}

/// The pool size the image's header records (a pool that grew after its copy records a
/// size its image may not have reached yet: the zeros it grew by are never shipped).
fn recorded_size(path: &Path) -> u64 {
    mnemo_pmem::inspect::inspect(path)
        .ok()
        .and_then(|i| i.header)
        .map_or(0, |h| h.pool_size)
}

/// The engine of the read endpoint: every command under the store's lock, on a view of the
/// current generation.
struct Reader {
    store: Arc<Mutex<MirrorStore>>,
    role: &'static str,
    databases: usize,
    view: Option<View>,
    /// Views built (INFO replication: `mnemo_read_views`).
    views: u64,
    /// How long the last one took to build, in microseconds (`mnemo_read_view_us`).
    view_us: u64,
    /// The backups this node feeds (their figures in INFO replication).
    backups: Vec<Arc<Forwarder>>,
}

/// Why a command is not run on a mirror: the error to answer, if any.
fn refusal(request: &Request) -> Option<&'static [u8]> {
    let writes = |flags: Flags| flags.contains(Flags::WRITE);
    match request.spec.id {
        // Scripts may write: the read-only forms run (their writes fail inside the script).
        CommandId::Eval | CommandId::Evalsha => Some(READONLY),
        CommandId::Wait => Some(b"ERR WAIT cannot be used with replica instances."),
        CommandId::Shutdown => {
            Some(b"ERR SHUTDOWN is not served on a mirror's read port: stop the mirror process")
        }
        CommandId::Exec
            if request.transaction.as_ref().is_some_and(|t| {
                t.commands.iter().any(|(spec, _)| {
                    writes(spec.flags) || matches!(spec.id, CommandId::Eval | CommandId::Evalsha)
                })
            }) =>
        {
            Some(READONLY)
        }
        _ if writes(request.spec.flags) => Some(READONLY),
        _ => None,
    }
}

/// Run `f` without logging: opening a view recovers a crash image every time ("pool was not
/// closed cleanly", "heap recovery replayed ..."), which is no news on a mirror; a failure
/// comes back as an error.
fn quietly<T>(f: impl FnOnce() -> T) -> T {
    tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), f)
}

fn lock(store: &Mutex<MirrorStore>) -> MutexGuard<'_, MirrorStore> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

impl Reader {
    /// The mirror's own figures for INFO replication (the store's lock held): its epoch and
    /// last record, its counters, the read port's views, and each backup it feeds as the
    /// primary's INFO shows them.
    fn mirror_info(&self, s: &MirrorStore) -> String {
        use std::fmt::Write as _;
        let (state, stats) = (s.state(), s.stats());
        let mut out = String::new();
        let _ = write!(
            out,
            "mnemo_repl_epoch:{}\r\nmnemo_repl_last_id:{}\r\nmnemo_repl_complete:{}\r\nmnemo_repl_mode:{}\r\nmnemo_mirror_records:{}\r\nmnemo_mirror_bytes:{}\r\nmnemo_mirror_checkpoints:{}\r\nmnemo_mirror_copies:{}\r\nmnemo_mirror_replayed:{}\r\nmnemo_mirror_heartbeats:{}\r\nmnemo_read_generation:{}\r\nmnemo_read_views:{}\r\nmnemo_read_view_us:{}\r\nmnemo_repl_backups:{}\r\n",
            state.epoch,
            s.last_id(),
            u8::from(state.complete),
            state.mode.map_or("unknown", mnemo_repl::Mode::name),
            stats.records,
            stats.bytes,
            stats.checkpoints,
            stats.copies,
            stats.replayed,
            stats.heartbeats,
            s.generation(),
            self.views,
            self.view_us,
            self.backups.len(),
        );
        for (i, b) in self.backups.iter().enumerate() {
            let st = b.stats();
            let _ = write!(
                out,
                "mnemo_repl_backup{i}:addr={},connected={},acked_id={},lag_records={},lag_bytes={},copies={},stalls={},overflows={},bulk_catchups={}\r\n",
                b.addr(),
                u8::from(st.connected),
                st.acked,
                s.last_id().saturating_sub(st.acked),
                st.unacked_bytes,
                st.copies,
                st.stalls,
                st.overflows,
                st.bulk_catchups,
            );
        }
        out
    }

    /// The current view (rebuilt if the image changed since); the caller holds the lock.
    fn current(&mut self, store: &MirrorStore) -> Result<&View, String> {
        if self
            .view
            .as_ref()
            .is_some_and(|v| v.generation != store.generation())
        {
            quietly(|| self.view = None);
        }
        if self.view.is_none() {
            let started = std::time::Instant::now();
            self.view = Some(quietly(|| open_view(store))?);
            self.views += 1;
            self.view_us = started.elapsed().as_micros() as u64;
        }
        self.view.as_ref().ok_or_else(|| "no view".to_string())
    }

    fn run(&mut self, request: &Request, reply: &mut Encoder<'_>, host: &mut dyn Host) -> Effect {
        if let Some(error) = refusal(request) {
            reply.error(error);
            return Effect::default();
        }
        let store = Arc::clone(&self.store);
        let mut guard = Some(lock(&store));
        let Some(s) = guard.as_deref() else {
            return Effect::default();
        };
        if !s.state().complete {
            quietly(|| self.view = None);
            if request.spec.id == CommandId::Info {
                // What an operator needs during a copy (a Redis replica answers INFO while
                // it loads, too).
                let text = format!(
                    "# Replication\r\nrole:{}\r\nloading:1\r\n{}",
                    self.role,
                    self.mirror_info(s)
                );
                reply.bulk(text.as_bytes());
            } else {
                reply.error(LOADING);
            }
            return Effect::default();
        }
        let (role, databases) = (self.role, self.databases);
        let figures = self.mirror_info(s);
        if let Err(e) = self.current(s) {
            {
                tracing::warn!(error = %e, "a read on the mirror failed");
                reply.error(format!("ERR {e}").as_bytes());
                return Effect::default();
            }
        }
        if mnemo_pmem::mutant::active("repl.read_unlocked") {
            // Broken: the command reads the view while records are applied.
            guard = None;
        }
        let Some(heap) = self.view.as_ref().and_then(|v| v.heap.as_ref()) else {
            return Effect::default();
        };
        let mut engine = match PersistentEngine::open_with_databases(heap, databases) {
            Ok(engine) => engine,
            Err(e) => {
                reply.error(format!("ERR the mirror's keyspace does not open: {e}").as_bytes());
                return Effect::default();
            }
        };
        engine.set_role(role);
        engine.set_busy_reply_threshold(SCRIPT_HOLD_MS);
        engine.set_info_hook(Box::new(move |section: &str, out: &mut String| {
            if section == "replication" {
                out.push_str(&figures);
            }
        }));
        engine.begin();
        let effect = engine.execute_hosted(request, reply, &mut KillLongScripts(host));
        // Nothing to commit: a write never reaches here, and what a read may have changed in
        // the view (nothing) is dropped with it.
        engine.finish_read_only();
        drop(engine);
        drop(guard);
        Effect {
            wrote: false,
            close: effect.close,
            select: effect.select,
            block: None,
        }
    }
}

/// Longest a script on the read port runs (holding the mirror's records) before it is killed.
pub const SCRIPT_HOLD_MS: u64 = 200;

/// The read port's host for one command: as the loop's, except that a script past
/// [`SCRIPT_HOLD_MS`] is killed at once (after the loop has served its other connections
/// for a moment, as it does for any long script).
struct KillLongScripts<'h>(&'h mut dyn Host);

impl Host for KillLongScripts<'_> {
    fn connection_command(&mut self, request: &Request) -> Option<(Reply, bool)> {
        self.0.connection_command(request)
    }

    fn publish(&mut self, channel: &Bytes, message: &Bytes, shard: bool) -> usize {
        self.0.publish(channel, message, shard)
    }

    fn busy(&mut self, killable: bool) -> Busy {
        match self.0.busy(killable) {
            Busy::Continue if killable => Busy::Kill,
            asked => asked,
        }
    }
}

impl Engine for Reader {
    type Error = String;

    fn begin(&mut self) {}

    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        self.run(request, reply, &mut NoHost)
    }

    fn execute_hosted(
        &mut self,
        request: &Request,
        reply: &mut Encoder<'_>,
        host: &mut dyn Host,
    ) -> Effect {
        self.run(request, reply, host)
    }

    fn commit(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn finish_read_only(&mut self) {}
}

/// Serve reads of `store`'s image on `listener` from a thread of its own (`backups`: those
/// this node feeds, for INFO; `password`: clients must AUTH first; `role`: what INFO
/// replication's `role` says, `mirror` or `backup`). The returned handle stops it.
pub fn start(
    listener: TcpListener,
    store: Arc<Mutex<MirrorStore>>,
    backups: Vec<Arc<Forwarder>>,
    password: Option<Bytes>,
    role: &'static str,
    databases: usize,
) -> Result<Stopper, String> {
    let (event_loop, stopper, mut reader) = prepare(listener, store, password, role, databases)?;
    reader.backups = backups;
    std::thread::Builder::new()
        .name("mnemo-mirror-reads".into())
        .spawn(move || {
            if let Err(e) = event_loop.run(&mut reader) {
                tracing::error!(error = %e, "the mirror's read port stopped");
            }
        })
        .map_err(|e| format!("spawning the read port's thread: {e}"))?;
    Ok(stopper)
}

fn prepare(
    listener: TcpListener,
    store: Arc<Mutex<MirrorStore>>,
    password: Option<Bytes>,
    role: &'static str,
    databases: usize,
) -> Result<(EventLoop, Stopper, Reader), String> {
    let config = SessionConfig {
        password,
        databases,
        ..SessionConfig::default()
    };
    let (event_loop, stopper) =
        EventLoop::new(listener, config).map_err(|e| format!("read port: {e}"))?;
    let reader = Reader {
        store,
        role,
        databases,
        view: None,
        views: 0,
        view_us: 0,
        backups: Vec::new(),
    };
    Ok((event_loop, stopper, reader))
}

#[cfg(test)]
mod tests {
    //! A primary (pool, heap, keyspace engine in this process) replicating in `sync` mode
    //! to a mirror over loopback, writing MSETs of eight keys whose values change size (new
    //! allocations, old ones freed and reused), while a client reads the eight keys back
    //! with MGET from the mirror's read port: every reply must be one whole MSET (all eight
    //! values of one round), at or after the round the primary had acknowledged before the
    //! MGET was sent. A long read, a script (EVAL_RO) that reads the eight keys, spins a few
    //! milliseconds (several MSETs long) and reads them again, must see the same round twice:
    //! a command sees one state.

    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use mnemo_pmem::CreateOptions;
    use mnemo_repl::{Mirror, MirrorConfig, MirrorOptions, MirrorPolicy, Mode, Secret};
    use mnemo_resp::bytes::{Bytes, BytesMut};
    use mnemo_resp::{encode_command, Protocol, Reply, ReplyDecoder};

    const SECRET: &[u8] = b"mirror-readers-test-secret";
    const KEYS: usize = 8;

    fn scratch() -> tempfile::TempDir {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            tempfile::Builder::new()
                .prefix("mnemo-readers")
                .tempdir_in(shm)
                .unwrap()
        } else {
            tempfile::tempdir().unwrap()
        }
    }

    /// Key `i`'s value in round `r`: "r:i:" then a fill whose length changes every round
    /// (past the 256-byte inline limit: each round allocates the strings anew).
    fn value(r: u64, i: usize) -> Vec<u8> {
        let mut v = format!("{r}:{i}:").into_bytes();
        let len = 300 + ((r * 131 + i as u64 * 17) % 1500) as usize;
        let fill = b'a' + (r % 26) as u8;
        v.resize(len, fill);
        v
    }

    /// The round of a whole MGET reply, or why it is not one.
    fn round_of(reply: &Reply) -> Result<Option<u64>, String> {
        let Reply::Array(items) = reply else {
            return Err(format!("not an array: {reply:?}"));
        };
        if items.iter().all(|i| matches!(i, Reply::NullBulk)) {
            return Ok(None);
        }
        let mut round = None;
        for (i, item) in items.iter().enumerate() {
            let Reply::Bulk(got) = item else {
                return Err(format!("key {i}: {item:?} beside set keys: a torn read"));
            };
            let text = String::from_utf8_lossy(got);
            let r: u64 = text
                .split(':')
                .next()
                .and_then(|r| r.parse().ok())
                .ok_or_else(|| format!("key {i}: a value of no round: {text:.40}"))?;
            if *round.get_or_insert(r) != r || value(r, i) != got.as_ref() {
                return Err(format!(
                    "key {i}: {:.40} ({} bytes) beside round {round:?}: a torn read",
                    text,
                    got.len()
                ));
            }
        }
        Ok(round)
    }

    struct Client {
        stream: TcpStream,
        decoder: ReplyDecoder,
    }

    impl Client {
        fn connect(addr: SocketAddr) -> Client {
            let stream = TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            Client {
                stream,
                decoder: ReplyDecoder::new(),
            }
        }

        fn call(&mut self, args: &[&[u8]]) -> Reply {
            let mut out = BytesMut::new();
            encode_command(args, &mut out);
            self.stream.write_all(&out).unwrap();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                if let Some(reply) = self.decoder.next_reply().unwrap() {
                    return reply;
                }
                let n = self.stream.read(&mut chunk).unwrap();
                assert!(n > 0, "the read port closed the connection");
                self.decoder.feed(&chunk[..n]);
            }
        }
    }

    /// The long read: MGET, a spin of ARGV[1] steps, MGET again.
    const TWICE: &[u8] = b"local a = redis.call('MGET', unpack(KEYS)) \
        local t = 0 for j = 1, tonumber(ARGV[1]) do t = t + j end \
        return {a, redis.call('MGET', unpack(KEYS))}";

    /// The round a TWICE reply saw, or why it is not one state.
    fn round_twice(reply: &Reply) -> Result<Option<u64>, String> {
        let Reply::Array(two) = reply else {
            return Err(format!("script: {reply:?}"));
        };
        let [first, second] = two.as_slice() else {
            return Err(format!("script: {reply:?}"));
        };
        let (a, b) = (round_of(first)?, round_of(second)?);
        if a != b {
            return Err(format!(
                "one command read round {a:?}, then round {b:?}: not one state"
            ));
        }
        Ok(a)
    }

    /// What one run saw.
    struct Run {
        reads: u64,
        rounds: u64,
        views: u64,
        violations: Vec<String>,
    }

    /// Run the primary, the mirror and its read port (with `mutant` on the read port's
    /// thread) for at most `length`, stopping at the first violation when `stop_early`.
    fn run(
        mutant: Option<&'static str>,
        length: Duration,
        stop_early: bool,
        short_reads: bool,
    ) -> Run {
        let dir = scratch();
        let options = MirrorOptions {
            checkpoint_records: 64,
            ..MirrorOptions::default()
        };
        let store = MirrorStore::open(&dir.path().join("mirror"), options).unwrap();
        let mirror = Mirror::new(store, Secret::new(SECRET).unwrap());
        let store = mirror.store();
        let links = TcpListener::bind("127.0.0.1:0").unwrap();
        let mirror_addr = links.local_addr().unwrap();
        std::thread::spawn(move || mirror.serve(links));
        let reads = TcpListener::bind("127.0.0.1:0").unwrap();
        let reads_addr = reads.local_addr().unwrap();
        let (event_loop, stopper, mut reader) =
            prepare(reads, Arc::clone(&store), None, "mirror", 16).unwrap();
        let read_port = std::thread::spawn(move || match mutant {
            Some(name) => mnemo_pmem::mutant::with(name, || event_loop.run(&mut reader)),
            None => event_loop.run(&mut reader),
        });

        let acked = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let pool_path = dir.path().join("primary.pool");
        let writer = {
            let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut config =
                    MirrorConfig::new(mirror_addr, Secret::new(SECRET).unwrap(), Mode::Sync);
                config.timeout = Duration::from_secs(10);
                let policy = Arc::new(MirrorPolicy::new(config));
                let mut options = CreateOptions::new(64 << 20, crate::serve::LAYOUT);
                options.policy = Some(Arc::clone(&policy) as _);
                let pool = Pool::create(&pool_path, &options).unwrap();
                let heap = Heap::create(pool, &heap_options()).unwrap();
                let mut engine = PersistentEngine::open(&heap).unwrap();
                engine.commit().unwrap();
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    let mut args = vec![Bytes::from_static(b"MSET")];
                    for i in 0..KEYS {
                        args.push(Bytes::from(format!("k{i}")));
                        args.push(Bytes::from(value(round, i)));
                    }
                    let (reply, _) = engine.execute_args(&args, Protocol::Resp2);
                    assert_eq!(reply, Reply::ok(), "MSET on the primary");
                    engine.commit().unwrap();
                    assert!(policy.stats().in_sync, "the primary lost its mirror");
                    acked.store(round, Ordering::Release);
                }
                drop(engine);
                heap.close();
                round
            })
        };

        let mut client = Client::connect(reads_addr);
        let started = Instant::now();
        while acked.load(Ordering::Acquire) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no write acknowledged"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut run = Run {
            reads: 0,
            rounds: 0,
            views: 0,
            violations: Vec::new(),
        };
        let mgets: Vec<Vec<u8>> = std::iter::once(b"MGET".to_vec())
            .chain((0..KEYS).map(|i| format!("k{i}").into_bytes()))
            .collect();
        let mget: Vec<&[u8]> = mgets.iter().map(Vec::as_slice).collect();
        let keys = KEYS.to_string();
        let mut twice: Vec<&[u8]> = vec![b"EVAL_RO", TWICE, keys.as_bytes()];
        twice.extend(&mget[1..]);
        twice.push(b"200000");
        let started = Instant::now();
        while started.elapsed() < length && (!stop_early || run.violations.is_empty()) {
            let before = acked.load(Ordering::Acquire);
            let long = !short_reads || run.reads % 2 == 1;
            let reply = client.call(if long { &twice } else { &mget });
            run.reads += 1;
            let seen = if long {
                round_twice(&reply)
            } else {
                round_of(&reply)
            };
            match seen {
                Ok(Some(r)) if r >= before => {}
                Ok(r) => run.violations.push(format!(
                    "read round {r:?} after round {before} was acknowledged"
                )),
                Err(e) => run.violations.push(e),
            }
        }
        // Writes are refused with Redis's replica error; INFO says what this is.
        let set = client.call(&[b"SET", b"k0", b"x"]);
        assert_eq!(set, Reply::Error(Bytes::from_static(READONLY)));
        let Reply::Bulk(info) = client.call(&[b"INFO", b"replication"]) else {
            panic!("INFO");
        };
        let info = String::from_utf8_lossy(&info).into_owned();
        assert!(info.contains("role:mirror\r\n"), "{info}");
        run.views = info
            .lines()
            .find_map(|l| l.strip_prefix("mnemo_read_views:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        stop.store(true, Ordering::Relaxed);
        run.rounds = writer.join().unwrap();
        // Once the primary is done, the mirror's read port answers its last round.
        let last = round_of(&client.call(&mget)).unwrap();
        assert_eq!(last, Some(run.rounds));
        stopper.stop().unwrap();
        read_port.join().unwrap().unwrap();
        run
    }

    /// A mirror with its read port, and a `sync` primary's policy and heap replicating to
    /// it (the policy retries a lost link after 50 ms).
    struct Rig {
        dir: tempfile::TempDir,
        store: Arc<Mutex<MirrorStore>>,
        reads_addr: SocketAddr,
        stopper: Stopper,
        policy: Arc<MirrorPolicy>,
        heap: Heap,
    }

    fn rig() -> Rig {
        let dir = scratch();
        let store =
            MirrorStore::open(&dir.path().join("mirror"), MirrorOptions::default()).unwrap();
        let mirror = Mirror::new(store, Secret::new(SECRET).unwrap());
        let store = mirror.store();
        let links = TcpListener::bind("127.0.0.1:0").unwrap();
        let mirror_addr = links.local_addr().unwrap();
        std::thread::spawn(move || mirror.serve(links));
        let reads = TcpListener::bind("127.0.0.1:0").unwrap();
        let reads_addr = reads.local_addr().unwrap();
        let stopper = start(reads, Arc::clone(&store), Vec::new(), None, "mirror", 16).unwrap();
        let mut config = MirrorConfig::new(mirror_addr, Secret::new(SECRET).unwrap(), Mode::Sync);
        config.retry = Duration::from_millis(50);
        let policy = Arc::new(MirrorPolicy::new(config));
        let mut options = CreateOptions::new(64 << 20, crate::serve::LAYOUT);
        options.policy = Some(Arc::clone(&policy) as _);
        let pool = Pool::create(&dir.path().join("primary.pool"), &options).unwrap();
        let heap = Heap::create(pool, &heap_options()).unwrap();
        Rig {
            dir,
            store,
            reads_addr,
            stopper,
            policy,
            heap,
        }
    }

    /// A full copy begins under a reader's view and shrinks the image (a primary's new pool
    /// smaller than the old one): reads answer LOADING, and the stale view is dropped without
    /// touching a page past the file's new end (a SIGBUS would end this test). The primary's
    /// next record is refused (no complete copy), it relinks with a full copy, and reads
    /// answer from the new image.
    #[test]
    fn a_full_copy_under_a_reader_answers_loading_then_the_new_image() {
        let Rig {
            dir: _dir,
            store,
            reads_addr,
            stopper,
            policy,
            heap,
        } = rig();
        let mut engine = PersistentEngine::open(&heap).unwrap();
        let mut set = |key: &str, value: &str| {
            let args = [
                Bytes::from_static(b"SET"),
                Bytes::from(key.to_string()),
                Bytes::from(value.to_string()),
            ];
            let (reply, _) = engine.execute_args(&args, Protocol::Resp2);
            assert_eq!(reply, Reply::ok());
            engine.commit().unwrap();
        };
        set("k", "old");
        let mut client = Client::connect(reads_addr);
        assert_eq!(client.call(&[b"GET", b"k"]), Reply::Bulk("old".into()));

        {
            let mut s = store.lock().unwrap();
            let epoch = s.state().epoch;
            s.begin_copy(epoch, 1 << 20).unwrap();
        }
        match client.call(&[b"GET", b"k"]) {
            Reply::Error(e) if e.starts_with(b"LOADING ") => {}
            other => panic!("a read during a copy: {other:?}"),
        }
        set("k", "new");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut n = 0;
        loop {
            match client.call(&[b"GET", b"k"]) {
                Reply::Bulk(v) if v.as_ref() == b"new" => break,
                Reply::Error(e) if e.starts_with(b"LOADING ") => {}
                other => panic!("a read while the primary relinks: {other:?}"),
            }
            assert!(Instant::now() < deadline, "the mirror never got its copy");
            // Sync points, so that the primary relinks (with its full copy).
            n += 1;
            set("tick", &n.to_string());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(policy.stats().copies >= 2, "{:?}", policy.stats());
        drop(engine);
        heap.close();
        stopper.stop().unwrap();
    }

    /// A script looping on the read port holds the mirror's records: it is killed after
    /// [`SCRIPT_HOLD_MS`] (Redis's SCRIPT KILL error), and the primary's sync point made
    /// meanwhile is acknowledged soon after, the link kept. (With Redis's default threshold
    /// of 5 s the write waited those 5 s, the mirror's heartbeats keeping the link; with the
    /// loop's own answer to a long script, it ran until the client gave up.)
    #[test]
    fn a_looping_script_on_the_read_port_is_killed_and_the_primary_goes_on() {
        let Rig {
            dir: _dir,
            reads_addr,
            stopper,
            policy,
            heap,
            ..
        } = rig();
        let mut engine = PersistentEngine::open(&heap).unwrap();
        let mut set = |value: &str| {
            let args = [
                Bytes::from_static(b"SET"),
                Bytes::from_static(b"k"),
                Bytes::from(value.to_string()),
            ];
            let (reply, _) = engine.execute_args(&args, Protocol::Resp2);
            assert_eq!(reply, Reply::ok());
            engine.commit().unwrap();
        };
        set("before");
        let mut client = Client::connect(reads_addr);
        assert_eq!(client.call(&[b"GET", b"k"]), Reply::Bulk("before".into()));
        let script = std::thread::spawn(move || {
            let started = Instant::now();
            let reply = client.call(&[b"EVAL_RO", b"while true do end", b"0"]);
            (reply, started.elapsed())
        });
        // The script is running (it holds the mirror's lock) when the primary writes.
        std::thread::sleep(Duration::from_millis(50));
        let written = Instant::now();
        set("during");
        let took = written.elapsed();
        let (reply, ran) = script.join().expect("the script's client");
        eprintln!("the script ran {ran:?}; the primary's write took {took:?}");
        match reply {
            Reply::Error(e) if e.starts_with(b"ERR Script killed") => {}
            other => panic!("a looping script on the read port answered {other:?}"),
        }
        let stats = policy.stats();
        assert!(stats.in_sync && stats.link_losses == 0, "{stats:?}");
        assert!(
            took < Duration::from_secs(2),
            "the primary's write waited {took:?} for a script on the mirror's read port"
        );
        let mut client = Client::connect(reads_addr);
        assert_eq!(client.call(&[b"GET", b"k"]), Reply::Bulk("during".into()));
        drop(engine);
        heap.close();
        stopper.stop().unwrap();
    }

    #[test]
    fn reads_on_the_mirror_see_whole_acknowledged_sync_points() {
        let run = run(None, Duration::from_secs(4), false, true);
        eprintln!(
            "{} reads over {} acknowledged MSETs, {} views built",
            run.reads, run.rounds, run.views
        );
        assert!(run.violations.is_empty(), "{:?}", run.violations);
        assert!(run.reads >= 20 && run.rounds >= 20, "too little ran");
    }

    #[test]
    fn reads_not_excluded_during_apply_are_caught() {
        let name = MUTANTS[0];
        let run = run(Some(name), Duration::from_secs(30), true, false);
        eprintln!(
            "{name}: {} reads over {} MSETs: {:?}",
            run.reads,
            run.rounds,
            run.violations.first()
        );
        assert!(!run.violations.is_empty(), "{name} was not caught");
    }
}
