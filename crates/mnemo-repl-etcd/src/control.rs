//! The etcd client, on a thread of its own: a current-thread tokio runtime runs every request
//! and the background tasks (a lease's keep-alive, a watch); callers block on a channel for
//! the answer, each request bounded by the timeout. Nothing async leaves this module.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};

use crate::config::{ClusterConfig, Keys};
use crate::error::{Error, Result};

/// How soon a keep-alive that failed is tried again (a leader election lasts a few hundred
/// milliseconds; the lease's TTL is a second or more).
const RENEW_RETRY: Duration = Duration::from_millis(50);

/// How soon a request that found its member unavailable is made again.
const RETRY_UNAVAILABLE: Duration = Duration::from_millis(20);

/// How long one attempt at a read may take before it is made again (on whichever member the
/// client picks then). A member cut off from its peers accepts requests and, until it notices
/// that it lost its leader (an election timeout or two), leaves them unanswered; a read that
/// landed there would otherwise cost the whole timeout. Reads only: a write retried after an
/// attempt that did commit would find its own change and report a conflict.
const READ_ATTEMPT: Duration = Duration::from_millis(400);

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;
type Job = Box<dyn FnOnce(Client) -> Task + Send>;

/// A connection to etcd for one cluster's keys.
#[derive(Debug)]
pub struct Control {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    keys: Keys,
    timeout: Duration,
    /// Every member's URL: a lease's keep-alive goes to one member at a time, and moves to
    /// the next when its member does not answer.
    endpoints: Vec<String>,
}

/// A lease kept alive in the background. `lost` once etcd said it expired (from then on its
/// holder must act as if another node took over); between renewals it knows until when the
/// last renewal holds ([`Lease::valid`]): a holder that could not renew in time fences itself
/// before the store lets another node take over.
#[derive(Debug)]
pub struct Lease {
    lost: AtomicBool,
    /// etcd revoked the lease before its TTL ran out and its key is being put back under a
    /// new one ([`KeepAlive::run`]): the last renewal no longer counts.
    suspended: AtomicBool,
    id: AtomicI64,
    /// Microseconds after `base` until which the last renewal holds (its request's send time
    /// plus the TTL granted, less [`LEASE_MARGIN_PERCENT`]).
    valid_until_us: AtomicU64,
    /// Renewals answered.
    renewals: AtomicU64,
    base: Instant,
}

/// Part of the TTL a lease holder does not count on: its timer may run slower than the
/// store's, and the store may revoke an expired lease a little early or late.
pub const LEASE_MARGIN_PERCENT: u32 = 10;

impl Default for Lease {
    fn default() -> Lease {
        Lease {
            lost: AtomicBool::new(false),
            suspended: AtomicBool::new(false),
            id: AtomicI64::new(0),
            valid_until_us: AtomicU64::new(0),
            renewals: AtomicU64::new(0),
            base: Instant::now(),
        }
    }
}

impl Lease {
    /// Whether etcd said the lease is gone (or it could not be kept at all).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The lease's id in etcd (a new one once a lease etcd revoked early was replaced).
    pub fn id(&self) -> i64 {
        self.id.load(Ordering::SeqCst)
    }

    /// Whether the last renewal still holds now: false once the holder could not renew it
    /// within its TTL (etcd away, a partition, a leader election), when the store may
    /// already have let it expire, and while a lease etcd revoked early is being replaced.
    pub fn valid(&self) -> bool {
        !self.is_lost()
            && !self.suspended.load(Ordering::SeqCst)
            && self.micros_now() < self.valid_until_us.load(Ordering::SeqCst)
    }

    /// Renewals answered so far (a holder waiting for one watches it move).
    pub fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::SeqCst)
    }

    fn micros_now(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }

    /// A renewal sent at `sent` was answered with `ttl` seconds.
    fn renewed(&self, sent: Instant, ttl_s: i64) {
        let ttl_us = (ttl_s.max(0) as u64) * 1_000_000;
        let until = sent.saturating_duration_since(self.base).as_micros() as u64
            + ttl_us * u64::from(100 - LEASE_MARGIN_PERCENT) / 100;
        self.valid_until_us.fetch_max(until, Ordering::SeqCst);
        self.renewals.fetch_add(1, Ordering::SeqCst);
    }
}

