//! Sweeps of deliberately broken variants: every named mutant or durability site of a layer
//! switched on in turn, each of which the layer's crash workloads must catch.
//!
//! A variant counts as caught only when an image fails its check ([`Report::first_caught`]: a
//! crash image or the shadow replica), never because a workload errored on its own. Variants
//! the workloads are known not to reach are listed with the reason (`uncaught`): they are
//! tried only in soak runs (each costs a full exploration), where they must still be missed,
//! or the sweep asks for them to leave the list.

use std::path::Path;

use crate::explore::{soak, Failure, Report};

impl Report {
    /// The first failure that is an image failing its check (a crash image or the shadow
    /// replica), not a run that failed on its own.
    pub fn first_caught(&self) -> Option<&Failure> {
        self.failures
            .iter()
            .find(|f| f.point.is_some() || f.shadow.is_some())
    }
}

/// The durability sites (`mnemo_pmem::durable_site!`) in the sources under `src`, as the
/// mutant names that remove them (`site:<id>`). Panics if an id repeats or fewer than `min`
/// are found (a scan that finds nothing proves nothing).
pub fn site_mutants(src: &Path, min: usize) -> Vec<&'static str> {
    let ids = mnemo_pmem::mutant::sites_in(src);
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "site ids repeat: {ids:?}");
    assert!(
        ids.len() >= min,
        "found only {} sites in {}: {ids:?}",
        ids.len(),
        src.display()
    );
    ids.into_iter()
        .map(|id| &*Box::leak(format!("site:{id}").into_boxed_str()))
        .collect()
}

/// Switch each of `names` on in turn and require `caught_by` to catch it (it returns the
/// failure that did), except the `uncaught` ones (name, or site id without `site:`, with the
/// reason), which are tried only in soak runs and must then still be missed. Prints one line
/// per variant and a summary under `label`; panics listing what was missed.
pub fn assert_caught(
    label: &str,
    names: &[&'static str],
    uncaught: &[(&str, &str)],
    caught_by: impl Fn(&'static str) -> Option<String>,
) {
    let is = |name: &str, u: &str| name == u || name.strip_prefix("site:") == Some(u);
    let listed = |name: &str| uncaught.iter().any(|(u, _)| is(name, u));
    for (u, _) in uncaught {
        assert!(
            names.iter().any(|n| is(n, u)),
            "{label}: listed {u} is not among the variants any more"
        );
    }
    let (mut caught, mut missed) = (0, Vec::new());
    for &name in names {
        let known = listed(name);
        if known && !soak() {
            eprintln!("{name}: not caught (listed; tried in soak runs)");
            continue;
        }
        match caught_by(name) {
            Some(f) => {
                caught += 1;
                eprintln!("{name} caught: {}", f.lines().next().unwrap_or_default());
                assert!(!known, "{name} is caught now: take it off the list");
            }
            None if known => {}
            None => missed.push(name),
        }
    }
    eprintln!(
        "{label}: {}, caught {caught}, listed as not reached {}, missed {missed:?}",
        names.len(),
        uncaught.len()
    );
    assert!(missed.is_empty(), "{label}: not caught: {missed:?}");
}
