//! The queue's data: what goes in ([`NewTask`], [`OnDuplicate`]), what comes
//! out ([`Task`], [`Entry`], [`DeadTask`], [`QueueStats`]), what calls report
//! ([`Enqueued`], [`Removed`], [`Nacked`]), the retry [`Backoff`] and the limits.

use std::time::Duration;

use crate::token::Fence;

/// The default largest payload (512 KiB).
pub const DEFAULT_MAX_PAYLOAD: usize = 512 * 1024;
/// The largest payload limit that can be configured (64 MiB).
pub const MAX_PAYLOAD_LIMIT: usize = 64 * 1024 * 1024;
/// The most tasks one call may enqueue, return or claim.
pub const MAX_BATCH: usize = 10_000;
/// The longest delay or retry pause (365 days).
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest error text kept with a failed task.
pub const MAX_ERROR_LEN: usize = 4096;

/// What to do when an enqueued id is already waiting or in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDuplicate {
    /// Keep the existing task (its due time and payload), as the seeds' code does.
    #[default]
    Keep,
    /// Replace it: the new due time and payload win, as the seeds' text says.
    Replace,
}

/// A task to enqueue: an id (the de-duplication key) and an optional payload.
///
/// ```
/// let t = dlm::queue::NewTask::new("order:7").payload(b"{\"sku\":1}".to_vec());
/// assert_eq!(t.id(), "order:7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    pub(crate) id: String,
    pub(crate) payload: Option<Vec<u8>>,
}

impl NewTask {
    /// A task with this id and no payload.
    pub fn new(id: impl Into<String>) -> Self {
        NewTask {
            id: id.into(),
            payload: None,
        }
    }

    /// Attach a payload (bytes; at most the queue's limit).
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<S: Into<String>> From<S> for NewTask {
    fn from(id: S) -> Self {
        NewTask::new(id)
    }
}

/// What enqueue did with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// Added, due at this time (ms since the epoch, Redis clock).
    Added(u64),
    /// The id was already there and was kept: its due time, or `None` while it is in flight.
    Kept(Option<u64>),
    /// The id was already there and was replaced; the new due time.
    Replaced(u64),
}

/// A waiting task as `top` and `pop` return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The task's id.
    pub id: String,
    /// Its due time (ms since the epoch, Redis clock): pass it to [`crate::queue::Queue::remove_if_score`].
    pub score: u64,
    /// Its payload, if it has one.
    pub payload: Option<Vec<u8>>,
}

/// What [`crate::queue::Queue::remove_if_score`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    /// Removed: the due time still matched.
    Removed,
    /// Not removed: it was re-enqueued since and is due at this time now.
    ScoreChanged(u64),
    /// Not removed: no such waiting task.
    NotPresent,
}

/// A claimed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// The task's id.
    pub id: String,
    /// The due time it was claimed at (ms since the epoch, Redis clock).
    pub score: u64,
    /// Its payload, if it has one.
    pub payload: Option<Vec<u8>>,
    /// 1 on the first attempt, then 2, 3, ...
    pub attempt: u32,
    /// The lease's fencing token: strictly increasing per queue, so storage can
    /// refuse the writes of a worker whose lease was taken over.
    pub fence: Fence,
}

/// Exponential backoff with jitter between attempts of a failed task.
///
/// ```
/// use std::time::Duration;
/// let b = dlm::queue::Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
/// assert!(b.delay(1) <= Duration::from_millis(150));
/// assert!(b.delay(30) <= Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Backoff {
    /// `base * 2^(attempt-1)`, capped at `max`, then jittered by ±50%.
    /// Both are capped at [`MAX_DELAY`], the longest retry pause a nack
    /// accepts, so a backoff never makes a nack fail.
    pub fn new(base: Duration, max: Duration) -> Self {
        let base = base.min(MAX_DELAY);
        Backoff {
            base,
            max: max.max(base).min(MAX_DELAY),
        }
    }

    /// The pause before retrying after attempt `attempt` failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let raw = self.base.saturating_mul(1u32 << exp).min(self.max);
        crate::services::jittered(raw).min(self.max)
    }
}

/// A queue's counts, from one script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QueueStats {
    /// Due now, waiting for a worker.
    pub waiting: u64,
    /// Due later (delayed or backing off).
    pub delayed: u64,
    /// Leased to a worker.
    pub inflight: u64,
    /// In the dead-letter set.
    pub dead: u64,
    /// Acked since the queue was created.
    pub processed: u64,
    /// Moved to the dead-letter set since the queue was created.
    pub failed: u64,
    /// How long the oldest waiting task has been due (zero when none is due).
    pub oldest_due: Duration,
}

impl QueueStats {
    /// Nothing waiting, due later or in flight.
    pub fn is_drained(&self) -> bool {
        self.waiting == 0 && self.delayed == 0 && self.inflight == 0
    }
}

/// A task in the dead-letter set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadTask {
    /// The task's id.
    pub id: String,
    /// When it died (ms since the epoch, Redis clock).
    pub died_at: u64,
    /// Its last error text.
    pub error: Option<String>,
    /// Its payload, if it has one.
    pub payload: Option<Vec<u8>>,
}

/// What a nack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nacked {
    /// Back in the queue, due after the retry pause.
    Retrying,
    /// It had its last attempt: moved to the dead-letter set.
    Dead,
}
