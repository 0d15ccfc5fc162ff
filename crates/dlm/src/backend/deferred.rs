//! A connection that is still being made: a node of a Redlock client
//! connects in the background, so that one slow or frozen node never holds
//! up the others (the client proceeds once a majority is connected).
//!
//! Until the connection is up, a request waits for it within the request's
//! own deadline; a request abandoned before then was never sent (the node
//! cannot have acted on it). The background task retries with a capped
//! backoff until it connects, gives up on an error no retry can fix (a wrong
//! password), and stops when the client is dropped.

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
pub(crate) struct Deferred<C>(pub(crate) watch::Receiver<State<C>>);

/// A request's handle while the connection is not up yet.
pub(crate) struct Pending<C>(watch::Receiver<State<C>>);

impl<C: Clone> Pending<C> {
    async fn connection(&mut self) -> redis::RedisResult<C> {
        let state = self
            .0
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
            let mut conn = self.connection().await?;
            conn.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            conn.req_packed_commands(pipeline, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        match &*self.0.borrow() {
            State::Up(c) => c.get_db(),
            _ => 0,
        }
    }
}

impl<C: Clone> Deferred<C> {
    /// The connection when it is up, else a handle that waits for it.
    pub(crate) fn current(&self) -> Result<C, Pending<C>> {
        match &*self.0.borrow() {
            State::Up(c) => Ok(c.clone()),
            _ => Err(Pending(self.0.clone())),
        }
    }

    pub(crate) fn is_up(&self) -> bool {
        matches!(&*self.0.borrow(), State::Up(_))
    }
}

/// Connect to `client` in a background task (each attempt bounded by
/// `attempt_timeout`, retried with a backoff up to 1 s); the receiver follows
/// its state.
pub(crate) fn connect(
    client: redis::Client,
    config: ConnectionManagerConfig,
    attempt_timeout: Duration,
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
                Ok(Ok(manager)) => {
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
