//! `dlm queue task Q ID`: everything known about one task, one library call
//! ([`dlm::queue::Queue::task`]).

use clap::Args;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::parse_task_id;
use crate::global::{Global, QueueArg, ShardKeyArg};
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
    #[command(flatten)]
    #[allow(missing_docs)]
    pub shard_key: ShardKeyArg,
}

/// `dlm queue task`: exit 0 with the task, 1 when the queue has no such task
/// (and remembers none): `state` is then `unknown`.
pub async fn task(global: &Global, args: &TaskArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let detail = queue.task(&args.id).await?;
    let line = output::TaskLine::new(&args.id, detail.as_ref());
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
        if let Some(w) = &line.worker {
            text.push_str(&format!(", ran on {w}"));
        }
        if let (Some(start), Some(end)) = (line.started_at, line.finished_at) {
            text.push_str(&format!(", took {} ms", end.saturating_sub(start)));
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
