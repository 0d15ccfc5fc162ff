//! `dlm bench lock`: acquire/release throughput and latency with one shared
//! client and C tokio tasks.
//!
//! * `distinct`: each task loops acquire(random key `bench:lock:<0..1e6>`,
//!   TTL 30 s, try once) -> release.
//! * `contended`: all tasks on `bench:lock:contended`, waiting with dlm's own
//!   waiting (wake-up on release). While holding, an in-process occupancy
//!   counter must read 1 (else a violation is counted).
//!
//! Only cycles that start after the warmup and end before warmup+duration
//! count as ops; latency is acquire start -> release done.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::bench_common::Variant;
use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{parse_bench_duration, parse_warmup};
use crate::global::target::{Target, connect_nodes, raw_connection, redis_version};
use crate::global::{Global, Topology};
use crate::output::{self, us};
use crate::rng::{SplitMix, seed};
use crate::stats::Handoff;

mod curves;
mod primitive;
mod report;

pub use primitive::Primitive;

pub use curves::{BenchCurvesArgs, BenchDrainArgs, bench_curves, bench_drain};
use report::{summarize, table};

/// `--permits` by default.
const DEFAULT_PERMITS: u32 = 4;

/// The one lock of the contended mode (and the semaphore's name).
pub const CONTENDED_NAME: &str = "bench:lock:contended";

/// The lease of every acquire.
const BENCH_TTL: Duration = Duration::from_secs(30);
/// How many random keys the distinct mode draws from.
const DISTINCT_KEYS: u64 = 1_000_000;

/// What a lock benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchMode {
    /// Every task locks random keys: throughput without contention.
    Distinct,
    /// All tasks take turns on one lock: waiting, hand-off and fairness.
    Contended,
    /// Every task holds its own lock and extends it in a loop (an `ops` is
    /// one extend): what a renewal costs Redis (mutex only).
    Extend,
}

impl BenchMode {
    /// The name used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            BenchMode::Distinct => "distinct",
            BenchMode::Contended => "contended",
            BenchMode::Extend => "extend",
        }
    }
}

/// `dlm bench lock`
#[derive(Debug, Clone, Args)]
pub struct BenchLockArgs {
    /// Which primitive: the mutex, the fair lock (FIFO across processes),
    /// the read-write lock (one task in four writes, the others read) or the
    /// semaphore (one permit per cycle; contended mode only).
    #[arg(long, value_enum, default_value_t = Primitive::Mutex)]
    pub primitive: Primitive,
    /// With --primitive semaphore: its capacity (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PERMITS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(dlm::MAX_PERMITS)))]
    pub permits: u32,
    /// distinct: random keys; contended: one lock for all tasks; extend:
    /// each task extends its own lock in a loop.
    #[arg(long, value_enum, default_value_t = BenchMode::Distinct)]
    pub mode: BenchMode,
    /// Number of concurrent tasks (sharing one client).
    #[arg(long, value_name = "C", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,
    /// How long to measure (after the warmup).
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_bench_duration, allow_hyphen_values = true)]
    pub duration: Duration,
    /// How long to run before measuring.
    #[arg(long, value_name = "W", default_value = "1s", value_parser = parse_warmup, allow_hyphen_values = true)]
    pub warmup: Duration,
    /// Without --redis: start this many private servers; more than one makes
    /// the benchmark a Redlock over them (default 1 for `bench lock`, 5 for
    /// `bench redlock`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=9))]
    pub nodes: Option<u32>,
    /// Also run the same work with raw Redis commands through the `redis`
    /// crate (SET NX PX, then a compare-and-delete script), without dlm, and
    /// print it as a second line (`"impl":"redis-rs-raw"`; distinct mode only).
    #[arg(long)]
    pub baseline: bool,
    /// Redlock over private servers: freeze (SIGSTOP) this many of them, the
    /// last ones, once connected and before the warmup, and thaw them at the
    /// end: what a frozen node costs an acquire.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=8))]
    pub frozen: u32,
    /// Count an acquire only once this many replicas have it
    /// (`LockOptions::replicas`, WAIT with a 1 s timeout): what the
    /// failover mitigation costs on a cluster or a replicated master.
    /// Without --redis (and without --cluster) the benchmark starts a
    /// private master with N replicas for it.
    #[arg(long, value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=100))]
    pub replicas: u64,
    /// Install a metrics recorder (Prometheus, without HTTP listener) for the
    /// run, as an application that exports dlm's metrics would: what the
    /// library's metrics cost. The report says how many series it recorded.
    #[arg(long)]
    pub metrics: bool,
}

