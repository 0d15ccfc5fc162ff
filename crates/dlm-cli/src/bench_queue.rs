//! `dlm bench queue`: the queue's throughput and an idle worker's pick-up
//! latency, in three phases on a fresh queue `bench:<random>`.
//!
//! * `enqueue`: N tasks, B per enqueue call, a few calls in flight at once;
//!   also the Redis memory per waiting task (`used_memory` after − before,
//!   / N). Tasks are id-only (`t<n>`, no payload, as the source documents'
//!   queue stores them) unless `--payload-bytes P` gives each a P-byte
//!   payload (the task's number in decimal, zero-padded to P bytes).
//! * `process`: one [`dlm::queue::Worker`] with concurrency C and a no-op
//!   handler drains them (claim, run, ack each).
//! * `idle-start`: with that worker idle (blocked waiting for work), enqueue
//!   one task at a time, 200 times, 1-5 ms apart, each handled and acked
//!   before the next: the time from the start of the enqueue call to the
//!   start of the handler.
//!
//! With `--priorities P` task `i` gets priority `i % P`, with `--groups G`
//! group `g<i % G>` (and `--group-concurrency K` stores that limit), to
//! measure what priorities and groups cost against plain tasks.
//!
//! At the end the queue must show every task processed and nothing left
//! (else exit 1); its keys are then deleted.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use clap::Args;
use dlm::CancellationToken;
use dlm::queue::{Queue, WorkerOptions};
use serde::Serialize;

use crate::bench_common::{BENCH_LEASE, ENQUEUE_IN_FLIGHT, Shape, Variant, enqueue_all};
use crate::error::{CliError, EXIT_OK, redis_err};
use crate::global::target::{
    RawConnection, Target, connect, delete_queue_keys, raw_connection, redis_version,
};
use crate::global::{Global, Topology};
use crate::output::{self, cell_us, human, us};
use crate::rng::{SplitMix, seed};
use crate::stats::percentile;

/// `dlm bench queue`
#[derive(Debug, Clone, Args)]
pub struct BenchQueueArgs {
    /// How many tasks to enqueue and process.
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub tasks: u64,
    /// How many tasks the worker runs at once.
    #[arg(long, value_name = "C", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,
    /// How many tasks one enqueue call carries.
    #[arg(long, value_name = "B", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    /// Samples of the idle-start phase.
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub idle_samples: u32,
    /// Give task i the priority i % P (1: every task priority 0, plain).
    #[arg(long, value_name = "P", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=1001))]
    pub priorities: u16,
    /// Put task i in group g<i % G> (0: no groups).
    #[arg(long, value_name = "G", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub groups: u32,
    /// Store this group concurrency for the benchmark's queue (0: none).
    #[arg(long, value_name = "K", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub group_concurrency: u32,
    /// Give each task a payload of this many bytes (0: id-only tasks, no
    /// payload). Without it, task i carries `{"i":i}`, the shape of the
    /// data BullMQ's harness benchmark gives its jobs, so that the peer
    /// harness compares like with like.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    pub payload_bytes: Option<u32>,
    /// Keep payloads of at most 64 bytes in the queue's compact buckets
    /// (`Queue::compact_payloads`; default false: in its single payload hash).
    #[arg(long, value_name = "BOOL", default_value_t = false, action = clap::ArgAction::Set)]
    pub compact_payloads: bool,
}

/// The longest wait for one task in the `idle-start` phase.
const IDLE_LIMIT: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize)]
struct EnqueuePhase {
    #[serde(rename = "impl")]
    implementation: String,
    /// The label without `dlm-` (`default` for the plain run).
    variant: String,
    phase: &'static str,
    /// The phase again, under the name the peer harness reads.
    mode: &'static str,
    /// Enqueue calls in flight at once.
    concurrency: usize,
    tasks: u64,
    /// `tasks`, under the name the peer harness reads.
    ops: u64,
    secs: f64,
    ops_per_s: f64,
    mem_bytes_per_waiting_job: f64,
    /// Redis's CPU time (`INFO CPU`) over the phase, in microseconds per task.
    redis_cpu_us_per_op: Option<f64>,
    priorities: u16,
    groups: u32,
    /// Each task's payload size (0: id-only; null: `{"i":n}`, 7 to 12 bytes).
    payload_bytes: Option<u32>,
    /// Small payloads in the compact buckets (`--compact-payloads`).
    compact_payloads: bool,
}

