//! `dlm queue workers QUEUE`: the live workers of a queue (every running
//! `dlm queue work` and library `Worker` heartbeats a record of itself),
//! as a table, or with `--json` as one JSON object per line and worker.

use std::fmt::Write as _;
use std::time::Duration;

use crate::error::{CliError, EXIT_OK};
use crate::global::{Global, QueueArg};
use crate::output::{self, WorkerLine};

/// How many in-flight task ids the table shows per worker.
const IDS_SHOWN: usize = 3;

/// A short duration for the table: `350ms`, `12s`, `3m5s`, `2h4m`, `3d1h`.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}

/// Text from Redis, made safe for one table cell (no control characters).
fn cell(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// The table of `workers` (the header and one line per worker).
fn table(queue: &str, workers: &[WorkerLine]) -> String {
    if workers.is_empty() {
        return format!("no live worker on queue {}", cell(queue));
    }
    let rows: Vec<[String; 9]> = workers
        .iter()
        .map(|w| {
            let now = w.last_beat_ms.saturating_add(w.beat_age_ms);
            let mut flying: Vec<String> = w
                .in_flight
                .iter()
                .take(IDS_SHOWN)
                .map(|id| cell(id))
                .collect();
            if w.busy > flying.len() {
                flying.push(format!("+{} more", w.busy - flying.len()));
            }
            [
                cell(&w.id),
                cell(&w.host),
                w.pid.to_string(),
                short(Duration::from_millis(now.saturating_sub(w.started_ms))),
                format!("{}/{}", w.busy, w.concurrency),
                w.processed.to_string(),
                w.failed.to_string(),
                format!(
                    "{} ago{}",
                    short(Duration::from_millis(w.beat_age_ms)),
                    if w.stopping { " (stopping)" } else { "" }
                ),
                flying.join(", "),
            ]
        })
        .collect();
    let head = [
        "ID",
        "HOST",
        "PID",
        "UP",
        "BUSY",
        "PROCESSED",
        "FAILED",
        "LAST BEAT",
        "IN FLIGHT",
    ];
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&head);
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(&cells);
    }
    out.pop();
    out
}

/// `dlm queue workers`: exit 0, also when no worker is live.
pub async fn workers(global: &Global, args: &QueueArg) -> Result<u8, CliError> {
    let queue = args.open(global).await?;
    let lines: Vec<WorkerLine> = queue
        .workers()
        .await?
        .into_iter()
        .map(|w| WorkerLine::new(&args.queue, w))
        .collect();
    output::emit_each(global.json, &lines, || table(&args.queue, &lines))?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up_and_escapes_control_characters() {
        let w = WorkerLine {
            queue: "q".into(),
            id: "web-1".into(),
            host: "h\nost".into(),
            pid: 42,
            started_ms: 1_000,
            concurrency: 8,
            busy: 5,
            in_flight: vec!["a".into(), "b".into(), "c".into(), "d".into()],
            processed: 7,
            failed: 1,
            last_beat_ms: 66_000,
            beat_age_ms: 500,
            expires_ms: 81_000,
            ttl_ms: 15_000,
            stopping: false,
            version: "0.1.0".into(),
        };
        let t = table("q", &[w]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(lines[0].starts_with("ID     HOST"), "{t}");
        assert!(lines[1].contains("h\\nost"), "{t}");
        assert!(lines[1].contains("5/8"), "{t}");
        assert!(lines[1].contains("1m5s"), "{t}");
        assert!(lines[1].ends_with("a, b, c, +2 more"), "{t}");
        assert_eq!(table("q", &[]), "no live worker on queue q");
    }
}
