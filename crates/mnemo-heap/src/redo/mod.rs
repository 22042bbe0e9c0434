//! Redo records and lanes: the commit protocol, and recovery. Three jobs, one module each:
//!
//! * `record`: the on-media record format: build ([`start`], [`push_data`],
//!   [`push_mask`], [`push_check`], [`seal`]), read back ([`header_len`], [`decode`],
//!   [`entries`]) and apply in place ([`apply`], [`apply_split`]).
//! * lanes: the one-fence commit protocol over rings of record slots ([`Lanes`]): acquire,
//!   commit, help, settle, retire, the horizon and the overwrite rule; its invariants are
//!   stated at the top of `redo/lanes.rs`.
//! * recover: recovery of the lanes at open (replay of the records above the durable
//!   horizon, in sequence order).
//!
//! `ranges` holds the range lists every sync point of the three is built from. The protocol:
//! `docs/design/heap-and-transactions.md`.

mod lanes;
mod ranges;
mod record;
mod recover;

pub use lanes::{Commit, Lane, LaneGuard, LaneStart, LaneState, Lanes};
pub use mnemo_pmem::cpu::crc32c_words;
pub use ranges::{cap_ranges, push_range};
pub use record::{
    apply, apply_split, apply_words, atomic_word, checks_hold, checks_overwritten, decode, entries,
    entry_size, header_len, push_check, push_data, push_mask, seal, start, update_word, Entry,
    Record, WordUpdate, KIND_ANDNOT, KIND_CHECK, KIND_DATA, KIND_OR, RECORD_HEADER, RECORD_MAGIC,
};
pub(crate) use recover::recover;
