//! Fault-matrix rows for every lock kind besides the mutex (see
//! RELIABILITY.md): the fair lock, the read-write lock, the semaphore, the
//! multi-lock and the leader election, each under dropped replies,
//! connection resets, a Redis crash and restart with AOF `always`, and a
//! Redis Cluster failover. One workload, parametrised over the primitive;
//! the verdicts are the testkit's checkers: no overlapping holds (multi-lock:
//! on any of its names; election: leaderships), no writer overlapping
//! anyone (read-write), never more than N holders (semaphore). Grants in
//! queue order are not judged here: a waiter whose grant reply is lost
//! does not know it holds the lock, its grant runs out unused and it queues
//! again at the end, legitimately served after later arrivals (the order is
//! judged without faults by `dlm check lock --primitive fair` and the fair
//! lock's own tests).
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TestResult, ttl};
use dlm::{Client, Error};
use dlm_testkit::history::{
    Clock, Hold, PermitHold, RwHold, over_capacity, overlapping_holds, writer_overlaps,
};
use dlm_testkit::linearizable::{
    LockAction, LockModel, LockOp, LockResult, Mode, OpLog, check_locks,
};
use dlm_testkit::{Cluster, FaultProxy, RedisServer};

/// The primitives under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fair,
    Rw,
    Semaphore,
    Multi,
    Election,
}

const KINDS: [Kind; 5] = [
    Kind::Fair,
    Kind::Rw,
    Kind::Semaphore,
    Kind::Multi,
    Kind::Election,
];

/// The semaphore's capacity in these rows.
const PERMITS: u32 = 2;

/// One believed hold: of `lock` (a multi-lock records one per name).
#[derive(Debug, Clone)]
struct Rec {
    hold: Hold,
    exclusive: bool,
}

/// What one acquisition holds.
enum Held {
    Fair(dlm::FairGuard),
    Read(dlm::ReadGuard),
    Write(dlm::WriteGuard),
    Permit(dlm::SemaphoreGuard),
    Multi(dlm::MultiGuard),
    Leader(dlm::Leadership),
}

impl Held {
    fn remaining(&self) -> Duration {
        match self {
            Held::Fair(g) => g.remaining(),
            Held::Read(g) => g.remaining(),
            Held::Write(g) => g.remaining(),
            Held::Permit(g) => g.remaining(),
            Held::Multi(g) => g.remaining(),
            Held::Leader(g) => g.remaining(),
        }
    }

    async fn release(self) -> dlm::Result<()> {
        match self {
            Held::Fair(g) => g.release().await,
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
            Held::Permit(g) => g.release().await,
            Held::Multi(g) => g.release().await,
            Held::Leader(g) => g.resign().await,
        }
    }

    /// The fencing token of each name it holds, in order.
    fn fences(&self) -> Vec<Option<u64>> {
        match self {
            Held::Fair(g) => vec![Some(g.fence().get())],
            Held::Read(g) => vec![Some(g.fence().get())],
            Held::Write(g) => vec![Some(g.fence().get())],
            Held::Permit(g) => vec![Some(g.fence().get())],
            Held::Multi(g) => g
                .fences()
                .into_iter()
                .map(|f| f.map(dlm::Fence::get))
                .collect(),
            Held::Leader(g) => vec![Some(g.term().get())],
        }
    }
}

impl Kind {
    /// The specification the third-party checker judges this kind by.
    fn model(self) -> LockModel {
        match self {
            Kind::Rw => LockModel::ReadWrite,
            Kind::Semaphore => LockModel::Semaphore { permits: PERMITS },
            Kind::Fair | Kind::Multi | Kind::Election => LockModel::Mutex,
        }
    }

    /// How acquisition `round` of client `id` holds: exclusive or shared.
    fn mode(self, round: u64) -> Mode {
        match self {
            Kind::Rw if !round.is_multiple_of(3) => Mode::Shared,
            Kind::Semaphore => Mode::Shared,
            _ => Mode::Exclusive,
        }
    }

