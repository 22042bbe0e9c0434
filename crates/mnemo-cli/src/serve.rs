//! `mnemo serve`: the key-value server that speaks the Redis protocol, on a pool; and
//! `mnemo kv info`, its stats from a client's side.
//!
//! The server is `mnemo_kv`'s event loop driving the persistent keyspace on the calling
//! thread (`docs/design/kv-server.md`). This file adds what makes it a program: creating or
//! opening the pool, listening, the startup log line, signals, SHUTDOWN, and clear messages
//! when the pool is full, corrupt or in use.

use std::fmt;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use mnemo_heap::Heap;
use mnemo_kv::engine::{heap_options, EngineError, PersistentEngine};
use mnemo_kv::server::{Effect, Engine, EventLoop, LoopStats, Request, SessionConfig, Stopper};
use mnemo_pmem::{CreateOptions, OpenOptions, Pool};
use mnemo_resp::bytes::{Bytes, BytesMut};
use mnemo_resp::{encode_command, CommandId, Encoder, Protocol, Reply, ReplyDecoder};

use crate::size;

/// mnemo's port: Redis's 6379 with a 7, so both can run side by side.
pub const PORT_DEFAULT: u16 = 7379;
/// Layout name written into pools `mnemo serve` creates, and checked when it opens one.
pub(crate) const LAYOUT: &str = "mnemo-kv";
/// Growth limit of a new pool when --size-max is not given (address space only; the file
/// grows only as data needs it).
const SIZE_MAX_DEFAULT: u64 = 64 << 30;
/// At most one "pool full" warning per this interval: a full pool refuses every write.
const FULL_WARNING_INTERVAL: Duration = Duration::from_secs(10);
/// How long `mnemo kv info` waits to connect and for the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A password from the command line or environment; never printed.
#[derive(Clone)]
pub struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

pub(crate) fn secret(text: &str) -> Result<Secret, String> {
    Ok(Secret(text.to_string()))
}

impl Secret {
    /// The password, for the session's check; `None` if empty (no password).
    pub(crate) fn password(&self) -> Option<Bytes> {
        (!self.0.is_empty()).then(|| Bytes::from(self.0.clone().into_bytes()))
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on. The default accepts clients on this machine only; before
    /// opening the server to a network, set --requirepass.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// TCP port (mnemo's own default, so it runs beside a Redis on 6379).
    #[arg(long, default_value_t = PORT_DEFAULT)]
    pub port: u16,
    /// The pool file holding the data; created on first start (with its directory, mode
    /// 0700). Put it on /dev/shm to emulate persistent memory, on a DAX file system for
    /// real persistent memory, or on a disk (sync points then go to a write-ahead file beside it,
    /// POOL.wal: one fdatasync per group commit; MNEMO_WAL=0 for msync of the pool instead).
    #[arg(long, default_value = "mnemo-data/mnemo.pool")]
    pub pool: PathBuf,
    /// Initial size of a new pool: 256M, 1G, ... (binary units). Ignored when the pool
    /// exists.
    #[arg(long, default_value = "256M", value_parser = size::parse)]
    pub size: u64,
    /// Largest size the pool grows to when full; past it, writes get `-OOM` replies.
    /// [default: 64G for a new pool, else the maximum recorded in the pool]
    #[arg(long, value_parser = size::parse)]
    pub size_max: Option<u64>,
    /// Clients must AUTH with this password first. Prefer the environment variable, which
    /// `ps` does not show. Never logged.
    #[arg(long, env = "MNEMO_REQUIREPASS", hide_env_values = true, value_parser = secret)]
    pub requirepass: Option<Secret>,
    /// Numbered databases (SELECT 0 to N-1), as Redis's `databases`. A pool holding keys in
    /// a database past N is refused.
    #[arg(long, default_value_t = 16)]
    pub databases: usize,
    /// Run on virtual persistent memory: at most this many bytes of the pool stay in the
    /// persistent-memory file (--pool, then a file of this budget plus its page table), the
    /// rest goes to the swap file (--swap) and comes back on access. The pool's size
    /// (--size-max, default --size) and the budget are fixed when the pool is created; at
    /// most 64M. INFO persistence shows the share in persistent memory (mnemo_vpm_mrr).
    #[arg(long, value_parser = size::parse)]
    pub pm_budget: Option<u64>,
    /// Swap file of virtual persistent memory (with --pm-budget; put it on a disk).
    /// [default: the pool's path with .swap appended]
    #[arg(long)]
    pub swap: Option<PathBuf>,
    /// Let a batch that writes wait a moment for the clients just answered, so that one sync
    /// point covers them too. It waits only when commits wait for storage (an fdatasync)
    /// longer than those clients take to send again: for slow disks (a few ms per sync).
    /// On an SSD with ~0.1 ms syncs it measured no gain, so it is off by default. INFO
    /// clients shows the waits (mnemo_commit_gathers) and the estimates behind them.
    #[arg(long)]
    pub commit_gathering: bool,
    /// Microseconds the server polls its sockets before it sleeps when it runs out of
    /// requests (0: sleep at once). Many clients in flight then find it running: their
    /// sends need not wake it, and its CPU has not halted (on a VM, waking a halted CPU
    /// costs tens of microseconds). It spends at most this much CPU per wait for work.
    /// [default: 50; 0 in a cgroup with a CPU quota, where spinning would spend the quota]
    /// INFO clients counts the polls (mnemo_busy_polls) and those that found work.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub busy_poll_us: Option<u32>,
    #[command(flatten)]
    pub repl: crate::mirror::ReplArgs,
}

/// How the pool was found at start.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Start {
    Created,
    Clean,
    Recovered,
}

