//! Locks and their guards, sync and asyncio, over every lock-like primitive
//! of dlm (lock, fair lock, read-write lock, semaphore, election): the
//! acquisition and the guard's calls are the core's; this only keeps the
//! handle and translates.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::bridge::awaitable;
use crate::rt::{Record, block, err, opt_secs, rt, secs, state_err};

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What every guard of dlm can do; implemented for each core guard type.
pub trait Held: Send + Sync + 'static {
    fn extend(&self, ttl: Duration) -> BoxFut<'_, dlm::Result<()>>;
    fn release(self: Box<Self>) -> BoxFut<'static, dlm::Result<()>>;
}

macro_rules! held {
    ($t:ty) => {
        impl Held for $t {
            fn extend(&self, ttl: Duration) -> BoxFut<'_, dlm::Result<()>> {
                Box::pin(<$t>::extend(self, ttl))
            }
            fn release(self: Box<Self>) -> BoxFut<'static, dlm::Result<()>> {
                Box::pin(async move { <$t>::release(*self).await.map(|_| ()) })
            }
        }
    };
}
held!(dlm::LockGuard);
held!(dlm::FairGuard);
held!(dlm::ReadGuard);
held!(dlm::WriteGuard);
held!(dlm::SemaphoreGuard);
held!(dlm::Leadership);

impl Held for dlm::MultiGuard {
    fn extend(&self, _ttl: Duration) -> BoxFut<'_, dlm::Result<()>> {
        Box::pin(async {
            Err(dlm::Error::InvalidArgument {
                arg: "extend",
                reason: "a multi-lock guard is not extended by hand: use watchdog=True".into(),
            })
        })
    }
    fn release(self: Box<Self>) -> BoxFut<'static, dlm::Result<()>> {
        Box::pin(async move { dlm::MultiGuard::release(*self).await })
    }
}

/// What Python reads of a multi-lock guard.
pub fn acquired_multi(g: dlm::MultiGuard) -> Acquired {
    let guards = g.guards();
    let first = guards.first();
    Acquired {
        name: g.names().join(","),
        key: first.map(|f| f.key().to_string()).unwrap_or_default(),
        token: first
            .map(|f| f.token().as_str().to_string())
            .unwrap_or_default(),
        fence: first.and_then(|f| f.fence()).map(|f| f.get()),
        fences: g.fences().into_iter().map(|f| f.map(|f| f.get())).collect(),
        ttl: first.map(|f| f.ttl()).unwrap_or_default(),
        lost: g.lost_signals(),
        permits: None,
        held: Box::new(g),
    }
}

/// A held guard plus what Python reads without a round trip.
pub struct Acquired {
    pub held: Box<dyn Held>,
    pub name: String,
    pub key: String,
    pub token: String,
    pub fence: Option<u64>,
    pub fences: Vec<Option<u64>>,
    pub ttl: Duration,
    pub lost: Vec<dlm::LostSignal>,
    pub permits: Option<u32>,
}

macro_rules! acquired {
    ($g:expr, $fence:expr, $permits:expr) => {{
        let g = $g;
        $crate::guard::Acquired {
            name: g.name().to_string(),
            key: g.key().to_string(),
            token: g.token().as_str().to_string(),
            fence: $fence(&g),
            fences: vec![$fence(&g)],
            ttl: g.ttl(),
            lost: vec![g.lost_signal()],
            permits: $permits(&g),
            held: Box::new(g),
        }
    }};
}
pub(crate) use acquired;

/// The guard's slot: empty once released. Dropping a held guard releases it
/// in the background (inside the runtime, as the core does it).
struct Slot(Option<Box<dyn Held>>);

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            let _in_runtime = rt().enter();
            drop(h);
        }
    }
}

/// A guard's state as `is_lost()` reports it.
const HELD: u8 = 0;
/// Released while intact: given back, not lost.
const RELEASED: u8 = 1;
/// Released after (or while) it was lost.
const RELEASED_LOST: u8 = 2;

pub struct GuardCore {
    slot: Arc<tokio::sync::Mutex<Slot>>,
    state: Arc<AtomicU8>,
    name: String,
    key: String,
    token: String,
    fence: Option<u64>,
    fences: Vec<Option<u64>>,
    ttl: Duration,
    lost: Vec<dlm::LostSignal>,
    permits: Option<u32>,
}

