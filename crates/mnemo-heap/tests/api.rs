//! The heap's API: allocation, transactions, regions, roots, consistent updates, bad input.

mod common;

use common::{create, reopen, shm_dir};
use mnemo_heap::{Error, Heap, PPtr, Persist};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

const MIB: u64 = 1 << 20;

#[derive(
    FromBytes, IntoBytes, Immutable, KnownLayout, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
#[repr(C)]
struct Node {
    key: u64,
    value: u64,
    next: PPtr<Node>,
}

fn assert_persist<T: Persist>() {}

#[test]
fn typed_pointers_are_eight_bytes_and_persistable() {
    assert_eq!(std::mem::size_of::<PPtr<Node>>(), 8);
    assert_persist::<Node>();
    assert_persist::<PPtr<PPtr<u64>>>();
    assert!(PPtr::<Node>::null().is_null());
}

#[test]
fn allocations_and_values_survive_reopen() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let sizes = [
        1u64,
        16,
        17,
        64,
        100,
        1000,
        4096,
        65536,
        65537,
        300_000,
        1 << 20,
    ];
    let mut objects = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let off = heap
            .tx(|tx| {
                let off = tx.alloc_bytes(size)?;
                tx.write_bytes(off, &(i as u64 + 1).to_le_bytes()[..size.min(8) as usize])?;
                Ok(off)
            })
            .unwrap();
        assert!(heap.usable_size(off).unwrap() >= size);
        objects.push((off, size, i as u64 + 1));
    }
    // No two allocations overlap.
    let mut spans: Vec<(u64, u64)> = objects.iter().map(|&(o, s, _)| (o, o + s)).collect();
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap {w:?}");
    }
    let live = heap.live_allocations();
    let heap = reopen(heap, &path);
    assert_eq!(heap.live_allocations(), live);
    for &(off, size, v) in &objects {
        let mut buf = vec![0u8; size.min(8) as usize];
        heap.read_bytes(off, &mut buf).unwrap();
        assert_eq!(buf, v.to_le_bytes()[..size.min(8) as usize]);
    }
    for &(off, _, _) in &objects {
        heap.pfree(off).unwrap();
    }
    assert!(heap.live_allocations().is_empty());
    let heap = reopen(heap, &path);
    assert!(heap.live_allocations().is_empty());
    let stats = heap.stats();
    assert_eq!(stats.used_bytes, 0);
    assert!(stats.chunks > 0);
}

#[test]
fn transactions_see_their_writes_and_abort_cleanly() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let root = heap.root::<Node>("root").unwrap();
    heap.tx(|tx| {
        tx.write(
            root,
            &Node {
                key: 1,
                value: 10,
                next: PPtr::null(),
            },
        )?;
        assert_eq!(tx.read(root)?.value, 10);
        // Outside the transaction the old value is still visible.
        assert_eq!(heap.get(root)?.value, 0);
        Ok(())
    })
    .unwrap();
    assert_eq!(heap.get(root).unwrap().value, 10);

    let live_before = heap.live_allocations();
    let err = heap
        .tx(|tx| {
            let n = tx.alloc::<Node>()?;
            tx.write(
                n,
                &Node {
                    key: 2,
                    value: 20,
                    next: PPtr::null(),
                },
            )?;
            tx.write(
                root,
                &Node {
                    key: 1,
                    value: 11,
                    next: n,
                },
            )?;
            Err::<(), _>(Error::InvalidArgument("user said no".into()))
        })
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    assert_eq!(heap.get(root).unwrap().value, 10);
    assert_eq!(heap.live_allocations(), live_before);

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = heap.tx(|tx| {
            tx.alloc::<Node>()?;
            tx.write(
                root,
                &Node {
                    key: 1,
                    value: 12,
                    next: PPtr::null(),
                },
            )?;
            panic!("boom");
            #[allow(unreachable_code)]
            Ok(())
        });
    }));
    assert!(panicked.is_err());
    assert_eq!(heap.get(root).unwrap().value, 10);
    assert_eq!(heap.live_allocations(), live_before);
    // The thread's transaction state was cleaned up: a new transaction works.
    heap.tx(|tx| {
        tx.write(
            root,
            &Node {
                key: 1,
                value: 13,
                next: PPtr::null(),
            },
        )
    })
    .unwrap();
    let heap = reopen(heap, &path);
    let root = heap.root::<Node>("root").unwrap();
    assert_eq!(heap.get(root).unwrap().value, 13);
    assert_eq!(heap.live_allocations(), live_before);
}