    /// The names acquisition `round` of client `id` takes (a multi-lock:
    /// two of three names, overlapping between clients).
    fn names(self, id: usize, round: u64) -> Vec<&'static str> {
        match self {
            Kind::Fair => vec!["m:fair"],
            Kind::Rw => vec!["m:rw"],
            Kind::Semaphore => vec!["m:sem"],
            Kind::Multi => {
                [["m:a", "m:b"], ["m:b", "m:c"], ["m:c", "m:a"]][(id + round as usize) % 3].to_vec()
            }
            Kind::Election => vec!["m:elect"],
        }
    }
}

/// The names one acquisition of `kind` by client `id` holds (a multi-lock:
/// two of three names, overlapping between clients), and whether it is
/// exclusive.
async fn acquire(
    kind: Kind,
    c: &Client,
    id: usize,
    round: u64,
) -> dlm::Result<(Held, Vec<String>, bool)> {
    let opts = ttl(1000).wait(Duration::from_secs(3));
    let one = |n: &str| vec![n.to_string()];
    Ok(match kind {
        Kind::Fair => (
            Held::Fair(c.fair_lock("m:fair").acquire(&opts).await?),
            one("m:fair"),
            true,
        ),
        Kind::Rw if round.is_multiple_of(3) => (
            Held::Write(c.rwlock("m:rw").write(&opts).await?),
            one("m:rw"),
            true,
        ),
        Kind::Rw => (
            Held::Read(c.rwlock("m:rw").read(&opts).await?),
            one("m:rw"),
            false,
        ),
        Kind::Semaphore => {
            let sem = c.semaphore("m:sem", PERMITS);
            (
                Held::Permit(sem.acquire(1, &opts).await?),
                one("m:sem"),
                false,
            )
        }
        Kind::Multi => {
            let names = [["m:a", "m:b"], ["m:b", "m:c"], ["m:c", "m:a"]][(id + round as usize) % 3];
            let g = c.multi_lock(names)?.acquire(&opts).await?;
            (
                Held::Multi(g),
                names.iter().map(|n| n.to_string()).collect(),
                true,
            )
        }
        Kind::Election => {
            let me = format!("c{id}");
            let g = c.election("m:elect").campaign(&me, &opts).await?;
            (Held::Leader(g), one("m:elect"), true)
        }
    })
}

