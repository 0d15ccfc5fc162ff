//! `dlm.Client` and `dlm.AsyncClient`: connecting, and the handles they hand out.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::bridge::awaitable;
use crate::guard::{AsyncLock, Lock, LockCore, acquired};
use crate::queue::{AsyncQueue, Queue, QueueOpts};
use crate::rt::{Int, Payload, Record, Val, block, err, opt_int, opt_secs, secs, state_err};

/// How to connect: the arguments of `Client(...)` / `AsyncClient.connect(...)`.
#[derive(Clone)]
struct ConnectArgs {
    url: Option<String>,
    urls: Option<Vec<String>>,
    cluster: bool,
    sentinel: Option<String>,
    cacert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    timeout: Option<f64>,
    connect_timeout: Option<f64>,
    key_prefix: Option<String>,
    lazy: bool,
    native_commands: bool,
}

async fn connect(a: ConnectArgs) -> PyResult<dlm::Client> {
    {
        let mut b = dlm::Client::builder();
        if let Some(t) = opt_secs("timeout", a.timeout).map_err(err)? {
            b = b.timeout(t);
        }
        if let Some(t) = opt_secs("connect_timeout", a.connect_timeout).map_err(err)? {
            b = b.connect_timeout(t);
        }
        if let Some(p) = a.key_prefix {
            b = b.key_prefix(p);
        }
        b = b.lazy(a.lazy).native_commands(a.native_commands);
        if a.cacert.is_some() || a.cert.is_some() || a.key.is_some() {
            let mut tls = dlm::TlsConfig::default();
            if let Some(ca) = a.cacert {
                tls = tls.ca(ca);
            }
            match (a.cert, a.key) {
                (Some(c), Some(k)) => tls = tls.client_cert(c, k),
                (None, None) => {}
                _ => {
                    return Err(err(dlm::Error::InvalidArgument {
                        arg: "cert",
                        reason: "cert and key go together".into(),
                    }));
                }
            }
            b = b.tls(tls);
        }
        let mut urls: Vec<String> = a.url.into_iter().collect();
        urls.extend(a.urls.unwrap_or_default());
        if urls.is_empty() {
            return Err(err(dlm::Error::InvalidArgument {
                arg: "url",
                reason: "give a URL or urls=[...]".into(),
            }));
        }
        let r = if let Some(name) = a.sentinel {
            b.connect_sentinel(&name, &urls).await
        } else if a.cluster {
            b.connect_cluster(&urls).await
        } else if urls.len() == 1 {
            b.connect(&urls[0]).await
        } else {
            b.connect_many(&urls).await
        };
        r.map_err(err)
    }
}

/// The arguments of a lock-like handle.
fn lock_opts(ttl: f64, wait: f64, watchdog: bool) -> Result<dlm::LockOptions, dlm::Error> {
    Ok(dlm::LockOptions::new(secs("ttl", ttl)?)
        .wait(secs("wait", wait)?)
        .watchdog(watchdog))
}

fn status_record(s: dlm::LockStatus) -> Record {
    Record::default()
        .with("held", s.held)
        .with("ttl", s.ttl)
        .with("fence", s.fence)
}

fn fence_of<G>(f: impl Fn(&G) -> dlm::Fence) -> impl Fn(&G) -> Option<u64> {
    move |g| Some(f(g).get())
}

fn no_permits<G>(_: &G) -> Option<u32> {
    None
}

/// The plain lock's further options (keyword-only in Python).
pub struct MoreLockOpts {
    retry_interval: Option<f64>,
    node_timeout: Option<f64>,
    replicas: Option<(Int<u64>, f64)>,
}

impl MoreLockOpts {
    fn apply(self, o: Result<dlm::LockOptions, dlm::Error>) -> PyResult<dlm::LockOptions> {
        let mut o = o.map_err(err)?;
        if let Some(r) = opt_secs("retry_interval", self.retry_interval).map_err(err)? {
            o = o.retry_interval(r);
        }
        if let Some(t) = opt_secs("node_timeout", self.node_timeout).map_err(err)? {
            o = o.node_timeout(t);
        }
        if let Some((n, t)) = self.replicas {
            o = o.replicas(n.get("replicas")?, secs("replicas", t).map_err(err)?);
        }
        Ok(o)
    }
}

