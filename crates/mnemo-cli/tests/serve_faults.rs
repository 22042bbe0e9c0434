//! Fault schedules with real parts: a three-member etcd whose members each run in a network
//! namespace of their own (support::netns), `mnemo serve --mirror --etcd` and `mnemo mirror
//! serve --etcd` as processes here. Members are cut off from their peers with iptables rules
//! in their own namespaces (they still accept clients' requests, and cannot answer them
//! without a quorum), while clients write and record when each write was acknowledged. After
//! every failover the checker asks the new primary for every acknowledged write (sync mode:
//! each one must be there) and the configuration for its epoch; a primary that went on
//! acknowledging after its mirror took over would show as a write the new primary lacks.
//!
//! * A member cut off from the two others, each in turn, the leader first, then one way,
//!   while clients write: the primary renews its lease through the members left and keeps
//!   acknowledging; the mirror never takes over.
//! * The leader cut off at the moment the primary dies: the mirror takes over through the two
//!   others within 3 s. Every member cut off from every other (no quorum anywhere) while the
//!   primary writes: it stops acknowledging within its lease's TTL and exits, the mirror does
//!   not take over while there is no quorum, and does once the cuts heal.
//! * The primary on the minority side of an etcd partition (it knows one member, cut off
//!   from the two others), its mirror on the majority's: the primary stops acknowledging and
//!   exits, the mirror takes over with every write.
//! * A backup stopped (SIGSTOP), then partitioned, during its own full copy: in `syncseceth`
//!   the primary goes on acknowledging (held at most the 500 ms hold), in `syncsec` it is
//!   held a bounded time (the copy is sent under the mirror's lock); the backup catches up
//!   once back, and holds a prefix of history.
//! * `mnemo repl status` prints the mode the primary recorded (`syncseceth`, `syncdisk`).
//!
//! Needs root, iproute2, iptables and etcd: skipped (loudly) without them, a failure under
//! `MNEMO_REQUIRE_TOOLS=1`. The tests run one at a time: each times failovers.

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mnemo_repl_etcd::Control;
use mnemo_resp::Reply;
use support::netns::{available, NsEtcd};
use support::repl::{
    field, free_port, info, signal, until_config, value, write_secret, MirrorProc,
};
use support::{shm_dir, Client, Server};

/// The target: the mirror serves within this long after the primary is gone.
const FAILOVER_MAX: Duration = Duration::from_secs(3);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A primary and its mirror under etcd at `members` (sync mode): the mirror is given the
/// members as one comma-separated list, the primary as repeated `--etcd`.
struct Cluster {
    mirror: MirrorProc,
    primary: Server,
    promote_port: u16,
    control: Control,
}

impl Cluster {
    fn start(dir: &Path, members: &[String], name: &str) -> Cluster {
        Cluster::start_split(dir, members, members, name)
    }

    /// [`Cluster::start`] with the primary given only `primary_members`.
    fn start_split(
        dir: &Path,
        primary_members: &[String],
        members: &[String],
        name: &str,
    ) -> Cluster {
        let secret = write_secret(dir, "repl.secret", "a shared secret for this test\n");
        let urls = members.join(",");
        let promote_port = free_port();
        let promote = promote_port.to_string();
        let mirror = MirrorProc::start_as(
            "mirror",
            &dir.join("mirror"),
            &secret,
            dir.join("mirror.log"),
            &[
                "--etcd",
                &urls,
                "--cluster",
                name,
                "--promote-port",
                &promote,
                "--repl-mode",
                "sync",
            ],
        );
        let mirror_addr = format!("127.0.0.1:{}", mirror.port);
        let mut args = vec![
            "--mirror",
            &mirror_addr,
            "--repl-mode",
            "sync",
            "--repl-secret-file",
            secret.to_str().unwrap(),
            "--cluster",
            name,
        ];
        for m in primary_members {
            args.extend(["--etcd", m.as_str()]);
        }
        let primary = Server::start(&dir.join("primary").join("kv.pool"), &args);
        let control = Control::connect(members, name, Duration::from_secs(2)).unwrap();
        until_config(&control, "the mirror in sync", |c| c.mirror_in_sync);
        Cluster {
            mirror,
            primary,
            promote_port,
            control,
        }
    }
}

