//! Auto-batching: calls that overlap on one connection travel to Redis as
//! one script call.
//!
//! Up to [`MAX_IN_FLIGHT`] batches are on the wire at once. A call that finds
//! the connection idle sends at once, from its own task; one that finds other
//! batches on the wire but a free slot yields once to the tasks that are
//! ready, then sends whatever has queued meanwhile, its own request included;
//! one that finds no free slot queues its request, and the batch that frees a
//! slot hands the queue on. So a lone caller pays no delay,
//! while many concurrent callers share one script call (one command to parse
//! and one Lua entry on the server, one frame and one reply on the client)
//! instead of one each. Every caller waits for its own reply only until its
//! own deadline.
//!
//! The mechanics live here; what a request is and how a gathered batch is
//! sent (which script, split by kind and hash slot) is the primitive's
//! [`BatchJob`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::services::outstanding::{InFlight, Unanswered};
use crate::token::Token;

/// Batches on the wire at once; while they are, new requests gather.
pub(crate) const MAX_IN_FLIGHT: usize = 4;
/// Most requests in one batch.
pub(crate) const MAX_BATCH: usize = 256;

/// One caller's request, carrying the sender of its own reply.
pub(crate) trait BatchJob: Send + Sized + 'static {
    /// Send a gathered batch on `backend` and answer every job in it.
    fn send(backend: &Backend, jobs: Vec<Self>) -> impl Future<Output = ()> + Send;
}

/// A connection's batcher: requests gather here while enough batches are
/// already on the wire.
pub(crate) struct Batcher<J> {
    shared: Arc<Shared<J>>,
}

