//! Fuzzes what `mnemo vm` reads back from disk and from QEMU: a saved state file
//! (`mnemo_vm::state::parse_state`: the trailer and the stream's checksum) and a QMP line
//! (`mnemo_vm::qmp::parse_line`).
//!
//! Checked on every input: no panic; a state that parses has a trailer that encodes back to
//! exactly its last 64 bytes, and a stream length that accounts for every other byte.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mnemo_vm::state::{parse_state, Trailer, TRAILER_BYTES};

fuzz_target!(|data: &[u8]| {
    if let Ok(trailer) = parse_state(data) {
        assert_eq!(trailer.stream_len + TRAILER_BYTES as u64, data.len() as u64);
        assert_eq!(trailer.encode(), data[data.len() - TRAILER_BYTES..]);
    }
    // The same bytes as a trailer alone, against every plausible file length.
    if data.len() >= TRAILER_BYTES {
        let _ = Trailer::decode(&data[..TRAILER_BYTES], data.len() as u64);
    }
    let _ = mnemo_vm::qmp::parse_line(data);
});
