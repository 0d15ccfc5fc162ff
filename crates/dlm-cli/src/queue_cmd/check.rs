//! `dlm queue check Q`: the queue's invariants checked against its Redis
//! state, one library call ([`dlm::queue::Queue::check_invariants_up_to`]).

use clap::Args;

use crate::error::{CliError, EXIT_NO, EXIT_OK};
use crate::global::{Global, QueueArg};
use crate::output::{self, InvariantsLine};

/// `dlm queue check`
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArg,
    /// Read at most N ids from each of the queue's keys (1 to 1000000); a
    /// larger key is checked in part ("complete": false). The check is one
    /// script that blocks Redis a few µs per id read.
    #[arg(long, value_name = "N", default_value_t = dlm::queue::DEFAULT_CHECK_IDS as u64,
          value_parser = clap::value_parser!(u64).range(1..=dlm::queue::MAX_CHECK_IDS as u64))]
    pub max_ids: u64,
}

/// `dlm queue check`: exit 0 when no violation was found, 1 when any was.
pub async fn check(global: &Global, args: &CheckArgs) -> Result<u8, CliError> {
    let queue = args.queue.open(global).await?;
    let max_ids = usize::try_from(args.max_ids).unwrap_or(dlm::queue::MAX_CHECK_IDS);
    let report = queue.check_invariants_up_to(max_ids).await?;
    let line = InvariantsLine::new(&args.queue.queue, &report);
    output::emit(global.json, &line, || line.text())?;
    Ok(if line.ok { EXIT_OK } else { EXIT_NO })
}
