//! `dlm lock run NAME --ttl D [--fair] -- CMD...`: a distributed flock(1),
//! and the runner every `... run` command shares ([`run_while_held`]).
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
    /// First come, first served: wait in a queue in Redis and get the lock
    /// in arrival order, across processes (a fair lock, keys dlm:fair:{NAME}).
    #[arg(long)]
    pub fair: bool,
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

/// What [`run_while_held`] runs a command under: a held lease of any
/// primitive (a lock, a fair lock, a read share, a write lock, a permit).
pub struct HeldLease<'a> {
    /// The primitive's name, for messages and `DLM_LOCK_NAME`.
    pub name: &'a str,
    /// The Redis key of the lease, for `DLM_LOCK_KEY`.
    pub key: &'a str,
    /// The fencing token, for `DLM_FENCE` (`None` under Redlock).
    pub fence: Option<dlm::Fence>,
    /// Fires when the lease is lost while the command runs.
    pub lost: dlm::LostSignal,
}

/// Wait for `acquire` unless a signal comes first: `Ok(Err(code))` is the
/// exit code for that signal (128+N: as if it had killed us; an acquire in
/// flight that lands anyway is freed by its TTL).
pub async fn acquire_or_signal<T>(
    signals: &mut Signals,
    acquire: impl std::future::Future<Output = dlm::Result<T>>,
) -> Result<Result<T, u8>, CliError> {
    tokio::select! {
        r = acquire => Ok(Ok(r?)),
        sig = signals.recv() => Ok(Err(u8::try_from(128 + sig).unwrap_or(255))),
    }
}

