//! `dlm check lock` and `dlm check queue`: run a workload against the given
//! deployment and judge its history with the testkit's checkers, so that an
//! operator can check their own Redis (standalone, Redlock, cluster,
//! Sentinel), for example during a failover drill.
//!
//! Lock: concurrent clients take turns on one lock and record the interval
//! in which each believed it held it (from the grant until it released it or
//! its lease ran out by its own clock); two intervals that overlap are a
//! violation. Each holder also writes its fencing token into a register that
//! refuses stale tokens: what was refused is what the fence saved.
//! Queue: every task enqueued must be handled to a successful ack; a
//! duplicate must follow a lease that did not end in an ack.
//!
//! Keys: the lock lives under `dlm:check:` (`dlm:check:lock:{NAME}` and its
//! fencing counters); the queue is `dlm:queue:{check:ID}`; both are removed at
//! the end.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Subcommand};
use dlm_testkit::history::{Clock, FencedRegister, Hold, QueueHistory, overlapping_holds};
use serde::Serialize;

use crate::error::{CliError, EXIT_NO, EXIT_OK};
use crate::global::parse::{parse_bench_duration, parse_lease, parse_ttl};
use crate::global::target::{connect, delete_queue_keys, raw_connection};
use crate::global::{Global, Topology};
use crate::output;
use crate::rng::{SplitMix, seed};

/// `dlm check ...`
#[derive(Debug, Subcommand)]
pub enum CheckCommand {
    /// Check mutual exclusion: concurrent clients on one lock, every
    /// believed-held interval recorded and checked for overlaps.
    Lock(CheckLockArgs),
    /// Check the queue: every task handled to an ack, duplicates explained.
    Queue(CheckQueueArgs),
}

/// A client of the deployment `global` names, with the check's key prefix.
async fn lock_client(global: &Global) -> Result<dlm::Client, CliError> {
    let mut builder = dlm::Client::builder()
        .key_prefix("dlm:check:lock:")
        .timeout(global.timeout)
        .connect_timeout(global.timeout)
        .quorum_wait(Duration::ZERO);
    if let Some(tls) = &global.tls {
        builder = builder.tls(tls.clone());
    }
    if let Some(t) = global.node_timeout {
        builder = builder.node_timeout(t);
    }
    let urls = global.urls();
    Ok(match &global.topology {
        Topology::Cluster => builder.connect_cluster(&urls).await?,
        Topology::Sentinel(name) => builder.connect_sentinel(name, &urls).await?,
        Topology::Plain => builder.connect_many(&urls).await?,
    })
}

/// `dlm check lock`
#[derive(Debug, Clone, Args)]
pub struct CheckLockArgs {
    /// Concurrent clients (each with its own connections).
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(2..=256))]
    pub clients: u32,
    /// How long to run.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_bench_duration)]
    pub duration: Duration,
    /// The lease of every acquisition (no watchdog: a holder that outlives
    /// it must notice by its own clock).
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_ttl)]
    pub ttl: Duration,
    /// Test only: break the lock behind the holders' backs (delete their
    /// key now and then), so that the checker must report overlaps.
    #[arg(long, hide = true)]
    pub break_lock: bool,
}

/// `dlm check queue`
#[derive(Debug, Clone, Args)]
pub struct CheckQueueArgs {
    /// Concurrent workers.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Tasks to enqueue.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub tasks: u64,
    /// The lease of every claim.
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_lease)]
    pub lease: Duration,
    /// Test only: acknowledge some tasks without handling them (pop them
    /// from the queue behind the workers' backs), so that the checker must
    /// report lost tasks.
    #[arg(long, hide = true)]
    pub break_queue: bool,
}

/// The lock check's verdict (one JSON object).
#[derive(Debug, Serialize)]
struct LockReport {
    check: &'static str,
    operations: u64,
    acquisitions: u64,
    violations: u64,
    overlaps: u64,
    stale_writes_accepted: u64,
    stale_writes_rejected: u64,
    errors: u64,
}

/// The queue check's verdict (one JSON object).
#[derive(Debug, Serialize)]
struct QueueReport {
    check: &'static str,
    operations: u64,
    tasks: u64,
    violations: u64,
    lost: u64,
    duplicates: u64,
    /// Acks whose reply never came (a timeout, a failover): the task was not
    /// delivered again before the workers went idle, so the ack took effect.
    acks_unknown: u64,
    errors: u64,
}

