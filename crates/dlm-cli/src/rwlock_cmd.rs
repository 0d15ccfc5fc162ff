//! `dlm rwlock status NAME`: the writer, readers and waiting writers.
//!
//! `dlm rwlock run NAME (--read | --write) --ttl D [--wait D] -- CMD...`:
//! run a command under a read share or the write lock of a read-write lock,
//! with `lock run`'s runner (same environment, signal forwarding and exit
//! codes: 1 not acquired before `--wait`, 4 lost while running, the
//! command's own code otherwise).

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::Global;
use crate::global::parse::{parse_name, parse_ttl, parse_wait};
use crate::global::target::connect_nodes;
use crate::output;
use crate::run_cmd::{acquire_or_signal, run_guarded};
use crate::signals::Signals;

/// `dlm rwlock run`
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["read", "write"])))]
pub struct RwRunArgs {
    /// The read-write lock's name (1 to 1024 bytes); its keys are dlm:rw:{NAME}:*.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
    /// Take a read share: other readers may run at the same time, writers may not.
    #[arg(long)]
    pub read: bool,
    /// Take the write lock: nobody else reads or writes meanwhile; new readers
    /// wait behind a waiting writer (writer preference).
    #[arg(long)]
    pub write: bool,
    /// Lease length (10ms to 7d), renewed every TTL/3 while CMD runs.
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

/// `dlm rwlock status`
#[derive(Debug, Clone, Args)]
pub struct RwStatusArgs {
    /// The read-write lock's name.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
}

/// `rwlock status --json`.
#[derive(Serialize)]
struct Status<'a> {
    name: &'a str,
    /// A writer holds it.
    writer: bool,
    readers: u64,
    waiting_writers: u64,
    /// The writer's lease left (null: no writer, or no expiry).
    writer_ttl_ms: Option<u64>,
    /// The last fencing token of the lock's slot (null: none yet).
    fence: Option<u64>,
}

/// `dlm rwlock status` (exit 0 whether held or not).
pub async fn status(global: &Global, args: &RwStatusArgs) -> Result<u8, CliError> {
    let client = connect_nodes(&global.urls(), global).await?;
    let s = client.rwlock(args.name.clone()).status().await?;
    let out = Status {
        name: &args.name,
        writer: s.writer,
        readers: s.readers,
        waiting_writers: s.waiting_writers,
        writer_ttl_ms: s
            .writer_ttl
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        fence: s.fence.map(dlm::Fence::get),
    };
    output::emit(global.json, &out, || {
        let who = if out.writer {
            "a writer holds it".to_string()
        } else {
            format!("{} reader(s)", out.readers)
        };
        format!(
            "{}: {who}, {} writer(s) waiting",
            out.name, out.waiting_writers
        )
    })?;
    Ok(EXIT_OK)
}

/// `dlm rwlock run`.
pub async fn run(global: &Global, args: &RwRunArgs) -> Result<u8, CliError> {
    let name = args.name.as_str();
    if args.command.is_empty() {
        return Err(CliError::Usage("no command given after --".into()));
    }
    let mut signals = Signals::install()?;
    let client = connect_nodes(&global.urls(), global).await?;
    let rw = client.rwlock(name);
    let opts = dlm::LockOptions::new(args.ttl)
        .wait(args.wait)
        .watchdog(true);
    let (sig, command) = (&mut signals, &args.command);
    if args.write {
        return match acquire_or_signal(sig, rw.write(&opts)).await? {
            Ok(g) => run_guarded(global, &client, g, command, sig).await,
            Err(code) => Ok(code),
        };
    }
    match acquire_or_signal(sig, rw.read(&opts)).await? {
        Ok(g) => run_guarded(global, &client, g, command, sig).await,
        Err(code) => Ok(code),
    }
}
