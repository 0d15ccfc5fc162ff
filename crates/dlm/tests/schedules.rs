//! Repeating tasks against a real redis-server: one task per tick with
//! several schedulers, the catch-up policy, listing and removing, workers
//! firing ticks by themselves, bad input.
mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use dlm::Error;
use dlm::queue::{Repeat, Scheduled, WorkerOptions};
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

/// The tick of a task id `ID@TICK`.
fn tick(id: &str) -> u64 {
    id.rsplit_once('@')
        .and_then(|(_, t)| t.parse().ok())
        .expect("a tick")
}

#[tokio::test]
async fn several_schedulers_fire_each_tick_once() -> TestResult {
    let s = server();
    let q = client(&s).await.queue("sched");
    let every = Duration::from_millis(500);
    assert_eq!(
        q.schedule("beat", Repeat::Every(every), Some(b"p".to_vec()))
            .await?,
        Scheduled::Added
    );
    let stop = CancellationToken::new();
    let mut runners = Vec::new();
    for _ in 0..4 {
        let q = client(&s).await.queue("sched");
        let stop = stop.clone();
        runners.push(tokio::spawn(async move {
            let mut fired = 0;
            while !stop.is_cancelled() {
                fired += q.run_schedules().await?.fired;
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..20))).await;
            }
            Ok::<_, Error>(fired)
        }));
    }
    tokio::time::sleep(Duration::from_millis(2600)).await;
    stop.cancel();
    let mut fired = 0;
    for r in runners {
        fired += r.await??;
    }
    let tasks = q.pop(1000).await?;
    let ids: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids.len(), tasks.len());
    assert_eq!(tasks.len(), fired);
    assert!((5..=6).contains(&fired), "{fired} ticks in 2.6 s at 500 ms");
    for t in &tasks {
        assert_eq!(tick(&t.id) % 500, 0, "{} is off the grid", t.id);
        assert_eq!(t.payload.as_deref(), Some(&b"p"[..]));
    }
    Ok(())
}

#[tokio::test]
async fn after_downtime_one_catch_up_run_then_the_grid() -> TestResult {
    let s = server();
    let q = client(&s).await.queue("late");
    q.schedule("t", Repeat::Every(Duration::from_millis(100)), None)
        .await?;
    // Nobody runs the scheduler for ten ticks.
    tokio::time::sleep(Duration::from_millis(1050)).await;
    let first = q.run_schedules().await?;
    assert_eq!(first.fired, 1);
    assert!(
        first
            .next_in
            .is_some_and(|d| d <= Duration::from_millis(100))
    );
    assert_eq!(q.run_schedules().await?.fired, 0);
    let listed = q.schedules(10).await?;
    let popped = q.pop(100).await?;
    assert_eq!(popped.len(), 1);
    assert!(listed[0].next_tick > tick(&popped[0].id) + 900);
    Ok(())
}

#[tokio::test]
async fn schedules_are_listed_changed_and_removed() -> TestResult {
    let s = server();
    let q = client(&s).await.queue("admin");
    let cron = Repeat::Cron("0 7 * * *".into());
    assert_eq!(
        q.schedule("digest", cron.clone(), None).await?,
        Scheduled::Added
    );
    assert_eq!(
        q.schedule("digest", cron.clone(), None).await?,
        Scheduled::Unchanged
    );
    let before = q.schedules(10).await?;
    assert_eq!(
        q.schedule("digest", cron.clone(), Some(b"x".to_vec()))
            .await?,
        Scheduled::Changed
    );
    let after = q.schedules(10).await?;
    assert_eq!(
        after[0].next_tick, before[0].next_tick,
        "a payload change kept the tick"
    );
    assert_eq!(after[0].next_tick % 86_400_000, 7 * 3_600_000);
    assert_eq!(after[0].repeat, cron);
    assert_eq!(after[0].payload.as_deref(), Some(&b"x"[..]));
    q.schedule("often", Repeat::Every(Duration::from_secs(1)), None)
        .await?;
    let ids: Vec<String> = q.schedules(10).await?.into_iter().map(|s| s.id).collect();
    assert_eq!(ids, ["often", "digest"]);
    assert!(q.unschedule("digest").await?);
    assert!(!q.unschedule("digest").await?);
    assert_eq!(q.schedules(10).await?.len(), 1);
    Ok(())
}

#[tokio::test]
async fn invalid_schedules_write_nothing() -> TestResult {
    let s = server();
    let q = client(&s).await.queue("bad");
    for bad in [
        Repeat::Cron("every tuesday".into()),
        Repeat::Cron("0 0 30 2 *".into()),
        Repeat::Every(Duration::ZERO),
    ] {
        let r = q.schedule("x", bad, None).await;
        assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    }
    let r = q
        .schedule("", Repeat::Every(Duration::from_secs(1)), None)
        .await;
    assert!(matches!(r, Err(Error::InvalidArgument { .. })));
    let mut conn = raw(&s).await;
    let keys: Vec<String> = conn.keys("*").await?;
    assert!(keys.is_empty(), "{keys:?}");
    Ok(())
}

#[tokio::test]
async fn workers_fire_ticks_by_themselves() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let q = c.queue("auto");
    q.schedule("job", Repeat::Every(Duration::from_millis(500)), None)
        .await?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let mut workers = Vec::new();
    for _ in 0..3 {
        let q = client(&s).await.queue("auto");
        let (seen, stop) = (seen.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            q.worker(WorkerOptions::new().concurrency(1))
                .run(
                    move |task| {
                        let seen = seen.clone();
                        async move {
                            seen.lock().map(|mut s| s.push(task.id)).ok();
                            Ok::<(), std::io::Error>(())
                        }
                    },
                    stop,
                )
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(2600)).await;
    stop.cancel();
    for w in workers {
        w.await??;
    }
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), seen.len(), "a tick ran twice: {seen:?}");
    assert!((4..=6).contains(&seen.len()), "{seen:?}");
    Ok(())
}
