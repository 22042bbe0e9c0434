//! Quick benchmark of the heap's durable operations, with fences and flushed lines per op.
//!
//! `cargo bench -p mnemo-heap --bench heap [-- ITERATIONS]`. The pool lives on /dev/shm
//! (flush + fence, the NVMM stand-in); a counting wrapper around the file medium counts
//! every fence (`drain`) and every cache line flushed or written with non-temporal stores.
//! PMDK figures here are quoted from `/work/shared/notes/pmem-libraries.md` (PMDK 1.12.1,
//! same VM type, `PMEM_IS_PMEM_FORCE=1`), not measured in this run. The comparison with
//! libpmemobj measured in the same run (1 and 2 threads, production build without the
//! `mutants` feature that this crate's dev-dependencies turn on) is `scripts/bench-heap.sh`.

use std::fs::OpenOptions as FsOpen;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use mnemo_heap::{Heap, HeapOptions, PPtr};
use mnemo_pmem::error::MediaError;
use mnemo_pmem::{CreateOptions, FileMedia, ForwardMedia, Media, Pool};

#[derive(Debug, Default)]
struct Counters {
    fences: AtomicU64,
    lines: AtomicU64,
}

#[derive(Debug)]
struct Counting {
    inner: FileMedia,
    counters: Arc<Counters>,
}

fn lines(offset: u64, len: u64) -> u64 {
    if len == 0 {
        0
    } else {
        (offset + len - 1) / 64 - offset / 64 + 1
    }
}

impl ForwardMedia for Counting {
    type Inner = FileMedia;
    fn inner(&self) -> &FileMedia {
        &self.inner
    }
    fn flush(&self, offset: u64, len: u64) {
        self.counters
            .lines
            .fetch_add(lines(offset, len), Ordering::Relaxed);
        self.inner.flush(offset, len)
    }
    fn drain(&self) -> Result<(), MediaError> {
        self.counters.fences.fetch_add(1, Ordering::Relaxed);
        self.inner.drain()
    }
    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        self.counters
            .lines
            .fetch_add(lines(offset, src.len() as u64), Ordering::Relaxed);
        self.inner.copy_nodrain(offset, src)
    }
    fn stream_nodrain(&self, offset: u64, src: &[u8]) {
        self.counters
            .lines
            .fetch_add(lines(offset, src.len() as u64), Ordering::Relaxed);
        self.inner.stream_nodrain(offset, src)
    }
}

fn heap_on_shm(path: &Path, counters: Arc<Counters>) -> Heap {
    let size = 64 << 20;
    let size_max = 4 << 30;
    let _ = std::fs::remove_file(path);
    let file = FsOpen::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .expect("create pool file");
    file.set_len(size).expect("size pool file");
    let media = FileMedia::map(path, file, size, size_max).expect("map");
    let media = Counting {
        inner: media,
        counters,
    };
    let mut options = CreateOptions::new(size, "bench");
    options.size_max = size_max;
    let pool = Pool::create_on(Box::new(media), path, &options).expect("pool");
    Heap::create(pool, &HeapOptions::default()).expect("heap")
}

struct Row {
    name: &'static str,
    ns: f64,
    fences: f64,
    lines: f64,
    pmdk_per_s: Option<(f64, f64)>,
}

