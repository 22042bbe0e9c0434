//! Fuzz target `pool_open`: `Pool::open_on` over an arbitrary medium must never panic. It
//! either opens (and then a grow and a clean close work or fail cleanly) or returns an error.
//!
//! Input: one flag byte, then the image bytes (at most 128 KiB).
//! * bit 0 / bit 1: fix up the checksum of header copy 0 / 1 after building the image, so the
//!   fuzzer reaches the field checks behind the checksum (PMDK and the crash-testing notes
//!   recommend it);
//! * bit 2: pad the image to the 64 KiB minimum pool size;
//! * bit 3: start from a valid, deterministic 64 KiB pool and XOR the bytes into it (crash
//!   images and valid pools are the best seeds: PMFuzz).
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mnemo_pmem::header::{checksum, CHECKSUM_OFFSET};
use mnemo_pmem::limits::{HEADER_COPY_SIZE, PAGE_SIZE, POOL_SIZE_MIN};
use mnemo_pmem::{OpenOptions, Pool};
use mnemo_testkit::{pool, SimMedia, SimOptions};

const IMAGE_MAX: usize = 128 << 10;
const CAPACITY: u64 = 1 << 20;
const COPY: usize = HEADER_COPY_SIZE as usize;

fn fix_checksum(image: &mut [u8], copy: usize) {
    if let Some(bytes) = image.get_mut(copy * COPY..(copy + 1) * COPY) {
        let sum = checksum(bytes);
        bytes[CHECKSUM_OFFSET..].copy_from_slice(&sum.to_le_bytes());
    }
}

/// A closed 64 KiB pool with a fixed uuid and creation time, so inputs replay exactly.
fn template() -> &'static [u8] {
    static TEMPLATE: OnceLock<Vec<u8>> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let media = SimMedia::new(CAPACITY);
        let options = pool::create_options(POOL_SIZE_MIN, CAPACITY);
        let created = Pool::create_on(Box::new(media.clone()), Path::new("template"), &options)
            .expect("template pool");
        created.close().expect("template close");
        let mut image = media.durable_image();
        for copy in 0..2 {
            let at = copy * COPY;
            image[at + 24..at + 40].copy_from_slice(&[0x5a; 16]); // pool_uuid
            image[at + 56..at + 64].copy_from_slice(&[0; 8]); // created_unix_ns
            fix_checksum(&mut image, copy);
        }
        image
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let rest = &rest[..rest.len().min(IMAGE_MAX)];
    let mut image = if flags & 8 != 0 {
        let mut image = template().to_vec();
        for (i, b) in rest.iter().enumerate() {
            image[i % POOL_SIZE_MIN as usize] ^= b;
        }
        image
    } else {
        rest.to_vec()
    };
    if flags & 4 != 0 && image.len() < POOL_SIZE_MIN as usize {
        image.resize(POOL_SIZE_MIN as usize, 0);
    }
    for copy in 0..2 {
        if flags & (1 << copy) != 0 {
            fix_checksum(&mut image, copy);
        }
    }
    let media = SimMedia::from_image(&image, CAPACITY, SimOptions::default());
    if let Ok(pool) = Pool::open_on(Box::new(media), Path::new("fuzz"), &OpenOptions::default()) {
        let _ = pool.header();
        let _ = pool.grow(pool.size() + PAGE_SIZE);
        let _ = pool.close();
    }
});
