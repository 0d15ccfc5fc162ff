//! `dlm queue push | peek | pop | remove | stats | config | dead | retry | purge`
//! (and `schedule | schedules | unschedule`, in [`mod@schedule`]; `workers`,
//! in [`mod@workers`]; `result | progress`, in [`mod@results`]; `task`, in
//! [`mod@task`]; `events`, in [`mod@events`]; `check`, in [`mod@check`]):
//! one library call each (`queue work` is in [`crate::work_cmd`]).

use std::time::Duration;

use clap::Args;
use dlm::queue::{DependencyFailure, Enqueued, NewTask, OnDuplicate, QueueSettings, Removed};
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{
    parse_delay, parse_group, parse_priority, parse_task_id, parse_task_timeout,
};
use crate::global::{Global, QueueArg, SettingsArgs, ShardKeyArg};
use crate::output;

mod check;
mod events;
mod payload;
mod results;
mod schedule;
use crate::shard_view as shards;
mod task;
mod workers;

pub use check::{CheckArgs, check};
pub use events::{EventsArgs, events};
pub use results::{ProgressArgs, ResultArgs, progress, result};
pub use schedule::{ScheduleArgs, UnscheduleArgs, schedule, schedules, unschedule};
pub use task::{TaskArgs, task};
pub use workers::workers;

use payload::{JsonPayload, read_payload};

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
    /// time and payload); default: keep it. A replacement of a task in flight
    /// runs once the current run ends (acked, failed, expired or given back),
    /// never beside it.
    #[arg(long)]
    pub replace: bool,
    /// The tasks' priority: an integer, 0 ..= 1000, higher first (default 0).
    /// Among due tasks a higher priority is claimed first, FIFO within one.
    #[arg(long, value_name = "P", default_value_t = 0, value_parser = parse_priority, allow_hyphen_values = true)]
    pub priority: u16,
    /// The tasks' group (1 to 256 bytes): with a group concurrency K set on
    /// the queue, at most K tasks of one group run at once, across all workers.
    #[arg(long, value_name = "G", value_parser = parse_group)]
    pub group: Option<String>,
    /// The tasks' run-time limit (1ms to 7d; default: the worker's
    /// --task-timeout, if any): a worker cancels a task past it (`queue
    /// work`: SIGTERM, then SIGKILL after its --grace) and fails it with
    /// "timed out".
    #[arg(long, value_name = "D", value_parser = parse_task_timeout, allow_hyphen_values = true)]
    pub task_timeout: Option<Duration>,
    /// Dependencies: the tasks (of this queue) that must complete first,
    /// comma-separated. Until then the tasks are blocked. An unknown id or a
    /// cycle exits 2 and writes nothing.
    #[arg(long, value_name = "ID1,ID2", value_delimiter = ',', value_parser = parse_task_id)]
    pub after: Vec<String>,
    /// What the tasks do when a dependency dies: fail (die too, naming it)
    /// or ignore (run once the others are done).
    #[arg(
        long,
        value_name = "POLICY",
        default_value = "fail",
        requires = "after"
    )]
    pub on_dependency_failure: DepPolicy,
    /// Accept dependencies that are not known yet (enqueued later): the
    /// tasks wait until those ids are enqueued and complete.
    #[arg(long, requires = "after")]
    pub deps_may_come_later: bool,
    /// Spread the queue over K shards (1 to 64) if it has none yet: at its
    /// first push (no task, never sharded) the queue is made with K shards;
    /// a queue with K shards already is fine; one with another number exits
    /// 1 (change it with `queue config --shards`).
    #[arg(long, value_name = "K")]
    pub shards: Option<u16>,
    /// On a sharded queue, place the tasks by KEY instead of their ids:
    /// tasks with one key share a shard (de-dup by id exact among them). A
    /// group is its tasks' shard key: with --group, KEY must equal it
    /// (else exit 2); with --after, KEY's shard must be the dependencies'
    /// (else exit 2).
    #[arg(long, value_name = "KEY")]
    pub shard_key: Option<String>,
}

/// `--on-dependency-failure`
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DepPolicy {
    /// Die too, with the error "dependency 'ID' died".
    Fail,
    /// Count the dead dependency as done.
    Ignore,
}

/// `dlm queue config`
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub settings: SettingsArgs,
    /// Remove every setting (group concurrency, rate limit, completed
    /// history) before applying the flags given with it.
    #[arg(long)]
    pub clear: bool,
    /// Spread the queue over K shards (1 to 64): creates them on a queue
    /// never sharded, or raises K (no task moves). Lowering K is refused
    /// (exit 1) while the removed shards hold tasks, unless --drain; the
    /// same command again finishes a drain once they are empty.
    #[arg(long, value_name = "K")]
    pub shards: Option<u16>,
    /// With a lower --shards: start draining the removed shards (no new task
    /// goes there, workers still claim from them) instead of refusing.
    #[arg(long, requires = "shards")]
    pub drain: bool,
}

