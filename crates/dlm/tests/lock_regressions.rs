//! The four lock defects of issue 30, each with the test that failed before
//! its fix (RELIABILITY.md lists them):
//!
//! 1. fences went backwards when a URL client and a `connection()` client
//!    took turns on one lock (two counter layouts on one Redis);
//! 2. a user with the ACL rules from before the transaction path never got
//!    a free lock on the first try;
//! 3. a Redlock extension revived an expired lock that another client held
//!    in between (by token, and through a watchdog whose renewals are late);
//! 4. an error after the transaction's `SET`s ran left the lock held for
//!    nobody until its TTL.
mod common;

use std::time::Duration;

use common::*;
use dlm::Error;
use dlm_testkit::FaultProxy;
use redis::AsyncCommands;

/// A client on `server` built from an existing connection (`connection()`).
async fn connection_client(
    s: &RedisServer,
) -> Result<dlm::Client, Box<dyn std::error::Error + Send + Sync>> {
    let conn = redis::Client::open(s.url())?
        .get_multiplexed_async_connection()
        .await?;
    Ok(dlm::Client::builder()
        .timeout(Duration::from_millis(1500))
        .connection(conn)?)
}

/// Defect 1: a URL client and a `connection()` client on one Redis take
/// turns on one lock; the fences grow in grant order whoever took them.
/// (Before the fix the URL client used the shared counter and the
/// `connection()` client a per-slot one: 2^48+302, then 2^48+1.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_grow_in_grant_order_whatever_built_the_client() -> TestResult {
    let s = server();
    let by_url = client(&s).await;
    let by_conn = connection_client(&s).await?;
    // Another lock moves the shared sequence along first.
    for i in 0..50 {
        by_url
            .lock(format!("warm-{i}"))
            .acquire(&ttl(5_000))
            .await?
            .release()
            .await?;
    }
    let mut last = 0u64;
    for round in 0..6 {
        let c = if round % 2 == 0 { &by_url } else { &by_conn };
        let g = c.lock("x").acquire(&ttl(5_000)).await?;
        let fence = g.fence().ok_or("a fence")?.get();
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
        // The fenced write of the newer holder is the one that counts.
        c.fenced_write("x-res", g.fence().ok_or("a fence")?, b"v")
            .await?;
        g.release().await?;
    }
    assert_eq!(
        by_url.lock("x").fence_key()?,
        by_conn.lock("x").fence_key()?,
        "one counter layout per deployment, whoever built the client"
    );
    Ok(())
}

/// Defect 1, the upgrade: a per-slot counter that an older `connection()`
/// client left above the floor on one Redis is raised past by the first
/// client of this version, and poisoned so that the older client fails
/// loudly instead of handing out a lower fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_slot_counter_an_older_client_left_is_raised_past() -> TestResult {
    let s = server();
    let mut admin = raw(&s).await;
    // What an older `connection()` client left before the upgrade: the
    // per-slot counter of lock `x`'s slot, far above the shared one.
    let old_key = old_slot_counter("dlm:lock:", "dlm:lock:{x}");
    let old_top = dlm::keys::FENCE_FLOOR + 1_000_000;
    let _: () = admin.set(&old_key, old_top).await?;
    // The first client of this version, built either way.
    let c = connection_client(&s).await?;
    let g = c.lock("x").acquire(&ttl(5_000)).await?;
    let fence = g.fence().ok_or("a fence")?.get();
    assert!(
        fence > old_top,
        "fence {fence} is above the older counter's {old_top}"
    );
    g.release().await?;
    let after: redis::Value = admin.get(&old_key).await?;
    let incr: redis::RedisResult<i64> = admin.incr(&old_key, 1).await;
    assert!(
        incr.is_err(),
        "the older counter is poisoned (INCR fails): {after:?} -> {incr:?}"
    );
    Ok(())
}

/// The per-slot counter key an older client used for `lock_key` (the same
/// slot tag dlm's cluster layout uses).
fn old_slot_counter(prefix: &str, lock_key: &str) -> String {
    dlm::keys::slot_fence_key(prefix, lock_key)
}

