//! The command-line surface: argument parsing and exit codes.

use std::process::ExitCode;

use clap::Parser;
use mnemo_analyze::{run_cli, AnalyzeArgs, Format, Strategy};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: AnalyzeArgs,
}

fn parse(argv: &[&str]) -> Result<AnalyzeArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("analyze").chain(argv.iter().copied())).map(|c| c.args)
}

#[test]
fn parses_loads_strategy_paths_and_flags() {
    let args = parse(&[
        "--load",
        "a",
        "--load",
        "b",
        "--strategy",
        "both",
        "--json",
        "src",
        "lib",
        "--",
        "-DX",
        "-Iinc",
    ])
    .expect("valid arguments");
    assert_eq!(args.load, vec!["a", "b"]);
    assert_eq!(args.strategy, Strategy::Both);
    assert!(args.json);
    assert_eq!(args.paths.len(), 2);
    assert_eq!(args.flags, vec!["-DX", "-Iinc"]);
}

#[test]
fn a_path_is_required() {
    assert!(parse(&["--load", "a"]).is_err());
}

#[test]
fn errors_give_a_nonzero_exit_code() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/fig1.c");
    let args = parse(&["--load", "no_such_function", dir]).expect("valid arguments");
    assert_eq!(run_cli(args), ExitCode::from(2));
    let args = parse(&["--load", "load_records", "--json", dir]).expect("valid arguments");
    assert_eq!(run_cli(args), ExitCode::SUCCESS);
}

#[test]
fn the_format_is_text_json_or_sarif() {
    let args = parse(&["--load", "a", "src"]).expect("valid arguments");
    assert_eq!(args.format, Format::Text);
    let args = parse(&["--load", "a", "--format", "sarif", "src"]).expect("valid arguments");
    assert_eq!(args.format, Format::Sarif);
    assert!(parse(&["--load", "a", "--format", "xml", "src"]).is_err());
    // --json is the old spelling of --format json; both at once are refused.
    assert!(parse(&["--load", "a", "--json", "--format", "sarif", "src"]).is_err());
}
