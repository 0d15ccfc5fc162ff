//! Batched acquire and release: the lock's requests for the batching
//! service ([`crate::services::batch`]). Concurrent acquires and releases on
//! one connection travel as one `acquire_many.lua` / `release_many.lua`
//! call; every lock in a batch is decided on its own, exactly as a single
//! call would decide it. On a connection that may be a Redis Cluster, a
//! batch is split by hash slot.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Cmd, Pipeline, Script, Value};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::backend::server::{self, Capability};
use crate::backend::{Backend, Transaction, end_transaction, evalsha, millis, transaction};
use crate::error::{Error, Result};
use crate::keys::{FENCE_FLOOR, LockKeys, slot};
use crate::lock::Outcome;
use crate::lock::ops::{Attempt, acquire_reply, release_reply};
use crate::services::batch::{BatchJob, Batcher, checked, pair_of};
use crate::services::outstanding::InFlight;
use crate::token::{Fence, Token};

static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/fence.lua"),
        include_str!("scripts/acquire_many.lua")
    ))
});
static SETTLE_MANY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/fence.lua"),
        include_str!("scripts/settle_many.lua")
    ))
});
static RELEASE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release_many.lua")));

/// The scripts of batched acquire and release.
pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&ACQUIRE_MANY, &SETTLE_MANY, &RELEASE_MANY]
}

/// One acquire attempt, batched with concurrent ones on the same connection.
pub(crate) async fn acquire(
    node: &Node,
    keys: &Arc<LockKeys>,
    token: &Token,
    ttl: Duration,
    marker: Duration,
    timeout: Duration,
    first: bool,
) -> Result<Attempt> {
    let timeout = timeout.min(node.backend.timeout());
    node.acquire(keys, token, ttl, marker, timeout, first).await
}

/// One token-checked release, batched with concurrent ones on the same connection.
pub(crate) async fn release(
    node: &Node,
    keys: &Arc<LockKeys>,
    token: &Token,
    timeout: Duration,
) -> Result<Outcome> {
    let timeout = timeout.min(node.backend.timeout());
    node.release(keys, token, timeout).await
}

/// One Redis deployment a lock lives on: its connection and its batcher of
/// acquire and release calls (started on first use).
///
/// An acquire whose caller gave up (its deadline passed) or went away (its
/// future was dropped: a cancelled acquisition, or a Redlock node's request
/// left behind once a majority decided) may still be queued, or waiting in a
/// later phase of its batch, when the token-checked release of that token
/// (the undo of an unsure attempt, or the guard's release) is sent in
/// another batch: that release would reach Redis first, find nothing, and
/// the acquire's `SET` after it would leave the lock held for nobody until
/// its TTL. So every such acquire stays outstanding in `in_flight` until it
/// is answered (the call that carried it returned, or it was never sent),
/// and a release of its token waits for it: then it is behind it on the
/// connection (see [`crate::services::outstanding`]). The wait counts
/// against the release's deadline; past it the release still goes out, in
/// the background, once they are answered. A hand-over (`release_to.lua`)
/// is not made while any is outstanding.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) backend: Backend,
    batcher: Arc<OnceLock<Batcher<Job>>>,
    /// This connection's acquires that may still reach Redis.
    pub(crate) in_flight: InFlight,
    /// The command buffer of the last lone release, kept for the next one.
    spare: Arc<Mutex<Option<Cmd>>>,
}

impl Node {
    pub(crate) fn new(backend: Backend, background: TaskTracker) -> Self {
        Node {
            backend,
            batcher: Arc::new(OnceLock::new()),
            in_flight: InFlight::new(background),
            spare: Arc::default(),
        }
    }

    /// Whether an acquire of `token` may still be on its way (its caller
    /// gave up on it or was dropped, and it is not answered yet).
    pub(crate) fn unsettled(&self, token: &Token) -> bool {
        self.in_flight.contains(token)
    }

    fn batcher(&self) -> &Batcher<Job> {
        self.batcher
            .get_or_init(|| Batcher::new(self.backend.clone()))
    }

