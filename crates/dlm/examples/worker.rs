//! A task queue worker: 20 tasks, 4 at a time, one retry.
//!
//! Tasks are enqueued, then a worker runs a handler for each with up to 4
//! in flight, and stops when the queue is drained. Task `task-07` fails its
//! first attempt; the worker queues it again with backoff and the second
//! attempt succeeds. Every task carries its lease's fencing token
//! (`task.fence`) for storage that must refuse a worker whose lease was
//! taken over.
//!
//! Run: `cargo run -p dlm --example worker [REDIS_URL]`
//! (or set `DLM_REDIS_URL`; without either it starts a private redis-server).
mod common;

use std::time::Duration;

use dlm::queue::{Backoff, NewTask, OnDuplicate, WorkerOptions};
use dlm::{CancellationToken, Client};

const TASKS: u64 = 20;

#[tokio::main]
async fn main() -> Result<(), common::BoxError> {
    let servers = common::servers(1)?;
    let client = Client::connect(servers.url()).await?;
    let queue = client.queue("example:thumbnails").backoff(Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(1),
    ));

    let tasks: Vec<NewTask> = (0..TASKS)
        .map(|i| NewTask::new(format!("task-{i:02}")).payload(format!("image {i}.png")))
        .collect();
    queue
        .enqueue(tasks, Duration::ZERO, OnDuplicate::Keep)
        .await?;
    println!("enqueued {TASKS} tasks: {:?}", queue.stats().await?);

    let report = queue
        .worker(
            WorkerOptions::new()
                .concurrency(4)
                .idle_wait(Duration::from_millis(50))
                .exit_when_empty(true),
        )
        .run(
            |task| async move {
                let payload = String::from_utf8_lossy(task.payload.as_deref().unwrap_or_default())
                    .into_owned();
                if task.id == "task-07" && task.attempt == 1 {
                    println!("{}: attempt 1 fails (fence {})", task.id, task.fence);
                    return Err(format!("{}: transient failure", task.id));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                println!(
                    "{}: attempt {} handled {payload:?} (fence {})",
                    task.id, task.attempt, task.fence
                );
                Ok(())
            },
            CancellationToken::new(),
        )
        .await?;

    println!("report: {report:?}");
    let stats = queue.stats().await?;
    println!("queue after: {stats:?}");
    if report.acked != TASKS || report.retried != 1 || report.dead != 0 || !stats.is_drained() {
        return Err("the worker did not handle every task exactly as expected".into());
    }
    println!("ok");
    Ok(())
}
