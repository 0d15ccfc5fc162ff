//! The metrics and tracing contract of `dlm::metrics`, against a real
//! redis-server: each test records into its own `DebuggingRecorder`, set as
//! the thread's default on a current-thread runtime (so the client's
//! background tasks record into it too).
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use dlm::queue::{Backoff, NewTask, OnDuplicate, WorkerOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio_util::sync::CancellationToken;

/// Every series of a snapshot, by name and sorted `k=v` labels.
struct Series(HashMap<(String, Vec<String>), DebugValue>);

impl Series {
    fn take(snapshotter: &Snapshotter) -> Self {
        let map = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let key = key.key();
                let mut labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                labels.sort();
                ((key.name().to_string(), labels), value)
            })
            .collect();
        Series(map)
    }

    fn get(&self, name: &str, labels: &[&str]) -> Option<&DebugValue> {
        let mut labels: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
        labels.sort();
        self.0.get(&(name.to_string(), labels))
    }

    /// A counter's value, or how many values a histogram got (0 if absent).
    fn count(&self, name: &str, labels: &[&str]) -> u64 {
        match self.get(name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            Some(DebugValue::Histogram(v)) => v.len() as u64,
            Some(DebugValue::Gauge(g)) => g.into_inner() as u64,
            None => 0,
        }
    }

    fn gauge(&self, name: &str, labels: &[&str]) -> Option<f64> {
        match self.get(name, labels) {
            Some(DebugValue::Gauge(g)) => Some(g.into_inner()),
            _ => None,
        }
    }
}

/// A recorder for this test (this thread) only.
fn recorder() -> (Snapshotter, metrics::LocalRecorderGuard<'static>) {
    let recorder: &'static DebuggingRecorder = Box::leak(Box::new(DebuggingRecorder::new()));
    let snapshotter = recorder.snapshotter();
    (snapshotter, metrics::set_default_local_recorder(recorder))
}

#[tokio::test]
async fn lock_outcomes_are_labelled() -> TestResult {
    let (snap, _guard) = recorder();
    let s = server();
    let c = client(&s).await;
    let lock = c.lock("m:a");

    let g = lock.acquire(&ttl(10_000)).await?;
    assert!(matches!(
        lock.acquire(&ttl(10_000)).await,
        Err(dlm::Error::Busy { .. })
    ));
    assert!(matches!(
        lock.acquire(&ttl(10_000).wait(Duration::from_millis(120)))
            .await,
        Err(dlm::Error::Busy { .. })
    ));
    // A task of the same client waits; the release hands the lock over.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            lock.acquire(&ttl(10_000).wait(Duration::from_secs(5)))
                .await
        })
    };
    // Time for its busy attempt and its subscription, after which it queues
    // for the hand-over: generous, since the suite runs many tests at once
    // (150 ms was too short under load).
    tokio::time::sleep(Duration::from_millis(600)).await;
    g.release().await?;
    waiter.await??.release().await?;

    let m = Series::take(&snap);
    let acquire = "dlm_lock_acquire_seconds";
    assert_eq!(m.count(acquire, &["outcome=acquired"]), 2);
    assert_eq!(m.count(acquire, &["outcome=busy"]), 1);
    assert_eq!(m.count(acquire, &["outcome=timeout"]), 1);
    assert_eq!(m.count(acquire, &["outcome=error"]), 0);
    assert_eq!(m.count("dlm_lock_wait_seconds", &[]), 1);
    assert_eq!(m.count("dlm_lock_handoff_seconds", &[]), 1);
    assert_eq!(m.count("dlm_lock_hold_seconds", &[]), 2);
    // One try each for the first two, at least two for the timed-out wait and the waiter.
    assert!(m.count("dlm_lock_attempts_total", &[]) >= 6);
    assert_eq!(m.count("dlm_lock_lost_total", &["reason=expired"]), 0);
    // No lock name label unless asked for.
    assert!(
        m.0.keys()
            .all(|(_, labels)| labels.iter().all(|l| !l.starts_with("lock=")))
    );
    Ok(())
}

