//! YCSB's Redis binding (`site.ycsb.db.RedisClient`) over one blocking TCP connection:
//! a record is a hash (field name to value); every key is also a member of the sorted set
//! `_indices`, scored by the Java `hashCode` of the key, which is what scans walk.
//!
//! | YCSB op | YCSB's binding (Jedis), [`Commands::Ycsb`] (the default) | [`Commands::Compat`] (servers without HMSET / ZRANGEBYSCORE) |
//! |---------|-----------------------------------------------|-------------------------------|
//! | insert  | `HMSET key f v ...`, `ZADD _indices h key`    | `HSET key f v ...`, `ZADD`    |
//! | read    | `HGETALL key` (`readallfields=true`, the core workloads); `HMGET key f ...` (given fields) | same |
//! | update  | `HMSET key f v`                               | `HSET key f v`                |
//! | scan    | `ZRANGEBYSCORE _indices h +inf LIMIT 0 n`, then `HGETALL` each | `ZRANGE _indices h +inf BYSCORE LIMIT 0 n`, then `HGETALL` each |
//! | delete  | `DEL key`, `ZREM _indices key`                | same                          |
//!
//! Requests are synchronous (one reply awaited before the next request), as with Jedis.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use mnemo_resp::bytes::{Bytes, BytesMut};
use mnemo_resp::{encode_command, Reply, ReplyDecoder};

use super::generator::java_string_hash;

/// The sorted set of all keys, scored by their hash (`RedisClient.INDEX_KEY`).
pub const INDEX_KEY: &[u8] = b"_indices";

/// Longest wait for one reply; a server that takes longer fails the operation.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Which commands carry the binding's operations (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commands {
    /// Exactly YCSB's: HMSET and ZRANGEBYSCORE (mnemo serve has both since db4233a).
    Ycsb,
    /// HSET with several pairs and ZRANGE ... BYSCORE LIMIT: the same effect and replies'
    /// content, for servers without HMSET / ZRANGEBYSCORE (older mnemo serve builds).
    Compat,
}

/// An operation's outcome, as YCSB's `Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Done.
    Ok,
    /// The server answered with an error or an unexpected reply (or a read found nothing).
    Error,
}

/// A record read back: (field, value) pairs.
pub type Record = Vec<(Bytes, Bytes)>;

/// One connection speaking YCSB's Redis binding.
#[derive(Debug)]
pub struct RedisClient {
    stream: TcpStream,
    out: BytesMut,
    decoder: ReplyDecoder,
    buf: Vec<u8>,
    commands: Commands,
}

/// A failure of the connection itself (not an error reply).
pub type IoResult<T> = std::io::Result<T>;

fn io_error(text: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, text)
}

