//! The command line: clap types and the value parsers that reject bad input
//! (durations, names, tokens) before anything is sent to Redis.

use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::error::CliError;

/// The Redis URL used when neither `--redis` nor `DLM_REDIS_URL` is given
/// (`bench` and `demo` start a private server instead).
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  a normal \"no\": not acquired before the deadline, not the holder, expired,
     a queue task not removed (its score changed or it is not waiting)
  2  usage error or invalid input
  3  Redis unavailable, backend or environment failure
  4  the lock was lost while `lock run`'s command ran
  `lock run` otherwise exits with the command's code (128+N if killed by signal N);
  `queue work` exits 127/126 when its command cannot be found / run";

/// `dlm`: distributed locks on Redis from the shell.
#[derive(Debug, Parser)]
#[command(name = "dlm", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Redis URL (redis://, rediss://, unix://). Default: $DLM_REDIS_URL
    /// (several separated by commas), else redis://127.0.0.1:6379; `bench`
    /// and `demo` start a private redis-server when neither is given. Given
    /// several times, every `lock` command is a Redlock over those
    /// independent masters (exit 3 when no majority answers); `queue`
    /// commands take a single one.
    #[arg(long = "redis", value_name = "URL", global = true, env = "DLM_REDIS_URL",
          hide_env_values = true, action = ArgAction::Append)]
    pub redis: Vec<String>,

    /// Machine-readable output: one JSON object per line.
    #[arg(long, global = true)]
    pub json: bool,

    /// Deadline of every call to Redis (and of connecting), e.g. 500ms.
    #[arg(long, value_name = "D", global = true, default_value = "2s",
          value_parser = parse_timeout, allow_hyphen_values = true)]
    pub timeout: Duration,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The options every command shares, checked.
#[derive(Debug, Clone)]
pub struct Global {
    /// The Redis URLs given with `--redis` or `DLM_REDIS_URL` (empty: none).
    pub redis: Vec<String>,
    /// Print JSON.
    pub json: bool,
    /// Per-call deadline.
    pub timeout: Duration,
}

impl Global {
    /// The URL to use: the one given, else the default local Redis.
    pub fn url(&self) -> &str {
        self.redis.first().map_or(DEFAULT_REDIS_URL, String::as_str)
    }

    /// The URLs to lock on: those given (several: Redlock), else the default local Redis.
    pub fn urls(&self) -> Vec<String> {
        if self.redis.is_empty() {
            vec![DEFAULT_REDIS_URL.to_string()]
        } else {
            self.redis.clone()
        }
    }
}

impl Cli {
    /// Parse the process's arguments (exits 2 on a usage error, 0 for
    /// `--help`). An empty `DLM_REDIS_URL` counts as unset.
    pub fn parse_args() -> Cli {
        Self::from_matches(Cli::command().get_matches())
    }

    fn from_matches(matches: clap::ArgMatches) -> Cli {
        let from_env = matches.value_source("redis") == Some(ValueSource::EnvVariable);
        let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        if from_env {
            cli.redis = cli
                .redis
                .iter()
                .flat_map(|v| v.split(','))
                .map(|u| u.trim().to_string())
                .filter(|u| !u.is_empty())
                .collect();
        }
        cli
    }

    /// The global options, checked.
    pub fn global(&self) -> Result<Global, CliError> {
        Ok(Global {
            redis: self.redis.clone(),
            json: self.json,
            timeout: self.timeout,
        })
    }
}

/// The command groups.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Acquire, release, extend and inspect locks; run a command under a lock.
    #[command(subcommand)]
    Lock(LockCommand),
    /// A reliable task queue: push, inspect, and work off tasks with a command.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Measure lock and queue throughput and latency.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Show what a lock is for, on a private redis-server.
    #[command(subcommand)]
    Demo(DemoCommand),
}

/// `dlm lock ...`
#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Acquire a lock and print its owner token.
    ///
    /// The lock stays held until its TTL runs out or it is released with
    /// `dlm lock release NAME --token TOKEN`: no process is left behind to
    /// renew it, so pick a TTL long enough for the work (or extend it with
    /// `dlm lock extend`). For work that runs as one command, prefer
    /// `dlm lock run`, which renews and releases by itself.
    Acquire(AcquireArgs),
    /// Release a lock with the token `acquire` printed (silent on success;
    /// exit 1 when it expired or another owner holds it).
    Release(ReleaseArgs),
    /// Set the TTL of a lock held with TOKEN to D from now (silent on
    /// success; exit 1 when it expired or another owner holds it).
    Extend(ExtendArgs),
    /// Show whether a lock is held, its remaining TTL and last fencing token
    /// (exit 0 either way).
    Status(StatusArgs),
    /// Run a command while holding a lock: a distributed flock(1).
    ///
    /// The lock is renewed every TTL/3 while CMD runs and released when it
    /// exits; dlm exits with CMD's exit code (128+N if a signal N killed it).
    /// CMD gets DLM_FENCE (the fencing token) and DLM_LOCK_KEY in its
    /// environment. SIGINT, SIGTERM and SIGHUP are forwarded to CMD. If the
    /// lock is lost while CMD runs, CMD gets SIGTERM (SIGKILL 10 s later) and
    /// dlm exits 4.
    Run(RunArgs),
}

