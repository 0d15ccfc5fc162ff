//! A held lease of a primitive on one Redis (the fair lock, a read share, a
//! write lock): the state every such guard has, and one generic guard that
//! gives them all the mutex's semantics: a fencing token, validity on the
//! monotonic clock, `lost()`, the watchdog, token-checked extend and release,
//! release in the background on drop, and a place in the client's registry.
//!
//! A primitive says what its lease does in Redis through [`Lease`] (release,
//! extend) and [`Renewable`] (the watchdog's batched renewal); the public
//! guard types are thin wrappers around [`Guard`] that [`guard_api!`] gives
//! the same methods.

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Cmd, Script, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{Backend, evalsha, millis};
use crate::error::{Error, Result};
use crate::services::batch::code_of;
use crate::services::lease::{LeaseState, LostSignal, drift};
use crate::services::options::{Outcome, validate_ttl};
use crate::services::registry::Registry;
use crate::services::renew::{Due, Renewable, Renewal, Renewer};
use crate::services::wakeups::Wakeups;
use crate::token::{Fence, Token};

/// Extends leases stored as "key = owner token, PX = lease" (the mutex and
/// the fair lock): the watchdog's batches and single extends.
pub(crate) static EXTEND_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_many.lua")));

/// extend_many.lua's code for one lease.
pub(crate) fn extend_code(code: i64) -> Result<Outcome> {
    match code {
        1 => Ok(Outcome::Done),
        0 => Ok(Outcome::Expired),
        -1 => Ok(Outcome::NotHeld),
        other => Err(Error::protocol(format!("unexpected extend code {other}"))),
    }
}

/// Extend one "key = token" lease to `ttl` from now (one extend_many.lua call).
pub(crate) async fn extend_token(
    backend: &Backend,
    key: &str,
    token: &Token,
    ttl: Duration,
) -> Result<Outcome> {
    let (script, cmd) = extend_token_command(key, token, ttl);
    let codes: Vec<Value> = backend
        .evalsha_within(backend.timeout(), script, &cmd)
        .await?;
    extend_reply(codes, key)
}

/// The one code of an extend_many.lua call for the lease at `key`.
pub(crate) fn extend_reply(codes: Vec<Value>, key: &str) -> Result<Outcome> {
    match <[Value; 1]>::try_from(codes) {
        Ok([code]) => extend_code(code_of(code, key)?),
        Err(_) => Err(Error::protocol("extend_many returned another count")),
    }
}

/// [`extend_token`]'s `EVALSHA`, for a pipeline.
pub(crate) fn extend_token_command(
    key: &str,
    token: &Token,
    ttl: Duration,
) -> (&'static Script, Cmd) {
    let mut cmd = evalsha(&EXTEND_MANY, 1, 2, key.len() + token.as_str().len() + 20);
    cmd.arg(key).arg(token.as_str()).arg(millis(ttl));
    (&EXTEND_MANY, cmd)
}

/// The watchdog's batch of "key = token" leases of one Redis: one
/// extend_many.lua call, a verdict per lease.
pub(crate) async fn renew_tokens<L: Lease>(backend: &Backend, batch: &[Due<L>]) -> Vec<Renewal> {
    let started = Instant::now();
    let mut inv = EXTEND_MANY.prepare_invoke();
    for d in batch {
        inv.key(d.item.key())
            .arg(d.item.core().token.as_str())
            .arg(millis(d.ttl));
    }
    let reply: Result<Vec<Value>> = backend.eval(&inv).await;
    verdicts(batch, reply, started)
}

