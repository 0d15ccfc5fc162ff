//! `dlm demo seckill`: the flash sale of the source documents. A crowd of
//! buyers (one tokio task each) tries to buy a few phones at once, once per
//! strategy: without coordination (oversells), with a lock, a Redlock, an
//! optimistic CAS, one atomic script, and a queue of orders.

use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::Global;
use crate::global::target::{Target, connect, connect_nodes};
use crate::output;

mod strategies;

use strategies::Ctx;

/// One way of selling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Strategy {
    /// Every strategy, one after the other.
    All,
    /// GET, check, SET with a pause in between: what the seeds warn about.
    Naive,
    /// A lock on one Redis around the read-modify-write, with fenced writes.
    Lock,
    /// A Redlock over three private masters around the read-modify-write.
    Redlock,
    /// A versioned compare-and-set with bounded retries.
    Optimistic,
    /// One atomic decrement-if-enough script.
    Script,
    /// Buyers enqueue orders; one worker decides each order exactly once.
    Queue,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::All => "all",
            Strategy::Naive => "naive",
            Strategy::Lock => "lock",
            Strategy::Redlock => "redlock",
            Strategy::Optimistic => "optimistic",
            Strategy::Script => "script",
            Strategy::Queue => "queue",
        }
    }
}

/// `dlm demo seckill`
#[derive(Debug, Clone, Args)]
pub struct SeckillArgs {
    /// Phones on sale.
    #[arg(long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub stock: u64,
    /// Buyers, each one tokio task trying to buy one phone.
    #[arg(long, value_name = "N", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub buyers: u64,
    /// Buyers in flight at once.
    #[arg(long, value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// Which strategy to run.
    #[arg(long, value_enum, default_value_t = Strategy::All)]
    pub strategy: Strategy,
    /// Test hook: the `lock` strategy skips the lock (so it oversells and the
    /// demo must fail).
    #[arg(long, hide = true)]
    pub break_lock: bool,
}

/// One strategy's outcome (one JSON line with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    strategy: &'static str,
    stock: u64,
    buyers: u64,
    sold: u64,
    oversold: u64,
    rejected: u64,
    /// Lock waits, CAS conflicts retried, or 0.
    retries: u64,
    stock_left: i64,
    decided_once: bool,
    wall_ms: u64,
    buyers_per_s: f64,
    p99_us: Option<u64>,
    ok: bool,
}

/// `dlm demo seckill`.
pub async fn run(global: &Global, args: &SeckillArgs) -> Result<u8, CliError> {
    let strategies: Vec<Strategy> = match args.strategy {
        Strategy::All => vec![
            Strategy::Naive,
            Strategy::Lock,
            Strategy::Redlock,
            Strategy::Optimistic,
            Strategy::Script,
            Strategy::Queue,
        ],
        one => vec![one],
    };
    let target = Target::given_or_private(global).await?;
    let client = connect(global, &target.url).await?;
    // Redlock needs independent masters: three private ones unless several --redis were given.
    let redlock_target = if strategies.contains(&Strategy::Redlock) {
        Some(if global.redis.len() > 1 {
            Target::given_or_private_many(global, 0).await?
        } else {
            // Redlock runs on independent masters, whatever the main target is.
            let private = Global {
                redis: Vec::new(),
                topology: crate::global::Topology::Plain,
                ..global.clone()
            };
            Target::given_or_private_many(&private, 3).await?
        })
    } else {
        None
    };
    if !global.json {
        output::line_out(&format!(
            "dlm demo seckill: {} phones, {} buyers ({} at once) on {}",
            args.stock,
            args.buyers,
            args.concurrency,
            target.describe()
        ))?;
    }
    let run_id = dlm::Token::random()?.as_str()[..8].to_string();
    let mut outcomes = Vec::new();
    for strategy in strategies {
        let ctx = Ctx {
            client: client.clone(),
            url: target.url.clone(),
            timeout: global.timeout,
            prefix: format!("seckill:{run_id}:{}", strategy.name()),
            args: args.clone(),
        };
        let redlock = match (&redlock_target, strategy) {
            (Some(t), Strategy::Redlock) => {
                // Independent masters: never a cluster or a Sentinel's master.
                let plain = Global {
                    topology: crate::global::Topology::Plain,
                    ..global.clone()
                };
                Some(connect_nodes(&t.urls, &plain).await?)
            }
            _ => None,
        };
        let outcome = ctx.run(strategy, redlock, !global.json).await?;
        if global.json {
            output::emit(true, &outcome, String::new)?;
        }
        outcomes.push(outcome);
    }
    if !global.json {
        output::line_out(&table(&outcomes))?;
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.ok)
        .map(|o| {
            format!(
                "{}: sold {} of {} (oversold {}, stock left {}, decided once: {})",
                o.strategy, o.sold, o.stock, o.oversold, o.stock_left, o.decided_once
            )
        })
        .collect();
    drop(redlock_target);
    drop(target);
    if failed.is_empty() {
        Ok(EXIT_OK)
    } else {
        Err(CliError::DemoFailed(format!(
            "a safe strategy was not exact: {}",
            failed.join("; ")
        )))
    }
}

fn table(rows: &[Outcome]) -> String {
    let mut s = format!(
        "{:<11} {:>5} {:>9} {:>9} {:>8} {:>11} {:>10} {:>10} {:>10}  {}",
        "strategy",
        "sold",
        "oversold",
        "rejected",
        "retries",
        "stock left",
        "wall",
        "buyers/s",
        "p99",
        "exact"
    );
    for r in rows {
        s.push_str(&format!(
            "\n{:<11} {:>5} {:>9} {:>9} {:>8} {:>11} {:>10} {:>10.0} {:>10}  {}",
            r.strategy,
            r.sold,
            r.oversold,
            r.rejected,
            r.retries,
            r.stock_left,
            output::human(Duration::from_millis(r.wall_ms)),
            r.buyers_per_s,
            r.p99_us
                .map_or("-".to_string(), |u| output::human(Duration::from_micros(u))),
            if r.strategy == "naive" {
                if r.oversold > 0 {
                    "no (expected)"
                } else {
                    "by luck"
                }
            } else if r.ok {
                "yes"
            } else {
                "NO"
            }
        ));
    }
    s
}
