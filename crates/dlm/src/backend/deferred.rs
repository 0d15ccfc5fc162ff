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
    Failed(String),
}

/// The receiving side of a background connection.
pub(crate) struct Deferred<C> {
    state: watch::Receiver<State<C>>,
    gate: Arc<Gate>,
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
            State::Failed(e) => Err(not_connected(e)),
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
}

/// Connect to `client` in a background task (each attempt bounded by
/// `attempt_timeout`, retried with a backoff up to 1 s); the receiver follows
/// its state.
pub(crate) fn connect(
    client: redis::Client,
    config: ConnectionManagerConfig,
    attempt_timeout: Duration,
    preload: Vec<&'static redis::Script>,
) -> watch::Receiver<State<ConnectionManager>> {
    let (tx, rx) = watch::channel(State::Connecting { failures: 0 });
    tokio::spawn(async move {
        let mut pause = Duration::from_millis(50);
        let mut failures = 0u32;
        loop {
            let attempt = tokio::time::timeout(
                attempt_timeout,
                ConnectionManager::new_with_config(client.clone(), config.clone()),
            );
            let outcome = tokio::select! {
                _ = tx.closed() => return,
                outcome = attempt => outcome,
            };
            match outcome {
                Ok(Ok(mut manager)) => {
                    // Scripts loaded before the first request: a NOSCRIPT
                    // retry would let a later request overtake an earlier one.
                    for script in &preload {
                        let load = script.load_async(&mut manager);
                        if let Ok(Err(e)) = tokio::time::timeout(attempt_timeout, load).await {
                            tracing::debug!(error = %e, "preloading a script failed; EVALSHA falls back");
                        }
                    }
                    tx.send_replace(State::Up(manager));
                    return;
                }
                Ok(Err(e)) => {
                    let e = Error::from(e);
                    if !e.is_retryable() {
                        tracing::warn!(error = %e, "a Redlock node refused the connection for good");
                        tx.send_replace(State::Failed(e.to_string()));
                        return;
                    }
                    tracing::debug!(error = %e, "a Redlock node is not reachable yet; retrying");
                }
                Err(_) => tracing::debug!("connecting to a Redlock node timed out; retrying"),
            }
            failures = failures.saturating_add(1);
            tx.send_replace(State::Connecting { failures });
            tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    });
    rx
}
