//! The mirror's side: wait until the primary's lease expires, and take its role if (and only
//! if) the configuration says this mirror was in sync.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use crate::config::ClusterConfig;
use crate::control::Control;
use crate::error::Result;

/// How often the mirror checks without a watch event (a watch that broke, a missed event).
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

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
/// epoch (no mirror). `eligible` says whether this node holds a complete image.
pub fn try_take_over(
    control: &Control,
    mirror: &str,
    new_primary: &str,
    eligible: &dyn Fn() -> bool,
) -> Result<Verdict> {
    let Some((config, revision)) = control.load()? else {
        return Ok(Verdict::Wait("no configuration yet".into()));
    };
    if config.mirror.as_deref() != Some(mirror) {
        return Ok(Verdict::Wait(format!(
            "the configuration (epoch {}) names {:?} as mirror, not {mirror}",
            config.epoch, config.mirror
        )));
    }
    if let Some(alive) = control.alive()? {
        return Ok(Verdict::Wait(format!("the primary is alive ({alive})")));
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
    let next = ClusterConfig {
        epoch: config.epoch + 1,
        primary: new_primary.to_string(),
        mirror: None,
        mirror_in_sync: false,
        backups: config.backups.clone(),
        // No mirror yet: the new primary runs alone until one joins (a new epoch then).
        mode: "local".into(),
    };
    if control.swap(revision, &next)? {
        Ok(Verdict::Promoted(next))
    } else {
        Ok(Verdict::Refused(
            "another change of the configuration came first".into(),
        ))
    }
}

/// Check at every change of the liveness key and every [`CHECK_EVERY`] until this mirror is
/// promoted; returns the new configuration. etcd errors are logged and retried.
pub fn await_takeover(
    control: &Control,
    mirror: &str,
    new_primary: &str,
    eligible: &dyn Fn() -> bool,
) -> Result<ClusterConfig> {
    let (wake, woken) = std::sync::mpsc::channel();
    control.watch_alive(wake)?;
    let mut said = String::new();
    loop {
        let note = match try_take_over(control, mirror, new_primary, eligible) {
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
        match woken.recv_timeout(CHECK_EVERY) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(CHECK_EVERY);
            }
        }
    }
}
