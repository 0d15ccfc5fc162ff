//! The CLI's lock clients: `dlm lock run`, `lock run --fair`, `rwlock run`,
//! `semaphore run` and `elect run` subprocesses, each running a short shell
//! command that prints when it started and ended (its wall clock, mapped
//! onto the soak's clock at spawn). The soak records the operations around
//! each subprocess: the acquire from the spawn to the command's start, the
//! release from the command's end to the subprocess's exit.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlm_testkit::history::Hold;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::lin::{LockAction, LockOp, LockResult, Mode};
use super::locks::think;
use super::procs::Procs;
use super::record::{Kind, PERMITS, Recorder};
use crate::rng::SplitMix;

/// The command each subprocess runs under its lock: its start (and the
/// fencing token), a short nap, its end. `env -u` keeps libfaketime away
/// from it: its times are real.
pub fn script_for(nap: Duration) -> Vec<String> {
    let line = format!(
        "echo \"T $(date +%s%N) ${{DLM_FENCE:-}}\"; sleep {}; echo \"E $(date +%s%N)\"",
        nap.as_secs_f64()
    );
    ["env", "-u", "LD_PRELOAD", "sh", "-c", &line]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// One CLI client's settings.
#[derive(Debug, Clone)]
pub struct CliLock {
    /// The deployment's URL (through its proxy).
    pub url: String,
    /// The lease of every acquisition.
    pub ttl: Duration,
    /// How long an acquire waits.
    pub wait: Duration,
    /// How long the command naps while holding.
    pub nap: Duration,
}

/// The arguments of one acquisition of `kind` on `name`.
fn args(c: &CliLock, kind: Kind, name: &str, write: bool, me: &str) -> Vec<String> {
    let ttl = format!("{}ms", c.ttl.as_millis());
    let permits = PERMITS.to_string();
    let wait = format!("{}ms", c.wait.as_millis());
    let mut a: Vec<String> = vec![
        "--redis".into(),
        c.url.clone(),
        "--timeout".into(),
        "1s".into(),
    ];
    let more: Vec<&str> = match kind {
        Kind::Mutex => vec!["lock", "run", name, "--ttl", &ttl, "--wait", &wait],
        Kind::Fair => vec![
            "lock", "run", name, "--fair", "--ttl", &ttl, "--wait", &wait,
        ],
        Kind::Rw => vec![
            "rwlock",
            "run",
            name,
            if write { "--write" } else { "--read" },
            "--ttl",
            &ttl,
            "--wait",
            &wait,
        ],
        Kind::Semaphore => vec![
            "semaphore",
            "run",
            name,
            "--permits",
            &permits,
            "--ttl",
            &ttl,
            "--wait",
            &wait,
        ],
        Kind::Election => vec!["elect", "run", name, "--id", me, "--ttl", &ttl],
    };
    a.extend(more.into_iter().map(String::from));
    a.push("--".into());
    a.extend(script_for(c.nap));
    a
}

/// What one subprocess showed.
#[derive(Debug, Default)]
pub struct Seen {
    /// The command's start (on the soak's clock) and the fence it got.
    pub start: Option<(Duration, Option<u64>)>,
    /// The command's end.
    pub end: Option<Duration>,
    /// The exit code (None: killed by a signal or not reaped).
    pub code: Option<i32>,
    /// stderr said the release failed.
    pub release_failed: bool,
    /// When the soak saw it exit.
    pub exited: Duration,
}

/// Wall-clock nanoseconds now.
pub fn wall_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// Maps the wall clock of a subprocess onto the soak's clock, calibrated
/// at its spawn (so a slow drift of the wall clock does not add up).
#[derive(Debug, Clone, Copy)]
pub struct WallMap {
    wall: i128,
    at: Duration,
}

impl WallMap {
    /// Calibrate now.
    pub fn now(rec: &Recorder) -> Self {
        WallMap {
            wall: wall_ns(),
            at: rec.clock.now(),
        }
    }

    /// The soak-clock time of wall-clock `ns`.
    pub fn map(&self, ns: i128) -> Duration {
        let off = ns - self.wall;
        if off >= 0 {
            self.at + Duration::from_nanos(off as u64)
        } else {
            self.at.saturating_sub(Duration::from_nanos((-off) as u64))
        }
    }
}

/// Run one subprocess to its end (killed after `limit`), recording what it
/// printed; `on_start` is called when its command started (with its pid).
pub async fn run_one(
    rec: &Recorder,
    procs: &Procs,
    args: &[String],
    role: &'static str,
    limit: Duration,
    on_start: impl FnOnce(Option<u32>),
) -> Seen {
    let map = WallMap::now(rec);
    let mut cmd = procs.dlm();
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut seen = Seen::default();
    let Ok(mut child) = cmd.spawn() else {
        seen.exited = rec.clock.now();
        return seen;
    };
    let pid = child.id();
    procs.started(pid, role);
    let mut on_start = Some(on_start);
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let read = async {
        let err_task = tokio::spawn(async move {
            let mut text = String::new();
            if let Some(mut e) = stderr {
                let _ = e.read_to_string(&mut text).await;
            }
            text
        });
        if let Some(out) = stdout {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut parts = line.split_whitespace();
                let tag = parts.next();
                let ns = parts.next().and_then(|n| n.parse::<i128>().ok());
                match (tag, ns) {
                    (Some("T"), Some(ns)) => {
                        let fence = parts.next().and_then(|f| f.parse().ok());
                        seen.start = Some((map.map(ns), fence));
                        if let Some(f) = on_start.take() {
                            f(pid);
                        }
                    }
                    (Some("E"), Some(ns)) => seen.end = Some(map.map(ns)),
                    _ => {}
                }
            }
        }
        err_task.await.unwrap_or_default()
    };
    let stderr_text = match tokio::time::timeout(limit, read).await {
        Ok(text) => text,
        Err(_) => {
            let _ = child.start_kill();
            String::new()
        }
    };
    seen.release_failed = stderr_text.contains("release failed");
    procs.ended(pid);
    let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
        Ok(Ok(s)) => Some(s),
        _ => {
            let _ = child.start_kill();
            None
        }
    };
    seen.code = status.and_then(|s| s.code());
    seen.exited = rec.clock.now();
    seen
}

