//! A connection that is still being made: a node of a Redlock client
//! connects in the background, so that one slow or frozen node never holds
//! up the others (the client proceeds once a majority is connected).
//!
//! Until the connection is up, a request waits for it within the request's
//! own deadline; a request abandoned before then was never sent (the node
//! cannot have acted on it). Requests that waited go out in the order they
//! were made, and later ones queue behind them until they have, so that a
//! release never overtakes the acquire it undoes. The background task retries with a capped
//! backoff until it connects, gives up on an error no retry can fix (a wrong
//! password), and stops when the client is dropped. Once connected, it loads
//! the scripts it was given before the first request goes out.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, RedisError, RedisFuture, Value};
use tokio::sync::watch;

use crate::error::Error;

/// How a background connection is doing.
#[derive(Clone)]
pub(crate) enum State<C> {
    /// Still trying: `failures` attempts failed so far.
    Connecting {
        /// Failed attempts so far.
        failures: u32,
    },
    /// Up: requests go straight to it.
    Up(C),
    /// Given up: an error no retry can fix.
    Failed(Failure),
}

/// Why a background connection gave up: the error's text, and whether it
/// was Redis refusing the credentials or a server dlm cannot run on (so that
/// callers still see an [`Error::Auth`] or [`Error::UnsupportedServer`], not a
/// bare "unavailable").
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub text: String,
    pub auth: bool,
    /// The server is older than dlm's minimum.
    pub unsupported: bool,
}

impl Failure {
    /// The error a call that waited for the connection reports.
    pub(crate) fn into_error(self) -> Error {
        if self.auth {
            Error::Auth {
                source: self.text.into(),
            }
        } else if self.unsupported {
            Error::UnsupportedServer { reason: self.text }
        } else {
            Error::Unavailable {
                source: self.text.into(),
            }
        }
    }
}

/// The receiving side of a background connection.
pub(crate) struct Deferred<C> {
    state: watch::Receiver<State<C>>,
    gate: Arc<Gate>,
    /// Woken when a request finds the connection broken (Sentinel).
    pub(crate) broken: Option<Arc<tokio::sync::Notify>>,
}

/// Keeps requests made before the connection was up in order.
#[derive(Default)]
struct Gate {
    /// Taken in turn (tokio's mutex is fair: first come, first served).
    turn: tokio::sync::Mutex<()>,
    /// Requests still waiting for their turn or the connection.
    waiting: AtomicUsize,
}

/// A request's handle while the connection is not up yet (or earlier
/// requests still wait): it goes out in its turn.
pub(crate) struct Pending<C> {
    state: watch::Receiver<State<C>>,
    gate: Arc<Gate>,
    counted: bool,
}

impl<C> Pending<C> {
    fn done(&mut self) {
        if std::mem::take(&mut self.counted) {
            self.gate.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<C> Drop for Pending<C> {
    fn drop(&mut self) {
        self.done();
    }
}

/// Poll `fut` once, so that a multiplexed connection queues the request,
/// then hand it back to be awaited (or its output, if it is done already).
async fn start<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx))).await
}

impl<C: Clone> Pending<C> {
    async fn connection(&mut self) -> redis::RedisResult<C> {
        let state = self
            .state
            .wait_for(|s| !matches!(s, State::Connecting { .. }))
            .await
            .map_err(|_| not_connected("the client was dropped"))?;
        match &*state {
            State::Up(c) => Ok(c.clone()),
            State::Failed(e) => Err(not_connected(&e.text)),
            State::Connecting { .. } => Err(not_connected("still connecting")),
        }
    }
}

fn not_connected(detail: &str) -> RedisError {
    RedisError::from((ErrorKind::Io, "node not connected", detail.to_string()))
}

impl<C> ConnectionLike for Pending<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let gate = self.gate.clone();
            let turn = gate.turn.lock().await;
            let mut conn = self.connection().await?;
            let mut request = conn.req_packed_command(cmd);
            let started = start(&mut request).await;
            self.done();
            drop(turn);
            match started {
                Poll::Ready(reply) => reply,
                Poll::Pending => request.await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let gate = self.gate.clone();
            let turn = gate.turn.lock().await;
            let mut conn = self.connection().await?;
            let mut request = conn.req_packed_commands(pipeline, offset, count);
            let started = start(&mut request).await;
            self.done();
            drop(turn);
            match started {
                Poll::Ready(reply) => reply,
                Poll::Pending => request.await,
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &*self.state.borrow() {
            State::Up(c) => c.get_db(),
            _ => 0,
        }
    }
}