impl Start {
    fn name(self) -> &'static str {
        match self {
            Start::Created => "created",
            Start::Clean => "clean",
            Start::Recovered => "recovered after a crash",
        }
    }
}

/// `mnemo serve`.
pub fn run(args: &ServeArgs) -> ExitCode {
    let started = Instant::now();
    match serve(args, started) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            crate::report!("mnemo serve: {message}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: &ServeArgs, started: Instant) -> Result<(), String> {
    let start = crate::etcd::PrimaryStart {
        me: SocketAddr::new(args.bind, args.port),
        pool: &args.pool,
        repl: &args.repl,
    };
    // Under etcd a deposed node rejoins as a mirror here (its pool is not opened); the pool's
    // checks come before this node claims anything in the configuration.
    let control = crate::etcd::check_role(&start)?;
    args.repl.guard(&args.pool, args.repl.replicates())?;
    let membership = crate::etcd::start_primary(&start, control)?;
    let repl = args.repl.policy(membership.as_ref())?;
    if let (Some(m), Some(switch)) = (&membership, repl.switch()) {
        crate::etcd::take_joining_mirrors(
            Arc::clone(m),
            Arc::clone(switch),
            &args.repl,
            &args.pool,
        )?;
    }
    let (heap, start, vpm) = match args.pm_budget {
        Some(budget) => {
            let (heap, start, stats) = crate::vpm::open_heap(args, budget, repl.policy())?;
            (heap, start, Some(stats))
        }
        None => {
            let (heap, start) = open_heap(args, repl.policy())?;
            (heap, start, None)
        }
    };
    let address = SocketAddr::new(args.bind, args.port);
    let listener = TcpListener::bind(address).map_err(|e| {
        format!("cannot listen on {address}: {e} (is another server using the port? choose another with --port)")
    })?;
    let address = listener.local_addr().unwrap_or(address);
    let mut engine = PersistentEngine::open_with_databases(&heap, args.databases).map_err(|e| {
        format!(
            "{}: cannot open the keyspace: {e}; run `mnemo pool check {}`, restore the pool from a copy, or start with another --pool",
            args.pool.display(),
            args.pool.display()
        )
    })?;
    let keys = key_count(&mut engine);
    let password = args
        .requirepass
        .as_ref()
        .filter(|p| !p.0.is_empty())
        .map(|p| Bytes::from(p.0.clone().into_bytes()));
    let config = SessionConfig {
        password: password.clone(),
        databases: args.databases,
        ..SessionConfig::default()
    };
    if !address.ip().is_loopback() && password.is_none() {
        tracing::warn!(
            address = %address,
            "listening beyond this machine without --requirepass: anyone who reaches this address can read and change the data"
        );
    }
    if let Some(mutant) = mnemo_kv::server::mutant::from_env() {
        tracing::error!(
            mutant = mutant.name(),
            "DELIBERATELY BROKEN test build: acknowledged writes can be lost (unset {})",
            mnemo_kv::server::mutant::ENV
        );
    }
    let (event_loop, stopper) =
        EventLoop::new(listener, config).map_err(|e| format!("event loop: {e}"))?;
    // Deferred acknowledgements (a write-ahead pool mapped copy-on-write: replies held in
    // the loop until durable while the next batches run): off unless MNEMO_DEFER_ACKS=1;
    // measured no faster on this 2-CPU machine (docs/design/disk-durability.md).
    let mut event_loop = event_loop;
    event_loop.set_defer_acks(std::env::var("MNEMO_DEFER_ACKS").is_ok_and(|v| v.trim() == "1"));
    event_loop.set_commit_gathering(args.commit_gathering);
    event_loop.set_busy_poll(busy_poll(args.busy_poll_us));
    engine.set_info_hook(info_hook(
        &heap,
        address,
        start,
        event_loop.stats(),
        repl.clone(),
        vpm,
    ));
    let signals = Signals::watch(stopper.clone())?;

    let pool = heap.pool();
    let media = pool.media_info();
    tracing::info!(
        address = %address,
        pool = %args.pool.display(),
        pool_size = pool.size(),
        start = start.name(),
        media = ?media.kind,
        durability = ?media.durability,
        sync_policy = %pool.policy_name(),
        flush = media.flush.name(),
        dirty_tracking = %tracking_name(pool),
        keys,
        auth = if password.is_some() { "requirepass" } else { "none" },
        replication = %repl.mirror().map_or_else(
            || "local".to_string(),
            |p| format!("{} to {} (epoch {})", p.config().mode.name(), p.config().addr, p.config().epoch),
        ),
        startup_ms = format!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
        "mnemo serve ready: every acknowledged write is durable"
    );

    let mut serving = Serving {
        engine,
        stopper,
        full_warned: None,
        rollbacks: 0,
    };
    // An idle pool makes no sync point, yet a mirror that comes back (or joins) needs one to
    // get its full copy: a thread makes an empty one whenever the replication wants it.
    repl.serving();
    let kick_stop = std::sync::atomic::AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        if repl.policy().is_some() {
            let (pool, repl, stop) = (heap.pool(), &repl, &kick_stop);
            scope.spawn(move || kick_sync_points(pool, repl, stop));
        }
        let result = event_loop.run(&mut serving);
        kick_stop.store(true, Ordering::Relaxed);
        result
    });
    signals.close();
    let stats = serving.engine.stats().clone();
    drop(serving);
    result.map_err(|e| format!("server loop failed: {e}"))?;
    heap.close();
    drop(heap);
    args.repl.closed_cleanly(&args.pool);
    tracing::info!(
        commands = stats.commands,
        commits = stats.commits,
        "pool closed cleanly; mnemo serve stopped"
    );
    Ok(())
}

