//! `vpm`: virtual persistent memory (issue 15), in two parts.
//!
//! **Faults** (in process): the cost per page of a first touch (zero fill), of a first touch
//! that evicts (swap-out: the page written to swap, synced, recorded, its slot reused) and of
//! a touch that brings a page back (swap-in, with an eviction), against the peer measured in
//! the same run: a first touch of a page of a plain shared mapping of a tmpfs file (the
//! kernel's fault and page allocation). The persistent-memory file is on /dev/shm, the swap
//! file on `VPM_BENCH_SWAP_DIR` (default /var/tmp: a disk). Each touch is a one-byte
//! `Media::copy_nodrain` (a store and its flush) or, for the swap-in, a one-byte read.
//!
//! **Figure 4 of Temporality**: `mnemo serve` on a virtual region (`--pm-budget`) against
//! `mnemo serve` without, both pools on /dev/shm, the swap file on the disk directory;
//! redis-benchmark SET of `VPM_BENCH_N` keys drawn from a range of 10^9 (new keys: the heap
//! only allocates, Temporality's linear SET) on fresh servers, and SET of `VPM_BENCH_N` keys
//! drawn from a range of `VPM_BENCH_N` (a third of them overwrites: random updates) then GET
//! of random keys of that range (random reads), for memory residence ratios (MRR, pages in
//! persistent memory over all pages) from 100% down to 40%. The budget of each point is that share of the pages the workload touches on a
//! region with room for all of them, measured first. Rounds (`VPM_BENCH_ROUNDS`) alternate
//! the servers; ratios are medians over rounds.
//!
//! Writes `bench/results/vpm-faults.csv`, `vpm-fig4.csv`, `vpm.json` and
//! `bench/plots/vpm-fig4.svg`. Run it with `scripts/bench-vpm.sh`; `VPM_BENCH_PLOT_ONLY=1`
//! redraws the plot from `vpm.json` and measures nothing.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mnemo_bench::{bench_dir, head_commit, machine, median, write_csv, write_json};
use mnemo_pmem::{FileMedia, Media};
use plotters::prelude::*;

const PAGE: u64 = 4096;
/// Slots beyond the pages a workload touches for the MRR 100% point: 64 for the run's own
/// variation, plus the evictor thread's reserve of free slots (an eviction batch), which it
/// keeps free by evicting; with fewer, "MRR 100%" would page.
const MRR_100_SPARE: u64 = 64 + mnemo_vpm::limits::EVICT_BATCH_PAGES;

/// MRR points of the figure, in percent.
const MRR_POINTS: [u64; 7] = [100, 90, 80, 70, 60, 50, 40];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_string(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

struct Config {
    mnemo: PathBuf,
    swap_dir: PathBuf,
    n: u64,
    rounds: u64,
    server_cpu: String,
    client_cpu: String,
    value_bytes: u64,
    clients: u64,
}

// --- Part 1: faults ------------------------------------------------------------------------

/// ns per page of touching `pages` pages from `first` with `touch`.
fn time_pages(first: u64, pages: u64, mut touch: impl FnMut(u64)) -> f64 {
    let started = Instant::now();
    for page in first..first + pages {
        touch(page);
    }
    started.elapsed().as_nanos() as f64 / pages as f64
}

/// One round of the fault costs: (zero fill, swap-out, swap-in, kernel first touch), ns per
/// page.
fn fault_round(config: &Config) -> Result<[f64; 4], String> {
    let shm = tempfile::tempdir_in("/dev/shm").map_err(|e| e.to_string())?;
    let disk = tempfile::tempdir_in(&config.swap_dir).map_err(|e| e.to_string())?;
    let budget: u64 = 4096;
    let capacity: u64 = 4 * budget;
    let space = mnemo_vpm::Space::create(
        &shm.path().join("pm"),
        &disk.path().join("swap"),
        mnemo_vpm::limits::DATA_OFFSET + mnemo_vpm::format::table_bytes(capacity) + budget * PAGE,
    )
    .map_err(|e| e.to_string())?;
    space
        .allocate("bench", capacity * PAGE, budget * PAGE)
        .map_err(|e| e.to_string())?;
    let region = space.open_region("bench", 0).map_err(|e| e.to_string())?;
    let store = |page: u64| region.copy_nodrain(page * PAGE, &[1]);
    // Pages 0..budget: first touches with free slots.
    let zero_fill = time_pages(0, budget, store);
    // Pages budget..capacity: each first touch evicts (in batches).
    let swap_out = time_pages(budget, capacity - budget, store);
    // Pages 0..budget again: all in swap; each brings its page back (and evicts).
    let mut byte = [0u8; 1];
    let swap_in = time_pages(0, budget, |page| {
        region.read(page * PAGE, &mut byte).expect("read");
        // The byte is used, so the optimizer keeps the read (and its fault).
        std::hint::black_box(byte[0]);
    });
    let stats = region.stats();
    if stats.swap_ins < budget || stats.swap_outs < capacity - budget {
        return Err(format!(
            "the fault benchmark did not page as planned: {stats:?}"
        ));
    }
    // The peer: a plain shared mapping of a tmpfs file, first touch of each page.
    let path = shm.path().join("plain");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| e.to_string())?;
    file.set_len(budget * PAGE).map_err(|e| e.to_string())?;
    let plain =
        FileMedia::map(&path, file, budget * PAGE, budget * PAGE).map_err(|e| e.to_string())?;
    let kernel = time_pages(0, budget, |page| plain.copy_nodrain(page * PAGE, &[1]));
    Ok([zero_fill, swap_out, swap_in, kernel])
}

