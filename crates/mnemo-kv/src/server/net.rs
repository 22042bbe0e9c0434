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
//! Backpressure: a connection whose unsent replies reach the output limit
//! ([`super::limits::OUTPUT_BUFFER_BYTES_MAX`]) is not read until the socket has taken them
//! below it, so a client that pipelines without reading its replies stalls itself (its
//! requests wait in its socket), not the server's memory; other connections go on. At most
//! [`super::limits::REQUESTS_PER_CONNECTION_WAKEUP`] requests are taken from one connection
//! per wake-up; a connection with more already received is revisited at once (the poll does
//! not wait), since an edge-triggered poll would not report those bytes again.
//!
//! A failed commit closes the batch's connections without a reply (the client cannot know
//! whether its write landed, which is the truth).

use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use mnemo_resp::bytes::Bytes;
// Connection tokens and session ids are numbers this server hands out, never a client's
// bytes: the fast FxHash needs no protection against chosen keys.
use mnemo_resp::Reply;
use rustc_hash::{FxHashMap, FxHashSet};

use super::acks::{Ack, AckQueue};
use super::batch::{run_batch_hosted, Busy, Completion, Engine, Host};
use super::gather::{Gather, Pace};
use super::limits::{
    BATCH_REQUESTS_MAX, IDLE_POLL_MAX, OUTPUT_BUFFER_BYTES_MAX, READ_CHUNK_BYTES,
    REQUESTS_PER_CONNECTION_WAKEUP,
};
#[cfg(all(feature = "mutants", debug_assertions))]
use super::mutant::{self, Mutant};
use super::session::{Peer, Request, Session, SessionConfig};

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Connection tokens start here; a connection's token is also its session (CLIENT) id.
const FIRST_CONNECTION: usize = 2;
/// The commit gathering's timer (out of the connections' range).
const GATHER_TIMER: Token = Token(usize::MAX);

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

/// What the loop buffers and how often it held a client back, readable from any thread
/// (`mnemo serve` reports them in INFO's clients section).
#[derive(Debug, Default)]
pub struct LoopStats {
    /// Open connections.
    pub connected_clients: AtomicU64,
    /// Reply bytes buffered for all connections now (not yet taken by their sockets).
    pub output_buffer_bytes: AtomicU64,
    /// The most reply bytes one connection has had buffered since start.
    pub output_buffer_peak: AtomicU64,
    /// Times a connection stopped being read because its replies reached the output limit.
    pub output_limit_pauses: AtomicU64,
    /// The output limit in force ([`EventLoop::set_output_buffer_limit`]).
    pub output_buffer_limit: AtomicU64,
    /// Writing batches that waited for the clients just answered before their commit
    /// (`gather.rs`).
    pub commit_gathers: AtomicU64,
    /// Those waits that ran out before every such client had sent.
    pub commit_gather_timeouts: AtomicU64,
    /// The loop's estimate of a commit's wait for its storage, in nanoseconds (0: none yet).
    pub commit_estimate_ns: AtomicU64,
    /// Its estimate of an answered client's time to its next request (0: none yet).
    pub turnaround_estimate_ns: AtomicU64,
    /// Waits the loop would have slept in and polled in first, nothing being ready at the
    /// first look ([`EventLoop::set_busy_poll`]).
    pub busy_polls: AtomicU64,
    /// Those polls that found an event before their window ran out: the loop did not
    /// sleep.
    pub busy_poll_hits: AtomicU64,
}

/// The server loop, run on the caller's thread by [`EventLoop::run`]: the engine is only
/// borrowed, so it may borrow the pool or heap it lives in.
#[derive(Debug)]
pub struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    local_addr: std::net::SocketAddr,
    connections: FxHashMap<Token, Connection>,
    next_token: usize,
    config: SessionConfig,
    stop: Arc<AtomicBool>,
    /// Requests read in this wake-up, in arrival order.
    batch: Vec<Request>,
    /// What a connection's reads land in before its session takes them: made once, since
    /// zeroing 16 KiB on the stack at every wake-up of a connection cost about 770
    /// instructions per pipelined SET (callgrind), more than half of reading and parsing it.
    read_chunk: Box<[u8]>,
    /// Connections closed since the engine last heard of it ([`Engine::disconnected`]).
    closed: Vec<u64>,
    /// Blocking requests waiting for data, in the order they blocked.
    parked: Vec<Request>,
    /// A deliberately broken behaviour (tests of the tests only; see [`super::mutant`]).
    #[cfg(all(feature = "mutants", debug_assertions))]
    mutant: Option<Mutant>,
    /// Connections [`EventLoop::deliver`] completed replies for (kept to reuse its capacity).
    touched: Vec<Token>,
    /// Connections with received requests (or unread socket bytes) left for the next
    /// wake-up: the poll does not wait while there are any.
    again: FxHashSet<Token>,
    /// Connections whose last event said their peer closed (or the socket failed): read to
    /// the end, even after a short read.
    hung_up: FxHashSet<Token>,
    /// Unsent reply bytes at which a connection stops being read.
    output_limit: usize,
    /// Reply bytes buffered for all connections.
    output_total: usize,
    stats: Arc<LoopStats>,
    /// CLIENT PAUSE in force.
    pause: Option<Pause>,
    /// Requests held by CLIENT PAUSE, in arrival order, and the connections they came from
    /// (a connection with a held request has all its later requests held too).
    held: Vec<Request>,
    held_sessions: FxHashSet<u64>,
    /// Wakes the poll from other threads (the stopper, the storage's syncer).
    waker: Arc<Waker>,
    /// Ask the engine for deferred acknowledgements at start ([`EventLoop::set_defer_acks`]).
    defer_acks: bool,
    /// Batches whose commit returned before it was durable ([`Engine::defer_acks`]), oldest
    /// first, each with the append mark it waits for: their replies are released, in this
    /// order, once the storage says the mark is durable. Not holding (the engine did not
    /// grant deferred acknowledgements): the marks are never asked for.
    unacked: AckQueue<(Vec<Request>, Vec<Completion>)>,
    /// Commit gathering ([`super::gather`]): its measurements, the connections the last
    /// delivery answered that have not sent since, and the timer that ends a wait.
    gather: Gather,
    awaiting: FxHashSet<Token>,
    /// In a wait (arrivals then are timed: the loop was polling for them).
    gathering: bool,
    gather_timer: rustix::fd::OwnedFd,
    /// How long a wait polls for events before it sleeps (zero: it sleeps at once).
    busy_poll: Duration,
}

