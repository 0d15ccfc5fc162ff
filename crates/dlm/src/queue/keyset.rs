//! A queue's keys, made once per [`crate::queue::Queue`] (and shared by its
//! clones), and whether its busiest scripts need all of them.
//!
//! Every queue script takes the same 31 keys ([`crate::keys::QUEUE_KEY_SUFFIXES`]),
//! but keys 20 to 31 (workers, time limits, results, progress, dependencies,
//! the event log) belong to features a plain queue never uses. Redis makes a
//! Lua string of every key of every call, so the three calls a task costs
//! (enqueue, claim, ack) send only the first 19 (*narrow*) until the queue is
//! seen to use the others. The scripts check it atomically from the settings
//! they read anyway (`extras`, `events_maxlen`): a narrow call of a queue that
//! needs them writes nothing and answers the status `WIDE`; the client then
//! calls again with all 31 and sends them from then on (per `Queue` value and
//! its clones: one extra round trip, once). A call the client knows needs
//! them (a task with dependencies or a time limit, a result) is wide at once.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{ScriptInvocation, Value};

use crate::backend::Backend;
use crate::error::Result;
use crate::keys::queue_keys;

/// How many keys a narrow call sends: `waiting` ..= `completed`.
const NARROW: usize = 19;

/// The keys of one queue, and whether its hot calls must send all of them.
#[derive(Debug)]
pub(crate) struct KeySet {
    all: Vec<String>,
    wide: AtomicBool,
}

impl KeySet {
    /// The keys of queue `name`; an invalid name gives an empty set (the
    /// queue reports the name's error on each call).
    pub(crate) fn new(name: &str) -> Self {
        KeySet {
            all: queue_keys(name).unwrap_or_default(),
            wide: AtomicBool::new(false),
        }
    }

    /// As [`KeySet::new`], its hot calls always wide (the test switch
    /// [`crate::queue::Queue::always_wide`]).
    pub(crate) fn new_wide(name: &str) -> Self {
        let keys = KeySet::new(name);
        keys.wide.store(true, Ordering::Relaxed);
        keys
    }

    /// Whether the name was valid.
    pub(crate) fn is_valid(&self) -> bool {
        !self.all.is_empty()
    }

    /// All 31 keys.
    pub(crate) fn all(&self) -> &[String] {
        &self.all
    }

    /// The keys for a hot call: all when `needs_wide` or the queue has been
    /// seen to use them, else the first 19.
    fn for_call(&self, needs_wide: bool) -> &[String] {
        if needs_wide || self.wide.load(Ordering::Relaxed) {
            &self.all
        } else {
            &self.all[..NARROW.min(self.all.len())]
        }
    }
}

/// Run a hot script (enqueue, claim, ack) with the keys it needs: narrow
/// unless `needs_wide` or known wide, and again with all keys when the
/// script answers `WIDE` (the queue uses keys 20 to 31; nothing was written).
/// `build` makes the invocation for a key list (twice at most).
pub(crate) async fn eval_hot<'s>(
    backend: &Backend,
    keys: &KeySet,
    needs_wide: bool,
    build: impl Fn(&[String]) -> ScriptInvocation<'s>,
) -> Result<Value> {
    let chosen = keys.for_call(needs_wide);
    let reply: Value = backend.eval(&build(chosen)).await?;
    if chosen.len() < keys.all.len() && is_wide(&reply) {
        keys.wide.store(true, Ordering::Relaxed);
        return backend.eval(&build(&keys.all)).await;
    }
    Ok(reply)
}

/// The scripts' "call me again with all the keys" status.
fn is_wide(v: &Value) -> bool {
    matches!(v, Value::SimpleString(s) if s == "WIDE")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_call_sends_the_first_nineteen_keys_until_widened() {
        let k = KeySet::new("mail");
        assert_eq!(k.all().len(), 31);
        assert_eq!(k.for_call(false).len(), NARROW);
        assert!(k.for_call(false)[NARROW - 1].ends_with(":completed"));
        assert_eq!(k.for_call(true).len(), 31);
        k.wide.store(true, Ordering::Relaxed);
        assert_eq!(k.for_call(false).len(), 31);
    }

    #[test]
    fn the_test_switch_sends_every_key() {
        assert_eq!(KeySet::new_wide("mail").for_call(false).len(), 31);
    }

    #[test]
    fn an_invalid_name_has_no_keys() {
        assert!(!KeySet::new("").is_valid());
    }

    #[test]
    fn only_the_status_wide_asks_for_all_keys() {
        assert!(is_wide(&Value::SimpleString("WIDE".into())));
        assert!(!is_wide(&Value::BulkString(b"WIDE".to_vec())));
        assert!(!is_wide(&Value::Array(vec![])));
    }
}
