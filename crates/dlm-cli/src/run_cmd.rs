//! `dlm lock run NAME... --ttl D [--fair] -- CMD...`: a distributed
//! flock(1), and the runner other `... run` commands share
//! ([`acquire_or_signal`], [`run_guarded`]).
//!
//! Acquire with a watchdog (several names: all or none, as one multi-lock;
//! `--fair`: in arrival order),
//! run CMD with `DLM_FENCE`, `DLM_FENCES`, `DLM_LOCK_NAME` and
//! `DLM_LOCK_KEY` in its environment, forward SIGINT/SIGTERM/SIGHUP to it,
//! release when it exits and exit with its code. If a lock is lost
//! meanwhile, CMD gets SIGTERM (SIGKILL after
//! [`crate::supervise::KILL_GRACE`]) and `dlm` exits 4.

use std::time::Duration;

use clap::Args;

use crate::error::CliError;
use crate::global::Global;
use crate::global::parse::{parse_name, parse_ttl, parse_wait};
use crate::global::target::{connect_nodes, settle_release};
use crate::signals::Signals;
use crate::supervise::run_child;

/// `dlm lock run`
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The lock's name (1 to 1024 bytes); its key is dlm:lock:{NAME}.
    /// Several names: all of them are taken, or none (a multi-lock).
    #[arg(value_name = "NAME", value_parser = parse_name, required = true, num_args = 1..)]
    pub names: Vec<String>,
    /// Use NAME itself as the Redis key (to share the lock with redis-py,
    /// node-redlock or redsync on the same key); one NAME only.
    #[arg(long)]
    pub raw_key: bool,
    /// Lease length (10ms to 7d), renewed every TTL/3 while CMD runs; how
    /// long the lock outlives a crashed dlm.
    #[arg(long, value_name = "D", value_parser = parse_ttl, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// Keep trying to acquire for up to this long (default: try once; exit 1
    /// when not acquired).
    #[arg(long, value_name = "D", default_value = "0s", value_parser = parse_wait, allow_hyphen_values = true)]
    pub wait: Duration,
    /// First come, first served: wait in a queue in Redis and get the lock
    /// in arrival order, across processes (a fair lock, keys dlm:fair:{NAME};
    /// one NAME).
    #[arg(long)]
    pub fair: bool,
    /// The command and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// What `lock run` holds: one lock, several taken together, or a fair lock.
enum Held {
    One(dlm::LockGuard),
    Many(dlm::MultiGuard),
    Fair(dlm::FairGuard),
}

impl Held {
    /// The command's environment: `DLM_FENCE` is the first name's fencing
    /// token (a single integer, as scripts expect), `DLM_FENCES` every
    /// name's in the order given, comma-separated; `DLM_LOCK_NAME` and
    /// `DLM_LOCK_KEY` likewise (absent fences under Redlock).
    fn env(&self) -> Vec<(&'static str, String)> {
        let guards = match self {
            Held::One(g) => std::slice::from_ref(g),
            Held::Many(m) => m.guards(),
            Held::Fair(g) => return lease_env(g.name(), g.key(), Some(g.fence())),
        };
        let join =
            |f: fn(&dlm::LockGuard) -> String| guards.iter().map(f).collect::<Vec<_>>().join(",");
        let mut env = vec![
            ("DLM_LOCK_NAME", join(|g| g.name().to_string())),
            ("DLM_LOCK_KEY", join(|g| g.key().to_string())),
        ];
        if let Some(fence) = guards.first().and_then(dlm::LockGuard::fence) {
            env.push(("DLM_FENCE", fence.to_string()));
            env.push((
                "DLM_FENCES",
                join(|g| g.fence().map(|f| f.to_string()).unwrap_or_default()),
            ));
        }
        env
    }

    fn lost_signals(&self) -> Vec<dlm::LostSignal> {
        match self {
            Held::One(g) => vec![g.lost_signal()],
            Held::Many(m) => m.lost_signals(),
            Held::Fair(g) => vec![g.lost_signal()],
        }
    }

    async fn release(self) -> dlm::Result<()> {
        match self {
            Held::One(g) => g.release().await.map(|_| ()),
            Held::Many(m) => m.release().await,
            Held::Fair(g) => g.release().await,
        }
    }
}

/// What `lock run` asks for: one lock, several all or none, or a fair lock.
enum Wanted {
    One(dlm::Lock),
    Many(dlm::MultiLock),
    Fair(dlm::FairLock),
}

impl Wanted {
    async fn acquire(&self, opts: &dlm::LockOptions) -> dlm::Result<Held> {
        match self {
            Wanted::One(lock) => lock.acquire(opts).await.map(Held::One),
            Wanted::Many(multi) => multi.acquire(opts).await.map(Held::Many),
            Wanted::Fair(fair) => fair.acquire(opts).await.map(Held::Fair),
        }
    }
}

