//! Locks on one Redis: acquire with a deadline, release and extend by token,
//! fencing tokens, a self-renewing guard.
//!
//! See [`Lock`] for the entry point and [`crate::keys`] for the key schema.

mod batch;
mod guard;
mod inspect;
mod locks;
mod multi;
mod nodes;
mod ops;
mod renew;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

pub use crate::services::lease::LostSignal;
pub use crate::services::options::{LockOptions, LockStatus, MAX_TTL, MAX_WAIT, MIN_TTL};
pub(crate) use crate::services::options::{Outcome, validate_ttl};
pub(crate) use batch::Node;
pub use guard::{LockContext, LockGuard, Released};
pub use inspect::{HeldLock, MAX_HELD_LOCKS};
pub(crate) use locks::Locks;
pub use locks::ReleaseAll;
pub use multi::{MAX_MULTI_LOCK, MultiGuard, MultiLock, any_lost};
pub(crate) use nodes::{Nodes, Quorum};

/// The lock's scripts, loaded whenever a connection is made (so that no
/// first use retries after NOSCRIPT: that could reorder requests, and a lost
/// NOSCRIPT reply would mean an operation that never ran).
pub(crate) fn preloaded_scripts() -> Vec<&'static redis::Script> {
    let mut scripts = batch::scripts();
    scripts.extend(ops::scripts());
    scripts.extend(renew::scripts());
    scripts.extend(multi::scripts());
    scripts
}

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::metrics::{AcquireOutcome, LockLabel};
use crate::services::jittered;
use crate::services::lease::{LeaseState, drift};
use crate::services::replication::{Replication, confirm};
use crate::services::wakeups as wait;
use crate::token::Token;
use locks::Held;
use nodes::Try;

/// An acquisition queued for a hand-over (see [`Lock::enlist`]); leaves
/// the queue on drop.
struct Enlistment {
    baton: Arc<wait::Baton>,
    _enlisted: wait::Enlisted,
    /// Redlock: the baton's own token, armed for release until the lock is
    /// ours by it (`None` on one Redis: the baton carries the acquisition's
    /// token, which `pending` guards).
    own: Option<PendingToken>,
}

/// Completes when the lock was handed to `baton` (never without one).
async fn handed(baton: Option<Arc<wait::Baton>>) {
    match baton {
        Some(b) => b.granted().await,
        None => std::future::pending().await,
    }
}

/// How an acquire call ended, for its metric and span: `Busy` without a wait
/// is `busy`, after a wait `timeout`.
fn acquire_outcome(result: &Result<LockGuard>, opts: &LockOptions) -> AcquireOutcome {
    match result {
        Ok(_) => AcquireOutcome::Acquired,
        Err(Error::Busy { .. }) if opts.wait.is_zero() => AcquireOutcome::Busy,
        Err(Error::Busy { .. }) => AcquireOutcome::Timeout,
        Err(Error::NoQuorum { .. }) => AcquireOutcome::NoQuorum,
        Err(_) => AcquireOutcome::Error,
    }
}

/// An acquisition's token that may be stored in Redis without our knowing.
struct PendingToken {
    locks: Arc<Locks>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    token: Token,
    /// Release on drop.
    armed: bool,
    /// An attempt's reply was lost: stay armed until success.
    unsure: bool,
}

impl PendingToken {
    /// This token, to be released on drop whatever its attempts' replies.
    fn retired(mut self) -> Self {
        self.armed = true;
        self
    }
}

impl Drop for PendingToken {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let locks = self.locks.clone();
            let (name, keys, token) = (self.name.clone(), self.keys.clone(), self.token.clone());
            rt.spawn(locks.background.clone().track_future(async move {
                let _ = locks.nodes.release(&name, &keys, &token).await;
            }));
        }
    }
}

