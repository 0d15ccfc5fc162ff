//! `Queue` / `AsyncQueue`, their tasks and leases, and the bridge from the
//! core's worker runtime to Python handlers.

use std::future::Future;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyString};

use crate::bridge::awaitable;
use crate::rt::{
    Int, Payload, Record, Val, block, block_until, err, opt_int, opt_payload, opt_secs, py_err,
    secs, state_err,
};

/// Per-handle queue options (`Client.queue(...)` arguments).
pub struct QueueOpts {
    pub max_attempts: Option<u32>,
    pub backoff: Option<dlm::queue::Backoff>,
    pub max_payload: Option<usize>,
}

impl QueueOpts {
    pub fn apply(self, mut q: dlm::queue::Queue) -> dlm::queue::Queue {
        if let Some(n) = self.max_attempts {
            q = q.max_attempts(n);
        }
        if let Some(b) = self.backoff {
            q = q.backoff(b);
        }
        if let Some(m) = self.max_payload {
            q = q.max_payload(m);
        }
        q
    }
}

/// A task as a handler sees it.
#[pyclass(frozen, module = "dlm")]
pub struct Task {
    /// The task's id.
    #[pyo3(get)]
    id: String,
    /// The payload (b"" when the task has none).
    #[pyo3(get)]
    payload: Py<PyBytes>,
    /// The fencing token of this lease: higher for every new claim of the task.
    #[pyo3(get)]
    fence: u64,
    /// How many times the task was claimed, this claim included.
    #[pyo3(get)]
    attempts: u32,
    /// The priority it was pushed with.
    #[pyo3(get)]
    priority: u16,
    /// The group it was pushed in, if any.
    #[pyo3(get)]
    group: Option<String>,
    /// The ids it waited for (after=[...]).
    #[pyo3(get)]
    deps: Vec<String>,
    /// The worker's run of it (None: claimed by hand, see Lease).
    run: Option<dlm::queue::RunContext>,
}

impl Task {
    fn from_core(py: Python<'_>, t: &dlm::queue::Task) -> Self {
        Task {
            id: t.id.clone(),
            payload: PyBytes::new(py, t.payload.as_deref().unwrap_or_default()).unbind(),
            fence: t.fence.get(),
            attempts: t.attempt,
            priority: t.priority,
            group: t.group.clone(),
            deps: t.deps.clone(),
            run: None,
        }
    }

    fn of_run(py: Python<'_>, t: &dlm::queue::Task, run: dlm::queue::RunContext) -> Self {
        Task {
            run: Some(run),
            ..Task::from_core(py, t)
        }
    }

    fn run(&self) -> PyResult<dlm::queue::RunContext> {
        self.run.clone().ok_or_else(|| {
            err(dlm::Error::InvalidArgument {
                arg: "task",
                reason: "only a worker's handler can report on its task; a claimed task reports through its Lease".into(),
            })
        })
    }

    fn progress_fut(
        &self,
        pct: u8,
        message: String,
    ) -> PyResult<impl Future<Output = PyResult<()>> + Send + 'static + use<>> {
        let run = self.run()?;
        Ok(async move { run.progress(pct, &message).await.map_err(err) })
    }

    fn extend_fut(
        &self,
        lease: f64,
    ) -> PyResult<impl Future<Output = PyResult<()>> + Send + 'static + use<>> {
        let run = self.run()?;
        let d = secs("lease", lease).map_err(err)?;
        Ok(async move { run.extend(d).await.map_err(err) })
    }
}

#[pymethods]
impl Task {
    /// Report how far the task is (0..=100 and a message), read with
    /// `q.progress(id)`; in a worker's handler only. Blocks: an async
    /// handler awaits `aprogress`.
    #[pyo3(signature = (pct, message=String::new()))]
    fn progress(&self, py: Python<'_>, pct: u8, message: String) -> PyResult<()> {
        block(py, self.progress_fut(pct, message)?)
    }

    /// `progress`, awaitable.
    #[pyo3(signature = (pct, message=String::new()))]
    fn aprogress<'py>(
        &self,
        py: Python<'py>,
        pct: u8,
        message: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, self.progress_fut(pct, message)?)
    }

    /// Renew this run's lease to `lease` seconds from now (at least the
    /// worker's lease) and keep it that long while the handler runs; in a
    /// worker's handler only. Blocks: an async handler awaits `aextend`.
    fn extend(&self, py: Python<'_>, lease: f64) -> PyResult<()> {
        block(py, self.extend_fut(lease)?)
    }

    /// `extend`, awaitable.
    fn aextend<'py>(&self, py: Python<'py>, lease: f64) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, self.extend_fut(lease)?)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let id = PyString::new(py, &self.id)
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_default();
        format!(
            "<dlm.Task {id} fence={} attempts={}>",
            self.fence, self.attempts
        )
    }
}

/// A `SystemExit` or `KeyboardInterrupt` raised in a handler: it stops the
/// worker (its task given back) and is raised again by `work`.
type Stash = Arc<Mutex<Option<PyErr>>>;

/// What a handler's exception makes of its task: a graceful stop of the
/// worker (`SystemExit`, `KeyboardInterrupt`, kept in `stash` to be raised
/// by `work`), else a retry with the exception and its traceback as the
/// task's error (the core keeps its first 4 KiB), logged on `dlm`.
fn failure(
    py: Python<'_>,
    e: PyErr,
    task: &dlm::queue::Task,
    stash: &Stash,
) -> dlm::queue::TaskError {
    use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
    if e.is_instance_of::<PySystemExit>(py) || e.is_instance_of::<PyKeyboardInterrupt>(py) {
        let why = e.to_string();
        lock(stash).get_or_insert(e);
        return dlm::queue::TaskError::stop(format!("the handler raised {why}"));
    }
    let text = error_text(py, &e);
    crate::life::log(
        py,
        40,
        &format!("task {:?} failed (attempt {})", task.id, task.attempt),
        Some(e.value(py).as_any()),
    );
    dlm::queue::TaskError::retry(text)
}

/// Most of the error text a task keeps (the core's cap is 4 KiB).
const ERROR_TEXT: usize = 4000;

/// "Type: message", then the traceback (its last lines when too long).
fn error_text(py: Python<'_>, e: &PyErr) -> String {
    let head = e.to_string();
    let tb = (|| -> PyResult<String> {
        let v = e.value(py);
        let lines = py
            .import("traceback")?
            .call_method1("format_exception", (v.get_type(), v, e.traceback(py)))?;
        Ok(lines.extract::<Vec<String>>()?.concat())
    })()
    .unwrap_or_default();
    let room = ERROR_TEXT.saturating_sub(head.len() + 2);
    if tb.is_empty() || room < 100 {
        return head;
    }
    let tail = if tb.len() > room {
        let mut start = tb.len() - (room - 4);
        while !tb.is_char_boundary(start) {
            start += 1;
        }
        format!("...\n{}", &tb[start..])
    } else {
        tb
    };
    format!("{head}\n\n{tail}")
}

/// The task's outcome from what its handler returned (a result that can
/// never be stored is fatal: retrying would fail the same way).
fn outcome(
    py: Python<'_>,
    r: PyResult<Bound<'_, PyAny>>,
    task: &dlm::queue::Task,
    stash: &Stash,
) -> HandlerOut {
    match r {
        Ok(v) => result_bytes(&v).map_err(dlm::queue::TaskError::fatal),
        Err(e) => Err(failure(py, e, task, stash)),
    }
}

/// Run a sync handler in a thread of the runtime's blocking pool.
async fn in_thread(
    handler: Arc<Py<PyAny>>,
    task: dlm::queue::Task,
    run: dlm::queue::RunContext,
    stash: Stash,
) -> HandlerOut {
    tokio::task::spawn_blocking(move || {
        Python::attach(|py| {
            let t = Py::new(py, Task::of_run(py, &task, run))
                .map_err(|e| dlm::queue::TaskError::retry(e.to_string()))?;
            let r = handler.bind(py).call1((t,));
            outcome(py, r, &task, &stash)
        })
    })
    .await
    .unwrap_or_else(|e| {
        Err(dlm::queue::TaskError::retry(format!(
            "handler thread failed: {e}"
        )))
    })
}

