//! A lease's validity on this process's monotonic clock, and whether it has
//! been lost: shared by a guard, its watchdog and the signals handed out.

use crate::error::secs;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};

/// The shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest TTL accepted (7 days); use the watchdog for longer work.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest wait accepted (7 days).
pub const MAX_WAIT: Duration = MAX_TTL;

/// A lease length within [`MIN_TTL`] ..= [`MAX_TTL`], or why not.
pub(crate) fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::invalid(
            "ttl",
            format!(
                "{} is outside {} ..= {}",
                secs(ttl),
                secs(MIN_TTL),
                secs(MAX_TTL)
            ),
        ));
    }
    Ok(())
}

/// The waiting limits every primitive shares: a wait of at most
/// [`MAX_WAIT`] and a retry interval within 1 ms ..= 60 s.
pub(crate) fn validate_wait(wait: Duration, retry_interval: Duration) -> Result<()> {
    if wait > MAX_WAIT {
        return Err(Error::invalid(
            "wait",
            format!("{} is longer than {}", secs(wait), secs(MAX_WAIT)),
        ));
    }
    if retry_interval < Duration::from_millis(1) || retry_interval > Duration::from_secs(60) {
        return Err(Error::invalid(
            "retry interval",
            format!("{} is outside 0.001 ..= 60 seconds", secs(retry_interval)),
        ));
    }
    Ok(())
}

/// Tells whether a lease is still ours: a cheap, cloneable view of a
/// guard's lease (a lock's, a semaphore's permits) that can be moved into
/// the guarded work.
///
/// The lease counts as lost when a renewal or extend found it gone or
/// taken, when the guard was released or dropped, or when the lease's
/// validity ran out on the local monotonic clock without a renewal.
///
/// ```no_run
/// # async fn demo(guard: dlm::LockGuard) {
/// let lost = guard.lost_signal();
/// tokio::select! {
///     _ = lost.lost() => eprintln!("lock lost: stop writing"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LostSignal(Arc<LeaseState>);

impl LostSignal {
    pub(crate) fn new(lease: Arc<LeaseState>) -> Self {
        LostSignal(lease)
    }

    /// True once the lease is over (then it stays true).
    pub fn is_lost(&self) -> bool {
        self.0.is_lost()
    }

    /// Completes as soon as the lease is lost.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.0.lost()
    }

    /// Time left on the lease by the local monotonic clock (zero once lost).
    pub fn remaining(&self) -> Duration {
        self.0.remaining()
    }
}

/// The clock-drift allowance subtracted from a lease: 1% of the TTL plus 2 ms
/// (the figure of the Redlock algorithm).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// How long a lease is good for, on this process's monotonic clock, and
/// whether it has been lost.
#[derive(Debug)]
pub(crate) struct LeaseState {
    valid_until: Mutex<Instant>,
    lost: CancellationToken,
}

impl LeaseState {
    pub(crate) fn new(valid_until: Instant) -> Arc<Self> {
        Arc::new(LeaseState {
            valid_until: Mutex::new(valid_until),
            lost: CancellationToken::new(),
        })
    }

    fn valid_until(&self) -> Instant {
        match self.valid_until.lock() {
            Ok(v) => *v,
            Err(p) => *p.into_inner(),
        }
    }

    /// Move the end of the lease after a successful extend or renewal, if
    /// the lease is still good: `false` (and the lease is marked lost) when
    /// it was lost or ran out on the local clock before the extension's
    /// replies came back. The clock is read here, after the replies, because
    /// a request can travel or wait long enough for the old lease to end on
    /// the way: another client may have held the lock in that gap, and a
    /// late "extended" must never bring the lease back to life.
    #[must_use = "a `false` means the lease is lost: report it"]
    pub(crate) fn renewed(&self, valid_until: Instant) -> bool {
        if self.is_lost() {
            return false;
        }
        match self.valid_until.lock() {
            Ok(mut v) => *v = valid_until,
            Err(p) => *p.into_inner() = valid_until,
        }
        true
    }

    /// Seeded [`crate::seeded::SeededDefect::RedlockRevival`] (dlm's
    /// checker tests only): [`LeaseState::renewed`] as before issue 30's
    /// fix, which moved the end of a lease not marked lost without reading
    /// the clock, so a late reply revived a lease that had run out.
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn renewed_unchecked(&self, valid_until: Instant) {
        if self.lost.is_cancelled() {
            return;
        }
        match self.valid_until.lock() {
            Ok(mut v) => *v = valid_until,
            Err(p) => *p.into_inner() = valid_until,
        }
    }

    pub(crate) fn mark_lost(&self) {
        self.lost.cancel();
    }

    /// Marked lost (without looking at the clock).
    pub(crate) fn marked_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        if Instant::now() >= self.valid_until() {
            // Once seen as over, a lease stays over.
            self.lost.cancel();
            return true;
        }
        false
    }

    pub(crate) fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Completes as soon as the lease is lost (marked, or run out).
    pub(crate) async fn lost(&self) {
        loop {
            let until = self.valid_until();
            tokio::select! {
                _ = self.lost.cancelled() => return,
                _ = tokio::time::sleep_until(until) => {
                    if self.is_lost() {
                        return;
                    }
                }
            }
        }
    }
}
