//! The report of `dlm bench lock`: every worker's counts summed into one
//! [`BenchReport`] (percentiles, hand-off, fairness), and its table for people.

use std::time::Duration;

use super::{BenchLockArgs, BenchMode, BenchReport, WorkerStats};
use crate::output::{cell_us, human};
use crate::stats::percentile;

/// The report of a run from every worker's counts.
pub(super) fn summarize(
    args: &BenchLockArgs,
    all: &[WorkerStats],
    violations: u64,
    redis_version: Option<String>,
) -> BenchReport {
    let sum = |f: fn(&WorkerStats) -> u64| all.iter().map(f).sum::<u64>();
    let ops = sum(|s| s.ops);
    let mut lat: Vec<u64> = all
        .iter()
        .flat_map(|s| s.latencies_us.iter().copied())
        .collect();
    lat.sort_unstable();
    let mut acq: Vec<u64> = all
        .iter()
        .flat_map(|s| s.acquires_us.iter().copied())
        .collect();
    acq.sort_unstable();
    let secs = args.duration.as_secs_f64();
    let contended = args.mode == BenchMode::Contended;
    let (handoff_p50_us, handoff_p99_us, min_ops, max_ops) = if contended {
        let mut h: Vec<u64> = all
            .iter()
            .flat_map(|s| s.handoffs_us.iter().copied())
            .collect();
        h.sort_unstable();
        (
            Some(percentile(&h, 50.0)),
            Some(percentile(&h, 99.0)),
            all.iter().map(|s| s.ops).min(),
            all.iter().map(|s| s.ops).max(),
        )
    } else {
        (None, None, None, None)
    };
    BenchReport {
        implementation: "dlm".into(),
        variant: "default".into(),
        mode: args.mode.as_str(),
        concurrency: args.concurrency,
        ops,
        secs,
        ops_per_s: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        p50_us: percentile(&lat, 50.0),
        p99_us: percentile(&lat, 99.0),
        acquire_p50_us: percentile(&acq, 50.0),
        acquire_p99_us: percentile(&acq, 99.0),
        attempts: sum(|s| s.attempts),
        failed_attempts: sum(|s| s.failed),
        errors: sum(|s| s.errors),
        violations,
        handoff_p50_us,
        handoff_p99_us,
        min_ops_per_worker: min_ops,
        max_ops_per_worker: max_ops,
        redis_version,
        server: None,
        native: Vec::new(),
        redis_cpu_us_per_op: None,
        nodes: 1,
        frozen: 0,
        topology: "standalone",
        replicas: 0,
        metrics_series: None,
        primitive: "mutex",
        permits: None,
    }
}

/// The report for people: a table and a few lines.
pub(super) fn table(r: &BenchReport) -> String {
    let mut s = format!(
        "{:>10} {:>12} {:>10} {:>10} {:>10} {:>8} {:>7} {:>10}\n{:>10} {:>12.0} {:>10} {:>10} {:>10} {:>8} {:>7} {:>10}",
        "ops",
        "ops/s",
        "p50",
        "p99",
        "attempts",
        "failed",
        "errors",
        "violations",
        r.ops,
        r.ops_per_s,
        cell_us(r.p50_us),
        cell_us(r.p99_us),
        r.attempts,
        r.failed_attempts,
        r.errors,
        r.violations,
    );
    s.push_str(&format!(
        "\nacquire alone p50 {}, p99 {}",
        cell_us(r.acquire_p50_us),
        cell_us(r.acquire_p99_us)
    ));
    if let (Some(p50), Some(p99)) = (r.handoff_p50_us, r.handoff_p99_us) {
        s.push_str(&format!(
            "\nhand-off p50 {}, p99 {}; ops per worker min {}, max {}",
            cell_us(p50),
            cell_us(p99),
            r.min_ops_per_worker.unwrap_or(0),
            r.max_ops_per_worker.unwrap_or(0),
        ));
    }
    s.push_str(&format!(
        "\nmeasured over {}",
        human(Duration::from_secs_f64(r.secs))
    ));
    s
}
