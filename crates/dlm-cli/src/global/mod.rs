//! What every command shares: the global options ([`Global`]), the Redis a
//! command talks to ([`target`]), the value parsers that reject bad input
//! before anything is sent to Redis ([`parse`]), and the lock and queue
//! arguments several commands take ([`LockName`], [`QueueArg`]).
//!
//! Command modules import this; it imports no command.

use std::time::Duration;

mod names;
pub mod parse;
pub mod target;

pub use names::{LockName, QueueArg, SettingsArgs, ShardKeyArg};

/// The Redis URL used when neither `--redis` nor `DLM_REDIS_URL` is given
/// (`bench` and `demo` start a private server instead).
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// The options every command shares, checked.
#[derive(Debug, Clone)]
pub struct Global {
    /// The Redis URLs given with `--redis` or `DLM_REDIS_URL` (empty: none).
    pub redis: Vec<String>,
    /// Print JSON.
    pub json: bool,
    /// Per-call deadline.
    pub timeout: Duration,
    /// Redlock: the per-node deadline of lock requests (`None`: from the TTL).
    pub node_timeout: Option<Duration>,
    /// What the `--redis` URLs are.
    pub topology: Topology,
    /// TLS certificates for `rediss://` URLs, when given.
    pub tls: Option<dlm::TlsConfig>,
    /// Worker threads of the async runtime.
    pub threads: usize,
    /// Use the server's native commands where it has them (`--native-commands`).
    pub native_commands: bool,
}

/// What the `--redis` URLs name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Topology {
    /// One server; several: independent masters (a Redlock for `lock`).
    Plain,
    /// Seed nodes of one Redis Cluster (`--cluster`).
    Cluster,
    /// Sentinels of the master with this name (`--sentinel NAME`).
    Sentinel(String),
}

impl Global {
    /// The URL to use: the one given, else the default local Redis.
    pub fn url(&self) -> &str {
        self.redis.first().map_or(DEFAULT_REDIS_URL, String::as_str)
    }

    /// The URLs to lock on: those given (several: Redlock), else the default local Redis.
    pub fn urls(&self) -> Vec<String> {
        if self.redis.is_empty() {
            vec![DEFAULT_REDIS_URL.to_string()]
        } else {
            self.redis.clone()
        }
    }
}
