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

/// Many waiters of one client queue at once (their acquires and releases
/// share batched script calls): they get the lock in the order the queue
/// holds them (read behind dlm's back once all queued), one at a time, with
/// fences that grow with the grants; waiters that queued on other locks in
/// the same batches get theirs in their own queue's order.
async fn concurrent_waiters_of_one_client_batch_in_queue_order(d: &Deployment) -> TestResult {
    let c = d.client().await;
    let names = ["batched-a", "batched-b"];
    let mut firsts = Vec::new();
    for name in names {
        firsts.push(c.fair_lock(name).acquire(&ttl(30_000)).await?);
    }
    let clock = Clock::new();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let per_lock = 24;
    for i in 0..2 * per_lock {
        let (c, holds, name) = (c.clone(), holds.clone(), names[i % 2]);
        tasks.push(tokio::spawn(async move {
            let opts = ttl(10_000).wait(Duration::from_secs(30));
            let g = c.fair_lock(name).acquire(&opts).await?;
            let from = clock.now();
            let token = g.token().as_str().to_owned();
            tokio::time::sleep(Duration::from_millis(2)).await;
            let until = clock.now();
            let fence = g.fence().get();
            g.release().await?;
            holds.lock().map_err(|_| "poisoned")?.push((
                token,
                Hold {
                    holder: i,
                    lock: name.into(),
                    from,
                    until,
                    fence: Some(fence),
                },
            ));
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    let mut queued = Vec::new();
    for name in names {
        wait_for_queue_len(d, name, per_lock).await?;
        queued.push(queue_line(d, name).await?);
    }
    for g in firsts {
        g.release().await?;
    }
    for t in tasks {
        t.await??;
    }
    let holds = holds.lock().map_err(|_| "poisoned")?.clone();
    for (name, line) in names.iter().zip(&queued) {
        let mut mine: Vec<_> = holds.iter().filter(|(_, h)| h.lock == *name).collect();
        assert_eq!(mine.len(), per_lock);
        let plain: Vec<Hold> = mine.iter().map(|(_, h)| h.clone()).collect();
        assert!(
            overlapping_holds(&plain).is_empty(),
            "{name}: overlapping holds"
        );
        mine.sort_by_key(|(_, h)| h.from);
        // The grant order is the queue's order: each token's place in line.
        let places: Vec<usize> = mine
            .iter()
            .map(|(t, _)| {
                line.iter()
                    .position(|w| w == t)
                    .ok_or("a holder that never queued")
            })
            .collect::<Result<_, _>>()?;
        assert!(
            places.windows(2).all(|w| w[0] < w[1]),
            "{name}: granted out of queue order"
        );
        assert!(
            mine.windows(2).all(|w| w[0].1.fence < w[1].1.fence),
            "{name}: fences grow with the grants"
        );
    }
    Ok(())
}

/// Many tasks of one client cycle on distinct names at once (batched
/// acquires and releases, uncontended): every cycle is granted, and each
/// lock's fences grow.
async fn concurrent_cycles_on_distinct_names(d: &Deployment) -> TestResult {
    let c = d.client().await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let lock = c.fair_lock(format!("distinct-{i}"));
            let mut last = 0;
            for _ in 0..10 {
                let g = lock.acquire(&ttl(10_000)).await?;
                assert!(g.fence().get() > last, "a fence that does not grow");
                last = g.fence().get();
                g.release().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    for i in [0, 63] {
        let s = c.fair_lock(format!("distinct-{i}")).status().await?;
        assert!(!s.held && s.waiting == 0, "distinct-{i} left held: {s:?}");
    }
    Ok(())
}

/// The queue's waiter tokens in order, read behind dlm's back.
async fn queue_line(d: &Deployment, name: &str) -> redis::RedisResult<Vec<String>> {
    let key = format!("dlm:fair:{{{name}}}:queue");
    let mut lrange = redis::cmd("LRANGE");
    lrange.arg(&key).arg(0).arg(-1);
    match d {
        Deployment::Standalone(s) => lrange.query_async(&mut common::raw(s).await).await,
        Deployment::Cluster(c) => {
            let client = redis::cluster::ClusterClient::new(c.urls())?;
            lrange
                .query_async(&mut client.get_async_connection().await?)
                .await
        }
    }
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
    concurrent_waiters_of_one_client_batch_in_queue_order(&d).await?;
    concurrent_cycles_on_distinct_names(&d).await?;
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
