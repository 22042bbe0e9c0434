//! `mnemo mirror`: the replication mirror (serve, status, promote), and the flags that make
//! `mnemo serve` a replicating primary. The protocol and the mirror's storage are
//! `mnemo_repl`'s (`docs/design/replication.md`).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use mnemo_repl::{
    Mirror, MirrorConfig, MirrorOptions, MirrorPolicy, MirrorStore, Mode, Secret, WithoutMirror,
};

use crate::size;

/// The mirror's default port (mnemo serve's 7379, plus one).
pub const MIRROR_PORT_DEFAULT: u16 = 7380;

#[derive(Debug, Subcommand)]
pub enum MirrorCommand {
    /// Receive a primary's sync points and keep a durable image of its pool.
    ///
    /// Each sync point is made durable in the mirror's log before it is acknowledged, then
    /// applied to DIR/image, a byte-for-byte image of the primary's pool. Start the primary
    /// with `mnemo serve --mirror HOST:PORT --repl-secret-file FILE`.
    ///
    /// Example: mnemo mirror serve --dir /dev/shm/mirror --secret-file repl.secret
    Serve(Box<MirrorServeArgs>),
    /// Show what a mirror directory holds (epoch, last checkpointed record, whether its copy
    /// is whole), also while its mirror runs. A primary's side: `mnemo kv info replication`.
    Status(MirrorDirArgs),
    /// Make a stopped mirror's image a primary's pool: replay its log, raise its epoch (the
    /// old primary is refused from now on), and print the pool to serve.
    ///
    /// Example: mnemo mirror promote --dir /dev/shm/mirror, then
    /// mnemo serve --pool /dev/shm/mirror/image
    Promote(MirrorDirArgs),
}

#[derive(Debug, Args)]
pub struct MirrorServeArgs {
    /// The mirror's directory (image, log, state); created on first start, mode 0700.
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to listen on (this machine only unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// TCP port.
    #[arg(long, default_value_t = MIRROR_PORT_DEFAULT)]
    pub port: u16,
    /// File holding the secret shared with the primary (at least 16 bytes; mode 0600).
    /// Make one with: head -c 32 /dev/urandom | base64 > repl.secret; chmod 600 repl.secret
    #[arg(long, env = "MNEMO_REPL_SECRET_FILE")]
    pub secret_file: PathBuf,
    /// Size of the log that holds records until they are checkpointed into the image
    /// (created on first start). A sync point larger than half of it is refused.
    #[arg(long, default_value = "64M", value_parser = size::parse)]
    pub log_size: u64,
    /// Checkpoint the image (make it durable, empty the log) after this many records.
    #[arg(long, default_value_t = 1024)]
    pub checkpoint_records: u64,
    /// Keep the image (the data area) in FILE, an ordinary file on a disk, with DIR/image a
    /// symbolic link to it, while the log stays in DIR (Mojim's syncdisk: a primary started
    /// with --repl-mode syncdisk is refused by a mirror whose image is in memory). The image
    /// is then made durable by msync at checkpoints.
    #[arg(long, value_name = "FILE")]
    pub disk_image: Option<PathBuf>,
    /// Forward every record, in the background, to the backup at HOST:PORT (`mnemo backup
    /// serve`, same secret); repeat for several backups.
    #[arg(long, value_name = "HOST:PORT")]
    pub backup: Vec<String>,
    /// A backup further behind than this many bytes of records is not queued for: it
    /// catches up later with a full copy.
    #[arg(long, default_value = "64M", value_parser = size::parse)]
    pub backup_lag_max: u64,
    /// For primaries that tell no threshold (protocol version 1; a primary of this version
    /// tells its own, --repl-backup-stall): hold each acknowledgement to the primary while a
    /// connected backup has more than this many bytes of records unacknowledged (0: never),
    /// at most --backup-stall-ms, after which that backup catches up with a full copy.
    #[arg(long, default_value = "0", value_parser = size::parse)]
    pub backup_stall: u64,
    /// Longest a lagging backup holds the primary tier (the waiting primary gets a heartbeat
    /// every 500 ms meanwhile), for primaries that tell none.
    #[arg(long, default_value_t = 1000)]
    pub backup_stall_ms: u64,
    /// Answer the read commands of `mnemo serve` (GET, MGET, HGETALL, SCAN, INFO, ...) on
    /// this TCP port (at --bind) from the image; writes get Redis's replica error
    /// (-READONLY). Each command sees the image after one whole record, and in sync modes
    /// every write the primary acknowledged before the command was sent.
    #[arg(long, value_name = "PORT")]
    pub read_port: Option<u16>,
    /// Numbered databases on the read port (as the primary's --databases).
    #[arg(long, default_value_t = 16)]
    pub read_databases: usize,
    /// Clients of the read port must AUTH with this password first (prefer the environment
    /// variable, which `ps` does not show). Never logged.
    #[arg(long, env = "MNEMO_READ_REQUIREPASS", hide_env_values = true, value_parser = crate::serve::secret)]
    pub read_requirepass: Option<crate::serve::Secret>,
    /// With --etcd: this mirror's name in the cluster's configuration, as the primary's
    /// --mirror spells it. [default: BIND:PORT]
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// With --etcd: the port `mnemo serve` listens on (at --bind) once this mirror takes over.
    #[arg(long, default_value_t = crate::serve::PORT_DEFAULT)]
    pub promote_port: u16,
    /// With --etcd: the mode the promoted primary replicates in once a mirror joins it (a
    /// backup moving up keeps the cluster's mode).
    #[arg(long, default_value = "syncflush", value_parser = parse_mode)]
    pub repl_mode: Mode,
    #[command(flatten)]
    pub etcd: crate::etcd::EtcdArgs,
}

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Receive records from a mirror (`mnemo mirror serve --backup HOST:PORT`) and keep a
    /// consistent image of the primary's pool, some records behind. The same storage and
    /// flags as `mnemo mirror serve`; `mnemo mirror promote --dir DIR` turns it into a pool.
    ///
    /// Example: mnemo backup serve --dir /data/backup --port 7381 --secret-file repl.secret
    Serve(MirrorServeArgs),
}

