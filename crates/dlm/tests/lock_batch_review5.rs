//! Review 5 of the lock liveness fix (branch `lockfix2`): interleavings that
//! still break "a release of token T is written behind every acquire of T
//! that may still reach Redis", and tests of the protections that had none
//! against a real Redis (the retired token after `NotReplicated`, the
//! orphaned hand-over).
mod common;

use std::time::Duration;

use common::*;
use dlm::Client;

/// A client on `s` whose calls have deadline `timeout`.
async fn client_with(s: &RedisServer, timeout: Duration) -> Client {
    Client::builder()
        .timeout(timeout)
        .connect(&s.url())
        .await
        .expect("connect to the throwaway server")
}

/// Prepare the client (fence layout, scripts, `release_to.lua`).
async fn warm(s: &RedisServer, c: &Client) -> TestResult {
    c.lock("warm").acquire(&ttl(1000)).await?.release().await?;
    let first = c.lock("warm-h").acquire(&ttl(5_000)).await?;
    let next = {
        let l = c.lock("warm-h");
        tokio::spawn(async move { l.acquire(&ttl(5_000).wait(Duration::from_secs(5))).await })
    };
    waits_for(s, c, "warm-h").await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    first.release().await?;
    next.await??.release().await?;
    Ok(())
}

/// Until a task of `c` waits for lock `name` (its marker is set and it
/// subscribed: it queues for a hand-over right after).
async fn waits_for(s: &RedisServer, c: &Client, name: &str) -> TestResult {
    let key = c.lock(name).key()?;
    let (marker, channel) = (format!("{key}:waiters"), format!("{key}:released"));
    let mut conn = raw(s).await;
    for _ in 0..1000 {
        let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query_async(&mut conn)
            .await?;
        let marked: i64 = redis::cmd("EXISTS")
            .arg(&marker)
            .query_async(&mut conn)
            .await?;
        if subscribers > 0 && marked == 1 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(format!("nobody waits for {name} after 2 s").into())
}

/// Finding 1 (two holders): on one Redis the hand-over's baton carries the
/// waiting acquisition's own token T, and that acquisition keeps trying
/// with T. When its attempt is written right behind the hand-over's
/// `release_to` (T now holds the key), the attempt is granted too ("already
/// held by this token"), so the acquisition returns a guard of T from its
/// attempt and drops its baton. If that happens before the releaser looks
/// at `Arc::strong_count(&next) == 1` (both replies arrive in one read;
/// the task woken last runs first on a worker), the releaser takes the
/// grant for orphaned and releases T in the background: the live guard's
/// lock is deleted and anybody can take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_hand_over_racing_the_successors_own_attempt_keeps_its_lock() -> TestResult {
    let s = server();
    let c = client_with(&s, Duration::from_secs(2)).await;
    warm(&s, &c).await?;
    let mut conn = raw(&s).await;
    let mut lost = Vec::new();
    for i in 0..60 {
        let name = format!("r{i}");
        let g = c.lock(&name).acquire(&ttl(10_000)).await?;
        let a = {
            let l = c.lock(&name);
            tokio::spawn(async move {
                l.acquire(
                    &ttl(10_000)
                        .wait(Duration::from_secs(5))
                        .retry_interval(Duration::from_millis(1)),
                )
                .await
            })
        };
        waits_for(&s, &c, &name).await?;
        tokio::time::sleep(Duration::from_micros(300 * (i % 7))).await;
        g.release().await?;
        let ga = a.await??;
        // The releaser's background work, if any.
        c.settle(Duration::from_secs(2)).await;
        let key = c.lock(&name).key()?;
        let now: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
        if now.as_deref() != Some(ga.token().as_str()) {
            lost.push((i, now));
        }
        let _ = ga.release().await;
    }
    assert!(
        lost.is_empty(),
        "a live guard's key was released behind its back (round, key now): {lost:?}"
    );
    Ok(())
}
