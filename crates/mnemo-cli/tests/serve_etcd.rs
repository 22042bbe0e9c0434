//! Failover with etcd, end to end: a real etcd (started here on free loopback ports), `mnemo
//! mirror serve --etcd` and `mnemo serve --mirror --etcd` as processes. Clients SET without
//! pause and record what was acknowledged; the primary is killed (SIGKILL) or stopped
//! (SIGSTOP, so that its lease expires while it lives); the mirror must take over by itself
//! within 3 s and serve every acknowledged write; the old primary must not serve again.
//! Skipped (loudly) without etcd, a failure under `MNEMO_REQUIRE_TOOLS=1`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemo_repl_etcd::testing::{EtcdCluster, EtcdServer};
use mnemo_repl_etcd::Control;
use mnemo_resp::Reply;
use support::repl::{
    field, free_port, info, signal, until_config, value, write_secret, MirrorProc,
};
use support::{serve_command, shm_dir, Client, Server};

/// The target: the mirror serves within this long after the primary is gone.
const FAILOVER_MAX: Duration = Duration::from_secs(3);

/// The tests run one at a time: each times a failover against a 3 s target, and several
/// clusters of processes at once on a small machine would measure each other.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

struct Cluster {
    name: String,
    secret: PathBuf,
    mirror: MirrorProc,
    primary: Server,
    promote_port: u16,
    primary_args: Vec<String>,
}

impl Cluster {
    fn start(etcd: &EtcdServer, dir: &Path, name: &str) -> Cluster {
        Cluster::start_with(&etcd.url, dir, name, &[], &[])
    }

    /// A mirror and a primary under the etcd at `urls` (one `--etcd` of comma-separated
    /// URLs), each with its extra flags.
    fn start_with(
        urls: &str,
        dir: &Path,
        name: &str,
        mirror_extra: &[&str],
        primary_extra: &[&str],
    ) -> Cluster {
        let secret = write_secret(dir, "repl.secret", "a shared secret for this test\n");
        let promote_port = free_port();
        let promote = promote_port.to_string();
        let mut mirror_args = vec![
            "--etcd",
            urls,
            "--cluster",
            name,
            "--promote-port",
            &promote,
            "--repl-mode",
            "sync",
        ];
        mirror_args.extend_from_slice(mirror_extra);
        let mirror = MirrorProc::start_as(
            "mirror",
            &dir.join("mirror"),
            &secret,
            dir.join("mirror.log"),
            &mirror_args,
        );
        let mut primary_args: Vec<String> = [
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-mode",
            "sync",
            "--repl-secret-file",
            secret.to_str().unwrap(),
            "--cluster",
            name,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if !primary_extra.contains(&"--etcd") {
            primary_args.extend(["--etcd".to_string(), urls.to_string()]);
        }
        primary_args.extend(primary_extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = primary_args.iter().map(String::as_str).collect();
        let primary = Server::start(&dir.join("primary").join("kv.pool"), &args);
        Cluster {
            name: name.into(),
            secret,
            mirror,
            primary,
            promote_port,
            primary_args,
        }
    }

    fn control(&self, etcd: &EtcdServer) -> Control {
        connect(&etcd.url, &self.name)
    }
}

/// A control-plane client of cluster `name` at `urls` (comma-separated).
fn connect(urls: &str, name: &str) -> Control {
    let urls: Vec<String> = urls.split(',').map(str::to_string).collect();
    Control::connect(&urls, name, Duration::from_secs(2)).unwrap()
}

/// Wait until etcd records the mirror in sync (the primary's full copy acknowledged).
fn until_in_sync(control: &Control) {
    let config = until_config(control, "the mirror in sync", |c| c.mirror_in_sync);
    assert_eq!(config.epoch, 1, "{config:?}");
}

/// Writers SETting without pause, each recording the keys acknowledged, until an error.
struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<(String, String)>>>,
    /// When the last write was acknowledged.
    last_ack: Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Writers {
    fn start(port: u16, count: usize) -> Writers {
        Writers::start_named(port, count, "w")
    }

    /// Writers whose keys start with `prefix` (several rounds of writers in one test).
    fn start_named(port: u16, count: usize, prefix: &str) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let last_ack = Arc::new(std::sync::Mutex::new(None));
        let threads = (0..count)
            .map(|w| {
                let prefix = prefix.to_string();
                let last = Arc::clone(&last_ack);
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut client = Client::connect(port).unwrap();
                    let mut acked = Vec::new();
                    for i in 0.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let (key, v) = (format!("{prefix}{w}-k{i}"), value(i));
                        match client.call(&["SET", key.as_str(), v.as_str()]) {
                            Ok(Reply::Simple(s)) if s.as_ref() == b"OK" => {
                                *last.lock().unwrap() = Some(Instant::now());
                                acked.push((key, v));
                            }
                            Ok(Reply::Error(_)) | Err(_) => break,
                            Ok(other) => panic!("SET: {other:?}"),
                        }
                    }
                    acked
                })
            })
            .collect();
        Writers {
            stop,
            threads,
            last_ack,
        }
    }

    /// When the last write was acknowledged.
    fn last_ack(&self) -> Option<Instant> {
        *self.last_ack.lock().unwrap()
    }

    /// Wait (at most `max`) until every writer stopped by itself (an error or a closed
    /// connection: the server stopped acknowledging); what they had acknowledged.
    fn until_refused(self, max: Duration) -> Vec<(String, String)> {
        let deadline = Instant::now() + max;
        while !self.threads.iter().all(|t| t.is_finished()) {
            assert!(
                Instant::now() < deadline,
                "the server still acknowledges writes {max:?} later"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        self.finish()
    }

    fn finish(self) -> Vec<(String, String)> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    }
}

