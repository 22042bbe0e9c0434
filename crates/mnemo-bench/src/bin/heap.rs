//! mnemo-heap against PMDK libpmemobj: the mnemo side, and the report of both.
//!
//! `scripts/bench-heap.sh` runs this program and `bench/pmemobj/heap.c` in alternating
//! rounds, pinned to the same CPUs, then `heap report` over their output. This is a bin of
//! mnemo-bench, not a cargo bench of mnemo-heap, because mnemo-heap's dev-dependency
//! mnemo-testkit turns on mnemo-pmem's `mutants` feature in `cargo bench` builds; nothing
//! here depends on mnemo-testkit, so the timed code is the production build.
//!
//! `heap run <ops per thread> <runs> <threads>`: the same operations, in the same order, as
//! the C peer (each thread its own objects; a barrier starts the threads together):
//! * `tx8`: `heap.tx(|tx| tx.write(word, &i))`, each thread its own word and line;
//! * `txalloc64`: `heap.tx(|tx| tx.alloc_bytes(64))` (objects freed untimed);
//! * `alloc64`: `heap.pmalloc(64)` (an atomic allocation: its bitmap bit and one sync point,
//!   no redo record);
//! * `free64`: `heap.pfree` of the objects of `alloc64`;
//! * `floor2`: the medium's floor for two fences, not a heap operation: two lines of the
//!   thread's own, each stored (8 bytes), flushed and fenced (`Pool::write` + `persist`).
//!
//! The first run is a warm-up; the medians of the other runs are printed, one line per
//! operation: `mnemo,<op>,<threads>,<ops per thread>,<wall ns per op>,<ops per s>,
//! <fences per op>,<lines per op>,<thread CPU ns per op>` (wall: last end minus first start
//! over all operations of all threads, so ops/s is the aggregate; CPU: the threads' summed
//! CPU time per operation). Timed runs use a plain pool on /dev/shm. Fences and lines are
//! counted exactly in a separate, untimed pass over a counting wrapper of the same medium.
//!
//! `heap report <raw file> <load before> <load after> <rounds>`: medians over rounds of both
//! programs' lines; writes `bench/results/heap.csv`, `bench/results/heap.json` and
//! `bench/plots/heap.svg` (`mnemo_bench::plot_groups::grouped_bars`: with 40 bars,
//! `plot::bars` shows only every fourth label), and prints a Markdown table.

use std::collections::BTreeMap;
use std::fs::OpenOptions as FsOpen;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use mnemo_bench::plot_groups::{grouped_bars, GroupSeries};
use mnemo_heap::{Heap, HeapOptions, PPtr};
use mnemo_pmem::error::MediaError;
use mnemo_pmem::{CreateOptions, FileMedia, ForwardMedia, Media, Pool};

const OPS: [&str; 5] = ["tx8", "txalloc64", "alloc64", "free64", "floor2"];
const MAX_THREADS: u64 = 8;
const POOL_SIZE: u64 = 512 << 20;
const POOL_SIZE_MAX: u64 = 4 << 30;

/// Fence and line counters of the counting medium.
#[derive(Debug, Default)]
struct Counters {
    fences: AtomicU64,
    lines: AtomicU64,
}

/// The file medium with every fence and every cache line written back counted.
#[derive(Debug)]
struct Counting {
    inner: FileMedia,
    counters: Arc<Counters>,
}

fn lines_of(offset: u64, len: u64) -> u64 {
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
        let n = lines_of(offset, len);
        self.counters.lines.fetch_add(n, Ordering::Relaxed);
        self.inner.flush(offset, len)
    }
    fn drain(&self) -> Result<(), MediaError> {
        self.counters.fences.fetch_add(1, Ordering::Relaxed);
        self.inner.drain()
    }
    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        let n = lines_of(offset, src.len() as u64);
        self.counters.lines.fetch_add(n, Ordering::Relaxed);
        self.inner.copy_nodrain(offset, src)
    }
    fn stream_nodrain(&self, offset: u64, src: &[u8]) {
        let n = lines_of(offset, src.len() as u64);
        self.counters.lines.fetch_add(n, Ordering::Relaxed);
        self.inner.stream_nodrain(offset, src)
    }
}

fn pool_path(tag: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    Path::new(dir).join(format!("mnemo-heap-bench-{tag}.{}", std::process::id()))
}

/// A heap in a plain pool file (the timed runs).
fn plain_heap(path: &Path) -> Heap {
    let _ = std::fs::remove_file(path);
    Heap::create_file(path, POOL_SIZE, POOL_SIZE_MAX, &HeapOptions::default()).expect("heap")
}

