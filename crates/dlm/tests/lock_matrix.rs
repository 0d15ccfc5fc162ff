//! The lock family's combination matrix (issue 30): the paths of a lock
//! differ by how the client was built (URL, `connection()`, Sentinel,
//! Cluster, Redlock), by the user's ACL (none, today's rules, the rules from
//! before the transaction path), and by what an older layout left in Redis
//! (fresh counters, or a per-slot counter an older `connection()` client
//! drove above the shared one). Each row puts several clients of different
//! kinds on the same lock at once, each running a seeded mix of operations
//! (try-lock, acquire with a wait, extend, watchdog, release, release on
//! drop, `release_all`, `fenced_write`), and shows:
//!
//! * no two holders overlap (an in-process count of holders, entered after
//!   the grant and left before the release, never exceeds one);
//! * on one Redis and on a Cluster, the fences of the lock strictly increase
//!   in grant order (each holder's fence is above the previous holder's, and
//!   its `fenced_write` is accepted while it holds the lock);
//! * no lock is left held for nobody (once every client settled, the lock is
//!   free).
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use dlm::{Client, Error};
use dlm_testkit::{Cluster, Sentinels};
use redis::AsyncCommands;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client on `url` built from an existing connection.
async fn on_connection(url: &str) -> Result<Client, BoxError> {
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    Ok(Client::builder()
        .timeout(Duration::from_secs(2))
        .connection(conn)?)
}

async fn by_url(url: &str) -> Result<Client, BoxError> {
    Ok(Client::builder()
        .timeout(Duration::from_secs(2))
        .connect(url)
        .await?)
}

/// What every holder of the row's lock shares.
#[derive(Default)]
struct Watch {
    /// Holders inside their critical section now.
    holders: AtomicUsize,
    /// The most there ever were at once.
    most: AtomicUsize,
    /// The fence of the latest holder.
    last_fence: AtomicU64,
    /// Grants with a fence not above the previous holder's.
    inversions: AtomicUsize,
    /// Fenced writes refused while holding.
    refused_writes: AtomicUsize,
    grants: AtomicUsize,
}

/// One of the operations a task runs.
#[derive(Debug, Clone, Copy)]
enum Op {
    TryLock,
    Wait,
    Extend,
    Watchdog,
    Drop,
    ReleaseAll,
}

const OPS: [Op; 6] = [
    Op::TryLock,
    Op::Wait,
    Op::Extend,
    Op::Watchdog,
    Op::Drop,
    Op::ReleaseAll,
];

