//! What an acquisition is asked for and what an observer sees: TTL and wait
//! limits, [`LockOptions`], [`LockStatus`], and the outcome of a
//! token-checked release or extend. Shared by every primitive with a lease
//! (the mutex, the fair lock, the read-write lock), so they take the same
//! options and report the same outcomes.

use crate::error::secs;
use std::time::Duration;

use crate::error::{Error, Result};
pub(crate) use crate::services::lease::validate_ttl;
use crate::services::lease::validate_wait;
pub use crate::services::lease::{MAX_TTL, MAX_WAIT, MIN_TTL};
use crate::token::Fence;

/// The result of a token-checked release or extend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Done,
    Expired,
    NotHeld,
}

impl Outcome {
    pub(crate) fn into_result(self, name: &str) -> Result<()> {
        match self {
            Outcome::Done => Ok(()),
            Outcome::Expired => Err(Error::Expired { name: name.into() }),
            Outcome::NotHeld => Err(Error::NotHeld { name: name.into() }),
        }
    }
}

/// How to acquire: the lease length (required), how long to wait, how often
/// to retry without a wake-up, and whether a watchdog renews the lease.
///
/// ```
/// use std::time::Duration;
/// let opts = dlm::LockOptions::new(Duration::from_secs(30))
///     .wait(Duration::from_secs(5))
///     .retry_interval(Duration::from_millis(100))
///     .watchdog(true);
/// assert_eq!(opts.ttl(), Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) retry_interval: Duration,
    pub(crate) watchdog: bool,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) replicas: Option<(u64, Duration)>,
}

impl LockOptions {
    /// Options with this TTL (the longest the lock outlives a crashed holder;
    /// 10 ms ..= 7 days), trying once, no watchdog.
    pub fn new(ttl: Duration) -> Self {
        LockOptions {
            ttl,
            wait: Duration::ZERO,
            retry_interval: Duration::from_millis(50),
            watchdog: false,
            node_timeout: None,
            replicas: None,
        }
    }

    /// Keep trying for up to `wait` (zero, the default: try once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The pause between tries when no release wake-up arrives (default
    /// 50 ms, jittered by ±50%; 1 ms ..= 60 s). Also the most a lost wake-up
    /// message can cost.
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = interval;
        self
    }

    /// Renew the lease every TTL/3 in the background while the guard lives,
    /// and mark the guard lost as soon as a renewal finds the lock gone.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// Redlock: the deadline of one node's answer to this acquisition and its
    /// extensions (default: the client's [`crate::ClientBuilder::node_timeout`],
    /// else 1% of the TTL, at least 50 ms; never more than the call timeout).
    /// An attempt is decided as soon as a majority answered alike, so a slow
    /// or frozen node costs at most this much, and only when its answer is
    /// needed for a majority. Ignored on a single Redis.
    ///
    /// ```
    /// use std::time::Duration;
    /// let opts = dlm::LockOptions::new(Duration::from_secs(10))
    ///     .node_timeout(Duration::from_millis(50));
    /// assert_eq!(opts.node_timeout_for(), Some(Duration::from_millis(50)));
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Wait after the grant until `n` replicas have it (`WAIT n timeout`),
    /// and count the acquisition only then: a grant that reached fewer
    /// replicas in time is released and reported as
    /// [`Error::NotReplicated`] (retryable; acquire keeps trying until its
    /// wait runs out). This narrows the failover window in which a master
    /// that dies before replicating hands the same lock to two clients (see
    /// the crate docs' Safety section); it costs one more round trip, to the
    /// slowest of the `n` replicas. Every lock kind honours it (the mutex,
    /// the fair lock, both modes of the read-write lock, the semaphore and
    /// the election). Ignored under Redlock (independent masters have no
    /// replicas).
    ///
    /// ```
    /// use std::time::Duration;
    /// let opts = dlm::LockOptions::new(Duration::from_secs(10))
    ///     .replicas(1, Duration::from_millis(100));
    /// # let _ = opts;
    /// ```
    pub fn replicas(mut self, n: u64, timeout: Duration) -> Self {
        self.replicas = Some((n, timeout));
        self
    }

    /// The per-node timeout set with [`LockOptions::node_timeout`], if any.
    pub fn node_timeout_for(&self) -> Option<Duration> {
        self.node_timeout
    }

    /// The TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long acquire keeps trying.
    pub fn wait_for(&self) -> Duration {
        self.wait
    }

    pub(crate) fn validate(&self) -> Result<()> {
        validate_ttl(self.ttl)?;
        validate_wait(self.wait, self.retry_interval)?;
        if let Some((n, t)) = self.replicas
            && (n == 0 || n > 100 || t.is_zero() || t > Duration::from_secs(60))
        {
            return Err(Error::invalid(
                "replicas",
                format!(
                    "{n} replicas within {}: needs 1 ..= 100 replicas within (0, 60] seconds",
                    secs(t)
                ),
            ));
        }
        if let Some(t) = self.node_timeout
            && (t < Duration::from_millis(1) || t > Duration::from_secs(3600))
        {
            return Err(Error::invalid(
                "node timeout",
                format!("{} is outside 0.001 ..= 3600 seconds", secs(t)),
            ));
        }
        Ok(())
    }
}

/// What an observer can see of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Somebody holds it.
    pub held: bool,
    /// Its remaining TTL, when held with an expiry.
    pub ttl: Option<Duration>,
    /// The last fencing token the lock's counter handed out (on one Redis
    /// the counter every lock under the prefix shares, on a Cluster its hash
    /// slot's): at least this lock's last one (`None`: none yet, or a
    /// Redlock client, which hands out none). See [`crate::keys`].
    pub fence: Option<Fence>,
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_duration() -> impl Strategy<Value = Duration> {
        crate::services::props::arb_duration(8 * 24 * 3600 * 1000)
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// Any options, extreme ones included, validate to `Ok` or to a typed
        /// error, exactly as documented; none panics.
        #[test]
        fn lock_options_validate_to_ok_or_a_typed_error(
            ttl in arb_duration(),
            wait in arb_duration(),
            retry in arb_duration(),
            node in proptest::option::of(arb_duration()),
            replicas in proptest::option::of((any::<u64>(), arb_duration())),
        ) {
            let mut opts = LockOptions::new(ttl).wait(wait).retry_interval(retry);
            if let Some(t) = node {
                opts = opts.node_timeout(t);
            }
            if let Some((n, t)) = replicas {
                opts = opts.replicas(n, t);
            }
            let ms = Duration::from_millis;
            let ok = (MIN_TTL..=MAX_TTL).contains(&ttl)
                && wait <= MAX_WAIT
                && (ms(1)..=Duration::from_secs(60)).contains(&retry)
                && node.is_none_or(|t| (ms(1)..=Duration::from_secs(3600)).contains(&t))
                && replicas.is_none_or(|(n, t)| (1..=100).contains(&n) && !t.is_zero() && t <= Duration::from_secs(60));
            match opts.validate() {
                Ok(()) => prop_assert!(ok),
                Err(e) => prop_assert!(!ok && matches!(e, Error::InvalidArgument { .. }), "{e}"),
            }
        }

        /// The retry pause stays within half to one and a half of any interval.
        #[test]
        fn jitter_never_overflows(d in arb_duration()) {
            let j = crate::services::jittered(d);
            prop_assert!(j >= d / 2);
            prop_assert!(j <= d.saturating_add(d / 2));
        }
    }
}
