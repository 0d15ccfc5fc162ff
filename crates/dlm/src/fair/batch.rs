//! Batched fair acquire and release: the fair lock's requests for the
//! batching service ([`crate::services::batch`]). Concurrent acquires and
//! releases of one client travel as one `acquire_many.lua` /
//! `release_many.lua` call; every lock in a batch is decided on its own, in
//! submission order, exactly as a call of its own would decide it. On a
//! connection that may be a Redis Cluster, a batch is split by hash slot.
//!
//! There is one implementation of each decision: a lone request (an idle
//! connection, [`Batcher::alone`]) goes through the same scripts, as a batch
//! of one, from its caller's task.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Script, Value};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::backend::{Backend, evalsha, millis};
use crate::error::{Error, Result};
use crate::fair::MAX_WAITERS;
use crate::fair::ops::{Attempt, acquire_code, cancel, release_code};
use crate::keys::{FairKeys, slot};
use crate::services::batch::{BatchJob, Batcher, phases};
use crate::services::options::Outcome;
use crate::services::outstanding::InFlight;
use crate::token::Token;

static ACQUIRE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire_many.lua")));
static RELEASE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release_many.lua")));

/// The scripts of batched acquire and release.
pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&ACQUIRE_MANY, &RELEASE_MANY]
}

/// What a release found, and the waiter it woke.
pub(crate) type Released = (Outcome, Option<String>);

/// The fair locks' Redis: its connection and its batcher of acquire and
/// release calls (started on first use); cheap to clone.
///
/// As for the mutex (`lock::batch::Node`): an acquire whose caller gave up
/// (its deadline passed) or went away (its future was dropped) may still be
/// queued in the batcher, or wait in a later phase of its batch, when the
/// undo of its token (the cancel of the acquisition, or the guard's release)
/// is sent. That undo would reach Redis first, find nothing, and the
/// acquire after it would leave a queue entry or the lock held for nobody.
/// So every such acquire stays outstanding in `in_flight` until it is
/// answered, and a release or cancel of its token waits for it (see
/// [`crate::services::outstanding`]); past its own deadline the undo still
/// goes out behind them, in the background that `Client::settle` waits for.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    backend: Backend,
    batcher: Arc<OnceLock<Batcher<Job>>>,
    /// This connection's fair acquires that may still reach Redis.
    pub(crate) in_flight: InFlight,
}

impl Node {
    pub(crate) fn new(backend: Backend, background: TaskTracker) -> Self {
        Node {
            backend,
            batcher: Arc::new(OnceLock::new()),
            in_flight: InFlight::new(background),
        }
    }

    fn batcher(&self) -> &Batcher<Job> {
        self.batcher
            .get_or_init(|| Batcher::new(self.backend.clone()))
    }

    /// One acquire attempt, batched with whatever else is pending.
    pub(crate) async fn acquire(
        &self,
        keys: &Arc<FairKeys>,
        token: &Token,
        ttl: Duration,
        lease: Duration,
    ) -> Result<Attempt> {
        let timeout = self.backend.timeout();
        // Alone on an idle connection: sent from here, as a batch of one
        // would be (the connection writes it before anything sent after it).
        if let Some(slot) = self.batcher().alone() {
            let (reply, rx) = oneshot::channel();
            let job = Job::Acquire {
                keys: keys.clone(),
                token: token.clone(),
                ttl,
                lease,
                timeout,
                reply,
            };
            acquire_script(&self.backend, vec![job]).await;
            drop(slot);
            return answer(rx);
        }
        let (reply, rx) = oneshot::channel();
        let job = Job::Acquire {
            keys: keys.clone(),
            token: token.clone(),
            ttl,
            lease,
            timeout,
            reply,
        };
        // Until the call returns with its answer, the job may outlive it: a
        // call that ends on its deadline or is dropped (cancelled) leaves it
        // outstanding until it is answered.
        self.batcher()
            .submit_outstanding(job, rx, timeout, &self.in_flight, token)
            .await
    }

    /// One token-checked release (waking the next in line), batched with
    /// whatever else is pending.
    pub(crate) async fn release(&self, keys: &Arc<FairKeys>, token: &Token) -> Result<Released> {
        let timeout = self.backend.timeout();
        // Not before the acquires of this token that are still on their way
        // (see `Node`); the wait counts against this release's deadline.
        let timeout = match self.in_flight.behind(token, timeout).await {
            Ok(left) => left,
            Err(rest) => {
                let (node, keys, token) = (self.clone(), keys.clone(), token.clone());
                self.in_flight.background.spawn(async move {
                    rest.await;
                    if let Err(e) = node.release_now(&keys, &token, timeout).await {
                        tracing::warn!(error = %e, "a late fair release failed; the TTL will free the lock");
                    }
                });
                return Err(Error::Timeout(timeout));
            }
        };
        self.release_now(keys, token, timeout).await
    }

