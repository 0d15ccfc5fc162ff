//! The client, the public entry point: it connects (one Redis, or N masters
//! for Redlock), builds the shared services and hands out the primitives
//! (locks, queues, consistency helpers, fenced writes). It is the top of the
//! library's layers: it may name everything below, and nothing below names it
//! (see ARCHITECTURE.md).

use crate::error::secs;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::backend::server::ServerInfo;
use crate::backend::{Backend, Deployment, TlsConfig, Topology};
use crate::consistency::{Stock, Versioned};
use crate::election::{Election, ElectionShared};
use crate::error::{Error, Result};
use crate::fair::{FairLock, FairNode, FairShared};
use crate::keys::{DEFAULT_KEY_PREFIX, key_root, validate_prefix};
use crate::lock::{HeldLock, Lock, Locks, MultiLock, Node, Nodes, Quorum, ReleaseAll};
use crate::metrics::LockNames;
use crate::queue::Queue;
use crate::rwlock::{RwLock, RwNode, RwShared};
use crate::semaphore::{Semaphore, Semaphores};
use crate::services::held::{Shared, release_all};
use crate::services::wakeups::Wakeups;
use crate::token::Fence;

/// The kinds of lock [`Client::lock_names`] finds (the mutex has
/// [`Client::held_locks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// Fair locks ([`Client::fair_lock`]).
    Fair,
    /// Read-write locks ([`Client::rwlock`]).
    RwLock,
    /// Semaphores ([`Client::semaphore`]).
    Semaphore,
    /// Leader elections ([`Client::election`]).
    Election,
}

/// The default deadline of one call to Redis.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

struct ClientInner {
    /// Where locks live and the services they share.
    locks: Arc<Locks>,
    /// The semaphores' shared state (their watchdog and held permits).
    semaphores: Arc<Semaphores>,
    /// The fair locks' registry and watchdog.
    fair: Arc<FairShared>,
    /// The fair locks' batcher of acquires and releases (`None` under Redlock).
    fair_node: Option<FairNode>,
    /// The read-write locks' registry and watchdog.
    rw: Arc<RwShared>,
    /// The read-write lock's batcher (shared by every `RwLock` of the client).
    rw_node: RwNode,
    /// The leaderships' registry and watchdog.
    election: Arc<ElectionShared>,
    /// The root of every key (`dlm:`, or the key prefix).
    root: Arc<str>,
    /// For dedicated connections (a worker's blocking wait, pub/sub), when known.
    deployment: Option<Arc<Deployment>>,
    /// The defect this client was built with (dlm's checker tests only).
    #[cfg(feature = "seeded-defects")]
    seeded: Option<crate::seeded::SeededDefect>,
}

/// Options for a [`Client`]; finish with [`ClientBuilder::connect`] or
/// [`ClientBuilder::connection`].
///
/// ```no_run
/// # async fn demo() -> dlm::Result<()> {
/// use std::time::Duration;
/// let client = dlm::Client::builder()
///     .key_prefix("myapp")
///     .timeout(Duration::from_millis(500))
///     .connect("redis://127.0.0.1:6379")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    node_timeout: Option<Duration>,
    quorum_wait: Option<Duration>,
    wakeup_url: Option<String>,
    tls: Option<TlsConfig>,
    metrics_lock_names: usize,
    lazy: bool,
    native_commands: bool,
    #[cfg(feature = "seeded-defects")]
    seeded: Option<crate::seeded::SeededDefect>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            prefix: DEFAULT_KEY_PREFIX.into(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_TIMEOUT,
            node_timeout: None,
            quorum_wait: None,
            wakeup_url: None,
            tls: None,
            metrics_lock_names: 0,
            lazy: false,
            native_commands: true,
            #[cfg(feature = "seeded-defects")]
            seeded: None,
        }
    }
}

fn validate_timeout(what: &'static str, d: Duration) -> Result<()> {
    if d.is_zero() || d > Duration::from_secs(3600) {
        return Err(Error::invalid(
            what,
            format!("{} is outside (0, 3600] seconds", secs(d)),
        ));
    }
    Ok(())
}

