//! Where a lock lives: one Redis, or N independent masters (Redlock).
//!
//! Both sides give the same four decisions (acquire, extend, release,
//! status); the guard, watchdog, waiting and CLI are shared on top of them.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::batch::{self, Node};
use crate::lock::ops::{self, Attempt};
use crate::lock::{LockStatus, Outcome};
use crate::services::lease::drift;
use crate::token::{Fence, Token};

/// The default per-node timeout's floor (1% of the TTL below it): a loaded
/// machine or network answers within it, so a healthy node is not counted
/// as silent; a frozen node costs at most this, and only when its answer is
/// needed for a majority.
pub(crate) const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// A successful acquisition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    /// `None` under Redlock: no counter there is provably monotonic.
    pub fence: Option<Fence>,
    /// The end of the lease on the local monotonic clock: start + ttl - drift.
    pub valid_until: Instant,
}

/// One acquire attempt's outcome.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Try {
    Acquired(Grant),
    /// Held by another owner (`None`: without expiry, or unknown).
    Busy(Option<Duration>),
    /// Redlock: a split vote. Nobody (as far as the nodes that answered
    /// tell) holds a majority; contenders split the nodes between them, so
    /// each must back off for a random while, not retry all at once.
    Split,
}

/// What a release found, with how many nodes confirmed our token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReleaseOutcome {
    pub outcome: Outcome,
    pub confirmed: usize,
    pub nodes: usize,
}

/// One Redis, or a Redlock quorum over independent masters.
#[derive(Debug)]
pub(crate) enum Nodes {
    Single(Node),
    Quorum(Quorum),
}

/// N independent masters, a majority of which must agree.
#[derive(Debug)]
pub(crate) struct Quorum {
    pub backends: Vec<Node>,
    /// Per-node deadline; `None`: 1% of the TTL, at least 50 ms, at most the client timeout.
    pub node_timeout: Option<Duration>,
    /// Requests left to finish after an early decision (see `Client::settle`).
    pub background: tokio_util::task::TaskTracker,
    /// The defect its client was built with (dlm's checker tests only).
    #[cfg(feature = "seeded-defects")]
    pub seeded: Option<crate::seeded::SeededDefect>,
}

impl Quorum {
    pub(crate) fn needed(&self) -> usize {
        self.backends.len() / 2 + 1
    }

    /// Seeded [`crate::seeded::SeededDefect::RedlockRevival`] (dlm's
    /// checker tests only): a node's extension reply as before issue 30's
    /// fix, where a key taken again (`Expired`, code 2) counted as held.
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn seeded_vote(&self, reply: Result<Outcome>) -> Result<Outcome> {
        match reply {
            Ok(Outcome::Expired)
                if self.seeded == Some(crate::seeded::SeededDefect::RedlockRevival) =>
            {
                Ok(Outcome::Done)
            }
            other => other,
        }
    }

    fn client_timeout(&self) -> Duration {
        self.backends
            .first()
            .map_or(Duration::from_secs(1), |n| n.backend.timeout())
    }

    /// The per-node deadline of an acquire or extend with this TTL: the
    /// acquisition's own override, else the client's, else 1% of the TTL (at
    /// least [`MIN_NODE_TIMEOUT`]); never more than the client timeout.
    pub(crate) fn node_timeout(&self, ttl: Duration, wanted: Option<Duration>) -> Duration {
        wanted
            .or(self.node_timeout)
            .unwrap_or_else(|| (ttl / 100).max(MIN_NODE_TIMEOUT))
            .min(self.client_timeout())
    }

    /// A token-checked release on every node, left to finish in the
    /// background (after an extension or renewal that found the lock lost).
    pub(crate) fn release_in_background(&self, keys: Arc<LockKeys>, token: Token) {
        let nodes = self.backends.clone();
        let timeout = self.housekeeping_timeout();
        self.background.spawn(async move {
            join_all(
                nodes
                    .iter()
                    .map(|node| batch::release(node, &keys, &token, timeout)),
            )
            .await;
        });
    }

