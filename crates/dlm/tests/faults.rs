//! Rows of the fault matrix (see RELIABILITY.md) that run in CI: network
//! faults injected by the testkit's proxy between dlm and real
//! redis-servers, under concurrent workloads whose histories the checkers
//! judge. Each row prints its figures (run with `--nocapture` to see them).
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{TestResult, ttl};
use dlm::{Client, Error};
use dlm_testkit::history::{Clock, Hold, QueueHistory, overlapping_holds};
use dlm_testkit::linearizable::{
    LockAction, LockModel, LockOp, Mode, OpLog, QueueAction, QueueOp, QueueResult, QueueSpec,
    check_locks, check_queue,
};
use dlm_testkit::{Direction, FaultProxy, RedisServer};

async fn client_on(url: &str) -> Result<Client, Error> {
    Client::builder()
        .timeout(Duration::from_millis(500))
        .connect(url)
        .await
}

/// A Redlock client that reaches each of `servers` through a proxy of its own.
async fn redlock_via_proxies(
    servers: &[RedisServer],
    seed: u64,
) -> Result<(Client, Vec<FaultProxy>), Box<dyn std::error::Error + Send + Sync>> {
    let proxies: Vec<FaultProxy> = servers
        .iter()
        .map(|s| FaultProxy::in_front_of(s, seed))
        .collect::<Result<_, _>>()?;
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let client = Client::builder()
        .timeout(Duration::from_secs(1))
        .connect_many(&urls)
        .await?;
    Ok((client, proxies))
}

/// What a lock workload recorded: the believed holds (for the homegrown
/// checker) and every invocation and completion (for the third-party one).
struct Recorded {
    holds: Vec<Hold>,
    ops: Vec<LockOp>,
    errors: u64,
}

impl Recorded {
    /// Both checkers judge the row; they must agree. Returns the overlaps
    /// and the text for the row's "violations" column.
    fn judge(&self, row: &str) -> (Vec<(Hold, Hold)>, String) {
        let overlaps = overlapping_holds(&self.holds);
        let verdict = check_locks(LockModel::Mutex, &self.ops);
        let text = common::lin::agree(row, overlaps.len(), &verdict);
        (overlaps, text)
    }
}

