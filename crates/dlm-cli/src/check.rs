//! `dlm check lock` and `dlm check queue`: run a workload against the given
//! deployment and judge its history with the testkit's checkers, so that an
//! operator can check their own Redis (standalone, Redlock, cluster,
//! Sentinel), for example during a failover drill.
//!
//! Lock: concurrent clients take turns on one lock and record the interval
//! in which each believed it held it (from the grant until it released it or
//! its lease ran out by its own clock); two intervals that overlap are a
//! violation. Each holder also writes its fencing token into a register that
//! refuses stale tokens: what was refused is what the fence saved.
//! Queue: every task enqueued must be handled to a successful ack; a
//! duplicate must follow a lease that did not end in an ack; with
//! `--invariants`, the state the workload left must keep the queue's
//! invariants ([`dlm::queue::Queue::check_invariants`]).
//!
//! Keys: the lock lives under `dlm:check:` (`dlm:check:lock:{NAME}` and its
//! fencing counters); the queue is `dlm:queue:{check:ID}`; both are removed at
//! the end.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Subcommand};
use dlm_testkit::history::{
    Clock, FairWait, FencedRegister, Hold, PermitHold, QueueHistory, RwHold, out_of_order_grants,
    over_capacity, overlapping_holds, peak_permits, writer_overlaps,
};
use dlm_testkit::linearizable::{
    self, LockAction, LockModel, LockOp, LockResult, Mode, OpLog, QueueAction, QueueOp,
    QueueResult, QueueSpec,
};
use serde::Serialize;

use crate::error::{CliError, EXIT_NO, EXIT_OK};
use crate::global::parse::{parse_bench_duration, parse_lease, parse_ttl};
use crate::global::target::{connect, delete_queue_keys, delete_queue_shard_keys, raw_connection};
use crate::global::{Global, Topology};
use crate::held::{HOLD_DISTRIBUTION, Held, hold_time};
use crate::output;
use crate::rng::{SplitMix, seed};

/// `dlm check ...`
#[derive(Debug, Subcommand)]
pub enum CheckCommand {
    /// Check mutual exclusion: concurrent clients on one lock (--primitive
    /// mutex, fair, rw, semaphore or election), every believed-held interval
    /// recorded and checked: no overlaps (rw: no writer overlaps anyone;
    /// semaphore: never more than --permits holders; fair: also grants in
    /// queue order). Holds are mostly a few milliseconds, so a run makes
    /// thousands of acquisitions; the distribution is printed.
    Lock(CheckLockArgs),
    /// Check the queue: every task handled to an ack, duplicates explained;
    /// with --invariants also the queue's Redis state afterwards (as `dlm
    /// queue check`).
    Queue(CheckQueueArgs),
}

/// A client of the deployment `global` names, with the check's key prefix.
async fn lock_client(global: &Global) -> Result<dlm::Client, CliError> {
    let mut builder = dlm::Client::builder()
        .key_prefix("dlm:check:")
        .timeout(global.timeout)
        .connect_timeout(global.timeout)
        .native_commands(global.native_commands)
        .quorum_wait(Duration::ZERO);
    if let Some(tls) = &global.tls {
        builder = builder.tls(tls.clone());
    }
    if let Some(t) = global.node_timeout {
        builder = builder.node_timeout(t);
    }
    let urls = global.urls();
    Ok(match &global.topology {
        Topology::Cluster => builder.connect_cluster(&urls).await?,
        Topology::Sentinel(name) => builder.connect_sentinel(name, &urls).await?,
        Topology::Plain => builder.connect_many(&urls).await?,
    })
}

/// `dlm check lock`
#[derive(Debug, Clone, Args)]
pub struct CheckLockArgs {
    /// Concurrent clients (each with its own connections).
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(2..=256))]
    pub clients: u32,
    /// How long to run.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_bench_duration)]
    pub duration: Duration,
    /// The lease of every acquisition (no watchdog: a holder that outlives
    /// it must notice by its own clock).
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_ttl)]
    pub ttl: Duration,
    /// Hold every acquisition this long instead of the dense mix of
    /// mostly sub-millisecond holds (e.g. to make sure a fault injected
    /// during the run lands inside a hold).
    #[arg(long, value_name = "D", value_parser = parse_ttl)]
    pub hold: Option<Duration>,
    /// Which primitive to check (default: the mutex).
    #[arg(long, value_enum, default_value = "mutex")]
    pub primitive: CheckPrimitive,
    /// The semaphore's capacity with --primitive semaphore (each client
    /// takes one permit).
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub permits: u32,
    /// Also judge the history with a third-party linearizability checker
    /// (todc-utils' Wing-Gong-Lowe search against dlm's lock
    /// specification). To keep each lock's history small enough for it,
    /// the clients move to a new lock name every 200 ms. Without this flag
    /// it judges only when the history turned out small enough (at most
    /// 4000 operations).
    #[arg(long)]
    pub linearizability: bool,
    /// Test only: break the lock behind the holders' backs (delete their
    /// key now and then), so that the checker must report overlaps.
    #[arg(long, hide = true)]
    pub break_lock: bool,
}

