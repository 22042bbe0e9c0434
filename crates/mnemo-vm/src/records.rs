//! The registry's durable records, in a mnemo pool: `<vms dir>/registry.pool`.
//!
//! ```text
//!  registry.pool        a mnemo heap (layout "mnemo-vm-registry"), mode 0600
//!    ".mnemo-vm-registry"   named root: RawHeader (magic MNEMOVMX, format 1)
//!    "NAME"                 one named region per VM: RawRecord (192 bytes), pointing at
//!                           an allocation that holds the VM's configuration (JSON bytes)
//!  registry.lock        flock(2)ed for the length of one registry operation
//! ```
//!
//! VM names cannot start with a dot, so the header's name never collides with a VM's.
//!
//! Every change is one heap transaction ([`mnemo_heap::Tx`]): a VM's creation (its region,
//! record and configuration), its deletion, and every raise of its epoch are atomic and
//! durable at commit. The pool's own lock refuses a second process, so the pool is open only
//! for the length of one operation ([`Session`]), under the registry-wide `registry.lock`:
//! the hypervisors of two VMs never hold it while their guests run.
//!
//! Decoding never panics: every record carries a CRC-32C over itself and over its
//! configuration bytes, every length is bounded, and damage is reported as
//! [`Error::Registry`].

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use mnemo_heap::{Heap, HeapOptions, PPtr, Tx};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::config::VmConfig;
use crate::error::{Error, Result};
use crate::limits;

/// The registry pool's file name in the data directory.
pub const POOL_FILE: &str = "registry.pool";
/// The registry-wide lock file, held for one operation at a time.
pub const LOCK_FILE: &str = "registry.lock";
/// The pool's layout name, checked at every open.
pub const LAYOUT: &str = "mnemo-vm-registry";
/// The named root that marks a pool as a VM registry, and its format.
const HEADER_ROOT: &str = ".mnemo-vm-registry";
const HEADER_MAGIC: [u8; 8] = *b"MNEMOVMX";
const RECORD_MAGIC: [u8; 8] = *b"MNEMOVMR";
/// The format of the header and of every record.
pub const FORMAT: u32 = 1;
/// Bytes of the text that says how the current epoch began.
const STARTED_BYTES: usize = 128;

/// The header root: which format the records are in.
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy)]
#[repr(C)]
struct RawHeader {
    magic: [u8; 8],
    format: u32,
    reserved: u32,
}

/// One VM's record, little-endian, 192 bytes (the layout is in
/// `docs/design/persistent-vms.md`).
#[derive(FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy)]
#[repr(C)]
struct RawRecord {
    magic: [u8; 8],
    format: u32,
    lifecycle: u32,
    epoch: u64,
    started_unix_s: u64,
    /// Pool offset of the configuration's allocation.
    config: u64,
    config_len: u32,
    config_crc: u32,
    started_len: u32,
    reserved: u32,
    started: [u8; STARTED_BYTES],
    reserved2: u32,
    /// CRC-32C of every byte before it.
    crc: u32,
}

const _: () = assert!(std::mem::size_of::<RawRecord>() == 192);

/// What the registry last recorded of a VM's life. `mnemo vm list` combines it with the lock
/// and the saved state (a VM recorded `Started` whose hypervisor is gone died without a
/// completed fixation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lifecycle {
    /// Created (or copied without a state) and never started since.
    Created,
    /// Its current epoch began (a cold boot or a recovery).
    Started,
    /// A fixation of its current epoch completed.
    Fixed,
}

impl Lifecycle {
    fn code(self) -> u32 {
        match self {
            Lifecycle::Created => 1,
            Lifecycle::Started => 2,
            Lifecycle::Fixed => 3,
        }
    }

    fn from_code(code: u32) -> Option<Lifecycle> {
        match code {
            1 => Some(Lifecycle::Created),
            2 => Some(Lifecycle::Started),
            3 => Some(Lifecycle::Fixed),
            _ => None,
        }
    }
}

/// A VM's status: its epoch (raised by every start) and lifecycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub epoch: u64,
    pub lifecycle: Lifecycle,
    /// How the current epoch began ("created", "cold boot", "recovery from epoch N").
    pub started: String,
    /// When, in seconds since the Unix epoch.
    pub started_unix_s: u64,
}

/// One VM as the registry records it.
#[derive(Debug, Clone)]
pub struct Record {
    pub config: VmConfig,
    pub status: Status,
}

