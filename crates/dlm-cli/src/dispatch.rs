//! `dlm demo dispatch`: the source documents' task dispatch (seed 003), end
//! to end. M review tasks wait in a queue; N editors (tokio tasks, each with
//! its own client) take one task at a time (concurrency 1, a lease of
//! `--limit`). Some editors walk away: they take a task and never finish
//! it, without a word. Their tasks come back to the pool when the time
//! limit runs out and other editors finish them ("no dead tasks").
//!
//! The history of every finish (who, which task, which attempt) and the
//! queue's own processed count are checked at the end: exit 0 only if every
//! task was finished and acked exactly once, every abandoned task was
//! finished by another editor after its time limit, and nothing died.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use dlm::queue::{NewTask, OnDuplicate, Queue, WorkerOptions};
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::Global;
use crate::global::parse::parse_lease;
use crate::global::target::{Target, connect};
use crate::output;
use crate::rng::{SplitMix, seed};

/// `dlm demo dispatch`
#[derive(Debug, Clone, Args)]
pub struct DispatchArgs {
    /// Editors, each holding at most one task at a time.
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub editors: u64,
    /// Review tasks.
    #[arg(long, value_name = "M", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub tasks: u64,
    /// The time limit of a task (its lease): a task not finished by then goes
    /// back to the pool.
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_lease)]
    pub limit: Duration,
    /// How many editors walk away (default: a third of them, at least one
    /// when there are two or more; always fewer than --editors).
    #[arg(long, value_name = "K")]
    pub walk_away: Option<u64>,
}

/// One editor's line (JSON with `--json`).
#[derive(Debug, Serialize)]
struct EditorLine {
    editor: String,
    walks_away: bool,
    done: u64,
    abandoned: u64,
}

/// The totals (JSON with `--json`).
#[derive(Debug, Serialize)]
struct Totals {
    tasks: u64,
    editors: u64,
    done: u64,
    done_once_each: bool,
    processed: u64,
    abandoned: u64,
    returned_after_timeout: u64,
    dead: u64,
    time_ms: u64,
    exact: bool,
    #[serde(skip)]
    problems: Vec<String>,
}

/// What the editors did, in the order it happened.
#[derive(Debug, Default)]
struct History {
    /// (editor, task id, attempt) per acked task.
    done: Vec<(usize, String, u32)>,
    /// (editor, task id) per task taken and never finished.
    abandoned: Vec<(usize, String)>,
}

type Shared = Arc<Mutex<History>>;

fn record(history: &Shared, f: impl FnOnce(&mut History)) {
    match history.lock() {
        Ok(mut h) => f(&mut h),
        Err(poisoned) => f(&mut poisoned.into_inner()),
    }
}

/// A review takes 10 to 40 ms.
fn review_time() -> Duration {
    Duration::from_millis(10 + SplitMix(seed(0)).next() % 30)
}

