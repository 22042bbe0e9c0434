//! Deliberately broken variants ("mutants") that the crash-simulator harness must catch.
//!
//! Production builds compile every [`active`] check to `false`: it needs the `mutants`
//! feature and debug assertions, so no release build has a mutant, even one Cargo built with
//! the feature (`scripts/check-no-mutants.sh`, run by `scripts/test.sh`, checks `mnemo` and
//! `libmnemo.so`). With the feature (enabled only by test harnesses), a test switches one mutant on by name for the length of
//! a closure (`with`); the code at that site then misbehaves the way a real bug would
//! (skip a flush, write a commit record before its data, skip a checksum). A mutant that
//! the harness does not catch means the harness is wrong.
//!
//! Names are `"layer.what"`, e.g. `"header.skip_checksum"`. Each layer lists its own in its
//! docs; [`KNOWN`] lists those of this crate.

/// Mutants of the media layer.
pub const KNOWN: &[&str] = &[
    // Header decode accepts a copy whose checksum does not match.
    "header.skip_checksum",
    // Grow records the new size in the header before the file has grown.
    "grow.header_first",
    // A header copy is written but never flushed.
    "header.skip_flush",
    // A sync point takes the dirty bitmap before the PAGEMAP_SCAN results are added to it,
    // so raw stores found by the scan are flushed one sync point late.
    "spf.collect_before_scan",
    // A header copy is made durable by the medium directly, outside the sync policy: locally
    // correct, but a replica never receives it (only the shadow replica can catch this).
    "header.outside_policy",
    // A sync point hides its staged ranges from the policy: the policy's fence still makes
    // them durable locally, but a replica never receives them (shadow replica only).
    "sync.staged_unnamed",
    // gmsync writes no journal record: stores written back early are not rolled back.
    "journal.skip_record",
    // A sync point over bytes of the newest gmsync record does not release it: recovery
    // puts the older bytes back over newer durable ones.
    "journal.skip_release",
    // The write-ahead policy acknowledges a sync point before its record is durable.
    "wal.ack_before_sync",
    // A checkpoint moves the write-ahead file to its next epoch (its records dead) without
    // making the pool durable in place first.
    "wal.checkpoint_skip_pool",
    // Opening a pool does not replay its write-ahead records.
    "wal.skip_replay",
    // Opening a pool replays only the header's epoch, not the next one's records (written
    // after a switch whose checkpoint had not ended).
    "wal.replay_one_epoch",
    // Under deferred acknowledgements the durable mark reads as the appended one: what was
    // acknowledged on it may be lost.
    "wal.deferred_durable_early",
    // The group commit's leader (under deferred acknowledgements, the syncer thread) raises
    // the durable mark before it writes and syncs the group's records: a reader of the marks
    // in between acknowledges what a crash can lose. Only another thread can read them in
    // between: caught by the kv server's group commit under shuttle (`CONCURRENCY_MUTANTS`).
    "wal.durable_before_sync",
];

/// The mutants of [`KNOWN`] that only a concurrent schedule can catch (the window they open
/// is seen only by another thread): caught by `crates/mnemo-kv/tests/group_commit.rs` under
/// `--cfg mnemo_shuttle` (`scripts/test-shuttle.sh`), not by the single-threaded workloads.
pub const CONCURRENCY_MUTANTS: &[&str] = &["wal.durable_before_sync"];

#[cfg(feature = "mutants")]
mod imp {
    use std::cell::Cell;

    thread_local! {
        // Per thread, so tests running in parallel never see each other's mutant.
        static ACTIVE: Cell<Option<&'static str>> = const { Cell::new(None) };
    }

    // Unused in a build without debug assertions: `super::active` is `false` there.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pub fn active(name: &str) -> bool {
        ACTIVE.with(|a| a.get().is_some_and(|m| m == name))
    }

    pub fn current() -> Option<&'static str> {
        ACTIVE.with(Cell::get)
    }

    pub fn with<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
        struct Reset(Option<&'static str>);
        impl Drop for Reset {
            fn drop(&mut self) {
                ACTIVE.with(|a| a.set(self.0));
            }
        }
        let _reset = Reset(ACTIVE.with(|a| a.replace(Some(name))));
        f()
    }
}

/// Whether the mutant `name` is switched on: always `false` without the `mutants` feature,
/// and always `false` in a build without debug assertions (any release build), whatever its
/// features. Cargo unifies features across the packages one command builds, so a release
/// `mnemo` built in the same command as the tests would otherwise carry the mutants;
/// `scripts/check-no-mutants.sh` checks the product binaries hold none of their names.
#[inline(always)]
pub fn active(name: &str) -> bool {
    #[cfg(all(feature = "mutants", debug_assertions))]
    {
        imp::active(name)
    }
    #[cfg(not(all(feature = "mutants", debug_assertions)))]
    {
        let _ = name;
        false
    }
}

/// Run `f` with the mutant `name` switched on. The switch is per thread: only code
/// running on the calling thread misbehaves, so tests may run in parallel. Requires the `mutants` feature.
#[cfg(feature = "mutants")]
pub fn with<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    imp::with(name, f)
}

/// The mutant switched on on this thread, if any: for a workload that runs part of its work
/// on threads of its own, which must switch it on there too (the switch is per thread).
/// Requires the `mutants` feature.
#[cfg(feature = "mutants")]
pub fn current() -> Option<&'static str> {
    imp::current()
}

/// A durability call site: a flush (staging), a fence or a sync point of the layers that
/// make data durable (mnemo-pmem, mnemo-log, mnemo-heap, mnemo-ffi). Each carries an id,
/// `"layer.what"`, unique in the workspace. With the `mutants` feature the mutant
/// `"site:<id>"` removes the call (it evaluates to `Ok(())`, or to the given replacement:
/// a plain write for a copy that also stages). Without the feature it is the call itself.
///
/// The crash tests of each layer find every site in their crate's sources and remove each in
/// turn: the harness must catch every one, or the site is redundant and goes (the sweep
/// reports sites, caught, and the redundant ones removed, with the argument, in
/// `docs/design/durability-sites.md`).
#[macro_export]
macro_rules! durable_site {
    ($id:literal, $call:expr) => {
        $crate::durable_site!($id, $call, Ok(()))
    };
    ($id:literal, $call:expr, $instead:expr) => {
        if $crate::mutant::active(concat!("site:", $id)) {
            $instead
        } else {
            $call
        }
    };
}

/// The ids of every [`durable_site!`] in the Rust sources under `dir` (recursively), in
/// file order: what a site sweep removes in turn. For tests (it reads source files).
pub fn sites_in(dir: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut ids = Vec::new();
    let marker = "durable_site!(";
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (at, _) in text.match_indices(marker) {
            // The id is the first argument, a string literal (formatting may break the line).
            let rest = text[at + marker.len()..].trim_start();
            let Some(rest) = rest.strip_prefix('"') else {
                continue;
            };
            // Ids are "layer.what" in lower case (this skips the marker's own literal).
            let id = rest.find('"').map(|end| &rest[..end]).filter(|id| {
                id.contains('.')
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._".contains(&b))
            });
            if let Some(id) = id {
                ids.push(id.to_string());
            }
        }
    }
    ids
}
