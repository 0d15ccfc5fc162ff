//! The one error type of the command and its mapping to exit codes.

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: a normal "no" (not acquired, not the holder, expired).
pub const EXIT_NO: u8 = 1;
/// Exit code: usage error or invalid input.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: Redis unavailable, a backend or environment failure.
pub const EXIT_UNAVAILABLE: u8 = 3;
/// Exit code: the lock was lost while `lock run`'s command ran.
pub const EXIT_LOST: u8 = 4;

/// Everything that makes `dlm` exit non-zero (except `lock run` passing on
/// its command's exit code).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// From the lock library: busy, expired, not held, invalid, unavailable...
    #[error(transparent)]
    Dlm(#[from] dlm::Error),
    /// Bad usage found after parsing (clap reports its own errors itself).
    #[error("{0}")]
    Usage(String),
    /// A normal "no" with its explanation (e.g. `queue remove` found another score).
    #[error("{0}")]
    No(String),
    /// The lock was lost while `lock run`'s command ran.
    #[error("lock {name} lost while the command ran")]
    Lost {
        /// The lock's name.
        name: String,
    },
    /// The permits were lost while `semaphore run`'s command ran.
    #[error("permits of semaphore {name} lost while the command ran")]
    PermitsLost {
        /// The semaphore's name.
        name: String,
    },
    /// `lock run` could not start its command.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The private redis-server of `bench` / `demo` did not start.
    #[error("cannot start a private redis-server: {0}")]
    Testkit(#[from] dlm_testkit::Error),
    /// A local I/O error (writing output, waiting for a child...).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The demo's locked counters came out wrong.
    #[error("{0}")]
    DemoFailed(String),
}

impl CliError {
    /// An I/O error while doing `what`.
    pub fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> CliError {
        move |source| CliError::Io { what, source }
    }

    /// True when stdout was closed by its reader.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Dlm(e) => dlm_exit_code(e),
            CliError::Usage(_) => EXIT_USAGE,
            CliError::No(_) => EXIT_NO,
            CliError::Lost { .. } | CliError::PermitsLost { .. } => EXIT_LOST,
            // As shells do: 127 command not found, 126 not executable.
            CliError::Spawn { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            },
            CliError::Testkit(_) | CliError::Io { .. } => EXIT_UNAVAILABLE,
            CliError::DemoFailed(_) => EXIT_NO,
        }
    }
}

/// The exit code for a library error.
pub fn dlm_exit_code(e: &dlm::Error) -> u8 {
    use dlm::Error as E;
    match e {
        E::Busy { .. }
        | E::Expired { .. }
        | E::NotHeld { .. }
        | E::StaleFence { .. }
        | E::LeaseLost { .. }
        | E::Conflict { .. }
        | E::NoPermits { .. }
        | E::QueueFull { .. }
        | E::UpgradeRefused { .. }
        | E::RateLimited { .. } => EXIT_NO,
        E::InvalidArgument { .. } => EXIT_USAGE,
        E::Lost { .. } => EXIT_LOST,
        E::Unavailable { .. } | E::Timeout(_) | E::Backend { .. } | E::NoQuorum { .. } => {
            EXIT_UNAVAILABLE
        }
        // `dlm::Error` is non-exhaustive: treat anything new as a backend failure.
        _ => EXIT_UNAVAILABLE,
    }
}

/// Map an error of the `redis` crate (used directly by `bench` and `demo`)
/// the way the library does.
pub fn redis_err(e: redis::RedisError) -> CliError {
    CliError::Dlm(dlm::Error::from(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn exit_codes_follow_the_contract() {
        let name = || "n".to_string();
        let code = |e: dlm::Error| CliError::from(e).exit_code();
        assert_eq!(
            code(dlm::Error::Busy {
                name: name(),
                ttl: None
            }),
            1
        );
        assert_eq!(code(dlm::Error::Expired { name: name() }), 1);
        assert_eq!(code(dlm::Error::NotHeld { name: name() }), 1);
        assert_eq!(
            code(dlm::Error::InvalidArgument {
                arg: "ttl",
                reason: "x".into()
            }),
            2
        );
        assert_eq!(code(dlm::Error::Timeout(Duration::from_secs(1))), 3);
        assert_eq!(
            code(dlm::Error::Unavailable {
                source: "down".into()
            }),
            3
        );
        assert_eq!(code(dlm::Error::Backend { source: "x".into() }), 3);
        assert_eq!(code(dlm::Error::Lost { name: name() }), 4);
        assert_eq!(CliError::Lost { name: name() }.exit_code(), 4);
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(CliError::No("x".into()).exit_code(), 1);
        assert_eq!(
            code(dlm::Error::LeaseLost {
                queue: name(),
                id: name(),
                taken: true
            }),
            1
        );
    }
}
