//! Random command sequences on the persistent engine against a volatile model (maps and
//! deques), grouped in batches, with the pool closed and reopened in the middle: every reply
//! must match the model's, and after every batch the whole keyspace must read back as the
//! model holds it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use mnemo_heap::{Heap, HeapOptions};
use mnemo_kv::engine::PersistentEngine;
use mnemo_kv::server::Engine;
use mnemo_resp::bytes::Bytes;
use mnemo_resp::{Protocol, Reply};
use proptest::prelude::*;

const KEYS: [&str; 4] = ["a", "b", "c", "d"];
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[derive(Clone, Debug)]
enum Op {
    Set(usize, String),
    Del(usize),
    Incr(usize),
    Append(usize, String),
    Push(usize, bool, String),
    Pop(usize, bool),
    SAdd(usize, u8),
    SRem(usize, u8),
    HSet(usize, u8, String),
    HDel(usize, u8),
    ZAdd(usize, i8, u8),
    ZRem(usize, u8),
    ZPopMin(usize),
    Flush,
    Commit,
    Reopen,
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9]{0,6}",
        1 => "[0-9]{1,3}",
        1 => "x{250,300}",
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..KEYS.len();
    prop_oneof![
        3 => (k.clone(), value()).prop_map(|(k, v)| Op::Set(k, v)),
        1 => k.clone().prop_map(Op::Del),
        2 => k.clone().prop_map(Op::Incr),
        1 => (k.clone(), value()).prop_map(|(k, v)| Op::Append(k, v)),
        3 => (k.clone(), any::<bool>(), value()).prop_map(|(k, l, v)| Op::Push(k, l, v)),
        2 => (k.clone(), any::<bool>()).prop_map(|(k, l)| Op::Pop(k, l)),
        2 => (k.clone(), 0u8..12).prop_map(|(k, m)| Op::SAdd(k, m)),
        1 => (k.clone(), 0u8..12).prop_map(|(k, m)| Op::SRem(k, m)),
        2 => (k.clone(), 0u8..12, value()).prop_map(|(k, f, v)| Op::HSet(k, f, v)),
        1 => (k.clone(), 0u8..12).prop_map(|(k, f)| Op::HDel(k, f)),
        2 => (k.clone(), -3i8..3, 0u8..12).prop_map(|(k, s, m)| Op::ZAdd(k, s, m)),
        1 => (k.clone(), 0u8..12).prop_map(|(k, m)| Op::ZRem(k, m)),
        1 => k.prop_map(Op::ZPopMin),
        1 => Just(Op::Flush).boxed().prop_map(|o| o),
        3 => Just(Op::Commit),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Str(Vec<u8>),
    List(VecDeque<Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Zset(BTreeMap<Vec<u8>, f64>),
}

type Model = HashMap<String, Val>;

fn b(s: &str) -> Reply {
    Reply::Bulk(Bytes::from(s.as_bytes().to_vec()))
}
fn bv(v: &[u8]) -> Reply {
    Reply::Bulk(Bytes::from(v.to_vec()))
}
fn wrong() -> Reply {
    Reply::Error(Bytes::from_static(WRONGTYPE.as_bytes()))
}

fn member(m: u8) -> String {
    format!("m{m}")
}

/// The command an op sends.
fn command(op: &Op) -> Vec<String> {
    let key = |k: &usize| KEYS[*k].to_string();
    let v = |parts: &[&str]| parts.iter().map(|s| s.to_string()).collect();
    match op {
        Op::Set(k, x) => v(&["SET", &key(k), x]),
        Op::Del(k) => v(&["DEL", &key(k)]),
        Op::Incr(k) => v(&["INCR", &key(k)]),
        Op::Append(k, x) => v(&["APPEND", &key(k), x]),
        Op::Push(k, left, x) => v(&[if *left { "LPUSH" } else { "RPUSH" }, &key(k), x]),
        Op::Pop(k, left) => v(&[if *left { "LPOP" } else { "RPOP" }, &key(k)]),
        Op::SAdd(k, m) => v(&["SADD", &key(k), &member(*m)]),
        Op::SRem(k, m) => v(&["SREM", &key(k), &member(*m)]),
        Op::HSet(k, f, x) => v(&["HSET", &key(k), &member(*f), x]),
        Op::HDel(k, f) => v(&["HDEL", &key(k), &member(*f)]),
        Op::ZAdd(k, s, m) => v(&["ZADD", &key(k), &s.to_string(), &member(*m)]),
        Op::ZRem(k, m) => v(&["ZREM", &key(k), &member(*m)]),
        Op::ZPopMin(k) => v(&["ZPOPMIN", &key(k)]),
        Op::Flush => v(&["FLUSHALL"]),
        Op::Commit | Op::Reopen => Vec::new(),
    }
}

/// Applies an op to the model and returns the reply Redis gives (as a RESP2 client sees it).
fn apply(model: &mut Model, op: &Op) -> Reply {
    let key = |k: &usize| KEYS[*k].to_string();
    match op {
        Op::Set(k, x) => {
            model.insert(key(k), Val::Str(x.as_bytes().to_vec()));
            Reply::ok()
        }
        Op::Del(k) => Reply::Integer(i64::from(model.remove(&key(k)).is_some())),
        Op::Incr(k) => {
            let current = match model.get(&key(k)) {
                None => 0,
                Some(Val::Str(s)) => match mnemo_resp::parse_i64(s) {
                    Some(n) => n,
                    None => {
                        return Reply::Error(Bytes::from_static(
                            b"ERR value is not an integer or out of range",
                        ))
                    }
                },
                Some(_) => return wrong(),
            };
            let Some(next) = current.checked_add(1) else {
                return Reply::Error(Bytes::from_static(
                    b"ERR increment or decrement would overflow",
                ));
            };
            model.insert(key(k), Val::Str(next.to_string().into_bytes()));
            Reply::Integer(next)
        }
        Op::Append(k, x) => match model.entry(key(k)).or_insert(Val::Str(Vec::new())) {
            Val::Str(s) => {
                s.extend_from_slice(x.as_bytes());
                Reply::Integer(s.len() as i64)
            }
            _ => wrong(),
        },
        Op::Push(k, left, x) => match model.entry(key(k)).or_insert(Val::List(VecDeque::new())) {
            Val::List(l) => {
                if *left {
                    l.push_front(x.as_bytes().to_vec());
                } else {
                    l.push_back(x.as_bytes().to_vec());
                }
                Reply::Integer(l.len() as i64)
            }
            _ => wrong(),
        },
        Op::Pop(k, left) => {
            let reply = match model.get_mut(&key(k)) {
                None => return Reply::NullBulk,
                Some(Val::List(l)) => {
                    let v = if *left { l.pop_front() } else { l.pop_back() };
                    v.map_or(Reply::NullBulk, |v| bv(&v))
                }
                Some(_) => return wrong(),
            };
            drop_empty(model, &key(k));
            reply
        }
        Op::SAdd(k, m) => match model.entry(key(k)).or_insert(Val::Set(BTreeSet::new())) {
            Val::Set(s) => Reply::Integer(i64::from(s.insert(member(*m).into_bytes()))),
            _ => wrong(),
        },
        Op::SRem(k, m) => {
            let reply = match model.get_mut(&key(k)) {
                None => return Reply::Integer(0),
                Some(Val::Set(s)) => Reply::Integer(i64::from(s.remove(member(*m).as_bytes()))),
                Some(_) => return wrong(),
            };
            drop_empty(model, &key(k));
            reply
        }
        Op::HSet(k, f, x) => match model.entry(key(k)).or_insert(Val::Hash(BTreeMap::new())) {
            Val::Hash(h) => Reply::Integer(i64::from(
                h.insert(member(*f).into_bytes(), x.as_bytes().to_vec())
                    .is_none(),
            )),
            _ => wrong(),
        },
        Op::HDel(k, f) => {
            let reply = match model.get_mut(&key(k)) {
                None => return Reply::Integer(0),
                Some(Val::Hash(h)) => {
                    Reply::Integer(i64::from(h.remove(member(*f).as_bytes()).is_some()))
                }
                Some(_) => return wrong(),
            };
            drop_empty(model, &key(k));
            reply
        }
        Op::ZAdd(k, s, m) => match model.entry(key(k)).or_insert(Val::Zset(BTreeMap::new())) {
            Val::Zset(z) => Reply::Integer(i64::from(
                z.insert(member(*m).into_bytes(), f64::from(*s)).is_none(),
            )),
            _ => wrong(),
        },
        Op::ZRem(k, m) => {
            let reply = match model.get_mut(&key(k)) {
                None => return Reply::Integer(0),
                Some(Val::Zset(z)) => {
                    Reply::Integer(i64::from(z.remove(member(*m).as_bytes()).is_some()))
                }
                Some(_) => return wrong(),
            };
            drop_empty(model, &key(k));
            reply
        }
        Op::ZPopMin(k) => {
            let reply = match model.get_mut(&key(k)) {
                None => return Reply::Array(Vec::new()),
                Some(Val::Zset(z)) => {
                    let first = zsorted(z).into_iter().next();
                    match first {
                        Some((m, s)) => {
                            z.remove(&m);
                            Reply::Array(vec![bv(&m), b(&mnemo_resp::format_f64(s))])
                        }
                        None => Reply::Array(Vec::new()),
                    }
                }
                Some(_) => return wrong(),
            };
            drop_empty(model, &key(k));
            reply
        }
        Op::Flush => {
            model.clear();
            Reply::ok()
        }
        Op::Commit | Op::Reopen => Reply::ok(),
    }
}

fn zsorted(z: &BTreeMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
    let mut items: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.clone(), *s)).collect();
    items.sort_by(|x, y| x.1.total_cmp(&y.1).then_with(|| x.0.cmp(&y.0)));
    items
}

