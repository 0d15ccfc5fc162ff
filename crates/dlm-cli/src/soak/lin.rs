//! The third-party linearizability checker (`dlm_testkit::linearizable`,
//! todc-utils' Wing-Gong-Lowe search): its types, and the one place the
//! soak calls it ([`check_lock_history`], [`check_queue_history`]).

pub use dlm_testkit::linearizable::{
    LockAction, LockModel, LockOp, LockResult, Mode, QueueAction, QueueOp, QueueResult, QueueSpec,
    Verdict,
};

/// Judge one lock kind's history of one epoch (any number of names).
pub fn check_lock_history(model: LockModel, ops: &[LockOp]) -> Verdict {
    dlm_testkit::linearizable::check_locks(model, ops)
}

/// Judge one queue's history.
pub fn check_queue_history(spec: &QueueSpec, ops: &[QueueOp]) -> Verdict {
    dlm_testkit::linearizable::check_queue(spec, ops)
}
