//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, and what
//! each one means.
//!
//! dlm installs no exporter: it records through the facade, which costs next
//! to nothing while no recorder is installed (every key of a lock cycle is a
//! `static`, so nothing is allocated). An application installs the recorder
//! it wants (Prometheus, StatsD, ...) once, and calls [`describe`] to attach
//! the descriptions and units below to it.
//!
//! ```no_run
//! # fn demo(recorder: impl metrics::Recorder + Sync + 'static) {
//! // e.g. metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()
//! metrics::set_global_recorder(recorder).expect("no recorder installed yet");
//! dlm::metrics::describe();
//! # }
//! ```
//!
//! Labels stay bounded: outcomes, reasons, states and error kinds are fixed
//! sets; `queue` is the queue's name (bounded by the queues an application
//! has). The lock *name* is no label by default (every distinct name would
//! be a time series); [`crate::ClientBuilder::metrics_lock_names`] adds a
//! `lock` label to every lock metric of that client, with the first `n`
//! distinct names it sees and `other` for the rest.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `dlm_lock_acquire_seconds` | histogram | `outcome` | One [`crate::Lock::acquire`] call, waiting included. `acquired`; `busy`: held by another owner and no wait was asked for; `timeout`: still held by another owner when the wait ran out; `no_quorum`: Redlock found no majority; `error`: anything else (Redis unreachable or too slow, not replicated, invalid input). |
//! | `dlm_lock_wait_seconds` | histogram | | Of an acquisition that got the lock after finding it busy: from the call to the grant. |
//! | `dlm_lock_hold_seconds` | histogram | | From the grant to the release (by `release`, drop, `release_all`) or to the moment the lock was found lost. |
//! | `dlm_lock_handoff_seconds` | histogram | | A hand-over between two tasks of one client: from the releasing task sending `release_to` to the waiting task holding the guard. |
//! | `dlm_lock_attempts_total` | counter | | Attempts to take a lock in Redis (one per try; a Redlock try counts once for all its nodes). |
//! | `dlm_lock_lost_total` | counter | `reason` | Held locks found lost. `expired`: a renewal or extend found the key gone; `taken`: another owner holds it; `renew_failed`: the lease ran out while renewals could not reach Redis. |
//! | `dlm_lock_renewals_total` | counter | `outcome` | Watchdog renewals, per lock. `ok`; `lost`: the lock was gone; `error`: Redis did not answer (retried sooner). |
//! | `dlm_queue_tasks_total` | counter | `queue`, `outcome` | Settled tasks ([`crate::queue::Lease`] and the [`crate::queue::Worker`]). `acked`; `retried`: nacked, back in the queue; `dead`: moved to the dead-letter set, nacked on its last attempt or found by a claim with its last lease run out; `lease_lost`: the ack or nack found the lease expired or taken. |
//! | `dlm_queue_task_wait_seconds` | histogram | `queue` | From the time a task was due (its enqueue time, or the end of its delay or backoff) to its claim, both on the Redis server's clock. |
//! | `dlm_queue_task_run_seconds` | histogram | `queue` | In the worker runtime: from the claim to the handler's end (when its ack or nack is sent). |
//! | `dlm_queue_depth` | gauge | `queue`, `state` | Tasks per `state`: `waiting` (due now), `delayed` (due later), `in_flight` (leased), `dead`. Set by [`crate::queue::Queue::stats`]. |
//! | `dlm_queue_shard_depth` | gauge | `queue`, `shard` | Waiting (due) tasks per shard of a sharded queue (`shard`: 0 .. K − 1, and the draining ones); only for a queue of more than one shard (a shard no longer there is shown at 0 once). Set by [`crate::queue::Queue::shard_stats`]. |
//! | `dlm_queue_oldest_task_age_seconds` | gauge | `queue` | How long the oldest due waiting task has been due (0 when none is). Set by [`crate::queue::Queue::stats`]. |
//! | `dlm_queue_results_evicted_total` | counter | `queue` | Results evicted before their time to keep the queue within [`crate::queue::QueueSettings::keep_results_bytes`] (default 64 MiB) or [`crate::queue::MAX_REMEMBERED_RESULTS`], oldest first. Counted by Redis; set to its total by [`crate::queue::Queue::stats`]. |
//! | `dlm_redis_errors_total` | counter | `kind` | Failed calls to Redis. `timeout` (no answer within the deadline), `connection` (dropped, I/O), `refused`, `cluster_moved` (MOVED/ASK), `cluster` (CLUSTERDOWN, TRYAGAIN, CROSSSLOT, MASTERDOWN), `readonly`, `loading`, `auth`, `server` (any other error reply, e.g. a script error), `protocol` (an unexpected reply), `other`. |
//!
//! The queue gauges are sampled, not kept up to date: the library does not
//! poll by itself. Whatever wants them current (`dlm serve`, a worker's own
//! timer) calls [`crate::queue::Queue::stats`] now and then: one script, one
//! round trip (one per shard on a sharded queue; [`crate::queue::Queue::shard_stats`]
//! sets the same gauges and the per-shard ones).
//!
//! The same moments are [`tracing`](https://docs.rs/tracing) spans and
//! events: the span `dlm.acquire` (with the lock's name and the `outcome`
//! above) and the events `acquired`, `handed over`, `released`, `extended`
//! (debug), `lock lost` (warn, with the `reason`), `claimed`, `acked`,
//! `nacked` (debug), `moved to the dead-letter set` (info) and the
//! reconnects of background connections (info).
//!
//! All of this needs the `metrics` feature (on by default). Without it, dlm
//! does not depend on the `metrics` crate, records nothing, and
//! [`describe`] is absent; the metric names below stay.

