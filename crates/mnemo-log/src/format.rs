//! The on-media format: region layout, header copies, record words. Pure functions over
//! bytes and words, no pool access, so every rule here is unit-tested (and fuzzable) alone.
//! `docs/design/log-format.md` describes the same layout byte by byte.
//!
//! # Words and the torn bit
//! The entries area is an array of little-endian 8-byte words. Bit 63 of every word is its
//! *torn bit*; bits 0..63 carry data. The log is a ring; a logical word index `l` (it only
//! grows) lives at position `l % capacity` and belongs to *pass* `l / capacity`. Pass `p`
//! writes torn bit `sense(l) = !(p & 1)` ([`sense_of_pass`]): 1 in pass 0 (the area starts zeroed), 0 in pass
//! 1, and so on. A word whose torn bit differs from the expected sense of its position was
//! not written in this pass, which is how recovery sees the end of the log and a torn append
//! without a commit record.
//!
//! # Records
//! A record is one *length word* followed by its payload words:
//!
//! ```text
//! length word: bit 63 torn bit | bit 62 "batch continues" | bits 32..62 length in bytes
//!              | bits 0..32 CRC-32C(lsn_word u64 LE, (length | more << 30) u64 LE,
//!                                   payload words with torn bits clear, u64 LE each)
//! payload:     groups of 63 bytes in 8 words; a word carries 7 bytes in bits 0..56 and
//!              7 bits of the group's last 7 bytes in bits 56..63 (word i: bits 7i..7i+7)
//! ```
//!
//! A final group of `r < 63` bytes takes `min(ceil(r / 7), 8)` words; bits beyond `r` are
//! zero (checked on read).

/// Magic at the start of each header copy.
pub const MAGIC: [u8; 8] = *b"MNEMOLOG";

/// Format version written by this code and the only one it reads.
pub const VERSION: u32 = 1;

/// Size of one header copy: one cache line, so a copy is flushed (and torn) as a unit.
pub const HEADER_COPY_SIZE: u64 = 64;

/// Bytes before the entries area: two header copies. Keeps the entries area line-aligned.
pub const HEADER_AREA: u64 = 2 * HEADER_COPY_SIZE;

/// The region must start on a cache line, so header copies never share a line with other data.
pub const REGION_ALIGN: u64 = 64;

/// Smallest entries area: one cache line (8 words). Smaller logs are useless, not unsafe.
pub const AREA_MIN: u64 = 64;

/// Largest entries area in words: logical word indices must not overflow u64 for centuries
/// (2^40 words = 8 TiB, already beyond the largest pool).
pub const AREA_WORDS_MAX: u64 = 1 << 40;

/// Longest record payload in bytes: the width of the length field (30 bits).
pub const ENTRY_LEN_MAX: u64 = (1 << 30) - 1;

/// Payload bytes per full group of 8 words.
pub const GROUP_BYTES: usize = 63;

const TORN_BIT: u64 = 1 << 63;
const MORE_BIT: u64 = 1 << 62;
const LEN_SHIFT: u32 = 32;
const LEN_MASK: u64 = ENTRY_LEN_MAX;
const LOW56: u64 = (1 << 56) - 1;

// Layout checks at compile time.
const _: () = assert!(HEADER_AREA % REGION_ALIGN == 0);
const _: () = assert!(GROUP_BYTES == 8 * 7 + 7);
const _: () = assert!(LEN_MASK << LEN_SHIFT & (TORN_BIT | MORE_BIT) == 0);

/// The torn bit that pass `pass` writes: 1, 0, 1, ... (the area starts zeroed, pass 0 writes 1).
#[inline]
pub fn sense_of_pass(pass: u64) -> u64 {
    (pass & 1) ^ 1
}

/// The torn bit of a word.
#[inline]
pub fn torn_bit(word: u64) -> u64 {
    word >> 63
}

/// Set the torn bit of `data` (whose bit 63 must be clear) to `sense`.
#[inline]
pub fn with_sense(data: u64, sense: u64) -> u64 {
    debug_assert!(data & TORN_BIT == 0);
    data | (sense << 63)
}

/// The word that marks a free position whose next write will carry `next_sense`.
#[inline]
pub fn free_word(next_sense: u64) -> u64 {
    (next_sense ^ 1) << 63
}

