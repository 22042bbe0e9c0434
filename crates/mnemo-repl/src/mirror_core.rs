//! The mirror's link loop, sans I/O: [`LinkCore`] decides, for one connection of a primary's
//! link, what each frame it receives means (a sync-point record to log in its turn, a step of
//! a full copy, a heartbeat to answer, a frame to refuse), whether the link may still change
//! the image (its epoch and its link number against the store's), when a record of a session
//! of several connections may be logged, and which frames go back (the Ack, heartbeats while
//! the primary waits, a Status when due). It owns no socket, no thread, no clock and no store:
//! time is an input (`now`, a [`Duration`] since an origin the caller chooses), the store is
//! seen through a [`StoreView`] the caller reads under the store's lock, and each method
//! returns what the caller must do.
//!
//! Two drivers run it: [`crate::mirror::serve_link`] (a TCP connection on a thread of its own,
//! the real `MirrorStore` under its mutex, the backups' forwarders, the real clock) and the
//! deterministic simulation (`tests/sim.rs`: simulated connections and clock, real stores).
//! What stays in each driver: the handshake's I/O, reading and writing frames, taking the
//! store's lock (and waiting for it), waiting for a record's turn, the store's own calls, and
//! the backups.
//!
//! A frame's course, as the drivers call it ([`LinkCore::frame`] first):
//!
//! * [`Serve::Record`]: take the store's lock (while it is busy, send
//!   [`LinkCore::busy_beat`] every [`BUSY_HEARTBEAT`]); [`LinkCore::turn`] says whether the
//!   record may be logged now, must wait for the ids before it (wait, with the same heartbeat,
//!   and ask again when the store changes), or is refused; once logged
//!   (`MirrorStore::log_record`, durable on return) and handed to the backups, send
//!   [`LinkCore::ack`], apply it (`MirrorStore::apply`), then send a Status if
//!   [`LinkCore::status_due`];
//! * [`Serve::CopyRanges`]: under the lock, [`LinkCore::admit`], copy the ranges, then send
//!   [`LinkCore::copy_beat`] if one is due;
//! * [`Serve::CopyBegin`]: under the lock, [`LinkCore::admit`], begin the copy (the backups
//!   are sent back to a full copy whatever its outcome), then send [`LinkCore::copy_begun`];
//! * [`Serve::CopyDone`]: under the lock, [`LinkCore::admit`], finish the copy (with a
//!   heartbeat every [`COPY_HEARTBEAT`] meanwhile), then send [`LinkCore::ack`] and a Status
//!   if due;
//! * [`Serve::Heartbeat`]: answer with [`LinkCore::heartbeat_answer`], from the store if its
//!   lock is free (then after a Status if due), else from the link (the answer proves this
//!   process alive, and does not wait for a store a backup's copy holds);
//! * [`Serve::Refuse`]: send Refused with the reason and end the connection (as any error of
//!   a step above does).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::mirror::{admit_epoch, admit_link, record_turn, Turn};
use crate::proto::{Frame, Range};

/// Deliberately broken variants of the link loop, caught by the deterministic simulation
/// (`tests/sim.rs`), which drives this core.
pub const MUTANTS_LINK: &[&str] = &[
    // A full copy's steps (its begin, its ranges, its end) are not fenced by the link's epoch
    // and number ([`LinkCore::admit_copy`]): a deposed or superseded primary's copy replaces
    // the image.
    "repl.copy_unfenced",
];

/// While a record waits for the store (a backup's full copy holds it, about a second per GiB)
/// or for its turn, the primary waiting for its ack is told every this long that this mirror
/// is alive, so that it waits instead of declaring the link lost.
pub const BUSY_HEARTBEAT: Duration = Duration::from_millis(500);

/// A version 2 primary is told where the backups stand at most this often (after an Ack,
/// and before the answer to a heartbeat).
pub const STATUS_EVERY: Duration = Duration::from_millis(100);

/// While a full copy arrives, the primary waiting for its acknowledgement is told this often
/// (after a copy record, and while the copy is made durable) that this mirror is alive and
/// progressing: the copy may take long over a slow link, a partition must not.
pub const COPY_HEARTBEAT: Duration = Duration::from_millis(250);

