//! One client connection, without I/O.
//!
//! The network thread feeds received bytes to [`Session::receive`], hands each
//! [`Request`] that [`Session::poll_request`] returns to the executor, gives the executor's
//! replies back with [`Session::complete`], and writes [`Session::output`] to the socket (then
//! [`Session::consume_output`]). Closes the socket once [`Session::should_close`] says so.
//!
//! The session answers by itself what only concerns the connection (PING, ECHO, HELLO, AUTH,
//! SELECT, CLIENT, COMMAND, QUIT) and every error found from the command table (unknown
//! command, arity, NOAUTH), in Redis's order of checks. It looks each request up once in
//! mnemo-resp's table and dispatches on the entry's [`CommandId`]; a request for the executor
//! carries its entry along. Replies always leave in request order: an answer computed here
//! waits behind requests still at the executor.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use mnemo_resp::bytes::{Bytes, BytesMut};
use mnemo_resp::command::{self, CommandId, CommandSpec, Flags};
use mnemo_resp::{errors, parse_i64, Command, CommandError, Decoder, Encoder, Protocol, Reply};

use super::limits::{DATABASES_DEFAULT, REDIS_VERSION};
use super::pubsub::{Message, Registry};

/// What every session of a server shares.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The `--requirepass` password; `None` lets every connection in unauthenticated.
    pub password: Option<Bytes>,
    /// Databases SELECT accepts (`--databases`): 0 to `databases - 1`.
    pub databases: usize,
    /// The pub/sub registry every session of a loop shares (clones share it).
    pub pubsub: Arc<Mutex<Registry>>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            password: None,
            databases: DATABASES_DEFAULT,
            pubsub: Arc::default(),
        }
    }
}

/// A command for the executor, checked against the command table.
#[derive(Debug)]
pub struct Request {
    /// The session it came from (its CLIENT ID).
    pub session: u64,
    /// The protocol its reply must be written in.
    pub protocol: Protocol,
    /// The table entry, found and checked (arity, authentication) by the session: the engine
    /// dispatches on its id; its WRITE flag tells the executor a sync point is due.
    pub spec: &'static CommandSpec,
    /// The arguments, the name first.
    pub command: Command,
    /// The database the connection has selected (SELECT).
    pub db: usize,
    /// EXEC (and DISCARD, UNWATCH): the transaction the connection queued since MULTI;
    /// `None` for every other command.
    pub transaction: Option<Box<Transaction>>,
    /// A blocking command parked before: its deadline (Unix ms), kept across its runs.
    pub deadline: Option<i64>,
}

/// The commands a connection queued between MULTI and EXEC, each found and checked in the
/// command table when it was queued.
#[derive(Debug, Default)]
pub struct Transaction {
    /// The queued commands, in order, with their table entries.
    pub commands: Vec<(&'static CommandSpec, Command)>,
    /// A queued command was refused (unknown, wrong arity): EXEC answers EXECABORT and runs
    /// nothing.
    pub aborted: bool,
}

/// A reply slot, in request order.
#[derive(Debug)]
enum Slot {
    /// At the executor; `quiet`: its reply is dropped (CLIENT REPLY OFF or SKIP).
    Waiting { quiet: bool },
    /// Answered, waiting behind an earlier slot.
    Ready(BytesMut),
}

/// The state of one client connection.
#[derive(Debug)]
pub struct Session {
    id: u64,
    config: SessionConfig,
    decoder: Decoder,
    protocol: Protocol,
    authenticated: bool,
    name: Option<Bytes>,
    library: (Option<Bytes>, Option<Bytes>),
    slots: VecDeque<Slot>,
    /// The selected database.
    db: usize,
    /// Between MULTI and EXEC / DISCARD: the commands queued so far.
    multi: Option<Transaction>,
    /// Whether the connection has WATCHed keys (the engine keeps which): EXEC, DISCARD and
    /// UNWATCH go to the executor then, to release them.
    watching: bool,
    /// An EXEC holding a SELECT (which database it leaves selected is known only from its
    /// completion) or a blocking command (the connection waits, as in Redis) is at the
    /// executor: no later request is taken until it completes.
    barrier: bool,
    /// The barrier was lifted with requests possibly waiting in the decoder.
    repoll: bool,
    /// Channels and patterns the connection is subscribed to, in subscription order.
    channels: Vec<Bytes>,
    patterns: Vec<Bytes>,
    /// Shard channels (SSUBSCRIBE), counted apart as in Redis.
    shard_channels: Vec<Bytes>,
    /// CLIENT REPLY OFF: no reply is sent until CLIENT REPLY ON.
    reply_off: bool,
    /// CLIENT REPLY SKIP: the next command's reply is not sent.
    skip_next: bool,
    /// The command being routed gets no reply (OFF, or the command after a SKIP); pushes
    /// (pub/sub messages) are still sent, as in Redis.
    quiet: bool,
    /// Bytes in the `Ready` slots.
    queued_bytes: usize,
    output: BytesMut,
    closing: bool,
    /// The socket's addresses and descriptor (CLIENT LIST / INFO / KILL), when it has one.
    peer: Option<Peer>,
    /// When the connection was accepted, and when it last sent something (age=, idle=).
    created: std::time::Instant,
    last_active: std::time::Instant,
    /// The last command taken (cmd=).
    last_command: &'static str,
}

/// Where a connection's socket leads, as CLIENT LIST shows it.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// The client's address (addr=).
    pub addr: std::net::SocketAddr,
    /// The server's side of the connection (laddr=).
    pub laddr: std::net::SocketAddr,
    /// The socket's descriptor (fd=).
    pub fd: i64,
}

/// Where a request is answered.
enum Route {
    Local,
    Executor(&'static CommandSpec, Option<Box<Transaction>>),
}

impl Session {
    /// A new connection with CLIENT ID `id`.
    pub fn new(id: u64, config: SessionConfig) -> Self {
        let authenticated = config.password.is_none();
        let mut decoder = Decoder::new();
        decoder.set_authenticated(authenticated);
        Session {
            id,
            config,
            decoder,
            protocol: Protocol::Resp2,
            authenticated,
            name: None,
            library: (None, None),
            slots: VecDeque::new(),
            db: 0,
            multi: None,
            watching: false,
            barrier: false,
            repoll: false,
            channels: Vec::new(),
            patterns: Vec::new(),
            shard_channels: Vec::new(),
            reply_off: false,
            skip_next: false,
            quiet: false,
            queued_bytes: 0,
            output: BytesMut::new(),
            closing: false,
            peer: None,
            created: std::time::Instant::now(),
            last_active: std::time::Instant::now(),
            last_command: "NULL",
        }
    }