#[tokio::test]
async fn lost_locks_and_renewals_are_counted() -> TestResult {
    use redis::AsyncCommands;
    let (snap, _guard) = recorder();
    let s = server();
    let c = client(&s).await;
    let mut raw = raw(&s).await;

    // Extend finds the key gone: expired.
    let g = c.lock("m:gone").acquire(&ttl(10_000)).await?;
    let _: () = raw.del(g.key()).await?;
    assert!(g.extend(Duration::from_secs(10)).await.is_err());
    assert!(g.is_lost());
    drop(g);

    // The watchdog finds another owner: taken.
    let g = c.lock("m:taken").acquire(&ttl(300).watchdog(true)).await?;
    tokio::time::sleep(Duration::from_millis(250)).await;
    let _: () = raw.set(g.key(), "someone-else").await?;
    tokio::time::timeout(Duration::from_secs(3), g.lost()).await?;
    drop(g);

    let m = Series::take(&snap);
    assert_eq!(m.count("dlm_lock_lost_total", &["reason=expired"]), 1);
    assert_eq!(m.count("dlm_lock_lost_total", &["reason=taken"]), 1);
    assert!(m.count("dlm_lock_renewals_total", &["outcome=ok"]) >= 1);
    assert_eq!(m.count("dlm_lock_renewals_total", &["outcome=lost"]), 1);
    assert_eq!(m.count("dlm_lock_hold_seconds", &[]), 2);
    Ok(())
}

#[tokio::test]
async fn lock_names_are_an_opt_in_and_bounded() -> TestResult {
    let (snap, _guard) = recorder();
    let s = server();
    let c = dlm::Client::builder()
        .metrics_lock_names(1)
        .connect(&s.url())
        .await?;
    c.lock("m:first")
        .acquire(&ttl(10_000))
        .await?
        .release()
        .await?;
    c.lock("m:second")
        .acquire(&ttl(10_000))
        .await?
        .release()
        .await?;
    c.lock("m:first")
        .acquire(&ttl(10_000))
        .await?
        .release()
        .await?;

    let m = Series::take(&snap);
    let acquire = "dlm_lock_acquire_seconds";
    assert_eq!(m.count(acquire, &["outcome=acquired", "lock=m:first"]), 2);
    assert_eq!(m.count(acquire, &["outcome=acquired", "lock=other"]), 1);
    assert_eq!(m.count(acquire, &["outcome=acquired"]), 0);
    Ok(())
}

