//! Printing: one JSON object per line with `--json`, else plain text; error
//! lines on stderr. Write errors (a closed pipe) are returned, never panics.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::error::CliError;

/// Print `value` as one JSON line when `json`, else the text `plain()` makes
/// (which may span several lines; a final newline is added). `value` is one
/// JSON object: a list is printed with [`emit_each`], one object per line.
pub fn emit<T: Serialize>(
    json: bool,
    value: &T,
    plain: impl FnOnce() -> String,
) -> Result<(), CliError> {
    if json {
        line_out(&json_line(value)?)
    } else {
        line_out(&plain())
    }
}

/// Print each item as one JSON line when `json` (nothing for an empty list),
/// else the text `plain()` makes: the `--json` convention for lists (JSON
/// lines, never one array).
pub fn emit_each<T: Serialize>(
    json: bool,
    items: &[T],
    plain: impl FnOnce() -> String,
) -> Result<(), CliError> {
    if json {
        for item in items {
            line_out(&json_line(item)?)?;
        }
        Ok(())
    } else {
        line_out(&plain())
    }
}

/// `value` as one line of JSON: an object, by the `--json` convention.
fn json_line<T: Serialize>(value: &T) -> Result<String, CliError> {
    let line = serde_json::to_string(value).map_err(|e| CliError::Io {
        what: "encoding JSON",
        source: e.into(),
    })?;
    debug_assert!(
        line.starts_with('{'),
        "--json prints one JSON object per line, not {line}"
    );
    Ok(line)
}

/// Print one line (or several) to stdout and flush.
pub fn line_out(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(CliError::io("writing to stdout"))
}

/// Print `dlm: <message>` to stderr (ignoring a closed stderr).
pub fn error_line(message: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "dlm: {message}");
}

/// Milliseconds, saturating.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Microseconds, saturating.
pub fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A duration for people: `1.5s`, `250ms`, `80µs`.
pub fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2}s", d.as_secs_f64())
    } else if d >= Duration::from_millis(1) {
        format!("{:.1}ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{}µs", d.as_micros())
    }
}

/// An optional number of microseconds for a table cell.
pub fn cell_us(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| human(Duration::from_micros(v)))
}

/// One live worker as `dlm queue workers --json` and the dashboard's
/// `/api/queues/NAME/workers` show it (times in ms since the epoch, Redis clock).
#[derive(Debug, Serialize)]
pub struct WorkerLine {
    /// The queue it works on.
    pub queue: String,
    /// Its id.
    pub id: String,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it started.
    pub started_ms: u64,
    /// How many tasks it runs at once at most.
    pub concurrency: usize,
    /// How many it ran at its last beat.
    pub busy: usize,
    /// Their ids (at most [`dlm::queue::MAX_IN_FLIGHT_IDS`]).
    pub in_flight: Vec<String>,
    /// Tasks acked so far.
    pub processed: u64,
    /// Tasks failed so far (retried, dead, lease lost).
    pub failed: u64,
    /// When it last beat.
    pub last_beat_ms: u64,
    /// How long ago that was.
    pub beat_age_ms: u64,
    /// When its record expires without a new beat.
    pub expires_ms: u64,
    /// How long a record lives.
    pub ttl_ms: u64,
    /// Shutting down (claims nothing more).
    pub stopping: bool,
    /// The dlm version it runs.
    pub version: String,
}

impl WorkerLine {
    /// `w`, a worker of `queue`.
    pub fn new(queue: &str, w: dlm::queue::WorkerInfo) -> Self {
        WorkerLine {
            queue: queue.to_string(),
            beat_age_ms: ms(w.beat_age),
            ttl_ms: ms(w.ttl),
            id: w.id,
            host: w.host,
            pid: w.pid,
            started_ms: w.started_ms,
            concurrency: w.concurrency,
            busy: w.busy,
            in_flight: w.in_flight,
            processed: w.processed,
            failed: w.failed,
            last_beat_ms: w.last_beat_ms,
            expires_ms: w.expires_ms,
            stopping: w.stopping,
            version: w.version,
        }
    }
}

/// One task as `dlm queue task --json` and the dashboard's
/// `/api/queues/NAME/tasks/ID` show it.
#[derive(Debug, Serialize)]
pub struct TaskLine {
    /// Its id.
    pub id: String,
    /// blocked, waiting, delayed, in_flight, dead, completed or unknown.
    pub state: &'static str,
    /// How many times it was claimed.
    pub attempts: u32,
    /// 0 ..= 100, the handler's last report (`dlm queue progress`).
    pub progress: Option<u8>,
    /// The message that came with it.
    pub message: Option<String>,
    /// Its dependencies.
    pub deps: Vec<String>,
    /// The tasks that wait for it.
    pub dependents: Vec<String>,
    /// The result's length, while one is kept.
    pub result_bytes: Option<usize>,
    /// Its last error.
    pub error: Option<String>,
    /// Due time, lease deadline, time of death or when the completion is forgotten (ms).
    pub score: Option<u64>,
    /// Blocked: dependencies not done yet.
    pub pending_deps: u32,
    /// `fail` or `ignore`.
    pub on_dependency_failure: &'static str,
    /// In flight: its lease's fencing token.
    pub fence: Option<u64>,
    /// Its priority.
    pub priority: u16,
    /// Its group.
    pub group: Option<String>,
    /// Its payload's length.
    pub payload_bytes: Option<usize>,
    /// Its run-time limit.
    pub timeout_ms: Option<u128>,
    /// Completed: when its last run started (ms since the epoch, Redis clock).
    pub started_at: Option<u64>,
    /// Completed: when it was acked (ms since the epoch, Redis clock).
    pub finished_at: Option<u64>,
    /// Completed: the worker that ran it (none: acked by hand).
    pub worker: Option<String>,
}

