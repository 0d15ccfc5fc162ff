//! The worker runtime: claim in batches, run a handler per task with bounded
//! concurrency, renew every running lease in one script per heartbeat, ack or
//! retry, block (not poll) while idle, and shut down gracefully.

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
use crate::queue::{Nacked, Queue, Task};
use crate::token::Fence;

/// How a [`Worker`] runs.
///
/// ```
/// use std::time::Duration;
/// let opts = dlm::queue::WorkerOptions::new()
///     .concurrency(64)
///     .lease(Duration::from_secs(30))
///     .grace(Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOptions {
    concurrency: usize,
    lease: Duration,
    heartbeat: Option<Duration>,
    grace: Duration,
    idle_wait: Duration,
    exit_when_empty: bool,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            concurrency: 16,
            lease: Duration::from_secs(30),
            heartbeat: None,
            grace: Duration::from_secs(10),
            idle_wait: Duration::from_secs(1),
            exit_when_empty: false,
        }
    }
}

impl WorkerOptions {
    /// Defaults: 16 tasks at once, 30 s leases renewed every 10 s, 10 s grace.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many handlers run at once (1 ..= 10 000). A task whose handler has
    /// returned frees its slot at once; its ack travels in the next batch
    /// while the slot already runs another task.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// The lease of a claimed task (a crashed worker's tasks come back after
    /// at most this plus one idle wait).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often running leases are renewed (default lease / 3).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
        self
    }

    /// How long running tasks may finish after shutdown is asked for; the
    /// rest are given back to the queue at once.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The longest an idle worker blocks before looking again (default 1 s;
    /// it also wakes at once on an enqueue and when a delayed task is due).
    pub fn idle_wait(mut self, wait: Duration) -> Self {
        self.idle_wait = wait;
        self
    }

    /// Stop once nothing is waiting, due later or in flight (any worker's).
    pub fn exit_when_empty(mut self, on: bool) -> Self {
        self.exit_when_empty = on;
        self
    }

    fn validate(&self) -> Result<()> {
        if self.concurrency == 0 || self.concurrency > 10_000 {
            return Err(Error::invalid("concurrency", "must be 1 ..= 10000"));
        }
        let heartbeat = self.heartbeat_every();
        if heartbeat.is_zero() || heartbeat >= self.lease {
            return Err(Error::invalid(
                "heartbeat",
                "must be shorter than the lease",
            ));
        }
        if self.idle_wait < Duration::from_millis(1) || self.idle_wait > Duration::from_secs(60) {
            return Err(Error::invalid("idle wait", "must be 1ms ..= 60s"));
        }
        Ok(())
    }

    fn heartbeat_every(&self) -> Duration {
        self.heartbeat.unwrap_or(self.lease / 3)
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Tasks handled successfully and acked.
    pub acked: u64,
    /// Tasks that failed and were queued for a retry.
    pub retried: u64,
    /// Tasks that failed their last attempt and went to the dead-letter set.
    pub dead: u64,
    /// Tasks whose lease was lost (expired and re-claimed elsewhere) before ack.
    pub lost: u64,
    /// Tasks given back to the queue at shutdown.
    pub returned: u64,
}

type Running = Arc<Mutex<HashMap<String, Fence>>>;

/// Runs a handler for every task of a queue. Get one from [`Queue::worker`].
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

fn lock_running(r: &Running) -> std::sync::MutexGuard<'_, HashMap<String, Fence>> {
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
    pub async fn run<F, Fut, E>(
        self,
        handler: F,
        shutdown: CancellationToken,
    ) -> Result<WorkerReport>
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.opts.validate()?;
        self.queue.ready()?;
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
        let mut idle = Idle::new(&self.queue);
        let (acks, acker) = Acks::spawn(self.queue.clone());
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
            for task in claimed.tasks {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    break;
                };
                lock_running(&running).insert(task.id.clone(), task.fence);
                let (queue, handler, running) =
                    (self.queue.clone(), handler.clone(), running.clone());
                let acks = acks.clone();
                tasks.spawn(process(queue, acks, handler, task, running, permit));
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
        let left: Vec<(String, Fence)> = lock_running(&running).drain().collect();
        if !left.is_empty() {
            let refs: Vec<(&str, Fence)> = left.iter().map(|(id, f)| (id.as_str(), *f)).collect();
            match self.queue.abandon_many(&refs).await {
                Ok(n) => report.returned += n as u64,
                Err(e) => {
                    tracing::warn!(error = %e, "giving tasks back failed; their leases will expire")
                }
            }
        }
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

