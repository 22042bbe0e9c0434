//! The primary's side: a [`SyncPolicy`] that ships every sync point to a mirror.
//!
//! Each sync point becomes one record (epoch, id, its ranges with their bytes read from the
//! pool) that the mirror applies whole or not at all. Modes (Mojim's, section 3):
//!
//! | mode | local flush and fence | ship | wait for the mirror's ack |
//! |---|---|---|---|
//! | `local` | yes | no | no |
//! | `async` | yes | yes | no |
//! | `sync` | no | yes | yes |
//! | `syncflush` | yes (while the record travels) | yes | yes |
//! | `syncdisk` | no | yes | yes (the mirror's image on a disk file) |
//! | `syncsec`, `syncseceth` | no | yes | yes (held while a backup lags past the threshold) |
//!
//! A link is one or several connections ([`MirrorConfig::connections`], Mojim's queues):
//! concurrent sync points go out on different connections at once, each record keeping its
//! unique, increasing id, and the mirror logs them in id order whatever connection each
//! took, so its ack of id k means every id up to k is durable there.
//!
//! On first use (and after a lost link, at most once per retry interval) the policy connects,
//! authenticates, and sends a full copy of the pool before any record, so the mirror's image
//! is whole before it acknowledges anything. When the link fails in a mode that skips the
//! local flush, every line of the pool is flushed at once, so what the mirror acknowledged
//! is durable here too, and the policy carries on locally (flush and fence) until a link
//! comes back. A sync point is therefore durable on return in every mode: at the mirror, or
//! here, or both.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use mnemo_pmem::error::MediaError;
use mnemo_pmem::{Media, SyncPoint, SyncPolicy};

use crate::auth::{self, Secret};
use crate::error::{Error, Result};
use crate::link::Link;
use crate::primary::{Attempt, AwayThen, CoreConfig, Failed, PrimaryCore, Unblocked, Verdict};
use crate::proto::{self, BackupStatus, Frame, LinkParams, Role, VERSION};

/// Deliberately broken variants of this crate (compiled in only with mnemo-pmem's `mutants`
/// feature, in test builds), each caught by `tests/mirror.rs`.
pub const MUTANTS: &[&str] = &[
    // A record carries the sync point's named ranges but not its staged ones.
    "repl.ship_named_only",
    // A new link skips the full copy: the mirror lacks what was written before it.
    "repl.skip_copy",
];

/// Deliberately broken variants caught by the deterministic simulation (`tests/sim.rs`),
/// not by the loopback tests: each needs a schedule of faults to show.
pub const MUTANTS_SIM: &[&str] = &[
    // A sync mode acknowledges a sync point before the mirror's ack ([`Mode::waits_for_ack`]).
    "repl.ack_before_mirror",
    // The mirror is away and the primary acknowledges here alone without recording the loss
    // with the membership first ([`crate::primary::PrimaryCore::away`]): the mirror, still
    // said to be in sync, may be promoted without those sync points.
    "repl.unrecorded_loss",
    // The mirror takes a record cut short by the end of its link, without its end mark and
    // checksum ([`crate::proto::decode_at_eof`]).
    "repl.apply_torn",
    // The mirror admits a primary, or a record, of an epoch older than the highest it has
    // seen ([`crate::mirror::admit_epoch`]).
    "repl.accept_stale_epoch",
    // The mirror lets any link change its image, not only the newest one
    // ([`crate::mirror::admit_link`]): a dead process's copy lands after its successor's.
    "repl.any_link",
];

/// Deliberately broken variants caught by the tests of several connections per link
/// (`tests/queues.rs`, real TCP through a proxy that freezes one connection).
pub const MUTANTS_QUEUES: &[&str] = &[
    // The mirror logs and acknowledges a session's records as they arrive, not in id order
    // ([`crate::mirror::record_turn`]): an ack of k while an older id is not durable.
    "repl.apply_unordered",
];

/// How the primary replicates (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No mirror.
    Local,
    /// Flush locally, ship, do not wait.
    Async,
    /// Ship and wait for the mirror; no local flush.
    Sync,
    /// Ship, flush locally meanwhile, wait for the mirror.
    SyncFlush,
    /// Mojim's M-syncdisk: `sync` on the primary, and the mirror keeps its data area (the
    /// image) in an ordinary disk file, its log in its pool: the mirror refuses a `syncdisk`
    /// primary while its image is on a memory file system (`mnemo mirror serve
    /// --disk-image`).
    SyncDisk,
    /// `sync` with backups behind the mirror, Mojim's M-syncsec: the primary behaves as in
    /// `sync` and tells its mirror the threshold ([`MirrorConfig::backup_stall`]); the
    /// mirror (`--backup`) forwards in the background and holds its acknowledgements back
    /// while a backup lags past it.
    SyncSec,
    /// Mojim's M-syncseceth: `syncsec` for backups behind a slower, rate-limited link. The
    /// primary tells a larger default threshold (40 MiB, Mojim's SECONDARY_TIER_THRESH,
    /// against 4 MiB), and the mirror sends each backup's full copy (its first, and every
    /// catch-up in bulk) from a snapshot of its image taken under its lock, instead of
    /// holding its lock (and so the primary) for the whole transfer over the slow link.
    SyncSecEth,
}

impl Mode {
    const ALL: [Mode; 7] = [
        Mode::Local,
        Mode::Async,
        Mode::Sync,
        Mode::SyncFlush,
        Mode::SyncDisk,
        Mode::SyncSec,
        Mode::SyncSecEth,
    ];