/// A CLIENT PAUSE: until when (Unix ms), and whether every command waits (ALL) or only
/// those that write (WRITE).
#[derive(Clone, Copy, Debug)]
struct Pause {
    until: i64,
    all: bool,
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
    /// This connection's unsent reply bytes as last counted in the loop's total.
    counted: usize,
    /// Replies were completed for it in the batch being delivered: write them once, after
    /// the batch's last reply.
    touched: bool,
    /// Not read because its replies reached the output limit.
    paused: bool,
    /// How quickly it sends its next request after an answer (commit gathering).
    pace: Pace,
}

impl Connection {
    /// Reply bytes buffered for this connection.
    fn buffered(&self) -> usize {
        self.session.output_len()
    }
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
        let gather_timer = rustix::time::timerfd_create(
            rustix::time::TimerfdClockId::Monotonic,
            rustix::time::TimerfdFlags::CLOEXEC | rustix::time::TimerfdFlags::NONBLOCK,
        )?;
        poll.registry().register(
            &mut SourceFd(&gather_timer.as_raw_fd()),
            GATHER_TIMER,
            Interest::READABLE,
        )?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = Stopper {
            stop: Arc::clone(&stop),
            waker: Arc::clone(&waker),
        };
        let event_loop = EventLoop {
            poll,
            listener,
            local_addr,
            connections: FxHashMap::default(),
            next_token: FIRST_CONNECTION,
            config,
            stop,
            batch: Vec::new(),
            read_chunk: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
            closed: Vec::new(),
            parked: Vec::new(),
            #[cfg(all(feature = "mutants", debug_assertions))]
            mutant: mutant::from_env(),
            again: FxHashSet::default(),
            hung_up: FxHashSet::default(),
            touched: Vec::new(),
            output_limit: OUTPUT_BUFFER_BYTES_MAX,
            output_total: 0,
            stats: Arc::new(LoopStats::default()),
            pause: None,
            held: Vec::new(),
            held_sessions: FxHashSet::default(),
            waker,
            defer_acks: true,
            unacked: AckQueue::new(false),
            gather: Gather::default(),
            awaiting: FxHashSet::default(),
            gathering: false,
            gather_timer,
            busy_poll: Duration::ZERO,
        };
        event_loop
            .stats
            .output_buffer_limit
            .store(OUTPUT_BUFFER_BYTES_MAX as u64, Ordering::Relaxed);
        Ok((event_loop, stopper))
    }

    /// Whether a writing batch may wait for the clients just answered before its commit
    /// (default: no; when on, it waits only where commits wait for storage longer than the
    /// clients take to come back: `gather.rs`).
    pub fn set_commit_gathering(&mut self, on: bool) {
        self.gather.set_enabled(on);
    }

    /// How long the loop polls for events (`epoll_wait` with a zero timeout, again and again)
    /// before it sleeps in `epoll_wait` (default: zero, it sleeps at once). A request that
    /// arrives within the window finds the loop running: the client's send does not have
    /// to wake it, and its CPU has not halted. Under steady load from many clients this is
    /// time the loop would otherwise lose to waking up; with no load it costs one window
    /// per [`IDLE_POLL_MAX`]. `mnemo serve` sets it (`--busy-poll-us`).
    pub fn set_busy_poll(&mut self, window: Duration) {
        self.busy_poll = window;
    }

    /// Whether to let the engine acknowledge commits before they are durable and hold the
    /// replies here until they are (default: yes, where the engine can: a write-ahead pool
    /// mapped copy-on-write, whose next batch then runs while the previous one's `fdatasync`
    /// is in flight; `mnemo serve` asks only with `MNEMO_DEFER_ACKS=1`).
    pub fn set_defer_acks(&mut self, on: bool) {
        self.defer_acks = on;
    }

    /// The address the loop listens on.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local_addr
    }

    /// Changes the unsent reply bytes at which a connection stops being read (default
    /// [`OUTPUT_BUFFER_BYTES_MAX`]; at least 1).
    pub fn set_output_buffer_limit(&mut self, bytes: usize) {
        self.output_limit = bytes.max(1);
        self.stats
            .output_buffer_limit
            .store(self.output_limit as u64, Ordering::Relaxed);
    }

    /// The loop's counters, shared: they stay readable while and after it runs.
    pub fn stats(&self) -> Arc<LoopStats> {
        Arc::clone(&self.stats)
    }

    /// Serves until [`Stopper::stop`]: every wake-up reads all ready connections, runs what
    /// they sent as batches on `engine`, and writes the replies each batch releases.
    pub fn run<E: Engine>(mut self, engine: &mut E) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        #[cfg(all(feature = "mutants", debug_assertions))]
        let mutated = self.mutant.is_some_and(|m| m != Mutant::ReleaseUnacked);
        #[cfg(not(all(feature = "mutants", debug_assertions)))]
        let mutated = false;
        if self.defer_acks && !mutated {
            let waker = Arc::clone(&self.waker);
            let holding = engine.defer_acks(Arc::new(move || {
                let _ = waker.wake();
            }));
            tracing::debug!(
                deferred = holding,
                "acknowledgements held until durable in the loop"
            );
            // The broken loop: granted, but replies leave as the commit returns.
            #[cfg(all(feature = "mutants", debug_assertions))]
            let holding = holding && self.mutant != Some(Mutant::ReleaseUnacked);
            self.unacked = AckQueue::new(holding);
        }
        while !self.stop.load(Ordering::SeqCst) {
            // Connections with work left from the last wake-up: look for events, do not wait.
            // Parked blocking requests: wake up at the first deadline.
            let first_deadline = self.parked.iter().filter_map(|r| r.deadline).min();
            // Never longer than IDLE_POLL_MAX: the stop flag is read at least that often,
            // whatever became of the waker's event.
            // Requests held by a CLIENT PAUSE: run them as soon as it ends.
            let pause_end = match (self.held.is_empty(), self.pause) {
                (true, _) => None,
                (false, None) => Some(0),
                (false, Some(pause)) => Some(pause.until),
            };
            let first_deadline = match (first_deadline, pause_end) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout = if !self.again.is_empty() {
                Duration::ZERO
            } else {
                first_deadline
                    .filter(|&d| d < i64::MAX)
                    .map_or(IDLE_POLL_MAX, |d| {
                        Duration::from_millis(
                            u64::try_from(d.saturating_sub(unix_ms())).unwrap_or(0),
                        )
                        .min(IDLE_POLL_MAX)
                    })
            };
            // The poll's time comes out of the wait's, so a deadline is not put off.
            let (polled, timeout) = if timeout.is_zero() {
                (false, timeout)
            } else {
                let began = Instant::now();
                let polled = self.busy_poll(&mut events, timeout)?;
                (polled, timeout.saturating_sub(began.elapsed()))
            };
            if !polled {
                if let Err(error) = self.poll.poll(&mut events, Some(timeout)) {
                    if error.kind() == ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(error);
                }
            }
            let mut ready: Vec<Token> = self.again.drain().collect();
            for event in &events {
                match event.token() {
                    LISTENER => self.accept()?,
                    WAKER | GATHER_TIMER => {}
                    token => {
                        self.note_hang_up(event);
                        ready.push(token)
                    }
                }
            }
            ready.sort_unstable();
            ready.dedup();
            self.release(engine);
            for token in ready {
                self.service(token);
            }
            self.gather_writers(&mut events)?;
            self.deliver_messages();
            self.execute(engine);
            // What scripts of this batch published.
            self.deliver_messages();
            self.release(engine);
            self.publish_stats();
        }
        self.release_before_exit(engine);
        Ok(())
    }

    /// Polls for events without sleeping, for at most the busy-poll window or `limit`,
    /// whichever is shorter: whether it found some (they are in `events`). A zero window
    /// polls not at all. Events there at the first look are found, but not counted as a
    /// poll: the loop would not have slept for them.
    fn busy_poll(&mut self, events: &mut Events, limit: Duration) -> io::Result<bool> {
        if self.busy_poll.is_zero() {
            return Ok(false);
        }
        let until = Instant::now() + self.busy_poll.min(limit);
        let mut first = true;
        loop {
            match self.poll.poll(events, Some(Duration::ZERO)) {
                Ok(()) => {}
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
            if !events.is_empty() {
                if !first {
                    self.stats.busy_poll_hits.fetch_add(1, Ordering::Relaxed);
                }
                return Ok(true);
            }
            if first {
                self.stats.busy_polls.fetch_add(1, Ordering::Relaxed);
                first = false;
            }
            if Instant::now() >= until {
                return Ok(false);
            }
            // A client on this CPU (or any other task waiting for it) runs first: the
            // poll spends only time nobody else wants.
            std::thread::yield_now();
        }
    }

    /// Before a writing batch's commit: waits for the connections the last delivery answered
    /// (until they have all sent, or until [`Gather::deadline`]), reading what they send
    /// into the batch. Nothing to wait for, a read-only batch, replies held for a deferred
    /// commit, or quick commits: no wait.
    fn gather_writers(&mut self, events: &mut Events) -> io::Result<()> {
        if self.awaiting.is_empty() || self.unacked.holding() || !self.batch.iter().any(writes) {
            return Ok(());
        }
        let Some(until) = self.gather.deadline(Instant::now()) else {
            return Ok(());
        };
        self.stats.commit_gathers.fetch_add(1, Ordering::Relaxed);
        arm(
            &self.gather_timer,
            until.saturating_duration_since(Instant::now()),
        )?;
        let mut ran_out = false;
        self.gathering = true;
        while !self.awaiting.is_empty() && !ran_out {
            if let Err(error) = self.poll.poll(events, Some(IDLE_POLL_MAX)) {
                if error.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            let mut ready = Vec::new();
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept()?,
                    WAKER => {}
                    GATHER_TIMER => ran_out = true,
                    token => {
                        self.note_hang_up(event);
                        ready.push(token)
                    }
                }
            }
            for token in ready {
                self.service(token);
            }
            ran_out |= Instant::now() >= until;
        }
        self.gathering = false;
        arm(&self.gather_timer, Duration::ZERO)?;
        if ran_out && !self.awaiting.is_empty() {
            // Those still silent are slow until they are quick again.
            for token in &self.awaiting {
                if let Some(connection) = self.connections.get_mut(token) {
                    Gather::missed(&mut connection.pace);
                }
            }
            self.stats
                .commit_gather_timeouts
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Hands over the replies of every held batch whose commit is now durable, oldest first;
    /// if the storage failed, closes their connections instead (the client cannot know
    /// whether its write landed).
    fn release<E: Engine>(&mut self, engine: &E) {
        if !self.unacked.holding() || self.unacked.is_empty() {
            return;
        }
        let marks = engine.ack_marks();
        if let Some(Err(why)) = &marks {
            tracing::error!(
                "the write-ahead file failed, closing the connections waiting for it: {why}"
            );
        }
        let mut acks = Vec::new();
        self.unacked.release(marks, &mut acks);
        for ack in acks {
            self.acknowledge(ack);
        }
    }

    /// Hands a released batch's replies over, or closes the connections of a lost one.
    fn acknowledge(&mut self, ack: Ack<(Vec<Request>, Vec<Completion>)>) {
        match ack {
            Ack::Release((batch, completions)) => self.deliver(batch, completions),
            Ack::Lost((batch, _)) => {
                for request in &batch {
                    self.close(session_token(request.session));
                }
            }
        }
    }

    /// At the end of the loop: wait (a few seconds at most) for the held batches to become
    /// durable and hand their replies over, so a stopping server answers what it committed.
    fn release_before_exit<E: Engine>(&mut self, engine: &E) {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !self.unacked.is_empty() && std::time::Instant::now() < until {
            self.release(engine);
            if !self.unacked.is_empty() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
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
            let mut session = Session::new(
                u64::try_from(token.0).unwrap_or(u64::MAX),
                self.config.clone(),
            );
            if let (Ok(addr), Ok(laddr)) = (stream.peer_addr(), stream.local_addr()) {
                use std::os::fd::AsRawFd;
                session.set_peer(Peer {
                    addr,
                    laddr,
                    fd: i64::from(stream.as_raw_fd()),
                });
            }
            self.connections.insert(
                token,
                Connection {
                    stream,
                    session,
                    counted: 0,
                    touched: false,
                    paused: false,
                    pace: Pace::default(),
                },
            );
        }
    }

    /// Remembers a connection whose event says its peer closed or its socket failed.
    fn note_hang_up(&mut self, event: &mio::event::Event) {
        if event.is_read_closed() || event.is_error() {
            self.hung_up.insert(event.token());
        }
    }

    /// Writes what is waiting, then (unless the connection's replies are at the output
    /// limit) takes its received requests for this wake-up's batch, reading the socket as
    /// long as it has no complete request left, up to
    /// [`REQUESTS_PER_CONNECTION_WAKEUP`] requests.
    ///
    /// A read shorter than the buffer emptied the socket (epoll(7): a stream's short read
    /// exhausts it), so the loop stops there rather than read again for `EAGAIN`: one
    /// `recvfrom` per request instead of two for a client that waits for each reply, as
    /// Redis reads. Data arriving later raises a new edge. A peer's close seen in the event
    /// (`hung_up`) is still read to the end, so the connection closes in this wake-up.
    fn service(&mut self, token: Token) {
        // (Most wake-ups have no hang-up: no hashing then.)
        let to_end = !self.hung_up.is_empty() && self.hung_up.remove(&token);
        let Some(connection) = self.connections.get_mut(&token) else {
            return;
        };
        let mut open = flush(connection, &mut self.output_total, &self.stats);
        let chunk = &mut self.read_chunk[..];
        let mut taken = 0;
        let mut more = false;
        let mut drained = false;
        let was_paused = connection.paused;
        connection.paused = false;
        while open {
            if connection.buffered() >= self.output_limit {
                connection.paused = true;
                break;
            }
            if taken >= REQUESTS_PER_CONNECTION_WAKEUP {
                more = true;
                break;
            }
            if let Some(request) = connection.session.poll_request() {
                self.batch.push(request);
                taken += 1;
                if taken == 1 && self.gather.enabled() {
                    let waiting = self.awaiting.remove(&token) && self.gathering;
                    self.gather
                        .arrived(&mut connection.pace, Instant::now(), waiting);
                }
                continue;
            }
            if drained {
                break;
            }
            match connection.stream.read(chunk) {
                Ok(0) => open = false,
                Ok(read) => {
                    drained = read < chunk.len() && !to_end;
                    connection
                        .session
                        .receive(chunk.get(..read).unwrap_or_default())
                }
                Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(_) => open = false,
            }
        }
        if connection.paused && !was_paused {
            self.stats
                .output_limit_pauses
                .fetch_add(1, Ordering::Relaxed);
        }
        if open {
            open = flush(connection, &mut self.output_total, &self.stats);
        }
        if !open {
            self.close(token);
            return;
        }
        // Paused with the socket already drained below the limit (it took everything): no
        // writable event will come, so come back at the next wake-up.
        if more || (connection.paused && connection.buffered() < self.output_limit) {
            self.again.insert(token);
        }
    }

    /// Runs what this wake-up read, in batches of at most [`BATCH_REQUESTS_MAX`], and writes
    /// the replies each batch releases after its sync point. Then, if a batch wrote or a
    /// parked request's deadline has passed, runs the parked blocking requests again (in the
    /// order they blocked): served ones are answered, the others parked again.
    fn execute<E: Engine>(&mut self, engine: &mut E) {
        for session in self.closed.drain(..) {
            engine.disconnected(session);
            self.parked.retain(|request| request.session != session);
            self.held.retain(|request| request.session != session);
            self.held_sessions.remove(&session);
        }
        let taken = std::mem::take(&mut self.batch);
        let requests = self.apply_pause(taken);
        let wrote = requests
            .iter()
            .any(|r| r.spec.flags.contains(mnemo_resp::command::Flags::WRITE));
        self.run_batches(engine, requests);
        let now = unix_ms();
        let due = self
            .parked
            .iter()
            .any(|r| r.deadline.is_some_and(|d| d <= now));
        if !self.parked.is_empty() && (wrote || due) {
            let parked = std::mem::take(&mut self.parked);
            self.run_batches(engine, parked);
        }
    }

    /// CLIENT PAUSE: holds the requests it covers (all, or those that write), and every later
    /// request of a connection with a held request; once it ends (deadline, CLIENT
    /// UNPAUSE), the held requests run first, in their order. Returns what runs now.
    fn apply_pause(&mut self, requests: Vec<Request>) -> Vec<Request> {
        if self.pause.is_some_and(|p| unix_ms() >= p.until) {
            self.pause = None;
        }
        let Some(pause) = self.pause else {
            if self.held.is_empty() {
                return requests;
            }
            self.held_sessions.clear();
            let mut all = std::mem::take(&mut self.held);
            all.extend(requests);
            return all;
        };
        let mut run = Vec::with_capacity(requests.len());
        for request in requests {
            let id = request.spec.id;
            let control = matches!(
                id,
                mnemo_resp::CommandId::ClientPause | mnemo_resp::CommandId::ClientUnpause
            );
            let writes = request
                .spec
                .flags
                .contains(mnemo_resp::command::Flags::WRITE)
                || matches!(
                    id,
                    mnemo_resp::CommandId::Eval | mnemo_resp::CommandId::Evalsha
                );
            if self.held_sessions.contains(&request.session) || (!control && (pause.all || writes))
            {
                self.held_sessions.insert(request.session);
                self.held.push(request);
            } else {
                run.push(request);
            }
        }
        run
    }

    /// CLIENT PAUSE timeout [WRITE | ALL].
    fn client_pause(&mut self, args: &[Bytes]) -> Reply {
        let Some(timeout) = mnemo_resp::parse_i64(&args[2]) else {
            return error_text("ERR timeout is not an integer or out of range".into());
        };
        if timeout < 0 {
            return error_text("ERR timeout is negative".into());
        }
        let all = match args.get(3) {
            None => true,
            Some(mode) if args.len() == 4 && mode.eq_ignore_ascii_case(b"all") => true,
            Some(mode) if args.len() == 4 && mode.eq_ignore_ascii_case(b"write") => false,
            Some(_) if args.len() > 4 => {
                return error_text(format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT \
                     HELP.",
                    String::from_utf8_lossy(&args[1])
                ))
            }
            Some(_) => return error_text("ERR CLIENT PAUSE mode must be WRITE or ALL".into()),
        };
        let until = unix_ms().saturating_add(timeout);
        // A pause in force is only ever lengthened or widened, as in Redis.
        self.pause = Some(match self.pause {
            Some(p) => Pause {
                until: p.until.max(until),
                all: p.all || all,
            },
            None => Pause { until, all },
        });
        Reply::ok()
    }

    /// Runs `requests` in batches; parks those that blocked.
    fn run_batches<E: Engine>(&mut self, engine: &mut E, mut requests: Vec<Request>) {
        while !requests.is_empty() {
            let rest = requests.split_off(requests.len().min(BATCH_REQUESTS_MAX));
            let batch = std::mem::replace(&mut requests, rest);
            #[cfg(all(feature = "mutants", debug_assertions))]
            if self.mutant == Some(Mutant::AckBeforeSync) {
                self.execute_acking_early(engine, batch);
                continue;
            }
            match run_batch_hosted(engine, &batch, self) {
                Ok(completions) => {
                    let marks = self.unacked.holding().then(|| engine.ack_marks()).flatten();
                    if let Some(ack) = self.unacked.committed(marks, (batch, completions)) {
                        self.acknowledge(ack);
                    }
                }
                Err(_) => {
                    for request in &batch {
                        self.close(session_token(request.session));
                    }
                }
            }
        }
    }

    /// Hands released replies to their sessions, then writes each connection's once (one
    /// send per connection per batch, however many of its requests the batch held); parks
    /// the requests that blocked.
    fn deliver(&mut self, batch: Vec<Request>, completions: Vec<Completion>) {
        let mut touched = std::mem::take(&mut self.touched);
        for (mut request, completion) in batch.into_iter().zip(completions) {
            let token = session_token(completion.session);
            if let Some(deadline) = completion.block {
                if self.connections.contains_key(&token) {
                    request.deadline = Some(deadline);
                    self.parked.push(request);
                }
                continue;
            }
            let Some(connection) = self.connections.get_mut(&token) else {
                continue;
            };
            if let Some(db) = completion.select {
                connection.session.selected(db);
            }
            connection
                .session
                .complete(&completion.reply, completion.close);
            if !std::mem::replace(&mut connection.touched, true) {
                touched.push(token);
            }
        }
        self.awaiting.clear();
        // Gathering off: no clock read, nobody awaited.
        let now = self.gather.enabled().then(Instant::now);
        for token in touched.drain(..) {
            let Some(connection) = self.connections.get_mut(&token) else {
                continue;
            };
            connection.touched = false;
            if !flush(connection, &mut self.output_total, &self.stats) {
                self.close(token);
            } else if connection.session.take_repoll()
                || (connection.paused && connection.buffered() < self.output_limit)
            {
                // Requests received but held behind an EXEC that selected a database or a
                // blocking command; or paused, and the socket took the backlog below the
                // limit: read it again at the next wake-up (no event will say so).
                self.again.insert(token);
            } else if let Some(now) = now.filter(|_| !self.again.contains(&token)) {
                // Answered, nothing of it left unread: if it was quick last time, its next
                // request is waited for.
                if self.gather.answered(&mut connection.pace, now) {
                    self.awaiting.insert(token);
                }
            }
        }
        if let Some(now) = now {
            self.gather.delivered(now, !self.awaiting.is_empty());
        }
        self.touched = touched;
    }

    /// [`Mutant::AckBeforeSync`]: the broken order this server exists to avoid. Replies leave
    /// first, the commit comes [`mutant::ACK_BEFORE_SYNC_DELAY`] later.
    #[cfg(all(feature = "mutants", debug_assertions))]
    fn execute_acking_early<E: Engine>(&mut self, engine: &mut E, batch: Vec<Request>) {
        let (completions, wrote) =
            super::batch::execute_batch(engine, &batch, &mut super::batch::NoHost);
        let sessions: Vec<u64> = batch.iter().map(|r| r.session).collect();
        self.deliver(batch, completions);
        if !wrote {
            engine.finish_read_only();
            return;
        }
        std::thread::sleep(mutant::ACK_BEFORE_SYNC_DELAY);
        if engine.commit().is_err() {
            for session in sessions {
                self.close(session_token(session));
            }
        }
    }

    fn close(&mut self, token: Token) {
        if let Some(mut connection) = self.connections.remove(&token) {
            self.closed.push(connection.session.id());
            self.output_total = self.output_total.saturating_sub(connection.counted);
            let _ = self.poll.registry().deregister(&mut connection.stream);
        }
        self.again.remove(&token);
        self.hung_up.remove(&token);
    }

    /// Hands the messages PUBLISH produced to their subscribers' sessions and writes them.
    fn deliver_messages(&mut self) {
        let messages = match self.config.pubsub.lock() {
            Ok(mut registry) => registry.take_outbox(),
            Err(poisoned) => poisoned.into_inner().take_outbox(),
        };
        for (session, message) in messages {
            let token = session_token(session);
            let Some(connection) = self.connections.get_mut(&token) else {
                continue;
            };
            connection.session.deliver_message(&message);
            if !flush(connection, &mut self.output_total, &self.stats) {
                self.close(token);
            }
        }
    }

    /// Publishes the counters read from other threads.
    fn publish_stats(&self) {
        self.stats
            .connected_clients
            .store(self.connections.len() as u64, Ordering::Relaxed);
        self.stats
            .output_buffer_bytes
            .store(self.output_total as u64, Ordering::Relaxed);
        let (commit, turnaround) = self.gather.estimates();
        let ns =
            |d: Option<Duration>| d.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.stats
            .commit_estimate_ns
            .store(ns(commit), Ordering::Relaxed);
        self.stats
            .turnaround_estimate_ns
            .store(ns(turnaround), Ordering::Relaxed);
    }
}

