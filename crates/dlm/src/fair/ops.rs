//! The fair lock's scripts and their replies. Acquire and release are
//! batched (`fair::batch`: `acquire_many.lua`, `release_many.lua`); cancel
//! and status are one call each. Each is a single round trip.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::fair::MAX_WAITERS;
use crate::keys::FairKeys;
use crate::services::options::Outcome;
use crate::token::{Fence, Token};

static CANCEL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/cancel.lua")));
static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/status.lua")));

pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&CANCEL, &STATUS]
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

/// One lock's entries of an `acquire_many.lua` reply: {1, fence, 0},
/// {0, wait_ms, position}, {-2, max, 0} or {-3, 0, 0} (`fence`: the
/// counter that does not hold an integer).
pub(crate) fn acquire_code(code: i64, n: i64, position: i64, fence: &str) -> Result<Attempt> {
    match code {
        1 => u64::try_from(n)
            .ok()
            .filter(|f| *f > 0)
            .map(|f| Attempt::Acquired(Fence::new(f)))
            .ok_or_else(|| Error::protocol(format!("fencing counter at {n}"))),
        0 => Ok(Attempt::Queued {
            wait: u64::try_from(n).ok().map(Duration::from_millis),
            position: u64::try_from(position).unwrap_or(0),
        }),
        -2 => Ok(Attempt::Full(usize::try_from(n).unwrap_or(MAX_WAITERS))),
        -3 => Err(Error::protocol(format!(
            "the fencing counter {fence:?} does not hold an integer; \
             a fair lock acquired now would get no fence"
        ))),
        other => Err(Error::protocol(format!("fair acquire: code {other}"))),
    }
}

/// One lock's entries of a `release_many.lua` reply: {code, next waiter or
/// ''}, or {-4, message} for a Redis error on that lock alone.
pub(crate) fn release_code(code: Value, next: Value) -> Result<(Outcome, Option<String>)> {
    let code: i64 = redis::from_redis_value(code)?;
    let next: String = redis::from_redis_value(next)?;
    if code == -4 {
        // Released, but a Redis error on this lock stopped its wake-up (as it
        // stopped a lone release before batching).
        return Err(Error::protocol(format!("fair release: {next}")));
    }
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
        ("fair acquire", |v| {
            redis::from_redis_value::<Vec<i64>>(v).is_ok_and(|c| match c[..] {
                [code, n, p] => acquire_code(code, n, p, "fence").is_ok(),
                _ => false,
            })
        }),
        ("fair release", |v| match v {
            Value::Array(xs) if xs.len() == 2 => {
                let mut xs = xs.into_iter();
                match (xs.next(), xs.next()) {
                    (Some(c), Some(n)) => release_code(c, n).is_ok(),
                    _ => false,
                }
            }
            _ => false,
        }),
    ];

    decoder_tests!(fuzz_fair_replies, DECODERS);

    #[test]
    fn replies_decode() -> Result<()> {
        assert_eq!(
            acquire_code(1, 7, 0, "f")?,
            Attempt::Acquired(Fence::new(7))
        );
        assert_eq!(
            acquire_code(0, -1, 3, "f")?,
            Attempt::Queued {
                wait: None,
                position: 3
            }
        );
        assert_eq!(acquire_code(-2, 5, 0, "f")?, Attempt::Full(5));
        assert!(acquire_code(1, -1, 0, "f").is_err());
        assert!(acquire_code(-3, 0, 0, "f").is_err());
        assert!(acquire_code(9, 0, 0, "f").is_err());
        let next = Value::BulkString(b"tok".to_vec());
        assert_eq!(
            release_code(Value::Int(1), next)?,
            (Outcome::Done, Some("tok".into()))
        );
        assert_eq!(
            release_code(Value::Int(0), Value::BulkString(Vec::new()))?,
            (Outcome::Expired, None)
        );
        Ok(())
    }
}