/// A heap on the counting medium (the untimed counting pass).
fn counting_heap(path: &Path, counters: Arc<Counters>) -> Heap {
    let _ = std::fs::remove_file(path);
    let file = FsOpen::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .expect("create pool file");
    file.set_len(POOL_SIZE).expect("size pool file");
    let inner = FileMedia::map(path, file, POOL_SIZE, POOL_SIZE_MAX).expect("map");
    let media = Counting { inner, counters };
    let mut options = CreateOptions::new(POOL_SIZE, "mnemo-heap-bench");
    options.size_max = POOL_SIZE_MAX;
    let pool = Pool::create_on(Box::new(media), path, &options).expect("pool");
    Heap::create(pool, &HeapOptions::default()).expect("heap")
}

fn thread_cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// One thread's times of one operation.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: Instant,
    end: Instant,
    cpu_ns: f64,
}

/// Per operation: (wall ns per op, CPU ns per op) of one run over all threads.
type RunTimes = [(f64, f64); 5];

/// One run: every thread performs `n` of each operation, in order, started by a barrier.
/// `between(record)` is called by thread 0 while the others wait, before each operation,
/// after the untimed frees and at the end (the counting pass reads its counters there;
/// `record`: the counts since the last call belong to one operation).
fn one_run(heap: &Heap, words: &[PPtr<u64>], n: u64, between: &(dyn Fn(bool) + Sync)) -> RunTimes {
    let threads = words.len();
    let barrier = Barrier::new(threads);
    let spans: Vec<Vec<Span>> = std::thread::scope(|s| {
        let handles: Vec<_> = words
            .iter()
            .enumerate()
            .map(|(t, &word)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut offs: Vec<u64> = Vec::with_capacity(n as usize);
                    let mut spans = Vec::with_capacity(OPS.len());
                    for op in 0..OPS.len() {
                        // Quiesce all threads; thread 0 reads the counters (counting pass):
                        // the previous operation's counts, except after the untimed frees.
                        barrier.wait();
                        if t == 0 {
                            between(op != 0 && op != 2);
                        }
                        barrier.wait();
                        let start = Instant::now();
                        let cpu = thread_cpu_ns();
                        match op {
                            0 => {
                                for i in 0..n {
                                    heap.tx(|tx| tx.write(word, &i)).expect("tx8");
                                }
                            }
                            1 => {
                                for _ in 0..n {
                                    let off = heap.tx(|tx| tx.alloc_bytes(64)).expect("txalloc64");
                                    offs.push(off);
                                }
                            }
                            2 => {
                                for _ in 0..n {
                                    offs.push(heap.pmalloc(64).expect("alloc64"));
                                }
                            }
                            3 => {
                                for &off in &offs {
                                    heap.pfree(off).expect("free64");
                                }
                                offs.clear();
                            }
                            _ => {
                                // The medium's floor for two fences: two lines, each
                                // stored (8 bytes), flushed and fenced.
                                let pool = heap.pool();
                                let other = word.offset() + 64 * MAX_THREADS;
                                for i in 0..n {
                                    pool.write(other, &i.to_le_bytes()).expect("write");
                                    pool.msync(other, 8).expect("msync");
                                    pool.write(word.offset(), &i.to_le_bytes()).expect("write");
                                    pool.msync(word.offset(), 8).expect("msync");
                                }
                            }
                        }
                        let cpu_ns = thread_cpu_ns() - cpu;
                        spans.push(Span {
                            start,
                            end: Instant::now(),
                            cpu_ns,
                        });
                        if op == 1 {
                            barrier.wait();
                            if t == 0 {
                                between(true);
                            }
                            barrier.wait();
                            for &off in &offs {
                                heap.pfree(off).expect("free (untimed)");
                            }
                            offs.clear();
                        }
                    }
                    barrier.wait();
                    if t == 0 {
                        between(true);
                    }
                    spans
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker"))
            .collect()
    });
    let total = (n * threads as u64) as f64;
    let mut out = [(0.0, 0.0); 5];
    for (op, slot) in out.iter_mut().enumerate() {
        let first = spans.iter().map(|s| s[op].start).min().expect("threads");
        let last = spans.iter().map(|s| s[op].end).max().expect("threads");
        let cpu: f64 = spans.iter().map(|s| s[op].cpu_ns).sum();
        *slot = ((last - first).as_nanos() as f64 / total, cpu / total);
    }
    out
}

/// Each thread's word, on a line of its own (64-byte aligned inside one root that also holds
/// a second line per thread, `64 * MAX_THREADS` further, for the floor).
fn words(heap: &Heap, threads: u64) -> Vec<PPtr<u64>> {
    let root = heap
        .root::<[u64; 8 * (2 * MAX_THREADS as usize + 1)]>("bench-words")
        .expect("root");
    let base = root.offset().div_ceil(64) * 64;
    (0..threads)
        .map(|t| PPtr::from_offset(base + 64 * t))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    mnemo_bench::median(&v)
}

fn run(n: u64, runs: usize, threads: u64) {
    // Counting pass (untimed): exact fences and lines per operation, on the same heap code
    // over a wrapper of the same medium. Counts between operations (the untimed frees) are
    // left out.
    let counters = Arc::new(Counters::default());
    let path = pool_path("count");
    let heap = counting_heap(&path, counters.clone());
    let ws = words(&heap, threads);
    let count_n = (n / 10).clamp(1, 20_000);
    one_run(&heap, &ws, count_n, &|_| {}); // warm-up
    let per_op: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());
    let last = std::sync::Mutex::new((0u64, 0u64));
    let snap = || {
        (
            counters.fences.load(Ordering::Relaxed),
            counters.lines.load(Ordering::Relaxed),
        )
    };
    one_run(&heap, &ws, count_n, &|record| {
        let now = snap();
        let mut last = last.lock().expect("lock");
        if record {
            per_op
                .lock()
                .expect("lock")
                .push((now.0 - last.0, now.1 - last.1));
        }
        *last = now;
    });
    drop(heap);
    let _ = std::fs::remove_file(&path);
    let counted = per_op.into_inner().expect("lock");
    let denom = (count_n * threads) as f64;
    let counts: Vec<(f64, f64)> = counted
        .iter()
        .map(|&(f, l)| (f as f64 / denom, l as f64 / denom))
        .collect();

    // Timed runs: a plain pool, no counting.
    let path = pool_path("timed");
    let heap = plain_heap(&path);
    let ws = words(&heap, threads);
    one_run(&heap, &ws, n, &|_| {}); // warm-up
    let results: Vec<RunTimes> = (0..runs).map(|_| one_run(&heap, &ws, n, &|_| {})).collect();
    drop(heap);
    let _ = std::fs::remove_file(&path);
    for (op, name) in OPS.iter().enumerate() {
        let wall = median(results.iter().map(|r| r[op].0).collect());
        let cpu = median(results.iter().map(|r| r[op].1).collect());
        let (fences, lines) = counts.get(op).copied().unwrap_or((f64::NAN, f64::NAN));
        println!(
            "mnemo,{name},{threads},{n},{wall:.1},{:.0},{fences:.3},{lines:.3},{cpu:.1}",
            1e9 / wall
        );
    }
}