/// Wait until a server answers PING on `port`; the time it took.
fn until_serving(port: u16, since: Instant, log: &Path) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut c) = Client::connect(port) {
            if c.call(&["PING"]).is_ok() {
                return since.elapsed();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the mirror never served as primary:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn check_all(port: u16, acked: &[(String, String)]) {
    let mut client = Client::connect(port).unwrap();
    for chunk in acked.chunks(256) {
        let commands: Vec<Vec<&str>> = chunk.iter().map(|(k, _)| vec!["GET", k.as_str()]).collect();
        let replies = client.pipeline(&commands).unwrap();
        for ((key, v), reply) in chunk.iter().zip(replies) {
            match reply {
                Reply::Bulk(got) => assert_eq!(
                    String::from_utf8_lossy(&got),
                    *v,
                    "{key}: another value on the new primary"
                ),
                other => panic!("{key} was acknowledged but the new primary has {other:?}"),
            }
        }
    }
}

fn wait_exit(server: &mut Server) -> ExitStatus {
    server.wait_exit()
}

#[test]
fn a_killed_primary_is_replaced_by_its_mirror_without_losing_a_write() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let cluster = Cluster::start(&etcd, dir.path(), "killed");
    let control = cluster.control(&etcd);
    until_in_sync(&control);

    // The idle link carries heartbeats, and INFO says how old the last one is.
    let mut client = cluster.primary.client();
    std::thread::sleep(Duration::from_millis(700));
    let repl = info(&mut client, "replication");
    assert!(
        field(&repl, "mnemo_repl_heartbeats").is_some_and(|n| n.parse::<u64>().unwrap() >= 1),
        "{repl}"
    );
    let age: i64 = field(&repl, "mnemo_repl_last_heartbeat_ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!((0..1000).contains(&age), "{repl}");
    drop(client);

    let writers = Writers::start(cluster.primary.port, 2);
    std::thread::sleep(Duration::from_millis(600));
    let old_port = cluster.primary.port;
    let old_pool = cluster.primary.pool.clone();
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let acked = writers.finish();
    let Cluster {
        mirror,
        primary,
        promote_port,
        primary_args,
        ..
    } = cluster;
    drop(primary);
    let failover = until_serving(promote_port, killed, &mirror.log);
    println!(
        "failover after SIGKILL: {failover:?} (lease TTL 1 s); {} writes acknowledged",
        acked.len()
    );
    assert!(acked.len() > 20, "only {} writes", acked.len());
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(promote_port, &acked);

    let (config, _) = control.load().unwrap().unwrap();
    assert_eq!(config.epoch, 2, "{config:?}");
    assert_eq!(config.primary, format!("127.0.0.1:{promote_port}"));
    let log = mirror.log_text();
    assert!(log.contains("promoted, now serving as primary"), "{log}");

    // `mnemo repl status` prints the configuration.
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["repl", "status", "--etcd", &etcd.url, "--cluster", "killed"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("epoch: 2"), "{text}");
    assert!(
        text.contains(&format!("primary: 127.0.0.1:{promote_port}")),
        "{text}"
    );

    // The old primary, restarted as it was, is refused and does not serve.
    let log = dir.path().join("restarted.log");
    let args: Vec<&str> = primary_args.iter().map(String::as_str).collect();
    let mut args = args;
    args.push("--repl-trust-local");
    let status = serve_command(&old_pool, old_port, &log, &args)
        .status()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "the old primary served again:\n{text}");
    assert!(text.contains("stale epoch"), "{text}");
    assert!(Client::connect(old_port).is_err());
    let (config, _) = control.load().unwrap().unwrap();
    assert_eq!(config.epoch, 2, "{config:?}");
    // The new primary still serves every write.
    check_all(promote_port, &acked);
    drop(mirror);
}

#[test]
fn a_stopped_primary_loses_its_lease_and_is_deposed_when_it_wakes() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let mut cluster = Cluster::start(&etcd, dir.path(), "stopped");
    let control = cluster.control(&etcd);
    until_in_sync(&control);

    let writers = Writers::start(cluster.primary.port, 2);
    std::thread::sleep(Duration::from_millis(600));
    let pid = cluster.primary.pid() as u32;
    signal(pid, rustix::process::Signal::STOP);
    let stopped = Instant::now();
    let failover = until_serving(cluster.promote_port, stopped, &cluster.mirror.log);
    println!("failover after SIGSTOP: {failover:?} (lease TTL 1 s)");
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");

    // The old primary wakes: it learns it was deposed and stops, acknowledging nothing the
    // new primary lacks.
    signal(pid, rustix::process::Signal::CONT);
    let status = wait_exit(&mut cluster.primary);
    let acked = writers.finish();
    assert!(!status.success(), "the deposed primary exited cleanly");
    let log = cluster.primary.log_text();
    assert!(
        log.contains("deposed") || log.contains("lease"),
        "the old primary did not say why it stopped:\n{log}"
    );
    assert!(acked.len() > 20, "only {} writes", acked.len());
    check_all(cluster.promote_port, &acked);
    let (config, _) = control.load().unwrap().unwrap();
    assert_eq!(
        (config.epoch, config.primary),
        (2, format!("127.0.0.1:{}", cluster.promote_port))
    );
    let _ = &cluster.secret;
}