/// Redis's answer to every command but SCRIPT KILL while a script runs too long.
const BUSY: &[u8] =
    b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
const UNKILLABLE: &[u8] = b"-UNKILLABLE Sorry the script already executed write commands against \
    the dataset. You can either wait the script termination or kill the server in a hard way \
    using the SHUTDOWN NOSAVE command.\r\n";

/// CLIENT LIST's and CLIENT KILL's TYPE: which connections it names (mnemo's connections
/// are all normal clients, pub/sub ones included; there are no replicas or masters).
fn type_matches(kind: &[u8], session: &Session) -> Result<bool, Reply> {
    let lower = kind.to_ascii_lowercase();
    match lower.as_slice() {
        b"normal" => Ok(!session.is_subscriber()),
        b"pubsub" => Ok(session.is_subscriber()),
        b"master" | b"replica" | b"slave" => Ok(false),
        _ => Err(error_text(format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(kind)
        ))),
    }
}

fn error_text(text: String) -> Reply {
    Reply::Error(Bytes::from(text))
}

impl EventLoop {
    /// The connections in CLIENT ID order.
    fn sessions_by_id(&self) -> Vec<(Token, &Session)> {
        let mut all: Vec<(Token, &Session)> = self
            .connections
            .iter()
            .map(|(token, c)| (*token, &c.session))
            .collect();
        all.sort_unstable_by_key(|(token, _)| token.0);
        all
    }

