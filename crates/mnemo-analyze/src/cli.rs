//! The `mnemo analyze` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::{analyze, render, Options, Strategy};

/// Find the C types a program persists, to plan its move to persistent memory.
///
/// Static analysis after NVMOVE: any struct or union that a program creates or modifies while
/// it restores its state at start-up holds persistent state. Starting from the load functions
/// you name, the analysis walks the call graph breadth-first (each function once), finds every
/// variable and field assigned or modified (`=`, `+=`, `++`, `memcpy`, `read` into a buffer,
/// ...), follows it to the type of the object written, and reports each struct or union of the
/// program's own sources with where it is defined and the chain of calls that writes it, plus
/// the containers whose pointer fields lead to those writes. Functions taking no pointers are
/// skipped, the C library is not entered, and calls through function pointers are listed as
/// unresolved. Iterators, alignment variants, and types written only on the stack, only on
/// paths that end the process, only in a function's own `static` variables, only in objects
/// released before loading ends, or only by (or beneath) functions that release memory, tell
/// others about a change or record measurements are flagged as likely false positives. A port checklist lists, per type, where its objects are allocated and
/// changed (text, JSON or SARIF 2.1.0).
///
/// Sources are parsed with libclang (install `libclang-14-dev`). A directory with a
/// `compile_commands.json` is parsed with its flags; otherwise every `.c` file under it is
/// parsed with `-I` for its header directories and the flags given after `--`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
How it works:
  Any struct or union a program creates or modifies while it restores its state at
  start-up holds persistent state (NVMOVE). From the --load functions, the call graph
  is walked breadth-first, each function once; every assignment, ++/--, and write
  through memcpy/strcpy/memset/read/fread/fgets/sscanf... is followed to the type of
  the object written and to the structs that embed it by value. Reported: each type of
  the program's own sources (not system headers) with its definition and the chain of
  calls down to the statement that writes it. A type whose pointer field is followed
  to a write is reported as a reached container (redisDb in `dictAdd(db->dict, ...)`);
  bytes written through casts or into memory allocated with sizeof(T) count for T.
  Functions taking no pointers are skipped, the C library is not entered, calls
  through function pointers are listed as unresolved. Flagged as likely false
  positives: iterators, alignment variants, types written only on the stack, only
  where the process ends next (exit, abort, noreturn), only in a function's own
  static variables (a cache), only in objects released before loading ends, or only
  by or beneath functions that release memory, notify others of a change (notify,
  signal, publish, broadcast, propagate, replicate) or record measurements (latency,
  metric, histogram). The port checklist lists, per type, the allocation sites to change
  to mnemo_pmalloc and the stores that need a transaction once it is persistent. Sources are parsed with libclang (apt-get install libclang-14-dev):
  a directory's compile_commands.json when present, else every .c file under it with
  -I for its header directories and the flags after --.

Examples:
  mnemo analyze --load rdbLoad --load loadAppendOnlyFiles redis/src -- -Ideps/hiredis
  mnemo analyze --load load_records --format json app/
  mnemo analyze --load load_records --format sarif app/ > analyze.sarif
  mnemo analyze --load load_records --strategy both app/ -- -Iinclude -DNDEBUG

Strategies:
  load       types written while loading (NVMOVE's; few false positives)
  backtrack  types whose contents reach write/fwrite/fprintf/send, traced back through
             sprintf/memcpy and up through callers (over-reports logging and sockets)
  both       the two side by side")]
pub struct AnalyzeArgs {
    /// A function that restores the program's state at start-up (repeat for several).
    #[arg(long = "load", value_name = "FUNCTION")]
    pub load: Vec<String>,

    /// Which analysis to run.
    #[arg(long, value_enum, default_value = "load")]
    pub strategy: Strategy,

    /// Output format: text for a person, JSON for tools, SARIF 2.1.0 for editors and
    /// code scanning.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,

    /// Same as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,

    /// Source directories or files.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,

    /// Processes parsing in parallel (default: one per CPU). libclang is single-threaded per
    /// process, so the extra ones are copies of this program.
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,

    /// Compiler flags for every source, after `--` (e.g. `-- -Iinclude -DNDEBUG`).
    #[arg(last = true, value_name = "FLAGS", allow_hyphen_values = true)]
    pub flags: Vec<String>,
}

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Text for a person, with the port checklist.
    Text,
    /// The whole report as JSON.
    Json,
    /// SARIF 2.1.0: persistent types, allocation sites and stores as results.
    Sarif,
}

/// Runs `mnemo analyze`: prints the report (text or JSON) on standard output, errors on
/// standard error; the exit code is nonzero on errors.
pub fn run_cli(args: AnalyzeArgs) -> ExitCode {
    if let Ok(spec) = std::env::var(crate::workers::WORKER_ENV) {
        // This process was started by another `mnemo analyze` to parse a share of the units.
        let flows = args.strategy.runs_backtrack();
        return if crate::workers::work(&spec, &args.paths, &args.flags, flows) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let options = Options {
        paths: args.paths,
        load_functions: args.load,
        extra_flags: args.flags,
        strategy: args.strategy,
        progress: true,
        jobs: args.jobs.unwrap_or(cpus),
    };
    let report = match analyze(&options) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("mnemo analyze: {e}");
            return ExitCode::from(2);
        }
    };
    let format = if args.json { Format::Json } else { args.format };
    let encoded = match format {
        Format::Text => {
            print!("{}", render::text(&report));
            return ExitCode::SUCCESS;
        }
        Format::Json => serde_json::to_string_pretty(&report),
        Format::Sarif => serde_json::to_string_pretty(&render::sarif(&report)),
    };
    match encoded {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("mnemo analyze: cannot encode the report: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