/// The registry pool, open for one operation under the registry lock (both released when it
/// is dropped: the heap first, then the lock).
#[derive(Debug)]
pub struct Session {
    heap: Heap,
    path: PathBuf,
    _lock: File,
}

impl Session {
    /// Opens the registry of `root` under its lock. Without a pool: `None`, or, when `create`
    /// says so, a new pool (made under a temporary name and renamed into place, so a crash
    /// never leaves half a registry).
    pub fn open(root: &Path, create: bool) -> Result<Option<Session>> {
        if create {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root)
                .map_err(|e| Error::io("creating", root, e))?;
        } else if !root.is_dir() {
            return Ok(None);
        }
        let lock = lock_registry(root)?;
        let path = root.join(POOL_FILE);
        if !path.exists() {
            if !create {
                return Ok(None);
            }
            make_pool(root, &path)?;
        }
        let pool = mnemo_pmem::Pool::open(
            &path,
            &mnemo_pmem::OpenOptions {
                layout: Some(LAYOUT.into()),
                size_max: None,
                policy: Some(Arc::new(mnemo_pmem::LocalPolicy)),
            },
        )
        .map_err(|e| damaged(&path, format!("cannot open it: {e}")))?;
        let heap = Heap::open(pool).map_err(|e| damaged(&path, format!("cannot open it: {e}")))?;
        let session = Session {
            heap,
            path,
            _lock: lock,
        };
        session.check_header()?;
        Ok(Some(session))
    }

    /// The pool's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn damaged(&self, detail: impl std::fmt::Display) -> Error {
        damaged(&self.path, detail)
    }

    fn heap_error(&self, what: &str, e: mnemo_heap::Error) -> Error {
        self.damaged(format!("{what}: {e}"))
    }

    fn check_header(&self) -> Result<()> {
        let (offset, size) = self
            .heap
            .region(HEADER_ROOT)
            .map_err(|e| self.heap_error("reading its header", e))?
            .ok_or_else(|| self.damaged(format!("it has no {HEADER_ROOT:?} header")))?;
        if size != std::mem::size_of::<RawHeader>() as u64 {
            return Err(self.damaged(format!("its header is {size} bytes")));
        }
        let header: RawHeader = self
            .heap
            .get(PPtr::from_offset(offset))
            .map_err(|e| self.heap_error("reading its header", e))?;
        if header.magic != HEADER_MAGIC {
            return Err(self.damaged("its header has the wrong magic"));
        }
        if header.format != FORMAT {
            return Err(self.damaged(format!(
                "its format is {}; this mnemo reads format {FORMAT}",
                header.format
            )));
        }
        Ok(())
    }

    /// The names of every VM, sorted.
    pub fn names(&self) -> Result<Vec<String>> {
        Ok(self
            .heap
            .regions()
            .map_err(|e| self.heap_error("listing its records", e))?
            .into_iter()
            .map(|(name, _, _)| name)
            .filter(|name| !name.starts_with('.'))
            .collect())
    }

    /// The record of `name`, if there is one.
    pub fn get(&self, name: &str) -> Result<Option<Record>> {
        match self.raw(name)? {
            Some((_, raw)) => self.decode(name, &raw).map(Some),
            None => Ok(None),
        }
    }

    fn raw(&self, name: &str) -> Result<Option<(u64, RawRecord)>> {
        let region = self
            .heap
            .region(name)
            .map_err(|e| self.heap_error("reading a record", e))?;
        let Some((offset, size)) = region else {
            return Ok(None);
        };
        if size != std::mem::size_of::<RawRecord>() as u64 {
            return Err(self.damaged(format!("the record of VM {name:?} is {size} bytes")));
        }
        let raw: RawRecord = self
            .heap
            .get(PPtr::from_offset(offset))
            .map_err(|e| self.heap_error("reading a record", e))?;
        Ok(Some((offset, raw)))
    }

    fn decode(&self, name: &str, raw: &RawRecord) -> Result<Record> {
        let bad = |why: String| self.damaged(format!("the record of VM {name:?} {why}"));
        if raw.magic != RECORD_MAGIC {
            return Err(bad("has the wrong magic".into()));
        }
        if raw.crc != record_crc(raw) {
            return Err(bad("fails its checksum".into()));
        }
        if raw.format != FORMAT {
            return Err(bad(format!("is of format {}", raw.format)));
        }
        let lifecycle = Lifecycle::from_code(raw.lifecycle)
            .ok_or_else(|| bad(format!("has lifecycle code {}", raw.lifecycle)))?;
        let started_len = raw.started_len as usize;
        let started = raw
            .started
            .get(..started_len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or_else(|| bad("has an unreadable start text".into()))?
            .to_string();
        let len = u64::from(raw.config_len);
        if len == 0 || len > limits::CONFIG_BYTES_MAX {
            return Err(bad(format!("has a configuration of {len} bytes")));
        }
        if self
            .heap
            .usable_size(raw.config)
            .is_none_or(|usable| usable < len)
        {
            return Err(bad(format!(
                "points at {:#x}+{len}, which is no allocation of that size",
                raw.config
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        self.heap
            .read_bytes(raw.config, &mut bytes)
            .map_err(|e| self.heap_error("reading a configuration", e))?;
        if crc32c::crc32c(&bytes) != raw.config_crc {
            return Err(bad("has a configuration that fails its checksum".into()));
        }
        let config: VmConfig = serde_json::from_slice(&bytes)
            .map_err(|e| bad(format!("has an unreadable configuration: {e}")))?;
        if config.name != name {
            return Err(bad(format!("holds VM {:?}", config.name)));
        }
        Ok(Record {
            config,
            status: Status {
                epoch: raw.epoch,
                lifecycle,
                started,
                started_unix_s: raw.started_unix_s,
            },
        })
    }

    /// Adds `record` in one transaction: its region, its record and its configuration.
    /// Refused if the name has a record.
    pub fn insert(&self, record: &Record) -> Result<()> {
        let name = record.config.name.as_str();
        if self.raw(name)?.is_some() {
            return Err(Error::Config(format!(
                "VM {name:?} exists already in the registry {}",
                self.path.display()
            )));
        }
        let bytes = serde_json::to_vec(&record.config)
            .map_err(|e| Error::Config(format!("cannot encode the configuration: {e}")))?;
        if bytes.len() as u64 > limits::CONFIG_BYTES_MAX {
            return Err(Error::Config(format!(
                "the configuration is {} bytes; at most {} fit in the registry (shorter paths?)",
                bytes.len(),
                limits::CONFIG_BYTES_MAX
            )));
        }
        let mut raw = encode(&record.status, 0, &bytes)?;
        let committed = self.heap.tx(|tx| {
            let region = tx.nvalloc(name, std::mem::size_of::<RawRecord>() as u64)?;
            let config = tx.alloc_bytes(bytes.len() as u64)?;
            tx.write_bytes(config, &bytes)?;
            raw.config = config;
            raw.crc = record_crc(&raw);
            tx.write_bytes(region, raw.as_bytes())
        });
        committed.map_err(|e| self.tx_error(name, "adding", e))
    }

    /// Changes the status of `name` in one transaction; `change` sees the current status and
    /// may refuse. Returns the new status.
    pub fn update(
        &self,
        name: &str,
        change: impl FnOnce(&Status) -> Result<Status>,
    ) -> Result<Status> {
        let (offset, raw) = self.raw(name)?.ok_or_else(|| Error::NoSuchVm {
            name: name.to_string(),
            dir: self
                .path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        })?;
        let current = self.decode(name, &raw)?;
        let next = change(&current.status)?;
        let mut updated = encode(&next, raw.config, &[])?;
        updated.config_len = raw.config_len;
        updated.config_crc = raw.config_crc;
        updated.crc = record_crc(&updated);
        self.heap
            .tx(|tx: &Tx<'_>| tx.write_bytes(offset, updated.as_bytes()))
            .map_err(|e| self.tx_error(name, "updating", e))?;
        Ok(next)
    }

    /// Removes the record of `name` and its configuration in one transaction.
    pub fn remove(&self, name: &str) -> Result<()> {
        let (_, raw) = self.raw(name)?.ok_or_else(|| Error::NoSuchVm {
            name: name.to_string(),
            dir: self
                .path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        })?;
        // A record too damaged to decode can still be removed. Its configuration pointer is
        // trusted only if the record's checksum holds and it names an allocation: a damaged
        // pointer could name another VM's allocation, so its configuration is left (a few
        // hundred bytes) rather than risk freeing someone else's.
        let whole = raw.magic == RECORD_MAGIC && raw.crc == record_crc(&raw);
        let config = (whole && self.heap.usable_size(raw.config).is_some()).then_some(raw.config);
        self.heap
            .tx(|tx| {
                if let Some(config) = config {
                    tx.free_offset(config)?;
                }
                tx.nvfree(name)
            })
            .map_err(|e| self.tx_error(name, "removing", e))
    }

    fn tx_error(&self, name: &str, what: &str, e: mnemo_heap::Error) -> Error {
        Error::Registry {
            path: self.path.clone(),
            detail: format!("{what} the record of VM {name:?} failed (nothing changed): {e}"),
        }
    }

    /// Where the record of `name` is: its byte offset in the pool file.
    pub fn record_offset(&self, name: &str) -> Result<Option<u64>> {
        Ok(self.raw(name)?.map(|(offset, _)| offset))
    }
}

fn damaged(path: &Path, detail: impl std::fmt::Display) -> Error {
    Error::Registry {
        path: path.to_path_buf(),
        detail: detail.to_string(),
    }
}

fn encode(status: &Status, config: u64, bytes: &[u8]) -> Result<RawRecord> {
    let text = status.started.as_bytes();
    if text.len() > STARTED_BYTES {
        return Err(Error::Config(format!(
            "the start text {:?} is longer than {STARTED_BYTES} bytes",
            status.started
        )));
    }
    let mut started = [0u8; STARTED_BYTES];
    started[..text.len()].copy_from_slice(text);
    let mut raw = RawRecord {
        magic: RECORD_MAGIC,
        format: FORMAT,
        lifecycle: status.lifecycle.code(),
        epoch: status.epoch,
        started_unix_s: status.started_unix_s,
        config,
        config_len: bytes.len() as u32,
        config_crc: crc32c::crc32c(bytes),
        started_len: text.len() as u32,
        reserved: 0,
        started,
        reserved2: 0,
        crc: 0,
    };
    raw.crc = record_crc(&raw);
    Ok(raw)
}

fn record_crc(raw: &RawRecord) -> u32 {
    let bytes = raw.as_bytes();
    crc32c::crc32c(&bytes[..bytes.len() - 4])
}

/// Takes `registry.lock` (exclusive), waiting up to [`limits::REGISTRY_LOCK_WAIT`]: every
/// holder holds it for one short operation.
fn lock_registry(root: &Path) -> Result<File> {
    let path = root.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::io("opening", &path, e))?;
    let started = Instant::now();
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK)
                if started.elapsed() < limits::REGISTRY_LOCK_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(Error::Timeout {
                    what: format!(
                        "waiting for the VM registry's lock {} (another mnemo vm holds it)",
                        path.display()
                    ),
                    seconds: started.elapsed().as_secs_f64(),
                })
            }
            Err(e) => return Err(Error::io("locking", &path, e.into())),
        }
    }
}

