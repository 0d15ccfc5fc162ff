//! The queue's fast path beside its safe path (issue 30): enqueue, claim
//! and ack send the first 19 keys (*narrow*) until a queue uses the keys of
//! results, time limits, dependencies or events, and all 31 (*wide*) from
//! then on. One scenario runs step by step through a queue on the narrow
//! path and one forced wide (`Queue::always_wide`), on one server: after
//! every step the outcomes and the Redis state, key by key (the queue's name
//! and the times taken out), must be the same. The scenario starts plain
//! (priorities, groups at a limit, delays, payloads in both stores, nack,
//! replace, pop, the completed history) and then uses a result and a
//! dependency, so the narrow queue widens itself midway.
mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use common::TestResult;
use dlm::queue::{Enqueued, Lease, NewTask, OnDuplicate, Queue, QueueSettings};
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

const LEASE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
enum Step {
    Settings(Option<u32>, Option<u32>),
    Push(&'static [&'static str], Opt),
    Claim(usize),
    Ack(&'static str),
    AckWith(&'static str),
    Nack(&'static str),
    Pop(usize),
    Top(usize),
    Stats,
}

/// How a push is made.
#[derive(Debug, Clone, Copy)]
struct Opt {
    payload: usize,
    priority: u16,
    group: Option<&'static str>,
    delay_ms: u64,
    replace: bool,
    after: &'static [&'static str],
}

const O: Opt = Opt {
    payload: 0,
    priority: 0,
    group: None,
    delay_ms: 0,
    replace: false,
    after: &[],
};

use Step::*;

const SCENARIO: &[Step] = &[
    Push(&["a", "b"], Opt { payload: 10, ..O }), // small: a bucket each
    Push(&["big"], Opt { payload: 300, ..O }),
    Push(&["p"], Opt { priority: 5, ..O }),
    Push(
        &["later"],
        Opt {
            delay_ms: 3_600_000,
            ..O
        },
    ),
    Settings(Some(1), Some(10)), // group limit 1, keep 10 completed
    Push(
        &["g1", "g2"],
        Opt {
            group: Some("g"),
            ..O
        },
    ),
    Stats,
    Top(10),
    Claim(3), // p first (priority), then g1 (g2 parked) and a
    Claim(10),
    Ack("p"),
    Nack("a"),
    Ack("g1"), // g2 back from parked
    Push(&["b"], O),
    Push(
        &["b"],
        Opt {
            replace: true,
            payload: 200,
            ..O
        },
    ),
    Push(&["later"], Opt { replace: true, ..O }),
    Top(10),
    Pop(1), // g2
    Claim(10),
    Ack("a"),
    Ack("b"),
    Ack("later"),
    Ack("big"),
    Stats,
    // The keys of issue 24 from here: the narrow queue widens itself.
    Push(&["r"], O),
    Claim(1),
    AckWith("r"),
    Push(&["d"], O),
    Push(&["e"], Opt { after: &["d"], ..O }),
    Claim(10),
    Ack("d"),
    Claim(10),
    Ack("e"),
    Push(
        &["f"],
        Opt {
            group: Some("g"),
            ..O
        },
    ),
    Claim(10),
    Ack("f"),
    Stats,
];

/// A queue's run: the leases it holds by id.
struct Side {
    q: Queue,
    leases: HashMap<String, Lease>,
}

impl Side {
    /// Run one step; its outcome without times.
    async fn step(
        &mut self,
        step: Step,
    ) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        Ok(match step {
            Settings(group, keep) => {
                let s = QueueSettings::default()
                    .group_concurrency(group)
                    .keep_completed(keep);
                format!("{:?}", self.q.configure(&s).await?)
            }
            Push(ids, o) => {
                let tasks = ids.iter().map(|id| {
                    let mut t = NewTask::new(*id).priority(o.priority);
                    if o.payload > 0 {
                        t = t.payload(vec![b'x'; o.payload]);
                    }
                    if let Some(g) = o.group {
                        t = t.group(g);
                    }
                    if !o.after.is_empty() {
                        t = t.after(o.after.iter().copied());
                    }
                    t
                });
                let mode = if o.replace {
                    OnDuplicate::Replace
                } else {
                    OnDuplicate::Keep
                };
                let r = self
                    .q
                    .enqueue(tasks, Duration::from_millis(o.delay_ms), mode)
                    .await?;
                let kinds: Vec<&str> = r
                    .iter()
                    .map(|e| match e {
                        Enqueued::Added(_) => "added",
                        Enqueued::Kept(_) => "kept",
                        Enqueued::Replaced(_) => "replaced",
                        Enqueued::Blocked(_) => "blocked",
                        _ => "other",
                    })
                    .collect();
                format!("{kinds:?}")
            }
            Claim(n) => {
                let mut out = Vec::new();
                for l in self.q.claim(n, LEASE).await? {
                    let t = l.task();
                    out.push(format!(
                        "{} fence {} attempt {} prio {} group {:?} payload {:?} deps {:?}",
                        t.id,
                        t.fence.get(),
                        t.attempt,
                        t.priority,
                        t.group,
                        t.payload.as_ref().map(Vec::len),
                        t.deps
                    ));
                    self.leases.insert(t.id.clone(), l);
                }
                format!("{out:?}")
            }
            Ack(id) | AckWith(id) | Nack(id) => {
                let Some(l) = self.leases.remove(id) else {
                    return Ok(format!("no lease of {id}"));
                };
                let r = match step {
                    Ack(_) => l.ack().await.map(|()| "acked".to_string()),
                    AckWith(_) => l.ack_with(b"done".to_vec()).await.map(|()| "acked".into()),
                    _ => l
                        .nack_after(Duration::ZERO, "boom")
                        .await
                        .map(|n| format!("{n:?}")),
                };
                format!("{r:?}")
            }
            Pop(n) | Top(n) => {
                let entries = if matches!(step, Pop(_)) {
                    self.q.pop(n).await?
                } else {
                    self.q.top(n).await?
                };
                let out: Vec<(String, Option<usize>)> = entries
                    .into_iter()
                    .map(|e| (e.id, e.payload.map(|p| p.len())))
                    .collect();
                format!("{out:?}")
            }
            Stats => {
                let s = self.q.stats().await?;
                format!(
                    "{} {} {} {} {} {} {} {}",
                    s.waiting,
                    s.delayed,
                    s.inflight,
                    s.dead,
                    s.processed,
                    s.failed,
                    s.blocked,
                    s.paused
                )
            }
        })
    }
}