/// A handler's return value as a task result: None (no result), bytes or str.
fn result_bytes(r: &Bound<'_, PyAny>) -> Result<Option<Vec<u8>>, String> {
    if r.is_none() {
        Ok(None)
    } else if let Ok(b) = r.cast::<PyBytes>() {
        Ok(Some(b.as_bytes().to_vec()))
    } else if let Ok(b) = r.cast::<PyByteArray>() {
        Ok(Some(b.to_vec()))
    } else if let Ok(s) = r.cast::<PyString>() {
        Ok(Some(
            s.to_cow().map_err(|e| e.to_string())?.as_bytes().to_vec(),
        ))
    } else {
        let t = r
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        Err(format!("handler returned a {t}; return bytes, str or None"))
    }
}

/// The worker's options (`work(...)` arguments).
struct WorkArgs {
    concurrency: usize,
    stop_when_idle: bool,
    lease: Option<f64>,
    task_timeout: Option<f64>,
    worker_id: Option<String>,
    grace: Option<f64>,
    keep_results: Option<f64>,
}

impl WorkArgs {
    fn options(self) -> Result<dlm::queue::WorkerOptions, dlm::Error> {
        let mut o = dlm::queue::WorkerOptions::new()
            .concurrency(self.concurrency)
            .exit_when_empty(self.stop_when_idle);
        if let Some(l) = opt_secs("lease", self.lease)? {
            o = o.lease(l);
        }
        if let Some(t) = opt_secs("task_timeout", self.task_timeout)? {
            o = o.task_timeout(t);
        }
        if let Some(id) = self.worker_id {
            o = o.id(id);
        }
        if let Some(g) = opt_secs("grace", self.grace)? {
            o = o.grace(g);
        }
        if let Some(k) = opt_secs("keep_results", self.keep_results)? {
            o = o.keep_results(k);
        }
        Ok(o)
    }
}

fn report(r: dlm::queue::WorkerReport) -> Record {
    Record::default()
        .with("acked", r.acked)
        .with("retried", r.retried)
        .with("dead", r.dead)
        .with("lost", r.lost)
        .with("returned", r.returned)
}

fn settings_change(
    group_concurrency: Option<u32>,
    rate: Option<(u32, f64)>,
    keep_completed: Option<u32>,
    events: Option<u32>,
    keep_results: Option<f64>,
    keep_results_bytes: Option<u64>,
) -> Result<dlm::queue::QueueSettings, dlm::Error> {
    let nonzero = |n: u32| (n > 0).then_some(n);
    let mut s = dlm::queue::QueueSettings::default();
    if let Some(k) = group_concurrency {
        s = s.group_concurrency(nonzero(k));
    }
    if let Some((n, period)) = rate {
        let r = if n == 0 {
            None
        } else {
            Some(dlm::queue::RateLimit::new(n, secs("rate", period)?)?)
        };
        s = s.rate(r);
    }
    if let Some(n) = keep_completed {
        s = s.keep_completed(nonzero(n));
    }
    if let Some(n) = events {
        s = s.events(nonzero(n));
    }
    if let Some(t) = keep_results {
        s = s.keep_results(secs("keep_results", t)?);
    }
    if let Some(b) = keep_results_bytes {
        s = s.keep_results_bytes(b);
    }
    Ok(s)
}

/// An instant of the Redis clock (ms since the epoch) as Python reads
/// instants: float seconds since the epoch, like `time.time()`.
fn epoch(ms: u64) -> Val {
    Val::Float(ms as f64 / 1000.0)
}

fn task_record(d: dlm::queue::TaskDetail) -> Record {
    Record::default()
        .with("id", d.id)
        .with("state", d.state.as_str().to_string())
        .with("attempts", d.attempts)
        .with("fence", d.fence)
        .with("priority", u32::from(d.priority))
        .with("group", d.group)
        .with("error", d.error)
        .with("progress", d.progress.map(u32::from))
        .with("message", d.message)
        .with(
            "payload_len",
            d.payload_len.map(|n| n as u64).map_or(Val::None, Val::Int),
        )
        .with(
            "result_bytes",
            d.result_bytes.map(|n| n as u64).map_or(Val::None, Val::Int),
        )
        .with("deps", Val::Strs(d.deps))
        .with("pending_deps", d.pending_deps)
        .with("timeout", d.timeout)
        // Issue 31: what a completed task was (kept with its result).
        .with("dependents", Val::Strs(d.dependents))
        .with("started_at", d.started_at.map_or(Val::None, epoch))
        .with("finished_at", d.finished_at.map_or(Val::None, epoch))
        .with("worker", d.worker)
}

fn worker_record(w: dlm::queue::WorkerInfo) -> Record {
    Record::default()
        .with("id", w.id)
        .with("host", w.host)
        .with("pid", w.pid)
        .with("version", w.version)
        .with("concurrency", w.concurrency)
        .with("busy", w.busy)
        .with("processed", w.processed)
        .with("failed", w.failed)
        .with("in_flight", Val::Strs(w.in_flight))
        .with("stopping", w.stopping)
        .with("beat_age", w.beat_age)
}

fn settings_record(s: dlm::queue::QueueSettings) -> Record {
    let rate = s.get_rate();
    Record::default()
        .with("group_concurrency", s.get_group_concurrency())
        .with("rate_n", rate.map(|r| r.n()))
        .with("rate_period", rate.map(|r| r.period()))
        .with("keep_completed", s.get_keep_completed())
        .with("events", s.get_events())
        .with("keep_results", s.get_keep_results())
        .with("keep_results_bytes", s.get_keep_results_bytes())
        .with("shards", u32::from(s.get_shards()))
}

fn stats_record(s: dlm::queue::QueueStats) -> Record {
    Record::default()
        .with("waiting", s.waiting)
        .with("delayed", s.delayed)
        .with("in_flight", s.inflight)
        .with("dead", s.dead)
        .with("processed", s.processed)
        .with("failed", s.failed)
        .with("blocked", s.blocked)
        .with("result_bytes", s.result_bytes)
        .with("results_evicted", s.results_evicted)
        .with("paused", s.paused)
        .with("oldest_due", s.oldest_due)
}

fn layout_record(l: dlm::queue::ShardLayout) -> Record {
    let shards = l
        .shards
        .into_iter()
        .map(|s| {
            Record::default()
                .with("index", u32::from(s.index))
                .with("tag", s.tag)
                .with("slot", u32::from(s.slot))
                .with("master", s.master)
        })
        .collect();
    Record::default()
        .with("k", u32::from(l.k))
        .with("version", l.version)
        .with("draining", l.draining.map(u32::from))
        .with("shards", Val::Records(shards))
}

/// `push_many`'s items: ids or (id, payload) pairs.
fn new_tasks(items: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<dlm::queue::NewTask>> {
    items
        .into_iter()
        .map(|item| {
            if let Ok(id) = item.extract::<String>() {
                Ok(dlm::queue::NewTask::new(id))
            } else {
                let (id, payload): (String, Payload) = item.extract()?;
                Ok(dlm::queue::NewTask::new(id).payload(payload.get("payload")?))
            }
        })
        .collect()
}

fn on_duplicate(replace: bool) -> dlm::queue::OnDuplicate {
    if replace {
        dlm::queue::OnDuplicate::Replace
    } else {
        dlm::queue::OnDuplicate::Keep
    }
}

/// Everything both queue flavours do, as futures.
#[derive(Clone)]
struct Core(
    dlm::queue::Queue,
    Arc<Mutex<tokio_util::sync::CancellationToken>>,
);

impl Core {
    fn new(q: dlm::queue::Queue) -> Self {
        Core(q, Arc::default())
    }

    /// A stop token for one `work` call: `stop()` cancels it.
    fn stop_token(&self) -> tokio_util::sync::CancellationToken {
        lock(&self.1).child_token()
    }

    /// Stop every `work` running on this handle (later ones start afresh).
    fn stop(&self) {
        let old = std::mem::take(&mut *lock(&self.1));
        old.cancel();
    }
}

/// A handler must be callable: refused before anything is claimed (issue 33:
/// `work(None)` dead-lettered every task).
fn check_handler(handler: &Bound<'_, PyAny>) -> PyResult<()> {
    if handler.is_callable() {
        Ok(())
    } else {
        let t = handler
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "the handler must be a callable taking a dlm.Task, not {t}"
        )))
    }
}

