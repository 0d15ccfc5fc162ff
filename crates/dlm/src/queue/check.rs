//! The queue's invariants, checked against its Redis state
//! ([`Queue::check_invariants`], `dlm queue check`): one read-only script
//! (`scripts/check.lua`) reads the state keys, bounded per key, and names
//! every place where the state breaks what the other scripts keep.

use std::sync::LazyLock;

use redis::{Script, Value};

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::queue::ops::{array, int, invocation, text, unsigned};

static CHECK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/check.lua")));

/// How many ids [`Queue::check_invariants`] reads from one key at most.
pub const DEFAULT_CHECK_IDS: usize = 10_000;
/// The most ids per key [`Queue::check_invariants_up_to`] accepts.
pub const MAX_CHECK_IDS: usize = 1_000_000;
/// The most violations one check returns (more: the report is incomplete).
pub const MAX_VIOLATIONS: usize = 1000;

/// One invariant of the queue's Redis state, as kept by its scripts. The
/// names are the keys of [`crate::keys::QUEUE_KEY_SUFFIXES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Invariant {
    /// Every task is in one state: an id is in at most one of `waiting`,
    /// `ready` and `parked` (its queued copy); `blocked` and `dead` exclude
    /// every other state. In flight may coexist with one queued copy: the
    /// id enqueued again while its earlier run holds a lease.
    OneState,
    /// `lease` has an entry exactly for the ids in `inflight`, each a fence
    /// the counter `fence` has handed out.
    Lease,
    /// No id is counted twice in its group: `gcount` of a group equals the
    /// number of ids in `inflight` whose `group` is it, and holds no entry
    /// at or below 0. The violation's id is the group's name.
    GroupCount,
    /// Every `attempts` entry is an integer at least 0, and at least 1 for
    /// an id in flight (its current run counts).
    Attempts,
    /// `parked` and `parkedid` name each other.
    Parked,
    /// A blocked task's `pending` count is at least 1 and equals its
    /// dependencies not done yet: the ids whose `children` list it. No
    /// task that is not blocked has a `pending` entry.
    Pending,
    /// The dependency edges are a set: a `children` list names each
    /// dependent once, only blocked ones, whose `deps` name the parent, and
    /// no dead task still holds a dependent back.
    Edge,
    /// No orphaned data: what a task leaves belongs to an id in a state
    /// that keeps it. Payload (also in a bucket), priority, group and time
    /// limit: waiting, delayed, parked, in flight, blocked or dead. Error,
    /// progress, attempts, dependencies and dependency policy: also while
    /// its completion is remembered (`done`, `completed`). A result: while
    /// its id is in `done`.
    Orphan,
    /// The `stats` field `small` equals the payloads in the bucket hashes.
    /// The violation's id is empty.
    SmallCount,
}

impl Invariant {
    /// Every invariant.
    pub const ALL: [Invariant; 9] = [
        Invariant::OneState,
        Invariant::Lease,
        Invariant::GroupCount,
        Invariant::Attempts,
        Invariant::Parked,
        Invariant::Pending,
        Invariant::Edge,
        Invariant::Orphan,
        Invariant::SmallCount,
    ];

    /// Its name: `one_state`, `lease`, `group_count`, `attempts`, `parked`,
    /// `pending`, `edge`, `orphan` or `small_count`.
    ///
    /// ```
    /// use dlm::queue::Invariant;
    /// assert_eq!(Invariant::GroupCount.as_str(), "group_count");
    /// assert_eq!(Invariant::parse("orphan"), Some(Invariant::Orphan));
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Invariant::OneState => "one_state",
            Invariant::Lease => "lease",
            Invariant::GroupCount => "group_count",
            Invariant::Attempts => "attempts",
            Invariant::Parked => "parked",
            Invariant::Pending => "pending",
            Invariant::Edge => "edge",
            Invariant::Orphan => "orphan",
            Invariant::SmallCount => "small_count",
        }
    }

    /// The invariant named `name` (as [`Invariant::as_str`] spells it).
    pub fn parse(name: &str) -> Option<Invariant> {
        Invariant::ALL.into_iter().find(|i| i.as_str() == name)
    }
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One place where the queue's state breaks an [`Invariant`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// The task id (a group's name for [`Invariant::GroupCount`], empty for
    /// [`Invariant::SmallCount`]).
    pub id: String,
    /// What was found, in words.
    pub detail: String,
}

/// How many tasks are in each state, read with the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StateCounts {
    /// Due now and claimable (in `waiting` or `ready`).
    pub waiting: u64,
    /// Due later.
    pub delayed: u64,
    /// Due, held aside while their group is at its limit.
    pub parked: u64,
    /// Leased to a worker.
    pub in_flight: u64,
    /// Waiting for dependencies.
    pub blocked: u64,
    /// In the dead-letter set.
    pub dead: u64,
    /// Completions still remembered (results' TTL).
    pub done: u64,
}

/// What [`Queue::check_invariants`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvariantReport {
    /// Whether every key was read whole and every violation is listed. When
    /// not, the checks that need a whole key (group counts, dependency
    /// edges) were skipped for the keys read in part.
    pub complete: bool,
    /// The Redis server's clock at the check (ms since the epoch).
    pub now: u64,
    /// The tasks per state.
    pub counts: StateCounts,
    /// Every violation found (at most [`MAX_VIOLATIONS`]).
    pub violations: Vec<Violation>,
}

impl InvariantReport {
    /// No violation found.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// The violations of one invariant.
    pub fn of(&self, invariant: Invariant) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(move |v| v.invariant == invariant)
    }
}