impl<C: Clone> Deferred<C> {
    pub(crate) fn new(state: watch::Receiver<State<C>>) -> Self {
        Deferred {
            state,
            gate: Arc::default(),
            broken: None,
        }
    }

    /// The connection when it is up and no earlier request waits, else a
    /// handle that waits for its turn and the connection.
    pub(crate) fn current(&self) -> Result<C, Pending<C>> {
        if self.gate.waiting.load(Ordering::Acquire) == 0
            && let State::Up(c) = &*self.state.borrow()
        {
            return Ok(c.clone());
        }
        self.gate.waiting.fetch_add(1, Ordering::AcqRel);
        Err(Pending {
            state: self.state.clone(),
            gate: self.gate.clone(),
            counted: true,
        })
    }

    pub(crate) fn is_up(&self) -> bool {
        matches!(&*self.state.borrow(), State::Up(_))
    }

    /// Attempts that failed so far while connecting (0 once up).
    pub(crate) fn failed_attempts(&self) -> u32 {
        match &*self.state.borrow() {
            State::Connecting { failures } => *failures,
            _ => 0,
        }
    }

    pub(crate) fn failure(&self) -> Option<Failure> {
        match &*self.state.borrow() {
            State::Failed(e) => Some(e.clone()),
            _ => None,
        }
    }
}

/// Makes a connection; also names the server it reached (to tell when a
/// re-check finds another one should be used).
pub(crate) type Connector<C> =
    Arc<dyn Fn() -> BoxFuture<'static, redis::RedisResult<(C, String)>> + Send + Sync>;

/// Given the server a connection reached, tells whether it is still the
/// one to use (Sentinel: still the master).
pub(crate) type Recheck = Arc<dyn Fn(String) -> BoxFuture<'static, bool> + Send + Sync>;

/// Connect to `client` in a background task (each attempt bounded by
/// `attempt_timeout`, retried with a backoff up to 1 s); the receiver follows
/// its state. The connection manager reconnects by itself from then on.
pub(crate) fn connect(
    client: redis::Client,
    config: ConnectionManagerConfig,
    attempt_timeout: Duration,
    preload: Vec<&'static redis::Script>,
) -> watch::Receiver<State<ConnectionManager>> {
    let connector: Connector<ConnectionManager> = Arc::new(move || {
        let (client, config) = (client.clone(), config.clone());
        Box::pin(async move {
            let addr = client.get_connection_info().addr().to_string();
            let manager = ConnectionManager::new_with_config(client, config).await?;
            Ok((manager, addr))
        })
    });
    maintain(connector, attempt_timeout, preload, None).0
}

/// Keep a connection made by `connector` in a background task: connect
/// (retrying with a backoff), publish it, and, with `recheck`, make it again
/// whenever a request finds it broken (an I/O error, `READONLY`,
/// `MASTERDOWN`) or the periodic re-check (every `recheck.1`) says another
/// server is to be used. Returns the state and the signal that a request
/// found it broken.
pub(crate) fn maintain<C>(
    connector: Connector<C>,
    attempt_timeout: Duration,
    preload: Vec<&'static redis::Script>,
    recheck: Option<(Recheck, Duration)>,
) -> (watch::Receiver<State<C>>, Arc<tokio::sync::Notify>)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let (tx, rx) = watch::channel(State::Connecting { failures: 0 });
    let broken = Arc::new(tokio::sync::Notify::new());
    let signal = broken.clone();
    tokio::spawn(async move {
        let mut ever_up = false;
        loop {
            // Before the first connection, an error no retry can fix (a wrong
            // password, an unknown master name) ends it; once it has been up,
            // every error is taken as passing (a failover in progress).
            let Some((conn, addr)) =
                connect_once(&tx, &connector, attempt_timeout, &preload, !ever_up).await
            else {
                return;
            };
            if ever_up {
                tracing::info!(server = %addr, "reconnected");
            }
            ever_up = true;
            tx.send_replace(State::Up(conn));
            let Some((recheck, every)) = &recheck else {
                return;
            };
            // Up until a request finds it broken or the re-check says otherwise.
            loop {
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = broken.notified() => {
                        tracing::info!(server = %addr, "the connection broke; reconnecting");
                        break;
                    }
                    _ = tokio::time::sleep(*every) => {
                        if !recheck(addr.clone()).await {
                            tracing::info!(server = %addr, "another server is to be used now; reconnecting");
                            break;
                        }
                    }
                }
            }
            tx.send_replace(State::Connecting { failures: 0 });
        }
    });
    (rx, signal)
}

