//! One Lua script per fair-lock operation; each is a single round trip.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::fair::MAX_WAITERS;
use crate::keys::FairKeys;
use crate::services::options::Outcome;
use crate::token::{Fence, Token};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
static CANCEL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/cancel.lua")));
static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/status.lua")));

pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&ACQUIRE, &RELEASE, &CANCEL, &STATUS]
}

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Acquired(Fence),
    /// Not ours yet: how long until it is worth looking again (`None`: the
    /// holder has no expiry), and our place in line (0: not queued).
    Queued {
        wait: Option<Duration>,
        position: u64,
    },
    /// The queue holds this many waiters already.
    Full(usize),
}

pub(crate) async fn acquire(
    backend: &Backend,
    keys: &FairKeys,
    token: &Token,
    ttl: Duration,
    queue_lease: Duration,
) -> Result<Attempt> {
    acquire_reply(
        backend
            .eval(
                ACQUIRE
                    .key(&keys.lock)
                    .key(&keys.queue)
                    .key(&keys.timeouts)
                    .key(&keys.fence)
                    .arg(token.as_str())
                    .arg(millis(ttl))
                    .arg(millis(queue_lease))
                    .arg(&keys.wake_prefix)
                    .arg(MAX_WAITERS),
            )
            .await?,
    )
}

/// acquire.lua: {1, fence}, {0, wait_ms, position} or {-2, max, 0}.
fn acquire_reply(v: Value) -> Result<Attempt> {
    let (code, n, position): (i64, i64, i64) = match redis::from_redis_value::<Vec<i64>>(v)?[..] {
        [code, n] => (code, n, 0),
        [code, n, p] => (code, n, p),
        _ => return Err(Error::protocol("fair acquire: unexpected reply length")),
    };
    match code {
        1 => u64::try_from(n)
            .map(|f| Attempt::Acquired(Fence::new(f)))
            .map_err(|_| Error::protocol(format!("negative fencing counter {n}"))),
        0 => Ok(Attempt::Queued {
            wait: u64::try_from(n).ok().map(Duration::from_millis),
            position: u64::try_from(position).unwrap_or(0),
        }),
        -2 => Ok(Attempt::Full(usize::try_from(n).unwrap_or(MAX_WAITERS))),
        other => Err(Error::protocol(format!("fair acquire: code {other}"))),
    }
}

/// Token-checked release; also the token of the waiter it woke, if any.
pub(crate) async fn release(
    backend: &Backend,
    keys: &FairKeys,
    token: &Token,
) -> Result<(Outcome, Option<String>)> {
    release_reply(
        backend
            .eval(
                RELEASE
                    .key(&keys.lock)
                    .key(&keys.queue)
                    .key(&keys.timeouts)
                    .arg(token.as_str())
                    .arg(&keys.wake_prefix),
            )
            .await?,
    )
}

/// release.lua: {code, next waiter or ''}.
fn release_reply(v: Value) -> Result<(Outcome, Option<String>)> {
    let (code, next): (i64, String) = redis::from_redis_value(v)?;
    let outcome = crate::services::held::extend_code(code)?;
    Ok((outcome, Some(next).filter(|n| !n.is_empty())))
}

/// What status.lua read: the holder's TTL (`Some(None)`: held without
/// expiry), the slot's last fence, the live waiters.
pub(crate) type RawStatus = (Option<Option<Duration>>, u64, u64);

/// One read-only look at the lock.
pub(crate) async fn status(backend: &Backend, keys: &FairKeys) -> Result<RawStatus> {
    status_reply(
        backend
            .eval(
                STATUS
                    .key(&keys.lock)
                    .key(&keys.queue)
                    .key(&keys.timeouts)
                    .key(&keys.fence),
            )
            .await?,
    )
}

/// status.lua: {held, pttl, fence, waiting}.
fn status_reply(v: Value) -> Result<RawStatus> {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    match redis::from_redis_value::<Vec<i64>>(v)?[..] {
        [held, pttl, fence, waiting] => Ok((
            (held == 1).then(|| u64::try_from(pttl).ok().map(Duration::from_millis)),
            count(fence),
            count(waiting),
        )),
        _ => Err(Error::protocol("fair status: unexpected reply")),
    }
}

/// Leave the queue (and release a grant whose reply was lost).
pub(crate) async fn cancel(backend: &Backend, keys: &FairKeys, token: &Token) -> Result<bool> {
    let removed: i64 = backend
        .eval(
            CANCEL
                .key(&keys.lock)
                .key(&keys.queue)
                .key(&keys.timeouts)
                .arg(token.as_str())
                .arg(&keys.wake_prefix),
        )
        .await?;
    Ok(removed == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    const DECODERS: &[Decoder] = &[
        ("fair status", |v| status_reply(v).is_ok()),
        ("fair acquire", |v| acquire_reply(v).is_ok()),
        ("fair release", |v| release_reply(v).is_ok()),
    ];

    decoder_tests!(fuzz_fair_replies, DECODERS);

    #[test]
    fn replies_decode() -> Result<()> {
        let ints = |xs: &[i64]| Value::Array(xs.iter().map(|&x| Value::Int(x)).collect());
        assert_eq!(
            acquire_reply(ints(&[1, 7]))?,
            Attempt::Acquired(Fence::new(7))
        );
        assert_eq!(
            acquire_reply(ints(&[0, -1, 3]))?,
            Attempt::Queued {
                wait: None,
                position: 3
            }
        );
        assert!(acquire_reply(ints(&[1, -1])).is_err());
        assert!(acquire_reply(ints(&[])).is_err());
        Ok(())
    }
}
