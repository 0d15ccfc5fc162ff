//! The worker runtime: claim in batches, run a handler per task with bounded
//! concurrency, renew every running lease in one script per heartbeat, ack or
//! retry, block (not poll) while idle, and shut down gracefully; all the
//! while it heartbeats a record of itself ([`crate::queue::beat`]).

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::queue::beat::{Beating, Identity, default_id};
use crate::queue::idle::Idle;
pub use crate::queue::worker_options::{WorkerOptions, WorkerReport};
use crate::queue::{Nacked, Queue, Task};
use crate::token::Fence;

/// A running task's lease, as the heartbeat sees it.
#[derive(Debug, Clone, Copy)]
struct RunningLease {
    /// Its ack or nack is on its way: the heartbeat still renews the lease
    /// (a settle retried through a blip must not let it run out), but a
    /// renewal that finds it gone is no loss, as the settle may have been
    /// applied already; the settle's own reply says whether it was lost.
    settling: bool,
    /// What the heartbeat renews it to: the worker's lease, or longer once
    /// its handler asked for more ([`RunContext::extend`]).
    lease: Duration,
    /// The tag number of its shard (issue 35; the shard's index is in the key).
    shard_n: u16,
}

/// The running tasks by lease: (id, fence), not the id alone. The same id
/// may run twice in one worker (its first lease ran out while the handler
/// went on, and a claim leased it again); the first run's end must leave
/// the second's entry, and so its renewals, alone (issue 31).
/// On a sharded queue the shard's index is part of the key: fencing tokens
/// count per shard.
type Running = Arc<Mutex<HashMap<Run, RunningLease>>>;

/// A run: task id, lease fencing token, shard index.
type Run = (String, Fence, u16);

/// A shard: its index and tag number.
type ShardId = (u16, u16);
/// Leases of one shard: `(id, fence)` each.
type ShardRuns = Vec<(String, Fence)>;

/// Runs grouped by their shard.
fn by_shard(runs: impl IntoIterator<Item = (Run, u16)>) -> Vec<(ShardId, ShardRuns)> {
    let mut out: Vec<(ShardId, ShardRuns)> = Vec::new();
    for ((id, fence, i), n) in runs {
        match out.iter_mut().find(|(s, _)| *s == (i, n)) {
            Some((_, v)) => v.push((id, fence)),
            None => out.push(((i, n), vec![(id, fence)])),
        }
    }
    out
}

/// What a [`Worker`]'s handler may return on success: nothing (`()`), or a
/// result that the ack stores for [`Queue::result`] and
/// [`Queue::wait_result`] (see [`crate::queue::QueueSettings::keep_results`]).
/// An empty result, or `None`, is no result: nothing is written. A result
/// larger than [`crate::queue::MAX_RESULT_BYTES`] fails the task with the
/// error `"result too large: ..."` (retried by the queue's policy).
///
/// ```
/// use dlm::queue::TaskOutput;
/// assert_eq!(().into_result(), None);
/// assert_eq!(String::from("done").into_result(), Some(b"done".to_vec()));
/// assert_eq!(Some(Vec::<u8>::new()).into_result(), None);
/// ```
pub trait TaskOutput: Send + 'static {
    /// The result's bytes (`None`: no result).
    fn into_result(self) -> Option<Vec<u8>>;
}

impl TaskOutput for () {
    fn into_result(self) -> Option<Vec<u8>> {
        None
    }
}

impl TaskOutput for Vec<u8> {
    fn into_result(self) -> Option<Vec<u8>> {
        Some(self).filter(|r| !r.is_empty())
    }
}

impl TaskOutput for String {
    fn into_result(self) -> Option<Vec<u8>> {
        self.into_bytes().into_result()
    }
}

impl TaskOutput for &'static str {
    fn into_result(self) -> Option<Vec<u8>> {
        self.as_bytes().to_vec().into_result()
    }
}

impl TaskOutput for &'static [u8] {
    fn into_result(self) -> Option<Vec<u8>> {
        self.to_vec().into_result()
    }
}

