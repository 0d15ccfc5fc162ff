//! Counting a grant only once replicas have it ([`LockOptions::replicas`]).
//!
//! One decision, shared by every lock kind: after a grant, one pipeline on
//! one connection sends a token-checked extend of the grant's lease, then
//! `WAIT n timeout`. The grant counts only when the extend found it (this
//! master still has it) and `WAIT` says `n` replicas have everything up to
//! that extend (so the grant, which this master applied before it).
//!
//! Why not a bare `WAIT`: it counts the replicas that acknowledged the
//! writes of *its own connection*. Sent alone after the connection was
//! re-made (a reset, a Sentinel failover to a master that never had the
//! grant), it would count replicas that never saw the grant, at once. In one
//! pipeline the extend and the `WAIT` share a connection, a resend sends
//! both, and on a Cluster redis-rs routes the pipeline by its first keyed
//! command: to the master of the lock's slot, not every master.

use std::time::Duration;

use redis::{Cmd, Script, Value};
use tokio::time::Instant;

use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::services::held::{Guard, Lease};
use crate::services::jittered;
use crate::services::options::LockOptions;

/// What the replication check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replication {
    /// The grant is on this master and on at least `n` replicas.
    Replicated,
    /// The grant is on this master; this many replicas had it in time.
    Short(u64),
    /// This master no longer has the grant (expired, or lost in a failover).
    Gone,
}

/// Check that `wanted` replicas have a grant: `extend` is the grant's
/// token-checked extend (an `EVALSHA` of `script` built with
/// [`crate::backend::evalsha`], replying a list whose first code is 1 when
/// it extended the lease), sent in one pipeline with `WAIT wanted timeout`.
/// The call may take `timeout` plus the client's deadline (a `WAIT` may
/// rightly outlast the client's per-command deadline).
pub(crate) async fn confirm(
    backend: &Backend,
    script: &'static Script,
    extend: Cmd,
    wanted: u64,
    timeout: Duration,
) -> Result<Replication> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors()
        .add_command(extend)
        .cmd("WAIT")
        .arg(wanted)
        .arg(millis(timeout).max(1));
    let bound = timeout + backend.timeout();
    let mut replies = backend.pipeline_for(bound, &pipe).await?;
    if matches!(replies.first(), Some(Value::ServerError(e)) if e.kind() == Some(redis::ServerErrorKind::NoScript))
    {
        backend.preload(&[script]).await;
        replies = backend.pipeline_for(bound, &pipe).await?;
    }
    match replies.as_slice() {
        [extended, Value::Int(replicas)] => {
            let codes: Vec<i64> = match extended {
                Value::ServerError(e) => {
                    return Err(Error::from(redis::RedisError::from(e.clone())));
                }
                v => redis::from_redis_value(v.clone())?,
            };
            let replicas = u64::try_from(*replicas).unwrap_or(0);
            Ok(if codes.first() != Some(&1) {
                Replication::Gone
            } else if replicas >= wanted {
                Replication::Replicated
            } else {
                Replication::Short(replicas)
            })
        }
        [_, Value::ServerError(e)] => Err(Error::from(redis::RedisError::from(e.clone()))),
        other => Err(Error::protocol(format!(
            "extend and WAIT replied {other:?}"
        ))),
    }
}

/// Release a grant that did not count, token-checked, and wait for it: on
/// the client's tracker, so that the release completes even when this future
/// is dropped meanwhile (a guard's own `release` stops where its caller
/// does).
async fn give_back<L: Lease>(guard: Guard<L>) {
    let background = guard.held().shared().background.clone();
    let release = background.spawn(async move {
        if let Err(e) = guard.release().await {
            tracing::debug!(error = %e, "releasing a grant that was not replicated failed");
        }
    });
    let _ = release.await;
}

