//! The multi-lock, judged on histories: {A, B} and {B, A} taken in a loop by
//! tasks of two clients never deadlock (the run ends within its deadline)
//! and never overlap on any name (`overlapping_holds` per name). One body,
//! run on one server (one script for all names), on a cluster with names in
//! several slots (ordered acquisition) and with names sharing a hash tag
//! (one script again).
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Deployment, TestResult, ttl};
use dlm::Error;
use dlm_testkit::history::{Clock, Hold, overlapping_holds};

async fn crossing_orders_never_deadlock_nor_overlap(
    d: &Deployment,
    a: &str,
    b: &str,
) -> TestResult {
    let clients = [d.client().await, d.client().await];
    let clock = Clock::new();
    let holds = Arc::new(Mutex::new(Vec::new()));
    let until = clock.now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for t in 0..6usize {
        let c = clients[t % 2].clone();
        let holds = holds.clone();
        let names = if t % 2 == 0 { [a, b] } else { [b, a] }.map(String::from);
        tasks.push(tokio::spawn(async move {
            let multi = c.multi_lock(names.clone())?;
            let opts = ttl(300).watchdog(t % 3 == 0).wait(Duration::from_secs(10));
            let mut n = 0;
            while clock.now() < until {
                let g = multi.acquire(&opts).await?;
                let from = clock.now();
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..10))).await;
                let end = clock.now().min(from + g.remaining());
                let fences = g.fences();
                g.release().await?;
                let mut h = holds.lock().map_err(|_| "poisoned")?;
                for (name, fence) in names.iter().zip(fences) {
                    h.push(Hold {
                        holder: t,
                        lock: name.clone(),
                        from,
                        until: end,
                        fence: fence.map(dlm::Fence::get),
                    });
                }
                n += 1;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(n)
        }));
    }
    let all = async {
        let mut total = 0;
        for t in tasks {
            total += t.await??;
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(total)
    };
    let total = tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .map_err(|_| "deadlock: the tasks did not finish within 20 s")??;
    let holds = holds.lock().map_err(|_| "poisoned")?.clone();
    assert!(total > 20, "enough acquisitions: {total}");
    let overlaps = overlapping_holds(&holds);
    assert!(overlaps.is_empty(), "overlapping holds: {overlaps:?}");
    Ok(())
}

/// All or none: with B held elsewhere, {A, B} fails naming B and leaves A free.
async fn all_or_none(d: &Deployment, a: &str, b: &str) -> TestResult {
    let (c, other) = (d.client().await, d.client().await);
    let held_b = other.lock(b).acquire(&ttl(5000)).await?;
    let multi = c.multi_lock([a, b])?;
    match multi
        .acquire(&ttl(5000).wait(Duration::from_millis(200)))
        .await
    {
        Err(Error::Busy { name, .. }) => assert_eq!(name, b),
        other => panic!("expected Busy on {b}: {other:?}"),
    }
    assert!(!c.lock(a).status().await?.held, "{a} was left taken");
    // Once B is free, both are taken; lost() fires when one is taken away.
    held_b.release().await?;
    let g = multi.acquire(&ttl(300).watchdog(true)).await?;
    assert_eq!(g.names(), [a, b]);
    assert!(g.fences().iter().all(Option::is_some));
    other.lock(b).release_token(g.guards()[1].token()).await?;
    tokio::time::timeout(Duration::from_secs(2), g.lost()).await?;
    assert!(g.is_lost());
    assert!(g.release().await.is_err(), "B was not ours any more");
    assert!(!c.lock(a).status().await?.held, "A was released anyway");
    Ok(())
}

async fn all_cases(d: Deployment, a: &str, b: &str) -> TestResult {
    crossing_orders_never_deadlock_nor_overlap(&d, a, b).await?;
    all_or_none(&d, a, b).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_on_one_server() -> TestResult {
    all_cases(Deployment::standalone(), "A", "B").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_on_a_cluster_across_slots() -> TestResult {
    // "A" and "B" hash to different slots: ordered acquisition.
    assert_ne!(dlm_testkit::key_slot("A"), dlm_testkit::key_slot("B"));
    all_cases(Deployment::cluster(), "A", "B").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_on_a_cluster_in_one_slot() -> TestResult {
    // Names sharing a hash tag: one script on one node.
    all_cases(Deployment::cluster(), "{acct}a", "{acct}b").await
}

#[tokio::test]
async fn bad_names_are_a_typed_error() -> TestResult {
    let s = common::server();
    let c = common::client(&s).await;
    let invalid = |r: dlm::Result<dlm::MultiLock>| matches!(r, Err(Error::InvalidArgument { .. }));
    assert!(invalid(c.multi_lock(["a", "b", "a"])));
    assert!(invalid(c.multi_lock(Vec::<String>::new())));
    assert!(invalid(c.multi_lock(["a", ""])));
    let many: Vec<String> = (0..=dlm::MAX_MULTI_LOCK).map(|i| format!("n{i}")).collect();
    assert!(invalid(c.multi_lock(many)));
    Ok(())
}