impl TaskLine {
    /// Task `id` as `detail` says (`None`: unknown).
    pub fn new(id: &str, detail: Option<&dlm::queue::TaskDetail>) -> Self {
        match detail {
            Some(t) => TaskLine {
                id: id.to_string(),
                state: t.state.as_str(),
                attempts: t.attempts,
                progress: t.progress,
                message: t.message.clone(),
                deps: t.deps.clone(),
                dependents: t.dependents.clone(),
                result_bytes: t.result_bytes,
                error: t.error.clone(),
                score: t.score,
                pending_deps: t.pending_deps,
                on_dependency_failure: if t.ignores_dependency_failure {
                    "ignore"
                } else {
                    "fail"
                },
                fence: t.fence.map(|f| f.get()),
                priority: t.priority,
                group: t.group.clone(),
                payload_bytes: t.payload_len,
                timeout_ms: t.timeout.map(|d| d.as_millis()),
                started_at: t.started_at,
                finished_at: t.finished_at,
                worker: t.worker.clone(),
            },
            None => TaskLine {
                id: id.to_string(),
                state: "unknown",
                attempts: 0,
                progress: None,
                message: None,
                deps: Vec::new(),
                dependents: Vec::new(),
                result_bytes: None,
                error: None,
                score: None,
                pending_deps: 0,
                on_dependency_failure: "fail",
                fence: None,
                priority: 0,
                group: None,
                payload_bytes: None,
                timeout_ms: None,
                started_at: None,
                finished_at: None,
                worker: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_millis(1500)), "1.50s");
        assert_eq!(human(Duration::from_micros(2500)), "2.5ms");
        assert_eq!(human(Duration::from_micros(80)), "80µs");
        assert_eq!(cell_us(None), "-");
    }
}

/// One violation in [`InvariantsLine`].
#[derive(Debug, Serialize)]
pub struct ViolationLine {
    /// The invariant's name ([`dlm::queue::Invariant::as_str`]).
    pub invariant: &'static str,
    /// The task id (a group's name for `group_count`, empty for `small_count`).
    pub id: String,
    /// What was found.
    pub detail: String,
}

/// The tasks per state in [`InvariantsLine`].
#[derive(Debug, Serialize)]
pub struct CountsLine {
    /// Due now and claimable.
    pub waiting: u64,
    /// Due later.
    pub delayed: u64,
    /// Held aside while their group is at its limit.
    pub parked: u64,
    /// Leased to a worker.
    pub in_flight: u64,
    /// Waiting for dependencies.
    pub blocked: u64,
    /// Dead.
    pub dead: u64,
    /// Completions remembered.
    pub done: u64,
}

/// A queue's invariant check as `dlm queue check --json` (and `dlm check
/// queue --invariants`) print it.
#[derive(Debug, Serialize)]
pub struct InvariantsLine {
    /// The queue's name.
    pub queue: String,
    /// No violation.
    pub ok: bool,
    /// Every key read whole and every violation listed.
    pub complete: bool,
    /// Every violation found.
    pub violations: Vec<ViolationLine>,
    /// The tasks per state.
    pub counts: CountsLine,
}

impl InvariantsLine {
    /// The line of `report`, a check of queue `queue`.
    pub fn new(queue: &str, report: &dlm::queue::InvariantReport) -> Self {
        let c = &report.counts;
        InvariantsLine {
            queue: queue.to_string(),
            ok: report.is_ok(),
            complete: report.complete,
            violations: report
                .violations
                .iter()
                .map(|v| ViolationLine {
                    invariant: v.invariant.as_str(),
                    id: v.id.clone(),
                    detail: v.detail.clone(),
                })
                .collect(),
            counts: CountsLine {
                waiting: c.waiting,
                delayed: c.delayed,
                parked: c.parked,
                in_flight: c.in_flight,
                blocked: c.blocked,
                dead: c.dead,
                done: c.done,
            },
        }
    }

    /// Plain text: one line per violation (`INVARIANT ID: DETAIL`), then a
    /// summary line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for v in &self.violations {
            out.push_str(&format!("{} {:?}: {}\n", v.invariant, v.id, v.detail));
        }
        let c = &self.counts;
        out.push_str(&format!(
            "queue {}: {} violation(s){}; waiting {}, delayed {}, parked {}, in flight {}, blocked {}, dead {}, done {}",
            self.queue,
            self.violations.len(),
            if self.complete {
                ""
            } else {
                " (checked in part: see --max-ids)"
            },
            c.waiting,
            c.delayed,
            c.parked,
            c.in_flight,
            c.blocked,
            c.dead,
            c.done
        ));
        out
    }
}
