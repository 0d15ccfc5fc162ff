//! The runner the model-based tests share (`tests/model_queue.rs`,
//! `tests/model_locks.rs`): `proptest-state-machine` generates and shrinks
//! the sequences of operations from a [`ReferenceStateMachine`]; this runs
//! each sequence against the real system (a closure per step), the way
//! `StateMachineTest::test_sequential` does, but with the system under test
//! built by the caller around a server and a runtime the whole test shares
//! (the trait's functions take no context), and with failures returned as
//! values, so that the shrunk sequence and the reason are printed together.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::fmt::Debug;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use proptest_state_machine::ReferenceStateMachine;

/// A long lease or TTL: nothing runs out within a sequence.
pub const LONG: Duration = Duration::from_secs(60);
/// A short lease or TTL; a step that grants or extends one waits
/// [`SHORT_WAIT`] before it ends, so the lease is over, deterministically,
/// for the rest of the sequence (a later step cannot tell "ran out just
/// now" from "ran out long ago", however slow the machine).
pub const SHORT: Duration = Duration::from_millis(200);
/// How long a step with a short lease waits before it ends.
pub const SHORT_WAIT: Duration = Duration::from_millis(400);

/// `Ok` when what the system returned equals the model's prediction, else
/// both, for the failure's reason.
pub fn check_eq<T: PartialEq + Debug>(what: &str, real: T, model: T) -> Result<(), String> {
    if real == model {
        Ok(())
    } else {
        Err(format!(
            "{what}: the system gave {real:?}, the model {model:?}"
        ))
    }
}

/// An error the model does not predict, as a failure's reason.
pub fn unexpected(err: impl std::fmt::Display) -> String {
    format!("unexpected error: {err}")
}

/// How many cases: `PROPTEST_CASES` when set (as proptest reads it), else
/// `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// The proptest configuration of a model test: [`cases`] cases, no
/// failure persistence (a failure prints its shrunk sequence; keep it as a
/// named regression test instead of a seed file).
pub fn config(default_cases: u32) -> Config {
    Config {
        cases: cases(default_cases),
        failure_persistence: None,
        // Shrinking replays sequences against the server: bound its time.
        max_shrink_iters: 2048,
        ..Config::default()
    }
}

/// Runs `R`'s sequences of `steps` transitions: for each case `init` builds
/// the system under test from the initial model state, then every
/// transition is applied to the model and to the system (`step` gets the
/// model state *after* the transition, to compare with), and `check`
/// runs after each step. A failure (an `Err` from any of them) is shrunk to
/// a minimal sequence and the test panics with it. Prints how many cases
/// and steps ran, and how long they took.
pub fn run<R, S>(
    name: &str,
    config: Config,
    steps: std::ops::RangeInclusive<usize>,
    init: impl Fn(&R::State) -> Result<S, String>,
    step: impl Fn(&mut S, &R::State, &R::Transition) -> Result<(), String>,
    check: impl Fn(&mut S, &R::State) -> Result<(), String>,
) where
    R: ReferenceStateMachine,
    R::State: Debug,
    R::Transition: Debug,
{
    let started = Instant::now();
    let cases = config.cases;
    let ran_cases = Cell::new(0u64);
    let ran_steps = Cell::new(0u64);
    let last_failure = RefCell::new(String::new());
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(
        &R::sequential_strategy(steps),
        |(initial, transitions, seen)| {
            ran_cases.set(ran_cases.get() + 1);
            let mut model = initial;
            let fail = |at: usize, what: String| {
                let reason = format!("step {at}: {what}");
                *last_failure.borrow_mut() = reason.clone();
                TestCaseError::fail(reason)
            };
            let mut sut = init(&model).map_err(|e| fail(0, e))?;
            check(&mut sut, &model).map_err(|e| fail(0, e))?;
            for (i, t) in transitions.iter().enumerate() {
                // As `test_sequential`: tells the shrinker how far the case got.
                if let Some(seen) = &seen {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                ran_steps.set(ran_steps.get() + 1);
                model = R::apply(model, t);
                step(&mut sut, &model, t).map_err(|e| fail(i + 1, format!("{t:?}: {e}")))?;
                check(&mut sut, &model).map_err(|e| fail(i + 1, format!("after {t:?}: {e}")))?;
            }
            Ok(())
        },
    );
    eprintln!(
        "{name}: {} cases ({cases} asked), {} steps in {:.1?}",
        ran_cases.get(),
        ran_steps.get(),
        started.elapsed()
    );
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(reason, (_, transitions, _))) => {
            let mut listing = String::new();
            for (i, t) in transitions.iter().enumerate() {
                listing.push_str(&format!("\n  {}. {t:?}", i + 1));
            }
            panic!(
                "{name}: the model and the system disagree: {reason}\nminimal sequence:{listing}"
            );
        }
        Err(TestError::Abort(why)) => {
            panic!(
                "{name}: aborted: {why} (last failure: {})",
                last_failure.borrow()
            )
        }
    }
}
