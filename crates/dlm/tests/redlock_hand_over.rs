//! Redlock's hand-over (issue 36): a guard's release that has a waiting task
//! of the same client moves the lock from its token to the waiter's on every
//! node at once (`release_to.lua` on N nodes); the waiter holds the lock only
//! when a majority handed over within its validity. Five real, independent
//! redis-server processes; frozen nodes with SIGSTOP.
mod common;

use std::time::Duration;

use common::hand_over::*;
use common::*;

/// Right after the release returns (on this current-thread runtime the
/// waiter has not run since), every node already holds one token, the
/// waiter's: the lock was never free in between, and the waiter's guard
/// holds it by that token.
#[tokio::test(flavor = "current_thread")]
async fn a_release_hands_the_lock_to_a_waiting_task_on_every_node() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let c = redlock(&nodes, Duration::from_secs(1)).await;
    let key = c.lock("h").key()?;
    let first = c.lock("h").acquire(&ttl(20_000)).await?;
    let next = waiter(&c, "h", 20_000, Duration::from_secs(10)).await;
    let first_token = first.token().as_str().to_string();
    let released = first.release().await?;
    assert_eq!(released.nodes, 5);
    assert!(
        released.confirmed >= 3,
        "a majority handed over: {released:?}"
    );
    let now = values(&nodes, &key);
    let next = next.await??;
    let theirs = next.token().as_str().to_string();
    assert!(
        now.iter().filter(|v| **v == theirs).count() >= 3
            && now.iter().all(|v| *v == theirs || *v == first_token),
        "the lock went straight to the waiter's token on a majority, the rest on their way: {now:?}"
    );
    assert!(c.lock("h").status().await?.held);
    assert!(c.settle(Duration::from_secs(3)).await);
    let now = values(&nodes, &key);
    assert!(
        now.iter().all(|v| *v == theirs),
        "every node handed over in the end: {now:?}"
    );
    next.release().await?;
    assert!(c.settle(Duration::from_secs(3)).await);
    assert!(values(&nodes, &key).iter().all(String::is_empty));
    Ok(())
}

/// One node frozen: the four others hand over, a majority, so the waiter
/// holds the lock; once thawed, the frozen node's share ends too, and the
/// waiter's release leaves nothing behind.
#[tokio::test(flavor = "current_thread")]
async fn a_frozen_node_does_not_stop_a_hand_over() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let c = redlock(&nodes, Duration::from_secs(1)).await;
    let key = c.lock("f").key()?;
    let first = c.lock("f").acquire(&ttl(20_000)).await?;
    let next = waiter(&c, "f", 20_000, Duration::from_secs(10)).await;
    nodes[4].pause()?;
    let released = first.release().await?;
    assert!(released.confirmed >= 3, "{released:?}");
    let next = next.await??;
    assert!(c.settle(Duration::from_secs(3)).await);
    let now = values(&nodes[..4], &key);
    assert!(
        now.iter().all(|v| v == next.token().as_str()),
        "the live nodes hold the waiter's token: {now:?}"
    );
    nodes[4].resume()?;
    next.release().await?;
    assert!(c.settle(Duration::from_secs(5)).await);
    assert!(
        values(&nodes, &key).iter().all(String::is_empty),
        "nothing is left on any node, the thawed one included"
    );
    Ok(())
}

/// A majority frozen: too few nodes can hand over, so the waiter is not
/// granted the lock (it would hold a minority); it leaves the queue and
/// gets the lock by itself once the nodes thaw, and then alone: no node
/// holds the first guard's token or a token of the failed hand-over.
#[tokio::test(flavor = "current_thread")]
async fn a_hand_over_to_a_minority_grants_nothing() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let c = redlock(&nodes, Duration::from_millis(500)).await;
    let key = c.lock("m").key()?;
    let first = c.lock("m").acquire(&ttl(3_000)).await?;
    let first_token = first.token().clone();
    let next = waiter(&c, "m", 20_000, Duration::from_secs(20)).await;
    for n in &nodes[2..] {
        n.pause()?;
    }
    // The hand-over reaches two nodes only; the normal release that follows
    // cannot confirm on a majority either.
    let released = first.release().await;
    assert!(released.is_err(), "no majority to release on: {released:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !next.is_finished(),
        "the waiter was granted a lock held on a minority"
    );
    for n in &nodes[2..] {
        n.resume()?;
    }
    let next = next.await??;
    assert_ne!(next.token(), &first_token);
    let now = values(&nodes, &key);
    let theirs = now.iter().filter(|v| *v == next.token().as_str()).count();
    assert!(theirs >= 3, "the waiter holds a majority: {now:?}");
    assert!(
        now.iter()
            .all(|v| v.is_empty() || v == next.token().as_str()),
        "no other token is left on any node: {now:?}"
    );
    next.release().await?;
    assert!(c.settle(Duration::from_secs(5)).await);
    Ok(())
}

/// A majority frozen past the hand-over's per-node timeout (1% of the
/// waiter's 20 s TTL: 200 ms), thawed before the release's own timeout: the
/// hand-over fails, but its requests land late on the thawed nodes, moving
/// them from our token to the waiter's. The release must count those nodes
/// as released by us (and free them of the waiter's token, which nobody
/// will take), not report `NotHeld` for a lock that was ours, as it did in
/// CI (`redlock.rs` mutual_exclusion_across_five_nodes); and the waiter gets
/// the lock by itself afterwards.
#[tokio::test(flavor = "current_thread")]
async fn a_hand_over_that_lands_late_is_a_release_of_ours() -> TestResult {
    let nodes = std::sync::Arc::new(RedisServer::start_many(5)?);
    let c = redlock(&nodes, Duration::from_secs(4)).await;
    let key = c.lock("l").key()?;
    let first = c.lock("l").acquire(&ttl(20_000)).await?;
    let next = waiter(&c, "l", 20_000, Duration::from_secs(20)).await;
    for n in &nodes[2..] {
        n.pause()?;
    }
    let frozen = nodes.clone();
    let thaw = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        frozen[2..]
            .iter()
            .map(RedisServer::resume)
            .collect::<Result<Vec<_>, _>>()
    });
    let released = first.release().await;
    thaw.join().expect("the thaw thread")?;
    let released = released?;
    assert!(
        released.confirmed >= 3,
        "a majority no longer holds our token: {released:?}"
    );
    let next = next.await??;
    let now = values(&nodes, &key);
    assert!(
        now.iter().filter(|v| *v == next.token().as_str()).count() >= 3
            && now
                .iter()
                .all(|v| v.is_empty() || v == next.token().as_str()),
        "the waiter holds a majority, and no other token is left: {now:?}"
    );
    next.release().await?;
    assert!(c.settle(Duration::from_secs(5)).await);
    assert!(values(&nodes, &key).iter().all(String::is_empty));
    Ok(())
}
