//! Properties of the codec over generated input: what is encoded decodes to itself, a stream
//! decodes the same however it is cut, and no input makes the decoders panic.

use bytes::{Bytes, BytesMut};
use mnemo_resp::{encode_command, Decoder, Protocol, ProtocolError, Reply, ReplyDecoder};
use proptest::collection::vec;
use proptest::prelude::*;

/// Everything a decoder yields for `chunks` fed one after the other: the commands, then the
/// error if one ended the stream.
fn decode_chunks<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> (Vec<Vec<Bytes>>, Option<ProtocolError>) {
    let mut decoder = Decoder::new();
    let mut commands = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk);
        loop {
            match decoder.next_command() {
                Ok(Some(command)) => commands.push(command.into_args()),
                Ok(None) => break,
                Err(error) => return (commands, Some(error)),
            }
        }
    }
    (commands, None)
}

fn arg() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 0..40),
        "[a-zA-Z0-9]{0,8}".prop_map(String::into_bytes)
    ]
}

fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    vec(arg(), 1..6)
}

/// An inline request that splits back into `args`: plain words, or double-quoted with every
/// byte written as a \x escape.
fn inline_line(args: &[Vec<u8>], quoted: bool) -> Vec<u8> {
    let mut line = Vec::new();
    for arg in args {
        if quoted {
            line.push(b'"');
            for byte in arg {
                line.extend_from_slice(format!("\\x{byte:02x}").as_bytes());
            }
            line.push(b'"');
        } else {
            line.extend_from_slice(arg);
        }
        line.push(b' ');
    }
    line.extend_from_slice(b"\r\n");
    line
}

/// A pipeline of multibulk and inline requests, and the commands it holds.
fn pipeline() -> impl Strategy<Value = (Vec<u8>, Vec<Vec<Bytes>>)> {
    let request = prop_oneof![
        command().prop_map(|args| (0u8, args)),
        vec("[a-zA-Z0-9]{1,8}".prop_map(String::into_bytes), 1..4).prop_map(|args| (1u8, args)),
        command().prop_map(|args| (2u8, args)),
    ];
    vec(request, 0..8).prop_map(|requests| {
        let mut bytes = BytesMut::new();
        let mut expected = Vec::new();
        for (form, args) in requests {
            match form {
                0 => encode_command(&args, &mut bytes),
                1 => bytes.extend_from_slice(&inline_line(&args, false)),
                _ => bytes.extend_from_slice(&inline_line(&args, true)),
            }
            expected.push(args.into_iter().map(Bytes::from).collect());
        }
        (bytes.to_vec(), expected)
    })
}

