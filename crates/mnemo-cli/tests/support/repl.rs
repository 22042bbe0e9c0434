//! Replication helpers for the CLI tests: mirror and backup processes, secrets, INFO fields.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mnemo_resp::Reply;

use super::Client;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

pub fn write_secret(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// A `mnemo mirror serve` process, killed on drop.
pub struct MirrorProc {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl MirrorProc {
    pub fn start(dir: &Path, secret: &Path, log: PathBuf) -> MirrorProc {
        MirrorProc::start_as("mirror", dir, secret, log, &[])
    }

    pub fn start_as(
        role: &str,
        dir: &Path,
        secret: &Path,
        log: PathBuf,
        extra: &[&str],
    ) -> MirrorProc {
        MirrorProc::start_in(None, role, dir, secret, log, extra)
    }

    /// Started in network namespace `netns` (listening on `--bind` from `extra`, which the
    /// readiness check connects to), or here.
    pub fn start_in(
        netns: Option<(&str, &str)>,
        role: &str,
        dir: &Path,
        secret: &Path,
        log: PathBuf,
        extra: &[&str],
    ) -> MirrorProc {
        MirrorProc::start_on(netns, free_port(), role, dir, secret, log, extra)
    }

    /// [`MirrorProc::start_in`] on a given port (a restart where its peers expect it).
    pub fn start_on(
        netns: Option<(&str, &str)>,
        port: u16,
        role: &str,
        dir: &Path,
        secret: &Path,
        log: PathBuf,
        extra: &[&str],
    ) -> MirrorProc {
        let mut command = match netns {
            Some((ns, _)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_mnemo")]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_mnemo")),
        };
        let host = netns.map_or("127.0.0.1", |(_, addr)| addr);
        let child = command
            .args([role, "serve", "--dir"])
            .arg(dir)
            .args(["--port", &port.to_string(), "--secret-file"])
            .arg(secret)
            .args(extra)
            .env("MNEMO_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .expect("spawn mnemo mirror serve");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect((host, port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the mirror did not listen:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        MirrorProc { child, port, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for MirrorProc {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn info(client: &mut Client, section: &str) -> String {
    match client.call(&["INFO", section]).expect("INFO") {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        Reply::Verbatim { text, .. } => String::from_utf8_lossy(&text).into_owned(),
        other => panic!("INFO {section}: {other:?}"),
    }
}

pub fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

pub fn value(i: u64) -> String {
    format!("value-{i}-{}", "m".repeat((i as usize * 13) % 900))
}

pub fn signal(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

/// `mnemo mirror promote --dir DIR` (it must succeed): the text it printed.
pub fn promote(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["mirror", "promote", "--dir"])
        .arg(dir)
        .output()
        .expect("mnemo mirror promote");
    assert!(
        out.status.success(),
        "promote: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Promote the mirror (or backup) at `dir`, serve its image, and check that it holds
/// `k0..k{acked}`, each with its `value`; returns the server.
pub fn promote_and_check(dir: &Path, acked: u64) -> super::Server {
    promote(dir);
    let promoted = super::Server::start(&dir.join("image"), &[]);
    let mut client = promoted.client();
    for i in 0..acked {
        let key = format!("k{i}");
        match client.call(&["GET", key.as_str()]).expect("GET") {
            Reply::Bulk(v) => assert_eq!(String::from_utf8_lossy(&v), value(i), "{key}"),
            other => panic!("acknowledged key {key} lost: {other:?} ({acked} acknowledged)"),
        }
    }
    promoted
}

/// `mnemo mirror status --dir DIR` (it must succeed): the text it printed.
pub fn mirror_status(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["mirror", "status", "--dir"])
        .arg(dir)
        .output()
        .expect("mnemo mirror status");
    assert!(
        out.status.success(),
        "status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One backup's fields in `INFO replication` (`mnemo_repl_backupN:addr=...,lag_bytes=...`).
pub fn backup_field(info: &str, n: usize, name: &str) -> Option<u64> {
    field(info, &format!("mnemo_repl_backup{n}"))?
        .split(',')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))?
        .parse()
        .ok()
}

/// Promote the mirror (or backup) at `dir` and serve it: how many of k0.. (of `total`) it
/// holds, checking that they form a prefix of one client's ordered writes, each with its
/// value (a backup is a consistent image of some point of history).
pub fn promoted_prefix(dir: &Path, total: u64) -> usize {
    promote(dir);
    let promoted = super::Server::start(&dir.join("image"), &[]);
    let mut client = promoted.client();
    let mut present = Vec::new();
    for i in 0..total {
        let key = format!("k{i}");
        match client.call(&["GET", key.as_str()]).unwrap() {
            Reply::Bulk(v) => {
                assert_eq!(String::from_utf8_lossy(&v), value(i), "{key}");
                present.push(true);
            }
            Reply::NullBulk => present.push(false),
            other => panic!("{other:?}"),
        }
    }
    let held = present.iter().take_while(|&&p| p).count();
    assert!(
        present[held..].iter().all(|&p| !p),
        "{} holds k0..k{held} and then more: not a prefix",
        dir.display()
    );
    held
}

/// Copy a stopped node's directory (the image's bytes, through a link to a disk image too)
/// so that it can be promoted and checked while the original is restarted.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "lock" {
            continue;
        }
        std::fs::copy(entry.path(), to.join(&name)).unwrap();
    }
}

/// Wait (at most 20 s) until the configuration satisfies `ok`; returns it.
pub fn until_config(
    control: &mnemo_repl_etcd::Control,
    what: &str,
    ok: impl Fn(&mnemo_repl_etcd::ClusterConfig) -> bool,
) -> mnemo_repl_etcd::ClusterConfig {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    loop {
        if let Ok(Some((config, _))) = control.load() {
            if ok(&config) {
                return config;
            }
            last = Some(config);
        }
        assert!(
            Instant::now() < deadline,
            "never got {what}; the configuration: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