/// `dlm check queue`
#[derive(Debug, Clone, Args)]
pub struct CheckQueueArgs {
    /// Concurrent workers.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Tasks to enqueue.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub tasks: u64,
    /// The lease of every claim.
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_lease)]
    pub lease: Duration,
    /// Test only: acknowledge some tasks without handling them (pop them
    /// from the queue behind the workers' backs), so that the checker must
    /// report lost tasks.
    #[arg(long, hide = true)]
    pub break_queue: bool,
    /// After the workload, also check the queue's invariants against its
    /// Redis state (as `dlm queue check`); each violation counts.
    #[arg(long)]
    pub invariants: bool,
    /// Also judge the history with a third-party linearizability checker
    /// (todc-utils' Wing-Gong-Lowe search against dlm's at-least-once
    /// queue specification), whatever its size. Without this flag it
    /// judges when the history is small enough (at most 4000 leases).
    #[arg(long)]
    pub linearizability: bool,
    /// Run the workload on a queue of K shards (1 to 64; issue 35): the
    /// same history, checked the same way, with tasks spread over the
    /// shards (on a Redis Cluster, over its masters).
    #[arg(long, value_name = "K",
          value_parser = clap::value_parser!(u16).range(1..=i64::from(dlm::keys::MAX_SHARDS)))]
    pub shards: Option<u16>,
}

/// What the third-party checker said (the `linearizability` JSON object).
#[derive(Debug, Serialize)]
struct LinearizabilityReport {
    /// Which checker judged.
    checker: &'static str,
    /// Lock names (lock), or projections (queue: one per task, group, and
    /// the queue's fences and pause) judged.
    objects: usize,
    /// Invocations with their completions in the history.
    operations: usize,
    /// Objects whose history no order explains.
    violations: usize,
    /// Objects it could not decide (too long, out of time).
    undecided: usize,
    /// The first violations and undecided objects, explained.
    details: Vec<String>,
}

impl LinearizabilityReport {
    fn new(verdict: &linearizable::Verdict) -> Self {
        LinearizabilityReport {
            checker: verdict.checker,
            objects: verdict.objects,
            operations: verdict.operations,
            violations: verdict.violations.len(),
            undecided: verdict.undecided.len(),
            details: verdict
                .violations
                .iter()
                .chain(&verdict.undecided)
                .take(20)
                .cloned()
                .collect(),
        }
    }

    /// The text output's clause.
    fn clause(report: &Option<Self>) -> String {
        match report {
            Some(l) => format!(
                "; {}: {} of {} objects not linearizable{}",
                l.checker,
                l.violations,
                l.objects,
                if l.undecided > 0 {
                    format!(", {} undecided", l.undecided)
                } else {
                    String::new()
                }
            ),
            None => "; the history was too long for the third-party checker (--linearizability)"
                .to_string(),
        }
    }
}

/// The checkers that judged: the homegrown ones, and the third-party one
/// when it did.
fn checkers(lin: &Option<LinearizabilityReport>) -> Vec<&'static str> {
    let mut v = vec!["homegrown"];
    if let Some(l) = lin {
        v.push(l.checker);
    }
    v
}

/// How an acquisition that failed with `e` ended, for the specification:
/// a refusal took nothing, any other error may have taken the lock.
fn not_acquired(e: &dlm::Error) -> LockResult {
    match e {
        dlm::Error::Busy { .. } | dlm::Error::NoPermits { .. } | dlm::Error::NoQuorum { .. } => {
            LockResult::Refused
        }
        _ => LockResult::Unknown,
    }
}

