//! One Lua script per lock operation; each is a single round trip.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::server::{self, Capability};
use crate::backend::{Backend, millis};
use crate::error::{Error, Result};
use crate::keys::{FenceLayout, LockKeys, fence_layout_keys};
use crate::lock::Outcome;
use crate::token::{Fence, Token};

static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/extend.lua")));
static EXTEND_OR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend_or_acquire.lua")));
static RELEASE_TO: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/fence.lua"),
        include_str!("scripts/release_to.lua")
    ))
});
static STATUS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/status.lua")));
static FENCE_LAYOUT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fence_layout.lua")));

/// What an older dlm's per-slot counter on one Redis is overwritten with
/// once the shared counter was raised past it: an older client's `INCR` of
/// it then fails (naming nothing better than "not an integer") instead of
/// handing out a fence lower than one already granted.
pub(crate) const MOVED_COUNTER: &str =
    "dlm: fences moved to the shared counter PREFIXfence; stop dlm clients older than 0.2";

/// Where the fences of the locks under `prefix` come from on this one Redis
/// (a client built on a connection the application passed in learns here
/// whether it talks to a Redis Cluster), after raising the shared counter
/// past the per-slot counters an older dlm left, once per deployment (see
/// `fence_layout.lua`). `cluster`: what the client knows already.
pub(crate) async fn fence_layout(
    backend: &Backend,
    prefix: &str,
    cluster: Option<bool>,
) -> Result<FenceLayout> {
    if cluster == Some(true) {
        return Ok(FenceLayout::PerSlot);
    }
    let keys = fence_layout_keys(prefix);
    let call = |mode: &str, found: &[String], last: bool| {
        let mut inv = FENCE_LAYOUT.prepare_invoke();
        inv.key(&keys.shared).key(&keys.marker).key(&keys.elsewhere);
        for k in found {
            inv.key(k);
        }
        inv.arg(mode)
            .arg(MOVED_COUNTER)
            .arg(if last { "1" } else { "0" });
        inv
    };
    let done: i64 = match backend.eval(&call("check", &[], false)).await {
        Ok(done) => done,
        Err(e) if crossslot(&e) => {
            if cluster.is_none() {
                return Ok(FenceLayout::PerSlot);
            }
            // A client that dlm connected as to one server, answered by a
            // Redis Cluster node.
            return Err(Error::protocol(format!(
                "{e} (this is a Redis Cluster node: connect with \
                 Client::builder().connect_cluster(..), or `dlm --cluster`)"
            )));
        }
        Err(e) => return Err(e),
    };
    if done == 1 {
        return Ok(FenceLayout::Shared);
    }
    // The per-slot counters an older dlm left: a SCAN finds them when it
    // completes within its bound (any keyspace up to about a million keys);
    // past that, every one of the 16384 names is read, in chunks, so that
    // none is missed. The marker is set by the last call only.
    let scanned = backend.scan_bounded(&keys.per_slot_pattern, 16384).await?;
    let moved: i64 = match scanned.1.then_some(scanned.0) {
        Some(found) => {
            // Only exact per-slot counter names: another key the pattern
            // matches (under a short prefix) is never touched.
            let names: std::collections::HashSet<&str> =
                keys.per_slot.iter().map(String::as_str).collect();
            let found: Vec<String> = found
                .into_iter()
                .filter(|k| names.contains(k.as_str()))
                .collect();
            backend.eval(&call("migrate", &found, true)).await?
        }
        None => {
            let mut moved = 0;
            let chunks: Vec<&[String]> = keys.per_slot.chunks(MIGRATE_CHUNK).collect();
            for (i, chunk) in chunks.iter().enumerate() {
                let last = i + 1 == chunks.len();
                let n: i64 = backend.eval(&call("migrate", chunk, last)).await?;
                moved += n;
            }
            moved
        }
    };
    if moved > 0 {
        tracing::warn!(
            moved,
            counter = %keys.shared,
            "raised the shared fencing counter past the per-slot counters an older dlm left on \
             this Redis; clients older than 0.2 built with connection() now fail to lock in \
             those slots"
        );
    }
    Ok(FenceLayout::Shared)
}

/// How many per-slot counter names one migrate call carries when they are
/// all sent (about 20 KB of keys).
const MIGRATE_CHUNK: usize = 1024;

/// A Redis Cluster's refusal of keys in different hash slots.
fn crossslot(e: &Error) -> bool {
    e.to_string().to_ascii_uppercase().contains("CROSSSLOT") || e.to_string().contains("cross-slot")
}

/// The scripts run per lock outside the batches (a guard's extend, the
/// hand-over, Redlock's extend, status), loaded with the connection.
pub(crate) fn scripts() -> Vec<&'static Script> {
    vec![&EXTEND, &RELEASE_TO, &EXTEND_OR_ACQUIRE, &STATUS]
}

/// What one acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Acquired(Fence),
    /// Held by another owner; its remaining TTL (`None`: no expiry).
    Busy(Option<Duration>),
}

fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Decode one lock's `ok, n` pair of acquire_many.lua.
pub(crate) fn acquire_reply(ok: i64, n: i64) -> Result<Attempt> {
    match ok {
        1 => {
            let fence = u64::try_from(n)
                .map_err(|_| Error::protocol(format!("negative fencing counter {n}")))?;
            Ok(Attempt::Acquired(Fence::new(fence)))
        }
        _ => Ok(Attempt::Busy(pttl(n))),
    }
}

/// Decode a release or extend reply code (release_many.lua, extend.lua).
pub(crate) fn release_reply(code: i64) -> Result<Outcome> {
    match code {
        1 => Ok(Outcome::Done),
        0 => Ok(Outcome::Expired),
        -1 => Ok(Outcome::NotHeld),
        other => Err(Error::protocol(format!("unexpected script reply {other}"))),
    }
}

/// Hand the lock from `token` to `successor` (a waiting acquisition of this
/// client) with the successor's TTL: its fence, or `None` when the lock was
/// not ours any more (nothing handed over).
pub(crate) async fn release_to(
    backend: &Backend,
    keys: &LockKeys,
    token: &Token,
    successor: &Token,
    ttl: Duration,
) -> Result<Option<Fence>> {
    release_to_reply(
        backend
            .eval(
                RELEASE_TO
                    .key(&keys.lock)
                    .key(&keys.fence)
                    .arg(token.as_str())
                    .arg(successor.as_str())
                    .arg(millis(ttl)),
            )
            .await?,
    )
}

/// release_to.lua: the successor's fence, or `None` when nothing was handed over.
fn release_to_reply(v: Value) -> Result<Option<Fence>> {
    let (ok, n): (i64, i64) = redis::from_redis_value(v)?;
    match acquire_reply(ok, n)? {
        Attempt::Acquired(fence) => Ok(Some(fence)),
        Attempt::Busy(_) => Ok(None),
    }
}

pub(crate) async fn extend(
    backend: &Backend,
    keys: &LockKeys,
    token: &Token,
    ttl: Duration,
    timeout: Duration,
) -> Result<Outcome> {
    if !backend.batch_by_slot() && backend.native(Capability::CompareAndSet) {
        let codes = extend_native(backend, &[(keys.lock.as_str(), token, ttl)], timeout).await?;
        if let Some(Some(code)) = codes.first() {
            return release_reply(*code);
        }
    }
    let reply = backend
        .eval_within(
            timeout,
            EXTEND.key(&keys.lock).arg(token.as_str()).arg(millis(ttl)),
        )
        .await?;
    release_reply(redis::from_redis_value(reply)?)
}

/// Extend locks natively on a server with compare-and-set (Valkey 9):
/// per lock `(key, token, ttl)`, one `SET key token IFEQ token PX ttl GET`,
/// all in one pipeline. It decides exactly what `extend.lua` decides, in one
/// command: the TTL is set only while the key holds the token (`IFEQ`), and
/// `GET` returns what it held, so the reply tells the same three cases apart
/// atomically. Per lock: `Some(code)` with extend.lua's code (1 extended, 0
/// gone, -1 another owner's), or `None` when the command failed, for the
/// caller to send to the script: refused (an unknown option or command: an
/// older server, or a proxy; native extends are then off for this
/// deployment, with one warning), or failed for another reason (`SET` is
/// refused when the server is out of memory, where the script's `PEXPIRE`
/// is not).
pub(crate) async fn extend_native(
    backend: &Backend,
    locks: &[(&str, &Token, Duration)],
    timeout: Duration,
) -> Result<Vec<Option<i64>>> {
    let mut pipe = redis::Pipeline::with_capacity(locks.len());
    pipe.ignore_errors();
    for (key, token, ttl) in locks {
        pipe.cmd("SET")
            .arg(*key)
            .arg(token.as_str())
            .arg("IFEQ")
            .arg(token.as_str())
            .arg("PX")
            .arg(millis(*ttl))
            .arg("GET");
    }
    let replies = backend.pipeline_within(timeout, &pipe).await?;
    if replies.len() != locks.len() {
        return Err(Error::protocol(format!(
            "the extend pipeline returned {} replies for {}",
            replies.len(),
            locks.len()
        )));
    }
    replies
        .into_iter()
        .zip(locks)
        .map(|(reply, (_, token, _))| match reply {
            Value::Nil => Ok(Some(0)),
            Value::BulkString(held) if held == token.as_str().as_bytes() => Ok(Some(1)),
            Value::BulkString(_) => Ok(Some(-1)),
            Value::ServerError(e) => {
                if server::refuses_option(&e) {
                    backend
                        .native_refused(Capability::CompareAndSet, e.details().unwrap_or(e.code()));
                } else {
                    // Short of memory (`SET` is refused under `noeviction`
                    // where the script's `PEXPIRE` is not), a key that is not
                    // a string: the script decides, as it always did.
                    tracing::debug!(error = ?e, "SET IFEQ failed; the script decides this extend");
                }
                Ok(None)
            }
            other => Err(Error::protocol(format!("SET IFEQ replied {other:?}"))),
        })
        .collect()
}