    /// Release and status are not racing a lease: a quarter of the client timeout per node.
    fn housekeeping_timeout(&self) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| self.client_timeout() / 4)
            .min(self.client_timeout())
    }

    /// The majority's answer to a token-checked extend or release: `Done`
    /// when a majority confirmed our token (and `valid`), `NotHeld` when so
    /// many nodes hold another token that no majority can be ours, an error
    /// when too few answered, else `Expired`.
    pub(crate) fn verdict(
        &self,
        name: &str,
        replies: &[Result<Outcome>],
        valid: bool,
    ) -> Result<Outcome> {
        let count = |o: Outcome| {
            replies
                .iter()
                .filter(|r| matches!(r, Ok(x) if *x == o))
                .count()
        };
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        if valid && count(Outcome::Done) >= self.needed() {
            Ok(Outcome::Done)
        } else if count(Outcome::NotHeld) > self.backends.len() - self.needed() {
            Ok(Outcome::NotHeld)
        } else if answered < self.needed() {
            Err(self.no_quorum(name, answered))
        } else {
            Ok(Outcome::Expired)
        }
    }

    fn no_quorum(&self, name: &str, answered: usize) -> Error {
        Error::NoQuorum {
            name: name.to_string(),
            answered,
            needed: self.needed(),
            nodes: self.backends.len(),
        }
    }
}

impl Nodes {
    /// The client-level call deadline.
    pub(crate) fn timeout(&self) -> Duration {
        match self {
            Nodes::Single(n) => n.backend.timeout(),
            Nodes::Quorum(q) => q.client_timeout(),
        }
    }

    /// The one Redis, when there is only one.
    pub(crate) fn single(&self) -> Option<&Backend> {
        match self {
            Nodes::Single(n) => Some(&n.backend),
            Nodes::Quorum(_) => None,
        }
    }

    /// Every node: the one Redis, or each Redlock node.
    pub(crate) fn all(&self) -> &[Node] {
        match self {
            Nodes::Single(n) => std::slice::from_ref(n),
            Nodes::Quorum(q) => &q.backends,
        }
    }

