//! The locks of one client: where they live (one Redis, or N masters for
//! Redlock) and the services they share (registry, renewer, wake-ups,
//! background work). Every [`crate::Lock`] and every held lock points here,
//! never at the client.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::backend::Backend;
use crate::keys::{FenceLayout, LockKeys, lock_keys_in};
use crate::lock::Outcome;
use crate::lock::nodes::Nodes;
use crate::metrics::{LockLabel, LockNames, LostReason};
use crate::services::lease::LeaseState;
use crate::services::registry::Registry;
use crate::services::renew::Renewer;
use crate::services::wakeups::Wakeups;
use crate::token::{Fence, Token};

/// What [`crate::Client::release_all`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseAll {
    /// Locks that were still ours and are released now.
    pub released: usize,
    /// Locks that had expired or were held by another owner already.
    pub already_lost: usize,
    /// Locks whose release failed (Redis unreachable); their TTL frees them.
    pub failed: usize,
}

/// The lock state of one client.
pub(crate) struct Locks {
    pub(crate) nodes: Nodes,
    pub(crate) prefix: String,
    /// Where the fencing counters live on these nodes (a [`Layout`] code):
    /// a property of the deployment, never of how the client was built.
    fence_layout: AtomicU8,
    /// The layout was learnt (and an older layout's counters raised past)
    /// before this client's first lock operation on one Redis.
    prepared: tokio::sync::OnceCell<()>,
    pub(crate) wakeups: Option<Arc<Wakeups>>,
    /// Batched watchdog renewals.
    pub(crate) renewer: Arc<Renewer<Held>>,
    /// The locks this client holds (for `release_all`).
    pub(crate) registry: Registry<Held>,
    /// Work left running in the background (releases of dropped guards,
    /// Redlock requests still on their way after an early decision).
    pub(crate) background: TaskTracker,
    /// Lock names kept as the `lock` label of lock metrics (opt-in).
    pub(crate) lock_names: Option<LockNames>,
    /// The defect its client was built with (dlm's checker tests only).
    #[cfg(feature = "seeded-defects")]
    seeded: std::sync::OnceLock<crate::seeded::SeededDefect>,
}

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locks")
            .field("prefix", &self.prefix)
            .field("nodes", &self.nodes.len())
            .field("wakeups", &self.wakeups.is_some())
            .finish_non_exhaustive()
    }
}

impl Locks {
    pub(crate) fn new(
        nodes: Nodes,
        prefix: String,
        wakeups: Option<Arc<Wakeups>>,
        lock_names: Option<LockNames>,
    ) -> Arc<Self> {
        let background = match &nodes {
            Nodes::Quorum(q) => q.background.clone(),
            Nodes::Single(n) => n.in_flight.background.clone(),
        };
        // A lock and its counter share a slot on a Redis Cluster; one Redis
        // (standalone, Sentinel, each Redlock master) shares one counter. A
        // connection the application passed in could be either: the server
        // tells, before the first lock operation (`prepare`).
        let fence_layout = match &nodes {
            Nodes::Single(node) => match node.backend.known_cluster() {
                Some(true) => Layout::PER_SLOT,
                Some(false) => Layout::SHARED,
                None => Layout::UNKNOWN,
            },
            // Redlock hands out no fences; its counters only need a slot.
            Nodes::Quorum(q) if q.backends.iter().any(|n| n.backend.batch_by_slot()) => {
                Layout::PER_SLOT
            }
            Nodes::Quorum(_) => Layout::SHARED,
        };
        Arc::new(Locks {
            nodes,
            prefix,
            fence_layout: AtomicU8::new(fence_layout),
            prepared: tokio::sync::OnceCell::new(),
            wakeups,
            renewer: Renewer::new(),
            registry: Registry::default(),
            background,
            lock_names,
            #[cfg(feature = "seeded-defects")]
            seeded: std::sync::OnceLock::new(),
        })
    }

    /// Put `defect` back in these locks (see `crate::seeded`; dlm's
    /// checker tests only), before the client is handed out.
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn set_seeded(&self, defect: Option<crate::seeded::SeededDefect>) {
        if let Some(d) = defect {
            let _ = self.seeded.set(d);
        }
    }

    /// Whether the client was built with `defect`.
    #[cfg(feature = "seeded-defects")]
    fn seeded_is(&self, defect: crate::seeded::SeededDefect) -> bool {
        self.seeded.get() == Some(&defect)
    }

    /// Seeded [`crate::seeded::SeededDefect::RedlockRevival`]: extensions
    /// and renewals move the lease's end without reading the clock.
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn seeded_revival(&self) -> bool {
        self.seeded_is(crate::seeded::SeededDefect::RedlockRevival)
    }

    /// The keys of lock `name` (`raw`: the key is exactly `name`) on these
    /// nodes. Their fencing counter is right once [`Locks::prepare`] ran
    /// (before that, on a connection the application passed in, it is the
    /// one-Redis counter: [`Locks::fence_layout`] tells).
    pub(crate) fn lock_keys(&self, name: &str, raw: bool) -> crate::error::Result<LockKeys> {
        let layout = match self.fence_layout.load(Ordering::Acquire) {
            Layout::PER_SLOT => FenceLayout::PerSlot,
            _ => FenceLayout::Shared,
        };
        lock_keys_in(&self.prefix, name, raw, layout)
    }

    /// Where the fencing counters live, `None` while unknown (a client on a
    /// connection the application passed in, before its first lock operation).
    pub(crate) fn fence_layout(&self) -> Option<FenceLayout> {
        match self.fence_layout.load(Ordering::Acquire) {
            Layout::PER_SLOT => Some(FenceLayout::PerSlot),
            Layout::SHARED => Some(FenceLayout::Shared),
            _ => None,
        }
    }

