//! Task dependencies (`NewTask::after`) against real redis-servers: blocked
//! until every dependency is acked, any DAG, unknown ids and cycles refused
//! with nothing written, a dependency's death followed by each dependent's
//! policy, the task view. One body of cases, run on one server, as the
//! least-privilege ACL user and on a Redis Cluster.
mod common;

use std::time::Duration;

use common::TestResult;
use dlm::queue::{
    DependencyFailure, Enqueued, NewTask, OnDuplicate, Queue, QueueSettings, TaskState,
};
use dlm::{Client, Error};

const NOW: Duration = Duration::ZERO;
const LEASE: Duration = Duration::from_secs(30);

async fn claim(q: &Queue) -> dlm::Result<Vec<String>> {
    let leases = q.claim(100, LEASE).await?;
    let ids = leases.iter().map(|l| l.task().id.clone()).collect();
    for l in leases {
        l.ack().await?;
    }
    Ok(ids)
}

async fn state(q: &Queue, id: &str) -> dlm::Result<Option<TaskState>> {
    Ok(q.task(id).await?.map(|t| t.state))
}

/// A diamond: d waits for b and c, which wait for a; each becomes due with
/// the ack of its last dependency, and a claimed task knows its dependencies.
async fn diamond(c: &Client) -> TestResult {
    let q = c.queue("diamond");
    let r = q
        .enqueue(
            [
                NewTask::new("d").after(["b", "c"]),
                NewTask::new("b").after(["a"]),
                NewTask::new("c").after(["a"]),
                NewTask::new("a"),
            ],
            NOW,
            OnDuplicate::Keep,
        )
        .await?;
    assert!(matches!(r[0], Enqueued::Blocked(_)), "{r:?}");
    assert!(matches!(r[3], Enqueued::Added(_)), "{r:?}");
    let s = q.stats().await?;
    assert_eq!((s.waiting, s.blocked), (1, 3), "{s:?}");
    assert_eq!(q.top(10).await?.len(), 1, "blocked tasks are not due");
    let a = q.task("a").await?.ok_or("a is there")?;
    assert_eq!(a.dependents.len(), 2, "{a:?}");
    assert_eq!(claim(&q).await?, ["a"]);
    let leases = q.claim(10, LEASE).await?;
    let mut got: Vec<&str> = leases.iter().map(|l| l.task().id.as_str()).collect();
    got.sort();
    assert_eq!(got, ["b", "c"]);
    assert_eq!(leases[0].task().deps, ["a"]);
    let d = q.task("d").await?.ok_or("d is there")?;
    assert_eq!((d.state, d.pending_deps), (TaskState::Blocked, 2));
    let mut leases = leases.into_iter();
    if let Some(first) = leases.next() {
        first.ack().await?;
    }
    assert_eq!(state(&q, "d").await?, Some(TaskState::Blocked));
    assert!(q.claim(10, LEASE).await?.is_empty(), "d waits for both");
    for l in leases {
        l.ack().await?;
    }
    let last = q.claim(10, LEASE).await?;
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].task().deps, ["b", "c"]);
    last.into_iter().next().ok_or("d")?.ack().await?;
    let s = q.stats().await?;
    assert_eq!((s.processed, s.blocked, s.waiting), (4, 0, 0), "{s:?}");
    // Completions of tasks that took part are remembered (results' TTL):
    // a task enqueued now may depend on them and is due at once.
    assert_eq!(state(&q, "d").await?, Some(TaskState::Completed));
    let r = q
        .enqueue(
            [NewTask::new("e").after(["d", "a"])],
            NOW,
            OnDuplicate::Keep,
        )
        .await?;
    assert!(matches!(r[0], Enqueued::Added(_)), "{r:?}");
    assert_eq!(claim(&q).await?, ["e"]);
    Ok(())
}

