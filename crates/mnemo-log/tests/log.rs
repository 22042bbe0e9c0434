//! Log behaviour on a real pool file on /dev/shm: round trips, reopen, wrap-around, torn
//! appends at every truncation point and for subsets of their words, a model-based proptest,
//! bad input and damaged media.

use std::collections::VecDeque;
use std::ops::Range;

use mnemo_log::{Error, Log, Lsn};
use mnemo_pmem::{CreateOptions, Pool};
use proptest::prelude::*;

fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mnemo-log-")
        .tempdir_in("/dev/shm")
        .expect("tempdir on /dev/shm")
}

fn new_pool(dir: &tempfile::TempDir) -> Pool {
    Pool::create(&dir.path().join("p"), &CreateOptions::new(1 << 20, "log")).expect("pool")
}

/// A region whose entries area holds `area` bytes.
fn region(pool: &Pool, area: u64) -> Range<u64> {
    let start = pool.data_offset();
    start..start + 128 + area
}

fn contents<P: std::ops::Deref<Target = Pool>>(log: &Log<P>) -> Vec<(Lsn, Vec<u8>)> {
    log.iter()
        .map(|e| e.map(|e| (e.lsn, e.data)))
        .collect::<Result<_, _>>()
        .expect("iter")
}

fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn snapshot(pool: &Pool, range: &Range<u64>) -> Vec<u8> {
    let mut bytes = vec![0u8; (range.end - range.start) as usize];
    pool.read(range.start, &mut bytes).expect("read");
    bytes
}

fn restore(pool: &Pool, range: &Range<u64>, bytes: &[u8]) {
    pool.write(range.start, bytes).expect("write");
}

/// Byte offsets (within the region) of the 8-byte words that differ between two images.
fn changed_words(before: &[u8], after: &[u8]) -> Vec<usize> {
    (0..before.len() / 8)
        .map(|i| i * 8)
        .filter(|&o| before[o..o + 8] != after[o..o + 8])
        .collect()
}

#[test]
fn round_trip_every_small_size() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 64 << 10);
    let mut log = Log::create(&pool, range.clone()).expect("create");
    assert!(log.is_empty());
    let mut expect = Vec::new();
    for len in (0..200).chain([500, 1000, 4096]) {
        let data = payload(len as u64, len);
        let lsn = log.append(&data).expect("append");
        assert_eq!(lsn.get() % 8, 0);
        expect.push((lsn, data));
    }
    assert_eq!(contents(&log), expect);
    assert_eq!(log.len(), expect.len() as u64);
    let stats = log.stats();
    assert_eq!(
        stats.fences,
        stats.appends + 2,
        "one fence per append (+2 header copies at create)"
    );
    assert_eq!(log.used() + log.free(), log.capacity());
    let used: u64 = expect
        .iter()
        .map(|(_, d)| Log::<&Pool>::record_size(d.len()))
        .sum();
    assert_eq!(log.used(), used);
}

#[test]
fn one_fence_and_two_or_three_lines_per_64_byte_append() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let mut log = Log::create(&pool, region(&pool, 64 << 10)).expect("create");
    let before = log.stats();
    let syncs = pool
        .stats()
        .sync_points
        .load(std::sync::atomic::Ordering::Relaxed);
    for i in 0..100 {
        log.append(&payload(i, 64)).expect("append");
    }
    let after = log.stats();
    assert_eq!(after.fences - before.fences, 100);
    assert_eq!(
        pool.stats()
            .sync_points
            .load(std::sync::atomic::Ordering::Relaxed)
            - syncs,
        100,
        "every append is one sync point"
    );
    let lines = after.lines_flushed - before.lines_flushed;
    assert!(
        (200..=300).contains(&lines),
        "{lines} lines for 100 appends"
    );
}