/// `clients` take turns on `kind` for `run`: holds of 1-10 ms. Returns the
/// believed holds, every invocation and completion, and the errors.
async fn workload(kind: Kind, clients: &[Client], run: Duration) -> (Vec<Rec>, Vec<LockOp>, u64) {
    let clock = Clock::new();
    let log = Arc::new(OpLog::new(clock));
    let recs = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let end = clock.now() + run;
    let mut tasks = Vec::new();
    for (id, c) in clients.iter().enumerate() {
        let (c, recs, errors, log) = (c.clone(), recs.clone(), errors.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            let mut round = 0u64;
            while clock.now() < end {
                round += 1;
                let lease = log.next_id();
                let action = LockAction::Acquire {
                    mode: kind.mode(round),
                    ttl: Duration::from_millis(1000),
                };
                let invoke = clock.now();
                let r = acquire(kind, &c, id, round).await;
                let names = kind.names(id, round);
                let results: Vec<LockResult> = match &r {
                    Ok((held, _, _)) => held
                        .fences()
                        .into_iter()
                        .map(|fence| LockResult::Granted { fence })
                        .collect(),
                    Err(e) => vec![common::lin::not_acquired(e); names.len()],
                };
                for (name, got) in names.into_iter().zip(results) {
                    log.lock(id, name, lease, action, invoke, got);
                }
                match r {
                    Ok((held, names, exclusive)) => {
                        let from = clock.now();
                        let believed = from + held.remaining();
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(1..10))).await;
                        let until = clock.now().min(believed);
                        let invoke = clock.now();
                        let r = held.release().await;
                        for name in &names {
                            let released = common::lin::settled(&r);
                            log.lock(id, name, lease, LockAction::Release, invoke, released);
                        }
                        if let Ok(mut r) = recs.lock() {
                            for lock in names {
                                r.push(Rec {
                                    hold: Hold {
                                        holder: id,
                                        lock,
                                        from,
                                        until,
                                        fence: None,
                                    },
                                    exclusive,
                                });
                            }
                        }
                    }
                    Err(Error::Busy { .. } | Error::NoPermits { .. }) => {}
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let recs = recs.lock().map(|r| r.clone()).unwrap_or_default();
    (
        recs,
        log.ops(),
        errors.load(std::sync::atomic::Ordering::Relaxed),
    )
}

/// The violations the checker of `kind` finds in `recs`.
fn violations(kind: Kind, recs: &[Rec]) -> Vec<String> {
    let holds: Vec<Hold> = recs.iter().map(|r| r.hold.clone()).collect();
    match kind {
        Kind::Rw => {
            let rw: Vec<RwHold> = recs
                .iter()
                .map(|r| RwHold {
                    hold: r.hold.clone(),
                    writer: r.exclusive,
                })
                .collect();
            writer_overlaps(&rw)
                .iter()
                .map(|p| format!("{p:?}"))
                .collect()
        }
        Kind::Semaphore => {
            let permits: Vec<PermitHold> = holds
                .iter()
                .map(|h| PermitHold {
                    holder: h.holder,
                    from: h.from,
                    until: h.until,
                    permits: 1,
                })
                .collect();
            over_capacity(&permits, PERMITS)
                .iter()
                .map(|h| format!("{h:?}"))
                .collect()
        }
        _ => overlapping_holds(&holds)
            .iter()
            .map(|p| format!("{p:?}"))
            .collect(),
    }
}

/// The row's verdict for one primitive, printed as a matrix row.
fn judge(
    kind: Kind,
    fault: &str,
    run: Duration,
    (recs, ops, errors): &(Vec<Rec>, Vec<LockOp>, u64),
) -> TestResult {
    let found = violations(kind, recs);
    let row = format!("{fault}, {kind:?}");
    let verdict = check_locks(kind.model(), ops);
    let judged = common::lin::agree(&row, found.len(), &verdict);
    let checker = match kind {
        Kind::Fair => "overlaps",
        Kind::Rw => "writer overlaps",
        Kind::Semaphore => "holders beyond 2 permits",
        Kind::Multi => "overlaps on any name",
        Kind::Election => "two leaders at once",
    };
    common::matrix_row(
        &row,
        &format!("3 clients, 1 s leases, holds of 1-10 ms, {run:?}"),
        fault,
        &format!("{checker}: {judged}"),
        &format!("{} holds, {errors} errors", recs.len()),
    );
    assert!(found.is_empty(), "{kind:?} under {fault}: {found:?}");
    assert!(
        recs.len() > 10,
        "{kind:?} kept working under {fault}: {}",
        recs.len()
    );
    Ok(())
}

async fn client_on(url: &str) -> Result<Client, Error> {
    Client::builder()
        .timeout(Duration::from_millis(500))
        .connect(url)
        .await
}

/// Three clients, each through a proxy of its own in front of `server`.
async fn proxied(
    server: &RedisServer,
    seed: u64,
) -> Result<(Vec<Client>, Vec<FaultProxy>), Box<dyn std::error::Error + Send + Sync>> {
    let mut clients = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..3 {
        let p = FaultProxy::in_front_of(server, seed + i)?;
        clients.push(client_on(&p.url()).await?);
        proxies.push(p);
    }
    Ok((clients, proxies))
}

/// Rows "dropped replies": every 300 ms, one client's replies are dropped
/// for 40 ms (its calls time out; the scripts ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_survives_dropped_replies() -> TestResult {
    let server = RedisServer::start()?;
    for (i, kind) in KINDS.into_iter().enumerate() {
        let (clients, proxies) = proxied(&server, 100 + 10 * i as u64).await?;
        let run = common::row_duration(Duration::from_millis(1500));
        let stop = dlm::CancellationToken::new();
        let dropper = {
            let (stop, proxies) = (stop.clone(), Arc::new(proxies));
            let p = proxies.clone();
            (
                tokio::spawn(async move {
                    let mut k = 0usize;
                    while !stop.is_cancelled() {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        let proxy = &p[k % p.len()];
                        proxy.set_drop_replies(true);
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        proxy.set_drop_replies(false);
                        k += 1;
                    }
                }),
                proxies,
            )
        };
        let recorded = workload(kind, &clients, run).await;
        stop.cancel();
        let _ = dropper.0.await;
        judge(
            kind,
            "replies dropped for 40 ms every 300 ms",
            run,
            &recorded,
        )?;
    }
    Ok(())
}

/// Rows "connection resets": every connection is reset after 12 KB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_survives_connection_resets() -> TestResult {
    let server = RedisServer::start()?;
    for (i, kind) in KINDS.into_iter().enumerate() {
        let (clients, proxies) = proxied(&server, 200 + 10 * i as u64).await?;
        for p in &proxies {
            p.set_reset_after(Some(12 * 1024));
        }
        let run = common::row_duration(Duration::from_millis(1500));
        let recorded = workload(kind, &clients, run).await;
        let resets: u64 = proxies.iter().map(|p| p.stats().resets).sum();
        assert!(resets > 0, "{kind:?}: the fault happened");
        judge(kind, "each connection reset after 12 KB", run, &recorded)?;
    }
    Ok(())
}

