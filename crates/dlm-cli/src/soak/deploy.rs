//! The soak's smaller deployments beside the standalone server: a Redis
//! Cluster (3 masters, 3 replicas) and a Sentinel setup (a master, a
//! replica, 3 sentinels), each with the library's lock clients of every
//! kind, and the nemesis that fails them over.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlm_testkit::{Cluster, Sentinels, key_slot};

use super::faults::{Event, FaultLog, Scope, sleep_unless_stopping};
use super::locks::Lease;
use super::record::{Kind, Recorder};
use crate::rng::SplitMix;

/// The name the sentinels monitor the master as.
pub const MASTER: &str = "soak";

/// The lease of the library's clients on the cluster.
pub const CLUSTER: Lease = Lease {
    ttl: Duration::from_secs(2),
    wait: Duration::from_millis(500),
    tag: "cluster:",
    replicas: None,
    extends: true,
};

/// Behind Sentinel: a grant counts once the replica has it, and no
/// extension (see [`Lease::extends`]).
pub const SENTINEL: Lease = Lease {
    ttl: Duration::from_secs(2),
    wait: Duration::from_millis(1500),
    tag: "sentinel:",
    replicas: Some(1),
    extends: false,
};

/// The deployments that started.
#[derive(Default)]
pub struct Extra {
    /// The cluster.
    pub cluster: Option<Arc<Cluster>>,
    /// The Sentinel setup.
    pub sentinels: Option<Arc<Mutex<Sentinels>>>,
}

/// Start the cluster and the Sentinel setup; what does not start is left
/// out with a note.
pub async fn start(notes: &mut Vec<String>) -> Extra {
    let mut extra = Extra::default();
    match tokio::task::spawn_blocking(Cluster::start).await {
        Ok(Ok(c)) => extra.cluster = Some(Arc::new(c)),
        Ok(Err(e)) => notes.push(format!("no Cluster: it did not start: {e}")),
        Err(e) => notes.push(format!("no Cluster: {e}")),
    }
    match tokio::task::spawn_blocking(|| Sentinels::start(MASTER)).await {
        Ok(Ok(s)) => extra.sentinels = Some(Arc::new(Mutex::new(s))),
        Ok(Err(e)) => notes.push(format!("no Sentinel: it did not start: {e}")),
        Err(e) => notes.push(format!("no Sentinel: {e}")),
    }
    extra
}

/// A library client of the cluster.
pub async fn cluster_client(c: &Cluster) -> dlm::Result<dlm::Client> {
    dlm::Client::builder()
        .timeout(Duration::from_secs(1))
        .connect_cluster(&c.urls())
        .await
}

/// A library client behind the sentinels.
pub async fn sentinel_client(s: &Mutex<Sentinels>) -> dlm::Result<dlm::Client> {
    let urls = s
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .sentinel_urls();
    dlm::Client::builder()
        .timeout(Duration::from_secs(1))
        .connect_sentinel(MASTER, &urls)
        .await
}

/// Fail the cluster over (`CLUSTER FAILOVER` of a slot some lock of this
/// epoch lives in) and the Sentinel setup (SIGKILL of its master, wait for
/// the promotion, restart the old master as the new replica) in turns,
/// every `every` or so, until the soak stops.
pub async fn failovers(
    rec: Arc<Recorder>,
    log: Arc<FaultLog>,
    extra: Extra,
    every: Duration,
    seed: u64,
) {
    let mut rng = SplitMix(seed);
    let mut turn = 0u64;
    while !rec.stopping() {
        sleep_unless_stopping(
            &rec,
            every / 2 + every.mul_f64((rng.next() % 1000) as f64 / 1000.0),
        )
        .await;
        if rec.stopping() {
            break;
        }
        turn += 1;
        let at = rec.clock.now();
        let kind = if turn % 2 == 1 {
            let Some(c) = extra.cluster.clone() else {
                continue;
            };
            let k = Kind::ALL[rng.next() as usize % Kind::ALL.len()];
            let name = rec.lock_name(
                CLUSTER.tag,
                k,
                rec.epoch(),
                rng.next() as usize % rec.names_per_kind,
            );
            let slot = key_slot(&format!("{{{name}}}"));
            let r = tokio::task::spawn_blocking(move || c.failover(slot)).await;
            if !matches!(r, Ok(Ok(()))) {
                tracing::warn!("cluster failover of slot {slot} failed: {r:?}");
                continue;
            }
            "cluster-failover"
        } else {
            let Some(s) = extra.sentinels.clone() else {
                continue;
            };
            let r = tokio::task::spawn_blocking(move || sentinel_failover(&s)).await;
            if !matches!(r, Ok(Ok(()))) {
                tracing::warn!("sentinel failover failed: {r:?}");
                continue;
            }
            "sentinel-failover"
        };
        log.push(Event {
            kind,
            at,
            until: rec.clock.now(),
            breaks: None,
            scope: Scope::All,
        });
    }
}

/// SIGKILL the master, wait for the sentinels to promote the replica,
/// restart the old master (it comes back as the new master's replica).
fn sentinel_failover(s: &Mutex<Sentinels>) -> Result<(), dlm_testkit::Error> {
    let mut s = s.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let old = s.kill_master()?;
    s.wait_for_failover(old, Duration::from_secs(30))?;
    if s.master().port() == old {
        s.master_mut().restart()?;
    } else {
        s.replica_mut().restart()?;
    }
    // Until the old master syncs, grants cannot reach a replica (they
    // fail as not replicated); wait for it so the next failover has one.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        let replica = if s.master().port() == old {
            s.master()
        } else {
            s.replica()
        };
        if replica
            .command(&["INFO", "replication"])
            .is_ok_and(|i| i.contains("master_link_status:up"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
