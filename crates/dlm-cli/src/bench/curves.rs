//! `dlm bench curves`: how cost grows with work, as JSON lines in `--out`
//! (one file per curve) for `scripts/plot-curves.py` to draw, on a private
//! redis-server started for the run (flushed between points):
//!
//! * `locks-concurrency.jsonl`: `bench lock` (mutex, one shared client) at
//!   each `--concurrencies` value, distinct keys and one contended key;
//! * `locks-held.jsonl`: `--held` N locks held at once with the watchdog on:
//!   Redis memory per held lock (`used_memory` delta / N), the client's RSS
//!   per guard, and the watchdog's scripts per second (`INFO commandstats`
//!   delta over `--window` while all are held);
//! * `queue-size.jsonl`: for each `--queue-sizes` N, the enqueue rate, the
//!   memory per waiting task, the latency of `claim(64)` with N waiting (each
//!   claim's tasks abandoned at once, so N stays N) and the rate at which one
//!   worker (concurrency 64) drains them;
//! * `queue-workers.jsonl`: `--worker-tasks` tasks drained by 1, 4, 16
//!   worker processes (`dlm bench drain`, concurrency 64 each) sharing the
//!   queue.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use futures_util::{StreamExt, TryStreamExt, stream};
use serde_json::{Value, json};

use super::{BenchLockArgs, BenchMode, Primitive, measure};
use crate::bench_common::{BENCH_LEASE, ENQUEUE_IN_FLIGHT, Shape, enqueue_all};
use crate::error::{CliError, EXIT_OK, redis_err};
use crate::global::Global;
use crate::global::parse::{parse_bench_duration, parse_warmup};
use crate::global::target::{RawConnection, Target, raw_connection};
use crate::output;
use crate::stats::percentile;

/// The curves `dlm bench curves` can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Curve {
    /// Lock cycles/s and p99 against the number of concurrent tasks.
    Concurrency,
    /// Memory and watchdog load against the number of locks held at once.
    Held,
    /// Queue enqueue/process rates and claim latency against waiting tasks.
    Queue,
    /// Queue process rate against the number of worker processes.
    Workers,
}

/// `dlm bench curves`
#[derive(Debug, Clone, Args)]
pub struct BenchCurvesArgs {
    /// Directory for the JSON lines (created; each curve's file is replaced).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Which curves to measure (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "concurrency,held,queue,workers"
    )]
    pub curves: Vec<Curve>,
    /// Concurrent tasks of the lock curve (comma-separated).
    #[arg(long, value_name = "C,..", value_delimiter = ',',
          default_value = "1,4,16,64,256,1024",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrencies: Vec<u32>,
    /// How long each point of the lock curve measures.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_bench_duration)]
    pub duration: Duration,
    /// How long each point of the lock curve runs before measuring.
    #[arg(long, value_name = "W", default_value = "1s", value_parser = parse_warmup)]
    pub warmup: Duration,
    /// Locks held at once (comma-separated; 10k, 1M and the like accepted).
    #[arg(long, value_name = "N,..", value_delimiter = ',',
          default_value = "10k,100k,1M", value_parser = parse_count)]
    pub held: Vec<u64>,
    /// The TTL of the held locks (the watchdog renews every TTL/3).
    #[arg(long, value_name = "D", default_value = "30s", value_parser = parse_bench_duration)]
    pub held_ttl: Duration,
    /// How long to count the watchdog's scripts while all locks are held.
    #[arg(long, value_name = "D", default_value = "30s", value_parser = parse_bench_duration)]
    pub window: Duration,
    /// Waiting tasks of the queue curve (comma-separated; 10k, 1M accepted).
    #[arg(long, value_name = "N,..", value_delimiter = ',',
          default_value = "10k,100k,1M,10M", value_parser = parse_count)]
    pub queue_sizes: Vec<u64>,
    /// Claims timed at each queue size (claim(64) then abandon).
    #[arg(long, value_name = "N", default_value_t = 500,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub claim_samples: u32,
    /// Worker processes of the workers curve (comma-separated).
    #[arg(long, value_name = "K,..", value_delimiter = ',', default_value = "1,4,16",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: Vec<u32>,
    /// Tasks the worker processes drain at each point of the workers curve.
    #[arg(long, value_name = "N", default_value = "200k", value_parser = parse_count)]
    pub worker_tasks: u64,
}

