//! The third-party linearizability checker's interface, and the one place
//! the soak calls it ([`check_lock_history`], [`check_queue_history`]).
//!
//! Until `dlm_testkit::linearizable` lands, this module mirrors its types and
//! reports every history as not judged (`undecided`), so that the soak's
//! summary says plainly that the checker did not run.

use std::time::Duration;

/// The checker's name in reports while it is not available.
pub const CHECKER: &str = "linearizable (not available in this build)";

/// Which lock model a history is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockModel {
    /// Mutex, fair lock, election.
    Mutex,
    /// A semaphore of `permits`.
    Semaphore {
        /// Its capacity.
        permits: u32,
    },
    /// A read-write lock.
    ReadWrite,
}

/// How a lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Nobody else may hold it.
    Exclusive,
    /// Shared (read share, semaphore permit).
    Shared,
}

/// What a lock operation asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAction {
    /// Acquire.
    Acquire {
        /// Shared or exclusive.
        mode: Mode,
        /// The lease asked for.
        ttl: Duration,
    },
    /// Extend the lease.
    Extend {
        /// The new lease.
        ttl: Duration,
    },
    /// Release.
    Release,
}

/// How a lock operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockResult {
    /// The acquire was granted.
    Granted {
        /// Its fencing token.
        fence: Option<u64>,
    },
    /// The acquire was refused.
    Refused,
    /// The extend or release happened.
    Done,
    /// The extend or release was refused (not held).
    Failed,
    /// Unknown: it may or may not have happened.
    Unknown,
}

/// One lock operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOp {
    /// The recording process (its operations never overlap in time).
    pub process: usize,
    /// The lock's name.
    pub lock: String,
    /// The acquisition attempt this operation belongs to.
    pub lease: u64,
    /// What it asked.
    pub action: LockAction,
    /// How it ended.
    pub result: LockResult,
    /// When it was invoked.
    pub invoke: Duration,
    /// When it completed.
    pub complete: Duration,
}

/// What a queue operation asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueAction {
    /// Enqueue a task.
    Enqueue {
        /// Its id.
        task: String,
        /// Its dependencies.
        deps: Vec<String>,
        /// Its group.
        group: Option<String>,
    },
    /// Claim tasks.
    Claim {
        /// The lease asked for.
        lease: Duration,
    },
    /// Ack a lease.
    Ack {
        /// The task.
        task: String,
        /// The lease's fence.
        fence: u64,
    },
    /// Nack a lease.
    Nack {
        /// The task.
        task: String,
        /// The lease's fence.
        fence: u64,
    },
    /// Extend a lease.
    Extend {
        /// The task.
        task: String,
        /// The lease's fence.
        fence: u64,
        /// The new lease.
        lease: Duration,
    },
    /// Pause the queue.
    Pause,
    /// Resume it.
    Resume,
}

/// How a queue operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueResult {
    /// A claim leased this task.
    Leased {
        /// The task.
        task: String,
        /// The lease's fence.
        fence: u64,
    },
    /// A claim found nothing.
    Empty,
    /// It happened.
    Done,
    /// It was refused.
    Refused,
    /// Unknown: it may or may not have happened.
    Unknown,
}

/// One queue operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOp {
    /// The recording process.
    pub process: usize,
    /// What it asked.
    pub action: QueueAction,
    /// How it ended.
    pub result: QueueResult,
    /// When it was invoked.
    pub invoke: Duration,
    /// When it completed.
    pub complete: Duration,
}

/// The queue's configuration as the checker needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSpec {
    /// Group concurrency.
    pub group_limit: Option<u32>,
}

/// A checker's verdict.
#[derive(Debug, Clone, Default)]
pub struct Verdict {
    /// Which checker.
    pub checker: &'static str,
    /// Objects judged.
    pub objects: usize,
    /// Operations judged.
    pub operations: usize,
    /// What it found wrong.
    pub violations: Vec<String>,
    /// What it could not decide.
    pub undecided: Vec<String>,
}

impl Verdict {
    /// No violation.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Judge one lock kind's history (the one call site of the third-party
/// checker for locks).
pub fn check_lock_history(model: LockModel, ops: &[LockOp]) -> Verdict {
    let _ = model;
    not_available(ops.len())
}

/// Judge one queue's history (the one call site for queues).
pub fn check_queue_history(spec: &QueueSpec, ops: &[QueueOp]) -> Verdict {
    let _ = spec;
    not_available(ops.len())
}

fn not_available(operations: usize) -> Verdict {
    Verdict {
        checker: CHECKER,
        objects: 0,
        operations,
        violations: Vec::new(),
        undecided: vec!["the linearizability checker is not in this build".into()],
    }
}
