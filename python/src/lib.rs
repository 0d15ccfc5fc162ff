//! Python bindings of dlm: the native module `dlm._dlm`. Every lock, queue
//! and helper call goes to the Rust core (`crates/dlm`); this crate only
//! converts arguments, results and errors, and bridges to sync and asyncio
//! callers over one tokio runtime.

mod bridge;
mod client;
mod coro;
mod extras;
mod guard;
mod life;
mod queue;
mod rt;

use pyo3::prelude::*;

#[pymodule]
fn _dlm(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_class::<client::AsyncClient>()?;
    m.add_class::<guard::Lock>()?;
    m.add_class::<guard::AsyncLock>()?;
    m.add_class::<guard::LockGuard>()?;
    m.add_class::<guard::AsyncLockGuard>()?;
    m.add_class::<queue::Queue>()?;
    m.add_class::<queue::AsyncQueue>()?;
    m.add_class::<queue::Task>()?;
    m.add_class::<queue::Lease>()?;
    m.add_class::<queue::AsyncLease>()?;
    m.add_class::<queue::EventStream>()?;
    m.add_class::<queue::AsyncEventStream>()?;
    m.add_class::<extras::Versioned>()?;
    m.add_class::<extras::Stock>()?;
    m.add_class::<extras::Ids>()?;
    m.add_class::<extras::RateLimiter>()?;
    m.add_class::<extras::AsyncVersioned>()?;
    m.add_class::<extras::AsyncStock>()?;
    m.add_class::<extras::AsyncIds>()?;
    m.add_class::<extras::AsyncRateLimiter>()?;
    m.add_function(wrap_pyfunction!(life::enable_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(life::metrics_text, m)?)?;
    coro::register(m)?;
    life::register_at_fork(m)?;
    life::install_logging(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