/// One CLI client's loop on `kind` until the soak stops.
pub async fn run(
    rec: Arc<Recorder>,
    procs: Arc<Procs>,
    c: CliLock,
    kind: Kind,
    client_id: usize,
    seed: u64,
) {
    let mut rng = SplitMix(seed);
    let mut process = rec.process();
    let mut n = 0u64;
    let limit = c.ttl * 2 + c.wait + Duration::from_secs(5);
    while !rec.stopping() {
        let epoch = rec.epoch();
        let name = rec.lock_name("", kind, epoch, rng.next() as usize % rec.names_per_kind);
        let write = kind == Kind::Rw && rng.next().is_multiple_of(3);
        let mode = match kind {
            Kind::Semaphore => Mode::Shared,
            Kind::Rw if !write => Mode::Shared,
            _ => Mode::Exclusive,
        };
        // A candidate id per process: a new process is a new candidate.
        n += 1;
        let me = format!("cli-{client_id}-{n}");
        let invoke = rec.clock.now();
        let seen = run_one(
            &rec,
            &procs,
            &args(&c, kind, &name, write, &me),
            "cli lock client",
            limit,
            |_| {},
        )
        .await;
        rec.count(kind.label(), "cli");
        record(
            &rec, kind, epoch, &name, process, mode, c.ttl, invoke, &seen, client_id,
        );
        if !matches!(seen.code, Some(0 | 1)) || seen.release_failed {
            process = rec.process();
        }
        think(&mut rng).await;
    }
}

/// Record the operations of one subprocess seen as `seen`.
#[allow(clippy::too_many_arguments)]
pub fn record(
    rec: &Recorder,
    kind: Kind,
    epoch: u64,
    name: &str,
    process: usize,
    mode: Mode,
    ttl: Duration,
    invoke: Duration,
    seen: &Seen,
    holder: usize,
) {
    let lease = rec.lease();
    let op = |action, result, invoke, complete| LockOp {
        process,
        lock: name.to_string(),
        lease,
        action,
        result,
        invoke,
        complete,
    };
    let acquire = LockAction::Acquire { mode, ttl };
    let Some((start, fence)) = seen.start else {
        let result = match seen.code {
            Some(1) => LockResult::Refused,
            _ => LockResult::Unknown,
        };
        rec.lock_op(
            kind,
            epoch,
            op(acquire, result, invoke, seen.exited.max(invoke)),
        );
        return;
    };
    let granted = start.max(invoke);
    rec.lock_op(
        kind,
        epoch,
        op(acquire, LockResult::Granted { fence }, invoke, granted),
    );
    let until = match seen.end {
        Some(end) => {
            let end = end.max(granted);
            let result = match seen.code {
                Some(0) if !seen.release_failed => LockResult::Done,
                Some(4) => LockResult::Failed,
                _ => LockResult::Unknown,
            };
            rec.lock_op(
                kind,
                epoch,
                op(LockAction::Release, result, end, seen.exited.max(end)),
            );
            end
        }
        // Killed before its end: its dlm may have released before the soak
        // saw it exit, so its interval is not one to judge (the
        // linearizability checker judges the unknown release).
        None => {
            let exited = seen.exited.max(granted);
            let unknown = LockResult::Unknown;
            rec.lock_op(
                kind,
                epoch,
                op(LockAction::Release, unknown, granted, exited),
            );
            return;
        }
    };
    rec.hold(
        kind,
        epoch,
        Hold {
            holder,
            lock: name.to_string(),
            from: granted,
            until,
            fence,
        },
        mode == Mode::Exclusive,
    );
}
