//! Helpers shared by the replication tests (each test file uses some of them).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mnemo_repl::{Mirror, MirrorOptions, MirrorStore, Secret};

/// The secret both ends of the tests' links share.
pub const SECRET: &[u8] = b"test secret of enough bytes";

/// A scratch directory on /dev/shm.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mnemo-repl-")
        .tempdir_in("/dev/shm")
        .expect("scratch dir on /dev/shm")
}

/// A mirror on an ephemeral loopback port, served by a background thread.
pub fn start_mirror(dir: &Path) -> (SocketAddr, Arc<Mutex<MirrorStore>>) {
    let store = MirrorStore::open(dir, MirrorOptions::default()).expect("mirror store");
    let mirror = Mirror::new(store, Secret::new(SECRET).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let store = mirror.store();
    std::thread::spawn(move || mirror.serve(listener));
    (addr, store)
}

/// A TCP proxy to `upstream` whose links stop moving bytes while `frozen` is set.
pub fn start_proxy(upstream: SocketAddr, frozen: Arc<AtomicBool>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(upstream) else {
                continue;
            };
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server, client),
            ] {
                let frozen = Arc::clone(&frozen);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        while frozen.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        match from.read(&mut buf) {
                            Ok(0) | Err(_) => {
                                let _ = to.shutdown(std::net::Shutdown::Both);
                                return;
                            }
                            Ok(n) => {
                                // Bytes read just before a freeze are held back with it.
                                while frozen.load(Ordering::Relaxed) {
                                    std::thread::sleep(Duration::from_millis(5));
                                }
                                if to.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        }
    });
    addr
}
