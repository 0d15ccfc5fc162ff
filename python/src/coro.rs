//! What the async methods return: a coroutine (registered as a
//! `collections.abc.Coroutine`) over the call's `asyncio.Future`, so that
//! `asyncio.create_task` and `TaskGroup.create_task` take it (they refuse
//! bare Futures). It only forwards to the future's own iterator; the call
//! runs from the moment the method is called, as before.

use pyo3::prelude::*;

/// A call of an async method of dlm: await it, or hand it to
/// `asyncio.create_task`.
#[pyclass(module = "dlm._dlm", name = "Call")]
pub struct Call {
    fut: Py<PyAny>,
    /// The future's iterator, when driven by `send` (an asyncio Task).
    iter: Option<Py<PyAny>>,
    /// `await`ed: the awaiting code iterates the future itself.
    awaited: bool,
}

impl Call {
    pub fn new(fut: Bound<'_, PyAny>) -> Self {
        Call {
            fut: fut.unbind(),
            iter: None,
            awaited: false,
        }
    }

    fn iter<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.iter {
            Some(i) => Ok(i.bind(py).clone()),
            None => {
                let i = self
                    .fut
                    .bind(py)
                    .call_method0(pyo3::intern!(py, "__await__"))?;
                self.iter = Some(i.clone().unbind());
                Ok(i)
            }
        }
    }
}

#[pymethods]
impl Call {
    /// `await call`: the future's own iterator, so that awaiting costs
    /// what awaiting the future did (no forwarding per step).
    fn __await__<'py>(mut slf: PyRefMut<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        slf.awaited = true;
        slf.fut
            .bind(py)
            .call_method0(pyo3::intern!(py, "__await__"))
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let it = self.iter(py)?;
        it.call_method0(pyo3::intern!(py, "__next__"))
    }

    /// Resume the call (the coroutine protocol).
    fn send<'py>(
        &mut self,
        py: Python<'py>,
        value: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let it = self.iter(py)?;
        it.call_method1(pyo3::intern!(py, "send"), (value,))
    }

    /// Raise an exception into the call (the coroutine protocol).
    #[pyo3(signature = (typ, val=None, tb=None))]
    fn throw<'py>(
        &mut self,
        py: Python<'py>,
        typ: Bound<'py, PyAny>,
        val: Option<Bound<'py, PyAny>>,
        tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let it = self.iter(py)?;
        match (val, tb) {
            (None, None) => it.call_method1(pyo3::intern!(py, "throw"), (typ,)),
            (v, None) => it.call_method1(pyo3::intern!(py, "throw"), (typ, v)),
            (v, t) => it.call_method1(pyo3::intern!(py, "throw"), (typ, v, t)),
        }
    }

    /// Close the coroutine (the coroutine protocol).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(i) = self.iter.take() {
            i.bind(py).call_method0(pyo3::intern!(py, "close"))?;
        }
        Ok(())
    }

    /// Cancel the call.
    #[pyo3(signature = (msg=None))]
    fn cancel(&self, py: Python<'_>, msg: Option<Bound<'_, PyAny>>) -> PyResult<bool> {
        let f = self.fut.bind(py);
        match msg {
            Some(m) => f.call_method1(pyo3::intern!(py, "cancel"), (m,)),
            None => f.call_method0(pyo3::intern!(py, "cancel")),
        }?
        .is_truthy()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = match self
            .fut
            .bind(py)
            .call_method0("done")
            .and_then(|d| d.is_truthy())
        {
            Ok(true) => "done",
            _ => "pending",
        };
        format!("<dlm call {state}>")
    }
}

/// A call dropped before it ended, never awaited (or its awaiting task
/// gone), is cancelled: a coroutine that nobody awaits does nothing, and a
/// forgotten `AsyncQueue.work` stops (its tasks given back) instead of
/// running unseen for as long as the process lives.
impl Drop for Call {
    fn drop(&mut self) {
        if self.awaited || self.iter.is_some() {
            // Its awaiting code or task holds the future and cancels it.
            return;
        }
        Python::attach(|py| {
            // Dropped while an exception propagates (the call's own, raised
            // by `await`): it must survive the calls below.
            let pending = PyErr::take(py);
            let f = self.fut.bind(py);
            if let Ok(false) = f
                .call_method0(pyo3::intern!(py, "done"))
                .and_then(|d| d.is_truthy())
            {
                let _ = f.call_method0(pyo3::intern!(py, "cancel"));
            }
            if let Some(e) = pending {
                e.restore(py);
            }
        });
    }
}

/// Register [`Call`] as a `collections.abc.Coroutine`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Call>()?;
    py.import("collections.abc")?
        .getattr("Coroutine")?
        .call_method1("register", (py.get_type::<Call>(),))?;
    Ok(())
}
