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
//!
//! The payload buckets (issue 31: every key a script touches is declared).
//! Small payloads of a queue with compact payloads live in 4096 bucket hashes
//! (payload.lua); a script that reads, writes or deletes one gets it in KEYS
//! after the 31: the buckets of the call's ids when the client knows them
//! (enqueue, ack, remove_if_score, task), else all 4096 in order (claim,
//! pop, top, tasks, dead, purge_dead pick their tasks themselves). A queue
//! sends them only once it is seen to keep payloads in buckets: a call
//! without them for a queue that has some (stats `small` > 0) writes
//! nothing and answers the status `BUCKETS`, and the client calls again
//! with them, as it does for `WIDE` (from then on per `Queue` value and its
//! clones). A queue without compact payloads never sends them; one with
//! them pays the keys on its calls (all 4096 on a claim: see
//! BENCHMARKS.md).

use std::borrow::Cow;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::{ScriptInvocation, Value};

use crate::backend::Backend;
use crate::error::Result;
use crate::keys::{QUEUE_PAYLOAD_BUCKETS, queue_keys};

/// How many keys a narrow call sends: `waiting` ..= `completed`.
const NARROW: usize = 19;

/// The keys of one queue, and whether its hot calls must send all of them.
#[derive(Debug)]
pub(crate) struct KeySet {
    all: Vec<String>,
    wide: AtomicBool,
    /// The queue keeps small payloads in buckets (a script said `BUCKETS`).
    bucketed: AtomicBool,
    /// The 31 keys and then every bucket, made on first use.
    with_all_buckets: OnceLock<Vec<String>>,
    /// The defect its client was built with (dlm's checker tests only).
    #[cfg(feature = "seeded-defects")]
    seeded: Option<crate::seeded::SeededDefect>,
}

/// Which payload buckets a call may touch (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Buckets<'a> {
    /// The script picks its tasks: all of them.
    Any,
    /// Those of these task ids. `now`: send them even before the queue is
    /// seen to use buckets (an enqueue of small payloads with compact
    /// payloads on writes to them).
    Of(&'a [&'a str], bool),
}

impl KeySet {
    /// The keys of queue `name`; an invalid name gives an empty set (the
    /// queue reports the name's error on each call).
    pub(crate) fn new(root: &str, name: &str) -> Self {
        KeySet {
            all: queue_keys(root, name).unwrap_or_default(),
            wide: AtomicBool::new(false),
            bucketed: AtomicBool::new(false),
            with_all_buckets: OnceLock::new(),
            #[cfg(feature = "seeded-defects")]
            seeded: None,
        }
    }

    /// The keys of shard `i` (tag number `n`) of the same queue, sent as
    /// this set's are (wide when this one is always wide, the same seeded
    /// defect).
    pub(crate) fn for_shard(&self, root: &str, name: &str, i: u16, n: u16) -> Self {
        let keys = KeySet {
            all: crate::keys::queue_shard_keys(root, name, i, n).unwrap_or_default(),
            wide: AtomicBool::new(self.wide.load(Ordering::Relaxed)),
            bucketed: AtomicBool::new(false),
            with_all_buckets: OnceLock::new(),
            #[cfg(feature = "seeded-defects")]
            seeded: None,
        };
        #[cfg(feature = "seeded-defects")]
        let keys = keys.with_seeded(self.seeded);
        keys
    }

    /// As it is, for a queue of a client built with `defect` (see
    /// `crate::seeded`).
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn with_seeded(mut self, defect: Option<crate::seeded::SeededDefect>) -> Self {
        self.seeded = defect;
        self
    }

    /// The defect its client was built with, if any (see `crate::seeded`).
    #[cfg(feature = "seeded-defects")]
    pub(crate) fn seeded(&self) -> Option<crate::seeded::SeededDefect> {
        self.seeded
    }

    /// The bucket key of task `id` (as payload.lua computes it).
    fn bucket_of(&self, id: &str) -> String {
        let h = id
            .bytes()
            .fold(0u64, |h, b| (h * 31 + u64::from(b)) % 1_000_003);
        format!("{}:{:03x}", self.all[1], h % QUEUE_PAYLOAD_BUCKETS as u64)
    }