    /// Records where the connection's socket leads (CLIENT LIST / INFO / KILL).
    pub fn set_peer(&mut self, peer: Peer) {
        self.peer = Some(peer);
    }

    /// Where the connection's socket leads, if it has one.
    pub fn peer(&self) -> Option<Peer> {
        self.peer
    }

    /// Whether the connection is subscribed to a channel or pattern (CLIENT LIST TYPE pubsub).
    pub fn is_subscriber(&self) -> bool {
        self.subscribed()
    }

    /// The CLIENT ID.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The protocol replies are written in (RESP3 after `HELLO 3`).
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The selected database.
    pub fn db(&self) -> usize {
        self.db
    }

    /// The executor ran a SELECT for this connection (inside EXEC): `db` is selected now.
    pub fn selected(&mut self, db: usize) {
        self.db = db;
    }

    /// Requests handed to the executor and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| matches!(slot, Slot::Waiting { .. }))
            .count()
    }

    /// Bytes received from the client.
    pub fn receive(&mut self, bytes: &[u8]) {
        self.last_active = std::time::Instant::now();
        if !self.closing {
            self.decoder.feed(bytes);
        }
    }

    /// The next request for the executor, answering local ones on the way; `None` when the
    /// received bytes hold no further complete request (or the session is closing).
    pub fn poll_request(&mut self) -> Option<Request> {
        while !self.closing && !self.barrier {
            let command = match self.decoder.next_command() {
                Ok(Some(command)) => command,
                Ok(None) => return None,
                Err(error) => {
                    self.answer(|reply| reply.error(&error.reply_text()));
                    self.closing = true;
                    return None;
                }
            };
            if let Route::Executor(spec, transaction) = self.route(&command) {
                self.slots.push_back(Slot::Waiting { quiet: self.quiet });
                self.quiet = false;
                // Nothing after an EXEC holding a SELECT (its database is known only when it
                // completes) or a blocking command (the connection waits, as in Redis) is
                // taken before it completes.
                self.barrier = blocking(spec.id)
                    || transaction.as_ref().is_some_and(|t| {
                        spec.id == CommandId::Exec
                            && t.commands.iter().any(|(s, _)| s.id == CommandId::Select)
                    });
                return Some(Request {
                    session: self.id,
                    protocol: self.protocol,
                    spec,
                    command,
                    db: self.db,
                    transaction,
                    deadline: None,
                });
            }
        }
        None
    }

    /// The executor's reply to the oldest request in flight. `close` (SHUTDOWN) closes the
    /// connection once the reply is written.
    pub fn complete(&mut self, reply: &[u8], close: bool) {
        if let Some(&Slot::Waiting { quiet }) = self.slots.front() {
            // The usual case: the oldest request in flight is the first slot, so its reply
            // goes straight to the output, with no slot buffer of its own.
            self.slots.pop_front();
            if !quiet {
                self.output.extend_from_slice(reply);
            }
        } else {
            let waiting = self
                .slots
                .iter_mut()
                .find(|slot| matches!(slot, Slot::Waiting { .. }));
            debug_assert!(
                waiting.is_some(),
                "a completion without a request in flight"
            );
            if let Some(slot) = waiting {
                let kept = match slot {
                    Slot::Waiting { quiet: true } => &[][..],
                    _ => reply,
                };
                self.queued_bytes += kept.len();
                *slot = Slot::Ready(BytesMut::from(kept));
            }
        }
        self.closing |= close;
        self.repoll |= std::mem::take(&mut self.barrier);
        self.release();
    }

    /// Whether requests may wait in the received bytes since an EXEC that selected a
    /// database completed (no socket event will come for them): the loop polls the session
    /// again at its next wake-up. True once per such EXEC.
    pub fn take_repoll(&mut self) -> bool {
        std::mem::take(&mut self.repoll) && !self.closing && self.decoder.buffered_len() > 0
    }

    /// Reply bytes ready to be written and not yet taken ([`Session::take_output`]), plus
    /// answers waiting behind requests in flight: the replies this session buffers.
    pub fn output_len(&self) -> usize {
        self.output.len() + self.queued_bytes
    }

    /// Reply bytes ready to be written to the socket, in request order.
    pub fn take_output(&mut self) -> BytesMut {
        self.output.split()
    }

    /// Reply bytes ready to be written to the socket, in request order, left in place: the
    /// server writes them from here and then [`Session::consume_output`]s what the socket took,
    /// so a reply is copied once, into this buffer, on its way out.
    pub fn output(&self) -> &[u8] {
        &self.output
    }

    /// The socket took the first `written` bytes of [`Session::output`].
    pub fn consume_output(&mut self, written: usize) {
        if written >= self.output.len() {
            // Everything left: keep the buffer's whole capacity for the next replies.
            self.output.clear();
        } else {
            mnemo_resp::bytes::Buf::advance(&mut self.output, written);
        }
    }

    /// Whether the connection should be closed now: after QUIT, SHUTDOWN or a protocol error,
    /// once every reply has been taken for writing.
    pub fn should_close(&self) -> bool {
        self.closing && self.slots.is_empty() && self.output.is_empty()
    }

    /// Moves the answered prefix of the slots to the output.
    fn release(&mut self) {
        while let Some(Slot::Ready(_)) = self.slots.front() {
            if let Some(Slot::Ready(bytes)) = self.slots.pop_front() {
                self.queued_bytes = self.queued_bytes.saturating_sub(bytes.len());
                self.output.extend_from_slice(&bytes);
            }
        }
    }