#[test]
fn reopen_finds_every_entry_and_lsns_continue() {
    let dir = shm_dir();
    let path = dir.path().join("p");
    let range;
    let mut expect = Vec::new();
    {
        let pool = Pool::create(&path, &CreateOptions::new(1 << 20, "log")).expect("pool");
        range = region(&pool, 32 << 10);
        let mut log = Log::create(&pool, range.clone()).expect("create");
        for i in 0..50 {
            let data = payload(i, (i * 13 % 150) as usize);
            expect.push((log.append(&data).expect("append"), data));
        }
        let lsns = log
            .append_many(&[b"x".as_slice(), b"", b"yz"])
            .expect("many");
        for (lsn, d) in lsns.into_iter().zip([&b"x"[..], b"", b"yz"]) {
            expect.push((lsn, d.to_vec()));
        }
    }
    let pool = Pool::open(&path, &Default::default()).expect("reopen pool");
    let (mut log, n) = Log::open(&pool, range.clone()).expect("open");
    assert_eq!(n, expect.len() as u64);
    assert_eq!(contents(&log), expect);
    let lsn = log.append(b"after").expect("append");
    assert!(lsn > expect.last().expect("some").0);
    // Truncate to the middle and reopen: the head is durable.
    let cut = expect[20].0;
    assert_eq!(log.truncate_front(cut).expect("truncate"), 20);
    let (log, n) = Log::open(&pool, range).expect("open");
    assert_eq!(n, expect.len() as u64 - 20 + 1);
    assert_eq!(log.head(), cut);
    assert_eq!(contents(&log)[0], expect[20]);
}

#[test]
fn wraps_around_many_times_with_reopens() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 1024);
    let mut log = Log::create(&pool, range.clone()).expect("create");
    let mut model: VecDeque<(Lsn, Vec<u8>)> = VecDeque::new();
    for i in 0..3000u64 {
        let data = payload(i, (i * 7 % 120) as usize);
        match log.append(&data) {
            Ok(lsn) => model.push_back((lsn, data)),
            Err(Error::Full { .. }) => {
                // Drop about half, then retry.
                let keep = model.len() / 2;
                while model.len() > keep {
                    model.pop_front();
                }
                let to = model.front().map(|e| e.0).unwrap_or(log.tail());
                log.truncate_front(to).expect("truncate");
                model.push_back((log.append(&data).expect("after truncate"), data));
            }
            Err(e) => panic!("append {i}: {e}"),
        }
        if i % 97 == 0 {
            let (l, n) = Log::open(&pool, range.clone()).expect("open");
            log = l;
            assert_eq!(n, model.len() as u64, "at {i}");
        }
        if i % 31 == 0 {
            assert_eq!(contents(&log), Vec::from(model.clone()), "at {i}");
        }
    }
    let passes = log.tail().get() / log.capacity();
    assert!(passes >= 50, "only {passes} passes");
}

/// Apply the words of `subset` (byte offsets) from `after` onto `before`, reopen, and check that
/// recovery found exactly `expect` (the entries before the torn append, or with it if whole).
fn check_torn(
    pool: &Pool,
    range: &Range<u64>,
    before: &[u8],
    after: &[u8],
    subset: &[usize],
    expect: &[(Lsn, Vec<u8>)],
) {
    let mut image = before.to_vec();
    for &o in subset {
        image[o..o + 8].copy_from_slice(&after[o..o + 8]);
    }
    restore(pool, range, &image);
    let (log, n) = Log::open(pool, range.clone()).expect("open torn image");
    assert_eq!(n, expect.len() as u64, "subset {subset:?}");
    assert_eq!(contents(&log), expect, "subset {subset:?}");
}

/// Build a log whose tail sits `tail_from_end` words before the end of its ring, with a few
/// live entries.
fn log_near_wrap(pool: &Pool, range: &Range<u64>, tail_from_end: u64) -> Vec<(Lsn, Vec<u8>)> {
    let mut log = Log::create(pool, range.clone()).expect("create");
    let cap_words = log.capacity() / 8;
    // Fill with 1-word records until the tail is where we want it, dropping as we go.
    while log.tail().get() / 8 % cap_words != cap_words - tail_from_end % cap_words {
        if log.free() < 64 {
            log.reset().expect("reset");
        }
        log.append(b"").expect("filler");
    }
    log.reset().expect("reset");
    let mut expect = Vec::new();
    for i in 0..3 {
        let d = payload(100 + i, 5);
        expect.push((log.append(&d).expect("append"), d));
    }
    expect
}

