//! Shared helpers of mnemo's benchmarks: timing, result files, plots.
//!
//! Every benchmark prints ratios against a peer measured in the same run and writes its
//! results under `bench/results/` and its plots under `bench/plots/` (see `bench/README.md`).
#![deny(unsafe_code)]

pub mod plot;
pub mod plot_groups;
pub mod resp_conn;
pub mod servers;
pub mod ycsb;

use std::path::{Path, PathBuf};
use std::time::Instant;

/// With `--help` or `-h` among the arguments: prints the module doc (`//!` lines) at the
/// top of `source`, a benchmark's own text (`include_str!` of its file), and exits; a
/// benchmark asked for help must not start measuring.
pub fn exit_on_help(source: &str) {
    if !std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        return;
    }
    for line in source.lines().take_while(|l| l.starts_with("//!")) {
        let text = line.trim_start_matches("//!");
        println!("{}", text.strip_prefix(' ').unwrap_or(text));
    }
    std::process::exit(0);
}

/// The repository's `bench/` folder.
pub fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench")
}

/// Run `f` (which performs `ops` operations) `batches` times; return ns per operation of
/// each batch, sorted.
pub fn sample(batches: usize, ops: u64, mut f: impl FnMut()) -> Vec<f64> {
    let mut out = Vec::with_capacity(batches);
    f(); // warm up
    for _ in 0..batches {
        let started = Instant::now();
        f();
        out.push(started.elapsed().as_nanos() as f64 / ops as f64);
    }
    out.sort_by(f64::total_cmp);
    out
}

/// Median of sorted samples: the middle one, or the mean of the two middle ones for an even
/// count (so the "median" of two rounds is not simply the higher one).
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The commit of the code measured, for results files: `git rev-parse --short HEAD` of the
/// repository, with `+dirty` when tracked files had changes; `unknown` outside a checkout.
pub fn head_commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(bench_dir())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match (
        git(&["rev-parse", "--short", "HEAD"]),
        git(&["status", "--porcelain", "--untracked-files=no"]),
    ) {
        (Some(c), Some(changes)) if !changes.is_empty() => format!("{c}+dirty"),
        (Some(c), _) => c,
        _ => "unknown".into(),
    }
}

/// Write `value` as pretty JSON to `bench/results/<name>`.
pub fn write_json(name: &str, value: &serde_json::Value) -> std::io::Result<PathBuf> {
    let path = bench_dir().join("results").join(name);
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    std::fs::write(&path, format!("{value:#}\n"))?;
    Ok(path)
}

/// Write CSV rows to `bench/results/<name>`.
pub fn write_csv(name: &str, header: &str, rows: &[String]) -> std::io::Result<PathBuf> {
    let path = bench_dir().join("results").join(name);
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
    let mut text = String::from(header);
    text.push('\n');
    for row in rows {
        text.push_str(row);
        text.push('\n');
    }
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A short description of the machine, recorded with every result.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    serde_json::json!({
        "cpu": cpu,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "kernel": kernel.trim(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(super::median(&[1.0, 3.0]), 2.0);
        assert_eq!(super::median(&[1.0, 2.0, 10.0]), 2.0);
        assert_eq!(super::median(&[1.0, 2.0, 4.0, 10.0]), 3.0);
        assert!(super::median(&[]).is_nan());
    }
}
