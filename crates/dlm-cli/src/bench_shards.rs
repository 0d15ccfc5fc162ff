//! What `dlm bench queue --shards` adds (issue 35, docs/sharded-queue.md
//! section 11): Redis CPU per *master* (from each node's `INFO CPU`, with
//! its role from `INFO replication`), the busiest master's share, the
//! client's own CPU, the `stats` / `peek` latency on a full queue, and the
//! priority probe (how many tasks are claimed between the push of a
//! high-priority task into a random shard and its claim).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlm::CancellationToken;
use dlm::queue::{NewTask, Queue, WorkerOptions};
use serde::Serialize;

use crate::error::CliError;
use crate::global::target::{Target, cpu_urls, info};
use crate::global::{Global, Topology};
use crate::output::us;
use crate::rng::{SplitMix, seed};
use crate::stats::percentile;

/// One node's reading: its address, whether it was a master, its CPU
/// seconds (`used_cpu_sys + used_cpu_user`).
#[derive(Debug, Clone)]
pub(crate) struct NodeCpu {
    addr: String,
    master: bool,
    secs: f64,
}

/// The nodes whose CPU a benchmark reads: every node of a private cluster,
/// every node `CLUSTER NODES` names for `--cluster --redis SEED`, else the
/// `--redis` URLs (or the private server).
pub(crate) async fn node_urls(global: &Global, target: &Target) -> Vec<String> {
    if target.cluster.is_some() || global.topology != Topology::Cluster {
        return cpu_urls(target);
    }
    match cluster_node_urls(&target.url, global.timeout).await {
        Some(urls) if !urls.is_empty() => urls,
        _ => cpu_urls(target),
    }
}

/// Every connected node of the cluster `seed` belongs to, as URLs like the
/// seed's (same scheme, user and password).
async fn cluster_node_urls(seed: &str, timeout: Duration) -> Option<Vec<String>> {
    let client = redis::Client::open(seed).ok()?;
    let mut conn = tokio::time::timeout(timeout * 2, client.get_multiplexed_async_connection())
        .await
        .ok()?
        .ok()?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .ok()?;
    Some(
        nodes
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let (_id, addr, flags) = (f.next()?, f.next()?, f.next()?);
                if flags.contains("fail") || flags.contains("noaddr") {
                    return None;
                }
                let addr = addr.split(['@', ',']).next()?;
                Some(with_addr(seed, addr))
            })
            .collect(),
    )
}

/// `url` with its `host:port` replaced by `addr`.
fn with_addr(url: &str, addr: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return format!("redis://{addr}");
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let user = authority.rsplit_once('@').map(|(u, _)| u);
    match user {
        Some(u) => format!("{scheme}://{u}@{addr}{path}"),
        None => format!("{scheme}://{addr}{path}"),
    }
}

/// Read every node's CPU and role; `None` when one does not say.
pub(crate) async fn read_nodes(urls: &[String], timeout: Duration) -> Option<Vec<NodeCpu>> {
    let mut out = Vec::with_capacity(urls.len());
    for url in urls {
        let cpu = info(url, timeout, "cpu").await?;
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        };
        let secs = field(&cpu, "used_cpu_sys")?.parse::<f64>().ok()?
            + field(&cpu, "used_cpu_user")?.parse::<f64>().ok()?;
        let role = info(url, timeout, "replication")
            .await
            .and_then(|r| field(&r, "role"));
        out.push(NodeCpu {
            addr: url
                .split_once("://")
                .map_or(url.as_str(), |(_, r)| r)
                .rsplit('@')
                .next()
                .unwrap_or(url)
                .trim_end_matches('/')
                .to_string(),
            master: role.as_deref() != Some("slave"),
            secs,
        });
    }
    Some(out)
}

/// `used_memory` summed over the nodes at `urls` that are masters (a
/// sharded queue's memory is spread over them); `None` if one does not say.
pub(crate) async fn masters_memory(urls: &[String], timeout: Duration) -> Option<i64> {
    let mut total = 0;
    for url in urls {
        let role = info(url, timeout, "replication").await?;
        if role.lines().any(|l| l.trim() == "role:slave") {
            continue;
        }
        let mem = info(url, timeout, "memory").await?;
        total += mem
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<i64>().ok())?;
    }
    Some(total)
}

