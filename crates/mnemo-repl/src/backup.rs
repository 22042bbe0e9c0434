//! The second tier: a mirror forwards every record it has logged to its backups, in the
//! background (Mojim's secondary replication).
//!
//! A backup is a mirror process of its own (`mnemo backup serve`, the same storage and
//! protocol), fed by the mirror instead of the primary. Each backup has a forwarder thread on
//! the mirror: it connects and authenticates as a primary would, sends a full copy of the
//! mirror's image (taken under the mirror's lock, so it holds exactly the records up to one
//! id), then streams the records logged since, in order, without waiting for each ack. A
//! backup is therefore a consistent image of some prefix of the primary's history: records
//! apply whole, in order.
//!
//! A backup that falls behind by more than `lag_max` bytes of queued records is not queued
//! for without bound: the queue is dropped and the backup catches up in bulk with a new full
//! copy. With a stall threshold (`syncsec`, Mojim's secondary-tier threshold), the mirror
//! holds its acknowledgement to the primary back while a connected backup has more than that
//! many bytes of records unacknowledged, at most `stall_max` (below the primary's timeout);
//! a backup still that far behind then is dropped to a bulk catch-up, so that one slow backup
//! cannot hold the primary tier for longer. Without a threshold the primary tier never waits
//! for a backup. The threshold is the primary's (told at its handshake, protocol version 2:
//! [`crate::proto::LinkParams`]); the mirror's own `stall_bytes` serves only primaries that
//! tell none (version 1).
//!
//! A full copy to a backup is taken under the mirror's lock. In `syncsec` it is sent under
//! that lock too (on a fast link as quick as a local copy, and no space needed); in
//! `syncseceth`, where the backup's link is slow, the lock is held only while the image's
//! non-zero chunks are written to a snapshot file in the mirror's directory, which is then
//! sent without it: the primary tier waits for a local copy, not for the slow link.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use mnemo_pmem::Media;

use crate::auth::Secret;
use crate::error::{Error, Result};
use crate::forwarder_core::{Ended, ForwarderCore, Reply};
use crate::link::Link;
use crate::mirror::MirrorStore;
use crate::policy::{handshake, MirrorConfig, Mode};
use crate::proto::{self, Frame, LinkParams};

/// A backup's counters, as the mirror sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackupStats {
    /// Whether a link is up and the backup has its copy.
    pub connected: bool,
    /// Records handed to the link (a record whose send then fails is counted too).
    pub forwarded: u64,
    /// Highest record id the backup acknowledged.
    pub acked: u64,
    /// Full copies sent (the first, and one per catch-up in bulk).
    pub copies: u64,
    /// Bytes of records queued for it now.
    pub lag_bytes: u64,
    /// Times the queue passed `lag_max` (or a stall `stall_max`) and was dropped for a bulk
    /// catch-up.
    pub overflows: u64,
    /// Bytes of records forwarded (or queued) and not yet acknowledged by the backup.
    pub unacked_bytes: u64,
    /// Acknowledgements to the primary held back because this backup lagged.
    pub stalls: u64,
    /// Catch-ups in bulk (`syncseceth`): records dropped, their ranges sent as one record.
    pub bulk_catchups: u64,
}

/// How a mirror feeds one backup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupOptions {
    /// Queued bytes past which the queue is dropped for a bulk catch-up.
    pub lag_max: u64,
    /// Unacknowledged bytes past which the primary's acknowledgement waits (0: never).
    pub stall_bytes: u64,
    /// Longest such wait, after which the backup is dropped to a bulk catch-up.
    pub stall_max: Duration,
}

/// Longest a lagging backup holds the primary tier back by default (`syncsec`; `syncseceth`
/// allows longer: [`crate::Mode::default_backup_stall_max`]).
pub const STALL_MAX_DEFAULT: Duration = Duration::from_secs(1);

