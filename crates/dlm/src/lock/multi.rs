//! The multi-lock: several named locks taken all or none, held under one
//! guard.
//!
//! When every key lives in one hash slot (always on one server; on a Redis
//! Cluster when the names share a hash tag) one script takes them all or
//! none (`acquire_all.lua`). Otherwise (a cluster with names in several
//! slots, or Redlock) the locks are taken one by one in one global order
//! (sorted by key), each with the mutex's own acquire, and those already
//! taken are released when one cannot be had in time: two clients locking
//! {A, B} and {B, A} both start with A, so neither can hold one while
//! waiting for the other's (no deadlock).

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Script, Value};
use tokio::time::Instant;

use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::keys::{LockKeys, slot};
use crate::lock::guard::LockGuard;
use crate::lock::locks::Locks;
use crate::lock::nodes::Grant;
use crate::lock::{Lock, waiters_marker};
use crate::services::jittered;
use crate::services::lease::{LostSignal, drift};
use crate::services::options::LockOptions;
use crate::services::wakeups as wait;
use crate::token::{Fence, Token};

static ACQUIRE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/fence.lua"),
        include_str!("scripts/acquire_all.lua")
    ))
});

/// The multi-lock's script.
pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&ACQUIRE_ALL]
}

/// The most locks one multi-lock takes.
pub const MAX_MULTI_LOCK: usize = 64;

/// Several named locks taken all or none, under one guard; cheap to clone.
/// Get one from [`crate::Client::multi_lock`].
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// use std::time::Duration;
/// let accounts = client.multi_lock(["account:7", "account:9"])?;
/// let opts = dlm::LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(2));
/// let guard = accounts.acquire(&opts).await?;   // both, or Err(Busy) naming the one held
/// println!("fences {:?}", guard.fences());
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Safety
/// Each lock is exactly a [`Lock`] (same keys, tokens, fences, TTLs and
/// Safety section): the multi-lock adds all-or-none acquisition, not a
/// stronger guarantee. On one slot, no other client ever sees some of the
/// locks taken and others not. Across slots (the ordered path) a client
/// may briefly hold some of them while it waits for the next; the global
/// order rules out deadlock, and the deadline bounds the wait. The guard is
/// lost as soon as any one of its locks is.
#[derive(Debug, Clone)]
pub struct MultiLock {
    locks: Arc<Locks>,
    names: Vec<Arc<str>>,
}

