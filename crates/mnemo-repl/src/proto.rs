//! The wire protocol, sans I/O: frames to bytes and bytes to frames, nothing else.
//!
//! Every frame is `magic (u32 "MNRP") | kind (u8) | 3 zero bytes | body length (u32) | body |
//! CRC-32C (u32) of everything before it`, little-endian. A decoder fed any bytes returns a
//! frame, asks for more, or returns an error; it never panics and never allocates more than
//! [`FRAME_BODY_MAX`] for one frame. The byte layout of each body is in
//! `docs/design/replication.md`.

use crate::error::ProtoError;
use crate::policy::Mode;

/// First four bytes of every frame.
pub const MAGIC: u32 = u32::from_le_bytes(*b"MNRP");
/// Protocol version spoken here. Version 2 added the primary's [`LinkParams`] to Auth and the
/// mirror's Status frame; version 3 the session of Auth and Welcome (several connections per
/// link, Mojim's queues). A mirror speaks to primaries of versions [`VERSION_MIN`] to
/// [`VERSION`] (a version 1 primary tells no parameters and gets no Status; versions 1 and 2
/// open one connection, each its own session), and refuses others at the handshake.
pub const VERSION: u16 = 3;
/// Oldest primary version a mirror accepts.
pub const VERSION_MIN: u16 = 1;
/// Bytes before a frame's body.
pub const FRAME_HEADER: usize = 12;
/// Bytes after it (the checksum).
pub const FRAME_TRAILER: usize = 4;
/// Largest body accepted (a sync point's record with its data): 64 MiB.
pub const FRAME_BODY_MAX: usize = 64 << 20;
/// Largest number of ranges in one record.
pub const RECORD_RANGES_MAX: usize = 1 << 16;
/// Longest reason a Refused frame carries (bytes of UTF-8).
pub const REASON_MAX: usize = 1024;
/// Length of a handshake nonce and of a proof.
pub const NONCE_LEN: usize = 32;
/// Most backups one Status frame describes.
pub const STATUS_BACKUPS_MAX: usize = 64;
/// Longest backup address a Status frame carries (bytes of UTF-8).
pub const ADDR_MAX: usize = 64;

/// What a primary (version 2) tells its mirror in Auth: its mode, and the threshold of
/// `syncsec`/`syncseceth` (the mirror holds its acknowledgements while a backup has more
/// than `backup_stall` bytes unacknowledged, at most `backup_stall_ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkParams {
    /// The primary's mode (never `local`: a local primary has no link).
    pub mode: Mode,
    /// Unacknowledged bytes at a backup past which the mirror holds its ack (0: never).
    pub backup_stall: u64,
    /// Longest such hold, in milliseconds, after which the backup catches up in bulk.
    pub backup_stall_ms: u32,
}

/// One backup as its mirror sees it (in a Status frame).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BackupStatus {
    /// The backup's address, as the mirror's `--backup` names it (at most [`ADDR_MAX`]).
    pub addr: String,
    /// A link is up and the backup holds a full copy.
    pub connected: bool,
    /// Highest record id the backup acknowledged.
    pub acked: u64,
    /// Records the mirror holds beyond that.
    pub lag_records: u64,
    /// Bytes of records forwarded or queued and not yet acknowledged.
    pub lag_bytes: u64,
    /// Full copies sent to it.
    pub copies: u64,
    /// Acknowledgements to the primary held back because it lagged past the threshold.
    pub stalls: u64,
    /// Times it was dropped to a catch-up with a full copy.
    pub overflows: u64,
    /// Catch-ups in bulk by dirty ranges (`syncseceth`).
    pub bulk_catchups: u64,
}

/// Which side of a link a node speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The node that takes writes and ships its sync points.
    Primary = 1,
    /// The node that applies them and acknowledges once they are durable there.
    Mirror = 2,
}

impl Role {
    fn from_u8(v: u8) -> Option<Role> {
        match v {
            1 => Some(Role::Primary),
            2 => Some(Role::Mirror),
            _ => None,
        }
    }
}

/// One range of a record: `data` is written at `offset` of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    /// Offset in the pool file.
    pub offset: u64,
    /// The bytes.
    pub data: Vec<u8>,
}