impl GuardCore {
    fn new(a: Acquired) -> Self {
        GuardCore {
            slot: Arc::new(tokio::sync::Mutex::new(Slot(Some(a.held)))),
            state: Arc::new(AtomicU8::new(HELD)),
            name: a.name,
            key: a.key,
            token: a.token,
            fence: a.fence,
            fences: a.fences,
            ttl: a.ttl,
            lost: a.lost,
            permits: a.permits,
        }
    }

    fn extend(&self, ttl: f64) -> impl Future<Output = PyResult<()>> + Send + use<> {
        let slot = self.slot.clone();
        let name = self.name.clone();
        async move {
            let ttl = secs("ttl", ttl).map_err(err)?;
            let g = slot.lock().await;
            match g.0.as_ref() {
                Some(h) => h.extend(ttl).await.map_err(err),
                None => Err(released(&name)),
            }
        }
    }

    fn release(&self) -> impl Future<Output = PyResult<()>> + Send + use<> {
        let slot = self.slot.clone();
        let name = self.name.clone();
        let state = self.state.clone();
        let signals = self.lost.clone();
        async move {
            let h = slot.lock().await.0.take();
            match h {
                Some(h) => {
                    let was_lost = signals.iter().any(|l| l.is_lost());
                    let r = h.release().await;
                    let after = if r.is_ok() && !was_lost {
                        RELEASED
                    } else {
                        RELEASED_LOST
                    };
                    state.store(after, Ordering::SeqCst);
                    r.map_err(err)
                }
                None => Err(released(&name)),
            }
        }
    }

    /// Lost: the lease ran out or renewal failed while it was held. A
    /// guard released while intact was given back, not lost: False.
    fn is_lost(&self) -> bool {
        match self.state.load(Ordering::SeqCst) {
            HELD => self.lost.iter().any(|l| l.is_lost()),
            RELEASED => false,
            _ => true,
        }
    }

    fn remaining(&self) -> Duration {
        if self.state.load(Ordering::SeqCst) != HELD {
            return Duration::ZERO;
        }
        self.lost
            .iter()
            .map(|l| l.remaining())
            .min()
            .unwrap_or_default()
    }

    /// Resolves once any of the guard's leases is lost.
    fn lost_fut(&self) -> impl Future<Output = PyResult<()>> + Send + use<> {
        let signals = self.lost.clone();
        async move {
            let all = signals
                .iter()
                .map(|s| Box::pin(async move { s.lost().await }));
            futures_select_all(all).await;
            Ok(())
        }
    }

    fn is_released(&self) -> bool {
        self.slot.try_lock().map(|s| s.0.is_none()).unwrap_or(false)
    }
}