impl<J> std::fmt::Debug for Batcher<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl<J> Clone for Batcher<J> {
    fn clone(&self) -> Self {
        Batcher {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<J> {
    backend: Backend,
    state: Mutex<State<J>>,
}

struct State<J> {
    /// Requests waiting for a free slot.
    queue: Vec<J>,
    /// Batches on the wire.
    in_flight: usize,
}

impl<J: BatchJob> Batcher<J> {
    /// A batcher sending on `backend`.
    pub(crate) fn new(backend: Backend) -> Self {
        Batcher {
            shared: Arc::new(Shared {
                backend,
                state: Mutex::new(State {
                    queue: Vec::new(),
                    in_flight: 0,
                }),
            }),
        }
    }

    /// The slot of an idle connection (no batch on the wire, none queued),
    /// for one request that its caller sends at once from its own task: what
    /// [`Batcher::submit`] does with a request alone in its batch, without
    /// the job, reply channel and batch vector that carry it there (one task
    /// at a time pays for none of them). Dropping it frees the slot, handing
    /// on whatever queued meanwhile, as a batch's slot does.
    pub(crate) fn alone(&self) -> Option<Alone<J>> {
        let mut st = self.shared.lock();
        if st.in_flight != 0 || !st.queue.is_empty() {
            return None;
        }
        st.in_flight += 1;
        Some(Alone {
            _slot: Slot(self.shared.clone()),
        })
    }

    /// With a free slot, send this request and what is queued now from this
    /// task; else queue it for the next batch. Either way, wait for its own
    /// reply (`rx`, answered through `job`) only until `timeout`.
    pub(crate) async fn submit<T>(
        &self,
        job: J,
        mut rx: oneshot::Receiver<Result<T>>,
        timeout: Duration,
    ) -> Result<T> {
        self.submit_keeping(job, &mut rx, timeout)
            .await
            .map_err(|(e, _)| e)
    }

    /// [`Batcher::submit`] for a request that may set `token` in Redis: if
    /// the call ends before its answer (its deadline passed, or its future
    /// was dropped), the request stays outstanding in `in_flight` until it
    /// is answered, so that an undo of `token` goes behind it (see
    /// [`crate::services::outstanding`]).
    pub(crate) async fn submit_outstanding<T: Send + 'static>(
        &self,
        job: J,
        rx: oneshot::Receiver<Result<T>>,
        timeout: Duration,
        in_flight: &InFlight,
        token: &Token,
    ) -> Result<T> {
        let mut waiting = Unanswered::new(in_flight, token, rx);
        let r = match waiting.reply.as_mut() {
            Some(rx) => self.submit_keeping(job, rx, timeout).await,
            None => Err((Error::protocol("a request without its reply"), false)),
        };
        // Answered (or never sent): nothing is left on its way.
        if !matches!(r, Err((_, true))) {
            waiting.reply = None;
        }
        r.map_err(|(e, _)| e)
    }

    /// [`Batcher::submit`] with the receiver of the job's reply left with
    /// the caller, who keeps it when the call ends on its deadline (`true`
    /// with the error: the job may not be answered yet: queued, in a later
    /// phase of its batch, or on the wire) or is dropped before it returns
    /// (cancelled). That receiver resolves once the job is answered or
    /// dropped, i.e. once the call that carried it returned (or it was never
    /// sent); until then a request sent now may reach Redis before it (see
    /// `lock::batch::Node`).
    pub(crate) async fn submit_keeping<T>(
        &self,
        job: J,
        rx: &mut oneshot::Receiver<Result<T>>,
        timeout: Duration,
    ) -> std::result::Result<T, (Error, bool)> {
        let batch = {
            let mut st = self.shared.lock();
            if st.in_flight == 0 {
                // An idle connection: send at once.
                st.in_flight += 1;
                let n = st.queue.len().min(MAX_BATCH - 1);
                let mut batch: Vec<J> = st.queue.drain(..n).collect();
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
                J::send(&self.shared.backend, alone).await;
                drop(slot);
                return rx
                    .try_recv()
                    .unwrap_or_else(|_| {
                        Err(Error::protocol("a batched call ended without a reply"))
                    })
                    .map_err(|e| (e, false));
            }
            other => other,
        };
        let mut leading = Leading(batch.map(|b| Box::pin(lead(self.shared.clone(), b)) as _));
        let expiry = tokio::time::sleep(timeout);
        tokio::pin!(expiry);
        loop {
            tokio::select! {
                biased;
                r = &mut *rx => {
                    return r
                        .unwrap_or_else(|_| {
                            Err(Error::Unavailable {
                                source: "the batch carrying this request was abandoned".into(),
                            })
                        })
                        .map_err(|e| (e, false));
                }
                () = &mut leading, if leading.0.is_some() => {}
                () = &mut expiry => return Err((Error::Timeout(timeout), true)),
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
async fn lead<J: BatchJob>(shared: Arc<Shared<J>>, mut batch: Vec<J>) {
    let _slot = Slot(shared.clone());
    if batch.is_empty() {
        tokio::task::yield_now().await;
        let mut st = shared.lock();
        let n = st.queue.len().min(MAX_BATCH);
        batch = st.queue.drain(..n).collect();
    }
    J::send(&shared.backend, batch).await;
}

impl<J> Shared<J> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<J>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The slot a lone request holds while it is on the wire (see [`Batcher::alone`]).
pub(crate) struct Alone<J: BatchJob> {
    _slot: Slot<J>,
}

impl<J: BatchJob> std::fmt::Debug for Alone<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alone").finish_non_exhaustive()
    }
}

/// A batch slot; freeing it hands what queued meanwhile to a flusher task.
struct Slot<J: BatchJob>(Arc<Shared<J>>);

impl<J: BatchJob> Drop for Slot<J> {
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
async fn flush<J: BatchJob>(shared: Arc<Shared<J>>) {
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
        J::send(&shared.backend, batch).await;
    }
}

/// The reply's codes, or an error when it does not have `len` of them.
pub(crate) fn checked<T>(reply: Result<Vec<T>>, len: usize) -> Result<std::vec::IntoIter<T>> {
    let codes = reply?;
    if codes.len() != len {
        return Err(Error::protocol(format!(
            "batched script returned {} values for {len}",
            codes.len()
        )));
    }
    Ok(codes.into_iter())
}

/// The error of one lock of a batched script's call: a Redis error (e.g.
/// `WRONGTYPE`, a key of another type than dlm writes) that the script
/// caught while deciding that lock alone, as `message` said it. The other
/// locks of the call were decided regardless.
pub(crate) fn lock_error(key: &str, message: &str) -> Error {
    Error::protocol(format!("lock {key:?}: {message}"))
}

/// One lock's code in a reply of one code per lock: an integer, or in its
/// place the message of a Redis error on that lock alone (see
/// [`lock_error`]; `key` names the lock).
pub(crate) fn code_of(value: Value, key: &str) -> Result<i64> {
    match value {
        Value::Int(code) => Ok(code),
        Value::BulkString(message) => Err(lock_error(key, &String::from_utf8_lossy(&message))),
        other => Ok(redis::from_redis_value(other)?),
    }
}

/// One lock's pair in a reply of two entries per lock: `(code, n)`, or for
/// code -4, `n` is the message of a Redis error on that lock alone (see
/// [`lock_error`]; `key` names the lock).
pub(crate) fn pair_of(code: Value, n: Value, key: &str) -> Result<(i64, i64)> {
    let code: i64 = redis::from_redis_value(code)?;
    if code == -4 {
        let message: String = redis::from_redis_value(n)?;
        return Err(lock_error(key, &message));
    }
    Ok((code, redis::from_redis_value(n)?))
}

/// Split a gathered batch into phases that keep its submission order where
/// it matters: a job that does the other kind of operation (`kind`: e.g.
/// acquire or release) on a key an earlier job of the current phase touched
/// starts a new phase, to be sent once the one before has its replies. So a
/// release never overtakes the acquire it undoes, nor an acquire the release
/// before it; jobs within one phase have no order between them.
pub(crate) fn phases<'a, J: 'a>(jobs: Vec<J>, of: impl Fn(&J) -> (&str, bool)) -> Vec<Vec<J>> {
    use std::hash::BuildHasher;
    let hasher = std::collections::hash_map::RandomState::new();
    let mut out = Vec::with_capacity(1);
    let mut phase: Vec<J> = Vec::with_capacity(jobs.len());
    // Key hash -> kind in this phase (a collision only splits a phase early).
    let mut kinds: std::collections::HashMap<u64, bool> = std::collections::HashMap::new();
    for job in jobs {
        let (key, kind) = of(&job);
        let key = hasher.hash_one(key);
        if kinds.get(&key).is_some_and(|k| *k != kind) {
            out.push(std::mem::take(&mut phase));
            kinds.clear();
        }
        kinds.insert(key, kind);
        phase.push(job);
    }
    out.push(phase);
    out
}

#[cfg(test)]
mod tests {
    use super::phases;

    #[test]
    fn phases_split_only_where_a_key_changes_kind() {
        let jobs = vec![
            ("a", true),
            ("b", true),
            ("a", true),
            ("b", false),
            ("c", false),
            ("b", true),
        ];
        let split = phases(jobs, |j| (j.0, j.1));
        assert_eq!(
            split,
            vec![
                vec![("a", true), ("b", true), ("a", true)],
                vec![("b", false), ("c", false)],
                vec![("b", true)],
            ]
        );
    }
}