#[tokio::test]
async fn queue_outcomes_match_the_worker_report() -> TestResult {
    let (snap, _guard) = recorder();
    let s = server();
    let c = client(&s).await;
    let q = c.queue("mq").max_attempts(2).backoff(Backoff::new(
        Duration::from_millis(10),
        Duration::from_millis(20),
    ));
    let ids = ["ok-1", "ok-2", "ok-3", "retry-1", "retry-2", "dead-1"];
    q.enqueue(ids.map(NewTask::new), Duration::ZERO, OnDuplicate::Keep)
        .await?;
    let report = q
        .worker(
            WorkerOptions::new()
                .concurrency(4)
                .exit_when_empty(true)
                .idle_wait(Duration::from_millis(20)),
        )
        .run(
            |task| async move {
                if task.id.starts_with("dead")
                    || (task.id.starts_with("retry") && task.attempt == 1)
                {
                    Err("failing on purpose")
                } else {
                    Ok(())
                }
            },
            CancellationToken::new(),
        )
        .await?;
    assert_eq!((report.acked, report.retried, report.dead), (5, 3, 1));

    // A lease lost by hand: its ack says so.
    q.enqueue([NewTask::new("late")], Duration::ZERO, OnDuplicate::Keep)
        .await?;
    let lease = q.claim(1, Duration::from_millis(20)).await?.remove(0);
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(q.reap().await?, 1);
    assert!(lease.ack().await.is_err());
    // Its second (last) lease runs out too: the claim that finds it expired
    // moves it to the dead set, and that counts as dead as well.
    let last = q.claim(1, Duration::from_millis(20)).await?;
    assert_eq!(last.len(), 1);
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(q.reap().await?, 1);
    let stats = q.stats().await?;

    let m = Series::take(&snap);
    let tasks = "dlm_queue_tasks_total";
    assert_eq!(m.count(tasks, &["queue=mq", "outcome=acked"]), 5);
    assert_eq!(m.count(tasks, &["queue=mq", "outcome=retried"]), 3);
    assert_eq!(m.count(tasks, &["queue=mq", "outcome=dead"]), 1 + 1);
    assert_eq!(m.count(tasks, &["queue=mq", "outcome=lease_lost"]), 1);
    // Every claim of a task waited once, every handler ran once.
    assert_eq!(m.count("dlm_queue_task_wait_seconds", &["queue=mq"]), 9 + 2);
    assert_eq!(m.count("dlm_queue_task_run_seconds", &["queue=mq"]), 9);
    let depth = |state: &str| m.gauge("dlm_queue_depth", &["queue=mq", &format!("state={state}")]);
    assert_eq!(depth("waiting"), Some(stats.waiting as f64));
    assert_eq!(depth("waiting"), Some(0.0));
    assert_eq!(depth("dead"), Some(2.0));
    assert_eq!(depth("in_flight"), Some(0.0));
    let oldest = m.gauge("dlm_queue_oldest_task_age_seconds", &["queue=mq"]);
    assert!(
        oldest.is_some_and(|s| (0.0..60.0).contains(&s)),
        "{oldest:?}"
    );
    Ok(())
}

#[tokio::test]
async fn shard_stats_set_the_depth_per_shard_only_when_sharded() -> TestResult {
    use dlm::queue::QueueSettings;
    let (snap, _guard) = recorder();
    let s = server();
    let c = client(&s).await;
    // One shard: the sums, no per-shard series.
    let plain = c.queue("plain");
    plain
        .enqueue([NewTask::new("a")], Duration::ZERO, OnDuplicate::Keep)
        .await?;
    assert_eq!(plain.shard_stats().await?.len(), 1);
    let m = Series::take(&snap);
    assert_eq!(
        m.gauge("dlm_queue_depth", &["queue=plain", "state=waiting"]),
        Some(1.0)
    );
    assert!(
        !m.0.keys().any(|(name, _)| name == "dlm_queue_shard_depth"),
        "no per-shard series for one shard"
    );

    // Four shards: one series per shard, summing to dlm_queue_depth.
    let q = c.queue("sq");
    q.configure(&QueueSettings::default().shards(4)).await?;
    let ids: Vec<NewTask> = (0..40).map(|i| NewTask::new(format!("t{i}"))).collect();
    q.enqueue(ids, Duration::ZERO, OnDuplicate::Keep).await?;
    let per = q.shard_stats().await?;
    assert_eq!(per.len(), 4);
    let m = Series::take(&snap);
    let mut sum = 0.0;
    for (i, st) in per.iter().enumerate() {
        let g = m.gauge(
            "dlm_queue_shard_depth",
            &["queue=sq", &format!("shard={i}")],
        );
        assert_eq!(g, Some(st.waiting as f64), "shard {i}");
        sum += g.unwrap_or_default();
    }
    assert_eq!(sum, 40.0);
    assert_eq!(
        m.gauge("dlm_queue_depth", &["queue=sq", "state=waiting"]),
        Some(40.0)
    );

    // Lowered to 2 (drained: the removed shards' series go to 0).
    q.pop(40).await?;
    q.configure(&QueueSettings::default().shards(2)).await?;
    assert_eq!(q.shard_stats().await?.len(), 2);
    let m = Series::take(&snap);
    for i in 2..4 {
        let g = m.gauge(
            "dlm_queue_shard_depth",
            &["queue=sq", &format!("shard={i}")],
        );
        assert_eq!(g, Some(0.0), "shard {i}");
    }
    Ok(())
}