/// The JSON line of one run.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    #[serde(rename = "impl")]
    pub(crate) implementation: String,
    /// The label without `dlm-` (`default` for the plain run): which
    /// variant of the benchmark this line measured.
    variant: String,
    mode: &'static str,
    concurrency: u32,
    ops: u64,
    secs: f64,
    ops_per_s: f64,
    p50_us: Option<u64>,
    p99_us: Option<u64>,
    /// Successful acquires alone (start of the call to the guard in hand).
    acquire_p50_us: Option<u64>,
    acquire_p99_us: Option<u64>,
    attempts: u64,
    failed_attempts: u64,
    errors: u64,
    violations: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    handoff_p50_us: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    handoff_p99_us: Option<Option<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_ops_per_worker: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_ops_per_worker: Option<u64>,
    redis_version: Option<String>,
    /// What the (first) node is, e.g. `valkey 9.1.2` (`None`: unknown).
    server: Option<String>,
    /// The native commands dlm used on it (`compare_and_delete`,
    /// `compare_and_set`; empty: scripts only).
    native: Vec<String>,
    /// Redis's CPU time (`INFO CPU`, every node's) over the measured
    /// window, in microseconds per operation counted in `ops`: what a shared
    /// Redis pays for each acquire+release cycle (`None`: not measured).
    redis_cpu_us_per_op: Option<f64>,
    /// Independent Redis nodes locked on (more than 1: Redlock).
    nodes: usize,
    /// Of them, frozen (SIGSTOP) during the run (`--frozen`).
    frozen: usize,
    /// standalone (also with `--replicas` on one master), redlock,
    /// cluster or sentinel.
    topology: &'static str,
    /// mutex or semaphore.
    primitive: &'static str,
    /// The semaphore's capacity (`--primitive semaphore`).
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u32>,
    /// Replicas each grant waited for (`--replicas`).
    replicas: u64,
    /// `--metrics`: the dlm series the recorder held at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics_series: Option<usize>,
}

/// What all workers share.
struct Shared {
    client: dlm::Client,
    /// The options every acquire starts from (`--replicas`).
    base: dlm::LockOptions,
    mode: BenchMode,
    /// `Some(semaphore)` with --primitive semaphore.
    semaphore: Option<dlm::Semaphore>,
    /// Holders allowed at once (1 for the mutex).
    capacity: usize,
    primitive: Primitive,
    measure_from: Instant,
    measure_until: Instant,
    occupancy: AtomicUsize,
    violations: AtomicU64,
    handoff: Handoff,
}

/// What one worker counted.
#[derive(Debug, Default)]
struct WorkerStats {
    ops: u64,
    attempts: u64,
    failed: u64,
    errors: u64,
    latencies_us: Vec<u64>,
    acquires_us: Vec<u64>,
    handoffs_us: Vec<u64>,
}

