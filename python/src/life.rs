//! The process around the binding (issue 33): a fresh runtime after a fork,
//! the core's `tracing` events forwarded to Python's `logging`, and the
//! core's metrics as Prometheus text.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

/// In a forked child (`os.register_at_fork(after_in_child=...)`): the
/// parent's runtime has no threads here, so calls get a new one, and each
/// event loop a new bridge. Clients made before the fork refuse every call
/// with a `dlm.Error` (the core checks the process id): their connections
/// belong to the parent.
#[pyfunction]
pub fn _after_fork_in_child(py: Python<'_>) -> PyResult<()> {
    crate::rt::after_fork_in_child();
    crate::bridge::after_fork_in_child(py)?;
    Ok(())
}

/// Register [`_after_fork_in_child`] with `os.register_at_fork`.
pub fn register_at_fork(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let f = wrap_pyfunction!(_after_fork_in_child, m)?;
    let kw = PyDict::new(py);
    kw.set_item("after_in_child", f)?;
    py.import("os")?
        .call_method("register_at_fork", (), Some(&kw))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// tracing -> logging

/// Python's levels of the core's: TRACE 5, DEBUG 10, INFO 20, WARN 30, ERROR 40.
fn py_level(l: &tracing::Level) -> u8 {
    match *l {
        tracing::Level::ERROR => 40,
        tracing::Level::WARN => 30,
        tracing::Level::INFO => 20,
        tracing::Level::DEBUG => 10,
        _ => 5,
    }
}

/// The `dlm` logger's effective level, as last read (re-read at most once a
/// second, when an event below WARNING asks): an event the logger would drop
/// costs two atomic loads, no GIL.
static LOGGER_LEVEL: AtomicU8 = AtomicU8::new(30);
/// When [`LOGGER_LEVEL`] was read (ms since [`epoch`]; 0: never).
static READ_AT: AtomicU64 = AtomicU64::new(0);
const REREAD_MS: u64 = 1000;

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn dlm_logger(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(LOGGER
        .get_or_try_init(py, || {
            py.import("logging")?
                .call_method1("getLogger", ("dlm",))
                .map(Bound::unbind)
        })?
        .bind(py)
        .clone())
}

/// Read the `dlm` logger's level now (with the GIL).
pub fn refresh_level(py: Python<'_>) {
    if let Ok(l) = dlm_logger(py)
        .and_then(|l| l.call_method0("getEffectiveLevel"))
        .and_then(|l| l.extract::<i64>())
    {
        LOGGER_LEVEL.store(
            u8::try_from(l.clamp(0, 255)).unwrap_or(30),
            Ordering::Relaxed,
        );
    }
    READ_AT.store(now_ms(), Ordering::Relaxed);
}

/// Set at interpreter exit (`atexit`): from then on no event takes the GIL
/// (a thread asking for it while the interpreter finalizes would hang).
static EXITING: AtomicBool = AtomicBool::new(false);

#[pyfunction]
fn _stop_logging() {
    EXITING.store(true, Ordering::Relaxed);
}

fn level_enabled(level: u8) -> bool {
    if EXITING.load(Ordering::Relaxed) {
        return false;
    }
    if level >= 30 {
        // Warnings and errors are rare: always handed over (logging filters them).
        return true;
    }
    let read = READ_AT.load(Ordering::Relaxed);
    if read == 0 || now_ms().saturating_sub(read) > REREAD_MS {
        // Claimed by one caller; the others go on with the level read before.
        if READ_AT
            .compare_exchange(read, now_ms(), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            Python::attach(refresh_level);
        }
    }
    level >= LOGGER_LEVEL.load(Ordering::Relaxed)
}

/// The core's events as records of the `dlm` logger's children
/// (`dlm.queue.worker` for the target `dlm::queue::worker`). Spans are not
/// forwarded; other crates' events neither.
struct ToLogging;

struct Fields {
    message: String,
    rest: String,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

impl tracing::Subscriber for ToLogging {
    fn register_callsite(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if meta.is_event() && meta.target().starts_with("dlm") {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        meta.is_event() && meta.target().starts_with("dlm") && level_enabled(py_level(meta.level()))
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let meta = event.metadata();
        let mut f = Fields {
            message: String::new(),
            rest: String::new(),
        };
        event.record(&mut f);
        let text = format!("{}{}", f.message, f.rest);
        let name = meta.target().replace("::", ".");
        let level = py_level(meta.level());
        Python::attach(|py| {
            let _ = log_to(py, &name, level, &text);
        });
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// One record on the logger `name` (a child of `dlm`).
fn log_to(py: Python<'_>, name: &str, level: u8, text: &str) -> PyResult<()> {
    static LOGGERS: Mutex<Option<HashMap<String, Py<PyAny>>>> = Mutex::new(None);
    let logger = {
        let mut cache = LOGGERS.lock().unwrap_or_else(|p| p.into_inner());
        let cache = cache.get_or_insert_with(HashMap::new);
        match cache.get(name) {
            Some(l) => l.clone_ref(py),
            None => {
                let l = py
                    .import("logging")?
                    .call_method1("getLogger", (name,))?
                    .unbind();
                cache.insert(name.to_string(), l.clone_ref(py));
                l
            }
        }
    };
    logger.call_method1(py, "log", (level, text))?;
    Ok(())
}

/// Forward the core's events to `logging` (unless the process has a
/// subscriber already, e.g. one of another extension).
pub fn install_logging(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    refresh_level(py);
    let stop = wrap_pyfunction!(_stop_logging, m)?;
    py.import("atexit")?.call_method1("register", (stop,))?;
    let _ = tracing::subscriber::set_global_default(ToLogging);
    Ok(())
}

/// A record of the `dlm` logger from the binding itself; `exc`: an
/// exception whose traceback goes with it.
pub fn log(py: Python<'_>, level: u8, text: &str, exc: Option<&Bound<'_, PyAny>>) {
    let _ = (|| -> PyResult<()> {
        let logger = dlm_logger(py)?;
        if !logger.call_method1("isEnabledFor", (level,))?.is_truthy()? {
            return Ok(());
        }
        let kw = PyDict::new(py);
        if let Some(e) = exc {
            kw.set_item("exc_info", e)?;
        }
        logger.call_method("log", (level, text), Some(&kw))?;
        Ok(())
    })();
}

// ---------------------------------------------------------------------------
// metrics

fn prometheus() -> Result<&'static metrics_exporter_prometheus::PrometheusHandle, String> {
    static HANDLE: OnceLock<Result<metrics_exporter_prometheus::PrometheusHandle, String>> =
        OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // The CLI's recorder (dlm-cli serve::state::install_recorder), with
            // the core's descriptions of every metric.
            let h = metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
            dlm::metrics::describe();
            Ok(h)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Start recording the core's metrics (`dlm_*`, see the Rust crate's
/// `dlm::metrics`) in this process; later calls do nothing. What happened
/// before the first call is not counted.
#[pyfunction]
pub fn enable_metrics() -> PyResult<()> {
    prometheus().map(|_| ()).map_err(|reason| {
        crate::rt::err(dlm::Error::InvalidArgument {
            arg: "metrics",
            reason,
        })
    })
}

/// The core's metrics in the Prometheus text format (recording starts with
/// the first call of this or of `enable_metrics`).
#[pyfunction]
pub fn metrics_text(py: Python<'_>) -> PyResult<String> {
    let h = prometheus().map_err(|reason| {
        crate::rt::err(dlm::Error::InvalidArgument {
            arg: "metrics",
            reason,
        })
    })?;
    Ok(py.detach(|| h.render()))
}
