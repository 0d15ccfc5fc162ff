//! The lock and the queue a command works on: arguments shared by `lock
//! acquire | release | extend | status` and `lock run` ([`LockName`]), and by
//! the `queue` commands and `queue work` ([`QueueArg`]), and the queue
//! settings `queue work` and `queue config` store ([`SettingsArgs`]).

use clap::Args;

use super::Global;
use super::parse::{RateArg, parse_keep_results, parse_name, parse_queue_name, parse_rate};
use super::target::connect;
use crate::error::CliError;
use dlm::queue::QueueSettings;

/// The lock a command works on.
#[derive(Debug, Clone, Args)]
pub struct LockName {
    /// The lock's name (1 to 1024 bytes); its key is dlm:lock:{NAME}.
    #[arg(value_name = "NAME", value_parser = parse_name)]
    pub name: String,

    /// Use NAME itself as the Redis key (to share the lock with redis-py,
    /// node-redlock or redsync on the same key).
    #[arg(long)]
    pub raw_key: bool,
}

impl LockName {
    /// Refuse a name that cannot be a lock, before any connection is made.
    pub fn check(&self) -> Result<(), CliError> {
        dlm::keys::lock_key(dlm::keys::DEFAULT_LOCK_PREFIX, &self.name, self.raw_key)?;
        Ok(())
    }

    /// The library's handle on this lock.
    pub fn lock(&self, client: &dlm::Client) -> dlm::Lock {
        let lock = client.lock(self.name.clone());
        if self.raw_key { lock.raw_key() } else { lock }
    }
}

/// The queue a command works on.
#[derive(Debug, Clone, Args)]
pub struct QueueArg {
    /// The queue's name (1 to 1024 bytes); its keys are dlm:queue:{QUEUE}:*.
    #[arg(value_name = "QUEUE", value_parser = parse_queue_name)]
    pub queue: String,
}

impl QueueArg {
    /// The library's handle on this queue, on a client for `global`'s Redis.
    pub async fn open(&self, global: &Global) -> Result<dlm::queue::Queue, CliError> {
        if global.redis.len() > 1 && global.topology == super::Topology::Plain {
            return Err(CliError::Usage(
                "queues live on one Redis: give a single --redis URL, not several".into(),
            ));
        }
        let client = connect(global, global.url()).await?;
        Ok(client.queue(self.queue.clone()))
    }
}

/// The queue-level settings `queue work` and `queue config` may change.
#[derive(Debug, Clone, Args)]
pub struct SettingsArgs {
    /// Store for the queue: at most K tasks of one group in flight at once,
    /// across all workers (1 to 10000; 0 removes the limit). Every worker of
    /// the queue follows the latest value stored.
    #[arg(long, value_name = "K",
          value_parser = clap::value_parser!(u32).range(0..=i64::from(dlm::queue::MAX_GROUP_CONCURRENCY)))]
    pub group_concurrency: Option<u32>,
    /// Store for the queue: at most N tasks start in any window of PERIOD,
    /// across all workers (`100/1s`; N 1 to 100000, PERIOD 1ms to 24h; `off`
    /// removes it). Exact: a sliding log of the last N starts.
    #[arg(long, value_name = "N/PERIOD", value_parser = parse_rate)]
    pub rate: Option<RateArg>,
    /// Store for the queue: keep the ids of the last N acked tasks (1 to
    /// 1000000; 0: keep none, the default).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=i64::from(dlm::queue::MAX_KEEP_COMPLETED)))]
    pub keep_completed: Option<u32>,
    /// Store for the queue: keep an event log (`dlm queue events`) of about
    /// the last N entries (1 to 10000000, e.g. 10000; 0: no log, the default).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=i64::from(dlm::queue::MAX_EVENTS)))]
    pub events: Option<u32>,
    /// Store for the queue: keep the results tasks leave (`queue work`:
    /// CMD's stdout) for D, for `queue result` (0: keep none; at most 30
    /// days; when never set: 1h).
    #[arg(long, value_name = "D", value_parser = parse_keep_results, allow_hyphen_values = true)]
    pub keep_results: Option<std::time::Duration>,
    /// Store for the queue: keep at most BYTES of results in all (1048576
    /// to 68719476736; when never set: 64 MiB); beyond it the oldest
    /// results are evicted first.
    #[arg(long, value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(dlm::queue::MAX_RESULT_BYTES as u64..=dlm::queue::MAX_RESULT_BYTES_TOTAL))]
    pub keep_results_bytes: Option<u64>,
}

impl SettingsArgs {
    /// The change these flags ask for (flags not given: left as stored).
    pub fn change(&self) -> QueueSettings {
        let mut s = QueueSettings::default();
        if let Some(k) = self.group_concurrency {
            s = s.group_concurrency(Some(k).filter(|k| *k > 0));
        }
        if let Some(r) = self.rate {
            s = s.rate(r.0);
        }
        if let Some(n) = self.keep_completed {
            s = s.keep_completed(Some(n).filter(|n| *n > 0));
        }
        if let Some(n) = self.events {
            s = s.events(Some(n).filter(|n| *n > 0));
        }
        if let Some(ttl) = self.keep_results {
            s = s.keep_results(ttl);
        }
        if let Some(b) = self.keep_results_bytes {
            s = s.keep_results_bytes(b);
        }
        s
    }

    /// Whether any flag was given.
    pub fn any(&self) -> bool {
        self.group_concurrency.is_some()
            || self.rate.is_some()
            || self.keep_completed.is_some()
            || self.events.is_some()
            || self.keep_results.is_some()
            || self.keep_results_bytes.is_some()
    }
}

/// `--shard-key` on the commands that name a task by id (`queue task |
/// result | remove | retry`): accepted, so that scripts may pass the key
/// they pushed with, and not needed: a task is found by its id in every
/// shard (its home shard first).
#[derive(Debug, Clone, Args)]
pub struct ShardKeyArg {
    /// The shard key the task was pushed with (`queue push --shard-key`);
    /// accepted and not needed: the task is found by its id in every shard.
    #[arg(long, value_name = "KEY")]
    pub shard_key: Option<String>,
}
