//! Inspection for dashboards against a real redis-server: tasks by state in
//! bounded pages, the oldest due age, queue discovery with SCAN, held locks
//! matching a glob, and the release by force.
mod common;

use std::time::Duration;

use common::*;
use dlm::queue::{NewTask, OnDuplicate, TaskState};

#[tokio::test]
async fn tasks_by_state_queue_names_and_held_locks() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("inspect").max_attempts(1);
    q.enqueue(
        [NewTask::new("w1").payload("0123456789"), NewTask::new("w2")],
        Duration::ZERO,
        OnDuplicate::Keep,
    )
    .await?;
    q.enqueue(["later"], Duration::from_secs(60), OnDuplicate::Keep)
        .await?;
    q.enqueue(["fly", "doomed"], Duration::ZERO, OnDuplicate::Keep)
        .await?;
    // Claims w1, w2 and fly... in due order; give back all but "fly" and kill "doomed".
    let leases = q.claim(10, Duration::from_secs(30)).await?;
    for lease in leases {
        match lease.task().id.as_str() {
            "fly" => std::mem::forget(lease),
            "doomed" => drop(lease.nack_after(Duration::ZERO, "boom <b>").await?),
            _ => lease.abandon().await?,
        }
    }

    let waiting = q.tasks(TaskState::Waiting, 0, 10, 4).await?;
    assert_eq!(waiting.total, 2);
    let ids: Vec<&str> = waiting.tasks.iter().map(|t| t.id.as_str()).collect();
    assert!(ids.contains(&"w1") && ids.contains(&"w2"), "{ids:?}");
    let w1 = waiting.tasks.iter().find(|t| t.id == "w1").ok_or("w1")?;
    assert_eq!(w1.payload_len, Some(10));
    assert_eq!(w1.payload_preview.as_deref(), Some(&b"0123"[..]));
    assert_eq!(q.tasks(TaskState::Delayed, 0, 10, 0).await?.total, 1);
    let flying = q.tasks(TaskState::InFlight, 0, 10, 0).await?;
    assert_eq!(flying.total, 1);
    assert_eq!(flying.tasks[0].id, "fly");
    assert!(flying.tasks[0].fence.is_some());
    assert!(flying.tasks[0].score > flying.now);
    let dead = q.tasks(TaskState::Dead, 0, 10, 0).await?;
    assert_eq!(dead.tasks[0].id, "doomed");
    assert_eq!(dead.tasks[0].error.as_deref(), Some("boom <b>"));
    assert_eq!(dead.tasks[0].attempts, 1);
    // Paging and its bound.
    assert_eq!(q.tasks(TaskState::Waiting, 1, 10, 0).await?.tasks.len(), 1);
    assert!(q.tasks(TaskState::Waiting, 0, 201, 0).await.is_err());
    assert!(q.oldest_due_age().await?.is_some());

    c.queue("other").push("x").await?;
    // Queues whose only tasks have a priority, a group or dependencies.
    c.queue("prio")
        .enqueue(
            [NewTask::new("p").priority(5)],
            Duration::ZERO,
            OnDuplicate::Keep,
        )
        .await?;
    c.queue("grouped")
        .enqueue(
            [NewTask::new("g").group("g1")],
            Duration::ZERO,
            OnDuplicate::Keep,
        )
        .await?;
    c.queue("graph")
        .enqueue(
            [NewTask::new("late")
                .after(["soon"])
                .deps_may_come_later(true)],
            Duration::ZERO,
            OnDuplicate::Keep,
        )
        .await?;
    assert_eq!(
        c.queue_names(10).await?,
        ["graph", "grouped", "inspect", "other", "prio"]
    );

    let opts = dlm::LockOptions::new(Duration::from_secs(30));
    let _a = c.lock("orders:1").acquire(&opts).await?;
    let _b = c.lock("users:1").acquire(&opts).await?;
    let held = c.held_locks("orders:*", 10).await?;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].name, "orders:1");
    assert!(held[0].ttl.is_some_and(|t| t <= Duration::from_secs(30)));
    assert!(held[0].fence.is_some());
    assert_eq!(c.held_locks("*", 10).await?.len(), 2);
    assert!(c.lock("orders:1").force_release().await?);
    assert!(!c.lock("orders:1").status().await?.held);
    assert!(c.held_locks("orders:*", 10).await?.is_empty());
    Ok(())
}
