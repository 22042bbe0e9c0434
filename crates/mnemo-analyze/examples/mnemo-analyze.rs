//! `mnemo analyze` as a stand-alone program, for trying the analysis without the `mnemo` CLI:
//! `cargo run --release -p mnemo-analyze --example mnemo-analyze -- --load FUNC PATH`.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "mnemo-analyze")]
struct Cli {
    #[command(flatten)]
    args: mnemo_analyze::AnalyzeArgs,
}

fn main() -> std::process::ExitCode {
    mnemo_analyze::run_cli(Cli::parse().args)
}