/// One program's median figures for one operation and thread count.
#[derive(Debug, Clone)]
struct Figure {
    ops: u64,
    wall_ns: f64,
    cpu_ns: f64,
    fences: String,
    lines: String,
}

/// impl -> its result lines (fields), one per round.
type ByImpl = BTreeMap<String, Vec<Vec<String>>>;

fn report(raw: &Path, load_before: &str, load_after: &str, rounds: &str) {
    // (op index, threads) -> impl -> lines of the rounds.
    let mut groups: BTreeMap<(usize, u64), ByImpl> = BTreeMap::new();
    let text = std::fs::read_to_string(raw).expect("read raw results");
    for line in text.lines() {
        let f: Vec<String> = line.trim().split(',').map(str::to_owned).collect();
        if f.len() != 9 {
            continue;
        }
        let Some(op) = OPS.iter().position(|o| *o == f[1]) else {
            continue;
        };
        let threads: u64 = f[2].parse().expect("threads");
        groups
            .entry((op, threads))
            .or_default()
            .entry(f[0].clone())
            .or_default()
            .push(f);
    }
    let figure = |rows: &[Vec<String>]| Figure {
        ops: rows[0][3].parse().expect("ops"),
        wall_ns: median(rows.iter().map(|r| r[4].parse().expect("ns")).collect()),
        cpu_ns: median(rows.iter().map(|r| r[8].parse().expect("cpu ns")).collect()),
        fences: rows[0][6].clone(),
        lines: rows[0][7].clone(),
    };
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    // Which code and command made the figures.
    let commit = mnemo_bench::head_commit();
    let command =
        std::env::var("MNEMO_BENCH_COMMAND").unwrap_or_else(|_| "scripts/bench-heap.sh".into());
    let results = mnemo_bench::bench_dir().join("results");
    let plots = mnemo_bench::bench_dir().join("plots");
    std::fs::create_dir_all(&results).expect("results dir");
    std::fs::create_dir_all(&plots).expect("plots dir");

    let mut csv = String::from(
        "commit,date,cpu,load_avg_before,load_avg_after,impl,op,threads,ops_per_thread,rounds,\
         wall_ns_per_op,wall_ops_per_s,wall_speedup_vs_pmdk,cpu_ns_per_op,cpu_ops_per_s,\
         cpu_speedup_vs_pmdk,fences_per_op,lines_per_op,counts\n",
    );
    let mut json_rows = Vec::new();
    // The plot: one group per (operation, threads); series mnemo/PMDK x wall/CPU, ns per op;
    // fences/lines per op of each program in its legend entries.
    let mut groups_plot: Vec<String> = Vec::new();
    let mut series: Vec<(String, Vec<f64>)> = vec![(String::new(), Vec::new()); 4];
    let mut counts_text = [Vec::new(), Vec::new()];
    println!(
        "| operation | threads | mnemo wall ns/op (M/s) | PMDK wall ns/op (M/s) | wall ratio | \
         mnemo CPU ns/op | PMDK CPU ns/op | CPU ratio | mnemo fences / lines | \
         PMDK fences / lines (stated) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (&(op, threads), impls) in &groups {
        let (Some(ours), Some(peer)) = (impls.get("mnemo"), impls.get("pmdk")) else {
            continue;
        };
        let ours = figure(ours);
        let peer = figure(peer);
        let wall_ratio = peer.wall_ns / ours.wall_ns;
        let cpu_ratio = peer.cpu_ns / ours.cpu_ns;
        println!(
            "| {} | {threads} | {:.0} ({:.2}) | {:.0} ({:.2}) | {wall_ratio:.2}x | {:.0} | {:.0} | \
             {cpu_ratio:.2}x | {} / {} | {} / {} |",
            OPS[op],
            ours.wall_ns,
            1e3 / ours.wall_ns,
            peer.wall_ns,
            1e3 / peer.wall_ns,
            ours.cpu_ns,
            peer.cpu_ns,
            ours.fences,
            ours.lines,
            peer.fences,
            peer.lines
        );
        for (name, fig, wall_x, cpu_x, counts) in [
            ("mnemo", &ours, wall_ratio, cpu_ratio, "counted"),
            ("pmdk", &peer, 1.0, 1.0, "stated (PMDK obj_persist_count)"),
        ] {
            csv.push_str(&format!(
                "{commit},{date},{cpu_model},{load_before},{load_after},{name},{},{threads},{},{rounds},\
                 {:.1},{:.0},{wall_x:.2},{:.1},{:.0},{cpu_x:.2},{},{},{counts}\n",
                OPS[op],
                fig.ops,
                fig.wall_ns,
                1e9 / fig.wall_ns,
                fig.cpu_ns,
                1e9 / fig.cpu_ns,
                fig.fences,
                fig.lines
            ));
            json_rows.push(serde_json::json!({
                "impl": name,
                "op": OPS[op],
                "threads": threads,
                "ops_per_thread": fig.ops,
                "wall_ns_per_op": fig.wall_ns,
                "wall_ops_per_s": 1e9 / fig.wall_ns,
                "wall_speedup_vs_pmdk": wall_x,
                "cpu_ns_per_op": fig.cpu_ns,
                "cpu_ops_per_s": 1e9 / fig.cpu_ns,
                "cpu_speedup_vs_pmdk": cpu_x,
                "fences_per_op": fig.fences.parse::<f64>().unwrap_or(f64::NAN),
                "lines_per_op": fig.lines.parse::<f64>().unwrap_or(f64::NAN),
                "counts": counts,
            }));
            let side = usize::from(name == "pmdk");
            series[side].1.push(fig.wall_ns);
            series[2 + side].1.push(fig.cpu_ns);
            if threads == 1 {
                let f: f64 = fig.fences.parse().unwrap_or(f64::NAN);
                let l: f64 = fig.lines.parse().unwrap_or(f64::NAN);
                counts_text[side].push(format!("{} {f:.0}/{l:.0}", OPS[op]));
            }
        }
        groups_plot.push(format!("{} {threads}T", OPS[op]));
    }
    series[0].0 = format!(
        "mnemo wall; fences/lines per op: {}",
        counts_text[0].join(", ")
    );
    series[1].0 = format!(
        "PMDK wall; fences/lines (stated): {}",
        counts_text[1].join(", ")
    );
    series[2].0 = "mnemo thread CPU time".into();
    series[3].0 = "PMDK thread CPU time".into();
    let series: Vec<GroupSeries> = series
        .into_iter()
        .map(|(name, values)| GroupSeries { name, values })
        .collect();
    let csv_path = results.join("heap.csv");
    std::fs::write(&csv_path, csv).expect("write csv");
    let json = serde_json::json!({
        "commit": commit,
        "command": command,
        "date": date,
        "cpu": cpu_model,
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "rounds": rounds,
        "medium": "/dev/shm (tmpfs), clwb + sfence; PMDK with PMEM_IS_PMEM_FORCE=1",
        "pmdk": "libpmemobj 1.12.1 (Debian)",
        "rows": json_rows,
    });
    let json_path = results.join("heap.json");
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&json).expect("json") + "\n",
    )
    .expect("write json");
    let first = |load: &str| load.split_whitespace().next().unwrap_or("?").to_owned();
    let svg = grouped_bars(
        &plots.join("heap.svg"),
        &format!(
            "mnemo-heap vs libpmemobj 1.12, /dev/shm, ns per op (lower is better), load {}..{}",
            first(load_before),
            first(load_after)
        ),
        "ns per op (log; 2T: aggregate wall, summed CPU)",
        &groups_plot,
        &series,
    )
    .expect("plot");
    eprintln!(
        "written {}, {}, {}",
        csv_path.display(),
        json_path.display(),
        svg.display()
    );
}