/// Defect 2: as a user with the ACL rules from before the transaction path
/// (no `MULTI`/`EXEC`), try-locks of free locks all succeed, not only the
/// first (before the fix the second returned `Busy { ttl: 0 }`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_locks_of_free_locks_succeed_for_a_user_without_multi() -> TestResult {
    let older = older_acl_rules();
    let s = dlm_testkit::RedisServer::builder()
        .acl_user("dlm", "s3cret", &older)
        .start()?;
    let c = dlm::Client::builder()
        .timeout(Duration::from_millis(1500))
        .connect(&s.url_as("dlm", "s3cret"))
        .await?;
    let mut last = 0;
    for i in 0..40 {
        let g = c
            .lock(format!("free-{i}"))
            .acquire(&ttl(5_000))
            .await
            .map_err(|e| format!("try-lock {i} of a free lock: {e}"))?;
        let fence = g.fence().ok_or("a fence")?.get();
        assert!(fence > last);
        last = fence;
        g.release().await?;
    }
    // Concurrent try-locks of distinct free locks (one batch) too.
    let tries = (0..16).map(|i| {
        let c = c.clone();
        async move { c.lock(format!("batch-{i}")).acquire(&ttl(5_000)).await }
    });
    for (i, r) in futures_util::future::join_all(tries)
        .await
        .into_iter()
        .enumerate()
    {
        r.map_err(|e| format!("batched try-lock {i}: {e}"))?
            .release()
            .await?;
    }
    Ok(())
}

/// Defect 3: under Redlock, an `extend_token` after the lock expired and
/// another client held and released it does not take it back (before the
/// fix it returned `Ok` and all three nodes held the old token again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_extension_does_not_revive_an_expired_lock() -> TestResult {
    let servers: Vec<RedisServer> = (0..3).map(|_| server()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let a = dlm::Client::connect_many(&urls).await?;
    let b = dlm::Client::connect_many(&urls).await?;
    let g = a.lock("revive").acquire(&ttl(200)).await?;
    let (token, _) = g.detach();
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.lock("revive")
        .acquire(&ttl(5_000))
        .await?
        .release()
        .await?;
    let r = a
        .lock("revive")
        .extend_token(&token, Duration::from_secs(5))
        .await;
    assert!(
        matches!(r, Err(Error::Expired { .. } | Error::NotHeld { .. })),
        "an extension of an expired Redlock lock must fail: {r:?}"
    );
    // Whatever it repaired on the way is given back: no node holds the old token.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for s in &servers {
        let v: Option<String> = raw(s).await.get("dlm:lock:{revive}").await?;
        assert_ne!(
            v.as_deref(),
            Some(token.as_str()),
            "a node holds the old token again"
        );
    }
    // And the lock is free for a new holder.
    b.lock("revive")
        .acquire(&ttl(5_000))
        .await?
        .release()
        .await?;
    Ok(())
}

/// Defect 3, the watchdog: a renewal that reaches the nodes after the
/// lease ran out (delayed by the fault proxy) must not bring the lease back,
/// even though the nodes answer within the per-node timeout: the guard
/// reports lost. (Before the fix the late reply moved the lease's end
/// without reading the clock, and `is_lost()` stayed false.)
///
/// The timeline (TTL 3 s, per-node timeout 1.4 s): the first renewal (sent
/// at about 1 s) is held 2.2 s by the proxies, so it times out and lands
/// after the keys expired (the script takes them back); its retry (sent a
/// quarter second after the time-out) is held 1 s, behind it, and its
/// replies come back in time, after the lease's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_redlock_renewal_does_not_revive_the_lease() -> TestResult {
    let servers: Vec<RedisServer> = (0..3).map(|_| server()).collect();
    let proxies: Vec<FaultProxy> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| FaultProxy::in_front_of(s, 30 + i as u64))
        .collect::<Result<_, _>>()?;
    let via_proxy: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let a = dlm::Client::builder()
        .timeout(Duration::from_secs(3))
        .connect_many(&via_proxy)
        .await?;
    let opts = ttl(3_000)
        .watchdog(true)
        .node_timeout(Duration::from_millis(1_400));
    let g = a.lock("late").acquire(&opts).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    delay_requests(&proxies, 2_200);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    delay_requests(&proxies, 1_000);
    // The retry's replies are back by about 3.7 s; the lease ended at 2.97 s.
    tokio::time::sleep(Duration::from_millis(2_700)).await;
    assert!(
        g.is_lost(),
        "a renewal that landed after the lease's end revived it ({:?} left)",
        g.remaining()
    );
    for p in &proxies {
        p.clear();
    }
    Ok(())
}

/// Defect 4: a corrupt fencing counter fails the acquire with an error that
/// names the counter, and leaves no lock held for nobody (before the fix
/// `dlm:lock:{z}` kept the token for the whole TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_transaction_leaves_no_lock_held_for_nobody() -> TestResult {
    let s = server();
    let mut admin = raw(&s).await;
    let c = client(&s).await;
    // The client's counter layout is known once it locked something.
    c.lock("first")
        .acquire(&ttl(5_000))
        .await?
        .release()
        .await?;
    let counter = c.lock("z").fence_key()?;
    let _: () = admin.set(&counter, "abc").await?;
    let r = c.lock("z").acquire(&ttl(30_000)).await;
    // The background release of the unsure attempt runs at once.
    let mut held = true;
    for _ in 0..50 {
        held = admin.exists("dlm:lock:{z}").await?;
        if !held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!held, "the lock is not left held for nobody ({r:?})");
    match &r {
        Err(e) => assert!(
            e.to_string().contains(&counter),
            "the error names the counter {counter}: {e}"
        ),
        Ok(g) => return Err(format!("acquired with a corrupt counter: {:?}", g.fence()).into()),
    }
    Ok(())
}

