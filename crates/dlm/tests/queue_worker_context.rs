//! The worker API issue 33 added, against a real redis-server:
//! [`dlm::queue::Worker::run_with_context`] and its [`dlm::queue::RunContext`]
//! (id, fence, attempt, progress, a longer lease), the handler's
//! [`dlm::queue::TaskError`] (retry counts an attempt, fatal dead-letters at
//! once, stop gives the task back and stops the worker gracefully), and a
//! worker whose future is dropped mid-handler giving its leases back at once.
mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{TestResult, client, server};
use dlm::CancellationToken;
use dlm::queue::{Backoff, Queue, Task, TaskError, TaskState, WorkerOptions, WorkerReport};

/// The most any step may take before it counts as a hang (the machine is shared).
const LONG: Duration = Duration::from_secs(30);

fn quick_retries(q: Queue, attempts: u32) -> Queue {
    q.max_attempts(attempts).backoff(Backoff::new(
        Duration::from_millis(10),
        Duration::from_millis(10),
    ))
}

/// Wait until `cond` holds, polling; false once `limit` passed.
async fn eventually(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Run a worker until the queue is empty, its handler failing a task with
/// `fail(task)` when that is `Some` (else acking it): the report, and how
/// many times the handler failed.
async fn drain(
    q: &Queue,
    fail: impl Fn(&Task) -> Option<TaskError> + Send + Sync + 'static,
) -> dlm::Result<(WorkerReport, u32)> {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let report = q
        .worker(WorkerOptions::new().exit_when_empty(true))
        .run_with_context(
            move |task, _| {
                let failed = fail(&task);
                if failed.is_some() {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                async move { failed.map_or(Ok(()), Err) }
            },
            CancellationToken::new(),
        )
        .await?;
    Ok((report, calls.load(Ordering::SeqCst)))
}

/// What a handler saw of its run, per attempt.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    id: String,
    attempt: u32,
    fence_matches: bool,
    progress: Option<(u8, String)>,
    /// How far the lease deadline moved when the handler extended it (ms).
    extended_by: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_context_reports_progress_extends_and_counts_attempts() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = quick_retries(c.queue("ctx"), 3);
    q.push("t1").await?;
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let report = {
        let seen = seen.clone();
        let q = q.clone();
        q.clone()
            .worker(
                WorkerOptions::new()
                    .lease(Duration::from_secs(2))
                    .exit_when_empty(true),
            )
            .run_with_context(
                move |task, run| {
                    let seen = seen.clone();
                    let q = q.clone();
                    async move {
                        let e = |e: dlm::Error| TaskError::fatal(e.to_string());
                        run.progress(40, "half way").await.map_err(e)?;
                        let progress = q.progress(run.id()).await.map_err(e)?;
                        let before = q.task(run.id()).await.map_err(e)?.and_then(|d| d.score);
                        run.extend(Duration::from_secs(120)).await.map_err(e)?;
                        let after = q.task(run.id()).await.map_err(e)?.and_then(|d| d.score);
                        let extended_by = match (before, after) {
                            (Some(b), Some(a)) => a.saturating_sub(b),
                            _ => 0,
                        };
                        lock(&seen).push(Seen {
                            id: run.id().to_string(),
                            attempt: run.attempt(),
                            fence_matches: run.fence() == task.fence,
                            progress: progress.map(|p| (p.pct, p.message)),
                            extended_by,
                        });
                        if run.attempt() == 1 {
                            return Err(TaskError::retry("not yet"));
                        }
                        Ok("done")
                    }
                },
                CancellationToken::new(),
            )
            .await?
    };
    assert_eq!(
        (report.acked, report.retried, report.dead),
        (1, 1, 0),
        "{report:?}"
    );
    let seen = lock(&seen).clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.id, "t1");
        assert_eq!(s.attempt, u32::try_from(i)? + 1, "{seen:?}");
        assert!(s.fence_matches, "{seen:?}");
        assert_eq!(s.progress, Some((40, "half way".to_string())), "{seen:?}");
        // From a 2 s lease to 120 s: the deadline moved by about 118 s.
        assert!(s.extended_by > 100_000, "{seen:?}");
    }
    assert_eq!(q.result("t1").await?, Some(b"done".to_vec()));
    let t = q.task("t1").await?.ok_or("t1 is gone")?;
    assert_eq!((t.state, t.attempts), (TaskState::Completed, 2), "{t:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_counts_attempts_until_the_last_then_dead_letters() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = quick_retries(c.queue("retry"), 3);
    q.push("flaky").await?;
    let (report, calls) = drain(&q, |_| Some(TaskError::retry("flaky"))).await?;
    assert_eq!(calls, 3);
    assert_eq!(
        (report.retried, report.dead, report.acked),
        (2, 1, 0),
        "{report:?}"
    );
    let t = q.task("flaky").await?.ok_or("flaky is gone")?;
    assert_eq!((t.state, t.attempts), (TaskState::Dead, 3), "{t:?}");
    assert_eq!(t.error.as_deref(), Some("flaky"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_error_dead_letters_at_once_without_a_retry() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = quick_retries(c.queue("fatal"), 5);
    q.push("bad").await?;
    q.push("good").await?;
    let (report, calls) = drain(&q, |task| {
        (task.id == "bad").then(|| TaskError::fatal("order 7 does not exist"))
    })
    .await?;
    assert_eq!(calls, 1, "a fatal error is never retried");
    assert_eq!(
        (report.dead, report.retried, report.acked),
        (1, 0, 1),
        "{report:?}"
    );
    let t = q.task("bad").await?.ok_or("bad is gone")?;
    assert_eq!((t.state, t.attempts), (TaskState::Dead, 1), "{t:?}");
    let dead = q.dead(10).await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, "bad");
    assert_eq!(dead[0].error.as_deref(), Some("order 7 does not exist"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_gives_the_task_back_and_stops_the_worker_gracefully() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = quick_retries(c.queue("stop"), 3);
    q.push("long").await?;
    q.push("stopper").await?;
    let long_started = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let run = {
        let long_started = long_started.clone();
        q.worker(WorkerOptions::new().concurrency(2).grace(LONG))
            .run_with_context(
                move |task, _| {
                    let long_started = long_started.clone();
                    async move {
                        if task.id == "long" {
                            long_started.store(true, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            return Ok("long done");
                        }
                        // Stop once the other task runs: it must be let finish.
                        let started =
                            eventually(LONG, || long_started.load(Ordering::SeqCst)).await;
                        Err(TaskError::stop(format!(
                            "process stopping (long started: {started})"
                        )))
                    }
                },
                shutdown.clone(),
            )
    };
    // It returns by itself: nobody cancels `shutdown`, and it is not exit_when_empty.
    let report = tokio::time::timeout(LONG, run).await??;
    assert!(!shutdown.is_cancelled());
    assert_eq!(
        (report.acked, report.returned, report.retried, report.dead),
        (1, 1, 0, 0),
        "{report:?}"
    );
    // The running handler finished (graceful), the stopping task is back, untried and unfailed.
    assert_eq!(q.result("long").await?, Some(b"long done".to_vec()));
    let t = q.task("stopper").await?.ok_or("stopper is gone")?;
    assert_eq!(t.state, TaskState::Waiting, "{t:?}");
    let st = q.stats().await?;
    assert_eq!(
        (st.waiting, st.inflight, st.failed, st.dead),
        (1, 0, 0, 0),
        "{st:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_worker_gives_its_leases_back() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("dropped");
    q.push("slow").await?;
    let lease = Duration::from_secs(30);
    let started = Arc::new(AtomicBool::new(false));
    let first = {
        let started = started.clone();
        let w = q.worker(WorkerOptions::new().lease(lease));
        tokio::spawn(w.run(
            move |_| {
                let started = started.clone();
                async move {
                    started.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(300)).await;
                    Ok::<(), std::io::Error>(())
                }
            },
            CancellationToken::new(),
        ))
    };
    assert!(
        eventually(LONG, || started.load(Ordering::SeqCst)).await,
        "the handler never started"
    );
    let t = q.task("slow").await?.ok_or("slow is gone")?;
    assert_eq!(t.state, TaskState::InFlight, "{t:?}");
    // Drop the running worker, mid-handler (as an aborted task or a Python cancel does).
    first.abort();
    assert!(first.await.is_err_and(|e| e.is_cancelled()));
    let dropped = Instant::now();

    // A second worker gets the task at once, long before the 30 s lease would run out.
    let stop = CancellationToken::new();
    let report = {
        let stop_in_handler = stop.clone();
        let second = q.worker(
            WorkerOptions::new()
                .lease(lease)
                .idle_wait(Duration::from_millis(100)),
        );
        tokio::time::timeout(
            Duration::from_secs(10),
            second.run(
                move |_| {
                    let stop = stop_in_handler.clone();
                    async move {
                        stop.cancel();
                        Ok::<_, std::io::Error>("second")
                    }
                },
                stop.clone(),
            ),
        )
        .await??
    };
    let waited = dropped.elapsed();
    assert!(waited < Duration::from_secs(10), "took {waited:?}");
    assert_eq!(report.acked, 1, "{report:?}");
    assert_eq!(q.result("slow").await?, Some(b"second".to_vec()));
    let t = q.task("slow").await?.ok_or("slow is gone")?;
    // Given back untried (not expired and re-claimed): no failure recorded, and the dropped
    // worker's attempt is not counted.
    assert_eq!(
        (t.state, t.attempts, t.error),
        (TaskState::Completed, 1, None)
    );
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
