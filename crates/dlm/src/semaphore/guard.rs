//! The guard of held permits: release (handed straight to a waiting task of
//! this client when its permits fit), the fencing token, the monotonic
//! validity, the watchdog and the "lost" signal.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::keys::SemaphoreKeys;
use crate::semaphore::Semaphores;
use crate::semaphore::ops::{self, HandOver, Successor};
use crate::services::lease::{LeaseState, LostSignal};
use crate::token::{Fence, Token};

/// Shared between a guard and the watchdog.
pub(crate) struct Held {
    pub(crate) state: Arc<Semaphores>,
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<SemaphoreKeys>,
    pub(crate) token: Token,
    pub(crate) permits: u32,
    pub(crate) fence: Fence,
    pub(crate) ttl: Duration,
    pub(crate) lease: Arc<LeaseState>,
    pub(crate) stop: CancellationToken,
}

/// Proof of holding permits of a semaphore, returned by
/// [`crate::Semaphore::acquire`].
///
/// Release it with [`SemaphoreGuard::release`] to learn whether the permits
/// were still ours. Dropping a guard never blocks: the release goes to a
/// background task on the current tokio runtime (without a runtime, the TTL
/// brings the permits back).
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
#[must_use = "dropping a guard releases the permits in the background at once"]
pub struct SemaphoreGuard {
    held: Arc<Held>,
    released: bool,
}

impl std::fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("name", &self.held.name)
            .field("permits", &self.held.permits)
            .field("fence", &self.held.fence)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl SemaphoreGuard {
    pub(crate) fn new(held: Arc<Held>, watchdog: bool) -> Self {
        if watchdog {
            held.state.renewer.add(held.id, &held, held.ttl);
        }
        SemaphoreGuard {
            held,
            released: false,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.held.permits
    }

    /// This holder's token (its permits are the members `TOKEN:1..=n`).
    pub fn token(&self) -> &Token {
        &self.held.token
    }

    /// The fencing token of this grant: strictly greater than every earlier
    /// grant's of this semaphore.
    pub fn fence(&self) -> Fence {
        self.held.fence
    }

    /// The lease length (the watchdog renews to it).
    pub fn ttl(&self) -> Duration {
        self.held.ttl
    }

    /// Time left on the lease, by the local monotonic clock, minus the drift
    /// allowance; zero once lost.
    pub fn remaining(&self) -> Duration {
        self.held.lease.remaining()
    }

    /// True once the permits are known lost or the lease ran out.
    pub fn is_lost(&self) -> bool {
        self.held.lease.is_lost()
    }

    /// Completes as soon as the permits are lost (see [`LostSignal`]).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        self.held.lease.lost()
    }

    /// A cloneable handle on the "lost" state, to move into other tasks.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.held.lease.clone())
    }

    /// Give the permits back, telling whether they were still ours: `Ok`
    /// when they were, [`Error::Expired`] when the lease had run out.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let held = self.held.clone();
        held.stop.cancel();
        held.lease.mark_lost();
        if !held.state.registry.unregister(held.id) {
            return Err(Error::Expired {
                name: held.name.to_string(),
            });
        }
        if release_held(&held).await? {
            Ok(())
        } else {
            Err(Error::Expired {
                name: held.name.to_string(),
            })
        }
    }
}

/// Release held permits (by `release()` or on drop): handed straight to the
/// first waiting task of this client when its permits fit, else given back.
/// True when they were still ours.
async fn release_held(held: &Held) -> Result<bool> {
    let backend = held.state.backend()?;
    let next = held
        .state
        .wakeups
        .as_ref()
        .and_then(|w| Some((w, w.claim_baton(&held.keys.channel)?)));
    let Some((wakeups, next)) = next else {
        return ops::release(backend, &held.keys, &held.token, held.permits).await;
    };
    let started = Instant::now();
    let successor = Successor {
        token: next.token(),
        permits: next.units(),
        ttl: next.ttl(),
    };
    let done = ops::release_to(backend, &held.keys, &held.token, held.permits, successor).await;
    let done = match done {
        Ok(d) => d,
        Err(e) => {
            wakeups.unclaim(&held.keys.channel, next);
            return Err(e);
        }
    };
    match done {
        HandOver::Handed(fence) => {
            wakeups.handed(&held.keys.channel, &next);
            next.grant(fence, started);
            tracing::debug!(name = %held.name, "permits handed over to a waiting task");
            Ok(true)
        }
        HandOver::Released => {
            wakeups.unclaim(&held.keys.channel, next);
            Ok(true)
        }
        HandOver::Expired => {
            wakeups.unclaim(&held.keys.channel, next);
            Ok(false)
        }
    }
}

impl Drop for SemaphoreGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let held = self.held.clone();
        held.stop.cancel();
        held.lease.mark_lost();
        if !held.state.registry.unregister(held.id) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let background = held.state.background.clone();
            rt.spawn(background.track_future(async move {
                if let Err(e) = release_held(&held).await {
                    tracing::warn!(name = %held.name, error = %e, "release on drop failed; the TTL brings the permits back");
                }
            }));
        }
    }
}
