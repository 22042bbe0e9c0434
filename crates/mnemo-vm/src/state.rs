//! The saved state ("virtual environment") file, and the RAM sample that ties it to the RAM
//! image it was saved with. Decoding is sans I/O and never panics.
//!
//! ```text
//!  state  = QEMU migration stream (stream_len bytes; RAM not in it) | trailer (64 bytes)
//!
//!  trailer, little-endian:
//!   0  magic            8  "MNEMOVMS"
//!   8  format           4  1
//!  12  sample_pages     4  RAM pages sampled into ram_crc
//!  16  epoch            8  the VM's epoch when it was fixed
//!  24  stream_len       8  bytes of QEMU stream before the trailer
//!  32  ram_bytes        8  guest RAM size
//!  40  stream_crc       4  CRC-32C of the stream
//!  44  ram_crc          4  CRC-32C of the sampled RAM pages, in order
//!  48  ram_nonzero      4  sampled pages that were not all zero
//!  52  reserved         8  zero
//!  60  trailer_crc      4  CRC-32C of bytes 0..60
//! ```
//!
//! The stream is QEMU's, written by `migrate` to `exec:cat > state.tmp`; the trailer is
//! appended before the file is synced and renamed into place, and recovery feeds QEMU exactly
//! `stream_len` bytes (`exec:head -c`).
//!
//! The RAM sample: `sample_pages` pages of 4 KiB spread evenly over the RAM file, read after
//! the guest is stopped. Recovery reads them again before it consumes the state: a RAM file
//! that was zeroed, re-created or replaced by another VM's does not match, and the state is
//! refused with a clear message instead of resuming a guest on memory it never had (QEMU
//! itself would load some such states and run garbage). It is a check, not a proof: pages
//! outside the sample are not compared.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::limits;

/// Bytes of the trailer.
pub const TRAILER_BYTES: usize = 64;
const MAGIC: [u8; 8] = *b"MNEMOVMS";
/// The trailer's format version.
pub const STATE_FORMAT: u32 = 1;

/// What a state says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    pub epoch: u64,
    pub stream_len: u64,
    pub ram_bytes: u64,
    pub stream_crc: u32,
    pub ram: RamSample,
}

/// The sampled RAM pages' checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RamSample {
    pub pages: u32,
    pub crc: u32,
    pub nonzero: u32,
}

impl Trailer {
    pub fn encode(&self) -> [u8; TRAILER_BYTES] {
        let mut out = [0u8; TRAILER_BYTES];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&STATE_FORMAT.to_le_bytes());
        out[12..16].copy_from_slice(&self.ram.pages.to_le_bytes());
        out[16..24].copy_from_slice(&self.epoch.to_le_bytes());
        out[24..32].copy_from_slice(&self.stream_len.to_le_bytes());
        out[32..40].copy_from_slice(&self.ram_bytes.to_le_bytes());
        out[40..44].copy_from_slice(&self.stream_crc.to_le_bytes());
        out[44..48].copy_from_slice(&self.ram.crc.to_le_bytes());
        out[48..52].copy_from_slice(&self.ram.nonzero.to_le_bytes());
        let crc = crc32c::crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(
            Trailer::decode(&out, self.stream_len + TRAILER_BYTES as u64),
            Ok(*self)
        );
        out
    }

    /// Decodes the last [`TRAILER_BYTES`] of a state file of `file_len` bytes.
    pub fn decode(bytes: &[u8], file_len: u64) -> Result<Trailer, String> {
        let bytes: &[u8; TRAILER_BYTES] = bytes
            .try_into()
            .map_err(|_| format!("a trailer is {TRAILER_BYTES} bytes, not {}", bytes.len()))?;
        if bytes[0..8] != MAGIC {
            return Err("no mnemo trailer (not a state saved by mnemo vm)".into());
        }
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| (u64::from(u32_at(at + 4)) << 32) | u64::from(u32_at(at));
        if crc32c::crc32c(&bytes[..60]) != u32_at(60) {
            return Err("its trailer is damaged (checksum mismatch)".into());
        }
        let format = u32_at(8);
        if format != STATE_FORMAT {
            return Err(format!(
                "state format {format}, this mnemo reads {STATE_FORMAT}"
            ));
        }
        let trailer = Trailer {
            epoch: u64_at(16),
            stream_len: u64_at(24),
            ram_bytes: u64_at(32),
            stream_crc: u32_at(40),
            ram: RamSample {
                pages: u32_at(12),
                crc: u32_at(44),
                nonzero: u32_at(48),
            },
        };
        if trailer.stream_len.checked_add(TRAILER_BYTES as u64) != Some(file_len) {
            return Err(format!(
                "it is {file_len} bytes but its trailer counts {} of stream (torn or truncated)",
                trailer.stream_len
            ));
        }
        if trailer.ram.nonzero > trailer.ram.pages || trailer.ram.pages > limits::RAM_SAMPLE_PAGES {
            return Err("its trailer's RAM sample is impossible".into());
        }
        Ok(trailer)
    }
}

