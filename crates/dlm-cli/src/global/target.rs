//! Which Redis a command talks to: the `--redis` URL, the default local one,
//! or (for `bench` and `demo`) a private redis-server started for the run.

use std::time::Duration;

use dlm_testkit::RedisServer;

use super::{Global, Topology};
use crate::error::{CliError, redis_err};

/// A Redis to talk to; when it is a private server, it is stopped when this
/// is dropped.
pub struct Target {
    /// The URL to connect to (the first node's, with several).
    pub url: String,
    /// Every node's URL (one, or the Redlock masters).
    pub urls: Vec<String>,
    /// The private servers, if they were started.
    pub servers: Vec<RedisServer>,
    /// The private cluster, if `--cluster` started one.
    pub cluster: Option<dlm_testkit::Cluster>,
}

impl Target {
    /// The `--redis` URL if one was given, else a fresh private server.
    pub async fn given_or_private(global: &Global) -> Result<Target, CliError> {
        Self::given_or_private_many(global, 1).await
    }

    /// The `--redis` URLs if given, else `n` fresh private servers.
    pub async fn given_or_private_many(global: &Global, n: usize) -> Result<Target, CliError> {
        if !global.redis.is_empty() {
            return Ok(Target {
                url: global.url().to_string(),
                urls: global.redis.clone(),
                servers: Vec::new(),
                cluster: None,
            });
        }
        match &global.topology {
            Topology::Cluster => {
                // A private cluster (3 masters + 3 replicas) for the run.
                let cluster = tokio::task::spawn_blocking(dlm_testkit::Cluster::start)
                    .await
                    .map_err(|e| CliError::Io {
                        what: "starting a Redis Cluster",
                        source: std::io::Error::other(e),
                    })??;
                return Ok(Target {
                    url: cluster.seed_url(),
                    urls: cluster.urls(),
                    servers: Vec::new(),
                    cluster: Some(cluster),
                });
            }
            Topology::Sentinel(_) => {
                return Err(CliError::Usage(
                    "--sentinel needs the Sentinels' URLs (--redis)".into(),
                ));
            }
            Topology::Plain => {}
        }
        // Starting a server blocks (it waits for PING): keep it off the runtime's workers.
        let servers = tokio::task::spawn_blocking(move || RedisServer::start_many(n.max(1)))
            .await
            .map_err(|e| CliError::Io {
                what: "starting redis-server",
                source: std::io::Error::other(e),
            })??;
        Ok(Target {
            url: servers.first().map(RedisServer::url).unwrap_or_default(),
            urls: servers.iter().map(RedisServer::url).collect(),
            servers,
            cluster: None,
        })
    }

    /// "private" or the URL, for people.
    pub fn describe(&self) -> String {
        if self.cluster.is_some() {
            return "a private Redis Cluster (3 masters, 3 replicas)".into();
        }
        match self.servers.as_slice() {
            [] => self
                .urls
                .iter()
                .map(|u| redact(u))
                .collect::<Vec<_>>()
                .join(", "),
            [s] => format!("private redis-server on 127.0.0.1:{}", s.port()),
            many => format!("{} private redis-servers (Redlock)", many.len()),
        }
    }
}

/// The URL with its password (if any) replaced by `***`, for printing.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

/// The client builder for `global`'s deadlines and TLS.
fn builder(global: &Global) -> dlm::ClientBuilder {
    let mut builder = dlm::Client::builder()
        .timeout(global.timeout)
        .connect_timeout(global.timeout)
        .native_commands(global.native_commands);
    if let Some(tls) = &global.tls {
        builder = builder.tls(tls.clone());
    }
    builder
}

/// A client on one deployment: `url` itself, or with `--cluster` /
/// `--sentinel` every `--redis` URL (the seeds, the Sentinels).
pub async fn connect(global: &Global, url: &str) -> Result<dlm::Client, CliError> {
    let urls = if global.redis.is_empty() {
        vec![url.to_string()]
    } else {
        global.redis.clone()
    };
    Ok(match &global.topology {
        Topology::Cluster => builder(global).connect_cluster(&urls).await?,
        Topology::Sentinel(name) => builder(global).connect_sentinel(name, &urls).await?,
        Topology::Plain => builder(global).connect(url).await?,
    })
}

/// A lock client on one URL, or a Redlock client over several. A Redlock
/// client does not wait for its nodes to connect: each request waits for its
/// node within the per-node deadline, so frozen nodes cost a short-lived
/// command nothing while a majority answers.
pub async fn connect_nodes(urls: &[String], global: &Global) -> Result<dlm::Client, CliError> {
    match &global.topology {
        Topology::Cluster => return Ok(builder(global).connect_cluster(urls).await?),
        Topology::Sentinel(name) => {
            return Ok(builder(global).connect_sentinel(name, urls).await?);
        }
        Topology::Plain => {}
    }
    let mut builder = builder(global).quorum_wait(Duration::ZERO);
    if let Some(t) = global.node_timeout {
        builder = builder.node_timeout(t);
    }
    Ok(builder.connect_many(urls).await?)
}