// --- Part 2: Figure 4 ----------------------------------------------------------------------

/// A `mnemo serve` on a free port, its files in `dir`; killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(
        config: &Config,
        dir: &Path,
        swap_dir: &Path,
        budget_pages: Option<u64>,
    ) -> Result<Server, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| e.to_string())?;
        let mut command = Command::new("taskset");
        command
            .args(["-c", &config.server_cpu])
            .arg(&config.mnemo)
            .args([
                "serve",
                "--port",
                &port.to_string(),
                "--size",
                "512M",
                "--pool",
            ])
            .arg(dir.join("kv.pool"))
            .env("MNEMO_LOG", "warn");
        if let Some(pages) = budget_pages {
            command
                .args(["--pm-budget", &(pages * PAGE).to_string(), "--swap"])
                .arg(swap_dir.join("kv.swap"));
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("mnemo serve: {e}"))?;
        let mut server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("mnemo serve exited at start: {status}"));
            }
            if Instant::now() > deadline {
                return Err("mnemo serve did not start".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// redis-benchmark `test` (SET or GET) over keys `key:0..range`: requests per second.
    fn benchmark(&self, config: &Config, test: &str, range: u64) -> Result<f64, String> {
        let output = Command::new("taskset")
            .args(["-c", &config.client_cpu, "redis-benchmark"])
            .args(["-p", &self.port.to_string(), "-t", test])
            .args([
                "-c",
                &config.clients.to_string(),
                "-n",
                &config.n.to_string(),
            ])
            .args([
                "-r",
                &range.to_string(),
                "-d",
                &config.value_bytes.to_string(),
                "--csv",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-benchmark: {e}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        text.lines()
            .skip(1)
            .find_map(|l| l.split(',').nth(1)?.trim_matches('"').parse::<f64>().ok())
            .ok_or_else(|| format!("no result from redis-benchmark {test}: {text}"))
    }

    /// A field of `INFO persistence`.
    fn info(&self, field: &str) -> Option<f64> {
        let output = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "info", "persistence"])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One measured point of the figure.
struct Point {
    round: u64,
    mrr_target: u64,
    budget_pages: u64,
    set_plain: f64,
    set_vpm: f64,
    get_plain: f64,
    get_vpm: f64,
    lin_budget_pages: u64,
    lin_plain: f64,
    lin_vpm: f64,
    lin_mrr_end: f64,
    lin_swap_ins: f64,
    mrr_end: f64,
    swap_outs: f64,
    swap_ins: f64,
}

/// SET then GET on a fresh server: (SET rps, GET rps, the server for its INFO).
fn run_server(
    config: &Config,
    budget: Option<u64>,
) -> Result<(f64, f64, Server, tempfile::TempDir, tempfile::TempDir), String> {
    let shm = tempfile::tempdir_in("/dev/shm").map_err(|e| e.to_string())?;
    let disk = tempfile::tempdir_in(&config.swap_dir).map_err(|e| e.to_string())?;
    let server = Server::start(config, shm.path(), disk.path(), budget)?;
    let set = server.benchmark(config, "set", config.n)?;
    let get = server.benchmark(config, "get", config.n)?;
    Ok((set, get, server, shm, disk))
}

/// Keys of the linear SET: a range so large that nearly every key is new, so the heap only
/// allocates (Temporality's SET).
const LINEAR_RANGE: u64 = 1_000_000_000;

/// Linear SET on a fresh server: requests/s, and from INFO at the end (VPM only): pages
/// resident, the MRR, swap-ins.
fn run_linear(config: &Config, budget: Option<u64>) -> Result<(f64, [Option<f64>; 3]), String> {
    let shm = tempfile::tempdir_in("/dev/shm").map_err(|e| e.to_string())?;
    let disk = tempfile::tempdir_in(&config.swap_dir).map_err(|e| e.to_string())?;
    let server = Server::start(config, shm.path(), disk.path(), budget)?;
    let rps = server.benchmark(config, "set", LINEAR_RANGE)?;
    Ok((
        rps,
        [
            server.info("mnemo_vpm_resident_pages"),
            server.info("mnemo_vpm_mrr"),
            server.info("mnemo_vpm_swap_ins"),
        ],
    ))
}

fn figure4(config: &Config) -> Result<(u64, Vec<Point>), String> {
    let (_, lin_touched) = run_linear(config, Some(mnemo_vpm::limits::BUDGET_PAGES_MAX))?;
    let lin_touched = lin_touched[0].ok_or("no mnemo_vpm_resident_pages in INFO")? as u64;
    eprintln!("vpm bench: the linear SET touches {lin_touched} pages");
    // The pages the workload touches, on a region with room for all of them.
    let (_, _, server, _shm, _disk) =
        run_server(config, Some(mnemo_vpm::limits::BUDGET_PAGES_MAX))?;
    let touched = server
        .info("mnemo_vpm_resident_pages")
        .ok_or("no mnemo_vpm_resident_pages in INFO")? as u64;
    let swapped = server.info("mnemo_vpm_swapped_pages").unwrap_or(0.0);
    drop(server);
    if swapped > 0.0 {
        return Err(format!(
            "the workload touches more than {} pages: lower VPM_BENCH_N",
            mnemo_vpm::limits::BUDGET_PAGES_MAX
        ));
    }
    eprintln!("vpm bench: the workload touches {touched} pages");
    let mut points = Vec::new();
    for round in 1..=config.rounds {
        for &mrr in &MRR_POINTS {
            let budget = if mrr == 100 {
                touched + MRR_100_SPARE
            } else {
                touched * mrr / 100
            };
            let (set_plain, get_plain, plain, shm, disk) = run_server(config, None)?;
            drop(plain);
            drop((shm, disk));
            let lin_budget = if mrr == 100 {
                lin_touched + MRR_100_SPARE
            } else {
                lin_touched * mrr / 100
            };
            let (lin_plain, _) = run_linear(config, None)?;
            let (lin_vpm, lin_info) = run_linear(config, Some(lin_budget))?;
            let (set_vpm, get_vpm, server, _c, _d) = run_server(config, Some(budget))?;
            let point = Point {
                lin_budget_pages: lin_budget,
                lin_plain,
                lin_vpm,
                lin_mrr_end: lin_info[1].unwrap_or(f64::NAN),
                lin_swap_ins: lin_info[2].unwrap_or(f64::NAN),
                round,
                mrr_target: mrr,
                budget_pages: budget,
                set_plain,
                set_vpm,
                get_plain,
                get_vpm,
                mrr_end: server.info("mnemo_vpm_mrr").unwrap_or(f64::NAN),
                swap_outs: server.info("mnemo_vpm_swap_outs").unwrap_or(f64::NAN),
                swap_ins: server.info("mnemo_vpm_swap_ins").unwrap_or(f64::NAN),
            };
            eprintln!(
                "round {round} MRR {mrr}%: linear SET {:.1}% SET {:.1}% GET {:.1}% of plain (MRR at the end {:.3}, {} swap-outs, {} swap-ins)",
                100.0 * lin_vpm / lin_plain,
                100.0 * set_vpm / set_plain,
                100.0 * get_vpm / get_plain,
                point.mrr_end,
                point.swap_outs,
                point.swap_ins
            );
            points.push(point);
        }
    }
    Ok((touched, points))
}

fn ratio(points: &[Point], mrr: u64, f: impl Fn(&Point) -> f64) -> f64 {
    let mut v: Vec<f64> = points
        .iter()
        .filter(|p| p.mrr_target == mrr)
        .map(f)
        .collect();
    v.sort_by(f64::total_cmp);
    median(&v)
}

fn plot(path: &Path, series: &[(&str, Vec<(f64, f64)>)]) -> Result<(), String> {
    // Room for every point (a ratio above 100% is the plain server's noise, and is shown).
    let highest = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|&(_, y)| y))
        .fold(100.0, f64::max);
    let top = (highest / 10.0).ceil() * 10.0 + 10.0;
    mnemo_bench::plot::init_font()?;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "mnemo serve on virtual persistent memory (Temporality, Figure 4)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(105.0..35.0, 0.0..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("memory residence ratio, % (pages in persistent memory / all pages)")
        .y_desc("requests/s, % of mnemo serve without VPM")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, &(name, ref series)) in series.iter().enumerate() {
        let color = [
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(44, 160, 44),
        ][i % 3];
        chart
            .draw_series(LineSeries::new(
                series.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(series.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

/// `/proc/loadavg`: how busy the machine was (other jobs share its CPUs and disk).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn run() -> Result<(), String> {
    let mnemo = std::env::var("VPM_BENCH_MNEMO")
        .map(PathBuf::from)
        .map_err(|_| "VPM_BENCH_MNEMO: the release mnemo binary (scripts/bench-vpm.sh sets it)")?;
    let config = Config {
        mnemo,
        swap_dir: PathBuf::from(env_string("VPM_BENCH_SWAP_DIR", "/var/tmp")),
        n: env_u64("VPM_BENCH_N", 100_000),
        rounds: env_u64("VPM_BENCH_ROUNDS", 3),
        server_cpu: env_string("VPM_SERVER_CPU", "0"),
        client_cpu: env_string("VPM_CLIENT_CPU", "1"),
        value_bytes: env_u64("VPM_BENCH_VALUE", 100),
        clients: env_u64("VPM_BENCH_CLIENTS", 50),
    };
    let commit = head_commit();
    let load_before = loadavg();
    let command = std::env::var("VPM_BENCH_COMMAND").unwrap_or_else(|_| "vpm".into());

    let mut fault_rows = Vec::new();
    let mut costs: [Vec<f64>; 4] = Default::default();
    for round in 1..=config.rounds {
        let r = fault_round(&config)?;
        eprintln!(
            "faults round {round}: zero fill {:.0} ns, swap-out {:.0} ns, swap-in {:.0} ns per page; kernel first touch {:.0} ns",
            r[0], r[1], r[2], r[3]
        );
        for (i, case) in ["zero_fill", "swap_out", "swap_in", "kernel_first_touch"]
            .iter()
            .enumerate()
        {
            costs[i].push(r[i]);
            fault_rows.push(format!("{commit},{command:?},{round},{case},{:.0}", r[i]));
        }
    }
    for c in &mut costs {
        c.sort_by(f64::total_cmp);
    }
    write_csv(
        "vpm-faults.csv",
        "commit,command,round,case,ns_per_page",
        &fault_rows,
    )
    .map_err(|e| e.to_string())?;

    let (touched, points) = figure4(&config)?;
    let rows: Vec<String> = points
        .iter()
        .map(|p| {
            format!(
                "{commit},{command:?},{},{},{},{:.0},{:.0},{:.4},{},{:.0},{:.0},{:.4},{:.0},{:.0},{:.4},{:.4},{},{},{:.4},{}",
                p.round,
                p.mrr_target,
                p.lin_budget_pages,
                p.lin_plain,
                p.lin_vpm,
                p.lin_vpm / p.lin_plain,
                p.budget_pages,
                p.set_plain,
                p.set_vpm,
                p.set_vpm / p.set_plain,
                p.get_plain,
                p.get_vpm,
                p.get_vpm / p.get_plain,
                p.mrr_end,
                p.swap_outs,
                p.swap_ins,
                p.lin_mrr_end,
                p.lin_swap_ins
            )
        })
        .collect();
    write_csv(
        "vpm-fig4.csv",
        "commit,command,round,mrr_target,linear_budget_pages,linear_set_plain_rps,linear_set_vpm_rps,linear_set_ratio,budget_pages,set_plain_rps,set_vpm_rps,set_ratio,get_plain_rps,get_vpm_rps,get_ratio,mrr_end,swap_outs,swap_ins,linear_mrr_end,linear_swap_ins",
        &rows,
    )
    .map_err(|e| e.to_string())?;
    let linear: Vec<(f64, f64)> = MRR_POINTS
        .iter()
        .map(|&m| {
            (
                m as f64,
                100.0 * ratio(&points, m, |p| p.lin_vpm / p.lin_plain),
            )
        })
        .collect();
    let set: Vec<(f64, f64)> = MRR_POINTS
        .iter()
        .map(|&m| {
            (
                m as f64,
                100.0 * ratio(&points, m, |p| p.set_vpm / p.set_plain),
            )
        })
        .collect();
    let get: Vec<(f64, f64)> = MRR_POINTS
        .iter()
        .map(|&m| {
            (
                m as f64,
                100.0 * ratio(&points, m, |p| p.get_vpm / p.get_plain),
            )
        })
        .collect();
    let svg = bench_dir().join("plots").join("vpm-fig4.svg");
    plot(
        &svg,
        &[
            (SERIES[0].0, linear.clone()),
            (SERIES[1].0, set.clone()),
            (SERIES[2].0, get.clone()),
        ],
    )?;
    let json = serde_json::json!({
        "benchmark": "vpm",
        "commit": commit,
        "command": command,
        "machine": machine(),
        "requests": config.n,
        "value_bytes": config.value_bytes,
        "clients": config.clients,
        "rounds": config.rounds,
        "pages_touched": touched,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "fault_ns_per_page_median": {
            "zero_fill": median(&costs[0]),
            "swap_out": median(&costs[1]),
            "swap_in": median(&costs[2]),
            "kernel_first_touch": median(&costs[3]),
        },
        "linear_set_percent_of_plain": linear.iter().map(|&(m, r)| serde_json::json!({"mrr": m, "percent": r})).collect::<Vec<_>>(),
        "set_percent_of_plain": set.iter().map(|&(m, r)| serde_json::json!({"mrr": m, "percent": r})).collect::<Vec<_>>(),
        "get_percent_of_plain": get.iter().map(|&(m, r)| serde_json::json!({"mrr": m, "percent": r})).collect::<Vec<_>>(),
    });
    let path = write_json("vpm.json", &json).map_err(|e| e.to_string())?;
    eprintln!("vpm bench: {} and {}", path.display(), svg.display());
    for (((m, l), (_, s)), (_, g)) in linear.iter().zip(&set).zip(&get) {
        eprintln!("MRR {m:>3}%: linear SET {l:5.1}%  SET {s:5.1}%  GET {g:5.1}% of plain");
    }
    Ok(())
}

/// The series of the figure, in its order: the names and the keys of `vpm.json`.
const SERIES: [(&str, &str); 3] = [
    (
        "SET, new keys (linear allocation)",
        "linear_set_percent_of_plain",
    ),
    (
        "SET, keys of a range of n (random updates)",
        "set_percent_of_plain",
    ),
    ("GET, random keys", "get_percent_of_plain"),
];

/// `VPM_BENCH_PLOT_ONLY=1`: redraw `bench/plots/vpm-fig4.svg` from the medians in
/// `bench/results/vpm.json`, measuring nothing.
fn plot_only() -> Result<(), String> {
    let path = bench_dir().join("results").join("vpm.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut series = Vec::new();
    for (name, key) in SERIES {
        let points = json[key]
            .as_array()
            .ok_or_else(|| format!("{}: no {key}", path.display()))?
            .iter()
            .map(|p| Some((p["mrr"].as_f64()?, p["percent"].as_f64()?)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("{}: a point of {key} is not numbers", path.display()))?;
        series.push((name, points));
    }
    let svg = bench_dir().join("plots").join("vpm-fig4.svg");
    plot(&svg, &series)?;
    eprintln!(
        "vpm bench: {} redrawn from {}",
        svg.display(),
        path.display()
    );
    Ok(())
}

fn main() {
    mnemo_bench::exit_on_help(include_str!("vpm.rs"));
    let result = if std::env::var("VPM_BENCH_PLOT_ONLY").is_ok() {
        plot_only()
    } else {
        run()
    };
    if let Err(e) = result {
        eprintln!("vpm bench: {e}");
        std::process::exit(1);
    }
}