    /// Writes a local answer: straight to the output, or behind requests still in flight.
    fn answer(&mut self, write: impl FnOnce(&mut Encoder<'_>)) {
        if self.quiet {
            return;
        }
        if self.slots.is_empty() {
            write(&mut Encoder::new(&mut self.output, self.protocol));
        } else {
            let mut bytes = BytesMut::new();
            write(&mut Encoder::new(&mut bytes, self.protocol));
            self.queued_bytes += bytes.len();
            self.slots.push_back(Slot::Ready(bytes));
        }
    }

    /// A pub/sub event (subscription, message): sent even under CLIENT REPLY OFF or SKIP,
    /// as Redis sends pushes.
    fn push(&mut self, write: impl FnOnce(&mut Encoder<'_>)) {
        let quiet = std::mem::take(&mut self.quiet);
        self.answer(write);
        self.quiet = quiet;
    }

    /// PUBSUB CHANNELS / SHARDCHANNELS: the names, as an array.
    fn answer_channels(&mut self, channels: &[Bytes]) {
        self.answer(|reply| {
            reply.array_len(channels.len());
            for channel in channels {
                reply.bulk(channel);
            }
        });
    }

    /// PUBSUB NUMSUB / SHARDNUMSUB: each channel and its subscriber count, as a map.
    fn answer_counts(&mut self, counts: &[(Bytes, usize)]) {
        self.answer(|reply| {
            reply.map_len(counts.len());
            for (channel, n) in counts {
                reply.bulk(channel);
                reply.integer(count(*n));
            }
        });
    }

    fn answer_error(&mut self, text: &[u8]) {
        self.answer(|reply| reply.error(text));
    }

    /// Redis's checks in Redis's order (existence, arity, authentication), then the
    /// connection-level commands.
    fn route(&mut self, command: &Command) -> Route {
        let args = command.args();
        // CLIENT REPLY: whether this command's reply is sent is decided before it runs.
        self.quiet = self.reply_off || std::mem::take(&mut self.skip_next);
        let route = self.route_command(command, args);
        if matches!(route, Route::Local) {
            self.quiet = false;
        }
        route
    }

    fn route_command(&mut self, command: &Command, args: &[Bytes]) -> Route {
        let spec = match command::resolve(args) {
            Ok(spec) => {
                self.last_command = spec.name;
                spec
            }
            Err(error) => {
                self.refuse_in_multi();
                let text = match (&error, args.first().and_then(|n| unsupported(n))) {
                    (CommandError::UnknownCommand { .. }, Some(what)) => {
                        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
                        format!("ERR {name}: {what} not supported by mnemo").into_bytes()
                    }
                    _ => error.reply_text(),
                };
                self.answer_error(&text);
                return Route::Local;
            }
        };
        if !self.authenticated && !spec.flags.contains(Flags::NO_AUTH) {
            self.refuse_in_multi();
            self.answer_error(errors::NO_AUTH.as_bytes());
            return Route::Local;
        }
        if self.subscribed()
            && self.protocol == Protocol::Resp2
            && !matches!(
                spec.id,
                CommandId::Subscribe
                    | CommandId::Psubscribe
                    | CommandId::Ssubscribe
                    | CommandId::Unsubscribe
                    | CommandId::Punsubscribe
                    | CommandId::Sunsubscribe
                    | CommandId::Ping
                    | CommandId::Quit
                    | CommandId::Reset
            )
        {
            self.refuse_in_multi();
            let text = format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT \
                 / RESET are allowed in this context",
                spec.name
            );
            self.answer_error(text.as_bytes());
            return Route::Local;
        }
        if let Some(route) = self.transaction_route(spec, command) {
            return route;
        }
        match spec.id {
            CommandId::Ping => self.ping(spec, args),
            CommandId::Echo => {
                let message = args.get(1).cloned().unwrap_or_default();
                self.answer(|reply| reply.bulk(&message));
            }
            CommandId::Quit => {
                self.answer(|reply| reply.simple(b"OK"));
                self.closing = true;
            }
            CommandId::Auth => self.auth(args),
            CommandId::Hello => self.hello(args),
            CommandId::Select => self.select(args),
            CommandId::Command => self.answer(|reply| {
                reply.array_len(command::commands().len());
                for spec in command::commands() {
                    spec.encode_info(reply);
                }
            }),
            CommandId::CommandCount => {
                self.answer(|reply| reply.integer(count(command::commands().len())))
            }
            CommandId::CommandInfo => self.command_info(args),
            // Redis's documentation strings are Redis's text, not ours to copy. An error, not
            // an empty map: redis-cli then builds its help and argument hints from its own
            // table (as for a server older than 7.0); with an empty map it shows none.
            CommandId::CommandDocs => self.answer_error(COMMAND_DOCS_ERROR),
            CommandId::CommandList => self.command_list(args),
            CommandId::CommandGetkeys => {
                let reply = command_getkeys(&args[2..]);
                self.answer(|encoder| encoder.reply(&reply));
            }
            CommandId::ClientReply => self.client_reply(&args[2]),
            CommandId::ClientGetredir => self.answer(|reply| reply.integer(-1)),
            CommandId::ClientTrackinginfo => self.answer(|reply| {
                // Tracking (client-side caching) is never on.
                reply.map_len(3);
                reply.bulk(b"flags");
                reply.set_len(1);
                reply.bulk(b"off");
                reply.bulk(b"redirect");
                reply.integer(-1);
                reply.bulk(b"prefixes");
                reply.array_len(0);
            }),
            CommandId::ClientCaching => self.answer_error(
                b"ERR CLIENT CACHING can be called only when the client is in tracking mode \
                  with OPTIN or OPTOUT mode enabled",
            ),
            CommandId::ClientNoEvict => {
                // No client is ever evicted (there is no maxmemory-clients): the flag changes
                // nothing, as it changes nothing in Redis without that limit.
                let on_off =
                    args[2].eq_ignore_ascii_case(b"on") || args[2].eq_ignore_ascii_case(b"off");
                if on_off {
                    self.answer(|reply| reply.simple(b"OK"));
                } else {
                    self.answer_error(errors::SYNTAX.as_bytes());
                }
            }
            CommandId::ClientId => {
                let id = count_u64(self.id);
                self.answer(|reply| reply.integer(id));
            }
            CommandId::ClientGetname => {
                let name = self.name.clone();
                self.answer(|reply| match name {
                    Some(name) => reply.bulk(&name),
                    None => reply.null_bulk(),
                });
            }
            CommandId::ClientSetname => self.client_setname(args),
            CommandId::ClientSetinfo => self.client_setinfo(args),
            CommandId::ClientInfo => {
                let info = self.client_line();
                self.answer(|reply| reply.verbatim(*b"txt", &info));
            }
            CommandId::Watch => {
                self.watching = true;
                return Route::Executor(spec, None);
            }
            CommandId::Role => self.answer(|reply| {
                // A standalone server: a master without replicas.
                reply.array_len(3);
                reply.bulk(b"master");
                reply.integer(0);
                reply.array_len(0);
            }),
            CommandId::Reset => {
                if self.reset() {
                    // The engine forgets the connection's watches and answers.
                    return Route::Executor(spec, None);
                }
                self.answer(|reply| reply.simple(b"RESET"));
            }
            CommandId::Subscribe => self.subscribe(args, false),
            CommandId::Psubscribe => self.subscribe(args, true),
            CommandId::Unsubscribe => self.unsubscribe(args, false),
            CommandId::Punsubscribe => self.unsubscribe(args, true),
            CommandId::Publish => {
                let count = self.registry().publish(&args[1], &args[2]);
                self.answer(|reply| reply.integer(self::count(count)));
            }
            CommandId::PubsubChannels => {
                let channels = self.registry().channels(args.get(2).map(|p| &p[..]));
                self.answer_channels(&channels);
            }
            CommandId::PubsubNumsub => {
                let counts: Vec<(Bytes, usize)> = {
                    let registry = self.registry();
                    args[2..]
                        .iter()
                        .map(|c| (c.clone(), registry.numsub(c)))
                        .collect()
                };
                self.answer_counts(&counts);
            }
            CommandId::Ssubscribe => self.shard_subscribe(args),
            CommandId::Sunsubscribe => self.shard_unsubscribe(args),
            CommandId::Spublish => {
                let count = self.registry().publish_shard(&args[1], &args[2]);
                self.answer(|reply| reply.integer(self::count(count)));
            }
            CommandId::PubsubShardchannels => {
                let channels = self.registry().shard_channels(args.get(2).map(|p| &p[..]));
                self.answer_channels(&channels);
            }
            CommandId::PubsubShardnumsub => {
                let counts: Vec<(Bytes, usize)> = {
                    let registry = self.registry();
                    args[2..]
                        .iter()
                        .map(|c| (c.clone(), registry.shard_numsub(c)))
                        .collect()
                };
                self.answer_counts(&counts);
            }
            CommandId::PubsubNumpat => {
                let n = self.registry().numpat();
                self.answer(|reply| reply.integer(self::count(n)));
            }
            _ => return Route::Executor(spec, None),
        }
        Route::Local
    }

    /// RESET: the connection's state as a new connection's (no transaction, database 0,
    /// RESP2, no name, no subscriptions, authenticated only if no password is required).
    /// Returns whether it watched keys (the engine must forget them).
    fn reset(&mut self) -> bool {
        self.multi = None;
        // RESET's own reply is sent even after CLIENT REPLY OFF, as in Redis.
        self.reply_off = false;
        self.skip_next = false;
        self.quiet = false;
        self.db = 0;
        self.protocol = Protocol::Resp2;
        self.name = None;
        let id = self.id;
        let channels = std::mem::take(&mut self.channels);
        let patterns = std::mem::take(&mut self.patterns);
        let shard_channels = std::mem::take(&mut self.shard_channels);
        {
            let mut registry = self.registry();
            for channel in &shard_channels {
                registry.unsubscribe_shard(id, channel);
            }
            for channel in &channels {
                registry.unsubscribe(id, channel, false);
            }
            for pattern in &patterns {
                registry.unsubscribe(id, pattern, true);
            }
        }
        self.authenticated = self.config.password.is_none();
        self.decoder.set_authenticated(self.authenticated);
        std::mem::take(&mut self.watching)
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        // A panic elsewhere while holding the lock leaves the registry usable.
        self.config
            .pubsub
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty() || !self.shard_channels.is_empty()
    }

    /// SSUBSCRIBE: one answer per shard channel, counting shard channels only, as Redis.
    fn shard_subscribe(&mut self, args: &[Bytes]) {
        let id = self.id;
        for name in &args[1..] {
            if !self.shard_channels.contains(name) {
                self.shard_channels.push(name.clone());
                self.registry().subscribe_shard(id, name);
            }
            self.answer_shard(b"ssubscribe", Some(name));
        }
    }

    /// SUNSUBSCRIBE: the shard channels given, or all of them (a null name when none).
    fn shard_unsubscribe(&mut self, args: &[Bytes]) {
        let id = self.id;
        let names: Vec<Bytes> = if args.len() > 1 {
            args[1..].to_vec()
        } else {
            self.shard_channels.clone()
        };
        if names.is_empty() {
            return self.answer_shard(b"sunsubscribe", None);
        }
        for name in names {
            if let Some(at) = self.shard_channels.iter().position(|n| *n == name) {
                self.shard_channels.remove(at);
                self.registry().unsubscribe_shard(id, &name);
            }
            self.answer_shard(b"sunsubscribe", Some(&name));
        }
    }

    fn answer_shard(&mut self, kind: &'static [u8], name: Option<&Bytes>) {
        let n = count(self.shard_channels.len());
        self.push(|reply| {
            reply.push_len(3);
            reply.bulk(kind);
            match name {
                Some(name) => reply.bulk(name),
                None => reply.null_bulk(),
            }
            reply.integer(n);
        });
    }

    /// A subscription event: `kind`, the channel (or none), the subscription count after it.
    fn answer_subscription(&mut self, kind: &'static [u8], name: Option<&Bytes>) {
        let n = count(self.channels.len() + self.patterns.len());
        self.push(|reply| {
            reply.push_len(3);
            reply.bulk(kind);
            match name {
                Some(name) => reply.bulk(name),
                None => reply.null_bulk(),
            }
            reply.integer(n);
        });
    }

    /// SUBSCRIBE / PSUBSCRIBE (`pattern`): one answer per name.
    fn subscribe(&mut self, args: &[Bytes], pattern: bool) {
        let id = self.id;
        for name in &args[1..] {
            let list = if pattern {
                &mut self.patterns
            } else {
                &mut self.channels
            };
            if !list.contains(name) {
                list.push(name.clone());
                self.registry().subscribe(id, name, pattern);
            }
            let kind: &'static [u8] = if pattern { b"psubscribe" } else { b"subscribe" };
            self.answer_subscription(kind, Some(name));
        }
    }

    /// UNSUBSCRIBE / PUNSUBSCRIBE (`pattern`): the names given, or all of them; one answer
    /// per name (a null name when there was none).
    fn unsubscribe(&mut self, args: &[Bytes], pattern: bool) {
        let id = self.id;
        let kind: &'static [u8] = if pattern {
            b"punsubscribe"
        } else {
            b"unsubscribe"
        };
        let names: Vec<Bytes> = if args.len() > 1 {
            args[1..].to_vec()
        } else if pattern {
            self.patterns.clone()
        } else {
            self.channels.clone()
        };
        if names.is_empty() {
            return self.answer_subscription(kind, None);
        }
        for name in names {
            let list = if pattern {
                &mut self.patterns
            } else {
                &mut self.channels
            };
            if let Some(at) = list.iter().position(|n| *n == name) {
                list.remove(at);
                self.registry().unsubscribe(id, &name, pattern);
            }
            self.answer_subscription(kind, Some(&name));
        }
    }

