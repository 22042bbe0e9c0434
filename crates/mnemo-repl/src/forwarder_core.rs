//! The backup forwarder's sessions, sans I/O: [`ForwarderCore`] decides when a session with
//! a backup is due (the doubling backoff after a failure, none while the mirror waits for its
//! first copy), what the mirror's image must be for a full copy to be taken, what each frame
//! from the backup means (the copy's acknowledgement, then the records'), and when a session
//! ends. It owns no socket, no thread, no clock, no store and no queue: time is an input
//! (`now`, a [`Duration`] since an origin the caller chooses), and each method returns what
//! the caller must do.
//!
//! Two drivers run it: the forwarder's thread in [`crate::backup`] (a TCP link, the real
//! store's lock, the queue the mirror's links push records to, the real clock) and the
//! deterministic simulation (`tests/sim.rs`). What stays in each driver: the handshake, the
//! copy and the records on the wire, the queue (its lag limit, `syncsec`'s stall, the
//! catch-ups in bulk: the simulation has none of them), and the mirror's signal that its image
//! was replaced by a full copy from the primary.
//!
//! A session's course: [`ForwarderCore::due`] (the caller checks that the mirror's image is
//! complete, else [`ForwarderCore::ended`] with [`Ended::NoCopyYet`]), [`ForwarderCore::start`]
//! and the handshake, [`ForwarderCore::copy`] under the mirror's lock (the records logged
//! from then on are queued), the copy sent, then each frame from the backup through
//! [`ForwarderCore::reply`] ([`Reply::InSync`]: send the queue, then every record as it is
//! logged), until [`ForwarderCore::ended`].

use std::time::Duration;

use crate::error::{Error, Result};
use crate::proto::Frame;

/// The first wait after a failed session (and after one ended for a new full copy).
pub const RETRY_FIRST: Duration = Duration::from_millis(200);

/// The longest wait between two sessions.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// Where a forwarder's session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No session: the next is due at [`ForwarderCore::next_try`].
    Idle,
    /// Connecting and authenticating.
    Linking,
    /// The full copy (holding every record up to `done`) is sent; its acknowledgement is
    /// awaited, the records logged since are queued.
    Copying {
        /// The id the copy holds.
        done: u64,
    },
    /// The backup holds the copy: every record goes out as it is logged.
    Streaming,
}

/// How a session ended ([`ForwarderCore::ended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// On purpose: the backup must catch up with a new full copy (its queue overflowed, or
    /// the mirror's image was replaced by a full copy from the primary).
    Recopy,
    /// The mirror holds no complete copy yet: nothing to give (no failure).
    NoCopyYet,
    /// The link failed (connect, handshake, a frame refused or unexpected, the stream's end).
    Failed,
}

/// What a frame from the backup means ([`ForwarderCore::reply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Nothing to do (the backup is alive).
    Alive,
    /// The backup acknowledged the full copy holding every record up to this id: send the
    /// records queued since, then each as it is logged.
    InSync(u64),
    /// The backup acknowledged every record up to this id.
    Acked(u64),
}

/// One backup's forwarder, sans I/O (see the module documentation).
#[derive(Debug, Clone)]
pub struct ForwarderCore {
    phase: Phase,
    backoff: Duration,
    next_try: Duration,
}

impl Default for ForwarderCore {
    fn default() -> ForwarderCore {
        ForwarderCore::new()
    }
}

impl ForwarderCore {
    /// A forwarder whose first session is due at once.
    pub fn new() -> ForwarderCore {
        ForwarderCore {
            phase: Phase::Idle,
            backoff: RETRY_FIRST,
            next_try: Duration::ZERO,
        }
    }

    /// Where the session stands.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// When the next session is due (while idle).
    pub fn next_try(&self) -> Duration {
        self.next_try
    }

    /// Whether a session is due at `now` (then, if the mirror's image is complete,
    /// [`ForwarderCore::start`] one; else tell [`ForwarderCore::ended`] [`Ended::NoCopyYet`]).
    pub fn due(&self, now: Duration) -> bool {
        self.phase == Phase::Idle && now >= self.next_try
    }

    /// A session starts: connect and authenticate.
    pub fn start(&mut self) {
        self.phase = Phase::Linking;
    }