/// Proof of holding every lock of a [`MultiLock`]: one [`LockGuard`] per
/// name, in the order the names were given. Dropping it releases them all
/// in the background; each lock's watchdog (if asked for) renews it.
///
/// ```no_run
/// # async fn demo(guard: dlm::MultiGuard) -> dlm::Result<()> {
/// tokio::select! {
///     _ = guard.lost() => eprintln!("one of the locks was lost"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases its locks in the background at once"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiLock {
    pub(crate) fn new(locks: Arc<Locks>, names: Vec<String>) -> Result<Self> {
        if names.is_empty() || names.len() > MAX_MULTI_LOCK {
            return Err(Error::invalid(
                "lock names",
                format!(
                    "{} names: a multi-lock takes 1 ..= {MAX_MULTI_LOCK}",
                    names.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for name in &names {
            locks.lock_keys(name, false)?;
            if !seen.insert(name.as_str()) {
                return Err(Error::invalid(
                    "lock names",
                    format!("{name:?} is given twice"),
                ));
            }
        }
        Ok(MultiLock {
            locks,
            names: names.into_iter().map(Into::into).collect(),
        })
    }

    /// The names, in the order given.
    pub fn names(&self) -> Vec<&str> {
        self.names.iter().map(|n| &**n).collect()
    }

    fn keys(&self) -> Result<Vec<Arc<LockKeys>>> {
        self.names
            .iter()
            .map(|n| self.locks.lock_keys(n, false).map(Arc::new))
            .collect()
    }

    /// Acquire every lock, waiting up to `opts.wait` for all of them (the
    /// TTL, watchdog and retry interval apply to each lock).
    ///
    /// Fails with [`Error::Busy`] naming a lock that was held when the
    /// deadline passed (nothing stays taken), [`Error::InvalidArgument`] for
    /// bad options, and [`Error::Unavailable`] / [`Error::Timeout`] when
    /// Redis stayed unreachable.
    pub async fn acquire(&self, opts: &LockOptions) -> Result<MultiGuard> {
        opts.validate()?;
        self.locks.nodes.check_ttl(opts.ttl, opts.node_timeout)?;
        self.keys()?;
        self.locks.prepare().await?;
        let keys = self.keys()?;
        match self.locks.nodes.single() {
            Some(b)
                if !b.batch_by_slot()
                    || keys.iter().all(|k| slot(&k.lock) == slot(&keys[0].lock)) =>
            {
                let b = b.clone();
                self.acquire_in_one_script(&b, keys, opts).await
            }
            _ => self.acquire_in_order(&keys, opts).await,
        }
    }

    fn lock(&self, i: usize) -> Lock {
        Lock::new(self.locks.clone(), self.names[i].to_string())
    }

    /// One slot: one script takes all or none; wait on the busy lock's channel.
    async fn acquire_in_one_script(
        &self,
        backend: &Backend,
        keys: Vec<Arc<LockKeys>>,
        opts: &LockOptions,
    ) -> Result<MultiGuard> {
        let token = Token::random()?;
        let deadline = Instant::now() + opts.wait;
        let mut pending = Pending {
            parts: self
                .names
                .iter()
                .zip(&keys)
                .map(|(n, k)| (n.clone(), k.clone()))
                .collect(),
            locks: self.locks.clone(),
            token: token.clone(),
            armed: false,
        };
        let mut waiter: Option<(usize, wait::Waiter)> = None;
        let marker = waiters_marker(opts, self.locks.wakeups.is_some());
        loop {
            let started = Instant::now();
            pending.armed = true;
            let (err, hint, busy) =
                match acquire_all(backend, &keys, &token, opts.ttl, marker).await {
                    Ok(AllOrNone::Acquired(fences)) => {
                        pending.armed = false;
                        let valid_until = started + opts.ttl.saturating_sub(drift(opts.ttl));
                        let guards = fences
                            .into_iter()
                            .enumerate()
                            .map(|(i, fence)| {
                                let grant = Grant {
                                    fence: Some(fence),
                                    valid_until,
                                };
                                self.lock(i)
                                    .guard(keys[i].clone(), token.clone(), grant, opts)
                            })
                            .collect();
                        return Ok(MultiGuard { guards });
                    }
                    Ok(AllOrNone::Busy { index, ttl }) => {
                        pending.armed = false;
                        let e = Error::Busy {
                            name: self.names[index].to_string(),
                            ttl,
                        };
                        (e, ttl, Some(index))
                    }
                    Err(e) if e.is_retryable() => (e, None, None),
                    Err(e) => return Err(e),
                };
            let now = Instant::now();
            if now >= deadline {
                return Err(err);
            }
            // Wait on the channel of the lock found busy.
            if let (Some(i), Some(w)) = (busy, &self.locks.wakeups)
                && waiter.as_ref().is_none_or(|(j, _)| *j != i)
            {
                let w = w.register(&keys[i].channel);
                let left = deadline.saturating_duration_since(now);
                let _ = tokio::time::timeout(left, w.ensure_subscribed()).await;
                waiter = Some((i, w));
                continue;
            }
            let mut pause = jittered(opts.retry_interval);
            if let Some(t) = hint {
                pause = pause.min(t + Duration::from_millis(1));
            }
            let until = (now + pause).min(deadline);
            match &waiter {
                Some((_, w)) => {
                    let notify = w.notify();
                    tokio::select! {
                        _ = notify.notified() => {}
                        _ = tokio::time::sleep_until(until) => {}
                    }
                }
                None => tokio::time::sleep_until(until).await,
            }
        }
    }

    /// Several slots or Redlock: one by one in key order, each with the
    /// mutex's acquire; all given back when one cannot be had in time.
    async fn acquire_in_order(
        &self,
        keys: &[Arc<LockKeys>],
        opts: &LockOptions,
    ) -> Result<MultiGuard> {
        let deadline = Instant::now() + opts.wait;
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by(|&a, &b| keys[a].lock.cmp(&keys[b].lock));
        loop {
            let mut held: Vec<(usize, LockGuard)> = Vec::with_capacity(order.len());
            for &i in &order {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.lock(i).acquire(&opts.clone().wait(left)).await {
                    Ok(g) => held.push((i, g)),
                    Err(e) => {
                        let _ = release_all(held.into_iter().map(|(_, g)| g)).await;
                        return Err(e);
                    }
                }
            }
            held.sort_by_key(|(i, _)| *i);
            let guard = MultiGuard {
                guards: held.into_iter().map(|(_, g)| g).collect(),
            };
            // A lock taken early may have run out while later ones were awaited.
            if !guard.is_lost() {
                return Ok(guard);
            }
            let _ = guard.release().await;
            if Instant::now() >= deadline {
                return Err(Error::Busy {
                    name: self
                        .names
                        .first()
                        .map_or_else(String::new, |n| n.to_string()),
                    ttl: None,
                });
            }
        }
    }
}

/// Give back every guard at once (concurrent releases share one script call
/// through the batcher); the first error, if any.
async fn release_all(guards: impl Iterator<Item = LockGuard>) -> Result<()> {
    let results = join_all(guards.map(LockGuard::release)).await;
    results.into_iter().try_for_each(|r| r.map(|_| ()))
}

impl MultiGuard {
    /// The names, in the order given.
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::name).collect()
    }

    /// Each lock's fencing token, in the order the names were given (`None`
    /// under Redlock).
    pub fn fences(&self) -> Vec<Option<Fence>> {
        self.guards.iter().map(LockGuard::fence).collect()
    }

    /// The guards of the single locks, in the order the names were given.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The shortest time left on any of the leases (zero once one is lost).
    pub fn remaining(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::remaining)
            .min()
            .unwrap_or_default()
    }

    /// True once any one of the locks is lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Completes as soon as any one of the locks is lost.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        any_lost(self.lost_signals())
    }

    /// Each lock's "lost" signal, to move into other tasks (see
    /// [`any_lost`] to wait for the first).
    pub fn lost_signals(&self) -> Vec<LostSignal> {
        self.guards.iter().map(LockGuard::lost_signal).collect()
    }

    /// Release every lock (concurrently): `Ok` when all were still ours,
    /// else the first error ([`Error::Expired`] or [`Error::NotHeld`]
    /// naming that lock); the others are released either way.
    pub async fn release(self) -> Result<()> {
        release_all(self.guards.into_iter()).await
    }
}