/// Redis CPU over a window, per master (the nodes that were masters when
/// the window began).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct MasterCpu {
    /// Redis CPU of every master together, in µs per task (replicas not
    /// counted; `redis_cpu_us_per_op` counts every node).
    pub redis_cpu_us_per_task: Option<f64>,
    /// The busiest master's share of the masters' CPU (1.0 with one master).
    pub busiest_master_share: Option<f64>,
    /// Each master's CPU, in µs per task, by `host:port`.
    pub master_cpu_us_per_task: Option<BTreeMap<String, f64>>,
}

impl MasterCpu {
    /// The figures of the window `before .. after` over `tasks` tasks.
    pub(crate) fn between(
        before: Option<&[NodeCpu]>,
        after: Option<&[NodeCpu]>,
        tasks: u64,
    ) -> MasterCpu {
        let (Some(before), Some(after)) = (before, after) else {
            return MasterCpu::default();
        };
        if tasks == 0 {
            return MasterCpu::default();
        }
        let mut per = BTreeMap::new();
        for b in before.iter().filter(|b| b.master) {
            if let Some(a) = after.iter().find(|a| a.addr == b.addr) {
                per.insert(
                    b.addr.clone(),
                    (a.secs - b.secs).max(0.0) * 1e6 / tasks as f64,
                );
            }
        }
        let total: f64 = per.values().sum();
        let busiest = per.values().copied().fold(0.0, f64::max);
        MasterCpu {
            redis_cpu_us_per_task: (!per.is_empty()).then_some(total),
            busiest_master_share: (total > 0.0).then(|| busiest / total),
            master_cpu_us_per_task: Some(per),
        }
    }

    /// Two windows over the same tasks (enqueue, then processing) added up:
    /// the CPU per task of both.
    pub(crate) fn add(a: &MasterCpu, b: &MasterCpu) -> MasterCpu {
        let (Some(pa), Some(pb)) = (&a.master_cpu_us_per_task, &b.master_cpu_us_per_task) else {
            return MasterCpu::default();
        };
        let mut per = pa.clone();
        for (k, v) in pb {
            *per.entry(k.clone()).or_insert(0.0) += v;
        }
        let total: f64 = per.values().sum();
        let busiest = per.values().copied().fold(0.0, f64::max);
        MasterCpu {
            redis_cpu_us_per_task: (!per.is_empty()).then_some(total),
            busiest_master_share: (total > 0.0).then(|| busiest / total),
            master_cpu_us_per_task: Some(per),
        }
    }

    /// `, Redis X us/task over the masters, busiest master Y%` (or nothing).
    pub(crate) fn clause(&self) -> String {
        match (self.redis_cpu_us_per_task, self.busiest_master_share) {
            (Some(t), Some(s)) => format!(
                ", Redis {t:.2} us/task over {} masters, busiest {:.0}%",
                self.master_cpu_us_per_task
                    .as_ref()
                    .map_or(0, BTreeMap::len),
                s * 100.0
            ),
            _ => String::new(),
        }
    }
}

/// This process's CPU time (user + system), in seconds.
#[allow(unsafe_code)]
pub(crate) fn client_cpu_seconds() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `rusage` into the pointer it is given,
    // which points at memory of that type; it reads nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0: the struct is filled in (and it was
    // zeroed before, a valid value of it anyway).
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

/// Client CPU over a window, in µs per task.
pub(crate) fn client_us_per_task(before: Option<f64>, after: Option<f64>, n: u64) -> Option<f64> {
    after
        .zip(before)
        .filter(|_| n > 0)
        .map(|(a, b)| (a - b) * 1e6 / n as f64)
}

/// How the benchmark's queue is spread: shards per master (`host:port` →
/// count; `-` where the slot map could not be read).
pub(crate) async fn shards_per_master(queue: &Queue) -> (u64, BTreeMap<String, u16>) {
    let Ok(layout) = queue.shards().await else {
        return (0, BTreeMap::new());
    };
    let mut per = BTreeMap::new();
    for s in &layout.shards {
        *per.entry(s.master.clone().unwrap_or_else(|| "-".into()))
            .or_insert(0) += 1;
    }
    (layout.version, per)
}