/// A frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Primary to mirror, first: who it is and its challenge.
    Hello {
        /// Protocol version.
        version: u16,
        /// The sender's role.
        role: Role,
        /// Random bytes the mirror must prove it knows the secret with.
        nonce: [u8; NONCE_LEN],
    },
    /// Mirror to primary: its proof, and its own challenge.
    Challenge {
        /// Protocol version.
        version: u16,
        /// `keyed_hash(key, "mirror" | primary nonce | mirror nonce)`.
        proof: [u8; NONCE_LEN],
        /// Random bytes the primary must prove it knows the secret with.
        nonce: [u8; NONCE_LEN],
    },
    /// Primary to mirror: its proof and what it is.
    Auth {
        /// `keyed_hash(key, "primary" | mirror nonce | primary nonce)`.
        proof: [u8; NONCE_LEN],
        /// The primary's epoch (configuration generation).
        epoch: u64,
        /// The primary's pool size in bytes.
        pool_size: u64,
        /// Its mode and threshold (version 2; absent from a version 1 primary).
        params: Option<LinkParams>,
        /// Version 3 (encoded only with `params`): 0 opens a new session (this connection
        /// is the first of a link, which supersedes every older one); any other value joins
        /// the session the mirror's Welcome named so, as one more connection of the same
        /// link. Absent from version 1 and 2 primaries (each connection its own session).
        session: Option<u64>,
    },
    /// Mirror to primary: accepted; where the mirror stands.
    Welcome {
        /// Highest epoch the mirror has seen (persisted).
        epoch: u64,
        /// Highest record id it holds.
        last_id: u64,
        /// Version 3: the session this connection belongs to (never 0), which the primary's
        /// further connections name in their Auth to join it. Absent for older primaries.
        session: Option<u64>,
    },
    /// Mirror to primary (or either way): refused, with the reason; the link closes.
    Refused {
        /// A short reason for logs and errors.
        reason: String,
    },
    /// A sync point: applied whole or not at all.
    Record {
        /// Epoch of the primary that made it.
        epoch: u64,
        /// Unique and increasing across the primary's history with this mirror.
        id: u64,
        /// Part of a full copy (applied directly, not logged) rather than a sync point.
        copy: bool,
        /// The ranges, in order.
        ranges: Vec<Range>,
    },
    /// A full copy of a pool of `pool_size` bytes follows (records with `copy` set).
    CopyBegin {
        /// Epoch of the primary.
        epoch: u64,
        /// Size of the pool.
        pool_size: u64,
    },
    /// The full copy is complete at `id`; the mirror is in sync from here on.
    CopyDone {
        /// Epoch of the primary.
        epoch: u64,
        /// Id of the last copy record.
        id: u64,
        /// Pool size the copy covers.
        pool_size: u64,
    },
    /// Mirror to primary: every record up to `id` is durable at the mirror.
    Ack {
        /// The mirror's epoch.
        epoch: u64,
        /// Highest durable record id.
        id: u64,
    },
    /// Either way, on an idle link: the primary asks, the mirror answers with the same kind,
    /// so a lost peer is seen without waiting for a sync point.
    Heartbeat {
        /// The sender's epoch (a mirror answers with the highest it has seen).
        epoch: u64,
        /// The sender's last record id (shipped by the primary, held by the mirror).
        id: u64,
    },
    /// Mirror to a version 2 primary, now and then after an Ack or a heartbeat: where its
    /// backups stand, for the primary's `INFO replication`.
    Status {
        /// The mirror's epoch.
        epoch: u64,
        /// Highest record id the mirror holds.
        last_id: u64,
        /// Its backups, in the order of its `--backup` flags.
        backups: Vec<BackupStatus>,
    },
}

const K_HELLO: u8 = 1;
const K_CHALLENGE: u8 = 2;
const K_AUTH: u8 = 3;
const K_WELCOME: u8 = 4;
const K_REFUSED: u8 = 5;
const K_RECORD: u8 = 6;
const K_COPY_DONE: u8 = 7;
const K_ACK: u8 = 8;
const K_COPY_BEGIN: u8 = 9;
const K_HEARTBEAT: u8 = 10;
const K_STATUS: u8 = 11;

