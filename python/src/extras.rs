//! Lock-free helpers of the sync Client: versioned records, stock counters,
//! ids and rate limiters.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::rt::{block, err, secs};

/// A record written with compare-and-set on its version (optimistic locking).
#[pyclass(frozen, module = "dlm")]
pub struct Versioned {
    v: dlm::consistency::Versioned,
}

impl Versioned {
    pub fn new(v: dlm::consistency::Versioned) -> Self {
        Versioned { v }
    }
}

struct Read(Option<(Vec<u8>, u64)>);

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

#[pymethods]
impl Versioned {
    /// (data, version), or None when never written.
    fn read<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = self.v.clone();
        block(py, async move { v.read().await.map(Read).map_err(err) })?.into_pyobject(py)
    }

    /// Write `data` if the version is still `expected` (0: never written);
    /// returns the new version, else raises dlm.Conflict.
    fn write(&self, py: Python<'_>, expected: u64, data: Vec<u8>) -> PyResult<u64> {
        let v = self.v.clone();
        block(
            py,
            async move { v.write(expected, data).await.map_err(err) },
        )
    }
}

/// An atomic stock counter: take `n` only when `n` are left.
#[pyclass(frozen, module = "dlm")]
pub struct Stock {
    s: dlm::consistency::Stock,
}

impl Stock {
    pub fn new(s: dlm::consistency::Stock) -> Self {
        Stock { s }
    }
}

#[pymethods]
impl Stock {
    /// The amount left.
    fn get(&self, py: Python<'_>) -> PyResult<u64> {
        let s = self.s.clone();
        block(py, async move { s.get().await.map_err(err) })
    }

    /// Set the amount.
    fn set(&self, py: Python<'_>, n: u64) -> PyResult<()> {
        let s = self.s.clone();
        block(py, async move { s.set(n).await.map_err(err) })
    }

    /// Add `n`; returns the new amount.
    fn add(&self, py: Python<'_>, n: u64) -> PyResult<u64> {
        let s = self.s.clone();
        block(py, async move { s.add(n).await.map_err(err) })
    }

    /// Take `n` if at least `n` is left: (taken, left).
    fn take(&self, py: Python<'_>, n: u64) -> PyResult<(bool, u64)> {
        let s = self.s.clone();
        block(py, async move {
            match s.take(n).await.map_err(err)? {
                dlm::consistency::Take::Taken { left } => Ok((true, left)),
                dlm::consistency::Take::Insufficient { left } => Ok((false, left)),
            }
        })
    }
}

/// Unique increasing ids across servers.
#[pyclass(frozen, module = "dlm")]
pub struct Ids {
    i: dlm::ids::Ids,
}

impl Ids {
    pub fn new(i: dlm::ids::Ids) -> Self {
        Ids { i }
    }
}

#[pymethods]
impl Ids {
    /// The next id.
    fn next(&self, py: Python<'_>) -> PyResult<u64> {
        let i = self.i.clone();
        block(py, async move { i.next().await.map_err(err) })
    }

    /// `n` ids at once.
    fn next_batch(&self, py: Python<'_>, n: u64) -> PyResult<Vec<u64>> {
        let i = self.i.clone();
        block(py, async move { i.next_batch(n).await.map_err(err) })
    }
}

/// A rate limiter exact over any window of its period.
#[pyclass(frozen, module = "dlm")]
pub struct RateLimiter {
    r: dlm::ratelimit::RateLimiter,
}

impl RateLimiter {
    pub fn new(r: dlm::ratelimit::RateLimiter) -> Self {
        RateLimiter { r }
    }
}

#[pymethods]
impl RateLimiter {
    /// Take a slot if one is free now: True when granted.
    fn try_acquire(&self, py: Python<'_>) -> PyResult<bool> {
        let r = self.r.clone();
        block(py, async move {
            r.try_acquire().await.map(|a| a.is_granted()).map_err(err)
        })
    }

    /// Wait for a slot (at most `wait` seconds, else dlm.RateLimited; None:
    /// as long as it takes).
    #[pyo3(signature = (wait=None))]
    fn acquire(&self, py: Python<'_>, wait: Option<f64>) -> PyResult<()> {
        let r = self.r.clone();
        let wait = wait.map(|w| secs("wait", w)).transpose().map_err(err)?;
        block(py, async move {
            match wait {
                Some(w) => r.acquire_within(w).await.map(|_| ()).map_err(err),
                None => r.acquire().await.map(|_| ()).map_err(err),
            }
        })
    }
}
