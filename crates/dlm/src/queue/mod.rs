//! A task queue in a Redis sorted set that never loses a task.
//!
//! The source documents' queue (a sorted set of task ids scored by due time,
//! with `enqueue`, `top`, `pop` and a score-checked `dequeue`) made reliable:
//! every operation is **one Lua script**, so it is atomic without the seeds'
//! lock around several commands (that lock costs three extra round trips
//! per operation, and a holder that dies inside it stalls every producer
//! until its TTL). On top: leases with fencing tokens, ack/nack/extend,
//! automatic return of expired leases, retries with backoff, dead letters
//! and a [`Worker`] runtime. Repeating tasks ([`Queue::schedule`], every
//! `d` or on a cron expression, one task per tick however many workers run)
//! are fired by the workers themselves (see [`Repeat`]).
//!
//! Keys of queue `Q` (all under the `{Q}` hash tag, so one Redis Cluster slot):
//! `dlm:queue:{Q}:waiting` (ZSET id → due ms), `:payload` (HASH id →
//! payload over 64 bytes; small payloads sit in the 4096 listpack hashes
//! `:payload:000` ..= `:payload:fff`, see [`Queue::compact_payloads`] and
//! [`crate::keys::queue_payload_bucket`]; an id-only task is its `:waiting`
//! entry and nothing else), `:inflight`
//! (ZSET id → lease deadline), `:lease` (HASH id → fencing token),
//! `:attempts`, `:dead`, `:errors`, `:fence`, `:stats`, `:signal` (wake-ups);
//! and, only once a queue uses them, `:config` (its settings), `:prio`,
//! `:group`, `:ready`, `:gcount`, `:parked`, `:parkedid`, `:rate`,
//! `:completed`, `:timeout`, `:results`, `:done`, `:progress`, the dependencies' keys
//! (see **Dependencies** below), and while workers run `:workers` and `:workerinfo`
//! (their heartbeat records, [`Queue::workers`]) ([`crate::keys::QUEUE_KEY_SUFFIXES`]).
//!
//! **Results** ([`TaskOutput`], [`Lease::ack_with`], [`Queue::result`],
//! [`Queue::wait_result`]): the ack stores a result in `:results` and the
//! time it is forgotten in `:done` (now + [`QueueSettings::keep_results`],
//! 1 hour by default). Bounds, exactly: a result is at most
//! [`MAX_RESULT_BYTES`] (1 MiB; a worker fails a task whose handler returns
//! more, `Lease::ack_with` refuses it); at most [`MAX_REMEMBERED_RESULTS`]
//! (100,000) ids are remembered and their results add up to at most
//! [`QueueSettings::keep_results_bytes`] (64 MiB by default), and an ack
//! beyond either evicts those to be forgotten soonest (counted in
//! [`QueueStats::results_evicted`]); every ack of a queue with results, and every read,
//! removes up to 100 expired ones; and both keys expire as a whole at the
//! last forget time, so an idle queue's results go away by themselves. A
//! task that returns nothing writes nothing (in a queue that has results,
//! its ack deletes an earlier run's result), and `result` gives nothing for
//! an id waiting, in flight or dead again. `wait_result` subscribes to the channel
//! named like the results key, then reads; the ack publishes the ids it
//! stored there only while a waiter's mark (`result_waiters` in `:config`,
//! a time) has not passed.
//!
//! **Progress** ([`Lease::progress`], [`Queue::progress`]): one field of
//! `:progress` per running task, written only under the lease's fence,
//! deleted when the task finishes (ack, dead), is given back or its lease
//! expires, and when its next run is claimed (after a nack).
//!
//! **Time limits** ([`NewTask::timeout`], [`WorkerOptions::task_timeout`]):
//! kept in `:timeout` while the task exists, returned by the claim in
//! [`Task::timeout`]; the [`Worker`] drops a handler past it and nacks the
//! task `"timed out"`.
//!
//! A queue that uses none of these has none of those keys and sends no
//! more commands: the field `extras` of `:config`, set once a queue uses
//! one of them, is read by claim and ack with the settings they read
//! anyway (and is kept by [`Queue::clear_settings`]).
//!
//! **Priorities** ([`NewTask::priority`]): due tasks with a priority or a
//! group wait in `:ready`, scored `-priority * 2^42 + due ms`, so a claim
//! takes higher priorities first and FIFO (by due time) within one; a
//! delayed task moves there when it comes due (at most `1000 + 4 × count`
//! per claim), keeping its priority. A queue without priorities or groups
//! never has a `:ready` set and claims exactly as before (one `EXISTS` more).
//!
//! **Groups** ([`NewTask::group`], [`QueueSettings::group_concurrency`]): a
//! claim scans at most `4 × count + 64` tasks of `:ready`; one whose group
//! already has `k` tasks in flight is *parked* (held aside, not skipped over
//! again and again), so a busy group never holds back the others. When a
//! task of the group is acked, nacked, given back or its lease expires, its
//! slot frees and parked tasks of that group go back to `:ready`.
//!
//! **Rate limit** ([`RateLimit`]): a sliding log of the last `n` claim times
//! (server clock), checked and written in the claim script: exact, no
//! window of length `period` ever sees more than `n` tasks start. A worker
//! at the limit sleeps until the oldest claim leaves the window. (GCRA with a
//! burst of `n` would allow up to `2n - 1` starts in one period right after
//! an idle spell, so it is not used here.)
//!
//! **Completed history** ([`QueueSettings::keep_completed`]): off by default;
//! with `n`, the ids and times of the last `n` acked tasks ([`Queue::completed`]).
//!
//! The source documents' `push`/`top`/`pop`/`remove_if_score` work on the
//! due-time set `:waiting` as before; tasks already moved to `:ready`
//! (priority or group) are claimed, not popped.
//! Times are the Redis server's clock (`TIME`), so producers and workers on
//! hosts with skewed clocks agree on what is due.
//!
//! ```no_run
//! # async fn demo() -> dlm::Result<()> {
//! use std::time::Duration;
//! use dlm::queue::{NewTask, OnDuplicate};
//! let client = dlm::Client::connect("redis://127.0.0.1:6379").await?;
//! let queue = client.queue("emails");
//! queue.enqueue([NewTask::new("welcome:42").payload(b"{\"to\":42}".to_vec())],
//!               Duration::ZERO, OnDuplicate::Keep).await?;
//! for lease in queue.claim(10, Duration::from_secs(30)).await? {
//!     println!("sending {} (attempt {})", lease.task().id, lease.task().attempt);
//!     lease.ack().await?;              // Err(LeaseLost) if it expired and another worker took it
//! }
//! # Ok(()) }
//! ```

