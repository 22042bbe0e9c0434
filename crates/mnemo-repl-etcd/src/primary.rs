//! The primary's side: take (or keep) the primary's role in the configuration, hold the
//! liveness lease, and record whether the mirror is in sync, as the replicating policy's
//! [`Membership`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mnemo_repl::Membership;

use crate::config::ClusterConfig;
use crate::control::{Control, Lease};
use crate::error::{Error, Result};

/// Attempts at one change of the configuration before giving up (each lost only to another
/// change made meanwhile).
const SWAP_ATTEMPTS: usize = 8;

/// What a primary asks for at start.
#[derive(Debug, Clone)]
pub struct PrimaryRole {
    /// Its client address (`mnemo serve`'s HOST:PORT): its name in the configuration.
    pub me: String,
    /// Its mirror's replication address, as `--mirror` spells it.
    pub mirror: Option<String>,
    /// The replication mode's name.
    pub mode: String,
    /// The liveness lease's TTL in seconds.
    pub ttl_s: i64,
}

/// How often a primary whose lease's last renewal ran out checks for the next one.
const FENCE_POLL: Duration = Duration::from_millis(5);

/// How soon a record of the mirror in sync that failed (etcd away) is tried again.
const IN_SYNC_RETRY: Duration = Duration::from_millis(200);

/// A record of the mirror in sync still to make: the epoch of the policy whose full copy was
/// acknowledged, and the count of losses recorded then (a later loss makes it stale).
#[derive(Debug, Default)]
struct InSyncRetry {
    pending: Option<(u64, u64)>,
    /// Whether a thread is retrying it.
    running: bool,
}

/// A primary's membership of its cluster.
#[derive(Debug)]
pub struct PrimaryMembership {
    control: Arc<Control>,
    me: String,
    /// The epoch this primary serves now: it rises when the primary takes a new mirror.
    epoch: AtomicU64,
    /// Held across every change of the configuration, so that a change of the epoch made
    /// here is never mistaken for another node's.
    changing: Mutex<()>,
    lease: Arc<Lease>,
    /// How long a sync point waits for a renewal once the last one ran out (the TTL).
    renewal_wait: Duration,
    deposed: AtomicBool,
    reason: Mutex<String>,
    /// Losses of the mirror recorded (or attempted) so far: a record of the mirror in sync
    /// made late must not follow a loss.
    losses: AtomicU64,
    in_sync_retry: Mutex<InSyncRetry>,
    /// This membership itself, for the thread that retries a record of the mirror in sync.
    me_arc: Weak<PrimaryMembership>,
}

impl PrimaryMembership {
    /// Take the primary's role: create the configuration (epoch 1) if there is none, keep it
    /// if it names this node already (a restart; a changed mirror or mode is a new epoch),
    /// and refuse if it names another primary (a mirror was promoted over this node). Then
    /// hold the liveness lease.
    pub fn start(control: Arc<Control>, role: &PrimaryRole) -> Result<Arc<PrimaryMembership>> {
        let epoch = claim(&control, role)?;
        let lease =
            control.hold_alive(format!("{} epoch {epoch}", role.me), role.ttl_s, &role.me)?;
        tracing::info!(primary = %role.me, epoch, lease = lease.id(), "primary of its cluster in etcd");
        Ok(Arc::new_cyclic(|me_arc| PrimaryMembership {
            control,
            me: role.me.clone(),
            epoch: AtomicU64::new(epoch),
            changing: Mutex::new(()),
            lease,
            renewal_wait: Duration::from_secs(role.ttl_s.max(1) as u64),
            deposed: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
            losses: AtomicU64::new(0),
            in_sync_retry: Mutex::new(InSyncRetry::default()),
            me_arc: me_arc.clone(),
        }))
    }

    /// The epoch this primary serves (its records carry it).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// The control plane's connection.
    pub fn control(&self) -> &Arc<Control> {
        &self.control
    }

