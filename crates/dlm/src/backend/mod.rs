//! The connection seam: any cloneable `redis` async connection, every call
//! with a deadline, scripts sent by SHA with a NOSCRIPT fallback, and whether
//! multi-key work must be grouped by hash slot.
//!
//! Everything above talks to Redis through [`Backend`] only, so a new
//! topology (cluster, sentinel, TLS) is a new way to build one here, and no
//! caller changes. This layer knows nothing of locks, queues or the client.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisFuture, ScriptInvocation, Value};

use crate::error::{Error, Result};
use crate::metrics::{self, RedisErrorKind};

mod deferred;
mod deployment;
pub(crate) mod server;
mod tls;

pub(crate) use deferred::State as ConnectState;
pub(crate) use deployment::Deployment;
pub use deployment::Topology;
pub(crate) use tls::Certificates;
pub use tls::TlsConfig;

/// Something that hands out a fresh handle on a shared connection per call.
trait SharedConnection: Send + Sync {
    fn handle(&self) -> BoxedConnection;

    /// False while a background connection is still being made.
    fn is_up(&self) -> bool {
        true
    }

    /// Why a background connection gave up, if it did.
    fn failure(&self) -> Option<deferred::Failure> {
        None
    }

    /// Attempts that failed so far while connecting in the background.
    fn failed_attempts(&self) -> u32 {
        0
    }
}

impl<C> SharedConnection for deferred::Deferred<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn handle(&self) -> BoxedConnection {
        let conn = match self.current() {
            Ok(c) => BoxedConnection::of(c),
            Err(pending) => BoxedConnection::Boxed(Box::new(pending)),
        };
        match &self.broken {
            Some(broken) => BoxedConnection::Boxed(Box::new(deferred::Watched {
                inner: conn,
                broken: broken.clone(),
            })),
            None => conn,
        }
    }

    fn is_up(&self) -> bool {
        deferred::Deferred::is_up(self)
    }

    fn failure(&self) -> Option<deferred::Failure> {
        deferred::Deferred::failure(self)
    }

    fn failed_attempts(&self) -> u32 {
        deferred::Deferred::failed_attempts(self)
    }
}

impl<C> SharedConnection for C
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn handle(&self) -> BoxedConnection {
        BoxedConnection::of(self.clone())
    }
}

/// A type-erased connection handle (one per concurrent call; clones of a
/// multiplexed connection pipeline their requests on one socket). The
/// connection dlm makes to one server is held as it is: a handle per call
/// without an allocation.
pub(crate) enum BoxedConnection {
    Manager(redis::aio::ConnectionManager),
    Boxed(Box<dyn ConnectionLike + Send + Sync>),
}

impl BoxedConnection {
    fn of<C: ConnectionLike + Send + Sync + 'static>(conn: C) -> Self {
        match (&conn as &dyn std::any::Any).downcast_ref::<redis::aio::ConnectionManager>() {
            Some(manager) => BoxedConnection::Manager(manager.clone()),
            None => BoxedConnection::Boxed(Box::new(conn)),
        }
    }
}

impl ConnectionLike for BoxedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            BoxedConnection::Manager(c) => c.req_packed_command(cmd),
            BoxedConnection::Boxed(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            BoxedConnection::Manager(c) => c.req_packed_commands(pipeline, offset, count),
            BoxedConnection::Boxed(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            BoxedConnection::Manager(c) => c.get_db(),
            BoxedConnection::Boxed(c) => c.get_db(),
        }
    }
}

/// What [`Backend::transaction_within`] did.
#[derive(Debug)]
pub(crate) enum Transaction {
    /// `EXEC` ran: the replies of the commands between `MULTI` and `EXEC`
    /// (a failed command is a `Value::ServerError` among them).
    Exec(Vec<Value>),
    /// `MULTI` was refused: the commands between ran one by one.
    RanAlone,
    /// Nothing was sent: this user may not run `MULTI` (refused before).
    NotSent,
}

