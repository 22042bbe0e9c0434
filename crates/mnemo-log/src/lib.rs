//! # mnemo-log: an append-only persistent log, one fence per append
//!
//! A [`Log`] lives in a region of a [`mnemo_pmem::Pool`] (offsets given by the caller; the
//! heap's named regions will hand them out). [`Log::append`] makes an entry durable with
//! **one fence** and no commit record, and [`Log::open`] finds **exactly** the complete
//! appends after a crash: never a torn one, never fewer than were acknowledged.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use mnemo_log::Log;
//! use mnemo_pmem::{CreateOptions, Pool};
//! let pool = Pool::create("/dev/shm/example.pool".as_ref(), &CreateOptions::new(1 << 20, "app"))?;
//! let range = pool.data_offset()..pool.data_offset() + (256 << 10);
//! let mut log = Log::create(&pool, range.clone())?;
//! let lsn = log.append(b"hello")?;             // durable now
//! log.append_many(&[b"a".as_slice(), b"b"])?;  // one fence, all or nothing
//! for entry in log.iter() {
//!     println!("{}: {:?}", entry?.lsn, "...");
//! }
//! log.truncate_front(lsn)?;                    // reclaim space (nothing before `lsn` here)
//! drop(log);
//! let (log, entries) = Log::open(&pool, range)?;
//! assert_eq!(entries, 3);
//! # Ok(()) }
//! ```
//!
//! ## How: torn bits (Mnemosyne's scheme)
//! The entries area is a ring of 8-byte words. Every word carries 63 bits of data and one
//! *torn bit*; the value a write gives the torn bit (the *sense*) flips each time the ring
//! wraps. A record is a length word (length, batch flag, CRC-32C) followed by the payload
//! packed 63 bytes per 8 words. An append writes its words with non-temporal stores (each
//! aligned word by exactly one store, no flush needed), then one sync point of the pool
//! fences once. Because x86 makes
//! aligned 8-byte stores atomic, a crash leaves each word either old (previous sense) or new:
//! recovery reads from the head while words carry the current sense, and stops at the first
//! record with any old word. No separate commit record, so no second fence.
//!
//! Two rules make that exact rather than probable:
//! * **Free space is always clean**: every word between the tail and the head carries the
//!   *opposite* of the sense its next write will give it. Appends keep this (they write each
//!   ring position once per pass, in order), and recovery restores it after a crash by
//!   flipping leftover words of a torn append ([`Log::open`] repairs, one fence). Without
//!   the repair, a later torn append could borrow a word left by an earlier torn append.
//! * **Records are checked beyond the torn bits**: the CRC binds payload, length, batch flag
//!   and LSN, so a record that is complete by its torn bits but fails the CRC is media
//!   damage, reported as [`Error::Corrupt`] (never a panic, never silently dropped).
//!
//! Batches ([`Log::append_many`]) set a "continues" flag on all records but the last;
//! recovery keeps a batch only if all of its records are complete. Truncation moves the
//! head, kept in two checksummed header copies written alternately (one fence).
//! The byte layout is in `docs/design/log-format.md` and [`mod@format`].
//!
//! ## Costs
//! * `append` of 64 bytes: 10 words (80 bytes), 2 or 3 cache lines written with
//!   non-temporal stores, **1 fence**. Records of up to 168 bytes that do not wrap take a fast
//!   path (encoded on the stack, CRC-32C from registers), so the fence is nearly all the cost.
//! * `append_many`: the same per record, 1 fence per batch.
//! * `truncate_front`/`reset`: 1 header copy (1 line), 1 fence.
//! * `open`: reads every live record and every free word (one pass over the area).
//!
//! Every durable change of a log is a sync point of the pool: appends write their records
//! with non-temporal stores (`Pool::stream_nodrain`: each aligned 8-byte word by one store,
//! no flush needed) and then one [`mnemo_pmem::Pool::sync`] names the written ranges as
//! staged ([`mnemo_pmem::SyncPoint::staged`]): one fence locally, and replication ships them
//! as one unit. Header writes, creation and repair are [`mnemo_pmem::SyncKind::Metadata`]
//! sync points.
//! `crates/mnemo-bench/src/bin/log.rs` (run by `scripts/bench-log.sh`) measures appends.
//!
//! ## Mutants
//! With the `mutants` feature, `mnemo_pmem::mutant::with` switches on one deliberately
//! broken variant; the crash tests show each is caught:
//!
//! | name | what breaks |
//! |---|---|
//! | `log.skip_flush` | an append fences without flushing its lines |
//! | `log.skip_torn_bit` | recovery ignores the torn bits of payload words (trusts the length word) |
//! | `log.skip_sense_flip` | the writer does not flip the sense when the ring wraps |
//! | `log.skip_repair` | open leaves a torn append's words in free space |
//! | `log.head_skip_flush` | truncation's header copy is written but not flushed |
//!
//! There is no `log.commit_before_data`: the torn-bit scheme has no commit record to order.
#![deny(unsafe_code)]

mod error;
pub mod format;
#[allow(unsafe_code)]
mod log;

pub use error::Error;
pub use log::{Entry, Iter, Log, Lsn, Stats};

/// Mutants of this crate (see the crate documentation).
pub const MUTANTS: &[&str] = &[
    "log.skip_flush",
    "log.skip_torn_bit",
    "log.skip_sense_flip",
    "log.skip_repair",
    "log.head_skip_flush",
];