impl<T: TaskOutput> TaskOutput for Option<T> {
    fn into_result(self) -> Option<Vec<u8>> {
        self.and_then(TaskOutput::into_result)
    }
}

/// The error a task is nacked with when its handler ran out of time.
const TIMED_OUT: &str = "timed out";

/// What a [`Worker`] does with a task whose handler failed with a
/// [`TaskError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// Retry it by the queue's backoff, then dead-letter it after the last
    /// attempt (what any other error of a handler does).
    Retry,
    /// Dead-letter it now: no retry can mend this failure (a result that
    /// cannot be stored, input that can never be handled).
    Fatal,
    /// Give it back untried (not counted as a failure) and stop the worker
    /// gracefully: the handler was interrupted by its process stopping.
    Stop,
}

/// A handler's error that says what to do with its task ([`Failure`]). Any
/// other error of a handler is [`Failure::Retry`].
///
/// ```
/// use dlm::queue::{Failure, TaskError};
/// let e = TaskError::fatal("order 7 does not exist");
/// assert_eq!(e.failure(), Failure::Fatal);
/// assert_eq!(e.to_string(), "order 7 does not exist");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    failure: Failure,
    message: String,
}

impl TaskError {
    /// Retried as any error is.
    pub fn retry(message: impl Into<String>) -> Self {
        TaskError {
            failure: Failure::Retry,
            message: message.into(),
        }
    }

    /// Dead-lettered at once, with `message` as its error.
    pub fn fatal(message: impl Into<String>) -> Self {
        TaskError {
            failure: Failure::Fatal,
            message: message.into(),
        }
    }

    /// Given back untried, and the worker stops gracefully.
    pub fn stop(message: impl Into<String>) -> Self {
        TaskError {
            failure: Failure::Stop,
            message: message.into(),
        }
    }

    /// What the worker does with the task.
    pub fn failure(&self) -> Failure {
        self.failure
    }
}

impl Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TaskError {}

/// What a handler run by [`Worker::run_with_context`] can do about its own
/// run besides returning: report progress, lengthen its lease, read its attempt.
#[derive(Clone)]
pub struct RunContext {
    queue: Queue,
    id: String,
    fence: Fence,
    attempt: u32,
    running: Running,
    /// The worker's lease: a run's lease is never shorter.
    min_lease: Duration,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("queue", &self.queue.name())
            .field("id", &self.id)
            .field("fence", &self.fence)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl RunContext {
    /// The task's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The fencing token of this run's lease.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// 1 on the first attempt, then 2, 3, ...
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Report how far the task is ([`crate::queue::Lease::progress`]).
    pub async fn progress(&self, pct: u8, message: &str) -> Result<()> {
        self.queue
            .report_progress(&self.id, self.fence, pct, message)
            .await
    }

    /// Renew this run's lease to `lease` from now (at least the worker's
    /// lease), and keep renewing it to that length while the handler runs:
    /// should the process die, the task comes back only once `lease` has
    /// run out. [`Error::LeaseLost`] when the lease is no longer this run's.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        crate::queue::check_lease(lease)?;
        let lease = lease.max(self.min_lease);
        let run = (self.id.clone(), self.fence, self.queue.shard_index());
        if let Some(l) = lock_running(&self.running).get_mut(&run) {
            l.lease = lease;
        }
        let codes = self
            .queue
            .extend_many(&[(&self.id, self.fence)], lease)
            .await?;
        match codes.first() {
            Some(1) => Ok(()),
            Some(c) => Err(self.queue.lease_lost(&self.id, *c)),
            None => Err(Error::protocol("extend returned nothing")),
        }
    }
}