    /// One acquire attempt, batched with whatever else is pending. A
    /// `first` attempt of an acquisition on one Redis tries the plain
    /// `MULTI` path first (see [`send_acquires`]); a retry, which found the
    /// lock busy before, goes to the script at once.
    pub(crate) async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        ttl: Duration,
        marker: Duration,
        timeout: Duration,
        first: bool,
    ) -> Result<Attempt> {
        // A first attempt on an idle connection to one Redis (one task at a
        // time): its transaction goes out from here, as a batch of one would.
        if first
            && !self.backend.batch_by_slot()
            && !self.backend.transactions_refused()
            && let Some(slot) = self.batcher().alone()
        {
            let attempt = acquire_alone(&self.backend, keys, token, ttl, marker, timeout).await;
            drop(slot);
            return attempt;
        }
        let (reply, rx) = oneshot::channel();
        let job = Job::Acquire {
            keys: keys.clone(),
            token: token.clone(),
            ttl,
            marker,
            timeout,
            first,
            reply,
        };
        // Until the call returns with its answer, the job may outlive it: a
        // call that ends on its deadline or is dropped (cancelled) leaves it
        // outstanding until it is answered.
        self.batcher()
            .submit_outstanding(job, rx, timeout, &self.in_flight, token)
            .await
    }

    /// One token-checked release, batched with whatever else is pending.
    pub(crate) async fn release(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        timeout: Duration,
    ) -> Result<Outcome> {
        // Not before the acquires of this token that are still on their way
        // (see `Node`): a release sent now could overtake them. The wait
        // counts against this release's own deadline.
        let timeout = match self.in_flight.behind(token, timeout).await {
            Ok(left) => left,
            Err(rest) => {
                // Not given up: sent once they are answered (a token-checked
                // release behind them is always safe), in the background.
                let (node, keys, token) = (self.clone(), keys.clone(), token.clone());
                self.in_flight.background.spawn(async move {
                    rest.await;
                    let (reply, rx) = oneshot::channel();
                    let job = Job::Release {
                        keys,
                        token,
                        timeout,
                        reply,
                    };
                    if let Err(e) = node.batcher().submit(job, rx, timeout).await {
                        tracing::warn!(error = %e, "a late release failed; the TTL will free the lock");
                    }
                });
                return Err(Error::Timeout(timeout));
            }
        };
        // Alone on an idle connection: sent from here, as a batch of one would be.
        if let Some(slot) = self.batcher().alone() {
            let outcome = if !self.backend.batch_by_slot()
                && self.backend.native(Capability::CompareAndDelete)
            {
                let (reply, rx) = oneshot::channel();
                let job = Job::Release {
                    keys: keys.clone(),
                    token: token.clone(),
                    timeout,
                    reply,
                };
                release_native(&self.backend, vec![job]).await;
                answer(rx)
            } else {
                self.release_alone(keys, token, timeout).await
            };
            drop(slot);
            return outcome;
        }
        let (reply, rx) = oneshot::channel();
        let job = Job::Release {
            keys: keys.clone(),
            token: token.clone(),
            timeout,
            reply,
        };
        self.batcher().submit(job, rx, timeout).await
    }
}

/// One caller's request.
pub(crate) enum Job {
    Acquire {
        keys: Arc<LockKeys>,
        token: Token,
        ttl: Duration,
        /// The waiters marker's lifetime when busy (zero: no marker).
        marker: Duration,
        timeout: Duration,
        /// The acquisition's first attempt (see [`Node::acquire`]).
        first: bool,
        reply: oneshot::Sender<Result<Attempt>>,
    },
    Release {
        keys: Arc<LockKeys>,
        token: Token,
        timeout: Duration,
        reply: oneshot::Sender<Result<Outcome>>,
    },
}

impl Job {
    /// About how many bytes its keys and arguments take in a command.
    fn bytes(&self) -> usize {
        match self {
            Job::Acquire { keys, token, .. } | Job::Release { keys, token, .. } => {
                keys.lock.len()
                    + keys.fence.len()
                    + keys.waiters.len()
                    + keys.channel.len()
                    + token.as_str().len()
                    + 64
            }
        }
    }

    fn key(&self) -> &str {
        match self {
            Job::Acquire { keys, .. } | Job::Release { keys, .. } => &keys.lock,
        }
    }

    fn timeout(&self) -> Duration {
        match self {
            Job::Acquire { timeout, .. } | Job::Release { timeout, .. } => *timeout,
        }
    }
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Job::Acquire { .. } => "Acquire",
            Job::Release { .. } => "Release",
        })
    }
}

impl BatchJob for Job {
    async fn send(backend: &Backend, jobs: Vec<Self>) {
        send(backend, jobs).await;
    }
}

