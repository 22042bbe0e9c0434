//! A throwaway `redis-server` for differential tests: the same requests sent to real Redis 7
//! and to mnemo must get the same replies.
//!
//! [`RedisServer::start`] runs Debian's `redis-server` on a free loopback port with no
//! persistence (`--save "" --appendonly no`), waits until it accepts connections, and kills it
//! when dropped. [`RedisServer::start_or_skip`] adds the suite's rule for a missing program:
//! the test says it is skipped, unless `MNEMO_REQUIRE_TOOLS=1` (as `scripts/test.sh` sets),
//! where a missing `redis-server` is a failure.

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for a started redis-server to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before giving up (another process may take a free port before Redis binds it).
const START_ATTEMPTS: usize = 5;
/// Read timeout of [`RedisServer::connect`]'s streams: a test waiting for a reply that never
/// comes fails instead of hanging.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A `redis-server` child process on a loopback port; killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    /// Its working directory (`--dir`: where a SAVE writes dump.rdb), removed on drop.
    dir: std::path::PathBuf,
}

/// Why [`RedisServer::start`] found no server.
#[derive(Debug)]
pub enum StartError {
    /// `redis-server` is not installed (Debian package `redis-server`).
    NotInstalled,
    /// It ran but did not accept connections; the text says what happened.
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotInstalled => {
                f.write_str("redis-server is not installed (apt-get install redis-server)")
            }
            StartError::Failed(why) => write!(f, "redis-server did not start: {why}"),
        }
    }
}

impl std::error::Error for StartError {}

impl RedisServer {
    /// Starts `redis-server` without persistence on a free loopback port, with `extra`
    /// arguments after the defaults (`["--requirepass", "pw"]`, `["--appendonly", "yes"]`:
    /// later arguments win), and waits until it accepts connections.
    pub fn start(extra: &[&str]) -> Result<RedisServer, StartError> {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port().map_err(|e| StartError::Failed(format!("no free port: {e}")))?;
            let port_text = port.to_string();
            // A directory of its own, so that a SAVE never writes into the source tree.
            let dir =
                std::env::temp_dir().join(format!("mnemo-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .map_err(|e| StartError::Failed(format!("{}: {e}", dir.display())))?;
            let dir_text = dir.to_string_lossy().into_owned();
            let mut args = vec![
                "--dir",
                &dir_text,
                "--port",
                &port_text,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ];
            args.extend_from_slice(extra);
            let child = match Command::new("redis-server")
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(child) => child,
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    if e.kind() == ErrorKind::NotFound {
                        return Err(StartError::NotInstalled);
                    }
                    return Err(StartError::Failed(e.to_string()));
                }
            };
            let mut server = RedisServer { child, port, dir };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(why) => last = why,
            }
        }
        Err(StartError::Failed(last))
    }

    /// [`RedisServer::start`], or `None` with a message that `what` is skipped when
    /// redis-server is not installed. Panics when it is missing under
    /// `MNEMO_REQUIRE_TOOLS=1`, and when it is installed but does not start.
    pub fn start_or_skip(extra: &[&str], what: &str) -> Option<RedisServer> {
        match RedisServer::start(extra) {
            Ok(server) => Some(server),
            Err(StartError::NotInstalled) => {
                assert!(
                    std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
                    "redis-server is not installed and MNEMO_REQUIRE_TOOLS=1 (apt-get install redis-server)"
                );
                eprintln!(
                    "redis-server is not installed: {what} skipped (apt-get install redis-server)"
                );
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A new connection, with a read timeout so that a missing reply fails the test.
    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis-server");
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("read timeout");
        stream
    }

    /// Waits until this child listens on its port and accepts a connection; an error if it
    /// exits or times out (the caller tries another port).
    ///
    /// A connection alone proves nothing: two tests that start a server at once can be handed
    /// the same free port, and then both would connect to whichever child bound it, share it,
    /// and one test's server kill would reset the other's connection. So the listening socket
    /// must be the child's own (on Linux, where `/proc` says whose it is).
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if crate::ports::listener_owned_by(self.child.id(), self.port).unwrap_or(true)
                && TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited with {status} (port {} taken?)", self.port));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "not accepting connections on port {} after {START_TIMEOUT:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn starts_answers_and_stops() {
        let Some(server) = RedisServer::start_or_skip(&["--requirepass", "pw"], "redis start test")
        else {
            return;
        };
        let port = server.port();
        let mut stream = server.connect();
        stream.write_all(b"PING\r\n").expect("write");
        let mut reply = [0u8; 64];
        let read = stream.read(&mut reply).expect("read");
        // The extra arguments were applied: PING needs AUTH.
        assert!(
            reply[..read].starts_with(b"-NOAUTH"),
            "{:?}",
            String::from_utf8_lossy(&reply[..read])
        );
        drop(stream);
        drop(server);
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "redis-server still listening after drop"
        );
    }
}
