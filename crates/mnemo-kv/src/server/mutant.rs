//! Deliberately broken variants of the server, for proving that its tests can fail.
//!
//! The SIGKILL durability test (`crates/mnemo-cli/tests/serve_kill9.rs`) checks that every
//! acknowledged write survives a kill. A test that has never failed proves little, so the
//! same oracle is also run against a server that breaks the rule on purpose, and must report
//! lost acknowledged writes.
//!
//! Three locks keep these out of production:
//! - They are compiled only with this crate's `mutants` feature, which only test builds turn
//!   on (`mnemo-cli`'s dev-dependency on this crate). A release build (`cargo build --release
//!   -p mnemo-cli`, `cargo install`) has no code for them: [`from_env`] is then always `None`.
//! - Only in builds with debug assertions (the test profile): Cargo unifies features, so a
//!   release `mnemo` built in the same cargo command as the tests gets the `mutants` feature
//!   too; `cfg(debug_assertions)` keeps the code out of every release build all the same.
//! - Even when compiled in, one is active only when the environment variable
//!   [`ENV`] names it; the server then logs an error line at start saying so.
//!
//! A kill cannot lose a write that reached the pool's mapping and its commit record (the page
//! cache outlives the process): skipped flushes are invisible to it and are the crash
//! simulator's job (`mnemo_pmem::mutant`). What a kill catches is a reply that leaves before
//! the batch's transaction has committed, which is what [`Mutant::AckBeforeSync`] does.

use std::time::Duration;

/// The environment variable that switches a mutant on (only in builds with the `mutants`
/// feature).
pub const ENV: &str = "MNEMO_KV_MUTANT_UNSAFE";

/// A deliberately broken server behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// `ack_before_sync`: a batch's replies are written to the clients before its
    /// transaction commits, and the commit follows [`ACK_BEFORE_SYNC_DELAY`] later (standing
    /// for a slow sync point, such as `msync` of a disk file). A kill in between loses
    /// writes that clients saw acknowledged.
    AckBeforeSync,
    /// `release_unacked`: under deferred acknowledgements (`Engine::defer_acks`) a batch's
    /// replies leave as soon as its commit returns, before the storage says it is durable.
    /// A kill cannot see it (the write-ahead file's records are in the page cache); the
    /// loop's own test does (`crates/mnemo-cli/tests/deferred_acks_mutant.rs`).
    ReleaseUnacked,
}

/// How long the [`Mutant::AckBeforeSync`] server waits between releasing a batch's replies
/// and committing it: long enough that a kill at a random moment usually falls in between.
pub const ACK_BEFORE_SYNC_DELAY: Duration = Duration::from_millis(3);

impl Mutant {
    /// The name [`ENV`] takes.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::AckBeforeSync => "ack_before_sync",
            Mutant::ReleaseUnacked => "release_unacked",
        }
    }
}

/// The mutant [`ENV`] switches on; always `None` in builds without the `mutants` feature.
pub fn from_env() -> Option<Mutant> {
    #[cfg(all(feature = "mutants", debug_assertions))]
    {
        match std::env::var(ENV).ok()?.as_str() {
            "ack_before_sync" => Some(Mutant::AckBeforeSync),
            "release_unacked" => Some(Mutant::ReleaseUnacked),
            _ => None,
        }
    }
    #[cfg(not(all(feature = "mutants", debug_assertions)))]
    {
        None
    }
}
