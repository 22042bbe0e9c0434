//! The primary's sync policy under etcd: its mirror may change while it serves (a node joins
//! a primary that runs alone, a backup moves up after a failover). Each mirror is served by a
//! [`MirrorPolicy`] at the epoch that named it; the switch hands every sync point to the
//! current one, or makes it durable here alone while there is none.

use std::sync::{Arc, Mutex};

use mnemo_pmem::error::MediaError;
use mnemo_pmem::{LocalPolicy, Media, SyncPoint, SyncPolicy};
use mnemo_repl::{Membership, MirrorPolicy};

#[derive(Debug, Default)]
struct Slots {
    current: Option<Arc<MirrorPolicy>>,
    /// Installed at the next sync point (which needs the pool to close the current one).
    pending: Option<Arc<MirrorPolicy>>,
}

/// A [`SyncPolicy`] whose mirror can be replaced ([`SwitchPolicy::replace`]).
#[derive(Debug, Default)]
pub struct SwitchPolicy {
    slots: Mutex<Slots>,
    /// Asked before a sync point is acknowledged without a mirror (a mirror's policy asks
    /// its own): a primary deposed, or whose lease ran out, acknowledges nothing.
    fence: Option<Arc<dyn Membership>>,
}

impl SwitchPolicy {
    /// A switch replicating with `initial` (None: durable here alone until a mirror comes).
    pub fn new(initial: Option<Arc<MirrorPolicy>>) -> SwitchPolicy {
        SwitchPolicy {
            slots: Mutex::new(Slots {
                current: initial,
                pending: None,
            }),
            fence: None,
        }
    }

    /// Ask `membership` before acknowledging a sync point without a mirror.
    pub fn with_fence(mut self, membership: Arc<dyn Membership>) -> SwitchPolicy {
        self.fence = Some(membership);
        self
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The policy sync points go to now (the newest one once a sync point installed it).
    pub fn current(&self) -> Option<Arc<MirrorPolicy>> {
        let slots = self.slots();
        slots.pending.clone().or_else(|| slots.current.clone())
    }

    /// Replicate with `next` from the next sync point on. The policy it replaces is closed
    /// there first (in `sync` mode: every line of the pool flushed here), so nothing that
    /// only the old mirror held is left undurable.
    pub fn replace(&self, next: Arc<MirrorPolicy>) {
        self.slots().pending = Some(next);
    }

    /// Whether an empty sync point would do something now: install a new mirror's policy, or
    /// let the current one finish getting its link back with a full copy
    /// ([`MirrorPolicy::wants_sync_point`]). The owner of an idle pool makes one then, so
    /// that a mirror is brought up to date without waiting for the next write.
    pub fn wants_sync_point(&self) -> bool {
        let slots = self.slots();
        slots.pending.is_some() || slots.current.as_ref().is_some_and(|p| p.wants_sync_point())
    }
}

impl SyncPolicy for SwitchPolicy {
    fn name(&self) -> &'static str {
        self.current().map_or("local", |p| p.name())
    }

    fn sync(&self, media: &dyn Media, point: &SyncPoint<'_>) -> Result<(), MediaError> {
        let (policy, retired) = {
            let mut slots = self.slots();
            let retired = match slots.pending.take() {
                Some(next) => slots.current.replace(next),
                None => None,
            };
            (slots.current.clone(), retired)
        };
        if let Some(old) = retired {
            old.close(media)?;
        }
        match policy {
            Some(p) => p.sync(media, point),
            None => {
                if let Some(fence) = &self.fence {
                    fence.may_acknowledge().map_err(|reason| MediaError::Io {
                        op: "replication (this primary may not acknowledge)",
                        source: std::io::Error::other(reason),
                    })?;
                }
                LocalPolicy.sync(media, point)
            }
        }
    }

    fn close(&self, media: &dyn Media) -> Result<(), MediaError> {
        let slots = self.slots();
        for p in slots.current.iter().chain(&slots.pending) {
            p.close(media)?;
        }
        Ok(())
    }
}