    /// The deadline of one call to these nodes.
    pub(crate) fn call_timeout(&self) -> std::time::Duration {
        match &self.nodes {
            Nodes::Single(node) => node.backend.timeout(),
            Nodes::Quorum(q) => q
                .backends
                .first()
                .map_or(std::time::Duration::from_secs(1), |n| n.backend.timeout()),
        }
    }

    /// Whether [`Locks::prepare`] has nothing left to do.
    pub(crate) fn is_prepared(&self) -> bool {
        self.prepared.initialized() || !matches!(self.nodes, Nodes::Single(_))
    }

    /// Before the first lock operation on one Redis: learn where the
    /// fencing counters live (one shared counter, or per hash slot on a
    /// Redis Cluster) from the server when the client cannot know, and raise
    /// the shared counter past what an older dlm's per-slot counters handed
    /// out (`fence_layout.lua`). One round trip per client, once; a failure
    /// (Redis unreachable) is tried again by the next operation. So one
    /// lock's fences grow in grant order whatever mix of clients (URL,
    /// `connection()`, Sentinel, any builder option) works on a deployment.
    pub(crate) async fn prepare(&self) -> crate::error::Result<()> {
        if self.is_prepared() {
            return Ok(());
        }
        let Nodes::Single(node) = &self.nodes else {
            return Ok(());
        };
        self.prepared
            .get_or_try_init(|| async {
                // Seeded FenceInversion (dlm's checker tests only): a
                // `connection()` client takes the per-slot counters, as
                // before issue 30's fix, without asking the server.
                #[cfg(feature = "seeded-defects")]
                if self.seeded_is(crate::seeded::SeededDefect::FenceInversion)
                    && node.backend.known_cluster().is_none()
                {
                    self.fence_layout.store(Layout::PER_SLOT, Ordering::Release);
                    return Ok(());
                }
                let layout = crate::lock::ops::fence_layout(
                    &node.backend,
                    &self.prefix,
                    node.backend.known_cluster(),
                )
                .await?;
                let code = match layout {
                    FenceLayout::PerSlot => Layout::PER_SLOT,
                    FenceLayout::Shared => Layout::SHARED,
                };
                self.fence_layout.store(code, Ordering::Release);
                Ok::<(), crate::error::Error>(())
            })
            .await
            .map(|_| ())
    }

    /// The one Redis, when there is only one (not Redlock).
    pub(crate) fn single_backend(&self) -> Option<&Backend> {
        self.nodes.single()
    }

    /// Release every lock still held, in parallel; their guards report lost.
    pub(crate) async fn release_all(&self) -> ReleaseAll {
        let entries = self.registry.drain();
        let nodes = &self.nodes;
        let results = futures_util::future::join_all(entries.iter().map(|e| {
            e.stop.store(true, Ordering::Release);
            e.lease.mark_lost();
            e.ended();
            nodes.release(&e.name, &e.keys, &e.token)
        }))
        .await;
        let mut report = ReleaseAll::default();
        for r in results {
            match r {
                Ok(r) if r.outcome == Outcome::Done => report.released += 1,
                Ok(_) => report.already_lost += 1,
                Err(_) => report.failed += 1,
            }
        }
        report
    }
}

/// The codes of `Locks::fence_layout`.
struct Layout;

impl Layout {
    const UNKNOWN: u8 = 0;
    const SHARED: u8 = 1;
    const PER_SLOT: u8 = 2;
}

/// Shared between a guard and its watchdog.
pub(crate) struct Held {
    /// The client's lock state: nodes, registry, renewer, wake-ups.
    pub(crate) locks: Arc<Locks>,
    pub(crate) id: u64,
    /// The `lock` label of its metrics.
    pub(crate) label: LockLabel,
    /// When it was granted (`dlm_lock_hold_seconds`).
    pub(crate) granted: Instant,
    /// Released or found lost: the hold was recorded.
    pub(crate) ended: AtomicBool,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: Token,
    pub(crate) fence: Option<Fence>,
    pub(crate) ttl: Duration,
    /// The acquisition's own per-node timeout (Redlock), if it set one.
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) lease: Arc<LeaseState>,
    /// Released or detached: the watchdog stops renewing it (a flag, not a
    /// `CancellationToken`: nothing waits on it, and it saves an allocation
    /// per acquisition).
    pub(crate) stop: AtomicBool,
}

impl Held {
    /// The hold is over (released, or given up): record how long it lasted, once.
    pub(crate) fn ended(&self) -> bool {
        if self.ended.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.label.hold(self.granted.elapsed());
        true
    }

    /// A token-checked release on every node, in the background: for a
    /// lease found lost after an extension or renewal that did land (it ran
    /// out on the local clock before the replies came back), so that the
    /// lock is not held for nobody until the new TTL.
    pub(crate) fn release_in_background(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let locks = self.locks.clone();
        let (name, keys, token) = (self.name.clone(), self.keys.clone(), self.token.clone());
        rt.spawn(self.locks.background.clone().track_future(async move {
            let _ = locks.nodes.release(&name, &keys, &token).await;
        }));
    }

    /// The lock was found lost while held: count it (once) and end the hold.
    pub(crate) fn lost(&self, reason: LostReason) {
        self.lease.mark_lost();
        if self.ended() {
            self.label.lost(reason);
            tracing::warn!(name = %self.name, reason = reason.as_str(), "lock lost");
        }
    }
}
