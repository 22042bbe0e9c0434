//! Replication across network namespaces, with partitions and a slow link. Each test runs
//! its remote node in a namespace it creates (a veth pair on a /30 of its own in
//! 10.214.0.0/16; no other address is touched), the primary here. iptables rules go only
//! into that namespace, the tc qdisc only onto the test's own veth.
//!
//! * Partitions (both ways, then one way) cost one timeout each; the primary is back in sync
//!   with a full copy once the link heals, and the promoted mirror holds every acknowledged
//!   write.
//! * A partition during a full copy to the mirror (both ways, then one way) fails that copy
//!   within the link's timeout (the primary carries on durably alone); a later copy
//!   completes, and the promoted mirror holds every acknowledged write.
//! * syncseceth: the backup behind a rate-limited link (tc tbf): the primary's writes go on
//!   at the mirror's speed while the backup lags under the threshold, INFO replication
//!   shows the lag, the backup catches up; past the threshold the mirror holds the primary's
//!   acknowledgements (the primary slows to the link's rate) and the backup never lags
//!   further; at the end the backup holds every write and the mirror too.
//! * syncseceth's catch-up in bulk: the backup's link slowed to 48 kbit/s for a while; the
//!   primary is held once, then goes on; the backup catches up in bulk by its dirty ranges
//!   (no full copy) once the link is fast again, and holds every write.
//!
//! Needs root, `ip` and `tc` (iproute2) and `iptables`: skipped without them, a failure
//! under `MNEMO_REQUIRE_TOOLS=1` (scripts/test.sh installs iproute2 and iptables). The tests
//! run one at a time (a lock): each is timed against real links.

mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use mnemo_resp::Reply;
use support::netns::{available, run, Netns};
use support::repl::{
    backup_field, field, info, promote_and_check, promoted_prefix, value, write_secret, MirrorProc,
};
use support::{shm_dir, Client, Server};