/// True for a coroutine function (`async def`, also behind `__call__` or
/// `functools.partial`): run on the loop; other handlers run in threads.
fn is_async_handler(handler: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = handler.py();
    let f = py.import("inspect")?.getattr("iscoroutinefunction")?;
    if f.call1((handler,))?.is_truthy()? {
        return Ok(true);
    }
    match handler.getattr("__call__") {
        Ok(call) => f.call1((call,))?.is_truthy(),
        Err(_) => Ok(false),
    }
}

/// SIGTERM stops a sync `work` as Ctrl-C does, then raises SystemExit(143),
/// while `work` runs in the main thread and SIGTERM has Python's default
/// handling (an application's own handler is left alone).
#[pyfunction]
fn _on_sigterm(signum: i32, _frame: Bound<'_, PyAny>) -> PyResult<()> {
    Err(pyo3::exceptions::PySystemExit::new_err(128 + signum))
}

fn sigterm_is_ours(py: Python<'_>) -> PyResult<bool> {
    let threading = py.import("threading")?;
    let main = threading.call_method0("main_thread")?;
    if !threading.call_method0("current_thread")?.is(&main) {
        return Ok(false);
    }
    let signal = py.import("signal")?;
    let current = signal.call_method1("getsignal", (signal.getattr("SIGTERM")?,))?;
    current.eq(signal.getattr("SIG_DFL")?)
}

/// The SIGTERM handler of a sync `work`, restored when dropped.
struct Sigterm(Option<Py<PyModule>>);

impl Sigterm {
    fn install(py: Python<'_>) -> PyResult<Self> {
        if !sigterm_is_ours(py)? {
            return Ok(Sigterm(None));
        }
        let signal = py.import("signal")?;
        let m = PyModule::new(py, "dlm_sigterm")?;
        let f = wrap_pyfunction!(_on_sigterm, &m)?;
        signal.call_method1("signal", (signal.getattr("SIGTERM")?, f))?;
        Ok(Sigterm(Some(signal.unbind())))
    }
}

impl Drop for Sigterm {
    fn drop(&mut self) {
        if let Some(signal) = self.0.take() {
            Python::attach(|py| {
                let signal = signal.bind(py);
                if let (Ok(t), Ok(d)) = (signal.getattr("SIGTERM"), signal.getattr("SIG_DFL")) {
                    let _ = signal.call_method1("signal", (t, d));
                }
            });
        }
    }
}

/// What an async `work` set up on its loop: the waiter of its `stop` event
/// and its signal handlers, undone when it ends.
#[pyclass(frozen, module = "dlm._dlm")]
struct StopWorker {
    /// Cancelled: stop gracefully.
    token: tokio_util::sync::CancellationToken,
    /// Cancelled: stop at once (a second signal), giving the tasks back.
    hard: tokio_util::sync::CancellationToken,
    /// The first signal that stopped the worker (SIGTERM, SIGINT), 0: none.
    signal: Arc<std::sync::atomic::AtomicI32>,
}

#[pymethods]
impl StopWorker {
    #[pyo3(signature = (*_args))]
    fn __call__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) {
        self.token.cancel();
    }
}

/// The loop's handler of one signal (SIGTERM, or SIGINT under asyncio's
/// own Ctrl-C handling) for an async `work`: the first one stops it
/// gracefully, as in a sync `work`; a second one (of either) at once.
#[pyclass(frozen, module = "dlm._dlm")]
struct OnSignal(Py<StopWorker>, i32);

#[pymethods]
impl OnSignal {
    fn __call__(&self) {
        let s = self.0.get();
        let first = s
            .signal
            .compare_exchange(
                0,
                self.1,
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
            )
            .is_ok();
        if first {
            s.token.cancel();
        } else {
            s.hard.cancel();
        }
    }
}

/// The exception a signal raises from `work` once it stopped: SystemExit(143)
/// for SIGTERM, KeyboardInterrupt for SIGINT.
fn signal_exit(signum: i32) -> Option<PyErr> {
    match signum {
        SIGTERM => Some(pyo3::exceptions::PySystemExit::new_err(128 + SIGTERM)),
        SIGINT => Some(pyo3::exceptions::PyKeyboardInterrupt::new_err(())),
        _ => None,
    }
}

/// Undoes an [`AsyncStop`] on its loop when the worker ends or is dropped.
struct UndoOnDrop(Option<(Arc<crate::bridge::Shared>, AsyncStop)>);

impl Drop for UndoOnDrop {
    fn drop(&mut self) {
        if let Some((on_loop, set_up)) = self.0.take() {
            on_loop.call_soon(Box::new(move |py| set_up.undo(py)));
        }
    }
}

struct AsyncStop {
    waiter: Option<Py<PyAny>>,
    event_loop: Option<Py<PyAny>>,
    /// SIGINT's handler before `work` took it over (Python's, or
    /// asyncio.run's), put back when it ends.
    sigint: Option<(Py<PyAny>, Py<PyAny>)>,
}

/// True when SIGINT is handled the way a plain asyncio program does:
/// Python's default handler, or asyncio.run's (Python 3.11+), which cancels
/// the main task (a worker would stop at once on the first Ctrl-C).
fn sigint_is_default(py: Python<'_>, current: &Bound<'_, PyAny>) -> PyResult<bool> {
    if current.is(py.import("signal")?.getattr("default_int_handler")?) {
        return Ok(true);
    }
    // asyncio.Runner installs functools.partial(Runner._on_sigint, ...).
    let Ok(func) = current.getattr("func") else {
        return Ok(false);
    };
    let name: String = func
        .getattr("__qualname__")
        .and_then(|n| n.extract())
        .unwrap_or_default();
    let module: String = func
        .getattr("__module__")
        .and_then(|n| n.extract())
        .unwrap_or_default();
    Ok(name == "Runner._on_sigint" && module.starts_with("asyncio"))
}

impl AsyncStop {
    fn set_up(
        py: Python<'_>,
        stop: Option<&Bound<'_, PyAny>>,
        s: &Bound<'_, StopWorker>,
    ) -> PyResult<Self> {
        let asyncio = py.import("asyncio")?;
        let mut out = AsyncStop {
            waiter: None,
            event_loop: None,
            sigint: None,
        };
        if let Some(ev) = stop {
            let w = asyncio.call_method1("ensure_future", (ev.call_method0("wait")?,))?;
            w.call_method1("add_done_callback", (s,))?;
            out.waiter = Some(w.unbind());
        }
        if sigterm_is_ours(py)? {
            let l = asyncio.call_method0("get_running_loop")?;
            let signal = py.import("signal")?;
            let h = Bound::new(py, OnSignal(s.clone().unbind(), SIGTERM))?;
            if l.call_method1("add_signal_handler", (signal.getattr("SIGTERM")?, h))
                .is_ok()
            {
                out.event_loop = Some(l.clone().unbind());
                // Ctrl-C too, unless the application handles it itself.
                let sigint = signal.getattr("SIGINT")?;
                let current = signal.call_method1("getsignal", (&sigint,))?;
                if sigint_is_default(py, &current)? {
                    let h = Bound::new(py, OnSignal(s.clone().unbind(), SIGINT))?;
                    if l.call_method1("add_signal_handler", (&sigint, h)).is_ok() {
                        out.sigint = Some((sigint.unbind(), current.unbind()));
                    }
                }
            }
        }
        Ok(out)
    }

    fn undo(self, py: Python<'_>) {
        if let Some(w) = self.waiter {
            let _ = w.bind(py).call_method0("cancel");
        }
        if let Some(l) = self.event_loop
            && let Ok(signal) = py.import("signal")
        {
            if let Ok(t) = signal.getattr("SIGTERM") {
                let _ = l.bind(py).call_method1("remove_signal_handler", (t,));
            }
            if let Some((sigint, before)) = self.sigint {
                let _ = l
                    .bind(py)
                    .call_method1("remove_signal_handler", (sigint.bind(py),));
                let _ = signal.call_method1("signal", (sigint, before));
            }
        }
    }
}

