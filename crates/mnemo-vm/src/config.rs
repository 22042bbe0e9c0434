//! A VM's saved configuration: its virtual hardware. It is written once, when the VM is
//! created, and every start builds QEMU's command line from it, so the hardware a state was
//! saved from and the hardware it is loaded into are the same (RAM block names and sizes,
//! guest-physical addresses, devices and their order must all match, and the machine type is
//! pinned to a version: `q35` is an alias that a QEMU upgrade moves).

use std::path::PathBuf;
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::limits;

/// The version of a VM's configuration (kept as JSON in its registry record).
pub const CONFIG_FORMAT: u32 = 1;

/// The QEMU program: `MNEMO_QEMU` or `qemu-system-x86_64`.
pub fn qemu_program() -> String {
    std::env::var("MNEMO_QEMU").unwrap_or_else(|_| "qemu-system-x86_64".to_string())
}

/// What the VM boots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Boot {
    /// A Linux kernel (and initramfs) booted directly; both are copied into the VM's
    /// directory at creation (files `kernel`, `initrd`), so the VM does not depend on them.
    Kernel { initrd: bool, append: String },
    /// A disk image, booted by the firmware. It must not change while the VM is fixed (QEMU
    /// flushes it at `stop`; recovery reopens it).
    Disk { path: PathBuf, format: String },
}

/// A VM's virtual hardware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmConfig {
    pub format: u32,
    pub name: String,
    /// Guest RAM, which is the size of the RAM file.
    pub ram_bytes: u64,
    pub cpus: u32,
    /// `tcg` (emulation; works everywhere) or `kvm`.
    pub accel: String,
    /// The CPU model (`qemu64`; `host` only where fixation and recovery run on one CPU kind).
    pub cpu: String,
    /// A versioned machine type (`pc-q35-7.2`), never an alias.
    pub machine: String,
    pub qemu: String,
    pub boot: Boot,
    /// A guest-visible persistent memory device (an emulated NVDIMM) of this size, backed by
    /// the file `nvdimm` of the VM's directory.
    pub nvdimm_bytes: Option<u64>,
}

impl VmConfig {
    /// Checks every field; a configuration read from disk goes through this too.
    pub fn validate(&self) -> Result<()> {
        validate_name(&self.name)?;
        let bad = |text: String| Err(Error::Config(text));
        if self.format != CONFIG_FORMAT {
            return bad(format!(
                "configuration format {} is not {CONFIG_FORMAT} (made by another mnemo version)",
                self.format
            ));
        }
        if !(limits::RAM_BYTES_MIN..=limits::RAM_BYTES_MAX).contains(&self.ram_bytes)
            || self.ram_bytes % (1 << 20) != 0
        {
            return bad(format!(
                "guest RAM of {} bytes: use whole MiB from {} MiB to {} GiB",
                self.ram_bytes,
                limits::RAM_BYTES_MIN >> 20,
                limits::RAM_BYTES_MAX >> 30
            ));
        }
        if let Some(bytes) = self.nvdimm_bytes {
            if !(2 << 20..=limits::RAM_BYTES_MAX).contains(&bytes) || bytes % (2 << 20) != 0 {
                return bad(format!(
                    "NVDIMM of {bytes} bytes: use a multiple of 2 MiB up to {} GiB",
                    limits::RAM_BYTES_MAX >> 30
                ));
            }
        }
        if !(1..=64).contains(&self.cpus) {
            return bad(format!("{} CPUs: use 1 to 64", self.cpus));
        }
        if !matches!(self.accel.as_str(), "tcg" | "kvm") {
            return bad(format!("accelerator {:?}: use tcg or kvm", self.accel));
        }
        for (what, value) in [("machine type", &self.machine), ("CPU model", &self.cpu)] {
            let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.,+=".contains(c);
            if value.is_empty() || !value.chars().all(allowed) {
                return bad(format!("{what} {value:?} has characters QEMU does not use"));
            }
        }
        if self.machine.contains(',') {
            return bad(format!(
                "machine type {:?} is one name, without options",
                self.machine
            ));
        }
        if self.qemu.is_empty() {
            return bad("no QEMU program".into());
        }
        match &self.boot {
            Boot::Kernel { append, .. } if append.contains('\n') => {
                bad("the kernel command line is one line".into())
            }
            Boot::Disk { format, .. } if !matches!(format.as_str(), "raw" | "qcow2") => {
                bad(format!("disk format {format:?}: use raw or qcow2"))
            }
            _ => Ok(()),
        }
    }
}

