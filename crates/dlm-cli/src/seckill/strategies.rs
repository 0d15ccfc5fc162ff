//! How each strategy sells: the buyers (one tokio task each, or one queue
//! worker deciding the orders) and what they find in Redis afterwards.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dlm::consistency::Take;
use dlm::queue::{NewTask, WorkerOptions};
use redis::AsyncCommands;
use tokio::sync::Semaphore;

use super::{Outcome, SeckillArgs, Strategy};
use crate::error::{CliError, redis_err};
use crate::global::target::{RawConnection, raw_connection};
use crate::output;
use crate::stats::percentile;

/// What one buyer did.
enum Buy {
    Sold,
    Rejected,
}

/// One strategy's run: where to sell and what.
pub(super) struct Ctx {
    pub(super) client: dlm::Client,
    pub(super) url: String,
    pub(super) timeout: Duration,
    pub(super) prefix: String,
    pub(super) args: SeckillArgs,
}

impl Ctx {
    fn key(&self, what: &str) -> String {
        format!("{}:{what}", self.prefix)
    }

    /// Sell with `strategy` and count the outcome.
    pub(super) async fn run(
        &self,
        strategy: Strategy,
        redlock: Option<dlm::Client>,
        progress: bool,
    ) -> Result<Outcome, CliError> {
        let stock = self.args.stock;
        let mut conn = raw_connection(&self.url, self.timeout).await?;
        let stock_key = self.key("stock");
        let orders_key = self.key("orders");
        match strategy {
            Strategy::Lock if !self.args.break_lock => {
                // The stock lives in a fenced record: a holder whose lock was taken over cannot write.
                self.client
                    .fenced_write(&stock_key, dlm::Fence::new(1), stock.to_string())
                    .await?;
            }
            Strategy::Optimistic => {
                self.client
                    .versioned(&stock_key)
                    .write(0, stock.to_string())
                    .await?;
            }
            Strategy::Script => self.client.stock(&stock_key).set(stock).await?,
            _ => {
                let _: () = conn.set(&stock_key, stock).await.map_err(redis_err)?;
            }
        }
        let bar = progress_bar(progress, self.args.buyers, strategy.name());
        let retries = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let (buys, latencies) = if strategy == Strategy::Queue {
            self.sell_through_queue(&bar).await?
        } else {
            self.sell_directly(strategy, redlock, &retries, &bar)
                .await?
        };
        let wall = started.elapsed();
        if let Some(b) = &bar {
            b.finish_and_clear();
        }
        let sold = buys.iter().filter(|b| matches!(b, Buy::Sold)).count() as u64;
        let rejected = buys.len() as u64 - sold;
        // Every order decided exactly once: one decision per buyer in the orders hash.
        let decisions: u64 = conn.hlen(&orders_key).await.map_err(redis_err)?;
        let decided_once = decisions == self.args.buyers && buys.len() as u64 == self.args.buyers;
        let stock_left = self.stock_left(strategy, &mut conn, &stock_key).await?;
        let mut lat = latencies;
        lat.sort_unstable();
        let expected = stock.min(self.args.buyers);
        let ok =
            strategy == Strategy::Naive || (sold == expected && stock_left >= 0 && decided_once);
        Ok(Outcome {
            strategy: strategy.name(),
            stock,
            buyers: self.args.buyers,
            sold,
            oversold: sold.saturating_sub(stock),
            rejected,
            retries: retries.load(Ordering::Relaxed),
            stock_left,
            decided_once,
            wall_ms: output::ms(wall),
            buyers_per_s: self.args.buyers as f64 / wall.as_secs_f64().max(1e-9),
            p99_us: percentile(&lat, 99.0),
            ok,
        })
    }

    async fn stock_left(
        &self,
        strategy: Strategy,
        conn: &mut RawConnection,
        stock_key: &str,
    ) -> Result<i64, CliError> {
        let parse = |b: &[u8]| {
            std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(i64::MIN)
        };
        Ok(match strategy {
            Strategy::Lock if !self.args.break_lock => self
                .client
                .fenced_read(stock_key)
                .await?
                .map_or(i64::MIN, |(_, v)| parse(&v)),
            Strategy::Optimistic => self
                .client
                .versioned(stock_key)
                .read()
                .await?
                .map_or(i64::MIN, |(v, _)| parse(&v)),
            Strategy::Script => {
                i64::try_from(self.client.stock(stock_key).get().await?).unwrap_or(i64::MAX)
            }
            _ => {
                let v: Option<i64> = conn.get(stock_key).await.map_err(redis_err)?;
                v.unwrap_or(i64::MIN)
            }
        })
    }

