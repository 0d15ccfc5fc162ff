//! The core of the lock, queue and consistency suites, run on every kind of
//! deployment the testkit starts: one server, a Redis Cluster (3 masters +
//! 3 replicas), a master behind 3 Sentinels, a server over mutual TLS, and
//! one server used as the least-privilege ACL user the README documents.
//! One function per suite, called once per topology: the cases are written
//! once and never copied per topology.
mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{TestResult, ttl};
use dlm::queue::{NewTask, OnDuplicate, WorkerOptions};
use dlm::{Client, Error, LockOptions};
use dlm_testkit::{Cluster, RedisServer, Sentinels, TlsFiles};

/// A running deployment and how to connect to it.
#[allow(clippy::large_enum_variant)]
enum Topology {
    Standalone(RedisServer),
    Cluster(Cluster),
    /// A cluster whose nodes speak TLS only (clients trust its CA).
    ClusterTls(Cluster, TlsFiles),
    Sentinel(Sentinels),
    /// Sentinels and their master and replica speaking TLS only.
    SentinelTls(Sentinels, TlsFiles),
    Tls(RedisServer, TlsFiles),
    /// One server, used as a least-privilege ACL user ([`dlm::keys::ACL_RULES`]).
    Acl(RedisServer),
}

impl Topology {
    async fn client(&self) -> Result<Client, Error> {
        let builder = Client::builder().timeout(Duration::from_secs(2));
        match self {
            Topology::Standalone(s) => builder.connect(&s.url()).await,
            Topology::Cluster(c) => builder.connect_cluster(&c.urls()).await,
            Topology::ClusterTls(c, files) => {
                builder
                    .tls(dlm::TlsConfig::default().ca(&files.ca_cert))
                    .connect_cluster(&c.urls())
                    .await
            }
            Topology::Sentinel(s) => {
                builder
                    .connect_sentinel(s.master_name(), &s.sentinel_urls())
                    .await
            }
            Topology::SentinelTls(s, files) => {
                builder
                    .tls(dlm::TlsConfig::default().ca(&files.ca_cert))
                    .connect_sentinel(s.master_name(), &s.sentinel_urls())
                    .await
            }
            Topology::Acl(s) => builder.connect(&s.url_as("dlm", "s3cret")).await,
            Topology::Tls(s, files) => {
                builder
                    .tls(
                        dlm::TlsConfig::default()
                            .ca(&files.ca_cert)
                            .client_cert(&files.client_cert, &files.client_key),
                    )
                    .connect(&s.url())
                    .await
            }
        }
    }
}

/// Every core case, on one topology.
async fn core_cases(topology: &Topology) -> TestResult {
    let client = topology.client().await?;
    let other = topology.client().await?;
    locks(&client, &other).await?;
    primitives(&client, &other).await?;
    replicas(&client, topology).await?;
    // The queue as it always was, and spread over 3 shards (issue 35).
    queue(&client, None).await?;
    queue(&client, Some(3)).await?;
    consistency(&client).await?;
    Ok(())
}

