//! The semaphore with leased permits, judged on histories: every holder
//! records the interval it believed it held its permits, and the checker
//! (`peak_permits`) finds the most held at one instant. One body per case,
//! run on one server and on a Redis Cluster.
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Deployment, TestResult};
use dlm::{Client, Error, SemaphoreOptions};
use dlm_testkit::history::{Clock, PermitHold, peak_permits};

fn opts(ttl_ms: u64) -> SemaphoreOptions {
    SemaphoreOptions::new(Duration::from_millis(ttl_ms))
}

/// N=3 over 10 tasks on two clients (some taking 2): never more than 3 held
/// at once, 3 reached, fences unique.
async fn never_more_than_capacity(d: &Deployment) -> TestResult {
    let clients = [d.client().await, d.client().await];
    let clock = Clock::new();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let until = clock.now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for t in 0..10usize {
        let (c, holds) = (clients[t % 2].clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            let sem = c.semaphore("history", 3);
            let take = if t % 4 == 0 { 2 } else { 1 };
            let o = opts(300).watchdog(t % 3 == 0).wait(Duration::from_secs(10));
            while clock.now() < until {
                let g = sem.acquire(take, &o).await?;
                let from = clock.now();
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..25))).await;
                let believed = from + g.remaining();
                let end = clock.now().min(believed);
                let fence = g.fence().get();
                g.release().await?;
                holds.lock().map_err(|_| "poisoned")?.push((
                    PermitHold {
                        holder: t,
                        from,
                        until: end,
                        permits: take,
                    },
                    fence,
                ));
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let recorded = holds.lock().map_err(|_| "poisoned")?.clone();
    let (holds, fences): (Vec<PermitHold>, Vec<u64>) = recorded.into_iter().unzip();
    assert!(holds.len() > 50, "enough grants: {}", holds.len());
    let (peak, at) = peak_permits(&holds);
    assert!(peak <= 3, "{peak} permits held at once at {at:?}");
    assert_eq!(peak, 3, "the capacity was reached");
    let distinct: std::collections::HashSet<_> = fences.iter().collect();
    assert_eq!(
        distinct.len(),
        fences.len(),
        "every grant has its own fence"
    );
    let st = clients[0].semaphore("history", 3).status().await?;
    assert_eq!((st.permits, st.in_use, st.available), (Some(3), 0, 3));
    Ok(())
}

/// A holder that dies (its guard leaked: no release, no watchdog) gives its
/// permits back at its TTL, and not before.
async fn dead_holders_permits_come_back_at_ttl(d: &Deployment) -> TestResult {
    let c = d.client().await;
    let sem = c.semaphore("crash", 3);
    let dead = sem.acquire(2, &opts(600)).await?;
    let t0 = Instant::now();
    std::mem::forget(dead);
    assert!(matches!(
        sem.acquire(2, &opts(5000)).await,
        Err(Error::NoPermits {
            wanted: 2,
            free: 1,
            capacity: 3,
            ..
        })
    ));
    let g = sem
        .acquire(2, &opts(5000).wait(Duration::from_secs(5)))
        .await?;
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(550) && waited < Duration::from_millis(1500),
        "permits came back after {waited:?} (TTL 600 ms)"
    );
    g.release().await?;
    Ok(())
}