    /// The mode's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Local => "local",
            Mode::Async => "async",
            Mode::Sync => "sync",
            Mode::SyncFlush => "syncflush",
            Mode::SyncDisk => "syncdisk",
            Mode::SyncSec => "syncsec",
            Mode::SyncSecEth => "syncseceth",
        }
    }

    /// Parse a name.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The mode's number on the wire (Auth, version 2) and in a mirror's state file.
    pub fn code(self) -> u8 {
        match self {
            Mode::Local => 0,
            Mode::Async => 1,
            Mode::Sync => 2,
            Mode::SyncFlush => 3,
            Mode::SyncDisk => 4,
            Mode::SyncSec => 5,
            Mode::SyncSecEth => 6,
        }
    }

    /// The mode of a [`Mode::code`].
    pub fn from_code(code: u8) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.code() == code)
    }

    /// Whether a sync point waits for the mirror's acknowledgement before it is acknowledged
    /// here (every mode that ships but `async`).
    pub fn waits_for_ack(self) -> bool {
        if mnemo_pmem::mutant::active("repl.ack_before_mirror") {
            // Broken on purpose (tests only): acknowledged before the mirror's ack.
            return false;
        }
        !matches!(self, Mode::Local | Mode::Async)
    }

    /// Whether sync points are made durable here too (all but the `sync` family: `sync`,
    /// `syncdisk`, `syncsec`, `syncseceth`, which rely on the mirror alone while it is in
    /// sync).
    pub fn flushes_locally(self) -> bool {
        !matches!(
            self,
            Mode::Sync | Mode::SyncDisk | Mode::SyncSec | Mode::SyncSecEth
        )
    }

    /// Whether the mode has backups whose lag holds the mirror's acknowledgements
    /// (`syncsec`, `syncseceth`).
    pub fn has_backup_tier(self) -> bool {
        matches!(self, Mode::SyncSec | Mode::SyncSecEth)
    }

    /// The longest hold a primary of this mode tells its mirror unless told otherwise: 1 s
    /// for `syncsec`; 10 s for `syncseceth`, where a slow link's queue (bufferbloat) makes a
    /// lost packet's retransmission wait a second or more. The mirror sends the waiting
    /// primary a heartbeat every 500 ms of a hold, so a hold may outlast the link's timeout.
    pub fn default_backup_stall_max(self) -> Duration {
        match self {
            Mode::SyncSecEth => Duration::from_secs(10),
            _ => crate::backup::STALL_MAX_DEFAULT,
        }
    }

    /// The threshold a primary of this mode tells its mirror unless told otherwise: 4 MiB
    /// for `syncsec` (a backup on a fast link drains that in milliseconds), 40 MiB for
    /// `syncseceth` (Mojim's SECONDARY_TIER_THRESH: slack for a slow link), 0 (never) for
    /// the others.
    pub fn default_backup_stall(self) -> u64 {
        match self {
            Mode::SyncSec => 4 << 20,
            Mode::SyncSecEth => 40 << 20,
            _ => 0,
        }
    }
}

/// What a primary does when its mirror is lost (Patroni's `synchronous_mode` and
/// `synchronous_mode_strict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithoutMirror {
    /// Go on durably here, after the [`Membership`] recorded that this primary runs without
    /// its mirror (so that the mirror is not promoted over writes it never saw).
    Record,
    /// Acknowledge nothing until the mirror is back in sync: sync points wait.
    Block,
}

/// Where a primary records whether its mirror is in sync (etcd, in `mnemo-repl-etcd`), and
/// learns that it was deposed. Without one, roles are static.
pub trait Membership: Send + Sync + std::fmt::Debug {
    /// The mirror holds a full copy and acknowledges every sync point from here on. May
    /// return before the fact is recorded (recording it late only delays a promotion).
    fn mirror_in_sync(&self);
    /// The mirror is lost: record that this primary runs without it, and return only once
    /// that is durable. An error (deposed, or the record cannot be made) means this primary
    /// must not acknowledge anything more.
    fn mirror_lost(&self) -> std::result::Result<(), String>;
    /// Whether this primary may still acknowledge (false once it learned it was deposed).
    fn may_acknowledge(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Where and how to replicate.
#[derive(Debug, Clone)]
pub struct MirrorConfig {
    /// The mirror's address.
    pub addr: SocketAddr,
    /// The shared secret.
    pub secret: Secret,
    /// The mode.
    pub mode: Mode,
    /// This primary's epoch (a mirror that has seen a higher one refuses it).
    pub epoch: u64,
    /// How long to wait for a connection, and for an acknowledgement, before the link is
    /// declared lost.
    pub timeout: Duration,
    /// How often to try again while the mirror is away.
    pub retry: Duration,
    /// An idle link sends a heartbeat after this long without traffic
    /// ([`MirrorPolicy::start_heartbeats`]).
    pub heartbeat: Duration,
    /// A heartbeat not answered within this long loses the link.
    pub heartbeat_timeout: Duration,
    /// What to do while the mirror is away.
    pub without_mirror: WithoutMirror,
    /// `syncsec`/`syncseceth`: told to the mirror, which holds its acknowledgements while a
    /// backup has more than this many bytes unacknowledged (0: never).
    pub backup_stall: u64,
    /// The longest such hold, after which the lagging backup catches up in bulk (the mirror
    /// sends heartbeats meanwhile; at most a minute, the longest a primary waits for a busy
    /// mirror).
    pub backup_stall_max: Duration,
    /// Connections to the mirror (Mojim's queues), 1 to [`CONNECTIONS_MAX`]: concurrent sync
    /// points go out on different connections at once; their ids keep one global order,
    /// in which the mirror logs them. All are one link (one session at the mirror): one that
    /// fails loses the link.
    pub connections: usize,
}

impl MirrorConfig {
    /// Defaults: epoch 1, 2 s timeout, retry every second, a heartbeat after 250 ms of
    /// silence answered within 750 ms (a lost mirror is seen within a second), record the
    /// loss of the mirror and go on.
    pub fn new(addr: SocketAddr, secret: Secret, mode: Mode) -> MirrorConfig {
        MirrorConfig {
            addr,
            secret,
            mode,
            epoch: 1,
            timeout: Duration::from_secs(2),
            retry: Duration::from_secs(1),
            heartbeat: HEARTBEAT_DEFAULT,
            heartbeat_timeout: HEARTBEAT_TIMEOUT_DEFAULT,
            without_mirror: WithoutMirror::Record,
            backup_stall: mode.default_backup_stall(),
            backup_stall_max: mode.default_backup_stall_max(),
            connections: CONNECTIONS_DEFAULT,
        }
    }

    /// The same with `n` connections to the mirror (clamped to 1..=[`CONNECTIONS_MAX`]).
    pub fn with_connections(mut self, n: usize) -> MirrorConfig {
        self.connections = n.clamp(1, CONNECTIONS_MAX);
        self
    }

    /// What this primary tells its mirror at the handshake.
    pub fn link_params(&self) -> LinkParams {
        let tier = self.mode.has_backup_tier();
        LinkParams {
            mode: self.mode,
            backup_stall: if tier { self.backup_stall } else { 0 },
            backup_stall_ms: u32::try_from(self.backup_stall_max.as_millis()).unwrap_or(u32::MAX),
        }
    }
}

/// A snapshot of the policy's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplStats {
    /// Whether a link to the mirror is up and in sync.
    pub in_sync: bool,
    /// Records shipped.
    pub shipped: u64,
    /// Bytes of range data shipped.
    pub bytes: u64,
    /// Highest record id the mirror acknowledged.
    pub acked: u64,
    /// Highest record id shipped.
    pub last_id: u64,
    /// Full copies sent.
    pub copies: u64,
    /// Links lost.
    pub link_losses: u64,
    /// Sync points made durable only locally (mirror away).
    pub local_only: u64,
    /// Heartbeats the mirror answered.
    pub heartbeats: u64,
    /// Milliseconds since the mirror last answered a heartbeat (None: never).
    pub heartbeat_age_ms: Option<u64>,
}

/// Where the mirror's backups stand, as its last Status said (protocol version 2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupsView {
    /// The backups, in the mirror's order (empty: none, or no Status yet).
    pub backups: Vec<BackupStatus>,
    /// The mirror's last record id when it sent the Status.
    pub mirror_last_id: u64,
    /// Milliseconds since that Status arrived (None: none yet).
    pub age_ms: Option<u64>,
}