fn drop_empty(model: &mut Model, key: &str) {
    let empty = match model.get(key) {
        Some(Val::List(l)) => l.is_empty(),
        Some(Val::Set(s)) => s.is_empty(),
        Some(Val::Hash(h)) => h.is_empty(),
        Some(Val::Zset(z)) => z.is_empty(),
        _ => false,
    };
    if empty {
        model.remove(key);
    }
}

fn exec(engine: &mut PersistentEngine<'_>, cmd: &[String]) -> Reply {
    let args: Vec<Bytes> = cmd
        .iter()
        .map(|s| Bytes::from(s.clone().into_bytes()))
        .collect();
    engine
        .execute_args(&args, Protocol::Resp2)
        .0
        .as_seen_by(Protocol::Resp2)
}

fn sorted(reply: Reply) -> Reply {
    match reply {
        Reply::Array(mut items) => {
            items.sort_by_key(|r| format!("{r:?}"));
            Reply::Array(items)
        }
        other => other,
    }
}

/// Reads every key back and compares with the model.
fn compare(engine: &mut PersistentEngine<'_>, model: &Model) -> Result<(), TestCaseError> {
    engine.begin();
    for key in KEYS {
        let s = |parts: &[&str]| parts.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let expected = model.get(key);
        let ty = exec(engine, &s(&["TYPE", key]));
        let name = match expected {
            None => "none",
            Some(Val::Str(_)) => "string",
            Some(Val::List(_)) => "list",
            Some(Val::Set(_)) => "set",
            Some(Val::Hash(_)) => "hash",
            Some(Val::Zset(_)) => "zset",
        };
        prop_assert_eq!(
            ty,
            Reply::Simple(Bytes::from_static(name.as_bytes())),
            "key {}",
            key
        );
        match expected {
            None => {}
            Some(Val::Str(v)) => prop_assert_eq!(exec(engine, &s(&["GET", key])), bv(v)),
            Some(Val::List(l)) => prop_assert_eq!(
                exec(engine, &s(&["LRANGE", key, "0", "-1"])),
                Reply::Array(l.iter().map(|v| bv(v)).collect())
            ),
            Some(Val::Set(m)) => prop_assert_eq!(
                sorted(exec(engine, &s(&["SMEMBERS", key]))),
                sorted(Reply::Array(m.iter().map(|v| bv(v)).collect()))
            ),
            Some(Val::Hash(h)) => {
                prop_assert_eq!(
                    exec(engine, &s(&["HLEN", key])),
                    Reply::Integer(h.len() as i64)
                );
                for (f, v) in h {
                    let f = String::from_utf8_lossy(f).to_string();
                    prop_assert_eq!(exec(engine, &s(&["HGET", key, &f])), bv(v));
                }
            }
            Some(Val::Zset(z)) => {
                let mut flat = Vec::new();
                for (m, sc) in zsorted(z) {
                    flat.push(bv(&m));
                    flat.push(b(&mnemo_resp::format_f64(sc)));
                }
                prop_assert_eq!(
                    exec(engine, &s(&["ZRANGE", key, "0", "-1", "WITHSCORES"])),
                    Reply::Array(flat)
                );
            }
        }
    }
    prop_assert_eq!(
        exec(engine, &["DBSIZE".to_string()]),
        Reply::Integer(model.len() as i64)
    );
    engine.finish_read_only();
    let keys = engine
        .check()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(keys, model.len() as u64);
    Ok(())
}