/// `--reads`: `stats` and `peek 10` latencies on the full queue.
#[derive(Debug, Serialize)]
pub(crate) struct ReadsPhase {
    #[serde(rename = "impl")]
    pub implementation: String,
    pub variant: String,
    pub phase: &'static str,
    pub mode: &'static str,
    pub shards: Option<u16>,
    /// Tasks waiting while read.
    pub waiting: u64,
    pub samples: usize,
    pub stats_p50_us: Option<u64>,
    pub stats_p99_us: Option<u64>,
    pub stats_max_us: Option<u64>,
    pub peek_p50_us: Option<u64>,
    pub peek_p99_us: Option<u64>,
    pub peek_max_us: Option<u64>,
}

/// Time `samples` `stats` calls and `samples` `top(10)` calls, alternating,
/// each through `queue` (a handle that re-reads the layout at most once a
/// second, as a long-lived reader does).
pub(crate) async fn time_reads(
    queue: &Queue,
    samples: usize,
) -> Result<(Vec<u64>, Vec<u64>), CliError> {
    let (mut stats, mut peek) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for _ in 0..samples {
        let t = Instant::now();
        queue.stats().await?;
        stats.push(us(t.elapsed()));
        let t = Instant::now();
        let top = queue.top(10).await?;
        peek.push(us(t.elapsed()));
        if top.len() != 10 {
            return Err(CliError::No(format!(
                "peek 10 returned {} entries on a full queue",
                top.len()
            )));
        }
    }
    stats.sort_unstable();
    peek.sort_unstable();
    Ok((stats, peek))
}

impl ReadsPhase {
    pub(crate) fn fill(mut self, stats: &[u64], peek: &[u64]) -> Self {
        self.samples = stats.len();
        self.stats_p50_us = percentile(stats, 50.0);
        self.stats_p99_us = percentile(stats, 99.0);
        self.stats_max_us = stats.last().copied();
        self.peek_p50_us = percentile(peek, 50.0);
        self.peek_p99_us = percentile(peek, 99.0);
        self.peek_max_us = peek.last().copied();
        self
    }
}

/// `--priority-probe`: what was measured.
#[derive(Debug, Serialize)]
pub(crate) struct ProbePhase {
    #[serde(rename = "impl")]
    pub implementation: String,
    pub variant: String,
    pub phase: &'static str,
    pub mode: &'static str,
    pub shards: Option<u16>,
    /// Low-priority tasks the queue was filled with.
    pub fill: u64,
    /// Of them, still waiting when the last probe was claimed (must be > 0:
    /// else the shards ran dry and the probe measured nothing).
    pub fill_left: u64,
    pub workers: u32,
    pub concurrency: u32,
    /// Each low-priority task's handler sleeps this long (µs).
    pub work_us: u64,
    pub probes: usize,
    /// Tasks started (any shard) between a probe's push returning and its
    /// own handler starting.
    pub passed_p50: Option<u64>,
    pub passed_p99: Option<u64>,
    pub passed_max: Option<u64>,
    pub passed_mean: f64,
    /// The design's bound W·K·c (c: the worker's concurrency, the most one
    /// claim asks for).
    pub bound_wkc: u64,
    /// The bound with sticky start shards: W·K·R·c (R:
    /// [`dlm::queue::STICKY_ROUNDS`] claim rounds per start shard).
    pub bound_wkrc: u64,
    /// W·c: one claim round of every worker (the bound on one shard).
    pub bound_wc: u64,
    /// Time from the push's reply to the probe's handler start.
    pub latency_p50_us: Option<u64>,
    pub latency_p99_us: Option<u64>,
}

/// What the probe's workers share.
#[derive(Default)]
struct ProbeLog {
    /// Handler starts so far (any task).
    started: AtomicU64,
    /// Probe id → (its handler's start number, when).
    seen: Mutex<HashMap<String, (u64, Instant)>>,
}

/// The probe's settings.
pub(crate) struct Probe {
    pub probes: usize,
    pub every: Duration,
    pub workers: u32,
    pub concurrency: u32,
    pub work: Duration,
}

