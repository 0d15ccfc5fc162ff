//! Auto-batching: acquire and release calls that overlap on one connection
//! travel to Redis as one script call.
//!
//! Up to [`MAX_IN_FLIGHT`] batches are on the wire at once. A call that finds
//! the connection idle sends at once, from its own task; one that finds other
//! batches on the wire but a free slot yields once to the tasks that are
//! ready, then sends whatever has queued meanwhile, its own request included;
//! one that finds no free slot queues its request, and the batch that frees a
//! slot hands the queue on. So a lone caller pays no delay,
//! while many concurrent callers share one script call (one command to parse
//! and one Lua entry on the server, one frame and one reply on the client)
//! instead of one each. Every lock in a batch is decided on its own, exactly
//! as a single call would decide it, and every caller waits for its own reply
//! only until its own deadline.
//!
//! On a connection that may be a Redis Cluster, a batch is split by hash slot.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::join_all;
use redis::Script;
use tokio::sync::oneshot;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::{LockKeys, slot};
use crate::lock::Outcome;
use crate::lock::ops::{Attempt, acquire_reply, millis, release_reply};
use crate::token::Token;

static ACQUIRE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire_many.lua")));
static RELEASE_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release_many.lua")));

/// Batches on the wire at once; while they are, new requests gather.
const MAX_IN_FLIGHT: usize = 4;
/// Most locks in one script call.
const MAX_BATCH: usize = 256;

/// One caller's request.
enum Job {
    Acquire {
        keys: Arc<LockKeys>,
        token: Token,
        ttl: Duration,
        timeout: Duration,
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
    fn key(&self) -> &str {
        match self {
            Job::Acquire { keys, .. } | Job::Release { keys, .. } => &keys.lock,
        }
    }
}

/// A connection's batcher: requests gather here while enough batches are
/// already on the wire.
#[derive(Debug, Clone)]
pub(crate) struct Batcher {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    backend: Backend,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Requests waiting for a free slot.
    queue: Vec<Job>,
    /// Batches on the wire.
    in_flight: usize,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Job::Acquire { .. } => "Acquire",
            Job::Release { .. } => "Release",
        })
    }
}

impl Batcher {
    /// A batcher sending on `backend` (which must not itself batch).
    pub(crate) fn new(backend: Backend) -> Self {
        Batcher {
            shared: Arc::new(Shared {
                backend,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// One acquire attempt, batched with whatever else is pending.
    pub(crate) async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Attempt> {
        let (reply, rx) = oneshot::channel();
        let job = Job::Acquire {
            keys: keys.clone(),
            token: token.clone(),
            ttl,
            timeout,
            reply,
        };
        self.submit(job, rx, timeout).await
    }

    /// One token-checked release, batched with whatever else is pending.
    pub(crate) async fn release(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        timeout: Duration,
    ) -> Result<Outcome> {
        let (reply, rx) = oneshot::channel();
        let job = Job::Release {
            keys: keys.clone(),
            token: token.clone(),
            timeout,
            reply,
        };
        self.submit(job, rx, timeout).await
    }

    /// With a free slot, send this request and what is queued now from this
    /// task; else queue it for the next batch. Either way, wait for its own
    /// reply only until `timeout`.
    async fn submit<T>(
        &self,
        job: Job,
        mut rx: oneshot::Receiver<Result<T>>,
        timeout: Duration,
    ) -> Result<T> {
        let batch = {
            let mut st = self.shared.lock();
            if st.in_flight == 0 {
                // An idle connection: send at once.
                st.in_flight += 1;
                let n = st.queue.len().min(MAX_BATCH - 1);
                let mut batch: Vec<Job> = st.queue.drain(..n).collect();
                batch.push(job);
                Some(batch)
            } else if st.in_flight < MAX_IN_FLIGHT {
                // Others are on the wire: let the tasks that are ready run
                // first, so their requests join this batch (see `lead`).
                st.in_flight += 1;
                st.queue.push(job);
                Some(Vec::new())
            } else {
                st.queue.push(job);
                None
            }
        };
        let batch = match batch {
            Some(alone) if alone.len() == 1 => {
                // Alone in its batch: nobody else waits on it, so send it
                // from here, under the call's own deadline.
                let slot = Slot(self.shared.clone());
                send(&self.shared.backend, alone).await;
                drop(slot);
                return rx.try_recv().unwrap_or_else(|_| {
                    Err(Error::protocol("a batched call ended without a reply"))
                });
            }
            other => other,
        };
        let mut leading = Leading(batch.map(|b| Box::pin(lead(self.shared.clone(), b)) as _));
        let expiry = tokio::time::sleep(timeout);
        tokio::pin!(expiry);
        loop {
            tokio::select! {
                biased;
                r = &mut rx => {
                    return r.unwrap_or_else(|_| {
                        Err(Error::Unavailable {
                            source: "the batch carrying this request was abandoned".into(),
                        })
                    });
                }
                () = &mut leading, if leading.0.is_some() => {}
                () = &mut expiry => return Err(Error::Timeout(timeout)),
            }
        }
    }
}

/// A batch this task sends. If the task stops waiting first (its deadline
/// passed, or its future was dropped), the batch goes on in a task of its
/// own, so the other callers in it still get their replies.
struct Leading(Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Future for Leading {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(fut) = self.0.as_mut() else {
            return Poll::Pending;
        };
        let done = fut.as_mut().poll(cx);
        if done.is_ready() {
            self.0 = None;
        }
        done
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        if let Some(fut) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(fut);
        }
    }
}

/// Send one batch holding a slot; an empty `batch` means: yield once, then
/// take what has queued (this caller's request included).
async fn lead(shared: Arc<Shared>, mut batch: Vec<Job>) {
    let _slot = Slot(shared.clone());
    if batch.is_empty() {
        tokio::task::yield_now().await;
        let mut st = shared.lock();
        let n = st.queue.len().min(MAX_BATCH);
        batch = st.queue.drain(..n).collect();
    }
    send(&shared.backend, batch).await;
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A batch slot; freeing it hands what queued meanwhile to a flusher task.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        if st.queue.is_empty() {
            st.in_flight -= 1;
            return;
        }
        // Keep the slot for the flusher, which sends until the queue is empty.
        drop(st);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(flush(self.0.clone()));
            }
            Err(_) => {
                let mut st = self.0.lock();
                st.queue.clear();
                st.in_flight -= 1;
            }
        }
    }
}

