//! `dlm.Client` and `dlm.AsyncClient`: connecting, and the handles they hand out.

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::bridge::awaitable;
use crate::guard::{AsyncLock, Lock, LockCore, acquired};
use crate::queue::{AsyncQueue, Queue, QueueOpts};
use crate::rt::{Record, block, err, opt_secs, secs};

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
struct MoreLockOpts {
    retry_interval: Option<f64>,
    node_timeout: Option<f64>,
    replicas: Option<(u64, f64)>,
}

impl MoreLockOpts {
    fn apply(
        self,
        o: Result<dlm::LockOptions, dlm::Error>,
    ) -> Result<dlm::LockOptions, dlm::Error> {
        let mut o = o?;
        if let Some(r) = opt_secs("retry_interval", self.retry_interval)? {
            o = o.retry_interval(r);
        }
        if let Some(t) = opt_secs("node_timeout", self.node_timeout)? {
            o = o.node_timeout(t);
        }
        if let Some((n, t)) = self.replicas {
            o = o.replicas(n, secs("replicas", t)?);
        }
        Ok(o)
    }
}

/// The handles both clients make; every method only builds a core handle.
#[derive(Clone)]
struct Handles(dlm::Client);

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
        let opts = more.apply(lock_opts(ttl, wait, watchdog)).map_err(err)?;
        let mut lock = self.0.lock(name);
        if raw_key {
            lock = lock.raw_key();
        }
        lock.key().map_err(err)?;
        let (l1, l2, l3) = (lock.clone(), lock.clone(), lock);
        Ok(LockCore {
            name: name.to_string(),
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

    fn fair_lock(&self, name: &str, ttl: f64, wait: f64, watchdog: bool) -> PyResult<LockCore> {
        let opts = lock_opts(ttl, wait, watchdog).map_err(err)?;
        let lock = self.0.fair_lock(name);
        lock.key().map_err(err)?;
        let (l1, l2) = (lock.clone(), lock);
        Ok(LockCore {
            name: name.to_string(),
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
    ) -> PyResult<LockCore> {
        let opts = lock_opts(ttl, wait, watchdog).map_err(err)?;
        let lock = self.0.rwlock(name);
        let (l1, l2) = (lock.clone(), lock);
        Ok(LockCore {
            name: name.to_string(),
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
    ) -> PyResult<LockCore> {
        let opts = lock_opts(ttl, wait, watchdog).map_err(err)?;
        let sem = self.0.semaphore(name, permits);
        sem.key().map_err(err)?;
        let (s1, s2) = (sem.clone(), sem);
        Ok(LockCore {
            name: name.to_string(),
            acquire: Arc::new(move || {
                let (s, o) = (s1.clone(), opts.clone());
                Box::pin(async move {
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
    ) -> PyResult<LockCore> {
        let opts = lock_opts(ttl, wait, watchdog).map_err(err)?;
        let multi = self.0.multi_lock(names.clone()).map_err(err)?;
        let single = self.0.clone();
        Ok(LockCore {
            name: names.join(","),
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
    ) -> PyResult<LockCore> {
        let opts = lock_opts(ttl, wait, watchdog).map_err(err)?;
        let el = self.0.election(name);
        el.key().map_err(err)?;
        let (e1, e2, id) = (el.clone(), el, id.to_string());
        Ok(LockCore {
            name: name.to_string(),
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
    max_attempts: Option<u32>,
    backoff: Option<(f64, f64)>,
    max_payload: Option<usize>,
) -> PyResult<QueueOpts> {
    let backoff = match backoff {
        Some((base, max)) => Some(dlm::queue::Backoff::new(
            secs("backoff", base).map_err(err)?,
            secs("backoff", max).map_err(err)?,
        )),
        None => None,
    };
    Ok(QueueOpts {
        max_attempts,
        backoff,
        max_payload,
    })
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
/// they wait, and Ctrl-C interrupts them.
#[pyclass(frozen, module = "dlm")]
pub struct Client {
    h: Handles,
}

/// The same as Client, with awaitable calls; make one with
/// `await AsyncClient.connect(url)`.
#[pyclass(frozen, module = "dlm")]
pub struct AsyncClient {
    h: Handles,
}

macro_rules! handle_methods {
    ($t:ty, $lock:ident, $queue:ident, $versioned:ident, $stock:ident, $ids:ident, $limiter:ident) => {
        #[pymethods]
        impl $t {
            /// A lock handle (no round trip): `with c.lock(name, ttl=10.0, wait=5.0,
            /// watchdog=True) as g:`. raw_key=True uses the key `name` itself,
            /// shared with redis-py's Lock and the CLI's --raw-key.
            /// retry_interval: seconds between attempts while waiting (default
            /// 0.05, jittered); node_timeout: Redlock's per-node deadline;
            /// replicas=(n, timeout): the grant counts once n replicas have it
            /// (WAIT), else dlm.NotReplicated.
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
                replicas: Option<(u64, f64)>,
            ) -> PyResult<$lock> {
                let more = MoreLockOpts {
                    retry_interval,
                    node_timeout,
                    replicas,
                };
                Ok($lock::new(self.h.lock(name, ttl, wait, watchdog, raw_key, more)?))
            }

            /// A fair (FIFO) lock handle: waiters get it in arrival order.
            #[pyo3(signature = (name, ttl=30.0, wait=0.0, watchdog=false))]
            fn fair_lock(
                &self,
                name: &str,
                ttl: f64,
                wait: f64,
                watchdog: bool,
            ) -> PyResult<$lock> {
                Ok($lock::new(self.h.fair_lock(name, ttl, wait, watchdog)?))
            }

            /// A read-write lock handle: write=False takes a shared read share,
            /// write=True the exclusive write lock.
            #[pyo3(signature = (name, write=false, ttl=30.0, wait=0.0, watchdog=false))]
            fn rwlock(
                &self,
                name: &str,
                write: bool,
                ttl: f64,
                wait: f64,
                watchdog: bool,
            ) -> PyResult<$lock> {
                Ok($lock::new(self.h.rwlock(name, write, ttl, wait, watchdog)?))
            }

            /// A counting semaphore handle of `permits` permits; each acquisition takes `n`.
            #[pyo3(signature = (name, permits, n=1, ttl=30.0, wait=0.0, watchdog=false))]
            fn semaphore(
                &self,
                name: &str,
                permits: u32,
                n: u32,
                ttl: f64,
                wait: f64,
                watchdog: bool,
            ) -> PyResult<$lock> {
                Ok($lock::new(
                    self.h.semaphore(name, permits, n, ttl, wait, watchdog)?,
                ))
            }

            /// Several locks taken all or none under one guard (its `fences` has
            /// one fence per name).
            #[pyo3(signature = (names, ttl=30.0, wait=0.0, watchdog=false))]
            fn multi_lock(
                &self,
                names: Vec<String>,
                ttl: f64,
                wait: f64,
                watchdog: bool,
            ) -> PyResult<$lock> {
                Ok($lock::new(self.h.multi_lock(names, ttl, wait, watchdog)?))
            }

            /// A leader election: acquiring campaigns as `id`; the guard is the leadership
            /// (its fence is the term).
            #[pyo3(signature = (name, id, ttl=30.0, wait=0.0, watchdog=false))]
            fn election(
                &self,
                name: &str,
                id: &str,
                ttl: f64,
                wait: f64,
                watchdog: bool,
            ) -> PyResult<$lock> {
                Ok($lock::new(self.h.election(name, id, ttl, wait, watchdog)?))
            }

            /// A task queue handle. max_attempts: tries before a task goes to the
            /// dead letters; backoff: (base, max) seconds between tries.
            #[pyo3(signature = (name, max_attempts=None, backoff=None, max_payload=None))]
            fn queue(
                &self,
                name: &str,
                max_attempts: Option<u32>,
                backoff: Option<(f64, f64)>,
                max_payload: Option<usize>,
            ) -> PyResult<$queue> {
                let o = queue_opts(max_attempts, backoff, max_payload)?;
                Ok($queue::new(o.apply(self.h.0.queue(name))))
            }

            /// A record written with compare-and-set on its version.
            fn versioned(&self, name: &str) -> crate::extras::$versioned {
                crate::extras::$versioned::new(self.h.0.versioned(name))
            }

            /// An atomic stock counter.
            fn stock(&self, name: &str) -> crate::extras::$stock {
                crate::extras::$stock::new(self.h.0.stock(name))
            }

            /// Unique increasing ids (block: ids taken per round trip).
            #[pyo3(signature = (name, block=None))]
            fn ids(&self, name: &str, block: Option<u64>) -> crate::extras::$ids {
                let mut ids = self.h.0.ids(name);
                if let Some(k) = block {
                    ids = ids.block(k);
                }
                crate::extras::$ids::new(ids)
            }

            /// A rate limiter: at most `n` grants per `period` seconds.
            fn rate_limiter(
                &self,
                name: &str,
                n: u64,
                period: f64,
            ) -> PyResult<crate::extras::$limiter> {
                let p = secs("period", period).map_err(err)?;
                Ok(crate::extras::$limiter::new(
                    self.h.0.rate_limiter(name, n, p),
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

            /// The deadline of every call to Redis, in seconds.
            #[getter]
            fn timeout(&self) -> f64 {
                self.h.0.timeout().as_secs_f64()
            }
        }
    };
}

handle_methods!(Client, Lock, Queue, Versioned, Stock, Ids, RateLimiter);
handle_methods!(
    AsyncClient,
    AsyncLock,
    AsyncQueue,
    AsyncVersioned,
    AsyncStock,
    AsyncIds,
    AsyncRateLimiter
);

#[pymethods]
impl Client {
    /// Connect (blocking). One URL: one Redis; urls=[...] with several:
    /// Redlock over independent masters; cluster=True: a Redis Cluster
    /// through these seeds; sentinel="name": the master the Sentinels at
    /// these URLs watch. cacert/cert/key: PEM files for rediss:// URLs.
    /// timeout / connect_timeout: seconds (default 2.0).
    #[new]
    #[pyo3(signature = (url=None, *, urls=None, cluster=false, sentinel=None, cacert=None, cert=None, key=None, timeout=None, connect_timeout=None, key_prefix=None))]
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
        };
        let c = block(py, connect(a))?;
        Ok(Client { h: Handles(c) })
    }

    /// Store `value` for `resource` only if `fence` is not lower than the
    /// highest fencing token that wrote it before; else dlm.StaleFence.
    fn fenced_write(
        &self,
        py: Python<'_>,
        resource: String,
        fence: u64,
        value: Vec<u8>,
    ) -> PyResult<()> {
        block(py, fenced_write(self.h.0.clone(), resource, fence, value))
    }

    /// The (fence, value) last stored by fenced_write, or None.
    fn fenced_read(&self, py: Python<'_>, resource: String) -> PyResult<Fenced> {
        block(py, fenced_read(self.h.0.clone(), resource))
    }

    /// Wait (at most `timeout` seconds) until background releases are done;
    /// True when nothing is left.
    #[pyo3(signature = (timeout=2.0))]
    fn settle(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let t = secs("timeout", timeout).map_err(err)?;
        let c = self.h.0.clone();
        block(py, async move { Ok(c.settle(t).await) })
    }

    /// Release every lock this client still holds (all kinds), in
    /// parallel: dict(released, already_lost, failed).
    fn release_all(&self, py: Python<'_>) -> PyResult<Record> {
        let c = self.h.0.clone();
        block(
            py,
            async move { Ok(release_all_record(c.release_all().await)) },
        )
    }

    /// Locks held on this Redis whose names match `pattern` (glob): dicts
    /// of name, key, ttl, fence.
    #[pyo3(signature = (pattern="*", limit=100))]
    fn held_locks(&self, py: Python<'_>, pattern: &str, limit: usize) -> PyResult<Vec<Record>> {
        block(py, held_locks(self.h.0.clone(), pattern.to_string(), limit))
    }

    /// The names of up to `limit` queues on this Redis.
    #[pyo3(signature = (limit=100))]
    fn queue_names(&self, py: Python<'_>, limit: usize) -> PyResult<Vec<String>> {
        let c = self.h.0.clone();
        block(py, async move { c.queue_names(limit).await.map_err(err) })
    }

    fn __repr__(&self) -> String {
        format!("<dlm.Client nodes={}>", self.h.0.nodes())
    }
}

#[pymethods]
impl AsyncClient {
    /// Connect (awaitable); the same arguments as Client(...).
    #[staticmethod]
    #[pyo3(signature = (url=None, *, urls=None, cluster=false, sentinel=None, cacert=None, cert=None, key=None, timeout=None, connect_timeout=None, key_prefix=None))]
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
        };
        let fut = connect(a);
        awaitable(py, async move {
            let c = fut.await?;
            Ok(AsyncClient { h: Handles(c) })
        })
    }

    /// fenced_write (awaitable).
    fn fenced_write<'py>(
        &self,
        py: Python<'py>,
        resource: String,
        fence: u64,
        value: Vec<u8>,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, fenced_write(self.h.0.clone(), resource, fence, value))
    }

    /// fenced_read (awaitable): (fence, value) or None.
    fn fenced_read<'py>(&self, py: Python<'py>, resource: String) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, fenced_read(self.h.0.clone(), resource))
    }

    /// settle (awaitable).
    #[pyo3(signature = (timeout=2.0))]
    fn settle<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let t: Duration = secs("timeout", timeout).map_err(err)?;
        let c = self.h.0.clone();
        awaitable(py, async move { Ok(c.settle(t).await) })
    }

    /// release_all (awaitable).
    fn release_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.h.0.clone();
        awaitable(
            py,
            async move { Ok(release_all_record(c.release_all().await)) },
        )
    }

    /// held_locks (awaitable).
    #[pyo3(signature = (pattern="*", limit=100))]
    fn held_locks<'py>(
        &self,
        py: Python<'py>,
        pattern: &str,
        limit: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        awaitable(py, held_locks(self.h.0.clone(), pattern.to_string(), limit))
    }

    /// queue_names (awaitable).
    #[pyo3(signature = (limit=100))]
    fn queue_names<'py>(&self, py: Python<'py>, limit: usize) -> PyResult<Bound<'py, PyAny>> {
        let c = self.h.0.clone();
        awaitable(py, async move { c.queue_names(limit).await.map_err(err) })
    }

    fn __repr__(&self) -> String {
        format!("<dlm.AsyncClient nodes={}>", self.h.0.nodes())
    }
}
