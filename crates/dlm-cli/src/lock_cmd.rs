//! `dlm lock acquire | release | extend | status`: one call each, for
//! scripts that hold a lock across several commands.

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use crate::error::{CliError, EXIT_OK};
use crate::global::parse::{parse_token, parse_ttl, parse_wait};
use crate::global::target::{connect_nodes, settle_release};
use crate::global::{Global, LockName};
use crate::output::{self, ms};

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
    /// First come, first served: wait in line in Redis (a fair lock, keys
    /// dlm:fair:{NAME}); release it with `lock release --fair`.
    #[arg(long)]
    pub fair: bool,
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
    /// The lock is a fair lock (taken with `lock acquire --fair`); its
    /// release wakes the next in line.
    #[arg(long)]
    pub fair: bool,
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
    /// The lock is a fair lock (keys dlm:fair:{NAME}): also show how many
    /// wait in line (`waiting` in JSON).
    #[arg(long)]
    pub fair: bool,
}

#[derive(Serialize)]
struct Acquired<'a> {
    name: &'a str,
    key: &'a str,
    token: &'a str,
    fence: Option<u64>,
    ttl_ms: u64,
}

/// `dlm lock acquire`: acquire and print the token; the lock stays held.
pub async fn acquire(global: &Global, args: &AcquireArgs) -> Result<u8, CliError> {
    args.target.check()?;
    let client = connect_nodes(&global.urls(), global).await?;
    if args.fair {
        return acquire_fair(global, &client, args).await;
    }
    let lock = args.target.lock(&client);
    let opts = dlm::LockOptions::new(args.ttl).wait(args.wait);
    let guard = match lock.acquire(&opts).await {
        Ok(guard) => guard,
        Err(e) => {
            // Under Redlock, a failed attempt releases its grants on slow
            // nodes in the background: give that at most one per-node timeout.
            if let Some(t) = lock.node_timeout(&opts) {
                client.settle(t).await;
            }
            return Err(e.into());
        }
    };
    let out = Acquired {
        name: &args.target.name,
        key: guard.key(),
        token: guard.token().as_str(),
        fence: guard.fence().map(dlm::Fence::get),
        ttl_ms: ms(args.ttl),
    };
    let printed = output::emit(global.json, &out, || out.token.to_string());
    if let Err(e) = printed {
        // Nobody learnt the token, so nobody could release the lock: give it
        // back now rather than leave it stuck for a whole TTL.
        let _ = guard.release().await;
        return Err(e);
    }
    // The lock must outlive this process: the caller holds it through the
    // printed token until it releases it or the TTL runs out.
    let _ = guard.detach();
    // Under Redlock, requests still on their way to slower nodes can only add
    // our own key there: give the healthy ones a moment to land (a stronger
    // lock), but never wait for a frozen node longer than its timeout.
    if let Some(t) = lock.node_timeout(&opts) {
        client.settle(t).await;
    }
    Ok(EXIT_OK)
}

/// `dlm lock acquire --fair`: queue in arrival order, print the token, keep it.
async fn acquire_fair(
    global: &Global,
    client: &dlm::Client,
    args: &AcquireArgs,
) -> Result<u8, CliError> {
    let opts = dlm::LockOptions::new(args.ttl).wait(args.wait);
    let guard = client
        .fair_lock(args.target.name.clone())
        .acquire(&opts)
        .await?;
    let key = guard.key().to_string();
    let (token, fence) = guard.detach();
    let out = Acquired {
        name: &args.target.name,
        key: &key,
        token: token.as_str(),
        fence: Some(fence.get()),
        ttl_ms: ms(args.ttl),
    };
    if let Err(e) = output::emit(global.json, &out, || out.token.to_string()) {
        // Nobody learnt the token: give the lock back to the next in line.
        let _ = client
            .fair_lock(args.target.name.clone())
            .release_token(&token)
            .await;
        return Err(e);
    }
    Ok(EXIT_OK)
}

#[derive(Serialize)]
struct Released<'a> {
    name: &'a str,
    released: bool,
    reason: Option<&'static str>,
}

/// Why a token-checked call did not happen, for JSON; `None` for other errors.
fn reason(e: &dlm::Error) -> Option<&'static str> {
    match e {
        dlm::Error::Expired { .. } => Some("expired"),
        dlm::Error::NotHeld { .. } => Some("not_held"),
        _ => None,
    }
}