/// Checks a VM name: 1 to 63 of `[A-Za-z0-9._-]`, not starting with a dot.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= limits::NAME_BYTES_MAX
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidName(name.to_string()))
    }
}

/// The versioned machine type behind QEMU's `q35` alias (`pc-q35-7.2` for QEMU 7.2), asked
/// of `qemu -machine help`.
pub fn pinned_q35(qemu: &str) -> Result<String> {
    let output = Command::new(qemu)
        .args(["-machine", "help"])
        .output()
        .map_err(|source| Error::NoQemu {
            program: qemu.to_string(),
            source,
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_q35_alias(&text).ok_or_else(|| {
        Error::Config(format!(
            "{qemu} -machine help names no q35 machine (is it an x86-64 QEMU?)"
        ))
    })
}

/// From `-machine help` output, the target of the line `q35 ... (alias of pc-q35-X)`.
fn parse_q35_alias(text: &str) -> Option<String> {
    text.lines()
        .filter(|line| line.split_whitespace().next() == Some("q35"))
        .find_map(|line| {
            let start = line.find("(alias of ")? + "(alias of ".len();
            let end = start + line[start..].find(')')?;
            Some(line[start..end].to_string())
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn example() -> VmConfig {
        VmConfig {
            format: CONFIG_FORMAT,
            name: "guest-1".into(),
            ram_bytes: 256 << 20,
            cpus: 1,
            accel: "tcg".into(),
            cpu: "qemu64".into(),
            machine: "pc-q35-7.2".into(),
            qemu: "qemu-system-x86_64".into(),
            boot: Boot::Kernel {
                initrd: true,
                append: "console=ttyS0 quiet".into(),
            },
            nvdimm_bytes: None,
        }
    }

    #[test]
    fn names() {
        for good in ["a", "web-1", "db_2.test", &"x".repeat(63)] {
            validate_name(good).unwrap();
        }
        for bad in ["", ".hidden", "a/b", "..", "a b", "é", &"x".repeat(64)] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidName(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn validation_rejects_what_qemu_would_misread() {
        example().validate().unwrap();
        let cases: [fn(&mut VmConfig); 9] = [
            |c| c.ram_bytes = 1 << 20,
            |c| c.ram_bytes = (256 << 20) + 4096,
            |c| c.cpus = 0,
            |c| c.accel = "hvf".into(),
            |c| c.machine = "q35,accel=kvm".into(),
            |c| c.cpu = "qemu64 -S".into(),
            |c| c.format = 2,
            |c| c.nvdimm_bytes = Some(1 << 20),
            |c| {
                c.boot = Boot::Disk {
                    path: "/d.img".into(),
                    format: "vmdk".into(),
                }
            },
        ];
        for (i, change) in cases.iter().enumerate() {
            let mut config = example();
            change(&mut config);
            assert!(config.validate().is_err(), "case {i} accepted: {config:?}");
        }
    }

    #[test]
    fn json_round_trip_and_unknown_fields() {
        let config = example();
        let text = serde_json::to_string(&config).unwrap();
        assert_eq!(serde_json::from_str::<VmConfig>(&text).unwrap(), config);
        let extra = text.replacen('{', "{\"surprise\":1,", 1);
        assert!(serde_json::from_str::<VmConfig>(&extra).is_err());
    }

    #[test]
    fn q35_alias() {
        let help = "Supported machines are:\n\
            q35                  Standard PC (Q35 + ICH9, 2009) (alias of pc-q35-7.2)\n\
            pc-q35-7.2           Standard PC (Q35 + ICH9, 2009)\n";
        assert_eq!(parse_q35_alias(help).as_deref(), Some("pc-q35-7.2"));
        assert_eq!(parse_q35_alias("pc-q35-7.2   Standard PC\n"), None);
        assert_eq!(parse_q35_alias("q35 (alias of "), None);
    }
}
