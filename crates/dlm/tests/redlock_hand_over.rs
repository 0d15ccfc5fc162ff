//! Redlock's hand-over (issue 36): a guard's release that has a waiting task
//! of the same client moves the lock from its token to the waiter's on every
//! node at once (`release_to.lua` on N nodes); the waiter holds the lock only
//! when a majority handed over within its validity. Five real, independent
//! redis-server processes; frozen nodes with SIGSTOP.
mod common;

use std::time::Duration;

use common::hand_over::*;
use common::*;
use dlm::Client;

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
    holds_alone_then_frees(&c, &nodes, &key, next.await??).await
}

/// Five nodes, each behind a fault proxy. The replies of three come back
/// 600 ms late (the commands go through at once): the hand-over lands on every
/// node but answers in time on two only (its per-node timeout is 1% of the
/// waiter's 20 s TTL: 200 ms), so it fails. The release must still report the
/// lock as ours and free every node (the waiter's token included, since the
/// waiter is not granted), and the waiter then gets the lock by itself.
#[tokio::test(flavor = "current_thread")]
async fn a_hand_over_behind_slow_replies_fails_cleanly() -> TestResult {
    use dlm_testkit::Direction;
    let nodes = RedisServer::start_many(5)?;
    let (proxies, c) = behind_proxies(
        &nodes,
        36,
        Client::builder().timeout(Duration::from_secs(4)),
    )
    .await?;
    let key = c.lock("p").key()?;
    let first = c.lock("p").acquire(&ttl(20_000)).await?;
    let next = waiter(&c, "p", 20_000, Duration::from_secs(20)).await;
    for p in &proxies[2..] {
        p.set_latency(
            Direction::ToClient,
            Duration::from_millis(600),
            Duration::ZERO,
        );
    }
    let released = first.release().await?;
    assert!(
        released.confirmed >= 3,
        "our token left a majority (moved by the late hand-over, then freed): {released:?}"
    );
    for p in &proxies[2..] {
        p.clear();
    }
    holds_alone_then_frees(&c, &nodes, &key, next.await??).await
}

/// One node cut off by its fault proxy (nothing forwarded either way): the
/// four others hand over, a majority, so the waiter holds the lock at once;
/// healed, the cut node is freed of our token behind the late requests.
#[tokio::test(flavor = "current_thread")]
async fn a_hand_over_past_a_partitioned_node() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let (proxies, c) = behind_proxies(
        &nodes,
        46,
        Client::builder().timeout(Duration::from_secs(2)),
    )
    .await?;
    let key = c.lock("q").key()?;
    let first = c.lock("q").acquire(&ttl(20_000)).await?;
    let first_token = first.token().as_str().to_string();
    let next = waiter(&c, "q", 20_000, Duration::from_secs(20)).await;
    proxies[4].partition();
    let released = first.release().await?;
    assert!(released.confirmed >= 3, "{released:?}");
    let next = next.await??;
    let now = values(&nodes[..4], &key);
    assert!(
        now.iter().all(|v| v == next.token().as_str()),
        "the four reachable nodes hold the waiter's token: {now:?}"
    );
    proxies[4].heal();
    next.release().await?;
    assert!(c.settle(Duration::from_secs(5)).await);
    let now = values(&nodes, &key);
    assert!(
        now.iter().all(|v| v.is_empty() || *v == first_token),
        "nothing of the waiter's is left; the cut node holds at most our old token: {now:?}"
    );
    Ok(())
}

/// A fault proxy in front of each node (seeded `seed`, `seed + 1`, ...) and a
/// Redlock client built by `builder` over the proxies.
async fn behind_proxies(
    nodes: &[RedisServer],
    seed: u64,
    builder: dlm::ClientBuilder,
) -> Result<(Vec<dlm_testkit::FaultProxy>, Client), Box<dyn std::error::Error + Send + Sync>> {
    let proxies = nodes
        .iter()
        .zip(seed..)
        .map(|(n, seed)| dlm_testkit::FaultProxy::in_front_of(n, seed))
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = proxies.iter().map(dlm_testkit::FaultProxy::url).collect();
    let c = builder.connect_many(&urls).await?;
    Ok((proxies, c))
}

/// The waiter's guard `next` holds a majority of `nodes` by its own token and
/// no node holds another; its release then leaves nothing anywhere.
async fn holds_alone_then_frees(
    c: &Client,
    nodes: &[RedisServer],
    key: &str,
    next: dlm::LockGuard,
) -> TestResult {
    let now = values(nodes, key);
    assert!(
        now.iter().filter(|v| *v == next.token().as_str()).count() >= 3
            && now
                .iter()
                .all(|v| v.is_empty() || v == next.token().as_str()),
        "the waiter holds a majority, and no other token is left: {now:?}"
    );
    next.release().await?;
    assert!(c.settle(Duration::from_secs(5)).await);
    assert!(values(nodes, key).iter().all(String::is_empty));
    Ok(())
}
