//! Shared setup of the heap-level crash tests (feature `testing`, off by default).
//!
//! The crash-image tests of this crate (`tests/crash.rs`), of mnemo-kv
//! (`tests/engine_crash.rs`) and of mnemo-ffi (`tests/crash.rs`) run their workloads on a
//! heap in a pool on mnemo-testkit's simulated media. They all make that heap the same way
//! and recover it the same way, which this module does once:
//!
//! * [`options`]: a small heap (few lanes, a short TOC, one arena), so that every crash image
//!   is small and the pending lines at each fence are few;
//! * [`pool_size`]: the pool size that gives such a heap exactly `chunks` allocation chunks;
//! * [`create`]: format the heap in a freshly created pool;
//! * [`recover`]: open the heap of a crash image, telling "no heap yet" (a crash before the
//!   heap's creation was complete) from a failed recovery.
//!
//! The pool itself comes from mnemo-testkit (`pool::create`, `pool::open`): mnemo-testkit
//! cannot depend on this crate (this crate's tests depend on it), so these helpers take and
//! return plain [`Pool`]s and [`Heap`]s, with errors as text as the testkit's workloads
//! report them. A crate's crash tests turn the feature on in their dev-dependencies:
//!
//! ```toml
//! [dev-dependencies]
//! mnemo-heap = { path = "../mnemo-heap", features = ["testing"] }
//! ```

use mnemo_pmem::limits::DATA_OFFSET;
use mnemo_pmem::Pool;

use crate::layout::Geometry;
use crate::{Error, Heap, HeapOptions};

/// The crash tests' heap: two lanes of 64 KiB (16 slots of 4 KiB, the default count), 16 TOC
/// entries, one arena.
pub fn options() -> HeapOptions {
    HeapOptions {
        lane_count: 2,
        lane_log_size: 64 * 1024,
        lane_slots: crate::layout::LANE_SLOTS_DEFAULT,
        toc_entries: 16,
        arenas: 1,
    }
}

/// Size of a pool whose heap, made with [`options`], has room for exactly `chunks` chunks.
/// A workload that needs more space makes the heap grow (up to the pool's `size_max`).
pub fn pool_size(chunks: u64) -> u64 {
    let o = options();
    Geometry::new(DATA_OFFSET, o.lane_count, o.lane_log_size, o.toc_entries).size_for_chunks(chunks)
}

/// Format a heap with [`options`] in `pool`, a pool just created (its data area unused).
pub fn create(pool: Pool) -> Result<Heap, String> {
    Heap::create(pool, &options()).map_err(|e| e.to_string())
}

/// Recover the heap of a crash image: `pool` is the image's pool as mnemo-testkit's
/// `pool::open` returns it (`None`: no pool yet).
///
/// `Ok(None)`: there is no heap yet. Either no pool, or the crash came while the heap was
/// being created: its superblock is written last, so the image has no heap magic
/// ([`Error::NotAHeap`]) or a superblock torn while it was written (its checksum does not
/// match). Any other error is a failed recovery, reported as `Err`.
pub fn recover(pool: Option<Pool>) -> Result<Option<Heap>, String> {
    let Some(pool) = pool else {
        return Ok(None);
    };
    match Heap::open_with(pool, &options()) {
        Ok(heap) => Ok(Some(heap)),
        Err(Error::NotAHeap(_)) => Ok(None),
        Err(Error::Corrupt(m)) if m.contains("superblock checksum") => Ok(None),
        Err(e) => Err(format!("heap recovery failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_size_matches_the_geometry_of_the_pools_data_area() {
        // The geometry of `options`, written out: pools data areas start at offset 40960
        // (two header copies, two gmsync journal slots).
        let literal = Geometry::new(40960, 2, 65536, 16);
        for chunks in 0..4 {
            assert_eq!(pool_size(chunks), literal.size_for_chunks(chunks));
        }
        let o = options();
        let geometry = Geometry::new(DATA_OFFSET, o.lane_count, o.lane_log_size, o.toc_entries);
        assert_eq!(geometry.chunks_in(pool_size(3)), 3);
    }
}
