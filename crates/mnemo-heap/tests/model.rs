//! Random operation sequences against a volatile model, with reopens in between.

mod common;

use std::collections::BTreeMap;

use common::{create, reopen, shm_dir};
use mnemo_heap::{Error, Heap};
use proptest::prelude::*;

const SIZES: [u64; 7] = [8, 24, 64, 200, 5000, 70_000, 300_000];

#[derive(Clone, Debug)]
enum Op {
    Alloc(usize, u64),
    Free(usize),
    Update(usize, u64),
    /// Several allocations and one free in one transaction; aborted if the flag is set.
    Batch(Vec<usize>, usize, bool),
    BadFree(usize, u64),
    Named(u8, bool),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SIZES.len(), any::<u64>()).prop_map(|(s, v)| Op::Alloc(s, v)),
        2 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(i, v)| Op::Update(i, v)),
        2 => (proptest::collection::vec(0..SIZES.len(), 1..5), any::<usize>(), any::<bool>())
            .prop_map(|(s, f, a)| Op::Batch(s, f, a)),
        1 => (any::<usize>(), 1..64u64).prop_map(|(i, d)| Op::BadFree(i, d)),
        1 => (0..4u8, any::<bool>()).prop_map(|(n, c)| Op::Named(n, c)),
        1 => Just(Op::Reopen),
    ]
}

fn read_tag(heap: &Heap, off: u64) -> u64 {
    let mut b = [0u8; 8];
    heap.read_bytes(off, &mut b).unwrap();
    u64::from_le_bytes(b)
}

fn check(heap: &Heap, model: &BTreeMap<u64, u64>, names: &BTreeMap<String, u64>) {
    let live: Vec<u64> = heap
        .live_allocations()
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    let mut expected: Vec<u64> = model
        .keys()
        .copied()
        .chain(names.values().copied())
        .collect();
    expected.sort();
    assert_eq!(live, expected, "live allocations differ from the model");
    for (&off, &tag) in model {
        assert_eq!(read_tag(heap, off), tag, "object {off:#x}");
    }
    for (name, &off) in names {
        assert_eq!(heap.region(name).unwrap().map(|r| r.0), Some(off));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn heap_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = shm_dir();
        let (mut heap, path) = create(&dir, 2 << 20, 256 << 20);
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut names: BTreeMap<String, u64> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Alloc(s, v) => {
                    let off = heap.tx(|tx| {
                        let off = tx.alloc_bytes(SIZES[s])?;
                        tx.write_bytes(off, &v.to_le_bytes())?;
                        Ok(off)
                    }).unwrap();
                    prop_assert!(model.insert(off, v).is_none(), "offset handed out twice");
                }
                Op::Free(i) if !model.is_empty() => {
                    let off = *model.keys().nth(i % model.len()).unwrap();
                    heap.pfree(off).unwrap();
                    model.remove(&off);
                }
                Op::Update(i, v) if !model.is_empty() => {
                    let off = *model.keys().nth(i % model.len()).unwrap();
                    heap.tx(|tx| tx.write_bytes(off, &v.to_le_bytes())).unwrap();
                    model.insert(off, v);
                }
                Op::Batch(sizes, f, abort) => {
                    let victim = (!model.is_empty()).then(|| *model.keys().nth(f % model.len()).unwrap());
                    let result = heap.tx(|tx| {
                        let mut got = Vec::new();
                        for (k, &s) in sizes.iter().enumerate() {
                            let off = tx.alloc_bytes(SIZES[s])?;
                            tx.write_bytes(off, &(k as u64 + 7).to_le_bytes())?;
                            got.push((off, k as u64 + 7));
                        }
                        if let Some(v) = victim {
                            tx.free_offset(v)?;
                        }
                        if abort {
                            return Err(Error::InvalidArgument("abort".into()));
                        }
                        Ok(got)
                    });
                    match result {
                        Ok(got) => {
                            for (off, tag) in got {
                                prop_assert!(model.insert(off, tag).is_none());
                            }
                            if let Some(v) = victim {
                                model.remove(&v);
                            }
                        }
                        Err(e) => prop_assert!(abort, "unexpected error {e}"),
                    }
                }
                Op::BadFree(i, d) => {
                    let base = model.keys().nth(i % model.len().max(1)).copied().unwrap_or(heap.geometry().zones_offset);
                    let bad = base + d;
                    if !model.contains_key(&bad) && !names.values().any(|&o| o == bad) {
                        let r = heap.pfree(bad);
                        prop_assert!(matches!(r, Err(Error::InvalidFree { .. })), "{r:?}");
                    }
                }
                Op::Named(n, create_it) => {
                    let name = format!("region{n}");
                    if create_it {
                        let off = heap.nvalloc(&name, 100 + n as u64).unwrap();
                        names.insert(name, off);
                    } else if names.remove(&name).is_some() {
                        heap.nvfree(&name).unwrap();
                    } else {
                        prop_assert!(matches!(heap.nvfree(&name), Err(Error::NoSuchRegion(_))));
                    }
                }
                Op::Reopen => {
                    heap = reopen(heap, &path);
                    check(&heap, &model, &names);
                }
                _ => {}
            }
        }
        check(&heap, &model, &names);
        let heap = reopen(heap, &path);
        check(&heap, &model, &names);
    }
}