/// Mark after a record's last range: the id inverted (a record cut short cannot end well).
fn end_mark(id: u64) -> u64 {
    !id
}

/// Append the encoded `frame` to `out`.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(kind(frame));
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&[0; 4]);
    let body = out.len();
    match frame {
        Frame::Hello {
            version,
            role,
            nonce,
        } => {
            out.extend_from_slice(&version.to_le_bytes());
            out.push(*role as u8);
            out.extend_from_slice(nonce);
        }
        Frame::Challenge {
            version,
            proof,
            nonce,
        } => {
            out.extend_from_slice(&version.to_le_bytes());
            out.extend_from_slice(proof);
            out.extend_from_slice(nonce);
        }
        Frame::Auth {
            proof,
            epoch,
            pool_size,
            params,
            session,
        } => {
            out.extend_from_slice(proof);
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&pool_size.to_le_bytes());
            if let Some(p) = params {
                out.push(p.mode.code());
                out.extend_from_slice(&p.backup_stall.to_le_bytes());
                out.extend_from_slice(&p.backup_stall_ms.to_le_bytes());
                if let Some(session) = session {
                    out.extend_from_slice(&session.to_le_bytes());
                }
            }
        }
        Frame::Welcome {
            epoch,
            last_id,
            session,
        } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&last_id.to_le_bytes());
            if let Some(session) = session {
                out.extend_from_slice(&session.to_le_bytes());
            }
        }
        Frame::Status {
            epoch,
            last_id,
            backups,
        } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&last_id.to_le_bytes());
            let backups = &backups[..backups.len().min(STATUS_BACKUPS_MAX)];
            out.push(backups.len() as u8);
            for b in backups {
                let addr = cut_utf8(&b.addr, ADDR_MAX);
                out.push(addr.len() as u8);
                out.extend_from_slice(addr.as_bytes());
                out.push(u8::from(b.connected));
                for v in [
                    b.acked,
                    b.lag_records,
                    b.lag_bytes,
                    b.copies,
                    b.stalls,
                    b.overflows,
                    b.bulk_catchups,
                ] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        Frame::Ack { epoch, id: last_id }
        | Frame::Heartbeat { epoch, id: last_id }
        | Frame::CopyBegin {
            epoch,
            pool_size: last_id,
        } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&last_id.to_le_bytes());
        }
        Frame::Refused { reason } => {
            // At most REASON_MAX bytes, cut at a character boundary.
            let reason = cut_utf8(reason, REASON_MAX);
            out.extend_from_slice(&(reason.len() as u32).to_le_bytes());
            out.extend_from_slice(reason.as_bytes());
        }
        Frame::Record {
            epoch,
            id,
            copy,
            ranges,
        } => {
            encode_record_head(out, *epoch, *id, *copy, ranges.len());
            for r in ranges {
                encode_range(out, r.offset, &r.data);
            }
            out.extend_from_slice(&end_mark(*id).to_le_bytes());
        }
        Frame::CopyDone {
            epoch,
            id,
            pool_size,
        } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&pool_size.to_le_bytes());
        }
    }
    finish(out, start, body);
}

