//! Looking into a queue without changing it: its tasks by state, one bounded
//! page at a time ([`Queue::tasks`]), the age of its oldest due task, and
//! the queues that exist ([`queue_names`], used by
//! [`crate::Client::queue_names`]). Made for dashboards and scripts.

use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::{Backend, glob_escape};
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::queue::keyset::{Buckets, eval_all};
use crate::queue::ops::{array, bytes, int, invocation, split_ids, text, unsigned};
use crate::token::Fence;

crate::queue::ops::script!(TASKS, ["payload"], "tasks.lua");
crate::queue::ops::script!(TASK, ["payload", "results"], "task.lua");

/// Everything known about one task ([`Queue::task`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskDetail {
    /// The task's id.
    pub id: String,
    /// Where it is now.
    pub state: TaskState,
    /// Waiting or delayed: its due time; in flight: its lease deadline;
    /// blocked: the due time it asked for; dead: when it died; completed:
    /// when that is forgotten (ms since the epoch, Redis clock; `None`: not known).
    pub score: Option<u64>,
    /// How many times it was claimed.
    pub attempts: u32,
    /// In flight: its lease's fencing token.
    pub fence: Option<Fence>,
    /// Its last error text (a failed attempt, or why it died).
    pub error: Option<String>,
    /// The progress its handler last reported, 0 ..= 100.
    pub progress: Option<u8>,
    /// The message that came with it.
    pub message: Option<String>,
    /// Its dependencies (a completed task's: those it ran after).
    pub deps: Vec<String>,
    /// The tasks that wait for it (a completed task's: those that waited
    /// for it when it finished).
    pub dependents: Vec<String>,
    /// Completed: when its last run started (its claim; ms since the
    /// epoch, Redis clock; `None`: not known).
    pub started_at: Option<u64>,
    /// Completed: when it was acked (ms since the epoch, Redis clock).
    pub finished_at: Option<u64>,
    /// Completed: the id of the worker that ran it
    /// ([`crate::queue::WorkerOptions::id`]; `None`: acked by hand).
    pub worker: Option<String>,
    /// Blocked: how many of its dependencies are not done yet.
    pub pending_deps: u32,
    /// Whether it ignores a dependency's death ([`crate::queue::DependencyFailure::Ignore`]).
    pub ignores_dependency_failure: bool,
    /// The length of its result, once it completed with one and while that is kept.
    pub result_bytes: Option<usize>,
    /// Its payload's length (`None`: no payload, or no longer there).
    pub payload_len: Option<usize>,
    /// Its priority.
    pub priority: u16,
    /// Its group.
    pub group: Option<String>,
    /// Its run-time limit, if it has one.
    pub timeout: Option<Duration>,
    /// The Redis server's clock when it was read (ms since the epoch).
    pub now: u64,
}

/// The most tasks one [`Queue::tasks`] call returns.
pub const MAX_PAGE: usize = 200;
/// The most payload bytes a [`TaskInfo`] carries.
pub const MAX_PREVIEW: usize = 4096;

/// The state of a task, as [`Queue::tasks`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Waiting for its dependencies to complete ([`crate::queue::NewTask::after`]).
    Blocked,
    /// Due now, waiting for a worker.
    Waiting,
    /// Due later (delayed or backing off after a failure).
    Delayed,
    /// Leased to a worker.
    InFlight,
    /// In the dead-letter set.
    Dead,
    /// Completed, and still remembered: by the results' TTL for tasks that
    /// returned a result or took part in dependencies, or by the
    /// `keep_completed` history ([`Queue::task`] only; [`Queue::tasks`]
    /// lists those of the results' TTL).
    Completed,
}

impl TaskState {
    /// Every state, in the order a task goes through them.
    pub const ALL: [TaskState; 6] = [
        TaskState::Blocked,
        TaskState::Waiting,
        TaskState::Delayed,
        TaskState::InFlight,
        TaskState::Dead,
        TaskState::Completed,
    ];

    /// Its name: `blocked`, `waiting`, `delayed`, `in_flight`, `dead` or `completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Blocked => "blocked",
            TaskState::Completed => "completed",
            TaskState::Waiting => "waiting",
            TaskState::Delayed => "delayed",
            TaskState::InFlight => "in_flight",
            TaskState::Dead => "dead",
        }
    }

    /// The state named `name` (as [`TaskState::as_str`] spells it).
    pub fn parse(name: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    fn script_arg(self) -> &'static str {
        match self {
            TaskState::InFlight => "inflight",
            other => other.as_str(),
        }
    }
}