fn measure(counters: &Counters, n: u64, mut op: impl FnMut(u64)) -> (f64, f64, f64) {
    for i in 0..n / 10 {
        op(i); // warm-up: faults pages in, fills runs
    }
    let f0 = counters.fences.load(Ordering::Relaxed);
    let l0 = counters.lines.load(Ordering::Relaxed);
    let start = Instant::now();
    for i in 0..n {
        op(i);
    }
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    let fences = (counters.fences.load(Ordering::Relaxed) - f0) as f64 / n as f64;
    let lines = (counters.lines.load(Ordering::Relaxed) - l0) as f64 / n as f64;
    (ns, fences, lines)
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let dir = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let path = Path::new(dir).join(format!("mnemo-heap-bench-{}", std::process::id()));
    let counters = Arc::new(Counters::default());
    let heap = heap_on_shm(&path, counters.clone());
    let mut rows = Vec::new();

    let word = heap.root::<u64>("word").unwrap();
    let pool = heap.pool();
    // `BENCH_ONLY=tx|txalloc`: only that loop, n times (for profiling).
    if let Ok(only) = std::env::var("BENCH_ONLY") {
        for i in 0..n {
            if only == "tx" {
                heap.tx(|tx| tx.write(word, &i)).unwrap();
            } else {
                let off = heap.tx(|tx| tx.alloc_bytes(64)).unwrap();
                heap.pfree(off).unwrap();
            }
        }
        return;
    }
    let (ns, fences, lines) = measure(&counters, n, |i| {
        pool.write(word.offset(), &i.to_le_bytes()).unwrap();
        pool.msync(word.offset(), 8).unwrap();
    });
    rows.push(Row {
        name: "floor: store+flush+fence",
        ns,
        fences,
        lines,
        pmdk_per_s: None,
    });
    let (ns, fences, lines) = measure(&counters, n, |i| {
        pool.write(word.offset() + 64, &i.to_le_bytes()).unwrap();
        pool.msync(word.offset() + 64, 8).unwrap();
        pool.write(word.offset(), &i.to_le_bytes()).unwrap();
        pool.msync(word.offset(), 8).unwrap();
    });
    rows.push(Row {
        name: "floor: 2x (store+flush+fence)",
        ns,
        fences,
        lines,
        pmdk_per_s: None,
    });
    let (ns, fences, lines) = measure(&counters, n, |i| {
        pool.write(word.offset(), &i.to_le_bytes()).unwrap();
        pool.msync(word.offset(), 8).unwrap();
    });
    rows.push(Row {
        name: "sync point: store+msync (policy)",
        ns,
        fences,
        lines,
        pmdk_per_s: None,
    });
    let (ns, fences, lines) = measure(&counters, n, |i| heap.tx(|tx| tx.write(word, &i)).unwrap());
    rows.push(Row {
        name: "tx 8-byte update",
        ns,
        fences,
        lines,
        pmdk_per_s: Some((1.2e6, 1.45e6)),
    });

    let (ns, fences, lines) = measure(&counters, n, |i| heap.atomic_update(word, i).unwrap());
    rows.push(Row {
        name: "atomic_update 8 B",
        ns,
        fences,
        lines,
        pmdk_per_s: None,
    });

    let mut offs = Vec::with_capacity(n as usize * 2);
    let (ns, fences, lines) = measure(&counters, n, |_| {
        offs.push(heap.tx(|tx| tx.alloc_bytes(64)).unwrap())
    });
    rows.push(Row {
        name: "tx alloc 64 B",
        ns,
        fences,
        lines,
        pmdk_per_s: Some((0.8e6, 1.07e6)),
    });
    let (ns, fences, lines) = measure(&counters, n, |_| {
        offs.push(heap.tx(|tx| tx.alloc::<[u8; 64]>()).unwrap().offset())
    });
    rows.push(Row {
        name: "tx zalloc 64 B",
        ns,
        fences,
        lines,
        pmdk_per_s: None,
    });
    let mut it = offs.clone().into_iter();
    let (ns, fences, lines) = measure(&counters, n, |_| heap.pfree(it.next().unwrap()).unwrap());
    rows.push(Row {
        name: "atomic free 64 B",
        ns,
        fences,
        lines,
        pmdk_per_s: Some((1.0 / 875e-9, 1.0 / 875e-9)),
    });
    for off in it {
        heap.pfree(off).unwrap();
    }

    offs.clear();
    let (ns, fences, lines) = measure(&counters, n, |_| offs.push(heap.pmalloc(64).unwrap()));
    rows.push(Row {
        name: "atomic alloc 64 B",
        ns,
        fences,
        lines,
        pmdk_per_s: Some((0.78e6, 0.79e6)),
    });
    let slot = heap.root::<PPtr<[u8; 64]>>("slot").unwrap();
    let (ns, fences, lines) = measure(&counters, n / 4, |i| {
        offs.push(heap.alloc_into(slot, &[i as u8; 64]).unwrap().offset())
    });
    rows.push(Row {
        name: "alloc_into 64 B (publish)",
        ns,
        fences,
        lines,
        pmdk_per_s: None,
    });

    // Two threads, each updating its own word transactionally.
    let words: Vec<PPtr<u64>> = (0..2)
        .map(|t| heap.root::<u64>(&format!("w{t}")).unwrap())
        .collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for w in &words {
            let heap = heap.clone();
            let w = *w;
            s.spawn(move || {
                for i in 0..n {
                    heap.tx(|tx| tx.write(w, &i)).unwrap();
                }
            });
        }
    });
    let two = start.elapsed().as_nanos() as f64 / (2 * n) as f64;

    println!(
        "mnemo-heap quick bench: {n} ops each, pool on {dir}, flush {:?}",
        mnemo_pmem::cpu::choice().flush
    );
    println!("| operation | ns/op | M ops/s | fences/op | lines/op | PMDK M/s (notes) | ratio |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let mops = 1e3 / r.ns;
        let (pmdk, ratio) = match r.pmdk_per_s {
            Some((lo, hi)) => (
                format!("{:.2}-{:.2}", lo / 1e6, hi / 1e6),
                format!("{:.1}x-{:.1}x", mops * 1e6 / hi, mops * 1e6 / lo),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} |",
            r.name, r.ns, mops, r.fences, r.lines, pmdk, ratio
        );
    }
    println!(
        "| tx 8-byte update, 2 threads (aggregate) | {:.0} | {:.2} | 2 | 2 | - | - |",
        two,
        1e3 / two
    );
    let stats = heap.stats();
    println!(
        "heap: {} chunks, fragmentation {:.2}",
        stats.chunks,
        stats.fragmentation()
    );
    drop(heap);
    let _ = std::fs::remove_file(&path);
}
