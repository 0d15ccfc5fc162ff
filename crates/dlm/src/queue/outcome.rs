//! What became of a task, and removing tasks that have not run (issue 33):
//! [`Queue::wait_outcome`], [`Queue::cancel`] and [`Queue::clear`].

use std::time::Duration;

use crate::error::Result;
use crate::queue::{MAX_BATCH, Queue, Removed, TaskState};

/// How often [`Queue::wait_outcome`] looks at a task that has no result
/// yet: a result wakes it at once (as [`Queue::wait_result`]); a death or a
/// completion without a result is seen at the next look.
pub const OUTCOME_POLL: Duration = Duration::from_millis(200);

/// What became of a task, as [`Queue::wait_outcome`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// It completed: its result (`None`: it completed without one, or its
    /// result is no longer kept).
    Completed(Option<Vec<u8>>),
    /// It died (it is in the dead letters): its last error.
    Failed(Option<String>),
    /// No task with this id is known: never pushed, cancelled, or completed
    /// and forgotten (completed tasks are remembered while their result is
    /// kept, or with [`crate::queue::QueueSettings::keep_completed`]).
    Unknown,
    /// Not finished by the deadline: where it is now.
    Pending(TaskState),
}

impl Queue {
    /// What became of task `id`, waiting at most `deadline` (at most
    /// [`crate::queue::MAX_DELAY`]) for it to finish: its result, its death,
    /// that it is unknown, or where it is when the deadline passes. Unlike
    /// [`Queue::wait_result`], a death or a completion without a result ends
    /// the wait (seen within [`OUTCOME_POLL`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// use dlm::queue::Outcome;
    /// match client.queue("thumbs").wait_outcome("img:7", std::time::Duration::from_secs(30)).await? {
    ///     Outcome::Completed(result) => println!("done: {result:?}"),
    ///     Outcome::Failed(error) => println!("died: {error:?}"),
    ///     Outcome::Unknown => println!("no such task"),
    ///     Outcome::Pending(state) => println!("still {}", state.as_str()),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_outcome(&self, id: &str, deadline: Duration) -> Result<Outcome> {
        crate::queue::check_id(id)?;
        super::check_delay("deadline", deadline)?;
        let until = tokio::time::Instant::now() + deadline;
        loop {
            if let Some(r) = self.result(id).await? {
                return Ok(Outcome::Completed(Some(r)));
            }
            let Some(task) = self.task(id).await? else {
                return Ok(Outcome::Unknown);
            };
            match task.state {
                TaskState::Dead => return Ok(Outcome::Failed(task.error)),
                // A result stored between the two reads is read again.
                TaskState::Completed => return Ok(Outcome::Completed(self.result(id).await?)),
                state => {
                    let left = until.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return Ok(Outcome::Pending(state));
                    }
                    self.wait_result(id, left.min(OUTCOME_POLL)).await?;
                }
            }
        }
    }

    /// Remove task `id` if it waits (due, delayed, with a priority, in a
    /// group or parked): true when it was removed; false when it does not
    /// wait (unknown, blocked by its dependencies, in flight, completed or
    /// dead). A task pushed again meanwhile is looked at again.
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// if client.queue("mail").cancel("welcome:42").await? {
    ///     println!("it will not run");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, id: &str) -> Result<bool> {
        for _ in 0..3 {
            let Some(task) = self.task(id).await? else {
                return Ok(false);
            };
            if !matches!(task.state, TaskState::Waiting | TaskState::Delayed) {
                return Ok(false);
            }
            let Some(score) = task.score else {
                return Ok(false);
            };
            match self.remove_if_score(id, score).await? {
                Removed::Removed => return Ok(true),
                Removed::NotPresent => return Ok(false),
                Removed::ScoreChanged(_) => continue,
            }
        }
        Ok(false)
    }

    /// Remove every task that waits and is due now (delayed, blocked,
    /// in-flight and dead tasks stay; [`Queue::purge_dead`] drops the dead
    /// ones): how many.
    pub async fn clear(&self) -> Result<usize> {
        let mut n = 0;
        loop {
            let popped = self.pop(MAX_BATCH.min(1000)).await?.len();
            n += popped;
            if popped == 0 {
                return Ok(n);
            }
        }
    }
}