/// `--mode extend`: hold one lock and extend it until the end; each
/// extend is one op (its latency in `latencies_us`).
async fn extend_worker(id: usize, shared: Arc<Shared>) -> WorkerStats {
    let mut st = WorkerStats::default();
    let lock = shared.client.lock(format!("bench:lock:extend:{id}"));
    let guard = match lock.acquire(&shared.base).await {
        Ok(g) => g,
        Err(e) => {
            tracing::debug!(error = %e, "acquire failed");
            st.errors += 1;
            return st;
        }
    };
    loop {
        let start = Instant::now();
        if start >= shared.measure_until {
            break;
        }
        let measured = start >= shared.measure_from;
        if measured {
            st.attempts += 1;
        }
        match guard.extend(BENCH_TTL).await {
            Ok(()) => st.done(start, &shared),
            Err(e) => {
                if measured {
                    st.errors += 1;
                }
                tracing::debug!(error = %e, "extend failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    let _ = guard.release().await;
    st
}

impl WorkerStats {
    /// Count one operation that began at `start`, if it lies inside the
    /// measured window.
    fn done(&mut self, start: Instant, shared: &Shared) {
        let done = Instant::now();
        if start >= shared.measure_from && done <= shared.measure_until {
            self.ops += 1;
            self.latencies_us.push(us(done - start));
        }
    }
}

async fn worker(id: usize, shared: Arc<Shared>) -> WorkerStats {
    if shared.mode == BenchMode::Extend {
        return extend_worker(id, shared).await;
    }
    let mut st = WorkerStats::default();
    let mut rng = SplitMix(seed(id));
    let contended = shared.mode == BenchMode::Contended;
    // Readers count 1 in the occupancy, exclusive holders WRITER: a reader
    // must see no writer, a writer nobody at all.
    const WRITER: usize = 1 << 20;
    let exclusive = shared.primitive.exclusive(id);
    loop {
        let start = Instant::now();
        if start >= shared.measure_until {
            break;
        }
        let measured = start >= shared.measure_from;
        let (name, opts) = if contended {
            // A long wait: until well after the end, so every waiter gets its turn.
            let wait =
                shared.measure_until.saturating_duration_since(start) + Duration::from_secs(30);
            (CONTENDED_NAME.to_string(), shared.base.clone().wait(wait))
        } else {
            let key = format!("bench:lock:{}", rng.next() % DISTINCT_KEYS);
            (key, shared.base.clone())
        };
        if measured {
            st.attempts += 1;
        }
        let acquired = primitive::acquire(
            &shared.client,
            shared.primitive,
            id,
            &name,
            &opts,
            shared.semaphore.as_ref(),
        );
        let guard = match acquired.await {
            Ok(g) => {
                if measured {
                    st.acquires_us.push(us(start.elapsed()));
                }
                g
            }
            Err(dlm::Error::Busy { .. } | dlm::Error::NoPermits { .. }) => {
                if measured {
                    st.failed += 1;
                }
                continue;
            }
            Err(e) => {
                if measured {
                    st.errors += 1;
                }
                tracing::debug!(error = %e, "acquire failed");
                // Do not spin on a Redis that is down.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if contended {
            if let Some(h) = shared.handoff.acquired(id)
                && measured
            {
                st.handoffs_us.push(us(h));
            }
            let weight = if exclusive { WRITER } else { 1 };
            let before = shared.occupancy.fetch_add(weight, Ordering::SeqCst);
            let too_many = match shared.primitive {
                Primitive::Semaphore => before >= shared.capacity,
                _ => (exclusive && before != 0) || before >= WRITER,
            };
            if too_many {
                shared.violations.fetch_add(1, Ordering::Relaxed);
            }
            tokio::task::yield_now().await;
            shared.occupancy.fetch_sub(weight, Ordering::SeqCst);
        }
        match guard.release().await {
            Ok(()) => {
                if contended {
                    shared.handoff.released(id);
                }
                st.done(start, &shared);
            }
            Err(e) => {
                if measured {
                    st.errors += 1;
                }
                tracing::debug!(error = %e, "release failed");
            }
        }
    }
    st
}

/// `dlm bench lock`.
pub async fn bench_lock(
    global: &Global,
    args: &BenchLockArgs,
    default_nodes: u32,
) -> Result<u8, CliError> {
    let nodes = args.nodes.unwrap_or(default_nodes) as usize;
    let prometheus = if args.metrics {
        Some(install_prometheus()?)
    } else {
        None
    };
    let (target, replicas) = lock_target(global, args, nodes).await?;
    let report = measure(global, args, &target, prometheus.as_ref()).await?;
    output::emit(global.json, &report, || table(&report))?;
    if args.baseline && args.mode == BenchMode::Distinct {
        let mut raw = raw_distinct(&target.url, global.timeout, args).await?;
        raw.redis_version = report.redis_version.clone();
        output::emit(global.json, &raw, || table(&raw))?;
    }
    drop(target);
    drop(replicas);
    Ok(EXIT_OK)
}

/// The Redis of a lock benchmark: the `--redis` URLs, else private servers
/// (`--nodes`), a private cluster (`--cluster`), or, with `--replicas N`
/// on a plain topology, a private master with N replicas (returned too, to
/// be kept alive as long as the target).
pub(crate) async fn lock_target(
    global: &Global,
    args: &BenchLockArgs,
    nodes: usize,
) -> Result<(Target, Vec<dlm_testkit::RedisServer>), CliError> {
    let replicated = global.redis.is_empty()
        && global.topology == Topology::Plain
        && nodes <= 1
        && args.replicas > 0;
    if !replicated {
        return Ok((
            Target::given_or_private_many(global, nodes).await?,
            Vec::new(),
        ));
    }
    let n = args.replicas as usize;
    let setup = tokio::task::spawn_blocking(move || dlm_testkit::Replicated::start(n))
        .await
        .map_err(|e| CliError::Io {
            what: "starting a master with replicas",
            source: std::io::Error::other(e),
        })??;
    let (master, replicas) = setup.into_parts();
    let url = master.url();
    let target = Target {
        url: url.clone(),
        urls: vec![url],
        servers: vec![master],
        cluster: None,
    };
    Ok((target, replicas))
}

/// One run of `bench lock` on `target` (which it does not stop): its report,
/// labelled with the variant it measured. Prints the header line unless
/// `global.json`.
pub(crate) async fn measure(
    global: &Global,
    args: &BenchLockArgs,
    target: &Target,
    prometheus: Option<&metrics_exporter_prometheus::PrometheusHandle>,
) -> Result<BenchReport, CliError> {
    let version = redis_version(&target.url, global.timeout).await;
    let frozen = args.frozen as usize;
    if frozen > 0 && (target.servers.is_empty() || frozen >= target.servers.len()) {
        return Err(CliError::Usage(format!(
            "--frozen {frozen} needs more private servers than that (--nodes N without --redis)"
        )));
    }
    let semaphore = args.primitive == Primitive::Semaphore;
    if args.mode == BenchMode::Extend && args.primitive != Primitive::Mutex {
        return Err(CliError::Usage(
            "--mode extend measures the mutex's extend: drop --primitive".into(),
        ));
    }
    if semaphore && args.mode != BenchMode::Contended {
        return Err(CliError::Usage(
            "--primitive semaphore measures the contended mode: add --mode contended".into(),
        ));
    }
    let client = connect_nodes(&target.urls, global).await?;
    let servers = client.server_info().await.ok();
    let semaphore = if semaphore {
        let sem = client.semaphore(CONTENDED_NAME, args.permits);
        sem.set_permits(args.permits).await?;
        Some(sem)
    } else {
        None
    };
    if frozen > 0 {
        // Connected everywhere first (so requests really reach the frozen
        // nodes and wait there), then freeze the last ones.
        let probe = client.lock("bench:connect");
        let _ = tokio::time::timeout(global.timeout, probe.status()).await;
        for s in target.servers.iter().rev().take(frozen) {
            s.pause()?;
        }
    }
    if !global.json {
        output::line_out(&format!(
            "dlm bench lock: {}mode {}, concurrency {}, duration {}, warmup {}\nredis-server {} ({}{})",
            match &semaphore {
                Some(_) => format!("semaphore of {} permits, ", args.permits),
                None => String::new(),
            },
            args.mode.as_str(),
            args.concurrency,
            humantime::format_duration(args.duration),
            humantime::format_duration(args.warmup),
            version.as_deref().unwrap_or("version unknown"),
            target.describe(),
            if frozen > 0 {
                format!(", {frozen} frozen")
            } else {
                String::new()
            },
        ))?;
    }

    let begin = Instant::now();
    let mut base = dlm::LockOptions::new(BENCH_TTL);
    if args.replicas > 0 {
        base = base.replicas(args.replicas, Duration::from_secs(1));
    }
    let shared = Arc::new(Shared {
        client,
        base,
        mode: args.mode,
        capacity: if semaphore.is_some() {
            args.permits as usize
        } else {
            1
        },
        semaphore,
        primitive: args.primitive,
        measure_from: begin + args.warmup,
        measure_until: begin + args.warmup + args.duration,
        occupancy: AtomicUsize::new(0),
        violations: AtomicU64::new(0),
        handoff: Handoff::default(),
    });
    let cpu = crate::global::target::cpu_window(
        crate::global::target::cpu_urls(target),
        global.timeout,
        shared.measure_from.into(),
        shared.measure_until.into(),
    );
    let workers: Vec<_> = (0..args.concurrency as usize)
        .map(|id| tokio::spawn(worker(id, shared.clone())))
        .collect();
    let mut all = Vec::with_capacity(workers.len());
    for w in workers {
        match w.await {
            Ok(st) => all.push(st),
            Err(e) => {
                return Err(CliError::Io {
                    what: "a benchmark task failed",
                    source: std::io::Error::other(e),
                });
            }
        }
    }
    for s in target.servers.iter().rev().take(frozen) {
        s.resume()?;
    }

    let mut report = summarize(
        args,
        &all,
        shared.violations.load(Ordering::Relaxed),
        version,
    );
    report.redis_cpu_us_per_op =
        crate::global::target::us_per_op(cpu.await.ok().flatten(), report.ops);
    if let Some(first) = servers.as_ref().and_then(|s| s.first()) {
        report.server = Some(format!("{} {}", first.product, first.version));
        report.native = first.native().iter().map(ToString::to_string).collect();
    }
    report.nodes = target.urls.len();
    report.frozen = frozen;
    report.replicas = args.replicas;
    report.metrics_series =
        prometheus.map(|p| p.render().lines().filter(|l| l.starts_with("dlm_")).count());
    report.primitive = args.primitive.as_str();
    if args.primitive == Primitive::Semaphore {
        report.permits = Some(args.permits);
    }
    report.topology = match &global.topology {
        Topology::Cluster => "cluster",
        Topology::Sentinel(_) => "sentinel",
        Topology::Plain if target.urls.len() > 1 => "redlock",
        Topology::Plain => "standalone",
    };
    let variant = Variant::default()
        .with(args.primitive != Primitive::Mutex, || {
            match args.primitive {
                // `dlm-semaphore` (the label before variants had parts) for
                // the default capacity; other capacities name theirs.
                Primitive::Semaphore if args.permits == DEFAULT_PERMITS => "semaphore".into(),
                Primitive::Semaphore => format!("semaphore{}", args.permits),
                p => p.as_str().to_string(),
            }
        })
        .with(report.topology == "cluster", || "cluster".into())
        .with(report.topology == "sentinel", || "sentinel".into())
        .with(report.topology == "redlock", || {
            format!("redlock{}", report.nodes)
        })
        .with(args.replicas > 0, || format!("replicas{}", args.replicas))
        .with(frozen > 0, || format!("frozen{frozen}"))
        .with(prometheus.is_some(), || "metrics".into());
    report.implementation = variant.implementation();
    report.variant = variant.name();
    Ok(report)
}

/// `--metrics`: install the Prometheus recorder globally (no HTTP listener),
/// describe dlm's metrics, and run its upkeep every 5 s as a server would.
fn install_prometheus() -> Result<metrics_exporter_prometheus::PrometheusHandle, CliError> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| CliError::Usage(format!("cannot install the metrics recorder: {e}")))?;
    dlm::metrics::describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// The raw baseline: the same distinct-key work with plain commands through
/// the `redis` crate on one multiplexed connection, without dlm.
async fn raw_distinct(
    url: &str,
    timeout: Duration,
    args: &BenchLockArgs,
) -> Result<BenchReport, CliError> {
    static RELEASE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
        redis::Script::new(
            "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
        )
    });
    let conn = raw_connection(url, timeout).await?;
    let begin = Instant::now();
    let (from, until) = (begin + args.warmup, begin + args.warmup + args.duration);
    let workers: Vec<_> = (0..args.concurrency as usize)
        .map(|id| {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                let mut st = WorkerStats::default();
                let mut rng = SplitMix(seed(id));
                loop {
                    let start = Instant::now();
                    if start >= until {
                        return st;
                    }
                    let measured = start >= from;
                    let key = format!("bench:lock:{}", rng.next() % DISTINCT_KEYS);
                    let token = format!("{:016x}{:016x}", rng.next(), rng.next());
                    let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                        .arg(&key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(30_000)
                        .query_async(&mut conn)
                        .await;
                    if measured {
                        st.attempts += 1;
                    }
                    match set {
                        Ok(Some(_)) if measured => st.acquires_us.push(us(start.elapsed())),
                        Ok(Some(_)) => {}
                        Ok(None) => {
                            st.failed += u64::from(measured);
                            continue;
                        }
                        Err(_) => {
                            st.errors += u64::from(measured);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                    let released: redis::RedisResult<i64> =
                        RELEASE.key(&key).arg(&token).invoke_async(&mut conn).await;
                    let done = Instant::now();
                    match released {
                        Ok(_) if measured && done <= until => {
                            st.ops += 1;
                            st.latencies_us.push(us(done - start));
                        }
                        Ok(_) => {}
                        Err(_) => st.errors += u64::from(measured),
                    }
                }
            })
        })
        .collect();
    let mut all = Vec::with_capacity(workers.len());
    for w in workers {
        all.push(w.await.map_err(|e| CliError::Io {
            what: "a benchmark task failed",
            source: std::io::Error::other(e),
        })?);
    }
    let mut report = summarize(args, &all, 0, None);
    report.implementation = "redis-rs-raw".into();
    report.variant = "redis-rs-raw".into();
    Ok(report)
}
