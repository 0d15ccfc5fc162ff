//! `dlm queue push | peek | pop | remove | stats | dead | retry | purge`:
//! one library call each (`queue work` is in [`crate::work_cmd`]).

use std::io::Read;
use std::time::Duration;

use clap::Args;
use dlm::queue::{DEFAULT_MAX_PAYLOAD, Enqueued, NewTask, OnDuplicate, Removed};
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{parse_delay, parse_task_id};
use crate::global::{Global, QueueArg};
use crate::output;

/// `dlm queue push`
#[derive(Debug, Clone, Args)]
pub struct PushArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The task ids (1 to 1024 bytes each; at most 10000).
    #[arg(value_name = "ID", required = true, num_args = 1.., value_parser = parse_task_id)]
    pub ids: Vec<String>,
    /// Due this long from now (default: now; at most 365 days).
    #[arg(long, value_name = "D", default_value = "0s", value_parser = parse_delay, allow_hyphen_values = true)]
    pub delay: Duration,
    /// The payload, as given.
    #[arg(long, value_name = "STR", conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// The payload, read from a file (`-`: stdin); any bytes.
    #[arg(long, value_name = "F")]
    pub payload_file: Option<std::path::PathBuf>,
    /// Replace a task with the same id that is waiting or in flight (new due
    /// time and payload); default: keep it.
    #[arg(long)]
    pub replace: bool,
}

/// `dlm queue peek | pop`
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// How many tasks at most (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: u32,
}

/// `dlm queue dead`
#[derive(Debug, Clone, Args)]
pub struct DeadArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// How many tasks at most (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: u32,
}

/// `dlm queue remove`
#[derive(Debug, Clone, Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The task id.
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub id: String,
    /// The due time the task was seen with (peek's `score`).
    #[arg(long, value_name = "S")]
    pub score: u64,
}

/// `dlm queue retry`
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "all"])))]
pub struct RetryArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The dead tasks to retry (at most 10000).
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub ids: Vec<String>,
    /// Retry every dead task.
    #[arg(long)]
    pub all: bool,
}

/// `dlm queue purge`
#[derive(Debug, Clone, Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// Delete every task in the dead-letter set (required).
    #[arg(long, required = true)]
    pub dead: bool,
}

/// Standard base64 with padding (RFC 4648), for payloads that are not UTF-8.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextets = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, s) in sextets.iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[*s as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A payload for JSON: the text when it is UTF-8, else base64 with a flag.
#[derive(Debug, Serialize)]
pub struct JsonPayload {
    /// The payload (text or base64), or null.
    pub payload: Option<String>,
    /// Present (true) only when `payload` is base64.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub payload_base64: bool,
}

impl JsonPayload {
    /// Encode `payload`.
    pub fn new(payload: Option<Vec<u8>>) -> Self {
        match payload {
            None => JsonPayload {
                payload: None,
                payload_base64: false,
            },
            Some(bytes) => match String::from_utf8(bytes) {
                Ok(text) => JsonPayload {
                    payload: Some(text),
                    payload_base64: false,
                },
                Err(e) => JsonPayload {
                    payload: Some(base64(e.as_bytes())),
                    payload_base64: true,
                },
            },
        }
    }
}

fn too_large(len: u64) -> CliError {
    CliError::Usage(format!(
        "the payload is {len} bytes, larger than the limit of {DEFAULT_MAX_PAYLOAD} bytes ({} KiB)",
        DEFAULT_MAX_PAYLOAD / 1024
    ))
}

