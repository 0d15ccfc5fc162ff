//! Live workers ([`dlm::queue::Queue::workers`]) against real redis-servers:
//! a running worker is listed with the tasks it runs and its counts, leaves
//! the listing when it stops, and drops out after its TTL when it dies
//! without stopping (its runtime shut down under it, as a killed process
//! would); one body of cases, run on one server, as the least-privilege ACL
//! user and on a Redis Cluster.
mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::TestResult;
use dlm::queue::{OnDuplicate, Queue, WorkerInfo, WorkerOptions};
use dlm::{CancellationToken, Client, Error};
use dlm_testkit::{Cluster, RedisServer};

/// Where the cases connect (a dying worker needs a client of its own).
#[derive(Clone)]
enum Target {
    One(String),
    Cluster(Vec<String>),
}

impl Target {
    async fn connect(&self) -> dlm::Result<Client> {
        let b = Client::builder().timeout(Duration::from_secs(2));
        match self {
            Target::One(url) => b.connect(url).await,
            Target::Cluster(urls) => b.connect_cluster(urls).await,
        }
    }
}

/// Poll `read` until `ok` accepts its value or `limit` passes; the last value.
async fn until<T, F, Fut>(limit: Duration, read: F, ok: impl Fn(&T) -> bool) -> dlm::Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = dlm::Result<T>>,
{
    let start = Instant::now();
    loop {
        let v = read().await?;
        if ok(&v) || start.elapsed() > limit {
            return Ok(v);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn workers(q: &Queue) -> dlm::Result<Vec<WorkerInfo>> {
    q.workers().await
}

/// A running worker is listed with its id, host, pid, concurrency, the ids
/// of the tasks its handlers run and its counts; it leaves the listing as
/// soon as it stops.
async fn listed_while_running(c: &Client) -> TestResult {
    let q = c.queue("live").max_attempts(1);
    assert!(q.workers().await?.is_empty(), "no worker yet");
    q.enqueue(
        ["fast", "bad", "slow-1", "slow-2"],
        Duration::ZERO,
        OnDuplicate::Keep,
    )
    .await?;
    let release = CancellationToken::new();
    let stop = CancellationToken::new();
    let started = Instant::now();
    let worker = {
        let (q, release, stop) = (q.clone(), release.clone(), stop.clone());
        tokio::spawn(async move {
            let opts = WorkerOptions::new()
                .id("worker-one")
                .concurrency(4)
                .lease(Duration::from_millis(900));
            q.worker(opts)
                .run(
                    move |task| {
                        let release = release.clone();
                        async move {
                            match task.id.as_str() {
                                "bad" => Err("broken".to_string()),
                                id if id.starts_with("slow") => {
                                    release.cancelled().await;
                                    Ok(())
                                }
                                _ => Ok(()),
                            }
                        }
                    },
                    stop,
                )
                .await
        })
    };
    let listed = until(
        Duration::from_secs(10),
        || workers(&q),
        |w| w.len() == 1 && w[0].in_flight.len() == 2 && w[0].processed == 1 && w[0].failed == 1,
    )
    .await?;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let w = &listed[0];
    assert_eq!(w.id, "worker-one");
    assert_eq!(w.in_flight, ["slow-1", "slow-2"], "{w:?}");
    assert_eq!((w.busy, w.concurrency), (2, 4), "{w:?}");
    assert_eq!((w.processed, w.failed), (1, 1), "{w:?}");
    assert_eq!(w.pid, std::process::id());
    assert!(!w.host.is_empty());
    assert_eq!(w.version, env!("CARGO_PKG_VERSION"));
    // Lease 900 ms: renewed (and beating) every 300 ms, a record lives 3 beats.
    assert_eq!(w.ttl, Duration::from_millis(900));
    assert_eq!(w.expires_ms, w.last_beat_ms + 900, "{w:?}");
    assert!(w.started_ms <= w.last_beat_ms, "{w:?}");
    assert!(w.beat_age < w.ttl, "{w:?}");
    assert!(!w.stopping);
    assert!(
        w.last_beat_ms - w.started_ms <= started.elapsed().as_millis() as u64 + 50,
        "started at its first beat: {w:?}"
    );

    // Shutdown asked: the worker says it is stopping while its tasks finish.
    stop.cancel();
    let stopping = until(
        Duration::from_secs(5),
        || workers(&q),
        |w| w.first().is_some_and(|w| w.stopping),
    )
    .await?;
    assert!(stopping[0].stopping, "{stopping:?}");
    release.cancel();
    let report = worker.await??;
    assert_eq!((report.acked, report.dead), (3, 1), "{report:?}");
    assert!(
        q.workers().await?.is_empty(),
        "a stopped worker is gone at once"
    );
    Ok(())
}

/// A worker that dies without stopping (its runtime shut down, as a killed
/// process would) drops out once its TTL passes; a live one stays.
async fn dead_worker_drops_out(target: &Target) -> TestResult {
    let c = target.connect().await?;
    let q = c.queue("dying");
    q.push("stuck").await?;
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (t, ttl) = (target.clone(), Duration::from_millis(600));
    doomed.spawn(async move {
        let c = t.connect().await?;
        let opts = WorkerOptions::new()
            .id("doomed")
            .lease(ttl)
            .heartbeat(ttl / 3);
        c.queue("dying")
            .worker(opts)
            .run(
                |_task| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok::<(), std::io::Error>(())
                },
                CancellationToken::new(),
            )
            .await
    });
    // Once it runs the task, a second worker (that would take it otherwise).
    until(
        Duration::from_secs(10),
        || workers(&q),
        |w| w.len() == 1 && w[0].in_flight == ["stuck"],
    )
    .await?;
    let stop = CancellationToken::new();
    let survivor = {
        let (q, stop) = (q.clone(), stop.clone());
        tokio::spawn(async move {
            q.worker(WorkerOptions::new().id("survivor"))
                .run(|_task| async { Ok::<(), std::io::Error>(()) }, stop)
                .await
        })
    };
    let both = until(
        Duration::from_secs(10),
        || workers(&q),
        |w| w.len() == 2 && w[0].in_flight == ["stuck"],
    )
    .await?;
    let ids: Vec<&str> = both.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["doomed", "survivor"], "{both:?}");
    assert_eq!(both[0].in_flight, ["stuck"]);
    // Default lease 30 s: beats every 5 s, lives 15 s.
    assert_eq!(both[1].ttl, Duration::from_secs(15));

    let died = Instant::now();
    doomed.shutdown_background();
    let left = until(Duration::from_secs(5), || workers(&q), |w| w.len() == 1).await?;
    let gone_after = died.elapsed();
    let ids: Vec<&str> = left.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["survivor"], "{left:?}");
    assert!(
        gone_after <= ttl + Duration::from_millis(500),
        "dropped out within its TTL: {gone_after:?}"
    );
    stop.cancel();
    survivor.await??;
    assert!(q.workers().await?.is_empty());
    Ok(())
}

