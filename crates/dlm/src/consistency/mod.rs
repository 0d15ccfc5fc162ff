//! Data consistency without a lock: a versioned compare-and-set (the
//! optimistic lock of seed 003) and an atomic stock counter.
//!
//! | when | use |
//! |---|---|
//! | the whole critical section is one counter ("10 phones left") | [`Stock::take`]: one script, no retries, no waiting |
//! | a read-modify-write of one record, conflicts are rare | [`Versioned`]: optimistic CAS with bounded retries |
//! | several keys or an external system must change together, one writer at a time | a [`crate::Lock`] with its fencing token |
//! | work that can happen later, by other processes, each item exactly once | a [`crate::queue::Queue`] |
//!
//! Each helper touches one key, so it works on Redis Cluster as is.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::validate_name;

static CAS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("cas.lua")));
static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("take.lua")));

/// The largest value a versioned record accepts (16 MiB).
pub const MAX_VERSIONED_VALUE: usize = 16 * 1024 * 1024;

fn key(root: &str, kind: &str, name: &str) -> Result<String> {
    validate_name("record name", name)?;
    if name.starts_with('}') {
        return Err(Error::invalid("record name", "must not start with '}'"));
    }
    Ok(format!("{root}{kind}:{{{name}}}"))
}

fn backend(backend: &Option<Backend>) -> Result<&Backend> {
    backend.as_ref().ok_or_else(|| {
        Error::invalid(
            "client",
            "this helper needs a single-Redis client, not Redlock",
        )
    })
}

/// A record written with compare-and-set on its version: a write succeeds only
/// if nobody wrote since the version it read, else [`Error::Conflict`].
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let balance = client.versioned("account:7");
/// // Read, compute, write; on a conflict re-read and retry, at most 10 times.
/// let (version, new) = balance.update(10, |old| {
///     let n: i64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
///     let next = n + 1;
///     (next.to_string().into_bytes(), next)
/// }).await?;
/// println!("balance {new} at version {version}");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Versioned {
    backend: Option<Backend>,
    name: String,
    root: std::sync::Arc<str>,
}

impl Versioned {
    /// The record `name` on `backend` (`None` under Redlock: calls fail clearly).
    pub(crate) fn new(backend: Option<Backend>, name: String, root: std::sync::Arc<str>) -> Self {
        Versioned {
            backend,
            name,
            root,
        }
    }

    /// The current data and version (`None`: never written; its version is 0).
    pub async fn read(&self) -> Result<Option<(Vec<u8>, u64)>> {
        let key = key(&self.root, "versioned", &self.name)?;
        read_reply(
            backend(&self.backend)?
                .query(redis::cmd("HMGET").arg(&key).arg("v").arg("data"))
                .await?,
        )
    }

    /// Write `data` if the version is still `expected` (0: not written yet).
    /// Returns the new version, or [`Error::Conflict`] with the current one.
    pub async fn write(&self, expected: u64, data: impl AsRef<[u8]>) -> Result<u64> {
        let key = key(&self.root, "versioned", &self.name)?;
        let data = data.as_ref();
        if data.len() > MAX_VERSIONED_VALUE {
            return Err(Error::invalid(
                "value",
                format!("{} bytes is larger than {MAX_VERSIONED_VALUE}", data.len()),
            ));
        }
        let reply = backend(&self.backend)?
            .eval(CAS.key(&key).arg(expected).arg(data))
            .await?;
        cas_reply(reply, &self.name, expected)
    }

    /// Read, compute with `f`, write; on a conflict start over, up to
    /// `max_attempts` times (1 ..= 1000) with a short jittered pause. Returns the
    /// new version and what `f` returned with the data that was written; the
    /// last [`Error::Conflict`] when every attempt conflicted.
    pub async fn update<T>(
        &self,
        max_attempts: u32,
        mut f: impl FnMut(Option<&[u8]>) -> (Vec<u8>, T),
    ) -> Result<(u64, T)> {
        self.update_with(max_attempts, |old| {
            let out = f(old.as_deref());
            async move { Ok(out) }
        })
        .await
    }