fn kind(frame: &Frame) -> u8 {
    match frame {
        Frame::Hello { .. } => K_HELLO,
        Frame::Challenge { .. } => K_CHALLENGE,
        Frame::Auth { .. } => K_AUTH,
        Frame::Welcome { .. } => K_WELCOME,
        Frame::Refused { .. } => K_REFUSED,
        Frame::Record { .. } => K_RECORD,
        Frame::CopyDone { .. } => K_COPY_DONE,
        Frame::Ack { .. } => K_ACK,
        Frame::CopyBegin { .. } => K_COPY_BEGIN,
        Frame::Heartbeat { .. } => K_HEARTBEAT,
        Frame::Status { .. } => K_STATUS,
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends at a character boundary.
fn cut_utf8(text: &str, max: usize) -> &str {
    let mut len = text.len().min(max);
    while !text.is_char_boundary(len) {
        len -= 1;
    }
    &text[..len]
}

fn encode_record_head(out: &mut Vec<u8>, epoch: u64, id: u64, copy: bool, count: usize) {
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.push(u8::from(copy));
    out.extend_from_slice(&(count as u32).to_le_bytes());
}

fn encode_range(out: &mut Vec<u8>, offset: u64, data: &[u8]) {
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
}

/// Fill in the body length and append the checksum.
fn finish(out: &mut Vec<u8>, start: usize, body: usize) {
    let len = (out.len() - body) as u32;
    out[start + 8..start + 12].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Encode a record straight from slices of memory (the primary's pool), without first
/// copying each range into a [`Range`]: the same bytes as [`encode`] of a `Frame::Record`.
pub fn encode_record<'a>(
    out: &mut Vec<u8>,
    epoch: u64,
    id: u64,
    copy: bool,
    ranges: impl ExactSizeIterator<Item = (u64, &'a [u8])>,
) {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(K_RECORD);
    out.extend_from_slice(&[0; 7]);
    let body = out.len();
    encode_record_head(out, epoch, id, copy, ranges.len());
    for (offset, data) in ranges {
        encode_range(out, offset, data);
    }
    out.extend_from_slice(&end_mark(id).to_le_bytes());
    finish(out, start, body);
}

/// Bytes a record frame of these range lengths takes.
pub fn record_frame_len(lens: impl Iterator<Item = u64>) -> u64 {
    let ranges: u64 = lens.map(|l| 16 + l).sum();
    (FRAME_HEADER + FRAME_TRAILER) as u64 + 8 + 8 + 1 + 4 + ranges + 8
}

/// Try to decode one frame from the front of `buf`: `Ok(Some((frame, used)))`, `Ok(None)` if
/// more bytes are needed, or an error for bytes that cannot be a frame (the link must close).
pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, ProtoError> {
    if buf.len() < FRAME_HEADER {
        // Reject a wrong magic as early as it shows.
        let n = buf.len().min(4);
        if buf[..n] != MAGIC.to_le_bytes()[..n] {
            return Err(ProtoError::BadMagic);
        }
        return Ok(None);
    }
    let mut r = Reader::new(buf);
    if r.u32()? != MAGIC {
        return Err(ProtoError::BadMagic);
    }
    let kind = r.u8()?;
    r.skip(3)?;
    let len = r.u32()? as usize;
    if len > FRAME_BODY_MAX {
        return Err(ProtoError::TooLarge(len));
    }
    let total = FRAME_HEADER + len + FRAME_TRAILER;
    if buf.len() < total {
        return Ok(None);
    }
    let stored = u32::from_le_bytes(
        buf[total - 4..total]
            .try_into()
            .map_err(|_| ProtoError::Truncated)?,
    );
    if crc32c::crc32c(&buf[..total - 4]) != stored {
        return Err(ProtoError::Checksum);
    }
    let mut b = Reader::new(&buf[FRAME_HEADER..FRAME_HEADER + len]);
    let frame = match kind {
        K_HELLO => {
            let version = b.u16()?;
            let role = Role::from_u8(b.u8()?).ok_or(ProtoError::Malformed("role"))?;
            Frame::Hello {
                version,
                role,
                nonce: b.array()?,
            }
        }
        K_CHALLENGE => Frame::Challenge {
            version: b.u16()?,
            proof: b.array()?,
            nonce: b.array()?,
        },
        K_AUTH => {
            let proof = b.array()?;
            let epoch = b.u64()?;
            let pool_size = b.u64()?;
            // Version 1 ends here; version 2 adds the primary's parameters, version 3 its
            // session.
            let params = if b.remaining() == 0 {
                None
            } else {
                let mode = Mode::from_code(b.u8()?)
                    .filter(|m| *m != Mode::Local)
                    .ok_or(ProtoError::Malformed("mode"))?;
                Some(LinkParams {
                    mode,
                    backup_stall: b.u64()?,
                    backup_stall_ms: b.u32()?,
                })
            };
            let session = if params.is_some() && b.remaining() > 0 {
                Some(b.u64()?)
            } else {
                None
            };
            Frame::Auth {
                proof,
                epoch,
                pool_size,
                params,
                session,
            }
        }
        K_STATUS => {
            let epoch = b.u64()?;
            let last_id = b.u64()?;
            let count = b.u8()? as usize;
            if count > STATUS_BACKUPS_MAX {
                return Err(ProtoError::Malformed("backup count"));
            }
            let mut backups = Vec::with_capacity(count);
            for _ in 0..count {
                let n = b.u8()? as usize;
                if n > ADDR_MAX {
                    return Err(ProtoError::Malformed("address length"));
                }
                let addr = std::str::from_utf8(b.take(n)?)
                    .map_err(|_| ProtoError::Malformed("address not UTF-8"))?
                    .to_string();
                let connected = match b.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(ProtoError::Malformed("connected flag")),
                };
                backups.push(BackupStatus {
                    addr,
                    connected,
                    acked: b.u64()?,
                    lag_records: b.u64()?,
                    lag_bytes: b.u64()?,
                    copies: b.u64()?,
                    stalls: b.u64()?,
                    overflows: b.u64()?,
                    bulk_catchups: b.u64()?,
                });
            }
            Frame::Status {
                epoch,
                last_id,
                backups,
            }
        }
        K_WELCOME => {
            let (epoch, last_id) = (b.u64()?, b.u64()?);
            // Version 3 adds the session, never 0.
            let session = match b.remaining() {
                0 => None,
                _ => match b.u64()? {
                    0 => return Err(ProtoError::Malformed("session")),
                    s => Some(s),
                },
            };
            Frame::Welcome {
                epoch,
                last_id,
                session,
            }
        }
        K_ACK => Frame::Ack {
            epoch: b.u64()?,
            id: b.u64()?,
        },
        K_REFUSED => {
            let n = b.u32()? as usize;
            if n > REASON_MAX {
                return Err(ProtoError::Malformed("reason length"));
            }
            let bytes = b.take(n)?;
            Frame::Refused {
                reason: std::str::from_utf8(bytes)
                    .map_err(|_| ProtoError::Malformed("reason not UTF-8"))?
                    .to_string(),
            }
        }
        K_RECORD => {
            let epoch = b.u64()?;
            let id = b.u64()?;
            let copy = match b.u8()? {
                0 => false,
                1 => true,
                _ => return Err(ProtoError::Malformed("copy flag")),
            };
            let count = b.u32()? as usize;
            if count > RECORD_RANGES_MAX {
                return Err(ProtoError::Malformed("range count"));
            }
            // Each range needs at least 16 bytes: a count the body cannot hold is refused
            // before anything is allocated for it.
            if count.saturating_mul(16) > b.remaining() {
                return Err(ProtoError::Malformed("range count"));
            }
            let mut ranges = Vec::with_capacity(count);
            for _ in 0..count {
                let offset = b.u64()?;
                let n = usize::try_from(b.u64()?).map_err(|_| ProtoError::Malformed("length"))?;
                if offset.checked_add(n as u64).is_none() {
                    return Err(ProtoError::Malformed("range end"));
                }
                ranges.push(Range {
                    offset,
                    data: b.take(n)?.to_vec(),
                });
            }
            if b.u64()? != end_mark(id) {
                return Err(ProtoError::Malformed("end mark"));
            }
            Frame::Record {
                epoch,
                id,
                copy,
                ranges,
            }
        }
        K_HEARTBEAT => Frame::Heartbeat {
            epoch: b.u64()?,
            id: b.u64()?,
        },
        K_COPY_BEGIN => Frame::CopyBegin {
            epoch: b.u64()?,
            pool_size: b.u64()?,
        },
        K_COPY_DONE => Frame::CopyDone {
            epoch: b.u64()?,
            id: b.u64()?,
            pool_size: b.u64()?,
        },
        other => return Err(ProtoError::UnknownKind(other)),
    };
    if b.remaining() != 0 {
        return Err(ProtoError::Malformed("trailing bytes"));
    }
    Ok(Some((frame, total)))
}

/// What the bytes left undecoded when a stream ended (`buf`: less than one whole frame) are
/// worth: nothing. A frame cut short by a lost connection or a crashed peer has no end mark
/// and no checksum to check and is never used; the caller reports the end of the stream.
/// (The deterministic simulation cuts frames this way; the mutant `repl.apply_torn` takes
/// the whole ranges of a cut record instead, as a receiver without these checks would.)
pub fn decode_at_eof(buf: &[u8]) -> Option<Frame> {
    if !mnemo_pmem::mutant::active("repl.apply_torn") {
        return None;
    }
    // Broken on purpose (tests only): the whole ranges of a record cut short.
    let mut r = Reader::new(buf);
    if r.u32().ok()? != MAGIC || r.u8().ok()? != K_RECORD {
        return None;
    }
    r.skip(7).ok()?;
    let (epoch, id) = (r.u64().ok()?, r.u64().ok()?);
    let copy = r.u8().ok()? == 1;
    let count = r.u32().ok()? as usize;
    let mut ranges = Vec::new();
    for _ in 0..count.min(RECORD_RANGES_MAX) {
        let parsed = (|| -> Result<Range, ProtoError> {
            let offset = r.u64()?;
            let n = usize::try_from(r.u64()?).map_err(|_| ProtoError::Malformed("length"))?;
            Ok(Range {
                offset,
                data: r.take(n)?.to_vec(),
            })
        })();
        match parsed {
            Ok(range) => ranges.push(range),
            Err(_) => break,
        }
    }
    if ranges.is_empty() {
        return None;
    }
    Some(Frame::Record {
        epoch,
        id,
        copy,
        ranges,
    })
}

/// Bounds-checked little-endian reads.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, at: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if n > self.remaining() {
            return Err(ProtoError::Truncated);
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn skip(&mut self, n: usize) -> Result<(), ProtoError> {
        self.take(n).map(|_| ())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtoError> {
        self.take(N)?.try_into().map_err(|_| ProtoError::Truncated)
    }

    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, ProtoError> {
        self.array().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Frame> {
        vec![
            Frame::Hello {
                version: VERSION,
                role: Role::Primary,
                nonce: [7; 32],
            },
            Frame::Challenge {
                version: VERSION,
                proof: [1; 32],
                nonce: [2; 32],
            },
            Frame::Auth {
                proof: [3; 32],
                epoch: 4,
                pool_size: 1 << 30,
                params: None,
                session: None,
            },
            Frame::Auth {
                proof: [3; 32],
                epoch: 4,
                pool_size: 1 << 30,
                params: Some(LinkParams {
                    mode: Mode::SyncSecEth,
                    backup_stall: 40 << 20,
                    backup_stall_ms: 1000,
                }),
                session: None,
            },
            Frame::Auth {
                proof: [3; 32],
                epoch: 4,
                pool_size: 1 << 30,
                params: Some(LinkParams {
                    mode: Mode::Sync,
                    backup_stall: 0,
                    backup_stall_ms: 1000,
                }),
                session: Some(0),
            },
            Frame::Auth {
                proof: [3; 32],
                epoch: 4,
                pool_size: 1 << 30,
                params: Some(LinkParams {
                    mode: Mode::SyncFlush,
                    backup_stall: 0,
                    backup_stall_ms: 1000,
                }),
                session: Some(0x1234_5678_9abc),
            },
            Frame::Status {
                epoch: 3,
                last_id: 90,
                backups: vec![
                    BackupStatus {
                        addr: "10.213.40.2:7381".into(),
                        connected: true,
                        acked: 80,
                        lag_records: 10,
                        lag_bytes: 12345,
                        copies: 2,
                        stalls: 7,
                        overflows: 1,
                        bulk_catchups: 3,
                    },
                    BackupStatus::default(),
                ],
            },
            Frame::Status {
                epoch: 1,
                last_id: 0,
                backups: vec![],
            },
            Frame::Welcome {
                epoch: 9,
                last_id: 77,
                session: None,
            },
            Frame::Welcome {
                epoch: 9,
                last_id: 77,
                session: Some(3),
            },
            Frame::Refused {
                reason: "authentication failed".into(),
            },
            Frame::Record {
                epoch: 2,
                id: 5,
                copy: false,
                ranges: vec![
                    Range {
                        offset: 4096,
                        data: vec![1, 2, 3],
                    },
                    Range {
                        offset: 0,
                        data: vec![],
                    },
                ],
            },
            Frame::CopyDone {
                epoch: 2,
                id: 6,
                pool_size: 8 << 20,
            },
            Frame::Ack { epoch: 2, id: 5 },
            Frame::CopyBegin {
                epoch: 2,
                pool_size: 1 << 20,
            },
            Frame::Heartbeat { epoch: 3, id: 41 },
        ]
    }

    #[test]
    fn every_frame_round_trips_and_needs_all_its_bytes() {
        for frame in samples() {
            let mut buf = Vec::new();
            encode(&frame, &mut buf);
            for cut in 0..buf.len() {
                assert_eq!(decode(&buf[..cut]).unwrap(), None, "{frame:?} cut at {cut}");
            }
            buf.extend_from_slice(b"MNRP"); // the start of a next frame is left alone
            let (back, used) = decode(&buf).unwrap().unwrap();
            assert_eq!(back, frame);
            assert_eq!(used, buf.len() - 4);
        }
    }

    #[test]
    fn refusal_reasons_are_utf8_and_bounded() {
        let long = "é".repeat(600); // 1200 bytes: cut to 1024 at a character boundary
        let mut buf = Vec::new();
        encode(&Frame::Refused { reason: long }, &mut buf);
        let (frame, _) = decode(&buf).unwrap().unwrap();
        assert_eq!(
            frame,
            Frame::Refused {
                reason: "é".repeat(512)
            }
        );
        // Invalid UTF-8 is refused, not replaced (one encoding per frame: found by fuzzing).
        let mut bad = Vec::new();
        bad.extend_from_slice(&MAGIC.to_le_bytes());
        bad.extend_from_slice(&[K_REFUSED, 0, 0, 0, 6, 0, 0, 0, 2, 0, 0, 0, 0xff, 0xfe]);
        let crc = crc32c::crc32c(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&bad), Err(ProtoError::Malformed("reason not UTF-8")));
    }

    #[test]
    fn encode_record_matches_encode() {
        let ranges = [(64u64, &b"abcdefgh"[..]), (4096, &b"xyz"[..])];
        let mut direct = Vec::new();
        encode_record(&mut direct, 3, 11, false, ranges.iter().copied());
        let mut framed = Vec::new();
        encode(
            &Frame::Record {
                epoch: 3,
                id: 11,
                copy: false,
                ranges: ranges
                    .iter()
                    .map(|&(offset, d)| Range {
                        offset,
                        data: d.to_vec(),
                    })
                    .collect(),
            },
            &mut framed,
        );
        assert_eq!(direct, framed);
        assert_eq!(
            record_frame_len(ranges.iter().map(|r| r.1.len() as u64)),
            direct.len() as u64
        );
    }

    #[test]
    fn damage_is_an_error() {
        for frame in samples() {
            let mut buf = Vec::new();
            encode(&frame, &mut buf);
            for i in 0..buf.len() {
                let mut bad = buf.clone();
                bad[i] ^= 0x40;
                // The length field may now ask for more bytes; anything else is refused.
                match decode(&bad) {
                    Err(_) | Ok(None) => {}
                    Ok(Some(f)) => panic!("{frame:?}: byte {i} flipped still decodes: {f:?}"),
                }
            }
        }
        assert_eq!(decode(b"GET / HTTP/1.1\r\n"), Err(ProtoError::BadMagic));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
            let mut framed = MAGIC.to_le_bytes().to_vec();
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
        }

        #[test]
        fn records_round_trip(
            epoch in any::<u64>(),
            id in any::<u64>(),
            ranges in proptest::collection::vec(
                (0u64..1 << 40, proptest::collection::vec(any::<u8>(), 0..64)), 0..8),
        ) {
            let frame = Frame::Record {
                epoch,
                id,
                copy: false,
                ranges: ranges.into_iter().map(|(offset, data)| Range { offset, data }).collect(),
            };
            let mut buf = Vec::new();
            encode(&frame, &mut buf);
            let (back, used) = decode(&buf).unwrap().unwrap();
            prop_assert_eq!(back, frame);
            prop_assert_eq!(used, buf.len());
        }
    }
}
