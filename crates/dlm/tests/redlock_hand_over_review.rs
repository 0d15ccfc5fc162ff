//! Adversarial review of the Redlock hand-over (commit 3b0ecc8): interleavings
//! of `guard::hand_over_quorum`, its failed path (`release_failed_hand_over`)
//! and the waiter's `Enlistment`, on five real, independent redis-server
//! processes. A test here that fails on main shows a defect (see the review
//! report); the others cover cases worth keeping.
//!
//! Failed on 3b0ecc8, fixed since (see `lock::guard`):
//! `a_stale_guards_failed_hand_over_does_not_delete_anothers_grant` (two
//! holders), `a_cancelled_release_does_not_strand_the_waiter` (held for
//! nobody), `a_failed_hand_over_ends_within_the_call_timeout` (a release
//! three call timeouts long). Pass: `a_hand_over_to_a_dropped_waiter_is_given_back`,
//! `a_hand_over_works_for_a_least_privilege_user`.
mod common;

use std::time::Duration;

use common::hand_over::*;
use common::*;

fn count(values: &[String], token: &str) -> usize {
    values.iter().filter(|v| *v == token).count()
}

/// Finding 1 (two holders). A guard whose lease ran out (`stale`, its key
/// expired on every node) and the guard that then took the lock (`live`),
/// both of one client, release at the same time while a third task of the
/// client waits. Both pick the same baton (`next_baton` only peeks; the
/// baton leaves the queue only after a hand-over is over). The live guard's
/// hand-over succeeds and grants the waiter; the stale guard's fails on every
/// node (they hold the live token, then the waiter's), and its failed path
/// (`release_failed_hand_over`) then releases the *waiter's* token on every
/// node where its own was not found: it deletes the lock the waiter was just
/// granted. The waiter holds a guard over keys that are gone, so another
/// client takes the lock too; and the stale guard's `release()` reports
/// `Ok` with 5 confirmations for a lock that was not its own.
#[tokio::test(flavor = "current_thread")]
async fn a_stale_guards_failed_hand_over_does_not_delete_anothers_grant() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let c = redlock(&nodes, Duration::from_secs(2)).await;
    let other = redlock(&nodes, Duration::from_secs(2)).await;
    let key = c.lock("s").key()?;
    let stale = c.lock("s").acquire(&ttl(1_000)).await?;
    // Its key expires on every node (no watchdog).
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert!(values(&nodes, &key).iter().all(String::is_empty));
    let live = c.lock("s").acquire(&ttl(20_000)).await?;
    let next = waiter(&c, "s", 20_000, Duration::from_secs(20)).await;
    assert!(
        !next.is_finished(),
        "the waiter queued behind the live guard"
    );
    // Both release at once (the stale one polled first).
    let (stale_released, live_released) = tokio::join!(stale.release(), live.release());
    live_released?;
    let next = tokio::time::timeout(Duration::from_secs(10), next).await???;
    let theirs = next.token().as_str().to_string();
    // Let every request of the hand-overs land.
    assert!(c.settle(Duration::from_secs(5)).await);
    let now = values(&nodes, &key);
    let intruder = other.lock("s").acquire(&ttl(20_000)).await;
    let mut wrong = Vec::new();
    if count(&now, &theirs) < 3 {
        wrong.push(format!(
            "the waiter was granted the lock, but a majority does not hold its token: {now:?}"
        ));
    }
    if let Ok(g) = &intruder {
        wrong.push(format!(
            "another client acquired the lock while the waiter's guard holds it (two holders: {} and {})",
            theirs,
            g.token().as_str()
        ));
    }
    if let Ok(r) = &stale_released {
        wrong.push(format!(
            "the stale guard's release reported Ok({r:?}) for a lock that was not its own"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("; "));
    next.release().await?;
    Ok(())
}

/// Finding 2 (held for nobody, a waiter stranded). `release()` is an async
/// call its caller may cancel (a `tokio::time::timeout` around it, a
/// `select!` on shutdown). Cancelled while its hand-over waits for slow
/// nodes, the requests already written still land and move every node to the
/// waiter's baton token; but nobody grants the baton, notifies it or gives
/// the token back, and the baton stays first in the queue. The waiter's own
/// attempts never send that token (by design), so they find the lock busy:
/// the lock is held for nobody, with the waiter's full TTL, and the waiter
/// waits that long (here 20 s) although nobody holds the lock. (A plain
/// release cancelled the same way frees the lock once its written deletes
/// land, and on one Redis the waiter's next attempt finds its own token.)
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_release_does_not_strand_the_waiter() -> TestResult {
    let nodes = std::sync::Arc::new(RedisServer::start_many(5)?);
    let c = redlock(&nodes, Duration::from_secs(2)).await;
    let key = c.lock("c").key()?;
    // Its hand-over waits up to 1 s per node.
    let first = c
        .lock("c")
        .acquire(&ttl(20_000).node_timeout(Duration::from_secs(1)))
        .await?;
    let first_token = first.token().as_str().to_string();
    let next = waiter(&c, "c", 20_000, Duration::from_secs(40)).await;
    for n in &nodes[2..] {
        n.pause()?;
    }
    // The caller gives up on the release while the hand-over waits for the
    // frozen nodes (it cannot decide before their 1 s timeout).
    let cancelled = tokio::time::timeout(Duration::from_millis(300), first.release()).await;
    assert!(cancelled.is_err(), "the release could not decide in 300 ms");
    for n in &nodes[2..] {
        n.resume()?;
    }
    // Nobody holds the lock now: the waiter must get it soon (well within
    // its 20 s TTL), by a grant or by its own attempts.
    let got = tokio::time::timeout(Duration::from_secs(8), next).await;
    let now = values(&nodes, &key);
    match got {
        Ok(joined) => {
            let guard = joined??;
            guard.release().await?;
            Ok(())
        }
        Err(_) => panic!(
            "the waiter is still waiting 8 s after a cancelled release, while the nodes hold a \
             token nobody holds (not the first guard's {first_token}): {now:?}"
        ),
    }
}

/// Finding 3 (a release past its deadline). With a majority frozen, a plain
/// Redlock release gives up after one per-node release timeout (a quarter
/// of the call timeout); a release that tries a hand-over first waits the
/// hand-over's per-node timeout (the acquisition's, up to the call timeout),
/// then on each frozen node a release of our token and, after it failed, a
/// release of the waiter's token, one after the other, each with
/// max(that per-node timeout, a quarter of the call timeout): three call
/// timeouts in all, for a call documented to end within its deadline.
#[tokio::test(flavor = "current_thread")]
async fn a_failed_hand_over_ends_within_the_call_timeout() -> TestResult {
    let nodes = RedisServer::start_many(5)?;
    let timeout = Duration::from_secs(1);
    let c = redlock(&nodes, timeout).await;
    let first = c
        .lock("t")
        .acquire(&ttl(20_000).node_timeout(timeout))
        .await?;
    let next = waiter(&c, "t", 20_000, Duration::from_secs(30)).await;
    for n in &nodes[2..] {
        n.pause()?;
    }
    let started = tokio::time::Instant::now();
    let released = first.release().await;
    let took = started.elapsed();
    for n in &nodes[2..] {
        n.resume()?;
    }
    assert!(released.is_err(), "no majority to release on: {released:?}");
    // Generous: twice the call timeout.
    assert!(
        took <= timeout * 2,
        "a release with a majority frozen took {took:?}, with a call timeout of {timeout:?}"
    );
    let next = tokio::time::timeout(Duration::from_secs(25), next).await???;
    next.release().await?;
    assert!(c.settle(Duration::from_secs(5)).await);
    Ok(())
}

/// Covered, sound: the waiter's acquisition is dropped while the hand-over
/// to it waits for frozen nodes; the hand-over then succeeds for nobody
/// (the nodes thaw in time), and both the acquisition's armed baton token
/// and the hand-over's give-back (the baton orphaned, not kept) free it:
/// nothing is left on any node, and another client gets the lock at once.
#[tokio::test(flavor = "current_thread")]
async fn a_hand_over_to_a_dropped_waiter_is_given_back() -> TestResult {
    let nodes = std::sync::Arc::new(RedisServer::start_many(5)?);
    let c = redlock(&nodes, Duration::from_secs(2)).await;
    let other = redlock(&nodes, Duration::from_secs(2)).await;
    let key = c.lock("d").key()?;
    let first = c
        .lock("d")
        .acquire(&ttl(20_000).node_timeout(Duration::from_secs(2)))
        .await?;
    let next = waiter(&c, "d", 20_000, Duration::from_secs(30)).await;
    for n in &nodes[2..] {
        n.pause()?;
    }
    let release = tokio::spawn(async move { first.release().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    next.abort();
    let _ = next.await;
    for n in &nodes[2..] {
        n.resume()?;
    }
    let released = tokio::time::timeout(Duration::from_secs(10), release).await???;
    assert!(released.confirmed >= 3, "{released:?}");
    assert!(c.settle(Duration::from_secs(5)).await);
    let now = values(&nodes, &key);
    assert!(
        now.iter().all(String::is_empty),
        "a grant nobody takes is given back: {now:?}"
    );
    other
        .lock("d")
        .acquire(&ttl(5_000))
        .await?
        .release()
        .await?;
    Ok(())
}

/// Covered, sound: the hand-over as the least-privilege user of
/// `dlm::keys::ACL_RULES` on every node (`release_to.lua` and its fencing
/// counter are within the rules; the wake-ups subscribe on the first node).
#[tokio::test(flavor = "current_thread")]
async fn a_hand_over_works_for_a_least_privilege_user() -> TestResult {
    let nodes = (0..5)
        .map(|_| {
            RedisServer::builder()
                .acl_user("dlm", "s3cret", dlm::keys::ACL_RULES)
                .start()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let urls: Vec<String> = nodes.iter().map(|n| n.url_as("dlm", "s3cret")).collect();
    let c = dlm::Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_many(&urls)
        .await?;
    let key = c.lock("a").key()?;
    let first = c.lock("a").acquire(&ttl(20_000)).await?;
    let next = waiter(&c, "a", 20_000, Duration::from_secs(20)).await;
    let released = first.release().await?;
    assert!(released.confirmed >= 3, "{released:?}");
    let next = tokio::time::timeout(Duration::from_secs(10), next).await???;
    assert!(c.settle(Duration::from_secs(5)).await);
    let now = values(&nodes, &key);
    assert!(
        now.iter().all(|v| v == next.token().as_str()),
        "every node holds the waiter's token: {now:?}"
    );
    next.release().await?;
    assert!(c.settle(Duration::from_secs(5)).await);
    assert!(values(&nodes, &key).iter().all(String::is_empty));
    Ok(())
}
