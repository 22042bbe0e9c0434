//! `plot_csv`: grouped bars from a results file that the shell benchmarks write
//! (`scripts/bench-kv-disk.sh`): the median over rounds of one value per (series, group), for
//! the rows of one commit.
//!
//! ```text
//! plot_csv --csv bench/results/kv-disk.csv --svg bench/plots/kv-disk.svg \
//!     --series server --group workload --value rps [--commit HASH] \
//!     [--title TEXT] [--y-label TEXT]
//! ```
//!
//! Without `--commit`, the commit of the file's last row. Series and groups keep the order
//! of their first appearance. The title gets the commit and the number of rounds. Prints
//! each median with its minimum and maximum.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use mnemo_bench::plot_groups::{grouped_bars, GroupSeries};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", USAGE);
        return ExitCode::SUCCESS;
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("plot_csv: {error}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: plot_csv --csv FILE --svg FILE --series COLUMN --group COLUMN \
--value COLUMN [--commit HASH] [--title TEXT] [--y-label TEXT]";

fn get<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn required<'a>(args: &'a [String], name: &str) -> Result<&'a str, String> {
    get(args, name).ok_or_else(|| format!("{name} is required"))
}

/// The median of `values` (sorted here); for an even count, the mean of the middle two.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let csv = PathBuf::from(required(args, "--csv")?);
    let svg = PathBuf::from(required(args, "--svg")?);
    let (series_col, group_col, value_col) = (
        required(args, "--series")?,
        required(args, "--group")?,
        required(args, "--value")?,
    );
    let text = std::fs::read_to_string(&csv).map_err(|e| format!("{}: {e}", csv.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| format!("{}: empty", csv.display()))?
        .split(',')
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("{}: no column {name}", csv.display()))
    };
    let (commit_at, series_at, group_at, value_at) = (
        column("commit")?,
        column(series_col)?,
        column(group_col)?,
        column(value_col)?,
    );
    let rows: Vec<Vec<&str>> = lines
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(',').collect())
        .collect();
    let commit = match get(args, "--commit") {
        Some(c) => c.to_string(),
        None => rows
            .last()
            .and_then(|r| r.get(commit_at))
            .ok_or_else(|| format!("{}: no rows", csv.display()))?
            .to_string(),
    };
    let mut series: Vec<String> = Vec::new();
    let mut groups: Vec<String> = Vec::new();
    let mut samples: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    for (line, row) in rows.iter().enumerate() {
        if row.get(commit_at) != Some(&commit.as_str()) {
            continue;
        }
        let field = |at: usize| {
            row.get(at)
                .map(|f| f.trim_matches('"'))
                .ok_or_else(|| format!("{}: row {} is short", csv.display(), line + 2))
        };
        let (s, g) = (field(series_at)?, field(group_at)?);
        let value: f64 = field(value_at)?.parse().map_err(|_| {
            format!(
                "{}: row {}: {value_col} is not a number",
                csv.display(),
                line + 2
            )
        })?;
        let si = index_of(&mut series, s);
        let gi = index_of(&mut groups, g);
        samples.entry((si, gi)).or_default().push(value);
    }
    if samples.is_empty() {
        return Err(format!("{}: no rows of commit {commit}", csv.display()));
    }
    let rounds = samples.values().map(Vec::len).max().unwrap_or(0);
    let mut plotted = Vec::new();
    for (si, name) in series.iter().enumerate() {
        let mut values = Vec::new();
        for (gi, group) in groups.iter().enumerate() {
            let mut v = samples.get(&(si, gi)).cloned().unwrap_or_default();
            let (lo, hi) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
            let m = median(&mut v);
            if !v.is_empty() {
                println!(
                    "{name:>24} {group:>8}: median {m:.1} (min {lo:.1}, max {hi:.1}, {} rounds)",
                    v.len()
                );
            }
            values.push(m);
        }
        plotted.push(GroupSeries {
            name: name.clone(),
            values,
        });
    }
    let title = format!(
        "{} (commit {commit}, median of {rounds} rounds)",
        get(args, "--title").unwrap_or(value_col)
    );
    let path = grouped_bars(
        &svg,
        &title,
        get(args, "--y-label").unwrap_or(value_col),
        &groups,
        &plotted,
    )?;
    println!("plot: {}", path.display());
    Ok(())
}

fn index_of(names: &mut Vec<String>, name: &str) -> usize {
    names.iter().position(|n| n == name).unwrap_or_else(|| {
        names.push(name.to_string());
        names.len() - 1
    })
}
