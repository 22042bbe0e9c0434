//! The mirror's side: wait until the primary's lease expires, and take its role if (and only
//! if) the configuration says this mirror was in sync.

use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use crate::config::ClusterConfig;
use crate::control::Control;
use crate::error::Result;

/// How often the mirror checks without a watch event (a watch that broke, a missed event).
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// How long the primary's liveness key must have been seen gone before [`await_takeover`]
/// takes over. A lease that expired stays gone; one that etcd revoked early (etcd 3.4.23
/// revokes every lease a leader held when that leader comes back from a stop longer than
/// their TTL: etcd issue 15247) is put back by its primary within milliseconds of the
/// deletion ([`Control::hold_alive`]), and the mirror, which saw the deletion as soon, must
/// not take over meanwhile. The failover takes this much longer.
pub const GONE_FOR: Duration = Duration::from_millis(500);

/// What one check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// This node is now the primary, at the returned configuration.
    Promoted(ClusterConfig),
    /// Nothing to do (the primary is alive, there is no configuration yet, ...).
    Wait(String),
    /// The primary is gone but this mirror may not replace it (not in sync, not the
    /// configuration's mirror, no complete image, or another candidate won).
    Refused(String),
}

/// One check: if the primary's liveness key is gone and the configuration names `mirror` as
/// a mirror in sync, swap in a configuration with `new_primary` as the primary at the next
/// epoch. `eligible` says whether this node holds a complete image.
///
/// The second tier moves up in the same swap: the first of the configuration's backups that
/// is registered (alive, [`Control::register_node`]) becomes the new primary's mirror, out of
/// sync until the new primary's full copy, in the mode the cluster had; without one the new
/// primary runs alone (mode `local`) until a node joins.
pub fn try_take_over(
    control: &Control,
    mirror: &str,
    new_primary: &str,
    eligible: &dyn Fn() -> bool,
) -> Result<Verdict> {
    check(control, mirror, new_primary, eligible, None)
}

/// [`try_take_over`], which with `gone_since` (when the liveness key was first seen gone,
/// since it was last seen) promotes only once the key has been seen gone for [`GONE_FOR`],
/// by the same read that finds it gone: a read made before the check could see the key
/// still there, and the check's own read a moment later see it gone.
fn check(
    control: &Control,
    mirror: &str,
    new_primary: &str,
    eligible: &dyn Fn() -> bool,
    gone_since: Option<&mut Option<Instant>>,
) -> Result<Verdict> {
    let Some((config, revision)) = control.load()? else {
        return Ok(Verdict::Wait("no configuration yet".into()));
    };
    if config.primary == new_primary && config.mirror.as_deref() != Some(mirror) && eligible() {
        // This node's own swap committed, but its answer was lost (the member asked was cut
        // off from its peers after passing the request on, and the request timed out): the
        // configuration names this node as primary, and nobody else will serve it.
        tracing::warn!(
            epoch = config.epoch,
            primary = new_primary,
            "the configuration names this node as primary already: taking the role"
        );
        return Ok(Verdict::Promoted(config));
    }
    if config.mirror.as_deref() != Some(mirror) {
        return Ok(Verdict::Wait(format!(
            "the configuration (epoch {}) names {:?} as mirror, not {mirror}",
            config.epoch, config.mirror
        )));
    }
    if let Some(alive) = control.alive()? {
        if let Some(gone_since) = gone_since {
            *gone_since = None;
        }
        return Ok(Verdict::Wait(format!("the primary is alive ({alive})")));
    }
    if let Some(gone_since) = gone_since {
        if gone_since.get_or_insert_with(Instant::now).elapsed() < GONE_FOR {
            return Ok(Verdict::Wait(format!(
                "the primary's liveness key is gone: taking over if it stays gone {GONE_FOR:?}"
            )));
        }
    }
    if !config.mirror_in_sync {
        return Ok(Verdict::Refused(format!(
            "the primary {} (epoch {}) is gone, but it recorded this mirror as not in sync: promoting it could lose acknowledged writes",
            config.primary, config.epoch
        )));
    }
    if !eligible() {
        return Ok(Verdict::Refused(
            "the primary is gone, but this mirror holds no complete image".into(),
        ));
    }
    let registered = control.nodes()?;
    let next_mirror = config
        .backups
        .iter()
        .find(|b| b.as_str() != mirror && registered.iter().any(|(addr, _)| addr == *b))
        .cloned();
    let next = ClusterConfig {
        epoch: config.epoch + 1,
        primary: new_primary.to_string(),
        backups: config
            .backups
            .iter()
            .filter(|b| Some(*b) != next_mirror.as_ref() && b.as_str() != mirror)
            .cloned()
            .collect(),
        // No mirror: the new primary runs alone until a node joins (a new epoch then).
        mode: if next_mirror.is_some() {
            config.mode.clone()
        } else {
            "local".into()
        },
        mirror: next_mirror,
        mirror_in_sync: false,
    };
    if control.swap(revision, &next)? {
        Ok(Verdict::Promoted(next))
    } else {
        Ok(Verdict::Refused(
            "another change of the configuration came first".into(),
        ))
    }
}

