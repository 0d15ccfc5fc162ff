//! The queue's data: what goes in ([`NewTask`], [`OnDuplicate`]), what comes
//! out ([`Task`], [`Entry`], [`DeadTask`], [`QueueStats`]), what calls report
//! ([`Enqueued`], [`Removed`], [`Nacked`]), the retry [`Backoff`] and the limits.

use crate::error::secs;
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
/// The highest task priority ([`NewTask::priority`]); the lowest is 0.
pub const MAX_PRIORITY: u16 = 1000;
/// The longest group name, in bytes ([`NewTask::group`]).
pub const MAX_GROUP_LEN: usize = 256;
/// The most dependencies one task may have ([`NewTask::after`]).
pub const MAX_DEPS: usize = 1000;

/// What a task does when one of its dependencies dies (goes to the
/// dead-letter set) before it runs ([`NewTask::on_dependency_failure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DependencyFailure {
    /// It dies too, with the error "dependency 'ID' died" (the default); so
    /// do its own dependents that fail, and so on down the graph.
    #[default]
    Fail,
    /// The dead dependency counts as done: it runs once the others are.
    Ignore,
}
/// The longest run-time limit of a task ([`NewTask::timeout`],
/// [`crate::queue::WorkerOptions::task_timeout`]): 7 days.
pub const MAX_TASK_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);
/// The largest result a task may leave (1 MiB): a worker whose handler
/// returns more fails the task with the error "result too large ...".
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// How long results are kept when the queue's
/// [`QueueSettings::keep_results`] is not set: 1 hour.
pub const DEFAULT_RESULT_TTL: Duration = Duration::from_secs(3600);
/// The longest [`QueueSettings::keep_results`]: 30 days.
pub const MAX_RESULT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most finished tasks a queue remembers (with their results) at once:
/// beyond it the ones due to be forgotten first go first. With
/// [`MAX_RESULT_BYTES`] this bounds a queue's result memory.
pub const MAX_REMEMBERED_RESULTS: usize = 100_000;
/// How many bytes of results a queue keeps at most when its
/// [`QueueSettings::keep_results_bytes`] is not set: 64 MiB, which a small
/// Redis survives. Beyond it the oldest results are evicted first (counted
/// in [`QueueStats::results_evicted`]).
pub const DEFAULT_RESULT_BYTES: u64 = 64 * 1024 * 1024;
/// The largest [`QueueSettings::keep_results_bytes`]: 64 GiB.
pub const MAX_RESULT_BYTES_TOTAL: u64 = 64 * 1024 * 1024 * 1024;
/// How long a task waits for a dependency that is not known yet
/// ([`NewTask::deps_may_come_later`]): once its due time is this far past
/// and the id has still never been enqueued, it dies ("dependency 'ID' was
/// never enqueued") and its edges go, so an id that never comes holds
/// nothing for ever. Claims of the queue look for such tasks about every
/// 10 seconds.
pub const UNKNOWN_DEPENDENCY_WAIT: Duration = Duration::from_secs(24 * 3600);
/// The longest progress message ([`crate::queue::Lease::progress`]), in bytes.
pub const MAX_PROGRESS_MESSAGE: usize = 1024;

/// What to do when an enqueued id is already waiting or in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnDuplicate {
    /// Keep the existing task (its due time and payload), as the seeds' code does.
    #[default]
    Keep,
    /// Replace it: the new due time and payload win, as the seeds' text says.
    ///
    /// A task that is waiting or delayed is replaced at once. A task *in
    /// flight* keeps its lease: the replacement waits (counted as delayed)
    /// and becomes claimable at its due time once the current run settles
    /// (ack, nack, lease expiry or abandon), so an id is never leased twice
    /// at once and holds one slot of its group. The replacement runs even
    /// when the current run is acked; a nack's retry is not scheduled (the
    /// replacement runs instead). The task keeps its attempt count, like a
    /// replaced waiting task: the running attempt still counts toward
    /// `max_attempts`, and the replacement's claim is the next attempt.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// use dlm::queue::{NewTask, OnDuplicate};
    /// let q = client.queue("thumbs");
    /// q.push("img:7").await?;
    /// let run = q.claim(1, Duration::from_secs(30)).await?;
    /// q.enqueue([NewTask::new("img:7").payload("v2")], Duration::ZERO, OnDuplicate::Replace)
    ///     .await?;
    /// assert!(q.claim(1, Duration::from_secs(30)).await?.is_empty()); // img:7 runs already
    /// for lease in run {
    ///     lease.ack().await?; // now the replacement (payload "v2") is claimable
    /// }
    /// # Ok(()) }
    /// ```
    Replace,
}

