//! Failover with etcd for `mnemo serve` and `mnemo mirror serve` (`--etcd URL --cluster
//! NAME`), and `mnemo repl status`. The control plane is `mnemo_repl_etcd`'s; without
//! `--etcd`, roles are static and promotion is manual (`mnemo mirror promote`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Subcommand};
use mnemo_repl::{MirrorConfig, MirrorPolicy, MirrorStore, Secret};
use mnemo_repl_etcd::{Control, PrimaryMembership, PrimaryRole, SwitchPolicy};

/// How long one etcd request may take before it counts as failed.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a primary checks that it was not deposed (its lease, its configuration).
const DEPOSED_CHECK: Duration = Duration::from_millis(100);

/// Exit status of a primary that learned it was deposed.
const EXIT_DEPOSED: i32 = 3;

/// How often a primary without a mirror looks for a registered node to take as one.
const JOIN_CHECK: Duration = Duration::from_millis(100);

/// The flags that put a node under etcd's configuration.
#[derive(Debug, Args, Clone)]
pub struct EtcdArgs {
    /// etcd's client URL (e.g. http://127.0.0.1:2379): the cluster's configuration lives
    /// there, and a mirror takes over when the primary's lease expires. Give every member of
    /// an etcd cluster (repeat the flag, or separate URLs with commas): requests go to any
    /// member that answers. Without it, roles are static (promotion is `mnemo mirror
    /// promote`).
    #[arg(long, value_name = "URL", env = "MNEMO_ETCD", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// The cluster's name: its keys are /mnemo/NAME/config and /mnemo/NAME/alive.
    #[arg(long, value_name = "NAME", default_value = "mnemo")]
    pub cluster: String,
    /// The primary's liveness lease, in seconds: a mirror takes over this long after the
    /// primary stops renewing it (etcd rounds it up to its minimum, 1.5 election timeouts).
    #[arg(long, value_name = "SECONDS", default_value_t = 1)]
    pub etcd_ttl: i64,
}

impl EtcdArgs {
    /// Whether a configuration store was given.
    pub fn enabled(&self) -> bool {
        !self.etcd.is_empty()
    }

    fn connect(&self) -> Result<Option<Control>, String> {
        if !self.enabled() {
            return Ok(None);
        }
        Control::connect(&self.etcd, &self.cluster, ETCD_TIMEOUT)
            .map(Some)
            .map_err(|e| format!("--etcd {}: {e}", self.etcd.join(",")))
    }

    /// The flags, for a command this process execs into.
    fn pass_on(&self, command: &mut std::process::Command) {
        command
            .args(["--cluster", &self.cluster])
            .args(["--etcd-ttl", &self.etcd_ttl.to_string()]);
        if self.enabled() {
            command.args(["--etcd", &self.etcd.join(",")]);
        }
    }
}

/// The epoch a pool was last served at, from its epoch file (None: never under etcd).
fn served_epoch(pool: &Path) -> Result<Option<u64>, String> {
    let path = epoch_file(pool);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            format!(
                "{}: not an epoch; remove it if the cluster's configuration is right",
                path.display()
            )
        }),
        Err(_) => Ok(None),
    }
}

/// The file beside a pool that holds the highest epoch this node served it at.
fn epoch_file(pool: &Path) -> PathBuf {
    let mut name = pool.as_os_str().to_owned();
    name.push(".repl-epoch");
    PathBuf::from(name)
}