/// What a link's decisions read of the store (under its lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreView {
    /// The highest epoch seen (persisted).
    pub epoch: u64,
    /// The highest record id held durably (logged or checkpointed).
    pub last_id: u64,
    /// Whether the image holds a complete copy.
    pub complete: bool,
    /// The number of the newest link accepted.
    pub newest_link: u64,
    /// Connections of the newest link's session.
    pub session_conns: u64,
}

/// What a frame asks of the driver ([`LinkCore::frame`]).
#[derive(Debug)]
pub enum Serve {
    /// A sync-point record: log it in its turn, hand it to the backups, ack, apply.
    Record {
        /// Its id.
        id: u64,
        /// Its ranges.
        ranges: Vec<Range>,
    },
    /// Ranges of a full copy (not logged).
    CopyRanges {
        /// The copy record's id.
        id: u64,
        /// Its ranges.
        ranges: Vec<Range>,
    },
    /// A full copy of a pool of `pool_size` bytes begins.
    CopyBegin {
        /// The pool's size.
        pool_size: u64,
    },
    /// The full copy is complete at record `id`.
    CopyDone {
        /// Its last id.
        id: u64,
        /// The pool's size.
        pool_size: u64,
    },
    /// A heartbeat (the primary's highest id shipped): answer it.
    Heartbeat {
        /// The id it carries.
        id: u64,
    },
    /// Refuse the frame and end the connection.
    Refuse(Error),
}

/// Whether a record may be logged now ([`LinkCore::turn`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Go {
    /// Log it now.
    Now,
    /// An earlier id of the session is not held yet: wait (with [`LinkCore::busy_beat`] every
    /// [`BUSY_HEARTBEAT`]) until the store changes, then ask again.
    Wait,
}

/// One connection of a primary's link, past its handshake, sans I/O (see the module
/// documentation).
#[derive(Debug, Clone)]
pub struct LinkCore {
    epoch: u64,
    number: u64,
    version: u16,
    copying: bool,
    /// When a Status was last sent (version 2 links with backups).
    status_at: Option<Duration>,
    /// When a heartbeat was last sent during a copy.
    beat_at: Duration,
}

impl LinkCore {
    /// A connection accepted at `now` by the handshake: the primary's epoch, the link's
    /// number (`MirrorStore::open_link` or `join_session`) and the protocol's version.
    pub fn new(epoch: u64, number: u64, version: u16, now: Duration) -> LinkCore {
        LinkCore {
            epoch,
            number,
            version,
            copying: false,
            status_at: None,
            beat_at: now,
        }
    }

    /// The link's epoch (the primary's, as its Auth told).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The link's number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Whether a full copy is under way on this connection.
    pub fn copying(&self) -> bool {
        self.copying
    }

    /// A frame arrived on the connection: what to do with it.
    pub fn frame(&mut self, frame: Frame) -> Serve {
        let epoch = self.epoch;
        match frame {
            Frame::Record {
                epoch: e,
                id,
                copy,
                ranges,
            } => {
                if e != epoch {
                    Serve::Refuse(Error::Refused(format!(
                        "record of epoch {e} on a link of epoch {epoch}"
                    )))
                } else if !copy {
                    Serve::Record { id, ranges }
                } else if self.copying {
                    Serve::CopyRanges { id, ranges }
                } else {
                    Serve::Refuse(Error::Unexpected("copy record outside a copy".into()))
                }
            }
            Frame::Heartbeat { id, .. } => Serve::Heartbeat { id },
            Frame::CopyBegin {
                epoch: e,
                pool_size,
            } if e == epoch && !self.copying => {
                self.copying = true;
                Serve::CopyBegin { pool_size }
            }
            Frame::CopyDone {
                epoch: e,
                id,
                pool_size,
            } if e == epoch && self.copying => {
                self.copying = false;
                Serve::CopyDone { id, pool_size }
            }
            other => Serve::Refuse(Error::Unexpected(format!("{other:?}"))),
        }
    }