mod beat;
mod check;
mod events;
mod fanout;
mod idle;
mod inspect;
mod keyset;
mod lease;
mod ops;
mod outcome;
mod schedule;
mod shards;
mod types;
mod worker;
mod worker_options;

use crate::error::secs;
use std::time::Duration;

pub use beat::{DROP_PER_BEAT, MAX_IN_FLIGHT_IDS, MAX_WORKERS, TTL_TICKS, WorkerInfo};
pub use check::{
    DEFAULT_CHECK_IDS, Invariant, InvariantReport, MAX_CHECK_IDS, MAX_VIOLATIONS, StateCounts,
    Violation,
};
pub use events::{Event, EventKind, EventsFrom, MAX_EVENTS_PAGE};
pub(crate) use inspect::queue_names;
pub use inspect::{MAX_PAGE, MAX_PREVIEW, TaskDetail, TaskInfo, TaskPage, TaskState};
pub use lease::Lease;
pub use outcome::{OUTCOME_POLL, Outcome};
pub use schedule::{MAX_SCHEDULES, MIN_EVERY, Repeat, ScheduleInfo, ScheduleRun, Scheduled};
pub use shards::{STICKY_ROUNDS, ShardInfo, ShardLayout};
pub use types::{
    Backoff, Completed, DEFAULT_EVENTS, DEFAULT_MAX_PAYLOAD, DEFAULT_RESULT_BYTES,
    DEFAULT_RESULT_TTL, DeadTask, DependencyFailure, Enqueued, Entry, MAX_BATCH, MAX_DELAY,
    MAX_DEPS, MAX_ERROR_LEN, MAX_EVENTS, MAX_GROUP_CONCURRENCY, MAX_GROUP_LEN, MAX_KEEP_COMPLETED,
    MAX_PAYLOAD_LIMIT, MAX_PRIORITY, MAX_PROGRESS_MESSAGE, MAX_REMEMBERED_RESULTS,
    MAX_RESULT_BYTES, MAX_RESULT_BYTES_TOTAL, MAX_RESULT_TTL, MAX_TASK_TIMEOUT, Nacked, NewTask,
    OnDuplicate, QueueSettings, QueueStats, RateLimit, Removed, Task, TaskProgress,
    UNKNOWN_DEPENDENCY_WAIT,
};
pub use worker::{Failure, RunContext, TaskError, TaskOutput, Worker, WorkerOptions, WorkerReport};

use std::sync::Arc;

use crate::backend::{Backend, Deployment};
use crate::error::{Error, Result};
use crate::keys::{MAX_NAME_LEN, queue_keys};
use crate::metrics::{QueueMetrics, TaskOutcome};
use crate::token::Fence;

/// A named queue; cheap to clone. Get one from [`crate::Client::queue`].
#[derive(Debug, Clone)]
pub struct Queue {
    /// The one Redis it lives on (`None`: a Redlock client, which has none).
    backend: Option<Backend>,
    /// For dedicated connections (a worker's blocking wait), when known.
    deployment: Option<Arc<Deployment>>,
    name: String,
    max_payload: usize,
    max_attempts: u32,
    backoff: Backoff,
    /// Small payloads go to the compact buckets (see [`Queue::compact_payloads`]).
    compact_payloads: bool,
    /// The keys of its metrics, labelled with its name once.
    metrics: Arc<QueueMetrics>,
    /// Its Redis keys, made once, and whether hot calls send all of them.
    keys: Arc<keyset::KeySet>,
    /// The root of its keys (`dlm:`, or the client's key prefix).
    root: Arc<str>,
    /// The layout of a sharded queue, shared by its handles (issue 35).
    sharding: Arc<shards::Sharding>,
    /// This handle is one shard of the queue (it never fans out).
    is_shard: bool,
    /// Which shard `keys` are (0: the queue's own keys).
    shard_index: u16,
    /// That shard's tag number (see `keys::queue_shard_tag`).
    shard_n: u16,
}

/// The longest lease accepted (7 days).
const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Scores are doubles in Redis (and numbers in Lua): integers up to 2^53
/// are exact, larger ones are rounded, so a due time above it could match
/// another one. Every due time and lease deadline dlm writes is far below
/// (now + at most 365 days, in ms); a larger score passed in is refused.
const MAX_EXACT_SCORE: u64 = 1 << 53;

fn check_count(count: usize) -> Result<()> {
    if count == 0 || count > MAX_BATCH {
        return Err(Error::invalid(
            "count",
            format!("{count} is outside 1 ..= {MAX_BATCH}"),
        ));
    }
    Ok(())
}

fn check_delay(what: &'static str, d: Duration) -> Result<()> {
    if d > MAX_DELAY {
        return Err(Error::invalid(
            what,
            format!("{} is longer than 365 days", secs(d)),
        ));
    }
    Ok(())
}

pub(crate) fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "task id",
            format!("must be 1 to {MAX_NAME_LEN} bytes"),
        ));
    }
    Ok(())
}

fn check_task_options(t: &NewTask) -> Result<()> {
    check_dependencies(t)?;
    if let Some(k) = &t.shard_key {
        if k.is_empty() || k.len() > MAX_GROUP_LEN {
            return Err(Error::invalid(
                "shard key",
                format!("task {:?}: must be 1 to {MAX_GROUP_LEN} bytes", t.id),
            ));
        }
        if t.group.as_ref().is_some_and(|g| g != k) {
            return Err(Error::invalid(
                "shard key",
                format!(
                    "task {:?}: a group is its tasks' shard key; a different --shard-key with --group is refused",
                    t.id
                ),
            ));
        }
    }
    if t.priority > MAX_PRIORITY {
        return Err(Error::invalid(
            "priority",
            format!(
                "task {:?}: {} is outside 0 ..= {MAX_PRIORITY}",
                t.id, t.priority
            ),
        ));
    }
    if let Some(g) = &t.group
        && (g.is_empty() || g.len() > MAX_GROUP_LEN || g.chars().any(char::is_control))
    {
        return Err(Error::invalid(
            "group",
            format!(
                "task {:?}: must be 1 to {MAX_GROUP_LEN} bytes without control characters",
                t.id
            ),
        ));
    }
    if let Some(limit) = t.timeout {
        check_task_timeout(limit).map_err(|e| match e {
            Error::InvalidArgument { arg, reason } => Error::InvalidArgument {
                arg,
                reason: format!("task {:?}: {reason}", t.id),
            },
            other => other,
        })?;
    }
    Ok(())
}

