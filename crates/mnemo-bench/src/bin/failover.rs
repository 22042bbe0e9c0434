//! `failover`: how long a replicated `mnemo serve` is unavailable when its primary dies, with
//! etcd deciding the takeover (issue 14's target: under 3 s, no acknowledged write lost).
//!
//! Each round, fresh on /dev/shm and loopback: etcd (one member, election timeout 400 ms, so
//! that leases of 1 s are granted), `mnemo mirror serve --etcd`, `mnemo serve --mirror
//! --repl-mode sync --etcd` (lease TTL 1 s); one client SETs without pause and records what
//! was acknowledged; after 1 s the primary is killed (SIGKILL). Measured from the kill: when
//! the primary's liveness key is gone in etcd (the lease expired: detection, polled every
//! 5 ms), when the configuration names the mirror as primary (the CAS), and when the promoted
//! mirror answers PING (served). Then every acknowledged key is read back from the new
//! primary. The peer in the same run is the floor the design cannot beat: the lease's TTL.
//! Writes `bench/results/failover.csv` and `.json` (commit, command).
//!
//! usage: `failover <mnemo binary> [rounds]` (`scripts/bench-failover.sh`)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemo_bench::resp_conn::{sequential_writer, written_keys_present, Conn};
use mnemo_bench::servers::{free_port, wait_port, Proc};
use mnemo_bench::{machine, median, write_csv, write_json};
use mnemo_repl_etcd::testing::EtcdServer;
use mnemo_repl_etcd::Control;

/// The lease asked for (etcd grants at least its minimum, 1 s with a 400 ms election timeout).
const TTL_S: u64 = 1;

struct Round {
    detect: Duration,
    cas: Duration,
    serve: Duration,
    acked: usize,
}

fn until(what: &str, since: Instant, mut done: impl FnMut() -> bool) -> Duration {
    until_or(what, since, &|| String::new(), &mut done)
}

/// [`until`], saying `context()` (the logs) if it never happens.
fn until_or(
    what: &str,
    since: Instant,
    context: &dyn Fn() -> String,
    done: &mut dyn FnMut() -> bool,
) -> Duration {
    while !done() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "{what}: not within 30 s\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    since.elapsed()
}

