//! Quick performance check of the storage engine alone (no sockets): batches of commands as
//! the server's group commit forms them, one pool transaction and one sync point per batch.
//! Prints commands/s (and sync points/s for SET).
//!
//! `cargo run --release -p mnemo-kv --example engine_set_rate -- [dir] [batches] [phase]`
//! (default: a temporary directory under /tmp, 4000 batches, every phase; `phase` runs only
//! the phases whose name starts with it, e.g. `MSET`).
//!
//! The `MSET` phase is redis-benchmark's MSET test at 50 clients: batches of 50 MSETs of 10
//! pairs, every key literally `key:__rand_int__` (redis-benchmark without `-r`). Instructions
//! per key write, as quoted in `docs/design/kv-engine.md`, come from running that phase under
//! callgrind at two batch counts and dividing the difference by the extra key writes:
//!
//! ```text
//! valgrind --tool=callgrind target/release/examples/engine_set_rate /dev/shm 200 MSET
//! valgrind --tool=callgrind target/release/examples/engine_set_rate /dev/shm 1200 MSET
//! ```
//!
//! The `YCSB` phases are YCSB's load (a record: HMSET of ten 100-byte fields, then ZADD to
//! `_indices`, each alone in its batch, as for clients that wait for each reply) and read
//! (HGETALL, one per batch), `batches` records; instructions per record or read come the
//! same way (`... /dev/shm 2000 YCSB` and `... 12000 YCSB`), as in `docs/design/kv-server.md`.

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
    let only = args.next().unwrap_or_default();
    let heap = Heap::create_file(
        &dir.path().join("pool"),
        256 << 20,
        4 << 30,
        &heap_options(),
    )
    .expect("create pool");
    let mut engine = PersistentEngine::open(&heap).expect("open engine");
    let mut bench = Bench {
        engine: &mut engine,
        heap: &heap,
        only: &only,
    };
    for (label, distinct) in [("one key", 1u64), ("100k keys", 100_000)] {
        bench.phase(
            &format!("SET, batches of 50, {label}"),
            batches,
            50,
            false,
            |batch, i| {
                let key = format!("key:{:012}", (batch * 50 + i) * 7919 % distinct);
                vec![b("SET"), Bytes::from(key.into_bytes()), b("xxx")]
            },
        );
    }
    bench.phase(
        "MSET of 10 pairs, batches of 50, one key",
        batches,
        50,
        false,
        |_, _| {
            let mut cmd = vec![b("MSET")];
            for _ in 0..10 {
                cmd.push(b("key:__rand_int__"));
                cmd.push(b("xxx"));
            }
            cmd
        },
    );
    // Big batches (pipelining clients fill batches up to the server's 1024).
    bench.phase(
        "SET, batches of 1000, new keys",
        batches / 20,
        1000,
        false,
        |batch, i| {
            let key = format!("big:{:012}", batch * 1000 + i);
            vec![b("SET"), Bytes::from(key.into_bytes()), b("xxx")]
        },
    );
    bench.phase(
        "LPUSH, batches of 50, one list",
        batches,
        50,
        false,
        |_, _| vec![b("LPUSH"), b("mylist"), b("xxx")],
    );
    bench.phase("GET, batches of 50", batches, 50, true, |_, i| {
        let key = format!("key:{:012}", i * 7919 % 100_000);
        vec![b("GET"), Bytes::from(key.into_bytes())]
    });
    // YCSB's load and read (the driver's commands: mnemo-bench's src/ycsb/redis.rs) for
    // clients that wait for each reply: one command per batch. `batches` records.
    let value = Bytes::from(vec![b'v'; 100]);
    let user = |record: u64| {
        Bytes::from(format!(
            "user{}",
            record.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ))
    };
    bench.phase(
        "YCSB load: HMSET of 10 fields, ZADD",
        2 * batches,
        1,
        false,
        |batch, _| {
            let key = user(batch / 2);
            if batch % 2 == 0 {
                let mut cmd = vec![b("HMSET"), key];
                for f in 0..10 {
                    cmd.push(Bytes::from(format!("field{f}")));
                    cmd.push(value.clone());
                }
                cmd
            } else {
                let score = Bytes::from((batch / 2 % 1_000_003).to_string());
                vec![b("ZADD"), b("_indices"), score, key]
            }
        },
    );
    bench.phase("YCSB read: HGETALL", batches, 1, true, |batch, _| {
        vec![b("HGETALL"), user(batch.wrapping_mul(7919) % batches)]
    });
}

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

struct Bench<'a, 'h> {
    engine: &'a mut PersistentEngine<'h>,
    heap: &'h Heap,
    only: &'a str,
}

impl Bench<'_, '_> {
    /// `batches` batches of `per_batch` commands made by `command(batch, i)`, each batch
    /// committed (or ended as read-only); prints the rate.
    fn phase(
        &mut self,
        label: &str,
        batches: u64,
        per_batch: u64,
        read_only: bool,
        mut command: impl FnMut(u64, u64) -> Vec<Bytes>,
    ) {
        if !label.starts_with(self.only) {
            return;
        }
        let syncs_before = sync_points(self.heap);
        let start = Instant::now();
        for batch in 0..batches {
            self.engine.begin();
            for i in 0..per_batch {
                self.engine
                    .execute_args(&command(batch, i), Protocol::Resp2);
            }
            if read_only {
                self.engine.finish_read_only();
            } else {
                self.engine.commit().expect("commit");
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let n = batches * per_batch;
        let syncs = sync_points(self.heap) - syncs_before;
        println!(
            "{label}: {n} commands in {secs:.2} s: {:.0} commands/s, {:.0} sync points/s ({syncs} sync points)",
            n as f64 / secs,
            syncs as f64 / secs
        );
    }
}

fn sync_points(heap: &Heap) -> u64 {
    heap.pool()
        .stats()
        .sync_points
        .load(std::sync::atomic::Ordering::Relaxed)
}