    /// All 31 keys and the buckets `which` needs.
    fn with_buckets(&self, which: Buckets<'_>) -> Cow<'_, [String]> {
        match which {
            Buckets::Any => Cow::Borrowed(self.with_all_buckets.get_or_init(|| {
                let mut keys = self.all.clone();
                keys.extend((0..QUEUE_PAYLOAD_BUCKETS).map(|b| format!("{}:{b:03x}", self.all[1])));
                keys
            })),
            Buckets::Of(ids, _) => {
                let mut keys = self.all.clone();
                let mut seen = std::collections::HashSet::new();
                // payload.lua keeps only payloads of ids of at most 64 bytes in buckets.
                for id in ids.iter().filter(|id| id.len() <= 64) {
                    let b = self.bucket_of(id);
                    if seen.insert(b.clone()) {
                        keys.push(b);
                    }
                }
                Cow::Owned(keys)
            }
        }
    }

    /// As [`KeySet::new`], its hot calls always wide (the test switch
    /// [`crate::queue::Queue::always_wide`]).
    pub(crate) fn new_wide(root: &str, name: &str) -> Self {
        let keys = KeySet::new(root, name);
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
/// script answers `WIDE` (the queue uses keys 20 to 31; nothing was written);
/// with the payload buckets `buckets` once the queue is known to use them,
/// and again with them when the script answers `BUCKETS`.
/// `build` makes the invocation for a key list (three times at most).
pub(crate) async fn eval_hot<'s>(
    backend: &Backend,
    keys: &KeySet,
    needs_wide: bool,
    buckets: Buckets<'_>,
    build: impl Fn(&[String]) -> ScriptInvocation<'s>,
) -> Result<Value> {
    let mut needs_wide = needs_wide;
    let mut bucketed =
        keys.bucketed.load(Ordering::Relaxed) || matches!(buckets, Buckets::Of(_, true));
    loop {
        let chosen: Cow<'_, [String]> = if bucketed {
            keys.with_buckets(buckets)
        } else {
            Cow::Borrowed(keys.for_call(needs_wide))
        };
        let reply: Value = backend.eval(&build(&chosen)).await?;
        if chosen.len() < keys.all.len() && is_status(&reply, "WIDE") {
            keys.wide.store(true, Ordering::Relaxed);
            needs_wide = true;
        } else if !bucketed && is_status(&reply, "BUCKETS") {
            keys.bucketed.store(true, Ordering::Relaxed);
            bucketed = true;
        } else {
            return Ok(reply);
        }
    }
}

/// Run a script that is never narrow (all 31 keys) with the payload buckets
/// it may touch, as [`eval_hot`] does.
pub(crate) async fn eval_all<'s>(
    backend: &Backend,
    keys: &KeySet,
    buckets: Buckets<'_>,
    build: impl Fn(&[String]) -> ScriptInvocation<'s>,
) -> Result<Value> {
    eval_hot(backend, keys, true, buckets, build).await
}

/// The scripts' "call me again with more keys" statuses.
fn is_status(v: &Value, status: &str) -> bool {
    matches!(v, Value::SimpleString(s) if s == status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_call_sends_the_first_nineteen_keys_until_widened() {
        let k = KeySet::new("dlm:", "mail");
        assert_eq!(k.all().len(), 31);
        assert_eq!(k.for_call(false).len(), NARROW);
        assert!(k.for_call(false)[NARROW - 1].ends_with(":completed"));
        assert_eq!(k.for_call(true).len(), 31);
        k.wide.store(true, Ordering::Relaxed);
        assert_eq!(k.for_call(false).len(), 31);
    }

    #[test]
    fn the_test_switch_sends_every_key() {
        assert_eq!(KeySet::new_wide("dlm:", "mail").for_call(false).len(), 31);
    }

    #[test]
    fn an_invalid_name_has_no_keys() {
        assert!(!KeySet::new("dlm:", "").is_valid());
    }

    #[test]
    fn only_the_status_wide_asks_for_all_keys() {
        assert!(is_status(&Value::SimpleString("WIDE".into()), "WIDE"));
        assert!(!is_status(&Value::BulkString(b"WIDE".to_vec()), "WIDE"));
        assert!(!is_status(&Value::Array(vec![]), "WIDE"));
    }

    #[test]
    fn bucket_keys_are_those_of_the_keys_module() -> crate::error::Result<()> {
        let k = KeySet::new("dlm:", "mail");
        for id in ["a", "order:7", "x"] {
            assert_eq!(
                k.bucket_of(id),
                crate::keys::queue_payload_bucket("mail", id)?
            );
        }
        let of = k.with_buckets(Buckets::Of(&["a", "a", &"l".repeat(65)], false));
        assert_eq!(
            of.len(),
            32,
            "one bucket for a listed twice, none for a long id"
        );
        let any = k.with_buckets(Buckets::Any);
        assert_eq!(any.len(), 31 + QUEUE_PAYLOAD_BUCKETS);
        assert!(any[31].ends_with(":payload:000") && any[31 + 0xfff].ends_with(":payload:fff"));
        Ok(())
    }
}