/// One Redis deployment as dlm sees it.
#[derive(Clone)]
pub(crate) struct Backend {
    conn: Arc<dyn SharedConnection>,
    timeout: Duration,
    /// The connection may be a cluster: multi-key scripts group keys by slot.
    by_slot: bool,
    /// What dlm knows of the deployment's kind: `Some(false)` one server
    /// (standalone, Sentinel's master), `Some(true)` a Redis Cluster, `None`
    /// a connection the application passed in (the server tells, see
    /// `lock::Locks::prepare`).
    cluster: Option<bool>,
    /// The server refused `MULTI`/`EXEC` to this user once: do not send
    /// transactions again on this deployment.
    no_transactions: Arc<std::sync::atomic::AtomicBool>,
    /// What the server is and which native commands it has (learned lazily).
    known: Arc<server::Known>,
    /// The process that made it: its connections are that process's, so
    /// a forked child refuses to use them (issue 33: it waited for ever).
    pid: u32,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// A handle on the shared connection, refused in a process forked
    /// after this backend was made.
    fn handle(&self) -> Result<BoxedConnection> {
        let pid = std::process::id();
        if pid != self.pid {
            return Err(Error::Forked {
                made_in: self.pid,
                pid,
            });
        }
        Ok(self.conn.handle())
    }