/// Record `backups` (the backups this mirror feeds) in the configuration, if it names
/// `mirror` as its mirror and lists others; a compare-and-swap that keeps the epoch (no
/// node's right to write changes). Ok(true) if it changed anything.
pub fn publish_backups(control: &Control, mirror: &str, backups: &[String]) -> Result<bool> {
    let Some((config, revision)) = control.load()? else {
        return Ok(false);
    };
    if config.mirror.as_deref() != Some(mirror) || config.backups == backups {
        return Ok(false);
    }
    let next = ClusterConfig {
        backups: backups.to_vec(),
        ..config
    };
    control.swap(revision, &next)
}

/// Check at every change of the liveness key and every [`CHECK_EVERY`] until this mirror is
/// promoted; returns the new configuration. etcd errors are logged and retried. The
/// liveness key must have been seen gone for [`GONE_FOR`] before a check may promote.
pub fn await_takeover(
    control: &Control,
    mirror: &str,
    new_primary: &str,
    eligible: &dyn Fn() -> bool,
) -> Result<ClusterConfig> {
    await_takeover_with(control, mirror, new_primary, &[], eligible)
}

/// [`await_takeover`] for a mirror that feeds `backups`: while it waits it keeps them in the
/// configuration ([`publish_backups`]), so that one of them moves up when it takes over.
pub fn await_takeover_with(
    control: &Control,
    mirror: &str,
    new_primary: &str,
    backups: &[String],
    eligible: &dyn Fn() -> bool,
) -> Result<ClusterConfig> {
    let (wake, woken) = std::sync::mpsc::channel();
    control.watch_alive(wake)?;
    let mut said = String::new();
    // When the liveness key was first seen gone (since it was last seen).
    let mut gone_since: Option<Instant> = None;
    loop {
        if !backups.is_empty() {
            match publish_backups(control, mirror, backups) {
                Ok(true) => {
                    tracing::info!(mirror, ?backups, "recorded this mirror's backups in etcd")
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "cannot record this mirror's backups in etcd"),
            }
        }
        let verdict = check(
            control,
            mirror,
            new_primary,
            eligible,
            Some(&mut gone_since),
        );
        // Within the grace, the next check when it ends.
        let waiting = gone_since.and_then(|since| GONE_FOR.checked_sub(since.elapsed()));
        let note = match verdict {
            Ok(Verdict::Promoted(config)) => return Ok(config),
            Ok(Verdict::Wait(why)) => why,
            Ok(Verdict::Refused(why)) => {
                if why != said {
                    tracing::warn!("not promoting: {why}");
                }
                why
            }
            Err(e) => format!("etcd: {e}"),
        };
        if note != said {
            tracing::info!(mirror, "failover watch: {note}");
            said = note;
        }
        match woken.recv_timeout(waiting.map_or(CHECK_EVERY, |left| left.min(CHECK_EVERY))) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(CHECK_EVERY);
            }
        }
    }
}
