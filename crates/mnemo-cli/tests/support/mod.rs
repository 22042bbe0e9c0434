//! Running `mnemo serve` in tests: a server process on a free loopback port with its pool in
//! a temporary directory on /dev/shm, killed when dropped; a small RESP client; and the
//! check for redis-tools (`MNEMO_REQUIRE_TOOLS=1` turns a missing tool into a failure).

#![allow(dead_code)]

pub mod netns;
pub mod repl;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use mnemo_resp::bytes::BytesMut;
use mnemo_resp::{encode_command, Reply, ReplyDecoder};

/// Longest wait for a server to answer PING after its start.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a server to exit after SIGTERM or SHUTDOWN.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A temporary directory on /dev/shm (tmpfs: the stand-in for persistent memory), or the
/// default temporary directory where /dev/shm is missing.
pub fn shm_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("mnemo-serve-test")
            .tempdir_in(shm)
            .expect("tempdir on /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

/// Whether `program` runs. Missing: a failure under `MNEMO_REQUIRE_TOOLS=1`, else a skip
/// that says so.
pub fn tool(program: &str, package: &str) -> bool {
    let present = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !present {
        assert!(
            std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{program} is not installed and MNEMO_REQUIRE_TOOLS=1 (apt-get install {package})"
        );
        eprintln!("{program} is not installed: test skipped (apt-get install {package})");
    }
    present
}

/// The nearest existing directory above `pool` (the server creates the pool's own directory).
fn log_dir(pool: &Path) -> PathBuf {
    pool.ancestors()
        .skip(1)
        .find(|dir| dir.is_dir())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A `mnemo serve` process; SIGKILLed on drop if still running.
pub struct Server {
    child: Child,
    pub port: u16,
    pub pool: PathBuf,
    pub log: PathBuf,
}

/// The `mnemo serve` command for `pool` on `port`, logging to `log`.
pub fn serve_command(pool: &Path, port: u16, log: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemo"));
    command
        .arg("serve")
        .arg("--pool")
        .arg(pool)
        .args(["--port", &port.to_string()])
        .args(extra)
        .env("MNEMO_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"));
    command
}

impl Server {
    /// Starts a server on `pool` and waits until it answers PING.
    pub fn start(pool: &Path, extra: &[&str]) -> Server {
        Server::start_with(pool, extra, &[])
    }

    /// [`Server::start`] with environment variables.
    pub fn start_with(pool: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        for _attempt in 0..5 {
            let port = free_port();
            let log = log_dir(pool).join(format!("serve-{port}.log"));
            let mut command = serve_command(pool, port, &log, extra);
            command.envs(env.iter().copied());
            let child = command.spawn().expect("spawn mnemo serve");
            let mut server = Server {
                child,
                port,
                pool: pool.to_path_buf(),
                log,
            };
            if server.wait_ready() {
                return server;
            }
            let text = server.log_text();
            assert!(
                text.contains("cannot listen"),
                "mnemo serve did not start:\n{text}"
            );
        }
        panic!("no free port after 5 attempts");
    }

    /// Starts a server on `pool` at `port` (a restart where its peers expect it) and waits
    /// until it answers PING.
    pub fn start_on(pool: &Path, port: u16, extra: &[&str]) -> Server {
        // A log of its own for each start.
        let log = (0..)
            .map(|n| log_dir(pool).join(format!("serve-{port}-{n}.log")))
            .find(|log| !log.exists())
            .expect("a log name");
        let child = serve_command(pool, port, &log, extra)
            .spawn()
            .expect("spawn mnemo serve");
        let mut server = Server {
            child,
            port,
            pool: pool.to_path_buf(),
            log,
        };
        assert!(
            server.wait_ready(),
            "mnemo serve did not start on port {port}:\n{}",
            server.log_text()
        );
        server
    }

    /// Starts a server in network namespace `ns` (`ip netns exec`, which execs it: the
    /// child's id is the server's), listening on `addr` at a free port, and waits until it
    /// answers PING there.
    pub fn start_in(ns: &str, addr: &str, pool: &Path, extra: &[&str]) -> Server {
        let port = free_port();
        let log = log_dir(pool).join(format!("serve-{port}.log"));
        let plain = serve_command(pool, port, &log, extra);
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", ns])
            .arg(plain.get_program())
            .args(plain.get_args())
            .args(["--bind", addr])
            .env("MNEMO_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        let mut server = Server {
            child: command.spawn().expect("spawn mnemo serve in a namespace"),
            port,
            pool: pool.to_path_buf(),
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(mut client) = Client::connect_to((addr, port)) {
                if client.call(&["PING"]).is_ok() {
                    return server;
                }
            }
            let exited = matches!(server.child.try_wait(), Ok(Some(_)));
            assert!(
                !exited && Instant::now() < deadline,
                "mnemo serve in {ns} did not answer on {addr}:{port}:\n{}",
                server.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the process has exited (reaped if so).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait")
    }

    /// True once PING answers; false if the process exited (a port taken meanwhile).
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            // Another test handed the same free port may have a server there already: only
            // this child's own listener counts.
            let own = mnemo_testkit::ports::listener_owned_by(self.child.id(), self.port);
            if !own.unwrap_or(true) {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            if let Ok(mut client) = Client::connect(self.port) {
                // With requirepass, PING answers NOAUTH: an answer all the same.
                if client.call(&["PING"]).is_ok() {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "mnemo serve did not answer within {START_TIMEOUT:?}:\n{}",
            self.log_text()
        );
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    pub fn client(&self) -> Client {
        Client::connect(self.port).expect("connect to mnemo serve")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(mut self) -> ExitStatus {
        let pid = rustix::process::Pid::from_raw(self.pid()).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        self.wait_exit()
    }

    /// Waits for the process to exit (after SHUTDOWN or a signal).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "mnemo serve did not exit within {STOP_TIMEOUT:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether the pool at `path` was closed cleanly (opens it, so no server may hold it).
pub fn was_clean(path: &Path) -> bool {
    let pool = mnemo_pmem::Pool::open(path, &mnemo_pmem::OpenOptions::default()).expect("open");
    let clean = pool.was_clean();
    pool.close().expect("close");
    clean
}

/// A blocking RESP2 client over loopback.
pub struct Client {
    stream: TcpStream,
    decoder: ReplyDecoder,
}

impl Client {
    pub fn connect(port: u16) -> std::io::Result<Client> {
        Client::connect_to(("127.0.0.1", port))
    }

    /// [`Client::connect`] to any address (a server in a test's network namespace).
    pub fn connect_to(addr: impl std::net::ToSocketAddrs) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            decoder: ReplyDecoder::new(),
        })
    }

    /// Sends every command, then reads one reply per command.
    pub fn pipeline<A: AsRef<[u8]>>(&mut self, commands: &[Vec<A>]) -> std::io::Result<Vec<Reply>> {
        let mut out = BytesMut::new();
        for command in commands {
            encode_command(command, &mut out);
        }
        self.stream.write_all(&out)?;
        (0..commands.len()).map(|_| self.read_reply()).collect()
    }

    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<Reply> {
        let mut out = BytesMut::new();
        encode_command(args, &mut out);
        self.stream.write_all(&out)?;
        self.read_reply()
    }

    fn read_reply(&mut self) -> std::io::Result<Reply> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.decoder.next_reply() {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{e:?}"),
                    ))
                }
            }
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.decoder.feed(&chunk[..read]);
        }
    }
}

/// `redis-cli -p port args...`: its trimmed standard output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&output.stdout)
        .trim_end()
        .to_string()
}
