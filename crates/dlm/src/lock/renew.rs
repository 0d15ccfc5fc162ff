//! Batched watchdog renewals of locks, for the renewal service
//! ([`crate::services::renew`]): a client holding thousands of locks with
//! watchdogs renews them with a few scripts per tick (one per batch of up to
//! 1000 locks, or per hash slot on a connection that may be a cluster; under
//! Redlock one such script per node, decided per lock by the majority), not
//! one call per lock.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;

use futures_util::future::join_all;
use redis::{Script, Value};
use tokio::time::Instant;

use crate::backend::server::Capability;
use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::lock::Outcome;
use crate::lock::locks::Held;
use crate::lock::nodes::{Nodes, Quorum};
use crate::lock::ops;
use crate::metrics::{LostReason, RenewalOutcome};
use crate::services::batch::code_of;
use crate::services::held::EXTEND_MANY;
use crate::services::lease::drift;
use crate::services::renew::{Due, Renewable, Renewal};

static EXTEND_OR_ACQUIRE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_or_acquire_many.lua")));

/// The scripts of batched renewals under Redlock.
pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&EXTEND_OR_ACQUIRE_MANY]
}

impl Renewable for Held {
    fn key(&self) -> &str {
        &self.keys.lock
    }

    fn active(&self) -> bool {
        !self.stop.load(Ordering::Acquire) && !self.lease.marked_lost()
    }

    fn by_slot(&self) -> bool {
        match &self.locks.nodes {
            Nodes::Single(node) => node.backend.batch_by_slot(),
            Nodes::Quorum(q) => q.backends.iter().any(|n| n.backend.batch_by_slot()),
        }
    }

    async fn renew(batch: &[Due<Self>]) -> Vec<Renewal> {
        // Every lock of a client lives on the client's nodes.
        let Some(first) = batch.first() else {
            return Vec::new();
        };
        let locks = first.item.locks.clone();
        match &locks.nodes {
            Nodes::Single(node) => renew_single(&node.backend, batch).await,
            Nodes::Quorum(quorum) => renew_quorum(quorum, batch).await,
        }
    }
}

/// A lease whose renewal could not be decided: retried sooner, unless it ran out meanwhile.
fn undecided(h: &Held) -> Renewal {
    if h.lease.is_lost() {
        tracing::debug!(name = %h.name, "the lease ran out while renewals failed");
        lost(h, LostReason::RenewFailed)
    } else {
        h.label.renewal(RenewalOutcome::Error);
        Renewal::Retry
    }
}

/// A renewal that found the lock lost.
fn lost(h: &Held, reason: LostReason) -> Renewal {
    h.label.renewal(RenewalOutcome::Lost);
    h.lost(reason);
    Renewal::Lost
}

/// A renewal that went through, if the lease had not run out before its
/// replies came back (then it is lost: see `LeaseState::renewed`).
fn renewed(h: &Held, valid_until: Instant, sent: Instant) -> Renewal {
    // Released (or dropped, or `release_all`) while the renewal was out:
    // the release gives the keys back, and must find them ours.
    let released = h.lease.marked_lost();
    #[cfg(feature = "seeded-defects")]
    if h.locks.seeded_revival() {
        h.lease.renewed_unchecked(valid_until);
        h.label.renewal(RenewalOutcome::Ok);
        return Renewal::Renewed { sent };
    }
    if !h.lease.renewed(valid_until) {
        if released {
            return Renewal::Lost;
        }
        tracing::debug!(name = %h.name, "the lease ran out before the renewal's reply");
        h.release_in_background();
        return lost(h, LostReason::RenewFailed);
    }
    h.label.renewal(RenewalOutcome::Ok);
    Renewal::Renewed { sent }
}

/// One batch on one Redis: one `extend_many.lua` call, or on a server with
/// a native compare-and-set one pipeline of `SET ... IFEQ` (see
/// [`ops::extend_native`]; the locks it refused go to the script).
async fn renew_single(backend: &Backend, batch: &[Due<Held>]) -> Vec<Renewal> {
    let start = Instant::now();
    let result = if !backend.batch_by_slot() && backend.native(Capability::CompareAndSet) {
        extend_natively(backend, batch).await
    } else {
        extend_by_script(backend, batch).await
    };
    match result {
        Ok(codes) if codes.len() == batch.len() => batch
            .iter()
            .zip(codes)
            .map(|(d, code)| {
                let h = &d.item;
                let code = match code {
                    Ok(code) => code,
                    Err(e) => {
                        tracing::debug!(name = %h.name, error = %e, "renewal failed; retrying sooner");
                        return undecided(h);
                    }
                };
                if code == 1 {
                    tracing::trace!(name = %h.name, "renewed");
                    renewed(h, start + d.ttl.saturating_sub(drift(d.ttl)), start)
                } else {
                    let outcome = if code == 0 {
                        Outcome::Expired
                    } else {
                        Outcome::NotHeld
                    };
                    tracing::debug!(name = %h.name, ?outcome, "renewal found the lock gone");
                    lost(h, LostReason::of(outcome))
                }
            })
            .collect(),
        other => {
            if let Err(e) = &other {
                tracing::debug!(error = %e, "batched renewal failed; retrying sooner");
            }
            batch.iter().map(|d| undecided(&d.item)).collect()
        }
    }
}