/// The command's environment under one lease: `DLM_LOCK_NAME`,
/// `DLM_LOCK_KEY`, and `DLM_FENCE` (with `DLM_FENCES`, the same single
/// token) when there is a fencing token.
fn lease_env(name: &str, key: &str, fence: Option<dlm::Fence>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("DLM_LOCK_NAME", name.to_string()),
        ("DLM_LOCK_KEY", key.to_string()),
    ];
    if let Some(fence) = fence {
        env.push(("DLM_FENCE", fence.to_string()));
        env.push(("DLM_FENCES", fence.to_string()));
    }
    env
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

/// A guard [`run_guarded`] can run a command under (the read-write lock's,
/// a leadership).
pub trait Guarded {
    /// The primitive's name.
    fn lease_name(&self) -> &str;
    /// The Redis key of the lease.
    fn lease_key(&self) -> &str;
    /// Its fencing token.
    fn lease_fence(&self) -> dlm::Fence;
    /// Fires when it is lost.
    fn lease_lost(&self) -> dlm::LostSignal;
    /// Give it back, token-checked.
    fn give_back(self) -> impl std::future::Future<Output = dlm::Result<()>>;
    /// More of the command's environment than `lock run`'s (none by default).
    fn extra_env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// The guards of the primitives on one Redis (always a fencing token).
macro_rules! guarded {
    ($($guard:ty),*) => {$(
        impl Guarded for $guard {
            fn lease_name(&self) -> &str {
                self.name()
            }
            fn lease_key(&self) -> &str {
                self.key()
            }
            fn lease_fence(&self) -> dlm::Fence {
                self.fence()
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
guarded!(dlm::ReadGuard, dlm::WriteGuard);

/// Run `command` under `guard` with `lock run`'s environment, signal
/// forwarding and exit codes; released when the command is done.
pub async fn run_guarded<G: Guarded>(
    global: &Global,
    client: &dlm::Client,
    guard: G,
    command: &[String],
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let name = guard.lease_name().to_string();
    let mut env = lease_env(&name, guard.lease_key(), Some(guard.lease_fence()));
    env.extend(guard.extra_env());
    let lost = guard.lease_lost();
    let ended = match run_child(command, &env, lost.lost(), signals, &name).await {
        Ok(ended) => ended,
        Err(e) => {
            let _ = guard.give_back().await;
            return Err(e);
        }
    };
    finish(global, client, &name, ended, guard.give_back()).await
}

/// After the command: give the lease back (token-checked) and turn what
/// happened into the exit code (4 when the lease was lost meanwhile).
async fn finish(
    global: &Global,
    client: &dlm::Client,
    name: &str,
    ended: crate::supervise::Ended,
    release: impl std::future::Future<Output = dlm::Result<()>>,
) -> Result<u8, CliError> {
    let released = release.await;
    settle_release(client, global).await;
    if ended.lost {
        return Err(CliError::Lost { name: name.into() });
    }
    match released {
        Ok(()) => Ok(ended.code),
        Err(e) if e.is_lock_lost() => Err(CliError::Lost { name: name.into() }),
        Err(e) => {
            tracing::warn!(name, error = %e, "release failed; the TTL will free the lock");
            Ok(ended.code)
        }
    }
}

/// `dlm lock run`.
pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, CliError> {
    let name = args.names.join(",");
    if args.raw_key && args.names.len() > 1 {
        return Err(CliError::Usage(
            "--raw-key takes one NAME (a multi-lock uses dlm's own keys)".into(),
        ));
    }
    if args.fair && args.raw_key {
        return Err(CliError::Usage(
            "--fair has its own keys: it cannot take --raw-key".into(),
        ));
    }
    if args.fair && args.names.len() > 1 {
        return Err(CliError::Usage(
            "--fair takes one NAME (a multi-lock is not fair)".into(),
        ));
    }
    for n in &args.names {
        dlm::keys::lock_key(dlm::keys::DEFAULT_LOCK_PREFIX, n, args.raw_key)?;
    }
    // From here on SIGINT/SIGTERM/SIGHUP no longer kill dlm: they abort the
    // wait for the lock, or are forwarded to the command.
    let mut signals = Signals::install()?;
    let client = connect_nodes(&global.urls(), global).await?;
    let opts = dlm::LockOptions::new(args.ttl)
        .wait(args.wait)
        .watchdog(true);
    let (target, lock) = match args.names.as_slice() {
        [one] if args.fair => (
            Wanted::Fair(client.fair_lock(one.clone())),
            client.lock(one.clone()),
        ),
        [one] => {
            let lock = client.lock(one.clone());
            let lock = if args.raw_key { lock.raw_key() } else { lock };
            (Wanted::One(lock.clone()), lock)
        }
        names => (
            Wanted::Many(client.multi_lock(names.iter().cloned())?),
            client.lock(names[0].clone()),
        ),
    };
    let held = tokio::select! {
        r = target.acquire(&opts) => match r {
            Ok(held) => held,
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
    tracing::debug!(name, "acquired; starting the command");
    let lost = dlm::any_lost(held.lost_signals());
    let ended = match run_child(&args.command, &held.env(), lost, &mut signals, &name).await {
        Ok(ended) => ended,
        Err(e) => {
            let _ = held.release().await;
            return Err(e);
        }
    };
    // Token-checked: removes nothing that is not ours.
    finish(global, &client, &name, ended, held.release()).await
}
