//! What the soak's workloads record: every lock operation (for the
//! linearizability checker) and every believed-held interval (for the
//! homegrown checkers), per lock kind and epoch, on one [`Clock`]; and the
//! queues' finished epochs.
//!
//! Lock names rotate every epoch (`soak:KIND:EPOCH:I`), so that each history
//! handed to a checker is bounded: one epoch of one kind.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dlm_testkit::history::{Clock, Hold};

use super::lin::{LockModel, LockOp, QueueOp, QueueSpec};

/// The semaphore's capacity in the soak.
pub const PERMITS: u32 = 2;

/// The lock kinds the soak runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `client.lock`
    Mutex,
    /// `client.fair_lock`
    Fair,
    /// `client.rwlock`
    Rw,
    /// `client.semaphore`
    Semaphore,
    /// `client.election`
    Election,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 5] = [
        Kind::Mutex,
        Kind::Fair,
        Kind::Rw,
        Kind::Semaphore,
        Kind::Election,
    ];

    /// Its name in reports and lock names.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Fair => "fair",
            Kind::Rw => "rwlock",
            Kind::Semaphore => "semaphore",
            Kind::Election => "election",
        }
    }

    /// The model the linearizability checker judges it against.
    pub fn model(self) -> LockModel {
        match self {
            Kind::Mutex | Kind::Fair | Kind::Election => LockModel::Mutex,
            Kind::Rw => LockModel::ReadWrite,
            Kind::Semaphore => LockModel::Semaphore { permits: PERMITS },
        }
    }
}

/// A believed-held interval and whether it excluded everyone else.
#[derive(Debug, Clone)]
pub struct HoldRec {
    /// The interval (its `holder` is the recording client).
    pub hold: Hold,
    /// A write lock, a mutex, a fair lock, a leadership (not a read share
    /// nor a permit).
    pub exclusive: bool,
}

/// One kind's records of one epoch.
#[derive(Debug, Default, Clone)]
pub struct LockLog {
    /// For the linearizability checker.
    pub ops: Vec<LockOp>,
    /// For the homegrown checkers.
    pub holds: Vec<HoldRec>,
}

/// One queue's records of one epoch, handed over once the epoch's queue
/// was drained (or given up on).
#[derive(Debug)]
pub struct QueueEpoch {
    /// The queue's name.
    pub queue: String,
    /// Which of the soak's queues (`groups+deps` or `priorities+schedules`).
    pub flavour: &'static str,
    /// When its first and last operation happened.
    pub from: Duration,
    /// See `from`.
    pub until: Duration,
    /// For the linearizability checker (empty when its workers were
    /// subprocesses, whose operations are not seen one by one).
    pub ops: Vec<QueueOp>,
    /// Its configuration.
    pub spec: QueueSpec,
    /// For the homegrown checker.
    pub history: dlm_testkit::history::QueueHistory,
    /// Task -> its dependencies.
    pub deps: std::collections::HashMap<String, Vec<String>>,
    /// Every handling, for `dag_violations`.
    pub runs: Vec<dlm_testkit::history::DagRun>,
    /// Did the queue drain (nothing waiting, delayed or in flight, none
    /// dead) at the end of the epoch? Acks of unknown outcome then took
    /// effect.
    pub drained: bool,
    /// Schedule ticks fired (by `run_schedules`) and tick tasks acked.
    pub ticks_fired: usize,
    /// See `ticks_fired`.
    pub ticks_handled: usize,
}

