//! `mnemo serve --pm-budget`: the key-value server on virtual persistent memory. Values
//! three times the budget are written, read back while most of them are in swap, and again
//! after the server is killed (SIGKILL) and restarted.

mod support;

use mnemo_resp::Reply;
use support::{shm_dir, Server};

fn value(i: usize) -> String {
    format!("{i:06}:").repeat(4096 / 7)
}

fn field(info: &str, name: &str) -> Option<f64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

fn info(client: &mut support::Client) -> String {
    match client.call(&["INFO", "persistence"]).expect("INFO") {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO replied {other:?}"),
    }
}

#[test]
fn values_beyond_the_budget_survive_a_kill_and_restart() {
    let dir = shm_dir();
    let pool = dir.path().join("kv.pool");
    let swap = dir.path().join("kv.swap");
    let args = [
        "--size",
        "96M",
        "--pm-budget",
        "6M",
        "--swap",
        swap.to_str().unwrap(),
    ];
    let keys = 4000;
    let server = Server::start(&pool, &args);
    let mut client = server.client();
    for chunk in (0..keys).collect::<Vec<_>>().chunks(100) {
        let commands: Vec<Vec<String>> = chunk
            .iter()
            .map(|&i| vec!["SET".into(), format!("key:{i}"), value(i)])
            .collect();
        for reply in client.pipeline(&commands).expect("SET") {
            assert_eq!(reply, Reply::ok());
        }
    }
    let text = info(&mut client);
    let mrr = field(&text, "mnemo_vpm_mrr").expect("mnemo_vpm_mrr in INFO");
    let outs = field(&text, "mnemo_vpm_swap_outs").expect("swap_outs");
    assert!(mrr < 0.5 && outs > 1000.0, "{text}");
    for i in (0..keys).step_by(7) {
        assert_eq!(
            client.call(&["GET", &format!("key:{i}")]).expect("GET"),
            Reply::Bulk(value(i).into())
        );
    }
    assert!(field(&info(&mut client), "mnemo_vpm_swap_ins").unwrap_or(0.0) > 0.0);
    drop(client);
    server.kill();

    let server = Server::start(&pool, &args);
    let log = server.log_text();
    assert!(log.contains("start=\"recovered after a crash\""), "{log}");
    assert!(log.contains(&format!("keys={keys}")), "{log}");
    let mut client = server.client();
    for i in (0..keys).rev().step_by(3) {
        assert_eq!(
            client.call(&["GET", &format!("key:{i}")]).expect("GET"),
            Reply::Bulk(value(i).into()),
            "key:{i} after the restart"
        );
    }
    assert!(
        field(&info(&mut client), "mnemo_vpm_swapped_pages").unwrap_or(0.0) > 0.0,
        "pages in swap found at open"
    );
}
