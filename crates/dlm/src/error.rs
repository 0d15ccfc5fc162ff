//! The one error type of the crate.

use std::time::Duration;

/// A boxed error from the Redis client, kept opaque so that a major upgrade of
/// the `redis` crate does not change dlm's public API.
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in dlm.
///
/// The variants tell apart the outcomes a caller reacts to differently:
/// somebody else holds the lock ([`Error::Busy`]), our lock is gone
/// ([`Error::Expired`], [`Error::NotHeld`], [`Error::Lost`]), the input was
/// wrong ([`Error::InvalidArgument`]) and Redis could not be reached
/// ([`Error::Unavailable`], [`Error::Timeout`]).
///
/// ```
/// use dlm::Error;
/// let e = Error::Busy { name: "orders".into(), ttl: Some(std::time::Duration::from_secs(3)) };
/// assert!(!e.is_retryable());
/// assert!(e.to_string().contains("orders"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock is held by another owner (after waiting, if a wait was asked for).
    #[error("lock {name:?} is held by another owner{}", fmt_ttl(ttl))]
    Busy {
        /// The lock's name.
        name: String,
        /// The holder's remaining TTL as Redis reported it; `None` when the key has no expiry.
        ttl: Option<Duration>,
    },
    /// Not enough permits of a semaphore were free (after waiting, if a wait was asked for).
    #[error("semaphore {name:?}: {wanted} permit(s) wanted, {free} of {capacity} free")]
    NoPermits {
        /// The semaphore's name.
        name: String,
        /// Permits asked for.
        wanted: u32,
        /// Permits free at the last attempt.
        free: u32,
        /// The capacity asked under.
        capacity: u32,
    },
    /// Our lock is gone: its TTL ran out (nobody else holds it now).
    #[error("lock {name:?} is not held any more: it expired")]
    Expired {
        /// The lock's name.
        name: String,
    },
    /// The lock is held by another owner: ours expired and somebody else took it.
    #[error("lock {name:?} is held by another owner, not by this token")]
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The lock was lost while guarded work was running (see [`crate::Lock::with`]).
    #[error("lock {name:?} was lost while the guarded work was running")]
    Lost {
        /// The lock's name.
        name: String,
    },
    /// A task's lease is gone: it expired and the task went back to the queue
    /// (`taken: false`) or another worker has re-claimed it (`taken: true`).
    /// The handle can no longer ack, nack or extend it.
    #[error("lease on task {id:?} of queue {queue:?} is lost{}", if *taken { ": another worker holds it" } else { ": it expired" })]
    LeaseLost {
        /// The queue.
        queue: String,
        /// The task id.
        id: String,
        /// Another worker holds a newer lease on it.
        taken: bool,
    },
    /// A versioned write found another version than the one it read.
    #[error("conflict on {name:?}: expected version {expected}, found {current}")]
    Conflict {
        /// The record.
        name: String,
        /// The version the writer read.
        expected: u64,
        /// The version stored now.
        current: u64,
    },
    /// A rate limiter had no free slot within the caller's deadline
    /// ([`crate::ratelimit::RateLimiter::acquire_within`]); nothing was granted.
    #[error("rate limiter {name:?} is at its limit; the next slot frees in {}", secs(*retry_after))]
    RateLimited {
        /// The limiter's name.
        name: String,
        /// How long until a slot frees (from the server's log).
        retry_after: Duration,
    },
    /// A fenced write carried a lower fencing token than one already seen.
    #[error("stale fencing token {given} for {name:?}: token {highest} has written already")]
    StaleFence {
        /// The protected resource.
        name: String,
        /// The token of the rejected write.
        given: u64,
        /// The highest token seen so far.
        highest: u64,
    },
    /// [`crate::LockOptions::replicas`]: the grant reached fewer replicas
    /// than asked for within the timeout; the lock was released again.
    #[error(
        "lock {name:?} was granted but reached {replicas} of {wanted} replicas in time; released it"
    )]
    NotReplicated {
        /// The lock's name.
        name: String,
        /// Replicas that acknowledged the grant.
        replicas: u64,
        /// Replicas asked for.
        wanted: u64,
    },
    /// Redlock: fewer than a majority of the nodes answered.
    #[error(
        "no quorum for lock {name:?}: {answered} of {nodes} Redis nodes answered, {needed} needed"
    )]
    NoQuorum {
        /// The lock's name.
        name: String,
        /// How many nodes answered.
        answered: usize,
        /// The majority needed (N/2+1).
        needed: usize,
        /// How many nodes there are.
        nodes: usize,
    },
    /// A fair lock's queue already holds this many waiters (see
    /// `dlm::fair::MAX_WAITERS`); nothing was queued.
    #[error("the queue of fair lock {name:?} is full ({max} waiters)")]
    QueueFull {
        /// The fair lock's name.
        name: String,
        /// The most waiters it queues.
        max: usize,
    },
    /// A read-write lock was asked to turn a read share into the write lock
    /// (or this client asked for the write lock while holding a read share of
    /// it). Refused: two readers upgrading at once would wait for each other
    /// forever. Release the read share and acquire the write lock instead.
    #[error(
        "read-write lock {name:?}: upgrading a read share to the write lock is refused \
         (two upgraders would deadlock); release the read share, then acquire the write lock"
    )]
    UpgradeRefused {
        /// The read-write lock's name.
        name: String,
    },
    /// An argument is out of range or malformed; nothing was sent to Redis.
    #[error("invalid {arg}: {reason}")]
    InvalidArgument {
        /// Which argument.
        arg: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The client was made in another process, which this one was forked
    /// from: its connections belong to that process, so a forked child
    /// refuses to use it (issue 33: it waited for ever). Make a new client
    /// in the child. Not retryable: the same client fails again.
    #[error(
        "this client was made in process {made_in} before a fork and cannot be used in the \
         forked process {pid}: make a new client in the child"
    )]
    Forked {
        /// The process that made the client.
        made_in: u32,
        /// This process, forked from it.
        pid: u32,
    },
    /// Redis could not be reached (connection refused, dropped, I/O error).
    #[error("Redis unavailable: {source}")]
    Unavailable {
        /// The underlying cause.
        #[source]
        source: BackendError,
    },
    /// Redis did not answer within the configured timeout.
    #[error("Redis did not answer within {}", secs(*.0))]
    Timeout(Duration),
    /// Redis refused the credentials: a wrong password or user (`WRONGPASS`),
    /// or none where the server needs them (`NOAUTH`). Not retryable:
    /// retrying cannot help until the configuration changes.
    #[error("Redis refused the credentials: {source}")]
    Auth {
        /// The refusal, as Redis or the driver reported it.
        #[source]
        source: BackendError,
    },
    /// The server is one dlm cannot run on (older than Redis 6.2): the
    /// reason names the version found and the one needed. Not retryable.
    #[error("unsupported server: {reason}")]
    UnsupportedServer {
        /// What was found, and what dlm needs.
        reason: String,
    },
    /// Redis answered with an error (e.g. wrong type, a script error) or an unexpected reply.
    #[error("Redis error: {source}")]
    Backend {
        /// The underlying cause.
        #[source]
        source: BackendError,
    },
}