/// `text` with every run of 12 or more digits (a time in ms) as `T`.
fn mask_times(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    for c in text.chars().chain(std::iter::once('\u{0}')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.len() >= 12 {
            out.push('T');
        } else {
            out.push_str(&digits);
        }
        digits.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// 2^42: a priority's unit in `ready` scores; a due time is below it.
const PRIO_UNIT: f64 = 4_398_046_511_104.0;

/// Mask the score inside a parked member (`group NUL score NUL id`).
fn mask_parked(m: &[u8]) -> String {
    let parts: Vec<&[u8]> = m.splitn(3, |b| *b == 0).collect();
    match parts.as_slice() {
        [g, _, id] => format!(
            "{}\\0*\\0{}",
            String::from_utf8_lossy(g),
            String::from_utf8_lossy(id)
        ),
        _ => String::from_utf8_lossy(m).into_owned(),
    }
}

/// Every key of queue `name`, its name with `{Q}` for the queue's, and its
/// content with the times taken out: sorted-set scores as their priority
/// part (`floor(score / 2^42)`, 0 for a time) in rank order, parked scores
/// masked, `result_waiters` masked, and whether a key expires.
async fn snapshot(
    raw: &mut MultiplexedConnection,
    name: &str,
) -> redis::RedisResult<BTreeMap<String, String>> {
    let pattern = format!("dlm:queue:{{{name}}}*");
    let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(raw).await?;
    let tag = format!("{{{name}}}");
    let mut out = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(raw).await?;
        let suffix = key.replace(&tag, "{Q}");
        let content = match kind.as_str() {
            "zset" => {
                let all: Vec<(Vec<u8>, f64)> = raw.zrange_withscores(&key, 0, -1).await?;
                let items: Vec<String> = all
                    .iter()
                    .map(|(m, s)| {
                        let member = if suffix.ends_with(":parked") {
                            mask_parked(m)
                        } else {
                            String::from_utf8_lossy(m).into_owned()
                        };
                        format!("{member}={}", (s / PRIO_UNIT).floor())
                    })
                    .collect();
                items.join(", ")
            }
            "hash" => {
                let all: BTreeMap<String, Vec<u8>> = raw.hgetall(&key).await?;
                let items: Vec<String> = all
                    .iter()
                    .map(|(f, v)| {
                        let value = if suffix.ends_with(":parkedid") {
                            mask_parked(v)
                        } else if f == "result_waiters" || f == "deps_sweep_at" {
                            "*".to_string()
                        } else {
                            // Times inside values (a finished task's
                            // summary: when it started and finished).
                            mask_times(&String::from_utf8_lossy(v))
                        };
                        format!("{f}={value}")
                    })
                    .collect();
                items.join(", ")
            }
            "string" => raw.get::<_, String>(&key).await?,
            "list" => raw.lrange::<_, Vec<String>>(&key, 0, -1).await?.join(","),
            other => format!("a {other}"),
        };
        let ttl: i64 = raw.pttl(&key).await?;
        let expires = if ttl >= 0 { " (expires)" } else { "" };
        out.insert(suffix, format!("{kind}{expires}: {content}"));
    }
    Ok(out)
}

#[tokio::test]
async fn narrow_and_wide_calls_reach_the_same_state() -> TestResult {
    let server = common::server();
    let client = common::client(&server).await;
    let mut raw = common::raw(&server).await;
    let mut narrow = Side {
        q: client.queue("narrow").compact_payloads(true),
        leases: HashMap::new(),
    };
    let mut wide = Side {
        q: client.queue("wide").compact_payloads(true).always_wide(),
        leases: HashMap::new(),
    };
    for (i, step) in SCENARIO.iter().enumerate() {
        let a = narrow.step(*step).await?;
        let b = wide.step(*step).await?;
        eprintln!("step {i} {step:?}: {a}");
        assert_eq!(a, b, "step {i} {step:?}: outcomes differ");
        let sa = snapshot(&mut raw, "narrow").await?;
        let sb = snapshot(&mut raw, "wide").await?;
        assert!(!sa.is_empty(), "step {i}: the queue has keys");
        for key in sa.keys().chain(sb.keys()) {
            assert_eq!(
                sa.get(key),
                sb.get(key),
                "step {i} {step:?}: key {key} differs (narrow, wide)"
            );
        }
        // Different ms for the next step's times, as on the other queue.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    for side in [&narrow, &wide] {
        let report = side.q.check_invariants().await?;
        assert!(report.is_ok(), "{report:#?}");
    }
    Ok(())
}