/// Send one gathered batch in submission order: jobs travel in phases, and a
/// job that acquires a key released earlier in the batch (or releases one
/// acquired earlier) starts a new phase, sent once the one before has its
/// replies. So a release never overtakes the acquire it undoes (a caller
/// that gave up on an acquire releases its token), nor an acquire the
/// release before it. Within a phase, one script call per kind (and per
/// hash slot on a possible cluster), all at once.
async fn send(backend: &Backend, jobs: Vec<Job>) {
    // Most batches are small and touch each key once: one phase, sent as it
    // is, without a map or a copy.
    if jobs.len() <= SMALL_BATCH && !needs_phases(&jobs) {
        send_phase(backend, jobs).await;
        return;
    }
    use std::hash::BuildHasher;
    let hasher = std::collections::hash_map::RandomState::new();
    let mut phase: Vec<Job> = Vec::with_capacity(jobs.len());
    // Key hash -> kind in this phase (a collision only splits a phase early).
    let mut kinds: HashMap<u64, bool> = HashMap::new();
    for job in jobs {
        let acquire = matches!(job, Job::Acquire { .. });
        let key = hasher.hash_one(job.key());
        if kinds.get(&key).is_some_and(|k| *k != acquire) {
            send_phase(backend, std::mem::take(&mut phase)).await;
            kinds.clear();
        }
        kinds.insert(key, acquire);
        phase.push(job);
    }
    send_phase(backend, phase).await;
}

/// Up to this many jobs, `send` looks for a key that needs a second phase
/// by comparing every pair (no allocation) instead of with a map.
const SMALL_BATCH: usize = 32;

/// Does a key come back in `jobs` with the other kind (an acquire after a
/// release of it, or a release after an acquire)?
fn needs_phases(jobs: &[Job]) -> bool {
    jobs.iter().enumerate().any(|(i, later)| {
        let acquire = matches!(later, Job::Acquire { .. });
        jobs[..i].iter().any(|earlier| {
            matches!(earlier, Job::Acquire { .. }) != acquire && earlier.key() == later.key()
        })
    })
}

/// Jobs without an order between them: one script call per kind (and per
/// hash slot on a possible cluster), all at once.
async fn send_phase(backend: &Backend, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let first_kind = matches!(jobs.first(), Some(Job::Acquire { .. }));
    let one_kind = jobs
        .iter()
        .all(|j| matches!(j, Job::Acquire { .. }) == first_kind);
    if !backend.batch_by_slot() && one_kind {
        send_group(backend, jobs).await;
        return;
    }
    if !backend.batch_by_slot() {
        let (acquires, releases): (Vec<Job>, Vec<Job>) = jobs
            .into_iter()
            .partition(|j| matches!(j, Job::Acquire { .. }));
        match (acquires.is_empty(), releases.is_empty()) {
            (false, true) => send_group(backend, acquires).await,
            (true, false) => send_group(backend, releases).await,
            _ => {
                futures_util::future::join(
                    send_group(backend, acquires),
                    send_group(backend, releases),
                )
                .await;
            }
        }
        return;
    }
    let mut groups: HashMap<(bool, u16), Vec<Job>> = HashMap::new();
    for job in jobs {
        let kind = matches!(job, Job::Acquire { .. });
        groups.entry((kind, slot(job.key()))).or_default().push(job);
    }
    join_all(groups.into_values().map(|group| send_group(backend, group))).await;
}

/// One call of `script` (`acquire_many.lua`, or `settle_many.lua`, which
/// takes the same keys and arguments and answers alike) for `jobs`, all
/// acquires (of one slot on a possible cluster).
async fn acquire_script(backend: &Backend, script: &Script, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let timeout = max_timeout(&jobs);
    let bytes: usize = jobs.iter().map(Job::bytes).sum();
    let mut cmd = evalsha(script, 3 * jobs.len(), 3 * jobs.len(), bytes);
    for job in &jobs {
        if let Job::Acquire { keys, .. } = job {
            cmd.arg(&keys.lock).arg(&keys.fence).arg(&keys.waiters);
        }
    }
    for job in &jobs {
        if let Job::Acquire {
            token, ttl, marker, ..
        } = job
        {
            cmd.arg(token.as_str())
                .arg(millis(*ttl))
                .arg(millis(*marker));
        }
    }
    let reply: Result<Vec<Value>> = backend.evalsha_within(timeout, script, &cmd).await;
    let mut codes = checked(reply, 2 * jobs.len());
    for job in jobs {
        if let Job::Acquire { keys, reply, .. } = job {
            let r = match &mut codes {
                Ok(c) => match (c.next(), c.next()) {
                    (Some(ok), Some(n)) => {
                        pair_of(ok, n, &keys.lock).and_then(|(ok, n)| acquire_reply(ok, n))
                    }
                    _ => Err(Error::protocol("short acquire reply")),
                },
                Err(e) => Err(e.share()),
            };
            let _ = reply.send(r);
        }
    }
}

/// The longest deadline among `jobs` (the call serves them all).
fn max_timeout(jobs: &[Job]) -> Duration {
    jobs.iter().map(Job::timeout).max().unwrap_or_default()
}

