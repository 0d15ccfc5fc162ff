//! The guard of a held lock: release, extend, fencing token, monotonic
//! validity, the watchdog and the "lost" signal.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::lock::Outcome;
use crate::lock::batch;
use crate::lock::locks::Held;
use crate::lock::nodes::{Nodes, ReleaseOutcome};
use crate::metrics::LostReason;
pub use crate::services::lease::LostSignal;
use crate::services::lease::drift;
use crate::token::{Fence, Token};

/// What the guarded work of [`crate::Lock::with`] gets: the fencing token
/// to pass to storage, and a signal that fires if the lock is lost.
#[derive(Debug, Clone)]
pub struct LockContext {
    /// The fencing token of this acquisition (`None` under Redlock).
    pub fence: Option<Fence>,
    /// Fires if the lock is lost while the work runs.
    pub lost: LostSignal,
}

/// What a successful [`LockGuard::release`] confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// Nodes that still held our token and deleted it, or handed it to a
    /// waiting task of this client (1 on a single Redis).
    pub confirmed: usize,
    /// Nodes asked (1 on a single Redis, N under Redlock).
    pub nodes: usize,
}

impl LostReason {
    /// Why a renewal or extend that found the lock gone lost it.
    pub(crate) fn of(outcome: Outcome) -> Self {
        match outcome {
            Outcome::NotHeld => LostReason::Taken,
            Outcome::Expired | Outcome::Done => LostReason::Expired,
        }
    }
}

/// Proof of holding a lock, returned by [`crate::Lock::acquire`].
///
/// Release it with [`LockGuard::release`] to learn whether it was still ours.
/// Dropping a guard never blocks: the release is handed to a background task
/// on the current tokio runtime (without a runtime, the TTL frees the lock).
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use std::time::Duration;
/// let guard = client.lock("report").acquire(&dlm::LockOptions::new(Duration::from_secs(10))).await?;
/// println!("fence {:?} valid for {:?}", guard.fence(), guard.remaining());
/// guard.extend(Duration::from_secs(10)).await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a guard releases the lock in the background at once"]
pub struct LockGuard {
    held: Arc<Held>,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.held.name)
            .field("key", &self.held.keys.lock)
            .field("fence", &self.held.fence)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(held: Arc<Held>, ttl: Duration, watchdog: bool) -> Self {
        if watchdog {
            held.locks.renewer.add(held.id, &held, ttl);
        }
        LockGuard {
            held,
            released: false,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// The Redis key of the lock.
    pub fn key(&self) -> &str {
        &self.held.keys.lock
    }

    /// The owner token stored in the key.
    pub fn token(&self) -> &Token {
        &self.held.token
    }

    /// The fencing token of this acquisition: strictly greater than every
    /// earlier holder's. `Some` for a lock on one Redis; `None` for a Redlock
    /// client, where no counter is provably monotonic (a wrong token would be
    /// worse than none; see the crate's Safety section).
    pub fn fence(&self) -> Option<Fence> {
        self.held.fence
    }

    /// The TTL the lock was acquired with (the watchdog renews to it).
    pub fn ttl(&self) -> Duration {
        self.held.ttl
    }

    /// Time left on the lease, by the local monotonic clock, minus the drift
    /// allowance; zero once lost.
    pub fn remaining(&self) -> Duration {
        self.held.lease.remaining()
    }

    /// True once the lock is known to be lost or its lease ran out.
    pub fn is_lost(&self) -> bool {
        self.held.lease.is_lost()
    }

    /// Completes as soon as the lock is lost (see [`LostSignal`]).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        self.held.lease.lost()
    }

    /// A cloneable handle on the "lost" state, to move into other tasks.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.held.lease.clone())
    }

    /// Ask Redis whether the key still holds our token (the seeds' `isLocking`).
    pub async fn is_held(&self) -> Result<bool> {
        self.held
            .locks
            .nodes
            .holds(&self.held.keys, &self.held.token)
            .await
    }

    /// Keep the lock in Redis but let go of it here: no release on drop, no
    /// watchdog, not in [`crate::Client::release_all`]. The lock stays held
    /// until its TTL runs out or somebody releases it with the returned
    /// token (e.g. `dlm lock release`).
    ///
    /// ```no_run
    /// # async fn demo(lock: dlm::Lock) -> dlm::Result<()> {
    /// let guard = lock.acquire(&dlm::LockOptions::new(std::time::Duration::from_secs(60))).await?;
    /// let (token, fence) = guard.detach();
    /// println!("hand over {} (fence {fence:?})", token.as_str());
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) -> (Token, Option<Fence>) {
        self.released = true;
        self.held.stop.store(true, Ordering::Release);
        self.held.locks.registry.unregister(self.held.id);
        (self.held.token.clone(), self.held.fence)
    }

    /// Set the lock's TTL to `ttl` from now, if it is still ours.
    ///
    /// Errors: [`Error::Expired`] or [`Error::NotHeld`] (the guard is then
    /// lost), [`Error::InvalidArgument`] for a TTL out of range.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        crate::lock::validate_ttl(ttl)?;
        self.held
            .locks
            .nodes
            .check_ttl(ttl, self.held.node_timeout)?;
        extend_held(&self.held, ttl).await
    }

    /// Release the lock, telling whether it was still ours: `Ok` when it
    /// was (with how many nodes confirmed), [`Error::Expired`] when it had
    /// expired, [`Error::NotHeld`] when another owner holds it now.
    pub async fn release(mut self) -> Result<Released> {
        self.released = true;
        let held = self.held.clone();
        held.stop.store(true, Ordering::Release);
        held.lease.mark_lost();
        held.ended();
        if !held.locks.registry.unregister(held.id) {
            // release_all() got there first.
            return Err(Error::Expired {
                name: held.name.to_string(),
            });
        }
        let r = if held.locks.nodes.single().is_some() {
            release_held(&held).await?
        } else {
            // Redlock: a release (a hand-over above all) takes several
            // requests per node and a clean-up after them; run it as a task
            // of its own, tracked for `Client::settle`, so that a caller
            // that stops waiting (a timeout around `release()`, a
            // `select!`) cannot cut it off halfway, leaving a hand-over's
            // requests landed for a waiter nobody grants or wakes.
            let task = held.clone();
            let release = held
                .locks
                .background
                .spawn(async move { release_held(&task).await }.in_current_span());
            release.await.map_err(|e| Error::Unavailable {
                source: format!("the release task ended early: {e}").into(),
            })??
        };
        tracing::debug!(name = %held.name, outcome = ?r.outcome, confirmed = r.confirmed, nodes = r.nodes, "released");
        r.outcome.into_result(&held.name)?;
        Ok(Released {
            confirmed: r.confirmed,
            nodes: r.nodes,
        })
    }
}

