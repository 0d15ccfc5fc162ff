//! How a [`crate::queue::Worker`] runs ([`WorkerOptions`]) and what it did
//! ([`WorkerReport`]).

use std::time::Duration;

use crate::error::{Error, Result};

/// How a [`crate::queue::Worker`] runs.
///
/// ```
/// use std::time::Duration;
/// let opts = dlm::queue::WorkerOptions::new()
///     .concurrency(64)
///     .lease(Duration::from_secs(30))
///     .grace(Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOptions {
    pub(super) concurrency: usize,
    pub(super) lease: Duration,
    pub(super) heartbeat: Option<Duration>,
    pub(super) grace: Duration,
    pub(super) idle_wait: Duration,
    pub(super) exit_when_empty: bool,
    pub(super) settings: crate::queue::QueueSettings,
    pub(super) id: Option<String>,
    pub(super) task_timeout: Option<Duration>,
    pub(super) timeout_grace: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            concurrency: 16,
            lease: Duration::from_secs(30),
            heartbeat: None,
            grace: Duration::from_secs(10),
            idle_wait: Duration::from_secs(1),
            exit_when_empty: false,
            settings: crate::queue::QueueSettings::default(),
            id: None,
            task_timeout: None,
            timeout_grace: Duration::ZERO,
        }
    }
}

