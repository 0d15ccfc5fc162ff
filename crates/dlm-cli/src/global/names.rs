//! The lock and the queue a command works on: arguments shared by `lock
//! acquire | release | extend | status` and `lock run` ([`LockName`]), and by
//! the `queue` commands and `queue work` ([`QueueArg`]).

use clap::Args;

use super::Global;
use super::parse::{parse_name, parse_queue_name};
use super::target::connect;
use crate::error::CliError;

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
