//! The mutex's batched calls must decide every lock as a call of its own
//! would: a Redis error on one lock (a damaged key: one that holds a hash,
//! WRONGTYPE; a fencing counter that holds no integer) fails that lock only.
//! A `redis.call` error aborts the whole script, so without a guard per lock
//! every other lock of the call is told its acquire, release or renewal
//! failed, although Redis did it (scripts roll nothing back).
//!
//! Batches are built as in `rwlock_batch_review2.rs`: the server is frozen
//! (SIGSTOP), one lone acquire takes the batch slot, and the requests under
//! test, spawned on a current-thread runtime, gather in one call.
mod common;

use std::time::Duration;

use common::*;
use dlm::{Client, LockGuard};
use redis::Script;

async fn client_at(url: &str) -> Client {
    Client::builder()
        .timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .expect("connect to the throwaway server")
}

/// A client's first acquire and release: connection and scripts warm, and
/// the fencing counter raised past the floor.
async fn warm(c: &Client) -> TestResult {
    c.lock("warm").acquire(&ttl(1000)).await?.release().await?;
    Ok(())
}

/// Make lock `name`'s key hold a hash (damage no dlm script makes).
fn break_key(s: &RedisServer, name: &str) -> TestResult {
    let key = format!("dlm:lock:{{{name}}}");
    s.command(&["DEL", &key])?;
    s.command(&["HSET", &key, "f", "v"])?;
    Ok(())
}

fn spawn_acquire(c: &Client, name: &str) -> tokio::task::JoinHandle<dlm::Result<LockGuard>> {
    let lock = c.lock(name);
    tokio::spawn(async move { lock.acquire(&ttl(20_000)).await })
}

/// Run `requests` (spawned while the server is frozen, behind a lone
/// acquire that takes the batch slot) as one batched call.
async fn in_one_call<T>(
    s: &RedisServer,
    c: &Client,
    requests: impl FnOnce() -> T,
) -> Result<T, Box<dyn std::error::Error + Send + Sync>> {
    s.pause()?;
    let fill = spawn_acquire(c, "fill");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let spawned = requests();
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.resume()?;
    drop(fill.await?);
    Ok(spawned)
}

/// The first attempts' transaction leaves a busy lock and a damaged one
/// (`SET NX` finds both keys taken) to one `settle_many.lua` call: the busy
/// lock must be answered busy, not with the other lock's WRONGTYPE.
#[tokio::test(flavor = "current_thread")]
async fn a_broken_lock_does_not_fail_a_busy_lock_settled_with_it() -> TestResult {
    let s = server();
    let c = client_at(&s.url()).await;
    let other = client_at(&s.url()).await;
    warm(&c).await?;
    let held = other.lock("held").acquire(&ttl(20_000)).await?;
    break_key(&s, "bad")?;
    let (busy, bad, good) = in_one_call(&s, &c, || {
        (
            spawn_acquire(&c, "held"),
            spawn_acquire(&c, "bad"),
            spawn_acquire(&c, "good"),
        )
    })
    .await?;
    let (busy, bad, good) = (busy.await?, bad.await?, good.await?);
    let bad = bad.expect_err("the damaged lock cannot be acquired");
    assert!(
        bad.to_string().contains("dlm:lock:{bad}") && bad.to_string().contains("WRONGTYPE"),
        "the error names the lock and what Redis said: {bad}"
    );
    assert!(
        matches!(busy, Err(dlm::Error::Busy { .. })),
        "the busy lock `held` is busy, not failed by `bad`: {busy:?}"
    );
    good?.release().await?;
    held.release().await?;
    Ok(())
}

/// A least-privilege user whose ACL is missing `what` (e.g. ` +multi`).
fn server_without(what: &str) -> (RedisServer, String) {
    let rules = dlm::keys::ACL_RULES.replace(what, "");
    assert_ne!(rules, dlm::keys::ACL_RULES, "{what} is in ACL_RULES");
    let s = RedisServer::builder()
        .acl_user("dlm", "s3cret", &rules)
        .start()
        .expect("start redis-server");
    let url = s.url_as("dlm", "s3cret");
    (s, url)
}

