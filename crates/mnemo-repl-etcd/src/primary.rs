//! The primary's side: take (or keep) the primary's role in the configuration, hold the
//! liveness lease, and record whether the mirror is in sync, as the replicating policy's
//! [`Membership`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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

/// A primary's membership of its cluster.
#[derive(Debug)]
pub struct PrimaryMembership {
    control: Arc<Control>,
    me: String,
    epoch: u64,
    lease: Arc<Lease>,
    deposed: AtomicBool,
    reason: Mutex<String>,
}

impl PrimaryMembership {
    /// Take the primary's role: create the configuration (epoch 1) if there is none, keep it
    /// if it names this node already (a restart; a changed mirror or mode is a new epoch),
    /// and refuse if it names another primary (a mirror was promoted over this node). Then
    /// hold the liveness lease.
    pub fn start(control: Arc<Control>, role: &PrimaryRole) -> Result<Arc<PrimaryMembership>> {
        let epoch = claim(&control, role)?;
        let lease = control.hold_alive(format!("{} epoch {epoch}", role.me), role.ttl_s)?;
        tracing::info!(primary = %role.me, epoch, lease = lease.id(), "primary of its cluster in etcd");
        Ok(Arc::new(PrimaryMembership {
            control,
            me: role.me.clone(),
            epoch,
            lease,
            deposed: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
        }))
    }

    /// The epoch this primary serves (its records carry it).
    pub fn epoch(&self) -> u64 {
        self.epoch
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
                self.me, self.epoch
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
    /// provided it still names this primary at its epoch.
    fn update(
        &self,
        change: impl Fn(&mut ClusterConfig) -> bool,
    ) -> std::result::Result<(), String> {
        if let Some(reason) = self.deposed() {
            return Err(reason);
        }
        for _ in 0..SWAP_ATTEMPTS {
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
            if config.primary != self.me || config.epoch != self.epoch {
                return Err(self.depose(format!(
                    "deposed: epoch {} has {} as primary; this node ({}) served epoch {}",
                    config.epoch, config.primary, self.me, self.epoch
                )));
            }
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
}

impl Membership for PrimaryMembership {
    fn mirror_in_sync(&self) {
        let set = |c: &mut ClusterConfig| {
            let changed = !c.mirror_in_sync;
            c.mirror_in_sync = true;
            changed
        };
        match self.update(set) {
            Ok(()) => tracing::info!(
                epoch = self.epoch,
                "recorded in etcd: the mirror is in sync"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot record in etcd that the mirror is in sync (it will not be promoted)")
            }
        }
    }

    fn mirror_lost(&self) -> std::result::Result<(), String> {
        let clear = |c: &mut ClusterConfig| {
            let changed = c.mirror_in_sync;
            c.mirror_in_sync = false;
            changed
        };
        self.update(clear)?;
        tracing::warn!(
            epoch = self.epoch,
            "recorded in etcd: the mirror is not in sync; going on without it"
        );
        Ok(())
    }

    fn may_acknowledge(&self) -> std::result::Result<(), String> {
        match self.deposed() {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
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
