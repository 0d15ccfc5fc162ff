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
//! With `--dag fanout:N` (one task, then N that depend on it, then one that
//! depends on those N) or `--dag chain:N` (N tasks, each after the one
//! before), copies of that graph (about `--tasks` tasks in all) replace the
//! phases above: the same number of plain tasks is enqueued and processed
//! first, then the graphs, and the `dag` line reports both and Redis's CPU per
//! dependency edge over the plain run. `--events N` turns the queue's event
//! log on (capped at about N entries) to measure what it costs.
//!
//! At the end the queue must show every task processed and nothing left
//! (else exit 1); its keys are then deleted.
//!
//! With `--shards K` (issue 35) the queue is configured with K shards before
//! the first push; `--shards none,1,6` runs one after another on the same
//! Redis (each on a fresh queue; `none`: today's queue, never configured),
//! `--repeat R` runs that list R times. The enqueue and process lines then
//! also carry Redis's CPU per task over the *masters* only
//! (`redis_cpu_us_per_task`), the busiest master's share of it
//! (`busiest_master_share`), each master's figure and the client's own CPU
//! per task; a `shards` line sums enqueue and processing. `--reads N` times
//! `stats` and `peek 10` on the full queue instead of processing it;
//! `--priority-probe N` measures how many tasks are claimed between the push
//! of a high-priority task into a random shard and its claim (see
//! docs/sharded-queue.md, section 3).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::{Duration, Instant};

use clap::Args;
use dlm::CancellationToken;
use dlm::queue::{NewTask, OnDuplicate, Queue, WorkerOptions};
use serde::Serialize;

use crate::bench_common::{BENCH_LEASE, ENQUEUE_IN_FLIGHT, Shape, Variant, enqueue_all};
use crate::bench_shards::{
    MasterCpu, Probe, ProbePhase, ReadsPhase, client_cpu_seconds, client_us_per_task,
    masters_memory, node_urls, priority_probe, read_nodes, shards_per_master, time_reads,
};
use crate::error::{CliError, EXIT_OK, redis_err};
use crate::global::parse::parse_bench_duration;
use crate::global::target::{
    RawConnection, Target, connect, delete_queue_keys, delete_queue_shard_keys, raw_connection,
    redis_version,
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
    /// Process dependency graphs instead: `fanout:N` (1 -> N -> 1, N 1 to
    /// 998) or `chain:N` (N 2 to 100000), copies of it up to about N tasks.
    #[arg(long, value_name = "SHAPE", value_parser = parse_dag)]
    pub dag: Option<DagShape>,
    /// Turn the queue's event log on, capped at about N entries.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(dlm::queue::MAX_EVENTS)))]
    pub events: Option<u32>,
    /// Configure the queue with K shards (1 to 64) before the first push.
    /// Several, comma-separated (`none,1,6`), run one after another on the
    /// same Redis, each on a fresh queue; `none` is today's queue, never
    /// configured.
    #[arg(long, value_name = "K[,K...]", value_delimiter = ',', value_parser = parse_shards)]
    pub shards: Vec<ShardsRun>,
    /// Run the --shards list this many times, interleaved (each time
    /// starting one further along it).
    #[arg(long, value_name = "R", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// After the enqueue phase, time N `stats` and N `peek 10` calls on the
    /// full queue instead of processing it (the queue is then deleted).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub reads: Option<u32>,
    /// After the enqueue phase (the fill, priority 0), push N tasks of the
    /// highest priority into random shards while --probe-workers workers
    /// run, and count the tasks claimed between each push and its claim.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub priority_probe: Option<u32>,
    /// Workers (each with --concurrency) of the priority probe.
    #[arg(long, value_name = "W", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub probe_workers: u32,
    /// The pause between two probes.
    #[arg(long, value_name = "D", default_value = "20ms", value_parser = parse_bench_duration)]
    pub probe_every: Duration,
    /// How long the handler of each low-priority task of the probe sleeps.
    #[arg(long, value_name = "D", default_value = "2ms", value_parser = parse_bench_duration)]
    pub probe_work: Duration,
}

/// One run of `--shards`: `None` is today's queue (never configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardsRun(pub Option<u16>);

fn parse_shards(s: &str) -> Result<ShardsRun, String> {
    if s == "none" {
        return Ok(ShardsRun(None));
    }
    match s.parse::<u16>() {
        Ok(k) if (1..=dlm::keys::MAX_SHARDS).contains(&k) => Ok(ShardsRun(Some(k))),
        _ => Err(format!(
            "{s:?}: say a number of shards from 1 to {}, or none",
            dlm::keys::MAX_SHARDS
        )),
    }
}

