//! The mirror: receives sync points, makes each durable in its log, acknowledges, and
//! applies them to its image of the primary's pool.
//!
//! A mirror directory holds:
//! * `image`: a byte-for-byte image of the primary's pool (a pool file: `mnemo serve --pool
//!   DIR/image` serves it after `mnemo mirror promote`), or a symbolic link to an ordinary
//!   disk file holding it ([`MirrorOptions::disk_image`], `syncdisk`);
//! * `log.pool`: a pool holding a [`mnemo_log::Log`] of received records (the exact bytes of
//!   each record frame), appended with one fence each before the acknowledgement;
//! * `state`: epoch, last checkpointed record id, whether the image holds a complete copy
//!   (written whole: a new file, synced, renamed over the old one);
//! * `lock`: held (`flock`) while a mirror process uses the directory.
//!
//! A record is applied to the image right after its acknowledgement, without a fence; a
//! checkpoint (every `checkpoint_records` records, when the log fills, at a full copy's end
//! and at close) makes the image durable, records the last id in `state`, and empties the
//! log. Recovery replays every logged record in order (replay only writes bytes, so applying
//! a record twice is harmless) and checkpoints. A record in the log is whole or absent (the
//! log's appends are atomic), so the image never holds part of a sync point once recovered.

use std::fs::{File, OpenOptions as FsOpen};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use mnemo_log::{Log, Lsn};
use mnemo_pmem::{CreateOptions, FileMedia, Media, OpenOptions, Pool};

use crate::auth::{self, Secret};
use crate::backup::{self, Forwarder};
use crate::error::{Error, Result};
use crate::link::Link;
use crate::mirror_core::{Go, LinkCore, Serve, StoreView, BUSY_HEARTBEAT, COPY_HEARTBEAT};
use crate::policy::Mode;
use crate::proto::{self, BackupStatus, Frame, LinkParams, Role, VERSION, VERSION_MIN};

/// Deliberately broken variants of the mirror's storage, caught by the deterministic
/// simulation (`tests/sim.rs`), which drives this store and crashes it mid-operation (the
/// model it replaced could not show them).
pub const MUTANTS_STORE: &[&str] = &[
    // A record is logged after its acknowledgement (by `apply`), not before: a crash
    // between the two loses an acknowledged sync point.
    "repl.ack_before_log",
    // A checkpoint records the last id and empties the log without draining the image
    // first: a power loss then loses records that are in neither the image nor the log.
    "repl.checkpoint_skip_drain",
];

const STATE_MAGIC: u32 = u32::from_le_bytes(*b"MNRS");
/// Version 2 added the mode of the primary last linked; version 1 files are still read.
const STATE_VERSION: u32 = 2;
const STATE_LEN_V1: usize = 4 + 4 + 8 + 8 + 8 + 1 + 4;
const STATE_LEN: usize = STATE_LEN_V1 + 1;
/// The mode byte of a state whose primary told none (version 1 primaries and files).
const MODE_UNKNOWN: u8 = 0xff;

/// What a mirror directory records about its image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MirrorState {
    /// Highest epoch seen: records and primaries of an older one are refused.
    pub epoch: u64,
    /// Id of the last record the image holds durably (checkpointed).
    pub last_id: u64,
    /// Size of the primary's pool the image mirrors.
    pub pool_size: u64,
    /// Whether the image holds a complete copy (false during a full copy, and before one).
    pub complete: bool,
    /// The mode the primary last linked told (None: never told, a version 1 primary).
    pub mode: Option<Mode>,
}

