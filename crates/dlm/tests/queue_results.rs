//! Issue 24's results, progress and task time limits against real
//! redis-servers: one body of cases, run on one server, as the
//! least-privilege ACL user and on a Redis Cluster; then what only one
//! server can show (which keys a plain queue writes, eviction).
mod common;

use std::time::{Duration, Instant};

use common::TestResult;
use dlm::queue::{
    Backoff, MAX_RESULT_BYTES, NewTask, OnDuplicate, Queue, QueueSettings, WorkerOptions,
};
use dlm::{CancellationToken, Client, Error};
use dlm_testkit::{Cluster, RedisServer};

const NOW: Duration = Duration::ZERO;
const LEASE: Duration = Duration::from_secs(30);

async fn claim_one(
    q: &Queue,
    lease: Duration,
) -> Result<dlm::queue::Lease, Box<dyn std::error::Error + Send + Sync>> {
    let mut got = q.claim(1, lease).await?;
    Ok(got.pop().ok_or("nothing claimed")?)
}

/// A result left by `ack_with` or returned by a handler is read back; a
/// plain ack leaves none; a result too large is refused (and fails the task
/// in a worker); the TTL setting is followed, zero keeps nothing.
async fn results(c: &Client) -> TestResult {
    let q = c.queue("results");
    q.enqueue(["a", "b"], NOW, OnDuplicate::Keep).await?;
    let a = claim_one(&q, LEASE).await?;
    assert_eq!(q.result("a").await?, None, "not finished yet");
    a.ack_with(b"hello".to_vec()).await?;
    assert_eq!(q.result("a").await?.as_deref(), Some(&b"hello"[..]));
    let b = claim_one(&q, LEASE).await?;
    b.ack().await?;
    assert_eq!(q.result("b").await?, None, "a plain ack leaves no result");

    // Too large: a typed error before anything is sent; the lease stays.
    q.push("big").await?;
    let big = claim_one(&q, LEASE).await?;
    let refused = big.clone().ack_with(vec![0u8; MAX_RESULT_BYTES + 1]).await;
    assert!(
        matches!(&refused, Err(Error::InvalidArgument { arg: "result", reason }) if reason.contains("result too large")),
        "{refused:?}"
    );
    big.ack_with(vec![7u8; MAX_RESULT_BYTES]).await?;
    assert_eq!(
        q.result("big").await?.map(|r| r.len()),
        Some(MAX_RESULT_BYTES)
    );

    // Handlers return results; one too large fails its task.
    let w = c.queue("results-worker").max_attempts(1);
    w.enqueue(["s", "v", "unit", "huge"], NOW, OnDuplicate::Keep)
        .await?;
    let report = w
        .worker(WorkerOptions::new().exit_when_empty(true))
        .run(
            |task| async move {
                Ok::<_, std::io::Error>(match task.id.as_str() {
                    "s" => Some(format!("string {}", task.id).into_bytes()),
                    "v" => Some(vec![1, 2, 3]),
                    "huge" => Some(vec![0; MAX_RESULT_BYTES + 1]),
                    _ => None,
                })
            },
            CancellationToken::new(),
        )
        .await?;
    assert_eq!((report.acked, report.dead), (3, 1), "{report:?}");
    assert_eq!(w.result("s").await?.as_deref(), Some(&b"string s"[..]));
    assert_eq!(w.result("v").await?.as_deref(), Some(&[1u8, 2, 3][..]));
    assert_eq!(w.result("unit").await?, None);
    assert_eq!(w.result("huge").await?, None);
    let dead = w.dead(10).await?;
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("result too large")),
        "{dead:?}"
    );

    // The TTL: a short one expires; zero keeps nothing.
    let t = c.queue("results-ttl");
    assert_eq!(
        t.settings().await?.get_keep_results(),
        dlm::queue::DEFAULT_RESULT_TTL
    );
    t.configure(&QueueSettings::default().keep_results(Duration::from_millis(300)))
        .await?;
    assert_eq!(
        t.settings().await?.get_keep_results(),
        Duration::from_millis(300)
    );
    t.push("short").await?;
    claim_one(&t, LEASE).await?.ack_with("r").await?;
    assert_eq!(t.result("short").await?.as_deref(), Some(&b"r"[..]));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(t.result("short").await?, None, "expired");
    t.configure(&QueueSettings::default().keep_results(Duration::ZERO))
        .await?;
    t.push("never").await?;
    claim_one(&t, LEASE).await?.ack_with("r").await?;
    assert_eq!(t.result("never").await?, None, "keep_results(0) keeps none");
    assert!(
        QueueSettings::default()
            .keep_results(Duration::from_secs(31 * 24 * 3600))
            .get_keep_results()
            > dlm::queue::MAX_RESULT_TTL
    );
    let too_long = t
        .configure(&QueueSettings::default().keep_results(Duration::from_secs(31 * 24 * 3600)))
        .await;
    assert!(matches!(too_long, Err(Error::InvalidArgument { .. })));

    // An id enqueued again drops the result of its earlier run.
    q.push("a").await?;
    assert_eq!(q.result("a").await?, None);
    claim_one(&q, LEASE).await?.ack().await?;
    Ok(())
}

