//! `mnemo vm`: persistent virtual machines (run, fix, recover, list, snapshot, delete). The
//! machinery is `mnemo_vm`'s (`docs/design/persistent-vms.md`); this is the command line and
//! the hypervisor's wait for signals.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use mnemo_vm::config::{pinned_q35, qemu_program, CONFIG_FORMAT};
use mnemo_vm::{
    Boot, Error, Fixation, Hypervisor, Registry, Start, StartMode, VmConfig, VmDir, VmState,
};
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::size;

/// The kernel command line of a kernel-booted VM unless --append says otherwise: the serial
/// port is the console, and a panic stops the guest instead of rebooting it.
const APPEND_DEFAULT: &str = "console=ttyS0 quiet panic=-1";

#[derive(Debug, Subcommand)]
pub enum VmCommand {
    /// Run a persistent VM: create it on first use, recover it if it was fixed, cold-boot it
    /// otherwise; then own it until a power failure.
    ///
    /// Its RAM is a file in the VM's directory (put --dir on persistent memory: /dev/shm
    /// emulates it, a DAX file system is the real thing). This process is the VM's
    /// hypervisor: it starts QEMU and keeps it until real-time signal 44 (the power-failure
    /// signal, SIGRTMIN+10), `mnemo vm fix NAME`, SIGTERM or Ctrl-C; then it *fixes* the VM
    /// (stops it and saves its CPU and device state, ~300 KiB, next to the RAM) and exits. The
    /// next `mnemo vm run NAME` resumes the guest where it stopped, without rebooting it. A
    /// VM that died without a completed fixation cold-boots, and says so.
    ///
    /// The hardware options apply when the VM is created; afterwards they may be repeated
    /// but not changed (a saved state loads only into the same hardware).
    ///
    /// Example: mnemo vm run web --dir /dev/shm/vms --mem 512M --kernel vmlinuz --initrd initrd.gz
    Run(RunArgs),
    /// Fix a running VM now, as a power failure would: sends signal 44 to its hypervisor and
    /// waits until the state is saved and QEMU has exited.
    Fix(NameArgs),
    /// Resume a fixed VM (like `run`, but never cold-boots: fails if there is no resumable
    /// state, and says why).
    Recover(RecoverArgs),
    /// List the VMs: running, fixed (resumable), or needs cold boot (and why).
    List(ListArgs),
    /// Copy a VM to a new name: RAM, saved state and hardware. Recovering the copy continues
    /// the guest from the instant of the copy (a fork). A running VM is paused for the copy
    /// of its RAM by its hypervisor (signal SIGUSR1), then runs on; a stopped one is copied
    /// as it is.
    ///
    /// Example: mnemo vm snapshot web web-before-upgrade --dir /dev/shm/vms
    Snapshot(SnapshotArgs),
    /// Delete a VM that is not running, with its RAM and saved state.
    Delete(NameArgs),
}