/// The scripts loaded whenever a connection to one Redis is made: every
/// primitive's (Redlock nodes load the mutex's only).
fn preloaded_scripts() -> Vec<&'static redis::Script> {
    let mut scripts = crate::lock::preloaded_scripts();
    scripts.extend(crate::semaphore::preloaded_scripts());
    scripts.extend(crate::fair::preloaded_scripts());
    scripts.extend(crate::rwlock::preloaded_scripts());
    scripts.extend(crate::election::preloaded_scripts());
    scripts
}

/// Wait until `needed` nodes are connected (`Ok(true)`), or every node has
/// connected or failed an attempt without a majority (`Ok(false)`: they keep
/// trying in the background); an error no retry can fix ends the wait.
async fn majority_up(backends: &[Backend], needed: usize) -> Result<bool> {
    loop {
        let mut up = 0;
        let mut settled = 0;
        for b in backends {
            let (is_up, failure, failed) = b.connecting();
            if let Some(e) = failure {
                return Err(e.into_error());
            }
            up += usize::from(is_up);
            settled += usize::from(is_up || failed > 0);
        }
        if up >= needed {
            return Ok(true);
        }
        if settled == backends.len() {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

impl ClientBuilder {
    /// The key prefix of everything this client touches (default `dlm:`;
    /// at most 128 bytes, not empty, no `{` or `}`): every lock, queue and
    /// helper key starts with it, followed by a `:` when it does not end
    /// with one. `key_prefix("myapp")` keeps lock `orders:42` at
    /// `myapp:lock:{orders:42}`, queue `mail` at `myapp:queue:{mail}:...`,
    /// semaphore `pool` at `myapp:sem:{pool}`, and so on; the keys that
    /// belong together keep one `{hash tag}` (one Redis Cluster slot).
    /// Without it the keys are `dlm:lock:{orders:42}`, ... as always. A raw
    /// key ([`crate::Lock::raw_key`]) is exactly its name, outside the prefix.
    ///
    /// It used to be the prefix of lock keys only (`myapp:lock:` in place
    /// of `dlm:lock:`; see the CHANGELOG): a client that set it finds its
    /// locks under `PREFIX:lock:` now.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Connect lazily (default: no): [`ClientBuilder::connect`] and
    /// [`ClientBuilder::connect_cluster`] return at once and connect in the
    /// background; a call made before the connection is up waits for it
    /// within its own deadline, and a server that cannot be reached shows
    /// as that call's error ([`Error::Timeout`], or the refusal, e.g.
    /// [`Error::Auth`]). For processes that start before Redis does.
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// The deadline of every call to Redis (default 2 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The deadline for connecting (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Redlock: the deadline of one node's answer during acquire and extend,
    /// for every lock of this client (default 1% of the TTL, at least 50 ms,
    /// at most the call timeout; [`crate::LockOptions::node_timeout`] sets it
    /// per acquisition). A slow or frozen node delays an acquisition by at
    /// most this much, and only when its answer is needed for a majority.
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .node_timeout(std::time::Duration::from_millis(50))
    ///     .connect_many(&["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Redlock: how long [`ClientBuilder::connect_many`] waits for a majority
    /// of the nodes to be connected (default: the connect timeout plus the
    /// call timeout). It returns as soon as a majority is connected, or once
    /// every node has failed an attempt; the others keep connecting in the
    /// background either way. Zero returns at once: the first requests then
    /// wait for their node's connection within their own deadline (what a
    /// short-lived command wants, so that frozen nodes cost it nothing).
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .quorum_wait(std::time::Duration::ZERO)
    ///     .connect_many(&["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn quorum_wait(mut self, wait: Duration) -> Self {
        self.quorum_wait = Some(wait);
        self
    }

    /// TLS for `rediss://` URLs: the CA to trust and a client certificate
    /// for mutual TLS (see [`TlsConfig`]); applies to every kind of
    /// connection this builder makes. Without it, `rediss://` trusts the
    /// system's roots and presents no certificate. Needs the `tls` feature
    /// (on by default): without it, connecting fails with
    /// [`Error::InvalidArgument`] naming the feature.
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .tls(dlm::TlsConfig::default().ca("ca.crt").client_cert("client.crt", "client.key"))
    ///     .connect("rediss://redis.internal:6380")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    /// With [`ClientBuilder::connection`]: where to open the pub/sub
    /// connection that delivers release wake-ups and a queue worker's blocking
    /// connection. Without it, a client built on a given connection waits by
    /// polling (at the retry interval, or a worker's idle wait).
    pub fn wakeup_url(mut self, url: impl Into<String>) -> Self {
        self.wakeup_url = Some(url.into());
        self
    }

    /// Label this client's lock metrics (see [`crate::metrics`]) with the
    /// lock's name (`lock="NAME"`), for the first `n` distinct names it locks;
    /// every later name is labelled `lock="other"`. Default 0: no `lock`
    /// label, as every distinct name would be a time series of its own.
    /// Costs a small allocation per lock metric recorded when `n > 0`.
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .metrics_lock_names(20)            // a handful of well-known locks
    ///     .connect("redis://127.0.0.1:6379")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn metrics_lock_names(mut self, n: usize) -> Self {
        self.metrics_lock_names = n;
        self
    }

    /// Use the server's native commands where it has them (the default):
    /// on Valkey 9, a lock's release is `DELIFEQ` and its extend `SET ...
    /// IFEQ`, without Lua; elsewhere, and with `false`, scripts. Both paths
    /// decide alike (`tests/native_paths.rs` runs them side by side); turn
    /// them off to rule them out, or to compare. A server that refuses a
    /// native command (a proxy that renames it, an ACL without
    /// [`crate::keys::ACL_RULES_NATIVE`]) gets the script after one warning
    /// anyway. On a Redis Cluster dlm uses scripts (nodes may differ during a
    /// rolling upgrade).
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .native_commands(false)
    ///     .connect("redis://127.0.0.1:6379")
    ///     .await?;
    /// assert!(client.server_info().await?[0].native().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn native_commands(mut self, on: bool) -> Self {
        self.native_commands = on;
        self
    }

    /// Put a fixed defect back in this client (the last call wins), so that
    /// dlm's own checker tests can show every checker failing on it
    /// (`tests/seeded_defects_caught.rs`). Only with the `seeded-defects`
    /// feature, which is for those tests alone: **never enable it in
    /// production**. The defect is this client's: other clients, also in the
    /// same process, behave as fixed. See [`crate::SeededDefect`].
    #[doc(hidden)]
    #[cfg(feature = "seeded-defects")]
    pub fn seeded_defect(mut self, defect: crate::seeded::SeededDefect) -> Self {
        self.seeded = Some(defect);
        self
    }

    fn validate(&self) -> Result<()> {
        validate_prefix(&self.prefix)?;
        if self.prefix.is_empty() {
            return Err(Error::invalid("key prefix", "must not be empty"));
        }
        validate_timeout("timeout", self.timeout)?;
        if let Some(t) = self.node_timeout {
            validate_timeout("node timeout", t)?;
        }
        if let Some(w) = self.quorum_wait
            && w > Duration::from_secs(3600)
        {
            return Err(Error::invalid(
                "quorum wait",
                format!("{} is over 3600 seconds", secs(w)),
            ));
        }
        validate_timeout("connect timeout", self.connect_timeout)
    }

    /// The TLS certificates, read from their files (when TLS is set).
    fn certificates(&self) -> Result<Option<crate::backend::Certificates>> {
        self.tls.as_ref().map(TlsConfig::certificates).transpose()
    }

    /// A client on `deployment`: its shared connection, wake-ups and
    /// dedicated connections.
    async fn on(self, deployment: Deployment) -> Result<Client> {
        let deployment = Arc::new(deployment);
        let backend = if self.lazy {
            deployment.connect_in_background(
                self.connect_timeout,
                self.timeout,
                preloaded_scripts(),
            )
        } else {
            deployment
                .connect(self.connect_timeout, self.timeout, preloaded_scripts())
                .await?
        };
        let wakeups = Some(Wakeups::new(deployment.clone(), self.timeout));
        Ok(self.finish(
            Nodes::Single(Node::new(backend, tokio_util::task::TaskTracker::new())),
            wakeups,
            Some(deployment),
        ))
    }

    /// Redlock over independent masters (one URL: a plain single-Redis
    /// client). A lock counts only when a majority (N/2+1) granted it within
    /// its validity; see the crate docs' Safety section. The nodes connect in
    /// parallel, each in the background; this returns as soon as a majority
    /// is connected (see [`ClientBuilder::quorum_wait`]), and nodes that are
    /// down or frozen now join once they answer.
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .connect_many(&["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_many(self, urls: &[impl AsRef<str>]) -> Result<Client> {
        self.validate()?;
        match urls {
            [] => return Err(Error::invalid("Redis URLs", "at least one node is needed")),
            [one] => return self.connect(one.as_ref()).await,
            _ => {}
        }
        let nodes: Vec<Topology> = urls
            .iter()
            .map(|u| Topology::standalone(u.as_ref()))
            .collect();
        self.connect_redlock(&nodes).await
    }

    /// Redlock over independent deployments, each of any kind: a
    /// standalone server, a Redis Cluster or a master behind Sentinels (see
    /// [`Topology`]). A lock counts only when a majority of them granted it;
    /// everything [`ClientBuilder::connect_many`] says holds, node by node.
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// use dlm::Topology;
    /// let client = dlm::Client::builder()
    ///     .connect_redlock(&[
    ///         Topology::cluster(["redis://10.0.1.1:7000"]),
    ///         Topology::sentinel("locks", ["redis://10.0.2.1:26379"]),
    ///         Topology::standalone("redis://10.0.3.1:6379"),
    ///     ])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_redlock(self, nodes: &[Topology]) -> Result<Client> {
        self.validate()?;
        if nodes.len() < 2 {
            return Err(Error::invalid(
                "Redlock nodes",
                "at least two independent deployments are needed (one: use connect)",
            ));
        }
        let certs = self.certificates()?;
        let mut deployments = Vec::with_capacity(nodes.len());
        let mut seen = std::collections::HashSet::new();
        for node in nodes {
            let deployment = Deployment::from_topology(node, certs.as_ref())?;
            // (Irrefutable when built without `cluster` and `sentinel`.)
            #[allow(irrefutable_let_patterns)]
            if let Deployment::Standalone(client) = &deployment {
                let info = client.get_connection_info();
                let id = format!("{}/{}", info.addr(), info.redis_settings().db());
                if !seen.insert(id.clone()) {
                    return Err(Error::invalid(
                        "Redis URLs",
                        format!("node {id} is listed twice; Redlock needs independent masters"),
                    ));
                }
            }
            deployments.push(deployment);
        }
        // Every node connects in a task of its own: a slow or frozen node
        // never holds up the others, and one that is down now joins once it
        // is back. Requests to a node not connected yet wait for it within
        // their own (per-node) deadline.
        let backends: Vec<Backend> = deployments
            .iter()
            .map(|d| {
                d.connect_in_background(self.connect_timeout, self.timeout, preloaded_scripts())
            })
            .collect();
        let wait = self
            .quorum_wait
            .unwrap_or(self.connect_timeout + self.timeout);
        let needed = backends.len() / 2 + 1;
        if !wait.is_zero()
            && let Ok(Err(e)) = tokio::time::timeout(wait, majority_up(&backends, needed)).await
        {
            return Err(e);
        }
        let mut deployments = deployments.into_iter();
        let first = deployments
            .next()
            .map(Arc::new)
            .ok_or_else(|| Error::invalid("Redlock nodes", "none given"))?;
        let wakeups = Some(Wakeups::new(first, self.timeout));
        let background = tokio_util::task::TaskTracker::new();
        let nodes = Nodes::Quorum(Quorum {
            backends: backends
                .into_iter()
                .map(|b| Node::new(b, background.clone()))
                .collect(),
            node_timeout: self.node_timeout,
            background,
            #[cfg(feature = "seeded-defects")]
            seeded: self.seeded,
        });
        Ok(self.finish(nodes, wakeups, None))
    }

    /// Connect to `redis://`, `rediss://` or `unix://` URL with a
    /// reconnecting multiplexed connection, plus wake-ups on release.
    pub async fn connect(self, url: &str) -> Result<Client> {
        self.validate()?;
        let deployment = Deployment::standalone(url, self.certificates()?.as_ref())?;
        self.on(deployment).await
    }

    /// Connect to a Redis Cluster through one or more of its nodes (seed
    /// nodes; the others are found from them). Every lock, queue and helper
    /// works as on one server: each script's keys share one hash slot, batches
    /// are split by slot, MOVED and ASK redirections and reconnections are
    /// handled, a worker's blocking wait goes to the node that owns its key,
    /// and release wake-ups use classic `PUBLISH`, which the cluster delivers
    /// to a subscriber on any node (sharded `SPUBLISH` would need Redis 7 and
    /// a subscription per shard; a wake-up is rare next to the work it wakes).
    /// Needs the `cluster` feature (on by default): without it, this fails
    /// with [`Error::InvalidArgument`] naming the feature.
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .connect_cluster(&["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_cluster(self, urls: &[impl AsRef<str>]) -> Result<Client> {
        self.validate()?;
        let deployment = Deployment::cluster(urls, self.certificates()?.as_ref())?;
        self.on(deployment).await
    }

    /// Connect to the master `name` that these Sentinels monitor, and follow
    /// it across failovers: a request that finds the master gone or demoted
    /// (a connection error, `READONLY`), or a check every second that finds
    /// the Sentinels naming another master, makes the client connect to the
    /// new one. Writes never go to a replica. A password for the master goes
    /// in the first URL (`redis://:PASSWORD@sentinel:26379`); see the crate
    /// docs' Safety section for what a failover means for a held lock.
    /// Needs the `sentinel` feature (on by default): without it, this fails
    /// with [`Error::InvalidArgument`] naming the feature.
    ///
    /// ```no_run
    /// # async fn demo() -> dlm::Result<()> {
    /// let client = dlm::Client::builder()
    ///     .connect_sentinel("mymaster", &["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"])
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_sentinel(self, name: &str, urls: &[impl AsRef<str>]) -> Result<Client> {
        self.validate()?;
        let deployment = Deployment::sentinel(name, urls, self.certificates()?.as_ref())?;
        self.on(deployment).await
    }

    /// Use a connection the application already has: a
    /// `redis::aio::MultiplexedConnection`, `ConnectionManager` or cluster
    /// connection (anything cloneable that is `redis::aio::ConnectionLike`).
    pub fn connection<C>(self, conn: C) -> Result<Client>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        self.validate()?;
        let deployment = match &self.wakeup_url {
            Some(url) => Some(Arc::new(Deployment::standalone(
                url,
                self.certificates()?.as_ref(),
            )?)),
            None => None,
        };
        let wakeups = deployment.clone().map(|d| Wakeups::new(d, self.timeout));
        let backend = Backend::new(conn, self.timeout);
        Ok(self.finish(
            Nodes::Single(Node::new(backend, tokio_util::task::TaskTracker::new())),
            wakeups,
            deployment,
        ))
    }

    fn finish(
        self,
        nodes: Nodes,
        wakeups: Option<Arc<Wakeups>>,
        deployment: Option<Arc<Deployment>>,
    ) -> Client {
        let root = key_root(&self.prefix);
        let locks = Locks::new(
            nodes,
            format!("{root}lock:"),
            wakeups,
            (self.metrics_lock_names > 0).then(|| LockNames::new(self.metrics_lock_names)),
        );
        #[cfg(feature = "seeded-defects")]
        locks.set_seeded(self.seeded);
        for node in locks.nodes.all() {
            node.backend.set_native_off(!self.native_commands);
        }
        let backend = locks.single_backend().cloned();
        let (wakeups, background) = (locks.wakeups.clone(), locks.background.clone());
        let root: Arc<str> = root.into();
        let semaphores = Semaphores::new(
            backend.clone(),
            wakeups.clone(),
            background.clone(),
            root.clone(),
        );
        let fair_node = backend
            .clone()
            .map(|b| FairNode::new(b, background.clone()));
        Client {
            inner: Arc::new(ClientInner {
                fair_node,
                fair: Shared::new(
                    backend.clone(),
                    wakeups.clone(),
                    background.clone(),
                    root.clone(),
                ),
                rw: Shared::new(
                    backend.clone(),
                    wakeups.clone(),
                    background.clone(),
                    root.clone(),
                ),
                rw_node: RwNode::new(background.clone()),
                election: Shared::new(backend, wakeups, background, root.clone()),
                root,
                locks,
                semaphores,
                deployment,
                #[cfg(feature = "seeded-defects")]
                seeded: self.seeded,
            }),
        }
    }
}

