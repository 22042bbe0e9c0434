//! Real-process crashes: a child process runs transactions from two threads on a pool file
//! on /dev/shm and is killed with SIGKILL at a random moment; the pool is reopened (heap
//! recovery) and checked. This covers what the simulator does not: the file path (lock,
//! map, grow), several lanes committing concurrently, and recovery of a real process's
//! state. Its limit: stores of a killed process survive in the page cache, so lost cache
//! lines are the simulator's job (`tests/crash.rs`).
//!
//! Invariants: every transaction the child acknowledged (printed after commit) is present,
//! at most one more per thread; objects are whole; no leak, no dangling pointer, no overlap.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mnemo_heap::{Heap, PPtr};

const SLOTS: usize = 16;
const THREADS: usize = 2;
const ENV: &str = "MNEMO_HEAP_KILL_POOL";

type Table = [PPtr<u64>; SLOTS];

fn roots(heap: &Heap, t: usize) -> (PPtr<Table>, PPtr<u64>) {
    heap.tx(|_| {
        Ok((
            heap.root::<Table>(&format!("table{t}"))?,
            heap.root::<u64>(&format!("count{t}"))?,
        ))
    })
    .expect("roots")
}

/// The child: run until killed. Not a test of its own (returns at once without the variable).
#[test]
fn kill_child() {
    let Ok(path) = std::env::var(ENV) else { return };
    let path = Path::new(&path);
    let heap = if path.exists() {
        Heap::open_file(path).expect("child open")
    } else {
        Heap::create_file(path, 2 << 20, 64 << 20, &common::small_options()).expect("child create")
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let heap = heap.clone();
            s.spawn(move || {
                let (table, count) = roots(&heap, t);
                let mut x =
                    (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ std::process::id() as u64;
                loop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let slot = (x % SLOTS as u64) as usize;
                    let size = [64u64, 200, 5000, 300_000][(x >> 8) as usize % 4];
                    let n = heap
                        .tx(|tx| {
                            let p = table.byte_add::<PPtr<u64>>(slot as u64 * 8);
                            let old: PPtr<u64> = tx.read(p)?;
                            if !old.is_null() {
                                tx.free(old)?;
                            }
                            let obj = if x & 1 == 0 { tx.alloc_bytes(size)? } else { 0 };
                            if obj != 0 {
                                tx.write_bytes(obj, &x.to_le_bytes())?;
                                tx.write_bytes(obj + 56, &x.to_le_bytes())?;
                            }
                            tx.write(p, &PPtr::<u64>::from_offset(obj))?;
                            let n = tx.read(count)? + 1;
                            tx.write(count, &n)?;
                            Ok(n)
                        })
                        .expect("child transaction");
                    println!("{t} {n}");
                }
            });
        }
    });
}

fn check(heap: &Heap, acked: &[u64; THREADS]) {
    let mut published: Vec<u64> = heap.regions().unwrap().into_iter().map(|r| r.1).collect();
    for (t, &acked) in acked.iter().enumerate() {
        let (table, count) = roots(heap, t);
        let n = heap.get(count).unwrap();
        assert!(
            n == acked || n == acked + 1,
            "thread {t}: {n} transactions on media, {acked} acknowledged"
        );
        for obj in heap.get(table).unwrap() {
            if obj.is_null() {
                continue;
            }
            let a = heap.get(obj).unwrap();
            let b = heap.get(obj.byte_add::<u64>(56)).unwrap();
            assert_eq!(a, b, "object {obj:?} is torn");
            published.push(obj.offset());
        }
    }
    published.sort();
    let live: Vec<u64> = heap.live_allocations().iter().map(|l| l.0).collect();
    assert_eq!(live, published, "leaked or dangling allocations");
    let all = heap.live_allocations();
    for w in all.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "overlap {w:?}");
    }
}

#[test]
fn sigkill_at_random_points_recovers() {
    let dir = common::shm_dir();
    let path = dir.path().join("pool");
    let exe = std::env::current_exe().unwrap();
    let mut acked = [0u64; THREADS];
    let mut seed = std::process::id() as u64 | 1;
    for round in 0..6 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut child = Command::new(&exe)
            .args(["--exact", "kill_child", "--nocapture", "--test-threads=1"])
            .env(ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut last = [0u64; THREADS];
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut it = line.split_whitespace().map(|w| w.parse::<u64>());
                if let (Some(Ok(t)), Some(Ok(n))) = (it.next(), it.next()) {
                    if (t as usize) < THREADS {
                        last[t as usize] = last[t as usize].max(n);
                    }
                }
            }
            last
        });
        std::thread::sleep(Duration::from_millis(60 + seed % 150));
        child.kill().unwrap();
        child.wait().unwrap();
        let seen = reader.join().unwrap();
        for t in 0..THREADS {
            acked[t] = acked[t].max(seen[t]);
        }
        let heap =
            Heap::open_file(&path).unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        check(&heap, &acked);
        // What recovery found is now the baseline (an unacknowledged commit may have landed).
        for (t, a) in acked.iter_mut().enumerate() {
            *a = heap.get(roots(&heap, t).1).unwrap();
        }
        eprintln!("round {round}: {acked:?} transactions survived");
    }
    assert!(
        acked.iter().all(|&a| a > 0),
        "the child never committed: {acked:?}"
    );
}
