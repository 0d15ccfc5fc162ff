//! The command line, assembled: the top-level parser with the global flags
//! and the tree of commands. Each command's arguments are defined by its own
//! module; this module only names them.

use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::bench::{BenchCurvesArgs, BenchDrainArgs, BenchLockArgs};
use crate::bench_ids::BenchIdsArgs;
use crate::bench_queue::BenchQueueArgs;
use crate::check::CheckCommand;
use crate::dispatch::DispatchArgs;
use crate::elect_cmd::{ElectRunArgs, ElectStatusArgs};
use crate::error::CliError;
use crate::generate_cmd::CompletionsArgs;
use crate::global::parse::parse_timeout;
use crate::global::{Global, QueueArg, Topology};
use crate::id_cmd::IdCommand;
use crate::lock_cmd::{AcquireArgs, ExtendArgs, ReleaseArgs, StatusArgs};
use crate::queue_cmd::{
    CheckArgs, ConfigArgs, DeadArgs, EventsArgs, ListArgs, ProgressArgs, PurgeArgs, PushArgs,
    RemoveArgs, ResultArgs, RetryArgs, ScheduleArgs, StatsArgs, TaskArgs, UnscheduleArgs,
};
use crate::run_cmd::RunArgs;
use crate::rwlock_cmd::{RwRunArgs, RwStatusArgs};
use crate::seckill::SeckillArgs;
use crate::semaphore_cmd::SemaphoreCommand;
use crate::serve::ServeArgs;
use crate::work_cmd::WorkArgs;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  a normal \"no\": not acquired before the deadline, not the holder, expired,
     a queue task not removed (its score changed or it is not waiting),
     a queue check (`queue check`, `check`) that found a violation
  2  usage error or invalid input
  3  Redis unavailable, backend or environment failure
  4  the lock (permits) was lost while `lock run`'s (`semaphore run`'s) command ran
  `lock run` otherwise exits with the command's code (128+N if killed by signal N);
  `queue work` exits 127/126 when its command cannot be found / run";

/// `dlm --version`: the crate's version and the git commit it was built
/// from ("unknown" without git; see build.rs).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("DLM_GIT_COMMIT"), ")");