/// A user whose ACL refuses `MULTI` makes every attempt through
/// `acquire_many.lua`: a free lock batched with a damaged one is granted.
#[tokio::test(flavor = "current_thread")]
async fn a_broken_lock_does_not_fail_a_free_lock_acquired_with_it() -> TestResult {
    let (s, url) = server_without(" +multi");
    let c = client_at(&url).await;
    warm(&c).await?;
    warm(&c).await?;
    break_key(&s, "bad")?;
    let (g1, bad, g2) = in_one_call(&s, &c, || {
        (
            spawn_acquire(&c, "g1"),
            spawn_acquire(&c, "bad"),
            spawn_acquire(&c, "g2"),
        )
    })
    .await?;
    let (g1, bad, g2) = (g1.await?, bad.await?, g2.await?);
    assert!(bad.is_err(), "the damaged lock cannot be acquired: {bad:?}");
    assert!(
        g1.is_ok() && g2.is_ok(),
        "an error on another lock of the call failed these acquires: g1 {:?}, g2 {:?}",
        g1.as_ref().err(),
        g2.as_ref().err()
    );
    g1?.release().await?;
    g2?.release().await?;
    Ok(())
}

/// A fencing counter that holds no integer fails the transaction's `INCRBY`:
/// every grant needs a fence from it and fails, but a busy lock of the same
/// transaction needs none and is answered busy.
#[tokio::test(flavor = "current_thread")]
async fn a_damaged_fence_counter_fails_the_grants_only() -> TestResult {
    let s = server();
    let c = client_at(&s.url()).await;
    let other = client_at(&s.url()).await;
    warm(&c).await?;
    let held = other.lock("held").acquire(&ttl(20_000)).await?;
    s.command(&["SET", "dlm:lock:fence", "not a number"])?;
    let (busy, free) = in_one_call(&s, &c, || {
        (spawn_acquire(&c, "held"), spawn_acquire(&c, "free"))
    })
    .await?;
    let (busy, free) = (busy.await?, free.await?);
    let free = free.expect_err("no fence, no grant");
    assert!(
        free.to_string().contains("dlm:lock:fence"),
        "the error names the counter: {free}"
    );
    assert!(
        matches!(busy, Err(dlm::Error::Busy { .. })),
        "the busy lock `held` is busy, not failed by the counter: {busy:?}"
    );
    held.release().await?;
    Ok(())
}

/// The scripts themselves: one call with a lock whose fencing counter is
/// damaged between two good ones. The failed grant is deleted again inside
/// the script (not left for the client's release), the others are granted.
#[tokio::test(flavor = "current_thread")]
async fn a_grant_without_a_fence_is_undone_inside_the_script() -> TestResult {
    let s = server();
    let mut conn = raw(&s).await;
    let fence = include_str!("../src/lock/scripts/fence.lua");
    for (name, script) in [
        (
            "acquire_many",
            include_str!("../src/lock/scripts/acquire_many.lua"),
        ),
        (
            "settle_many",
            include_str!("../src/lock/scripts/settle_many.lua"),
        ),
    ] {
        let script = Script::new(&format!("{fence}{script}"));
        s.command(&["SET", "bad-counter", "x"])?;
        // settle_many grants only keys the transaction already set.
        for k in ["a", "b", "c"] {
            s.command(&["SET", &format!("{name}:{k}"), "t", "PX", "20000"])?;
        }
        let mut inv = script.prepare_invoke();
        for (k, counter) in [
            ("a", "good-counter"),
            ("b", "bad-counter"),
            ("c", "good-counter"),
        ] {
            inv.key(format!("{name}:{k}"))
                .key(counter)
                .key(format!("{name}:{k}:w"));
        }
        for _ in 0..3 {
            inv.arg("t").arg(20_000).arg(0);
        }
        let reply: Vec<redis::Value> = inv.invoke_async(&mut conn).await?;
        let code = |i: usize| redis::from_redis_value::<i64>(reply[i].clone()).expect("a code");
        assert_eq!((code(0), code(2), code(4)), (1, -4, 1), "{name}: {reply:?}");
        let message: String = redis::from_redis_value(reply[3].clone())?;
        assert!(message.contains("bad-counter"), "{name}: {message}");
        let left: i64 = redis::cmd("EXISTS")
            .arg(format!("{name}:b"))
            .query_async(&mut conn)
            .await?;
        assert_eq!(left, 0, "{name}: the grant without a fence is still held");
    }
    Ok(())
}

