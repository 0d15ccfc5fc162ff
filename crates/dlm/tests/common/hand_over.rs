//! Helpers of the Redlock hand-over tests: a client over several nodes, what
//! each node holds, and a task queued for a hand-over.

use std::time::Duration;

use dlm::{Client, LockGuard};
use dlm_testkit::RedisServer;

use super::ttl;

/// A Redlock client over `nodes`, with call timeout `timeout`.
pub async fn redlock(nodes: &[RedisServer], timeout: Duration) -> Client {
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    Client::builder()
        .timeout(timeout)
        .connect_many(&urls)
        .await
        .expect("connect to the nodes")
}

/// What each node holds under `key` (`""`: nothing).
pub fn values(nodes: &[RedisServer], key: &str) -> Vec<String> {
    nodes
        .iter()
        .map(|n| {
            n.command(&["GET", key])
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .collect()
}

/// A task of `c` waiting for lock `name` (up to `wait`, TTL `ttl_ms`),
/// returned once its first attempt found the lock busy and it queued for a
/// hand-over (a generous wait: the machine may be loaded).
pub async fn waiter(
    c: &Client,
    name: &str,
    ttl_ms: u64,
    wait: Duration,
) -> tokio::task::JoinHandle<dlm::Result<LockGuard>> {
    let lock = c.lock(name);
    let task = tokio::spawn(async move { lock.acquire(&ttl(ttl_ms).wait(wait)).await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    task
}
