//! A worker's idle wait: blocking on the queue's wake-up lists (not polling),
//! on dedicated connections without a response timeout.
//!
//! A queue that is not sharded has one list (`signal`), and so has each shard
//! of a sharded one (issue 35). On one server (standalone, Sentinel) one
//! `BLPOP` waits on every shard's list at once. On a Redis Cluster the lists
//! are in different slots, which one `BLPOP` cannot take: each shard gets a
//! watcher, a task that blocks on that shard's list on its own connection
//! and wakes the worker when it pops a marker. A marker a watcher pops while
//! its worker is busy is kept as a pending wake-up (the next wait returns at
//! once), so it is never lost to this worker; it may be one another idle
//! worker would have taken, which then waits up to its idle timeout, the
//! fallback every wait has.

use std::time::Duration;

use std::sync::Arc;

use crate::backend::{BoxedConnection, Deployment};
use crate::queue::Queue;

/// Blocking on the queue's wake-up lists, on dedicated connections without
/// a response timeout; falls back to sleeping when none can be had.
pub(super) struct Idle {
    deployment: Option<Arc<Deployment>>,
    queue: Queue,
    /// The wake-up lists waited on now.
    keys: Vec<String>,
    conn: Option<BoxedConnection>,
    /// A Cluster's per-shard watchers, for `keys`.
    watchers: Option<Watchers>,
}

/// One task per shard blocking on its list; `woken` gets a permit per marker popped.
struct Watchers {
    woken: Arc<tokio::sync::Notify>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Watchers {
    fn drop(&mut self) {
        // Aborting drops each watcher's connection, which ends its BLPOP in Redis.
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Idle {
    pub(super) fn new(queue: &Queue) -> Self {
        Idle {
            deployment: queue.deployment().cloned(),
            queue: queue.clone(),
            keys: Vec::new(),
            conn: None,
            watchers: None,
        }
    }

    /// The wake-up list of every live shard (the queue's own when it is not sharded).
    fn signal_keys(&self) -> Vec<String> {
        match self.queue.known_layout() {
            Some(l) if !l.is_plain() => self
                .queue
                .shard_handles(&l)
                .iter()
                .filter_map(|q| q.signal_key())
                .collect(),
            _ => self.queue.signal_key().into_iter().collect(),
        }
    }

    pub(super) async fn wait(&mut self, timeout: Duration) {
        let keys = self.signal_keys();
        if keys != self.keys {
            self.keys = keys;
            self.watchers = None;
        }
        let Some(deployment) = self.deployment.clone() else {
            tokio::time::sleep(timeout).await;
            return;
        };
        if self.keys.is_empty() {
            tokio::time::sleep(timeout).await;
            return;
        }
        if self.keys.len() > 1 && deployment.is_cluster() {
            self.wait_watched(&deployment, timeout).await;
            return;
        }
        if self.conn.is_none() {
            match dedicated(&deployment).await {
                Some(c) => self.conn = Some(c),
                None => {
                    tokio::time::sleep(timeout).await;
                    return;
                }
            }
        }
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let secs = timeout.as_secs_f64().max(0.001);
        let mut cmd = redis::cmd("BLPOP");
        for key in &self.keys {
            cmd.arg(key);
        }
        cmd.arg(secs);
        let blpop = cmd.query_async::<redis::Value>(conn);
        // The server answers within `timeout`; a dead connection must not hang us.
        match tokio::time::timeout(timeout + Duration::from_secs(2), blpop).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => {
                self.conn = None;
                tokio::time::sleep(timeout.min(Duration::from_millis(200))).await;
            }
        }
    }

    /// On a Cluster: wait for any shard's watcher to pop a marker, at most `timeout`.
    async fn wait_watched(&mut self, deployment: &Arc<Deployment>, timeout: Duration) {
        let woken = match &self.watchers {
            Some(w) => w.woken.clone(),
            None => {
                let woken = Arc::new(tokio::sync::Notify::new());
                let tasks = self
                    .keys
                    .iter()
                    .map(|key| tokio::spawn(watch(deployment.clone(), key.clone(), woken.clone())))
                    .collect();
                self.watchers = Some(Watchers {
                    woken: woken.clone(),
                    tasks,
                });
                woken
            }
        };
        let _ = tokio::time::timeout(timeout, woken.notified()).await;
    }
}

/// How long a watcher's BLPOP blocks in Redis before it asks again.
const WATCH_BLOCK: Duration = Duration::from_secs(10);

/// Block on one shard's wake-up list for as long as the worker waits on it.
async fn watch(deployment: Arc<Deployment>, key: String, woken: Arc<tokio::sync::Notify>) {
    let mut conn: Option<BoxedConnection> = None;
    loop {
        if conn.is_none() {
            conn = dedicated(&deployment).await;
            if conn.is_none() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(&key).arg(WATCH_BLOCK.as_secs_f64());
        match tokio::time::timeout(
            WATCH_BLOCK + Duration::from_secs(2),
            cmd.query_async::<redis::Value>(c),
        )
        .await
        {
            Ok(Ok(redis::Value::Nil)) => {}
            Ok(Ok(_)) => woken.notify_one(),
            Ok(Err(_)) | Err(_) => {
                conn = None;
                // A failed connection may mean work was pushed meanwhile: look.
                woken.notify_one();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A dedicated connection without a response timeout, for a blocking
/// command (`None` when it cannot be had within a few seconds).
pub(super) async fn dedicated(deployment: &Deployment) -> Option<BoxedConnection> {
    match tokio::time::timeout(
        Duration::from_secs(3),
        deployment.dedicated(Duration::from_secs(2)),
    )
    .await
    {
        Ok(Ok(c)) => Some(c),
        _ => None,
    }
}
