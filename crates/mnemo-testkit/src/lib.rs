//! # mnemo-testkit: crash simulator and fault injection
//!
//! mnemo promises that a crash at any instant loses nothing acknowledged and corrupts
//! nothing. Killing a process cannot show that (its stores survive in the page cache), so
//! this crate simulates a persistent medium that knows what a power failure may lose, and
//! checks recovery against every such loss.
//!
//! * [`SimMedia`]: a simulated medium behind `mnemo_pmem::Media`.
//! * [`explore()`]: run a [`Workload`] once, then recover and check every crash image;
//!   [`replay`] one failing image; figures in a [`Report`].
//! * [`pool`]: the media layer's workloads (create, open/close cycles, growth with data).
//! * [`FaultyMedia`]: I/O errors and ENOSPC at the Nth call, once or forever.
//! * [`net`]: a simulated clock and network (sans-IO, seeded) for replication.
//!
//! ## The crash model
//! The program stores into ordinary memory at a fixed address (the *volatile view*; a
//! `Reservation`, so `base()` never moves on growth). The simulator keeps the *durable image*
//! beside it. Stores are plain CPU stores that no hook sees, so the simulator infers them by
//! diffing:
//! * `flush(range)` snapshots the current contents of every cache line the range touches;
//! * `drain()` (the fence) writes those snapshots into the durable image;
//! * at a crash, the *pending units* are the 8-byte words where the volatile view differs from
//!   the durable image, flushed or not: an unflushed line may be evicted at any time, and
//!   stays pending across fences until a flush and a fence cover it;
//! * a crash image is the durable image plus any subset of the pending units.
//!
//! [`Granularity::Word`] (strict, the default) lets every pending word survive or vanish
//! independently: x86 guarantees only 8-byte atomicity, ARM and CXL no more.
//! [`Granularity::Line`] treats a line's pending words as one unit (a line written back whole).
//!
//! ## The page-cache medium (power loss on an ordinary disk)
//! `kill -9` proves only process crashes: the page cache survives them. [`Medium::PageCache`]
//! (`Config::new(seed).page_cache(Granularity::Sector)`) simulates a pool file on an ordinary
//! disk with the POSIX crash model of ALICE and CrashMonkey:
//! * a flush names the pages it touches and a fence is `msync(2)` of those pages, so a crash
//!   keeps every range synced before it (the pages' contents at the sync);
//! * every other dirty page may have been written back, in any order, and a page written as
//!   power fails may be torn at 512-byte sectors: the units are the pending words of one
//!   sector ([`Granularity::Sector`]) or of one page ([`Granularity::Page`]);
//! * the file's length persists only through a sync: between a growth and the next fence,
//!   a crash may find the file at its old length (one more unit of the crash point).
//!
//! * with [`Config::write_ahead`], pools sync through `mnemo_pmem::WalPolicy` on a
//!   simulated write-ahead file beside the pool ([`SimWal`]): its writes are durable only
//!   after its sync (a crash point is taken just before each), its unsynced sectors kept or
//!   lost independently; a crash image cuts the pool's units and the file's together.
//!
//! Every crash workload of the layers above (pool, log, heap, transactions, kv engine, C
//! ABI) runs on both media, and with the write-ahead policy.
//!
//! Crash points are taken just before each fence takes effect, just before each growth, at
//! each acknowledgement the workload reports, at the end of the run, and optionally at every
//! flush. Since every pending unit is pending until the next fence, the images at a fence
//! include every image reachable earlier in its interval, so checking at fences is complete
//! for what the model can see.
//!
//! What the model does **not** see, by construction:
//! * intermediate values: a word stored twice within one interval is seen only with its last
//!   value (and a word restored to its durable value is not pending at all), unless
//!   [`Config::points_at_flush`] adds crash points at flushes, between the two stores;
//! * a line flushed and then stored to again before the fence: the model offers the durable
//!   and the latest value, not the snapshot the flush took (the durable image does get the
//!   snapshot at the fence);
//! * tearing inside a word: bytes of one 8-byte word persist together, even if the program
//!   wrote them with narrower or unaligned stores;
//! * the order of stores within a line (x86's prefix rule): strict mode is a superset of it,
//!   line mode a subset;
//! * growth is atomic and immediately durable (new bytes zero in both views); the file
//!   system's own metadata is below this model;
//! * concurrency, in [`explore()`]: its workloads are single-threaded; the simulator reads the
//!   volatile view at crash points and flushes while no other thread stores. A workload may
//!   run its steps on threads of their own one at a time, each joined before the next starts
//!   (mnemo-heap's `Mix::Handover`: deterministic, yet each step is another thread's); a
//!   mutant is switched on per thread, so such a workload passes
//!   `mnemo_pmem::mutant::current` on. Concurrent workloads run under the shuttle crate's
//!   controlled scheduler instead (module `conc`, built only with `--cfg mnemo_shuttle` by
//!   `scripts/test-shuttle.sh`): one task runs at a time, so the same reads stay exact, and
//!   a fence writes back only the flushes of its own thread (or shuttle task), as `sfence`
//!   orders only the issuing CPU's;
//! * stray accesses: media recycle their address-space reservation (a fresh mapping per crash
//!   image costs a page fault per page), so a read or write just beyond `len()` may hit stale
//!   mapped memory instead of faulting.
//!
//! ## Exploring crash images
//! At a crash point with `n` pending units, [`cuts`] picks the images: every subset when
//! `n <= 12` (at most 4,096); otherwise none, all, each unit dropped, each unit alone, every
//! pair (seeded pairs above 64 units) and 256 seeded random subsets. Images are deduplicated
//! by a hash of their bytes and the model position. Each image is recovered and checked:
//! * (a) structural invariants and (b)/(c) the model: [`Workload::observe`] then
//!   [`Workload::accept`] (every acknowledged operation present; the one in flight
//!   all-or-nothing, or per word where the layer promises no more, as raw pool writes);
//! * (d) one image in [`Config::depth2_every`] is also crashed *during its recovery*: crash
//!   images of the recovery run are recovered again and must reach the same state
//!   ([`Workload::same_recovery`]);
//! * (e) one image in [`Config::follow_on_every`] runs [`Workload::follow_on`] after recovery.
//!
//! A failure prints the seed, the crash point (fence number) and the cut in Rust syntax;
//! [`replay`] re-runs exactly that image. Determinism: the workload draws its data from
//! [`Run::rng`]; the pool's uuid and creation time are not seeded, which changes values but
//! not which words are pending, so cut indices replay.
//!
//! ## Soak mode
//! `MNEMO_SOAK=1 cargo test -p mnemo-testkit --release -- --nocapture` widens
//! [`Config::from_env`] (exhaustive to 16 units, 4,096 random cuts, depth 2 and follow-on on
//! every image) and runs more seeds in the crate's tests (`MNEMO_SOAK_SEEDS=N`, default 64).
//!
//! ## Deliberately broken variants
//! The harness must catch every mutant: `mnemo_pmem::mutant::KNOWN` (named switches in the
//! code, turned on with [`Config::mutant`]) and the simulator's own, [`MUTANTS_SIM`]
//! ([`Config::drop_flush`], [`Config::drop_fence`]). `tests/mutants.rs` asserts 100%.
//!
//! ## Adding a layer's workload
//! Implement [`Workload`]: run operations on a pool on `run.media()`, call
//! [`Run::ack`] with the model state after each acknowledged operation, recover (open the
//! pool, then the layer's own recovery), observe the state. A counter kept in one 8-byte word
//! (atomic by the model's rules, so the default all-or-nothing [`Workload::accept`] applies):
//!
//! ```
//! use mnemo_pmem::{Pool, limits::DATA_OFFSET};
//! use mnemo_testkit::{explore, pool, Config, Run, SimMedia, Workload};
//!
//! struct Counter;
//!
//! impl Workload for Counter {
//!     type State = Option<u64>; // None: no pool yet
//!     type Recovered = Option<Pool>;
//!
//!     fn name(&self) -> String { "counter".into() }
//!     fn initial(&self) -> Option<u64> { None }
//!
//!     fn run(&self, run: &mut Run<Option<u64>>) -> Result<(), String> {
//!         let p = pool::create(run.media(), "counter", 64 << 10, 1 << 20)?;
//!         run.ack(Some(0));
//!         for i in 1..=3u64 {
//!             p.write(DATA_OFFSET, &i.to_le_bytes()).map_err(|e| e.to_string())?;
//!             p.msync(DATA_OFFSET, 8).map_err(|e| e.to_string())?;
//!             run.ack(Some(i));
//!         }
//!         Ok(())
//!     }
//!
//!     fn recover(&self, media: SimMedia) -> Result<Option<Pool>, String> {
//!         pool::open(media) // Ok(None) when no header was ever completed
//!     }
//!
//!     fn observe(&self, p: &Option<Pool>) -> Result<Option<u64>, String> {
//!         let Some(p) = p else { return Ok(None) };
//!         let mut word = [0u8; 8];
//!         p.read(DATA_OFFSET, &mut word).map_err(|e| e.to_string())?;
//!         Ok(Some(u64::from_le_bytes(word)))
//!     }
//!
//!     fn follow_on(&self, p: Option<Pool>, _media: &SimMedia) -> Result<(), String> {
//!         p.map_or(Ok(()), |p| p.close().map_err(|e| e.to_string()))
//!     }
//! }
//!
//! let report = explore(&Counter, &Config::new(1));
//! eprintln!("{}", report.summary("counter"));
//! report.assert_ok();
//! assert!(report.images_checked > 100);
//! ```
#![deny(unsafe_code)]

#[cfg(mnemo_shuttle)]
pub mod conc;
pub mod explore;
pub mod fault;
pub mod net;
pub mod pool;
pub mod ports;
pub mod redis;
pub mod rng;
pub mod shadow;
pub mod sim;
pub mod sweep;
pub mod workload;

pub use explore::{cuts, explore, measure, replay, soak, Config, Cut, Failure, Report, Sampling};
pub use fault::{FaultKind, FaultOp, FaultPlan, FaultyMedia};
pub use net::{Message, NetConfig, NetStats, NodeId, SimClock, SimNet};
pub use rng::SimRng;
pub use shadow::{RecordingPolicy, Shadow, ShadowPoint};
pub use sim::{
    CrashPoint, FilePoint, Granularity, Medium, PointKind, SimMedia, SimOptions, SimWal, Word,
    SECTOR,
};
pub use sweep::{assert_caught, site_mutants};
pub use workload::{Run, Workload};

/// The simulator's own mutants (beside the named ones of each layer): a dropped flush and a
/// dropped fence, set with [`Config::drop_flush`] / [`Config::drop_fence`].
pub const MUTANTS_SIM: &[&str] = &["sim.drop_flush", "sim.drop_fence"];
