//! What shows a sharded queue as one (issue 35; docs/sharded-queue.md,
//! section 8): reads run one script per shard and are merged; a task named
//! by id is looked for in its home shard first, then in every other one.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::queue::shards::Layout;
use crate::queue::{Completed, DeadTask, Entry, Queue, QueueSettings, QueueStats, Removed};

impl Queue {
    /// The handle of the shard that holds task `id` (any state a task
    /// lookup sees), its home first; its home when no shard knows it; this
    /// handle itself on a queue that is not sharded.
    pub(crate) async fn holder_of(&self, id: &str) -> Result<Queue> {
        let Some(l) = self.sharded_view().await? else {
            return Ok(self.clone());
        };
        let at = match self.find_shard(&l, id).await? {
            Some(i) => i,
            None => l.home(id),
        };
        Ok(self.shard(at, l.tag(at)))
    }

    /// Each live shard's counts, in shard order, read concurrently.
    pub(crate) async fn shard_stats_of(&self, l: &Layout) -> Result<Vec<QueueStats>> {
        let shards = self.shard_handles(l);
        futures_util::future::try_join_all(shards.iter().map(Queue::stats_here)).await
    }

    /// Each shard's counts, in shard order (one entry for a queue that is
    /// not sharded). [`Queue::stats`] gives their sum. Also sets the gauges
    /// [`Queue::stats`] sets (from the sum) and, for more than one shard,
    /// `dlm_queue_shard_depth{queue,shard}` (see [`crate::metrics`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// for (i, s) in client.queue("clicks").shard_stats().await?.iter().enumerate() {
    ///     println!("shard {i}: {} waiting, {} in flight", s.waiting, s.inflight);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn shard_stats(&self) -> Result<Vec<QueueStats>> {
        let shards = match self.sharded_view().await? {
            Some(l) => self.shard_stats_of(&l).await?,
            None => vec![self.stats_here().await?],
        };
        let total = QueueStats::sum(&shards);
        self.metrics.sampled(
            [total.waiting, total.delayed, total.inflight, total.dead],
            total.oldest_due,
            total.results_evicted,
        );
        let waiting: Vec<u64> = shards.iter().map(|s| s.waiting).collect();
        self.metrics.shards_sampled(&waiting);
        Ok(shards)
    }

    /// The top `count` of every shard, merged: each shard's own order is
    /// kept (priority, then due time), and across shards the earlier due
    /// time goes first. The shard of each entry comes with it.
    async fn top_with_shards(&self, l: &Layout, count: usize) -> Result<Vec<(u16, Entry)>> {
        let shards = self.shard_handles(l);
        let tops =
            futures_util::future::try_join_all(shards.iter().map(|q| q.top_here(count))).await?;
        let mut heads: Vec<std::collections::VecDeque<Entry>> =
            tops.into_iter().map(Into::into).collect();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let next = heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| h.front().map(|e| (e.score, i)))
                .min();
            let Some((_, i)) = next else { break };
            if let Some(e) = heads[i].pop_front() {
                out.push((u16::try_from(i).unwrap_or(0), e));
            }
        }
        Ok(out)
    }

    pub(crate) async fn top_sharded(&self, l: &Layout, count: usize) -> Result<Vec<Entry>> {
        Ok(self
            .top_with_shards(l, count)
            .await?
            .into_iter()
            .map(|(_, e)| e)
            .collect())
    }

    /// Pop across shards: the merged top decides how many to take from each
    /// shard, then each shard pops that many (atomic per shard). Never more
    /// than `count`, never one task twice; a concurrent claim or pop may
    /// make a shard give fewer, so the result may be shorter than the top.
    pub(crate) async fn pop_sharded(&self, l: &Layout, count: usize) -> Result<Vec<Entry>> {
        let top = self.top_with_shards(l, count).await?;
        let mut per: Vec<usize> = vec![0; usize::from(l.live())];
        for (i, _) in &top {
            per[usize::from(*i)] += 1;
        }
        let shards = self.shard_handles(l);
        let popped = futures_util::future::try_join_all(
            shards
                .iter()
                .zip(&per)
                .filter(|(_, n)| **n > 0)
                .map(|(q, n)| q.pop_here(*n)),
        )
        .await?;
        let mut all: Vec<Entry> = popped.into_iter().flatten().collect();
        all.sort_by_key(|e| e.score);
        Ok(all)
    }

    pub(crate) async fn remove_if_score_sharded(
        &self,
        l: &Layout,
        id: &str,
        score: u64,
    ) -> Result<Removed> {
        let home = l.home(id);
        let mut order: Vec<u16> = vec![home];
        order.extend((0..l.live()).filter(|i| *i != home));
        let mut changed = None;
        for i in order {
            match self
                .shard(i, l.tag(i))
                .remove_if_score_here(id, score)
                .await?
            {
                Removed::Removed => return Ok(Removed::Removed),
                Removed::ScoreChanged(s) => changed = changed.or(Some(s)),
                _ => {}
            }
        }
        Ok(changed.map_or(Removed::NotPresent, Removed::ScoreChanged))
    }

    /// Shard 0's settings, the queue-wide rate limit (the sum of the
    /// shards' shares) and the number of shards.
    pub(crate) async fn settings_sharded(&self, l: &Layout) -> Result<QueueSettings> {
        let shards = self.shard_handles(l);
        let all =
            futures_util::future::try_join_all(shards.iter().map(Queue::settings_here)).await?;
        let mut s = all.first().copied().unwrap_or_default();
        // The limit as configured, kept on shard 0 (the shards hold shares).
        match self.rate_total().await? {
            Some(total) => s = s.rate(Some(total)),
            None if s.get_rate().is_some() => s = s.rate(None),
            None => {}
        }
        s.shards = Some(l.k);
        Ok(s)
    }

    /// Write `change` to every shard, shard 0 first; a rate limit is split
    /// into per-shard shares (at least 1 each: a limit below K is refused).
    pub(crate) async fn configure_sharded(
        &self,
        l: &Arc<Layout>,
        change: &QueueSettings,
    ) -> Result<QueueSettings> {
        let mut plain = *change;
        let rate = change.rate;
        if let Some(Some(r)) = rate {
            if r.n() < u32::from(l.live()) {
                return Err(Error::invalid(
                    "rate",
                    format!(
                        "{} per {:?} is below the {} shards of queue {:?}: each shard needs a share of at least 1; lower K or raise the limit",
                        r.n(),
                        r.period(),
                        l.k,
                        self.name()
                    ),
                ));
            }
            plain.rate = None;
        }
        for q in self.shard_handles(l) {
            q.configure_here(&plain).await?;
        }
        match rate {
            Some(Some(r)) => {
                self.set_rate_total(Some(r)).await?;
                self.sync_rate_shares().await?;
            }
            Some(None) => {
                self.set_rate_total(None).await?;
                for q in self.shard_handles(l) {
                    q.configure_here(&QueueSettings::default().rate(None))
                        .await?;
                }
            }
            None => {}
        }
        self.settings_sharded(l).await
    }

    pub(crate) async fn completed_sharded(
        &self,
        l: &Layout,
        count: usize,
    ) -> Result<Vec<Completed>> {
        let shards = self.shard_handles(l);
        let all =
            futures_util::future::try_join_all(shards.iter().map(|q| q.completed_here(count)))
                .await?;
        let mut merged: Vec<Completed> = all.into_iter().flatten().collect();
        merged.sort_by_key(|c| std::cmp::Reverse(c.at));
        merged.truncate(count);
        Ok(merged)
    }

    pub(crate) async fn dead_sharded(&self, l: &Layout, count: usize) -> Result<Vec<DeadTask>> {
        let shards = self.shard_handles(l);
        let all =
            futures_util::future::try_join_all(shards.iter().map(|q| q.dead_here(count))).await?;
        let mut merged: Vec<DeadTask> = all.into_iter().flatten().collect();
        merged.sort_by_key(|d| d.died_at);
        merged.truncate(count);
        Ok(merged)
    }
}

impl QueueStats {
    /// The counts of a whole sharded queue from its shards' (as
    /// [`Queue::shard_stats`] gives them): counts add up, the oldest due task
    /// is the oldest of all, paused if any shard is. [`Queue::stats`] is this
    /// sum, read in one call.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let per_shard = client.queue("clicks").shard_stats().await?;
    /// let total = dlm::queue::QueueStats::sum(&per_shard);
    /// println!("{} waiting over {} shards", total.waiting, per_shard.len());
    /// # Ok(()) }
    /// ```
    pub fn sum(shards: &[QueueStats]) -> QueueStats {
        let mut t = QueueStats::default();
        for s in shards {
            t.waiting += s.waiting;
            t.delayed += s.delayed;
            t.inflight += s.inflight;
            t.dead += s.dead;
            t.processed += s.processed;
            t.failed += s.failed;
            t.oldest_due = t.oldest_due.max(s.oldest_due);
            t.paused |= s.paused;
            t.blocked += s.blocked;
            t.result_bytes += s.result_bytes;
            t.results_evicted += s.results_evicted;
        }
        t
    }
}