    /// Whether this link may change the image now (checked under the store's lock for every
    /// record and every step of a full copy): no newer epoch seen since its handshake (a
    /// promotion, a newer primary), and no newer link ([`admit_epoch`], [`admit_link`]). (The
    /// copy steps were fenced by the link only until the simulation found a deposed primary's
    /// full copy, begun before the mirror's takeover, replacing the image between the
    /// takeover and the exec.)
    pub fn admit(&self, store: &StoreView) -> Result<()> {
        admit_epoch(self.epoch, store.epoch)?;
        admit_link(self.number, store.newest_link)
    }

    /// [`LinkCore::admit`] for a step of a full copy (its begin, its ranges, its end).
    pub fn admit_copy(&self, store: &StoreView) -> Result<()> {
        if mnemo_pmem::mutant::active("repl.copy_unfenced") {
            // Broken on purpose (tests only): a full copy's steps are not fenced, as they
            // were before the simulation found a deposed primary's copy replacing the image
            // of a mirror that had taken over.
            return Ok(());
        }
        self.admit(store)
    }

    /// Whether record `id` (a [`Serve::Record`]) may be logged now, under the store's lock:
    /// refused if the link may no longer change the image; in a session of several
    /// connections, only once every id before it is held ([`record_turn`]; with one
    /// connection, TCP keeps the records in order, and a stale id is refused by
    /// `MirrorStore::log_record`).
    pub fn turn(&self, store: &StoreView, id: u64) -> Result<Go> {
        self.admit(store)?;
        if store.session_conns <= 1 || record_turn(store.last_id, id) != Turn::Wait {
            Ok(Go::Now)
        } else {
            Ok(Go::Wait)
        }
    }

    /// The heartbeat that tells the primary, waiting for the ack of `id`, that this mirror is
    /// alive while the record waits (for the store's lock, for its turn, for a backup).
    pub fn busy_beat(&self, id: u64) -> Frame {
        Frame::Heartbeat {
            epoch: self.epoch,
            id: id.saturating_sub(1),
        }
    }

    /// The acknowledgement of record `id` (durable here: sent only once it is logged) or of a
    /// full copy ending at `id` (once it is made durable).
    pub fn ack(&self, id: u64) -> Frame {
        Frame::Ack {
            epoch: self.epoch,
            id,
        }
    }

    /// The answer to a heartbeat: where this mirror stands (`store`, if its lock was free),
    /// so that a primary whose epoch is older learns on an idle link that it was deposed; or,
    /// while the store is busy, the link's own epoch and the heartbeat's `id`.
    pub fn heartbeat_answer(&self, store: Option<&StoreView>, id: u64) -> Frame {
        match store {
            Some(s) => Frame::Heartbeat {
                epoch: s.epoch,
                id: s.last_id,
            },
            None => Frame::Heartbeat {
                epoch: self.epoch,
                id,
            },
        }
    }

    /// Whether to send the primary a Status (where the backups stand) at `now`: to a version
    /// 2 primary only, with backups, at most every [`STATUS_EVERY`] unless `force` (after a
    /// copy, before a heartbeat's answer). If true, the caller sends one now.
    pub fn status_due(&mut self, now: Duration, backups: bool, force: bool) -> bool {
        if self.version < 2 || !backups {
            return false;
        }
        let due = force
            || self
                .status_at
                .is_none_or(|at| now.saturating_sub(at) >= STATUS_EVERY);
        if due {
            self.status_at = Some(now);
        }
        due
    }

    /// A full copy began at `now`: the heartbeat that tells the primary so.
    pub fn copy_begun(&mut self, now: Duration) -> Frame {
        self.beat_at = now;
        Frame::Heartbeat {
            epoch: self.epoch,
            id: 0,
        }
    }

