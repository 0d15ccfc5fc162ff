//! Batched acquire and release of the read-write lock: its requests for the
//! batching service ([`crate::services::batch`]). Concurrent read and write
//! attempts and releases of one client travel as one `acquire_many.lua` /
//! `release_many.lua` call; every operation in a batch is decided on its
//! own, exactly as it would be alone, in submission order. A lone operation
//! is a batch of one: these two scripts are the only implementation of the
//! acquire and release decisions. On a connection that may be a Redis
//! Cluster, a batch is split by hash slot.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Script, Value};
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::backend::{Backend, evalsha, millis};
use crate::error::{Error, Result};
use crate::keys::{RwKeys, slot};
use crate::rwlock::ops::{self, Attempt, Mode};
use crate::services::batch::{BatchJob, Batcher, checked, code_of, pair_of};
use crate::services::held::extend_code;
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

/// The client's read-write-lock batcher (started on first use) and its
/// attempts that may still reach Redis; cheap to clone.
///
/// An attempt whose caller gave up (its deadline passed) or went away (its
/// future was dropped: a cancelled acquisition) may still be queued, or
/// waiting in a later phase of its batch, when the undo of that token (the
/// acquisition's `cancel.lua`, or the guard's release after a later attempt
/// of the same acquisition was granted) is sent: that undo would reach
/// Redis first, find nothing, and the attempt after it would leave a share,
/// the write lock or a waiting marker for nobody until its lease. So every
/// such attempt stays outstanding in `in_flight` until it is answered (the
/// call that carried it returned, or it was never sent), and an undo of its
/// token waits for it: then it is behind it on the connection (see
/// [`crate::services::outstanding`]). The wait counts against the undo's
/// deadline; past it the undo still goes out, in the background
/// ([`crate::Client::settle`] waits for it), once they are answered. This is
/// what `lock::batch::Node` does for the mutex.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    batcher: Arc<OnceLock<Batcher<Job>>>,
    /// This client's attempts that may still reach Redis.
    in_flight: InFlight,
}

impl Node {
    pub(crate) fn new(background: TaskTracker) -> Self {
        Node {
            batcher: Arc::new(OnceLock::new()),
            in_flight: InFlight::new(background),
        }
    }

    /// The batcher on `backend` (the client's one Redis: every call passes
    /// the same).
    fn batcher(&self, backend: &Backend) -> &Batcher<Job> {
        self.batcher.get_or_init(|| Batcher::new(backend.clone()))
    }

    /// One read or write attempt, batched with whatever else is pending;
    /// `marker` is a waiting writer's marker lease (zero: leave none).
    pub(crate) async fn acquire(
        &self,
        backend: &Backend,
        keys: &Arc<RwKeys>,
        mode: Mode,
        token: &Token,
        ttl: Duration,
        marker: Duration,
    ) -> Result<Attempt> {
        let timeout = backend.timeout();
        let (reply, rx) = oneshot::channel();
        let job = Job::Acquire {
            keys: keys.clone(),
            mode,
            token: token.clone(),
            ttl,
            marker,
            timeout,
            reply,
        };
        // Until the call returns with its answer, the job may outlive it: a
        // call that ends on its deadline or is dropped (cancelled) leaves it
        // outstanding until it is answered.
        self.batcher(backend)
            .submit_outstanding(job, rx, timeout, &self.in_flight, token)
            .await
    }

    /// One token-checked release of a read share or the write lock,
    /// batched with whatever else is pending; behind every attempt of the
    /// same token that may still reach Redis.
    pub(crate) async fn release(
        &self,
        backend: &Backend,
        keys: &Arc<RwKeys>,
        mode: Mode,
        token: &Token,
    ) -> Result<Outcome> {
        let job = |timeout, reply| Job::Release {
            keys: keys.clone(),
            mode,
            token: token.clone(),
            timeout,
            reply,
        };
        let timeout = match self.in_flight.behind(token, backend.timeout()).await {
            Ok(left) => left,
            Err(rest) => {
                // Not given up: sent once they are answered (a token-checked
                // release behind them is always safe), in the background.
                let (node, backend) = (self.clone(), backend.clone());
                let timeout = backend.timeout();
                let (reply, rx) = oneshot::channel();
                let late = job(timeout, reply);
                self.in_flight.background.spawn(async move {
                    rest.await;
                    if let Err(e) = node.batcher(&backend).submit(late, rx, timeout).await {
                        tracing::warn!(error = %e, "a late rwlock release failed; the lease will free it");
                    }
                });
                return Err(Error::Timeout(timeout));
            }
        };
        let (reply, rx) = oneshot::channel();
        self.batcher(backend)
            .submit(job(timeout, reply), rx, timeout)
            .await
    }

