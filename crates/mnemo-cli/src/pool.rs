//! `mnemo pool ...`: create, info, check, grow.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use mnemo_pmem::inspect::{self, Inspection, Severity};
use mnemo_pmem::{cpu, CreateOptions, OpenOptions, Pool};

use crate::size;

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a new pool file (mode 0600). Refuses to overwrite an existing file.
    ///
    /// Example: mnemo pool create /dev/shm/app.pool --size 64M --layout app
    Create(CreateArgs),
    /// Print a pool's header (both copies), its medium and the flush method in use.
    ///
    /// Reads the file without opening it for writing, so it works on read-only files and on
    /// pools that another process has open.
    Info(InspectArgs),
    /// Verify a pool's header copies and size, and say clearly what is wrong.
    ///
    /// Exit status: 0 when the pool can be opened (warnings may be printed), 1 when it
    /// cannot, 2 when the file cannot be read at all.
    Check(InspectArgs),
    /// Grow a pool (offsets stay valid; open pools grow themselves with the library call).
    Grow(GrowArgs),
    /// A round trip through a pool: increment a durable counter and print it.
    ///
    /// Works on pools created with `--layout mnemo-demo`; each run opens the pool, reads the
    /// counter at the start of the data area, increments it, makes it durable with a sync
    /// point and closes the pool. Run it twice: the count survives.
    Counter(InspectArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Where to create the pool file (use /dev/shm/... to emulate persistent memory).
    pub path: PathBuf,
    /// Initial size: 64M, 1G, ... (binary units; at least 64K).
    #[arg(long, default_value = "64M", value_parser = size::parse)]
    pub size: u64,
    /// Largest size the pool may later grow to while open.
    #[arg(long, default_value = "64G", value_parser = size::parse)]
    pub size_max: u64,
    /// The program's name for what it keeps here (checked when the program opens the pool).
    #[arg(long, default_value = "")]
    pub layout: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The pool file.
    pub path: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GrowArgs {
    /// The pool file (must not be open in another process).
    pub path: PathBuf,
    /// New size: 128M, 2G, ...
    #[arg(long, value_parser = size::parse)]
    pub size: u64,
}

pub fn run(cmd: PoolCommand) -> ExitCode {
    let result = match cmd {
        PoolCommand::Create(args) => create(&args),
        PoolCommand::Info(args) => return info(&args),
        PoolCommand::Check(args) => return check(&args),
        PoolCommand::Grow(args) => grow(&args),
        PoolCommand::Counter(args) => counter(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            crate::report!("mnemo: {message}");
            ExitCode::FAILURE
        }
    }
}

fn create(args: &CreateArgs) -> Result<(), String> {
    let mut options = CreateOptions::new(args.size, &args.layout);
    options.size_max = args.size_max.max(args.size);
    let started = std::time::Instant::now();
    let pool = Pool::create(&args.path, &options).map_err(|e| e.to_string())?;
    let header = pool.header();
    let media = pool.media_info();
    pool.close().map_err(|e| e.to_string())?;
    let elapsed = started.elapsed();
    if args.json {
        let out = serde_json::json!({
            "path": args.path, "header": header, "media": media,
            "elapsed_us": elapsed.as_micros() as u64,
        });
        println!("{out:#}");
    } else {
        println!(
            "created {} ({}) in {:.2} ms",
            args.path.display(),
            size::human(header.pool_size),
            elapsed.as_secs_f64() * 1e3
        );
        println!("  uuid        {}", header.pool_uuid);
        println!(
            "  medium      {:?}, durability {:?} ({})",
            media.kind, media.durability, media.reason
        );
    }
    Ok(())
}

fn grow(args: &GrowArgs) -> Result<(), String> {
    let pool = Pool::open(
        &args.path,
        &OpenOptions {
            size_max: Some(args.size),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let before = pool.size();
    pool.grow(args.size).map_err(|e| e.to_string())?;
    let after = pool.size();
    pool.close().map_err(|e| e.to_string())?;
    println!(
        "grew {} from {} to {}",
        args.path.display(),
        size::human(before),
        size::human(after)
    );
    Ok(())
}

fn counter(args: &InspectArgs) -> Result<(), String> {
    let options = OpenOptions {
        layout: Some("mnemo-demo".into()),
        ..Default::default()
    };
    let pool = Pool::open(&args.path, &options).map_err(|e| e.to_string())?;
    let offset = pool.data_offset();
    let mut bytes = [0u8; 8];
    pool.read(offset, &mut bytes).map_err(|e| e.to_string())?;
    let count = u64::from_le_bytes(bytes) + 1;
    pool.write(offset, &count.to_le_bytes())
        .map_err(|e| e.to_string())?;
    pool.msync(offset, 8).map_err(|e| e.to_string())?;
    let clean = pool.was_clean();
    pool.close().map_err(|e| e.to_string())?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "path": args.path, "count": count, "previous_close_clean": clean })
        );
    } else {
        println!(
            "{}: durable counter is now {count} (previous close was {})",
            args.path.display(),
            if clean { "clean" } else { "NOT clean" }
        );
    }
    Ok(())
}