/// While the mirror holds an acknowledgement for a lagging backup, the waiting primary is
/// told this often that the mirror is alive (a Heartbeat), so that a hold may outlast the
/// primary's timeout.
const STALL_HEARTBEAT: Duration = Duration::from_millis(500);

impl BackupOptions {
    /// `lag_max`, no stall.
    pub fn new(lag_max: u64) -> BackupOptions {
        BackupOptions {
            lag_max,
            stall_bytes: 0,
            stall_max: STALL_MAX_DEFAULT,
        }
    }
}

/// The ranges a record writes: (offset, length).
type Spans = Vec<(u64, u64)>;

#[derive(Debug, Default)]
struct Queue {
    /// Records not yet sent: the frame, and the ranges it writes.
    frames: VecDeque<(Vec<u8>, Spans)>,
    bytes: u64,
    /// `syncseceth`, catching up in bulk: the ranges written by the records dropped since
    /// (start -> end, disjoint), sent as one record of the image's bytes at the mirror's last
    /// id once the link has drained (None: records are queued one by one).
    dirty: Option<std::collections::BTreeMap<u64, u64>>,
    dirty_bytes: u64,
    /// Records were dropped: the next thing the backup needs is a full copy.
    overflowed: bool,
    /// The mirror's image was replaced by a full copy since the backup's copy was taken.
    stale_copy: bool,
    /// Records handed to this backup since its copy and not acknowledged: (id, bytes).
    unacked: VecDeque<(u64, u64)>,
    unacked_bytes: u64,
}

impl Queue {
    /// Drop everything: the backup catches up with a full copy.
    fn overflow(&mut self) {
        self.frames.clear();
        self.bytes = 0;
        self.unacked.clear();
        self.unacked_bytes = 0;
        self.overflowed = true;
        self.dirty = None;
        self.dirty_bytes = 0;
    }

    /// `syncseceth`: stop queueing; the records not yet sent are dropped and only the ranges
    /// they write are kept, to be sent in bulk (the records already sent stay awaited).
    fn go_dirty(&mut self) {
        let unsent = self.frames.len();
        for _ in 0..unsent {
            if let Some((_, len)) = self.unacked.pop_back() {
                self.unacked_bytes -= len;
            }
        }
        let mut dirty = self.dirty.take().unwrap_or_default();
        let mut bytes = self.dirty_bytes;
        for (_, spans) in self.frames.drain(..) {
            for (offset, len) in spans {
                bytes = mark(&mut dirty, bytes, offset, len);
            }
        }
        self.bytes = 0;
        self.dirty = Some(dirty);
        self.dirty_bytes = bytes;
    }

    /// Start afresh (a full copy is being taken).
    fn reset(&mut self) {
        self.frames.clear();
        self.bytes = 0;
        self.overflowed = false;
        self.stale_copy = false;
        self.unacked.clear();
        self.unacked_bytes = 0;
        self.dirty = None;
        self.dirty_bytes = 0;
    }
}

/// Add `offset..offset+len` to the disjoint ranges `dirty` (start -> end) holding `bytes`;
/// returns the bytes they hold after.
fn mark(
    dirty: &mut std::collections::BTreeMap<u64, u64>,
    mut bytes: u64,
    offset: u64,
    len: u64,
) -> u64 {
    if len == 0 {
        return bytes;
    }
    let (mut start, mut end) = (offset, offset.saturating_add(len));
    // Merge with every range that overlaps or touches.
    let touching: Vec<(u64, u64)> = dirty
        .range(..=end)
        .rev()
        .take_while(|&(_, &e)| e >= start)
        .map(|(&s, &e)| (s, e))
        .collect();
    for (s, e) in touching {
        dirty.remove(&s);
        bytes -= e - s;
        start = start.min(s);
        end = end.max(e);
    }
    dirty.insert(start, end);
    bytes + (end - start)
}

/// Most bytes a catch-up in bulk sends as one record (the backup's log must hold it: half of
/// its 64 MiB default); past it, the backup catches up with a full copy.
pub const BULK_MAX: u64 = 16 << 20;

