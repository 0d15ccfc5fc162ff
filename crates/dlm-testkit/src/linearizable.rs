//! The third-party checker: histories of lock and queue operations judged for
//! linearizability by [`todc-utils`](https://docs.rs/todc-utils/0.1.1)'s
//! Wing–Gong–Lowe checker ([`todc_utils::WGLChecker`]) against sequential
//! specifications of dlm's objects.
//!
//! dlm's other checkers ([`crate::history`]) were written next to the code
//! they check. This one only adds the *specifications* (what one lock or one
//! queue may do, one operation at a time); the search for an order of the
//! recorded operations that respects real time and the specification is
//! `todc-utils`'s, which nobody here wrote.
//!
//! **Time is part of the specification.** A lease ends by itself, so each
//! operation carries the interval in which it ran (invoked, completed), on
//! the workload's [`crate::history::Clock`]. A grant made in `[i, r]` with
//! a TTL `t` holds at least until `i + t - drift` and at most until
//! `r + t + drift` ([`drift`]): another exclusive grant that completed
//! before the first bound is a violation, an extension invoked after the
//! second one is a revival.
//!
//! **The lock specification** ([`check_locks`]): at most one exclusive
//! holder, or up to `permits` shared ones ([`LockModel::Semaphore`]), or
//! readers-or-one-writer ([`LockModel::ReadWrite`]); every grant's fence is
//! greater than every earlier grant's; a release or extension that
//! succeeded was made by the lease that held the lock, while its lease
//! could still be running. Refusals and failures are always allowed (they
//! are liveness, not safety); an operation whose outcome is unknown may or
//! may not have happened.
//!
//! **The queue specification** ([`check_queue`]), an at-least-once queue
//! with leases, checked on projections (each is a small object of its own,
//! which keeps the search small):
//! * per task: a task is leased only while waiting or after its previous
//!   lease may have run out, never again after the ack of its run (until
//!   it is enqueued again), an ack or nack succeeds only with the current
//!   lease's fence, so each run's ack is unique;
//! * per dependent: it is leased only after every dependency that was not
//!   complete when it was enqueued has been acked;
//! * per group: never more leases running than the limit;
//! * the whole queue: fences grow with every lease, and a paused queue
//!   leases nothing.
//!
//! ```
//! use std::time::Duration;
//! use dlm_testkit::linearizable::{check_locks, LockAction, LockModel, LockOp, LockResult, Mode};
//! let ms = Duration::from_millis;
//! let ttl = ms(1000);
//! let op = |lease, action, result, invoke, complete| LockOp {
//!     process: lease as usize, lock: "a".into(), lease, action, result,
//!     invoke: ms(invoke), complete: ms(complete),
//! };
//! let granted = |fence| LockResult::Granted { fence: Some(fence) };
//! let history = [
//!     op(1, LockAction::Acquire { mode: Mode::Exclusive, ttl }, granted(1), 0, 2),
//!     op(1, LockAction::Release, LockResult::Done, 5, 6),
//!     op(2, LockAction::Acquire { mode: Mode::Exclusive, ttl }, granted(2), 4, 8),
//! ];
//! assert!(check_locks(LockModel::Mutex, &history).ok());
//! // The same grants with the fences swapped: no order explains them.
//! let mut swapped = history.clone();
//! swapped[0].result = granted(2);
//! swapped[2].result = granted(1);
//! assert!(!check_locks(LockModel::Mutex, &swapped).ok());
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use crate::history::Clock;

use todc_utils::{Action, History as TodcHistory, Specification, WGLChecker};

/// Which checker judged: printed by `dlm check` and the soak.
pub const CHECKER: &str = "todc-utils 0.1.1 (Wing-Gong-Lowe linearizability checker)";

/// The most operations one object's history may have; a longer one is
/// reported as undecided (the search's memory grows with the square of the
/// length). Workloads keep objects small by using many lock names.
pub const MAX_OPS_PER_OBJECT: usize = 4_000;

/// How long the search for one object may take before it is reported as
/// undecided (the search is exponential in the worst case).
pub const TIME_PER_OBJECT: Duration = Duration::from_secs(20);

/// Histories up to this many calls and responses are searched on the
/// caller's thread (they take microseconds).
const INLINE_ACTIONS: usize = 512;

/// The margin for the server's and the client's clocks around a lease of
/// `ttl`: 1% of it plus 2 ms (Redis expires keys with a millisecond
/// resolution).
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// What a lock's specification allows at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockModel {
    /// One holder at a time: the mutex, the fair lock and an election.
    Mutex,
    /// Up to `permits` holders at a time.
    Semaphore {
        /// The capacity.
        permits: u32,
    },
    /// Any number of readers ([`Mode::Shared`]) or one writer
    /// ([`Mode::Exclusive`]).
    ReadWrite,
}

/// How a lease holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Alone (a mutex, fair lock, election, or a write lock).
    Exclusive,
    /// Beside others (a semaphore permit or a read lock).
    Shared,
}

/// What a lock operation asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockAction {
    /// Take the lock for `ttl`.
    Acquire {
        /// Exclusive or shared.
        mode: Mode,
        /// The lease asked for.
        ttl: Duration,
    },
    /// Extend the lease to `ttl` from now.
    Extend {
        /// The new lease.
        ttl: Duration,
    },
    /// Give the lock back.
    Release,
}

/// How a lock operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockResult {
    /// An acquisition was granted (with its fencing token, if it has one).
    Granted {
        /// The grant's fencing token.
        fence: Option<u64>,
    },
    /// An acquisition was refused (busy, no quorum, timed out waiting).
    Refused,
    /// An extension or release took effect.
    Done,
    /// An extension or release did not take effect (not held, refused).
    Failed,
    /// Unknown (an error or a timeout after the request may have been
    /// sent): it may or may not have happened.
    Unknown,
}

/// One lock operation, invoked and completed on one
/// [`crate::history::Clock`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOp {
    /// The task that made it (for reports).
    pub process: usize,
    /// The lock's name: each name is an object of its own.
    pub lock: String,
    /// The lease: an id per acquisition, the same on its extensions and
    /// its release.
    pub lease: u64,
    /// What it asked for.
    pub action: LockAction,
    /// How it ended.
    pub result: LockResult,
    /// When it was invoked.
    pub invoke: Duration,
    /// When it completed.
    pub complete: Duration,
}

/// What a queue operation asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueAction {
    /// Enqueue (or enqueue again) a task.
    Enqueue {
        /// Its id.
        task: String,
        /// The ids it runs after.
        deps: Vec<String>,
        /// Its group, if it has one.
        group: Option<String>,
    },
    /// Claim one task with a lease (a claim that returned k tasks is k
    /// operations by the same process with the same invocation time).
    Claim {
        /// The lease asked for.
        lease: Duration,
    },
    /// Acknowledge a run.
    Ack {
        /// The task.
        task: String,
        /// The lease's fence.
        fence: u64,
    },
    /// Give a run up (retried later or dead).
    Nack {
        /// The task.
        task: String,
        /// The lease's fence.
        fence: u64,
    },
    /// Extend a run's lease.
    Extend {
        /// The task.
        task: String,
        /// The lease's fence.
        fence: u64,
        /// The new lease, from now.
        lease: Duration,
    },
    /// The workload found the queue drained: nothing waiting, delayed or
    /// leased (e.g. its stats, after its workers stopped). Every task then
    /// had its run acked (or was given up by a nack): a task still waiting,
    /// or whose last lease certainly ended without an ack, was lost. Record
    /// it only where no task can have died by running out of attempts on
    /// expired leases.
    Drained,
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
    /// A claim found nothing to lease.
    Empty,
    /// It took effect.
    Done,
    /// It did not take effect (a stale fence, a refusal).
    Refused,
    /// Unknown: it may or may not have happened.
    Unknown,
}

