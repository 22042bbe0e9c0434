//! Replication end to end, with the real programs: `mnemo mirror serve` and `mnemo serve
//! --mirror` as processes on loopback. Clients write; the primary is killed with SIGKILL,
//! then the mirror too; `mnemo mirror promote` and `mnemo serve` on the promoted image must
//! hold every acknowledged write (and the one in flight whole or not at all). A primary
//! whose secret is wrong is refused and says so in INFO; the promoted mirror refuses the old
//! primary's epoch.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use mnemo_resp::Reply;
use support::repl::{
    backup_field, copy_dir, field, info, mirror_status, promote_and_check, promoted_prefix, signal,
    value, write_secret, MirrorProc,
};
use support::{shm_dir, Client, Server};

#[test]
fn acknowledged_writes_survive_the_primary_on_the_promoted_mirror() {
    for mode in ["sync", "syncflush"] {
        let dir = shm_dir();
        let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
        let mirror_dir = dir.path().join("mirror");
        let mut mirror = MirrorProc::start(&mirror_dir, &secret, dir.path().join("mirror.log"));
        let pool = dir.path().join("primary").join("kv.pool");
        let mirror_addr = format!("127.0.0.1:{}", mirror.port);
        let primary = Server::start(
            &pool,
            &[
                "--mirror",
                &mirror_addr,
                "--repl-mode",
                mode,
                "--repl-secret-file",
                secret.to_str().unwrap(),
            ],
        );
        let mut client = primary.client();
        let repl = info(&mut client, "replication");
        assert_eq!(
            field(&repl, "mnemo_repl_mirror_in_sync"),
            Some("1"),
            "{repl}"
        );
        assert_eq!(field(&repl, "mnemo_repl_mode"), Some(mode), "{repl}");

        // Writes until the kill; what was acknowledged is known exactly.
        let killer = {
            let pid = primary.pid();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                let pid = rustix::process::Pid::from_raw(pid).unwrap();
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            })
        };
        let mut acked = 0u64;
        let mut in_flight = None;
        for i in 0..1_000_000u64 {
            let key = format!("k{i}");
            match client.call(&["SET", key.as_str(), value(i).as_str()]) {
                Ok(Reply::Simple(s)) if s.as_ref() == b"OK" => acked = i + 1,
                Ok(other) => panic!("SET: {other:?}"),
                Err(_) => {
                    in_flight = Some(i);
                    break;
                }
            }
        }
        killer.join().unwrap();
        drop(primary);
        assert!(
            acked > 50,
            "{mode}: only {acked} writes acknowledged before the kill"
        );
        // The mirror goes down hard too: its log must be replayed.
        mirror.kill();

        // promote_and_check promotes (epoch 2 now: the old primary's 1 is stale), serves the
        // image and checks every acknowledged key.
        let promoted = promote_and_check(&mirror_dir, acked);
        let (state, _) = mnemo_repl::mirror::peek_state(&mirror_dir).unwrap();
        assert_eq!(state.epoch, 2, "promotion raised the epoch");
        let mut client = promoted.client();
        if let Some(i) = in_flight {
            let key = format!("k{i}");
            match client.call(&["GET", key.as_str()]).unwrap() {
                Reply::NullBulk => {}
                Reply::Bulk(v) => assert_eq!(String::from_utf8_lossy(&v), value(i)),
                other => panic!("{other:?}"),
            }
        }
        drop(client);
        drop(promoted);

        // The old primary restarted against the promoted mirror's directory is refused (its
        // epoch is older), and its INFO says it runs without a mirror.
        let mut mirror = MirrorProc::start(&mirror_dir, &secret, dir.path().join("mirror2.log"));
        let stale = Server::start(
            &dir.path().join("stale").join("kv.pool"),
            &[
                "--mirror",
                &format!("127.0.0.1:{}", mirror.port),
                "--repl-secret-file",
                secret.to_str().unwrap(),
            ],
        );
        let mut client = stale.client();
        let repl = info(&mut client, "replication");
        assert_eq!(
            field(&repl, "mnemo_repl_mirror_in_sync"),
            Some("0"),
            "{repl}"
        );
        drop(client);
        drop(stale);
        let log = mirror.log_text();
        assert!(log.contains("stale epoch"), "mirror log:\n{log}");
        mirror.kill();
    }
}

