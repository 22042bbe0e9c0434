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
//! copy. The primary tier never waits for a backup.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use mnemo_pmem::Media;

use crate::auth::Secret;
use crate::error::{Error, Result};
use crate::link::Link;
use crate::mirror::MirrorStore;
use crate::policy::{handshake, MirrorConfig, Mode};
use crate::proto::{self, Frame};

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
    /// Times the queue passed `lag_max` and was dropped for a bulk catch-up.
    pub overflows: u64,
}

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Vec<u8>>,
    bytes: u64,
    /// Records were dropped: the next thing the backup needs is a full copy.
    overflowed: bool,
    /// The mirror's image was replaced by a full copy since the backup's copy was taken.
    stale_copy: bool,
}

/// One backup, fed by its own thread.
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    lag_max: u64,
    queue: Mutex<Queue>,
    wake: Condvar,
    connected: AtomicBool,
    forwarded: AtomicU64,
    acked: AtomicU64,
    copies: AtomicU64,
    overflows: AtomicU64,
}

impl Forwarder {
    /// The backup's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counters.
    pub fn stats(&self) -> BackupStats {
        BackupStats {
            connected: self.connected.load(Ordering::Relaxed),
            forwarded: self.forwarded.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            copies: self.copies.load(Ordering::Relaxed),
            lag_bytes: self.lock().bytes,
            overflows: self.overflows.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue a logged record's frame (called by the mirror, in record order).
    pub(crate) fn push(&self, frame: &[u8]) {
        let mut q = self.lock();
        if q.overflowed {
            return;
        }
        if q.bytes + frame.len() as u64 > self.lag_max {
            q.frames.clear();
            q.bytes = 0;
            q.overflowed = true;
            self.overflows.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(backup = %self.addr, lag_max = self.lag_max, "backup lags too far: it will catch up with a full copy");
        } else {
            q.bytes += frame.len() as u64;
            q.frames.push_back(frame.to_vec());
        }
        drop(q);
        self.wake.notify_one();
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

/// Start forwarding to the backup at `addr` (a thread for ever).
pub fn start(
    addr: SocketAddr,
    lag_max: u64,
    store: Arc<Mutex<MirrorStore>>,
    secret: Secret,
) -> Result<Arc<Forwarder>> {
    let forwarder = Arc::new(Forwarder {
        addr,
        lag_max,
        queue: Mutex::new(Queue::default()),
        wake: Condvar::new(),
        connected: AtomicBool::new(false),
        forwarded: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        copies: AtomicU64::new(0),
        overflows: AtomicU64::new(0),
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

fn run(f: &Forwarder, store: &Mutex<MirrorStore>, secret: &Secret) {
    let mut backoff = Duration::from_millis(200);
    loop {
        match session(f, store, secret) {
            Ok(()) => backoff = Duration::from_millis(200),
            // Waiting for the primary's first copy is no failure: no backoff, no warning.
            Err(Error::Storage(_)) if !lock_store(store).state().complete => {}
            Err(e) => {
                tracing::warn!(backup = %f.addr, error = %e, retry_in = ?backoff, "backup link down");
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
        f.connected.store(false, Ordering::Relaxed);
        std::thread::sleep(backoff);
    }
}

/// One link: handshake, full copy, then records until an error or an overflow.
fn session(f: &Forwarder, store: &Mutex<MirrorStore>, secret: &Secret) -> Result<()> {
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
    let mut config = MirrorConfig::new(f.addr, secret.clone(), Mode::Async);
    config.epoch = epoch;
    let (mut link, _) = handshake(&config, size)?;
    let done = copy(f, store, &mut link, epoch)?;
    link.set_read_timeout(Some(Duration::from_secs(60)))?;
    wait_ack(&mut link, done)?;
    f.acked.fetch_max(done, Ordering::Relaxed);
    f.copies.fetch_add(1, Ordering::Relaxed);
    f.connected.store(true, Ordering::Relaxed);
    tracing::info!(backup = %f.addr, id = done, "backup in sync (full copy sent)");
    loop {
        let frame = {
            let mut q = f.lock();
            while q.frames.is_empty() && !q.overflowed && !q.stale_copy {
                let (guard, _) = f
                    .wake
                    .wait_timeout(q, Duration::from_millis(200))
                    .unwrap_or_else(|p| p.into_inner());
                q = guard;
            }
            if q.overflowed || q.stale_copy {
                // Catch up in bulk: a new link and a new copy.
                return Ok(());
            }
            let frame = q.frames.pop_front();
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
            match reply {
                Frame::Ack { id, .. } => {
                    f.acked.fetch_max(id, Ordering::Relaxed);
                }
                // The backup is busy (its own store's lock is held): alive all the same.
                Frame::Heartbeat { .. } => {}
                Frame::Refused { reason } => return Err(Error::Refused(reason)),
                other => return Err(Error::Unexpected(format!("{other:?}"))),
            }
        }
    }
}

/// Send the mirror's image as a full copy; returns the id it holds (the CopyDone's).
fn copy(f: &Forwarder, store: &Mutex<MirrorStore>, link: &mut Link, epoch: u64) -> Result<u64> {
    // Under the mirror's lock: no record is logged meanwhile, so the copy holds exactly the
    // records up to `done`, and every record queued from now on comes after it.
    let s = lock_store(store);
    if !s.state().complete {
        // A full copy from the primary began since the session checked: wait for its end.
        return Err(Error::Storage(
            "the mirror holds no complete copy yet".into(),
        ));
    }
    {
        let mut q = f.lock();
        q.frames.clear();
        q.bytes = 0;
        q.overflowed = false;
        q.stale_copy = false;
    }
    let image = s
        .image()
        .ok_or_else(|| Error::Storage("no image to copy".into()))?;
    let size = image.len();
    let done = s.last_id();
    link.send(&Frame::CopyBegin {
        epoch,
        pool_size: size,
    })?;
    let mut buf = Vec::new();
    const CHUNK: u64 = 1 << 20;
    let mut at = 0;
    while at < size {
        let len = CHUNK.min(size - at);
        // SAFETY: `at..at+len` is inside the image's mapping, which the store (locked here)
        // keeps mapped; no record is applied while the lock is held.
        let chunk = unsafe {
            std::slice::from_raw_parts(image.base().as_ptr().add(at as usize), len as usize)
        };
        if chunk.iter().any(|&b| b != 0) {
            buf.clear();
            proto::encode_record(&mut buf, epoch, done, true, [(at, chunk)].into_iter());
            link.send_encoded(&buf)?;
        }
        at += len;
    }
    link.send(&Frame::CopyDone {
        epoch,
        id: done,
        pool_size: size,
    })?;
    Ok(done)
}

fn wait_ack(link: &mut Link, id: u64) -> Result<()> {
    loop {
        match link.recv()? {
            Frame::Ack { id: got, .. } if got >= id => return Ok(()),
            Frame::Ack { .. } | Frame::Heartbeat { .. } => continue,
            Frame::Refused { reason } => return Err(Error::Refused(reason)),
            other => return Err(Error::Unexpected(format!("{other:?}"))),
        }
    }
}