impl MirrorState {
    fn encode(&self) -> [u8; STATE_LEN] {
        let mut b = [0u8; STATE_LEN];
        b[0..4].copy_from_slice(&STATE_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&STATE_VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.last_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.pool_size.to_le_bytes());
        b[32] = u8::from(self.complete);
        b[33] = self.mode.map_or(MODE_UNKNOWN, Mode::code);
        let crc = crc32c::crc32c(&b[..STATE_LEN - 4]);
        b[STATE_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<MirrorState, String> {
        let len = b.len();
        if len != STATE_LEN && len != STATE_LEN_V1 {
            return Err(format!("{len} bytes, expected {STATE_LEN}"));
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        if u32_at(0) != STATE_MAGIC {
            return Err("not a mirror state file".into());
        }
        if u32_at(len - 4) != crc32c::crc32c(&b[..len - 4]) {
            return Err("checksum mismatch".into());
        }
        let version = u32_at(4);
        let expected = match version {
            1 => STATE_LEN_V1,
            STATE_VERSION => STATE_LEN,
            _ => {
                return Err(format!(
                    "version {version}, this build reads 1 and {STATE_VERSION}"
                ))
            }
        };
        if len != expected {
            return Err(format!(
                "{len} bytes for version {version}, expected {expected}"
            ));
        }
        let complete = match b[32] {
            0 => false,
            1 => true,
            _ => return Err("bad completeness flag".into()),
        };
        let mode = match (version, b[33]) {
            (1, _) | (_, MODE_UNKNOWN) => None,
            (_, code) => Some(Mode::from_code(code).ok_or("bad mode")?),
        };
        Ok(MirrorState {
            epoch: word(8),
            last_id: word(16),
            pool_size: word(24),
            complete,
            mode,
        })
    }
}

/// Read a mirror directory's state without opening it (its mirror may be running): the
/// state as last recorded (at the last checkpoint), and whether a process holds the
/// directory now.
pub fn peek_state(dir: &Path) -> Result<(MirrorState, bool)> {
    let state = match std::fs::read(dir.join("state")) {
        Ok(bytes) => MirrorState::decode(&bytes)
            .map_err(|e| Error::Storage(format!("{}: {e}", dir.join("state").display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => MirrorState::default(),
        Err(e) => return Err(Error::io(format!("{}", dir.join("state").display()), e)),
    };
    let running = match File::open(dir.join("lock")) {
        Ok(lock) => {
            match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared) {
                Ok(()) => {
                    let _ = rustix::fs::flock(&lock, rustix::fs::FlockOperation::Unlock);
                    false
                }
                Err(_) => true,
            }
        }
        Err(_) => false,
    };
    Ok((state, running))
}

/// How a mirror is set up.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// Size of the log pool created on first start (records larger than half of it are
    /// refused).
    pub log_size: u64,
    /// Checkpoint after this many records.
    pub checkpoint_records: u64,
    /// Keep the image (the data area) in this ordinary disk file, `DIR/image` a symbolic
    /// link to it, while the log stays in `DIR/log.pool` (Mojim's `syncdisk`). None: the
    /// image is `DIR/image` itself.
    pub disk_image: Option<PathBuf>,
}

impl Default for MirrorOptions {
    fn default() -> MirrorOptions {
        MirrorOptions {
            log_size: 64 << 20,
            checkpoint_records: 1024,
            disk_image: None,
        }
    }
}

const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// Whether `path` (or, if it does not exist, its directory) is on a memory file system
/// (tmpfs, ramfs: the stand-in for persistent memory), not an ordinary disk.
pub fn on_memory_fs(path: &Path) -> Result<bool> {
    let probe = if path.exists() {
        path
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    let stat = rustix::fs::statfs(probe)
        .map_err(|e| Error::io(format!("statfs {}", probe.display()), e.into()))?;
    #[allow(clippy::unnecessary_cast)] // the field's type differs between targets
    let kind = stat.f_type as i64;
    Ok(kind == TMPFS_MAGIC || kind == RAMFS_MAGIC)
}

/// Put the image in `disk` (an ordinary disk file), `DIR/image` a symbolic link to it.
fn link_disk_image(dir: &Path, disk: &Path) -> Result<()> {
    let disk = if disk.is_absolute() {
        disk.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("current directory", e))?
            .join(disk)
    };
    if on_memory_fs(&disk)? {
        return Err(Error::Storage(format!(
            "--disk-image {} is on a memory file system (tmpfs): give a file on a disk",
            disk.display()
        )));
    }
    let link = dir.join("image");
    match std::fs::symlink_metadata(&link) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(&link)
                .map_err(|e| Error::io(format!("{}", link.display()), e))?;
            if target != disk {
                return Err(Error::Storage(format!(
                    "{} already links to {}, not to --disk-image {}: move the file there, or use a fresh --dir",
                    link.display(),
                    target.display(),
                    disk.display()
                )));
            }
            Ok(())
        }
        Ok(_) => Err(Error::Storage(format!(
            "{} is a file in the mirror's directory: this mirror keeps its image there; move it to {} and link it (ln -s), or use a fresh --dir",
            link.display(),
            disk.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::os::unix::fs::symlink(&disk, &link)
                .map_err(|e| Error::io(format!("linking {} to {}", link.display(), disk.display()), e))?;
            // A new name is durable only once its directory is synced: without this, a power
            // cut could leave the mirror without its image link (not a flush of data, so no
            // crash-simulator mutant; the same rule as the sync-mode mark's directory sync).
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io("syncing the mirror directory", e))
        }
        Err(e) => Err(Error::io(format!("{}", link.display()), e)),
    }
}

/// Counters a mirror keeps (read by tests and `INFO`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Sync-point records logged and acknowledged.
    pub records: u64,
    /// Bytes of range data in them.
    pub bytes: u64,
    /// Checkpoints made.
    pub checkpoints: u64,
    /// Full copies received.
    pub copies: u64,
    /// Records replayed from the log at open.
    pub replayed: u64,
    /// Heartbeats answered.
    pub heartbeats: u64,
}

/// A mirror directory, open: its image, log and state.
#[derive(Debug)]
pub struct MirrorStore {
    dir: PathBuf,
    _lock: File,
    image: Option<FileMedia>,
    log: Log<Box<Pool>>,
    state: MirrorState,
    /// Highest id logged (>= `state.last_id`).
    last_logged: u64,
    since_checkpoint: u64,
    options: MirrorOptions,
    stats: MirrorStats,
    entry: Vec<u8>,
    /// Number of the newest link accepted (in memory: after a restart every link is new).
    newest_link: u64,
    /// The newest link's session, as its Welcome named it to a version 3 primary (which
    /// joins further connections to it), and how many connections it has.
    session: u64,
    session_conns: u64,
    /// Random at open, so that a session number never names a link of an earlier process.
    session_base: u64,
    /// Signalled when the last id held, or the newest link, changes: a record that arrived
    /// early on one connection of a session waits on it for the ones before it.
    turn: Arc<Condvar>,
    /// Changes whenever the image's bytes or completeness may have changed: a reader's view
    /// of the image taken at another generation is stale (`mnemo mirror serve --read-port`).
    generation: u64,
    /// The deterministic simulation's seam ([`MirrorStore::sim_crash_after`]); inert otherwise.
    sim: SimSeam,
}

/// What the deterministic simulation (`tests/sim.rs`) sets on a store it drives: a crash at a
/// chosen step, and a copy of the image as last made durable (to leave at a simulated power
/// loss what a real one would). Default: no crash, no copy (production never sets them).
#[derive(Debug, Default)]
struct SimSeam {
    /// Steps left before the simulated crash (each durable step of the store counts one).
    crash_in: Option<u64>,
    /// Crashed (at this step): every further change fails, closing does not checkpoint.
    crashed: Option<&'static str>,
    /// A record logged late (the mutant `repl.ack_before_log` only).
    deferred: Option<Vec<u8>>,
    /// Track the image's durable bytes (`Some` once tracked: the image as of its last drain).
    durable_image: Option<Vec<u8>>,
}

fn image_capacity(len: u64) -> u64 {
    len.saturating_mul(4).max(64 << 30)
}

impl MirrorStore {
    /// Open (creating on first use) the mirror directory `dir` and recover it: replay the
    /// logged records into the image, then checkpoint.
    pub fn open(dir: &Path, options: MirrorOptions) -> Result<MirrorStore> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("{}", dir.display()), e))?;
        let lock = private_file(&dir.join("lock"), false)?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |_| {
                Error::Storage(format!(
                    "{} is in use by another mirror process; stop it first or choose another --dir",
                    dir.display()
                ))
            },
        )?;
        let state = match std::fs::read(dir.join("state")) {
            Ok(bytes) => MirrorState::decode(&bytes).map_err(|e| {
                Error::Storage(format!(
                    "{}: {e}; the mirror cannot trust this directory: start with a fresh --dir",
                    dir.join("state").display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => MirrorState::default(),
            Err(e) => return Err(Error::io(format!("{}", dir.join("state").display()), e)),
        };
        if let Some(disk) = &options.disk_image {
            link_disk_image(dir, disk)?;
        }
        let log_path = dir.join("log.pool");
        let log = if log_path.exists() {
            let pool = Box::new(Pool::open(&log_path, &OpenOptions::default())?);
            let range = pool.data_offset()..pool.size();
            Log::open(pool, range)?.0
        } else {
            let pool = Box::new(Pool::create(
                &log_path,
                &CreateOptions::new(options.log_size, "mnemo-mirror-log"),
            )?);
            let range = pool.data_offset()..pool.size();
            Log::create(pool, range)?
        };
        let image_path = dir.join("image");
        let image = if image_path.exists() {
            let file = private_file(&image_path, false)?;
            let len = file
                .metadata()
                .map_err(|e| Error::io("image size", e))?
                .len();
            Some(FileMedia::map(&image_path, file, len, image_capacity(len))?)
        } else {
            None
        };
        let mut store = MirrorStore {
            dir: dir.to_path_buf(),
            _lock: lock,
            image,
            log,
            state,
            last_logged: state.last_id,
            since_checkpoint: 0,
            options,
            stats: MirrorStats::default(),
            entry: Vec::new(),
            newest_link: 0,
            session: 0,
            session_conns: 0,
            session_base: getrandom::u64().map_err(|e| {
                Error::io(
                    "random session numbers",
                    std::io::Error::other(e.to_string()),
                )
            })?,
            turn: Arc::new(Condvar::new()),
            generation: 0,
            sim: SimSeam::default(),
        };
        store.replay()?;
        Ok(store)
    }

    fn replay(&mut self) -> Result<()> {
        let mut records = Vec::new();
        for entry in self.log.iter() {
            let entry = entry?;
            match proto::decode(&entry.data)? {
                Some((
                    Frame::Record {
                        id, ranges, copy, ..
                    },
                    _,
                )) if !copy => records.push((id, ranges)),
                _ => {
                    return Err(Error::Storage(
                        "the mirror log holds an entry that is not a sync-point record".into(),
                    ))
                }
            }
        }
        for (id, ranges) in &records {
            for r in ranges {
                self.write_image(r.offset, &r.data)?;
            }
            self.last_logged = self.last_logged.max(*id);
        }
        self.stats.replayed = records.len() as u64;
        if !records.is_empty() {
            tracing::info!(records = records.len(), "mirror replayed its log");
            self.checkpoint()?;
        }
        Ok(())
    }

    /// The state as recorded.
    pub fn state(&self) -> MirrorState {
        self.state
    }

    /// What a link's decisions read of the store ([`LinkCore`]).
    pub fn view(&self) -> StoreView {
        StoreView {
            epoch: self.state.epoch,
            last_id: self.last_logged,
            complete: self.state.complete,
            newest_link: self.newest_link,
            session_conns: self.session_conns,
        }
    }

    /// Highest record id the mirror holds durably (logged or checkpointed).
    pub fn last_id(&self) -> u64 {
        self.last_logged
    }

    /// Counters.
    pub fn stats(&self) -> MirrorStats {
        self.stats
    }

    /// The image's generation: it changes whenever the image's bytes or its completeness
    /// may have changed (a record applied, a copy begun, a range copied, a copy finished).
    /// Read it under the store's lock: while the lock is held the image does not change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The image's medium, if a copy ever began.
    pub(crate) fn image(&self) -> Option<&FileMedia> {
        self.image.as_ref()
    }

    /// Path of the image (a pool file once the copy is complete).
    pub fn image_path(&self) -> PathBuf {
        self.dir.join("image")
    }

    /// The mirror's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the image (the data area) is an ordinary disk file, not memory (tmpfs or
    /// DAX): what a `syncdisk` primary asks of its mirror.
    pub fn image_on_disk(&self) -> Result<bool> {
        match &self.image {
            Some(image) => Ok(image.info().kind == mnemo_pmem::MediaKind::PageCache),
            None => {
                let path = std::fs::canonicalize(self.image_path())
                    .or_else(|_| std::fs::read_link(self.image_path()))
                    .unwrap_or_else(|_| self.image_path());
                Ok(!on_memory_fs(&path)?)
            }
        }
    }

    /// Record the mode the primary of the newest link told (durably, when it changed).
    pub fn observe_mode(&mut self, mode: Option<Mode>) -> Result<()> {
        if mode != self.state.mode {
            let state = MirrorState { mode, ..self.state };
            self.write_state(state)?;
        }
        Ok(())
    }

    fn write_state(&mut self, state: MirrorState) -> Result<()> {
        self.sim_step("state: before its new file")?;
        let tmp = self.dir.join("state.tmp");
        let mut f = private_file(&tmp, true)?;
        f.write_all(&state.encode())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io("writing the mirror state", e))?;
        self.sim_step("state: before its rename")?;
        std::fs::rename(&tmp, self.dir.join("state"))
            .map_err(|e| Error::io("publishing the mirror state", e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("syncing the mirror directory", e))?;
        self.state = state;
        Ok(())
    }

    /// A link passed the handshake: its number. From now on only it may change the image
    /// ([`admit_link`]). It is the first connection of a new session ([`MirrorStore::session`]).
    pub fn open_link(&mut self) -> u64 {
        self.newest_link += 1;
        self.session = self.session_base.wrapping_add(self.newest_link).max(1);
        self.session_conns = 1;
        self.turn.notify_all();
        self.newest_link
    }

    /// A primary of `epoch` (admitted: [`admit_epoch`]) passed the handshake, telling `mode`
    /// and, from version 3, `session` (0 or None: a new link; another: a connection joining
    /// that session): the epoch and the mode are recorded (durably, when they changed), and
    /// the connection gets its link number ([`MirrorStore::open_link`],
    /// [`MirrorStore::join_session`]). The TCP server and the deterministic simulation both
    /// call it.
    pub fn accept_link(
        &mut self,
        epoch: u64,
        mode: Option<Mode>,
        session: Option<u64>,
    ) -> Result<u64> {
        self.observe_epoch(epoch)?;
        self.observe_mode(mode)?;
        match session {
            // Version 3: one more connection of the newest link.
            Some(joined) if joined != 0 => self.join_session(joined),
            _ => Ok(self.open_link()),
        }
    }

    /// The newest link's session number (what a version 3 primary's further connections
    /// name to join it).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// One more connection of the newest link's session `session`: its link number. A
    /// session that is not the newest (superseded, or of an earlier mirror process) is
    /// refused: a joining connection never supersedes anything.
    pub fn join_session(&mut self, session: u64) -> Result<u64> {
        if session == 0 || session != self.session {
            return Err(Error::Refused(format!(
                "session {session:#x} superseded: a newer link was accepted since (or this mirror restarted)"
            )));
        }
        self.session_conns += 1;
        Ok(self.newest_link)
    }

    /// Number of the newest link accepted.
    pub fn newest_link(&self) -> u64 {
        self.newest_link
    }

    /// Record a higher epoch (durably) before acting on it.
    pub fn observe_epoch(&mut self, epoch: u64) -> Result<()> {
        if epoch > self.state.epoch {
            let state = MirrorState {
                epoch,
                ..self.state
            };
            self.write_state(state)?;
        }
        Ok(())
    }

    /// Make the image durable, record the last id, and empty the log.
    pub fn checkpoint(&mut self) -> Result<()> {
        self.sim_step("checkpoint: before the drain")?;
        if !mnemo_pmem::mutant::active("repl.checkpoint_skip_drain") {
            self.drain_image()?;
        }
        let state = MirrorState {
            last_id: self.last_logged,
            ..self.state
        };
        self.write_state(state)?;
        self.sim_step("checkpoint: before emptying the log")?;
        let tail: Lsn = self.log.tail();
        self.log.truncate_front(tail)?;
        self.since_checkpoint = 0;
        self.stats.checkpoints += 1;
        Ok(())
    }

    /// Make the image durable (and, under the simulation, remember its bytes as durable).
    fn drain_image(&mut self) -> Result<()> {
        if let Some(image) = &self.image {
            image.drain().map_err(|e| Error::Storage(e.to_string()))?;
            if self.sim.durable_image.is_some() {
                self.sim.durable_image = Some(read_image(image));
            }
        }
        Ok(())
    }

    fn write_image(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return Err(Error::Storage(
                "record range past the end of addresses".into(),
            ));
        };
        let image = match &self.image {
            Some(image) => image,
            None => {
                return Err(Error::Storage(
                    "no image yet: a full copy must come first".into(),
                ))
            }
        };
        if end > image.len() {
            let new_len = end.next_multiple_of(4096);
            if new_len > image.capacity() {
                return Err(Error::Storage(format!(
                    "record ends at {end}, past the image's reserved {} bytes",
                    image.capacity()
                )));
            }
            image
                .grow(new_len)
                .map_err(|e| Error::Storage(e.to_string()))?;
        }
        if !data.is_empty() {
            image.copy_nodrain(offset, data);
        }
        self.generation += 1;
        Ok(())
    }

    /// Start a full copy of a pool of `pool_size` bytes: the image is emptied to zeros and
    /// marked incomplete (durably) until [`MirrorStore::finish_copy`].
    pub fn begin_copy(&mut self, epoch: u64, pool_size: u64) -> Result<()> {
        self.write_state(MirrorState {
            epoch: self.state.epoch.max(epoch),
            complete: false,
            ..self.state
        })?;
        self.sim_step("copy: before emptying the log")?;
        self.log.reset()?;
        self.sim_step("copy: before emptying the image")?;
        self.generation += 1;
        self.image = None;
        let path = self.image_path();
        let file = private_file(&path, false)?;
        file.set_len(0)
            .and_then(|()| file.set_len(pool_size))
            .map_err(|e| Error::io("resetting the image", e))?;
        self.image = Some(FileMedia::map(
            &path,
            file,
            pool_size,
            image_capacity(pool_size),
        )?);
        if self.sim.durable_image.is_some() {
            // The file's new length (zeros) was set by the file system, not through the map.
            self.sim.durable_image = Some(vec![0; pool_size as usize]);
        }
        Ok(())
    }

    /// Apply ranges of a full copy (not logged: the copy is not in use until it completes).
    pub fn copy_ranges(&mut self, ranges: &[proto::Range]) -> Result<()> {
        if self.state.complete {
            return Err(Error::Storage("copy ranges outside a copy".into()));
        }
        self.sim_step("copy: before a range")?;
        for r in ranges {
            self.write_image(r.offset, &r.data)?;
        }
        Ok(())
    }

    /// The full copy is complete at record `id`.
    pub fn finish_copy(&mut self, id: u64, pool_size: u64) -> Result<()> {
        self.sim_step("copy: before its end's drain")?;
        self.drain_image()?;
        self.sim_step("copy: before its end's state")?;
        self.last_logged = id;
        self.generation += 1;
        self.write_state(MirrorState {
            last_id: id,
            pool_size,
            complete: true,
            ..self.state
        })?;
        self.stats.copies += 1;
        self.turn.notify_all();
        Ok(())
    }

    /// Make a sync-point record durable here (it is in the log on return): the caller then
    /// acknowledges it and calls [`MirrorStore::apply`]. `frame` is the record's encoded
    /// frame as received (logged as is), or None to encode it here.
    pub fn log_record(
        &mut self,
        epoch: u64,
        id: u64,
        ranges: &[proto::Range],
        frame: Option<&[u8]>,
    ) -> Result<()> {
        admit_record(self.state.complete, self.last_logged, id)?;
        self.sim_step("record: before its log append")?;
        let entry: &[u8] = match frame {
            Some(bytes) => bytes,
            None => {
                self.entry.clear();
                proto::encode_record(
                    &mut self.entry,
                    epoch,
                    id,
                    false,
                    ranges.iter().map(|r| (r.offset, r.data.as_slice())),
                );
                &self.entry
            }
        };
        if entry.len() as u64 > self.log.entry_len_max().min(self.log.capacity() / 2) {
            return Err(Error::Storage(format!(
                "a record of {} bytes does not fit the mirror's log of {} bytes; restart the mirror with a larger --log-size",
                entry.len(),
                self.log.capacity()
            )));
        }
        if mnemo_pmem::mutant::active("repl.ack_before_log") {
            // Broken on purpose (tests only): the record is logged by `apply`, after the
            // caller's acknowledgement, as a mirror that acknowledged on receipt would.
            self.sim.deferred = Some(entry.to_vec());
        } else if mnemo_log::Log::<Box<Pool>>::record_size(entry.len()) > self.log.free() {
            // Checkpoint first (the entry may live in `self.entry`: keep it aside).
            let entry = entry.to_vec();
            self.checkpoint()?;
            self.log.append(&entry)?;
        } else {
            self.log.append(entry)?;
        }
        // (Always `id` but under the mutant `repl.apply_unordered`, which logs in arrival order.)
        self.last_logged = self.last_logged.max(id);
        self.stats.records += 1;
        self.stats.bytes += ranges.iter().map(|r| r.data.len() as u64).sum::<u64>();
        self.turn.notify_all();
        Ok(())
    }

    /// Apply a logged record to the image (not durable until the next checkpoint).
    pub fn apply(&mut self, ranges: &[proto::Range]) -> Result<()> {
        self.sim_step("record: before its apply")?;
        if let Some(entry) = self.sim.deferred.take() {
            self.log.append(&entry)?;
        }
        for r in ranges {
            self.write_image(r.offset, &r.data)?;
        }
        self.since_checkpoint += 1;
        if self.since_checkpoint >= self.options.checkpoint_records {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Promote: checkpoint, raise the epoch so the old primary's records are refused, and
    /// return the image's path, ready to be opened as a pool.
    pub fn promote(&mut self) -> Result<PathBuf> {
        let epoch = self.state.epoch + 1;
        self.promote_to(epoch)
    }

    /// [`MirrorStore::promote`] to `epoch` (the one a compare-and-swap in etcd committed),
    /// or one above the highest seen if that is higher.
    pub fn promote_to(&mut self, epoch: u64) -> Result<PathBuf> {
        if !self.state.complete {
            return Err(Error::Storage(
                "this mirror never completed a copy of the primary's pool: it cannot be promoted"
                    .into(),
            ));
        }
        self.grow_to_header()?;
        self.checkpoint()?;
        let epoch = epoch.max(self.state.epoch + 1);
        self.observe_epoch(epoch)?;
        Ok(self.image_path())
    }

    /// A pool that grew after its full copy recorded its new size in its header (a record
    /// like any other), but the zeros it grew by were never shipped: the image is shorter
    /// than the size it records, and a pool that short is refused at open. Extend the image
    /// to that size (with zeros, as the primary's file was). Found by the failover benchmark:
    /// a promoted mirror of a pool grown from 64 MiB did not open.
    fn grow_to_header(&mut self) -> Result<()> {
        let Some(image) = &self.image else {
            return Ok(());
        };
        let recorded = mnemo_pmem::inspect::inspect(&self.dir.join("image"))
            .ok()
            .and_then(|i| i.header)
            .map_or(0, |h| h.pool_size);
        if recorded > image.len() {
            self.generation += 1;
            image.grow(recorded.next_multiple_of(4096)).map_err(|e| {
                Error::Storage(format!("growing the image to its pool's size: {e}"))
            })?;
        }
        Ok(())
    }
}

/// The deterministic simulation's seam (`tests/sim.rs`): it drives this store itself, many
/// of them in one process, under a simulated clock, and crashes them at chosen points. Hidden
/// from the documentation: nothing but the simulation calls these. Why each exists:
/// * a session number drawn at random at open would make two runs of one seed differ
///   (`sim_session_base`);
/// * a crash must happen inside an operation (mid-record, mid-copy, mid-checkpoint), between
///   two of its durable steps, as a power cut or a SIGKILL would (`sim_crash_after`);
/// * the image is made durable only by a drain: what a power loss leaves of it is known only
///   here (`sim_track_durable_image`, `sim_crash`), as the testkit's crash images keep the
///   flushed bytes of a pool.
impl MirrorStore {
    /// Session numbers from `base` on (not a random one): the same seed, the same run.
    #[doc(hidden)]
    pub fn sim_session_base(&mut self, base: u64) {
        self.session_base = base;
    }

    /// Connections of the newest link's session (what [`record_turn`]'s wait depends on).
    #[doc(hidden)]
    pub fn sim_session_connections(&self) -> u64 {
        self.session_conns
    }

    /// Crash after `steps` more durable steps (0: at the next one): that step and every
    /// later change fail, and the store is then only good for [`MirrorStore::sim_crash`].
    #[doc(hidden)]
    pub fn sim_crash_after(&mut self, steps: Option<u64>) {
        self.sim.crash_in = steps;
    }

    /// The step at which a crash set by [`MirrorStore::sim_crash_after`] happened, if it did.
    #[doc(hidden)]
    pub fn sim_crashed(&self) -> Option<&'static str> {
        self.sim.crashed
    }

    /// Keep a copy of the image's bytes as of its last drain (what a power loss leaves).
    #[doc(hidden)]
    pub fn sim_track_durable_image(&mut self) {
        self.sim.durable_image = Some(self.image.as_ref().map(read_image).unwrap_or_default());
    }

    /// The process dies here: its files are left as a crash leaves them. The log pool and the
    /// state as they are (an append and a state file are durable when they return; the pool
    /// is not closed, so it stays marked as not shut down cleanly). With `power_loss`, each
    /// 64-byte line of the image written since its last drain is lost if `lose_line` says so
    /// (with [`MirrorStore::sim_track_durable_image`]); otherwise (the process alone died)
    /// the image keeps every byte written to it.
    #[doc(hidden)]
    pub fn sim_crash(
        mut self,
        power_loss: bool,
        mut lose_line: impl FnMut() -> bool,
    ) -> Result<()> {
        self.sim.crashed.get_or_insert("the process ends");
        let log_path = self.dir.join("log.pool");
        let log = std::fs::read(&log_path).map_err(|e| Error::io("reading the log pool", e))?;
        let image = self.image.as_ref().map(|image| {
            let mut bytes = read_image(image);
            if let (true, Some(durable)) = (power_loss, &self.sim.durable_image) {
                for (line, old) in bytes.chunks_mut(64).zip(durable.chunks(64)) {
                    if line[..old.len()] != *old && lose_line() {
                        line[..old.len()].copy_from_slice(old);
                    }
                }
            }
            bytes
        });
        let image_path = self.image_path();
        drop(self);
        std::fs::write(&log_path, log).map_err(|e| Error::io("restoring the log pool", e))?;
        if let Some(bytes) = image {
            std::fs::write(&image_path, bytes).map_err(|e| Error::io("restoring the image", e))?;
        }
        Ok(())
    }

    /// One durable step of an operation: fails once the simulation's crash is due.
    fn sim_step(&mut self, at: &'static str) -> Result<()> {
        if let Some(at) = self.sim.crashed {
            return Err(Error::Storage(format!("crashed (simulation) at {at}")));
        }
        match self.sim.crash_in {
            None => Ok(()),
            Some(0) => {
                self.sim.crashed = Some(at);
                Err(Error::Storage(format!("crashed (simulation) at {at}")))
            }
            Some(n) => {
                self.sim.crash_in = Some(n - 1);
                Ok(())
            }
        }
    }
}

/// The image's bytes (the store's lock held: nothing writes them meanwhile).
fn read_image(image: &FileMedia) -> Vec<u8> {
    // SAFETY: the whole mapping, `0..len`, which the store keeps mapped while it is borrowed.
    unsafe { std::slice::from_raw_parts(image.base().as_ptr(), image.len() as usize) }.to_vec()
}

impl Drop for MirrorStore {
    fn drop(&mut self) {
        if self.since_checkpoint > 0 && self.sim.crashed.is_none() {
            if let Err(e) = self.checkpoint() {
                tracing::warn!(error = %e, "mirror checkpoint at close failed; the log is replayed at the next start");
            }
        }
    }
}

fn private_file(path: &Path, truncate: bool) -> Result<File> {
    FsOpen::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("{}", path.display()), e))
}