/// Number of payload words of a group of `r` bytes (`1..=63`).
#[inline]
fn group_words(r: usize) -> usize {
    r.div_ceil(7).min(8)
}

/// Number of payload words for `len` bytes.
#[inline]
pub fn payload_words(len: usize) -> usize {
    8 * (len / GROUP_BYTES) + group_words(len % GROUP_BYTES)
}

/// Words of a whole record (length word included) of `len` payload bytes.
#[inline]
pub fn record_words(len: usize) -> u64 {
    1 + payload_words(len) as u64
}

/// The longest payload whose record fits in `words` words (0 if not even a length word fits).
pub fn payload_max_for(words: u64) -> u64 {
    let Some(k) = words.checked_sub(1) else {
        return 0;
    };
    (63 * (k / 8) + 7 * (k % 8)).min(ENTRY_LEN_MAX)
}

/// Bytes of the checksum input before the payload words.
pub const CRC_PREFIX: usize = 16;

/// The checksum input before the payload words: the record's logical word index and its tag
/// (`len | more << 30`), each a u64 LE. Binding the position makes a stale or misplaced record
/// fail as the one expected at `lsn_word`.
#[inline]
pub fn crc_prefix(lsn_word: u64, len: usize, more: bool) -> [u8; CRC_PREFIX] {
    let mut prefix = [0u8; CRC_PREFIX];
    prefix[..8].copy_from_slice(&lsn_word.to_le_bytes());
    let tag = len as u64 | (u64::from(more) << 30);
    prefix[8..].copy_from_slice(&tag.to_le_bytes());
    prefix
}

/// CRC-32C of a record: [`crc_prefix`] then every payload word with its torn bit clear, as
/// u64 LE. (Over the packed words rather than the payload bytes: the writer stages the words
/// anyway, and the reader checks them before unpacking.)
pub fn record_crc(lsn_word: u64, len: usize, more: bool, words: &[u64]) -> u32 {
    let mut bytes = Vec::with_capacity(CRC_PREFIX + 8 * words.len());
    bytes.extend_from_slice(&crc_prefix(lsn_word, len, more));
    for word in words {
        bytes.extend_from_slice(&(word & !TORN_BIT).to_le_bytes());
    }
    crc32c::crc32c(&bytes)
}

/// The length word of a record (torn bit clear).
#[inline]
pub fn length_word(len: usize, more: bool, crc: u32) -> u64 {
    debug_assert!(len as u64 <= ENTRY_LEN_MAX);
    ((len as u64) << LEN_SHIFT) | (u64::from(more) * MORE_BIT) | u64::from(crc)
}

/// A decoded length word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LengthWord {
    /// Payload bytes.
    pub len: usize,
    /// Another record of the same batch follows.
    pub more: bool,
    /// Checksum of the record.
    pub crc: u32,
}

/// Decode a length word (any torn bit).
#[inline]
pub fn parse_length_word(word: u64) -> LengthWord {
    LengthWord {
        len: ((word >> LEN_SHIFT) & LEN_MASK) as usize,
        more: word & MORE_BIT != 0,
        crc: word as u32,
    }
}

/// Pack `payload` into words (torn bits clear), calling `out` once per word in order.
#[inline]
pub fn encode_payload(payload: &[u8], mut out: impl FnMut(u64)) {
    let mut at = 0;
    // Full groups with a byte to spare after them are read in place (8-byte loads).
    while at + GROUP_BYTES < payload.len() {
        let load = |i: usize| {
            u64::from_le_bytes(payload[at + i..at + i + 8].try_into().unwrap_or_default()) & LOW56
        };
        let extra = load(56);
        for i in 0..8 {
            out(load(7 * i) | (((extra >> (7 * i)) & 0x7f) << 56));
        }
        at += GROUP_BYTES;
    }
    if at < payload.len() {
        encode_group(payload, at, &mut out);
    }
}