/// The payload of `push`, read and size-checked before anything is sent.
fn read_payload(args: &PushArgs) -> Result<Option<Vec<u8>>, CliError> {
    let limit = DEFAULT_MAX_PAYLOAD as u64;
    let bytes = if let Some(text) = &args.payload {
        text.as_bytes().to_vec()
    } else if let Some(path) = &args.payload_file {
        let mut buf = Vec::new();
        let read = if path.as_os_str() == "-" {
            std::io::stdin()
                .lock()
                .take(limit + 1)
                .read_to_end(&mut buf)
        } else {
            std::fs::File::open(path).and_then(|f| f.take(limit + 1).read_to_end(&mut buf))
        };
        read.map_err(|e| {
            CliError::Usage(format!(
                "cannot read the payload file {}: {e}",
                path.display()
            ))
        })?;
        if buf.len() as u64 > limit {
            let len = std::fs::metadata(path)
                .ok()
                .filter(|m| m.is_file())
                .map_or(buf.len() as u64, |m| m.len());
            return Err(too_large(len));
        }
        buf
    } else {
        return Ok(None);
    };
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(Some(bytes))
}

#[derive(Serialize)]
struct Pushed<'a> {
    id: &'a str,
    status: &'static str,
    score: Option<u64>,
}

/// `dlm queue push`: one enqueue call for every id.
pub async fn push(global: &Global, args: &PushArgs) -> Result<u8, CliError> {
    if args.ids.len() > dlm::queue::MAX_BATCH {
        return Err(CliError::Usage(format!(
            "{} ids; one push takes at most {}",
            args.ids.len(),
            dlm::queue::MAX_BATCH
        )));
    }
    let payload = read_payload(args)?;
    let queue = args.queue.open(global).await?;
    let tasks = args.ids.iter().map(|id| {
        let t = NewTask::new(id.clone());
        match &payload {
            Some(p) => t.payload(p.clone()),
            None => t,
        }
    });
    let on_duplicate = if args.replace {
        OnDuplicate::Replace
    } else {
        OnDuplicate::Keep
    };
    let results = queue.enqueue(tasks, args.delay, on_duplicate).await?;
    for (id, result) in args.ids.iter().zip(results) {
        let (status, score) = match result {
            Enqueued::Added(s) => ("added", Some(s)),
            Enqueued::Kept(s) => ("kept", s),
            Enqueued::Replaced(s) => ("replaced", Some(s)),
        };
        let line = Pushed { id, status, score };
        output::emit(global.json, &line, || match result {
            Enqueued::Kept(_) => format!("kept {id}"),
            _ => format!("{status} {id} {}", score.unwrap_or_default()),
        })?;
    }
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct EntryLine<'a> {
    id: &'a str,
    score: u64,
    #[serde(flatten)]
    payload: JsonPayload,
}

/// `dlm queue peek` (`take` false) and `dlm queue pop` (`take` true): JSON lines.
pub async fn list(global: &Global, args: &ListArgs, take: bool) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let count = args.count as usize;
    let entries = if take {
        queue.pop(count).await?
    } else {
        queue.top(count).await?
    };
    for e in entries {
        let line = EntryLine {
            id: &e.id,
            score: e.score,
            payload: JsonPayload::new(e.payload),
        };
        output::emit(true, &line, String::new)?;
    }
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct RemovedLine<'a> {
    id: &'a str,
    removed: bool,
    reason: Option<&'static str>,
    score: Option<u64>,
}

/// `dlm queue remove`: exit 0 when removed, 1 when the score changed or the task is absent.
pub async fn remove(global: &Global, args: &RemoveArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let id = args.id.as_str();
    let (line, error) = match queue.remove_if_score(id, args.score).await? {
        Removed::Removed => (
            RemovedLine {
                id,
                removed: true,
                reason: None,
                score: Some(args.score),
            },
            None,
        ),
        Removed::ScoreChanged(now) => (
            RemovedLine {
                id,
                removed: false,
                reason: Some("score_changed"),
                score: Some(now),
            },
            Some(format!(
                "task {id:?} not removed: it was re-enqueued and is due at {now} now, not at {}",
                args.score
            )),
        ),
        Removed::NotPresent => (
            RemovedLine {
                id,
                removed: false,
                reason: Some("not_present"),
                score: None,
            },
            Some(format!(
                "task {id:?} not removed: it is not waiting in the queue (absent, taken or in flight)"
            )),
        ),
    };
    if global.json {
        output::emit(true, &line, String::new)?;
    }
    match error {
        None => Ok(EXIT_OK),
        Some(message) => Err(CliError::No(message)),
    }
}

