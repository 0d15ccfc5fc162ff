//! Unique, increasing ids handed out across servers (seed 001's global
//! ids): one Redis counter per name, `dlm:ids:{NAME}`.
//!
//! Two ways to use it, one counter:
//!
//! | | [`Ids::next`] / [`Ids::next_batch`] by default | with [`Ids::block`]`(k)` |
//! |---|---|---|
//! | cost | one `INCR` / `INCRBY` round trip per call | one `INCRBY k` per `k` ids; the rest are handed out locally |
//! | unique across processes | yes | yes |
//! | increasing | in the order Redis ran the calls, across all clients (a later call gets a larger id) | strictly within one [`Ids`] handle (and its clones); across processes ids are unique but interleave in blocks, not in time order |
//! | gaps | none (every id is handed out) | a process that stops leaves the rest of its block unused: those ids are skipped, never given to anyone else |
//!
//! Use the default when "larger id = later" must hold across the whole
//! system; use a block when throughput matters (100 000 ids/s and more from
//! one process, see BENCHMARKS.md) and uniqueness is what counts.
//!
//! **Restarts.** The counter is an ordinary Redis string: with
//! `appendonly yes` and `appendfsync always` every id given out survives a
//! restart and is never given out again. With `appendfsync everysec` (the
//! default) a crash can lose up to a second of increments, and the ids
//! handed out in that second would be handed out again; without persistence
//! the counter starts over. Failover to a replica that missed the last
//! increments has the same effect.
//!
//! ```no_run
//! # async fn demo(client: dlm::Client) -> dlm::Result<()> {
//! let orders = client.ids("orders");
//! let id = orders.next().await?;                      // one INCR: globally ordered
//! let fast = client.ids("events").block(1000);        // one INCRBY per 1000 ids
//! let batch = fast.next_batch(10).await?;             // 10 increasing ids
//! assert!(batch.windows(2).all(|w| w[0] < w[1]));
//! # Ok(()) }
//! ```

use std::sync::Arc;

use redis::Value;
use tokio::sync::Mutex;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::ids_key;

/// The most ids one [`Ids::next_batch`] returns, and the largest block.
pub const MAX_IDS_BATCH: u64 = 1_000_000;

/// An id generator; get one from [`crate::Client::ids`]. Cheap to clone:
/// clones share the reserved block.
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let ids = client.ids("invoices");
/// println!("invoice {}", ids.next().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Ids {
    backend: Option<Backend>,
    name: String,
    block: u64,
    /// The ids reserved and not handed out yet: `next ..= last`.
    reserved: Arc<Mutex<Reserved>>,
    root: std::sync::Arc<str>,
}

#[derive(Debug, Default)]
struct Reserved {
    next: u64,
    last: u64,
}

impl Reserved {
    fn left(&self) -> u64 {
        if self.next == 0 || self.next > self.last {
            0
        } else {
            self.last - self.next + 1
        }
    }
}

impl Ids {
    /// The generator `name` on `backend` (`None` under Redlock: calls fail clearly).
    pub(crate) fn new(backend: Option<Backend>, name: String, root: std::sync::Arc<str>) -> Self {
        Ids {
            root,
            backend,
            name,
            block: 1,
            reserved: Arc::default(),
        }
    }

    /// Reserve `k` ids per round trip (1 ..= 1 000 000; 1, the default, is
    /// no reservation: every call goes to Redis). See the module docs for
    /// what a block changes: unique always, increasing per handle, gaps
    /// when a process stops with ids left.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let ids = client.ids("events").block(10_000);
    /// let a = ids.next().await?;   // reserves 10 000 ids
    /// let b = ids.next().await?;   // no round trip: a + 1
    /// assert!(b > a);
    /// # Ok(()) }
    /// ```
    pub fn block(mut self, k: u64) -> Self {
        self.block = k;
        self.reserved = Arc::default();
        self
    }

    /// The generator's name.
    ///
    /// ```no_run
    /// # fn demo(client: dlm::Client) {
    /// assert_eq!(client.ids("orders").name(), "orders");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next id (>= 1).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let id = client.ids("orders").next().await?;
    /// # Ok(()) }
    /// ```
    pub async fn next(&self) -> Result<u64> {
        self.next_batch(1)
            .await?
            .pop()
            .ok_or_else(|| Error::protocol("no id was reserved"))
    }

    /// The next `n` ids (1 ..= 1 000 000), increasing. Without a block they
    /// are consecutive (one `INCRBY n`); with one they may span two blocks.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let ids = client.ids("tickets").next_batch(3).await?;
    /// assert_eq!(ids.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn next_batch(&self, n: u64) -> Result<Vec<u64>> {
        let key = ids_key(&self.root, &self.name)?;
        if n == 0 || n > MAX_IDS_BATCH {
            return Err(Error::invalid(
                "count",
                format!("{n} ids is outside 1 ..= {MAX_IDS_BATCH}"),
            ));
        }
        if self.block == 0 || self.block > MAX_IDS_BATCH {
            return Err(Error::invalid(
                "block",
                format!("{} is outside 1 ..= {MAX_IDS_BATCH}", self.block),
            ));
        }
        let backend = self.backend.as_ref().ok_or_else(|| {
            Error::invalid("client", "ids need a single-Redis client, not Redlock")
        })?;
        // Held across the reservation: one handle reserves one block at a
        // time and hands its ids out in order.
        let mut reserved = self.reserved.lock().await;
        let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
        let take = |r: &mut Reserved, out: &mut Vec<u64>, k: u64| {
            for _ in 0..k {
                out.push(r.next);
                r.next += 1;
            }
        };
        let from_block = reserved.left().min(n);
        take(&mut reserved, &mut out, from_block);
        let missing = n - from_block;
        if missing > 0 {
            let size = missing.max(self.block);
            let last = last_reply(
                backend
                    .query(redis::cmd("INCRBY").arg(&key).arg(size))
                    .await?,
            )?;
            *reserved = Reserved {
                next: last.saturating_sub(size) + 1,
                last,
            };
            take(&mut reserved, &mut out, missing);
        }
        Ok(out)
    }
}

/// INCRBY's reply: the last id of the block just reserved (>= 1).
fn last_reply(v: Value) -> Result<u64> {
    let last: i64 = redis::from_redis_value(v)?;
    u64::try_from(last)
        .ok()
        .filter(|l| *l >= 1)
        .ok_or_else(|| Error::protocol(format!("the id counter is at {last}, below 1")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::props::{Decoder, decoder_tests};

    /// The id generator's reply decoder.
    const DECODERS: &[Decoder] = &[("ids incrby", |v| last_reply(v).is_ok())];

    decoder_tests!(fuzz_ids_replies, DECODERS);

    #[test]
    fn a_reserved_block_counts_what_is_left() {
        assert_eq!(Reserved::default().left(), 0);
        assert_eq!(Reserved { next: 5, last: 7 }.left(), 3);
        assert_eq!(Reserved { next: 8, last: 7 }.left(), 0);
        assert!(last_reply(Value::Int(0)).is_err());
        assert_eq!(last_reply(Value::Int(9)).ok(), Some(9));
    }
}