    /// The backup welcomed the session; under the mirror's lock, its image is `complete` and
    /// holds every record up to `last_id`: the id the full copy holds (copy the image now,
    /// under that lock; from now on every record the mirror logs is queued), or an error if
    /// there is no complete image to copy (a full copy from the primary began since the
    /// session started: [`Ended::NoCopyYet`]).
    pub fn copy(&mut self, complete: bool, last_id: u64) -> Result<u64> {
        if !complete {
            return Err(Error::Storage(
                "the mirror holds no complete copy yet".into(),
            ));
        }
        self.phase = Phase::Copying { done: last_id };
        Ok(last_id)
    }

    /// A frame from the backup, once the copy is sent: what it means. An error ends the
    /// session ([`Ended::Failed`]).
    pub fn reply(&mut self, frame: Frame) -> Result<Reply> {
        match (self.phase, frame) {
            (_, Frame::Refused { reason }) => Err(Error::Refused(reason)),
            (Phase::Copying { done }, Frame::Ack { id, .. }) if id >= done => {
                self.phase = Phase::Streaming;
                Ok(Reply::InSync(done))
            }
            (Phase::Streaming, Frame::Ack { id, .. }) => Ok(Reply::Acked(id)),
            // The backup is busy (its own store's lock is held), or, with backups of its
            // own, says where they stand (not ours to show): alive all the same.
            (
                Phase::Copying { .. } | Phase::Streaming,
                Frame::Ack { .. } | Frame::Heartbeat { .. } | Frame::Status { .. },
            ) => Ok(Reply::Alive),
            (_, other) => Err(Error::Unexpected(format!("{other:?}"))),
        }
    }

    /// The session ended at `now`, `how`: how long to wait before the next one (a failure
    /// doubles the wait, up to [`RETRY_MAX`]; a session ended for a new copy waits
    /// [`RETRY_FIRST`]; waiting for the mirror's first copy keeps the wait).
    pub fn ended(&mut self, now: Duration, how: Ended) -> Duration {
        match how {
            Ended::Recopy => self.backoff = RETRY_FIRST,
            Ended::NoCopyYet => {}
            Ended::Failed => self.backoff = (self.backoff * 2).min(RETRY_MAX),
        }
        self.phase = Phase::Idle;
        self.next_try = now + self.backoff;
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_session_copies_then_streams() {
        let mut f = ForwarderCore::new();
        assert!(f.due(Duration::ZERO));
        f.start();
        assert!(!f.due(MS * 1000));
        assert!(f.copy(false, 3).is_err());
        assert_eq!(f.copy(true, 7).ok(), Some(7));
        assert_eq!(f.phase(), Phase::Copying { done: 7 });
        assert_eq!(
            f.reply(Frame::Heartbeat { epoch: 1, id: 0 }).ok(),
            Some(Reply::Alive)
        );
        assert_eq!(
            f.reply(Frame::Ack { epoch: 1, id: 6 }).ok(),
            Some(Reply::Alive)
        );
        assert_eq!(
            f.reply(Frame::Ack { epoch: 1, id: 7 }).ok(),
            Some(Reply::InSync(7))
        );
        assert_eq!(
            f.reply(Frame::Ack { epoch: 1, id: 9 }).ok(),
            Some(Reply::Acked(9))
        );
        assert!(f
            .reply(Frame::Refused {
                reason: "no".into()
            })
            .is_err());
        assert!(f
            .reply(Frame::CopyBegin {
                epoch: 1,
                pool_size: 0
            })
            .is_err());
    }

    #[test]
    fn failures_double_the_wait_and_a_recopy_resets_it() {
        let mut f = ForwarderCore::new();
        f.start();
        assert_eq!(f.ended(Duration::ZERO, Ended::Failed), MS * 400);
        assert!(!f.due(MS * 399));
        assert!(f.due(MS * 400));
        assert_eq!(f.ended(MS * 400, Ended::NoCopyYet), MS * 400);
        for _ in 0..10 {
            f.ended(Duration::ZERO, Ended::Failed);
        }
        assert_eq!(f.ended(Duration::ZERO, Ended::Failed), RETRY_MAX);
        assert_eq!(f.ended(MS, Ended::Recopy), RETRY_FIRST);
        assert_eq!(f.next_try(), MS * 201);
    }
}