/// One acknowledged write: its key, value, and when its acknowledgement arrived.
type Acked = (String, String, Instant);

/// Clients SETting without pause, each recording what was acknowledged and when, until an
/// error or a closed connection (or [`Writers::finish`]).
struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<Vec<Acked>>>,
    acks: Arc<Mutex<Vec<Instant>>>,
}

impl Writers {
    fn start(port: u16, count: usize, prefix: &str) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..count)
            .map(|w| {
                let (prefix, stop, acks) = (prefix.to_string(), stop.clone(), acks.clone());
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
                                let now = Instant::now();
                                acks.lock().unwrap().push(now);
                                acked.push((key, v, now));
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
            acks,
        }
    }

    /// The acknowledgements so far, in time order.
    fn ack_times(&self) -> Vec<Instant> {
        let mut t = self.acks.lock().unwrap().clone();
        t.sort();
        t
    }

    fn all_stopped(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    fn finish(self) -> Vec<Acked> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    }
}

/// The longest time without an acknowledgement within `[from, to]` (its ends counted).
fn longest_pause(acks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut last = from;
    let mut longest = Duration::ZERO;
    for &t in acks.iter().filter(|&&t| t > from && t <= to) {
        longest = longest.max(t - last);
        last = t;
    }
    longest.max(to.saturating_duration_since(last))
}

