//! One Redis deployment and how to open connections to it: a standalone
//! server, a Redis Cluster (seed nodes), or a master found through Sentinel
//! and followed across failovers; each optionally over TLS.
//!
//! Three kinds of connection come from here: the shared one every request
//! goes through ([`Deployment::connect`], a [`Backend`]), a dedicated one
//! without a response timeout for blocking commands
//! ([`Deployment::dedicated`]), and pub/sub ([`Deployment::pubsub`]). On a
//! cluster, a blocking command goes to the node that owns its key (the
//! cluster connection routes it), and pub/sub uses classic `PUBLISH`, which
//! a cluster delivers to subscribers on every node.

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use std::sync::Arc;
use std::time::Duration;

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use redis::IntoConnectionInfo;
use redis::RedisResult;
#[cfg(feature = "sentinel")]
use redis::aio::MultiplexedConnection;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClient;
#[cfg(feature = "sentinel")]
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use super::deferred;
use super::tls::Certificates as TlsCertificates;
use super::{Backend, BoxedConnection};
use crate::error::{Error, Result};

/// One Redis deployment, named by its URLs: for
/// [`crate::ClientBuilder::connect_redlock`], where each independent node of
/// a Redlock may be a standalone server, a Redis Cluster or a master behind
/// Sentinels. (Passwords in its URLs never show in `Debug`.) Every variant
/// exists with any set of crate features; connecting to a `Cluster` needs the
/// `cluster` feature and to a `Sentinel` the `sentinel` feature (both on by
/// default), else it fails with [`Error::InvalidArgument`] naming the feature.
///
/// ```
/// let nodes = [
///     dlm::Topology::standalone("redis://10.0.0.1:6379"),
///     dlm::Topology::cluster(["redis://10.0.1.1:7000", "redis://10.0.1.2:7000"]),
///     dlm::Topology::sentinel("lockmaster", ["redis://10.0.2.1:26379"]),
/// ];
/// assert_eq!(nodes.len(), 3);
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// One server.
    Standalone {
        /// Its URL.
        url: String,
    },
    /// A Redis Cluster.
    Cluster {
        /// Seed nodes' URLs.
        seeds: Vec<String>,
    },
    /// The master `master` behind these Sentinels.
    Sentinel {
        /// The master's name.
        master: String,
        /// The Sentinels' URLs.
        sentinels: Vec<String>,
    },
}

impl Topology {
    /// One server at `url`.
    pub fn standalone(url: impl Into<String>) -> Self {
        Topology::Standalone { url: url.into() }
    }

    /// A Redis Cluster reached through these seed nodes.
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Self {
        Topology::Cluster {
            seeds: seeds.into_iter().map(Into::into).collect(),
        }
    }

    /// The master `master` as these Sentinels see it.
    pub fn sentinel<S: Into<String>>(
        master: impl Into<String>,
        sentinels: impl IntoIterator<Item = S>,
    ) -> Self {
        Topology::Sentinel {
            master: master.into(),
            sentinels: sentinels.into_iter().map(Into::into).collect(),
        }
    }
}

/// A URL with its password replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    let user = userinfo.split(':').next().unwrap_or("");
    format!("{scheme}://{user}:***@{host}")
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = |v: &[String]| v.iter().map(|u| redact(u)).collect::<Vec<_>>();
        match self {
            Topology::Standalone { url } => {
                f.debug_tuple("Standalone").field(&redact(url)).finish()
            }
            Topology::Cluster { seeds } => f.debug_tuple("Cluster").field(&all(seeds)).finish(),
            Topology::Sentinel { master, sentinels } => f
                .debug_struct("Sentinel")
                .field("master", master)
                .field("sentinels", &all(sentinels))
                .finish(),
        }
    }
}

#[cfg(feature = "sentinel")]
/// How often a Sentinel client asks whether its master is still the master.
const SENTINEL_RECHECK: Duration = Duration::from_secs(1);

/// How the cluster client waits before retrying a request that a node
/// answered with TRYAGAIN, CLUSTERDOWN or MASTERDOWN (a slot migrating with
/// a multi-key request split across the two nodes, a failover): between
/// `CLUSTER_RETRY_MIN_WAIT` and `min(CLUSTER_RETRY_MAX_WAIT, 10 ms * 2^n)`
/// before retry `n`. redis-rs waits at least 1.28 s by default, which is
/// more than a whole call deadline of 1 s: one TRYAGAIN during a slot
/// migration then surfaced as a timeout although the migration finished
/// a few milliseconds later. Every call still ends at its own deadline.
#[cfg(feature = "cluster")]
const CLUSTER_RETRY_MIN_WAIT: Duration = Duration::from_millis(5);
/// The longest wait between two retries of one cluster request.
#[cfg(feature = "cluster")]
const CLUSTER_RETRY_MAX_WAIT: Duration = Duration::from_millis(250);
/// Retries of one cluster request (each call also ends at its deadline).
#[cfg(feature = "cluster")]
const CLUSTER_RETRIES: u32 = 32;