/// A mirror serving primaries on a TCP listener, forwarding to its backups.
#[derive(Debug)]
pub struct Mirror {
    store: Arc<Mutex<MirrorStore>>,
    secret: Secret,
    backups: Arc<Vec<Arc<Forwarder>>>,
}

impl Mirror {
    /// A mirror over an opened store.
    pub fn new(store: MirrorStore, secret: Secret) -> Mirror {
        Mirror {
            store: Arc::new(Mutex::new(store)),
            secret,
            backups: Arc::new(Vec::new()),
        }
    }

    /// Forward every record, in the background, to the backup at `addr` (`mnemo backup
    /// serve`); a backup more than `lag_max` bytes behind catches up with a full copy.
    /// Call before [`Mirror::serve`].
    pub fn add_backup(&mut self, addr: SocketAddr, lag_max: u64) -> Result<()> {
        self.add_backup_with(addr, backup::BackupOptions::new(lag_max))
    }

    /// [`Mirror::add_backup`] with every option (the stall threshold of `syncsec`).
    pub fn add_backup_with(
        &mut self,
        addr: SocketAddr,
        options: backup::BackupOptions,
    ) -> Result<()> {
        let forwarder = backup::start(
            addr,
            self.backups.len(),
            options,
            Arc::clone(&self.store),
            self.secret.clone(),
        )?;
        let mut backups: Vec<Arc<Forwarder>> = self.backups.iter().cloned().collect();
        backups.push(forwarder);
        self.backups = Arc::new(backups);
        Ok(())
    }

