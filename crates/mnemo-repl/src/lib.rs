//! Replication at sync points, after Mojim (Zhang et al., ASPLOS 2015): every sync point of
//! a pool is one record shipped to a mirror, which makes it durable in its log, acknowledges,
//! and applies it to its image of the pool, whole or not at all.
//!
//! * [`proto`]: the frames, sans I/O (encode, decode; never panics on any input);
//! * [`auth`]: the shared-secret handshake that authenticates both ends of a link;
//! * [`link`]: frames over a blocking TCP stream;
//! * [`policy`]: [`MirrorPolicy`], the primary's [`mnemo_pmem::SyncPolicy`] (modes `local`,
//!   `async`, `sync`, `syncflush`, `syncdisk`, `syncsec`, `syncseceth`);
//! * [`primary`]: [`primary::PrimaryCore`], the primary's sequencing sans I/O, which the policy
//!   drives with its links, threads and clock, and the deterministic simulation with its own;
//! * [`backup`]: the second tier, fed by the mirror in the background; its sessions'
//!   sequencing sans I/O is [`forwarder_core::ForwarderCore`], which the simulation drives too;
//! * [`mirror`]: [`MirrorStore`] (image, log, state, recovery, promotion) and [`Mirror`], the
//!   server;
//! * [`mirror_core`]: [`mirror_core::LinkCore`], the mirror's link loop sans I/O, which
//!   [`mirror::serve_link`] drives with its connection, threads and clock, and the
//!   deterministic simulation with its own.
//!
//! The design and the byte layouts: `docs/design/replication.md`.

pub mod auth;
pub mod backup;
pub mod error;
pub mod forwarder_core;
pub mod link;
pub mod mirror;
pub mod mirror_core;
pub mod policy;
pub mod primary;
pub mod proto;

pub use auth::Secret;
pub use backup::{BackupOptions, BackupStats};
pub use error::{Error, ProtoError, Result};
pub use mirror::{Mirror, MirrorOptions, MirrorState, MirrorStats, MirrorStore};
pub use policy::{
    BackupsView, Membership, MirrorConfig, MirrorPolicy, Mode, ReplStats, WithoutMirror,
};
