//! `dlm queue result | progress`: what a task left, and how far a running
//! one is (issue 24).

use std::io::Write;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::payload::JsonPayload;
use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{parse_delay, parse_task_id};
use crate::global::{Global, QueueArg, ShardKeyArg};
use crate::output;

/// `dlm queue result`
#[derive(Debug, Clone, Args)]
pub struct ResultArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The task id.
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub id: String,
    /// When there is none yet, wait for it this long at most (woken by the
    /// ack that stores it; default: do not wait).
    #[arg(long, value_name = "D", default_value = "0s", value_parser = parse_delay, allow_hyphen_values = true)]
    pub wait: Duration,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub shard_key: ShardKeyArg,
}

/// `dlm queue progress`
#[derive(Debug, Clone, Args)]
pub struct ProgressArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The task id (inside `queue work`'s command: "$DLM_TASK_ID").
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub id: String,
    /// Percent done, 0 to 100. Without it: show the task's progress.
    #[arg(value_name = "PCT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub pct: Option<u8>,
    /// What to say with it (at most 1024 bytes).
    #[arg(value_name = "MESSAGE", default_value = "")]
    pub message: String,
    /// The fencing token of the task's lease (default: $DLM_TASK_FENCE, as
    /// `queue work` gives its command): a stale one is refused.
    #[arg(long, value_name = "F", env = "DLM_TASK_FENCE")]
    pub fence: Option<u64>,
}

#[derive(Serialize)]
struct ResultLine<'a> {
    queue: &'a str,
    id: &'a str,
    #[serde(flatten)]
    result: JsonPayload,
}

/// `dlm queue result`: the result's bytes on stdout as they are (JSON:
/// {"queue","id","payload"(,"payload_base64")}); exit 1 when there is none
/// (yet, or within --wait).
pub async fn result(global: &Global, args: &ResultArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let found = if args.wait.is_zero() {
        queue.result(&args.id).await?
    } else {
        queue.wait_result(&args.id, args.wait).await?
    };
    let Some(bytes) = found else {
        return Err(CliError::No(format!(
            "task {:?} has no result (not finished, none left, or forgotten)",
            args.id
        )));
    };
    if global.json {
        let line = ResultLine {
            queue: &args.queue.queue,
            id: &args.id,
            result: JsonPayload::new(Some(bytes)),
        };
        output::emit(true, &line, String::new)?;
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes)
            .and_then(|()| out.flush())
            .map_err(CliError::io("writing the result"))?;
    }
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct ProgressLine<'a> {
    queue: &'a str,
    id: &'a str,
    pct: u8,
    message: &'a str,
}

/// `dlm queue progress`: with PCT, record it under the lease (exit 1 when
/// the lease is stale); without, print the task's progress (exit 1: none).
pub async fn progress(global: &Global, args: &ProgressArgs) -> Result<u8, CliError> {
    if args.message.len() > dlm::queue::MAX_PROGRESS_MESSAGE {
        return Err(CliError::Usage(format!(
            "the message is {} bytes, longer than {}",
            args.message.len(),
            dlm::queue::MAX_PROGRESS_MESSAGE
        )));
    }
    let queue = args.queue.open(global).await?;
    let Some(pct) = args.pct else {
        let Some(p) = queue.progress(&args.id).await? else {
            return Err(CliError::No(format!(
                "task {:?} reports no progress (not running, or nothing reported)",
                args.id
            )));
        };
        let line = ProgressLine {
            queue: &args.queue.queue,
            id: &args.id,
            pct: p.pct,
            message: &p.message,
        };
        output::emit(global.json, &line, || format!("{}% {}", p.pct, p.message))?;
        return Ok(EXIT_OK);
    };
    let Some(fence) = args.fence else {
        return Err(CliError::Usage(
            "no lease: give --fence F (inside `queue work`'s command, DLM_TASK_FENCE is set)"
                .into(),
        ));
    };
    queue
        .report_progress(&args.id, dlm::Fence::new(fence), pct, &args.message)
        .await?;
    if global.json {
        let line = ProgressLine {
            queue: &args.queue.queue,
            id: &args.id,
            pct,
            message: &args.message,
        };
        output::emit(true, &line, String::new)?;
    }
    Ok(EXIT_OK)
}
