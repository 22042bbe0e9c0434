//! The batch's write set (the heap transaction's, through `engine/store.rs`'s `Mem`): words
//! written many times in a batch reach the heap's redo record once, every read in the batch sees the
//! latest write (whole or partial word), and what a batch leaves is what a restart finds.

use mnemo_heap::{Heap, HeapOptions};
use mnemo_kv::engine::PersistentEngine;
use mnemo_kv::server::Engine;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Protocol, Reply};

fn args(cmd: &[&str]) -> Vec<Bytes> {
    cmd.iter()
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect()
}

fn run(engine: &mut PersistentEngine<'_>, cmd: &[&str]) -> Reply {
    engine.execute_args(&args(cmd), Protocol::Resp2).0
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

/// 2000 MSETs of the same three existing keys in one batch (what redis-benchmark's MSET test
/// sends: one key, ten times per command) are 12,000 writes of six words. Logged one by one they
/// would need ~290 KB of redo record, and the heap's default lane logs (256 KiB, records of
/// 16 KiB) would force split commits; kept once per word they fit one record.
#[test]
fn words_rewritten_in_a_batch_reach_the_record_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pool");
    {
        let heap =
            Heap::create_file(&path, 16 << 20, 64 << 20, &HeapOptions::default()).expect("heap");
        let mut e = PersistentEngine::open(&heap).expect("open");
        // The keys exist before the batch (writes into a batch's own new entries are never
        // logged).
        e.begin();
        run(&mut e, &["MSET", "k:one", "1", "k:2", "2", "k:three", "3"]);
        e.commit().expect("commit");
        e.begin();
        for i in 0..2000 {
            let (a, b, c) = (format!("{i}"), format!("b{i}"), format!("{}", i % 7));
            let reply = run(&mut e, &["MSET", "k:one", &a, "k:2", &b, "k:three", &c]);
            assert_eq!(reply, Reply::ok());
            if i % 97 == 0 {
                assert_eq!(run(&mut e, &["GET", "k:one"]), bulk(&a));
                assert_eq!(run(&mut e, &["GET", "k:2"]), bulk(&b));
                assert_eq!(run(&mut e, &["GET", "k:three"]), bulk(&c));
            }
        }
        e.commit().expect("commit");
        assert_eq!(e.stats().split_commits, 0, "the batch needed split commits");
        assert_eq!(e.stats().commits, 2);
        assert_eq!(e.check().expect("valid"), 3);
    }
    let heap = Heap::open_file(&path).expect("reopen");
    let mut e = PersistentEngine::open(&heap).expect("open");
    assert_eq!(run(&mut e, &["GET", "k:one"]), bulk("1999"));
    assert_eq!(run(&mut e, &["GET", "k:2"]), bulk("b1999"));
    assert_eq!(
        run(&mut e, &["GET", "k:three"]),
        bulk(&format!("{}", 1999 % 7))
    );
    e.finish_read_only();
}

/// Values at unaligned offsets (keys of odd lengths), overwritten in place, appended to in
/// place, grown out of place and counted, all in one batch, with reads between the writes:
/// every reply matches a model, and so does the pool after a restart.
#[test]
fn partial_word_writes_read_back_in_the_batch_and_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pool");
    let keys = ["a", "bcd", "efghi", "jklmnop", "qrstuvwxy"];
    let mut model: Vec<Option<String>> = vec![None; keys.len()];
    let reply_of = |v: &Option<String>| v.as_deref().map_or(Reply::NullBulk, bulk);
    {
        let heap =
            Heap::create_file(&path, 16 << 20, 64 << 20, &HeapOptions::default()).expect("heap");
        let mut e = PersistentEngine::open(&heap).expect("open");
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20 {
            e.begin();
            for _ in 0..200 {
                let k = (next() % keys.len() as u64) as usize;
                let key = keys[k];
                match next() % 4 {
                    0 => {
                        let len = (next() % 12) as usize;
                        let value: String = (0..len)
                            .map(|j| char::from(b'a' + ((j as u64 + next()) % 26) as u8))
                            .collect();
                        assert_eq!(run(&mut e, &["SET", key, &value]), Reply::ok());
                        model[k] = Some(value);
                    }
                    1 => {
                        let tail = format!("{}", next() % 1000);
                        let reply = run(&mut e, &["APPEND", key, &tail]);
                        let value = model[k].get_or_insert_with(String::new);
                        value.push_str(&tail);
                        assert_eq!(reply, Reply::Integer(value.len() as i64));
                    }
                    2 => {
                        // A whole-word MSET of two keys, one of them twice.
                        let (v1, v2) = (format!("{}", next() % 100), format!("{}", next()));
                        let other = (k + 1) % keys.len();
                        let reply = run(&mut e, &["MSET", key, "x", keys[other], &v2, key, &v1]);
                        assert_eq!(reply, Reply::ok());
                        model[k] = Some(v1);
                        model[other] = Some(v2);
                    }
                    _ => assert_eq!(run(&mut e, &["GET", key]), reply_of(&model[k]), "{key}"),
                }
                if model[k].as_ref().is_some_and(|v| v.len() > 400) {
                    assert_eq!(run(&mut e, &["SET", key, "reset"]), Reply::ok());
                    model[k] = Some("reset".into());
                }
            }
            e.commit().expect("commit");
        }
        e.check().expect("valid");
    }
    let heap = Heap::open_file(&path).expect("reopen");
    let mut e = PersistentEngine::open(&heap).expect("open");
    for (k, key) in keys.iter().enumerate() {
        assert_eq!(
            run(&mut e, &["GET", key]),
            reply_of(&model[k]),
            "{key} after restart"
        );
    }
    e.finish_read_only();
}