#[derive(Debug, Args)]
pub struct MirrorDirArgs {
    /// The mirror's directory.
    #[arg(long)]
    pub dir: PathBuf,
}

/// `mnemo serve`'s replication flags.
#[derive(Debug, Args)]
pub struct ReplArgs {
    /// Replicate every sync point to the mirror at HOST:PORT (`mnemo mirror serve`).
    #[arg(long, value_name = "HOST:PORT")]
    pub mirror: Option<String>,
    /// How: syncflush (wait for the mirror and flush locally meanwhile; the default),
    /// sync (wait for the mirror, no local flush: after a crash of this machine, restore the
    /// pool from the mirror with `mnemo mirror promote`), syncdisk (sync, the mirror keeping
    /// its image in a disk file: start it with --disk-image), async (flush locally, do not
    /// wait: the mirror may lag), syncsec (sync, with backups behind the mirror, started with
    /// --backup: past --repl-backup-stall bytes a lagging backup holds the primary back),
    /// syncseceth (syncsec for backups behind a slow link: a 40 MiB threshold, and the
    /// backups' full copies sent from a snapshot), local (no mirror).
    #[arg(long, default_value = "syncflush", value_parser = parse_mode)]
    pub repl_mode: Mode,
    /// syncsec, syncseceth: told to the mirror, which holds its acknowledgements while a
    /// backup has more than this many bytes of records unacknowledged (Mojim's
    /// SECONDARY_TIER_THRESH; 0: never). [default: 4M for syncsec, 40M for syncseceth]
    #[arg(long, value_parser = size::parse)]
    pub repl_backup_stall: Option<u64>,
    /// syncsec, syncseceth: the longest such hold (the mirror tells the waiting primary it
    /// is alive meanwhile; at most 60000), after which the lagging backup catches up in
    /// bulk. [default: 1000 for syncsec, 10000 for syncseceth]
    #[arg(long)]
    pub repl_backup_stall_ms: Option<u64>,
    /// Connections to the mirror (Mojim's queues, 1 to 16): concurrent sync points go out on
    /// different connections at once, the mirror logging them in the order of their ids.
    /// This server makes one sync point at a time, so more than 1 helps it little
    /// (measurements: bench/README.md, "Connections per link").
    #[arg(long, default_value_t = mnemo_repl::policy::CONNECTIONS_DEFAULT, value_parser = parse_connections)]
    pub repl_connections: usize,
    /// File holding the secret shared with the mirror (mode 0600).
    #[arg(long, env = "MNEMO_REPL_SECRET_FILE")]
    pub repl_secret_file: Option<PathBuf>,
    /// This primary's epoch; a mirror promoted since (which raised its epoch) refuses it.
    #[arg(long, default_value_t = 1)]
    pub repl_epoch: u64,
    /// Start on a pool that ran in sync mode and did not close cleanly. Only when the
    /// machine stayed up (the process was killed): after a power cut or a machine crash its
    /// own image may lack what only the mirror received; serve the promoted mirror instead.
    #[arg(long)]
    pub repl_trust_local: bool,
    /// With --etcd: if another node was made primary while this one was away, rejoin as its
    /// mirror instead of refusing to start: this process becomes `mnemo mirror serve --dir
    /// POOL.mirror --port PORT` (the current primary takes it as mirror and sends a full
    /// copy), and it takes over again when that primary fails.
    #[arg(long, value_name = "PORT")]
    pub rejoin_port: Option<u16>,
    /// When the mirror is lost: record (go on durably here, after recording in etcd that the
    /// mirror is out of sync, so that it is not promoted), or block (acknowledge nothing
    /// until the mirror is back).
    #[arg(long, default_value = "record", value_parser = parse_without_mirror)]
    pub repl_without_mirror: WithoutMirror,
    #[command(flatten)]
    pub etcd: crate::etcd::EtcdArgs,
}