#[test]
fn a_primary_with_the_wrong_secret_is_refused() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "the mirror's own secret\n");
    let wrong = write_secret(dir.path(), "wrong.secret", "somebody else's secret\n");
    let mirror = MirrorProc::start(
        &dir.path().join("mirror"),
        &secret,
        dir.path().join("m.log"),
    );
    let primary = Server::start(
        &dir.path().join("p").join("kv.pool"),
        &[
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-secret-file",
            wrong.to_str().unwrap(),
        ],
    );
    let mut client = primary.client();
    assert!(matches!(
        client.call(&["SET", "a", "1"]),
        Ok(Reply::Simple(_))
    ));
    let repl = info(&mut client, "replication");
    assert_eq!(
        field(&repl, "mnemo_repl_mirror_in_sync"),
        Some("0"),
        "{repl}"
    );
    assert_eq!(
        field(&repl, "mnemo_repl_records_shipped"),
        Some("0"),
        "{repl}"
    );
    let log = primary.log_text();
    assert!(log.contains("cannot reach the mirror"), "{log}");
    assert!(
        !log.contains("the mirror's own secret") && !log.contains("somebody else"),
        "a secret was logged:\n{log}"
    );
    assert!(
        mirror.log_text().contains("authentication failed"),
        "{}",
        mirror.log_text()
    );

    // A secret file others can read is refused at start, with what to do.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["serve", "--pool"])
        .arg(dir.path().join("q.pool"))
        .args(["--mirror", "127.0.0.1:1", "--repl-secret-file"])
        .arg(&wrong)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
}