/// A worker beats every 5 s by default, and sooner (at most once a
/// second) when a task starts or settles: the record follows the work.
async fn early_beats_follow_the_work(c: &Client) -> TestResult {
    let q = c.queue("early");
    let (release, stop) = (CancellationToken::new(), CancellationToken::new());
    let worker = {
        let (q, release, stop) = (q.clone(), release.clone(), stop.clone());
        tokio::spawn(async move {
            q.worker(WorkerOptions::new())
                .run(
                    move |_task| {
                        let release = release.clone();
                        async move {
                            release.cancelled().await;
                            Ok::<(), std::io::Error>(())
                        }
                    },
                    stop,
                )
                .await
        })
    };
    until(Duration::from_secs(10), || workers(&q), |w| w.len() == 1).await?;
    let pushed = Instant::now();
    q.push("job").await?;
    let w = until(
        Duration::from_secs(10),
        || workers(&q),
        |w| w.first().is_some_and(|w| w.in_flight == ["job"]),
    )
    .await?;
    assert_eq!(w[0].in_flight, ["job"]);
    assert!(
        pushed.elapsed() < Duration::from_millis(2500),
        "seen after {:?}, not after the 5 s beat",
        pushed.elapsed()
    );
    let released = Instant::now();
    release.cancel();
    let w = until(
        Duration::from_secs(10),
        || workers(&q),
        |w| w.first().is_some_and(|w| w.processed == 1),
    )
    .await?;
    assert_eq!((w[0].processed, w[0].busy), (1, 0), "{w:?}");
    assert!(released.elapsed() < Duration::from_millis(2500));
    stop.cancel();
    worker.await??;
    Ok(())
}

/// A worker id that cannot be one is a typed error before anything runs.
async fn bad_worker_ids(c: &Client) -> TestResult {
    let q = c.queue("bad-ids");
    for id in ["", "a\nb"] {
        let r = q
            .worker(WorkerOptions::new().id(id))
            .run(
                |_task| async { Ok::<(), std::io::Error>(()) },
                CancellationToken::new(),
            )
            .await;
        assert!(
            matches!(
                r,
                Err(Error::InvalidArgument {
                    arg: "worker id",
                    ..
                })
            ),
            "{id:?}: {r:?}"
        );
    }
    assert!(q.workers().await?.is_empty());
    Ok(())
}