/// A handshake run on a thread of its own while sync points carry on locally: the links of
/// one session, and the last record id the mirror holds.
#[derive(Debug, Default)]
struct Connector {
    busy: AtomicBool,
    done: Mutex<Option<Result<Handshaken>>>,
}

/// The connections of a link that passed the handshake, first first, and the last record id
/// the mirror holds.
type Handshaken = (Vec<Link>, u64);

/// Longest silence of a mirror receiving a full copy (it sends a heartbeat every 250 ms)
/// before the copy is declared failed.
const COPY_SILENCE_MAX: Duration = Duration::from_secs(3);

/// A full copy logs its progress every this many bytes.
const COPY_PROGRESS_EVERY: u64 = 256 << 20;

/// Silence on a link after which a heartbeat is sent: a few per second cost nothing, and
/// with the timeout below a lost mirror is seen within a second.
pub const HEARTBEAT_DEFAULT: Duration = Duration::from_millis(250);

/// How long a heartbeat waits for its answer (a mirror's answer is one round trip).
pub const HEARTBEAT_TIMEOUT_DEFAULT: Duration = Duration::from_millis(750);

/// How often a blocked primary ([`WithoutMirror::Block`]) tries to get its mirror back.
const BLOCK_POLL: Duration = Duration::from_millis(50);

/// Longest wait of a sync point for a free connection before it looks again (a bound, not
/// a poll: a connection let go signals the waiters).
const FREED_WAIT_MAX: Duration = Duration::from_millis(1);

/// Most connections one link may have: each is a thread on the mirror, and past the
/// primary's cores more only queue (Mojim used a few IB queues per node).
pub const CONNECTIONS_MAX: usize = 16;

/// Connections per link unless told otherwise. One, measured on this project's 2-vCPU
/// machine (`scripts/bench-repl.sh threads`, `bench/README.md`, "Connections per link"): a
/// second connection gave two writing threads 1.3-1.7x the throughput of one, four writers
/// no consistent gain and eight writers less, and the key-value server (one sync point at a
/// time) nothing, while each connection costs a mirror thread and a handshake.
pub const CONNECTIONS_DEFAULT: usize = 1;

/// One connection of a link: its socket, the buffers of the record it carries (reused: no
/// allocation per sync point), and when the mirror last answered on it.
#[derive(Debug)]
struct Conn {
    link: Link,
    buf: Vec<u8>,
    /// The ranges of the record being encoded (offset, length).
    spans: Vec<(u64, usize)>,
    /// When the mirror last answered on it (since the policy's creation).
    heard: Duration,
}

/// One link to the mirror: its connections (one session at the mirror, whose Welcome named
/// it and which the others joined), all in use together or all dropped together.
///
/// Invariants: a record's id is taken, and its bytes read from the pool, under the policy's
/// lock while its connection's lock is held, and that connection's lock is held until the
/// record is sent; so each connection carries increasing ids, and the ids of a session are
/// dense from its full copy on (the mirror's order rule relies on both). Locks are taken in
/// that order only: the policy's, then a connection's, never the other way round (a thread
/// whose connection failed lets go of it before it takes the policy's lock).
#[derive(Debug)]
struct Session {
    /// Its number in the core ([`PrimaryCore::link_up`]).
    number: u64,
    conns: Vec<Mutex<Conn>>,
    /// A second handle on each connection's socket, to cut them all at once when one fails:
    /// a sync point waiting on another connection for an ack that the mirror will never send
    /// (its record waits there for an older one that is lost) then fails at once instead of
    /// after its timeout.
    sockets: Vec<TcpStream>,
}

impl Session {
    fn new(links: Vec<Link>, now: Duration) -> Result<Session> {
        let sockets = links.iter().map(Link::socket).collect::<Result<Vec<_>>>()?;
        Ok(Session {
            number: 0,
            conns: links
                .into_iter()
                .map(|link| {
                    Mutex::new(Conn {
                        link,
                        buf: Vec::new(),
                        spans: Vec::new(),
                        heard: now,
                    })
                })
                .collect(),
            sockets,
        })
    }

