//! One queue spread over K shards (issue 35; the design and its guarantees
//! are in docs/sharded-queue.md, which this module keeps true).
//!
//! Shard 0 is the queue's own keys (`dlm:queue:{Q}`, unchanged); shard i ≥ 1
//! is a whole queue of the same layout under `dlm:queue:shard:{Q#i}` (or
//! `{Q#i.n}`: `n` picked so that the shards spread over a Cluster's
//! masters). The layout (K, its version, the tag numbers, a lowering in
//! progress) lives in shard 0's `config` hash. Every decision still runs as
//! one script on one shard; what spans shards is a fan-out of one script per
//! shard, never one decision across slots.
//!
//! A handle caches the layout. The two calls that place or take tasks
//! (enqueue, claim) carry its version, and a shard whose layout is newer
//! answers `LAYOUT` and writes nothing (layout_gate.lua): the handle reads
//! the layout again and places the call anew. A handle that has not read
//! the layout sends them as for a queue that is not sharded, which a
//! sharded shard 0 refuses the same way, so a queue that is never sharded
//! pays nothing for this.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::{Script, Value};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::keys::{MAX_SHARDS, queue_home, queue_shard_slot, queue_shard_tag};
use crate::queue::keyset::KeySet;
use crate::queue::{Enqueued, NewTask, OnDuplicate, Queue, QueueSettings, ops};

/// How old a cached layout may be for a read that shows the whole queue
/// (stats, peek, dead, ...). Hot calls need no age: the scripts check.
const READ_LAYOUT_AGE: Duration = Duration::from_secs(1);
/// How old a worker's cached layout may be before a claim reads it again
/// (so a worker learns of new shards even if a change was left unfinished).
const CLAIM_LAYOUT_AGE: Duration = Duration::from_secs(5);
/// How many times a call is placed anew after `LAYOUT` before it gives up.
const PLACE_ATTEMPTS: usize = 5;

/// A queue's layout as stored in shard 0's `config`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Shards new tasks are placed over.
    pub(crate) k: u16,
    /// 0: never sharded (the scripts then take calls without a version).
    pub(crate) version: u64,
    /// The tag number of each shard (index 0 is always 0).
    pub(crate) tags: Vec<u16>,
    /// While a lowering drains: the number of shards before it.
    pub(crate) draining: Option<u16>,
}

impl Layout {
    #[cfg(test)]
    fn plain() -> Self {
        Layout {
            k: 1,
            version: 0,
            tags: vec![0],
            draining: None,
        }
    }

    /// Never sharded: today's queue.
    pub(crate) fn is_plain(&self) -> bool {
        self.version == 0
    }

    /// The shards workers claim from and readers read: the placed ones and
    /// those still draining.
    pub(crate) fn live(&self) -> u16 {
        self.draining.map_or(self.k, |d| d.max(self.k))
    }

    pub(crate) fn tag(&self, i: u16) -> u16 {
        self.tags.get(usize::from(i)).copied().unwrap_or(0)
    }

    /// The shard of a task whose shard key is `key`.
    pub(crate) fn home(&self, key: &str) -> u16 {
        queue_home(key, self.k)
    }

    /// `shard_n` as stored: the tag numbers of shards 1.. (comma list).
    fn tags_field(&self) -> String {
        self.tags
            .iter()
            .skip(1)
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// From `HMGET config shards layout shard_n draining`.
    fn parse(v: &[Value]) -> Result<Self> {
        let field = |i: usize| -> Option<String> {
            match v.get(i) {
                Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
                Some(Value::Int(n)) => Some(n.to_string()),
                _ => None,
            }
        };
        let bad = |what: &str| Error::protocol(format!("a queue layout with a bad {what}"));
        let k = match field(0) {
            Some(s) => s.parse::<u16>().map_err(|_| bad("shards"))?,
            None => 1,
        };
        let version = match field(1) {
            Some(s) => s.parse::<u64>().map_err(|_| bad("layout"))?,
            None => 0,
        };
        let draining = match field(3) {
            Some(s) if !s.is_empty() => Some(s.parse::<u16>().map_err(|_| bad("draining"))?),
            _ => None,
        };
        let mut tags = vec![0];
        if let Some(list) = field(2) {
            for n in list.split(',').filter(|s| !s.is_empty()) {
                tags.push(n.parse().map_err(|_| bad("shard_n"))?);
            }
        }
        let live = draining.map_or(k, |d| d.max(k));
        if k == 0 || live > MAX_SHARDS {
            return Err(bad("number of shards"));
        }
        tags.resize(usize::from(live), 0);
        Ok(Layout {
            k,
            version,
            tags,
            draining,
        })
    }
}

/// How many claim rounds in a row of a sharded queue's handle start at the
/// same shard while it gives what they ask (a round that gets fewer moves
/// the start on at once). A worker's running tasks then mostly share a
/// shard, so that its acks and renewals go out in one script instead of one
/// per shard; every non-empty shard is still the first of a round within
/// K x this many rounds, and across shards at most W x K x this x c tasks
/// are claimed before a task that heads its shard (W workers claiming c at
/// a time; docs/sharded-queue.md, "Fairness").
///
/// ```
/// assert_eq!(dlm::queue::STICKY_ROUNDS, 8);
/// ```
pub const STICKY_ROUNDS: usize = 8;

/// What the handles of one queue share: the cached layout, the shards' key
/// sets and the claim cursor.
#[derive(Debug, Default)]
pub(crate) struct Sharding {
    known: RwLock<Option<(Arc<Layout>, Instant)>>,
    keysets: Mutex<HashMap<(u16, u16), Arc<KeySet>>>,
    cursor: AtomicUsize,
}

/// How a sharded queue is laid out ([`Queue::shards`]).
///
/// ```no_run
/// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
/// let layout = client.queue("clicks").shards().await?;
/// for s in &layout.shards {
///     println!("shard {} tag {} slot {}", s.index, s.tag, s.slot);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardLayout {
    /// Shards new tasks go to (1: not sharded).
    pub k: u16,
    /// The layout's version: +1 at every change (0: never sharded).
    pub version: u64,
    /// While a lowering drains: how many shards there were before it.
    pub draining: Option<u16>,
    /// Every shard workers claim from, in order.
    pub shards: Vec<ShardInfo>,
}

