//! Issue 33 against a real redis-server: what became of a task
//! (`Queue::wait_outcome`), cancelling and clearing waiting tasks, and one
//! key prefix for everything a client touches.
mod common;

use std::time::{Duration, Instant};

use common::TestResult;
use dlm::queue::{OnDuplicate, Outcome, QueueSettings, TaskState};

const NOW: Duration = Duration::ZERO;
const LEASE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn wait_outcome_tells_every_ending_apart() -> TestResult {
    let s = common::server();
    let c = common::client(&s).await;
    let q = c.queue("outcome").max_attempts(1);
    q.configure(&QueueSettings::default().keep_completed(Some(100)))
        .await?;
    let short = Duration::from_millis(200);
    assert_eq!(q.wait_outcome("never", short).await?, Outcome::Unknown);

    q.enqueue(["dies"], NOW, OnDuplicate::Keep).await?;
    let lease = q.claim(1, LEASE).await?.pop().ok_or("nothing claimed")?;
    lease.nack("it broke").await?;
    assert_eq!(
        q.wait_outcome("dies", short).await?,
        Outcome::Failed(Some("it broke".into()))
    );

    q.enqueue(["plain"], NOW, OnDuplicate::Keep).await?;
    let lease = q.claim(1, LEASE).await?.pop().ok_or("nothing claimed")?;
    lease.ack().await?;
    // A completion without a result ends the wait at once, not at the deadline.
    let t0 = Instant::now();
    assert_eq!(
        q.wait_outcome("plain", Duration::from_secs(60)).await?,
        Outcome::Completed(None)
    );
    assert!(t0.elapsed() < Duration::from_secs(30));

    q.enqueue(["later"], NOW, OnDuplicate::Keep).await?;
    assert_eq!(
        q.wait_outcome("later", short).await?,
        Outcome::Pending(TaskState::Waiting)
    );
    let lease = q.claim(1, LEASE).await?.pop().ok_or("nothing claimed")?;
    lease.ack_with(b"v".to_vec()).await?;
    assert_eq!(
        q.wait_outcome("later", short).await?,
        Outcome::Completed(Some(b"v".to_vec()))
    );
    Ok(())
}

#[tokio::test]
async fn cancel_and_clear_remove_only_waiting_tasks() -> TestResult {
    let s = common::server();
    let c = common::client(&s).await;
    let q = c.queue("cancel");
    q.enqueue(["a", "c"], NOW, OnDuplicate::Keep).await?;
    q.enqueue(["b"], Duration::from_secs(60), OnDuplicate::Keep)
        .await?;
    q.enqueue(["running"], NOW, OnDuplicate::Keep).await?;
    assert!(q.cancel("a").await?);
    assert!(!q.cancel("a").await?, "gone already");
    assert!(q.cancel("b").await?, "a delayed task is cancelled too");
    assert!(!q.cancel("nope").await?);
    let lease = q.claim(1, LEASE).await?.pop().ok_or("nothing claimed")?;
    assert!(
        !q.cancel(&lease.task().id).await?,
        "in flight: not cancelled"
    );
    assert_eq!(q.clear().await?, 1);
    assert_eq!(q.stats().await?.waiting, 0);
    assert_eq!(q.stats().await?.inflight, 1);
    lease.ack().await?;
    Ok(())
}

/// Every key a prefixed client writes starts with its prefix; the keys of
/// a client without one are what they always were.
#[tokio::test]
async fn a_key_prefix_holds_every_key() -> TestResult {
    use redis::AsyncCommands;
    let s = common::server();
    let c = dlm::Client::builder()
        .key_prefix("myapp")
        .connect(&s.url())
        .await?;
    let opts = dlm::LockOptions::new(Duration::from_secs(10));
    let g = c.lock("orders:42").acquire(&opts).await?;
    assert_eq!(g.key(), "myapp:lock:{orders:42}");
    let f = c.fair_lock("fifo").acquire(&opts).await?;
    let w = c.rwlock("doc").write(&opts).await?;
    let sem = c
        .semaphore("pool", 2)
        .acquire(1, &dlm::SemaphoreOptions::new(Duration::from_secs(10)))
        .await?;
    let l = c.election("sched").campaign("a", &opts).await?;
    let q = c.queue("mail");
    q.enqueue(["t"], NOW, OnDuplicate::Keep).await?;
    q.schedule(
        "tick",
        dlm::queue::Repeat::Every(Duration::from_secs(60)),
        None,
    )
    .await?;
    c.stock("s").set(3).await?;
    c.versioned("v").write(0, b"x".to_vec()).await?;
    c.ids("i").next().await?;
    c.rate_limiter("r", 5, Duration::from_secs(1))
        .try_acquire()
        .await?;
    c.fenced_write("res", g.fence().ok_or("no fence")?, b"x")
        .await?;
    let mut raw = common::raw(&s).await;
    let keys: Vec<String> = raw.keys("*").await?;
    assert!(keys.len() > 10, "{keys:?}");
    for k in &keys {
        assert!(k.starts_with("myapp:"), "{k} is outside the prefix");
    }
    assert_eq!(c.queue_names(10).await?, vec!["mail".to_string()]);
    drop((f, w, sem, l));
    g.release().await?;
    let plain = common::client(&s).await;
    let g = plain.lock("orders:42").acquire(&opts).await?;
    assert_eq!(g.key(), "dlm:lock:{orders:42}");
    g.release().await?;
    Ok(())
}