/// Ends what a worker started when its [`Worker::run`] future is dropped
/// before it returned (its task aborted, cancelled from Python, a second
/// Ctrl-C): stops renewing its leases and gives them back, so that another
/// worker can take them at once instead of never (issue 33). Without a
/// runtime to send the give-back on, the leases just run out.
struct StopOnDrop {
    queue: Queue,
    running: Running,
    stop_heartbeat: CancellationToken,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.stop_heartbeat.cancel();
        let left: Vec<(Run, u16)> = lock_running(&self.running)
            .drain()
            .map(|(run, l)| (run, l.shard_n))
            .collect();
        if left.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let queue = self.queue.clone();
        rt.spawn(async move {
            match give_all_back(&queue, left).await {
                Ok(n) => {
                    tracing::info!(queue = %queue.name(), returned = n, "worker dropped; its tasks were given back")
                }
                Err(e) => {
                    tracing::warn!(queue = %queue.name(), error = %e, "worker dropped; giving its tasks back failed, their leases will run out")
                }
            }
        });
    }
}

/// Runs a handler for every task of a queue. Get one from [`Queue::worker`].
///
/// A handler may return a result ([`TaskOutput`]: bytes, a string, or `()`
/// for none), and runs under the task's time limit ([`Task::timeout`]).
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use dlm::queue::WorkerOptions;
/// let stop = tokio_util::sync::CancellationToken::new();
/// let report = client.queue("emails").worker(WorkerOptions::new().concurrency(8))
///     .run(|task| async move {
///         println!("task {} attempt {}", task.id, task.attempt);
///         Ok::<(), std::io::Error>(())          // Err(e): retried with backoff, then dead
///     }, stop.clone())
///     .await?;
/// println!("acked {}", report.acked);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Worker {
    queue: Queue,
    opts: WorkerOptions,
}

/// Give every run in `left` back, shard by shard; how many were.
async fn give_all_back(queue: &Queue, left: Vec<(Run, u16)>) -> Result<i64> {
    let mut returned = 0;
    let mut failed = None;
    for ((i, n), runs) in by_shard(left) {
        let refs: Vec<(&str, Fence)> = runs.iter().map(|(id, f)| (id.as_str(), *f)).collect();
        match queue.shard(i, n).abandon_many(&refs).await {
            Ok(k) => returned += k.max(0),
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) if returned == 0 => Err(e),
        _ => Ok(returned),
    }
}

fn lock_running(r: &Running) -> std::sync::MutexGuard<'_, HashMap<Run, RunningLease>> {
    match r.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

enum Outcome {
    Acked,
    Retried,
    Dead,
    Lost,
    /// Given back untried ([`Failure::Stop`]).
    Returned,
}

impl Worker {
    pub(crate) fn new(queue: Queue, opts: WorkerOptions) -> Self {
        Worker { queue, opts }
    }

    /// Run until `shutdown` is cancelled (or the queue is drained, with
    /// [`WorkerOptions::exit_when_empty`]). Transient Redis errors are retried
    /// with a pause, so the worker goes on by itself after a restart.
    ///
    /// The handler's `Ok` value is the task's result ([`TaskOutput`]; `()`:
    /// none). A task with a time limit ([`crate::queue::NewTask::timeout`],
    /// else [`WorkerOptions::task_timeout`]) whose handler runs longer is
    /// cancelled (its future dropped, after [`WorkerOptions::timeout_grace`])
    /// and nacked with the error `"timed out"`.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// use dlm::queue::WorkerOptions;
    /// let opts = WorkerOptions::new().task_timeout(Duration::from_secs(60));
    /// client.queue("thumbs").worker(opts)
    ///     .run(|task| async move { Ok::<_, std::io::Error>(format!("thumb of {}", task.id)) },
    ///          dlm::CancellationToken::new())
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T, E>(
        self,
        handler: F,
        shutdown: CancellationToken,
    ) -> Result<WorkerReport>
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: TaskOutput,
        E: Display + Send + 'static,
    {
        self.run_with_context(move |task, _| handler(task), shutdown)
            .await
    }