/// Connect until it works, an error no retry can fix, or the receivers are gone.
async fn connect_once<C: ConnectionLike + Clone + Send + Sync + 'static>(
    tx: &watch::Sender<State<C>>,
    connector: &Connector<C>,
    attempt_timeout: Duration,
    preload: &[&'static redis::Script],
    give_up: bool,
) -> Option<(C, String)> {
    let mut pause = Duration::from_millis(50);
    let mut failures = 0u32;
    loop {
        let attempt = tokio::time::timeout(attempt_timeout, connector());
        let outcome = tokio::select! {
            _ = tx.closed() => return None,
            outcome = attempt => outcome,
        };
        match outcome {
            Ok(Ok((mut conn, addr))) => {
                // Scripts loaded before the first request: a NOSCRIPT retry
                // would let a later request overtake an earlier one.
                for script in preload {
                    let load = script.load_async(&mut conn);
                    if let Ok(Err(e)) = tokio::time::timeout(attempt_timeout, load).await {
                        tracing::debug!(error = %e, "preloading a script failed; EVALSHA falls back");
                    }
                }
                // A server older than dlm's minimum is refused here, with
                // the version found and the one needed: before the first
                // connection only (after a failover onto one, the calls'
                // errors say so, and a later failover may bring a good one).
                if give_up && let Some(reason) = unsupported(&mut conn, attempt_timeout).await {
                    tracing::error!(server = %addr, "{reason}");
                    tx.send_replace(State::Failed(Failure {
                        auth: false,
                        unsupported: true,
                        text: reason,
                    }));
                    return None;
                }
                return Some((conn, addr));
            }
            Ok(Err(e)) => {
                let e = Error::from(e);
                if give_up && !e.is_retryable() {
                    tracing::warn!(error = %e, "the server refused the connection for good");
                    tx.send_replace(State::Failed(Failure {
                        auth: matches!(e, Error::Auth { .. }),
                        unsupported: false,
                        text: e.to_string(),
                    }));
                    return None;
                }
                tracing::debug!(error = %e, "the server is not reachable yet; retrying");
            }
            Err(_) => tracing::debug!("connecting timed out; retrying"),
        }
        failures = failures.saturating_add(1);
        tx.send_replace(State::Connecting { failures });
        tokio::select! {
            _ = tx.closed() => return None,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Why dlm cannot run on the server behind `conn`, if it cannot (from its
/// `INFO server`; a server that does not answer it is given the benefit of
/// the doubt: a proxy may not pass `INFO` on).
async fn unsupported<C: ConnectionLike + Send>(conn: &mut C, timeout: Duration) -> Option<String> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    let info = cmd.query_async::<String>(conn);
    let text = tokio::time::timeout(timeout, info).await.ok()?.ok()?;
    super::server::ServerInfo::parse(&text)?.unsupported()
}

/// A connection whose errors that mean "this server is gone or demoted" wake
/// the task that maintains it.
pub(crate) struct Watched<T> {
    pub(crate) inner: T,
    pub(crate) broken: Arc<tokio::sync::Notify>,
}

fn breaks(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                | ErrorKind::Server(redis::ServerErrorKind::MasterDown)
        )
}

impl<T: ConnectionLike + Send> ConnectionLike for Watched<T> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.inner.req_packed_command(cmd).await;
            if let Err(e) = &r
                && breaks(e)
            {
                self.broken.notify_one();
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self
                .inner
                .req_packed_commands(pipeline, offset, count)
                .await;
            if let Err(e) = &r
                && breaks(e)
            {
                self.broken.notify_one();
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
