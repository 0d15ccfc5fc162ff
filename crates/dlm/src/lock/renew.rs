//! Batched watchdog renewals: a client holding thousands of locks with
//! watchdogs renews them with a few scripts per tick (one per batch of up to
//! 1000 locks, or per hash slot on a connection that may be a cluster; under
//! Redlock one such script per node, decided per lock by the majority), not
//! one call per lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use redis::Script;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::lock::nodes::{Nodes, Quorum};
use crate::lock::{Held, Outcome, drift};
use futures_util::future::join_all;

static EXTEND_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_many.lua")));
static EXTEND_OR_ACQUIRE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_or_acquire_many.lua")));

/// The most locks renewed by one script.
const BATCH: usize = 1000;

struct Entry {
    held: Weak<Held>,
    ttl: Duration,
    next: Instant,
}

/// The renewal service of one client.
pub(crate) struct Renewer {
    entries: Mutex<HashMap<u64, Entry>>,
    wake: Notify,
    running: AtomicBool,
    shutdown: CancellationToken,
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Renewer {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Renewer {
            entries: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            running: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        match self.entries.lock() {
            Ok(e) => e,
            Err(p) => p.into_inner(),
        }
    }

    /// Renew `held` every `ttl / 3` until its guard is released or dropped.
    pub(crate) fn add(self: &Arc<Self>, held: &Arc<Held>, ttl: Duration) {
        self.entries().insert(
            held.id,
            Entry {
                held: Arc::downgrade(held),
                ttl,
                next: Instant::now() + ttl / 3,
            },
        );
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(run(Arc::downgrade(self), self.shutdown.clone()));
        }
        self.wake.notify_one();
    }
}

async fn run(renewer: Weak<Renewer>, shutdown: CancellationToken) {
    loop {
        let Some(r) = renewer.upgrade() else { return };
        let now = Instant::now();
        let (due, earliest) = collect_due(&r, now);
        if due.is_empty() {
            let wait = earliest.unwrap_or(now + Duration::from_secs(1));
            let notified = r.wake.notified();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = notified => {}
                _ = tokio::time::sleep_until(wait) => {}
            }
            continue;
        }
        drop(r);
        // Every lock of a client lives on the client's nodes.
        let Some(client) = due.first().map(|d| d.1.client.clone()) else {
            continue;
        };
        match &client.nodes {
            Nodes::Single(backend) => {
                for group in group(due, backend.batch_by_slot()) {
                    renew_batch(&renewer, backend, group).await;
                }
            }
            Nodes::Quorum(quorum) => {
                let by_slot = quorum.backends.iter().any(Backend::batch_by_slot);
                for group in group(due, by_slot) {
                    renew_quorum_batch(&renewer, quorum, group).await;
                }
            }
        }
    }
}

type Due = (u64, Arc<Held>, Duration);

/// The entries to renew now (due within a window, so that locks taken at
/// different moments share scripts), and the next due time after them.
fn collect_due(r: &Renewer, now: Instant) -> (Vec<Due>, Option<Instant>) {
    let mut entries = r.entries();
    entries.retain(|_, e| {
        e.held
            .upgrade()
            .is_some_and(|h| !h.stop.is_cancelled() && !h.lease.lost.is_cancelled())
    });
    let earliest = entries.values().map(|e| e.next).min();
    if earliest.is_none_or(|t| t > now) {
        // Nothing is due yet (a new lock woke us): renew nothing early now.
        return (Vec::new(), earliest);
    }
    let mut due = Vec::new();
    let mut later: Option<Instant> = None;
    for (id, e) in entries.iter() {
        // Renew up to ttl/6 early, so that locks taken at different moments
        // fall into the same few batches per period (renewals stay between
        // ttl/6 and ttl/3 apart).
        if e.next <= now + e.ttl / 6 {
            if let Some(h) = e.held.upgrade() {
                due.push((*id, h, e.ttl));
            }
        } else {
            later = Some(later.map_or(e.next, |x| x.min(e.next)));
        }
    }
    let earliest = later;
    (due, earliest)
}

/// Batches of at most [`BATCH`]; by hash slot when the connection may be a cluster.
fn group(due: Vec<Due>, by_slot: bool) -> Vec<Vec<Due>> {
    if !by_slot {
        let mut out = Vec::new();
        let mut it = due.into_iter().peekable();
        while it.peek().is_some() {
            out.push(it.by_ref().take(BATCH).collect());
        }
        return out;
    }
    let mut slots: HashMap<u16, Vec<Due>> = HashMap::new();
    for d in due {
        slots
            .entry(crate::keys::slot(&d.1.keys.lock))
            .or_default()
            .push(d);
    }
    slots
        .into_values()
        .flat_map(|v| {
            let mut out = Vec::new();
            let mut it = v.into_iter().peekable();
            while it.peek().is_some() {
                out.push(it.by_ref().take(BATCH).collect::<Vec<_>>());
            }
            out
        })
        .collect()
}

