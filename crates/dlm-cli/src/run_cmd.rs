//! `dlm lock run NAME --ttl D -- CMD...`: a distributed flock(1).
//!
//! Acquire with a watchdog, run CMD with `DLM_FENCE` and `DLM_LOCK_KEY` in
//! its environment, forward SIGINT/SIGTERM/SIGHUP to it, release when it
//! exits and exit with its code. If the lock is lost meanwhile, CMD gets
//! SIGTERM (SIGKILL after [`KILL_GRACE`]) and `dlm` exits 4.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use tokio::process::Child;
use tokio::time::Instant;

use crate::error::CliError;
use crate::global::parse::{parse_ttl, parse_wait};
use crate::global::target::{connect_nodes, settle_release};
use crate::global::{Global, LockName};
use crate::signals::Signals;

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

/// How long CMD gets to exit after SIGTERM (lock lost) before SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(10);

/// Send `sig` to the child, if it has not been reaped yet.
#[allow(unsafe_code)]
fn send_signal(child: &Child, sig: libc::c_int) {
    // `id()` is None once the child has been reaped; until then its pid
    // cannot be reused, since only this task waits for it.
    let Some(pid) = child.id() else { return };
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; the
    // pid is our own unreaped child (a zombie at worst), never another process.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        tracing::debug!(pid, sig, error = %std::io::Error::last_os_error(), "kill failed");
    }
}

/// The shell convention: the exit code, or 128+N when killed by signal N.
pub fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(1);
    }
    match status.signal() {
        Some(sig) => u8::try_from(128 + sig).unwrap_or(255),
        None => 1,
    }
}

/// `dlm lock run`.
pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, CliError> {
    let name = args.target.name.as_str();
    let Some((program, cmd_args)) = args.command.split_first() else {
        return Err(CliError::Usage("no command given after --".into()));
    };
    // From here on SIGINT/SIGTERM/SIGHUP no longer kill dlm: they abort the
    // wait for the lock, or are forwarded to the command.
    args.target.check()?;
    let mut signals = Signals::install()?;
    let client = connect_nodes(&global.urls(), global).await?;
    let lock = args.target.lock(&client);
    let opts = dlm::LockOptions::new(args.ttl)
        .wait(args.wait)
        .watchdog(true);
    let guard = tokio::select! {
        r = lock.acquire(&opts) => match r {
            Ok(guard) => guard,
            Err(e) => {
                // A failed Redlock attempt's clean-up: at most one per-node timeout.
                if let Some(t) = lock.node_timeout(&opts) {
                    client.settle(t).await;
                }
                return Err(e.into());
            }
        },
        sig = signals.recv() => {
            // Not holding the lock yet (at worst an acquire in flight lands
            // and its TTL frees it): exit as if the signal had killed us.
            return Ok(u8::try_from(128 + sig).unwrap_or(255));
        }
    };
    tracing::debug!(name, fence = ?guard.fence(), "acquired; starting the command");

    let mut command = tokio::process::Command::new(program);
    command
        .args(cmd_args)
        .env("DLM_LOCK_KEY", guard.key())
        .env("DLM_LOCK_NAME", name)
        .kill_on_drop(true);
    // A lock on one Redis always has a fencing token (Redlock would have none).
    match guard.fence() {
        Some(fence) => command.env("DLM_FENCE", fence.to_string()),
        None => command.env_remove("DLM_FENCE"),
    };
    let spawned = command.spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(source) => {
            let _ = guard.release().await;
            return Err(CliError::Spawn {
                program: program.clone(),
                source,
            });
        }
    };

    let lost = guard.lost_signal();
    let mut lost_seen = false;
    let mut kill_at: Option<Instant> = None;
    let waited = loop {
        let kill_deadline = kill_at.unwrap_or_else(|| Instant::now() + KILL_GRACE);
        tokio::select! {
            // Lost first: when the lock went away as the command finished,
            // report the loss (its work may have overlapped another holder).
            biased;
            _ = lost.lost(), if !lost_seen => {
                lost_seen = true;
                tracing::debug!(name, "lock lost while the command ran; sending it SIGTERM");
                send_signal(&child, libc::SIGTERM);
                kill_at = Some(Instant::now() + KILL_GRACE);
            }
            r = child.wait() => break r,
            _ = tokio::time::sleep_until(kill_deadline), if kill_at.is_some() => {
                tracing::warn!(name, "the command ignored SIGTERM for {KILL_GRACE:?}; sending SIGKILL");
                if let Err(e) = child.start_kill() {
                    tracing::debug!(error = %e, "SIGKILL failed");
                }
                kill_at = None;
            }
            sig = signals.recv() => {
                tracing::debug!(sig, "forwarding signal to the command");
                send_signal(&child, sig);
            }
        }
    };

    let status = match waited {
        Ok(s) => s,
        Err(e) => {
            // Should not happen; the child is killed when dropped (kill_on_drop).
            let _ = guard.release().await;
            return Err(CliError::Io {
                what: "waiting for the command",
                source: e,
            });
        }
    };
    let code = exit_code(status);
    if lost_seen {
        // Token-checked: removes nothing that is not ours.
        let _ = guard.release().await;
        return Err(CliError::Lost { name: name.into() });
    }
    let released = guard.release().await;
    settle_release(&client, global).await;
    match released {
        Ok(_) => Ok(code),
        Err(e) if e.is_lock_lost() => Err(CliError::Lost { name: name.into() }),
        Err(e) => {
            tracing::warn!(name, error = %e, "release failed; the TTL will free the lock");
            Ok(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
    }
}