/// Acquires on one Redis. First attempts travel as one transaction of
/// native commands, which costs Redis about a third of the script (no Lua
/// entry, no `redis.call` per command, one `INCRBY` per counter instead of
/// an `INCR` per lock):
///
/// ```text
/// MULTI; INCRBY counter n; SET lock_1 token_1 NX PX ttl_1; ...; SET lock_n ...; EXEC
/// ```
///
/// `EXEC` runs them atomically, so the `n` fences the `INCRBY` reserved are
/// all above every fence taken before it and below every fence taken after
/// it: the granted locks take them in batch order, and the fence of each
/// lock grows in grant order. What the transaction did not decide goes on
/// to `settle_many.lua`, in the same call: a `SET NX` that found the key
/// taken (the caller needs the holder's TTL, and maybe the waiters marker),
/// and the grants of a counter that was below [`FENCE_FLOOR`] (new, or left
/// by an older dlm) or that failed its `INCRBY` (it holds no integer), which
/// the script finds ours and gives fresh fences above the floor, atomically
/// with resetting their TTL (or, when the counter still fails, deletes
/// again and answers with that error, for these locks only). A `SET` that
/// failed fails its own lock only. That script never
/// takes a free lock: a release of the same token may have run between the
/// two calls (a Redlock that decided on other nodes, a caller that gave
/// up), and taking the lock again would leave it held for nobody. Retries,
/// which found the lock busy before, go to `acquire_many.lua` at once.
async fn send_acquires(backend: &Backend, jobs: Vec<Job>) {
    let first_counter = |j: &Job| match (j, jobs.first()) {
        (Job::Acquire { keys, .. }, Some(Job::Acquire { keys: k0, .. })) => keys.fence == k0.fence,
        _ => false,
    };
    // A user whose ACL refused `MULTI` before (made before dlm used
    // transactions) gets no transaction at all: every attempt is the script
    // that can take a free lock. (`settle_many.lua` never takes one, so
    // sending the first attempts there when no transaction ran would answer
    // "busy" for free locks.)
    if backend.transactions_refused() {
        acquire_script(backend, &ACQUIRE_MANY, jobs).await;
        return;
    }
    // Mostly every job is a first attempt on the one counter of its prefix:
    // one transaction for all, without sorting them.
    let simple = jobs
        .iter()
        .all(|j| matches!(j, Job::Acquire { first: true, .. }) && first_counter(j));
    if simple {
        let (undecided, unsent) = acquire_transaction(backend, jobs).await;
        futures_util::future::join(
            acquire_script(backend, &SETTLE_MANY, undecided),
            acquire_script(backend, &ACQUIRE_MANY, unsent),
        )
        .await;
        return;
    }
    let (mut fast, mut slow): (Vec<Job>, Vec<Job>) = jobs
        .into_iter()
        .partition(|j| matches!(j, Job::Acquire { first: true, .. }));
    // One transaction per counter (locks under other prefixes).
    let mut undecided = Vec::new();
    while !fast.is_empty() {
        let fence = match fast.first() {
            Some(Job::Acquire { keys, .. }) => keys.clone(),
            _ => break,
        };
        let (same, rest): (Vec<Job>, Vec<Job>) = fast
            .into_iter()
            .partition(|j| matches!(j, Job::Acquire { keys, .. } if keys.fence == fence.fence));
        let (left, unsent) = acquire_transaction(backend, same).await;
        undecided.extend(left);
        slow.extend(unsent);
        fast = rest;
    }
    futures_util::future::join(
        acquire_script(backend, &SETTLE_MANY, undecided),
        acquire_script(backend, &ACQUIRE_MANY, slow),
    )
    .await;
}

/// The transaction of [`send_acquires`] for jobs that share one counter:
/// answers the jobs it granted (or failed on), and returns the others: those
/// whose commands ran (to be decided by `settle_many.lua`), and those for
/// which nothing was sent (for `acquire_many.lua`).
///
/// Every failure once the transaction was sent is answered as an error of
/// the attempt, which the acquisition treats as unsure (its `SET` may have
/// run: Redis rolls nothing back), so it stays armed to release its token.
async fn acquire_transaction(backend: &Backend, jobs: Vec<Job>) -> (Vec<Job>, Vec<Job>) {
    let Some(Job::Acquire { keys: first, .. }) = jobs.first() else {
        return (jobs, Vec::new());
    };
    let sets = jobs.iter().filter_map(|job| match job {
        Job::Acquire {
            keys, token, ttl, ..
        } => Some((keys.lock.as_str(), token, *ttl)),
        Job::Release { .. } => None,
    });
    let pipe = acquire_pipeline(&first.fence, jobs.len(), sets);
    let exec = acquire_exec(backend, max_timeout(&jobs), &first.fence, jobs.len(), &pipe).await;
    let (mut next, values) = match exec {
        Exec::Replies { next, values } => (next, values),
        // MULTI was refused (this user's ACL, or the server's state): its
        // commands may have run one by one (SETs granted, outside a
        // transaction). `settle_many.lua` decides every job, finding those
        // keys already ours (TTL reset, a fence taken atomically with it).
        Exec::RanAlone => return (jobs, Vec::new()),
        // Nothing was sent (MULTI refused to this user before): the script
        // that can take a free lock makes these attempts.
        Exec::NotSent => return (Vec::new(), jobs),
        Exec::Failed(e) => {
            fail(jobs, &e);
            return (Vec::new(), Vec::new());
        }
    };
    let mut undecided = Vec::new();
    for (job, value) in jobs.into_iter().zip(values) {
        match set_reply(value, &mut next) {
            SetReply::Undecided => undecided.push(job),
            SetReply::Decided(r) => {
                if let Job::Acquire { reply, .. } = job {
                    let _ = reply.send(r);
                }
            }
        }
    }
    (undecided, Vec::new())
}

