//! Replication across a network namespace, with partitions. The mirror runs in a namespace
//! this test creates (a veth pair on a /30 of its own; no other address is touched), the
//! primary here. iptables in the mirror's namespace cuts the link both ways, then one way
//! (the mirror's acknowledgements lost); each time the primary declares the link lost after
//! one timeout, carries on durably alone, and is back in sync (a full copy) once the link
//! heals. At the end the primary is killed, the mirror too, and the promoted mirror holds
//! every acknowledged write.
//!
//! Needs root, `ip` (iproute2) and `iptables`: skipped without them, a failure under
//! `MNEMO_REQUIRE_TOOLS=1` (scripts/test.sh installs iptables).

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use mnemo_resp::Reply;
use support::repl::{field, info, promote_and_check, value, write_secret, MirrorProc};
use support::{shm_dir, Client, Server};

/// A namespace with one end of a veth pair, the other end here; removed on drop.
struct Netns {
    name: String,
    host_if: String,
    host_addr: String,
    ns_addr: String,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    fn create() -> Result<Netns, String> {
        let id = std::process::id() % 200 + 20;
        let name = format!("mnemo-t{}", std::process::id());
        let host_if = format!("mnt{id}a");
        let ns_if = format!("mnt{id}b");
        let host_addr = format!("10.213.{id}.1");
        let ns_addr = format!("10.213.{id}.2");
        let ns = Netns {
            name: name.clone(),
            host_if: host_if.clone(),
            host_addr: host_addr.clone(),
            ns_addr: ns_addr.clone(),
        };
        run(&["ip", "netns", "add", &name])?;
        run(&[
            "ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
        ])?;
        run(&["ip", "link", "set", &ns_if, "netns", &name])?;
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{host_addr}/30"),
            "dev",
            &host_if,
        ])?;
        run(&["ip", "link", "set", &host_if, "up"])?;
        let exec = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &name];
            all.extend_from_slice(args);
            run(&all)
        };
        exec(&["ip", "addr", "add", &format!("{ns_addr}/30"), "dev", &ns_if])?;
        exec(&["ip", "link", "set", &ns_if, "up"])?;
        exec(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn iptables(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.name, "iptables"];
        all.extend_from_slice(args);
        run(&all).expect("iptables in the test's namespace");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.host_if]);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

fn available() -> bool {
    let root = rustix::process::geteuid().is_root();
    let tools = Command::new("iptables").arg("-V").output().is_ok()
        && Command::new("ip").arg("-V").output().is_ok();
    if root && tools {
        return true;
    }
    assert!(
        std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "the partition test needs root, ip and iptables (MNEMO_REQUIRE_TOOLS=1)"
    );
    eprintln!("partition test skipped: needs root, ip (iproute2) and iptables");
    false
}

#[test]
fn partitions_cost_one_timeout_and_lose_nothing() {
    if !available() {
        return;
    }
    let ns = Netns::create().expect("network namespace");
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
