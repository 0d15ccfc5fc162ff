//! A counting semaphore with leased permits: at most N permits held at once
//! across every process, each holder's permits under one lease that a
//! watchdog renews, given back on release or drop, and coming back by
//! themselves at the TTL when the holder dies.
//!
//! ```no_run
//! # async fn demo(client: dlm::Client) -> dlm::Result<()> {
//! use std::time::Duration;
//! let pool = client.semaphore("gpu", 4);              // at most 4 permits held at once
//! let opts = dlm::SemaphoreOptions::new(Duration::from_secs(10))
//!     .wait(Duration::from_secs(30))                   // woken when permits come back
//!     .watchdog(true);                                 // renewed every ttl/3
//! let guard = pool.acquire(2, &opts).await?;          // Err(NoPermits) if not in time
//! println!("holding {} permits, fence {}", guard.permits(), guard.fence());
//! tokio::select! {
//!     _ = guard.lost() => eprintln!("permits lost: stop"),
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => {}
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! ## Keys
//! For a semaphore named `NAME`, all under the hash tag `{NAME}` (one Redis
//! Cluster slot): `dlm:sem:{NAME}`, a hash with the capacity (`permits`) and
//! the fencing counter (`fence`), kept for good; `dlm:sem:{NAME}:holders`, a
//! sorted set with one member `TOKEN:i` per permit held, scored by its lease
//! deadline in the Redis server's clock (`TIME` inside the scripts, so
//! clients' clocks do not matter), which expires with its last lease; and the
//! wake-up channel `dlm:sem:{NAME}:released`.
//!
//! ## Capacity
//! The capacity is stored in Redis and the stored one counts. The capacity
//! a handle was made with is stored by its first acquire when none is
//! stored yet (the first user sets it), and [`Semaphore::set_permits`]
//! changes it at run time (so that acquirers that disagree cannot flip it
//! back and forth). Changing it is safe for current holders: they keep
//! their permits and renew them as before; after a decrease, new
//! acquisitions wait until the permits in use plus theirs fit under the new
//! capacity; after an increase, waiters are woken at once.
//!
//! ## Safety
//! At most `capacity` permits are held at once while Redis keeps its data
//! (no failover to a replica that missed a grant, no restart without
//! persistence within a TTL) and while no holder is paused longer than its
//! lease: a holder paused past it may still believe it holds permits that
//! were handed to another. A guard's [`SemaphoreGuard::remaining`] is
//! measured on the local monotonic clock from before the request was sent,
//! minus a drift allowance, so it never overestimates, and
//! [`SemaphoreGuard::lost`] fires when a renewal finds the lease gone or it
//! runs out. Every grant carries a fencing token from one counter per
//! semaphore, strictly increasing across grants: pass it to storage that can
//! refuse stale writers. Semaphores need one Redis deployment (standalone,
//! Sentinel or Cluster), not Redlock.

mod held;
mod ops;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::keys::{SemaphoreKeys, semaphore_keys};
use crate::services::held::{Guard, Pending, Shared, guard_api};
use crate::services::jittered;
use crate::services::options::LockOptions;
use crate::services::replication::replicated;
use crate::services::wakeups::{self as wait};
use crate::token::{Fence, Token};

pub(crate) use held::SemaphoreHeld;
use ops::Attempt;

/// The most permits a semaphore may have (and a holder may take).
pub const MAX_PERMITS: u32 = 10_000;

/// The scripts of the semaphore, loaded whenever a connection is made.
pub(crate) fn preloaded_scripts() -> Vec<&'static redis::Script> {
    let mut scripts = ops::scripts();
    scripts.extend(held::scripts());
    scripts
}

/// The semaphore state of one client: its Redis, wake-ups, watchdog and the
/// permits it holds (the lock family's shared state).
pub(crate) type Semaphores = Shared<SemaphoreHeld>;

fn validate_permits(what: &'static str, n: u32) -> Result<()> {
    if n == 0 || n > MAX_PERMITS {
        return Err(Error::invalid(
            what,
            format!("{n} is outside 1 ..= {MAX_PERMITS}"),
        ));
    }
    Ok(())
}

/// How to acquire permits: the lease length (required), how long to wait,
/// how often to retry without a wake-up, and whether a watchdog renews the
/// lease. The lock family's options: the same type as [`LockOptions`]
/// (`replicas` applies; `node_timeout` does not apply to a semaphore).
///
/// ```
/// use std::time::Duration;
/// let opts = dlm::SemaphoreOptions::new(Duration::from_secs(30))
///     .wait(Duration::from_secs(5))
///     .watchdog(true);
/// assert_eq!(opts.ttl(), Duration::from_secs(30));
/// ```
pub type SemaphoreOptions = LockOptions;

