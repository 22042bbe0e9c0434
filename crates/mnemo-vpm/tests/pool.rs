//! The stack above runs unchanged on a virtual region: a pool, a heap and its transactions
//! on a region four times larger than its budget of persistent memory, recovered after the
//! region is reopened.

mod common;

use std::path::Path;

use common::Dirs;
use mnemo_heap::{Heap, HeapOptions};
use mnemo_pmem::{CreateOptions, MediaKind, OpenOptions, Pool};

const MIB: u64 = 1 << 20;
const BLOCKS: u64 = 600;
const BLOCK: usize = 3000;

fn block(i: u64, prev: u64) -> Vec<u8> {
    let mut b: Vec<u8> = (0..BLOCK)
        .map(|k| (i as usize * 131 + k * 7) as u8)
        .collect();
    b[..8].copy_from_slice(&prev.to_le_bytes());
    b[8..16].copy_from_slice(&i.to_le_bytes());
    b
}

/// Walk the chain of blocks from the root and check every one.
fn check_chain(heap: &Heap) {
    let head = heap.root::<u64>("head").unwrap();
    let mut at = heap.get(head).unwrap();
    let mut count = 0;
    while at != 0 {
        let mut b = vec![0u8; BLOCK];
        heap.read_bytes(at, &mut b).unwrap();
        let i = u64::from_le_bytes(b[8..16].try_into().unwrap());
        let prev = u64::from_le_bytes(b[..8].try_into().unwrap());
        assert_eq!(i, BLOCKS - 1 - count, "blocks out of order");
        assert_eq!(b, block(i, prev), "block {i} damaged");
        at = prev;
        count += 1;
    }
    assert_eq!(count, BLOCKS);
}

#[test]
fn a_heap_on_a_region_larger_than_its_budget_commits_and_recovers() {
    let dirs = Dirs::new();
    let space = dirs.create(4 * MIB);
    space.allocate("heap", 8 * MIB, MIB / 2).unwrap();
    let region = space.open_region("heap", 0).unwrap();
    let stats = region.stats_handle();
    let name = Path::new("vpm:heap/0");
    let pool = Pool::create_on(
        Box::new(region),
        name,
        &CreateOptions::new(8 * MIB, "mnemo-heap"),
    )
    .unwrap();
    assert_eq!(pool.media_info().kind, MediaKind::Virtual);
    let heap = Heap::create(pool, &HeapOptions::default()).unwrap();
    let head = heap.root::<u64>("head").unwrap();
    for i in 0..BLOCKS {
        heap.tx(|tx| {
            let prev = tx.read(head)?;
            let at = tx.alloc_bytes(BLOCK as u64)?;
            tx.write_bytes(at, &block(i, prev))?;
            tx.write(head, &at)
        })
        .unwrap();
    }
    check_chain(&heap);
    let s = stats.stats();
    assert!(
        s.swap_outs > 0 && s.mrr() < 0.5,
        "the heap outgrew its budget: {s:?}"
    );
    drop(heap);

    let region = dirs.open().open_region("heap", 0).unwrap();
    let pool = Pool::open_on(Box::new(region), name, &OpenOptions::default()).unwrap();
    assert!(pool.was_clean());
    let heap = Heap::open(pool).unwrap();
    check_chain(&heap);
}
