//! `dlm queue schedule | schedules | unschedule`: repeating tasks, one
//! library call each. Workers (`dlm queue work`) fire their ticks.

use std::time::Duration;

use clap::Args;
use dlm::queue::{Repeat, Scheduled};
use serde::Serialize;

use super::payload::JsonPayload;
use crate::error::{CliError, EXIT_NO, EXIT_OK};
use crate::global::parse::{parse_duration, parse_task_id};
use crate::global::{Global, QueueArg};
use crate::output;

/// `dlm queue schedule`
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["every", "cron"])))]
pub struct ScheduleArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The schedule's id; its tasks are ID@TICK (TICK in ms since the epoch).
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub id: String,
    /// Tick at every multiple of D since the epoch (100ms to 365 days), e.g. 1s, 5m.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub every: Option<Duration>,
    /// Tick at the times of a cron expression, UTC: 5 fields, or 6 with seconds first.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The payload of every task it enqueues.
    #[arg(long, value_name = "STR")]
    pub payload: Option<String>,
}

/// `dlm queue unschedule`
#[derive(Debug, Clone, Args)]
pub struct UnscheduleArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The schedule's id.
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub id: String,
}

#[derive(Serialize)]
struct ScheduleLine<'a> {
    id: &'a str,
    status: &'static str,
    repeat: String,
}

/// `dlm queue schedule`: add or change a schedule (exit 2 on a bad interval
/// or cron expression, with nothing written).
pub async fn schedule(global: &Global, args: &ScheduleArgs) -> Result<u8, CliError> {
    let repeat = match (&args.every, &args.cron) {
        (Some(d), None) => Repeat::Every(*d),
        (None, Some(expr)) => Repeat::Cron(expr.clone()),
        _ => return Err(CliError::Usage("give one of --every and --cron".into())),
    };
    let queue = args.queue.open(global).await?;
    let payload = args.payload.as_ref().map(|p| p.clone().into_bytes());
    let status = match queue.schedule(&args.id, repeat.clone(), payload).await? {
        Scheduled::Added => "added",
        Scheduled::Changed => "changed",
        Scheduled::Unchanged => "unchanged",
    };
    let line = ScheduleLine {
        id: &args.id,
        status,
        repeat: repeat.to_string(),
    };
    output::emit(global.json, &line, || {
        format!("{status} {} ({})", args.id, line.repeat)
    })?;
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct ListedLine<'a> {
    id: &'a str,
    every_ms: Option<u64>,
    cron: Option<&'a str>,
    next_tick: u64,
    #[serde(flatten)]
    payload: JsonPayload,
}

/// `dlm queue schedules`: JSON lines, soonest next tick first.
pub async fn schedules(global: &Global, args: &QueueArg) -> Result<u8, CliError> {
    let queue = args.open(global).await?;
    for s in queue.schedules(dlm::queue::MAX_SCHEDULES).await? {
        let (every_ms, cron) = match &s.repeat {
            Repeat::Every(d) => (Some(output::ms(*d)), None),
            Repeat::Cron(e) => (None, Some(e.as_str())),
        };
        let line = ListedLine {
            id: &s.id,
            every_ms,
            cron,
            next_tick: s.next_tick,
            payload: JsonPayload::new(s.payload.clone()),
        };
        output::emit(true, &line, String::new)?;
    }
    Ok(EXIT_OK)
}

/// `dlm queue unschedule`: exit 0 when removed, 1 when there was none.
pub async fn unschedule(global: &Global, args: &UnscheduleArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    if queue.unschedule(&args.id).await? {
        output::emit(
            global.json,
            &serde_json::json!({"id": args.id, "removed": true}),
            || format!("removed {}", args.id),
        )?;
        Ok(EXIT_OK)
    } else {
        output::emit(
            global.json,
            &serde_json::json!({"id": args.id, "removed": false}),
            || format!("no schedule {}", args.id),
        )?;
        Ok(EXIT_NO)
    }
}
