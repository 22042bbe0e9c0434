//! The I/O around sessions and batches: one thread runs an epoll loop over every connection
//! and executes, like Redis, the commands itself.
//!
//! ```text
//!  poll ─▶ read every ready socket ─▶ Sessions ─▶ Requests ─▶ run_batch (one transaction,
//!  poll ◀─ write every released reply ◀─ Sessions ◀─ Completions ◀─ one sync point, then replies)
//! ```
//!
//! Everything read in one wake-up forms one batch: with one client a batch is one command and
//! costs no extra latency; with fifty, a batch holds what they sent while the previous sync
//! point ran. No request crosses a thread: a first version handed requests to a separate
//! executor thread and reached only 0.3-0.4x Redis's single-client throughput, the two thread
//! wake-ups per round trip dominating (`examples/connection_ceiling.rs` measures this layer
//! against Redis in the same run).
//!
//! Skeleton limits, to lift when the engine lands: no per-connection backpressure yet, and a
//! failed commit closes the batch's connections without a reply (the client cannot know
//! whether its write landed, which is the truth).

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use mnemo_resp::bytes::BytesMut;

use super::batch::{execute_batch, run_batch, Completion, Engine};
use super::limits::{BATCH_REQUESTS_MAX, READ_CHUNK_BYTES};
use super::mutant::{self, Mutant};
use super::session::{Request, Session, SessionConfig};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Connection tokens start here; a connection's token is also its session (CLIENT) id.
const FIRST_CONNECTION: usize = 2;

/// Stops an [`EventLoop`] from any thread (a signal handler's thread, a test).
#[derive(Clone, Debug)]
pub struct Stopper {
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl Stopper {
    /// Asks the loop to return after the batch in progress; its connections are closed.
    pub fn stop(&self) -> io::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        self.waker.wake()
    }
}

/// The server loop, run on the caller's thread by [`EventLoop::run`]: the engine is only
/// borrowed, so it may borrow the pool or heap it lives in.
#[derive(Debug)]
pub struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    local_addr: std::net::SocketAddr,
    connections: HashMap<Token, Connection>,
    next_token: usize,
    config: SessionConfig,
    stop: Arc<AtomicBool>,
    /// Requests read in this wake-up, in arrival order.
    batch: Vec<Request>,
    /// A deliberately broken behaviour (tests of the tests only; see [`mutant`]).
    mutant: Option<Mutant>,
}

/// A server running [`EventLoop`] on a thread of its own; dropping it does not stop it,
/// [`Server::shutdown`] does.
#[derive(Debug)]
pub struct Server {
    local_addr: std::net::SocketAddr,
    stopper: Stopper,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Server {
    /// Serves `listener` with `engine` on a new thread.
    pub fn start<E>(
        listener: std::net::TcpListener,
        mut engine: E,
        config: SessionConfig,
    ) -> io::Result<Server>
    where
        E: Engine + Send + 'static,
    {
        let (event_loop, stopper) = EventLoop::new(listener, config)?;
        let local_addr = event_loop.local_addr();
        let thread = std::thread::Builder::new()
            .name("mnemo-server".into())
            .spawn(move || event_loop.run(&mut engine))?;
        Ok(Server {
            local_addr,
            stopper,
            thread: Some(thread),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection once the batch in progress is done, and waits
    /// for the server thread.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stopper.stop()?;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("server thread panicked")),
            None => Ok(()),
        }
    }
}

#[derive(Debug)]
struct Connection {
    stream: TcpStream,
    session: Session,
    unsent: BytesMut,
}

impl EventLoop {
    /// A loop serving `listener`, and the handle that stops it.
    pub fn new(
        listener: std::net::TcpListener,
        config: SessionConfig,
    ) -> io::Result<(EventLoop, Stopper)> {
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = Stopper {
            stop: Arc::clone(&stop),
            waker,
        };
        let event_loop = EventLoop {
            poll,
            listener,
            local_addr,
            connections: HashMap::new(),
            next_token: FIRST_CONNECTION,
            config,
            stop,
            batch: Vec::new(),
            mutant: mutant::from_env(),
        };
        Ok((event_loop, stopper))
    }

    /// The address the loop listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local_addr
    }

    /// Serves until [`Stopper::stop`]: every wake-up reads all ready connections, runs what
    /// they sent as batches on `engine`, and writes the replies each batch releases.
    pub fn run<E: Engine>(mut self, engine: &mut E) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        while !self.stop.load(Ordering::SeqCst) {
            if let Err(error) = self.poll.poll(&mut events, None) {
                if error.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            for event in &events {
                match event.token() {
                    LISTENER => self.accept()?,
                    WAKER => {}
                    token => self.service(token),
                }
            }
            self.execute(engine);
        }
        Ok(())
    }

    fn accept(&mut self) -> io::Result<()> {
        loop {
            let (mut stream, _) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(error) if error.kind() == ErrorKind::WouldBlock => return Ok(()),
                // Interrupted, or a connection reset before we took it: try the next one.
                Err(error)
                    if matches!(
                        error.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue
                }
                // Out of descriptors or memory: retrying now would spin. Connections still
                // queued are taken at the listener's next event.
                Err(_) => return Ok(()),
            };
            let token = Token(self.next_token);
            self.next_token += 1;
            stream.set_nodelay(true)?;
            self.poll.registry().register(
                &mut stream,
                token,
                Interest::READABLE | Interest::WRITABLE,
            )?;
            let session = Session::new(
                u64::try_from(token.0).unwrap_or(u64::MAX),
                self.config.clone(),
            );
            self.connections.insert(
                token,
                Connection {
                    stream,
                    session,
                    unsent: BytesMut::new(),
                },
            );
        }
    }