    /// Wait, within the client's deadline, until no attempt of `token` may
    /// still reach Redis, for an operation on the lock that must not be
    /// overtaken by one (`downgrade.lua`: a late write attempt of the token
    /// would find the token's read share, and leave a waiting marker for
    /// nobody, or, the share gone, the write lock): what is left of the
    /// deadline, or [`Error::Timeout`].
    pub(crate) async fn behind_attempts(
        &self,
        backend: &Backend,
        token: &Token,
    ) -> Result<Duration> {
        let timeout = backend.timeout();
        self.in_flight
            .behind(token, timeout)
            .await
            .map_err(|_| Error::Timeout(timeout))
    }

    /// Forget an acquisition that gave up (`cancel.lua`): behind every
    /// attempt of its token that may still reach Redis, within the client's
    /// deadline; past it, once they are answered, in the background.
    pub(crate) async fn cancel(&self, backend: &Backend, keys: &Arc<RwKeys>, token: &Token) {
        match self.in_flight.behind(token, backend.timeout()).await {
            Ok(_) => {
                if let Err(e) = ops::cancel(backend, keys, token).await {
                    tracing::debug!(error = %e, "an rwlock cancel failed; the leases will free it");
                }
            }
            Err(rest) => {
                let (backend, keys, token) = (backend.clone(), keys.clone(), token.clone());
                self.in_flight.background.spawn(async move {
                    rest.await;
                    if let Err(e) = ops::cancel(&backend, &keys, &token).await {
                        tracing::debug!(error = %e, "a late rwlock cancel failed; the leases will free it");
                    }
                });
            }
        }
    }
}

/// One caller's request.
pub(crate) enum Job {
    Acquire {
        keys: Arc<RwKeys>,
        mode: Mode,
        token: Token,
        ttl: Duration,
        /// A waiting writer's marker lease (zero: leave none).
        marker: Duration,
        timeout: Duration,
        reply: oneshot::Sender<Result<Attempt>>,
    },
    Release {
        keys: Arc<RwKeys>,
        mode: Mode,
        token: Token,
        timeout: Duration,
        reply: oneshot::Sender<Result<Outcome>>,
    },
}

impl Job {
    fn keys(&self) -> &RwKeys {
        match self {
            Job::Acquire { keys, .. } | Job::Release { keys, .. } => keys,
        }
    }

    fn acquire(&self) -> bool {
        matches!(self, Job::Acquire { .. })
    }

    fn timeout(&self) -> Duration {
        match self {
            Job::Acquire { timeout, .. } | Job::Release { timeout, .. } => *timeout,
        }
    }

    /// About how many bytes its keys and arguments take in a command.
    fn bytes(&self) -> usize {
        let k = self.keys();
        let token = match self {
            Job::Acquire { token, .. } | Job::Release { token, .. } => token.as_str().len(),
        };
        k.writer.len()
            + k.readers.len()
            + k.waiting.len()
            + k.fence.len()
            + k.readable.len()
            + k.writable.len()
            + token
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
        f.write_str(match self {
            Job::Acquire { .. } => "Acquire",
            Job::Release { .. } => "Release",
        })
    }
}

impl BatchJob for Job {
    async fn send(backend: &Backend, jobs: Vec<Self>) {
        for phase in phases(jobs) {
            send_phase(backend, phase).await;
        }
    }
}

/// A gathered batch in submission order, cut into phases sent one after the
/// other: a job on a lock that an earlier job of the other kind (acquire or
/// release) in the same phase touches starts a new phase. So a release
/// never overtakes an attempt of the batch before it (a caller that gave up
/// on an attempt undoes its token), nor an attempt the release before it.
/// Within a phase the two kinds go out at once: they touch different locks.
fn phases(jobs: Vec<Job>) -> Vec<Vec<Job>> {
    let mut out = Vec::new();
    let mut phase: Vec<Job> = Vec::with_capacity(jobs.len());
    // Lock (its writer key) -> kind in this phase.
    let mut kinds: HashMap<String, bool> = HashMap::new();
    let one_kind = jobs.iter().all(|j| j.acquire()) || jobs.iter().all(|j| !j.acquire());
    if one_kind {
        return vec![jobs];
    }
    for job in jobs {
        let acquire = job.acquire();
        let key = &job.keys().writer;
        if kinds.get(key).is_some_and(|k| *k != acquire) {
            out.push(std::mem::take(&mut phase));
            kinds.clear();
        }
        kinds.insert(key.clone(), acquire);
        phase.push(job);
    }
    out.push(phase);
    out
}

