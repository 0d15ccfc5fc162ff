//! A claimed task's lease: ack, nack, extend or abandon it, each checked
//! against the lease's fencing token.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::queue::{Nacked, Queue, Task, check_lease, check_result};

/// A leased task: ack, nack or extend it before the lease runs out.
///
/// A handle whose lease expired and was re-claimed by another worker can do
/// none of these: they fail with [`Error::LeaseLost`].
#[derive(Debug, Clone)]
#[must_use = "a lease not acked returns its task to the queue when it expires"]
pub struct Lease {
    pub(super) queue: Queue,
    pub(super) task: Task,
    /// When it was claimed (ms, Redis clock), for the summary a finished
    /// task keeps on a queue that uses issue 24's keys (`None`: not sent).
    pub(super) claimed_at: Option<u64>,
}

impl Lease {
    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// Done: delete the task.
    pub async fn ack(self) -> Result<()> {
        self.ack_with(Vec::new()).await
    }

    /// Done, leaving `result` (at most [`crate::queue::MAX_RESULT_BYTES`];
    /// empty: none, as [`Lease::ack`]): the task is deleted and its result
    /// kept as the queue's [`crate::queue::QueueSettings::keep_results`]
    /// says (1 hour by default), for [`Queue::result`] and
    /// [`Queue::wait_result`], whose waiters it wakes. A result too large is
    /// an [`Error::InvalidArgument`] before anything is sent (the task is
    /// not acked; keep a clone of the lease to nack it).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// let q = client.queue("thumbs");
    /// for lease in q.claim(1, Duration::from_secs(30)).await? {
    ///     lease.ack_with(b"thumb-1.png".to_vec()).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn ack_with(self, result: impl Into<Vec<u8>>) -> Result<()> {
        let result = result.into();
        check_result(&self.task.id, &result)?;
        let codes = self
            .queue
            // Acked by hand: when it started, but no worker id.
            .ack_many(&[(
                &self.task.id,
                self.task.fence,
                &result,
                self.claimed_at.map(|at| (at, "")),
            )])
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

    /// Report how far the task is: `pct` (0 ..= 100) and a message (at most
    /// [`crate::queue::MAX_PROGRESS_MESSAGE`] bytes), read with
    /// [`Queue::progress`] until the run ends. Refused with
    /// [`Error::LeaseLost`] once this lease is stale (expired and taken
    /// over: the fencing token no longer matches), so a zombie worker
    /// cannot overwrite the progress of the run that replaced it.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use std::time::Duration;
    /// for lease in client.queue("thumbs").claim(1, Duration::from_secs(30)).await? {
    ///     lease.progress(50, "resized").await?;
    ///     lease.ack().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn progress(&self, pct: u8, message: &str) -> Result<()> {
        self.queue
            .report_progress(&self.task.id, self.task.fence, pct, message)
            .await
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
    ///
    /// Errors: [`Error::LeaseLost`] when this lease is no longer the task's,
    /// with `taken: true` when another worker holds a newer lease on it.
    /// After a timed-out abandon whose call is retried, `LeaseLost` may also
    /// mean that the first call gave the task back (and another worker took
    /// it since).
    pub async fn abandon(self) -> Result<()> {
        match self
            .queue
            .abandon_many(&[(&self.task.id, self.task.fence)])
            .await?
        {
            1 => Ok(()),
            // -1: another lease holds it (taken), 0: its lease ran out.
            code => Err(self.queue.lease_lost(&self.task.id, code)),
        }
    }
}
