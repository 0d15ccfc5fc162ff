//! `dlm demo lock`: why a lock matters, on a private redis-server.
//!
//! 1. 32 tasks x 50 read-modify-write increments of a Redis counter (GET,
//!    a short pause, SET) without a lock: updates get lost.
//! 2. The same around `client.lock("demo:counter")`: exactly 1600.
//! 3. 4 OS processes x 5 runs of `dlm lock run demo:flock -- dlm demo
//!    increment-key ...` (this binary): exactly 20.
//!
//! Exit 0 when the locked parts are exact (the unlocked part is expected to
//! lose updates), else 1.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde::Serialize;

use crate::error::{CliError, EXIT_OK, redis_err};
use crate::global::Global;
use crate::global::target::{RawConnection, Target, connect, raw_connection};
use crate::output::{self, cell_us, human, us};
use crate::stats::{Handoff, percentile};

const TASKS: usize = 32;
const INCREMENTS: usize = 50;
const PROCESSES: usize = 4;
const RUNS_PER_PROCESS: usize = 5;
const UNLOCKED_KEY: &str = "demo:counter:unlocked";
const LOCKED_KEY: &str = "demo:counter:locked";
const LOCK_NAME: &str = "demo:counter";
const FLOCK_NAME: &str = "demo:flock";
const FLOCK_KEY: &str = "demo:flock:counter";

/// The outcome of one part, one JSON line each.
#[derive(Debug, Serialize)]
struct Part {
    part: &'static str,
    locked: bool,
    expected: u64,
    got: u64,
    lost_updates: u64,
    wall_ms: u64,
    handoff_p50_us: Option<u64>,
    handoff_p99_us: Option<u64>,
    errors: u64,
    #[serde(skip)]
    wall: Duration,
}

impl Part {
    fn new(
        part: &'static str,
        locked: bool,
        expected: u64,
        got: u64,
        wall: Duration,
        handoffs: &mut [u64],
        errors: u64,
    ) -> Self {
        handoffs.sort_unstable();
        Part {
            part,
            locked,
            expected,
            got,
            lost_updates: expected.saturating_sub(got),
            wall_ms: output::ms(wall),
            handoff_p50_us: percentile(handoffs, 50.0),
            handoff_p99_us: percentile(handoffs, 99.0),
            errors,
            wall,
        }
    }

    fn exact(&self) -> bool {
        self.got == self.expected && self.errors == 0
    }
}

/// One read-modify-write increment: GET, pause, SET.
async fn increment(conn: &mut RawConnection, key: &str, pause: Duration) -> Result<(), CliError> {
    let v: Option<u64> = conn.get(key).await.map_err(redis_err)?;
    tokio::time::sleep(pause).await;
    let () = conn.set(key, v.unwrap_or(0) + 1).await.map_err(redis_err)?;
    Ok(())
}

async fn read(conn: &mut RawConnection, key: &str) -> Result<u64, CliError> {
    let v: Option<u64> = conn.get(key).await.map_err(redis_err)?;
    Ok(v.unwrap_or(0))
}

/// Part 1: no lock.
async fn unlocked(conn: &RawConnection) -> Result<Part, CliError> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                let mut errors = 0u64;
                for _ in 0..INCREMENTS {
                    if increment(&mut conn, UNLOCKED_KEY, Duration::from_micros(100))
                        .await
                        .is_err()
                    {
                        errors += 1;
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = 0;
    for t in tasks {
        errors += t.await.unwrap_or(INCREMENTS as u64);
    }
    let wall = started.elapsed();
    let got = read(&mut conn.clone(), UNLOCKED_KEY).await?;
    Ok(Part::new(
        "tasks without a lock",
        false,
        (TASKS * INCREMENTS) as u64,
        got,
        wall,
        &mut [],
        errors,
    ))
}

/// Part 2: the same under `client.lock("demo:counter")`.
async fn locked(client: &dlm::Client, conn: &RawConnection) -> Result<Part, CliError> {
    let handoff = Arc::new(Handoff::default());
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|id| {
            let mut conn = conn.clone();
            let lock = client.lock(LOCK_NAME);
            let handoff = handoff.clone();
            tokio::spawn(async move {
                let opts =
                    dlm::LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(10));
                let mut errors = 0u64;
                let mut handoffs = Vec::new();
                for _ in 0..INCREMENTS {
                    let guard = match lock.acquire(&opts).await {
                        Ok(g) => g,
                        Err(e) => {
                            tracing::warn!(error = %e, "demo: acquire failed");
                            errors += 1;
                            continue;
                        }
                    };
                    if let Some(h) = handoff.acquired(id) {
                        handoffs.push(us(h));
                    }
                    if increment(&mut conn, LOCKED_KEY, Duration::from_micros(100))
                        .await
                        .is_err()
                    {
                        errors += 1;
                    }
                    match guard.release().await {
                        Ok(_) => handoff.released(id),
                        Err(e) => {
                            tracing::warn!(error = %e, "demo: release failed");
                            errors += 1;
                        }
                    }
                }
                (errors, handoffs)
            })
        })
        .collect();
    let mut errors = 0;
    let mut handoffs = Vec::new();
    for t in tasks {
        match t.await {
            Ok((e, h)) => {
                errors += e;
                handoffs.extend(h);
            }
            Err(_) => errors += INCREMENTS as u64,
        }
    }
    let wall = started.elapsed();
    let got = read(&mut conn.clone(), LOCKED_KEY).await?;
    Ok(Part::new(
        "tasks with dlm lock",
        true,
        (TASKS * INCREMENTS) as u64,
        got,
        wall,
        &mut handoffs,
        errors,
    ))
}

