//! # mnemo-pmem: the persistent media layer
//!
//! Everything durable in mnemo flows through this crate:
//!
//! * [`Media`] is the seam between the library and what holds the bytes: a pool file
//!   mapped into memory ([`FileMedia`]), and later a simulated medium that builds crash
//!   images (`mnemo-testkit`) or virtual persistent memory (`mnemo-vpm`). Every flush and
//!   every fence in the code base goes through a `Media`, so a checker sees them all.
//! * [`Pool`] owns a medium and its on-media [`header`]: two alternating copies so a torn
//!   header write never loses the pool, growth while open, a clean-shutdown flag.
//! * [`Pool::msync`] and [`Pool::gmsync`] are the *sync points*: the one durability call of
//!   the library. They hand the ranges to the pool's [`SyncPolicy`] (today "local": flush and
//!   fence, or `msync(2)` for a page-cache file; later replication modes).
//! * [`track`] narrows sync points to what changed (Selective Persistence Flushing): a line
//!   bitmap for stores through the API, userfaultfd write-protect + `PAGEMAP_SCAN` for raw
//!   stores, flush-all as the fallback. Off unless [`Pool::enable_tracking`] or `MNEMO_SPF`.
//! * [`emu`] emulates slower persistent memories (PCM, STT-RAM, Optane, CXL) by charging
//!   modelled delays at flushes and fences (`MNEMO_EMULATE=<preset>`).
//! * [`cpu`] picks the best flush instruction once (clwb, clflushopt, clflush, or none on
//!   platforms whose caches are persistent), with environment overrides.
//!
//! ## Invariants
//! * Nothing on media is a raw pointer: offsets from the pool's base only.
//! * The mapping's base address never moves while a pool is open, even across growth: the
//!   pool reserves its whole maximum size of address space up front and maps the file into
//!   the start of it.
//! * No byte read from disk is trusted before its checksum is verified; decoding never panics.
#![deny(unsafe_code)]

pub mod awake;
mod conc;
pub mod cpu;
pub mod emu;
pub mod error;
pub mod file;
pub mod header;
pub mod inspect;
pub mod journal;
pub mod limits;
pub mod media;
pub mod mutant;
pub mod pool;
pub mod reserve;
mod segv;
pub mod sigchain;
pub mod sync;
pub mod track;
pub mod view;
pub mod wal;

pub use error::{Error, MediaError};
pub use file::FileMedia;
pub use media::{Durability, ForwardMedia, Media, MediaInfo, MediaKind};
pub use pool::{CreateOptions, OpenOptions, Pool, PoolStats};
pub use sync::{ByteRange, LocalPolicy, SyncKind, SyncPoint, SyncPolicy};
pub use view::{ViewDetach, ViewMedia};
pub use wal::{FileLog, LogFile, WalPolicy, WalStats};