    /// [`Worker::run`] with a handler that also gets its run's
    /// [`RunContext`]: progress, a longer lease, the attempt.
    ///
    /// A handler's [`TaskError`] says what becomes of its task: retried
    /// ([`Failure::Retry`], as any other error), dead-lettered at once
    /// ([`Failure::Fatal`]), or given back untried while the worker stops
    /// gracefully ([`Failure::Stop`]). A result too large to store
    /// ([`crate::queue::MAX_RESULT_BYTES`]) is fatal too.
    ///
    /// Dropping the returned future before it ends (aborting its task)
    /// stops the renewals of the running tasks' leases and gives them back.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// use dlm::queue::{TaskError, WorkerOptions};
    /// client.queue("pages").worker(WorkerOptions::new())
    ///     .run_with_context(|task, run| async move {
    ///         run.progress(10, "fetching").await.map_err(|e| TaskError::retry(e.to_string()))?;
    ///         run.extend(Duration::from_secs(600)).await.map_err(|e| TaskError::retry(e.to_string()))?;
    ///         if task.payload.is_none() {
    ///             return Err(TaskError::fatal("no payload"));
    ///         }
    ///         Ok(())
    ///     }, dlm::CancellationToken::new())
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_with_context<F, Fut, T, E>(
        self,
        handler: F,
        shutdown: CancellationToken,
    ) -> Result<WorkerReport>
    where
        F: Fn(Task, RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: TaskOutput,
        E: Display + Send + 'static,
    {
        self.opts.validate()?;
        self.queue.ready()?;
        if self.opts.settings != crate::queue::QueueSettings::default() {
            self.queue.configure(&self.opts.settings).await?;
        }
        let handler = Arc::new(handler);
        let permits = Arc::new(Semaphore::new(self.opts.concurrency));
        let running: Running = Arc::new(Mutex::new(HashMap::new()));
        let mut tasks: JoinSet<Outcome> = JoinSet::new();
        let mut report = WorkerReport::default();
        let stop_heartbeat = CancellationToken::new();
        // A handler's Failure::Stop stops the worker as `shutdown` does.
        let shutdown = shutdown.child_token();
        let _stop_on_drop = StopOnDrop {
            queue: self.queue.clone(),
            running: running.clone(),
            stop_heartbeat: stop_heartbeat.clone(),
        };
        let heartbeat = tokio::spawn(heartbeat(
            self.queue.clone(),
            running.clone(),
            self.opts.lease,
            self.opts.heartbeat_every(),
            stop_heartbeat.clone(),
        ));
        // The worker's record for `Queue::workers`: what its handlers run now.
        let worker_id = self.opts.id.clone().unwrap_or_else(default_id);
        let beating = Beating::start(
            self.queue.clone(),
            Identity {
                id: worker_id.clone(),
                concurrency: self.opts.concurrency,
                heartbeat: self.opts.heartbeat_every(),
            },
            shutdown.clone(),
            {
                let running = running.clone();
                move || {
                    lock_running(&running)
                        .iter()
                        .filter(|(_, l)| !l.settling)
                        .map(|((id, _, _), _)| id.clone())
                        .collect()
                }
            },
        );
        let mut idle = Idle::new(&self.queue);
        // Repeating tasks: fire due ticks between claims (see schedule.rs).
        let mut schedules = crate::queue::schedule::Ticker::new();
        let (acks, acker) = Acks::spawn(self.queue.clone(), worker_id);
        let mut error_pause = Duration::from_millis(50);
        // Since when claims fail (logged once at the start, once at the end).
        let mut unreachable_since: Option<Instant> = None;

        while !shutdown.is_cancelled() {
            while let Some(done) = tasks.try_join_next() {
                count(&mut report, done);
            }
            let free = permits.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    Some(done) = tasks.join_next() => count(&mut report, done),
                }
                continue;
            }
            let tick_in = schedules.tick(&self.queue).await;
            let claimed = match self.queue.claim_raw(free, self.opts.lease).await {
                Ok(c) => {
                    if let Some(since) = unreachable_since.take() {
                        tracing::warn!(queue = %self.queue.name(), after = ?since.elapsed(), "Redis reachable again; the worker goes on");
                    }
                    error_pause = Duration::from_millis(50);
                    c
                }
                Err(e) if e.is_retryable() => {
                    if unreachable_since.is_none() {
                        unreachable_since = Some(Instant::now());
                        tracing::warn!(queue = %self.queue.name(), error = %e, "Redis unreachable: claim failed; retrying until it answers");
                    } else {
                        tracing::debug!(queue = %self.queue.name(), error = %e, "claim failed; retrying");
                    }
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(error_pause) => {}
                    }
                    error_pause = (error_pause * 2).min(Duration::from_secs(2));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let got = claimed.tasks.len();
            let claimed_at = Instant::now();
            // When the runs start on the Redis clock, for the summary a
            // finished task keeps (only on a queue that keeps one).
            let now = claimed.now;
            for (task, (shard, shard_n, extras)) in claimed.tasks.into_iter().zip(claimed.shards) {
                let started = extras.then_some(now);
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    break;
                };
                let lease = RunningLease {
                    settling: false,
                    lease: self.opts.lease,
                    shard_n,
                };
                lock_running(&running).insert((task.id.clone(), task.fence, shard), lease);
                let (queue, handler, running) = (
                    self.queue.shard(shard, shard_n),
                    handler.clone(),
                    running.clone(),
                );
                let tally = beating.tally();
                tally.started();
                let claim = Claim {
                    task,
                    at: claimed_at,
                    started,
                    tally,
                    limit: self.opts.task_timeout,
                    grace: self.opts.timeout_grace,
                    lease: self.opts.lease,
                    shutdown: shutdown.clone(),
                };
                // Spawned as it is: a wrapping future would hold (and move) a
                // second copy of this one's state on every spawn.
                tasks.spawn(process(
                    queue,
                    acks.clone(),
                    handler,
                    claim,
                    running,
                    permit,
                ));
            }
            if got < free
                && let Some(pause) = claimed.rate_wait
                && claimed.next_due.is_some_and(|d| d.is_zero())
            {
                // At the rate limit with tasks due: sleep until the next slot
                // frees (not on the wake-up list, which would only wake us early).
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
                continue;
            }
            if got < free {
                if self.opts.exit_when_empty && tasks.is_empty() {
                    match self.queue.stats().await {
                        Ok(s) if s.is_drained() => break,
                        _ => {}
                    }
                }
                let mut wait = claimed
                    .next_due
                    .map_or(self.opts.idle_wait, |d| d.min(self.opts.idle_wait))
                    .min(tick_in)
                    .max(Duration::from_millis(1));
                if self.opts.exit_when_empty && !tasks.is_empty() {
                    // Notice soon when the last running task drains the queue.
                    wait = wait.min(Duration::from_millis(50));
                }
                if !claimed.next_due.is_some_and(|d| d.is_zero()) {
                    // Only shutdown may cut the blocking wait short: a BLPOP dropped
                    // mid-call stays blocked in Redis and would swallow the next
                    // wake-up. Finished tasks are counted on the next turn; new work
                    // (enqueue, nack, a task given back) pushes a wake-up marker.
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = idle.wait(wait) => {}
                    }
                }
            }
        }

        // Shutdown: no more claims; let running tasks finish within the grace period.
        let deadline = Instant::now() + self.opts.grace;
        while !tasks.is_empty() {
            match tokio::time::timeout_at(deadline, tasks.join_next()).await {
                Ok(Some(done)) => count(&mut report, done),
                Ok(None) => break,
                Err(_) => {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        stop_heartbeat.cancel();
        let _ = heartbeat.await;
        drop(acks);
        let _ = acker.await;
        let left: Vec<(Run, u16)> = lock_running(&running)
            .drain()
            .map(|(run, l)| (run, l.shard_n))
            .collect();
        if !left.is_empty() {
            match give_all_back(&self.queue, left).await {
                Ok(n) => report.returned += u64::try_from(n).unwrap_or(0),
                Err(e) => {
                    tracing::warn!(error = %e, "giving tasks back failed; their leases will expire")
                }
            }
        }
        beating.stop().await;
        Ok(report)
    }
}

fn count(report: &mut WorkerReport, done: std::result::Result<Outcome, tokio::task::JoinError>) {
    match done {
        Ok(Outcome::Acked) => report.acked += 1,
        Ok(Outcome::Retried) => report.retried += 1,
        Ok(Outcome::Dead) => report.dead += 1,
        Ok(Outcome::Lost) => report.lost += 1,
        Ok(Outcome::Returned) => report.returned += 1,
        Err(_) => {} // aborted at shutdown: given back with the rest
    }
}

/// A claimed task, when the claim's reply came, the worker's counts (for
/// its heartbeat record), the worker's default time limit and how long after
/// a limit the handler is dropped.
struct Claim {
    task: Task,
    at: Instant,
    /// When the claim was made (ms, Redis clock), for the acks of a queue
    /// whose finished tasks keep a summary (`None`: not sent).
    started: Option<u64>,
    tally: Arc<crate::queue::beat::Tally>,
    limit: Option<Duration>,
    grace: Duration,
    /// The worker's lease (a run's context never shortens it).
    lease: Duration,
    /// The worker's shutdown, for a handler's [`Failure::Stop`].
    shutdown: CancellationToken,
}

/// Run the handler (isolated, so a panic is a failure, not a crash), then ack or nack.
async fn process<F, Fut, T, E>(
    queue: Queue,
    acks: Acks,
    handler: Arc<F>,
    Claim {
        mut task,
        at,
        started,
        tally,
        limit,
        grace,
        lease,
        shutdown,
    }: Claim,
    running: Running,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Outcome
where
    F: Fn(Task, RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
    T: TaskOutput,
    E: Display + Send + 'static,
{
    // The handler sees the limit it runs under: its own, else the worker's.
    task.timeout = task.timeout.or(limit);
    // A panic in the handler is a failure of this task, not a crash of the
    // worker; aborting this future (shutdown after the grace period) drops
    // the handler with it, and so does its time limit.
    let context = RunContext {
        queue: queue.clone(),
        id: task.id.clone(),
        fence: task.fence,
        attempt: task.attempt,
        running: running.clone(),
        min_lease: lease,
    };
    let run = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(handler(
        task.clone(),
        context,
    )));
    let ran = match task.timeout {
        Some(limit) => tokio::time::timeout(limit.saturating_add(grace), run)
            .await
            .ok(),
        None => Some(run.await),
    };
    let retry = |e: String| (Vec::new(), Some((e, Failure::Retry)));
    let (result, error) = match ran {
        // A TaskOutput of the caller's may panic too: a failure as well.
        Some(Ok(Ok(output))) => {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| output.into_result())) {
                Err(_) => retry("the handler's result panicked".to_string()),
                // No retry can store it: dead at once (issue 33).
                Ok(Some(r)) if r.len() > crate::queue::MAX_RESULT_BYTES => (
                    Vec::new(),
                    Some((
                        format!(
                            "result too large: {} bytes is more than the limit of {} bytes",
                            r.len(),
                            crate::queue::MAX_RESULT_BYTES
                        ),
                        Failure::Fatal,
                    )),
                ),
                Ok(r) => (r.unwrap_or_default(), None),
            }
        }
        Some(Ok(Err(e))) => {
            let failure = (&e as &dyn std::any::Any)
                .downcast_ref::<TaskError>()
                .map_or(Failure::Retry, TaskError::failure);
            (Vec::new(), Some((e.to_string(), failure)))
        }
        Some(Err(_)) => retry("the handler panicked".to_string()),
        None => retry(TIMED_OUT.to_string()),
    };
    if let Some((_, Failure::Stop)) = &error {
        shutdown.cancel();
    }
    queue.metrics.ran(at.elapsed());
    // The handler is done: its slot can take the next task while the ack
    // is on its way (claims and acks overlap instead of taking turns).
    drop(permit);
    let run = (task.id.clone(), task.fence, queue.shard_index());
    if let Some(l) = lock_running(&running).get_mut(&run) {
        l.settling = true;
    }
    let outcome = match &error {
        Some((why, Failure::Stop)) => give_back(&queue, &task, why).await,
        _ => {
            let error = error.as_ref().map(|(e, f)| (e.as_str(), *f));
            settle(&queue, &acks, &task, started, result, error).await
        }
    };
    lock_running(&running).remove(&run);
    tally.settled(matches!(outcome, Outcome::Acked));
    outcome
}