/// How often an idle primary checks whether its replication wants a sync point.
const KICK_EVERY: Duration = Duration::from_millis(50);

/// The event loop's busy-poll window: as asked, or by default
/// [`BUSY_POLL_US_DEFAULT`] where no cgroup caps this process's CPU and none where one does.
fn busy_poll(asked: Option<u32>) -> Duration {
    let us = asked.unwrap_or_else(|| {
        if mnemo_pmem::awake::cpu_quota_here() {
            tracing::debug!("a cgroup caps this process's CPU: the server sleeps at once");
            0
        } else {
            BUSY_POLL_US_DEFAULT
        }
    });
    Duration::from_micros(u64::from(us))
}

/// The default busy-poll window, in microseconds. Fifty clients on loopback, on a 2-vCPU VM
/// whose idle CPUs halt, come back to an idle server within it; windows of 20, 50 and
/// 100 us measured alike there. One client's requests came 37 us apart, the server's own
/// work included (`docs/design/kv-server.md`, "Polling before sleeping").
const BUSY_POLL_US_DEFAULT: u32 = 50;

/// Until `stop`: an empty sync point whenever the replication wants one (a mirror to bring
/// up to date with a full copy, a new mirror's policy to install) while no write makes one.
fn kick_sync_points(
    pool: &Pool,
    repl: &crate::mirror::Replication,
    stop: &std::sync::atomic::AtomicBool,
) {
    use mnemo_pmem::{SyncKind, SyncPoint};
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(KICK_EVERY);
        if repl.wants_sync_point() {
            if let Err(e) = pool.sync(&SyncPoint::new(SyncKind::Data, &[])) {
                tracing::debug!(error = %e, "an empty sync point for the mirror failed");
            }
        }
    }
}

