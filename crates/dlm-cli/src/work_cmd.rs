//! `dlm queue work QUEUE -- CMD...`: a [`dlm::queue::Worker`] whose handler
//! runs CMD once per task.
//!
//! CMD gets the payload on stdin and the task in its environment; exit 0
//! acks, anything else fails the task (retried with backoff, then dead).
//! CMD's stdout becomes the task's result (at most `--result-bytes`; more
//! fails the task); its stderr is dlm's. Past its time limit (the task's,
//! else `--task-timeout`) CMD's group gets SIGTERM, then SIGKILL after
//! `--grace`, and the task fails with "timed out".
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{parse_grace, parse_lease, parse_retry_base, parse_task_timeout};
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
    /// are killed and their tasks given back; also how long a command past
    /// its time limit gets after SIGTERM before SIGKILL.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_grace, allow_hyphen_values = true)]
    pub grace: Duration,
    /// The run-time limit of tasks pushed without one (`queue push
    /// --task-timeout`); 1ms to 7d, default none. At the limit CMD's process
    /// group gets SIGTERM, then SIGKILL after --grace, and the task fails
    /// with the error "timed out" (retried, then dead). (`--timeout` is the
    /// deadline of each Redis call.)
    #[arg(long, value_name = "D", value_parser = parse_task_timeout, allow_hyphen_values = true)]
    pub task_timeout: Option<Duration>,
    /// The most bytes of CMD's stdout kept as the task's result (1 to
    /// 1048576; 0: stdout is not captured, it is dlm's, and tasks leave no
    /// result). More output fails the task ("result larger than N bytes").
    #[arg(long, value_name = "N", default_value_t = 64 * 1024,
          value_parser = clap::value_parser!(u32).range(0..=dlm::queue::MAX_RESULT_BYTES as i64))]
    pub result_bytes: u32,
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
/// How long dlm waits for killed commands to be reaped before it exits
/// (and for a finished command's stdout to close).
const REAP_WAIT: Duration = Duration::from_secs(2);
/// After a task's time limit and --grace, how long more the worker lets
/// the command's handler end by itself before dropping it.
const TIMEOUT_SLACK: Duration = Duration::from_secs(5);

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
    /// The most bytes of stdout kept as the result (0: not captured).
    result_bytes: usize,
    /// From SIGTERM to SIGKILL when a command is past its time limit.
    grace: Duration,
    /// How CMD reaches the same Redis (`dlm queue progress` inside it).
    redis_env: Vec<(&'static str, String)>,
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
    fn kill(&self) {
        self.signal(libc::SIGKILL);
    }

    /// Send `sig` to the whole group.
    #[allow(unsafe_code)]
    fn signal(&self, sig: libc::c_int) {
        let Some(pgid) = self.pgid else { return };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours;
        // -pgid names the group our unreaped child leads, never another one.
        let rc = unsafe { libc::kill(-pgid, sig) };
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
    /// Run the command for `task`: Ok (with its stdout: the result) on exit status 0.
    async fn run(&self, task: Task) -> Result<Vec<u8>, String> {
        self.progress.running.fetch_add(1, Ordering::Relaxed);
        let result = self.run_inner(task).await;
        self.progress.running.fetch_sub(1, Ordering::Relaxed);
        let counter = match result {
            Ok(_) => &self.progress.succeeded,
            Err(_) => &self.progress.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    async fn run_inner(&self, task: Task) -> Result<Vec<u8>, String> {
        let payload = task.payload.unwrap_or_default();
        let capture = self.result_bytes > 0;
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
            .env("DLM_TASK_FENCE", task.fence.to_string())
            .envs(self.redis_env.iter().map(|(k, v)| (k, v)))
            .stdout(if capture {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
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
        // Read stdout as it comes (a full pipe would block CMD), keeping at
        // most `limit` bytes and noting whether there was more.
        let limit = self.result_bytes;
        let output = child.stdout.take().map(|mut out| {
            tokio::spawn(async move {
                let (mut kept, mut over) = (Vec::new(), false);
                let mut chunk = vec![0u8; 16 * 1024];
                while let Ok(n) = out.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    let room = limit - kept.len();
                    kept.extend_from_slice(&chunk[..n.min(room)]);
                    over |= n > room;
                }
                (kept, over)
            })
        });
        let limit_at = task.timeout.map(|d| Instant::now() + d);
        let mut kill_at: Option<Instant> = None;
        let mut timed_out = false;
        let waited = loop {
            tokio::select! {
                r = child.wait() => break r,
                _ = self.kill.cancelled() => {
                    group.kill();
                    break child.wait().await;
                }
                _ = sleep_until_some(limit_at), if !timed_out => {
                    timed_out = true;
                    tracing::info!(id = %task.id, "the task's time limit passed; sending its command SIGTERM");
                    group.signal(libc::SIGTERM);
                    kill_at = Some(Instant::now() + self.grace);
                }
                _ = sleep_until_some(kill_at) => {
                    tracing::warn!(id = %task.id, "the command ignored SIGTERM for {:?}; sending SIGKILL", self.grace);
                    group.kill();
                    kill_at = None;
                }
            }
        };
        group.disarm();
        let status = waited.map_err(|e| format!("waiting for the command failed: {e}"))?;
        // A process CMD left behind may keep stdout open: read what came
        // within a moment and go on.
        let (result, over) = match output {
            Some(reader) => match tokio::time::timeout(REAP_WAIT, reader).await {
                Ok(Ok(read)) => read,
                _ => (Vec::new(), false),
            },
            None => (Vec::new(), false),
        };
        if timed_out {
            Err("timed out".to_string())
        } else if !status.success() {
            Err(describe(status))
        } else if over {
            Err(format!("result larger than {limit} bytes"))
        } else {
            Ok(result)
        }
    }
}

/// Completes at `at`, or never when there is none.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The environment that lets CMD's own `dlm` calls (`dlm queue progress`)
/// reach the Redis this worker uses.
fn redis_env(global: &Global) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    if !global.redis.is_empty() {
        env.push(("DLM_REDIS_URL", global.redis.join(",")));
    }
    match &global.topology {
        crate::global::Topology::Cluster => env.push(("DLM_CLUSTER", "true".to_string())),
        crate::global::Topology::Sentinel(name) => env.push(("DLM_SENTINEL", name.clone())),
        crate::global::Topology::Plain => {}
    }
    env
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
        .exit_when_empty(args.exit_when_empty)
        // The command stops itself at its limit (SIGTERM, SIGKILL after
        // --grace); the worker drops it only if that somehow hangs.
        .timeout_grace(args.grace + TIMEOUT_SLACK);
    if let Some(id) = &args.worker_id {
        options = options.id(id.clone());
    }
    if let Some(limit) = args.task_timeout {
        options = options.task_timeout(limit);
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
        result_bytes: args.result_bytes as usize,
        grace: args.grace,
        redis_env: redis_env(global),
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