/// [`Renewable`] for a held lease stored as "key = owner token" (the fair
/// lock, a leadership), renewed by [`renew_tokens`]: `$held` has the fields
/// `core: Core` and `shared: Arc<Shared<$held>>`, and `$key` is the path of
/// its key field (e.g. `keys.lock`).
macro_rules! token_renewable {
    ($held:ty, $($key:ident).+) => {
        impl $crate::services::renew::Renewable for $held {
            fn key(&self) -> &str {
                &self.$($key).+
            }

            fn active(&self) -> bool {
                self.core.active()
            }

            fn by_slot(&self) -> bool {
                self.shared.by_slot()
            }

            async fn renew(
                batch: &[$crate::services::renew::Due<Self>],
            ) -> Vec<$crate::services::renew::Renewal> {
                match $crate::services::held::batch_backend(batch) {
                    Some(backend) => $crate::services::held::renew_tokens(&backend, batch).await,
                    None => vec![$crate::services::renew::Renewal::Lost; batch.len()],
                }
            }
        }
    };
}
pub(crate) use token_renewable;

/// Per lease of `batch`, what a renewal script's reply codes (1 renewed, 0
/// expired, -1 taken) mean; a failed or malformed reply, or a Redis error
/// on one lease alone (a message in place of its code), is retried sooner
/// unless the lease ran out meanwhile.
pub(crate) fn verdicts<L: Lease>(
    batch: &[Due<L>],
    reply: Result<Vec<Value>>,
    started: Instant,
) -> Vec<Renewal> {
    let undecided = |d: &Due<L>| {
        let core = d.item.core();
        if core.lease.is_lost() {
            tracing::warn!(name = %core.name, "lease lost: it ran out while renewals failed");
            Renewal::Lost
        } else {
            Renewal::Retry
        }
    };
    let codes = match reply {
        Ok(codes) if codes.len() == batch.len() => codes,
        other => {
            if let Err(e) = other {
                tracing::debug!(error = %e, "batched renewal failed; retrying sooner");
            }
            return batch.iter().map(undecided).collect();
        }
    };
    batch
        .iter()
        .zip(codes)
        .map(|(d, code)| {
            let core = d.item.core();
            let code = match code_of(code, d.item.key()) {
                Ok(code) => code,
                Err(e) => {
                    tracing::debug!(name = %core.name, error = %e, "renewal failed; retrying sooner");
                    return undecided(d);
                }
            };
            match extend_code(code) {
                Ok(Outcome::Done) => {
                    if core
                        .lease
                        .renewed(started + d.ttl.saturating_sub(drift(d.ttl)))
                    {
                        Renewal::Renewed { sent: started }
                    } else {
                        tracing::warn!(name = %core.name, "lease lost: it ran out before the renewal's reply");
                        Renewal::Lost
                    }
                }
                outcome => {
                    tracing::warn!(name = %core.name, ?outcome, "lease lost: renewal found it gone");
                    core.lease.mark_lost();
                    Renewal::Lost
                }
            }
        })
        .collect()
}

/// What a client keeps for one kind of lease: where it lives and the
/// services its guards use.
pub(crate) struct Shared<L> {
    /// The one Redis; `None` under Redlock (these primitives refuse it).
    pub(crate) backend: Option<Backend>,
    pub(crate) wakeups: Option<Arc<Wakeups>>,
    pub(crate) renewer: Arc<Renewer<L>>,
    pub(crate) registry: Registry<L>,
    /// Releases of dropped guards (the client's tracker: `settle` waits for them).
    pub(crate) background: TaskTracker,
    /// The root of every key (`dlm:`, or the client's key prefix).
    pub(crate) root: Arc<str>,
}

impl<L: Renewable> Shared<L> {
    pub(crate) fn new(
        backend: Option<Backend>,
        wakeups: Option<Arc<Wakeups>>,
        background: TaskTracker,
        root: Arc<str>,
    ) -> Arc<Self> {
        Arc::new(Shared {
            root,
            backend,
            wakeups,
            renewer: Renewer::new(),
            registry: Registry::default(),
            background,
        })
    }

    /// The one Redis, or why this primitive cannot run here.
    pub(crate) fn backend(&self, what: &'static str) -> Result<&Backend> {
        self.backend.as_ref().ok_or_else(|| {
            Error::invalid(
                what,
                "needs one Redis deployment (standalone, Sentinel or Cluster), not Redlock: \
                 its queue and counters must live in one place",
            )
        })
    }
}