    /// Reads what arrived, hands requests to the executor, writes what is ready.
    fn service(&mut self, token: Token) {
        let Some(connection) = self.connections.get_mut(&token) else {
            return;
        };
        let mut chunk = [0u8; READ_CHUNK_BYTES];
        let mut open = true;
        loop {
            match connection.stream.read(&mut chunk) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(read) => connection
                    .session
                    .receive(chunk.get(..read).unwrap_or_default()),
                Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    open = false;
                    break;
                }
            }
        }
        self.batch
            .extend(std::iter::from_fn(|| connection.session.poll_request()));
        if !open || !flush(connection) {
            self.close(token);
        }
    }

    /// Runs what this wake-up read, in batches of at most [`BATCH_REQUESTS_MAX`], and writes
    /// the replies each batch releases after its sync point.
    fn execute<E: Engine>(&mut self, engine: &mut E) {
        let requests = std::mem::take(&mut self.batch);
        for batch in requests.chunks(BATCH_REQUESTS_MAX) {
            if cfg!(feature = "mutants") && self.mutant == Some(Mutant::AckBeforeSync) {
                self.execute_acking_early(engine, batch);
                continue;
            }
            match run_batch(engine, batch) {
                Ok(completions) => self.deliver(completions),
                Err(_) => {
                    for request in batch {
                        self.close(session_token(request.session));
                    }
                }
            }
        }
    }

    /// Hands released replies to their sessions and writes them.
    fn deliver(&mut self, completions: Vec<Completion>) {
        for completion in completions {
            let token = session_token(completion.session);
            let Some(connection) = self.connections.get_mut(&token) else {
                continue;
            };
            connection
                .session
                .complete(&completion.reply, completion.close);
            if !flush(connection) {
                self.close(token);
            }
        }
    }

    /// [`Mutant::AckBeforeSync`]: the broken order this server exists to avoid. Replies leave
    /// first, the commit comes [`mutant::ACK_BEFORE_SYNC_DELAY`] later.
    fn execute_acking_early<E: Engine>(&mut self, engine: &mut E, batch: &[Request]) {
        let (completions, wrote) = execute_batch(engine, batch);
        self.deliver(completions);
        if !wrote {
            engine.finish_read_only();
            return;
        }
        std::thread::sleep(mutant::ACK_BEFORE_SYNC_DELAY);
        if engine.commit().is_err() {
            for request in batch {
                self.close(session_token(request.session));
            }
        }
    }

    fn close(&mut self, token: Token) {
        if let Some(mut connection) = self.connections.remove(&token) {
            let _ = self.poll.registry().deregister(&mut connection.stream);
        }
    }
}

fn session_token(session: u64) -> Token {
    Token(usize::try_from(session).unwrap_or(usize::MAX))
}

/// Writes what the session has released; false if the connection should now be closed.
fn flush(connection: &mut Connection) -> bool {
    let ready = connection.session.take_output();
    connection.unsent.extend_from_slice(&ready);
    while !connection.unsent.is_empty() {
        match connection.stream.write(&connection.unsent) {
            Ok(0) => return false,
            Ok(written) => {
                let _ = connection
                    .unsent
                    .split_to(written.min(connection.unsent.len()));
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => return true,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    !connection.session.should_close()
}
