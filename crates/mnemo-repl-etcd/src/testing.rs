//! A throwaway etcd for tests and benchmarks, one member ([`EtcdServer`]) or several
//! ([`EtcdCluster`]): 127.0.0.1 only, free ports, a data directory of its own, killed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd gets to answer after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running etcd.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    /// Its client URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Where it writes its log.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

/// Whether etcd is installed; false (after saying so on stderr) if not, unless
/// `MNEMO_REQUIRE_TOOLS=1`, where a missing etcd panics.
fn etcd_present() -> bool {
    let present = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        assert!(
            std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "etcd is not installed and MNEMO_REQUIRE_TOOLS=1 (apt-get install etcd-server)"
        );
        eprintln!("SKIPPED: etcd is not installed (apt-get install etcd-server)");
    }
    present
}

fn scratch_dir() -> std::io::Result<tempfile::TempDir> {
    let parent = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("mnemo-etcd-")
        .tempdir_in(parent)
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl EtcdServer {
    /// Start etcd if it is installed; None (after saying so on stderr) if it is not, unless
    /// `MNEMO_REQUIRE_TOOLS=1`, where a missing etcd panics (scripts/test.sh installs it).
    ///
    /// Its election timeout is 400 ms (heartbeat 50 ms), so that it grants leases of one
    /// second (etcd's minimum TTL is 1.5 election timeouts, rounded up to a second).
    pub fn start() -> Option<EtcdServer> {
        if !etcd_present() {
            return None;
        }
        for _attempt in 0..5 {
            match EtcdServer::try_start() {
                Ok(Some(server)) => return Some(server),
                Ok(None) => continue, // a port taken meanwhile
                Err(e) => panic!("cannot start etcd: {e}"),
            }
        }
        panic!("etcd did not start on free ports after 5 attempts");
    }

    fn try_start() -> std::io::Result<Option<EtcdServer>> {
        let dir = scratch_dir()?;
        let (client, peer) = (free_port()?, free_port()?);
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = dir.path().join("etcd.log");
        let child = Command::new("etcd")
            .arg("--name")
            .arg("mnemo-test")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &url])
            .args(["--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("mnemo-test={peer_url}")])
            .args(["--heartbeat-interval", "50", "--election-timeout", "400"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        let mut server = EtcdServer {
            child,
            url,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(_status) = server.child.try_wait()? {
                return Ok(None);
            }
            if server.healthy() {
                return Ok(Some(server));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "etcd did not answer within {START_TIMEOUT:?}:\n{}",
                    std::fs::read_to_string(&server.log).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether etcd answers a request (its leader elected).
    fn healthy(&self) -> bool {
        crate::Control::connect(
            std::slice::from_ref(&self.url),
            "health",
            Duration::from_millis(500),
        )
        .is_ok()
    }

    /// Its process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One member of an [`EtcdCluster`].
#[derive(Debug)]
pub struct Member {
    child: Option<Child>,
    /// Its name in the cluster.
    pub name: String,
    /// Its client URL.
    pub url: String,
    /// Where it writes its log.
    pub log: PathBuf,
}

impl Member {
    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kill it (SIGKILL) and wait for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether it runs.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }
}

/// A throwaway etcd cluster of several members on free loopback ports (election timeout
/// 400 ms, heartbeat 50 ms, as [`EtcdServer`]; pre-vote on).
#[derive(Debug)]
pub struct EtcdCluster {
    /// The members, in the order of `urls`.
    pub members: Vec<Member>,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Start `size` members, or None if etcd is not installed (as [`EtcdServer::start`]).
    pub fn start(size: usize) -> Option<EtcdCluster> {
        if !etcd_present() {
            return None;
        }
        for _attempt in 0..5 {
            match EtcdCluster::try_start(size) {
                Ok(Some(cluster)) => return Some(cluster),
                Ok(None) => continue,
                Err(e) => panic!("cannot start an etcd cluster: {e}"),
            }
        }
        panic!("an etcd cluster did not start on free ports after 5 attempts");
    }

    fn try_start(size: usize) -> std::io::Result<Option<EtcdCluster>> {
        let dir = scratch_dir()?;
        let mut ports = Vec::new();
        for _ in 0..size {
            ports.push((free_port()?, free_port()?));
        }
        let peers: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let mut members = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let name = format!("m{i}");
            let url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = dir.path().join(format!("{name}.log"));
            let child = Command::new("etcd")
                .args(["--name", &name])
                .arg("--data-dir")
                .arg(dir.path().join(&name))
                .args(["--listen-client-urls", &url])
                .args(["--advertise-client-urls", &url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &peers.join(",")])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "mnemo-test"])
                .args(["--heartbeat-interval", "50", "--election-timeout", "400"])
                // A member that rejoins must not depose the leader with the term it raised
                // while alone (etcd 3.5's default; 3.4 needs the flag).
                .arg("--pre-vote")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log)?)
                .spawn()?;
            members.push(Member {
                child: Some(child),
                name,
                url,
                log,
            });
        }
        let mut cluster = EtcdCluster { members, _dir: dir };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            for m in &mut cluster.members {
                if let Some(child) = m.child.as_mut() {
                    if child.try_wait()?.is_some() {
                        return Ok(None); // a port taken meanwhile
                    }
                }
            }
            if cluster.members.iter().all(|m| healthy(&m.url)) {
                return Ok(Some(cluster));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "the etcd cluster did not answer within {START_TIMEOUT:?}:\n{}",
                    std::fs::read_to_string(&cluster.members[0].log).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every member's client URL, comma-separated (as `--etcd` takes them).
    pub fn urls(&self) -> String {
        let urls: Vec<&str> = self.members.iter().map(|m| m.url.as_str()).collect();
        urls.join(",")
    }

    /// The index of the member that leads now (asked of each running member).
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            m.running()
                && crate::Control::connect(
                    std::slice::from_ref(&m.url),
                    "health",
                    Duration::from_millis(500),
                )
                .and_then(|c| c.member_status())
                .is_ok_and(|(member, leader)| member == leader && leader != 0)
        })
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            m.kill();
        }
    }
}

/// Whether the etcd at `url` answers a request (its leader elected).
fn healthy(url: &str) -> bool {
    crate::Control::connect(&[url.to_string()], "health", Duration::from_millis(500)).is_ok()
}
