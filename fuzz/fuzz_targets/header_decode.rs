//! Fuzz target `header_decode`: `Header::decode` and `Pair::decode` never panic on any bytes,
//! and a header that decodes re-encodes to bytes that decode to the same header.
//!
//! Input: one flag byte, then the bytes of up to two header copies.
//! * bit 0 / bit 1: fix up the checksum of copy 0 / 1, so the fuzzer gets past it to the
//!   field checks;
//! * bit 2: start from two valid copies (generations 1 and 2) and XOR the bytes into them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mnemo_pmem::header::FORMAT_VERSION;
use mnemo_pmem::header::{checksum, Header, Pair, CHECKSUM_OFFSET};
use mnemo_pmem::limits::{DATA_OFFSET, HEADER_COPY_SIZE, PAGE_SIZE};

const COPY: usize = HEADER_COPY_SIZE as usize;

fn valid_pair() -> Vec<u8> {
    let mut header = Header {
        format_version: FORMAT_VERSION,
        generation: 1,
        pool_uuid: uuid::Uuid::from_u128(0x5a5a),
        pool_size: 1 << 20,
        size_max: 1 << 30,
        created_unix_ns: 0,
        data_offset: DATA_OFFSET,
        page_size: PAGE_SIZE as u32,
        flags: 0,
        clean_shutdown: true,
        layout: "fuzz".into(),
        creator: "mnemo fuzz".into(),
    };
    let mut out = vec![0u8; 2 * COPY];
    out[COPY..].copy_from_slice(&header.encode());
    header.generation = 2;
    out[..COPY].copy_from_slice(&header.encode());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let rest = &rest[..rest.len().min(2 * COPY + 64)];
    let mut bytes = if flags & 4 != 0 {
        let mut pair = valid_pair();
        for (i, b) in rest.iter().enumerate() {
            pair[i % (2 * COPY)] ^= b;
        }
        pair
    } else {
        rest.to_vec()
    };
    for copy in 0..2 {
        if flags & (1 << copy) != 0 {
            if let Some(c) = bytes.get_mut(copy * COPY..(copy + 1) * COPY) {
                let sum = checksum(c);
                c[CHECKSUM_OFFSET..].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
    let pair = Pair::decode(&bytes);
    let _ = (pair.chosen(), pair.header());
    for copy in &pair.copies {
        if let Ok(header) = copy {
            let again = header.encode();
            assert_eq!(
                Header::decode(&again).as_ref(),
                Ok(header),
                "decode(encode(h)) != h"
            );
        }
    }
    let _ = Header::decode(&bytes);
});