#[derive(Debug, Serialize)]
struct ProcessPhase {
    #[serde(rename = "impl")]
    implementation: String,
    /// The label without `dlm-` (`default` for the plain run).
    variant: String,
    phase: &'static str,
    /// The phase again, under the name the peer harness reads.
    mode: &'static str,
    tasks: u64,
    /// `tasks`, under the name the peer harness reads.
    ops: u64,
    secs: f64,
    ops_per_s: f64,
    /// Redis's CPU time (`INFO CPU`) over the phase, in microseconds per task.
    redis_cpu_us_per_op: Option<f64>,
    concurrency: u32,
    priorities: u16,
    groups: u32,
    group_concurrency: u32,
    /// Each task's payload size (0: id-only; null: `{"i":n}`, 7 to 12 bytes).
    payload_bytes: Option<u32>,
}

#[derive(Debug, Serialize)]
struct IdleStartPhase {
    #[serde(rename = "impl")]
    implementation: String,
    /// The label without `dlm-` (`default` for the plain run).
    variant: String,
    phase: &'static str,
    /// The phase again, under the name the peer harness reads.
    mode: &'static str,
    /// One task at a time.
    concurrency: u32,
    samples: usize,
    /// `samples`, under the name the peer harness reads.
    ops: usize,
    /// Wall time of the phase.
    secs: f64,
    /// Samples per second (one at a time, with pauses: not a throughput).
    ops_per_s: f64,
    p50_us: Option<u64>,
    p99_us: Option<u64>,
}

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

fn failed(what: &'static str, detail: impl Into<String>) -> CliError {
    CliError::Io {
        what,
        source: std::io::Error::other(detail.into()),
    }
}

/// `used_memory` from `INFO memory`.
async fn used_memory(conn: &mut RawConnection, queue: &str) -> Result<i64, CliError> {
    // On a cluster: the memory of the node that holds the queue's keys.
    let key = format!("{}{{{queue}}}:waiting", dlm::keys::DEFAULT_QUEUE_PREFIX);
    let info = conn.info_for("memory", &key).await.map_err(redis_err)?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| failed("reading INFO memory", "no used_memory field"))
}

/// Check that `processed` tasks were acked and nothing is left.
async fn check_drained(queue: &Queue, processed: u64) -> Result<(), CliError> {
    let s = queue.stats().await?;
    if s.processed != processed || !s.is_drained() || s.dead != 0 {
        return Err(CliError::No(format!(
            "the queue is not as expected after the benchmark: {s:?}, expected processed {processed} and nothing left"
        )));
    }
    Ok(())
}

