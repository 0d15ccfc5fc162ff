//! Wake-ups on release over Redis pub/sub, with a jittered
//! timed fallback so that a lost message costs at most one retry interval.
//!
//! One pub/sub connection per client, opened on the first wait.
//! A channel is subscribed while at least one local task waits on that lock;
//! each release message wakes exactly one local waiter (FIFO), which then
//! tries again. If the subscriber connection drops, every waiter is woken and
//! the next wait reconnects.
//!
//! Waiters of one Redis also queue a [`Baton`]: a releasing guard of the same
//! client hands the lock to the first one directly (`release_to.lua`), and
//! after [`MAX_HANDOFFS`] hand-overs in a row releases it for real once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::Deployment;
use crate::token::{Fence, Token};

struct Channel {
    notify: Arc<Notify>,
    waiters: usize,
    /// Waiting acquisitions a releasing task may hand the lock to, in FIFO order.
    batons: VecDeque<Arc<Baton>>,
    /// Hand-overs since the lock was last really released.
    handoffs: u32,
}

/// After this many hand-overs in a row a lock is really released (and
/// published), so that waiters of other clients get their chance.
const MAX_HANDOFFS: u32 = 16;

/// A waiting acquisition that a releasing task of the same client may hand
/// the lock to directly (see `release_to.lua`).
pub(crate) struct Baton {
    token: Token,
    ttl: Duration,
    /// How much the acquisition wants: 1 for a lock, its permits for a semaphore.
    units: u32,
    /// Set by the releaser: the fence and when the hand-over request started.
    granted: Mutex<Option<(Fence, Instant)>>,
    notify: Notify,
    /// The acquisition holds the lock by this baton's token (see
    /// [`Baton::keep`]).
    kept: AtomicBool,
}

impl Baton {
    pub(crate) fn new(token: Token, ttl: Duration) -> Arc<Self> {
        Self::for_units(token, ttl, 1)
    }

    /// A baton of an acquisition that wants `units` (a semaphore's permits).
    pub(crate) fn for_units(token: Token, ttl: Duration, units: u32) -> Arc<Self> {
        Arc::new(Baton {
            token,
            ttl,
            units,
            granted: Mutex::new(None),
            notify: Notify::new(),
            kept: AtomicBool::new(false),
        })
    }

