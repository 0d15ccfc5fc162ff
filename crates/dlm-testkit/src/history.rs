//! Histories of concurrent operations and the checkers that judge them, in
//! the manner of Jepsen's: a workload records what each process did and
//! believed, on one monotonic clock, and a checker looks for a violation in
//! the whole history rather than trusting counters that cannot see one.
//!
//! * [`overlapping_holds`]: no two holders' believed-held intervals of one
//!   lock overlap;
//! * [`fences_out_of_grant_order`]: each grant's fencing token is greater
//!   than every earlier grant's;
//! * [`FencedRegister`]: a register that rejects writes with a stale fencing
//!   token, and counts what it accepted and refused, so a run can show what
//!   the fence buys;
//! * [`dag_violations`]: every task of a dependency graph ran to the end,
//!   and none started before every one of its dependencies had finished
//!   the run that was acked;
//! * [`QueueHistory`]: every enqueued task handled to the end at least once,
//!   duplicates counted and each explained by an earlier lease that did not
//!   end in an ack, no lease acked twice.
//!
//! ```
//! use std::time::Duration;
//! use dlm_testkit::history::{Hold, overlapping_holds};
//! let ms = Duration::from_millis;
//! let holds = [
//!     Hold { holder: 1, lock: "a".into(), from: ms(0), until: ms(10), fence: Some(1) },
//!     Hold { holder: 2, lock: "a".into(), from: ms(10), until: ms(20), fence: Some(2) },
//! ];
//! assert!(overlapping_holds(&holds).is_empty());
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One monotonic clock shared by every process of a workload: times are
/// offsets from its start.
///
/// ```
/// let clock = dlm_testkit::history::Clock::new();
/// let t = clock.now();
/// assert!(clock.now() >= t);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    /// Time since the start.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The offset of `instant` (zero if before the start).
    pub fn at(&self, instant: Instant) -> Duration {
        instant.saturating_duration_since(self.start)
    }
}

/// How an operation ended, as the process saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It happened.
    Ok,
    /// It did not happen.
    Fail,
    /// Unknown (a timeout, a lost reply): it may or may not have happened.
    Unknown,
}

/// One operation: invoked and completed on the shared [`Clock`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op<T> {
    /// Which process did it.
    pub process: usize,
    /// When it was invoked.
    pub invoke: Duration,
    /// When it completed.
    pub complete: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// What it was about (the lock, the task, the value).
    pub value: T,
}

/// A history of operations recorded by concurrent processes.
///
/// ```
/// use dlm_testkit::history::{History, Outcome};
/// let history = History::new();
/// let t = history.clock().now();
/// history.record(1, t, Outcome::Ok, "acquire");
/// assert_eq!(history.ops().len(), 1);
/// ```
#[derive(Debug, Default)]
pub struct History<T> {
    clock: Clock,
    ops: Mutex<Vec<Op<T>>>,
}