/// Creates the pool and its heap on first start, else opens (and if needed recovers) them.
fn open_heap(
    args: &ServeArgs,
    policy: Option<Arc<dyn mnemo_pmem::SyncPolicy>>,
) -> Result<(Heap, Start), String> {
    let path = &args.pool;
    if !path.exists() {
        if let Some(created) = create_heap(args, policy.clone())? {
            return Ok((created, Start::Created));
        }
    }
    let options = OpenOptions {
        layout: Some(LAYOUT.to_string()),
        size_max: args.size_max,
        policy,
    };
    let pool = Pool::open(path, &options).map_err(|e| e.to_string())?;
    let start = if pool.was_clean() {
        Start::Clean
    } else {
        Start::Recovered
    };
    match Heap::open_with(pool, &heap_options()) {
        Ok(heap) => Ok((heap, start)),
        // A first start stopped between creating the file and formatting its heap: nothing
        // was ever stored, so formatting now loses nothing.
        Err(mnemo_heap::Error::NotAHeap(_)) => {
            tracing::warn!(pool = %path.display(), "the pool holds no heap yet (an interrupted first start): formatting it");
            let pool = Pool::open(path, &options).map_err(|e| e.to_string())?;
            let heap = Heap::create(pool, &heap_options())
                .map_err(|e| format!("{}: formatting the heap failed: {e}", path.display()))?;
            Ok((heap, Start::Created))
        }
        Err(e) => Err(format!(
            "{}: {e}; run `mnemo pool check {}`, restore the pool from a copy, or start with another --pool",
            path.display(),
            path.display()
        )),
    }
}

/// A new pool with an empty heap; `None` if another process created the file meanwhile.
fn create_heap(
    args: &ServeArgs,
    policy: Option<Arc<dyn mnemo_pmem::SyncPolicy>>,
) -> Result<Option<Heap>, String> {
    let path = &args.pool;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
        }
    }
    let mut options = CreateOptions::new(args.size, LAYOUT);
    options.size_max = args.size_max.unwrap_or(SIZE_MAX_DEFAULT).max(args.size);
    options.policy = policy;
    let pool = match Pool::create(path, &options) {
        Ok(pool) => pool,
        Err(mnemo_pmem::Error::AlreadyExists { .. }) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    tracing::info!(pool = %path.display(), size = %size::human(pool.size()), size_max = %size::human(options.size_max), "created the pool");
    Heap::create(pool, &heap_options())
        .map(Some)
        .map_err(|e| format!("{}: formatting the heap failed: {e}", path.display()))
}

