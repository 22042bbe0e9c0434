//! A throwaway single-member etcd for tests and benchmarks: 127.0.0.1 only, free ports, a
//! data directory of its own, killed on drop.

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
        let parent = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = tempfile::Builder::new()
            .prefix("mnemo-etcd-")
            .tempdir_in(parent)?;
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