/// Where the data lives (built once per client; its size does not matter).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Deployment {
    /// One server.
    Standalone(redis::Client),
    /// A Redis Cluster: the cluster client and a client per seed node (for
    /// pub/sub, which any node delivers).
    #[cfg(feature = "cluster")]
    Cluster {
        client: ClusterClient,
        seeds: Vec<redis::Client>,
    },
    /// A master named by Sentinels.
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<SentinelMaster>),
}

impl std::fmt::Debug for Deployment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Deployment::Standalone(_) => "Standalone",
            #[cfg(feature = "cluster")]
            Deployment::Cluster { .. } => "Cluster",
            #[cfg(feature = "sentinel")]
            Deployment::Sentinel(_) => "Sentinel",
        })
    }
}

/// The Sentinels of one master name.
#[cfg(feature = "sentinel")]
pub(crate) struct SentinelMaster {
    client: tokio::sync::Mutex<SentinelClient>,
}

#[cfg(feature = "sentinel")]
impl SentinelMaster {
    /// A client for the server the Sentinels name as master now.
    async fn master(&self) -> RedisResult<redis::Client> {
        self.client.lock().await.async_get_client().await
    }
}

fn invalid_url(e: redis::RedisError) -> Error {
    Error::invalid("Redis URL", e.to_string())
}

/// A client for `url`, with the TLS certificates when given.
pub(crate) fn open(url: &str, tls: Option<&TlsCertificates>) -> Result<redis::Client> {
    match tls {
        #[cfg(feature = "tls")]
        Some(certs) => redis::Client::build_with_tls(url, certs.clone()),
        #[cfg(not(feature = "tls"))]
        Some(certs) => match *certs {},
        None => redis::Client::open(url),
    }
    .map_err(invalid_url)
}

/// The connection manager's settings: every call already runs under dlm's
/// own deadline, so the manager gets no response timeout of its own.
fn manager_config(connect_timeout: Duration, retries: usize) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None)
        .set_number_of_retries(retries)
        .set_max_delay(Duration::from_millis(500))
}

fn no_timeout_config(connect_timeout: Duration) -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None)
}