impl<L: Send + Sync + 'static> Shared<L> {
    /// The core of a lease granted by a request sent at `started`, with a
    /// fresh registry id.
    pub(crate) fn core(
        &self,
        name: Arc<str>,
        token: Token,
        fence: Fence,
        ttl: Duration,
        started: Instant,
    ) -> Core {
        Core::new(self.registry.next_id(), name, token, fence, ttl, started)
    }

    /// Whether watchdog batches must be grouped by hash slot (a cluster).
    pub(crate) fn by_slot(&self) -> bool {
        self.backend.as_ref().is_some_and(Backend::batch_by_slot)
    }

    /// Run `job` on the one Redis in the background (tracked, so
    /// `Client::settle` waits for it): the clean-up of an acquisition that
    /// gave up or was dropped. Without a runtime, the leases free it.
    pub(crate) fn in_background<F>(&self, job: impl FnOnce(Backend) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let (Ok(rt), Some(backend)) = (tokio::runtime::Handle::try_current(), &self.backend) {
            rt.spawn(self.background.track_future(job(backend.clone())));
        }
    }
}

/// A clean-up job of [`Pending`]: forget an acquisition on the one Redis.
pub(crate) type CancelJob<K> =
    fn(Backend, Arc<K>, Token) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// An acquisition's trace in Redis (a queue entry, a waiting marker, a grant
/// whose reply was lost) that `cancel` forgets in the background when the
/// acquisition gives up or is dropped while armed.
pub(crate) struct Pending<L: Send + Sync + 'static, K: Send + Sync + 'static> {
    pub(crate) shared: Arc<Shared<L>>,
    pub(crate) keys: Arc<K>,
    pub(crate) token: Token,
    pub(crate) armed: bool,
    pub(crate) cancel: CancelJob<K>,
}

impl<L: Send + Sync + 'static, K: Send + Sync + 'static> Pending<L, K> {
    /// Disarmed until the first attempt is sent.
    pub(crate) fn new(
        shared: Arc<Shared<L>>,
        keys: Arc<K>,
        token: Token,
        cancel: CancelJob<K>,
    ) -> Self {
        Pending {
            shared,
            keys,
            token,
            armed: false,
            cancel,
        }
    }
}

impl<L: Send + Sync + 'static, K: Send + Sync + 'static> Drop for Pending<L, K> {
    fn drop(&mut self) {
        if self.armed {
            let (keys, token, cancel) = (self.keys.clone(), self.token.clone(), self.cancel);
            self.shared
                .in_background(move |backend| cancel(backend, keys, token));
        }
    }
}

/// The one Redis a watchdog batch lives on (every lease of a client lives on
/// the client's one Redis); `None` for an empty batch or under Redlock.
pub(crate) fn batch_backend<L: Lease>(batch: &[Due<L>]) -> Option<Backend> {
    batch.first().and_then(|d| d.item.shared().backend.clone())
}

impl<L> std::fmt::Debug for Shared<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("backend", &self.backend.is_some())
            .finish_non_exhaustive()
    }
}

/// The part of a held lease every primitive has.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) id: u64,
    pub(crate) name: Arc<str>,
    pub(crate) token: Token,
    pub(crate) fence: Fence,
    pub(crate) ttl: Duration,
    pub(crate) lease: Arc<LeaseState>,
    pub(crate) stop: CancellationToken,
}

impl Core {
    /// A lease granted by a request sent at `started`.
    pub(crate) fn new(
        id: u64,
        name: Arc<str>,
        token: Token,
        fence: Fence,
        ttl: Duration,
        started: Instant,
    ) -> Self {
        Core {
            id,
            name,
            token,
            fence,
            ttl,
            lease: LeaseState::new(started + ttl.saturating_sub(drift(ttl))),
            stop: CancellationToken::new(),
        }
    }

    /// Still to be renewed: neither released nor known lost.
    pub(crate) fn active(&self) -> bool {
        !self.stop.is_cancelled() && !self.lease.marked_lost()
    }
}