/// One acquire attempt alone on its connection, a first attempt on one
/// Redis: what [`send_acquires`] does for a batch of one, answered directly
/// (the transaction; then, for what it did not decide, the script, through
/// the batch path's own code).
async fn acquire_alone(
    backend: &Backend,
    keys: &Arc<LockKeys>,
    token: &Token,
    ttl: Duration,
    marker: Duration,
    timeout: Duration,
) -> Result<Attempt> {
    let pipe = acquire_pipeline(
        &keys.fence,
        1,
        std::iter::once((keys.lock.as_str(), token, ttl)),
    );
    let script: &Script = match acquire_exec(backend, timeout, &keys.fence, 1, &pipe).await {
        Exec::Replies {
            mut next,
            mut values,
        } => match values.next().map(|v| set_reply(v, &mut next)) {
            Some(SetReply::Decided(r)) => return r,
            Some(SetReply::Undecided) => &SETTLE_MANY,
            None => return Err(Error::protocol("a transaction without its SET reply")),
        },
        Exec::RanAlone => &SETTLE_MANY,
        Exec::NotSent => &ACQUIRE_MANY,
        Exec::Failed(e) => return Err(e.share()),
    };
    let (reply, rx) = oneshot::channel();
    let job = Job::Acquire {
        keys: keys.clone(),
        token: token.clone(),
        ttl,
        marker,
        timeout,
        first: true,
        reply,
    };
    acquire_script(backend, script, vec![job]).await;
    answer(rx)
}

/// `MULTI; INCRBY fence n; SET lock token NX PX ttl (one per set); EXEC`,
/// each command built in buffers of its exact size.
fn acquire_pipeline<'a>(
    fence: &str,
    n: usize,
    sets: impl Iterator<Item = (&'a str, &'a Token, Duration)>,
) -> Pipeline {
    // Decimal digits of a u64, at most.
    const DIGITS: usize = 20;
    let mut pipe = transaction(1 + n);
    let mut incrby = Cmd::with_capacity(3, "INCRBY".len() + fence.len() + DIGITS);
    incrby.arg("INCRBY").arg(fence).arg(n);
    pipe.add_command(incrby);
    for (lock, token, ttl) in sets {
        let token = token.as_str();
        let size = "SETNXPX".len() + lock.len() + token.len() + DIGITS;
        let mut set = Cmd::with_capacity(6, size);
        set.arg("SET")
            .arg(lock)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        pipe.add_command(set);
    }
    end_transaction(&mut pipe);
    pipe
}

/// What the acquire transaction of `n` locks did (see [`acquire_transaction`]).
enum Exec {
    /// `EXEC` ran: the first fence its `INCRBY` reserved (`None`: not above
    /// the floor, or the `INCRBY` failed), and the replies of the `SET`s,
    /// one per lock in order.
    Replies {
        next: Option<u64>,
        values: std::vec::IntoIter<Value>,
    },
    /// `MULTI` was refused: the commands ran one by one.
    RanAlone,
    /// Nothing was sent (`MULTI` refused to this user before).
    NotSent,
    /// Every failure once the transaction was sent: an error of every
    /// attempt, which the acquisition treats as unsure (its `SET` may have
    /// run: Redis rolls nothing back), so it stays armed to release its token.
    Failed(Error),
}