/// Keys in the keyspace (DBSIZE: reads one header, no scan).
fn key_count(engine: &mut PersistentEngine<'_>) -> i64 {
    let (reply, _) = engine.execute_args(&[Bytes::from_static(b"DBSIZE")], Protocol::Resp2);
    engine.finish_read_only();
    match reply {
        Reply::Integer(keys) => keys,
        _ => -1,
    }
}

/// The pool's dirty tracking: "off", or the mode and how raw stores are tracked.
fn tracking_name(pool: &Pool) -> String {
    let tracking = pool.tracking();
    let mode = format!("{:?}", tracking.mode).to_ascii_lowercase();
    if mode == "off" {
        mode
    } else {
        format!("{mode} ({})", tracking.raw.name())
    }
}

/// Lines the server adds to INFO: where it listens, its clients and what it buffers for
/// them, and the pool's medium.
fn info_hook<'h>(
    heap: &'h Heap,
    address: SocketAddr,
    start: Start,
    clients: Arc<LoopStats>,
    repl: crate::mirror::Replication,
    vpm: Option<mnemo_vpm::StatsHandle>,
) -> mnemo_kv::engine::InfoHook<'h> {
    Box::new(move |section: &str, out: &mut String| {
        use std::fmt::Write as _;
        let pool = heap.pool();
        match section {
            "replication" => {
                // The engine prints Redis's fields (role, connected_slaves: 0, no Redis
                // replicas); the mirror's are mnemo's own.
                match &repl.mirror() {
                    None => {
                        let _ = write!(out, "mnemo_repl_mode:local\r\n");
                    }
                    Some(p) => {
                        let s = p.stats();
                        let c = p.config();
                        let _ = write!(
                            out,
                            "mnemo_repl_mode:{}\r\nmnemo_repl_mirror:{}\r\nmnemo_repl_epoch:{}\r\nmnemo_repl_mirror_in_sync:{}\r\nmnemo_repl_records_shipped:{}\r\nmnemo_repl_bytes_shipped:{}\r\nmnemo_repl_last_id:{}\r\nmnemo_repl_acked_id:{}\r\nmnemo_repl_lag_records:{}\r\nmnemo_repl_full_copies:{}\r\nmnemo_repl_link_losses:{}\r\nmnemo_repl_local_only_sync_points:{}\r\nmnemo_repl_heartbeats:{}\r\nmnemo_repl_last_heartbeat_ms:{}\r\nmnemo_repl_connections:{}\r\n",
                            c.mode.name(),
                            c.addr,
                            c.epoch,
                            u8::from(s.in_sync),
                            s.shipped,
                            s.bytes,
                            s.last_id,
                            s.acked,
                            s.last_id.saturating_sub(s.acked),
                            s.copies,
                            s.link_losses,
                            s.local_only,
                            s.heartbeats,
                            // -1: none answered yet (Redis's convention for "never").
                            s.heartbeat_age_ms.map_or(-1, |ms| ms as i64),
                            c.connections,
                        );
                        let params = c.link_params();
                        let view = p.backups();
                        let _ = write!(
                            out,
                            "mnemo_repl_backup_stall:{}\r\nmnemo_repl_backup_stall_ms:{}\r\nmnemo_repl_backups:{}\r\nmnemo_repl_backups_status_ms:{}\r\n",
                            params.backup_stall,
                            params.backup_stall_ms,
                            view.backups.len(),
                            view.age_ms.map_or(-1, |ms| ms as i64),
                        );
                        // As the mirror last said (one Status every 100 ms at most, after
                        // an acknowledgement or a heartbeat), Redis's slaveN style.
                        for (i, b) in view.backups.iter().enumerate() {
                            let _ = write!(
                                out,
                                "mnemo_repl_backup{i}:addr={},connected={},acked_id={},lag_records={},lag_bytes={},copies={},stalls={},overflows={},bulk_catchups={}\r\n",
                                b.addr,
                                u8::from(b.connected),
                                b.acked,
                                b.lag_records,
                                b.lag_bytes,
                                b.copies,
                                b.stalls,
                                b.overflows,
                                b.bulk_catchups,
                            );
                        }
                    }
                }
            }
            "server" => {
                // The engine reports the rest (uptime included).
                let _ = write!(
                    out,
                    "tcp_port:{}\r\nexecutable:mnemo serve\r\n",
                    address.port(),
                );
            }
            "persistence" => {
                let _ = write!(out, "mnemo_sync_policy:{}\r\n", pool.policy_name());
                if let Some(w) = pool.write_ahead() {
                    let _ = write!(
                        out,
                        "mnemo_wal_records:{}\r\nmnemo_wal_bytes:{}\r\nmnemo_wal_fdatasyncs:{}\r\nmnemo_wal_last_fdatasync_us:{}\r\nmnemo_wal_pending_bytes:{}\r\nmnemo_wal_checkpoints:{}\r\nmnemo_wal_last_checkpoint_us:{}\r\nmnemo_wal_replayed_at_open:{}\r\nmnemo_wal_private_mapping:{}\r\nmnemo_wal_deferred_acks:{}\r\n",
                        w.records,
                        w.bytes,
                        w.fdatasyncs,
                        w.last_fdatasync_ns / 1000,
                        w.pending_bytes,
                        w.checkpoints,
                        w.last_checkpoint_ns / 1000,
                        w.replayed,
                        u8::from(w.private_mapping),
                        u8::from(w.deferred_acks),
                    );
                }
                if let Some(vpm) = &vpm {
                    crate::vpm::info(&vpm.stats(), out);
                }
            }
            "clients" => {
                let get = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
                let _ = write!(
                    out,
                    "connected_clients:{}\r\nmnemo_output_buffer_bytes:{}\r\nmnemo_output_buffer_peak:{}\r\nmnemo_output_buffer_limit:{}\r\nmnemo_output_limit_pauses:{}\r\n",
                    get(&clients.connected_clients),
                    get(&clients.output_buffer_bytes),
                    get(&clients.output_buffer_peak),
                    get(&clients.output_buffer_limit),
                    get(&clients.output_limit_pauses),
                );
                let _ = write!(
                    out,
                    "mnemo_commit_gathers:{}\r\nmnemo_commit_gather_timeouts:{}\r\nmnemo_commit_wait_us:{}\r\nmnemo_client_turnaround_us:{}\r\n",
                    get(&clients.commit_gathers),
                    get(&clients.commit_gather_timeouts),
                    get(&clients.commit_estimate_ns) / 1000,
                    get(&clients.turnaround_estimate_ns) / 1000,
                );
                let _ = write!(
                    out,
                    "mnemo_busy_polls:{}\r\nmnemo_busy_poll_hits:{}\r\n",
                    get(&clients.busy_polls),
                    get(&clients.busy_poll_hits),
                );
            }
            "pool" => {
                let media = pool.media_info();
                let media_kind = format!("{:?}", media.kind).to_ascii_lowercase();
                let durability = format!("{:?}", media.durability).to_ascii_lowercase();
                let _ = write!(
                    out,
                    "pool_size_max:{}\r\npool_media:{media_kind}\r\npool_durability:{durability}\r\npool_flush:{}\r\npool_dirty_tracking:{}\r\npool_start:{}\r\n",
                    pool.header().size_max,
                    media.flush.name(),
                    tracking_name(pool),
                    start.name(),
                );
            }
            _ => {}
        }
    })
}