impl<T: Clone> History<T> {
    /// An empty history with its clock starting now.
    pub fn new() -> Self {
        History {
            clock: Clock::new(),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// The clock every time in this history is measured on.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Record an operation invoked at `invoke` that completes now.
    pub fn record(&self, process: usize, invoke: Duration, outcome: Outcome, value: T) {
        let op = Op {
            process,
            invoke,
            complete: self.clock.now(),
            outcome,
            value,
        };
        self.ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(op);
    }

    /// Every operation so far, in the order they completed.
    pub fn ops(&self) -> Vec<Op<T>> {
        self.ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Every pair of holds of one lock whose fencing tokens do not grow in grant
/// order: the later grant (by `from`) carries a token not greater than an
/// earlier one's, so storage that trusts the fence would take the later
/// holder's writes for stale ones, or the stale holder's for fresh ones.
/// Holds without a token are skipped.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::history::{Hold, fences_out_of_grant_order};
/// let ms = Duration::from_millis;
/// let hold = |holder, from, fence| Hold {
///     holder, lock: "x".into(), from: ms(from), until: ms(from + 5), fence: Some(fence),
/// };
/// assert!(fences_out_of_grant_order(&[hold(1, 0, 7), hold(2, 10, 9)]).is_empty());
/// assert_eq!(fences_out_of_grant_order(&[hold(1, 0, 9), hold(2, 10, 7)]).len(), 1);
/// ```
pub fn fences_out_of_grant_order(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut by_lock: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for h in holds.iter().filter(|h| h.fence.is_some()) {
        by_lock.entry(h.lock.as_str()).or_default().push(h);
    }
    let mut found = Vec::new();
    for mut list in by_lock.into_values() {
        list.sort_by_key(|h| (h.from, h.until));
        let mut highest: Option<&Hold> = None;
        for h in list {
            match highest {
                Some(top) if h.fence <= top.fence => found.push((top.clone(), h.clone())),
                _ => highest = Some(h),
            }
        }
    }
    found
}

/// An interval in which a holder believed it held a lock: from the moment
/// its acquire returned the grant until it released it, learnt it was lost,
/// or its lease ran out by its own clock, whichever came first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The holder (a process or task id).
    pub holder: usize,
    /// The lock.
    pub lock: String,
    /// When the grant was in hand.
    pub from: Duration,
    /// When the holder stopped believing it held the lock.
    pub until: Duration,
    /// The fencing token of the grant, if any.
    pub fence: Option<u64>,
}

/// Every pair of holds of one lock by different holders whose intervals
/// overlap (a violation of mutual exclusion), earlier one first.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::history::{Hold, overlapping_holds};
/// let ms = Duration::from_millis;
/// let a = Hold { holder: 1, lock: "x".into(), from: ms(0), until: ms(15), fence: None };
/// let b = Hold { holder: 2, lock: "x".into(), from: ms(10), until: ms(20), fence: None };
/// assert_eq!(overlapping_holds(&[a, b]).len(), 1);
/// ```
pub fn overlapping_holds(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut by_lock: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for h in holds {
        by_lock.entry(h.lock.as_str()).or_default().push(h);
    }
    let mut found = Vec::new();
    for mut list in by_lock.into_values() {
        list.sort_by_key(|h| (h.from, h.until));
        // Sweep: the holds still open when each one starts.
        let mut open: Vec<&Hold> = Vec::new();
        for h in list {
            open.retain(|o| o.until > h.from);
            for o in &open {
                if o.holder != h.holder {
                    found.push(((*o).clone(), h.clone()));
                }
            }
            open.push(h);
        }
    }
    found
}

/// A holder's permits of a semaphore over one interval of its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermitHold {
    /// The holder (a process or task id).
    pub holder: usize,
    /// When the grant was in hand.
    pub from: Duration,
    /// When the holder stopped believing it held the permits.
    pub until: Duration,
    /// How many permits it held.
    pub permits: u32,
}

/// The most permits held at one instant over a history of semaphore holds,
/// and the first instant it was reached (each hold counts over
/// `[from, until)`; one ending as another starts is not an overlap). A
/// semaphore of capacity N is violated when this exceeds N.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::history::{PermitHold, peak_permits};
/// let ms = Duration::from_millis;
/// let h = |holder, from, until, permits| PermitHold { holder, from: ms(from), until: ms(until), permits };
/// assert_eq!(peak_permits(&[h(1, 0, 10, 1), h(2, 5, 20, 2), h(3, 10, 30, 1)]), (3, ms(5)));
/// assert_eq!(peak_permits(&[]), (0, ms(0)));
/// ```
pub fn peak_permits(holds: &[PermitHold]) -> (u32, Duration) {
    // Ends sort before starts at the same instant.
    let mut events: Vec<(Duration, bool, u32)> = holds
        .iter()
        .flat_map(|h| [(h.from, true, h.permits), (h.until, false, h.permits)])
        .collect();
    events.sort_by_key(|(t, start, _)| (*t, *start));
    let (mut now, mut peak, mut at) = (0u32, 0u32, Duration::ZERO);
    for (t, start, n) in events {
        if start {
            now += n;
            if now > peak {
                (peak, at) = (now, t);
            }
        } else {
            now = now.saturating_sub(n);
        }
    }
    (peak, at)
}

/// The holds that began while the semaphore was already full: at their
/// start, the permits held (theirs included) exceeded `capacity`. Empty for
/// a history that respects the capacity; [`peak_permits`] gives the worst.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::history::{PermitHold, over_capacity};
/// let ms = Duration::from_millis;
/// let h = |holder, from, until| PermitHold { holder, from: ms(from), until: ms(until), permits: 1 };
/// assert!(over_capacity(&[h(1, 0, 10), h(2, 10, 20)], 1).is_empty());
/// assert_eq!(over_capacity(&[h(1, 0, 10), h(2, 5, 20)], 1).len(), 1);
/// ```
pub fn over_capacity(holds: &[PermitHold], capacity: u32) -> Vec<PermitHold> {
    let mut events: Vec<(Duration, bool, usize)> = holds
        .iter()
        .enumerate()
        .flat_map(|(i, h)| [(h.from, true, i), (h.until, false, i)])
        .collect();
    // Ends sort before starts at the same instant.
    events.sort_by_key(|(t, start, _)| (*t, *start));
    let (mut now, mut found) = (0u32, Vec::new());
    for (_, start, i) in events {
        if start {
            now += holds[i].permits;
            if now > capacity {
                found.push(holds[i].clone());
            }
        } else {
            now = now.saturating_sub(holds[i].permits);
        }
    }
    found
}

/// A hold of a read-write lock: a read share or the write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwHold {
    /// The interval, as for a mutex.
    pub hold: Hold,
    /// The write lock (else a read share).
    pub writer: bool,
}

/// Every pair of read-write holds by different holders that overlap with at
/// least one of them a writer: readers may share, a writer may not. Earlier
/// one first.
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::history::{Hold, RwHold, writer_overlaps};
/// let ms = Duration::from_millis;
/// let h = |holder, from, until, writer| RwHold {
///     hold: Hold { holder, lock: "x".into(), from: ms(from), until: ms(until), fence: None },
///     writer,
/// };
/// assert!(writer_overlaps(&[h(1, 0, 10, false), h(2, 5, 20, false)]).is_empty());
/// assert_eq!(writer_overlaps(&[h(1, 0, 10, false), h(2, 5, 20, true)]).len(), 1);
/// ```
pub fn writer_overlaps(holds: &[RwHold]) -> Vec<(RwHold, RwHold)> {
    let mut list: Vec<&RwHold> = holds.iter().collect();
    list.sort_by_key(|h| (h.hold.from, h.hold.until));
    let mut open: Vec<&RwHold> = Vec::new();
    let mut found = Vec::new();
    for h in list {
        open.retain(|o| o.hold.until > h.hold.from);
        for o in &open {
            if o.hold.holder != h.hold.holder && (o.writer || h.writer) {
                found.push(((*o).clone(), h.clone()));
            }
        }
        open.push(h);
    }
    found
}

/// One granted acquisition of a fair lock: when it was asked for and when
/// the grant was in hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairWait {
    /// The waiter (a process or task id).
    pub holder: usize,
    /// When its acquire was called.
    pub asked: Duration,
    /// When its acquire returned the grant.
    pub granted: Duration,
}

