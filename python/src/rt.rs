//! The one tokio runtime, the bridges from Rust futures to sync and asyncio
//! calls, and the translation of arguments and errors.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyMemoryView, PyString};

/// How many generations of forked processes get a runtime of their own.
const FORKS: usize = 64;

/// One runtime per generation of process: a forked child has none of its
/// parent's runtime threads, so it gets the next slot (issue 33: a fork used
/// to hang for ever). The parent's runtime is never dropped in the child
/// (its threads do not exist there to be joined).
static RUNTIMES: [OnceLock<tokio::runtime::Runtime>; FORKS] = [const { OnceLock::new() }; FORKS];

/// This process's generation: 0, plus one per fork since the module loaded.
static GENERATION: AtomicUsize = AtomicUsize::new(0);

/// The runtime every call runs on, sync or asyncio: multi-threaded, created
/// on first use (in this process: after a fork, a new one).
pub fn rt() -> &'static tokio::runtime::Runtime {
    let generation = GENERATION.load(Ordering::Relaxed).min(FORKS - 1);
    RUNTIMES[generation].get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("dlm-tokio")
            .build()
            .expect("cannot start the tokio runtime")
    })
}

/// In a forked child: the next call starts a runtime of its own.
pub fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// How often a sync wait looks for a pending signal (Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Run `fut` on the runtime and wait for it without the GIL. Every
/// [`SIGNAL_POLL`] the wait runs Python's signal handlers: when one raises
/// (KeyboardInterrupt on Ctrl-C), the future is cancelled (dropped) and
/// the exception propagates.
pub fn block<T, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    block_until(py, fut, None, None)
}

/// [`block`] for a call that stops gracefully: the first signal that raises
/// cancels `stop` and waits for the call to wind down (a second one drops
/// it), then the exception propagates. `event` (an object with `is_set()`,
/// e.g. a `threading.Event`) set cancels `stop` too, and nothing is raised.
pub fn block_until<T, F>(
    py: Python<'_>,
    fut: F,
    stop: Option<tokio_util::sync::CancellationToken>,
    event: Option<&Bound<'_, PyAny>>,
) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: Send + 'static,
{
    // The future runs on the runtime, this thread waits for its answer (and
    // checks for signals between waits). Running it here instead (block_on)
    // was 11% quicker for one thread alone but 15% slower with 64 threads
    // (scripts/bench-python.sh, distinct keys), and the runtime's threads (a
    // queue handler calling dlm) must hand it over anyway.
    let mut interrupted: Option<PyErr> = None;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = rt().spawn(async move {
        let _ = tx.send(fut.await);
    });
    let mut rx = rx;
    loop {
        let (back, got) = py.detach(move || {
            let got = rx.recv_timeout(SIGNAL_POLL);
            (rx, got)
        });
        rx = back;
        match got {
            Ok(out) => {
                return match interrupted {
                    Some(e) => Err(e),
                    None => out,
                };
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let (Some(stop), Some(ev)) = (&stop, event)
                    && !stop.is_cancelled()
                    && ev
                        .call_method0(pyo3::intern!(py, "is_set"))
                        .and_then(|v| v.is_truthy())
                        .unwrap_or(false)
                {
                    stop.cancel();
                }
                if let Err(e) = py.check_signals() {
                    match (&stop, interrupted.is_some()) {
                        (Some(stop), false) => {
                            stop.cancel();
                            interrupted = Some(e);
                        }
                        _ => {
                            task.abort();
                            return Err(e);
                        }
                    }
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err(
                    "dlm: the call's task ended without an answer",
                ));
            }
        }
    }
}

/// Seconds (a float) as a duration; negative, NaN or huge values are an
/// [`dlm::Error::InvalidArgument`] naming `arg`.
pub fn secs(arg: &'static str, s: f64) -> Result<Duration, dlm::Error> {
    if !s.is_finite() || s < 0.0 {
        return Err(dlm::Error::InvalidArgument {
            arg,
            reason: format!("{s} is not a number of seconds >= 0.0"),
        });
    }
    Duration::try_from_secs_f64(s).map_err(|_| dlm::Error::InvalidArgument {
        arg,
        reason: format!("{s} seconds is out of range"),
    })
}

