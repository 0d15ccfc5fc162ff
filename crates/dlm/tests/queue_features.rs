//! The queue's priorities, groups with a concurrency limit, rate limit,
//! settings and completed history against real redis-servers: one body of
//! cases, run on one server and on a Redis Cluster.
mod common;

use std::time::{Duration, Instant};

use common::TestResult;
use dlm::queue::{NewTask, OnDuplicate, Queue, QueueSettings, RateLimit, TaskState};
use dlm::{Client, Error};
use dlm_testkit::RedisServer;

const NOW: Duration = Duration::ZERO;
const LEASE: Duration = Duration::from_secs(30);

async fn claim_ids(q: &Queue, n: usize) -> dlm::Result<Vec<dlm::queue::Lease>> {
    q.claim(n, LEASE).await
}

fn ids(leases: &[dlm::queue::Lease]) -> Vec<&str> {
    leases.iter().map(|l| l.task().id.as_str()).collect()
}

async fn ack_all(leases: Vec<dlm::queue::Lease>) -> dlm::Result<()> {
    for l in leases {
        l.ack().await?;
    }
    Ok(())
}

/// Higher priorities first, FIFO within one, and a delayed task keeps its
/// priority when it comes due.
async fn priorities(c: &Client) -> TestResult {
    let q = c.queue("prio");
    q.enqueue(
        [NewTask::new("late-high").priority(9)],
        Duration::from_millis(300),
        OnDuplicate::Keep,
    )
    .await?;
    for t in [
        NewTask::new("a"),
        NewTask::new("b").priority(5),
        NewTask::new("c").priority(5).payload("p"),
        NewTask::new("d"),
    ] {
        q.enqueue([t], NOW, OnDuplicate::Keep).await?;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let s = q.stats().await?;
    assert_eq!((s.waiting, s.delayed), (4, 1), "{s:?}");
    let first = claim_ids(&q, 2).await?;
    assert_eq!(ids(&first), ["b", "c"]);
    assert_eq!(first[1].task().priority, 5);
    assert_eq!(first[1].task().payload.as_deref(), Some(&b"p"[..]));
    ack_all(first).await?;
    tokio::time::sleep(Duration::from_millis(350)).await;
    q.enqueue([NewTask::new("e").priority(9)], NOW, OnDuplicate::Keep)
        .await?;
    let rest = claim_ids(&q, 10).await?;
    assert_eq!(ids(&rest), ["late-high", "e", "a", "d"]);
    // A nacked task comes back with its priority.
    let mut rest = rest.into_iter();
    if let Some(l) = rest.next() {
        l.nack_after(NOW, "again").await?;
    }
    ack_all(rest.collect()).await?;
    q.enqueue(["f"], NOW, OnDuplicate::Keep).await?;
    let again = claim_ids(&q, 10).await?;
    assert_eq!(ids(&again), ["late-high", "f"]);
    assert_eq!(again[0].task().attempt, 2);
    ack_all(again).await?;
    assert!(q.stats().await?.is_drained());
    Ok(())
}

/// At most k tasks of a group in flight; other groups go on; a slot comes
/// back on ack, nack and lease expiry; the limit is the latest one stored.
async fn groups(c: &Client) -> TestResult {
    let q = c.queue("groups");
    q.configure(&QueueSettings::default().group_concurrency(Some(1)))
        .await?;
    let mut tasks: Vec<NewTask> = (0..5)
        .map(|i| NewTask::new(format!("a{i}")).group("A"))
        .collect();
    tasks.push(NewTask::new("b0").group("B"));
    tasks.push(NewTask::new("b1").group("B"));
    tasks.push(NewTask::new("plain"));
    q.enqueue(tasks, NOW, OnDuplicate::Keep).await?;
    let got = claim_ids(&q, 10).await?;
    assert_eq!(ids(&got), ["a0", "b0", "plain"], "no head-of-line blocking");
    assert_eq!(got[0].task().group.as_deref(), Some("A"));
    assert_eq!(q.stats().await?.waiting, 5, "parked tasks count as waiting");
    let page = q.tasks(TaskState::Waiting, 0, 10, 0).await?;
    let listed: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        (page.total, listed),
        (5, vec!["a1", "a2", "a3", "a4", "b1"])
    );
    let tail = q.tasks(TaskState::Waiting, 3, 10, 0).await?;
    assert_eq!(tail.tasks.len(), 2);
    assert!(claim_ids(&q, 10).await?.is_empty());
    let mut got = got.into_iter();
    if let Some(a0) = got.next() {
        a0.ack().await?;
    }
    if let Some(b0) = got.next() {
        b0.nack_after(Duration::from_secs(60), "later").await?;
    }
    let next = claim_ids(&q, 10).await?;
    assert_eq!(ids(&next), ["a1", "b1"]);
    // A higher limit applies at once, to the parked tasks too.
    q.configure(&QueueSettings::default().group_concurrency(Some(3)))
        .await?;
    let more = claim_ids(&q, 10).await?;
    assert_eq!(ids(&more), ["a2", "a3"]);
    ack_all(more).await?;
    ack_all(next).await?;
    ack_all(got.collect()).await?;
    q.configure(&QueueSettings::default().group_concurrency(None))
        .await?;
    assert_eq!(q.settings().await?.get_group_concurrency(), None);
    let last = claim_ids(&q, 10).await?;
    assert_eq!(ids(&last), ["a4"]);
    ack_all(last).await?;
    let s = q.stats().await?;
    assert_eq!((s.waiting, s.inflight), (0, 0), "{s:?}");
    Ok(())
}