/// A primitive's held lease: what it does in Redis.
pub(crate) trait Lease: Renewable {
    fn core(&self) -> &Core;
    fn shared(&self) -> &Shared<Self>;
    /// Token-checked release (and wake whoever it lets in).
    fn release(&self) -> impl Future<Output = Result<Outcome>> + Send;
    /// Token-checked extend to `ttl` from now.
    fn extend(&self, ttl: Duration) -> impl Future<Output = Result<Outcome>> + Send;
    /// The same extend as one `EVALSHA` of the returned script, replying a
    /// list whose first code is 1 when it extended the lease (for the
    /// replication check's pipeline, `services::replication::confirm`).
    fn extend_command(&self, ttl: Duration) -> (&'static Script, Cmd);
}

/// The guard of a held lease; the public guards wrap it.
pub(crate) struct Guard<L: Lease> {
    held: Arc<L>,
    released: bool,
}

impl<L: Lease> std::fmt::Debug for Guard<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let core = self.held.core();
        f.debug_struct("Guard")
            .field("name", &core.name)
            .field("key", &self.held.key())
            .field("fence", &core.fence)
            .field("remaining", &core.lease.remaining())
            .finish_non_exhaustive()
    }
}

impl<L: Lease> Guard<L> {
    /// Register `held` (and renew it every ttl/3 with `watchdog`).
    pub(crate) fn new(held: Arc<L>, watchdog: bool) -> Self {
        let core = held.core();
        let shared = held.shared();
        shared.registry.register(core.id, &held);
        if watchdog {
            shared.renewer.add(core.id, &held, core.ttl);
        }
        Guard {
            held,
            released: false,
        }
    }

    pub(crate) fn held(&self) -> &Arc<L> {
        &self.held
    }

    pub(crate) fn core(&self) -> &Core {
        self.held.core()
    }

    pub(crate) fn key(&self) -> &str {
        self.held.key()
    }

    pub(crate) fn lost_signal(&self) -> LostSignal {
        LostSignal::new(self.core().lease.clone())
    }

    pub(crate) async fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        let core = self.core();
        if core.lease.is_lost() {
            // A lease seen as over stays over, even if its key survived: the
            // key is given back (token-checked), which also tells "another
            // owner holds it" from "it expired" (found by the lock model).
            return match self.held.release().await? {
                Outcome::NotHeld => Outcome::NotHeld.into_result(&core.name),
                _ => Outcome::Expired.into_result(&core.name),
            };
        }
        let started = Instant::now();
        let outcome = self.held.extend(ttl).await?;
        if outcome == Outcome::Done {
            if core.lease.renewed(started + ttl.saturating_sub(drift(ttl))) {
                return Ok(());
            }
            tracing::warn!(name = %core.name, "lease lost: it ran out before the extend's reply");
            // The extend landed on a lease that is over by our clock: give
            // the key back rather than leave it held for nobody for `ttl`.
            let _ = self.held.release().await;
            return Outcome::Expired.into_result(&core.name);
        }
        core.lease.mark_lost();
        tracing::warn!(name = %core.name, ?outcome, "lease lost: extend found it gone");
        outcome.into_result(&core.name)
    }

    /// Keep the lease in Redis but let go of it here: no release on drop,
    /// no watchdog, out of the registry.
    pub(crate) fn detach(mut self) -> (Token, Fence) {
        self.released = true;
        let core = self.held.core();
        core.stop.cancel();
        self.held.shared().registry.unregister(core.id);
        (core.token.clone(), core.fence)
    }

    pub(crate) async fn release(mut self) -> Result<()> {
        self.released = true;
        let core = self.held.core();
        core.stop.cancel();
        core.lease.mark_lost();
        if !self.held.shared().registry.unregister(core.id) {
            // release_all() got there first.
            return Outcome::Expired.into_result(&core.name);
        }
        let outcome = self.held.release().await?;
        tracing::debug!(name = %core.name, ?outcome, "released");
        outcome.into_result(&core.name)
    }
}

