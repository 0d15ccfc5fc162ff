//! The batched fair lock (`acquire_many.lua`, `release_many.lua`) must
//! decide every lock of a batch as a call of its own would: a Redis error
//! on one lock (here: a queue key of the wrong type, the kind of damage
//! `acquire_many.lua` already survives for a fencing counter that is not an
//! integer) must fail that lock only. A `redis.call` error aborts the whole
//! script, so without a guard per lock the other callers of the batch are
//! told their acquire or release failed although it was done in Redis, and
//! the waiters of the locks decided after the bad one are not woken.
//!
//! The batches are built as in `fair_batch_review.rs`: the server is frozen
//! (SIGSTOP), one lone acquire takes a batch slot, and the requests under
//! test, spawned in order on a current-thread runtime, gather in one batch.
mod common;

use std::time::Duration;

use common::*;
use dlm::Client;

async fn client_with(s: &RedisServer, timeout: Duration) -> Client {
    Client::builder()
        .timeout(timeout)
        .connect(&s.url())
        .await
        .expect("connect to the throwaway server")
}

async fn warm(c: &Client) -> TestResult {
    c.fair_lock("warm")
        .acquire(&ttl(1000))
        .await?
        .release()
        .await?;
    Ok(())
}

/// Damage fair lock `name`: its queue key holds a string.
fn break_queue(s: &RedisServer, c: &Client, name: &str) -> TestResult {
    let key = c.fair_lock(name).key()?;
    s.command(&["SET", &format!("{key}:queue"), "not a list"])?;
    Ok(())
}

fn fill_a_slot(c: &Client, name: &str) -> tokio::task::JoinHandle<dlm::Result<dlm::FairGuard>> {
    let lock = c.fair_lock(name);
    tokio::spawn(async move { lock.acquire(&ttl(20_000)).await })
}

fn try_acquire(c: &Client, name: &str) -> tokio::task::JoinHandle<dlm::Result<dlm::FairGuard>> {
    let lock = c.fair_lock(name);
    tokio::spawn(async move { lock.acquire(&ttl(20_000)).await })
}

/// Batch `[acquire g1, acquire bad, acquire g2]`, all free locks: g1 and g2
/// are granted as alone; only `bad` fails. Step by step without the guard:
/// g1 is SET (granted), `LINDEX bad:queue` raises WRONGTYPE, the script
/// aborts, and g1 and g2 both get the error (g1 was taken in Redis and is
/// then cancelled by its caller; g2 never ran).
#[tokio::test(flavor = "current_thread")]
async fn a_redis_error_on_one_lock_fails_only_that_acquire() -> TestResult {
    let s = server();
    let c = client_with(&s, Duration::from_secs(2)).await;
    warm(&c).await?;
    break_queue(&s, &c, "bad")?;
    s.pause()?;
    let fill = fill_a_slot(&c, "fill");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let g1 = try_acquire(&c, "g1");
    let bad = try_acquire(&c, "bad");
    let g2 = try_acquire(&c, "g2");
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.resume()?;
    drop(fill.await?);
    let (g1, bad, g2) = (g1.await?, bad.await?, g2.await?);
    assert!(bad.is_err(), "the damaged lock cannot be acquired: {bad:?}");
    assert!(
        g1.is_ok() && g2.is_ok(),
        "an error on another lock of the batch failed these acquires: g1 {:?}, g2 {:?}",
        g1.as_ref().err(),
        g2.as_ref().err()
    );
    if let (Ok(g1), Ok(g2)) = (g1, g2) {
        g1.release().await?;
        g2.release().await?;
    }
    Ok(())
}

/// Batch `[release g1, release bad, release g2]`, g2 with a waiter (another
/// client, whose next look is far away): every release is done; only the
/// damaged lock may report an error. Step by step without the guard: the
/// three holder keys are deleted (one DEL), g1's line is empty, `LINDEX
/// bad:queue` raises WRONGTYPE, the script aborts: g1 and g2 are told their
/// release failed although both locks are gone, and g2's waiter is never
/// woken (it waits for its next look, here seconds away).
#[tokio::test(flavor = "current_thread")]
async fn a_redis_error_on_one_lock_fails_only_that_release_and_wakes_the_others() -> TestResult {
    let s = server();
    let c = client_with(&s, Duration::from_secs(2)).await;
    warm(&c).await?;
    let g1 = c.fair_lock("g1").acquire(&ttl(20_000)).await?;
    let bad = c.fair_lock("bad").acquire(&ttl(20_000)).await?;
    let g2 = c.fair_lock("g2").acquire(&ttl(20_000)).await?;
    // A waiter on g2 in another client: it looks again only on its wake-up,
    // or when its queue lease needs refreshing (every 10 s here).
    let other = client_with(&s, Duration::from_secs(2)).await;
    let waiter = {
        let l = other.fair_lock("g2").queue_lease(Duration::from_secs(30));
        tokio::spawn(async move {
            let g = l
                .acquire(&ttl(20_000).wait(Duration::from_secs(30)))
                .await?;
            Ok::<_, dlm::Error>((tokio::time::Instant::now(), g))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    break_queue(&s, &c, "bad")?;
    s.pause()?;
    let fill = fill_a_slot(&c, "fill");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let r1 = tokio::spawn(async move { g1.release().await });
    let rb = tokio::spawn(async move { bad.release().await });
    let r2 = tokio::spawn(async move { g2.release().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.resume()?;
    let resumed = tokio::time::Instant::now();
    drop(fill.await?);
    let (r1, _rb, r2) = (r1.await?, rb.await?, r2.await?);
    assert!(
        r1.is_ok() && r2.is_ok(),
        "an error on another lock of the batch failed these releases: g1 {r1:?}, g2 {r2:?}"
    );
    let (woke, g) = tokio::time::timeout(Duration::from_secs(15), waiter).await???;
    assert!(
        woke - resumed < Duration::from_secs(2),
        "g2's waiter was not woken by g2's release (took {:?})",
        woke - resumed
    );
    g.release().await?;
    Ok(())
}