#[derive(Debug, Args)]
pub struct DirArgs {
    /// The directory of the VMs (one subdirectory each). Persistent memory belongs here:
    /// /dev/shm (emulated) or a DAX file system.
    #[arg(long, env = "MNEMO_VM_DIR", default_value = "mnemo-data/vms")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct NameArgs {
    /// The VM's name (letters, digits, '-', '_', '.').
    pub name: String,
    #[command(flatten)]
    pub dir: DirArgs,
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub vm: NameArgs,
    /// Print events as JSON lines (for scripts and benchmarks).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// The VM to copy.
    pub name: String,
    /// The copy's name.
    pub copy: String,
    #[command(flatten)]
    pub dir: DirArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub vm: NameArgs,
    /// Guest RAM (the size of the RAM file).
    #[arg(long, value_parser = size::parse)]
    pub mem: Option<u64>,
    /// Virtual CPUs.
    #[arg(long)]
    pub cpus: Option<u32>,
    /// A Linux kernel to boot directly (copied into the VM's directory).
    #[arg(long, conflicts_with = "disk")]
    pub kernel: Option<PathBuf>,
    /// The kernel's initramfs (copied too).
    #[arg(long, requires = "kernel")]
    pub initrd: Option<PathBuf>,
    /// The kernel's command line [default: "console=ttyS0 quiet panic=-1"].
    #[arg(long, requires = "kernel")]
    pub append: Option<String>,
    /// A disk image to boot from (raw, or qcow2 by its extension); it must not change while
    /// the VM is fixed.
    #[arg(long)]
    pub disk: Option<PathBuf>,
    /// Give the guest a persistent memory device of this size (an emulated NVDIMM backed by
    /// the file `nvdimm` in the VM's directory), for guest software that uses pmem itself.
    #[arg(long, value_parser = size::parse)]
    pub nvdimm: Option<u64>,
    /// QEMU accelerator: tcg (emulation, works everywhere) or kvm (only where KVM really
    /// works, and with the same CPU at fixation and recovery).
    #[arg(long)]
    pub accel: Option<String>,
    /// QEMU CPU model.
    #[arg(long)]
    pub cpu: Option<String>,
    /// Boot the guest afresh even if it was fixed (its saved state is discarded).
    #[arg(long)]
    pub cold_boot: bool,
    /// Print events as JSON lines (for scripts and benchmarks).
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: &VmCommand) -> ExitCode {
    let result = match cmd {
        VmCommand::Run(args) => run_vm(args),
        VmCommand::Recover(args) => {
            open(&args.vm).and_then(|vm| host(vm, StartMode::RecoverOnly, args.json))
        }
        VmCommand::Fix(args) => fix(args),
        VmCommand::List(args) => list(args),
        VmCommand::Snapshot(args) => snapshot(args),
        VmCommand::Delete(args) => Registry::new(&args.dir.dir)
            .delete(&args.name)
            .map(|()| println!("vm {}: deleted", args.name))
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            crate::report!("mnemo vm: {message}");
            ExitCode::FAILURE
        }
    }
}

fn open(args: &NameArgs) -> Result<VmDir, String> {
    Registry::new(&args.dir.dir)
        .open(&args.name)
        .map_err(|e| e.to_string())
}

/// `mnemo vm run`: create the VM if it is new (or check the hardware options against it),
/// then host it.
fn run_vm(args: &RunArgs) -> Result<(), String> {
    mnemo_vm::config::validate_name(&args.vm.name).map_err(|e| e.to_string())?;
    let registry = Registry::new(&args.vm.dir.dir);
    let vm = match registry.open(&args.vm.name) {
        Ok(vm) => {
            same_hardware(&vm, args)?;
            vm
        }
        Err(Error::NoSuchVm { .. }) => create(&registry, args)?,
        Err(e) => return Err(e.to_string()),
    };
    let mode = if args.cold_boot {
        StartMode::ColdBoot
    } else {
        StartMode::Auto
    };
    host(vm, mode, args.json)
}

fn create(registry: &Registry, args: &RunArgs) -> Result<VmDir, String> {
    let qemu = qemu_program();
    let boot = match (&args.kernel, &args.disk) {
        (Some(_), _) => Boot::Kernel {
            initrd: args.initrd.is_some(),
            append: args.append.clone().unwrap_or_else(|| APPEND_DEFAULT.into()),
        },
        (None, Some(disk)) => Boot::Disk {
            path: std::path::absolute(disk).map_err(|e| format!("{}: {e}", disk.display()))?,
            format: if disk.extension().is_some_and(|e| e == "qcow2") {
                "qcow2".into()
            } else {
                "raw".into()
            },
        },
        (None, None) => {
            return Err(format!(
                "VM {:?} does not exist in {}: to create it, say what it boots \
                 (--kernel FILE [--initrd FILE] or --disk IMAGE)",
                args.vm.name,
                registry.root().display()
            ))
        }
    };
    let config = VmConfig {
        format: CONFIG_FORMAT,
        name: args.vm.name.clone(),
        ram_bytes: args.mem.unwrap_or(256 << 20),
        cpus: args.cpus.unwrap_or(1),
        accel: args.accel.clone().unwrap_or_else(|| "tcg".into()),
        cpu: args.cpu.clone().unwrap_or_else(|| "qemu64".into()),
        machine: pinned_q35(&qemu).map_err(|e| e.to_string())?,
        qemu,
        boot,
        nvdimm_bytes: args.nvdimm,
    };
    registry
        .create(config, args.kernel.as_deref(), args.initrd.as_deref())
        .map_err(|e| e.to_string())
}