    /// A message published to a channel this connection listens to: written in its
    /// protocol, in order with its replies.
    pub fn deliver_message(&mut self, message: &Message) {
        self.push(|reply| {
            match &message.pattern {
                Some(pattern) => {
                    reply.push_len(4);
                    reply.bulk(b"pmessage");
                    reply.bulk(pattern);
                }
                None => {
                    reply.push_len(3);
                    reply.bulk(if message.shard {
                        b"smessage"
                    } else {
                        b"message"
                    });
                }
            }
            reply.bulk(&message.channel);
            reply.bulk(&message.payload);
        });
    }

    /// A command refused while queuing: EXEC will abort.
    fn refuse_in_multi(&mut self) {
        if let Some(multi) = &mut self.multi {
            multi.aborted = true;
        }
    }

    /// MULTI, EXEC, DISCARD, WATCH and UNWATCH, and the queuing of every other command
    /// between MULTI and EXEC, as Redis 7.0 does them; `None` for a command that runs now.
    fn transaction_route(
        &mut self,
        spec: &'static CommandSpec,
        command: &Command,
    ) -> Option<Route> {
        let in_multi = self.multi.is_some();
        match spec.id {
            CommandId::Multi if in_multi => {
                self.answer_error(b"ERR MULTI calls can not be nested");
            }
            CommandId::Multi => {
                self.multi = Some(Transaction::default());
                self.answer(|reply| reply.simple(b"OK"));
            }
            CommandId::Exec | CommandId::Discard if !in_multi => {
                let text = format!("ERR {} without MULTI", spec.name.to_ascii_uppercase());
                self.answer_error(text.as_bytes());
            }
            CommandId::Exec | CommandId::Discard => {
                let transaction = self.multi.take().map(Box::new);
                self.watching = false;
                return Some(Route::Executor(spec, transaction));
            }
            CommandId::Watch if in_multi => {
                self.answer_error(b"ERR WATCH inside MULTI is not allowed");
            }
            CommandId::Unwatch if !in_multi => {
                if !self.watching {
                    self.answer(|reply| reply.simple(b"OK"));
                    return Some(Route::Local);
                }
                self.watching = false;
                return Some(Route::Executor(spec, None));
            }
            CommandId::Quit | CommandId::Reset => return None,
            _ if in_multi => {
                if let Some(multi) = &mut self.multi {
                    multi.commands.push((spec, command.clone()));
                }
                self.answer(|reply| reply.simple(b"QUEUED"));
            }
            _ => return None,
        }
        Some(Route::Local)
    }