impl Core {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &self,
        id: String,
        payload: Option<Vec<u8>>,
        delay: f64,
        priority: u16,
        group: Option<String>,
        after: Option<Vec<String>>,
        timeout: Option<f64>,
        replace: bool,
        shard_key: Option<String>,
    ) -> impl Future<Output = PyResult<bool>> + Send + 'static {
        let q = self.0.clone();
        async move {
            let delay = secs("delay", delay).map_err(err)?;
            let mut t = dlm::queue::NewTask::new(id).priority(priority);
            if let Some(p) = payload {
                t = t.payload(p);
            }
            if let Some(g) = group {
                t = t.group(g);
            }
            if let Some(a) = after {
                t = t.after(a);
            }
            if let Some(k) = shard_key {
                t = t.shard_key(k);
            }
            if let Some(l) = opt_secs("timeout", timeout).map_err(err)? {
                t = t.timeout(l);
            }
            let dup = if replace {
                dlm::queue::OnDuplicate::Replace
            } else {
                dlm::queue::OnDuplicate::Keep
            };
            let r = q.enqueue([t], delay, dup).await.map_err(err)?;
            Ok(!matches!(
                r.first(),
                Some(dlm::queue::Enqueued::Kept(_)) | None
            ))
        }
    }

    fn push_many(
        &self,
        tasks: Vec<dlm::queue::NewTask>,
        delay: f64,
        replace: bool,
    ) -> impl Future<Output = PyResult<Vec<bool>>> + Send + 'static {
        let q = self.0.clone();
        async move {
            let delay = secs("delay", delay).map_err(err)?;
            let r = q
                .enqueue(tasks, delay, on_duplicate(replace))
                .await
                .map_err(err)?;
            Ok(r.iter()
                .map(|e| !matches!(e, dlm::queue::Enqueued::Kept(_)))
                .collect())
        }
    }

    fn stats(&self) -> impl Future<Output = PyResult<Record>> + Send + 'static {
        let q = self.0.clone();
        async move { q.stats().await.map(stats_record).map_err(err) }
    }

    fn result(&self, id: String) -> impl Future<Output = PyResult<Option<Bytes>>> + Send + 'static {
        let q = self.0.clone();
        async move { q.result(&id).await.map(|o| o.map(Bytes)).map_err(err) }
    }

    /// The outcome of task `id` within `timeout` (the core's
    /// `Queue::wait_outcome`): its result (None: it completed without one,
    /// or the result is no longer kept), else dlm.TaskFailed (dead),
    /// dlm.NotFound (unknown) or dlm.ResultTimeout.
    fn outcome(
        &self,
        id: String,
        timeout: f64,
    ) -> PyResult<impl Future<Output = PyResult<Option<Bytes>>> + Send + 'static> {
        use dlm::queue::Outcome;
        let deadline = secs("timeout", timeout).map_err(err)?;
        let q = self.0.clone();
        Ok(async move {
            let queue = q.name();
            match q.wait_outcome(&id, deadline).await.map_err(err)? {
                Outcome::Completed(r) => Ok(r.map(Bytes)),
                Outcome::Failed(error) => Err(py_err(
                    "TaskFailed",
                    format!(
                        "task {id:?} of queue {queue:?} died: {}",
                        error.as_deref().unwrap_or("(no error text)")
                    ),
                    &[("id", Val::Str(id.clone())), ("error", error.into())],
                )),
                Outcome::Pending(state) => {
                    let state = state.as_str();
                    Err(py_err(
                        "ResultTimeout",
                        format!(
                            "task {id:?} of queue {queue:?} did not finish within {timeout} seconds (it is {state})"
                        ),
                        &[
                            ("id", Val::Str(id.clone())),
                            ("state", Val::Str(state.to_string())),
                        ],
                    ))
                }
                _ => Err(py_err(
                    "NotFound",
                    format!("no task {id:?} is known to queue {queue:?}"),
                    &[("id", Val::Str(id.clone()))],
                )),
            }
        })
    }

    fn dead(&self, count: usize) -> impl Future<Output = PyResult<Vec<Record>>> + Send + 'static {
        let q = self.0.clone();
        async move {
            let d = q.dead(count).await.map_err(err)?;
            Ok(d.into_iter()
                .map(|t| {
                    Record::default()
                        .with("id", t.id)
                        .with("error", t.error)
                        .with("payload", t.payload)
                        .with("died_at", epoch(t.died_at))
                })
                .collect())
        }
    }

    fn retry_dead(
        &self,
        ids: Option<Vec<String>>,
    ) -> impl Future<Output = PyResult<usize>> + Send + 'static {
        let q = self.0.clone();
        async move {
            let refs: Option<Vec<&str>> =
                ids.as_ref().map(|v| v.iter().map(String::as_str).collect());
            q.retry_dead(refs.as_deref()).await.map_err(err)
        }
    }

    fn simple<T, F, Fut>(&self, f: F) -> impl Future<Output = PyResult<T>> + Send + 'static
    where
        F: FnOnce(dlm::queue::Queue) -> Fut + Send + 'static,
        Fut: Future<Output = dlm::Result<T>> + Send,
    {
        let q = self.0.clone();
        async move { f(q).await.map_err(err) }
    }

    /// The worker of `work`: `handler` is called in a thread (sync) or on
    /// the running loop (`on_loop`, for coroutine functions).
    fn work(
        &self,
        handler: Py<PyAny>,
        on_loop: Option<Arc<crate::bridge::Shared>>,
        args: WorkArgs,
        stop: tokio_util::sync::CancellationToken,
        stash: Stash,
    ) -> impl Future<Output = PyResult<Record>> + Send + 'static {
        let q = self.0.clone();
        let handler = Arc::new(handler);
        let name = q.name().to_string();
        async move {
            let opts = args.options().map_err(err)?;
            let h = move |task: dlm::queue::Task, run: dlm::queue::RunContext| {
                let handler = handler.clone();
                let stash = stash.clone();
                let on_loop = on_loop.clone();
                async move {
                    match on_loop {
                        None => in_thread(handler, task, run, stash).await,
                        Some(on_loop) => on_the_loop(handler, task, run, stash, on_loop).await,
                    }
                }
            };
            let r = q.worker(opts).run_with_context(h, stop).await;
            Python::attach(|py| match &r {
                Ok(r) => crate::life::log(
                    py,
                    20,
                    &format!(
                        "worker of queue {name:?} stopped: acked {}, retried {}, dead {}, lost {}, given back {}",
                        r.acked, r.retried, r.dead, r.lost, r.returned
                    ),
                    None,
                ),
                Err(e) => crate::life::log(
                    py,
                    40,
                    &format!("worker of queue {name:?} failed: {e}"),
                    None,
                ),
            });
            Ok(report(r.map_err(err)?))
        }
    }
}

/// An event of the queue's log as Python reads it.
fn event_record(e: dlm::queue::Event) -> Record {
    Record::default()
        .with("kind", e.kind.as_str().to_string())
        .with("task", e.task)
        .with("at", epoch(e.at_ms))
        .with("cursor", e.cursor)
        .with("error", e.error)
        .with("progress", e.progress.map(u32::from))
        .with("message", e.message)
}

fn events_from(start: bool, after: Option<String>) -> dlm::queue::EventsFrom {
    match (after, start) {
        (Some(c), _) => dlm::queue::EventsFrom::After(c),
        (None, true) => dlm::queue::EventsFrom::Start,
        (None, false) => dlm::queue::EventsFrom::Now,
    }
}

type EventItems = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = dlm::Result<dlm::queue::Event>> + Send + 'static>,
>;

/// A followed event log, shared by both iterator flavours.
#[derive(Clone)]
struct Follow(Arc<tokio::sync::Mutex<Option<EventItems>>>);

impl Follow {
    fn new(q: &dlm::queue::Queue, from: dlm::queue::EventsFrom) -> Self {
        Follow(Arc::new(tokio::sync::Mutex::new(Some(Box::pin(
            q.events(from),
        )))))
    }

    /// The next event (None once closed).
    fn next(&self) -> impl Future<Output = PyResult<Option<Record>>> + Send + 'static {
        use futures_util::StreamExt;
        let s = self.0.clone();
        async move {
            let mut g = s.lock().await;
            match g.as_mut() {
                Some(items) => match items.next().await {
                    Some(e) => e.map(|e| Some(event_record(e))).map_err(err),
                    None => Ok(None),
                },
                None => Ok(None),
            }
        }
    }

    /// Drop the stream (and its dedicated connection) inside the runtime;
    /// a `next()` still running drops it when it ends.
    fn close(&self) {
        let _in_runtime = crate::rt::rt().enter();
        if let Ok(mut g) = self.0.try_lock() {
            *g = None;
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.follow.close();
    }
}