impl<L: Lease> Drop for Guard<L> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let held = self.held.clone();
        let core = held.core();
        core.stop.cancel();
        core.lease.mark_lost();
        if !held.shared().registry.unregister(core.id) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let background = held.shared().background.clone();
            rt.spawn(background.track_future(async move {
                let name = held.core().name.clone();
                match held.release().await {
                    Ok(outcome) => tracing::debug!(%name, ?outcome, "released on drop"),
                    Err(e) => {
                        tracing::warn!(%name, error = %e, "release on drop failed; the TTL will free it")
                    }
                }
            }));
        }
    }
}

/// Release every lease still registered in `shared`, in parallel; their
/// guards report lost. Returns (released, already lost, failed).
pub(crate) async fn release_all<L: Lease>(shared: &Shared<L>) -> (usize, usize, usize) {
    let entries = shared.registry.drain();
    let results = futures_util::future::join_all(entries.iter().map(|e| {
        e.core().stop.cancel();
        e.core().lease.mark_lost();
        e.release()
    }))
    .await;
    let mut counts = (0, 0, 0);
    for r in results {
        match r {
            Ok(Outcome::Done) => counts.0 += 1,
            Ok(_) => counts.1 += 1,
            Err(_) => counts.2 += 1,
        }
    }
    counts
}

/// The common public methods of a guard type `$guard` that wraps a
/// [`Guard`] in its field `0`; `$acquire` is the call (on a `client`) that
/// returns one, for the examples.
macro_rules! guard_api {
    ($guard:ident, $acquire:literal) => {
        impl $guard {
            /// The primitive's name.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nprintln!(\"{} at {}: fence {}\", guard.name(), guard.key(), guard.fence());\n# Ok(()) }\n```")]
            pub fn name(&self) -> &str {
                &self.0.core().name
            }

            /// The Redis key that holds this lease.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nprintln!(\"{}\", guard.key());\n# Ok(()) }\n```")]
            pub fn key(&self) -> &str {
                self.0.key()
            }

            /// The owner token stored in Redis for this lease.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nassert!(!guard.token().as_str().is_empty());\n# Ok(()) }\n```")]
            pub fn token(&self) -> &$crate::token::Token {
                &self.0.core().token
            }

            /// The fencing token of this acquisition: greater than that of
            /// every earlier holder whose lease excluded this one.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nclient.fenced_write(\"report\", guard.fence(), b\"v2\").await?;\n# Ok(()) }\n```")]
            pub fn fence(&self) -> $crate::token::Fence {
                self.0.core().fence
            }

            /// The TTL the lease was taken with (the watchdog renews to it).
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nassert_eq!(guard.ttl(), std::time::Duration::from_secs(10));\n# Ok(()) }\n```")]
            pub fn ttl(&self) -> std::time::Duration {
                self.0.core().ttl
            }

            /// Time left on the lease by the local monotonic clock, minus the
            /// drift allowance; zero once lost.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nassert!(guard.remaining() <= guard.ttl());\n# Ok(()) }\n```")]
            pub fn remaining(&self) -> std::time::Duration {
                self.0.core().lease.remaining()
            }

            /// True once the lease is known lost or ran out.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nif guard.is_lost() { return Ok(()); }\n# Ok(()) }\n```")]
            pub fn is_lost(&self) -> bool {
                self.0.core().lease.is_lost()
            }

            /// Completes as soon as the lease is lost (a renewal found it
            /// gone or taken, or it ran out on the local clock).
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10)).watchdog(true);\nlet guard = client.", $acquire, ".await?;\ntokio::select! {\n    _ = guard.lost() => eprintln!(\"lost: stop\"),\n    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}\n}\n# Ok(()) }\n```")]
            pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + '_ {
                self.0.core().lease.lost()
            }

            /// A cloneable handle on the "lost" state, to move into other tasks.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nlet lost = guard.lost_signal();\ntokio::spawn(async move { lost.lost().await; eprintln!(\"lost\") });\n# Ok(()) }\n```")]
            pub fn lost_signal(&self) -> $crate::services::lease::LostSignal {
                self.0.lost_signal()
            }

            /// Set the lease to `ttl` from now, if it is still ours:
            /// [`Error::Expired`](crate::Error::Expired) or
            /// [`Error::NotHeld`](crate::Error::NotHeld) otherwise (the guard
            /// is then lost).
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nguard.extend(std::time::Duration::from_secs(30)).await?;\n# Ok(()) }\n```")]
            pub async fn extend(&self, ttl: std::time::Duration) -> $crate::error::Result<()> {
                self.0.extend(ttl).await
            }

            /// Keep the lease in Redis but let go of it here: no release on
            /// drop, no watchdog, not in `Client::release_all`. It stays held
            /// until its TTL runs out or it is released by the returned token.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(60));\nlet guard = client.", $acquire, ".await?;\nlet (token, fence) = guard.detach();\nprintln!(\"{} {fence}\", token.as_str());\n# Ok(()) }\n```")]
            pub fn detach(self) -> ($crate::token::Token, $crate::token::Fence) {
                self.0.detach()
            }

            /// Release, telling whether the lease was still ours
            /// ([`Error::Expired`](crate::Error::Expired) or
            /// [`Error::NotHeld`](crate::Error::NotHeld) if not). Dropping the
            /// guard releases in the background instead.
            ///
            #[doc = concat!("```no_run\n# async fn demo(client: dlm::Client) -> dlm::Result<()> {\nlet opts = dlm::LockOptions::new(std::time::Duration::from_secs(10));\nlet guard = client.", $acquire, ".await?;\nguard.release().await?;\n# Ok(()) }\n```")]
            pub async fn release(self) -> $crate::error::Result<()> {
                self.0.release().await
            }
        }
    };
}
pub(crate) use guard_api;