async fn renew_batch(renewer: &Weak<Renewer>, backend: &Backend, batch: Vec<Due>) {
    let start = Instant::now();
    let mut inv = EXTEND_MANY.prepare_invoke();
    for (_, h, ttl) in &batch {
        inv.key(&h.keys.lock)
            .arg(h.token.as_str())
            .arg(crate::lock::ops::millis(*ttl));
    }
    let result: crate::Result<Vec<i64>> = backend.eval(&inv).await;
    let Some(r) = renewer.upgrade() else { return };
    let mut entries = r.entries();
    match result {
        Ok(codes) if codes.len() == batch.len() => {
            for ((id, h, ttl), code) in batch.iter().zip(codes) {
                if code == 1 {
                    h.lease.renewed(start + ttl.saturating_sub(drift(*ttl)));
                    if let Some(e) = entries.get_mut(id) {
                        e.next = start + *ttl / 3;
                    }
                    tracing::trace!(name = %h.name, "renewed");
                } else {
                    let outcome = if code == 0 {
                        Outcome::Expired
                    } else {
                        Outcome::NotHeld
                    };
                    tracing::warn!(name = %h.name, ?outcome, "lock lost: renewal found it gone");
                    h.lease.mark_lost();
                    entries.remove(id);
                }
            }
        }
        other => {
            if let Err(e) = &other {
                tracing::debug!(error = %e, "batched renewal failed; retrying sooner");
            }
            for (id, h, ttl) in &batch {
                if h.lease.is_lost() {
                    tracing::warn!(name = %h.name, "lock lost: lease ran out while renewals failed");
                    entries.remove(id);
                } else if let Some(e) = entries.get_mut(id) {
                    e.next = Instant::now() + (*ttl / 12).max(Duration::from_millis(1));
                }
            }
        }
    }
}

/// One batch under Redlock: one script per node, all nodes at once; each lock
/// is renewed when a majority confirmed it in time (as `Nodes::extend` decides).
async fn renew_quorum_batch(renewer: &Weak<Renewer>, quorum: &Quorum, batch: Vec<Due>) {
    // A lease seen as over stays over: never take its keys again.
    let (batch, over): (Vec<Due>, Vec<Due>) = batch.into_iter().partition(|d| !d.1.lease.is_lost());
    if !over.is_empty()
        && let Some(r) = renewer.upgrade()
    {
        let mut entries = r.entries();
        for (id, h, _) in &over {
            tracing::warn!(name = %h.name, "lock lost: its lease ran out before the renewal");
            entries.remove(id);
        }
    }
    if batch.is_empty() {
        return;
    }
    let start = Instant::now();
    let shortest = batch.iter().map(|d| d.2).min().unwrap_or_default();
    let timeout = quorum.node_timeout(shortest);
    let mut inv = EXTEND_OR_ACQUIRE_MANY.prepare_invoke();
    for (_, h, ttl) in &batch {
        inv.key(&h.keys.lock)
            .arg(h.token.as_str())
            .arg(crate::lock::ops::millis(*ttl));
    }
    let replies: Vec<crate::Result<Vec<i64>>> =
        join_all(quorum.backends.iter().map(|b| b.eval_within(timeout, &inv))).await;
    let Some(r) = renewer.upgrade() else { return };
    let mut entries = r.entries();
    let now = Instant::now();
    for (i, (id, h, ttl)) in batch.iter().enumerate() {
        let per_node: Vec<crate::Result<Outcome>> = replies
            .iter()
            .map(|node| match node {
                Ok(codes) => match codes.get(i) {
                    Some(1 | 2) => Ok(Outcome::Done),
                    Some(-1) => Ok(Outcome::NotHeld),
                    _ => Err(crate::Error::protocol("short extend_or_acquire_many reply")),
                },
                Err(e) => Err(e.share()),
            })
            .collect();
        let valid_until = start + ttl.saturating_sub(drift(*ttl));
        match quorum.verdict(&h.name, &per_node, now < valid_until) {
            Ok(Outcome::Done) => {
                h.lease.renewed(valid_until);
                if let Some(e) = entries.get_mut(id) {
                    e.next = start + *ttl / 3;
                }
                tracing::trace!(name = %h.name, "renewed on a majority");
            }
            Ok(outcome) => {
                tracing::warn!(name = %h.name, ?outcome, "lock lost: renewal found no majority for it");
                h.lease.mark_lost();
                entries.remove(id);
            }
            Err(e) => {
                if h.lease.is_lost() {
                    tracing::warn!(name = %h.name, error = %e, "lock lost: lease ran out while renewals failed");
                    entries.remove(id);
                } else if let Some(entry) = entries.get_mut(id) {
                    tracing::debug!(name = %h.name, error = %e, "renewal failed; retrying sooner");
                    entry.next = Instant::now() + (*ttl / 12).max(Duration::from_millis(1));
                }
            }
        }
    }
}