    pub(crate) fn new<C>(conn: C, timeout: Duration) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        Backend {
            conn: Arc::new(conn),
            timeout,
            by_slot: true,
            cluster: None,
            no_transactions: Arc::default(),
            known: Arc::default(),
            pid: std::process::id(),
        }
    }

    /// One server reached through `config` by a background task: usable at
    /// once (a request waits for the connection within its own deadline),
    /// and `state` tells how the connection is doing. `preload`: scripts
    /// loaded once connected, before any request goes out.
    pub(crate) fn connect_in_background(
        client: redis::Client,
        config: redis::aio::ConnectionManagerConfig,
        attempt_timeout: Duration,
        timeout: Duration,
        preload: Vec<&'static redis::Script>,
    ) -> (
        Self,
        tokio::sync::watch::Receiver<ConnectState<redis::aio::ConnectionManager>>,
    ) {
        let state = deferred::connect(client, config, attempt_timeout, preload);
        let backend = Backend {
            conn: Arc::new(deferred::Deferred::new(state.clone())),
            timeout,
            by_slot: true,
            cluster: None,
            no_transactions: Arc::default(),
            known: Arc::default(),
            pid: std::process::id(),
        };
        (backend, state)
    }

    /// A connection kept by a background task that remakes it when a
    /// request finds it broken (see `deferred::maintain`).
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    pub(crate) fn maintained<C>(
        state: tokio::sync::watch::Receiver<ConnectState<C>>,
        broken: Arc<tokio::sync::Notify>,
        timeout: Duration,
    ) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let mut deferred = deferred::Deferred::new(state);
        deferred.broken = Some(broken);
        Backend {
            conn: Arc::new(deferred),
            timeout,
            by_slot: true,
            cluster: None,
            no_transactions: Arc::default(),
            known: Arc::default(),
            pid: std::process::id(),
        }
    }

    /// How a background connection is doing: up, given up (with why), or
    /// still trying after this many failed attempts.
    pub(crate) fn connecting(&self) -> (bool, Option<deferred::Failure>, u32) {
        (
            self.conn.is_up(),
            self.conn.failure(),
            self.conn.failed_attempts(),
        )
    }

    /// A connection kept by a background task (no re-check, no broken
    /// signal): the cluster client reconnects by itself.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn kept<C>(
        state: tokio::sync::watch::Receiver<ConnectState<C>>,
        timeout: Duration,
    ) -> Self
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        Backend {
            conn: Arc::new(deferred::Deferred::new(state)),
            timeout,
            by_slot: true,
            cluster: None,
            no_transactions: Arc::default(),
            known: Arc::default(),
            pid: std::process::id(),
        }
    }

    /// Wait until the connection is up, at most `bound`; an error that no
    /// retry can fix ends the wait at once.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    pub(crate) async fn wait_up(&self, bound: Duration) -> Result<()> {
        let started = tokio::time::Instant::now();
        loop {
            if self.conn.is_up() {
                return Ok(());
            }
            if let Some(e) = self.conn.failure() {
                return Err(e.into_error());
            }
            if started.elapsed() >= bound {
                return Err(Error::Timeout(bound));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Known to be one standalone server (dlm opened it from a URL): multi-key
    /// scripts need not group keys by hash slot.
    pub(crate) fn standalone(mut self) -> Self {
        self.by_slot = false;
        self.cluster = Some(false);
        self
    }

    /// Known to be a Redis Cluster (dlm opened it from the cluster's URLs).
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn cluster(mut self) -> Self {
        self.cluster = Some(true);
        self
    }

    /// Whether the deployment is known to be a Redis Cluster (`None`: a
    /// connection the application passed in; ask the server).
    pub(crate) fn known_cluster(&self) -> Option<bool> {
        self.cluster
    }

    /// Whether this user was refused `MULTI` once: transactions are no
    /// longer sent on this deployment.
    pub(crate) fn transactions_refused(&self) -> bool {
        self.no_transactions
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether to run `capability`'s native command now instead of its
    /// script: the server has it (as last learned) and never refused it.
    /// Until the server is learned (in the background, started here, and
    /// again every [`server::RELEARN_EVERY`]) the answer is no: the script
    /// path is always correct.
    pub(crate) fn native(&self, capability: server::Capability) -> bool {
        let (usable, learn) = self.known.check(capability);
        if learn {
            let me = self.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(async move {
                        if let Err(e) = me.learn().await {
                            tracing::debug!(error = %e, "learning the server failed; scripts meanwhile");
                        }
                    });
                }
                Err(_) => self.known.learned(None),
            }
        }
        usable
    }

    /// Learn what the server is now (`INFO server`), and remember it for
    /// [`Backend::native`]. The answer lists the native commands this
    /// deployment uses (none that the server refused, none when they are
    /// switched off).
    pub(crate) async fn learn(&self) -> Result<server::ServerInfo> {
        let text = self.query::<String>(redis::cmd("INFO").arg("server")).await;
        let info = text
            .as_ref()
            .ok()
            .and_then(|t| server::ServerInfo::parse(t));
        self.known.learned(info.as_ref());
        match (info, text) {
            (Some(info), _) => Ok(self.known.in_use(info)),
            (None, Err(e)) => Err(e),
            (None, Ok(_)) => Err(Error::protocol("INFO server names no version")),
        }
    }

    /// Learn the server while connecting: refuse one dlm cannot run on
    /// ([`Error::UnsupportedServer`], naming the version found and the one
    /// needed), and know its native commands before the first request. A
    /// server that does not answer `INFO` (a proxy may not pass it on) is
    /// taken as it is: scripts until a later learn works.
    pub(crate) async fn learn_at_connect(&self) -> Result<()> {
        match self.learn().await {
            Ok(info) => match info.unsupported() {
                Some(reason) => Err(Error::UnsupportedServer { reason }),
                None => Ok(()),
            },
            Err(e @ (Error::Auth { .. } | Error::Timeout(_) | Error::Unavailable { .. })) => Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "INFO server failed; dlm uses its scripts");
                Ok(())
            }
        }
    }

    /// The server refused `capability`'s native command (`why`): its script
    /// from now on, with one warning.
    pub(crate) fn native_refused(&self, capability: server::Capability, why: &str) {
        self.known.refused(capability, why);
    }

    /// Switch native commands off for this deployment (scripts only), or on.
    pub(crate) fn set_native_off(&self, off: bool) {
        self.known.set_off(off);
    }

    /// Whether multi-key scripts must group keys by hash slot.
    pub(crate) fn batch_by_slot(&self) -> bool {
        self.by_slot
    }

    /// The deadline of one call.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Load `scripts` now, all at once, each within the client's deadline
    /// (best effort: a script that fails to load is loaded on its first
    /// NOSCRIPT). A script's first call then needs no NOSCRIPT round trip,
    /// whose lost reply would mean an operation that never ran.
    pub(crate) async fn preload(&self, scripts: &[&'static redis::Script]) {
        let loads = scripts.iter().map(|script| async move {
            let Ok(mut conn) = self.handle() else {
                return;
            };
            if let Err(e) = deadline(self.timeout, script.load_async(&mut conn)).await {
                tracing::debug!(error = %e, "preloading a script failed; EVALSHA falls back");
            }
        });
        futures_util::future::join_all(loads).await;
    }

    /// Run a script (EVALSHA, loading it on NOSCRIPT) within the client's deadline.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T> {
        self.eval_within(self.timeout, invocation).await
    }

    /// Run a script within `timeout` (at most the client's deadline).
    pub(crate) async fn eval_within<T: FromRedisValue>(
        &self,
        timeout: Duration,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T> {
        let mut conn = self.handle()?;
        deadline(
            timeout.min(self.timeout),
            invocation.invoke_async(&mut conn),
        )
        .await
    }

    /// Run `cmd`, an `EVALSHA` of `script` built by [`evalsha`], within
    /// `timeout` (at most the client's deadline), loading the script on
    /// NOSCRIPT and sending it once more. The hot paths build the command
    /// directly: one buffer instead of a vector per key and argument, copied
    /// again into a command.
    pub(crate) async fn evalsha_within<T: FromRedisValue>(
        &self,
        timeout: Duration,
        script: &redis::Script,
        cmd: &Cmd,
    ) -> Result<T> {
        let mut conn = self.handle()?;
        deadline(timeout.min(self.timeout), async move {
            match cmd.query_async(&mut conn).await {
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    script.load_async(&mut conn).await?;
                    cmd.query_async(&mut conn).await
                }
                other => other,
            }
        })
        .await
    }

    /// Run `pipe`, a transaction that the caller opened with `MULTI` and
    /// closed with `EXEC` (built with [`transaction`]), within `timeout` (at
    /// most the client's deadline).
    ///
    /// * [`Transaction::Exec`]: `EXEC`'s replies of the commands between, in
    ///   order; a command that failed inside the transaction is a
    ///   `Value::ServerError` there, for the caller to name (Redis rolls
    ///   nothing back: the other commands ran).
    /// * [`Transaction::RanAlone`]: the server refused `MULTI`, so the
    ///   commands between ran one by one, not atomically; the caller must
    ///   decide their outcome another way.
    /// * [`Transaction::NotSent`]: this user was refused `MULTI` by its ACL
    ///   before (an ACL made before dlm used transactions): nothing was sent,
    ///   and nothing will be on this deployment.
    ///
    /// A command the server refused to queue (a cluster node's MOVED) or an
    /// aborted transaction fails the call; so does a lost reply (then the
    /// commands may have run: the caller's outcome is unsure).
    ///
    /// (`MULTI` and `EXEC` are sent as plain commands of a pipeline, not as
    /// redis-rs's atomic pipeline, whose reply accounting underflows when
    /// `MULTI` itself is refused.)
    pub(crate) async fn transaction_within(
        &self,
        timeout: Duration,
        pipe: &redis::Pipeline,
    ) -> Result<Transaction> {
        use std::sync::atomic::Ordering;
        if self.no_transactions.load(Ordering::Relaxed) {
            return Ok(Transaction::NotSent);
        }
        let mut conn = self.handle()?;
        let replies: Vec<Value> =
            deadline(timeout.min(self.timeout), pipe.query_async(&mut conn)).await?;
        let mut replies = replies.into_iter();
        match replies.next() {
            Some(Value::Okay) => {}
            Some(Value::ServerError(e))
                if matches!(e.kind(), Some(redis::ServerErrorKind::NoPerm)) =>
            {
                if !self.no_transactions.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        error = %e.details().unwrap_or_default(),
                        "this Redis user may not run MULTI/EXEC (an ACL made before dlm used \
                         them): lock acquires fall back to a script; add +multi +exec \
                         (dlm::keys::ACL_RULES) for the faster path"
                    );
                }
                return Ok(Transaction::RanAlone);
            }
            // Refused for another reason (LOADING, ...): the commands after
            // it ran one by one this time, so their outcome is the caller's
            // to decide again, by other means.
            Some(Value::ServerError(e)) => {
                tracing::debug!(error = %e.details().unwrap_or_default(), "MULTI refused");
                return Ok(Transaction::RanAlone);
            }
            other => {
                return Err(Error::protocol(format!("MULTI replied {other:?}")));
            }
        }
        let Some(exec) = replies.next_back() else {
            return Err(Error::protocol("a transaction without its EXEC reply"));
        };
        // A command the server would not queue (MOVED, ASK, a syntax error)
        // aborts the transaction: its own error says the most.
        if let Some(Value::ServerError(e)) = replies.find(|v| matches!(v, Value::ServerError(_))) {
            return Err(Error::from(redis::RedisError::from(e)));
        }
        match exec {
            Value::Array(values) => Ok(Transaction::Exec(values)),
            Value::ServerError(e) => Err(Error::from(redis::RedisError::from(e))),
            other => Err(Error::protocol(format!("EXEC replied {other:?}"))),
        }
    }

    /// Run `pipe` (one connection, one round trip) within `bound`, which
    /// may exceed the client's deadline: for a `WAIT`, whose reply rightly
    /// takes up to its own timeout. Errors inside the pipeline are values
    /// when it was built with `ignore_errors`.
    pub(crate) async fn pipeline_for(
        &self,
        bound: Duration,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Value>> {
        let mut conn = self.conn.handle();
        deadline(bound, pipe.query_async(&mut conn)).await
    }

    /// Run `pipe` (one round trip, no transaction) within `timeout` (at
    /// most the client's deadline). Errors inside the pipeline are values
    /// when it was built with `ignore_errors`.
    pub(crate) async fn pipeline_within(
        &self,
        timeout: Duration,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Value>> {
        let mut conn = self.handle()?;
        deadline(timeout.min(self.timeout), pipe.query_async(&mut conn)).await
    }

    /// Run one command within the client's deadline.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.query_within(self.timeout, cmd).await
    }

    /// Run one command within `timeout` (at most the client's deadline).
    pub(crate) async fn query_within<T: FromRedisValue>(
        &self,
        timeout: Duration,
        cmd: &Cmd,
    ) -> Result<T> {
        let mut conn = self.handle()?;
        deadline(timeout.min(self.timeout), cmd.query_async(&mut conn)).await
    }
}