/// Refuse a configuration older than the one this pool was served at (an etcd that lost
/// its data), then record the epoch, durably, before serving at it.
fn persist_epoch(pool: &Path, epoch: u64) -> Result<(), String> {
    use std::io::Write as _;
    let path = epoch_file(pool);
    if let Some(seen) = served_epoch(pool)? {
        if epoch < seen {
            return Err(format!(
                "etcd's configuration is at epoch {epoch}, but this pool was served at epoch {seen}: was etcd's data lost? Refusing to serve an older configuration"
            ));
        }
    }
    if let Some(dir) = pool.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("repl-epoch.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    // Write, sync, rename, then sync the directory: the file's bytes are durable before its
    // name points at them, and the rename itself is durable only once its directory is
    // synced (POSIX). Without the last sync a power cut could bring back the previous epoch
    // file, and the node would accept the older configuration this check refuses.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    f.write_all(format!("{epoch}\n").as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, &path))
        .and_then(|()| std::fs::File::open(dir)?.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// What `mnemo serve` needs to replicate under etcd.
pub struct PrimaryStart<'a> {
    /// Its client address (its name in the configuration).
    pub me: SocketAddr,
    /// Its pool.
    pub pool: &'a Path,
    /// Its replication flags.
    pub repl: &'a crate::mirror::ReplArgs,
}

/// With `--etcd`, before anything else: a node the configuration no longer names as primary
/// (a mirror was promoted while it was away) is refused, or, with `--rejoin-port`, becomes a
/// mirror of the current primary (this process execs `mnemo mirror serve`; it does not
/// return then). A pool older than a configuration that names this address as primary is
/// refused: another node's image was promoted here since. Returns the connection to etcd
/// for [`start_primary`].
pub fn check_role(start: &PrimaryStart<'_>) -> Result<Option<Control>, String> {
    let repl = start.repl;
    let Some(control) = repl.etcd.connect()? else {
        return Ok(None);
    };
    let me = start.me.to_string();
    if let Some((config, _)) = control.load().map_err(|e| e.to_string())? {
        if config.primary != me {
            if let Some(port) = repl.rejoin_port {
                return Err(rejoin(start, &config, port));
            }
        } else if let Some(seen) = served_epoch(start.pool)? {
            if seen < config.epoch {
                return Err(format!(
                    "the cluster's configuration (epoch {}) names this address ({me}) as primary, but {} was last served at epoch {seen}: another node's image was promoted at this address since (a mirror that rejoined from here serves POOL.mirror/image). Refusing to serve an older pool",
                    config.epoch,
                    start.pool.display()
                ));
            }
        }
    }
    Ok(Some(control))
}

/// With `--etcd` (`control` from [`check_role`]): take the primary's role for `me` (refused
/// if the configuration names another primary), hold the lease, and exit the process as soon
/// as this primary learns it was deposed (its sync points fail from that moment on).
pub fn start_primary(
    start: &PrimaryStart<'_>,
    control: Option<Control>,
) -> Result<Option<Arc<PrimaryMembership>>, String> {
    let repl = start.repl;
    let etcd = &repl.etcd;
    let Some(control) = control else {
        return Ok(None);
    };
    let me = start.me.to_string();
    let mirror = repl.mirror.as_deref();
    let role = PrimaryRole {
        me,
        mirror: mirror.map(str::to_string),
        mode: if mirror.is_some() {
            repl.repl_mode.name()
        } else {
            "local"
        }
        .to_string(),
        ttl_s: etcd.etcd_ttl,
    };
    let membership =
        PrimaryMembership::start(Arc::new(control), &role).map_err(|e| e.to_string())?;
    persist_epoch(start.pool, membership.epoch())?;
    let watched = Arc::clone(&membership);
    std::thread::Builder::new()
        .name("mnemo-deposed".into())
        .spawn(move || loop {
            std::thread::sleep(DEPOSED_CHECK);
            if let Some(reason) = watched.deposed() {
                tracing::error!("{reason}; this primary stops (it acknowledges nothing more)");
                std::process::exit(EXIT_DEPOSED);
            }
        })
        .map_err(|e| format!("spawning the deposition watch: {e}"))?;
    Ok(Some(membership))
}

/// This node was deposed while it was away: become a mirror of the current primary, in
/// `POOL.mirror` (a directory beside the pool), listening on `port`; the exec returns only on
/// an error (returned). The old pool stays as it was (it may hold writes nobody
/// acknowledged); the new primary sends a full copy.
fn rejoin(start: &PrimaryStart<'_>, config: &mnemo_repl_etcd::ClusterConfig, port: u16) -> String {
    use std::os::unix::process::CommandExt as _;
    let repl = start.repl;
    let Some(secret) = &repl.repl_secret_file else {
        return "--rejoin-port needs --repl-secret-file FILE (the secret shared with the primary)"
            .into();
    };
    let mut dir = start.pool.as_os_str().to_owned();
    dir.push(".mirror");
    let dir = PathBuf::from(dir);
    tracing::warn!(
        epoch = config.epoch,
        primary = %config.primary,
        pool = %start.pool.display(),
        mirror_dir = %dir.display(),
        port,
        "this node was deposed while it was away: rejoining as a mirror of the current primary (its pool is left as it was)"
    );
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return format!("this program's path: {e}"),
    };
    let mut command = std::process::Command::new(exe);
    command
        .args(["mirror", "serve", "--dir"])
        .arg(&dir)
        .args(["--bind", &start.me.ip().to_string()])
        .args(["--port", &port.to_string()])
        .arg("--secret-file")
        .arg(secret)
        .args(["--promote-port", &start.me.port().to_string()])
        .args(["--repl-mode", repl.repl_mode.name()]);
    repl.etcd.pass_on(&mut command);
    let error = command.exec();
    format!("rejoining as a mirror (mnemo mirror serve): {error}")
}

/// A primary under etcd without a mirror takes one: the first registered node (a mirror
/// that rejoined, a restarted mirror, a backup) becomes its mirror at the next epoch, and
/// `switch` replicates to it from the next sync point on (a full copy first). Runs on a
/// thread of its own while this primary serves.
pub fn take_joining_mirrors(
    membership: Arc<PrimaryMembership>,
    switch: Arc<SwitchPolicy>,
    repl: &crate::mirror::ReplArgs,
    pool: &Path,
) -> Result<(), String> {
    let mode = repl.repl_mode;
    if mode == mnemo_repl::Mode::Local {
        return Ok(());
    }
    let Some(secret_file) = repl.repl_secret_file.clone() else {
        tracing::info!("no --repl-secret-file: this primary takes no mirror that joins");
        return Ok(());
    };
    let secret = Secret::from_file(&secret_file).map_err(|e| e.to_string())?;
    let without_mirror = repl.repl_without_mirror;
    let connections = repl.repl_connections;
    let pool = pool.to_path_buf();
    std::thread::Builder::new()
        .name("mnemo-repl-join".into())
        .spawn(move || loop {
            std::thread::sleep(JOIN_CHECK);
            if membership.deposed().is_some() {
                return;
            }
            let joined = join_one(
                &membership,
                &secret,
                (mode, without_mirror, connections),
                &pool,
            );
            match joined {
                Ok(Some(policy)) => switch.replace(policy),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "taking a joining node as mirror failed"),
            }
        })
        .map(|_| ())
        .map_err(|e| format!("spawning the join watch: {e}"))
}