impl Deployment {
    /// Whether this is a Redis Cluster (a blocking command takes keys of one slot only).
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if matches!(self, Deployment::Cluster { .. }) {
            return true;
        }
        false
    }

    /// One server at `url`.
    pub(crate) fn standalone(url: &str, tls: Option<&TlsCertificates>) -> Result<Self> {
        Ok(Deployment::Standalone(open(url, tls)?))
    }

    /// A Redis Cluster reached through these seed nodes.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(urls: &[impl AsRef<str>], tls: Option<&TlsCertificates>) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::invalid(
                "Redis URLs",
                "a cluster needs at least one seed node",
            ));
        }
        let seeds = urls
            .iter()
            .map(|u| open(u.as_ref(), tls))
            .collect::<Result<Vec<_>>>()?;
        let infos = urls
            .iter()
            .map(|u| u.as_ref().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()
            .map_err(invalid_url)?;
        #[allow(unused_mut)] // without `tls`, nothing to add
        let mut builder = ClusterClient::builder(infos)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(CLUSTER_RETRY_MIN_WAIT.as_millis() as u64)
            .max_retry_wait(CLUSTER_RETRY_MAX_WAIT.as_millis() as u64)
            .retry_wait_formula(10, 2);
        #[cfg(feature = "tls")]
        if let Some(certs) = tls {
            builder = builder.certs(certs.clone());
        }
        let client = builder.build().map_err(invalid_url)?;
        Ok(Deployment::Cluster { client, seeds })
    }

    /// Without the `cluster` feature: an error saying so.
    #[cfg(not(feature = "cluster"))]
    pub(crate) fn cluster(_: &[impl AsRef<str>], _: Option<&TlsCertificates>) -> Result<Self> {
        Err(Error::feature_disabled("Redis Cluster", "cluster"))
    }

    /// Without the `sentinel` feature: an error saying so.
    #[cfg(not(feature = "sentinel"))]
    pub(crate) fn sentinel(
        _: &str,
        _: &[impl AsRef<str>],
        _: Option<&TlsCertificates>,
    ) -> Result<Self> {
        Err(Error::feature_disabled("Redis Sentinel", "sentinel"))
    }

    /// The master `name` as these Sentinels see it. The URLs are the
    /// Sentinels'; a user and password in the first URL are used for the
    /// master (`redis://:PASSWORD@sentinel:26379` or
    /// `redis://USER:PASSWORD@...`), not for the Sentinels. With `rediss://`
    /// URLs (or TLS certificates), the Sentinels and the master are both
    /// reached over TLS.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel(
        name: &str,
        urls: &[impl AsRef<str>],
        tls: Option<&TlsCertificates>,
    ) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::invalid("Sentinel master name", "must not be empty"));
        }
        let infos = urls
            .iter()
            .map(|u| u.as_ref().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()
            .map_err(invalid_url)?;
        let Some(first) = infos.first() else {
            return Err(Error::invalid(
                "Sentinel URLs",
                "at least one Sentinel is needed",
            ));
        };
        let secure = tls.is_some()
            || infos
                .iter()
                .any(|i| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. }));
        let addrs: Vec<redis::ConnectionAddr> = infos.iter().map(|i| i.addr().clone()).collect();
        let mut builder = SentinelClientBuilder::new(addrs, name, SentinelServerType::Master)
            .map_err(invalid_url)?;
        let auth = first.redis_settings();
        if let Some(user) = auth.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = auth.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if secure {
            builder = builder
                .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
            #[cfg(feature = "tls")]
            if let Some(certs) = tls {
                builder = builder
                    .set_client_to_redis_certificates(certs.clone())
                    .set_client_to_sentinel_certificates(certs.clone());
            }
        }
        let client = builder.build().map_err(invalid_url)?;
        Ok(Deployment::Sentinel(Arc::new(SentinelMaster {
            client: tokio::sync::Mutex::new(client),
        })))
    }

    /// The deployment a [`Topology`] names.
    pub(crate) fn from_topology(
        topology: &Topology,
        tls: Option<&TlsCertificates>,
    ) -> Result<Self> {
        match topology {
            Topology::Standalone { url } => Self::standalone(url, tls),
            Topology::Cluster { seeds } => Self::cluster(seeds, tls),
            Topology::Sentinel { master, sentinels } => Self::sentinel(master, sentinels, tls),
        }
    }

    /// The shared connection, made (and for Sentinel, kept following the
    /// master) by a background task: usable at once, a request waits for
    /// it within its own deadline. `preload`: scripts loaded once connected.
    pub(crate) fn connect_in_background(
        &self,
        connect_timeout: Duration,
        timeout: Duration,
        preload: Vec<&'static redis::Script>,
    ) -> Backend {
        let bound = connect_timeout + timeout;
        match self {
            Deployment::Standalone(client) => {
                let config = manager_config(connect_timeout, 1);
                let (backend, _) =
                    Backend::connect_in_background(client.clone(), config, bound, timeout, preload);
                backend.standalone()
            }
            #[cfg(feature = "cluster")]
            Deployment::Cluster { client, .. } => {
                let client = client.clone();
                let connector: deferred::Connector<redis::cluster_async::ClusterConnection> =
                    Arc::new(move || {
                        let client = client.clone();
                        Box::pin(async move {
                            let conn = client.get_async_connection().await?;
                            Ok((conn, "cluster".to_string()))
                        })
                    });
                let (state, _) = deferred::maintain(connector, bound, preload, None);
                Backend::kept(state, timeout).cluster()
            }
            #[cfg(feature = "sentinel")]
            Deployment::Sentinel(master) => {
                let connector: deferred::Connector<MultiplexedConnection> = {
                    let master = master.clone();
                    Arc::new(move || {
                        let master = master.clone();
                        Box::pin(async move {
                            let client = master.master().await?;
                            let addr = client.get_connection_info().addr().to_string();
                            let conn = client
                                .get_multiplexed_async_connection_with_config(&no_timeout_config(
                                    connect_timeout,
                                ))
                                .await?;
                            Ok((conn, addr))
                        })
                    })
                };
                let recheck: deferred::Recheck = {
                    let master = master.clone();
                    Arc::new(move |addr: String| {
                        let master = master.clone();
                        Box::pin(async move {
                            match tokio::time::timeout(bound, master.master()).await {
                                Ok(Ok(c)) => c.get_connection_info().addr().to_string() == addr,
                                // The Sentinels cannot tell now: keep what we have.
                                _ => true,
                            }
                        })
                    })
                };
                let (state, broken) = deferred::maintain(
                    connector,
                    bound,
                    preload,
                    Some((recheck, SENTINEL_RECHECK)),
                );
                Backend::maintained(state, broken, timeout).standalone()
            }
        }
    }

    /// The shared connection every request goes through, connected (the
    /// first connection within `connect_timeout + timeout`), with the
    /// `preload` scripts loaded before the first request (best effort).
    pub(crate) async fn connect(
        &self,
        connect_timeout: Duration,
        timeout: Duration,
        preload: Vec<&'static redis::Script>,
    ) -> Result<Backend> {
        let bound = connect_timeout + timeout;
        match self {
            Deployment::Standalone(client) => {
                let config = manager_config(connect_timeout, 2);
                let manager = super::deadline(
                    bound,
                    ConnectionManager::new_with_config(client.clone(), config),
                )
                .await?;
                let backend = Backend::new(manager, timeout).standalone();
                backend.preload(&preload).await;
                backend.learn_at_connect().await?;
                Ok(backend)
            }
            #[cfg(feature = "cluster")]
            Deployment::Cluster { client, .. } => {
                let conn = super::deadline(bound, client.get_async_connection()).await?;
                let backend = Backend::new(conn, timeout).cluster();
                backend.preload(&preload).await;
                Ok(backend)
            }
            #[cfg(feature = "sentinel")]
            Deployment::Sentinel(_) => {
                let backend = self.connect_in_background(connect_timeout, timeout, preload);
                // Wait for the first connection, so that errors (no such
                // master, all Sentinels down) surface here.
                backend.wait_up(bound).await?;
                backend.learn_at_connect().await?;
                Ok(backend)
            }
        }
    }

    /// A dedicated connection without a response timeout, for blocking
    /// commands (on a cluster, routed to the node that owns the key).
    pub(crate) async fn dedicated(
        &self,
        connect_timeout: Duration,
    ) -> RedisResult<BoxedConnection> {
        match self {
            Deployment::Standalone(client) => {
                let conn = client
                    .get_multiplexed_async_connection_with_config(&no_timeout_config(
                        connect_timeout,
                    ))
                    .await?;
                Ok(BoxedConnection::Boxed(Box::new(conn)))
            }
            #[cfg(feature = "cluster")]
            Deployment::Cluster { client, .. } => Ok(BoxedConnection::Boxed(Box::new(
                client.get_async_connection().await?,
            ))),
            #[cfg(feature = "sentinel")]
            Deployment::Sentinel(master) => {
                let client = master.master().await?;
                let conn = client
                    .get_multiplexed_async_connection_with_config(&no_timeout_config(
                        connect_timeout,
                    ))
                    .await?;
                Ok(BoxedConnection::Boxed(Box::new(conn)))
            }
        }
    }

    /// A pub/sub connection (on a cluster, to the first seed that answers:
    /// classic `PUBLISH` reaches subscribers on every node).
    pub(crate) async fn pubsub(&self) -> RedisResult<redis::aio::PubSub> {
        match self {
            Deployment::Standalone(client) => client.get_async_pubsub().await,
            #[cfg(feature = "cluster")]
            Deployment::Cluster { seeds, .. } => {
                let mut last = None;
                for seed in seeds {
                    match seed.get_async_pubsub().await {
                        Ok(p) => return Ok(p),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Client, "no cluster seed node"))
                }))
            }
            #[cfg(feature = "sentinel")]
            Deployment::Sentinel(master) => master.master().await?.get_async_pubsub().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without its feature, a deployment kind is a typed error naming the
    /// feature, not a missing method.
    #[test]
    #[allow(unused_variables)]
    fn a_deployment_whose_feature_is_off_says_so() {
        let cluster = Deployment::cluster(&["redis://127.0.0.1:1"], None);
        let sentinel = Deployment::sentinel("m", &["redis://127.0.0.1:1"], None);
        #[cfg(not(feature = "cluster"))]
        assert!(
            matches!(cluster, Err(Error::InvalidArgument { reason, .. }) if reason.contains("`cluster` feature"))
        );
        #[cfg(feature = "cluster")]
        assert!(cluster.is_ok());
        #[cfg(not(feature = "sentinel"))]
        assert!(
            matches!(sentinel, Err(Error::InvalidArgument { reason, .. }) if reason.contains("`sentinel` feature"))
        );
        #[cfg(not(feature = "tls"))]
        assert!(matches!(
            super::super::TlsConfig::default().certificates(),
            Err(Error::InvalidArgument { reason, .. }) if reason.contains("`tls` feature")
        ));
    }
}