/// The semaphore capacities a client has checked against Redis (name ->
/// capacity), so that a new handle of a checked one costs no round trip.
const MAX_CHECKED_CAPACITIES: usize = 10_000;

type CheckedCapacities = Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>;

/// The handles both clients make; every method only builds a core handle.
#[derive(Clone)]
struct Handles(dlm::Client, CheckedCapacities);

impl Handles {
    fn lock(
        &self,
        name: &str,
        ttl: f64,
        wait: f64,
        watchdog: bool,
        raw_key: bool,
        more: MoreLockOpts,
    ) -> PyResult<LockCore> {
        let opts = more.apply(lock_opts(ttl, wait, watchdog))?;
        let mut lock = self.0.lock(name);
        if raw_key {
            lock = lock.raw_key();
        }
        lock.key().map_err(err)?;
        let (l1, l2, l3) = (lock.clone(), lock.clone(), lock);
        Ok(LockCore {
            name: name.to_string(),
            exclusive: true,
            acquire: Arc::new(move || {
                let (l, o) = (l1.clone(), opts.clone());
                Box::pin(async move {
                    let g = l.acquire(&o).await?;
                    Ok(acquired!(
                        g,
                        |g: &dlm::LockGuard| g.fence().map(|f| f.get()),
                        no_permits
                    ))
                })
            }),
            status: Arc::new(move || {
                let l = l2.clone();
                Box::pin(async move { l.status().await.map(status_record) })
            }),
            force_release: Some(Arc::new(move || {
                let l = l3.clone();
                Box::pin(async move { l.force_release().await })
            })),
        })
    }

    fn fair_lock(
        &self,
        name: &str,
        ttl: f64,
        wait: f64,
        watchdog: bool,
        more: MoreLockOpts,
    ) -> PyResult<LockCore> {
        let opts = more.apply(lock_opts(ttl, wait, watchdog))?;
        let lock = self.0.fair_lock(name);
        lock.key().map_err(err)?;
        let (l1, l2) = (lock.clone(), lock);
        Ok(LockCore {
            name: name.to_string(),
            exclusive: true,
            acquire: Arc::new(move || {
                let (l, o) = (l1.clone(), opts.clone());
                Box::pin(async move {
                    let g = l.acquire(&o).await?;
                    Ok(acquired!(g, fence_of(dlm::FairGuard::fence), no_permits))
                })
            }),
            status: Arc::new(move || {
                let l = l2.clone();
                Box::pin(async move {
                    let s = l.status().await?;
                    Ok(Record::default()
                        .with("held", s.held)
                        .with("ttl", s.ttl)
                        .with("fence", s.fence)
                        .with("waiting", s.waiting))
                })
            }),
            force_release: None,
        })
    }