/// One shard of a queue ([`ShardLayout`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardInfo {
    /// 0 ..= K - 1 (and the draining ones after).
    pub index: u16,
    /// Its hash tag (`Q` for shard 0, else `Q#i` or `Q#i.n`).
    pub tag: String,
    /// Its Redis Cluster slot.
    pub slot: u16,
    /// The master that serves that slot (`host:port`), on a Redis Cluster
    /// whose slot map could be read; `None` elsewhere.
    pub master: Option<String>,
}

impl Queue {
    /// Whether this handle is one shard of a queue (made by the fan-out),
    /// which never fans out itself.
    fn fans_out(&self) -> bool {
        !self.is_shard
    }

    /// The layout from Redis (shard 0's config), cached for this handle and
    /// its clones.
    pub(crate) async fn read_layout(&self) -> Result<Arc<Layout>> {
        let (backend, keys) = self.ready()?;
        let v: Vec<Value> = backend
            .query(
                redis::cmd("HMGET")
                    .arg(&keys[10])
                    .arg("shards")
                    .arg("layout")
                    .arg("shard_n")
                    .arg("draining"),
            )
            .await?;
        let layout = Arc::new(Layout::parse(&v)?);
        if let Ok(mut known) = self.sharding.known.write() {
            *known = Some((layout.clone(), Instant::now()));
        }
        Ok(layout)
    }

    /// The cached layout when younger than `age`, else read again.
    pub(crate) async fn layout_within(&self, age: Duration) -> Result<Arc<Layout>> {
        if let Some(l) = self.cached_layout(age) {
            return Ok(l);
        }
        self.read_layout().await
    }

    fn cached_layout(&self, age: Duration) -> Option<Arc<Layout>> {
        let known = self.sharding.known.read().ok()?;
        let (l, at) = known.as_ref()?;
        (at.elapsed() < age).then(|| l.clone())
    }

    /// The cached layout whatever its age (`None`: never read).
    pub(crate) fn known_layout(&self) -> Option<Arc<Layout>> {
        self.cached_layout(Duration::MAX)
    }

    /// For a read that shows the whole queue: `Some(layout)` when the queue
    /// is sharded and this handle fans out, `None` when the call should run
    /// here as it always did.
    pub(crate) async fn sharded_view(&self) -> Result<Option<Arc<Layout>>> {
        if !self.fans_out() {
            return Ok(None);
        }
        let l = self.layout_within(READ_LAYOUT_AGE).await?;
        Ok((!l.is_plain()).then_some(l))
    }

    /// As [`Queue::sharded_view`], with the layout read now.
    pub(crate) async fn sharded_view_now(&self) -> Result<Option<Arc<Layout>>> {
        if !self.fans_out() {
            return Ok(None);
        }
        let l = self.read_layout().await?;
        Ok((!l.is_plain()).then_some(l))
    }

    /// The handle of shard `i` (tag number `n`): a queue value with that
    /// shard's keys, sharing everything else with this one.
    pub(crate) fn shard(&self, i: u16, n: u16) -> Queue {
        let mut q = self.clone();
        q.is_shard = true;
        q.shard_index = i;
        q.shard_n = n;
        if i > 0 {
            let keys = {
                let mut sets = match self.sharding.keysets.lock() {
                    Ok(s) => s,
                    Err(poisoned) => poisoned.into_inner(),
                };
                sets.entry((i, n))
                    .or_insert_with(|| {
                        Arc::new(self.keys.for_shard(self.root(), self.name(), i, n))
                    })
                    .clone()
            };
            q.keys = keys;
        }
        q
    }

    /// Handles of every live shard of `layout`.
    pub(crate) fn shard_handles(&self, layout: &Layout) -> Vec<Queue> {
        (0..layout.live())
            .map(|i| self.shard(i, layout.tag(i)))
            .collect()
    }

    /// Which shard this handle is (0 for a queue's own handle).
    pub(crate) fn shard_index(&self) -> u16 {
        self.shard_index
    }

    /// How the queue is spread: K, the layout's version and every shard
    /// with its hash tag and Cluster slot (read from Redis).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let layout = client.queue("clicks").shards().await?;
    /// println!("{} shards, layout version {}", layout.k, layout.version);
    /// # Ok(()) }
    /// ```
    pub async fn shards(&self) -> Result<ShardLayout> {
        let l = self.read_layout().await?;
        let (backend, _) = self.ready()?;
        let masters = master_map(backend).await;
        Ok(ShardLayout {
            k: l.k,
            version: l.version,
            draining: l.draining,
            shards: (0..l.live())
                .map(|i| {
                    let slot = queue_shard_slot(self.name(), i, l.tag(i));
                    ShardInfo {
                        index: i,
                        tag: queue_shard_tag(self.name(), i, l.tag(i)),
                        slot,
                        master: masters
                            .as_deref()
                            .and_then(|m| master_of(m, slot))
                            .map(str::to_string),
                    }
                })
                .collect(),
        })
    }

