//! The primary's sequencing, sans I/O: [`PrimaryCore`] decides what a sync point does about
//! its mirror (ship it on the link, wait for the ack or not, flush here, record the loss of
//! the mirror first, block, fail), when a lost link is tried again, which ids records take,
//! and what a failed connection or an unanswered heartbeat means. It owns no socket, no
//! thread, no clock and no pool: time is an input (`now`, a [`Duration`] since an origin the
//! caller chooses), and each method returns what the caller must do.
//!
//! Two drivers run it: [`crate::MirrorPolicy`] (real TCP links, threads and clock) and the
//! deterministic simulation (`tests/sim.rs`: a simulated network and clock), so the
//! simulation exercises the primary's real decisions. What stays in each driver: the I/O
//! (handshakes, full copies, frames), the wait for a frame (with [`crate::policy::ack_step`]
//! deciding what each one means), the choice among a link's connections, the threads (the
//! background handshake, the heartbeats) and the membership's own calls.
//!
//! A sync point's course, as the drivers call it:
//!
//! 1. the link is down: [`PrimaryCore::attempt`] says whether to finish a handshake made in
//!    the background with a full copy, make the first attempt inline, start one in the
//!    background, or not try yet; a full copy's ids come from [`PrimaryCore::copy_from`] and
//!    [`PrimaryCore::take_id`], and its end is told by [`PrimaryCore::link_up`] or
//!    [`PrimaryCore::attempt_failed`];
//! 2. the link is up: [`PrimaryCore::ship`] gives the record's id, whether to flush the sync
//!    point here while it travels and whether to wait for the mirror's ack; once sent (and
//!    acknowledged, if waited for), [`PrimaryCore::shipped`] says how it is acknowledged;
//! 3. a connection failed under it: [`PrimaryCore::connection_failed`] (the link lost, or
//!    lost already, or replaced by one whose full copy holds the sync point);
//! 4. the mirror is away: [`PrimaryCore::away`] says what to flush, then whether to block,
//!    record the loss with the membership first ([`PrimaryCore::loss_answer`]), or
//!    acknowledge here alone.

use std::time::Duration;

use crate::policy::{Mode, WithoutMirror};

/// Longest wait between two attempts to reach a mirror that is away.
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// What [`PrimaryCore`] is told at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreConfig {
    /// The mode (not `local`: a primary without a mirror needs no core).
    pub mode: Mode,
    /// What to do while the mirror is away.
    pub without_mirror: WithoutMirror,
    /// Whether a membership records the loss of the mirror (without one, roles are static).
    pub membership: bool,
    /// The first wait after a failed attempt (doubled per failure, up to [`RETRY_MAX`]).
    pub retry: Duration,
    /// Silence on a connection after which a heartbeat is due.
    pub heartbeat: Duration,
}

/// What to do about a link that is down ([`PrimaryCore::attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// A handshake made in the background succeeded: send the full copy now (the sync
    /// point waits for it), then tell [`PrimaryCore::link_up`] or
    /// [`PrimaryCore::attempt_failed`].
    Copy,
    /// A handshake made in the background failed (the failure is counted here): go on
    /// without the mirror.
    Failed,
    /// The first attempt: connect and copy inline (so that a primary starts in sync), then
    /// tell [`PrimaryCore::link_up`] or [`PrimaryCore::attempt_failed`].
    First,
    /// An attempt is due: start a handshake in the background if none is under way, and tell
    /// [`PrimaryCore::attempt_started`] if one was started.
    Due,
    /// Not yet.
    NotYet,
}

/// How a record goes out ([`PrimaryCore::ship`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ship {
    /// Its id.
    pub id: u64,
    /// Flush the sync point's ranges here once the record is sent (while it travels).
    pub flush_point: bool,
    /// Wait for the mirror's ack of `id` before the sync point is acknowledged (else only
    /// read the acks that already came).
    pub wait_ack: bool,
}