/// Release a held lock (by `release()` or on drop): handed straight to a
/// waiting task of this client when there is one, else released everywhere.
async fn release_held(held: &Held) -> Result<ReleaseOutcome> {
    let released = match hand_over(held).await? {
        HandOver::Handed(r) => return Ok(r),
        HandOver::Failed(released) => released,
        HandOver::NotTried => release_everywhere(held).await,
    };
    // The release publishes a wake-up only when a waiter left its marker in
    // Redis; this client's own waiters (which queue behind one another
    // without trying Redis) are woken here, without a round trip.
    if let (Ok(r), Some(wakeups)) = (&released, &held.locks.wakeups)
        && r.outcome == Outcome::Done
    {
        wakeups.wake_local(&held.keys.channel);
    }
    released
}

/// Release a held lock on every node (no hand-over).
async fn release_everywhere(held: &Held) -> Result<ReleaseOutcome> {
    let nodes = &held.locks.nodes;
    match nodes.release(&held.name, &held.keys, &held.token).await {
        // The connection broke (Redis restarted, a reset): the release may
        // never have been sent, and the lock would stay until its TTL. It
        // compares the token before it deletes, so sending it once more on
        // the fresh connection is safe. If that one finds the lock gone, the
        // first one may have freed it: the first error stands.
        Err(e @ Error::Unavailable { .. }) if nodes.single().is_some() => {
            match nodes.release(&held.name, &held.keys, &held.token).await {
                Ok(r) if r.outcome == Outcome::Done => {
                    tracing::debug!(name = %held.name, error = %e, "released on the second try");
                    Ok(r)
                }
                _ => Err(e),
            }
        }
        other => other,
    }
}

