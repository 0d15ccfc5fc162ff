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
}

/// The running tasks by lease: (id, fence), not the id alone. The same id
/// may run twice in one worker (its first lease ran out while the handler
/// went on, and a claim leased it again); the first run's end must leave
/// the second's entry, and so its renewals, alone (issue 31).
type Running = Arc<Mutex<HashMap<(String, Fence), RunningLease>>>;

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

fn lock_running(r: &Running) -> std::sync::MutexGuard<'_, HashMap<(String, Fence), RunningLease>> {
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
                        .map(|((id, _), _)| id.clone())
                        .collect()
                }
            },
        );
        let mut idle = Idle::new(&self.queue);
        // Repeating tasks: fire due ticks between claims (see schedule.rs).
        let mut schedules = crate::queue::schedule::Ticker::new();
        let (acks, acker) = Acks::spawn(self.queue.clone(), worker_id);
        let mut error_pause = Duration::from_millis(50);

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
                    error_pause = Duration::from_millis(50);
                    c
                }
                Err(e) if e.is_retryable() => {
                    tracing::warn!(queue = %self.queue.name(), error = %e, "claim failed; retrying");
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
            let started = claimed.extras.then_some(claimed.now);
            for task in claimed.tasks {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    break;
                };
                let lease = RunningLease { settling: false };
                lock_running(&running).insert((task.id.clone(), task.fence), lease);
                let (queue, handler, running) =
                    (self.queue.clone(), handler.clone(), running.clone());
                let tally = beating.tally();
                tally.started();
                let claim = Claim {
                    task,
                    at: claimed_at,
                    started,
                    tally,
                    limit: self.opts.task_timeout,
                    grace: self.opts.timeout_grace,
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
        let left: Vec<(String, Fence)> =
            lock_running(&running).drain().map(|(run, _)| run).collect();
        if !left.is_empty() {
            let refs: Vec<(&str, Fence)> = left.iter().map(|(id, f)| (id.as_str(), *f)).collect();
            match self.queue.abandon_many(&refs).await {
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
    }: Claim,
    running: Running,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Outcome
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
    T: TaskOutput,
    E: Display + Send + 'static,
{
    // The handler sees the limit it runs under: its own, else the worker's.
    task.timeout = task.timeout.or(limit);
    // A panic in the handler is a failure of this task, not a crash of the
    // worker; aborting this future (shutdown after the grace period) drops
    // the handler with it, and so does its time limit.
    let run =
        futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(handler(task.clone())));
    let ran = match task.timeout {
        Some(limit) => tokio::time::timeout(limit.saturating_add(grace), run)
            .await
            .ok(),
        None => Some(run.await),
    };
    let (result, error) = match ran {
        // A TaskOutput of the caller's may panic too: a failure as well.
        Some(Ok(Ok(output))) => {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| output.into_result())) {
                Err(_) => (
                    Vec::new(),
                    Some("the handler's result panicked".to_string()),
                ),
                Ok(Some(r)) if r.len() > crate::queue::MAX_RESULT_BYTES => (
                    Vec::new(),
                    Some(format!(
                        "result too large: {} bytes is more than the limit of {} bytes",
                        r.len(),
                        crate::queue::MAX_RESULT_BYTES
                    )),
                ),
                Ok(r) => (r.unwrap_or_default(), None),
            }
        }
        Some(Ok(Err(e))) => (Vec::new(), Some(e.to_string())),
        Some(Err(_)) => (Vec::new(), Some("the handler panicked".to_string())),
        None => (Vec::new(), Some(TIMED_OUT.to_string())),
    };
    queue.metrics.ran(at.elapsed());
    // The handler is done: its slot can take the next task while the ack
    // is on its way (claims and acks overlap instead of taking turns).
    drop(permit);
    let run = (task.id.clone(), task.fence);
    if let Some(l) = lock_running(&running).get_mut(&run) {
        l.settling = true;
    }
    let outcome = settle(&queue, &acks, &task, started, result, error.as_deref()).await;
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
        id: &str,
        fence: Fence,
        result: Vec<u8>,
        started: Option<u64>,
    ) -> Result<i64> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let unavailable = |why: String| Error::Unavailable { source: why.into() };
        self.0
            .send(AckRequest {
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
    queue: Queue,
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
        let refs: Vec<crate::queue::ops::Finished<'_>> = batch
            .iter()
            .map(|r| {
                let run = r.started.map(|at| (at, worker_id.as_str()));
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

/// Ack or nack, retrying transient errors for a while (the lease is the limit).
async fn settle(
    queue: &Queue,
    acks: &Acks,
    task: &Task,
    started: Option<u64>,
    output: Vec<u8>,
    error: Option<&str>,
) -> Outcome {
    let mut pause = Duration::from_millis(20);
    loop {
        let result = match error {
            None => acks
                .ack(&task.id, task.fence, output.clone(), started)
                .await
                .map(|c| match c {
                    1 => Outcome::Acked,
                    _ => Outcome::Lost,
                }),
            Some(e) => queue
                .nack_raw(task, queue.backoff_for(task.attempt), e)
                .await
                .map(|n| match n {
                    Nacked::Retrying => Outcome::Retried,
                    Nacked::Dead => Outcome::Dead,
                })
                .or_else(|err| match err {
                    Error::LeaseLost { .. } => Ok(Outcome::Lost),
                    other => Err(other),
                }),
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
    lease: Duration,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let leases: Vec<(String, Fence)> = lock_running(&running).keys().cloned().collect();
        for chunk in leases.chunks(1000) {
            let refs: Vec<(&str, Fence)> = chunk.iter().map(|(id, f)| (id.as_str(), *f)).collect();
            match queue.extend_many(&refs, lease).await {
                Ok(codes) => {
                    // A task settled, or being settled, while the renewal
                    // was on its way is no loss: its ack may have been
                    // applied before the renewal although its reply has not
                    // reached the task yet. A real loss of such a task is
                    // reported by its settle.
                    let still = lock_running(&running);
                    let lost = chunk
                        .iter()
                        .zip(&codes)
                        .filter(|(run, code)| {
                            **code != 1 && still.get(*run).is_some_and(|l| !l.settling)
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