/// Send the acquire transaction `pipe` of `n` locks on the counter `fence`.
async fn acquire_exec(
    backend: &Backend,
    timeout: Duration,
    fence: &str,
    n: usize,
    pipe: &Pipeline,
) -> Exec {
    let reply = backend
        .transaction_within(timeout, pipe)
        .await
        .and_then(|t| match t {
            Transaction::Exec(values) if values.len() != 1 + n => Err(Error::protocol(format!(
                "the acquire transaction returned {} replies for {}",
                values.len(),
                1 + n
            ))),
            other => Ok(other),
        });
    let values = match reply {
        Ok(Transaction::Exec(values)) => values,
        Ok(Transaction::RanAlone) => return Exec::RanAlone,
        Ok(Transaction::NotSent) => return Exec::NotSent,
        Err(e) => return Exec::Failed(e),
    };
    let mut values = values.into_iter();
    let next = match values.next() {
        Some(Value::Int(top)) => first_fence(top, n),
        // The counter holds no integer: no fence reserved, every `SET` left
        // to `settle_many.lua`, which answers a busy lock as busy and fails
        // (and deletes again) only the grants that need a fence from it.
        Some(Value::ServerError(e)) => {
            tracing::debug!(counter = %fence, error = ?e, "INCRBY failed; settle_many decides");
            None
        }
        other => return Exec::Failed(Error::protocol(format!("INCRBY replied {other:?}"))),
    };
    Exec::Replies { next, values }
}

/// What one `SET NX` of the transaction decided.
enum SetReply {
    /// Granted with the next reserved fence, or failed.
    Decided(Result<Attempt>),
    /// Busy, or granted while the counter was below the floor:
    /// `settle_many.lua` decides.
    Undecided,
}

/// One `SET NX` reply of the transaction; `next`: the next reserved fence.
fn set_reply(value: Value, next: &mut Option<u64>) -> SetReply {
    let granted = match value {
        Value::Okay => true,
        Value::SimpleString(s) if s == "OK" => true,
        Value::Nil => false,
        other => {
            return SetReply::Decided(Err(Error::protocol(format!("SET NX replied {other:?}"))));
        }
    };
    match (granted, next.as_mut()) {
        (true, Some(fence)) => {
            let f = *fence;
            *fence += 1;
            SetReply::Decided(Ok(Attempt::Acquired(Fence::new(f))))
        }
        _ => SetReply::Undecided,
    }
}

/// Answer every job with `e`.
fn fail(jobs: Vec<Job>, e: &Error) {
    for job in jobs {
        match job {
            Job::Acquire { reply, .. } => {
                let _ = reply.send(Err(e.share()));
            }
            Job::Release { reply, .. } => {
                let _ = reply.send(Err(e.share()));
            }
        }
    }
}

/// The first of the `n` fences an `INCRBY counter n` that returned `top`
/// reserved, or `None` when they are not all above [`FENCE_FLOOR`].
fn first_fence(top: i64, n: usize) -> Option<u64> {
    u64::try_from(top)
        .ok()
        .and_then(|t| t.checked_sub(n as u64))
        .filter(|before| *before >= FENCE_FLOOR)
        .map(|before| before + 1)
}

/// One call for jobs of one kind (and one slot).
async fn send_group(backend: &Backend, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    if matches!(jobs.first(), Some(Job::Acquire { .. })) {
        if backend.batch_by_slot() {
            acquire_script(backend, &ACQUIRE_MANY, jobs).await;
        } else {
            send_acquires(backend, jobs).await;
        }
        return;
    }
    if !backend.batch_by_slot() && backend.native(Capability::CompareAndDelete) {
        release_native(backend, jobs).await;
        return;
    }
    release_script(backend, jobs).await;
}

/// Releases of one call through `release_many.lua`.
async fn release_script(backend: &Backend, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let timeout = max_timeout(&jobs);
    let bytes: usize = jobs.iter().map(Job::bytes).sum();
    let releases = jobs.iter().filter_map(|job| match job {
        Job::Release { keys, token, .. } => Some((keys.as_ref(), token)),
        Job::Acquire { .. } => None,
    });
    let mut cmd = evalsha(&RELEASE_MANY, 2 * jobs.len(), 2 * jobs.len(), bytes);
    release_args(&mut cmd, releases);
    let reply: Result<Vec<i64>> = backend.evalsha_within(timeout, &RELEASE_MANY, &cmd).await;
    let mut codes = checked(reply, jobs.len());
    for job in jobs {
        if let Job::Release { reply, .. } = job {
            let r = match &mut codes {
                Ok(c) => c.next().map_or_else(
                    || Err(Error::protocol("short release_many reply")),
                    release_reply,
                ),
                Err(e) => Err(e.share()),
            };
            let _ = reply.send(r);
        }
    }
}

/// The keys and arguments of `releases` in a `release_many.lua` call.
fn release_args<'a>(
    cmd: &mut Cmd,
    releases: impl Iterator<Item = (&'a LockKeys, &'a Token)> + Clone,
) {
    for (keys, _) in releases.clone() {
        cmd.arg(&keys.lock).arg(&keys.waiters);
    }
    for (keys, token) in releases {
        cmd.arg(token.as_str()).arg(&keys.channel);
    }
}

