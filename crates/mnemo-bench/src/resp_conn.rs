//! A RESP connection for benchmarks that kill servers under their clients: every error is a
//! result, never a panic.

use std::io::{Read, Write};
use std::net::TcpStream;

use mnemo_resp::bytes::BytesMut;
use mnemo_resp::{encode_command, Reply, ReplyDecoder};

/// One connection to a Redis-protocol server on loopback (TCP_NODELAY).
pub struct Conn {
    s: TcpStream,
    d: ReplyDecoder,
    out: BytesMut,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.s.peer_addr().ok())
            .finish()
    }
}

impl Conn {
    /// Connects to `127.0.0.1:port`.
    pub fn new(port: u16) -> std::io::Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            s,
            d: ReplyDecoder::new(),
            out: BytesMut::new(),
        })
    }

    /// Sends `commands` in one write and reads a reply to each.
    pub fn call(&mut self, commands: &[Vec<&[u8]>]) -> std::io::Result<Vec<Reply>> {
        self.out.clear();
        for c in commands {
            encode_command(c, &mut self.out);
        }
        self.s.write_all(&self.out)?;
        let mut replies = Vec::with_capacity(commands.len());
        let mut buf = [0u8; 16 << 10];
        while replies.len() < commands.len() {
            match self.d.next_reply() {
                Ok(Some(r)) => replies.push(r),
                Ok(None) => {
                    let n = self.s.read(&mut buf)?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.d.feed(&buf[..n]);
                }
                Err(e) => return Err(std::io::Error::other(format!("bad reply: {e:?}"))),
            }
        }
        Ok(replies)
    }
}