/// One task as [`Queue::tasks`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskInfo {
    /// The task's id.
    pub id: String,
    /// Waiting or delayed: its due time; in flight: its lease deadline;
    /// dead: when it died (ms since the epoch, Redis clock).
    pub score: u64,
    /// How many times it was claimed.
    pub attempts: u32,
    /// In flight: the fencing token of its lease, which names the lease's
    /// holder (the worker that claimed it with this token).
    pub fence: Option<Fence>,
    /// Its payload's length in bytes (`None`: no payload).
    pub payload_len: Option<usize>,
    /// Its payload's first bytes (at most the preview length asked for).
    pub payload_preview: Option<Vec<u8>>,
    /// Its last error text (a failed attempt, or why it died).
    pub error: Option<String>,
}

/// One page of [`Queue::tasks`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskPage {
    /// The Redis server's clock when the page was read (ms since the epoch).
    pub now: u64,
    /// How many tasks are in that state in all.
    pub total: u64,
    /// The page, in order: earliest due (waiting: in claim order, priorities
    /// first, then tasks of groups at their limit), earliest lease deadline
    /// or oldest death first.
    pub tasks: Vec<TaskInfo>,
}

impl Queue {
    /// The tasks in `state`, skipping `offset` of them, at most `limit`
    /// (1 ..= [`MAX_PAGE`]), each with its first `preview` payload bytes
    /// (at most [`MAX_PREVIEW`]). Read in one script; nothing moves.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use dlm::queue::TaskState;
    /// let page = client.queue("emails").tasks(TaskState::Dead, 0, 50, 100).await?;
    /// for t in &page.tasks {
    ///     println!("{} after {} attempts: {:?}", t.id, t.attempts, t.error);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn tasks(
        &self,
        state: TaskState,
        offset: usize,
        limit: usize,
        preview: usize,
    ) -> Result<TaskPage> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid(
                "limit",
                format!("{limit} is outside 1 ..= {MAX_PAGE}"),
            ));
        }
        if let Some(l) = self.sharded_view().await? {
            // The shards one after another, as one list: skip `offset`
            // across them, then take `limit`.
            let (mut skip, mut left) = (offset as u64, limit);
            let mut page = TaskPage {
                now: 0,
                total: 0,
                tasks: Vec::new(),
            };
            for q in self.shard_handles(&l) {
                let from = usize::try_from(skip).unwrap_or(usize::MAX);
                let p = q.tasks_here(state, from, left.max(1), preview).await?;
                page.now = page.now.max(p.now);
                page.total += p.total;
                skip = skip.saturating_sub(p.total);
                if left > 0 {
                    let taken: Vec<TaskInfo> = p.tasks.into_iter().take(left).collect();
                    left -= taken.len();
                    page.tasks.extend(taken);
                }
            }
            return Ok(page);
        }
        self.tasks_here(state, offset, limit, preview).await
    }

    /// [`Queue::tasks`] on this handle's shard only.
    pub(crate) async fn tasks_here(
        &self,
        state: TaskState,
        offset: usize,
        limit: usize,
        preview: usize,
    ) -> Result<TaskPage> {
        let (backend, keys) = self.ready_hot()?;
        let build = |keys: &[String]| {
            let mut inv = invocation(&TASKS, keys);
            inv.arg(state.script_arg())
                .arg(offset)
                .arg(limit)
                .arg(preview.min(MAX_PREVIEW));
            inv
        };
        let reply = array(eval_all(backend, keys, Buckets::Any, build).await?)?;
        let (head, rest) = reply.split_at(reply.len().min(2));
        let [now, total] = head else {
            return Err(Error::protocol("short tasks reply"));
        };
        let tasks = rest
            .chunks(7)
            .map(|c| match c {
                [id, score, attempts, fence, len, preview, error] => Ok(TaskInfo {
                    id: text(id)?,
                    score: unsigned(int(score)?),
                    attempts: u32::try_from(int(attempts)?).unwrap_or(u32::MAX),
                    fence: match fence {
                        Value::Int(f) => Some(Fence::new(unsigned(*f))),
                        _ => None,
                    },
                    payload_len: usize::try_from(int(len)?).ok(),
                    payload_preview: bytes(preview),
                    error: bytes(error).map(|b| String::from_utf8_lossy(&b).into_owned()),
                }),
                _ => Err(Error::protocol("short task in tasks reply")),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TaskPage {
            now: unsigned(int(now)?),
            total: unsigned(int(total)?),
            tasks,
        })
    }

    /// Everything known about task `id` (`None`: not in the queue, and no
    /// completion of it is remembered). Read in one script; nothing moves.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// if let Some(t) = client.queue("etl").task("report").await? {
    ///     println!("{} is {}; waits for {:?}", t.id, t.state.as_str(), t.deps);
    ///     if let (Some(w), Some(at)) = (&t.worker, t.finished_at) {
    ///         println!("completed by {w} at {at} ms"); // kept while remembered
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn task(&self, id: &str) -> Result<Option<TaskDetail>> {
        crate::queue::check_id(id)?;
        self.holder_of(id).await?.task_here(id).await
    }

    /// [`Queue::task`] on this handle's shard only.
    pub(crate) async fn task_here(&self, id: &str) -> Result<Option<TaskDetail>> {
        let (backend, keys) = self.ready_hot()?;
        let build = |keys: &[String]| {
            let mut inv = invocation(&TASK, keys);
            inv.arg(id);
            inv
        };
        let v = array(eval_all(backend, keys, Buckets::Of(&[id], false), build).await?)?;
        let [
            state,
            score,
            attempts,
            fence,
            error,
            progress,
            deps,
            dependents,
            pending,
            result_len,
            payload_len,
            priority,
            group,
            depfail,
            timeout,
            now,
            summary,
        ] = v.as_slice()
        else {
            return Err(Error::protocol("task reply is not seventeen values"));
        };
        let state = text(state)?;
        let Some(state) = TaskState::parse(&state) else {
            return Ok(None);
        };
        let text_of = |v: &Value| bytes(v).map(|b| String::from_utf8_lossy(&b).into_owned());
        let (progress, message) = bytes(progress)
            .map(|raw| progress_parts(&raw))
            .unwrap_or_default();
        let ms = unsigned(int(timeout)?);
        // A completed task: what it was, kept with its result (issue 31).
        let kept = bytes(summary).and_then(|b| Summary::parse(&b));
        let (progress, message) = match &kept {
            Some(k) if progress.is_none() => progress_parts(&k.progress),
            _ => (progress, message),
        };
        Ok(Some(TaskDetail {
            id: id.to_string(),
            state,
            score: u64::try_from(int(score)?).ok(),
            attempts: match (&kept, int(attempts)?) {
                (Some(k), 0) => k.attempts,
                (_, n) => u32::try_from(n).unwrap_or(u32::MAX),
            },
            fence: bytes(fence)
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| s.parse::<u64>().ok())
                .map(Fence::new),
            error: text_of(error),
            progress,
            message,
            deps: bytes(deps)
                .or_else(|| kept.as_ref().map(|k| k.deps.clone()))
                .map(|d| split_ids(&d))
                .unwrap_or_default(),
            dependents: bytes(dependents)
                .or_else(|| kept.as_ref().map(|k| k.dependents.clone()))
                .map(|d| split_ids(&d))
                .unwrap_or_default(),
            started_at: kept.as_ref().and_then(|k| k.started),
            finished_at: kept.as_ref().and_then(|k| k.finished),
            worker: kept.as_ref().and_then(|k| k.worker.clone()),
            pending_deps: u32::try_from(int(pending)?).unwrap_or(0),
            ignores_dependency_failure: bytes(depfail).is_some(),
            result_bytes: usize::try_from(int(result_len)?).ok(),
            payload_len: usize::try_from(int(payload_len)?).ok(),
            priority: u16::try_from(int(priority)?).unwrap_or(0),
            group: text_of(group),
            timeout: (ms > 0).then(|| Duration::from_millis(ms)),
            now: unsigned(int(now)?),
        }))
    }

    /// How long the earliest due task has been waiting past its due time
    /// (`None`: nothing is due).
    pub async fn oldest_due_age(&self) -> Result<Option<Duration>> {
        let page = self.tasks(TaskState::Waiting, 0, 1, 0).await?;
        Ok(page
            .tasks
            .first()
            .map(|t| Duration::from_millis(page.now.saturating_sub(t.score))))
    }
}