/// A task to enqueue: an id (the de-duplication key), an optional payload,
/// priority and group.
///
/// ```
/// let t = dlm::queue::NewTask::new("order:7")
///     .payload(b"{\"sku\":1}".to_vec())
///     .priority(5)
///     .group("customer:42");
/// assert_eq!(t.id(), "order:7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    pub(crate) id: String,
    pub(crate) payload: Option<Vec<u8>>,
    pub(crate) priority: u16,
    pub(crate) group: Option<String>,
    pub(crate) deps: Vec<String>,
    pub(crate) on_dep_failure: DependencyFailure,
    pub(crate) deps_may_come_later: bool,
    pub(crate) timeout: Option<Duration>,
    /// Where it goes on a sharded queue (issue 35), when not its group or id.
    pub(crate) shard_key: Option<String>,
}

impl NewTask {
    /// A task with this id, no payload, priority 0, no group and no run-time limit.
    pub fn new(id: impl Into<String>) -> Self {
        NewTask {
            id: id.into(),
            payload: None,
            priority: 0,
            group: None,
            timeout: None,
            deps: Vec::new(),
            on_dep_failure: DependencyFailure::Fail,
            deps_may_come_later: false,
            shard_key: None,
        }
    }

    /// On a sharded queue, the key that picks the task's shard instead of
    /// its id (a group is the shard key of its tasks: a different key
    /// together with a group is refused). Tasks with one shard key share a
    /// shard, so de-duplication by id is exact among them.
    ///
    /// ```
    /// let t = dlm::queue::NewTask::new("invoice:7").shard_key("customer:42");
    /// # let _ = t;
    /// ```
    pub fn shard_key(mut self, key: impl Into<String>) -> Self {
        self.shard_key = Some(key.into());
        self
    }

    /// Its dependencies: tasks of the same queue that must complete (be
    /// acked) before this one becomes due. Until then it is *blocked*
    /// (counted in [`QueueStats::blocked`], never claimed); the ack of its
    /// last dependency releases it in the same script. Any DAG works: many
    /// dependencies, shared dependents, diamonds. A dependency may be
    /// waiting, in flight, blocked itself, in this same enqueue call, or
    /// completed earlier while that is remembered (see
    /// [`crate::queue::Queue::enqueue`]); an unknown id is an error unless
    /// [`NewTask::deps_may_come_later`], and so is a cycle. At most
    /// [`MAX_DEPS`]; ids listed twice count once. A task with dependencies
    /// is new only: an id already there is kept as it is.
    ///
    /// ```
    /// use dlm::queue::NewTask;
    /// let report = NewTask::new("report").after(["extract", "transform"]);
    /// assert_eq!(report.dependencies(), ["extract", "transform"]);
    /// ```
    pub fn after<I, S>(mut self, ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.deps.extend(ids.into_iter().map(Into::into));
        self
    }

    /// What this task does when a dependency dies before it runs (default
    /// [`DependencyFailure::Fail`]).
    ///
    /// ```
    /// use dlm::queue::{DependencyFailure, NewTask};
    /// let t = NewTask::new("cleanup").after(["a", "b"]).on_dependency_failure(DependencyFailure::Ignore);
    /// assert_eq!(t.dependencies().len(), 2);
    /// ```
    pub fn on_dependency_failure(mut self, policy: DependencyFailure) -> Self {
        self.on_dep_failure = policy;
        self
    }

