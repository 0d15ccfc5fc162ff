//! The library's lock clients: one loop per client and kind, recording
//! every operation and every believed-held interval.

use std::sync::Arc;
use std::time::Duration;

use dlm_testkit::history::Hold;

use super::lin::{LockAction, LockOp, LockResult, Mode};
use super::record::{Kind, PERMITS, Recorder};
use crate::held::{Held, hold_time};
use crate::rng::SplitMix;

/// The lease of the library's acquisitions, how long an acquire waits,
/// and what the deployment needs.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    /// TTL of every acquisition.
    pub ttl: Duration,
    /// How long an acquire may wait.
    pub wait: Duration,
    /// The deployment's tag in lock names ("" for the standalone server).
    pub tag: &'static str,
    /// Count a grant only once this many replicas have it
    /// (`LockOptions::replicas`): behind Sentinel, whose failover kills the
    /// master.
    pub replicas: Option<u64>,
    /// Extend leases now and then (not behind Sentinel: an extension is
    /// not replicated before it is acknowledged, so a failover may lose it,
    /// which breaks assumption 1).
    pub extends: bool,
}

/// One acquisition of `kind` (a writer when `write`).
async fn acquire(
    client: &dlm::Client,
    kind: Kind,
    name: &str,
    me: &str,
    write: bool,
    lease: Lease,
) -> dlm::Result<Held> {
    let mut opts = dlm::LockOptions::new(lease.ttl).wait(lease.wait);
    if let Some(n) = lease.replicas {
        opts = opts.replicas(n, Duration::from_millis(300));
    }
    Ok(match kind {
        Kind::Mutex => Held::Mutex(client.lock(name).acquire(&opts).await?),
        Kind::Fair => Held::Fair(client.fair_lock(name).acquire(&opts).await?),
        Kind::Rw if write => Held::Write(client.rwlock(name).write(&opts).await?),
        Kind::Rw => Held::Read(client.rwlock(name).read(&opts).await?),
        Kind::Semaphore => Held::Permit(client.semaphore(name, PERMITS).acquire(1, &opts).await?),
        Kind::Election => Held::Leader(client.election(name).campaign(me, &opts).await?),
    })
}

/// How an extend or release ended, for the linearizability checker.
fn settled(r: &dlm::Result<()>) -> LockResult {
    use dlm::Error as E;
    match r {
        Ok(()) => LockResult::Done,
        Err(E::Expired { .. } | E::NotHeld { .. } | E::Lost { .. }) => LockResult::Failed,
        Err(_) => LockResult::Unknown,
    }
}

/// One client's loop on `kind` until the soak stops.
pub async fn run(
    rec: Arc<Recorder>,
    client: dlm::Client,
    kind: Kind,
    client_id: usize,
    label: &'static str,
    seed: u64,
    lease: Lease,
) {
    let mut rng = SplitMix(seed);
    let mut process = rec.process();
    let me = format!("{label}-{client_id}");
    while !rec.stopping() {
        let epoch = rec.epoch();
        let name = rec.lock_name(
            lease.tag,
            kind,
            epoch,
            rng.next() as usize % rec.names_per_kind,
        );
        let id = rec.lease();
        let write = kind == Kind::Rw && rng.next().is_multiple_of(4);
        let mode = match kind {
            Kind::Semaphore => Mode::Shared,
            Kind::Rw if !write => Mode::Shared,
            _ => Mode::Exclusive,
        };
        let op = |process, action, result, invoke, complete| LockOp {
            process,
            lock: name.clone(),
            lease: id,
            action,
            result,
            invoke,
            complete,
        };
        let invoke = rec.clock.now();
        let got = acquire(&client, kind, &name, &me, write, lease).await;
        let complete = rec.clock.now();
        rec.count(kind.label(), label);
        let result = match &got {
            Ok(h) => LockResult::Granted { fence: h.fence() },
            Err(dlm::Error::Busy { .. } | dlm::Error::NoPermits { .. }) => LockResult::Refused,
            Err(_) => LockResult::Unknown,
        };
        let unknown = result == LockResult::Unknown;
        let acquire_action = LockAction::Acquire {
            mode,
            ttl: lease.ttl,
        };
        rec.lock_op(
            kind,
            epoch,
            op(process, acquire_action, result, invoke, complete),
        );
        let held = match got {
            Ok(h) => h,
            Err(_) => {
                if unknown {
                    process = rec.process();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                think(&mut rng).await;
                continue;
            }
        };
        // The lease began no earlier than the call: it ends no earlier than
        // invoke + TTL, and the guard's own clock says the same or less.
        let granted = complete;
        let mut believed = (complete + held.remaining()).min(invoke + lease.ttl);
        tokio::time::sleep(hold_time(&mut rng, lease.ttl)).await;
        if lease.extends && rng.next().is_multiple_of(8) {
            let invoke = rec.clock.now();
            let r = held.extend(lease.ttl).await;
            let complete = rec.clock.now();
            rec.count(kind.label(), label);
            let result = settled(&r);
            if r.is_ok() {
                believed = (complete + held.remaining()).min(invoke + lease.ttl);
            }
            let action = LockAction::Extend { ttl: lease.ttl };
            rec.lock_op(kind, epoch, op(process, action, result, invoke, complete));
            if result == LockResult::Unknown {
                process = rec.process();
            }
            tokio::time::sleep(hold_time(&mut rng, lease.ttl)).await;
        }
        let fence = held.fence();
        let exclusive = held.exclusive();
        let invoke = rec.clock.now();
        let r = held.release().await;
        let complete = rec.clock.now();
        rec.count(kind.label(), label);
        let result = settled(&r);
        rec.lock_op(
            kind,
            epoch,
            op(process, LockAction::Release, result, invoke, complete),
        );
        rec.hold(
            kind,
            epoch,
            Hold {
                holder: client_id,
                lock: name.clone(),
                from: granted,
                until: invoke.min(believed),
                fence,
            },
            exclusive,
        );
        if result == LockResult::Unknown {
            process = rec.process();
        }
        think(&mut rng).await;
    }
}

/// A pause between acquisitions (5-40 ms), so that each history stays
/// a few thousand operations per lock name and epoch.
pub async fn think(rng: &mut SplitMix) {
    tokio::time::sleep(Duration::from_millis(5 + rng.next() % 35)).await;
}
