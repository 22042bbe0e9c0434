//! A RESP connection for benchmarks that kill servers under their clients: every error is a
//! result, never a panic.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

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

/// A client thread that SETs `k0 v0, k1 v1, ...` in order on `port`, one at a time, until
/// `stop` or the first error (the server died under it); returns each acknowledged `i` with
/// the time its OK arrived.
pub fn sequential_writer(port: u16, stop: Arc<AtomicBool>) -> JoinHandle<Vec<(u64, Instant)>> {
    std::thread::spawn(move || {
        let mut acked = Vec::new();
        let Ok(mut c) = Conn::new(port) else {
            return acked;
        };
        for i in 0u64.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let key = format!("k{i}");
            let value = format!("v{i}");
            match c.call(&[vec![b"SET", key.as_bytes(), value.as_bytes()]]) {
                Ok(r) if matches!(&r[0], Reply::Simple(s) if s.as_ref() == b"OK") => {
                    acked.push((i, Instant::now()))
                }
                _ => break,
            }
        }
        acked
    })
}

/// Which of the keys `k{i}` written by [`sequential_writer`] the server on `port` holds
/// with their value `v{i}` (read back in pipelines of 512 GETs).
pub fn written_keys_present(port: u16, written: &[u64]) -> std::io::Result<Vec<bool>> {
    let mut c = Conn::new(port)?;
    let mut out = Vec::with_capacity(written.len());
    for chunk in written.chunks(512) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("k{i}")).collect();
        let gets: Vec<Vec<&[u8]>> = keys
            .iter()
            .map(|k| vec![&b"GET"[..], k.as_bytes()])
            .collect();
        for (i, r) in chunk.iter().zip(c.call(&gets)?) {
            let want = format!("v{i}");
            out.push(matches!(&r, Reply::Bulk(b) if b.as_ref() == want.as_bytes()));
        }
    }
    Ok(out)
}
