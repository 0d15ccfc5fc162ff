//! The fault matrix's rows for a sharded queue (issue 35; RELIABILITY.md):
//! a Cluster failover of one master, workers dying with their leases, and a
//! slot of one shard moving to another master, each during a run over 6
//! shards on a real 3-master Redis Cluster with replicas. Every run is
//! judged by its history: every task pushed is acked, no lease (task id and
//! fencing token) is acked twice, and the queue ends empty.
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{TestResult, matrix_row};
use dlm::queue::{NewTask, OnDuplicate, Queue, QueueSettings};
use dlm::{CancellationToken, Client};
use dlm_testkit::Cluster;

const TASKS: usize = 900;
/// What each task's "work" takes, so that a run outlasts its fault (about 3 s).
const WORK: Duration = Duration::from_millis(10);
const SHARDS: u16 = 6;

/// The acks a run saw: (id, fence) -> how many times an ack of it succeeded.
type Acked = Arc<Mutex<HashMap<(String, u64), u32>>>;

async fn connect(cluster: &Cluster) -> dlm::Result<Client> {
    Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_cluster(&cluster.urls())
        .await
}

/// Push the run's tasks into a fresh 6-shard queue.
async fn fill(queue: &Queue) -> dlm::Result<()> {
    queue
        .configure(&QueueSettings::default().shards(SHARDS))
        .await?;
    let ids: Vec<NewTask> = (0..TASKS).map(|i| NewTask::new(format!("t{i}"))).collect();
    for chunk in ids.chunks(100) {
        queue
            .enqueue(chunk.to_vec(), Duration::ZERO, OnDuplicate::Keep)
            .await?;
    }
    Ok(())
}