/// `clients` (each with the kind it stands for) work on lock `name` at once:
/// `tasks` tasks per client, `rounds` operations each. `fences`: the
/// deployment hands out fences (one Redis, Cluster; not Redlock).
async fn exercise(
    clients: Vec<(&'static str, Client)>,
    name: &str,
    fences: bool,
    rounds: usize,
) -> Result<Arc<Watch>, BoxError> {
    let watch = Arc::new(Watch::default());
    let mut handles = Vec::new();
    for (c, (kind, client)) in clients.iter().enumerate() {
        // A client whose tasks call `release_all` releases its own holds
        // only: one task per such client.
        let tasks = if c % 3 == 2 { 1 } else { 3 };
        for t in 0..tasks {
            let (client, watch, name, kind) =
                (client.clone(), watch.clone(), name.to_string(), *kind);
            let seed = (c * 31 + t) as u64;
            handles.push(tokio::spawn(async move {
                let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for round in 0..rounds {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let mut op = OPS[(rng % OPS.len() as u64) as usize];
                    if matches!(op, Op::ReleaseAll) && tasks > 1 {
                        op = Op::Wait;
                    }
                    one_op(&client, &watch, &name, fences, op)
                        .await
                        .map_err(|e| format!("{kind}, task {t}, round {round}, {op:?}: {e}"))?;
                }
                Ok::<_, BoxError>(())
            }));
        }
    }
    for h in handles {
        h.await??;
    }
    for (_, c) in &clients {
        c.settle(Duration::from_secs(3)).await;
    }
    // Releases on drop run in the background: give them a moment.
    let lock = clients[0].1.lock(name);
    let mut held = true;
    for _ in 0..100 {
        held = lock.status().await?.held;
        if !held {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!held, "{name}: left held for nobody");
    assert_eq!(
        watch.most.load(Ordering::SeqCst),
        1,
        "{name}: holders overlapped"
    );
    assert_eq!(
        watch.inversions.load(Ordering::SeqCst),
        0,
        "{name}: fences went backwards"
    );
    assert_eq!(
        watch.refused_writes.load(Ordering::SeqCst),
        0,
        "{name}: a holder's fenced write was refused"
    );
    assert!(
        watch.grants.load(Ordering::SeqCst) > 0,
        "{name}: nothing granted"
    );
    Ok(watch)
}

async fn one_op(
    client: &Client,
    watch: &Watch,
    name: &str,
    fences: bool,
    op: Op,
) -> Result<(), BoxError> {
    let lock = client.lock(name);
    let opts = match op {
        Op::TryLock => ttl(5_000),
        Op::Watchdog => ttl(1_500).watchdog(true).wait(Duration::from_secs(20)),
        _ => ttl(5_000).wait(Duration::from_secs(20)),
    };
    let guard = match lock.acquire(&opts).await {
        Ok(g) => g,
        Err(Error::Busy { .. }) if matches!(op, Op::TryLock) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    // Inside the critical section.
    let before = watch.holders.fetch_add(1, Ordering::SeqCst);
    watch.most.fetch_max(before + 1, Ordering::SeqCst);
    watch.grants.fetch_add(1, Ordering::SeqCst);
    if fences {
        let fence = guard.fence().ok_or("no fence on one Redis")?;
        let last = watch.last_fence.swap(fence.get(), Ordering::SeqCst);
        if fence.get() <= last {
            watch.inversions.fetch_add(1, Ordering::SeqCst);
        }
        match client
            .fenced_write(&format!("{name}:resource"), fence, b"v")
            .await
        {
            Ok(()) => {}
            Err(Error::StaleFence { .. }) => {
                watch.refused_writes.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => return Err(e.into()),
        }
    }
    if matches!(op, Op::Extend) {
        guard.extend(Duration::from_secs(5)).await?;
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    if guard.is_lost() {
        return Err("the guard lost the lock while holding it".into());
    }
    watch.holders.fetch_sub(1, Ordering::SeqCst);
    match op {
        Op::Drop => drop(guard),
        Op::ReleaseAll => {
            let report = client.release_all().await;
            assert_eq!(report.released, 1, "release_all released our one hold");
            drop(guard);
        }
        _ => {
            guard.release().await?;
        }
    }
    Ok(())
}

/// Standalone: every client kind and ACL of one Redis on one lock, with
/// fresh counters, then with a per-slot counter an older `connection()`
/// client left high above the shared one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_redis_every_client_kind_and_acl() -> TestResult {
    for older_layout in [false, true] {
        let s = RedisServer::builder()
            .acl_user("today", "s3cret", dlm::keys::ACL_RULES)
            .acl_user("older", "s3cret", &older_acl_rules())
            .start()?;
        let name = if older_layout { "m-old" } else { "m-fresh" };
        let seeded = dlm::keys::FENCE_FLOOR + 5_000_000;
        if older_layout {
            let key = dlm::keys::slot_fence_key("dlm:lock:", &format!("dlm:lock:{{{name}}}"));
            let _: () = raw(&s).await.set(&key, seeded).await?;
        }
        let clients = vec![
            ("url", by_url(&s.url()).await?),
            (
                "url, today's ACL",
                by_url(&s.url_as("today", "s3cret")).await?,
            ),
            (
                "url, older ACL",
                by_url(&s.url_as("older", "s3cret")).await?,
            ),
            ("connection()", on_connection(&s.url()).await?),
            (
                "connection(), older ACL",
                on_connection(&s.url_as("older", "s3cret")).await?,
            ),
            (
                "connection(), today's ACL",
                on_connection(&s.url_as("today", "s3cret")).await?,
            ),
        ];
        let watch = exercise(clients, name, true, 12).await?;
        if older_layout {
            let last = watch.last_fence.load(Ordering::SeqCst);
            assert!(
                last > seeded,
                "fences above the older counter: {last} vs {seeded}"
            );
        }
    }
    Ok(())
}

/// Redis Cluster: dlm's cluster client and a client on the application's
/// own cluster connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_url_and_connection_clients() -> TestResult {
    let cluster = Cluster::start()?;
    let urls = cluster.urls();
    let conn = redis::cluster::ClusterClient::new(urls.clone())?
        .get_async_connection()
        .await?;
    let connect = || async {
        Client::builder()
            .timeout(Duration::from_secs(2))
            .connect_cluster(&urls)
            .await
    };
    let clients = vec![
        ("cluster", connect().await?),
        (
            "cluster connection()",
            Client::builder()
                .timeout(Duration::from_secs(2))
                .connection(conn)?,
        ),
        ("cluster (release_all)", connect().await?),
    ];
    exercise(clients, "m-cluster", true, 10).await?;
    Ok(())
}

/// Sentinel: a client following the master through the Sentinels, a URL
/// client and a `connection()` client on the master itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_url_and_connection_clients() -> TestResult {
    let sentinels = Sentinels::start("matrix")?;
    let via_sentinels = Client::builder()
        .timeout(Duration::from_secs(2))
        .connect_sentinel(sentinels.master_name(), &sentinels.sentinel_urls())
        .await?;
    let master = sentinels.master().url();
    let clients = vec![
        ("sentinel", via_sentinels),
        ("master url", by_url(&master).await?),
        ("master connection()", on_connection(&master).await?),
    ];
    exercise(clients, "m-sentinel", true, 10).await?;
    Ok(())
}

/// Redlock over three servers: several clients (no fences there).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_clients() -> TestResult {
    let servers: Vec<RedisServer> = (0..3).map(|_| server()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut clients = Vec::new();
    for kind in ["redlock a", "redlock b", "redlock (release_all)"] {
        clients.push((kind, Client::connect_many(&urls).await?));
    }
    exercise(clients, "m-redlock", false, 8).await?;
    Ok(())
}