/// Two clients alternate on one lock for `run`; returns what they recorded.
async fn lock_workload(clients: &[Client], run: Duration, opts: dlm::LockOptions) -> Recorded {
    let log = Arc::new(OpLog::new(Clock::new()));
    let clock = log.clock();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let end = clock.now() + run;
    let acquire = LockAction::Acquire {
        mode: Mode::Exclusive,
        ttl: opts.ttl(),
    };
    let mut tasks = Vec::new();
    for (id, c) in clients.iter().enumerate() {
        let (c, holds, errors, opts, log) = (
            c.clone(),
            holds.clone(),
            errors.clone(),
            opts.clone(),
            log.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let lock = c.lock("matrix");
            while clock.now() < end {
                let lease = log.next_id();
                let invoke = clock.now();
                let r = lock.acquire(&opts).await;
                let got = common::lin::acquired(&r, |g| g.fence().map(dlm::Fence::get));
                log.lock(id, "matrix", lease, acquire, invoke, got);
                match r {
                    Ok(g) => {
                        let from = clock.now();
                        let believed = from + g.remaining();
                        let fence = g.fence().map(dlm::Fence::get);
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(1..10))).await;
                        let until = clock.now().min(believed);
                        let invoke = clock.now();
                        let r = g.release().await;
                        log.lock(
                            id,
                            "matrix",
                            lease,
                            LockAction::Release,
                            invoke,
                            common::lin::settled(&r),
                        );
                        if let Ok(mut h) = holds.lock() {
                            h.push(Hold {
                                holder: id,
                                lock: "matrix".into(),
                                from,
                                until,
                                fence,
                            });
                        }
                    }
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Recorded {
        holds: holds.lock().map(|h| h.clone()).unwrap_or_default(),
        ops: log.ops(),
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
    }
}

/// A queue workload's record of every invocation and completion, for the
/// third-party checker.
type QueueLog = Arc<OpLog<QueueOp>>;

/// Enqueues `n` tasks as `common::enqueue_recorded` does, recording them in
/// `log` too.
async fn enqueue_logged(
    queue: &dlm::queue::Queue,
    history: &QueueHistory,
    log: &QueueLog,
    prefix: &str,
    n: usize,
) -> dlm::Result<()> {
    let invoke = log.clock().now();
    common::enqueue_recorded(queue, history, prefix, n).await?;
    for i in 0..n {
        let task = format!("{prefix}{i}");
        let enqueue = QueueAction::Enqueue {
            task,
            deps: Vec::new(),
            group: None,
        };
        log.queue(0, enqueue, invoke, QueueResult::Done);
    }
    Ok(())
}

/// Claims up to `n` tasks with `lease`, recording the claim in `log`.
async fn claim_logged(
    queue: &dlm::queue::Queue,
    log: &QueueLog,
    process: usize,
    n: usize,
    lease: Duration,
) -> dlm::Result<Vec<dlm::queue::Lease>> {
    let invoke = log.clock().now();
    let r = queue.claim(n, lease).await;
    let claim = QueueAction::Claim { lease };
    match &r {
        Ok(leases) if leases.is_empty() => log.queue(process, claim, invoke, QueueResult::Empty),
        Ok(leases) => {
            for l in leases {
                let leased = QueueResult::Leased {
                    task: l.task().id.clone(),
                    fence: l.task().fence.get(),
                };
                log.queue(process, claim.clone(), invoke, leased);
            }
        }
        Err(_) => log.queue(process, claim, invoke, QueueResult::Unknown),
    }
    r
}

/// Acks `lease`, recording it in `log`.
async fn ack_logged(lease: dlm::queue::Lease, log: &QueueLog, process: usize) -> dlm::Result<()> {
    let ack = QueueAction::Ack {
        task: lease.task().id.clone(),
        fence: lease.task().fence.get(),
    };
    // Begun before the call: a worker killed during it leaves it unknown.
    let pending = log.begin_queue(process, ack);
    let r = lease.ack().await;
    log.end_queue(pending, common::lin::queue_settled(&r));
    r
}

/// Records in `log` whether `queue` is drained now (its stats).
async fn drained_logged(queue: &dlm::queue::Queue, log: &QueueLog) -> bool {
    let invoke = log.clock().now();
    let drained = queue.stats().await.is_ok_and(|s| s.is_drained());
    if drained {
        log.queue(0, QueueAction::Drained, invoke, QueueResult::Done);
    }
    drained
}

/// Row "drop replies on acquire": the SET lands, the reply is lost. The
/// acquire fails as unknown, nobody believes they hold the lock, and the
/// orphaned key is gone within its TTL (released once replies flow again,
/// or expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_replies_leave_no_holder_and_nothing_past_the_ttl() -> TestResult {
    let server = RedisServer::start()?;
    let proxy = FaultProxy::in_front_of(&server, 1)?;
    let through = client_on(&proxy.url()).await?;
    let direct = client_on(&server.url()).await?;
    // No warm-up: the client loads its scripts when it connects, so a
    // script's first call is no NOSCRIPT round trip whose reply could be lost.
    proxy.set_drop_replies(true);
    let t0 = Instant::now();
    let r = through.lock("orphan").acquire(&ttl(1500)).await;
    assert!(matches!(r, Err(ref e) if e.is_retryable()), "{r:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "bounded by the call timeout"
    );
    // The SET landed although its reply was lost. The caller's clean-up
    // release travels the same way (its reply is dropped too, but it runs):
    // the key is gone at once, or at the latest when its TTL runs out.
    let orphaned = direct.lock("orphan").status().await?.held;
    proxy.set_drop_replies(false);
    // Freed within the TTL: by the background release, or by expiry.
    let t0 = Instant::now();
    let g = direct
        .lock("orphan")
        .acquire(&ttl(1000).wait(Duration::from_secs(3)))
        .await?;
    let freed = t0.elapsed();
    assert!(freed < Duration::from_millis(1700), "freed after {freed:?}");
    g.release().await?;
    common::matrix_row(
        "drop replies on acquire",
        "one acquire, 1.5 s TTL, on a fresh connection",
        &format!(
            "every reply dropped ({} bytes)",
            proxy.stats().discarded_to_client
        ),
        "no holder: the caller got a retryable error",
        &format!(
            "key still there after the error: {orphaned}; freed {freed:.1?} later (the clean-up release ran, only its reply was lost)"
        ),
    );
    Ok(())
}

/// Row "blackholed nodes under Redlock(5)": with 1 and then 2 nodes
/// blackholed, two clients alternating on one lock never overlap, and an
/// acquire costs at most about one per-node timeout more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_redlock_nodes_cause_no_overlap_and_bounded_latency() -> TestResult {
    let servers = RedisServer::start_many(5)?;
    let mut clients = Vec::new();
    let mut proxies = Vec::new();
    for c in 0..2 {
        let (client, ps) = redlock_via_proxies(&servers, 10 + c).await?;
        clients.push(client);
        proxies.push(ps);
    }
    let opts = ttl(5000)
        .wait(Duration::from_secs(5))
        .node_timeout(Duration::from_millis(50));
    for blackholed in [1, 2] {
        for ps in &proxies {
            ps[5 - blackholed].set_blackhole(true);
        }
        let t0 = Instant::now();
        clients[0]
            .lock("probe")
            .acquire(&opts)
            .await?
            .release()
            .await?;
        let single = t0.elapsed();
        let run = common::row_duration(Duration::from_millis(1500));
        let rec = lock_workload(&clients, run, opts.clone()).await;
        let row = format!("blackholed nodes under Redlock(5): {blackholed}");
        let (overlaps, judged) = rec.judge(&row);
        let (holds, errors) = (&rec.holds, rec.errors);
        common::matrix_row(
            &row,
            &format!("2 clients alternate on one lock, 50 ms per-node timeout, {run:?}"),
            &format!("{blackholed} of 5 nodes blackholed for both clients"),
            &format!("overlaps: {judged}"),
            &format!(
                "{} acquisitions, {errors} errors; one uncontended acquire+release {single:.1?}",
                holds.len()
            ),
        );
        assert!(overlaps.is_empty(), "{overlaps:?}");
        // Under contention a split vote among the healthy nodes waits for
        // the silent one's timeout (see RELIABILITY.md); it never stops.
        assert!(!holds.is_empty(), "the lock kept working");
        assert!(single < Duration::from_millis(500), "bounded: {single:?}");
    }
    Ok(())
}

