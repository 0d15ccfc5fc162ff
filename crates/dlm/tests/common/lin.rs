//! Recording lock and queue operations for the third-party checker
//! (`dlm_testkit::linearizable`) and making it agree with the homegrown one.

use dlm::Error;
use dlm_testkit::linearizable::{LockResult, QueueResult, Verdict};

/// How an acquisition that returned `r` ended, for the lock specification:
/// a refusal (busy, no permits, no quorum) took nothing; any other error
/// may have taken the lock.
pub fn acquired<T>(r: &dlm::Result<T>, fence: impl Fn(&T) -> Option<u64>) -> LockResult {
    match r {
        Ok(g) => LockResult::Granted { fence: fence(g) },
        Err(e) => not_acquired(e),
    }
}

/// How an acquisition that failed with `e` ended.
pub fn not_acquired(e: &Error) -> LockResult {
    match e {
        Error::Busy { .. } | Error::NoPermits { .. } | Error::NoQuorum { .. } => {
            LockResult::Refused
        }
        _ => LockResult::Unknown,
    }
}

/// How a release or extension that returned `r` ended: not held (or lost)
/// is a failure, any other error may or may not have taken effect.
pub fn settled<T>(r: &dlm::Result<T>) -> LockResult {
    match r {
        Ok(_) => LockResult::Done,
        Err(
            Error::NotHeld { .. }
            | Error::Lost { .. }
            | Error::Expired { .. }
            | Error::LeaseLost { .. }
            | Error::NoQuorum { .. },
        ) => LockResult::Failed,
        Err(_) => LockResult::Unknown,
    }
}

/// How an ack, nack or extension of a queue lease that returned `r` ended.
pub fn queue_settled<T>(r: &dlm::Result<T>) -> QueueResult {
    match r {
        Ok(_) => QueueResult::Done,
        Err(Error::LeaseLost { .. } | Error::NotHeld { .. } | Error::StaleFence { .. }) => {
            QueueResult::Refused
        }
        Err(_) => QueueResult::Unknown,
    }
}

/// The two checkers' verdicts on one row must agree: `homegrown` is the
/// number of violations the homegrown checker found. Returns the text for
/// the row's "violations" column.
pub fn agree(row: &str, homegrown: usize, verdict: &Verdict) -> String {
    assert_eq!(
        homegrown == 0,
        verdict.ok(),
        "{row}: the checkers disagree: homegrown found {homegrown} violations, {} found {:?}",
        verdict.checker,
        verdict.violations
    );
    assert!(
        verdict.undecided.is_empty(),
        "{row}: {} could not decide: {:?}",
        verdict.checker,
        verdict.undecided
    );
    format!(
        "{homegrown} (homegrown); {} of {} objects, {} operations (todc-utils)",
        verdict.violations.len(),
        verdict.objects,
        verdict.operations
    )
}