/// How a sync point is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acknowledge {
    /// Fence (drain) locally before returning: the sync point's durability here is part of
    /// the acknowledgement (every mode but the `sync` family with the mirror in sync).
    pub fence: bool,
}

/// A connection failed while it carried a sync point ([`PrimaryCore::connection_failed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// The link was this one: it is lost now. Close every connection of it; flush the whole
    /// pool if `flush_pool` (what `sync` mode left to the mirror alone); then flush the sync
    /// point's ranges and go on with [`PrimaryCore::away`].
    Lost {
        /// Flush every line of the pool.
        flush_pool: bool,
    },
    /// A sibling connection lost the link first (and flushed the pool then): flush the sync
    /// point's ranges and go on with [`PrimaryCore::away`].
    AlreadyLost,
    /// A new link is up: its full copy, read after this record was encoded, was
    /// acknowledged: the sync point is at the mirror. Flush its ranges here too and
    /// acknowledge as said.
    Replaced(Acknowledge),
}

/// The mirror is away ([`PrimaryCore::away`]): first flush the whole pool if `flush_pool`,
/// then `then`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Away {
    /// Flush every line of the pool (sync mode's skipped flushes, the link lost between sync
    /// points).
    pub flush_pool: bool,
    /// What comes next.
    pub then: AwayThen,
}

/// The sync point's course while the mirror is away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwayThen {
    /// Acknowledge nothing until the link is back ([`WithoutMirror::Block`]): poll
    /// ([`PrimaryCore::blocked_poll`], then [`PrimaryCore::attempt`]) until
    /// [`PrimaryCore::link_up`], then [`PrimaryCore::unblocked`].
    Block,
    /// Record the loss with the membership and tell [`PrimaryCore::loss_answer`].
    RecordLoss,
    /// Flush the sync point's ranges here and acknowledge it here alone (with the fence).
    Local,
}

/// The membership's answer to the loss of the mirror ([`PrimaryCore::loss_answer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Recorded: flush the sync point's ranges here and acknowledge it here alone.
    Local,
    /// Not recorded: this primary may not acknowledge the sync point (fenced).
    Fenced,
}

/// A blocked sync point has its link back ([`PrimaryCore::unblocked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblocked {
    /// It was not shipped yet: ship it on the new link ([`PrimaryCore::ship`]).
    Ship,
    /// It was shipped on the lost link: the new link's full copy holds it, acknowledged by
    /// the mirror (and its ranges were flushed here when the link failed).
    Acknowledge(Acknowledge),
}

/// The primary's replication state and decisions, sans I/O (see the module documentation).
#[derive(Debug, Clone)]
pub struct PrimaryCore {
    config: CoreConfig,
    /// The link up and in sync, by number (each [`PrimaryCore::link_up`] a new one).
    link: Option<u64>,
    links: u64,
    /// The next record's id.
    next_id: u64,
    /// When the next attempt is due (None: never tried; the first one runs inline).
    next_attempt: Option<Duration>,
    /// Wait after the next failure.
    backoff: Duration,
    /// Local flushes skipped while the link was up (the `sync` family): every line of the
    /// pool must be flushed before anything is acknowledged without the mirror.
    unflushed: bool,
    /// The loss of the mirror is recorded by the membership (or there is none).
    loss_recorded: bool,
}

impl PrimaryCore {
    /// A primary that has not tried to reach its mirror yet.
    pub fn new(config: CoreConfig) -> PrimaryCore {
        PrimaryCore {
            config,
            link: None,
            links: 0,
            next_id: 1,
            next_attempt: None,
            backoff: config.retry,
            unflushed: false,
            loss_recorded: false,
        }
    }

