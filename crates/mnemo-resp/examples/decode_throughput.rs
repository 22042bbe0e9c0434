//! Rough decoder throughput: redis-benchmark-like SET requests, fed in 16 KiB reads.
//!
//! `cargo run --release -p mnemo-resp --example decode_throughput`

use std::time::Instant;

use mnemo_resp::bytes::BytesMut;
use mnemo_resp::{encode_command, Decoder, Encoder, Protocol};

fn main() {
    let count = 1_000_000;
    let mut input = BytesMut::new();
    for index in 0..count {
        let key = format!("key:{:012}", index % 100_000);
        encode_command(&["SET", key.as_str(), "xxx"], &mut input);
    }

    let start = Instant::now();
    let mut decoder = Decoder::new();
    let mut decoded = 0usize;
    let mut replies = BytesMut::new();
    for chunk in input.chunks(16 * 1024) {
        decoder.feed(chunk);
        while let Ok(Some(command)) = decoder.next_command() {
            decoded += command.len();
            Encoder::new(&mut replies, Protocol::Resp2).simple(b"OK");
        }
        replies.clear();
    }
    let elapsed = start.elapsed();
    assert_eq!(decoded, 3 * count);
    println!(
        "{count} SET requests ({} MiB) decoded and answered in {:.1} ms: {:.2} M requests/s",
        input.len() / (1024 * 1024),
        elapsed.as_secs_f64() * 1e3,
        count as f64 / elapsed.as_secs_f64() / 1e6
    );
}