/// [`secs`] for an optional argument.
pub fn opt_secs(arg: &'static str, s: Option<f64>) -> Result<Option<Duration>, dlm::Error> {
    s.map(|s| secs(arg, s)).transpose()
}

/// An integer argument of any Python int: checked against the range of `T`
/// when the call reads it ([`Int::get`]), so that a negative or oversized
/// value (or no int at all) is a `dlm.InvalidArgument` naming the argument,
/// never an `OverflowError` or a `TypeError` from the conversion.
pub struct Int<T>(Result<T, String>);

/// The integer types [`Int`] converts to.
pub trait IntRange: Sized + Copy {
    const MAX: u64;
    fn from_u64(v: u64) -> Self;
}

macro_rules! int_range {
    ($($t:ty),*) => {$(
        impl IntRange for $t {
            const MAX: u64 = <$t>::MAX as u64;
            fn from_u64(v: u64) -> Self {
                v as $t
            }
        }
    )*};
}
int_range!(u8, u16, u32, u64, usize);

impl<T> Int<T> {
    /// A default value.
    pub const fn of(v: T) -> Self {
        Int(Ok(v))
    }
}

impl<T: IntRange> Int<T> {
    /// The value, or a `dlm.InvalidArgument` for `arg`.
    pub fn get(self, arg: &'static str) -> PyResult<T> {
        self.0
            .map_err(|reason| err(dlm::Error::InvalidArgument { arg, reason }))
    }
}

/// `Option<Int<T>>` read the same way.
pub fn opt_int<T: IntRange>(v: Option<Int<T>>, arg: &'static str) -> PyResult<Option<T>> {
    v.map(|i| i.get(arg)).transpose()
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

impl<'a, 'py, T: IntRange> FromPyObject<'a, 'py> for Int<T> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let obj = obj.to_owned();
        if !obj.is_instance_of::<PyInt>() {
            return Ok(Int(Err(format!(
                "expected an int, got {}",
                type_name(&obj)
            ))));
        }
        let out_of_range = || {
            let shown = obj.str().map(|s| s.to_string()).unwrap_or_default();
            format!("{shown} is not an int from 0 to {}", T::MAX)
        };
        Ok(Int(match obj.extract::<u64>() {
            Ok(v) if v <= T::MAX => Ok(T::from_u64(v)),
            _ => Err(out_of_range()),
        }))
    }
}

/// Bytes an argument carries: `bytes`, `bytearray`, `memoryview`, or a `str`
/// (encoded as UTF-8). Anything else is a `dlm.InvalidArgument` naming the
/// argument when the call reads it ([`Payload::get`]).
pub struct Payload(Result<Vec<u8>, String>);

impl Payload {
    /// The bytes, or a `dlm.InvalidArgument` for `arg`.
    pub fn get(self, arg: &'static str) -> PyResult<Vec<u8>> {
        self.0
            .map_err(|reason| err(dlm::Error::InvalidArgument { arg, reason }))
    }
}

/// `Option<Payload>` read the same way.
pub fn opt_payload(v: Option<Payload>, arg: &'static str) -> PyResult<Option<Vec<u8>>> {
    v.map(|p| p.get(arg)).transpose()
}

/// The bytes of `obj` as [`Payload`] takes them.
pub fn payload_bytes(obj: &Bound<'_, PyAny>) -> Result<Vec<u8>, String> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        Ok(b.as_bytes().to_vec())
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        Ok(b.to_vec())
    } else if let Ok(s) = obj.cast::<PyString>() {
        s.to_cow()
            .map(|s| s.as_bytes().to_vec())
            .map_err(|_| "a str that cannot be encoded as UTF-8 (lone surrogates)".to_string())
    } else if obj.is_instance_of::<PyMemoryView>() {
        obj.call_method0("tobytes")
            .and_then(|b| b.extract::<Vec<u8>>())
            .map_err(|e| e.to_string())
    } else {
        Err(format!(
            "expected bytes, bytearray, memoryview or str, got {}",
            type_name(obj)
        ))
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Payload {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Payload(payload_bytes(&obj.to_owned())))
    }
}

