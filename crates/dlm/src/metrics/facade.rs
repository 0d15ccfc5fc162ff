//! Recording through the `metrics` facade (the `metrics` feature).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::metrics::{Key, KeyName, Label, Level, Metadata, Recorder, SharedString, with_recorder};

use super::*;

/// Attach the description and unit of every dlm metric to the installed
/// recorder (see the table above). Call it once after installing one;
/// calling it again is harmless.
pub fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        LOCK_ACQUIRE_SECONDS,
        Unit::Seconds,
        "One lock acquire call, waiting included, by outcome (acquired, busy, timeout, no_quorum, error)."
    );
    describe_histogram!(
        LOCK_WAIT_SECONDS,
        Unit::Seconds,
        "Time spent waiting for a busy lock before getting it."
    );
    describe_histogram!(
        LOCK_HOLD_SECONDS,
        Unit::Seconds,
        "Time a lock was held: from the grant to its release or loss."
    );
    describe_histogram!(
        LOCK_HANDOFF_SECONDS,
        Unit::Seconds,
        "Latency of a hand-over between two tasks of one client."
    );
    describe_counter!(
        LOCK_ATTEMPTS_TOTAL,
        Unit::Count,
        "Attempts to take a lock in Redis."
    );
    describe_counter!(
        LOCK_LOST_TOTAL,
        Unit::Count,
        "Held locks found lost, by reason (expired, taken, renew_failed)."
    );
    describe_counter!(
        LOCK_RENEWALS_TOTAL,
        Unit::Count,
        "Watchdog renewals of held locks, by outcome (ok, lost, error)."
    );
    describe_counter!(
        QUEUE_TASKS_TOTAL,
        Unit::Count,
        "Settled tasks, by queue and outcome (acked, retried, dead, lease_lost)."
    );
    describe_histogram!(
        QUEUE_TASK_WAIT_SECONDS,
        Unit::Seconds,
        "Time from a task being due to its claim (Redis server clock)."
    );
    describe_histogram!(
        QUEUE_TASK_RUN_SECONDS,
        Unit::Seconds,
        "Time from a task's claim to the end of its handler (worker runtime)."
    );
    describe_gauge!(
        QUEUE_DEPTH,
        Unit::Count,
        "Tasks of a queue by state (waiting, delayed, inflight, dead), as last sampled."
    );
    describe_gauge!(
        QUEUE_SHARD_DEPTH,
        Unit::Count,
        "Waiting tasks of each shard of a sharded queue, as last sampled."
    );
    describe_gauge!(
        QUEUE_OLDEST_TASK_AGE_SECONDS,
        Unit::Seconds,
        "How long the oldest due task of a queue has waited, as last sampled."
    );
    describe_counter!(
        QUEUE_RESULTS_EVICTED_TOTAL,
        Unit::Count,
        "Results of a queue evicted before their time (its byte or count bound), as last sampled."
    );
    describe_counter!(
        REDIS_ERRORS_TOTAL,
        Unit::Count,
        "Failed calls to Redis, by kind."
    );
}

static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// Keys with static labels, hashed at compile time.
macro_rules! static_keys {
    ($name:expr, $label:literal: $($value:literal),+) => {
        [$({
            static LABELS: [Label; 1] = [Label::from_static_parts($label, $value)];
            Key::from_static_parts($name, &LABELS)
        }),+]
    };
}

static NO_LABELS: [Label; 0] = [];
static WAIT: Key = Key::from_static_parts(LOCK_WAIT_SECONDS, &NO_LABELS);
static HOLD: Key = Key::from_static_parts(LOCK_HOLD_SECONDS, &NO_LABELS);
static HANDOFF: Key = Key::from_static_parts(LOCK_HANDOFF_SECONDS, &NO_LABELS);
static ATTEMPTS: Key = Key::from_static_parts(LOCK_ATTEMPTS_TOTAL, &NO_LABELS);
static ACQUIRE: [Key; 5] = static_keys!(LOCK_ACQUIRE_SECONDS, "outcome": "acquired", "busy", "timeout", "no_quorum", "error");
static LOST: [Key; 3] = static_keys!(LOCK_LOST_TOTAL, "reason": "expired", "taken", "renew_failed");
static RENEWALS: [Key; 3] = static_keys!(LOCK_RENEWALS_TOTAL, "outcome": "ok", "lost", "error");
static REDIS_ERRORS: [Key; 11] = static_keys!(
    REDIS_ERRORS_TOTAL, "kind": "timeout", "connection", "refused", "cluster_moved", "cluster",
    "readonly", "loading", "auth", "server", "protocol", "other"
);