/// One queue operation, invoked and completed on one
/// [`crate::history::Clock`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOp {
    /// The task (worker) that made it.
    pub process: usize,
    /// What it asked for.
    pub action: QueueAction,
    /// How it ended.
    pub result: QueueResult,
    /// When it was invoked.
    pub invoke: Duration,
    /// When it completed.
    pub complete: Duration,
}

/// What the queue's specification needs to know of its settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSpec {
    /// The most runs of one group at once, if the queue limits groups.
    pub group_limit: Option<u32>,
}

/// The checker's verdict on a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Which checker judged ([`CHECKER`]).
    pub checker: &'static str,
    /// How many objects (lock names; queue projections) were judged.
    pub objects: usize,
    /// How many operations the history had.
    pub operations: usize,
    /// The objects whose history no order explains, each with why.
    pub violations: Vec<String>,
    /// The objects the checker could not decide (too long, out of time).
    pub undecided: Vec<String>,
}

impl Verdict {
    /// Whether no violation was found.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    fn empty(operations: usize) -> Self {
        Verdict {
            checker: CHECKER,
            objects: 0,
            operations,
            violations: Vec::new(),
            undecided: Vec::new(),
        }
    }
}

/// Microseconds, with the unknown end of an operation as "never".
type Micros = u64;
const NEVER: Micros = u64::MAX;

fn micros(d: Duration) -> Micros {
    u64::try_from(d.as_micros()).unwrap_or(NEVER - 1)
}

/// The time window of one operation, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    start: Micros,
    end: Micros,
}

impl Window {
    /// The earliest end of a lease of `ttl` granted in this window.
    fn lease_min_end(self, ttl: Duration) -> Micros {
        let less = micros(drift(ttl));
        self.start.saturating_add(micros(ttl)).saturating_sub(less)
    }

    /// The latest end of a lease of `ttl` granted in this window.
    fn lease_max_end(self, ttl: Duration) -> Micros {
        if self.end == NEVER {
            return NEVER;
        }
        self.end
            .saturating_add(micros(ttl))
            .saturating_add(micros(drift(ttl)))
    }
}

/// Runs `todc-utils`' checker on one object's operations (each with its
/// window) within [`TIME_PER_OBJECT`]: `Some(verdict)`, or `None` when
/// the search ran out of time.
fn linearizable<S>(ops: Vec<(Window, S::Operation)>) -> Option<bool>
where
    S: Specification + 'static,
    S::Operation: Send + 'static,
{
    if ops.is_empty() {
        return Some(true);
    }
    // Calls at their invocation, responses at their completion; a call
    // before a response at the same instant (the two may overlap). Each
    // operation is a process of its own, so an operation whose reply never
    // came cannot be paired with a later one.
    let mut events: Vec<(Micros, u8, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, (w, _)) in ops.iter().enumerate() {
        events.push((w.start, 0, i));
        events.push((w.end.max(w.start), 1, i));
    }
    events.sort_unstable();
    let mut actions = Vec::with_capacity(events.len());
    for (_, kind, i) in events {
        let op = ops[i].1.clone();
        actions.push((
            i,
            if kind == 0 {
                Action::Call(op)
            } else {
                Action::Response(op)
            },
        ));
    }
    if actions.len() <= INLINE_ACTIONS {
        return Some(WGLChecker::<S>::is_linearizable(TodcHistory::from_actions(
            actions,
        )));
    }
    let (tx, rx) = mpsc::channel();
    // The search runs on its own thread so that a caller can give up on it
    // (it then runs to its end in the background).
    std::thread::Builder::new()
        .name("linearizability".into())
        .spawn(move || {
            let history = TodcHistory::from_actions(actions);
            let _ = tx.send(WGLChecker::<S>::is_linearizable(history));
        })
        .ok()?;
    rx.recv_timeout(TIME_PER_OBJECT).ok()
}

fn judge<S>(verdict: &mut Verdict, name: String, ops: Vec<(Window, S::Operation)>)
where
    S: Specification + 'static,
    S::Operation: Send + 'static,
{
    verdict.objects += 1;
    let n = ops.len();
    if n > MAX_OPS_PER_OBJECT {
        verdict.undecided.push(format!(
            "{name}: {n} operations, more than the {MAX_OPS_PER_OBJECT} one object may have"
        ));
        return;
    }
    let span = ops
        .iter()
        .map(|(w, _)| w.start)
        .min()
        .zip(ops.iter().map(|(w, _)| w.end).filter(|&e| e != NEVER).max());
    match linearizable::<S>(ops) {
        Some(true) => {}
        Some(false) => {
            let during = match span {
                Some((a, b)) => format!(
                    " (between {:.3}s and {:.3}s)",
                    a as f64 / 1e6,
                    b as f64 / 1e6
                ),
                None => String::new(),
            };
            verdict.violations.push(format!(
                "{name}: no order of its {n} operations{during} satisfies the specification"
            ));
        }
        None => verdict.undecided.push(format!(
            "{name}: the search for an order of its {n} operations took longer than {}s",
            TIME_PER_OBJECT.as_secs()
        )),
    }
}

/// A shared, append-only log of operations on one [`Clock`], for workloads
/// whose tasks record what they did for [`check_locks`] or [`check_queue`].
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::linearizable::{LockAction, LockResult, Mode, OpLog};
/// let log = OpLog::new(dlm_testkit::history::Clock::new());
/// let lease = log.next_id();
/// let t = log.clock().now();
/// let acquire = LockAction::Acquire { mode: Mode::Exclusive, ttl: Duration::from_secs(1) };
/// log.lock(0, "a", lease, acquire, t, LockResult::Granted { fence: Some(1) });
/// assert_eq!(log.ops().len(), 1);
/// ```
#[derive(Debug, Default)]
pub struct OpLog<T> {
    clock: Clock,
    next: AtomicU64,
    ops: Mutex<Vec<T>>,
    /// Operations invoked and not completed yet (their task may be killed
    /// before they do: they count as unknown).
    pending: Mutex<HashMap<u64, T>>,
}

/// An operation [`OpLog::begin_lock`] or [`OpLog::begin_queue`] recorded
/// as invoked; finish it with [`OpLog::end_lock`] or [`OpLog::end_queue`].
#[derive(Debug)]
#[must_use = "an operation that is never ended counts as unknown"]
pub struct Pending(u64);