    fn rwlock(
        &self,
        name: &str,
        write: bool,
        ttl: f64,
        wait: f64,
        watchdog: bool,
        more: MoreLockOpts,
    ) -> PyResult<LockCore> {
        let opts = more.apply(lock_opts(ttl, wait, watchdog))?;
        let lock = self.0.rwlock(name);
        let (l1, l2) = (lock.clone(), lock);
        Ok(LockCore {
            name: name.to_string(),
            exclusive: write,
            acquire: Arc::new(move || {
                let (l, o) = (l1.clone(), opts.clone());
                Box::pin(async move {
                    if write {
                        let g = l.write(&o).await?;
                        Ok(acquired!(g, fence_of(dlm::WriteGuard::fence), no_permits))
                    } else {
                        let g = l.read(&o).await?;
                        Ok(acquired!(g, fence_of(dlm::ReadGuard::fence), no_permits))
                    }
                })
            }),
            status: Arc::new(move || {
                let l = l2.clone();
                Box::pin(async move {
                    let s = l.status().await?;
                    Ok(Record::default()
                        .with("writer", s.writer)
                        .with("writer_ttl", s.writer_ttl)
                        .with("readers", s.readers)
                        .with("waiting_writers", s.waiting_writers)
                        .with("fence", s.fence))
                })
            }),
            force_release: None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn semaphore(
        &self,
        name: &str,
        permits: u32,
        n: u32,
        ttl: f64,
        wait: f64,
        watchdog: bool,
        more: MoreLockOpts,
    ) -> PyResult<LockCore> {
        let opts = more.apply(lock_opts(ttl, wait, watchdog))?;
        let sem = self.0.semaphore(name, permits);
        sem.key().map_err(err)?;
        let (s1, s2) = (sem.clone(), sem);
        // The capacity stored in Redis counts; a handle that names another
        // one is refused. Checked at the first acquisition of a name and
        // capacity through this client (one round trip, then remembered).
        let checked = self.1.clone();
        let sem_name = name.to_string();
        Ok(LockCore {
            name: name.to_string(),
            exclusive: false,
            acquire: Arc::new(move || {
                let (s, o, checked, sem_name) =
                    (s1.clone(), opts.clone(), checked.clone(), sem_name.clone());
                Box::pin(async move {
                    let known = checked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&sem_name)
                        == Some(&permits);
                    if !known {
                        if let Some(stored) = s.status().await?.permits
                            && stored != permits
                        {
                            return Err(dlm::Error::InvalidArgument {
                                arg: "permits",
                                reason: format!(
                                    "semaphore {sem_name:?} has {stored} permits in Redis, \
                                     not {permits} (the stored capacity counts)"
                                ),
                            });
                        }
                        let mut known = checked.lock().unwrap_or_else(|p| p.into_inner());
                        // Bounded: a client of ever new names checks again.
                        if known.len() >= MAX_CHECKED_CAPACITIES {
                            known.clear();
                        }
                        known.insert(sem_name.clone(), permits);
                    }
                    let g = s.acquire(n, &o).await?;
                    Ok(acquired!(
                        g,
                        fence_of(dlm::SemaphoreGuard::fence),
                        |g: &dlm::SemaphoreGuard| Some(g.permits())
                    ))
                })
            }),
            status: Arc::new(move || {
                let s = s2.clone();
                Box::pin(async move {
                    let st = s.status().await?;
                    Ok(Record::default()
                        .with("permits", st.permits)
                        .with("in_use", st.in_use)
                        .with("available", st.available)
                        .with("holders", st.holders)
                        .with("fence", st.fence))
                })
            }),
            force_release: None,
        })
    }

    fn multi_lock(
        &self,
        names: Vec<String>,
        ttl: f64,
        wait: f64,
        watchdog: bool,
        more: MoreLockOpts,
    ) -> PyResult<LockCore> {
        let opts = more.apply(lock_opts(ttl, wait, watchdog))?;
        let multi = self.0.multi_lock(names.clone()).map_err(err)?;
        let single = self.0.clone();
        Ok(LockCore {
            name: names.join(","),
            exclusive: true,
            acquire: Arc::new(move || {
                let (m, o) = (multi.clone(), opts.clone());
                Box::pin(async move { m.acquire(&o).await.map(crate::guard::acquired_multi) })
            }),
            status: Arc::new(move || {
                let (c, names) = (single.clone(), names.clone());
                Box::pin(async move {
                    let mut held = 0u64;
                    for n in &names {
                        held += u64::from(c.lock(n.as_str()).status().await?.held);
                    }
                    Ok(Record::default()
                        .with("held", held == names.len() as u64)
                        .with("held_count", held))
                })
            }),
            force_release: None,
        })
    }

    fn election(
        &self,
        name: &str,
        id: &str,
        ttl: f64,
        wait: f64,
        watchdog: bool,
        more: MoreLockOpts,
    ) -> PyResult<LockCore> {
        let opts = more.apply(lock_opts(ttl, wait, watchdog))?;
        let el = self.0.election(name);
        el.key().map_err(err)?;
        let (e1, e2, id) = (el.clone(), el, id.to_string());
        Ok(LockCore {
            name: name.to_string(),
            exclusive: true,
            acquire: Arc::new(move || {
                let (e, o, id) = (e1.clone(), opts.clone(), id.clone());
                Box::pin(async move {
                    let g = e.campaign(&id, &o).await?;
                    Ok(acquired!(g, fence_of(dlm::Leadership::fence), no_permits))
                })
            }),
            status: Arc::new(move || {
                let e = e2.clone();
                Box::pin(async move {
                    let (leader, term) = e.status().await?;
                    let r = Record::default().with("term", term);
                    Ok(match leader {
                        Some(l) => r
                            .with("leader", l.id)
                            .with("leader_term", l.term)
                            .with("ttl", l.ttl),
                        None => r.with("leader", None::<String>),
                    })
                })
            }),
            force_release: None,
        })
    }
}

async fn fenced_write(
    c: dlm::Client,
    resource: String,
    fence: u64,
    value: Vec<u8>,
) -> PyResult<()> {
    {
        c.fenced_write(&resource, dlm::Fence::new(fence), value)
            .await
            .map_err(err)
    }
}

struct Fenced(Option<(u64, Vec<u8>)>);

impl<'py> IntoPyObject<'py> for Fenced {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match self.0 {
            None => Ok(py.None().into_bound(py)),
            Some((f, v)) => Ok((f, PyBytes::new(py, &v)).into_pyobject(py)?.into_any()),
        }
    }
}

async fn fenced_read(c: dlm::Client, resource: String) -> PyResult<Fenced> {
    {
        let r = c.fenced_read(&resource).await.map_err(err)?;
        Ok(Fenced(r.map(|(f, v)| (f.get(), v))))
    }
}

fn queue_opts(
    max_attempts: Option<Int<u32>>,
    backoff: Option<(f64, f64)>,
    max_payload: Option<Int<usize>>,
) -> PyResult<QueueOpts> {
    let backoff = match backoff {
        Some((base, max)) => {
            let (b, m) = (
                secs("backoff", base).map_err(err)?,
                secs("backoff", max).map_err(err)?,
            );
            if b > m {
                return Err(err(dlm::Error::InvalidArgument {
                    arg: "backoff",
                    reason: format!("(base, max) = ({base}, {max}): the base is above the max"),
                }));
            }
            Some(dlm::queue::Backoff::new(b, m))
        }
        None => None,
    };
    Ok(QueueOpts {
        max_attempts: opt_int(max_attempts, "max_attempts")?,
        backoff,
        max_payload: opt_int(max_payload, "max_payload")?,
    })
}

/// What each node is: dict(product, version, native) per node.
async fn server_info(c: dlm::Client) -> PyResult<Vec<Record>> {
    let v = c.server_info().await.map_err(err)?;
    Ok(v.into_iter()
        .map(|s| {
            Record::default()
                .with("product", s.product.to_string())
                .with("version", s.version.to_string())
                .with(
                    "native",
                    Val::Strs(s.native().iter().map(ToString::to_string).collect()),
                )
        })
        .collect())
}

fn release_all_record(r: dlm::ReleaseAll) -> Record {
    Record::default()
        .with("released", r.released)
        .with("already_lost", r.already_lost)
        .with("failed", r.failed)
}

async fn held_locks(c: dlm::Client, pattern: String, limit: usize) -> PyResult<Vec<Record>> {
    let v = c.held_locks(&pattern, limit).await.map_err(err)?;
    Ok(v.into_iter()
        .map(|h| {
            Record::default()
                .with("name", h.name)
                .with("key", h.key)
                .with("ttl", h.ttl)
                .with("fence", h.fence)
        })
        .collect())
}

/// A connection to Redis (one server, Redlock over several, a Cluster or a
/// Sentinel-watched master) with the sync API. Calls release the GIL while
/// they wait, and Ctrl-C interrupts them. `with dlm.Client(url) as c:`
/// closes it at the end (`close()`).
#[pyclass(frozen, module = "dlm")]
pub struct Client {
    h: Handles,
    closed: std::sync::atomic::AtomicBool,
}

/// The same as Client, with awaitable calls; make one with
/// `await AsyncClient.connect(url)`; `async with` closes it (`aclose()`).
#[pyclass(frozen, module = "dlm")]
pub struct AsyncClient {
    h: Handles,
    closed: std::sync::atomic::AtomicBool,
}

/// What `close()` does: release every lock the client holds and wait
/// (at most its timeout) for background releases to finish.
async fn close(c: dlm::Client) -> PyResult<()> {
    c.release_all().await;
    c.settle(c.timeout()).await;
    Ok(())
}

macro_rules! handle_methods {
    ($t:ty, $lock:ident, $queue:ident, $versioned:ident, $stock:ident, $ids:ident, $limiter:ident, $kind:literal) => {
        impl $t {
            fn wrap(c: dlm::Client) -> Self {
                Self {
                    h: Handles(c, CheckedCapacities::default()),
                    closed: std::sync::atomic::AtomicBool::new(false),
                }
            }

            /// The handles, unless the client is closed.
            fn h(&self) -> PyResult<&Handles> {
                if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
                    return Err(state_err(
                        $kind,
                        concat!("this dlm.", $kind, " is closed").to_string(),
                    ));
                }
                Ok(&self.h)
            }

            /// Mark closed; the client to close, or None when it was already.
            fn mark_closed(&self) -> Option<dlm::Client> {
                if self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    None
                } else {
                    Some(self.h.0.clone())
                }
            }
        }