/// The `lock` label of one lock's metrics: `None` unless the client opted in
/// with `ClientBuilder::metrics_lock_names`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LockLabel(Option<SharedString>);

/// The bounded set of lock names a client labels its lock metrics with.
#[derive(Debug)]
pub(crate) struct LockNames {
    max: usize,
    seen: Mutex<HashSet<Arc<str>>>,
}

impl LockNames {
    pub(crate) fn new(max: usize) -> Self {
        LockNames {
            max,
            seen: Mutex::new(HashSet::new()),
        }
    }

    /// The label of `name`: itself while fewer than `max` names were seen, else `other`.
    pub(crate) fn label(&self, name: &Arc<str>) -> LockLabel {
        let mut seen = match self.seen.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if seen.contains(name) || seen.len() < self.max {
            seen.insert(name.clone());
            return LockLabel(Some(SharedString::from_shared(name.clone())));
        }
        LockLabel(Some(SharedString::const_str("other")))
    }
}

/// Run `f` with `key`, plus the `lock` label when there is one.
fn with_lock<T>(key: &Key, lock: &LockLabel, f: impl FnOnce(&dyn Recorder, &Key) -> T) -> T {
    match &lock.0 {
        None => with_recorder(|r| f(r, key)),
        Some(name) => {
            let key = key.with_extra_labels(vec![Label::new("lock", name.clone())]);
            with_recorder(|r| f(r, &key))
        }
    }
}

fn record(key: &Key, lock: &LockLabel, d: Duration) {
    with_lock(key, lock, |r, k| {
        r.register_histogram(k, &METADATA).record(d.as_secs_f64())
    });
}

fn increment(key: &Key, lock: &LockLabel) {
    with_lock(key, lock, |r, k| {
        r.register_counter(k, &METADATA).increment(1)
    });
}

impl LockLabel {
    /// `dlm_lock_acquire_seconds{outcome}`.
    pub(crate) fn acquire(&self, outcome: AcquireOutcome, d: Duration) {
        record(&ACQUIRE[outcome as usize], self, d);
    }

    /// `dlm_lock_wait_seconds`.
    pub(crate) fn wait(&self, d: Duration) {
        record(&WAIT, self, d);
    }

    /// `dlm_lock_hold_seconds`.
    pub(crate) fn hold(&self, d: Duration) {
        record(&HOLD, self, d);
    }

    /// `dlm_lock_handoff_seconds`.
    pub(crate) fn handoff(&self, d: Duration) {
        record(&HANDOFF, self, d);
    }

    /// `dlm_lock_attempts_total`.
    pub(crate) fn attempt(&self) {
        increment(&ATTEMPTS, self);
    }

    /// `dlm_lock_lost_total{reason}`.
    pub(crate) fn lost(&self, reason: LostReason) {
        increment(&LOST[reason as usize], self);
    }

    /// `dlm_lock_renewals_total{outcome}`.
    pub(crate) fn renewal(&self, outcome: RenewalOutcome) {
        increment(&RENEWALS[outcome as usize], self);
    }
}

/// `dlm_redis_errors_total{kind}`.
pub(crate) fn redis_error(kind: RedisErrorKind) {
    increment(&REDIS_ERRORS[kind as usize], &LockLabel::default());
}

const TASK_OUTCOMES: [&str; 4] = ["acked", "retried", "dead", "lease_lost"];
const STATES: [&str; 4] = ["waiting", "delayed", "in_flight", "dead"];

