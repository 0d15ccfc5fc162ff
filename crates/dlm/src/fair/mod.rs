//! The fair lock: a mutex whose waiters get it in the order they arrived,
//! across processes.
//!
//! Waiters queue in Redis: a list of waiter tokens in arrival order and a
//! sorted set of each waiter's *queue lease* (its own deadline, refreshed
//! while it waits). The acquire script drops waiters whose queue lease ran
//! out from the head of the line, then grants the lock only to the first
//! waiter (or to anybody while nobody waits). A release wakes exactly the
//! next waiter, on a channel of its own: no thundering herd. A waiter that
//! dies while queued therefore holds the line up for at most its queue
//! lease ([`DEFAULT_QUEUE_LEASE`], 3 s, unless [`FairLock::queue_lease`]
//! says otherwise), once, however many died with it: leases are not
//! cumulative (unlike Redisson's `RedissonFairLock`, where dead waiters'
//! wait times add up and alive waiters could be dropped, issues
//! redisson#1104, #2883, #3004).
//!
//! See [`FairLock`] for the entry point and its *Safety* section.

mod batch;
mod held;
mod ops;

use crate::error::secs;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::keys::{FairKeys, fair_keys};
use crate::services::held::{Guard, Pending, Shared, Turns, guard_api};
use crate::services::options::LockOptions;
use crate::services::replication::replicated;
use crate::token::Token;

pub(crate) use batch::Node as FairNode;
pub(crate) use held::FairHeld;

/// What an observer can see of a fair lock ([`FairLock::status`]).
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let s = client.fair_lock("printer").status().await?;
/// println!("held: {} ({:?} left), {} in line", s.held, s.ttl, s.waiting);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairStatus {
    /// Somebody holds it.
    pub held: bool,
    /// The holder's remaining TTL (`None`: free, or no expiry).
    pub ttl: Option<Duration>,
    /// The last fencing token the lock's slot counter handed out (`None`: none yet).
    pub fence: Option<crate::token::Fence>,
    /// Waiters in line (with a live queue lease).
    pub waiting: u64,
}
use ops::Attempt;

/// How long a queued waiter keeps its place without refreshing it, unless
/// [`FairLock::queue_lease`] sets another: the most a waiter that died while
/// queued delays the line. Waiters refresh it every third of it.
pub const DEFAULT_QUEUE_LEASE: Duration = Duration::from_secs(3);
/// The shortest and longest queue lease accepted.
pub const QUEUE_LEASE_RANGE: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(600));
/// The most waiters one fair lock queues ([`Error::QueueFull`] beyond).
pub const MAX_WAITERS: usize = 100_000;

/// The fair lock's scripts, loaded when a connection is made.
pub(crate) fn preloaded_scripts() -> Vec<&'static redis::Script> {
    let mut scripts = ops::scripts();
    scripts.extend(batch::scripts());
    scripts
}

/// The client's fair-lock state.
pub(crate) type FairShared = Shared<FairHeld>;

/// A fair (FIFO) lock on one Redis; cheap to clone. Get one from
/// [`crate::Client::fair_lock`].
///
/// It takes the same [`LockOptions`] as [`crate::Lock`] (TTL, wait,
/// watchdog, `replicas`; `node_timeout` does not apply) and its
/// [`FairGuard`] has the same methods as [`crate::LockGuard`]. Acquirers
/// that wait get the lock in the order they first asked for it, whichever
/// process they are in; an acquire that does not wait (`wait` zero) gets it
/// only when nobody is queued.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use std::time::Duration;
/// let opts = dlm::LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(30));
/// let guard = client.fair_lock("printer").acquire(&opts).await?;   // first come, first served
/// println!("fence {}", guard.fence());
/// guard.release().await?;                                            // wakes the next in line only
/// # Ok(()) }
/// ```
///
/// # Safety
///
/// Mutual exclusion holds as for [`crate::Lock`] on one Redis: while Redis
/// keeps its data and no holder pauses beyond its lease; pass
/// [`FairGuard::fence`] to storage to be safe beyond that. FIFO order holds
/// among waiters that keep their queue lease: a waiter paused (GC, SIGSTOP)
/// longer than its queue lease loses its place and queues again at the end.
/// A waiter that died delays the next one by at most its queue lease. Redis
/// Cluster works (every key carries the `{name}` hash tag); Redlock is
/// refused ([`Error::InvalidArgument`]): the queue must live in one place.
#[derive(Debug, Clone)]
pub struct FairLock {
    shared: Arc<FairShared>,
    /// The batcher of this client's fair acquires and releases (`None` under Redlock).
    node: Option<FairNode>,
    name: Arc<str>,
    queue_lease: Duration,
}