    /// The shard `task` goes to under `layout`, its dependencies aside:
    /// its group's home, else its shard key's, else its id's.
    fn place(layout: &Layout, task: &NewTask) -> u16 {
        match (&task.group, &task.shard_key) {
            (Some(g), _) => layout.home(g),
            (None, Some(k)) => layout.home(k),
            (None, None) => layout.home(&task.id),
        }
    }

    /// Where a task of this queue would go now (its dependencies aside):
    /// 0 for a queue that is not sharded.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let q = client.queue("clicks");
    /// let shard = q.shard_of(&dlm::queue::NewTask::new("c:1").group("user:7")).await?;
    /// println!("goes to shard {shard}");
    /// # Ok(()) }
    /// ```
    pub async fn shard_of(&self, task: &NewTask) -> Result<u16> {
        let l = self.layout_within(READ_LAYOUT_AGE).await?;
        Ok(Self::place(&l, task))
    }

    /// The live shard that holds task `id` (any state a task lookup sees),
    /// asking its home first; `None`: no shard knows it.
    pub(crate) async fn find_shard(&self, layout: &Layout, id: &str) -> Result<Option<u16>> {
        let home = layout.home(id);
        if self
            .shard(home, layout.tag(home))
            .task_here(id)
            .await?
            .is_some()
        {
            return Ok(Some(home));
        }
        let others: Vec<u16> = (0..layout.live()).filter(|i| *i != home).collect();
        let found = futures_util::future::try_join_all(others.iter().map(|&i| {
            let q = self.shard(i, layout.tag(i));
            let id = id.to_string();
            async move { q.task_here(&id).await.map(|t| t.is_some()) }
        }))
        .await?;
        Ok(others
            .into_iter()
            .zip(found)
            .find(|(_, f)| *f)
            .map(|(i, _)| i))
    }

    /// The shard of each task of a push, in order: its dependencies' shard
    /// (one in this batch goes where that task goes), else [`Queue::place`].
    /// Refuses, before anything is written, dependencies that sit in
    /// different shards and a group or shard key that points elsewhere.
    async fn place_all(&self, layout: &Layout, tasks: &[&NewTask]) -> Result<Vec<u16>> {
        let mut out: Vec<u16> = Vec::with_capacity(tasks.len());
        let mut in_batch: HashMap<&str, u16> = HashMap::new();
        let mut looked_up: HashMap<String, Option<u16>> = HashMap::new();
        for t in tasks {
            let own = Self::place(layout, t);
            let mut deps_at: Vec<(&str, u16)> = Vec::new();
            for d in &t.deps {
                let at = match in_batch.get(d.as_str()) {
                    Some(s) => Some(*s),
                    None => match looked_up.get(d) {
                        Some(s) => *s,
                        None => {
                            let s = self.find_shard(layout, d).await?;
                            looked_up.insert(d.clone(), s);
                            s
                        }
                    },
                };
                if let Some(s) = at {
                    deps_at.push((d.as_str(), s));
                }
            }
            let shard = match deps_at.first() {
                None => own,
                Some((_, s)) => {
                    if deps_at.iter().any(|(_, o)| o != s) {
                        let list = deps_at
                            .iter()
                            .map(|(d, s)| format!("{d} (shard {s})"))
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(Error::invalid(
                            "after",
                            format!(
                                "dependencies of {:?} are in different shards: {list}; push a workflow with one --shard-key",
                                t.id
                            ),
                        ));
                    }
                    if *s >= layout.k {
                        return Err(Error::invalid(
                            "after",
                            format!(
                                "the dependencies of {:?} are in shard {s}, which a lowering of the queue's shards is draining: it takes no new task; push it once the drain has finished (then its dependencies are gone from the queue's view) or before lowering",
                                t.id
                            ),
                        ));
                    }
                    if (t.group.is_some() || t.shard_key.is_some()) && own != *s {
                        return Err(Error::invalid(
                            "after",
                            format!(
                                "task {:?}: its dependencies are in shard {s}, its {} in shard {own}; give it the shard key of its dependencies",
                                t.id,
                                if t.group.is_some() {
                                    "group"
                                } else {
                                    "shard key"
                                }
                            ),
                        ));
                    }
                    *s
                }
            };
            in_batch.insert(t.id.as_str(), shard);
            out.push(shard);
        }
        Ok(out)
    }

