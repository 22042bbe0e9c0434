//! Fuzz target `log_open`: recovery of a torn-bit log (`mnemo_log::Log::open`) over arbitrary
//! bytes must never panic. It either opens (and then iteration, an append and a truncation
//! work or fail cleanly) or returns an error.
//!
//! Input: one flag byte, then bytes for the log's region (at most its 8 KiB).
//! * bit 0: XOR the bytes into a valid log holding a few entries (valid images are the best
//!   seeds) instead of writing them over a formatted pool's region;
//! * bit 1: after opening, append an entry and truncate to it.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mnemo_log::Log;
use mnemo_pmem::limits::{DATA_OFFSET, POOL_SIZE_MIN};
use mnemo_pmem::{OpenOptions, Pool};
use mnemo_testkit::{pool, SimMedia, SimOptions};

const CAPACITY: u64 = 1 << 20;
const REGION: std::ops::Range<u64> = DATA_OFFSET..DATA_OFFSET + 8192;

/// A closed pool whose log region holds a log with a few entries, wrapped once.
fn template() -> &'static [u8] {
    static TEMPLATE: OnceLock<Vec<u8>> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let media = SimMedia::new(CAPACITY);
        let options = pool::create_options(POOL_SIZE_MIN, CAPACITY);
        let p = Pool::create_on(Box::new(media.clone()), Path::new("template"), &options)
            .expect("template pool");
        let mut log = Log::create(&p, REGION).expect("template log");
        for i in 0..200u32 {
            let entry = vec![i as u8; (i % 90) as usize];
            if log.append(&entry).is_err() {
                let tail = log.tail();
                log.truncate_front(tail).expect("truncate");
                log.append(&entry).expect("append after truncate");
            }
        }
        drop(log);
        p.close().expect("template close");
        media.durable_image()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut image = template().to_vec();
    let region = &mut image[REGION.start as usize..REGION.end as usize];
    for (i, b) in rest.iter().take(region.len()).enumerate() {
        if flags & 1 != 0 {
            region[i] ^= b;
        } else {
            region[i] = *b;
        }
    }
    let media = SimMedia::from_image(&image, CAPACITY, SimOptions::default());
    let Ok(p) = Pool::open_on(Box::new(media), Path::new("fuzz"), &OpenOptions::default()) else {
        return;
    };
    let Ok((mut log, _recovered)) = Log::open(&p, REGION) else {
        return;
    };
    let mut last = None;
    for entry in log.iter() {
        match entry {
            Ok(entry) => last = Some(entry.lsn),
            Err(_) => break,
        }
    }
    if flags & 2 != 0 {
        if let Ok(lsn) = log.append(b"after recovery") {
            let _ = log.truncate_front(lsn);
            let _ = last;
        }
    }
});