/// Proof of holding a [`FairLock`]: the same methods as
/// [`crate::LockGuard`] (fencing token, `lost()`, watchdog, extend,
/// release; released in the background when dropped).
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10)).watchdog(true);
/// let guard = client.fair_lock("printer").acquire(&opts).await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lost the fair lock"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases the lock in the background at once"]
pub struct FairGuard(Guard<FairHeld>);

guard_api!(FairGuard, "fair_lock(\"printer\").acquire(&opts)");

impl FairLock {
    pub(crate) fn new(shared: Arc<FairShared>, node: Option<FairNode>, name: String) -> Self {
        FairLock {
            shared,
            node,
            name: name.into(),
            queue_lease: DEFAULT_QUEUE_LEASE,
        }
    }

    /// How long a queued waiter keeps its place without refreshing it
    /// (default [`DEFAULT_QUEUE_LEASE`]; 100 ms ..= 10 min). Shorter: a dead
    /// waiter stalls the line for less; longer: a paused waiter keeps its place.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) {
    /// let lock = client.fair_lock("printer").queue_lease(std::time::Duration::from_secs(1));
    /// # }
    /// ```
    pub fn queue_lease(mut self, lease: Duration) -> Self {
        self.queue_lease = lease;
        self
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) {
    /// assert_eq!(client.fair_lock("printer").name(), "printer");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the holder (an error for an invalid name).
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// assert_eq!(client.fair_lock("printer").key()?, "dlm:fair:{printer}");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> Result<String> {
        Ok(fair_keys(&self.shared.root, &self.name)?.lock)
    }

    /// Release by token (for a fair lock acquired elsewhere, e.g. by
    /// `dlm lock acquire --fair`), waking the next in line. `Ok(())` only if
    /// the lock still held `token`.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client, token: dlm::Token) -> dlm::Result<()> {
    /// client.fair_lock("printer").release_token(&token).await?;
    /// # Ok(()) }
    /// ```
    pub async fn release_token(&self, token: &Token) -> Result<()> {
        let node = self.node()?;
        let keys = Arc::new(fair_keys(&self.shared.root, &self.name)?);
        let (outcome, next) = node.release(&keys, token).await?;
        if let (Some(next), Some(w)) = (next, &self.shared.wakeups) {
            w.wake_local(&keys.wake(&next));
        }
        outcome.into_result(&self.name)
    }