/// Acks of finished tasks, batched: whatever accumulated while the previous
/// batch was on its way goes in one script (at most 256), so a busy worker
/// sends far fewer scripts than tasks and an idle one adds no delay.
#[derive(Clone)]
struct Acks(tokio::sync::mpsc::UnboundedSender<AckRequest>);

struct AckRequest {
    /// The handle of the task's shard.
    queue: Queue,
    id: String,
    fence: Fence,
    /// The task's result (empty: none).
    result: Vec<u8>,
    /// When its run started (ms, Redis clock; `None`: not sent).
    started: Option<u64>,
    reply: tokio::sync::oneshot::Sender<std::result::Result<i64, String>>,
}

impl Acks {
    /// The acker of the worker `worker_id`.
    fn spawn(queue: Queue, worker_id: String) -> (Acks, tokio::task::JoinHandle<()>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Acks(tx), tokio::spawn(ack_batches(queue, worker_id, rx)))
    }

    /// 1 acked, 0 / -1 lease lost (see ack.lua).
    async fn ack(
        &self,
        queue: &Queue,
        id: &str,
        fence: Fence,
        result: Vec<u8>,
        started: Option<u64>,
    ) -> Result<i64> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let unavailable = |why: String| Error::Unavailable { source: why.into() };
        self.0
            .send(AckRequest {
                queue: queue.clone(),
                id: id.to_string(),
                fence,
                result,
                started,
                reply,
            })
            .map_err(|_| unavailable("the ack batcher stopped".into()))?;
        match answer.await {
            Ok(Ok(code)) => Ok(code),
            Ok(Err(why)) => Err(unavailable(why)),
            Err(_) => Err(unavailable("the ack batcher stopped".into())),
        }
    }
}

