//! `mnemo analyze` as a stand-alone program, the same as `mnemo analyze` of the `mnemo` CLI:
//! `mnemo-analyze --load FUNC PATH... [-- FLAGS]`.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "mnemo-analyze", version)]
struct Cli {
    #[command(flatten)]
    args: mnemo_analyze::AnalyzeArgs,
}

fn main() -> std::process::ExitCode {
    mnemo_analyze::run_cli(Cli::parse().args)
}