/// What [`hand_over`] did.
enum HandOver {
    /// The lock is the waiting task's now.
    Handed(ReleaseOutcome),
    /// Redlock: too few nodes handed over; the lock was released on every
    /// node instead (counting a node whose hand-over landed as released by
    /// us), and this is that release's outcome.
    Failed(Result<ReleaseOutcome>),
    /// No hand-over was made: release normally.
    NotTried,
}

/// When a task of this client waits for the lock, hand it over directly
/// (one round trip per node, nobody cuts in).
async fn hand_over(held: &Held) -> Result<HandOver> {
    let Some(wakeups) = &held.locks.wakeups else {
        return Ok(HandOver::NotTried);
    };
    // An acquire of this token may still be on its way: the normal
    // release waits for it; a hand-over would overtake it.
    if held
        .locks
        .nodes
        .all()
        .iter()
        .any(|n| n.unsettled(&held.token))
    {
        return Ok(HandOver::NotTried);
    }
    // Under Redlock the waiter is taken out of the queue at once: two
    // releases at a time (a stale guard whose key expired, and the guard
    // that holds the lock now) must never hand over to the same waiter, or
    // the failed one's clean-up could delete the other's grant. On one
    // Redis a failed `release_to` changes nothing, so peeking is enough.
    let next = match &held.locks.nodes {
        Nodes::Single(_) => wakeups.next_baton(&held.keys.channel),
        Nodes::Quorum(_) => wakeups.claim_baton(&held.keys.channel),
    };
    let Some(next) = next else {
        return Ok(HandOver::NotTried);
    };
    let started = Instant::now();
    let (fence, confirmed, nodes) = match &held.locks.nodes {
        Nodes::Single(node) => {
            let Some(fence) = crate::lock::ops::release_to(
                &node.backend,
                &held.keys,
                &held.token,
                next.token(),
                next.ttl(),
            )
            .await?
            else {
                // Not ours any more: the normal release tells expired from taken.
                return Ok(HandOver::NotTried);
            };
            (fence, 1, 1)
        }
        Nodes::Quorum(q) => {
            let confirmed = match hand_over_quorum(held, q, &next, started).await {
                Ok(confirmed) => confirmed,
                Err(released) => {
                    // Too few nodes handed over: out of the queue (its token
                    // was released wherever it landed), woken to try on its
                    // own.
                    wakeups.handed(&held.keys.channel, &next);
                    next.notify_void();
                    return Ok(HandOver::Failed(released));
                }
            };
            // Redlock has no fence; the grant's is not read.
            (Fence::new(0), confirmed, q.backends.len())
        }
    };
    wakeups.handed(&held.keys.channel, &next);
    next.grant(fence, started);
    // Its acquisition ended while the lock was on its way to it (only this
    // call holds the baton now): nobody will take the grant, so give it back
    // (token-checked, after the hand-over's reply, so behind it). One that
    // ends after this check releases its token itself, as it was armed. Not
    // when it ended holding the lock by that token: it took this grant, or
    // (one Redis) its own attempt, written right behind the hand-over, found
    // the key holding its token and was granted too (`Baton::keep`). The
    // fence pairs with the `Release` of the acquisition's drop of its baton,
    // so that a count of 1 also shows its `keep`.
    if Arc::strong_count(&next) == 1 && {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        !next.kept()
    } {
        let (locks, name, keys) = (held.locks.clone(), held.name.clone(), held.keys.clone());
        let token = next.token().clone();
        let background = locks.background.clone();
        background.spawn(async move {
            let released = locks.nodes.release(&name, &keys, &token).await;
            // The next local waiter in line was neither handed the lock nor
            // woken (under Redlock the release's message comes from one node
            // only): wake it now that the lock is free.
            if let (Ok(r), Some(wakeups)) = (released, &locks.wakeups)
                && r.outcome == Outcome::Done
            {
                wakeups.wake_local(&keys.channel);
            }
        });
    }
    tracing::debug!(name = %held.name, confirmed, nodes, "handed over to a waiting task");
    Ok(HandOver::Handed(ReleaseOutcome {
        outcome: Outcome::Done,
        confirmed,
        nodes,
    }))
}