        #[pymethods]
        impl $t {
            /// A lock handle (no round trip): `with c.lock(name, ttl=10.0, wait=5.0,
            /// watchdog=True) as g:`. raw_key=True uses the key `name` itself,
            /// shared with redis-py's Lock and the CLI's --raw-key.
            /// retry_interval: seconds between attempts while waiting (default
            /// 0.05, jittered); node_timeout: Redlock's per-node deadline;
            /// replicas=(n, timeout): the grant counts once n replicas have it
            /// (WAIT), else dlm.NotReplicated. Every lock-like primitive takes
            /// these three keyword arguments.
            #[pyo3(signature = (name, ttl=30.0, wait=0.0, watchdog=false, raw_key=false, *, retry_interval=None, node_timeout=None, replicas=None))]
            #[allow(clippy::too_many_arguments)]
            fn lock(
                &self,
                name: &str,
                ttl: f64,
                wait: f64,
                watchdog: bool,
                raw_key: bool,
                retry_interval: Option<f64>,
                node_timeout: Option<f64>,
                replicas: Option<(Int<u64>, f64)>,
            ) -> PyResult<$lock> {
                let more = MoreLockOpts {
                    retry_interval,
                    node_timeout,
                    replicas,
                };
                Ok($lock::new(self.h()?.lock(name, ttl, wait, watchdog, raw_key, more)?))
            }

