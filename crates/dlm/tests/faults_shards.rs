//! Rows of the fault matrix (RELIABILITY.md) for a sharded queue (issue 35,
//! docs/sharded-queue.md section 10): K = 6 shards on a real 3-master Redis
//! Cluster (a replica each), in-process workers that claim batches across
//! the shards and ack each task under its lease, every enqueue, claim and ack
//! recorded for the homegrown checker ([`QueueHistory`]) and for the
//! third-party linearizability checker, judged shard by shard
//! ([`check_sharded_queue`]: each shard has its own fences). Faults: a
//! coordinated `CLUSTER FAILOVER` of one shard's master, workers killed
//! (aborted: nothing acked or given back), and one shard's slot migrated to
//! another master. Each row prints its figures (`--nocapture`).
mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::TestResult;
use dlm::Client;
use dlm::queue::{NewTask, OnDuplicate, Queue, QueueSettings};
use dlm_testkit::history::{Clock, QueueHistory, QueueReport};
use dlm_testkit::linearizable::{
    OpLog, QueueAction, QueueOp, QueueResult, QueueSpec, check_sharded_queue,
};
use dlm_testkit::{Cluster, RedisServer};

type Error = Box<dyn std::error::Error + Send + Sync>;
type QueueLog = Arc<OpLog<QueueOp>>;

/// Shards of every row's queue: 2 per master.
const K: u16 = 6;

async fn cluster_client(urls: &[String]) -> dlm::Result<Client> {
    Client::builder()
        .timeout(Duration::from_secs(1))
        .connect_cluster(urls)
        .await
}

/// One row's queue and its records.
struct Row {
    urls: Vec<String>,
    queue: Queue,
    history: Arc<QueueHistory>,
    log: QueueLog,
    /// Calls that failed (claims, and acks with a definite error).
    errors: Arc<AtomicU64>,
    /// Acks that succeeded.
    acks: Arc<AtomicU64>,
    /// Tasks enqueued (and recorded).
    tasks: usize,
}

impl Row {
    /// A queue `name` of [`K`] shards on `cluster`, spread 2/2/2 over its
    /// masters, with `n` tasks enqueued.
    async fn start(cluster: &Cluster, name: &str, n: usize) -> Result<Row, Error> {
        let urls = cluster.urls();
        let client = cluster_client(&urls).await?;
        // Many attempts: only a lease that runs out makes a task come back.
        let queue = client.queue(name).max_attempts(1000);
        queue.configure(&QueueSettings::default().shards(K)).await?;
        let mut per_master: BTreeMap<String, usize> = BTreeMap::new();
        for s in queue.shards().await?.shards {
            *per_master.entry(s.master.unwrap_or_default()).or_default() += 1;
        }
        assert_eq!(
            per_master.values().copied().collect::<Vec<_>>(),
            [2, 2, 2],
            "{per_master:?}"
        );
        let row = Row {
            urls,
            queue,
            history: Arc::new(QueueHistory::default()),
            log: Arc::new(OpLog::new(Clock::new())),
            errors: Arc::new(AtomicU64::new(0)),
            acks: Arc::new(AtomicU64::new(0)),
            tasks: 0,
        };
        row.enqueue("t", n).await?;
        Ok(Row { tasks: n, ..row })
    }

    /// Enqueue `{prefix}0 .. {prefix}n` in batches of 200, recorded.
    async fn enqueue(&self, prefix: &str, n: usize) -> dlm::Result<()> {
        let ids: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
        for chunk in ids.chunks(200) {
            let invoke = self.log.clock().now();
            self.queue
                .enqueue(
                    chunk.iter().map(|i| NewTask::new(i.clone())),
                    Duration::ZERO,
                    OnDuplicate::Keep,
                )
                .await?;
            for id in chunk {
                self.history.enqueued(id);
                let enqueue = QueueAction::Enqueue {
                    task: id.clone(),
                    deps: Vec::new(),
                    group: None,
                };
                self.log.queue(0, enqueue, invoke, QueueResult::Done);
            }
        }
        Ok(())
    }