impl Node {
    /// One release alone on its connection through `release_many.lua`:
    /// what [`release_script`] does for a batch of one, answered directly,
    /// in the command buffer the last one used.
    async fn release_alone(
        &self,
        keys: &LockKeys,
        token: &Token,
        timeout: Duration,
    ) -> Result<Outcome> {
        let spare = self
            .spare
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let mut cmd = match spare {
            Some(mut cmd) => {
                cmd.clear();
                cmd
            }
            None => Cmd::with_capacity(
                7,
                128 + keys.lock.len()
                    + keys.waiters.len()
                    + keys.channel.len()
                    + token.as_str().len(),
            ),
        };
        cmd.arg("EVALSHA").arg(RELEASE_MANY.get_hash()).arg(2);
        release_args(&mut cmd, std::iter::once((keys, token)));
        let reply: Result<Vec<i64>> = self
            .backend
            .evalsha_within(timeout, &RELEASE_MANY, &cmd)
            .await;
        *self
            .spare
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cmd);
        match checked(reply, 1) {
            Ok(mut codes) => codes.next().map_or_else(
                || Err(Error::protocol("short release_many reply")),
                release_reply,
            ),
            Err(e) => Err(e.share()),
        }
    }
}

/// The reply a job's channel got from a call that has ended.
fn answer<T>(mut rx: oneshot::Receiver<Result<T>>) -> Result<T> {
    rx.try_recv()
        .unwrap_or_else(|_| Err(Error::protocol("a batched call ended without a reply")))
}

/// Releases on one server with a native compare-and-delete (Valkey 9's
/// `DELIFEQ`): no script. One pipeline, not a transaction, per batch:
///
/// ```text
/// DELIFEQ lock_1 token_1; ...; DELIFEQ lock_n token_n; MGET waiters_1 ... waiters_n
/// ```
///
/// It decides exactly what `release_many.lua` decides: `DELIFEQ` deletes the
/// lock only while it holds the caller's token, atomically (the invariant
/// both paths share: a release never deletes a lock that is not the
/// caller's). For each lock it released whose waiters marker exists, a
/// second round trip (only then) deletes the marker and publishes the
/// wake-up, before the release answers: `DEL waiters; PUBLISH channel`.
///
/// Why no wake-up is missed: a waiter sets the marker in the same script
/// call that finds the lock busy (`acquire_many.lua`), after subscribing; so
/// a waiter that found the lock busy before the `DELIFEQ` has its marker
/// seen by the `MGET` after it, and one that tried after the `DELIFEQ` found
/// the lock free. The marker's `DEL` is not atomic with the release: it may
/// delete a marker that a waiter of the next holder set in between, but the
/// `PUBLISH` after it wakes that waiter too, which tries again, finds the
/// lock busy and sets its marker again: whoever deletes a marker publishes
/// after it. (Publishing before answering means that a process that ends
/// right after its release has published.)
///
/// Where the script answers in the same call whether a lock that was not
/// ours had expired or was taken, this path asks `EXISTS` afterwards, for
/// those locks only: not atomic, so a lock that expired and was taken again
/// in between reads as taken (both mean the lock was lost before the
/// release, and no decision depends on which; if `EXISTS` fails, the answer
/// is `Expired`).
///
/// A job whose `DELIFEQ` failed goes to the script in the same call (a
/// server short of memory, a key that is not a string: the script decides
/// and reports those as it always did, and wakes the waiters if the marker
/// is there). A server that refuses `DELIFEQ` itself (unknown, renamed by a
/// proxy, or not allowed to this user) also switches the native release off
/// for this deployment, with one warning. Everything after the pipeline runs
/// within what is left of the deadline.
async fn release_native(backend: &Backend, jobs: Vec<Job>) {
    let deadline = tokio::time::Instant::now() + max_timeout(&jobs).min(backend.timeout());
    let mut pipe = redis::Pipeline::with_capacity(jobs.len() + 1);
    pipe.ignore_errors();
    for job in &jobs {
        if let Job::Release { keys, token, .. } = job {
            pipe.cmd("DELIFEQ").arg(&keys.lock).arg(token.as_str());
        }
    }
    let mget = pipe.cmd("MGET");
    for job in &jobs {
        if let Job::Release { keys, .. } = job {
            mget.arg(&keys.waiters);
        }
    }
    let replies = match backend.pipeline_within(max_timeout(&jobs), &pipe).await {
        Ok(r) if r.len() == jobs.len() + 1 => r,
        Ok(r) => {
            let e = Error::protocol(format!(
                "the release pipeline returned {} replies for {}",
                r.len(),
                jobs.len() + 1
            ));
            fail(jobs, &e);
            return;
        }
        Err(e) => {
            fail(jobs, &e);
            return;
        }
    };
    let mut replies = replies.into_iter();
    // Which locks have waiters; if the MGET failed (a user without
    // `+mget`), every released lock publishes.
    let markers: Option<Vec<Value>> = match replies.next_back() {
        Some(Value::Array(values)) if values.len() == jobs.len() => Some(values),
        _ => None,
    };
    let waited = |i: usize| {
        markers
            .as_ref()
            .is_none_or(|m| !matches!(m.get(i), Some(Value::Nil) | None))
    };
    let mut wake = Vec::new();
    let (mut released, mut by_script, mut unsure) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (job, deleted)) in jobs.into_iter().zip(replies).enumerate() {
        match deleted {
            Value::Int(1) => {
                if let Job::Release { keys, .. } = &job
                    && waited(i)
                {
                    wake.push(keys.clone());
                }
                released.push(job);
            }
            Value::Int(0) => unsure.push(job),
            Value::ServerError(e) => {
                if server::refuses_command(&e) {
                    backend.native_refused(
                        Capability::CompareAndDelete,
                        e.details().unwrap_or(e.code()),
                    );
                } else {
                    tracing::debug!(error = ?e, "DELIFEQ failed; the script decides this release");
                }
                by_script.push(job);
            }
            other => {
                if let Job::Release { reply, .. } = job {
                    let _ = reply.send(Err(Error::protocol(format!("DELIFEQ replied {other:?}"))));
                }
            }
        }
    }
    publish_released(backend, wake, deadline).await;
    for job in released {
        if let Job::Release { reply, .. } = job {
            let _ = reply.send(Ok(Outcome::Done));
        }
    }
    futures_util::future::join(
        release_script(backend, within(by_script, deadline)),
        not_ours(backend, within(unsure, deadline)),
    )
    .await;
}