    /// One tokio task per buyer, at most `concurrency` in flight.
    async fn sell_directly(
        &self,
        strategy: Strategy,
        redlock: Option<dlm::Client>,
        retries: &Arc<AtomicU64>,
        bar: &Option<indicatif::ProgressBar>,
    ) -> Result<(Vec<Buy>, Vec<u64>), CliError> {
        let gate = Arc::new(Semaphore::new(self.args.concurrency as usize));
        let mut set = tokio::task::JoinSet::new();
        // One multiplexed connection; each buyer's task sends its own commands on it.
        let shared = raw_connection(&self.url, self.timeout).await?;
        for buyer in 0..self.args.buyers {
            let permit = next_buyer(&gate).await?;
            let client = self.client.clone();
            let redlock = redlock.clone();
            let retries = retries.clone();
            let stock_key = self.key("stock");
            let orders_key = self.key("orders");
            let lock_name = self.key("lock");
            let strategy = if strategy == Strategy::Lock && self.args.break_lock {
                Strategy::Naive
            } else {
                strategy
            };
            let mut conn = shared.clone();
            let bar = bar.clone();
            set.spawn(async move {
                let t0 = Instant::now();
                let r = buy(
                    strategy,
                    &client,
                    redlock.as_ref(),
                    &mut conn,
                    &stock_key,
                    &lock_name,
                    &retries,
                )
                .await;
                let decided: Result<(), CliError> = match &r {
                    Ok(b) => {
                        let verdict = if matches!(b, Buy::Sold) {
                            "sold"
                        } else {
                            "rejected"
                        };
                        conn.hset_nx::<_, _, _, ()>(&orders_key, buyer, verdict)
                            .await
                            .map_err(redis_err)
                    }
                    Err(_) => Ok(()),
                };
                if let Some(b) = bar {
                    b.inc(1);
                }
                drop(permit);
                decided?;
                r.map(|b| (b, output::us(t0.elapsed())))
            });
        }
        let mut buys = Vec::new();
        let mut lat = Vec::new();
        while let Some(done) = set.join_next().await {
            let (b, us) =
                done.map_err(|e| CliError::Usage(format!("a buyer task failed: {e}")))??;
            buys.push(b);
            lat.push(us);
        }
        Ok((buys, lat))
    }

    /// Buyers enqueue an order each; one worker decides them in turn.
    async fn sell_through_queue(
        &self,
        bar: &Option<indicatif::ProgressBar>,
    ) -> Result<(Vec<Buy>, Vec<u64>), CliError> {
        let queue = self.client.queue(self.key("orders-queue"));
        let stock_key = self.key("stock");
        let orders_key = self.key("orders");
        let enqueued_at: Arc<std::sync::Mutex<std::collections::HashMap<String, Instant>>> =
            Arc::default();
        let gate = Arc::new(Semaphore::new(self.args.concurrency as usize));
        let mut producers = tokio::task::JoinSet::new();
        for buyer in 0..self.args.buyers {
            let permit = next_buyer(&gate).await?;
            let (queue, enqueued_at) = (queue.clone(), enqueued_at.clone());
            producers.spawn(async move {
                let id = format!("order-{buyer}");
                if let Ok(mut m) = enqueued_at.lock() {
                    m.insert(id.clone(), Instant::now());
                }
                let r = queue.push(NewTask::new(id)).await;
                drop(permit);
                r
            });
        }
        while let Some(done) = producers.join_next().await {
            done.map_err(|e| CliError::Usage(format!("a buyer task failed: {e}")))??;
        }
        // One worker, one task at a time: the queue serialises the read-modify-write.
        let conn = raw_connection(&self.url, self.timeout).await?;
        let results: Arc<std::sync::Mutex<Vec<(bool, u64)>>> = Arc::default();
        let (r2, bar2) = (results.clone(), bar.clone());
        let handler = move |task: dlm::queue::Task| {
            let (mut conn, stock_key, orders_key) =
                (conn.clone(), stock_key.clone(), orders_key.clone());
            let (results, bar, enqueued_at) = (r2.clone(), bar2.clone(), enqueued_at.clone());
            async move {
                let left: i64 = conn.get(&stock_key).await.map_err(|e| e.to_string())?;
                let sold = left > 0;
                if sold {
                    let _: () = conn
                        .set(&stock_key, left - 1)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let verdict = if sold { "sold" } else { "rejected" };
                let first: bool = conn
                    .hset_nx(&orders_key, &task.id, verdict)
                    .await
                    .map_err(|e| e.to_string())?;
                let since = enqueued_at
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&task.id).copied())
                    .map_or(0, |t| output::us(t.elapsed()));
                if first && let Ok(mut r) = results.lock() {
                    r.push((sold, since));
                }
                if let Some(b) = bar {
                    b.inc(1);
                }
                Ok::<(), String>(())
            }
        };
        let report = queue
            .worker(
                WorkerOptions::new()
                    .concurrency(1)
                    .exit_when_empty(true)
                    .idle_wait(Duration::from_millis(20)),
            )
            .run(handler, dlm::CancellationToken::new())
            .await?;
        tracing::debug!(?report, "order worker done");
        let results = match results.lock() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let buys = results
            .iter()
            .map(|(sold, _)| if *sold { Buy::Sold } else { Buy::Rejected })
            .collect();
        let lat = results.iter().map(|(_, us)| *us).collect();
        Ok((buys, lat))
    }
}