/// A claimer: claims, and acks each task unless this "process" dies (with
/// probability `die_every` per claim, it drops its leases unsettled and a
/// fresh client takes its place, as after a SIGKILL). Errors (a failover in
/// progress) are retried; acks that succeed are recorded.
async fn claimer(
    cluster_urls: Vec<String>,
    name: &'static str,
    acked: Acked,
    stop: CancellationToken,
    die_every: Option<u32>,
    seed: u64,
) -> dlm::Result<()> {
    let mut rng = seed;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let open = || async {
        Client::builder()
            .timeout(Duration::from_secs(2))
            .connect_cluster(&cluster_urls)
            .await
    };
    let mut client = open().await?;
    while !stop.is_cancelled() {
        let queue = client.queue(name);
        let leases = match queue.claim(10, Duration::from_millis(800)).await {
            Ok(l) => l,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if leases.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        if let Some(n) = die_every
            && next() % u64::from(n) == 0
        {
            // Dies holding its leases: they run out and come back.
            drop(leases);
            client = open().await?;
            continue;
        }
        for lease in leases {
            tokio::time::sleep(WORK).await;
            let key = (lease.task().id.clone(), lease.task().fence.get());
            if lease.ack().await.is_ok()
                && let Ok(mut a) = acked.lock()
            {
                *a.entry(key).or_insert(0) += 1;
            }
        }
    }
    Ok(())
}

/// Judge a run: every task acked, no lease acked twice, the queue empty.
async fn judge(queue: &Queue, acked: &Acked, row: &str, fault: &str) -> TestResult {
    let acked = acked.lock().map(|a| a.clone()).unwrap_or_default();
    let twice: Vec<_> = acked.iter().filter(|(_, n)| **n > 1).collect();
    let ids: HashSet<&str> = acked.keys().map(|(id, _)| id.as_str()).collect();
    let lost: Vec<String> = (0..TASKS)
        .map(|i| format!("t{i}"))
        .filter(|id| !ids.contains(id.as_str()))
        .collect();
    let stats = queue.stats().await?;
    let report = queue.check_invariants().await?;
    matrix_row(
        row,
        &format!("{TASKS} tasks over {SHARDS} shards on 3 masters, 3 claimers"),
        fault,
        &format!("{} lost, {} leases acked twice", lost.len(), twice.len()),
        &format!(
            "{} acks for {} tasks (more: leases that ran out); invariants {}",
            acked.len(),
            TASKS,
            if report.is_ok() { "hold" } else { "VIOLATED" }
        ),
    );
    assert!(lost.is_empty(), "lost: {lost:?}");
    assert!(twice.is_empty(), "acked twice: {twice:?}");
    assert_eq!((stats.waiting, stats.delayed, stats.inflight), (0, 0, 0));
    assert!(report.is_ok(), "{:?}", report.violations);
    Ok(())
}

/// Run claimers until every task is acked (or `limit`), with `fault`
/// applied once `at` of them are acked.
async fn run(
    cluster: &Cluster,
    name: &'static str,
    die_every: Option<u32>,
    at: usize,
    fault: impl AsyncFnOnce(&Cluster) -> TestResult,
) -> Result<Acked, Box<dyn std::error::Error + Send + Sync>> {
    let acked: Acked = Arc::default();
    let stop = CancellationToken::new();
    let mut claimers = Vec::new();
    for seed in 1..=3u64 {
        claimers.push(tokio::spawn(claimer(
            cluster.urls(),
            name,
            acked.clone(),
            stop.clone(),
            die_every,
            seed * 7919,
        )));
    }
    let done = |acked: &Acked| {
        acked
            .lock()
            .map(|a| {
                a.keys()
                    .map(|(id, _)| id.clone())
                    .collect::<HashSet<_>>()
                    .len()
            })
            .unwrap_or(0)
    };
    let start = Instant::now();
    while done(&acked) < at && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = done(&acked);
    fault(cluster).await?;
    let after = done(&acked);
    println!(
        "{name}: {before} tasks acked when the fault began, {after} when it ended, of {TASKS}"
    );
    assert!(
        before < TASKS,
        "the fault came before the run ended ({before} of {TASKS} acked)"
    );
    while done(&acked) < TASKS && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    for c in claimers {
        c.await??;
    }
    Ok(acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_run_survives_a_cluster_failover() -> TestResult {
    let cluster = Cluster::start()?;
    let client = connect(&cluster).await?;
    let queue = client.queue("fo");
    fill(&queue).await?;
    // Fail over the master of shard 1's slot (coordinated: the replica has every write).
    let slot = queue.shards().await?.shards[1].slot;
    let acked = run(&cluster, "fo", None, TASKS / 3, async |c| {
        c.failover(slot)?;
        Ok(())
    })
    .await?;
    judge(
        &queue,
        &acked,
        "sharded queue, Cluster failover",
        "CLUSTER FAILOVER of one master mid-run",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_run_survives_dying_claimers() -> TestResult {
    let cluster = Cluster::start()?;
    let client = connect(&cluster).await?;
    let queue = client.queue("die");
    fill(&queue).await?;
    let acked = run(&cluster, "die", Some(4), 0, async |_| Ok(())).await?;
    judge(
        &queue,
        &acked,
        "sharded queue, claimers dying",
        "a claimer dies holding its leases on 1 claim in 4 (SIGKILL-like: nothing settled)",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_run_survives_a_slot_migration() -> TestResult {
    let cluster = Cluster::start()?;
    let client = connect(&cluster).await?;
    let queue = client.queue("mig");
    fill(&queue).await?;
    let slot = queue.shards().await?.shards[2].slot;
    let acked = run(&cluster, "mig", None, TASKS / 4, async |c| {
        migrate_slot(c, slot).await
    })
    .await?;
    assert_ne!(
        queue.shards().await?.shards[2].master,
        None,
        "the shard's master is known after the move"
    );
    judge(
        &queue,
        &acked,
        "sharded queue, slot migration",
        "one shard's slot moved to another master (SETSLOT, MIGRATE key by key)",
    )
    .await
}

/// Move `slot` to another master, key by key, under the running workload.
async fn migrate_slot(cluster: &Cluster, slot: u16) -> TestResult {
    let conn = |port: u16| async move {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))?
            .get_multiplexed_async_connection()
            .await
    };
    let source = cluster.master_for_slot(slot).ok_or("source")?.port();
    let target = [0u16, 5500, 11000]
        .into_iter()
        .filter_map(|s| cluster.master_for_slot(s))
        .map(|n| n.port())
        .find(|p| *p != source)
        .ok_or("target")?;
    let (mut src, mut dst) = (conn(source).await?, conn(target).await?);
    let myid = |mut c: redis::aio::MultiplexedConnection| async move {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async::<String>(&mut c)
            .await
    };
    let (src_id, dst_id) = (myid(src.clone()).await?, myid(dst.clone()).await?);
    let setslot = |state: &str, id: &str| {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .clone()
    };
    let () = setslot("IMPORTING", &src_id).query_async(&mut dst).await?;
    let () = setslot("MIGRATING", &dst_id).query_async(&mut src).await?;
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
            .arg(target)
            .arg(key)
            .arg(0)
            .arg(5000)
            .query_async(&mut src)
            .await?;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for node in cluster.nodes() {
        let mut c = conn(node.port()).await?;
        let _: redis::RedisResult<()> = setslot("NODE", &dst_id).query_async(&mut c).await;
    }
    Ok(())
}
