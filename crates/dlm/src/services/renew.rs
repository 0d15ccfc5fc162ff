//! The watchdog: renews many leases with a few scripts per tick, not one call
//! per lease.
//!
//! A lease is renewed every `ttl / 3`, and up to `ttl / 6` early, so that
//! leases taken at different moments fall into the same few batches per
//! period (renewals stay between ttl/6 and ttl/3 apart). Due leases are
//! grouped in batches of at most [`BATCH`], by hash slot when the connection
//! may be a cluster; the primitive that owns the leases renews a batch with
//! one script (per node) through [`Renewable::renew`] and says, per lease,
//! whether it was renewed, is lost, or should be tried again sooner.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The most leases renewed by one script.
pub(crate) const BATCH: usize = 1000;

/// A lease due for renewal.
pub(crate) struct Due<L> {
    /// Its id in the renewer.
    pub(crate) id: u64,
    /// The primitive's state of the lease.
    pub(crate) item: Arc<L>,
    /// The TTL to renew it to.
    pub(crate) ttl: Duration,
}

/// What one renewal of one lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed by a request sent at `sent`: next renewal at `sent + ttl / 3`.
    Renewed { sent: Instant },
    /// Lost: renew it no more.
    Lost,
    /// Not decided (Redis unreachable): try again soon (`ttl / 12`).
    Retry,
}

/// A lease the watchdog can renew: implemented by each primitive for its own
/// held state (a lock today; a permit or a read share later).
pub(crate) trait Renewable: Send + Sync + Sized + 'static {
    /// The key whose hash slot the lease lives in (for grouping).
    fn key(&self) -> &str;
    /// Still to be renewed: neither released nor known lost.
    fn active(&self) -> bool;
    /// Whether batches must be grouped by hash slot (a possible cluster).
    fn by_slot(&self) -> bool;
    /// Renew a batch (all in one slot when [`Renewable::by_slot`]); one
    /// verdict per entry, in order.
    fn renew(batch: &[Due<Self>]) -> impl Future<Output = Vec<Renewal>> + Send;
}

struct Entry<L> {
    item: Weak<L>,
    ttl: Duration,
    next: Instant,
}

/// The leases, and when the renewal loop sleeps until.
struct State<L> {
    map: HashMap<u64, Entry<L>>,
    /// `Some(t)`: the loop sleeps until `t` (a lease due earlier must wake
    /// it); `None`: it is renewing, and looks at every lease again after.
    wake_at: Option<Instant>,
}

/// The renewal service of one client for leases of type `L`.
pub(crate) struct Renewer<L> {
    entries: Mutex<State<L>>,
    wake: Notify,
    running: AtomicBool,
    shutdown: CancellationToken,
}

impl<L> std::fmt::Debug for Renewer<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewer").finish_non_exhaustive()
    }
}

impl<L> Drop for Renewer<L> {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl<L: Renewable> Renewer<L> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Renewer {
            entries: Mutex::new(State {
                map: HashMap::new(),
                wake_at: None,
            }),
            wake: Notify::new(),
            running: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, State<L>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Renew `item` every `ttl / 3` until it is no longer
    /// [`Renewable::active`] or dropped.
    ///
    /// The loop is woken only when this lease is due before the loop's
    /// next wake-up: waking it for every new lease made it scan every
    /// lease each time (an acquire cost O(leases held)).
    pub(crate) fn add(self: &Arc<Self>, id: u64, item: &Arc<L>, ttl: Duration) {
        let next = Instant::now() + ttl / 3;
        let wake = {
            let mut st = self.entries();
            st.map.insert(
                id,
                Entry {
                    item: Arc::downgrade(item),
                    ttl,
                    next,
                },
            );
            st.wake_at.is_some_and(|t| next < t)
        };
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(run(Arc::downgrade(self), self.shutdown.clone()));
        }
        if wake {
            self.wake.notify_one();
        }
    }

    /// The entries to renew now (due within a window, so that leases taken
    /// at different moments share scripts), and the next due time after them.
    /// With nothing due, it records when the loop will sleep until (the
    /// earliest lease, or `idle` from now), under the same lock as `add`.
    fn collect_due(&self, now: Instant, idle: Duration) -> (Vec<Due<L>>, Option<Instant>) {
        let mut st = self.entries();
        st.map
            .retain(|_, e| e.item.upgrade().is_some_and(|h| h.active()));
        let earliest = st.map.values().map(|e| e.next).min();
        if earliest.is_none_or(|t| t > now) {
            // Nothing is due yet (a new lease woke us): renew nothing early now.
            st.wake_at = Some(earliest.unwrap_or(now + idle));
            return (Vec::new(), earliest);
        }
        st.wake_at = None;
        let entries = &st.map;
        let mut due = Vec::new();
        let mut later: Option<Instant> = None;
        for (id, e) in entries.iter() {
            if e.next <= now + e.ttl / 6 {
                if let Some(item) = e.item.upgrade() {
                    due.push(Due {
                        id: *id,
                        item,
                        ttl: e.ttl,
                    });
                }
            } else {
                later = Some(later.map_or(e.next, |x| x.min(e.next)));
            }
        }
        (due, later)
    }

    /// Record a batch's verdicts.
    fn apply(&self, batch: &[Due<L>], verdicts: Vec<Renewal>) {
        let mut st = self.entries();
        let entries = &mut st.map;
        let now = Instant::now();
        let mut verdicts = verdicts.into_iter();
        for d in batch {
            match verdicts.next().unwrap_or(Renewal::Retry) {
                Renewal::Renewed { sent } => {
                    if let Some(e) = entries.get_mut(&d.id) {
                        e.next = sent + d.ttl / 3;
                    }
                }
                Renewal::Lost => {
                    entries.remove(&d.id);
                }
                Renewal::Retry => {
                    if let Some(e) = entries.get_mut(&d.id) {
                        e.next = now + (d.ttl / 12).max(Duration::from_millis(1));
                    }
                }
            }
        }
    }
}

/// How long the loop sleeps with no lease to renew.
const IDLE: Duration = Duration::from_secs(1);

async fn run<L: Renewable>(renewer: Weak<Renewer<L>>, shutdown: CancellationToken) {
    loop {
        let Some(r) = renewer.upgrade() else { return };
        let now = Instant::now();
        let (due, earliest) = r.collect_due(now, IDLE);
        if due.is_empty() {
            let wait = earliest.unwrap_or(now + IDLE);
            let notified = r.wake.notified();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = notified => {}
                _ = tokio::time::sleep_until(wait) => {}
            }
            continue;
        }
        drop(r);
        let by_slot = due.first().is_some_and(|d| d.item.by_slot());
        for batch in group(due, by_slot) {
            let verdicts = L::renew(&batch).await;
            let Some(r) = renewer.upgrade() else { return };
            r.apply(&batch, verdicts);
        }
    }
}

/// Batches of at most [`BATCH`]; by hash slot when the connection may be a cluster.
fn group<L: Renewable>(due: Vec<Due<L>>, by_slot: bool) -> Vec<Vec<Due<L>>> {
    fn chunks<T>(v: Vec<T>) -> Vec<Vec<T>> {
        let mut out = Vec::new();
        let mut it = v.into_iter().peekable();
        while it.peek().is_some() {
            out.push(it.by_ref().take(BATCH).collect());
        }
        out
    }
    if !by_slot {
        return chunks(due);
    }
    let mut slots: HashMap<u16, Vec<Due<L>>> = HashMap::new();
    for d in due {
        slots
            .entry(crate::keys::slot(d.item.key()))
            .or_default()
            .push(d);
    }
    slots.into_values().flat_map(chunks).collect()
}