/// The lock a command works on.
#[derive(Debug, Clone, Args)]
pub struct LockName {
    /// The lock's name (1 to 1024 bytes); its key is dlm:lock:{NAME}.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,

    /// Use NAME itself as the Redis key (to share the lock with redis-py,
    /// node-redlock or redsync on the same key).
    #[arg(long)]
    pub raw_key: bool,
}

/// `dlm lock acquire`
#[derive(Debug, Clone, Args)]
pub struct AcquireArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: LockName,
    /// Lease length (10ms to 7d): the lock frees itself after this long.
    #[arg(long, value_name = "D", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Keep trying for up to this long (default: try once).
    #[arg(long, value_name = "D", default_value = "0s", value_parser = parse_wait, allow_hyphen_values = true)]
    pub wait: Duration,
}

/// `dlm lock release`
#[derive(Debug, Clone, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: LockName,
    /// The owner token `dlm lock acquire` printed.
    #[arg(long, value_name = "T", value_parser = parse_token)]
    pub token: dlm::Token,
}

/// `dlm lock extend`
#[derive(Debug, Clone, Args)]
pub struct ExtendArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: LockName,
    /// The owner token `dlm lock acquire` printed.
    #[arg(long, value_name = "T", value_parser = parse_token)]
    pub token: dlm::Token,
    /// The new TTL, counted from now (10ms to 7d).
    #[arg(long, value_name = "D", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
}

/// `dlm lock status`
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: LockName,
}

/// `dlm lock run`
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub target: LockName,
    /// Lease length (10ms to 7d), renewed every TTL/3 while CMD runs; how
    /// long the lock outlives a crashed dlm.
    #[arg(long, value_name = "D", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Keep trying to acquire for up to this long (default: try once; exit 1
    /// when not acquired).
    #[arg(long, value_name = "D", default_value = "0s", value_parser = parse_wait, allow_hyphen_values = true)]
    pub wait: Duration,
    /// The command and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `dlm bench ...`
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Acquire/release throughput and latency. Without --redis (and
    /// DLM_REDIS_URL) it runs against a private redis-server it starts.
    Lock(BenchLockArgs),
    /// `bench lock` over a Redlock of several private servers (default 5),
    /// or of the several --redis URLs given.
    Redlock(BenchLockArgs),
    /// Queue throughput (enqueue, process) and idle-worker pick-up latency.
    /// Without --redis (and DLM_REDIS_URL) it runs against a private
    /// redis-server it starts.
    Queue(BenchQueueArgs),
}

/// `dlm bench queue`
#[derive(Debug, Clone, Args)]
pub struct BenchQueueArgs {
    /// How many tasks to enqueue and process.
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub tasks: u64,
    /// How many tasks the worker runs at once.
    #[arg(long, value_name = "C", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,
    /// How many tasks one enqueue call carries.
    #[arg(long, value_name = "B", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    /// Samples of the idle-start phase.
    #[arg(long, value_name = "N", default_value_t = 200,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub idle_samples: u32,
}

/// What a lock benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchMode {
    /// Every task locks random keys: throughput without contention.
    Distinct,
    /// All tasks take turns on one lock: waiting, hand-off and fairness.
    Contended,
}

impl BenchMode {
    /// The name used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            BenchMode::Distinct => "distinct",
            BenchMode::Contended => "contended",
        }
    }
}

