//! A fake engine for the server loop under deferred acknowledgements (`Engine::defer_acks`):
//! its durable mark is moved by the test (`deferred_acks.rs`, `deferred_acks_mutant.rs`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mnemo_kv::server::{Effect, Engine, Request, Server, SessionConfig};
use mnemo_resp::command::Flags;
use mnemo_resp::{CommandId, Encoder};

/// What the test controls: the mark appended so far (one per committed batch), the durable
/// mark, a failure, and the loop's notifier.
#[derive(Default)]
pub struct Storage {
    pub appended: AtomicU64,
    durable: AtomicU64,
    failed: Mutex<Option<String>>,
    notify: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

impl Storage {
    pub fn make_durable(&self, mark: u64) {
        self.durable.store(mark, Ordering::SeqCst);
        if let Some(notify) = self.notify.lock().unwrap().as_ref() {
            notify();
        }
    }

    pub fn fail(&self) {
        *self.failed.lock().unwrap() = Some("simulated fdatasync failure".into());
        if let Some(notify) = self.notify.lock().unwrap().as_ref() {
            notify();
        }
    }
}

struct Fake {
    storage: Arc<Storage>,
    value: Vec<u8>,
}

impl Engine for Fake {
    type Error = String;

    fn begin(&mut self) {}

    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
        let args = request.command.args();
        match request.spec.id {
            CommandId::Set => {
                self.value = args[2].to_vec();
                reply.simple(b"OK");
            }
            CommandId::Get => reply.bulk(&self.value),
            _ => reply.simple(b"OK"),
        }
        Effect {
            wrote: request.spec.flags.contains(Flags::WRITE),
            ..Effect::default()
        }
    }

    fn commit(&mut self) -> Result<(), String> {
        self.storage.appended.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn finish_read_only(&mut self) {}

    fn defer_acks(&mut self, notify: Arc<dyn Fn() + Send + Sync>) -> bool {
        *self.storage.notify.lock().unwrap() = Some(notify);
        true
    }

    fn ack_marks(&self) -> Option<Result<(u64, u64), String>> {
        if let Some(why) = self.storage.failed.lock().unwrap().clone() {
            return Some(Err(why));
        }
        Some(Ok((
            self.storage.appended.load(Ordering::SeqCst),
            self.storage.durable.load(Ordering::SeqCst),
        )))
    }
}

pub fn start() -> (Server, Arc<Storage>) {
    let storage = Arc::new(Storage::default());
    let engine = Fake {
        storage: Arc::clone(&storage),
        value: Vec::new(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = Server::start(listener, engine, SessionConfig::default()).unwrap();
    (server, storage)
}

pub fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.local_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    stream
}

/// Whatever arrives within the read timeout (empty: nothing).
pub fn read_some(stream: &mut TcpStream) -> Vec<u8> {
    let mut buf = [0u8; 4096];
    match stream.read(&mut buf) {
        Ok(n) => buf[..n].to_vec(),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Vec::new()
        }
        Err(e) => panic!("read: {e}"),
    }
}

/// Wait until the fake storage has seen `n` commits.
pub fn committed(storage: &Storage, n: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while storage.appended.load(Ordering::SeqCst) < n {
        assert!(
            std::time::Instant::now() < deadline,
            "the batch never committed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The rule the loop keeps under deferred acknowledgements, checked on a running server: no
/// reply (a write's, or a read's of a write not yet durable) before the storage made its
/// batch durable, and batches released in order. `Err` says which part broke.
pub fn check_replies_wait(server: &Server, storage: &Storage) -> Result<(), String> {
    let expect = |what: &str, got: Vec<u8>, want: &[u8]| -> Result<(), String> {
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "{what}: got {:?}, expected {:?}",
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(want)
            ))
        }
    };
    let mut writer = connect(server);
    let mut reader = connect(server);
    let base = storage.appended.load(Ordering::SeqCst);
    writer
        .write_all(b"SET k v1\r\n")
        .map_err(|e| e.to_string())?;
    committed(storage, base + 1);
    expect(
        "a write acknowledged before durable",
        read_some(&mut writer),
        b"",
    )?;
    reader.write_all(b"GET k\r\n").map_err(|e| e.to_string())?;
    expect(
        "a read answered before the write it saw was durable",
        read_some(&mut reader),
        b"",
    )?;
    storage.make_durable(base + 1);
    expect("the write once durable", read_some(&mut writer), b"+OK\r\n")?;
    expect(
        "the read once durable",
        read_some(&mut reader),
        b"$2\r\nv1\r\n",
    )?;
    // Nothing pending: a read-only batch answers at once.
    reader.write_all(b"GET k\r\n").map_err(|e| e.to_string())?;
    expect(
        "a read with nothing pending",
        read_some(&mut reader),
        b"$2\r\nv1\r\n",
    )?;
    // In order: the later batch made durable first still waits for the earlier one... and
    // the earlier one's durability releases only it.
    writer
        .write_all(b"SET k v2\r\n")
        .map_err(|e| e.to_string())?;
    committed(storage, base + 2);
    writer
        .write_all(b"SET k v3\r\n")
        .map_err(|e| e.to_string())?;
    committed(storage, base + 3);
    expect("two writes not yet durable", read_some(&mut writer), b"")?;
    storage.make_durable(base + 2);
    expect("only the first of two", read_some(&mut writer), b"+OK\r\n")?;
    storage.make_durable(base + 3);
    expect("the second", read_some(&mut writer), b"+OK\r\n")?;
    Ok(())
}
