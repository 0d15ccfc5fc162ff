//! What the server knows and how it reads Redis: the client, the queues it
//! watches (named, or found with SCAN), a ring buffer of samples per queue
//! (the last ten minutes, for the sparklines and the throughput), the
//! security settings, and the Prometheus gauges set from every reading.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use dlm::HeldLock;
use dlm::queue::{Event, EventsFrom, MAX_EVENTS_PAGE, QueueStats, TaskDetail, TaskState};
use futures_util::future::join_all;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::error::CliError;

/// The most queues watched when none are named.
pub const MAX_QUEUES: usize = 100;
/// The most locks shown and exported.
pub const MAX_LOCKS: usize = 200;
/// How far back the history goes.
const HISTORY: Duration = Duration::from_secs(600);
/// How often the queues are looked for again when none are named.
const REDISCOVER: Duration = Duration::from_secs(10);
/// The window the throughput is measured over.
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(60);
/// The most dependencies, and the most dependents, a task page reads.
pub const MAX_NEIGHBOURS: usize = 50;
/// The most events of one task a task page shows (the newest).
pub const MAX_TASK_EVENTS: usize = 100;
/// The most pages of the event log ([`MAX_EVENTS_PAGE`] entries each) read
/// for one task page, from the oldest entry kept.
const EVENT_PAGES: usize = 10;

/// Who may act on the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Listening on loopback without an admin token: actions need the CSRF token.
    Local,
    /// Actions need the CSRF token and this admin token.
    Admin(String),
    /// Listening beyond loopback without an admin token: no actions.
    ReadOnly,
}

impl Access {
    /// For the start-up line and the page header.
    pub fn describe(&self) -> &'static str {
        match self {
            Access::Local => "actions allowed from this host",
            Access::Admin(_) => "actions need the admin token",
            Access::ReadOnly => "read-only",
        }
    }

    /// Whether mutating actions are offered at all.
    pub fn can_act(&self) -> bool {
        !matches!(self, Access::ReadOnly)
    }
}

/// One reading of one queue.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    backlog: u64,
    processed: u64,
}

/// One queue as the overview and `/api/queues` show it.
#[derive(Debug, Clone)]
pub struct QueueRow {
    /// The queue's name.
    pub name: String,
    /// Its counts (`None`: reading them failed).
    pub stats: Option<QueueStats>,
    /// How long its earliest due task has waited past its due time.
    pub oldest_age: Option<Duration>,
    /// Tasks acked per second over the last minute (`None`: not known yet).
    pub throughput: Option<f64>,
    /// Its backlog (waiting + delayed + in flight) over the last ten minutes, oldest first.
    pub history: Vec<u64>,
}

/// The kinds of lock besides the mutex, as the Locks page and `/api/locks`
/// show them.
#[derive(Debug, Default)]
pub struct OtherLocks {
    /// Fair locks held or with waiters.
    pub fair: Vec<(String, dlm::FairStatus)>,
    /// Read-write locks with a writer, readers or a waiting writer.
    pub rw: Vec<(String, dlm::RwStatus)>,
    /// Semaphores ever used.
    pub semaphores: Vec<(String, dlm::SemaphoreStatus)>,
    /// Elections ever run: the leader (if any) and the last term.
    pub elections: Vec<(String, Option<dlm::Leader>, u64)>,
}

/// A dependency or dependent of a task, and its state (`None`: unknown,
/// e.g. finished and forgotten).
#[derive(Debug, Clone)]
pub struct Neighbour {
    /// Its id.
    pub id: String,
    /// Its state.
    pub state: Option<TaskState>,
}

/// One task as its page and `/api/queues/NAME/tasks/ID` show it.
#[derive(Debug, Clone)]
pub struct TaskView {
    /// Everything the queue knows about it.
    pub task: TaskDetail,
    /// Its first [`MAX_NEIGHBOURS`] dependencies, each with its state.
    pub deps: Vec<Neighbour>,
    /// Its first [`MAX_NEIGHBOURS`] dependents, each with its state.
    pub dependents: Vec<Neighbour>,
    /// Whether the queue's event log is on.
    pub events_on: bool,
    /// Its newest [`MAX_TASK_EVENTS`] events, oldest first, from the first
    /// [`EVENT_PAGES`] pages of the log.
    pub events: Vec<Event>,
    /// Whether the log has more entries than were read.
    pub events_partial: bool,
}