/// The engine as the loop runs it, plus what the program adds: SHUTDOWN stops the loop,
/// failures are logged.
struct Serving<'h> {
    engine: PersistentEngine<'h>,
    stopper: Stopper,
    full_warned: Option<Instant>,
    rollbacks: u64,
}

impl Engine for Serving<'_> {
    type Error = EngineError;

    fn begin(&mut self) {
        self.engine.begin();
    }

    fn prefetch(&mut self, request: &Request, stage: mnemo_kv::server::Prefetch) {
        self.engine.prefetch(request, stage);
    }

    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        self.execute_hosted(request, reply, &mut mnemo_kv::server::NoHost)
    }

    /// The host goes through to the engine: a running script reaches the loop (BUSY, SCRIPT
    /// KILL, PUBLISH) as under the library's own server.
    fn execute_hosted(
        &mut self,
        request: &Request,
        reply: &mut Encoder<'_>,
        host: &mut dyn mnemo_kv::server::Host,
    ) -> Effect {
        let effect = self.engine.execute_hosted(request, reply, host);
        if effect.close && request.spec.id == CommandId::Shutdown {
            tracing::info!(
                client = request.session,
                "SHUTDOWN: stopping after this batch"
            );
            if let Err(e) = self.stopper.stop() {
                tracing::error!("cannot wake the loop to stop it: {e}");
            }
        }
        let rollbacks = self.engine.stats().rollbacks;
        if rollbacks > self.rollbacks {
            self.rollbacks = rollbacks;
            self.warn_refused();
        }
        effect
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        self.engine.commit().inspect_err(|e| {
            tracing::error!(
                "a batch failed to commit, its clients are disconnected without a reply: {e}"
            );
        })
    }

    fn finish_read_only(&mut self) {
        self.engine.finish_read_only();
    }

    fn disconnected(&mut self, session: u64) {
        self.engine.disconnected(session);
    }

    fn defer_acks(&mut self, notify: std::sync::Arc<dyn Fn() + Send + Sync>) -> bool {
        self.engine.defer_acks(notify)
    }

    fn ack_marks(&self) -> Option<Result<(u64, u64), String>> {
        self.engine.ack_marks()
    }
}

