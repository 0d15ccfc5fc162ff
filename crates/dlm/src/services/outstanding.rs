//! Requests that may still reach Redis after their caller stopped waiting.
//!
//! A batched request whose call ended before its answer (its deadline
//! passed, or its future was dropped) can still be queued, or wait in a
//! later phase of its batch, and be written later. A request that undoes it
//! (the token-checked release or cancel of the same token) must not overtake
//! it: it would find nothing, and the late request would leave its token in
//! Redis for nobody until its TTL. The invariant every primitive shares, per
//! connection: *an undo of token T is written behind every request of T that
//! may still reach Redis, or that request is never written.*
//!
//! [`InFlight`] keeps, per token, such requests until they are answered;
//! an undo waits for them ([`InFlight::behind`]) and, past its own deadline,
//! still goes out behind them in the background that
//! [`crate::Client::settle`] waits for.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio_util::task::TaskTracker;

use crate::token::Token;

type Waits = HashMap<Token, Vec<watch::Receiver<()>>>;

/// One connection's requests that may still reach Redis, by token; cheap to
/// clone.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    /// Token -> a signal per request of it that may still reach Redis
    /// (closed once it cannot).
    waits: Arc<Mutex<Waits>>,
    /// The client's background work ([`crate::Client::settle`] waits for
    /// it): the watches on given-up requests and the undos sent behind them.
    pub(crate) background: TaskTracker,
}

impl InFlight {
    pub(crate) fn new(background: TaskTracker) -> Self {
        InFlight {
            waits: Arc::default(),
            background,
        }
    }

    fn waits(&self) -> std::sync::MutexGuard<'_, Waits> {
        self.waits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remember a request of `token` that may still reach Redis, until the
    /// returned value is dropped.
    pub(crate) fn outstanding(&self, token: &Token) -> Outstanding {
        let (done, mine) = watch::channel(());
        self.waits()
            .entry(token.clone())
            .or_default()
            .push(mine.clone());
        Outstanding {
            set: self.clone(),
            token: token.clone(),
            mine,
            _done: done,
        }
    }

    /// Remember a request of `token` whose caller gave up before it was
    /// answered, until `reply` resolves (it is answered, or dropped unsent).
    pub(crate) fn gave_up<T: Send + 'static>(&self, token: &Token, reply: oneshot::Receiver<T>) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let outstanding = self.outstanding(token);
        self.background.spawn(async move {
            let _ = reply.await;
            drop(outstanding);
        });
    }

    /// Whether a request of `token` may still reach Redis.
    pub(crate) fn contains(&self, token: &Token) -> bool {
        self.waits().contains_key(token)
    }

    /// Wait, at most `timeout`, until no request of `token` may still reach
    /// Redis: `Ok` with what is left of `timeout`, or, past it, `Err` with
    /// the rest of the wait (for an undo sent behind it in the background).
    pub(crate) async fn behind(&self, token: &Token, timeout: Duration) -> Result<Duration, Rest> {
        let waits = self.waits().get(token).cloned().unwrap_or_default();
        if waits.is_empty() {
            return Ok(timeout);
        }
        let started = tokio::time::Instant::now();
        let mut all: Rest = Box::pin(async move {
            for mut done in waits {
                let _ = done.changed().await;
            }
        });
        match tokio::time::timeout(timeout, &mut all).await {
            Ok(()) => Ok(timeout.saturating_sub(started.elapsed())),
            Err(_) => Err(all),
        }
    }
}

/// The rest of a wait of [`InFlight::behind`] past its deadline.
pub(crate) type Rest = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A request of `token` that may still reach Redis (see
/// [`InFlight::outstanding`]); forgotten on drop.
pub(crate) struct Outstanding {
    set: InFlight,
    token: Token,
    mine: watch::Receiver<()>,
    _done: watch::Sender<()>,
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        let mut map = self.set.waits();
        if let Some(waits) = map.get_mut(&self.token) {
            waits.retain(|w| !w.same_channel(&self.mine));
            if waits.is_empty() {
                map.remove(&self.token);
            }
        }
    }
}

/// The reply of a request whose call may end before it is answered; on
/// drop, still held (the call ended on its deadline or was dropped), it is
/// remembered in its [`InFlight`] until answered.
pub(crate) struct Unanswered<'a, T: Send + 'static> {
    set: &'a InFlight,
    token: &'a Token,
    /// Taken (`None`) once the call has its answer.
    pub(crate) reply: Option<oneshot::Receiver<T>>,
}

impl<'a, T: Send + 'static> Unanswered<'a, T> {
    pub(crate) fn new(set: &'a InFlight, token: &'a Token, reply: oneshot::Receiver<T>) -> Self {
        Unanswered {
            set,
            token,
            reply: Some(reply),
        }
    }
}

impl<T: Send + 'static> Drop for Unanswered<'_, T> {
    fn drop(&mut self) {
        if let Some(reply) = self.reply.take() {
            self.set.gave_up(self.token, reply);
        }
    }
}