/// One look for a node to take as mirror; the policy replicating to it, if one was taken.
fn join_one(
    membership: &Arc<PrimaryMembership>,
    secret: &Secret,
    (mode, without_mirror, connections): (mnemo_repl::Mode, mnemo_repl::WithoutMirror, usize),
    pool: &Path,
) -> Result<Option<Arc<MirrorPolicy>>, String> {
    let control = membership.control();
    let Some((config, _)) = control.load().map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let nodes = control.nodes().map_err(|e| e.to_string())?;
    let registered = |addr: &str| nodes.iter().any(|(a, _)| a == addr);
    // A mirror named but out of sync and no longer registered (gone for good, its lease
    // expired) gives way to a registered node.
    let replacing = match config.mirror.as_deref() {
        None => None,
        Some(named) if !config.mirror_in_sync && !registered(named) => Some(named),
        Some(_) => return Ok(None),
    };
    let Some((node, _)) = nodes
        .iter()
        .find(|(addr, _)| addr != membership.me() && Some(addr.as_str()) != replacing)
    else {
        return Ok(None);
    };
    let addr = crate::mirror::resolve_flag("a joining node's address", node)?;
    // In sync mode this pool is not flushed at sync points from now on: mark it first.
    if !mode.flushes_locally() {
        crate::mirror::mark_sync_mode(pool, mode.name())?;
    }
    let Some(epoch) = membership.adopt_mirror(node, mode.name(), replacing)? else {
        return Ok(None);
    };
    persist_epoch(pool, epoch)?;
    let mut config = MirrorConfig::new(addr, secret.clone(), mode).with_connections(connections);
    config.epoch = epoch;
    config.without_mirror = without_mirror;
    let policy = Arc::new(MirrorPolicy::new(config).with_membership(membership.at_epoch(epoch)));
    policy
        .start_heartbeats()
        .map_err(|e| format!("starting the heartbeat thread: {e}"))?;
    tracing::info!(mirror = %node, epoch, mode = mode.name(), "a node joined: replicating to it from the next sync point (a full copy first)");
    Ok(Some(policy))
}

fn lock(store: &Mutex<MirrorStore>) -> std::sync::MutexGuard<'_, MirrorStore> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a mirror under etcd becomes when it takes over.
#[derive(Debug, Clone)]
pub struct Successor {
    /// The mirror's name in the configuration (its replication address).
    pub mirror: String,
    /// Where the promoted node serves clients.
    pub serve: SocketAddr,
    /// `registered` as a mirror or a backup ([`Control::register_node`]).
    pub role: &'static str,
    /// The backups this node feeds (recorded in the configuration while it is the mirror).
    pub backups: Vec<String>,
    /// The secret file, passed on to the promoted `mnemo serve` (for the mirror that joins).
    pub secret_file: PathBuf,
    /// The mode the promoted primary replicates in once a mirror joins.
    pub mode: mnemo_repl::Mode,
}