/// Row "partition a client from the majority / minority under Redlock": cut
/// from 3 of 5 nodes, it gets a clear NoQuorum within its wait; cut from 2,
/// it still locks; the other client is never overlapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_client_gets_no_quorum_and_never_overlaps() -> TestResult {
    let servers = RedisServer::start_many(5)?;
    let (cut_off, proxies) = redlock_via_proxies(&servers, 20).await?;
    let direct_urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let healthy = Client::builder().connect_many(&direct_urls).await?;
    let opts = ttl(3000).node_timeout(Duration::from_millis(50));

    for p in &proxies[..3] {
        p.partition();
    }
    let held = healthy.lock("part").acquire(&opts).await?;
    let t0 = Instant::now();
    let r = cut_off
        .lock("part")
        .acquire(&opts.clone().wait(Duration::from_millis(300)))
        .await;
    let no_quorum_after = t0.elapsed();
    assert!(matches!(r, Err(Error::NoQuorum { .. })), "{r:?}");
    assert!(
        no_quorum_after < Duration::from_millis(800),
        "{no_quorum_after:?}"
    );
    common::matrix_row(
        "partition a client from a majority, Redlock(5)",
        "2 clients, one holds",
        "3 of 5 nodes cut from the other client",
        "0 overlaps",
        &format!("`NoQuorum` after {no_quorum_after:.0?} (its wait: 300 ms)"),
    );
    held.release().await?;

    for p in &proxies[..3] {
        p.heal();
    }
    for p in &proxies[..2] {
        p.partition();
    }
    let run = common::row_duration(Duration::from_millis(1500));
    let rec = lock_workload(&[cut_off, healthy], run, opts.wait(Duration::from_secs(5))).await;
    let row = "partition a client from a minority, Redlock(5)";
    let (overlaps, judged) = rec.judge(row);
    let (holds, errors) = (&rec.holds, rec.errors);
    common::matrix_row(
        row,
        &format!("2 clients alternate on one lock, {run:?}"),
        "2 of 5 nodes cut from one client",
        &format!("overlaps: {judged}"),
        &format!(
            "{} acquisitions ({} by the cut-off client), {errors} errors",
            holds.len(),
            holds.iter().filter(|h| h.holder == 0).count()
        ),
    );
    assert!(overlaps.is_empty(), "{overlaps:?}");
    assert!(
        holds.iter().any(|h| h.holder == 0),
        "the client cut from a minority still locks"
    );
    Ok(())
}

