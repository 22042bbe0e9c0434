//! The loop test of deferred acknowledgements can fail: against the `release_unacked`
//! mutant (replies leave as soon as the commit returns), a reply arrives before the storage
//! made the write durable. Its own test binary: the mutant is switched on by an environment
//! variable, read when the server starts, which no other test of this process may see.

#[path = "support/deferred.rs"]
mod deferred;

use deferred::{check_replies_wait, start};

#[test]
fn a_loop_that_does_not_wait_is_caught() {
    std::env::set_var(mnemo_kv::server::mutant::ENV, "release_unacked");
    let (server, storage) = start();
    let checked = check_replies_wait(&server, &storage);
    server.shutdown().unwrap();
    let why = checked.expect_err("the check passed against a loop that does not wait");
    eprintln!("release_unacked caught: {why}");
    assert!(why.contains("before durable"), "{why}");
}
