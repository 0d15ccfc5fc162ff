//! `dlm queue events Q [--follow]`: the queue's event log, one line per task
//! event ([`dlm::queue::Queue::events_page`], [`dlm::queue::Queue::events`]).

use clap::Args;
use dlm::queue::{Event, EventsFrom};
use futures_util::StreamExt;
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::{Global, QueueArg};
use crate::output;
use crate::signals::Signals;

/// `dlm queue events`
#[derive(Debug, Clone, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// Keep printing events as they happen, until SIGINT or SIGTERM.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Where to start: `start` (the oldest entry kept), `now`, or a cursor
    /// printed earlier (the events after that entry).
    #[arg(long, value_name = "WHERE", default_value = "start")]
    pub from: String,
}

/// One event, as `--json` prints it.
#[derive(Serialize)]
struct EventLine<'a> {
    event: &'static str,
    id: &'a str,
    ts_ms: u64,
    cursor: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    progress: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
}

fn print(global: &Global, e: &Event) -> Result<(), CliError> {
    let line = EventLine {
        event: e.kind.as_str(),
        id: &e.task,
        ts_ms: e.at_ms,
        cursor: &e.cursor,
        error: e.error.as_deref(),
        progress: e.progress,
        message: e.message.as_deref(),
    };
    output::emit(global.json, &line, || {
        let mut text = format!("{} {:<9} {}", e.at_ms, line.event, line.id);
        if let Some(p) = line.progress {
            text.push_str(&format!(" {p}%"));
        }
        if let Some(m) = line.message.or(line.error) {
            text.push_str(&format!(" {m}"));
        }
        text
    })
}

/// `dlm queue events`: exit 0 (also when the log is off or empty; a note on
/// stderr says how to turn it on).
pub async fn events(global: &Global, args: &EventsArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let from = match args.from.as_str() {
        "start" => EventsFrom::Start,
        "now" => EventsFrom::Now,
        cursor if is_cursor(cursor) => EventsFrom::After(cursor.to_string()),
        other => {
            return Err(CliError::Usage(format!(
                "--from {other:?}: say start, now or a cursor like 1732000000000-0"
            )));
        }
    };
    if queue.settings().await?.get_events().is_none() {
        output::error_line(&format!(
            "the event log of queue {:?} is off: turn it on with `dlm queue config {} --events 10000`",
            args.queue.queue, args.queue.queue
        ));
    }
    if args.follow {
        let mut signals = Signals::install()?;
        let mut stream = std::pin::pin!(queue.events(from));
        loop {
            tokio::select! {
                _ = signals.recv() => return Ok(EXIT_OK),
                next = stream.next() => match next {
                    Some(Ok(e)) => print(global, &e)?,
                    Some(Err(e)) if e.is_retryable() => {
                        tracing::warn!(error = %e, "reading events failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    }
                    Some(Err(e)) => return Err(e.into()),
                    None => return Ok(EXIT_OK),
                },
            }
        }
    }
    let mut at = from;
    loop {
        let (page, next) = queue.events_page(&at, dlm::queue::MAX_EVENTS_PAGE).await?;
        if page.is_empty() {
            return Ok(EXIT_OK);
        }
        for e in &page {
            print(global, e)?;
        }
        at = next;
    }
}

/// `MS-SEQ`, as stream entry ids are.
fn is_cursor(s: &str) -> bool {
    match s.split_once('-') {
        Some((ms, seq)) => {
            !ms.is_empty()
                && !seq.is_empty()
                && ms.bytes().all(|b| b.is_ascii_digit())
                && seq.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}
