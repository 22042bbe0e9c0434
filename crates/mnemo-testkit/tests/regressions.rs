//! Regression tests, each opening with the story of its bug.

use mnemo_pmem::header::{checksum, CHECKSUM_OFFSET};
use mnemo_testkit::{pool, SimMedia, SimOptions};

/// Opening a pool whose header carries a creator that is not UTF-8 (under a valid checksum)
/// panicked in debug builds: decode turned each bad byte into U+FFFD (3 bytes), open
/// re-encoded the header, encode truncated the longer name to its 32-byte field, and its
/// pair assertion found that the result no longer decoded to the same header. Found while
/// writing the `pool_open` fuzz target; decode now cuts the name back to the field.
#[test]
fn pool_with_a_non_utf8_creator_opens() {
    let media = SimMedia::new(1 << 20);
    let created = pool::create(media.clone(), pool::NAME, 64 << 10, 1 << 20).expect("create");
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

/// A header copy whose generation was near `u64::MAX` (under a valid checksum) was accepted;
/// open or close then computed `generation + 1` and overflowed (a panic in debug builds; in
/// release the wrapped generation 0 lost to the stale copy, undoing the clean close). Found
/// by the `pool_open` fuzz target in its first minutes. Decode now refuses generations above
/// `GENERATION_MAX`, and the other copy rules.
#[test]
fn generation_near_overflow_is_refused_and_the_other_copy_rules() {
    let media = SimMedia::new(1 << 20);
    let created = pool::create(media.clone(), pool::NAME, 64 << 10, 1 << 20).expect("create");
    let uuid = created.header().pool_uuid;
    created.close().expect("close");
    let mut image = media.durable_image();
    for (copy, generation) in [(0usize, u64::MAX - 1), (1, u64::MAX)] {
        let at = copy * 4096;
        image[at + 16..at + 24].copy_from_slice(&generation.to_le_bytes());
        let sum = checksum(&image[at..at + 4096]);
        image[at + CHECKSUM_OFFSET..at + 4096].copy_from_slice(&sum.to_le_bytes());
        let opened = pool::open(SimMedia::from_image(&image, 1 << 20, SimOptions::default()));
        if copy == 0 {
            let reopened = opened.expect("open").expect("copy 1 still rules");
            assert_eq!(reopened.header().pool_uuid, uuid);
            reopened.close().expect("close");
        } else {
            assert!(
                opened.expect("no panic, no other error").is_none(),
                "both copies are corrupt now"
            );
        }
    }
}
