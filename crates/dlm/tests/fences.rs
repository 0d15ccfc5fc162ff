//! Fencing tokens on one Redis, where every lock shares one counter and
//! concurrent acquires take their fences with one `INCRBY` per batch: they
//! grow in grant order for each lock, within a batch and across batches and
//! clients; every fence is above `FENCE_FLOOR`, whatever an older dlm left in
//! its per-slot counters; and an attempt whose reply was lost is retried
//! with the same token and gets its TTL reset and a fresh fence.
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use dlm::keys::FENCE_FLOOR;
use dlm_testkit::FaultProxy;
use redis::AsyncCommands;

/// Holders of one lock, from several clients with many tasks each (so their
/// acquires share batches with acquires of other locks), record the fence
/// they got while they hold it: in the order they held it, the fences
/// strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fences_of_one_lock_grow_in_grant_order_across_batches_and_clients() -> TestResult {
    let s = server();
    let held: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let c = client(&s).await;
        for t in 0..16 {
            let (c, held) = (c.clone(), held.clone());
            tasks.push(tokio::spawn(async move {
                let opts = ttl(5_000).wait(Duration::from_secs(30));
                for i in 0..30 {
                    // Distinct locks around the contended one fill the batches.
                    let other = c.lock(format!("other-{t}-{i}")).acquire(&opts).await?;
                    let g = c.lock("ordered").acquire(&opts).await?;
                    let fence = g.fence().ok_or("a fence")?.get();
                    held.lock().map_err(|_| "poisoned")?.push(fence);
                    g.release().await?;
                    other.release().await?;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            }));
        }
    }
    for t in tasks {
        t.await??;
    }
    let held = held.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(held.len(), 3 * 16 * 30);
    assert!(held.iter().all(|f| *f > FENCE_FLOOR), "above the floor");
    for w in held.windows(2) {
        assert!(w[0] < w[1], "fences in grant order: {} then {}", w[0], w[1]);
    }
    Ok(())
}

/// Distinct locks acquired at once share the counter: every fence handed
/// out is distinct, so no two grants, of any locks, ever share one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_grants_never_share_a_fence() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let all = fences_of_distinct_locks(&c, "distinct", 64, 50, None).await?;
    assert_distinct_above_the_floor(&all);
    let counter: u64 = raw(&s).await.get(c.lock("x").fence_key()?).await?;
    assert!(
        all.iter().max().is_some_and(|f| *f <= counter),
        "from the one counter"
    );
    Ok(())
}

/// An older dlm kept a counter per hash slot on one Redis too. Whatever it
/// handed out there (up to 2^48 - 1: far more than any real deployment), a client of
/// this version hands out higher fences for the same lock, and so does a
/// client finding the shared counter missing or below the floor (new, or
/// set back by hand): the first grant raises it past the floor.
#[tokio::test]
async fn an_upgraded_client_hands_out_fences_above_an_older_version_s() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let mut conn = raw(&s).await;
    let lock = c.lock("upgraded");
    // The key layout of dlm 0.1: `dlm:lock:fence:{S}` for the lock's slot.
    let old_counter = old_fence_key(&lock)?;
    // As high as an older counter can be: 2^48 - 1 grants in one slot.
    let _: () = conn.set(&old_counter, FENCE_FLOOR - 1).await?;
    assert_eq!(lock.fence_key()?, "dlm:lock:fence");

    let g = lock.acquire(&ttl(5_000)).await?;
    let first = g.fence().ok_or("a fence")?.get();
    assert!(
        first > FENCE_FLOOR,
        "{first} is above the older version's fences"
    );
    g.release().await?;

    // The shared counter set back below the floor (as after a FLUSHALL):
    // the next grants are above the floor again, however many at once.
    let _: () = conn.set("dlm:lock:fence", 7).await?;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let g = c
                .lock(format!("after-reset-{i}"))
                .acquire(&ttl(5_000))
                .await?;
            let f = g.fence().ok_or("a fence")?.get();
            g.release().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(f)
        }));
    }
    let mut fences = Vec::new();
    for t in tasks {
        fences.push(t.await??);
    }
    assert!(
        fences.iter().all(|f| *f > FENCE_FLOOR),
        "raised past the floor: {fences:?}"
    );
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 16, "distinct fences");
    Ok(())
}

/// The key an older dlm kept the lock's fencing counter in: its hash slot's.
fn old_fence_key(lock: &dlm::Lock) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let slot = dlm_testkit::key_slot(&lock.key()?);
    // The tag dlm 0.1 used: the first number whose base-36 digits hash to the slot.
    let base36 = |mut n: u32| {
        let mut digits = Vec::new();
        loop {
            digits.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
            n /= 36;
            if n == 0 {
                break;
            }
        }
        digits.reverse();
        String::from_utf8_lossy(&digits).into_owned()
    };
    let tag = (0u32..)
        .map(base36)
        .find(|t| dlm_testkit::key_slot(t) == slot)
        .ok_or("no tag hashes to the slot")?;
    Ok(format!("dlm:lock:fence:{{{tag}}}"))
}

