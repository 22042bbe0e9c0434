//! The explicit transaction's write set and savepoints: read-your-writes over overlapping
//! writes against a byte-array model (proptest), and rollbacks of writes, allocations, frees
//! and hooks, nested.

mod common;

use common::{create, reopen, shm_dir};
use mnemo_heap::{Error, Heap};
use proptest::prelude::*;

const MIB: u64 = 1 << 20;
/// Bytes of each object the model covers.
const SPAN: usize = 512;

fn bytes(heap: &Heap, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    heap.read_bytes(offset, &mut out).unwrap();
    out
}

fn tx_bytes(tx: &mnemo_heap::Tx<'_>, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    tx.read_bytes(offset, &mut out).unwrap();
    out
}

#[test]
fn rollback_undoes_writes_allocations_frees_and_hooks_nested() {
    let dir = shm_dir();
    let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
    let a = heap.root::<[u64; 8]>("a").unwrap();
    let b = heap.pmalloc(64).unwrap();
    let big = heap.pmalloc(MIB).unwrap();
    let live_before = heap.live_allocations();

    let tx = heap.begin().unwrap();
    tx.write(a, &[1; 8]).unwrap();
    let fresh = tx.alloc_bytes(64).unwrap();
    tx.write_bytes(fresh, &[0x11; 64]).unwrap();

    let sp1 = tx.savepoint().unwrap();
    tx.write(a.cast::<u64>(), &2).unwrap();
    tx.write_bytes(fresh + 8, &[0x22; 16]).unwrap(); // in place, older than sp1
    let c = tx.alloc_bytes(100).unwrap();
    tx.write_bytes(c, &[0x33; 100]).unwrap();
    tx.free_offset(b).unwrap();
    let region = tx.nvalloc("made-after-sp1", 64).unwrap();

    let sp2 = tx.savepoint().unwrap();
    tx.write_bytes(a.offset() + 4, &[9; 16]).unwrap(); // straddles two earlier writes
    tx.write_bytes(c + 50, &[0x44; 8]).unwrap(); // in place, older than sp2
    let d = tx.alloc_bytes(3000).unwrap();
    tx.free_offset(c).unwrap(); // a free of the transaction's own allocation
    tx.free_offset(big).unwrap();
    assert!(matches!(tx.free_offset(b), Err(Error::InvalidFree { .. })));

    // Back to sp2: a's bytes, c's contents and its liveness, d and the frees of c and big.
    tx.rollback_to(&sp2).unwrap();
    let mut a_at_sp2 = [1u64; 8];
    a_at_sp2[0] = 2;
    assert_eq!(tx.read(a).unwrap(), a_at_sp2);
    assert_eq!(tx_bytes(&tx, c, 100), vec![0x33; 100]);
    assert!(matches!(tx.free_offset(b), Err(Error::InvalidFree { .. })));
    // sp2 stays open: roll back to it again after more work.
    tx.write_bytes(c, &[0x55; 8]).unwrap();
    tx.free_offset(big).unwrap();
    tx.rollback_to(&sp2).unwrap();
    assert_eq!(tx_bytes(&tx, c, 8), vec![0x33; 8]);

    // Back to sp1: sp2 closes; c, the region and b's free are gone; fresh's bytes are back.
    tx.rollback_to(&sp1).unwrap();
    assert!(matches!(
        tx.rollback_to(&sp2),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(tx.read(a).unwrap(), [1; 8]);
    assert_eq!(tx_bytes(&tx, fresh, 64), vec![0x11; 64]);
    assert!(
        heap.nvalloc("made-after-sp1", 64).is_ok(),
        "the name's reservation was released (its abort hook ran)"
    );
    let _ = (region, d);
    tx.release(sp1).unwrap();
    tx.commit().unwrap();

    let heap = reopen(heap, &path);
    assert_eq!(heap.get(a).unwrap(), [1; 8]);
    assert_eq!(bytes(&heap, fresh, 64), vec![0x11; 64]);
    let mut live = live_before.clone();
    live.push((fresh, heap.usable_size(fresh).unwrap()));
    let region = heap.region("made-after-sp1").unwrap().unwrap();
    live.push((region.0, heap.usable_size(region.0).unwrap()));
    live.sort();
    assert_eq!(heap.live_allocations(), live, "only what survived");
    // b and big were not freed; a double free from here proves they are live.
    heap.pfree(b).unwrap();
    heap.pfree(big).unwrap();
}

#[test]
fn savepoints_are_checked() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let a = heap.root::<u64>("a").unwrap();
    let one = heap.begin().unwrap();
    let two = heap.begin().unwrap();
    let sp = one.savepoint().unwrap();
    assert!(
        matches!(two.rollback_to(&sp), Err(Error::InvalidArgument(_))),
        "another transaction's savepoint"
    );
    one.write(a, &1).unwrap();
    let inner = one.savepoint().unwrap();
    one.release(sp).unwrap();
    assert!(
        matches!(one.rollback_to(&inner), Err(Error::InvalidArgument(_))),
        "released with the outer one"
    );
    let again = one.savepoint().unwrap();
    assert!(matches!(one.release(inner), Err(Error::InvalidArgument(_))));
    one.write(a, &2).unwrap();
    one.rollback_to(&again).unwrap();
    assert_eq!(one.read(a).unwrap(), 1);
    drop(two);
    one.commit().unwrap();
    assert_eq!(heap.get(a).unwrap(), 1);
}

/// A rollback that cuts the record back makes room again: the size limit counts what
/// survives, and bytes written again and again are logged once.
#[test]
fn the_record_holds_what_survives() {
    let dir = shm_dir();
    let (heap, _path) = create(&dir, 4 * MIB, 64 * MIB);
    let capacity = heap.geometry().slot_size();
    let obj = heap.pmalloc(capacity * 2).unwrap();
    let tx = heap.begin().unwrap();
    // Far more bytes written than a record holds, all to the same 64 bytes.
    for i in 0..(capacity / 64 * 4) {
        tx.write_bytes(obj + i % 4 * 8, &[i as u8; 64]).unwrap();
    }
    let sp = tx.savepoint().unwrap();
    let mut written = 0;
    let err = loop {
        match tx.write_bytes(obj + 1024 + written * 2, &[1; 1]) {
            Ok(()) => written += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::TransactionTooLarge { .. }), "{err}");
    tx.rollback_to(&sp).unwrap();
    tx.write_bytes(obj + 1024, &[2; 512]).unwrap();
    tx.release(sp).unwrap();
    tx.commit().unwrap();
    assert_eq!(bytes(&heap, obj + 1024, 512), vec![2; 512]);
}

#[derive(Clone, Debug)]
enum Op {
    /// Write `len` bytes of `value` at `at` into object 0 (logged) or 1 (fresh, in place).
    Write {
        fresh: bool,
        at: usize,
        len: usize,
        value: u8,
    },
    Read {
        fresh: bool,
        at: usize,
        len: usize,
    },
    Savepoint,
    /// Roll back to the open savepoint `k % open` (if any).
    Rollback(usize),
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let span = (0..SPAN).prop_flat_map(|at| (Just(at), 1..=(SPAN - at).min(80)));
    prop_oneof![
        8 => (any::<bool>(), span.clone(), any::<u8>())
            .prop_map(|(fresh, (at, len), value)| Op::Write { fresh, at, len, value }),
        4 => (any::<bool>(), span).prop_map(|(fresh, (at, len))| Op::Read { fresh, at, len }),
        2 => Just(Op::Savepoint),
        2 => any::<usize>().prop_map(Op::Rollback),
        1 => any::<usize>().prop_map(Op::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Every read through the transaction equals a byte-array model of its writes, with
    /// savepoints taken, rolled back to and released at random; the committed pool equals the
    /// model after a reopen.
    #[test]
    fn reads_see_the_latest_surviving_write(ops in proptest::collection::vec(op(), 1..120), commit in any::<bool>()) {
        let dir = shm_dir();
        let (heap, path) = create(&dir, 4 * MIB, 64 * MIB);
        let logged = heap.pmalloc(SPAN as u64).unwrap();
        let initial: Vec<u8> = (0..SPAN).map(|i| (i * 7) as u8).collect();
        heap.tx(|tx| tx.write_bytes(logged, &initial)).unwrap();
        let tx = heap.begin().unwrap();
        let fresh = tx.alloc_bytes(SPAN as u64).unwrap();
        tx.write_bytes(fresh, &initial).unwrap();
        let mut model = [initial.clone(), initial.clone()];
        let mut open: Vec<(mnemo_heap::Savepoint, [Vec<u8>; 2])> = Vec::new();
        for op in ops {
            match op {
                Op::Write { fresh: f, at, len, value } => {
                    let obj = if f { fresh } else { logged };
                    tx.write_bytes(obj + at as u64, &vec![value; len]).unwrap();
                    model[f as usize][at..at + len].fill(value);
                }
                Op::Read { fresh: f, at, len } => {
                    let obj = if f { fresh } else { logged };
                    prop_assert_eq!(&tx_bytes(&tx, obj + at as u64, len)[..], &model[f as usize][at..at + len]);
                }
                Op::Savepoint => {
                    let sp = tx.savepoint().unwrap();
                    open.push((sp, model.clone()));
                }
                Op::Rollback(k) if !open.is_empty() => {
                    let k = k % open.len();
                    tx.rollback_to(&open[k].0).unwrap();
                    open.truncate(k + 1);
                    model = open[k].1.clone();
                }
                Op::Release(k) if !open.is_empty() => {
                    let k = k % open.len();
                    let (sp, _) = open.split_off(k).swap_remove(0);
                    tx.release(sp).unwrap();
                }
                Op::Rollback(_) | Op::Release(_) => {}
            }
        }
        prop_assert_eq!(tx_bytes(&tx, logged, SPAN), model[0].clone());
        prop_assert_eq!(tx_bytes(&tx, fresh, SPAN), model[1].clone());
        drop(open);
        if commit {
            tx.commit().unwrap();
        } else {
            tx.abort();
        }
        let heap = reopen(heap, &path);
        let expected = if commit { &model[0] } else { &initial };
        prop_assert_eq!(&bytes(&heap, logged, SPAN), expected);
        if commit {
            prop_assert_eq!(bytes(&heap, fresh, SPAN), model[1].clone());
            prop_assert!(heap.usable_size(fresh).is_some());
        } else {
            prop_assert!(heap.usable_size(fresh).is_none());
        }
    }
}