    /// Its liveness lease (a new one once etcd revoked one early: [`Control::hold_alive`]).
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// This primary's name in the configuration.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// A [`Membership`] for a policy replicating at `epoch`: what it records counts only
    /// while `epoch` is this primary's (a policy replaced by one for a newer mirror can no
    /// longer mark anything in sync).
    pub fn at_epoch(self: &Arc<Self>, epoch: u64) -> Arc<dyn Membership> {
        Arc::new(EpochMembership {
            primary: Arc::clone(self),
            epoch,
        })
    }

    /// Take `mirror` as this primary's mirror, if the configuration has none, or names
    /// `replacing` out of sync (a mirror gone for good cannot be promoted, and keeps no other
    /// from joining): a new configuration (epoch + 1, the mirror out of sync until its full
    /// copy, `mode`), by compare-and-swap. Returns the new epoch, or None if the
    /// configuration names another mirror. A policy replicating to `mirror` must carry the
    /// new epoch.
    pub fn adopt_mirror(
        &self,
        mirror: &str,
        mode: &str,
        replacing: Option<&str>,
    ) -> std::result::Result<Option<u64>, String> {
        let _changing = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(reason) = self.deposed() {
            return Err(reason);
        }
        for _ in 0..SWAP_ATTEMPTS {
            let (config, revision) = self.current()?;
            let replaceable = match config.mirror.as_deref() {
                None => true,
                Some(named) => Some(named) == replacing && !config.mirror_in_sync,
            };
            if !replaceable {
                return Ok(None);
            }
            let next = ClusterConfig {
                epoch: config.epoch + 1,
                mirror: Some(mirror.to_string()),
                mirror_in_sync: false,
                backups: config
                    .backups
                    .iter()
                    .filter(|b| *b != mirror)
                    .cloned()
                    .collect(),
                mode: mode.to_string(),
                ..config
            };
            match self.control.swap(revision, &next) {
                Ok(true) => {
                    self.epoch.store(next.epoch, Ordering::SeqCst);
                    tracing::info!(
                        epoch = next.epoch,
                        mirror,
                        mode,
                        "recorded in etcd: a new mirror (out of sync until its full copy)"
                    );
                    return Ok(Some(next.epoch));
                }
                Ok(false) => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the configuration kept changing under this primary".into())
    }

    /// The configuration, provided it still names this primary at its epoch (else this
    /// primary is deposed).
    fn current(&self) -> std::result::Result<(ClusterConfig, i64), String> {
        let (config, revision) = match self.control.load() {
            Ok(Some(found)) => found,
            Ok(None) => {
                return Err(self.depose(format!(
                    "the cluster's configuration ({}) is gone",
                    self.control.keys().config
                )))
            }
            Err(e) => return Err(e.to_string()),
        };
        let epoch = self.epoch();
        if config.primary != self.me || config.epoch != epoch {
            return Err(self.depose(format!(
                "deposed: epoch {} has {} as primary; this node ({}) served epoch {epoch}",
                config.epoch, config.primary, self.me
            )));
        }
        Ok((config, revision))
    }

    /// Whether this primary may acknowledge now: not deposed, and its lease's last renewal
    /// still holds. A renewal that is late (etcd away, a leader election) is waited for, at
    /// most a TTL; without one this primary fences itself for good: the store may let its
    /// lease expire and a mirror take over at any moment from then on.
    fn fence(&self) -> std::result::Result<(), String> {
        if let Some(reason) = self.deposed() {
            return Err(reason);
        }
        if self.lease.valid() {
            return Ok(());
        }
        let waiting = Instant::now();
        let renewals = self.lease.renewals();
        while waiting.elapsed() < self.renewal_wait {
            std::thread::sleep(FENCE_POLL);
            if self.lease.renewals() != renewals && self.lease.valid() {
                return Ok(());
            }
            if let Some(reason) = self.deposed() {
                return Err(reason);
            }
        }
        Err(self.depose(format!(
            "fenced: the liveness lease of {} (epoch {}) was not renewed within its TTL; etcd may have let it expire",
            self.me,
            self.epoch()
        )))
    }

    /// Why this primary may no longer acknowledge anything, if so: its lease was lost, or
    /// the configuration names another primary or a newer epoch.
    pub fn deposed(&self) -> Option<String> {
        if self.deposed.load(Ordering::SeqCst) {
            return Some(
                self.reason
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            );
        }
        if self.lease.is_lost() {
            return Some(format!(
                "the liveness lease of {} (epoch {}) was lost: a mirror may have been promoted",
                self.me,
                self.epoch()
            ));
        }
        None
    }

    fn depose(&self, reason: String) -> String {
        tracing::error!("{reason}");
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason.clone();
        self.deposed.store(true, Ordering::SeqCst);
        reason
    }

    /// Change the configuration with `change` (false: nothing to change) by compare-and-swap,
    /// provided it still names this primary at `epoch` (a policy of an older epoch changes
    /// nothing: Ok).
    fn update(
        &self,
        epoch: u64,
        change: impl Fn(&mut ClusterConfig) -> bool,
    ) -> std::result::Result<(), String> {
        let _changing = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(reason) = self.deposed() {
            return Err(reason);
        }
        if epoch != self.epoch() {
            return Ok(());
        }
        for _ in 0..SWAP_ATTEMPTS {
            let (config, revision) = self.current()?;
            let mut next = config.clone();
            if !change(&mut next) {
                return Ok(());
            }
            match self.control.swap(revision, &next) {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the configuration kept changing under this primary".into())
    }

    /// Record the mirror of the policy of `epoch` in sync (its full copy acknowledged). A
    /// record that fails (etcd away longer than a request's timeout, while the lease still
    /// holds) is tried again in the background until it is made, this primary is deposed or
    /// moves to another epoch, or a loss of the mirror is recorded meanwhile: before, it was
    /// only logged, and the configuration said "not in sync" for as long as the link stayed
    /// up, so the mirror, holding every write, was never promoted when the primary died.
    fn record_in_sync(&self, epoch: u64) {
        let losses = self.losses.load(Ordering::SeqCst);
        match self.record_in_sync_unless_lost(epoch, losses) {
            Ok(_) => tracing::info!(epoch, "recorded in etcd: the mirror is in sync"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot record in etcd that the mirror is in sync (it is not promoted until it is); trying again");
                self.retry_in_sync(epoch, losses);
            }
        }
    }

    /// Set `mirror_in_sync`, provided no loss was recorded since `losses` were counted
    /// (checked under the lock every change of the configuration takes, which a loss's
    /// record takes too). Ok(false): stale, nothing done.
    fn record_in_sync_unless_lost(
        &self,
        epoch: u64,
        losses: u64,
    ) -> std::result::Result<bool, String> {
        let stale = AtomicBool::new(false);
        let set = |c: &mut ClusterConfig| {
            if self.losses.load(Ordering::SeqCst) != losses {
                stale.store(true, Ordering::SeqCst);
                return false;
            }
            let changed = !c.mirror_in_sync;
            c.mirror_in_sync = true;
            changed
        };
        self.update(epoch, set)?;
        Ok(!stale.load(Ordering::SeqCst))
    }

    /// Try the record of the mirror in sync again, every [`IN_SYNC_RETRY`], on a thread of
    /// its own (one at a time; the newest record asked for is the one made).
    fn retry_in_sync(&self, epoch: u64, losses: u64) {
        let Some(me) = self.me_arc.upgrade() else {
            return;
        };
        let mut retry = self.in_sync_retry.lock().unwrap_or_else(|p| p.into_inner());
        retry.pending = Some((epoch, losses));
        if retry.running {
            return;
        }
        retry.running = true;
        drop(retry);
        let spawned = std::thread::Builder::new()
            .name("mnemo-etcd-in-sync".into())
            .spawn(move || me.retry_in_sync_loop());
        if spawned.is_err() {
            tracing::warn!("cannot spawn the thread that records the mirror in sync again");
            self.in_sync_retry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .running = false;
        }
    }

    fn retry_in_sync_loop(&self) {
        loop {
            std::thread::sleep(IN_SYNC_RETRY);
            let pending = {
                let mut retry = self.in_sync_retry.lock().unwrap_or_else(|p| p.into_inner());
                match retry.pending {
                    Some(p) if self.deposed().is_none() => p,
                    _ => {
                        retry.pending = None;
                        retry.running = false;
                        return;
                    }
                }
            };
            let (epoch, losses) = pending;
            let outcome = if epoch != self.epoch() || self.losses.load(Ordering::SeqCst) != losses {
                Ok(false)
            } else {
                self.record_in_sync_unless_lost(epoch, losses)
            };
            match outcome {
                Ok(made) => {
                    if made {
                        tracing::info!(epoch, "recorded in etcd: the mirror is in sync (at last)");
                    }
                    let mut retry = self.in_sync_retry.lock().unwrap_or_else(|p| p.into_inner());
                    if retry.pending == Some(pending) {
                        retry.pending = None;
                    }
                }
                Err(e) => tracing::debug!(error = %e, "recording the mirror in sync: not yet"),
            }
        }
    }

    fn record_lost(&self, epoch: u64) -> std::result::Result<(), String> {
        // Counted first: a record of the mirror in sync retried from now on is stale.
        self.losses.fetch_add(1, Ordering::SeqCst);
        let clear = |c: &mut ClusterConfig| {
            let changed = c.mirror_in_sync;
            c.mirror_in_sync = false;
            changed
        };
        self.update(epoch, clear)?;
        tracing::warn!(
            epoch,
            "recorded in etcd: the mirror is not in sync; going on without it"
        );
        Ok(())
    }
}

/// [`PrimaryMembership`] as seen by the policy of one epoch ([`PrimaryMembership::at_epoch`]).
#[derive(Debug)]
struct EpochMembership {
    primary: Arc<PrimaryMembership>,
    epoch: u64,
}

impl Membership for EpochMembership {
    fn mirror_in_sync(&self) {
        self.primary.record_in_sync(self.epoch);
    }

    fn mirror_lost(&self) -> std::result::Result<(), String> {
        self.primary.record_lost(self.epoch)
    }

    fn may_acknowledge(&self) -> std::result::Result<(), String> {
        self.primary.fence()
    }
}

impl Membership for PrimaryMembership {
    fn mirror_in_sync(&self) {
        self.record_in_sync(self.epoch());
    }

    fn mirror_lost(&self) -> std::result::Result<(), String> {
        self.record_lost(self.epoch())
    }

    fn may_acknowledge(&self) -> std::result::Result<(), String> {
        self.fence()
    }
}

/// The epoch at which `role.me` is the primary, creating or changing the configuration.
fn claim(control: &Control, role: &PrimaryRole) -> Result<u64> {
    for _ in 0..SWAP_ATTEMPTS {
        let Some((config, revision)) = control.load()? else {
            let first = ClusterConfig {
                epoch: 1,
                primary: role.me.clone(),
                mirror: role.mirror.clone(),
                mirror_in_sync: false,
                backups: Vec::new(),
                mode: role.mode.clone(),
            };
            if control.create(&first)? {
                return Ok(1);
            }
            continue;
        };
        if config.primary != role.me {
            return Err(Error::Role(format!(
                "refused: the cluster's configuration (epoch {}) names {} as primary, not {}; a mirror was promoted over this node, which must not serve (stale epoch). Make it a mirror of the new primary, or change the configuration by hand",
                config.epoch, config.primary, role.me
            )));
        }
        if config.mirror == role.mirror && config.mode == role.mode {
            return Ok(config.epoch);
        }
        // A new mirror (or mode): a new configuration, whose epoch the new links carry.
        let next = ClusterConfig {
            epoch: config.epoch + 1,
            mirror: role.mirror.clone(),
            mirror_in_sync: false,
            mode: role.mode.clone(),
            ..config
        };
        if control.swap(revision, &next)? {
            return Ok(next.epoch);
        }
    }
    Err(Error::Etcd(
        "the configuration kept changing while this primary started".into(),
    ))
}