/// A transaction is an explicit object: a heap call made while one is open is a
/// transaction of its own (it does not join), and a doomed transaction's commit aborts.
#[test]
fn alloc_filled_writes_its_image_and_refuses_a_larger_one() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let image: Vec<u8> = (0..60u8).collect();
    let live = heap.live_allocations().len();
    // An image longer than the allocation: refused, nothing allocated, the transaction
    // goes on.
    let off = heap
        .tx(|tx| {
            let err = tx.alloc_filled(8, &[7; 9]).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
            let off = tx.alloc_filled(100, &image)?;
            let mut seen = vec![0u8; image.len()];
            tx.read_bytes(off, &mut seen)?;
            assert_eq!(seen, image, "the transaction reads its image");
            Ok(off)
        })
        .unwrap();
    assert_eq!(heap.live_allocations().len(), live + 1);
    assert!(heap.usable_size(off).unwrap() >= 100);
    let heap = reopen(heap, &path);
    let mut stored = vec![0u8; image.len()];
    heap.read_bytes(off, &mut stored).unwrap();
    assert_eq!(stored, image, "the image is durable");
    // Aborted, the allocation is gone.
    let mut gone = 0;
    let _ = heap.tx(|tx| {
        gone = tx.alloc_filled(64, &image)?;
        Err::<(), _>(Error::InvalidArgument("abort".into()))
    });
    assert!(heap.usable_size(gone).is_none());
    assert_eq!(heap.live_allocations().len(), live + 1);
}

#[test]
fn transactions_are_explicit_and_never_joined() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let a = heap.root::<u64>("a").unwrap();
    let b = heap.root::<u64>("b").unwrap();
    heap.tx(|tx| {
        tx.write(a, &1)?;
        assert_eq!(tx.read(a)?, 1);
        // Another transaction, committed on its own: it does not see `tx`'s write.
        heap.tx(|other| {
            assert_eq!(other.read(a)?, 0);
            other.write(b, &2)
        })?;
        assert_eq!(heap.get(b)?, 2, "the other transaction committed at once");
        assert_eq!(heap.get(a)?, 0, "tx's write waits for its commit");
        Ok(())
    })
    .unwrap();
    assert_eq!((heap.get(a).unwrap(), heap.get(b).unwrap()), (1, 2));

    // A doomed transaction aborts at commit even if the code swallowed the failure.
    let result = heap.tx(|tx| {
        tx.write(a, &5)?;
        tx.doom("a step failed");
        Ok(())
    });
    assert!(matches!(result, Err(Error::Aborted(_))), "{result:?}");
    assert_eq!(heap.get(a).unwrap(), 1);

    // Named regions in a transaction exist only if it commits.
    let tx = heap.begin().unwrap();
    let r = tx.nvalloc("in-tx", 64).unwrap();
    tx.write_bytes(r, &[7; 8]).unwrap();
    assert_eq!(heap.region("in-tx").unwrap(), None, "not before the commit");
    assert!(matches!(heap.nvalloc("in-tx", 64), Err(Error::NameBusy(_))));
    tx.abort();
    assert_eq!(heap.region("in-tx").unwrap(), None);
    let r = heap
        .tx(|tx| {
            let r = tx.nvalloc("in-tx", 64)?;
            tx.write_bytes(r, &[7; 8])?;
            Ok(r)
        })
        .unwrap();
    assert_eq!(heap.region("in-tx").unwrap(), Some((r, 64)));
    heap.tx(|tx| tx.nvfree("in-tx")).unwrap();
    assert_eq!(heap.region("in-tx").unwrap(), None);
}

#[test]
fn explicit_begin_commit_abort() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let a = heap.root::<u64>("a").unwrap();
    let tx = heap.begin().unwrap();
    tx.write(a, &7).unwrap();
    tx.commit().unwrap();
    assert_eq!(heap.get(a).unwrap(), 7);
    let tx = heap.begin().unwrap();
    tx.write(a, &8).unwrap();
    tx.abort();
    assert_eq!(heap.get(a).unwrap(), 7);
    {
        let tx = heap.begin().unwrap();
        tx.write(a, &9).unwrap();
        // dropped: aborted
    }
    assert_eq!(heap.get(a).unwrap(), 7);
}

