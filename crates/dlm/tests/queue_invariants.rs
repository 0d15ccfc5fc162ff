//! `Queue::check_invariants` can fail: a queue in every state checks clean,
//! then the Redis state is corrupted by hand, one way per case (a group's
//! in-flight count bumped, a task's state entry deleted beside its payload,
//! an id put in two states, ...), and the check must name each corruption
//! with its invariant and id.
mod common;

use std::time::Duration;

use common::TestResult;
use dlm::queue::{Invariant, InvariantReport, NewTask, OnDuplicate, Queue, QueueSettings};
use redis::AsyncCommands;

const LEASE: Duration = Duration::from_secs(30);

fn key(queue: &str, suffix: &str) -> String {
    format!("dlm:queue:{{{queue}}}:{suffix}")
}

/// A queue with a task in each state: `w` waiting (with a payload), `later`
/// delayed, `run` in flight in group `g`, `parent` waiting with `child`
/// blocked on it, `gone` dead, and `p1`, `p2` of group `g` (limit 1) parked
/// or ready, `small` with a payload in a bucket.
async fn populated(client: &dlm::Client, name: &str) -> dlm::Result<Queue> {
    let q = client.queue(name).max_attempts(1).compact_payloads(true);
    q.configure(&QueueSettings::default().group_concurrency(Some(1)))
        .await?;
    q.enqueue([NewTask::new("gone")], Duration::ZERO, OnDuplicate::Keep)
        .await?;
    for l in q.claim(1, LEASE).await? {
        l.nack("boom").await?;
    }
    q.enqueue(
        [
            NewTask::new("run").group("g"),
            NewTask::new("w").payload(vec![7u8; 100]),
            NewTask::new("small").payload("tiny"),
        ],
        Duration::ZERO,
        OnDuplicate::Keep,
    )
    .await?;
    let leases = q.claim(1, LEASE).await?;
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].task().id, "run");
    q.enqueue(
        [NewTask::new("p1").group("g"), NewTask::new("p2").group("g")],
        Duration::ZERO,
        OnDuplicate::Keep,
    )
    .await?;
    q.enqueue(
        [NewTask::new("later")],
        Duration::from_secs(3600),
        OnDuplicate::Keep,
    )
    .await?;
    q.enqueue(
        [
            NewTask::new("parent"),
            NewTask::new("child").after(["parent"]),
        ],
        Duration::from_secs(3600),
        OnDuplicate::Keep,
    )
    .await?;
    // A claim that parks p1 and p2 behind `run` (group g at its limit) and
    // takes w and small.
    let more = q.claim(10, LEASE).await?;
    let ids: Vec<&str> = more.iter().map(|l| l.task().id.as_str()).collect();
    assert!(!ids.contains(&"p1") && !ids.contains(&"p2"), "{ids:?}");
    for l in more {
        l.abandon().await?;
    }
    Ok(q)
}

fn names(report: &InvariantReport, invariant: Invariant) -> Vec<String> {
    report.of(invariant).map(|v| v.id.clone()).collect()
}

/// A fresh copy of the populated queue, corrupted by `corrupt`, must show a
/// violation of `invariant` naming `id`.
async fn caught(
    client: &dlm::Client,
    raw: &mut redis::aio::MultiplexedConnection,
    name: &str,
    corrupt: &[redis::Cmd],
    invariant: Invariant,
    id: &str,
) -> TestResult {
    let q = populated(client, name).await?;
    let before = q.check_invariants().await?;
    assert!(before.is_ok(), "{name} before corruption: {before:#?}");
    for cmd in corrupt {
        let _: redis::Value = cmd.query_async(raw).await?;
    }
    let after = q.check_invariants().await?;
    assert!(
        names(&after, invariant).iter().any(|v| v == id),
        "{name}: expected a {invariant} violation naming {id:?}: {after:#?}"
    );
    assert!(after.complete);
    Ok(())
}