/// Bytes `o..o + k` of `s` (`k <= 8`, `o + k <= s.len()`) as a little-endian number. Reads
/// `s` in place with one 8-byte load where it can (a load ending at the slice's end when the
/// bytes sit at its tail), so encoding never stores bytes only to load them back as words.
#[inline]
fn read_le(s: &[u8], o: usize, k: usize) -> u64 {
    if k == 0 {
        return 0;
    }
    let v = if o + 8 <= s.len() {
        u64::from_le_bytes(s[o..o + 8].try_into().unwrap_or_default())
    } else if s.len() >= 8 {
        let e = s.len() - 8;
        u64::from_le_bytes(s[e..].try_into().unwrap_or_default()) >> (8 * (o - e))
    } else {
        s[o..o + k]
            .iter()
            .enumerate()
            .fold(0, |v, (j, &b)| v | u64::from(b) << (8 * j))
    };
    if k == 8 {
        v
    } else {
        v & ((1 << (8 * k)) - 1)
    }
}

/// Encode the last group, `payload[at..]` (1 to 63 bytes), reading the payload in place.
#[inline]
fn encode_group(payload: &[u8], at: usize, out: &mut impl FnMut(u64)) {
    let r = payload.len() - at;
    let extra = if r > 56 {
        read_le(payload, at + 56, r - 56)
    } else {
        0
    };
    for i in 0..group_words(r) {
        let low = read_le(payload, at + 7 * i, r.saturating_sub(7 * i).min(7));
        let high = (extra >> (7 * i)) & 0x7f;
        out(low | (high << 56));
    }
}

/// Unpack `len` bytes from payload words (torn bits ignored) into `out`. Returns false if a
/// bit beyond the payload is set (not a record this code wrote).
pub fn decode_payload(words: &[u64], len: usize, out: &mut Vec<u8>) -> bool {
    debug_assert_eq!(words.len(), payload_words(len));
    let mut rest = len;
    for group in words.chunks(8) {
        let r = rest.min(GROUP_BYTES);
        let mut buf = [0u8; 64];
        let mut extra = 0u64;
        for (i, &word) in group.iter().enumerate() {
            let data = word & !TORN_BIT;
            buf[7 * i..7 * i + 8].copy_from_slice(&(data & LOW56).to_le_bytes());
            extra |= (data >> 56) << (7 * i);
        }
        buf[56..64].copy_from_slice(&extra.to_le_bytes());
        if buf[r..].iter().any(|&b| b != 0) {
            return false;
        }
        out.extend_from_slice(&buf[..r]);
        rest -= r;
    }
    true
}

/// One header copy, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the whole region (headers included) the log was created over.
    pub region_len: u64,
    /// Words in the entries area.
    pub capacity_words: u64,
    /// Logical word index of the oldest live record.
    pub head_word: u64,
    /// Incremented by every header write; the valid copy with the larger one is in force.
    pub generation: u64,
}

/// Why a header copy was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyProblem {
    /// All bytes zero: never written.
    Zeroed,
    /// Not a log header.
    BadMagic,
    /// A version this code does not read.
    Version(u32),
    /// The checksum does not match.
    Checksum,
    /// A field is out of range.
    Field(&'static str),
}

impl std::fmt::Display for CopyProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyProblem::Zeroed => write!(f, "never written (all zero)"),
            CopyProblem::BadMagic => write!(f, "no log magic"),
            CopyProblem::Version(v) => write!(f, "format version {v} (this code reads {VERSION})"),
            CopyProblem::Checksum => write!(f, "checksum mismatch"),
            CopyProblem::Field(what) => write!(f, "{what}"),
        }
    }
}

impl Header {
    /// Which copy this header is written to.
    pub fn slot(&self) -> u64 {
        self.generation & 1
    }

    /// The 64 bytes of a copy.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        // 12..16 flags: none defined.
        b[16..24].copy_from_slice(&self.region_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.capacity_words.to_le_bytes());
        b[32..40].copy_from_slice(&self.head_word.to_le_bytes());
        b[40..48].copy_from_slice(&self.generation.to_le_bytes());
        // 48..60 reserved, zero.
        let crc = crc32c::crc32c(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check one copy. Never panics.
    pub fn decode(b: &[u8; 64]) -> Result<Header, CopyProblem> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        if b.iter().all(|&x| x == 0) {
            return Err(CopyProblem::Zeroed);
        }
        if b[0..8] != MAGIC {
            return Err(CopyProblem::BadMagic);
        }
        if u32_at(60) != crc32c::crc32c(&b[..60]) {
            return Err(CopyProblem::Checksum);
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(CopyProblem::Version(version));
        }
        if u32_at(12) != 0 || b[48..60].iter().any(|&x| x != 0) {
            return Err(CopyProblem::Field("unknown flags or reserved bytes set"));
        }
        let header = Header {
            region_len: u64_at(16),
            capacity_words: u64_at(24),
            head_word: u64_at(32),
            generation: u64_at(40),
        };
        if header.region_len < HEADER_AREA + AREA_MIN
            || header.capacity_words != (header.region_len - HEADER_AREA) / 8
            || header.capacity_words > AREA_WORDS_MAX
        {
            return Err(CopyProblem::Field(
                "capacity does not match the region length",
            ));
        }
        if header.generation == 0 {
            return Err(CopyProblem::Field("generation 0"));
        }
        if header.head_word > u64::MAX / 2 {
            return Err(CopyProblem::Field("head beyond any reachable position"));
        }
        Ok(header)
    }
}