/// The keys of one queue's metrics, built once per queue handle so that
/// recording allocates nothing.
#[derive(Debug)]
pub(crate) struct QueueMetrics {
    tasks: [Key; 4],
    wait: Key,
    run: Key,
    depth: [Key; 4],
    oldest: Key,
    evicted: Key,
    /// The `queue` label, for the per-shard keys.
    queue: Label,
    /// How many shard series were last set (0: none, the queue was not sharded).
    shards: AtomicU16,
}

impl QueueMetrics {
    pub(crate) fn new(queue: &str) -> Self {
        let queue = Label::new("queue", SharedString::from_shared(Arc::<str>::from(queue)));
        let key = |name: &'static str, extra: Option<(&'static str, &'static str)>| {
            let mut labels = vec![queue.clone()];
            if let Some((k, v)) = extra {
                labels.push(Label::from_static_parts(k, v));
            }
            Key::from_parts(KeyName::from_const_str(name), labels)
        };
        QueueMetrics {
            tasks: TASK_OUTCOMES.map(|o| key(QUEUE_TASKS_TOTAL, Some(("outcome", o)))),
            wait: key(QUEUE_TASK_WAIT_SECONDS, None),
            run: key(QUEUE_TASK_RUN_SECONDS, None),
            depth: STATES.map(|s| key(QUEUE_DEPTH, Some(("state", s)))),
            oldest: key(QUEUE_OLDEST_TASK_AGE_SECONDS, None),
            evicted: key(QUEUE_RESULTS_EVICTED_TOTAL, None),
            queue,
            shards: AtomicU16::new(0),
        }
    }

    /// `dlm_queue_tasks_total{queue,outcome}` += `n`.
    pub(crate) fn tasks(&self, outcome: TaskOutcome, n: u64) {
        if n > 0 {
            with_recorder(|r| {
                r.register_counter(&self.tasks[outcome as usize], &METADATA)
                    .increment(n)
            });
        }
    }

    /// `dlm_queue_task_wait_seconds{queue}`, once per value.
    pub(crate) fn waited(&self, waits: impl IntoIterator<Item = Duration>) {
        with_recorder(|r| {
            let h = r.register_histogram(&self.wait, &METADATA);
            for d in waits {
                h.record(d.as_secs_f64());
            }
        });
    }

    /// `dlm_queue_task_run_seconds{queue}`.
    pub(crate) fn ran(&self, d: Duration) {
        with_recorder(|r| {
            r.register_histogram(&self.run, &METADATA)
                .record(d.as_secs_f64())
        });
    }

    /// `dlm_queue_depth{queue,state}` (waiting, delayed, in_flight, dead) and
    /// `dlm_queue_oldest_task_age_seconds{queue}`, and the counter
    /// `dlm_queue_results_evicted_total{queue}` (kept by Redis, set to its
    /// total).
    pub(crate) fn sampled(&self, depth: [u64; 4], oldest: Duration, evicted: u64) {
        with_recorder(|r| {
            for (key, n) in self.depth.iter().zip(depth) {
                r.register_gauge(key, &METADATA).set(n as f64);
            }
            r.register_gauge(&self.oldest, &METADATA)
                .set(oldest.as_secs_f64());
            r.register_counter(&self.evicted, &METADATA)
                .absolute(evicted);
        });
    }

    /// `dlm_queue_shard_depth{queue,shard}`: each shard's waiting tasks,
    /// only for more than one shard; the series of shards no longer there
    /// are set to 0 (once).
    pub(crate) fn shards_sampled(&self, waiting: &[u64]) {
        let live = match u16::try_from(waiting.len()) {
            Ok(n) if n > 1 => n,
            _ => 0,
        };
        let before = self.shards.swap(live, Ordering::Relaxed);
        if live == 0 && before == 0 {
            return;
        }
        let key = |i: u16| {
            Key::from_parts(
                KeyName::from_const_str(QUEUE_SHARD_DEPTH),
                vec![
                    self.queue.clone(),
                    Label::new("shard", SharedString::from_owned(i.to_string())),
                ],
            )
        };
        with_recorder(|r| {
            for (i, n) in (0..live).zip(waiting) {
                r.register_gauge(&key(i), &METADATA).set(*n as f64);
            }
            for i in live..before {
                r.register_gauge(&key(i), &METADATA).set(0.0);
            }
        });
    }
}