/// A transaction of `commands` commands to come, for
/// [`Backend::transaction_within`]: `MULTI` is in it; add the commands, then
/// `EXEC` with [`end_transaction`].
pub(crate) fn transaction(commands: usize) -> redis::Pipeline {
    let mut pipe = redis::Pipeline::with_capacity(commands + 2);
    pipe.ignore_errors();
    pipe.cmd("MULTI");
    pipe
}

/// Close a transaction begun with [`transaction`].
pub(crate) fn end_transaction(pipe: &mut redis::Pipeline) {
    pipe.cmd("EXEC");
}

/// The start of an `EVALSHA` of `script` with `keys` keys, its keys and
/// arguments to follow (for [`Backend::evalsha_within`]); `args` and `bytes`
/// size its buffers.
pub(crate) fn evalsha(script: &redis::Script, keys: usize, args: usize, bytes: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + keys + args, 64 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

/// How many keys one `SCAN` call asks Redis to look at.
const SCAN_COUNT: usize = 1000;
/// The most `SCAN` calls one [`Backend::scan`] makes (bounds its cost on a
/// large keyspace: at most about a million keys looked at).
const SCAN_CALLS: usize = 1000;

impl Backend {
    /// Up to `limit` keys matching the glob `pattern`, found with `SCAN`
    /// (never `KEYS`, which blocks the server), in no particular order. On a
    /// Redis Cluster only the node the connection picks is scanned.
    pub(crate) async fn scan(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        Ok(self.scan_bounded(pattern, limit).await?.0)
    }

    /// The keys matching `pattern` (at most `limit`), and whether the scan
    /// completed: `false` when it stopped at `limit` keys or at its bound of
    /// [`SCAN_CALLS`] calls (a keyspace of over about a million keys), so
    /// that keys may have been missed.
    pub(crate) async fn scan_bounded(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<(Vec<String>, bool)> {
        let mut found = Vec::new();
        let mut cursor: u64 = 0;
        for _ in 0..SCAN_CALLS {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys): (u64, Vec<String>) = self.query(&cmd).await?;
            for key in keys {
                if found.len() == limit {
                    return Ok((found, false));
                }
                found.push(key);
            }
            cursor = next;
            if cursor == 0 {
                return Ok((found, true));
            }
        }
        Ok((found, false))
    }
}

/// `text` with the glob characters of `SCAN MATCH` (`*?[]\`) escaped, so
/// that it matches only itself.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A duration as whole milliseconds, the unit scripts take (saturating).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Run a call to Redis within `timeout`; a failure is counted in
/// `dlm_redis_errors_total{kind}`.
async fn deadline<T>(
    timeout: Duration,
    fut: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            metrics::redis_error(error_kind(&e));
            // The driver's own deadline (a silent server while connecting)
            // is a timeout too, not an unreachable server.
            if e.is_timeout() {
                return Err(Error::Timeout(timeout));
            }
            Err(Error::from(e))
        }
        Err(_) => {
            metrics::redis_error(RedisErrorKind::Timeout);
            Err(Error::Timeout(timeout))
        }
    }
}

/// The bounded kind of a failed call, for `dlm_redis_errors_total{kind}`.
fn error_kind(e: &redis::RedisError) -> RedisErrorKind {
    use redis::{ErrorKind as K, ServerErrorKind as S};
    if e.is_timeout() {
        return RedisErrorKind::Timeout;
    }
    if e.is_connection_refusal() {
        return RedisErrorKind::Refused;
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        return RedisErrorKind::Connection;
    }
    match e.kind() {
        K::Server(S::Moved | S::Ask) => RedisErrorKind::ClusterMoved,
        K::Server(S::ClusterDown | S::TryAgain | S::CrossSlot | S::MasterDown)
        | K::ClusterConnectionNotFound => RedisErrorKind::Cluster,
        K::Server(S::ReadOnly) => RedisErrorKind::ReadOnly,
        K::Server(S::BusyLoading) => RedisErrorKind::Loading,
        K::AuthenticationFailed | K::Server(S::NoPerm) => RedisErrorKind::Auth,
        K::Server(_) | K::Extension => RedisErrorKind::Server,
        K::Parse | K::UnexpectedReturnType => RedisErrorKind::Protocol,
        _ => RedisErrorKind::Other,
    }
}