    /// Let a dependency be an id that is not known yet (enqueued later):
    /// the task waits until a task with that id is enqueued and completes.
    /// Without it, enqueue refuses unknown dependencies, which catches typos.
    /// The wait is bounded: an id still never enqueued
    /// [`UNKNOWN_DEPENDENCY_WAIT`] (24 hours) past the task's due time
    /// makes the task die ("dependency 'ID' was never enqueued"), or, with
    /// [`DependencyFailure::Ignore`], counts as done, as a death would.
    ///
    /// ```
    /// let t = dlm::queue::NewTask::new("b").after(["a"]).deps_may_come_later(true);
    /// assert_eq!(t.id(), "b");
    /// ```
    pub fn deps_may_come_later(mut self, yes: bool) -> Self {
        self.deps_may_come_later = yes;
        self
    }

    /// Its dependencies, as given to [`NewTask::after`].
    pub fn dependencies(&self) -> &[String] {
        &self.deps
    }

    /// Its run-time limit (1 ms ..= [`MAX_TASK_TIMEOUT`], whole milliseconds;
    /// default: the worker's [`crate::queue::WorkerOptions::task_timeout`],
    /// if any). A [`crate::queue::Worker`] cancels the handler at the limit
    /// (drops its future) and nacks the task with the error `"timed out"`:
    /// it is retried by the queue's policy, then dead. Claims return it in
    /// [`Task::timeout`]. (Out of range: enqueue fails with a typed error.)
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = dlm::queue::NewTask::new("report:9").timeout(Duration::from_secs(60));
    /// ```
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Its priority, 0 ..= [`MAX_PRIORITY`] (default 0, the lowest): among
    /// due tasks a higher priority is claimed first, and tasks of one
    /// priority in due-time order. A delayed task keeps its priority when it
    /// comes due. (Out of range: enqueue fails with a typed error.)
    pub fn priority(mut self, priority: u16) -> Self {
        self.priority = priority;
        self
    }

    /// Its group (1 ..= [`MAX_GROUP_LEN`] bytes, no control characters):
    /// with a group concurrency set on the queue
    /// ([`crate::queue::QueueSettings::group_concurrency`]), at most that many
    /// tasks of one group are in flight at once, across all workers.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
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
    /// The id was already there and was kept: its due time, or `None` while it is in flight
    /// (with a replacement waiting for that run to settle: the replacement's due time).
    Kept(Option<u64>),
    /// The id was already there and was replaced; the new due time.
    Replaced(u64),
    /// Added, blocked until its dependencies complete; the due time it asked
    /// for (it becomes due then, or when released if that is later).
    Blocked(u64),
    /// Added straight to the dead-letter set: a dependency had died
    /// ([`DependencyFailure::Fail`]); the due time it asked for.
    DependencyDied(u64),
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
    /// Its priority (0: none given, the lowest).
    pub priority: u16,
    /// Its group, if it has one.
    pub group: Option<String>,
    /// Its dependencies ([`NewTask::after`]), all completed by now (or dead,
    /// for a task that ignores that); empty for most tasks. A handler reads
    /// their results with `Queue::result`.
    pub deps: Vec<String>,
    /// Its run-time limit ([`NewTask::timeout`]), if it has one. A
    /// [`crate::queue::Worker`] hands its handler the limit it runs under:
    /// this, else the worker's [`crate::queue::WorkerOptions::task_timeout`].
    pub timeout: Option<Duration>,
}

/// What a running task reported with [`crate::queue::Lease::progress`]
/// ([`crate::queue::Queue::progress`]).
///
/// ```
/// let p = dlm::queue::TaskProgress { pct: 40, message: "4 of 10 pages".into() };
/// assert_eq!(p.pct, 40);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskProgress {
    /// Percent done, 0 ..= 100.
    pub pct: u8,
    /// What it said (may be empty).
    pub message: String,
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
    /// Paused ([`crate::queue::Queue::pause`]): workers claim nothing.
    pub paused: bool,
    /// Blocked: waiting for dependencies ([`NewTask::after`]) to complete.
    pub blocked: u64,
    /// The bytes of the results kept now (at most
    /// [`QueueSettings::keep_results_bytes`]).
    pub result_bytes: u64,
    /// Results evicted before their time since the queue was created, to
    /// stay within [`QueueSettings::keep_results_bytes`] or
    /// [`MAX_REMEMBERED_RESULTS`] (oldest first).
    pub results_evicted: u64,
}