impl Control {
    /// Connect to the etcd at `endpoints` (`http://127.0.0.1:2379`) for cluster `cluster`;
    /// every request is answered or failed within `timeout`.
    pub fn connect(endpoints: &[String], cluster: &str, timeout: Duration) -> Result<Control> {
        let keys = Keys::new(cluster)?;
        let (jobs, mut queue) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let (ready, started) = std::sync::mpsc::sync_channel::<Result<()>>(1);
        let endpoints = endpoints.to_vec();
        let members = endpoints.clone();
        std::thread::Builder::new()
            .name("mnemo-etcd".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready.send(Err(Error::Etcd(format!("tokio runtime: {e}"))));
                        return;
                    }
                };
                runtime.block_on(async move {
                    // No per-request timeout on the channel: it would cut the keep-alive and
                    // watch streams; `call` bounds each request instead.
                    let options = connect_options(timeout);
                    let connected =
                        tokio::time::timeout(timeout, Client::connect(endpoints, Some(options)))
                            .await;
                    let client = match connected {
                        Ok(Ok(c)) => c,
                        Ok(Err(e)) => {
                            let _ = ready.send(Err(e.into()));
                            return;
                        }
                        Err(_) => {
                            let _ = ready.send(Err(Error::Etcd(format!(
                                "no connection within {timeout:?}"
                            ))));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    // Until the Control is dropped; its background tasks end with it.
                    while let Some(job) = queue.recv().await {
                        tokio::spawn(job(client.clone()));
                    }
                });
            })
            .map_err(|e| Error::Etcd(format!("spawning the etcd client thread: {e}")))?;
        started.recv().map_err(|_| Error::Stopped)??;
        let control = Control {
            jobs,
            keys,
            timeout,
            endpoints: members,
        };
        // A first request, so that an etcd that is not there is an error here.
        control.load()?;
        Ok(control)
    }

    /// The cluster's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Run `f` on the client thread and wait for its answer (at most the timeout). A request
    /// that finds its member down or without a leader is made again (the client spreads
    /// requests over every endpoint), until the timeout.
    fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        self.call_with(None, f)
    }

    /// [`Control::call`] for a request that may be made twice (a read): with several
    /// members, an attempt that takes longer than [`READ_ATTEMPT`] is abandoned and made
    /// again (with one, there is no other member to ask, and a slow answer is still one).
    fn read<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let attempt = (self.endpoints.len() > 1).then_some(READ_ATTEMPT);
        self.call_with(attempt, f)
    }

    fn call_with<T, F, Fut>(&self, attempt: Option<Duration>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(Client) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let timeout = self.timeout;
        self.spawn(move |client| async move {
            let attempts = async {
                loop {
                    let answer = match attempt {
                        None => f(client.clone()).await,
                        Some(limit) => match tokio::time::timeout(limit, f(client.clone())).await {
                            Ok(answer) => answer,
                            Err(_) => {
                                Err(Error::Unavailable(format!("no answer within {limit:?}")))
                            }
                        },
                    };
                    match answer {
                        Err(Error::Unavailable(why)) => {
                            tracing::debug!(error = %why, "etcd member unavailable; trying again");
                            tokio::time::sleep(RETRY_UNAVAILABLE).await;
                        }
                        done => return done,
                    }
                }
            };
            let result = match tokio::time::timeout(timeout, attempts).await {
                Ok(r) => r,
                Err(_) => Err(Error::Etcd(format!("no answer within {timeout:?}"))),
            };
            let _ = tx.send(result);
        })?;
        rx.recv().map_err(|_| Error::Stopped)?
    }

    /// Run `f` on the client thread in the background.
    fn spawn<F, Fut>(&self, f: F) -> Result<()>
    where
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.jobs
            .send(Box::new(move |client| Box::pin(f(client))))
            .map_err(|_| Error::Stopped)
    }

    /// The configuration and its `mod_revision` (what a compare-and-swap compares), if any.
    pub fn load(&self) -> Result<Option<(ClusterConfig, i64)>> {
        let key = self.keys.config.clone();
        self.read(move |mut c| {
            let key = key.clone();
            async move {
                let response = c.get(key.clone(), None).await?;
                match response.kvs().first() {
                    None => Ok(None),
                    Some(kv) => {
                        let config = ClusterConfig::decode(kv.value())
                            .map_err(|e| Error::Config(format!("{key}: {e}")))?;
                        Ok(Some((config, kv.mod_revision())))
                    }
                }
            }
        })
    }

    /// Store `config` if the cluster has none yet; false if another node did first.
    pub fn create(&self, config: &ClusterConfig) -> Result<bool> {
        let key = self.keys.config.clone();
        let value = config.encode();
        self.call(move |mut c| {
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
            async move { Ok(c.txn(txn).await?.succeeded()) }
        })
    }

    /// Replace the configuration by `config` if it is still at `revision` (the only way the
    /// configuration changes); false if another change came first.
    pub fn swap(&self, revision: i64, config: &ClusterConfig) -> Result<bool> {
        let key = self.keys.config.clone();
        let value = config.encode();
        self.call(move |mut c| {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
            async move { Ok(c.txn(txn).await?.succeeded()) }
        })
    }

    /// The member that answers (the first endpoint of a Control connected to one) and its
    /// cluster's leader, by member id (tests: which member to kill).
    pub fn member_status(&self) -> Result<(u64, u64)> {
        self.read(move |mut c| async move {
            let status = c.status().await?;
            let member = status.header().map_or(0, |h| h.member_id());
            Ok((member, status.leader()))
        })
    }

    /// The primary's liveness key's value, if its lease holds it.
    pub fn alive(&self) -> Result<Option<String>> {
        let key = self.keys.alive.clone();
        self.read(move |mut c| {
            let key = key.clone();
            async move {
                let response = c.get(key, None).await?;
                Ok(response
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
            }
        })
    }

    /// Hold the liveness key with `value` under a lease of `ttl_s` seconds, renewed every
    /// third of it in the background until the Control is dropped. etcd may grant a longer
    /// TTL than asked (its minimum is 1.5 election timeouts, rounded up to a second).
    ///
    /// `primary` is the holder's name in the configuration: should etcd revoke the lease
    /// while its last renewal still holds (etcd 3.4.23 does, when a leader that was stopped
    /// longer than the TTL comes back: etcd issue 15247), the key is put back under a new
    /// lease if the configuration still names `primary` (a mirror that took over names
    /// itself) (the keep-alive task, `KeepAlive::run`).
    pub fn hold_alive(&self, value: String, ttl_s: i64, primary: &str) -> Result<Arc<Lease>> {
        let reclaim = Reclaim {
            config_key: self.keys.config.clone(),
            primary: primary.to_string(),
        };
        self.hold(self.keys.alive.clone(), value, ttl_s, Some(reclaim))
    }

    /// Register this node (a mirror or a backup, by its replication address `addr`) as one
    /// a primary may take as its mirror: `/mnemo/<cluster>/nodes/<addr>` = `role`, under a
    /// lease of its own (the key goes when the node does).
    pub fn register_node(&self, addr: &str, role: &str, ttl_s: i64) -> Result<Arc<Lease>> {
        self.hold(
            format!("{}{addr}", self.keys.nodes),
            role.to_string(),
            ttl_s,
            None,
        )
    }

    /// Withdraw this node's registration (a mirror about to become primary: it is no longer
    /// one a primary may take as mirror). Its lease is revoked with it.
    pub fn unregister_node(&self, addr: &str, lease: &Lease) -> Result<()> {
        let key = format!("{}{addr}", self.keys.nodes);
        let id = lease.id();
        self.call(move |mut c| {
            let key = key.clone();
            async move {
                c.delete(key, None).await?;
                c.lease_revoke(id).await?;
                Ok(())
            }
        })
    }

    /// Revoke lease `id` now (its keys go with it): an operator's `etcdctl lease revoke`;
    /// tests make with it what etcd 3.4.23 does to a live lease (etcd issue 15247).
    pub fn revoke(&self, id: i64) -> Result<()> {
        self.call(move |mut c| async move {
            c.lease_revoke(id).await?;
            Ok(())
        })
    }

    /// The registered nodes: (replication address, role), sorted by address.
    pub fn nodes(&self) -> Result<Vec<(String, String)>> {
        let prefix = self.keys.nodes.clone();
        self.read(move |mut c| {
            let prefix = prefix.clone();
            async move {
                let response = c
                    .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
                    .await?;
                let mut nodes: Vec<(String, String)> = response
                    .kvs()
                    .iter()
                    .filter_map(|kv| {
                        let key = std::str::from_utf8(kv.key()).ok()?;
                        let addr = key.strip_prefix(prefix.as_str())?.to_string();
                        Some((addr, String::from_utf8_lossy(kv.value()).into_owned()))
                    })
                    .collect();
                nodes.sort();
                Ok(nodes)
            }
        })
    }

    /// Hold `key` with `value` under a lease of `ttl_s` seconds (see [`Control::hold_alive`]).
    ///
    /// The keep-alive survives what a cluster of several members does: a member killed, a
    /// leader election, and a member cut off from its peers, which accepts the keep-alive and
    /// never answers it (it cannot reach the leader). Each keep-alive goes to one member at a
    /// time; with several, one not answered within a quarter of the TTL (a healthy member
    /// answers in milliseconds) is sent at once to the next member, so that a renewal through the
    /// members left arrives before the last one ran out (0.9 TTL). The lease is lost when
    /// etcd says it is gone, but for one case with `reclaim` ([`KeepAlive::run`]). Until then
    /// [`Lease::valid`] says whether the last renewal still holds.
    fn hold(
        &self,
        key: String,
        value: String,
        ttl_s: i64,
        reclaim: Option<Reclaim>,
    ) -> Result<Arc<Lease>> {
        let lease = Arc::new(Lease::default());
        let sent = Instant::now();
        // Granted once: a grant retried after an unanswered one could leave a lease behind,
        // which expires by itself.
        let (id, granted) = self.call({
            let (key, value) = (key.clone(), value.clone());
            move |mut c| {
                let (key, value) = (key.clone(), value.clone());
                async move {
                    let grant = c.lease_grant(ttl_s.max(1), None).await?;
                    let id = grant.id();
                    c.put(key, value, Some(PutOptions::new().with_lease(id)))
                        .await?;
                    Ok((id, grant.ttl()))
                }
            }
        })?;
        lease.id.store(id, Ordering::SeqCst);
        lease.renewed(sent, granted);
        let ttl = Duration::from_secs(granted.max(1) as u64);
        let keeper = KeepAlive {
            key,
            value,
            ttl_s: ttl_s.max(1),
            reclaim,
            held: Arc::clone(&lease),
            endpoints: self.endpoints.clone(),
            connect_timeout: self.timeout,
            every: ttl / 3,
            // Past this without an answer, the next member is asked (a single member is
            // waited for as long as a renewal can still help).
            answer_wait: if self.endpoints.len() > 1 {
                ttl / 4
            } else {
                ttl
            },
        };
        self.spawn(move |balanced| keeper.run(balanced, id, granted))?;
        Ok(lease)
    }

    /// Send on `wake` whenever the liveness key changes (the primary's lease expiring deletes
    /// it), until `wake`'s receiver is dropped. A watch that breaks is made again.
    pub fn watch_alive(&self, wake: std::sync::mpsc::Sender<()>) -> Result<()> {
        let key = self.keys.alive.clone();
        self.spawn(move |mut c| async move {
            loop {
                if let Ok(mut stream) = c.watch(key.clone(), None).await {
                    while let Ok(Some(_)) = stream.message().await {
                        if wake.send(()).is_err() {
                            return;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                if wake.send(()).is_err() {
                    return;
                }
            }
        })
    }
}

/// What the liveness key's holder may put back when etcd revokes its lease early: the
/// configuration's key, and the holder's name there (it must still be the primary).
#[derive(Debug, Clone)]
struct Reclaim {
    config_key: String,
    primary: String,
}

/// How the background task of [`Control::hold`] keeps one key's lease.
struct KeepAlive {
    key: String,
    value: String,
    ttl_s: i64,
    reclaim: Option<Reclaim>,
    held: Arc<Lease>,
    endpoints: Vec<String>,
    connect_timeout: Duration,
    every: Duration,
    answer_wait: Duration,
}

/// Why a keep-alive stream ended.
enum Broke {
    /// etcd says the lease is gone.
    Gone(String),
    /// The member did not answer, refused, or the stream broke: the next member is asked.
    Failed(String),
}

impl KeepAlive {
    /// Renew until etcd says the lease is gone, or until the Control is dropped.
    ///
    /// With a [`Reclaim`], the key is watched (a change sends the next keep-alive at once)
    /// and a lease that etcd says is gone while its last renewal still holds here was revoked
    /// early, not expired: etcd 3.4.23 revokes every lease a leader held when that leader
    /// comes back from a stop (SIGSTOP, a stall) longer than their TTL, before it learns
    /// that another leader renewed them meanwhile (etcd issue 15247). The key is then put
    /// back under a new lease in one transaction with the configuration itself, if the
    /// configuration still names this holder as primary at the revision just read (the
    /// rewrite makes a takeover prepared against that revision fail; one made first names
    /// another primary, and the lease is lost). [`Lease::valid`] is false meanwhile, so its
    /// holder acknowledges nothing until the key is back; a mirror waits
    /// [`crate::takeover::GONE_FOR`] before it takes over a key that went. Without a reclaim
    /// (or once the last renewal ran out), gone means lost.
    async fn run(self, balanced: Client, mut id: i64, mut granted: i64) {
        let poke = Arc::new(tokio::sync::Notify::new());
        let watcher = self.reclaim.as_ref().map(|_| {
            tokio::spawn(poke_on_change(
                balanced.clone(),
                self.key.clone(),
                Arc::clone(&poke),
            ))
        });
        let held = &self.held;
        let lost = |why: String| {
            tracing::error!(lease = held.id(), "{why}: this node may have been replaced");
            held.lost.store(true, Ordering::SeqCst);
        };
        let endpoints = &self.endpoints;
        // One client per member, made when first used (with a single endpoint, the client
        // every request uses).
        let mut members: Vec<Option<Client>> = vec![None; endpoints.len()];
        let mut turn = 0usize;
        let answer_wait = self.answer_wait;
        loop {
            let member = turn % endpoints.len().max(1);
            turn += 1;
            let mut c = if endpoints.len() < 2 {
                balanced.clone()
            } else if let Some(c) = &members[member] {
                c.clone()
            } else {
                let options = connect_options(self.connect_timeout);
                // Lazy: the connection is made by the first request, which is bounded below.
                match Client::connect([endpoints[member].as_str()], Some(options)).await {
                    Ok(c) => {
                        members[member] = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        tracing::warn!(lease = id, member = %endpoints[member], error = %e, "cannot reach an etcd member for the lease's keep-alive");
                        tokio::time::sleep(RENEW_RETRY).await;
                        continue;
                    }
                }
            };
            // Opening the stream sends a first keep-alive and waits for its answer.
            let sent = Instant::now();
            let attempt = sent;
            let broke = match tokio::time::timeout(answer_wait, c.lease_keep_alive(id)).await {
                Err(_) => Broke::Failed(format!("no keep-alive answer within {answer_wait:?}")),
                Ok(Err(e)) => Broke::Failed(e.to_string()),
                Ok(Ok((mut keeper, mut answers))) => {
                    // Answered: the stream's opening read the first answer (a lease gone
                    // fails it, "lease not found").
                    held.renewed(sent, granted);
                    loop {
                        // The next renewal, or at once when the key changed.
                        let _ = tokio::time::timeout(self.every, poke.notified()).await;
                        let sent = Instant::now();
                        if let Err(e) = keeper.keep_alive().await {
                            break Broke::Failed(e.to_string());
                        }
                        match tokio::time::timeout(answer_wait, answers.message()).await {
                            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                                held.renewed(sent, answer.ttl());
                            }
                            Ok(Ok(Some(_))) => break Broke::Gone("the lease expired".into()),
                            Ok(Ok(None)) => {
                                break Broke::Failed("etcd closed the keep-alive stream".into())
                            }
                            Ok(Err(e)) => break Broke::Failed(e.to_string()),
                            Err(_) => {
                                break Broke::Failed(format!(
                                    "no keep-alive answer within {answer_wait:?}"
                                ))
                            }
                        }
                    }
                }
            };
            let broke = match broke {
                Broke::Failed(e) if e.contains("not found") || e.contains("expired") => {
                    Broke::Gone(e)
                }
                other => other,
            };
            match broke {
                Broke::Gone(why) => {
                    // Revoked early only if the last renewal still held when etcd said so.
                    let early = held.valid();
                    let Some(reclaim) = self.reclaim.as_ref().filter(|_| early) else {
                        return end(watcher, || lost(format!("lease keep-alive failed: {why}")));
                    };
                    held.suspended.store(true, Ordering::SeqCst);
                    tracing::warn!(lease = id, error = %why, "etcd revoked this lease before its TTL ran out (a leader that was stopped, come back?): putting the key back under a new lease");
                    match self.put_back(&balanced, reclaim).await {
                        Ok((new_id, ttl, sent)) => {
                            id = new_id;
                            granted = ttl;
                            held.id.store(new_id, Ordering::SeqCst);
                            held.renewed(sent, ttl);
                            held.suspended.store(false, Ordering::SeqCst);
                            tracing::warn!(lease = new_id, "the key is back under a new lease");
                            // Its keep-alive on the member that answered last.
                            turn -= 1;
                            continue;
                        }
                        Err(why) => {
                            return end(watcher, || {
                                lost(format!("the lease was revoked early and {why}"))
                            })
                        }
                    }
                }
                Broke::Failed(broke) => {
                    let at = endpoints.get(member).map_or("", String::as_str);
                    tracing::warn!(lease = id, member = at, error = %broke, valid = held.valid(), "lease keep-alive failed; trying again on the next member");
                }
            }
            // The next member at once after a member that kept it waiting; after a pause
            // when it failed at once (refused, no leader) or there is no other.
            if endpoints.len() < 2 || attempt.elapsed() < RENEW_RETRY {
                tokio::time::sleep(RENEW_RETRY).await;
            }
        }
    }

    /// Put the key back under a new lease ([`KeepAlive::run`]), trying for at most a TTL
    /// (its holder waits that long for a renewal before it fences itself): the new lease's
    /// id and TTL, and when its grant was sent. Err when the configuration names another
    /// primary, or when no attempt succeeded within the TTL (the configuration changing
    /// between an attempt's read and its transaction, the key held by another, etcd away).
    async fn put_back(
        &self,
        balanced: &Client,
        reclaim: &Reclaim,
    ) -> std::result::Result<(i64, i64, Instant), String> {
        let deadline = Instant::now() + Duration::from_secs(self.ttl_s as u64);
        let mut last = String::new();
        while Instant::now() < deadline {
            let sent = Instant::now();
            let attempt = self.put_back_once(balanced.clone(), reclaim);
            match tokio::time::timeout(self.answer_wait * 2, attempt).await {
                Ok(Ok(PutBack::Done(id, ttl))) => return Ok((id, ttl, sent)),
                Ok(Ok(PutBack::Refused)) => {
                    return Err(format!(
                        "the configuration no longer names {} as its primary",
                        reclaim.primary
                    ))
                }
                // The configuration changed between the read and the transaction (a record
                // of the mirror, or a takeover: the next read says which).
                Ok(Ok(PutBack::Changed)) => last = "the configuration changed meanwhile".into(),
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => last = format!("no answer within {:?}", self.answer_wait * 2),
            }
            tokio::time::sleep(RENEW_RETRY).await;
        }
        Err(format!("it could not be put back within its TTL: {last}"))
    }

    /// One attempt of [`KeepAlive::put_back`].
    async fn put_back_once(&self, mut c: Client, reclaim: &Reclaim) -> Result<PutBack> {
        let got = c.get(reclaim.config_key.clone(), None).await?;
        let Some(kv) = got.kvs().first() else {
            return Ok(PutBack::Refused);
        };
        let config = ClusterConfig::decode(kv.value())?;
        if config.primary != reclaim.primary {
            return Ok(PutBack::Refused);
        }
        let (revision, current) = (kv.mod_revision(), kv.value().to_vec());
        // An attempt whose answer was lost may have put it back already (the value names
        // this holder and its epoch: nobody else writes it).
        let held = c.get(self.key.clone(), None).await?;
        if let Some(kv) = held.kvs().first() {
            if kv.value() == self.value.as_bytes() && kv.lease() != 0 {
                return Ok(PutBack::Done(kv.lease(), self.ttl_s));
            }
        }
        let grant = c.lease_grant(self.ttl_s, None).await?;
        // The configuration rewritten as it is: a takeover prepared against its revision
        // fails, and one made before this fails this.
        let txn = Txn::new()
            .when([
                Compare::mod_revision(reclaim.config_key.clone(), CompareOp::Equal, revision),
                Compare::version(self.key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([
                TxnOp::put(reclaim.config_key.clone(), current, None),
                TxnOp::put(
                    self.key.clone(),
                    self.value.clone(),
                    Some(PutOptions::new().with_lease(grant.id())),
                ),
            ]);
        if c.txn(txn).await?.succeeded() {
            Ok(PutBack::Done(grant.id(), grant.ttl()))
        } else {
            // Best effort: it would expire by itself.
            let _ = c.lease_revoke(grant.id()).await;
            Ok(PutBack::Changed)
        }
    }
}

/// What one attempt to put a key back found.
enum PutBack {
    /// Put back: the new lease's id and TTL.
    Done(i64, i64),
    /// The configuration names another primary, or none.
    Refused,
    /// The configuration changed between the attempt's read and its transaction (a record
    /// of the mirror, or a takeover: the next attempt's read says which), or the key is
    /// held again.
    Changed,
}

/// End a keep-alive: stop its watch, then `finish`.
fn end(watcher: Option<tokio::task::JoinHandle<()>>, finish: impl FnOnce()) {
    if let Some(w) = watcher {
        w.abort();
    }
    finish();
}

/// Wake `poke` whenever `key` changes (its lease revoked deletes it), until aborted. A watch
/// that breaks is made again.
async fn poke_on_change(mut c: Client, key: String, poke: Arc<tokio::sync::Notify>) {
    loop {
        if let Ok(mut stream) = c.watch(key.clone(), None).await {
            while let Ok(Some(answer)) = stream.message().await {
                if !answer.events().is_empty() {
                    poke.notify_one();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How every client of this crate connects: within `timeout`, and asking each member to
/// refuse a request when it has no leader (`Unavailable`, tried again on another member)
/// rather than hold it until its own timeout, as a member cut off from its peers would.
fn connect_options(timeout: Duration) -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_require_leader(true)
}