    /// CLIENT LIST [TYPE type] [ID id ...].
    fn client_list(&self, args: &[Bytes]) -> Reply {
        let mut kind: Option<&Bytes> = None;
        let mut ids: Option<Vec<u64>> = None;
        match args.get(2) {
            None => {}
            Some(option) if option.eq_ignore_ascii_case(b"type") && args.len() == 4 => {
                kind = args.get(3);
            }
            Some(option) if option.eq_ignore_ascii_case(b"id") && args.len() >= 4 => {
                let mut list = Vec::new();
                for id in &args[3..] {
                    match mnemo_resp::parse_i64(id) {
                        // No connection has an id below 1: such an id matches nothing.
                        Some(n) => list.push(u64::try_from(n).unwrap_or(0)),
                        None => return error_text("ERR Invalid client ID".into()),
                    }
                }
                ids = Some(list);
            }
            Some(_) => return error_text("ERR syntax error".into()),
        }
        let mut text = Vec::new();
        for (_, session) in self.sessions_by_id() {
            if let Some(kind) = kind {
                match type_matches(kind, session) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(reply) => return reply,
                }
            }
            if ids.as_ref().is_some_and(|ids| !ids.contains(&session.id())) {
                continue;
            }
            text.extend_from_slice(&session.client_line());
        }
        Reply::Verbatim {
            format: *b"txt",
            text: Bytes::from(text),
        }
    }

    /// CLIENT KILL ip:port, or CLIENT KILL filter value ...: closes the connections named
    /// (the requesting one after its reply, if it names itself).
    fn client_kill(&mut self, requester: u64, args: &[Bytes]) -> (Reply, bool) {
        if args.len() == 3 {
            // The old form: one address; OK or an error.
            let target = self.sessions_by_id().into_iter().find(|(_, s)| {
                s.peer()
                    .is_some_and(|p| p.addr.to_string().as_bytes() == &args[2][..])
            });
            return match target {
                Some((token, session)) => {
                    let own = session.id() == requester;
                    if !own {
                        self.close(token);
                    }
                    (Reply::ok(), own)
                }
                None => (error_text("ERR No such client".into()), false),
            };
        }
        if args.len() % 2 != 0 {
            return (error_text("ERR syntax error".into()), false);
        }
        let mut id = None;
        let mut kind = None;
        let mut addr = None;
        let mut laddr = None;
        let mut skipme = true;
        for pair in args[2..].chunks(2) {
            let (option, value) = (&pair[0], &pair[1]);
            let lower = option.to_ascii_lowercase();
            match lower.as_slice() {
                b"id" => match mnemo_resp::parse_i64(value).filter(|&n| n > 0) {
                    Some(n) => id = Some(n.unsigned_abs()),
                    None => {
                        return (
                            error_text("ERR client-id should be greater than 0".into()),
                            false,
                        )
                    }
                },
                b"type" => {
                    // Checked now, as Redis does, even with no connection to match.
                    if let Err(reply) = type_matches(value, &Session::new(0, self.config.clone())) {
                        return (reply, false);
                    }
                    kind = Some(value.clone());
                }
                b"addr" => addr = Some(value.clone()),
                b"laddr" => laddr = Some(value.clone()),
                b"user" => {
                    // One user, "default", as in a Redis without ACL rules.
                    if &value[..] != b"default" {
                        return (
                            error_text(format!(
                                "ERR No such user '{}'",
                                String::from_utf8_lossy(value)
                            )),
                            false,
                        );
                    }
                }
                b"skipme" => {
                    if value.eq_ignore_ascii_case(b"yes") {
                        skipme = true;
                    } else if value.eq_ignore_ascii_case(b"no") {
                        skipme = false;
                    } else {
                        return (error_text("ERR syntax error".into()), false);
                    }
                }
                _ => return (error_text("ERR syntax error".into()), false),
            }
        }
        let mut doomed = Vec::new();
        let mut own = false;
        for (token, session) in self.sessions_by_id() {
            let peer = session.peer();
            let matches = id.is_none_or(|id| id == session.id())
                && kind
                    .as_ref()
                    .is_none_or(|k| type_matches(k, session).unwrap_or(false))
                && addr
                    .as_ref()
                    .is_none_or(|a| peer.is_some_and(|p| p.addr.to_string().as_bytes() == &a[..]))
                && laddr
                    .as_ref()
                    .is_none_or(|a| peer.is_some_and(|p| p.laddr.to_string().as_bytes() == &a[..]));
            if !matches {
                continue;
            }
            if session.id() == requester {
                if !skipme {
                    own = true;
                }
            } else {
                doomed.push(token);
            }
        }
        let killed = doomed.len() + usize::from(own);
        for token in doomed {
            self.close(token);
        }
        (
            Reply::Integer(i64::try_from(killed).unwrap_or(i64::MAX)),
            own,
        )
    }
}