#[test]
fn bad_frees_are_refused_and_harmless() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let small = heap.pmalloc(64).unwrap();
    let large = heap.pmalloc(1 << 20).unwrap();
    let data_start = heap.geometry().zones_offset;
    for (off, what) in [
        (0, "pool header"),
        (data_start + 8, "zone table"),
        (small + 8, "middle of an object"),
        (small + 64, "never allocated unit"),
        (large + 4096, "inside a large allocation"),
        (large + (256 << 10), "continuation chunk"),
        (u64::MAX - 7, "far beyond the pool"),
    ] {
        let err = heap.pfree(off).unwrap_err();
        assert!(matches!(err, Error::InvalidFree { .. }), "{what}: {err}");
    }
    heap.pfree(small).unwrap();
    assert!(
        matches!(heap.pfree(small), Err(Error::InvalidFree { .. })),
        "double free"
    );
    let err = heap.tx(|tx| {
        tx.free_offset(large)?;
        tx.free_offset(large)
    });
    assert!(
        matches!(err, Err(Error::InvalidFree { .. })),
        "double free in one transaction"
    );
    // The aborted transaction released its pending free: the object is still live.
    assert!(heap.usable_size(large).is_some());
    heap.pfree(large).unwrap();
    assert!(matches!(heap.pfree(large), Err(Error::InvalidFree { .. })));
    let heap = reopen(heap, &path);
    assert!(heap.live_allocations().is_empty());
}

/// Another thread cannot free (or see as live) an allocation whose transaction has not
/// committed, and can once it has; an aborted one never becomes live. Commits leave their
/// units' reservation marks for the free path to resolve against the run's bitmap (no second
/// arena lock per allocation), so this checks that resolution both ways.
#[test]
fn allocations_of_an_open_transaction_are_not_freeable_by_others() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    for (size, commit) in [
        (64u64, true),
        (64, false),
        (1 << 20, true),
        (1 << 20, false),
    ] {
        let (to_other, from_owner) = std::sync::mpsc::channel::<u64>();
        let (to_owner, from_other) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let other = heap.clone();
            s.spawn(move || {
                let heap = other;
                let off = from_owner.recv().unwrap();
                assert!(
                    heap.usable_size(off).is_none(),
                    "{size}: live before its commit"
                );
                let err = heap.pfree(off).unwrap_err();
                assert!(
                    matches!(err, Error::InvalidFree { .. }),
                    "{size}: a free of an uncommitted allocation: {err}"
                );
                to_owner.send(()).unwrap();
                let off = from_owner.recv().unwrap();
                if commit {
                    assert!(heap.usable_size(off).unwrap() >= size);
                    heap.pfree(off).unwrap();
                    assert!(matches!(heap.pfree(off), Err(Error::InvalidFree { .. })));
                } else {
                    assert!(heap.usable_size(off).is_none(), "{size}: aborted, not live");
                    assert!(matches!(heap.pfree(off), Err(Error::InvalidFree { .. })));
                }
            });
            let tx = heap.begin().unwrap();
            let off = tx.alloc_bytes(size).unwrap();
            to_other.send(off).unwrap();
            from_other.recv().unwrap();
            if commit {
                tx.commit().unwrap();
            } else {
                tx.abort();
            }
            to_other.send(off).unwrap();
        });
    }
    let heap = reopen(heap, &path);
    assert!(heap.live_allocations().is_empty());
}

#[test]
fn transaction_larger_than_the_log_is_refused() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let big = heap.pmalloc(64 << 10).unwrap();
    let err = heap
        .tx(|tx| tx.write_bytes(big, &vec![7u8; 32 << 10]))
        .unwrap_err();
    assert!(matches!(err, Error::TransactionTooLarge { .. }), "{err}");
    let mut buf = [0u8; 8];
    heap.read_bytes(big, &mut buf).unwrap();
    assert_ne!(buf, [7u8; 8]);
    // Writes into an object allocated by the same transaction are not logged: no limit.
    heap.tx(|tx| {
        let fresh = tx.alloc_bytes(64 << 10)?;
        tx.write_bytes(fresh, &vec![9u8; 64 << 10])
    })
    .unwrap();
}

#[test]
fn out_of_space_is_an_error_and_the_heap_recovers() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 2 * MIB, 4 * MIB);
    let mut got = Vec::new();
    let err = loop {
        match heap.pmalloc(256 << 10) {
            Ok(off) => got.push(off),
            Err(e) => break e,
        }
        assert!(got.len() < 100);
    };
    assert!(matches!(err, Error::OutOfSpace { .. }), "{err}");
    assert!(!got.is_empty());
    assert!(matches!(
        heap.pmalloc(1 << 40),
        Err(Error::OutOfSpace { .. })
    ));
    heap.pfree(got.pop().unwrap()).unwrap();
    let again = heap.pmalloc(256 << 10).unwrap();
    got.push(again);
    let heap = reopen(heap, &path);
    assert_eq!(heap.live_allocations().len(), got.len());
}