    /// What an observer can see, in one read-only script: whether somebody
    /// holds the lock (its TTL), the slot's last fencing token, and how many
    /// waiters are queued (with a live queue lease).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let s = client.fair_lock("printer").status().await?;
    /// println!("held: {}, {} waiting", s.held, s.waiting);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<FairStatus> {
        let backend = self.shared.backend("fair lock")?;
        let keys = fair_keys(&self.shared.root, &self.name)?;
        let (holder, fence, waiting) = ops::status(backend, &keys).await?;
        Ok(FairStatus {
            held: holder.is_some(),
            ttl: holder.flatten(),
            fence: (fence > 0).then_some(crate::token::Fence::new(fence)),
            waiting,
        })
    }

    /// The client's fair-lock batcher, or why there is none (Redlock).
    fn node(&self) -> Result<&FairNode> {
        self.shared.backend("fair lock")?;
        self.node
            .as_ref()
            .ok_or_else(|| Error::protocol("a fair lock without its connection"))
    }

    fn validate(&self, opts: &LockOptions) -> Result<()> {
        opts.validate()?;
        let (min, max) = QUEUE_LEASE_RANGE;
        if !(min..=max).contains(&self.queue_lease) {
            return Err(Error::invalid(
                "queue lease",
                format!(
                    "{} is outside {} ..= {}",
                    secs(self.queue_lease),
                    secs(min),
                    secs(max)
                ),
            ));
        }
        Ok(())
    }

    /// Acquire the lock in arrival order, waiting up to `opts.wait`.
    ///
    /// Errors: [`Error::Busy`] when not acquired in time (with the holder's
    /// remaining TTL), [`Error::QueueFull`] when [`MAX_WAITERS`] already
    /// wait, [`Error::InvalidArgument`] for bad input or under Redlock,
    /// [`Error::Unavailable`] / [`Error::Timeout`] when Redis stayed
    /// unreachable until the deadline. A waiter that gives up leaves the
    /// queue (in the background when its future is dropped).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::LockOptions::new(std::time::Duration::from_secs(10))
    ///     .wait(std::time::Duration::from_secs(5));
    /// match client.fair_lock("printer").acquire(&opts).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(dlm::Error::Busy { .. }) => eprintln!("still queued after 5 s; gave up my place"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, opts: &LockOptions) -> Result<FairGuard> {
        self.validate(opts)?;
        let node = self.node()?;
        let keys = Arc::new(fair_keys(&self.shared.root, &self.name)?);
        let span = tracing::debug_span!("dlm.fair.acquire", name = %self.name, key = %keys.lock);
        replicated("fair lock", opts, |o| {
            let keys = keys.clone();
            async move { self.acquire_on(node, keys, &o).await.map(|g| g.0) }
        })
        .instrument(span)
        .await
        .map(FairGuard)
    }

    async fn acquire_on(
        &self,
        node: &FairNode,
        keys: Arc<FairKeys>,
        opts: &LockOptions,
    ) -> Result<FairGuard> {
        let token = Token::random()?;
        let deadline = Instant::now() + opts.wait;
        let queue = !opts.wait.is_zero();
        let lease = if queue {
            self.queue_lease
        } else {
            Duration::ZERO
        };
        // Leaves the queue (and releases a grant whose reply was lost) unless
        // disarmed: behind every attempt of this token that may still reach
        // Redis (see `batch::Node`).
        let mut entry = Pending::new(
            self.shared.clone(),
            Arc::new((node.clone(), keys.clone())),
            token.clone(),
            |_, k, t| Box::pin(async move { drop(k.0.cancel(&k.1, &t).await) }),
        );
        let channel = keys.wake(token.as_str());
        let wakeups = self.shared.wakeups.as_ref();
        // Woken on our own channel (a release wakes only the next in line);
        // else look again in time to refresh our queue lease, or when the
        // first waiter's lease or the holder's TTL ends.
        let mut turns = Turns::new(wakeups, &channel, deadline, self.queue_lease / 3);
        loop {
            let started = Instant::now();
            entry.armed = true;
            let (err, hint) = match node.acquire(&keys, &token, opts.ttl, lease).await {
                Ok(Attempt::Acquired(fence)) => {
                    entry.armed = false;
                    let core = self
                        .shared
                        .core(self.name.clone(), token, fence, opts.ttl, started);
                    let held = FairHeld::new(core, keys, self.shared.clone(), node.clone());
                    tracing::debug!(fence = fence.get(), "acquired");
                    return Ok(FairGuard(Guard::new(Arc::new(held), opts.watchdog)));
                }
                Ok(Attempt::Queued { wait, position }) => {
                    entry.armed = queue;
                    tracing::trace!(position, ?wait, "queued");
                    let busy = Error::Busy {
                        name: self.name.to_string(),
                        ttl: wait,
                    };
                    (busy, wait)
                }
                Ok(Attempt::Full(max)) => {
                    entry.armed = false;
                    return Err(Error::QueueFull {
                        name: self.name.to_string(),
                        max,
                    });
                }
                // The attempt may have queued us, or granted us the lock, although
                // its reply was lost: look again within the retry interval, not at
                // the fallback, before such a grant runs out unused.
                Err(e) if e.is_retryable() => (e, Some(opts.retry_interval)),
                Err(e) => return Err(e),
            };
            turns.wait(err, hint).await?;
        }
    }
}