/// Redlock's hand-over: `release_to.lua` on every node at once, each within
/// the per-node timeout, decided as soon as a majority handed over (or so
/// many failed that no majority can): the number of nodes that moved the lock
/// from our token to the successor's, when that is a majority within the
/// successor's validity (`started` + its TTL - drift); else the lock is
/// released on every node and `Err` holds that release's outcome.
///
/// Why a majority so handed over is a grant like an acquire's: each node
/// moves from our token to the successor's atomically, and only while it
/// holds ours, so a node that handed over was held by nobody else at that
/// instant, and holds the successor's token for its TTL from then on (no
/// earlier than `started`). A majority of them, within `started` + TTL -
/// drift, intersects every other majority. The successor's token is one its
/// acquire attempts never send (see `Lock::enlist`), so no late release of a
/// failed attempt can delete it.
///
/// Each request was written to its node's connection at once (no batch), so
/// a later release of either token there goes behind it. On success, the
/// requests still out finish in the background (tracked), and every node
/// that did not confirm is then released of our token (token-checked: one
/// whose hand-over landed is left alone). On a failure, every request is
/// waited for (each is bounded by the per-node timeout), and then every node
/// is released here, before the release reports (see
/// [`release_failed_hand_over`]): a hand-over that landed after its reply's
/// timeout moved that node from our token to the successor's, so a plain
/// release of our token would find the successor's and report `NotHeld` for a
/// lock that was ours.
async fn hand_over_quorum(
    held: &Held,
    q: &crate::lock::nodes::Quorum,
    next: &Arc<crate::services::wakeups::Baton>,
    started: Instant,
) -> std::result::Result<usize, Result<ReleaseOutcome>> {
    use futures_util::StreamExt;
    let timeout = q.node_timeout(next.ttl(), held.node_timeout);
    let n = q.backends.len();
    let mut pending: futures_util::stream::FuturesUnordered<_> = q
        .backends
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let (node, keys, token) = (node.clone(), held.keys.clone(), held.token.clone());
            let (successor, ttl) = (next.token().clone(), next.ttl());
            async move {
                let r = tokio::time::timeout(
                    timeout,
                    crate::lock::ops::release_to(&node.backend, &keys, &token, &successor, ttl),
                )
                .await;
                // Some(true): handed over; Some(false): the node said it
                // did not hold our token; None: no answer (it may land).
                let moved = match r {
                    Ok(Ok(fence)) => Some(fence.is_some()),
                    _ => None,
                };
                (i, moved)
            }
        })
        .collect();
    let mut moved: Vec<Option<bool>> = vec![None; n];
    let (mut confirmed, mut failed) = (0, 0);
    while let Some((i, m)) = pending.next().await {
        moved[i] = m;
        if m == Some(true) {
            confirmed += 1;
        } else {
            failed += 1;
        }
        if confirmed >= q.needed() || failed > n - q.needed() {
            break;
        }
    }
    let valid_until = started + next.ttl().saturating_sub(drift(next.ttl()));
    let handed = confirmed >= q.needed() && Instant::now() < valid_until;
    let (ours, theirs) = (held.token.clone(), next.token().clone());
    if handed {
        let release_timeout = timeout.max(held.locks.nodes.timeout() / 4);
        let nodes = q.backends.clone();
        let keys = held.keys.clone();
        q.background.spawn(async move {
            while let Some((i, m)) = pending.next().await {
                moved[i] = m;
            }
            let releases = nodes
                .iter()
                .zip(&moved)
                .filter(|(_, m)| **m != Some(true))
                .map(|(node, _)| batch::release(node, &keys, &ours, release_timeout));
            futures_util::future::join_all(releases).await;
        });
        return Ok(confirmed);
    }
    // The requests still out end within the per-node timeout, which they
    // all started together with, so this wait is short.
    while let Some((i, m)) = pending.next().await {
        moved[i] = m;
    }
    // What is left of the client's call timeout, counted from the hand-over's
    // start (at least the shortest per-node wait): a release of a majority of
    // frozen nodes ends about when a plain one would. A release that runs out
    // of it still goes out behind, in the batch that carries it.
    let left = held
        .locks
        .nodes
        .timeout()
        .saturating_sub(started.elapsed())
        .max(crate::lock::nodes::MIN_NODE_TIMEOUT);
    let releases = q
        .backends
        .iter()
        .zip(&moved)
        .map(|(node, m)| release_failed_hand_over(node, &held.keys, &ours, &theirs, *m, left));
    let replies = futures_util::future::join_all(releases).await;
    let released = replies
        .iter()
        .filter(|r| matches!(r, Ok(Outcome::Done)))
        .count();
    Err(q
        .verdict(&held.name, &replies, true)
        .map(|outcome| ReleaseOutcome {
            outcome,
            confirmed: released,
            nodes: n,
        }))
}