#[test]
fn the_pool_grows_on_demand() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 2 * MIB, 256 * MIB);
    let before = heap.pool().size();
    let mut offs = Vec::new();
    for _ in 0..40 {
        offs.push(heap.pmalloc(1 << 20).unwrap());
    }
    assert!(heap.pool().size() > before);
    let heap = reopen(heap, &path);
    assert_eq!(heap.live_allocations().len(), 40);
    assert!(heap.stats().chunks >= 160);
}

/// A heap of 4 GiB on tmpfs takes memory for the chunks it hands out, not for the whole
/// pool. Chunks are taken best fit, from the smallest free span: in a new pool that is the
/// last zone's (zones are 1 GiB; the last is partial), 3 GiB in. The pool backed such a range
/// by backing every page up to it, which took 3.1 GiB of /dev/shm for 16 MiB handed out (and
/// a server's first stores then paid for first touches of that memory). On a disk file
/// system every block is reserved at creation by design (unwritten extents), so there is
/// nothing to check there.
#[test]
fn a_heap_on_tmpfs_takes_memory_for_what_it_hands_out() {
    let dir = shm_dir();
    if !dir.path().starts_with("/dev/shm") {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let allocated = |path: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).expect("stat").blocks() * 512
    };
    let (heap, path) = create(&dir, 4 << 30, 4 << 30);
    let at_creation = allocated(&path);
    for _ in 0..16 {
        heap.pmalloc(1 << 20).expect("allocate");
    }
    let used = allocated(&path);
    let heap = reopen(heap, &path);
    assert_eq!(heap.live_allocations().len(), 16);
    let reopened = allocated(&path);
    for (when, bytes) in [
        ("created", at_creation),
        ("16 MiB handed out", used),
        ("reopened", reopened),
    ] {
        assert!(
            bytes < 128 * MIB,
            "{when}: the 4 GiB pool holds {} MiB of tmpfs memory",
            bytes / MIB
        );
    }
}

#[test]
fn named_regions_and_roots() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let r = heap.nvalloc("table", 1000).unwrap();
    assert_eq!(
        heap.nvalloc("table", 1000).unwrap(),
        r,
        "existing name returns the region"
    );
    assert!(matches!(
        heap.nvalloc("table", 2000),
        Err(Error::SizeMismatch { existing: 1000, .. })
    ));
    let long = "x".repeat(64);
    assert!(matches!(
        heap.nvalloc(&long, 8),
        Err(Error::NameTooLong { len: 64, max: 63 })
    ));
    assert!(heap.nvalloc(&"y".repeat(63), 8).is_ok());
    assert!(matches!(heap.nvalloc("", 8), Err(Error::InvalidName(_))));
    assert!(matches!(
        heap.nvfree("nothing"),
        Err(Error::NoSuchRegion(_))
    ));
    let cfg = heap.root::<Node>("config").unwrap();
    assert_eq!(
        heap.get(cfg).unwrap(),
        Node::default(),
        "roots start zeroed"
    );
    heap.tx(|tx| {
        tx.write(
            cfg,
            &Node {
                key: 42,
                value: 43,
                next: PPtr::null(),
            },
        )
    })
    .unwrap();
    // Region creation inside a failing transaction leaves no trace.
    let _ = heap.tx(|tx| {
        tx.nvalloc("ghost", 64)?;
        Err::<(), _>(Error::InvalidArgument("no".into()))
    });
    assert_eq!(heap.region("ghost").unwrap(), None);

    let heap = reopen(heap, &path);
    assert_eq!(heap.region("table").unwrap(), Some((r, 1000)));
    let cfg2 = heap.root::<Node>("config").unwrap();
    assert_eq!(cfg2, cfg);
    assert_eq!(heap.get(cfg2).unwrap().key, 42);
    assert_eq!(heap.regions().unwrap().len(), 3);
    heap.nvfree("table").unwrap();
    assert_eq!(heap.region("table").unwrap(), None);
    let heap = reopen(heap, &path);
    assert_eq!(heap.region("table").unwrap(), None);
    assert_eq!(heap.regions().unwrap().len(), 2);
    // The TOC fills up cleanly (64 entries in the test options).
    let mut n = 0;
    let err = loop {
        match heap.nvalloc(&format!("r{n}"), 16) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::TocFull(64)), "{err}");
    assert_eq!(n, 62);
}

#[test]
fn closed_heap_refuses_calls() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let a = heap.root::<u64>("a").unwrap();
    let clone = heap.clone();
    heap.close();
    assert!(matches!(clone.get(a), Err(Error::Closed)));
    assert!(matches!(clone.pmalloc(8), Err(Error::Closed)));
    assert!(matches!(clone.tx(|tx| tx.write(a, &1)), Err(Error::Closed)));
    assert!(matches!(clone.atomic_update(a, 5u64), Err(Error::Closed)));
    assert!(matches!(clone.nvalloc("b", 8), Err(Error::Closed)));
    assert!(matches!(clone.root::<u64>("a"), Err(Error::Closed)));
}

