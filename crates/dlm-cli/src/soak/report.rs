//! The soak's progress line and its final summary.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::faults::{Break, FaultLog};
use super::judge::{Finding, Verdicts};
use super::record::Recorder;

/// A broken assumption: how often it was injected and how many violations
/// it explains.
#[derive(Debug, Serialize)]
pub struct Broken {
    /// Its name (`no-persistence`, `paused-holder`).
    pub name: &'static str,
    /// Faults that broke it.
    pub injected: u64,
    /// Violations it explains ("expected: NAME").
    pub violations: u64,
    /// Did the checkers catch it (at least one violation attributed)?
    pub caught: bool,
}

/// The final summary (one JSON object with `--json`).
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Always "soak".
    pub check: &'static str,
    /// How long it ran, in seconds.
    pub duration_s: f64,
    /// The seed of the fault schedule and the workloads.
    pub seed: u64,
    /// The deployments it ran on.
    pub topologies: Vec<String>,
    /// The kinds of client that took part (and those skipped, with why).
    pub clients: Vec<String>,
    /// Operations by lock kind and queue.
    pub operations: BTreeMap<String, u64>,
    /// Operations by client.
    pub operations_by_client: BTreeMap<String, u64>,
    /// All operations.
    pub total_operations: u64,
    /// Faults injected by kind.
    pub faults: BTreeMap<String, u64>,
    /// Check rounds run.
    pub checks: u64,
    /// Histories judged by checker.
    pub histories: BTreeMap<String, u64>,
    /// Violations where the assumptions hold, by checker (must all be 0).
    pub violations: BTreeMap<String, u64>,
    /// Violations explained by a broken assumption, by assumption.
    pub expected_violations: BTreeMap<String, u64>,
    /// The assumptions broken on purpose (`--break`).
    pub broken_assumptions: Vec<Broken>,
    /// What the checkers could not decide.
    pub undecided: u64,
    /// Queue epochs that did not drain before their deadline.
    pub undrained_queues: u64,
    /// Acks whose reply was lost.
    pub acks_unknown: u64,
    /// Schedule ticks fired by the soak's own `run_schedules` calls / tick
    /// tasks handled in all.
    pub schedule_ticks: (u64, u64),
    /// The first violations (at most 20).
    pub examples: Vec<Finding>,
    /// What did not run and why.
    pub notes: Vec<String>,
    /// No violation where the assumptions hold, and every broken
    /// assumption caught.
    pub ok: bool,
}

/// Assemble the summary.
#[allow(clippy::too_many_arguments)]
pub fn summary(
    rec: &Recorder,
    faults: &FaultLog,
    v: &Verdicts,
    seed: u64,
    breaks: &[Break],
    topologies: Vec<String>,
    clients: Vec<String>,
    notes: Vec<String>,
) -> Summary {
    let mut violations = BTreeMap::new();
    let mut expected = BTreeMap::new();
    for checker in v.histories.keys() {
        violations.insert(checker.clone(), 0);
    }
    for f in &v.findings {
        match f.expected {
            None => *violations.entry(f.checker.clone()).or_default() += 1,
            Some(b) => *expected.entry(b.to_string()).or_default() += 1,
        }
    }
    let broken: Vec<Broken> = breaks
        .iter()
        .map(|b| {
            let n = expected.get(b.label()).copied().unwrap_or(0);
            Broken {
                name: b.label(),
                injected: faults.injected(*b),
                violations: n,
                caught: n > 0,
            }
        })
        .collect();
    let mut examples: Vec<Finding> = v
        .findings
        .iter()
        .filter(|f| f.expected.is_none())
        .take(20)
        .cloned()
        .collect();
    examples.extend(
        v.findings
            .iter()
            .filter(|f| f.expected.is_some())
            .take(20 - examples.len())
            .cloned(),
    );
    // Every violation in full, for a closer look (`DLM_SOAK_DUMP=FILE`).
    if let Some(path) = std::env::var_os("DLM_SOAK_DUMP") {
        let text: Vec<String> = v
            .findings
            .iter()
            .map(|f| format!("{:?} [{}] {}: {}", f.expected, f.checker, f.object, f.what))
            .collect();
        if let Err(e) = std::fs::write(&path, text.join("\n")) {
            tracing::warn!(
                "cannot write {}: {e}",
                std::path::Path::new(&path).display()
            );
        }
    }
    // An example names its history's operations: keep the summary readable.
    for f in &mut examples {
        if f.what.len() > 4000 {
            let cut = (0..=4000)
                .rev()
                .find(|i| f.what.is_char_boundary(*i))
                .unwrap_or(0);
            f.what.truncate(cut);
            f.what.push_str(" ...");
        }
    }
    let ok = v.unexplained() == 0 && broken.iter().all(|b| b.caught);
    Summary {
        check: "soak",
        duration_s: rec.clock.now().as_secs_f64(),
        seed,
        topologies,
        clients,
        operations: rec.op_counts(),
        operations_by_client: rec.client_counts(),
        total_operations: rec.total_ops(),
        faults: faults.counts(),
        checks: v.checks,
        histories: v.histories.clone(),
        violations,
        expected_violations: expected,
        broken_assumptions: broken,
        undecided: v.undecided,
        undrained_queues: v.undrained,
        acks_unknown: v.acks_unknown,
        schedule_ticks: v.ticks,
        examples,
        notes,
        ok,
    }
}

impl Summary {
    /// The human-readable text.
    pub fn text(&self) -> String {
        let map = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut s = format!(
            "soak: {:.0} s, seed {}, on {}\nclients: {}\noperations: {} ({}; by client: {})\nfaults: {}\nchecks: {} rounds; histories judged: {}\nviolations where the assumptions hold: {}\n",
            self.duration_s,
            self.seed,
            self.topologies.join(", "),
            self.clients.join(", "),
            self.total_operations,
            map(&self.operations),
            map(&self.operations_by_client),
            map(&self.faults),
            self.checks,
            map(&self.histories),
            map(&self.violations),
        );
        for b in &self.broken_assumptions {
            s.push_str(&format!(
                "broken assumption {}: injected {} times, {} violations caught (expected: {}){}\n",
                b.name,
                b.injected,
                b.violations,
                b.name,
                if b.caught { "" } else { " -- NOT CAUGHT" }
            ));
        }
        for f in &self.examples {
            s.push_str(&format!(
                "  {} [{}] {}: {}\n",
                f.expected
                    .map_or("VIOLATION".to_string(), |b| format!("expected: {b}")),
                f.checker,
                f.object,
                f.what
            ));
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push_str(if self.ok {
            "verdict: ok"
        } else {
            "verdict: FAILED"
        });
        s
    }
}

/// The progress line.
pub fn progress(rec: &Recorder, faults: &FaultLog, v: &Verdicts, left: Duration) -> String {
    let ops = rec.op_counts();
    let pick = |k: &str| ops.get(k).copied().unwrap_or(0);
    let f: u64 = faults.counts().values().sum();
    format!(
        "soak: {} ops (mutex {}, fair {}, rw {}, sem {}, elect {}, queue {}), {} faults ({}), {} violations ({} expected), {} s left",
        rec.total_ops(),
        pick("mutex"),
        pick("fair"),
        pick("rwlock"),
        pick("semaphore"),
        pick("election"),
        pick("queue"),
        f,
        faults
            .counts()
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        v.unexplained(),
        v.findings.len() - v.unexplained(),
        left.as_secs()
    )
}