/// A named lock on one Redis; cheap to clone. Get one from [`crate::Client::lock`].
///
/// ```no_run
/// # async fn demo() -> dlm::Result<()> {
/// use std::time::Duration;
/// let client = dlm::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("invoices");
/// let opts = dlm::LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(2));
/// let guard = lock.acquire(&opts).await?;
/// // ... the critical section, passing guard.fence() to storage ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Lock {
    locks: Arc<Locks>,
    name: Arc<str>,
    raw: bool,
    /// The `lock` label of its metrics (none unless the client opted in).
    label: LockLabel,
}

impl Lock {
    pub(crate) fn new(locks: Arc<Locks>, name: String) -> Self {
        let name: Arc<str> = name.into();
        let label = match &locks.lock_names {
            Some(names) => names.label(&name),
            None => LockLabel::default(),
        };
        Lock {
            locks,
            name,
            raw: false,
            label,
        }
    }

    /// Use `name` itself as the Redis key, without prefix or hash tag, to share
    /// the lock with other clients that store a random token under the plain
    /// key with `SET NX PX` (redis-py's `Lock`, node-redlock, redsync).
    pub fn raw_key(mut self) -> Self {
        self.raw = true;
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key this lock uses (an error for an invalid name).
    pub fn key(&self) -> Result<String> {
        Ok(self.keys()?.lock.to_string())
    }

    /// The key of the fencing counter this lock's tokens come from (on one
    /// Redis shared by every lock under the same prefix, on a Redis Cluster
    /// by the locks of its hash slot; see [`crate::keys`]). For tools that
    /// clean up after themselves.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// assert!(client.lock("jobs").fence_key()?.starts_with("dlm:lock:fence"));
    /// # Ok(()) }
    /// ```
    ///
    /// A client built on a connection the application passed in
    /// ([`crate::ClientBuilder::connection`]) learns whether that is a Redis
    /// Cluster at its first lock operation; before that this is an
    /// [`Error::InvalidArgument`] saying so.
    pub fn fence_key(&self) -> Result<String> {
        if self.locks.fence_layout().is_none() {
            return Err(Error::invalid(
                "fence key",
                "not known yet: a client built on a connection() learns whether the server is \
                 a Redis Cluster at its first lock operation",
            ));
        }
        Ok(self.keys()?.fence.to_string())
    }

    fn keys(&self) -> Result<LockKeys> {
        self.locks.lock_keys(&self.name, self.raw)
    }

    /// Acquire the lock, waiting up to `opts.wait` for it.
    ///
    /// Fails with [`Error::Busy`] (with the holder's remaining TTL) when it
    /// could not be had in time, [`Error::InvalidArgument`] for bad input, and
    /// [`Error::Unavailable`] / [`Error::Timeout`] when Redis stayed unreachable
    /// until the deadline. Never waits longer than `wait` plus one call timeout.
    pub async fn acquire(&self, opts: &LockOptions) -> Result<LockGuard> {
        let started = Instant::now();
        let result = match self.checked(opts).await {
            Ok(keys) => {
                let span = tracing::debug_span!(
                    "dlm.acquire",
                    name = %self.name,
                    key = %keys.lock,
                    outcome = tracing::field::Empty
                );
                let result = self
                    .acquire_with(Arc::new(keys), opts, started)
                    .instrument(span.clone())
                    .await;
                span.record("outcome", acquire_outcome(&result, opts).as_str());
                result
            }
            Err(e) => Err(e),
        };
        self.label
            .acquire(acquire_outcome(&result, opts), started.elapsed());
        result
    }

    /// The keys of an acquisition whose options are valid for these nodes
    /// (with the deployment's fencing counter: see `Locks::prepare`).
    async fn checked(&self, opts: &LockOptions) -> Result<LockKeys> {
        opts.validate()?;
        self.locks.nodes.check_ttl(opts.ttl, opts.node_timeout)?;
        if !self.locks.is_prepared() {
            // Nothing is sent for an invalid name.
            self.keys()?;
            // Redis unreachable: tried again within the acquisition's wait.
            let deadline = Instant::now() + opts.wait;
            // Each try within what is left of the wait plus one call's
            // deadline (tasks that start their first lock operation together
            // take turns at it, and must not queue past their own bound).
            let call = self.locks.call_timeout();
            loop {
                // (A little past the call's own deadline, which fires first
                // and is counted in the metrics.)
                let tried = tokio::time::timeout_at(
                    deadline.max(Instant::now()) + call + call / 4,
                    self.locks.prepare(),
                )
                .await
                .unwrap_or(Err(Error::Timeout(call)));
                match tried {
                    Ok(()) => break,
                    Err(e) if e.is_retryable() && Instant::now() < deadline => {
                        let pause = jittered(opts.retry_interval);
                        tokio::time::sleep_until((Instant::now() + pause).min(deadline)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        self.keys()
    }

    /// The keys, with the deployment's fencing counter known.
    async fn prepared_keys(&self) -> Result<LockKeys> {
        if !self.locks.is_prepared() {
            self.keys()?;
            self.locks.prepare().await?;
        }
        self.keys()
    }

    async fn acquire_with(
        &self,
        keys: Arc<LockKeys>,
        opts: &LockOptions,
        started: Instant,
    ) -> Result<LockGuard> {
        let inner = &self.locks;
        let mut token = Token::random()?;
        let deadline = started + opts.wait;
        let mut waiter = None;
        let mut baton = None;
        let mut attempts = 0u32;
        // Redlock split votes in a row (see `split_backoff`).
        let mut splits = 0u32;
        // The next attempt takes a fresh token (see where it is read).
        let mut retire = false;
        // Releases our token if this future is dropped mid-attempt or gives up
        // after an attempt whose reply was lost: the SET may have landed.
        let mut pending = PendingToken {
            locks: inner.clone(),
            name: self.name.clone(),
            keys: keys.clone(),
            token: token.clone(),
            armed: false,
            unsure: false,
        };
        // Fairness within this client: when other tasks of it already wait for
        // this lock, queue behind them (FIFO wake-ups) instead of cutting in.
        let mut queue_first = false;
        // Whether this acquisition had to wait (`dlm_lock_wait_seconds`).
        let mut waited = false;
        let marker = waiters_marker(opts, inner.wakeups.is_some());
        if !opts.wait.is_zero()
            && let Some(w) = &inner.wakeups
            && w.waiting(&keys.channel) > 0
        {
            let w = w.register(&keys.channel);
            queue_first = w.ensure_subscribed().await;
            waited = queue_first;
            waiter = Some(w);
            baton = self.enlist(&keys, &token, opts.ttl, &mut pending);
        }
        loop {
            if std::mem::take(&mut retire) {
                // A grant this acquisition gave back (too few replicas had
                // it): that release may still wait, in the background, for an
                // earlier given-up attempt of the token (see
                // `batch::Node::release`), and would delete a later grant of
                // the same token. A fresh token keeps it off the next
                // attempts; the old one is released once more as it is
                // retired (harmless: token-checked), and the hand-over queue
                // gets the new one.
                token = Token::random()?;
                let old = std::mem::replace(
                    &mut pending,
                    PendingToken {
                        locks: inner.clone(),
                        name: self.name.clone(),
                        keys: keys.clone(),
                        token: token.clone(),
                        armed: false,
                        unsure: false,
                    },
                );
                drop(old.retired());
                if baton.is_some() {
                    baton = self.enlist(&keys, &token, opts.ttl, &mut pending);
                }
            }
            // A releasing task of this client handed the lock to us.
            if let Some(e) = &mut baton
                && let Some((fence, sent)) = e.baton.take_grant()
            {
                let valid_until = sent + opts.ttl.saturating_sub(drift(opts.ttl));
                if let Some(mut own) = e.own.take() {
                    // Redlock: a majority of nodes was handed over to the
                    // baton's own token (see `guard::hand_over`); no fence.
                    let grant = nodes::Grant {
                        fence: None,
                        valid_until,
                    };
                    if Instant::now() >= valid_until {
                        // Too late to count (`own` releases it on drop).
                        baton = None;
                        continue;
                    }
                    own.armed = false;
                    e.baton.keep();
                    let token = own.token.clone();
                    self.label.handoff(sent.elapsed());
                    self.label.wait(started.elapsed());
                    tracing::debug!(attempts, "handed over on a majority");
                    return Ok(self.guard(keys, token, grant, opts));
                }
                let grant = nodes::Grant {
                    fence: Some(fence),
                    valid_until,
                };
                // A hand-over is a grant like any other: counted only once
                // replicated. Until it is, the token stays armed (this
                // future may be dropped while the replicas are waited for),
                // and after a failure too, so the grant is released when
                // this acquisition ends.
                pending.armed = true;
                if let Err(e) = self.replicated(&keys, &token, opts).await {
                    pending.unsure = true;
                    return Err(e);
                }
                pending.armed = false;
                e.baton.keep();
                self.label.handoff(sent.elapsed());
                self.label.wait(started.elapsed());
                tracing::debug!(fence = ?grant.fence, attempts, "handed over");
                return Ok(self.guard(keys, token, grant, opts));
            }
            let handed = handed(baton.as_ref().map(|e| e.baton.clone()));
            let mut handed = std::pin::pin!(handed);
            let notify = waiter.as_ref().map(wait::Waiter::notify);
            let notified = notify.as_ref().map(|n| n.notified());
            let mut notified = std::pin::pin!(notified);
            if let Some(n) = notified.as_mut().as_pin_mut() {
                n.enable();
            }
            if std::mem::take(&mut queue_first)
                && let Some(n) = notified.as_mut().as_pin_mut()
            {
                let until = (Instant::now() + jittered(opts.retry_interval)).min(deadline);
                tokio::select! {
                    _ = n => {}
                    _ = &mut handed => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            attempts += 1;
            self.label.attempt();
            // On one Redis an acquisition keeps its token across attempts:
            // an attempt whose reply was lost may have set the key, and the
            // next attempt, finding the key already holding this token,
            // takes it as granted (TTL reset, fresh fence) instead of
            // waiting for a lock that is in fact its own; a hand-over
            // (`release_to.lua`) to this acquisition also targets this token.
            if attempts > 1 && inner.nodes.single().is_none() {
                // Redlock: a failed attempt's releases may still be on their
                // way to slow nodes; a fresh token keeps them off this one.
                token = Token::random()?;
                pending.token = token.clone();
            }
            pending.armed = true;
            let tried_at = Instant::now();
            let attempt = inner
                .nodes
                .acquire(
                    &self.name,
                    &keys,
                    &token,
                    opts.ttl,
                    marker,
                    opts.node_timeout,
                    attempts == 1,
                )
                .await;
            pending.armed = pending.unsure;
            let mut split = false;
            let (err, holder_ttl) = match attempt {
                Ok(Try::Acquired(grant)) => {
                    // The grant is in Redis until it is ours: armed while
                    // the replicas are waited for (this future may be
                    // dropped meanwhile), and after any failure of that wait
                    // (its reply lost, an error; `replicated` released a
                    // grant too few replicas had, and a second token-checked
                    // release of it is harmless).
                    pending.armed = true;
                    match self.replicated(&keys, &token, opts).await {
                        Err(e) => {
                            pending.unsure = true;
                            retire = true;
                            (e, None)
                        }
                        Ok(()) => {
                            pending.armed = false;
                            // One Redis: the baton carries this token, and a
                            // hand-over to it may have landed just before
                            // this attempt (see `guard::hand_over`).
                            if let Some(e) = &baton
                                && e.baton.token() == &token
                            {
                                e.baton.keep();
                            }
                            if waited || attempts > 1 {
                                self.label.wait(started.elapsed());
                            }
                            tracing::debug!(fence = ?grant.fence, attempts, "acquired");
                            return Ok(self.guard(keys, token, grant, opts));
                        }
                    }
                }
                Ok(Try::Busy(ttl)) => (
                    Error::Busy {
                        name: self.name.to_string(),
                        ttl,
                    },
                    ttl,
                ),
                Ok(Try::Split) => {
                    split = true;
                    (
                        Error::Busy {
                            name: self.name.to_string(),
                            ttl: None,
                        },
                        None,
                    )
                }
                // Redlock: the failed attempt released wherever it may have landed.
                Err(e @ Error::NoQuorum { .. }) => (e, None),
                // Any other failure of an attempt that was sent leaves its
                // outcome unsure: a lost reply, and just as much an error
                // reply (a transaction's or script's later command failed,
                // a reply of the wrong shape), since Redis rolls back
                // nothing and the `SET` may have run. The token stays armed
                // for release until the acquisition ends, so no lock is left
                // held for nobody until its TTL.
                Err(e) => {
                    pending.unsure = true;
                    pending.armed = true;
                    (e, None)
                }
            };
            let now = Instant::now();
            if now >= deadline || !(err.is_retryable() || matches!(err, Error::Busy { .. })) {
                tracing::debug!(attempts, error = %err, "not acquired");
                return Err(err);
            }
            splits = if split { splits.saturating_add(1) } else { 0 };
            if split {
                // A split vote: the contenders released their partial grants
                // and, woken all at once, would split again. A random pause
                // that grows with each split in a row lets one of them go
                // first and take every node; wake-ups are not waited for.
                let pause = split_backoff(splits, now - tried_at, opts.retry_interval);
                tracing::trace!(?pause, splits, "split vote: backing off");
                tokio::time::sleep_until((now + pause).min(deadline)).await;
                continue;
            }
            if waiter.is_none()
                && let Some(w) = &inner.wakeups
            {
                let w = w.register(&keys.channel);
                let left = deadline.saturating_duration_since(now);
                // Without a subscription the timed fallback still works.
                let _ = tokio::time::timeout(left, w.ensure_subscribed()).await;
                waiter = Some(w);
                baton = self.enlist(&keys, &token, opts.ttl, &mut pending);
                // A release may have happened before the subscription: look
                // again now (and wait with the baton from the next turn on).
                continue;
            }
            let mut pause = jittered(opts.retry_interval);
            if let Some(t) = holder_ttl {
                pause = pause.min(t + Duration::from_millis(1));
            }
            let until = (now + pause).min(deadline);
            tracing::trace!(?pause, "waiting");
            match notified.as_mut().as_pin_mut() {
                Some(n) => {
                    tokio::select! {
                        _ = n => {}
                        _ = &mut handed => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
                None => tokio::time::sleep_until(until).await,
            }
        }
    }

    /// With [`LockOptions::replicas`], count the grant only once that many
    /// replicas have it (`services::replication::confirm`: a token-checked
    /// extend and `WAIT` in one pipeline); if they do not in time, or the
    /// grant is gone, release it (token-checked) and say so.
    async fn replicated(&self, keys: &LockKeys, token: &Token, opts: &LockOptions) -> Result<()> {
        let (Some((wanted, timeout)), Some(backend)) = (opts.replicas, self.locks.nodes.single())
        else {
            return Ok(());
        };
        let (script, extend) =
            crate::services::held::extend_token_command(&keys.lock, token, opts.ttl);
        let replicas = match confirm(backend, script, extend, wanted, timeout).await? {
            Replication::Replicated => return Ok(()),
            Replication::Short(n) => n,
            Replication::Gone => 0,
        };
        let keys = Arc::new(keys.clone());
        let _ = self.locks.nodes.release(&self.name, &keys, token).await;
        Err(Error::NotReplicated {
            name: self.name.to_string(),
            replicas,
            wanted,
        })
    }

    /// Queue this acquisition for a direct hand-over by a releasing task of
    /// the same client (one Redis only). From then on the token may be set
    /// in Redis without a reply of ours, so it stays armed for release until
    /// the lock is ours.
    ///
    /// Under Redlock the baton carries a token of its own, which no acquire
    /// attempt of this acquisition ever sends: a failed attempt's releases,
    /// still on their way to slow nodes in the background, carry the
    /// attempt's token and so can never delete a hand-over's grant. That
    /// token is armed for release (on every node, token-checked) until the
    /// lock is ours by it.
    fn enlist(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        ttl: Duration,
        pending: &mut PendingToken,
    ) -> Option<Enlistment> {
        let inner = &self.locks;
        let wakeups = inner.wakeups.as_ref()?;
        let (token, own) = match inner.nodes.single() {
            Some(_) => {
                pending.unsure = true;
                pending.armed = true;
                (token.clone(), None)
            }
            None => {
                let token = Token::random().ok()?;
                let own = PendingToken {
                    locks: inner.clone(),
                    name: self.name.clone(),
                    keys: keys.clone(),
                    token: token.clone(),
                    armed: true,
                    unsure: true,
                };
                (token, Some(own))
            }
        };
        let baton = wait::Baton::new(token, ttl);
        let enlisted = wakeups.enlist(&keys.channel, &baton);
        Some(Enlistment {
            baton,
            _enlisted: enlisted,
            own,
        })
    }

    /// The guard of an acquisition that succeeded.
    fn guard(
        &self,
        keys: Arc<LockKeys>,
        token: Token,
        grant: nodes::Grant,
        opts: &LockOptions,
    ) -> LockGuard {
        let inner = &self.locks;
        let held = Arc::new(Held {
            locks: inner.clone(),
            id: inner.registry.next_id(),
            label: self.label.clone(),
            granted: Instant::now(),
            ended: AtomicBool::new(false),
            name: self.name.clone(),
            keys,
            token,
            fence: grant.fence,
            ttl: opts.ttl,
            node_timeout: opts.node_timeout,
            lease: LeaseState::new(grant.valid_until),
            stop: AtomicBool::new(false),
        });
        inner.registry.register(held.id, &held);
        LockGuard::new(held, opts.ttl, opts.watchdog)
    }

    /// Redlock: the per-node timeout an acquisition with `opts` uses (see
    /// [`LockOptions::node_timeout`]); `None` on a single Redis. Also the
    /// most a failed attempt's clean-up takes in the background, so it is
    /// what a short-lived process passes to [`crate::Client::settle`] after
    /// a failed acquire.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));
    /// let lock = client.lock("report");
    /// if lock.acquire(&opts).await.is_err() {
    ///     if let Some(t) = lock.node_timeout(&opts) {
    ///         client.settle(t).await;
    ///     }
    /// }
    /// # }
    /// ```
    pub fn node_timeout(&self, opts: &LockOptions) -> Option<Duration> {
        match &self.locks.nodes {
            Nodes::Single(_) => None,
            Nodes::Quorum(q) => Some(q.node_timeout(opts.ttl, opts.node_timeout)),
        }
    }

    /// Who holds the lock, for how long, and the last fencing token.
    pub async fn status(&self) -> Result<LockStatus> {
        let keys = self.prepared_keys().await?;
        self.locks.nodes.status(&self.name, &keys).await
    }

    /// Release by token (for a lock acquired elsewhere, e.g. by
    /// `dlm lock acquire`). `Ok(())` only if the key still held `token`.
    pub async fn release_token(&self, token: &Token) -> Result<()> {
        let keys = Arc::new(self.prepared_keys().await?);
        let released = self.locks.nodes.release(&self.name, &keys, token).await?;
        released.outcome.into_result(&self.name)
    }

    /// Extend by token to `ttl` from now. `Ok(())` only if the key still held `token`.
    pub async fn extend_token(&self, token: &Token, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        self.locks.nodes.check_ttl(ttl, None)?;
        let keys = self.prepared_keys().await?;
        let (outcome, _) = self
            .locks
            .nodes
            .extend(&self.name, &keys, token, ttl, None)
            .await?;
        outcome.into_result(&self.name)
    }

    /// Run `work` while holding the lock, renewed by a watchdog, then release.
    ///
    /// `work` gets a [`LockContext`] with the fencing token and a
    /// [`LostSignal`]. If the lock is lost while `work` runs, `work` is
    /// cancelled at its next `.await` (as with `tokio::time::timeout`) and
    /// the result is [`Error::Lost`]; so is it when the final release finds
    /// the lock was not ours any more.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// let opts = dlm::LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(30));
    /// let total = client.lock("nightly-report").with(&opts, |ctx| async move {
    ///     println!("running with fence {:?}", ctx.fence);
    ///     42
    /// }).await?;
    /// assert_eq!(total, 42);
    /// # Ok(()) }
    /// ```
    pub async fn with<F, Fut, T>(&self, opts: &LockOptions, work: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire(&opts.clone().watchdog(true)).await?;
        let lost = guard.lost_signal();
        let ctx = LockContext {
            fence: guard.fence(),
            lost: lost.clone(),
        };
        let out = tokio::select! {
            biased;
            _ = lost.lost() => None,
            out = work(ctx) => Some(out),
        };
        let Some(out) = out else {
            drop(guard);
            return Err(Error::Lost {
                name: self.name.to_string(),
            });
        };
        match guard.release().await {
            Ok(_) => Ok(out),
            Err(e) if e.is_lock_lost() => Err(Error::Lost {
                name: self.name.to_string(),
            }),
            Err(e) => {
                tracing::warn!(name = %self.name, error = %e, "release after work failed; the TTL will free the lock");
                Ok(out)
            }
        }
    }
}

/// How long to back off after the `splits`-th Redlock split vote in a row,
/// whose attempt took `took`: a random pause up to that long (at least 2 ms),
/// doubled with each split in a row, at most the retry interval (or `took`
/// when that is longer). Contenders that split pick different pauses; the
/// first to retry finds every node free and takes a majority at once. (An
/// attempt that waited for a silent node's timeout took that long: a
/// pause of the same order costs little and spreads the retries well.)
/// How much longer than the retry interval a waiters marker lives.
const MARKER_MARGIN: Duration = Duration::from_secs(5);

/// The lifetime of the waiters marker a busy attempt sets (see
/// `acquire_many.lua`): zero when the caller will not wait for a release
/// message. A waiter tries again at least every 1.5 retry intervals (the
/// jittered pause; sooner when the holder's TTL runs out), so three intervals
/// and a margin outlive any gap between its attempts: while it waits, a
/// release always finds the marker and publishes.
pub(crate) fn waiters_marker(opts: &LockOptions, subscribes: bool) -> Duration {
    if !subscribes || opts.wait.is_zero() {
        return Duration::ZERO;
    }
    opts.retry_interval
        .saturating_mul(3)
        .saturating_add(MARKER_MARGIN)
}

fn split_backoff(splits: u32, took: Duration, retry_interval: Duration) -> Duration {
    let base = took.max(Duration::from_millis(2));
    let cap = base
        .saturating_mul(1 << splits.clamp(1, 10).saturating_sub(1))
        .min(retry_interval.max(base));
    cap.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod split_backoff_tests {
    use super::*;

    #[test]
    fn split_backoff_doubles_from_the_attempts_length_up_to_the_retry_interval() {
        let interval = Duration::from_millis(50);
        let fast = Duration::from_micros(500);
        for (splits, cap) in [(1, 2), (2, 4), (3, 8), (5, 32), (6, 50), (40, 50)] {
            for _ in 0..200 {
                let p = split_backoff(splits, fast, interval);
                assert!(p <= Duration::from_millis(cap), "{splits}: {p:?}");
            }
        }
        // An attempt that waited 60 ms for a silent node: pauses of that order.
        let slow = Duration::from_millis(60);
        for _ in 0..200 {
            assert!(split_backoff(1, slow, interval) <= slow);
            assert!(split_backoff(3, slow, interval) <= slow);
        }
        assert!(split_backoff(1, fast, Duration::ZERO) <= Duration::from_millis(2));
    }
}