/// `dlm bench drain` (used by `bench curves`): one no-op worker drains a
/// queue until it is empty, then prints `{"acked","secs"}`.
#[derive(Debug, Clone, Args)]
pub struct BenchDrainArgs {
    /// The queue to drain.
    #[arg(long, value_name = "NAME")]
    pub queue: String,
    /// Tasks run at once.
    #[arg(long, value_name = "C", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,
}

/// A count such as `10000`, `10k` or `1M`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, factor) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1_000),
        Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
        _ => (t, 1),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}` is no count (e.g. 10000, 10k, 1M)"))?;
    match n.checked_mul(factor) {
        Some(v) if (1..=100_000_000).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: 1 to 100M")),
    }
}

/// What the curves share: the private server, a raw connection to it, the
/// progress bar.
struct Run {
    global: Global,
    target: Target,
    raw: RawConnection,
    bar: indicatif::ProgressBar,
}

impl Run {
    /// Print a finished point above the bar (or on stderr without a terminal).
    fn note(&self, line: &str) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    async fn flush(&mut self) -> Result<(), CliError> {
        redis::cmd("FLUSHALL")
            .query_async::<()>(&mut self.raw)
            .await
            .map_err(redis_err)
    }

    async fn info(&mut self, section: &str) -> Result<String, CliError> {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.raw)
            .await
            .map_err(redis_err)
    }

    /// `used_memory` in bytes.
    async fn used_memory(&mut self) -> Result<i64, CliError> {
        let info = self.info("memory").await?;
        field(&info, "used_memory")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| failed("reading INFO memory", "no used_memory"))
    }

    /// Redis's CPU seconds so far (user + sys).
    async fn cpu_secs(&mut self) -> Result<f64, CliError> {
        let info = self.info("cpu").await?;
        let get = |k| field(&info, k).and_then(|v| v.parse::<f64>().ok());
        Ok(get("used_cpu_user").unwrap_or(0.0) + get("used_cpu_sys").unwrap_or(0.0))
    }
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// Calls of scripts (EVAL*, FCALL*) and of every command, from `INFO commandstats`.
fn command_calls(info: &str) -> (u64, u64) {
    let (mut scripts, mut all) = (0, 0);
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        all += calls;
        if name.starts_with("eval") || name.starts_with("fcall") {
            scripts += calls;
        }
    }
    (scripts, all)
}

fn failed(what: &'static str, detail: impl Into<String>) -> CliError {
    CliError::Io {
        what,
        source: std::io::Error::other(detail.into()),
    }
}

/// This process's resident memory in bytes (Linux; 0 elsewhere).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

/// Round for the JSON lines.
fn r1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// `1000000` as `1M`, `10000` as `10k`.
fn short(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n.is_multiple_of(1_000_000) => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n.is_multiple_of(1_000) => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// One curve's file of JSON lines, created (replaced) when the curve starts.
struct Sink {
    file: std::fs::File,
}

impl Sink {
    fn create(dir: &Path, name: &str) -> Result<Sink, CliError> {
        let file =
            std::fs::File::create(dir.join(name)).map_err(CliError::io("creating a curve file"))?;
        Ok(Sink { file })
    }

    /// Write `v` as one line, stamped with the time (`at`, UTC) and the
    /// machine's 1-minute load average (`load1`) when it was measured.
    fn line(&mut self, mut v: Value) -> Result<(), CliError> {
        if let Value::Object(m) = &mut v {
            let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
            m.insert("at".into(), json!(at.to_string()));
            let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<f64>().ok())
            });
            m.insert("load1".into(), json!(load));
        }
        let s = serde_json::to_string(&v).map_err(|e| CliError::Io {
            what: "encoding JSON",
            source: e.into(),
        })?;
        writeln!(self.file, "{s}").map_err(CliError::io("writing a curve file"))
    }
}

/// `dlm bench curves`.
pub async fn bench_curves(global: &Global, args: &BenchCurvesArgs) -> Result<u8, CliError> {
    if !global.redis.is_empty() {
        return Err(CliError::Usage(
            "bench curves flushes its Redis between points: it starts its own, give no --redis"
                .into(),
        ));
    }
    std::fs::create_dir_all(&args.out).map_err(CliError::io("creating the --out directory"))?;
    let has = |c| args.curves.contains(&c);
    let steps = if has(Curve::Concurrency) {
        2 * args.concurrencies.len()
    } else {
        0
    } + if has(Curve::Held) { args.held.len() } else { 0 }
        + if has(Curve::Queue) {
            args.queue_sizes.len()
        } else {
            0
        }
        + if has(Curve::Workers) {
            args.workers.len()
        } else {
            0
        };
    let target = Target::given_or_private(global).await?;
    let raw = raw_connection(&target.url, global.timeout).await?;
    let bar = indicatif::ProgressBar::new(steps as u64);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut json_global = global.clone();
    json_global.json = true;
    let mut run = Run {
        global: json_global,
        target,
        raw,
        bar,
    };
    run.note(&format!(
        "dlm bench curves: {:?} into {} ({})",
        args.curves,
        args.out.display(),
        run.target.describe()
    ));
    if has(Curve::Concurrency) {
        lock_concurrency(&mut run, args).await?;
    }
    if has(Curve::Held) {
        held_locks(&mut run, args).await?;
    }
    if has(Curve::Queue) {
        queue_sizes(&mut run, args).await?;
    }
    if has(Curve::Workers) {
        queue_workers(&mut run, args).await?;
    }
    run.bar.finish_with_message("done");
    let out = args.out.display().to_string();
    output::emit(global.json, &json!({"curves": out}), || {
        format!("curves written to {out}")
    })?;
    Ok(EXIT_OK)
}

/// Lock cycles/s and latency at each concurrency, distinct and contended.
async fn lock_concurrency(run: &mut Run, args: &BenchCurvesArgs) -> Result<(), CliError> {
    let mut sink = Sink::create(&args.out, "locks-concurrency.jsonl")?;
    for mode in [BenchMode::Distinct, BenchMode::Contended] {
        for &c in &args.concurrencies {
            run.bar
                .set_message(format!("locks {} C={c}", mode.as_str()));
            run.flush().await?;
            let lock_args = BenchLockArgs {
                primitive: Primitive::Mutex,
                permits: 4,
                mode,
                concurrency: c,
                duration: args.duration,
                warmup: args.warmup,
                nodes: None,
                baseline: false,
                frozen: 0,
                replicas: 0,
                metrics: false,
            };
            let report = measure(&run.global, &lock_args, &run.target, None).await?;
            let mut v = serde_json::to_value(&report).map_err(|e| CliError::Io {
                what: "encoding JSON",
                source: e.into(),
            })?;
            if let Value::Object(m) = &mut v {
                m.insert("curve".into(), json!("locks-concurrency"));
            }
            sink.line(v)?;
            run.note(&format!(
                "locks {:9} C={c:<5} {:>9.0} cycles/s  p50 {} us  p99 {} us",
                mode.as_str(),
                report.ops_per_s,
                report.p50_us.unwrap_or(0),
                report.p99_us.unwrap_or(0)
            ));
            run.bar.inc(1);
        }
    }
    Ok(())
}

/// A progress counter shown in the bar's message while a long phase runs.
fn ticker(
    bar: &indicatif::ProgressBar,
    what: String,
    total: u64,
) -> (Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let done = Arc::new(AtomicU64::new(0));
    let (d, bar) = (done.clone(), bar.clone());
    let handle = tokio::spawn(async move {
        loop {
            let k = d.load(Ordering::Relaxed);
            bar.set_message(format!("{what}: {}/{}", short_approx(k), short(total)));
            if k >= total {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    (done, handle)
}

/// `1234567` as `1.23M`, for progress.
fn short_approx(n: u64) -> String {
    match n {
        n if n >= 1_000_000 => format!("{:.2}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1}k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

/// Acquire, release or claim in flight at once in the bulk phases.
const IN_FLIGHT: usize = 512;

/// N locks held at once with the watchdog: memory and renewal load.
async fn held_locks(run: &mut Run, args: &BenchCurvesArgs) -> Result<(), CliError> {
    let mut sink = Sink::create(&args.out, "locks-held.jsonl")?;
    let client = crate::global::target::connect(&run.global, &run.target.url).await?;
    let opts = dlm::LockOptions::new(args.held_ttl).watchdog(true);
    for &n in &args.held {
        run.flush().await?;
        let mem0 = run.used_memory().await?;
        let rss0 = rss_bytes();
        let (done, tick) = ticker(&run.bar, format!("held {}: acquire", short(n)), n);
        let began = Instant::now();
        let guards: Vec<dlm::LockGuard> = stream::iter(0..n)
            .map(|i| {
                let (client, opts, done) = (&client, &opts, &done);
                async move {
                    let g = client.lock(format!("curve:held:{i}")).acquire(opts).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    g
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect()
            .await?;
        let acquire_secs = began.elapsed().as_secs_f64();
        tick.abort();
        let mem1 = run.used_memory().await?;
        let rss1 = rss_bytes();

        run.bar.set_message(format!(
            "held {}: counting watchdog scripts for {}",
            short(n),
            humantime::format_duration(args.window)
        ));
        let (s0, a0) = command_calls(&run.info("commandstats").await?);
        let cpu0 = run.cpu_secs().await?;
        let t0 = Instant::now();
        tokio::time::sleep(args.window).await;
        let (s1, a1) = command_calls(&run.info("commandstats").await?);
        let cpu1 = run.cpu_secs().await?;
        let window = t0.elapsed().as_secs_f64();
        let lost = guards.iter().filter(|g| g.is_lost()).count();

        let (done, tick) = ticker(&run.bar, format!("held {}: release", short(n)), n);
        let began = Instant::now();
        stream::iter(guards)
            .map(|g| {
                let done = &done;
                async move {
                    let r = g.release().await;
                    done.fetch_add(1, Ordering::Relaxed);
                    r
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_for_each(|_| async { Ok(()) })
            .await?;
        let release_secs = began.elapsed().as_secs_f64();
        tick.abort();

        let ttl = args.held_ttl.as_secs_f64();
        let line = json!({
            "curve": "locks-held",
            "impl": "dlm",
            "held": n,
            "ttl_s": ttl,
            "window_s": r1(window),
            "acquire_per_s": r1(rate(n, acquire_secs)),
            "release_per_s": r1(rate(n, release_secs)),
            "redis_bytes_per_lock": r1((mem1 - mem0) as f64 / n as f64),
            "client_rss_bytes_per_lock": r1(rss1.saturating_sub(rss0) as f64 / n as f64),
            "watchdog_scripts_per_s": r1((s1 - s0) as f64 / window),
            // Every lock renewed every TTL/3: renewals due per second.
            "renewals_per_s": r1(n as f64 * 3.0 / ttl),
            // Commands run inside scripts included, minus the INFO calls
            // of the measurement itself.
            "redis_commands_per_s": r1(a1.saturating_sub(a0 + 3) as f64 / window),
            "redis_cpu_pct": r1(100.0 * (cpu1 - cpu0) / window),
            "lost": lost,
        });
        sink.line(line.clone())?;
        run.note(&format!(
            "held {:>5}: {} B/lock in Redis, {} B/guard in the client, {} watchdog scripts/s for {} renewals/s, Redis CPU {}%, lost {lost}",
            short(n),
            line["redis_bytes_per_lock"],
            line["client_rss_bytes_per_lock"],
            line["watchdog_scripts_per_s"],
            line["renewals_per_s"],
            line["redis_cpu_pct"],
        ));
        run.bar.inc(1);
    }
    Ok(())
}

/// The queue of the curves.
const CURVE_QUEUE: &str = "curve:q";
/// Tasks one timed claim asks for (a worker of concurrency 64's batch).
const CLAIM_BATCH: usize = 64;

/// Enqueue `n` plain tasks into `queue`, showing progress; its rate.
async fn enqueue(run: &Run, queue: &dlm::queue::Queue, n: u64) -> Result<f64, CliError> {
    let (done, tick) = ticker(&run.bar, format!("queue {}: enqueue", short(n)), n);
    let began = Instant::now();
    let added = |k: u64| {
        done.fetch_add(k, Ordering::Relaxed);
    };
    let r = enqueue_all(queue, n, 1000, Shape::PLAIN, &added).await;
    let secs = began.elapsed().as_secs_f64();
    tick.abort();
    r?;
    Ok(rate(n, secs))
}

/// Enqueue, claim latency and drain rate at each number of waiting tasks.
async fn queue_sizes(run: &mut Run, args: &BenchCurvesArgs) -> Result<(), CliError> {
    let mut sink = Sink::create(&args.out, "queue-size.jsonl")?;
    let client = crate::global::target::connect(&run.global, &run.target.url).await?;
    let queue = client.queue(CURVE_QUEUE);
    for &n in &args.queue_sizes {
        run.flush().await?;
        let mem0 = run.used_memory().await?;
        let enqueue_per_s = enqueue(run, &queue, n).await?;
        let mem1 = run.used_memory().await?;

        run.bar
            .set_message(format!("queue {}: timing claims", short(n)));
        let mut claims = Vec::with_capacity(args.claim_samples as usize);
        for _ in 0..args.claim_samples {
            let start = Instant::now();
            let leases = queue.claim(CLAIM_BATCH, BENCH_LEASE).await?;
            claims.push(crate::output::us(start.elapsed()));
            // Give them back at once: the queue keeps its N waiting tasks.
            stream::iter(leases)
                .map(dlm::queue::Lease::abandon)
                .buffer_unordered(IN_FLIGHT)
                .try_for_each(|()| async { Ok(()) })
                .await?;
        }
        claims.sort_unstable();

        let (done, tick) = ticker(&run.bar, format!("queue {}: process", short(n)), n);
        let began = Instant::now();
        let report = queue
            .worker(
                dlm::queue::WorkerOptions::new()
                    .concurrency(64)
                    .lease(BENCH_LEASE)
                    .exit_when_empty(true),
            )
            .run(
                {
                    let done = done.clone();
                    move |_task| {
                        done.fetch_add(1, Ordering::Relaxed);
                        async { Ok::<(), std::convert::Infallible>(()) }
                    }
                },
                dlm::CancellationToken::new(),
            )
            .await?;
        let process_secs = began.elapsed().as_secs_f64();
        tick.abort();
        if report.acked != n {
            return Err(failed(
                "the queue curve",
                format!("the worker acked {} of {n} tasks", report.acked),
            ));
        }
        let line = json!({
            "curve": "queue-size",
            "impl": "dlm",
            "waiting": n,
            "enqueue_per_s": r1(enqueue_per_s),
            "enqueue_in_flight": ENQUEUE_IN_FLIGHT,
            "bytes_per_waiting_task": r1((mem1 - mem0) as f64 / n as f64),
            "claim_batch": CLAIM_BATCH,
            "claim_samples": claims.len(),
            "claim_p50_us": percentile(&claims, 50.0),
            "claim_p99_us": percentile(&claims, 99.0),
            "process_per_s": r1(rate(n, process_secs)),
            "concurrency": 64,
        });
        sink.line(line.clone())?;
        run.note(&format!(
            "queue {:>5}: enqueue {}/s, {} B/task, claim({CLAIM_BATCH}) p50 {} us p99 {} us, process {}/s",
            short(n),
            line["enqueue_per_s"],
            line["bytes_per_waiting_task"],
            line["claim_p50_us"],
            line["claim_p99_us"],
            line["process_per_s"],
        ));
        run.bar.inc(1);
    }
    Ok(())
}

/// The drain rate of K worker processes sharing one queue.
async fn queue_workers(run: &mut Run, args: &BenchCurvesArgs) -> Result<(), CliError> {
    let mut sink = Sink::create(&args.out, "queue-workers.jsonl")?;
    let client = crate::global::target::connect(&run.global, &run.target.url).await?;
    let queue = client.queue(CURVE_QUEUE);
    let exe = std::env::current_exe().map_err(CliError::io("finding the dlm binary"))?;
    let n = args.worker_tasks;
    for &k in &args.workers {
        run.flush().await?;
        enqueue(run, &queue, n).await?;
        run.bar.set_message(format!(
            "workers {k}: {} tasks drained by {k} processes",
            short(n)
        ));
        let began = Instant::now();
        let children = (0..k)
            .map(|_| {
                tokio::process::Command::new(&exe)
                    .args(["--redis", &run.target.url, "--json", "bench", "drain"])
                    .args(["--queue", CURVE_QUEUE, "--concurrency", "64"])
                    .env_remove("DLM_REDIS_URL")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .kill_on_drop(true)
                    .spawn()
                    .map_err(CliError::io("starting a worker process"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut acked = 0u64;
        for child in children {
            let out = child
                .wait_with_output()
                .await
                .map_err(CliError::io("waiting for a worker process"))?;
            if !out.status.success() {
                return Err(failed(
                    "a worker process",
                    format!("exited with {}", out.status),
                ));
            }
            let v: Value = serde_json::from_slice(&out.stdout)
                .map_err(|e| failed("a worker process's report", e.to_string()))?;
            acked += v["acked"].as_u64().unwrap_or(0);
        }
        let secs = began.elapsed().as_secs_f64();
        if acked != n {
            return Err(failed(
                "the workers curve",
                format!("{k} workers acked {acked} of {n} tasks"),
            ));
        }
        let line = json!({
            "curve": "queue-workers",
            "impl": "dlm",
            "workers": k,
            "concurrency_per_worker": 64,
            "tasks": n,
            "secs": (secs * 1000.0).round() / 1000.0,
            "process_per_s": r1(rate(n, secs)),
        });
        sink.line(line.clone())?;
        run.note(&format!(
            "workers {k:>3}: {} tasks in {:.1} s, {}/s",
            short(n),
            secs,
            line["process_per_s"]
        ));
        run.bar.inc(1);
    }
    Ok(())
}

/// `dlm bench drain`.
pub async fn bench_drain(global: &Global, args: &BenchDrainArgs) -> Result<u8, CliError> {
    if global.redis.is_empty() {
        return Err(CliError::Usage(
            "bench drain needs the queue's --redis URL".into(),
        ));
    }
    let client = crate::global::target::connect(global, global.url()).await?;
    let began = Instant::now();
    let report = client
        .queue(args.queue.clone())
        .worker(
            dlm::queue::WorkerOptions::new()
                .concurrency(args.concurrency as usize)
                .lease(BENCH_LEASE)
                .exit_when_empty(true),
        )
        .run(
            |_task| async { Ok::<(), std::convert::Infallible>(()) },
            dlm::CancellationToken::new(),
        )
        .await?;
    let v = json!({"acked": report.acked, "secs": began.elapsed().as_secs_f64()});
    output::emit(true, &v, String::new)?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::{command_calls, parse_count, short};

    #[test]
    fn counts_take_suffixes() {
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("1M"), Ok(1_000_000));
        assert_eq!(parse_count("250"), Ok(250));
        assert!(parse_count("0").is_err());
        assert!(parse_count("1G").is_err());
        assert!(parse_count("k").is_err());
        assert_eq!(short(10_000_000), "10M");
        assert_eq!(short(100_000), "100k");
    }

    #[test]
    fn commandstats_are_summed() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=7,usec=70,usec_per_call=10.00\r\ncmdstat_eval:calls=1,usec=1\r\ncmdstat_info:calls=3,usec=9\r\n";
        assert_eq!(command_calls(info), (8, 11));
    }
}
