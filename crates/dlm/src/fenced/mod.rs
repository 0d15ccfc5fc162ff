//! Fenced writes: storage that rejects writes from a holder whose lock was
//! taken over (Kleppmann's "paused client" scenario).
//!
//! A holder passes its [`Fence`] with each write; the script stores the value
//! only if that token is not lower than the highest one that has written
//! before. A client that paused past its TTL (GC, swap, SIGSTOP) and wakes up
//! still believing it holds the lock carries an older token than the holder
//! that took over, so its late write is refused instead of overwriting newer
//! data.

use std::sync::LazyLock;

use redis::Script;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::fenced_key;
use crate::token::Fence;

/// The largest value a fenced write accepts (16 MiB).
pub const MAX_FENCED_VALUE: usize = 16 * 1024 * 1024;

static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("fenced_set.lua")));

impl Client {
    fn fenced_backend(&self) -> Result<&crate::backend::Backend> {
        self.inner.nodes.single().ok_or_else(|| {
            Error::invalid(
                "client",
                "fenced writes need a single-Redis client (Redlock hands out no fencing tokens)",
            )
        })
    }

    /// Store `value` for `resource` (key `dlm:fenced:{resource}`) only if
    /// `fence` is not lower than the highest fencing token that wrote it
    /// before; otherwise [`Error::StaleFence`].
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.lock("ledger").acquire(&dlm::LockOptions::new(Duration::from_secs(5))).await?;
    /// let fence = guard.fence().expect("a single-Redis lock has a fence");
    /// // ... a long pause here may let the lock expire and another client take it ...
    /// match client.fenced_write("ledger", fence, b"balance=10").await {
    ///     Ok(()) => println!("written"),
    ///     Err(dlm::Error::StaleFence { highest, .. }) => println!("a newer holder ({highest}) wrote; dropping"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_write(
        &self,
        resource: &str,
        fence: Fence,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let key = fenced_key(resource)?;
        let value = value.as_ref();
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
        let (stored, highest): (i64, u64) = self
            .fenced_backend()?
            .eval(FENCED_SET.key(&key).arg(fence.get()).arg(value))
            .await?;
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

    /// The value stored by [`Client::fenced_write`] and the token that wrote it.
    pub async fn fenced_read(&self, resource: &str) -> Result<Option<(Fence, Vec<u8>)>> {
        let key = fenced_key(resource)?;
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = self
            .fenced_backend()?
            .query(redis::cmd("HMGET").arg(&key).arg("fence").arg("value"))
            .await?;
        Ok(match (fence, value) {
            (Some(f), Some(v)) => Some((Fence::new(f), v)),
            _ => None,
        })
    }
}
