//! One Lua script per queue operation, and the decoding of their replies.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::Backend;
use crate::backend::millis;
use crate::error::{Error, Result};
use crate::queue::keyset::{Buckets, KeySet, eval_all, eval_hot};
use crate::queue::{
    Completed, DeadTask, Enqueued, Entry, NewTask, OnDuplicate, QueueSettings, QueueStats,
    RateLimit, Removed, Task, TaskProgress,
};
use crate::token::Fence;

macro_rules! script {
    ($name:ident, $file:literal) => {
        static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("scripts/", $file))));
    };
    // With helpers in front: groups.lua (groups and priorities) and/or
    // payload.lua (where payloads live: the single hash or its buckets).
    ($name:ident, [$($helper:literal),+], $file:literal) => {
        static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                $(include_str!(concat!("scripts/", $helper, ".lua")),)+
                include_str!(concat!("scripts/", $file))
            ))
        });
    };
    // The same, its whole text also kept as `$text` (see `chosen`).
    ($name:ident, $text:ident, [$($helper:literal),+], $file:literal) => {
        const $text: &str = concat!(
            $(include_str!(concat!("scripts/", $helper, ".lua")),)+
            include_str!(concat!("scripts/", $file))
        );
        static $name: LazyLock<Script> = LazyLock::new(|| Script::new($text));
    };
}
pub(crate) use script;

script!(
    ENQUEUE,
    ENQUEUE_LUA,
    [
        "layout_gate",
        "groups",
        "payload",
        "events",
        "results",
        "deps"
    ],
    "enqueue.lua"
);
script!(TOP, ["groups", "payload", "due"], "top.lua");
script!(
    POP,
    POP_LUA,
    ["groups", "payload", "due", "events", "results", "deps"],
    "pop.lua"
);
script!(
    REMOVE_IF_SCORE,
    REMOVE_IF_SCORE_LUA,
    ["groups", "payload", "due", "events", "results", "deps"],
    "remove_if_score.lua"
);
script!(
    CLAIM,
    CLAIM_LUA,
    [
        "layout_gate",
        "groups",
        "payload",
        "events",
        "results",
        "deps"
    ],
    "claim.lua"
);
script!(
    ACK,
    ACK_LUA,
    ["groups", "payload", "events", "results", "deps"],
    "ack.lua"
);
script!(RESULT, ["results"], "result.lua");
script!(PROGRESS, ["events"], "progress.lua");
script!(
    NACK,
    NACK_LUA,
    ["groups", "events", "results", "deps"],
    "nack.lua"
);
script!(EXTEND, "extend.lua");
script!(ABANDON, ["groups"], "abandon.lua");
script!(STATS, "stats.lua");
script!(PAUSE, "pause.lua");
script!(DEAD, ["payload"], "dead.lua");
script!(RETRY_DEAD, "retry_dead.lua");
script!(PURGE_DEAD, ["payload"], "purge_dead.lua");
script!(CONFIG, "config.lua");
script!(COMPLETED, "completed.lua");

/// How many expired leases one claim returns to the queue at most.
const REAP_PER_CLAIM: usize = 1000;

/// The script a queue runs for the fixed script `fixed` (whose whole text
/// is `_lua`): `fixed` itself, unless the queue's client was built with a
/// seeded defect that changes it (the `seeded-defects` feature, for dlm's own
/// checker tests only: see `crate::seeded`).
fn chosen(fixed: &'static LazyLock<Script>, _lua: &'static str, _keys: &KeySet) -> &'static Script {
    #[cfg(feature = "seeded-defects")]
    if let Some(variant) = crate::seeded::script(_keys.seeded(), _lua) {
        return variant;
    }
    fixed
}

pub(crate) fn invocation<'a>(script: &'a Script, keys: &[String]) -> redis::ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(k);
    }
    inv
}

pub(crate) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(Error::protocol(format!(
            "expected an integer, got {other:?}"
        ))),
    }
}

pub(crate) fn text(v: &Value) -> Result<String> {
    match v {
        Value::BulkString(b) => {
            String::from_utf8(b.clone()).map_err(|_| Error::protocol("a task id is not UTF-8"))
        }
        Value::SimpleString(s) => Ok(s.clone()),
        other => Err(Error::protocol(format!("expected a string, got {other:?}"))),
    }
}