async fn ack_batches(
    _queue: Queue,
    worker_id: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<AckRequest>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        // One script per shard (a queue that is not sharded has one).
        let mut shards: Vec<Vec<AckRequest>> = Vec::new();
        for r in batch {
            match shards
                .iter_mut()
                .find(|s| s[0].queue.shard_index() == r.queue.shard_index())
            {
                Some(s) => s.push(r),
                None => shards.push(vec![r]),
            }
        }
        for batch in shards {
            ack_one_shard(&worker_id, batch).await;
        }
    }
}

/// Ack a batch of one shard in one script, and answer each request.
async fn ack_one_shard(worker_id: &str, batch: Vec<AckRequest>) {
    let queue = batch[0].queue.clone();
    {
        let refs: Vec<crate::queue::ops::Finished<'_>> = batch
            .iter()
            .map(|r| {
                let run = r.started.map(|at| (at, worker_id));
                (r.id.as_str(), r.fence, r.result.as_slice(), run)
            })
            .collect();
        match queue.ack_many(&refs).await {
            Ok(codes) if codes.len() == batch.len() => {
                for (r, code) in batch.into_iter().zip(codes) {
                    let _ = r.reply.send(Ok(code));
                }
            }
            Ok(_) => {
                for r in batch {
                    let _ = r.reply.send(Err("short ack reply".into()));
                }
            }
            Err(e) => {
                for r in batch {
                    let _ = r.reply.send(Err(format!("ack failed: {e}")));
                }
            }
        }
    }
}