async fn locks(client: &Client, other: &Client) -> TestResult {
    // Names in many hash slots: every script's keys share one slot.
    let mut fences = HashSet::new();
    for i in 0..200 {
        let name = format!("slots:{i}");
        let g = client.lock(&name).acquire(&ttl(5000)).await?;
        let fence = g.fence().expect("one deployment: a fence");
        assert!(fences.insert((g.key().to_string(), fence)));
        assert!(matches!(
            other.lock(&name).acquire(&ttl(5000)).await,
            Err(Error::Busy { .. })
        ));
        assert!(g.is_held().await?);
        let status = client.lock(&name).status().await?;
        assert!(status.held);
        g.release().await?;
    }

    // Waiting is woken by the release (not the 2 s retry interval).
    let held = client.lock("wake").acquire(&ttl(10_000)).await?;
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            let opts = ttl(10_000)
                .wait(Duration::from_secs(8))
                .retry_interval(Duration::from_secs(2));
            let t0 = Instant::now();
            let g = other.lock("wake").acquire(&opts).await?;
            let waited = t0.elapsed();
            g.release().await?;
            Ok::<_, Error>(waited)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    held.release().await?;
    let waited = waiter.await??;
    let after_release = released_at.elapsed();
    assert!(
        after_release < Duration::from_millis(900) && waited > Duration::from_millis(250),
        "woken {after_release:?} after the release (waited {waited:?})"
    );

    // Hand-over between two tasks of one client, then fences still increase.
    let first = client.lock("handover").acquire(&ttl(5000)).await?;
    let f1 = first.fence();
    let next = {
        let client = client.clone();
        tokio::spawn(async move {
            let opts = ttl(5000).wait(Duration::from_secs(5));
            let g = client.lock("handover").acquire(&opts).await?;
            let f = g.fence();
            g.release().await?;
            Ok::<_, Error>(f)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.release().await?;
    assert!(next.await?? > f1);

    // The watchdog keeps a short lease; lost() fires when another takes it.
    let g = client
        .lock("watched")
        .acquire(&ttl(300).watchdog(true))
        .await?;
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(g.is_held().await? && !g.is_lost());
    other.lock("watched").release_token(g.token()).await?;
    tokio::time::timeout(Duration::from_secs(2), g.lost()).await?;

    // Fenced writes refuse a stale fence.
    let a = client.lock("ledger").acquire(&ttl(5000)).await?;
    let stale = a.fence().expect("fence");
    a.release().await?;
    let b = client.lock("ledger").acquire(&ttl(5000)).await?;
    let fresh = b.fence().expect("fence");
    client.fenced_write("ledger", fresh, b"new").await?;
    assert!(matches!(
        client.fenced_write("ledger", stale, b"old").await,
        Err(Error::StaleFence { .. })
    ));
    assert_eq!(
        client.fenced_read("ledger").await?.map(|(_, v)| v),
        Some(b"new".to_vec())
    );
    b.release().await?;

    // release_all over names in many slots.
    let mut guards = Vec::new();
    for i in 0..50 {
        guards.push(client.lock(format!("all:{i}")).acquire(&ttl(5000)).await?);
    }
    let report = client.release_all().await;
    assert_eq!(report.released, 50, "{report:?}");
    drop(guards);
    Ok(())
}

/// Every other lock kind: fair, read-write, semaphore, multi-lock and
/// election, each excluding the other client, reporting its status, and
/// waking a waiter on release.
async fn primitives(client: &Client, other: &Client) -> TestResult {
    let woken = |t0: Instant| t0.elapsed() < Duration::from_secs(4);
    // Fair: busy for a non-waiting acquire; a waiter is woken by the release.
    let fair = client.fair_lock("t:fair").acquire(&ttl(10_000)).await?;
    assert!(matches!(
        other.fair_lock("t:fair").acquire(&ttl(5000)).await,
        Err(Error::Busy { .. })
    ));
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            let opts = ttl(5000).wait(Duration::from_secs(8));
            other.fair_lock("t:fair").acquire(&opts).await
        })
    };
    let t0 = Instant::now();
    while client.fair_lock("t:fair").status().await?.waiting < 1 && woken(t0) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let next_fence = fair.fence();
    fair.release().await?;
    let next = waiter.await??;
    assert!(next.fence() > next_fence && woken(t0));
    next.release().await?;

    // Read-write: readers share, a writer waits; status sees them.
    let rw = client.rwlock("t:rw");
    let (r1, r2) = (rw.read(&ttl(5000)).await?, rw.read(&ttl(5000)).await?);
    assert!(matches!(
        other.rwlock("t:rw").write(&ttl(5000)).await,
        Err(Error::Busy { .. })
    ));
    assert_eq!(rw.status().await?.readers, 2);
    r1.release().await?;
    r2.release().await?;
    let w = other.rwlock("t:rw").write(&ttl(5000)).await?;
    assert!(rw.status().await?.writer);
    w.release().await?;

    // Semaphore: two permits, a third holder refused, status.
    let sem_opts = dlm::SemaphoreOptions::new(Duration::from_secs(5));
    let permits = client.semaphore("t:sem", 2).acquire(2, &sem_opts).await?;
    assert!(matches!(
        other.semaphore("t:sem", 2).acquire(1, &sem_opts).await,
        Err(Error::NoPermits { .. })
    ));
    let st = client.semaphore("t:sem", 2).status().await?;
    assert_eq!((st.in_use, st.holders), (2, 1));
    permits.release().await?;

    // Multi-lock: names in different hash slots, all or none.
    let both = client
        .multi_lock(["t:a", "t:b", "t:c"])?
        .acquire(&ttl(5000))
        .await?;
    assert!(matches!(
        other.multi_lock(["t:c", "t:d"])?.acquire(&ttl(5000)).await,
        Err(Error::Busy { .. })
    ));
    both.release().await?;
    other
        .multi_lock(["t:c", "t:d"])?
        .acquire(&ttl(5000))
        .await?
        .release()
        .await?;

    // Election: one leader, leader() reports it, a resignation hands over.
    let lead = client
        .election("t:elect")
        .campaign("a", &ttl(10_000))
        .await?;
    let seen = other
        .election("t:elect")
        .leader()
        .await?
        .ok_or("a leader")?;
    assert_eq!((seen.id.as_str(), seen.term), ("a", lead.term().get()));
    let candidate = {
        let other = other.clone();
        tokio::spawn(async move {
            let opts = ttl(5000).wait(Duration::from_secs(8));
            other.election("t:elect").campaign("b", &opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (t0, term) = (Instant::now(), lead.term());
    lead.resign().await?;
    let next = candidate.await??;
    assert!(next.term() > term && woken(t0));
    next.resign().await?;
    Ok(())
}

/// Every lock kind under `LockOptions::replicas`.
const REPLICATED_KINDS: [&str; 6] = ["mutex", "fair", "read", "write", "semaphore", "election"];

/// Acquire one lock kind with `opts` (wait 0) and release it.
async fn acquire_release(client: &Client, kind: &str, opts: &LockOptions) -> dlm::Result<()> {
    let name = format!("replicated:{kind}");
    match kind {
        "mutex" => client
            .lock(&name)
            .acquire(opts)
            .await?
            .release()
            .await
            .map(drop),
        "fair" => client.fair_lock(&name).acquire(opts).await?.release().await,
        "read" => client.rwlock(&name).read(opts).await?.release().await,
        "write" => client.rwlock(&name).write(opts).await?.release().await,
        "semaphore" => {
            client
                .semaphore(&name, 1)
                .acquire(1, opts)
                .await?
                .release()
                .await
        }
        _ => client
            .election(&name)
            .campaign("a", opts)
            .await?
            .resign()
            .await
            .map(drop),
    }
}

/// `LockOptions::replicas`: every lock kind counts a grant only once a
/// replica has it; without a replica the grant is released again and
/// reported as `NotReplicated` (the fair lock, the read-write lock, the
/// semaphore and the election ignored the option before, so a Sentinel
/// failover could hand their locks out twice).
async fn replicas(client: &Client, topology: &Topology) -> TestResult {
    let opts = ttl(5000).replicas(1, Duration::from_millis(300));
    for kind in REPLICATED_KINDS {
        let r = acquire_release(client, kind, &opts).await;
        match topology {
            Topology::Cluster(_)
            | Topology::ClusterTls(..)
            | Topology::Sentinel(_)
            | Topology::SentinelTls(..) => r.map_err(|e| format!("{kind}: {e}"))?,
            Topology::Standalone(_) | Topology::Tls(..) | Topology::Acl(_) => {
                assert!(
                    matches!(
                        r,
                        Err(Error::NotReplicated {
                            replicas: 0,
                            wanted: 1,
                            ..
                        })
                    ),
                    "{kind}: {r:?}"
                );
                // Released again: the same kind is free at once.
                acquire_release(client, kind, &ttl(5000))
                    .await
                    .map_err(|e| format!("{kind} was not released: {e}"))?;
            }
        }
    }
    Ok(())
}

/// A worker that counts the tasks it handled; tasks named `poison*` fail.
fn counting_worker(
    queue: &dlm::queue::Queue,
    handled: &Arc<AtomicUsize>,
    stop: &dlm::CancellationToken,
) -> tokio::task::JoinHandle<dlm::Result<dlm::queue::WorkerReport>> {
    let (queue, handled, stop) = (queue.clone(), handled.clone(), stop.clone());
    tokio::spawn(async move {
        queue
            .worker(WorkerOptions::new().concurrency(8))
            .run(
                move |task| {
                    let handled = handled.clone();
                    async move {
                        if task.id.starts_with("poison") {
                            return Err("always fails");
                        }
                        handled.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    }
                },
                stop,
            )
            .await
    })
}

async fn queue(client: &Client, shards: Option<u16>) -> TestResult {
    let named = |name: &str| match shards {
        Some(k) => format!("{name}-{k}-shards"),
        None => name.to_string(),
    };
    let queue = client.queue(named("topology-jobs")).max_attempts(2);
    let seeds = client.queue(named("topology-seeds"));
    if let Some(k) = shards {
        for q in [&queue, &seeds] {
            q.configure(&dlm::queue::QueueSettings::default().shards(k))
                .await?;
        }
    }
    // A worker that starts idle is woken by the enqueue (its blocking wait
    // goes to the node that owns the queue's keys).
    let handled = Arc::new(AtomicUsize::new(0));
    let stop = dlm::CancellationToken::new();
    let worker = counting_worker(&queue, &handled, &stop);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let tasks: Vec<NewTask> = (0..1000).map(|i| NewTask::new(format!("t{i}"))).collect();
    queue
        .enqueue(tasks, Duration::ZERO, OnDuplicate::Keep)
        .await?;
    queue.push("poison:1").await?;
    let t0 = Instant::now();
    while handled.load(Ordering::SeqCst) < 1000 && t0.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The poison task dies after its 2 attempts (1 s backoff between them).
    let t0 = Instant::now();
    while queue.stats().await?.dead < 1 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    let report = worker.await??;
    assert_eq!(handled.load(Ordering::SeqCst), 1000, "each task once");
    assert_eq!(report.acked, 1000, "{report:?}");
    let stats = queue.stats().await?;
    assert_eq!(
        (stats.waiting, stats.inflight, stats.dead),
        (0, 0, 1),
        "{stats:?}"
    );
    assert_eq!(queue.retry_dead(None).await?, 1);
    assert_eq!(queue.purge_dead().await?, 0);
    assert_eq!(queue.pop(10).await?.len(), 1);

    // The seed API and the lease calls the worker did not need.
    seeds
        .enqueue(
            [NewTask::new("a").payload(b"1".to_vec()), NewTask::new("b")],
            Duration::ZERO,
            OnDuplicate::Keep,
        )
        .await?;
    let top = seeds.top(10).await?;
    assert_eq!(top.len(), 2);
    let a = top.iter().find(|e| e.id == "a").ok_or("a")?;
    assert_eq!(
        seeds.remove_if_score("a", a.score + 1).await?,
        dlm::queue::Removed::ScoreChanged(a.score)
    );
    assert_eq!(
        seeds.remove_if_score("a", a.score).await?,
        dlm::queue::Removed::Removed
    );
    let leases = seeds.claim(10, Duration::from_secs(5)).await?;
    assert_eq!(leases.len(), 1);
    for lease in leases {
        lease.extend(Duration::from_secs(10)).await?;
        lease.abandon().await?;
    }
    for lease in seeds.claim(10, Duration::from_secs(5)).await? {
        lease.nack_after(Duration::from_secs(60), "later").await?;
    }
    let stats = seeds.stats().await?;
    assert_eq!(
        (stats.waiting + stats.delayed, stats.inflight),
        (1, 0),
        "{stats:?}"
    );
    Ok(())
}

async fn consistency(client: &Client) -> TestResult {
    let stock = client.stock("phones");
    stock.set(3).await?;
    for left in [2, 1, 0] {
        assert_eq!(stock.take(1).await?, dlm::consistency::Take::Taken { left });
    }
    assert!(matches!(
        stock.take(1).await?,
        dlm::consistency::Take::Insufficient { .. }
    ));
    let record = client.versioned("profile");
    let v1 = record.write(0, b"a").await?;
    assert!(matches!(
        record.write(0, b"b").await,
        Err(Error::Conflict { .. })
    ));
    assert_eq!(record.write(v1, b"c").await?, v1 + 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_on_one_server() -> TestResult {
    core_cases(&Topology::Standalone(RedisServer::start()?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_on_a_cluster() -> TestResult {
    core_cases(&Topology::Cluster(Cluster::start()?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_on_a_cluster_over_tls() -> TestResult {
    if dlm_testkit::skip_without(dlm_testkit::Feature::Tls) {
        return Ok(());
    }
    let files = TlsFiles::generate()?;
    let cluster = Cluster::builder().tls(&files).start()?;
    core_cases(&Topology::ClusterTls(cluster, files)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_behind_sentinel() -> TestResult {
    core_cases(&Topology::Sentinel(Sentinels::start("dlm-master")?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_behind_sentinel_over_tls() -> TestResult {
    if dlm_testkit::skip_without(dlm_testkit::Feature::Tls) {
        return Ok(());
    }
    let files = TlsFiles::generate()?;
    let sentinels = Sentinels::builder("dlm-tls").tls(&files).start()?;
    core_cases(&Topology::SentinelTls(sentinels, files)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_over_mutual_tls() -> TestResult {
    if dlm_testkit::skip_without(dlm_testkit::Feature::Tls) {
        return Ok(());
    }
    let files = TlsFiles::generate()?;
    let server = RedisServer::builder().tls(&files, true).start()?;
    core_cases(&Topology::Tls(server, files)).await
}

/// SIGKILL the master under a running worker and a held watchdog lock: the
/// worker goes on with the new master, and the lock is either still held
/// there or its guard says it was lost (never held unawares by two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_keeps_the_worker_going_and_the_holder_informed() -> TestResult {
    if std::env::var_os("DLM_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("dlm=debug,redis=debug"))
            .try_init();
    }
    let mut sentinels = Sentinels::start("dlm-failover")?;
    let client = Client::builder()
        .timeout(Duration::from_secs(1))
        .connect_sentinel("dlm-failover", &sentinels.sentinel_urls())
        .await?;
    let queue = client.queue("failover");
    let handled = Arc::new(AtomicUsize::new(0));
    let stop = dlm::CancellationToken::new();
    let worker = counting_worker(&queue, &handled, &stop);
    for i in 0..20 {
        queue.push(format!("before:{i}")).await?;
    }
    let guard = client
        .lock("leader")
        .acquire(&ttl(3000).watchdog(true))
        .await?;
    let t0 = Instant::now();
    while handled.load(Ordering::SeqCst) < 20 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(handled.load(Ordering::SeqCst), 20);

    let old = sentinels.current_master_port()?;
    sentinels.kill_master()?;
    let killed = Instant::now();
    let new = sentinels.wait_for_failover(old, Duration::from_secs(30))?;
    let failover = killed.elapsed();
    assert_ne!(old, new);

    // The worker goes on with the new master.
    let t0 = Instant::now();
    let mut pushed = 0;
    while pushed < 20 && t0.elapsed() < Duration::from_secs(20) {
        if queue.push(format!("after:{pushed}")).await.is_ok() {
            pushed += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(pushed, 20, "enqueues work again after the failover");
    let t0 = Instant::now();
    while handled.load(Ordering::SeqCst) < 40 && t0.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        handled.load(Ordering::SeqCst) >= 40,
        "the worker handled {} of 40",
        handled.load(Ordering::SeqCst)
    );

    let resumed = killed.elapsed();
    // The lock: held on the new master, or the guard knows it is lost.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = guard.is_held().await.unwrap_or(false);
    common::matrix_row(
        "Sentinel failover",
        "a worker and a watchdog lock behind 3 Sentinels",
        &format!("master SIGKILLed; a replica promoted after {failover:.1?}"),
        "no lost task; the lock held on the new master or reported lost",
        &format!(
            "40 of 40 tasks handled, the last {resumed:.1?} after the kill; lock held: {held}, guard lost: {}",
            guard.is_lost()
        ),
    );
    // Never unaware: if the key did not survive the failover, the guard says so.
    assert!(
        held || guard.is_lost(),
        "held on the new master: {held}, guard lost: {}",
        guard.is_lost()
    );
    if !held {
        // Lost: another client can take it, and our guard said so first.
        client
            .lock("leader")
            .acquire(&ttl(3000))
            .await?
            .release()
            .await?;
    }
    stop.cancel();
    worker.await??;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_cases_as_a_least_privilege_acl_user() -> TestResult {
    let server = RedisServer::builder()
        .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
        .start()?;
    core_cases(&Topology::Acl(server)).await
}

#[test]
fn the_readme_shows_the_acl_rules_the_tests_use() {
    let readme = include_str!("../../../README.md");
    let line = format!("ACL SETUSER dlm on >PASSWORD {}", dlm::keys::ACL_RULES);
    assert!(
        readme.contains(&line),
        "README's ACL line differs from ACL_RULES"
    );
}

/// Every command a Lua script of the library calls is in
/// [`dlm::keys::ACL_RULES`]: a script that calls one the rules lack fails
/// for the least-privilege user only when it reaches that line (the fair
/// lock's queueing `LLEN` and the semaphore's first `HSETNX` did, found by
/// the ACL topology run of every primitive).
#[test]
fn the_acl_rules_allow_every_command_the_scripts_call() -> TestResult {
    fn scripts(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                scripts(&path, out)?;
            } else if path.extension().is_some_and(|e| e == "lua") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    scripts(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    )?;
    assert!(files.len() > 40, "found the scripts: {}", files.len());
    let allowed: HashSet<String> = dlm::keys::ACL_RULES
        .split_whitespace()
        .filter_map(|r| r.strip_prefix('+'))
        .map(str::to_lowercase)
        .collect();
    let mut missing = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let calls = text.split("redis.call(").skip(1);
        for call in calls.chain(text.split("redis.pcall(").skip(1)) {
            // A literal command name (not a variable such as `cmd`).
            let Some(quoted) = call.strip_prefix(['\'', '"']) else {
                continue;
            };
            let command: String = quoted
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect();
            if !command.is_empty() && !allowed.contains(&command.to_lowercase()) {
                missing.push(format!("{}: {command}", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in ACL_RULES:\n{}",
        missing.join("\n")
    );
    Ok(())
}

/// `CLUSTER FAILOVER` on the replica of the slot that holds a lock: the lock
/// is still held on the promoted replica (the failover is coordinated, so
/// the grant was replicated), its watchdog keeps renewing it there, and it is
/// released by its token afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_keeps_a_held_lock_and_its_token() -> TestResult {
    let cluster = Cluster::start()?;
    let client = Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_cluster(&cluster.urls())
        .await?;
    let lock = client.lock("failover");
    let guard = lock
        .acquire(&ttl(2000).watchdog(true).replicas(1, Duration::from_secs(1)))
        .await?;
    let slot = dlm_testkit::key_slot(guard.key());
    let old_master = cluster.master_for_slot(slot).ok_or("master")?.port();
    cluster.failover(slot)?;
    let new_master = cluster.master_for_slot(slot).ok_or("master")?.port();
    assert_ne!(old_master, new_master, "the replica took over");
    // Past the TTL: the watchdog renewed it on the new master.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (lost, held) = (guard.is_lost(), guard.is_held().await?);
    common::matrix_row(
        "Redis Cluster failover",
        "a watchdog lock acquired with `replicas(1)`, 2 s TTL",
        "`CLUSTER FAILOVER` of the lock's slot",
        "0 overlaps: another client gets `Busy`",
        &format!("the lock kept its token on the new master (held: {held}, lost: {lost})"),
    );
    assert!(!lost, "the guard kept its lease");
    assert!(held, "held on the new master");
    let other = Client::builder().connect_cluster(&cluster.urls()).await?;
    assert!(matches!(
        other.lock("failover").acquire(&ttl(2000)).await,
        Err(Error::Busy { .. })
    ));
    let token = guard.token().clone();
    let (_, fence) = guard.detach();
    assert!(fence.is_some());
    lock.release_token(&token).await?;
    assert!(!lock.status().await?.held);
    Ok(())
}

/// A Redlock whose independent nodes are a cluster, a master behind
/// Sentinels and a plain server: the same lock contract, a majority of
/// deployments deciding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_spans_a_cluster_a_sentinel_master_and_a_server() -> TestResult {
    let cluster = Cluster::start()?;
    let sentinels = Sentinels::start("redlock-node")?;
    let mut server = RedisServer::start()?;
    let nodes = [
        dlm::Topology::cluster(cluster.urls()),
        dlm::Topology::sentinel("redlock-node", sentinels.sentinel_urls()),
        dlm::Topology::standalone(server.url()),
    ];
    let connect = || async {
        Client::builder()
            .timeout(Duration::from_secs(2))
            .connect_redlock(&nodes)
            .await
    };
    let (a, b) = (connect().await?, connect().await?);
    assert_eq!(a.nodes(), 3);
    let g = a
        .lock("spanning")
        .acquire(&ttl(1500).watchdog(true))
        .await?;
    assert!(g.fence().is_none(), "Redlock: no fence");
    assert!(matches!(
        b.lock("spanning").acquire(&ttl(1500)).await,
        Err(Error::Busy { .. })
    ));
    a.settle(Duration::from_secs(1)).await;
    let key = g.key().to_string();
    let slot = dlm_testkit::key_slot(&key);
    let token = g.token().as_str().to_string();
    assert_eq!(
        cluster
            .master_for_slot(slot)
            .ok_or("master")?
            .command(&["GET", &key])?,
        token
    );
    assert_eq!(sentinels.master().command(&["GET", &key])?, token);
    assert_eq!(server.command(&["GET", &key])?, token);
    // One deployment gone: the other two are a majority; the watchdog renews there.
    server.kill();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!g.is_lost() && g.is_held().await?);
    g.release().await?;
    b.lock("spanning")
        .acquire(&ttl(1500))
        .await?
        .release()
        .await?;
    Ok(())
}