pub(crate) fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

pub(crate) fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Nil => Ok(Vec::new()),
        other => Err(Error::protocol(format!("expected an array, got {other:?}"))),
    }
}

pub(crate) fn unsigned(i: i64) -> u64 {
    u64::try_from(i).unwrap_or(0)
}

/// A count a script returned (negative: none).
fn count_reply(v: Value) -> Result<usize> {
    let n: i64 = redis::from_redis_value(v)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Per-lease codes of ack.lua and extend.lua.
fn codes_reply(v: Value) -> Result<Vec<i64>> {
    Ok(redis::from_redis_value(v)?)
}

/// nack.lua's code.
fn code_reply(v: Value) -> Result<i64> {
    Ok(redis::from_redis_value(v)?)
}

pub(crate) async fn enqueue(
    backend: &Backend,
    keys: &KeySet,
    tasks: &[NewTask],
    delay: Duration,
    on_duplicate: OnDuplicate,
    compact: bool,
    layout: Option<u64>,
) -> Result<Option<Vec<Enqueued>>> {
    // Eight values per task only when a task of the call has a time limit or
    // dependencies: a plain batch costs Redis what it did before them.
    let full = tasks
        .iter()
        .any(|t| t.timeout.is_some() || !t.deps.is_empty());
    let script = chosen(&ENQUEUE, ENQUEUE_LUA, keys);
    let build = |keys: &[String]| {
        let mut inv = invocation(script, keys);
        inv.arg(millis(delay))
            .arg(match on_duplicate {
                OnDuplicate::Keep => "keep",
                OnDuplicate::Replace => "replace",
            })
            .arg(if compact { "1" } else { "0" });
        inv.arg(if full { 8 } else { 5 });
        for t in tasks {
            inv.arg(&t.id);
            match &t.payload {
                Some(p) => inv.arg("1").arg(p.as_slice()),
                None => inv.arg("0").arg(""),
            };
            inv.arg(t.priority).arg(t.group.as_deref().unwrap_or(""));
            if full {
                inv.arg(t.timeout.map_or(0, millis));
                inv.arg(deps_arg(&t.deps)).arg(deps_flags(t));
            }
        }
        if let Some(v) = layout {
            inv.arg(v);
        }
        inv
    };
    // The payload buckets of the call's ids: sent at once when this call
    // writes small payloads to them (payload.lua), else once the queue is
    // seen to use them (a replace deletes an old bucket entry).
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let writes_buckets = compact
        && tasks
            .iter()
            .any(|t| t.id.len() <= 64 && t.payload.as_ref().is_some_and(|p| p.len() <= 64));
    let reply = eval_hot(
        backend,
        keys,
        full,
        Buckets::Of(&ids, writes_buckets),
        build,
    )
    .await?;
    if is_layout_stale(&reply) {
        return Ok(None);
    }
    enqueue_reply(reply).map(Some)
}

/// Whether a hot script answered that the caller's layout is stale
/// (layout_gate.lua): nothing was written.
fn is_layout_stale(v: &Value) -> bool {
    matches!(v, Value::SimpleString(s) if s == "LAYOUT")
}

/// Dependencies as enqueue.lua takes them: each id followed by a NUL byte.
fn deps_arg(deps: &[String]) -> Vec<u8> {
    let mut out = Vec::with_capacity(deps.iter().map(|d| d.len() + 1).sum());
    for d in deps {
        out.extend_from_slice(d.as_bytes());
        out.push(0);
    }
    out
}

/// Dependency flags: 'i' ignore a dependency's death, 'l' unknown ids may come later.
fn deps_flags(t: &NewTask) -> &'static str {
    match (t.on_dep_failure, t.deps_may_come_later) {
        (crate::queue::DependencyFailure::Ignore, true) => "il",
        (crate::queue::DependencyFailure::Ignore, false) => "i",
        (crate::queue::DependencyFailure::Fail, true) => "l",
        (crate::queue::DependencyFailure::Fail, false) => "",
    }
}