/// The lock check's verdict (one JSON object).
#[derive(Debug, Serialize)]
struct LockReport {
    check: &'static str,
    /// The primitive checked (`mutex` unless --primitive).
    primitive: &'static str,
    operations: u64,
    acquisitions: u64,
    violations: u64,
    overlaps: u64,
    /// Fair lock: grants out of queue order (0 for the others).
    out_of_order_grants: u64,
    /// Semaphore: the most holders at one instant (null for the others).
    peak_holders: Option<u32>,
    /// Semaphore: its capacity (null for the others).
    permits: Option<u32>,
    stale_writes_accepted: u64,
    stale_writes_rejected: u64,
    errors: u64,
    /// How long holders kept what they got.
    hold_distribution: String,
    /// Which checkers judged the history.
    checkers: Vec<&'static str>,
    /// The third-party linearizability checker's verdict (null when the
    /// history was too long for it and --linearizability was not given).
    linearizability: Option<LinearizabilityReport>,
}

/// The queue check's verdict (one JSON object).
#[derive(Debug, Serialize)]
struct QueueReport {
    check: &'static str,
    operations: u64,
    tasks: u64,
    violations: u64,
    /// `--shards` (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    shards: Option<u16>,
    lost: u64,
    duplicates: u64,
    /// Acks whose reply never came (a timeout, a failover): the task was not
    /// delivered again before the workers went idle, so the ack took effect.
    acks_unknown: u64,
    errors: u64,
    /// With --invariants: the queue's invariant check after the workload
    /// (as `dlm queue check --json` prints it).
    #[serde(skip_serializing_if = "Option::is_none")]
    invariants: Option<output::InvariantsLine>,
    /// Which checkers judged the history.
    checkers: Vec<&'static str>,
    /// The third-party linearizability checker's verdict (null when the
    /// history was too long for it and --linearizability was not given).
    linearizability: Option<LinearizabilityReport>,
}

fn progress(json: bool, len: Duration, label: &str) -> Option<indicatif::ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len.as_secs().max(1));
    if let Ok(style) = indicatif::ProgressStyle::with_template("{prefix} {bar:40} {pos}/{len}") {
        bar.set_style(style);
    }
    bar.set_prefix(label.to_string());
    Some(bar)
}

/// The lock primitives `dlm check lock` can exercise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckPrimitive {
    /// The mutex (`client.lock`), on any deployment including Redlock.
    Mutex,
    /// The fair lock: also checks that grants follow the queue order.
    Fair,
    /// The read-write lock: one acquisition in four is a writer; no writer
    /// may overlap anyone.
    Rw,
    /// The semaphore (`--permits N`, one permit per holder): never more than
    /// N holders at once.
    Semaphore,
    /// Leader election: one leader at a time, terms as fences.
    Election,
}

impl CheckPrimitive {
    fn label(self) -> &'static str {
        match self {
            CheckPrimitive::Mutex => "mutex",
            CheckPrimitive::Fair => "fair",
            CheckPrimitive::Rw => "rw",
            CheckPrimitive::Semaphore => "semaphore",
            CheckPrimitive::Election => "election",
        }
    }
}

/// Whether acquisition `write` of `primitive` holds alone.
fn mode(primitive: CheckPrimitive, write: bool) -> Mode {
    match primitive {
        CheckPrimitive::Rw if !write => Mode::Shared,
        CheckPrimitive::Semaphore => Mode::Shared,
        _ => Mode::Exclusive,
    }
}

/// One acquisition of `args.primitive` named `name` by client `id`.
async fn acquire(
    client: &dlm::Client,
    args: &CheckLockArgs,
    name: &str,
    id: usize,
    write: bool,
) -> dlm::Result<Held> {
    let opts = dlm::LockOptions::new(args.ttl).wait(args.ttl * 2);
    Ok(match args.primitive {
        CheckPrimitive::Mutex => Held::Mutex(client.lock(name).acquire(&opts).await?),
        CheckPrimitive::Fair => Held::Fair(client.fair_lock(name).acquire(&opts).await?),
        CheckPrimitive::Rw if write => Held::Write(client.rwlock(name).write(&opts).await?),
        CheckPrimitive::Rw => Held::Read(client.rwlock(name).read(&opts).await?),
        CheckPrimitive::Semaphore => {
            let opts = dlm::SemaphoreOptions::new(args.ttl).wait(args.ttl * 2);
            let sem = client.semaphore(name, args.permits);
            Held::Permit(sem.acquire(1, &opts).await?)
        }
        CheckPrimitive::Election => {
            let me = format!("check-client-{id}");
            Held::Leader(client.election(name).campaign(&me, &opts).await?)
        }
    })
}

/// A hold as the checkers see it, with what kind it was.
#[derive(Debug, Clone)]
struct Record {
    hold: Hold,
    exclusive: bool,
    asked: Duration,
}