impl Host for EventLoop {
    fn times_commits(&self) -> bool {
        self.gather.enabled()
    }

    fn committed(&mut self, waited: Duration) {
        self.gather.committed(waited);
    }

    fn connection_command(&mut self, request: &Request) -> Option<(Reply, bool)> {
        let args = request.command.args();
        match request.spec.id {
            mnemo_resp::CommandId::ClientList => Some((self.client_list(args), false)),
            mnemo_resp::CommandId::ClientKill => Some(self.client_kill(request.session, args)),
            mnemo_resp::CommandId::ClientPause => Some((self.client_pause(args), false)),
            mnemo_resp::CommandId::ClientUnpause => {
                self.pause = None;
                Some((Reply::ok(), false))
            }
            _ => None,
        }
    }

    fn publish(&mut self, channel: &Bytes, message: &Bytes, shard: bool) -> usize {
        let mut registry = self
            .config
            .pubsub
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if shard {
            registry.publish_shard(channel, message)
        } else {
            registry.publish(channel, message)
        }
    }

    /// Serves the connections that sent something, as Redis does while a script runs past
    /// `busy-reply-threshold`: new connections are accepted; every request gets BUSY but
    /// SCRIPT KILL (OK, or UNKILLABLE once the script wrote) and what the session answers
    /// itself. A connection with a request in the running batch is left for later (its
    /// replies must stay in order).
    fn busy(&mut self, killable: bool) -> Busy {
        let mut events = Events::with_capacity(256);
        if self.poll.poll(&mut events, Some(Duration::ZERO)).is_err() {
            return Busy::Continue;
        }
        let mut answer = Busy::Continue;
        let mut tokens = Vec::new();
        for event in &events {
            match event.token() {
                LISTENER => {
                    let _ = self.accept();
                }
                WAKER => {}
                token => tokens.push(token),
            }
        }
        for token in tokens {
            // Whatever happens here, look at the connection again after the batch: the
            // poll is edge-triggered and this event is consumed.
            self.again.insert(token);
            let Some(connection) = self.connections.get_mut(&token) else {
                continue;
            };
            if connection.session.in_flight() > 0 {
                continue;
            }
            let mut chunk = [0u8; READ_CHUNK_BYTES];
            let mut open = true;
            loop {
                while let Some(request) = connection.session.poll_request() {
                    let args = request.command.args();
                    let nosave = request.spec.id == mnemo_resp::CommandId::Shutdown
                        && args.len() == 2
                        && args[1].eq_ignore_ascii_case(b"nosave");
                    if nosave {
                        // The server goes down without the running batch: no reply, as a
                        // Redis that exits.
                        answer = Busy::Abandon;
                        self.stop.store(true, Ordering::SeqCst);
                        connection.session.complete(b"", true);
                        continue;
                    }
                    let reply = if request.spec.id == mnemo_resp::CommandId::ScriptKill {
                        if killable {
                            if answer == Busy::Continue {
                                answer = Busy::Kill;
                            }
                            &b"+OK\r\n"[..]
                        } else {
                            UNKILLABLE
                        }
                    } else {
                        BUSY
                    };
                    connection.session.complete(reply, false);
                }
                match connection.stream.read(&mut chunk) {
                    Ok(0) => {
                        open = false;
                        break;
                    }
                    Ok(read) => connection
                        .session
                        .receive(chunk.get(..read).unwrap_or_default()),
                    Err(error) if error.kind() == ErrorKind::Interrupted => {}
                    Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        open = false;
                        break;
                    }
                }
            }
            if !open || !flush(connection, &mut self.output_total, &self.stats) {
                self.close(token);
            }
        }
        answer
    }
}