    /// The first free connection (a lone writer always takes the first).
    fn try_pick(&self) -> Option<MutexGuard<'_, Conn>> {
        self.conns.iter().find_map(|conn| match conn.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        })
    }

    /// Close every connection (both ways): the link is lost.
    fn cut(&self) {
        for socket in &self.sockets {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[derive(Debug)]
struct Inner {
    /// The link, while it is up and in sync.
    session: Option<Arc<Session>>,
    /// The sequencing's state and decisions (ids, attempts and their backoff, what sync
    /// mode left unflushed, whether the loss of the mirror is recorded): `session` is
    /// Some exactly while the core has a link up.
    core: PrimaryCore,
    /// The full copy's records, reused.
    buf: Vec<u8>,
}

/// The replicating sync policy. Give it to a pool at create or open
/// (`CreateOptions::policy`, `OpenOptions::policy`).
#[derive(Debug)]
pub struct MirrorPolicy {
    config: MirrorConfig,
    inner: Mutex<Inner>,
    connector: Arc<Connector>,
    in_sync: AtomicBool,
    shipped: AtomicU64,
    bytes: AtomicU64,
    acked: AtomicU64,
    last_id: AtomicU64,
    copies: AtomicU64,
    link_losses: AtomicU64,
    local_only: AtomicU64,
    heartbeats: AtomicU64,
    /// Microseconds after `created` of the last answered heartbeat (u64::MAX: never).
    heartbeat_at_us: AtomicU64,
    created: Instant,
    membership: Option<Arc<dyn Membership>>,
    /// The mirror's last Status: its backups, its last id, when it came.
    backups: Mutex<(Vec<BackupStatus>, u64, Option<Instant>)>,
    /// Signalled (with the policy's lock taken and let go first, so that no wait misses it)
    /// when a connection is let go while a sync point waits for one.
    freed: Condvar,
    /// Sync points waiting for a free connection.
    waiting: AtomicUsize,
}

impl MirrorPolicy {
    /// A policy for `config`; it connects at the first sync point.
    pub fn new(config: MirrorConfig) -> MirrorPolicy {
        let core = PrimaryCore::new(CoreConfig {
            mode: config.mode,
            without_mirror: config.without_mirror,
            membership: false,
            retry: config.retry,
            heartbeat: config.heartbeat,
        });
        MirrorPolicy {
            config,
            inner: Mutex::new(Inner {
                session: None,
                core,
                buf: Vec::new(),
            }),
            connector: Arc::new(Connector::default()),
            in_sync: AtomicBool::new(false),
            shipped: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            last_id: AtomicU64::new(0),
            copies: AtomicU64::new(0),
            link_losses: AtomicU64::new(0),
            local_only: AtomicU64::new(0),
            heartbeats: AtomicU64::new(0),
            heartbeat_at_us: AtomicU64::new(u64::MAX),
            created: Instant::now(),
            membership: None,
            backups: Mutex::new((Vec::new(), 0, None)),
            freed: Condvar::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    /// A connection of `session` (the link in use) for a sync point, taken under the
    /// policy's lock: the first free one, else wait (the policy's lock let go meanwhile, so
    /// that the sync points that hold the connections can finish, or fail and lose the link).
    /// Err: the link is no longer `session` (a record encoded on it now would take an id
    /// that the next link's records must follow without a gap).
    #[allow(clippy::type_complexity)] // both guards, or the policy's back
    fn pick<'p, 's>(
        &'p self,
        mut inner: MutexGuard<'p, Inner>,
        session: &'s Arc<Session>,
    ) -> std::result::Result<(MutexGuard<'p, Inner>, MutexGuard<'s, Conn>), MutexGuard<'p, Inner>>
    {
        // The link is the policy's while its lock is held: a free connection, at once.
        if let Some(conn) = session.try_pick() {
            return Ok((inner, conn));
        }
        // Counted before looking again, so that a connection let go after that look is
        // signalled.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        loop {
            let current = inner
                .session
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, session));
            if !current {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                return Err(inner);
            }
            if let Some(conn) = session.try_pick() {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                return Ok((inner, conn));
            }
            // The timeout only bounds a missed signal.
            inner = self
                .freed
                .wait_timeout(inner, FREED_WAIT_MAX)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// A connection was let go: wake a sync point waiting for one, if any.
    fn release(&self, conn: MutexGuard<'_, Conn>) {
        drop(conn);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            // Taken and let go: a waiter is now either before its look or in its wait.
            drop(self.lock_inner());
            self.freed.notify_one();
        }
    }

    fn lock_inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where the mirror's backups stand, as the mirror last said.
    pub fn backups(&self) -> BackupsView {
        let b = self.backups.lock().unwrap_or_else(|p| p.into_inner());
        BackupsView {
            backups: b.0.clone(),
            mirror_last_id: b.1,
            age_ms: b.2.map(|at| at.elapsed().as_millis() as u64),
        }
    }

    fn note_status(&self, last_id: u64, backups: Vec<BackupStatus>) {
        *self.backups.lock().unwrap_or_else(|p| p.into_inner()) =
            (backups, last_id, Some(Instant::now()));
    }

    /// Record the mirror's state in `membership` (etcd), and obey it when deposed.
    pub fn with_membership(mut self, membership: Arc<dyn Membership>) -> MirrorPolicy {
        self.membership = Some(membership);
        self.inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .core
            .set_membership(true);
        self
    }

    /// The policy's clock, as the core takes it: time since its creation.
    fn now(&self) -> Duration {
        self.created.elapsed()
    }

    /// Send heartbeats on the idle link from a thread of its own, which ends when the policy
    /// is dropped. A heartbeat not answered in time loses the link as a failed sync point
    /// would; what sync mode left unflushed is flushed at the next sync point (this thread
    /// has no access to the pool), before anything more is acknowledged.
    pub fn start_heartbeats(self: &Arc<Self>) -> std::io::Result<()> {
        let policy = Arc::downgrade(self);
        let every = self.config.heartbeat.max(Duration::from_millis(1));
        std::thread::Builder::new()
            .name("mnemo-repl-heartbeat".into())
            .spawn(move || loop {
                std::thread::sleep(every / 2);
                match policy.upgrade() {
                    Some(p) => p.heartbeat(),
                    None => return,
                }
            })
            .map(|_| ())
    }

    /// Whether a sync point would do something for the link now: it is down and an attempt
    /// to get it back is due, or a handshake made in the background waits to be finished
    /// with a full copy (which needs the pool). The owner of an idle pool makes an empty sync
    /// point then, so that a mirror that came back gets its copy without waiting for the
    /// next write. False in `local` mode and when sync points block for the mirror anyway.
    pub fn wants_sync_point(&self) -> bool {
        if self.config.mode == Mode::Local || self.config.without_mirror == WithoutMirror::Block {
            return false;
        }
        let Ok(inner) = self.inner.try_lock() else {
            return false;
        };
        if inner.session.is_some() {
            return false;
        }
        let finished = self
            .connector
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        inner.core.wants_sync_point(
            self.now(),
            finished,
            self.connector.busy.load(Ordering::Acquire),
        )
    }

    /// One heartbeat on each idle connection of the link (no sync point under way on it,
    /// nothing heard lately).
    fn heartbeat(&self) {
        let mut inner = match self.inner.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // A sync point is choosing its connection: the link is not idle.
            Err(TryLockError::WouldBlock) => return,
        };
        let inner = &mut *inner;
        let Some(session) = inner.session.clone() else {
            return;
        };
        let shipped = inner.core.last_id();
        for conn in &session.conns {
            let mut conn = match conn.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                // A sync point is under way on it: it watches the connection itself.
                Err(TryLockError::WouldBlock) => continue,
            };
            if !inner.core.heartbeat_due(conn.heard, self.now()) {
                continue;
            }
            match self.heartbeat_round_trip(&mut conn.link, shipped) {
                Ok(()) => {
                    conn.heard = self.now();
                    self.heartbeats.fetch_add(1, Ordering::Relaxed);
                    let at = self.created.elapsed().as_micros() as u64;
                    self.heartbeat_at_us.store(at, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(mirror = %self.config.addr, error = %e, "mirror link lost: no answer to a heartbeat; sync points are durable locally until it is back");
                    drop(conn);
                    session.cut();
                    inner.session = None;
                    let record = inner.core.heartbeat_lost(self.now());
                    self.in_sync.store(false, Ordering::Relaxed);
                    self.link_losses.fetch_add(1, Ordering::Relaxed);
                    // Record the loss now, before any sync point acknowledges without the
                    // mirror (a failure here is retried by the next sync point).
                    if let (true, Some(m)) = (record, &self.membership) {
                        inner.core.heartbeat_loss_answer(m.mirror_lost().is_ok());
                    }
                    return;
                }
            }
        }
    }

    fn heartbeat_round_trip(&self, link: &mut Link, shipped: u64) -> Result<()> {
        let c = &self.config;
        link.set_read_timeout(Some(c.heartbeat_timeout))?;
        link.send(&Frame::Heartbeat {
            epoch: c.epoch,
            id: shipped,
        })?;
        loop {
            match link.recv()? {
                Frame::Heartbeat { epoch, .. } if epoch > c.epoch => {
                    return Err(Error::Refused(format!(
                        "stale epoch {}: the mirror has seen epoch {epoch}",
                        c.epoch
                    )))
                }
                Frame::Heartbeat { .. } => break,
                // Acknowledgements of async records still on their way.
                other => self.note_ack(other)?,
            }
        }
        link.set_read_timeout(Some(c.timeout))
    }

    /// The configuration.
    pub fn config(&self) -> &MirrorConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> ReplStats {
        ReplStats {
            in_sync: self.in_sync.load(Ordering::Relaxed),
            shipped: self.shipped.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
            last_id: self.last_id.load(Ordering::Relaxed),
            copies: self.copies.load(Ordering::Relaxed),
            link_losses: self.link_losses.load(Ordering::Relaxed),
            local_only: self.local_only.load(Ordering::Relaxed),
            heartbeats: self.heartbeats.load(Ordering::Relaxed),
            heartbeat_age_ms: match self.heartbeat_at_us.load(Ordering::Relaxed) {
                u64::MAX => None,
                at => Some((self.created.elapsed().as_micros() as u64).saturating_sub(at) / 1000),
            },
        }
    }

    /// Connect, authenticate and send a full copy of `media`; on return the mirror holds
    /// an image of the pool as of now.
    fn connect(&self, inner: &mut Inner, media: &dyn Media) -> Result<()> {
        let (links, last) = handshake_session(&self.config, media.len())?;
        self.send_copy(inner, media, links, last)
    }

    /// Send a full copy of `media` over the first connection of a link that passed the
    /// handshake (the mirror holds records up to `last`); the link becomes the policy's.
    fn send_copy(
        &self,
        inner: &mut Inner,
        media: &dyn Media,
        mut links: Vec<Link>,
        last: u64,
    ) -> Result<()> {
        let c = &self.config;
        let size = media.len();
        let link = links
            .first_mut()
            .ok_or_else(|| Error::Unexpected("a link without connections".into()))?;
        // Ids continue after anything the mirror holds.
        inner.core.copy_from(last);
        // The full copy: every non-zero chunk (the mirror's image starts zeroed).
        link.send(&Frame::CopyBegin {
            epoch: c.epoch,
            pool_size: size,
        })?;
        // 256 KiB records: the mirror's heartbeats come after each, within a timeout even on
        // a 2 Mbit link.
        const CHUNK: u64 = 256 << 10;
        let mut at = 0u64;
        if mnemo_pmem::mutant::active("repl.skip_copy") {
            // Broken on purpose (tests only): the mirror gets no copy of what came before.
            at = size;
        }
        while at < size {
            let len = CHUNK.min(size - at);
            // SAFETY: `at..at+len` lies inside the medium's mapping, which stays mapped while
            // the pool (which owns the medium and calls this policy) is open. Other threads
            // may store into these bytes meanwhile; what is copied is then, per aligned
            // word, the old or the new value, as a crash image would hold.
            let chunk = unsafe {
                std::slice::from_raw_parts(media.base().as_ptr().add(at as usize), len as usize)
            };
            if at > 0 && at % COPY_PROGRESS_EVERY == 0 {
                tracing::info!(
                    mirror = %c.addr,
                    copied_mib = at >> 20,
                    total_mib = size >> 20,
                    "full copy to the mirror in progress"
                );
            }
            if chunk.iter().any(|&b| b != 0) {
                inner.buf.clear();
                let id = inner.core.take_id();
                proto::encode_record(&mut inner.buf, c.epoch, id, true, [(at, chunk)].into_iter());
                link.send_encoded(&inner.buf)?;
            }
            at += len;
        }
        let done = inner.core.take_id();
        link.send(&Frame::CopyDone {
            epoch: c.epoch,
            id: done,
            pool_size: size,
        })?;
        // The copy may take long (a large pool, a slow link): the mirror sends a heartbeat
        // every 250 ms while its chunks arrive and while it makes the image durable, each one
        // restarting the wait, so a copy in progress is waited for, and a partition or a
        // dead mirror is seen within COPY_SILENCE_MAX (at least the link's timeout: a loaded
        // mirror's heartbeats may come late, and a failed copy costs a whole new one).
        link.set_read_timeout(Some(c.timeout.max(COPY_SILENCE_MAX)))?;
        self.expect_ack(link, done, None)?;
        link.set_read_timeout(Some(c.timeout))?;
        self.acked.fetch_max(done, Ordering::Relaxed);
        self.last_id.fetch_max(done, Ordering::Relaxed);
        self.copies.fetch_add(1, Ordering::Relaxed);
        let connections = links.len();
        tracing::info!(mirror = %c.addr, pool_size = size, mode = c.mode.name(), connections, "mirror in sync (full copy sent)");
        let mut session = Session::new(links, self.now())?;
        session.number = inner.core.link_up();
        inner.session = Some(Arc::new(session));
        self.in_sync.store(true, Ordering::Relaxed);
        if let Some(m) = &self.membership {
            m.mirror_in_sync();
        }
        Ok(())
    }

    /// The link failed and the core lost it: drop it (every connection) and, if
    /// `flush_pool`, make everything durable locally.
    fn lose_link(&self, inner: &mut Inner, media: &dyn Media, error: &Error, flush_pool: bool) {
        tracing::warn!(mirror = %self.config.addr, error = %error, "mirror link lost: sync points are durable locally until it is back");
        if let Some(session) = inner.session.take() {
            session.cut();
        }
        self.in_sync.store(false, Ordering::Relaxed);
        self.link_losses.fetch_add(1, Ordering::Relaxed);
        if flush_pool {
            // What sync mode left to the mirror alone: every line of the pool, now.
            media.flush(0, media.len());
        }
    }

    fn flush_local(media: &dyn Media, point: &SyncPoint<'_>) {
        for range in point.ranges {
            media.flush(range.offset, range.len);
        }
    }

    /// Encode the sync point as record `id` (the core's next) into `conn`'s buffer, the
    /// bytes of its ranges read from the pool now (under the policy's lock, so a record with
    /// a higher id was read later). Returns the bytes of range data.
    fn encode(&self, id: u64, conn: &mut Conn, media: &dyn Media, point: &SyncPoint<'_>) -> u64 {
        let c = &self.config;
        let len = media.len();
        let mut bytes = 0u64;
        // Broken on purpose (tests only): the staged ranges are left out of the record.
        let staged: &[mnemo_pmem::ByteRange] = if mnemo_pmem::mutant::active("repl.ship_named_only")
        {
            &[]
        } else {
            point.staged
        };
        // The non-empty ranges, clamped to the mapping (the pool checked them already), in a
        // buffer reused by every sync point: no allocation per record.
        conn.spans.clear();
        for r in point.ranges.iter().chain(staged).filter(|r| r.len > 0) {
            let end = r.offset.saturating_add(r.len).min(len);
            let start = r.offset.min(end);
            bytes += end - start;
            conn.spans.push((start, (end - start) as usize));
        }
        let base = media.base().as_ptr();
        let ranges = conn.spans.iter().map(|&(start, n)| {
            // SAFETY: `start..start+n` lies inside the mapping (clamped above), which stays
            // mapped while the pool is open.
            (start, unsafe {
                std::slice::from_raw_parts(base.add(start as usize), n)
            })
        });
        conn.buf.clear();
        proto::encode_record(&mut conn.buf, c.epoch, id, false, ranges);
        self.last_id.fetch_max(id, Ordering::Relaxed);
        bytes
    }

    /// Try to get a link back, without making this sync point wait: the first attempt runs
    /// inline (so a primary starts in sync), later ones on a thread of their own, with a
    /// doubling backoff; a handshake that succeeded there is finished here with the full
    /// copy (which needs the pool and must not overlap a sync point). The core decides which
    /// ([`PrimaryCore::attempt`]).
    fn reconnect(&self, inner: &mut Inner, media: &dyn Media) {
        let c = &self.config;
        let done = self
            .connector
            .done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let now = self.now();
        let result = match (
            inner.core.attempt(now, done.as_ref().map(Result::is_ok)),
            done,
        ) {
            (Attempt::Copy, Some(Ok((links, last)))) => self.send_copy(inner, media, links, last),
            (Attempt::Failed, Some(Err(e))) => {
                // Counted by the core already.
                tracing::warn!(mirror = %c.addr, error = %e, retry_in = ?inner.core.next_attempt().map(|due| due.saturating_sub(now)), "cannot reach the mirror");
                return;
            }
            (Attempt::First, _) => self.connect(inner, media),
            (Attempt::Due, _) => {
                if !self.connector.busy.swap(true, Ordering::AcqRel) {
                    let connector = Arc::clone(&self.connector);
                    let config = c.clone();
                    let size = media.len();
                    let spawned = std::thread::Builder::new()
                        .name("mnemo-repl-connect".into())
                        .spawn(move || {
                            let result = handshake_session(&config, size);
                            *connector.done.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(result);
                            connector.busy.store(false, Ordering::Release);
                        });
                    if spawned.is_err() {
                        self.connector.busy.store(false, Ordering::Release);
                    }
                    // Not due again until this attempt has had its chance.
                    inner.core.attempt_started(now);
                }
                return;
            }
            // NotYet; the other pairs cannot be (the core answers Copy and Failed only
            // for a finished handshake, and the others only without one).
            _ => return,
        };
        if let Err(e) = result {
            tracing::warn!(mirror = %c.addr, error = %e, retry_in = ?inner.core.backoff(), "cannot reach the mirror");
            inner.core.attempt_failed(self.now());
        }
    }

    /// The mirror is away: before this sync point may be acknowledged here alone, what sync
    /// mode left unflushed is flushed, and the loss is recorded (or, per the configuration,
    /// the sync point waits for the mirror), as the core says ([`PrimaryCore::away`]).
    /// Ok(true): the link is back.
    fn without_mirror(
        &self,
        inner: &mut Inner,
        media: &dyn Media,
    ) -> std::result::Result<bool, MediaError> {
        let away = inner.core.away();
        if away.flush_pool {
            // The link was lost between sync points (a heartbeat went unanswered).
            media.flush(0, media.len());
        }
        match away.then {
            AwayThen::Block => {
                while inner.session.is_none() {
                    if let Some(m) = &self.membership {
                        m.may_acknowledge().map_err(fenced)?;
                    }
                    std::thread::sleep(BLOCK_POLL);
                    inner.core.blocked_poll();
                    self.reconnect(inner, media);
                }
                Ok(true)
            }
            AwayThen::RecordLoss => {
                let answer = match &self.membership {
                    Some(m) => m.mirror_lost(),
                    None => Ok(()),
                };
                match inner.core.loss_answer(answer.is_ok()) {
                    Verdict::Local => Ok(false),
                    Verdict::Fenced => Err(fenced(answer.err().unwrap_or_default())),
                }
            }
            AwayThen::Local => Ok(false),
        }
    }

    /// Returns whether the sync point needs the local fence (every mode but `sync` with the
    /// mirror in sync); an error if this primary may not acknowledge it.
    ///
    /// Under the policy's lock: get the link back if it is down, take a free connection, and
    /// encode the record (its id, its bytes). Then, with only that connection's lock: send
    /// it, flush locally meanwhile (`syncflush`, `async`), and wait for the mirror's ack
    /// (sync modes). Concurrent sync points overlap here, each on its own connection.
    fn sync_inner(
        &self,
        media: &dyn Media,
        point: &SyncPoint<'_>,
    ) -> std::result::Result<bool, MediaError> {
        if let Some(m) = &self.membership {
            m.may_acknowledge().map_err(fenced)?;
        }
        let mut inner = self.lock_inner();
        loop {
            if inner.session.is_none() {
                self.reconnect(&mut inner, media);
            }
            if inner.session.is_none() {
                if !self.without_mirror(&mut inner, media)? {
                    Self::flush_local(media, point);
                    self.local_only.fetch_add(1, Ordering::Relaxed);
                    return Ok(true);
                }
                // Blocked until the link came back: not shipped yet, the sync point goes
                // out on it.
                debug_assert_eq!(inner.core.unblocked(false), Unblocked::Ship);
            }
            let Some(session) = inner.session.clone() else {
                // Unreachable: without_mirror returned true only with the link back.
                Self::flush_local(media, point);
                self.local_only.fetch_add(1, Ordering::Relaxed);
                return Ok(true);
            };
            match self.pick(inner, &session) {
                Ok((inner, guard)) => return self.ship_on(inner, guard, &session, media, point),
                // The link was lost (perhaps replaced) while this sync point waited for a
                // connection: look again.
                Err(again) => inner = again,
            };
        }
    }

    /// Encode the sync point on `guard`'s connection (the policy's lock held, then let go),
    /// send it, and wait for the mirror's ack if the mode does.
    fn ship_on(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        mut guard: MutexGuard<'_, Conn>,
        session: &Arc<Session>,
        media: &dyn Media,
        point: &SyncPoint<'_>,
    ) -> std::result::Result<bool, MediaError> {
        let conn = &mut *guard;
        let ship = inner.core.ship();
        let acknowledge = inner.core.shipped();
        let bytes = self.encode(ship.id, conn, media, point);
        drop(inner);
        let sent = conn.link.send_encoded(&conn.buf);
        if ship.flush_point {
            // While the record travels (syncflush) or after it left (async).
            Self::flush_local(media, point);
        }
        let result = sent.and_then(|()| {
            self.shipped.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
            if !ship.wait_ack {
                while let Some(frame) = conn.link.try_recv()? {
                    self.note_ack(frame)?;
                }
                Ok(())
            } else {
                let acked = self.expect_ack(&mut conn.link, ship.id, Some(BUSY_WAIT_MAX))?;
                self.acked.fetch_max(acked, Ordering::Relaxed);
                Ok(())
            }
        });
        match result {
            Ok(()) => {
                conn.heard = self.now();
                self.release(guard);
                Ok(acknowledge.fence)
            }
            Err(e) => {
                self.release(guard);
                self.connection_failed(session, media, point, &e)
            }
        }
    }

    /// A connection of `session` failed while it carried this sync point: the link is lost
    /// (unless a sibling already found so), and the sync point is made durable here. The
    /// caller holds no connection's lock (the policy's lock comes first).
    fn connection_failed(
        &self,
        session: &Arc<Session>,
        media: &dyn Media,
        point: &SyncPoint<'_>,
        error: &Error,
    ) -> std::result::Result<bool, MediaError> {
        // The others' sync points wait for acks that may never come (the mirror holds their
        // records back until this one's): they fail now, not after their timeout.
        session.cut();
        let mut inner = self.lock_inner();
        let inner = &mut *inner;
        match inner.core.connection_failed(session.number, self.now()) {
            Failed::Lost { flush_pool } => {
                // In sync mode this sync point's own ranges are flushed with the whole pool.
                self.lose_link(inner, media, error, flush_pool);
            }
            Failed::Replaced(acknowledge) => {
                // A sibling lost this link and a new one is up: its full copy, read from the
                // pool after this record was encoded (and so after this sync point's
                // stores), was acknowledged: the bytes are at the mirror. Here too, below.
                Self::flush_local(media, point);
                return Ok(acknowledge.fence);
            }
            // A sibling lost it first (and flushed the whole pool in sync mode, after this
            // record was encoded).
            Failed::AlreadyLost => {}
        }
        // This sync point's own ranges: flushed here as well, whoever flushed the pool.
        Self::flush_local(media, point);
        if self.without_mirror(inner, media)? {
            // Blocked until the mirror came back with a full copy, which holds this sync
            // point's bytes: it is durable there (and here, flushed above).
            return Ok(match inner.core.unblocked(true) {
                Unblocked::Acknowledge(acknowledge) => acknowledge.fence,
                Unblocked::Ship => true,
            });
        }
        self.local_only.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    fn note_ack(&self, frame: Frame) -> Result<()> {
        match frame {
            Frame::Ack { id, .. } => {
                self.acked.fetch_max(id, Ordering::Relaxed);
                Ok(())
            }
            // The mirror is busy with a record (a backup's full copy holds its store).
            Frame::Heartbeat { .. } => Ok(()),
            Frame::Status {
                last_id, backups, ..
            } => {
                self.note_status(last_id, backups);
                Ok(())
            }
            Frame::Refused { reason } => Err(Error::Refused(reason)),
            other => Err(Error::Unexpected(format!("{other:?}"))),
        }
    }

    /// Wait for the acknowledgement of `id` (acks of earlier ids are skipped; the mirror's
    /// heartbeats meanwhile say it is busy, not gone: each one restarts the read timeout, up
    /// to `busy_max` if given; its Status frames are noted).
    fn expect_ack(&self, link: &mut Link, id: u64, busy_max: Option<Duration>) -> Result<u64> {
        let start = Instant::now();
        loop {
            let frame = match link.recv()? {
                Frame::Status {
                    last_id, backups, ..
                } => {
                    self.note_status(last_id, backups);
                    continue;
                }
                frame => frame,
            };
            match ack_step(self.config.epoch, id, frame)? {
                AckStep::Acked(got) => return Ok(got),
                AckStep::Earlier => continue,
                AckStep::Busy if busy_max.is_none_or(|max| start.elapsed() < max) => continue,
                AckStep::Busy => {
                    return Err(Error::Unexpected(format!(
                        "the mirror stayed busy for {:?} without acknowledging record {id}",
                        start.elapsed()
                    )))
                }
            }
        }
    }
}

/// A sync point this primary may not acknowledge: the error its caller sees.
fn fenced(reason: String) -> MediaError {
    MediaError::Io {
        op: "replication (this primary may not acknowledge)",
        source: std::io::Error::other(reason),
    }
}

/// Connect to the mirror and authenticate both ways, as one connection of its own session;
/// returns the link and the last record id the mirror holds. Needs no pool, so it may run on
/// a thread of its own.
pub(crate) fn handshake(c: &MirrorConfig, pool_size: u64) -> Result<(Link, u64)> {
    handshake_one(c, pool_size, 0).map(|(link, last, _)| (link, last))
}

/// The connections of one link: the first opens a session at the mirror, the others join
/// it (each authenticated on its own). Returns them, first first, and the last record id the
/// mirror holds.
fn handshake_session(c: &MirrorConfig, pool_size: u64) -> Result<Handshaken> {
    let n = c.connections.clamp(1, CONNECTIONS_MAX);
    let (first, last, session) = handshake_one(c, pool_size, 0)?;
    let mut links = Vec::with_capacity(n);
    links.push(first);
    if n > 1 {
        let session = session.ok_or_else(|| {
            Error::Unexpected("the mirror named no session for the link's other connections".into())
        })?;
        for _ in 1..n {
            let (link, _, joined) = handshake_one(c, pool_size, session)?;
            if joined != Some(session) {
                return Err(Error::Unexpected(format!(
                    "a connection joining session {session:#x} was put in {joined:?}"
                )));
            }
            links.push(link);
        }
    }
    Ok((links, last))
}

/// One connection's handshake: `session` 0 opens a new session, another value joins it.
/// Returns the link, the last record id the mirror holds and the session it named.
fn handshake_one(
    c: &MirrorConfig,
    pool_size: u64,
    session: u64,
) -> Result<(Link, u64, Option<u64>)> {
    let mut link = Link::connect(c.addr, c.timeout)?;
    link.set_read_timeout(Some(c.timeout))?;
    let ours = auth::nonce()?;
    link.send(&Frame::Hello {
        version: VERSION,
        role: Role::Primary,
        nonce: ours,
    })?;
    let (proof, theirs) = match link.recv()? {
        Frame::Challenge {
            version,
            proof,
            nonce,
        } if version == VERSION => (proof, nonce),
        Frame::Refused { reason } => return Err(Error::Refused(reason)),
        other => {
            return Err(Error::Unexpected(format!(
                "expected the mirror's challenge, got {other:?}"
            )))
        }
    };
    if !c.secret.check_mirror(&proof, &ours, &theirs) {
        // Tell the mirror why, so that its operator sees it too.
        let _ = link.send(&Frame::Refused {
                reason: "authentication failed: the mirror's proof does not match the primary's shared secret".into(),
            });
        return Err(Error::Auth(format!(
            "{} does not know the shared secret: not our mirror",
            c.addr
        )));
    }
    link.send(&Frame::Auth {
        proof: c.secret.primary_proof(&theirs, &ours),
        epoch: c.epoch,
        pool_size,
        params: Some(c.link_params()),
        session: Some(session),
    })?;
    match link.recv()? {
        Frame::Welcome {
            last_id, session, ..
        } => Ok((link, last_id, session)),
        Frame::Refused { reason } => Err(Error::Refused(reason)),
        other => Err(Error::Unexpected(format!(
            "expected Welcome, got {other:?}"
        ))),
    }
}

/// Longest wait for one acknowledgement from a mirror that says it is alive but busy (its
/// heartbeats while a backup's full copy holds its store, or while a lagging backup holds
/// the acknowledgement).
pub const BUSY_WAIT_MAX: Duration = Duration::from_secs(60);

/// What a frame received while a primary of `epoch` waits for the acknowledgement of record
/// `id` means ([`ack_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStep {
    /// Every record up to this id (at least `id`) is durable at the mirror.
    Acked(u64),
    /// The acknowledgement of an earlier record: keep waiting.
    Earlier,
    /// The mirror says it is alive but busy (its heartbeat): keep waiting, within bounds.
    Busy,
}

/// The primary's rule for one frame received while it waits for the acknowledgement of
/// record `id` (sans I/O: the TCP link and the deterministic simulation both use it). An
/// error loses the link: a refusal, a mirror of a newer epoch, an ack under another epoch.
pub fn ack_step(epoch: u64, id: u64, frame: Frame) -> Result<AckStep> {
    match frame {
        Frame::Ack { epoch: e, id: got } if e == epoch && got >= id => Ok(AckStep::Acked(got)),
        Frame::Ack { epoch: e, .. } if e == epoch => Ok(AckStep::Earlier),
        Frame::Heartbeat { epoch: e, .. } if e > epoch => Err(Error::Refused(format!(
            "stale epoch {epoch}: the mirror has seen epoch {e}"
        ))),
        Frame::Heartbeat { .. } => Ok(AckStep::Busy),
        Frame::Ack { epoch: e, .. } => Err(Error::Refused(format!(
            "acknowledged under epoch {e}, this primary's is {epoch}"
        ))),
        Frame::Refused { reason } => Err(Error::Refused(reason)),
        other => Err(Error::Unexpected(format!("{other:?}"))),
    }
}

impl SyncPolicy for MirrorPolicy {
    /// A clean close leaves the pool durable by itself: in `sync` mode, whose sync points
    /// skipped the local flush, every line of the pool is flushed and fenced first.
    fn close(&self, media: &dyn Media) -> std::result::Result<(), MediaError> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.core.close() {
            media.flush(0, media.len());
            media.drain()?;
            inner.core.pool_flushed();
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        match self.config.mode {
            Mode::Local => "local",
            Mode::Async => "mirror-async",
            Mode::Sync => "mirror-sync",
            Mode::SyncDisk => "mirror-syncdisk",
            Mode::SyncSec => "mirror-syncsec",
            Mode::SyncSecEth => "mirror-syncseceth",
            Mode::SyncFlush => "mirror-syncflush",
        }
    }

    fn sync(
        &self,
        media: &dyn Media,
        point: &SyncPoint<'_>,
    ) -> std::result::Result<(), MediaError> {
        if self.config.mode == Mode::Local {
            Self::flush_local(media, point);
            return media.drain();
        }
        // Errors of the link never fail a sync point: it is then made durable locally. Only
        // a membership that forbids acknowledging (this primary was deposed) fails it.
        if self.sync_inner(media, point)? {
            media.drain()
        } else {
            Ok(())
        }
    }
}
