//! The etcd client, on a thread of its own: a current-thread tokio runtime runs every request
//! and the background tasks (a lease's keep-alive, a watch); callers block on a channel for
//! the answer, each request bounded by the timeout. Nothing async leaves this module.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};

use crate::config::{ClusterConfig, Keys};
use crate::error::{Error, Result};

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;
type Job = Box<dyn FnOnce(Client) -> Task + Send>;

/// A connection to etcd for one cluster's keys.
#[derive(Debug)]
pub struct Control {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    keys: Keys,
    timeout: Duration,
}

/// A lease kept alive in the background; `lost` once a renewal failed or etcd said it expired
/// (from then on its holder must act as if another node took over).
#[derive(Debug, Default)]
pub struct Lease {
    lost: AtomicBool,
    id: std::sync::atomic::AtomicI64,
}

impl Lease {
    /// Whether the lease is lost.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The lease's id in etcd.
    pub fn id(&self) -> i64 {
        self.id.load(Ordering::SeqCst)
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
                    let options = ConnectOptions::new().with_connect_timeout(timeout);
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
        };
        // A first request, so that an etcd that is not there is an error here.
        control.load()?;
        Ok(control)
    }

    /// The cluster's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Run `f` on the client thread and wait for its answer (at most the timeout).
    fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let timeout = self.timeout;
        self.spawn(move |client| async move {
            let result = match tokio::time::timeout(timeout, f(client)).await {
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
        self.call(move |mut c| async move {
            let response = c.get(key.clone(), None).await?;
            match response.kvs().first() {
                None => Ok(None),
                Some(kv) => {
                    let config = ClusterConfig::decode(kv.value())
                        .map_err(|e| Error::Config(format!("{key}: {e}")))?;
                    Ok(Some((config, kv.mod_revision())))
                }
            }
        })
    }

    /// Store `config` if the cluster has none yet; false if another node did first.
    pub fn create(&self, config: &ClusterConfig) -> Result<bool> {
        let key = self.keys.config.clone();
        let value = config.encode();
        self.call(move |mut c| async move {
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, value, None)]);
            Ok(c.txn(txn).await?.succeeded())
        })
    }

    /// Replace the configuration by `config` if it is still at `revision` (the only way the
    /// configuration changes); false if another change came first.
    pub fn swap(&self, revision: i64, config: &ClusterConfig) -> Result<bool> {
        let key = self.keys.config.clone();
        let value = config.encode();
        self.call(move |mut c| async move {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(key, value, None)]);
            Ok(c.txn(txn).await?.succeeded())
        })
    }

    /// The primary's liveness key's value, if its lease holds it.
    pub fn alive(&self) -> Result<Option<String>> {
        let key = self.keys.alive.clone();
        self.call(move |mut c| async move {
            let response = c.get(key, None).await?;
            Ok(response
                .kvs()
                .first()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
        })
    }

    /// Hold the liveness key with `value` under a lease of `ttl_s` seconds, renewed every
    /// third of it in the background until the Control is dropped. etcd may grant a longer
    /// TTL than asked (its minimum is 1.5 election timeouts, rounded up to a second).
    pub fn hold_alive(&self, value: String, ttl_s: i64) -> Result<Arc<Lease>> {
        let key = self.keys.alive.clone();
        let lease = Arc::new(Lease::default());
        let (id, granted) = self.call(move |mut c| async move {
            let grant = c.lease_grant(ttl_s.max(1), None).await?;
            let id = grant.id();
            c.put(key, value, Some(PutOptions::new().with_lease(id)))
                .await?;
            Ok((id, grant.ttl()))
        })?;
        lease.id.store(id, Ordering::SeqCst);
        let every = Duration::from_millis((granted.max(1) as u64) * 1000 / 3);
        let held = Arc::clone(&lease);
        self.spawn(move |mut c| async move {
            let lost = |why: String| {
                tracing::error!(lease = id, "{why}: this primary may have been replaced");
                held.lost.store(true, Ordering::SeqCst);
            };
            let (mut keeper, mut answers) = match c.lease_keep_alive(id).await {
                Ok(pair) => pair,
                Err(e) => return lost(format!("lease keep-alive failed: {e}")),
            };
            loop {
                if let Err(e) = keeper.keep_alive().await {
                    return lost(format!("lease keep-alive failed: {e}"));
                }
                // No answer within the TTL: the lease may have expired meanwhile.
                match tokio::time::timeout(every * 3, answers.message()).await {
                    Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
                    Ok(Ok(Some(_))) => return lost("the lease expired".into()),
                    Ok(Ok(None)) => return lost("etcd closed the keep-alive stream".into()),
                    Ok(Err(e)) => return lost(format!("lease keep-alive failed: {e}")),
                    Err(_) => return lost("no keep-alive answer within the lease's TTL".into()),
                }
                tokio::time::sleep(every).await;
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