impl RedisClient {
    /// Connects to `addr` (host:port).
    pub fn connect(addr: &str, commands: Commands) -> IoResult<RedisClient> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
        Ok(RedisClient {
            stream,
            out: BytesMut::with_capacity(4096),
            decoder: ReplyDecoder::new(),
            buf: vec![0; 64 * 1024],
            commands,
        })
    }

    /// Sends one command and waits for its reply.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> IoResult<Reply> {
        self.out.clear();
        encode_command(args, &mut self.out);
        self.stream.write_all(&self.out)?;
        loop {
            match self.decoder.next_reply() {
                Ok(Some(reply)) => return Ok(reply),
                Ok(None) => {}
                Err(e) => return Err(io_error(format!("bad reply: {e}"))),
            }
            // Each read either returns bytes or fails (timeout or closed connection), so
            // this loop ends.
            let n = self.stream.read(&mut self.buf)?;
            if n == 0 {
                return Err(io_error("server closed the connection".into()));
            }
            self.decoder.feed(&self.buf[..n]);
        }
    }

    /// `hash(key)`: the key's score in `_indices`.
    pub fn index_score(key: &[u8]) -> i32 {
        java_string_hash(key)
    }

    /// YCSB `insert`: the record's fields, then its index entry.
    pub fn insert(&mut self, key: &[u8], values: &[(Vec<u8>, Vec<u8>)]) -> IoResult<Status> {
        if self.hset(key, values)? != Status::Ok {
            return Ok(Status::Error);
        }
        let score = Self::index_score(key).to_string();
        match self.call(&[b"ZADD", INDEX_KEY, score.as_bytes(), key])? {
            Reply::Integer(_) => Ok(Status::Ok),
            _ => Ok(Status::Error),
        }
    }

    /// YCSB `update`: writes the given fields.
    pub fn update(&mut self, key: &[u8], values: &[(Vec<u8>, Vec<u8>)]) -> IoResult<Status> {
        self.hset(key, values)
    }

    fn hset(&mut self, key: &[u8], values: &[(Vec<u8>, Vec<u8>)]) -> IoResult<Status> {
        let name: &[u8] = match self.commands {
            Commands::Ycsb => b"HMSET",
            Commands::Compat => b"HSET",
        };
        let mut args: Vec<&[u8]> = Vec::with_capacity(2 + 2 * values.len());
        args.push(name);
        args.push(key);
        for (field, value) in values {
            args.push(field);
            args.push(value);
        }
        Ok(match (self.commands, self.call(&args)?) {
            (Commands::Ycsb, Reply::Simple(s)) if &s[..] == b"OK" => Status::Ok,
            (Commands::Compat, Reply::Integer(_)) => Status::Ok,
            _ => Status::Error,
        })
    }

    /// YCSB `read` with all fields (`readallfields=true`): HGETALL. An empty record is an
    /// error, as in the binding.
    pub fn read(&mut self, key: &[u8], record: &mut Record) -> IoResult<Status> {
        self.read_fields(key, None, record)
    }

    /// YCSB `read`: the whole record (`fields` `None`: HGETALL) or the given fields (HMGET,
    /// fields the record lacks left out). An empty result is an error, as in the binding.
    pub fn read_fields(
        &mut self,
        key: &[u8],
        fields: Option<&[Vec<u8>]>,
        record: &mut Record,
    ) -> IoResult<Status> {
        record.clear();
        if let Some(fields) = fields {
            let mut args: Vec<&[u8]> = Vec::with_capacity(2 + fields.len());
            args.push(b"HMGET");
            args.push(key);
            args.extend(fields.iter().map(Vec::as_slice));
            let Reply::Array(values) = self.call(&args)? else {
                return Ok(Status::Error);
            };
            for (field, value) in fields.iter().zip(values) {
                if let Reply::Bulk(value) = value {
                    record.push((Bytes::copy_from_slice(field), value));
                }
            }
            return Ok(if record.is_empty() {
                Status::Error
            } else {
                Status::Ok
            });
        }
        let items = match self.call(&[b"HGETALL".as_slice(), key])? {
            Reply::Array(items) => items,
            Reply::Map(pairs) => pairs.into_iter().flat_map(|(f, v)| [f, v]).collect(),
            _ => return Ok(Status::Error),
        };
        let mut it = items.into_iter();
        while let (Some(Reply::Bulk(field)), Some(Reply::Bulk(value))) = (it.next(), it.next()) {
            record.push((field, value));
        }
        Ok(if record.is_empty() {
            Status::Error
        } else {
            Status::Ok
        })
    }

    /// The first `count` keys of `_indices` from `start`'s score on, in score order.
    pub fn scan_keys(&mut self, start: &[u8], count: i64) -> IoResult<Option<Vec<Bytes>>> {
        let score = Self::index_score(start).to_string();
        let count = count.to_string();
        let reply = match self.commands {
            Commands::Ycsb => self.call(&[
                b"ZRANGEBYSCORE",
                INDEX_KEY,
                score.as_bytes(),
                b"+inf",
                b"LIMIT",
                b"0",
                count.as_bytes(),
            ])?,
            Commands::Compat => self.call(&[
                b"ZRANGE",
                INDEX_KEY,
                score.as_bytes(),
                b"+inf",
                b"BYSCORE",
                b"LIMIT",
                b"0",
                count.as_bytes(),
            ])?,
        };
        let Reply::Array(items) = reply else {
            return Ok(None);
        };
        Ok(Some(
            items
                .into_iter()
                .filter_map(|r| match r {
                    Reply::Bulk(b) => Some(b),
                    _ => None,
                })
                .collect(),
        ))
    }

    /// YCSB `scan`: up to `count` records from `start` in index order; each is read with
    /// HGETALL. `keys` receives the keys visited.
    pub fn scan(
        &mut self,
        start: &[u8],
        count: i64,
        keys: &mut Vec<Bytes>,
        records: &mut Vec<Record>,
    ) -> IoResult<Status> {
        keys.clear();
        records.clear();
        let Some(found) = self.scan_keys(start, count)? else {
            return Ok(Status::Error);
        };
        for key in found {
            let mut record = Record::new();
            // The binding ignores each read's status.
            self.read(&key, &mut record)?;
            records.push(record);
            keys.push(key);
        }
        Ok(Status::Ok)
    }

    /// YCSB `delete`: DEL, then ZREM from the index; an error only if both removed nothing.
    pub fn delete(&mut self, key: &[u8]) -> IoResult<Status> {
        let del = self.call(&[b"DEL".as_slice(), key])?;
        let zrem = self.call(&[b"ZREM", INDEX_KEY, key])?;
        Ok(match (del, zrem) {
            (Reply::Integer(0), Reply::Integer(0)) => Status::Error,
            (Reply::Integer(_), Reply::Integer(_)) => Status::Ok,
            _ => Status::Error,
        })
    }
}