/// Lock: one acquire call, waiting included.
pub const LOCK_ACQUIRE_SECONDS: &str = "dlm_lock_acquire_seconds";
/// Lock: waiting for a busy lock before getting it.
pub const LOCK_WAIT_SECONDS: &str = "dlm_lock_wait_seconds";
/// Lock: from grant to release or loss.
pub const LOCK_HOLD_SECONDS: &str = "dlm_lock_hold_seconds";
/// Lock: a local hand-over between two tasks of one client.
pub const LOCK_HANDOFF_SECONDS: &str = "dlm_lock_handoff_seconds";
/// Lock: attempts to take a lock in Redis.
pub const LOCK_ATTEMPTS_TOTAL: &str = "dlm_lock_attempts_total";
/// Lock: held locks found lost, by `reason`.
pub const LOCK_LOST_TOTAL: &str = "dlm_lock_lost_total";
/// Lock: watchdog renewals, by `outcome`.
pub const LOCK_RENEWALS_TOTAL: &str = "dlm_lock_renewals_total";
/// Queue: settled tasks, by `queue` and `outcome`.
pub const QUEUE_TASKS_TOTAL: &str = "dlm_queue_tasks_total";
/// Queue: from due to claimed.
pub const QUEUE_TASK_WAIT_SECONDS: &str = "dlm_queue_task_wait_seconds";
/// Queue: from claimed to the handler's end (worker runtime).
pub const QUEUE_TASK_RUN_SECONDS: &str = "dlm_queue_task_run_seconds";
/// Queue: tasks by `queue` and `state` (sampled by `Queue::stats`).
pub const QUEUE_DEPTH: &str = "dlm_queue_depth";
/// Queue: waiting tasks by `queue` and `shard`, for a queue of more than
/// one shard (sampled by `Queue::shard_stats`).
pub const QUEUE_SHARD_DEPTH: &str = "dlm_queue_shard_depth";
/// Queue: how long the oldest due task has waited (sampled by `Queue::stats`).
pub const QUEUE_OLDEST_TASK_AGE_SECONDS: &str = "dlm_queue_oldest_task_age_seconds";
/// Queue: results evicted before their time (sampled by `Queue::stats`).
pub const QUEUE_RESULTS_EVICTED_TOTAL: &str = "dlm_queue_results_evicted_total";
/// Redis: failed calls, by `kind`.
pub const REDIS_ERRORS_TOTAL: &str = "dlm_redis_errors_total";

/// How an acquire call ended (`dlm_lock_acquire_seconds{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    Acquired = 0,
    Busy,
    Timeout,
    NoQuorum,
    Error,
}

impl AcquireOutcome {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AcquireOutcome::Acquired => "acquired",
            AcquireOutcome::Busy => "busy",
            AcquireOutcome::Timeout => "timeout",
            AcquireOutcome::NoQuorum => "no_quorum",
            AcquireOutcome::Error => "error",
        }
    }
}

/// Why a held lock was found lost (`dlm_lock_lost_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostReason {
    Expired = 0,
    Taken,
    RenewFailed,
}

impl LostReason {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::Taken => "taken",
            LostReason::RenewFailed => "renew_failed",
        }
    }
}

/// How one watchdog renewal of one lock went (`dlm_lock_renewals_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalOutcome {
    Ok = 0,
    Lost,
    Error,
}

/// What kind of failure a call to Redis had (`dlm_redis_errors_total{kind}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedisErrorKind {
    Timeout = 0,
    Connection,
    Refused,
    ClusterMoved,
    Cluster,
    ReadOnly,
    Loading,
    Auth,
    Server,
    Protocol,
    Other,
}

/// How a task was settled (`dlm_queue_tasks_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskOutcome {
    Acked = 0,
    Retried,
    Dead,
    LeaseLost,
}

#[cfg(feature = "metrics")]
mod facade;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use facade::describe;
#[cfg(feature = "metrics")]
pub(crate) use facade::{LockLabel, LockNames, QueueMetrics, redis_error};

#[cfg(not(feature = "metrics"))]
mod noop;
#[cfg(not(feature = "metrics"))]
pub(crate) use noop::{LockLabel, LockNames, QueueMetrics, redis_error};