/// Grants out of queue order. A waiter takes its place in the queue with
/// the first script its acquire sends, within one round trip of asking; so
/// if `a` asked at least `margin` (longer than any round trip) before `b`,
/// `a` was queued first and a fair lock must grant `a` first. Since the
/// lock's holds do not overlap, the order in which acquires returned is the
/// order of the grants. Returns the pairs `(a, b)` where `b` was served
/// although `a` had queued before `b` asked. (A waiter paused past its
/// queue lease loses its place legitimately; the check assumes none is.)
///
/// ```
/// use std::time::Duration;
/// use dlm_testkit::history::{FairWait, out_of_order_grants};
/// let ms = Duration::from_millis;
/// let w = |holder, asked, granted| FairWait { holder, asked: ms(asked), granted: ms(granted) };
/// let margin = ms(50);
/// assert!(out_of_order_grants(&[w(1, 0, 100), w(2, 60, 120)], margin).is_empty());
/// assert_eq!(out_of_order_grants(&[w(1, 0, 130), w(2, 60, 120)], margin).len(), 1);
/// assert!(out_of_order_grants(&[w(1, 0, 130), w(2, 10, 120)], margin).is_empty(), "within the margin");
/// ```
pub fn out_of_order_grants(waits: &[FairWait], margin: Duration) -> Vec<(FairWait, FairWait)> {
    let mut by_grant: Vec<&FairWait> = waits.iter().collect();
    by_grant.sort_by_key(|w| w.granted);
    let mut found = Vec::new();
    // For each grant, the waiters served later that had asked well before it.
    for (i, b) in by_grant.iter().enumerate() {
        for a in &by_grant[i + 1..] {
            if a.holder != b.holder && a.asked + margin <= b.asked {
                found.push(((*a).clone(), (*b).clone()));
            }
        }
    }
    found
}

