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
//! **New here? Read [the guide](guide)**: choosing a primitive, safety and
//! its assumptions, deployments, the queue, operations, and migrating from
//! redis-py, node-redlock, rslock and BullMQ.
//!
//! Also in this crate: a task queue that never loses a task ([`queue`]: the
//! seeds' sorted-set queue, leases, retries, dead letters and a worker
//! runtime) and lock-free consistency helpers ([`consistency`]: versioned
//! compare-and-set, atomic stock), a rate limiter exact over any window
//! ([`ratelimit`]) and unique increasing ids across servers ([`ids`]).
//!
//! ## Keys
//! Every key starts with `dlm:`, or the client's key prefix
//! ([`ClientBuilder::key_prefix`]: `myapp` makes `myapp:lock:{NAME}`,
//! `myapp:queue:{NAME}:...` and so on for every primitive, each one's keys
//! under one `{hash tag}`). The lock `NAME` is the key `dlm:lock:{NAME}` and its release channel
//! `dlm:lock:{NAME}:released`. On one Redis every lock under a prefix takes
//! its fencing tokens from one counter (`dlm:lock:fence`), so concurrent
//! acquires take theirs with one `INCRBY`; on a Redis Cluster the counters
//! live per hash slot (`dlm:lock:fence:{S}` with `S` a tag of the lock key's
//! slot), so every call touches one slot. Either way, locking ever more
//! distinct names leaves no key behind per name, and every fence is above
//! 2^48 ([`keys::FENCE_FLOOR`]). With
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
//! ## Redlock: one lock over N independent masters
//! [`Client::connect_many`] with several URLs makes every [`Lock`] of that
//! client a Redlock: the acquire script is sent to all N nodes **in
//! parallel**, each with a per-node timeout (default 1% of the TTL, at least
//! 50 ms, at most the call timeout; [`LockOptions::node_timeout`] per
//! acquisition, [`ClientBuilder::node_timeout`] per client), and the lock
//! counts only when a majority (N/2+1) granted it and
//! `validity = ttl - elapsed - drift` is still positive
//! (`drift = ttl * 1% + 2 ms`, elapsed on the monotonic clock).
//! The attempt is decided as soon as a majority granted, or as soon as so
//! many nodes refused or failed that no majority can grant: a slow or
//! frozen node costs at most the per-node timeout, and only when its answer
//! is needed. A grant a slow node gives later carries our token and goes
//! with the release. On failure the token is released at once on the nodes
//! that granted, and in the background on those whose answer was lost or is
//! still out (also nodes that did not answer); the next attempt, after a
//! jittered pause and until the wait deadline, uses a fresh token.
//! [`Error::NoQuorum`] says how many nodes answered. The nodes connect in
//! parallel, each in the background: `connect_many` returns once a majority
//! is connected ([`ClientBuilder::quorum_wait`]), a request to a node not
//! connected yet waits for it within its own deadline, and a node that is
//! down or frozen joins once it answers. Extend runs on
//! all nodes in parallel and counts only with a majority and a positive new
//! validity; on a node that lost the key (restarted empty) it takes the key
//! again, which is safe because a majority still holds our token. The
//! guard's watchdog and [`LockGuard::lost`] work as on one Redis. Release
//! (decided by the first majority to confirm, like status)
//! reports how many nodes confirmed ([`Released`]).
//!
//! Redlock hands out **no fencing token** ([`LockGuard::fence`] is `None`):
//! the per-node counters diverge (a node that restarts, or that missed an
//! acquisition, has a different count), so no number derived from them is
//! provably monotonic, and a wrong token is worse than none. Use a single
//! Redis (with persistence and no failover during a TTL) when you need fencing.
//!
//! ## Safety: what is assumed, and what breaks when it does not hold
//! * **Bounded clock drift.** Redis expires keys by its own clock. A node
//!   whose clock jumps forward (an operator, an NTP step) expires our key
//!   early, and another client may acquire a majority while we still count on
//!   our validity. The drift allowance covers rate differences of about 1%,
//!   not jumps: run NTP in slew mode.
//! * **Bounded pauses.** A holder paused (GC, swap, SIGSTOP) longer than its
//!   remaining validity acts after its lock expired. The guard notices when it
//!   resumes ([`LockGuard::is_lost`]), but a write already in flight is not
//!   stopped; only fencing at the storage stops it (one Redis only, above).
//! * **Persistence, or delayed restart.** A node that crashes and restarts
//!   empty forgets our key. If a majority of our nodes do so within a TTL,
//!   another client can acquire a majority while we hold. Run nodes with
//!   `appendfsync always`, or keep a crashed node down for longer than the
//!   longest TTL before it rejoins.
//! * **Failover (one Redis with replicas, Sentinel, Cluster).** Replication
//!   is asynchronous: a lock granted on a master that fails over before the
//!   write reached a replica is gone on the new master, and a second client
//!   can be granted it. [`LockOptions::replicas`] narrows the window (the
//!   grant counts only once `n` replicas have it, via `WAIT`); fencing tokens
//!   at the storage close it.
//! * **Independent masters.** No replication between the N nodes, and no
//!   failover to a replica that missed the write: that is exactly how one
//!   master with a replica hands one lock to two clients.
//!
//! Martin Kleppmann ("How to do distributed locking", 2016) argues that
//! Redlock is unsafe for correctness because it depends on timing
//! assumptions that real systems violate (process pauses, network delays,
//! clock jumps) and offers no fencing token, so a lock used for correctness
//! should be a consensus system with fencing, and for efficiency a single
//! Redis suffices. Salvatore Sanfilippo (antirez, "Is Redlock safe?", 2016)
//! replies that the algorithm checks the elapsed time after acquiring, so
//! delays before that are detected; that pauses after it hit every lock with
//! a lease, fenced or not; that the random token can be used for
//! compare-and-set at the storage; and that clock jumps are an operational
//! matter (no step changes). dlm takes both seriously: it measures validity on
//! the monotonic clock from before the first request, tells the holder when
//! its lease ran out, and offers fencing where it can be made correct.
//!
//! ## Waiting
//! [`LockOptions::wait`] keeps trying until a deadline. A busy attempt that
//! will wait marks the lock as waited for (`dlm:lock:{NAME}:waiters`), and a
//! release publishes on the lock's channel only when it finds that mark (so
//! uncontended locks cost no `PUBLISH`, which Redis Cluster would broadcast to
//! every node); a waiting client wakes one local waiter at once (FIFO), and a
//! releasing client wakes its own waiters without a message.
//! A jittered retry interval (default 50 ms) covers lost messages and crashed
//! holders (a waiter also retries when the holder's TTL runs out).
//! On one Redis, a guard released while a task of the same client waits for
//! that lock hands it over inside the release script: the key takes the
//! waiter's token and TTL and a new fencing token at once, so the next holder
//! needs no round trip of its own and nobody can cut in. After 16 hand-overs
//! in a row the lock is really released once, so that waiters of other
//! clients get their chance.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod consistency;
pub mod election;
pub mod error;
pub mod fair;
pub mod guide;
pub mod ids;
pub mod keys;
pub mod metrics;
pub mod queue;
pub mod ratelimit;
pub mod rwlock;
pub mod semaphore;

