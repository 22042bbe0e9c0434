//! `mnemo`: durable memory for applications. See `mnemo --help`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod etcd;
mod mirror;
mod pool;
mod readers;
mod report;
mod serve;
mod size;
mod vm;
mod vpm;

/// The allocator of the whole program: see `Cargo.toml` (mimalloc, for the server's small
/// per-request buffers).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mnemo keeps a program's data structures in persistent (or emulated-persistent) memory,
/// updates them crash-consistently, and makes every acknowledged write durable.
///
/// A pool is one file mapped into memory. Put it on /dev/shm to emulate persistent memory,
/// on a DAX file system for real persistent memory, or on any disk (sync points then go to a
/// write-ahead file beside the pool, POOL.wal, one fdatasync per group commit).
///
/// Logging: set MNEMO_LOG (e.g. MNEMO_LOG=debug); logs go to stderr.
#[derive(Debug, Parser)]
#[command(
    name = "mnemo",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, inspect and check pool files.
    #[command(subcommand)]
    Pool(pool::PoolCommand),
    /// Find the C types a program persists, from its load functions (NVMOVE).
    ///
    /// Example: mnemo analyze --load rdbLoad --load loadAppendOnlyFile src/
    Analyze(mnemo_analyze::AnalyzeArgs),
    /// Serve a Redis-protocol key-value store from a pool; every acknowledged write is durable.
    ///
    /// Example: mnemo serve --pool /dev/shm/kv.pool --port 7379, then redis-cli -p 7379
    Serve(serve::ServeArgs),
    /// Talk to a running `mnemo serve` (stats).
    #[command(subcommand)]
    Kv(serve::KvCommand),
    /// Replication: a mirror that keeps a durable image of a primary's pool, sync point by
    /// sync point (start the primary with `mnemo serve --mirror HOST:PORT`).
    #[command(subcommand)]
    Mirror(mirror::MirrorCommand),
    /// Replication's second tier: a backup that a mirror feeds in the background.
    #[command(subcommand)]
    Backup(mirror::BackupCommand),
    /// Replication's configuration in etcd (failover with `--etcd`).
    #[command(subcommand)]
    Repl(etcd::ReplCommand),
    /// Persistent virtual machines: guest RAM in persistent memory, fixed on a power failure
    /// (signal 44) and resumed without a reboot.
    ///
    /// Example: mnemo vm run web --dir /dev/shm/vms --kernel vmlinuz --initrd initrd.gz, then
    /// signal 44 to its pid (or mnemo vm fix web), then mnemo vm run web again
    #[command(subcommand)]
    Vm(vm::VmCommand),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("MNEMO_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // A log collector that went away (stderr a closed pipe) must not take the program
        // down: failed log writes are dropped, as Redis does, instead of reported on the
        // same stderr (which panics the thread that logged, e.g. the one handling SIGTERM).
        .log_internal_errors(false)
        // Colours only for a person at a terminal, never into log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Pool(cmd) => pool::run(cmd),
        Command::Analyze(args) => mnemo_analyze::run_cli(args),
        Command::Serve(args) => serve::run(&args),
        Command::Kv(cmd) => serve::run_kv(&cmd),
        Command::Mirror(cmd) => mirror::run(&cmd),
        Command::Backup(cmd) => mirror::run_backup(&cmd),
        Command::Repl(cmd) => etcd::run(&cmd),
        Command::Vm(cmd) => vm::run(&cmd),
    }
}
