//! The YCSB driver checked against a real redis-server (started here on a loopback port,
//! persistence off): record count and shape after the load, zipfian and latest key choice,
//! scans bounded and in key-hash order, with YCSB's own commands and with the substitutes.
//! Skipped when redis-server is not installed, unless `MNEMO_REQUIRE_TOOLS=1`.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mnemo_bench::ycsb::{check, Commands};

struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis() -> Option<Server> {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
                "redis-server: {e}"
            );
            eprintln!("skipped: redis-server not found ({e}); apt-get install redis-server");
            return None;
        }
    };
    let server = Server {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(server)
}

#[test]
fn driver_agrees_with_redis() {
    let Some(server) = redis() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", server.port);
    for commands in [Commands::Ycsb, Commands::Compat] {
        let report = check::check(&addr, 1000, 10_000, 3, commands).expect("check ran");
        print!("{commands:?}:\n{}", report.text());
        assert!(report.passed(), "{}", report.text());
    }
}