#[test]
fn torn_append_every_prefix_and_every_subset() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 512);
    // Tail positions: far from the end, and straddling the wrap point at each offset.
    for tail_from_end in [40, 3 + 3 * 2, 4 + 3 * 2, 9 + 3 * 2, 10 + 3 * 2] {
        let expect = log_near_wrap(&pool, &range, tail_from_end);
        let before = snapshot(&pool, &range);
        let data = payload(7, 64);
        {
            let (mut log, _) = Log::open(&pool, range.clone()).expect("open");
            log.append(&data).expect("append");
        }
        let after = snapshot(&pool, &range);
        let words = changed_words(&before, &after);
        assert_eq!(words.len(), 10, "a 64-byte append writes 10 words");
        let mut whole = expect.clone();
        let (log, _) = Log::open(&pool, range.clone()).expect("open");
        whole.push((log.tail(), Vec::new()));
        let lsn_new = contents_after(&pool, &range).last().expect("entry").0;
        whole.pop();
        whole.push((lsn_new, data.clone()));
        // Every subset of the 10 words (includes every prefix and the empty and full sets).
        for mask in 0u32..1 << words.len() {
            let subset: Vec<usize> = (0..words.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| words[i])
                .collect();
            let want = if subset.len() == words.len() {
                &whole
            } else {
                &expect
            };
            check_torn(&pool, &range, &before, &after, &subset, want);
        }
    }
}

fn contents_after(pool: &Pool, range: &Range<u64>) -> Vec<(Lsn, Vec<u8>)> {
    let (log, _) = Log::open(pool, range.clone()).expect("open");
    contents(&log)
}

#[test]
fn torn_batch_is_all_or_nothing() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 512);
    for tail_from_end in [40, 5 + 3 * 2] {
        let expect = log_near_wrap(&pool, &range, tail_from_end);
        let before = snapshot(&pool, &range);
        let batch: Vec<Vec<u8>> = (0..3).map(|i| payload(200 + i, 7)).collect();
        {
            let (mut log, _) = Log::open(&pool, range.clone()).expect("open");
            let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
            let fences = log.stats().fences;
            log.append_many(&refs).expect("append_many");
            assert_eq!(log.stats().fences - fences, 1, "one fence per batch");
        }
        let after = snapshot(&pool, &range);
        let whole = contents_after(&pool, &range);
        assert_eq!(whole.len(), expect.len() + 3);
        let words = changed_words(&before, &after);
        assert_eq!(words.len(), 6);
        for mask in 0u32..1 << words.len() {
            let subset: Vec<usize> = (0..words.len())
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| words[i])
                .collect();
            let want = if subset.len() == words.len() {
                &whole
            } else {
                &expect
            };
            check_torn(&pool, &range, &before, &after, &subset, want);
        }
    }
}