/// `dlm bench lock`
#[derive(Debug, Clone, Args)]
pub struct BenchLockArgs {
    /// distinct: random keys; contended: one lock for all tasks.
    #[arg(long, value_enum, default_value_t = BenchMode::Distinct)]
    pub mode: BenchMode,
    /// Number of concurrent tasks (sharing one client).
    #[arg(long, value_name = "C", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,
    /// How long to measure (after the warmup).
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_bench_duration, allow_hyphen_values = true)]
    pub duration: Duration,
    /// How long to run before measuring.
    #[arg(long, value_name = "W", default_value = "1s", value_parser = parse_warmup, allow_hyphen_values = true)]
    pub warmup: Duration,
    /// Without --redis: start this many private servers; more than one makes
    /// the benchmark a Redlock over them (default 1 for `bench lock`, 5 for
    /// `bench redlock`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=9))]
    pub nodes: Option<u32>,
    /// Also run the same work with raw Redis commands through the `redis`
    /// crate (SET NX PX, then a compare-and-delete script), without dlm, and
    /// print it as a second line (`"impl":"redis-rs-raw"`; distinct mode only).
    #[arg(long)]
    pub baseline: bool,
}

/// `dlm queue ...`
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Enqueue tasks (one call for all ids, each with the same payload).
    ///
    /// Prints one line per id: `added ID SCORE`, `kept ID` (already waiting
    /// or in flight; kept as it was) or `replaced ID SCORE` (with --replace).
    /// SCORE is the due time in ms since the epoch (Redis clock).
    Push(PushArgs),
    /// Show up to N due tasks without taking them (JSON lines, always).
    Peek(ListArgs),
    /// Take up to N due tasks out of the queue, without a lease (JSON lines,
    /// always). A popped task is gone: use `queue work` for at-least-once.
    Pop(ListArgs),
    /// Remove a waiting task only if its due time still equals SCORE (as
    /// peek printed it). Exit 1 when it was re-enqueued since or is absent.
    Remove(RemoveArgs),
    /// Show the queue's counts.
    Stats(QueueArg),
    /// Run a command once per task until stopped (SIGINT/SIGTERM: graceful).
    ///
    /// CMD gets the payload on stdin (empty when none) and DLM_QUEUE,
    /// DLM_TASK_ID, DLM_TASK_ATTEMPT, DLM_TASK_SCORE and DLM_FENCE in its
    /// environment; its stdout and stderr are dlm's. Exit status 0 acks the
    /// task; anything else (or a signal) fails it: it is retried after a
    /// backoff, and goes to the dead-letter set after --max-attempts. Each
    /// CMD runs in its own process group. On SIGINT/SIGTERM no new task is
    /// started; running ones get --grace to finish, then their process
    /// groups are killed and their tasks given back at once (further signals
    /// are ignored meanwhile); dlm then prints a summary as its last line on
    /// stdout and exits 0. A dlm killed with SIGKILL leaves its commands
    /// running; their tasks come back when their leases expire and may run
    /// twice (at-least-once).
    Work(WorkArgs),
    /// Show up to N dead tasks, oldest death first (JSON lines, always).
    Dead(DeadArgs),
    /// Move dead tasks back to the queue, due now, attempts reset; prints how many.
    Retry(RetryArgs),
    /// Delete tasks for good; prints how many. Only `--dead` for now.
    Purge(PurgeArgs),
}

/// The queue a command works on.
#[derive(Debug, Clone, Args)]
pub struct QueueArg {
    /// The queue's name (1 to 1024 bytes); its keys are dlm:queue:{QUEUE}:*.
    #[arg(value_name = "QUEUE", value_parser = parse_queue_name)]
    pub queue: String,
}

/// `dlm queue push`
#[derive(Debug, Clone, Args)]
pub struct PushArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The task ids (1 to 1024 bytes each; at most 10000).
    #[arg(value_name = "ID", required = true, num_args = 1.., value_parser = parse_task_id)]
    pub ids: Vec<String>,
    /// Due this long from now (default: now; at most 365 days).
    #[arg(long, value_name = "D", default_value = "0s", value_parser = parse_delay, allow_hyphen_values = true)]
    pub delay: Duration,
    /// The payload, as given.
    #[arg(long, value_name = "STR", conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// The payload, read from a file (`-`: stdin); any bytes.
    #[arg(long, value_name = "F")]
    pub payload_file: Option<std::path::PathBuf>,
    /// Replace a task with the same id that is waiting or in flight (new due
    /// time and payload); default: keep it.
    #[arg(long)]
    pub replace: bool,
}

/// `dlm queue peek | pop`
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// How many tasks at most (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: u32,
}

/// `dlm queue dead`
#[derive(Debug, Clone, Args)]
pub struct DeadArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// How many tasks at most (1 to 10000).
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: u32,
}

/// `dlm queue remove`
#[derive(Debug, Clone, Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The task id.
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub id: String,
    /// The due time the task was seen with (peek's `score`).
    #[arg(long, value_name = "S")]
    pub score: u64,
}

