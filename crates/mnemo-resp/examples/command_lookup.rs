//! What finding a request's command costs, per request, against the way it was done before
//! the server had one command table, measured in the same run.
//!
//! - now: `command::resolve` (the session's one lookup; the engine dispatches on the entry
//!   it finds and looks nothing up).
//! - before: the same binary search, but cutting each entry's short name (`rsplit('|')`) at
//!   every step, and then the engine's second, linear case-insensitive search of its own
//!   list of names. Both are rebuilt here over `command::commands()`, so no second list of
//!   names is kept for the comparison.
//!
//! The requests are redis-benchmark's default tests, upper case as clients send them.
//!
//! `cargo run --release -p mnemo-resp --example command_lookup`

use std::hint::black_box;
use std::time::Instant;

use mnemo_resp::command::{self, CommandSpec};

/// The binary search as it was: the short name cut from the full name at each step.
fn lookup_before(name: &[u8]) -> Option<&'static CommandSpec> {
    let table = command::commands();
    table
        .binary_search_by(|spec| {
            let short = spec.name.rsplit('|').next().unwrap_or(spec.name);
            short.bytes().cmp(name.iter().map(u8::to_ascii_lowercase))
        })
        .ok()
        .and_then(|index| table.get(index))
}

/// The engine's former second search: linear, case-insensitive, over its own names.
fn engine_lookup_before(name: &[u8]) -> Option<&'static CommandSpec> {
    command::commands()
        .iter()
        .find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

/// `resolve` as it was, for a request: container, then subcommand, then arity.
fn resolve_before(argv: &[&[u8]]) -> Option<&'static CommandSpec> {
    let spec = lookup_before(argv.first()?)?;
    let spec = match argv.get(1) {
        Some(sub) if !spec.subcommands.is_empty() => {
            let table = spec.subcommands;
            let index = table
                .binary_search_by(|spec| {
                    let short = spec.name.rsplit('|').next().unwrap_or(spec.name);
                    short.bytes().cmp(sub.iter().map(u8::to_ascii_lowercase))
                })
                .ok()?;
            table.get(index)?
        }
        _ => spec,
    };
    spec.arity_ok(argv.len()).then_some(spec)
}

/// Nanoseconds per request of `find` over `requests`, best of `runs`.
fn ns_per_request(requests: &[Vec<&[u8]>], find: impl Fn(&[&[u8]]) -> bool) -> f64 {
    const ROUNDS: u32 = 500_000;
    const RUNS: usize = 7;
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let start = Instant::now();
        for _ in 0..ROUNDS {
            for argv in requests {
                black_box(find(black_box(argv.as_slice())));
            }
        }
        let ns = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS) / requests.len() as f64;
        best = best.min(ns);
    }
    best
}

fn main() {
    let requests: Vec<Vec<&[u8]>> = [
        "SET key:1 xxx",
        "GET key:1",
        "INCR counter",
        "LPUSH list xxx",
        "RPUSH list xxx",
        "LPOP list",
        "RPOP list",
        "SADD set m",
        "HSET h f v",
        "SPOP set",
        "ZADD z 1 m",
        "ZPOPMIN z",
        "LRANGE list 0 99",
        "MSET a 1 b 2",
        "CONFIG GET save",
    ]
    .iter()
    .map(|line| line.split(' ').map(str::as_bytes).collect())
    .collect();
    for argv in &requests {
        let found = command::resolve(argv).map(|spec| spec.id).ok();
        let before = resolve_before(argv).map(|spec| spec.id);
        assert_eq!(found, before, "both paths must find the same entry");
        assert!(found.is_some());
    }

    let now = ns_per_request(&requests, |argv| command::resolve(argv).is_ok());
    let before = ns_per_request(&requests, |argv| {
        resolve_before(argv).is_some()
            && argv
                .first()
                .is_some_and(|name| engine_lookup_before(name).is_some())
    });
    println!(
        "ns per request, best of 7: before {before:.1} (resolve with short names cut per \
         step, then the engine's linear search), now {now:.1} (resolve only): {:.2}x",
        before / now
    );
}