/// The states of `ids` (the first [`MAX_NEIGHBOURS`]), read at once.
async fn neighbours(queue: &dlm::queue::Queue, ids: &[String]) -> dlm::Result<Vec<Neighbour>> {
    let reads = ids.iter().take(MAX_NEIGHBOURS).map(|id| async move {
        let state = queue.task(id).await?.map(|t| t.state);
        Ok::<_, dlm::Error>(Neighbour {
            id: id.clone(),
            state,
        })
    });
    futures_util::future::try_join_all(reads).await
}

/// The newest [`MAX_TASK_EVENTS`] events of task `id` in the first
/// [`EVENT_PAGES`] pages of the log, and whether the log goes on.
async fn task_events(queue: &dlm::queue::Queue, id: &str) -> dlm::Result<(Vec<Event>, bool)> {
    let mut kept = VecDeque::new();
    let mut from = EventsFrom::Start;
    for _ in 0..EVENT_PAGES {
        let (page, next) = queue.events_page(&from, MAX_EVENTS_PAGE).await?;
        if page.is_empty() || next == from {
            return Ok((kept.into(), false));
        }
        for e in page.into_iter().filter(|e| e.task == id) {
            if kept.len() == MAX_TASK_EVENTS {
                kept.pop_front();
            }
            kept.push_back(e);
        }
        from = next;
    }
    let (more, _) = queue.events_page(&from, 1).await?;
    Ok((kept.into(), !more.is_empty()))
}

/// The shared state of the server.
pub struct State {
    client: dlm::Client,
    named: Vec<String>,
    discovered: RwLock<Vec<String>>,
    lock_pattern: String,
    access: Access,
    csrf: String,
    metrics: PrometheusHandle,
    interval: Duration,
    history: Mutex<HashMap<String, VecDeque<Sample>>>,
    exported_locks: Mutex<BTreeSet<String>>,
    redis_up: AtomicBool,
}

/// Install the process's Prometheus recorder (the library's own metrics,
/// if any, land there too).
pub fn install_recorder() -> Result<PrometheusHandle, CliError> {
    PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| CliError::Usage(format!("cannot install the metrics recorder: {e}")))
}