/// Row "connection reset mid-stream": the proxy resets the worker's
/// connection after every few KB; no task is lost, every duplicate is
/// explained by a lease that did not end in an ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_lose_no_task() -> TestResult {
    let server = RedisServer::start()?;
    let proxy = FaultProxy::in_front_of(&server, 30)?;
    let producer = client_on(&server.url()).await?;
    let worker_client = Client::builder()
        .timeout(Duration::from_millis(500))
        .connect(&proxy.url())
        .await?;
    let queue = producer.queue("resets").max_attempts(1000);
    let history = Arc::new(QueueHistory::default());
    let log: QueueLog = Arc::new(OpLog::new(Clock::new()));
    let n = 400 * common::row_scale() as usize;
    enqueue_logged(&queue, &history, &log, "r", n).await?;
    // Reset the worker's connection after every 16 KB for 3 s (a few dozen
    // commands each time), then let it drain without the fault.
    proxy.set_reset_after(Some(16 * 1024));
    let wq = worker_client.queue("resets").max_attempts(1000);
    let t0 = Instant::now();
    let faulty_for = common::row_duration(Duration::from_secs(3));
    let mut idle = 0;
    let mut errors = 0u64;
    while idle < 20 && t0.elapsed() < faulty_for + Duration::from_secs(30) {
        let faulty = t0.elapsed() < faulty_for;
        if !faulty {
            proxy.set_reset_after(None);
        } else if proxy.stats().open == 0 {
            proxy.set_reset_after(Some(16 * 1024));
        }
        match claim_logged(&wq, &log, 1, 8, Duration::from_millis(300)).await {
            Ok(leases) if leases.is_empty() => {
                if !faulty {
                    idle += 1;
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            Ok(leases) => {
                idle = 0;
                for l in leases {
                    let (id, fence) = (l.task().id.clone(), l.task().fence.get());
                    history.handled(&id, fence);
                    let ok = ack_logged(l, &log, 1).await.is_ok();
                    history.acked(&id, fence, ok);
                }
            }
            Err(_) => {
                errors += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    proxy.set_reset_after(None);
    assert!(drained_logged(&queue, &log).await, "the queue drained");
    let report = history.check();
    let row = "connection reset mid-stream, queue";
    let verdict = check_queue(&QueueSpec::default(), &log.ops());
    let judged = common::lin::agree(row, report.lost.len(), &verdict);
    let stats = proxy.stats();
    common::matrix_row(
        row,
        &format!("{} tasks, one worker", report.enqueued),
        &format!(
            "a reset after every 16 KB for {faulty_for:?} ({} resets)",
            stats.resets
        ),
        &format!("lost: {judged}"),
        &format!(
            "{} duplicates, all explained; {errors} errors",
            report.duplicates
        ),
    );
    assert!(stats.resets > 0, "the fault happened");
    assert!(report.ok(), "{report:?}");
    Ok(())
}

/// Row "latency 50 ms ± 50 ms on one node" under Redlock: no overlap of the
/// believed intervals, which end where the guard's own validity says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_on_one_node_causes_no_overlap() -> TestResult {
    let servers = RedisServer::start_many(3)?;
    let mut clients = Vec::new();
    let mut proxies = Vec::new();
    for c in 0..2 {
        let (client, ps) = redlock_via_proxies(&servers, 40 + c).await?;
        ps[0].set_latency(
            Direction::ToClient,
            Duration::from_millis(50),
            Duration::from_millis(50),
        );
        clients.push(client);
        proxies.push(ps);
    }
    let opts = ttl(1000).wait(Duration::from_secs(5));
    let run = common::row_duration(Duration::from_millis(1500));
    let rec = lock_workload(&clients, run, opts).await;
    let row = "latency 50 ms ± 50 ms on one node, Redlock(3)";
    let (overlaps, judged) = rec.judge(row);
    let (holds, errors) = (&rec.holds, rec.errors);
    common::matrix_row(
        row,
        &format!("2 clients alternate on one lock, 1 s TTL, {run:?}"),
        "replies from one of 3 nodes delayed 50-100 ms",
        &format!("overlaps: {judged}"),
        &format!(
            "{} acquisitions, {errors} errors; the validity left after each grant accounts for the delay",
            holds.len()
        ),
    );
    assert!(overlaps.is_empty(), "{overlaps:?}");
    assert!(holds.len() > 10);
    Ok(())
}

/// Rows "drop replies on release / on extend": a release whose reply is lost
/// still frees the lock; a watchdog whose renewals go unanswered makes its
/// guard report the lock lost by its own clock before anyone else can have
/// it, so the believed intervals never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_release_and_extend_replies_cause_no_overlap() -> TestResult {
    let server = RedisServer::start()?;
    let proxy = FaultProxy::in_front_of(&server, 50)?;
    let holder = client_on(&proxy.url()).await?;
    let other = client_on(&server.url()).await?;
    let clock = Clock::new();
    let log = OpLog::new(clock);
    let exclusive = |ttl| LockAction::Acquire {
        mode: Mode::Exclusive,
        ttl,
    };
    let fence_of = |g: &dlm::LockGuard| g.fence().map(dlm::Fence::get);

    // No warm-up (the regression test of a finding in RELIABILITY.md): the
    // client loaded its scripts when it connected, so the first release is
    // an EVALSHA that runs, not a NOSCRIPT whose lost reply means it never
    // ran.
    // Release: the DEL reaches Redis, its reply does not.
    let invoke = clock.now();
    let g = holder.lock("rel").acquire(&ttl(5000)).await;
    let got = common::lin::acquired(&g, fence_of);
    log.lock(0, "rel", 1, exclusive(Duration::from_secs(5)), invoke, got);
    let g = g?;
    proxy.set_drop_replies(true);
    let invoke = clock.now();
    let r = g.release().await;
    log.lock(
        0,
        "rel",
        1,
        LockAction::Release,
        invoke,
        common::lin::settled(&r),
    );
    assert!(r.as_ref().is_err_and(Error::is_retryable), "{r:?}");
    let t0 = Instant::now();
    let invoke = clock.now();
    let g = other
        .lock("rel")
        .acquire(&ttl(1000).wait(Duration::from_secs(1)))
        .await;
    let got = common::lin::acquired(&g, fence_of);
    log.lock(1, "rel", 2, exclusive(Duration::from_secs(1)), invoke, got);
    let invoke = clock.now();
    let r = g?.release().await;
    log.lock(
        1,
        "rel",
        2,
        LockAction::Release,
        invoke,
        common::lin::settled(&r),
    );
    r?;
    let freed = t0.elapsed();
    proxy.set_drop_replies(false);
    assert!(freed < Duration::from_millis(500), "freed after {freed:?}");

    // Extend: the watchdog's renewals land, their replies do not.
    // (The proxy resets a connection that lost replies once they flow
    // again: the first call reconnects, hence the wait.)
    let invoke = clock.now();
    let g = holder
        .lock("ext")
        .acquire(&ttl(600).watchdog(true).wait(Duration::from_secs(2)))
        .await;
    let got = common::lin::acquired(&g, fence_of);
    log.lock(
        0,
        "ext",
        3,
        exclusive(Duration::from_millis(600)),
        invoke,
        got,
    );
    let g = g?;
    let from = clock.now();
    // The holder's own clock ends its belief at the deadline, whenever the
    // lost() wake-up arrives (on a starved runtime, later).
    let deadline = from + g.remaining();
    proxy.set_drop_replies(true);
    tokio::time::timeout(Duration::from_secs(3), g.lost()).await?;
    let woken = clock.now();
    let believed_until = woken.min(deadline);
    let invoke = clock.now();
    let got = other
        .lock("ext")
        .acquire(&ttl(1000).wait(Duration::from_secs(5)))
        .await;
    let granted = common::lin::acquired(&got, fence_of);
    log.lock(
        1,
        "ext",
        4,
        exclusive(Duration::from_secs(1)),
        invoke,
        granted,
    );
    let other_from = clock.now();
    let invoke = clock.now();
    let r = got?.release().await;
    log.lock(
        1,
        "ext",
        4,
        LockAction::Release,
        invoke,
        common::lin::settled(&r),
    );
    r?;
    proxy.set_drop_replies(false);
    let holds = [
        Hold {
            holder: 0,
            lock: "ext".into(),
            from,
            until: believed_until,
            fence: None,
        },
        Hold {
            holder: 1,
            lock: "ext".into(),
            from: other_from,
            until: clock.now(),
            fence: None,
        },
    ];
    let overlaps = overlapping_holds(&holds);
    let row = "drop replies on release / on extend";
    let verdict = check_locks(LockModel::Mutex, &log.ops());
    let judged = common::lin::agree(row, overlaps.len(), &verdict);
    common::matrix_row(
        row,
        "one holder (600 ms lease, watchdog), one other client",
        "every reply of the holder's connection dropped",
        &format!("overlaps: {judged}"),
        &format!(
            "a release whose reply was lost freed the lock ({freed:.1?} later the other client had it); with renewals unanswered the guard's lease ended by its own clock after {:.0?} of its 600 ms (`lost()` woke {:.0?} after that), {:.0?} before the other client got it",
            believed_until - from,
            woken.saturating_sub(deadline),
            other_from.saturating_sub(believed_until)
        ),
    );
    assert!(overlaps.is_empty(), "{overlaps:?}");
    Ok(())
}

/// How a server keeps its data across a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Persistence {
    /// `appendonly yes`, `appendfsync always`.
    AofAlways,
    /// `appendonly yes`, `appendfsync everysec`.
    AofEverysec,
    /// Nothing: a restarted server comes back empty.
    None,
}

impl Persistence {
    const ALL: [Persistence; 3] = [
        Persistence::AofAlways,
        Persistence::AofEverysec,
        Persistence::None,
    ];

    fn start(self) -> Result<RedisServer, dlm_testkit::Error> {
        let builder = RedisServer::builder();
        match self {
            Persistence::AofAlways => builder.aof(true),
            Persistence::AofEverysec => builder.aof(true).arg("--appendfsync").arg("everysec"),
            Persistence::None => builder,
        }
        .start()
    }

    fn name(self) -> &'static str {
        match self {
            Persistence::AofAlways => "AOF always",
            Persistence::AofEverysec => "AOF everysec",
            Persistence::None => "no persistence",
        }
    }
}