/// One node of a failed Redlock hand-over, released: `Done` when our token
/// left it, either released now or moved to the successor's by the
/// hand-over, whose token is then released too, since the successor will
/// not take it. `moved` is what the node answered to the hand-over:
/// `Some(true)` it moved, `Some(false)` it did not hold our token (nothing
/// of the successor's to undo there), `None` no answer: it may have landed
/// after its timeout, so both tokens are released, at once (each release is
/// token-checked and goes behind the hand-over on the node's connection, so
/// exactly one of them can find its token). The successor's token is one
/// only a hand-over to this baton sets (see `Lock::enlist`), and the baton
/// was claimed by this release alone (`Wakeups::claim_baton`), so finding
/// it means our hand-over landed.
async fn release_failed_hand_over(
    node: &crate::lock::batch::Node,
    keys: &Arc<crate::keys::LockKeys>,
    ours: &Token,
    theirs: &Token,
    moved: Option<bool>,
    timeout: Duration,
) -> Result<Outcome> {
    match moved {
        Some(true) => {
            let _ = batch::release(node, keys, theirs, timeout).await;
            Ok(Outcome::Done)
        }
        Some(false) => batch::release(node, keys, ours, timeout).await,
        None => {
            let (released, landed) = futures_util::future::join(
                batch::release(node, keys, ours, timeout),
                batch::release(node, keys, theirs, timeout),
            )
            .await;
            match (released, landed) {
                (_, Ok(Outcome::Done)) | (Ok(Outcome::Done), _) => Ok(Outcome::Done),
                // Our token was not there, but whether the hand-over moved
                // it is unknown: no answer, not `NotHeld`.
                (Ok(_), Err(e)) => Err(e),
                (released, _) => released,
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let held = self.held.clone();
        held.stop.store(true, Ordering::Release);
        held.lease.mark_lost();
        held.ended();
        if !held.locks.registry.unregister(held.id) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let background = held.locks.background.clone();
            rt.spawn(background.track_future(async move {
                match release_held(&held).await {
                    Ok(r) => {
                        tracing::debug!(name = %held.name, outcome = ?r.outcome, "released on drop")
                    }
                    Err(e) => {
                        tracing::warn!(name = %held.name, error = %e, "release on drop failed; the TTL will free the lock")
                    }
                }
            }));
        }
    }
}

async fn extend_held(held: &Held, ttl: Duration) -> Result<()> {
    if held.lease.is_lost() {
        // A lease seen as over stays over, even if the key happens to survive.
        // On one Redis, ask anyway (without re-taking) to tell "taken" from "expired".
        let expired = Err(Error::Expired {
            name: held.name.to_string(),
        });
        let Some(backend) = held.locks.nodes.single() else {
            return expired;
        };
        return match crate::lock::ops::extend(
            backend,
            &held.keys,
            &held.token,
            ttl,
            backend.timeout(),
        )
        .await?
        {
            Outcome::NotHeld => Outcome::NotHeld.into_result(&held.name),
            _ => expired,
        };
    }
    let (outcome, valid_until) = held
        .locks
        .nodes
        .extend(&held.name, &held.keys, &held.token, ttl, held.node_timeout)
        .await?;
    if outcome == Outcome::Done {
        // Released meanwhile (a concurrent `release_all`): its release gives
        // the keys back.
        let released = held.lease.marked_lost();
        #[cfg(feature = "seeded-defects")]
        if held.locks.seeded_revival() {
            held.lease.renewed_unchecked(valid_until);
            return Ok(());
        }
        if held.lease.renewed(valid_until) {
            tracing::debug!(name = %held.name, ?ttl, "extended");
            return Ok(());
        }
        // The lease ran out before the replies came back: another client
        // may have held the lock in the gap. Lost, whatever Redis holds now.
        tracing::debug!(name = %held.name, "the lease ran out before the extend's reply");
        held.lost(LostReason::RenewFailed);
        if !released {
            held.release_in_background();
        }
        return Outcome::Expired.into_result(&held.name);
    }
    tracing::debug!(name = %held.name, ?outcome, "extend found the lock gone");
    held.lost(LostReason::of(outcome));
    outcome.into_result(&held.name)
}