/// Parses a whole state file: its trailer, and the stream's checksum against it. What it
/// returns is a state whose bytes are whole; whether it may be resumed (its epoch, its RAM)
/// is the registry's to judge.
pub fn parse_state(bytes: &[u8]) -> Result<Trailer, String> {
    if bytes.len() < TRAILER_BYTES {
        return Err(format!("{} bytes, not a saved state", bytes.len()));
    }
    let split = bytes.len() - TRAILER_BYTES;
    let trailer = Trailer::decode(&bytes[split..], bytes.len() as u64)?;
    if crc32c::crc32c(&bytes[..split]) != trailer.stream_crc {
        return Err("damaged (the stream's checksum does not match)".into());
    }
    Ok(trailer)
}

/// Offsets of the sampled pages of a RAM file of `ram_bytes`: `pages` pages spread evenly,
/// each aligned to [`limits::RAM_PAGE_BYTES`].
pub fn sample_offsets(ram_bytes: u64, pages: u32) -> impl Iterator<Item = u64> {
    let page = limits::RAM_PAGE_BYTES;
    let total = ram_bytes / page;
    let pages = u64::from(pages).min(total);
    (0..pages).map(move |i| {
        // Spread over the whole file; the multiplication cannot overflow (total < 2^28 pages).
        (i * total / pages.max(1)) * page
    })
}

/// Reads the sampled pages of the RAM file.
pub fn sample_ram(ram: &File, ram_bytes: u64) -> std::io::Result<RamSample> {
    let mut page = vec![0u8; limits::RAM_PAGE_BYTES as usize];
    let mut sample = RamSample {
        pages: 0,
        crc: 0,
        nonzero: 0,
    };
    for offset in sample_offsets(ram_bytes, limits::RAM_SAMPLE_PAGES) {
        ram.read_exact_at(&mut page, offset)?;
        sample.crc = crc32c::crc32c_append(sample.crc, &page);
        sample.pages += 1;
        if page.iter().any(|&b| b != 0) {
            sample.nonzero += 1;
        }
    }
    Ok(sample)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trailer() -> Trailer {
        Trailer {
            epoch: 7,
            stream_len: 288_335,
            ram_bytes: 256 << 20,
            stream_crc: 0xdead_beef,
            ram: RamSample {
                pages: 256,
                crc: 0x1234_5678,
                nonzero: 120,
            },
        }
    }

    #[test]
    fn round_trip() {
        let t = trailer();
        let bytes = t.encode();
        assert_eq!(Trailer::decode(&bytes, t.stream_len + 64), Ok(t));
    }

    #[test]
    fn every_damage_is_refused() {
        let t = trailer();
        let good = t.encode();
        assert!(Trailer::decode(&good, t.stream_len + 63)
            .unwrap_err()
            .contains("torn"));
        assert!(Trailer::decode(&good[..63], t.stream_len + 64).is_err());
        for byte in 0..TRAILER_BYTES {
            let mut bad = good;
            bad[byte] ^= 0x10;
            assert!(
                Trailer::decode(&bad, t.stream_len + 64).is_err(),
                "byte {byte}"
            );
        }
        let mut zero = [0u8; TRAILER_BYTES];
        assert!(Trailer::decode(&zero, 64)
            .unwrap_err()
            .contains("not a state"));
        zero[..8].copy_from_slice(b"MNEMOVMS");
        assert!(Trailer::decode(&zero, 64).unwrap_err().contains("damaged"));
    }

    #[test]
    fn whole_state_files() {
        let stream = b"QEVM\0\0\0\x03 a stream".to_vec();
        let t = Trailer {
            stream_len: stream.len() as u64,
            stream_crc: crc32c::crc32c(&stream),
            ..trailer()
        };
        let mut file = stream.clone();
        file.extend_from_slice(&t.encode());
        assert_eq!(parse_state(&file), Ok(t));
        file[2] ^= 4;
        assert!(parse_state(&file).unwrap_err().contains("damaged"));
        assert!(parse_state(&file[..10]).is_err());
        assert!(parse_state(&file[1..]).unwrap_err().contains("torn"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            let mut bytes = [0u8; TRAILER_BYTES];
            for b in bytes.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            bytes[..8].copy_from_slice(b"MNEMOVMS");
            let _ = Trailer::decode(&bytes, seed);
        }
    }

    #[test]
    fn sample_spreads_over_the_file_and_sees_changes() {
        let offsets: Vec<u64> = sample_offsets(256 << 20, 256).collect();
        assert_eq!(offsets.len(), 256);
        assert_eq!(offsets[0], 0);
        assert_eq!(offsets[1], 1 << 20);
        assert_eq!(*offsets.last().unwrap(), (256 << 20) - (1 << 20));
        assert!(offsets.iter().all(|o| o % 4096 == 0));
        assert_eq!(
            sample_offsets(8192, 256).count(),
            2,
            "no more pages than the file has"
        );

        let file = tempfile::tempfile().unwrap();
        let size = 16u64 << 20;
        file.set_len(size).unwrap();
        let zero = sample_ram(&file, size).unwrap();
        assert_eq!((zero.pages, zero.nonzero), (256, 0));
        file.write_all_at(b"guest", 64 << 12).unwrap();
        let written = sample_ram(&file, size).unwrap();
        assert_eq!(written.nonzero, 1);
        assert_ne!(written.crc, zero.crc);
    }
}