impl QueueStats {
    /// Nothing waiting, due later or in flight. Blocked tasks do not count:
    /// with nothing in flight or due, nothing can release them (their
    /// dependencies are unknown ids that may come later, see
    /// [`NewTask::deps_may_come_later`]); while any task is in flight the
    /// queue is not drained.
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

/// A queue-level rate limit: at most `n` claims in any window of `period`.
///
/// Kept as a sliding log of the last `n` claim times (a sorted set of at
/// most `n` entries per queue), so it is exact: no window of length
/// `period` ever sees more than `n` tasks start, across all workers.
///
/// ```
/// use std::time::Duration;
/// let r = dlm::queue::RateLimit::new(100, Duration::from_secs(1))?;
/// assert_eq!((r.n(), r.period()), (100, Duration::from_secs(1)));
/// assert!(dlm::queue::RateLimit::new(0, Duration::from_secs(1)).is_err());
/// # Ok::<(), dlm::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    n: u32,
    period: Duration,
}

impl RateLimit {
    /// The most tasks one limit allows per period.
    pub const MAX_N: u32 = 100_000;
    /// The longest period (one day).
    pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);

    /// `n` (1 ..= [`RateLimit::MAX_N`]) per `period` (1 ms ..= one day).
    pub fn new(n: u32, period: Duration) -> crate::error::Result<Self> {
        if n == 0 || n > Self::MAX_N {
            return Err(crate::error::Error::invalid(
                "rate",
                format!("{n} per period is outside 1 ..= {}", Self::MAX_N),
            ));
        }
        if period < Duration::from_millis(1) || period > Self::MAX_PERIOD {
            return Err(crate::error::Error::invalid(
                "rate",
                format!(
                    "period {} is outside 0.001 seconds ..= 24 hours",
                    secs(period)
                ),
            ));
        }
        Ok(RateLimit { n, period })
    }

    /// How many per period.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// The period (whole milliseconds).
    pub fn period(&self) -> Duration {
        self.period
    }
}

/// A queue's settings, stored in Redis with the queue, so every worker
/// follows the latest value written ([`crate::queue::Queue::settings`],
/// [`crate::queue::Queue::configure`]). As a change, a setting not
/// mentioned is left as it is; `Some(value)` sets it, `None` removes it.
///
/// ```
/// let s = dlm::queue::QueueSettings::default().group_concurrency(Some(1));
/// assert_eq!(s.get_group_concurrency(), Some(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueSettings {
    pub(crate) group_concurrency: Option<Option<u32>>,
    pub(crate) rate: Option<Option<RateLimit>>,
    pub(crate) keep_completed: Option<Option<u32>>,
    pub(crate) events: Option<Option<u32>>,
    pub(crate) keep_results: Option<Option<Duration>>,
    pub(crate) keep_results_bytes: Option<Option<u64>>,
    /// How many shards (issue 35): `None` as a change leaves them as they are.
    pub(crate) shards: Option<u16>,
    /// Lower the number of shards by draining the removed ones.
    pub(crate) drain_shards: bool,
}

/// The most entries a queue's event log may be capped at ([`QueueSettings::events`]).
pub const MAX_EVENTS: u32 = 10_000_000;
/// A sensible cap for a queue's event log: about the last 10,000 entries.
pub const DEFAULT_EVENTS: u32 = 10_000;

/// The most acked ids a queue may keep ([`QueueSettings::keep_completed`]).
pub const MAX_KEEP_COMPLETED: u32 = 1_000_000;
/// The highest group concurrency ([`QueueSettings::group_concurrency`]).
pub const MAX_GROUP_CONCURRENCY: u32 = 10_000;

impl QueueSettings {
    /// At most `k` tasks of one group in flight at once (1 ..= 10 000;
    /// `None`: no limit).
    pub fn group_concurrency(mut self, k: Option<u32>) -> Self {
        self.group_concurrency = Some(k);
        self
    }

    /// The queue's rate limit (`None`: none).
    pub fn rate(mut self, rate: Option<RateLimit>) -> Self {
        self.rate = Some(rate);
        self
    }

