//! `dlm soak`: the nemesis soak (issue 32). Every lock kind and the queue at
//! once, from the library (by URL and on a connection), the CLI and, when
//! importable, the Python package, against throwaway servers on loopback,
//! while faults are injected on a seeded random schedule; every few minutes
//! and at the end the homegrown checkers and the linearizability checker
//! judge the histories recorded so far.
//!
//! Modules: [`record`] (histories), [`locks`] and [`cli_locks`] (lock
//! clients), [`queues`] (queue workloads), [`procs`] (subprocesses),
//! [`faults`] (the nemesis), [`judge`] (the checkers), [`report`].

mod cli_locks;
mod deploy;
mod faults;
mod judge;
mod lin;
mod locks;
mod procs;
mod python;
mod queues;
mod record;
mod report;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use dlm_testkit::{FaultProxy, RedisServer};

use crate::error::{CliError, EXIT_NO, EXIT_OK};
use crate::global::Global;
use crate::global::parse::parse_bench_duration;
use crate::output;
use crate::rng::{SplitMix, seed as time_seed};
pub use faults::Break;
use faults::{Event, FaultLog, Scope, Targets};
use judge::Verdicts;
use record::{Kind, Recorder};

/// `dlm soak`
#[derive(Debug, Clone, Args)]
pub struct SoakArgs {
    /// How long to run the workloads (the final check and clean-up come
    /// after), e.g. 2m, 65m.
    #[arg(long, value_name = "D", default_value = "2m", value_parser = parse_bench_duration)]
    pub duration: Duration,
    /// Stop after this many operations in all (whichever comes first).
    #[arg(long, value_name = "N", default_value_t = 50_000_000)]
    pub max_ops: u64,
    /// The seed of the fault schedule and the workloads (default: from the
    /// clock; printed either way).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Judge the histories recorded so far this often (and at the end).
    #[arg(long, value_name = "D", default_value = "2m", value_parser = parse_bench_duration)]
    pub check_every: Duration,
    /// Lock names and queues rotate this often, bounding each history a
    /// checker judges.
    #[arg(long, value_name = "D", default_value = "15s", value_parser = parse_bench_duration)]
    pub epoch: Duration,
    /// The mean pause between two faults.
    #[arg(long, value_name = "D", default_value = "3s", value_parser = parse_bench_duration)]
    pub fault_every: Duration,
    /// Break an assumption on purpose (repeatable): the soak must catch it
    /// and name it; violations it explains are reported as "expected" and
    /// do not fail the run.
    #[arg(long = "break", value_enum, value_name = "ASSUMPTION")]
    pub breaks: Vec<Break>,
    /// Only the standalone server: no Redis Cluster and no Sentinel setup
    /// beside it (with --break they are left out anyway).
    #[arg(long)]
    pub standalone_only: bool,
}

/// The lease of the library's acquisitions.
const LIB: locks::Lease = locks::Lease {
    ttl: Duration::from_secs(2),
    wait: Duration::from_millis(500),
    tag: "",
    replicas: None,
    extends: true,
};
/// The CLI's lease: its watchdog renews every TTL/3, past any SIGSTOP the
/// nemesis gives (at most 500 ms).
const CLI_TTL: Duration = Duration::from_secs(3);
/// The paused holder's lease (`--break paused-holder`).
const PAUSED_TTL: Duration = Duration::from_millis(600);
/// How long after an epoch ends its last lease has surely ended.
const SLACK: Duration = Duration::from_secs(12);