/// An existing VM run with hardware options: they must be the ones it was created with.
fn same_hardware(vm: &VmDir, args: &RunArgs) -> Result<(), String> {
    let config = vm.config();
    let mut differ = Vec::new();
    let mut check = |what: &str, same: bool| {
        if !same {
            differ.push(what.to_string());
        }
    };
    check("--mem", args.mem.is_none_or(|m| m == config.ram_bytes));
    check("--cpus", args.cpus.is_none_or(|c| c == config.cpus));
    check(
        "--accel",
        args.accel.as_ref().is_none_or(|a| *a == config.accel),
    );
    check("--cpu", args.cpu.as_ref().is_none_or(|c| *c == config.cpu));
    check(
        "--nvdimm",
        args.nvdimm.is_none_or(|n| Some(n) == config.nvdimm_bytes),
    );
    match &config.boot {
        Boot::Kernel { initrd, append } => {
            check("--disk", args.disk.is_none());
            check("--append", args.append.as_ref().is_none_or(|a| a == append));
            check(
                "--kernel",
                args.kernel
                    .as_ref()
                    .is_none_or(|k| same_file(k, &vm.file("kernel"))),
            );
            check(
                "--initrd",
                args.initrd
                    .as_ref()
                    .is_none_or(|i| *initrd && same_file(i, &vm.file("initrd"))),
            );
        }
        Boot::Disk { path, .. } => {
            check("--kernel", args.kernel.is_none());
            check(
                "--disk",
                args.disk
                    .as_ref()
                    .is_none_or(|d| std::path::absolute(d).is_ok_and(|d| d == *path)),
            );
        }
    }
    if differ.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "VM {:?} exists with other hardware ({} differ): a saved state loads only into the \
             hardware it was saved from; run it without these options, or delete it first",
            vm.name(),
            differ.join(", ")
        ))
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::read(a), std::fs::read(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The hypervisor: start the VM, then wait for the power-failure signal (or SIGTERM,
/// SIGINT) to fix it, or for QEMU to exit by itself.
fn host(vm: VmDir, mode: StartMode, json: bool) -> Result<(), String> {
    let power = mnemo_vm::power_failure_signal();
    // Installed before QEMU starts, so a power failure during the start is not lost: it is
    // handled as soon as the VM runs.
    let mut signals = Signals::new([power, SIGTERM, SIGINT, SIGCHLD, SIGUSR1])
        .map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let name = vm.name().to_string();
    let (mut hypervisor, start) = Hypervisor::start(vm, mode).map_err(|e| e.to_string())?;
    report_start(json, &hypervisor, &start);
    for signal in signals.forever() {
        match signal {
            SIGCHLD => {
                if let Some(status) = hypervisor.exited() {
                    return Err(format!(
                        "vm {name}: QEMU exited ({status}) without a fixation (did the guest \
                         power off?): the VM needs a cold boot. QEMU's output:\n{}",
                        hypervisor.qemu_output()
                    ));
                }
            }
            SIGUSR1 => serve_snapshot(json, &mut hypervisor),
            // The power failure, SIGTERM, SIGINT.
            _ => {
                let received = Instant::now();
                match hypervisor.fix() {
                    Ok(fixation) => {
                        report_fixation(json, &name, signal, received.elapsed(), &fixation);
                        return Ok(());
                    }
                    Err(e) => crate::report!(
                        "mnemo vm: vm {name}: fixation on signal {signal} failed, the VM runs \
                         on: {e}"
                    ),
                }
            }
        }
    }
    Err("the signal iterator ended".into())
}

/// The events of a start: how it began (cold boot or recovery), then "running".
fn report_start(json: bool, hypervisor: &Hypervisor, start: &Start) {
    let name = hypervisor.vm().name();
    let epoch = hypervisor.epoch();
    match start {
        Start::ColdBoot(reason) => event(
            json,
            serde_json::json!({
                "event": "cold-boot", "vm": name, "epoch": epoch, "reason": reason.to_string(),
            }),
            format_args!("vm {name}: cold boot, epoch {epoch} ({reason})"),
        ),
        Start::Recovered(r) => event(
            json,
            serde_json::json!({
                "event": "recovered", "vm": name, "epoch": epoch, "from_epoch": r.from_epoch,
                "state_bytes": r.state_bytes, "recovery_us": micros(r.total),
                "qemu_start_us": micros(r.qemu_start), "load_us": micros(r.load),
            }),
            format_args!(
                "vm {name}: recovered from epoch {} in {} (QEMU start {}, state load {}; \
                 state {} bytes), epoch {epoch}",
                r.from_epoch,
                ms(r.total),
                ms(r.qemu_start),
                ms(r.load),
                r.state_bytes
            ),
        ),
    }
    let serial = hypervisor.vm().file("serial.log");
    let power = mnemo_vm::power_failure_signal();
    event(
        json,
        serde_json::json!({
            "event": "running", "vm": name, "hypervisor_pid": std::process::id(),
            "qemu_pid": hypervisor.qemu_pid(), "serial": serial, "power_failure_signal": power,
        }),
        format_args!(
            "vm {name}: running (hypervisor pid {}, QEMU pid {}); serial console: {}; \
             signal {power}, `mnemo vm fix {name}`, SIGTERM or Ctrl-C fixes it",
            std::process::id(),
            hypervisor.qemu_pid(),
            serial.display()
        ),
    );
}

/// SIGUSR1: a snapshot request of `mnemo vm snapshot`, answered in the VM's directory.
fn serve_snapshot(json: bool, hypervisor: &mut Hypervisor) {
    let name = hypervisor.vm().name().to_string();
    match mnemo_vm::control::serve_snapshot(hypervisor) {
        Ok(Some(reply)) if reply.error.is_empty() => event(
            json,
            serde_json::json!({
                "event": "snapshot", "vm": name, "copy": reply.copy,
                "state_bytes": reply.state_bytes, "pause_us": reply.pause_us,
            }),
            format_args!(
                "vm {name}: snapshot {} made (the guest paused {:.1} ms)",
                reply.copy,
                reply.pause_us as f64 / 1e3
            ),
        ),
        Ok(Some(reply)) => crate::report!("mnemo vm: vm {name}: snapshot failed: {}", reply.error),
        Ok(None) => {}
        Err(e) => crate::report!("mnemo vm: vm {name}: snapshot request: {e}"),
    }
}

fn report_fixation(json: bool, name: &str, signal: i32, elapsed: Duration, f: &Fixation) {
    event(
        json,
        serde_json::json!({
            "event": "fixed", "vm": name, "signal": signal, "epoch": f.epoch,
            "state_bytes": f.state_bytes, "fixation_us": micros(f.total),
            "stop_us": micros(f.stop), "migrate_us": micros(f.migrate),
            "quit_us": micros(f.quit), "signal_to_exit_us": micros(elapsed),
        }),
        format_args!(
            "vm {name}: fixed on signal {signal} in {} (stop {}, migration {}; state {} bytes, \
             epoch {}); QEMU quit {} later",
            ms(f.total),
            ms(f.stop),
            ms(f.migrate),
            f.state_bytes,
            f.epoch,
            ms(f.quit)
        ),
    );
}

/// One event line on stdout: JSON or text. A closed stdout is ignored (the VM matters more).
fn event(json: bool, value: serde_json::Value, text: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = if json {
        writeln!(out, "{value}")
    } else {
        writeln!(out, "{text}")
    };
    let _ = out.flush();
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// `mnemo vm fix`: signal the hypervisor and wait for the fixation's end.
fn fix(args: &NameArgs) -> Result<(), String> {
    /// Longest wait for the hypervisor to finish a fixation and QEMU to exit.
    const FIX_TIMEOUT: Duration = Duration::from_secs(60);
    let vm = open(args)?;
    let name = vm.name().to_string();
    if !vm.is_running().map_err(|e| e.to_string())? {
        return Err(Error::NotRunning(name).to_string());
    }
    let pid = vm.hypervisor_pid().ok_or_else(|| {
        format!(
            "vm {name}: running, but no `mnemo vm` process of it is found (pid file {}); \
             is it starting or stopping?",
            vm.file("hypervisor.pid").display()
        )
    })?;
    mnemo_vm::send_power_failure(pid).map_err(|e| format!("signal to pid {pid}: {e}"))?;
    let started = Instant::now();
    while vm.is_running().map_err(|e| e.to_string())? {
        if started.elapsed() > FIX_TIMEOUT {
            return Err(format!(
                "vm {name}: still running {FIX_TIMEOUT:?} after the power-failure signal"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let summary = vm.summary().map_err(|e| e.to_string())?;
    match summary.state {
        VmState::Fixed => {
            println!(
                "vm {name}: fixed (state {} bytes, epoch {}); `mnemo vm run {name}` resumes it",
                summary.state_bytes.unwrap_or(0),
                summary.epoch
            );
            Ok(())
        }
        state => Err(format!(
            "vm {name}: {state} after the signal: {}",
            summary.detail
        )),
    }
}

/// `mnemo vm snapshot`: a copy made by the hypervisor if the VM runs, else directly.
fn snapshot(args: &SnapshotArgs) -> Result<(), String> {
    let registry = Registry::new(&args.dir.dir);
    let vm = registry.open(&args.name).map_err(|e| e.to_string())?;
    if vm.is_running().map_err(|e| e.to_string())? {
        let reply =
            mnemo_vm::control::request_snapshot(&vm, &args.copy).map_err(|e| e.to_string())?;
        if !reply.error.is_empty() {
            return Err(format!(
                "vm {}: snapshot failed: {}",
                args.name, reply.error
            ));
        }
        println!(
            "vm {}: snapshot {} made while running (the guest paused {:.1} ms; state {} \
             bytes); `mnemo vm run {}` resumes the copy",
            args.name,
            reply.copy,
            reply.pause_us as f64 / 1e3,
            reply.state_bytes,
            reply.copy
        );
        return Ok(());
    }
    let copy = registry
        .snapshot(&args.name, &args.copy)
        .map_err(|e| e.to_string())?;
    println!(
        "vm {}: copied to {} ({}); `mnemo vm run {}` resumes the copy",
        args.name,
        copy.name(),
        copy.path().display(),
        copy.name()
    );
    Ok(())
}

fn list(args: &ListArgs) -> Result<(), String> {
    let vms = Registry::new(&args.dir.dir)
        .list()
        .map_err(|e| e.to_string())?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&vms).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    if vms.is_empty() {
        println!("no VMs in {}", args.dir.dir.display());
        return Ok(());
    }
    println!(
        "{:<20} {:<16} {:>6} {:>10}  DETAIL",
        "NAME", "STATE", "EPOCH", "RAM"
    );
    for vm in vms {
        println!(
            "{:<20} {:<16} {:>6} {:>10}  {}",
            vm.name,
            vm.state.to_string(),
            vm.epoch,
            format!("{}M", vm.ram_bytes >> 20),
            vm.detail
        );
    }
    Ok(())
}