fn round(mnemo: &Path, etcd: &EtcdServer, n: usize) -> Round {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("mnemo-bench-failover-")
        .tempdir_in("/dev/shm")
        .expect("scratch dir");
    let d = dir.path();
    let cluster = format!("bench-{n}");
    let secret = d.join("repl.secret");
    std::fs::write(&secret, "benchmark secret, not for real use").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (m, p, pp) = (free_port(), free_port(), free_port());
    let ttl = TTL_S.to_string();
    let _mirror = Proc::spawn_logged(
        Command::new(mnemo)
            .args(["mirror", "serve", "--port", &m.to_string(), "--dir"])
            .arg(d.join("mirror"))
            .arg("--secret-file")
            .arg(&secret)
            .args(["--etcd", &etcd.url, "--cluster", &cluster])
            .args(["--promote-port", &pp.to_string(), "--etcd-ttl", &ttl]),
        &d.join("mirror.log"),
    );
    wait_port(m);
    let mut primary = Proc::spawn_logged(
        Command::new(mnemo)
            .args(["serve", "--port", &p.to_string(), "--size", "64M", "--pool"])
            .arg(d.join("kv.pool"))
            .args(["--mirror", &format!("127.0.0.1:{m}"), "--repl-mode", "sync"])
            .arg("--repl-secret-file")
            .arg(&secret)
            .args([
                "--etcd",
                &etcd.url,
                "--cluster",
                &cluster,
                "--etcd-ttl",
                &ttl,
            ]),
        &d.join("primary.log"),
    );
    wait_port(p);
    let control = Control::connect(
        std::slice::from_ref(&etcd.url),
        &cluster,
        Duration::from_secs(2),
    )
    .expect("etcd");
    let start = Instant::now();
    until(
        "the mirror in sync",
        start,
        || matches!(control.load(), Ok(Some((c, _))) if c.mirror_in_sync),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let writer = sequential_writer(p, Arc::clone(&stop));
    std::thread::sleep(Duration::from_secs(1));
    let _ = primary.0.kill();
    let killed = Instant::now();
    let _ = primary.0.wait();
    let me = format!("127.0.0.1:{pp}");
    let detect = until("the lease's expiry", killed, || {
        matches!(control.alive(), Ok(None))
    });
    let cas = until(
        "the takeover's CAS",
        killed,
        || matches!(control.load(), Ok(Some((c, _))) if c.primary == me),
    );
    let log = d.join("mirror.log");
    let serve = until_or(
        "the promoted mirror serving",
        killed,
        &|| std::fs::read_to_string(&log).unwrap_or_default(),
        &mut || {
            Conn::new(pp)
                .and_then(|mut c| c.call(&[vec![b"PING"]]))
                .is_ok()
        },
    );
    stop.store(true, Ordering::Relaxed);
    let acked: Vec<u64> = writer
        .join()
        .expect("writer")
        .iter()
        .map(|&(i, _)| i)
        .collect();
    // Every acknowledged write is on the new primary.
    let here = written_keys_present(pp, &acked).expect("the new primary");
    if let Some(k) = here.iter().position(|&h| !h) {
        panic!(
            "round {n}: k{} was acknowledged but the new primary does not hold it",
            acked[k]
        );
    }
    Round {
        detect,
        cas,
        serve,
        acked: acked.len(),
    }
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("failover.rs"));
    let args: Vec<String> = std::env::args().collect();
    let Some(mnemo) = args.get(1).map(PathBuf::from) else {
        eprintln!("usage: failover <mnemo binary> [rounds]");
        std::process::exit(2);
    };
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let Some(etcd) = EtcdServer::start() else {
        eprintln!("failover: etcd is not installed (apt-get install etcd-server)");
        std::process::exit(1);
    };
    let etcd_version = Command::new("etcd")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut results = Vec::new();
    for n in 1..=rounds {
        let r = round(&mnemo, &etcd, n);
        println!(
            "round {n}: lease gone {:.0} ms, CAS {:.0} ms, serving {:.0} ms after SIGKILL; {} acknowledged writes, all on the new primary",
            r.detect.as_secs_f64() * 1e3,
            r.cas.as_secs_f64() * 1e3,
            r.serve.as_secs_f64() * 1e3,
            r.acked
        );
        results.push(r);
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let ms = |f: fn(&Round) -> Duration| {
        let mut v: Vec<f64> = results.iter().map(|r| f(r).as_secs_f64() * 1e3).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let (detect, cas, serve) = (ms(|r| r.detect), ms(|r| r.cas), ms(|r| r.serve));
    let commit = mnemo_bench::head_commit();
    let command = std::env::var("MNEMO_BENCH_COMMAND").unwrap_or_else(|_| args.join(" "));
    let csv: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "{},{:.1},{:.1},{:.1},{},{commit},\"{command}\"",
                i + 1,
                r.detect.as_secs_f64() * 1e3,
                r.cas.as_secs_f64() * 1e3,
                r.serve.as_secs_f64() * 1e3,
                r.acked
            )
        })
        .collect();
    write_csv(
        "failover.csv",
        "round,lease_gone_ms,cas_ms,serving_ms,acked_writes,commit,command",
        &csv,
    )
    .expect("csv");
    let json = serde_json::json!({
        "benchmark": "failover",
        "commit": commit,
        "command": command,
        "machine": machine(),
        "etcd": etcd_version,
        "lease_ttl_s": TTL_S,
        "mode": "sync",
        "rounds": rounds,
        "load_avg_before": load_before.trim(), "load_avg_after": load_after.trim(),
        "lease_gone_ms_median": median(&detect),
        "cas_ms_median": median(&cas),
        "serving_ms_median": median(&serve),
        "serving_ms_max": serve.last().copied().unwrap_or(0.0),
        "serving_vs_lease_ttl": median(&serve) / (TTL_S as f64 * 1e3),
        "serving_vs_target_3s": median(&serve) / 3000.0,
        "acknowledged_writes_lost": 0,
        "rows": results.iter().enumerate().map(|(i, r)| serde_json::json!({
            "round": i + 1,
            "lease_gone_ms": r.detect.as_secs_f64() * 1e3,
            "cas_ms": r.cas.as_secs_f64() * 1e3,
            "serving_ms": r.serve.as_secs_f64() * 1e3,
            "acked_writes": r.acked,
        })).collect::<Vec<_>>(),
    });
    write_json("failover.json", &json).expect("json");
    println!(
        "failover (SIGKILL of the primary, lease TTL {TTL_S} s), median of {rounds}: lease gone {:.0} ms, CAS {:.0} ms, serving {:.0} ms (max {:.0} ms; {:.2}x the TTL, {:.2}x the 3 s target); no acknowledged write lost",
        median(&detect),
        median(&cas),
        median(&serve),
        serve.last().copied().unwrap_or(0.0),
        median(&serve) / (TTL_S as f64 * 1e3),
        median(&serve) / 3000.0
    );
}
