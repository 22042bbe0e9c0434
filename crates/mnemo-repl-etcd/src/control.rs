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

    /// The lease's id in etcd.
    pub fn id(&self) -> i64 {
        self.id.load(Ordering::SeqCst)
    }

    /// Whether the last renewal still holds now: false once the holder could not renew it
    /// within its TTL (etcd away, a partition, a leader election), when the store may
    /// already have let it expire.
    pub fn valid(&self) -> bool {
        !self.is_lost() && self.micros_now() < self.valid_until_us.load(Ordering::SeqCst)
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
    pub fn hold_alive(&self, value: String, ttl_s: i64) -> Result<Arc<Lease>> {
        self.hold(self.keys.alive.clone(), value, ttl_s)
    }

    /// Register this node (a mirror or a backup, by its replication address `addr`) as one
    /// a primary may take as its mirror: `/mnemo/<cluster>/nodes/<addr>` = `role`, under a
    /// lease of its own (the key goes when the node does).
    pub fn register_node(&self, addr: &str, role: &str, ttl_s: i64) -> Result<Arc<Lease>> {
        self.hold(
            format!("{}{addr}", self.keys.nodes),
            role.to_string(),
            ttl_s,
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
    /// members left arrives before the last one ran out (0.9 TTL). The lease is lost only when
    /// etcd says it expired. Until then [`Lease::valid`] says whether the last renewal still
    /// holds.
    fn hold(&self, key: String, value: String, ttl_s: i64) -> Result<Arc<Lease>> {
        let lease = Arc::new(Lease::default());
        let sent = Instant::now();
        // Granted once: a grant retried after an unanswered one could leave a lease behind,
        // which expires by itself.
        let (id, granted) = self.call(move |mut c| {
            let (key, value) = (key.clone(), value.clone());
            async move {
                let grant = c.lease_grant(ttl_s.max(1), None).await?;
                let id = grant.id();
                c.put(key, value, Some(PutOptions::new().with_lease(id)))
                    .await?;
                Ok((id, grant.ttl()))
            }
        })?;
        lease.id.store(id, Ordering::SeqCst);
        lease.renewed(sent, granted);
        let ttl = Duration::from_secs(granted.max(1) as u64);
        let every = ttl / 3;
        // Past this without an answer, the next member is asked (a single member is waited
        // for as long as a renewal can still help).
        let answer_wait = if self.endpoints.len() > 1 {
            ttl / 4
        } else {
            ttl
        };
        let held = Arc::clone(&lease);
        let endpoints = self.endpoints.clone();
        let connect_timeout = self.timeout;
        self.spawn(move |balanced| async move {
            let lost = |why: String| {
                tracing::error!(lease = id, "{why}: this node may have been replaced");
                held.lost.store(true, Ordering::SeqCst);
            };
            // One client per member, made when first used (with a single endpoint, the
            // client every request uses).
            let mut members: Vec<Option<Client>> = vec![None; endpoints.len()];
            let mut turn = 0usize;
            loop {
                let member = turn % endpoints.len().max(1);
                turn += 1;
                let mut c = if endpoints.len() < 2 {
                    balanced.clone()
                } else if let Some(c) = &members[member] {
                    c.clone()
                } else {
                    let options = connect_options(connect_timeout);
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
                let broke = match tokio::time::timeout(answer_wait, c.lease_keep_alive(id)).await
                {
                    Err(_) => format!("no keep-alive answer within {answer_wait:?}"),
                    Ok(Err(e)) => e.to_string(),
                    Ok(Ok((mut keeper, mut answers))) => {
                        held.renewed(sent, granted);
                        loop {
                            tokio::time::sleep(every).await;
                            let sent = Instant::now();
                            if let Err(e) = keeper.keep_alive().await {
                                break e.to_string();
                            }
                            match tokio::time::timeout(answer_wait, answers.message()).await {
                                Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                                    held.renewed(sent, answer.ttl());
                                }
                                Ok(Ok(Some(_))) => return lost("the lease expired".into()),
                                Ok(Ok(None)) => break "etcd closed the keep-alive stream".into(),
                                Ok(Err(e)) => break e.to_string(),
                                Err(_) => {
                                    break format!("no keep-alive answer within {answer_wait:?}")
                                }
                            }
                        }
                    }
                };
                if broke.contains("not found") || broke.contains("expired") {
                    return lost(format!("lease keep-alive failed: {broke}"));
                }
                let at = endpoints.get(member).map_or("", String::as_str);
                tracing::warn!(lease = id, member = at, error = %broke, valid = held.valid(), "lease keep-alive failed; trying again on the next member");
                // The next member at once after a member that kept it waiting; after a pause
                // when it failed at once (refused, no leader) or there is no other.
                if endpoints.len() < 2 || attempt.elapsed() < RENEW_RETRY {
                    tokio::time::sleep(RENEW_RETRY).await;
                }
            }
        })?;
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

/// How every client of this crate connects: within `timeout`, and asking each member to
/// refuse a request when it has no leader (`Unavailable`, tried again on another member)
/// rather than hold it until its own timeout, as a member cut off from its peers would.
fn connect_options(timeout: Duration) -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_require_leader(true)
}