#[test]
fn atomic_update_survives_reopen_even_over_a_logged_write() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let word = heap.root::<u64>("word").unwrap();
    heap.tx(|tx| tx.write(word, &1)).unwrap();
    // The record that wrote 1 is still in its lane; the atomic store must retire it.
    heap.atomic_update(word, 2u64).unwrap();
    assert_eq!(heap.get(word).unwrap(), 2);
    heap.atomic_update(word, 3u64).unwrap();
    let heap = reopen(heap, &path);
    let word = heap.root::<u64>("word").unwrap();
    assert_eq!(heap.get(word).unwrap(), 3);
    assert!(matches!(
        heap.atomic_update(word.byte_add::<u64>(4), 1u64),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        heap.atomic_update(word.cast::<u32>(), 1u32),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn shadow_updates_publish_new_versions_and_free_old_ones() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let slot = heap.root::<PPtr<Node>>("current").unwrap();
    let v1 = heap
        .shadow_update(slot, |old| {
            assert!(old.is_none());
            Node {
                key: 1,
                value: 100,
                next: PPtr::null(),
            }
        })
        .unwrap();
    let v2 = heap
        .shadow_update(slot, |old| Node {
            value: old.unwrap().value + 1,
            ..old.unwrap()
        })
        .unwrap();
    assert_ne!(v1, v2);
    assert!(heap.usable_size(v1.offset()).is_none(), "old version freed");
    assert_eq!(heap.get(heap.get(slot).unwrap()).unwrap().value, 101);
    let heap = reopen(heap, &path);
    let slot = heap.root::<PPtr<Node>>("current").unwrap();
    assert_eq!(heap.get(slot).unwrap(), v2);
    assert_eq!(heap.get(v2).unwrap().value, 101);
    assert_eq!(heap.live_allocations().len(), 2, "the root and one version");
}

#[test]
fn alloc_into_publishes_atomically() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let head = heap.root::<PPtr<Node>>("head").unwrap();
    let n = heap
        .alloc_into(
            head,
            &Node {
                key: 5,
                value: 6,
                next: PPtr::null(),
            },
        )
        .unwrap();
    let heap = reopen(heap, &path);
    let head = heap.root::<PPtr<Node>>("head").unwrap();
    assert_eq!(heap.get(head).unwrap(), n);
    assert_eq!(heap.get(n).unwrap().key, 5);
}

#[test]
fn threads_commit_concurrently() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 256 * MIB);
    let threads = 4;
    let per_thread = 150;
    let counters: Vec<PPtr<u64>> = (0..threads)
        .map(|t| heap.root::<u64>(&format!("count{t}")).unwrap())
        .collect();
    let kept: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let heap = heap.clone();
                let counter = counters[t];
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..per_thread {
                        let size = [24u64, 64, 200, 3000, 70_000][(i + t) % 5];
                        let off = heap
                            .tx(|tx| {
                                let off = tx.alloc_bytes(size)?;
                                tx.write_bytes(off, &(off ^ 0xabcd).to_le_bytes())?;
                                let c = tx.read(counter)?;
                                tx.write(counter, &(c + 1))?;
                                Ok(off)
                            })
                            .unwrap();
                        if i % 3 == 0 {
                            heap.pfree(off).unwrap();
                        } else {
                            mine.push(off);
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u64> = kept.into_iter().flatten().collect();
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "an offset was handed out twice");
    let check = |heap: &Heap| {
        for &off in &all {
            let mut b = [0u8; 8];
            heap.read_bytes(off, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), off ^ 0xabcd);
        }
        for c in &counters {
            assert_eq!(heap.get(*c).unwrap(), per_thread as u64);
        }
        let live: Vec<u64> = heap
            .live_allocations()
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        // Live = kept objects + the counters' regions.
        assert_eq!(live.len(), all.len() + threads);
    };
    check(&heap);
    let heap = reopen(heap, &path);
    check(&heap);
}

#[test]
fn stats_report_classes_and_fragmentation() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let offs: Vec<u64> = (0..100).map(|_| heap.pmalloc(64).unwrap()).collect();
    let stats = heap.stats();
    let class = stats.classes.iter().find(|c| c.size == 64).unwrap();
    assert_eq!(class.used, 100);
    assert_eq!(stats.used_bytes, 6400);
    for off in offs.iter().step_by(2) {
        heap.pfree(*off).unwrap();
    }
    let stats = heap.stats();
    assert_eq!(stats.used_bytes, 3200);
    assert!(stats.fragmentation() > 0.0 && stats.fragmentation() < 1.0);
}