/// A binding-level error of `dlm.errors` (not a core error): `class` with
/// `message` and attributes.
pub fn py_err(class: &str, message: String, attrs: &[(&str, Val)]) -> PyErr {
    Python::attach(|py| {
        let made = (|| -> PyResult<PyErr> {
            let exc = py.import("dlm.errors")?.getattr(class)?.call1((message,))?;
            for (k, v) in attrs {
                exc.setattr(*k, v.clone())?;
            }
            Ok(PyErr::from_value(exc))
        })();
        match made {
            Ok(e) | Err(e) => e,
        }
    })
}

/// `dlm.StateError`: a call the object's state does not allow (a guard
/// released twice, a closed client, ...).
pub fn state_err(name: &str, message: String) -> PyErr {
    py_err(
        "StateError",
        message,
        &[("name", Val::Str(name.to_string()))],
    )
}

/// A dlm error as the matching exception of `dlm.errors`.
pub fn err(e: dlm::Error) -> PyErr {
    Python::attach(|py| match build_err(py, &e) {
        Ok(pe) => pe,
        Err(pe) => pe,
    })
}

fn build_err(py: Python<'_>, e: &dlm::Error) -> PyResult<PyErr> {
    use dlm::Error as E;
    let attrs = PyDict::new(py);
    let class = match e {
        E::Busy { name, ttl } => {
            attrs.set_item("name", name)?;
            attrs.set_item("ttl", ttl.map(|t| t.as_secs_f64()))?;
            "Busy"
        }
        E::NoPermits {
            name,
            wanted,
            free,
            capacity,
        } => {
            attrs.set_item("name", name)?;
            attrs.set_item("wanted", wanted)?;
            attrs.set_item("free", free)?;
            attrs.set_item("capacity", capacity)?;
            // A Busy like any other: no holder's lease to tell.
            attrs.set_item("ttl", py.None())?;
            "NoPermits"
        }
        E::Expired { name } => {
            attrs.set_item("name", name)?;
            "Expired"
        }
        E::NotHeld { name } => {
            attrs.set_item("name", name)?;
            "NotHeld"
        }
        E::Lost { name } => {
            attrs.set_item("name", name)?;
            "Lost"
        }
        E::LeaseLost { queue, id, taken } => {
            attrs.set_item("queue", queue)?;
            attrs.set_item("id", id)?;
            attrs.set_item("taken", taken)?;
            "LeaseLost"
        }
        E::Conflict {
            name,
            expected,
            current,
        } => {
            attrs.set_item("name", name)?;
            attrs.set_item("expected", expected)?;
            attrs.set_item("current", current)?;
            "Conflict"
        }
        E::RateLimited { name, retry_after } => {
            attrs.set_item("name", name)?;
            attrs.set_item("retry_after", retry_after.as_secs_f64())?;
            "RateLimited"
        }
        E::StaleFence {
            name,
            given,
            highest,
        } => {
            attrs.set_item("name", name)?;
            attrs.set_item("given", given)?;
            attrs.set_item("highest", highest)?;
            "StaleFence"
        }
        E::NotReplicated {
            name,
            replicas,
            wanted,
        } => {
            attrs.set_item("name", name)?;
            attrs.set_item("replicas", replicas)?;
            attrs.set_item("wanted", wanted)?;
            "NotReplicated"
        }
        E::NoQuorum {
            name,
            answered,
            needed,
            nodes,
        } => {
            attrs.set_item("name", name)?;
            attrs.set_item("answered", answered)?;
            attrs.set_item("needed", needed)?;
            attrs.set_item("nodes", nodes)?;
            "NoQuorum"
        }
        E::QueueFull { name, max } => {
            attrs.set_item("name", name)?;
            attrs.set_item("max", max)?;
            "QueueFull"
        }
        E::UpgradeRefused { name } => {
            attrs.set_item("name", name)?;
            "UpgradeRefused"
        }
        E::InvalidArgument { arg, reason } => {
            attrs.set_item("arg", arg)?;
            attrs.set_item("reason", reason)?;
            "InvalidArgument"
        }
        E::Forked { .. } => {
            // Misuse, not bad input: the client belongs to the parent process.
            attrs.set_item("name", "client")?;
            "StateError"
        }
        E::Unavailable { .. } => "ConnectionError",
        E::Auth { .. } => "AuthenticationError",
        E::Timeout(after) => {
            attrs.set_item("after", after.as_secs_f64())?;
            "Timeout"
        }
        E::Backend { .. } => "RedisError",
        _ => "Error",
    };
    let errors = py.import("dlm.errors")?;
    let exc = errors.getattr(class)?.call1((e.to_string(),))?;
    for (k, v) in attrs.iter() {
        exc.setattr(k.cast_into::<pyo3::types::PyString>()?, v)?;
    }
    Ok(PyErr::from_value(exc))
}