fn reply(depth: u32) -> BoxedStrategy<Reply> {
    let leaf = prop_oneof![
        "[ -~]{0,12}".prop_map(|text| Reply::Simple(text.into())),
        "[ -~]{0,12}".prop_map(|text| Reply::Error(format!("ERR {text}").into())),
        any::<i64>().prop_map(Reply::Integer),
        vec(any::<u8>(), 0..24).prop_map(|bytes| Reply::Bulk(bytes.into())),
        Just(Reply::NullBulk),
        Just(Reply::NullArray),
        Just(Reply::Null),
        any::<bool>().prop_map(Reply::Boolean),
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |value| !value.is_nan())
            .prop_map(Reply::Double),
        vec(any::<u8>(), 0..24).prop_map(|text| Reply::Verbatim {
            format: *b"txt",
            text: text.into()
        }),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    let inner = reply(depth - 1);
    prop_oneof![
        3 => leaf,
        1 => vec(inner.clone(), 0..4).prop_map(Reply::Array),
        1 => vec(inner.clone(), 0..4).prop_map(Reply::Set),
        1 => vec(inner.clone(), 0..4).prop_map(Reply::Push),
        1 => vec((inner.clone(), inner), 0..3).prop_map(Reply::Map),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A command encoded as clients encode it decodes to the same arguments.
    #[test]
    fn command_round_trip(commands in vec(command(), 1..6)) {
        let mut bytes = BytesMut::new();
        for args in &commands {
            encode_command(args, &mut bytes);
        }
        let (decoded, error) = decode_chunks([&bytes[..]]);
        prop_assert_eq!(error, None);
        let expected: Vec<Vec<Bytes>> =
            commands.into_iter().map(|args| args.into_iter().map(Bytes::from).collect()).collect();
        prop_assert_eq!(decoded, expected);
    }

    /// A pipeline mixing multibulk and inline requests decodes to its commands, and to the
    /// same commands when cut in two at any byte.
    #[test]
    fn pipeline_splits_anywhere((bytes, expected) in pipeline()) {
        let whole = decode_chunks([&bytes[..]]);
        prop_assert_eq!(&whole, &(expected, None));
        for cut in 0..=bytes.len() {
            let (head, tail) = bytes.split_at(cut);
            prop_assert_eq!(&decode_chunks([head, tail]), &whole, "cut at {}", cut);
        }
        let bytewise = decode_chunks(bytes.chunks(1));
        prop_assert_eq!(&bytewise, &whole);
    }

    /// Arbitrary bytes never panic, and decode the same (commands, then error or not) however
    /// they are cut.
    #[test]
    fn arbitrary_bytes_split_anywhere(bytes in vec(any::<u8>(), 0..96)) {
        let whole = decode_chunks([&bytes[..]]);
        for cut in 0..=bytes.len() {
            let (head, tail) = bytes.split_at(cut);
            prop_assert_eq!(&decode_chunks([head, tail]), &whole, "cut at {}", cut);
        }
    }

    /// Near-valid input (valid pieces with bytes flipped) reaches deeper states than random
    /// bytes do; it too must never panic and must not depend on how it is cut.
    #[test]
    fn mutated_pipelines_split_anywhere(
        (bytes, _) in pipeline(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut bytes = bytes;
        for (index, value) in flips {
            if !bytes.is_empty() {
                let at = index.index(bytes.len());
                if let Some(byte) = bytes.get_mut(at) {
                    *byte = value;
                }
            }
        }
        let whole = decode_chunks([&bytes[..]]);
        for cut in 0..=bytes.len() {
            let (head, tail) = bytes.split_at(cut);
            prop_assert_eq!(&decode_chunks([head, tail]), &whole, "cut at {}", cut);
        }
    }

    /// A reply encoded in either protocol decodes to what a client of that protocol sees.
    #[test]
    fn reply_round_trip(replies in vec(reply(3), 1..4), resp3 in any::<bool>()) {
        let protocol = if resp3 { Protocol::Resp3 } else { Protocol::Resp2 };
        let mut bytes = BytesMut::new();
        for reply in &replies {
            reply.encode(protocol, &mut bytes);
        }
        let mut decoder = ReplyDecoder::new();
        decoder.feed(&bytes);
        for reply in &replies {
            prop_assert_eq!(decoder.next_reply(), Ok(Some(reply.as_seen_by(protocol))));
        }
        prop_assert_eq!(decoder.next_reply(), Ok(None));
        prop_assert_eq!(decoder.buffered_len(), 0);
    }

    /// The reply decoder never panics on arbitrary bytes.
    #[test]
    fn reply_decoder_arbitrary_bytes(bytes in vec(any::<u8>(), 0..128)) {
        let mut decoder = ReplyDecoder::new();
        decoder.feed(&bytes);
        while let Ok(Some(_)) = decoder.next_reply() {}
    }

    /// Integers: Redis's parser accepts exactly the canonical decimal text of an i64.
    #[test]
    fn integers_round_trip(value in any::<i64>()) {
        let mut text = Vec::new();
        mnemo_resp::write_i64(&mut text, value);
        prop_assert_eq!(text.clone(), value.to_string().into_bytes());
        prop_assert_eq!(mnemo_resp::parse_i64(&text), Some(value));
    }

    /// Any text the integer parser accepts is canonical: writing the value back gives it again.
    #[test]
    fn accepted_integers_are_canonical(text in "-?[0-9]{0,21}|[ +0-9a-z-]{0,6}") {
        if let Some(value) = mnemo_resp::parse_i64(text.as_bytes()) {
            prop_assert_eq!(value.to_string(), text);
        }
    }

    /// Doubles: 17 significant digits always read back as the same double.
    #[test]
    fn doubles_round_trip(value in any::<f64>()) {
        let text = mnemo_resp::format_f64(value);
        if value.is_nan() {
            prop_assert_eq!(text, "nan");
        } else {
            prop_assert_eq!(mnemo_resp::parse_f64(text.as_bytes()), Some(value));
        }
    }
}