/// The story this guards: a torn long append leaves some of its words (with the current torn
/// bit) past the tail. If recovery left them there, a later shorter append that is itself torn
/// could "complete" with those leftover words. Open must clean the free space.
#[test]
fn leftovers_of_a_torn_append_never_complete_a_later_one() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 1024);
    let expect = log_near_wrap(&pool, &range, 60);
    let before = snapshot(&pool, &range);
    let long = payload(1, 300);
    {
        let (mut log, _) = Log::open(&pool, range.clone()).expect("open");
        log.append(&long).expect("append");
    }
    let after = snapshot(&pool, &range);
    let words = changed_words(&before, &after);
    // Tear: keep every word of the long append but its length word.
    check_torn(&pool, &range, &before, &after, &words[1..], &expect);
    // Recovery has run. Append a short entry, then tear a second one keeping only its length
    // word: every payload word it lacks must read as "not written".
    let short = payload(2, 8);
    let (mut log, _) = Log::open(&pool, range.clone()).expect("open");
    let lsn_short = log.append(&short).expect("short");
    let before2 = snapshot(&pool, &range);
    {
        let (mut log, _) = Log::open(&pool, range.clone()).expect("open");
        log.append(&payload(3, 60)).expect("second");
    }
    let after2 = snapshot(&pool, &range);
    let words2 = changed_words(&before2, &after2);
    let mut want = expect.clone();
    want.push((lsn_short, short));
    for keep in 1..words2.len() {
        check_torn(&pool, &range, &before2, &after2, &words2[..keep], &want);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<u8>),
    AppendMany(Vec<Vec<u8>>),
    /// Truncate before the live entry at this fraction (per mille) of the live ones.
    Truncate(u16),
    Reset,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec(any::<u8>(), 0..150).prop_map(Op::Append),
        2 => prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..5)
            .prop_map(Op::AppendMany),
        2 => (0u16..=1000).prop_map(Op::Truncate),
        1 => Just(Op::Reset),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn behaves_like_a_queue(ops in prop::collection::vec(op(), 1..120), area in 1u64..24) {
        let dir = shm_dir();
        let pool = new_pool(&dir);
        let range = region(&pool, area * 64);
        let mut log = Log::create(&pool, range.clone()).expect("create");
        let mut model: VecDeque<(Lsn, Vec<u8>)> = VecDeque::new();
        let size = |d: &[u8]| Log::<&Pool>::record_size(d.len());
        for op in ops {
            match op {
                Op::Append(d) => {
                    let need = size(&d);
                    match log.append(&d) {
                        Ok(lsn) => model.push_back((lsn, d)),
                        Err(Error::Full { needed, free }) => {
                            prop_assert_eq!(needed, need);
                            prop_assert!(need > free && need <= log.capacity());
                        }
                        Err(Error::TooLarge { .. }) => prop_assert!(need > log.capacity()),
                        Err(e) => prop_assert!(false, "append: {}", e),
                    }
                }
                Op::AppendMany(batch) => {
                    let refs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                    let need: u64 = batch.iter().map(|d| size(d)).sum();
                    match log.append_many(&refs) {
                        Ok(lsns) => {
                            prop_assert_eq!(lsns.len(), batch.len());
                            model.extend(lsns.into_iter().zip(batch));
                        }
                        Err(Error::Full { .. }) => prop_assert!(need > log.free()),
                        Err(Error::TooLarge { .. }) => {}
                        Err(e) => prop_assert!(false, "append_many: {}", e),
                    }
                }
                Op::Truncate(permille) => {
                    let k = model.len() * permille as usize / 1000;
                    let to = model.get(k).map(|e| e.0).unwrap_or(log.tail());
                    prop_assert_eq!(log.truncate_front(to).expect("truncate"), k as u64);
                    model.drain(..k);
                }
                Op::Reset => {
                    log.reset().expect("reset");
                    model.clear();
                }
                Op::Reopen => {
                    let (l, n) = Log::open(&pool, range.clone()).expect("open");
                    log = l;
                    prop_assert_eq!(n, model.len() as u64);
                }
            }
            prop_assert_eq!(log.len(), model.len() as u64);
            let used: u64 = model.iter().map(|(_, d)| size(d)).sum();
            prop_assert_eq!(log.used(), used);
        }
        prop_assert_eq!(contents(&log), Vec::from(model.clone()));
        let (log, _) = Log::open(&pool, range).expect("open");
        prop_assert_eq!(contents(&log), Vec::from(model));
    }
}

#[test]
fn bad_regions_are_refused() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let d = pool.data_offset();
    let bad = [
        d + 8..d + 8 + 4096,   // misaligned
        d..d + 128 + 32,       // too small
        0..4096,               // over the pool header
        d..pool.size() + 4096, // beyond the pool
    ];
    for range in bad {
        assert!(
            matches!(
                Log::create(&pool, range.clone()),
                Err(Error::InvalidRegion { .. })
            ),
            "{range:?}"
        );
        assert!(matches!(
            Log::open(&pool, range),
            Err(Error::InvalidRegion { .. })
        ));
    }
    assert!(matches!(
        Log::open(&pool, d..d + 4096),
        Err(Error::NotFormatted { .. })
    ));
    Log::create(&pool, d..d + 4096).expect("create");
    assert!(matches!(
        Log::open(&pool, d..d + 8192),
        Err(Error::RegionMismatch {
            created: 4096,
            given: 8192
        })
    ));
}

#[test]
fn bad_calls_get_clear_errors() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let mut log = Log::create(&pool, region(&pool, 256)).expect("create");
    let max = log.entry_len_max();
    assert_eq!(max, 63 * 3 + 7 * 7);
    assert!(matches!(
        log.append(&vec![0; max as usize + 1]),
        Err(Error::TooLarge { .. })
    ));
    log.append(&vec![1; max as usize]).expect("largest fits");
    assert!(matches!(
        log.append(b"more"),
        Err(Error::Full {
            needed: 16,
            free: 0
        })
    ));
    let a = log.tail();
    log.reset().expect("reset");
    let b = log.append(b"abc").expect("append");
    let c = log.append(b"def").expect("append");
    for lsn in [
        Lsn::from_raw(b.get() + 8),
        Lsn::from_raw(a.get() - 8),
        Lsn::from_raw(log.tail().get() + 16),
        Lsn::from_raw(c.get() + 3),
    ] {
        assert!(
            matches!(log.truncate_front(lsn), Err(Error::InvalidLsn { .. })),
            "{lsn}"
        );
    }
    assert_eq!(log.truncate_front(c).expect("truncate"), 1);
    assert_eq!(log.truncate_front(c).expect("again"), 0);
    assert!(log.append_many(&[]).expect("empty batch").is_empty());
    log.close();
    assert!(matches!(log.append(b"x"), Err(Error::Closed)));
    assert!(matches!(log.append_many(&[b"x"]), Err(Error::Closed)));
    assert!(matches!(log.truncate_front(c), Err(Error::Closed)));
    assert!(matches!(log.reset(), Err(Error::Closed)));
    assert!(matches!(log.iter().next(), Some(Err(Error::Closed))));
}