impl Drop for AsyncEventStream {
    fn drop(&mut self) {
        self.follow.close();
    }
}

/// Events of a queue as they happen (`for ev in q.events():`): dicts of
/// kind, task, at (epoch seconds), cursor, error, progress, message. Each
/// `next()` waits for the next event (Ctrl-C interrupts it); `close()`
/// stops following.
#[pyclass(frozen, module = "dlm")]
pub struct EventStream {
    follow: Follow,
}

#[pymethods]
impl EventStream {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Record>> {
        block(py, self.follow.next())
    }

    /// Stop following (the connection is let go).
    fn close(&self) {
        self.follow.close();
    }
}

/// Events of a queue as they happen (`async for ev in aq.events():`); as
/// EventStream, with `aclose()`.
#[pyclass(frozen, module = "dlm")]
pub struct AsyncEventStream {
    follow: Follow,
}

/// Ends `async for` when the stream is closed.
struct Next(Option<Record>);

impl<'py> IntoPyObject<'py> for Next {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            Some(r) => Ok(r.into_pyobject(py)?.into_any()),
            None => Err(pyo3::exceptions::PyStopAsyncIteration::new_err(())),
        }
    }
}

#[pymethods]
impl AsyncEventStream {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let next = self.follow.next();
        awaitable(py, async move { next.await.map(Next) })
    }

    /// Stop following (awaitable).
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.follow.close();
        awaitable(py, async move { Ok(()) })
    }
}

/// An async handler: started on the loop's thread; its asyncio task is
/// cancelled when the worker drops it (task timeout, worker stopped).
async fn on_the_loop(
    handler: Arc<Py<PyAny>>,
    task: dlm::queue::Task,
    run: dlm::queue::RunContext,
    stash: Stash,
    on_loop: Arc<crate::bridge::Shared>,
) -> HandlerOut {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let running: Arc<Mutex<Option<Py<PyAny>>>> = Arc::new(Mutex::new(None));
    let slot = running.clone();
    on_loop.call_soon(Box::new(move |py| {
        start_handler(py, &handler, task, run, tx, &slot, stash)
    }));
    let cancel = CancelOnDrop {
        running,
        on_loop,
        armed: true,
    };
    let out = rx
        .await
        .unwrap_or_else(|_| Err(dlm::queue::TaskError::retry("handler was dropped")));
    cancel.disarm();
    out
}

type HandlerOut = Result<Option<Vec<u8>>, dlm::queue::TaskError>;

/// On the loop's thread: call the handler; a coroutine (or other awaitable)
/// becomes an asyncio task whose end answers `tx`.
fn start_handler(
    py: Python<'_>,
    handler: &Py<PyAny>,
    task: dlm::queue::Task,
    run: dlm::queue::RunContext,
    tx: tokio::sync::oneshot::Sender<HandlerOut>,
    running: &Mutex<Option<Py<PyAny>>>,
    stash: Stash,
) {
    static ENSURE_FUTURE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let started = (|| -> PyResult<Option<Bound<'_, PyAny>>> {
        let t = Py::new(py, Task::of_run(py, &task, run))?;
        let r = handler.bind(py).call1((t,))?;
        if r.hasattr(pyo3::intern!(py, "__await__"))? {
            let fut = ENSURE_FUTURE
                .import(py, "asyncio", "ensure_future")?
                .call1((r,))?;
            *lock(running) = Some(fut.clone().unbind());
            fut.call_method1(
                pyo3::intern!(py, "add_done_callback"),
                (HandlerDone {
                    tx: tx.clone(),
                    task: task.clone(),
                    stash: stash.clone(),
                },),
            )?;
            Ok(None)
        } else {
            Ok(Some(r))
        }
    })();
    match started {
        Ok(None) => {}
        Ok(Some(r)) => answer(&tx, outcome(py, Ok(r), &task, &stash)),
        Err(e) => answer(&tx, outcome(py, Err(e), &task, &stash)),
    }
}

type Answer = Arc<Mutex<Option<tokio::sync::oneshot::Sender<HandlerOut>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn answer(tx: &Answer, out: HandlerOut) {
    if let Some(tx) = lock(tx).take() {
        let _ = tx.send(out);
    }
}

/// The done-callback of a handler's asyncio task: its result, exception or
/// cancellation goes to the worker.
#[pyclass(frozen, module = "dlm._dlm")]
struct HandlerDone {
    tx: Answer,
    task: dlm::queue::Task,
    stash: Stash,
}

#[pymethods]
impl HandlerDone {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = fut.py();
        let out = if fut
            .call_method0(pyo3::intern!(py, "cancelled"))?
            .is_truthy()?
        {
            Err(dlm::queue::TaskError::retry(
                "the handler's task was cancelled",
            ))
        } else {
            let r = fut.call_method0(pyo3::intern!(py, "result"));
            outcome(py, r, &self.task, &self.stash)
        };
        answer(&self.tx, out);
        Ok(())
    }
}

/// Cancels a handler's asyncio task when the worker drops the handler's
/// future before it answered (task timeout, worker stopped).
struct CancelOnDrop {
    running: Arc<Mutex<Option<Py<PyAny>>>>,
    on_loop: Arc<crate::bridge::Shared>,
    armed: bool,
}

impl CancelOnDrop {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let running = self.running.clone();
            // Queued after the call that starts the handler: it finds the task.
            self.on_loop.call_soon(Box::new(move |py| {
                if let Some(f) = lock(&running).take() {
                    let _ = f.bind(py).call_method0(pyo3::intern!(py, "cancel"));
                }
            }));
        }
    }
}

/// Bytes handed to Python as `bytes`.
pub struct Bytes(pub Vec<u8>);

impl<'py> IntoPyObject<'py> for Bytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.0))
    }
}

/// A claimed lease, shared by both flavours.
struct LeaseCore {
    task: Py<Task>,
    lease: Arc<tokio::sync::Mutex<Option<dlm::queue::Lease>>>,
}

fn lease_gone() -> PyErr {
    state_err(
        "lease",
        "this lease's task was acked, nacked or abandoned already".into(),
    )
}

impl LeaseCore {
    fn new(py: Python<'_>, l: dlm::queue::Lease) -> PyResult<Self> {
        Ok(LeaseCore {
            task: Py::new(py, Task::from_core(py, l.task()))?,
            lease: Arc::new(tokio::sync::Mutex::new(Some(l))),
        })
    }

    fn finish<T, F, Fut>(&self, f: F) -> impl Future<Output = PyResult<T>> + Send + use<T, F, Fut>
    where
        F: FnOnce(dlm::queue::Lease) -> Fut + Send + 'static,
        Fut: Future<Output = dlm::Result<T>> + Send,
        T: Send + 'static,
    {
        let slot = self.lease.clone();
        async move {
            let l = slot.lock().await.take();
            match l {
                Some(l) => f(l).await.map_err(err),
                None => Err(lease_gone()),
            }
        }
    }

    fn ack(
        &self,
        result: Option<Bound<'_, PyAny>>,
    ) -> PyResult<impl Future<Output = PyResult<()>> + Send + use<>> {
        let r = match result {
            Some(r) => result_bytes(&r).map_err(|e| {
                err(dlm::Error::InvalidArgument {
                    arg: "result",
                    reason: e,
                })
            })?,
            None => None,
        };
        Ok(self.finish(move |l| async move {
            match r {
                Some(r) => l.ack_with(r).await,
                None => l.ack().await,
            }
        }))
    }

