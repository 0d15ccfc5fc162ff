//! Shared services: what every primitive of a client uses and none owns.
//!
//! * [`lease`]: a lease's validity on the local monotonic clock and its
//!   "lost" state, and the clock-drift allowance;
//! * [`registry`]: the leases a client holds (for `release_all`);
//! * [`renew`]: the watchdog that renews many leases with few scripts;
//! * [`wakeups`]: wake-up on release over pub/sub, and the local hand-over;
//! * [`batch`]: gathering concurrent calls on one connection into one script;
//! * [`outstanding`]: requests that may still reach Redis after their caller
//!   stopped waiting, so that their undo goes behind them.
//!
//! This layer knows the connection seam ([`crate::backend`]) and the
//! foundation (errors, tokens, keys), never a primitive or the client: a
//! primitive plugs in by implementing [`renew::Renewable`] or
//! [`batch::BatchJob`] for its own types.

pub(crate) mod batch;
pub(crate) mod held;
pub(crate) mod lease;
pub(crate) mod options;
pub(crate) mod outstanding;
#[cfg(test)]
pub(crate) mod props;
pub(crate) mod registry;
pub(crate) mod renew;
pub(crate) mod replication;
pub(crate) mod wakeups;

use std::time::Duration;

/// A pause around `interval`, drawn uniformly from [interval/2, 3*interval/2),
/// so that callers that failed together do not retry together.
/// Saturates at `Duration::MAX` instead of panicking on huge intervals.
pub(crate) fn jittered(interval: Duration) -> Duration {
    let half = interval / 2;
    let spread =
        Duration::try_from_secs_f64(interval.as_secs_f64() * fastrand::f64()).unwrap_or(interval);
    half.saturating_add(spread)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half() {
        let base = Duration::from_millis(100);
        for _ in 0..1000 {
            let j = jittered(base);
            assert!(j >= Duration::from_millis(50) && j < Duration::from_millis(150));
        }
    }
}
