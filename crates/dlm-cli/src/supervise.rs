//! Running a command under a lease (`lock run`, `semaphore run`): spawn it
//! with its environment, forward SIGINT/SIGTERM/SIGHUP to it, and when the
//! lease is lost send it SIGTERM (SIGKILL after [`KILL_GRACE`]).

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::Child;
use tokio::time::Instant;

use crate::error::CliError;
use crate::signals::Signals;

/// How long CMD gets to exit after SIGTERM (lease lost) before SIGKILL.
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

/// How a supervised command ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// Its exit code (128+N if killed by signal N).
    pub code: u8,
    /// The lease was lost while it ran (it was sent SIGTERM).
    pub lost: bool,
}

/// Run `command` (program and arguments) with `env` until it exits,
/// forwarding signals, and stopping it if `lost` completes first. `what`
/// names the lease in logs.
pub async fn run_child(
    command: &[String],
    env: &[(&str, String)],
    lost: impl Future<Output = ()>,
    signals: &mut Signals,
    what: &str,
) -> Result<Ended, CliError> {
    let Some((program, args)) = command.split_first() else {
        return Err(CliError::Usage("no command given after --".into()));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_remove("DLM_FENCE").kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|source| CliError::Spawn {
        program: program.clone(),
        source,
    })?;
    let mut lost = std::pin::pin!(lost);
    let mut lost_seen = false;
    let mut kill_at: Option<Instant> = None;
    let waited = loop {
        let kill_deadline = kill_at.unwrap_or_else(|| Instant::now() + KILL_GRACE);
        tokio::select! {
            // Lost first: when the lease went away as the command finished,
            // report the loss (its work may have overlapped another holder).
            biased;
            _ = &mut lost, if !lost_seen => {
                lost_seen = true;
                tracing::debug!(what, "lease lost while the command ran; sending it SIGTERM");
                send_signal(&child, libc::SIGTERM);
                kill_at = Some(Instant::now() + KILL_GRACE);
            }
            r = child.wait() => break r,
            _ = tokio::time::sleep_until(kill_deadline), if kill_at.is_some() => {
                tracing::warn!(what, "the command ignored SIGTERM for {KILL_GRACE:?}; sending SIGKILL");
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
    // Should not fail; the child is killed when dropped (kill_on_drop).
    let status = waited.map_err(|source| CliError::Io {
        what: "waiting for the command",
        source,
    })?;
    Ok(Ended {
        code: exit_code(status),
        lost: lost_seen,
    })
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
