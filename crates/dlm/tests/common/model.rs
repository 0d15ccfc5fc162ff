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

/// Runs one sequence: builds the system under test with `init`, then
/// applies each transition to the model and to the system (`step` gets the
/// model state *after* the transition), calling `check` after each and
/// `before_step` before each. The first disagreement, as a reason naming
/// the step.
pub fn run_case<R, S>(
    initial: R::State,
    transitions: &[R::Transition],
    before_step: impl Fn(),
    init: &impl Fn(&R::State) -> Result<S, String>,
    step: &impl Fn(&mut S, &R::State, &R::Transition) -> Result<(), String>,
    check: &impl Fn(&mut S, &R::State) -> Result<(), String>,
) -> Result<(), String>
where
    R: ReferenceStateMachine,
    R::Transition: Debug,
{
    let mut model = initial;
    let mut sut = init(&model).map_err(|e| format!("step 0: {e}"))?;
    check(&mut sut, &model).map_err(|e| format!("step 0: {e}"))?;
    for (i, t) in transitions.iter().enumerate() {
        before_step();
        model = R::apply(model, t);
        step(&mut sut, &model, t).map_err(|e| format!("step {}: {t:?}: {e}", i + 1))?;
        check(&mut sut, &model).map_err(|e| format!("step {}: after {t:?}: {e}", i + 1))?;
    }
    Ok(())
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
    // The last failing sequence and its reason: the smallest found. (What
    // `TestError::Fail` carries is the shrinker's last *current* value,
    // which after an undo it could not make may be one that passed.)
    type Failure<T> = RefCell<Option<(String, Vec<T>)>>;
    let last_failure: Failure<R::Transition> = RefCell::new(None);
    let first_failure: Failure<R::Transition> = RefCell::new(None);
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(
        &R::sequential_strategy(steps),
        |(initial, transitions, seen)| {
            ran_cases.set(ran_cases.get() + 1);
            let counted = || {
                // As `test_sequential`: tells the shrinker how far the case got.
                if let Some(seen) = &seen {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                ran_steps.set(ran_steps.get() + 1);
            };
            run_case::<R, S>(initial, &transitions, counted, &init, &step, &check).map_err(
                |reason| {
                    let failed = Some((reason.clone(), transitions.clone()));
                    if first_failure.borrow().is_none() {
                        *first_failure.borrow_mut() = failed.clone();
                    }
                    *last_failure.borrow_mut() = failed;
                    TestCaseError::fail(reason)
                },
            )
        },
    );
    eprintln!(
        "{name}: {} cases ({cases} asked), {} steps in {:.1?}",
        ran_cases.get(),
        ran_steps.get(),
        started.elapsed()
    );
    let listing = |ts: &[R::Transition]| {
        ts.iter()
            .enumerate()
            .map(|(i, t)| format!("\n  {}. {t:?}", i + 1))
            .collect::<String>()
    };
    if let Err(e) = outcome {
        let kind = match e {
            TestError::Fail(..) => "the model and the system disagree",
            TestError::Abort(..) => "aborted",
        };
        let (first, last) = (first_failure.borrow(), last_failure.borrow());
        match (&*first, &*last) {
            (Some((why0, ts0)), Some((why, ts))) => panic!(
                "{name}: {kind}: {why}\nshortest failing sequence ({} steps):{}\n\n\
                 first failing sequence ({} steps): {why0}{}",
                ts.len(),
                listing(ts),
                ts0.len(),
                listing(ts0)
            ),
            _ => panic!("{name}: {kind}: {e}"),
        }
    }
}
