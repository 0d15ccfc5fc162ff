//! The rate limiter and the id generator against a real redis-server: exact
//! windows shared by several clients, waiting without polling, ids unique
//! and increasing across handles and a restart (AOF), bad input.
mod common;

use std::time::{Duration, Instant};

use common::*;
use dlm::Error;
use dlm::ratelimit::Attempt;
use redis::AsyncCommands;

/// Run `total` acquires of a limiter `n` per `period` (spread or not) split
/// over `clients` clients; the grant times (server µs), sorted, and the wall time.
async fn acquire_from_clients(
    s: &RedisServer,
    name: &str,
    (n, period, spread): (u64, Duration, bool),
    clients: usize,
    total: usize,
) -> Result<(Vec<u64>, Duration), Box<dyn std::error::Error + Send + Sync>> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = client(s).await;
        let limiter = client.rate_limiter(name, n, period).spread(spread);
        let mine = total / clients + usize::from(c < total % clients);
        tasks.push(tokio::spawn(async move {
            let mut at = Vec::new();
            for _ in 0..mine {
                at.push(limiter.acquire().await?.at_micros());
            }
            Ok::<_, Error>(at)
        }));
    }
    let mut grants = Vec::new();
    for t in tasks {
        grants.extend(t.await??);
    }
    grants.sort_unstable();
    Ok((grants, started.elapsed()))
}

/// The most grants in any half-open window `[g, g + period)` starting at a grant.
fn busiest_window(grants: &[u64], period: Duration) -> usize {
    let p = period.as_micros() as u64;
    grants
        .iter()
        .enumerate()
        .map(|(i, g)| grants[i..].iter().take_while(|h| **h < g + p).count())
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn spread_limit_of_10_per_second_takes_50_grants_past_4_5_seconds() -> TestResult {
    let s = server();
    let period = Duration::from_secs(1);
    let (grants, wall) = acquire_from_clients(&s, "spread", (10, period, true), 5, 50).await?;
    assert_eq!(grants.len(), 50);
    assert!(wall >= Duration::from_millis(4500), "took {wall:?}");
    assert!(busiest_window(&grants, period) <= 10);
    // Server clock: 49 gaps of at least 100 ms.
    assert!(grants[49] - grants[0] >= 4_900_000);
    Ok(())
}

#[tokio::test]
async fn burst_limit_is_exact_over_every_window_across_clients() -> TestResult {
    let s = server();
    let period = Duration::from_secs(1);
    let (grants, wall) = acquire_from_clients(&s, "burst", (10, period, false), 4, 30).await?;
    assert_eq!(grants.len(), 30);
    assert_eq!(busiest_window(&grants, period), 10, "{grants:?}");
    // Grants 11 and 21 wait for a whole period each.
    assert!(grants[20] - grants[0] >= 2_000_000);
    assert!(wall >= Duration::from_millis(1990), "took {wall:?}");
    // Waiting is sleeping: far fewer scripts than a poll every millisecond.
    let mut conn = raw(&s).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    let calls = evalsha_calls(&stats);
    assert!(calls < 200, "{calls} scripts for 30 grants");
    Ok(())
}

#[tokio::test]
async fn try_and_bounded_acquire_say_when_a_slot_frees() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let limiter = c.rate_limiter("once", 1, Duration::from_secs(10));
    assert!(limiter.try_acquire().await?.is_granted());
    let Attempt::Limited { retry_after } = limiter.try_acquire().await? else {
        panic!("granted twice in one window");
    };
    assert!(retry_after > Duration::from_secs(9) && retry_after <= Duration::from_secs(10));
    let started = Instant::now();
    let refused = limiter.acquire_within(Duration::from_millis(200)).await;
    assert!(
        matches!(refused, Err(Error::RateLimited { .. })),
        "{refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(150),
        "it slept in vain"
    );
    // A short window frees within the bound.
    let quick = c.rate_limiter("quick", 1, Duration::from_millis(100));
    quick.acquire().await?;
    let started = Instant::now();
    quick.acquire_within(Duration::from_secs(1)).await?;
    assert!(started.elapsed() >= Duration::from_millis(80));
    Ok(())
}

#[tokio::test]
async fn bad_limits_and_counts_write_nothing() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let zero = c
        .rate_limiter("zero", 0, Duration::from_secs(1))
        .acquire()
        .await;
    assert!(
        matches!(zero, Err(Error::InvalidArgument { .. })),
        "{zero:?}"
    );
    let no_period = c.rate_limiter("nop", 1, Duration::ZERO).try_acquire().await;
    assert!(matches!(no_period, Err(Error::InvalidArgument { .. })));
    let unnamed = c
        .rate_limiter("", 1, Duration::from_secs(1))
        .try_acquire()
        .await;
    assert!(matches!(unnamed, Err(Error::InvalidArgument { .. })));
    let none = c.ids("n").next_batch(0).await;
    assert!(matches!(none, Err(Error::InvalidArgument { .. })));
    let block = c.ids("n").block(0).next().await;
    assert!(matches!(block, Err(Error::InvalidArgument { .. })));
    let mut conn = raw(&s).await;
    let keys: Vec<String> = conn.keys("*").await?;
    assert!(keys.is_empty(), "{keys:?}");
    Ok(())
}

#[tokio::test]
async fn ids_are_unique_and_increasing_per_handle_and_survive_a_restart() -> TestResult {
    let mut s = RedisServer::builder().aof(true).start()?;
    let c = client(&s).await;
    let plain = c.ids("orders");
    assert_eq!(plain.next().await?, 1);
    assert_eq!(plain.next_batch(3).await?, vec![2, 3, 4]);

    // Four handles with blocks, concurrently: unique overall, increasing per handle.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let ids = client(&s).await.ids("orders").block(64);
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..50 {
                got.extend(ids.next_batch(3).await?);
                got.push(ids.next().await?);
            }
            Ok::<_, Error>(got)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let got = t.await??;
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "not increasing: {got:?}"
        );
        all.extend(got);
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "an id was handed out twice");
    assert!(all[0] > 4);

    let before = plain.next().await?;
    s.restart()?;
    let c = client(&s).await;
    let after = c.ids("orders").next().await?;
    assert!(after > before, "{after} after a restart, {before} before");
    Ok(())
}