/// Part 3: processes running `dlm lock run ... -- dlm demo increment-key`.
async fn processes(global: &Global, url: &str, conn: &RawConnection) -> Result<Part, CliError> {
    let exe = std::env::current_exe().map_err(CliError::io("finding the dlm binary"))?;
    let timeout = humantime::format_duration(global.timeout).to_string();
    let started = Instant::now();
    let runners: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let exe = exe.clone();
            let url = url.to_string();
            let timeout = timeout.clone();
            tokio::spawn(async move {
                let mut errors = 0u64;
                for _ in 0..RUNS_PER_PROCESS {
                    // The URL goes in the environment rather than on command
                    // lines that `ps` shows (it may carry a password); the
                    // command of `lock run` inherits it.
                    let status = tokio::process::Command::new(&exe)
                        .args(["--timeout", &timeout])
                        .args([
                            "lock", "run", FLOCK_NAME, "--ttl", "2s", "--wait", "30s", "--",
                        ])
                        .arg(&exe)
                        .args(["--timeout", &timeout])
                        .args(["demo", "increment-key", FLOCK_KEY])
                        .env("DLM_REDIS_URL", &url)
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .kill_on_drop(true)
                        .status()
                        .await;
                    match status {
                        Ok(s) if s.success() => {}
                        Ok(s) => {
                            tracing::warn!(?s, "demo: dlm lock run failed");
                            errors += 1;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "demo: cannot start dlm lock run");
                            errors += 1;
                        }
                    }
                }
                errors
            })
        })
        .collect();
    let mut errors = 0;
    for r in runners {
        errors += r.await.unwrap_or(RUNS_PER_PROCESS as u64);
    }
    let wall = started.elapsed();
    let got = read(&mut conn.clone(), FLOCK_KEY).await?;
    Ok(Part::new(
        "processes with dlm lock run",
        true,
        (PROCESSES * RUNS_PER_PROCESS) as u64,
        got,
        wall,
        &mut [],
        errors,
    ))
}

/// `dlm demo lock`.
pub async fn demo_lock(global: &Global) -> Result<u8, CliError> {
    let target = Target::given_or_private(global).await?;
    let client = connect(global, &target.url).await?;
    let mut conn = raw_connection(&target.url, global.timeout).await?;
    let () = redis::cmd("DEL")
        .arg(&[UNLOCKED_KEY, LOCKED_KEY, FLOCK_KEY])
        .query_async(&mut conn)
        .await
        .map_err(redis_err)?;
    if !global.json {
        output::line_out(&format!(
            "dlm demo lock on {}: {TASKS} tasks x {INCREMENTS} increments (GET, pause, SET), then {PROCESSES} processes x {RUNS_PER_PROCESS} runs of `dlm lock run`",
            target.describe()
        ))?;
    }

    let parts = [
        unlocked(&conn).await?,
        locked(&client, &conn).await?,
        processes(global, &target.url, &conn).await?,
    ];

    if global.json {
        for p in &parts {
            output::emit(true, p, String::new)?;
        }
    } else {
        let mut s = format!(
            "{:<28} {:>8} {:>6} {:>12} {:>8} {:>18}",
            "part", "expected", "got", "lost updates", "wall", "hand-off p50/p99"
        );
        for p in &parts {
            let handoff = match (p.handoff_p50_us, p.handoff_p99_us) {
                (None, None) => "-".to_string(),
                (a, b) => format!("{} / {}", cell_us(a), cell_us(b)),
            };
            s.push_str(&format!(
                "\n{:<28} {:>8} {:>6} {:>12} {:>8} {:>18}",
                p.part,
                p.expected,
                p.got,
                p.lost_updates,
                human(p.wall),
                handoff
            ));
            if p.errors > 0 {
                s.push_str(&format!("  ({} errors)", p.errors));
            }
        }
        output::line_out(&s)?;
    }

    let wrong: Vec<&str> = parts
        .iter()
        .filter(|p| p.locked && !p.exact())
        .map(|p| p.part)
        .collect();
    drop(target);
    if wrong.is_empty() {
        Ok(EXIT_OK)
    } else {
        Err(CliError::DemoFailed(format!(
            "locked part(s) not exact: {}",
            wrong.join(", ")
        )))
    }
}

/// `dlm demo increment-key KEY`: one GET / 5 ms / SET (run under `lock run`).
pub async fn increment_key(global: &Global, key: &str) -> Result<u8, CliError> {
    let mut conn = raw_connection(global.url(), global.timeout).await?;
    increment(&mut conn, key, Duration::from_millis(5)).await?;
    Ok(EXIT_OK)
}
