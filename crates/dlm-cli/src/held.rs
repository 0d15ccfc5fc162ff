//! What one acquisition of any lock kind holds, and how long a checking
//! workload keeps it: shared by `dlm check lock` and `dlm soak`.

use std::time::Duration;

use crate::rng::SplitMix;

/// How long each holder keeps what it got: mostly very short, so that a run
/// makes thousands of acquisitions (races show up at hand-overs), with a few
/// long holds that make waiters queue and leases near their end.
pub const HOLD_DISTRIBUTION: &str = "90% 0-1 ms, 9.9% 1-10 ms, 0.1% 10 ms to TTL/4";

/// One hold time drawn from [`HOLD_DISTRIBUTION`].
pub(crate) fn hold_time(rng: &mut SplitMix, ttl: Duration) -> Duration {
    let (roll, r) = (rng.next() % 1000, rng.next());
    let ms = |lo: u64, hi: u64| Duration::from_micros(lo * 1000 + r % ((hi - lo).max(1) * 1000));
    match roll {
        0..900 => ms(0, 1),
        900..999 => ms(1, 10),
        _ => ms(10, (ttl.as_millis() as u64 / 4).max(11)),
    }
}

/// What one acquisition of a lock kind holds.
pub(crate) enum Held {
    Mutex(dlm::LockGuard),
    Fair(dlm::FairGuard),
    Read(dlm::ReadGuard),
    Write(dlm::WriteGuard),
    Permit(dlm::SemaphoreGuard),
    Leader(dlm::Leadership),
}

impl Held {
    pub(crate) fn fence(&self) -> Option<u64> {
        match self {
            Held::Mutex(g) => g.fence().map(dlm::Fence::get),
            Held::Fair(g) => Some(g.fence().get()),
            Held::Read(g) => Some(g.fence().get()),
            Held::Write(g) => Some(g.fence().get()),
            Held::Permit(g) => Some(g.fence().get()),
            Held::Leader(g) => Some(g.term().get()),
        }
    }

    pub(crate) fn remaining(&self) -> Duration {
        match self {
            Held::Mutex(g) => g.remaining(),
            Held::Fair(g) => g.remaining(),
            Held::Read(g) => g.remaining(),
            Held::Write(g) => g.remaining(),
            Held::Permit(g) => g.remaining(),
            Held::Leader(g) => g.remaining(),
        }
    }

    /// Nobody else may hold it meanwhile (all but a read share and a permit).
    pub(crate) fn exclusive(&self) -> bool {
        !matches!(self, Held::Read(_) | Held::Permit(_))
    }

    /// Set the lease to `ttl` from now, if still held.
    pub(crate) async fn extend(&self, ttl: Duration) -> dlm::Result<()> {
        match self {
            Held::Mutex(g) => g.extend(ttl).await,
            Held::Fair(g) => g.extend(ttl).await,
            Held::Read(g) => g.extend(ttl).await,
            Held::Write(g) => g.extend(ttl).await,
            Held::Permit(g) => g.extend(ttl).await,
            Held::Leader(g) => g.extend(ttl).await,
        }
    }

    pub(crate) async fn release(self) -> dlm::Result<()> {
        match self {
            Held::Mutex(g) => g.release().await.map(|_| ()),
            Held::Fair(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Permit(g) => g.release().await,
            Held::Leader(g) => g.resign().await,
        }
    }
}