/// Give a task back untried ([`Failure::Stop`]); when that fails, its lease
/// runs out instead.
async fn give_back(queue: &Queue, task: &Task, why: &str) -> Outcome {
    match queue.abandon_many(&[(&task.id, task.fence)]).await {
        Ok(1) => {
            tracing::info!(queue = %queue.name(), id = %task.id, why, "task given back; the worker stops");
            Outcome::Returned
        }
        Ok(_) => Outcome::Lost,
        Err(e) => {
            tracing::warn!(queue = %queue.name(), id = %task.id, error = %e, "could not give the task back; its lease will run out");
            Outcome::Lost
        }
    }
}

/// Ack or nack, retrying transient errors for a while (the lease is the limit).
async fn settle(
    queue: &Queue,
    acks: &Acks,
    task: &Task,
    started: Option<u64>,
    output: Vec<u8>,
    error: Option<(&str, Failure)>,
) -> Outcome {
    let mut pause = Duration::from_millis(20);
    loop {
        let result = match error {
            None => acks
                .ack(queue, &task.id, task.fence, output.clone(), started)
                .await
                .map(|c| match c {
                    1 => Outcome::Acked,
                    _ => Outcome::Lost,
                }),
            Some((e, failure)) => {
                let max_attempts = match failure {
                    Failure::Fatal => 1,
                    _ => queue.max_attempts,
                };
                queue
                    .nack_within(task, queue.backoff_for(task.attempt), e, max_attempts)
                    .await
                    .map(|n| match n {
                        Nacked::Retrying => Outcome::Retried,
                        Nacked::Dead => Outcome::Dead,
                    })
                    .or_else(|err| match err {
                        Error::LeaseLost { .. } => Ok(Outcome::Lost),
                        other => Err(other),
                    })
            }
        };
        match result {
            Ok(Outcome::Lost) => {
                tracing::warn!(queue = %queue.name(), id = %task.id, "lease lost before the task was settled");
                return Outcome::Lost;
            }
            Ok(o) => return o,
            Err(e) if e.is_retryable() && pause < Duration::from_secs(10) => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => {
                tracing::warn!(queue = %queue.name(), id = %task.id, error = %e, "could not settle; the lease will expire and the task come back");
                return Outcome::Lost;
            }
        }
    }
}

