//! The YCSB driver checked against a real redis-server (started here on a loopback port,
//! persistence off): record count and shape after the load, zipfian and latest key choice,
//! scans bounded and in key-hash order, with YCSB's own commands and with the substitutes.
//! Skipped when redis-server is not installed, unless `MNEMO_REQUIRE_TOOLS=1`.

use mnemo_bench::ycsb::{check, Commands};
use mnemo_testkit::redis::RedisServer;

#[test]
fn driver_agrees_with_redis() {
    let Some(server) = RedisServer::start_or_skip(&[], "the YCSB driver check") else {
        return;
    };
    let addr = format!("127.0.0.1:{}", server.port());
    for commands in [Commands::Ycsb, Commands::Compat] {
        let report = check::check(&addr, 1000, 10_000, 3, commands).expect("check ran");
        print!("{commands:?}:\n{}", report.text());
        assert!(report.passed(), "{}", report.text());
    }
}