/// The waiting between a primitive's acquire attempts: wake-up first,
/// polling only as the safety net.
pub(crate) struct Turns<'a> {
    wakeups: Option<&'a Arc<Wakeups>>,
    channel: &'a str,
    deadline: Instant,
    fallback: Duration,
    waiter: Option<crate::services::wakeups::Waiter>,
}

impl<'a> Turns<'a> {
    /// Wait for messages on `channel` until `deadline`, looking again at
    /// least every `fallback`.
    pub(crate) fn new(
        wakeups: Option<&'a Arc<Wakeups>>,
        channel: &'a str,
        deadline: Instant,
        fallback: Duration,
    ) -> Self {
        Turns {
            wakeups,
            channel,
            deadline,
            fallback,
            waiter: None,
        }
    }

    /// After an attempt that has to wait: `Err(err)` once the deadline has
    /// passed; else return when it is worth trying again. That is at once
    /// after subscribing to the channel (the first time: the wake-up may
    /// have come before the subscription), else on a message, after
    /// `fallback`, or after the attempt's own `hint` (a TTL or a waiter's
    /// lease running out), whichever comes first.
    pub(crate) async fn wait(&mut self, err: Error, hint: Option<Duration>) -> Result<()> {
        let now = Instant::now();
        if now >= self.deadline {
            tracing::debug!(error = %err, "not acquired");
            return Err(err);
        }
        if self.waiter.is_none()
            && let Some(w) = self.wakeups
        {
            let w = w.register(self.channel);
            let left = self.deadline.saturating_duration_since(now);
            // Without a subscription the timed fallback still works.
            let _ = tokio::time::timeout(left, w.ensure_subscribed()).await;
            self.waiter = Some(w);
            return Ok(());
        }
        let mut pause = self.fallback;
        if let Some(h) = hint {
            pause = pause.min(h + Duration::from_millis(1));
        }
        let until = (now + pause).min(self.deadline);
        match self
            .waiter
            .as_ref()
            .map(crate::services::wakeups::Waiter::notify)
        {
            Some(notify) => {
                tokio::select! {
                    _ = notify.notified() => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
            None => tokio::time::sleep_until(until).await,
        }
        Ok(())
    }
}
