//! # The dlm guide
//!
//! What to read before adopting dlm, chapter by chapter (the API reference
//! is the rest of these docs; the README has the CLI in full):
//!
//! 1. [Choosing a primitive](choosing): which lock, the queue or no lock at
//!    all, and the crate's feature flags.
//! 2. [Safety and its assumptions](safety): what dlm promises, under which
//!    three assumptions, and what fencing adds.
//! 3. [Deployments](deployments): one server, Redlock, Cluster, Sentinel,
//!    TLS and mutual TLS, an ACL user.
//! 4. [The queue](queue): tasks, leases, retries, dead letters, the worker.
//! 5. [Operations](operations): the `dlm` CLI, the `dlm serve` dashboard,
//!    metrics and tracing.
//! 6. [Migration](migration) from redis-py's `Lock`, node-redlock, rslock
//!    and BullMQ: what maps to what, and which keys are shared.
//!
//! This module holds documentation only.

#[doc = include_str!("../guide/choosing.md")]
pub mod choosing {}

#[doc = include_str!("../guide/safety.md")]
pub mod safety {}

#[doc = include_str!("../guide/deployments.md")]
pub mod deployments {}

#[doc = include_str!("../guide/queue.md")]
pub mod queue {}

#[doc = include_str!("../guide/operations.md")]
pub mod operations {}

#[doc = include_str!("../guide/migration.md")]
pub mod migration {}