/// With `--etcd`: register this node (a primary without a mirror takes it as one), wait (for
/// ever) until it takes over, then promote its image and become `mnemo serve` on it (the
/// same process, by exec). Returns only on an error.
pub fn mirror_failover(
    etcd: &EtcdArgs,
    successor: &Successor,
    dir: &Path,
    store: Arc<Mutex<MirrorStore>>,
) -> Result<(), String> {
    let Some(control) = etcd.connect()? else {
        return Ok(());
    };
    let control = Arc::new(control);
    let registered = control
        .register_node(&successor.mirror, successor.role, etcd.etcd_ttl)
        .map_err(|e| format!("registering in etcd: {e}"))?;
    tracing::info!(cluster = %etcd.cluster, mirror = %successor.mirror, serve = %successor.serve, role = successor.role, "registered in etcd; watching the primary's lease");
    let registration = Arc::new(Mutex::new(Some(registered)));
    keep_registered(
        Arc::clone(&control),
        successor,
        etcd.etcd_ttl,
        Arc::clone(&registration),
    )?;
    if successor.role == "backup" {
        move_up(&control, successor, &store)?;
    }
    let eligible = || lock(&store).state().complete;
    let config = mnemo_repl_etcd::await_takeover_with(
        &control,
        &successor.mirror,
        &successor.serve.to_string(),
        &successor.backups,
        &eligible,
    )
    .map_err(|e| e.to_string())?;
    // No longer a node a primary may take as mirror (the new primary would take its own old
    // self); its lease would expire by itself a TTL after the exec. Taken from the thread
    // that keeps it, which registers nothing more.
    let registered = registration
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(registered) = registered {
        if let Err(e) = control.unregister_node(&successor.mirror, &registered) {
            tracing::warn!(error = %e, "cannot withdraw this node's registration in etcd");
        }
    }
    // From here the store's lock is held: no record of the old primary is logged any more,
    // and the image is checkpointed at the new epoch.
    let mut store = lock(&store);
    let image = store
        .promote_to(config.epoch)
        .map_err(|e| format!("promoting {}: {e}", dir.display()))?;
    // The image is now served at this epoch (a later restart of it is checked against it).
    persist_epoch(&image, config.epoch)?;
    tracing::warn!(epoch = config.epoch, image = %image.display(), serve = %successor.serve, mirror = ?config.mirror, "the primary's lease expired and this mirror was in sync: promoted, now serving as primary");
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let mode = match &config.mirror {
        Some(_) => config.mode.clone(),
        None => successor.mode.name().to_string(),
    };
    let error = {
        use std::os::unix::process::CommandExt as _;
        let mut command = std::process::Command::new(exe);
        command
            .arg("serve")
            .arg("--pool")
            .arg(&image)
            .args(["--bind", &successor.serve.ip().to_string()])
            .args(["--port", &successor.serve.port().to_string()])
            .args(["--repl-mode", &mode])
            .arg("--repl-secret-file")
            .arg(&successor.secret_file)
            // The image was checkpointed and fenced by the promotion.
            .arg("--repl-trust-local");
        if let Some(mirror) = &config.mirror {
            command.args(["--mirror", mirror]);
        }
        etcd.pass_on(&mut command);
        command.exec()
    };
    Err(format!(
        "starting mnemo serve on the promoted image: {error}"
    ))
}

/// Register this node again whenever its registration's lease is lost: etcd let it expire
/// while the node was stopped (SIGSTOP) or cut off from a quorum longer than its TTL. Before,
/// such a node stayed unregistered until it restarted: a backup was then never moved up at a
/// takeover (only registered backups are), nor taken by a primary without a mirror. Stops
/// once the registration is withdrawn (`None`: a takeover under way).
fn keep_registered(
    control: Arc<Control>,
    successor: &Successor,
    ttl: i64,
    registration: Arc<Mutex<Option<Arc<mnemo_repl_etcd::Lease>>>>,
) -> Result<(), String> {
    let (addr, role) = (successor.mirror.clone(), successor.role);
    std::thread::Builder::new()
        .name("mnemo-etcd-register".into())
        .spawn(move || {
            let mut said = None;
            loop {
                std::thread::sleep(mnemo_repl_etcd::takeover::CHECK_EVERY);
                let mut held = registration.lock().unwrap_or_else(|p| p.into_inner());
                match held.as_ref() {
                    None => return,
                    Some(lease) if !lease.is_lost() => continue,
                    Some(_) => {}
                }
                match control.register_node(&addr, role, ttl) {
                    Ok(lease) => {
                        tracing::info!(node = %addr, role, "registered in etcd again (the registration had expired)");
                        *held = Some(lease);
                        said = None;
                    }
                    Err(e) => {
                        let e = e.to_string();
                        if said.as_ref() != Some(&e) {
                            tracing::warn!(error = %e, "cannot register this node in etcd again; trying again");
                            said = Some(e);
                        }
                    }
                }
            }
        })
        .map(|_| ())
        .map_err(|e| format!("spawning the registration keeper: {e}"))
}