/// Lowering the capacity keeps current holders (their renewals go on); new
/// acquisitions wait until theirs fit; raising it wakes a waiter at once.
async fn capacity_changes_are_safe_for_holders(d: &Deployment) -> TestResult {
    let c = d.client().await;
    let sem = c.semaphore("resize", 3);
    let o = opts(300).watchdog(true);
    let held: Vec<_> = [
        sem.acquire(1, &o).await?,
        sem.acquire(1, &o).await?,
        sem.acquire(1, &o).await?,
    ]
    .into();
    assert_eq!(sem.set_permits(1).await?, Some(3));
    let small = c.semaphore("resize", 1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        held.iter().all(|g| !g.is_lost()),
        "holders keep their permits"
    );
    let st = small.status().await?;
    assert_eq!((st.permits, st.in_use, st.available), (Some(1), 3, 0));
    let mut held = held.into_iter();
    for g in held.by_ref().take(2) {
        g.release().await?;
    }
    assert!(matches!(
        small.acquire(1, &opts(1000)).await,
        Err(Error::NoPermits { .. })
    ));
    // A waiter under the small capacity; raising it lets it in at once.
    let waiter = {
        let small = small.clone();
        tokio::spawn(async move {
            let t0 = Instant::now();
            let g = small
                .acquire(
                    1,
                    &opts(1000)
                        .wait(Duration::from_secs(5))
                        .retry_interval(Duration::from_secs(3)),
                )
                .await?;
            let waited = t0.elapsed();
            g.release().await?;
            Ok::<_, Error>(waited)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    sem.set_permits(3).await?;
    let waited = waiter.await??;
    assert!(
        waited < Duration::from_millis(1500),
        "woken by the capacity change, not the 3 s retry: {waited:?}"
    );
    for g in held {
        g.release().await?;
    }
    Ok(())
}

/// Watchdog, lost(), hand-over inside one client, fences increasing.
async fn guard_watchdog_lost_and_hand_over(d: &Deployment, c: &Client) -> TestResult {
    let sem = c.semaphore("guard", 1);
    let g = sem.acquire(1, &opts(300).watchdog(true)).await?;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!g.is_lost() && g.remaining() > Duration::ZERO);
    let st = sem.status().await?;
    assert_eq!((st.holders, st.in_use), (1, 1));
    // Hand-over to a waiting task of the same client.
    let first_fence = g.fence();
    let next = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let g = sem
                .acquire(
                    1,
                    &opts(1000)
                        .wait(Duration::from_secs(5))
                        .retry_interval(Duration::from_secs(3)),
                )
                .await?;
            let f = g.fence();
            g.release().await?;
            Ok::<_, Error>((f, Instant::now()))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released_at = Instant::now();
    g.release().await?;
    let (f, got_at) = next.await??;
    assert!(f > first_fence);
    assert!(got_at.duration_since(released_at) < Duration::from_millis(1000));
    // lost() fires when the permits vanish behind the holder's back.
    let g = sem.acquire(1, &opts(300).watchdog(true)).await?;
    del(d, "dlm:sem:{guard}:holders").await?;
    tokio::time::timeout(Duration::from_secs(2), g.lost()).await?;
    assert!(matches!(g.release().await, Err(Error::Expired { .. })));
    Ok(())
}

/// `DEL key` behind dlm's back.
async fn del(d: &Deployment, key: &str) -> redis::RedisResult<()> {
    let cmd = redis::cmd("DEL").arg(key).clone();
    match d {
        Deployment::Standalone(s) => cmd.query_async(&mut common::raw(s).await).await,
        Deployment::Cluster(c) => {
            let mut conn = redis::cluster::ClusterClient::new(c.urls())?
                .get_async_connection()
                .await?;
            cmd.query_async(&mut conn).await
        }
    }
}

async fn all_cases(d: Deployment) -> TestResult {
    never_more_than_capacity(&d).await?;
    dead_holders_permits_come_back_at_ttl(&d).await?;
    capacity_changes_are_safe_for_holders(&d).await?;
    let c = d.client().await;
    guard_watchdog_lost_and_hand_over(&d, &c).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_on_one_server() -> TestResult {
    all_cases(Deployment::standalone()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_on_a_cluster() -> TestResult {
    all_cases(Deployment::cluster()).await
}

#[tokio::test]
async fn bad_input_is_a_typed_error() -> TestResult {
    let s = common::server();
    let c = common::client(&s).await;
    let invalid =
        |r: dlm::Result<dlm::SemaphoreGuard>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(invalid(c.semaphore("x", 0).acquire(1, &opts(1000)).await));
    assert!(invalid(c.semaphore("x", 3).acquire(0, &opts(1000)).await));
    assert!(invalid(c.semaphore("x", 3).acquire(4, &opts(1000)).await));
    assert!(invalid(
        c.semaphore("x", dlm::MAX_PERMITS + 1)
            .acquire(1, &opts(1000))
            .await
    ));
    assert!(invalid(c.semaphore("", 3).acquire(1, &opts(1000)).await));
    assert!(invalid(c.semaphore("x", 3).acquire(1, &opts(1)).await));
    assert!(matches!(
        c.semaphore("x", 3).set_permits(0).await,
        Err(Error::InvalidArgument { .. })
    ));
    // Redlock clients have no single Redis to count on.
    let s2 = common::server();
    let redlock = Client::connect_many(&[s.url(), s2.url()]).await?;
    assert!(invalid(
        redlock.semaphore("x", 3).acquire(1, &opts(1000)).await
    ));
    assert_eq!(c.held_permits_count(), 0);
    Ok(())
}