mod backend;
mod client;
mod fenced;
mod lock;
#[cfg(feature = "seeded-defects")]
mod seeded;
mod services;
mod token;

pub use backend::server::{Capability, Product, ServerInfo, Version};
pub use backend::{TlsConfig, Topology};
pub use client::{Client, ClientBuilder, DEFAULT_TIMEOUT, LockKind};
pub use election::{Election, Leader, Leadership};
pub use error::{BackendError, Error, Result};
pub use fair::{FairGuard, FairLock, FairStatus};
pub use fenced::MAX_FENCED_VALUE;
pub use lock::{
    HeldLock, Lock, LockContext, LockGuard, LockOptions, LockStatus, LostSignal, MAX_HELD_LOCKS,
    MAX_MULTI_LOCK, MAX_TTL, MAX_WAIT, MIN_TTL, MultiGuard, MultiLock, ReleaseAll, Released,
    any_lost,
};
pub use rwlock::{ReadGuard, RwLock, RwStatus, WriteGuard};
#[cfg(feature = "seeded-defects")]
#[doc(hidden)]
pub use seeded::SeededDefect;
pub use semaphore::{MAX_PERMITS, Semaphore, SemaphoreGuard, SemaphoreOptions, SemaphoreStatus};
pub use token::{Fence, Token};
pub use tokio_util::sync::CancellationToken;

/// The README's examples, compiled as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
