//! One Lua script per read-write-lock operation; each is a single round trip.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::keys::RwKeys;
use crate::services::held::extend_code;
use crate::services::options::Outcome;
use crate::token::{Fence, Token};

static DOWNGRADE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/downgrade.lua")));
pub(crate) static EXTEND_MANY: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_many.lua")));
static CANCEL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/cancel.lua")));
static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/status.lua")));

pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&DOWNGRADE, &EXTEND_MANY, &CANCEL, &STATUS]
}

/// A read share or the write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

impl Mode {
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Mode::Read => "r",
            Mode::Write => "w",
        }
    }
}

/// One attempt: the fence, or how long until it is worth looking again
/// (`None`: a writer without expiry).
pub(crate) type Attempt = std::result::Result<Fence, Option<Duration>>;

/// One attempt's two entries of an `acquire_many.lua` reply: `1, fence` or
/// `0, wait_ms`.
pub(crate) fn acquire_reply(code: i64, n: i64) -> Result<Attempt> {
    match code {
        1 => u64::try_from(n)
            .map(|f| Ok(Fence::new(f)))
            .map_err(|_| Error::protocol(format!("negative fencing counter {n}"))),
        0 => Ok(Err(u64::try_from(n).ok().map(Duration::from_millis))),
        other => Err(Error::protocol(format!("rwlock acquire: code {other}"))),
    }
}

pub(crate) async fn downgrade(
    backend: &Backend,
    keys: &RwKeys,
    token: &Token,
    ttl: Duration,
    timeout: Duration,
) -> Result<Outcome> {
    let code: i64 = backend
        .eval_within(
            timeout,
            DOWNGRADE
                .key(&keys.writer)
                .key(&keys.readers)
                .key(&keys.waiting)
                .arg(token.as_str())
                .arg(millis(ttl))
                .arg(&keys.readable),
        )
        .await?;
    extend_code(code)
}

/// What status.lua read: the writer's TTL (`Some(None)`: held without
/// expiry), live readers, live waiting writers, the slot's last fence.
pub(crate) type RawStatus = (Option<Option<Duration>>, u64, u64, u64);

/// One read-only look at the lock.
pub(crate) async fn status(backend: &Backend, keys: &RwKeys) -> Result<RawStatus> {
    status_reply(
        backend
            .eval(
                STATUS
                    .key(&keys.writer)
                    .key(&keys.readers)
                    .key(&keys.waiting)
                    .key(&keys.fence),
            )
            .await?,
    )
}

/// status.lua: {writer, pttl, readers, waiting_writers, fence}.
fn status_reply(v: Value) -> Result<RawStatus> {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    match redis::from_redis_value::<Vec<i64>>(v)?[..] {
        [writer, pttl, readers, waiting, fence] => Ok((
            (writer == 1).then(|| u64::try_from(pttl).ok().map(Duration::from_millis)),
            count(readers),
            count(waiting),
            count(fence),
        )),
        _ => Err(Error::protocol("rw status: unexpected reply")),
    }
}

pub(crate) async fn cancel(backend: &Backend, keys: &RwKeys, token: &Token) -> Result<()> {
    let _: i64 = backend
        .eval(
            CANCEL
                .key(&keys.writer)
                .key(&keys.readers)
                .key(&keys.waiting)
                .arg(token.as_str())
                .arg(&keys.readable)
                .arg(&keys.writable),
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    const DECODERS: &[Decoder] = &[("rw status", |v| status_reply(v).is_ok())];

    decoder_tests!(fuzz_rw_replies, DECODERS);

    #[test]
    fn replies_decode() -> Result<()> {
        assert_eq!(acquire_reply(1, 4)?, Ok(Fence::new(4)));
        assert_eq!(acquire_reply(0, 15)?, Err(Some(Duration::from_millis(15))));
        assert_eq!(acquire_reply(0, -1)?, Err(None));
        assert!(acquire_reply(1, -3).is_err());
        assert!(acquire_reply(2, 0).is_err());
        Ok(())
    }
}