#[test]
fn a_mirror_lost_before_the_primary_is_not_promoted_over_later_writes() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let mut cluster = Cluster::start(&etcd, dir.path(), "lost-mirror");
    let control = cluster.control(&etcd);
    until_in_sync(&control);

    // The mirror dies; the primary records it (heartbeats see it even without writes) and
    // goes on alone: the writes it acknowledges now exist only on the primary.
    cluster.mirror.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    while control.load().unwrap().unwrap().0.mirror_in_sync {
        assert!(Instant::now() < deadline, "the loss was never recorded");
        std::thread::sleep(Duration::from_millis(10));
    }
    let writers = Writers::start(cluster.primary.port, 1);
    std::thread::sleep(Duration::from_millis(300));
    let acked = writers.finish();
    assert!(!acked.is_empty());

    // The mirror comes back without a new copy, and the primary dies:
    // the mirror must not take over (it lacks those writes), and says why.
    let mirror = MirrorProc::start_as(
        "mirror",
        &dir.path().join("mirror"),
        &cluster.secret,
        dir.path().join("mirror-again.log"),
        &[
            "--etcd",
            &etcd.url,
            "--cluster",
            "lost-mirror",
            "--promote-port",
            &cluster.promote_port.to_string(),
            // Its name in the configuration; listening on another port, it is not reached
            // by the primary, as a mirror that came back while the primary was idle.
            "--advertise",
            &format!("127.0.0.1:{}", cluster.mirror.port),
        ],
    );
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        Client::connect(cluster.promote_port).is_err(),
        "a mirror out of sync was promoted"
    );
    let (config, _) = control.load().unwrap().unwrap();
    assert_eq!(
        (config.epoch, config.mirror_in_sync),
        (1, false),
        "{config:?}"
    );
    let log = mirror.log_text();
    assert!(log.contains("not in sync"), "{log}");
}