/// Send queued requests, a batch at a time, until none are left; then free the slot.
async fn flush(shared: Arc<Shared>) {
    loop {
        let batch = {
            let mut st = shared.lock();
            if st.queue.is_empty() {
                st.in_flight -= 1;
                return;
            }
            let n = st.queue.len().min(MAX_BATCH);
            st.queue.drain(..n).collect::<Vec<_>>()
        };
        send(&shared.backend, batch).await;
    }
}

/// Send one gathered batch: one script call per kind (and per hash slot on a
/// possible cluster), all at once.
async fn send(backend: &Backend, jobs: Vec<Job>) {
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

/// One script call for jobs of one kind (and one slot).
async fn send_group(backend: &Backend, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let timeout = jobs
        .iter()
        .map(|j| match j {
            Job::Acquire { timeout, .. } | Job::Release { timeout, .. } => *timeout,
        })
        .max()
        .unwrap_or_default();
    if matches!(jobs.first(), Some(Job::Acquire { .. })) {
        let mut inv = ACQUIRE_MANY.prepare_invoke();
        for job in &jobs {
            if let Job::Acquire {
                keys, token, ttl, ..
            } = job
            {
                inv.key(&keys.lock)
                    .key(&keys.fence)
                    .arg(token.as_str())
                    .arg(millis(*ttl));
            }
        }
        let reply: Result<Vec<i64>> = backend.eval_within(timeout, &inv).await;
        let mut codes = checked(reply, 2 * jobs.len());
        for job in jobs {
            if let Job::Acquire { reply, .. } = job {
                let r = match &mut codes {
                    Ok(c) => match (c.next(), c.next()) {
                        (Some(ok), Some(n)) => acquire_reply(ok, n),
                        _ => Err(Error::protocol("short acquire_many reply")),
                    },
                    Err(e) => Err(e.share()),
                };
                let _ = reply.send(r);
            }
        }
    } else {
        let mut inv = RELEASE_MANY.prepare_invoke();
        for job in &jobs {
            if let Job::Release { keys, token, .. } = job {
                inv.key(&keys.lock).arg(token.as_str()).arg(&keys.channel);
            }
        }
        let reply: Result<Vec<i64>> = backend.eval_within(timeout, &inv).await;
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
}

/// The reply's codes, or an error when it does not have `len` of them.
fn checked(reply: Result<Vec<i64>>, len: usize) -> Result<std::vec::IntoIter<i64>> {
    let codes = reply?;
    if codes.len() != len {
        return Err(Error::protocol(format!(
            "batched script returned {} values for {len}",
            codes.len()
        )));
    }
    Ok(codes.into_iter())
}