/// NUL-terminated ids (deps.lua's lists).
pub(crate) fn split_ids(raw: &[u8]) -> Vec<String> {
    raw.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// enqueue.lua: per task a status and a due time, or why nothing was written.
fn enqueue_reply(v: Value) -> Result<Vec<Enqueued>> {
    let v = array(v)?;
    if let Some(Value::BulkString(kind)) = v.first() {
        let arg = |i: usize| {
            v.get(i)
                .map(text)
                .transpose()
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        let (a, b) = (arg(1), arg(2));
        return Err(match kind.as_slice() {
            b"unknown" => Error::invalid(
                "after",
                format!(
                    "task {b:?}: dependency {a:?} is not known (never enqueued, or completed and \
                     no longer remembered: see keep_results); nothing was enqueued (allow unknown \
                     ids with deps_may_come_later)"
                ),
            ),
            b"cycle" => Error::invalid(
                "after",
                format!(
                    "a dependency cycle: {a:?} already leads (through its dependents) to {b:?}, \
                     which would wait for it; nothing was enqueued"
                ),
            ),
            other => Error::protocol(format!(
                "enqueue refused with {:?}",
                String::from_utf8_lossy(other)
            )),
        });
    }
    v.chunks(2)
        .map(|c| match c {
            [status, score] => {
                let score = int(score)?;
                Ok(match int(status)? {
                    1 => Enqueued::Added(unsigned(score)),
                    2 => Enqueued::Replaced(unsigned(score)),
                    3 => Enqueued::Blocked(unsigned(score)),
                    4 => Enqueued::DependencyDied(unsigned(score)),
                    _ => Enqueued::Kept(u64::try_from(score).ok()),
                })
            }
            _ => Err(Error::protocol("odd enqueue reply")),
        })
        .collect()
}

/// Which of the two read scripts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Peek {
    Top,
    Pop,
}

pub(crate) async fn entries(
    backend: &Backend,
    keys: &KeySet,
    which: Peek,
    count: usize,
) -> Result<Vec<Entry>> {
    let script = match which {
        Peek::Top => &*TOP,
        Peek::Pop => chosen(&POP, POP_LUA, keys),
    };
    let build = |keys: &[String]| {
        let mut inv = invocation(script, keys);
        inv.arg(count);
        inv
    };
    entries_reply(eval_all(backend, keys, Buckets::Any, build).await?)
}

/// top.lua and pop.lua: per task an id, a due time and a payload.
fn entries_reply(v: Value) -> Result<Vec<Entry>> {
    array(v)?
        .chunks(3)
        .map(|c| match c {
            [id, score, payload] => Ok(Entry {
                id: text(id)?,
                score: unsigned(int(score)?),
                payload: bytes(payload),
            }),
            _ => Err(Error::protocol("short top/pop reply")),
        })
        .collect()
}

pub(crate) async fn remove_if_score(
    backend: &Backend,
    keys: &KeySet,
    id: &str,
    score: u64,
) -> Result<Removed> {
    let script = chosen(&REMOVE_IF_SCORE, REMOVE_IF_SCORE_LUA, keys);
    let build = |keys: &[String]| {
        let mut inv = invocation(script, keys);
        inv.arg(id).arg(score);
        inv
    };
    removed_reply(eval_all(backend, keys, Buckets::Of(&[id], false), build).await?)
}

/// remove_if_score.lua: a code and the current due time.
fn removed_reply(v: Value) -> Result<Removed> {
    let (code, current): (i64, i64) = redis::from_redis_value(v)?;
    Ok(match code {
        1 => Removed::Removed,
        -1 => Removed::ScoreChanged(unsigned(current)),
        _ => Removed::NotPresent,
    })
}

/// What one claim did.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub expired: usize,
    /// How many of them had used their last attempt and went to the dead set.
    pub died: u64,
    /// The Redis server's clock at the claim (ms since the epoch).
    pub now: u64,
    /// Time until the earliest waiting task is due (`None`: nothing waiting).
    pub next_due: Option<Duration>,
    /// Time until the queue's rate limit allows the next claim (`None`: not limited now).
    pub rate_wait: Option<Duration>,
    /// Whether the queue uses issue 24's keys (the claim sent nine values per
    /// task): then a worker's acks say how each run went, for the summary
    /// a finished task keeps (issue 31).
    pub extras: bool,
    pub tasks: Vec<Task>,
    /// The shard (index, tag number) of each task, in order (issue 35), and
    /// whether that shard uses issue 24's keys (`extras`).
    pub shards: Vec<(u16, u16, bool)>,
}