    pub(crate) fn token(&self) -> &Token {
        &self.token
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn units(&self) -> u32 {
        self.units
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(Fence, Instant)>> {
        match self.granted.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The lock was handed to this acquisition.
    pub(crate) fn grant(&self, fence: Fence, started: Instant) {
        *self.slot() = Some((fence, started));
        self.notify.notify_one();
    }

    /// Wake the acquisition without a grant: a hand-over to it failed, and
    /// it is out of the queue (it goes on trying by itself).
    pub(crate) fn notify_void(&self) {
        self.notify.notify_one();
    }

    /// The acquisition got the lock by this baton's token (a hand-over, or
    /// on one Redis its own attempt, which carries that token too): a
    /// releaser that finds the baton dropped must not give that token back.
    /// Called before the acquisition lets go of the baton.
    pub(crate) fn keep(&self) {
        self.kept.store(true, Ordering::Release);
    }

    /// Whether [`Baton::keep`] was called.
    pub(crate) fn kept(&self) -> bool {
        self.kept.load(Ordering::Acquire)
    }

    /// The hand-over, if one happened.
    pub(crate) fn take_grant(&self) -> Option<(Fence, Instant)> {
        self.slot().take()
    }

    /// Completes after a hand-over (also one that happened before the call).
    pub(crate) async fn granted(&self) {
        self.notify.notified().await;
    }
}

/// A baton in its channel's queue; leaves the queue on drop.
pub(crate) struct Enlisted {
    wakeups: Arc<Wakeups>,
    channel: String,
    baton: Arc<Baton>,
}

impl Drop for Enlisted {
    fn drop(&mut self) {
        if let Some(ch) = self.wakeups.channels().get_mut(&self.channel) {
            ch.batons.retain(|b| !Arc::ptr_eq(b, &self.baton));
        }
    }
}

struct Subscriber {
    sink: PubSubSink,
    subscribed: HashSet<String>,
    alive: Arc<AtomicBool>,
}

/// The wake-up service of one client.
pub(crate) struct Wakeups {
    deployment: Arc<Deployment>,
    timeout: Duration,
    channels: Mutex<HashMap<String, Channel>>,
    subscriber: tokio::sync::Mutex<Option<Subscriber>>,
    shutdown: CancellationToken,
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A registered waiter on one channel; unregisters on drop.
pub(crate) struct Waiter {
    wakeups: Arc<Wakeups>,
    channel: String,
    notify: Arc<Notify>,
}

impl Waiter {
    pub(crate) fn notify(&self) -> Arc<Notify> {
        self.notify.clone()
    }

    /// Make sure the channel is subscribed; false when that failed (the
    /// caller then relies on its timed fallback alone).
    pub(crate) async fn ensure_subscribed(&self) -> bool {
        self.wakeups.ensure_subscribed(&self.channel).await
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let last = {
            let mut channels = match self.wakeups.channels.lock() {
                Ok(c) => c,
                Err(poisoned) => poisoned.into_inner(),
            };
            match channels.get_mut(&self.channel) {
                Some(ch) if ch.waiters > 1 => {
                    ch.waiters -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&self.channel);
                    true
                }
                None => false,
            }
        };
        if last && let Ok(rt) = tokio::runtime::Handle::try_current() {
            let wakeups = Arc::downgrade(&self.wakeups);
            let channel = std::mem::take(&mut self.channel);
            rt.spawn(async move {
                if let Some(w) = wakeups.upgrade() {
                    w.unsubscribe_if_unused(channel).await;
                }
            });
        }
    }
}

impl Wakeups {
    pub(crate) fn new(deployment: Arc<Deployment>, timeout: Duration) -> Arc<Self> {
        Arc::new(Wakeups {
            deployment,
            timeout,
            channels: Mutex::new(HashMap::new()),
            subscriber: tokio::sync::Mutex::new(None),
            shutdown: CancellationToken::new(),
        })
    }

    fn channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        match self.channels.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Register interest in `channel` (a lock's release channel).
    pub(crate) fn register(self: &Arc<Self>, channel: &str) -> Waiter {
        let notify = {
            let mut channels = self.channels();
            let entry = channels
                .entry(channel.to_string())
                .or_insert_with(|| Channel {
                    notify: Arc::new(Notify::new()),
                    waiters: 0,
                    batons: VecDeque::new(),
                    handoffs: 0,
                });
            entry.waiters += 1;
            entry.notify.clone()
        };
        Waiter {
            wakeups: self.clone(),
            channel: channel.to_string(),
            notify,
        }
    }

    /// Queue `baton` for a hand-over on `channel` (registered by a [`Waiter`]).
    pub(crate) fn enlist(self: &Arc<Self>, channel: &str, baton: &Arc<Baton>) -> Enlisted {
        if let Some(ch) = self.channels().get_mut(channel) {
            ch.batons.push_back(baton.clone());
        }
        Enlisted {
            wakeups: self.clone(),
            channel: channel.to_string(),
            baton: baton.clone(),
        }
    }

    /// The first waiting acquisition to hand the lock to, unless the lock was
    /// handed over [`MAX_HANDOFFS`] times in a row (then: none, this once).
    pub(crate) fn next_baton(&self, channel: &str) -> Option<Arc<Baton>> {
        let mut channels = self.channels();
        let ch = channels.get_mut(channel)?;
        if ch.handoffs >= MAX_HANDOFFS {
            ch.handoffs = 0;
            return None;
        }
        ch.batons.front().cloned()
    }

    /// Like [`Wakeups::next_baton`], but take the baton out of the queue at
    /// once, so that concurrent releasers (a semaphore's holders) never hand
    /// to the same waiter twice; give it back with [`Wakeups::unclaim`] if
    /// the hand-over did not happen, or count it with [`Wakeups::handed`].
    pub(crate) fn claim_baton(&self, channel: &str) -> Option<Arc<Baton>> {
        let mut channels = self.channels();
        let ch = channels.get_mut(channel)?;
        if ch.handoffs >= MAX_HANDOFFS {
            ch.handoffs = 0;
            return None;
        }
        ch.batons.pop_front()
    }

    /// A claimed baton whose hand-over did not happen: first in line again
    /// (unless its acquisition gave up meanwhile).
    pub(crate) fn unclaim(&self, channel: &str, baton: Arc<Baton>) {
        if Arc::strong_count(&baton) > 1
            && let Some(ch) = self.channels().get_mut(channel)
        {
            ch.batons.push_front(baton);
        }
    }

    /// `baton` got the lock: out of the queue, and count the hand-over.
    pub(crate) fn handed(&self, channel: &str, baton: &Arc<Baton>) {
        if let Some(ch) = self.channels().get_mut(channel) {
            ch.batons.retain(|b| !Arc::ptr_eq(b, baton));
            ch.handoffs += 1;
        }
    }

    /// How many local tasks wait on `channel` now.
    pub(crate) fn waiting(&self, channel: &str) -> usize {
        self.channels().get(channel).map_or(0, |c| c.waiters)
    }

    async fn ensure_subscribed(self: &Arc<Self>, channel: &str) -> bool {
        let mut guard = self.subscriber.lock().await;
        let stale = match guard.as_ref() {
            Some(s) => !s.alive.load(Ordering::Acquire),
            None => true,
        };
        if stale {
            *guard = None;
            match tokio::time::timeout(self.timeout, self.deployment.pubsub()).await {
                Ok(Ok(pubsub)) => {
                    let (sink, stream) = pubsub.split();
                    let alive = Arc::new(AtomicBool::new(true));
                    tokio::spawn(dispatch(
                        Arc::downgrade(self),
                        stream,
                        alive.clone(),
                        self.shutdown.clone(),
                    ));
                    *guard = Some(Subscriber {
                        sink,
                        subscribed: HashSet::new(),
                        alive,
                    });
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "wake-up subscriber could not connect; polling");
                    return false;
                }
                Err(_) => {
                    tracing::debug!("wake-up subscriber connect timed out; polling");
                    return false;
                }
            }
        }
        let Some(sub) = guard.as_mut() else {
            return false;
        };
        if sub.subscribed.contains(channel) {
            return true;
        }
        match tokio::time::timeout(self.timeout, sub.sink.subscribe(channel)).await {
            Ok(Ok(())) => {
                sub.subscribed.insert(channel.to_string());
                true
            }
            _ => {
                tracing::debug!(channel, "subscribe failed; polling");
                false
            }
        }
    }

    async fn unsubscribe_if_unused(&self, channel: String) {
        let mut guard = self.subscriber.lock().await;
        if self.channels().contains_key(&channel) {
            return;
        }
        if let Some(sub) = guard.as_mut()
            && sub.subscribed.remove(&channel)
        {
            let _ = tokio::time::timeout(self.timeout, sub.sink.unsubscribe(&channel)).await;
        }
    }

    fn wake_one(&self, channel: &str) {
        self.wake_local(channel);
    }

    /// Wake one local waiter of `channel` without a message from Redis (a
    /// releasing task of this client knows whom its release lets in); false
    /// when nobody of this client waits on it.
    pub(crate) fn wake_local(&self, channel: &str) -> bool {
        match self.channels().get(channel) {
            Some(ch) => {
                ch.notify.notify_one();
                true
            }
            None => false,
        }
    }

    fn wake_all(&self) {
        for ch in self.channels().values() {
            ch.notify.notify_waiters();
        }
    }
}

async fn dispatch(
    wakeups: Weak<Wakeups>,
    mut stream: redis::aio::PubSubStream,
    alive: Arc<AtomicBool>,
    shutdown: CancellationToken,
) {
    loop {
        let msg = tokio::select! {
            _ = shutdown.cancelled() => return,
            msg = stream.next() => msg,
        };
        let Some(w) = wakeups.upgrade() else { return };
        match msg {
            Some(msg) => w.wake_one(msg.get_channel_name()),
            None => {
                alive.store(false, Ordering::Release);
                tracing::debug!("wake-up subscriber connection closed; waking all waiters");
                w.wake_all();
                return;
            }
        }
    }
}