    fn nack(
        &self,
        error: &str,
        retry_after: Option<f64>,
    ) -> PyResult<impl Future<Output = PyResult<&'static str>> + Send + use<>> {
        let after = opt_secs("retry_after", retry_after).map_err(err)?;
        let error = error.to_string();
        Ok(self.finish(move |l| async move {
            let n = match after {
                Some(a) => l.nack_after(a, &error).await,
                None => l.nack(&error).await,
            }?;
            Ok(match n {
                dlm::queue::Nacked::Dead => "dead",
                _ => "retrying",
            })
        }))
    }

    fn with_lease<T, F>(&self, f: F) -> impl Future<Output = PyResult<T>> + Send + use<T, F>
    where
        F: for<'a> FnOnce(&'a dlm::queue::Lease) -> crate::guard::BoxFut<'a, dlm::Result<T>>
            + Send
            + 'static,
        T: Send + 'static,
    {
        let slot = self.lease.clone();
        async move {
            let g = slot.lock().await;
            match g.as_ref() {
                Some(l) => f(l).await.map_err(err),
                None => Err(lease_gone()),
            }
        }
    }

    fn extend(&self, lease: f64) -> PyResult<impl Future<Output = PyResult<()>> + Send + use<>> {
        let d = secs("lease", lease).map_err(err)?;
        Ok(self.with_lease(move |l| Box::pin(l.extend(d))))
    }

    fn progress(
        &self,
        pct: u8,
        message: String,
    ) -> impl Future<Output = PyResult<()>> + Send + use<> {
        self.with_lease(move |l| Box::pin(async move { l.progress(pct, &message).await }))
    }
}

macro_rules! lease_methods {
    ($t:ident, $run:ident, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(frozen, module = "dlm")]
        pub struct $t {
            core: LeaseCore,
        }

        #[pymethods]
        impl $t {
            /// The task.
            #[getter]
            fn task(&self, py: Python<'_>) -> Py<Task> {
                self.core.task.clone_ref(py)
            }

            /// Done: remove the task, storing `result` (bytes or str) if given.
            #[pyo3(signature = (result=None))]
            fn ack<'py>(
                &self,
                py: Python<'py>,
                result: Option<Bound<'py, PyAny>>,
            ) -> PyResult<$run!(py, ())> {
                $run(py, self.core.ack(result)?)
            }

            /// Failed: retry later (after `retry_after` seconds, else the
            /// queue's backoff) or dead-letter it after max_attempts.
            /// "retrying" or "dead".
            #[pyo3(signature = (error="", retry_after=None))]
            fn nack<'py>(
                &self,
                py: Python<'py>,
                error: &str,
                retry_after: Option<f64>,
            ) -> PyResult<$run!(py, &'static str)> {
                $run(py, self.core.nack(error, retry_after)?)
            }

            /// Give the task back untried.
            fn abandon<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, ())> {
                $run(py, self.core.finish(|l| l.abandon()))
            }

            /// Extend the lease to `lease` seconds from now.
            fn extend<'py>(&self, py: Python<'py>, lease: f64) -> PyResult<$run!(py, ())> {
                $run(py, self.core.extend(lease)?)
            }

            /// Report progress (0..=100 and a message), shown by `q.progress(id)`.
            #[pyo3(signature = (pct, message=String::new()))]
            fn progress<'py>(
                &self,
                py: Python<'py>,
                pct: Int<u8>,
                message: String,
            ) -> PyResult<$run!(py, ())> {
                $run(py, self.core.progress(pct.get("pct")?, message))
            }

            fn __repr__(&self, py: Python<'_>) -> String {
                let id = PyString::new(py, &self.core.task.get().id)
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_default();
                format!("<dlm.{} {id}>", stringify!($t))
            }
        }

        impl $t {
            fn wrap(py: Python<'_>, leases: Vec<dlm::queue::Lease>) -> PyResult<Vec<Self>> {
                let _ = py;
                leases
                    .into_iter()
                    .map(|l| {
                        Ok($t {
                            core: LeaseCore::new(py, l)?,
                        })
                    })
                    .collect()
            }
        }
    };
}