/// Wait until fewer than `--concurrency` buyers are in flight.
async fn next_buyer(gate: &Arc<Semaphore>) -> Result<tokio::sync::OwnedSemaphorePermit, CliError> {
    gate.clone()
        .acquire_owned()
        .await
        .map_err(|_| CliError::Usage("buyer gate closed".into()))
}

/// One buyer's attempt to buy one phone.
async fn buy(
    strategy: Strategy,
    client: &dlm::Client,
    redlock: Option<&dlm::Client>,
    conn: &mut RawConnection,
    stock_key: &str,
    lock_name: &str,
    retries: &AtomicU64,
) -> Result<Buy, CliError> {
    let lock_opts = dlm::LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(120));
    match strategy {
        Strategy::Naive => {
            let left: i64 = conn.get(stock_key).await.map_err(redis_err)?;
            tokio::task::yield_now().await; // other buyers read the same value meanwhile
            tokio::time::sleep(Duration::from_micros(200)).await;
            if left <= 0 {
                return Ok(Buy::Rejected);
            }
            let _: () = conn.set(stock_key, left - 1).await.map_err(redis_err)?;
            Ok(Buy::Sold)
        }
        Strategy::Lock => {
            let t0 = Instant::now();
            let guard = client.lock(lock_name).acquire(&lock_opts).await?;
            if t0.elapsed() > Duration::from_millis(1) {
                retries.fetch_add(1, Ordering::Relaxed);
            }
            let fence = guard
                .fence()
                .ok_or_else(|| CliError::Usage("a single-Redis lock has a fence".into()))?;
            let left = client
                .fenced_read(stock_key)
                .await?
                .and_then(|(_, v)| String::from_utf8(v).ok()?.parse::<i64>().ok())
                .unwrap_or(0);
            let sold = left > 0;
            if sold {
                client
                    .fenced_write(stock_key, fence, (left - 1).to_string())
                    .await?;
            }
            guard.release().await?;
            Ok(if sold { Buy::Sold } else { Buy::Rejected })
        }
        Strategy::Redlock => {
            let redlock = redlock.ok_or_else(|| CliError::Usage("no Redlock nodes".into()))?;
            let t0 = Instant::now();
            let guard = redlock.lock(lock_name).acquire(&lock_opts).await?;
            if t0.elapsed() > Duration::from_millis(1) {
                retries.fetch_add(1, Ordering::Relaxed);
            }
            let left: i64 = conn.get(stock_key).await.map_err(redis_err)?;
            let sold = left > 0;
            if sold {
                let _: () = conn.set(stock_key, left - 1).await.map_err(redis_err)?;
            }
            guard.release().await?;
            Ok(if sold { Buy::Sold } else { Buy::Rejected })
        }
        Strategy::Optimistic => {
            let calls = AtomicU64::new(0);
            let (_, sold) = client
                .versioned(stock_key)
                .update(1000, |old| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    let left: i64 = old
                        .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
                        .unwrap_or(0);
                    if left > 0 {
                        ((left - 1).to_string().into_bytes(), true)
                    } else {
                        (left.to_string().into_bytes(), false)
                    }
                })
                .await?;
            retries.fetch_add(calls.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
            Ok(if sold { Buy::Sold } else { Buy::Rejected })
        }
        Strategy::Script => Ok(match client.stock(stock_key).take(1).await? {
            Take::Taken { .. } => Buy::Sold,
            Take::Insufficient { .. } => Buy::Rejected,
        }),
        Strategy::All | Strategy::Queue => Err(CliError::Usage(
            "internal: strategy has no direct buyer".into(),
        )),
    }
}

fn progress_bar(on: bool, len: u64, label: &str) -> Option<indicatif::ProgressBar> {
    if !on || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{prefix:>10} {bar:40} {pos}/{len} buyers")
    {
        bar.set_style(style);
    }
    bar.set_prefix(label.to_string());
    Some(bar)
}