fn parse_connections(text: &str) -> Result<usize, String> {
    let max = mnemo_repl::policy::CONNECTIONS_MAX;
    match text.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("{text:?}: a number of connections from 1 to {max}")),
    }
}

fn parse_without_mirror(text: &str) -> Result<WithoutMirror, String> {
    match text {
        "record" => Ok(WithoutMirror::Record),
        "block" => Ok(WithoutMirror::Block),
        _ => Err(format!("{text:?}: use record or block")),
    }
}

/// Mark `pool` as running in sync mode (its own image is not flushed at sync points), before
/// any sync point skips the local flush.
pub fn mark_sync_mode(pool: &Path, mode: &str) -> Result<(), String> {
    use std::io::Write as _;
    let marker = sync_marker(pool);
    if let Some(parent) = pool.parent().filter(|d| !d.as_os_str().is_empty()) {
        make_dir(parent)?;
    }
    let mut f = std::fs::File::create(&marker).map_err(|e| format!("{}: {e}", marker.display()))?;
    // The mark must survive a power cut (that is when it matters): its bytes, then its
    // directory entry (a new name is durable once its directory is synced).
    let dir = pool
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    f.write_all(format!("mnemo: this pool runs with --repl-mode {mode}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::File::open(dir)?.sync_all())
        .map_err(|e| format!("{}: {e}", marker.display()))
}

/// The file beside a pool that says it runs (or ran) in sync mode, until a clean close.
pub fn sync_marker(pool: &Path) -> PathBuf {
    let mut name = pool.as_os_str().to_owned();
    name.push(".repl-sync");
    PathBuf::from(name)
}

impl ReplArgs {
    /// Before the pool opens: refuse a pool that ran in sync mode and did not close cleanly
    /// (unless trusted), and mark the pool if this run is in sync mode.
    ///
    /// A pool with a write-ahead file (`POOL.wal`: it was served on a disk without
    /// replication) that did not close cleanly is refused when `replicated`: a replicating
    /// policy does not replay that file, and the writes its records hold would be lost.
    pub fn guard(&self, pool: &Path, replicated: bool) -> Result<(), String> {
        let clean = || {
            mnemo_pmem::inspect::inspect(pool)
                .ok()
                .and_then(|i| i.header)
                .is_some_and(|h| h.clean_shutdown)
        };
        let mut wal = pool.as_os_str().to_owned();
        wal.push(".wal");
        if replicated && Path::new(&wal).exists() && pool.exists() && !clean() {
            return Err(format!(
                "{} did not close cleanly and has a write-ahead file ({}) that replication would not replay: start it once without --mirror and --etcd and stop it cleanly (its records are then in the pool), then with them",
                pool.display(),
                Path::new(&wal).display()
            ));
        }
        let marker = sync_marker(pool);
        if marker.exists() && pool.exists() && !self.repl_trust_local && !clean() {
            return Err(format!(
                "{} ran in a sync mode (--repl-mode sync, syncdisk, syncsec or syncseceth) and stopped without a clean close: its own image may lack writes only the mirror received (these modes do not flush locally). The mirror holds every acknowledged write: stop it, run `mnemo mirror promote --dir DIR` and serve DIR/image. If only this process was killed and the machine stayed up, start again with --repl-trust-local.",
                pool.display()
            ));
        }
        if self.mirror.is_some() && !self.repl_mode.flushes_locally() {
            mark_sync_mode(pool, self.repl_mode.name())?;
        }
        Ok(())
    }

    /// Whether the pool's policy will be a replicating one (a mirror, or etcd's switch).
    pub fn replicates(&self) -> bool {
        self.etcd.enabled() || (self.mirror.is_some() && self.repl_mode != Mode::Local)
    }

    /// After a clean close (the policy flushed the whole pool): the mark goes.
    pub fn closed_cleanly(&self, pool: &Path) {
        let _ = std::fs::remove_file(sync_marker(pool));
    }
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    Mode::parse(text).ok_or_else(|| {
        format!("unknown replication mode {text:?}: use local, async, sync, syncflush, syncdisk, syncsec or syncseceth")
    })
}

/// How `mnemo serve` replicates: a fixed mirror (`--mirror` without etcd), a switch whose
/// mirror can change (under etcd), or nothing.
#[derive(Debug, Clone, Default)]
pub struct Replication {
    fixed: Option<Arc<MirrorPolicy>>,
    switch: Option<Arc<mnemo_repl_etcd::SwitchPolicy>>,
    /// Under etcd, the `--mirror`'s policy, handed to the switch once the server listens
    /// ([`Replication::serving`]).
    deferred: Option<Arc<MirrorPolicy>>,
}

impl Replication {
    /// The pool's policy (None: the pool's default).
    pub fn policy(&self) -> Option<Arc<dyn mnemo_pmem::SyncPolicy>> {
        match (&self.fixed, &self.switch) {
            (Some(p), _) => Some(Arc::clone(p) as Arc<dyn mnemo_pmem::SyncPolicy>),
            (None, Some(s)) => Some(Arc::clone(s) as Arc<dyn mnemo_pmem::SyncPolicy>),
            (None, None) => None,
        }
    }

    /// The mirror's policy now, if there is a mirror (for INFO and the log).
    pub fn mirror(&self) -> Option<Arc<MirrorPolicy>> {
        match (&self.fixed, &self.switch) {
            (Some(p), _) => Some(Arc::clone(p)),
            (None, Some(s)) => s.current().or_else(|| self.deferred.clone()),
            (None, None) => None,
        }
    }

    /// The switch, under etcd.
    pub fn switch(&self) -> Option<&Arc<mnemo_repl_etcd::SwitchPolicy>> {
        self.switch.as_ref()
    }

    /// The server listens: under etcd, the mirror's link (its full copy first) is made from
    /// the next sync point on, by the first write or the idle pool's empty sync point, not
    /// while the pool opens: a promoted mirror whose backup moved up serves at once, and
    /// brings that backup up to date while it does.
    pub fn serving(&self) {
        if let (Some(switch), Some(policy)) = (&self.switch, &self.deferred) {
            switch.replace(Arc::clone(policy));
        }
    }

    /// Whether an empty sync point would do something now (a mirror to bring up to date while
    /// the pool is idle).
    pub fn wants_sync_point(&self) -> bool {
        match (&self.fixed, &self.switch) {
            (Some(p), _) => p.wants_sync_point(),
            (None, Some(s)) => s.wants_sync_point(),
            (None, None) => false,
        }
    }
}

impl ReplArgs {
    /// The replication these flags ask for; under etcd, at the membership's epoch, recording
    /// the mirror's state there, and ready to take a mirror that joins later.
    pub fn policy(
        &self,
        membership: Option<&Arc<mnemo_repl_etcd::PrimaryMembership>>,
    ) -> Result<Replication, String> {
        let mirror = match (&self.mirror, self.repl_mode) {
            (Some(mirror), mode) if mode != Mode::Local => Some(mirror),
            _ => None,
        };
        let policy = match mirror {
            None => None,
            Some(mirror) => {
                let addr = resolve(mirror)?;
                let path = self.repl_secret_file.as_ref().ok_or(
                    "--mirror needs --repl-secret-file FILE (the secret shared with the mirror)",
                )?;
                let secret = Secret::from_file(path).map_err(|e| e.to_string())?;
                let mut config = MirrorConfig::new(addr, secret, self.repl_mode)
                    .with_connections(self.repl_connections);
                config.epoch = self.repl_epoch;
                config.without_mirror = self.repl_without_mirror;
                if let Some(bytes) = self.repl_backup_stall {
                    config.backup_stall = bytes;
                }
                if let Some(ms) = self.repl_backup_stall_ms {
                    config.backup_stall_max = std::time::Duration::from_millis(ms);
                    if config.backup_stall_max > mnemo_repl::policy::BUSY_WAIT_MAX {
                        return Err(format!(
                            "--repl-backup-stall-ms {ms}: at most {} (the longest a primary waits for a busy mirror)",
                            mnemo_repl::policy::BUSY_WAIT_MAX.as_millis()
                        ));
                    }
                }
                let mut policy = MirrorPolicy::new(config.clone());
                if let Some(m) = membership {
                    config.epoch = m.epoch();
                    policy = MirrorPolicy::new(config).with_membership(m.at_epoch(m.epoch()));
                }
                let policy = Arc::new(policy);
                policy
                    .start_heartbeats()
                    .map_err(|e| format!("starting the heartbeat thread: {e}"))?;
                Some(policy)
            }
        };
        Ok(match membership {
            None => Replication {
                fixed: policy,
                switch: None,
                deferred: None,
            },
            Some(m) => {
                // A blocking primary waits for its mirror from the first sync point on (the
                // pool's own at open included), as without etcd.
                let (initial, deferred) = match self.repl_without_mirror {
                    WithoutMirror::Block => (policy, None),
                    WithoutMirror::Record => (None, policy),
                };
                Replication {
                    fixed: None,
                    switch: Some(Arc::new(
                        mnemo_repl_etcd::SwitchPolicy::new(initial)
                            .with_fence(Arc::clone(m) as Arc<dyn mnemo_repl::Membership>),
                    )),
                    deferred,
                }
            }
        })
    }
}

fn resolve(text: &str) -> Result<SocketAddr, String> {
    resolve_flag("--mirror", text)
}

pub(crate) fn resolve_flag(flag: &str, text: &str) -> Result<SocketAddr, String> {
    text.to_socket_addrs()
        .map_err(|e| format!("{flag} {text}: {e} (give HOST:PORT)"))?
        .next()
        .ok_or_else(|| format!("{flag} {text}: no address"))
}

/// `mnemo backup ...`.
pub fn run_backup(command: &BackupCommand) -> ExitCode {
    let BackupCommand::Serve(args) = command;
    match serve_role(args, "backup") {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            crate::report!("mnemo backup: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `mnemo mirror ...`.
pub fn run(command: &MirrorCommand) -> ExitCode {
    let result = match command {
        MirrorCommand::Serve(args) => serve(args),
        MirrorCommand::Status(args) => status(&args.dir),
        MirrorCommand::Promote(args) => promote(&args.dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            crate::report!("mnemo mirror: {message}");
            ExitCode::FAILURE
        }
    }
}

fn make_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    Ok(())
}

fn serve(args: &MirrorServeArgs) -> Result<(), String> {
    serve_role(args, "mirror")
}

fn serve_role(args: &MirrorServeArgs, role: &'static str) -> Result<(), String> {
    let secret = Secret::from_file(&args.secret_file).map_err(|e| e.to_string())?;
    make_dir(&args.dir)?;
    let options = MirrorOptions {
        log_size: args.log_size,
        checkpoint_records: args.checkpoint_records.max(1),
        disk_image: args.disk_image.clone(),
    };
    let store = MirrorStore::open(&args.dir, options).map_err(|e| e.to_string())?;
    let state = store.state();
    // The read port listens before the primaries' port: once a primary can link, reads
    // connect too.
    let reads = match args.read_port {
        Some(port) => {
            let at = SocketAddr::new(args.bind, port);
            let listener = std::net::TcpListener::bind(at).map_err(|e| {
                format!("cannot listen on {at} for reads: {e} (choose another --read-port)")
            })?;
            let password = args.read_requirepass.as_ref().and_then(|p| p.password());
            if !at.ip().is_loopback() && password.is_none() {
                tracing::warn!(address = %at, "the read port listens beyond this machine without --read-requirepass: anyone who reaches it can read the data");
            }
            tracing::info!(address = %at, auth = if password.is_some() { "requirepass" } else { "none" }, "{role}: serving reads of the image (read-only)");
            Some(listener)
        }
        None => None,
    };
    let address = SocketAddr::new(args.bind, args.port);
    let listener = mnemo_repl::mirror::listen(address).map_err(|e| e.to_string())?;
    if !address.ip().is_loopback() {
        tracing::warn!(address = %address, "the mirror listens beyond this machine: links are authenticated by the shared secret, but not encrypted");
    }
    let replayed = store.stats().replayed;
    let mut mirror = Mirror::new(store, secret);
    for backup in &args.backup {
        let addr = resolve_flag("--backup", backup)?;
        let options = mnemo_repl::BackupOptions {
            lag_max: args.backup_lag_max,
            stall_bytes: args.backup_stall,
            stall_max: std::time::Duration::from_millis(args.backup_stall_ms),
        };
        mirror
            .add_backup_with(addr, options)
            .map_err(|e| e.to_string())?;
    }
    // Kept for the process's life: the read port serves until the process ends (or execs).
    let _reads = match reads {
        Some(listener) => Some(crate::readers::start(
            listener,
            mirror.store(),
            mirror.backups().to_vec(),
            args.read_requirepass.as_ref().and_then(|p| p.password()),
            role,
            args.read_databases,
        )?),
        None => None,
    };
    tracing::info!(
        address = %address,
        dir = %args.dir.display(),
        epoch = state.epoch,
        last_id = state.last_id,
        complete = state.complete,
        replayed,
        backups = args.backup.len(),
        "mnemo {role} ready"
    );
    watch_copies(mirror.store(), args.dir.join("image"), role)?;
    if !args.etcd.enabled() {
        return mirror.serve(listener).map_err(|e| e.to_string());
    }
    // Under etcd: serve primaries on a thread, register (a primary without a mirror takes
    // this node as one), and take over when the primary's lease expires while the
    // configuration names this node as its mirror in sync (a backup once it moved up): this
    // process then becomes `mnemo serve` on the promoted image.
    let store = mirror.store();
    std::thread::Builder::new()
        .name("mnemo-mirror-accept".into())
        .spawn(move || {
            if let Err(e) = mirror.serve(listener) {
                tracing::error!(error = %e, "the mirror stopped accepting primaries");
            }
        })
        .map_err(|e| format!("spawning the mirror's accept thread: {e}"))?;
    let successor = crate::etcd::Successor {
        mirror: args
            .advertise
            .clone()
            .unwrap_or_else(|| address.to_string()),
        serve: SocketAddr::new(args.bind, args.promote_port),
        role: if role == "mirror" { "mirror" } else { "backup" },
        backups: args.backup.clone(),
        secret_file: args.secret_file.clone(),
        mode: args.repl_mode,
    };
    crate::etcd::mirror_failover(&args.etcd, &successor, &args.dir, store)
}

/// How often a mirror looks at its store to report a full copy's progress.
const COPY_WATCH_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// A full copy's progress seconds apart at most.
const COPY_PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Report, from a thread of its own, each full copy this node receives: its progress while
/// it lasts (the bytes of the image written so far: the image is reset to a sparse file of the
/// pool's size and the copy writes only its non-zero chunks) and its end. A node that
/// rejoins or moves up is brought up to date this way. The store is only tried, never
/// waited for.
fn watch_copies(
    store: Arc<std::sync::Mutex<MirrorStore>>,
    image: PathBuf,
    role: &'static str,
) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    std::thread::Builder::new()
        .name("mnemo-copy-watch".into())
        .spawn(move || {
            let (mut copies, mut copying, mut said) = (0, None, std::time::Instant::now());
            loop {
                std::thread::sleep(COPY_WATCH_EVERY);
                let Ok(guard) = store.try_lock() else {
                    continue;
                };
                let (state, stats) = (guard.state(), guard.stats());
                drop(guard);
                let started = *copying.get_or_insert_with(std::time::Instant::now);
                if !state.complete {
                    if said.elapsed() >= COPY_PROGRESS_EVERY {
                        said = std::time::Instant::now();
                        if let Ok(meta) = std::fs::metadata(&image) {
                            tracing::info!(
                                written_mib = (meta.blocks() * 512) >> 20,
                                pool_mib = meta.len() >> 20,
                                "{role}: receiving a full copy from the primary"
                            );
                        }
                    }
                    continue;
                }
                copying = None;
                if stats.copies > copies {
                    tracing::info!(
                        epoch = state.epoch,
                        last_id = state.last_id,
                        pool_size = state.pool_size,
                        copies = stats.copies,
                        took_ms = started.elapsed().as_millis() as u64,
                        "{role}: full copy received: up to date with the primary"
                    );
                }
                copies = stats.copies;
            }
        })
        .map(|_| ())
        .map_err(|e| format!("spawning the copy watch: {e}"))
}

fn status(dir: &Path) -> Result<(), String> {
    if !dir.join("state").exists() && !dir.join("log.pool").exists() {
        return Err(format!(
            "{} is not a mirror directory (no state, no log.pool)",
            dir.display()
        ));
    }
    let (s, running) = mnemo_repl::mirror::peek_state(dir).map_err(|e| e.to_string())?;
    println!("dir: {}", dir.display());
    println!(
        "process: {}",
        if running {
            "running (figures as of its last checkpoint)"
        } else {
            "stopped"
        }
    );
    println!("epoch: {}", s.epoch);
    println!(
        "mode: {}",
        s.mode
            .map_or("unknown (no primary told one yet)", Mode::name)
    );
    println!("last_checkpointed_record: {}", s.last_id);
    println!("pool_size: {}", s.pool_size);
    println!(
        "image: {} ({})",
        dir.join("image").display(),
        if s.complete {
            "a complete copy"
        } else {
            "incomplete: no copy finished yet"
        }
    );
    let image = dir.join("image");
    let target = std::fs::read_link(&image).ok();
    let memory = mnemo_repl::mirror::on_memory_fs(target.as_deref().unwrap_or(&image))
        .map_err(|e| e.to_string())?;
    println!(
        "data_area: {}{}",
        if memory {
            "memory (tmpfs)"
        } else {
            "disk (an ordinary file, made durable by msync at checkpoints)"
        },
        target.map_or(String::new(), |t| format!(", linked to {}", t.display()))
    );
    println!("log: {} (a pool)", dir.join("log.pool").display());
    Ok(())
}

fn promote(dir: &Path) -> Result<(), String> {
    let mut store = MirrorStore::open(dir, MirrorOptions::default()).map_err(|e| e.to_string())?;
    let image = store.promote().map_err(|e| e.to_string())?;
    let epoch = store.state().epoch;
    drop(store);
    println!("promoted at epoch {epoch}: serve it with");
    println!("  mnemo serve --pool {}", image.display());
    Ok(())
}