            /// A fair (FIFO) lock handle: waiters get it in arrival order.
            #[pyo3(signature = (name, ttl=30.0, wait=0.0, watchdog=false, *, retry_interval=None, node_timeout=None, replicas=None))]
            #[allow(clippy::too_many_arguments)]
            fn fair_lock(
                &self,
                name: &str,
                ttl: f64,
                wait: f64,
                watchdog: bool,
                retry_interval: Option<f64>,
                node_timeout: Option<f64>,
                replicas: Option<(Int<u64>, f64)>,
            ) -> PyResult<$lock> {
                let more = MoreLockOpts { retry_interval, node_timeout, replicas };
                Ok($lock::new(self.h()?.fair_lock(name, ttl, wait, watchdog, more)?))
            }

            /// A read-write lock handle: write=False takes a shared read share,
            /// write=True the exclusive write lock.
            #[pyo3(signature = (name, write=false, ttl=30.0, wait=0.0, watchdog=false, *, retry_interval=None, node_timeout=None, replicas=None))]
            #[allow(clippy::too_many_arguments)]
            fn rwlock(
                &self,
                name: &str,
                write: bool,
                ttl: f64,
                wait: f64,
                watchdog: bool,
                retry_interval: Option<f64>,
                node_timeout: Option<f64>,
                replicas: Option<(Int<u64>, f64)>,
            ) -> PyResult<$lock> {
                let more = MoreLockOpts { retry_interval, node_timeout, replicas };
                Ok($lock::new(self.h()?.rwlock(name, write, ttl, wait, watchdog, more)?))
            }

            /// A counting semaphore handle of `permits` permits; each acquisition
            /// takes `n`. The capacity stored in Redis counts: a handle naming
            /// another one is refused (dlm.InvalidArgument) at its first acquire.
            #[pyo3(signature = (name, permits, n=Int::of(1), ttl=30.0, wait=0.0, watchdog=false, *, retry_interval=None, node_timeout=None, replicas=None))]
            #[allow(clippy::too_many_arguments)]
            fn semaphore(
                &self,
                name: &str,
                permits: Int<u32>,
                n: Int<u32>,
                ttl: f64,
                wait: f64,
                watchdog: bool,
                retry_interval: Option<f64>,
                node_timeout: Option<f64>,
                replicas: Option<(Int<u64>, f64)>,
            ) -> PyResult<$lock> {
                let more = MoreLockOpts { retry_interval, node_timeout, replicas };
                let (permits, n) = (permits.get("permits")?, n.get("n")?);
                Ok($lock::new(
                    self.h()?.semaphore(name, permits, n, ttl, wait, watchdog, more)?,
                ))
            }

