//! The queue workloads, one queue per epoch, each drained at the end of
//! its epoch and handed to the checkers:
//!
//! * `groups+deps`: the library's clients (by URL and on a connection)
//!   enqueue tasks in groups (group concurrency 2) with dependencies
//!   (`NewTask::after`), claim, extend, nack and ack them, pause and resume
//!   the queue; every operation is recorded for the linearizability checker,
//!   and the handlings for `QueueHistory` and `dag_violations`;
//! * `priorities+schedules`: the library enqueues tasks with priorities,
//!   a schedule ticks every second (`Queue::schedule`, `run_schedules`), and
//!   `dlm queue work` subprocesses handle them, each run logging its task
//!   and fence to a file; `QueueHistory` judges it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlm::queue::{NewTask, QueueSettings, Repeat};
use dlm_testkit::history::{DagRun, QueueHistory};

use super::cli_locks::wall_ns;
use super::lin::{QueueAction, QueueOp, QueueResult, QueueSpec};
use super::procs::Procs;
use super::record::{QueueEpoch, Recorder};
use crate::rng::SplitMix;

/// The lease of every claim.
pub const LEASE: Duration = Duration::from_secs(2);
/// How long the end of an epoch waits for its queue to drain.
const DRAIN: Duration = Duration::from_secs(30);
/// Group concurrency of the `groups+deps` queue.
const GROUP_LIMIT: u32 = 2;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Retry a setup call a few times (faults may be under way).
async fn retry<T, F, Fut>(mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = dlm::Result<T>>,
{
    for _ in 0..20 {
        if let Ok(v) = f().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// Wait until `queue` has nothing waiting, delayed, blocked or in flight
/// (true), or until [`DRAIN`] passed (false).
async fn drain(queue: &dlm::queue::Queue) -> bool {
    let start = tokio::time::Instant::now();
    while start.elapsed() < DRAIN {
        if let Ok(s) = queue.stats().await
            && s.is_drained()
            && s.dead == 0
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// What the `groups+deps` queue's clients share during one epoch.
#[derive(Default)]
struct Shared {
    ops: Mutex<Vec<QueueOp>>,
    runs: Mutex<Vec<DagRun>>,
    history: QueueHistory,
    done: AtomicBool,
}

impl Shared {
    fn op(
        &self,
        process: usize,
        action: QueueAction,
        result: QueueResult,
        window: (Duration, Duration),
    ) {
        lock(&self.ops).push(QueueOp {
            process,
            action,
            result,
            invoke: window.0,
            complete: window.1,
        });
    }
}

/// The `groups+deps` queues, epoch after epoch, until the soak stops.
pub async fn groups_and_deps(
    rec: Arc<Recorder>,
    clients: Vec<(dlm::Client, &'static str)>,
    seed: u64,
) {
    let mut n = 0u64;
    while !rec.stopping() {
        n += 1;
        let name = format!("soak-l-{n}");
        let Some((producer, plabel)) = clients.first().cloned() else {
            return;
        };
        let queue = producer.queue(name.clone()).max_attempts(1000);
        let settings = QueueSettings::default().group_concurrency(Some(GROUP_LIMIT));
        if retry(|| queue.configure(&settings)).await.is_none() {
            continue;
        }
        let from = rec.clock.now();
        let shared = Shared::default();
        let deps: Mutex<HashMap<String, Vec<String>>> = Mutex::new(HashMap::new());
        let produce = produce_groups(&rec, &queue, plabel, &shared, &deps, n, seed ^ n);
        let consumers = futures_util::future::join_all(clients.iter().enumerate().map(
            |(i, (client, label))| {
                let q = client.queue(name.clone()).max_attempts(1000);
                consume(&rec, q, label, &shared, seed ^ (n << 8) ^ i as u64)
            },
        ));
        let drained = async {
            produce.await;
            let drained = drain(&queue).await;
            shared.done.store(true, Ordering::Relaxed);
            drained
        };
        let (drained, _) = tokio::join!(drained, consumers);
        let until = rec.clock.now();
        let Shared {
            ops, runs, history, ..
        } = shared;
        rec.queue_epoch(QueueEpoch {
            queue: name,
            flavour: "groups+deps",
            from,
            until,
            ops: ops
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            spec: QueueSpec {
                group_limit: Some(GROUP_LIMIT),
            },
            history,
            deps: deps
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            runs: runs
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            drained,
            ticks_fired: 0,
            ticks_handled: 0,
        });
    }
}

/// Enqueue tasks in groups with dependencies until the epoch ends; pause
/// and resume the queue now and then.
async fn produce_groups(
    rec: &Recorder,
    queue: &dlm::queue::Queue,
    label: &str,
    shared: &Shared,
    deps: &Mutex<HashMap<String, Vec<String>>>,
    n: u64,
    seed: u64,
) {
    let mut rng = SplitMix(seed);
    let mut process = rec.process();
    let end = rec.clock.now() + rec.epoch_len;
    let mut sure: Vec<String> = Vec::new();
    let mut i = 0u64;
    while rec.clock.now() < end && !rec.stopping() {
        i += 1;
        let id = format!("l{n}-{i}");
        let group = rng
            .next()
            .is_multiple_of(2)
            .then(|| format!("g{}", rng.next() % 4));
        let after: Vec<String> = match sure.len() {
            0 => Vec::new(),
            len if rng.next().is_multiple_of(4) => {
                let back = (rng.next() as usize % len.min(20)) + 1;
                vec![sure[len - back].clone()]
            }
            _ => Vec::new(),
        };
        let mut task = NewTask::new(id.clone()).after(after.clone());
        if let Some(g) = &group {
            task = task.group(g.clone());
        }
        let invoke = rec.clock.now();
        let r = queue.push(task).await;
        let complete = rec.clock.now();
        rec.count("queue", label);
        let result = if r.is_ok() {
            QueueResult::Done
        } else {
            QueueResult::Unknown
        };
        let action = QueueAction::Enqueue {
            task: id.clone(),
            deps: after.clone(),
            group,
        };
        shared.op(process, action, result, (invoke, complete));
        if r.is_ok() {
            shared.history.enqueued(&id);
            lock(deps).insert(id.clone(), after);
            sure.push(id);
        } else {
            process = rec.process();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if i.is_multiple_of(200) {
            process = pause_resume(rec, queue, shared, process).await;
        }
        tokio::time::sleep(Duration::from_millis(5 + rng.next() % 20)).await;
    }
}

/// Pause the queue for 100 ms, then resume it (until a resume succeeds).
async fn pause_resume(
    rec: &Recorder,
    queue: &dlm::queue::Queue,
    shared: &Shared,
    mut process: usize,
) -> usize {
    let invoke = rec.clock.now();
    let r = queue.pause().await;
    let complete = rec.clock.now();
    rec.count("queue", "library-url");
    let result = if r.is_ok() {
        QueueResult::Done
    } else {
        QueueResult::Unknown
    };
    shared.op(process, QueueAction::Pause, result, (invoke, complete));
    if r.is_err() {
        process = rec.process();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..50 {
        let invoke = rec.clock.now();
        let r = queue.resume().await;
        let complete = rec.clock.now();
        rec.count("queue", "library-url");
        let ok = r.is_ok();
        let result = if ok {
            QueueResult::Done
        } else {
            QueueResult::Unknown
        };
        shared.op(process, QueueAction::Resume, result, (invoke, complete));
        if ok {
            break;
        }
        process = rec.process();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    process
}

/// Claim, handle (extend now and then), nack one in 50, ack the rest,
/// until the epoch's queue drained.
async fn consume(
    rec: &Recorder,
    queue: dlm::queue::Queue,
    label: &str,
    shared: &Shared,
    seed: u64,
) {
    let mut rng = SplitMix(seed);
    let mut process = rec.process();
    while !shared.done.load(Ordering::Relaxed) {
        let invoke = rec.clock.now();
        let r = queue.claim(4, LEASE).await;
        let window = (invoke, rec.clock.now());
        rec.count("queue", label);
        let leases = match r {
            Ok(l) => l,
            Err(_) => {
                shared.op(
                    process,
                    QueueAction::Claim { lease: LEASE },
                    QueueResult::Unknown,
                    window,
                );
                process = rec.process();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if leases.is_empty() {
            shared.op(
                process,
                QueueAction::Claim { lease: LEASE },
                QueueResult::Empty,
                window,
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        for l in &leases {
            let (task, fence) = (l.task().id.clone(), l.task().fence.get());
            shared.op(
                process,
                QueueAction::Claim { lease: LEASE },
                QueueResult::Leased { task, fence },
                window,
            );
        }
        for l in leases {
            let (task, fence) = (l.task().id.clone(), l.task().fence.get());
            let started = wall_ns() as u128;
            shared.history.handled(&task, fence);
            tokio::time::sleep(Duration::from_micros(rng.next() % 3000)).await;
            if rng.next().is_multiple_of(10) {
                let invoke = rec.clock.now();
                let r = l.extend(LEASE).await;
                let window = (invoke, rec.clock.now());
                rec.count("queue", label);
                let result = settle(&r);
                let action = QueueAction::Extend {
                    task: task.clone(),
                    fence,
                    lease: LEASE,
                };
                shared.op(process, action, result.clone(), window);
                if result == QueueResult::Unknown {
                    process = rec.process();
                }
            }
            lock(&shared.runs).push(DagRun {
                task: task.clone(),
                fence,
                started,
                finished: Some(wall_ns() as u128),
            });
            let invoke = rec.clock.now();
            let (action, result) = if rng.next().is_multiple_of(50) {
                let r = l.nack("soak: nacked on purpose").await.map(|_| ());
                let action = QueueAction::Nack {
                    task: task.clone(),
                    fence,
                };
                (action, settle(&r))
            } else {
                shared.history.ack_started(&task, fence);
                let r = l.ack().await;
                let result = settle(&r);
                if result != QueueResult::Unknown {
                    shared.history.acked(&task, fence, r.is_ok());
                }
                (QueueAction::Ack { task, fence }, result)
            };
            let window = (invoke, rec.clock.now());
            rec.count("queue", label);
            shared.op(process, action, result.clone(), window);
            if result == QueueResult::Unknown {
                process = rec.process();
            }
        }
    }
}

/// How an ack, nack or extend ended.
fn settle<T>(r: &dlm::Result<T>) -> QueueResult {
    match r {
        Ok(_) => QueueResult::Done,
        Err(e) if e.is_retryable() => QueueResult::Unknown,
        Err(
            dlm::Error::LeaseLost { .. } | dlm::Error::NotHeld { .. } | dlm::Error::Expired { .. },
        ) => QueueResult::Refused,
        Err(_) => QueueResult::Unknown,
    }
}

/// The `priorities+schedules` queues worked by `dlm queue work`
/// subprocesses, epoch after epoch, until the soak stops.
pub async fn priorities_and_schedules(
    rec: Arc<Recorder>,
    procs: Arc<Procs>,
    client: dlm::Client,
    url: String,
    dir: PathBuf,
    workers: usize,
    seed: u64,
) {
    let mut n = 0u64;
    while !rec.stopping() {
        n += 1;
        let name = format!("soak-p-{n}");
        let queue = client.queue(name.clone()).max_attempts(1000);
        let tick = Repeat::Every(Duration::from_secs(1));
        if retry(|| queue.schedule("tick", tick.clone(), None))
            .await
            .is_none()
        {
            continue;
        }
        let log = dir.join(format!("{name}.log"));
        let from = rec.clock.now();
        let history = QueueHistory::default();
        let done = AtomicBool::new(false);
        let fired = AtomicUsize::new(0);
        let work = futures_util::future::join_all(
            (0..workers).map(|_| cli_worker(&procs, &url, &name, &log, &done)),
        );
        let produce = async {
            produce_priorities(&rec, &queue, &history, &fired, n, seed ^ n).await;
            let _ = retry(|| queue.unschedule("tick")).await;
            let drained = drain(&queue).await;
            done.store(true, Ordering::Relaxed);
            drained
        };
        let (drained, _) = tokio::join!(produce, work);
        let (ticks, runs) = read_runs(&log, &history);
        rec.count_n("queue", "cli", runs as u64);
        rec.queue_epoch(QueueEpoch {
            queue: name,
            flavour: "priorities+schedules",
            from,
            until: rec.clock.now(),
            ops: Vec::new(),
            spec: QueueSpec { group_limit: None },
            history,
            deps: HashMap::new(),
            runs: Vec::new(),
            drained,
            ticks_fired: fired.load(Ordering::Relaxed),
            ticks_handled: ticks,
        });
        let _ = std::fs::remove_file(&log);
    }
}

/// Enqueue tasks with priorities (some delayed) and fire the schedule's
/// ticks until the epoch ends.
async fn produce_priorities(
    rec: &Recorder,
    queue: &dlm::queue::Queue,
    history: &QueueHistory,
    fired: &AtomicUsize,
    n: u64,
    seed: u64,
) {
    let mut rng = SplitMix(seed);
    let end = rec.clock.now() + rec.epoch_len;
    let mut i = 0u64;
    let mut last_tick = tokio::time::Instant::now();
    while rec.clock.now() < end && !rec.stopping() {
        i += 1;
        let id = format!("p{n}-{i}");
        let task = NewTask::new(id.clone()).priority((rng.next() % 10) as u16);
        let delay = if rng.next().is_multiple_of(5) {
            Duration::from_millis(rng.next() % 300)
        } else {
            Duration::ZERO
        };
        let r = queue
            .enqueue([task], delay, dlm::queue::OnDuplicate::Keep)
            .await;
        rec.count("queue", "library-url");
        if r.is_ok() {
            history.enqueued(&id);
        }
        if last_tick.elapsed() > Duration::from_millis(250) {
            last_tick = tokio::time::Instant::now();
            rec.count("queue", "library-url");
            if let Ok(run) = queue.run_schedules().await {
                fired.fetch_add(run.fired, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(10 + rng.next() % 30)).await;
    }
}

/// One `dlm queue work` subprocess after another (a killed one is
/// replaced) until `done`; then SIGTERM, and SIGKILL after 3 s.
async fn cli_worker(procs: &Procs, url: &str, queue: &str, log: &Path, done: &AtomicBool) {
    let line = format!(
        "S=$(date +%s%N); sleep 0.00$(( $$ % 5 )); echo \"$DLM_TASK_ID $DLM_FENCE $S $(date +%s%N)\" >> '{}'",
        log.display()
    );
    while !done.load(Ordering::Relaxed) {
        let mut cmd = procs.dlm();
        cmd.args(["--redis", url, "--timeout", "1s", "queue", "work", queue])
            .args([
                "--lease",
                "2s",
                "--concurrency",
                "2",
                "--max-attempts",
                "1000",
            ])
            .args([
                "--grace",
                "1s",
                "--retry-base",
                "50ms",
                "--result-bytes",
                "0",
                "--",
            ])
            .args(["env", "-u", "LD_PRELOAD", "sh", "-c", &line])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let Ok(mut child) = cmd.spawn() else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let pid = child.id();
        procs.started(pid, "cli queue worker");
        loop {
            tokio::select! {
                _ = child.wait() => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if done.load(Ordering::Relaxed) {
                        if let Some(p) = pid {
                            procs.signal(p, libc::SIGCONT);
                            procs.signal(p, libc::SIGTERM);
                        }
                        if tokio::time::timeout(Duration::from_secs(3), child.wait()).await.is_err() {
                            let _ = child.start_kill();
                        }
                        break;
                    }
                }
            }
        }
        procs.ended(pid);
        let _ = child.wait().await;
    }
}

/// Read the runs the commands logged into `history`; the number of
/// distinct schedule ticks handled, and of runs.
fn read_runs(log: &Path, history: &QueueHistory) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut ticks = HashSet::new();
    let mut runs = 0;
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(id), Some(fence)) = (parts.next(), parts.next().and_then(|f| f.parse().ok()))
        else {
            continue;
        };
        if id.starts_with("tick@") {
            history.enqueued(id);
            ticks.insert(id.to_string());
        }
        history.handled(id, fence);
        history.ack_started(id, fence);
        runs += 1;
    }
    (ticks.len(), runs)
}
