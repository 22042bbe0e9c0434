//! Parsing in parallel: worker processes, since libclang can only be used on one thread.
//!
//! clang-rs allows one live `Clang` per process and its handles cannot cross threads, so
//! parallel parsing needs processes. [`run_cli`](crate::run_cli) re-executes the current
//! program with the same arguments and [`WORKER_ENV`] set to `K/N`; that child parses the
//! `K`-th of `N` interleaved shares of the units and prints its facts as JSON on standard
//! output. The parent parses share 0 meanwhile and merges. A worker that fails to start or to
//! answer is not fatal: its share is parsed in-process afterwards.

use std::io::Read;
use std::process::{Command, Stdio};

use crate::extract::{extract_share, finish, progress_bar};
use crate::facts::Program;
use crate::sources::Unit;
use crate::Error;

/// The environment variable that makes `run_cli` a worker: `K/N`.
pub(crate) const WORKER_ENV: &str = "MNEMO_ANALYZE_WORKER";

/// Fewer units than this are parsed in-process: starting a worker costs more than it saves.
const PARALLEL_UNITS_MIN: usize = 16;

/// Most worker processes started (each holds a libclang and a parsed unit in memory).
pub(crate) const JOBS_MAX: usize = 16;

fn share(units: usize, k: usize, n: usize) -> Vec<usize> {
    (0..units).filter(|i| i % n == k).collect()
}

/// Parses all units with `jobs` processes (this one included) and merges their facts.
///
/// # Errors
/// libclang cannot be loaded, or no unit parsed.
pub(crate) fn extract(
    units: &[Unit],
    progress: bool,
    jobs: usize,
    flows: bool,
) -> Result<Program, Error> {
    let jobs = jobs.clamp(1, JOBS_MAX).min(units.len().max(1));
    let bar = progress_bar(units.len(), progress);
    if jobs == 1 || units.len() < PARALLEL_UNITS_MIN {
        let all: Vec<usize> = (0..units.len()).collect();
        let mut program = extract_share(units, &all, &bar, 1, flows)?;
        program.processes = 1;
        bar.finish_and_clear();
        return finish(program, units.len());
    }
    let children: Vec<_> = (1..jobs).map(|k| (k, spawn(k, jobs))).collect();
    let mut program = extract_share(
        units,
        &share(units.len(), 0, jobs),
        &bar,
        jobs as u64,
        flows,
    )?;
    bar.set_message("waiting for the other workers");
    let mut processes = 1;
    for (k, child) in children {
        match child.and_then(collect) {
            Some(part) => {
                program.merge(part);
                processes += 1;
            }
            None => {
                let part = extract_share(units, &share(units.len(), k, jobs), &bar, 1, flows)?;
                program.merge(part);
            }
        }
    }
    program.processes = processes;
    bar.finish_and_clear();
    finish(program, units.len())
}

/// A started worker and the thread draining its standard output (so it never blocks on a
/// full pipe while this process is busy parsing).
type Worker = (
    std::process::Child,
    std::thread::JoinHandle<std::io::Result<Vec<u8>>>,
);

fn spawn(k: usize, n: usize) -> Option<Worker> {
    let exe = std::env::current_exe().ok()?;
    let mut child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(WORKER_ENV, format!("{k}/{n}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stdout.read_to_end(&mut bytes).map(|_| bytes)
    });
    Some((child, reader))
}

fn collect((mut child, reader): Worker) -> Option<Program> {
    let bytes = reader.join().ok()?.ok()?;
    let status = child.wait().ok()?;
    if !status.success() {
        return None;
    }
    // Shapes of deeply nested code nest deeper than serde_json's default limit of 128; the
    // extraction bounds them (SHAPE_DEPTH_MAX), so the limit is lifted for this reader only.
    let mut reader = serde_json::Deserializer::from_slice(&bytes);
    reader.disable_recursion_limit();
    serde::Deserialize::deserialize(&mut reader).ok()
}

/// The worker side: parses share `K/N` (from [`WORKER_ENV`]) and prints the facts as JSON.
/// Returns false when the specification or the analysis fails.
pub(crate) fn work(
    spec: &str,
    paths: &[std::path::PathBuf],
    flags: &[String],
    flows: bool,
) -> bool {
    let Some((k, n)) = spec.split_once('/') else {
        return false;
    };
    let (Ok(k), Ok(n)) = (k.parse::<usize>(), n.parse::<usize>()) else {
        return false;
    };
    if k >= n {
        return false;
    }
    let Ok(units) = crate::sources::discover(paths, flags) else {
        return false;
    };
    let hidden = indicatif::ProgressBar::hidden();
    let Ok(program) = extract_share(&units, &share(units.len(), k, n), &hidden, 1, flows) else {
        return false;
    };
    match serde_json::to_string(&program) {
        Ok(text) => {
            println!("{text}");
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_cover_every_unit_once() {
        let mut all: Vec<usize> = (0..3).flat_map(|k| share(10, k, 3)).collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
}