/// Defect 1 on a Redis Cluster: a client built on the application's own
/// cluster connection learns from the server that it is a cluster and keeps
/// the per-slot counters, like a client dlm connected to the cluster; the
/// two take turns on one lock with growing fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_connection_client_uses_the_clusters_counters() -> TestResult {
    let cluster = dlm_testkit::Cluster::start()?;
    let by_urls = dlm::Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_cluster(&cluster.urls())
        .await?;
    let conn = redis::cluster::ClusterClient::new(cluster.urls())?
        .get_async_connection()
        .await?;
    let by_conn = dlm::Client::builder()
        .timeout(Duration::from_secs(2))
        .connection(conn)?;
    let mut last = 0u64;
    for round in 0..6 {
        let c = if round % 2 == 0 { &by_urls } else { &by_conn };
        let g = c.lock("x").acquire(&ttl(5_000)).await?;
        let fence = g.fence().ok_or("a fence")?.get();
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
        g.release().await?;
    }
    let key = by_conn.lock("x").fence_key()?;
    assert_eq!(key, by_urls.lock("x").fence_key()?);
    assert!(key.starts_with("dlm:lock:fence:{"), "{key}");
    Ok(())
}

/// Found by reading the soak's rwlock fix adversarially (issue 32): when a
/// lost reply had granted a read share, the write lock or the fair lock
/// already, the retry (same token) got `{1, fence}` without its lease being
/// reset, while the client starts its lease clock at the retry. Its guard
/// believed for up to the retry's delay longer than Redis kept the share: a
/// writer was granted while the reader's guard still believed it held its
/// share. Now the retry resets the lease to the TTL from now (as the mutex
/// and the election do) and takes a fresh fence.
#[tokio::test]
async fn a_retried_grant_renews_its_lease_and_takes_a_fresh_fence() -> TestResult {
    let s = server();
    let mut conn = redis::Client::open(s.url())?
        .get_multiplexed_async_connection()
        .await?;
    // (script, keys, args): each grants at the first call, and the second
    // call with the same token is the retry after a lost reply.
    let keys = ["t:{x}:1", "t:{x}:2", "t:{x}:3", "t:{x}:fence"];
    let cases: [(&str, &str, Vec<&str>); 3] = [
        (
            "read share",
            include_str!("../src/rwlock/scripts/acquire_many.lua"),
            vec!["r", "tok", "1000", "0"],
        ),
        (
            "write lock",
            include_str!("../src/rwlock/scripts/acquire_many.lua"),
            vec!["w", "tok", "1000", "0"],
        ),
        (
            "fair lock",
            // one lock through the batched script: the same keys and arguments
            include_str!("../src/fair/scripts/acquire_many.lua"),
            vec!["tok", "1000", "0", "ch:", "100"],
        ),
    ];
    for (what, script, args) in cases {
        let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
        let script = redis::Script::new(script);
        let call = || {
            let mut inv = script.prepare_invoke();
            for k in keys {
                inv.key(k);
            }
            for a in &args {
                inv.arg(*a);
            }
            inv
        };
        // The first two entries of the reply: {1, fence, ..}.
        let two = |v: Vec<i64>| (v[0], v[1]);
        let first = two(call().invoke_async(&mut conn).await?);
        assert_eq!(first.0, 1, "{what}: granted");
        tokio::time::sleep(Duration::from_millis(600)).await;
        let retry = two(call().invoke_async(&mut conn).await?);
        assert_eq!(retry.0, 1, "{what}: the retry finds it granted");
        assert!(
            retry.1 > first.1,
            "{what}: a fresh fence {retry:?} after {first:?}"
        );
        // The lease left in Redis: the key's PTTL, or the share's deadline.
        let left_ms: i64 = if what == "read share" {
            let (deadline, now): (i64, (i64, i64)) = (
                redis::cmd("ZSCORE")
                    .arg(keys[1])
                    .arg("tok")
                    .query_async(&mut conn)
                    .await?,
                redis::cmd("TIME").query_async(&mut conn).await?,
            );
            deadline - (now.0 * 1000 + now.1 / 1000)
        } else {
            redis::cmd("PTTL")
                .arg(keys[0])
                .query_async(&mut conn)
                .await?
        };
        assert!(
            left_ms > 900,
            "{what}: the retry's lease runs 1 s from the retry, not from the lost grant: {left_ms} ms left"
        );
    }
    Ok(())
}
