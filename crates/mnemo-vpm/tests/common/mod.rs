//! Shared by the integration tests: a space in temporary directories, page patterns.
#![allow(dead_code)]

use std::path::PathBuf;

use mnemo_vpm::Space;

pub const PAGE: usize = 4096;

/// A persistent-memory file on tmpfs (the NVMM stand-in) when there is one, and a swap file
/// on the ordinary temporary directory (a disk).
#[derive(Debug)]
pub struct Dirs {
    pm: tempfile::TempDir,
    swap: tempfile::TempDir,
}

impl Dirs {
    pub fn new() -> Dirs {
        let shm = std::path::Path::new("/dev/shm");
        let pm = if shm.is_dir() {
            tempfile::tempdir_in(shm).expect("temporary directory on /dev/shm")
        } else {
            tempfile::tempdir().expect("temporary directory")
        };
        Dirs {
            pm,
            swap: tempfile::tempdir().expect("temporary directory"),
        }
    }

    pub fn pm(&self) -> PathBuf {
        self.pm.path().join("space.pm")
    }

    pub fn swap(&self) -> PathBuf {
        self.swap.path().join("space.swap")
    }

    pub fn create(&self, pm_bytes: u64) -> Space {
        Space::create(&self.pm(), &self.swap(), pm_bytes).expect("create space")
    }

    pub fn open(&self) -> Space {
        Space::open(&self.pm(), &self.swap()).expect("open space")
    }
}

/// The byte at `i` of page `page` of a region written with `seed`.
pub fn byte(seed: u64, page: usize, i: usize) -> u8 {
    let x = (seed as usize)
        .wrapping_mul(31)
        .wrapping_add(page.wrapping_mul(7919))
        .wrapping_add(i.wrapping_mul(13));
    (x ^ (x >> 7)) as u8 | 1
}

/// Fill page `page` at `base` with the pattern of `seed`.
///
/// # Safety
/// `base` must be a region of at least `page + 1` pages.
pub unsafe fn fill(base: *mut u8, seed: u64, page: usize) {
    for i in (0..PAGE).step_by(8) {
        let mut w = [0u8; 8];
        for (k, b) in w.iter_mut().enumerate() {
            *b = byte(seed, page, i + k);
        }
        // SAFETY: inside the region (caller).
        unsafe { base.add(page * PAGE + i).cast::<[u8; 8]>().write(w) };
    }
}

/// Whether page `page` at `base` holds the pattern of `seed` (`Some(false)`), zeros
/// (`None`), or something else (`Some(true)` for the pattern: read as "intact").
///
/// # Safety
/// `base` must be a region of at least `page + 1` pages.
pub unsafe fn check(base: *const u8, seed: u64, page: usize) -> Result<bool, String> {
    // SAFETY: inside the region (caller).
    let bytes = unsafe { std::slice::from_raw_parts(base.add(page * PAGE), PAGE) };
    if bytes.iter().all(|&b| b == 0) {
        return Ok(false);
    }
    for (i, &b) in bytes.iter().enumerate() {
        if b != byte(seed, page, i) {
            return Err(format!(
                "page {page} byte {i}: {b:#x}, expected {:#x}",
                byte(seed, page, i)
            ));
        }
    }
    Ok(true)
}
