//! A worker's idle wait: blocking on the queue's wake-up list (not polling),
//! on a dedicated connection without a response timeout.

use std::time::Duration;

use std::sync::Arc;

use crate::backend::{BoxedConnection, Deployment};
use crate::queue::Queue;

/// Blocking on the queue's wake-up list, on a dedicated connection without a
/// response timeout; falls back to sleeping when it cannot be had.
pub(super) struct Idle {
    deployment: Option<Arc<Deployment>>,
    key: Option<String>,
    conn: Option<BoxedConnection>,
}

impl Idle {
    pub(super) fn new(queue: &Queue) -> Self {
        let key = crate::keys::queue_keys(queue.root(), queue.name())
            .ok()
            .and_then(|k| k.into_iter().nth(9));
        Idle {
            deployment: queue.deployment().cloned(),
            key,
            conn: None,
        }
    }

    pub(super) async fn wait(&mut self, timeout: Duration) {
        let (Some(deployment), Some(key)) = (&self.deployment, &self.key) else {
            tokio::time::sleep(timeout).await;
            return;
        };
        if self.conn.is_none() {
            match dedicated(deployment).await {
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
        cmd.arg(key).arg(secs);
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