/// The checked primitive's verdicts over its records.
struct Verdict {
    /// Overlaps that mutual exclusion forbids (semaphore: holders beyond N).
    overlaps: Vec<String>,
    /// Fair lock: grants out of queue order.
    out_of_order: Vec<String>,
    /// Semaphore: the most holders at once.
    peak: Option<u32>,
}

/// How long before another a fair waiter must have asked to be sure it was
/// queued first: far longer than one round trip.
const FIFO_MARGIN: Duration = Duration::from_millis(200);

/// The checked primitive's verdicts, lock name by lock name (a check with
/// --linearizability moves to a new name every 200 ms).
fn judge(primitive: CheckPrimitive, permits: u32, records: &[Record]) -> Verdict {
    let mut by_name: std::collections::BTreeMap<&str, Vec<Record>> = Default::default();
    for r in records {
        by_name.entry(&r.hold.lock).or_default().push(r.clone());
    }
    let mut verdict = Verdict {
        overlaps: Vec::new(),
        out_of_order: Vec::new(),
        peak: None,
    };
    for records in by_name.values() {
        let one = judge_one(primitive, permits, records);
        verdict.overlaps.extend(one.overlaps);
        verdict.out_of_order.extend(one.out_of_order);
        verdict.peak = verdict.peak.max(one.peak);
    }
    verdict
}

/// The checked primitive's verdicts over the records of one lock name.
fn judge_one(primitive: CheckPrimitive, permits: u32, records: &[Record]) -> Verdict {
    let show = |a: &Hold, b: &Hold| {
        format!(
            "client {} held from {:?} to {:?} (fence {:?}) while client {} held from {:?} to {:?} (fence {:?})",
            a.holder, a.from, a.until, a.fence, b.holder, b.from, b.until, b.fence
        )
    };
    let mut verdict = Verdict {
        overlaps: Vec::new(),
        out_of_order: Vec::new(),
        peak: None,
    };
    match primitive {
        CheckPrimitive::Rw => {
            let holds: Vec<RwHold> = records
                .iter()
                .map(|r| RwHold {
                    hold: r.hold.clone(),
                    writer: r.exclusive,
                })
                .collect();
            verdict.overlaps = writer_overlaps(&holds)
                .iter()
                .map(|(a, b)| show(&a.hold, &b.hold))
                .collect();
        }
        CheckPrimitive::Semaphore => {
            let holds: Vec<PermitHold> = records
                .iter()
                .map(|r| PermitHold {
                    holder: r.hold.holder,
                    from: r.hold.from,
                    until: r.hold.until,
                    permits: 1,
                })
                .collect();
            verdict.peak = Some(peak_permits(&holds).0);
            verdict.overlaps = over_capacity(&holds, permits)
                .iter()
                .map(|h| {
                    format!(
                        "client {} started holding at {:?} while {permits} permit(s) were already held",
                        h.holder, h.from
                    )
                })
                .collect();
        }
        _ => {
            let holds: Vec<Hold> = records.iter().map(|r| r.hold.clone()).collect();
            verdict.overlaps = overlapping_holds(&holds)
                .iter()
                .map(|(a, b)| show(a, b))
                .collect();
        }
    }
    if primitive == CheckPrimitive::Fair {
        let waits: Vec<FairWait> = records
            .iter()
            .map(|r| FairWait {
                holder: r.hold.holder,
                asked: r.asked,
                granted: r.hold.from,
            })
            .collect();
        verdict.out_of_order = out_of_order_grants(&waits, FIFO_MARGIN)
            .iter()
            .map(|(a, b)| {
                format!(
                    "client {} asked at {:?} and was served at {:?}, after client {} who asked at {:?} and was served at {:?}",
                    a.holder, a.asked, a.granted, b.holder, b.asked, b.granted
                )
            })
            .collect();
    }
    verdict
}

/// The check's own keys of a primitive with fixed prefixes (its per-slot
/// fencing counters are shared with other locks and stay).
fn primitive_keys(primitive: CheckPrimitive, name: &str) -> Vec<String> {
    use dlm::keys::{DEFAULT_SEMAPHORE_PREFIX, ELECTION_PREFIX, FAIR_PREFIX, RW_PREFIX};
    let tagged = |prefix: &str| format!("{prefix}{{{name}}}");
    let with = |base: String, parts: &[&str]| {
        let mut keys: Vec<String> = parts.iter().map(|p| format!("{base}{p}")).collect();
        keys.push(base);
        keys
    };
    match primitive {
        CheckPrimitive::Mutex => Vec::new(),
        CheckPrimitive::Fair => with(tagged(FAIR_PREFIX), &[":queue", ":timeouts"]),
        CheckPrimitive::Rw => with(
            tagged(RW_PREFIX),
            &[":writer", ":readers", ":writers_waiting"],
        ),
        CheckPrimitive::Semaphore => with(tagged(DEFAULT_SEMAPHORE_PREFIX), &[":holders"]),
        CheckPrimitive::Election => with(tagged(ELECTION_PREFIX), &[":leader", ":term"]),
    }
}