            /// Several locks taken all or none under one guard (its `fences` has
            /// one fence per name).
            #[pyo3(signature = (names, ttl=30.0, wait=0.0, watchdog=false, *, retry_interval=None, node_timeout=None, replicas=None))]
            #[allow(clippy::too_many_arguments)]
            fn multi_lock(
                &self,
                names: Vec<String>,
                ttl: f64,
                wait: f64,
                watchdog: bool,
                retry_interval: Option<f64>,
                node_timeout: Option<f64>,
                replicas: Option<(Int<u64>, f64)>,
            ) -> PyResult<$lock> {
                let more = MoreLockOpts { retry_interval, node_timeout, replicas };
                Ok($lock::new(self.h()?.multi_lock(names, ttl, wait, watchdog, more)?))
            }

            /// A leader election: acquiring campaigns as `id`; the guard is the leadership
            /// (its fence is the term).
            #[pyo3(signature = (name, id, ttl=30.0, wait=0.0, watchdog=false, *, retry_interval=None, node_timeout=None, replicas=None))]
            #[allow(clippy::too_many_arguments)]
            fn election(
                &self,
                name: &str,
                id: &str,
                ttl: f64,
                wait: f64,
                watchdog: bool,
                retry_interval: Option<f64>,
                node_timeout: Option<f64>,
                replicas: Option<(Int<u64>, f64)>,
            ) -> PyResult<$lock> {
                let more = MoreLockOpts { retry_interval, node_timeout, replicas };
                Ok($lock::new(self.h()?.election(name, id, ttl, wait, watchdog, more)?))
            }

            /// A task queue handle. max_attempts: tries before a task goes to the
            /// dead letters; backoff: (base, max) seconds between tries (base <= max).
            #[pyo3(signature = (name, max_attempts=None, backoff=None, max_payload=None))]
            fn queue(
                &self,
                name: &str,
                max_attempts: Option<Int<u32>>,
                backoff: Option<(f64, f64)>,
                max_payload: Option<Int<usize>>,
            ) -> PyResult<$queue> {
                let o = queue_opts(max_attempts, backoff, max_payload)?;
                Ok($queue::new(o.apply(self.h()?.0.queue(name))))
            }

            /// A record written with compare-and-set on its version.
            fn versioned(&self, name: &str) -> PyResult<crate::extras::$versioned> {
                Ok(crate::extras::$versioned::new(self.h()?.0.versioned(name)))
            }

            /// An atomic stock counter.
            fn stock(&self, name: &str) -> PyResult<crate::extras::$stock> {
                Ok(crate::extras::$stock::new(self.h()?.0.stock(name)))
            }

            /// Unique increasing ids (block: ids taken per round trip).
            #[pyo3(signature = (name, block=None))]
            fn ids(&self, name: &str, block: Option<Int<u64>>) -> PyResult<crate::extras::$ids> {
                let mut ids = self.h()?.0.ids(name);
                if let Some(k) = opt_int(block, "block")? {
                    ids = ids.block(k);
                }
                Ok(crate::extras::$ids::new(ids))
            }

            /// A rate limiter: at most `n` grants per `period` seconds.
            fn rate_limiter(
                &self,
                name: &str,
                n: Int<u64>,
                period: f64,
            ) -> PyResult<crate::extras::$limiter> {
                let n = n.get("n")?;
                let p = secs("period", period).map_err(err)?;
                Ok(crate::extras::$limiter::new(
                    self.h()?.0.rate_limiter(name, n, p),
                ))
            }

            /// Locks held by this client right now.
            fn held_count(&self) -> usize {
                self.h.0.held_count()
            }

            /// How many Redis nodes this client locks on (Redlock: N).
            fn nodes(&self) -> usize {
                self.h.0.nodes()
            }

            /// The deadline of every call to Redis, in seconds (default 2.0).
            #[getter]
            fn timeout(&self) -> f64 {
                self.h.0.timeout().as_secs_f64()
            }

            /// True once closed (close(), aclose() or the end of a `with` block).
            #[getter]
            fn closed(&self) -> bool {
                self.closed.load(std::sync::atomic::Ordering::SeqCst)
            }

            fn __repr__(&self) -> String {
                format!(
                    "<dlm.{} nodes={} closed={}>",
                    $kind,
                    self.h.0.nodes(),
                    if self.closed() { "True" } else { "False" }
                )
            }
        }
    };
}

