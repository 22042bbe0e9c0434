//! # mnemo-vpm: virtual persistent memory
//!
//! Regions larger than persistent memory (Temporality's vpmlib). A [`Space`] is a
//! persistent-memory file (tmpfs or DAX: the NVMM) and a swap file (a disk). A [`Region`]
//! reserves address space for its whole capacity without backing it; the first access to a
//! page faults, and the fault handler ([`fault`]) maps a free page ("slot") of the
//! persistent-memory file there and records it in the region's **persistent page table**.
//! When the region's budget of slots is used up, pages not touched lately are evicted first
//! (a two-handed CLOCK over the pages in fault order; vpmlib used first in, first out): their
//! bytes go to the swap file, are synced, the table records "in swap", and only then are
//! their slots reused. A later access brings a page back.
//!
//! A region is a [`mnemo_pmem::Media`], so a pool (and the heap, transactions and the
//! key-value server above it) runs on it unchanged: `Pool::create_on(Box::new(region), ..)`.
//!
//! Regions are named by their owner and an allocation sequence number (an identifier is
//! derived from both), listed in a table of contents at the start of the persistent-memory
//! file, so several owners allocate and recover regions in any order; only allocation and
//! freeing take a lock ([`Space::allocate`], [`Space::free`]).
//!
//! ## Invariants
//! * Every page-table word is one of: untouched, resident in slot S, in swap; it changes by
//!   one 8-byte store made durable before anything depends on it.
//! * No two durable words name the same slot: an evicted page is recorded in swap (durably)
//!   before its slot is filled for another page, and that page's bytes are durable in the
//!   slot before its word names the slot. So recovery after a crash at any instant finds
//!   every page's last durable bytes (`docs/design/vpm.md`, "Crash safety").
//! * The fault path allocates nothing and takes no lock that code outside it takes.
//! * Nothing read from the files is trusted before it is checked (CRC-32C of configuration
//!   and table-of-contents entries, every page-table word validated at open).
#![deny(unsafe_code)]

pub mod error;
pub mod fault;
pub mod format;
pub mod limits;
pub mod region;
pub mod space;

pub use error::{Error, Result};
pub use fault::Step;
pub use region::{Region, RegionOptions, Stats, StatsHandle};
pub use space::{Hooks, RegionInfo, Space};
