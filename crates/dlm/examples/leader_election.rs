//! Leader election (`client.election`): one leader among N processes, with
//! its term passed as a fence to everything the leader writes.
//!
//! The pattern:
//!
//! 1. Every candidate campaigns with `client.election("leader")
//!    .campaign(id, &opts)`: whoever is elected leads, and the watchdog keeps
//!    the leadership's lease alive while the process is healthy. If the
//!    process dies, the lease runs out after one TTL and another candidate
//!    takes over; a leader that steps down (`resign()`) wakes the waiting
//!    candidates at once.
//! 2. The leader's **term** (`leadership.term()`) grows with every new
//!    leader. The leader passes it to **every write** it makes
//!    (`Client::fenced_write` here; a database column compared in the
//!    `UPDATE`'s `WHERE` works the same), so storage refuses a write from an
//!    old leader that still believes it leads (a GC pause, a partition, a
//!    process that was declared dead but was not). Without the term, two
//!    leaders can write at once for a moment, and no election alone can
//!    prevent it.
//! 3. The leader stops leading as soon as `leadership.lost()` fires (or
//!    `is_lost()` is true): the watchdog could not renew in time. Anyone can
//!    ask `election.leader()` who leads, in which term, for how long yet.
//!
//! Here three candidates (each its own `Client`, standing in for three
//! processes) run three terms: the first leader steps down, the second
//! "crashes" (stops renewing without releasing, so the others wait for its
//! lease to run out) and then wakes up as a zombie whose write is refused,
//! and the third steps down. Each term is printed with its fence.
//!
//! Run: `cargo run -p dlm --example leader_election [REDIS_URL]`
//! (or set `DLM_REDIS_URL`; without either it starts a private redis-server).
mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlm::{Client, Error, Fence, LockOptions};

const CANDIDATES: usize = 3;
const TERMS: u32 = 3;
/// The term whose leader crashes instead of stepping down.
const CRASHING_TERM: u32 = 2;
const RESOURCE: &str = "example:leader-state";

#[derive(Default)]
struct Shared {
    terms: AtomicU32,
    /// (term, candidate, fence)
    log: Mutex<Vec<(u32, usize, Fence)>>,
    zombie_refused: AtomicBool,
}

#[tokio::main]
async fn main() -> Result<(), common::BoxError> {
    let servers = common::servers(1)?;
    let shared = Arc::new(Shared::default());
    let mut candidates = tokio::task::JoinSet::new();
    for id in 0..CANDIDATES {
        // One client per candidate: as if each were its own process.
        let client = Client::connect(servers.url()).await?;
        candidates.spawn(candidate(id, client, shared.clone()));
    }
    while let Some(done) = candidates.join_next().await {
        done??;
    }

    let log = shared.log.lock().map_err(|_| "poisoned")?.clone();
    let reader = Client::connect(servers.url()).await?;
    let (fence, value) = reader
        .fenced_read(RESOURCE)
        .await?
        .ok_or("the leader state was written")?;
    println!(
        "final state {:?} written with fence {fence}",
        String::from_utf8_lossy(&value)
    );
    for (term, id, fence) in &log {
        println!("term {term}: candidate {id}, fence {fence}");
    }
    let fences_increase = log.windows(2).all(|w| w[0].0 < w[1].0 && w[0].2 < w[1].2);
    let last = log.last().ok_or("no term")?;
    if log.len() != TERMS as usize
        || !fences_increase
        || fence != last.2
        || !shared.zombie_refused.load(Ordering::SeqCst)
    {
        return Err("leader election check failed".into());
    }
    println!("ok");
    Ok(())
}

async fn candidate(id: usize, client: Client, shared: Arc<Shared>) -> Result<(), common::BoxError> {
    let opts = LockOptions::new(Duration::from_millis(600))
        .wait(Duration::from_millis(300))
        .watchdog(true);
    loop {
        if shared.terms.load(Ordering::SeqCst) >= TERMS {
            return Ok(());
        }
        let me = format!("candidate-{id}");
        let guard = match client.election("example:leader").campaign(&me, &opts).await {
            Ok(g) => g,
            Err(Error::Busy { .. }) => continue, // somebody leads; keep campaigning
            Err(e) => return Err(e.into()),
        };
        let term = shared.terms.fetch_add(1, Ordering::SeqCst) + 1;
        if term > TERMS {
            guard.resign().await?;
            return Ok(());
        }
        let fence = guard.term();
        let leader = client.election("example:leader").leader().await?;
        if leader.as_ref().map(|l| l.id.as_str()) != Some(me.as_str()) {
            return Err("leader() names another leader".into());
        }
        shared
            .log
            .lock()
            .map_err(|_| "poisoned")?
            .push((term, id, fence));
        println!("term {term}: candidate {id} leads with term {fence} (its fence)");

        // Lead: every write carries the fence. Hold longer than the TTL;
        // the watchdog renews the lease, and a lost lease ends the term.
        for tick in 1..=4 {
            if guard.is_lost() {
                println!("term {term}: candidate {id} lost the lease; stops leading");
                break;
            }
            let state = format!("leader={id} term={term} tick={tick}");
            client.fenced_write(RESOURCE, fence, &state).await?;
            println!("  candidate {id} wrote {state:?} with fence {fence}: accepted");
            tokio::select! {
                _ = guard.lost() => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }

        if term == CRASHING_TERM {
            // Crash: no release and no more renewals (as if the process
            // froze); the lease runs out after its TTL and another takes over.
            let _ = guard.detach();
            println!("term {term}: candidate {id} freezes without releasing");
            // It wakes up once a newer leader has written, still believing it
            // leads, and writes with its old fence: storage refuses it.
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Some((newest, _)) = client.fenced_read(RESOURCE).await?
                    && newest > fence
                {
                    break;
                }
            }
            match client
                .fenced_write(RESOURCE, fence, format!("leader={id} term={term} (zombie)"))
                .await
            {
                Err(Error::StaleFence { given, highest, .. }) => {
                    println!(
                        "  zombie candidate {id} wrote with fence {given}: refused, fence {highest} leads now"
                    );
                    shared.zombie_refused.store(true, Ordering::SeqCst);
                }
                Ok(()) => return Err("a deposed leader's write was accepted".into()),
                Err(e) => return Err(e.into()),
            }
            return Ok(()); // a crashed process does not campaign again
        }

        guard.resign().await?;
        println!("term {term}: candidate {id} steps down");
        // Give the others a chance before campaigning again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
