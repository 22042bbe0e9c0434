//! Fuzzes the replication frame decoder (`mnemo_repl::proto::decode`) with arbitrary bytes,
//! as a mirror or primary receives them from the network.
//!
//! Checked on every input: no panic; a decoded frame uses no more bytes than given, and
//! encodes back to exactly the bytes it was decoded from (the format has one encoding per
//! frame, so nothing is silently normalised).

#![no_main]

use libfuzzer_sys::fuzz_target;
use mnemo_repl::proto;

fuzz_target!(|data: &[u8]| {
    let mut at = 0;
    // Consecutive frames, as a stream carries them.
    while at < data.len() {
        match proto::decode(&data[at..]) {
            Ok(Some((frame, used))) => {
                assert!(used > 0 && at + used <= data.len());
                let mut again = Vec::new();
                proto::encode(&frame, &mut again);
                assert_eq!(again, &data[at..at + used], "{frame:?}");
                at += used;
            }
            Ok(None) | Err(_) => break,
        }
    }
    // Behind a valid header, so the body parsers are reached more often.
    if data.len() >= 2 {
        let mut framed = Vec::new();
        framed.extend_from_slice(&proto::MAGIC.to_le_bytes());
        framed.push(data[0] % 12); // kinds 0..=11: every kind and one unknown
        framed.extend_from_slice(&[0; 3]);
        let body = &data[1..];
        framed.extend_from_slice(&(body.len() as u32).to_le_bytes());
        framed.extend_from_slice(body);
        let crc = crc32c::crc32c(&framed);
        framed.extend_from_slice(&crc.to_le_bytes());
        if let Ok(Some((frame, used))) = proto::decode(&framed) {
            assert_eq!(used, framed.len());
            let mut again = Vec::new();
            proto::encode(&frame, &mut again);
            assert_eq!(again, framed, "{frame:?}");
        }
    }
});
