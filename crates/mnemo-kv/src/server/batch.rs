//! Group commit: a batch of requests from any number of sessions runs in one transaction, and
//! its replies are released only after the batch's sync point.
//!
//! The invariant this module exists for: **no reply of a batch leaves [`run_batch`] before
//! [`Engine::commit`] has returned Ok.** Reads are held too: a read may have seen a write of
//! the same batch, and answering it before the sync point would let a client act on a value a
//! crash could still erase. A batch without writes has nothing to make durable and skips the
//! sync point.

use mnemo_resp::bytes::{Bytes, BytesMut};
use mnemo_resp::{CommandId, Encoder, Reply};

use super::session::Request;

/// What executing one command did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// The command changed the keyspace: the batch needs a sync point.
    pub wrote: bool,
    /// The connection must close after this reply (SHUTDOWN).
    pub close: bool,
    /// The command selected a database for its connection (SELECT inside EXEC).
    pub select: Option<usize>,
    /// A blocking command found nothing: no reply was written; the server parks the request
    /// and runs it again after later writes, until this deadline (Unix ms; `i64::MAX`: for
    /// ever), when the engine answers the timeout.
    pub block: Option<i64>,
}

/// What the server around the engine offers during a batch: the commands about connections
/// (CLIENT LIST / KILL / PAUSE / UNPAUSE, answered in request order with the batch), and
/// what a running script may ask for. The event loop implements it; [`NoHost`] is the host
/// of a batch run without a server (tests, tools, a script inside EXEC).
pub trait Host {
    /// Answers `request` if it is about the server's connections: the reply, and whether
    /// the requesting connection must close after it (CLIENT KILL of itself). `None`: the
    /// engine runs it. The default answers nothing.
    fn connection_command(&mut self, _request: &Request) -> Option<(Reply, bool)> {
        None
    }

    /// PUBLISH or SPUBLISH (`shard`) from a script: queues the message for the subscribers
    /// (delivered after the batch) and returns how many receive it.
    fn publish(&mut self, channel: &Bytes, message: &Bytes, shard: bool) -> usize;

    /// A script has run longer than `busy-reply-threshold`: serve the other connections for
    /// a moment (they get BUSY; SCRIPT KILL is answered OK if `killable`, UNKILLABLE if
    /// not; SHUTDOWN NOSAVE stops the server). Returns what the script must do.
    fn busy(&mut self, killable: bool) -> Busy;

    /// Whether to time each commit for [`Host::committed`] (two clock reads of the thread's
    /// CPU time, system calls: only for a loop that gathers writers). Default: no.
    fn times_commits(&self) -> bool {
        false
    }

    /// The batch's commit waited `waited` for its storage (its time less the thread's CPU
    /// time in it: an `fdatasync`, a mirror's acknowledgement). The loop gathers writers
    /// behind such commits (`gather.rs`). Called only when [`Host::times_commits`].
    fn committed(&mut self, _waited: std::time::Duration) {}
}

/// What a script running past `busy-reply-threshold` must do ([`Host::busy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Busy {
    /// Go on.
    Continue,
    /// SCRIPT KILL: stop with Redis's error (its writes so far stay, as it had none).
    Kill,
    /// SHUTDOWN NOSAVE: stop, and abandon the whole batch (nothing of it is committed, no
    /// reply of it is sent): the server is going down.
    Abandon,
}

/// No server around a script: PUBLISH reaches nobody, nobody can ask for SCRIPT KILL.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHost;

impl Host for NoHost {
    fn publish(&mut self, _channel: &Bytes, _message: &Bytes, _shard: bool) -> usize {
        0
    }

    fn busy(&mut self, _killable: bool) -> Busy {
        Busy::Continue
    }
}

/// How far [`Engine::prefetch`] goes for a request that will run soon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefetch {
    /// What its key's lookup reads first (the bucket words it hashes to).
    Bucket,
    /// What that first read leads to (the entries those buckets point at): asked a few
    /// requests after [`Prefetch::Bucket`], when the buckets should be in the caches.
    Entry,
}

/// Requests between a request's [`Prefetch::Entry`] and its execution, and between its
/// [`Prefetch::Bucket`] and its [`Prefetch::Entry`]: enough for the memory to answer while
/// the requests in between run.
pub const PREFETCH_DISTANCE: usize = 4;

/// The storage engine, as the executor sees it. One transaction per batch.
pub trait Engine {
    /// Why a commit failed; no reply of the batch is released then.
    type Error;

    /// Opens the batch's transaction.
    fn begin(&mut self);

