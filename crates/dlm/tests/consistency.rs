//! Optimistic CAS and atomic stock against a real redis-server.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use dlm::Error;
use dlm::consistency::Take;

fn parse(b: Option<&[u8]>) -> u64 {
    b.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_updates_never_lose_an_increment() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let calls = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (rec, calls) = (c.versioned("counter"), calls.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..150 {
                rec.update(1000, |old| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    ((parse(old) + 1).to_string().into_bytes(), ())
                })
                .await?;
            }
            Ok::<_, Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let (data, version) = c.versioned("counter").read().await?.ok_or("written")?;
    assert_eq!(parse(Some(&data)), 16 * 150, "no lost update");
    assert_eq!(version, 16 * 150);
    let calls = calls.load(Ordering::Relaxed);
    assert!(
        calls > 16 * 150,
        "contention produced conflicts that were retried ({calls} computations)"
    );
    Ok(())
}

#[tokio::test]
async fn a_stale_version_is_a_typed_conflict_and_retries_are_bounded() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let rec = c.versioned("doc");
    assert_eq!(rec.write(0, "v1").await?, 1);
    assert!(matches!(
        rec.write(0, "again").await,
        Err(Error::Conflict {
            expected: 0,
            current: 1,
            ..
        })
    ));
    assert_eq!(rec.write(1, "v2").await?, 2);
    assert_eq!(rec.read().await?, Some((b"v2".to_vec(), 2)));
    // Every attempt conflicts (another writer sneaks in each time): bounded, clear error.
    let other = c.versioned("doc");
    let r = rec
        .update_with(3, |_old| {
            let other = other.clone();
            async move {
                let v = other.read().await?.map_or(0, |(_, v)| v);
                other.write(v, "interloper").await?;
                Ok((b"mine".to_vec(), ()))
            }
        })
        .await;
    assert!(matches!(r, Err(Error::Conflict { .. })), "{r:?}");
    assert!(matches!(
        rec.update(0, |_| (Vec::new(), ())).await,
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stock_sells_exactly_what_there_is_and_never_goes_below_zero() -> TestResult {
    let s = server();
    let c = client(&s).await;
    let stock = c.stock("phones");
    stock.set(10).await?;
    let sold = Arc::new(AtomicU64::new(0));
    let mut buyers = Vec::new();
    for _ in 0..300 {
        let (stock, sold) = (stock.clone(), sold.clone());
        buyers.push(tokio::spawn(async move {
            if let Take::Taken { .. } = stock.take(1).await? {
                sold.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, Error>(())
        }));
    }
    for b in buyers {
        b.await??;
    }
    assert_eq!(sold.load(Ordering::SeqCst), 10);
    assert_eq!(stock.get().await?, 0);
    assert_eq!(stock.take(1).await?, Take::Insufficient { left: 0 });
    assert_eq!(stock.add(2).await?, 2);
    assert_eq!(stock.take(3).await?, Take::Insufficient { left: 2 });
    assert_eq!(stock.take(2).await?, Take::Taken { left: 0 });
    assert!(matches!(
        stock.take(0).await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        c.stock("").get().await,
        Err(Error::InvalidArgument { .. })
    ));
    Ok(())
}