/// The first of several futures to finish (an empty set never does).
async fn futures_select_all<F: Future<Output = ()> + Unpin>(futs: impl Iterator<Item = F>) {
    let mut futs: Vec<F> = futs.collect();
    if futs.is_empty() {
        return std::future::pending().await;
    }
    std::future::poll_fn(|cx| {
        for f in futs.iter_mut() {
            if Pin::new(f).poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn released(name: &str) -> PyErr {
    state_err(
        name,
        format!("lock {name:?}: this guard was released already"),
    )
}

/// `Lock.release()` in a thread (or task) that acquired nothing through
/// the handle.
fn nothing_acquired(name: &str, who: &str) -> PyErr {
    state_err(
        name,
        format!(
            "lock {name:?}: this {who} holds nothing acquired through this handle \
             (a handle releases what the same {who} acquired; release a guard \
             from elsewhere with guard.release())"
        ),
    )
}

/// An acquisition through a handle by the thread (or task) that holds it
/// through that handle already: a lock is not re-entrant.
fn held_already(name: &str, who: &str) -> PyErr {
    state_err(
        name,
        format!(
            "lock {name:?} is held already by this {who} through this handle \
             (dlm locks are not re-entrant: release it first)"
        ),
    )
}

/// A Python str's repr ('name').
fn py_repr(py: Python<'_>, s: &str) -> String {
    pyo3::types::PyString::new(py, s)
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| format!("{s:?}"))
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

macro_rules! guard_props {
    ($t:ty) => {
        #[pymethods]
        impl $t {
            /// The fencing token (a number that grows with every acquisition),
            /// or None (Redlock hands out none).
            #[getter]
            fn fence(&self) -> Option<u64> {
                self.core.fence
            }
            /// The random owner token of this acquisition.
            #[getter]
            fn token(&self) -> &str {
                &self.core.token
            }
            /// The name the lock was acquired under.
            #[getter]
            fn name(&self) -> &str {
                &self.core.name
            }
            /// The Redis key of the lock.
            #[getter]
            fn key(&self) -> &str {
                &self.core.key
            }
            /// The lease (TTL) the lock was acquired with, in seconds.
            #[getter]
            fn ttl(&self) -> f64 {
                self.core.ttl.as_secs_f64()
            }
            /// Permits held (semaphores), else None.
            #[getter]
            fn permits(&self) -> Option<u32> {
                self.core.permits
            }
            /// True once the lease ran out without renewal, or renewal failed:
            /// the lock must be considered lost. No round trip.
            fn is_lost(&self) -> bool {
                self.core.is_lost()
            }
            /// Seconds of the lease surely left (local monotonic clock, minus a
            /// drift allowance); 0.0 once lost. No round trip.
            fn remaining(&self) -> f64 {
                self.core.remaining().as_secs_f64()
            }
            /// The fencing token of every lock of the guard (one but for multi_lock).
            #[getter]
            fn fences(&self) -> Vec<Option<u64>> {
                self.core.fences.clone()
            }
            /// True once released through this guard.
            fn is_released(&self) -> bool {
                self.core.is_released()
            }
            fn __repr__(&self, py: Python<'_>) -> String {
                format!(
                    "<dlm.{} {} fence={} lost={} released={}>",
                    Self::KIND,
                    py_repr(py, &self.core.name),
                    self.core
                        .fence
                        .map_or_else(|| "None".to_string(), |f| f.to_string()),
                    py_bool(self.core.is_lost()),
                    py_bool(self.core.is_released()),
                )
            }
        }
    };
}

/// A held lock (or read/write share, semaphore permits, leadership).
#[pyclass(frozen, module = "dlm")]
pub struct LockGuard {
    core: GuardCore,
}

impl LockGuard {
    const KIND: &'static str = "LockGuard";
}

guard_props!(LockGuard);

#[pymethods]
impl LockGuard {
    /// Wait until the lock is lost (its lease ran out, renewal failed):
    /// True then, False when `timeout` seconds passed first (None: no limit).
    /// Ctrl-C interrupts the wait.
    #[pyo3(signature = (timeout=None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let t = opt_secs("timeout", timeout).map_err(err)?;
        let lost = self.core.lost_fut();
        block(py, async move {
            match t {
                Some(t) => Ok(tokio::time::timeout(t, lost).await.is_ok()),
                None => lost.await.map(|_| true),
            }
        })
    }

    /// Renew the lease to `ttl` seconds from now; raises dlm.Expired or
    /// dlm.NotHeld when the lock is not ours any more.
    fn extend(&self, py: Python<'_>, ttl: f64) -> PyResult<()> {
        block(py, self.core.extend(ttl))
    }

    /// Release the lock; raises dlm.Expired or dlm.NotHeld when it was not
    /// ours any more.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        block(py, self.core.release())
    }
}

/// The asyncio flavour of LockGuard: `extend` and `release` are awaitable.
#[pyclass(frozen, module = "dlm")]
pub struct AsyncLockGuard {
    core: GuardCore,
}

impl AsyncLockGuard {
    const KIND: &'static str = "AsyncLockGuard";
}

guard_props!(AsyncLockGuard);

#[pymethods]
impl AsyncLockGuard {
    /// Resolves when the lock is lost (its lease ran out, renewal failed):
    /// `await g.lost()`, e.g. raced against the work with asyncio.wait.
    fn lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, self.core.lost_fut())
    }

    /// Renew the lease to `ttl` seconds from now (awaitable).
    fn extend<'py>(&self, py: Python<'py>, ttl: f64) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, self.core.extend(ttl))
    }

    /// Release the lock (awaitable).
    fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, self.core.release())
    }
}

pub type AcquireFn = Arc<dyn Fn() -> BoxFut<'static, dlm::Result<Acquired>> + Send + Sync>;
pub type StatusFn = Arc<dyn Fn() -> BoxFut<'static, dlm::Result<Record>> + Send + Sync>;

