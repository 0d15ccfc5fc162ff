//! Seeded defects: test-only switches that put back, for one client, a
//! defect that issue 30 or 31 fixed, so that dlm's own checker tests can show
//! that every checker fails on a history with that defect
//! (`tests/seeded_defects_caught.rs`, RELIABILITY.md "Seeded defects").
//!
//! Compiled only with the `seeded-defects` feature, which is never on by
//! default. **Never enable it in production**: a client built with a seeded
//! defect hands out fences that go backwards, revives expired Redlock leases,
//! releases dependents early or leaks group slots, on purpose.
//!
//! A switch is per client ([`crate::ClientBuilder::seeded_defect`]), never
//! process-global, so that tests in one binary can run side by side. The Lua
//! variants are made at load time from the fixed scripts by replacing one
//! marked line each (the markers are comments on those lines: `[seeded
//! EarlyDependent ...]`, `[seeded LeakedGroupSlot ...]`); the fixed scripts are
//! what every other client runs.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use redis::Script;

/// A fixed defect to put back in one client (dlm's checker tests only; the
/// `seeded-defects` feature, never in production). See
/// [`crate::ClientBuilder::seeded_defect`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SeededDefect {
    /// Issue 30, defect 1: a client built with
    /// [`crate::ClientBuilder::connection`] on a Redis that is not a
    /// Cluster takes its fences from the per-slot counters (no layout probe,
    /// no migration), while a URL client takes them from the shared counter:
    /// fences go backwards when the two take turns on one lock.
    FenceInversion,
    /// Issue 30, defect 3: a Redlock extension or renewal counts the nodes
    /// where it re-took an expired key as held, and the lease's end is not
    /// read again after the replies: an expired lock that another client held
    /// in between is revived.
    RedlockRevival,
    /// Issue 31, defect 1: dependency edges are lists again (appended
    /// without dedup, and not dropped when a dependent dies), so a
    /// re-submitted workflow's dependent counts a stale edge twice and is
    /// released before every dependency was acked.
    EarlyDependent,
    /// Issue 31, defect 2: a replacement of a task in flight is due at once
    /// instead of held until the run settles: the id is leased twice at once
    /// and counted twice in its group, whose slot then leaks.
    LeakedGroupSlot,
}

/// One marked line of a fixed script and what the seeded variant runs instead.
struct Edit {
    defect: SeededDefect,
    /// The whole marked line's text (code and marker comment), found exactly once.
    marked: &'static str,
    /// What the variant has instead.
    variant: &'static str,
}

/// Every edit a seeded defect makes to the queue's scripts.
const EDITS: &[Edit] = &[
    // deps.lua's add_edges: a dependent already listed is listed again.
    Edit {
        defect: SeededDefect::EarlyDependent,
        marked: "if not seen[k] then -- [seeded EarlyDependent: edges are a set]",
        variant: "if true then -- seeded EarlyDependent: edges are lists",
    },
    // deps.lua's kill_blocked: a dying dependent stays in its other
    // dependencies' children.
    Edit {
        defect: SeededDefect::EarlyDependent,
        marked: "drop_edges(c) -- [seeded EarlyDependent: a dead dependent leaves]",
        variant: "-- seeded EarlyDependent: a dead dependent's edges stay",
    },
    // enqueue.lua: a replacement of a task in flight is not held.
    Edit {
        defect: SeededDefect::LeakedGroupSlot,
        marked: "elseif flying then -- [seeded LeakedGroupSlot: hold the replacement]",
        variant: "elseif false then -- seeded LeakedGroupSlot: the replacement is due",
    },
];

/// `fixed` with `defect`'s edits, or `None` when none of them applies to it.
/// Panics when a marked line is there more than once: the marker must name
/// one line (checked by the unit tests below for every script it applies to).
fn variant(defect: SeededDefect, fixed: &str) -> Option<String> {
    let mut text = None::<String>;
    for e in EDITS.iter().filter(|e| e.defect == defect) {
        let current = text.as_deref().unwrap_or(fixed);
        match current.matches(e.marked).count() {
            0 => {}
            1 => text = Some(current.replacen(e.marked, e.variant, 1)),
            n => panic!("seeded marker {:?} is in a script {n} times", e.marked),
        }
    }
    text
}

/// The variants made so far, by defect and fixed script text (its address:
/// each fixed text is one `&'static str`).
type Variants = HashMap<(SeededDefect, usize), Option<&'static Script>>;
static VARIANTS: LazyLock<Mutex<Variants>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The script a client with `defect` runs instead of the fixed script whose
/// text is `fixed`: `None` when the defect changes nothing in it (run the
/// fixed script). Each variant is made once (and kept for the process's life).
pub(crate) fn script(defect: Option<SeededDefect>, fixed: &'static str) -> Option<&'static Script> {
    let defect = defect?;
    let mut made = VARIANTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *made
        .entry((defect, fixed.as_ptr() as usize))
        .or_insert_with(|| {
            variant(defect, fixed).map(|text| &*Box::leak(Box::new(Script::new(&text))))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEPS: &str = include_str!("queue/scripts/deps.lua");
    const ENQUEUE: &str = include_str!("queue/scripts/enqueue.lua");

    #[test]
    fn every_marker_names_one_line_of_its_script() {
        for e in EDITS {
            let in_deps = DEPS.matches(e.marked).count();
            let in_enqueue = ENQUEUE.matches(e.marked).count();
            assert_eq!(in_deps + in_enqueue, 1, "{:?}", e.marked);
        }
    }

    #[test]
    fn a_variant_differs_from_its_script_by_the_marked_lines_only() {
        let early = variant(SeededDefect::EarlyDependent, DEPS).unwrap_or_default();
        assert_ne!(early, DEPS);
        assert_eq!(early.lines().count(), DEPS.lines().count());
        let changed = early.lines().zip(DEPS.lines()).filter(|(a, b)| a != b);
        assert_eq!(changed.count(), 2);
        assert!(variant(SeededDefect::EarlyDependent, ENQUEUE).is_none());
        let leak = variant(SeededDefect::LeakedGroupSlot, ENQUEUE).unwrap_or_default();
        assert_eq!(
            leak.lines()
                .zip(ENQUEUE.lines())
                .filter(|(a, b)| a != b)
                .count(),
            1
        );
        assert!(variant(SeededDefect::LeakedGroupSlot, DEPS).is_none());
        assert!(variant(SeededDefect::FenceInversion, ENQUEUE).is_none());
    }
}
