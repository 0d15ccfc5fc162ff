//! Judging what was recorded: the homegrown checkers of
//! `dlm_testkit::history` and the third-party linearizability checker, on
//! each closed epoch; violations are attributed to a broken assumption when
//! a fault that breaks one may explain them.

use std::collections::BTreeMap;
use std::time::Duration;

use dlm_testkit::history::{
    Hold, PermitHold, RwHold, dag_violations, over_capacity, overlapping_holds, writer_overlaps,
};
use serde::Serialize;

use super::faults::FaultLog;
use super::lin::{check_lock_history, check_queue_history};
use super::record::{HoldRec, Kind, LockLog, PERMITS, QueueEpoch, Recorder};

/// The homegrown checkers' name in reports.
pub const HOMEGROWN: &str = "homegrown (dlm_testkit::history)";

/// One violation found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Which checker found it.
    pub checker: String,
    /// The lock kind or queue flavour.
    pub object: String,
    /// What was wrong.
    pub what: String,
    /// The broken assumption that explains it, if any ("expected: ...").
    pub expected: Option<&'static str>,
}

/// What the checks found so far.
#[derive(Debug, Default)]
pub struct Verdicts {
    /// Check rounds run.
    pub checks: u64,
    /// Histories judged, by checker.
    pub histories: BTreeMap<String, u64>,
    /// Operations judged, by checker.
    pub operations: BTreeMap<String, u64>,
    /// Every violation.
    pub findings: Vec<Finding>,
    /// What a checker could not decide (counted; a few kept).
    pub undecided: u64,
    /// A few of the undecided notes.
    pub undecided_notes: Vec<String>,
    /// Queue epochs that did not drain in time (their lost tasks are not
    /// judged).
    pub undrained: u64,
    /// Schedule ticks fired by the soak's own `run_schedules` calls, and
    /// distinct tick tasks handled (workers fire ticks too).
    pub ticks: (u64, u64),
    /// Acks of unknown outcome.
    pub acks_unknown: u64,
}

impl Verdicts {
    /// Violations not explained by a broken assumption.
    pub fn unexplained(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.expected.is_none())
            .count()
    }

    fn judged(&mut self, checker: &str, ops: usize) {
        *self.histories.entry(checker.to_string()).or_default() += 1;
        *self.operations.entry(checker.to_string()).or_default() += ops as u64;
    }

    fn undecided(&mut self, notes: &[String]) {
        self.undecided += notes.len() as u64;
        for n in notes {
            if self.undecided_notes.len() < 5 && !self.undecided_notes.contains(n) {
                self.undecided_notes.push(n.clone());
            }
        }
    }
}

/// The overlaps the homegrown checkers find in one kind's holds.
fn homegrown_locks(kind: Kind, holds: &[HoldRec]) -> Vec<String> {
    let show = |a: &Hold, b: &Hold| {
        format!(
            "{}: holder {} held from {:?} to {:?} (fence {:?}) while holder {} held from {:?} to {:?} (fence {:?})",
            a.lock, a.holder, a.from, a.until, a.fence, b.holder, b.from, b.until, b.fence
        )
    };
    let mut by_name: BTreeMap<&str, Vec<&HoldRec>> = BTreeMap::new();
    for h in holds {
        by_name.entry(h.hold.lock.as_str()).or_default().push(h);
    }
    let mut out = Vec::new();
    for (name, list) in by_name {
        match kind {
            Kind::Rw => {
                let holds: Vec<RwHold> = list
                    .iter()
                    .map(|h| RwHold {
                        hold: h.hold.clone(),
                        writer: h.exclusive,
                    })
                    .collect();
                out.extend(
                    writer_overlaps(&holds)
                        .iter()
                        .map(|(a, b)| show(&a.hold, &b.hold)),
                );
            }
            Kind::Semaphore => {
                let holds: Vec<PermitHold> = list
                    .iter()
                    .map(|h| PermitHold {
                        holder: h.hold.holder,
                        from: h.hold.from,
                        until: h.hold.until,
                        permits: 1,
                    })
                    .collect();
                out.extend(over_capacity(&holds, PERMITS).iter().map(|h| {
                    format!(
                        "{name}: holder {} started holding at {:?} while {PERMITS} permits were held",
                        h.holder, h.from
                    )
                }));
            }
            _ => {
                let holds: Vec<Hold> = list.iter().map(|h| h.hold.clone()).collect();
                out.extend(overlapping_holds(&holds).iter().map(|(a, b)| show(a, b)));
            }
        }
    }
    out
}

