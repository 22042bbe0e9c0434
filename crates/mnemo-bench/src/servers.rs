//! Servers the key-value benchmarks start and stop: `redis-server` 7 with or without
//! `appendfsync always`, and `mnemo serve`, each on a free loopback port, pinned to a CPU
//! with `taskset`, with its files in a fresh temporary directory; killed (and the directory
//! removed) when dropped. Used by the `kv` (redis-benchmark) and `ycsb` bins; [`Proc`],
//! [`free_port`] and [`wait_port`] serve the bins that start their own processes (`repl_kv`,
//! `failover`).

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to start.
#[derive(Clone, Copy, Debug)]
pub enum Kind<'a> {
    /// redis-server with persistence off (`--save "" --appendonly no`).
    RedisNoPersistence,
    /// redis-server with `--appendonly yes --appendfsync always`: every write fsynced
    /// before its reply, the durability `mnemo serve` gives.
    RedisAofAlways,
    /// `mnemo serve` (`binary`) with a new pool of `size` (`1G`, `4G`, ...).
    Mnemo {
        /// The `mnemo` binary.
        binary: &'a Path,
        /// `--size` of the new pool.
        size: &'a str,
    },
}

/// Where and how to start a server.
#[derive(Clone, Copy, Debug)]
pub struct Spec<'a> {
    /// Which server.
    pub kind: Kind<'a>,
    /// Its name in messages.
    pub name: &'a str,
    /// `taskset -c` CPU list the server runs on.
    pub cpu: &'a str,
    /// The directory its temporary directory (AOF, pool) is made in: the disk or /dev/shm.
    pub dir_in: &'a Path,
    /// Longest wait for it to accept connections (a big pool takes a moment to create).
    pub start_timeout: Duration,
}

/// A running server; killed (and its directory removed) on drop.
#[derive(Debug)]
pub struct Running {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Starts the server and waits until it accepts connections.
    pub fn start(spec: &Spec<'_>) -> Result<Running, String> {
        let dir = tempfile::Builder::new()
            .prefix("mnemo-kv-bench")
            .tempdir_in(spec.dir_in)
            .map_err(|e| format!("tempdir in {}: {e}", spec.dir_in.display()))?;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("no free port: {e}"))?;
        let port_text = port.to_string();
        let mut command = Command::new("taskset");
        command.args(["-c", spec.cpu]);
        match spec.kind {
            Kind::Mnemo { binary, size } => {
                command
                    .arg(binary)
                    .args(["serve", "--port", &port_text, "--size", size, "--pool"])
                    .arg(dir.path().join("kv.pool"))
                    .env("MNEMO_LOG", "warn");
            }
            Kind::RedisNoPersistence | Kind::RedisAofAlways => {
                let (aof, fsync) = match spec.kind {
                    Kind::RedisAofAlways => ("yes", "always"),
                    _ => ("no", "everysec"),
                };
                command
                    .arg("redis-server")
                    .args(["--port", &port_text, "--bind", "127.0.0.1", "--save", ""])
                    .args(["--appendonly", aof, "--appendfsync", fsync, "--dir"])
                    .arg(dir.path());
            }
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", spec.name))?;
        let mut running = Running {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + spec.start_timeout;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = running.child.try_wait() {
                return Err(format!("{} exited at start: {status}", spec.name));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not accept connections within {:?}",
                    spec.name, spec.start_timeout
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(running)
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The CPU time the server has used so far, user and system, over all its threads
    /// (`/proc/PID/stat`, in clock ticks: 10 ms). `None` once it has exited. `taskset`
    /// executes the server in its own process, so the child's id is the server's.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        cpu_time_of_stat(&stat)
    }
}

/// User plus system time from the text of `/proc/PID/stat`: fields 14 and 15, counted
/// after the command name, which is in parentheses and may hold spaces.
fn cpu_time_of_stat(stat: &str) -> Option<Duration> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    // The first field after the name is field 3 (the state).
    let mut fields = rest.split_whitespace().skip(14 - 3);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    let ticks = user.checked_add(system)?;
    let per_second = rustix::param::clock_ticks_per_second().max(1);
    Some(Duration::from_nanos(
        ticks.checked_mul(1_000_000_000)? / per_second,
    ))
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed (and reaped) when dropped: a benchmark that fails leaves nothing
/// running behind it.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Starts `cmd` with stdin and stdout closed, stderr into the file `log`, and
    /// `MNEMO_LOG=warn` (panics if it cannot start: a benchmark has nothing to measure then).
    pub fn spawn_logged(cmd: &mut std::process::Command, log: &std::path::Path) -> Proc {
        use std::process::Stdio;
        Proc(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(log).expect("log file"))
                .env("MNEMO_LOG", "warn")
                .spawn()
                .unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
        )
    }
}

/// A loopback port free at the time of the call.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Waits until something accepts connections on 127.0.0.1:`port` (panics after 30 s).
pub fn wait_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_user_plus_system_after_a_name_with_spaces_and_parentheses() {
        let hz = rustix::param::clock_ticks_per_second();
        // pid, "(name)", state, then fields 4..13, utime 150, stime 50, more fields.
        let stat = "4242 (redis ) server) S 1 2 3 0 -1 4194560 10 0 0 0 150 50 0 0 20 0 3 0";
        assert_eq!(
            cpu_time_of_stat(stat),
            Some(Duration::from_nanos(200 * 1_000_000_000 / hz))
        );
        assert_eq!(cpu_time_of_stat("4242 (cut short) S 1 2"), None);
        assert_eq!(cpu_time_of_stat("no parenthesis at all"), None);
    }

    #[test]
    fn this_processs_own_stat_parses() {
        let me = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        assert!(cpu_time_of_stat(&me).is_some());
    }
}