/// Renew every running lease in one script per tick.
async fn heartbeat(
    queue: Queue,
    running: Running,
    _lease: Duration,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // Most runs have the worker's lease; those whose handler asked for a
        // longer one (RunContext::extend) are renewed to theirs.
        // And one script per shard of a sharded queue.
        let mut by_lease: Vec<(Duration, ShardId, ShardRuns)> = Vec::new();
        for ((id, fence, i), l) in lock_running(&running).iter() {
            let shard = (*i, l.shard_n);
            let run = (id.clone(), *fence);
            match by_lease
                .iter_mut()
                .find(|(d, s, _)| *d == l.lease && *s == shard)
            {
                Some((_, _, runs)) => runs.push(run),
                None => by_lease.push((l.lease, shard, vec![run])),
            }
        }
        for (lease, (i, n), leases) in &by_lease {
            renew(&queue.shard(*i, *n), &running, leases, *lease).await;
        }
    }
}

/// Renew `leases` to `lease` from now, in scripts of at most 1000.
async fn renew(queue: &Queue, running: &Running, leases: &[(String, Fence)], lease: Duration) {
    {
        for chunk in leases.chunks(1000) {
            let refs: Vec<(&str, Fence)> = chunk.iter().map(|(id, f)| (id.as_str(), *f)).collect();
            match queue.extend_many(&refs, lease).await {
                Ok(codes) => {
                    // A task settled, or being settled, while the renewal
                    // was on its way is no loss: its ack may have been
                    // applied before the renewal although its reply has not
                    // reached the task yet. A real loss of such a task is
                    // reported by its settle.
                    let still = lock_running(running);
                    let shard = queue.shard_index();
                    let lost = chunk
                        .iter()
                        .zip(&codes)
                        .filter(|((id, fence), code)| {
                            **code != 1
                                && still
                                    .get(&(id.clone(), *fence, shard))
                                    .is_some_and(|l| !l.settling)
                        })
                        .count();
                    if lost > 0 {
                        tracing::warn!(queue = %queue.name(), lost, "leases lost at renewal");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "lease renewal failed; retrying next tick"),
            }
        }
    }
}
