//! Redlock over 5 real, independent redis-server processes: exclusion,
//! minority failures, no-quorum errors, slow nodes, partial grants, and a node
//! restarted empty.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use dlm::{Client, Error};

fn five() -> Vec<RedisServer> {
    RedisServer::start_many(5).expect("start 5 redis-server processes")
}

async fn redlock(nodes: &[RedisServer]) -> Client {
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    Client::builder()
        .timeout(Duration::from_millis(1000))
        .connect_many(&urls)
        .await
        .expect("connect to the 5 nodes")
}

fn key_on(node: &RedisServer, key: &str) -> String {
    node.command(&["GET", key]).expect("GET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_across_five_nodes() -> TestResult {
    let nodes = five();
    let clients = [redlock(&nodes).await, redlock(&nodes).await];
    assert_eq!(clients[0].nodes(), 5);
    let occupied = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let count = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let c = clients[t % 2].clone();
        let (occupied, overlaps, count) = (occupied.clone(), overlaps.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            let opts = ttl(5000).wait(Duration::from_secs(60));
            for _ in 0..25 {
                let g = c.lock("shared").acquire(&opts).await?;
                assert!(g.fence().is_none(), "Redlock hands out no fencing token");
                if occupied.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let v = count.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                count.store(v + 1, Ordering::SeqCst);
                occupied.fetch_sub(1, Ordering::SeqCst);
                let r = g.release().await?;
                assert!(r.confirmed >= 3 && r.nodes == 5, "{r:?}");
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(count.load(Ordering::SeqCst), 16 * 25);
    Ok(())
}

#[tokio::test]
async fn two_dead_nodes_are_tolerated_three_are_not_and_recovery_works() -> TestResult {
    let mut nodes = five();
    let c = redlock(&nodes).await;
    nodes[0].kill();
    nodes[1].kill();
    let g = c.lock("minority-down").acquire(&ttl(3000)).await?;
    g.extend(Duration::from_secs(3)).await?;
    assert_eq!(key_on(&nodes[4], g.key()), g.token().as_str());
    assert!(g.release().await?.confirmed >= 3);

    nodes[2].kill();
    let t0 = Instant::now();
    let r = c
        .lock("majority-down")
        .acquire(&ttl(3000).wait(Duration::from_millis(800)))
        .await;
    assert!(
        matches!(
            r,
            // 2 answer (fewer only if a live node was slower than the
            // per-node timeout on a loaded machine).
            Err(Error::NoQuorum {
                answered: 0..=2,
                needed: 3,
                nodes: 5,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "no hang: {:?}",
        t0.elapsed()
    );
    for n in &nodes[3..] {
        assert_eq!(
            key_on(n, "dlm:lock:{majority-down}"),
            "",
            "failed attempts leave no key"
        );
    }

    for n in &mut nodes[..3] {
        n.restart()?;
    }
    let g = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match c.lock("majority-down").acquire(&ttl(3000)).await {
                Ok(g) => return g,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await?;
    g.release().await?;
    Ok(())
}

#[tokio::test]
async fn a_frozen_node_delays_acquisition_by_at_most_the_node_timeout() -> TestResult {
    let nodes = five();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let c = Client::builder()
        .node_timeout(Duration::from_millis(100))
        .connect_many(&urls)
        .await?;
    let lock = c.lock("slow");
    lock.acquire(&ttl(2000)).await?.release().await?; // scripts loaded everywhere
    nodes[0].pause()?;
    nodes[1].pause()?;
    let t0 = Instant::now();
    let g = lock.acquire(&ttl(2000)).await?;
    let took = t0.elapsed();
    common::matrix_row(
        "frozen nodes under Redlock(5)",
        "one acquire, 100 ms per-node timeout",
        "2 of 5 nodes SIGSTOPped",
        "0 overlaps",
        &format!(
            "acquired in {took:.1?} (the 3 live nodes decide; see BENCHMARKS.md for the CLI timings)"
        ),
    );
    assert!(took < Duration::from_millis(600), "took {took:?}");
    g.release().await?;
    nodes[0].resume()?;
    nodes[1].resume()?;
    Ok(())
}

#[tokio::test]
async fn a_minority_grant_is_released_right_away() -> TestResult {
    let nodes = five();
    let c = redlock(&nodes).await;
    let key = c.lock("split").key()?;
    // Somebody else holds the key on 3 of 5 nodes.
    for n in &nodes[..3] {
        assert_eq!(
            n.command(&["SET", &key, "someone-else", "PX", "10000"])?,
            "+OK"
        );
    }
    let r = c.lock("split").acquire(&ttl(5000)).await;
    assert!(matches!(r, Err(Error::Busy { ttl: Some(_), .. })), "{r:?}");
    // Decided by the 3 refusals; grants that came later are released in the
    // background, within the per-node timeout.
    assert!(c.settle(Duration::from_secs(1)).await, "clean-up finished");
    for n in &nodes[3..] {
        assert_eq!(
            key_on(n, &key),
            "",
            "our grant on a minority node was released"
        );
    }
    for n in &nodes[..3] {
        assert_eq!(key_on(n, &key), "someone-else");
    }
    Ok(())
}

#[tokio::test]
async fn a_node_restarted_empty_is_retaken_by_the_next_renewal() -> TestResult {
    // Design: Redlock's extend re-takes the key on a node that lost it (it was
    // restarted empty), when the key is absent there; it counts only with a
    // majority of nodes still holding our token or re-taken, within validity.
    let mut nodes = five();
    let c = redlock(&nodes).await;
    let g = c
        .lock("restarted")
        .acquire(&ttl(900).watchdog(true))
        .await?;
    let key = g.key().to_string();
    nodes[0].restart()?;
    assert_eq!(key_on(&nodes[0], &key), "");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        key_on(&nodes[0], &key),
        g.token().as_str(),
        "re-taken by a renewal"
    );
    assert!(!g.is_lost());
    // If a majority restarts empty and somebody else takes it there, the holder learns it lost.
    let other =
        Client::connect_many(&nodes.iter().map(RedisServer::url).collect::<Vec<_>>()).await?;
    for n in &mut nodes[..3] {
        n.restart()?;
    }
    let taken = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Ok(g) = other.lock("restarted").acquire(&ttl(5000)).await {
                return g;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if let Ok(t) = taken {
        tokio::time::timeout(Duration::from_secs(3), g.lost()).await?;
        t.release().await?;
    } else {
        // The watchdog re-took the restarted nodes first: still exclusive.
        assert!(!g.is_lost());
    }
    Ok(())
}

#[tokio::test]
async fn bad_redlock_configuration_is_rejected() -> TestResult {
    let nodes = RedisServer::start_many(3)?;
    let none: [&str; 0] = [];
    assert!(matches!(
        Client::connect_many(&none).await,
        Err(Error::InvalidArgument { .. })
    ));
    let dup = [nodes[0].url(), nodes[1].url(), nodes[0].url()];
    assert!(matches!(
        Client::connect_many(&dup).await,
        Err(Error::InvalidArgument { .. })
    ));
    let c = Client::builder()
        .node_timeout(Duration::from_millis(500))
        .connect_many(&nodes.iter().map(RedisServer::url).collect::<Vec<_>>())
        .await?;
    let r = c.lock("x").acquire(&ttl(800)).await;
    assert!(
        matches!(r, Err(Error::InvalidArgument { arg: "ttl", .. })),
        "{r:?}"
    );
    let g = c.lock("x").acquire(&ttl(5000)).await?;
    assert!(matches!(
        c.fenced_write("x", dlm::Fence::new(1), b"v").await,
        Err(Error::InvalidArgument { .. })
    ));
    g.release().await?;
    Ok(())
}

fn scripts_run(node: &RedisServer) -> u64 {
    evalsha_calls(&node.command(&["INFO", "commandstats"]).expect("INFO"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_redlock_watchdogs_renew_with_a_few_scripts_per_node_per_tick() -> TestResult {
    let nodes = five();
    // A 3 s TTL (renewals every second) and a 1 s deadline per node: with the
    // default deadline (1% of the TTL, at least 50 ms) a loaded machine (the
    // suite runs several such tests at once on 2 cores) timed out every
    // node's renewal script until the leases ran out, and this test failed
    // with all 500 lost. A renewal that lands after a key expired no longer
    // counts (issue 30). What it checks holds whatever the TTL.
    let ttl = Duration::from_secs(3);
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let c = Client::builder()
        .timeout(Duration::from_secs(2))
        .node_timeout(Duration::from_secs(1))
        .connect_many(&urls)
        .await?;
    let mut guards = Vec::new();
    for i in 0..500 {
        guards.push(
            c.lock(format!("many:{i}"))
                .acquire(&dlm::LockOptions::new(ttl).watchdog(true))
                .await?,
        );
    }
    tokio::time::sleep(ttl * 2 / 3).await; // renewals settle into shared batches
    let before: Vec<u64> = nodes.iter().map(scripts_run).collect();
    let t0 = Instant::now();
    tokio::time::sleep(ttl * 2).await; // 2 TTLs, ~6 renewals each
    let scripts: Vec<u64> = nodes
        .iter()
        .zip(&before)
        .map(|(n, b)| scripts_run(n) - b)
        .collect();
    // The ticks (ttl / 3 apart) in the time counted, which a loaded machine
    // stretches: one script per lock would be 500 per node per tick.
    let ticks = t0.elapsed().as_secs_f64() / (ttl / 3).as_secs_f64();
    println!("renewal scripts per node: {scripts:?} over {ticks:.1} ticks");
    // One script per node per batch, a few batches per tick: tens, not 3000
    // (at most 25 a tick: 150 over the 6 ticks of 2 TTLs).
    for s in &scripts {
        assert!(
            (*s as f64) < 25.0 * ticks,
            "{scripts:?} renewal scripts for 500 locks over {ticks:.1} ticks"
        );
    }
    for g in &guards {
        assert!(!g.is_lost(), "{} lost", g.name());
        assert!(g.remaining() > Duration::from_millis(200));
    }
    let report = c.release_all().await;
    assert_eq!(report.released, 500);
    Ok(())
}

#[tokio::test]
async fn acquire_returns_once_a_majority_granted_without_waiting_for_frozen_nodes() -> TestResult {
    let nodes = five();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let c = Client::builder()
        .node_timeout(Duration::from_millis(1500))
        .connect_many(&urls)
        .await?;
    let lock = c.lock("majority");
    lock.acquire(&ttl(20_000)).await?.release().await?; // scripts loaded everywhere
    nodes[3].pause()?;
    nodes[4].pause()?;
    let t0 = Instant::now();
    let g = lock.acquire(&ttl(20_000)).await?;
    let took = t0.elapsed();
    // Three healthy nodes answer in milliseconds; the frozen two would take 1.5 s.
    assert!(took < Duration::from_millis(700), "took {took:?}");
    let token = key_on(&nodes[0], &lock.key()?);
    assert!(!token.is_empty());
    nodes[3].resume()?;
    nodes[4].resume()?;
    // The grants the frozen nodes gave late carry our token and go with the release.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = g.release().await?;
    assert_eq!(released.nodes, 5);
    for n in &nodes {
        assert_eq!(key_on(n, &lock.key()?), "", "released everywhere");
    }
    Ok(())
}

/// Nodes frozen before the client connects: it proceeds once a majority is
/// connected, locks on that majority, and the frozen nodes join once thawed.
#[tokio::test]
async fn connecting_proceeds_with_a_majority_and_frozen_nodes_join_later() -> TestResult {
    let nodes = five();
    nodes[3].pause()?;
    nodes[4].pause()?;
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let t0 = Instant::now();
    let c = Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_many(&urls)
        .await?;
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(500), "connect took {took:?}");
    let opts = ttl(10_000);
    let lock = c.lock("joined-later");
    assert_eq!(lock.node_timeout(&opts), Some(Duration::from_millis(100)));
    let t0 = Instant::now();
    lock.acquire(&opts).await?.release().await?;
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(300),
        "acquire+release took {took:?}"
    );

    nodes[3].resume()?;
    nodes[4].resume()?;
    // Once their background connections are up, the thawed nodes hold locks too.
    let joined = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let g = c.lock("after-thaw").acquire(&ttl(10_000)).await?;
            c.settle(Duration::from_secs(1)).await;
            let on_thawed = key_on(&nodes[4], g.key()) == g.token().as_str()
                && key_on(&nodes[3], g.key()) == g.token().as_str();
            g.release().await?;
            if on_thawed {
                return Ok::<_, Error>(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(matches!(joined, Ok(Ok(()))), "{joined:?}");
    Ok(())
}

/// A per-acquisition node timeout overrides the TTL's, and is checked.
#[tokio::test]
async fn lock_options_set_the_node_timeout() -> TestResult {
    let nodes = five();
    let c = redlock(&nodes).await;
    let lock = c.lock("opts");
    let derived = ttl(2000);
    assert_eq!(lock.node_timeout(&derived), Some(Duration::from_millis(50)));
    assert_eq!(
        lock.node_timeout(&ttl(20_000)),
        Some(Duration::from_millis(200))
    );
    let short = ttl(2000).node_timeout(Duration::from_millis(5));
    assert_eq!(lock.node_timeout(&short), Some(Duration::from_millis(5)));
    let own = ttl(2000).node_timeout(Duration::from_millis(300));
    let capped = ttl(600_000).node_timeout(Duration::from_secs(30));
    assert_eq!(
        lock.node_timeout(&capped),
        Some(Duration::from_millis(1000))
    );
    lock.acquire(&own).await?.release().await?;
    let r = lock.acquire(&ttl(2000).node_timeout(Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    let r = lock
        .acquire(&ttl(100).node_timeout(Duration::from_millis(60)))
        .await;
    assert!(
        matches!(r, Err(Error::InvalidArgument { .. })),
        "TTL too short: {r:?}"
    );
    let single = Client::connect(&nodes[0].url()).await?;
    assert_eq!(single.lock("opts").node_timeout(&derived), None);
    Ok(())
}

/// Deciding early never turns "busy" into "no quorum": with a node down and
/// the lock held on the others, the answer is Busy, also when the refusals
/// arrive before the other replies.
#[tokio::test]
async fn a_busy_lock_with_a_node_down_is_busy_not_no_quorum() -> TestResult {
    let mut nodes = five();
    nodes[0].kill();
    let c = redlock(&nodes).await;
    let holder = redlock(&nodes).await;
    let held = holder.lock("taken").acquire(&ttl(10_000)).await?;
    holder.settle(Duration::from_secs(1)).await; // held on all 4 live nodes
    for _ in 0..20 {
        let r = c.lock("taken").acquire(&ttl(10_000)).await;
        assert!(matches!(r, Err(Error::Busy { ttl: Some(_), .. })), "{r:?}");
    }
    held.release().await?;
    c.lock("taken")
        .acquire(&ttl(10_000))
        .await?
        .release()
        .await?;
    Ok(())
}

/// A Redlock acquire decides on the first majority and lets the other
/// nodes' requests finish in the background; the release that follows at
/// once must still find and delete the lock on every node. On fresh fencing
/// counters each node's acquire takes two calls (the transaction, then the
/// script that raises the counter past the floor): the second must not take
/// the lock again after the release has run between them, which left it
/// held for nobody on that node until its TTL.
///
/// Ignored until review finding 3 is fixed (open, RELIABILITY.md; the fix is
/// on branch `written`): the release can overtake a lagging node's acquire
/// still queued in that node's batcher, which fails this test now and then
/// under CI load, on four threads and on one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "review finding 3 (open): a release can overtake a lagging node's queued acquire under load"]
async fn an_immediate_release_leaves_no_node_holding_the_lock() -> TestResult {
    let nodes = five();
    let c = redlock(&nodes).await;
    for round in 0..40 {
        for n in &nodes {
            n.command(&["FLUSHALL"])?;
        }
        let lock = c.lock(format!("released-{round}"));
        lock.acquire(&ttl(30_000)).await?.release().await?;
        let key = lock.key()?;
        let mut left = Vec::new();
        for _ in 0..50 {
            left = nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| !key_on(n, &key).is_empty())
                .map(|(i, _)| i)
                .collect();
            if left.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            left.is_empty(),
            "round {round}: still held on nodes {left:?}"
        );
    }
    Ok(())
}
