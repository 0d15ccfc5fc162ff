//! Without the `metrics` feature: the same crate-private recording API as
//! `facade.rs`, every call a no-op, so that no call site needs a `cfg`.

use std::sync::Arc;
use std::time::Duration;

use super::{AcquireOutcome, LostReason, RedisErrorKind, RenewalOutcome, TaskOutcome};

/// The `lock` label of one lock's metrics (nothing to label here).
#[derive(Debug, Clone, Default)]
pub(crate) struct LockLabel(());

/// The lock names a client would label its metrics with (none here).
#[derive(Debug)]
pub(crate) struct LockNames;

impl LockNames {
    pub(crate) fn new(_max: usize) -> Self {
        LockNames
    }

    pub(crate) fn label(&self, _name: &Arc<str>) -> LockLabel {
        LockLabel(())
    }
}

impl LockLabel {
    pub(crate) fn acquire(&self, _: AcquireOutcome, _: Duration) {}
    pub(crate) fn wait(&self, _: Duration) {}
    pub(crate) fn hold(&self, _: Duration) {}
    pub(crate) fn handoff(&self, _: Duration) {}
    pub(crate) fn attempt(&self) {}
    pub(crate) fn lost(&self, _: LostReason) {}
    pub(crate) fn renewal(&self, _: RenewalOutcome) {}
}

pub(crate) fn redis_error(_: RedisErrorKind) {}

/// One queue's metrics (nothing to record here).
#[derive(Debug)]
pub(crate) struct QueueMetrics;

impl QueueMetrics {
    pub(crate) fn new(_queue: &str) -> Self {
        QueueMetrics
    }

    pub(crate) fn tasks(&self, _: TaskOutcome, _: u64) {}
    pub(crate) fn waited(&self, _: impl IntoIterator<Item = Duration>) {}
    pub(crate) fn ran(&self, _: Duration) {}
    pub(crate) fn sampled(&self, _: [u64; 4], _: Duration, _: u64) {}
    pub(crate) fn shards_sampled(&self, _: &[u64]) {}
}