/// Ids that take part in dependencies are stored NUL-terminated (deps.lua).
fn check_dependencies(t: &NewTask) -> Result<()> {
    if t.deps.is_empty() {
        return Ok(());
    }
    if t.deps.len() > MAX_DEPS {
        return Err(Error::invalid(
            "after",
            format!(
                "task {:?}: {} dependencies, at most {MAX_DEPS}",
                t.id,
                t.deps.len()
            ),
        ));
    }
    for id in std::iter::once(&t.id).chain(&t.deps) {
        check_id(id)?;
        if id.contains('\0') {
            return Err(Error::invalid(
                "after",
                format!("task {:?}: an id with a dependency has no NUL byte", t.id),
            ));
        }
    }
    if t.deps.contains(&t.id) {
        return Err(Error::invalid(
            "after",
            format!("task {:?} depends on itself (a cycle)", t.id),
        ));
    }
    Ok(())
}

/// A run-time limit: 1 ms ..= [`MAX_TASK_TIMEOUT`].
fn check_task_timeout(limit: Duration) -> Result<()> {
    if limit < Duration::from_millis(1) || limit > MAX_TASK_TIMEOUT {
        return Err(Error::invalid(
            "task timeout",
            format!("{} is outside 0.001 seconds ..= 7 days", secs(limit)),
        ));
    }
    Ok(())
}

/// A result a task leaves: at most [`MAX_RESULT_BYTES`].
fn check_result(id: &str, result: &[u8]) -> Result<()> {
    if result.len() > MAX_RESULT_BYTES {
        return Err(Error::invalid(
            "result",
            format!(
                "task {id:?}: result too large: {} bytes is more than the limit of {MAX_RESULT_BYTES} bytes",
                result.len()
            ),
        ));
    }
    Ok(())
}

/// How often [`Queue::wait_result`] reads again without a message (a lost
/// message costs at most this; with no pub/sub connection it polls at
/// [`RESULT_POLL`]).
const RESULT_RECHECK: Duration = Duration::from_secs(5);
const RESULT_POLL: Duration = Duration::from_millis(200);