/// What a lock handle holds: how to acquire and how to ask for the status.
#[derive(Clone)]
pub struct LockCore {
    pub name: String,
    /// One holder at a time (not a semaphore or a read share): acquiring
    /// again through the handle that holds it is refused.
    pub exclusive: bool,
    pub acquire: AcquireFn,
    pub status: StatusFn,
    pub force_release: Option<Arc<dyn Fn() -> BoxFut<'static, dlm::Result<bool>> + Send + Sync>>,
}

/// A lock handle (no round trip yet). `with lock as guard:` acquires on
/// enter and releases on exit; `acquire()` / `release()` do the same by hand.
#[pyclass(frozen, module = "dlm")]
pub struct Lock {
    core: LockCore,
    current: Current<LockGuard>,
}

impl Lock {
    pub fn new(core: LockCore) -> Self {
        Lock {
            core,
            current: Current::new(),
        }
    }
}

/// Who acquired through a handle: a thread (sync) or an asyncio task, so that
/// threads or tasks sharing one handle each release their own guard.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Owner {
    Thread(std::thread::ThreadId),
    Task(usize),
}

/// The guards a handle's `with` blocks (and `acquire()`) hold, per owner,
/// innermost last.
struct Current<T>(Mutex<HashMap<Owner, Vec<Py<T>>>>);

impl<T> Current<T> {
    fn new() -> Self {
        Current(Mutex::new(HashMap::new()))
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Owner, Vec<Py<T>>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, owner: Owner, g: Py<T>) {
        self.map().entry(owner).or_default().push(g);
    }

    fn pop(&self, owner: Owner) -> Option<Py<T>> {
        let mut m = self.map();
        let stack = m.get_mut(&owner)?;
        let g = stack.pop();
        if stack.is_empty() {
            m.remove(&owner);
        }
        g
    }
}

macro_rules! holds_live {
    ($t:ty) => {
        impl Current<$t> {
            /// Whether `owner` holds a guard through the handle that it has
            /// not released yet.
            fn holds_live(&self, owner: Owner) -> bool {
                self.map()
                    .get(&owner)
                    .is_some_and(|v| v.iter().any(|g| !g.get().core.is_released()))
            }
        }
    };
}
holds_live!(LockGuard);
holds_live!(AsyncLockGuard);

fn this_thread() -> Owner {
    Owner::Thread(std::thread::current().id())
}

/// The running asyncio task (its id), else this thread.
fn this_task(py: Python<'_>) -> Owner {
    static CURRENT_TASK: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let task = CURRENT_TASK
        .import(py, "asyncio", "current_task")
        .and_then(|f| f.call0());
    match task {
        Ok(t) if !t.is_none() => Owner::Task(t.as_ptr() as usize),
        _ => this_thread(),
    }
}

#[pymethods]
impl Lock {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.core.name
    }

    /// Acquire (waiting as configured); returns the guard. Raises dlm.Busy
    /// when not acquired in time. Ctrl-C interrupts the wait.
    fn acquire(&self, py: Python<'_>) -> PyResult<Py<LockGuard>> {
        if self.core.exclusive && self.current.holds_live(this_thread()) {
            return Err(held_already(&self.core.name, "thread"));
        }
        let a = block(py, {
            let f = (self.core.acquire)();
            async move { f.await.map_err(err) }
        })?;
        let g = Py::new(
            py,
            LockGuard {
                core: GuardCore::new(a),
            },
        )?;
        self.current.push(this_thread(), g.clone_ref(py));
        Ok(g)
    }

    /// Release the guard of the last `acquire()` of this handle in this thread.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.current.pop(this_thread());
        match g {
            Some(g) => g.get().release(py),
            None => Err(nothing_acquired(&self.core.name, "thread")),
        }
    }

    /// The lock's state in Redis: dict(held, ttl, fence, ...).
    fn status(&self, py: Python<'_>) -> PyResult<Record> {
        let f = (self.core.status)();
        block(py, async move { f.await.map_err(err) })
    }

    /// Delete the lock whoever holds it (an operator's tool); True if it was held.
    fn force_release(&self, py: Python<'_>) -> PyResult<bool> {
        let f = self.core.force_release.as_ref().map(|f| f());
        block(py, async move {
            match f {
                Some(f) => f.await.map_err(err),
                None => Err(err(dlm::Error::InvalidArgument {
                    arg: "force_release",
                    reason: "not available for this kind of lock".into(),
                })),
            }
        })
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<LockGuard>> {
        self.acquire(py)
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyType>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let g = self.current.pop(this_thread());
        if let Some(g) = g {
            if g.get().core.is_released() {
                return Ok(false);
            }
            let r = g.get().release(py);
            // An exception of the block wins over a failed release.
            if exc_type.is_none() {
                r?;
            }
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<dlm.Lock {}>", py_repr(py, &self.core.name))
    }
}

/// A guard just acquired by an asyncio call: made a Python object (and
/// recorded as its task's) on the event loop's thread, when the call's
/// future is resolved.
pub struct NewAsyncGuard {
    core: GuardCore,
    current: Arc<Current<AsyncLockGuard>>,
    owner: Owner,
}

impl<'py> IntoPyObject<'py> for NewAsyncGuard {
    type Target = AsyncLockGuard;
    type Output = Bound<'py, AsyncLockGuard>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, AsyncLockGuard>> {
        let g = Bound::new(py, AsyncLockGuard { core: self.core })?;
        self.current.push(self.owner, g.clone().unbind());
        Ok(g)
    }
}