/// The shared runner of `lock run`, `rwlock run` (and any `... run`): run
/// `command` with `DLM_FENCE`, `DLM_LOCK_KEY` and `DLM_LOCK_NAME` in its
/// environment while `held` is held, forward SIGINT/SIGTERM/SIGHUP to it,
/// send it SIGTERM (SIGKILL after [`KILL_GRACE`]) if the lease is lost, then
/// give the lease back with `release`. Returns the command's exit code, or
/// [`CliError::Lost`] (exit 4) when the lease was lost while it ran.
pub async fn run_while_held<F>(
    global: &Global,
    client: &dlm::Client,
    held: HeldLease<'_>,
    command: &[String],
    signals: &mut Signals,
    release: impl FnOnce() -> F,
) -> Result<u8, CliError>
where
    F: std::future::Future<Output = dlm::Result<()>>,
{
    let name = held.name;
    let Some((program, cmd_args)) = command.split_first() else {
        return Err(CliError::Usage("no command given after --".into()));
    };
    tracing::debug!(name, fence = ?held.fence, "acquired; starting the command");
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(cmd_args)
        .env("DLM_LOCK_KEY", held.key)
        .env("DLM_LOCK_NAME", name)
        .kill_on_drop(true);
    // On one Redis there is always a fencing token (Redlock has none).
    match held.fence {
        Some(fence) => cmd.env("DLM_FENCE", fence.to_string()),
        None => cmd.env_remove("DLM_FENCE"),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(source) => {
            let _ = release().await;
            return Err(CliError::Spawn {
                program: program.clone(),
                source,
            });
        }
    };

    let lost = held.lost;
    let mut lost_seen = false;
    let mut kill_at: Option<Instant> = None;
    let waited = loop {
        let kill_deadline = kill_at.unwrap_or_else(|| Instant::now() + KILL_GRACE);
        tokio::select! {
            // Lost first: when the lease went away as the command finished,
            // report the loss (its work may have overlapped another holder).
            biased;
            _ = lost.lost(), if !lost_seen => {
                lost_seen = true;
                tracing::debug!(name, "lease lost while the command ran; sending it SIGTERM");
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
            let _ = release().await;
            return Err(CliError::Io {
                what: "waiting for the command",
                source: e,
            });
        }
    };
    let code = exit_code(status);
    // Token-checked: removes nothing that is not ours.
    let released = release().await;
    settle_release(client, global).await;
    if lost_seen {
        return Err(CliError::Lost { name: name.into() });
    }
    match released {
        Ok(()) => Ok(code),
        Err(e) if e.is_lock_lost() => Err(CliError::Lost { name: name.into() }),
        Err(e) => {
            tracing::warn!(name, error = %e, "release failed; the TTL will free the lease");
            Ok(code)
        }
    }
}

/// A guard [`run_guarded`] can run a command under: every primitive's.
pub trait Guarded {
    /// The Redis key of the lease.
    fn lease_key(&self) -> &str;
    /// Its fencing token (`None` under Redlock).
    fn lease_fence(&self) -> Option<dlm::Fence>;
    /// Fires when it is lost.
    fn lease_lost(&self) -> dlm::LostSignal;
    /// Give it back, token-checked.
    fn give_back(self) -> impl std::future::Future<Output = dlm::Result<()>>;
}

impl Guarded for dlm::LockGuard {
    fn lease_key(&self) -> &str {
        self.key()
    }
    fn lease_fence(&self) -> Option<dlm::Fence> {
        self.fence()
    }
    fn lease_lost(&self) -> dlm::LostSignal {
        self.lost_signal()
    }
    async fn give_back(self) -> dlm::Result<()> {
        self.release().await.map(|_| ())
    }
}

/// The guards of the primitives on one Redis (always a fencing token).
macro_rules! guarded {
    ($($guard:ty),*) => {$(
        impl Guarded for $guard {
            fn lease_key(&self) -> &str {
                self.key()
            }
            fn lease_fence(&self) -> Option<dlm::Fence> {
                Some(self.fence())
            }
            fn lease_lost(&self) -> dlm::LostSignal {
                self.lost_signal()
            }
            async fn give_back(self) -> dlm::Result<()> {
                self.release().await
            }
        }
    )*};
}
guarded!(dlm::FairGuard, dlm::ReadGuard, dlm::WriteGuard);

/// [`run_while_held`] under `guard`, released when the command is done.
pub async fn run_guarded<G: Guarded>(
    global: &Global,
    client: &dlm::Client,
    name: &str,
    guard: G,
    command: &[String],
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let key = guard.lease_key().to_string();
    let held = HeldLease {
        name,
        key: &key,
        fence: guard.lease_fence(),
        lost: guard.lease_lost(),
    };
    run_while_held(global, client, held, command, signals, || guard.give_back()).await
}

/// `dlm lock run` (`--fair`: in arrival order).
pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, CliError> {
    let name = args.target.name.as_str();
    if args.command.is_empty() {
        return Err(CliError::Usage("no command given after --".into()));
    }
    args.target.check()?;
    if args.fair && args.target.raw_key {
        return Err(CliError::Usage(
            "--fair has its own keys: it cannot take --raw-key".into(),
        ));
    }
    // From here on SIGINT/SIGTERM/SIGHUP no longer kill dlm: they abort the
    // wait for the lock, or are forwarded to the command.
    let mut signals = Signals::install()?;
    let client = connect_nodes(&global.urls(), global).await?;
    let opts = dlm::LockOptions::new(args.ttl)
        .wait(args.wait)
        .watchdog(true);
    let (sig, command) = (&mut signals, &args.command);
    if args.fair {
        let fair = client.fair_lock(name);
        return match acquire_or_signal(sig, fair.acquire(&opts)).await? {
            Ok(g) => run_guarded(global, &client, name, g, command, sig).await,
            Err(code) => Ok(code),
        };
    }
    let lock = args.target.lock(&client);
    match acquire_or_signal(sig, lock.acquire(&opts)).await {
        Ok(Ok(g)) => run_guarded(global, &client, name, g, command, sig).await,
        Ok(Err(code)) => Ok(code),
        Err(e) => {
            // A failed Redlock attempt's clean-up: at most one per-node timeout.
            if let Some(t) = lock.node_timeout(&opts) {
                client.settle(t).await;
            }
            Err(e)
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
