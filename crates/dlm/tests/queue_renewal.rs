//! A worker's heartbeat renews every running lease in one script while
//! finished tasks are being acked. A renewal that reaches Redis just after
//! an ack finds that lease gone: that is no loss (the task was acked), and
//! the worker must not report it as one. It did: draining 10M tasks printed
//! "leases lost at renewal" although every task was acked exactly once,
//! because the heartbeat judged a lease lost when the ack had been applied
//! in Redis but its reply had not reached the task yet.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestResult;
use dlm::queue::{NewTask, OnDuplicate, WorkerOptions};
use dlm_testkit::RedisServer;

/// Counts the warning events whose message is `what`.
#[derive(Clone)]
struct Count(&'static str, Arc<AtomicUsize>);

struct Message<'a>(&'a mut Option<String>);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut message = None;
        event.record(&mut Message(&mut message));
        if message.as_deref() == Some(self.0) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
}

// One thread: the subscriber set for this test sees every task's events.
#[tokio::test(flavor = "current_thread")]
async fn acks_racing_the_heartbeat_are_not_reported_as_lost_leases() -> TestResult {
    use tracing_subscriber::layer::SubscriberExt;
    let lost = Count("leases lost at renewal", Arc::new(AtomicUsize::new(0)));
    let subscriber = tracing_subscriber::registry().with(lost.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = RedisServer::start()?;
    let client = dlm::Client::connect(&server.url()).await?;
    let queue = client.queue("renewal-race");
    const TASKS: usize = 20_000;
    for part in 0..TASKS / 10_000 {
        let ids = (0..10_000).map(|i| NewTask::new(format!("t{part}-{i}")));
        queue
            .enqueue(ids, Duration::ZERO, OnDuplicate::Keep)
            .await?;
    }
    // A heartbeat every 2 ms renews tens of leases while acks stream by.
    let seen = Arc::new(Mutex::new(std::collections::HashMap::<String, u32>::new()));
    let opts = WorkerOptions::new()
        .concurrency(32)
        .lease(Duration::from_secs(5))
        .heartbeat(Duration::from_millis(2))
        .exit_when_empty(true);
    let counts = seen.clone();
    let report = queue
        .worker(opts)
        .run(
            move |task| {
                let counts = counts.clone();
                async move {
                    if let Ok(mut m) = counts.lock() {
                        *m.entry(task.id).or_default() += 1;
                    }
                    tokio::task::yield_now().await;
                    Ok::<(), std::io::Error>(())
                }
            },
            dlm::CancellationToken::new(),
        )
        .await?;
    assert_eq!(report.acked, TASKS as u64, "{report:?}");
    let once = seen
        .lock()
        .map(|m| m.values().all(|n| *n == 1) && m.len() == TASKS);
    assert_eq!(once.ok(), Some(true), "every task ran exactly once");
    assert_eq!(
        lost.1.load(Ordering::SeqCst),
        0,
        "no lease was lost: every one was acked"
    );
    Ok(())
}