    /// The backups' forwarders (their stats).
    pub fn backups(&self) -> &[Arc<Forwarder>] {
        &self.backups
    }

    /// The store (for stats and tests).
    pub fn store(&self) -> Arc<Mutex<MirrorStore>> {
        Arc::clone(&self.store)
    }

    /// Accept primaries for ever (one thread per connection; the records of a link are
    /// logged one at a time, in the order of their ids, whatever connection each took).
    pub fn serve(&self, listener: TcpListener) -> Result<()> {
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            let store = Arc::clone(&self.store);
            let secret = self.secret.clone();
            let backups = Arc::clone(&self.backups);
            std::thread::Builder::new()
                .name("mnemo-mirror-link".into())
                .spawn(move || {
                    let peer = stream.peer_addr().ok();
                    match serve_link(stream, &store, &secret, &backups) {
                        Ok(()) => tracing::info!(?peer, "primary closed the link"),
                        Err(e) => tracing::warn!(?peer, error = %e, "link ended"),
                    }
                })
                .map_err(|e| Error::io("spawning a link thread", e))?;
        }
        Ok(())
    }
}

fn lock(store: &Mutex<MirrorStore>) -> std::sync::MutexGuard<'_, MirrorStore> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a record waits for the store's lock by yielding before it sleeps between
/// looks: with several connections per link their records take the lock in turn, each for
/// the few microseconds of its append.
const LOCK_SPIN: Duration = Duration::from_micros(200);