/// One backup, fed by its own thread.
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    /// Its place among the mirror's backups (names its snapshot file).
    index: usize,
    options: BackupOptions,
    /// What the newest primary told (None: a version 1 primary, or none yet): its threshold
    /// replaces `options.stall_bytes` and `options.stall_max`.
    told: Mutex<Option<LinkParams>>,
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Signalled when acknowledgements come in, or the backup is dropped or disconnected.
    progress: Condvar,
    stalls: AtomicU64,
    connected: AtomicBool,
    forwarded: AtomicU64,
    acked: AtomicU64,
    copies: AtomicU64,
    overflows: AtomicU64,
    bulk_catchups: AtomicU64,
}

impl Forwarder {
    /// The backup's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counters.
    pub fn stats(&self) -> BackupStats {
        // One guard for both queue figures (a second lock() in this expression would wait
        // for the first guard, alive until the end of the statement).
        let (lag_bytes, unacked_bytes) = {
            let q = self.lock();
            (q.bytes, q.unacked_bytes)
        };
        BackupStats {
            connected: self.connected.load(Ordering::Relaxed),
            forwarded: self.forwarded.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            copies: self.copies.load(Ordering::Relaxed),
            lag_bytes,
            overflows: self.overflows.load(Ordering::Relaxed),
            unacked_bytes,
            stalls: self.stalls.load(Ordering::Relaxed),
            bulk_catchups: self.bulk_catchups.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest primary's parameters (None: it told none; the mirror's own flags apply).
    pub(crate) fn told(&self, params: Option<LinkParams>) {
        *self.told.lock().unwrap_or_else(|p| p.into_inner()) = params;
        self.progress.notify_all();
    }

    /// The threshold in force, and the longest hold: the primary's if it told them, else the
    /// mirror's own.
    pub fn stall_threshold(&self) -> (u64, Duration) {
        match *self.told.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(p) => (
                p.backup_stall,
                Duration::from_millis(u64::from(p.backup_stall_ms)),
            ),
            None => (self.options.stall_bytes, self.options.stall_max),
        }
    }