fn fmt_ttl(ttl: &Option<Duration>) -> String {
    match ttl {
        Some(t) => format!(" (expires in {})", secs(*t)),
        None => " (without expiry)".into(),
    }
}

impl Error {
    /// True for failures that may succeed when tried again later: Redis
    /// unreachable or too slow, or too few Redlock nodes answering.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. }
                | Error::Timeout(_)
                | Error::NoQuorum { .. }
                | Error::NotReplicated { .. }
        )
    }

    /// True when the error means "our lock is gone" ([`Error::Expired`],
    /// [`Error::NotHeld`] or [`Error::Lost`]).
    pub fn is_lock_lost(&self) -> bool {
        matches!(
            self,
            Error::Expired { .. }
                | Error::NotHeld { .. }
                | Error::Lost { .. }
                | Error::LeaseLost { .. }
        )
    }

    pub(crate) fn invalid(arg: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            arg,
            reason: reason.into(),
        }
    }

    /// `what` needs the crate feature `feature`, which this build left out:
    /// an [`Error::InvalidArgument`] saying so.
    #[allow(dead_code)] // unused when every feature is on
    pub(crate) fn feature_disabled(arg: &'static str, feature: &str) -> Self {
        Error::invalid(
            arg,
            format!(
                "dlm was built without its `{feature}` feature (on by default); enable it in Cargo.toml"
            ),
        )
    }

    /// A copy of this error for another caller that waited on the same call.
    pub(crate) fn share(&self) -> Error {
        match self {
            Error::Timeout(d) => Error::Timeout(*d),
            Error::Unavailable { source } => Error::Unavailable {
                source: source.to_string().into(),
            },
            Error::Auth { source } => Error::Auth {
                source: source.to_string().into(),
            },
            Error::UnsupportedServer { reason } => Error::UnsupportedServer {
                reason: reason.clone(),
            },
            Error::Forked { made_in, pid } => Error::Forked {
                made_in: *made_in,
                pid: *pid,
            },
            other => Error::protocol(other.to_string()),
        }
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Self {
        Error::Backend {
            source: what.into().into(),
        }
    }
}

/// Whether Redis refused the credentials (the driver's kind, or the
/// server's `WRONGPASS` / `NOAUTH` reply).
pub(crate) fn is_auth_failure(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        if is_auth_failure(&e) {
            Error::Auth {
                source: Box::new(e),
            }
        } else if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_unrecoverable_error()
        {
            Error::Unavailable {
                source: Box::new(e),
            }
        } else if matches!(
            e.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
                | redis::ErrorKind::Server(redis::ServerErrorKind::Ask)
        ) {
            // A cluster node answered a client that was not told it is one.
            Error::Backend {
                source: format!(
                    "{e} (this is a Redis Cluster node: connect with \
                     Client::builder().connect_cluster(..), or `dlm --cluster`)"
                )
                .into(),
            }
        } else {
            Error::Backend {
                source: Box::new(e),
            }
        }
    }
}

/// A script reply of an unexpected shape (what the reply decoders report).
impl From<redis::ParsingError> for Error {
    fn from(e: redis::ParsingError) -> Self {
        Error::from(redis::RedisError::from(e))
    }
}

/// `Result` with dlm's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A duration as messages show it: seconds, in plain decimal (`0.01
/// seconds`, `604800 seconds`), the unit every dlm API takes in Python and
/// on the CLI's flags alike.
pub(crate) fn secs(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    let s = if s.is_empty() { "0" } else { s };
    if d.as_nanos() > 0 && d < Duration::from_millis(1) {
        return format!("{} seconds", d.as_secs_f64());
    }
    format!("{s} seconds")
}
