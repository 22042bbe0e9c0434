//! Failover with etcd for `mnemo serve` and `mnemo mirror serve` (`--etcd URL --cluster
//! NAME`), and `mnemo repl status`. The control plane is `mnemo_repl_etcd`'s; without
//! `--etcd`, roles are static and promotion is manual (`mnemo mirror promote`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Subcommand};
use mnemo_repl::MirrorStore;
use mnemo_repl_etcd::{Control, PrimaryMembership, PrimaryRole};

/// How long one etcd request may take before it counts as failed.
const ETCD_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a primary checks that it was not deposed (its lease, its configuration).
const DEPOSED_CHECK: Duration = Duration::from_millis(100);

/// Exit status of a primary that learned it was deposed.
const EXIT_DEPOSED: i32 = 3;

/// The flags that put a node under etcd's configuration.
#[derive(Debug, Args, Clone)]
pub struct EtcdArgs {
    /// etcd's client URL (e.g. http://127.0.0.1:2379): the cluster's configuration lives
    /// there, and a mirror takes over when the primary's lease expires. Without it, roles
    /// are static (promotion is `mnemo mirror promote`).
    #[arg(long, value_name = "URL", env = "MNEMO_ETCD")]
    pub etcd: Option<String>,
    /// The cluster's name: its keys are /mnemo/NAME/config and /mnemo/NAME/alive.
    #[arg(long, value_name = "NAME", default_value = "mnemo")]
    pub cluster: String,
    /// The primary's liveness lease, in seconds: a mirror takes over this long after the
    /// primary stops renewing it (etcd rounds it up to its minimum, 1.5 election timeouts).
    #[arg(long, value_name = "SECONDS", default_value_t = 1)]
    pub etcd_ttl: i64,
}

impl EtcdArgs {
    fn connect(&self) -> Result<Option<Control>, String> {
        let Some(url) = &self.etcd else {
            return Ok(None);
        };
        Control::connect(std::slice::from_ref(url), &self.cluster, ETCD_TIMEOUT)
            .map(Some)
            .map_err(|e| format!("--etcd {url}: {e}"))
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
    if let Ok(text) = std::fs::read_to_string(&path) {
        let seen: u64 = text.trim().parse().map_err(|_| {
            format!(
                "{}: not an epoch; remove it if the cluster's configuration is right",
                path.display()
            )
        })?;
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

/// With `--etcd`: take the primary's role for `me` (refused if the configuration names
/// another primary), hold the lease, and exit the process as soon as this primary learns it
/// was deposed (its sync points fail from that moment on).
pub fn start_primary(
    etcd: &EtcdArgs,
    me: SocketAddr,
    mirror: Option<&str>,
    mode: &str,
    pool: &Path,
) -> Result<Option<Arc<PrimaryMembership>>, String> {
    let Some(control) = etcd.connect()? else {
        return Ok(None);
    };
    let role = PrimaryRole {
        me: me.to_string(),
        mirror: mirror.map(str::to_string),
        mode: if mirror.is_some() { mode } else { "local" }.to_string(),
        ttl_s: etcd.etcd_ttl,
    };
    let membership =
        PrimaryMembership::start(Arc::new(control), &role).map_err(|e| e.to_string())?;
    persist_epoch(pool, membership.epoch())?;
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
}

/// With `--etcd`: wait (for ever) until this mirror takes over, then promote its image and
/// become `mnemo serve` on it (the same process, by exec). Returns only on an error.
pub fn mirror_failover(
    etcd: &EtcdArgs,
    successor: &Successor,
    dir: &Path,
    store: Arc<Mutex<MirrorStore>>,
) -> Result<(), String> {
    let Some(control) = etcd.connect()? else {
        return Ok(());
    };
    tracing::info!(cluster = %etcd.cluster, mirror = %successor.mirror, serve = %successor.serve, "watching the primary's lease in etcd");
    let eligible = || lock(&store).state().complete;
    let config = mnemo_repl_etcd::await_takeover(
        &control,
        &successor.mirror,
        &successor.serve.to_string(),
        &eligible,
    )
    .map_err(|e| e.to_string())?;
    // From here the store's lock is held: no record of the old primary is logged any more,
    // and the image is checkpointed at the new epoch.
    let mut store = lock(&store);
    let image = store
        .promote_to(config.epoch)
        .map_err(|e| format!("promoting {}: {e}", dir.display()))?;
    tracing::warn!(epoch = config.epoch, image = %image.display(), serve = %successor.serve, "the primary's lease expired and this mirror was in sync: promoted, now serving as primary");
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let error = {
        use std::os::unix::process::CommandExt as _;
        let mut command = std::process::Command::new(exe);
        command
            .arg("serve")
            .arg("--pool")
            .arg(&image)
            .args(["--bind", &successor.serve.ip().to_string()])
            .args(["--port", &successor.serve.port().to_string()])
            .args(["--cluster", &etcd.cluster])
            .args(["--etcd-ttl", &etcd.etcd_ttl.to_string()]);
        if let Some(url) = &etcd.etcd {
            command.args(["--etcd", url]);
        }
        command.exec()
    };
    Err(format!(
        "starting mnemo serve on the promoted image: {error}"
    ))
}

/// `mnemo repl ...`.
#[derive(Debug, Subcommand)]
pub enum ReplCommand {
    /// Print a cluster's configuration in etcd (epoch, primary, mirror, whether it is in
    /// sync, backups, mode) and whether the primary's lease is alive.
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
    println!("revision: {revision}");
    Ok(())
}
