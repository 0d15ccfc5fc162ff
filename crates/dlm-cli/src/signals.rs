//! The signals `dlm` catches while a command runs: `lock run` forwards them
//! to its command, `queue work` stops gracefully on them.

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::error::CliError;

/// The signals `dlm` catches (and `lock run` forwards to its command).
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    /// Catch SIGINT, SIGTERM and SIGHUP from now on.
    pub fn install() -> Result<Self, CliError> {
        let on = |kind| signal(kind).map_err(CliError::io("installing signal handlers"));
        Ok(Signals {
            int: on(SignalKind::interrupt())?,
            term: on(SignalKind::terminate())?,
            hup: on(SignalKind::hangup())?,
        })
    }

    /// The next signal received (its number).
    pub async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            Some(()) = self.int.recv() => libc::SIGINT,
            Some(()) = self.term.recv() => libc::SIGTERM,
            Some(()) = self.hup.recv() => libc::SIGHUP,
            else => std::future::pending().await,
        }
    }
}