/// SIGKILL `server` and start it again on the same port (off the runtime's
/// threads); returns the server and how long it was gone.
async fn crash_and_restart(
    mut server: RedisServer,
) -> Result<(RedisServer, Duration), Box<dyn std::error::Error + Send + Sync>> {
    Ok(tokio::task::spawn_blocking(move || {
        let t0 = Instant::now();
        server.restart().map(|()| (server, t0.elapsed()))
    })
    .await??)
}

/// Row "Redis restart with AOF always / everysec / without persistence":
/// three clients take turns on one lock; the server is SIGKILLed and
/// restarted while one of them holds it. With AOF the lock (and its fence
/// counter) survive: no overlap. Without persistence the lock is gone, the
/// next client gets it while the holder still believes it holds: the
/// checker reports the overlap, the assumption "Redis keeps what it
/// acknowledged" being broken (documented in RELIABILITY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_redis_keeps_locks_only_with_persistence() -> TestResult {
    for mode in Persistence::ALL {
        let mut server = mode.start()?;
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(client_on(&server.url()).await?);
        }
        let clock = Clock::new();
        let run = common::row_duration(Duration::from_secs(3));
        let end = clock.now() + run;
        let holding: Arc<Mutex<Option<Duration>>> = Arc::new(Mutex::new(None));
        let holds = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::new(OpLog::new(clock));
        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut tasks = Vec::new();
        for (id, c) in clients.iter().enumerate() {
            let (c, holding, holds, errors, log) = (
                c.clone(),
                holding.clone(),
                holds.clone(),
                errors.clone(),
                log.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let lock = c.lock("restart");
                let opts = ttl(3000).wait(Duration::from_secs(2));
                let acquire = LockAction::Acquire {
                    mode: Mode::Exclusive,
                    ttl: opts.ttl(),
                };
                while clock.now() < end {
                    let lease = log.next_id();
                    let invoke = clock.now();
                    let r = lock.acquire(&opts).await;
                    let got = common::lin::acquired(&r, |g| g.fence().map(dlm::Fence::get));
                    log.lock(id, "restart", lease, acquire, invoke, got);
                    let Ok(g) = r else {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let from = clock.now();
                    let believed = from + g.remaining();
                    if let Ok(mut h) = holding.lock() {
                        *h = Some(from);
                    }
                    tokio::time::sleep(Duration::from_millis(400)).await;
                    let until = clock.now().min(believed);
                    if let Ok(mut h) = holding.lock() {
                        *h = None;
                    }
                    let fence = g.fence().map(dlm::Fence::get);
                    let invoke = clock.now();
                    let r = g.release().await;
                    let released = common::lin::settled(&r);
                    log.lock(id, "restart", lease, LockAction::Release, invoke, released);
                    if let Ok(mut h) = holds.lock() {
                        h.push(Hold {
                            holder: id,
                            lock: "restart".into(),
                            from,
                            until,
                            fence,
                        });
                    }
                }
            }));
        }
        // Crash the server 50 ms into a hold, a third of the way in.
        let crash_after = (end - clock.now()) / 3;
        tokio::time::sleep(crash_after).await;
        loop {
            let held_for = holding
                .lock()
                .ok()
                .and_then(|h| h.map(|from| clock.now().saturating_sub(from)));
            if held_for.is_some_and(|d| d >= Duration::from_millis(50)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (restarted, gone) = crash_and_restart(server).await?;
        server = restarted;
        for t in tasks {
            t.await?;
        }
        let mut holds = holds.lock().map(|h| h.clone()).unwrap_or_default();
        let overlaps = overlapping_holds(&holds);
        holds.sort_by_key(|h| h.from);
        let fence_drops = holds.windows(2).filter(|w| w[1].fence < w[0].fence).count();
        let row = format!("Redis crash and restart, {}", mode.name());
        let verdict = check_locks(LockModel::Mutex, &log.ops());
        let judged = common::lin::agree(&row, overlaps.len() + fence_drops, &verdict);
        let longest_gap = holds
            .windows(2)
            .map(|w| w[1].from.saturating_sub(w[0].until))
            .max()
            .unwrap_or_default();
        let errors = errors.load(std::sync::atomic::Ordering::Relaxed);
        common::matrix_row(
            &row,
            &format!("3 clients, one lock, 400 ms holds, 3 s TTL, {run:?}"),
            &format!("SIGKILL and restart while held (gone {gone:.0?})"),
            &format!("overlaps and fence drops: {judged}"),
            &format!(
                "{} acquisitions, {errors} errors, longest wait between holders {longest_gap:.0?}, fences went backwards {fence_drops} times",
                holds.len()
            ),
        );
        if mode == Persistence::None {
            // The broken assumption, caught: the lock vanished under its holder.
            assert!(!overlaps.is_empty(), "the checker must see it: {holds:?}");
            assert!(fence_drops > 0, "the fence counter restarted too");
        } else {
            assert!(overlaps.is_empty(), "{mode:?}: {overlaps:?}");
            assert_eq!(fence_drops, 0, "{mode:?}: {holds:?}");
        }
        // The holder's release right after the crash goes out on a fresh
        // connection: the lock is not stuck until its TTL (a regression test).
        assert!(longest_gap < Duration::from_millis(1500), "{holds:?}");
        drop(server);
    }
    Ok(())
}