/// Proof of holding permits of a semaphore, returned by
/// [`crate::Semaphore::acquire`]: the lock family's guard (fencing token,
/// `lost()`, the watchdog, extend, release; released in the background
/// when dropped), plus [`SemaphoreGuard::permits`].
///
/// Release it with [`SemaphoreGuard::release`] to learn whether the permits
/// were still ours ([`Error::Expired`] if not); the release hands them
/// straight to a waiting task of this client when they fit.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use std::time::Duration;
/// let opts = dlm::SemaphoreOptions::new(Duration::from_secs(10)).watchdog(true);
/// let guard = client.semaphore("pool", 3).acquire(1, &opts).await?;
/// println!("{} permit(s), fence {}, valid for {:?}", guard.permits(), guard.fence(), guard.remaining());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases the permits in the background at once"]
pub struct SemaphoreGuard(Guard<SemaphoreHeld>);

guard_api!(SemaphoreGuard, "semaphore(\"pool\", 3).acquire(1, &opts)");

impl SemaphoreGuard {
    /// How many permits this guard holds.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::SemaphoreOptions::new(std::time::Duration::from_secs(10));
    /// let guard = client.semaphore("pool", 3).acquire(2, &opts).await?;
    /// assert_eq!(guard.permits(), 2);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.0.held().permits
    }
}

/// What an observer can see of a semaphore (see [`Semaphore::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreStatus {
    /// The stored capacity (`None`: never acquired nor set).
    pub permits: Option<u32>,
    /// Permits held now (leases not run out); may exceed a lowered capacity.
    pub in_use: u32,
    /// Permits free now: the capacity minus those in use, at least zero.
    pub available: u32,
    /// Distinct holders now.
    pub holders: u32,
    /// The last fencing token handed out (`None`: none yet).
    pub fence: Option<Fence>,
}

/// A named counting semaphore with leased permits; cheap to clone. Get one
/// from [`crate::Client::semaphore`]; see the [module docs](crate::semaphore)
/// for the keys, the capacity rules and the *Safety* note.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let pool = client.semaphore("db-connections", 8);
/// let opts = dlm::SemaphoreOptions::new(std::time::Duration::from_secs(5));
/// let guard = pool.acquire(1, &opts).await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    state: Arc<Semaphores>,
    name: Arc<str>,
    permits: u32,
}

/// What an acquisition asks for, for the clean-up of one that gave up
/// ([`Pending`]: its token may be stored in Redis without our knowing).
struct Wanted {
    keys: Arc<SemaphoreKeys>,
    permits: u32,
}

/// Completes when permits were handed to `baton` (never without one).
async fn handed(baton: Option<Arc<wait::Baton>>) {
    match baton {
        Some(b) => b.granted().await,
        None => std::future::pending().await,
    }
}

