//! `dlm bench ids`: how many ids per second the id generator hands out, and
//! what one rate limiter attempt costs, each for `--duration` with
//! `--concurrency` tasks sharing one client:
//!
//! * `ids next` : `ids(NAME).next()`, one INCR per id (globally ordered);
//! * `ids batch`: `next_batch(--batch)`, one INCRBY per batch;
//! * `ids block`: `ids(NAME).block(--batch).next()`, one INCRBY per block,
//!   the rest handed out in the process;
//! * `rate try` : `rate_limiter(NAME, 1000000, 1s).try_acquire()` (far from
//!   the limit: the cost of the script itself), with its latency.
//!
//! The ids of each phase are checked increasing within each task (else exit 1).

use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::Global;
use crate::global::parse::parse_bench_duration;
use crate::global::target::{Target, connect};
use crate::output::{self, cell_us, us};
use crate::rng::{SplitMix, seed};
use crate::stats::percentile;

/// `dlm bench ids`
#[derive(Debug, Clone, Args)]
pub struct BenchIdsArgs {
    /// How long each phase runs.
    #[arg(long, value_name = "D", default_value = "3s", value_parser = parse_bench_duration)]
    pub duration: Duration,
    /// Tasks calling at once, sharing one client.
    #[arg(long, value_name = "C", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub concurrency: u32,
    /// Ids per batch and per reserved block.
    #[arg(long, value_name = "B", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub batch: u64,
}

#[derive(Debug, Serialize)]
struct Phase {
    phase: &'static str,
    concurrency: u32,
    ops: u64,
    secs: f64,
    ops_per_s: f64,
    p50_us: Option<u64>,
    p99_us: Option<u64>,
}

#[derive(Clone, Copy)]
enum Mode {
    Next,
    Batch,
    Block,
    Rate,
}

/// `dlm bench ids`
pub async fn bench_ids(global: &Global, args: &BenchIdsArgs) -> Result<u8, CliError> {
    let target = Target::given_or_private(global).await?;
    let client = connect(global, &target.url).await?;
    let run = format!("bench:{:08x}", SplitMix(seed(0)).next() as u32);
    if !global.json {
        output::line_out(&format!(
            "bench ids on {}: {} per phase, {} tasks, batch/block {}",
            target.describe(),
            humantime::format_duration(args.duration),
            args.concurrency,
            args.batch
        ))?;
    }
    for (name, mode) in [
        ("ids next", Mode::Next),
        ("ids batch", Mode::Batch),
        ("ids block", Mode::Block),
        ("rate try", Mode::Rate),
    ] {
        let phase = measure(&client, &run, name, mode, args).await?;
        output::emit(global.json, &phase, || {
            format!(
                "{:<10} {:>12.0} /s   p50 {:>8}  p99 {:>8}",
                phase.phase,
                phase.ops_per_s,
                cell_us(phase.p50_us),
                cell_us(phase.p99_us)
            )
        })?;
    }
    Ok(EXIT_OK)
}

async fn measure(
    client: &dlm::Client,
    run: &str,
    phase: &'static str,
    mode: Mode,
    args: &BenchIdsArgs,
) -> Result<Phase, CliError> {
    let ids = match mode {
        Mode::Block => client.ids(format!("{run}:{phase}")).block(args.batch),
        _ => client.ids(format!("{run}:{phase}")),
    };
    let limiter = client.rate_limiter(format!("{run}:rate"), 1_000_000, Duration::from_secs(1));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (ids, limiter, batch, duration) =
            (ids.clone(), limiter.clone(), args.batch, args.duration);
        tasks.push(tokio::spawn(async move {
            let mut ops = 0u64;
            let mut latencies = Vec::new();
            let mut last = 0u64;
            let mut ordered = true;
            while started.elapsed() < duration {
                let t = Instant::now();
                let got = match mode {
                    Mode::Next | Mode::Block => vec![ids.next().await?],
                    Mode::Batch => ids.next_batch(batch).await?,
                    Mode::Rate => {
                        limiter.try_acquire().await?;
                        vec![]
                    }
                };
                latencies.push(us(t.elapsed()));
                ops += if got.is_empty() { 1 } else { got.len() as u64 };
                for id in got {
                    ordered &= id > last;
                    last = id;
                }
            }
            Ok::<_, dlm::Error>((ops, latencies, ordered))
        }));
    }
    let (mut ops, mut latencies, mut ordered) = (0, Vec::new(), true);
    for t in tasks {
        let (o, l, ok) = t.await.map_err(|e| CliError::Io {
            what: "running a benchmark task",
            source: std::io::Error::other(e),
        })??;
        ops += o;
        latencies.extend(l);
        ordered &= ok;
    }
    if !ordered {
        return Err(CliError::DemoFailed(format!(
            "{phase}: ids were not increasing within a task"
        )));
    }
    let secs = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Ok(Phase {
        phase,
        concurrency: args.concurrency,
        ops,
        secs,
        ops_per_s: ops as f64 / secs.max(1e-9),
        p50_us: percentile(&latencies, 50.0),
        p99_us: percentile(&latencies, 99.0),
    })
}
