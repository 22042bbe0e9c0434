//! Regression tests, each opening with the story of its bug.

use mnemo_pmem::header::{checksum, CHECKSUM_OFFSET};
use mnemo_pmem::Pool;
use mnemo_testkit::{pool, SimMedia, SimOptions};

/// Opening a pool whose header carries a creator that is not UTF-8 (under a valid checksum)
/// panicked in debug builds: decode turned each bad byte into U+FFFD (3 bytes), open
/// re-encoded the header, encode truncated the longer name to its 32-byte field, and its
/// pair assertion found that the result no longer decoded to the same header. Found while
/// writing the `pool_open` fuzz target; decode now cuts the name back to the field.
#[test]
fn pool_with_a_non_utf8_creator_opens() {
    let media = SimMedia::new(1 << 20);
    let options = pool::create_options(64 << 10, 1 << 20);
    let created = Pool::create_on(
        Box::new(media.clone()),
        std::path::Path::new(pool::NAME),
        &options,
    )
    .expect("create");
    created.close().expect("close");
    let mut image = media.durable_image();
    for copy in 0..2 {
        let at = copy * 4096;
        // The creator field: after magic, version, sizes, generation, uuid, four u64 fields,
        // four u32 fields and the 64-byte layout.
        image[at + 152..at + 184].copy_from_slice(&[0xff; 32]);
        let sum = checksum(&image[at..at + 4096]);
        image[at + CHECKSUM_OFFSET..at + 4096].copy_from_slice(&sum.to_le_bytes());
    }
    let reopened = pool::open(SimMedia::from_image(&image, 1 << 20, SimOptions::default()))
        .expect("open")
        .expect("a pool");
    assert!(reopened.was_clean());
    reopened.close().expect("close");
}