/// Wait (at most 20 s) until the log at `path` says `needle`.
fn until_log(path: &Path, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        assert!(Instant::now() < deadline, "never said {needle:?}:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process of the test (a node restarted by hand), killed on drop.
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn addr(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[test]
fn a_deposed_primary_rejoins_as_mirror_and_takes_over_again_with_every_write() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let rejoin_port = free_port();
    let rejoin = rejoin_port.to_string();
    let cluster = Cluster::start_with(
        &etcd.url,
        dir.path(),
        "rejoin",
        &[],
        &["--rejoin-port", &rejoin],
    );
    let control = cluster.control(&etcd);
    until_in_sync(&control);

    // P serves, then dies: its mirror M takes over.
    let writers = Writers::start_named(cluster.primary.port, 2, "before");
    std::thread::sleep(Duration::from_millis(500));
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let mut acked = writers.finish();
    let Cluster {
        mirror,
        primary,
        promote_port,
        primary_args,
        ..
    } = cluster;
    let (old_port, old_pool) = (primary.port, primary.pool.clone());
    drop(primary);
    let failover = until_serving(promote_port, killed, &mirror.log);
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(promote_port, &acked);
    // The new primary serves alone for a while: these writes exist only there.
    let writers = Writers::start_named(promote_port, 1, "alone");
    std::thread::sleep(Duration::from_millis(300));
    acked.extend(writers.finish());
    assert!(acked.len() > 20, "only {} writes", acked.len());

    // P's node comes back with the command it had. It finds that it was deposed and rejoins
    // as M's mirror; M takes it and sends it a full copy while no client writes (the empty
    // sync points of an idle primary).
    let log = dir.path().join("rejoined.log");
    let args: Vec<&str> = primary_args.iter().map(String::as_str).collect();
    let back = Instant::now();
    let _rejoined = Proc(
        serve_command(&old_pool, old_port, &log, &args)
            .spawn()
            .unwrap(),
    );
    let config = until_config(&control, "the rejoined node in sync", |c| {
        c.mirror.as_deref() == Some(addr(rejoin_port).as_str()) && c.mirror_in_sync
    });
    println!(
        "rejoined and in sync {:?} after its restart",
        back.elapsed()
    );
    assert_eq!(
        (config.epoch, config.primary.as_str(), config.mode.as_str()),
        (3, addr(promote_port).as_str(), "sync"),
        "{config:?}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("rejoining as a mirror"), "{text}");
    // The node says when its copy is whole (it looks every 200 ms).
    until_log(&log, "full copy received");
    let text = mirror.log_text();
    assert!(text.contains("a node joined"), "{text}");
    let mut client = Client::connect(promote_port).unwrap();
    let repl = info(&mut client, "replication");
    assert_eq!(
        field(&repl, "mnemo_repl_mirror_in_sync"),
        Some("1"),
        "{repl}"
    );
    assert_eq!(field(&repl, "mnemo_repl_epoch"), Some("3"), "{repl}");
    assert_eq!(field(&repl, "mnemo_repl_mode"), Some("sync"), "{repl}");
    assert_eq!(
        field(&repl, "mnemo_repl_mirror"),
        Some(addr(rejoin_port).as_str()),
        "{repl}"
    );
    drop(client);

    // Writes now go to the rejoined node too; then M dies and P's node takes over again,
    // on its old address, with every write acknowledged by either primary.
    let writers = Writers::start_named(promote_port, 2, "after");
    std::thread::sleep(Duration::from_millis(500));
    signal(mirror.child.id(), rustix::process::Signal::KILL);
    let killed = Instant::now();
    acked.extend(writers.finish());
    let failover = until_serving(old_port, killed, &log);
    println!(
        "second failover, to the rejoined node: {failover:?}; {} writes acknowledged",
        acked.len()
    );
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(old_port, &acked);
    let (config, _) = control.load().unwrap().unwrap();
    assert_eq!(
        (config.epoch, config.primary.as_str()),
        (4, addr(old_port).as_str())
    );
    drop(mirror);
}

#[test]
fn a_mirror_back_while_its_primary_is_idle_gets_its_copy_without_a_write() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let mut cluster = Cluster::start(&etcd, dir.path(), "idle");
    let control = cluster.control(&etcd);
    until_in_sync(&control);
    let writers = Writers::start_named(cluster.primary.port, 1, "with");
    std::thread::sleep(Duration::from_millis(300));
    let mut acked = writers.finish();

    // The mirror dies; the primary records it and writes alone.
    cluster.mirror.kill();
    until_config(&control, "the loss recorded", |c| !c.mirror_in_sync);
    let writers = Writers::start_named(cluster.primary.port, 1, "without");
    std::thread::sleep(Duration::from_millis(300));
    acked.extend(writers.finish());

    // It comes back where it was, and nobody writes: it gets its copy all the same.
    let promote = cluster.promote_port.to_string();
    let back = Instant::now();
    cluster.mirror = MirrorProc::start_on(
        None,
        cluster.mirror.port,
        "mirror",
        &dir.path().join("mirror"),
        &cluster.secret,
        dir.path().join("mirror-back.log"),
        &[
            "--etcd",
            &etcd.url,
            "--cluster",
            "idle",
            "--promote-port",
            &promote,
        ],
    );
    until_config(&control, "the mirror in sync again", |c| c.mirror_in_sync);
    println!(
        "idle primary: its mirror in sync {:?} after it came back",
        back.elapsed()
    );
    let mut client = cluster.primary.client();
    let repl = info(&mut client, "replication");
    assert_eq!(
        field(&repl, "mnemo_repl_mirror_in_sync"),
        Some("1"),
        "{repl}"
    );
    assert_eq!(field(&repl, "mnemo_repl_full_copies"), Some("2"), "{repl}");
    drop(client);

    // The copy holds the writes made while it was away: the primary dies, and the mirror
    // takes over with every one of them.
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let failover = until_serving(cluster.promote_port, killed, &cluster.mirror.log);
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(cluster.promote_port, &acked);
}

#[test]
fn a_backup_moves_up_to_mirror_when_the_mirror_takes_over() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let backup_promote = free_port();
    let promote = backup_promote.to_string();
    let backup = MirrorProc::start_as(
        "backup",
        &dir.path().join("backup"),
        &secret,
        dir.path().join("backup.log"),
        &[
            "--etcd",
            &etcd.url,
            "--cluster",
            "tiers",
            "--promote-port",
            &promote,
        ],
    );
    let backup_addr = addr(backup.port);
    let cluster = Cluster::start_with(
        &etcd.url,
        dir.path(),
        "tiers",
        &["--backup", &backup_addr],
        &[],
    );
    let control = cluster.control(&etcd);
    until_config(&control, "the mirror in sync, its backup recorded", |c| {
        c.mirror_in_sync && c.backups == [backup_addr.clone()]
    });
    // The backup's copy of the mirror's image holds the mirror's store while it is sent (and
    // with it the primary's records: the mirror's known stall); the failover is timed once it
    // is over.
    until_log(&backup.log, "full copy received");

    let writers = Writers::start_named(cluster.primary.port, 2, "first");
    std::thread::sleep(Duration::from_millis(500));
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let mut acked = writers.finish();
    let failover = until_serving(cluster.promote_port, killed, &cluster.mirror.log);
    println!("first-tier failover, with a backup behind the mirror: {failover:?}");
    assert!(
        failover < FAILOVER_MAX,
        "failover took {failover:?}:\n{}",
        cluster.mirror.log_text()
    );
    check_all(cluster.promote_port, &acked);
    // The same swap made the backup the new primary's mirror; it gets a full copy (no
    // write needed) and the primary tier is whole again.
    let config = until_config(&control, "the backup in sync as mirror", |c| {
        c.epoch == 2 && c.mirror_in_sync
    });
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["repl", "status", "--etcd", &etcd.url, "--cluster", "tiers"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("mirror: {backup_addr}"))
            && text.contains("mirror_in_sync: true")
            && text.contains(&format!("registered_nodes: {backup_addr} (backup)")),
        "{text}"
    );
    assert_eq!(
        (
            config.primary.as_str(),
            config.mirror.as_deref(),
            config.mode.as_str()
        ),
        (
            addr(cluster.promote_port).as_str(),
            Some(backup_addr.as_str()),
            "sync"
        ),
        "{config:?}"
    );

    // Writes go to both; then the promoted mirror dies too, and the backup serves them all.
    let writers = Writers::start_named(cluster.promote_port, 2, "second");
    std::thread::sleep(Duration::from_millis(500));
    signal(cluster.mirror.child.id(), rustix::process::Signal::KILL);
    let killed = Instant::now();
    acked.extend(writers.finish());
    let failover = until_serving(backup_promote, killed, &backup.log);
    println!(
        "second-tier failover: the backup serves {failover:?} after the second primary died; {} writes",
        acked.len()
    );
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(backup_promote, &acked);
    let (config, _) = control.load().unwrap().unwrap();
    assert_eq!(
        (config.epoch, config.primary.as_str()),
        (3, addr(backup_promote).as_str())
    );
}