/// Redlock's per-node extend: `Done` when extended, `Expired` when the key
/// was gone (taken again, but not counted), `NotHeld` when another owns it.
pub(crate) async fn extend_or_acquire(
    backend: &Backend,
    keys: &LockKeys,
    token: &Token,
    ttl: Duration,
    timeout: Duration,
) -> Result<Outcome> {
    let reply = backend
        .eval_within(
            timeout,
            EXTEND_OR_ACQUIRE
                .key(&keys.lock)
                .arg(token.as_str())
                .arg(millis(ttl)),
        )
        .await?;
    extend_or_acquire_reply(reply)
}

/// extend_or_acquire.lua: 1 extended, 2 taken again, -1 held by another.
fn extend_or_acquire_reply(v: Value) -> Result<Outcome> {
    extend_or_acquire_code(redis::from_redis_value(v)?)
}

/// One node's code of `extend_or_acquire(_many).lua`, as a vote of the
/// Redlock majority: only a node that still held our token (1) counts as
/// extended. A key that was gone (2) was taken again to repair a minority
/// (a node restarted empty), but counts as expired there: the lock may have
/// had another holder since, so it never makes the majority.
pub(crate) fn extend_or_acquire_code(code: i64) -> Result<Outcome> {
    match code {
        1 => Ok(Outcome::Done),
        2 => Ok(Outcome::Expired),
        -1 => Ok(Outcome::NotHeld),
        other => Err(Error::protocol(format!("unexpected script reply {other}"))),
    }
}

/// (exists, remaining TTL, last fence handed out).
pub(crate) async fn status(
    backend: &Backend,
    keys: &LockKeys,
    timeout: Duration,
) -> Result<(bool, Option<Duration>, u64)> {
    status_reply(
        backend
            .eval_within(timeout, STATUS.key(&keys.lock).key(&keys.fence))
            .await?,
    )
}

/// status.lua: held, PTTL, fence.
fn status_reply(v: Value) -> Result<(bool, Option<Duration>, u64)> {
    let (held, ms, fence): (i64, i64, i64) = redis::from_redis_value(v)?;
    Ok((held == 1, pttl(ms), u64::try_from(fence).unwrap_or(0)))
}

/// Does the key hold `token`?
pub(crate) async fn holds(
    backend: &Backend,
    keys: &LockKeys,
    token: &Token,
    timeout: Duration,
) -> Result<bool> {
    let value = backend
        .query_within(timeout, redis::cmd("GET").arg(&keys.lock))
        .await?;
    holds_reply(value, token)
}

/// GET of the lock key: is its value `token`? Any bytes may be there (a raw
/// key shared with other clients), so they are compared as bytes.
fn holds_reply(v: Value, token: &Token) -> Result<bool> {
    let value: Option<Vec<u8>> = redis::from_redis_value(v)?;
    Ok(value.as_deref() == Some(token.as_str().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::batch::checked;
    use crate::services::props::{Decoder, decoder_tests};

    /// acquire_many.lua and release_many.lua, decoded as the batcher does
    /// (lock::batch): codes of the expected count, then per lock.
    fn many(v: Value, per_lock: usize, decode: fn(&[i64]) -> bool) -> bool {
        let codes = redis::from_redis_value::<Vec<i64>>(v).map_err(Error::from);
        let len = codes.as_ref().map_or(0, Vec::len);
        checked(codes, len - len % per_lock).is_ok_and(|c| {
            let c: Vec<i64> = c.collect();
            c.chunks(per_lock).all(decode)
        })
    }

    /// Every lock script's reply decoder.
    const DECODERS: &[Decoder] = &[
        ("acquire_many", |v| {
            many(
                v,
                2,
                |c| matches!(c, [ok, n] if acquire_reply(*ok, *n).is_ok()),
            )
        }),
        ("release_many", |v| {
            many(
                v,
                1,
                |c| matches!(c, [code] if release_reply(*code).is_ok()),
            )
        }),
        ("extend_many", |v| many(v, 1, |_| true)),
        ("release_to", |v| release_to_reply(v).is_ok()),
        ("extend", |v| {
            redis::from_redis_value(v)
                .map_err(Error::from)
                .and_then(release_reply)
                .is_ok()
        }),
        ("extend_or_acquire", |v| extend_or_acquire_reply(v).is_ok()),
        ("status", |v| status_reply(v).is_ok()),
        ("holds (GET)", |v| {
            Token::random().is_ok_and(|t| holds_reply(v, &t).is_ok())
        }),
    ];

    decoder_tests!(fuzz_lock_replies, DECODERS);

    #[test]
    fn a_binary_value_on_the_lock_key_is_not_ours() -> Result<()> {
        let token = Token::random()?;
        assert!(!holds_reply(
            Value::BulkString(vec![0xff, 0, 0xfe]),
            &token
        )?);
        assert!(!holds_reply(Value::Nil, &token)?);
        let ours = Value::BulkString(token.as_str().as_bytes().to_vec());
        assert!(holds_reply(ours, &token)?);
        assert!(acquire_reply(1, -1).is_err());
        Ok(())
    }
}