/// `dlm`: distributed locks on Redis from the shell.
#[derive(Debug, Parser)]
#[command(name = "dlm", version = VERSION, about, after_help = EXIT_CODES)]
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

    /// Redlock (several --redis): the deadline of one node's answer to a lock
    /// request, e.g. 50ms. Default: 1% of the lock's TTL, at least 50ms, at
    /// most --timeout. A request is decided as soon as a majority answered
    /// alike, so a frozen node costs at most this much.
    #[arg(long, value_name = "D", global = true,
          value_parser = parse_timeout, allow_hyphen_values = true)]
    pub node_timeout: Option<Duration>,

    /// The --redis URLs (one or more) are seed nodes of one Redis Cluster;
    /// every command works on it. Env: DLM_CLUSTER=1.
    #[arg(long, global = true, env = "DLM_CLUSTER")]
    pub cluster: bool,

    /// The --redis URLs are Sentinels: use the master they call NAME, and
    /// follow it across failovers (a password for the master goes in the
    /// first URL). Env: DLM_SENTINEL.
    #[arg(long, value_name = "NAME", global = true, env = "DLM_SENTINEL")]
    pub sentinel: Option<String>,

    /// TLS (rediss:// URLs): trust the server certificates this CA (PEM)
    /// signed instead of the system's roots. Env: DLM_CACERT.
    #[arg(
        long = "cacert",
        id = "tls_cacert",
        value_name = "FILE",
        global = true,
        env = "DLM_CACERT"
    )]
    pub cacert: Option<PathBuf>,

    /// TLS: the client certificate (PEM) for mutual TLS; needs --key.
    /// Env: DLM_CERT.
    #[arg(
        long = "cert",
        id = "tls_cert",
        value_name = "FILE",
        global = true,
        env = "DLM_CERT"
    )]
    pub cert: Option<PathBuf>,

    /// TLS: the client certificate's private key (PEM). Env: DLM_KEY.
    #[arg(
        long = "key",
        id = "tls_key",
        value_name = "FILE",
        global = true,
        env = "DLM_KEY"
    )]
    pub key: Option<PathBuf>,

    /// Worker threads of dlm's async runtime (1..=256). Default 1: dlm's
    /// work is waiting on Redis, and on a small machine that Redis shares,
    /// a second thread mostly adds wake-ups: the lock bench at 64 tasks on 2
    /// cores ran 1.5x the cycles at 0.8x the Redis CPU per cycle with one
    /// thread (BENCHMARKS.md). Env: DLM_THREADS.
    #[arg(long, value_name = "N", global = true, env = "DLM_THREADS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,

    /// Use the server's native commands where it has them (Valkey 9:
    /// DELIFEQ releases, SET IFEQ extends, without Lua); false: dlm's
    /// scripts everywhere (to rule the native paths out, or to compare).
    /// Env: DLM_NATIVE_COMMANDS.
    #[arg(long, value_name = "BOOL", global = true, env = "DLM_NATIVE_COMMANDS",
          default_value_t = true, action = ArgAction::Set)]
    pub native_commands: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
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
            node_timeout: self.node_timeout,
            topology: self.topology()?,
            tls: self.tls()?,
            threads: usize::from(self.threads),
            native_commands: self.native_commands,
        })
    }

    fn topology(&self) -> Result<Topology, CliError> {
        match (self.cluster, &self.sentinel) {
            (true, Some(_)) => Err(CliError::Usage(
                "--cluster and --sentinel exclude each other: a deployment is one or the other"
                    .into(),
            )),
            (true, None) => Ok(Topology::Cluster),
            (false, Some(name)) if name.is_empty() => {
                Err(CliError::Usage("--sentinel needs the master's name".into()))
            }
            (false, Some(name)) => Ok(Topology::Sentinel(name.clone())),
            (false, None) => Ok(Topology::Plain),
        }
    }

    /// The TLS settings, each file checked readable (exit 2 otherwise).
    fn tls(&self) -> Result<Option<dlm::TlsConfig>, CliError> {
        if self.cacert.is_none() && self.cert.is_none() && self.key.is_none() {
            return Ok(None);
        }
        for (flag, path) in [
            ("--cacert", &self.cacert),
            ("--cert", &self.cert),
            ("--key", &self.key),
        ] {
            if let Some(p) = path
                && let Err(e) = std::fs::File::open(p)
            {
                return Err(CliError::Usage(format!("{flag} {}: {e}", p.display())));
            }
        }
        let mut tls = dlm::TlsConfig::default();
        if let Some(ca) = &self.cacert {
            tls = tls.ca(ca);
        }
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => tls = tls.client_cert(cert, key),
            (None, None) => {}
            _ => {
                return Err(CliError::Usage(
                    "--cert and --key go together (a client certificate and its key)".into(),
                ));
            }
        }
        Ok(Some(tls))
    }
}

/// The command groups.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Acquire, release, extend and inspect locks; run a command under a lock.
    #[command(subcommand)]
    Lock(LockCommand),
    /// A counting semaphore with leased permits: run a command holding some.
    #[command(subcommand)]
    Semaphore(SemaphoreCommand),
    /// A reliable task queue: push, inspect, and work off tasks with a command.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Unique, increasing ids across processes and hosts (seed 001).
    #[command(subcommand)]
    Id(IdCommand),
    /// Measure lock and queue throughput and latency.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Show what a lock is for, on a private redis-server.
    #[command(subcommand)]
    Demo(DemoCommand),
    /// Check the deployment given with --redis: run a lock or queue
    /// workload and judge its history (exit 1 when a violation is found,
    /// with its evidence; 3 when Redis cannot be reached).
    #[command(subcommand)]
    Check(CheckCommand),
    /// The nemesis soak: every lock kind and the queue under faults, judged
    /// by two checkers, on private servers.
    ///
    /// Private servers on free loopback ports (a standalone server behind a
    /// fault proxy, a Redis Cluster, a Sentinel setup): every lock kind and
    /// the queue at once, from the library, the CLI and Python, under faults
    /// on a seeded random schedule (partitions, latency, resets, SIGSTOP and
    /// SIGKILL of its own subprocesses, Redis restarts with AOF, Cluster and
    /// Sentinel failovers, clock jumps of its subprocesses with libfaketime);
    /// the homegrown and the linearizability checkers
    /// judge the histories every --check-every and at the end. --break
    /// no-persistence|paused-holder breaks an assumption on purpose: its
    /// violations are reported as expected and named. Exit 0: no violation
    /// where the assumptions hold (and every broken one caught); 1: a
    /// violation; 2: bad usage; 3: setup failed.
    Soak(crate::soak::SoakArgs),
    /// Serve a web dashboard (overview, queues, dead letters, live workers,
    /// locks), a JSON API (/api/queues, /api/queues/NAME,
    /// /api/queues/NAME/workers, /api/locks), Prometheus metrics (/metrics) and /healthz for the
    /// queues and locks of one Redis, until SIGINT/SIGTERM (exit 0; 3 when
    /// Redis is unreachable at start). Mutating actions are POSTs with a
    /// CSRF token, each confirmed first; beyond loopback they need
    /// --admin-token, without which the dashboard is read-only.
    Serve(ServeArgs),
    /// Run a command under a read share or the write lock of a read-write lock.
    #[command(subcommand)]
    Rwlock(RwlockCommand),
    /// Leader election: run a command only while this process leads, or
    /// show who leads.
    #[command(subcommand)]
    Elect(ElectCommand),
    /// Print the shell completion script for bash, zsh or fish to stdout,
    /// e.g. `dlm completions bash > ~/.local/share/bash-completion/completions/dlm`.
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, e.g. `dlm man > dlm.1; man ./dlm.1`.
    Man,
}