/// Everything recorded, shared by every workload of the soak.
#[derive(Debug)]
pub struct Recorder {
    /// The one clock.
    pub clock: Clock,
    /// How long an epoch lasts.
    pub epoch_len: Duration,
    /// Lock names per kind and epoch.
    pub names_per_kind: usize,
    locks: Mutex<BTreeMap<(Kind, u64), LockLog>>,
    queues: Mutex<Vec<QueueEpoch>>,
    next_process: AtomicUsize,
    next_lease: AtomicU64,
    ops: Mutex<BTreeMap<String, u64>>,
    by_client: Mutex<BTreeMap<String, u64>>,
    total: AtomicU64,
    /// Set when the workloads must stop (duration, --max-ops, Ctrl-C, error).
    pub stop: AtomicBool,
    max_ops: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub fn new(epoch_len: Duration, names_per_kind: usize, max_ops: u64) -> Self {
        Recorder {
            clock: Clock::new(),
            epoch_len,
            names_per_kind,
            locks: Mutex::new(BTreeMap::new()),
            queues: Mutex::new(Vec::new()),
            next_process: AtomicUsize::new(1),
            next_lease: AtomicU64::new(1),
            ops: Mutex::new(BTreeMap::new()),
            by_client: Mutex::new(BTreeMap::new()),
            total: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            max_ops,
        }
    }

    /// Should the workloads stop?
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The epoch now.
    pub fn epoch(&self) -> u64 {
        self.epoch_at(self.clock.now())
    }

    /// The epoch at `t`.
    pub fn epoch_at(&self, t: Duration) -> u64 {
        (t.as_millis() / self.epoch_len.as_millis().max(1)) as u64
    }

    /// When epoch `e` starts.
    pub fn epoch_start(&self, e: u64) -> Duration {
        self.epoch_len * u32::try_from(e).unwrap_or(u32::MAX)
    }

    /// Lock `i` of `kind` in epoch `e` on the deployment tagged `tag` (""
    /// for the standalone server, else e.g. "cluster:").
    pub fn lock_name(&self, tag: &str, kind: Kind, e: u64, i: usize) -> String {
        format!("soak:{tag}{}:{e}:{i}", kind.label())
    }

    /// A fresh process id (a new one after an operation of unknown outcome).
    pub fn process(&self) -> usize {
        self.next_process.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh lease id.
    pub fn lease(&self) -> u64 {
        self.next_lease.fetch_add(1, Ordering::Relaxed)
    }

    /// Count one operation on `kind` (a lock kind or "queue") by a
    /// `client` (past `--max-ops` in all, the soak stops).
    pub fn count(&self, kind: &str, client: &str) {
        self.count_n(kind, client, 1);
    }

    /// Count `n` operations at once.
    pub fn count_n(&self, kind: &str, client: &str, n: u64) {
        *lock(&self.ops).entry(kind.to_string()).or_default() += n;
        *lock(&self.by_client).entry(client.to_string()).or_default() += n;
        let total = self.total.fetch_add(n, Ordering::Relaxed) + n;
        if total >= self.max_ops {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// Operations so far by kind.
    pub fn op_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.ops).clone()
    }

    /// Operations so far by client.
    pub fn client_counts(&self) -> BTreeMap<String, u64> {
        lock(&self.by_client).clone()
    }

    /// Operations so far.
    pub fn total_ops(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Record a lock operation of `kind` in epoch `e`.
    pub fn lock_op(&self, kind: Kind, e: u64, op: LockOp) {
        lock(&self.locks).entry((kind, e)).or_default().ops.push(op);
    }

    /// Record a believed-held interval of `kind` in epoch `e`.
    pub fn hold(&self, kind: Kind, e: u64, hold: Hold, exclusive: bool) {
        lock(&self.locks)
            .entry((kind, e))
            .or_default()
            .holds
            .push(HoldRec { hold, exclusive });
    }

    /// Take the lock logs of every epoch up to `last` (inclusive).
    pub fn take_locks(&self, last: Option<u64>) -> Vec<((Kind, u64), LockLog)> {
        let mut all = lock(&self.locks);
        let keys: Vec<(Kind, u64)> = all
            .keys()
            .filter(|(_, e)| last.is_none_or(|l| *e <= l))
            .copied()
            .collect();
        keys.into_iter()
            .filter_map(|k| all.remove(&k).map(|log| (k, log)))
            .collect()
    }

    /// A queue's epoch is over.
    pub fn queue_epoch(&self, q: QueueEpoch) {
        lock(&self.queues).push(q);
    }

    /// Take the finished queue epochs.
    pub fn take_queues(&self) -> Vec<QueueEpoch> {
        std::mem::take(&mut *lock(&self.queues))
    }
}