#[test]
fn a_three_member_etcd_loses_its_leader_without_harm_and_without_a_majority_fences_the_primary() {
    let _serial = one_at_a_time();
    let Some(mut etcd) = EtcdCluster::start(3) else {
        return;
    };
    let dir = shm_dir();
    let urls = etcd.urls();
    // The mirror has the members as one comma-separated list, the primary as repeated flags.
    let mut primary_extra: Vec<&str> = Vec::new();
    for m in &etcd.members {
        primary_extra.extend(["--etcd", m.url.as_str()]);
    }
    let mut cluster = Cluster::start_with(&urls, dir.path(), "three", &[], &primary_extra);
    let control = connect(&urls, "three");
    until_in_sync(&control);

    // The leader dies while clients write: the primary keeps its lease and its role.
    let writers = Writers::start_named(cluster.primary.port, 2, "a");
    std::thread::sleep(Duration::from_millis(400));
    let leader = etcd.leader().expect("the cluster has a leader");
    etcd.members[leader].kill();
    std::thread::sleep(Duration::from_millis(1500));
    let mut acked = writers.finish();
    let writers = Writers::start_named(cluster.primary.port, 1, "b");
    std::thread::sleep(Duration::from_millis(300));
    let later = writers.finish();
    assert!(
        !later.is_empty(),
        "no write acknowledged after the leader's loss:\n{}",
        cluster.primary.log_text()
    );
    acked.extend(later);
    let (config, _) = control.load().unwrap().unwrap();
    assert_eq!(
        (config.epoch, config.mirror_in_sync),
        (1, true),
        "{config:?}"
    );

    // The primary dies: the mirror takes over through the two members left.
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let failover = until_serving(cluster.promote_port, killed, &cluster.mirror.log);
    println!("failover with one etcd member of three dead: {failover:?}");
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(cluster.promote_port, &acked);

    // One more member dies: no majority, no configuration store. The new primary stops
    // acknowledging once its lease's last renewal ran out, rather than acking on.
    let other = etcd
        .members
        .iter()
        .position(|m| m.running())
        .expect("a member left");
    let writers = Writers::start_named(cluster.promote_port, 1, "c");
    std::thread::sleep(Duration::from_millis(200));
    etcd.members[other].kill();
    let lost = Instant::now();
    let _ = writers.until_refused(Duration::from_secs(5));
    let refused = lost.elapsed();
    println!("without a majority, the primary stopped acknowledging {refused:?} later");
    let status = cluster.mirror.child.wait().unwrap();
    assert!(!status.success(), "the fenced primary exited cleanly");
    let log = cluster.mirror.log_text();
    assert!(log.contains("fenced"), "{log}");
}

