//! MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw]
//! [KEYS key...]: the keys DUMPed (`dump.rs`, Redis's payload format), sent to another
//! server as SELECT and RESTORE, and deleted here once the target has answered OK (unless
//! COPY). Redis 7.0's `cluster.c` `migrateCommand`: the same checks in the same order, the
//! same requests, the same errors. Like Redis's, it blocks the server while it talks to the
//! target, for at most `timeout` ms per connect, write and read; unlike Redis, it keeps no
//! connection cached between calls.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use mnemo_resp::bytes::{Bytes, BytesMut};
use mnemo_resp::{encode_command, errors, parse_i64, Reply, ReplyDecoder};

use super::commands::{err, err_owned};
use super::dump;
use super::keyspace::Ctx;
use super::store::Result;

const WRITE_FAILED: &str = "IOERR error or timeout writing to target instance";
const READ_FAILED: &str = "IOERR error or timeout reading to target instance";
const CONNECT_FAILED: &str = "IOERR error or timeout connecting to the client";

/// MIGRATE.
pub fn migrate(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (mut copy, mut replace) = (false, false);
    let mut auth: Vec<Bytes> = Vec::new();
    let mut keys: &[Bytes] = &a[3..4];
    let mut j = 6;
    while j < a.len() {
        let more = a.len() - 1 - j;
        let word = &a[j];
        if word.eq_ignore_ascii_case(b"copy") {
            copy = true;
        } else if word.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else if word.eq_ignore_ascii_case(b"auth") {
            if more < 1 {
                return Ok(err(errors::SYNTAX));
            }
            auth = vec![Bytes::from_static(b"AUTH"), a[j + 1].clone()];
            j += 1;
        } else if word.eq_ignore_ascii_case(b"auth2") {
            if more < 2 {
                return Ok(err(errors::SYNTAX));
            }
            auth = vec![
                Bytes::from_static(b"AUTH"),
                a[j + 1].clone(),
                a[j + 2].clone(),
            ];
            j += 2;
        } else if word.eq_ignore_ascii_case(b"keys") {
            if !a[3].is_empty() {
                return Ok(err(
                    "ERR When using MIGRATE KEYS option, the key argument must be set to the \
                     empty string",
                ));
            }
            keys = &a[j + 1..];
            break;
        } else {
            return Ok(err(errors::SYNTAX));
        }
        j += 1;
    }
    let (Some(timeout), Some(db)) = (parse_i64(&a[5]), parse_i64(&a[4])) else {
        return Ok(err(errors::NOT_INTEGER));
    };
    let timeout = Duration::from_millis(if timeout <= 0 { 1000 } else { timeout as u64 });
    // The keys here, with their payloads and what is left of their TTLs.
    let mut found = Vec::new();
    for key in keys {
        let Some(entry) = ctx.lookup(key)? else {
            continue;
        };
        let ttl = match entry.entry.expire {
            0 => 0,
            at => (at - ctx.now).max(1),
        };
        if let Some(value) = dump::read_value(ctx, key)? {
            found.push((key.clone(), dump::encode(&value), ttl));
        }
    }
    if found.is_empty() {
        return Ok(Reply::Simple(Bytes::from_static(b"NOKEY")));
    }
    let mut request = BytesMut::new();
    if !auth.is_empty() {
        encode_command(&auth, &mut request);
    }
    encode_command(&[&b"SELECT"[..], db.to_string().as_bytes()], &mut request);
    for (key, payload, ttl) in &found {
        let ttl = ttl.to_string();
        let mut restore: Vec<&[u8]> = vec![b"RESTORE", key, ttl.as_bytes(), payload];
        if replace {
            restore.push(b"REPLACE");
        }
        encode_command(&restore, &mut request);
    }
    let replies = 1 + usize::from(!auth.is_empty()) + found.len();
    let answers = match exchange(&a[1], &a[2], timeout, &request, replies) {
        Ok(answers) => answers,
        Err(text) => return Ok(err(text)),
    };
    // AUTH's and SELECT's answers first: an error there is the target's error.
    let (setup, restores) = answers.split_at(replies - found.len());
    if let Some(text) = setup.iter().find_map(error_text) {
        return Ok(target_error(&text));
    }
    let mut first_error = None;
    for ((key, _, _), answer) in found.iter().zip(restores) {
        match error_text(answer) {
            Some(text) => {
                first_error.get_or_insert(text);
            }
            None if !copy => {
                if let Some(old) = ctx.lookup_write(key)? {
                    ctx.delete(&old)?;
                }
            }
            None => {}
        }
    }
    Ok(match first_error {
        Some(text) => target_error(&text),
        None => Reply::ok(),
    })
}

fn error_text(reply: &Reply) -> Option<Bytes> {
    match reply {
        Reply::Error(text) => Some(text.clone()),
        _ => None,
    }
}

fn target_error(text: &[u8]) -> Reply {
    err_owned(format!(
        "ERR Target instance replied with error: {}",
        String::from_utf8_lossy(text)
    ))
}

/// Connects to `host:port`, writes `request` and reads `replies` replies, each step within
/// `timeout`; Redis's IOERR text when one fails.
fn exchange(
    host: &[u8],
    port: &[u8],
    timeout: Duration,
    request: &[u8],
    replies: usize,
) -> std::result::Result<Vec<Reply>, &'static str> {
    let host = String::from_utf8_lossy(host);
    // Redis reads the port with atoi: a port that is not a number is port 0, which fails.
    let port: u16 = std::str::from_utf8(port)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let address = (host.as_ref(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.next())
        .ok_or(WRITE_FAILED)?;
    let mut stream = match TcpStream::connect_timeout(&address, timeout) {
        Ok(stream) => stream,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Err(CONNECT_FAILED),
        // A refused connection shows in Redis as a failed write (its connect only waits
        // for the socket to become writable).
        Err(_) => return Err(WRITE_FAILED),
    };
    let setup = stream
        .set_write_timeout(Some(timeout))
        .and_then(|()| stream.set_read_timeout(Some(timeout)));
    if setup.is_err() || stream.write_all(request).is_err() {
        return Err(WRITE_FAILED);
    }
    let mut decoder = ReplyDecoder::new();
    let mut answers = Vec::with_capacity(replies);
    let mut buffer = [0u8; 4096];
    while answers.len() < replies {
        match decoder.next_reply() {
            Ok(Some(reply)) => {
                answers.push(reply);
                continue;
            }
            Ok(None) => {}
            Err(_) => return Err(READ_FAILED),
        }
        match stream.read(&mut buffer) {
            Ok(n) if n > 0 => decoder.feed(&buffer[..n]),
            _ => return Err(READ_FAILED),
        }
    }
    Ok(answers)
}
