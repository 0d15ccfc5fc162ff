//! `Client::release_all` releases every kind a client holds: mutexes and
//! the multi-lock's, fair locks, read shares and write locks, semaphore
//! permits and leaderships. Their guards report lost, and another client
//! gets each at once. On one server and on a Redis Cluster.
mod common;

use std::time::Duration;

use common::{Deployment, TestResult, ttl};

async fn releases_every_kind(d: &Deployment) -> TestResult {
    let (a, b) = (d.client().await, d.client().await);
    let long = ttl(60_000).watchdog(true);
    let sem = dlm::SemaphoreOptions::new(Duration::from_secs(60));
    let mutex = a.lock("ra:mutex").acquire(&long).await?;
    let multi = a.multi_lock(["ra:x", "ra:y"])?.acquire(&long).await?;
    let fair = a.fair_lock("ra:fair").acquire(&long).await?;
    let write = a.rwlock("ra:w").write(&long).await?;
    let read = a.rwlock("ra:r").read(&long).await?;
    let permits = a.semaphore("ra:sem", 2).acquire(2, &sem).await?;
    let lead = a.election("ra:lead").campaign("a", &long).await?;
    let report = a.release_all().await;
    assert_eq!(report.released, 8, "{report:?}");
    assert_eq!((report.already_lost, report.failed), (0, 0), "{report:?}");
    assert!(mutex.is_lost() && fair.is_lost() && write.is_lost() && read.is_lost());
    assert!(permits.is_lost() && lead.is_lost());
    assert!(multi.lost_signals().iter().all(dlm::LostSignal::is_lost));
    assert_eq!(a.held_count() + a.held_permits_count(), 0);

    // Another client gets every one of them without waiting.
    let now = ttl(5000);
    b.lock("ra:mutex").acquire(&now).await?.release().await?;
    b.multi_lock(["ra:x", "ra:y"])?
        .acquire(&now)
        .await?
        .release()
        .await?;
    b.fair_lock("ra:fair")
        .acquire(&now)
        .await?
        .release()
        .await?;
    b.rwlock("ra:w").write(&now).await?.release().await?;
    b.rwlock("ra:r").write(&now).await?.release().await?;
    let sem_now = dlm::SemaphoreOptions::new(Duration::from_secs(5));
    b.semaphore("ra:sem", 2)
        .acquire(2, &sem_now)
        .await?
        .release()
        .await?;
    b.election("ra:lead")
        .campaign("b", &now)
        .await?
        .resign()
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_on_one_server() -> TestResult {
    releases_every_kind(&Deployment::standalone()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_on_a_cluster() -> TestResult {
    releases_every_kind(&Deployment::cluster()).await
}
