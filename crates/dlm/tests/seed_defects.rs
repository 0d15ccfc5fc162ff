//! One test per defect in the source documents' sample code (SEEDS.md, 1-8 and
//! 10), each showing it cannot happen with dlm. Defect 9 (sequential Redlock)
//! belongs to the Redlock tests.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use dlm::{Error, LockOptions};
use redis::AsyncCommands;

async fn pttl(s: &RedisServer, key: &str) -> i64 {
    let mut conn = raw(s).await;
    conn.pttl(key).await.expect("PTTL")
}

async fn commandstats(s: &RedisServer) -> String {
    let mut conn = raw(s).await;
    redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO")
}

#[tokio::test]
async fn seed_defect_1_expire_with_an_absolute_timestamp_is_impossible() -> TestResult {
    // The sample passed `time() + ttl` as a TTL: the lock lived for decades.
    // Here a TTL is a Duration, sent as a relative PEXPIRE, and absurd values are refused.
    let s = server();
    let c = client(&s).await;
    let g = c.lock("seed1").acquire(&ttl(5000)).await?;
    g.extend(Duration::from_secs(3)).await?;
    let left = pttl(&s, g.key()).await;
    assert!(left > 2000 && left <= 3000, "relative TTL, got {left} ms");
    let timestamp_like = Duration::from_secs(1_767_225_600); // "now" as seconds since 1970
    assert!(matches!(
        g.extend(timestamp_like).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(
        pttl(&s, g.key()).await <= 3000,
        "a refused extend changes nothing"
    );
    g.release().await?;
    Ok(())
}

#[tokio::test]
async fn seed_defect_2_is_locking_answers_false_when_not_ours() -> TestResult {
    // The sample's `isLocking` used `=` and always answered true.
    let s = server();
    let c = client(&s).await;
    let lock = c.lock("seed2");
    let g = lock.acquire(&ttl(60)).await?;
    assert!(g.is_held().await?);
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(!g.is_held().await?, "expired: not ours");
    let other = lock.acquire(&ttl(5000)).await?;
    assert!(!g.is_held().await?, "held by another: not ours");
    assert!(other.is_held().await?);
    other.release().await?;
    Ok(())
}

#[tokio::test]
async fn seed_defect_3_no_lock_key_ever_lacks_a_ttl() -> TestResult {
    // SETNX then EXPIRE leaves an immortal lock if the client dies in between.
    // dlm sets value and TTL in one command inside one script.
    let s = server();
    let c = client(&s).await;
    for i in 0..50 {
        let g = c.lock(format!("seed3-{i}")).acquire(&ttl(10_000)).await?;
        let left = pttl(&s, g.key()).await;
        assert!(left > 0 && left <= 10_000, "key without TTL: {left}");
        std::mem::forget(g); // a "crash" right after acquiring
    }
    let stats = commandstats(&s).await;
    assert!(!stats.contains("cmdstat_setnx:"), "{stats}");
    assert!(!stats.contains("cmdstat_expire:"), "{stats}");
    Ok(())
}

#[tokio::test]
async fn seed_defect_4_a_key_without_ttl_is_never_taken_over() -> TestResult {
    // The sample treated TTL < 0 as "holder crashed" and let every client take
    // the lock at once. dlm never takes over a key it does not own: it reports
    // Busy with no expiry and leaves the decision to an operator.
    let s = server();
    let mut conn = raw(&s).await;
    let c = client(&s).await;
    let key = c.lock("seed4").key()?;
    let _: () = conn.set(&key, "legacy-owner-without-expire").await?;
    let winners = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (c, winners) = (c.clone(), winners.clone());
        tasks.push(tokio::spawn(async move {
            match c
                .lock("seed4")
                .acquire(&ttl(1000).wait(Duration::from_millis(300)))
                .await
            {
                Ok(g) => {
                    winners.fetch_add(1, Ordering::SeqCst);
                    std::mem::forget(g);
                    None
                }
                Err(Error::Busy { ttl, .. }) => Some(ttl),
                Err(e) => panic!("unexpected {e}"),
            }
        }));
    }
    for t in tasks {
        assert_eq!(t.await?, Some(None), "Busy, reporting no expiry");
    }
    assert_eq!(winners.load(Ordering::SeqCst), 0);
    let v: String = conn.get(&key).await?;
    assert_eq!(v, "legacy-owner-without-expire");
    Ok(())
}

#[tokio::test]
async fn seed_defect_5_a_late_unlock_never_deletes_the_next_holders_lock() -> TestResult {
    // A's lock expires, B acquires, A's late unlock must not delete B's lock.
    let s = server();
    let c = client(&s).await;
    let lock = c.lock("seed5");
    let a = lock.acquire(&ttl(50)).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let b = lock.acquire(&ttl(5000)).await?;
    assert!(matches!(a.release().await, Err(Error::NotHeld { .. })));
    assert!(b.is_held().await?, "B still holds its lock");
    b.release().await?;
    Ok(())
}

#[tokio::test]
async fn seed_defect_6_release_is_one_atomic_script_even_in_a_race() -> TestResult {
    // GET-then-DEL in two round trips can delete a lock acquired in between.
    // Race a stale holder's release against a new acquisition many times:
    // the new holder's lock must survive every time.
    let s = server();
    let c = client(&s).await;
    let lock = c.lock("seed6");
    for _ in 0..200 {
        let a = lock.acquire(&ttl(15)).await?;
        tokio::time::sleep(Duration::from_millis(14)).await;
        let acquirer = {
            let lock = lock.clone();
            tokio::spawn(async move {
                lock.acquire(
                    &ttl(5000)
                        .wait(Duration::from_millis(100))
                        .retry_interval(Duration::from_millis(1)),
                )
                .await
            })
        };
        let _ = a.release().await;
        let b = acquirer.await??;
        assert!(
            b.is_held().await?,
            "a stale release deleted the new holder's lock"
        );
        b.release().await?;
    }
    // Each release was one script call: no GET/DEL pairs from the client.
    let stats = commandstats(&s).await;
    assert!(stats.contains("cmdstat_evalsha:"), "{stats}");
    Ok(())
}

#[tokio::test]
async fn seed_defect_7_units_are_durations_end_to_end() -> TestResult {
    // The sample compared seconds with milliseconds and slept microseconds as
    // nanoseconds. Every time in the API is a Duration.
    let s = server();
    let c = client(&s).await;
    let g = c
        .lock("seed7")
        .acquire(&LockOptions::new(Duration::from_millis(1500)))
        .await?;
    let left = pttl(&s, g.key()).await;
    assert!(left > 1000 && left <= 1500, "1500 ms TTL, got {left}");
    assert!(
        g.remaining() <= Duration::from_millis(1500) && g.remaining() > Duration::from_millis(1000)
    );
    // A waiter with a 100 ms retry interval and a 400 ms wait tries a few times, not 400 000 or 0.
    let t0 = std::time::Instant::now();
    let r = c
        .lock("seed7")
        .acquire(
            &LockOptions::new(Duration::from_secs(1))
                .wait(Duration::from_millis(400))
                .retry_interval(Duration::from_millis(100)),
        )
        .await;
    let waited = t0.elapsed();
    assert!(matches!(r, Err(Error::Busy { .. })));
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    g.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_defect_8_the_held_lock_registry_is_synchronised() -> TestResult {
    // The sample shared a map of held locks between goroutines without a lock.
    // Hammer acquire/release/drop/release_all from many threads at once.
    let s = server();
    let c = client(&s).await;
    let mut tasks = Vec::new();
    for t in 0..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..50 {
                let g = c.lock(format!("seed8-{t}-{i}")).acquire(&ttl(5000)).await?;
                match i % 3 {
                    0 => drop(g),
                    1 => {
                        let _ = g.release().await;
                    }
                    _ => {
                        let _ = c.release_all().await;
                        let _ = g.release().await;
                    }
                }
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    assert_eq!(c.held_count(), 0);
    Ok(())
}

#[tokio::test]
async fn seed_defect_10_a_lost_lock_is_noticed_by_its_holder() -> TestResult {
    // The sample never noticed that its TTL had passed while it was paused.
    let s = server();
    let c = client(&s).await;
    // Without a watchdog: the monotonic lease tells.
    let g = c.lock("seed10").acquire(&ttl(100)).await?;
    assert!(!g.is_lost());
    tokio::time::timeout(Duration::from_secs(2), g.lost()).await?;
    assert!(g.is_lost());
    assert_eq!(g.remaining(), Duration::ZERO);
    // With a watchdog: a renewal that finds the lock taken tells.
    let g = c.lock("seed10b").acquire(&ttl(300).watchdog(true)).await?;
    let mut conn = raw(&s).await;
    let _: () = conn.set(g.key(), "somebody-else").await?;
    tokio::time::timeout(Duration::from_secs(2), g.lost()).await?;
    assert!(g.is_lost());
    Ok(())
}
