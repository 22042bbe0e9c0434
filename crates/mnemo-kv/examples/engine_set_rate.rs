//! Quick performance check of the storage engine alone (no sockets): SET of 3-byte values in
//! batches of 50 (what 50 redis-benchmark clients produce), one pool transaction and one sync
//! point per batch. Prints commands/s and sync points/s.
//!
//! `cargo run --release -p mnemo-kv --example engine_set_rate -- [dir] [batches]`
//! (default: a temporary directory under /tmp, 4000 batches).

use std::time::Instant;

use mnemo_heap::Heap;
use mnemo_kv::engine::{heap_options, PersistentEngine};
use mnemo_kv::server::Engine;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::Protocol;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = match args.next() {
        Some(d) => tempfile::tempdir_in(d).expect("tempdir"),
        None => tempfile::tempdir().expect("tempdir"),
    };
    let batches: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4000);
    let heap = Heap::create_file(
        &dir.path().join("pool"),
        256 << 20,
        4 << 30,
        &heap_options(),
    )
    .expect("create pool");
    let mut engine = PersistentEngine::open(&heap).expect("open engine");
    for (label, distinct) in [("one key", 1u64), ("100k keys", 100_000)] {
        let syncs_before = sync_points(&heap);
        let start = Instant::now();
        let mut n = 0u64;
        for batch in 0..batches {
            engine.begin();
            for i in 0..50 {
                let key = format!("key:{:012}", (batch * 50 + i) * 7919 % distinct);
                let cmd = [
                    Bytes::from_static(b"SET"),
                    Bytes::from(key.into_bytes()),
                    Bytes::from_static(b"xxx"),
                ];
                engine.execute_args(&cmd, Protocol::Resp2);
                n += 1;
            }
            engine.commit().expect("commit");
        }
        let secs = start.elapsed().as_secs_f64();
        let syncs = sync_points(&heap) - syncs_before;
        println!(
            "SET, batches of 50, {label}: {n} commands in {secs:.2} s: {:.0} commands/s, {:.0} sync points/s ({syncs} sync points)",
            n as f64 / secs,
            syncs as f64 / secs
        );
    }
    // Big batches (pipelining clients fill batches up to the server's 1024).
    let start = Instant::now();
    let mut n = 0u64;
    for batch in 0..batches / 20 {
        engine.begin();
        for i in 0..1000 {
            let key = format!("big:{:012}", batch * 1000 + i);
            let cmd = [
                Bytes::from_static(b"SET"),
                Bytes::from(key.into_bytes()),
                Bytes::from_static(b"xxx"),
            ];
            engine.execute_args(&cmd, Protocol::Resp2);
            n += 1;
        }
        engine.commit().expect("commit");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "SET, batches of 1000, new keys: {n} commands in {secs:.2} s: {:.0} commands/s",
        n as f64 / secs
    );
    let start = Instant::now();
    let mut n = 0;
    for _ in 0..batches {
        engine.begin();
        for _ in 0..50 {
            let cmd = [
                Bytes::from_static(b"LPUSH"),
                Bytes::from_static(b"mylist"),
                Bytes::from_static(b"xxx"),
            ];
            engine.execute_args(&cmd, Protocol::Resp2);
            n += 1;
        }
        engine.commit().expect("commit");
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "LPUSH, batches of 50, one list: {n} commands in {secs:.2} s: {:.0} commands/s",
        n as f64 / secs
    );
    let start = Instant::now();
    for _ in 0..batches {
        engine.begin();
        for i in 0..50 {
            let key = format!("key:{:012}", i * 7919 % 100_000);
            let cmd = [Bytes::from_static(b"GET"), Bytes::from(key.into_bytes())];
            engine.execute_args(&cmd, Protocol::Resp2);
        }
        engine.finish_read_only();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "GET, batches of 50: {:.0} commands/s",
        (batches * 50) as f64 / secs
    );
}

fn sync_points(heap: &Heap) -> u64 {
    heap.pool()
        .stats()
        .sync_points
        .load(std::sync::atomic::Ordering::Relaxed)
}