#[test]
fn damaged_metadata_is_an_error_never_a_panic() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let g = heap.geometry();
    let root = heap.root::<[u64; 4]>("root").unwrap();
    let mut objs = Vec::new();
    for i in 0..50u64 {
        objs.push(
            heap.tx(|tx| {
                let o = tx.alloc_bytes([24, 300, 100_000][i as usize % 3])?;
                tx.write_bytes(o, &i.to_le_bytes())?;
                tx.write(root, &[i; 4])?;
                Ok(o)
            })
            .unwrap(),
        );
    }
    let first_run = objs[0] - objs[0] % (256 << 10);
    drop(heap);
    let pristine = std::fs::read(&path).unwrap();
    // Areas recovery and open read: superblock, TOC, lanes, zone table, a run's bitmap.
    let areas = [
        (g.base, 256),
        (g.toc_offset, 256),
        (g.lanes_offset, g.lane_log_size * 2),
        (g.zones_offset, 64),
        (first_run, 64),
    ];
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut outcomes = [0usize; 2];
    for round in 0..200 {
        let mut bytes = pristine.clone();
        let (start, len) = areas[round % areas.len()];
        for _ in 0..1 + round % 4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (start + x % len) as usize;
            bytes[at] = (x >> 32) as u8;
        }
        std::fs::write(&path, &bytes).unwrap();
        let result =
            std::panic::catch_unwind(|| Heap::open_file(&path).map(|h| h.live_allocations().len()));
        match result {
            Ok(Ok(_)) => outcomes[0] += 1,
            Ok(Err(_)) => outcomes[1] += 1,
            Err(_) => {
                panic!("open panicked on damaged metadata (round {round}, area at {start:#x})")
            }
        }
    }
    assert!(outcomes[1] > 0, "no damage was ever detected: {outcomes:?}");
}

#[test]
fn empty_runs_return_to_the_chunk_pool() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let offs: Vec<u64> = (0..10_000).map(|_| heap.pmalloc(64).unwrap()).collect();
    let runs = |h: &Heap| {
        h.stats()
            .classes
            .iter()
            .find(|c| c.size == 64)
            .map_or(0, |c| c.runs)
    };
    assert!(runs(&heap) >= 3);
    let free_chunks = heap.stats().chunks_free;
    for chunk in offs.chunks(100) {
        heap.tx(|tx| chunk.iter().try_for_each(|&o| tx.free_offset(o)))
            .unwrap();
    }
    assert_eq!(runs(&heap), 1, "all but one empty run released");
    assert!(heap.stats().chunks_free >= free_chunks + 2);
    let heap = reopen(heap, &path);
    assert_eq!(runs(&heap), 1);
    assert!(heap.live_allocations().is_empty());
    // The released chunks serve a large allocation.
    heap.pmalloc(512 << 10).unwrap();
}

/// The C ABI keeps a transaction between calls: `begin_owned` holds its own handle of the
/// heap, so it outlives the borrow it was begun from.
#[test]
fn an_owned_transaction_outlives_the_borrow() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let a = heap.root::<u64>("a").unwrap();
    let kept: Vec<mnemo_heap::Tx<'static>> = {
        let clone = heap.clone();
        let tx = clone.begin_owned().unwrap();
        tx.write(a, &1).unwrap();
        vec![tx]
    };
    let obj = kept[0].alloc::<u64>().unwrap();
    for tx in kept {
        tx.commit().unwrap();
    }
    assert_eq!(heap.get(a).unwrap(), 1);
    assert!(heap.usable_size(obj.offset()).is_some());
    let tx = heap.begin_owned().unwrap();
    tx.write(a, &2).unwrap();
    drop(tx);
    assert_eq!(heap.get(a).unwrap(), 1, "dropped: aborted");
}

#[test]
fn an_idle_threads_pending_record_does_not_block_other_threads() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let a = heap.root::<u64>("a").unwrap();
    let b = heap.root::<u64>("b").unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let heap_a = heap.clone();
        s.spawn(move || {
            // One commit, then idle: its record stays pending (applied, not fenced).
            heap_a.tx(|tx| tx.write(a, &1)).unwrap();
            done_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            heap_a.tx(|tx| tx.write(a, &2)).unwrap();
        });
        done_rx.recv().unwrap();
        // Many more commits than a lane has slots: the overwrite rule needs a durable claim
        // past the idle thread's record, which this thread makes by helping.
        for i in 1..=40u64 {
            heap.tx(|tx| tx.write(b, &i)).unwrap();
        }
        // An unlogged store over a word the other thread's pending record wrote.
        heap.atomic_update(a, 7u64).unwrap();
        assert_eq!(heap.get(a).unwrap(), 7);
        go_tx.send(()).unwrap();
    });
    let heap = reopen(heap, &path);
    let a = heap.root::<u64>("a").unwrap();
    let b = heap.root::<u64>("b").unwrap();
    assert_eq!(heap.get(a).unwrap(), 2);
    assert_eq!(heap.get(b).unwrap(), 40);
}