fn inspect_or_exit(args: &InspectArgs) -> Result<Inspection, ExitCode> {
    inspect::inspect(&args.path).map_err(|e| {
        crate::report!("mnemo: {e}");
        ExitCode::from(2)
    })
}

fn info(args: &InspectArgs) -> ExitCode {
    let report = match inspect_or_exit(args) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let choice = cpu::choice();
    // Sync-point narrowing and NVMM emulation as a process opening this pool would get them.
    let (spf_raw, spf_why) = mnemo_pmem::track::detect();
    let emulation = mnemo_pmem::emu::EmuConfig::from_env();
    if args.json {
        let out = serde_json::json!({ "pool": report, "persistence": choice,
            "spf": { "raw": spf_raw, "reason": spf_why }, "emulation": emulation });
        println!("{out:#}");
        return ExitCode::SUCCESS;
    }
    println!("pool        {}", report.path.display());
    println!("file size   {}", size::human(report.file_len));
    match &report.header {
        Some(h) => {
            println!("format      version {}", h.format_version);
            println!("uuid        {}", h.pool_uuid);
            println!("layout      {:?}", h.layout);
            println!("size        {}", size::human(h.pool_size));
            println!("size max    {}", size::human(h.size_max));
            println!("data offset {}", h.data_offset);
            println!(
                "created     {} (by {})",
                unix_ns_text(h.created_unix_ns),
                h.creator
            );
            println!(
                "shutdown    {}",
                if h.clean_shutdown {
                    "clean"
                } else {
                    "NOT clean (open now, or crashed)"
                }
            );
            println!("generation  {}", h.generation);
        }
        None => println!("header      no valid copy"),
    }
    for copy in &report.copies {
        let mark = if report.chosen == Some(copy.index) {
            " (in force)"
        } else {
            ""
        };
        println!(
            "copy {}      @{:<5} {}{}",
            copy.index, copy.offset, copy.state, mark
        );
    }
    println!("spf         raw stores: {} ({spf_why})", spf_raw.name());
    match &emulation {
        Some(c) => println!("emulation   {} (MNEMO_EMULATE)", c.preset),
        None => println!("emulation   off"),
    }
    println!(
        "in use      {}",
        match report.in_use {
            Some(true) => "yes, by another process",
            Some(false) => "no",
            None => "unknown",
        }
    );
    println!(
        "flush       {} ({}; cpu: clwb={} clflushopt={} clflush={}), non-temporal copies {}",
        choice.flush.name(),
        choice.reason,
        choice.features.clwb,
        choice.features.clflushopt,
        choice.features.clflush,
        match choice.movnt_threshold {
            Some(n) => format!("from {n} bytes"),
            None => "off".into(),
        }
    );
    for f in &report.findings {
        println!(
            "{:<11} {}",
            if f.severity == Severity::Error {
                "ERROR"
            } else {
                "warning"
            },
            f.message
        );
    }
    ExitCode::SUCCESS
}

fn unix_ns_text(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    format!("{secs} s after the Unix epoch")
}

fn check(args: &InspectArgs) -> ExitCode {
    let report = match inspect_or_exit(args) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let healthy = report.healthy();
    if args.json {
        let out = serde_json::json!({
            "path": report.path, "healthy": healthy, "copies": report.copies,
            "chosen": report.chosen, "findings": report.findings,
        });
        println!("{out:#}");
    } else {
        for copy in &report.copies {
            println!("header copy {}: {}", copy.index, copy.state);
        }
        for f in &report.findings {
            let tag = if f.severity == Severity::Error {
                "error"
            } else {
                "warning"
            };
            println!("{tag}: {}", f.message);
        }
        if healthy {
            println!(
                "{}: OK{}",
                report.path.display(),
                if report.findings.is_empty() {
                    ""
                } else {
                    " (with warnings)"
                }
            );
        } else {
            println!("{}: DAMAGED, cannot be opened", report.path.display());
        }
    }
    if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