handle_methods!(
    Client,
    Lock,
    Queue,
    Versioned,
    Stock,
    Ids,
    RateLimiter,
    "Client"
);
handle_methods!(
    AsyncClient,
    AsyncLock,
    AsyncQueue,
    AsyncVersioned,
    AsyncStock,
    AsyncIds,
    AsyncRateLimiter,
    "AsyncClient"
);

#[pymethods]
impl Client {
    /// Connect (blocking). One URL: one Redis; urls=[...] with several:
    /// Redlock over independent masters; cluster=True: a Redis Cluster
    /// through these seeds; sentinel="name": the master the Sentinels at
    /// these URLs watch. cacert/cert/key: PEM files for rediss:// URLs.
    /// timeout / connect_timeout: seconds (default 2.0). lazy=True: return
    /// at once and connect in the background; a call made before the
    /// connection is up waits for it within its deadline, and an unreachable
    /// server is that call's error (dlm.Timeout, dlm.AuthenticationError...).
    /// native_commands=False: dlm's scripts even where the server has native
    /// commands (Valkey 9: DELIFEQ releases, SET IFEQ extends).
    #[new]
    #[pyo3(signature = (url=None, *, urls=None, cluster=false, sentinel=None, cacert=None, cert=None, key=None, timeout=None, connect_timeout=None, key_prefix=None, lazy=false, native_commands=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        url: Option<String>,
        urls: Option<Vec<String>>,
        cluster: bool,
        sentinel: Option<String>,
        cacert: Option<String>,
        cert: Option<String>,
        key: Option<String>,
        timeout: Option<f64>,
        connect_timeout: Option<f64>,
        key_prefix: Option<String>,
        lazy: bool,
        native_commands: bool,
    ) -> PyResult<Self> {
        let a = ConnectArgs {
            url,
            urls,
            cluster,
            sentinel,
            cacert,
            cert,
            key,
            timeout,
            connect_timeout,
            key_prefix,
            lazy,
            native_commands,
        };
        let c = block(py, connect(a))?;
        Ok(Client::wrap(c))
    }

    /// Store `value` for `resource` only if `fence` is not lower than the
    /// highest fencing token that wrote it before; else dlm.StaleFence.
    fn fenced_write(
        &self,
        py: Python<'_>,
        resource: String,
        fence: Int<u64>,
        value: Payload,
    ) -> PyResult<()> {
        let (fence, value) = (fence.get("fence")?, value.get("value")?);
        block(
            py,
            fenced_write(self.h()?.0.clone(), resource, fence, value),
        )
    }

    /// The (fence, value) last stored by fenced_write, or None.
    fn fenced_read(&self, py: Python<'_>, resource: String) -> PyResult<Fenced> {
        block(py, fenced_read(self.h()?.0.clone(), resource))
    }

    /// Wait (at most `timeout` seconds) until background releases are done;
    /// True when nothing is left.
    #[pyo3(signature = (timeout=2.0))]
    fn settle(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let t = secs("timeout", timeout).map_err(err)?;
        let c = self.h()?.0.clone();
        block(py, async move { Ok(c.settle(t).await) })
    }

    /// What each node this client locks on is (one, or N for Redlock):
    /// [dict(product="valkey", version="9.1.2", native=["compare_and_delete",
    /// ...])], asked now with INFO server; `native` lists the native commands
    /// dlm uses on it (none on Redis, on a Cluster, or with
    /// native_commands=False).
    fn server_info(&self, py: Python<'_>) -> PyResult<Vec<Record>> {
        block(py, server_info(self.h()?.0.clone()))
    }

    /// Release every lock this client still holds (all kinds), in
    /// parallel: dict(released, already_lost, failed).
    fn release_all(&self, py: Python<'_>) -> PyResult<Record> {
        let c = self.h()?.0.clone();
        block(
            py,
            async move { Ok(release_all_record(c.release_all().await)) },
        )
    }

    /// Locks held on this Redis whose names match `pattern` (glob): dicts
    /// of name, key, ttl, fence.
    #[pyo3(signature = (pattern="*", limit=Int::of(100)))]
    fn held_locks(
        &self,
        py: Python<'_>,
        pattern: &str,
        limit: Int<usize>,
    ) -> PyResult<Vec<Record>> {
        let limit = limit.get("limit")?;
        block(
            py,
            held_locks(self.h()?.0.clone(), pattern.to_string(), limit),
        )
    }

    /// The names of up to `limit` queues on this Redis.
    #[pyo3(signature = (limit=Int::of(100)))]
    fn queue_names(&self, py: Python<'_>, limit: Int<usize>) -> PyResult<Vec<String>> {
        let limit = limit.get("limit")?;
        let c = self.h()?.0.clone();
        block(py, async move { c.queue_names(limit).await.map_err(err) })
    }

    /// Release every lock this client holds, wait for background releases
    /// (at most its timeout), and refuse further calls (dlm.StateError).
    /// Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        match self.mark_closed() {
            Some(c) => block(py, close(c)),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