impl Serving<'_> {
    /// A command failed inside the pool and was undone; when the pool cannot grow, that is a
    /// full pool and clients get `-OOM`.
    fn warn_refused(&mut self) {
        if self
            .full_warned
            .is_some_and(|at| at.elapsed() < FULL_WARNING_INTERVAL)
        {
            return;
        }
        self.full_warned = Some(Instant::now());
        let heap = self.engine.heap();
        let pool = heap.pool();
        let stats = heap.stats();
        tracing::warn!(
            pool = %pool.name().display(),
            pool_size = pool.size(),
            pool_size_max = pool.header().size_max,
            used = stats.used_bytes,
            free = stats.free_bytes,
            rollbacks = self.rollbacks,
            "a command failed inside the pool and was undone; if the pool is full (size at its maximum) writes get -OOM: delete keys, or restart with a larger --size-max"
        );
    }
}

/// SIGTERM and SIGINT stop the loop through its waker, from a thread of their own.
struct Signals {
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<()>,
}

impl Signals {
    fn watch(stopper: Stopper) -> Result<Signals, String> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
            .map_err(|e| format!("cannot install signal handlers: {e}"))?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name("mnemo-signals".into())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    let name = if signal == SIGTERM {
                        "SIGTERM"
                    } else {
                        "SIGINT"
                    };
                    tracing::info!(
                        signal = name,
                        "stopping: the batch in progress completes, then the pool is closed"
                    );
                    if let Err(e) = stopper.stop() {
                        tracing::error!("cannot wake the loop to stop it: {e}");
                    }
                }
            })
            .map_err(|e| format!("cannot start the signal thread: {e}"))?;
        Ok(Signals { handle, thread })
    }

    fn close(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}

/// `mnemo kv ...`: talk to a running `mnemo serve`.
#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Print a running server's INFO: pool, persistence, memory, keyspace, stats.
    ///
    /// Example: mnemo kv info pool persistence --port 7379
    Info(InfoArgs),
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Sections to print (server, memory, persistence, stats, keyspace, pool); default: all.
    pub sections: Vec<String>,
    /// The server's host.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The server's port.
    #[arg(long, default_value_t = PORT_DEFAULT)]
    pub port: u16,
    /// Password, when the server has --requirepass (prefer the environment variable).
    #[arg(long, env = "MNEMO_REQUIREPASS", hide_env_values = true, value_parser = secret)]
    pub pass: Option<Secret>,
    /// Print `{"section": {"field": value}}` as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `mnemo kv`.