impl Queue {
    /// Check the queue's Redis state against the invariants its scripts
    /// keep ([`Invariant`]), reading at most [`DEFAULT_CHECK_IDS`] ids per
    /// key. One read-only script: nothing moves, and the state is read as
    /// one snapshot. It blocks Redis while it runs (a few µs per id read),
    /// so on a large queue prefer a quiet moment or a smaller bound
    /// ([`Queue::check_invariants_up_to`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let report = client.queue("emails").check_invariants().await?;
    /// for v in &report.violations {
    ///     eprintln!("{}: {} {}", v.invariant, v.id, v.detail);
    /// }
    /// assert!(report.is_ok());
    /// # Ok(()) }
    /// ```
    pub async fn check_invariants(&self) -> Result<InvariantReport> {
        self.check_invariants_up_to(DEFAULT_CHECK_IDS).await
    }

    /// As [`Queue::check_invariants`], reading at most `max_ids` ids per key
    /// (1 ..= [`MAX_CHECK_IDS`]).
    ///
    /// ```no_run
    /// # async fn demo(client: dlm::Client) -> dlm::Result<()> {
    /// let report = client.queue("emails").check_invariants_up_to(1000).await?;
    /// if !report.complete {
    ///     println!("checked in part: a key holds more than 1000 ids");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check_invariants_up_to(&self, max_ids: usize) -> Result<InvariantReport> {
        if max_ids == 0 || max_ids > MAX_CHECK_IDS {
            return Err(Error::invalid(
                "max ids",
                format!("{max_ids} is outside 1 ..= {MAX_CHECK_IDS}"),
            ));
        }
        let Some(l) = self.sharded_view().await? else {
            return self.check_here(max_ids).await;
        };
        // A sharded queue: every shard on its own (one snapshot per shard),
        // the counts added up, each violation naming its shard.
        let mut all = InvariantReport {
            complete: true,
            now: 0,
            counts: StateCounts::default(),
            violations: Vec::new(),
        };
        for q in self.shard_handles(&l) {
            let r = q.check_here(max_ids).await?;
            all.complete &= r.complete;
            all.now = all.now.max(r.now);
            let (a, b) = (&mut all.counts, &r.counts);
            a.waiting += b.waiting;
            a.delayed += b.delayed;
            a.parked += b.parked;
            a.in_flight += b.in_flight;
            a.blocked += b.blocked;
            a.dead += b.dead;
            a.done += b.done;
            let shard = q.shard_index();
            all.violations.extend(r.violations.into_iter().map(|mut v| {
                v.detail = format!("shard {shard}: {}", v.detail);
                v
            }));
        }
        all.violations.truncate(MAX_VIOLATIONS);
        Ok(all)
    }

    /// [`Queue::check_invariants_up_to`] on this handle's shard only.
    async fn check_here(&self, max_ids: usize) -> Result<InvariantReport> {
        let (backend, keys) = self.ready()?;
        let mut inv = invocation(&CHECK, keys);
        // This shard's payload buckets (named after its `payload` key).
        for b in 0..crate::keys::QUEUE_PAYLOAD_BUCKETS {
            inv.key(format!("{}:{b:03x}", keys[1]));
        }
        inv.arg(max_ids).arg(MAX_VIOLATIONS);
        report_reply(backend.eval(&inv).await?)
    }
}

/// check.lua: complete, now, seven counts, then per violation three values.
fn report_reply(v: Value) -> Result<InvariantReport> {
    let v = array(v)?;
    if v.len() < 9 || (v.len() - 9) % 3 != 0 {
        return Err(Error::protocol("check reply of the wrong length"));
    }
    let (head, rest) = v.split_at(9);
    let n = |i: usize| -> Result<u64> { Ok(unsigned(int(&head[i])?)) };
    let violations = rest
        .chunks(3)
        .map(|c| match c {
            [invariant, id, detail] => {
                let name = text(invariant)?;
                Ok(Violation {
                    invariant: Invariant::parse(&name).ok_or_else(|| {
                        Error::protocol(format!("check named an unknown invariant {name:?}"))
                    })?,
                    id: text(id)?,
                    detail: text(detail)?,
                })
            }
            _ => Err(Error::protocol("short violation in check reply")),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(InvariantReport {
        complete: n(0)? == 1,
        now: n(1)?,
        counts: StateCounts {
            waiting: n(2)?,
            delayed: n(3)?,
            parked: n(4)?,
            in_flight: n(5)?,
            blocked: n(6)?,
            dead: n(7)?,
            done: n(8)?,
        },
        violations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invariant_names_round_trip() {
        for i in Invariant::ALL {
            assert_eq!(Invariant::parse(i.as_str()), Some(i));
        }
        assert_eq!(Invariant::parse("nothing"), None);
    }

    #[test]
    fn replies_decode_or_fail_cleanly() -> Result<()> {
        let mut v: Vec<Value> = (0..9).map(Value::Int).collect();
        v[0] = Value::Int(1);
        v.extend([
            Value::BulkString(b"group_count".to_vec()),
            Value::BulkString(b"g".to_vec()),
            Value::BulkString(b"counted 2".to_vec()),
        ]);
        let r = report_reply(Value::Array(v.clone()))?;
        assert!(r.complete && !r.is_ok());
        assert_eq!(r.counts.done, 8);
        assert_eq!(r.of(Invariant::GroupCount).count(), 1);
        v.pop();
        assert!(report_reply(Value::Array(v)).is_err());
        assert!(report_reply(Value::Int(1)).is_err());
        Ok(())
    }
}