/// Wait until a server answers PING on `port`; the time since `since`.
fn until_serving(port: u16, since: Instant, log: &Path, max: Duration) -> Duration {
    let deadline = Instant::now() + max;
    loop {
        if let Ok(mut c) = Client::connect(port) {
            if c.call(&["PING"]).is_ok() {
                return since.elapsed();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the mirror did not serve within {max:?}:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The checker: every acknowledged write is on the server at `port` with its value.
fn check_all(port: u16, acked: &[Acked]) {
    let mut client = Client::connect(port).unwrap();
    for chunk in acked.chunks(256) {
        let commands: Vec<Vec<&str>> = chunk
            .iter()
            .map(|(k, _, _)| vec!["GET", k.as_str()])
            .collect();
        let replies = client.pipeline(&commands).unwrap();
        for ((key, v, _), reply) in chunk.iter().zip(replies) {
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

/// Watches the configuration from the test: when each epoch was first seen (an upper bound
/// of when it was committed).
struct EpochWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(u64, Instant)>>>,
}

impl EpochWatch {
    fn start(members: &[String], name: &str) -> EpochWatch {
        let control = Control::connect(members, name, Duration::from_secs(2)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen: Vec<(u64, Instant)> = Vec::new();
            while !done.load(Ordering::Relaxed) {
                if let Ok(Some((config, _))) = control.load() {
                    if seen.last().is_none_or(|(e, _)| *e != config.epoch) {
                        seen.push((config.epoch, Instant::now()));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        });
        EpochWatch {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<(u64, Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Schedules (a) and (b): one member at a time, the leader first, cut off from the two others
/// for 3 s while two clients write; then one way (what it sends its peers dropped), the
/// leader and a follower. The member still accepts the primary's requests (and its lease's
/// keep-alives) but cannot answer them. The primary must renew its lease through the members
/// left and keep acknowledging; its configuration stays at epoch 1 (the mirror never takes
/// over). At the end the primary is killed and the mirror takes over with every write.
#[test]
fn an_etcd_member_cut_off_from_its_peers_does_not_stop_the_primary() {
    if !available(true) {
        return;
    }
    let _serial = serial();
    let etcd = NsEtcd::start(8);
    let members: Vec<String> = etcd.members.iter().map(|m| m.url.clone()).collect();
    let dir = shm_dir();
    let cluster = Cluster::start(dir.path(), &members, "cut-member");
    let watch = EpochWatch::start(&members, "cut-member");
    let writers = Writers::start(cluster.primary.port, 2, "w");
    std::thread::sleep(Duration::from_millis(500));

    let leader = etcd.until_stable();
    // Both ways: the leader, then each follower; then one way (what the member sends its
    // peers dropped): the leader as it is then, and a follower.
    let mut order: Vec<(usize, bool)> = std::iter::once(leader)
        .chain((0..3).filter(|&i| i != leader))
        .map(|i| (i, true))
        .collect();
    order.extend([(usize::MAX, false), (usize::MAX - 1, false)]);
    let mut windows = Vec::new();
    for (i, both) in order {
        let i = match i {
            usize::MAX => etcd.until_stable(),
            n if n == usize::MAX - 1 => (etcd.until_stable() + 1) % 3,
            n => n,
        };
        if both {
            etcd.isolate(i);
        } else {
            etcd.isolate_one_way(i);
        }
        let cut = Instant::now();
        std::thread::sleep(Duration::from_secs(3));
        etcd.heal();
        let healed = Instant::now();
        windows.push((i, both, cut, healed));
        // The member rejoins (pre-vote keeps the term it raised alone from forcing an
        // election): the next cut comes once the three agree on a leader again.
        std::thread::sleep(Duration::from_millis(1500));
        etcd.until_stable();
    }
    let acks = writers.ack_times();
    let stopped = writers.all_stopped();
    let acked = writers.finish();
    let seen = watch.finish();
    for &(i, both, cut, healed) in &windows {
        let during = acks.iter().filter(|&&t| t > cut && t <= healed).count();
        let pause = longest_pause(&acks, cut, healed);
        println!(
            "member {i} cut off {} for {:?}: {during} writes acknowledged, the longest pause {pause:?}",
            if both { "both ways" } else { "one way" },
            healed - cut
        );
    }
    println!("the leader at the first cut: member {leader}");
    println!(
        "epochs seen: {:?}",
        seen.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    let log = cluster.primary.log_text();
    assert!(
        !stopped,
        "the primary stopped acknowledging:\n{}\nthe members' elections:\n{}",
        &log[log.len().saturating_sub(4000)..],
        etcd.elections()
    );
    for &(i, _, cut, healed) in &windows {
        let pause = longest_pause(&acks, cut, healed);
        assert!(
            pause < Duration::from_secs(1),
            "member {i} cut off: no acknowledgement for {pause:?} (the primary could not renew its lease through the others)\nthe members' elections:\n{}",
            etcd.elections()
        );
    }
    assert!(
        seen.iter().all(|&(e, _)| e == 1),
        "the configuration changed: {seen:?}"
    );

    // The primary dies: the mirror takes over with every acknowledged write.
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let failover = until_serving(
        cluster.promote_port,
        killed,
        &cluster.mirror.log,
        Duration::from_secs(10),
    );
    println!(
        "failover after the cuts: {failover:?}; {} writes",
        acked.len()
    );
    assert!(failover < FAILOVER_MAX, "failover took {failover:?}");
    check_all(cluster.promote_port, &acked);
}

/// Kill the primary of a fresh cluster `name` at the moment etcd member `cut` (chosen by
/// `pick` from the leader's index) is cut off from the two others; wait until the mirror
/// serves, check every write there; the time from the kill.
fn failover_with_a_member_cut(
    etcd: &NsEtcd,
    members: &[String],
    dir: &Path,
    name: &str,
    pick: impl Fn(usize) -> usize,
) -> Duration {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let cluster = Cluster::start(&dir, members, name);
    let writers = Writers::start(cluster.primary.port, 2, "w");
    std::thread::sleep(Duration::from_millis(500));
    let leader = etcd.until_stable();
    let cut = pick(leader);
    etcd.isolate(cut);
    signal(cluster.primary.pid() as u32, rustix::process::Signal::KILL);
    let killed = Instant::now();
    let acked = writers.finish();
    let failover = until_serving(
        cluster.promote_port,
        killed,
        &cluster.mirror.log,
        Duration::from_secs(10),
    );
    println!(
        "{name}: member {cut} cut off (the leader was {leader}) as the primary died: the mirror serves {failover:?} later; {} writes",
        acked.len()
    );
    assert!(acked.len() > 20, "only {} writes", acked.len());
    check_all(cluster.promote_port, &acked);
    etcd.heal();
    let config = until_config(&cluster.control, "epoch 2", |c| c.epoch == 2);
    assert_eq!(
        config.primary,
        format!("127.0.0.1:{}", cluster.promote_port)
    );
    etcd.until_stable();
    failover
}

/// Schedule (c): an etcd member cut off from the two others at the moment the primary is
/// killed; the mirror's requests may land on it (they are spread over every member). A
/// follower cut off: the mirror takes over through the two others within the 3 s target.
/// The leader cut off: the two others elect a new leader, which extends every lease by its
/// TTL and an election timeout (etcd's rule, so that no lease expires for want of a leader),
/// so the takeover comes later, within 4 s. Both with every acknowledged write. Then no
/// quorum anywhere (every member cut off from every other) under a third cluster's primary:
/// it stops acknowledging and exits ("fenced"); its mirror does not take over while no
/// quorum is reachable, and does, with every write, once the cuts heal.
#[test]
fn the_mirror_takes_over_through_the_members_left_and_not_without_a_quorum() {
    if !available(true) {
        return;
    }
    let _serial = serial();
    let etcd = NsEtcd::start(9);
    let members: Vec<String> = etcd.members.iter().map(|m| m.url.clone()).collect();
    let dir = shm_dir();
    let follower =
        failover_with_a_member_cut(&etcd, &members, dir.path(), "follower-cut", |l| (l + 1) % 3);
    assert!(follower < FAILOVER_MAX, "failover took {follower:?}");
    let leader = failover_with_a_member_cut(&etcd, &members, dir.path(), "leader-cut", |l| l);
    assert!(
        leader < FAILOVER_MAX + Duration::from_secs(1),
        "failover took {leader:?}"
    );

    // No quorum anywhere.
    let third = dir.path().join("no-quorum");
    std::fs::create_dir_all(&third).unwrap();
    let mut cluster = Cluster::start(&third, &members, "no-quorum");
    let writers = Writers::start(cluster.primary.port, 2, "n");
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..3 {
        etcd.isolate(i);
    }
    let cut = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !writers.all_stopped() {
        assert!(
            Instant::now() < deadline,
            "the primary still acknowledges 5 s after etcd lost its quorum"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let last = *writers
        .ack_times()
        .last()
        .expect("writes were acknowledged");
    let acked = writers.finish();
    let after = last.saturating_duration_since(cut);
    println!("no quorum: the last write was acknowledged {after:?} after the cut");
    // The leader, cut off, renews leases by itself until it steps down (it checks for a
    // quorum every election timeout: at most 800 ms here); the last renewal holds 0.9 s.
    assert!(
        after < Duration::from_millis(1800),
        "acknowledged {after:?} after the cut"
    );
    let status = cluster.primary.wait_exit();
    assert!(!status.success(), "the fenced primary exited cleanly");
    let log = cluster.primary.log_text();
    assert!(log.contains("fenced") || log.contains("lease"), "{log}");
    // The mirror cannot take over: no quorum to swap the configuration.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        Client::connect(cluster.promote_port).is_err(),
        "the mirror took over without a quorum"
    );
    etcd.heal();
    let healed = Instant::now();
    let took = until_serving(
        cluster.promote_port,
        healed,
        &cluster.mirror.log,
        Duration::from_secs(20),
    );
    println!("the quorum back: the mirror serves {took:?} later");
    check_all(cluster.promote_port, &acked);
    let config = until_config(&cluster.control, "epoch 2", |c| c.epoch == 2);
    assert_eq!(
        config.primary,
        format!("127.0.0.1:{}", cluster.promote_port)
    );
}

/// The primary and its mirror on two sides of an etcd partition: the primary knows only one
/// member (a follower), which is cut off from the two others while clients write; the
/// mirror knows all three. The primary can no longer renew its lease: it stops acknowledging
/// and exits; the lease expires at the majority and the mirror takes over through it, with
/// every write the old primary acknowledged, the last of them before the new primary served.
#[test]
fn a_primary_on_the_minority_side_of_an_etcd_partition_gives_way_to_its_mirror() {
    if !available(true) {
        return;
    }
    let _serial = serial();
    let etcd = NsEtcd::start(10);
    let members: Vec<String> = etcd.members.iter().map(|m| m.url.clone()).collect();
    let alone = (etcd.until_stable() + 1) % 3;
    let dir = shm_dir();
    let cluster = Cluster::start_split(
        dir.path(),
        std::slice::from_ref(&members[alone]),
        &members,
        "minority",
    );
    let mut primary = cluster.primary;
    let writers = Writers::start(primary.port, 2, "w");
    std::thread::sleep(Duration::from_millis(500));
    etcd.isolate(alone);
    let cut = Instant::now();
    let serving = until_serving(
        cluster.promote_port,
        cut,
        &cluster.mirror.log,
        Duration::from_secs(10),
    );
    let served_at = cut + serving;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !writers.all_stopped() {
        assert!(
            Instant::now() < deadline,
            "the old primary still acknowledges 5 s after the new one serves"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let last = *writers
        .ack_times()
        .last()
        .expect("writes were acknowledged");
    let acked = writers.finish();
    println!(
        "primary on the minority side: its last acknowledgement {:?} after the cut, the mirror serving {serving:?} after it; {} writes",
        last.saturating_duration_since(cut),
        acked.len()
    );
    assert!(
        last < served_at,
        "the old primary acknowledged a write {:?} after the new one served",
        last - served_at
    );
    assert!(
        serving < Duration::from_secs(4),
        "failover took {serving:?}"
    );
    let status = primary.wait_exit();
    assert!(!status.success(), "the old primary exited cleanly");
    let log = primary.log_text();
    assert!(log.contains("fenced") || log.contains("lease"), "{log}");
    check_all(cluster.promote_port, &acked);
    etcd.heal();
    let config = until_config(&cluster.control, "epoch 2", |c| c.epoch == 2);
    assert_eq!(
        config.primary,
        format!("127.0.0.1:{}", cluster.promote_port)
    );
}

/// `mnemo repl status` prints the mode the primary recorded in etcd: `syncseceth` (a mirror
/// on tmpfs) and `syncdisk` (the mirror's image in a file on a disk, `--disk-image`).
#[test]
fn repl_status_prints_the_recorded_mode() {
    let _serial = serial();
    let Some(etcd) = mnemo_repl_etcd::testing::EtcdServer::start() else {
        return;
    };
    let dir = shm_dir();
    let disk = tempfile::Builder::new()
        .prefix("mnemo-status-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    assert!(
        !mnemo_repl::mirror::on_memory_fs(disk.path()).unwrap(),
        "the target directory is on tmpfs: this test needs a disk"
    );
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    for (mode, extra) in [
        ("syncseceth", None),
        ("syncdisk", Some(disk.path().join("mirror.image"))),
    ] {
        let name = format!("status-{mode}");
        let mut mirror_args = vec![
            "--etcd".to_string(),
            etcd.url.clone(),
            "--cluster".into(),
            name.clone(),
            "--promote-port".into(),
            free_port().to_string(),
        ];
        if let Some(image) = &extra {
            mirror_args.extend(["--disk-image".into(), image.to_str().unwrap().into()]);
        }
        let mirror_args: Vec<&str> = mirror_args.iter().map(String::as_str).collect();
        let mirror = MirrorProc::start_as(
            "mirror",
            &dir.path().join(&name),
            &secret,
            dir.path().join(format!("{name}.log")),
            &mirror_args,
        );
        let mirror_addr = format!("127.0.0.1:{}", mirror.port);
        let primary = Server::start(
            &dir.path().join(format!("{name}-primary")).join("kv.pool"),
            &[
                "--mirror",
                &mirror_addr,
                "--repl-mode",
                mode,
                "--repl-secret-file",
                secret.to_str().unwrap(),
                "--etcd",
                &etcd.url,
                "--cluster",
                &name,
            ],
        );
        let control = Control::connect(
            std::slice::from_ref(&etcd.url),
            &name,
            Duration::from_secs(2),
        )
        .unwrap();
        until_config(&control, "the mirror in sync", |c| c.mirror_in_sync);
        let mut client = primary.client();
        assert!(matches!(
            client.call(&["SET", "k", "v"]).unwrap(),
            Reply::Simple(_)
        ));
        let text = info(&mut client, "replication");
        assert_eq!(field(&text, "mnemo_repl_mode"), Some(mode), "{text}");
        let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(["repl", "status", "--etcd", &etcd.url, "--cluster", &name])
            .output()
            .unwrap();
        let status = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            status.lines().any(|l| l == format!("mode: {mode}")),
            "{status}"
        );
        assert!(status.contains("mirror_in_sync: true"), "{status}");
        assert!(
            status.contains(&format!("mirror: {mirror_addr}")),
            "{status}"
        );
        println!("{status}");
    }
}

/// A 16 KiB value for key `f{j}`.
fn fill(j: u64) -> String {
    format!("{j:08}").repeat(2048)
}

/// One client writing k0, k1, ... in order (each with its `value`), 2 ms apart, recording
/// when each was acknowledged, until stopped.
struct OrderedWriter {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Instant>>>,
    thread: std::thread::JoinHandle<u64>,
}

impl OrderedWriter {
    fn start(port: u16) -> OrderedWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let (done, times) = (stop.clone(), acks.clone());
        let thread = std::thread::spawn(move || {
            let mut client = Client::connect(port).unwrap();
            let mut next = 0u64;
            while !done.load(Ordering::Relaxed) {
                let key = format!("k{next}");
                let reply = client.call(&["SET", key.as_str(), value(next).as_str()]);
                assert!(matches!(reply, Ok(Reply::Simple(_))), "{key}: {reply:?}");
                times.lock().unwrap().push(Instant::now());
                next += 1;
                // About 400 writes a second: a stream of records the backup's link carries
                // (unpaced, this client outruns the test's link, and the backup never catches up).
                std::thread::sleep(Duration::from_millis(2));
            }
            next
        });
        OrderedWriter { stop, acks, thread }
    }

    fn ack_times(&self) -> Vec<Instant> {
        self.acks.lock().unwrap().clone()
    }

    /// How many writes were acknowledged (k0 up to that, excluded).
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Schedule 2: a backup behind a mirror, in a network namespace behind 16 Mbit/s (tc tbf),
/// the primary in `syncseceth` with a 1 MiB threshold and a 500 ms hold. The backup is
/// restarted so that it gets a full copy of a few MiB (seconds over the link); during that
/// copy (500 ms into it) it is stopped (SIGSTOP) for 3 s, and, during the next one, cut off
/// both ways (iptables in its namespace) for 3 s. Each time the primary goes on
/// acknowledging (the copy comes from a snapshot; the longest pause bounded by the hold), and
/// the backup, continued or reconnected, catches up (INFO replication on the primary:
/// connected, holding what the primary had acknowledged). At the end the promoted backup
/// holds a prefix of the client's ordered writes: all of them.
#[test]
fn a_backup_stopped_or_cut_off_during_its_full_copy_catches_up_without_holding_the_primary() {
    backup_faults_during_a_copy("syncseceth", 4, Duration::from_secs(2));
}

/// The same in `syncsec`, whose copy to a backup is sent under the mirror's lock: the primary
/// is held while it is sent (the stall noted in replication.md), and a backup that stops
/// reading or is cut off holds it until it reads again or the send times out (3 s without
/// progress), not until TCP gives up, minutes later; the copy made after the cut healed
/// holds it again for its length (the longest pause, from the first copy's start until the
/// backup caught up: 6-9 s here).
#[test]
fn in_syncsec_a_backup_stopped_or_cut_off_during_its_copy_holds_the_primary_one_send_timeout() {
    backup_faults_during_a_copy("syncsec", 5, Duration::from_secs(20));
}

fn backup_faults_during_a_copy(mode: &str, slot: u32, max_pause: Duration) {
    if !available(false) {
        return;
    }
    let _serial = serial();
    let ns = support::netns::Netns::create(slot).expect("network namespace");
    ns.rate_limit("16mbit");
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let backup_dir = dir.path().join("backup");
    let backup_log = dir.path().join("backup.log");
    let start_backup = |port: Option<u16>| {
        let port = port.unwrap_or_else(free_port);
        MirrorProc::start_on(
            Some((&ns.name, &ns.ns_addr)),
            port,
            "backup",
            &backup_dir,
            &secret,
            backup_log.clone(),
            &["--bind", &ns.ns_addr],
        )
    };
    let mut backup = start_backup(None);
    let backup_port = backup.port;
    let mirror = MirrorProc::start_as(
        "mirror",
        &dir.path().join("mirror"),
        &secret,
        dir.path().join("mirror.log"),
        &["--backup", &format!("{}:{backup_port}", ns.ns_addr)],
    );
    let primary = Server::start(
        &dir.path().join("primary").join("kv.pool"),
        &[
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-mode",
            mode,
            "--repl-backup-stall",
            "1M",
            "--repl-backup-stall-ms",
            "500",
            "--repl-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let mut client = primary.client();
    // Caught up: connected, after `copies` full copies at least, holding everything the
    // primary had acknowledged when the wait began (the writer may still be writing).
    let caught_up = |client: &mut Client, copies: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let text = info(client, "replication");
        let target: u64 = field(&text, "mnemo_repl_acked_id")
            .and_then(|v| v.parse().ok())
            .expect("mnemo_repl_acked_id");
        loop {
            let text = info(client, "replication");
            let backup = |name| support::repl::backup_field(&text, 0, name);
            if backup("connected") == Some(1)
                && backup("acked_id").is_some_and(|id| id >= target)
                && backup("copies").unwrap_or(0) >= copies
            {
                return text;
            }
            if Instant::now() > deadline {
                let tail = |p: &Path| {
                    let t = std::fs::read_to_string(p).unwrap_or_default();
                    t[t.len().saturating_sub(3000)..].to_string()
                };
                panic!(
                    "the backup did not catch up: {text}\nmirror:\n{}\nbackup:\n{}",
                    tail(&mirror.log),
                    tail(&backup_log)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // A few MiB in the image: a full copy lasts seconds over the link.
    let fills = 60u64;
    for j in 0..fills {
        let reply = client.call(&["SET", &format!("f{j}"), &fill(j)]).unwrap();
        assert!(matches!(reply, Reply::Simple(_)), "{reply:?}");
    }
    caught_up(&mut client, 1);
    let writer = OrderedWriter::start(primary.port);
    let until_copy_begins = || {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok((state, _)) = mnemo_repl::mirror::peek_state(&backup_dir) {
                if !state.complete {
                    return Instant::now();
                }
            }
            assert!(Instant::now() < deadline, "no full copy began");
            std::thread::sleep(Duration::from_millis(5));
        }
    };

    // Stopped (SIGSTOP), then cut off (iptables, both ways), 500 ms into its own copy, for
    // 3 s each.
    for stop in [true, false] {
        let fault = if stop { "stopped" } else { "cut off" };
        backup.kill();
        let copies = support::repl::backup_field(&info(&mut client, "replication"), 0, "copies")
            .unwrap_or(0);
        backup = start_backup(Some(backup_port));
        let began = until_copy_begins();
        std::thread::sleep(Duration::from_millis(500));
        let pid = backup.child.id();
        if stop {
            signal(pid, rustix::process::Signal::STOP);
        } else {
            ns.iptables(&["-A", "INPUT", "-j", "DROP"]);
            ns.iptables(&["-A", "OUTPUT", "-j", "DROP"]);
        }
        let faulted = Instant::now();
        std::thread::sleep(Duration::from_secs(3));
        if stop {
            signal(pid, rustix::process::Signal::CONT);
        } else {
            ns.iptables(&["-F"]);
        }
        let healed = Instant::now();
        let during = writer
            .ack_times()
            .iter()
            .filter(|&&t| t > faulted && t <= healed)
            .count();
        let text = caught_up(&mut client, copies + 1);
        // From the copy's start until the backup caught up.
        let pause = longest_pause(&writer.ack_times(), began, Instant::now());
        println!(
            "{mode}: backup {fault} {:?} into its copy for 3 s: {during} writes acknowledged meanwhile, the longest pause {pause:?}; caught up {:?} after the fault ended ({} copies)",
            faulted - began,
            healed.elapsed(),
            support::repl::backup_field(&text, 0, "copies").unwrap_or(0)
        );
        assert!(pause < max_pause, "{mode}: the primary was held {pause:?}");
        if max_pause < Duration::from_secs(3) {
            assert!(during > 100, "{during} writes while the backup was {fault}");
        }
    }

    let total = writer.finish();
    caught_up(&mut client, 0);
    drop(client);
    primary.kill();
    drop(mirror);
    backup.kill();
    let held = support::repl::promoted_prefix(&backup_dir, total);
    assert_eq!(held as u64, total, "the caught-up backup holds every write");
}