/// A stored progress, "pct NUL message", as its percentage and message.
fn progress_parts(raw: &[u8]) -> (Option<u8>, Option<String>) {
    if raw.is_empty() {
        return (None, None);
    }
    let mut parts = raw.splitn(2, |b| *b == 0);
    let pct = parts
        .next()
        .and_then(|p| std::str::from_utf8(p).ok())
        .and_then(|p| p.parse::<u8>().ok());
    let msg = parts
        .next()
        .filter(|m| !m.is_empty())
        .map(|m| String::from_utf8_lossy(m).into_owned());
    (pct, msg)
}

/// What a finished task was, as ack.lua keeps it in front of its result
/// (results.lua's `summary_of`): its fields, each as its length, `:` and
/// its bytes.
#[derive(Debug, Default, PartialEq, Eq)]
struct Summary {
    attempts: u32,
    started: Option<u64>,
    finished: Option<u64>,
    worker: Option<String>,
    /// "pct NUL message" (empty: none).
    progress: Vec<u8>,
    /// NUL-terminated ids.
    deps: Vec<u8>,
    dependents: Vec<u8>,
}

impl Summary {
    /// `None`: not a summary this version writes.
    fn parse(raw: &[u8]) -> Option<Summary> {
        let mut fields = Vec::with_capacity(7);
        let mut rest = raw;
        while !rest.is_empty() {
            let colon = rest.iter().position(|b| *b == b':')?;
            let n: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
            let value = rest.get(colon + 1..colon + 1 + n)?;
            fields.push(value);
            rest = &rest[colon + 1 + n..];
        }
        let [
            attempts,
            started,
            finished,
            worker,
            progress,
            deps,
            dependents,
        ] = fields.as_slice()
        else {
            return None;
        };
        let number = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
        Some(Summary {
            attempts: number(attempts).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            started: number(started),
            finished: number(finished),
            worker: Some(String::from_utf8_lossy(worker).into_owned()).filter(|w| !w.is_empty()),
            progress: progress.to_vec(),
            deps: deps.to_vec(),
            dependents: dependents.to_vec(),
        })
    }
}