/// `dlm lock release`: exit 0 when released, 1 when expired or not ours.
pub async fn release(global: &Global, args: &ReleaseArgs) -> Result<u8, CliError> {
    args.target.check()?;
    let client = connect_nodes(&global.urls(), global).await?;
    let lock = args.target.lock(&client);
    let name = args.target.name.as_str();
    let released = if args.fair {
        client.fair_lock(name).release_token(&args.token).await
    } else {
        lock.release_token(&args.token).await
    };
    settle_release(&client, global).await;
    match released {
        Ok(()) => {
            if global.json {
                output::emit(
                    true,
                    &Released {
                        name,
                        released: true,
                        reason: None,
                    },
                    String::new,
                )?;
            }
            Ok(EXIT_OK)
        }
        Err(e) => {
            if let Some(why) = reason(&e)
                && global.json
            {
                output::emit(
                    true,
                    &Released {
                        name,
                        released: false,
                        reason: Some(why),
                    },
                    String::new,
                )?;
            }
            Err(e.into())
        }
    }
}

#[derive(Serialize)]
struct Extended<'a> {
    name: &'a str,
    extended: bool,
    ttl_ms: u64,
    reason: Option<&'static str>,
}

/// `dlm lock extend`: exit 0 when extended, 1 when expired or not ours.
pub async fn extend(global: &Global, args: &ExtendArgs) -> Result<u8, CliError> {
    args.target.check()?;
    let client = connect_nodes(&global.urls(), global).await?;
    let lock = args.target.lock(&client);
    let name = args.target.name.as_str();
    let ttl_ms = ms(args.ttl);
    match lock.extend_token(&args.token, args.ttl).await {
        Ok(()) => {
            if global.json {
                output::emit(
                    true,
                    &Extended {
                        name,
                        extended: true,
                        ttl_ms,
                        reason: None,
                    },
                    String::new,
                )?;
            }
            Ok(EXIT_OK)
        }
        Err(e) => {
            if let Some(why) = reason(&e)
                && global.json
            {
                output::emit(
                    true,
                    &Extended {
                        name,
                        extended: false,
                        ttl_ms,
                        reason: Some(why),
                    },
                    String::new,
                )?;
            }
            Err(e.into())
        }
    }
}

#[derive(Serialize)]
struct Status<'a> {
    name: &'a str,
    key: &'a str,
    held: bool,
    ttl_ms: Option<u64>,
    fence: Option<u64>,
    /// With --fair: the waiters in line.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<u64>,
}

/// `dlm lock status`: exit 0 whether held or not.
pub async fn status(global: &Global, args: &StatusArgs) -> Result<u8, CliError> {
    args.target.check()?;
    if args.fair && args.target.raw_key {
        return Err(CliError::Usage(
            "--fair has its own keys: it cannot take --raw-key".into(),
        ));
    }
    let client = connect_nodes(&global.urls(), global).await?;
    let (key, held, ttl, fence, waiting) = if args.fair {
        let fair = client.fair_lock(args.target.name.clone());
        let st = fair.status().await?;
        (fair.key()?, st.held, st.ttl, st.fence, Some(st.waiting))
    } else {
        let lock = args.target.lock(&client);
        let st = lock.status().await?;
        (lock.key()?, st.held, st.ttl, st.fence, None)
    };
    let out = Status {
        name: &args.target.name,
        key: &key,
        held,
        ttl_ms: ttl.map(ms),
        fence: fence.map(dlm::Fence::get),
        waiting,
    };
    output::emit(global.json, &out, || {
        let fence = match out.fence {
            Some(f) => format!("last fence {f}"),
            None => "never acquired through dlm".into(),
        };
        let line = out
            .waiting
            .map(|n| format!(", {n} waiting"))
            .unwrap_or_default();
        if out.held {
            let ttl = match out.ttl_ms {
                Some(t) => format!("expires in {t} ms"),
                None => "no expiry".into(),
            };
            format!("{}: held (key {}, {ttl}, {fence}{line})", out.name, out.key)
        } else {
            format!("{}: free (key {}, {fence}{line})", out.name, out.key)
        }
    })?;
    Ok(EXIT_OK)
}