/// One register that refuses stale fencing tokens per lock name (each lock
/// name has fences of its own).
#[derive(Default)]
struct Registers(Mutex<std::collections::HashMap<String, Arc<FencedRegister>>>);

impl Registers {
    fn write(&self, name: &str, fence: u64, value: &str) -> bool {
        let register = match self.0.lock() {
            Ok(mut all) => all
                .entry(name.to_string())
                .or_insert_with(|| Arc::new(FencedRegister::new(true)))
                .clone(),
            Err(_) => return false,
        };
        register.write(fence, value)
    }

    /// What the registers saw, summed.
    fn report(&self) -> dlm_testkit::history::RegisterReport {
        let mut sum = dlm_testkit::history::RegisterReport::default();
        if let Ok(all) = self.0.lock() {
            for r in all.values().map(|r| r.report()) {
                sum.accepted += r.accepted;
                sum.stale_accepted += r.stale_accepted;
                sum.stale_rejected += r.stale_rejected;
            }
        }
        sum
    }
}

/// The lock name a check uses at `t`: `base`, or with --linearizability a
/// new one every second (so that each lock's history stays small enough for
/// the third-party checker).
fn lock_name(base: &str, rotate: bool, t: Duration) -> String {
    if rotate {
        format!("{base}:{}", t.as_millis() / ROTATE_EVERY.as_millis())
    } else {
        base.to_string()
    }
}

/// How often a check with --linearizability moves to a new lock name.
const ROTATE_EVERY: Duration = Duration::from_millis(200);