    async fn release_now(
        &self,
        keys: &Arc<FairKeys>,
        token: &Token,
        timeout: Duration,
    ) -> Result<Released> {
        let (reply, rx) = oneshot::channel();
        let job = Job::Release {
            keys: keys.clone(),
            token: token.clone(),
            timeout,
            reply,
        };
        if let Some(slot) = self.batcher().alone() {
            release_script(&self.backend, vec![job]).await;
            drop(slot);
            return answer(rx);
        }
        self.batcher().submit(job, rx, timeout).await
    }

    /// Forget an acquisition that gave up (`cancel.lua`), behind every
    /// acquire of its token that may still reach Redis: within the client's
    /// deadline, and past it still, in the background.
    pub(crate) async fn cancel(&self, keys: &Arc<FairKeys>, token: &Token) -> Result<bool> {
        let timeout = self.backend.timeout();
        match self.in_flight.behind(token, timeout).await {
            Ok(_) => cancel(&self.backend, keys, token).await,
            Err(rest) => {
                let (node, keys, token) = (self.clone(), keys.clone(), token.clone());
                self.in_flight.background.spawn(async move {
                    rest.await;
                    if let Err(e) = cancel(&node.backend, &keys, &token).await {
                        tracing::warn!(error = %e, "a late fair cancel failed; the queue lease will drop the entry");
                    }
                });
                Err(Error::Timeout(timeout))
            }
        }
    }
}

/// One caller's request.
pub(crate) enum Job {
    Acquire {
        keys: Arc<FairKeys>,
        token: Token,
        ttl: Duration,
        /// The queue lease (zero: try once, do not queue).
        lease: Duration,
        timeout: Duration,
        reply: oneshot::Sender<Result<Attempt>>,
    },
    Release {
        keys: Arc<FairKeys>,
        token: Token,
        timeout: Duration,
        reply: oneshot::Sender<Result<Released>>,
    },
}

impl Job {
    fn keys(&self) -> &FairKeys {
        match self {
            Job::Acquire { keys, .. } | Job::Release { keys, .. } => keys,
        }
    }

    fn is_acquire(&self) -> bool {
        matches!(self, Job::Acquire { .. })
    }

    fn timeout(&self) -> Duration {
        match self {
            Job::Acquire { timeout, .. } | Job::Release { timeout, .. } => *timeout,
        }
    }

    /// About how many bytes its keys and arguments take in a command.
    fn bytes(&self) -> usize {
        let (keys, token) = match self {
            Job::Acquire { keys, token, .. } | Job::Release { keys, token, .. } => (keys, token),
        };
        keys.lock.len()
            + keys.queue.len()
            + keys.timeouts.len()
            + keys.fence.len()
            + keys.wake_prefix.len()
            + token.as_str().len()
            + 64
    }

    fn fail(self, e: &Error) {
        match self {
            Job::Acquire { reply, .. } => drop(reply.send(Err(e.share()))),
            Job::Release { reply, .. } => drop(reply.send(Err(e.share()))),
        }
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_acquire() {
            "Acquire"
        } else {
            "Release"
        })
    }
}

impl BatchJob for Job {
    async fn send(backend: &Backend, jobs: Vec<Self>) {
        // In submission order: an acquire and a release of one lock in one
        // batch travel in successive phases, so neither overtakes the other.
        for phase in phases(jobs, |j| (j.keys().lock.as_str(), j.is_acquire())) {
            send_phase(backend, phase).await;
        }
    }
}

/// Jobs without an order between them: one script call per kind (and per
/// hash slot on a possible cluster), all at once.
async fn send_phase(backend: &Backend, jobs: Vec<Job>) {
    let by_slot = backend.batch_by_slot();
    let mut groups: HashMap<(bool, u16), Vec<Job>> = HashMap::new();
    for job in jobs {
        let s = if by_slot { slot(&job.keys().lock) } else { 0 };
        groups.entry((job.is_acquire(), s)).or_default().push(job);
    }
    join_all(groups.into_iter().map(|((acquire, _), group)| async move {
        if acquire {
            acquire_script(backend, group).await;
        } else {
            release_script(backend, group).await;
        }
    }))
    .await;
}

