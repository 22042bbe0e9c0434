//! Restart check of the storage engine alone: load a dataset (default 1 GiB: 1M keys of
//! 1000-byte values), close the pool, then time open (heap recovery + engine open) and the
//! first command.
//!
//! `cargo run --release -p mnemo-kv --example engine_restart -- [dir] [keys]`

use std::time::Instant;

use mnemo_heap::Heap;
use mnemo_kv::engine::{heap_options, PersistentEngine};
use mnemo_kv::server::Engine;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Protocol, Reply};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = match args.next() {
        Some(d) => tempfile::tempdir_in(d).expect("tempdir"),
        None => tempfile::tempdir().expect("tempdir"),
    };
    let keys: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let path = dir.path().join("pool");
    let value = Bytes::from(vec![b'v'; 1000]);
    {
        let heap = Heap::create_file(&path, 1 << 30, 8 << 30, &heap_options()).expect("create");
        let mut engine = PersistentEngine::open(&heap).expect("open");
        let start = Instant::now();
        for batch in 0..keys.div_ceil(1000) {
            engine.begin();
            for i in batch * 1000..((batch + 1) * 1000).min(keys) {
                let cmd = [
                    Bytes::from_static(b"SET"),
                    Bytes::from(format!("key:{i}").into_bytes()),
                    value.clone(),
                ];
                engine.execute_args(&cmd, Protocol::Resp2);
            }
            engine.commit().expect("commit");
        }
        println!(
            "loaded {keys} keys of 1000 B in {:.1} s; pool {} MiB, heap used {} MiB",
            start.elapsed().as_secs_f64(),
            heap.pool().size() >> 20,
            heap.stats().used_bytes >> 20
        );
    }
    let start = Instant::now();
    let heap = Heap::open_file(&path).expect("reopen");
    let heap_open = start.elapsed();
    let mut engine = PersistentEngine::open(&heap).expect("engine open");
    let engine_open = start.elapsed();
    let (reply, _) = engine.execute_args(
        &[
            Bytes::from_static(b"GET"),
            Bytes::from(format!("key:{}", keys / 2)),
        ],
        Protocol::Resp2,
    );
    engine.finish_read_only();
    let first = start.elapsed();
    assert!(matches!(reply, Reply::Bulk(ref v) if v.len() == 1000));
    println!(
        "restart: heap open {:.1} ms, engine open {:.1} ms, first GET answered at {:.1} ms",
        heap_open.as_secs_f64() * 1e3,
        engine_open.as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3
    );
}