    /// Whether full copies go through a snapshot file and a lagging backup catches up by
    /// its dirty ranges (the primary runs `syncseceth`).
    fn slow_link(&self) -> bool {
        self.told
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|p| p.mode == Mode::SyncSecEth)
    }

    /// Queue a logged record's frame (called by the mirror, in record order, under its
    /// store's lock); `ranges` are the ones it writes.
    pub(crate) fn push(&self, id: u64, frame: &[u8], ranges: &[proto::Range]) {
        // The queue holds at least the threshold: a backup must be able to lag that far
        // before it holds the primary, not be dropped first.
        let limit = self.options.lag_max.max(self.stall_threshold().0);
        let slow_link = self.slow_link();
        let mut q = self.lock();
        if q.overflowed {
            return;
        }
        let spans = || {
            ranges
                .iter()
                .map(|r| (r.offset, r.data.len() as u64))
                .collect::<Vec<_>>()
        };
        let len = frame.len() as u64;
        if let Some(mut dirty) = q.dirty.take() {
            // Catching up in bulk: only the ranges are kept.
            let mut bytes = q.dirty_bytes;
            for (offset, n) in spans() {
                bytes = mark(&mut dirty, bytes, offset, n);
            }
            q.dirty = Some(dirty);
            q.dirty_bytes = bytes;
            if bytes > BULK_MAX {
                q.overflow();
                self.overflows.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(backup = %self.addr, bulk_max = BULK_MAX, "the backup's ranges to catch up pass the bulk limit: it will catch up with a full copy");
            }
        } else if q.bytes + len > limit {
            if slow_link {
                q.frames.push_back((Vec::new(), spans()));
                q.unacked.push_back((id, 0));
                q.go_dirty();
                tracing::info!(backup = %self.addr, lag_max = limit, "backup lags too far: it will catch up in bulk");
            } else {
                q.overflow();
                self.overflows.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(backup = %self.addr, lag_max = limit, "backup lags too far: it will catch up with a full copy");
            }
        } else {
            q.bytes += len;
            q.frames.push_back((frame.to_vec(), spans()));
            q.unacked.push_back((id, len));
            q.unacked_bytes += len;
        }
        drop(q);
        self.wake.notify_one();
    }

    /// Before the mirror acknowledges a record to the primary: wait while this backup, linked
    /// and streaming, has more than the stall threshold unacknowledged; past `stall_max`,
    /// drop it to a bulk catch-up instead of waiting longer.
    pub(crate) fn stall(&self, beat: &mut dyn FnMut()) {
        let (threshold, stall_max) = self.stall_threshold();
        if threshold == 0 {
            return;
        }
        let mut q = self.lock();
        let lagging = |q: &Queue| {
            self.connected.load(Ordering::Relaxed)
                && !q.overflowed
                && !q.stale_copy
                && q.dirty.is_none()
                && q.unacked_bytes > threshold
        };
        if !lagging(&q) {
            return;
        }
        self.stalls.fetch_add(1, Ordering::Relaxed);
        let start = std::time::Instant::now();
        let deadline = start + stall_max;
        let mut beat_at = start;
        while lagging(&q) {
            let now = std::time::Instant::now();
            if now >= deadline && self.slow_link() {
                // syncseceth: stop holding the primary; what the backup has not been sent
                // yet goes to it in bulk once its link has drained.
                q.go_dirty();
                drop(q);
                self.wake.notify_one();
                tracing::info!(backup = %self.addr, ?stall_max, threshold, "a backup lagging past the stall threshold held the primary tier for its longest wait: it will catch up in bulk");
                return;
            }
            if now >= deadline {
                q.overflow();
                self.overflows.fetch_add(1, Ordering::Relaxed);
                drop(q);
                self.wake.notify_one();
                tracing::warn!(backup = %self.addr, ?stall_max, threshold, "a backup lagging past the stall threshold held the primary tier for its longest wait: it will catch up with a full copy");
                return;
            }
            if now >= beat_at + STALL_HEARTBEAT {
                // The primary waits for this acknowledgement: alive, holding it on purpose.
                beat();
                beat_at = now;
            }
            let wake = deadline.min(beat_at + STALL_HEARTBEAT);
            q = self
                .progress
                .wait_timeout(q, wake.saturating_duration_since(now))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The backup acknowledged every record up to `id`.
    fn note_ack(&self, id: u64) {
        self.acked.fetch_max(id, Ordering::Relaxed);
        let mut q = self.lock();
        while let Some(&(first, len)) = q.unacked.front() {
            if first > id {
                break;
            }
            q.unacked.pop_front();
            q.unacked_bytes -= len;
        }
        drop(q);
        self.progress.notify_all();
    }
}

impl Forwarder {
    /// The mirror's image is being replaced by a full copy from the primary: drop what is
    /// queued; the backup catches up with a full copy of the new image.
    pub(crate) fn recopy(&self) {
        self.lock().stale_copy = true;
        self.wake.notify_one();
    }
}

/// Start forwarding to the backup at `addr`, the mirror's backup number `index` (a thread
/// for ever).
pub fn start(
    addr: SocketAddr,
    index: usize,
    options: BackupOptions,
    store: Arc<Mutex<MirrorStore>>,
    secret: Secret,
) -> Result<Arc<Forwarder>> {
    let forwarder = Arc::new(Forwarder {
        addr,
        index,
        options,
        told: Mutex::new(None),
        queue: Mutex::new(Queue::default()),
        wake: Condvar::new(),
        progress: Condvar::new(),
        stalls: AtomicU64::new(0),
        connected: AtomicBool::new(false),
        forwarded: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        copies: AtomicU64::new(0),
        overflows: AtomicU64::new(0),
        bulk_catchups: AtomicU64::new(0),
    });
    let f = Arc::clone(&forwarder);
    std::thread::Builder::new()
        .name("mnemo-backup-fwd".into())
        .spawn(move || run(&f, &store, &secret))
        .map_err(|e| Error::io("spawning a backup forwarder", e))?;
    Ok(forwarder)
}

fn lock_store(store: &Mutex<MirrorStore>) -> std::sync::MutexGuard<'_, MirrorStore> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

/// The forwarder's thread: one session after another, as its [`ForwarderCore`]
/// (`forwarder_core.rs`) decides, with the real clock.
fn run(f: &Forwarder, store: &Mutex<MirrorStore>, secret: &Secret) {
    let origin = std::time::Instant::now();
    let mut core = ForwarderCore::new();
    loop {
        let (how, error) = match session(f, store, secret, &mut core) {
            Ok(()) => (Ended::Recopy, None),
            // Waiting for the primary's first copy is no failure: no backoff, no warning.
            Err(Error::Storage(_)) if !lock_store(store).state().complete => {
                (Ended::NoCopyYet, None)
            }
            Err(e) => (Ended::Failed, Some(e)),
        };
        let wait = core.ended(origin.elapsed(), how);
        if let Some(e) = error {
            tracing::warn!(backup = %f.addr, error = %e, retry_in = ?wait, "backup link down");
        }
        f.connected.store(false, Ordering::Relaxed);
        f.progress.notify_all();
        std::thread::sleep(wait);
    }
}

/// One link: handshake, full copy, then records until an error or an overflow.
fn session(
    f: &Forwarder,
    store: &Mutex<MirrorStore>,
    secret: &Secret,
    core: &mut ForwarderCore,
) -> Result<()> {
    let (epoch, size) = {
        let s = lock_store(store);
        if !s.state().complete {
            // Nothing to give yet: wait for the primary's copy.
            return Err(Error::Storage(
                "the mirror holds no complete copy yet".into(),
            ));
        }
        (s.state().epoch, s.image().map_or(0, |m| m.len()))
    };
    core.start();
    let mut config = MirrorConfig::new(f.addr, secret.clone(), Mode::Async);
    config.epoch = epoch;
    let (mut link, _) = handshake(&config, size)?;
    copy(f, store, &mut link, epoch, core)?;
    link.set_read_timeout(Some(Duration::from_secs(60)))?;
    let done = wait_ack(&mut link, core)?;
    f.acked.fetch_max(done, Ordering::Relaxed);
    f.copies.fetch_add(1, Ordering::Relaxed);
    f.connected.store(true, Ordering::Relaxed);
    tracing::info!(backup = %f.addr, id = done, "backup in sync (full copy sent)");
    let mut buf = Vec::new();
    loop {
        if bulk_due(f) {
            bulk(f, store, &mut link, epoch, &mut buf)?;
        }
        let frame = {
            let mut q = f.lock();
            if q.frames.is_empty() && !q.overflowed && !q.stale_copy {
                // Nothing to send: read acknowledgements soon if some are awaited (a stalled
                // primary waits for them), else now and then.
                let idle = if q.unacked_bytes > 0 {
                    Duration::from_millis(1)
                } else {
                    Duration::from_millis(200)
                };
                q = f
                    .wake
                    .wait_timeout(q, idle)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if q.overflowed || q.stale_copy {
                // Catch up in bulk: a new link and a new copy.
                return Ok(());
            }
            let frame = q.frames.pop_front().map(|(frame, _)| frame);
            if let Some(fr) = &frame {
                q.bytes -= fr.len() as u64;
            }
            frame
        };
        if let Some(frame) = frame {
            // Counted before the send: once the backup holds the record, the count shows it
            // (counted after, a reader that saw the backup apply it could still read one less).
            f.forwarded.fetch_add(1, Ordering::Relaxed);
            link.send_encoded(&frame)?;
        }
        while let Some(reply) = link.try_recv()? {
            if let Reply::Acked(id) = core.reply(reply)? {
                f.note_ack(id);
            }
        }
    }
}

/// Whether a catch-up in bulk is due: ranges are waiting and the records already sent have
/// been acknowledged (the link has drained: the ranges gathered meanwhile coalesce).
fn bulk_due(f: &Forwarder) -> bool {
    let q = f.lock();
    q.dirty.is_some() && q.unacked_bytes == 0 && !q.overflowed && !q.stale_copy
}

/// Send the dirty ranges as one record: the image's bytes at the mirror's last id, taken
/// under its lock (no record applied meanwhile), so that the backup, which holds every
/// record sent before, holds exactly the mirror's state at that id once it applies it.
fn bulk(
    f: &Forwarder,
    store: &Mutex<MirrorStore>,
    link: &mut Link,
    epoch: u64,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let s = lock_store(store);
    let mut q = f.lock();
    let Some(dirty) = q.dirty.take() else {
        return Ok(());
    };
    let id = s.last_id();
    let image = s
        .image()
        .ok_or_else(|| Error::Storage("no image to catch up from".into()))?;
    let len = image.len();
    let ranges = dirty.iter().filter_map(|(&start, &end)| {
        let end = end.min(len);
        (start < end).then(|| {
            // SAFETY: `start..end` is inside the image's mapping, which the store (locked
            // here) keeps mapped; no record is applied while the lock is held.
            (start, unsafe {
                std::slice::from_raw_parts(
                    image.base().as_ptr().add(start as usize),
                    (end - start) as usize,
                )
            })
        })
    });
    let ranges: Vec<(u64, &[u8])> = ranges.collect();
    buf.clear();
    proto::encode_record(buf, epoch, id, false, ranges.into_iter());
    let size = buf.len() as u64;
    q.dirty_bytes = 0;
    q.unacked.push_back((id, size));
    q.unacked_bytes += size;
    drop(q);
    drop(s);
    f.bulk_catchups.fetch_add(1, Ordering::Relaxed);
    f.forwarded.fetch_add(1, Ordering::Relaxed);
    tracing::info!(backup = %f.addr, id, bytes = size, "backup catching up in bulk");
    link.send_encoded(buf)
}

/// Bytes of a full copy's records, as the primary's ([`crate::policy`]): all-zero ones are
/// left out, so that a finer grain sends fewer bytes over a slow link.
const COPY_CHUNK: u64 = 256 << 10;

/// Send the mirror's image as a full copy; returns the id it holds (the CopyDone's).
fn copy(
    f: &Forwarder,
    store: &Mutex<MirrorStore>,
    link: &mut Link,
    epoch: u64,
    core: &mut ForwarderCore,
) -> Result<u64> {
    // Under the mirror's lock: no record is logged meanwhile, so the copy holds exactly the
    // records up to `done`, and every record queued from now on comes after it. (A full copy
    // from the primary that began since the session checked is waited for: no copy now.)
    let s = lock_store(store);
    let done = core.copy(s.state().complete, s.last_id())?;
    f.lock().reset();
    let image = s
        .image()
        .ok_or_else(|| Error::Storage("no image to copy".into()))?;
    let size = image.len();
    let chunks = (0..size.div_ceil(COPY_CHUNK)).map(|i| {
        let at = i * COPY_CHUNK;
        let len = COPY_CHUNK.min(size - at);
        // SAFETY: `at..at+len` is inside the image's mapping, which the store (locked here)
        // keeps mapped; no record is applied while the lock is held.
        let chunk = unsafe {
            std::slice::from_raw_parts(image.base().as_ptr().add(at as usize), len as usize)
        };
        (at, chunk)
    });
    if f.slow_link() {
        // syncseceth: the chunks to a file while locked, then to the slow link unlocked.
        let path = s.dir().join(format!("backup-{}.snapshot", f.index));
        let snapshot = snapshot(&path, chunks)?;
        drop(s);
        let sent = send_copy(link, epoch, done, size, snapshot.iter());
        let _ = std::fs::remove_file(&path);
        sent?;
    } else {
        send_copy(link, epoch, done, size, chunks)?;
    }
    Ok(done)
}

/// The non-zero chunks of an image, written to `path` (removed by the caller) and read back
/// one at a time: the file holds them while the copy travels, memory only one.
struct Snapshot {
    file: std::fs::File,
    /// (offset in the image, length) of each chunk, in the file one after the other.
    chunks: Vec<(u64, u64)>,
}

fn snapshot<'a>(
    path: &std::path::Path,
    chunks: impl Iterator<Item = (u64, &'a [u8])>,
) -> Result<Snapshot> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io(format!("{}", path.display()), e))?;
    let mut kept = Vec::new();
    for (at, chunk) in chunks {
        if chunk.iter().any(|&b| b != 0) {
            file.write_all(chunk)
                .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
            kept.push((at, chunk.len() as u64));
        }
    }
    Ok(Snapshot { file, chunks: kept })
}