    /// Whether a membership records the loss of the mirror (set once it is known).
    pub fn set_membership(&mut self, membership: bool) {
        self.config.membership = membership;
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The number of the link up and in sync, if any.
    pub fn link(&self) -> Option<u64> {
        self.link
    }

    /// The id the next record takes.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The highest id taken (what a heartbeat tells the mirror was shipped).
    pub fn last_id(&self) -> u64 {
        self.next_id.saturating_sub(1)
    }

    /// Whether the pool holds lines that only the mirror made durable.
    pub fn unflushed(&self) -> bool {
        self.unflushed
    }

    /// When the next attempt to reach the mirror is due (None: none made yet).
    pub fn next_attempt(&self) -> Option<Duration> {
        self.next_attempt
    }

    /// The wait after the next failed attempt.
    pub fn backoff(&self) -> Duration {
        self.backoff
    }

    /// The link is down: what to do about it now. `handshake` is the outcome of a handshake
    /// made in the background, if one finished (ok or not) and was not yet taken.
    pub fn attempt(&mut self, now: Duration, handshake: Option<bool>) -> Attempt {
        match handshake {
            Some(true) => Attempt::Copy,
            Some(false) => {
                self.attempt_failed(now);
                Attempt::Failed
            }
            None => match self.next_attempt {
                None => {
                    self.next_attempt = Some(now);
                    Attempt::First
                }
                Some(due) if now >= due => Attempt::Due,
                Some(_) => Attempt::NotYet,
            },
        }
    }

    /// A handshake was started in the background: the next one is not due until this one has
    /// had its chance.
    pub fn attempt_started(&mut self, now: Duration) {
        self.next_attempt = Some(now + self.backoff);
    }

    /// An attempt failed (its handshake or its full copy): the next is due after the backoff,
    /// which doubles.
    pub fn attempt_failed(&mut self, now: Duration) {
        self.next_attempt = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(RETRY_MAX);
    }

    /// A full copy begins on a link whose mirror holds records up to `mirror_last`: ids
    /// continue after them.
    pub fn copy_from(&mut self, mirror_last: u64) {
        self.next_id = self.next_id.max(mirror_last.saturating_add(1));
    }

    /// The next id (a full copy's record, its end).
    pub fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The mirror acknowledged the full copy: the link is up and in sync (tell the
    /// membership). Returns its number.
    pub fn link_up(&mut self) -> u64 {
        self.links += 1;
        self.link = Some(self.links);
        self.backoff = self.config.retry;
        self.loss_recorded = false;
        self.links
    }

    /// A sync point goes out as the next record on the link (the caller encodes it with this
    /// id, reading its bytes from the pool now, before any later id is taken).
    pub fn ship(&mut self) -> Ship {
        let mode = self.config.mode;
        if !mode.flushes_locally() {
            self.unflushed = true;
        }
        Ship {
            id: self.take_id(),
            flush_point: mode.flushes_locally(),
            wait_ack: mode.waits_for_ack(),
        }
    }

    /// The record was sent and, if waited for, acknowledged by the mirror: how the sync
    /// point is acknowledged.
    pub fn shipped(&self) -> Acknowledge {
        Acknowledge {
            fence: self.config.mode.flushes_locally(),
        }
    }

    /// The link numbered `link` failed while a connection of it carried a sync point (an
    /// error, a timeout, the end of the stream) at `now`.
    pub fn connection_failed(&mut self, link: u64, now: Duration) -> Failed {
        match self.link {
            Some(current) if current == link => Failed::Lost {
                flush_pool: self.lose_link(now),
            },
            Some(_) => Failed::Replaced(Acknowledge { fence: true }),
            None => Failed::AlreadyLost,
        }
    }

    /// The link is lost (its connections are to be closed) at `now`; returns whether to
    /// flush the whole pool now (what `sync` mode left to the mirror alone).
    pub fn lose_link(&mut self, now: Duration) -> bool {
        self.link = None;
        self.next_attempt = Some(now + self.backoff);
        std::mem::take(&mut self.unflushed)
    }

    /// A heartbeat went unanswered (or was answered wrong) at `now`: the link is lost, by a
    /// thread without the pool (what `sync` mode left unflushed is flushed by the next sync
    /// point, [`PrimaryCore::away`]). Returns whether to record the loss with the membership
    /// now (then tell [`PrimaryCore::heartbeat_loss_answer`]).
    pub fn heartbeat_lost(&mut self, now: Duration) -> bool {
        self.link = None;
        self.next_attempt = Some(now + self.backoff);
        self.config.without_mirror == WithoutMirror::Record && self.config.membership
    }

    /// Whether the loss recorded after a lost heartbeat was recorded (else the next sync
    /// point records it).
    pub fn heartbeat_loss_answer(&mut self, recorded: bool) {
        self.loss_recorded = recorded;
    }

    /// The mirror is away (no link, and no attempt brought it back): what the sync point
    /// does before it may be acknowledged here alone.
    pub fn away(&mut self) -> Away {
        let flush_pool = std::mem::take(&mut self.unflushed);
        let then = match self.config.without_mirror {
            WithoutMirror::Block => AwayThen::Block,
            WithoutMirror::Record if self.loss_recorded || !self.config.membership => {
                AwayThen::Local
            }
            // Broken on purpose (tests only): acknowledged here alone while the membership
            // still says the mirror is in sync, so the mirror may be promoted without it.
            WithoutMirror::Record if mnemo_pmem::mutant::active("repl.unrecorded_loss") => {
                AwayThen::Local
            }
            WithoutMirror::Record => AwayThen::RecordLoss,
        };
        Away { flush_pool, then }
    }

    /// The membership's answer to [`AwayThen::RecordLoss`].
    pub fn loss_answer(&mut self, recorded: bool) -> Verdict {
        if recorded {
            self.loss_recorded = true;
            Verdict::Local
        } else {
            Verdict::Fenced
        }
    }

    /// A blocked sync point polls for its mirror: while blocked, the backoff stays short
    /// (the mirror is all it waits for).
    pub fn blocked_poll(&mut self) {
        self.backoff = self.config.retry;
    }

    /// A blocked sync point has the link back; `shipped` says whether it went out on the
    /// lost link (then the new link's full copy holds it).
    pub fn unblocked(&self, shipped: bool) -> Unblocked {
        if shipped {
            Unblocked::Acknowledge(Acknowledge { fence: true })
        } else {
            Unblocked::Ship
        }
    }

    /// Whether a connection silent since `heard` needs a heartbeat at `now`.
    pub fn heartbeat_due(&self, heard: Duration, now: Duration) -> bool {
        now.saturating_sub(heard) >= self.config.heartbeat
    }

    /// Whether a sync point would do something for the link at `now` (the owner of an idle
    /// pool makes an empty one then): it is down and a handshake made in the background
    /// finished, or an attempt is due and none is under way. False when sync points block
    /// for the mirror anyway.
    pub fn wants_sync_point(&self, now: Duration, handshake_done: bool, connecting: bool) -> bool {
        if self.config.without_mirror == WithoutMirror::Block || self.link.is_some() {
            return false;
        }
        handshake_done
            || self
                .next_attempt
                .is_none_or(|due| now >= due && !connecting)
    }

    /// A clean close: whether every line of the pool must be flushed and fenced first (the
    /// `sync` family's skipped flushes); tell [`PrimaryCore::pool_flushed`] once it is.
    pub fn close(&self) -> bool {
        self.unflushed || !self.config.mode.flushes_locally()
    }

    /// Every line of the pool was flushed and fenced.
    pub fn pool_flushed(&mut self) {
        self.unflushed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core(mode: Mode, without: WithoutMirror) -> PrimaryCore {
        PrimaryCore::new(CoreConfig {
            mode,
            without_mirror: without,
            membership: true,
            retry: Duration::from_secs(1),
            heartbeat: Duration::from_millis(250),
        })
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn first_attempt_inline_then_backoff_doubles_to_its_bound() {
        let mut c = core(Mode::Sync, WithoutMirror::Record);
        assert_eq!(c.attempt(Duration::ZERO, None), Attempt::First);
        c.attempt_failed(Duration::ZERO);
        assert_eq!(c.attempt(S / 2, None), Attempt::NotYet);
        assert_eq!(c.attempt(S, None), Attempt::Due);
        c.attempt_started(S);
        assert_eq!(c.attempt(S * 2, None), Attempt::NotYet);
        assert_eq!(c.attempt(S * 3, Some(false)), Attempt::Failed);
        assert_eq!(c.next_attempt(), Some(S * 5));
        for _ in 0..10 {
            c.attempt_failed(S);
        }
        assert_eq!(c.backoff(), RETRY_MAX);
        assert_eq!(c.attempt(S * 100, Some(true)), Attempt::Copy);
        c.link_up();
        assert_eq!(c.backoff(), S);
    }

    #[test]
    fn sync_mode_leaves_flushes_to_the_mirror_until_the_link_is_lost() {
        let mut c = core(Mode::Sync, WithoutMirror::Record);
        c.copy_from(41);
        assert_eq!((c.take_id(), c.take_id()), (42, 43));
        let link = c.link_up();
        let ship = c.ship();
        assert_eq!(ship.id, 44);
        assert!(!ship.flush_point && ship.wait_ack);
        assert_eq!(c.shipped(), Acknowledge { fence: false });
        assert_eq!(
            c.connection_failed(link, S),
            Failed::Lost { flush_pool: true }
        );
        assert_eq!(c.connection_failed(link, S), Failed::AlreadyLost);
        let away = c.away();
        assert!(!away.flush_pool);
        assert_eq!(away.then, AwayThen::RecordLoss);
        assert_eq!(c.loss_answer(false), Verdict::Fenced);
        assert_eq!(c.away().then, AwayThen::RecordLoss);
        assert_eq!(c.loss_answer(true), Verdict::Local);
        assert_eq!(c.away().then, AwayThen::Local);
        // A new link must be recorded lost again.
        c.link_up();
        c.lose_link(S);
        assert_eq!(c.away().then, AwayThen::RecordLoss);
    }

    #[test]
    fn a_heartbeat_lost_leaves_the_pool_flush_to_the_next_sync_point() {
        let mut c = core(Mode::Sync, WithoutMirror::Record);
        c.link_up();
        c.ship();
        assert!(c.heartbeat_lost(S));
        c.heartbeat_loss_answer(true);
        let away = c.away();
        assert!(away.flush_pool);
        assert_eq!(away.then, AwayThen::Local);
        assert!(!c.close() || !Mode::Sync.flushes_locally());
    }

    #[test]
    fn a_replaced_link_holds_the_failed_sync_point() {
        let mut c = core(Mode::SyncFlush, WithoutMirror::Block);
        let old = c.link_up();
        let ship = c.ship();
        assert!(ship.flush_point && ship.wait_ack);
        assert_eq!(c.shipped(), Acknowledge { fence: true });
        assert_eq!(
            c.connection_failed(old, S),
            Failed::Lost { flush_pool: false }
        );
        assert_eq!(c.away().then, AwayThen::Block);
        c.link_up();
        assert_eq!(
            c.connection_failed(old, S),
            Failed::Replaced(Acknowledge { fence: true })
        );
        assert_eq!(c.unblocked(false), Unblocked::Ship);
        assert!(!c.wants_sync_point(S, true, false));
    }

    #[test]
    fn an_idle_pool_wants_a_sync_point_when_an_attempt_is_due() {
        let mut c = core(Mode::Async, WithoutMirror::Record);
        assert!(c.wants_sync_point(Duration::ZERO, false, false));
        c.attempt(Duration::ZERO, None);
        c.attempt_failed(Duration::ZERO);
        assert!(!c.wants_sync_point(S / 2, false, false));
        assert!(c.wants_sync_point(S, false, false));
        assert!(!c.wants_sync_point(S, false, true));
        assert!(c.wants_sync_point(S / 2, true, true));
        assert!(c.heartbeat_due(Duration::ZERO, S / 4));
        assert!(!c.heartbeat_due(S, S + S / 8));
    }
}