/// Judge the lock logs of closed epochs.
pub fn locks(
    rec: &Recorder,
    faults: &FaultLog,
    logs: Vec<((Kind, u64), LockLog)>,
    slack: Duration,
    v: &mut Verdicts,
) {
    for ((kind, epoch), log) in logs {
        let from = rec.epoch_start(epoch);
        let until = rec.epoch_start(epoch + 1) + slack;
        let expected = faults
            .explain(Some(kind), from, until, slack)
            .map(|b| b.label());
        v.judged(HOMEGROWN, log.holds.len());
        for what in homegrown_locks(kind, &log.holds) {
            v.findings.push(Finding {
                checker: HOMEGROWN.into(),
                object: kind.label().into(),
                what,
                expected,
            });
        }
        if log.ops.is_empty() {
            continue;
        }
        let verdict = check_lock_history(kind.model(), &log.ops);
        v.judged(verdict.checker, verdict.operations);
        v.undecided(&verdict.undecided);
        for what in verdict.violations {
            let detail = lock_ops(&log.ops, &what);
            v.findings.push(Finding {
                checker: verdict.checker.into(),
                object: kind.label().into(),
                what: format!("epoch {epoch}: {what}{detail}"),
                expected,
            });
        }
    }
}

/// Judge the queues' finished epochs.
pub fn queues(faults: &FaultLog, epochs: Vec<QueueEpoch>, slack: Duration, v: &mut Verdicts) {
    for q in epochs {
        let expected = faults
            .explain(None, q.from, q.until, slack)
            .map(|b| b.label());
        let mut list: Vec<(String, String)> = Vec::new();
        let mut found = |checker: &str, what: String| list.push((checker.into(), what));
        let report = q.history.check();
        if q.drained {
            for id in &report.lost {
                found(
                    HOMEGROWN,
                    format!("task {id} was enqueued and never handled to an ack"),
                );
            }
            for d in dag_violations(&q.deps, &q.runs) {
                found(HOMEGROWN, format!("{d:?}"));
            }
        } else {
            v.undrained += 1;
            // Only a start before a dependency finished can be judged.
            for d in dag_violations(&q.deps, &q.runs) {
                if matches!(d, dlm_testkit::history::DagViolation::StartedEarly { .. }) {
                    found(HOMEGROWN, format!("{d:?}"));
                }
            }
        }
        for id in &report.unexplained_duplicates {
            found(
                HOMEGROWN,
                format!("task {id} was delivered again after an ack"),
            );
        }
        for (id, fence) in &report.acked_twice {
            found(HOMEGROWN, format!("task {id}: lease {fence} acked twice"));
        }
        v.judged(HOMEGROWN, report.enqueued);
        v.acks_unknown += report.ack_unknown.len() as u64;
        v.ticks.0 += q.ticks_fired as u64;
        v.ticks.1 += q.ticks_handled as u64;
        if !q.ops.is_empty() {
            let verdict = check_queue_history(&q.spec, &q.ops);
            v.judged(verdict.checker, verdict.operations);
            v.undecided(&verdict.undecided);
            for what in verdict.violations {
                let detail = task_ops(&q.ops, &what);
                found(verdict.checker, format!("{what}{detail}"));
            }
        }
        for (checker, what) in list {
            v.findings.push(Finding {
                checker,
                object: format!("queue {}", q.flavour),
                what: format!("{}: {what}", q.queue),
                expected,
            });
        }
    }
}

/// The operations on the task a queue violation names (`task "ID"`), to
/// show with it.
fn task_ops(ops: &[super::lin::QueueOp], what: &str) -> String {
    use super::lin::{QueueAction as A, QueueResult as R};
    let Some(id) = what.split('"').nth(1) else {
        return String::new();
    };
    // The task and its dependencies.
    let mut ids = vec![id.to_string()];
    for op in ops {
        if let A::Enqueue { task, deps, .. } = &op.action
            && task == id
        {
            ids.extend(deps.iter().cloned());
        }
    }
    let on = |op: &super::lin::QueueOp| match (&op.action, &op.result) {
        (A::Enqueue { task, .. }, _)
        | (A::Ack { task, .. }, _)
        | (A::Nack { task, .. }, _)
        | (A::Extend { task, .. }, _) => ids.contains(task),
        (A::Claim { .. }, R::Leased { task, .. }) => ids.contains(task),
        _ => false,
    };
    let shown: Vec<String> = ops
        .iter()
        .filter(|op| on(op))
        .map(|op| {
            format!(
                "p{} {:?} -> {:?} [{:?}, {:?}]",
                op.process, op.action, op.result, op.invoke, op.complete
            )
        })
        .collect();
    format!("; its operations: {}", shown.join("; "))
}

/// The operations on the lock a violation names (`lock "NAME"`), to show
/// with it (the first 400).
fn lock_ops(ops: &[super::lin::LockOp], what: &str) -> String {
    let Some(name) = what.split('"').nth(1) else {
        return String::new();
    };
    let shown: Vec<String> = ops
        .iter()
        .filter(|op| op.lock == name)
        .take(400)
        .map(|op| {
            format!(
                "p{} l{} {:?} -> {:?} [{:?}, {:?}]",
                op.process, op.lease, op.action, op.result, op.invoke, op.complete
            )
        })
        .collect();
    format!("; its operations: {}", shown.join("; "))
}