/// Releases of a user whose ACL predates dlm's use of `MGET` read each key
/// with `GET`, which raises WRONGTYPE for a damaged one: the other releases
/// of the call must still be done and answered.
#[tokio::test(flavor = "current_thread")]
async fn a_broken_lock_does_not_fail_another_release_batched_with_it() -> TestResult {
    let (s, url) = server_without(" +mget");
    let c = client_at(&url).await;
    warm(&c).await?;
    let g1 = c.lock("g1").acquire(&ttl(20_000)).await?;
    let bad = c.lock("bad").acquire(&ttl(20_000)).await?;
    let g2 = c.lock("g2").acquire(&ttl(20_000)).await?;
    break_key(&s, "bad")?;
    let (r1, rb, r2) = in_one_call(&s, &c, || {
        (
            tokio::spawn(async move { g1.release().await }),
            tokio::spawn(async move { bad.release().await }),
            tokio::spawn(async move { g2.release().await }),
        )
    })
    .await?;
    let (r1, _rb, r2) = (r1.await?, rb.await?, r2.await?);
    assert!(
        r1.is_ok() && r2.is_ok(),
        "an error on another lock of the call failed these releases: g1 {r1:?}, g2 {r2:?}"
    );
    for k in ["g1", "g2"] {
        let held = s.command(&["EXISTS", &format!("dlm:lock:{{{k}}}")])?;
        assert_eq!(held.trim_start_matches(':'), "0", "{k} is still held");
    }
    Ok(())
}

/// The watchdog renews the leases of one Redis in one `extend_many.lua`
/// call: a lease whose key was damaged must not keep the others from being
/// renewed (they would run out, lost, while their key is still theirs).
#[tokio::test(flavor = "current_thread")]
async fn a_broken_lock_does_not_keep_the_watchdog_from_renewing_another() -> TestResult {
    let s = server();
    let c = client_at(&s.url()).await;
    warm(&c).await?;
    let opts = ttl(900).watchdog(true);
    let (good, bad) =
        futures_util::future::join(c.lock("good").acquire(&opts), c.lock("bad").acquire(&opts))
            .await;
    let (good, bad) = (good?, bad?);
    break_key(&s, "bad")?;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !good.is_lost() && good.is_held().await?,
        "the watchdog did not renew `good`, batched with the damaged `bad`"
    );
    drop(bad);
    good.release().await?;
    Ok(())
}

/// The batched renewal scripts, called directly: a damaged key between two
/// good ones is answered with its error, in place of its code; the others
/// are extended (Redlock's extend_or_acquire_many.lua, and extend_many.lua,
/// the watchdog's on one Redis).
#[tokio::test(flavor = "current_thread")]
async fn a_broken_key_fails_only_its_own_renewal() -> TestResult {
    let s = server();
    let mut conn = raw(&s).await;
    for (name, script) in [
        (
            "extend_or_acquire_many",
            include_str!("../src/lock/scripts/extend_or_acquire_many.lua"),
        ),
        (
            "extend_many",
            include_str!("../src/services/scripts/extend_many.lua"),
        ),
    ] {
        for k in ["a", "c"] {
            s.command(&["SET", &format!("{name}:{k}"), "t", "PX", "1000"])?;
        }
        s.command(&["HSET", &format!("{name}:b"), "f", "v"])?;
        let script = Script::new(script);
        let mut inv = script.prepare_invoke();
        for k in ["a", "b", "c"] {
            inv.key(format!("{name}:{k}"));
        }
        for _ in 0..3 {
            inv.arg("t").arg(20_000);
        }
        let reply: Vec<redis::Value> = inv.invoke_async(&mut conn).await?;
        assert!(
            matches!(
                reply.as_slice(),
                [redis::Value::Int(1), redis::Value::BulkString(m), redis::Value::Int(1)]
                    if String::from_utf8_lossy(m).contains("WRONGTYPE")
            ),
            "{name}: {reply:?}"
        );
        let pttl: i64 = redis::cmd("PTTL")
            .arg(format!("{name}:c"))
            .query_async(&mut conn)
            .await?;
        assert!(
            pttl > 1000,
            "{name}: the lock after the damaged one was not extended"
        );
    }
    Ok(())
}