    /// Runs one command inside the open transaction and writes its reply. A command that fails
    /// (WRONGTYPE, syntax, pool full) must leave the keyspace as it found it.
    fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect;

    /// [`Engine::execute`] with the server around it, for a script that publishes or runs
    /// long ([`Host`]). The default ignores the host.
    fn execute_hosted(
        &mut self,
        request: &Request,
        reply: &mut Encoder<'_>,
        _host: &mut dyn Host,
    ) -> Effect {
        self.execute(request, reply)
    }

    /// A hint: `request` runs soon in the open transaction; bring what it will read first
    /// into the caches (see [`Prefetch`]). Must not change anything. The default does nothing.
    fn prefetch(&mut self, _request: &Request, _stage: Prefetch) {}

    /// Commits the transaction; returns once its sync point has completed.
    fn commit(&mut self) -> Result<(), Self::Error>;

    /// Ends a transaction that wrote nothing, without a sync point.
    fn finish_read_only(&mut self);

    /// The connection `session` closed: an engine that keeps per-connection state (WATCHed
    /// keys) forgets it. Called between batches.
    fn disconnected(&mut self, _session: u64) {}

    /// Let [`Engine::commit`] return before its sync point is durable, where the storage
    /// can (a write-ahead pool mapped privately): `notify` is then called from another thread
    /// whenever more became durable, and the caller holds every reply until
    /// [`Engine::ack_marks`] shows its batch durable. `false`: commits stay durable on return.
    /// The default cannot.
    fn defer_acks(&mut self, _notify: std::sync::Arc<dyn Fn() + Send + Sync>) -> bool {
        false
    }

    /// Under [`Engine::defer_acks`], `(appended, durable)`: a batch that ended when
    /// `appended` was `a` is durable once `durable >= a`. `None` when commits are durable on
    /// return; an error once nothing more can become durable.
    fn ack_marks(&self) -> Option<Result<(u64, u64), String>> {
        None
    }
}

/// What [`execute_batch`] reserves for a batch's replies at once.
const REPLIES_RESERVE_BYTES: usize = 4096;

/// A reply ready to be handed back to its session.
#[derive(Debug, PartialEq, Eq)]
pub struct Completion {
    /// The session the request came from.
    pub session: u64,
    /// The encoded reply.
    pub reply: Bytes,
    /// Whether the session must close after this reply.
    pub close: bool,
    /// The database the session has selected from now on, if the command changed it.
    pub select: Option<usize>,
    /// The request blocked (no reply): park it until this deadline.
    pub block: Option<i64>,
}

/// Runs `requests` in one transaction and returns their replies, in request order, once the
/// transaction is durable. On a failed commit returns the error and no reply.
pub fn run_batch<E: Engine>(
    engine: &mut E,
    requests: &[Request],
) -> Result<Vec<Completion>, E::Error> {
    run_batch_hosted(engine, requests, &mut NoHost)
}

/// [`run_batch`], with `host` serving the scripts of the batch ([`Host`]).
pub fn run_batch_hosted<E: Engine>(
    engine: &mut E,
    requests: &[Request],
    host: &mut dyn Host,
) -> Result<Vec<Completion>, E::Error> {
    let (completions, wrote) = execute_batch(engine, requests, host);
    if wrote && host.times_commits() {
        let (wall, cpu) = (std::time::Instant::now(), thread_cpu());
        engine.commit()?;
        host.committed(
            wall.elapsed()
                .saturating_sub(thread_cpu().saturating_sub(cpu)),
        );
    } else if wrote {
        engine.commit()?;
    } else {
        engine.finish_read_only();
    }
    Ok(completions)
}

