//! Lock-free helpers: versioned records, stock counters, ids and rate
//! limiters, each in a sync and an asyncio flavour.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::bridge::awaitable;
use crate::rt::{Int, Payload, block, err, opt_secs, payload_bytes};

/// `(data, version)` or None.
pub struct Read(Option<(Vec<u8>, u64)>);

impl<'py> IntoPyObject<'py> for Read {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            None => Ok(py.None().into_bound(py)),
            Some((d, v)) => Ok((PyBytes::new(py, &d), v).into_pyobject(py)?.into_any()),
        }
    }
}

/// Run a core call on a clone of the handle.
macro_rules! call {
    ($run:ident, $py:ident, $h:expr, |$x:ident| $body:expr) => {{
        let $x = $h.clone();
        $run($py, async move { $body.await.map_err(err) })
    }};
}

macro_rules! extras {
    ($run:ident, $ret:ident, $versioned:ident, $stock:ident, $ids:ident, $limiter:ident, $flavour:literal) => {
        #[doc = concat!("A record written with compare-and-set on its version (optimistic locking); ", $flavour, ".")]
        #[pyclass(frozen, module = "dlm")]
        pub struct $versioned {
            v: dlm::consistency::Versioned,
        }

        impl $versioned {
            pub fn new(v: dlm::consistency::Versioned) -> Self {
                $versioned { v }
            }
        }

        #[pymethods]
        impl $versioned {
            /// (data, version), or None when never written.
            fn read<'py>(&self, py: Python<'py>) -> PyResult<$ret!(py, Read)> {
                call!($run, py, self.v, |v| async move { v.read().await.map(Read) })
            }

            /// Write `data` if the version is still `expected` (0: never
            /// written); returns the new version, else raises dlm.Conflict.
            fn write<'py>(&self, py: Python<'py>, expected: Int<u64>, data: Payload) -> PyResult<$ret!(py, u64)> {
                let (expected, data) = (expected.get("expected")?, data.get("data")?);
                call!($run, py, self.v, |v| async move { v.write(expected, data).await })
            }
        }

        #[doc = concat!("An atomic stock counter: take n only when n are left; ", $flavour, ".")]
        #[pyclass(frozen, module = "dlm")]
        pub struct $stock {
            s: dlm::consistency::Stock,
        }

        impl $stock {
            pub fn new(s: dlm::consistency::Stock) -> Self {
                $stock { s }
            }
        }

        #[pymethods]
        impl $stock {
            /// The amount left.
            fn get<'py>(&self, py: Python<'py>) -> PyResult<$ret!(py, u64)> {
                call!($run, py, self.s, |s| async move { s.get().await })
            }

            /// Set the amount.
            fn set<'py>(&self, py: Python<'py>, n: Int<u64>) -> PyResult<$ret!(py, ())> {
                let n = n.get("n")?;
                call!($run, py, self.s, |s| async move { s.set(n).await })
            }

            /// Add `n`; returns the new amount.
            fn add<'py>(&self, py: Python<'py>, n: Int<u64>) -> PyResult<$ret!(py, u64)> {
                let n = n.get("n")?;
                call!($run, py, self.s, |s| async move { s.add(n).await })
            }

            /// Take `n` if at least `n` is left: (taken, left).
            fn take<'py>(&self, py: Python<'py>, n: Int<u64>) -> PyResult<$ret!(py, (bool, u64))> {
                let n = n.get("n")?;
                call!($run, py, self.s, |s| async move {
                    s.take(n).await.map(|t| match t {
                        dlm::consistency::Take::Taken { left } => (true, left),
                        dlm::consistency::Take::Insufficient { left } => (false, left),
                    })
                })
            }
        }

        #[doc = concat!("Unique increasing ids across servers; ", $flavour, ".")]
        #[pyclass(frozen, module = "dlm")]
        pub struct $ids {
            i: dlm::ids::Ids,
        }

        impl $ids {
            pub fn new(i: dlm::ids::Ids) -> Self {
                $ids { i }
            }
        }

        #[pymethods]
        impl $ids {
            /// The next id.
            fn next<'py>(&self, py: Python<'py>) -> PyResult<$ret!(py, u64)> {
                call!($run, py, self.i, |i| async move { i.next().await })
            }

            /// `n` ids at once.
            fn next_batch<'py>(&self, py: Python<'py>, n: Int<u64>) -> PyResult<$ret!(py, Vec<u64>)> {
                let n = n.get("n")?;
                call!($run, py, self.i, |i| async move { i.next_batch(n).await })
            }
        }

        #[doc = concat!("A rate limiter exact over any window of its period; ", $flavour, ".")]
        #[pyclass(frozen, module = "dlm")]
        pub struct $limiter {
            r: dlm::ratelimit::RateLimiter,
        }

        impl $limiter {
            pub fn new(r: dlm::ratelimit::RateLimiter) -> Self {
                $limiter { r }
            }
        }

        #[pymethods]
        impl $limiter {
            /// Take a slot if one is free now: True when granted.
            fn try_acquire<'py>(&self, py: Python<'py>) -> PyResult<$ret!(py, bool)> {
                call!($run, py, self.r, |r| async move { r.try_acquire().await.map(|a| a.is_granted()) })
            }

            /// Wait for a slot: at most `wait` seconds (else dlm.RateLimited),
            /// or as long as it takes (None).
            #[pyo3(signature = (wait=None))]
            fn acquire<'py>(&self, py: Python<'py>, wait: Option<f64>) -> PyResult<$ret!(py, ())> {
                let wait = opt_secs("wait", wait).map_err(err)?;
                call!($run, py, self.r, |r| async move {
                    match wait {
                        Some(w) => r.acquire_within(w).await.map(|_| ()),
                        None => r.acquire().await.map(|_| ()),
                    }
                })
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

use awaitable as async_ret;
use block as sync_ret;

extras!(
    sync_ret,
    sync_ret,
    Versioned,
    Stock,
    Ids,
    RateLimiter,
    "sync calls"
);
extras!(
    async_ret,
    async_ret,
    AsyncVersioned,
    AsyncStock,
    AsyncIds,
    AsyncRateLimiter,
    "awaitable calls"
);

/// The core of `update`: read, compute `f(old)` in Python, write if
/// nobody wrote in between, retry on a conflict. An exception of `f` stops
/// it (nothing written) and is the outcome.
async fn update_fut(
    v: dlm::consistency::Versioned,
    f: Py<PyAny>,
    max_attempts: u32,
) -> PyResult<Updated> {
    {
        let failed: std::sync::Arc<std::sync::Mutex<Option<PyErr>>> = Default::default();
        let slot = failed.clone();
        let r = v
            .update_with(max_attempts, |old| {
                let computed = Python::attach(|py| {
                    let old = old.as_deref().map(|o| PyBytes::new(py, o));
                    let new = f.call1(py, (old,))?;
                    payload_bytes(new.bind(py)).map_err(|reason| {
                        err(dlm::Error::InvalidArgument {
                            arg: "f",
                            reason: format!("f returned {reason}"),
                        })
                    })
                });
                let r = match computed {
                    Ok(new) => Ok((new.clone(), new)),
                    Err(e) => {
                        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        Err(dlm::Error::InvalidArgument {
                            arg: "f",
                            reason: "raised".into(),
                        })
                    }
                };
                async move { r }
            })
            .await;
        if let Some(e) = failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        r.map(|(version, data)| Updated(version, data)).map_err(err)
    }
}

/// `(version, data)` as Python reads it.
pub struct Updated(u64, Vec<u8>);

impl<'py> IntoPyObject<'py> for Updated {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok((self.0, PyBytes::new(py, &self.1))
            .into_pyobject(py)?
            .into_any())
    }
}

#[pymethods]
impl Versioned {
    /// Read, compute `f(old)` (old: bytes, or None when never written) ->
    /// new bytes (or str, written as UTF-8), and write if nobody wrote in
    /// between; on a conflict start over, up to `max_attempts` times
    /// (1..=1000; then dlm.Conflict). Returns (new version, the bytes
    /// written). An exception of `f` stops it: nothing is written and the
    /// exception propagates.
    #[pyo3(signature = (f, max_attempts=Int::of(10)))]
    fn update(&self, py: Python<'_>, f: Py<PyAny>, max_attempts: Int<u32>) -> PyResult<Updated> {
        let max_attempts = max_attempts.get("max_attempts")?;
        block(py, update_fut(self.v.clone(), f, max_attempts))
    }
}

#[pymethods]
impl AsyncVersioned {
    /// update (awaitable): `f` is a plain function, called in one of the
    /// runtime's threads (it must not block for long).
    #[pyo3(signature = (f, max_attempts=Int::of(10)))]
    fn update<'py>(
        &self,
        py: Python<'py>,
        f: Py<PyAny>,
        max_attempts: Int<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let max_attempts = max_attempts.get("max_attempts")?;
        awaitable(py, update_fut(self.v.clone(), f, max_attempts))
    }
}