#[test]
fn damaged_headers() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 1024);
    let mut log = Log::create(&pool, range.clone()).expect("create");
    log.append(b"one").expect("append");
    log.truncate_front(log.tail()).expect("truncate"); // generation 3 in copy 1
    log.append(b"two").expect("append");
    let good = snapshot(&pool, &range);
    // One copy damaged: the other (older head) is used; nothing is lost but a truncation.
    for copy in 0..2 {
        let mut img = good.clone();
        img[copy * 64 + 20] ^= 0x10;
        restore(&pool, &range, &img);
        let (_log, n) = Log::open(&pool, range.clone()).expect("one copy left");
        assert_eq!(n, if copy == 0 { 1 } else { 2 });
    }
    let mut img = good.clone();
    img[20] ^= 1;
    img[64 + 20] ^= 1;
    restore(&pool, &range, &img);
    assert!(matches!(
        Log::open(&pool, range.clone()),
        Err(Error::Corrupt { .. })
    ));
}

/// Every single-bit flip of a small log's entries area: open never panics, and whatever it
/// returns is a prefix of what was appended (a flipped torn bit looks like a torn append; a
/// flipped data bit fails the checksum and is reported as corruption).
#[test]
fn every_bit_flip_in_the_entries_area() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 256);
    let mut log = Log::create(&pool, range.clone()).expect("create");
    let mut expect = Vec::new();
    for i in 0..5 {
        let d = payload(i, 20);
        expect.push((log.append(&d).expect("append"), d));
    }
    let good = snapshot(&pool, &range);
    let (mut ok, mut corrupt) = (0, 0);
    for bit in 128 * 8..good.len() * 8 {
        let mut img = good.clone();
        img[bit / 8] ^= 1 << (bit % 8);
        restore(&pool, &range, &img);
        match Log::open(&pool, range.clone()) {
            Ok((log, n)) => {
                let got = contents(&log);
                assert_eq!(got.len() as u64, n);
                assert_eq!(got[..], expect[..got.len()], "bit {bit}");
                ok += 1;
            }
            Err(Error::Corrupt { .. }) => corrupt += 1,
            Err(e) => panic!("bit {bit}: {e}"),
        }
    }
    assert!(ok > 0 && corrupt > 0);
}

#[test]
fn random_garbage_never_panics() {
    let dir = shm_dir();
    let pool = new_pool(&dir);
    let range = region(&pool, 512);
    let mut log = Log::create(&pool, range.clone()).expect("create");
    log.append(b"x").expect("append");
    let good = snapshot(&pool, &range);
    for seed in 0..2000u64 {
        let mut img = good.clone();
        let noise = payload(seed, img.len() - 128);
        // Keep the headers, fill the area with noise of varying density.
        for (i, b) in noise.iter().enumerate() {
            if seed % 4 == 0 || (*b as u64) < seed % 256 {
                img[128 + i] = *b;
            }
        }
        restore(&pool, &range, &img);
        if let Ok((log, _)) = Log::open(&pool, range.clone()) {
            for e in log.iter() {
                e.expect("entries found by recovery read back");
            }
        }
    }
}

#[test]
fn handles_can_move_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Log<&Pool>>();
    send_sync::<Log<std::sync::Arc<Pool>>>();
    send_sync::<Log<Box<Pool>>>();
    let dir = shm_dir();
    let pool = std::sync::Arc::new(new_pool(&dir));
    let range = region(&pool, 4096);
    let mut log = Log::create(pool.clone(), range.clone()).expect("create");
    let lsn = std::thread::spawn(move || log.append(b"from a thread").expect("append"))
        .join()
        .expect("thread");
    let (log, n) = Log::open(pool, range).expect("open");
    assert_eq!((n, contents(&log)[0].0), (1, lsn));
}
