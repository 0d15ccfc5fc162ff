//! A sharded queue through the CLI (issue 35; docs/sharded-queue.md,
//! section 9): `queue config --shards K [--drain]`, `queue push --shards K`,
//! `queue stats --shards`, and the helpers the dashboard shares.

use dlm::queue::{Queue, QueueSettings, QueueStats, ShardLayout};
use serde::Serialize;

use crate::error::CliError;

/// The counts of a whole queue from its shards' (the library's sum).
pub fn total(shards: &[QueueStats]) -> QueueStats {
    QueueStats::sum(shards)
}

/// Every task a shard holds, in any state.
pub fn held(s: &QueueStats) -> u64 {
    s.waiting + s.delayed + s.inflight + s.dead + s.blocked
}

/// The layout and each live shard's counts, read so that they match (the
/// layout read again when a change came in between).
pub async fn layout_and_stats(queue: &Queue) -> dlm::Result<(ShardLayout, Vec<QueueStats>)> {
    let mut tries = 0;
    loop {
        let layout = queue.shards().await?;
        let stats = queue.shard_stats().await?;
        tries += 1;
        if stats.len() == layout.shards.len() || tries >= 3 {
            return Ok((layout, stats));
        }
    }
}

/// The library's refusal to lower K while the removed shards hold tasks
/// is a "no" for the CLI (exit 1, as the design's `Conflict`), not bad
/// usage: the same command succeeds with `--drain`, or once they are empty.
pub fn map_reshard_error(e: dlm::Error) -> CliError {
    match &e {
        dlm::Error::InvalidArgument {
            arg: "shards",
            reason,
        } if reason.contains("would lose tasks") => CliError::No(reason.clone()),
        _ => CliError::Dlm(e),
    }
}

/// Refuse K outside 1 ..= MAX_SHARDS before anything is read or written.
pub fn check_k(k: u16) -> Result<(), CliError> {
    if k == 0 || k > dlm::keys::MAX_SHARDS {
        return Err(CliError::Usage(format!(
            "--shards {k}: a queue has 1 to {} shards",
            dlm::keys::MAX_SHARDS
        )));
    }
    Ok(())
}

/// `queue push --shards K`: make the queue with K shards when it has no
/// layout and no task; fine when it has K already; else exit 1.
pub async fn ensure_shards(queue: &Queue, k: u16) -> Result<(), CliError> {
    check_k(k)?;
    let layout = queue.shards().await?;
    if layout.k == k && layout.draining.is_none() {
        return Ok(());
    }
    let name = queue.name();
    let other = || {
        CliError::No(format!(
            "'{name}' has {} shard{}{}; change it with dlm queue config {name} --shards {k}",
            layout.k,
            if layout.k == 1 { "" } else { "s" },
            match layout.draining {
                Some(d) => format!(" (draining {d})"),
                None => String::new(),
            }
        ))
    };
    if layout.version > 0 || layout.draining.is_some() {
        return Err(other());
    }
    if held(&queue.stats().await?) > 0 {
        return Err(other());
    }
    queue
        .configure(&QueueSettings::default().shards(k))
        .await
        .map_err(map_reshard_error)?;
    // A concurrent first push with another K may have won.
    let now = queue.shards().await?;
    if now.k != k {
        return Err(CliError::No(format!(
            "'{name}' has {} shards; change it with dlm queue config {name} --shards {k}",
            now.k
        )));
    }
    Ok(())
}

/// The sharding part of `queue config`'s output.
#[derive(Debug, Serialize)]
pub struct ShardsLine {
    /// Shards new tasks go to.
    pub shards: u16,
    /// The layout's version (0: never sharded).
    pub layout: u64,
    /// While a lowering drains: the shards there were before it.
    pub draining: Option<u16>,
    /// While a lowering drains: the tasks left in the draining shards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining_tasks: Option<u64>,
}