/// Rows "Redis crash and restart, AOF always": SIGKILL and restart in the
/// middle of the workload; with `appendfsync always` every grant survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_survives_a_redis_restart_with_aof() -> TestResult {
    let mut server = Some(RedisServer::builder().aof(true).start()?);
    for kind in KINDS {
        let url = server.as_ref().ok_or("server")?.url();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(client_on(&url).await?);
        }
        let run = common::row_duration(Duration::from_millis(2000));
        let taken = server.take().ok_or("server")?;
        let crash = tokio::spawn(async move {
            tokio::time::sleep(run / 2).await;
            tokio::task::spawn_blocking(move || {
                let mut s = taken;
                s.restart().map(|()| s)
            })
            .await
        });
        let recorded = workload(kind, &clients, run).await;
        server = Some(crash.await???);
        judge(
            kind,
            "SIGKILL and restart of Redis (AOF always)",
            run,
            &recorded,
        )?;
    }
    Ok(())
}

/// Rows "Redis Cluster failover": `CLUSTER FAILOVER` of the primitive's
/// slot (the multi-lock: of one of its names') in the middle of the workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_survives_a_cluster_failover() -> TestResult {
    let cluster = Arc::new(Cluster::start()?);
    for kind in KINDS {
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(
                Client::builder()
                    .timeout(Duration::from_secs(1))
                    .connect_cluster(&cluster.urls())
                    .await?,
            );
        }
        let tag = match kind {
            Kind::Fair => "m:fair",
            Kind::Rw => "m:rw",
            Kind::Semaphore => "m:sem",
            Kind::Multi => "m:b",
            Kind::Election => "m:elect",
        };
        let slot = dlm_testkit::key_slot(&format!("{{{tag}}}"));
        let run = common::row_duration(Duration::from_millis(2500));
        let c = cluster.clone();
        let failover = tokio::spawn(async move {
            tokio::time::sleep(run / 3).await;
            tokio::task::spawn_blocking(move || c.failover(slot)).await
        });
        let recorded = workload(kind, &clients, run).await;
        failover.await???;
        judge(kind, "CLUSTER FAILOVER of its slot", run, &recorded)?;
    }
    Ok(())
}