/// The store's lock for a record (`id`) from the primary on `link`: at once when free
/// (always, but while another connection's record is logged, or during a backup's full
/// copy), else waiting with the core's heartbeat to the primary every [`BUSY_HEARTBEAT`].
fn lock_for_record<'s>(
    store: &'s Mutex<MirrorStore>,
    link: &mut Link,
    core: &LinkCore,
    id: u64,
) -> Result<std::sync::MutexGuard<'s, MirrorStore>> {
    let start = std::time::Instant::now();
    let mut beat = start;
    loop {
        match store.try_lock() {
            Ok(guard) => return Ok(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                if beat.elapsed() >= BUSY_HEARTBEAT {
                    link.send(&core.busy_beat(id))?;
                    beat = std::time::Instant::now();
                }
                if start.elapsed() < LOCK_SPIN {
                    // Another connection's record is being logged (microseconds): yield
                    // to it rather than sleep past it.
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
}

/// Where the backups stand, for the primary.
fn status_frame(s: &MirrorStore, epoch: u64, backups: &[Arc<Forwarder>]) -> Frame {
    let last_id = s.last_id();
    Frame::Status {
        epoch: s.state().epoch.max(epoch),
        last_id,
        backups: backups
            .iter()
            .map(|b| {
                let st = b.stats();
                BackupStatus {
                    addr: b.addr().to_string(),
                    connected: st.connected,
                    acked: st.acked,
                    lag_records: last_id.saturating_sub(st.acked),
                    lag_bytes: st.unacked_bytes,
                    copies: st.copies,
                    stalls: st.stalls,
                    overflows: st.overflows,
                    bulk_catchups: st.bulk_catchups,
                }
            })
            .collect(),
    }
}

/// Run `work` (which does not use the link) while a thread of its own sends the waiting
/// primary a heartbeat every [`COPY_HEARTBEAT`]: making a large image durable (an `msync`
/// of a disk image in `syncdisk`) may outlast the primary's timeout.
fn beating<T>(link: &mut Link, epoch: u64, id: u64, work: impl FnOnce() -> T) -> T {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let beat = scope.spawn(|| {
            let mut last = std::time::Instant::now();
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10));
                if last.elapsed() >= COPY_HEARTBEAT {
                    if link.send(&Frame::Heartbeat { epoch, id }).is_err() {
                        return;
                    }
                    last = std::time::Instant::now();
                }
            }
        });
        let result = work();
        done.store(true, std::sync::atomic::Ordering::Release);
        let _ = beat.join();
        result
    })
}