/// Rewrite the heap superblock of the closed pool at `path` as format version `version`
/// (`Geometry::encode` writes the version and the checksum).
fn set_heap_version(path: &std::path::Path, g: mnemo_heap::layout::Geometry, version: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    let raw = mnemo_heap::layout::Geometry { version, ..g }.encode();
    let at = g.base as usize;
    bytes[at..at + raw.as_bytes().len()].copy_from_slice(raw.as_bytes());
    std::fs::write(path, &bytes).unwrap();
}

/// Sync-point ranges per commit over 100 transactions of one word: 2 when every commit
/// flushes its predecessor's application, 1.5 when every other one defers it (refinement 10).
fn ranges_per_commit(heap: &Heap) -> f64 {
    use std::sync::atomic::Ordering;
    let word = heap.root::<u64>("counter").unwrap();
    heap.tx(|tx| tx.write(word, &1)).unwrap();
    let stats = heap.pool().stats();
    let (points, ranges) = (
        stats.sync_points.load(Ordering::Relaxed),
        stats.sync_ranges.load(Ordering::Relaxed),
    );
    for i in 0..100u64 {
        heap.tx(|tx| tx.write(word, &i)).unwrap();
    }
    let stats = heap.pool().stats();
    let points = stats.sync_points.load(Ordering::Relaxed) - points;
    let ranges = stats.sync_ranges.load(Ordering::Relaxed) - ranges;
    assert_eq!(points, 100);
    ranges as f64 / points as f64
}

/// A heap laid out as versions 2 and 3 lay lanes out: rings of 4 slots.
fn create_4_slot_heap(dir: &tempfile::TempDir) -> (Heap, std::path::PathBuf) {
    let path = dir.path().join("pool");
    let options = mnemo_heap::HeapOptions {
        lane_slots: 4,
        ..common::small_options()
    };
    let heap = Heap::create_file(&path, 4 * MIB, 64 * MIB, &options).unwrap();
    (heap, path)
}

/// A version 2 heap (written by builds that recover without refinement 10's rule) opens,
/// keeps its version, and its commits never leave the previous application unflushed: each
/// sync point names the record and the previous commit's applied word (2 ranges). A new
/// heap (version 4) alternates: every other commit names its record only.
#[test]
fn version_2_heaps_open_and_commit_without_deferral() {
    use mnemo_heap::layout::HEAP_VERSION;
    assert_eq!(HEAP_VERSION, 4);
    let dir = shm_dir();
    let (heap, path) = create_4_slot_heap(&dir);
    assert_eq!(heap.geometry().version, 4);
    assert_eq!(
        ranges_per_commit(&heap),
        1.5,
        "version 4: every other commit defers"
    );
    let g = heap.geometry();
    drop(heap);
    set_heap_version(&path, g, 2);
    let heap = Heap::open_file(&path).unwrap();
    assert_eq!(heap.geometry().version, 2);
    assert_eq!(heap.geometry().lane_slots, 4);
    assert_eq!(ranges_per_commit(&heap), 2.0, "version 2: no deferral");
    let heap = reopen(heap, &path);
    assert_eq!(heap.geometry().version, 2, "the version is kept");
    let word = heap.root::<u64>("counter").unwrap();
    assert_eq!(heap.get(word).unwrap(), 99);
}

