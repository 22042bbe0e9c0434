//! The server loop under deferred acknowledgements (`Engine::defer_acks`, what `mnemo serve`
//! turns on for a write-ahead pool on a disk): a batch's replies wait until the storage says
//! its commit is durable, in order, reads included; a storage failure closes the waiting
//! connections without a reply. The engine is a fake whose durable mark the test moves by
//! hand; `deferred_acks_mutant.rs` shows the first test failing on a loop that does not wait.

#[path = "support/deferred.rs"]
mod deferred;

use std::io::{Read, Write};
use std::time::Duration;

use deferred::{check_replies_wait, committed, connect, start};

#[test]
fn replies_wait_for_their_batch_to_be_durable() {
    let (server, storage) = start();
    let checked = check_replies_wait(&server, &storage);
    server.shutdown().unwrap();
    checked.unwrap();
}

#[test]
fn a_failed_storage_closes_the_waiting_connections() {
    let (server, storage) = start();
    let mut writer = connect(&server);
    writer.write_all(b"SET k v\r\n").unwrap();
    committed(&storage, 1);
    storage.fail();
    let mut buf = [0u8; 64];
    writer
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let n = writer.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without a reply, got {:?}", &buf[..n]);
    server.shutdown().unwrap();
}