    /// How many independent nodes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Nodes::Single(_) => 1,
            Nodes::Quorum(q) => q.backends.len(),
        }
    }

    /// Under Redlock a TTL must leave room for the drift and the per-node timeout.
    pub(crate) fn check_ttl(&self, ttl: Duration, node_timeout: Option<Duration>) -> Result<()> {
        if let Nodes::Quorum(q) = self {
            let floor = drift(ttl) + q.node_timeout(ttl, node_timeout);
            if ttl <= floor * 2 {
                return Err(Error::invalid(
                    "ttl",
                    format!(
                        "{ttl:?} is too short for Redlock: drift ({:?}) plus the per-node timeout ({:?}) would leave almost no validity",
                        drift(ttl),
                        q.node_timeout(ttl, node_timeout)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// One acquire attempt. Under Redlock it is decided as soon as a
    /// majority granted, or as soon as so many nodes refused or failed that
    /// no majority can grant: a frozen node costs at most the per-node
    /// timeout, and only when its answer is needed. A failed attempt releases
    /// its grants on the nodes that answered before it returns; nodes whose
    /// answer is still out or was lost are released in the background (so a
    /// Redlock caller uses a fresh token for its next attempt).
    // One attempt's whole description; a struct for it would only be unpacked here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn acquire(
        &self,
        name: &str,
        keys: &Arc<LockKeys>,
        token: &Token,
        ttl: Duration,
        marker: Duration,
        node_timeout: Option<Duration>,
        first: bool,
    ) -> Result<Try> {
        let start = Instant::now();
        let valid_until = start + ttl.saturating_sub(drift(ttl));
        let q = match self {
            Nodes::Single(b) => {
                let attempt =
                    batch::acquire(b, keys, token, ttl, marker, b.backend.timeout(), first).await;
                return attempt.map(|a| match a {
                    Attempt::Acquired(fence) => Try::Acquired(Grant {
                        fence: Some(fence),
                        valid_until,
                    }),
                    Attempt::Busy(t) => Try::Busy(t),
                });
            }
            Nodes::Quorum(q) => q,
        };
        let timeout = q.node_timeout(ttl, node_timeout);
        let n = q.backends.len();
        let mut pending: futures_util::stream::FuturesUnordered<_> = q
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let (b, keys, token) = (b.clone(), keys.clone(), token.clone());
                async move {
                    let r = batch::acquire(&b, &keys, &token, ttl, marker, timeout, first).await;
                    (i, r)
                }
            })
            .collect();
        let (mut granted, mut answered, mut refused) = (0, 0, 0);
        let mut holder_ttls = Vec::new();
        // Nodes that granted; nodes whose answer was lost after a sent request.
        let mut replied_grant = vec![false; n];
        let mut to_release = vec![false; n];
        while let Some((i, r)) = futures_util::StreamExt::next(&mut pending).await {
            match r {
                Ok(Attempt::Acquired(_)) => {
                    granted += 1;
                    answered += 1;
                    replied_grant[i] = true;
                }
                Ok(Attempt::Busy(t)) => {
                    answered += 1;
                    refused += 1;
                    holder_ttls.push(t);
                }
                Err(_) => {
                    refused += 1;
                    // Even when its node was not connected when it gave up:
                    // a request still queued is sent once it is (the release
                    // waits for it; one never sent finds nothing).
                    to_release[i] = true;
                }
            }
            if granted >= q.needed() {
                break;
            }
            // No majority can grant any more: stop waiting once the outcome
            // is known too (busy when a majority answered, no quorum when too
            // few can still answer).
            let outstanding = n - granted - refused;
            if refused > n - q.needed()
                && (answered >= q.needed() || answered + outstanding < q.needed())
            {
                break;
            }
        }
        if granted >= q.needed() && Instant::now() < valid_until {
            // The other nodes' requests are on their way: let them finish in
            // the background (tracked: `Client::settle` waits for them), so
            // that the healthy ones hold the lock too. They are not kept
            // outstanding: one already written is ahead of the guard's
            // release on its connection, and a release that waited for its
            // reply would go out after the next acquire of the lock (review 5,
            // finding 3). One still queued in a later batch phase can be
            // overtaken by the release (review finding 3, open: see
            // RELIABILITY.md); once given up on its own deadline, its node
            // keeps it outstanding until it is answered.
            if !pending.is_empty() {
                q.background.spawn(async move {
                    while futures_util::StreamExt::next(&mut pending).await.is_some() {}
                });
            }
            tracing::debug!(granted, nodes = n, "redlock acquired");
            return Ok(Try::Acquired(Grant {
                fence: None,
                valid_until,
            }));
        }
        tracing::debug!(granted, answered, nodes = n, "redlock not acquired");
        // Undo every grant: now on the nodes that granted (they answer), in
        // the background on those whose reply was lost or is still out (once
        // their requests ended, so that none lands after the release: both
        // travel on the same connection, in order).
        let granted_nodes = q
            .backends
            .iter()
            .zip(&replied_grant)
            .filter(|(_, g)| **g)
            .map(|(node, _)| batch::release(node, keys, token, timeout));
        join_all(granted_nodes).await;
        if to_release.iter().any(|r| *r) || !pending.is_empty() {
            let nodes: Vec<_> = q.backends.clone();
            let (keys, token) = (keys.clone(), token.clone());
            q.background.spawn(async move {
                while let Some((i, r)) = futures_util::StreamExt::next(&mut pending).await {
                    to_release[i] = matches!(r, Ok(Attempt::Acquired(_))) || r.is_err();
                }
                let releases = nodes
                    .iter()
                    .zip(&to_release)
                    .filter(|(_, release)| **release)
                    .map(|(node, _)| batch::release(node, &keys, &token, timeout));
                join_all(releases).await;
            });
        }
        if answered < q.needed() {
            return Err(q.no_quorum(name, answered));
        }
        if holder_ttls.len() < q.needed() {
            tracing::debug!(
                granted,
                busy = holder_ttls.len(),
                nodes = n,
                "redlock split vote"
            );
            return Ok(Try::Split);
        }
        // The majority's view: the holder's TTL as the median busy node reports it.
        holder_ttls.sort();
        Ok(Try::Busy(
            holder_ttls.get(holder_ttls.len() / 2).copied().flatten(),
        ))
    }

    /// Extend to `ttl`; returns the new end of the lease when it counts.
    pub(crate) async fn extend(
        &self,
        name: &str,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        node_timeout: Option<Duration>,
    ) -> Result<(Outcome, Instant)> {
        let start = Instant::now();
        let valid_until = start + ttl.saturating_sub(drift(ttl));
        let q = match self {
            Nodes::Single(b) => {
                return Ok((
                    ops::extend(&b.backend, keys, token, ttl, b.backend.timeout()).await?,
                    valid_until,
                ));
            }
            Nodes::Quorum(q) => q,
        };
        let timeout = q.node_timeout(ttl, node_timeout);
        let replies = join_all(
            q.backends
                .iter()
                .map(|b| ops::extend_or_acquire(&b.backend, keys, token, ttl, timeout)),
        )
        .await;
        #[cfg(feature = "seeded-defects")]
        let replies: Vec<_> = replies.into_iter().map(|r| q.seeded_vote(r)).collect();
        let valid = Instant::now() < valid_until;
        // Only nodes that still held our token count (see
        // `ops::extend_or_acquire_code`): a majority of them held it without
        // a gap, so nobody else can have held a majority meanwhile.
        let verdict = q.verdict(name, &replies, valid)?;
        if verdict != Outcome::Done {
            // Not ours: give back what the extension repaired or extended
            // on the way, so the lock is not held for nobody until its TTL.
            q.release_in_background(Arc::new(keys.clone()), token.clone());
        }
        Ok((verdict, valid_until))
    }

    /// Token-checked release. Under Redlock it is decided as soon as a
    /// majority confirmed (or so many hold another token that no majority can
    /// be ours); the requests to slower nodes finish in the background.
    pub(crate) async fn release(
        &self,
        name: &str,
        keys: &Arc<LockKeys>,
        token: &Token,
    ) -> Result<ReleaseOutcome> {
        let q = match self {
            Nodes::Single(b) => {
                let outcome = batch::release(b, keys, token, b.backend.timeout()).await?;
                return Ok(ReleaseOutcome {
                    outcome,
                    confirmed: usize::from(outcome == Outcome::Done),
                    nodes: 1,
                });
            }
            Nodes::Quorum(q) => q,
        };
        let timeout = q.housekeeping_timeout();
        let nodes = q.backends.len();
        let mut pending: futures_util::stream::FuturesUnordered<_> = q
            .backends
            .iter()
            .map(|b| {
                let (b, keys, token) = (b.clone(), keys.clone(), token.clone());
                async move { batch::release(&b, &keys, &token, timeout).await }
            })
            .collect();
        let mut replies = Vec::with_capacity(nodes);
        while let Some(r) = futures_util::StreamExt::next(&mut pending).await {
            replies.push(r);
            let count = |o: Outcome| {
                replies
                    .iter()
                    .filter(|r| matches!(r, Ok(x) if *x == o))
                    .count()
            };
            if count(Outcome::Done) >= q.needed() || count(Outcome::NotHeld) > nodes - q.needed() {
                break;
            }
        }
        if !pending.is_empty() {
            q.background.spawn(async move {
                while futures_util::StreamExt::next(&mut pending).await.is_some() {}
            });
        }
        let confirmed = replies
            .iter()
            .filter(|r| matches!(r, Ok(Outcome::Done)))
            .count();
        // Replies not in yet count as no answer.
        let outcome = q.verdict(name, &replies, true)?;
        Ok(ReleaseOutcome {
            outcome,
            confirmed,
            nodes,
        })
    }

    pub(crate) async fn status(&self, name: &str, keys: &LockKeys) -> Result<LockStatus> {
        let q = match self {
            Nodes::Single(b) => {
                let (held, ttl, fence) = ops::status(&b.backend, keys, b.backend.timeout()).await?;
                return Ok(LockStatus {
                    held,
                    ttl: if held { ttl } else { None },
                    fence: (fence > 0).then_some(Fence::new(fence)),
                });
            }
            Nodes::Quorum(q) => q,
        };
        // Decided as soon as a majority agrees whether it is held.
        let timeout = q.housekeeping_timeout();
        let mut pending: futures_util::stream::FuturesUnordered<_> = q
            .backends
            .iter()
            .map(|b| ops::status(&b.backend, keys, timeout))
            .collect();
        let mut answers = Vec::with_capacity(q.backends.len());
        while let Some(r) = futures_util::StreamExt::next(&mut pending).await {
            if let Ok(a) = r {
                answers.push(a);
            }
            let held = answers.iter().filter(|a| a.0).count();
            if held >= q.needed() || answers.len() - held > q.backends.len() - q.needed() {
                break;
            }
        }
        if answers.len() < q.needed() {
            return Err(q.no_quorum(name, answers.len()));
        }
        let mut ttls: Vec<Option<Duration>> = answers.iter().filter(|a| a.0).map(|a| a.1).collect();
        let held = ttls.len() >= q.needed();
        ttls.sort();
        Ok(LockStatus {
            held,
            ttl: if held {
                ttls.get(ttls.len() / 2).copied().flatten()
            } else {
                None
            },
            fence: None,
        })
    }

    /// Does a majority of nodes hold `token`?
    pub(crate) async fn holds(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        match self {
            Nodes::Single(b) => ops::holds(&b.backend, keys, token, b.backend.timeout()).await,
            Nodes::Quorum(q) => {
                let timeout = q.housekeeping_timeout();
                let replies = join_all(
                    q.backends
                        .iter()
                        .map(|b| ops::holds(&b.backend, keys, token, timeout)),
                )
                .await;
                let answered = replies.iter().filter(|r| r.is_ok()).count();
                if answered < q.needed() {
                    return Err(q.no_quorum("", answered));
                }
                Ok(replies.iter().filter(|r| matches!(r, Ok(true))).count() >= q.needed())
            }
        }
    }
}
