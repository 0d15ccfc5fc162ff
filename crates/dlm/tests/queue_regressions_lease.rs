//! Regression tests of issue 31's lease defects (2, 4, 5 and 9), each against
//! a real redis-server: a task replaced while it runs (one group slot, one
//! lease and one attempt count per id), a stale lease beside the current one
//! (in one ack batch, and in one worker), and what a finished task's view
//! keeps. Each failed on the code before its fix; the doc comments say how.
mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestResult;
use dlm::CancellationToken;
use dlm::Fence;
use dlm::queue::{Enqueued, Nacked, NewTask, OnDuplicate, Queue, QueueSettings, TaskState};

const NOW: Duration = Duration::ZERO;
const LEASE: Duration = Duration::from_secs(30);

type Boxed = Box<dyn std::error::Error + Send + Sync>;

async fn claim_one(q: &Queue, lease: Duration) -> Result<dlm::queue::Lease, Boxed> {
    let mut got = q.claim(1, lease).await?;
    Ok(got.pop().ok_or("nothing claimed")?)
}

fn ids(leases: &[dlm::queue::Lease]) -> Vec<&str> {
    leases.iter().map(|l| l.task().id.as_str()).collect()
}

/// The queue's keys, in the order every queue script takes them.
fn keys(queue: &str) -> Vec<String> {
    dlm::keys::QUEUE_KEY_SUFFIXES
        .iter()
        .map(|s| format!("{}{{{queue}}}:{s}", dlm::keys::DEFAULT_QUEUE_PREFIX))
        .collect()
}