/// `dlm check lock`
pub async fn check_lock(global: &Global, args: &CheckLockArgs) -> Result<u8, CliError> {
    let name = format!("check:{:08x}", SplitMix(seed(7)).next() as u32);
    // Reachable at the start, or exit 3.
    let probe = lock_client(global).await?;
    probe.lock(&name).status().await?;
    if args.primitive != CheckPrimitive::Mutex
        && global.urls().len() > 1
        && global.topology == Topology::Plain
    {
        return Err(CliError::Usage(format!(
            "--primitive {} needs one Redis deployment, not Redlock",
            args.primitive.label()
        )));
    }
    let clock = Clock::new();
    let log = Arc::new(OpLog::<LockOp>::new(clock));
    let rotate = args.linearizability;
    let records = Arc::new(Mutex::new(Vec::new()));
    let registers = Arc::new(Registers::default());
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ops = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let end = clock.now() + args.duration;
    let bar = progress(global.json, args.duration, "check lock");
    let mut tasks = Vec::new();
    for id in 0..args.clients as usize {
        let client = lock_client(global).await?;
        let (records, registers, errors, ops, name, args, log) = (
            records.clone(),
            registers.clone(),
            errors.clone(),
            ops.clone(),
            name.clone(),
            args.clone(),
            log.clone(),
        );
        let breaker = args.break_lock && id == 0;
        tasks.push(tokio::spawn(async move {
            let mut rng = SplitMix(seed(id + 100));
            let mut held = 0u64;
            while clock.now() < end {
                ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let asked = clock.now();
                let name = lock_name(&name, rotate, asked);
                let lock = client.lock(&name);
                let write = rng.next().is_multiple_of(4);
                let lease = log.next_id();
                let acquire_op = LockAction::Acquire {
                    mode: mode(args.primitive, write),
                    ttl: args.ttl,
                };
                let pending = log.begin_lock(id, &name, lease, acquire_op);
                let guard = match acquire(&client, &args, &name, id, write).await {
                    Ok(g) => {
                        let fence = g.fence();
                        log.end_lock(pending, LockResult::Granted { fence });
                        g
                    }
                    Err(e) => {
                        log.end_lock(pending, not_acquired(&e));
                        if !matches!(e, dlm::Error::Busy { .. } | dlm::Error::NoPermits { .. }) {
                            errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        continue;
                    }
                };
                let from = clock.now();
                let believed = from + guard.remaining();
                let mut work = args.hold.unwrap_or_else(|| hold_time(&mut rng, args.ttl));
                if let (true, Held::Mutex(g)) = (breaker && held.is_multiple_of(2), &guard) {
                    // Break it: release our token behind our own guard's
                    // back, and go on working as if we held it.
                    let _ = lock.release_token(g.token()).await;
                    work = args.ttl / 4;
                }
                held += 1;
                tokio::time::sleep(work).await;
                let fence = guard.fence();
                let exclusive = guard.exclusive();
                if let (Some(f), true) = (fence, exclusive) {
                    registers.write(&name, f, &id.to_string());
                }
                let until = clock.now().min(believed);
                let pending = log.begin_lock(id, &name, lease, LockAction::Release);
                let released = guard.release().await;
                log.end_lock(
                    pending,
                    match &released {
                        Ok(()) => LockResult::Done,
                        Err(e) if e.is_retryable() => LockResult::Unknown,
                        Err(_) => LockResult::Failed,
                    },
                );
                if released.is_err() {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if let Ok(mut r) = records.lock() {
                    r.push(Record {
                        hold: Hold {
                            holder: id,
                            lock: name.clone(),
                            from,
                            until,
                            fence,
                        },
                        exclusive,
                        asked,
                    });
                }
            }
        }));
    }
    let ticker = bar.clone().map(|bar| {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                bar.inc(1);
            }
        })
    });
    for t in tasks {
        let _ = t.await;
    }
    if let Some(t) = ticker {
        t.abort();
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let records = records.lock().map(|r| r.clone()).unwrap_or_default();
    let verdict = judge(args.primitive, args.permits, &records);
    let history = log.ops();
    let lin =
        (args.linearizability || history.len() <= linearizable::MAX_OPS_PER_OBJECT).then(|| {
            let model = match args.primitive {
                CheckPrimitive::Rw => LockModel::ReadWrite,
                CheckPrimitive::Semaphore => LockModel::Semaphore {
                    permits: args.permits,
                },
                _ => LockModel::Mutex,
            };
            LinearizabilityReport::new(&linearizable::check_locks(model, &history))
        });
    // The check's own keys: its locks' fencing counters (the mutex's prefix
    // is the check's own), the other primitives' keys.
    let mut own = Vec::new();
    let names: Vec<String> = if rotate {
        let windows = args.duration.as_millis() / ROTATE_EVERY.as_millis() + 2;
        (0..windows as u32)
            .map(|w| lock_name(&name, true, ROTATE_EVERY * w))
            .collect()
    } else {
        vec![name.clone()]
    };
    for name in &names {
        own.extend(primitive_keys(args.primitive, name));
        if let Ok(fence_key) = probe.lock(name).fence_key() {
            // And the marker of its counter's layout (`PREFIXfence:layout`),
            // which the check's first lock operation wrote under its own
            // prefix.
            if fence_key.ends_with(":fence") {
                own.push(format!("{fence_key}:layout"));
            }
            own.push(fence_key);
        }
    }
    own.sort();
    own.dedup();
    if !matches!(global.topology, Topology::Sentinel(_))
        && global.urls().len() == 1
        && let Ok(mut raw) = raw_connection(global.url(), global.timeout).await
    {
        for key in own {
            let _: redis::RedisResult<i64> =
                redis::cmd("DEL").arg(&key).query_async(&mut raw).await;
        }
    }
    let reg = registers.report();
    let overlaps = verdict.overlaps.len() as u64;
    let out_of_order = verdict.out_of_order.len() as u64;
    let not_linearizable = lin.as_ref().map_or(0, |l| l.violations as u64);
    let report = LockReport {
        check: "lock",
        primitive: args.primitive.label(),
        operations: ops.load(std::sync::atomic::Ordering::Relaxed),
        acquisitions: records.len() as u64,
        violations: overlaps + out_of_order + not_linearizable,
        overlaps,
        out_of_order_grants: out_of_order,
        peak_holders: verdict.peak,
        permits: (args.primitive == CheckPrimitive::Semaphore).then_some(args.permits),
        stale_writes_accepted: reg.stale_accepted,
        stale_writes_rejected: reg.stale_rejected,
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
        hold_distribution: match args.hold {
            Some(d) => format!("every hold {}", humantime::format_duration(d)),
            None => HOLD_DISTRIBUTION.to_string(),
        },
        checkers: checkers(&lin),
        linearizability: lin,
    };
    for line in report.linearizability.iter().flat_map(|l| &l.details) {
        output::error_line(&format!("linearizability: {line}"));
    }
    for line in verdict.overlaps.iter().take(20) {
        output::error_line(&format!("overlap: {line}"));
    }
    for line in verdict.out_of_order.iter().take(20) {
        output::error_line(&format!("out of order: {line}"));
    }
    output::emit(global.json, &report, || {
        format!(
            "check lock ({}): {} acquisitions by {} clients in {} (holds {}): {} overlaps{}, stale writes accepted {}, refused {}, errors {}{}",
            report.primitive,
            report.acquisitions,
            args.clients,
            humantime::format_duration(args.duration),
            report.hold_distribution,
            report.overlaps,
            match (args.primitive, report.peak_holders) {
                (CheckPrimitive::Fair, _) => format!(", {out_of_order} grants out of queue order"),
                (_, Some(peak)) => format!(", at most {peak} of {} permits held", args.permits),
                _ => String::new(),
            },
            report.stale_writes_accepted,
            report.stale_writes_rejected,
            report.errors,
            LinearizabilityReport::clause(&report.linearizability)
        )
    })?;
    Ok(if report.violations == 0 {
        EXIT_OK
    } else {
        EXIT_NO
    })
}