/// A backup under etcd: wait until the configuration names this node the mirror (a backup
/// moved up when its mirror took over). Then, if it lists backups this node does not feed
/// (the old mirror's other backups, which nobody feeds any more), become `mnemo mirror serve`
/// with the same flags plus a `--backup` for each (the same process, by exec; its store's
/// log is replayed at the start, as after any stop, and the new primary's link, if it came
/// first, is made again with a full copy). Returns when there are none to feed: this node
/// then waits for its takeover as it is.
fn move_up(
    control: &mnemo_repl_etcd::Control,
    successor: &Successor,
    store: &Mutex<MirrorStore>,
) -> Result<(), String> {
    let mut said = None;
    let config = loop {
        match control.load() {
            Ok(Some((config, _))) if config.mirror.as_deref() == Some(&successor.mirror) => {
                break config
            }
            Ok(_) => {}
            Err(e) => {
                let e = e.to_string();
                if said.as_ref() != Some(&e) {
                    tracing::warn!(error = %e, "etcd: waiting to be named the mirror");
                    said = Some(e);
                }
            }
        }
        std::thread::sleep(mnemo_repl_etcd::takeover::CHECK_EVERY);
    };
    let orphans: Vec<&String> = config
        .backups
        .iter()
        .filter(|b| **b != successor.mirror && !successor.backups.contains(b))
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    // A clean point: no record of the primary half done, the image checkpointed.
    let mut held = lock(store);
    held.checkpoint()
        .map_err(|e| format!("checkpointing before moving up: {e}"))?;
    tracing::warn!(epoch = config.epoch, backups = ?orphans, "this backup moved up to mirror: restarting as `mnemo mirror serve`, feeding the backups the configuration lists");
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    match args.first_mut() {
        Some(first) if first == "backup" => *first = "mirror".into(),
        _ => return Err("moving up: this process was not started as `mnemo backup serve`".into()),
    }
    for backup in orphans {
        args.push("--backup".into());
        args.push(backup.into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let error = {
        use std::os::unix::process::CommandExt as _;
        std::process::Command::new(exe).args(args).exec()
    };
    drop(held);
    Err(format!("restarting as the mirror: {error}"))
}

/// `mnemo repl ...`.
#[derive(Debug, Subcommand)]
pub enum ReplCommand {
    /// Print a cluster's configuration in etcd (epoch, primary, mirror, whether it is in
    /// sync, backups, mode), whether the primary's lease is alive, and the mirrors and
    /// backups registered (a primary without a mirror takes one of them).
    ///
    /// Example: mnemo repl status --etcd http://127.0.0.1:2379 --cluster kv
    Status(EtcdArgs),
}

/// `mnemo repl ...`.
pub fn run(command: &ReplCommand) -> ExitCode {
    let ReplCommand::Status(args) = command;
    match status(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            crate::report!("mnemo repl: {message}");
            ExitCode::FAILURE
        }
    }
}

fn status(args: &EtcdArgs) -> Result<(), String> {
    let control = args
        .connect()?
        .ok_or("give --etcd URL (or MNEMO_ETCD): the configuration lives in etcd")?;
    let Some((config, revision)) = control.load().map_err(|e| e.to_string())? else {
        return Err(format!(
            "cluster {:?} has no configuration in etcd ({} is absent): start its primary with --etcd and --cluster",
            args.cluster,
            control.keys().config
        ));
    };
    let alive = control.alive().map_err(|e| e.to_string())?;
    println!("cluster: {}", args.cluster);
    println!("epoch: {}", config.epoch);
    println!("primary: {}", config.primary);
    println!(
        "primary_lease: {}",
        alive.as_deref().unwrap_or("expired (no live primary)")
    );
    println!("mirror: {}", config.mirror.as_deref().unwrap_or("none"));
    println!("mirror_in_sync: {}", config.mirror_in_sync);
    println!("backups: {}", config.backups.join(", "));
    println!("mode: {}", config.mode);
    let nodes = control.nodes().map_err(|e| e.to_string())?;
    let nodes: Vec<String> = nodes
        .iter()
        .map(|(addr, role)| format!("{addr} ({role})"))
        .collect();
    println!("registered_nodes: {}", nodes.join(", "));
    println!("revision: {revision}");
    Ok(())
}