    /// Keep the ids of the last `n` acked tasks (1 ..= 1 000 000; `None`:
    /// keep none, the default). `processed` counts them either way.
    pub fn keep_completed(mut self, n: Option<u32>) -> Self {
        self.keep_completed = Some(n);
        self
    }

    /// Keep an event log of the queue (`added`, `claimed`, `progress`,
    /// `completed`, `failed`, `dead`, `released`), capped at about `n`
    /// entries (1 ..= [`MAX_EVENTS`], e.g. [`DEFAULT_EVENTS`]; Redis trims
    /// with `MAXLEN ~`); `None`: no log, the default, which costs nothing.
    /// One entry holds the events of one kind of one script call (a claim
    /// of 100 tasks is one entry), so the log costs a small part of the
    /// queue's throughput. Read it with [`crate::queue::Queue::events`].
    ///
    /// ```
    /// use dlm::queue::{DEFAULT_EVENTS, QueueSettings};
    /// let s = QueueSettings::default().events(Some(DEFAULT_EVENTS));
    /// assert_eq!(s.get_events(), Some(10_000));
    /// ```
    pub fn events(mut self, n: Option<u32>) -> Self {
        self.events = Some(n);
        self
    }

    /// The event log's cap, when the log is on.
    pub fn get_events(&self) -> Option<u32> {
        self.events.flatten()
    }

    /// How long the results handlers return are kept (at most
    /// [`MAX_RESULT_TTL`], whole milliseconds; default when never set:
    /// [`DEFAULT_RESULT_TTL`], 1 hour; `Duration::ZERO`: not kept at all).
    /// A task that returns nothing writes nothing, so a queue without
    /// results pays nothing for this. Results kept so far stay until their
    /// own time. At most [`MAX_REMEMBERED_RESULTS`] are kept at once (the
    /// soonest to be forgotten go first), each at most [`MAX_RESULT_BYTES`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = dlm::queue::QueueSettings::default().keep_results(Duration::from_secs(600));
    /// assert_eq!(s.get_keep_results(), Duration::from_secs(600));
    /// ```
    pub fn keep_results(mut self, ttl: Duration) -> Self {
        self.keep_results = Some(Some(ttl));
        self
    }

    /// How long results are kept ([`DEFAULT_RESULT_TTL`] when not set).
    ///
    /// ```
    /// let s = dlm::queue::QueueSettings::default();
    /// assert_eq!(s.get_keep_results(), dlm::queue::DEFAULT_RESULT_TTL);
    /// ```
    pub fn get_keep_results(&self) -> Duration {
        self.keep_results.flatten().unwrap_or(DEFAULT_RESULT_TTL)
    }

    /// How many bytes of results the queue keeps at most, all results
    /// together ([`MAX_RESULT_BYTES`] ..= [`MAX_RESULT_BYTES_TOTAL`];
    /// default when never set: [`DEFAULT_RESULT_BYTES`], 64 MiB). Storing a
    /// result beyond it evicts the oldest results first (the completion of
    /// a task in a dependency graph stays remembered; only its result
    /// goes), counted in [`QueueStats::results_evicted`] and the metric
    /// `dlm_queue_results_evicted_total`.
    ///
    /// ```
    /// let s = dlm::queue::QueueSettings::default().keep_results_bytes(16 << 20);
    /// assert_eq!(s.get_keep_results_bytes(), 16 << 20);
    /// ```
    pub fn keep_results_bytes(mut self, bytes: u64) -> Self {
        self.keep_results_bytes = Some(Some(bytes));
        self
    }

    /// How many bytes of results are kept at most ([`DEFAULT_RESULT_BYTES`]
    /// when not set).
    ///
    /// ```
    /// let s = dlm::queue::QueueSettings::default();
    /// assert_eq!(s.get_keep_results_bytes(), dlm::queue::DEFAULT_RESULT_BYTES);
    /// ```
    pub fn get_keep_results_bytes(&self) -> u64 {
        self.keep_results_bytes
            .flatten()
            .unwrap_or(DEFAULT_RESULT_BYTES)
    }

