//! `dlm`: distributed locks and a task queue on Redis from the shell,
//! benchmarks and a demo.
//!
//! `main` only parses, dispatches and turns the outcome into an exit code;
//! see [`cli`] for the commands and [`error`] for the exit codes.

mod bench;
mod bench_common;
mod bench_ids;
mod bench_queue;
mod bench_shards;
mod check;
mod cli;
mod demo;
mod dispatch;
mod elect_cmd;
mod error;
mod generate_cmd;
mod global;
mod held;
mod id_cmd;
mod lock_cmd;
mod output;
mod queue_cmd;
mod rng;
mod run_cmd;
mod rwlock_cmd;
mod seckill;
mod semaphore_cmd;
mod serve;
mod shard_view;
mod signals;
mod soak;
mod stats;
mod supervise;
mod work_cmd;

use std::process::ExitCode;
use std::time::Duration;

use clap::CommandFactory;

use crate::check::CheckCommand;
use crate::cli::{
    BenchCommand, Cli, Command, DemoCommand, ElectCommand, LockCommand, QueueCommand, RwlockCommand,
};
use crate::error::CliError;
use crate::global::Global;
use crate::id_cmd::IdCommand;
use crate::semaphore_cmd::SemaphoreCommand;

/// mimalloc instead of glibc's malloc: with several runtime threads, glibc
/// serialises frees of memory allocated on another thread on its arena lock
/// (measured: a third of lock throughput lost with 2 threads on 2 cores).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // clap prints its own usage errors and exits 2 (0 for --help/--version).
    let cli = Cli::parse_args();
    init_tracing();
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // A reader that went away (`dlm ... | head`) is not worth a message.
            if !e.is_broken_pipe() {
                output::error_line(&e.to_string());
            }
            e.exit_code()
        }
    };
    ExitCode::from(code)
}

/// Logs to stderr, filtered by `DLM_LOG` (default `warn`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DLM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn run(cli: Cli) -> Result<u8, CliError> {
    // Completions and the man page need neither Redis nor the global options.
    match &cli.command {
        Command::Completions(a) => return generate_cmd::completions(Cli::command(), a),
        Command::Man => return generate_cmd::man(Cli::command()),
        _ => {}
    }
    let global = cli.global()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(global.threads)
        .enable_all()
        .build()
        .map_err(CliError::io("starting the async runtime"))?;
    let result = runtime.block_on(dispatch(&global, cli.command));
    // Do not wait for background tasks (pub/sub, reconnects) at exit.
    runtime.shutdown_timeout(Duration::from_millis(100));
    result
}

async fn dispatch(global: &Global, command: Command) -> Result<u8, CliError> {
    match command {
        Command::Lock(LockCommand::Acquire(a)) => lock_cmd::acquire(global, &a).await,
        Command::Lock(LockCommand::Release(a)) => lock_cmd::release(global, &a).await,
        Command::Lock(LockCommand::Extend(a)) => lock_cmd::extend(global, &a).await,
        Command::Lock(LockCommand::Status(a)) => lock_cmd::status(global, &a).await,
        Command::Lock(LockCommand::Run(a)) => run_cmd::run(global, &a).await,
        Command::Semaphore(SemaphoreCommand::Run(a)) => semaphore_cmd::run(global, &a).await,
        Command::Semaphore(SemaphoreCommand::Status(a)) => semaphore_cmd::status(global, &a).await,
        Command::Semaphore(SemaphoreCommand::Set(a)) => semaphore_cmd::set(global, &a).await,
        Command::Queue(QueueCommand::Push(a)) => queue_cmd::push(global, &a).await,
        Command::Queue(QueueCommand::Peek(a)) => queue_cmd::list(global, &a, false).await,
        Command::Queue(QueueCommand::Pop(a)) => queue_cmd::list(global, &a, true).await,
        Command::Queue(QueueCommand::Remove(a)) => queue_cmd::remove(global, &a).await,
        Command::Queue(QueueCommand::Stats(a)) => queue_cmd::stats(global, &a).await,
        Command::Queue(QueueCommand::Task(a)) => queue_cmd::task(global, &a).await,
        Command::Queue(QueueCommand::Check(a)) => queue_cmd::check(global, &a).await,
        Command::Queue(QueueCommand::Events(a)) => queue_cmd::events(global, &a).await,
        Command::Queue(QueueCommand::Workers(a)) => queue_cmd::workers(global, &a).await,
        Command::Queue(QueueCommand::Pause(a)) => queue_cmd::pause(global, &a, true).await,
        Command::Queue(QueueCommand::Resume(a)) => queue_cmd::pause(global, &a, false).await,
        Command::Queue(QueueCommand::Config(a)) => queue_cmd::config(global, &a).await,
        Command::Queue(QueueCommand::Work(a)) => work_cmd::work(global, &a).await,
        Command::Queue(QueueCommand::Result(a)) => queue_cmd::result(global, &a).await,
        Command::Queue(QueueCommand::Progress(a)) => queue_cmd::progress(global, &a).await,
        Command::Queue(QueueCommand::Dead(a)) => queue_cmd::dead(global, &a).await,
        Command::Queue(QueueCommand::Retry(a)) => queue_cmd::retry(global, &a).await,
        Command::Queue(QueueCommand::Purge(a)) => queue_cmd::purge(global, &a).await,
        Command::Queue(QueueCommand::Schedule(a)) => queue_cmd::schedule(global, &a).await,
        Command::Queue(QueueCommand::Schedules(a)) => queue_cmd::schedules(global, &a).await,
        Command::Queue(QueueCommand::Unschedule(a)) => queue_cmd::unschedule(global, &a).await,
        Command::Id(IdCommand::Next(a)) => id_cmd::next(global, &a).await,
        Command::Bench(BenchCommand::Ids(a)) => bench_ids::bench_ids(global, &a).await,
        Command::Demo(DemoCommand::Dispatch(a)) => dispatch::run(global, &a).await,
        Command::Bench(BenchCommand::Lock(a)) => bench::bench_lock(global, &a, 1).await,
        Command::Bench(BenchCommand::Redlock(a)) => bench::bench_lock(global, &a, 5).await,
        Command::Bench(BenchCommand::Queue(a)) => bench_queue::bench_queue(global, &a).await,
        Command::Bench(BenchCommand::Curves(a)) => bench::bench_curves(global, &a).await,
        Command::Bench(BenchCommand::Drain(a)) => bench::bench_drain(global, &a).await,
        Command::Demo(DemoCommand::Seckill(args)) => seckill::run(global, &args).await,
        Command::Check(CheckCommand::Lock(a)) => check::check_lock(global, &a).await,
        Command::Check(CheckCommand::Queue(a)) => check::check_queue(global, &a).await,
        Command::Serve(a) => serve::serve(global, &a).await,
        Command::Soak(a) => soak::soak(global, &a).await,
        Command::Rwlock(RwlockCommand::Run(a)) => rwlock_cmd::run(global, &a).await,
        Command::Rwlock(RwlockCommand::Status(a)) => rwlock_cmd::status(global, &a).await,
        Command::Elect(ElectCommand::Run(a)) => elect_cmd::run(global, &a).await,
        Command::Elect(ElectCommand::Status(a)) => elect_cmd::status(global, &a).await,
        Command::Demo(DemoCommand::Lock) => demo::demo_lock(global).await,
        Command::Demo(DemoCommand::IncrementKey { key }) => demo::increment_key(global, &key).await,
        Command::Completions(a) => generate_cmd::completions(Cli::command(), &a),
        Command::Man => generate_cmd::man(Cli::command()),
    }
}