#[tokio::test]
async fn redis_errors_are_counted_by_kind() -> TestResult {
    let (snap, _guard) = recorder();
    let s = server();
    let c = dlm::Client::builder()
        .timeout(Duration::from_millis(200))
        .connect(&s.url())
        .await?;
    s.pause()?;
    let r = c.lock("m:frozen").acquire(&ttl(10_000)).await;
    s.resume()?;
    assert!(matches!(r, Err(dlm::Error::Timeout(_))), "{r:?}");

    let m = Series::take(&snap);
    assert!(m.count("dlm_redis_errors_total", &["kind=timeout"]) >= 1);
    assert_eq!(m.count("dlm_lock_acquire_seconds", &["outcome=error"]), 1);
    Ok(())
}

#[test]
fn describe_names_every_metric() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        dlm::metrics::describe();
        metrics::counter!(dlm::metrics::REDIS_ERRORS_TOTAL, "kind" => "other").increment(1);
    });
    let described = snap.snapshot().into_vec();
    assert!(described.iter().any(
        |(k, unit, desc, _)| k.key().name() == "dlm_redis_errors_total"
            && unit.is_some()
            && desc.is_some()
    ));
}

/// Span names, recorded `outcome` fields and event messages, as they happen.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Visit<'a>(&'a mut Vec<String>, &'static str);

impl tracing::field::Visit for Visit<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" || field.name() == "outcome" {
            self.0.push(format!("{}{:?}", self.1, value));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" || field.name() == "outcome" {
            self.0.push(format!("{}{value}", self.1));
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.push(format!("span {}", attrs.metadata().name()));
    }

    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut v = Vec::new();
        values.record(&mut Visit(&mut v, "outcome "));
        self.0.lock().map(|mut all| all.extend(v)).ok();
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut v = Vec::new();
        event.record(&mut Visit(&mut v, ""));
        self.0.lock().map(|mut all| all.extend(v)).ok();
    }
}

impl Capture {
    fn push(&self, s: String) {
        self.0.lock().map(|mut all| all.push(s)).ok();
    }

    fn seen(&self, what: &str) -> bool {
        self.0
            .lock()
            .map(|all| all.iter().any(|s| s == what))
            .unwrap_or(false)
    }
}

#[tokio::test]
async fn tracing_spans_and_events_appear() -> TestResult {
    use tracing_subscriber::layer::SubscriberExt;
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry()
        .with(capture.clone())
        .with(tracing_subscriber::filter::LevelFilter::TRACE);
    let _guard = tracing::subscriber::set_default(subscriber);
    let s = server();
    let c = client(&s).await;

    let g = c.lock("t:a").acquire(&ttl(10_000)).await?;
    let _ = c.lock("t:a").acquire(&ttl(10_000)).await;
    g.extend(Duration::from_secs(10)).await?;
    g.release().await?;
    let q = c.queue("tq").max_attempts(1);
    q.enqueue(
        ["x", "y"].map(NewTask::new),
        Duration::ZERO,
        OnDuplicate::Keep,
    )
    .await?;
    let mut leases = q.claim(2, Duration::from_secs(10)).await?;
    leases.remove(0).ack().await?;
    leases.remove(0).nack("no").await?;

    for what in [
        "span dlm.acquire",
        "outcome acquired",
        "outcome busy",
        "acquired",
        "extended",
        "released",
        "claimed",
        "acked",
        "moved to the dead-letter set",
    ] {
        assert!(
            capture.seen(what),
            "no {what:?} in {:?}",
            capture.0.lock().map(|v| v.clone())
        );
    }
    Ok(())
}