/// A random hex token for the forms (CSRF).
fn random_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| CliError::Io {
        what: "reading random bytes",
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl State {
    /// The state of a server on `client`.
    pub fn new(
        client: dlm::Client,
        named: Vec<String>,
        lock_pattern: String,
        access: Access,
        metrics: PrometheusHandle,
        interval: Duration,
    ) -> Result<Self, CliError> {
        describe_metrics();
        Ok(State {
            client,
            named,
            discovered: RwLock::new(Vec::new()),
            lock_pattern,
            access,
            csrf: random_token()?,
            metrics,
            interval,
            history: Mutex::new(HashMap::new()),
            exported_locks: Mutex::new(BTreeSet::new()),
            redis_up: AtomicBool::new(true),
        })
    }

    /// The Redis client.
    pub fn client(&self) -> &dlm::Client {
        &self.client
    }

    /// Who may act.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The CSRF token every form carries.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The lock glob watched.
    pub fn lock_pattern(&self) -> &str {
        &self.lock_pattern
    }

    /// How often the pages refresh (the sampling interval, at most 2 s).
    pub fn refresh(&self) -> Duration {
        self.interval.min(Duration::from_secs(2))
    }

    /// The queues watched: those named, else those found.
    pub fn queues(&self) -> Vec<String> {
        if !self.named.is_empty() {
            return self.named.clone();
        }
        self.discovered
            .read()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// Whether the last reading of Redis worked.
    pub fn redis_up(&self) -> bool {
        self.redis_up.load(Ordering::Relaxed)
    }

    /// Look for queues again (when none are named); keep the last list on error.
    pub async fn discover(&self) {
        if !self.named.is_empty() {
            return;
        }
        match self.client.queue_names(MAX_QUEUES).await {
            Ok(found) => {
                if let Ok(mut d) = self.discovered.write() {
                    *d = found;
                }
            }
            Err(e) => tracing::warn!(error = %e, "scanning for queues failed"),
        }
    }

    /// Read every watched queue now; sets the queue gauges and `dlm_redis_up`.
    pub async fn queue_rows(&self) -> Vec<QueueRow> {
        let names = self.queues();
        let reads = names.iter().map(|name| async move {
            let queue = self.client.queue(name.as_str());
            // Per shard, summed here: sets dlm_queue_depth and (for more
            // than one shard) dlm_queue_shard_depth in one read.
            let stats = queue
                .shard_stats()
                .await
                .map(|per| crate::shard_view::total(&per));
            let oldest = queue.oldest_due_age().await;
            (stats, oldest)
        });
        let results = join_all(reads).await;
        let mut up = results.iter().all(|(stats, _)| stats.is_ok());
        let rows = self.rows(names, results);
        publish_queues(&rows);
        if rows.is_empty() {
            up = self.client.queue_names(1).await.is_ok();
        }
        self.redis_up.store(up, Ordering::Relaxed);
        metrics::gauge!("dlm_redis_up").set(if up { 1.0 } else { 0.0 });
        rows
    }

    /// The rows of `names` from their readings, with their history.
    fn rows(
        &self,
        names: Vec<String>,
        results: Vec<(dlm::Result<QueueStats>, dlm::Result<Option<Duration>>)>,
    ) -> Vec<QueueRow> {
        let history = self.history.lock().ok();
        names
            .into_iter()
            .zip(results)
            .map(|(name, (stats, oldest))| {
                let samples = history.as_ref().and_then(|h| h.get(&name));
                QueueRow {
                    throughput: samples.and_then(throughput),
                    history: samples
                        .map_or_else(Vec::new, |s| s.iter().map(|x| x.backlog).collect()),
                    stats: stats.ok(),
                    oldest_age: oldest.ok().flatten(),
                    name,
                }
            })
            .collect()
    }

    /// The held locks matching the pattern now; sets the lock gauges.
    pub async fn locks(&self) -> dlm::Result<Vec<HeldLock>> {
        let locks = self
            .client
            .held_locks(&self.lock_pattern, MAX_LOCKS)
            .await?;
        self.publish_locks(&locks);
        Ok(locks)
    }

    /// The other kinds of lock matching the pattern now, each with its
    /// status: fair locks, read-write locks, semaphores, elections.
    pub async fn other_locks(&self) -> dlm::Result<OtherLocks> {
        use dlm::LockKind;
        let (c, p) = (&self.client, self.lock_pattern.as_str());
        let names = |kind| c.lock_names(kind, p, MAX_LOCKS);
        let (fair, rw, sem, elect) = tokio::try_join!(
            names(LockKind::Fair),
            names(LockKind::RwLock),
            names(LockKind::Semaphore),
            names(LockKind::Election)
        )?;
        let fair = futures_util::future::try_join_all(fair.into_iter().map(|n| async move {
            let st = c.fair_lock(n.as_str()).status().await?;
            Ok::<_, dlm::Error>((n, st))
        }));
        let rw = futures_util::future::try_join_all(rw.into_iter().map(|n| async move {
            let st = c.rwlock(n.as_str()).status().await?;
            Ok::<_, dlm::Error>((n, st))
        }));
        // The capacity argument is not used by status(): it reads the stored one.
        let sem = futures_util::future::try_join_all(sem.into_iter().map(|n| async move {
            let st = c.semaphore(n.as_str(), 1).status().await?;
            Ok::<_, dlm::Error>((n, st))
        }));
        let elect = futures_util::future::try_join_all(elect.into_iter().map(|n| async move {
            let (leader, last_term) = c.election(n.as_str()).status().await?;
            Ok::<_, dlm::Error>((n, leader, last_term))
        }));
        let (fair, rw, semaphores, elections) = tokio::try_join!(fair, rw, sem, elect)?;
        Ok(OtherLocks {
            fair,
            rw,
            semaphores,
            elections,
        })
    }

    /// Task `id` of queue `name` with its neighbours' states and its events
    /// (`None`: the queue has no such task and remembers none).
    pub async fn task_view(&self, name: &str, id: &str) -> dlm::Result<Option<TaskView>> {
        let queue = self.client.queue(name);
        let Some(task) = queue.task(id).await? else {
            return Ok(None);
        };
        let events_on = queue.settings().await?.get_events().is_some();
        let read_events = async {
            if events_on {
                task_events(&queue, id).await
            } else {
                Ok((Vec::new(), false))
            }
        };
        let (deps, dependents, (events, events_partial)) = tokio::try_join!(
            neighbours(&queue, &task.deps),
            neighbours(&queue, &task.dependents),
            read_events
        )?;
        Ok(Some(TaskView {
            task,
            deps,
            dependents,
            events_on,
            events,
            events_partial,
        }))
    }

    /// Everything `/metrics` shows, read now.
    pub async fn scrape(&self) -> String {
        self.queue_rows().await;
        if let Err(e) = self.locks().await {
            tracing::warn!(error = %e, "reading the locks failed");
        }
        self.metrics.render()
    }

    fn record(&self, rows: &[QueueRow]) {
        let Ok(mut history) = self.history.lock() else {
            return;
        };
        let now = Instant::now();
        let keep =
            usize::try_from(HISTORY.as_secs() / self.interval.as_secs().max(1)).unwrap_or(300);
        history.retain(|name, _| rows.iter().any(|r| &r.name == name));
        for row in rows {
            let Some(s) = row.stats else { continue };
            let samples = history.entry(row.name.clone()).or_default();
            samples.push_back(Sample {
                at: now,
                backlog: s.waiting + s.delayed + s.inflight,
                processed: s.processed,
            });
            while samples.len() > keep {
                samples.pop_front();
            }
        }
    }

    fn publish_locks(&self, locks: &[HeldLock]) {
        let Ok(mut exported) = self.exported_locks.lock() else {
            return;
        };
        let now: BTreeSet<String> = locks.iter().map(|l| l.name.clone()).collect();
        for gone in exported.difference(&now) {
            metrics::gauge!("dlm_lock_held", "name" => gone.clone()).set(0.0);
            metrics::gauge!("dlm_lock_ttl_seconds", "name" => gone.clone()).set(0.0);
        }
        for lock in locks {
            let name = lock.name.clone();
            metrics::gauge!("dlm_lock_held", "name" => name.clone()).set(1.0);
            metrics::gauge!("dlm_lock_ttl_seconds", "name" => name.clone())
                .set(lock.ttl.map_or(-1.0, |t| t.as_secs_f64()));
            if let Some(f) = lock.fence {
                metrics::gauge!("dlm_lock_fence", "name" => name).set(f.get() as f64);
            }
        }
        metrics::gauge!("dlm_locks_held").set(locks.len() as f64);
        // Gone locks are shown at 0 once, then forgotten.
        *exported = now;
    }
}

/// Tasks acked per second over the last minute of samples.
fn throughput(samples: &VecDeque<Sample>) -> Option<f64> {
    let last = samples.back()?;
    let first = samples
        .iter()
        .find(|s| last.at.duration_since(s.at) <= THROUGHPUT_WINDOW)?;
    let secs = last.at.duration_since(first.at).as_secs_f64();
    (secs > 0.0).then(|| last.processed.saturating_sub(first.processed) as f64 / secs)
}

fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge};
    // dlm_queue_depth and dlm_queue_oldest_task_age_seconds come from the
    // library: Queue::stats() sets them (dlm::metrics::describe() says what they are).
    dlm::metrics::describe();
    describe_gauge!(
        "dlm_queue_dead_tasks",
        "Tasks in a queue's dead-letter set."
    );
    describe_counter!(
        "dlm_queue_processed_total",
        "Tasks acked since the queue was created (kept in Redis)."
    );
    describe_counter!(
        "dlm_queue_failed_total",
        "Tasks moved to the dead-letter set since the queue was created (kept in Redis)."
    );
    describe_gauge!(
        "dlm_lock_held",
        "1 while a watched lock is held (0 once after it is gone)."
    );
    describe_gauge!(
        "dlm_lock_ttl_seconds",
        "The remaining TTL of a held lock (-1: no expiry)."
    );
    describe_gauge!(
        "dlm_lock_fence",
        "The last fencing token of a held lock's hash slot."
    );
    describe_gauge!("dlm_locks_held", "How many watched locks are held.");
    describe_gauge!(
        "dlm_redis_up",
        "1 when the last reading of Redis succeeded, else 0."
    );
}

fn publish_queues(rows: &[QueueRow]) {
    for row in rows {
        let Some(s) = row.stats else { continue };
        // (dlm_queue_depth and dlm_queue_oldest_task_age_seconds were set by
        // the Queue::stats() call that read these counts.)
        let q = row.name.clone();
        metrics::gauge!("dlm_queue_dead_tasks", "queue" => q.clone()).set(s.dead as f64);
        metrics::counter!("dlm_queue_processed_total", "queue" => q.clone()).absolute(s.processed);
        metrics::counter!("dlm_queue_failed_total", "queue" => q).absolute(s.failed);
    }
}

/// Sample Redis every interval until aborted: the history, the gauges, and
/// (when no queue is named) the list of queues every 10 s.
pub async fn run_sampler(state: Arc<State>) {
    let mut ticker = tokio::time::interval(state.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_discovery = Instant::now();
    loop {
        ticker.tick().await;
        if last_discovery.elapsed() >= REDISCOVER {
            state.discover().await;
            last_discovery = Instant::now();
        }
        let rows = state.queue_rows().await;
        state.record(&rows);
        if let Err(e) = state.locks().await {
            tracing::debug!(error = %e, "reading the locks failed");
        }
        state.metrics.run_upkeep();
    }
}