/// A handle on one Redis deployment (standalone, or a cluster connection you
/// pass in); cheap to clone, share it across tasks.
///
/// ```no_run
/// # async fn demo() -> dlm::Result<()> {
/// let client = dlm::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:42");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let locks = &self.inner.locks;
        f.debug_struct("Client")
            .field("prefix", &locks.prefix)
            .field("nodes", &locks.nodes.len())
            .field("wakeups", &locks.wakeups.is_some())
            .finish()
    }
}

impl Client {
    /// Connect with default options (see [`ClientBuilder`]).
    pub async fn connect(url: &str) -> Result<Client> {
        ClientBuilder::default().connect(url).await
    }

    /// Options: key prefix, timeouts, an existing connection.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The lock named `name` (1 ..= 1024 bytes; checked when used).
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.inner.locks.clone(), name.into())
    }

    /// The semaphore named `name` (1 ..= 1024 bytes) with `permits`
    /// permits (1 ..= [`crate::MAX_PERMITS`]; both checked when used): at
    /// most that many held at once across every client. See
    /// [`crate::semaphore`] for the capacity rules and the *Safety* note.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::SemaphoreOptions::new(std::time::Duration::from_secs(10));
    /// let guard = client.semaphore("encoders", 3).acquire(1, &opts).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self.inner.semaphores.clone(), name.into(), permits)
    }

    /// How many semaphore holders (guards alive, not released) this client has.
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) {
    /// assert_eq!(client.held_permits_count(), 0);
    /// # }
    /// ```
    pub fn held_permits_count(&self) -> usize {
        self.inner.semaphores.registry.len()
    }

    /// Several named locks taken all or none under one guard (see
    /// [`MultiLock`]): 1 ..= [`crate::MAX_MULTI_LOCK`] distinct names, each
    /// a valid lock name ([`Error::InvalidArgument`] otherwise).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(5));
    /// let both = client.multi_lock(["from:7", "to:9"])?.acquire(&opts).await?;
    /// both.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock::new(
            self.inner.locks.clone(),
            names.into_iter().map(Into::into).collect(),
        )
    }

    /// The fair (FIFO) lock named `name`: waiters get it in arrival order,
    /// across processes (see [`FairLock`]; one Redis or a cluster, not Redlock).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10))
    ///     .wait(std::time::Duration::from_secs(60));
    /// let guard = client.fair_lock("printer").acquire(&opts).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(
            self.inner.fair.clone(),
            self.inner.fair_node.clone(),
            name.into(),
        )
    }

    /// The read-write lock named `name`: many readers or one writer, with
    /// writer preference (see [`RwLock`]; one Redis or a cluster, not Redlock).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
    /// let share = client.rwlock("catalog").read(&opts).await?;
    /// share.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(
            self.inner.rw.clone(),
            self.inner.rw_node.clone(),
            name.into(),
        )
    }

    /// The leader election named `name`: candidates campaign, one leads
    /// with a term that fences its writes (see [`Election`]; one Redis or a
    /// cluster, not Redlock).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10)).watchdog(true);
    /// let leadership = client.election("scheduler").campaign("host-a", &opts).await?;
    /// println!("term {}", leadership.term());
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(self.inner.election.clone(), name.into())
    }

    /// The deadline of one call to Redis.
    pub fn timeout(&self) -> Duration {
        self.inner.locks.nodes.timeout()
    }

    /// Wait up to `timeout` for work this client left running in the
    /// background: releases of dropped guards and abandoned acquisitions,
    /// and Redlock requests still on their way after a majority decided.
    /// A short-lived process (a CLI, a cron job) calls it before exiting;
    /// a long-running one never needs to. True when all of it finished.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) {
    /// drop(client.lock("report").acquire(&dlm::LockOptions::new(std::time::Duration::from_secs(5))).await);
    /// client.settle(std::time::Duration::from_secs(1)).await;
    /// # }
    /// ```
    pub async fn settle(&self, timeout: Duration) -> bool {
        let tracker = &self.inner.locks.background;
        tracker.close();
        let done = tokio::time::timeout(timeout, tracker.wait()).await.is_ok();
        tracker.reopen();
        done
    }

    /// Release every lock this client still holds (the seeds' `unlockAll`),
    /// in parallel: mutexes (and the multi-lock's), fair locks, read shares
    /// and write locks, semaphore permits and leaderships. Their guards
    /// report lost afterwards.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let report = client.release_all().await;
    /// println!("released {}", report.released);
    /// # Ok(()) }
    /// ```
    pub async fn release_all(&self) -> ReleaseAll {
        let (mut report, fair, rw, election, permits) = tokio::join!(
            self.inner.locks.release_all(),
            release_all(&self.inner.fair),
            release_all(&self.inner.rw),
            release_all(&self.inner.election),
            release_all(&self.inner.semaphores)
        );
        for (released, lost, failed) in [fair, rw, election, permits] {
            report.released += released;
            report.already_lost += lost;
            report.failed += failed;
        }
        report
    }

    /// Connect to several independent masters for Redlock (see
    /// [`ClientBuilder::connect_many`]).
    pub async fn connect_many(urls: &[impl AsRef<str>]) -> Result<Client> {
        ClientBuilder::default().connect_many(urls).await
    }

    /// How many independent Redis nodes this client locks on (1, or N for Redlock).
    pub fn nodes(&self) -> usize {
        self.inner.locks.nodes.len()
    }

    /// What each node this client locks on is (one, or N for Redlock), asked
    /// now with `INFO server`: Redis or Valkey, its version, and the native
    /// commands dlm uses on it (see [`ClientBuilder::native_commands`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// for server in client.server_info().await? {
    ///     println!("{} {}: native {:?}", server.product, server.version, server.native());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn server_info(&self) -> Result<Vec<ServerInfo>> {
        let mut out = Vec::new();
        for node in self.inner.locks.nodes.all() {
            let mut info = node.backend.learn().await?;
            if node.backend.batch_by_slot() {
                // Scripts on a cluster, or a connection passed in.
                info = info.without_native();
            }
            out.push(info);
        }
        Ok(out)
    }

    /// How many locks this client holds now (guards alive and not released).
    pub fn held_count(&self) -> usize {
        self.inner.locks.registry.len()
    }

    /// The queue named `name` (1 ..= 1024 bytes), on a single-Redis client
    /// (see [`crate::queue`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let stats = client.queue("emails").stats().await?;
    /// println!("{} waiting", stats.waiting);
    /// # Ok(()) }
    /// ```
    pub fn queue(&self, name: impl Into<String>) -> Queue {
        let queue = Queue::new(
            self.single_backend(),
            self.inner.deployment.clone(),
            name.into(),
            self.inner.root.clone(),
        );
        #[cfg(feature = "seeded-defects")]
        let queue = queue.seeded_defect(self.inner.seeded);
        queue
    }

    /// The names of up to `limit` queues on this Redis (those with at least
    /// one task or a count), found with `SCAN` over `dlm:queue:*`, sorted.
    /// On a Redis Cluster only one node is scanned: name the queues instead.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// for name in client.queue_names(100).await? {
    ///     println!("{name}: {:?}", client.queue(name.as_str()).stats().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn queue_names(&self, limit: usize) -> Result<Vec<String>> {
        let backend = self.single_backend().ok_or_else(|| {
            Error::invalid("client", "queues need a single-Redis client, not Redlock")
        })?;
        crate::queue::queue_names(&backend, &self.inner.root, limit).await
    }

    /// The names of up to `limit` (at most [`crate::lock::MAX_HELD_LOCKS`])
    /// primitives of `kind` whose names match the glob `pattern` (`*` for
    /// all), found with `SCAN` over their keys, sorted: fair locks held or
    /// with waiters, read-write locks with a writer, readers or a waiting
    /// writer, semaphores ever used, elections ever run. Read each one's
    /// `status()` for the rest. On a Redis Cluster only one node is scanned.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// for name in client.lock_names(dlm::LockKind::Election, "*", 100).await? {
    ///     println!("{name}: {:?}", client.election(name.as_str()).leader().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lock_names(
        &self,
        kind: LockKind,
        pattern: &str,
        limit: usize,
    ) -> Result<Vec<String>> {
        if limit == 0 || limit > crate::lock::MAX_HELD_LOCKS {
            return Err(Error::invalid(
                "limit",
                format!("{limit} is outside 1 ..= {}", crate::lock::MAX_HELD_LOCKS),
            ));
        }
        let backend = self.single_backend().ok_or_else(|| {
            Error::invalid(
                "client",
                "lock inspection needs a single-Redis client, not Redlock",
            )
        })?;
        let (kind, suffixes): (&str, &[&str]) = match kind {
            LockKind::Fair => ("fair:", &["", ":queue"]),
            LockKind::RwLock => ("rw:", &[":writer", ":readers", ":writers_waiting"]),
            LockKind::Semaphore => ("sem:", &[""]),
            LockKind::Election => ("elect:", &[":term"]),
        };
        let prefix = format!("{}{kind}", self.inner.root);
        let prefix = prefix.as_str();
        let mut names = Vec::new();
        for suffix in suffixes {
            let glob = format!(
                "{}{{{pattern}}}{suffix}",
                crate::backend::glob_escape(prefix)
            );
            for key in backend.scan(&glob, limit).await? {
                if let Some(name) = key
                    .strip_prefix(prefix)
                    .and_then(|k| k.strip_suffix(suffix))
                    .and_then(|k| k.strip_prefix('{'))
                    .and_then(|k| k.strip_suffix('}'))
                {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        names.dedup();
        names.truncate(limit);
        Ok(names)
    }

    /// Up to `limit` (at most [`crate::lock::MAX_HELD_LOCKS`]) held locks
    /// whose names match the glob `pattern` (`*` for all), with their
    /// remaining TTL and fence, found with `SCAN`, sorted by name. Locks
    /// under raw keys are not found.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// for held in client.held_locks("orders:*", 100).await? {
    ///     println!("{} expires in {:?}", held.name, held.ttl);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn held_locks(&self, pattern: &str, limit: usize) -> Result<Vec<HeldLock>> {
        self.inner.locks.held_matching(pattern, limit).await
    }

    /// A versioned record `dlm:versioned:{name}` (see [`Versioned`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let version = client.versioned("profile:7").write(0, b"{}").await?;
    /// # Ok(()) }
    /// ```
    pub fn versioned(&self, name: impl Into<String>) -> Versioned {
        Versioned::new(self.single_backend(), name.into(), self.inner.root.clone())
    }

    /// A rate limiter `dlm:rate:{name}` granting at most `n` per `period`
    /// over any window, shared by every client (see [`crate::ratelimit`]).
    /// `n` is 1 ..= 1 000 000 and `period` 1 ms ..= 7 days, checked when used.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let limiter = client.rate_limiter("partner-api", 10, std::time::Duration::from_secs(1));
    /// limiter.acquire().await?;    // sleeps while 10 grants fell in the last second
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter(
        &self,
        name: impl Into<String>,
        n: u64,
        period: Duration,
    ) -> crate::ratelimit::RateLimiter {
        crate::ratelimit::RateLimiter::new(
            self.single_backend(),
            name.into(),
            n,
            period,
            self.inner.root.clone(),
        )
    }

    /// An id generator `dlm:ids:{name}`: unique, increasing ids across
    /// servers (see [`crate::ids`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let id = client.ids("orders").next().await?;
    /// # Ok(()) }
    /// ```
    pub fn ids(&self, name: impl Into<String>) -> crate::ids::Ids {
        crate::ids::Ids::new(self.single_backend(), name.into(), self.inner.root.clone())
    }

    /// A stock counter `dlm:stock:{name}` (see [`Stock`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// client.stock("phones").set(10).await?;
    /// # Ok(()) }
    /// ```
    pub fn stock(&self, name: impl Into<String>) -> Stock {
        Stock::new(self.single_backend(), name.into(), self.inner.root.clone())
    }

    /// Store `value` for `resource` (key `dlm:fenced:{resource}`) only if
    /// `fence` is not lower than the highest fencing token that wrote it
    /// before; otherwise [`Error::StaleFence`].
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.lock("ledger").acquire(&dlm::LockOptions::new(Duration::from_secs(5))).await?;
    /// let fence = guard.fence().expect("a single-Redis lock has a fence");
    /// // ... a long pause here may let the lock expire and another client take it ...
    /// match client.fenced_write("ledger", fence, b"balance=10").await {
    ///     Ok(()) => println!("written"),
    ///     Err(dlm::Error::StaleFence { highest, .. }) => println!("a newer holder ({highest}) wrote; dropping"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_write(
        &self,
        resource: &str,
        fence: Fence,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let backend = self.inner.locks.single_backend();
        crate::fenced::write(backend, &self.inner.root, resource, fence, value.as_ref()).await
    }

    /// The value stored by [`Client::fenced_write`] and the token that wrote it.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// if let Some((fence, value)) = client.fenced_read("ledger").await? {
    ///     println!("{} bytes written with fence {fence}", value.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_read(&self, resource: &str) -> Result<Option<(Fence, Vec<u8>)>> {
        crate::fenced::read(
            self.inner.locks.single_backend(),
            &self.inner.root,
            resource,
        )
        .await
    }

    fn single_backend(&self) -> Option<Backend> {
        self.inner.locks.single_backend().cloned()
    }
}