fn progress(json: bool, len: Duration, label: &str) -> Option<indicatif::ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len.as_secs().max(1));
    if let Ok(style) = indicatif::ProgressStyle::with_template("{prefix} {bar:40} {pos}/{len}") {
        bar.set_style(style);
    }
    bar.set_prefix(label.to_string());
    Some(bar)
}

/// `dlm check lock`
pub async fn check_lock(global: &Global, args: &CheckLockArgs) -> Result<u8, CliError> {
    let name = format!("{:08x}", SplitMix(seed(7)).next() as u32);
    // Reachable at the start, or exit 3.
    let probe = lock_client(global).await?;
    probe.lock(&name).status().await?;
    let clock = Clock::new();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let register = Arc::new(FencedRegister::new(true));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ops = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let end = clock.now() + args.duration;
    let bar = progress(global.json, args.duration, "check lock");
    let mut tasks = Vec::new();
    for id in 0..args.clients as usize {
        let client = lock_client(global).await?;
        let (holds, register, errors, ops, name) = (
            holds.clone(),
            register.clone(),
            errors.clone(),
            ops.clone(),
            name.clone(),
        );
        let (ttl, breaker) = (args.ttl, args.break_lock && id == 0);
        tasks.push(tokio::spawn(async move {
            let lock = client.lock(&name);
            let mut rng = SplitMix(seed(id + 100));
            let mut held = 0u64;
            while clock.now() < end {
                ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let opts = dlm::LockOptions::new(ttl).wait(ttl * 2);
                let guard = match lock.acquire(&opts).await {
                    Ok(g) => g,
                    Err(dlm::Error::Busy { .. }) => continue,
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let from = clock.now();
                let believed = from + guard.remaining();
                let mut work = Duration::from_millis(rng.next() % (ttl.as_millis() as u64 / 4 + 1));
                if breaker && held.is_multiple_of(2) {
                    // Break it: release our token behind our own guard's
                    // back, and go on working as if we held it.
                    let _ = lock.release_token(guard.token()).await;
                    work = ttl / 4;
                }
                held += 1;
                tokio::time::sleep(work).await;
                if let Some(fence) = guard.fence() {
                    register.write(fence.get(), &id.to_string());
                }
                let until = clock.now().min(believed);
                let fence = guard.fence().map(dlm::Fence::get);
                if guard.release().await.is_err() {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if let Ok(mut h) = holds.lock() {
                    h.push(Hold {
                        holder: id,
                        lock: String::new(),
                        from,
                        until,
                        fence,
                    });
                }
            }
        }));
    }
    let ticker = bar.clone().map(|bar| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                bar.inc(1);
            }
        })
    });
    for t in tasks {
        let _ = t.await;
    }
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let holds = holds.lock().map(|h| h.clone()).unwrap_or_default();
    let overlaps = overlapping_holds(&holds);
    // The check's own keys: its lock (released) and its fencing counter.
    if let Ok(fence_key) = probe.lock(&name).fence_key()
        && !matches!(global.topology, Topology::Sentinel(_))
        && global.urls().len() == 1
        && let Ok(mut raw) = raw_connection(global.url(), global.timeout).await
    {
        let _: redis::RedisResult<i64> = redis::cmd("DEL")
            .arg(&fence_key)
            .query_async(&mut raw)
            .await;
    }
    let reg = register.report();
    let report = LockReport {
        check: "lock",
        operations: ops.load(std::sync::atomic::Ordering::Relaxed),
        acquisitions: holds.len() as u64,
        violations: overlaps.len() as u64,
        overlaps: overlaps.len() as u64,
        stale_writes_accepted: reg.stale_accepted,
        stale_writes_rejected: reg.stale_rejected,
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
    };
    for (a, b) in overlaps.iter().take(20) {
        output::error_line(&format!(
            "overlap: client {} held from {:?} to {:?} (fence {:?}) while client {} held from {:?} to {:?} (fence {:?})",
            a.holder, a.from, a.until, a.fence, b.holder, b.from, b.until, b.fence
        ));
    }
    output::emit(global.json, &report, || {
        format!(
            "check lock: {} acquisitions by {} clients in {}: {} overlaps, stale writes accepted {}, refused {}, errors {}",
            report.acquisitions,
            args.clients,
            humantime::format_duration(args.duration),
            report.overlaps,
            report.stale_writes_accepted,
            report.stale_writes_rejected,
            report.errors
        )
    })?;
    Ok(if report.violations == 0 {
        EXIT_OK
    } else {
        EXIT_NO
    })
}