#[tokio::test]
async fn every_corruption_is_named() -> TestResult {
    let server = common::server();
    let client = common::client(&server).await;
    let mut raw = common::raw(&server).await;

    let q = populated(&client, "clean").await?;
    let clean = q.check_invariants().await?;
    assert!(clean.is_ok(), "{clean:#?}");
    assert!(clean.complete);
    let c = clean.counts;
    assert_eq!(
        (
            c.waiting,
            c.delayed,
            c.parked,
            c.in_flight,
            c.blocked,
            c.dead
        ),
        (2, 2, 2, 1, 1, 1),
        "{clean:#?}"
    );

    let cmd = |name: &str| redis::cmd(name);
    let cases: Vec<(&str, Vec<redis::Cmd>, Invariant, &str)> = vec![
        (
            "bumped",
            vec![
                cmd("HINCRBY")
                    .arg(key("bumped", "gcount"))
                    .arg("g")
                    .arg(1)
                    .clone(),
            ],
            Invariant::GroupCount,
            "g",
        ),
        (
            "zeroed",
            vec![cmd("HDEL").arg(key("zeroed", "gcount")).arg("g").clone()],
            Invariant::GroupCount,
            "g",
        ),
        (
            "twice",
            vec![
                cmd("ZADD")
                    .arg(key("twice", "dead"))
                    .arg(1)
                    .arg("w")
                    .clone(),
            ],
            Invariant::OneState,
            "w",
        ),
        (
            "blockedrun",
            vec![
                cmd("ZADD")
                    .arg(key("blockedrun", "blocked"))
                    .arg(1)
                    .arg("run")
                    .clone(),
            ],
            Invariant::OneState,
            "run",
        ),
        (
            "payloadleft",
            vec![
                cmd("ZREM")
                    .arg(key("payloadleft", "waiting"))
                    .arg("w")
                    .clone(),
            ],
            Invariant::Orphan,
            "w",
        ),
        (
            "bucketleft",
            vec![
                cmd("ZREM")
                    .arg(key("bucketleft", "waiting"))
                    .arg("small")
                    .clone(),
            ],
            Invariant::Orphan,
            "small",
        ),
        (
            "errorleft",
            vec![
                cmd("ZREM")
                    .arg(key("errorleft", "dead"))
                    .arg("gone")
                    .clone(),
            ],
            Invariant::Orphan,
            "gone",
        ),
        (
            "resultleft",
            vec![
                cmd("HSET")
                    .arg(key("resultleft", "results"))
                    .arg("ghost")
                    .arg("r")
                    .clone(),
            ],
            Invariant::Orphan,
            "ghost",
        ),
        (
            "noLease",
            vec![cmd("HDEL").arg(key("noLease", "lease")).arg("run").clone()],
            Invariant::Lease,
            "run",
        ),
        (
            "strayLease",
            vec![
                cmd("HSET")
                    .arg(key("strayLease", "lease"))
                    .arg("w")
                    .arg(1)
                    .clone(),
            ],
            Invariant::Lease,
            "w",
        ),
        (
            "futureLease",
            vec![
                cmd("HSET")
                    .arg(key("futureLease", "lease"))
                    .arg("run")
                    .arg(1_000_000)
                    .clone(),
            ],
            Invariant::Lease,
            "run",
        ),
        (
            "attempts",
            vec![
                cmd("HSET")
                    .arg(key("attempts", "attempts"))
                    .arg("run")
                    .arg(0)
                    .clone(),
            ],
            Invariant::Attempts,
            "run",
        ),
        (
            "negative",
            vec![
                cmd("HSET")
                    .arg(key("negative", "attempts"))
                    .arg("gone")
                    .arg(-1)
                    .clone(),
            ],
            Invariant::Attempts,
            "gone",
        ),
        (
            "pending",
            vec![
                cmd("HINCRBY")
                    .arg(key("pending", "pending"))
                    .arg("child")
                    .arg(1)
                    .clone(),
            ],
            Invariant::Pending,
            "child",
        ),
        (
            "strayPending",
            vec![
                cmd("HSET")
                    .arg(key("strayPending", "pending"))
                    .arg("w")
                    .arg(1)
                    .clone(),
            ],
            Invariant::Pending,
            "w",
        ),
        (
            "edgeTwice",
            vec![
                cmd("HSET")
                    .arg(key("edgeTwice", "children"))
                    .arg("parent")
                    .arg("child\0child\0")
                    .clone(),
            ],
            Invariant::Edge,
            "child",
        ),
        (
            "edgeStale",
            vec![
                cmd("HSET")
                    .arg(key("edgeStale", "children"))
                    .arg("gone")
                    .arg("w\0")
                    .clone(),
            ],
            Invariant::Edge,
            "w",
        ),
        (
            "parked",
            vec![
                cmd("HSET")
                    .arg(key("parked", "parkedid"))
                    .arg("p1")
                    .arg("nonsense")
                    .clone(),
            ],
            Invariant::Parked,
            "p1",
        ),
        (
            "small",
            vec![
                cmd("HINCRBY")
                    .arg(key("small", "stats"))
                    .arg("small")
                    .arg(1)
                    .clone(),
            ],
            Invariant::SmallCount,
            "",
        ),
    ];
    for (name, corrupt, invariant, id) in &cases {
        caught(&client, &mut raw, name, corrupt, *invariant, id).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_bounded_check_says_it_is_incomplete() -> TestResult {
    let server = common::server();
    let client = common::client(&server).await;
    let q = client.queue("big");
    q.enqueue(
        (0..50).map(|i| NewTask::new(format!("t{i}"))),
        Duration::ZERO,
        OnDuplicate::Keep,
    )
    .await?;
    let whole = q.check_invariants().await?;
    assert!(whole.complete && whole.is_ok(), "{whole:#?}");
    assert_eq!(whole.counts.waiting, 50);
    let part = q.check_invariants_up_to(10).await?;
    assert!(!part.complete && part.is_ok(), "{part:#?}");
    assert_eq!(part.counts.waiting, 50, "the counts are exact");
    assert!(q.check_invariants_up_to(0).await.is_err());

    // A stray key of the queue, written by hand, is found with a small bound too.
    let mut raw = common::raw(&server).await;
    let _: i64 = raw.hset(key("big", "errors"), "nobody", "x").await?;
    let part = q.check_invariants_up_to(10).await?;
    assert_eq!(names(&part, Invariant::Orphan), ["nobody"], "{part:#?}");
    Ok(())
}

/// The payload buckets are read only when one exists: a counter that says
/// otherwise, or an entry nobody counted, is found either way.
#[tokio::test]
async fn the_bucket_count_is_checked_with_and_without_buckets() -> TestResult {
    let server = common::server();
    let client = common::client(&server).await;
    let mut raw = common::raw(&server).await;
    let q = client.queue("plain");
    q.push(NewTask::new("a").payload("tiny")).await?; // in `payload`, not a bucket
    assert!(q.check_invariants().await?.is_ok());
    let _: i64 = raw.hincr(key("plain", "stats"), "small", 1).await?;
    let r = q.check_invariants().await?;
    assert_eq!(names(&r, Invariant::SmallCount), [""], "{r:#?}");
    let _: i64 = raw.hincr(key("plain", "stats"), "small", -1).await?;
    let bucket = dlm::keys::queue_payload_bucket("plain", "stray")?;
    let _: i64 = raw.hset(&bucket, "stray", "p").await?;
    let r = q.check_invariants().await?;
    assert_eq!(names(&r, Invariant::SmallCount), [""], "{r:#?}");
    assert_eq!(names(&r, Invariant::Orphan), ["stray"], "{r:#?}");
    Ok(())
}