    /// Enqueue on a queue that may be sharded: today's call while the queue
    /// is not; else one `enqueue` per shard touched, concurrently (atomic per
    /// shard), each carrying the layout version and placed anew after
    /// `LAYOUT`.
    pub(crate) async fn enqueue_placed(
        &self,
        tasks: &[NewTask],
        delay: Duration,
        on_duplicate: OnDuplicate,
    ) -> Result<Vec<Enqueued>> {
        let mut out: Vec<Option<Enqueued>> = vec![None; tasks.len()];
        let mut pending: Vec<usize> = (0..tasks.len()).collect();
        for attempt in 0..PLACE_ATTEMPTS {
            if attempt > 1 {
                // A change of K is committing: give it a moment (5, 10, 20 ms).
                tokio::time::sleep(Duration::from_millis(5 << (attempt - 2))).await;
            }
            let layout = match (attempt, self.known_layout()) {
                (0, Some(l)) => Some(l),
                (0, None) => None,
                _ => Some(self.read_layout().await?),
            };
            let layout = match layout {
                Some(l) if !l.is_plain() && self.fans_out() => l,
                _ => {
                    // As for a queue that is not sharded: shard 0, no version.
                    let subset: Vec<NewTask> = pending.iter().map(|i| tasks[*i].clone()).collect();
                    if let Some(r) = self
                        .enqueue_here(&subset, delay, on_duplicate, None)
                        .await?
                    {
                        return Ok(r);
                    }
                    continue;
                }
            };
            let refs: Vec<&NewTask> = pending.iter().map(|i| &tasks[*i]).collect();
            let shards = self.place_all(&layout, &refs).await?;
            let mut by_shard: Vec<(u16, Vec<usize>)> = Vec::new();
            for (pos, shard) in pending.iter().zip(&shards) {
                match by_shard.iter_mut().find(|(s, _)| s == shard) {
                    Some((_, v)) => v.push(*pos),
                    None => by_shard.push((*shard, vec![*pos])),
                }
            }
            let results = futures_util::future::join_all(by_shard.iter().map(|(s, idx)| {
                let q = self.shard(*s, layout.tag(*s));
                let subset: Vec<NewTask> = idx.iter().map(|i| tasks[*i].clone()).collect();
                let version = layout.version;
                async move {
                    q.enqueue_here(&subset, delay, on_duplicate, Some(version))
                        .await
                }
            }))
            .await;
            let mut still = Vec::new();
            let mut first_error = None;
            for ((_, idx), r) in by_shard.into_iter().zip(results) {
                match r {
                    Ok(Some(done)) => {
                        for (i, e) in idx.into_iter().zip(done) {
                            out[i] = Some(e);
                        }
                    }
                    Ok(None) => still.extend(idx),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
            if still.is_empty() {
                return out
                    .into_iter()
                    .map(|e| e.ok_or_else(|| Error::protocol("a task was not enqueued")))
                    .collect();
            }
            still.sort_unstable();
            pending = still;
        }
        Err(Error::Unavailable {
            source: format!(
                "the shard layout of queue {:?} kept changing during an enqueue; nothing more was written",
                self.name()
            )
            .into(),
        })
    }

    /// Claim on a queue that may be sharded: today's call while it is not;
    /// else shard by shard from a start shard until `count` are leased (the
    /// start is kept for up to [`STICKY_ROUNDS`] rounds while it gives what
    /// they ask, so every live shard is the first of a round once in K x
    /// that many rounds: none starves); with `count` 0 (returning expired
    /// leases) every shard.
    pub(crate) async fn claim_placed(&self, count: usize, lease: Duration) -> Result<ops::Claimed> {
        let layout = match self.known_layout() {
            Some(l) if !l.is_plain() && self.fans_out() => {
                match self.cached_layout(CLAIM_LAYOUT_AGE) {
                    Some(l) => l,
                    None => self.read_layout().await?,
                }
            }
            _ => {
                if let Some(c) = self.claim_here(count, lease, None).await? {
                    return Ok(c);
                }
                let l = self.read_layout().await?;
                if l.is_plain() || !self.fans_out() {
                    return Err(Error::protocol(
                        "a queue answered LAYOUT to a call of a queue that is not sharded",
                    ));
                }
                l
            }
        };
        let live = usize::from(layout.live());
        let tick = self.sharding.cursor.fetch_add(1, Ordering::Relaxed);
        let start = (tick / STICKY_ROUNDS) % live;
        let mut merged: Option<ops::Claimed> = None;
        let mut stale = false;
        for j in 0..live {
            let got = merged.as_ref().map_or(0, |m| m.tasks.len());
            if count > 0 && got >= count {
                break;
            }
            if j == 1 {
                // The start shard gave fewer than asked: the next round
                // starts at the next shard.
                self.next_start(tick);
            }
            let i = u16::try_from((start + j) % live).unwrap_or(0);
            let q = self.shard(i, layout.tag(i));
            match q.claim_here(count - got, lease, Some(layout.version)).await {
                Ok(Some(c)) => match merged.as_mut() {
                    None => merged = Some(c),
                    Some(m) => m.merge(c),
                },
                Ok(None) => stale = true,
                // Leases taken from earlier shards of this round are the
                // caller's: an error now would leave them in flight, held by
                // no one, until they expire (an attempt spent each). Return
                // them; the failing shard is asked again in later rounds.
                Err(e) if j == 0 => {
                    // A failing start shard is not kept for more rounds.
                    self.next_start(tick);
                    return Err(e);
                }
                Err(e) if merged.as_ref().is_some_and(|m| !m.tasks.is_empty()) => {
                    tracing::debug!(queue = %self.name(), shard = i, error = %e, "claim: a shard failed after others leased tasks");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if stale {
            // A shard has a newer layout: learn it for the next round.
            self.read_layout().await?;
        }
        Ok(merged.unwrap_or_else(ops::Claimed::nothing))
    }

    /// Move the claim start on to the next shard after the round of `tick`.
    fn next_start(&self, tick: usize) {
        let next = (tick / STICKY_ROUNDS)
            .saturating_add(1)
            .saturating_mul(STICKY_ROUNDS);
        self.sharding.cursor.fetch_max(next, Ordering::Relaxed);
    }

    /// Change K (issue 35, docs/sharded-queue.md section 7).
    ///
    /// Raising makes the new shards (settings copied from shard 0, the old
    /// shards' surplus rate-limit starts carried into their logs), then
    /// commits the new layout on shard 0 (a compare-and-set on its version),
    /// then bumps the other shards.
    ///
    /// Lowering runs in two compare-and-sets on shard 0, so that a caller cut
    /// off anywhere leaves a layout every handle can learn and every task
    /// reachable: first it commits the lower K with the removed shards as
    /// draining (new tasks go to the kept shards, workers still claim from
    /// all), then bumps the removed shards (so no stale call places a task
    /// there), then looks at them. Empty: a second commit drops them, and
    /// their rate-limit starts are carried into the kept shards before those
    /// shares grow. Not empty: with `drain` the drain stays (running the same
    /// change again finishes it); without, a second commit puts K back and
    /// the call fails naming what they hold.
    pub(crate) async fn reshard(&self, k: u16, drain: bool) -> Result<()> {
        if k == 0 || k > MAX_SHARDS {
            return Err(Error::invalid(
                "shards",
                format!("{k} is outside 1 ..= {MAX_SHARDS}"),
            ));
        }
        if k > 1 && self.name().contains('}') {
            return Err(Error::invalid(
                "queue name",
                "a sharded queue's name must not contain '}'",
            ));
        }
        let now = self.read_layout().await?;
        let live = now.live();
        if k == now.k && now.draining.is_none() {
            // Nothing to change; a change cut off earlier may have left the
            // shares of the limit short: write them again.
            if !now.is_plain() {
                // And the shards below K may have been left closed by a
                // refused lowering cut off before it reopened them.
                self.bump_all(now.version, &now.tags, now.k).await?;
                self.sync_rate_shares().await?;
            }
            return Ok(());
        }
        let base = self.shard(0, 0);
        // The queue-wide settings (a sharded queue's rate limit is the sum of
        // its shards' shares).
        let mut settings = if now.is_plain() {
            base.settings_here().await?
        } else {
            self.settings_sharded(&now).await?
        };
        settings.shards = None;
        let rate = settings.get_rate();
        if let Some(r) = rate
            && r.n() < u32::from(k.max(live))
        {
            return Err(Error::invalid(
                "shards",
                format!(
                    "the rate limit of {} per {:?} is below {k} shards: each shard needs a share of at least 1; lower K or raise the limit",
                    r.n(),
                    r.period()
                ),
            ));
        }
        if now.is_plain() {
            // A queue being sharded: its limit (shard 0's own, read in the
            // same step) is kept on shard 0 as the total from now on. A
            // queue already sharded keeps the total it has: a limit changed
            // or removed meanwhile by another client stays so.
            self.init_rate_total().await?;
        }
        let changed = if k > live {
            self.raise(&now, k, settings, rate).await
        } else {
            self.lower(&now, k, drain, rate).await
        };
        if rate.is_some() {
            // Another client's change of K or of the limit that came in
            // between (or this one's lost compare-and-set) is followed.
            self.sync_rate_shares().await?;
        }
        changed
    }

    /// Lower K, or finish a drain (see [`Queue::reshard`]).
    async fn lower(
        &self,
        now: &Layout,
        k: u16,
        drain: bool,
        rate: Option<crate::queue::RateLimit>,
    ) -> Result<()> {
        let live = now.live();
        // Lower (or finish a drain). First commit: K placed, the rest draining.
        let mid = now.version + 1;
        let tags = now.tags.clone();
        self.commit_layout(now.version, mid, k, &tags, Some(live))
            .await?;
        // Every shard adopts it: the removed ones closed to new tasks (a call
        // that would place one there answers LAYOUT), so that after the look
        // below nothing can enter them.
        self.bump_all(mid, &tags, k).await?;
        let mut held: Vec<String> = Vec::new();
        for i in k..live {
            let s = self.shard(i, tags[usize::from(i)]).stats_here().await?;
            let n = s.waiting + s.delayed + s.inflight + s.dead + s.blocked;
            if n > 0 {
                held.push(format!("shard {i}: {n} tasks ({} dead)", s.dead));
            }
        }
        let last = mid + 1;
        if held.is_empty() {
            let kept = &tags[..usize::from(k)];
            if let Some(r) = rate {
                // The removed shards hold no task and take none: no start
                // can be added to their logs any more. Their starts of this
                // window go to the kept shards now, before the commit (a
                // caller cut off after it leaves the kept shares as they
                // were: a lower limit, never a higher one).
                let mut ages = Vec::new();
                for i in k..live {
                    ages.push(
                        self.shard(i, tags[usize::from(i)])
                            .rate_excess(r.period(), 0)
                            .await?,
                    );
                }
                self.rate_seed_spread(last, ages, kept, 0..k, r).await?;
            }
            // Second commit: the removed shards are gone from the layout.
            self.commit_layout(mid, last, k, kept, None).await?;
            self.bump_all(last, kept, k).await?;
            if let Some(r) = rate {
                // The kept shards' shares grow only now.
                self.write_rate_shares(kept, kept.len(), r).await?;
            }
            return Ok(());
        }
        if drain {
            return Ok(());
        }
        // Refused: K and the shards as they were, at a newer version (a
        // layout's version never goes back).
        self.commit_layout(mid, last, now.k, &tags, now.draining)
            .await?;
        self.bump_all(last, &tags, now.k).await?;
        Err(Error::invalid(
            "shards",
            format!(
                "lowering queue {:?} to {k} shards would lose tasks: {}; lower with --drain (drain_shards) and run it again once they are empty",
                self.name(),
                held.join(", ")
            ),
        ))
    }

    /// Raise K from `now.live()` to `k` (see [`Queue::reshard`]).
    async fn raise(
        &self,
        now: &Layout,
        k: u16,
        settings: QueueSettings,
        rate: Option<crate::queue::RateLimit>,
    ) -> Result<()> {
        let live = now.live();
        let next = now.version + 1;
        let base = self.shard(0, 0);
        let mut tags = now.tags.clone();
        // Make shards live..k, spread over the masters.
        let (backend, _) = self.ready()?;
        let masters = master_map(backend).await;
        for i in live..k {
            let n = pick_tag(self.name(), i, &tags, masters.as_deref());
            tags.push(n);
        }
        let (paused, pause_gen) = base.pause_state().await?;
        let mut carried = Vec::new();
        if let Some(r) = rate {
            // Rate shares: the old shards' shrink first, so that they start
            // no more than their new shares from now on; the starts of this
            // window they hold beyond those go into the new shards' logs, so
            // that the new shards' shares cover them until they expire.
            self.write_rate_shares(&tags[..usize::from(live)], usize::from(k), r)
                .await?;
            for i in 0..live {
                let keep = share_of(r, usize::from(i), usize::from(k))?.n();
                carried.push(
                    self.shard(i, tags[usize::from(i)])
                        .rate_excess(r.period(), keep)
                        .await?,
                );
            }
        }
        for i in live..k {
            let q = self.shard(i, tags[usize::from(i)]);
            let mut own = settings;
            if let Some(r) = rate {
                own = own.rate(Some(share_of(r, usize::from(i), usize::from(k))?));
            }
            q.configure_here(&own).await?;
            // Written either way: a shard made again after a lowering
            // keeps its keys, `paused` too.
            q.pause_shard(paused, pause_gen).await?;
        }
        // Before any new shard can be reached (it is bumped, then committed).
        if let Some(r) = rate {
            self.rate_seed_spread(next, carried, &tags, live..k, r)
                .await?;
        }
        for i in live..k {
            self.shard(i, tags[usize::from(i)])
                .bump(next, i, true)
                .await?;
        }
        self.commit_layout(now.version, next, k, &tags, None)
            .await?;
        self.bump_all(next, &tags, k).await?;
        // A pause or resume between the read above and the commit did not
        // see the new shards: they take shard 0's state now (with its
        // generation, so that this late write cannot undo a newer change,
        // which sees the new layout and writes them itself).
        let (paused, pause_gen) = base.pause_state().await?;
        for i in live..k {
            self.shard(i, tags[usize::from(i)])
                .pause_shard(paused, pause_gen)
                .await?;
        }
        Ok(())
    }

    /// Split the queue-wide rate limit `r` into shares: placed shards get
    /// n / k (the first n mod k one more); draining ones none (1, the least a
    /// limit can be, while they drain).
    pub(crate) async fn write_rate_shares(
        &self,
        tags: &[u16],
        live: usize,
        r: crate::queue::RateLimit,
    ) -> Result<()> {
        for (i, n) in tags.iter().enumerate() {
            let limit = share_of(r, i, live)?;
            self.shard(u16::try_from(i).unwrap_or(0), *n)
                .configure_here(&QueueSettings::default().rate(Some(limit)))
                .await?;
        }
        Ok(())
    }

    /// The ages (ms, oldest first) of this shard's rate-log entries of the
    /// current window beyond its newest `keep` (`rate_carry.lua` 'read').
    async fn rate_excess(&self, period: Duration, keep: u32) -> Result<Vec<u64>> {
        let (backend, keys) = self.ready()?;
        backend
            .eval(
                ops::invocation(&RATE_CARRY_SCRIPT, &keys[17..18])
                    .arg("read")
                    .arg(u64::try_from(period.as_millis()).unwrap_or(u64::MAX))
                    .arg(keep),
            )
            .await
    }

    /// Add the carried ages of `from` (one list per source shard) to the
    /// logs of shards `to`, each entry once: first into each target's room
    /// (its share of `r` over `tags.len()` shards less the starts its log
    /// holds now), any left over round robin (those only over-count).
    /// Members are named after the layout `version` the change makes.
    async fn rate_seed_spread(
        &self,
        version: u64,
        from: Vec<Vec<u64>>,
        tags: &[u16],
        to: std::ops::Range<u16>,
        r: crate::queue::RateLimit,
    ) -> Result<()> {
        let targets: Vec<u16> = to.collect();
        let mut ages: Vec<u64> = from.into_iter().flatten().collect();
        if targets.is_empty() || ages.is_empty() {
            return Ok(());
        }
        // The youngest first: they count longest, so they go where they
        // surely count.
        ages.sort_unstable();
        let mut per: Vec<Vec<u64>> = vec![Vec::new(); targets.len()];
        let mut left = ages.into_iter();
        for (j, &i) in targets.iter().enumerate() {
            let share = share_of(r, usize::from(i), tags.len())?.n();
            let held = self
                .shard(i, tags[usize::from(i)])
                .rate_excess(r.period(), 0)
                .await?
                .len();
            let room = usize::try_from(share)
                .unwrap_or(usize::MAX)
                .saturating_sub(held);
            per[j].extend(left.by_ref().take(room));
        }
        for (n, age) in left.enumerate() {
            per[n % targets.len()].push(age);
        }
        for (j, ages) in per.into_iter().enumerate() {
            if ages.is_empty() {
                continue;
            }
            let i = targets[j];
            let q = self.shard(i, tags[usize::from(i)]);
            let (backend, keys) = q.ready()?;
            let _: Value = backend
                .eval(
                    ops::invocation(&RATE_CARRY_SCRIPT, &keys[17..18])
                        .arg("seed")
                        .arg(format!("carry:{version}"))
                        .arg(ages),
                )
                .await?;
        }
        Ok(())
    }

    /// The queue-wide rate limit kept on shard 0 (`None`: none).
    pub(crate) async fn rate_total(&self) -> Result<Option<crate::queue::RateLimit>> {
        let Some(was) = self.rate_total_call(&["get"]).await? else {
            return Ok(None);
        };
        let bad = || {
            Error::protocol(format!(
                "queue {:?} keeps a rate_total of {was:?}",
                self.name()
            ))
        };
        let (n, ms) = was.split_once(':').ok_or_else(bad)?;
        let n: u32 = n.parse().map_err(|_| bad())?;
        let ms: u64 = ms.parse().map_err(|_| bad())?;
        Ok(Some(crate::queue::RateLimit::new(
            n,
            Duration::from_millis(ms),
        )?))
    }

    /// A queue being sharded: its own limit becomes the kept total, when
    /// none is kept.
    async fn init_rate_total(&self) -> Result<()> {
        self.rate_total_call(&["init"]).await?;
        Ok(())
    }

    /// Keep (or remove) the queue-wide rate limit on shard 0.
    pub(crate) async fn set_rate_total(&self, r: Option<crate::queue::RateLimit>) -> Result<()> {
        match r {
            Some(r) => {
                let v = format!("{}:{}", r.n(), r.period().as_millis());
                self.rate_total_call(&["set", v.as_str()]).await?;
            }
            None => {
                self.rate_total_call(&["del"]).await?;
            }
        }
        Ok(())
    }

    /// layout.lua 'rate' on shard 0: the value kept before the call.
    async fn rate_total_call(&self, args: &[&str]) -> Result<Option<String>> {
        let base = self.shard(0, 0);
        let (backend, keys) = base.ready()?;
        let mut inv = ops::invocation(&LAYOUT_SCRIPT, &keys[10..11]);
        inv.arg("rate");
        for a in args {
            inv.arg(*a);
        }
        backend.eval(&inv).await
    }

    /// Write the shares of the queue-wide limit kept on shard 0 for the
    /// layout as it is now (no limit kept: every shard's share removed),
    /// until neither the layout nor the limit changed while they were
    /// written (another client's change of K or of the limit in between is
    /// then followed, not overwritten; a few rounds at most). Shares carry
    /// no start: a change of K carries them itself before shares grow.
    pub(crate) async fn sync_rate_shares(&self) -> Result<()> {
        let mut seen = None;
        for _ in 0..8 {
            let l = self.read_layout().await?;
            let total = self.rate_total().await?;
            if seen == Some((l.version, total)) {
                return Ok(());
            }
            if !l.is_plain() {
                match total {
                    Some(r) if r.n() >= u32::from(l.live()) => {
                        self.write_rate_shares(&l.tags, l.tags.len(), r).await?;
                    }
                    Some(_) => {}
                    None => {
                        for q in self.shard_handles(&l) {
                            q.configure_here(&QueueSettings::default().rate(None))
                                .await?;
                        }
                    }
                }
            }
            seen = Some((l.version, total));
        }
        Ok(())
    }

    /// Raise shard `i`'s `layout` to `version` (never lowers it), open to
    /// new tasks or closed (a shard being drained or removed).
    async fn bump(&self, version: u64, i: u16, open: bool) -> Result<()> {
        let (backend, keys) = self.ready()?;
        let _: Value = backend
            .eval(
                ops::invocation(&LAYOUT_SCRIPT, &keys[10..11])
                    .arg("bump")
                    .arg(version)
                    .arg(i)
                    .arg(if open { "open" } else { "close" }),
            )
            .await?;
        Ok(())
    }

    /// Bump shards 1.. of `tags`: those below `k` open, the others closed.
    async fn bump_all(&self, version: u64, tags: &[u16], k: u16) -> Result<()> {
        for (i, n) in tags.iter().enumerate().skip(1) {
            let i = u16::try_from(i).unwrap_or(0);
            self.shard(i, *n).bump(version, i, i < k).await?;
        }
        Ok(())
    }

    /// The compare-and-set on shard 0's layout.
    async fn commit_layout(
        &self,
        expected: u64,
        next: u64,
        k: u16,
        tags: &[u16],
        draining: Option<u16>,
    ) -> Result<()> {
        let base = self.shard(0, 0);
        let (backend, keys) = base.ready()?;
        let layout = Layout {
            k,
            version: next,
            tags: tags.to_vec(),
            draining,
        };
        let reply: Vec<i64> = backend
            .eval(
                ops::invocation(&LAYOUT_SCRIPT, &keys[10..11])
                    .arg("commit")
                    .arg(expected)
                    .arg(next)
                    .arg(k)
                    .arg(layout.tags_field())
                    .arg(draining.map_or(String::new(), |d| d.to_string())),
            )
            .await?;
        match reply.as_slice() {
            [1, _] => {
                if let Ok(mut known) = self.sharding.known.write() {
                    *known = Some((Arc::new(layout), Instant::now()));
                }
                Ok(())
            }
            [_, current] => Err(Error::Conflict {
                name: format!("layout of queue {:?}", self.name()),
                expected,
                current: u64::try_from(*current).unwrap_or(0),
            }),
            _ => Err(Error::protocol("short layout reply")),
        }
    }
}

ops::script!(LAYOUT_SCRIPT, "layout.lua");
ops::script!(RATE_CARRY_SCRIPT, "rate_carry.lua");

/// Shard `i`'s share of the queue-wide limit `r` over `live` shards: n / live,
/// the first n mod live shards one more, so the shares add up to n exactly.
pub(crate) fn share_of(
    r: crate::queue::RateLimit,
    i: usize,
    live: usize,
) -> Result<crate::queue::RateLimit> {
    let live = u32::try_from(live.max(1)).unwrap_or(u32::MAX);
    let i = u32::try_from(i).unwrap_or(u32::MAX);
    let share = r.n() / live + u32::from(i < r.n() % live);
    crate::queue::RateLimit::new(share.max(1), r.period())
}

/// The master (its address) of each slot range, from `CLUSTER SLOTS`
/// (`None`: not a Cluster, or not answered).
async fn master_map(backend: &Backend) -> Option<Vec<(u16, u16, String)>> {
    if !backend.batch_by_slot() {
        return None;
    }
    let v: Value = backend
        .query(redis::cmd("CLUSTER").arg("SLOTS"))
        .await
        .ok()?;
    let Value::Array(ranges) = v else {
        return None;
    };
    let mut out = Vec::new();
    for r in ranges {
        let Value::Array(parts) = r else { continue };
        let (Some(Value::Int(a)), Some(Value::Int(b)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let addr = match (master.first(), master.get(1)) {
            (Some(Value::BulkString(h)), Some(Value::Int(p))) => {
                format!("{}:{p}", String::from_utf8_lossy(h))
            }
            _ => continue,
        };
        out.push((u16::try_from(*a).ok()?, u16::try_from(*b).ok()?, addr));
    }
    (!out.is_empty()).then_some(out)
}

fn master_of(map: &[(u16, u16, String)], slot: u16) -> Option<&str> {
    map.iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, m)| m.as_str())
}

/// The tag number of new shard `i`: on a Cluster, the smallest that puts it
/// on the master holding the fewest of this queue's shards so far; else 0.
fn pick_tag(name: &str, i: u16, tags: &[u16], map: Option<&[(u16, u16, String)]>) -> u16 {
    let Some(map) = map else { return 0 };
    let mut count: HashMap<&str, usize> = HashMap::new();
    for (_, _, m) in map {
        count.entry(m.as_str()).or_insert(0);
    }
    for (j, n) in tags.iter().enumerate() {
        let j = u16::try_from(j).unwrap_or(0);
        if let Some(m) = master_of(map, queue_shard_slot(name, j, *n)) {
            *count.entry(m).or_insert(0) += 1;
        }
    }
    // Masters in the map's order; the least loaded first.
    let mut order: Vec<&str> = Vec::new();
    for (_, _, m) in map {
        if !order.contains(&m.as_str()) {
            order.push(m.as_str());
        }
    }
    let Some(target) = order
        .iter()
        .min_by_key(|m| count.get(**m).copied().unwrap_or(0))
        .copied()
    else {
        return 0;
    };
    (0..u16::MAX)
        .find(|n| master_of(map, queue_shard_slot(name, i, *n)) == Some(target))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_layout_reads_back_as_written() -> Result<()> {
        assert_eq!(
            Layout::parse(&[Value::Nil, Value::Nil, Value::Nil, Value::Nil])?,
            Layout::plain()
        );
        let l = Layout::parse(&[bulk("3"), bulk("4"), bulk("0,7,2,5"), bulk("5")])?;
        assert_eq!((l.k, l.version, l.draining, l.live()), (3, 4, Some(5), 5));
        assert_eq!(l.tags, vec![0, 0, 7, 2, 5]);
        assert_eq!(
            Layout::parse(&[bulk("3"), bulk("4"), Value::Nil, Value::Nil])?.tags,
            vec![0, 0, 0]
        );
        assert_eq!(l.tags_field(), "0,7,2,5");
        assert!(Layout::parse(&[bulk("0"), bulk("1"), Value::Nil, Value::Nil]).is_err());
        assert!(Layout::parse(&[bulk("65"), bulk("1"), Value::Nil, Value::Nil]).is_err());
        Ok(())
    }

    #[test]
    fn tags_spread_shards_evenly_over_masters() {
        let map = vec![
            (0, 5460, "a".to_string()),
            (5461, 10922, "b".to_string()),
            (10923, 16383, "c".to_string()),
        ];
        let mut tags = vec![0];
        for i in 1..6 {
            let n = pick_tag("clicks", i, &tags, Some(&map));
            tags.push(n);
        }
        let mut per: HashMap<&str, usize> = HashMap::new();
        for (i, n) in tags.iter().enumerate() {
            let m = master_of(&map, queue_shard_slot("clicks", i as u16, *n)).unwrap_or("?");
            *per.entry(m).or_insert(0) += 1;
        }
        assert_eq!(
            per.values().copied().collect::<Vec<_>>(),
            vec![2, 2, 2],
            "{per:?}"
        );
        assert_eq!(pick_tag("clicks", 1, &[0], None), 0);
    }

    #[test]
    fn rate_shares_add_up_to_the_limit() -> Result<()> {
        for n in [4u32, 5, 10, 99, 100_000] {
            for live in 1..=4usize {
                let r = crate::queue::RateLimit::new(n, Duration::from_secs(1))?;
                let sum: u32 = (0..live)
                    .map(|i| share_of(r, i, live).map(|s| s.n()))
                    .sum::<Result<u32>>()?;
                assert_eq!(sum, n, "n {n} over {live}");
            }
        }
        Ok(())
    }

    #[test]
    fn placement_prefers_group_then_shard_key_then_id() {
        let l = Layout {
            k: 8,
            version: 1,
            tags: vec![0; 8],
            draining: None,
        };
        let t = NewTask::new("a").group("g").shard_key("g");
        assert_eq!(Queue::place(&l, &t), l.home("g"));
        assert_eq!(
            Queue::place(&l, &NewTask::new("a").shard_key("k")),
            l.home("k")
        );
        assert_eq!(Queue::place(&l, &NewTask::new("a")), l.home("a"));
    }
}
