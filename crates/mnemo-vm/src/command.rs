//! QEMU's command line, built from a [`VmConfig`] and the files of the VM's directory.
//!
//! A boot and a recovery run the same argument vector; recovery only appends
//! `-S -incoming defer` (start paused, wait for `migrate-incoming`). Everything a saved state
//! depends on is fixed by the configuration:
//!
//! * guest RAM is `memory-backend-file` `id=mnemo-ram` (the RAM block's name, which the
//!   state refers to), `share=on` (so the guest's stores reach the file, and so
//!   `x-ignore-shared` leaves it out of the state), never `discard-data=on` (which would
//!   erase the file when QEMU exits);
//! * the machine type is a pinned version (`pc-q35-7.2`);
//! * the serial console appends to `serial.log`, so one log spans every power cycle.

use std::path::{Path, PathBuf};

use crate::config::{Boot, VmConfig};
use crate::error::{Error, Result};
use crate::limits;

/// The RAM backend's id: the name of the RAM block, recorded in every saved state.
pub const RAM_ID: &str = "mnemo-ram";
/// The NVDIMM backend's id.
pub const NVDIMM_ID: &str = "mnemo-nvdimm";

/// The files a command line names.
#[derive(Debug, Clone)]
pub struct Files {
    pub ram: PathBuf,
    pub nvdimm: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub serial: PathBuf,
    pub qmp: PathBuf,
}

/// Whether QEMU starts a guest or waits for a saved state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launch {
    Boot,
    Incoming,
}

/// QEMU's arguments (without the program).
pub fn arguments(config: &VmConfig, files: &Files, launch: Launch) -> Result<Vec<String>> {
    let path = |p: &Path| -> Result<String> {
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| Error::Config(format!("{} is not UTF-8", p.display())))
    };
    // In QEMU's `key=value,...` options a comma in a value is written twice.
    let value = |p: &Path| -> Result<String> { Ok(path(p)?.replace(',', ",,")) };
    let qmp = path(&files.qmp)?;
    if qmp.len() > limits::SOCKET_PATH_BYTES_MAX {
        return Err(Error::Config(format!(
            "the QMP socket path {qmp} is longer than {} bytes (a Unix socket limit): \
             use a shorter VM directory",
            limits::SOCKET_PATH_BYTES_MAX
        )));
    }
    let mut machine = format!("{},memory-backend={RAM_ID}", config.machine);
    // A bare number is MiB to `-m`; sizes are whole MiB (VmConfig::validate).
    let mut memory = format!("{}M", config.ram_bytes >> 20);
    let mut args: Vec<String> = vec!["-name".into(), format!("mnemo-vm-{}", config.name)];
    args.extend(["-accel".into(), config.accel.clone()]);
    args.extend(["-cpu".into(), config.cpu.clone()]);
    args.extend(["-smp".into(), config.cpus.to_string()]);
    args.extend([
        "-object".into(),
        format!(
            "memory-backend-file,id={RAM_ID},size={},mem-path={},share=on",
            config.ram_bytes,
            value(&files.ram)?
        ),
    ]);
    let mut nvdimm = Vec::new();
    if let Some(bytes) = config.nvdimm_bytes {
        machine.push_str(",nvdimm=on");
        memory = format!(
            "{}M,slots=1,maxmem={}M",
            config.ram_bytes >> 20,
            (config.ram_bytes + bytes) >> 20
        );
        nvdimm.extend([
            "-object".into(),
            format!(
                "memory-backend-file,id={NVDIMM_ID},size={bytes},mem-path={},share=on,pmem=on",
                value(&files.nvdimm)?
            ),
            "-device".into(),
            format!("nvdimm,id=nvdimm0,memdev={NVDIMM_ID}"),
        ]);
    }
    args.extend(["-machine".into(), machine, "-m".into(), memory]);
    args.extend(nvdimm);
    args.extend(
        ["-nodefaults", "-no-user-config", "-display", "none"]
            .iter()
            .map(|s| s.to_string()),
    );
    match &config.boot {
        Boot::Kernel { initrd, append } => {
            args.extend(["-kernel".into(), path(&files.kernel)?]);
            if *initrd {
                args.extend(["-initrd".into(), path(&files.initrd)?]);
            }
            args.extend(["-append".into(), append.clone()]);
        }
        Boot::Disk { path: disk, format } => {
            args.extend([
                "-drive".into(),
                format!("file={},format={format},if=virtio", value(disk)?),
            ]);
        }
    }
    args.extend([
        "-chardev".into(),
        format!("file,id=serial0,path={},append=on", value(&files.serial)?),
        "-serial".into(),
        "chardev:serial0".into(),
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", qmp.replace(',', ",,")),
    ]);
    if launch == Launch::Incoming {
        args.extend(["-S".into(), "-incoming".into(), "defer".into()]);
    }
    Ok(args)
}