/// Makes a new registry pool at `path`: built as `path.new` (left-overs of a crashed
/// creation removed first), its heap and header committed, closed, then renamed into place
/// and the directory synced. Called under the registry lock.
fn make_pool(root: &Path, path: &Path) -> Result<()> {
    let staging = root.join(format!("{POOL_FILE}.new"));
    remove_stale(root, &staging)?;
    let made = (|| {
        let mut create = mnemo_pmem::CreateOptions::new(limits::REGISTRY_POOL_BYTES, LAYOUT);
        create.size_max = limits::REGISTRY_POOL_BYTES_MAX;
        create.policy = Some(Arc::new(mnemo_pmem::LocalPolicy));
        let pool = mnemo_pmem::Pool::create(&staging, &create)
            .map_err(|e| damaged(path, format!("cannot create it: {e}")))?;
        let options = HeapOptions {
            lane_count: 2,
            lane_log_size: 64 << 10,
            lane_slots: 4,
            toc_entries: limits::REGISTRY_VMS_MAX + 1,
            arenas: 1,
        };
        let heap = Heap::create(pool, &options)
            .map_err(|e| damaged(path, format!("cannot create its heap: {e}")))?;
        heap.tx(|tx| {
            let header = tx.root::<RawHeader>(HEADER_ROOT)?;
            tx.write(
                header,
                &RawHeader {
                    magic: HEADER_MAGIC,
                    format: FORMAT,
                    reserved: 0,
                },
            )
        })
        .map_err(|e| damaged(path, format!("cannot write its header: {e}")))?;
        drop(heap);
        std::fs::rename(&staging, path).map_err(|e| Error::io("renaming into place", path, e))?;
        crate::registry::sync_dir(root)
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(&staging);
    }
    made
}

/// Removes what a crashed creation of the pool can leave: `registry.pool.new`, and the
/// pool layer's own temporary `.registry.pool.new.creating.PID`.
fn remove_stale(root: &Path, staging: &Path) -> Result<()> {
    let remove = |path: &Path| match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", path, e)),
    };
    remove(staging)?;
    let prefix = format!(".{POOL_FILE}.new.creating.");
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                remove(&entry.path())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::example;
    use zerocopy::FromZeros;

    fn next(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn records_with_a_valid_checksum_and_arbitrary_fields_never_panic() {
        let dir = tempfile::tempdir().unwrap();
        let session = Session::open(&dir.path().join("vms"), true)
            .unwrap()
            .unwrap();
        let config = example();
        session
            .insert(&Record {
                config: config.clone(),
                status: Status {
                    epoch: 7,
                    lifecycle: Lifecycle::Fixed,
                    started: "cold boot".into(),
                    started_unix_s: 1,
                },
            })
            .unwrap();
        let (offset, good) = session.raw("guest-1").unwrap().unwrap();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let (mut read, mut refused) = (0, 0);
        for round in 0..2000 {
            let mut raw = if round % 2 == 0 {
                // The good record with one byte changed: decoding gets past the checksum
                // (recomputed below) into every field.
                let mut raw = good;
                let at = (next(&mut seed) % 188) as usize;
                raw.as_mut_bytes()[at] ^= (next(&mut seed) % 255 + 1) as u8;
                raw
            } else {
                let mut raw = RawRecord::new_zeroed();
                for b in raw.as_mut_bytes() {
                    *b = next(&mut seed) as u8;
                }
                raw
            };
            if round % 4 == 1 {
                raw.magic = RECORD_MAGIC;
            }
            raw.crc = record_crc(&raw);
            session
                .heap
                .tx(|tx| tx.write_bytes(offset, raw.as_bytes()))
                .unwrap();
            match session.get("guest-1") {
                Ok(Some(record)) => {
                    // Only a change the record cannot tell (its epoch, its time, a
                    // reserved byte, the start text) reads; the configuration is intact.
                    assert_eq!(record.config, config);
                    read += 1;
                }
                Err(Error::Registry { detail, .. }) => {
                    assert!(detail.contains("\"guest-1\""), "{detail}");
                    refused += 1;
                }
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert!(
            refused > 1000 && read > 50,
            "read {read}, refused {refused}"
        );
        // The good record, put back, reads again; a flipped checksum does not.
        let mut flipped = good;
        flipped.crc ^= 1;
        session
            .heap
            .tx(|tx| tx.write_bytes(offset, flipped.as_bytes()))
            .unwrap();
        assert!(session.get("guest-1").is_err());
        session
            .heap
            .tx(|tx| tx.write_bytes(offset, good.as_bytes()))
            .unwrap();
        let record = session.get("guest-1").unwrap().unwrap();
        assert_eq!(
            (record.status.epoch, record.status.lifecycle),
            (7, Lifecycle::Fixed)
        );
    }

    #[test]
    fn a_pool_of_another_layout_or_without_a_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vms");
        std::fs::create_dir(&root).unwrap();
        // A heap pool of another program where the registry should be.
        let path = root.join(POOL_FILE);
        drop(Heap::create_file(&path, 8 << 20, 8 << 20, &HeapOptions::default()).unwrap());
        let e = Session::open(&root, true).unwrap_err().to_string();
        assert!(
            e.contains("registry.pool") && e.contains("cannot open it"),
            "{e}"
        );
        std::fs::remove_file(&path).unwrap();
        // A registry pool whose header root is gone.
        drop(Session::open(&root, true).unwrap().unwrap());
        {
            let pool = mnemo_pmem::Pool::open(
                &path,
                &mnemo_pmem::OpenOptions {
                    policy: Some(Arc::new(mnemo_pmem::LocalPolicy)),
                    ..Default::default()
                },
            )
            .unwrap();
            Heap::open(pool).unwrap().nvfree(HEADER_ROOT).unwrap();
        }
        let e = Session::open(&root, false).unwrap_err().to_string();
        assert!(e.contains("has no \".mnemo-vm-registry\" header"), "{e}");
    }

    #[test]
    fn a_crashed_creation_leaves_nothing_in_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vms");
        std::fs::create_dir(&root).unwrap();
        // What a creation killed before its rename leaves.
        std::fs::write(root.join("registry.pool.new"), b"half a pool").unwrap();
        std::fs::write(root.join(".registry.pool.new.creating.123"), b"less").unwrap();
        drop(Session::open(&root, true).unwrap().unwrap());
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [LOCK_FILE, POOL_FILE]);
        assert!(Session::open(&root, false)
            .unwrap()
            .unwrap()
            .names()
            .unwrap()
            .is_empty());
    }
}