/// A version 3 heap (rings of 4 slots, no slot count in its superblock) opens with 4 slots,
/// defers, keeps its version; its committed data survives reopening. A version 3 superblock
/// with a slot count in its reserved bytes is refused.
#[test]
fn version_3_heaps_open_with_four_slots() {
    let dir = shm_dir();
    let (heap, path) = create_4_slot_heap(&dir);
    let g = heap.geometry();
    drop(heap);
    set_heap_version(&path, g, 3);
    let heap = Heap::open_file(&path).unwrap();
    assert_eq!(
        (heap.geometry().version, heap.geometry().lane_slots),
        (3, 4)
    );
    assert_eq!(heap.geometry().slot_size(), 64 * 1024 / 4);
    assert_eq!(ranges_per_commit(&heap), 1.5, "version 3: deferral");
    let heap = reopen(heap, &path);
    assert_eq!(heap.geometry().version, 3, "the version is kept");
    let word = heap.root::<u64>("counter").unwrap();
    assert_eq!(heap.get(word).unwrap(), 99);
    // A slot count where version 3 has reserved zero bytes: damage, not a heap to guess at.
    let g = heap.geometry();
    drop(heap);
    let mut raw = mnemo_heap::layout::Geometry { version: 4, ..g }.encode();
    raw.version = 3.into();
    let bytes = raw.as_bytes();
    raw.checksum = crc32c::crc32c(&bytes[..bytes.len() - 4]).into();
    let mut file = std::fs::read(&path).unwrap();
    let at = g.base as usize;
    file[at..at + raw.as_bytes().len()].copy_from_slice(raw.as_bytes());
    std::fs::write(&path, &file).unwrap();
    let err = Heap::open_file(&path).unwrap_err().to_string();
    assert!(err.contains("slot count"), "{err}");
}

/// Rings of 4, 8 and 16 slots commit from several threads and recover the same data; the
/// slot count is read back from the superblock.
#[test]
fn lanes_of_any_allowed_slot_count_commit_and_recover() {
    for slots in [4u32, 8, 16] {
        let dir = shm_dir();
        let path = dir.path().join("pool");
        let options = mnemo_heap::HeapOptions {
            lane_slots: slots,
            ..common::small_options()
        };
        let heap = Heap::create_file(&path, 4 * MIB, 64 * MIB, &options).unwrap();
        let words: Vec<PPtr<u64>> = (0..3)
            .map(|t| heap.root::<u64>(&format!("w{t}")).unwrap())
            .collect();
        std::thread::scope(|s| {
            for &w in &words {
                let heap = heap.clone();
                s.spawn(move || {
                    for i in 1..=500u64 {
                        heap.tx(|tx| {
                            let _ = tx.alloc_bytes(64)?;
                            tx.write(w, &i)
                        })
                        .unwrap();
                    }
                });
            }
        });
        let heap = reopen(heap, &path);
        assert_eq!(heap.geometry().lane_slots, slots);
        for &w in &words {
            assert_eq!(heap.get(w).unwrap(), 500, "{slots} slots");
        }
        assert_eq!(heap.live_allocations().len(), 3 * 500 + 3, "{slots} slots");
    }
}

/// Slot counts that are not a power of two in 4..=16 are refused with a message naming the
/// rule.
#[test]
fn bad_slot_counts_are_refused() {
    for slots in [0u32, 2, 3, 12, 32] {
        let dir = shm_dir();
        let options = mnemo_heap::HeapOptions {
            lane_slots: slots,
            ..common::small_options()
        };
        let err =
            Heap::create_file(&dir.path().join("pool"), 4 * MIB, 64 * MIB, &options).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{slots}: {err}");
        assert!(err.to_string().contains("lane_slots"), "{err}");
    }
}

#[test]
fn older_heap_versions_are_refused_naming_both() {
    use mnemo_heap::layout::HEAP_VERSION;
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let g = heap.geometry();
    drop(heap);
    set_heap_version(&path, g, 1);
    let err = Heap::open_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("version 1") && err.contains(&format!("to {HEAP_VERSION}")),
        "{err}"
    );
}

/// The last handle of a heap dropped by a thread-local destructor, after the thread's own
/// thread-local lane state (its pending records) is gone: closing must still settle the
/// heap, not panic (a panic in a thread-local destructor aborts the process). The same
/// happens when a thread's allocation cache, returned at thread exit, holds the last
/// reference for a moment.
#[test]
fn the_last_handle_dropped_at_thread_exit_settles_the_heap() {
    use std::cell::RefCell;
    thread_local! {
        static HOLDER: RefCell<Option<Heap>> = const { RefCell::new(None) };
    }
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let word = heap.root::<u64>("w").unwrap();
    std::thread::spawn(move || {
        // Registered first, so destroyed last: after the heap's own thread-locals, which
        // the transactions below register.
        HOLDER.with_borrow_mut(|h| *h = Some(heap));
        HOLDER.with_borrow(|h| {
            let heap = h.as_ref().unwrap();
            for i in 1..=10u64 {
                heap.tx(|tx| {
                    let _ = tx.alloc_bytes(64)?;
                    tx.write(word, &i)
                })
                .unwrap();
            }
        });
    })
    .join()
    .unwrap();
    let heap = Heap::open_file(&path).unwrap();
    assert_eq!(heap.get(word).unwrap(), 10);
    assert_eq!(heap.live_allocations().len(), 10 + 1);
}