    fn ping(&mut self, spec: &'static CommandSpec, args: &[Bytes]) {
        if self.subscribed() && self.protocol == Protocol::Resp2 && args.len() <= 2 {
            // Subscribed (RESP2): PING answers in the shape of a message.
            let message = args.get(1).cloned().unwrap_or_default();
            return self.answer(|reply| {
                reply.array_len(2);
                reply.bulk(b"pong");
                reply.bulk(&message);
            });
        }
        match args {
            [_] => self.answer(|reply| reply.simple(b"PONG")),
            [_, message] => {
                let message = message.clone();
                self.answer(|reply| reply.bulk(&message));
            }
            _ => self.answer_error(
                &CommandError::WrongArity {
                    full_name: spec.name,
                }
                .reply_text(),
            ),
        }
    }

    /// Tries a username and password as Redis's default user does: with no password
    /// configured any password is accepted for "default".
    fn password_ok(&self, user: &[u8], password: &[u8]) -> bool {
        user == b"default"
            && self
                .config
                .password
                .as_ref()
                .is_none_or(|expected| expected == password)
    }

    fn authenticate(&mut self) {
        self.authenticated = true;
        self.decoder.set_authenticated(true);
    }

    fn auth(&mut self, args: &[Bytes]) {
        let (user, password) = match args {
            [_, password] => {
                if self.config.password.is_none() {
                    return self.answer_error(errors::AUTH_NOT_CONFIGURED.as_bytes());
                }
                (&b"default"[..], password)
            }
            [_, user, password] => (&user[..], password),
            _ => return self.answer_error(errors::SYNTAX.as_bytes()),
        };
        if self.password_ok(user, password) {
            self.authenticate();
            self.answer(|reply| reply.simple(b"OK"));
        } else {
            self.answer_error(errors::WRONG_PASS.as_bytes());
        }
    }