/// `dlm queue stats`
#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// Also one line per shard (tag, slot, counts) before the total; JSON:
    /// a "shards" array of per-shard objects, and "k", "layout", "draining".
    #[arg(long)]
    pub shards: bool,
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
    #[command(flatten)]
    #[allow(missing_docs)]
    pub shard_key: ShardKeyArg,
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
    #[command(flatten)]
    #[allow(missing_docs)]
    pub shard_key: ShardKeyArg,
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

#[derive(Serialize)]
struct Pushed<'a> {
    id: &'a str,
    status: &'static str,
    score: Option<u64>,
    /// The task's shard (0 on a queue not sharded; `null` for a task with
    /// --after on a sharded queue: it goes to its dependencies' shard).
    shard: Option<u16>,
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
    if let Some(k) = args.shards {
        shards::check_k(k)?;
    }
    let payload = read_payload(args)?;
    let queue = args.queue.open(global).await?;
    if let Some(k) = args.shards {
        shards::ensure_shards(&queue, k).await?;
    }
    let tasks: Vec<NewTask> = args
        .ids
        .iter()
        .map(|id| {
            let mut t = NewTask::new(id.clone()).priority(args.priority);
            if let Some(g) = &args.group {
                t = t.group(g.clone());
            }
            if let Some(k) = &args.shard_key {
                t = t.shard_key(k.clone());
            }
            if !args.after.is_empty() {
                t = t
                    .after(args.after.iter().cloned())
                    .on_dependency_failure(match args.on_dependency_failure {
                        DepPolicy::Fail => DependencyFailure::Fail,
                        DepPolicy::Ignore => DependencyFailure::Ignore,
                    })
                    .deps_may_come_later(args.deps_may_come_later);
            }
            if let Some(limit) = args.task_timeout {
                t = t.timeout(limit);
            }
            match &payload {
                Some(p) => t.payload(p.clone()),
                None => t,
            }
        })
        .collect();
    // Each task's shard, from the layout the push uses (cached: no extra
    // round trip); a task with dependencies goes to theirs, not known here.
    let mut placed: Vec<Option<u16>> = Vec::with_capacity(tasks.len());
    if global.json {
        let layout = queue.shards().await?;
        let sharded = layout.k > 1 || layout.draining.is_some();
        for t in &tasks {
            placed.push(if sharded && !args.after.is_empty() {
                None
            } else {
                Some(queue.shard_of(t).await?)
            });
        }
    }
    let on_duplicate = if args.replace {
        OnDuplicate::Replace
    } else {
        OnDuplicate::Keep
    };
    let results = queue.enqueue(tasks, args.delay, on_duplicate).await?;
    for (i, (id, result)) in args.ids.iter().zip(results).enumerate() {
        let (status, score) = match result {
            Enqueued::Added(s) => ("added", Some(s)),
            Enqueued::Kept(s) => ("kept", s),
            Enqueued::Replaced(s) => ("replaced", Some(s)),
            Enqueued::Blocked(s) => ("blocked", Some(s)),
            Enqueued::DependencyDied(s) => ("dead", Some(s)),
        };
        let line = Pushed {
            id,
            status,
            score,
            shard: placed.get(i).copied().flatten(),
        };
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
    /// The first name of the tasks in flight, kept for the scripts that read it.
    inflight: u64,
    /// The same count under the name `/api/queues`, the library and the
    /// Python API use.
    in_flight: u64,
    dead: u64,
    processed: u64,
    failed: u64,
    /// Workers claim nothing (`dlm queue pause`).
    paused: bool,
    /// Waiting for their dependencies (`queue push --after`).
    blocked: u64,
}

/// `queue pause` / `queue resume` in JSON.
#[derive(Serialize)]
struct PauseLine<'a> {
    queue: &'a str,
    paused: bool,
    was_paused: bool,
}

/// `dlm queue pause` (`pause` true) and `dlm queue resume`: exit 0 either way.
pub async fn pause(global: &Global, args: &QueueArg, pause: bool) -> Result<u8, CliError> {
    let queue = args.open(global).await?;
    let was_paused = if pause {
        queue.pause().await?
    } else {
        queue.resume().await?
    };
    let line = PauseLine {
        queue: &args.queue,
        paused: pause,
        was_paused,
    };
    output::emit(global.json, &line, || {
        let what = if pause { "paused" } else { "resumed" };
        format!("{what} {}", line.queue)
    })?;
    Ok(EXIT_OK)
}

/// `queue stats --shards` in JSON: today's object, and the shards.
#[derive(Serialize)]
struct ShardedStatsLine<'a> {
    #[serde(flatten)]
    total: StatsLine<'a>,
    k: u16,
    layout: u64,
    draining: Option<u16>,
    shards: Vec<shards::ShardStatsLine>,
}