#[pymethods]
impl AsyncClient {
    /// Connect (awaitable); the same arguments as Client(...).
    #[staticmethod]
    #[pyo3(signature = (url=None, *, urls=None, cluster=false, sentinel=None, cacert=None, cert=None, key=None, timeout=None, connect_timeout=None, key_prefix=None, lazy=false, native_commands=true))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        url: Option<String>,
        urls: Option<Vec<String>>,
        cluster: bool,
        sentinel: Option<String>,
        cacert: Option<String>,
        cert: Option<String>,
        key: Option<String>,
        timeout: Option<f64>,
        connect_timeout: Option<f64>,
        key_prefix: Option<String>,
        lazy: bool,
        native_commands: bool,
    ) -> PyResult<Bound<'_, PyAny>> {
        let a = ConnectArgs {
            url,
            urls,
            cluster,
            sentinel,
            cacert,
            cert,
            key,
            timeout,
            connect_timeout,
            key_prefix,
            lazy,
            native_commands,
        };
        let fut = connect(a);
        awaitable(py, async move {
            let c = fut.await?;
            Ok(AsyncClient::wrap(c))
        })
    }

    /// fenced_write (awaitable).
    fn fenced_write<'py>(
        &self,
        py: Python<'py>,
        resource: String,
        fence: Int<u64>,
        value: Payload,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (fence, value) = (fence.get("fence")?, value.get("value")?);
        awaitable(
            py,
            fenced_write(self.h()?.0.clone(), resource, fence, value),
        )
    }

    /// fenced_read (awaitable): (fence, value) or None.
    fn fenced_read<'py>(&self, py: Python<'py>, resource: String) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, fenced_read(self.h()?.0.clone(), resource))
    }

    /// settle (awaitable).
    #[pyo3(signature = (timeout=2.0))]
    fn settle<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let t: Duration = secs("timeout", timeout).map_err(err)?;
        let c = self.h()?.0.clone();
        awaitable(py, async move { Ok(c.settle(t).await) })
    }

    /// server_info (awaitable).
    fn server_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, server_info(self.h()?.0.clone()))
    }

    /// release_all (awaitable).
    fn release_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.h()?.0.clone();
        awaitable(
            py,
            async move { Ok(release_all_record(c.release_all().await)) },
        )
    }

    /// held_locks (awaitable).
    #[pyo3(signature = (pattern="*", limit=Int::of(100)))]
    fn held_locks<'py>(
        &self,
        py: Python<'py>,
        pattern: &str,
        limit: Int<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limit = limit.get("limit")?;
        awaitable(
            py,
            held_locks(self.h()?.0.clone(), pattern.to_string(), limit),
        )
    }

    /// queue_names (awaitable).
    #[pyo3(signature = (limit=Int::of(100)))]
    fn queue_names<'py>(&self, py: Python<'py>, limit: Int<usize>) -> PyResult<Bound<'py, PyAny>> {
        let limit = limit.get("limit")?;
        let c = self.h()?.0.clone();
        awaitable(py, async move { c.queue_names(limit).await.map_err(err) })
    }

    /// close (awaitable): release every lock this client holds, wait for
    /// background releases, refuse further calls.
    fn aclose<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.mark_closed();
        awaitable(py, async move {
            match c {
                Some(c) => close(c).await,
                None => Ok(()),
            }
        })
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.unbind();
        awaitable(py, async move { Ok(me) })
    }

    #[pyo3(signature = (_exc_type=None, _exc=None, _tb=None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc_type: Option<Bound<'py, PyAny>>,
        _exc: Option<Bound<'py, PyAny>>,
        _tb: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.mark_closed();
        awaitable(py, async move {
            if let Some(c) = c {
                close(c).await?;
            }
            Ok(false)
        })
    }
}