/// `dlm elect ...`
#[derive(Debug, Subcommand)]
pub enum ElectCommand {
    /// Campaign until elected, then run CMD while leading.
    ///
    /// One leader at a time among every `dlm elect run NAME` (on any host):
    /// the others wait, woken at once when the leader resigns, or when its
    /// lease (--ttl) runs out if it died. CMD gets DLM_TERM (the term: a
    /// fencing token, strictly increasing across leaders; also DLM_FENCE),
    /// DLM_LEADER_ID and DLM_ELECTION. The leadership is renewed every TTL/3;
    /// when it is lost, CMD gets SIGTERM (SIGKILL 10 s later) and dlm exits 4.
    /// When CMD exits, dlm resigns and exits with CMD's code (128+N if signal
    /// N killed it); SIGINT, SIGTERM and SIGHUP are forwarded to CMD, and
    /// before election they end the campaign (exit 128+N).
    Run(ElectRunArgs),
    /// Show who leads: its id, term and lease left (exit 0 whether or not
    /// anyone leads). JSON: {"name","leader","term","ttl_ms","last_term"},
    /// leader, term and ttl_ms null when nobody leads.
    Status(ElectStatusArgs),
}

/// `dlm rwlock ...`
#[derive(Debug, Subcommand)]
pub enum RwlockCommand {
    /// Run a command while holding a read share (--read) or the write lock
    /// (--write): many readers or one writer, with writer preference.
    ///
    /// Same contract as `dlm lock run`: renewed every TTL/3 while CMD runs,
    /// released when it exits; exit 1 when not acquired before --wait, 4 when
    /// lost while CMD ran (CMD got SIGTERM), CMD's own code otherwise. CMD gets
    /// DLM_FENCE, DLM_LOCK_KEY and DLM_LOCK_NAME; SIGINT, SIGTERM and SIGHUP
    /// are forwarded to it.
    Run(RwRunArgs),
    /// Show whether a writer holds the lock, how many readers share it and
    /// how many writers wait (exit 0 either way). JSON: {"name","writer"
    /// (true/false),"readers","waiting_writers","writer_ttl_ms","fence"}.
    Status(RwStatusArgs),
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
    /// (exit 0 either way); with --fair, a fair lock's, with the waiters in
    /// line (`waiting`).
    Status(StatusArgs),
    /// Run a command while holding a lock: a distributed flock(1).
    ///
    /// Several NAMEs are taken all or none (a multi-lock, in one global order
    /// so that crossing orders never deadlock); CMD then gets DLM_FENCE (the
    /// first name's token) and DLM_FENCES (every name's, comma-separated).
    ///
    /// The lock is renewed every TTL/3 while CMD runs and released when it
    /// exits; dlm exits with CMD's exit code (128+N if a signal N killed it).
    /// CMD gets DLM_FENCE (the fencing token) and DLM_LOCK_KEY in its
    /// environment. SIGINT, SIGTERM and SIGHUP are forwarded to CMD. If the
    /// lock is lost while CMD runs, CMD gets SIGTERM (SIGKILL 10 s later) and
    /// dlm exits 4. With --fair, waiters get the lock in arrival order
    /// across processes (a fair lock: a waiter that died stalls the line
    /// for at most its 3 s queue lease).
    Run(RunArgs),
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
    /// Id generator throughput (one INCR per id, batches, reserved blocks)
    /// and rate limiter overhead. Without --redis (and DLM_REDIS_URL) it
    /// runs against a private redis-server it starts.
    Ids(BenchIdsArgs),
    /// Scaling curves, as JSON lines in --out for scripts/plot-curves.py:
    /// lock cycles/s and p99 against concurrency (distinct and contended),
    /// memory and watchdog scripts/s against locks held at once, queue
    /// enqueue/process rates and claim p99 against waiting tasks, and the
    /// process rate of 1, 4, 16 worker processes. Always on a private
    /// redis-server it starts (and flushes between points); shows progress
    /// on a terminal. See scripts/bench-curves.sh.
    Curves(BenchCurvesArgs),
    /// One no-op worker drains --queue until it is empty, then prints
    /// {"acked","secs"} (the worker processes of `bench curves`).
    #[command(hide = true)]
    Drain(BenchDrainArgs),
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
    /// Show up to N due tasks without taking them, in the order a worker
    /// claims them: priority, then due time; tasks parked behind their
    /// group's limit last (JSON lines, always).
    Peek(ListArgs),
    /// Take up to N due tasks out of the queue, in peek's order, without a
    /// lease (JSON lines, always). A popped task is gone: use `queue work`
    /// for at-least-once.
    Pop(ListArgs),
    /// Remove a waiting task only if its due time still equals SCORE (as
    /// peek printed it). Exit 1 when it was re-enqueued since or is absent.
    Remove(RemoveArgs),
    /// Show the queue's counts (JSON also "paused", "in_flight" and "blocked").
    /// With --shards, one line per shard first (tag, slot, counts).
    Stats(StatsArgs),
    /// Show one task: its state (blocked, waiting, delayed, in_flight, dead,
    /// completed or unknown), attempts, progress, dependencies and dependents,
    /// result size and last error (JSON with --json: {"id","state","attempts",
    /// "progress","message","deps","dependents","result_bytes","error",...}).
    /// Exit 1 when the queue has no such task.
    Task(TaskArgs),
    /// Check the queue's invariants against its Redis state (read only):
    /// every task in one state, group in-flight counts, dependency counts
    /// and edges, leases, attempts, no orphaned data. Prints one line per
    /// violation (`INVARIANT "ID": DETAIL`) and a summary line; with --json
    /// one object {"queue","ok","complete","violations":[{"invariant","id",
    /// "detail"}],"counts":{"waiting","delayed","parked","in_flight",
    /// "blocked","dead","done"}}. Exit 0 when no violation was found, 1
    /// when any was.
    Check(CheckArgs),
    /// Print the queue's event log, one line per task event (added, claimed,
    /// progress, completed, failed, dead, released); with --follow, go on as
    /// they happen (woken, not polling). JSON lines with --json:
    /// {"event","id","ts_ms","cursor"} plus "error", "progress", "message"
    /// when the event has them. The log is off until `queue config --events N`.
    Events(EventsArgs),
    /// List the queue's live workers: every running `queue work` (and
    /// library Worker) heartbeats a record of itself with a TTL (three beats,
    /// a beat every third of its lease, at most every 5 s), so a killed one
    /// drops out by itself; a beat comes within a second of a task starting
    /// or settling. A table (id, host, pid, uptime, busy/concurrency,
    /// processed, failed, last beat, tasks in flight); with --json one JSON
    /// object per line and worker, {"queue","id","host","pid","started_ms",
    /// "concurrency","busy","in_flight","processed","failed","last_beat_ms",
    /// "beat_age_ms","expires_ms","ttl_ms","stopping","version"}
    /// ("in_flight": an array of task ids; no line when no worker is live).
    /// Exit 0.
    Workers(QueueArg),
    /// Pause the queue: every worker (in any process) stops claiming within
    /// one idle wait; tasks in flight finish, enqueues go on. Prints
    /// `paused QUEUE` (JSON {"queue","paused":true,"was_paused"}).
    Pause(QueueArg),
    /// Let workers claim again, waking idle ones at once. Prints
    /// `resumed QUEUE` (JSON {"queue","paused":false,"was_paused"}).
    Resume(QueueArg),
    /// Show the queue's settings, stored in Redis and followed by every
    /// worker: group concurrency, rate limit, completed history, how long
    /// results are kept (JSON with --json: {"queue","group_concurrency",
    /// "rate":{"n","period_ms"}|null,"keep_completed","keep_results_ms",
    /// "keep_results_bytes","shards","layout","draining"}).
    /// With flags, change them first: --group-concurrency 0, --rate off,
    /// --keep-completed 0 and --keep-results 0 remove one; --clear removes
    /// them all. --shards K spreads the queue over K shards (raise, or
    /// lower: refused with exit 1 while the removed shards hold tasks,
    /// unless --drain; the same command again finishes the drain).
    Config(ConfigArgs),
    /// Run a command once per task until stopped (SIGINT/SIGTERM: graceful).
    ///
    /// CMD gets the payload on stdin (empty when none) and DLM_QUEUE,
    /// DLM_TASK_ID, DLM_TASK_ATTEMPT, DLM_TASK_SCORE, DLM_TASK_PRIORITY,
    /// DLM_TASK_FENCE (also as DLM_FENCE), (for a task with a group)
    /// DLM_TASK_GROUP, and the Redis options dlm was given (DLM_REDIS_URL,
    /// ...) in its environment, so `dlm queue progress "$DLM_QUEUE"
    /// "$DLM_TASK_ID" PCT MSG` works inside it. CMD's stdout becomes the
    /// task's result (`queue result`; at most --result-bytes, more fails the
    /// task; --result-bytes 0: stdout is dlm's, no result); its stderr is
    /// dlm's. Exit status 0 acks the task; anything else (or a signal)
    /// fails it: it is retried after a backoff, and goes to the dead-letter
    /// set after --max-attempts. Past its time limit (push's or work's
    /// --task-timeout) CMD's group gets SIGTERM, SIGKILL after --grace, and
    /// the task fails with "timed out". Each
    /// CMD runs in its own process group. On SIGINT/SIGTERM no new task is
    /// started; running ones get --grace to finish, then their process
    /// groups are killed and their tasks given back at once (further signals
    /// are ignored meanwhile); dlm then prints a summary as its last line on
    /// stdout and exits 0. A dlm killed with SIGKILL leaves its commands
    /// running; their tasks come back when their leases expire and may run
    /// twice (at-least-once). While it runs, it heartbeats a record of
    /// itself (`queue workers`; name it with --worker-id).
    Work(WorkArgs),
    /// Print the result task ID left (its command's stdout, as bytes; JSON:
    /// {"queue","id","payload"} with "payload_base64":true when not UTF-8).
    /// Exit 1 when there is none: not finished (within --wait), finished
    /// without output, failed, or forgotten (see config --keep-results).
    Result(ResultArgs),
    /// Record how far a running task is: PCT (0 to 100) and MESSAGE, under
    /// the lease --fence (default $DLM_TASK_FENCE, which `queue work` gives
    /// its command). Exit 1 when that lease is stale (expired, taken over
    /// or finished), 2 on bad input. Without PCT: print the task's progress
    /// (`PCT% MESSAGE`; exit 1 when none).
    Progress(ProgressArgs),
    /// Show up to N dead tasks, oldest death first (JSON lines, always).
    Dead(DeadArgs),
    /// Move dead tasks back to the queue, due now, attempts reset; prints how many.
    Retry(RetryArgs),
    /// Delete tasks for good; prints how many. Only `--dead` for now.
    Purge(PurgeArgs),
    /// Add (or change) a repeating task: one task ID@TICK per tick (TICK in
    /// ms since the epoch), fired by the queue's workers (`queue work`),
    /// never twice for one tick however many run. After downtime the
    /// earliest missed tick runs once, then the schedule resumes on its
    /// grid. The same spec again changes nothing. Exit 2 on a bad interval
    /// or cron expression (nothing written).
    Schedule(ScheduleArgs),
    /// List the queue's repeating tasks, soonest next tick first (JSON lines,
    /// always).
    Schedules(QueueArg),
    /// Remove a repeating task (tasks it enqueued stay); exit 1 when there
    /// was none.
    Unschedule(UnscheduleArgs),
}

/// `dlm demo ...`
#[derive(Debug, Subcommand)]
pub enum DemoCommand {
    /// The flash sale: a crowd of buyers, a few phones, once per strategy
    /// (naive, lock, redlock, optimistic, script, queue). Starts private
    /// redis-servers unless --redis is given. Exit 0 only if every strategy
    /// but naive sold exactly min(stock, buyers) and decided each order once.
    Seckill(SeckillArgs),
    /// Lost updates without a lock, none with one: tasks in one process,
    /// then processes with `dlm lock run`. Starts a private redis-server
    /// unless --redis is given.
    Lock,
    /// Seed 003's task dispatch: review tasks handed to editors one at a
    /// time; some editors walk away, their tasks come back after the time
    /// limit and others finish them. Prints a table per editor and totals;
    /// exit 0 only if every task was done (acked) exactly once. Starts a
    /// private redis-server unless --redis is given.
    Dispatch(DispatchArgs),
    /// One read-modify-write increment of KEY (used by `demo lock`).
    #[command(hide = true)]
    IncrementKey {
        /// The counter's key.
        key: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
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