/// A walking-away editor: finishes `before` tasks, then takes one and leaves
/// (the lease is dropped: no ack, no give-back, no renewal).
async fn walker(
    queue: Queue,
    me: usize,
    before: usize,
    limit: Duration,
    history: Shared,
) -> Result<(), CliError> {
    let mut finished = 0;
    let started = Instant::now();
    while started.elapsed() < limit * 4 {
        let Some(lease) = queue.claim(1, limit).await?.pop() else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let task = lease.task().clone();
        if finished == before {
            record(&history, |h| h.abandoned.push((me, task.id)));
            drop(lease);
            return Ok(());
        }
        tokio::time::sleep(review_time()).await;
        match lease.ack().await {
            Ok(()) => {
                record(&history, |h| h.done.push((me, task.id, task.attempt)));
                finished += 1;
            }
            // Over the time limit: the task went back to the pool.
            Err(e) if e.is_lock_lost() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// An editor who finishes every task it takes: a worker with concurrency 1,
/// until the pool is empty and nothing is held (abandoned tasks included).
async fn editor(queue: Queue, me: usize, limit: Duration, history: Shared) -> Result<(), CliError> {
    let opts = WorkerOptions::new()
        .concurrency(1)
        .lease(limit)
        .idle_wait((limit / 4).clamp(Duration::from_millis(10), Duration::from_millis(250)))
        .exit_when_empty(true);
    queue
        .worker(opts)
        .run(
            move |task| {
                let history = history.clone();
                async move {
                    tokio::time::sleep(review_time()).await;
                    record(&history, |h| h.done.push((me, task.id, task.attempt)));
                    Ok::<(), std::convert::Infallible>(())
                }
            },
            dlm::CancellationToken::new(),
        )
        .await?;
    Ok(())
}

/// `dlm demo dispatch`: exit 0 when every task was done exactly once.
pub async fn run(global: &Global, args: &DispatchArgs) -> Result<u8, CliError> {
    let editors = usize::try_from(args.editors).unwrap_or(1);
    let walkers = match args.walk_away {
        Some(k) if k >= args.editors => {
            return Err(CliError::Usage(format!(
                "--walk-away {k} leaves nobody to finish the work: it must be below --editors {}",
                args.editors
            )));
        }
        Some(k) => usize::try_from(k).unwrap_or(0),
        None if editors >= 2 => editors.div_ceil(3).min(editors - 1),
        None => 0,
    };
    let target = Target::given_or_private(global).await?;
    let client = connect(global, &target.url).await?;
    let name = format!("demo:dispatch:{:08x}", SplitMix(seed(0)).next() as u32);
    let queue = client.queue(name.as_str());
    let ids: Vec<String> = (1..=args.tasks).map(|i| format!("review:{i}")).collect();
    for chunk in ids.chunks(dlm::queue::MAX_BATCH) {
        queue
            .enqueue(
                chunk.iter().map(|id| NewTask::new(id.clone())),
                Duration::ZERO,
                OnDuplicate::Keep,
            )
            .await?;
    }

    let history: Shared = Arc::default();
    let started = Instant::now();
    let mut running = Vec::new();
    for me in 0..editors {
        // Every editor has a client of its own, as on separate hosts.
        let queue = connect(global, &target.url).await?.queue(name.as_str());
        let history = history.clone();
        running.push(if me < walkers {
            tokio::spawn(walker(queue, me, me, args.limit, history))
        } else {
            tokio::spawn(editor(queue, me, args.limit, history))
        });
    }
    for r in running {
        r.await.map_err(|e| CliError::Io {
            what: "running an editor",
            source: std::io::Error::other(e),
        })??;
    }
    let time = started.elapsed();
    let stats = queue.stats().await?;
    let mut history_taken = History::default();
    record(&history, |h| history_taken = std::mem::take(h));
    let history = history_taken;
    let mut totals = judge(&ids, &history, stats.processed, stats.dead, time);
    totals.editors = args.editors;

    let lines: Vec<EditorLine> = (0..editors)
        .map(|me| EditorLine {
            editor: format!("editor-{}", me + 1),
            walks_away: me < walkers,
            done: history.done.iter().filter(|d| d.0 == me).count() as u64,
            abandoned: history.abandoned.iter().filter(|a| a.0 == me).count() as u64,
        })
        .collect();
    if global.json {
        for line in &lines {
            output::emit(true, line, String::new)?;
        }
        output::emit(true, &totals, String::new)?;
    } else {
        output::line_out(&table(args, &target, walkers, &lines, &totals))?;
    }
    if totals.exact {
        Ok(EXIT_OK)
    } else {
        Err(CliError::DemoFailed(format!(
            "dispatch was not exact: {}",
            totals.problems.join("; ")
        )))
    }
}

/// Check the history: every task done exactly once, every abandoned task
/// done later by another editor, the queue's count agreeing, nothing dead.
fn judge(ids: &[String], history: &History, processed: u64, dead: u64, time: Duration) -> Totals {
    let mut times: HashMap<&str, u64> = ids.iter().map(|id| (id.as_str(), 0)).collect();
    let mut problems = Vec::new();
    for (_, id, _) in &history.done {
        match times.get_mut(id.as_str()) {
            Some(n) => *n += 1,
            None => problems.push(format!("{id} is no task of this run")),
        }
    }
    let twice: Vec<&str> = times
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    let never: Vec<&str> = times
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(id, _)| *id)
        .collect();
    if !twice.is_empty() {
        problems.push(format!("done more than once: {twice:?}"));
    }
    if !never.is_empty() {
        problems.push(format!("never done: {never:?}"));
    }
    let returned = history
        .abandoned
        .iter()
        .filter(|(who, id)| {
            history
                .done
                .iter()
                .any(|(by, done, attempt)| done == id && by != who && *attempt >= 2)
        })
        .count() as u64;
    if returned != history.abandoned.len() as u64 {
        problems.push(format!(
            "{} abandoned tasks, {returned} finished by another editor after the time limit",
            history.abandoned.len()
        ));
    }
    let tasks = ids.len() as u64;
    if processed != tasks {
        problems.push(format!(
            "the queue counted {processed} processed, not {tasks}"
        ));
    }
    if dead > 0 {
        problems.push(format!("{dead} tasks died"));
    }
    Totals {
        tasks,
        editors: 0,
        done: history.done.len() as u64,
        done_once_each: twice.is_empty() && never.is_empty(),
        processed,
        abandoned: history.abandoned.len() as u64,
        returned_after_timeout: returned,
        dead,
        time_ms: output::ms(time),
        exact: problems.is_empty(),
        problems,
    }
}

fn table(
    args: &DispatchArgs,
    target: &Target,
    walkers: usize,
    lines: &[EditorLine],
    t: &Totals,
) -> String {
    let mut out = format!(
        "dispatch: {} review tasks, {} editors ({walkers} walk away), time limit {}, on {}\n\n",
        args.tasks,
        args.editors,
        humantime::format_duration(args.limit),
        target.describe()
    );
    out.push_str(&format!(
        "{:<12} {:<11} {:>6} {:>10}\n",
        "editor", "", "done", "abandoned"
    ));
    for l in lines {
        let kind = if l.walks_away { "walks away" } else { "" };
        out.push_str(&format!(
            "{:<12} {:<11} {:>6} {:>10}\n",
            l.editor, kind, l.done, l.abandoned
        ));
    }
    out.push_str(&format!(
        "{:<12} {:<11} {:>6} {:>10}\n\n",
        "total", "", t.done, t.abandoned
    ));
    out.push_str(&format!(
        "done once each:          {} ({} tasks, {} done, queue processed {})\n",
        if t.done_once_each { "yes" } else { "NO" },
        t.tasks,
        t.done,
        t.processed
    ));
    out.push_str(&format!(
        "returned after timeout:  {} of {} abandoned, each finished by another editor\n",
        t.returned_after_timeout, t.abandoned
    ));
    out.push_str(&format!("dead:                    {}\n", t.dead));
    out.push_str(&format!(
        "time:                    {}\n",
        output::human(Duration::from_millis(t.time_ms))
    ));
    out.push_str(if t.exact {
        "exact: every task was done exactly once"
    } else {
        "NOT exact"
    });
    out
}