impl<T: Clone> OpLog<T> {
    /// An empty log on `clock`.
    pub fn new(clock: Clock) -> Self {
        OpLog {
            clock,
            next: AtomicU64::new(1),
            ops: Mutex::new(Vec::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The clock the log's times are on.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// A fresh id (for a lease), unique in this log.
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Appends `op`.
    pub fn push(&self, op: T) {
        self.ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(op);
    }

    /// Every operation so far, those not completed yet as unknown.
    pub fn ops(&self) -> Vec<T> {
        let mut ops = self
            .ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        ops.extend(
            self.pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .values()
                .cloned(),
        );
        ops
    }

    fn begin(&self, op: T) -> Pending {
        let id = self.next_id();
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, op);
        Pending(id)
    }

    fn end(&self, pending: Pending, finish: impl FnOnce(&mut T)) {
        let op = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&pending.0);
        if let Some(mut op) = op {
            finish(&mut op);
            self.push(op);
        }
    }

    /// Removes and returns every operation so far (for a workload judged
    /// window by window).
    pub fn take(&self) -> Vec<T> {
        std::mem::take(
            &mut *self
                .ops
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl OpLog<LockOp> {
    /// Records a lock operation invoked at `invoke` that completes now.
    pub fn lock(
        &self,
        process: usize,
        lock: &str,
        lease: u64,
        action: LockAction,
        invoke: Duration,
        result: LockResult,
    ) {
        let complete = self.clock.now();
        self.push(LockOp {
            process,
            lock: lock.to_string(),
            lease,
            action,
            result,
            invoke,
            complete,
        });
    }

    /// Records a lock operation invoked now; it counts as unknown until
    /// [`OpLog::end_lock`] (also when the task making it is killed).
    pub fn begin_lock(
        &self,
        process: usize,
        lock: &str,
        lease: u64,
        action: LockAction,
    ) -> Pending {
        let invoke = self.clock.now();
        self.begin(LockOp {
            process,
            lock: lock.to_string(),
            lease,
            action,
            result: LockResult::Unknown,
            invoke,
            complete: invoke,
        })
    }

    /// Completes a lock operation now, with its result.
    pub fn end_lock(&self, pending: Pending, result: LockResult) {
        let complete = self.clock.now();
        self.end(pending, |op| {
            op.result = result;
            op.complete = complete;
        });
    }
}

impl OpLog<QueueOp> {
    /// Records a queue operation invoked at `invoke` that completes now.
    pub fn queue(
        &self,
        process: usize,
        action: QueueAction,
        invoke: Duration,
        result: QueueResult,
    ) {
        let complete = self.clock.now();
        self.push(QueueOp {
            process,
            action,
            result,
            invoke,
            complete,
        });
    }

    /// Records a queue operation invoked now; it counts as unknown until
    /// [`OpLog::end_queue`] (also when the worker making it is killed).
    pub fn begin_queue(&self, process: usize, action: QueueAction) -> Pending {
        let invoke = self.clock.now();
        self.begin(QueueOp {
            process,
            action,
            result: QueueResult::Unknown,
            invoke,
            complete: invoke,
        })
    }

    /// Completes a queue operation now, with its result.
    pub fn end_queue(&self, pending: Pending, result: QueueResult) {
        let complete = self.clock.now();
        self.end(pending, |op| {
            op.result = result;
            op.complete = complete;
        });
    }
}

// ---------------------------------------------------------------- locks --

/// A lease the lock's specification believes may hold it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Holder {
    lease: u64,
    mode: Mode,
    /// Before this it certainly holds (unless released).
    min_end: Micros,
    /// After this it certainly does not.
    max_end: Micros,
    /// Whether its acquisition's outcome is unknown: it then blocks nobody,
    /// but its own extension or release may succeed.
    maybe: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct LockState {
    /// Sorted by lease.
    holders: Vec<Holder>,
    last_fence: u64,
}

impl LockState {
    fn holder(&self, lease: u64) -> Option<&Holder> {
        self.holders.iter().find(|h| h.lease == lease)
    }

    fn holder_mut(&mut self, lease: u64) -> Option<&mut Holder> {
        self.holders.iter_mut().find(|h| h.lease == lease)
    }

    fn put(&mut self, h: Holder) {
        self.holders.retain(|o| o.lease != h.lease);
        self.holders.push(h);
        self.holders.sort_by_key(|h| h.lease);
    }
}

#[derive(Debug, Clone)]
struct LinLockOp {
    model: LockModel,
    lease: u64,
    action: LockAction,
    result: LockResult,
    window: Window,
}

struct LockSpec;

impl Specification for LockSpec {
    type State = LockState;
    type Operation = LinLockOp;

    fn init() -> LockState {
        LockState::default()
    }

    fn apply(op: &LinLockOp, state: &LockState) -> (bool, LockState) {
        let mut next = state.clone();
        let ok = lock_step(op, &mut next);
        if ok {
            (true, next)
        } else {
            (false, state.clone())
        }
    }
}

/// Applies `op` to `s`; false when the specification forbids it.
fn lock_step(op: &LinLockOp, s: &mut LockState) -> bool {
    let w = op.window;
    match (op.action, op.result) {
        (LockAction::Acquire { mode, ttl }, LockResult::Granted { fence }) => {
            // The others that certainly still hold at every instant the
            // grant could have happened in (they hold until `min_end`).
            let blocking = |h: &Holder| h.lease != op.lease && !h.maybe && h.min_end > w.end;
            let alone = match (op.model, mode) {
                (_, Mode::Exclusive) => true,
                (LockModel::ReadWrite, Mode::Shared) => false,
                (LockModel::Semaphore { .. }, Mode::Shared) | (LockModel::Mutex, Mode::Shared) => {
                    false
                }
            };
            if alone {
                if s.holders.iter().any(blocking) {
                    return false;
                }
                // Everybody else is gone by now: a later success of theirs
                // would be a revival.
                s.holders.retain(|h| h.lease == op.lease);
            } else {
                match op.model {
                    LockModel::ReadWrite => {
                        if s.holders
                            .iter()
                            .any(|h| h.mode == Mode::Exclusive && blocking(h))
                        {
                            return false;
                        }
                        s.holders
                            .retain(|h| h.mode == Mode::Shared || h.lease == op.lease);
                    }
                    LockModel::Semaphore { permits } => {
                        let others = s.holders.iter().filter(|h| blocking(h)).count();
                        if others >= permits as usize {
                            return false;
                        }
                    }
                    LockModel::Mutex => {
                        if s.holders.iter().any(blocking) {
                            return false;
                        }
                        s.holders.retain(|h| h.lease == op.lease);
                    }
                }
            }
            if let Some(f) = fence {
                if f <= s.last_fence {
                    return false;
                }
                s.last_fence = f;
            }
            s.put(Holder {
                lease: op.lease,
                mode,
                min_end: w.lease_min_end(ttl),
                max_end: w.lease_max_end(ttl),
                maybe: false,
            });
            true
        }
        (LockAction::Acquire { mode, ttl }, LockResult::Unknown) => {
            // Perhaps granted: the lease's own extension or release may
            // then succeed; it blocks nobody, since perhaps it was not.
            if s.holder(op.lease).is_none() {
                s.put(Holder {
                    lease: op.lease,
                    mode,
                    min_end: w.lease_min_end(ttl),
                    max_end: NEVER,
                    maybe: true,
                });
            }
            true
        }
        (LockAction::Acquire { .. }, _) => true,
        (LockAction::Extend { ttl }, LockResult::Done) => match s.holder_mut(op.lease) {
            // It succeeded: the lease still held at some instant of the
            // call, so it had not certainly ended before the call began.
            Some(h) if w.start < h.max_end => {
                h.min_end = h.min_end.max(w.lease_min_end(ttl));
                h.max_end = h.max_end.max(w.lease_max_end(ttl));
                h.maybe = false;
                true
            }
            _ => false,
        },
        (LockAction::Extend { .. }, LockResult::Unknown) => {
            // It may land late: the lease may be alive for ever after.
            if let Some(h) = s.holder_mut(op.lease) {
                h.max_end = NEVER;
            }
            true
        }
        (LockAction::Release, LockResult::Done) => match s.holder(op.lease) {
            Some(h) if w.start < h.max_end => {
                s.holders.retain(|h| h.lease != op.lease);
                true
            }
            _ => false,
        },
        // A release that failed or whose outcome is unknown may have let
        // the lock go as early as its call.
        (LockAction::Release, _) | (LockAction::Extend { .. }, _) => {
            if op.action == LockAction::Release
                && let Some(h) = s.holder_mut(op.lease)
            {
                h.min_end = h.min_end.min(w.start);
            }
            true
        }
    }
}

/// Judges a history of one kind of lock (any number of lock names, each an
/// object of its own) against the lock specification of `model`.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::linearizable::{check_locks, LockAction, LockModel, LockOp, LockResult, Mode};
/// let ms = Duration::from_millis;
/// let acquire = LockAction::Acquire { mode: Mode::Shared, ttl: ms(500) };
/// let op = |lease, invoke| LockOp {
///     process: lease as usize, lock: "pool".into(), lease, action: acquire,
///     result: LockResult::Granted { fence: None }, invoke: ms(invoke), complete: ms(invoke + 1),
/// };
/// let three = [op(1, 0), op(2, 1), op(3, 2)];
/// assert!(check_locks(LockModel::Semaphore { permits: 3 }, &three).ok());
/// assert!(!check_locks(LockModel::Semaphore { permits: 2 }, &three).ok());
/// ```
pub fn check_locks(model: LockModel, ops: &[LockOp]) -> Verdict {
    let mut verdict = Verdict::empty(ops.len());
    let mut by_lock: BTreeMap<&str, Vec<(Window, LinLockOp)>> = BTreeMap::new();
    for op in ops {
        let window = window_of(op.invoke, op.complete);
        by_lock.entry(op.lock.as_str()).or_default().push((
            window,
            LinLockOp {
                model,
                lease: op.lease,
                action: op.action,
                result: op.result,
                window,
            },
        ));
    }
    for (lock, ops) in by_lock {
        judge::<LockSpec>(&mut verdict, format!("lock {lock:?}"), ops);
    }
    verdict
}

/// An operation's window, also of one whose outcome is unknown: what it
/// may have done is modelled so that it does not depend on when it took
/// effect (a lease it may have taken blocks nobody; a release it may have
/// made lets the lock go as early as its call; an extension it may have
/// made keeps its lease possibly alive for ever), so it needs no window
/// that stays open for ever, which would make it concurrent with every
/// later operation and the search exponential in their number.
fn window_of(invoke: Duration, complete: Duration) -> Window {
    let start = micros(invoke);
    Window {
        start,
        end: micros(complete).max(start),
    }
}

// ---------------------------------------------------------------- queue --

/// Where a task stands in the queue's specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Status {
    /// Never enqueued (in this history).
    Absent,
    /// Waiting to be leased.
    Waiting,
    /// Given up by a nack: waiting for a retry, or dead.
    Retrying,
    /// Leased under `fence`.
    Leased {
        fence: u64,
        min_end: Micros,
        max_end: Micros,
    },
    /// Its run was acked.
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TaskState {
    status: Status,
    /// The highest fence it was leased under.
    fence: u64,
    /// Enqueued again while leased: waiting again once the run settles.
    replaced: bool,
}

const FRESH: TaskState = TaskState {
    status: Status::Absent,
    fence: 0,
    replaced: false,
};

/// The state of one projection: its tasks (by index), the dependencies
/// each dependent still waits for, the group's running leases, and the
/// queue's pause and highest fence.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct QueueState {
    tasks: Vec<(u32, TaskState)>,
    pending: Vec<(u32, Vec<u32>)>,
    running: Vec<(u32, u64, Micros)>,
    paused: bool,
    last_fence: u64,
}

impl QueueState {
    fn task(&self, t: u32) -> TaskState {
        self.tasks
            .iter()
            .find(|(i, _)| *i == t)
            .map_or(FRESH, |(_, s)| *s)
    }

    fn set(&mut self, t: u32, s: TaskState) {
        match self.tasks.iter_mut().find(|(i, _)| *i == t) {
            Some(e) => e.1 = s,
            None => {
                self.tasks.push((t, s));
                self.tasks.sort_by_key(|(i, _)| *i);
            }
        }
    }
}

/// What one projection judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Projection {
    /// One task's runs (and a dependent's dependencies).
    Task,
    /// One group's running leases, up to `limit`.
    Group(u32),
    /// The queue's fences and pause.
    Queue,
}

#[derive(Debug, Clone)]
enum QAct {
    Enqueue {
        task: u32,
        deps: Vec<u32>,
    },
    Lease {
        task: u32,
        fence: u64,
        lease: Duration,
    },
    /// The tasks one claim leased at once (to the group and queue
    /// projections; each task's projection sees its own `Lease`).
    Leases(Vec<(u32, u64, Duration)>),
    Ack {
        task: u32,
        fence: u64,
    },
    Nack {
        task: u32,
        fence: u64,
    },
    Extend {
        task: u32,
        fence: u64,
        lease: Duration,
    },
    Drained,
    Pause,
    Resume,
}

#[derive(Debug, Clone)]
struct LinQueueOp {
    projection: Projection,
    act: QAct,
    /// Done (true), refused (false) or unknown (None).
    outcome: Option<bool>,
    window: Window,
}

struct QueueObject;

impl Specification for QueueObject {
    type State = QueueState;
    type Operation = LinQueueOp;

    fn init() -> QueueState {
        QueueState::default()
    }

    fn apply(op: &LinQueueOp, state: &QueueState) -> (bool, QueueState) {
        let mut next = state.clone();
        let ok = match op.projection {
            Projection::Task => task_step(op, &mut next),
            Projection::Group(limit) => group_step(op, limit, &mut next),
            Projection::Queue => queue_step(op, &mut next),
        };
        if ok {
            (true, next)
        } else {
            (false, state.clone())
        }
    }
}

fn task_step(op: &LinQueueOp, s: &mut QueueState) -> bool {
    let w = op.window;
    match (&op.act, op.outcome) {
        (QAct::Leases(leases), _) => leases.iter().all(|&(task, fence, lease)| {
            let one = LinQueueOp {
                act: QAct::Lease { task, fence, lease },
                ..op.clone()
            };
            task_step(&one, s)
        }),
        (QAct::Enqueue { task, deps }, Some(true) | None) => {
            let mut t = s.task(*task);
            match t.status {
                Status::Absent | Status::Done => {
                    t.status = Status::Waiting;
                    // The dependencies it waits for: those not complete now.
                    let waits: Vec<u32> = deps
                        .iter()
                        .copied()
                        .filter(|d| s.task(*d).status != Status::Done)
                        .collect();
                    s.pending.retain(|(d, _)| d != task);
                    if !waits.is_empty() {
                        s.pending.push((*task, waits));
                        s.pending.sort();
                    }
                }
                Status::Leased { .. } => t.replaced = true,
                Status::Waiting | Status::Retrying => {}
            }
            s.set(*task, t);
            true
        }
        (QAct::Lease { task, fence, lease }, _) => {
            let mut t = s.task(*task);
            let may_lease = match t.status {
                Status::Waiting | Status::Retrying => true,
                // Its previous lease may have run out without an ack.
                Status::Leased { min_end, .. } => min_end <= w.end,
                // Absent: enqueued outside this history; Done: acked.
                Status::Absent => t.fence == 0,
                Status::Done => false,
            };
            let deps_done = s.pending.iter().all(|(d, _)| d != task);
            if !may_lease || !deps_done || *fence <= t.fence {
                return false;
            }
            t.status = Status::Leased {
                fence: *fence,
                min_end: w.lease_min_end(*lease),
                max_end: w.lease_max_end(*lease),
            };
            t.fence = *fence;
            s.set(*task, t);
            true
        }
        (QAct::Ack { task, fence }, outcome @ (Some(true) | None))
        | (QAct::Nack { task, fence }, outcome @ Some(true)) => {
            let mut t = s.task(*task);
            match t.status {
                Status::Leased { fence: f, .. } if f == *fence => {}
                // An ack whose outcome is unknown (its reply lost), placed
                // where its lease is no longer the current one, failed.
                _ if outcome.is_none() => return true,
                _ => return false,
            }
            // Placed while its lease is current, an unknown ack took effect
            // (its window stays open in the task's projection, so the
            // search may also place it after a later lease, where it failed).
            let acked = matches!(op.act, QAct::Ack { .. });
            t.status = if !acked {
                Status::Retrying
            } else if t.replaced {
                Status::Waiting
            } else {
                Status::Done
            };
            t.replaced = false;
            s.set(*task, t);
            if acked {
                for (_, waits) in s.pending.iter_mut() {
                    waits.retain(|d| d != task);
                }
                s.pending.retain(|(_, waits)| !waits.is_empty());
            }
            true
        }
        (QAct::Extend { task, fence, lease }, Some(true)) => {
            let mut t = s.task(*task);
            match &mut t.status {
                Status::Leased {
                    fence: f,
                    min_end,
                    max_end,
                } if *f == *fence => {
                    *min_end = (*min_end).max(w.lease_min_end(*lease));
                    *max_end = (*max_end).max(w.lease_max_end(*lease));
                }
                _ => return false,
            }
            s.set(*task, t);
            true
        }
        // A dependent still waiting for a dependency (that may have died)
        // may have died with it.
        (QAct::Drained, Some(true)) => s.tasks.iter().all(|(i, t)| match t.status {
            Status::Waiting => s.pending.iter().any(|(d, _)| d == i),
            Status::Leased { max_end, .. } => w.start <= max_end,
            Status::Absent | Status::Retrying | Status::Done => true,
        }),
        // A nack whose outcome is unknown may have ended the lease at once.
        (QAct::Nack { task, fence }, None) => {
            let mut t = s.task(*task);
            if let Status::Leased {
                fence: f, min_end, ..
            } = &mut t.status
                && *f == *fence
            {
                *min_end = (*min_end).min(w.start);
            }
            s.set(*task, t);
            true
        }
        _ => true,
    }
}

fn group_step(op: &LinQueueOp, limit: u32, s: &mut QueueState) -> bool {
    let w = op.window;
    match (&op.act, op.outcome) {
        (QAct::Leases(leases), _) => leases.iter().all(|&(task, fence, lease)| {
            let one = LinQueueOp {
                act: QAct::Lease { task, fence, lease },
                ..op.clone()
            };
            group_step(&one, limit, s)
        }),
        (QAct::Lease { task, fence, lease }, _) => {
            // Runs of other tasks certainly still running at every instant
            // the lease could have been taken in.
            let others = s
                .running
                .iter()
                .filter(|(t, _, min_end)| t != task && *min_end > w.end)
                .count();
            if others >= limit as usize {
                return false;
            }
            s.running.retain(|(t, _, _)| t != task);
            s.running.push((*task, *fence, w.lease_min_end(*lease)));
            s.running.sort();
            true
        }
        (QAct::Ack { task, fence }, Some(true)) | (QAct::Nack { task, fence }, Some(true)) => {
            s.running.retain(|(t, f, _)| !(t == task && f == fence));
            true
        }
        (QAct::Ack { task, fence }, None) | (QAct::Nack { task, fence }, None) => {
            for (t, f, min_end) in s.running.iter_mut() {
                if t == task && f == fence {
                    *min_end = (*min_end).min(w.start);
                }
            }
            true
        }
        (QAct::Extend { task, fence, lease }, Some(true)) => {
            for (t, f, min_end) in s.running.iter_mut() {
                if t == task && f == fence {
                    *min_end = (*min_end).max(w.lease_min_end(*lease));
                }
            }
            true
        }
        _ => true,
    }
}

fn queue_step(op: &LinQueueOp, s: &mut QueueState) -> bool {
    match (&op.act, op.outcome) {
        (QAct::Leases(leases), _) => {
            let mut fences: Vec<u64> = leases.iter().map(|l| l.1).collect();
            fences.sort_unstable();
            if s.paused || fences.first().is_some_and(|&f| f <= s.last_fence) {
                return false;
            }
            s.last_fence = fences.last().copied().unwrap_or(s.last_fence);
            true
        }
        (QAct::Lease { fence, .. }, _) => {
            if s.paused || *fence <= s.last_fence {
                return false;
            }
            s.last_fence = *fence;
            true
        }
        (QAct::Pause, Some(true)) => {
            s.paused = true;
            true
        }
        (QAct::Resume, Some(true)) => {
            s.paused = false;
            true
        }
        _ => true,
    }
}

/// Judges a history of one queue against the queue's specification (see
/// the module's documentation), projection by projection.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::linearizable::{check_queue, QueueAction, QueueOp, QueueResult, QueueSpec};
/// let ms = Duration::from_millis;
/// let op = |action, result, invoke| QueueOp {
///     process: 1, action, result, invoke: ms(invoke), complete: ms(invoke + 1),
/// };
/// let enqueue = QueueAction::Enqueue { task: "t".into(), deps: vec![], group: None };
/// let claim = QueueAction::Claim { lease: ms(10_000) };
/// let leased = QueueResult::Leased { task: "t".into(), fence: 7 };
/// let ack = QueueAction::Ack { task: "t".into(), fence: 7 };
/// let once = vec![
///     op(enqueue, QueueResult::Done, 0),
///     op(claim, leased, 2),
///     op(ack.clone(), QueueResult::Done, 4),
/// ];
/// assert!(check_queue(&QueueSpec::default(), &once).ok());
/// let mut twice = once.clone();
/// twice.push(op(ack, QueueResult::Done, 6)); // a doubled ack
/// assert!(!check_queue(&QueueSpec::default(), &twice).ok());
/// ```
pub fn check_queue(spec: &QueueSpec, ops: &[QueueOp]) -> Verdict {
    let mut verdict = Verdict::empty(ops.len());
    let mut tasks = Interner::default();
    let mut group_of: HashMap<u32, &str> = HashMap::new();
    let mut deps_of: HashMap<u32, BTreeSet<u32>> = HashMap::new();
    let mut converted: Vec<(Window, QAct, Option<bool>)> = Vec::new();
    // The leases of one claim (same process, invoked at the same instant),
    // by their first entry in `converted`.
    let mut batches: HashMap<(usize, Duration), usize> = HashMap::new();
    for op in ops {
        let outcome = match op.result {
            QueueResult::Leased { .. } | QueueResult::Done => Some(true),
            QueueResult::Empty | QueueResult::Refused => Some(false),
            QueueResult::Unknown => None,
        };
        let window = window_of(op.invoke, op.complete);
        let act = match (&op.action, &op.result) {
            (QueueAction::Enqueue { task, deps, group }, _) => {
                let t = tasks.id(task);
                let deps: Vec<u32> = deps.iter().map(|d| tasks.id(d)).collect();
                if let Some(g) = group {
                    group_of.insert(t, g);
                }
                deps_of.entry(t).or_default().extend(deps.iter().copied());
                QAct::Enqueue { task: t, deps }
            }
            (QueueAction::Claim { lease }, QueueResult::Leased { task, fence }) => {
                let one = (tasks.id(task), *fence, *lease);
                let key = (op.process, op.invoke);
                if let Some(&i) = batches.get(&key)
                    && let QAct::Leases(batch) = &mut converted[i].1
                {
                    batch.push(one);
                    continue;
                }
                batches.insert(key, converted.len());
                QAct::Leases(vec![one])
            }
            // An empty claim, or one whose reply was lost, names no task.
            (QueueAction::Claim { .. }, _) => continue,
            (QueueAction::Ack { task, fence }, _) => QAct::Ack {
                task: tasks.id(task),
                fence: *fence,
            },
            (QueueAction::Nack { task, fence }, _) => QAct::Nack {
                task: tasks.id(task),
                fence: *fence,
            },
            (QueueAction::Extend { task, fence, lease }, _) => QAct::Extend {
                task: tasks.id(task),
                fence: *fence,
                lease: *lease,
            },
            (QueueAction::Drained, _) => QAct::Drained,
            (QueueAction::Pause, _) => QAct::Pause,
            (QueueAction::Resume, _) => QAct::Resume,
        };
        converted.push((window, act, outcome));
    }
    // Each projection keeps the operations on its tasks (`keep`); of a
    // claim's leases, those of its tasks.
    let project = |projection: Projection, keep: &dyn Fn(&QAct) -> bool| {
        let mut out = Vec::new();
        for (window, act, outcome) in &converted {
            let act = match act {
                QAct::Leases(batch) => {
                    let mine: Vec<(u32, u64, Duration)> = batch
                        .iter()
                        .copied()
                        .filter(|&(task, fence, lease)| keep(&QAct::Lease { task, fence, lease }))
                        .collect();
                    match (projection, mine.as_slice()) {
                        (_, []) => continue,
                        (Projection::Task, &[(task, fence, lease)]) => {
                            QAct::Lease { task, fence, lease }
                        }
                        _ => QAct::Leases(mine),
                    }
                }
                act if keep(act) => act.clone(),
                _ => continue,
            };
            // An ack whose outcome is unknown may or may not have taken
            // effect: in a task's projection its window stays open, so that
            // it can be placed where it did or after everything (where it
            // did not). Elsewhere its effect does not depend on when.
            let mut window = *window;
            if projection == Projection::Task
                && matches!(act, QAct::Ack { .. })
                && outcome.is_none()
            {
                window.end = NEVER;
            }
            let op = LinQueueOp {
                projection,
                act,
                outcome: *outcome,
                window,
            };
            out.push((window, op));
        }
        out
    };
    // Each task, with the dependencies it waits for.
    for t in 0..tasks.names.len() as u32 {
        let deps = deps_of.get(&t).cloned().unwrap_or_default();
        let mut ops = project(Projection::Task, &|act| {
            matches!(act, QAct::Drained)
                || act_task(act).is_some_and(|x| x == t || deps.contains(&x))
        });
        // The dependencies' own dependencies are judged in their projections.
        for (_, op) in &mut ops {
            if let QAct::Enqueue { task, deps } = &mut op.act
                && *task != t
            {
                deps.clear();
            }
        }
        judge::<QueueObject>(
            &mut verdict,
            format!("task {:?}", tasks.names[t as usize]),
            ops,
        );
    }
    // Each group, under its limit.
    if let Some(limit) = spec.group_limit {
        let groups: BTreeSet<&str> = group_of.values().copied().collect();
        for g in groups {
            let ops = project(Projection::Group(limit), &|act| {
                act_task(act).is_some_and(|x| group_of.get(&x) == Some(&g))
            });
            judge::<QueueObject>(&mut verdict, format!("group {g:?}"), ops);
        }
    }
    // The queue: fences and pause.
    let ops = project(Projection::Queue, &|act| {
        matches!(act, QAct::Lease { .. } | QAct::Pause | QAct::Resume)
    });
    judge::<QueueObject>(&mut verdict, "the queue's fences and pause".into(), ops);
    verdict
}

/// [`check_queue`] for a queue spread over shards (dlm's sharded queue,
/// issue 35): each shard is a queue of its own with its own fences, so the
/// history is split by the shard of each operation's task (`shard_of`) and
/// each part judged on its own. A claim's leases go to their tasks' shards;
/// the queue-wide operations (drained, pause, resume) to every part. The
/// verdict adds the parts up; each violation names its shard.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::linearizable::{check_sharded_queue, QueueAction, QueueOp, QueueResult, QueueSpec};
/// let ms = Duration::from_millis;
/// let op = |action, result, invoke| QueueOp {
///     process: 1, action, result, invoke: ms(invoke), complete: ms(invoke + 1),
/// };
/// let enqueue = |t: &str| QueueAction::Enqueue { task: t.into(), deps: vec![], group: None };
/// let claim = QueueAction::Claim { lease: ms(10_000) };
/// let leased = |t: &str| QueueResult::Leased { task: t.into(), fence: 1 };
/// let ack = |t: &str| QueueAction::Ack { task: t.into(), fence: 1 };
/// // Two shards, each with its own fence counter: both hand out fence 1.
/// let h = vec![
///     op(enqueue("a"), QueueResult::Done, 0),
///     op(enqueue("b"), QueueResult::Done, 0),
///     op(claim.clone(), leased("a"), 2),
///     op(claim, leased("b"), 4),
///     op(ack("a"), QueueResult::Done, 6),
///     op(ack("b"), QueueResult::Done, 6),
/// ];
/// let shard = |t: &str| if t == "a" { 0 } else { 1 };
/// assert!(check_sharded_queue(&QueueSpec::default(), &h, shard).ok());
/// ```
pub fn check_sharded_queue(
    spec: &QueueSpec,
    ops: &[QueueOp],
    shard_of: impl Fn(&str) -> u16,
) -> Verdict {
    let task_of = |op: &QueueOp| -> Option<Option<String>> {
        match (&op.action, &op.result) {
            (QueueAction::Claim { .. }, QueueResult::Leased { task, .. }) => {
                Some(Some(task.clone()))
            }
            // An empty claim, or one whose reply was lost, names no task.
            (QueueAction::Claim { .. }, _) => None,
            (QueueAction::Enqueue { task, .. }, _)
            | (QueueAction::Ack { task, .. }, _)
            | (QueueAction::Nack { task, .. }, _)
            | (QueueAction::Extend { task, .. }, _) => Some(Some(task.clone())),
            (QueueAction::Drained | QueueAction::Pause | QueueAction::Resume, _) => Some(None),
        }
    };
    let shards: BTreeSet<u16> = ops
        .iter()
        .filter_map(|op| task_of(op).flatten())
        .map(|t| shard_of(&t))
        .collect();
    let mut parts: BTreeMap<u16, Vec<QueueOp>> = shards.iter().map(|&s| (s, Vec::new())).collect();
    for op in ops {
        match task_of(op) {
            None => {}
            Some(Some(task)) => {
                if let Some(part) = parts.get_mut(&shard_of(&task)) {
                    part.push(op.clone());
                }
            }
            Some(None) => {
                for part in parts.values_mut() {
                    part.push(op.clone());
                }
            }
        }
    }
    let mut verdict = Verdict::empty(ops.len());
    for (shard, part) in parts {
        let v = check_queue(spec, &part);
        verdict.objects += v.objects;
        verdict.violations.extend(
            v.violations
                .into_iter()
                .map(|x| format!("shard {shard}: {x}")),
        );
        verdict.undecided.extend(
            v.undecided
                .into_iter()
                .map(|x| format!("shard {shard}: {x}")),
        );
    }
    verdict
}

fn act_task(act: &QAct) -> Option<u32> {
    match act {
        QAct::Enqueue { task, .. }
        | QAct::Lease { task, .. }
        | QAct::Ack { task, .. }
        | QAct::Nack { task, .. }
        | QAct::Extend { task, .. } => Some(*task),
        QAct::Leases(_) | QAct::Drained | QAct::Pause | QAct::Resume => None,
    }
}

/// Task ids as small numbers.
#[derive(Default)]
struct Interner<'a> {
    ids: HashMap<&'a str, u32>,
    names: Vec<&'a str>,
}

impl<'a> Interner<'a> {
    fn id(&mut self, name: &'a str) -> u32 {
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        let i = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push(name);
        self.ids.insert(name, i);
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn lock_op(lease: u64, action: LockAction, result: LockResult, at: (u64, u64)) -> LockOp {
        LockOp {
            process: lease as usize,
            lock: "l".into(),
            lease,
            action,
            result,
            invoke: ms(at.0),
            complete: ms(at.1),
        }
    }

    fn acquire(mode: Mode) -> LockAction {
        LockAction::Acquire {
            mode,
            ttl: ms(1000),
        }
    }

    fn granted(fence: u64) -> LockResult {
        LockResult::Granted { fence: Some(fence) }
    }

    #[test]
    fn an_overlapping_exclusive_grant_is_a_violation_until_the_lease_may_have_ended() {
        let first = lock_op(1, acquire(Mode::Exclusive), granted(1), (0, 1));
        let early = lock_op(2, acquire(Mode::Exclusive), granted(2), (500, 501));
        assert!(!check_locks(LockModel::Mutex, &[first.clone(), early]).ok());
        // After the first lease's end (1 s - drift) the grant is fine.
        let late = lock_op(2, acquire(Mode::Exclusive), granted(2), (995, 996));
        assert!(check_locks(LockModel::Mutex, &[first, late]).ok());
    }

    #[test]
    fn a_release_or_extension_by_a_lease_that_ended_is_a_violation() {
        let a = lock_op(1, acquire(Mode::Exclusive), granted(1), (0, 1));
        let b = lock_op(2, acquire(Mode::Exclusive), granted(2), (1100, 1101));
        let b_rel = lock_op(2, LockAction::Release, LockResult::Done, (1102, 1103));
        let revive = lock_op(
            1,
            LockAction::Extend { ttl: ms(1000) },
            LockResult::Done,
            (1200, 1201),
        );
        let h = [a.clone(), b.clone(), b_rel.clone(), revive.clone()];
        assert!(!check_locks(LockModel::Mutex, &h).ok());
        let failed = LockOp {
            result: LockResult::Failed,
            ..revive
        };
        assert!(check_locks(LockModel::Mutex, &[a.clone(), b, b_rel, failed]).ok());
        // Past its lease's latest end, even with nobody else: no revival.
        let late = lock_op(1, LockAction::Release, LockResult::Done, (1100, 1101));
        assert!(!check_locks(LockModel::Mutex, &[a, late]).ok());
    }

    #[test]
    fn an_unknown_acquire_blocks_nobody_but_may_be_released() {
        let a = lock_op(1, acquire(Mode::Exclusive), LockResult::Unknown, (0, 1));
        let b = lock_op(2, acquire(Mode::Exclusive), granted(5), (10, 11));
        let a_rel = lock_op(1, LockAction::Release, LockResult::Done, (2, 3));
        assert!(check_locks(LockModel::Mutex, &[a.clone(), b.clone()]).ok());
        assert!(check_locks(LockModel::Mutex, &[a, a_rel, b]).ok());
    }

    #[test]
    fn readers_share_and_writers_do_not() {
        let r1 = lock_op(1, acquire(Mode::Shared), granted(1), (0, 1));
        let r2 = lock_op(2, acquire(Mode::Shared), granted(2), (2, 3));
        let w = lock_op(3, acquire(Mode::Exclusive), granted(3), (4, 5));
        assert!(check_locks(LockModel::ReadWrite, &[r1.clone(), r2.clone()]).ok());
        assert!(!check_locks(LockModel::ReadWrite, &[r1.clone(), r2.clone(), w.clone()]).ok());
        let rel = |l| lock_op(l, LockAction::Release, LockResult::Done, (3, 4));
        assert!(check_locks(LockModel::ReadWrite, &[r1, r2, rel(1), rel(2), w]).ok());
    }

    #[test]
    fn concurrent_grants_are_ordered_by_their_fences() {
        // Two overlapping calls: the one with the lower fence came first.
        let a = lock_op(1, acquire(Mode::Exclusive), granted(2), (0, 10));
        let a_rel = lock_op(1, LockAction::Release, LockResult::Done, (11, 12));
        let b = lock_op(2, acquire(Mode::Exclusive), granted(1), (0, 10));
        let b_rel = lock_op(2, LockAction::Release, LockResult::Done, (1, 2));
        // b (fence 1) released before a (fence 2) was granted: possible.
        assert!(check_locks(LockModel::Mutex, &[a, a_rel, b, b_rel]).ok());
    }

    fn q(action: QueueAction, result: QueueResult, at: u64) -> QueueOp {
        QueueOp {
            process: 0,
            action,
            result,
            invoke: ms(at),
            complete: ms(at + 1),
        }
    }

    fn enqueue(task: &str, deps: &[&str], group: Option<&str>) -> QueueAction {
        QueueAction::Enqueue {
            task: task.into(),
            deps: deps.iter().map(|d| d.to_string()).collect(),
            group: group.map(str::to_string),
        }
    }

    fn claim() -> QueueAction {
        QueueAction::Claim { lease: ms(1000) }
    }

    fn leased(task: &str, fence: u64) -> QueueResult {
        QueueResult::Leased {
            task: task.into(),
            fence,
        }
    }

    fn ack(task: &str, fence: u64) -> QueueAction {
        QueueAction::Ack {
            task: task.into(),
            fence,
        }
    }

    #[test]
    fn a_dependent_leased_before_its_dependency_was_acked_is_a_violation() {
        use QueueResult::Done;
        let good = vec![
            q(enqueue("a", &[], None), Done, 0),
            q(enqueue("b", &["a"], None), Done, 2),
            q(claim(), leased("a", 1), 4),
            q(ack("a", 1), Done, 6),
            q(claim(), leased("b", 2), 8),
            q(ack("b", 2), Done, 10),
        ];
        assert!(check_queue(&QueueSpec::default(), &good).ok());
        let mut early = good.clone();
        early[4].invoke = ms(5);
        early[4].complete = ms(5);
        early[3].invoke = ms(6);
        assert!(!check_queue(&QueueSpec::default(), &early).ok());
    }

    #[test]
    fn a_chain_of_dependencies_is_judged_link_by_link() {
        use QueueResult::Done;
        let chain = vec![
            q(enqueue("a", &[], None), Done, 0),
            q(enqueue("b", &["a"], None), Done, 2),
            q(claim(), leased("a", 1), 4),
            q(ack("a", 1), Done, 6),
            q(claim(), leased("b", 2), 8),
            q(ack("b", 2), Done, 10),
            q(enqueue("c", &["b"], None), Done, 12),
            q(claim(), leased("c", 3), 14),
        ];
        assert!(check_queue(&QueueSpec::default(), &chain).ok());
    }

    #[test]
    fn an_ack_of_unknown_outcome_may_or_may_not_have_taken_effect() {
        use QueueResult::{Done, Unknown};
        // a's ack lost its reply but took effect: b (after a) is leased.
        let history = vec![
            q(enqueue("a", &[], None), Done, 0),
            q(enqueue("b", &["a"], None), Done, 2),
            q(claim(), leased("a", 1), 4),
            q(ack("a", 1), Unknown, 6),
            q(claim(), leased("b", 2), 8),
        ];
        let v = check_queue(&QueueSpec::default(), &history);
        assert!(v.ok(), "{v:?}");
        // Or it did not: a's lease ran out and a is leased again, then acked.
        let mut again = history[..4].to_vec();
        again.push(q(claim(), leased("a", 3), 1500));
        again.push(q(ack("a", 3), Done, 1502));
        assert!(check_queue(&QueueSpec::default(), &again).ok());
        // Not both: b leased after the ack that a's later lease says failed.
        let mut both = again.clone();
        both.insert(4, q(claim(), leased("b", 2), 8));
        assert!(!check_queue(&QueueSpec::default(), &both).ok());
        // Leased again while its first lease surely ran: a violation.
        let mut early = history;
        early.push(q(claim(), leased("a", 4), 20));
        assert!(!check_queue(&QueueSpec::default(), &early).ok());
    }

    #[test]
    fn a_task_leased_twice_at_once_and_a_group_over_its_limit_are_violations() {
        use QueueResult::Done;
        let spec = QueueSpec {
            group_limit: Some(1),
        };
        let twice = vec![
            q(enqueue("x", &[], Some("g")), Done, 0),
            q(claim(), leased("x", 1), 2),
            q(claim(), leased("x", 2), 4),
        ];
        assert!(!check_queue(&spec, &twice).ok());
        let two_in_g = vec![
            q(enqueue("x", &[], Some("g")), Done, 0),
            q(enqueue("y", &[], Some("g")), Done, 0),
            q(claim(), leased("x", 1), 2),
            q(claim(), leased("y", 2), 4),
        ];
        let verdict = check_queue(&spec, &two_in_g);
        assert_eq!(verdict.violations.len(), 1, "{verdict:?}");
        assert!(verdict.violations[0].starts_with("group"), "{verdict:?}");
        assert!(
            check_queue(
                &QueueSpec {
                    group_limit: Some(2)
                },
                &two_in_g
            )
            .ok()
        );
    }

    #[test]
    fn a_paused_queue_leases_nothing_and_fences_grow() {
        use QueueResult::Done;
        let h = vec![
            q(enqueue("x", &[], None), Done, 0),
            q(enqueue("y", &[], None), Done, 0),
            q(QueueAction::Pause, Done, 2),
            q(claim(), leased("x", 1), 4),
        ];
        assert!(!check_queue(&QueueSpec::default(), &h).ok());
        let h = vec![
            q(enqueue("x", &[], None), Done, 0),
            q(enqueue("y", &[], None), Done, 0),
            q(claim(), leased("x", 5), 4),
            q(claim(), leased("y", 3), 6),
        ];
        assert!(!check_queue(&QueueSpec::default(), &h).ok());
    }

    #[test]
    fn a_task_still_waiting_or_unacked_when_the_queue_drained_was_lost() {
        use QueueResult::{Done, Refused};
        let drained = |at| q(QueueAction::Drained, Done, at);
        let never_run = vec![q(enqueue("x", &[], None), Done, 0), drained(10)];
        assert!(!check_queue(&QueueSpec::default(), &never_run).ok());
        let refused_ack = vec![
            q(enqueue("x", &[], None), Done, 0),
            q(claim(), leased("x", 1), 2),
            q(ack("x", 1), Refused, 4),
            drained(2000),
        ];
        assert!(!check_queue(&QueueSpec::default(), &refused_ack).ok());
        let acked = vec![
            q(enqueue("x", &[], None), Done, 0),
            q(claim(), leased("x", 1), 2),
            q(ack("x", 1), Done, 4),
            drained(2000),
        ];
        assert!(check_queue(&QueueSpec::default(), &acked).ok());
    }

    #[test]
    fn a_lease_that_ran_out_may_be_taken_again_and_its_ack_then_fails() {
        use QueueResult::{Done, Refused};
        let h = vec![
            q(enqueue("x", &[], None), Done, 0),
            q(claim(), leased("x", 1), 2),
            q(claim(), leased("x", 2), 1100),
            q(ack("x", 1), Refused, 1102),
            q(ack("x", 2), Done, 1104),
        ];
        assert!(check_queue(&QueueSpec::default(), &h).ok());
        let mut both = h.clone();
        both[3].result = Done;
        assert!(!check_queue(&QueueSpec::default(), &both).ok());
    }
}