fn cap_error(text: &str) -> String {
    if text.len() <= MAX_ERROR_LEN {
        return text.to_string();
    }
    let mut end = MAX_ERROR_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl Queue {
    /// The queue `name` on `backend` (`None` under Redlock: every call then
    /// fails with a clear error); `redis` opens a worker's blocking connection.
    pub(crate) fn new(
        backend: Option<Backend>,
        deployment: Option<Arc<Deployment>>,
        name: String,
        root: Arc<str>,
    ) -> Self {
        Queue {
            backend,
            deployment,
            metrics: Arc::new(QueueMetrics::new(&name)),
            keys: Arc::new(keyset::KeySet::new(&root, &name)),
            root,
            name,
            max_payload: DEFAULT_MAX_PAYLOAD,
            max_attempts: 5,
            backoff: Backoff::default(),
            compact_payloads: false,
            sharding: Arc::default(),
            is_shard: false,
            shard_index: 0,
            shard_n: 0,
        }
    }

    /// The largest payload accepted (default 512 KiB, at most 64 MiB).
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// How many times a task is tried before it goes to the dead-letter set
    /// (default 5; 1 ..= 1000). Used by claim (expired leases), nack and the worker.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Whether this handle's enqueues keep small payloads (payload and id
    /// both at most 64 bytes) in the queue's compact bucket hashes (default
    /// `false`: in the single `:payload` hash). On: about 37 bytes less
    /// Redis memory per such task (136 instead of 173 bytes for an 11-byte
    /// payload), for about 5 µs more Redis CPU per task (a bucket costs one
    /// command per task to write, read and delete, where the single hash
    /// serves a whole batch in one), which lowered the processing rate of
    /// `dlm bench queue --payload-bytes 11` by about a quarter on 2 cores
    /// (BENCHMARKS.md, issue 16). Readers find a payload wherever it is, so
    /// handles with either setting share a queue. Id-only tasks and larger
    /// payloads are stored the same either way. Every bucket a script
    /// touches is declared in its KEYS (issue 31): once a queue has payloads
    /// in buckets, its calls send the buckets of their ids, and claims, pops
    /// and listings all 4096 bucket keys, which costs each such call more
    /// (see BENCHMARKS.md, issue 31).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// // Memory first for a big backlog of small payloads.
    /// let queue = client.queue("events").compact_payloads(true);
    /// queue.push(dlm::queue::NewTask::new("e:1").payload("{}")).await?;
    /// # Ok(()) }
    /// ```
    pub fn compact_payloads(mut self, on: bool) -> Self {
        self.compact_payloads = on;
        self
    }

    /// Test switch: this handle's enqueue, claim and ack always send all 31
    /// keys (*wide*), as if the queue used the keys of results, time limits,
    /// dependencies or events, instead of the first 19 (*narrow*) until it
    /// does (see ARCHITECTURE.md, "the fast path beside its safe path").
    /// The state a queue reaches is the same either way; a test runs one
    /// scenario through both to show it (`tests/queue_narrow_wide.rs`).
    #[doc(hidden)]
    pub fn always_wide(mut self) -> Self {
        let keys = keyset::KeySet::new_wide(&self.root, &self.name);
        #[cfg(feature = "seeded-defects")]
        let keys = keys.with_seeded(self.keys.seeded());
        self.keys = Arc::new(keys);
        self.sharding = Arc::default();
        self
    }

    /// This queue's scripts as a client built with `defect` runs them (see
    /// `crate::seeded`; dlm's checker tests only).
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn seeded_defect(mut self, defect: Option<crate::seeded::SeededDefect>) -> Self {
        self.keys = Arc::new(keyset::KeySet::new(&self.root, &self.name).with_seeded(defect));
        self.sharding = Arc::default();
        self
    }

    /// The pause between attempts of a failed task (default 1 s doubling up to 5 min).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The queue's name.
    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where a worker opens its dedicated blocking connection, when known.
    pub(crate) fn deployment(&self) -> Option<&Arc<Deployment>> {
        self.deployment.as_ref()
    }

    /// Its shard's wake-up list (`signal`).
    pub(crate) fn signal_key(&self) -> Option<String> {
        self.keys.all().get(9).cloned()
    }

    fn ready(&self) -> Result<(&Backend, &[String])> {
        let (backend, keys) = self.ready_hot()?;
        Ok((backend, keys.all()))
    }

    /// As [`Queue::ready`], with the key set whose hot calls may be narrow.
    fn ready_hot(&self) -> Result<(&Backend, &keyset::KeySet)> {
        let keys = &*self.keys;
        if !keys.is_valid() {
            queue_keys(&self.root, &self.name)?;
        }
        if self.max_payload > MAX_PAYLOAD_LIMIT {
            return Err(Error::invalid(
                "max payload",
                format!("{} bytes is above {MAX_PAYLOAD_LIMIT}", self.max_payload),
            ));
        }
        if self.max_attempts == 0 || self.max_attempts > 1000 {
            return Err(Error::invalid("max attempts", "must be 1 ..= 1000"));
        }
        let backend = self.backend.as_ref().ok_or_else(|| {
            Error::invalid("client", "queues need a single-Redis client, not Redlock")
        })?;
        Ok((backend, keys))
    }

    /// Add tasks due `delay` from now, in one round trip. An id already waiting
    /// or in flight is kept or replaced as `on_duplicate` says (a replacement
    /// of a task in flight waits until its current run settles: see
    /// [`OnDuplicate::Replace`]). Returns what happened to each task, in order.
    pub async fn enqueue<T: Into<NewTask>>(
        &self,
        tasks: impl IntoIterator<Item = T>,
        delay: Duration,
        on_duplicate: OnDuplicate,
    ) -> Result<Vec<Enqueued>> {
        let (backend, keys) = self.ready_hot()?;
        check_delay("delay", delay)?;
        let tasks: Vec<NewTask> = tasks.into_iter().map(Into::into).collect();
        if tasks.is_empty() || tasks.len() > MAX_BATCH {
            return Err(Error::invalid(
                "tasks",
                format!("{} tasks; one call takes 1 ..= {MAX_BATCH}", tasks.len()),
            ));
        }
        for t in &tasks {
            check_id(&t.id)?;
            check_task_options(t)?;
            if let Some(p) = &t.payload
                && p.len() > self.max_payload
            {
                return Err(Error::invalid(
                    "payload",
                    format!(
                        "task {:?}: {} bytes is larger than the limit of {} bytes",
                        t.id,
                        p.len(),
                        self.max_payload
                    ),
                ));
            }
        }
        let _ = backend;
        let _ = keys;
        self.enqueue_placed(&tasks, delay, on_duplicate).await
    }

    /// Enqueue on this handle's shard; `None`: its layout is stale
    /// (`layout`: the caller's version, `None` for a queue not sharded).
    pub(crate) async fn enqueue_here(
        &self,
        tasks: &[NewTask],
        delay: Duration,
        on_duplicate: OnDuplicate,
        layout: Option<u64>,
    ) -> Result<Option<Vec<Enqueued>>> {
        let (backend, keys) = self.ready_hot()?;
        ops::enqueue(
            backend,
            keys,
            tasks,
            delay,
            on_duplicate,
            self.compact_payloads,
            layout,
        )
        .await
    }

    /// Enqueue one task, due now, keeping an existing one with the same id.
    pub async fn push(&self, task: impl Into<NewTask>) -> Result<Enqueued> {
        let mut r = self
            .enqueue([task.into()], Duration::ZERO, OnDuplicate::Keep)
            .await?;
        r.pop()
            .ok_or_else(|| Error::protocol("enqueue returned nothing"))
    }

    /// Up to `count` due tasks in the order a worker would claim them
    /// (higher priority first, then the earlier due time), without moving
    /// them. Every due task is seen wherever it waits: plain, prioritized or
    /// grouped, and after the others the tasks parked behind their group's
    /// concurrency limit (the first 1,000 of those), which a claim takes only
    /// once their group has room. [`Entry::score`] is the due time, the one
    /// [`Queue::remove_if_score`] compares.
    ///
    /// ```no_run
    /// # async fn f(client: dlm::Client) -> dlm::Result<()> {
    /// let q = client.queue("mail");
    /// q.push(dlm::queue::NewTask::new("urgent").priority(9)).await?;
    /// q.push("routine").await?;
    /// let next: Vec<String> = q.top(10).await?.into_iter().map(|e| e.id).collect();
    /// assert_eq!(next, ["urgent", "routine"]);
    /// # Ok(()) }
    /// ```
    pub async fn top(&self, count: usize) -> Result<Vec<Entry>> {
        check_count(count)?;
        if let Some(l) = self.sharded_view().await? {
            return self.top_sharded(&l, count).await;
        }
        self.top_here(count).await
    }

    pub(crate) async fn top_here(&self, count: usize) -> Result<Vec<Entry>> {
        let (backend, keys) = self.ready_hot()?;
        ops::entries(backend, keys, ops::Peek::Top, count).await
    }

    /// Take up to `count` due tasks out of the queue: exactly the ones, in
    /// the order, that [`Queue::top`] would show at that moment (priority,
    /// then due time; parked tasks last: a pop is no claim, so a group's
    /// concurrency limit and the rate limit do not hold it back). Two
    /// concurrent pops never return the same task. (No lease: a popped task
    /// is gone; use [`Queue::claim`] for at-least-once processing.)
    pub async fn pop(&self, count: usize) -> Result<Vec<Entry>> {
        check_count(count)?;
        if let Some(l) = self.sharded_view().await? {
            return self.pop_sharded(&l, count).await;
        }
        self.pop_here(count).await
    }

    pub(crate) async fn pop_here(&self, count: usize) -> Result<Vec<Entry>> {
        let (backend, keys) = self.ready_hot()?;
        ops::entries(backend, keys, ops::Peek::Pop, count).await
    }

    /// The seeds' `dequeue(id, score)`: remove a waiting task only if its due
    /// time still equals `score` (it was not re-enqueued since it was read),
    /// wherever it waits (with a priority, in a group, parked or delayed).
    pub async fn remove_if_score(&self, id: &str, score: u64) -> Result<Removed> {
        check_id(id)?;
        if score > MAX_EXACT_SCORE {
            return Err(Error::invalid(
                "score",
                format!("{score} is above 2^53, so it is no due time dlm wrote"),
            ));
        }
        if let Some(l) = self.sharded_view().await? {
            return self.remove_if_score_sharded(&l, id, score).await;
        }
        self.remove_if_score_here(id, score).await
    }

    pub(crate) async fn remove_if_score_here(&self, id: &str, score: u64) -> Result<Removed> {
        let (backend, keys) = self.ready_hot()?;
        ops::remove_if_score(backend, keys, id, score).await
    }

    /// Lease up to `count` due tasks for `lease`; first returns expired leases
    /// of any worker to the queue (or to the dead-letter set after
    /// `max_attempts`). Each task must then be acked, nacked or extended
    /// through its [`Lease`] before the lease runs out.
    pub async fn claim(&self, count: usize, lease: Duration) -> Result<Vec<Lease>> {
        check_count(count)?;
        let claimed = self.claim_raw(count, lease).await?;
        let now = claimed.now;
        Ok(claimed
            .tasks
            .into_iter()
            .zip(claimed.shards)
            .map(|(task, (i, n, extras))| Lease {
                queue: self.shard(i, n),
                task,
                claimed_at: extras.then_some(now),
            })
            .collect())
    }

    pub(crate) async fn claim_raw(&self, count: usize, lease: Duration) -> Result<ops::Claimed> {
        self.ready_hot()?;
        check_lease(lease)?;
        self.claim_placed(count, lease).await
    }

    /// Claim on this handle's shard; `None`: its layout is stale.
    pub(crate) async fn claim_here(
        &self,
        count: usize,
        lease: Duration,
        layout: Option<u64>,
    ) -> Result<Option<ops::Claimed>> {
        let (backend, keys) = self.ready_hot()?;
        let Some(mut claimed) =
            ops::claim(backend, keys, count, lease, self.max_attempts, layout).await?
        else {
            return Ok(None);
        };
        claimed.shards =
            vec![(self.shard_index, self.shard_n, claimed.extras); claimed.tasks.len()];
        if claimed.died > 0 {
            // Leases that ran out on their last attempt: dead without a nack.
            self.metrics.tasks(TaskOutcome::Dead, claimed.died);
            tracing::info!(queue = %self.name, tasks = claimed.died, "moved to the dead-letter set (lease expired on the last attempt)");
        }
        if !claimed.tasks.is_empty() {
            let now = claimed.now;
            self.metrics.waited(
                claimed
                    .tasks
                    .iter()
                    .map(|t| Duration::from_millis(now.saturating_sub(t.score))),
            );
            tracing::debug!(queue = %self.name, claimed = claimed.tasks.len(), expired = claimed.expired, "claimed");
        }
        Ok(Some(claimed))
    }

    /// The queue's settings as stored in Redis (group concurrency, rate
    /// limit, completed history); every worker reads them at each claim.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let s = client.queue("emails").settings().await?;
    /// println!("{:?} {:?}", s.get_group_concurrency(), s.get_rate());
    /// # Ok(()) }
    /// ```
    pub async fn settings(&self) -> Result<QueueSettings> {
        if let Some(l) = self.sharded_view().await? {
            return self.settings_sharded(&l).await;
        }
        self.settings_here().await
    }

    pub(crate) async fn settings_here(&self) -> Result<QueueSettings> {
        let (backend, keys) = self.ready()?;
        ops::config(backend, keys, ops::ConfigOp::Get).await
    }

    /// Change the queue's settings (those given in `change`; the others stay)
    /// and return them all. Every worker of the queue follows them from its
    /// next claim.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// use dlm::queue::{QueueSettings, RateLimit};
    /// client.queue("emails").configure(&QueueSettings::default()
    ///     .group_concurrency(Some(1))
    ///     .rate(Some(RateLimit::new(100, Duration::from_secs(1))?)))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn configure(&self, change: &QueueSettings) -> Result<QueueSettings> {
        change.validate()?;
        self.ready()?;
        if let Some(k) = change.shards {
            self.reshard(k, change.drain_shards).await?;
        }
        let mut rest = *change;
        rest.shards = None;
        rest.drain_shards = false;
        // The layout read afresh (not a cached one up to a second old): a
        // rate limit split over an old K would give its shares a wrong sum.
        if let Some(l) = self.sharded_view_now().await? {
            return self.configure_sharded(&l, &rest).await;
        }
        self.configure_here(&rest).await?;
        self.settings().await
    }

    pub(crate) async fn configure_here(&self, change: &QueueSettings) -> Result<QueueSettings> {
        let (backend, keys) = self.ready()?;
        ops::config(backend, keys, ops::ConfigOp::Set(change)).await
    }

    /// Remove every setting (no group limit, no rate limit, no completed
    /// history; the history kept so far is deleted). A sharded queue keeps
    /// its shards.
    pub async fn clear_settings(&self) -> Result<()> {
        let shards = match self.sharded_view().await? {
            Some(l) => self.shard_handles(&l),
            None => vec![self.clone()],
        };
        for q in shards {
            let (backend, keys) = q.ready()?;
            ops::config(backend, keys, ops::ConfigOp::Clear).await?;
        }
        Ok(())
    }

    /// Up to `count` most recently acked tasks, newest first (only kept with
    /// [`QueueSettings::keep_completed`]; empty otherwise).
    pub async fn completed(&self, count: usize) -> Result<Vec<Completed>> {
        check_count(count)?;
        if let Some(l) = self.sharded_view().await? {
            return self.completed_sharded(&l, count).await;
        }
        self.completed_here(count).await
    }

    pub(crate) async fn completed_here(&self, count: usize) -> Result<Vec<Completed>> {
        let (backend, keys) = self.ready()?;
        ops::completed(backend, keys, count).await
    }

    /// Pause the queue: from its next claim on, no worker claims a task
    /// (an idle worker goes on waiting; one that was claiming finds nothing
    /// and waits), while tasks in flight finish and are acked as usual and
    /// enqueues go on. The seeds' `top`/`pop` are no claims and still work.
    /// Every worker, in every process, follows the flag stored in Redis.
    /// Returns whether it was paused already.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let q = client.queue("emails");
    /// q.pause().await?;
    /// assert!(q.stats().await?.paused);
    /// q.resume().await?;                     // idle workers are woken at once
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self) -> Result<bool> {
        self.pause_all(true).await
    }

    /// Pause or resume every shard, shard 0 first; whether shard 0 was
    /// paused. On a sharded queue the change takes a generation on shard 0
    /// and carries it to the others (an older one never undoes a newer
    /// one), and the layout is read afresh before and after: when a change
    /// of K came in between, the new shards are written too.
    async fn pause_all(&self, pause: bool) -> Result<bool> {
        let Some(mut l) = self.sharded_view_now().await? else {
            return self.pause_here(pause).await;
        };
        let base = self.shard(0, 0);
        let (backend, keys) = base.ready()?;
        let (was, generation) = ops::pause_gen(backend, keys, pause, ops::PauseGen::Lead).await?;
        for _ in 0..8 {
            for q in self.shard_handles(&l).into_iter().skip(1) {
                q.pause_shard(pause, generation).await?;
            }
            let now = self.read_layout().await?;
            if now.version == l.version {
                break;
            }
            l = now;
        }
        Ok(was)
    }

    /// Shard i >= 1 of a sharded queue takes a pause or resume of
    /// generation `generation` (ignored when it has a newer one).
    pub(crate) async fn pause_shard(&self, pause: bool, generation: u64) -> Result<()> {
        let (backend, keys) = self.ready()?;
        ops::pause_gen(backend, keys, pause, ops::PauseGen::Of(generation)).await?;
        Ok(())
    }

    /// Shard 0's pause state and its generation.
    pub(crate) async fn pause_state(&self) -> Result<(bool, u64)> {
        let (backend, keys) = self.ready()?;
        ops::pause_gen(backend, keys, false, ops::PauseGen::Get).await
    }

    pub(crate) async fn pause_here(&self, pause: bool) -> Result<bool> {
        let (backend, keys) = self.ready()?;
        ops::pause(backend, keys, pause).await
    }

    /// Let workers claim again, waking idle ones at once; returns whether
    /// the queue was paused.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// if client.queue("emails").resume().await? { println!("resumed") }
    /// # Ok(()) }
    /// ```
    pub async fn resume(&self) -> Result<bool> {
        self.pause_all(false).await
    }

    /// Return expired leases to the queue now; how many were returned.
    pub async fn reap(&self) -> Result<usize> {
        Ok(self.claim_raw(0, Duration::from_secs(1)).await?.expired)
    }

    /// The queue's counts. Also sets the gauges `dlm_queue_depth{queue,state}`
    /// and `dlm_queue_oldest_task_age_seconds{queue}` (see [`crate::metrics`]):
    /// call it now and then to keep them current, as the library does not
    /// poll by itself.
    pub async fn stats(&self) -> Result<QueueStats> {
        let stats = match self.sharded_view().await? {
            Some(l) => QueueStats::sum(&self.shard_stats_of(&l).await?),
            None => self.stats_here().await?,
        };
        self.metrics.sampled(
            [stats.waiting, stats.delayed, stats.inflight, stats.dead],
            stats.oldest_due,
            stats.results_evicted,
        );
        Ok(stats)
    }

    pub(crate) async fn stats_here(&self) -> Result<QueueStats> {
        let (backend, keys) = self.ready()?;
        ops::stats(backend, keys).await
    }

    /// Up to `count` dead tasks, oldest death first.
    pub async fn dead(&self, count: usize) -> Result<Vec<DeadTask>> {
        check_count(count)?;
        if let Some(l) = self.sharded_view().await? {
            return self.dead_sharded(&l, count).await;
        }
        self.dead_here(count).await
    }

    pub(crate) async fn dead_here(&self, count: usize) -> Result<Vec<DeadTask>> {
        let (backend, keys) = self.ready_hot()?;
        ops::dead(backend, keys, count).await
    }

    /// Move dead tasks back to the queue (due now, attempts reset): the given
    /// ids, or all of them with `None`. Returns how many moved.
    pub async fn retry_dead(&self, ids: Option<&[&str]>) -> Result<usize> {
        let (backend, keys) = self.ready()?;
        if let Some(ids) = ids {
            ids.iter().try_for_each(|id| check_id(id))?;
            if ids.len() > MAX_BATCH {
                return Err(Error::invalid("ids", format!("more than {MAX_BATCH}")));
            }
        }
        let Some(l) = self.sharded_view().await? else {
            return ops::retry_dead(backend, keys, ids).await;
        };
        let mut moved = 0;
        for q in self.shard_handles(&l) {
            let (backend, keys) = q.ready()?;
            moved += ops::retry_dead(backend, keys, ids).await?;
        }
        Ok(moved)
    }

    /// Delete every dead task; how many were deleted.
    pub async fn purge_dead(&self) -> Result<usize> {
        let shards = match self.sharded_view().await? {
            Some(l) => self.shard_handles(&l),
            None => vec![self.clone()],
        };
        let mut purged = 0;
        for q in shards {
            let (backend, keys) = q.ready_hot()?;
            purged += ops::purge_dead(backend, keys).await?;
        }
        Ok(purged)
    }

    /// A worker runtime on this queue (see [`Worker`]).
    pub fn worker(&self, options: WorkerOptions) -> Worker {
        Worker::new(self.clone(), options)
    }

    /// The result the handler of task `id` returned ([`TaskOutput`],
    /// [`Lease::ack_with`]), while the queue remembers it (see
    /// [`QueueSettings::keep_results`]); `None`: not finished yet, finished
    /// without a result, failed, or forgotten. Also forgets a few expired
    /// results (expiry is lazy; the keys expire as a whole too).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// if let Some(bytes) = client.queue("thumbs").result("img:7").await? {
    ///     println!("{} bytes", bytes.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn result(&self, id: &str) -> Result<Option<Vec<u8>>> {
        check_id(id)?;
        let q = self.holder_of(id).await?;
        let (backend, keys) = q.ready()?;
        ops::result(backend, keys, id, Duration::ZERO).await
    }

    /// Like [`Queue::result`], but when there is none yet wait for it, at
    /// most `deadline` (at most [`MAX_DELAY`]): woken by the ack that
    /// stores it (a pub/sub message on the channel named like the queue's
    /// results key, `dlm:queue:{Q}:results`, published only while someone
    /// waits), not by polling; it reads again every 5 s in case a message
    /// was lost. `None` at the deadline. A task that finishes without a
    /// result, or fails, wakes nobody: the wait ends at the deadline.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// let q = client.queue("thumbs");
    /// q.push("img:7").await?;
    /// match q.wait_result("img:7", Duration::from_secs(30)).await? {
    ///     Some(bytes) => println!("done: {} bytes", bytes.len()),
    ///     None => println!("not done within 30 s"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_result(&self, id: &str, deadline: Duration) -> Result<Option<Vec<u8>>> {
        use futures_util::StreamExt;
        check_id(id)?;
        check_delay("deadline", deadline)?;
        let holder = self.holder_of(id).await?;
        let (backend, keys) = holder.ready()?;
        let until = tokio::time::Instant::now() + deadline;
        // Subscribe first, then read: an ack between the two is not missed.
        let mut sub = None;
        if let Some(d) = &self.deployment
            && !deadline.is_zero()
        {
            let channel = &keys[22];
            let opened = tokio::time::timeout(backend.timeout(), async {
                let mut p = d.pubsub().await?;
                p.subscribe(channel).await?;
                Ok::<_, redis::RedisError>(p)
            })
            .await;
            match opened {
                Ok(Ok(p)) => sub = Some(p),
                Ok(Err(e)) => tracing::debug!(error = %e, "no results subscription; polling"),
                Err(_) => tracing::debug!("results subscription timed out; polling"),
            }
        }
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if let Some(r) = ops::result(backend, keys, id, left).await? {
                return Ok(Some(r));
            }
            if left.is_zero() {
                return Ok(None);
            }
            let Some(p) = sub.as_mut() else {
                tokio::time::sleep(left.min(RESULT_POLL)).await;
                continue;
            };
            let mut messages = p.on_message();
            let heard = tokio::time::timeout(left.min(RESULT_RECHECK), async {
                while let Some(m) = messages.next().await {
                    if m.get_payload_bytes() == id.as_bytes() {
                        return true;
                    }
                }
                false
            })
            .await;
            drop(messages);
            if heard == Ok(false) {
                // The connection closed: poll from here on.
                sub = None;
            }
        }
    }

    /// What the running task `id` last reported with [`Lease::progress`]
    /// (`None`: nothing, or it is not running any more: progress is deleted
    /// when its run ends).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// if let Some(p) = client.queue("thumbs").progress("img:7").await? {
    ///     println!("{}% {}", p.pct, p.message);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn progress(&self, id: &str) -> Result<Option<TaskProgress>> {
        check_id(id)?;
        let q = self.holder_of(id).await?;
        let (backend, keys) = q.ready()?;
        let v: redis::Value = backend
            .query(redis::cmd("HGET").arg(&keys[24]).arg(id))
            .await?;
        Ok(ops::progress_reply(&v))
    }

    /// Report the progress of task `id` under the lease with fencing token
    /// `fence`, as [`Lease::progress`] does, for a process that has no
    /// [`Lease`] but knows both (`dlm queue progress`, from the
    /// `DLM_TASK_ID` and `DLM_TASK_FENCE` that `dlm queue work` gives its
    /// command). [`Error::LeaseLost`] when that lease is not the task's
    /// current one (expired, taken over or finished).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let fence = dlm::Fence::new(std::env::var("DLM_TASK_FENCE").unwrap_or_default().parse().unwrap_or(0));
    /// client.queue("thumbs").report_progress("img:7", fence, 50, "half way").await?;
    /// # Ok(()) }
    /// ```
    pub async fn report_progress(
        &self,
        id: &str,
        fence: Fence,
        pct: u8,
        message: &str,
    ) -> Result<()> {
        check_id(id)?;
        if pct > 100 {
            return Err(Error::invalid("pct", format!("{pct} is above 100")));
        }
        if message.len() > MAX_PROGRESS_MESSAGE {
            return Err(Error::invalid(
                "progress message",
                format!(
                    "{} bytes is longer than {MAX_PROGRESS_MESSAGE}",
                    message.len()
                ),
            ));
        }
        let q = self.holder_of(id).await?;
        let (backend, keys) = q.ready()?;
        match ops::progress(backend, keys, id, fence, pct, message).await? {
            1 => Ok(()),
            c => Err(self.lease_lost(id, c)),
        }
    }

    pub(crate) async fn ack_many(&self, leases: &[ops::Finished<'_>]) -> Result<Vec<i64>> {
        let (backend, keys) = self.ready_hot()?;
        let codes = ops::ack(backend, keys, leases).await?;
        let acked = codes.iter().filter(|c| **c == 1).count() as u64;
        let lost = codes.len() as u64 - acked;
        self.metrics.tasks(TaskOutcome::Acked, acked);
        self.metrics.tasks(TaskOutcome::LeaseLost, lost);
        tracing::debug!(queue = %self.name, acked, lost, "acked");
        Ok(codes)
    }

    pub(crate) async fn extend_many(
        &self,
        leases: &[(&str, Fence)],
        lease: Duration,
    ) -> Result<Vec<i64>> {
        let (backend, keys) = self.ready()?;
        ops::extend(backend, keys, leases, lease).await
    }

    /// Gives `leases` back: how many were (see abandon.lua: -1 when none was
    /// and another lease holds one of the tasks).
    pub(crate) async fn abandon_many(&self, leases: &[(&str, Fence)]) -> Result<i64> {
        let (backend, keys) = self.ready()?;
        ops::abandon(backend, keys, leases).await
    }

    pub(crate) async fn nack_raw(
        &self,
        task: &Task,
        retry_after: Duration,
        error: &str,
    ) -> Result<Nacked> {
        self.nack_within(task, retry_after, error, self.max_attempts)
            .await
    }

    /// [`Queue::nack_raw`] with `max_attempts` of the caller's (1: dead now,
    /// for a failure that no retry can mend).
    pub(crate) async fn nack_within(
        &self,
        task: &Task,
        retry_after: Duration,
        error: &str,
        max_attempts: u32,
    ) -> Result<Nacked> {
        check_delay("retry after", retry_after)?;
        let (backend, keys) = self.ready_hot()?;
        let code = ops::nack(
            backend,
            keys,
            &task.id,
            task.fence,
            retry_after,
            max_attempts,
            &cap_error(error),
        )
        .await?;
        let (outcome, result) = match code {
            1 => {
                tracing::debug!(queue = %self.name, id = %task.id, attempt = task.attempt, ?retry_after, "nacked; retrying");
                (TaskOutcome::Retried, Ok(Nacked::Retrying))
            }
            2 => {
                tracing::info!(queue = %self.name, id = %task.id, attempt = task.attempt, "moved to the dead-letter set");
                (TaskOutcome::Dead, Ok(Nacked::Dead))
            }
            c => (TaskOutcome::LeaseLost, Err(self.lease_lost(&task.id, c))),
        };
        self.metrics.tasks(outcome, 1);
        result
    }

    pub(crate) fn lease_lost(&self, id: &str, code: i64) -> Error {
        Error::LeaseLost {
            queue: self.name.clone(),
            id: id.to_string(),
            taken: code == -1,
        }
    }

    pub(crate) fn backoff_for(&self, attempt: u32) -> Duration {
        self.backoff.delay(attempt)
    }
}