impl Semaphore {
    pub(crate) fn new(state: Arc<Semaphores>, name: String, permits: u32) -> Self {
        Semaphore {
            state,
            name: name.into(),
            permits,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The capacity this handle stores when none is stored yet.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The Redis key of the semaphore's hash (an error for an invalid name).
    pub fn key(&self) -> Result<String> {
        Ok(semaphore_keys(&self.state.root, &self.name)?.meta)
    }

    /// Take `n` permits, all or none, waiting up to `opts.wait` for them
    /// (woken when permits come back, with a timed retry as a fallback).
    ///
    /// Fails with [`Error::NoPermits`] when they could not be had in time,
    /// [`Error::InvalidArgument`] for a capacity or `n` of 0, over
    /// [`MAX_PERMITS`], or `n` over the capacity, and
    /// [`Error::Unavailable`] / [`Error::Timeout`] when Redis stayed
    /// unreachable until the deadline.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let opts = dlm::SemaphoreOptions::new(std::time::Duration::from_secs(5))
    ///     .wait(std::time::Duration::from_secs(1));
    /// match client.semaphore("pool", 3).acquire(2, &opts).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(dlm::Error::NoPermits { free, .. }) => println!("only {free} free"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, n: u32, opts: &SemaphoreOptions) -> Result<SemaphoreGuard> {
        opts.validate()?;
        validate_permits("permits", self.permits)?;
        validate_permits("permits to take", n)?;
        if n > self.permits {
            return Err(Error::invalid(
                "permits to take",
                format!("{n} is more than the semaphore's {} permits", self.permits),
            ));
        }
        replicated("semaphore", opts, |o| async move {
            self.acquire_once(n, &o).await.map(|g| g.0)
        })
        .await
        .map(SemaphoreGuard)
    }

    async fn acquire_once(&self, n: u32, opts: &SemaphoreOptions) -> Result<SemaphoreGuard> {
        let keys = Arc::new(semaphore_keys(&self.state.root, &self.name)?);
        let backend = self.state.backend("semaphore")?.clone();
        let token = Token::random()?;
        let deadline = Instant::now() + opts.wait;
        let wanted = Arc::new(Wanted {
            keys: keys.clone(),
            permits: n,
        });
        let mut pending = Pending::new(self.state.clone(), wanted, token.clone(), |b, w, t| {
            Box::pin(async move { drop(ops::release(&b, &w.keys, &t, w.permits).await) })
        });
        let mut waiter: Option<wait::Waiter> = None;
        let mut baton: Option<(Arc<wait::Baton>, wait::Enlisted)> = None;
        loop {
            if let Some((b, _)) = &baton
                && let Some((fence, started)) = b.take_grant()
            {
                pending.armed = false;
                return Ok(self.guard(keys, token, n, fence, started, opts));
            }
            let started = Instant::now();
            pending.armed = true;
            let attempt = ops::acquire(&backend, &keys, &token, n, opts.ttl, self.permits).await;
            let (err, hint) = match attempt {
                Ok(Attempt::Acquired(fence)) => {
                    pending.armed = false;
                    return Ok(self.guard(keys, token, n, fence, started, opts));
                }
                Ok(Attempt::Short {
                    free,
                    capacity,
                    next_expiry,
                }) => {
                    // Nothing stored; unless a hand-over may still land.
                    pending.armed = baton.is_some();
                    let e = Error::NoPermits {
                        name: self.name.to_string(),
                        wanted: n,
                        free,
                        capacity,
                    };
                    (e, next_expiry)
                }
                // The reply may be lost after the script ran: stay armed.
                Err(e) if e.is_retryable() => (e, None),
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            if now >= deadline {
                if let Some((b, _)) = &baton
                    && let Some((fence, started)) = b.take_grant()
                {
                    pending.armed = false;
                    return Ok(self.guard(keys, token, n, fence, started, opts));
                }
                return Err(err);
            }
            if waiter.is_none()
                && let Some(wakeups) = &self.state.wakeups
            {
                let w = wakeups.register(&keys.channel);
                let left = deadline.saturating_duration_since(now);
                let _ = tokio::time::timeout(left, w.ensure_subscribed()).await;
                let b = wait::Baton::for_units(token.clone(), opts.ttl, n);
                let enlisted = wakeups.enlist(&keys.channel, &b);
                baton = Some((b, enlisted));
                waiter = Some(w);
                // Permits may have come back before the subscription: look again.
                continue;
            }
            let mut pause = jittered(opts.retry_interval);
            if let Some(t) = hint {
                pause = pause.min(t + Duration::from_millis(1));
            }
            let until = (now + pause).min(deadline);
            let notify = waiter.as_ref().map(wait::Waiter::notify);
            let handed = handed(baton.as_ref().map(|b| b.0.clone()));
            tokio::select! {
                _ = async { if let Some(n) = &notify { n.notified().await } else { std::future::pending().await } } => {}
                _ = handed => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    fn guard(
        &self,
        keys: Arc<SemaphoreKeys>,
        token: Token,
        n: u32,
        fence: Fence,
        started: Instant,
        opts: &SemaphoreOptions,
    ) -> SemaphoreGuard {
        let core = self
            .state
            .core(self.name.clone(), token, fence, opts.ttl, started);
        let held = SemaphoreHeld::new(core, keys, self.state.clone(), n);
        SemaphoreGuard(Guard::new(Arc::new(held), opts.watchdog))
    }

    /// The capacity, permits in use and free, holders and last fence, in
    /// one round trip.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let st = client.semaphore("pool", 3).status().await?;
    /// println!("{} of {:?} free, {} holders", st.available, st.permits, st.holders);
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<SemaphoreStatus> {
        let keys = semaphore_keys(&self.state.root, &self.name)?;
        let (permits, in_use, holders, fence) =
            ops::status(self.state.backend("semaphore")?, &keys).await?;
        Ok(SemaphoreStatus {
            permits,
            in_use,
            available: permits.unwrap_or(0).saturating_sub(in_use),
            holders,
            fence: (fence > 0).then(|| Fence::new(fence)),
        })
    }

    /// Change the stored capacity to `permits` now (current holders keep
    /// theirs; see the module docs) and wake waiters; returns the previous
    /// capacity, if one was set.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let previous = client.semaphore("pool", 3).set_permits(5).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_permits(&self, permits: u32) -> Result<Option<u32>> {
        validate_permits("permits", permits)?;
        let keys = semaphore_keys(&self.state.root, &self.name)?;
        ops::set_permits(self.state.backend("semaphore")?, &keys, permits).await
    }
}
