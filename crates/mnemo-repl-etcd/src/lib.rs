//! Failover for mnemo's replication, with etcd as the judge (Vertical Paxos's split: consensus
//! picks the configuration, the data path stays one round trip).
//!
//! * [`config`]: the cluster's configuration (`/mnemo/<cluster>/config`, JSON: epoch,
//!   primary, mirror, mirror_in_sync, backups, mode), changed only by a compare-and-swap on
//!   its `mod_revision`;
//! * [`control`]: the etcd client on a thread of its own (a current-thread tokio runtime;
//!   callers block), the liveness lease and its keep-alive, the watch;
//! * [`primary`]: the primary's [`mnemo_repl::Membership`]: it takes its role, holds the
//!   lease on `/mnemo/<cluster>/alive`, records whether the mirror is in sync (before it
//!   acknowledges anything without it), and learns when it was deposed;
//! * [`takeover`]: the mirror's watch: when the primary's lease expires and the mirror was in
//!   sync, it swaps itself in as primary at the next epoch;
//! * [`switch`]: the primary's sync policy under etcd, whose mirror can change while it
//!   serves (a node joins, a backup moves up): each a [`mnemo_repl::MirrorPolicy`] at its
//!   epoch;
//! * [`testing`]: a throwaway etcd on free loopback ports, for tests and benchmarks.
//!
//! The design: `docs/design/replication.md`, "Failover with etcd".

pub mod config;
pub mod control;
pub mod error;
pub mod primary;
pub mod switch;
pub mod takeover;
pub mod testing;

pub use config::{ClusterConfig, Keys};
pub use control::{Control, Lease};
pub use error::{Error, Result};
pub use primary::{PrimaryMembership, PrimaryRole};
pub use switch::SwitchPolicy;
pub use takeover::{await_takeover, await_takeover_with, publish_backups, try_take_over, Verdict};