/// A register that keeps the value of the highest fencing token seen and
/// refuses writes with a lower one (what `Client::fenced_write` does in
/// Redis), counting what it accepted. With `fencing` off it accepts every
/// write but still counts the stale ones it let through: the lost updates a
/// fence would have prevented.
///
/// ```
/// let reg = dlm_testkit::history::FencedRegister::new(true);
/// assert!(reg.write(2, "b"));
/// assert!(!reg.write(1, "a"), "a stale token is refused");
/// assert_eq!(reg.report().stale_rejected, 1);
/// ```
#[derive(Debug)]
pub struct FencedRegister {
    fencing: bool,
    state: Mutex<RegisterState>,
}

#[derive(Debug, Default)]
struct RegisterState {
    highest: u64,
    value: String,
    report: RegisterReport,
}

/// What a [`FencedRegister`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegisterReport {
    /// Writes accepted with a token not lower than any before.
    pub accepted: u64,
    /// Writes with a stale token that were accepted (only without fencing):
    /// each one is a lost update.
    pub stale_accepted: u64,
    /// Writes with a stale token that were refused (with fencing).
    pub stale_rejected: u64,
}

impl FencedRegister {
    /// A register; `fencing` decides whether stale writes are refused.
    pub fn new(fencing: bool) -> Self {
        FencedRegister {
            fencing,
            state: Mutex::new(RegisterState::default()),
        }
    }

    /// Write `value` with fencing token `fence`; false when refused.
    pub fn write(&self, fence: u64, value: &str) -> bool {
        let mut st = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stale = fence < st.highest;
        if stale && self.fencing {
            st.report.stale_rejected += 1;
            return false;
        }
        if stale {
            st.report.stale_accepted += 1;
        } else {
            st.report.accepted += 1;
            st.highest = fence;
        }
        st.value = value.to_string();
        true
    }

    /// The current value.
    pub fn value(&self) -> String {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .value
            .clone()
    }

    /// What it saw so far.
    pub fn report(&self) -> RegisterReport {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .report
    }
}

/// What happened to the tasks of a queue: enqueued, handled under a lease
/// (identified by the lease's fencing token), acked.
///
/// ```
/// let h = dlm_testkit::history::QueueHistory::default();
/// h.enqueued("t1");
/// h.handled("t1", 1);
/// h.acked("t1", 1, true);
/// let r = h.check();
/// assert!(r.lost.is_empty() && r.unexplained_duplicates.is_empty());
/// ```
#[derive(Debug, Default)]
pub struct QueueHistory {
    state: Mutex<QueueState>,
}

#[derive(Debug, Default)]
struct QueueState {
    enqueued: HashSet<String>,
    /// Task -> the leases (fences) it was handled under, in order.
    handled: HashMap<String, Vec<u64>>,
    /// (task, lease) -> acks that succeeded.
    acked: HashMap<(String, u64), u32>,
    /// (task, lease) of acks whose outcome is unknown (the reply was lost).
    unknown: HashSet<(String, u64)>,
}

