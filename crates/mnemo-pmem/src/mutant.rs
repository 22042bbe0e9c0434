//! Deliberately broken variants ("mutants") that the crash-simulator harness must catch.
//!
//! Production builds compile every [`active`] check to `false`. With the `mutants` feature
//! (enabled only by test harnesses), a test switches one mutant on by name for the length of
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
];

#[cfg(feature = "mutants")]
mod imp {
    use std::cell::Cell;

    thread_local! {
        // Per thread, so tests running in parallel never see each other's mutant.
        static ACTIVE: Cell<Option<&'static str>> = const { Cell::new(None) };
    }

    pub fn active(name: &str) -> bool {
        ACTIVE.with(|a| a.get().is_some_and(|m| m == name))
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

/// Whether the mutant `name` is switched on (always `false` without the `mutants` feature).
#[inline(always)]
pub fn active(name: &str) -> bool {
    #[cfg(feature = "mutants")]
    {
        imp::active(name)
    }
    #[cfg(not(feature = "mutants"))]
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