    /// Push `id` until a push of it succeeds (a push whose reply was lost
    /// may have landed: `Keep` makes the next one a no-op), recorded over
    /// the whole window. False if it never did within 10 s.
    async fn push_until_done(&self, id: &str) -> bool {
        let invoke = self.log.clock().now();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if self.queue.push(id).await.is_ok() {
                self.history.enqueued(id);
                let enqueue = QueueAction::Enqueue {
                    task: id.to_string(),
                    deps: Vec::new(),
                    group: None,
                };
                self.log.queue(0, enqueue, invoke, QueueResult::Done);
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// A worker with a client (connections) of its own: claims up to 4
    /// across the shards, "works" 3-6 ms on each, acks it. Aborting it is
    /// a crash: nothing is acked or given back.
    fn worker(&self, process: usize, lease: Duration) -> tokio::task::JoinHandle<()> {
        let (urls, name) = (self.urls.clone(), self.queue.name().to_string());
        let (history, log) = (self.history.clone(), self.log.clone());
        let (errors, acks) = (self.errors.clone(), self.acks.clone());
        tokio::spawn(async move {
            let client = loop {
                match cluster_client(&urls).await {
                    Ok(c) => break c,
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            };
            let queue = client.queue(name).max_attempts(1000);
            loop {
                let invoke = log.clock().now();
                let claim = QueueAction::Claim { lease };
                let leases = match queue.claim(4, lease).await {
                    Ok(l) if l.is_empty() => {
                        log.queue(process, claim, invoke, QueueResult::Empty);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    Ok(l) => l,
                    Err(_) => {
                        log.queue(process, claim, invoke, QueueResult::Unknown);
                        errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                };
                for l in &leases {
                    let leased = QueueResult::Leased {
                        task: l.task().id.clone(),
                        fence: l.task().fence.get(),
                    };
                    log.queue(process, claim.clone(), invoke, leased);
                }
                for l in leases {
                    let (id, fence) = (l.task().id.clone(), l.task().fence.get());
                    history.handled(&id, fence);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(3..6))).await;
                    history.ack_started(&id, fence);
                    let ack = QueueAction::Ack {
                        task: id.clone(),
                        fence,
                    };
                    let pending = log.begin_queue(process, ack);
                    let r = l.ack().await;
                    log.end_queue(pending, common::lin::queue_settled(&r));
                    match r {
                        // No answer: it may have been acked.
                        Err(e) if e.is_retryable() => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        r => {
                            if r.is_ok() {
                                acks.fetch_add(1, Ordering::Relaxed);
                            }
                            history.acked(&id, fence, r.is_ok());
                        }
                    }
                }
            }
        })
    }

    /// Wait (up to `limit`) until the queue is drained, recording it.
    async fn drained_within(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            let invoke = self.log.clock().now();
            if self.queue.stats().await.is_ok_and(|s| s.is_drained()) {
                self.log
                    .queue(0, QueueAction::Drained, invoke, QueueResult::Done);
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Both checkers' verdicts; (report, "in all ..." clause, processed).
    async fn judge(&self, row: &str) -> Result<(QueueReport, String, u64), Error> {
        let report = self.history.check();
        let ops = self.log.ops();
        let mut home: HashMap<String, u16> = HashMap::new();
        for op in &ops {
            if let QueueAction::Enqueue { task, .. } = &op.action
                && !home.contains_key(task)
            {
                let shard = self.queue.shard_of(&NewTask::new(task.clone())).await?;
                home.insert(task.clone(), shard);
            }
        }
        let verdict = check_sharded_queue(&QueueSpec::default(), &ops, |t| {
            home.get(t).copied().unwrap_or(0)
        });
        let homegrown =
            report.lost.len() + report.unexplained_duplicates.len() + report.acked_twice.len();
        let judged = common::lin::agree(row, homegrown, &verdict);
        let processed = self.queue.stats().await?.processed;
        Ok((report, judged, processed))
    }
}

/// The violations cell of a row.
fn violations(report: &QueueReport, judged: &str) -> String {
    format!(
        "{} lost, {} unexplained duplicates, {} leases acked twice; in all {judged}",
        report.lost.len(),
        report.unexplained_duplicates.len(),
        report.acked_twice.len()
    )
}

/// Every task acked exactly once (Redis's count), none lost, every
/// duplicate after a lease that did not end in an ack.
fn assert_exactly_once(row: &Row, report: &QueueReport, processed: u64, drained: bool) {
    assert!(
        drained,
        "the queue drains once the fault is over: {report:?}"
    );
    assert!(report.ok(), "{report:?}");
    assert_eq!(processed, row.tasks as u64, "{report:?}");
}

/// Row "Cluster failover, sharded queue": K = 6 on 3 masters with a replica
/// each, 3 workers, a producer pushing one task every 5 ms; a coordinated
/// `CLUSTER FAILOVER` of the master of shard 1 a
/// third of the way in. No acked task lost, every task acked once in
/// Redis, duplicates only after leases that did not end in an ack; claims
/// go on on the promoted master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_loses_no_task_of_a_sharded_queue() -> TestResult {
    let cluster = Arc::new(Cluster::start()?);
    let n = 900 * common::row_scale() as usize;
    let mut row = Row::start(&cluster, "fs:failover", n).await?;
    let layout = row.queue.shards().await?;
    let slot = layout.shards[1].slot;
    let old_master = cluster.master_for_slot(slot).map(RedisServer::port);
    let lease = Duration::from_millis(1000);
    let workers: Vec<_> = (1..=3).map(|p| row.worker(p, lease)).collect();

    let run = common::row_duration(Duration::from_secs(3));
    let (c, acks) = (cluster.clone(), row.acks.clone());
    let failover = tokio::spawn(async move {
        tokio::time::sleep(run / 3).await;
        let began = Instant::now();
        let took =
            tokio::task::spawn_blocking(move || c.failover(slot).map(|()| began.elapsed())).await;
        (took, acks.load(Ordering::Relaxed))
    });
    let t0 = Instant::now();
    let (mut pushed, mut push_failed) = (0usize, 0usize);
    while t0.elapsed() < run {
        if row.push_until_done(&format!("p{pushed}")).await {
            pushed += 1;
        } else {
            push_failed += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    row.tasks += pushed;
    let (took, acks_at_failover_end) = failover.await?;
    let took = took??;
    let drained = row.drained_within(Duration::from_secs(30)).await;
    for w in workers {
        w.abort();
        let _ = w.await;
    }
    let acks_after = row.acks.load(Ordering::Relaxed) - acks_at_failover_end;
    let new_master = cluster.master_for_slot(slot).map(RedisServer::port);
    let name = "Cluster failover, sharded queue (K=6 on 3 masters)";
    let (report, judged, processed) = row.judge(name).await?;
    common::matrix_row(
        name,
        &format!("{n} tasks, then {pushed} pushed during the run, 3 workers, 1 s leases, {run:?}"),
        &format!(
            "`CLUSTER FAILOVER` of shard 1's master (slot {slot}: port {} to {}), {took:.1?} to a settled cluster",
            old_master.unwrap_or(0),
            new_master.unwrap_or(0)
        ),
        &violations(&report, &judged),
        &format!(
            "{} duplicates (all after an expired lease or a lost ack), {} acks of unknown outcome, {} errors, {push_failed} pushes given up, {acks_after} acks after the failover, {processed} acks counted by Redis",
            report.duplicates,
            report.ack_unknown.len(),
            row.errors.load(Ordering::Relaxed)
        ),
    );
    assert_ne!(old_master, new_master, "the slot changed master");
    assert_eq!(push_failed, 0, "every push landed within 10 s");
    assert!(acks_after > 0, "claims went on after the failover");
    assert_exactly_once(&row, &report, processed, drained);
    Ok(())
}

/// Row "worker SIGKILLs, sharded queue": K = 6, 3 workers, one killed
/// (aborted mid-batch, its leases left to run out) every 300 ms and
/// replaced. Every task acked exactly once in Redis, none lost, no lease
/// acked twice, every duplicate after a killed worker's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_no_task_of_a_sharded_queue() -> TestResult {
    let cluster = Cluster::start()?;
    let n = 1200 * common::row_scale() as usize;
    let row = Row::start(&cluster, "fs:kills", n).await?;
    let lease = Duration::from_millis(500);
    let mut started = 0;
    let mut start = || {
        started += 1;
        row.worker(started, lease)
    };
    let mut workers: Vec<_> = (0..3).map(|_| start()).collect();
    let run = common::row_duration(Duration::from_secs(3));
    let t0 = Instant::now();
    let mut kills = 0;
    while t0.elapsed() < run {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let victim = workers.swap_remove(fastrand::usize(..workers.len()));
        victim.abort();
        let _ = victim.await;
        kills += 1;
        workers.push(start());
    }
    let drained = row.drained_within(Duration::from_secs(30)).await;
    for w in workers {
        w.abort();
        let _ = w.await;
    }
    let name = "worker SIGKILLs, sharded queue (K=6 on 3 masters)";
    let (report, judged, processed) = row.judge(name).await?;
    common::matrix_row(
        name,
        &format!("{n} tasks, 3 workers, 500 ms leases, {run:?} of kills"),
        &format!("{kills} workers killed (aborted mid-batch), one every 300 ms"),
        &violations(&report, &judged),
        &format!(
            "{} duplicates (all after a killed worker's lease), {} acks of unknown outcome, {} errors, {processed} acks counted by Redis",
            report.duplicates,
            report.ack_unknown.len(),
            row.errors.load(Ordering::Relaxed)
        ),
    );
    assert!(kills >= 5, "{kills} kills");
    assert!(report.duplicates > 0, "a killed worker's tasks came back");
    assert_exactly_once(&row, &report, processed, drained);
    Ok(())
}

/// A plain connection to one cluster node (for the migration commands).
async fn node_connection(
    node: &RedisServer,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(node.url())?
        .get_multiplexed_async_connection()
        .await
}

/// `CLUSTER SETSLOT slot state id`.
fn setslot(slot: u16, state: &str, id: &str) -> redis::Cmd {
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(state)
        .arg(id)
        .clone()
}

/// `CLUSTER MYID` of a node.
async fn node_id(conn: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<String> {
    redis::cmd("CLUSTER").arg("MYID").query_async(conn).await
}

/// Move `slot` from its master to another, one key at a time with `pause`
/// between keys (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE` on
/// every node): (keys moved, the target's port).
async fn migrate_slot(
    cluster: &Cluster,
    slot: u16,
    pause: Duration,
) -> Result<(usize, u16), Error> {
    let source = cluster.master_for_slot(slot).ok_or("source master")?;
    let target = [0u16, 5500, 11000]
        .into_iter()
        .filter_map(|s| cluster.master_for_slot(s))
        .find(|n| n.port() != source.port())
        .ok_or("another master")?;
    let mut src = node_connection(source).await?;
    let mut dst = node_connection(target).await?;
    let (src_id, target_id) = (node_id(&mut src).await?, node_id(&mut dst).await?);
    let () = setslot(slot, "IMPORTING", &src_id)
        .query_async(&mut dst)
        .await?;
    let () = setslot(slot, "MIGRATING", &target_id)
        .query_async(&mut src)
        .await?;
    let mut moved = 0;
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(1)
            .query_async(&mut src)
            .await?;
        let Some(key) = keys.first() else { break };
        let _: redis::Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(target.port())
            .arg(key)
            .arg(0)
            .arg(5000)
            .query_async(&mut src)
            .await?;
        moved += 1;
        tokio::time::sleep(pause).await;
    }
    for node in cluster.nodes() {
        let mut c = node_connection(node).await?;
        let _: redis::RedisResult<()> = setslot(slot, "NODE", &target_id).query_async(&mut c).await;
    }
    Ok((moved, target.port()))
}

/// Row "slot migration during a run, sharded queue": K = 6, 3 workers and a
/// producer; shard 2's slot moves to another master, one key every 100 ms.
/// Calls on that shard meet ASK and TRYAGAIN and are retried; no task is
/// lost, every task acked once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shards_slot_migrating_loses_no_task() -> TestResult {
    let cluster = Cluster::start()?;
    let n = 900 * common::row_scale() as usize;
    let mut row = Row::start(&cluster, "fs:migrate", n).await?;
    let slot = row.queue.shards().await?.shards[2].slot;
    let old_master = cluster.master_for_slot(slot).map(RedisServer::port);
    let workers: Vec<_> = (1..=3)
        .map(|p| row.worker(p, Duration::from_millis(1000)))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    let run = common::row_duration(Duration::from_secs(2));
    let producer = {
        async {
            let (mut pushed, mut failed) = (0usize, 0usize);
            let t0 = Instant::now();
            while t0.elapsed() < run {
                if row.push_until_done(&format!("p{pushed}")).await {
                    pushed += 1;
                } else {
                    failed += 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (pushed, failed)
        }
    };
    let migration = async {
        let r = migrate_slot(&cluster, slot, Duration::from_millis(100)).await;
        (r, began.elapsed())
    };
    let ((moved, took), (pushed, push_failed)) = tokio::join!(migration, producer);
    let (moved, target) = moved?;
    row.tasks += pushed;
    let drained = row.drained_within(Duration::from_secs(30)).await;
    for w in workers {
        w.abort();
        let _ = w.await;
    }
    let name = "slot migration during a run, sharded queue (K=6 on 3 masters)";
    let (report, judged, processed) = row.judge(name).await?;
    common::matrix_row(
        name,
        &format!("{n} tasks, then {pushed} pushed during the run, 3 workers, 1 s leases"),
        &format!(
            "shard 2's slot {slot} moved from port {} to {target}, {moved} keys one every 100 ms ({took:.1?})",
            old_master.unwrap_or(0)
        ),
        &violations(&report, &judged),
        &format!(
            "{} duplicates (all after an expired lease or a lost ack), {} acks of unknown outcome, {} errors, {push_failed} pushes given up, {processed} acks counted by Redis",
            report.duplicates,
            report.ack_unknown.len(),
            row.errors.load(Ordering::Relaxed)
        ),
    );
    assert_eq!(
        cluster.master_for_slot(slot).map(RedisServer::port),
        Some(target),
        "the slot moved"
    );
    assert_eq!(push_failed, 0, "every push landed within 10 s");
    assert_exactly_once(&row, &report, processed, drained);
    Ok(())
}
