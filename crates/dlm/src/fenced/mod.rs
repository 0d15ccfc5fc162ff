//! Fenced writes: storage that rejects writes from a holder whose lock was
//! taken over (Kleppmann's "paused client" scenario).
//!
//! A holder passes its [`Fence`] with each write; the script stores the value
//! only if that token is not lower than the highest one that has written
//! before. A client that paused past its TTL (GC, swap, SIGSTOP) and wakes up
//! still believing it holds the lock carries an older token than the holder
//! that took over, so its late write is refused instead of overwriting newer
//! data.
//!
//! The client's [`crate::Client::fenced_write`] and
//! [`crate::Client::fenced_read`] call [`write`] and [`read`] here.

use std::sync::LazyLock;

use redis::{Script, Value};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::fenced_key;
use crate::token::Fence;

/// The largest value a fenced write accepts (16 MiB).
pub const MAX_FENCED_VALUE: usize = 16 * 1024 * 1024;

static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fenced_set.lua")));

fn single(backend: Option<&Backend>) -> Result<&Backend> {
    backend.ok_or_else(|| {
        Error::invalid(
            "client",
            "fenced writes need a single-Redis client (Redlock hands out no fencing tokens)",
        )
    })
}

/// Store `value` for `resource` if `fence` is not lower than the highest
/// token that wrote it before; otherwise [`Error::StaleFence`].
pub(crate) async fn write(
    backend: Option<&Backend>,
    root: &str,
    resource: &str,
    fence: Fence,
    value: &[u8],
) -> Result<()> {
    let key = fenced_key(root, resource)?;
    if value.len() > MAX_FENCED_VALUE {
        return Err(Error::invalid(
            "value",
            format!("{} bytes is larger than {MAX_FENCED_VALUE}", value.len()),
        ));
    }
    if fence.get() == 0 || fence.get() > (1u64 << 53) {
        return Err(Error::invalid(
            "fence",
            "must be between 1 and 2^53 (tokens handed out by dlm are)",
        ));
    }
    let reply = single(backend)?
        .eval(FENCED_SET.key(&key).arg(fence.get()).arg(value))
        .await?;
    write_reply(reply, resource, fence)
}

/// fenced_set.lua: stored (1), else the highest token that wrote before.
fn write_reply(v: Value, resource: &str, fence: Fence) -> Result<()> {
    let (stored, highest): (i64, u64) = redis::from_redis_value(v)?;
    if stored == 1 {
        Ok(())
    } else {
        Err(Error::StaleFence {
            name: resource.to_string(),
            given: fence.get(),
            highest,
        })
    }
}

/// The value stored by [`write`] and the token that wrote it.
pub(crate) async fn read(
    backend: Option<&Backend>,
    root: &str,
    resource: &str,
) -> Result<Option<(Fence, Vec<u8>)>> {
    let key = fenced_key(root, resource)?;
    read_reply(
        single(backend)?
            .query(redis::cmd("HMGET").arg(&key).arg("fence").arg("value"))
            .await?,
    )
}

/// HMGET fence value: the stored value and the token that wrote it.
fn read_reply(v: Value) -> Result<Option<(Fence, Vec<u8>)>> {
    let (fence, value): (Option<u64>, Option<Vec<u8>>) = redis::from_redis_value(v)?;
    Ok(match (fence, value) {
        (Some(f), Some(v)) => Some((Fence::new(f), v)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    /// Both reply decoders of fenced writes.
    const DECODERS: &[Decoder] = &[
        ("fenced_set", |v| write_reply(v, "r", Fence::new(1)).is_ok()),
        ("fenced read", |v| read_reply(v).is_ok()),
    ];

    decoder_tests!(fuzz_fenced_replies, DECODERS);
}