/// Serve one primary's link until it closes: the handshake, then each frame as its
/// [`LinkCore`] (`mirror_core.rs`) decides, with this connection, the store's lock, the
/// backups and the real clock.
pub fn serve_link(
    stream: TcpStream,
    store: &Mutex<MirrorStore>,
    secret: &Secret,
    backups: &[Arc<Forwarder>],
) -> Result<()> {
    let mut link = Link::new(stream)?;
    link.set_read_timeout(Some(Duration::from_secs(10)))?;
    let accepted = match mirror_handshake(&mut link, store, secret) {
        Ok(accepted) => accepted,
        Err(e) => {
            let _ = link.send(&Frame::Refused {
                reason: e.to_string(),
            });
            return Err(e);
        }
    };
    if let Some(params) = accepted.params {
        tracing::info!(
            mode = params.mode.name(),
            backup_stall = params.backup_stall,
            backup_stall_ms = params.backup_stall_ms,
            "the primary told its mode"
        );
    }
    // The newest link's primary sets the backups' threshold (a version 1 primary tells
    // none: each backup keeps the mirror's own flags).
    for b in backups {
        b.told(accepted.params);
    }
    link.set_read_timeout(None)?;
    // The core's clock: time since the link was accepted.
    let origin = std::time::Instant::now();
    let mut core = LinkCore::new(
        accepted.epoch,
        accepted.number,
        accepted.version,
        Duration::ZERO,
    );
    loop {
        let frame = match link.recv() {
            Ok(f) => f,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        let result = serve_frame(frame, &mut link, &mut core, origin, store, backups);
        match result {
            Ok(replies) => {
                for reply in replies.into_iter().flatten() {
                    link.send(&reply)?;
                }
            }
            Err(e) => {
                let _ = link.send(&Frame::Refused {
                    reason: e.to_string(),
                });
                return Err(e);
            }
        }
    }
}

/// One frame of a primary's link, as `core` decides: the frames to answer with (in order).
fn serve_frame(
    frame: Frame,
    link: &mut Link,
    core: &mut LinkCore,
    origin: std::time::Instant,
    store: &Mutex<MirrorStore>,
    backups: &[Arc<Forwarder>],
) -> Result<[Option<Frame>; 2]> {
    let epoch = core.epoch();
    let status = |core: &mut LinkCore, s: &MirrorStore, force: bool| {
        core.status_due(origin.elapsed(), !backups.is_empty(), force)
            .then(|| status_frame(s, epoch, backups))
    };
    match core.frame(frame) {
        Serve::Refuse(e) => Err(e),
        Serve::CopyRanges { id, ranges } => {
            let mut s = lock_for_record(store, link, core, id)?;
            core.admit_copy(&s.view())
                .and_then(|()| s.copy_ranges(&ranges))?;
            drop(s);
            if let Some(beat) = core.copy_beat(origin.elapsed(), id) {
                link.send(&beat)?;
            }
            Ok([None, None])
        }
        Serve::Record { id, ranges } => {
            let s = lock_for_record(store, link, core, id)?;
            let mut s = wait_turn(s, link, core, id)?;
            let frame = link.last_frame();
            s.log_record(epoch, id, &ranges, Some(frame))?;
            // In log order (the store's lock is held), before the ack.
            for b in backups {
                b.push(id, frame, &ranges);
            }
            // syncsec: a backup too far behind holds this acknowledgement (the primary,
            // waiting, gets a heartbeat every 500 ms meanwhile).
            let mut beat = || {
                let _ = link.send(&core.busy_beat(id));
            };
            for b in backups {
                b.stall(&mut beat);
            }
            link.send(&core.ack(id))?;
            // Applied before the store's lock is released: a reader of the image
            // (`mnemo mirror serve --read-port`, which reads under this lock) that follows
            // the primary's acknowledgement sees this record.
            s.apply(&ranges)?;
            Ok([status(core, &s, false), None])
        }
        Serve::Heartbeat { id } => {
            // The store may be busy for a while (a backup's full copy holds its lock): the
            // answer proves this process alive and does not wait for it.
            let (answer, status) = match store.try_lock() {
                Ok(mut s) => {
                    s.stats.heartbeats += 1;
                    let status = status(core, &s, true);
                    (core.heartbeat_answer(Some(&s.view()), id), status)
                }
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    let s = p.into_inner();
                    (core.heartbeat_answer(Some(&s.view()), id), None)
                }
                Err(std::sync::TryLockError::WouldBlock) => (core.heartbeat_answer(None, id), None),
            };
            Ok([status, Some(answer)])
        }
        Serve::CopyBegin { pool_size } => {
            let mut s = lock_for_record(store, link, core, 0)?;
            let begun = core
                .admit_copy(&s.view())
                .and_then(|()| s.begin_copy(epoch, pool_size));
            // The primary sends a full copy after a lost link: it may hold sync points
            // made while the link was down, which no record will bring to the backups.
            // Each catches up with a full copy of this image once it is complete.
            for b in backups {
                b.recopy();
            }
            begun?;
            drop(s);
            Ok([Some(core.copy_begun(origin.elapsed())), None])
        }
        Serve::CopyDone { id, pool_size } => {
            let mut s = lock_for_record(store, link, core, id)?;
            core.admit_copy(&s.view())?;
            beating(link, epoch, id, || s.finish_copy(id, pool_size))?;
            Ok([Some(core.ack(id)), status(core, &s, true)])
        }
    }
}

