//! Looking at the locks held on a Redis without holding them: the locks
//! whose names match a glob, with their remaining TTL and fence
//! ([`crate::Client::held_locks`]), and a release by force
//! ([`Lock::force_release`]) for operators. Made for dashboards.

use std::time::Duration;

use futures_util::future::join_all;

use crate::backend::{Backend, glob_escape};
use crate::error::{Error, Result};
use crate::lock::{Lock, Locks};
use crate::token::Fence;

/// The most locks one [`crate::Client::held_locks`] call returns.
pub const MAX_HELD_LOCKS: usize = 1000;

/// A lock somebody holds, as [`crate::Client::held_locks`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldLock {
    /// The lock's name.
    pub name: String,
    /// Its Redis key.
    pub key: String,
    /// Its remaining TTL (`None`: the key has no expiry).
    pub ttl: Option<Duration>,
    /// The last fencing token its counter handed out: at least the
    /// holder's (see [`crate::keys`]).
    pub fence: Option<Fence>,
}

impl Locks {
    /// The one Redis of a single-node client (an error under Redlock).
    fn single(&self) -> Result<&Backend> {
        self.single_backend().ok_or_else(|| {
            Error::invalid(
                "client",
                "lock inspection needs a single-Redis client, not Redlock",
            )
        })
    }

    /// Up to `limit` held locks whose names match `pattern`, sorted by name.
    pub(crate) async fn held_matching(&self, pattern: &str, limit: usize) -> Result<Vec<HeldLock>> {
        if limit == 0 || limit > MAX_HELD_LOCKS {
            return Err(Error::invalid(
                "limit",
                format!("{limit} is outside 1 ..= {MAX_HELD_LOCKS}"),
            ));
        }
        let backend = self.single()?;
        // The lock key is PREFIX{NAME}: the pattern goes between the braces.
        let glob = format!("{}{{{pattern}}}", glob_escape(&self.prefix));
        self.prepare().await?;
        let mut names: Vec<String> = backend
            .scan(&glob, limit)
            .await?
            .into_iter()
            .filter_map(|key| {
                key.strip_prefix(self.prefix.as_str())?
                    .strip_prefix('{')?
                    .strip_suffix('}')
                    .map(str::to_string)
            })
            .collect();
        names.sort();
        names.dedup();
        let looks = names.into_iter().map(|name| async move {
            let keys = self.lock_keys(&name, false)?;
            let status = self.nodes.status(&name, &keys).await?;
            Ok::<_, Error>(status.held.then_some(HeldLock {
                key: keys.lock.to_string(),
                ttl: status.ttl,
                fence: status.fence,
                name,
            }))
        });
        // A lock released between the scan and its status is left out.
        join_all(looks)
            .await
            .into_iter()
            .filter_map(Result::transpose)
            .collect()
    }
}

impl Lock {
    /// Delete the lock's key whoever holds it: **unsafe**, as its holder
    /// goes on believing it holds the lock (its fence still protects
    /// storage that checks fences). For an operator freeing a lock whose
    /// holder is known dead. True when a key was deleted.
    pub async fn force_release(&self) -> Result<bool> {
        let key = self.key()?;
        let backend = self.locks.single()?;
        let deleted: i64 = backend.query(redis::cmd("DEL").arg(&key)).await?;
        Ok(deleted > 0)
    }
}