fn session_token(session: u64) -> Token {
    Token(usize::try_from(session).unwrap_or(usize::MAX))
}

/// Writes what the session has released, straight from its buffer; false if the connection
/// should now be closed. Keeps `total` (unsent bytes of all connections) and the
/// per-connection peak up to date.
fn flush(connection: &mut Connection, total: &mut usize, stats: &LoopStats) -> bool {
    stats
        .output_buffer_peak
        .fetch_max(connection.session.output().len() as u64, Ordering::Relaxed);
    let mut open = true;
    while !connection.session.output().is_empty() {
        match connection.stream.write(connection.session.output()) {
            Ok(0) => {
                open = false;
                break;
            }
            Ok(written) => connection.session.consume_output(written),
            Err(error) if error.kind() == ErrorKind::WouldBlock => break,
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                open = false;
                break;
            }
        }
    }
    let unsent = connection.session.output().len();
    *total = total.saturating_sub(connection.counted) + unsent;
    connection.counted = unsent;
    // After QUIT or a protocol error, close once the last reply has left.
    open && !(unsent == 0 && connection.session.should_close())
}

/// Wall-clock time in Unix milliseconds (blocking deadlines).
/// Whether `request` writes (a batch holding one ends in a commit).
fn writes(request: &Request) -> bool {
    request
        .spec
        .flags
        .contains(mnemo_resp::command::Flags::WRITE)
}

/// Arms the gathering timer to fire once, `after` from now (zero: disarms it, and drops an
/// expiry not yet read).
fn arm(timer: &rustix::fd::OwnedFd, after: Duration) -> io::Result<()> {
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // A zero value disarms; a due deadline still fires (one nanosecond).
    let value = if after.is_zero() {
        zero
    } else {
        rustix::time::Timespec {
            tv_sec: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(after.subsec_nanos()),
        }
    };
    rustix::time::timerfd_settime(
        timer.as_fd(),
        rustix::time::TimerfdTimerFlags::empty(),
        &rustix::time::Itimerspec {
            it_interval: zero,
            it_value: value,
        },
    )?;
    if after.is_zero() {
        let mut expiries = [0u8; 8];
        let _ = rustix::io::read(timer, &mut expiries);
    }
    Ok(())
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