/// The store's lock once record `id` may be logged, as `core` decides ([`LinkCore::turn`]):
/// admitted (its epoch and link), and, in a session of several connections, every id before
/// it held. A record that arrived early on one connection waits here for the ones before it
/// on the others (the primary waits for its ack meanwhile, told every [`BUSY_HEARTBEAT`]
/// that this mirror is alive); it ends refused if its link is superseded meanwhile, and with
/// the link if the primary went away (a heartbeat then fails to send).
fn wait_turn<'s>(
    mut s: std::sync::MutexGuard<'s, MirrorStore>,
    link: &mut Link,
    core: &LinkCore,
    id: u64,
) -> Result<std::sync::MutexGuard<'s, MirrorStore>> {
    let turn = Arc::clone(&s.turn);
    loop {
        if core.turn(&s.view(), id)? == Go::Now {
            return Ok(s);
        }
        let (guard, waited) = turn
            .wait_timeout(s, BUSY_HEARTBEAT)
            .unwrap_or_else(|p| p.into_inner());
        s = guard;
        if waited.timed_out() {
            link.send(&core.busy_beat(id))?;
        }
    }
}

/// Whether a record may be logged now ([`record_turn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// The next id: log it.
    Now,
    /// An earlier id is not held yet: wait for it.
    Wait,
    /// Not after the last id held: refused ([`admit_record`]).
    Stale,
}

/// The order rule of a session of several connections (sans I/O, as [`admit_epoch`]): its
/// ids are dense from its full copy on, so record `id` is logged only once the mirror holds
/// `last == id - 1`. Records are therefore logged in id order whatever connection each took,
/// and an Ack of `id` means every id up to it is durable here.
pub fn record_turn(last: u64, id: u64) -> Turn {
    if id <= last && !mnemo_pmem::mutant::active("repl.apply_unordered") {
        Turn::Stale
    } else if id == last + 1 || mnemo_pmem::mutant::active("repl.apply_unordered") {
        // Broken on purpose under the mutant (tests only): a record that arrived early is
        // logged and acknowledged before the ones before it (and they are logged after it,
        // `admit_record`), as a mirror with a log per connection and no global order would.
        Turn::Now
    } else {
        Turn::Wait
    }
}