/// An acquire whose reply was lost is tried again with the same token: the
/// retry finds the key already holding it, resets its TTL and takes a fresh
/// fence (above every fence taken before it), and the caller holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_acquire_whose_first_reply_was_lost_holds_the_lock() -> TestResult {
    let s = server();
    let proxy = FaultProxy::in_front_of(&s, 7)?;
    let through = dlm::Client::builder()
        .timeout(Duration::from_millis(300))
        .connect(&proxy.url())
        .await?;
    let direct = client(&s).await;
    let mut conn = raw(&s).await;
    // The client's first lock operation (which also learns the fence
    // layout, see `Locks::prepare`) goes through before replies are dropped.
    through
        .lock("warm-up")
        .acquire(&ttl(5_000))
        .await?
        .release()
        .await?;
    // A fence taken before, by another lock.
    let before = direct.lock("earlier").acquire(&ttl(5_000)).await?;
    let earlier = before.fence().ok_or("a fence")?.get();
    before.release().await?;

    proxy.set_drop_replies(true);
    let lock = through.lock("lost-reply");
    let attempt =
        tokio::spawn(async move { lock.acquire(&ttl(4_000).wait(Duration::from_secs(5))).await });
    // The first attempt's SET lands; its reply does not.
    let key = direct.lock("lost-reply").key()?;
    let mut landed = false;
    for _ in 0..100 {
        let v: Option<String> = conn.get(&key).await?;
        if v.is_some() {
            landed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(landed, "the first attempt reached Redis");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    proxy.set_drop_replies(false);
    let g = attempt.await??;
    let value: String = conn.get(&key).await?;
    assert_eq!(
        value,
        g.token().as_str(),
        "held with the first attempt's token"
    );
    let pttl: i64 = conn.pttl(&key).await?;
    assert!(pttl > 3_500, "the retry reset the TTL: {pttl} ms left");
    let fence = g.fence().ok_or("a fence")?.get();
    assert!(fence > earlier, "a fresh fence: {fence} after {earlier}");
    g.release().await?;
    Ok(())
}

/// A least-privilege user made with the ACL rules of dlm 0.1, which allow
/// neither `MULTI`/`EXEC` nor `MGET`: acquires fall back to the script
/// (finding the keys a refused transaction's `SET`s may have taken already
/// theirs), releases read with `GET`, and nothing is lost or held twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_the_older_acl_rules_still_locks_and_releases() -> TestResult {
    let older = older_acl_rules();
    let s = dlm_testkit::RedisServer::builder()
        .acl_user("dlm", "s3cret", &older)
        .start()?;
    let c = dlm::Client::builder()
        .timeout(Duration::from_millis(1500))
        .connect(&s.url_as("dlm", "s3cret"))
        .await?;
    let all = fences_of_distinct_locks(&c, "old-acl", 16, 20, Some("old-acl-shared")).await?;
    assert_distinct_above_the_floor(&all);
    let mut admin = raw(&s).await;
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("dlm:lock:{old-acl*")
        .query_async(&mut admin)
        .await?;
    assert!(left.is_empty(), "every lock released: {left:?}");
    // The transaction was tried, refused, and not sent again.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut admin)
        .await?;
    let refused: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_multi:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("rejected_calls=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        (1..=8).contains(&refused),
        "MULTI refused {refused} times: {stats}"
    );
    Ok(())
}

/// `tasks` tasks each acquire and release `per_task` locks of their own
/// (named from `prefix`), then, with `shared`, that one lock once each:
/// every fence they got.
async fn fences_of_distinct_locks(
    c: &dlm::Client,
    prefix: &str,
    tasks: usize,
    per_task: usize,
    shared: Option<&str>,
) -> Result<Vec<u64>, Box<dyn std::error::Error + Send + Sync>> {
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (c, prefix, shared) = (c.clone(), prefix.to_string(), shared.map(str::to_string));
        handles.push(tokio::spawn(async move {
            let mut names: Vec<String> =
                (0..per_task).map(|i| format!("{prefix}-{t}-{i}")).collect();
            names.extend(shared);
            let mut fences = Vec::new();
            for name in names {
                let g = c
                    .lock(name)
                    .acquire(&ttl(5_000).wait(Duration::from_secs(20)))
                    .await?;
                fences.push(g.fence().ok_or("a fence")?.get());
                g.release().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(fences)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await??);
    }
    Ok(all)
}

/// Every fence above the floor, none handed out twice.
fn assert_distinct_above_the_floor(fences: &[u64]) {
    assert!(fences.iter().all(|f| *f > FENCE_FLOOR), "above the floor");
    let mut sorted = fences.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), fences.len(), "a fence handed out twice");
}