/// `wait_result` returns as soon as the ack stores the result (not after
/// a poll interval: it re-reads only every 5 s), and `None` at its deadline.
async fn wait_result(c: &Client) -> TestResult {
    let q = c.queue("waits");
    q.push("w").await?;
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move {
            let r = q.wait_result("w", Duration::from_secs(20)).await;
            (r, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let lease = claim_one(&q, LEASE).await?;
    let acked = Instant::now();
    lease.ack_with(b"ready".to_vec()).await?;
    let (r, woken) = waiter.await?;
    assert_eq!(r?.as_deref(), Some(&b"ready"[..]));
    let after = woken.saturating_duration_since(acked);
    assert!(
        after < Duration::from_secs(2),
        "woken {after:?} after the ack"
    );

    // Already there: at once.
    let started = Instant::now();
    let r = q.wait_result("w", Duration::from_secs(20)).await?;
    assert_eq!(r.as_deref(), Some(&b"ready"[..]));
    assert!(started.elapsed() < Duration::from_secs(2));

    // Never there: None at the deadline, not before.
    let started = Instant::now();
    assert_eq!(
        q.wait_result("missing", Duration::from_millis(400)).await?,
        None
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "{took:?}"
    );
    Ok(())
}

/// Progress is written with the current lease, read back, refused once the
/// lease is stale (taken over: fenced), and gone when the task finishes.
async fn progress(c: &Client) -> TestResult {
    let q = c.queue("progress");
    q.push("p").await?;
    let first = claim_one(&q, Duration::from_millis(200)).await?;
    first.progress(10, "started").await?;
    let p = q.progress("p").await?.ok_or("no progress")?;
    assert_eq!((p.pct, p.message.as_str()), (10, "started"));
    first.progress(40, "").await?;
    assert_eq!(q.progress("p").await?.map(|p| p.pct), Some(40));
    assert!(matches!(
        first.progress(101, "x").await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        first
            .progress(1, &"m".repeat(dlm::queue::MAX_PROGRESS_MESSAGE + 1))
            .await,
        Err(Error::InvalidArgument { .. })
    ));
    // The lease runs out; another worker takes the task over.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = claim_one(&q, LEASE).await?;
    assert_eq!(second.task().attempt, 2);
    assert_eq!(q.progress("p").await?, None, "the old run's progress ended");
    let stale = first.progress(90, "zombie").await;
    assert!(
        matches!(stale, Err(Error::LeaseLost { taken: true, .. })),
        "{stale:?}"
    );
    second.progress(60, "second run").await?;
    let stale = q
        .report_progress("p", first.task().fence, 99, "zombie")
        .await;
    assert!(matches!(stale, Err(Error::LeaseLost { .. })), "{stale:?}");
    assert_eq!(q.progress("p").await?.map(|p| p.pct), Some(60));
    second.ack().await?;
    assert_eq!(
        q.progress("p").await?,
        None,
        "deleted when the task finished"
    );
    let late = first.progress(100, "after the end").await;
    assert!(matches!(late, Err(Error::LeaseLost { .. })), "{late:?}");
    // A retried task's next run starts without the failed run's progress,
    // and a dead one keeps none.
    let q = q.max_attempts(2);
    q.push("r").await?;
    let run = claim_one(&q, LEASE).await?;
    run.progress(30, "failing").await?;
    run.nack_after(NOW, "boom").await?;
    let run = claim_one(&q, LEASE).await?;
    assert_eq!(q.progress("r").await?, None, "a new run");
    run.progress(70, "failing again").await?;
    assert_eq!(run.nack_after(NOW, "boom").await?, dlm::queue::Nacked::Dead);
    assert_eq!(q.progress("r").await?, None, "dead");
    Ok(())
}

/// A task's time limit is stored, claimed with it, enforced by the worker
/// (cancelled, nacked "timed out", retried, then dead), and the worker's
/// default applies to tasks without one.
async fn timeouts(c: &Client) -> TestResult {
    let q = c.queue("timeouts").max_attempts(2).backoff(Backoff::new(
        Duration::from_millis(1),
        Duration::from_millis(1),
    ));
    q.enqueue(
        [NewTask::new("slow").timeout(Duration::from_millis(150))],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    q.push("plain").await?;
    // Clearing the settings keeps the flag that says limits are in use.
    q.clear_settings().await?;
    let got = q.claim(2, LEASE).await?;
    let mut limits: Vec<(&str, Option<Duration>)> = got
        .iter()
        .map(|l| (l.task().id.as_str(), l.task().timeout))
        .collect();
    limits.sort();
    assert_eq!(
        limits,
        [("plain", None), ("slow", Some(Duration::from_millis(150)))]
    );
    for l in got {
        l.abandon().await?;
    }
    let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let started = Instant::now();
    let report = q
        .worker(
            WorkerOptions::new()
                .exit_when_empty(true)
                .task_timeout(Duration::from_millis(100)),
        )
        .run(
            {
                let cancelled = cancelled.clone();
                move |task| {
                    let cancelled = cancelled.clone();
                    async move {
                        // Counts the handlers dropped before they finished.
                        struct Dropped(std::sync::Arc<std::sync::atomic::AtomicU32>, bool);
                        impl Drop for Dropped {
                            fn drop(&mut self) {
                                if !self.1 {
                                    self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                }
                            }
                        }
                        let mut guard = Dropped(cancelled, false);
                        assert!(task.timeout.is_some(), "the handler sees its limit");
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        guard.1 = true;
                        Ok::<(), std::io::Error>(())
                    }
                }
            },
            CancellationToken::new(),
        )
        .await?;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!((report.retried, report.dead), (2, 2), "{report:?}");
    assert_eq!(cancelled.load(std::sync::atomic::Ordering::SeqCst), 4);
    let dead = q.dead(10).await?;
    assert_eq!(dead.len(), 2);
    assert!(dead.iter().all(|d| d.error.as_deref() == Some("timed out")));
    q.purge_dead().await?;

    // Limits are checked.
    for bad in [Duration::ZERO, dlm::queue::MAX_TASK_TIMEOUT * 2] {
        let r = q
            .enqueue([NewTask::new("bad").timeout(bad)], NOW, OnDuplicate::Keep)
            .await;
        assert!(
            matches!(
                r,
                Err(Error::InvalidArgument {
                    arg: "task timeout",
                    ..
                })
            ),
            "{r:?}"
        );
        let w = q
            .worker(WorkerOptions::new().task_timeout(bad))
            .run(
                |_t| async { Ok::<(), std::io::Error>(()) },
                CancellationToken::new(),
            )
            .await;
        assert!(matches!(w, Err(Error::InvalidArgument { .. })), "{w:?}");
    }
    Ok(())
}

async fn cases(c: &Client) -> TestResult {
    results(c).await?;
    wait_result(c).await?;
    progress(c).await?;
    timeouts(c).await?;
    Ok(())
}

#[tokio::test]
async fn queue_results_on_one_server() -> TestResult {
    let s = RedisServer::start()?;
    cases(&Client::connect(&s.url()).await?).await
}

/// As the least-privilege user of [`dlm::keys::ACL_RULES`]: every command
/// (and the channel) the new scripts use is allowed.
#[tokio::test]
async fn queue_results_as_a_least_privilege_acl_user() -> TestResult {
    let s = RedisServer::builder()
        .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
        .start()?;
    cases(&Client::connect(&s.url_as("dlm", "s3cret")).await?).await
}

#[tokio::test]
async fn queue_results_on_a_cluster() -> TestResult {
    let cluster = Cluster::start()?;
    let c = Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_cluster(&cluster.urls())
        .await?;
    cases(&c).await
}

async fn keys_of(raw: &mut redis::aio::MultiplexedConnection, queue: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("dlm:queue:{{{queue}}}:*"))
        .query_async(raw)
        .await
        .unwrap_or_default();
    keys.sort();
    keys
}

/// A queue that uses none of the features writes none of their keys (and
/// no more keys than before them); a time limit's entry goes with its task.
#[tokio::test]
async fn a_plain_queue_writes_no_feature_keys() -> TestResult {
    let s = RedisServer::start()?;
    let c = Client::connect(&s.url()).await?;
    let mut raw = common::raw(&s).await;
    let q = c.queue("plain");
    q.enqueue(["x", "y"], NOW, OnDuplicate::Keep).await?;
    let report = q
        .worker(WorkerOptions::new().exit_when_empty(true))
        .run(
            |_t| async { Ok::<(), std::io::Error>(()) },
            CancellationToken::new(),
        )
        .await?;
    assert_eq!(report.acked, 2);
    let plain = keys_of(&mut raw, "plain").await;
    for feature in ["timeout", "results", "done", "progress", "config"] {
        let key = format!("dlm:queue:{{plain}}:{feature}");
        assert!(!plain.contains(&key), "{key} in {plain:?}");
    }

    let t = c.queue("limited");
    t.enqueue(
        [NewTask::new("x").timeout(Duration::from_secs(5))],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    assert!(
        keys_of(&mut raw, "limited")
            .await
            .contains(&"dlm:queue:{limited}:timeout".to_string())
    );
    claim_one(&t, LEASE).await?.ack().await?;
    let limited: Vec<String> = keys_of(&mut raw, "limited")
        .await
        .into_iter()
        .map(|k| k.replace("limited", "plain"))
        // `config` marks a queue that used issue 24's keys (its `extras`).
        .filter(|k| !k.ends_with(":signal") && !k.ends_with(":config"))
        .collect();
    let plain: Vec<String> = plain
        .into_iter()
        .filter(|k| !k.ends_with(":signal"))
        .collect();
    assert_eq!(limited, plain, "the time limit went with its task");
    Ok(())
}

/// At most `MAX_REMEMBERED_RESULTS` finished tasks are remembered: the one
/// to be forgotten first goes first; both keys expire with the last one.
#[tokio::test]
async fn results_are_capped_and_expire_as_a_whole() -> TestResult {
    let s = RedisServer::start()?;
    let c = Client::connect(&s.url()).await?;
    let mut raw = common::raw(&s).await;
    let q = c.queue("cap");
    let cap = dlm::queue::MAX_REMEMBERED_RESULTS;
    // Fill `done` and `results` to the cap behind dlm's back, each to be
    // forgotten in 10 minutes (before a new result, kept 1 hour).
    let fill = redis::Script::new(
        "local far = tonumber(redis.call('TIME')[1]) * 1000 + tonumber(ARGV[3])
         for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
           redis.call('ZADD', KEYS[1], far + i, 'old' .. i)
           redis.call('HSET', KEYS[2], 'old' .. i, 'r')
         end",
    );
    for from in (1..=cap).step_by(10_000) {
        let _: () = fill
            .key("dlm:queue:{cap}:done")
            .key("dlm:queue:{cap}:results")
            .arg(from)
            .arg((from + 9_999).min(cap))
            .arg(600_000) // forgotten in 10 minutes: before the new result
            .invoke_async(&mut raw)
            .await?;
    }
    q.push("new").await?;
    claim_one(&q, LEASE).await?.ack_with("fresh").await?;
    let (done, results): (usize, usize) = redis::pipe()
        .zcard("dlm:queue:{cap}:done")
        .hlen("dlm:queue:{cap}:results")
        .query_async(&mut raw)
        .await?;
    assert_eq!((done, results), (cap, cap));
    assert_eq!(q.result("new").await?.as_deref(), Some(&b"fresh"[..]));
    assert_eq!(q.result("old1").await?, None, "the soonest forgotten went");
    assert_eq!(q.result("old2").await?.as_deref(), Some(&b"r"[..]));
    let ttl: i64 = redis::cmd("PTTL")
        .arg("dlm:queue:{cap}:results")
        .query_async(&mut raw)
        .await?;
    assert!(ttl > 0, "the results key expires as a whole: {ttl}");
    Ok(())
}