async fn cases(target: Target) -> TestResult {
    let c = target.connect().await?;
    listed_while_running(&c).await?;
    dead_worker_drops_out(&target).await?;
    early_beats_follow_the_work(&c).await?;
    bad_worker_ids(&c).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_one_server() -> TestResult {
    let s = RedisServer::start()?;
    cases(Target::One(s.url())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_as_a_least_privilege_acl_user() -> TestResult {
    let s = RedisServer::builder()
        .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
        .start()?;
    cases(Target::One(s.url_as("dlm", "s3cret"))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_a_cluster() -> TestResult {
    let cluster = Cluster::start()?;
    cases(Target::Cluster(cluster.urls())).await
}

/// Memory stays bounded: the record of a worker that died is deleted by the
/// next beat of any other worker of the queue, and once every worker is
/// gone both keys expire by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_records_are_deleted_and_the_keys_expire() -> TestResult {
    let s = RedisServer::start()?;
    let target = Target::One(s.url());
    let c = target.connect().await?;
    let q = c.queue("tidy");
    let mut raw = common::raw(&s).await;
    let (zset, hash) = ("dlm:queue:{tidy}:workers", "dlm:queue:{tidy}:workerinfo");
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let t = target.clone();
    doomed.spawn(async move {
        let c = t.connect().await?;
        c.queue("tidy")
            .worker(WorkerOptions::new().lease(Duration::from_millis(300)))
            .run(
                |_task| async { Ok::<(), std::io::Error>(()) },
                CancellationToken::new(),
            )
            .await
    });
    until(Duration::from_secs(10), || workers(&q), |w| w.len() == 1).await?;
    doomed.shutdown_background();
    // A live worker beating every 200 ms.
    let stop = CancellationToken::new();
    let live = {
        let (q, stop) = (q.clone(), stop.clone());
        tokio::spawn(async move {
            q.worker(WorkerOptions::new().lease(Duration::from_millis(600)))
                .run(|_task| async { Ok::<(), std::io::Error>(()) }, stop)
                .await
        })
    };
    let hlen = |raw: &redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            redis::cmd("HLEN")
                .arg(hash)
                .query_async::<u64>(&mut raw)
                .await
        }
    };
    let only_live = until(
        Duration::from_secs(10),
        || workers(&q),
        |w| w.len() == 1 && w[0].ttl == Duration::from_millis(600),
    )
    .await?;
    assert_eq!(only_live.len(), 1, "{only_live:?}");
    let start = Instant::now();
    while hlen(&raw).await? != 1 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dump: (Vec<String>, Vec<String>) = redis::pipe()
        .cmd("HGETALL")
        .arg(hash)
        .cmd("ZRANGE")
        .arg(zset)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut raw)
        .await?;
    assert_eq!(
        hlen(&raw).await?,
        1,
        "the dead worker's record was deleted: {dump:?}"
    );
    stop.cancel();
    live.await??;
    let exists: u64 = redis::cmd("EXISTS")
        .arg(zset)
        .arg(hash)
        .query_async(&mut raw)
        .await?;
    assert_eq!(exists, 0, "the last worker's stop leaves nothing");

    // A lone worker that dies: its keys expire with its record.
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let t = target;
    doomed.spawn(async move {
        let c = t.connect().await?;
        c.queue("tidy")
            .worker(WorkerOptions::new().lease(Duration::from_millis(300)))
            .run(
                |_task| async { Ok::<(), std::io::Error>(()) },
                CancellationToken::new(),
            )
            .await
    });
    until(Duration::from_secs(10), || workers(&q), |w| w.len() == 1).await?;
    doomed.shutdown_background();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let exists: u64 = redis::cmd("EXISTS")
        .arg(zset)
        .arg(hash)
        .query_async(&mut raw)
        .await?;
    assert_eq!(exists, 0, "both keys expired with the dead worker's record");
    Ok(())
}

/// A beat that fails (Redis down for a while) never stops the worker: once
/// Redis is back, it beats again (its record reappears in the emptied
/// server) and goes on working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_beats_do_not_stop_the_worker() -> TestResult {
    let mut s = RedisServer::start()?;
    let c = common::client(&s).await;
    let q = c.queue("outage");
    let done = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let worker = {
        let (q, stop, done) = (q.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let opts = WorkerOptions::new()
                .id("steady")
                .lease(Duration::from_millis(900))
                .idle_wait(Duration::from_millis(100));
            q.worker(opts)
                .run(
                    move |_task| {
                        let done = done.clone();
                        async move {
                            done.fetch_add(1, Ordering::SeqCst);
                            Ok::<(), std::io::Error>(())
                        }
                    },
                    stop,
                )
                .await
        })
    };
    until(Duration::from_secs(10), || workers(&q), |w| w.len() == 1).await?;
    s.kill();
    // Several beats fail meanwhile.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.restart()?;
    let back = until(
        Duration::from_secs(15),
        || async { Ok(q.workers().await.unwrap_or_default()) },
        |w| w.len() == 1,
    )
    .await?;
    assert_eq!(back.len(), 1, "beating again after the outage");
    assert_eq!(back[0].id, "steady");
    assert!(!worker.is_finished(), "the worker goes on");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if q.push("after").await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let start = Instant::now();
    while done.load(Ordering::SeqCst) < 1 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(done.load(Ordering::SeqCst), 1, "and works");
    stop.cancel();
    worker.await??;
    assert!(q.workers().await?.is_empty());
    Ok(())
}
