#![allow(dead_code)]

use std::path::{Path, PathBuf};

use mnemo_heap::{Heap, HeapOptions};

/// A temporary directory on tmpfs (the NVMM stand-in: flush + fence, no msync).
pub fn shm_dir() -> tempfile::TempDir {
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    tempfile::Builder::new()
        .prefix("mnemo-heap-test")
        .tempdir_in(base)
        .expect("tempdir")
}

pub fn small_options() -> HeapOptions {
    HeapOptions {
        lane_count: 4,
        lane_log_size: 64 * 1024,
        lane_slots: mnemo_heap::layout::LANE_SLOTS_DEFAULT,
        toc_entries: 64,
        arenas: 2,
    }
}

pub fn create(dir: &tempfile::TempDir, size: u64, size_max: u64) -> (Heap, PathBuf) {
    let path = dir.path().join("pool");
    let heap = Heap::create_file(&path, size, size_max, &small_options()).expect("create heap");
    (heap, path)
}

pub fn reopen(heap: Heap, path: &Path) -> Heap {
    drop(heap);
    Heap::open_file(path).expect("reopen heap")
}