/// `dlm check queue`
pub async fn check_queue(global: &Global, args: &CheckQueueArgs) -> Result<u8, CliError> {
    let client = connect(global, global.url()).await?;
    let name = format!("check:{:08x}", SplitMix(seed(9)).next() as u32);
    let queue = client.queue(name.clone());
    queue.stats().await?; // reachable at the start, or exit 3
    if let Some(k) = args.shards {
        queue
            .configure(&dlm::queue::QueueSettings::default().shards(k))
            .await?;
    }
    let history = Arc::new(QueueHistory::default());
    let log = Arc::new(OpLog::<QueueOp>::new(Clock::new()));
    let ids: Vec<String> = (0..args.tasks).map(|i| format!("c{i}")).collect();
    // Each task's shard (placed by its id), for the linearizability checker.
    let shard_of = match args.shards {
        Some(k) if k > 1 => {
            let mut map = std::collections::HashMap::with_capacity(ids.len());
            for id in &ids {
                let shard = queue
                    .shard_of(&dlm::queue::NewTask::new(id.clone()))
                    .await?;
                map.insert(id.clone(), shard);
            }
            Some(map)
        }
        _ => None,
    };
    for chunk in ids.chunks(1000) {
        let invoke = log.clock().now();
        queue
            .enqueue(
                chunk.iter().map(|i| dlm::queue::NewTask::new(i.clone())),
                Duration::ZERO,
                dlm::queue::OnDuplicate::Keep,
            )
            .await?;
        for id in chunk {
            history.enqueued(id);
            let enqueue = QueueAction::Enqueue {
                task: id.clone(),
                deps: Vec::new(),
                group: None,
            };
            log.queue(0, enqueue, invoke, QueueResult::Done);
        }
    }
    if args.break_queue {
        // Tasks taken out behind the workers' backs: lost, as far as the
        // history can tell.
        let _ = queue.pop(((args.tasks / 10).max(1)) as usize).await?;
    }
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ops = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 1..=args.workers as usize {
        let (queue, history, errors, ops, log) = (
            queue.clone(),
            history.clone(),
            errors.clone(),
            ops.clone(),
            log.clone(),
        );
        let lease = args.lease;
        workers.push(tokio::spawn(async move {
            let mut idle = 0;
            let mut last_work = std::time::Instant::now();
            // Stop once idle and either drained (every ack of unknown outcome
            // then took effect) or past a lease since the last task (a task
            // whose ack did not land was delivered again by then).
            loop {
                if idle >= 10
                    && (last_work.elapsed() > lease + Duration::from_millis(500)
                        || queue.stats().await.is_ok_and(|s| s.is_drained()))
                {
                    break;
                }
                ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let claim = QueueAction::Claim { lease };
                let invoke = log.clock().now();
                let leases = match queue.claim(16, lease).await {
                    Ok(l) if l.is_empty() => {
                        log.queue(worker, claim, invoke, QueueResult::Empty);
                        l
                    }
                    Ok(l) => {
                        for t in l.iter().map(dlm::queue::Lease::task) {
                            let leased = QueueResult::Leased {
                                task: t.id.clone(),
                                fence: t.fence.get(),
                            };
                            log.queue(worker, claim.clone(), invoke, leased);
                        }
                        l
                    }
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if leases.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                idle = 0;
                last_work = std::time::Instant::now();
                for l in leases {
                    let (id, fence) = (l.task().id.clone(), l.task().fence.get());
                    history.handled(&id, fence);
                    history.ack_started(&id, fence);
                    let ack = QueueAction::Ack {
                        task: id.clone(),
                        fence,
                    };
                    let pending = log.begin_queue(worker, ack);
                    match l.ack().await {
                        // No answer: it may have been acked.
                        Err(e) if e.is_retryable() => log.end_queue(pending, QueueResult::Unknown),
                        r => {
                            let result = if r.is_ok() {
                                QueueResult::Done
                            } else {
                                QueueResult::Refused
                            };
                            log.end_queue(pending, result);
                            history.acked(&id, fence, r.is_ok());
                        }
                    }
                }
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
    let invoke = log.clock().now();
    if queue.stats().await.is_ok_and(|s| s.is_drained()) {
        log.queue(0, QueueAction::Drained, invoke, QueueResult::Done);
    }
    let lin_history = log.ops();
    let leases = lin_history
        .iter()
        .filter(|op| matches!(op.result, QueueResult::Leased { .. }))
        .count();
    let lin = (args.linearizability || leases <= linearizable::MAX_OPS_PER_OBJECT).then(|| {
        // A sharded queue is K queues, each with its own fences: judged
        // shard by shard.
        LinearizabilityReport::new(&match &shard_of {
            Some(map) => {
                linearizable::check_sharded_queue(&QueueSpec::default(), &lin_history, |t| {
                    map.get(t).copied().unwrap_or(0)
                })
            }
            None => linearizable::check_queue(&QueueSpec::default(), &lin_history),
        })
    });
    // The state the workload left, before the dead are purged and the keys go.
    let invariants = if args.invariants {
        Some(output::InvariantsLine::new(
            &name,
            &queue.check_invariants().await?,
        ))
    } else {
        None
    };
    let _ = queue.purge_dead().await;
    // (Behind Sentinel the URLs are the Sentinels': the keys stay.)
    if !matches!(global.topology, Topology::Sentinel(_))
        && let Ok(mut raw) = raw_connection(global.url(), global.timeout).await
    {
        if let Ok(layout) = queue.shards().await {
            delete_queue_shard_keys(&mut raw, &layout).await;
        }
        delete_queue_keys(&mut raw, &name).await;
    }
    let verdict = history.check();
    let broken = invariants.as_ref().map_or(0, |i| i.violations.len());
    let violations = verdict.lost.len()
        + verdict.unexplained_duplicates.len()
        + verdict.acked_twice.len()
        + broken
        + lin.as_ref().map_or(0, |l| l.violations);
    for line in lin.iter().flat_map(|l| &l.details) {
        output::error_line(&format!("linearizability: {line}"));
    }
    for v in invariants.iter().flat_map(|i| &i.violations).take(20) {
        output::error_line(&format!(
            "invariant {} {:?}: {}",
            v.invariant, v.id, v.detail
        ));
    }
    for id in verdict.lost.iter().take(20) {
        output::error_line(&format!("lost: task {id} was enqueued and never acked"));
    }
    for id in verdict.unexplained_duplicates.iter().take(20) {
        output::error_line(&format!(
            "duplicate: task {id} was delivered again after an ack"
        ));
    }
    let report = QueueReport {
        check: "queue",
        operations: ops.load(std::sync::atomic::Ordering::Relaxed),
        tasks: args.tasks,
        violations: violations as u64,
        shards: args.shards,
        lost: verdict.lost.len() as u64,
        duplicates: verdict.duplicates as u64,
        acks_unknown: verdict.ack_unknown.len() as u64,
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
        invariants,
        checkers: checkers(&lin),
        linearizability: lin,
    };
    output::emit(global.json, &report, || {
        format!(
            "check queue: {} tasks by {} workers{}: {} lost, {} duplicates, {}{} violations, errors {}{}",
            report.tasks,
            args.workers,
            args.shards.map_or(String::new(), |k| format!(
                " on {k} shard{}",
                if k == 1 { "" } else { "s" }
            )),
            report.lost,
            report.duplicates,
            match &report.invariants {
                Some(i) => format!("{} invariants broken, ", i.violations.len()),
                None => String::new(),
            },
            report.violations,
            report.errors,
            LinearizabilityReport::clause(&report.linearizability)
        )
    })?;
    Ok(if report.violations == 0 {
        EXIT_OK
    } else {
        EXIT_NO
    })
}