    /// During a copy, after its record `id`: a heartbeat to the waiting primary, if one is
    /// due at `now`.
    pub fn copy_beat(&mut self, now: Duration, id: u64) -> Option<Frame> {
        if now.saturating_sub(self.beat_at) < COPY_HEARTBEAT {
            return None;
        }
        self.beat_at = now;
        Some(Frame::Heartbeat {
            epoch: self.epoch,
            id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn view(epoch: u64, last_id: u64, newest_link: u64, session_conns: u64) -> StoreView {
        StoreView {
            epoch,
            last_id,
            complete: true,
            newest_link,
            session_conns,
        }
    }

    fn record(epoch: u64, id: u64, copy: bool) -> Frame {
        Frame::Record {
            epoch,
            id,
            copy,
            ranges: Vec::new(),
        }
    }

    #[test]
    fn a_copy_is_begun_ranged_and_done_in_order() {
        let mut c = LinkCore::new(3, 1, 3, Duration::ZERO);
        assert!(matches!(c.frame(record(3, 5, true)), Serve::Refuse(_)));
        assert!(matches!(
            c.frame(Frame::CopyDone {
                epoch: 3,
                id: 5,
                pool_size: 64
            }),
            Serve::Refuse(_)
        ));
        let begin = Frame::CopyBegin {
            epoch: 3,
            pool_size: 64,
        };
        assert!(matches!(c.frame(begin.clone()), Serve::CopyBegin { .. }));
        assert!(c.copying());
        assert!(matches!(c.frame(begin), Serve::Refuse(_)));
        assert_eq!(c.copy_begun(MS), Frame::Heartbeat { epoch: 3, id: 0 });
        assert!(matches!(
            c.frame(record(3, 5, true)),
            Serve::CopyRanges { id: 5, .. }
        ));
        assert_eq!(c.copy_beat(MS * 100, 5), None);
        assert_eq!(
            c.copy_beat(MS * 251, 5),
            Some(Frame::Heartbeat { epoch: 3, id: 5 })
        );
        assert_eq!(c.copy_beat(MS * 300, 5), None);
        assert!(matches!(
            c.frame(Frame::CopyDone {
                epoch: 3,
                id: 5,
                pool_size: 64
            }),
            Serve::CopyDone { id: 5, .. }
        ));
        assert!(!c.copying());
        assert_eq!(c.ack(5), Frame::Ack { epoch: 3, id: 5 });
    }

    #[test]
    fn records_of_another_epoch_or_link_are_refused() {
        let mut c = LinkCore::new(3, 2, 3, Duration::ZERO);
        assert!(matches!(c.frame(record(2, 7, false)), Serve::Refuse(_)));
        assert!(matches!(
            c.frame(record(3, 7, false)),
            Serve::Record { id: 7, .. }
        ));
        assert_eq!(c.turn(&view(3, 6, 2, 1), 7).ok(), Some(Go::Now));
        // A newer epoch seen (a promotion), a newer link accepted: refused.
        assert!(c.turn(&view(4, 6, 2, 1), 7).is_err());
        assert!(c.turn(&view(3, 6, 3, 1), 7).is_err());
        assert!(c.admit_copy(&view(3, 6, 3, 1)).is_err());
        assert!(matches!(
            c.frame(Frame::Ack { epoch: 3, id: 1 }),
            Serve::Refuse(_)
        ));
    }

    #[test]
    fn a_session_logs_its_records_in_turn() {
        let c = LinkCore::new(1, 1, 3, Duration::ZERO);
        assert_eq!(c.turn(&view(1, 4, 1, 2), 5).ok(), Some(Go::Now));
        assert_eq!(c.turn(&view(1, 4, 1, 2), 6).ok(), Some(Go::Wait));
        // One connection: TCP keeps the order, the store refuses a stale id itself.
        assert_eq!(c.turn(&view(1, 4, 1, 1), 6).ok(), Some(Go::Now));
        assert_eq!(c.busy_beat(6), Frame::Heartbeat { epoch: 1, id: 5 });
    }

    #[test]
    fn heartbeats_and_status() {
        let mut c = LinkCore::new(2, 1, 2, Duration::ZERO);
        assert_eq!(
            c.heartbeat_answer(Some(&view(5, 9, 1, 1)), 3),
            Frame::Heartbeat { epoch: 5, id: 9 }
        );
        assert_eq!(
            c.heartbeat_answer(None, 3),
            Frame::Heartbeat { epoch: 2, id: 3 }
        );
        assert!(!c.status_due(Duration::ZERO, false, true));
        assert!(c.status_due(Duration::ZERO, true, false));
        assert!(!c.status_due(MS * 50, true, false));
        assert!(c.status_due(MS * 50, true, true));
        assert!(c.status_due(MS * 150, true, false));
        let mut v1 = LinkCore::new(2, 1, 1, Duration::ZERO);
        assert!(!v1.status_due(Duration::ZERO, true, true));
    }
}