/// Acquire with `attempt` and, with [`LockOptions::replicas`], count a grant
/// only once that many replicas have it ([`confirm`]). A grant that is not
/// counted is released (token-checked, completed even if this future is
/// dropped) and, after a pause of about
/// `opts.retry_interval`, tried again while `opts.wait` lasts; then
/// [`Error::NotReplicated`] (or the last retryable error).
///
/// The fair lock, the read-write lock, the semaphore and the election share
/// this; the mutex makes the same decision with [`confirm`] inside its own
/// retry loop: a grant is never reported before it is replicated.
pub(crate) async fn replicated<L, F, Fut>(
    what: &'static str,
    opts: &LockOptions,
    mut attempt: F,
) -> Result<Guard<L>>
where
    L: Lease,
    F: FnMut(LockOptions) -> Fut,
    Fut: Future<Output = Result<Guard<L>>>,
{
    let Some((wanted, timeout)) = opts.replicas else {
        return attempt(opts.clone()).await;
    };
    let deadline = Instant::now() + opts.wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let guard = attempt(opts.clone().wait(left)).await?;
        let backend = guard.held().shared().backend(what)?.clone();
        let (script, extend) = guard.held().extend_command(opts.ttl);
        let err = match confirm(&backend, script, extend, wanted, timeout).await {
            Ok(Replication::Replicated) => return Ok(guard),
            Ok(Replication::Short(replicas)) => Error::NotReplicated {
                name: guard.held().core().name.to_string(),
                replicas,
                wanted,
            },
            Ok(Replication::Gone) => Error::NotReplicated {
                name: guard.held().core().name.to_string(),
                replicas: 0,
                wanted,
            },
            Err(e) => e,
        };
        give_back(guard).await;
        let now = Instant::now();
        if now >= deadline || !err.is_retryable() {
            return Err(err);
        }
        tokio::time::sleep_until((now + jittered(opts.retry_interval)).min(deadline)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::held::extend_token_command;
    use crate::token::Token;

    type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

    /// A connection of its own to `url`, as a `Backend` (a fresh connection:
    /// what a client has after it reconnected).
    async fn fresh(url: &str) -> std::result::Result<Backend, Box<dyn std::error::Error>> {
        // As the client's own connections: no response timeout of redis-rs
        // (its default would cut a `WAIT` short); the Backend's deadlines bound it.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Backend::new(conn, Duration::from_secs(2)))
    }

    /// The grant was written on another connection (the one the client had
    /// before a reconnect) and the replica is frozen. A bare `WAIT` on the
    /// fresh connection has no write to wait for and counts the frozen
    /// replica at once; the check's extend makes it wait for this grant.
    #[tokio::test]
    async fn a_fresh_connection_counts_only_replicas_that_have_the_grant() -> TestResult {
        let setup = dlm_testkit::Replicated::start(1)?;
        let url = setup.master().url();
        let token = Token::random()?;
        let granted = fresh(&url).await?;
        let set = redis::cmd("SET")
            .arg("{r}:lock")
            .arg(token.as_str())
            .arg("PX")
            .arg(10_000)
            .clone();
        let _: () = granted.query(&set).await?;
        setup.replicas()[0].pause()?;

        let checker = fresh(&url).await?;
        let bare: u64 = checker
            .query(&redis::cmd("WAIT").arg(1).arg(200).clone())
            .await?;
        // Redis 7.0 on and Valkey count the frozen replica here. Redis 6.2
        // does not: it sets a connection's wait offset to the master's at
        // every command, so the client's `CLIENT SETINFO` at connect already
        // made this WAIT wait for the grant. Either way the check must not
        // count the replica.
        assert!(
            bare <= 1,
            "a bare WAIT on a fresh connection counts at most the frozen replica: {bare}"
        );
        let (script, extend) = extend_token_command("{r}:lock", &token, Duration::from_secs(10));
        let checked = confirm(&checker, script, extend, 1, Duration::from_millis(300)).await;
        setup.replicas()[0].resume()?;
        assert_eq!(checked?, Replication::Short(0));

        // With the replica back (it may have to resync first: allow it 60 s),
        // the grant counts; a grant that is gone does not.
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let (script, extend) =
                extend_token_command("{r}:lock", &token, Duration::from_secs(10));
            let r = confirm(&checker, script, extend, 1, Duration::from_secs(2)).await;
            match r {
                Ok(Replication::Replicated) => break,
                Ok(Replication::Short(_)) | Err(Error::Timeout(_)) if Instant::now() < until => {}
                other => panic!("the resumed replica never counted: {other:?}"),
            }
        }
        let other = Token::random()?;
        let (script, extend) = extend_token_command("{r}:lock", &other, Duration::from_secs(10));
        assert_eq!(
            confirm(&checker, script, extend, 1, Duration::from_secs(5)).await?,
            Replication::Gone
        );
        Ok(())
    }
}