/// Start everything, run, judge, report; clean up whatever happens.
pub async fn soak(global: &Global, args: &SoakArgs) -> Result<u8, CliError> {
    if args.epoch < Duration::from_secs(2) || args.check_every < args.epoch {
        return Err(CliError::Usage(
            "--epoch must be at least 2s and --check-every at least --epoch".into(),
        ));
    }
    let seed = args.seed.unwrap_or_else(|| time_seed(32));
    let exe = std::env::current_exe().map_err(CliError::io("finding the dlm binary"))?;
    let dir = std::env::temp_dir().join(format!("dlm-soak-{}-{seed:x}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(CliError::io("creating the soak's directory"))?;
    let result = run(global, args, seed, exe, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(
    global: &Global,
    args: &SoakArgs,
    seed: u64,
    exe: PathBuf,
    dir: &std::path::Path,
) -> Result<u8, CliError> {
    let no_persistence = args.breaks.contains(&Break::NoPersistence);
    let paused_holder = args.breaks.contains(&Break::PausedHolder);
    output::error_line(&format!(
        "soak: seed {seed}, {} of workloads, faults every ~{}{}",
        humantime::format_duration(args.duration),
        humantime::format_duration(args.fault_every),
        if args.breaks.is_empty() {
            String::new()
        } else {
            format!(
                ", breaking: {}",
                args.breaks
                    .iter()
                    .map(|b| b.label())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
    let mut notes = Vec::new();
    let offset = if procs::faketime_installed() {
        let f = dir.join("faketime-offset");
        std::fs::write(&f, "+0").map_err(CliError::io("writing the faketime offset"))?;
        Some(f)
    } else {
        notes.push(format!(
            "no clock jumps: {} is missing (apt-get install -y faketime)",
            procs::FAKETIME
        ));
        None
    };
    let procs = Arc::new(procs::Procs::new(exe, offset));
    let server = RedisServer::builder().aof(!no_persistence).start()?;
    let proxy = Arc::new(FaultProxy::in_front_of(&server, seed)?);
    let server = Arc::new(Mutex::new(server));
    let url = proxy.url();
    let rec = Arc::new(Recorder::new(args.epoch, 3, args.max_ops));
    let fault_log = Arc::new(FaultLog::default());
    let mut topologies = vec![format!(
        "standalone redis-server ({}) behind a fault proxy",
        if no_persistence {
            "NO persistence: --break no-persistence"
        } else {
            "AOF, appendfsync always"
        }
    )];
    let mut clients = vec![
        "library by URL".to_string(),
        "library on a connection (Client::builder().connection)".to_string(),
        "CLI subprocesses (lock run, lock run --fair, rwlock run, semaphore run, elect run, queue work)".to_string(),
    ];
    let python = python::unavailable();
    match &python {
        Some(why) => notes.push(format!("Python clients skipped: {why}")),
        None => clients.push("Python (the dlm package, every lock kind)".into()),
    }
    let extra = if args.standalone_only || !args.breaks.is_empty() {
        notes.push("no Cluster and no Sentinel in this run (--standalone-only or --break)".into());
        deploy::Extra::default()
    } else {
        deploy::start(&mut notes).await
    };
    if extra.cluster.is_some() {
        topologies.push(
            "Redis Cluster (3 masters, 3 replicas), CLUSTER FAILOVER of a lock's slot".into(),
        );
    }
    if extra.sentinels.is_some() {
        topologies.push("Sentinel (master, replica, 3 sentinels), master SIGKILLed and replaced; grants wait for the replica (LockOptions::replicas(1))".into());
    }

    let mut tasks = tokio::task::JoinSet::new();
    let mut rng = SplitMix(seed);
    let mut client_id = 0usize;
    let mut next_id = || {
        client_id += 1;
        client_id
    };
    let lib_url = |u: String| async move {
        dlm::Client::builder()
            .timeout(Duration::from_secs(1))
            .connect(&u)
            .await
    };
    let on_conn = |u: String| async move {
        let c = redis::Client::open(u.as_str()).map_err(dlm::Error::from)?;
        let m = redis::aio::ConnectionManager::new(c)
            .await
            .map_err(dlm::Error::from)?;
        dlm::Client::builder()
            .timeout(Duration::from_secs(1))
            .connection(m)
    };
    for kind in Kind::ALL {
        for label in ["library-url", "library-url", "library-connection"] {
            let client = if label == "library-url" {
                lib_url(url.clone()).await?
            } else {
                on_conn(url.clone()).await?
            };
            let (r, id, s) = (rec.clone(), next_id(), rng.next());
            tasks.spawn(locks::run(r, client, kind, id, label, s, LIB));
        }
        let cli = cli_locks::CliLock {
            url: url.clone(),
            ttl: CLI_TTL,
            wait: Duration::from_millis(500),
            nap: Duration::from_millis(20),
        };
        let (r, p, id, s) = (rec.clone(), procs.clone(), next_id(), rng.next());
        tasks.spawn(cli_locks::run(r, p, cli, kind, id, s));
    }
    for kind in Kind::ALL {
        let mut on: Vec<(dlm::Client, &'static str, locks::Lease)> = Vec::new();
        if let Some(c) = &extra.cluster {
            let client = deploy::cluster_client(c).await?;
            on.push((client, "library-cluster", deploy::CLUSTER));
        }
        if let Some(sn) = &extra.sentinels {
            let client = deploy::sentinel_client(sn).await?;
            on.push((client, "library-sentinel", deploy::SENTINEL));
        }
        for (client, label, lease) in on {
            let (r, id, s) = (rec.clone(), next_id(), rng.next());
            tasks.spawn(locks::run(r, client, kind, id, label, s, lease));
        }
    }
    let has_extra = extra.cluster.is_some() || extra.sentinels.is_some();
    let failovers = has_extra.then(|| {
        tokio::spawn(deploy::failovers(
            rec.clone(),
            fault_log.clone(),
            extra,
            args.fault_every * 5,
            rng.next(),
        ))
    });
    if python.is_none() {
        for kind in Kind::ALL {
            let (r, p, id) = (rec.clone(), procs.clone(), next_id());
            tasks.spawn(python::run(r, p, url.clone(), kind, id, LIB.ttl));
        }
    }
    let queue_clients = vec![
        (lib_url(url.clone()).await?, "library-url"),
        (on_conn(url.clone()).await?, "library-connection"),
    ];
    tasks.spawn(queues::groups_and_deps(
        rec.clone(),
        queue_clients,
        rng.next(),
    ));
    tasks.spawn(queues::priorities_and_schedules(
        rec.clone(),
        procs.clone(),
        lib_url(url.clone()).await?,
        url.clone(),
        dir.to_path_buf(),
        2,
        rng.next(),
    ));
    if paused_holder {
        let (r, p, f, id) = (rec.clone(), procs.clone(), fault_log.clone(), next_id());
        tasks.spawn(paused_holders(r, p, f, url.clone(), id));
    }
    let nemesis = tokio::spawn(faults::nemesis(
        rec.clone(),
        fault_log.clone(),
        Targets {
            server: server.clone(),
            proxy: proxy.clone(),
            procs: procs.clone(),
            no_persistence,
        },
        args.fault_every,
        rng.next(),
    ));

    // The main loop: progress, periodic checks, the end.
    let mut verdicts = Verdicts::default();
    let terminal = std::io::stderr().is_terminal() && !global.json;
    let start = tokio::time::Instant::now();
    let mut last_check = start;
    let mut last_line = start;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    while !rec.stopping() {
        tokio::select! {
            _ = &mut ctrl_c => {
                output::error_line("soak: interrupted; stopping, checking what was recorded and cleaning up");
                break;
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let elapsed = start.elapsed();
        if elapsed >= args.duration {
            break;
        }
        if last_check.elapsed() >= args.check_every {
            last_check = tokio::time::Instant::now();
            check(&rec, &fault_log, &mut verdicts, false).await;
        }
        let left = args.duration - elapsed;
        if terminal {
            eprint!(
                "\r{}\x1b[K",
                report::progress(&rec, &fault_log, &verdicts, left)
            );
            let _ = std::io::stderr().flush();
        } else if last_line.elapsed() >= Duration::from_secs(30) {
            last_line = tokio::time::Instant::now();
            output::error_line(&report::progress(&rec, &fault_log, &verdicts, left));
        }
    }
    if terminal {
        eprintln!();
    }
    rec.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = nemesis.await;
    if let Some(f) = failovers {
        let _ = f.await;
    }
    proxy.clear();
    // The workloads end their epochs (a queue drains for up to 30 s).
    let ended = tokio::time::timeout(Duration::from_secs(90), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if ended.is_err() {
        notes.push("some workloads did not stop within 90 s and were aborted".into());
        tasks.abort_all();
    }
    procs.kill_all();
    check(&rec, &fault_log, &mut verdicts, true).await;
    let summary = report::summary(
        &rec,
        &fault_log,
        &verdicts,
        seed,
        &args.breaks,
        topologies,
        clients,
        notes,
    );
    output::emit(global.json, &summary, || summary.text())?;
    drop(proxy);
    drop(server);
    Ok(if summary.ok { EXIT_OK } else { EXIT_NO })
}

/// One round of checks: the closed epochs (all of them when `last`).
async fn check(rec: &Arc<Recorder>, faults: &Arc<FaultLog>, v: &mut Verdicts, last: bool) {
    let closed = if last {
        None
    } else {
        let now = rec.clock.now();
        match rec.epoch_at(now.saturating_sub(SLACK)).checked_sub(1) {
            Some(e) => Some(e),
            None => return,
        }
    };
    let logs = rec.take_locks(closed);
    let epochs = rec.take_queues();
    let (rec2, faults2) = (rec.clone(), faults.clone());
    let mut taken = std::mem::take(v);
    let judged = tokio::task::spawn_blocking(move || {
        judge::locks(&rec2, &faults2, logs, SLACK, &mut taken);
        judge::queues(&faults2, epochs, SLACK, &mut taken);
        taken.checks += 1;
        taken
    })
    .await;
    if let Ok(j) = judged {
        *v = j;
    }
}

/// `--break paused-holder`: every few seconds a `dlm lock run` holder of a
/// mutex the library's clients also use is SIGSTOPped past its 600 ms TTL
/// while its command goes on (and is not fenced).
async fn paused_holders(
    rec: Arc<Recorder>,
    procs: Arc<procs::Procs>,
    log: Arc<FaultLog>,
    url: String,
    holder: usize,
) {
    let process = rec.process();
    while !rec.stopping() {
        faults::sleep_unless_stopping(&rec, Duration::from_secs(4)).await;
        if rec.stopping() {
            break;
        }
        let epoch = rec.epoch();
        let name = rec.lock_name("", Kind::Mutex, epoch, 0);
        let args: Vec<String> = [
            "--redis",
            &url,
            "--timeout",
            "1s",
            "lock",
            "run",
            &name,
            "--ttl",
            "600ms",
            "--wait",
            "3s",
            "--",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(cli_locks::script_for(Duration::from_millis(2500)))
        .collect();
        let invoke = rec.clock.now();
        let stopped = Arc::new(Mutex::new(None));
        let p2 = procs.clone();
        let s2 = stopped.clone();
        let rec2 = rec.clone();
        let seen = cli_locks::run_one(
            &rec,
            &procs,
            &args,
            "paused holder",
            Duration::from_secs(15),
            move |pid| {
                if let Some(pid) = pid
                    && p2.signal(pid, libc::SIGSTOP)
                {
                    if let Ok(mut s) = s2.lock() {
                        *s = Some(rec2.clock.now());
                    }
                    let p3 = p2.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(PAUSED_TTL * 3).await;
                        p3.signal(pid, libc::SIGCONT);
                    });
                }
            },
        )
        .await;
        rec.count(Kind::Mutex.label(), "cli");
        cli_locks::record(
            &rec,
            Kind::Mutex,
            epoch,
            &name,
            process,
            lin::Mode::Exclusive,
            PAUSED_TTL,
            invoke,
            &seen,
            holder,
        );
        let at = stopped.lock().ok().and_then(|s| *s);
        if let Some(at) = at {
            log.push(Event {
                kind: "holder-paused-past-its-ttl",
                at,
                until: seen.exited,
                breaks: Some(Break::PausedHolder),
                scope: Scope::Locks(Kind::Mutex),
            });
        }
    }
}