/// One in-process worker of the crash row: its own client (its own
/// connections, through `proxy`), claiming batches of 4 and acking each after
/// 10-20 ms of "work". Aborting it is a crash: nothing is acked or given back.
fn crash_row_worker(
    url: String,
    history: Arc<QueueHistory>,
    log: QueueLog,
    process: usize,
    errors: Arc<std::sync::atomic::AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Ok(client) = client_on(&url).await else {
            errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        };
        let queue = client.queue("crashes").max_attempts(1000);
        loop {
            match claim_logged(&queue, &log, process, 4, Duration::from_millis(500)).await {
                Ok(leases) if leases.is_empty() => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(leases) => {
                    for l in leases {
                        let (id, fence) = (l.task().id.clone(), l.task().fence.get());
                        history.handled(&id, fence);
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(10..20))).await;
                        // Killed while the ack is in flight, or its reply
                        // lost: the ack's outcome stays unknown.
                        history.ack_started(&id, fence);
                        match ack_logged(l, &log, process).await {
                            Err(e) if e.is_retryable() => {}
                            r => history.acked(&id, fence, r.is_ok()),
                        }
                    }
                }
                Err(_) => {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    })
}

/// Row "queue workers killed, Redis restarted, replies dropped on ack":
/// three workers, one killed every 500 ms and replaced, the server
/// SIGKILLed and restarted, then every reply dropped for 400 ms (acks land,
/// their replies do not). With AOF always no task is lost and every
/// duplicate follows a lease that did not end in an ack; without
/// persistence the restart loses the waiting tasks and the checker says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_and_a_crashed_redis_lose_no_task_with_aof() -> TestResult {
    for mode in [Persistence::AofAlways, Persistence::None] {
        let mut server = mode.start()?;
        let proxy = FaultProxy::in_front_of(&server, 60)?;
        let producer = client_on(&server.url()).await?;
        let queue = producer.queue("crashes");
        let history = Arc::new(QueueHistory::default());
        let tasks = 600 * common::row_scale() as usize;
        let log: QueueLog = Arc::new(OpLog::new(Clock::new()));
        enqueue_logged(&queue, &history, &log, "c", tasks).await?;

        let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut started = 0;
        let mut start = || {
            started += 1;
            crash_row_worker(
                proxy.url(),
                history.clone(),
                log.clone(),
                started,
                errors.clone(),
            )
        };
        let mut workers: Vec<_> = (0..3).map(|_| start()).collect();
        let t0 = Instant::now();
        let faulty = common::row_duration(Duration::from_secs(3));
        let (mut kills, mut crashed, mut dropped) = (0, false, false);
        let mut next_kill = Duration::from_millis(500);
        while t0.elapsed() < faulty {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = t0.elapsed();
            if now >= next_kill {
                let victim = workers.swap_remove(fastrand::usize(..workers.len()));
                victim.abort();
                let _ = victim.await;
                kills += 1;
                workers.push(start());
                next_kill += Duration::from_millis(500);
            }
            if !crashed && now >= faulty * 2 / 5 {
                let (restarted, _) = crash_and_restart(server).await?;
                server = restarted;
                crashed = true;
            }
            if !dropped && now >= faulty * 2 / 3 {
                proxy.set_drop_replies(true);
                tokio::time::sleep(Duration::from_millis(400)).await;
                proxy.set_drop_replies(false);
                dropped = true;
            }
        }
        // Drain without faults: the leases of killed workers run out and
        // their tasks come back.
        let mut drained = false;
        while t0.elapsed() < faulty + Duration::from_secs(30) {
            if drained_logged(&queue, &log).await {
                drained = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for w in workers {
            w.abort();
        }
        let report = history.check();
        // Acks whose replies were lost: Redis' count of acks settles them.
        let processed = queue.stats().await?.processed;
        let stats = proxy.stats();
        let row = format!(
            "queue workers killed, Redis crashed, ack replies dropped, {}",
            mode.name()
        );
        let homegrown =
            report.lost.len() + report.unexplained_duplicates.len() + report.acked_twice.len();
        let verdict = check_queue(&QueueSpec::default(), &log.ops());
        let judged = common::lin::agree(&row, homegrown, &verdict);
        common::matrix_row(
            &row,
            &format!("{tasks} tasks, 3 workers, 500 ms leases, {faulty:?} of faults"),
            &format!(
                "{kills} workers killed, 1 SIGKILL and restart of Redis, {} reply bytes dropped",
                stats.discarded_to_client
            ),
            &format!(
                "{} lost, {} unexplained duplicates, {} leases acked twice; in all {judged}",
                report.lost.len(),
                report.unexplained_duplicates.len(),
                report.acked_twice.len()
            ),
            &format!(
                "{} duplicates (all after an expired lease or a lost ack), {} acks of unknown outcome, {} errors, {processed} acks counted by Redis",
                report.duplicates,
                report.ack_unknown.len(),
                errors.load(std::sync::atomic::Ordering::Relaxed)
            ),
        );
        assert!(drained, "the queue drains once the faults stop");
        assert!(report.unexplained_duplicates.is_empty(), "{report:?}");
        assert!(report.acked_twice.is_empty(), "{report:?}");
        if mode == Persistence::None {
            assert!(
                !report.lost.is_empty(),
                "the checker must see the lost tasks"
            );
        } else {
            assert!(report.lost.is_empty(), "{report:?}");
            // Each task acked exactly once, the unknown acks included.
            assert_eq!(processed, tasks as u64, "{report:?}");
        }
        drop(server);
    }
    Ok(())
}

/// Row "connection reset mid-script, every ~100th command", locks: two
/// clients alternate on one lock, each through a proxy that resets its
/// connection after every 12 KB sent (about 100 lock commands); scripts cut
/// off mid-way must never leave two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_cause_no_lock_overlap() -> TestResult {
    let server = RedisServer::start()?;
    let proxies = [
        FaultProxy::in_front_of(&server, 70)?,
        FaultProxy::in_front_of(&server, 71)?,
    ];
    let mut clients = Vec::new();
    for p in &proxies {
        clients.push(client_on(&p.url()).await?);
        p.set_reset_after(Some(12 * 1024));
    }
    let run = common::row_duration(Duration::from_millis(1500));
    let rec = lock_workload(&clients, run, ttl(1000).wait(Duration::from_secs(3))).await;
    let row = "connection reset mid-stream, locks";
    let (overlaps, judged) = rec.judge(row);
    let (holds, errors) = (&rec.holds, rec.errors);
    let resets: u64 = proxies.iter().map(|p| p.stats().resets).sum();
    common::matrix_row(
        row,
        &format!("2 clients alternate on one lock, 1 s TTL, {run:?}"),
        &format!("each connection reset after 12 KB (about 100 commands): {resets} resets"),
        &format!("overlaps: {judged}"),
        &format!(
            "{} acquisitions, {errors} errors (the calls cut off by a reset)",
            holds.len()
        ),
    );
    assert!(resets > 0, "the fault happened");
    assert!(overlaps.is_empty(), "{overlaps:?}");
    assert!(holds.len() > 20, "the lock kept working: {}", holds.len());
    Ok(())
}