/// A mirror that stops answering (SIGSTOP) costs the primary one timeout, not one per write:
/// it carries on durably on its own, reaches the mirror again after SIGCONT (a full copy), and
/// the promoted mirror then holds every acknowledged write, those made while it was stopped
/// included.
#[test]
fn a_stopped_mirror_costs_one_timeout_then_catches_up() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let mirror_dir = dir.path().join("mirror");
    let mut mirror = MirrorProc::start(&mirror_dir, &secret, dir.path().join("mirror.log"));
    let primary = Server::start(
        &dir.path().join("primary").join("kv.pool"),
        &[
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let mut client = primary.client();
    let mut i = 0u64;
    let mut set = |client: &mut Client| {
        let key = format!("k{i}");
        let t = Instant::now();
        let reply = client
            .call(&["SET", key.as_str(), value(i).as_str()])
            .unwrap();
        assert!(matches!(reply, Reply::Simple(_)), "{reply:?}");
        i += 1;
        t.elapsed()
    };
    for _ in 0..20 {
        set(&mut client);
    }
    signal(mirror.child.id(), rustix::process::Signal::STOP);
    // One write waits for the acknowledgement until the timeout (2 s) declares the link
    // lost (which one depends on when the stop takes effect); none of the others waits.
    let mut took: Vec<Duration> = (0..50).map(|_| set(&mut client)).collect();
    took.sort();
    let repl = info(&mut client, "replication");
    assert_eq!(
        field(&repl, "mnemo_repl_mirror_in_sync"),
        Some("0"),
        "{repl}"
    );
    assert_eq!(field(&repl, "mnemo_repl_link_losses"), Some("1"), "{repl}");
    assert!(
        took[49] < Duration::from_secs(5),
        "the slowest write took {:?}",
        took[49]
    );
    assert!(
        took[48] < Duration::from_millis(500),
        "more than one write waited for the stopped mirror: {:?}",
        &took[45..]
    );
    signal(mirror.child.id(), rustix::process::Signal::CONT);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        set(&mut client);
        let repl = info(&mut client, "replication");
        if field(&repl, "mnemo_repl_mirror_in_sync") == Some("1") {
            assert_eq!(field(&repl, "mnemo_repl_full_copies"), Some("2"), "{repl}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the mirror did not come back: {repl}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..20 {
        set(&mut client);
    }
    let acked = i;
    drop(client);
    primary.kill();
    mirror.kill();
    let _promoted = promote_and_check(&mirror_dir, acked);
}

/// Primary -> mirror -> backup, all real processes. The backup checkpoints every record, so
/// its state file shows how far it is. After the first half of one client's writes (k0, k1,
/// ... in order) it catches up with everything the mirror acknowledged; after the second
/// half all three are killed at once, the backup somewhere behind. Promoted, it holds a
/// prefix of the writes (every key up to some point, with its value, none after it) that
/// includes the whole first half.
#[test]
fn a_backup_holds_a_prefix_of_history() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let backup_dir = dir.path().join("backup");
    let mut backup = MirrorProc::start_as(
        "backup",
        &backup_dir,
        &secret,
        dir.path().join("b.log"),
        &["--checkpoint-records", "1"],
    );
    let backup_addr = format!("127.0.0.1:{}", backup.port);
    let mut mirror = MirrorProc::start_as(
        "mirror",
        &dir.path().join("mirror"),
        &secret,
        dir.path().join("m.log"),
        &["--backup", &backup_addr],
    );
    let primary = Server::start(
        &dir.path().join("primary").join("kv.pool"),
        &[
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let mut client = primary.client();
    let total = 3000u64;
    let set = |client: &mut Client, i: u64| {
        let key = format!("k{i}");
        let reply = client
            .call(&["SET", key.as_str(), value(i).as_str()])
            .unwrap();
        assert!(matches!(reply, Reply::Simple(_)), "{reply:?}");
    };
    for i in 0..total / 2 {
        set(&mut client, i);
    }
    let acked: u64 = field(&info(&mut client, "replication"), "mnemo_repl_acked_id")
        .and_then(|v| v.parse().ok())
        .expect("mnemo_repl_acked_id");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (state, _) = mnemo_repl::mirror::peek_state(&backup_dir).unwrap();
        if state.complete && state.last_id >= acked {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the backup is at record {} of {acked}\nmirror log:\n{}\nbackup log:\n{}",
            state.last_id,
            mirror.log_text(),
            backup.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in total / 2..total {
        set(&mut client, i);
    }
    drop(client);
    primary.kill();
    mirror.kill();
    backup.kill();
    let held = promoted_prefix(&backup_dir, total);
    assert!(
        held as u64 >= total / 2,
        "the backup lost writes it had caught up with: it holds {held}\nmirror log:\n{}\nbackup log:\n{}",
        mirror.log_text(),
        backup.log_text()
    );
}

#[test]
fn mirror_status_reads_a_running_mirror() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let mirror_dir = dir.path().join("mirror");
    let mut mirror = MirrorProc::start(&mirror_dir, &secret, dir.path().join("m.log"));
    let status = |dir: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(["mirror", "status", "--dir"])
            .arg(dir)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, text) = status(&mirror_dir);
    assert!(ok, "{text}");
    assert!(text.contains("process: running"), "{text}");
    assert!(text.contains("incomplete"), "{text}");
    mirror.kill();
    let (ok, text) = status(&mirror_dir);
    assert!(ok && text.contains("process: stopped"), "{text}");
    let (ok, text) = status(dir.path());
    assert!(!ok && text.contains("not a mirror directory"), "{text}");
}

/// A pool that ran in sync mode (no local flushes) and was not closed cleanly is refused at
/// the next start, with what to do; --repl-trust-local overrides; a clean stop (SIGTERM)
/// flushes the whole pool and leaves nothing to refuse.
#[test]
fn a_sync_mode_pool_that_did_not_close_cleanly_is_refused() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let mirror = MirrorProc::start(
        &dir.path().join("mirror"),
        &secret,
        dir.path().join("m.log"),
    );
    let pool = dir.path().join("p").join("kv.pool");
    let addr = format!("127.0.0.1:{}", mirror.port);
    let args = [
        "--mirror",
        addr.as_str(),
        "--repl-mode",
        "sync",
        "--repl-secret-file",
        secret.to_str().unwrap(),
    ];
    let primary = Server::start(&pool, &args);
    let mut client = primary.client();
    assert!(matches!(
        client.call(&["SET", "a", "1"]),
        Ok(Reply::Simple(_))
    ));
    drop(client);
    primary.kill();
    for extra in [&[][..], &["--repl-mode", "syncflush"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
            .args(["serve", "--port", "0", "--pool"])
            .arg(&pool)
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("mnemo mirror promote") && err.contains("--repl-trust-local"),
            "{err}"
        );
    }
    let mut trusted: Vec<&str> = args.to_vec();
    trusted.push("--repl-trust-local");
    let primary = Server::start(&pool, &trusted);
    let mut client = primary.client();
    match client.call(&["GET", "a"]).unwrap() {
        Reply::Bulk(v) => assert_eq!(&v[..], b"1"),
        other => panic!("{other:?}"),
    }
    drop(client);
    assert!(primary.terminate().success());
    // Closed cleanly: starts without the override.
    let primary = Server::start(&pool, &args);
    assert!(primary.terminate().success());
}

/// SETs of k{from}..k{to}, each acknowledged.
fn set_range(client: &mut Client, from: u64, to: u64) {
    for i in from..to {
        let key = format!("k{i}");
        let reply = client
            .call(&["SET", key.as_str(), value(i).as_str()])
            .unwrap();
        assert!(matches!(reply, Reply::Simple(_)), "{reply:?}");
    }
}

/// syncdisk as a mode, end to end: a mirror whose image is in memory refuses a `syncdisk`
/// primary (which says so in INFO and runs durably alone); a mirror started with
/// `--disk-image` keeps its image in that ordinary disk file (DIR/image links to it) and its
/// log in its pool on tmpfs, takes the primary, and `mnemo mirror status` shows the mode and
/// where the data area is. The primary is killed with SIGKILL, the mirror too; the promoted
/// mirror serves the disk image with every acknowledged write.
#[test]
fn syncdisk_keeps_the_mirror_image_in_a_disk_file() {
    let dir = shm_dir();
    let disk = tempfile::Builder::new()
        .prefix("mnemo-syncdisk-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    assert!(
        !mnemo_repl::mirror::on_memory_fs(disk.path()).unwrap(),
        "the target directory is on tmpfs: this test needs a disk"
    );
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let repl = |port: u16| {
        vec![
            "--mirror".to_string(),
            format!("127.0.0.1:{port}"),
            "--repl-mode".into(),
            "syncdisk".into(),
            "--repl-secret-file".into(),
            secret.to_str().unwrap().into(),
        ]
    };

    // A mirror with its image in memory: refused.
    let memory = MirrorProc::start(
        &dir.path().join("memory"),
        &secret,
        dir.path().join("mem.log"),
    );
    let args = repl(memory.port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = Server::start(&dir.path().join("refused").join("kv.pool"), &args);
    let mut client = refused.client();
    set_range(&mut client, 0, 20);
    let text = info(&mut client, "replication");
    assert_eq!(field(&text, "mnemo_repl_mode"), Some("syncdisk"), "{text}");
    assert_eq!(
        field(&text, "mnemo_repl_mirror_in_sync"),
        Some("0"),
        "{text}"
    );
    assert_eq!(field(&text, "mnemo_repl_full_copies"), Some("0"), "{text}");
    let log = memory.log_text();
    assert!(log.contains("--disk-image"), "the mirror says why: {log}");
    drop(client);
    refused.terminate();

    // A mirror with its image on a disk.
    let mirror_dir = dir.path().join("mirror");
    let disk_image = disk.path().join("mirror.image");
    let mut mirror = MirrorProc::start_as(
        "mirror",
        &mirror_dir,
        &secret,
        dir.path().join("m.log"),
        &["--disk-image", disk_image.to_str().unwrap()],
    );
    let args = repl(mirror.port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let primary = Server::start(&dir.path().join("primary").join("kv.pool"), &args);
    let mut client = primary.client();
    let total = 400;
    set_range(&mut client, 0, total);
    let text = info(&mut client, "replication");
    assert_eq!(field(&text, "mnemo_repl_mode"), Some("syncdisk"), "{text}");
    assert_eq!(
        field(&text, "mnemo_repl_mirror_in_sync"),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        field(&text, "mnemo_repl_local_only_sync_points"),
        Some("0"),
        "{text}"
    );
    let status = mirror_status(&mirror_dir);
    assert!(status.contains("mode: syncdisk"), "{status}");
    assert!(status.contains("data_area: disk"), "{status}");
    assert!(
        status.contains(&format!("linked to {}", disk_image.display())),
        "{status}"
    );
    assert_eq!(
        std::fs::read_link(mirror_dir.join("image")).unwrap(),
        disk_image
    );
    assert!(mnemo_repl::mirror::on_memory_fs(&mirror_dir.join("log.pool")).unwrap());
    drop(client);
    primary.kill();
    mirror.kill();
    let promoted = promote_and_check(&mirror_dir, total);
    drop(promoted);
    assert!(std::fs::metadata(&disk_image).unwrap().len() > 0);
}

/// A backup killed with SIGKILL while the primary writes holds a prefix of the history;
/// restarted on its directory and port, it is brought up to date by its mirror (a full copy:
/// its queue was dropped when its link went) while the primary goes on, as INFO replication
/// on the primary shows (connected, lag 0); promoted at the end, it holds every write.
#[test]
fn a_killed_backup_comes_back_and_is_brought_up_to_date() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let backup_dir = dir.path().join("backup");
    let extra = ["--checkpoint-records", "1"];
    let mut backup = MirrorProc::start_as(
        "backup",
        &backup_dir,
        &secret,
        dir.path().join("b.log"),
        &extra,
    );
    let backup_port = backup.port;
    let backup_addr = format!("127.0.0.1:{backup_port}");
    let mut mirror = MirrorProc::start_as(
        "mirror",
        &dir.path().join("mirror"),
        &secret,
        dir.path().join("m.log"),
        &["--backup", &backup_addr],
    );
    let primary = Server::start(
        &dir.path().join("primary").join("kv.pool"),
        &[
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-mode",
            "syncsec",
            "--repl-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let mut client = primary.client();
    // Until the primary sees its backup caught up (its Status arrives after acknowledgements
    // and heartbeats).
    let caught_up = |client: &mut Client, copies: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = info(client, "replication");
            let last = field(&text, "mnemo_repl_acked_id").and_then(|v| v.parse::<u64>().ok());
            if backup_field(&text, 0, "connected") == Some(1)
                && backup_field(&text, 0, "lag_records") == Some(0)
                && backup_field(&text, 0, "copies") == Some(copies)
                && backup_field(&text, 0, "acked_id") == last
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the backup did not catch up: {text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    set_range(&mut client, 0, 500);
    caught_up(&mut client, 1);
    let text = info(&mut client, "replication");
    assert_eq!(field(&text, "mnemo_repl_backups"), Some("1"), "{text}");
    assert_eq!(
        field(&text, "mnemo_repl_backup_stall"),
        Some(&*(4u64 << 20).to_string()),
        "{text}"
    );

    // Killed while writes flow: the primary goes on (a dead backup holds nothing back).
    let writer = {
        let port = primary.port;
        std::thread::spawn(move || {
            let mut client = Client::connect(port).unwrap();
            set_range(&mut client, 500, 1500);
        })
    };
    std::thread::sleep(Duration::from_millis(150));
    backup.kill();
    writer.join().unwrap();
    let text = info(&mut client, "replication");
    assert_eq!(
        field(&text, "mnemo_repl_mirror_in_sync"),
        Some("1"),
        "{text}"
    );
    // What it holds is a prefix of the history, the first 500 at least.
    let aside = dir.path().join("backup-at-kill");
    copy_dir(&backup_dir, &aside);
    let held = promoted_prefix(&aside, 1500);
    assert!(
        held >= 500,
        "the killed backup holds {held} of the 500 it had caught up with"
    );

    // Back on its directory and port: brought up to date while the primary writes.
    let _backup = MirrorProc::start_on(
        None,
        backup_port,
        "backup",
        &backup_dir,
        &secret,
        dir.path().join("b.log"),
        &extra,
    );
    set_range(&mut client, 1500, 1700);
    caught_up(&mut client, 2);
    set_range(&mut client, 1700, 1800);
    caught_up(&mut client, 2);
    drop(client);
    primary.kill();
    mirror.kill();
    drop(_backup);
    let held = promoted_prefix(&backup_dir, 1800);
    assert_eq!(held, 1800, "the backup, caught up, holds every write");
}

/// `--repl-connections 3`: the primary opens three connections to its mirror (one link,
/// INFO says so); writes until SIGKILL of the primary, then of the mirror; the promoted
/// mirror holds every acknowledged write. A zero count is refused with the range to use.
#[test]
fn several_connections_per_link_keep_every_acknowledged_write() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let mirror_dir = dir.path().join("mirror");
    let mut mirror = MirrorProc::start(&mirror_dir, &secret, dir.path().join("mirror.log"));
    let mirror_addr = format!("127.0.0.1:{}", mirror.port);
    let args = [
        "--mirror",
        &mirror_addr,
        "--repl-mode",
        "sync",
        "--repl-secret-file",
        secret.to_str().unwrap(),
    ];
    let refused = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["serve", "--pool"])
        .arg(dir.path().join("refused.pool"))
        .args(args)
        .args(["--repl-connections", "0"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("from 1 to 16"), "{err}");

    let pool = dir.path().join("primary").join("kv.pool");
    let mut with_connections = args.to_vec();
    with_connections.extend(["--repl-connections", "3"]);
    let primary = Server::start(&pool, &with_connections);
    let mut client = primary.client();
    let repl = info(&mut client, "replication");
    assert_eq!(field(&repl, "mnemo_repl_connections"), Some("3"), "{repl}");
    assert_eq!(
        field(&repl, "mnemo_repl_mirror_in_sync"),
        Some("1"),
        "{repl}"
    );
    let pid = primary.pid();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        signal(pid as u32, rustix::process::Signal::KILL);
    });
    let mut acked = 0u64;
    for i in 0..1_000_000u64 {
        let key = format!("k{i}");
        match client.call(&["SET", key.as_str(), value(i).as_str()]) {
            Ok(Reply::Simple(s)) if s.as_ref() == b"OK" => acked = i + 1,
            Ok(other) => panic!("SET: {other:?}"),
            Err(_) => break,
        }
    }
    killer.join().unwrap();
    drop(primary);
    assert!(
        acked > 50,
        "only {acked} writes acknowledged before the kill"
    );
    mirror.kill();
    let promoted = promote_and_check(&mirror_dir, acked);
    drop(promoted);
}

/// Key `i`'s value in MSET round `r`: its length changes every round (new allocations).
fn round_value(r: u64, i: usize) -> String {
    let mut v = format!("{r}:{i}:");
    let len = 300 + ((r * 131 + i as u64 * 17) % 1500) as usize;
    v.extend(std::iter::repeat_n(
        (b'a' + (r % 26) as u8) as char,
        len - v.len(),
    ));
    v
}

/// The MSET round a reply to MGET k0..k7 shows (None: no key yet), or why it is not one.
fn mget_round(reply: &Reply) -> Result<Option<u64>, String> {
    let Reply::Array(items) = reply else {
        return Err(format!("MGET: {reply:?}"));
    };
    if items.iter().all(|i| matches!(i, Reply::NullBulk)) {
        return Ok(None);
    }
    let mut round = None;
    for (i, item) in items.iter().enumerate() {
        let Reply::Bulk(got) = item else {
            return Err(format!("key {i}: {item:?} beside set keys: torn"));
        };
        let text = String::from_utf8_lossy(got);
        let r: u64 = text
            .split(':')
            .next()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("key {i}: {text:.40}: no round"))?;
        if *round.get_or_insert(r) != r || round_value(r, i) != text {
            return Err(format!("key {i}: {text:.40} beside round {round:?}: torn"));
        }
    }
    Ok(round)
}

fn mget_keys() -> Vec<String> {
    std::iter::once("MGET".to_string())
        .chain((0..8).map(|i| format!("k{i}")))
        .collect()
}

/// Readers on the mirror and on a backup (`--read-port`): a `sync` primary's client MSETs
/// eight keys per round while another client reads them back from the mirror with MGET:
/// every reply is one whole round, never older than the round acknowledged before the MGET
/// was sent; a value SET on the primary is on the mirror as soon as the SET is
/// acknowledged; the mirror answers the read commands of every type as the primary does;
/// before the first full copy reads get LOADING; writes get Redis's replica error; INFO
/// replication says role:mirror (role:backup). The backup (its read port behind a
/// password), behind, shows whole rounds too, and catches up to the last.
#[test]
fn readers_on_the_mirror_see_every_acknowledged_write_whole() {
    let dir = shm_dir();
    let secret = write_secret(dir.path(), "repl.secret", "a shared secret for this test\n");
    let backup_reads = support::repl::free_port();
    let backup = MirrorProc::start_as(
        "backup",
        &dir.path().join("backup"),
        &secret,
        dir.path().join("b.log"),
        &[
            "--read-port",
            &backup_reads.to_string(),
            "--read-requirepass",
            "a password for readers",
        ],
    );
    let mirror_reads = support::repl::free_port();
    let mirror = MirrorProc::start_as(
        "mirror",
        &dir.path().join("mirror"),
        &secret,
        dir.path().join("m.log"),
        &[
            "--backup",
            &format!("127.0.0.1:{}", backup.port),
            "--read-port",
            &mirror_reads.to_string(),
            "--checkpoint-records",
            "64",
        ],
    );
    // No copy yet: the image is no pool, reads are answered LOADING.
    let mut reader = Client::connect(mirror_reads).expect("the mirror's read port");
    match reader.call(&["GET", "s"]).unwrap() {
        Reply::Error(e) if e.starts_with(b"LOADING ") => {}
        other => panic!("a read before the first copy: {other:?}"),
    }
    let repl = info(&mut reader, "replication");
    assert_eq!(
        (field(&repl, "loading"), field(&repl, "mnemo_repl_complete")),
        (Some("1"), Some("0")),
        "{repl}"
    );
    let primary = Server::start(
        &dir.path().join("primary").join("kv.pool"),
        &[
            "--mirror",
            &format!("127.0.0.1:{}", mirror.port),
            "--repl-mode",
            "sync",
            "--repl-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let mut writer = primary.client();

    // Every type, written on the primary, read on the mirror at once: the same replies.
    let writes: &[&[&str]] = &[
        &["SET", "s", "a string"],
        &["SET", "t", "expiring", "EX", "1000"],
        &["HSET", "h", "f1", "v1", "f2", "v2"],
        &["RPUSH", "l", "x", "y", "z"],
        &["SADD", "set", "m1", "m2"],
        &["ZADD", "z", "1", "one", "2", "two"],
    ];
    for w in writes {
        writer.call(w).unwrap();
    }
    let reads: &[&[&str]] = &[
        &["GET", "s"],
        &["MGET", "s", "missing"],
        &["EXISTS", "s", "h", "missing"],
        &["HGET", "h", "f2"],
        &["HGETALL", "h"],
        &["LRANGE", "l", "0", "-1"],
        &["SMEMBERS", "set"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        &["TYPE", "z"],
        &["TTL", "s"],
        &["DBSIZE"],
        &["STRLEN", "s"],
        &["SCAN", "0", "COUNT", "100"],
        &["PING"],
    ];
    for r in reads {
        let on_primary = writer.call(r).unwrap();
        let on_mirror = reader.call(r).unwrap();
        let sorted = |reply: Reply| match reply {
            // SMEMBERS and SCAN: the same members, in whatever order.
            Reply::Array(mut items) if r[0] == "SMEMBERS" => {
                items.sort_by_key(|i| format!("{i:?}"));
                Reply::Array(items)
            }
            other => other,
        };
        assert_eq!(sorted(on_mirror), sorted(on_primary), "{r:?}");
    }
    let ttl = reader.call(&["TTL", "t"]).unwrap();
    assert!(
        matches!(ttl, Reply::Integer(t) if (990..=1000).contains(&t)),
        "{ttl:?}"
    );
    for w in [
        &["SET", "s", "x"][..],
        &["DEL", "s"],
        &["FLUSHALL"],
        &["HSET", "h", "f", "v"],
        &["EVAL", "return 1", "0"],
    ] {
        assert_eq!(
            reader.call(w).unwrap(),
            Reply::Error("READONLY You can't write against a read only replica.".into()),
            "{w:?}"
        );
    }
    assert_eq!(
        reader.call(&["GET", "s"]).unwrap(),
        Reply::Bulk("a string".into()),
        "a refused write changed nothing"
    );
    // A transaction of reads runs (one state); one holding a write is refused whole.
    reader.call(&["MULTI"]).unwrap();
    reader.call(&["GET", "s"]).unwrap();
    reader.call(&["HGET", "h", "f1"]).unwrap();
    assert_eq!(
        reader.call(&["EXEC"]).unwrap(),
        Reply::Array(vec![
            Reply::Bulk("a string".into()),
            Reply::Bulk("v1".into())
        ])
    );
    reader.call(&["MULTI"]).unwrap();
    reader.call(&["GET", "s"]).unwrap();
    reader.call(&["SET", "s", "x"]).unwrap();
    assert_eq!(
        reader.call(&["EXEC"]).unwrap(),
        Reply::Error("READONLY You can't write against a read only replica.".into())
    );
    let repl = info(&mut reader, "replication");
    assert_eq!(field(&repl, "role"), Some("mirror"), "{repl}");
    assert_eq!(field(&repl, "mnemo_repl_mode"), Some("sync"), "{repl}");
    assert_eq!(field(&repl, "mnemo_repl_backups"), Some("1"), "{repl}");
    assert!(
        field(&repl, "mnemo_mirror_records").is_some_and(|r| r.parse::<u64>().unwrap() >= 6),
        "{repl}"
    );

    // Acknowledged in sync mode: on the mirror at once.
    for i in 0..200u64 {
        let v = value(i);
        writer.call(&["SET", "now", v.as_str()]).unwrap();
        assert_eq!(
            reader.call(&["GET", "now"]).unwrap(),
            Reply::Bulk(v.into()),
            "SET {i} acknowledged, not on the mirror"
        );
    }

    // MSET rounds against MGETs: whole rounds, never older than acknowledged.
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut r = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                r += 1;
                let mut mset = vec!["MSET".to_string()];
                for i in 0..8 {
                    mset.push(format!("k{i}"));
                    mset.push(round_value(r, i));
                }
                let reply = writer.call(&mset).unwrap();
                assert!(matches!(reply, Reply::Simple(_)), "{reply:?}");
                acked.store(r, std::sync::atomic::Ordering::Release);
            }
            r
        })
    };
    let mget = mget_keys();
    let started = Instant::now();
    let mut checked = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let before = acked.load(std::sync::atomic::Ordering::Acquire);
        let reply = reader.call(&mget).unwrap();
        match mget_round(&reply) {
            Ok(r) if r.unwrap_or(0) >= before => checked += 1,
            Ok(r) => panic!("the mirror read round {r:?} after round {before} was acknowledged"),
            Err(e) => panic!("the mirror: {e}"),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let last = rounds.join().unwrap();
    assert!(checked > 20 && last > 20, "{checked} reads, {last} rounds");
    assert_eq!(mget_round(&reader.call(&mget).unwrap()), Ok(Some(last)));

    // The backup: whole rounds as well, then the last one.
    let mut backup_reader = Client::connect(backup_reads).expect("the backup's read port");
    match backup_reader.call(&["GET", "k0"]).unwrap() {
        Reply::Error(e) if e.starts_with(b"NOAUTH") => {}
        other => panic!("a read before AUTH: {other:?}"),
    }
    assert_eq!(
        backup_reader
            .call(&["AUTH", "a password for readers"])
            .unwrap(),
        Reply::Simple("OK".into())
    );
    let repl = info(&mut backup_reader, "replication");
    assert_eq!(field(&repl, "role"), Some("backup"), "{repl}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let reply = backup_reader.call(&mget).unwrap();
        let round = match &reply {
            Reply::Error(e) if e.starts_with(b"LOADING") => None,
            _ => mget_round(&reply).unwrap_or_else(|e| panic!("the backup: {e}")),
        };
        if round == Some(last) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the backup shows round {round:?} of {last}\nbackup log:\n{}",
            backup.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The mirror's own INFO shows its backup connected and caught up.
    let deadline = Instant::now() + Duration::from_secs(20);
    let repl = loop {
        let repl = info(&mut reader, "replication");
        let at = |name| support::repl::backup_field(&repl, 0, name);
        if at("connected") == Some(1) && at("lag_records") == Some(0) {
            break repl;
        }
        assert!(Instant::now() < deadline, "{repl}");
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "{checked} MGETs on the mirror over {last} acknowledged MSETs; {} views built, the last in {} us",
        field(&repl, "mnemo_read_views").unwrap_or("?"),
        field(&repl, "mnemo_read_view_us").unwrap_or("?"),
    );
    // Views were built and dropped by the thousand, none with a complaint.
    for log in [mirror.log_text(), backup.log_text()] {
        // (The readiness check's connection is a link that ends at once.)
        let complaints: Vec<&str> = log
            .lines()
            .filter(|l| (l.contains("WARN") || l.contains("ERROR")) && !l.contains("link ended"))
            .collect();
        assert!(complaints.is_empty(), "{complaints:#?}");
        assert!(
            !log.contains("heap recovery replayed"),
            "the read port's views are recovered quietly:\n{log:.3000}"
        );
    }
    drop(primary);
}
