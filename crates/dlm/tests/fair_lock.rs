//! The fair lock, judged from histories: every grant's interval (from the
//! guard in hand to the release) is recorded, and the checks look at the
//! intervals: no two overlap, and waiters that queued in a known order got
//! the lock in that order. Each body runs on one server and on a cluster.
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Deployment, TestResult, ttl};
use dlm::Error;
use dlm_testkit::history::{Clock, Hold, overlapping_holds};

/// 20 waiters that queue one after another (each one queued before the next
/// starts) get the lock in exactly that order; the intervals never overlap
/// and the fences grow with the grants.
async fn waiters_get_the_lock_in_arrival_order(d: &Deployment) -> TestResult {
    let holder_client = d.client().await;
    // Several clients: FIFO across processes, not just within one client.
    let clients = [d.client().await, d.client().await, d.client().await];
    let lock = holder_client.fair_lock("fifo");
    let first = lock.acquire(&ttl(30_000)).await?;
    let clock = Clock::new();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (c, holds) = (clients[i % 3].clone(), holds.clone());
        tasks.push(tokio::spawn(async move {
            let opts = ttl(10_000).wait(Duration::from_secs(30));
            let g = c.fair_lock("fifo").acquire(&opts).await?;
            let from = clock.now();
            tokio::time::sleep(Duration::from_millis(5)).await;
            let until = clock.now();
            let fence = g.fence().get();
            g.release().await?;
            holds.lock().map_err(|_| "poisoned")?.push(Hold {
                holder: i,
                lock: "fifo".into(),
                from,
                until,
                fence: Some(fence),
            });
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
        // Arrival order: wait until this waiter is in the queue.
        wait_for_queue_len(d, "fifo", i + 1).await?;
    }
    first.release().await?;
    for t in tasks {
        t.await??;
    }
    let mut holds = holds.lock().map_err(|_| "poisoned")?.clone();
    assert!(overlapping_holds(&holds).is_empty());
    holds.sort_by_key(|h| h.from);
    let order: Vec<usize> = holds.iter().map(|h| h.holder).collect();
    assert_eq!(order, (0..20).collect::<Vec<_>>(), "grant order");
    assert!(holds.windows(2).all(|w| w[0].fence < w[1].fence));
    Ok(())
}

/// The queue's length, read behind dlm's back.
async fn queue_len(d: &Deployment, name: &str) -> redis::RedisResult<usize> {
    let key = format!("dlm:fair:{{{name}}}:queue");
    match d {
        Deployment::Standalone(s) => {
            let mut c = common::raw(s).await;
            redis::cmd("LLEN").arg(&key).query_async(&mut c).await
        }
        Deployment::Cluster(c) => {
            let client = redis::cluster::ClusterClient::new(c.urls())?;
            let mut conn = client.get_async_connection().await?;
            redis::cmd("LLEN").arg(&key).query_async(&mut conn).await
        }
    }
}

async fn wait_for_queue_len(d: &Deployment, name: &str, n: usize) -> TestResult {
    for _ in 0..500 {
        if queue_len(d, name).await? >= n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err(format!("the queue of {name} never reached {n}").into())
}

/// A waiter that dies while queued (its future is leaked, so it neither
/// refreshes nor leaves) holds the next one up for at most its queue lease.
async fn a_dead_waiter_delays_the_next_by_at_most_its_queue_lease(d: &Deployment) -> TestResult {
    let lease = Duration::from_millis(600);
    let (a, b, c) = (d.client().await, d.client().await, d.client().await);
    let held = a.fair_lock("dead").acquire(&ttl(30_000)).await?;
    // The waiter that will die: its client is dropped mid-wait, its tasks aborted.
    let doomed = {
        let lock = b.fair_lock("dead").queue_lease(lease);
        tokio::spawn(async move { lock.acquire(&ttl(5000).wait(Duration::from_secs(30))).await })
    };
    wait_for_queue_len(d, "dead", 1).await?;
    let next = {
        let lock = c.fair_lock("dead").queue_lease(lease);
        tokio::spawn(async move {
            let g = lock
                .acquire(&ttl(5000).wait(Duration::from_secs(30)))
                .await?;
            let at = std::time::Instant::now();
            g.release().await?;
            Ok::<_, Error>(at)
        })
    };
    wait_for_queue_len(d, "dead", 2).await?;
    // Kill the first waiter without letting it clean up: forget its future.
    doomed.abort();
    std::mem::forget(b);
    let _ = doomed.await;
    let died = std::time::Instant::now();
    held.release().await?;
    let got = next.await??;
    let waited = got.saturating_duration_since(died);
    assert!(
        waited <= lease + Duration::from_millis(400),
        "waited {waited:?} behind a dead waiter with a {lease:?} queue lease"
    );
    Ok(())
}

/// A try-once acquire does not cut in line; a waiter that gives up leaves
/// the queue; errors are typed.
async fn try_once_and_giving_up(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let g = a.fair_lock("polite").acquire(&ttl(30_000)).await?;
    let waiting = {
        let lock = b.fair_lock("polite");
        tokio::spawn(async move { lock.acquire(&ttl(5000).wait(Duration::from_secs(30))).await })
    };
    wait_for_queue_len(d, "polite", 1).await?;
    g.release().await?;
    // The queued waiter gets it even if a try-once acquire comes in between.
    let cut_in = a.fair_lock("polite").acquire(&ttl(5000)).await;
    let winner = waiting.await??;
    if let Ok(g) = cut_in {
        return Err(format!("a try-once acquire cut in line (fence {})", g.fence()).into());
    }
    // Giving up (wait runs out) leaves the queue.
    let r = a
        .fair_lock("polite")
        .acquire(&ttl(5000).wait(Duration::from_millis(200)))
        .await;
    assert!(matches!(r, Err(Error::Busy { .. })), "{r:?}");
    winner.release().await?;
    for _ in 0..100 {
        if queue_len(d, "polite").await? == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(queue_len(d, "polite").await?, 0);
    // Bad input.
    assert!(matches!(
        a.fair_lock("").acquire(&ttl(1000)).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        a.fair_lock("x")
            .queue_lease(Duration::from_millis(1))
            .acquire(&ttl(1000))
            .await,
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}

/// The watchdog keeps a short lease alive; extend and release say whether
/// it was still ours; `lost()` fires when it is taken away.
async fn guard_semantics(d: &Deployment) -> TestResult {
    let client = d.client().await;
    let g = client
        .fair_lock("guard")
        .acquire(&ttl(300).watchdog(true))
        .await?;
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!g.is_lost(), "the watchdog renews it");
    g.extend(Duration::from_secs(5)).await?;
    assert!(g.remaining() > Duration::from_secs(4));
    g.release().await?;
    let g = client.fair_lock("guard").acquire(&ttl(200)).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(g.is_lost());
    assert!(matches!(g.release().await, Err(Error::Expired { .. })));
    // release_all covers fair locks.
    let _g = client.fair_lock("guard").acquire(&ttl(5000)).await?;
    assert_eq!(client.release_all().await.released, 1);
    Ok(())
}

/// `status()`: the holder, its TTL and fence, and the waiters in line.
async fn status_shows_holder_and_line(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let lock = a.fair_lock("status");
    let free = lock.status().await?;
    assert!(
        !free.held && free.ttl.is_none() && free.waiting == 0,
        "{free:?}"
    );
    let g = lock.acquire(&ttl(5000)).await?;
    let waiter = tokio::spawn(async move {
        let opts = ttl(5000).wait(Duration::from_secs(10));
        b.fair_lock("status").acquire(&opts).await
    });
    wait_for_queue_len(d, "status", 1).await?;
    let s = lock.status().await?;
    assert!(s.held, "{s:?}");
    assert!(s.ttl.is_some_and(|t| t <= Duration::from_secs(5)), "{s:?}");
    assert_eq!((s.fence, s.waiting), (Some(g.fence()), 1), "{s:?}");
    g.release().await?;
    waiter.await??.release().await?;
    assert_eq!(lock.status().await?.waiting, 0);
    Ok(())
}

async fn all(d: Deployment) -> TestResult {
    status_shows_holder_and_line(&d).await?;
    waiters_get_the_lock_in_arrival_order(&d).await?;
    a_dead_waiter_delays_the_next_by_at_most_its_queue_lease(&d).await?;
    try_once_and_giving_up(&d).await?;
    guard_semantics(&d).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_on_one_server() -> TestResult {
    all(Deployment::standalone()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_lock_on_a_cluster() -> TestResult {
    all(Deployment::cluster()).await
}