/// Run the probe on `queue`, already filled with low-priority tasks:
/// `workers` workers (each its own handle), and every `every` one task of
/// priority [`dlm::queue::MAX_PRIORITY`] pushed with a random shard key.
/// Returns (passed counts, latencies in µs, tasks left waiting).
pub(crate) async fn priority_probe(
    client: &dlm::Client,
    name: &str,
    p: &Probe,
) -> Result<(Vec<u64>, Vec<u64>, u64), CliError> {
    let log = Arc::new(ProbeLog::default());
    let stop = CancellationToken::new();
    let mut runs = Vec::new();
    for _ in 0..p.workers {
        let worker = client.queue(name.to_string()).worker(
            WorkerOptions::new()
                .concurrency(p.concurrency as usize)
                .lease(crate::bench_common::BENCH_LEASE)
                .grace(Duration::ZERO),
        );
        let (log, work) = (log.clone(), p.work);
        let handler = move |task: dlm::queue::Task| {
            let log = log.clone();
            async move {
                let n = log.started.fetch_add(1, Ordering::SeqCst);
                if task.id.starts_with("probe") {
                    if let Ok(mut seen) = log.seen.lock() {
                        seen.insert(task.id.clone(), (n, Instant::now()));
                    }
                } else {
                    tokio::time::sleep(work).await;
                }
                Ok::<(), Infallible>(())
            }
        };
        runs.push(tokio::spawn(worker.run(handler, stop.clone())));
    }
    let queue = client.queue(name.to_string());
    // Let the workers reach full speed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut rng = SplitMix(seed(7));
    let mut pushed: Vec<(String, u64, Instant)> = Vec::with_capacity(p.probes);
    let result: Result<(), CliError> = async {
        for j in 0..p.probes {
            tokio::time::sleep(p.every).await;
            let id = format!("probe{j}");
            let task = NewTask::new(id.clone())
                .priority(dlm::queue::MAX_PRIORITY)
                .shard_key(format!("k{:x}", rng.next()));
            queue.push(task).await?;
            pushed.push((id, log.started.load(Ordering::SeqCst), Instant::now()));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let done = log.seen.lock().map_or(0, |s| s.len());
            if done >= p.probes {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(CliError::No(format!(
                    "only {done} of {} probes were claimed within 30 s",
                    p.probes
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    .await;
    let left = queue.stats().await.map_or(0, |s| s.waiting);
    stop.cancel();
    for r in runs {
        let _ = r.await;
    }
    result?;
    let seen = log
        .seen
        .lock()
        .map(|s| s.clone())
        .map_err(|_| CliError::No("the probe log was poisoned".into()))?;
    let (mut passed, mut latency) = (Vec::new(), Vec::new());
    for (id, before, at) in pushed {
        if let Some((n, started)) = seen.get(&id) {
            passed.push(n.saturating_sub(before));
            latency.push(us(started.saturating_duration_since(at)));
        }
    }
    passed.sort_unstable();
    latency.sort_unstable();
    Ok((passed, latency, left))
}

#[cfg(test)]
mod tests {
    use super::{MasterCpu, NodeCpu, with_addr};

    #[test]
    fn node_urls_keep_the_seeds_scheme_and_password() {
        assert_eq!(
            with_addr("redis://127.0.0.1:7000/", "127.0.0.1:7003"),
            "redis://127.0.0.1:7003/"
        );
        assert_eq!(
            with_addr("rediss://u:p@h:1", "10.0.0.2:6380"),
            "rediss://u:p@10.0.0.2:6380"
        );
    }

    #[test]
    fn the_busiest_masters_share_counts_masters_only() {
        let node = |addr: &str, master, secs| NodeCpu {
            addr: addr.into(),
            master,
            secs,
        };
        let before = [
            node("a", true, 1.0),
            node("b", true, 1.0),
            node("r", false, 0.0),
        ];
        let after = [
            node("a", true, 4.0),
            node("b", true, 2.0),
            node("r", false, 9.0),
        ];
        let m = MasterCpu::between(Some(&before), Some(&after), 1_000_000);
        assert_eq!(m.redis_cpu_us_per_task, Some(4.0));
        assert_eq!(m.busiest_master_share, Some(0.75));
        let both = MasterCpu::add(&m, &m);
        assert_eq!(both.redis_cpu_us_per_task, Some(8.0));
        assert_eq!(both.busiest_master_share, Some(0.75));
    }
}