/// Unknown ids and cycles are refused and nothing of the call is written;
/// ids that may come later wait for them.
async fn refusals(c: &Client) -> TestResult {
    let q = c.queue("refuse");
    q.enqueue([NewTask::new("a")], NOW, OnDuplicate::Keep)
        .await?;
    let unknown = q
        .enqueue(
            [NewTask::new("x"), NewTask::new("y").after(["a", "missing"])],
            NOW,
            OnDuplicate::Keep,
        )
        .await;
    assert!(
        matches!(unknown, Err(Error::InvalidArgument { .. })),
        "{unknown:?}"
    );
    assert_eq!(state(&q, "x").await?, None, "nothing written");
    let own = q
        .enqueue([NewTask::new("s").after(["s"])], NOW, OnDuplicate::Keep)
        .await;
    assert!(matches!(own, Err(Error::InvalidArgument { .. })), "{own:?}");
    // p waits for q (not there yet); q waiting for p closes a cycle.
    q.enqueue(
        [NewTask::new("p").after(["q"]).deps_may_come_later(true)],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let cycle = q
        .enqueue([NewTask::new("q").after(["p"])], NOW, OnDuplicate::Keep)
        .await;
    let Err(Error::InvalidArgument { reason, .. }) = cycle else {
        return Err(format!("a cycle was accepted: {cycle:?}").into());
    };
    assert!(reason.contains("cycle"), "{reason}");
    // In one call too.
    let batch = q
        .enqueue(
            [
                NewTask::new("m").after(["n"]),
                NewTask::new("n").after(["o"]),
                NewTask::new("o").after(["m"]),
            ],
            NOW,
            OnDuplicate::Keep,
        )
        .await;
    assert!(
        matches!(batch, Err(Error::InvalidArgument { .. })),
        "{batch:?}"
    );
    assert_eq!(state(&q, "m").await?, None);
    // q, enqueued plainly, releases p when it completes.
    q.enqueue([NewTask::new("q")], NOW, OnDuplicate::Keep)
        .await?;
    let mut first = claim(&q).await?;
    first.sort();
    assert_eq!(first, ["a", "q"]);
    assert_eq!(claim(&q).await?, ["p"]);
    let big = NewTask::new("big").after((0..=dlm::queue::MAX_DEPS).map(|i| format!("d{i}")));
    assert!(q.enqueue([big], NOW, OnDuplicate::Keep).await.is_err());
    Ok(())
}

/// A dependency that dies: dependents that fail die too (naming it), and so
/// on down; one that ignores it runs; a task enqueued after the death dies
/// at once. The lease-expiry path (claim.lua) does the same as a nack.
async fn deaths(c: &Client) -> TestResult {
    let q = c.queue("deaths").max_attempts(1);
    q.enqueue(
        [
            NewTask::new("root"),
            NewTask::new("child").after(["root"]),
            NewTask::new("grandchild").after(["child"]),
            NewTask::new("brave")
                .after(["root"])
                .on_dependency_failure(DependencyFailure::Ignore),
        ],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let lease = q.claim(1, LEASE).await?.into_iter().next().ok_or("root")?;
    // max attempts 1: this nack is the last one.
    let nacked = lease.nack("boom").await?;
    assert_eq!(nacked, dlm::queue::Nacked::Dead);
    let s = q.stats().await?;
    assert_eq!((s.dead, s.blocked, s.waiting), (3, 0, 1), "{s:?}");
    let g = q.task("grandchild").await?.ok_or("grandchild")?;
    assert_eq!(g.state, TaskState::Dead);
    assert_eq!(g.error.as_deref(), Some("dependency 'child' died"));
    assert_eq!(claim(&q).await?, ["brave"]);
    let late = q
        .enqueue(
            [NewTask::new("late").after(["root"])],
            NOW,
            OnDuplicate::Keep,
        )
        .await?;
    assert!(matches!(late[0], Enqueued::DependencyDied(_)), "{late:?}");

    // A lease that expires on its last attempt kills its dependents too.
    let q = c.queue("expiry").max_attempts(1);
    q.enqueue(
        [NewTask::new("r"), NewTask::new("k").after(["r"])],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let held = q.claim(1, Duration::from_millis(50)).await?;
    assert_eq!(held.len(), 1);
    tokio::time::sleep(Duration::from_millis(120)).await;
    q.reap().await?;
    assert_eq!(state(&q, "k").await?, Some(TaskState::Dead));
    Ok(())
}

/// The source documents' pop and dequeue-if-score take a task out to be
/// processed: for dependencies that is done.
async fn seed_api(c: &Client) -> TestResult {
    let q = c.queue("seeds");
    q.enqueue(
        [
            NewTask::new("a"),
            NewTask::new("b"),
            NewTask::new("after-a").after(["a"]),
            NewTask::new("after-b").after(["b"]),
        ],
        NOW,
        OnDuplicate::Keep,
    )
    .await?;
    let popped = q.pop(1).await?;
    assert_eq!(popped[0].id, "a");
    let b = q.top(1).await?;
    assert_eq!(b[0].id, "b");
    q.remove_if_score("b", b[0].score).await?;
    let mut rest: Vec<String> = q.pop(10).await?.into_iter().map(|e| e.id).collect();
    rest.sort();
    assert_eq!(rest, ["after-a", "after-b"]);
    // A plain completed task is known through the completed history.
    let h = c.queue("history");
    h.configure(&QueueSettings::default().keep_completed(Some(10)))
        .await?;
    h.enqueue([NewTask::new("plain")], NOW, OnDuplicate::Keep)
        .await?;
    claim(&h).await?;
    let r = h
        .enqueue(
            [NewTask::new("next").after(["plain"])],
            NOW,
            OnDuplicate::Keep,
        )
        .await?;
    assert!(matches!(r[0], Enqueued::Added(_)), "{r:?}");
    Ok(())
}

/// A `Queue` that has only seen plain calls sends its hot calls (enqueue,
/// claim, ack) with the first 19 keys; once another one gives the queue a
/// time limit or turns its event log on, those calls answer `WIDE`, write
/// nothing, and are made again with all 31: nothing is lost or skipped.
async fn narrow_calls_widen(c: &Client) -> TestResult {
    let plain = c.queue("widen");
    plain.enqueue(["p1"], NOW, OnDuplicate::Keep).await?;
    assert_eq!(claim(&plain).await?, ["p1"]);
    let limit = Duration::from_secs(5);
    c.queue("widen")
        .enqueue([NewTask::new("t").timeout(limit)], NOW, OnDuplicate::Keep)
        .await?;
    plain.enqueue(["p2"], NOW, OnDuplicate::Keep).await?;
    let leases = plain.claim(10, LEASE).await?;
    let mut got: Vec<(&str, Option<Duration>)> = leases
        .iter()
        .map(|l| (l.task().id.as_str(), l.task().timeout))
        .collect();
    got.sort();
    assert_eq!(got, [("p2", None), ("t", Some(limit))]);
    for l in leases {
        l.ack().await?;
    }
    assert_eq!(plain.stats().await?.processed, 3);

    let logged = c.queue("widen-log");
    logged.enqueue(["quiet"], NOW, OnDuplicate::Keep).await?;
    assert_eq!(claim(&logged).await?, ["quiet"]);
    c.queue("widen-log")
        .configure(&QueueSettings::default().events(Some(100)))
        .await?;
    logged.enqueue(["heard"], NOW, OnDuplicate::Keep).await?;
    assert_eq!(claim(&logged).await?, ["heard"]);
    let (events, _) = logged
        .events_page(&dlm::queue::EventsFrom::Start, 100)
        .await?;
    let seen: Vec<String> = events
        .iter()
        .map(|e| format!("{:?} {}", e.kind, e.task))
        .collect();
    assert_eq!(seen, ["Added heard", "Claimed heard", "Completed heard"]);
    Ok(())
}

async fn cases(c: &Client) -> TestResult {
    narrow_calls_widen(c).await?;
    diamond(c).await?;
    refusals(c).await?;
    deaths(c).await?;
    seed_api(c).await?;
    Ok(())
}

on_queue_topologies!(
    dependencies_on_one_server,
    dependencies_as_a_least_privilege_acl_user,
    dependencies_on_a_cluster,
    cases
);
