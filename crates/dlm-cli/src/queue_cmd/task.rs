//! `dlm queue task Q ID`: everything known about one task, one library call
//! ([`dlm::queue::Queue::task`]).

use clap::Args;
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::parse_task_id;
use crate::global::{Global, QueueArg};
use crate::output;

/// `dlm queue task`
#[derive(Debug, Clone, Args)]
pub struct TaskArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The task id.
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub id: String,
}

/// One task, as `--json` prints it.
#[derive(Serialize)]
struct TaskLine<'a> {
    id: &'a str,
    /// blocked, waiting, delayed, in_flight, dead, completed or unknown.
    state: &'static str,
    attempts: u32,
    /// 0 ..= 100, the handler's last report (`dlm queue progress`).
    progress: Option<u8>,
    message: Option<String>,
    deps: Vec<String>,
    dependents: Vec<String>,
    /// The result's length, while one is kept.
    result_bytes: Option<usize>,
    error: Option<String>,
    /// Due time, lease deadline, time of death or when the completion is forgotten (ms).
    score: Option<u64>,
    /// Blocked: dependencies not done yet.
    pending_deps: u32,
    on_dependency_failure: &'static str,
    fence: Option<u64>,
    priority: u16,
    group: Option<String>,
    payload_bytes: Option<usize>,
    timeout_ms: Option<u128>,
}

/// `dlm queue task`: exit 0 with the task, 1 when the queue has no such task
/// (and remembers none): `state` is then `unknown`.
pub async fn task(global: &Global, args: &TaskArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let detail = queue.task(&args.id).await?;
    let line = match &detail {
        Some(t) => TaskLine {
            id: &args.id,
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
        },
        None => TaskLine {
            id: &args.id,
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
        },
    };
    output::emit(global.json, &line, || {
        let mut text = format!("{} {}", line.id, line.state);
        if line.attempts > 0 {
            text.push_str(&format!(", {} attempts", line.attempts));
        }
        if !line.deps.is_empty() {
            text.push_str(&format!(", after {}", line.deps.join(",")));
            if line.pending_deps > 0 {
                text.push_str(&format!(" ({} not done)", line.pending_deps));
            }
        }
        if !line.dependents.is_empty() {
            text.push_str(&format!(", needed by {}", line.dependents.join(",")));
        }
        if let Some(p) = line.progress {
            text.push_str(&format!(", {p}%"));
            if let Some(m) = &line.message {
                text.push_str(&format!(" {m}"));
            }
        }
        if let Some(n) = line.result_bytes {
            text.push_str(&format!(", result {n} bytes"));
        }
        if let Some(e) = &line.error {
            text.push_str(&format!(", error: {e}"));
        }
        text
    })?;
    if detail.is_some() {
        Ok(EXIT_OK)
    } else {
        Err(CliError::No(format!(
            "queue {:?} has no task {:?} (never enqueued, or finished and not remembered)",
            args.queue.queue, args.id
        )))
    }
}