/// The verdict on a [`QueueHistory`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueReport {
    /// Tasks enqueued.
    pub enqueued: usize,
    /// Enqueued tasks never handled to a successful ack (violations).
    pub lost: Vec<String>,
    /// Handlings beyond the first, in all.
    pub duplicates: usize,
    /// Tasks delivered again after a delivery that was acked (violations:
    /// every duplicate must follow a lease that expired or whose ack was lost).
    pub unexplained_duplicates: Vec<String>,
    /// Leases acked successfully more than once (violations).
    pub acked_twice: Vec<(String, u64)>,
    /// Tasks never acked for sure, but with an ack whose outcome is unknown
    /// (its reply was lost): not lost if that ack took effect, which only
    /// Redis can tell (e.g. the queue drained and its `processed` count).
    pub ack_unknown: Vec<String>,
}

impl QueueReport {
    /// No task lost, every duplicate explained, no lease acked twice.
    pub fn ok(&self) -> bool {
        self.lost.is_empty()
            && self.unexplained_duplicates.is_empty()
            && self.acked_twice.is_empty()
    }
}

impl QueueHistory {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `task` was enqueued (the enqueue returned success).
    pub fn enqueued(&self, task: &str) {
        self.state().enqueued.insert(task.to_string());
    }

    /// A handler started `task` under the lease with fencing token `lease`.
    pub fn handled(&self, task: &str, lease: u64) {
        self.state()
            .handled
            .entry(task.to_string())
            .or_default()
            .push(lease);
    }

    /// The ack of `task` under `lease` is about to be sent. Until
    /// [`QueueHistory::acked`] says how it ended, its outcome is unknown: a
    /// worker killed while its ack is in flight may have acked the task.
    pub fn ack_started(&self, task: &str, lease: u64) {
        self.ack_unknown(task, lease);
    }

    /// The ack of `task` under `lease` returned; `ok` when it succeeded.
    pub fn acked(&self, task: &str, lease: u64, ok: bool) {
        let key = (task.to_string(), lease);
        let mut st = self.state();
        st.unknown.remove(&key);
        if ok {
            *st.acked.entry(key).or_default() += 1;
        }
    }

    /// The ack of `task` under `lease` failed in a way that leaves its
    /// outcome unknown (a timeout, a lost reply): it may have taken effect.
    pub fn ack_unknown(&self, task: &str, lease: u64) {
        self.state().unknown.insert((task.to_string(), lease));
    }

    /// Judge the history.
    pub fn check(&self) -> QueueReport {
        let st = self.state();
        let mut report = QueueReport {
            enqueued: st.enqueued.len(),
            ..QueueReport::default()
        };
        for task in &st.enqueued {
            let leases = st.handled.get(task).map(Vec::as_slice).unwrap_or(&[]);
            let ended = |set: &dyn Fn(&(String, u64)) -> bool| {
                leases.iter().any(|l| set(&(task.clone(), *l)))
            };
            if ended(&|k| st.acked.contains_key(k)) {
                continue;
            }
            if ended(&|k| st.unknown.contains(k)) {
                report.ack_unknown.push(task.clone());
            } else {
                report.lost.push(task.clone());
            }
        }
        for (task, leases) in &st.handled {
            report.duplicates += leases.len().saturating_sub(1);
            // Leases of one task have increasing fences, one per delivery. A
            // delivery is explained when every delivery before it (lower
            // fence) did not end in a successful ack: it expired, or its ack
            // was lost. A delivery after an acked one is a violation. (A
            // handler still running under an older, expired lease is an
            // explained duplicate whatever the order it was recorded in.)
            let mut sorted = leases.clone();
            sorted.sort_unstable();
            let first_acked = sorted
                .iter()
                .find(|l| st.acked.contains_key(&(task.clone(), **l)));
            if let Some(acked) = first_acked
                && sorted.iter().any(|l| l > acked)
            {
                report.unexplained_duplicates.push(task.clone());
            }
        }
        for ((task, lease), n) in &st.acked {
            if *n > 1 {
                report.acked_twice.push((task.clone(), *lease));
            }
        }
        report.lost.sort();
        report.ack_unknown.sort();
        report.unexplained_duplicates.sort();
        report.acked_twice.sort();
        report
    }
}

