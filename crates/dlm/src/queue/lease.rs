//! A claimed task's lease: ack, nack, extend or abandon it, each checked
//! against the lease's fencing token.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::queue::{Nacked, Queue, Task, check_lease};

/// A leased task: ack, nack or extend it before the lease runs out.
///
/// A handle whose lease expired and was re-claimed by another worker can do
/// none of these: they fail with [`Error::LeaseLost`].
#[derive(Debug, Clone)]
#[must_use = "a lease not acked returns its task to the queue when it expires"]
pub struct Lease {
    pub(super) queue: Queue,
    pub(super) task: Task,
}

impl Lease {
    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// Done: delete the task.
    pub async fn ack(self) -> Result<()> {
        let codes = self
            .queue
            .ack_many(&[(&self.task.id, self.task.fence)])
            .await?;
        match codes.first() {
            Some(1) => Ok(()),
            Some(c) => Err(self.queue.lease_lost(&self.task.id, *c)),
            None => Err(Error::protocol("ack returned nothing")),
        }
    }

    /// Failed: retry after the queue's backoff for this attempt, or move to the
    /// dead-letter set after the last attempt. `error` is kept (capped at 4 KiB).
    pub async fn nack(self, error: &str) -> Result<Nacked> {
        let pause = self.queue.backoff_for(self.task.attempt);
        self.queue.nack_raw(&self.task, pause, error).await
    }

    /// Failed: retry after `retry_after` (or die after the last attempt).
    pub async fn nack_after(self, retry_after: Duration, error: &str) -> Result<Nacked> {
        self.queue.nack_raw(&self.task, retry_after, error).await
    }

    /// Renew the lease to `lease` from now.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        check_lease(lease)?;
        let codes = self
            .queue
            .extend_many(&[(&self.task.id, self.task.fence)], lease)
            .await?;
        match codes.first() {
            Some(1) => Ok(()),
            Some(c) => Err(self.queue.lease_lost(&self.task.id, *c)),
            None => Err(Error::protocol("extend returned nothing")),
        }
    }

    /// Give the task back at once, without counting the attempt.
    pub async fn abandon(self) -> Result<()> {
        match self
            .queue
            .abandon_many(&[(&self.task.id, self.task.fence)])
            .await?
        {
            1 => Ok(()),
            _ => Err(self.queue.lease_lost(&self.task.id, 0)),
        }
    }
}
