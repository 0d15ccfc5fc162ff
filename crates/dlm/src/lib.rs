//! # dlm: distributed locks on Redis that stay safe
//!
//! Locks for services that run on many hosts: `SET NX PX` with a 128-bit
//! random owner token, token-checked release and extend in Lua, waiting with
//! wake-up on release, fencing tokens, and a guard that renews itself and
//! tells its holder when the lock is lost.
//!
//! ```no_run
//! use std::time::Duration;
//! use dlm::{Client, LockOptions};
//!
//! # async fn demo() -> dlm::Result<()> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let opts = LockOptions::new(Duration::from_secs(10))   // lease: frees itself if we crash
//!     .wait(Duration::from_secs(5))                       // keep trying for up to 5 s
//!     .watchdog(true);                                    // renew every ttl/3 while held
//! let guard = client.lock("orders:42").acquire(&opts).await?;
//! let fence = guard.fence();                              // Some(n) on one Redis: pass to storage
//! tokio::select! {
//!     _ = guard.lost() => eprintln!("lock lost, stopping"),
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => println!("work done with fence {fence:?}"),
//! }
//! guard.release().await?;                                 // Err(Expired | NotHeld) if it was not ours
//! # Ok(()) }
//! ```
//!
//! ## Keys
//! The lock `NAME` is the key `dlm:lock:{NAME}` (prefix configurable with
//! [`ClientBuilder::key_prefix`]); its fencing counter `dlm:lock:{NAME}:fence`
//! and release channel `dlm:lock:{NAME}:released` carry the same `{NAME}`
//! hash tag, so every script touches one Redis Cluster slot. With
//! [`Lock::raw_key`] the key is exactly `NAME`, which shares the lock with
//! redis-py's `Lock`, node-redlock or redsync on the same key. See [`keys`].
//!
//! ## Guarantees and assumptions
//! * Mutual exclusion holds while Redis keeps its data (no failover to a
//!   replica that missed the write, no restart without persistence within a
//!   TTL) and while a holder is not paused longer than its remaining lease.
//!   The guard's [`LockGuard::remaining`] is measured on the local monotonic
//!   clock from *before* the acquire request was sent, minus a drift allowance
//!   of 1% + 2 ms, so it never overestimates.
//! * A pause longer than the lease is the one case no lock can prevent:
//!   use fencing tokens ([`LockGuard::fence`], [`Client::fenced_write`]).
//! * Every call to Redis has a deadline ([`ClientBuilder::timeout`]): an
//!   unreachable Redis yields [`Error::Unavailable`] or [`Error::Timeout`],
//!   never a hang.
//!
//! ## Waiting
//! [`LockOptions::wait`] keeps trying until a deadline. A release publishes on
//! the lock's channel; a waiting client wakes one local waiter at once (FIFO).
//! A jittered retry interval (default 50 ms) covers lost messages and crashed
//! holders (a waiter also retries when the holder's TTL runs out).

pub mod error;
pub mod keys;

mod backend;
mod client;
mod fenced;
mod lock;
mod token;

pub use client::{Client, ClientBuilder, DEFAULT_TIMEOUT, ReleaseAll};
pub use error::{BackendError, Error, Result};
pub use fenced::MAX_FENCED_VALUE;
pub use lock::{
    Lock, LockContext, LockGuard, LockOptions, LockStatus, LostSignal, MAX_TTL, MAX_WAIT, MIN_TTL,
    Released,
};
pub use token::{Fence, Token};

/// The README's examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
