//! What the benchmark commands share (`bench lock`, `bench queue`, `bench
//! curves`): the `impl` label of their JSON lines ([`Variant`]) and the bulk
//! enqueue of benchmark tasks ([`enqueue_all`]).
//!
//! The label is `"dlm"` for the plain default (the peer harness's contract),
//! else `dlm-<parts>` naming every way the run differs from it (`dlm-fair`,
//! `dlm-semaphore` (4 permits; `dlm-semaphore8` for 8), `dlm-cluster-replicas1`, `dlm-redlock5-frozen2`,
//! `dlm-metrics`, `dlm-prio10`, `dlm-groups100-gc1`, ...), so that the
//! harness's report (which keys on impl, mode and concurrency) tells the
//! variants apart.

use std::time::Duration;

use dlm::queue::{Enqueued, NewTask, OnDuplicate, Queue};
use tokio::task::JoinSet;

use crate::error::CliError;

fn failed(what: &'static str, detail: impl Into<String>) -> CliError {
    CliError::Io {
        what,
        source: std::io::Error::other(detail.into()),
    }
}

/// What each benchmark task carries besides its id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    priorities: u16,
    groups: u32,
    /// `None`: the payload `{"i":n}` (BullMQ's harness gives its jobs the
    /// same shape); `Some(0)`: id-only; `Some(n)`: `n` bytes.
    payload_bytes: Option<u32>,
}

impl Shape {
    /// Plain tasks: no priority, no group, the `{"i":n}` payload.
    pub(crate) const PLAIN: Shape = Shape {
        priorities: 1,
        groups: 0,
        payload_bytes: None,
    };

    /// Task i gets priority `i % priorities` (1: none) and group
    /// `g<i % groups>` (0: none).
    pub(crate) fn new(priorities: u16, groups: u32) -> Shape {
        Shape {
            priorities,
            groups,
            payload_bytes: None,
        }
    }

    /// Payloads of `bytes` bytes (`Some(0)`: id-only tasks).
    pub(crate) fn payload_bytes(mut self, bytes: Option<u32>) -> Shape {
        self.payload_bytes = bytes;
        self
    }

    fn task(self, i: u64) -> NewTask {
        let mut t = NewTask::new(format!("t{i}"));
        match self.payload_bytes {
            None => t = t.payload(format!("{{\"i\":{i}}}")),
            Some(0) => {}
            Some(len) => t = t.payload(payload(i, len as usize)),
        }
        if self.priorities > 1 {
            t = t.priority((i % u64::from(self.priorities)) as u16);
        }
        if self.groups > 0 {
            t = t.group(format!("g{}", i % u64::from(self.groups)));
        }
        t
    }
}

/// Task `i`'s payload of `len` bytes: `i` in decimal, zero-padded on the
/// left (its last `len` digits when it has more).
fn payload(i: u64, len: usize) -> Vec<u8> {
    let digits = format!("{i:0>len$}").into_bytes();
    digits[digits.len() - len..].to_vec()
}

/// Enqueue calls in flight at once in the `enqueue` phase.
pub(crate) const ENQUEUE_IN_FLIGHT: usize = 8;
/// The lease of the benchmark's workers.
pub(crate) const BENCH_LEASE: Duration = Duration::from_secs(30);
/// Enqueue tasks `0..n`, `batch` per call, [`ENQUEUE_IN_FLIGHT`] calls at
/// once, telling `added_now` how many each finished call added.
pub(crate) async fn enqueue_all(
    queue: &Queue,
    n: u64,
    batch: u64,
    shape: Shape,
    added_now: &(dyn Fn(u64) + Sync),
) -> Result<(), CliError> {
    let mut calls: JoinSet<Result<usize, dlm::Error>> = JoinSet::new();
    let mut added = 0usize;
    let mut next = 0u64;
    loop {
        while next < n && calls.len() < ENQUEUE_IN_FLIGHT {
            let (lo, hi) = (next, (next + batch).min(n));
            next = hi;
            let queue = queue.clone();
            calls.spawn(async move {
                let tasks = (lo..hi).map(|i| shape.task(i));
                let r = queue
                    .enqueue(tasks, Duration::ZERO, OnDuplicate::Keep)
                    .await?;
                Ok(r.iter().filter(|e| matches!(e, Enqueued::Added(_))).count())
            });
        }
        match calls.join_next().await {
            None => break,
            Some(Ok(r)) => {
                let r = r?;
                added_now(r as u64);
                added += r;
            }
            Some(Err(e)) => return Err(failed("an enqueue task failed", e.to_string())),
        }
    }
    if added as u64 != n {
        return Err(failed(
            "enqueueing",
            format!("{added} of {n} tasks were added"),
        ));
    }
    Ok(())
}

/// The parts of a label, in a fixed order.
#[derive(Debug, Default)]
pub struct Variant(Vec<String>);

impl Variant {
    /// Add a part when `on`.
    pub fn with(mut self, on: bool, part: impl FnOnce() -> String) -> Self {
        if on {
            self.0.push(part());
        }
        self
    }

    /// `"dlm"` or `"dlm-<parts>"`.
    pub fn implementation(&self) -> String {
        if self.0.is_empty() {
            "dlm".to_string()
        } else {
            format!("dlm-{}", self.0.join("-"))
        }
    }

    /// `"default"` or the parts joined by `-` (the label without `dlm-`).
    pub fn name(&self) -> String {
        if self.0.is_empty() {
            "default".to_string()
        } else {
            self.0.join("-")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Variant, payload};

    #[test]
    fn payloads_have_the_asked_length() {
        assert_eq!(payload(42, 5), b"00042");
        assert_eq!(payload(123_456, 3), b"456");
        assert_eq!(payload(7, 1024).len(), 1024);
    }

    #[test]
    fn the_default_is_plain_dlm() {
        let v = Variant::default().with(false, || "x".into());
        assert_eq!(v.implementation(), "dlm");
        assert_eq!(v.name(), "default");
        let v = Variant::default()
            .with(true, || "cluster".into())
            .with(true, || format!("replicas{}", 1));
        assert_eq!(v.implementation(), "dlm-cluster-replicas1");
        assert_eq!(v.name(), "cluster-replicas1");
    }
}