    /// The group concurrency set.
    /// How many shards the queue is spread over (issue 35; see
    /// docs/sharded-queue.md). As a change: K shards, 1 ..= [`crate::keys::MAX_SHARDS`].
    /// Raising K moves no task: new tasks go to their new homes and workers
    /// claim from every shard. Lowering K is refused while the removed
    /// shards hold a task, unless [`QueueSettings::drain_shards`] is set.
    /// Each shard is a whole queue under its own hash tag, so on a Redis
    /// Cluster the shards spread over the masters.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use dlm::queue::QueueSettings;
    /// let q = client.queue("clicks");
    /// q.configure(&QueueSettings::default().shards(6)).await?;
    /// assert_eq!(q.settings().await?.get_shards(), 6);
    /// # Ok(()) }
    /// ```
    pub fn shards(mut self, k: u16) -> Self {
        self.shards = Some(k);
        self
    }

    /// With [`QueueSettings::shards`] below the current number: start a
    /// lowering that drains the removed shards (new tasks go to the kept
    /// ones; workers still claim from all) instead of refusing it. Calling
    /// `configure` with the same number again finishes it once the removed
    /// shards hold no task.
    pub fn drain_shards(mut self, drain: bool) -> Self {
        self.drain_shards = drain;
        self
    }

    /// The number of shards as read back (1: not sharded).
    pub fn get_shards(&self) -> u16 {
        self.shards.unwrap_or(1)
    }

    /// At most this many tasks of one group in flight at once (`None`: no limit).
    pub fn get_group_concurrency(&self) -> Option<u32> {
        self.group_concurrency.flatten()
    }

    /// The rate limit set.
    pub fn get_rate(&self) -> Option<RateLimit> {
        self.rate.flatten()
    }

    /// How many acked ids are kept.
    pub fn get_keep_completed(&self) -> Option<u32> {
        self.keep_completed.flatten()
    }

    pub(crate) fn validate(&self) -> crate::error::Result<()> {
        if let Some(k) = self.shards
            && (k == 0 || k > crate::keys::MAX_SHARDS)
        {
            return Err(crate::error::Error::invalid(
                "shards",
                format!("{k} is outside 1 ..= {}", crate::keys::MAX_SHARDS),
            ));
        }
        if let Some(Some(k)) = self.group_concurrency
            && (k == 0 || k > MAX_GROUP_CONCURRENCY)
        {
            return Err(crate::error::Error::invalid(
                "group concurrency",
                format!("{k} is outside 1 ..= {MAX_GROUP_CONCURRENCY}"),
            ));
        }
        if let Some(Some(n)) = self.keep_completed
            && (n == 0 || n > MAX_KEEP_COMPLETED)
        {
            return Err(crate::error::Error::invalid(
                "keep completed",
                format!("{n} is outside 1 ..= {MAX_KEEP_COMPLETED}"),
            ));
        }
        if let Some(Some(n)) = self.events
            && (n == 0 || n > MAX_EVENTS)
        {
            return Err(crate::error::Error::invalid(
                "events",
                format!("{n} is outside 1 ..= {MAX_EVENTS}"),
            ));
        }
        if let Some(Some(ttl)) = self.keep_results
            && ttl > MAX_RESULT_TTL
        {
            return Err(crate::error::Error::invalid(
                "keep results",
                format!("{} is longer than 30 days", secs(ttl)),
            ));
        }
        if let Some(Some(b)) = self.keep_results_bytes
            && !(MAX_RESULT_BYTES as u64..=MAX_RESULT_BYTES_TOTAL).contains(&b)
        {
            return Err(crate::error::Error::invalid(
                "keep results bytes",
                format!(
                    "{b} is outside {MAX_RESULT_BYTES} ..= {MAX_RESULT_BYTES_TOTAL} (one result \
                     must fit)"
                ),
            ));
        }
        if let Some(Some(r)) = self.rate {
            RateLimit::new(r.n, r.period)?;
        }
        Ok(())
    }
}

/// An acked task kept in the completed history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The task's id.
    pub id: String,
    /// When it was acked (ms since the epoch, Redis clock).
    pub at: u64,
}