/// How long a short-lived command lets a Redlock release's requests to the
/// nodes that did not answer first land (without `--node-timeout`): healthy
/// nodes answer well within it; a frozen one is not waited for longer.
pub const RELEASE_SETTLE: Duration = Duration::from_millis(100);

/// Under Redlock a release is decided by the first majority: let the
/// requests to the other nodes land (bounded), so that they do not keep our
/// key until its TTL.
pub async fn settle_release(client: &dlm::Client, global: &Global) {
    if client.nodes() > 1 {
        let bound = global.node_timeout.unwrap_or(RELEASE_SETTLE);
        client.settle(bound.min(global.timeout)).await;
    }
}

/// A connection for the demo's and benchmarks' own commands (counters,
/// INFO, clean-up): one server, or, when that server is a Redis Cluster
/// node, a cluster connection seeded by it (found by asking the node).
#[derive(Clone)]
pub enum RawConnection {
    /// One server.
    Single(redis::aio::MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for RawConnection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            RawConnection::Single(c) => c.req_packed_command(cmd),
            RawConnection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            RawConnection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RawConnection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RawConnection::Single(c) => c.get_db(),
            RawConnection::Cluster(c) => c.get_db(),
        }
    }
}

impl RawConnection {
    /// `INFO section` of the server that holds `key` (any server for one
    /// Redis; the key's master on a cluster).
    pub async fn info_for(&mut self, section: &str, key: &str) -> redis::RedisResult<String> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg(section);
        match self {
            RawConnection::Single(c) => cmd.query_async(c).await,
            RawConnection::Cluster(c) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(key, SlotAddr::Master),
                ));
                let v = c.route_command(cmd, route).await?;
                Ok(redis::FromRedisValue::from_redis_value(v)?)
            }
        }
    }
}

/// Delete every key of queue `name` (the benchmark's and the checker's
/// disposable queues).
pub async fn delete_queue_keys(conn: &mut RawConnection, name: &str) {
    let mut del = redis::cmd("DEL");
    for suffix in dlm::keys::QUEUE_KEY_SUFFIXES {
        del.arg(format!(
            "{}{{{name}}}:{suffix}",
            dlm::keys::DEFAULT_QUEUE_PREFIX
        ));
    }
    if let Err(e) = del.query_async::<i64>(conn).await {
        tracing::warn!(error = %e, "could not delete the disposable queue's keys");
    }
    // The small payloads' buckets (empty, so gone, once the queue is drained).
    let buckets = dlm::keys::queue_payload_bucket_keys(name).unwrap_or_default();
    for chunk in buckets.chunks(1024) {
        let mut del = redis::cmd("DEL");
        del.arg(chunk);
        if let Err(e) = del.query_async::<i64>(conn).await {
            tracing::warn!(error = %e, "could not delete the disposable queue's payload buckets");
            return;
        }
    }
}

/// Delete the keys of every shard but shard 0 of a sharded disposable queue
/// (shard 0's are [`delete_queue_keys`]'s): `dlm:queue:shard:{TAG}:SUFFIX`
/// and that shard's payload buckets.
pub async fn delete_queue_shard_keys(conn: &mut RawConnection, layout: &dlm::queue::ShardLayout) {
    for shard in layout.shards.iter().filter(|s| s.index > 0) {
        let base = format!("{}shard:{{{}}}", dlm::keys::DEFAULT_QUEUE_PREFIX, shard.tag);
        let mut keys: Vec<String> = dlm::keys::QUEUE_KEY_SUFFIXES
            .iter()
            .map(|suffix| format!("{base}:{suffix}"))
            .collect();
        keys.extend(
            (0..dlm::keys::QUEUE_PAYLOAD_BUCKETS).map(|b| format!("{base}:payload:{b:03x}")),
        );
        for chunk in keys.chunks(1024) {
            let mut del = redis::cmd("DEL");
            del.arg(chunk);
            if let Err(e) = del.query_async::<i64>(conn).await {
                tracing::warn!(error = %e, shard = shard.index, "could not delete a disposable queue shard's keys");
                break;
            }
        }
    }
}

/// A raw connection to `url` (see [`RawConnection`]).
pub async fn raw_connection(url: &str, timeout: Duration) -> Result<RawConnection, CliError> {
    let mut single = plain_connection(url, timeout).await?;
    let info: redis::RedisResult<String> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut single)
        .await;
    if !info.is_ok_and(|i| i.contains("cluster_enabled:1")) {
        return Ok(RawConnection::Single(single));
    }
    let client = redis::cluster::ClusterClient::builder([url])
        .connection_timeout(timeout)
        .build()
        .map_err(redis_err)?;
    match tokio::time::timeout(timeout * 2, client.get_async_connection()).await {
        Ok(r) => Ok(RawConnection::Cluster(r.map_err(redis_err)?)),
        Err(_) => Err(CliError::Dlm(dlm::Error::Timeout(timeout))),
    }
}