    fn hello(&mut self, args: &[Bytes]) {
        let mut protocol = None;
        let mut options = args.get(1..).unwrap_or_default().iter();
        if let Some(version) = options.next() {
            let Some(version) = parse_i64(version) else {
                return self
                    .answer_error(b"ERR Protocol version is not an integer or out of range");
            };
            let Some(chosen) = Protocol::from_version(version) else {
                return self.answer_error(errors::NO_PROTO.as_bytes());
            };
            protocol = Some(chosen);
        }
        let mut credentials = None;
        let mut name = None;
        while let Some(option) = options.next() {
            if option.eq_ignore_ascii_case(b"AUTH") && options.len() >= 2 {
                credentials = options.next().cloned().zip(options.next().cloned());
            } else if option.eq_ignore_ascii_case(b"SETNAME") && options.len() >= 1 {
                let candidate = options.next().cloned().unwrap_or_default();
                if !valid_client_name(&candidate) {
                    return self.answer_error(errors::INVALID_CLIENT_NAME.as_bytes());
                }
                name = Some(candidate);
            } else {
                let mut text = b"ERR Syntax error in HELLO option '".to_vec();
                text.extend_from_slice(option);
                text.push(b'\'');
                return self.answer_error(&text);
            }
        }
        if let Some((user, password)) = credentials {
            if !self.password_ok(&user, &password) {
                return self.answer_error(errors::WRONG_PASS.as_bytes());
            }
            self.authenticate();
        }
        if !self.authenticated {
            return self.answer_error(
                b"NOAUTH HELLO must be called with the client already authenticated, otherwise the \
                  HELLO AUTH <user> <pass> option can be used to authenticate the client and \
                  select the RESP protocol version at the same time",
            );
        }
        if let Some(name) = name {
            self.name = (!name.is_empty()).then_some(name);
        }
        if let Some(protocol) = protocol {
            self.protocol = protocol;
        }
        let (id, version) = (self.id, self.protocol.version());
        self.answer(|reply| {
            reply.map_len(7);
            for (key, value) in [("server", "redis"), ("version", REDIS_VERSION)] {
                reply.bulk(key.as_bytes());
                reply.bulk(value.as_bytes());
            }
            reply.bulk(b"proto");
            reply.integer(version);
            reply.bulk(b"id");
            reply.integer(count_u64(id));
            for (key, value) in [("mode", "standalone"), ("role", "master")] {
                reply.bulk(key.as_bytes());
                reply.bulk(value.as_bytes());
            }
            reply.bulk(b"modules");
            reply.array_len(0);
        });
    }

    fn select(&mut self, args: &[Bytes]) {
        let index = args.get(1).and_then(|arg| parse_i64(arg));
        match index {
            None => self.answer_error(errors::NOT_INTEGER.as_bytes()),
            Some(index) if i32::try_from(index).is_err() => {
                self.answer_error(errors::NOT_I32.as_bytes())
            }
            Some(index) if !(0..count(self.config.databases)).contains(&index) => {
                self.answer_error(errors::DB_INDEX_OUT_OF_RANGE.as_bytes())
            }
            Some(index) => {
                self.db = usize::try_from(index).unwrap_or_default();
                self.answer(|reply| reply.simple(b"OK"));
            }
        }
    }

    fn command_info(&mut self, args: &[Bytes]) {
        let names = args.get(2..).unwrap_or_default();
        self.answer(|reply| {
            if names.is_empty() {
                reply.array_len(command::commands().len());
                for spec in command::commands() {
                    spec.encode_info(reply);
                }
                return;
            }
            reply.array_len(names.len());
            for name in names {
                match command::lookup_full_name(name) {
                    Some(spec) => spec.encode_info(reply),
                    None => reply.null_bulk(),
                }
            }
        });
    }

    /// COMMAND LIST without FILTERBY: every command and subcommand name.
    fn command_list(&mut self, args: &[Bytes]) {
        if args.len() > 2 {
            // FILTERBY is not implemented yet.
            return self.answer_error(errors::SYNTAX.as_bytes());
        }
        let names: Vec<&str> = command::commands()
            .iter()
            .flat_map(|spec| {
                std::iter::once(spec.name).chain(spec.subcommands.iter().map(|sub| sub.name))
            })
            .collect();
        self.answer(|reply| {
            reply.array_len(names.len());
            for name in names {
                reply.bulk(name.as_bytes());
            }
        });
    }

    /// CLIENT REPLY ON | OFF | SKIP, as Redis: ON answers OK (and ends a SKIP), OFF and
    /// SKIP answer nothing; SKIP under OFF changes nothing.
    fn client_reply(&mut self, mode: &[u8]) {
        if mode.eq_ignore_ascii_case(b"on") {
            self.reply_off = false;
            self.quiet = false;
            self.answer(|reply| reply.simple(b"OK"));
        } else if mode.eq_ignore_ascii_case(b"off") {
            self.reply_off = true;
        } else if mode.eq_ignore_ascii_case(b"skip") {
            self.skip_next |= !self.reply_off;
        } else {
            self.answer_error(errors::SYNTAX.as_bytes());
        }
    }

    fn client_setname(&mut self, args: &[Bytes]) {
        let name = args.get(2).cloned().unwrap_or_default();
        if !valid_client_name(&name) {
            return self.answer_error(errors::INVALID_CLIENT_NAME.as_bytes());
        }
        self.name = (!name.is_empty()).then_some(name);
        self.answer(|reply| reply.simple(b"OK"));
    }

    fn client_setinfo(&mut self, args: &[Bytes]) {
        let (attribute, value) = (
            args.get(2).cloned().unwrap_or_default(),
            args.get(3).cloned(),
        );
        if attribute.eq_ignore_ascii_case(b"lib-name") {
            self.library.0 = value;
        } else if attribute.eq_ignore_ascii_case(b"lib-ver") {
            self.library.1 = value;
        } else {
            let mut text = b"ERR Unrecognized option '".to_vec();
            text.extend_from_slice(&attribute);
            text.push(b'\'');
            return self.answer_error(&text);
        }
        self.answer(|reply| reply.simple(b"OK"));
    }

