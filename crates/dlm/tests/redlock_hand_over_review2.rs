//! Adversarial review 2 of the Redlock hand-over (commit d9eb40a: the
//! waiter claimed before handing over, the waiter's token released only
//! where our hand-over moved it or did not answer, a Redlock release run as
//! a tracked task, the failed path bounded by the call timeout), on five
//! real, independent redis-server processes. See the review report; every
//! test here covers an interleaving of that commit.
mod common;

use std::time::Duration;

use common::hand_over::*;
use common::*;

fn foreign(values: &[String], allowed: &str) -> Vec<String> {
    values
        .iter()
        .filter(|v| !v.is_empty() && *v != allowed)
        .cloned()
        .collect()
}

/// A failed hand-over with a majority frozen (the `None` case on three
/// nodes: our token and the waiter's released at once, within what is left
/// of the call timeout, which runs out): once the nodes thaw, the late
/// `release_to` lands first and the two releases behind it clean the node;
/// the waiter (woken without a grant) then takes the lock by its own
/// attempts, and no node holds the first guard's or the baton's token.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_hand_over_leaves_no_token_once_the_nodes_thaw() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let timeout = Duration::from_secs(1);
    let c = redlock(&nodes, timeout).await;
    let key = c.lock("f").key()?;
    let first = c
        .lock("f")
        .acquire(&ttl(20_000).node_timeout(timeout))
        .await?;
    let next = waiter(&c, "f", 20_000, Duration::from_secs(40)).await;
    for n in &nodes[2..] {
        n.pause()?;
    }
    let released = first.release().await;
    for n in &nodes[2..] {
        n.resume()?;
    }
    assert!(
        released.is_err(),
        "no majority answered in time: {released:?}"
    );
    let next = tokio::time::timeout(Duration::from_secs(15), next).await???;
    assert!(c.settle(Duration::from_secs(5)).await);
    let now = values(&nodes, &key);
    let left = foreign(&now, next.token().as_str());
    assert!(
        left.is_empty(),
        "nodes hold tokens nobody holds (the waiter holds {}): {now:?}",
        next.token().as_str()
    );
    next.release().await?;
    Ok(())
}

/// A majority frozen only a little longer than the hand-over's per-node
/// timeout: the hand-over fails (no answer from three nodes), the nodes thaw
/// within what is left of the call timeout, the late hand-overs land and the
/// clean-up finds the waiter's token there: the release reports the lock as
/// ours on every node, and leaves nothing behind.
#[tokio::test(flavor = "current_thread")]
async fn a_briefly_frozen_majority_still_reports_the_lock_as_ours() -> TestResult {
    let nodes = std::sync::Arc::new(RedisServer::start_many(5)?);
    let c = redlock(&nodes, Duration::from_secs(4)).await;
    let key = c.lock("b").key()?;
    let first = c
        .lock("b")
        .acquire(&ttl(20_000).node_timeout(Duration::from_millis(500)))
        .await?;
    let next = waiter(&c, "b", 20_000, Duration::from_secs(40)).await;
    for n in &nodes[2..] {
        n.pause()?;
    }
    let release = tokio::spawn(async move { first.release().await });
    // Past the hand-over's 500 ms, well within the 4 s call timeout.
    tokio::time::sleep(Duration::from_millis(900)).await;
    for n in &nodes[2..] {
        n.resume()?;
    }
    let released = tokio::time::timeout(Duration::from_secs(10), release).await??;
    let next = tokio::time::timeout(Duration::from_secs(15), next).await???;
    assert!(c.settle(Duration::from_secs(5)).await);
    let now = values(&nodes, &key);
    let left = foreign(&now, next.token().as_str());
    let released = released?;
    assert!(released.confirmed >= 3, "{released:?}");
    assert!(left.is_empty(), "stale tokens left: {now:?}");
    next.release().await?;
    Ok(())
}

/// A stale guard (its keys expired) and the guard that took the lock after
/// it release at the same time, with one waiter queued. Whichever claims the
/// waiter's baton, the waiter gets the lock at once (granted, or woken by
/// the failed hand-over and the live guard's release), nobody else can take
/// it while it holds it, the live release reports `Ok` and the stale one
/// does not.
#[tokio::test(flavor = "current_thread")]
async fn a_stale_guard_that_claims_the_only_waiter_does_not_hold_it_up() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let c = redlock(&nodes, Duration::from_secs(2)).await;
    let other = redlock(&nodes, Duration::from_secs(2)).await;
    let key = c.lock("o").key()?;
    let stale = c.lock("o").acquire(&ttl(1_000)).await?;
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert!(values(&nodes, &key).iter().all(String::is_empty));
    let live = c.lock("o").acquire(&ttl(20_000)).await?;
    // A long retry interval: the waiter must be granted or woken, not poll.
    let lock = c.lock("o");
    let next = tokio::spawn(async move {
        lock.acquire(
            &ttl(20_000)
                .wait(Duration::from_secs(60))
                .retry_interval(Duration::from_secs(20)),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!next.is_finished());
    let (stale_released, live_released) = tokio::join!(stale.release(), live.release());
    live_released?;
    let got = tokio::time::timeout(Duration::from_secs(8), next).await;
    let now = values(&nodes, &key);
    let next = match got {
        Ok(j) => j??,
        Err(_) => panic!("the waiter still waits 8 s after both releases: {now:?}"),
    };
    assert!(stale_released.is_err(), "{stale_released:?}");
    let intruder = other.lock("o").acquire(&ttl(5_000)).await;
    assert!(intruder.is_err(), "two holders: {intruder:?}");
    next.release().await?;
    Ok(())
}