/// A plain multiplexed connection to the one server at `url`.
async fn plain_connection(
    url: &str,
    timeout: Duration,
) -> Result<redis::aio::MultiplexedConnection, CliError> {
    let client = redis::Client::open(url).map_err(|e| {
        CliError::Dlm(dlm::Error::InvalidArgument {
            arg: "Redis URL",
            reason: e.to_string(),
        })
    })?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    match tokio::time::timeout(
        timeout * 2,
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
    {
        Ok(r) => r.map_err(redis_err),
        Err(_) => Err(CliError::Dlm(dlm::Error::Timeout(timeout))),
    }
}

/// One `INFO` section of the server at `url`, if it can be had.
pub(crate) async fn info(url: &str, timeout: Duration, section: &str) -> Option<String> {
    let mut conn = plain_connection(url, timeout).await.ok()?;
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .ok()
}

/// The server's version from `INFO server`, if it can be had: its
/// `redis_version`, or `valkey X.Y.Z` for a Valkey.
pub async fn redis_version(url: &str, timeout: Duration) -> Option<String> {
    parse_version(&info(url, timeout, "server").await?)
}

/// The version in one `INFO server` reply. A Valkey's `redis_version` is the
/// Redis it is compatible with (7.2.4 for every Valkey so far), so its own
/// `valkey_version` is the one to show.
fn parse_version(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    match field("valkey_version") {
        Some(v) => Some(format!("valkey {v}")),
        None => field("redis_version"),
    }
}

/// Redis's own CPU time (`INFO CPU`: `used_cpu_sys + used_cpu_user`, in
/// seconds) summed over the servers at `urls`; `None` when one of them does
/// not say (it is unreachable, or INFO is not allowed).
pub(crate) async fn redis_cpu_seconds(urls: &[String], timeout: Duration) -> Option<f64> {
    let mut total = 0.0;
    for url in urls {
        total += parse_cpu(&info(url, timeout, "cpu").await?)?;
    }
    Some(total)
}

/// `used_cpu_sys + used_cpu_user` of one `INFO CPU` reply.
fn parse_cpu(info: &str) -> Option<f64> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some(field("used_cpu_sys")? + field("used_cpu_user")?)
}

/// The URLs of every server of a benchmark's target whose CPU counts: each
/// node of a private cluster, else the `--redis` URLs (or private servers).
pub(crate) fn cpu_urls(target: &Target) -> Vec<String> {
    match &target.cluster {
        Some(cluster) => cluster.urls(),
        None => target.urls.clone(),
    }
}

/// Measure Redis CPU over the window `from .. until` in a task of its own:
/// read at `from`, read at `until`; the task returns the seconds used
/// (`None` if a reading failed, e.g. a frozen node did not answer in
/// `timeout`).
pub(crate) fn cpu_window(
    urls: Vec<String>,
    timeout: Duration,
    from: tokio::time::Instant,
    until: tokio::time::Instant,
) -> tokio::task::JoinHandle<Option<f64>> {
    tokio::spawn(async move {
        let read = || tokio::time::timeout(timeout, redis_cpu_seconds(&urls, timeout));
        tokio::time::sleep_until(from).await;
        let start = read().await.ok().flatten();
        tokio::time::sleep_until(until).await;
        let end = read().await.ok().flatten();
        Some(end? - start?).filter(|used| *used >= 0.0)
    })
}

/// Microseconds of Redis CPU per operation: `used` seconds over `ops`.
pub(crate) fn us_per_op(used: Option<f64>, ops: u64) -> Option<f64> {
    used.filter(|_| ops > 0).map(|s| s * 1e6 / ops as f64)
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
        assert_eq!(redact("redis://:s3cret@h:1/"), "redis://:***@h:1/");
        assert_eq!(redact("rediss://u:p@w@h/0"), "rediss://u:***@h/0");
        assert_eq!(redact("redis://token@h"), "redis://***@h");
        assert_eq!(redact("notaurl"), "notaurl");
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::{parse_cpu, parse_version};

    #[test]
    fn a_valkey_shows_its_own_version() {
        let redis = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:0\r\n";
        assert_eq!(parse_version(redis).as_deref(), Some("7.0.15"));
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(parse_version(valkey).as_deref(), Some("valkey 9.1.2"));
        assert_eq!(parse_version("# Server\r\n"), None);
    }

    #[test]
    fn info_cpu_is_read_as_seconds() {
        let info = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\nused_cpu_sys_children:9.0\r\n";
        assert_eq!(parse_cpu(info), Some(1.75));
        assert_eq!(parse_cpu("# CPU\r\nused_cpu_sys:1.0\r\n"), None);
    }
}