/// A plain value of a result dict.
#[derive(Debug, Clone)]
pub enum Val {
    None,
    Bool(bool),
    Int(u64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Strs(Vec<String>),
    Records(Vec<Record>),
}

impl From<bool> for Val {
    fn from(v: bool) -> Self {
        Val::Bool(v)
    }
}
impl From<u64> for Val {
    fn from(v: u64) -> Self {
        Val::Int(v)
    }
}
impl From<u32> for Val {
    fn from(v: u32) -> Self {
        Val::Int(v.into())
    }
}
impl From<usize> for Val {
    fn from(v: usize) -> Self {
        Val::Int(v as u64)
    }
}
impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::Str(v)
    }
}
impl From<Duration> for Val {
    fn from(v: Duration) -> Self {
        Val::Float(v.as_secs_f64())
    }
}
impl From<Option<Duration>> for Val {
    fn from(v: Option<Duration>) -> Self {
        v.map_or(Val::None, Val::from)
    }
}
impl From<Option<dlm::Fence>> for Val {
    fn from(v: Option<dlm::Fence>) -> Self {
        v.map_or(Val::None, |f| Val::Int(f.get()))
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Self {
        v.map_or(Val::None, Val::Str)
    }
}
impl From<Option<Vec<u8>>> for Val {
    fn from(v: Option<Vec<u8>>) -> Self {
        v.map_or(Val::None, Val::Bytes)
    }
}
impl From<Option<u32>> for Val {
    fn from(v: Option<u32>) -> Self {
        v.map_or(Val::None, Val::from)
    }
}

impl<'py> IntoPyObject<'py> for Val {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Val::None => py.None().into_bound(py),
            Val::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
            Val::Int(i) => i.into_pyobject(py)?.into_any(),
            Val::Float(f) => f.into_pyobject(py)?.into_any(),
            Val::Str(s) => s.into_pyobject(py)?.into_any(),
            Val::Bytes(b) => pyo3::types::PyBytes::new(py, &b).into_any(),
            Val::Strs(v) => v.into_pyobject(py)?.into_any(),
            Val::Records(v) => v.into_pyobject(py)?.into_any(),
        })
    }
}

/// A result dict: ordered pairs, made a `dict` when handed to Python.
#[derive(Debug, Clone, Default)]
pub struct Record(pub Vec<(&'static str, Val)>);

impl Record {
    /// Add a field.
    pub fn with(mut self, k: &'static str, v: impl Into<Val>) -> Self {
        self.0.push((k, v.into()));
        self
    }
}

impl<'py> IntoPyObject<'py> for Record {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.0 {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}
