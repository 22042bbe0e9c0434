//! YCSB core workloads driver: the six core workloads A-F of the Yahoo! Cloud Serving
//! Benchmark (Cooper et al., SoCC 2010) against any server that speaks the Redis protocol,
//! through a port of YCSB's Redis binding.
//!
//! Neither go-ycsb nor the Java YCSB can be installed from the package registries reachable
//! here, so this is a re-implementation of YCSB 0.17's `CoreWorkload`, its generators and
//! its Redis binding, written from their documented behaviour:
//!
//! - [`generator`]: zipfian (constant 0.99), scrambled zipfian (FNV-hashed ranks over ten
//!   billion items), skewed latest, uniform, the acknowledged insert counter.
//! - [`workload`]: `CoreWorkload`'s properties and the workload files `workloada`..`f`:
//!   1 KB records of 10 fields of 100 bytes, "user" + hashed key numbers.
//! - [`redis`]: the binding (hashes, the `_indices` sorted set for scans).
//! - [`check`]: checks of the driver against a live server (run against Redis first).
//! - [`runner`]: the load and run phases on N threads, each with its own connection,
//!   and YCSB's per-operation report.
//!
//! Deviations from YCSB are listed in `bench/README.md` (section YCSB).

pub mod check;
pub mod generator;
pub mod redis;
pub mod runner;
pub mod workload;

pub use redis::{Commands, RedisClient, Status};
pub use runner::{load, run, Op, Options, PhaseResult};
pub use workload::{CoreWorkload, Distribution};