/// A slot of a group comes back when the lease of its task expires.
async fn group_slot_returns_on_expiry(c: &Client) -> TestResult {
    let q = c.queue("groups-expiry");
    q.configure(&QueueSettings::default().group_concurrency(Some(1)))
        .await?;
    q.enqueue(
        [NewTask::new("x0").group("X"), NewTask::new("x1").group("X")],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let first = q.claim(10, Duration::from_millis(200)).await?;
    assert_eq!(ids(&first), ["x0"]);
    assert!(q.claim(10, LEASE).await?.is_empty());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The expired lease is returned (x0 comes due again after x1) and its
    // slot freed: x1 goes, then nothing more while x1 holds the slot.
    let second = claim_ids(&q, 10).await?;
    assert_eq!(ids(&second), ["x1"]);
    assert!(claim_ids(&q, 10).await?.is_empty());
    assert!(
        first
            .into_iter()
            .next()
            .is_some_and(|l| l.task().id == "x0")
    );
    ack_all(second).await?;
    let third = claim_ids(&q, 10).await?;
    assert_eq!(ids(&third), ["x0"]);
    assert_eq!(third[0].task().attempt, 2);
    ack_all(third).await?;
    assert!(q.stats().await?.is_drained());
    Ok(())
}

/// A task re-enqueued into another group while in flight moves its slot along.
async fn regrouped_in_flight(c: &Client) -> TestResult {
    let q = c.queue("regroup");
    q.configure(&QueueSettings::default().group_concurrency(Some(1)))
        .await?;
    q.enqueue([NewTask::new("y0").group("Y")], NOW, OnDuplicate::Keep)
        .await?;
    let first = claim_ids(&q, 10).await?;
    assert_eq!(ids(&first), ["y0"]);
    q.enqueue([NewTask::new("y0").group("Z")], NOW, OnDuplicate::Replace)
        .await?;
    q.enqueue([NewTask::new("y1").group("Y")], NOW, OnDuplicate::Keep)
        .await?;
    let second = claim_ids(&q, 10).await?;
    assert_eq!(ids(&second), ["y1"], "Y's slot moved to Z with y0");
    ack_all(first).await?;
    let third = claim_ids(&q, 10).await?;
    assert_eq!(ids(&third), ["y0"]);
    assert_eq!(third[0].task().group.as_deref(), Some("Z"));
    ack_all(second).await?;
    ack_all(third).await?;
    assert!(q.stats().await?.is_drained());
    Ok(())
}

/// No window of the period sees more than n claims.
async fn rate_limit(c: &Client) -> TestResult {
    let q = c.queue("rate");
    let period = Duration::from_millis(400);
    q.configure(&QueueSettings::default().rate(Some(RateLimit::new(4, period)?)))
        .await?;
    let tasks: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
    q.enqueue(tasks, NOW, OnDuplicate::Keep).await?;
    let start = Instant::now();
    let mut starts = Vec::new();
    while starts.len() < 10 && start.elapsed() < Duration::from_secs(5) {
        let got = claim_ids(&q, 10).await?;
        let at = start.elapsed();
        starts.extend(std::iter::repeat_n(at, got.len()));
        ack_all(got).await?;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert_eq!(starts.len(), 10);
    assert!(start.elapsed() >= period * 2, "{:?}", start.elapsed());
    // The limit holds on the server's clock; seen from here, replies come
    // with some jitter, so the windows checked are 40 ms shorter.
    let window = period - Duration::from_millis(40);
    for (i, a) in starts.iter().enumerate() {
        let in_window = starts[i..].iter().filter(|b| **b - *a < window).count();
        assert!(
            in_window <= 4,
            "{in_window} claims within {period:?}: {starts:?}"
        );
    }
    let s = q.settings().await?;
    assert_eq!(s.get_rate(), Some(RateLimit::new(4, period)?));
    q.clear_settings().await?;
    assert_eq!(
        q.settings().await?,
        QueueSettings::default()
            .group_concurrency(None)
            .rate(None)
            .keep_completed(None)
            .events(None)
    );
    Ok(())
}

async fn completed_history(c: &Client) -> TestResult {
    let q = c.queue("history");
    q.enqueue(["h0"], NOW, OnDuplicate::Keep).await?;
    ack_all(claim_ids(&q, 1).await?).await?;
    assert!(q.completed(10).await?.is_empty(), "off by default");
    q.configure(&QueueSettings::default().keep_completed(Some(2)))
        .await?;
    for id in ["h1", "h2", "h3"] {
        q.enqueue([id], NOW, OnDuplicate::Keep).await?;
        ack_all(claim_ids(&q, 1).await?).await?;
    }
    let kept: Vec<String> = q.completed(10).await?.into_iter().map(|c| c.id).collect();
    assert_eq!(kept, ["h3", "h2"]);
    assert_eq!(q.stats().await?.processed, 4);
    Ok(())
}

async fn bad_input(c: &Client) -> TestResult {
    let q = c.queue("bad");
    for t in [
        NewTask::new("p").priority(1001),
        NewTask::new("p").priority(u16::MAX),
        NewTask::new("g").group(""),
        NewTask::new("g").group("a\nb"),
        NewTask::new("g").group("x".repeat(257)),
    ] {
        let e = q.enqueue([t], NOW, OnDuplicate::Keep).await;
        assert!(matches!(e, Err(Error::InvalidArgument { .. })), "{e:?}");
    }
    assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
    assert!(RateLimit::new(1, Duration::ZERO).is_err());
    let e = q
        .configure(&QueueSettings::default().group_concurrency(Some(0)))
        .await;
    assert!(matches!(e, Err(Error::InvalidArgument { .. })), "{e:?}");
    assert_eq!(q.stats().await?, dlm::queue::QueueStats::default());
    Ok(())
}

/// The seeds' API (`top`, `pop`, `remove_if_score`) sees every due task,
/// wherever it waits (plain, prioritized, in a group, parked behind its
/// group's limit, delayed and now due), in the order claim takes them.
async fn seed_api_sees_every_due_task(c: &Client) -> TestResult {
    let q = c.queue("seed-api");
    q.configure(&QueueSettings::default().group_concurrency(Some(1)))
        .await?;
    q.enqueue(
        [NewTask::new("late").priority(7)],
        Duration::from_millis(200),
        OnDuplicate::Keep,
    )
    .await?;
    for t in [
        NewTask::new("plain"),
        NewTask::new("g1").group("G"),
        NewTask::new("g2").group("G").priority(2),
        NewTask::new("high").priority(9),
    ] {
        q.enqueue([t], NOW, OnDuplicate::Keep).await?;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let top_ids = |e: Vec<dlm::queue::Entry>| e.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(top_ids(q.top(10).await?), ["high", "g2", "plain", "g1"]);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        top_ids(q.top(10).await?),
        ["high", "late", "g2", "plain", "g1"],
        "a delayed task, once due, in its priority's place"
    );
    // Claims take what top showed, in its order; the last one parks `g1`
    // and `g3` behind `g2`, which holds group G's only slot.
    let got = claim_ids(&q, 1).await?;
    assert_eq!(ids(&got), ["high"]);
    let got2 = claim_ids(&q, 2).await?;
    assert_eq!(ids(&got2), ["late", "g2"]);
    q.enqueue([NewTask::new("g3").group("G")], NOW, OnDuplicate::Keep)
        .await?;
    assert_eq!(top_ids(q.top(10).await?), ["plain", "g1", "g3"]);
    let got3 = claim_ids(&q, 10).await?;
    assert_eq!(ids(&got3), ["plain"]);
    let top = q.top(10).await?;
    assert_eq!(
        top_ids(top.clone()),
        ["g1", "g3"],
        "parked tasks are due too"
    );
    // remove_if_score with the due time top read, wherever the task is.
    let g1 = top.iter().find(|e| e.id == "g1").ok_or("g1")?;
    assert_eq!(
        q.remove_if_score("g1", g1.score + 1).await?,
        dlm::queue::Removed::ScoreChanged(g1.score)
    );
    assert_eq!(
        q.remove_if_score("g1", g1.score).await?,
        dlm::queue::Removed::Removed
    );
    assert_eq!(top_ids(q.pop(5).await?), ["g3"]);
    assert!(q.top(10).await?.is_empty());
    ack_all(got).await?;
    ack_all(got2).await?;
    ack_all(got3).await?;
    let s = q.stats().await?;
    assert_eq!((s.waiting, s.delayed, s.inflight), (0, 0, 0), "{s:?}");
    q.configure(&QueueSettings::default().group_concurrency(None))
        .await?;
    Ok(())
}

/// A paused queue: claims get nothing (a worker waits instead of spinning),
/// tasks in flight are acked, enqueues go on, the seeds' top still sees
/// them; `paused` shows in stats and survives a config clear; resume lets
/// claims through and wakes an idle worker at once.
async fn pause_and_resume(c: &Client) -> TestResult {
    let q = c.queue("pausing");
    q.enqueue(["a", "b"], NOW, OnDuplicate::Keep).await?;
    let flying = claim_ids(&q, 1).await?;
    assert!(!q.pause().await?, "was not paused");
    assert!(q.pause().await?, "paused already");
    assert!(q.stats().await?.paused);
    q.clear_settings().await?;
    assert!(q.stats().await?.paused, "a config clear keeps the pause");
    assert!(
        claim_ids(&q, 10).await?.is_empty(),
        "nothing claimed while paused"
    );
    ack_all(flying).await?;
    q.enqueue(["c"], NOW, OnDuplicate::Keep).await?;
    assert_eq!(q.top(10).await?.len(), 2, "the seeds' top still sees them");
    // A worker started while paused idles; resume wakes it at once.
    let handled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = dlm::CancellationToken::new();
    let worker = {
        let (q, handled, stop) = (q.clone(), handled.clone(), stop.clone());
        tokio::spawn(async move {
            let opts = dlm::queue::WorkerOptions::new().idle_wait(Duration::from_secs(20));
            q.worker(opts)
                .run(
                    move |_task| {
                        let handled = handled.clone();
                        async move {
                            handled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            Ok::<(), std::io::Error>(())
                        }
                    },
                    stop,
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        handled.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "paused"
    );
    let resumed = Instant::now();
    assert!(q.resume().await?, "was paused");
    while handled.load(std::sync::atomic::Ordering::SeqCst) < 2
        && resumed.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(handled.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(
        resumed.elapsed() < Duration::from_secs(5),
        "woken by the resume, not the 20 s idle wait: {:?}",
        resumed.elapsed()
    );
    stop.cancel();
    worker.await??;
    let s = q.stats().await?;
    assert!(!s.paused && s.is_drained(), "{s:?}");
    Ok(())
}

/// The event log: off by default (no stream written); on, every state change
/// in order, one event per task; a follower is woken by the next entry.
async fn event_log(c: &Client) -> TestResult {
    use dlm::queue::{EventKind, EventsFrom};
    use futures_util::StreamExt;
    let q = c.queue("events").max_attempts(1);
    q.enqueue([NewTask::new("quiet")], NOW, OnDuplicate::Keep)
        .await?;
    let (none, _) = q.events_page(&EventsFrom::Start, 100).await?;
    assert!(none.is_empty(), "the log is off by default: {none:?}");
    ack_all(claim_ids(&q, 1).await?).await?;
    q.configure(&QueueSettings::default().events(Some(dlm::queue::DEFAULT_EVENTS)))
        .await?;
    // Follow from the log's position now, so what comes next is seen
    // whenever the follower first polls; the pause below only lets it block.
    let (_, here) = q.events_page(&EventsFrom::Now, 1).await?;
    let mut follow = std::pin::pin!(q.events(here));
    let first = tokio::spawn({
        let q = q.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            q.enqueue(
                [NewTask::new("a"), NewTask::new("b")],
                NOW,
                OnDuplicate::Keep,
            )
            .await
        }
    });
    let woke = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(5), follow.next())
        .await?
        .ok_or("the stream ended")??;
    assert_eq!((e.kind, e.task.as_str()), (EventKind::Added, "a"));
    assert!(woke.elapsed() < Duration::from_secs(2), "woken, not polled");
    first.await??;
    let leases = claim_ids(&q, 2).await?;
    let mut it = leases.into_iter();
    let a = it.next().ok_or("a")?;
    a.progress(50, "half").await?;
    a.ack().await?;
    it.next().ok_or("b")?.nack("boom").await?;
    let (events, next) = q.events_page(&EventsFrom::Start, 100).await?;
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.task.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("added", "a"),
            ("added", "b"),
            ("claimed", "a"),
            ("claimed", "b"),
            ("progress", "a"),
            ("completed", "a"),
            ("dead", "b")
        ]
    );
    assert_eq!(
        (events[4].progress, events[4].message.as_deref()),
        (Some(50), Some("half"))
    );
    assert_eq!(events[6].error.as_deref(), Some("boom"));
    assert!(q.events_page(&next, 100).await?.0.is_empty());
    q.configure(&QueueSettings::default().events(None)).await?;
    assert!(
        q.events_page(&EventsFrom::Start, 100).await?.0.is_empty(),
        "turned off: deleted"
    );
    Ok(())
}

async fn cases(c: &Client) -> TestResult {
    event_log(c).await?;
    pause_and_resume(c).await?;
    seed_api_sees_every_due_task(c).await?;
    priorities(c).await?;
    groups(c).await?;
    group_slot_returns_on_expiry(c).await?;
    regrouped_in_flight(c).await?;
    rate_limit(c).await?;
    completed_history(c).await?;
    bad_input(c).await?;
    Ok(())
}

// The ACL run shows that every command the new scripts use is allowed.
on_queue_topologies!(
    queue_features_on_one_server,
    queue_features_as_a_least_privilege_acl_user,
    queue_features_on_a_cluster,
    cases
);

/// A worker at the rate limit sleeps until the next slot: a handful of
/// scripts per slot, not a poll loop.
#[tokio::test]
async fn a_rate_limited_worker_sleeps_instead_of_polling() -> TestResult {
    use dlm::queue::WorkerOptions;
    let s = RedisServer::start()?;
    let c = Client::connect(&s.url()).await?;
    let q = c.queue("rate-worker");
    let ids: Vec<String> = (0..15).map(|i| format!("w{i}")).collect();
    q.enqueue(ids, NOW, OnDuplicate::Keep).await?;
    let mut raw = common::raw(&s).await;
    let calls = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut raw)
                .await?;
            Ok::<u64, redis::RedisError>(common::evalsha_calls(&info))
        }
    };
    let start_calls = calls(&mut raw).await?;
    let started = Instant::now();
    let report = q
        .worker(
            WorkerOptions::new()
                .concurrency(8)
                .exit_when_empty(true)
                .rate(Some(RateLimit::new(5, Duration::from_millis(500))?)),
        )
        .run(
            |_task| async { Ok::<(), std::io::Error>(()) },
            dlm::CancellationToken::new(),
        )
        .await?;
    let took = started.elapsed();
    let scripts = calls(&mut raw).await? - start_calls;
    assert_eq!(report.acked, 15);
    eprintln!("{scripts} scripts for 15 tasks in {took:?}");
    assert!(took >= Duration::from_millis(1000), "{took:?}");
    assert!(
        scripts < 80,
        "{scripts} scripts for 15 tasks over {took:?}: polling?"
    );
    Ok(())
}