#[test]
fn a_primary_cut_off_from_etcd_stops_acknowledging_before_its_lease_can_expire() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let mut cluster = Cluster::start(&etcd, dir.path(), "fence");
    let control = cluster.control(&etcd);
    until_in_sync(&control);

    // etcd stops (SIGSTOP) while clients write: the primary can no longer renew its lease.
    // It must stop acknowledging before the lease may have expired at the store (at most a
    // TTL, 1 s, after its last renewal), though etcd has not said anything.
    let writers = Writers::start(cluster.primary.port, 2);
    std::thread::sleep(Duration::from_millis(500));
    signal(etcd.pid(), rustix::process::Signal::STOP);
    let stopped = Instant::now();
    let last = {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !writers.threads.iter().all(|t| t.is_finished()) {
            assert!(Instant::now() < deadline, "still acknowledging 5 s later");
            std::thread::sleep(Duration::from_millis(10));
        }
        writers.last_ack().expect("writes were acknowledged")
    };
    let acked = writers.finish();
    let after = last.saturating_duration_since(stopped);
    println!("etcd stopped: the last write was acknowledged {after:?} later");
    assert!(
        after < Duration::from_secs(1),
        "a write was acknowledged {after:?} after etcd stopped, when the lease may have expired"
    );
    let status = cluster.primary.wait_exit();
    assert!(!status.success(), "the fenced primary exited cleanly");
    let log = cluster.primary.log_text();
    assert!(log.contains("fenced"), "{log}");

    // etcd resumes: the lease expires there, the mirror takes over with every write.
    signal(etcd.pid(), rustix::process::Signal::CONT);
    let resumed = Instant::now();
    let failover = until_serving(cluster.promote_port, resumed, &cluster.mirror.log);
    println!("the mirror serves {failover:?} after etcd resumed");
    check_all(cluster.promote_port, &acked);
}