fn check_lease(lease: Duration) -> Result<()> {
    if lease < Duration::from_millis(10) || lease > MAX_LEASE {
        return Err(Error::invalid(
            "lease",
            format!("{} is outside 0.01 seconds ..= 7 days", secs(lease)),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod properties {
    use super::*;
    use crate::backend::millis;
    use proptest::prelude::*;

    /// The last millisecond of the year 9999, a bound for the Redis clock.
    const LATEST_NOW_MS: u64 = 253_402_300_799_999;

    fn arb_duration() -> impl Strategy<Value = Duration> {
        crate::services::props::arb_duration(MAX_DELAY.as_millis() as u64 + 10)
    }

    proptest! {
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        /// What enqueue, nack and claim add to the server's clock: accepted
        /// delays and leases keep every score an exact double (below 2^53),
        /// and a longer one is a typed error before anything is sent.
        #[test]
        fn due_times_and_deadlines_stay_exact_doubles(d in arb_duration(), now in 0..=LATEST_NOW_MS) {
            for accepted in [check_delay("delay", d).is_ok(), check_lease(d).is_ok()] {
                if accepted {
                    let score = now + millis(d);
                    prop_assert!(score <= MAX_EXACT_SCORE);
                    prop_assert_eq!(score as f64 as u64, score);
                }
            }
            prop_assert_eq!(check_delay("delay", d).is_ok(), d <= MAX_DELAY);
        }

        /// The priority set's scores (`due - priority * 2^42`, groups.lua) and
        /// the parked members' (`score + 2^52`) are exact doubles for every
        /// accepted priority and every due time before 2^42 ms (the year
        /// 2109), and order by priority first, then due time.
        #[test]
        fn priority_scores_stay_exact_and_ordered(
            p in 0..=MAX_PRIORITY, q in 0..=MAX_PRIORITY,
            due in 0u64..(1 << 42), later in 0u64..(1 << 42),
        ) {
            let unit = (1u64 << 42) as f64;
            let score = |p: u16, due: u64| due as f64 - f64::from(p) * unit;
            let exact = |p: u16, due: u64| due as i128 - i128::from(p) * (1i128 << 42);
            for (p, d) in [(p, due), (q, later)] {
                prop_assert_eq!(score(p, d) as i128, exact(p, d));
                let parked = score(p, d) + (1u64 << 52) as f64;
                prop_assert!(parked > 0.0 && parked < MAX_EXACT_SCORE as f64);
                prop_assert_eq!(parked as i128, exact(p, d) + (1i128 << 52));
                // What the Lua decodes back: the due time.
                prop_assert_eq!((score(p, d) + f64::from(p) * unit) as u64, d);
            }
            if p > q {
                prop_assert!(score(p, due) < score(q, later), "a higher priority comes first");
            } else if p == q && due < later {
                prop_assert!(score(p, due) < score(q, later), "FIFO within a priority");
            }
        }

        /// Converting a duration to the scripts' milliseconds saturates and keeps order.
        #[test]
        fn millis_saturate_and_keep_order(a in arb_duration(), b in arb_duration()) {
            prop_assert_eq!(u128::from(millis(a)), a.as_millis().min(u128::from(u64::MAX)));
            if a <= b {
                prop_assert!(millis(a) <= millis(b));
            }
        }

        #[test]
        fn counts_and_ids_are_checked(count in any::<usize>(), id in ".{0,8}|.{1020,1030}") {
            prop_assert_eq!(check_count(count).is_ok(), (1..=MAX_BATCH).contains(&count));
            prop_assert_eq!(check_id(&id).is_ok(), !id.is_empty() && id.len() <= MAX_NAME_LEN);
        }

        /// Error texts are cut at a character boundary, never mid-character.
        #[test]
        fn error_texts_are_capped_on_a_char_boundary(text in ".{0,1100}|[\\x00-\\x{10FFFF}]{4090,4100}") {
            let capped = cap_error(&text);
            prop_assert!(capped.len() <= MAX_ERROR_LEN + '…'.len_utf8());
            let kept = capped.strip_suffix('…').unwrap_or(&capped);
            prop_assert!(text.starts_with(kept));
        }

        /// Any backoff gives a pause a nack accepts: within half the raw
        /// pause and the cap, for every attempt, however large the settings.
        #[test]
        fn backoff_pauses_are_bounded(base in arb_duration(), max in arb_duration(), attempt in any::<u32>()) {
            let b = Backoff::new(base, max);
            let pause = b.delay(attempt);
            prop_assert!(pause <= MAX_DELAY);
            prop_assert!(check_delay("retry after", pause).is_ok());
            prop_assert!(pause >= base.min(max.max(base)).min(MAX_DELAY) / 2);
            prop_assert!(b.delay(attempt.saturating_add(1)) <= MAX_DELAY);
        }
    }

    #[test]
    fn remove_if_score_refuses_inexact_scores() {
        let queue = Queue::new(None, None, "q".into(), "dlm:".into());
        let run = |score| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|e| Error::protocol(e.to_string()))
                .and_then(|rt| rt.block_on(queue.remove_if_score("t", score)))
        };
        assert!(matches!(
            run(u64::MAX),
            Err(Error::InvalidArgument { arg: "score", .. })
        ));
        // 2^53 itself passes the check (and fails only for want of a Redis here).
        assert!(matches!(
            run(MAX_EXACT_SCORE),
            Err(Error::InvalidArgument { arg: "client", .. })
        ));
    }
}