/// The idle-start phase: one task at a time to an idle worker.
async fn idle_start(
    queue: &Queue,
    concurrency: u32,
    base: u64,
    samples_wanted: usize,
) -> Result<Vec<u64>, CliError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let stop = CancellationToken::new();
    let worker = queue.worker(
        WorkerOptions::new()
            .concurrency(concurrency as usize)
            .lease(BENCH_LEASE),
    );
    let handler = move |task: dlm::queue::Task| {
        let tx = tx.clone();
        async move {
            let _ = tx.send((task.id, Instant::now()));
            Ok::<(), Infallible>(())
        }
    };
    let running = tokio::spawn(worker.run(handler, stop.clone()));
    // Let it find the queue empty and block.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let mut rng = SplitMix(seed(0));
    let mut samples = Vec::with_capacity(samples_wanted);
    let result: Result<(), CliError> = async {
        for k in 0..samples_wanted {
            tokio::time::sleep(Duration::from_micros(1000 + rng.next() % 4001)).await;
            let id = format!("idle{k}");
            let start = Instant::now();
            queue.push(id.as_str()).await?;
            let (got, at) = tokio::time::timeout(IDLE_LIMIT, rx.recv())
                .await
                .map_err(|_| failed("idle-start", format!("task {id} not handled in 10s")))?
                .ok_or_else(|| failed("idle-start", "the worker stopped"))?;
            if got != id {
                return Err(failed("idle-start", format!("got {got}, expected {id}")));
            }
            samples.push(us(at.saturating_duration_since(start)));
            // Handled means acked: wait for the ack before the next one.
            let want = base + k as u64 + 1;
            let deadline = Instant::now() + IDLE_LIMIT;
            while queue.stats().await?.processed < want {
                if Instant::now() > deadline {
                    return Err(failed("idle-start", format!("task {id} not acked in 10s")));
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
        Ok(())
    }
    .await;
    stop.cancel();
    match running.await {
        Ok(r) => {
            r?;
        }
        Err(e) => return Err(failed("the idle worker failed", e.to_string())),
    }
    result?;
    samples.sort_unstable();
    Ok(samples)
}

/// The variant a queue benchmark measures, for its `impl` label:
/// `dlm-cluster`, `dlm-prio10`, `dlm-groups100-gc1`, ... (`dlm` plain).
fn variant(global: &Global, args: &BenchQueueArgs) -> Variant {
    Variant::default()
        .with(global.topology == Topology::Cluster, || "cluster".into())
        .with(matches!(global.topology, Topology::Sentinel(_)), || {
            "sentinel".into()
        })
        .with(args.priorities > 1, || format!("prio{}", args.priorities))
        .with(args.groups > 0, || format!("groups{}", args.groups))
        .with(args.group_concurrency > 0, || {
            format!("gc{}", args.group_concurrency)
        })
        .with(args.payload_bytes == Some(0), || "idonly".into())
        .with(args.payload_bytes.is_some_and(|b| b > 0), || {
            format!("payload{}", args.payload_bytes.unwrap_or(0))
        })
        .with(args.compact_payloads, || "compact".into())
}

/// `dlm bench queue`.
pub async fn bench_queue(global: &Global, args: &BenchQueueArgs) -> Result<u8, CliError> {
    if global.redis.len() > 1 {
        return Err(CliError::Usage(
            "queues live on one Redis: give a single --redis URL, not several".into(),
        ));
    }
    let target = Target::given_or_private(global).await?;
    let version = redis_version(&target.url, global.timeout).await;
    let client = connect(global, &target.url).await?;
    let mut raw = raw_connection(&target.url, global.timeout).await?;
    let name = format!("bench:{:016x}", SplitMix(seed(1)).next());
    let queue = client
        .queue(name.clone())
        .compact_payloads(args.compact_payloads);
    let result = phases(global, args, &queue, &mut raw, &target, version).await;
    // The benchmark's tasks are disposable, whatever happened.
    delete_queue_keys(&mut raw, &name).await;
    drop(target);
    result
}

async fn phases(
    global: &Global,
    args: &BenchQueueArgs,
    queue: &Queue,
    raw: &mut RawConnection,
    target: &Target,
    version: Option<String>,
) -> Result<u8, CliError> {
    let name = queue.name();
    let n = args.tasks;
    let variant = variant(global, args);
    if !global.json {
        output::line_out(&format!(
            "dlm bench queue: {n} tasks, payload {}, batch {}, concurrency {}, priorities {}, groups {}, group concurrency {}, queue {name}\nredis-server {} ({})",
            match args.payload_bytes {
                None => "{\"i\":n}".to_string(),
                Some(0) => "none (id-only)".to_string(),
                Some(b) => format!("{b} bytes"),
            },
            args.batch,
            args.concurrency,
            args.priorities,
            args.groups,
            args.group_concurrency,
            version.as_deref().unwrap_or("version unknown"),
            target.describe(),
        ))?;
    }

    if args.group_concurrency > 0 {
        queue
            .configure(
                &dlm::queue::QueueSettings::default()
                    .group_concurrency(Some(args.group_concurrency)),
            )
            .await?;
    }
    let shape = Shape::new(args.priorities, args.groups).payload_bytes(args.payload_bytes);
    let cpu_urls = crate::global::target::cpu_urls(target);
    let cpu = || crate::global::target::redis_cpu_seconds(&cpu_urls, global.timeout);
    let before = used_memory(raw, name).await?;
    let cpu_before = cpu().await;
    let start = Instant::now();
    enqueue_all(queue, n, u64::from(args.batch), shape, &|_| {}).await?;
    let secs = start.elapsed().as_secs_f64();
    let cpu_used = cpu().await.zip(cpu_before).map(|(a, b)| a - b);
    let after = used_memory(raw, name).await?;
    let enqueue = EnqueuePhase {
        implementation: variant.implementation(),
        variant: variant.name(),
        phase: "enqueue",
        mode: "enqueue",
        concurrency: ENQUEUE_IN_FLIGHT,
        tasks: n,
        ops: n,
        secs,
        ops_per_s: rate(n, secs),
        mem_bytes_per_waiting_job: (after - before) as f64 / n as f64,
        redis_cpu_us_per_op: crate::global::target::us_per_op(cpu_used, n),
        priorities: args.priorities,
        groups: args.groups,
        payload_bytes: args.payload_bytes,
        compact_payloads: args.compact_payloads,
    };
    output::emit(global.json, &enqueue, || {
        format!(
            "enqueue     {n} tasks in {}: {:.0} tasks/s, {:.0} bytes of Redis memory per waiting task",
            human(Duration::from_secs_f64(secs)),
            enqueue.ops_per_s,
            enqueue.mem_bytes_per_waiting_job
        )
    })?;

    let cpu_before = cpu().await;
    let start = Instant::now();
    let report = queue
        .worker(
            WorkerOptions::new()
                .concurrency(args.concurrency as usize)
                .lease(BENCH_LEASE)
                .exit_when_empty(true),
        )
        .run(
            |_task| async { Ok::<(), Infallible>(()) },
            CancellationToken::new(),
        )
        .await?;
    let secs = start.elapsed().as_secs_f64();
    let cpu_used = cpu().await.zip(cpu_before).map(|(a, b)| a - b);
    if report.acked != n {
        return Err(CliError::No(format!(
            "the worker acked {} of {n} tasks: {report:?}",
            report.acked
        )));
    }
    check_drained(queue, n).await?;
    let process = ProcessPhase {
        implementation: variant.implementation(),
        variant: variant.name(),
        phase: "process",
        mode: "process",
        tasks: n,
        ops: n,
        secs,
        ops_per_s: rate(n, secs),
        redis_cpu_us_per_op: crate::global::target::us_per_op(cpu_used, n),
        concurrency: args.concurrency,
        priorities: args.priorities,
        groups: args.groups,
        group_concurrency: args.group_concurrency,
        payload_bytes: args.payload_bytes,
    };
    output::emit(global.json, &process, || {
        format!(
            "process     {n} tasks in {}: {:.0} tasks/s with concurrency {}",
            human(Duration::from_secs_f64(secs)),
            process.ops_per_s,
            args.concurrency
        )
    })?;

    let idle_began = Instant::now();
    let samples = idle_start(queue, args.concurrency, n, args.idle_samples as usize).await?;
    let idle_secs = idle_began.elapsed().as_secs_f64();
    check_drained(queue, n + u64::from(args.idle_samples)).await?;
    let idle = IdleStartPhase {
        implementation: variant.implementation(),
        variant: variant.name(),
        phase: "idle-start",
        mode: "idle-start",
        concurrency: 1,
        samples: samples.len(),
        ops: samples.len(),
        secs: idle_secs,
        ops_per_s: rate(samples.len() as u64, idle_secs),
        p50_us: percentile(&samples, 50.0),
        p99_us: percentile(&samples, 99.0),
    };
    output::emit(global.json, &idle, || {
        format!(
            "idle-start  {} samples, enqueue to handler start: p50 {}, p99 {}",
            idle.samples,
            cell_us(idle.p50_us),
            cell_us(idle.p99_us)
        )
    })?;
    Ok(EXIT_OK)
}