/// One run of a task of a dependency graph, as its handler logged it: when it
/// started and (if it got that far) finished, and its lease's fencing token.
/// Times come from one clock (e.g. the wall clock of one machine, in any unit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagRun {
    /// The task's id.
    pub task: String,
    /// The lease's fencing token: a later claim of the same task has a higher one.
    pub fence: u64,
    /// When the handler started.
    pub started: u128,
    /// When the handler finished its work (`None`: it was killed before).
    pub finished: Option<u128>,
}

/// What [`dag_violations`] found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DagViolation {
    /// The task never finished a run.
    NeverFinished(String),
    /// `task` started (at `started`) before its dependency `dep` finished the
    /// run that was acked (at `dep_finished`).
    StartedEarly {
        /// The dependent task.
        task: String,
        /// The dependency it did not wait for.
        dep: String,
        /// When the dependent started.
        started: u128,
        /// When the dependency's acked run finished.
        dep_finished: u128,
    },
}

/// Judge a run of a dependency graph (`deps`: task -> its dependencies) from
/// the handlers' log. The run of a task that was acked is the one with the
/// highest fence (a later claim has a higher fence, and after the ack there is
/// none), so each task's highest-fenced run must have finished, and every run
/// of a task must have started after each dependency's highest-fenced run
/// finished: a task becomes due only when the last of its dependencies is
/// acked, and that ack comes after the handler finished. Runs of killed
/// workers (lower fences, perhaps still finishing late) do not count for
/// their task's completion.
///
/// ```
/// use std::collections::HashMap;
/// use dlm_testkit::history::{DagRun, dag_violations};
/// let deps = HashMap::from([("b".to_string(), vec!["a".to_string()]), ("a".to_string(), vec![])]);
/// let run = |task: &str, fence, started, finished| DagRun { task: task.into(), fence, started, finished };
/// let good = [run("a", 1, 0, Some(5)), run("b", 2, 6, Some(9))];
/// assert!(dag_violations(&deps, &good).is_empty());
/// let early = [run("a", 1, 0, Some(5)), run("b", 2, 4, Some(9))];
/// assert_eq!(dag_violations(&deps, &early).len(), 1);
/// ```
pub fn dag_violations(deps: &HashMap<String, Vec<String>>, runs: &[DagRun]) -> Vec<DagViolation> {
    let mut acked: HashMap<&str, &DagRun> = HashMap::new();
    for r in runs {
        let e = acked.entry(r.task.as_str()).or_insert(r);
        if r.fence > e.fence {
            *e = r;
        }
    }
    let mut out = Vec::new();
    let mut tasks: Vec<&String> = deps.keys().collect();
    tasks.sort();
    for task in tasks {
        let finished = acked.get(task.as_str()).and_then(|r| r.finished);
        if finished.is_none() {
            out.push(DagViolation::NeverFinished(task.clone()));
        }
    }
    for r in runs {
        for dep in deps.get(&r.task).into_iter().flatten() {
            let dep_finished = acked.get(dep.as_str()).and_then(|d| d.finished);
            if let Some(f) = dep_finished
                && r.started < f
            {
                out.push(DagViolation::StartedEarly {
                    task: r.task.clone(),
                    dep: dep.clone(),
                    started: r.started,
                    dep_finished: f,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn hold(holder: usize, from: u64, until: u64) -> Hold {
        Hold {
            holder,
            lock: "l".into(),
            from: ms(from),
            until: ms(until),
            fence: None,
        }
    }

    #[test]
    fn touching_intervals_do_not_overlap_but_crossing_ones_do() {
        assert!(overlapping_holds(&[hold(1, 0, 10), hold(2, 10, 20)]).is_empty());
        let found = overlapping_holds(&[hold(2, 15, 30), hold(1, 0, 20), hold(3, 40, 50)]);
        assert_eq!(found, vec![(hold(1, 0, 20), hold(2, 15, 30))]);
        // One holder's own consecutive holds never count.
        assert!(overlapping_holds(&[hold(1, 0, 20), hold(1, 10, 30)]).is_empty());
        // Different locks never overlap.
        let mut other = hold(2, 5, 15);
        other.lock = "m".into();
        assert!(overlapping_holds(&[hold(1, 0, 20), other]).is_empty());
    }

    #[test]
    fn a_hold_inside_a_long_one_is_found() {
        let found = overlapping_holds(&[hold(1, 0, 100), hold(2, 10, 20), hold(3, 30, 40)]);
        assert_eq!(found.len(), 2);
    }

    #[test]
    fn the_fence_refuses_what_a_plain_register_loses() {
        let fenced = FencedRegister::new(true);
        let plain = FencedRegister::new(false);
        for reg in [&fenced, &plain] {
            reg.write(1, "a");
            reg.write(3, "c");
            reg.write(2, "b"); // a paused holder wakes up late
        }
        assert_eq!(fenced.value(), "c");
        assert_eq!(plain.value(), "b", "the stale write overwrote newer data");
        assert_eq!(
            fenced.report(),
            RegisterReport {
                accepted: 2,
                stale_accepted: 0,
                stale_rejected: 1
            }
        );
        assert_eq!(plain.report().stale_accepted, 1);
    }

    #[test]
    fn lost_tasks_duplicates_and_double_acks_are_reported() {
        let h = QueueHistory::default();
        for t in ["a", "b", "c", "d"] {
            h.enqueued(t);
        }
        // a: handled once, acked.
        h.handled("a", 1);
        h.acked("a", 1, true);
        // b: lease 2 expired (ack refused), redelivered under 5 and acked: explained.
        h.handled("b", 2);
        h.acked("b", 2, false);
        h.handled("b", 5);
        h.acked("b", 5, true);
        // c: never handled: lost.
        // d: acked under 3, then delivered again under 4: unexplained; and acked twice.
        h.handled("d", 3);
        h.acked("d", 3, true);
        h.handled("d", 4);
        h.acked("d", 3, true);
        // e: a handler still running under expired lease 6 after 7 was acked: explained.
        h.enqueued("e");
        h.handled("e", 7);
        h.acked("e", 7, true);
        h.handled("e", 6);
        h.acked("e", 6, false);
        // f: its only ack lost its reply: not lost, but not sure either;
        // g: its worker died while the ack was in flight: the same.
        h.enqueued("f");
        h.handled("f", 8);
        h.ack_unknown("f", 8);
        h.enqueued("g");
        h.handled("g", 9);
        h.ack_started("g", 9);
        // h: an ack that came back with an answer is no longer unknown.
        h.enqueued("h");
        h.handled("h", 10);
        h.ack_started("h", 10);
        h.acked("h", 10, false);
        let r = h.check();
        assert_eq!(r.enqueued, 8);
        assert_eq!(r.lost, vec!["c".to_string(), "h".to_string()]);
        assert_eq!(r.ack_unknown, vec!["f".to_string(), "g".to_string()]);
        assert_eq!(r.duplicates, 3);
        assert_eq!(r.unexplained_duplicates, vec!["d".to_string()]);
        assert_eq!(r.acked_twice, vec![("d".to_string(), 3)]);
        assert!(!r.ok());
    }

    #[test]
    fn a_history_records_on_one_clock() {
        let h = History::new();
        let t = h.clock().now();
        h.record(1, t, Outcome::Unknown, 7);
        let ops = h.ops();
        assert_eq!(ops.len(), 1);
        assert!(ops[0].complete >= ops[0].invoke);
        assert_eq!(ops[0].outcome, Outcome::Unknown);
    }
}