/// Pick the copy in force: the valid one with the larger generation.
pub fn choose(copies: [Result<Header, CopyProblem>; 2]) -> Result<Header, [CopyProblem; 2]> {
    match copies {
        [Ok(a), Ok(b)] => Ok(if a.generation >= b.generation { a } else { b }),
        [Ok(a), Err(_)] | [Err(_), Ok(a)] => Ok(a),
        [Err(a), Err(b)] => Err([a, b]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(payload: &[u8]) {
        let mut words = Vec::new();
        encode_payload(payload, |w| words.push(w));
        assert_eq!(
            words.len(),
            payload_words(payload.len()),
            "len {}",
            payload.len()
        );
        assert!(words.iter().all(|w| w & TORN_BIT == 0));
        let mut out = Vec::new();
        // Torn bits set or not, decoding ignores them.
        let sensed: Vec<u64> = words.iter().map(|&w| with_sense(w, 1)).collect();
        assert!(decode_payload(&sensed, payload.len(), &mut out));
        assert_eq!(out, payload);
    }

    #[test]
    fn payload_roundtrip_every_length() {
        for len in 0..300 {
            let payload: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8 | 0x80).collect();
            roundtrip(&payload);
            roundtrip(&vec![0xff; len]);
            roundtrip(&vec![0; len]);
        }
    }

    #[test]
    fn word_counts() {
        assert_eq!(payload_words(0), 0);
        assert_eq!(payload_words(1), 1);
        assert_eq!(payload_words(7), 1);
        assert_eq!(payload_words(8), 2);
        assert_eq!(payload_words(56), 8);
        assert_eq!(payload_words(57), 8);
        assert_eq!(payload_words(63), 8);
        assert_eq!(payload_words(64), 9);
        assert_eq!(record_words(64), 10);
        for words in 0..100u64 {
            let max = payload_max_for(words);
            if words > 0 {
                assert!(record_words(max as usize) <= words);
                assert!(record_words(max as usize + 1) > words, "words {words}");
            }
        }
    }

    #[test]
    fn stray_bits_beyond_the_payload_are_refused() {
        let mut words = Vec::new();
        encode_payload(b"abc", |w| words.push(w));
        words[0] |= 1 << 40;
        assert!(!decode_payload(&words, 3, &mut Vec::new()));
    }

    #[test]
    fn length_word_roundtrip() {
        for (len, more, crc) in [
            (0, false, 0),
            (64, true, 0xdead_beef),
            (ENTRY_LEN_MAX as usize, true, u32::MAX),
        ] {
            let w = with_sense(length_word(len, more, crc), 1);
            assert_eq!(parse_length_word(w), LengthWord { len, more, crc });
            assert_eq!(torn_bit(w), 1);
        }
    }

    #[test]
    fn header_roundtrip_and_every_bit_flip_detected() {
        let h = Header {
            region_len: HEADER_AREA + 4096,
            capacity_words: 512,
            head_word: 12345,
            generation: 7,
        };
        let b = h.encode();
        assert_eq!(Header::decode(&b), Ok(h));
        for bit in 0..512 {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(Header::decode(&c).is_err(), "bit {bit}");
        }
        assert_eq!(Header::decode(&[0; 64]), Err(CopyProblem::Zeroed));
    }

    #[test]
    fn sense_alternates() {
        assert_eq!(sense_of_pass(0), 1);
        assert_eq!(sense_of_pass(1), 0);
        assert_eq!(sense_of_pass(2), 1);
        assert_eq!(torn_bit(free_word(1)), 0);
        assert_eq!(torn_bit(free_word(0)), 1);
    }
}