/// One test at a time: they time real links, and share the machine's two cores.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn partitions_cost_one_timeout_and_lose_nothing() {
    if !available(false) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ns = Netns::create(0).expect("network namespace");
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let mirror_dir = dir.path().join("mirror");
    let mut mirror = MirrorProc::start_in(
        Some((&ns.name, &ns.ns_addr)),
        "mirror",
        &mirror_dir,
        &secret,
        dir.path().join("mirror.log"),
        &["--bind", &ns.ns_addr],
    );
    let primary = Server::start(
        &dir.path().join("primary").join("kv.pool"),
        &[
            "--mirror",
            &format!("{}:{}", ns.ns_addr, mirror.port),
            "--repl-mode",
            "sync",
            "--repl-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    assert!(!ns.host_addr.is_empty());
    let mut client = primary.client();
    let mut next = 0u64;
    let mut writes = |client: &mut Client, n: u64| -> Duration {
        let mut slowest = Duration::ZERO;
        for _ in 0..n {
            let key = format!("k{next}");
            let t = Instant::now();
            let reply = client
                .call(&["SET", key.as_str(), value(next).as_str()])
                .unwrap();
            assert!(matches!(reply, Reply::Simple(_)), "{reply:?}");
            slowest = slowest.max(t.elapsed());
            next += 1;
        }
        slowest
    };
    let in_sync = |client: &mut Client| {
        field(&info(client, "replication"), "mnemo_repl_mirror_in_sync") == Some("1")
    };
    let heal = |client: &mut Client, writes: &mut dyn FnMut(&mut Client, u64) -> Duration| {
        ns.iptables(&["-F"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !in_sync(client) {
            assert!(
                Instant::now() < deadline,
                "not back in sync after the partition healed"
            );
            writes(client, 5);
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    writes(&mut client, 200);
    assert!(in_sync(&mut client));

    // Both ways.
    ns.iptables(&["-A", "INPUT", "-j", "DROP"]);
    ns.iptables(&["-A", "OUTPUT", "-j", "DROP"]);
    let first = writes(&mut client, 1);
    let rest = writes(&mut client, 100);
    assert!(!in_sync(&mut client));
    assert!(first < Duration::from_secs(5), "{first:?}");
    assert!(
        rest < Duration::from_millis(500),
        "writes after the loss waited: {rest:?}"
    );
    heal(&mut client, &mut writes);
    writes(&mut client, 100);

    // One way: records reach the mirror, its acknowledgements do not come back.
    ns.iptables(&["-A", "OUTPUT", "-j", "DROP"]);
    let first = writes(&mut client, 1);
    let rest = writes(&mut client, 100);
    assert!(!in_sync(&mut client));
    assert!(first < Duration::from_secs(5), "{first:?}");
    assert!(rest < Duration::from_millis(500), "{rest:?}");
    heal(&mut client, &mut writes);
    writes(&mut client, 100);
    let repl = info(&mut client, "replication");
    assert_eq!(field(&repl, "mnemo_repl_link_losses"), Some("2"), "{repl}");
    assert_eq!(field(&repl, "mnemo_repl_full_copies"), Some("3"), "{repl}");

    let acked = next;
    drop(client);
    primary.kill();
    mirror.kill();
    let _promoted = promote_and_check(&mirror_dir, acked);
}

fn set(client: &mut Client, key: &str, value: &str) -> Duration {
    let t = Instant::now();
    let reply = client.call(&["SET", key, value]).unwrap();
    assert!(matches!(reply, Reply::Simple(_)), "{reply:?}");
    t.elapsed()
}

/// A value of 16 KiB for key `f{j}`.
fn fill(j: u64) -> String {
    format!("{j:08}").repeat(2048)
}

fn in_sync(client: &mut Client) -> bool {
    field(&info(client, "replication"), "mnemo_repl_mirror_in_sync") == Some("1")
}

fn repl_u64(client: &mut Client, name: &str) -> u64 {
    let text = info(client, "replication");
    field(&text, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name}: {text}"))
}

/// A partition during a full copy to the mirror, both ways then one way (the mirror's
/// packets, its TCP acknowledgements included, dropped): the write that carries the copy
/// returns within the link's timeout or two, acknowledged durably here alone, instead of
/// blocking on a socket whose peer is gone until TCP gives up (a send without a timeout did
/// that); the copy is not completed; once the link heals a later copy completes, and the
/// promoted mirror holds every acknowledged write. The primary-to-mirror link is limited to
/// 8 Mbit/s so that a copy of a few MiB lasts long enough to be cut.
#[test]
fn a_partition_during_a_full_copy_fails_it_within_a_timeout() {
    if !available(false) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ns = Netns::create(1).expect("network namespace");
    ns.rate_limit("8mbit");
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let mirror_dir = dir.path().join("mirror");
    let mut mirror = MirrorProc::start_in(
        Some((&ns.name, &ns.ns_addr)),
        "mirror",
        &mirror_dir,
        &secret,
        dir.path().join("mirror.log"),
        &["--bind", &ns.ns_addr],
    );
    let primary = Server::start(
        &dir.path().join("primary").join("kv.pool"),
        &[
            "--mirror",
            &format!("{}:{}", ns.ns_addr, mirror.port),
            "--repl-mode",
            "sync",
            "--repl-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let mut client = primary.client();
    let mut next = 0u64;
    let mut small = |client: &mut Client, n: u64| {
        let mut slowest = Duration::ZERO;
        for _ in 0..n {
            slowest = slowest.max(set(client, &format!("k{next}"), &value(next)));
            next += 1;
        }
        slowest
    };
    // About 3 MiB of data: a full copy takes seconds over the limited link.
    let fills = 200u64;
    for j in 0..fills {
        set(&mut client, &format!("f{j}"), &fill(j));
    }
    small(&mut client, 100);
    assert!(in_sync(&mut client));

    for (case, rules) in [
        (
            "both ways",
            &[
                &["-A", "INPUT", "-j", "DROP"][..],
                &["-A", "OUTPUT", "-j", "DROP"],
            ][..],
        ),
        ("one way", &[&["-A", "OUTPUT", "-j", "DROP"][..]][..]),
    ] {
        // Lose the link (one write waits one timeout), then heal it.
        for rule in rules {
            ns.iptables(rule);
        }
        small(&mut client, 1);
        assert!(!in_sync(&mut client), "{case}");
        ns.iptables(&["-F"]);
        let copies = repl_u64(&mut client, "mnemo_repl_full_copies");
        let losses = repl_u64(&mut client, "mnemo_repl_link_losses");

        // The next writes relink; the full copy is sent by one of them. Cut it midway: the
        // mirror's state says a copy began (its image incomplete).
        let (slowest, cut_at) = std::thread::scope(|scope| {
            let cutter = scope.spawn(|| {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let (state, _) = mnemo_repl::mirror::peek_state(&mirror_dir).unwrap();
                    if !state.complete {
                        for rule in rules {
                            ns.iptables(rule);
                        }
                        return Instant::now();
                    }
                    assert!(Instant::now() < deadline, "{case}: no copy began");
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            let mut slowest = Duration::ZERO;
            while !cutter.is_finished() {
                slowest = slowest.max(small(&mut client, 1));
                std::thread::sleep(Duration::from_millis(20));
            }
            let cut_at = cutter.join().unwrap();
            // The write carrying the copy may still be under way: the next ones wait for it.
            slowest = slowest.max(small(&mut client, 1));
            (slowest, cut_at)
        });
        let waited = cut_at.elapsed();
        eprintln!("{case}: the write that carried the cut copy took at most {slowest:?}; {waited:?} since the cut");
        assert!(
            slowest < Duration::from_secs(15),
            "{case}: a write waited {slowest:?} for a copy cut by a partition"
        );
        let text = info(&mut client, "replication");
        assert_eq!(
            field(&text, "mnemo_repl_mirror_in_sync"),
            Some("0"),
            "{case}: {text}"
        );
        assert_eq!(
            repl_u64(&mut client, "mnemo_repl_full_copies"),
            copies,
            "{case}: the cut copy was not completed: {text}"
        );
        // A copy that fails is a failed attempt to relink (the link was never up), not a
        // loss: the primary tries again with its backoff.
        assert_eq!(
            repl_u64(&mut client, "mnemo_repl_link_losses"),
            losses,
            "{case}: {text}"
        );
        // Durable here meanwhile, at local speed.
        let rest = small(&mut client, 50);
        assert!(rest < Duration::from_secs(1), "{case}: {rest:?}");
        let (state, _) = mnemo_repl::mirror::peek_state(&mirror_dir).unwrap();
        assert!(
            !state.complete,
            "{case}: the mirror's image is the cut copy, incomplete"
        );

        // Healed: a later copy completes.
        ns.iptables(&["-F"]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !in_sync(&mut client) {
            assert!(Instant::now() < deadline, "{case}: not back in sync");
            small(&mut client, 5);
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(repl_u64(&mut client, "mnemo_repl_full_copies"), copies + 1);
        small(&mut client, 50);
    }

    let acked = next;
    drop(client);
    primary.kill();
    mirror.kill();
    let promoted = promote_and_check(&mirror_dir, acked);
    let mut client = promoted.client();
    for j in 0..fills {
        let key = format!("f{j}");
        match client.call(&["GET", key.as_str()]).unwrap() {
            Reply::Bulk(v) => assert!(v[..] == *fill(j).as_bytes(), "{key}"),
            other => panic!("acknowledged {key} lost: {other:?}"),
        }
    }
}

/// A `syncseceth` cluster for the slow-link tests: the backup in network namespace `index`
/// behind a veth limited to 4 Mbit/s, the mirror here feeding it, and a primary in
/// `syncseceth` mode with `stall` (its threshold flags) told to the mirror.
struct EthCluster {
    ns: Netns,
    dir: tempfile::TempDir,
    backup_dir: std::path::PathBuf,
    backup_proc: MirrorProc,
    mirror_dir: std::path::PathBuf,
    mirror: MirrorProc,
    primary: Server,
}

impl EthCluster {
    fn start(index: u32, stall: &[&str]) -> EthCluster {
        let ns = Netns::create(index).expect("network namespace");
        ns.rate_limit("4mbit");
        let dir = shm_dir();
        let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
        let backup_dir = dir.path().join("backup");
        let backup_proc = MirrorProc::start_in(
            Some((&ns.name, &ns.ns_addr)),
            "backup",
            &backup_dir,
            &secret,
            dir.path().join("backup.log"),
            &["--bind", &ns.ns_addr],
        );
        let mirror_dir = dir.path().join("mirror");
        let mirror = MirrorProc::start_as(
            "mirror",
            &mirror_dir,
            &secret,
            dir.path().join("mirror.log"),
            &["--backup", &format!("{}:{}", ns.ns_addr, backup_proc.port)],
        );
        let mirror_addr = format!("127.0.0.1:{}", mirror.port);
        let mut flags = vec!["--mirror", &mirror_addr, "--repl-mode", "syncseceth"];
        flags.extend_from_slice(stall);
        flags.extend(["--repl-secret-file", secret.to_str().unwrap()]);
        let primary = Server::start(&dir.path().join("primary").join("kv.pool"), &flags);
        EthCluster {
            ns,
            dir,
            backup_dir,
            backup_proc,
            mirror_dir,
            mirror,
            primary,
        }
    }
}

/// syncseceth: primary and mirror here on loopback, the backup in a namespace behind a link
/// limited to 4 Mbit/s (tc tbf on the mirror's side of the veth). The primary tells its
/// mirror a 1 MiB threshold.
/// * The backup's first full copy crosses the slow link from a snapshot; the primary writes
///   meanwhile.
/// * A burst under the threshold: no acknowledgement is held; INFO replication on the
///   primary shows the backup's lag (bytes and records), which then drains to nothing.
/// * 3 MiB written as fast as the primary can: past the threshold the mirror holds its
///   acknowledgements (stalls counted, the lag reported never past the threshold and one
///   record, the primary slowed to the link's rate), and no backup is dropped.
/// * At the end the backup holds every write (a prefix of history that is all of it), and
///   the promoted mirror too.
#[test]
fn syncseceth_backup_behind_a_slow_link() {
    if !available(false) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    const THRESHOLD: u64 = 1 << 20;
    // Every part lives to the end of the test (the namespace and directory included).
    let EthCluster {
        ns: _ns,
        dir: _dir,
        backup_dir,
        mut backup_proc,
        mirror_dir,
        mut mirror,
        primary,
    } = EthCluster::start(2, &["--repl-backup-stall", "1M"]);
    let mut client = primary.client();
    let text = info(&mut client, "replication");
    assert_eq!(
        field(&text, "mnemo_repl_mode"),
        Some("syncseceth"),
        "{text}"
    );
    assert_eq!(
        field(&text, "mnemo_repl_backup_stall"),
        Some(&*THRESHOLD.to_string()),
        "{text}"
    );
    let mut next = 0u64;
    let mut small = |client: &mut Client, n: u64| {
        for _ in 0..n {
            set(client, &format!("k{next}"), &value(next));
            next += 1;
        }
    };
    let backup = |client: &mut Client, name: &str| {
        backup_field(&info(client, "replication"), 0, name).unwrap_or(u64::MAX)
    };
    let caught_up = |client: &mut Client| {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let text = info(client, "replication");
            let acked = field(&text, "mnemo_repl_acked_id").and_then(|v| v.parse().ok());
            if backup_field(&text, 0, "connected") == Some(1)
                && backup_field(&text, 0, "lag_records") == Some(0)
                && backup_field(&text, 0, "lag_bytes") == Some(0)
                && backup_field(&text, 0, "acked_id") == acked
            {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "the backup did not catch up: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    // The backup's first copy crosses the slow link; the primary writes meanwhile.
    let start = Instant::now();
    let mut during_copy = 0u64;
    loop {
        small(&mut client, 10);
        let text = info(&mut client, "replication");
        if backup_field(&text, 0, "copies") == Some(1) {
            break;
        }
        during_copy += 10;
        assert!(start.elapsed() < Duration::from_secs(90), "no copy: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "the backup's first copy took {:?}; {during_copy} writes acknowledged meanwhile",
        start.elapsed()
    );
    caught_up(&mut client);

    // Under the threshold: nothing held, the lag shows, then drains.
    let stalls = backup(&mut client, "stalls");
    let mut lag_seen = 0u64;
    for _ in 0..6 {
        small(&mut client, 100);
        lag_seen = lag_seen.max(backup(&mut client, "lag_bytes"));
    }
    let text = info(&mut client, "replication");
    assert!(lag_seen > 0, "the backup's lag never showed: {text}");
    assert!(lag_seen <= THRESHOLD, "{lag_seen}: {text}");
    assert_eq!(
        backup_field(&text, 0, "stalls"),
        Some(stalls),
        "held under the threshold: {text}"
    );
    eprintln!("under the threshold: lag up to {lag_seen} bytes, no stall");
    caught_up(&mut client);

    // Past the threshold: held back to the link's rate.
    let fills = 200u64;
    let t = Instant::now();
    let mut lag_max = 0u64;
    for j in 0..fills {
        set(&mut client, &format!("f{j}"), &fill(j));
        if j % 10 == 0 {
            let lag = backup(&mut client, "lag_bytes");
            lag_max = lag_max.max(lag);
            assert!(
                lag <= THRESHOLD + (32 << 10),
                "acknowledged with the backup {lag} bytes behind"
            );
        }
    }
    let took = t.elapsed();
    let text = info(&mut client, "replication");
    eprintln!("past the threshold: {fills} x 16 KiB in {took:?}, lag up to {lag_max}: {text}");
    assert!(
        backup_field(&text, 0, "stalls").unwrap() > stalls,
        "never held: {text}"
    );
    assert_eq!(
        backup_field(&text, 0, "overflows"),
        Some(0),
        "{text}\nmirror log:\n{}",
        mirror.log_text()
    );
    assert_eq!(
        field(&text, "mnemo_repl_mirror_in_sync"),
        Some("1"),
        "{text}"
    );
    assert_eq!(field(&text, "mnemo_repl_link_losses"), Some("0"), "{text}");
    // 3.2 MiB through 4 Mbit/s, all but the threshold waited for: 4 s and more.
    assert!(
        took > Duration::from_secs(2),
        "the primary was not held to the link's rate: {took:?}"
    );
    small(&mut client, 50);
    let text = caught_up(&mut client);
    assert_eq!(backup_field(&text, 0, "copies"), Some(1), "{text}");

    let acked = next;
    drop(client);
    primary.kill();
    mirror.kill();
    backup_proc.kill();
    let held = promoted_prefix(&backup_dir, acked);
    assert_eq!(held as u64, acked, "the caught-up backup holds every write");
    let promoted = promote_and_check(&mirror_dir, acked);
    let mut client = promoted.client();
    for j in (0..fills).step_by(17) {
        let key = format!("f{j}");
        match client.call(&["GET", key.as_str()]).unwrap() {
            Reply::Bulk(v) => assert!(v[..] == *fill(j).as_bytes(), "{key}"),
            other => panic!("acknowledged {key} lost: {other:?}"),
        }
    }
}

/// syncseceth's catch-up in bulk over a real link: the backup behind 4 Mbit/s, a 64 KiB
/// threshold and a 300 ms hold. The link then drops to 48 kbit/s for 3 s while the client
/// keeps writing: after one hold the primary is no longer held (its writes go on at the
/// mirror's speed) and the backup is neither held for nor dropped to a full copy; once the
/// link is back to 4 Mbit/s and drained, the backup catches up in bulk (one record of the
/// ranges written meanwhile), and at the end holds every write, as the promoted mirror does.
#[test]
fn syncseceth_backup_catches_up_in_bulk_after_a_slow_spell() {
    if !available(false) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let EthCluster {
        ns,
        dir: _dir,
        backup_dir,
        mut backup_proc,
        mirror_dir,
        mut mirror,
        primary,
    } = EthCluster::start(
        3,
        &[
            "--repl-backup-stall",
            "64K",
            "--repl-backup-stall-ms",
            "300",
        ],
    );
    let mut client = primary.client();
    let mut next = 0u64;
    let mut small = |client: &mut Client, n: u64| {
        for _ in 0..n {
            set(client, &format!("k{next}"), &value(next));
            next += 1;
        }
    };
    let caught_up = |client: &mut Client| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let text = info(client, "replication");
            let acked = field(&text, "mnemo_repl_acked_id").and_then(|v| v.parse().ok());
            if backup_field(&text, 0, "connected") == Some(1)
                && backup_field(&text, 0, "lag_records") == Some(0)
                && backup_field(&text, 0, "acked_id") == acked
            {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "the backup did not catch up: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    small(&mut client, 50);
    caught_up(&mut client);

    // The slow spell.
    run(&[
        "tc",
        "qdisc",
        "change",
        "dev",
        &ns.host_if,
        "root",
        "tbf",
        "rate",
        "48kbit",
        "burst",
        "32kb",
        "latency",
        "1s",
    ])
    .expect("tc qdisc change");
    let t = Instant::now();
    let mut during = 0u64;
    while t.elapsed() < Duration::from_secs(3) {
        small(&mut client, 10);
        during += 10;
    }
    let text = info(&mut client, "replication");
    eprintln!("{during} writes during the slow spell: {text}");
    assert!(
        during >= 300,
        "the primary was held by the slow backup: {during} writes in 3 s"
    );
    run(&[
        "tc",
        "qdisc",
        "change",
        "dev",
        &ns.host_if,
        "root",
        "tbf",
        "rate",
        "4mbit",
        "burst",
        "32kb",
        "latency",
        "1s",
    ])
    .expect("tc qdisc change");
    small(&mut client, 20);
    let text = caught_up(&mut client);
    assert!(
        backup_field(&text, 0, "bulk_catchups").unwrap() >= 1,
        "no catch-up in bulk: {text}"
    );
    assert_eq!(backup_field(&text, 0, "copies"), Some(1), "{text}");
    assert_eq!(backup_field(&text, 0, "overflows"), Some(0), "{text}");
    assert_eq!(
        field(&text, "mnemo_repl_mirror_in_sync"),
        Some("1"),
        "{text}"
    );

    let acked = next;
    drop(client);
    primary.kill();
    mirror.kill();
    backup_proc.kill();
    let held = promoted_prefix(&backup_dir, acked);
    assert_eq!(held as u64, acked, "the backup holds every write");
    let _promoted = promote_and_check(&mirror_dir, acked);
}