impl Claimed {
    /// A claim of no shard.
    pub(crate) fn nothing() -> Self {
        Claimed {
            expired: 0,
            died: 0,
            now: 0,
            next_due: None,
            rate_wait: None,
            extras: false,
            tasks: Vec::new(),
            shards: Vec::new(),
        }
    }

    /// Add another shard's claim to this one: counts add up, the earliest
    /// due time and rate slot win.
    pub(crate) fn merge(&mut self, other: Claimed) {
        let earliest = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.expired += other.expired;
        self.died += other.died;
        self.now = self.now.max(other.now);
        self.next_due = earliest(self.next_due, other.next_due);
        self.rate_wait = earliest(self.rate_wait, other.rate_wait);
        self.extras |= other.extras;
        self.tasks.extend(other.tasks);
        self.shards.extend(other.shards);
    }
}

pub(crate) async fn claim(
    backend: &Backend,
    keys: &KeySet,
    count: usize,
    lease: Duration,
    max_attempts: u32,
    layout: Option<u64>,
) -> Result<Option<Claimed>> {
    let script = chosen(&CLAIM, CLAIM_LUA, keys);
    let build = |keys: &[String]| {
        let mut inv = invocation(script, keys);
        inv.arg(count)
            .arg(millis(lease))
            .arg(max_attempts)
            .arg(REAP_PER_CLAIM);
        if let Some(v) = layout {
            inv.arg(v);
        }
        inv
    };
    let reply = eval_hot(backend, keys, false, Buckets::Any, build).await?;
    if is_layout_stale(&reply) {
        return Ok(None);
    }
    claim_reply(reply).map(Some)
}

/// claim.lua: expired leases returned, time to the next due task, the
/// server's clock, how many expired leases died, time to the next rate
/// slot, then per task eight values.
fn claim_reply(v: Value) -> Result<Claimed> {
    let reply = array(v)?;
    let (head, rest) = reply.split_at(reply.len().min(6));
    let [expired, next_due, now, died, rate_wait, per_task] = head else {
        return Err(Error::protocol("short claim reply"));
    };
    // 7 values per task, or 9 with a time limit and dependencies.
    let per_task = match int(per_task)? {
        7 => 7,
        9 => 9,
        n => return Err(Error::protocol(format!("{n} values per claimed task"))),
    };
    let tasks = rest
        .chunks(per_task)
        .map(|c| {
            let (c, timeout, deps) = match c {
                [c @ .., timeout, deps] if per_task == 9 => (c, timeout, deps),
                c => (c, &Value::Nil, &Value::Nil),
            };
            (c, timeout, deps)
        })
        .map(|(c, timeout, deps)| match c {
            [id, score, payload, fence, attempt, priority, group] => Ok(Task {
                id: text(id)?,
                score: unsigned(int(score)?),
                payload: bytes(payload),
                fence: Fence::new(unsigned(int(fence)?)),
                attempt: u32::try_from(int(attempt)?).unwrap_or(u32::MAX),
                priority: u16::try_from(int(priority)?)
                    .map_err(|_| Error::protocol("a priority out of range"))?,
                group: match group {
                    Value::Nil => None,
                    g => Some(text(g)?),
                },
                deps: bytes(deps).map(|d| split_ids(&d)).unwrap_or_default(),
                timeout: match timeout {
                    Value::Nil => None,
                    t => Some(unsigned(int(t)?))
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis),
                },
            }),
            _ => Err(Error::protocol("short claimed task")),
        })
        .collect::<Result<Vec<_>>>()?;
    let ms = |v: &Value| -> Result<Option<Duration>> {
        Ok(u64::try_from(int(v)?).ok().map(Duration::from_millis))
    };
    let (next_due, rate_wait) = (ms(next_due)?, ms(rate_wait)?);
    Ok(Claimed {
        rate_wait,
        extras: per_task == 9,
        expired: usize::try_from(int(expired)?).unwrap_or(0),
        died: unsigned(int(died)?),
        now: unsigned(int(now)?),
        next_due,
        tasks,
        shards: Vec::new(),
    })
}