/// `dlm queue stats` (with --shards: per shard, then the total).
pub async fn stats(global: &Global, args: &StatsArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let (s, per_shard) = if args.shards {
        let (layout, per) = shards::layout_and_stats(&queue).await?;
        (shards::total(&per), Some((layout, per)))
    } else {
        (queue.stats().await?, None)
    };
    let line = StatsLine {
        queue: &args.queue.queue,
        waiting: s.waiting,
        delayed: s.delayed,
        inflight: s.inflight,
        in_flight: s.inflight,
        dead: s.dead,
        processed: s.processed,
        failed: s.failed,
        paused: s.paused,
        blocked: s.blocked,
    };
    let total_text = |line: &StatsLine<'_>| {
        format!(
            "{}{}: waiting {}, delayed {}, inflight {}, dead {}, processed {}, failed {}, blocked {}",
            line.queue,
            if line.paused { " (paused)" } else { "" },
            line.waiting,
            line.delayed,
            line.inflight,
            line.dead,
            line.processed,
            line.failed,
            line.blocked
        )
    };
    match per_shard {
        None => output::emit(global.json, &line, || total_text(&line))?,
        Some((layout, per)) => {
            let lines = shards::shard_lines(&layout, &per);
            let text = {
                let mut out: Vec<String> = lines.iter().map(shards::ShardStatsLine::text).collect();
                out.push(total_text(&line));
                out.join("\n")
            };
            let all = ShardedStatsLine {
                total: line,
                k: layout.k,
                layout: layout.version,
                draining: layout.draining,
                shards: lines,
            };
            output::emit(global.json, &all, || text)?;
        }
    }
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct RateLine {
    n: u32,
    period_ms: u128,
}

#[derive(Serialize)]
struct ConfigLine<'a> {
    queue: &'a str,
    group_concurrency: Option<u32>,
    rate: Option<RateLine>,
    keep_completed: Option<u32>,
    /// The event log's cap (`null`: no log).
    events: Option<u32>,
    keep_results_ms: u128,
    /// The bound on the results' total bytes.
    keep_results_bytes: u64,
    /// How the queue is sharded (`shards`, `layout`, `draining`, and
    /// `draining_tasks` while draining): for a queue that is or was
    /// sharded, or with `--shards`; absent otherwise (as before issue 35).
    #[serde(flatten)]
    sharding: Option<shards::ShardsLine>,
}

/// Print a queue's settings (one line; JSON with --json), with how it is
/// sharded when `sharding` is given.
pub fn print_settings(
    global: &Global,
    queue: &str,
    s: &QueueSettings,
    sharding: Option<shards::ShardsLine>,
) -> Result<(), CliError> {
    let line = ConfigLine {
        queue,
        group_concurrency: s.get_group_concurrency(),
        rate: s.get_rate().map(|r| RateLine {
            n: r.n(),
            period_ms: r.period().as_millis(),
        }),
        keep_completed: s.get_keep_completed(),
        events: s.get_events(),
        keep_results_ms: s.get_keep_results().as_millis(),
        keep_results_bytes: s.get_keep_results_bytes(),
        sharding,
    };
    output::emit(global.json, &line, || {
        let or_none = |v: Option<u32>| v.map_or("none".to_string(), |v| v.to_string());
        format!(
            "{queue}: group concurrency {}, rate {}, keep completed {}, keep results {} (at most {} bytes), events {}",
            or_none(line.group_concurrency),
            line.rate.as_ref().map_or("none".to_string(), |r| format!(
                "{}/{}",
                r.n,
                humantime::format_duration(std::time::Duration::from_millis(
                    u64::try_from(r.period_ms).unwrap_or(u64::MAX)
                ))
            )),
            or_none(line.keep_completed),
            match s.get_keep_results() {
                d if d.is_zero() => "none".to_string(),
                d => humantime::format_duration(d).to_string(),
            },
            line.keep_results_bytes,
            or_none(line.events)
        ) + &line
            .sharding
            .as_ref()
            .map_or_else(String::new, shards::ShardsLine::text)
    })
}

/// `dlm queue config`: show (and with flags, change) the queue's settings.
pub async fn config(global: &Global, args: &ConfigArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    if args.clear {
        queue.clear_settings().await?;
    }
    let settings = if args.settings.any() || args.shards.is_some() {
        let mut change = args.settings.change();
        if let Some(k) = args.shards {
            change = change.shards(k).drain_shards(args.drain);
        }
        queue
            .configure(&change)
            .await
            .map_err(shards::map_reshard_error)?
    } else {
        queue.settings().await?
    };
    // A queue never sharded (and no --shards): the output as it always was.
    let sharding = Some(shards::ShardsLine::read(&queue).await?)
        .filter(|l| args.shards.is_some() || l.sharded());
    print_settings(global, &args.queue.queue, &settings, sharding)?;
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
