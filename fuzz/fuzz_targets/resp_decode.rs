//! Fuzzes the RESP request decoder (and the reply decoder) with arbitrary bytes.
//!
//! Checked on every input: no panic; the same commands and error whether the input arrives
//! whole or in chunks (chunk size taken from the first byte); every decoded command,
//! re-encoded as a client would, decodes back to itself.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mnemo_resp::bytes::{Bytes, BytesMut};
use mnemo_resp::limits::INLINE_BYTES_MAX;
use mnemo_resp::{encode_command, Decoder, ProtocolError, ReplyDecoder};

type Decoded = (Vec<Vec<Bytes>>, Option<ProtocolError>);

fn decode<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Decoded {
    let mut decoder = Decoder::new();
    let mut commands = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk);
        loop {
            match decoder.next_command() {
                Ok(Some(command)) => commands.push(command.into_args()),
                Ok(None) => break,
                Err(error) => {
                    assert!(decoder.must_close());
                    return (commands, Some(error));
                }
            }
        }
    }
    (commands, None)
}

fuzz_target!(|data: &[u8]| {
    let whole = decode([data]);

    // Limits on unfinished lines make very long inputs cut-dependent, as in Redis.
    if data.len() <= INLINE_BYTES_MAX {
        let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
        assert_eq!(decode(data.chunks(step)), whole, "chunks of {step}");
    }

    let mut encoded = BytesMut::new();
    for args in &whole.0 {
        assert!(
            !args.is_empty(),
            "the decoder never yields an empty command"
        );
        encode_command(args, &mut encoded);
    }
    assert_eq!(decode([&encoded[..]]), (whole.0, None));

    let mut replies = ReplyDecoder::new();
    replies.feed(data);
    while let Ok(Some(_)) = replies.next_reply() {}
});