/// A dependency graph `dlm bench queue --dag` processes copies of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DagShape {
    /// One task, then N after it, then one after those N.
    Fanout(u32),
    /// N tasks, each after the one before.
    Chain(u32),
}

impl DagShape {
    fn label(self) -> String {
        match self {
            DagShape::Fanout(n) => format!("fanout:{n}"),
            DagShape::Chain(n) => format!("chain:{n}"),
        }
    }

    /// Tasks and dependency edges of one copy.
    fn size(self) -> (u64, u64) {
        match self {
            DagShape::Fanout(n) => (u64::from(n) + 2, 2 * u64::from(n)),
            DagShape::Chain(n) => (u64::from(n), u64::from(n) - 1),
        }
    }

    /// Copy `c`'s tasks, each after its dependencies.
    fn tasks(self, c: u64) -> Vec<NewTask> {
        let id = |i: u64| format!("g{c}.{i}");
        match self {
            DagShape::Fanout(n) => {
                let n = u64::from(n);
                let mut out = vec![NewTask::new(id(0))];
                out.extend((1..=n).map(|i| NewTask::new(id(i)).after([id(0)])));
                out.push(NewTask::new(id(n + 1)).after((1..=n).map(id)));
                out
            }
            DagShape::Chain(n) => (0..u64::from(n))
                .map(|i| {
                    let t = NewTask::new(id(i));
                    if i == 0 { t } else { t.after([id(i - 1)]) }
                })
                .collect(),
        }
    }
}

fn parse_dag(s: &str) -> Result<DagShape, String> {
    let (kind, n) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: say fanout:N or chain:N"))?;
    let n: u32 = n.parse().map_err(|_| format!("{n:?} is not a number"))?;
    match kind {
        "fanout" if (1..=998).contains(&n) => Ok(DagShape::Fanout(n)),
        "chain" if (2..=100_000).contains(&n) => Ok(DagShape::Chain(n)),
        "fanout" => Err("fanout:N takes N from 1 to 998".into()),
        "chain" => Err("chain:N takes N from 2 to 100000".into()),
        other => Err(format!("{other:?}: say fanout:N or chain:N")),
    }
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
    /// `--shards` (null: not given, or `none`).
    shards: Option<u16>,
    /// Redis's CPU over the masters only, and per master.
    #[serde(flatten)]
    masters: MasterCpu,
    /// The benchmark process's own CPU, in µs per task.
    client_cpu_us_per_task: Option<f64>,
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
    /// `--shards` (null: not given, or `none`).
    shards: Option<u16>,
    /// Redis's CPU over the masters only, and per master.
    #[serde(flatten)]
    masters: MasterCpu,
    /// The benchmark process's own CPU, in µs per task.
    client_cpu_us_per_task: Option<f64>,
}