/// `jobs` with their deadlines cut to `deadline` (a follow-up call of the
/// same batch gets what is left, never a fresh deadline).
fn within(mut jobs: Vec<Job>, deadline: tokio::time::Instant) -> Vec<Job> {
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    for job in &mut jobs {
        if let Job::Release { timeout, .. } = job {
            *timeout = (*timeout).min(left);
        }
    }
    jobs
}

/// Answer releases whose `DELIFEQ` deleted nothing: `Expired` when the key
/// is gone now (or `EXISTS` could not tell), `NotHeld` when another token
/// holds it.
async fn not_ours(backend: &Backend, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let mut pipe = redis::Pipeline::with_capacity(jobs.len());
    for job in &jobs {
        if let Job::Release { keys, .. } = job {
            pipe.cmd("EXISTS").arg(&keys.lock);
        }
    }
    let found: Vec<i64> = match backend.pipeline_within(max_timeout(&jobs), &pipe).await {
        Ok(values) => values
            .into_iter()
            .map(|v| redis::from_redis_value(v).unwrap_or(0))
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "EXISTS after a release failed; answering Expired");
            Vec::new()
        }
    };
    for (i, job) in jobs.into_iter().enumerate() {
        if let Job::Release { reply, .. } = job {
            let outcome = if found.get(i) == Some(&1) {
                Outcome::NotHeld
            } else {
                Outcome::Expired
            };
            let _ = reply.send(Ok(outcome));
        }
    }
}

/// Delete the waiters marker of each of `locks` and publish its release
/// message (by `deadline`; a lost message costs a waiter its next poll, as a
/// lost script reply does).
async fn publish_released(
    backend: &Backend,
    locks: Vec<Arc<LockKeys>>,
    deadline: tokio::time::Instant,
) {
    if locks.is_empty() {
        return;
    }
    let mut pipe = redis::Pipeline::with_capacity(2 * locks.len());
    for keys in &locks {
        pipe.cmd("DEL").arg(&keys.waiters).ignore();
        pipe.cmd("PUBLISH")
            .arg(&keys.channel)
            .arg("released")
            .ignore();
    }
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if let Err(e) = backend.pipeline_within(left, &pipe).await {
        tracing::debug!(error = %e, "publishing a release failed; waiters poll");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_fences_count_only_above_the_floor() {
        let floor = FENCE_FLOOR as i64;
        assert_eq!(first_fence(floor + 8, 8), Some(FENCE_FLOOR + 1));
        assert_eq!(
            first_fence(floor + 7, 8),
            None,
            "the floor itself is no fence"
        );
        assert_eq!(first_fence(floor + 9, 8), Some(FENCE_FLOOR + 2));
        assert_eq!(first_fence(8, 8), None, "a new counter");
        assert_eq!(first_fence(-1, 1), None);
        assert_eq!(first_fence(5, 8), None);
    }
}
