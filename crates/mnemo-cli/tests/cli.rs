//! The `mnemo` command as a user runs it: exit codes, messages that say what to do, JSON.

use std::process::{Command, Output};

fn mnemo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(args)
        .output()
        .expect("run mnemo")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn shm() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mnemo-cli")
        .tempdir_in("/dev/shm")
        .unwrap()
}

#[test]
fn create_info_check_round_trip() {
    let dir = shm();
    let pool = dir.path().join("p.pool");
    let p = pool.to_str().unwrap();
    let out = mnemo(&[
        "pool",
        "create",
        p,
        "--size",
        "1M",
        "--layout",
        "mnemo-demo",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let out = mnemo(&["pool", "info", p, "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pool"]["header"]["pool_size"], 1 << 20);
    assert_eq!(v["pool"]["header"]["layout"], "mnemo-demo");
    assert!(v["persistence"]["flush"].is_string());
    assert_eq!(v["pool"]["copies"].as_array().unwrap().len(), 2);
    let out = mnemo(&["pool", "info", p]);
    let t = text(&out);
    assert!(
        t.contains("copy 0") && t.contains("copy 1") && t.contains("flush"),
        "{t}"
    );
    let out = mnemo(&["pool", "check", p]);
    assert!(out.status.success(), "{}", text(&out));
    for expected in 1..=3 {
        let out = mnemo(&["pool", "counter", p, "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["count"], expected);
        assert_eq!(v["previous_close_clean"], true);
    }
}

#[test]
fn check_reports_damage_with_exit_codes() {
    let dir = shm();
    let pool = dir.path().join("p.pool");
    let p = pool.to_str().unwrap();
    assert!(mnemo(&["pool", "create", p, "--size", "1M"])
        .status
        .success());
    let mut bytes = std::fs::read(&pool).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&pool, &bytes).unwrap();
    let out = mnemo(&["pool", "check", p]);
    assert!(out.status.success(), "one good copy: still opens");
    assert!(text(&out).contains("damaged"), "{}", text(&out));
    bytes[4096 + 100] ^= 0x40;
    std::fs::write(&pool, &bytes).unwrap();
    let out = mnemo(&["pool", "check", p, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["healthy"], false);
    let out = mnemo(&[
        "pool",
        "check",
        dir.path().join("missing").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("no such pool file"), "{}", text(&out));
}

#[test]
fn wrong_flags_are_explained() {
    let out = mnemo(&["pool", "create", "/dev/shm/x.pool", "--size", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("is not a size"), "{}", text(&out));
    let out = mnemo(&["pool", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let out = mnemo(&["--help"]);
    assert!(out.status.success());
    assert!(text(&out).contains("pool"));
}

#[test]
fn create_refuses_to_overwrite() {
    let dir = shm();
    let pool = dir.path().join("p.pool");
    std::fs::write(&pool, b"mine").unwrap();
    let out = mnemo(&["pool", "create", pool.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("refusing to overwrite"));
    assert_eq!(std::fs::read(&pool).unwrap(), b"mine");
}