macro_rules! queue_methods {
    ($t:ty, $run:ident, $lease:ident, $events:ident) => {
        #[pymethods]
        impl $t {
        /// The queue's name.
        #[getter]
        fn name(&self) -> &str {
            self.core.0.name()
        }

        /// Add a task (due after `delay` seconds). Returns False when a task
        /// with this id is already queued (kept, unless replace=True; a
        /// replacement of a task in flight runs once that run has ended).
        /// after=[ids]: run only once those tasks completed. shard_key: on a
        /// sharded queue, place the task by this key instead of its id (a
        /// group is its tasks' shard key: another key with it is refused).
        #[pyo3(signature = (id, payload=None, *, delay=0.0, priority=Int::of(0), group=None, after=None, timeout=None, replace=false, shard_key=None))]
        #[allow(clippy::too_many_arguments)]
        fn push<'py>(
            &self,
            py: Python<'py>,
            id: String,
            payload: Option<Payload>,
            delay: f64,
            priority: Int<u16>,
            group: Option<String>,
            after: Option<Vec<String>>,
            timeout: Option<f64>,
            replace: bool,
            shard_key: Option<String>,
        ) -> PyResult<$run!(py, bool)> {
            let payload = opt_payload(payload, "payload")?;
            let priority = priority.get("priority")?;
            $run(py, self.core.push(id, payload, delay, priority, group, after, timeout, replace, shard_key))
        }

        /// Add many tasks in one round trip, all due after `delay` seconds:
        /// `tasks` holds ids or (id, payload) pairs. For each, False when
        /// the id was already queued (kept, unless replace=True).
        #[pyo3(signature = (tasks, *, delay=0.0, replace=false))]
        fn push_many<'py>(
            &self,
            py: Python<'py>,
            tasks: Vec<Bound<'py, PyAny>>,
            delay: f64,
            replace: bool,
        ) -> PyResult<$run!(py, Vec<bool>)> {
            let tasks = new_tasks(tasks)?;
            $run(py, self.core.push_many(tasks, delay, replace))
        }

        /// The queue's counts: waiting, delayed, in_flight, dead, processed,
        /// failed, blocked, paused, oldest_due (seconds).
        fn stats<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, Record)> {
            $run(py, self.core.stats())
        }

        /// Each shard's counts, in shard order (dicts as stats() gives;
        /// one for a queue that is not sharded).
        fn shard_stats<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, Vec<Record>)> {
            $run(py, self.core.simple(|q| async move {
                q.shard_stats().await.map(|v| v.into_iter().map(stats_record).collect::<Vec<Record>>())
            }))
        }

        /// How the queue is spread: dict(k, version, draining, shards=[dict(index,
        /// tag, slot)]): k shards new tasks go to (1: not sharded), the
        /// layout's version (0: never sharded), while a lowering drains the
        /// shards there were before it (else None), and every shard workers
        /// claim from with its hash tag and Redis Cluster slot.
        fn shards<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, Record)> {
            $run(py, self.core.simple(|q| async move { q.shards().await.map(layout_record) }))
        }

        /// The stored result of task `id` (bytes), or None (no result yet,
        /// none at all, or unknown: wait_result tells these apart).
        fn result<'py>(&self, py: Python<'py>, id: String) -> PyResult<$run!(py, Option<Bytes>)> {
            $run(py, self.core.result(id))
        }

        /// The outcome of task `id`, waiting up to `timeout` seconds: its
        /// result (bytes; None when it completed without one), else
        /// dlm.TaskFailed (it died: `error`), dlm.NotFound (no such task
        /// known) or dlm.ResultTimeout (not finished in time: `state`).
        fn wait_result<'py>(&self, py: Python<'py>, id: String, timeout: f64) -> PyResult<$run!(py, Option<Bytes>)> {
            $run(py, self.core.outcome(id, timeout)?)
        }

        /// Where task `id` is now: "blocked", "waiting", "delayed",
        /// "in_flight", "dead" or "completed"; None when it is not known
        /// (never pushed, cancelled, or completed and forgotten).
        fn status<'py>(&self, py: Python<'py>, id: String) -> PyResult<$run!(py, Option<&'static str>)> {
            $run(py, self.core.simple(move |q| async move {
                q.task(&id).await.map(|d| d.map(|d| d.state.as_str()))
            }))
        }

        /// Remove task `id` if it is waiting (due or delayed): True when it
        /// was removed, False when it is not waiting (unknown, blocked,
        /// in flight, completed or dead).
        fn cancel<'py>(&self, py: Python<'py>, id: String) -> PyResult<$run!(py, bool)> {
            $run(py, self.core.simple(move |q| async move { q.cancel(&id).await }))
        }

        /// Remove every task that is waiting and due now (delayed, blocked,
        /// in-flight and dead tasks stay); how many.
        fn clear<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, usize)> {
            $run(py, self.core.simple(|q| async move { q.clear().await }))
        }

        /// One page of the event log (the queue must log events:
        /// configure(events=N)): dict(events=[...], cursor=...). after: a
        /// cursor of an earlier page or event (None: from the oldest kept).
        #[pyo3(signature = (after=None, count=Int::of(100)))]
        fn events_page<'py>(&self, py: Python<'py>, after: Option<String>, count: Int<usize>) -> PyResult<$run!(py, Record)> {
            let count = count.get("count")?;
            let from = events_from(true, after);
            $run(py, self.core.simple(move |q| async move {
                let (events, next) = q.events_page(&from, count).await?;
                let cursor = match next {
                    dlm::queue::EventsFrom::After(c) => Val::Str(c),
                    _ => Val::None,
                };
                let events: Vec<Record> = events.into_iter().map(event_record).collect();
                Ok(Record::default().with("events", Val::Records(events)).with("cursor", cursor))
            }))
        }

        /// Follow the event log as it grows: an iterator of event dicts.
        /// start=True: from the oldest event kept; after=cursor: after that
        /// event; else only what happens from now on.
        #[pyo3(signature = (*, start=false, after=None))]
        fn events(&self, start: bool, after: Option<String>) -> $events {
            $events { follow: Follow::new(&self.core.0, events_from(start, after)) }
        }

        /// Up to `count` dead-lettered tasks: dicts of id, error, payload,
        /// died_at (float seconds since the epoch).
        #[pyo3(signature = (count=Int::of(100)))]
        fn dead<'py>(&self, py: Python<'py>, count: Int<usize>) -> PyResult<$run!(py, Vec<Record>)> {
            $run(py, self.core.dead(count.get("count")?))
        }

        /// Queue dead tasks again (all, or those of `ids`); how many.
        #[pyo3(signature = (ids=None))]
        fn retry_dead<'py>(&self, py: Python<'py>, ids: Option<Vec<String>>) -> PyResult<$run!(py, usize)> {
            $run(py, self.core.retry_dead(ids))
        }

        /// Drop every dead task; how many.
        fn purge_dead<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, usize)> {
            $run(py, self.core.simple(|q| async move { q.purge_dead().await }))
        }

        /// Stop workers from claiming; True if it was running.
        fn pause<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, bool)> {
            $run(py, self.core.simple(|q| async move { q.pause().await }))
        }

        /// Let workers claim again; True if it was paused.
        fn resume<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, bool)> {
            $run(py, self.core.simple(|q| async move { q.resume().await }))
        }

        /// Lease up to `count` due tasks for `lease` seconds; ack or nack each.
        #[pyo3(signature = (count=Int::of(1), lease=30.0))]
        fn claim<'py>(&self, py: Python<'py>, count: Int<usize>, lease: f64) -> PyResult<$run!(py, Vec<$lease>)> {
            let count = count.get("count")?;
            let d = secs("lease", lease).map_err(err)?;
            let q = self.core.0.clone();
            $run(py, async move {
                let leases = q.claim(count, d).await.map_err(err)?;
                Python::attach(|py| $lease::wrap(py, leases))
            })
        }

        /// Change the queue's shared settings (None: unchanged) and return
        /// them all. group_concurrency: tasks of one group in flight at once
        /// (0: no limit); rate: (n, period seconds) claims at most (n=0: no
        /// limit); keep_completed: ids of acked tasks kept (0: none);
        /// events: the event log's cap (0: off); keep_results: seconds
        /// results are kept; keep_results_bytes: the most bytes of results
        /// kept in all (default 64 MiB; the oldest are evicted first);
        /// shards: spread the queue over K shards (1 to 64; raising moves no
        /// task; lowering is refused while the removed shards hold tasks,
        /// unless drain=True, and the same call again finishes the drain).
        #[pyo3(signature = (*, group_concurrency=None, rate=None, keep_completed=None, events=None, keep_results=None, keep_results_bytes=None, shards=None, drain=false))]
        // Python keyword arguments, one per setting.
        #[allow(clippy::too_many_arguments)]
        fn configure<'py>(
            &self,
            py: Python<'py>,
            group_concurrency: Option<Int<u32>>,
            rate: Option<(Int<u32>, f64)>,
            keep_completed: Option<Int<u32>>,
            events: Option<Int<u32>>,
            keep_results: Option<f64>,
            keep_results_bytes: Option<Int<u64>>,
            shards: Option<Int<u16>>,
            drain: bool,
        ) -> PyResult<$run!(py, Record)> {
            let rate = match rate {
                Some((n, p)) => Some((n.get("rate")?, p)),
                None => None,
            };
            let change = settings_change(
                opt_int(group_concurrency, "group_concurrency")?,
                rate,
                opt_int(keep_completed, "keep_completed")?,
                opt_int(events, "events")?,
                keep_results,
                opt_int(keep_results_bytes, "keep_results_bytes")?,
            ).map_err(err)?;
            let change = match opt_int(shards, "shards")? {
                Some(k) => change.shards(k).drain_shards(drain),
                None => change,
            };
            let q = self.core.0.clone();
            $run(py, async move { q.configure(&change).await.map(settings_record).map_err(err) })
        }

        /// The queue's shared settings (see configure).
        fn settings<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, Record)> {
            let q = self.core.0.clone();
            $run(py, async move { q.settings().await.map(settings_record).map_err(err) })
        }

        /// Add (or change) the repeating task `id`: a task `id@TICK` every
        /// `every` seconds or per `cron` expression. "added", "changed" or
        /// "unchanged".
        #[pyo3(signature = (id, *, every=None, cron=None, payload=None))]
        fn schedule<'py>(
            &self,
            py: Python<'py>,
            id: String,
            every: Option<f64>,
            cron: Option<String>,
            payload: Option<Payload>,
        ) -> PyResult<$run!(py, &'static str)> {
            let payload = opt_payload(payload, "payload")?;
            let repeat = match (every, cron) {
                (Some(e), None) => dlm::queue::Repeat::Every(secs("every", e).map_err(err)?),
                (None, Some(c)) => dlm::queue::Repeat::Cron(c),
                _ => {
                    return Err(err(dlm::Error::InvalidArgument {
                        arg: "every",
                        reason: "give every= or cron=, one of them".into(),
                    }));
                }
            };
            let q = self.core.0.clone();
            $run(py, async move {
                let r = q.schedule(&id, repeat, payload).await.map_err(err)?;
                Ok::<_, PyErr>(match r {
                    dlm::queue::Scheduled::Added => "added",
                    dlm::queue::Scheduled::Changed => "changed",
                    _ => "unchanged",
                })
            })
        }

        /// Remove the repeating task `id`; True if it existed.
        fn unschedule<'py>(&self, py: Python<'py>, id: String) -> PyResult<$run!(py, bool)> {
            $run(py, self.core.simple(move |q| async move { q.unschedule(&id).await }))
        }

        /// The repeating tasks: dicts of id, repeat, next_tick (float
        /// seconds since the epoch), payload.
        #[pyo3(signature = (limit=Int::of(100)))]
        fn schedules<'py>(&self, py: Python<'py>, limit: Int<usize>) -> PyResult<$run!(py, Vec<Record>)> {
            let limit = limit.get("limit")?;
            $run(py, self.core.simple(move |q| async move {
                q.schedules(limit).await.map(|v| {
                    v.into_iter()
                        .map(|s| {
                            Record::default()
                                .with("id", s.id)
                                .with("repeat", s.repeat.to_string())
                                .with("next_tick", epoch(s.next_tick))
                                .with("payload", s.payload)
                        })
                        .collect::<Vec<Record>>()
                })
            }))
        }

        /// Everything known about task `id` (state, attempts, fence, error,
        /// ...) as a dict, or None.
        fn task<'py>(&self, py: Python<'py>, id: String) -> PyResult<$run!(py, Option<Record>)> {
            $run(py, self.core.simple(move |q| async move { q.task(&id).await.map(|d| d.map(task_record)) }))
        }

        /// The queue's live workers: dicts of id, host, pid, concurrency, busy, processed, failed, ...
        fn workers<'py>(&self, py: Python<'py>) -> PyResult<$run!(py, Vec<Record>)> {
            $run(py, self.core.simple(move |q| async move {
                q.workers().await.map(|v| v.into_iter().map(worker_record).collect::<Vec<Record>>())
            }))
        }

        /// The last progress reported for task `id`: (pct, message) or None.
        fn progress<'py>(&self, py: Python<'py>, id: String) -> PyResult<$run!(py, Option<(u8, String)>)> {
            $run(py, self.core.simple(move |q| async move {
                q.progress(&id).await.map(|p| p.map(|p| (p.pct, p.message)))
            }))
        }

        fn __repr__(&self, py: Python<'_>) -> String {
            let name = PyString::new(py, self.core.0.name())
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_default();
            format!("<dlm.{} {name}>", Self::KIND)
        }
        }
    };
}