/// Completes as soon as any of `signals` reports its lease lost (never, for
/// none).
///
/// ```no_run
/// # async fn demo(guard: dlm::MultiGuard) {
/// let signals = guard.lost_signals();
/// tokio::spawn(async move { dlm::any_lost(signals).await; eprintln!("lost") });
/// # }
/// ```
pub async fn any_lost(signals: Vec<LostSignal>) {
    if signals.is_empty() {
        return std::future::pending().await;
    }
    let waits = signals.iter().map(|s| Box::pin(s.lost()));
    futures_util::future::select_all(waits).await;
}

/// The tokens of a one-script attempt that may be stored without our
/// knowing: released in the background if the attempt is dropped.
struct Pending {
    parts: Vec<(Arc<str>, Arc<LockKeys>)>,
    locks: Arc<Locks>,
    token: Token,
    armed: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (locks, token, parts) = (
                self.locks.clone(),
                self.token.clone(),
                std::mem::take(&mut self.parts),
            );
            rt.spawn(self.locks.background.clone().track_future(async move {
                let releases = parts
                    .iter()
                    .map(|(name, keys)| locks.nodes.release(name, keys, &token));
                join_all(releases).await;
            }));
        }
    }
}

/// What one all-or-none attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AllOrNone {
    Acquired(Vec<Fence>),
    /// Lock `index` is held by another owner (its TTL; `None`: no expiry).
    Busy {
        index: usize,
        ttl: Option<Duration>,
    },
}

async fn acquire_all(
    backend: &Backend,
    keys: &[Arc<LockKeys>],
    token: &Token,
    ttl: Duration,
    marker: Duration,
) -> Result<AllOrNone> {
    let mut inv = ACQUIRE_ALL.prepare_invoke();
    for k in keys {
        inv.key(&k.lock).key(&k.fence).key(&k.waiters);
    }
    inv.arg(token.as_str()).arg(millis(ttl)).arg(millis(marker));
    acquire_all_reply(backend.eval(&inv).await?, keys.len())
}

/// acquire_all.lua: `{1, fences...}` or `{0, i, pttl}`.
fn acquire_all_reply(v: Value, n: usize) -> Result<AllOrNone> {
    let codes: Vec<i64> = redis::from_redis_value(v)?;
    match codes.as_slice() {
        [1, fences @ ..] if fences.len() == n => fences
            .iter()
            .map(|&f| {
                u64::try_from(f)
                    .map(Fence::new)
                    .map_err(|_| Error::protocol(format!("negative fencing counter {f}")))
            })
            .collect::<Result<Vec<_>>>()
            .map(AllOrNone::Acquired),
        [0, i, pttl] => {
            let index = usize::try_from(*i)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .filter(|i| *i < n)
                .ok_or_else(|| Error::protocol(format!("acquire_all named lock {i} of {n}")))?;
            Ok(AllOrNone::Busy {
                index,
                ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            })
        }
        other => Err(Error::protocol(format!(
            "unexpected acquire_all reply {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    const DECODERS: &[Decoder] = &[
        ("acquire_all(2)", |v| acquire_all_reply(v, 2).is_ok()),
        ("acquire_all(0)", |v| acquire_all_reply(v, 0).is_ok()),
    ];

    decoder_tests!(fuzz_multi_lock_replies, DECODERS);

    #[test]
    fn busy_index_is_checked() {
        let arr = |v: &[i64]| Value::Array(v.iter().map(|n| Value::Int(*n)).collect());
        assert!(acquire_all_reply(arr(&[0, 3, 5]), 2).is_err());
        assert!(acquire_all_reply(arr(&[0, 0, 5]), 2).is_err());
        assert_eq!(
            acquire_all_reply(arr(&[0, 2, -1]), 2).ok(),
            Some(AllOrNone::Busy {
                index: 1,
                ttl: None
            })
        );
        assert_eq!(
            acquire_all_reply(arr(&[1, 4, 5]), 2).ok(),
            Some(AllOrNone::Acquired(vec![Fence::new(4), Fence::new(5)]))
        );
    }
}
