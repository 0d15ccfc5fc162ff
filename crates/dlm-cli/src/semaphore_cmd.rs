//! `dlm semaphore run | status | set`: a counting semaphore with leased
//! permits from the shell.
//!
//! `run` takes `--take` permits of at most `--permits` held at once across
//! every process, runs CMD with `DLM_PERMITS` (how many it holds),
//! `DLM_FENCE` and `DLM_SEMAPHORE` in its environment, renews the lease while
//! CMD runs and gives the permits back when it exits; exit codes and signal
//! forwarding are those of `lock run` (1 not acquired before `--wait`, 4
//! lost while running, CMD's own code otherwise).

use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{parse_name, parse_ttl, parse_wait};
use crate::global::target::connect;
use crate::global::{Global, Topology};
use crate::output;
use crate::signals::Signals;
use crate::supervise::run_child;

/// The most permits (`dlm::MAX_PERMITS`) as clap's range bound.
const MAX: i64 = dlm::MAX_PERMITS as i64;

/// `dlm semaphore ...`
#[derive(Debug, Subcommand)]
pub enum SemaphoreCommand {
    /// Run a command while holding permits of a semaphore.
    ///
    /// At most --permits permits are held at once across all processes (the
    /// capacity stored in Redis counts: the first user stores it, `semaphore
    /// set` changes it). The permits' lease is renewed every TTL/3 while CMD
    /// runs and they are given back when it exits; dlm exits with CMD's exit
    /// code (128+N if a signal N killed it), 1 when the permits could not be
    /// had before --wait, 4 when they were lost while CMD ran (CMD got
    /// SIGTERM, SIGKILL 10 s later). CMD gets DLM_PERMITS, DLM_FENCE and
    /// DLM_SEMAPHORE; SIGINT, SIGTERM and SIGHUP are forwarded to it.
    Run(SemaphoreRunArgs),
    /// Show the capacity, free permits and holders (exit 0).
    Status(SemaphoreName),
    /// Change the stored capacity now: current holders keep their permits,
    /// new ones wait until theirs fit; waiters are woken.
    Set(SemaphoreSetArgs),
}

/// A semaphore's name.
#[derive(Debug, Clone, Args)]
pub struct SemaphoreName {
    /// The semaphore's name (1 to 1024 bytes); its keys are dlm:sem:{NAME}*.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
}

/// `dlm semaphore run`
#[derive(Debug, Clone, Args)]
pub struct SemaphoreRunArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: SemaphoreName,
    /// The capacity: at most N permits held at once (1 to 10000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX))]
    pub permits: u32,
    /// Lease length (10ms to 7d), renewed every TTL/3 while CMD runs; how
    /// long the permits outlive a crashed dlm.
    #[arg(long, value_name = "D", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Keep trying to acquire for up to this long (default: try once).
    #[arg(long, value_name = "D", default_value = "0s", value_parser = parse_wait, allow_hyphen_values = true)]
    pub wait: Duration,
    /// How many permits to take (1 to --permits).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX))]
    pub take: u32,
    /// The command and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `dlm semaphore set`
#[derive(Debug, Clone, Args)]
pub struct SemaphoreSetArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: SemaphoreName,
    /// The new capacity (1 to 10000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX))]
    pub permits: u32,
}

/// A client on the one deployment semaphores live on.
async fn client(global: &Global, name: &str) -> Result<dlm::Client, CliError> {
    dlm::keys::semaphore_key(name)?;
    if global.redis.len() > 1 && global.topology == Topology::Plain {
        return Err(CliError::Usage(
            "semaphores live on one Redis deployment: give a single --redis URL, not several"
                .into(),
        ));
    }
    connect(global, global.url()).await
}

/// `dlm semaphore run`.
pub async fn run(global: &Global, args: &SemaphoreRunArgs) -> Result<u8, CliError> {
    let name = args.target.name.as_str();
    if args.take > args.permits {
        return Err(CliError::Usage(format!(
            "--take {} is more than --permits {}",
            args.take, args.permits
        )));
    }
    let mut signals = Signals::install()?;
    let client = client(global, name).await?;
    let sem = client.semaphore(name, args.permits);
    let opts = dlm::SemaphoreOptions::new(args.ttl)
        .wait(args.wait)
        .watchdog(true);
    let guard = tokio::select! {
        r = sem.acquire(args.take, &opts) => r?,
        // Not holding yet (an attempt in flight is given back in the
        // background, or by its TTL): exit as if the signal had killed us.
        sig = signals.recv() => return Ok(u8::try_from(128 + sig).unwrap_or(255)),
    };
    tracing::debug!(name, fence = %guard.fence(), "permits acquired; starting the command");
    let env = [
        ("DLM_SEMAPHORE", name.to_string()),
        ("DLM_PERMITS", guard.permits().to_string()),
        ("DLM_FENCE", guard.fence().to_string()),
    ];
    let lost = guard.lost_signal();
    let ended = run_child(&args.command, &env, lost.lost(), &mut signals, name).await;
    let ended = match ended {
        Ok(e) => e,
        Err(e) => {
            let _ = guard.release().await;
            return Err(e);
        }
    };
    let released = guard.release().await;
    if ended.lost {
        return Err(CliError::PermitsLost { name: name.into() });
    }
    match released {
        Ok(()) => Ok(ended.code),
        Err(e) if e.is_lock_lost() => Err(CliError::PermitsLost { name: name.into() }),
        Err(e) => {
            tracing::warn!(name, error = %e, "release failed; the TTL brings the permits back");
            Ok(ended.code)
        }
    }
}

#[derive(Serialize)]
struct Status<'a> {
    name: &'a str,
    permits: Option<u32>,
    available: u32,
    holders: u32,
    in_use: u32,
    fence: Option<u64>,
}

/// `dlm semaphore status`: exit 0 whether used or not.
pub async fn status(global: &Global, args: &SemaphoreName) -> Result<u8, CliError> {
    let client = client(global, &args.name).await?;
    // The capacity given here is never stored by a status call.
    let st = client.semaphore(args.name.clone(), 1).status().await?;
    let out = Status {
        name: &args.name,
        permits: st.permits,
        available: st.available,
        holders: st.holders,
        in_use: st.in_use,
        fence: st.fence.map(dlm::Fence::get),
    };
    output::emit(global.json, &out, || match out.permits {
        Some(p) => format!(
            "{}: {} of {p} permits free, {} in use by {} holder(s)",
            out.name, out.available, out.in_use, out.holders
        ),
        None => format!("{}: never used (no capacity stored)", out.name),
    })?;
    Ok(EXIT_OK)
}

/// `dlm semaphore set`: prints the previous capacity.
pub async fn set(global: &Global, args: &SemaphoreSetArgs) -> Result<u8, CliError> {
    let client = client(global, &args.target.name).await?;
    let sem = client.semaphore(args.target.name.clone(), args.permits);
    let previous = sem.set_permits(args.permits).await?;
    #[derive(Serialize)]
    struct Set<'a> {
        name: &'a str,
        permits: u32,
        previous: Option<u32>,
    }
    let out = Set {
        name: &args.target.name,
        permits: args.permits,
        previous,
    };
    output::emit(global.json, &out, || {
        format!(
            "{}: {} permits (was {})",
            out.name,
            out.permits,
            out.previous.map_or("unset".into(), |p| p.to_string())
        )
    })?;
    Ok(EXIT_OK)
}