    /// The connection's CLIENT LIST / CLIENT INFO line (newline included), in Redis 7.0's
    /// fields. Those mnemo does not keep are given as an idle Redis connection shows them:
    /// no argument memory (`argv-mem=0`), a read buffer of 1024 bytes (`rbs`), no output list
    /// (`oll=0`); `qbuf` is the request bytes received and not yet taken, `omem` and `obl`
    /// the reply bytes waiting.
    pub fn client_line(&self) -> Vec<u8> {
        let now = std::time::Instant::now();
        let (addr, laddr, fd) = match self.peer {
            Some(peer) => (peer.addr.to_string(), peer.laddr.to_string(), peer.fd),
            None => (String::new(), String::new(), -1),
        };
        let mut flags = String::new();
        if self.subscribed() {
            flags.push('P');
        }
        if self.multi.is_some() {
            flags.push('x');
        }
        if self.barrier {
            flags.push('b');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let multi = self.multi.as_ref().map_or(-1, |m| count(m.commands.len()));
        let qbuf = self.decoder.buffered_len();
        let omem = self.output_len();
        let mut line =
            format!("id={} addr={addr} laddr={laddr} fd={fd} name=", self.id).into_bytes();
        line.extend_from_slice(self.name.as_deref().unwrap_or_default());
        line.extend_from_slice(
            format!(
                " age={} idle={} flags={flags} db={} sub={} psub={} ssub={} multi={multi} \
                 qbuf={qbuf} qbuf-free=0 argv-mem=0 multi-mem=0 rbs=1024 rbp=0 obl={} oll=0 \
                 omem={omem} tot-mem={} events=r cmd={} user=default redir=-1 resp={}",
                now.saturating_duration_since(self.created).as_secs(),
                now.saturating_duration_since(self.last_active).as_secs(),
                self.db,
                self.channels.len(),
                self.patterns.len(),
                self.shard_channels.len(),
                self.output.len(),
                qbuf + omem + 1024,
                self.last_command,
                self.protocol.version(),
            )
            .as_bytes(),
        );
        // CLIENT SETINFO (Redis 7.2) adds the library's name and version, as 7.2 shows them.
        if self.library.0.is_some() || self.library.1.is_some() {
            line.extend_from_slice(b" lib-name=");
            line.extend_from_slice(self.library.0.as_deref().unwrap_or_default());
            line.extend_from_slice(b" lib-ver=");
            line.extend_from_slice(self.library.1.as_deref().unwrap_or_default());
        }
        line.push(b'\n');
        line
    }
}

impl Drop for Session {
    /// A connection that goes away leaves its subscriptions.
    fn drop(&mut self) {
        if !self.subscribed() {
            return;
        }
        let mut registry = self.registry();
        for channel in &self.channels {
            registry.unsubscribe(self.id, channel, false);
        }
        for pattern in &self.patterns {
            registry.unsubscribe(self.id, pattern, true);
        }
        for channel in &self.shard_channels {
            registry.unsubscribe_shard(self.id, channel);
        }
    }
}

/// Redis 7.0 commands mnemo does not have, by family, for a clearer error than "unknown
/// command" (the README lists them).
fn unsupported(name: &[u8]) -> Option<&'static str> {
    const FAMILIES: &[(&str, &[&str])] = &[
        (
            "streams are",
            &[
                "xadd",
                "xack",
                "xautoclaim",
                "xclaim",
                "xdel",
                "xgroup",
                "xinfo",
                "xlen",
                "xpending",
                "xrange",
                "xread",
                "xreadgroup",
                "xrevrange",
                "xsetid",
                "xtrim",
            ],
        ),
        ("functions are", &["fcall", "fcall_ro"]),
    ];
    let lower = name.to_ascii_lowercase();
    FAMILIES
        .iter()
        .find(|(_, names)| names.iter().any(|n| n.as_bytes() == lower.as_slice()))
        .map(|(what, _)| *what)
}

/// The blocking commands: the connection takes no further request until one completes.
/// The answer to COMMAND DOCS.
const COMMAND_DOCS_ERROR: &[u8] =
    b"ERR COMMAND DOCS is not answered by mnemo: use the client's own command help (redis-cli falls back to its table)";

/// COMMAND GETKEYS command args...: the key arguments of a command, with Redis's errors.
fn command_getkeys(target: &[Bytes]) -> Reply {
    let error = |text: &'static str| Reply::Error(Bytes::from_static(text.as_bytes()));
    let spec = match command::resolve(target) {
        Ok(spec) => spec,
        Err(CommandError::WrongArity { .. }) => {
            return error("ERR Invalid number of arguments specified for command")
        }
        Err(_) => return error("ERR Invalid command specified"),
    };
    match command::key_positions(spec, target) {
        None => error("ERR Invalid arguments specified for command"),
        Some(positions) if positions.is_empty() => error("ERR The command has no key arguments"),
        Some(positions) => Reply::Array(
            positions
                .into_iter()
                .filter_map(|at| target.get(at).cloned().map(Reply::Bulk))
                .collect(),
        ),
    }
}

fn blocking(id: CommandId) -> bool {
    matches!(
        id,
        CommandId::Blpop
            | CommandId::Brpop
            | CommandId::Blmove
            | CommandId::Brpoplpush
            | CommandId::Blmpop
            | CommandId::Bzpopmin
            | CommandId::Bzpopmax
            | CommandId::Bzmpop
    )
}

/// Redis accepts client names made of '!'..='~' only (no spaces, no newlines).
fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|byte| (b'!'..=b'~').contains(byte))
}

