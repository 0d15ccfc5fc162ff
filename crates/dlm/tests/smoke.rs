//! Smoke test: acquire, contend, hand off, release.
mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn acquire_release_roundtrip() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let lock = c.lock("smoke");
    let g = lock.acquire(&ttl(5000)).await?;
    assert_eq!(g.fence().get(), 1);
    let busy = lock.acquire(&ttl(5000)).await;
    assert!(
        matches!(busy, Err(dlm::Error::Busy { ttl: Some(_), .. })),
        "{busy:?}"
    );
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.acquire(&ttl(5000).wait(Duration::from_secs(5))).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = std::time::Instant::now();
    g.release().await?;
    let g2 = waiter.await??;
    println!("handoff {:?}", t0.elapsed());
    assert_eq!(g2.fence().get(), 2);
    g2.release().await?;
    Ok(())
}