/// This thread's CPU time so far.
fn thread_cpu() -> std::time::Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Begins the transaction and executes `requests` in it, leaving it open; returns the replies
/// (which must not leave before the commit) and whether any request wrote.
pub(crate) fn execute_batch<E: Engine>(
    engine: &mut E,
    requests: &[Request],
    host: &mut dyn Host,
) -> (Vec<Completion>, bool) {
    // Sized for a batch's usual replies (an HGETALL of YCSB's record is 1.2 KB), so they
    // are written without growing the buffer from nothing, one reallocation per doubling.
    let mut replies = BytesMut::with_capacity(REPLIES_RESERVE_BYTES);
    let mut ends = Vec::with_capacity(requests.len());
    let mut wrote = false;
    engine.begin();
    // A pipeline over the batch: request k's buckets are prefetched, then its entries
    // PREFETCH_DISTANCE requests later, and it runs PREFETCH_DISTANCE requests after that.
    // A batch too short for requests to run between a request's hints and its execution
    // (one client's, a few clients') gains nothing from them: no hints.
    let hint = requests.len() > PREFETCH_DISTANCE;
    let lead = 2 * PREFETCH_DISTANCE;
    for k in 0..requests.len() + lead {
        if let Some(request) = requests.get(k).filter(|_| hint) {
            engine.prefetch(request, Prefetch::Bucket);
        }
        if let Some(request) = k
            .checked_sub(PREFETCH_DISTANCE)
            .and_then(|i| requests.get(i))
            .filter(|_| hint)
        {
            engine.prefetch(request, Prefetch::Entry);
        }
        let Some(request) = k.checked_sub(lead).and_then(|i| requests.get(i)) else {
            continue;
        };
        let mut encoder = Encoder::new(&mut replies, request.protocol);
        let about_connections = matches!(
            request.spec.id,
            CommandId::ClientList
                | CommandId::ClientKill
                | CommandId::ClientPause
                | CommandId::ClientUnpause
        );
        let answered = if about_connections {
            host.connection_command(request)
        } else {
            None
        };
        let effect = match answered {
            Some((reply, close)) => {
                encoder.reply(&reply);
                Effect {
                    close,
                    ..Effect::default()
                }
            }
            None => engine.execute_hosted(request, &mut encoder, host),
        };
        wrote |= effect.wrote;
        ends.push((replies.len(), effect.close, effect.select, effect.block));
    }
    let replies = replies.freeze();
    let mut start = 0;
    let completions = requests
        .iter()
        .zip(ends)
        .map(|(request, (end, close, select, block))| {
            let reply = replies.slice(start.min(end)..end);
            start = end;
            Completion {
                session: request.session,
                reply,
                close,
                select,
                block,
            }
        })
        .collect();
    (completions, wrote)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use mnemo_resp::bytes::Bytes;
    use mnemo_resp::CommandId;

    use super::*;
    use crate::server::{Session, SessionConfig};

    /// A fake engine (GET / SET over a map) that logs every call, so tests can check when
    /// commits happen relative to replies.
    #[derive(Default)]
    struct Recorder {
        committed: HashMap<Bytes, Bytes>,
        open: Option<HashMap<Bytes, Bytes>>,
        log: Vec<String>,
        fail_commit: bool,
        /// Log prefetch hints as well (off: the other tests check the log without them).
        log_prefetch: bool,
    }

    impl Engine for Recorder {
        type Error = &'static str;

        fn begin(&mut self) {
            self.open = Some(self.committed.clone());
            self.log.push("begin".into());
        }

        fn execute(&mut self, request: &Request, reply: &mut Encoder<'_>) -> Effect {
            let map = self.open.get_or_insert_with(HashMap::new);
            let args = request.command.args();
            self.log.push(request.spec.name.into());
            match (request.spec.id, args) {
                (CommandId::Set, [_, key, value, ..]) => {
                    map.insert(key.clone(), value.clone());
                    reply.simple(b"OK");
                    Effect {
                        wrote: true,
                        ..Effect::default()
                    }
                }
                (CommandId::Get, [_, key]) => {
                    match map.get(key) {
                        Some(value) => reply.bulk(value),
                        None => reply.null_bulk(),
                    }
                    Effect::default()
                }
                (CommandId::Shutdown, _) => {
                    reply.simple(b"OK");
                    Effect {
                        close: true,
                        ..Effect::default()
                    }
                }
                _ => {
                    reply.error(b"ERR not in the fake engine");
                    Effect::default()
                }
            }
        }

        fn prefetch(&mut self, request: &Request, stage: Prefetch) {
            if self.log_prefetch {
                let key = request.command.args().get(1).cloned().unwrap_or_default();
                self.log
                    .push(format!("{stage:?} {}", String::from_utf8_lossy(&key)));
            }
        }

        fn commit(&mut self) -> Result<(), &'static str> {
            self.log.push("commit".into());
            if self.fail_commit {
                self.open = None;
                return Err("sync failed");
            }
            self.committed = self.open.take().unwrap_or_default();
            Ok(())
        }

        fn finish_read_only(&mut self) {
            self.open = None;
            self.log.push("read-only".into());
        }
    }

    fn requests(session: &mut Session, input: &[u8]) -> Vec<Request> {
        session.receive(input);
        std::iter::from_fn(|| session.poll_request()).collect()
    }

    #[test]
    fn one_commit_per_batch_and_replies_in_order() {
        let (mut a, mut b) = (
            Session::new(1, SessionConfig::default()),
            Session::new(2, SessionConfig::default()),
        );
        let mut batch = requests(&mut a, b"SET k 1\r\nGET k\r\n");
        batch.extend(requests(&mut b, b"GET k\r\nSET k 2\r\n"));
        let mut engine = Recorder::default();
        let completions = run_batch(&mut engine, &batch).expect("commit");
        assert_eq!(engine.log, ["begin", "set", "get", "get", "set", "commit"]);
        let replies: Vec<(u64, &[u8])> = completions
            .iter()
            .map(|c| (c.session, &c.reply[..]))
            .collect();
        assert_eq!(
            replies,
            [
                (1, &b"+OK\r\n"[..]),
                (1, b"$1\r\n1\r\n"),
                (2, b"$1\r\n1\r\n"),
                (2, b"+OK\r\n")
            ]
        );
        for completion in completions {
            let session = if completion.session == 1 {
                &mut a
            } else {
                &mut b
            };
            session.complete(&completion.reply, completion.close);
        }
        assert_eq!(&a.take_output()[..], b"+OK\r\n$1\r\n1\r\n");
        assert_eq!(&b.take_output()[..], b"$1\r\n1\r\n+OK\r\n");
    }

    /// Every request's buckets are prefetched, then its entries, before it runs; the
    /// requests still run in order, each once.
    #[test]
    fn requests_are_prefetched_ahead_of_running() {
        let mut s = Session::new(1, SessionConfig::default());
        let input: String = (0..12).map(|i| format!("GET k{i}\r\n")).collect();
        let batch = requests(&mut s, input.as_bytes());
        let mut engine = Recorder {
            log_prefetch: true,
            ..Recorder::default()
        };
        run_batch(&mut engine, &batch).expect("read-only");
        let at = |entry: &str| {
            engine
                .log
                .iter()
                .position(|l| l == entry)
                .unwrap_or_else(|| panic!("{entry} missing from {:?}", engine.log))
        };
        let gets: Vec<usize> = engine
            .log
            .iter()
            .enumerate()
            .filter(|(_, l)| *l == "get")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(gets.len(), 12, "each request runs once: {:?}", engine.log);
        for (i, &run) in gets.iter().enumerate() {
            let (bucket, entry) = (at(&format!("Bucket k{i}")), at(&format!("Entry k{i}")));
            assert!(bucket < entry && entry < run, "k{i}: {:?}", engine.log);
        }
        assert_eq!(engine.log.last().map(String::as_str), Some("read-only"));

        // A batch of a few requests runs them without hints.
        let short = requests(&mut s, b"GET a\r\nGET b\r\n");
        let mut engine = Recorder {
            log_prefetch: true,
            ..Recorder::default()
        };
        run_batch(&mut engine, &short).expect("read-only");
        assert_eq!(engine.log, ["begin", "get", "get", "read-only"]);
    }

    #[test]
    fn read_only_batches_skip_the_sync_point() {
        let mut s = Session::new(1, SessionConfig::default());
        let batch = requests(&mut s, b"GET a\r\nGET b\r\n");
        let mut engine = Recorder::default();
        let completions = run_batch(&mut engine, &batch).expect("no commit to fail");
        assert_eq!(engine.log, ["begin", "get", "get", "read-only"]);
        assert_eq!(completions.len(), 2);
    }

    /// A failed sync point releases nothing, reads included.
    #[test]
    fn failed_commit_releases_no_reply() {
        let mut s = Session::new(1, SessionConfig::default());
        let batch = requests(&mut s, b"GET k\r\nSET k v\r\n");
        let mut engine = Recorder {
            fail_commit: true,
            ..Recorder::default()
        };
        assert_eq!(run_batch(&mut engine, &batch), Err("sync failed"));
        assert!(engine.committed.is_empty());
    }

    #[test]
    fn replies_follow_each_session_protocol() {
        let mut s = Session::new(1, SessionConfig::default());
        let batch = requests(&mut s, b"HELLO 3\r\nGET nothing\r\n");
        assert_eq!(batch.len(), 1);
        let completions = run_batch(&mut Recorder::default(), &batch).expect("read-only");
        assert_eq!(&completions[0].reply[..], b"_\r\n");
    }

    #[test]
    fn shutdown_closes_after_its_reply() {
        let mut s = Session::new(1, SessionConfig::default());
        let batch = requests(&mut s, b"SHUTDOWN\r\nPING\r\n");
        let completions = run_batch(&mut Recorder::default(), &batch).expect("read-only");
        for completion in completions {
            s.complete(&completion.reply, completion.close);
        }
        assert!(!s.should_close(), "output not yet taken");
        assert_eq!(&s.take_output()[..], b"+OK\r\n+PONG\r\n");
        assert!(s.should_close());
    }
}