/// A link that passed the handshake.
struct Accepted {
    epoch: u64,
    number: u64,
    version: u16,
    params: Option<LinkParams>,
}

/// The mirror's half of the handshake.
fn mirror_handshake(
    link: &mut Link,
    store: &Mutex<MirrorStore>,
    secret: &Secret,
) -> Result<Accepted> {
    let Frame::Hello {
        version,
        role,
        nonce: theirs,
    } = link.recv()?
    else {
        return Err(Error::Unexpected("expected Hello".into()));
    };
    if !(VERSION_MIN..=VERSION).contains(&version) || role != Role::Primary {
        return Err(Error::Auth(format!(
            "peer speaks version {version} as {role:?}; this mirror speaks versions {VERSION_MIN} to {VERSION} to primaries"
        )));
    }
    let ours = auth::nonce()?;
    link.send(&Frame::Challenge {
        // The primary's own version: a version 1 primary checks that it is 1.
        version,
        proof: secret.mirror_proof(&theirs, &ours),
        nonce: ours,
    })?;
    let (proof, epoch, params, session) = match link.recv()? {
        Frame::Auth {
            proof,
            epoch,
            params,
            session,
            ..
        } => (proof, epoch, params, session),
        Frame::Refused { reason } => return Err(Error::Refused(reason)),
        other => return Err(Error::Unexpected(format!("expected Auth, got {other:?}"))),
    };
    if !secret.check_primary(&proof, &ours, &theirs) {
        return Err(Error::Auth(
            "the primary does not know the shared secret".into(),
        ));
    }
    let mut s = lock(store);
    admit_epoch(epoch, s.state().epoch)?;
    if params.is_some_and(|p| p.mode == Mode::SyncDisk) && !s.image_on_disk()? {
        return Err(Error::Refused(format!(
            "the primary runs in syncdisk mode, which keeps the mirror's image on a disk, and this mirror's image ({}) is in memory (tmpfs or DAX): restart the mirror with --disk-image FILE on a disk",
            s.image_path().display()
        )));
    }
    let number = s.accept_link(epoch, params.map(|p| p.mode), session)?;
    link.send(&Frame::Welcome {
        epoch: s.state().epoch,
        last_id: s.last_id(),
        session: (version >= 3).then(|| s.session()),
    })?;
    Ok(Accepted {
        epoch,
        number,
        version,
        params,
    })
}

/// The mirror's fence (sans I/O: the TCP server and the deterministic simulation both use
/// it): a primary, or a record, of `epoch` is admitted only if no newer epoch was seen here
/// (`seen`, persisted before it was acted on). A deposed primary can therefore never have a
/// record acknowledged by a mirror that knows of its successor.
pub fn admit_epoch(epoch: u64, seen: u64) -> Result<()> {
    if epoch < seen && !mnemo_pmem::mutant::active("repl.accept_stale_epoch") {
        return Err(Error::Refused(format!(
            "stale epoch {epoch}: this mirror has seen epoch {seen} (was it promoted?)"
        )));
    }
    Ok(())
}

/// Whether link `number` may still change the image, the newest accepted being `newest`
/// (sans I/O, as [`admit_epoch`]). Only the newest link of a mirror may: bytes of an older
/// one (a primary's process that died, or dropped that link, with a full copy or records
/// still in flight) must not land on top of the newer link's copy. Found by the
/// deterministic simulation: a dead primary's copy, delayed in the network, arrived after its
/// restarted process had sent its own, and the new process's records were then applied to
/// the old image.
pub fn admit_link(number: u64, newest: u64) -> Result<()> {
    if number != newest && !mnemo_pmem::mutant::active("repl.any_link") {
        return Err(Error::Refused(format!(
            "link {number} superseded: a newer link ({newest}) was accepted since"
        )));
    }
    Ok(())
}

/// Whether a sync-point record `id` may be logged by a mirror whose image is `complete` and
/// which holds records up to `last` (sans I/O, as [`admit_epoch`]).
pub fn admit_record(complete: bool, last: u64, id: u64) -> Result<()> {
    if !complete {
        return Err(Error::Storage(
            "this mirror holds no complete copy yet; a full copy must come first".into(),
        ));
    }
    if id <= last && !mnemo_pmem::mutant::active("repl.apply_unordered") {
        return Err(Error::Storage(format!(
            "record {id} is not after the last one held ({last})"
        )));
    }
    Ok(())
}

/// Bind `addr` and serve (a convenience for the CLI and tests).
pub fn listen(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| {
        Error::io(
            format!("listening on {addr} (is another process using the port?)"),
            e,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_files_of_both_versions_are_read() {
        for mode in [None, Some(Mode::SyncDisk), Some(Mode::SyncSecEth)] {
            let state = MirrorState {
                epoch: 3,
                last_id: 99,
                pool_size: 1 << 20,
                complete: true,
                mode,
            };
            assert_eq!(MirrorState::decode(&state.encode()), Ok(state));
        }
        // Version 1 (before the mode): 36 bytes, read with no mode.
        let mut v1 = Vec::new();
        v1.extend_from_slice(&STATE_MAGIC.to_le_bytes());
        v1.extend_from_slice(&1u32.to_le_bytes());
        for word in [7u64, 42, 4096] {
            v1.extend_from_slice(&word.to_le_bytes());
        }
        v1.push(1);
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            MirrorState::decode(&v1),
            Ok(MirrorState {
                epoch: 7,
                last_id: 42,
                pool_size: 4096,
                complete: true,
                mode: None,
            })
        );
        // A version 2 file cut to version 1's length, a bad mode, a flipped byte: refused.
        let good = MirrorState {
            mode: Some(Mode::Sync),
            ..MirrorState::default()
        }
        .encode();
        assert!(MirrorState::decode(&good[..STATE_LEN_V1]).is_err());
        let mut bad_mode = good;
        bad_mode[33] = 0x77;
        let crc = crc32c::crc32c(&bad_mode[..STATE_LEN - 4]);
        bad_mode[STATE_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        assert!(MirrorState::decode(&bad_mode).is_err());
        for i in 0..STATE_LEN {
            let mut flipped = good;
            flipped[i] ^= 0x10;
            assert!(MirrorState::decode(&flipped).is_err(), "byte {i}");
        }
    }
}
