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

use mnemo_repl_etcd::testing::EtcdServer;
use mnemo_repl_etcd::Control;
use mnemo_resp::Reply;
use support::repl::{field, free_port, info, signal, value, write_secret, MirrorProc};
use support::{serve_command, shm_dir, Client, Server};

/// The target: the mirror serves within this long after the primary is gone.
const FAILOVER_MAX: Duration = Duration::from_secs(3);

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
        let secret = write_secret(dir, "repl.secret", "a shared secret for this test\n");
        let promote_port = free_port();
        let mirror = MirrorProc::start_as(
            "mirror",
            &dir.join("mirror"),
            &secret,
            dir.join("mirror.log"),
            &[
                "--etcd",
                &etcd.url,
                "--cluster",
                name,
                "--promote-port",
                &promote_port.to_string(),
            ],
        );
        let primary_args: Vec<String> = [
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-mode",
            "sync",
            "--repl-secret-file",
            secret.to_str().unwrap(),
            "--etcd",
            &etcd.url,
            "--cluster",
            name,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
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
        Control::connect(
            std::slice::from_ref(&etcd.url),
            &self.name,
            Duration::from_secs(2),
        )
        .unwrap()
    }
}

/// Wait until etcd records the mirror in sync (the primary's full copy acknowledged).
fn until_in_sync(control: &Control) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((config, _)) = control.load().unwrap() {
            if config.mirror_in_sync {
                assert_eq!(config.epoch, 1, "{config:?}");
                return;
            }
        }
        assert!(Instant::now() < deadline, "the mirror never got in sync");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writers SETting without pause, each recording the keys acknowledged, until an error.
struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<(String, String)>>>,
}

impl Writers {
    fn start(port: u16, count: usize) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..count)
            .map(|w| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut client = Client::connect(port).unwrap();
                    let mut acked = Vec::new();
                    for i in 0.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let (key, v) = (format!("w{w}-k{i}"), value(i));
                        match client.call(&["SET", key.as_str(), v.as_str()]) {
                            Ok(Reply::Simple(s)) if s.as_ref() == b"OK" => acked.push((key, v)),
                            Ok(Reply::Error(_)) | Err(_) => break,
                            Ok(other) => panic!("SET: {other:?}"),
                        }
                    }
                    acked
                })
            })
            .collect();
        Writers { stop, threads }
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