/// The longest deadline among `jobs` (the call serves them all).
fn max_timeout(jobs: &[Job]) -> Duration {
    jobs.iter().map(Job::timeout).max().unwrap_or_default()
}

/// One `acquire_many.lua` call for `jobs`, all acquires (of one slot on a
/// possible cluster), in order.
async fn acquire_script(backend: &Backend, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let n = jobs.len();
    let bytes: usize = jobs.iter().map(Job::bytes).sum();
    let mut cmd = evalsha(&ACQUIRE_MANY, 4 * n, 4 * n + 1, bytes);
    for job in &jobs {
        let k = job.keys();
        cmd.arg(&k.lock)
            .arg(&k.queue)
            .arg(&k.timeouts)
            .arg(&k.fence);
    }
    for job in &jobs {
        if let Job::Acquire {
            keys,
            token,
            ttl,
            lease,
            ..
        } = job
        {
            cmd.arg(token.as_str())
                .arg(millis(*ttl))
                .arg(millis(*lease))
                .arg(&keys.wake_prefix);
        }
    }
    cmd.arg(MAX_WAITERS);
    let reply: Result<Vec<Value>> = backend
        .evalsha_within(max_timeout(&jobs), &ACQUIRE_MANY, &cmd)
        .await;
    let mut codes = match checked(reply, 3 * n) {
        Ok(c) => c,
        Err(e) => {
            jobs.into_iter().for_each(|j| j.fail(&e));
            return;
        }
    };
    for job in jobs {
        if let Job::Acquire { keys, reply, .. } = job {
            let r = match (codes.next(), codes.next(), codes.next()) {
                (Some(code), Some(n), Some(pos)) => acquire_reply(code, n, pos, &keys.fence),
                _ => Err(Error::protocol("short fair acquire_many reply")),
            };
            let _ = reply.send(r);
        }
    }
}

/// One lock's entries of an `acquire_many.lua` reply: the codes of
/// [`acquire_code`], or {-4, message, 0} for a Redis error on that lock alone.
fn acquire_reply(code: Value, n: Value, pos: Value, fence: &str) -> Result<Attempt> {
    let code: i64 = redis::from_redis_value(code)?;
    if code == -4 {
        let message: String = redis::from_redis_value(n)?;
        return Err(Error::protocol(format!("fair acquire: {message}")));
    }
    acquire_code(
        code,
        redis::from_redis_value(n)?,
        redis::from_redis_value(pos)?,
        fence,
    )
}

/// The reply's codes, or an error when it does not have `len` of them.
fn checked<T>(reply: Result<Vec<T>>, len: usize) -> Result<std::vec::IntoIter<T>> {
    let codes = reply?;
    if codes.len() != len {
        return Err(Error::protocol(format!(
            "a batched fair script returned {} values for {len}",
            codes.len()
        )));
    }
    Ok(codes.into_iter())
}

/// One `release_many.lua` call for `jobs`, all releases (of one slot on a
/// possible cluster), in order.
async fn release_script(backend: &Backend, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let n = jobs.len();
    let bytes: usize = jobs.iter().map(Job::bytes).sum();
    let mut cmd = evalsha(&RELEASE_MANY, 3 * n, 2 * n, bytes);
    for job in &jobs {
        let k = job.keys();
        cmd.arg(&k.lock).arg(&k.queue).arg(&k.timeouts);
    }
    for job in &jobs {
        if let Job::Release { keys, token, .. } = job {
            cmd.arg(token.as_str()).arg(&keys.wake_prefix);
        }
    }
    let reply: Result<Vec<Value>> = backend
        .evalsha_within(max_timeout(&jobs), &RELEASE_MANY, &cmd)
        .await;
    let mut values = match checked(reply, 2 * n) {
        Ok(v) => v,
        Err(e) => {
            jobs.into_iter().for_each(|j| j.fail(&e));
            return;
        }
    };
    for job in jobs {
        if let Job::Release { reply, .. } = job {
            let r = match (values.next(), values.next()) {
                (Some(code), Some(next)) => release_code(code, next),
                _ => Err(Error::protocol("short fair release_many reply")),
            };
            let _ = reply.send(r);
        }
    }
}

/// The reply a job's channel got from a call that has ended.
fn answer<T>(mut rx: oneshot::Receiver<Result<T>>) -> Result<T> {
    rx.try_recv()
        .unwrap_or_else(|_| Err(Error::protocol("a batched call ended without a reply")))
}