/// The asyncio flavour of Lock: `async with lock as guard:`, `await
/// lock.acquire()`, `await lock.release()`.
#[pyclass(frozen, module = "dlm")]
pub struct AsyncLock {
    core: LockCore,
    current: Arc<Current<AsyncLockGuard>>,
}

impl AsyncLock {
    pub fn new(core: LockCore) -> Self {
        AsyncLock {
            core,
            current: Arc::new(Current::new()),
        }
    }

    fn acquire_fut(
        &self,
        owner: Owner,
    ) -> impl Future<Output = PyResult<NewAsyncGuard>> + Send + 'static {
        let f = (self.core.acquire)();
        let current = self.current.clone();
        async move {
            let a = f.await.map_err(err)?;
            Ok(NewAsyncGuard {
                core: GuardCore::new(a),
                current,
                owner,
            })
        }
    }

    fn release_fut(&self, owner: Owner) -> impl Future<Output = PyResult<()>> + Send + 'static {
        let g = self.current.pop(owner);
        let name = self.core.name.clone();
        let rel = g.map(|g| g.get().core.release());
        async move {
            match rel {
                Some(f) => f.await,
                None => Err(nothing_acquired(&name, "asyncio task")),
            }
        }
    }
}

#[pymethods]
impl AsyncLock {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.core.name
    }

    /// Acquire (awaitable; waiting as configured); returns the guard.
    /// Cancelling the awaiting task cancels the acquisition.
    fn acquire<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let owner = this_task(py);
        if self.core.exclusive && self.current.holds_live(owner) {
            return Err(held_already(&self.core.name, "asyncio task"));
        }
        awaitable(py, self.acquire_fut(owner))
    }

    /// Release the guard of the last `acquire()` of this handle in this
    /// asyncio task (awaitable).
    fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, self.release_fut(this_task(py)))
    }

    /// The lock's state in Redis (awaitable): dict(held, ttl, fence, ...).
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let f = (self.core.status)();
        awaitable(py, async move { f.await.map_err(err) })
    }

    /// Delete the lock whoever holds it (awaitable); True if it was held.
    fn force_release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let f = self.core.force_release.as_ref().map(|f| f());
        awaitable(py, async move {
            match f {
                Some(f) => f.await.map_err(err),
                None => Err(err(dlm::Error::InvalidArgument {
                    arg: "force_release",
                    reason: "not available for this kind of lock".into(),
                })),
            }
        })
    }

    fn __aenter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.acquire(py)
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyType>>,
        _exc: Option<Bound<'py, PyAny>>,
        _tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.current.pop(this_task(py));
        let fut = g.and_then(|g| {
            if g.get().core.is_released() {
                None
            } else {
                Some(g.get().core.release())
            }
        });
        let propagate = exc_type.is_none();
        awaitable(py, async move {
            if let Some(f) = fut {
                let r = f.await;
                if propagate {
                    r?;
                }
            }
            Ok(false)
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<dlm.AsyncLock {}>", py_repr(py, &self.core.name))
    }
}