/// Jobs without an order between them: one script call per kind (and per
/// hash slot on a possible cluster), all at once.
async fn send_phase(backend: &Backend, jobs: Vec<Job>) {
    let mut groups: HashMap<(bool, u16), Vec<Job>> = HashMap::new();
    for job in jobs {
        let at = if backend.batch_by_slot() {
            slot(&job.keys().writer)
        } else {
            0
        };
        groups.entry((job.acquire(), at)).or_default().push(job);
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

/// One `acquire_many.lua` call for `jobs`, all attempts (of one slot on a
/// possible cluster).
async fn acquire_script(backend: &Backend, jobs: Vec<Job>) {
    let bytes: usize = jobs.iter().map(Job::bytes).sum();
    let mut cmd = evalsha(&ACQUIRE_MANY, 4 * jobs.len(), 4 * jobs.len(), bytes);
    for job in &jobs {
        let k = job.keys();
        cmd.arg(&k.writer)
            .arg(&k.readers)
            .arg(&k.waiting)
            .arg(&k.fence);
    }
    for job in &jobs {
        if let Job::Acquire {
            mode,
            token,
            ttl,
            marker,
            ..
        } = job
        {
            cmd.arg(mode.arg())
                .arg(token.as_str())
                .arg(millis(*ttl))
                .arg(millis(*marker));
        }
    }
    let reply: Result<Vec<Value>> = backend
        .evalsha_within(max_timeout(&jobs), &ACQUIRE_MANY, &cmd)
        .await;
    let mut codes = match checked(reply, 2 * jobs.len()) {
        Ok(codes) => codes,
        Err(e) => {
            for job in jobs {
                job.fail(&e);
            }
            return;
        }
    };
    for job in jobs {
        if let Job::Acquire { keys, reply, .. } = job {
            let r = match (codes.next(), codes.next()) {
                (Some(code), Some(n)) => {
                    pair_of(code, n, &keys.writer).and_then(|(code, n)| ops::acquire_reply(code, n))
                }
                _ => Err(Error::protocol("short rw acquire_many reply")),
            };
            let _ = reply.send(r);
        }
    }
}

/// One `release_many.lua` call for `jobs`, all releases (of one slot on a
/// possible cluster).
async fn release_script(backend: &Backend, jobs: Vec<Job>) {
    let bytes: usize = jobs.iter().map(Job::bytes).sum();
    let mut cmd = evalsha(&RELEASE_MANY, 3 * jobs.len(), 4 * jobs.len(), bytes);
    for job in &jobs {
        let k = job.keys();
        cmd.arg(&k.writer).arg(&k.readers).arg(&k.waiting);
    }
    for job in &jobs {
        if let Job::Release {
            keys, mode, token, ..
        } = job
        {
            cmd.arg(mode.arg())
                .arg(token.as_str())
                .arg(&keys.readable)
                .arg(&keys.writable);
        }
    }
    let reply: Result<Vec<Value>> = backend
        .evalsha_within(max_timeout(&jobs), &RELEASE_MANY, &cmd)
        .await;
    let mut codes = match checked(reply, jobs.len()) {
        Ok(codes) => codes,
        Err(e) => {
            for job in jobs {
                job.fail(&e);
            }
            return;
        }
    };
    for job in jobs {
        if let Job::Release { keys, reply, .. } = job {
            let r = codes.next().map_or_else(
                || Err(Error::protocol("short rw release_many reply")),
                |code| extend_code(code_of(code, &keys.writer)?),
            );
            let _ = reply.send(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, acquire: bool) -> Job {
        let keys = Arc::new(crate::keys::rw_keys("dlm:", name).expect("a valid name"));
        let token = Token::random().expect("a token");
        if acquire {
            let (reply, _) = oneshot::channel();
            Job::Acquire {
                keys,
                mode: Mode::Write,
                token,
                ttl: Duration::from_secs(1),
                marker: Duration::ZERO,
                timeout: Duration::from_secs(1),
                reply,
            }
        } else {
            let (reply, _) = oneshot::channel();
            Job::Release {
                keys,
                mode: Mode::Read,
                token,
                timeout: Duration::from_secs(1),
                reply,
            }
        }
    }

    #[test]
    fn a_lock_that_comes_back_with_the_other_kind_starts_a_phase() {
        let sizes = |jobs: Vec<Job>| phases(jobs).iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(vec![job("a", true), job("b", true)]), vec![2]);
        assert_eq!(
            sizes(vec![job("a", true), job("b", false), job("c", true)]),
            vec![3]
        );
        assert_eq!(
            sizes(vec![job("a", false), job("a", true), job("b", false)]),
            vec![1, 2]
        );
        assert_eq!(
            sizes(vec![
                job("a", true),
                job("a", true),
                job("a", false),
                job("a", true)
            ]),
            vec![2, 1, 1]
        );
    }
}