impl WorkerOptions {
    /// Defaults: 16 tasks at once, 30 s leases renewed every 10 s, 10 s grace.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many handlers run at once (1 ..= 10 000). A task whose handler has
    /// returned frees its slot at once; its ack travels in the next batch
    /// while the slot already runs another task.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// The lease of a claimed task (a crashed worker's tasks come back after
    /// at most this plus one idle wait).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often running leases are renewed (default lease / 3).
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = Some(every);
        self
    }

    /// How long running tasks may finish after shutdown is asked for; the
    /// rest are given back to the queue at once.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The longest an idle worker blocks before looking again (default 1 s;
    /// it also wakes at once on an enqueue and when a delayed task is due).
    pub fn idle_wait(mut self, wait: Duration) -> Self {
        self.idle_wait = wait;
        self
    }

    /// Stop once nothing is waiting, due later or in flight (any worker's).
    pub fn exit_when_empty(mut self, on: bool) -> Self {
        self.exit_when_empty = on;
        self
    }

    /// The worker's id in its heartbeat record (see
    /// [`crate::queue::Queue::workers`]): 1 to 256 bytes without control
    /// characters. Default: `host:pid:random` (six hex digits), new for
    /// every run. Two workers running with the same id share one record.
    ///
    /// ```
    /// let opts = dlm::queue::WorkerOptions::new().id("mailer-1");
    /// ```
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Store a group concurrency for the queue when the worker starts: at
    /// most `k` tasks of one group in flight at once across all workers
    /// (`None`: remove the limit). A queue-level setting kept in Redis: every
    /// worker follows the latest value written (see
    /// [`crate::queue::Queue::configure`]). Not called: left as stored.
    ///
    /// ```
    /// let opts = dlm::queue::WorkerOptions::new().group_concurrency(Some(1));
    /// ```
    pub fn group_concurrency(mut self, k: Option<u32>) -> Self {
        self.settings = self.settings.group_concurrency(k);
        self
    }

    /// Store a rate limit for the queue when the worker starts (`None`:
    /// remove it); a queue-level setting like [`Self::group_concurrency`].
    /// A worker at the limit sleeps until the next slot frees.
    pub fn rate(mut self, rate: Option<crate::queue::RateLimit>) -> Self {
        self.settings = self.settings.rate(rate);
        self
    }

    /// Store how many acked ids the queue keeps when the worker starts
    /// (`None`: none); a queue-level setting like [`Self::group_concurrency`].
    pub fn keep_completed(mut self, n: Option<u32>) -> Self {
        self.settings = self.settings.keep_completed(n);
        self
    }

    /// Store how long the queue keeps the results handlers return when the
    /// worker starts (`Duration::ZERO`: none); a queue-level setting like
    /// [`Self::group_concurrency`] (see
    /// [`crate::queue::QueueSettings::keep_results`]; not called: left as
    /// stored, 1 hour when never set).
    ///
    /// ```
    /// use std::time::Duration;
    /// let opts = dlm::queue::WorkerOptions::new().keep_results(Duration::from_secs(600));
    /// ```
    pub fn keep_results(mut self, ttl: Duration) -> Self {
        self.settings = self.settings.keep_results(ttl);
        self
    }

    /// The run-time limit of tasks that have none of their own
    /// ([`crate::queue::NewTask::timeout`]); 1 ms ..= 7 days, default none.
    /// At the limit the handler is cancelled (its future dropped) and the
    /// task nacked with the error `"timed out"`: retried with backoff, then
    /// dead after the last attempt.
    ///
    /// ```
    /// use std::time::Duration;
    /// let opts = dlm::queue::WorkerOptions::new().task_timeout(Duration::from_secs(300));
    /// ```
    pub fn task_timeout(mut self, limit: Duration) -> Self {
        self.task_timeout = Some(limit);
        self
    }

    /// How long a handler past its time limit may still run before it is
    /// dropped (default zero, at most 7 days): for a handler that watches
    /// [`crate::queue::Task::timeout`] itself and stops cleanly (`dlm queue
    /// work` sends its command SIGTERM at the limit and SIGKILL after
    /// `--grace`).
    ///
    /// ```
    /// use std::time::Duration;
    /// let opts = dlm::queue::WorkerOptions::new().timeout_grace(Duration::from_secs(5));
    /// ```
    pub fn timeout_grace(mut self, grace: Duration) -> Self {
        self.timeout_grace = grace;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        self.settings.validate()?;
        if let Some(id) = &self.id {
            super::beat::check_worker_id(id)?;
        }
        if let Some(limit) = self.task_timeout {
            super::check_task_timeout(limit)?;
        }
        if self.timeout_grace > super::MAX_TASK_TIMEOUT {
            return Err(Error::invalid(
                "timeout grace",
                format!("{:?} is longer than 7 days", self.timeout_grace),
            ));
        }
        if self.concurrency == 0 || self.concurrency > 10_000 {
            return Err(Error::invalid("concurrency", "must be 1 ..= 10000"));
        }
        // Checked here, before the worker starts its heartbeat and acker, not
        // at its first claim (and a grace past an `Instant`'s range would
        // panic at shutdown).
        super::check_lease(self.lease)?;
        if self.grace > super::MAX_LEASE {
            return Err(Error::invalid(
                "grace",
                format!("{:?} is longer than 7 days", self.grace),
            ));
        }
        let heartbeat = self.heartbeat_every();
        if heartbeat.is_zero() || heartbeat >= self.lease {
            return Err(Error::invalid(
                "heartbeat",
                "must be shorter than the lease",
            ));
        }
        if self.idle_wait < Duration::from_millis(1) || self.idle_wait > Duration::from_secs(60) {
            return Err(Error::invalid("idle wait", "must be 1ms ..= 60s"));
        }
        Ok(())
    }

    pub(super) fn heartbeat_every(&self) -> Duration {
        self.heartbeat.unwrap_or(self.lease / 3)
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Tasks handled successfully and acked.
    pub acked: u64,
    /// Tasks that failed and were queued for a retry.
    pub retried: u64,
    /// Tasks that failed their last attempt and went to the dead-letter set.
    pub dead: u64,
    /// Tasks whose lease was lost (expired and re-claimed elsewhere) before ack.
    pub lost: u64,
    /// Tasks given back to the queue at shutdown.
    pub returned: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extreme_leases_and_graces_are_typed_errors() {
        let huge = WorkerOptions::default().lease(Duration::MAX);
        assert!(matches!(
            huge.validate(),
            Err(Error::InvalidArgument { arg: "lease", .. })
        ));
        let forever = WorkerOptions::default().grace(Duration::MAX);
        assert!(matches!(
            forever.validate(),
            Err(Error::InvalidArgument { arg: "grace", .. })
        ));
        assert!(
            WorkerOptions::default()
                .grace(Duration::ZERO)
                .validate()
                .is_ok()
        );
    }
}