/// `heap profile <op> <n> [threads]`: `threads` threads (default 1) each run `n` of one
/// operation and nothing else, for a profiler (`perf record`) or an instruction counter
/// (`valgrind --tool=callgrind`: instructions per operation are the difference of two runs
/// with different `n` over their difference); prints wall ns per operation of one thread.
/// Wall time only: the thread-CPU clock's vDSO setup does not run under valgrind. `free64`
/// frees what `n` allocations made.
fn profile(op: &str, n: u64, threads: u64) {
    let path = pool_path("profile");
    let heap = plain_heap(&path);
    let ws = words(&heap, threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for &word in &ws {
            let heap = &heap;
            s.spawn(move || profile_thread(heap, op, n, word));
        }
    });
    println!(
        "{op}: {:.1} ns/op wall ({threads} thread(s), each {n} ops)",
        start.elapsed().as_nanos() as f64 / n as f64
    );
    drop(heap);
    let _ = std::fs::remove_file(&path);
}

fn profile_thread(heap: &Heap, op: &str, n: u64, word: PPtr<u64>) {
    let mut offs = Vec::with_capacity(n as usize);
    if op == "free64" {
        for _ in 0..n {
            offs.push(heap.pmalloc(64).expect("alloc"));
        }
    }
    match op {
        "tx8" => {
            for i in 0..n {
                heap.tx(|tx| tx.write(word, &i)).expect("tx8");
            }
        }
        "txalloc64" => {
            for _ in 0..n {
                offs.push(heap.tx(|tx| tx.alloc_bytes(64)).expect("txalloc64"));
            }
        }
        "alloc64" => {
            for _ in 0..n {
                offs.push(heap.pmalloc(64).expect("alloc64"));
            }
        }
        "free64" => {
            for &off in &offs {
                heap.pfree(off).expect("free64");
            }
        }
        "floor2" => {
            let pool = heap.pool();
            let other = word.offset() + 64 * MAX_THREADS;
            for i in 0..n {
                pool.write(other, &i.to_le_bytes()).expect("write");
                pool.msync(other, 8).expect("msync");
                pool.write(word.offset(), &i.to_le_bytes()).expect("write");
                pool.msync(word.offset(), 8).expect("msync");
            }
        }
        other => {
            eprintln!("unknown operation {other}");
            std::process::exit(2);
        }
    }
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("heap.rs"));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i)
            .and_then(|a| a.replace('_', "").parse().ok())
            .unwrap_or(default)
    };
    match args.first().map(String::as_str) {
        Some("run") => {
            let threads = num(3, 1).clamp(1, MAX_THREADS);
            run(num(1, 200_000).max(1), num(2, 5).max(1) as usize, threads)
        }
        Some("profile") if (3..=4).contains(&args.len()) => profile(
            &args[1],
            num(2, 1_000_000).max(1),
            num(3, 1).clamp(1, MAX_THREADS),
        ),
        Some("report") if args.len() == 5 => {
            report(Path::new(&args[1]), &args[2], &args[3], &args[4]);
        }
        _ => {
            eprintln!(
                "usage: heap run <ops per thread> <runs> <threads>\n       \
                 heap profile <tx8|txalloc64|alloc64|free64|floor2> <ops> [threads]\n       \
                 heap report <raw file> <load before> <load after> <rounds>"
            );
            std::process::exit(2);
        }
    }
}
