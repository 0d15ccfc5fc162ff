//! `dlm queue work QUEUE -- CMD...`: a [`dlm::queue::Worker`] whose handler
//! runs CMD once per task.
//!
//! CMD gets the payload on stdin and the task in its environment; exit 0
//! acks, anything else fails the task (retried with backoff, then dead).
//! Each CMD is the leader of its own process group, so a Ctrl-C at the
//! terminal reaches dlm only: dlm stops claiming, lets running commands
//! finish for `--grace`, then kills what is left (the whole group) and the
//! worker gives their tasks back at once.

use std::io::{IsTerminal, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Args;
use dlm::CancellationToken;
use dlm::queue::{Backoff, Task, WorkerOptions};
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{parse_grace, parse_lease, parse_retry_base};
use crate::global::{Global, QueueArg};
use crate::output;
use crate::signals::Signals;

/// `dlm queue work`
#[derive(Debug, Clone, Args)]
pub struct WorkArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// How many commands run at once (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,
    /// Lease of a claimed task (10ms to 7d), renewed every third of it while
    /// its command runs: how long the task of a crashed dlm stays stuck.
    #[arg(long, value_name = "D", default_value = "30s", value_parser = parse_lease, allow_hyphen_values = true)]
    pub lease: Duration,
    /// Tries before a task goes to the dead-letter set (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_attempts: u32,
    /// First pause before a retry (doubling per attempt, jittered, at most 10s
    /// or this if larger).
    #[arg(long, value_name = "D", default_value = "100ms", value_parser = parse_retry_base, allow_hyphen_values = true)]
    pub retry_base: Duration,
    /// After SIGINT/SIGTERM, how long running commands may finish before they
    /// are killed and their tasks given back.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_grace, allow_hyphen_values = true)]
    pub grace: Duration,
    /// Exit 0 once nothing is waiting, due later or in flight.
    #[arg(long)]
    pub exit_when_empty: bool,
    /// This worker's id in the heartbeat record `queue workers` and the
    /// dashboard show (1 to 256 bytes, no control characters). Default:
    /// HOST:PID:RANDOM, new for every run.
    #[arg(long, value_name = "ID", value_parser = parse_worker_id)]
    pub worker_id: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub settings: crate::global::SettingsArgs,
    /// The command and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// A worker id: 1 to 256 bytes without control characters.
fn parse_worker_id(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 256 || s.chars().any(char::is_control) {
        return Err("a worker id must be 1 to 256 bytes without control characters".into());
    }
    Ok(s.to_string())
}

/// The longest pause between retries of a failing task (or `--retry-base`, if larger).
pub const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);
/// How long dlm waits for killed commands to be reaped before it exits.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// What the progress line counts.
#[derive(Debug, Default)]
struct Progress {
    running: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
}

