//! The I/O around sessions and batches: one network thread (an epoll loop over every
//! connection) and one executor thread (batches, one transaction and one sync point each).
//!
//! ```text
//!  sockets ─▶ network thread: read ─▶ Session ─▶ Request ──queue──▶ executor: collect_batch
//!  sockets ◀─ network thread: write ◀─ Session ◀─ Completion ◀─waker── run_batch (commit first)
//! ```
//!
//! Skeleton limits, to lift when the engine lands: the request queue is unbounded (no
//! backpressure yet), a failed commit closes the batch's connections without a reply (the
//! client cannot know whether its write landed, which is the truth), and there is one
//! network thread.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use mnemo_resp::bytes::BytesMut;

use super::batch::{collect_batch, run_batch, Completion, Engine};
use super::limits::{BATCH_REQUESTS_MAX, READ_CHUNK_BYTES};
use super::session::{Request, Session, SessionConfig};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Connection tokens start here; a connection's token is also its session (CLIENT) id.
const FIRST_CONNECTION: usize = 2;

/// What the executor sends back: a batch's replies, or the sessions of a batch that failed.
enum Done {
    Replies(Vec<Completion>),
    Failed(Vec<u64>),
}

/// A running server; dropping it does not stop it, [`Server::shutdown`] does.
#[derive(Debug)]
pub struct Server {
    local_addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    network: Option<JoinHandle<io::Result<()>>>,
    executor: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `listener` with `engine` on two new threads.
    pub fn start<E>(
        listener: std::net::TcpListener,
        engine: E,
        config: SessionConfig,
    ) -> io::Result<Server>
    where
        E: Engine + Send + 'static,
    {
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (request_tx, request_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();

        let executor_waker = Arc::clone(&waker);
        let executor = std::thread::Builder::new()
            .name("mnemo-executor".into())
            .spawn(move || execute(engine, &request_rx, &done_tx, &executor_waker))?;
        let network_stop = Arc::clone(&stop);
        let network = std::thread::Builder::new()
            .name("mnemo-network".into())
            .spawn(move || {
                let mut network = Network {
                    poll,
                    listener,
                    connections: HashMap::new(),
                    next_token: FIRST_CONNECTION,
                    config,
                    requests: request_tx,
                    done: done_rx,
                };
                network.run(&network_stop)
            })?;
        Ok(Server {
            local_addr,
            stop,
            waker,
            network: Some(network),
            executor: Some(executor),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection, lets the executor finish its batch, and waits
    /// for both threads.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        self.waker.wake()?;
        let network = self.network.take().map(JoinHandle::join);
        let executor = self.executor.take().map(JoinHandle::join);
        if matches!(executor, Some(Err(_))) {
            return Err(io::Error::other("executor thread panicked"));
        }
        match network {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("network thread panicked")),
            None => Ok(()),
        }
    }
}

/// The executor thread: batches until the network thread hangs up.
fn execute<E: Engine>(
    mut engine: E,
    requests: &Receiver<Request>,
    done: &Sender<Done>,
    waker: &Waker,
) {
    while let Some(batch) = collect_batch(requests, BATCH_REQUESTS_MAX) {
        let outcome = match run_batch(&mut engine, &batch) {
            Ok(completions) => Done::Replies(completions),
            Err(_) => Done::Failed(batch.iter().map(|request| request.session).collect()),
        };
        if done.send(outcome).is_err() || waker.wake().is_err() {
            return;
        }
    }
}

struct Connection {
    stream: TcpStream,
    session: Session,
    unsent: BytesMut,
}

struct Network {
    poll: Poll,
    listener: TcpListener,
    connections: HashMap<Token, Connection>,
    next_token: usize,
    config: SessionConfig,
    requests: Sender<Request>,
    done: Receiver<Done>,
}

impl Network {
    fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        self.poll
            .registry()
            .register(&mut self.listener, LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(1024);
        while !stop.load(Ordering::SeqCst) {
            if let Err(error) = self.poll.poll(&mut events, None) {
                if error.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            for event in &events {
                match event.token() {
                    LISTENER => self.accept()?,
                    WAKER => self.deliver(),
                    token => self.service(token),
                }
            }
        }
        Ok(())
    }

    fn accept(&mut self) -> io::Result<()> {
        loop {
            let (mut stream, _) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(error) if error.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                // A connection that failed before we took it (reset): not the listener's fault.
                Err(_) => continue,
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
        while let Some(request) = connection.session.poll_request() {
            if self.requests.send(request).is_err() {
                open = false;
                break;
            }
        }
        if !open || !flush(connection) {
            self.close(token);
        }
    }

    /// Hands the executor's replies to their sessions and writes them.
    fn deliver(&mut self) {
        while let Ok(done) = self.done.try_recv() {
            match done {
                Done::Replies(completions) => {
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
                Done::Failed(sessions) => {
                    for session in sessions {
                        self.close(session_token(session));
                    }
                }
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