macro_rules! sync_ret {
    ($py:ident, $t:ty) => {
        $t
    };
}
macro_rules! async_ret {
    ($py:ident, $t:ty) => { Bound<'py, PyAny> };
}

/// A task queue (sync calls).
#[pyclass(frozen, module = "dlm")]
pub struct Queue {
    core: Core,
}

impl Queue {
    const KIND: &'static str = "Queue";
    pub fn new(q: dlm::queue::Queue) -> Self {
        Queue { core: Core::new(q) }
    }
}

use block as sync_ret;
queue_methods!(Queue, sync_ret, Lease, EventStream);
lease_methods!(
    Lease,
    sync_ret,
    "A claimed task (sync calls): ack, nack or extend it before its lease runs out."
);

#[pymethods]
impl Queue {
    /// Run `handler(task)` for every task, `concurrency` at a time, each in
    /// a thread of its own. Its return value (bytes, str or None) becomes the
    /// task's result (anything else, or a result over 1 MiB, dead-letters
    /// the task at once); an exception nacks the task (retried with
    /// backoff, then dead-lettered) with its text and traceback as the
    /// error. stop_when_idle=True returns once the queue is empty; else it
    /// runs until stopped. Returns dict(acked, retried, dead, lost,
    /// returned).
    ///
    /// Stopping: `stop()` on this handle, `stop` (an object with
    /// `is_set()`, e.g. a threading.Event) set, Ctrl-C, SIGTERM (in the
    /// main thread, unless the application handles SIGTERM itself), or a
    /// handler raising SystemExit or KeyboardInterrupt. Each stops it
    /// gracefully: no new claims, running handlers finish (within the
    /// worker's grace period, else their tasks go back to the queue), then
    /// it returns (stop(), the event) or raises (KeyboardInterrupt,
    /// SystemExit(143) for SIGTERM, the handler's exception). A second
    /// Ctrl-C or SIGTERM stops it at once, giving its tasks back.
    #[pyo3(signature = (handler, concurrency=Int::of(1), stop_when_idle=false, *, lease=None, task_timeout=None, worker_id=None, grace=None, keep_results=None, stop=None))]
    #[allow(clippy::too_many_arguments)]
    fn work(
        &self,
        py: Python<'_>,
        handler: Bound<'_, PyAny>,
        concurrency: Int<usize>,
        stop_when_idle: bool,
        lease: Option<f64>,
        task_timeout: Option<f64>,
        worker_id: Option<String>,
        grace: Option<f64>,
        keep_results: Option<f64>,
        stop: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Record> {
        check_handler(&handler)?;
        let concurrency = concurrency.get("concurrency")?;
        let args = WorkArgs {
            concurrency,
            stop_when_idle,
            lease,
            task_timeout,
            worker_id,
            grace,
            keep_results,
        };
        let token = self.core.stop_token();
        let stash = Stash::default();
        let sigterm = Sigterm::install(py)?;
        started(py, self.core.0.name(), concurrency);
        let r = block_until(
            py,
            self.core
                .work(handler.unbind(), None, args, token.clone(), stash.clone()),
            Some(token),
            stop.as_ref(),
        );
        drop(sigterm);
        let r = r?;
        match lock(&stash).take() {
            Some(e) => Err(e),
            None => Ok(r),
        }
    }

    /// Stop every `work` running on this handle (in any thread), gracefully.
    fn stop(&self) {
        self.core.stop();
    }
}

fn started(py: Python<'_>, name: &str, concurrency: usize) {
    crate::life::refresh_level(py);
    crate::life::log(
        py,
        20,
        &format!("worker of queue {name:?} started (concurrency {concurrency})"),
        None,
    );
}

/// A task queue (awaitable calls).
#[pyclass(frozen, module = "dlm")]
pub struct AsyncQueue {
    core: Core,
}

impl AsyncQueue {
    const KIND: &'static str = "AsyncQueue";
    pub fn new(q: dlm::queue::Queue) -> Self {
        AsyncQueue { core: Core::new(q) }
    }
}

use awaitable as async_ret;
queue_methods!(AsyncQueue, async_ret, AsyncLease, AsyncEventStream);
lease_methods!(
    AsyncLease,
    async_ret,
    "A claimed task (awaitable calls): ack, nack or extend it before its lease runs out."
);

#[pymethods]
impl AsyncQueue {
    /// Run `handler(task)` for every task, `concurrency` at a time: a
    /// coroutine function on this event loop, a plain function in a thread
    /// (never blocking the loop). As Queue.work otherwise; `stop` is an
    /// asyncio.Event. SIGTERM and Ctrl-C (while SIGINT has Python's or
    /// asyncio.run's handler) stop it gracefully, a second one at once, as
    /// in Queue.work. Cancelling the awaiting task stops the worker at once
    /// (its tasks given back).
    #[pyo3(signature = (handler, concurrency=Int::of(1), stop_when_idle=false, *, lease=None, task_timeout=None, worker_id=None, grace=None, keep_results=None, stop=None))]
    #[allow(clippy::too_many_arguments)]
    fn work<'py>(
        &self,
        py: Python<'py>,
        handler: Bound<'py, PyAny>,
        concurrency: Int<usize>,
        stop_when_idle: bool,
        lease: Option<f64>,
        task_timeout: Option<f64>,
        worker_id: Option<String>,
        grace: Option<f64>,
        keep_results: Option<f64>,
        stop: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        check_handler(&handler)?;
        let concurrency = concurrency.get("concurrency")?;
        let args = WorkArgs {
            concurrency,
            stop_when_idle,
            lease,
            task_timeout,
            worker_id,
            grace,
            keep_results,
        };
        let on_loop = crate::bridge::running_loop_calls(py)?;
        let handler_loop = if is_async_handler(&handler)? {
            Some(on_loop.clone())
        } else {
            None
        };
        let token = self.core.stop_token();
        let hard = tokio_util::sync::CancellationToken::new();
        let signalled = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let s = Bound::new(
            py,
            StopWorker {
                token: token.clone(),
                hard: hard.clone(),
                signal: signalled.clone(),
            },
        )?;
        let set_up = AsyncStop::set_up(py, stop.as_ref(), &s)?;
        let stash = Stash::default();
        started(py, self.core.0.name(), concurrency);
        let work = self
            .core
            .work(handler.unbind(), handler_loop, args, token, stash.clone());
        let undo = UndoOnDrop(Some((on_loop, set_up)));
        awaitable(py, async move {
            // A second signal drops the worker: its handlers are cancelled and
            // its tasks go back to the queue at once (the core's worker gives
            // its leases back when dropped), as a sync `work` does.
            let r = tokio::select! {
                r = work => Some(r),
                () = hard.cancelled() => None,
            };
            drop(undo);
            let signal = signal_exit(signalled.load(std::sync::atomic::Ordering::SeqCst));
            let Some(r) = r else {
                return Err(
                    signal.unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err(()))
                );
            };
            let r = r?;
            if let Some(e) = lock(&stash).take() {
                return Err(e);
            }
            match signal {
                Some(e) => Err(e),
                None => Ok(r),
            }
        })
    }

    /// Stop every `work` running on this handle, gracefully.
    fn stop(&self) {
        self.core.stop();
    }
}

/// The signals' numbers on Linux (and every POSIX system dlm runs on).
const SIGTERM: i32 = 15;
const SIGINT: i32 = 2;