/// `dlm queue retry`
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "all"])))]
pub struct RetryArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// The dead tasks to retry (at most 10000).
    #[arg(value_name = "ID", value_parser = parse_task_id)]
    pub ids: Vec<String>,
    /// Retry every dead task.
    #[arg(long)]
    pub all: bool,
}

/// `dlm queue purge`
#[derive(Debug, Clone, Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// Delete every task in the dead-letter set (required).
    #[arg(long, required = true)]
    pub dead: bool,
}

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
    /// The command and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `dlm demo ...`
#[derive(Debug, Subcommand)]
pub enum DemoCommand {
    /// The flash sale: a crowd of buyers, a few phones, once per strategy
    /// (naive, lock, redlock, optimistic, script, queue). Starts private
    /// redis-servers unless --redis is given. Exit 0 only if every strategy
    /// but naive sold exactly min(stock, buyers) and decided each order once.
    Seckill(crate::seckill::SeckillArgs),
    /// Lost updates without a lock, none with one: tasks in one process,
    /// then processes with `dlm lock run`. Starts a private redis-server
    /// unless --redis is given.
    Lock,
    /// One read-modify-write increment of KEY (used by `demo lock`).
    #[command(hide = true)]
    IncrementKey {
        /// The counter's key.
        key: String,
    },
}

/// A humantime duration (`30s`, `250ms`, `1h 5m`), not negative.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("{s:?} is negative; durations must be >= 0"));
    }
    if t.is_empty() {
        return Err("empty duration; expected e.g. 30s or 250ms".into());
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{s:?} is not a duration ({e}); expected e.g. 30s or 250ms"))
}

fn in_range(s: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min || d > max {
        return Err(format!(
            "{s} is outside {} ..= {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

fn parse_ttl(s: &str) -> Result<Duration, String> {
    in_range(s, dlm::MIN_TTL, dlm::MAX_TTL)
}

fn parse_wait(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, dlm::MAX_WAIT)
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::from_millis(1), Duration::from_secs(3600))
}

fn parse_bench_duration(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::from_millis(1), Duration::from_secs(24 * 3600))
}

fn parse_warmup(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, Duration::from_secs(3600))
}

fn parse_delay(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, dlm::queue::MAX_DELAY)
}

fn parse_lease(s: &str) -> Result<Duration, String> {
    in_range(s, dlm::MIN_TTL, dlm::MAX_TTL)
}

fn parse_retry_base(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::from_millis(1), Duration::from_secs(24 * 3600))
}

fn parse_grace(s: &str) -> Result<Duration, String> {
    in_range(s, Duration::ZERO, Duration::from_secs(24 * 3600))
}

fn parse_queue_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the queue name must not be empty".into());
    }
    if s.len() > dlm::keys::MAX_NAME_LEN {
        return Err(format!(
            "the queue name is {} bytes, longer than {}",
            s.len(),
            dlm::keys::MAX_NAME_LEN
        ));
    }
    if s.starts_with('}') {
        return Err("the queue name must not start with '}'".into());
    }
    Ok(s.to_string())
}

fn parse_task_id(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("a task id must not be empty".into());
    }
    if s.len() > dlm::keys::MAX_NAME_LEN {
        return Err(format!(
            "the task id is {} bytes, longer than {}",
            s.len(),
            dlm::keys::MAX_NAME_LEN
        ));
    }
    Ok(s.to_string())
}

fn parse_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the lock name must not be empty".into());
    }
    if s.len() > dlm::keys::MAX_NAME_LEN {
        return Err(format!(
            "the lock name is {} bytes, longer than {}",
            s.len(),
            dlm::keys::MAX_NAME_LEN
        ));
    }
    Ok(s.to_string())
}

fn parse_token(s: &str) -> Result<dlm::Token, String> {
    s.parse::<dlm::Token>().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("100days").is_err());
        assert_eq!(parse_ttl("7d"), Ok(dlm::MAX_TTL));
        assert_eq!(parse_wait("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn names() {
        assert!(parse_name("").is_err());
        assert!(parse_name(&"n".repeat(2000)).is_err());
        assert!(parse_name("orders:42").is_ok());
    }

    #[test]
    fn run_takes_everything_after_the_double_dash() -> Result<(), clap::Error> {
        let cli = Cli::try_parse_from([
            "dlm", "lock", "run", "n", "--ttl", "1s", "--json", "--", "sh", "-c", "exit 7",
        ])?;
        assert!(cli.json);
        let Command::Lock(LockCommand::Run(run)) = cli.command else {
            panic!("not run");
        };
        assert_eq!(run.command, ["sh", "-c", "exit 7"]);
        Ok(())
    }
}