impl Snapshot {
    fn iter(&self) -> impl Iterator<Item = (u64, Vec<u8>)> + '_ {
        use std::os::unix::fs::FileExt;
        let mut pos = 0u64;
        self.chunks.iter().map(move |&(at, len)| {
            let mut buf = vec![0u8; len as usize];
            // A read that fails leaves zeros: the backup then holds a wrong chunk, so the
            // copy is failed instead (below).
            let ok = self.file.read_exact_at(&mut buf, pos).is_ok();
            pos += len;
            if ok {
                (at, buf)
            } else {
                (u64::MAX, Vec::new())
            }
        })
    }
}

/// CopyBegin, the non-zero chunks, CopyDone at `done`.
fn send_copy<C: AsRef<[u8]>>(
    link: &mut Link,
    epoch: u64,
    done: u64,
    size: u64,
    chunks: impl Iterator<Item = (u64, C)>,
) -> Result<()> {
    link.send(&Frame::CopyBegin {
        epoch,
        pool_size: size,
    })?;
    let mut buf = Vec::new();
    for (at, chunk) in chunks {
        let chunk = chunk.as_ref();
        if at == u64::MAX {
            return Err(Error::Storage(
                "reading the backup's snapshot failed".into(),
            ));
        }
        if chunk.iter().any(|&b| b != 0) {
            buf.clear();
            proto::encode_record(&mut buf, epoch, done, true, [(at, chunk)].into_iter());
            link.send_encoded(&buf)?;
        }
    }
    link.send(&Frame::CopyDone {
        epoch,
        id: done,
        pool_size: size,
    })
}