/// `dlm check queue`
pub async fn check_queue(global: &Global, args: &CheckQueueArgs) -> Result<u8, CliError> {
    let client = connect(global, global.url()).await?;
    let name = format!("check:{:08x}", SplitMix(seed(9)).next() as u32);
    let queue = client.queue(name.clone());
    queue.stats().await?; // reachable at the start, or exit 3
    let history = Arc::new(QueueHistory::default());
    let ids: Vec<String> = (0..args.tasks).map(|i| format!("c{i}")).collect();
    for chunk in ids.chunks(1000) {
        queue
            .enqueue(
                chunk.iter().map(|i| dlm::queue::NewTask::new(i.clone())),
                Duration::ZERO,
                dlm::queue::OnDuplicate::Keep,
            )
            .await?;
        for id in chunk {
            history.enqueued(id);
        }
    }
    if args.break_queue {
        // Tasks taken out behind the workers' backs: lost, as far as the
        // history can tell.
        let _ = queue.pop(((args.tasks / 10).max(1)) as usize).await?;
    }
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ops = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..args.workers {
        let (queue, history, errors, ops) =
            (queue.clone(), history.clone(), errors.clone(), ops.clone());
        let lease = args.lease;
        workers.push(tokio::spawn(async move {
            let mut idle = 0;
            let mut last_work = std::time::Instant::now();
            // Stop once idle and either drained (every ack of unknown outcome
            // then took effect) or past a lease since the last task (a task
            // whose ack did not land was delivered again by then).
            loop {
                if idle >= 10
                    && (last_work.elapsed() > lease + Duration::from_millis(500)
                        || queue.stats().await.is_ok_and(|s| s.is_drained()))
                {
                    break;
                }
                ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let leases = match queue.claim(16, lease).await {
                    Ok(l) => l,
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if leases.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                idle = 0;
                last_work = std::time::Instant::now();
                for l in leases {
                    let (id, fence) = (l.task().id.clone(), l.task().fence.get());
                    history.handled(&id, fence);
                    history.ack_started(&id, fence);
                    match l.ack().await {
                        // No answer: it may have been acked.
                        Err(e) if e.is_retryable() => {}
                        r => history.acked(&id, fence, r.is_ok()),
                    }
                }
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    let _ = queue.purge_dead().await;
    // (Behind Sentinel the URLs are the Sentinels': the keys stay.)
    if !matches!(global.topology, Topology::Sentinel(_))
        && let Ok(mut raw) = raw_connection(global.url(), global.timeout).await
    {
        delete_queue_keys(&mut raw, &name).await;
    }
    let verdict = history.check();
    let violations =
        verdict.lost.len() + verdict.unexplained_duplicates.len() + verdict.acked_twice.len();
    for id in verdict.lost.iter().take(20) {
        output::error_line(&format!("lost: task {id} was enqueued and never acked"));
    }
    for id in verdict.unexplained_duplicates.iter().take(20) {
        output::error_line(&format!(
            "duplicate: task {id} was delivered again after an ack"
        ));
    }
    let report = QueueReport {
        check: "queue",
        operations: ops.load(std::sync::atomic::Ordering::Relaxed),
        tasks: args.tasks,
        violations: violations as u64,
        lost: verdict.lost.len() as u64,
        duplicates: verdict.duplicates as u64,
        acks_unknown: verdict.ack_unknown.len() as u64,
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
    };
    output::emit(global.json, &report, || {
        format!(
            "check queue: {} tasks by {} workers: {} lost, {} duplicates, {} violations, errors {}",
            report.tasks,
            args.workers,
            report.lost,
            report.duplicates,
            report.violations,
            report.errors
        )
    })?;
    Ok(if report.violations == 0 {
        EXIT_OK
    } else {
        EXIT_NO
    })
}