#[derive(Serialize)]
struct StatsLine<'a> {
    queue: &'a str,
    waiting: u64,
    delayed: u64,
    inflight: u64,
    dead: u64,
    processed: u64,
    failed: u64,
}

/// `dlm queue stats`.
pub async fn stats(global: &Global, args: &QueueArg) -> Result<u8, CliError> {
    let queue = args.open(global).await?;
    let s = queue.stats().await?;
    let line = StatsLine {
        queue: &args.queue,
        waiting: s.waiting,
        delayed: s.delayed,
        inflight: s.inflight,
        dead: s.dead,
        processed: s.processed,
        failed: s.failed,
    };
    output::emit(global.json, &line, || {
        format!(
            "{}: waiting {}, delayed {}, inflight {}, dead {}, processed {}, failed {}",
            line.queue,
            line.waiting,
            line.delayed,
            line.inflight,
            line.dead,
            line.processed,
            line.failed
        )
    })?;
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct DeadLine<'a> {
    id: &'a str,
    died_at: u64,
    error: Option<&'a str>,
    #[serde(flatten)]
    payload: JsonPayload,
}

/// `dlm queue dead`: JSON lines, oldest death first.
pub async fn dead(global: &Global, args: &DeadArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    for d in queue.dead(args.count as usize).await? {
        let line = DeadLine {
            id: &d.id,
            died_at: d.died_at,
            error: d.error.as_deref(),
            payload: JsonPayload::new(d.payload),
        };
        output::emit(true, &line, String::new)?;
    }
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct Count<'a> {
    queue: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retried: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    purged: Option<usize>,
}

/// `dlm queue retry (ID... | --all)`: prints how many moved back.
pub async fn retry(global: &Global, args: &RetryArgs) -> Result<u8, CliError> {
    if !args.all && args.ids.len() > dlm::queue::MAX_BATCH {
        return Err(CliError::Usage(format!(
            "{} ids; one retry takes at most {} (or use --all)",
            args.ids.len(),
            dlm::queue::MAX_BATCH
        )));
    }
    let queue = args.queue.open(global).await?;
    let n = if args.all {
        queue.retry_dead(None).await?
    } else {
        let ids: Vec<&str> = args.ids.iter().map(String::as_str).collect();
        queue.retry_dead(Some(&ids)).await?
    };
    let line = Count {
        queue: &args.queue.queue,
        retried: Some(n),
        purged: None,
    };
    output::emit(global.json, &line, || n.to_string())?;
    Ok(EXIT_OK)
}

/// `dlm queue purge --dead`: prints how many were deleted.
pub async fn purge(global: &Global, args: &PurgeArgs) -> Result<u8, CliError> {
    if !args.dead {
        return Err(CliError::Usage("say what to purge: --dead".into()));
    }
    let queue = args.queue.open(global).await?;
    let n = queue.purge_dead().await?;
    let line = Count {
        queue: &args.queue.queue,
        retried: None,
        purged: Some(n),
    };
    output::emit(global.json, &line, || n.to_string())?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn payloads_are_text_or_flagged_base64() -> Result<(), serde_json::Error> {
        let text = serde_json::to_value(JsonPayload::new(Some(b"hi".to_vec())))?;
        assert_eq!(text, serde_json::json!({"payload": "hi"}));
        let bin = serde_json::to_value(JsonPayload::new(Some(vec![0xff])))?;
        assert_eq!(
            bin,
            serde_json::json!({"payload": "/w==", "payload_base64": true})
        );
        let none = serde_json::to_value(JsonPayload::new(None))?;
        assert_eq!(none, serde_json::json!({"payload": null}));
        Ok(())
    }
}