/// The keys every queue that holds or held a task has at least one of: a due
/// task with a priority or a group is in `ready` (or `parked`, its group at
/// its limit), not `waiting`; one waiting for dependencies is in `blocked`.
const QUEUE_KEY_SUFFIXES: [&str; 7] = [
    "}:waiting",
    "}:inflight",
    "}:dead",
    "}:stats",
    "}:ready",
    "}:parked",
    "}:blocked",
];

/// The names of up to `limit` queues found on `backend` by scanning
/// `dlm:queue:*` (with `SCAN`), sorted.
pub(crate) async fn queue_names(
    backend: &Backend,
    root: &str,
    limit: usize,
) -> Result<Vec<String>> {
    let prefix = format!("{root}queue:");
    let pattern = format!("{}{{*", glob_escape(&prefix));
    // Each queue has several keys: scan for more keys than names wanted.
    let keys = backend
        .scan(&pattern, limit.saturating_mul(QUEUE_KEY_SUFFIXES.len()))
        .await?;
    let mut names = BTreeSet::new();
    for key in &keys {
        let Some(rest) = key
            .strip_prefix(prefix.as_str())
            .and_then(|k| k.strip_prefix('{'))
        else {
            continue;
        };
        if let Some(name) = QUEUE_KEY_SUFFIXES
            .iter()
            .find_map(|suffix| rest.strip_suffix(suffix))
            .filter(|name| !name.is_empty())
        {
            names.insert(name.to_string());
        }
    }
    Ok(names.into_iter().take(limit).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_parse_as_results_lua_writes_them() {
        // attempts, started, finished, worker, progress, deps, dependents
        let raw = b"1:23:1000:1:w4:50\x00h4:a\x00b\x000:";
        let s = Summary::parse(raw);
        assert_eq!(
            s,
            Some(Summary {
                attempts: 2,
                started: Some(100),
                finished: None,
                worker: Some("w".into()),
                progress: b"50\0h".to_vec(),
                deps: b"a\0b\0".to_vec(),
                dependents: Vec::new(),
            })
        );
        assert_eq!(Summary::parse(b"1:2"), None, "too short");
        assert_eq!(Summary::parse(b"9:2"), None, "a length past the end");
        assert_eq!(Summary::parse(b"x:2"), None, "no length");
        assert_eq!(progress_parts(b"50\0half"), (Some(50), Some("half".into())));
        assert_eq!(progress_parts(b""), (None, None));
    }
}
