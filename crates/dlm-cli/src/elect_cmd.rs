//! `dlm elect run NAME [--id ID] [--ttl D] -- CMD...` and
//! `dlm elect status NAME`: leader election from the shell.
//!
//! `run` campaigns until elected (or a signal), then runs CMD with
//! `DLM_TERM`, `DLM_LEADER_ID` and `DLM_ELECTION` (and `lock run`'s
//! `DLM_FENCE` = the term, `DLM_LOCK_NAME`, `DLM_LOCK_KEY`) while the
//! watchdog renews the leadership every TTL/3. When the leadership is lost,
//! CMD gets SIGTERM (SIGKILL after [`crate::supervise::KILL_GRACE`]) and
//! dlm exits 4; when CMD exits, dlm resigns (waking the other candidates at
//! once) and exits with CMD's code.

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::Global;
use crate::global::parse::{parse_name, parse_ttl};
use crate::global::target::connect_nodes;
use crate::output;
use crate::run_cmd::{Guarded, acquire_or_signal, run_guarded};
use crate::signals::Signals;

/// The lease of a leadership unless `--ttl` says otherwise.
pub const DEFAULT_ELECTION_TTL: Duration = Duration::from_secs(10);

/// How long one campaign call waits before the next (the campaign goes on
/// until elected; this only bounds one library call).
const CAMPAIGN_ROUND: Duration = Duration::from_secs(24 * 3600);

/// `dlm elect run`
#[derive(Debug, Clone, Args)]
pub struct ElectRunArgs {
    /// The election's name (1 to 1024 bytes); its keys are dlm:elect:{NAME}*.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
    /// This candidate's id, shown by `elect status` and given to CMD as
    /// DLM_LEADER_ID (default: HOST:PID).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// The leadership's lease (10ms to 7d; default 10s), renewed every TTL/3
    /// while CMD runs: how long the others wait when this dlm dies.
    #[arg(long, value_name = "D", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Option<Duration>,
    /// The command and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `dlm elect status`
#[derive(Debug, Clone, Args)]
pub struct ElectStatusArgs {
    /// The election's name.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,
}

/// This process's default candidate id: `HOST:PID`.
fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// A leadership is a lease `run_guarded` runs a command under.
impl Guarded for dlm::Leadership {
    fn lease_name(&self) -> &str {
        self.name()
    }
    fn lease_key(&self) -> &str {
        self.key()
    }
    fn lease_fence(&self) -> dlm::Fence {
        self.term()
    }
    fn lease_lost(&self) -> dlm::LostSignal {
        self.lost_signal()
    }
    async fn give_back(self) -> dlm::Result<()> {
        self.resign().await
    }
    fn extra_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DLM_TERM", self.term().to_string()),
            ("DLM_LEADER_ID", self.id().to_string()),
            ("DLM_ELECTION", self.name().to_string()),
        ]
    }
}

/// `dlm elect run`.
pub async fn run(global: &Global, args: &ElectRunArgs) -> Result<u8, CliError> {
    let id = args.id.clone().unwrap_or_else(default_id);
    if id.is_empty() || id.len() > dlm::election::MAX_ID_LEN {
        return Err(CliError::Usage(format!(
            "--id must be 1 to {} bytes",
            dlm::election::MAX_ID_LEN
        )));
    }
    let mut signals = Signals::install()?;
    let client = connect_nodes(&global.urls(), global).await?;
    let election = client.election(args.name.clone());
    let opts = dlm::LockOptions::new(args.ttl.unwrap_or(DEFAULT_ELECTION_TTL))
        .wait(CAMPAIGN_ROUND)
        .watchdog(true);
    loop {
        match acquire_or_signal(&mut signals, election.campaign(&id, &opts)).await {
            Ok(Ok(leadership)) => {
                tracing::debug!(
                    term = leadership.term().get(),
                    "elected; starting the command"
                );
                return run_guarded(global, &client, leadership, &args.command, &mut signals).await;
            }
            Ok(Err(code)) => return Ok(code),
            // Another round: a campaign goes on until elected.
            Err(CliError::Dlm(dlm::Error::Busy { .. })) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `elect status --json`.
#[derive(Serialize)]
struct Status<'a> {
    name: &'a str,
    leader: Option<String>,
    term: Option<u64>,
    ttl_ms: Option<u64>,
    /// The last term granted (0: never), also when nobody leads now.
    last_term: u64,
}

/// `dlm elect status` (exit 0 whether or not somebody leads).
pub async fn status(global: &Global, args: &ElectStatusArgs) -> Result<u8, CliError> {
    let client = connect_nodes(&global.urls(), global).await?;
    let (leader, last_term) = client.election(args.name.clone()).status().await?;
    let out = Status {
        name: &args.name,
        term: leader.as_ref().map(|l| l.term),
        ttl_ms: leader
            .as_ref()
            .and_then(|l| l.ttl)
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        leader: leader.map(|l| l.id),
        last_term,
    };
    output::emit(global.json, &out, || {
        match (&out.leader, out.term, out.ttl_ms) {
            (Some(id), Some(term), Some(ttl)) => {
                format!(
                    "{}: {id} leads in term {term} (lease {ttl} ms left)",
                    out.name
                )
            }
            (Some(id), term, _) => {
                format!("{}: {id} leads in term {}", out.name, term.unwrap_or(0))
            }
            (None, ..) => format!("{}: nobody leads (last term {})", out.name, out.last_term),
        }
    })?;
    Ok(EXIT_OK)
}