pub fn run_kv(command: &KvCommand) -> ExitCode {
    let KvCommand::Info(args) = command;
    match info(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            crate::report!("mnemo kv info: {message}");
            ExitCode::FAILURE
        }
    }
}

fn info(args: &InfoArgs) -> Result<(), String> {
    let target = format!("{}:{}", args.host, args.port);
    let mut client = Client::connect(&target)?;
    if let Some(pass) = args.pass.as_ref().filter(|p| !p.0.is_empty()) {
        if let Reply::Error(text) = client.call(&[b"AUTH".as_slice(), pass.0.as_bytes()])? {
            return Err(String::from_utf8_lossy(&text).into_owned());
        }
    }
    let mut request: Vec<&[u8]> = vec![b"INFO"];
    request.extend(args.sections.iter().map(|s| s.as_bytes()));
    let text = match client.call(&request)? {
        Reply::Bulk(text) | Reply::Verbatim { text, .. } => {
            String::from_utf8_lossy(&text).into_owned()
        }
        Reply::Error(text) => return Err(String::from_utf8_lossy(&text).into_owned()),
        other => return Err(format!("unexpected reply to INFO: {other:?}")),
    };
    if args.json {
        println!("{:#}", info_json(&text));
    } else {
        for line in text.lines() {
            println!("{line}");
        }
    }
    Ok(())
}

/// INFO text as `{"section": {"field": value}}`; numbers stay numbers.
fn info_json(text: &str) -> serde_json::Value {
    let mut sections = serde_json::Map::new();
    let mut current = String::from("default");
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(title) = line.strip_prefix('#') {
            current = title.trim().to_ascii_lowercase();
            continue;
        }
        let Some((field, value)) = line.split_once(':') else {
            continue;
        };
        let value = value
            .parse::<i64>()
            .map(serde_json::Value::from)
            .or_else(|_| value.parse::<f64>().map(serde_json::Value::from))
            .unwrap_or_else(|_| serde_json::Value::from(value));
        if let serde_json::Value::Object(fields) = sections
            .entry(current.clone())
            .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()))
        {
            fields.insert(field.to_string(), value);
        }
    }
    serde_json::Value::Object(sections)
}

/// A minimal blocking RESP2 client.
struct Client {
    stream: TcpStream,
    decoder: ReplyDecoder,
}

impl Client {
    fn connect(target: &str) -> Result<Client, String> {
        let address = target
            .to_socket_addrs()
            .map_err(|e| format!("{target}: {e}"))?
            .next()
            .ok_or_else(|| format!("{target}: no address"))?;
        let stream = TcpStream::connect_timeout(&address, CLIENT_TIMEOUT).map_err(|e| {
            format!(
                "cannot connect to {target}: {e} (is `mnemo serve` running there? --host/--port)"
            )
        })?;
        stream
            .set_read_timeout(Some(CLIENT_TIMEOUT))
            .map_err(|e| e.to_string())?;
        Ok(Client {
            stream,
            decoder: ReplyDecoder::new(),
        })
    }

    fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let mut out = BytesMut::new();
        encode_command(args, &mut out);
        self.stream
            .write_all(&out)
            .map_err(|e| format!("send: {e}"))?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match self.decoder.next_reply() {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => return Err(format!("bad reply: {e:?}")),
            }
            let read = self
                .stream
                .read(&mut chunk)
                .map_err(|e| format!("receive: {e}"))?;
            if read == 0 {
                return Err("the server closed the connection".into());
            }
            self.decoder.feed(chunk.get(..read).unwrap_or_default());
        }
    }
}