/// The backup's acknowledgement of the full copy: the id it holds.
fn wait_ack(link: &mut Link, core: &mut ForwarderCore) -> Result<u64> {
    loop {
        if let Reply::InSync(done) = core.reply(link.recv()?)? {
            return Ok(done);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The dirty ranges are the union of what was marked: disjoint, not touching, and
        /// their byte count is right (checked against a bitmap).
        #[test]
        fn marked_ranges_are_their_union(
            marks in proptest::collection::vec((0u64..512, 0u64..64), 0..40),
        ) {
            let mut dirty = std::collections::BTreeMap::new();
            let mut bytes = 0;
            let mut bitmap = [false; 576];
            for &(offset, len) in &marks {
                bytes = mark(&mut dirty, bytes, offset, len);
                for b in &mut bitmap[offset as usize..(offset + len) as usize] {
                    *b = true;
                }
            }
            let mut covered = [false; 576];
            let mut last_end = None;
            for (&start, &end) in &dirty {
                prop_assert!(start < end);
                if let Some(e) = last_end {
                    prop_assert!(start > e, "ranges touch or overlap: {dirty:?}");
                }
                last_end = Some(end);
                for b in &mut covered[start as usize..end as usize] {
                    *b = true;
                }
            }
            prop_assert_eq!(covered, bitmap);
            prop_assert_eq!(bytes, bitmap.iter().filter(|&&b| b).count() as u64);
        }
    }
}
