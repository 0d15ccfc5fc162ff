//! One Lua script per semaphore operation; each is a single round trip.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::keys::SemaphoreKeys;
use crate::token::{Fence, Token};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
static RELEASE_TO: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release_to.lua")));
static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/status.lua")));
static SET_PERMITS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/set_permits.lua")));

/// The scripts of this module (loaded when a connection is made).
pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&ACQUIRE, &RELEASE, &RELEASE_TO, &STATUS, &SET_PERMITS]
}

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Acquired(Fence),
    /// Not enough free: how many are of the stored capacity, and when the
    /// earliest lease ends.
    Short {
        free: u32,
        capacity: u32,
        next_expiry: Option<Duration>,
    },
}

/// One acquire attempt of `n` permits (`cap`: the capacity to store if none is).
pub(crate) async fn acquire(
    backend: &Backend,
    keys: &SemaphoreKeys,
    token: &Token,
    n: u32,
    ttl: Duration,
    cap: u32,
) -> Result<Attempt> {
    let reply = backend
        .eval(
            ACQUIRE
                .key(&keys.meta)
                .key(&keys.holders)
                .arg(token.as_str())
                .arg(n)
                .arg(millis(ttl))
                .arg(cap),
        )
        .await?;
    acquire_reply(reply)
}

fn non_negative(what: &str, n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| Error::protocol(format!("negative {what} {n}")))
}

fn count(what: &str, n: i64) -> Result<u32> {
    non_negative(what, n).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// acquire.lua: `{1, fence, free, capacity}` or `{0, wait_ms, free, capacity}`.
fn acquire_reply(v: Value) -> Result<Attempt> {
    let (ok, n, free, capacity): (i64, i64, i64, i64) = redis::from_redis_value(v)?;
    let (free, capacity) = (count("free count", free)?, count("capacity", capacity)?);
    match ok {
        1 => Ok(Attempt::Acquired(Fence::new(non_negative("fence", n)?))),
        0 => Ok(Attempt::Short {
            free,
            capacity,
            next_expiry: u64::try_from(n).ok().map(Duration::from_millis),
        }),
        other => Err(Error::protocol(format!("unexpected acquire reply {other}"))),
    }
}

/// Give back `n` permits: true when they were still ours (else they had expired).
pub(crate) async fn release(
    backend: &Backend,
    keys: &SemaphoreKeys,
    token: &Token,
    n: u32,
) -> Result<bool> {
    let code: i64 = backend
        .eval(
            RELEASE
                .key(&keys.holders)
                .arg(token.as_str())
                .arg(n)
                .arg(&keys.channel),
        )
        .await?;
    Ok(code == 1)
}

/// What a release with a hand-over did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandOver {
    /// Ours released, the successor's permits taken: its fence.
    Handed(Fence),
    /// Ours released; the successor's did not fit (waiters were woken).
    Released,
    /// Ours had expired: nothing done.
    Expired,
}

/// The successor of a hand-over: its token, permits and lease.
pub(crate) struct Successor<'a> {
    pub token: &'a Token,
    pub permits: u32,
    pub ttl: Duration,
}

/// Release our `n` permits and grant `next` its own in the same script if they fit.
pub(crate) async fn release_to(
    backend: &Backend,
    keys: &SemaphoreKeys,
    token: &Token,
    n: u32,
    next: Successor<'_>,
) -> Result<HandOver> {
    let reply = backend
        .eval(
            RELEASE_TO
                .key(&keys.meta)
                .key(&keys.holders)
                .arg(token.as_str())
                .arg(n)
                .arg(next.token.as_str())
                .arg(next.permits)
                .arg(millis(next.ttl))
                .arg(&keys.channel),
        )
        .await?;
    release_to_reply(reply)
}

fn release_to_reply(v: Value) -> Result<HandOver> {
    let (code, fence): (i64, i64) = redis::from_redis_value(v)?;
    match code {
        1 => Ok(HandOver::Handed(Fence::new(non_negative("fence", fence)?))),
        2 => Ok(HandOver::Released),
        0 => Ok(HandOver::Expired),
        other => Err(Error::protocol(format!(
            "unexpected release_to reply {other}"
        ))),
    }
}

/// status.lua decoded: (capacity, in use, holders, last fence).
pub(crate) type RawStatus = (Option<u32>, u32, u32, u64);

pub(crate) async fn status(backend: &Backend, keys: &SemaphoreKeys) -> Result<RawStatus> {
    status_reply(
        backend
            .eval(STATUS.key(&keys.meta).key(&keys.holders))
            .await?,
    )
}

fn status_reply(v: Value) -> Result<RawStatus> {
    let (cap, in_use, holders, fence): (i64, i64, i64, i64) = redis::from_redis_value(v)?;
    Ok((
        u32::try_from(cap).ok(),
        count("in-use count", in_use)?,
        count("holder count", holders)?,
        non_negative("fence", fence)?,
    ))
}

/// Store a new capacity and wake the waiters; the previous one, if any.
pub(crate) async fn set_permits(
    backend: &Backend,
    keys: &SemaphoreKeys,
    permits: u32,
) -> Result<Option<u32>> {
    let old: i64 = backend
        .eval(SET_PERMITS.key(&keys.meta).arg(permits).arg(&keys.channel))
        .await?;
    Ok(u32::try_from(old).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    /// Every semaphore script's reply decoder.
    const DECODERS: &[Decoder] = &[
        ("acquire", |v| acquire_reply(v).is_ok()),
        ("release_to", |v| release_to_reply(v).is_ok()),
        ("status", |v| status_reply(v).is_ok()),
    ];

    decoder_tests!(fuzz_semaphore_replies, DECODERS);

    #[test]
    fn replies_decode() -> Result<()> {
        let arr = |v: &[i64]| Value::Array(v.iter().map(|n| Value::Int(*n)).collect());
        assert_eq!(
            acquire_reply(arr(&[1, 7, 2, 3]))?,
            Attempt::Acquired(Fence::new(7))
        );
        assert_eq!(
            acquire_reply(arr(&[0, -1, 0, 3]))?,
            Attempt::Short {
                free: 0,
                capacity: 3,
                next_expiry: None
            }
        );
        assert!(acquire_reply(arr(&[1, -3, 0, 3])).is_err());
        assert_eq!(status_reply(arr(&[-1, 0, 0, 0]))?, (None, 0, 0, 0));
        Ok(())
    }
}