/// A pool on a disk keeps its writes in a write-ahead file (`POOL.wal`) until checkpointed;
/// under etcd the pool's policy is the replication switch, which does not replay that file.
/// A pool that did not close cleanly with such a file is refused under etcd (its writes
/// would be lost), and served once it was closed cleanly without etcd.
#[test]
fn a_disk_pool_with_a_write_ahead_file_to_replay_is_refused_under_etcd() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("mnemo-etcd-wal")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let pool = dir.path().join("kv.pool");
    let server = Server::start(&pool, &["--size", "8M"]);
    let mut client = server.client();
    assert!(matches!(
        client.call(&["SET", "k", "v"]).unwrap(),
        Reply::Simple(_)
    ));
    drop(client);
    server.kill();
    let mut wal = pool.as_os_str().to_owned();
    wal.push(".wal");
    if !Path::new(&wal).exists() {
        eprintln!(
            "SKIPPED: {} is not on a page-cache file system (no write-ahead file)",
            dir.path().display()
        );
        return;
    }
    let etcd_args = [
        "--etcd",
        etcd.url.as_str(),
        "--cluster",
        "wal",
        "--size",
        "8M",
    ];
    let log = dir.path().join("refused.log");
    let status = serve_command(&pool, free_port(), &log, &etcd_args)
        .status()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "served:\n{text}");
    assert!(text.contains("write-ahead file"), "{text}");

    // Served once without etcd (the file replayed) and stopped cleanly, it is accepted.
    let server = Server::start(&pool, &["--size", "8M"]);
    assert!(server.terminate().success());
    let server = Server::start(&pool, &etcd_args);
    let mut client = server.client();
    match client.call(&["GET", "k"]).unwrap() {
        Reply::Bulk(v) => assert_eq!(&v[..], b"v"),
        other => panic!("the write is gone: {other:?}"),
    }
}