fn options() -> HeapOptions {
    HeapOptions {
        lane_count: 2,
        lane_log_size: 1 << 20,
        ..HeapOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_the_model(ops in prop::collection::vec(op(), 1..120)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pool");
        drop(Heap::create_file(&path, 32 << 20, 256 << 20, &options()).expect("create"));
        let mut model = Model::new();
        // Between reopens, one heap and engine; batches end at Commit.
        for segment in ops.split(|op| matches!(op, Op::Reopen)) {
            let heap = Heap::open_file(&path).expect("open heap");
            let mut engine = PersistentEngine::open(&heap).expect("open engine");
            compare(&mut engine, &model)?;
            for batch in segment.split(|op| matches!(op, Op::Commit)) {
                engine.begin();
                let mut wrote = false;
                for op in batch {
                    let expected = apply(&mut model, op);
                    let args: Vec<Bytes> = command(op).into_iter().map(|s| Bytes::from(s.into_bytes())).collect();
                    let (reply, effect) = engine.execute_args(&args, Protocol::Resp2);
                    wrote |= effect.wrote;
                    prop_assert_eq!(reply.as_seen_by(Protocol::Resp2), expected, "{:?}", op);
                }
                if wrote {
                    engine.commit().expect("commit");
                } else {
                    engine.finish_read_only();
                }
                compare(&mut engine, &model)?;
            }
        }
    }
}
