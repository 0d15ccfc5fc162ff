//! The asyncio bridge: a Rust future runs on the tokio runtime, and its
//! outcome is handed to an `asyncio.Future` of the caller's event loop.
//!
//! The runtime's threads never take the GIL for this: a finished call
//! queues its outcome and, when the queue was empty, writes one byte to a
//! socket pair whose reading end the event loop watches (`add_reader`). The
//! loop's thread, which holds the GIL anyway, drains the queue in one go,
//! turns each outcome into Python objects and resolves the futures. So many
//! concurrent calls cost one wake-up of the loop, and no thread waits for
//! the GIL while the loop is busy (with pyo3-async-runtimes every outcome
//! took the GIL from a runtime thread and scheduled its own callback).
//!
//! Cancellation: a done-callback on the asyncio future aborts the tokio task,
//! which drops the Rust future; after a normal completion the abort finds the
//! task finished and does nothing.

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::rt::rt;

/// Turns a call's outcome into Python objects, on the loop's thread.
type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// Work for the loop's thread, sent from the runtime's threads.
pub type LoopCall = Box<dyn FnOnce(Python<'_>) + Send>;

/// What the runtime's threads and one event loop share.
pub struct Shared {
    done: Mutex<Vec<(Py<PyAny>, Outcome)>>,
    calls: Mutex<Vec<LoopCall>>,
    wake: UnixStream,
}

impl Shared {
    fn finish(&self, fut: Py<PyAny>, outcome: Outcome) {
        let was_empty = {
            let mut q = self.done.lock().unwrap_or_else(|p| p.into_inner());
            q.push((fut, outcome));
            q.len() == 1
        };
        if was_empty {
            self.wake();
        }
    }

    /// Run `call` on the loop's thread (with the GIL) soon.
    pub fn call_soon(&self, call: LoopCall) {
        let was_empty = {
            let mut q = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            q.push(call);
            q.len() == 1
        };
        if was_empty {
            self.wake();
        }
    }

    fn wake(&self) {
        // Non-blocking; a full socket means a wake-up is pending anyway.
        let _ = (&self.wake).write(&[1]);
    }
}

/// One event loop's end of the bridge (kept per loop, see [`bridge`]).
#[pyclass(frozen, module = "dlm._dlm")]
pub struct LoopBridge {
    shared: Arc<Shared>,
    readable: UnixStream,
}

#[pymethods]
impl LoopBridge {
    /// Resolve every finished call's future (the loop calls this when the
    /// socket is readable).
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let mut buf = [0u8; 256];
        loop {
            match (&self.readable).read(&mut buf) {
                Ok(n) if n == buf.len() => continue,
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let calls =
            std::mem::take(&mut *self.shared.calls.lock().unwrap_or_else(|p| p.into_inner()));
        for call in calls {
            call(py);
        }
        let done = std::mem::take(&mut *self.shared.done.lock().unwrap_or_else(|p| p.into_inner()));
        for (fut, outcome) in done {
            // One future's trouble must not strand the others: errors are
            // put on the future they belong to, never raised from here.
            let fut = fut.bind(py);
            match fut
                .call_method0(pyo3::intern!(py, "done"))
                .and_then(|d| d.is_truthy())
            {
                Ok(false) => {}
                // Cancelled meanwhile: what the outcome holds (a guard) is
                // dropped unconverted, which releases it.
                _ => continue,
            }
            let set = match outcome(py) {
                Ok(v) => fut.call_method1(pyo3::intern!(py, "set_result"), (v,)),
                Err(e) => fut.call_method1(pyo3::intern!(py, "set_exception"), (e.into_value(py),)),
            };
            if let Err(e) = set {
                let _ = fut.call_method1(pyo3::intern!(py, "set_exception"), (e.into_value(py),));
            }
        }
        Ok(())
    }
}

/// Aborts the call's task when its asyncio future is done (cancelled, or
/// already resolved: then the task has finished and this does nothing).
#[pyclass(frozen, module = "dlm._dlm")]
pub struct AbortOnDone(tokio::task::AbortHandle);

#[pymethods]
impl AbortOnDone {
    fn __call__(&self, _fut: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

/// The bridges of the event loops, by loop (weakly).
static BRIDGES: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn bridges(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    Ok(BRIDGES
        .get_or_try_init(py, || {
            py.import("weakref")?
                .getattr("WeakKeyDictionary")?
                .call0()
                .map(Bound::unbind)
        })?
        .bind(py))
}

/// In a forked child: the parent's bridges were fed by its runtime's
/// threads, which do not exist here; each loop gets a new one.
pub fn after_fork_in_child(py: Python<'_>) -> PyResult<()> {
    if let Some(b) = BRIDGES.get(py) {
        b.bind(py).call_method0("clear")?;
    }
    Ok(())
}

/// The bridge of the running event loop (made on first use in that loop).
fn bridge<'py>(
    py: Python<'py>,
    event_loop: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, LoopBridge>> {
    let bridges = bridges(py)?;
    if let Ok(b) = bridges
        .call_method1(pyo3::intern!(py, "get"), (event_loop,))?
        .cast_into::<LoopBridge>()
    {
        return Ok(b);
    }
    let (readable, wake) = UnixStream::pair()?;
    readable.set_nonblocking(true)?;
    wake.set_nonblocking(true)?;
    let fd = readable.as_raw_fd();
    let b = Bound::new(
        py,
        LoopBridge {
            shared: Arc::new(Shared {
                done: Mutex::new(Vec::new()),
                calls: Mutex::new(Vec::new()),
                wake,
            }),
            readable,
        },
    )?;
    event_loop.call_method1("add_reader", (fd, b.getattr("drain")?))?;
    bridges.set_item(event_loop, &b)?;
    Ok(b)
}

/// The running loop's side of the bridge, for sending it calls.
pub fn running_loop_calls(py: Python<'_>) -> PyResult<Arc<Shared>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let event_loop = GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()?;
    Ok(bridge(py, &event_loop)?.get().shared.clone())
}

/// A coroutine ([`crate::coro::Call`]) over an `asyncio.Future` of the
/// running loop that `fut` (run on the runtime) resolves; cancelling it
/// drops `fut`.
pub fn awaitable<'py, T, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let event_loop = GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()?;
    let b = bridge(py, &event_loop)?;
    let py_fut = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let target = py_fut.clone().unbind();
    let shared = b.get().shared.clone();
    let task = rt().spawn(async move {
        let out = fut.await;
        let outcome: Outcome = Box::new(move |py| out.and_then(|v| v.into_py_any(py)));
        shared.finish(target, outcome);
    });
    py_fut.call_method1(
        pyo3::intern!(py, "add_done_callback"),
        (AbortOnDone(task.abort_handle()),),
    )?;
    Ok(Bound::new(py, crate::coro::Call::new(py_fut))?.into_any())
}
