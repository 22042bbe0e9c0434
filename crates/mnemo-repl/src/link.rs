//! The thin transport: frames over a blocking TCP stream.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::proto::{self, Frame};

/// Shortest time a send may make no progress before it fails: a busy peer (a full copy being
/// applied on a loaded machine) must not cost a whole new copy.
pub const SEND_STALL_MIN: Duration = Duration::from_secs(3);

/// Bytes read per `read(2)` at least (the receive buffer's initial size).
const READ_CHUNK: usize = 64 << 10;

/// One end of a TCP link, with a receive buffer for partial frames.
#[derive(Debug)]
pub struct Link {
    stream: TcpStream,
    peer: SocketAddr,
    /// Receive buffer, allocated (and zeroed) once, grown only for a larger frame:
    /// `rbuf[rpos..rend]` holds bytes received and not yet decoded.
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    /// Where the last frame returned lies in `rbuf` (valid until the next receive).
    last: (usize, usize),
    wbuf: Vec<u8>,
}

impl Link {
    /// Wrap a connected stream (no delay: every frame is a round trip someone waits for).
    pub fn new(stream: TcpStream) -> Result<Link> {
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io("TCP_NODELAY", e))?;
        let peer = stream
            .peer_addr()
            .map_err(|e| Error::io("peer address", e))?;
        Ok(Link {
            stream,
            peer,
            rbuf: vec![0; READ_CHUNK],
            rpos: 0,
            rend: 0,
            last: (0, 0),
            wbuf: Vec::with_capacity(64 << 10),
        })
    }

    /// Connect to `addr` within `timeout`. A send that makes no progress for `timeout` (at
    /// least [`SEND_STALL_MIN`]) fails too (a partition, a peer that stopped reading): without
    /// it a full copy bigger than the socket's buffers blocked its sender until TCP gave up,
    /// many minutes later.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Link> {
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| Error::io(format!("connecting to {addr}"), e))?;
        stream
            .set_write_timeout(Some(timeout.max(SEND_STALL_MIN)))
            .map_err(|e| Error::io("write timeout", e))?;
        Link::new(stream)
    }

    /// A second handle on the socket (to shut it down from another thread: a link of several
    /// connections cuts them all when one fails).
    pub fn socket(&self) -> Result<TcpStream> {
        self.stream
            .try_clone()
            .map_err(|e| Error::io("cloning a socket", e))
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Time out reads after `timeout` (None: wait for ever).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(|e| Error::io("read timeout", e))
    }

    /// Send one frame.
    pub fn send(&mut self, frame: &Frame) -> Result<()> {
        self.wbuf.clear();
        proto::encode(frame, &mut self.wbuf);
        let peer = self.peer;
        self.stream
            .write_all(&self.wbuf)
            .map_err(|e| Error::io(format!("sending to {peer}"), e))
    }

    /// Send bytes that already are one or more encoded frames.
    pub fn send_encoded(&mut self, bytes: &[u8]) -> Result<()> {
        let peer = self.peer;
        self.stream
            .write_all(bytes)
            .map_err(|e| Error::io(format!("sending to {peer}"), e))
    }

    /// Receive one frame, waiting for it (up to the read timeout).
    pub fn recv(&mut self) -> Result<Frame> {
        loop {
            if let Some(frame) = self.decode_buffered()? {
                return Ok(frame);
            }
            if let Err(e) = self.fill() {
                // Bytes of a frame cut short by the end of the stream are never used
                // (`decode_at_eof` says so, but under a test's mutant).
                if let Some(frame) = proto::decode_at_eof(&self.rbuf[self.rpos..self.rend]) {
                    self.last = (self.rpos, self.rend);
                    self.rpos = 0;
                    self.rend = 0;
                    return Ok(frame);
                }
                return Err(e);
            }
        }
    }

    /// The encoded bytes of the frame the last `recv` returned (its checksum verified).
    pub fn last_frame(&self) -> &[u8] {
        &self.rbuf[self.last.0..self.last.1]
    }

    /// A frame already received, if a whole one is buffered or arrives without waiting.
    pub fn try_recv(&mut self) -> Result<Option<Frame>> {
        if let Some(frame) = self.decode_buffered()? {
            return Ok(Some(frame));
        }
        self.stream
            .set_nonblocking(true)
            .map_err(|e| Error::io("non-blocking", e))?;
        let filled = self.fill();
        self.stream
            .set_nonblocking(false)
            .map_err(|e| Error::io("blocking", e))?;
        match filled {
            Ok(()) => self.decode_buffered(),
            Err(Error::Io { source, .. }) if source.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn decode_buffered(&mut self) -> Result<Option<Frame>> {
        match proto::decode(&self.rbuf[self.rpos..self.rend])? {
            Some((frame, used)) => {
                self.last = (self.rpos, self.rpos + used);
                self.rpos += used;
                if self.rpos == self.rend {
                    self.rpos = 0;
                    self.rend = 0;
                }
                Ok(Some(frame))
            }
            None => Ok(None),
        }
    }

    /// Read what has arrived (at least one byte) after the buffered bytes.
    fn fill(&mut self) -> Result<()> {
        if self.rend == self.rbuf.len() {
            // Full: move the undecoded bytes to the front, or grow for a larger frame.
            if self.rpos > 0 {
                self.rbuf.copy_within(self.rpos..self.rend, 0);
                self.rend -= self.rpos;
                self.rpos = 0;
            } else {
                let len = self.rbuf.len() * 2;
                self.rbuf.resize(len, 0);
            }
        }
        let peer = self.peer;
        let n = loop {
            match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(format!("receiving from {peer}"), e)),
            }
        };
        self.rend += n;
        if n == 0 {
            return Err(Error::io(
                format!("receiving from {peer}"),
                std::io::Error::new(ErrorKind::UnexpectedEof, "the peer closed the link"),
            ));
        }
        Ok(())
    }
}