fn count(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

fn count_u64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(password: Option<&str>) -> Session {
        Session::new(
            7,
            SessionConfig {
                password: password.map(|p| Bytes::copy_from_slice(p.as_bytes())),
                ..SessionConfig::default()
            },
        )
    }

    /// Feeds `input`, answers every executor request with `+EXECUTED`, returns the output.
    fn exchange(session: &mut Session, input: &[u8]) -> String {
        session.receive(input);
        while let Some(request) = session.poll_request() {
            assert_eq!(request.session, 7);
            session.complete(b"+EXECUTED\r\n", false);
        }
        String::from_utf8_lossy(&session.take_output()).into_owned()
    }

    #[test]
    fn local_commands() {
        let mut s = session(None);
        assert_eq!(exchange(&mut s, b"PING\r\n"), "+PONG\r\n");
        assert_eq!(
            exchange(&mut s, b"*2\r\n$4\r\nping\r\n$2\r\nhi\r\n"),
            "$2\r\nhi\r\n"
        );
        assert_eq!(exchange(&mut s, b"ECHO x\r\n"), "$1\r\nx\r\n");
        assert_eq!(exchange(&mut s, b"SELECT 0\r\n"), "+OK\r\n");
        assert_eq!(exchange(&mut s, b"SELECT 15\r\n"), "+OK\r\n");
        assert_eq!(s.db(), 15);
        assert_eq!(
            exchange(&mut s, b"SELECT 16\r\n"),
            "-ERR DB index is out of range\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"SELECT x\r\n"),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(
            exchange(
                &mut s,
                b"CLIENT SETNAME app\r\nCLIENT GETNAME\r\nCLIENT ID\r\n"
            ),
            "+OK\r\n$3\r\napp\r\n:7\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"CLIENT SETNAME \"a b\"\r\n"),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"CLIENT SETINFO lib-name redis-py\r\n"),
            "+OK\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"COMMAND COUNT\r\n"),
            format!(":{}\r\n", command::commands().len())
        );
        assert_eq!(
            exchange(&mut s, b"COMMAND DOCS\r\n"),
            format!("-{}\r\n", String::from_utf8_lossy(COMMAND_DOCS_ERROR))
        );
        assert!(exchange(&mut s, b"COMMAND INFO get nosuch\r\n").ends_with("$-1\r\n"));
        assert!(exchange(&mut s, b"COMMAND INFO config|get\r\n")
            .starts_with("*1\r\n*10\r\n$10\r\nconfig|get\r\n"));
        assert!(exchange(&mut s, b"COMMAND\r\n")
            .starts_with(&format!("*{}\r\n*10\r\n", command::commands().len())));
    }

    #[test]
    fn table_errors_in_redis_order() {
        let mut s = session(Some("secret"));
        assert_eq!(
            exchange(&mut s, b"FOO a\r\n"),
            "-ERR unknown command 'FOO', with args beginning with: 'a' \r\n"
        );
        // Arity is checked before authentication, as in Redis.
        assert_eq!(
            exchange(&mut s, b"GET\r\n"),
            "-ERR wrong number of arguments for 'get' command\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"GET k\r\n"),
            "-NOAUTH Authentication required.\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"PING\r\n"),
            "-NOAUTH Authentication required.\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"AUTH wrong\r\n"),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"AUTH secret\r\nGET k\r\n"),
            "+OK\r\n+EXECUTED\r\n"
        );
    }

    #[test]
    fn auth_without_password_configured() {
        let mut s = session(None);
        let expected = format!("-{}\r\n", errors::AUTH_NOT_CONFIGURED);
        assert_eq!(exchange(&mut s, b"AUTH x\r\n"), expected);
        assert_eq!(exchange(&mut s, b"AUTH default x\r\n"), "+OK\r\n");
        assert_eq!(exchange(&mut s, b"AUTH a b c\r\n"), "-ERR syntax error\r\n");
    }

    #[test]
    fn hello_switches_protocol() {
        let mut s = session(None);
        let reply = exchange(&mut s, b"HELLO 3\r\n");
        assert!(
            reply.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
            "{reply}"
        );
        assert!(
            reply.contains("$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:7\r\n"),
            "{reply}"
        );
        assert_eq!(s.protocol(), Protocol::Resp3);
        assert_eq!(exchange(&mut s, b"CLIENT GETNAME\r\n"), "_\r\n");
        let reply = exchange(&mut s, b"HELLO 2\r\n");
        assert!(reply.starts_with("*14\r\n"), "{reply}");
        assert_eq!(
            exchange(&mut s, b"HELLO 4\r\n"),
            "-NOPROTO unsupported protocol version\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"HELLO x\r\n"),
            "-ERR Protocol version is not an integer or out of range\r\n"
        );
        assert_eq!(
            exchange(&mut s, b"HELLO 3 FOO\r\n"),
            "-ERR Syntax error in HELLO option 'FOO'\r\n"
        );
        assert_eq!(s.protocol(), Protocol::Resp2);
    }

    #[test]
    fn hello_authenticates() {
        let mut s = session(Some("pw"));
        assert!(exchange(&mut s, b"HELLO 3\r\n").starts_with("-NOAUTH HELLO must be called"));
        assert_eq!(s.protocol(), Protocol::Resp2);
        assert!(exchange(&mut s, b"HELLO 3 AUTH default pw SETNAME me\r\n").starts_with("%7\r\n"));
        assert_eq!(exchange(&mut s, b"CLIENT GETNAME\r\n"), "$2\r\nme\r\n");
    }

    /// A local answer must not overtake a request still at the executor.
    #[test]
    fn replies_keep_request_order() {
        let mut s = session(None);
        s.receive(b"SET a 1\r\nPING\r\nGET a\r\nECHO z\r\n");
        let first = s.poll_request().expect("SET");
        assert_eq!(first.spec.id, CommandId::Set);
        let second = s.poll_request().expect("GET");
        assert_eq!(second.spec.id, CommandId::Get);
        assert!(s.poll_request().is_none());
        assert_eq!(s.in_flight(), 2);
        assert!(s.take_output().is_empty(), "PING answered before SET");
        s.complete(b"+OK\r\n", false);
        assert_eq!(&s.take_output()[..], b"+OK\r\n+PONG\r\n");
        s.complete(b"$1\r\n1\r\n", false);
        assert_eq!(&s.take_output()[..], b"$1\r\n1\r\n$1\r\nz\r\n");
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn quit_and_protocol_errors_close() {
        let mut s = session(None);
        assert_eq!(exchange(&mut s, b"QUIT\r\nPING\r\n"), "+OK\r\n");
        assert!(s.should_close());

        let mut s = session(None);
        assert_eq!(
            exchange(&mut s, b"PING\r\n*1\r\n$x\r\nPING\r\n"),
            "+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"
        );
        assert!(s.should_close());
    }

    #[test]
    fn unauthenticated_sessions_have_small_request_limits() {
        let mut s = session(Some("pw"));
        let reply = exchange(&mut s, b"*1\r\n$20000\r\n");
        assert_eq!(
            reply,
            "-ERR Protocol error: unauthenticated bulk length\r\n"
        );
        assert!(s.should_close());
    }

    /// Random byte streams built from RESP fragments and command names: the session never
    /// panics, and every request handed out gets exactly one reply slot.
    #[test]
    fn random_streams_never_panic() {
        let fragments: &[&[u8]] = &[
            b"*", b"$", b"\r\n", b"1", b"2", b"3", b"-1", b"0", b"\"", b"'", b" ", b"\\x41", b"\n",
            b"PING", b"HELLO", b"AUTH", b"CLIENT", b"SETNAME", b"GETNAME", b"COMMAND", b"INFO",
            b"DOCS", b"SELECT", b"QUIT", b"GET", b"SET", b"ECHO", b"3", b"2", b"x", b"\xff", b"\0",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..2000 {
            let mut input = Vec::new();
            let pieces = next() % 40;
            for _ in 0..pieces {
                let index = usize::try_from(next() % fragments.len() as u64).unwrap_or(0);
                input.extend_from_slice(fragments.get(index).copied().unwrap_or_default());
            }
            let password = (round % 3 == 0).then_some("pw");
            let mut s = session(password);
            for chunk in input.chunks(usize::try_from(next() % 7 + 1).unwrap_or(1)) {
                s.receive(chunk);
                while s.poll_request().is_some() {
                    assert_eq!(s.in_flight(), 1);
                    s.complete(b"+X\r\n", false);
                }
                let _ = s.take_output();
            }
            assert_eq!(s.in_flight(), 0);
        }
    }
}
