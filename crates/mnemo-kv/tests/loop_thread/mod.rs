//! The event loop on a thread of its own, over a test's fake engine, for the tests of the
//! loop itself (`busy_poll.rs`, `commit_gathering.rs`); and their clients' connections.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use mnemo_kv::server::{Engine, EventLoop, LoopStats, SessionConfig, Stopper};

/// A running loop: where it listens, its counters, and how to stop it.
pub struct LoopThread {
    pub addr: SocketAddr,
    pub stats: Arc<LoopStats>,
    stopper: Stopper,
    thread: thread::JoinHandle<std::io::Result<()>>,
}

impl LoopThread {
    /// A loop on a free loopback port, set up by `configure`, serving `engine`.
    pub fn start<E: Engine + Send + 'static>(
        mut engine: E,
        configure: impl FnOnce(&mut EventLoop),
    ) -> LoopThread {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let (mut event_loop, stopper) =
            EventLoop::new(listener, SessionConfig::default()).expect("loop");
        configure(&mut event_loop);
        let addr = event_loop.local_addr();
        let stats = event_loop.stats();
        let thread = thread::spawn(move || event_loop.run(&mut engine));
        LoopThread {
            addr,
            stats,
            stopper,
            thread,
        }
    }

    /// Stops the loop and waits for its thread, which must have ended without an error.
    pub fn stop(self) {
        self.stopper.stop().expect("stop");
        self.thread.join().expect("loop thread").expect("loop");
    }
}

/// A client connection with a 20 s read timeout and no Nagle delay.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    stream
}