impl Progress {
    fn line(&self, queue: &str) -> String {
        format!(
            "dlm queue work {queue}: {} running, {} succeeded, {} failed",
            self.running.load(Ordering::Relaxed),
            self.succeeded.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

/// How every task's command is run.
#[derive(Debug)]
struct CommandSpec {
    program: String,
    args: Vec<String>,
    queue: String,
    /// Cancelled when running commands must die (after the grace period).
    kill: CancellationToken,
    progress: Progress,
}

/// Kills a child's process group when dropped, unless the child was reaped.
///
/// The child leads its own group (`process_group(0)`), so the group id is its
/// pid, which stays reserved until we reap it.
struct GroupKiller {
    pgid: Option<libc::pid_t>,
}

impl GroupKiller {
    fn new(pid: Option<u32>) -> Self {
        GroupKiller {
            pgid: pid.and_then(|p| libc::pid_t::try_from(p).ok()),
        }
    }

    /// SIGKILL the whole group (the command and whatever it started).
    #[allow(unsafe_code)]
    fn kill(&self) {
        let Some(pgid) = self.pgid else { return };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours;
        // -pgid names the group our unreaped child leads, never another one.
        let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if rc != 0 {
            tracing::debug!(pgid, error = %std::io::Error::last_os_error(), "killpg failed");
        }
    }

    /// The child was reaped: its pid may be reused, never signal it again.
    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The error text kept with a failed task.
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("the command failed with exit status {code}");
    }
    match status.signal() {
        Some(sig) => format!("the command was killed by signal {sig}"),
        None => format!("the command failed ({status})"),
    }
}

impl CommandSpec {
    /// Run the command for `task`: Ok on exit status 0.
    async fn run(&self, task: Task) -> Result<(), String> {
        self.progress.running.fetch_add(1, Ordering::Relaxed);
        let result = self.run_inner(task).await;
        self.progress.running.fetch_sub(1, Ordering::Relaxed);
        let counter = match result {
            Ok(()) => &self.progress.succeeded,
            Err(_) => &self.progress.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    async fn run_inner(&self, task: Task) -> Result<(), String> {
        let payload = task.payload.unwrap_or_default();
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .env("DLM_QUEUE", &self.queue)
            .env("DLM_TASK_ID", &task.id)
            .env("DLM_TASK_ATTEMPT", task.attempt.to_string())
            .env("DLM_TASK_SCORE", task.score.to_string())
            .env("DLM_TASK_PRIORITY", task.priority.to_string())
            // Its dependencies (all done by now), comma-separated; empty when none.
            .env("DLM_TASK_DEPS", task.deps.join(","))
            .env("DLM_FENCE", task.fence.to_string())
            .stdin(if payload.is_empty() {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .process_group(0);
        if let Some(group) = &task.group {
            command.env("DLM_TASK_GROUP", group);
        }
        command.kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {:?}: {e}", self.program))?;
        // Declared after `child`, so dropped first: the group dies while its
        // leader is still unreaped (a dropped handler = dlm is going away).
        let mut group = GroupKiller::new(child.id());
        if let Some(mut stdin) = child.stdin.take() {
            // Concurrently with the wait: a payload larger than the pipe
            // buffer must not block a command that does not read it.
            tokio::spawn(async move {
                let _ = stdin.write_all(&payload).await;
            });
        }
        let waited = tokio::select! {
            r = child.wait() => r,
            _ = self.kill.cancelled() => {
                group.kill();
                child.wait().await
            }
        };
        group.disarm();
        let status = waited.map_err(|e| format!("waiting for the command failed: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(describe(status))
        }
    }
}

/// Where `program` would be run from, as execvp(3) finds it, or why it cannot be.
fn resolve(program: &str) -> Result<PathBuf, std::io::Error> {
    use std::io::{Error, ErrorKind};
    let executable =
        |p: &Path| std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = PathBuf::from(program);
        return match executable(&p) {
            Ok(true) => Ok(p),
            Ok(false) => Err(Error::new(ErrorKind::PermissionDenied, "not executable")),
            Err(e) => Err(e),
        };
    }
    if program.is_empty() {
        return Err(Error::new(ErrorKind::NotFound, "empty command name"));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = false;
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(true) => return Ok(candidate),
            Ok(false) => denied = true,
            Err(_) => {}
        }
    }
    if denied {
        Err(Error::new(ErrorKind::PermissionDenied, "not executable"))
    } else {
        Err(Error::new(ErrorKind::NotFound, "not found in PATH"))
    }
}

#[derive(Serialize)]
struct Summary<'a> {
    queue: &'a str,
    acked: u64,
    retried: u64,
    dead: u64,
    lost: u64,
    returned: u64,
}

/// `dlm queue work`.
pub async fn work(global: &Global, args: &WorkArgs) -> Result<u8, CliError> {
    let Some((program, cmd_args)) = args.command.split_first() else {
        return Err(CliError::Usage("no command given after --".into()));
    };
    // A command that cannot run would send every task to the dead-letter set.
    resolve(program).map_err(|source| CliError::Spawn {
        program: program.clone(),
        source,
    })?;
    // From here on SIGINT/SIGTERM/SIGHUP stop the worker gracefully.
    let mut signals = Signals::install()?;
    let queue = args
        .queue
        .open(global)
        .await?
        .max_attempts(args.max_attempts)
        .backoff(Backoff::new(args.retry_base, MAX_RETRY_PAUSE));
    let mut options = WorkerOptions::new()
        .concurrency(args.concurrency as usize)
        .lease(args.lease)
        .grace(args.grace)
        .exit_when_empty(args.exit_when_empty);
    if let Some(id) = &args.worker_id {
        options = options.id(id.clone());
    }
    if args.settings.any() {
        // Stored for the queue, so every worker of it follows the latest value.
        queue.configure(&args.settings.change()).await?;
    }
    let name = args.queue.queue.as_str();
    let spec = Arc::new(CommandSpec {
        program: program.clone(),
        args: cmd_args.to_vec(),
        queue: name.to_string(),
        kill: CancellationToken::new(),
        progress: Progress::default(),
    });
    let shutdown = CancellationToken::new();
    let handler = {
        let spec = spec.clone();
        move |task: Task| {
            let spec = spec.clone();
            async move { spec.run(task).await }
        }
    };
    let run = queue.worker(options).run(handler, shutdown.clone());
    tokio::pin!(run);

    let tty = std::io::stderr().is_terminal();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let result = loop {
        tokio::select! {
            r = &mut run => break r,
            sig = signals.recv() => {
                if !shutdown.is_cancelled() {
                    tracing::info!(sig, "stopping: no new tasks; running ones get the grace period");
                    shutdown.cancel();
                }
            }
            _ = ticker.tick(), if tty => {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r{}\x1b[K", spec.progress.line(name));
                let _ = err.flush();
            }
        }
    };
    // Commands still running outlived the grace period (their tasks were
    // given back): kill their groups and reap them before exiting.
    spec.kill.cancel();
    let reaped = tokio::time::timeout(REAP_WAIT, async {
        while spec.progress.running.load(Ordering::Relaxed) > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    if reaped.is_err() {
        tracing::warn!("some commands were not reaped after SIGKILL");
    }
    if tty {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K");
        let _ = err.flush();
    }
    let report = result?;
    let summary = Summary {
        queue: name,
        acked: report.acked,
        retried: report.retried,
        dead: report.dead,
        lost: report.lost,
        returned: report.returned,
    };
    output::emit(global.json, &summary, || {
        format!(
            "{name}: acked {}, retried {}, dead {}, lost {}, returned {}",
            summary.acked, summary.retried, summary.dead, summary.lost, summary.returned
        )
    })?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_like_execvp() {
        assert!(resolve("sh").is_ok());
        assert_eq!(
            resolve("/nonexistent/cmd").map_err(|e| e.kind()).err(),
            Some(std::io::ErrorKind::NotFound)
        );
        assert_eq!(
            resolve("no-such-command-dlm").map_err(|e| e.kind()).err(),
            Some(std::io::ErrorKind::NotFound)
        );
        assert!(resolve("/etc/passwd").is_err());
    }

    #[test]
    fn failures_say_how_the_command_ended() {
        assert_eq!(
            describe(ExitStatus::from_raw(3 << 8)),
            "the command failed with exit status 3"
        );
        assert_eq!(
            describe(ExitStatus::from_raw(libc::SIGKILL)),
            "the command was killed by signal 9"
        );
    }
}
