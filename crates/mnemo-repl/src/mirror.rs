//! The mirror: receives sync points, makes each durable in its log, acknowledges, and
//! applies them to its image of the primary's pool.
//!
//! A mirror directory holds:
//! * `image`: a byte-for-byte image of the primary's pool (a pool file: `mnemo serve --pool
//!   DIR/image` serves it after `mnemo mirror promote`);
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mnemo_log::{Log, Lsn};
use mnemo_pmem::{CreateOptions, FileMedia, Media, OpenOptions, Pool};

use crate::auth::{self, Secret};
use crate::backup::{self, Forwarder};
use crate::error::{Error, Result};
use crate::link::Link;
use crate::proto::{self, Frame, Role, VERSION};

const STATE_MAGIC: u32 = u32::from_le_bytes(*b"MNRS");
const STATE_VERSION: u32 = 1;
const STATE_LEN: usize = 4 + 4 + 8 + 8 + 8 + 1 + 4;

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
        let crc = crc32c::crc32c(&b[..STATE_LEN - 4]);
        b[STATE_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> std::result::Result<MirrorState, String> {
        if b.len() != STATE_LEN {
            return Err(format!("{} bytes, expected {STATE_LEN}", b.len()));
        }
        let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        if u32_at(0) != STATE_MAGIC {
            return Err("not a mirror state file".into());
        }
        if u32_at(STATE_LEN - 4) != crc32c::crc32c(&b[..STATE_LEN - 4]) {
            return Err("checksum mismatch".into());
        }
        if u32_at(4) != STATE_VERSION {
            return Err(format!(
                "version {}, this build reads {STATE_VERSION}",
                u32_at(4)
            ));
        }
        let complete = match b[32] {
            0 => false,
            1 => true,
            _ => return Err("bad completeness flag".into()),
        };
        Ok(MirrorState {
            epoch: word(8),
            last_id: word(16),
            pool_size: word(24),
            complete,
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
}

impl Default for MirrorOptions {
    fn default() -> MirrorOptions {
        MirrorOptions {
            log_size: 64 << 20,
            checkpoint_records: 1024,
        }
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

    /// Highest record id the mirror holds durably (logged or checkpointed).
    pub fn last_id(&self) -> u64 {
        self.last_logged
    }

    /// Counters.
    pub fn stats(&self) -> MirrorStats {
        self.stats
    }

    /// The image's medium, if a copy ever began.
    pub(crate) fn image(&self) -> Option<&FileMedia> {
        self.image.as_ref()
    }

    /// Path of the image (a pool file once the copy is complete).
    pub fn image_path(&self) -> PathBuf {
        self.dir.join("image")
    }

    fn write_state(&mut self, state: MirrorState) -> Result<()> {
        let tmp = self.dir.join("state.tmp");
        let mut f = private_file(&tmp, true)?;
        f.write_all(&state.encode())
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io("writing the mirror state", e))?;
        std::fs::rename(&tmp, self.dir.join("state"))
            .map_err(|e| Error::io("publishing the mirror state", e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io("syncing the mirror directory", e))?;
        self.state = state;
        Ok(())
    }

    /// A link passed the handshake: its number. From now on only it may change the image
    /// ([`admit_link`]).
    pub fn open_link(&mut self) -> u64 {
        self.newest_link += 1;
        self.newest_link
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
        if let Some(image) = &self.image {
            image.drain().map_err(|e| Error::Storage(e.to_string()))?;
        }
        let state = MirrorState {
            last_id: self.last_logged,
            ..self.state
        };
        self.write_state(state)?;
        let tail: Lsn = self.log.tail();
        self.log.truncate_front(tail)?;
        self.since_checkpoint = 0;
        self.stats.checkpoints += 1;
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
        self.log.reset()?;
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
        Ok(())
    }

    /// Apply ranges of a full copy (not logged: the copy is not in use until it completes).
    pub fn copy_ranges(&mut self, ranges: &[proto::Range]) -> Result<()> {
        if self.state.complete {
            return Err(Error::Storage("copy ranges outside a copy".into()));
        }
        for r in ranges {
            self.write_image(r.offset, &r.data)?;
        }
        Ok(())
    }

    /// The full copy is complete at record `id`.
    pub fn finish_copy(&mut self, id: u64, pool_size: u64) -> Result<()> {
        if let Some(image) = &self.image {
            image.drain().map_err(|e| Error::Storage(e.to_string()))?;
        }
        self.last_logged = id;
        self.write_state(MirrorState {
            last_id: id,
            pool_size,
            complete: true,
            ..self.state
        })?;
        self.stats.copies += 1;
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
        if mnemo_log::Log::<Box<Pool>>::record_size(entry.len()) > self.log.free() {
            // Checkpoint first (the entry may live in `self.entry`: keep it aside).
            let entry = entry.to_vec();
            self.checkpoint()?;
            self.log.append(&entry)?;
        } else {
            self.log.append(entry)?;
        }
        self.last_logged = id;
        self.stats.records += 1;
        self.stats.bytes += ranges.iter().map(|r| r.data.len() as u64).sum::<u64>();
        Ok(())
    }

    /// Apply a logged record to the image (not durable until the next checkpoint).
    pub fn apply(&mut self, ranges: &[proto::Range]) -> Result<()> {
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
            image.grow(recorded.next_multiple_of(4096)).map_err(|e| {
                Error::Storage(format!("growing the image to its pool's size: {e}"))
            })?;
        }
        Ok(())
    }
}

impl Drop for MirrorStore {
    fn drop(&mut self) {
        if self.since_checkpoint > 0 {
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
        let forwarder = backup::start(addr, options, Arc::clone(&self.store), self.secret.clone())?;
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

    /// Accept primaries for ever (one thread per link; records of all links are applied
    /// one at a time, in the order of their ids).
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

/// While a record waits for the store (a backup's full copy holds it, about a second per GiB),
/// the primary waiting for its ack is told every this long that this mirror is alive, so that
/// it waits instead of declaring the link lost.
const BUSY_HEARTBEAT: Duration = Duration::from_millis(500);

/// The store's lock for a record from the primary on `link`: at once when free (always, but
/// during a backup's full copy), else waiting with a heartbeat to the primary every
/// [`BUSY_HEARTBEAT`].
fn lock_for_record<'s>(
    store: &'s Mutex<MirrorStore>,
    link: &mut Link,
    epoch: u64,
    id: u64,
) -> Result<std::sync::MutexGuard<'s, MirrorStore>> {
    let mut beat = std::time::Instant::now();
    loop {
        match store.try_lock() {
            Ok(guard) => return Ok(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                if beat.elapsed() >= BUSY_HEARTBEAT {
                    link.send(&Frame::Heartbeat {
                        epoch,
                        id: id.saturating_sub(1),
                    })?;
                    beat = std::time::Instant::now();
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// Serve one primary's link until it closes.
pub fn serve_link(
    stream: TcpStream,
    store: &Mutex<MirrorStore>,
    secret: &Secret,
    backups: &[Arc<Forwarder>],
) -> Result<()> {
    let mut link = Link::new(stream)?;
    link.set_read_timeout(Some(Duration::from_secs(10)))?;
    let (epoch, number) = match mirror_handshake(&mut link, store, secret) {
        Ok(accepted) => accepted,
        Err(e) => {
            let _ = link.send(&Frame::Refused {
                reason: e.to_string(),
            });
            return Err(e);
        }
    };
    link.set_read_timeout(None)?;
    let mut copying = false;
    loop {
        let frame = match link.recv() {
            Ok(f) => f,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(())
            }
            Err(e) => return Err(e),
        };
        let result = match frame {
            Frame::Record {
                epoch: e,
                id,
                copy,
                ranges,
            } => {
                if e != epoch {
                    Err(Error::Refused(format!(
                        "record of epoch {e} on a link of epoch {epoch}"
                    )))
                } else if copy {
                    if copying {
                        let mut s = lock(store);
                        admit(&s, epoch, number)
                            .and_then(|()| s.copy_ranges(&ranges))
                            .map(|()| None)
                    } else {
                        Err(Error::Unexpected("copy record outside a copy".into()))
                    }
                } else {
                    let mut s = lock_for_record(store, &mut link, epoch, id)?;
                    if let Err(e) = admit(&s, epoch, number) {
                        Err(e)
                    } else {
                        let frame = link.last_frame();
                        let logged = s.log_record(epoch, id, &ranges, Some(frame));
                        if logged.is_ok() {
                            // In log order (the store's lock is held), before the ack.
                            for b in backups {
                                b.push(id, frame);
                            }
                            // syncsec: a backup too far behind holds this acknowledgement.
                            for b in backups {
                                b.stall();
                            }
                        }
                        logged.and_then(|()| {
                            link.send(&Frame::Ack { epoch, id })?;
                            s.apply(&ranges)?;
                            Ok(None)
                        })
                    }
                }
            }
            Frame::Heartbeat { id, .. } => {
                // Answered with where this mirror stands: a primary whose epoch is older
                // learns here, on an idle link, that it was deposed. The store may be busy
                // for a while (a backup's full copy holds its lock): the answer proves this
                // process alive and does not wait for it; the epoch is then the link's.
                let (epoch, id) = match store.try_lock() {
                    Ok(mut s) => {
                        s.stats.heartbeats += 1;
                        (s.state().epoch, s.last_id())
                    }
                    Err(std::sync::TryLockError::Poisoned(p)) => {
                        let s = p.into_inner();
                        (s.state().epoch, s.last_id())
                    }
                    Err(std::sync::TryLockError::WouldBlock) => (epoch, id),
                };
                Ok(Some(Frame::Heartbeat { epoch, id }))
            }
            Frame::CopyBegin {
                epoch: e,
                pool_size,
            } if e == epoch && !copying => {
                copying = true;
                let mut s = lock(store);
                let begun = admit(&s, epoch, number).and_then(|()| s.begin_copy(epoch, pool_size));
                // The primary sends a full copy after a lost link: it may hold sync points
                // made while the link was down, which no record will bring to the backups.
                // Each catches up with a full copy of this image once it is complete.
                for b in backups {
                    b.recopy();
                }
                begun.map(|()| None)
            }
            Frame::CopyDone {
                epoch: e,
                id,
                pool_size,
            } if e == epoch && copying => {
                copying = false;
                let mut s = lock(store);
                admit(&s, epoch, number)
                    .and_then(|()| s.finish_copy(id, pool_size))
                    .map(|()| Some(Frame::Ack { epoch, id }))
            }
            other => Err(Error::Unexpected(format!("{other:?}"))),
        };
        match result {
            Ok(Some(reply)) => link.send(&reply)?,
            Ok(None) => {}
            Err(e) => {
                let _ = link.send(&Frame::Refused {
                    reason: e.to_string(),
                });
                return Err(e);
            }
        }
    }
}

/// Whether link `number` of `epoch` may change the image now: no newer epoch seen since its
/// handshake (a promotion, a newer primary), and no newer link. Checked under the store's lock
/// for every record and every step of a full copy. (The copy steps were fenced by the link
/// only until the simulation found a deposed primary's full copy, begun before the mirror's
/// takeover, replacing the image between the takeover and the exec.)
fn admit(s: &MirrorStore, epoch: u64, number: u64) -> Result<()> {
    admit_epoch(epoch, s.state().epoch)?;
    admit_link(number, s.newest_link())
}

/// The mirror's half of the handshake; returns the link's epoch and number.
fn mirror_handshake(
    link: &mut Link,
    store: &Mutex<MirrorStore>,
    secret: &Secret,
) -> Result<(u64, u64)> {
    let Frame::Hello {
        version,
        role,
        nonce: theirs,
    } = link.recv()?
    else {
        return Err(Error::Unexpected("expected Hello".into()));
    };
    if version != VERSION || role != Role::Primary {
        return Err(Error::Auth(format!(
            "peer speaks version {version} as {role:?}; this mirror speaks version {VERSION} to primaries"
        )));
    }
    let ours = auth::nonce()?;
    link.send(&Frame::Challenge {
        version: VERSION,
        proof: secret.mirror_proof(&theirs, &ours),
        nonce: ours,
    })?;
    let (proof, epoch) = match link.recv()? {
        Frame::Auth { proof, epoch, .. } => (proof, epoch),
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
    s.observe_epoch(epoch)?;
    let number = s.open_link();
    link.send(&Frame::Welcome {
        epoch: s.state().epoch,
        last_id: s.last_id(),
    })?;
    Ok((epoch, number))
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
    if id <= last {
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