/// `path` quoted for `/bin/sh` (QEMU runs `exec:` migration URIs with `sh -c`).
pub fn sh_quote(path: &Path) -> Result<String> {
    let text = path
        .to_str()
        .ok_or_else(|| Error::Config(format!("{} is not UTF-8", path.display())))?;
    Ok(format!("'{}'", text.replace('\'', r"'\''")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::example;

    fn files(dir: &str) -> Files {
        let p = |name: &str| PathBuf::from(dir).join(name);
        Files {
            ram: p("ram"),
            nvdimm: p("nvdimm"),
            kernel: p("kernel"),
            initrd: p("initrd"),
            serial: p("serial.log"),
            qmp: p("qmp.sock"),
        }
    }

    #[test]
    fn recovery_runs_the_boot_command_plus_incoming() {
        let config = example();
        let boot = arguments(&config, &files("/dev/shm/vms/g"), Launch::Boot).unwrap();
        let incoming = arguments(&config, &files("/dev/shm/vms/g"), Launch::Incoming).unwrap();
        assert_eq!(&incoming[..boot.len()], &boot[..]);
        assert_eq!(&incoming[boot.len()..], ["-S", "-incoming", "defer"]);
        let line = boot.join(" ");
        assert!(line.contains(
            "memory-backend-file,id=mnemo-ram,size=268435456,mem-path=/dev/shm/vms/g/ram,share=on"
        ));
        assert!(line.contains("-machine pc-q35-7.2,memory-backend=mnemo-ram -m 256M"));
        assert!(!line.contains("discard-data"));
        assert!(line.contains("path=/dev/shm/vms/g/serial.log,append=on"));
    }

    #[test]
    fn commas_in_paths_are_doubled_and_long_sockets_refused() {
        let config = example();
        let line = arguments(&config, &files("/tmp/a,b"), Launch::Boot)
            .unwrap()
            .join(" ");
        assert!(line.contains("mem-path=/tmp/a,,b/ram,share=on"));
        assert!(line.contains("-kernel /tmp/a,b/kernel"), "{line}");
        let deep = format!("/tmp/{}", "d".repeat(120));
        assert!(matches!(
            arguments(&config, &files(&deep), Launch::Boot),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn nvdimm_adds_a_slot_and_a_pmem_backend() {
        let mut config = example();
        config.nvdimm_bytes = Some(64 << 20);
        let line = arguments(&config, &files("/p"), Launch::Boot)
            .unwrap()
            .join(" ");
        assert!(line.contains("memory-backend=mnemo-ram,nvdimm=on -m 256M,slots=1,maxmem=320M"));
        assert!(line.contains(
            "mem-path=/p/nvdimm,share=on,pmem=on -device nvdimm,id=nvdimm0,memdev=mnemo-nvdimm"
        ));
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(sh_quote(Path::new("/a b/c")).unwrap(), "'/a b/c'");
        assert_eq!(sh_quote(Path::new("/it's")).unwrap(), r"'/it'\''s'");
    }
}