/// extend_many.lua's codes for `batch` (1 extended, 0 gone, -1 another's;
/// an error for a lock on which Redis failed alone).
async fn extend_by_script<'a>(
    backend: &Backend,
    batch: impl IntoIterator<Item = &'a Due<Held>> + Clone,
) -> Result<Vec<Result<i64>>> {
    let mut inv = EXTEND_MANY.prepare_invoke();
    for d in batch.clone() {
        inv.key(&d.item.keys.lock)
            .arg(d.item.token.as_str())
            .arg(millis(d.ttl));
    }
    let codes: Vec<Value> = backend.eval(&inv).await?;
    Ok(codes
        .into_iter()
        .zip(batch)
        .map(|(code, d)| code_of(code, &d.item.keys.lock))
        .collect())
}

/// The same codes natively; the locks the server refused it for go to the
/// script.
async fn extend_natively(backend: &Backend, batch: &[Due<Held>]) -> Result<Vec<Result<i64>>> {
    let locks: Vec<(&str, &crate::token::Token, std::time::Duration)> = batch
        .iter()
        .map(|d| (d.item.keys.lock.as_str(), &d.item.token, d.ttl))
        .collect();
    let codes = ops::extend_native(backend, &locks, backend.timeout()).await?;
    if codes.iter().all(Option::is_some) {
        return Ok(codes.into_iter().flatten().map(Ok).collect());
    }
    let refused = batch
        .iter()
        .zip(&codes)
        .filter(|(_, c)| c.is_none())
        .map(|(d, _)| d);
    let mut by_script = extend_by_script(backend, refused).await?.into_iter();
    Ok(codes
        .into_iter()
        .map(|c| match c {
            Some(code) => Ok(code),
            None => by_script
                .next()
                .unwrap_or_else(|| Err(Error::protocol("short extend_many reply"))),
        })
        .collect())
}

/// One batch under Redlock: one script per node, all nodes at once; each lock
/// is renewed when a majority confirmed it in time (as `Nodes::extend` decides).
async fn renew_quorum(quorum: &Quorum, batch: &[Due<Held>]) -> Vec<Renewal> {
    // A lease seen as over stays over: never take its keys again.
    let live: Vec<usize> = (0..batch.len())
        .filter(|&i| !batch[i].item.lease.is_lost())
        .collect();
    let mut verdicts = vec![Renewal::Lost; batch.len()];
    for (i, d) in batch.iter().enumerate() {
        if !live.contains(&i) {
            tracing::debug!(name = %d.item.name, "the lease ran out before the renewal");
            lost(&d.item, LostReason::RenewFailed);
        }
    }
    if live.is_empty() {
        return verdicts;
    }
    let start = Instant::now();
    let timeout = live
        .iter()
        .map(|&i| quorum.node_timeout(batch[i].ttl, batch[i].item.node_timeout))
        .min()
        .unwrap_or_default();
    let mut inv = EXTEND_OR_ACQUIRE_MANY.prepare_invoke();
    for &i in &live {
        let d = &batch[i];
        inv.key(&d.item.keys.lock)
            .arg(d.item.token.as_str())
            .arg(millis(d.ttl));
    }
    let replies: Vec<Result<Vec<Value>>> = join_all(
        quorum
            .backends
            .iter()
            .map(|n| n.backend.eval_within(timeout, &inv)),
    )
    .await;
    let now = Instant::now();
    for (pos, &i) in live.iter().enumerate() {
        let (h, ttl) = (&batch[i].item, batch[i].ttl);
        let per_node: Vec<Result<Outcome>> = replies
            .iter()
            .map(|node| match node {
                Ok(codes) => match codes.get(pos).cloned().map(|c| code_of(c, &h.keys.lock)) {
                    Some(Err(e)) => Err(e),
                    // Only a node that still held our token counts.
                    #[cfg(not(feature = "seeded-defects"))]
                    Some(Ok(code)) => ops::extend_or_acquire_code(code),
                    #[cfg(feature = "seeded-defects")]
                    Some(Ok(code)) => quorum.seeded_vote(ops::extend_or_acquire_code(code)),
                    None => Err(Error::protocol("short extend_or_acquire_many reply")),
                },
                Err(e) => Err(e.share()),
            })
            .collect();
        let valid_until = start + ttl.saturating_sub(drift(ttl));
        verdicts[i] = match quorum.verdict(&h.name, &per_node, now < valid_until) {
            Ok(Outcome::Done) => {
                tracing::trace!(name = %h.name, "renewed on a majority");
                renewed(h, valid_until, start)
            }
            Ok(outcome) => {
                tracing::debug!(name = %h.name, ?outcome, "renewal found no majority for the lock");
                // What the renewal repaired or extended on the way is not
                // ours to keep.
                quorum.release_in_background(h.keys.clone(), h.token.clone());
                lost(h, LostReason::of(outcome))
            }
            Err(e) => {
                tracing::debug!(name = %h.name, error = %e, "renewal failed; retrying sooner");
                undecided(h)
            }
        };
    }
    verdicts
}