/// Wait (at most 30 s) until the read port at `port` (a backup's `--read-port`) holds every
/// key of `acked` with its value.
fn until_holds(port: u16, acked: &[(String, String)], log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut client = Client::connect(port).unwrap();
    loop {
        let missing = acked
            .chunks(256)
            .map(|chunk| {
                let commands: Vec<Vec<&str>> =
                    chunk.iter().map(|(k, _)| vec!["GET", k.as_str()]).collect();
                let replies = client.pipeline(&commands).unwrap();
                chunk
                    .iter()
                    .zip(replies)
                    .filter(|((_, v), reply)| *reply != Reply::Bulk(v.clone().into()))
                    .count()
            })
            .sum::<usize>();
        if missing == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} writes never reached the backup:\n{}",
            acked.len(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two backups behind the mirror. When the mirror takes over, the first backup moves up to
/// mirror and the configuration still lists the second: the moved-up node restarts as a
/// mirror feeding it (before, nobody fed it). The second backup's read port then shows the
/// writes made on the new primary. Then the new primary dies too: the moved-up node serves
/// every write, and the second backup, named its mirror in the same swap, is brought in sync
/// and, when that primary dies as well, serves every write in its turn.
#[test]
fn the_old_mirrors_other_backups_are_fed_after_a_backup_moves_up() {
    let _serial = one_at_a_time();
    let Some(etcd) = EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let start_backup = |name: &str, promote: u16, reads: u16| {
        MirrorProc::start_as(
            "backup",
            &dir.path().join(name),
            &secret,
            dir.path().join(format!("{name}.log")),
            &[
                "--etcd",
                &etcd.url,
                "--cluster",
                "orphans",
                "--promote-port",
                &promote.to_string(),
                "--read-port",
                &reads.to_string(),
            ],
        )
    };
    let (one_promote, two_promote, two_reads) = (free_port(), free_port(), free_port());
    let one = start_backup("one", one_promote, free_port());
    let two = start_backup("two", two_promote, two_reads);
    let (one_addr, two_addr) = (addr(one.port), addr(two.port));
    let cluster = Cluster::start_with(
        &etcd.url,
        dir.path(),
        "orphans",
        &["--backup", &one_addr, "--backup", &two_addr],
        &[],
    );
    let control = cluster.control(&etcd);
    until_config(&control, "the mirror in sync, both backups recorded", |c| {
        c.mirror_in_sync && c.backups == [one_addr.clone(), two_addr.clone()]
    });
    until_log(&one.log, "full copy received");
    until_log(&two.log, "full copy received");

    // The primary dies: the mirror serves, the first backup moves up.
    let writers = Writers::start_named(cluster.primary.port, 2, "first");
    std::thread::sleep(Duration::from_millis(500));
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let mut acked = writers.finish();
    let failover = until_serving(cluster.promote_port, killed, &cluster.mirror.log);
    println!("first failover: {failover:?}");
    check_all(cluster.promote_port, &acked);
    let config = until_config(&control, "the first backup in sync as mirror", |c| {
        c.epoch == 2 && c.mirror_in_sync
    });
    assert_eq!(
        (config.mirror.as_deref(), config.backups.clone()),
        (Some(one_addr.as_str()), vec![two_addr.clone()]),
        "{config:?}"
    );
    until_log(&one.log, "this backup moved up to mirror");

    // Writes on the new primary reach the second backup, through the moved-up mirror only.
    let writers = Writers::start_named(cluster.promote_port, 2, "second");
    std::thread::sleep(Duration::from_millis(800));
    let second = writers.finish();
    assert!(!second.is_empty());
    until_holds(two_reads, &second, &two.log);
    acked.extend(second);
    println!(
        "the second backup holds the {} writes of the new primary",
        acked.len()
    );

    // The second primary dies: the moved-up node serves every write, the second backup is its
    // mirror (no backups left to feed: it does not restart).
    signal(cluster.mirror.child.id(), rustix::process::Signal::KILL);
    let killed = Instant::now();
    let failover = until_serving(one_promote, killed, &one.log);
    println!("second failover: {failover:?}");
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(one_promote, &acked);
    let config = until_config(&control, "the second backup in sync as mirror", |c| {
        c.epoch == 3 && c.mirror_in_sync
    });
    assert_eq!(
        (config.primary.clone(), config.mirror.clone()),
        (addr(one_promote), Some(two_addr.clone())),
        "{config:?}"
    );
    let writers = Writers::start_named(one_promote, 2, "third");
    std::thread::sleep(Duration::from_millis(500));
    signal(one.child.id(), rustix::process::Signal::KILL);
    let killed = Instant::now();
    acked.extend(writers.finish());
    let failover = until_serving(two_promote, killed, &two.log);
    println!("third failover: {failover:?}; {} writes", acked.len());
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(two_promote, &acked);
    assert!(
        !two.log_text().contains("moved up to mirror: restarting"),
        "the last backup had no backup to feed"
    );
}