/// A queue script as `queue/ops.rs` sends it: its helpers, then the script.
/// The batched calls of one lease per id (ack, extend, abandon) are not
/// public, so the stale-beside-current batch is sent as the worker's acker
/// would send it.
fn script(helpers: &[&str], name: &str) -> redis::Script {
    let file = |n: &str| {
        std::fs::read_to_string(format!(
            "{}/src/queue/scripts/{n}.lua",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("a queue script")
    };
    let mut text: String = helpers.iter().map(|h| file(h)).collect();
    text.push_str(&file(name));
    redis::Script::new(&text)
}

async fn batch(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &redis::Script,
    queue: &str,
    head: &[String],
    leases: &[(&str, Fence)],
) -> redis::RedisResult<redis::Value> {
    let mut inv = script.prepare_invoke();
    for k in keys(queue) {
        inv.key(k);
    }
    for a in head {
        inv.arg(a);
    }
    for (id, fence) in leases {
        inv.arg(*id).arg(fence.get());
    }
    inv.invoke_async(conn).await
}

/// A lease that runs out now, as if its worker had stalled past it (the
/// next claim returns the task and leases it again).
async fn expire_now(server: &common::RedisServer, queue: &str, id: &str) -> TestResult {
    let mut conn = common::raw(server).await;
    let inflight = &keys(queue)[2];
    let _: i64 = redis::cmd("ZADD")
        .arg(inflight)
        .arg("XX")
        .arg(0)
        .arg(id)
        .query_async(&mut conn)
        .await?;
    Ok(())
}

/// Defect 2, as the issue measured it: replace X (group g) while it runs,
/// claim it again, ack both leases, twice; then with group_concurrency 2,
/// Y and Z of g must be claimable. Before the fix the second claim leased X
/// again and counted it in g a second time, the stale lease's slot never
/// came back, and `claim(2)` returned nothing (`left: []`, `right: ["Y", "Z"]`).
#[tokio::test]
async fn replaced_in_flight_task_frees_its_group_slot() -> TestResult {
    let server = common::server();
    let c = common::client(&server).await;
    let q = c.queue("d2-slots");
    for round in 0..2 {
        q.enqueue([NewTask::new("X").group("g")], NOW, OnDuplicate::Keep)
            .await?;
        let mut held = vec![claim_one(&q, LEASE).await?];
        let r = q
            .enqueue([NewTask::new("X").group("g")], NOW, OnDuplicate::Replace)
            .await?;
        assert!(
            matches!(r[0], Enqueued::Replaced(_)),
            "round {round}: {r:?}"
        );
        held.extend(q.claim(1, LEASE).await?);
        for lease in held {
            // The stale one (if any) is refused; the slot must come back anyway.
            let _ = lease.ack().await;
        }
        // The replacement runs once the run it replaced settled.
        for lease in q.claim(10, LEASE).await? {
            lease.ack().await?;
        }
    }
    let s = q.stats().await?;
    assert_eq!((s.waiting, s.delayed, s.inflight), (0, 0, 0), "{s:?}");
    let mut conn = common::raw(&server).await;
    let gcount: Vec<(String, i64)> = redis::cmd("HGETALL")
        .arg(&keys("d2-slots")[14])
        .query_async(&mut conn)
        .await?;
    assert_eq!(gcount, [], "nothing in flight, nothing counted");
    q.configure(&QueueSettings::default().group_concurrency(Some(2)))
        .await?;
    q.enqueue(
        [NewTask::new("Y").group("g"), NewTask::new("Z").group("g")],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let got = q.claim(2, LEASE).await?;
    assert_eq!(ids(&got), ["Y", "Z"]);
    Ok(())
}

/// Defect 2, the rule chosen: an id is never leased twice at once. A
/// replacement of a task in flight waits, and becomes claimable when the
/// current run settles (ack, nack, lease expiry or abandon), with the new
/// payload. Before the fix the claim right after the replace leased X a
/// second time (`left: ["X"]`, `right: []`).
#[tokio::test]
async fn replacement_waits_for_the_running_lease() -> TestResult {
    let server = common::server();
    let c = common::client(&server).await;
    let q = c.queue("d2-held");

    // Settled by an ack.
    q.enqueue([NewTask::new("X").payload("v1")], NOW, OnDuplicate::Keep)
        .await?;
    let first = claim_one(&q, LEASE).await?;
    let r = q
        .enqueue([NewTask::new("X").payload("v2")], NOW, OnDuplicate::Replace)
        .await?;
    let Enqueued::Replaced(due_x) = r[0] else {
        return Err(format!("{r:?}").into());
    };
    let again = q.claim(10, LEASE).await?;
    assert_eq!(ids(&again), Vec::<&str>::new(), "X is leased already");
    let t = q.task("X").await?.ok_or("X is known")?;
    assert_eq!(t.state, TaskState::InFlight);
    let s = q.stats().await?;
    assert_eq!((s.inflight, s.delayed, s.waiting), (1, 1, 0), "held: {s:?}");
    // Listed with its own due time; a keep sees it; the seeds' dequeue by
    // that time removes it (then the replace again, for the rest).
    let page = q.tasks(TaskState::Delayed, 0, 10, 0).await?;
    assert_eq!(
        page.tasks
            .iter()
            .map(|t| (t.id.as_str(), t.score))
            .collect::<Vec<_>>(),
        [("X", due_x)]
    );
    let kept = q.enqueue(["X"], NOW, OnDuplicate::Keep).await?;
    assert_eq!(kept, [Enqueued::Kept(Some(due_x))]);
    assert_eq!(
        q.remove_if_score("X", due_x).await?,
        dlm::queue::Removed::Removed
    );
    assert_eq!(q.stats().await?.delayed, 0);
    q.enqueue([NewTask::new("X").payload("v2")], NOW, OnDuplicate::Replace)
        .await?;
    first.ack().await?;
    let second = claim_one(&q, LEASE).await?;
    assert_eq!(second.task().payload.as_deref(), Some(&b"v2"[..]));
    assert_eq!(second.task().attempt, 2, "the task's attempts go on");
    second.ack().await?;
    assert_eq!(q.claim(10, LEASE).await?.len(), 0);
    let s = q.stats().await?;
    assert_eq!(
        (s.waiting, s.delayed, s.inflight, s.processed),
        (0, 0, 0, 2)
    );

    // Settled by a nack: the replacement runs, not a retry of the old run,
    // at its own due time (not after the retry's backoff).
    q.push("N").await?;
    let n1 = claim_one(&q, LEASE).await?;
    q.enqueue([NewTask::new("N").payload("n2")], NOW, OnDuplicate::Replace)
        .await?;
    assert!(q.claim(10, LEASE).await?.is_empty());
    assert_eq!(
        n1.nack_after(Duration::from_secs(3600), "boom").await?,
        Nacked::Retrying
    );
    let n2 = claim_one(&q, LEASE).await?;
    assert_eq!(n2.task().payload.as_deref(), Some(&b"n2"[..]));
    n2.ack().await?;

    // Settled by the lease running out.
    q.push("E").await?;
    let _e1 = claim_one(&q, LEASE).await?;
    q.enqueue([NewTask::new("E").payload("e2")], NOW, OnDuplicate::Replace)
        .await?;
    assert!(q.claim(10, LEASE).await?.is_empty());
    expire_now(&server, "d2-held", "E").await?;
    let e2 = claim_one(&q, LEASE).await?;
    assert_eq!(e2.task().payload.as_deref(), Some(&b"e2"[..]));
    e2.ack().await?;

    // Settled by an abandon; a delayed replacement keeps its due time.
    q.push("A").await?;
    let a1 = claim_one(&q, LEASE).await?;
    let r = q
        .enqueue(
            [NewTask::new("A").payload("a2")],
            Duration::from_millis(300),
            OnDuplicate::Replace,
        )
        .await?;
    let Enqueued::Replaced(due) = r[0] else {
        return Err(format!("{r:?}").into());
    };
    a1.abandon().await?;
    assert!(q.claim(10, LEASE).await?.is_empty(), "due in 300 ms");
    let t = q.task("A").await?.ok_or("A is known")?;
    assert_eq!((t.state, t.score), (TaskState::Delayed, Some(due)));
    tokio::time::sleep(Duration::from_millis(350)).await;
    let a2 = claim_one(&q, LEASE).await?;
    assert_eq!(a2.task().payload.as_deref(), Some(&b"a2"[..]));
    assert_eq!(a2.task().score, due);
    a2.ack().await?;
    let s = q.stats().await?;
    assert_eq!((s.waiting, s.delayed, s.inflight), (0, 0, 0), "{s:?}");
    Ok(())
}

/// Defect 5: a replace while in flight kept the lease but wiped the attempt
/// count. Before the fix the replacement's claim said attempt 1 instead of
/// 2 (the nack of the running attempt did not count toward max_attempts), and
/// an abandon after a replace left the count at -1 (`task` read it as
/// 4294967295).
#[tokio::test]
async fn replace_in_flight_keeps_the_attempt_count() -> TestResult {
    let server = common::server();
    let c = common::client(&server).await;
    let q = c.queue("d5").max_attempts(2);
    q.push("X").await?;
    let first = claim_one(&q, LEASE).await?;
    assert_eq!(first.task().attempt, 1);
    q.enqueue([NewTask::new("X").payload("v2")], NOW, OnDuplicate::Replace)
        .await?;
    assert_eq!(q.task("X").await?.map(|t| t.attempts), Some(1));
    first.nack_after(NOW, "first attempt failed").await?;
    let second = claim_one(&q, LEASE).await?;
    assert_eq!(second.task().attempt, 2, "the failed attempt counts");
    assert_eq!(second.nack("second attempt failed").await?, Nacked::Dead);

    q.push("Y").await?;
    let y = claim_one(&q, LEASE).await?;
    q.enqueue([NewTask::new("Y").payload("y2")], NOW, OnDuplicate::Replace)
        .await?;
    y.abandon().await?;
    assert_eq!(q.task("Y").await?.map(|t| t.attempts), Some(0));
    let y2 = claim_one(&q, LEASE).await?;
    assert_eq!(y2.task().attempt, 1, "an abandoned attempt does not count");
    y2.ack().await?;
    Ok(())
}

/// Defect 4, in one ack batch: [(X, stale fence), (X, current fence)] must
/// ack the current lease. Before the fix the stale entry marked X as seen and
/// the batch answered `[-1, 0]`: the current run's ack was refused and X ran
/// again after its lease expired. extend and abandon batches (checked here
/// too) were right already: each entry is judged by its own fence.
#[tokio::test]
async fn stale_lease_in_a_batch_leaves_the_current_one_alone() -> TestResult {
    let server = common::server();
    let c = common::client(&server).await;
    let mut conn = common::raw(&server).await;
    let name = "d4-batch";
    let q = c.queue(name);
    let ack = script(&["groups", "payload", "events", "results", "deps"], "ack");
    let extend = script(&[], "extend");
    let abandon = script(&["groups"], "abandon");

    // Lease X, let the lease run out, lease it again.
    let twice = |id: &'static str| {
        let (q, server) = (q.clone(), &server);
        async move {
            q.push(id).await?;
            let stale = claim_one(&q, LEASE).await?.task().fence;
            expire_now(server, name, id).await?;
            let current = claim_one(&q, LEASE).await?.task().fence;
            Ok::<_, Boxed>((stale, current))
        }
    };

    let (stale, current) = twice("X").await?;
    let codes: Vec<i64> = redis::from_redis_value(
        batch(
            &mut conn,
            &extend,
            name,
            &["30000".into()],
            &[("X", stale), ("X", current)],
        )
        .await?,
    )?;
    assert_eq!(codes, [-1, 1], "extend");
    let codes: Vec<i64> = redis::from_redis_value(
        batch(
            &mut conn,
            &ack,
            name,
            &["2".into()],
            &[("X", stale), ("X", current)],
        )
        .await?,
    )?;
    assert_eq!(
        codes,
        [-1, 1],
        "ack: the stale entry must not refuse the current one"
    );
    let s = q.stats().await?;
    assert_eq!((s.inflight, s.waiting, s.processed), (0, 0, 1), "{s:?}");
    assert_eq!(q.task("X").await?, None, "acked and forgotten");

    // The current lease twice in one batch: acked once.
    let (_, current) = twice("Y").await?;
    let codes: Vec<i64> = redis::from_redis_value(
        batch(
            &mut conn,
            &ack,
            name,
            &["2".into()],
            &[("Y", current), ("Y", current)],
        )
        .await?,
    )?;
    assert_eq!(codes, [1, 0]);

    let (stale, current) = twice("Z").await?;
    let n: i64 = redis::from_redis_value(
        batch(
            &mut conn,
            &abandon,
            name,
            &[],
            &[("Z", stale), ("Z", current)],
        )
        .await?,
    )?;
    assert_eq!(n, 1, "abandon gives the current lease back once");
    let t = q.task("Z").await?.ok_or("Z is known")?;
    assert_eq!((t.state, t.attempts), (TaskState::Waiting, 1));
    Ok(())
}

/// Defect 4, in the worker: a second claim of X (its first lease ran out
/// while the first run went on) must not share the first run's entry. Before
/// the fix the worker keyed its runs by id: the first run's end removed the
/// second's entry, the second run's lease was no longer renewed and ran
/// out, and X ran a third time (`left: 3`, `right: 2`).
#[tokio::test]
async fn worker_keeps_renewing_the_current_run_of_an_id() -> TestResult {
    let server = common::server();
    let c = common::client(&server).await;
    let name = "d4-worker";
    let q = c.queue(name);
    q.push("X").await?;
    let lease = Duration::from_millis(600);
    let runs = Arc::new(AtomicU32::new(0));
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let release_first = Arc::new(tokio::sync::Notify::new());
    let stop = CancellationToken::new();
    let worker = {
        let (runs, release_first) = (runs.clone(), release_first.clone());
        let opts = dlm::queue::WorkerOptions::new()
            .concurrency(4)
            .lease(lease)
            .idle_wait(Duration::from_millis(20));
        let stop = stop.clone();
        let q = q.clone();
        tokio::spawn(async move {
            q.worker(opts)
                .run(
                    move |_task| {
                        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                        let (tx, release_first) = (started_tx.clone(), release_first.clone());
                        async move {
                            let _ = tx.send(n);
                            if n == 1 {
                                release_first.notified().await;
                            } else {
                                // Longer than several leases: renewed or lost.
                                tokio::time::sleep(lease * 4).await;
                            }
                            Ok::<(), std::io::Error>(())
                        }
                    },
                    stop,
                )
                .await
        })
    };
    assert_eq!(started.recv().await, Some(1));
    expire_now(&server, name, "X").await?;
    let second = tokio::time::timeout(Duration::from_secs(5), started.recv()).await?;
    assert_eq!(second, Some(2));
    // The first run ends now: its ack is refused (the lease is the second's).
    release_first.notify_one();
    tokio::time::sleep(lease * 4 + Duration::from_millis(700)).await;
    let report = Arc::new(Mutex::new(None));
    stop.cancel();
    *report.lock().map_err(|_| "poisoned")? = Some(worker.await??);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "X ran a third time");
    let s = q.stats().await?;
    assert_eq!((s.inflight, s.waiting, s.processed), (0, 0, 1), "{s:?}");
    let r = report
        .lock()
        .map_err(|_| "poisoned")?
        .take()
        .ok_or("report")?;
    assert_eq!((r.acked, r.lost), (1, 1), "{r:?}");
    Ok(())
}

/// Defect 9: a finished task's view keeps what it was while its completion
/// is remembered: attempts, dependencies and dependents, its last progress
/// and message, when it started and finished, the worker that ran it and
/// its result's size. Before the fix the completed task read `deps: []`,
/// `attempts: 0` and `progress: None` (the first assertion failed with
/// `left: []`, `right: ["A", "B"]`).
#[tokio::test]
async fn a_finished_task_keeps_what_it_was() -> TestResult {
    let server = common::server();
    let c = common::client(&server).await;
    let q = c.queue("d9");
    q.enqueue(
        [
            NewTask::new("A"),
            NewTask::new("B"),
            NewTask::new("C").after(["A", "B"]),
            NewTask::new("D").after(["C"]),
        ],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    for _ in 0..2 {
        claim_one(&q, LEASE).await?.ack().await?;
    }
    let before = q.task("A").await?.ok_or("A is remembered")?;
    let stop = CancellationToken::new();
    let report = {
        let q2 = q.clone();
        let opts = dlm::queue::WorkerOptions::new()
            .id("worker-9")
            .idle_wait(Duration::from_millis(20))
            .exit_when_empty(true);
        q.worker(opts)
            .run(
                move |task| {
                    let q2 = q2.clone();
                    async move {
                        if task.id == "C" {
                            q2.report_progress(&task.id, task.fence, 50, "half way")
                                .await
                                .map_err(|e| e.to_string())?;
                            return Ok(Some(b"report.pdf".to_vec()));
                        }
                        Ok::<_, String>(None)
                    }
                },
                stop,
            )
            .await?
    };
    assert_eq!(report.acked, 2, "{report:?}");
    let t = q.task("C").await?.ok_or("C is remembered")?;
    assert_eq!(t.state, TaskState::Completed);
    assert_eq!(t.deps, ["A", "B"]);
    assert_eq!(t.dependents, ["D"]);
    assert_eq!(t.attempts, 1);
    assert_eq!(t.progress, Some(50));
    assert_eq!(t.message.as_deref(), Some("half way"));
    assert_eq!(t.result_bytes, Some(b"report.pdf".len()));
    assert_eq!(t.worker.as_deref(), Some("worker-9"));
    let (started, finished) = (
        t.started_at.ok_or("started")?,
        t.finished_at.ok_or("finished")?,
    );
    assert!(started <= finished && finished <= t.now, "{t:?}");
    assert!(started >= before.now, "{t:?}");
    // The result reads back without the summary kept beside it.
    assert_eq!(q.result("C").await?.as_deref(), Some(&b"report.pdf"[..]));
    // A task acked by hand: what the queue knows (no worker).
    let a = q.task("A").await?.ok_or("A is remembered")?;
    assert_eq!(
        (a.attempts, a.dependents.clone()),
        (1, vec!["C".to_string()])
    );
    assert_eq!(a.result_bytes, None);
    assert_eq!(q.result("A").await?, None);
    assert!(a.started_at <= a.finished_at && a.worker.is_none(), "{a:?}");
    assert!(a.started_at.is_some(), "{a:?}");
    let d = q.task("D").await?.ok_or("D is remembered")?;
    assert_eq!(
        (d.state, d.deps.clone()),
        (TaskState::Completed, vec!["C".to_string()])
    );
    Ok(())
}

/// The summary a finished task keeps is bounded: at most 64 KiB of each of
/// its lists of ids (its first ids, each whole).
#[tokio::test]
async fn a_finished_tasks_summary_is_bounded() -> TestResult {
    let server = common::server();
    let c = common::client(&server).await;
    let q = c.queue("d9-bound");
    q.push("root").await?;
    // 6,000 dependents of 13 bytes each (with their NUL): 78,000 bytes.
    let kids: Vec<NewTask> = (0..6000)
        .map(|i| NewTask::new(format!("kid-{i:08}")).after(["root"]))
        .collect();
    q.enqueue(kids, NOW, OnDuplicate::Keep).await?;
    claim_one(&q, LEASE).await?.ack().await?;
    let t = q.task("root").await?.ok_or("root is remembered")?;
    assert_eq!(t.state, TaskState::Completed);
    assert_eq!(t.dependents.len(), 65536 / 13, "the first whole ids");
    assert_eq!(t.dependents[0], "kid-00000000");
    assert_eq!(q.stats().await?.waiting, 6000, "all released");
    Ok(())
}