/// With `--shards`: one run's enqueue and processing together.
#[derive(Debug, Serialize)]
struct ShardsLine {
    #[serde(rename = "impl")]
    implementation: String,
    variant: String,
    phase: &'static str,
    mode: &'static str,
    /// K (null: today's queue, never configured).
    shards: Option<u16>,
    /// The layout's version after configuring (0: never sharded).
    layout_version: u64,
    /// Shards per master (`host:port`; `-` off a Cluster).
    shards_per_master: BTreeMap<String, u16>,
    /// Which run of the list (0-based) and which repetition.
    run: usize,
    tasks: u64,
    concurrency: u32,
    enqueue_ops_per_s: f64,
    /// Tasks processed per second (the process phase).
    ops_per_s: f64,
    /// Every node's CPU (replicas too), enqueue and processing, µs per task.
    redis_cpu_us_per_op: Option<f64>,
    /// The masters' CPU, enqueue and processing, µs per task; the busiest
    /// master's share; each master's.
    #[serde(flatten)]
    masters: MasterCpu,
    client_cpu_us_per_task: Option<f64>,
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
fn variant(global: &Global, args: &BenchQueueArgs, shards: Option<u16>) -> Variant {
    Variant::default()
        .with(global.topology == Topology::Cluster, || "cluster".into())
        .with(shards.is_some(), || {
            format!("shards{}", shards.unwrap_or(1))
        })
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
        .with(args.events.is_some(), || "events".into())
        .with(args.dag.is_some(), || {
            args.dag
                .map(|d| d.label().replace(':', ""))
                .unwrap_or_default()
        })
}

/// `dlm bench queue`.
pub async fn bench_queue(global: &Global, args: &BenchQueueArgs) -> Result<u8, CliError> {
    if global.redis.len() > 1 && global.topology != Topology::Cluster {
        return Err(CliError::Usage(
            "queues live on one Redis: give a single --redis URL, not several".into(),
        ));
    }
    let target = Target::given_or_private(global).await?;
    let version = redis_version(&target.url, global.timeout).await;
    let client = connect(global, &target.url).await?;
    let mut raw = raw_connection(&target.url, global.timeout).await?;
    let list = if args.shards.is_empty() {
        vec![None]
    } else {
        args.shards.iter().map(|s| s.0).collect()
    };
    // Each repetition starts one further along the list, so that no run
    // always comes first (or after the same one).
    let runs: Vec<(usize, Option<u16>)> = (0..args.repeat as usize)
        .flat_map(|r| {
            let list = &list;
            (0..list.len()).map(move |j| (r, list[(r + j) % list.len()]))
        })
        .collect();
    let mut result = Ok(EXIT_OK);
    for (i, (round, k)) in runs.into_iter().enumerate() {
        let name = format!("bench:{:016x}", SplitMix(seed(1 + i)).next());
        let queue = client
            .queue(name.clone())
            .compact_payloads(args.compact_payloads);
        let run = Run {
            shards: k,
            index: i,
            round,
        };
        result = phases(
            global, args, &client, &queue, &mut raw, &target, &version, run,
        )
        .await;
        // The benchmark's tasks are disposable, whatever happened.
        if let Ok(layout) = queue.shards().await {
            delete_queue_shard_keys(&mut raw, &layout).await;
        }
        delete_queue_keys(&mut raw, &name).await;
        if result.is_err() {
            break;
        }
    }
    drop(target);
    result
}

/// Which run of `--shards` (and `--repeat`) this is.
#[derive(Debug, Clone, Copy)]
struct Run {
    shards: Option<u16>,
    index: usize,
    round: usize,
}

#[allow(clippy::too_many_arguments)]
async fn phases(
    global: &Global,
    args: &BenchQueueArgs,
    client: &dlm::Client,
    queue: &Queue,
    raw: &mut RawConnection,
    target: &Target,
    version: &Option<String>,
    run: Run,
) -> Result<u8, CliError> {
    let name = queue.name();
    let n = args.tasks;
    let variant = variant(global, args, run.shards);
    if !global.json {
        output::line_out(&format!(
            "dlm bench queue: {n} tasks, payload {}, batch {}, concurrency {}, priorities {}, groups {}, group concurrency {}{}, queue {name}\nredis-server {} ({})",
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
            match run.shards {
                None if args.shards.is_empty() => String::new(),
                None => ", shards none (today's queue)".to_string(),
                Some(k) => format!(", shards {k}"),
            },
            version.as_deref().unwrap_or("version unknown"),
            target.describe(),
        ))?;
    }

    if let Some(k) = run.shards {
        queue
            .configure(&dlm::queue::QueueSettings::default().shards(k))
            .await?;
    }
    if let Some(cap) = args.events {
        queue
            .configure(&dlm::queue::QueueSettings::default().events(Some(cap)))
            .await?;
    }
    if let Some(shape) = args.dag {
        return dag_phase(global, args, queue, shape, target, run.shards).await;
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
    let nodes = node_urls(global, target).await;
    let read = || read_nodes(&nodes, global.timeout);
    // A sharded queue's memory: every master's (today's queue: its own node's).
    let memory = async |raw: &mut RawConnection| match run.shards {
        Some(_) => masters_memory(&nodes, global.timeout)
            .await
            .ok_or_else(|| failed("reading INFO memory", "a master did not say")),
        None => used_memory(raw, name).await,
    };
    let before = memory(raw).await?;
    // Every node's window encloses the masters' one.
    let cpu_before = cpu().await;
    let nodes_before = read().await;
    let client_before = client_cpu_seconds();
    let start = Instant::now();
    enqueue_all(queue, n, u64::from(args.batch), shape, &|_| {}).await?;
    let secs = start.elapsed().as_secs_f64();
    let client_after = client_cpu_seconds();
    let nodes_after = read().await;
    let cpu_used = cpu().await.zip(cpu_before).map(|(a, b)| a - b);
    if run.shards.is_some() {
        // Let the replicas catch up: the masters' output buffers to them
        // count in `used_memory` too.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let after = memory(raw).await?;
    let enqueue_cpu = cpu_used;
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
        shards: run.shards,
        masters: MasterCpu::between(nodes_before.as_deref(), nodes_after.as_deref(), n),
        client_cpu_us_per_task: client_us_per_task(client_before, client_after, n),
    };
    output::emit(global.json, &enqueue, || {
        format!(
            "enqueue     {n} tasks in {}: {:.0} tasks/s, {:.0} bytes of Redis memory per waiting task{}",
            human(Duration::from_secs_f64(secs)),
            enqueue.ops_per_s,
            enqueue.mem_bytes_per_waiting_job,
            if run.shards.is_some() {
                enqueue.masters.clause()
            } else {
                String::new()
            }
        )
    })?;

    if let Some(samples) = args.reads {
        let (stats, peek) = time_reads(queue, samples as usize).await?;
        let line = ReadsPhase {
            implementation: variant.implementation(),
            variant: variant.name(),
            phase: "reads",
            mode: "reads",
            shards: run.shards,
            waiting: queue.stats().await?.waiting,
            samples: 0,
            stats_p50_us: None,
            stats_p99_us: None,
            stats_max_us: None,
            peek_p50_us: None,
            peek_p99_us: None,
            peek_max_us: None,
        }
        .fill(&stats, &peek);
        output::emit(global.json, &line, || {
            format!(
                "reads       {} waiting, {} samples: stats p50 {} p99 {} max {}; peek 10 p50 {} p99 {} max {}",
                line.waiting,
                line.samples,
                cell_us(line.stats_p50_us),
                cell_us(line.stats_p99_us),
                cell_us(line.stats_max_us),
                cell_us(line.peek_p50_us),
                cell_us(line.peek_p99_us),
                cell_us(line.peek_max_us),
            )
        })?;
        return Ok(EXIT_OK);
    }

    if let Some(probes) = args.priority_probe {
        let p = Probe {
            probes: probes as usize,
            every: args.probe_every,
            workers: args.probe_workers,
            concurrency: args.concurrency,
            work: args.probe_work,
        };
        let (passed, latency, left) = priority_probe(client, name, &p).await?;
        let k = u64::from(queue.shards().await.map_or(1, |l| l.k));
        let (w, c) = (u64::from(p.workers), u64::from(p.concurrency));
        let line = ProbePhase {
            implementation: variant.implementation(),
            variant: variant.name(),
            phase: "priority-probe",
            mode: "priority-probe",
            shards: run.shards,
            fill: n,
            fill_left: left,
            workers: p.workers,
            concurrency: p.concurrency,
            work_us: us(p.work),
            probes: passed.len(),
            passed_p50: percentile(&passed, 50.0),
            passed_p99: percentile(&passed, 99.0),
            passed_max: passed.last().copied(),
            passed_mean: passed.iter().sum::<u64>() as f64 / passed.len().max(1) as f64,
            bound_wkc: w * k * c,
            bound_wkrc: w * k * c * dlm::queue::STICKY_ROUNDS as u64,
            bound_wc: w * c,
            latency_p50_us: percentile(&latency, 50.0),
            latency_p99_us: percentile(&latency, 99.0),
        };
        output::emit(global.json, &line, || {
            format!(
                "priority    {} probes, {} workers x {}: tasks claimed before a probe p50 {} p99 {} max {} (bound W*K*R*c {}, W*K*c {}, W*c {}); push to claim p50 {} p99 {}; {} of the fill left",
                line.probes,
                line.workers,
                line.concurrency,
                line.passed_p50.unwrap_or(0),
                line.passed_p99.unwrap_or(0),
                line.passed_max.unwrap_or(0),
                line.bound_wkrc,
                line.bound_wkc,
                line.bound_wc,
                cell_us(line.latency_p50_us),
                cell_us(line.latency_p99_us),
                line.fill_left
            )
        })?;
        if left == 0 {
            return Err(CliError::No(
                "the shards ran dry during the priority probe: fill more (--tasks) or slow the workers (--probe-work)".into(),
            ));
        }
        return Ok(EXIT_OK);
    }

    let cpu_before = cpu().await;
    let nodes_before = read().await;
    let client_before = client_cpu_seconds();
    let start = Instant::now();
    drain(queue, args, n).await?;
    let secs = start.elapsed().as_secs_f64();
    let client_after = client_cpu_seconds();
    let nodes_after = read().await;
    let cpu_used = cpu().await.zip(cpu_before).map(|(a, b)| a - b);
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
        shards: run.shards,
        masters: MasterCpu::between(nodes_before.as_deref(), nodes_after.as_deref(), n),
        client_cpu_us_per_task: client_us_per_task(client_before, client_after, n),
    };
    output::emit(global.json, &process, || {
        format!(
            "process     {n} tasks in {}: {:.0} tasks/s with concurrency {}{}",
            human(Duration::from_secs_f64(secs)),
            process.ops_per_s,
            args.concurrency,
            if run.shards.is_some() {
                process.masters.clause()
            } else {
                String::new()
            }
        )
    })?;

    if !args.shards.is_empty() {
        let (layout_version, per_master) = shards_per_master(queue).await;
        let line = ShardsLine {
            implementation: variant.implementation(),
            variant: variant.name(),
            phase: "shards",
            mode: "shards",
            shards: run.shards,
            layout_version,
            shards_per_master: per_master,
            run: run.index,
            tasks: n,
            concurrency: args.concurrency,
            enqueue_ops_per_s: enqueue.ops_per_s,
            ops_per_s: process.ops_per_s,
            redis_cpu_us_per_op: crate::global::target::us_per_op(
                enqueue_cpu.zip(cpu_used).map(|(a, b)| a + b),
                n,
            ),
            masters: MasterCpu::add(&enqueue.masters, &process.masters),
            client_cpu_us_per_task: enqueue
                .client_cpu_us_per_task
                .zip(process.client_cpu_us_per_task)
                .map(|(a, b)| a + b),
        };
        output::emit(global.json, &line, || {
            format!(
                "shards {:<4} round {}: enqueue {:.0}/s, process {:.0}/s; per task (enqueue + process): Redis {} us over every node, {} us over the masters, busiest master {}, client {} us; shards per master {:?}",
                run.shards.map_or("none".to_string(), |k| k.to_string()),
                run.round,
                line.enqueue_ops_per_s,
                line.ops_per_s,
                line.redis_cpu_us_per_op
                    .map_or("?".into(), |v| format!("{v:.2}")),
                line.masters
                    .redis_cpu_us_per_task
                    .map_or("?".into(), |v| format!("{v:.2}")),
                line.masters
                    .busiest_master_share
                    .map_or("?".into(), |v| format!("{:.1}%", v * 100.0)),
                line.client_cpu_us_per_task
                    .map_or("?".into(), |v| format!("{v:.2}")),
                line.shards_per_master,
            )
        })?;
    }

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

#[derive(Debug, Serialize)]
struct DagPhase {
    #[serde(rename = "impl")]
    implementation: String,
    variant: String,
    phase: &'static str,
    mode: &'static str,
    /// `fanout:N` or `chain:N`.
    shape: String,
    copies: u64,
    tasks: u64,
    ops: u64,
    /// Dependency edges in all.
    edges: u64,
    concurrency: u32,
    /// The event log's cap (null: off).
    events: Option<u32>,
    /// The graphs: enqueue and process (claim, run, ack, release) rates.
    enqueue_ops_per_s: f64,
    ops_per_s: f64,
    secs: f64,
    /// Redis's CPU per task over enqueue and processing.
    redis_cpu_us_per_op: Option<f64>,
    /// The same number of plain tasks, just before, the same way.
    plain_enqueue_ops_per_s: f64,
    plain_ops_per_s: f64,
    plain_redis_cpu_us_per_op: Option<f64>,
    /// (graph Redis CPU - plain Redis CPU) / edges.
    redis_cpu_us_per_edge: Option<f64>,
}

/// One worker with the benchmark's concurrency and a no-op handler drains
/// the queue; it must ack exactly `n` tasks.
async fn drain(queue: &Queue, args: &BenchQueueArgs, n: u64) -> Result<(), CliError> {
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
    if report.acked != n {
        return Err(CliError::No(format!(
            "the worker acked {} of {n} tasks: {report:?}",
            report.acked
        )));
    }
    Ok(())
}

/// Enqueue `tasks` in batches of `batch`, in order (dependencies first).
async fn enqueue_in_order(
    queue: &Queue,
    tasks: Vec<NewTask>,
    batch: usize,
) -> Result<(), CliError> {
    let mut it = tasks.into_iter().peekable();
    while it.peek().is_some() {
        let chunk: Vec<NewTask> = it.by_ref().take(batch).collect();
        queue
            .enqueue(chunk, Duration::ZERO, OnDuplicate::Keep)
            .await?;
    }
    Ok(())
}

/// Enqueue then drain `tasks` with one worker: (enqueue secs, process secs, Redis CPU secs).
async fn run_tasks(
    queue: &Queue,
    tasks: Vec<NewTask>,
    args: &BenchQueueArgs,
    cpu: &impl AsyncFn() -> Option<f64>,
) -> Result<(f64, f64, Option<f64>), CliError> {
    let n = tasks.len() as u64;
    let cpu_before = cpu().await;
    let start = Instant::now();
    enqueue_in_order(queue, tasks, args.batch as usize).await?;
    let enqueue_secs = start.elapsed().as_secs_f64();
    let start = Instant::now();
    drain(queue, args, n).await?;
    let process_secs = start.elapsed().as_secs_f64();
    let cpu_used = cpu().await.zip(cpu_before).map(|(a, b)| a - b);
    Ok((enqueue_secs, process_secs, cpu_used))
}

/// `--dag`: plain tasks, then as many in copies of the graph.
async fn dag_phase(
    global: &Global,
    args: &BenchQueueArgs,
    queue: &Queue,
    shape: DagShape,
    target: &Target,
    shards: Option<u16>,
) -> Result<u8, CliError> {
    let (per_copy, edges_per_copy) = shape.size();
    let copies = args.tasks.div_ceil(per_copy).max(1);
    let (n, edges) = (copies * per_copy, copies * edges_per_copy);
    if !global.json {
        output::line_out(&format!(
            "dlm bench queue --dag {}: {copies} copies, {n} tasks, {edges} edges, concurrency {}, events {}",
            shape.label(),
            args.concurrency,
            args.events.map_or("off".to_string(), |e| e.to_string())
        ))?;
    }
    let cpu_urls = crate::global::target::cpu_urls(target);
    let cpu = async || crate::global::target::redis_cpu_seconds(&cpu_urls, global.timeout).await;
    let plain: Vec<NewTask> = (0..n).map(|i| NewTask::new(format!("p{i}"))).collect();
    let (pe, pp, pcpu) = run_tasks(queue, plain, args, &cpu).await?;
    check_drained(queue, n).await?;
    let graphs: Vec<NewTask> = (0..copies).flat_map(|c| shape.tasks(c)).collect();
    let (ge, gp, gcpu) = run_tasks(queue, graphs, args, &cpu).await?;
    check_drained(queue, 2 * n).await?;
    let variant = variant(global, args, shards);
    let line = DagPhase {
        implementation: variant.implementation(),
        variant: variant.name(),
        phase: "dag",
        mode: "dag",
        shape: shape.label(),
        copies,
        tasks: n,
        ops: n,
        edges,
        concurrency: args.concurrency,
        events: args.events,
        enqueue_ops_per_s: rate(n, ge),
        ops_per_s: rate(n, gp),
        secs: ge + gp,
        redis_cpu_us_per_op: crate::global::target::us_per_op(gcpu, n),
        plain_enqueue_ops_per_s: rate(n, pe),
        plain_ops_per_s: rate(n, pp),
        plain_redis_cpu_us_per_op: crate::global::target::us_per_op(pcpu, n),
        redis_cpu_us_per_edge: gcpu
            .zip(pcpu)
            .filter(|_| edges > 0)
            .map(|(g, p)| (g - p) * 1e6 / edges as f64),
    };
    output::emit(global.json, &line, || {
        format!(
            "plain       {n} tasks: enqueue {:.0}/s, process {:.0}/s, Redis {} us/task\n\
             {:<11} {n} tasks: enqueue {:.0}/s, process {:.0}/s, Redis {} us/task, {} us per edge",
            line.plain_enqueue_ops_per_s,
            line.plain_ops_per_s,
            line.plain_redis_cpu_us_per_op
                .map_or("?".into(), |v| format!("{v:.2}")),
            shape.label(),
            line.enqueue_ops_per_s,
            line.ops_per_s,
            line.redis_cpu_us_per_op
                .map_or("?".into(), |v| format!("{v:.2}")),
            line.redis_cpu_us_per_edge
                .map_or("?".into(), |v| format!("{v:.2}")),
        )
    })?;
    Ok(EXIT_OK)
}