fn with_leases<'a>(inv: &mut redis::ScriptInvocation<'a>, leases: &[(&str, Fence)]) {
    for (id, fence) in leases {
        inv.arg(*id).arg(fence.get());
    }
}

/// A lease to ack, the result its task leaves (empty: none) and, from a
/// worker of a queue that uses issue 24's keys, how the run went: when it
/// started (ms, Redis clock) and the worker's id.
pub(crate) type Finished<'a> = (&'a str, Fence, &'a [u8], Option<(u64, &'a str)>);

pub(crate) async fn ack(
    backend: &Backend,
    keys: &KeySet,
    leases: &[Finished<'_>],
) -> Result<Vec<i64>> {
    // Three values per task only when a task leaves a result, four when a
    // worker says how its runs went (a queue that uses issue 24's keys).
    let with_runs = leases.iter().any(|l| l.3.is_some());
    let with_results = with_runs || leases.iter().any(|(_, _, r, _)| !r.is_empty());
    let script = chosen(&ACK, ACK_LUA, keys);
    let build = |keys: &[String]| {
        let mut inv = invocation(script, keys);
        inv.arg(match (with_runs, with_results) {
            (true, _) => 4,
            (false, true) => 3,
            (false, false) => 2,
        });
        for (id, fence, result, run) in leases {
            inv.arg(*id).arg(fence.get());
            if with_results {
                inv.arg(*result);
            }
            if with_runs {
                inv.arg(run.map_or(String::new(), |(at, worker)| format!("{at}:{worker}")));
            }
        }
        inv
    };
    let ids: Vec<&str> = leases.iter().map(|(id, _, _, _)| *id).collect();
    codes_reply(eval_hot(backend, keys, with_results, Buckets::Of(&ids, false), build).await?)
}

/// result.lua: the result of `id`, marking a waiter for `wait` when there is none.
pub(crate) async fn result(
    backend: &Backend,
    keys: &[String],
    id: &str,
    wait: Duration,
) -> Result<Option<Vec<u8>>> {
    let mut inv = invocation(&RESULT, keys);
    inv.arg(id).arg(millis(wait));
    Ok(bytes(&backend.eval::<Value>(&inv).await?))
}

/// progress.lua: 1 recorded, 0 / -1 lease lost (as extend.lua).
pub(crate) async fn progress(
    backend: &Backend,
    keys: &[String],
    id: &str,
    fence: Fence,
    pct: u8,
    message: &str,
) -> Result<i64> {
    let mut inv = invocation(&PROGRESS, keys);
    inv.arg(id)
        .arg(fence.get())
        .arg(format!("{pct}\0{message}"));
    code_reply(backend.eval(&inv).await?)
}

/// The stored "pct NUL message" of a progress (None: unreadable).
pub(crate) fn progress_reply(v: &Value) -> Option<TaskProgress> {
    let raw = bytes(v)?;
    let text = String::from_utf8_lossy(&raw);
    let (pct, message) = text.split_once('\0')?;
    Some(TaskProgress {
        pct: pct.parse().ok().filter(|p| *p <= 100)?,
        message: message.to_string(),
    })
}

pub(crate) async fn extend(
    backend: &Backend,
    keys: &[String],
    leases: &[(&str, Fence)],
    lease: Duration,
) -> Result<Vec<i64>> {
    let mut inv = invocation(&EXTEND, keys);
    inv.arg(millis(lease));
    with_leases(&mut inv, leases);
    codes_reply(backend.eval(&inv).await?)
}

/// abandon.lua: how many leases were given back, or -1 when none was and
/// another lease holds one of the tasks.
pub(crate) async fn abandon(
    backend: &Backend,
    keys: &[String],
    leases: &[(&str, Fence)],
) -> Result<i64> {
    let mut inv = invocation(&ABANDON, keys);
    with_leases(&mut inv, leases);
    code_reply(backend.eval(&inv).await?)
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn nack(
    backend: &Backend,
    keys: &KeySet,
    id: &str,
    fence: Fence,
    retry_after: Duration,
    max_attempts: u32,
    error: &str,
) -> Result<i64> {
    let mut inv = invocation(chosen(&NACK, NACK_LUA, keys), keys.all());
    inv.arg(id)
        .arg(fence.get())
        .arg(millis(retry_after))
        .arg(max_attempts)
        .arg(error);
    code_reply(backend.eval(&inv).await?)
}

pub(crate) async fn stats(backend: &Backend, keys: &[String]) -> Result<QueueStats> {
    stats_reply(backend.eval(&invocation(&STATS, keys)).await?)
}

/// stats.lua: the six counts and the oldest due task's age (ms).
fn stats_reply(v: Value) -> Result<QueueStats> {
    let v: Vec<i64> = redis::from_redis_value(v)?;
    let get = |i: usize| v.get(i).copied().map_or(0, unsigned);
    Ok(QueueStats {
        waiting: get(0),
        delayed: get(1),
        inflight: get(2),
        dead: get(3),
        processed: get(4),
        failed: get(5),
        oldest_due: Duration::from_millis(get(6)),
        paused: get(7) == 1,
        blocked: get(8),
        result_bytes: get(9),
        results_evicted: get(10),
    })
}

/// Pause (`true`) or resume the queue's claims; whether it was paused.
pub(crate) async fn pause(backend: &Backend, keys: &[String], pause: bool) -> Result<bool> {
    let mut inv = invocation(&PAUSE, keys);
    inv.arg(if pause { "1" } else { "0" });
    let was: i64 = backend.eval(&inv).await?;
    Ok(was == 1)
}

/// How a shard of a sharded queue takes a pause or resume (pause.lua).
#[derive(Clone, Copy)]
pub(crate) enum PauseGen {
    /// Shard 0: the change gets the next generation.
    Lead,
    /// Shard i >= 1: the change of this generation (ignored when older).
    Of(u64),
    /// Read shard 0's state, change nothing.
    Get,
}

/// Pause or resume one shard of a sharded queue: whether it was paused,
/// and the generation of the change (see pause.lua).
pub(crate) async fn pause_gen(
    backend: &Backend,
    keys: &[String],
    pause: bool,
    generation: PauseGen,
) -> Result<(bool, u64)> {
    let mut inv = invocation(&PAUSE, keys);
    inv.arg(if pause { "1" } else { "0" });
    match generation {
        PauseGen::Lead => inv.arg("lead"),
        PauseGen::Of(g) => inv.arg(g),
        PauseGen::Get => inv.arg("get"),
    };
    let (was, g): (i64, u64) = backend.eval(&inv).await?;
    Ok((was == 1, g))
}

pub(crate) async fn dead(backend: &Backend, keys: &KeySet, count: usize) -> Result<Vec<DeadTask>> {
    let build = |keys: &[String]| {
        let mut inv = invocation(&DEAD, keys);
        inv.arg(count);
        inv
    };
    dead_reply(eval_all(backend, keys, Buckets::Any, build).await?)
}

/// dead.lua: per task an id, when it died, its error and its payload.
fn dead_reply(v: Value) -> Result<Vec<DeadTask>> {
    array(v)?
        .chunks(4)
        .map(|c| match c {
            [id, died, error, payload] => Ok(DeadTask {
                id: text(id)?,
                died_at: unsigned(int(died)?),
                error: bytes(error).map(|b| String::from_utf8_lossy(&b).into_owned()),
                payload: bytes(payload),
            }),
            _ => Err(Error::protocol("short dead reply")),
        })
        .collect()
}

pub(crate) async fn retry_dead(
    backend: &Backend,
    keys: &[String],
    ids: Option<&[&str]>,
) -> Result<usize> {
    let mut total = 0;
    loop {
        let mut inv = invocation(&RETRY_DEAD, keys);
        match ids {
            Some(ids) => {
                inv.arg("ids");
                for id in ids {
                    inv.arg(*id);
                }
            }
            None => {
                inv.arg("all").arg(1000);
            }
        }
        let n = count_reply(backend.eval(&inv).await?)?;
        total += n;
        if ids.is_some() || n == 0 {
            return Ok(total);
        }
    }
}

pub(crate) async fn purge_dead(backend: &Backend, keys: &KeySet) -> Result<usize> {
    let mut total = 0;
    loop {
        let build = |keys: &[String]| {
            let mut inv = invocation(&PURGE_DEAD, keys);
            inv.arg(1000);
            inv
        };
        let n = count_reply(eval_all(backend, keys, Buckets::Any, build).await?)?;
        total += n;
        if n == 0 {
            return Ok(total);
        }
    }
}

/// A change of settings as config.lua's field, value pairs ('' removes).
fn settings_args(change: &QueueSettings) -> Vec<(&'static str, String)> {
    let num = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
    let mut args = Vec::new();
    if let Some(k) = change.group_concurrency {
        args.push(("group_concurrency", num(k)));
    }
    if let Some(rate) = change.rate {
        args.push(("rate_n", num(rate.map(|r| r.n()))));
        args.push((
            "rate_period_ms",
            rate.map_or(String::new(), |r| millis(r.period()).to_string()),
        ));
    }
    if let Some(n) = change.keep_completed {
        args.push(("keep_completed", num(n)));
    }
    if let Some(n) = change.events {
        args.push(("events_maxlen", num(n)));
    }
    if let Some(ttl) = change.keep_results {
        args.push((
            "keep_results_ms",
            ttl.map_or(String::new(), |t| millis(t).to_string()),
        ));
    }
    if let Some(bytes) = change.keep_results_bytes {
        args.push((
            "keep_results_bytes",
            bytes.map_or(String::new(), |b| b.to_string()),
        ));
    }
    args
}

/// What config.lua does.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ConfigOp<'a> {
    Get,
    Set(&'a QueueSettings),
    Clear,
}

pub(crate) async fn config(
    backend: &Backend,
    keys: &[String],
    op: ConfigOp<'_>,
) -> Result<QueueSettings> {
    let mut inv = invocation(&CONFIG, keys);
    match op {
        ConfigOp::Get => inv.arg("get"),
        ConfigOp::Clear => inv.arg("clear"),
        ConfigOp::Set(change) => {
            inv.arg("set");
            for (field, value) in settings_args(change) {
                inv.arg(field).arg(value);
            }
            &mut inv
        }
    };
    settings_reply(backend.eval(&inv).await?)
}

/// config.lua: the seven settings, nil when not set. A stored value out of
/// range (written by hand) reads as not set.
fn settings_reply(v: Value) -> Result<QueueSettings> {
    let v = array(v)?;
    let get = |i: usize| -> Option<u32> {
        match v.get(i) {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            Some(Value::Int(n)) => u32::try_from(*n).ok(),
            _ => None,
        }
    };
    if v.len() != 7 {
        return Err(Error::protocol("config reply is not seven values"));
    }
    let keep_results = match v.get(4) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    }
    .map(Duration::from_millis)
    .filter(|t| *t <= crate::queue::MAX_RESULT_TTL);
    let rate = match (get(1), get(2)) {
        (Some(n), Some(ms)) => RateLimit::new(n, Duration::from_millis(u64::from(ms))).ok(),
        _ => None,
    };
    Ok(QueueSettings {
        group_concurrency: Some(get(0).filter(|k| *k > 0)),
        rate: Some(rate),
        keep_completed: Some(get(3).filter(|k| *k > 0)),
        events: Some(get(5).filter(|k| *k > 0)),
        // Not stored: left out (`get_keep_results` gives the default), so
        // settings read back equal those built without it.
        keep_results: keep_results.map(Some),
        keep_results_bytes: match v.get(6) {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
            Some(Value::Int(n)) => u64::try_from(*n).ok(),
            _ => None,
        }
        .filter(|b| {
            (crate::queue::MAX_RESULT_BYTES as u64..=crate::queue::MAX_RESULT_BYTES_TOTAL)
                .contains(b)
        })
        .map(Some),
        shards: None,
        drain_shards: false,
    })
}

pub(crate) async fn completed(
    backend: &Backend,
    keys: &[String],
    count: usize,
) -> Result<Vec<Completed>> {
    let mut inv = invocation(&COMPLETED, keys);
    inv.arg(count);
    completed_reply(backend.eval(&inv).await?)
}

/// completed.lua: per task an id and when it was acked.
fn completed_reply(v: Value) -> Result<Vec<Completed>> {
    array(v)?
        .chunks(2)
        .map(|c| match c {
            [id, at] => Ok(Completed {
                id: text(id)?,
                at: match at {
                    Value::Int(i) => unsigned(*i),
                    Value::Double(f) => *f as u64,
                    other => {
                        let s = text(other)?;
                        s.parse::<f64>()
                            .map_err(|_| Error::protocol("a completion time is no number"))?
                            as u64
                    }
                },
            }),
            _ => Err(Error::protocol("odd completed reply")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    /// Every queue script's reply decoder.
    const DECODERS: &[Decoder] = &[
        ("enqueue", |v| enqueue_reply(v).is_ok()),
        ("top/pop", |v| entries_reply(v).is_ok()),
        ("remove_if_score", |v| removed_reply(v).is_ok()),
        ("claim", |v| claim_reply(v).is_ok()),
        ("ack/extend", |v| codes_reply(v).is_ok()),
        ("nack/abandon", |v| code_reply(v).is_ok()),
        ("retry_dead/purge_dead", |v| count_reply(v).is_ok()),
        ("stats", |v| stats_reply(v).is_ok()),
        ("dead", |v| dead_reply(v).is_ok()),
        ("config", |v| settings_reply(v).is_ok()),
        ("completed", |v| completed_reply(v).is_ok()),
    ];

    decoder_tests!(fuzz_queue_replies, DECODERS);

    /// claim.lua's bound on dependencies never enqueued is the documented one.
    #[test]
    fn the_unknown_dependency_wait_is_the_documented_one() {
        let ms = crate::queue::UNKNOWN_DEPENDENCY_WAIT.as_millis();
        let line = format!("local UNKNOWN_DEP_WAIT_MS = {ms} ");
        assert!(include_str!("scripts/claim.lua").contains(&line), "{line}");
    }

    #[test]
    fn well_formed_replies_decode() -> Result<()> {
        let claimed = claim_reply(Value::Array(vec![
            Value::Int(1),
            Value::Int(-1),
            Value::Int(1_700_000_000_500),
            Value::Int(0),
            Value::Int(-1),
            Value::Int(9),
            Value::BulkString(b"t1".to_vec()),
            Value::Int(1_700_000_000_000),
            Value::Nil,
            Value::Int(7),
            Value::Int(2),
            Value::Int(5),
            Value::BulkString(b"g".to_vec()),
            Value::Int(1500),
            Value::BulkString(b"a\0b\0".to_vec()),
        ]))?;
        assert_eq!(claimed.tasks[0].deps, ["a", "b"]);
        assert_eq!(claimed.tasks[0].timeout, Some(Duration::from_millis(1500)));
        assert_eq!(claimed.tasks[0].priority, 5);
        assert_eq!(claimed.tasks[0].group.as_deref(), Some("g"));
        assert_eq!(claimed.rate_wait, None);
        assert_eq!((claimed.expired, claimed.next_due), (1, None));
        assert_eq!(claimed.now, 1_700_000_000_500);
        assert_eq!(claimed.tasks[0].fence, Fence::new(7));
        assert!(claim_reply(Value::Array(vec![Value::Int(1)])).is_err());
        let e = enqueue_reply(Value::Array(vec![Value::Int(0), Value::Int(-1)]))?;
        assert_eq!(e, vec![Enqueued::Kept(None)]);
        assert!(entries_reply(Value::Array(vec![Value::BulkString(vec![0xff])])).is_err());
        Ok(())
    }
}