    /// Like [`Versioned::update`] with an async computation that may fail.
    pub async fn update_with<T, F, Fut>(&self, max_attempts: u32, mut f: F) -> Result<(u64, T)>
    where
        F: FnMut(Option<Vec<u8>>) -> Fut,
        Fut: Future<Output = Result<(Vec<u8>, T)>>,
    {
        if max_attempts == 0 || max_attempts > 1000 {
            return Err(Error::invalid("max attempts", "must be 1 ..= 1000"));
        }
        let mut pause = Duration::from_millis(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.read().await?;
            let version = current.as_ref().map_or(0, |(_, v)| *v);
            let (data, out) = f(current.map(|(d, _)| d)).await?;
            match self.write(version, data).await {
                Ok(v) => return Ok((v, out)),
                Err(e @ Error::Conflict { .. }) if attempt >= max_attempts => return Err(e),
                Err(Error::Conflict { .. }) => {
                    tokio::time::sleep(crate::services::jittered(pause)).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// What [`Stock::take`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Taken; this much is left.
    Taken {
        /// What remains.
        left: u64,
    },
    /// Not enough left; nothing changed.
    Insufficient {
        /// What remains.
        left: u64,
    },
}

/// An atomic counter that never goes below zero: the flash sale's stock when
/// the whole critical section is "take one if any is left".
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let phones = client.stock("phones");
/// phones.set(10).await?;
/// match phones.take(1).await? {
///     dlm::consistency::Take::Taken { left } => println!("sold, {left} left"),
///     dlm::consistency::Take::Insufficient { .. } => println!("sold out"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Stock {
    backend: Option<Backend>,
    name: String,
    root: std::sync::Arc<str>,
}

impl Stock {
    /// The counter `name` on `backend` (`None` under Redlock: calls fail clearly).
    pub(crate) fn new(backend: Option<Backend>, name: String, root: std::sync::Arc<str>) -> Self {
        Stock {
            backend,
            name,
            root,
        }
    }

    /// Set the stock to `n` (at most `i64::MAX`, the most Redis can count:
    /// a larger level would make every later take, add and get fail).
    pub async fn set(&self, n: u64) -> Result<()> {
        let key = key(&self.root, "stock", &self.name)?;
        amount(n)?;
        backend(&self.backend)?
            .query::<()>(redis::cmd("SET").arg(&key).arg(n))
            .await
    }

    /// What is left (0 when never set).
    pub async fn get(&self) -> Result<u64> {
        let key = key(&self.root, "stock", &self.name)?;
        level_reply(
            backend(&self.backend)?
                .query(redis::cmd("GET").arg(&key))
                .await?,
        )
    }

    /// Take `n` (>= 1) if at least `n` is left, in one script.
    pub async fn take(&self, n: u64) -> Result<Take> {
        let key = key(&self.root, "stock", &self.name)?;
        if n == 0 {
            return Err(Error::invalid("amount", "must be at least 1"));
        }
        amount(n)?;
        take_reply(backend(&self.backend)?.eval(TAKE.key(&key).arg(n)).await?)
    }

    /// Add `n` (a restock or a cancelled order); returns the new level.
    pub async fn add(&self, n: u64) -> Result<u64> {
        let key = key(&self.root, "stock", &self.name)?;
        let n = amount(n)?;
        level_reply(
            backend(&self.backend)?
                .query(redis::cmd("INCRBY").arg(&key).arg(n))
                .await?,
        )
    }
}

/// `n` as the signed integer Redis counts in, or why it cannot be one.
fn amount(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::invalid("amount", format!("{n} is above i64::MAX")))
}

/// HMGET v data of a versioned record: the data and its version, if written.
fn read_reply(v: Value) -> Result<Option<(Vec<u8>, u64)>> {
    let (v, data): (Option<u64>, Option<Vec<u8>>) = redis::from_redis_value(v)?;
    Ok(match (v, data) {
        (Some(v), Some(d)) => Some((d, v)),
        _ => None,
    })
}

/// cas.lua: written (1) with the new version, or the version found instead.
fn cas_reply(v: Value, name: &str, expected: u64) -> Result<u64> {
    let (ok, version): (i64, u64) = redis::from_redis_value(v)?;
    if ok == 1 {
        Ok(version)
    } else {
        Err(Error::Conflict {
            name: name.to_string(),
            expected,
            current: version,
        })
    }
}

/// take.lua: taken (1) or not, and what is left.
fn take_reply(v: Value) -> Result<Take> {
    let (ok, left): (i64, i64) = redis::from_redis_value(v)?;
    let left = u64::try_from(left).unwrap_or(0);
    Ok(if ok == 1 {
        Take::Taken { left }
    } else {
        Take::Insufficient { left }
    })
}

/// GET or INCRBY of a stock: its level (never set or negative: 0).
fn level_reply(v: Value) -> Result<u64> {
    let n: Option<i64> = redis::from_redis_value(v)?;
    Ok(n.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    /// Every reply decoder of the versioned record and the stock.
    const DECODERS: &[Decoder] = &[
        ("versioned read", |v| read_reply(v).is_ok()),
        ("cas", |v| cas_reply(v, "r", 1).is_ok()),
        ("take", |v| take_reply(v).is_ok()),
        ("stock get/add", |v| level_reply(v).is_ok()),
    ];

    decoder_tests!(fuzz_consistency_replies, DECODERS);
}