/// Run the handler (isolated, so a panic is a failure, not a crash), then ack or nack.
async fn process<F, Fut, E>(
    queue: Queue,
    acks: Acks,
    handler: Arc<F>,
    task: Task,
    running: Running,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Outcome
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
{
    // A panic in the handler is a failure of this task, not a crash of the
    // worker; aborting this future (shutdown after the grace period) drops
    // the handler with it.
    let run = std::panic::AssertUnwindSafe(handler(task.clone()));
    let error = match futures_util::FutureExt::catch_unwind(run).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("the handler panicked".to_string()),
    };
    // The handler is done: its slot can take the next task while the ack
    // is on its way (claims and acks overlap instead of taking turns).
    drop(permit);
    let outcome = settle(&queue, &acks, &task, error.as_deref()).await;
    lock_running(&running).remove(&task.id);
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
    reply: tokio::sync::oneshot::Sender<std::result::Result<i64, String>>,
}

impl Acks {
    fn spawn(queue: Queue) -> (Acks, tokio::task::JoinHandle<()>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Acks(tx), tokio::spawn(ack_batches(queue, rx)))
    }

    /// 1 acked, 0 / -1 lease lost (see ack.lua).
    async fn ack(&self, id: &str, fence: Fence) -> Result<i64> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let unavailable = |why: String| Error::Unavailable { source: why.into() };
        self.0
            .send(AckRequest {
                id: id.to_string(),
                fence,
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

async fn ack_batches(queue: Queue, mut rx: tokio::sync::mpsc::UnboundedReceiver<AckRequest>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < 256 {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let refs: Vec<(&str, Fence)> = batch.iter().map(|r| (r.id.as_str(), r.fence)).collect();
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
async fn settle(queue: &Queue, acks: &Acks, task: &Task, error: Option<&str>) -> Outcome {
    let mut pause = Duration::from_millis(20);
    loop {
        let result = match error {
            None => acks.ack(&task.id, task.fence).await.map(|c| match c {
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
        let leases: Vec<(String, Fence)> = lock_running(&running)
            .iter()
            .map(|(id, f)| (id.clone(), *f))
            .collect();
        for chunk in leases.chunks(1000) {
            let refs: Vec<(&str, Fence)> = chunk.iter().map(|(id, f)| (id.as_str(), *f)).collect();
            match queue.extend_many(&refs, lease).await {
                Ok(codes) => {
                    // A task settled while the renewal was on its way is not a loss.
                    let still = lock_running(&running);
                    let lost = chunk
                        .iter()
                        .zip(&codes)
                        .filter(|((id, f), code)| **code != 1 && still.get(id) == Some(f))
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

/// Blocking on the queue's wake-up list, on a dedicated connection without a
/// response timeout; falls back to sleeping when it cannot be had.
struct Idle {
    client: Option<redis::Client>,
    key: Option<String>,
    conn: Option<redis::aio::MultiplexedConnection>,
}

impl Idle {
    fn new(queue: &Queue) -> Self {
        let key = crate::keys::queue_keys(queue.name())
            .ok()
            .and_then(|k| k.into_iter().nth(9));
        Idle {
            client: queue.redis().cloned(),
            key,
            conn: None,
        }
    }

    async fn wait(&mut self, timeout: Duration) {
        let (Some(client), Some(key)) = (&self.client, &self.key) else {
            tokio::time::sleep(timeout).await;
            return;
        };
        if self.conn.is_none() {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(2)))
                .set_response_timeout(None);
            match tokio::time::timeout(
                Duration::from_secs(3),
                client.get_multiplexed_async_connection_with_config(&config),
            )
            .await
            {
                Ok(Ok(c)) => self.conn = Some(c),
                _ => {
                    tokio::time::sleep(timeout).await;
                    return;
                }
            }
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let secs = timeout.as_secs_f64().max(0.001);
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(key).arg(secs);
        let blpop = cmd.query_async::<redis::Value>(conn);
        // The server answers within `timeout`; a dead connection must not hang us.
        match tokio::time::timeout(timeout + Duration::from_secs(2), blpop).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => {
                self.conn = None;
                tokio::time::sleep(timeout.min(Duration::from_millis(200))).await;
            }
        }
    }
}