impl ShardsLine {
    /// Read it from the queue (the draining shards' counts only while
    /// draining).
    pub async fn read(queue: &Queue) -> dlm::Result<ShardsLine> {
        let layout = queue.shards().await?;
        let draining_tasks = match layout.draining {
            Some(_) => {
                let stats = queue.shard_stats().await?;
                Some(
                    stats
                        .iter()
                        .skip(usize::from(layout.k))
                        .map(held)
                        .sum::<u64>(),
                )
            }
            None => None,
        };
        Ok(ShardsLine {
            shards: layout.k,
            layout: layout.version,
            draining: layout.draining,
            draining_tasks,
        })
    }

    /// Whether the queue is or was ever sharded.
    pub fn sharded(&self) -> bool {
        self.shards > 1 || self.layout > 0 || self.draining.is_some()
    }

    /// `, shards K (layout V[, draining: N tasks left in shards K..D-1])`.
    pub fn text(&self) -> String {
        let mut out = format!(", shards {} (layout {}", self.shards, self.layout);
        if let Some(d) = self.draining {
            out.push_str(&format!(
                ", draining: {} tasks left in shards {}..{}",
                self.draining_tasks.unwrap_or_default(),
                self.shards,
                d.saturating_sub(1)
            ));
        }
        out.push(')');
        out
    }
}

/// One shard in `queue stats --shards`.
#[derive(Debug, Serialize)]
pub struct ShardStatsLine {
    shard: u16,
    tag: String,
    slot: u16,
    /// The master serving the slot (a Redis Cluster only).
    #[serde(skip_serializing_if = "Option::is_none")]
    master: Option<String>,
    /// A shard of a lowering that drains (no new task goes there).
    draining: bool,
    waiting: u64,
    delayed: u64,
    inflight: u64,
    in_flight: u64,
    dead: u64,
    processed: u64,
    failed: u64,
    paused: bool,
    blocked: u64,
}

/// Each shard's line of `queue stats --shards`, in shard order.
pub fn shard_lines(layout: &ShardLayout, stats: &[QueueStats]) -> Vec<ShardStatsLine> {
    layout
        .shards
        .iter()
        .zip(stats)
        .map(|(info, s)| ShardStatsLine {
            shard: info.index,
            tag: info.tag.clone(),
            slot: info.slot,
            master: info.master.clone(),
            draining: info.index >= layout.k,
            waiting: s.waiting,
            delayed: s.delayed,
            inflight: s.inflight,
            in_flight: s.inflight,
            dead: s.dead,
            processed: s.processed,
            failed: s.failed,
            paused: s.paused,
            blocked: s.blocked,
        })
        .collect()
}

impl ShardStatsLine {
    /// `  shard I (tag T, slot S[, draining]): waiting ...`.
    pub fn text(&self) -> String {
        format!(
            "  shard {} (tag {}, slot {}{}{}){}: waiting {}, delayed {}, inflight {}, dead {}, processed {}, failed {}, blocked {}",
            self.shard,
            self.tag,
            self.slot,
            self.master
                .as_deref()
                .map_or(String::new(), |m| format!(", master {m}")),
            if self.draining { ", draining" } else { "" },
            if self.paused { " (paused)" } else { "" },
            self.waiting,
            self.delayed,
            self.inflight,
            self.dead,
            self.processed,
            self.failed,
            self.blocked
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_adds_counts_and_keeps_the_oldest() {
        let mut a = QueueStats::default();
        a.waiting = 2;
        a.oldest_due = std::time::Duration::from_secs(3);
        let mut b = QueueStats::default();
        b.waiting = 5;
        b.dead = 1;
        b.paused = true;
        b.oldest_due = std::time::Duration::from_secs(1);
        let t = total(&[a, b]);
        assert_eq!((t.waiting, t.dead, t.paused), (7, 1, true));
        assert_eq!(t.oldest_due, std::time::Duration::from_secs(3));
        assert_eq!(held(&t), 8);
    }

    #[test]
    fn k_outside_the_range_is_bad_usage() {
        assert!(check_k(0).is_err());
        assert!(check_k(65).is_err());
        assert!(check_k(1).is_ok() && check_k(64).is_ok());
    }
}
