//! Test support for the property tests and the fuzzing of the primitives:
//! arbitrary durations and Redis replies, and a runner that feeds replies to
//! a primitive's script-reply decoders. Every decoder must answer any reply
//! with a value or a typed error, never a panic (see RELIABILITY-fuzz.md).
//!
//! Each primitive runs its decoders twice ([`decoder_tests`]): a quick pass
//! in every `cargo test` ([`CI_CASES`]) and an ignored `fuzz_*` test with
//! [`fuzz_cases`] (100 000 by default, `DLM_FUZZ_CASES` to change) for
//! `cargo test --release -p dlm --lib -- --ignored fuzz`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redis::Value;
use std::time::Duration;

/// Replies per decoder in the quick pass that runs with every `cargo test`.
pub(crate) const CI_CASES: u32 = 512;

/// Replies per decoder in the long, ignored run: `DLM_FUZZ_CASES`, else 100 000.
pub(crate) fn fuzz_cases() -> u32 {
    std::env::var("DLM_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

/// A named decoder: takes a script's reply, says whether it decoded (the
/// answer only feeds statistics; what matters is that it returns).
pub(crate) type Decoder = (&'static str, fn(Value) -> bool);

/// Durations from zero to `Duration::MAX`: whole milliseconds up to a few
/// days past the limits, any seconds and nanoseconds, and both extremes.
pub(crate) fn arb_duration(max_millis: u64) -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0..=max_millis).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::MAX),
        Just(Duration::ZERO),
    ]
}

/// Integers where decoders branch or convert: codes, signs, widths, 2^53.
fn arb_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => -3i64..4,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(1i64 << 53),
        1 => Just(i64::from(u32::MAX) + 1),
        2 => any::<i64>(),
    ]
}

/// Bulk strings: random bytes, decimal numbers (some out of range), UTF-8 text.
fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => proptest::collection::vec(any::<u8>(), 0..24),
        2 => arb_int().prop_map(|i| i.to_string().into_bytes()),
        1 => Just(b"18446744073709551616".to_vec()),
        1 => Just(b"1.5".to_vec()),
        1 => any::<String>().prop_map(String::into_bytes),
    ]
}

/// Any reply a RESP2 or RESP3 server could send, nested up to four levels;
/// more than half of them are integers, strings, nils and flat arrays of
/// them (the shapes the scripts return), so decoders get past their first
/// checks.
pub(crate) fn arb_reply() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        1 => Just(Value::Nil),
        3 => arb_int().prop_map(Value::Int),
        2 => arb_bytes().prop_map(Value::BulkString),
    ];
    let flat = proptest::collection::vec(scalar.clone(), 0..18).prop_map(Value::Array);
    let leaf = prop_oneof![
        2 => Just(Value::Nil),
        4 => arb_int().prop_map(Value::Int),
        4 => arb_bytes().prop_map(Value::BulkString),
        1 => "[ -~]{0,12}".prop_map(Value::SimpleString),
        1 => Just(Value::Okay),
        1 => any::<f64>().prop_map(Value::Double),
        1 => any::<bool>().prop_map(Value::Boolean),
    ];
    let nested = leaf.prop_recursive(4, 96, 16, |inner| {
        prop_oneof![
            6 => proptest::collection::vec(inner.clone(), 0..16).prop_map(Value::Array),
            1 => proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Set),
            1 => proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Value::Map),
        ]
    });
    prop_oneof![3 => flat, 1 => scalar, 3 => nested]
}

/// Feed `cases` arbitrary replies to every decoder; panics (failing the test,
/// with the shrunk reply) if one of them panics.
pub(crate) fn run(cases: u32, decoders: &[Decoder]) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let decoded: Vec<std::cell::Cell<u32>> = decoders.iter().map(|_| Default::default()).collect();
    let result = runner.run(&arb_reply(), |reply| {
        for ((_, decode), n) in decoders.iter().zip(&decoded) {
            if decode(reply.clone()) {
                n.set(n.get() + 1);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("a reply decoder panicked: {e}");
    }
    for ((name, _), n) in decoders.iter().zip(&decoded) {
        eprintln!("{name}: {cases} replies, {} decoded", n.get());
    }
}

/// The two tests of a primitive's reply decoders: the quick pass named
/// `reply_decoders_never_panic` and the ignored long run named `$fuzz`.
macro_rules! decoder_tests {
    ($fuzz:ident, $decoders:expr) => {
        #[test]
        fn reply_decoders_never_panic() {
            $crate::services::props::run($crate::services::props::CI_CASES, $decoders);
        }

        #[test]
        #[ignore = "long: cargo test --release -p dlm --lib -- --ignored fuzz"]
        fn $fuzz() {
            $crate::services::props::run($crate::services::props::fuzz_cases(), $decoders);
        }
    };
}
pub(crate) use decoder_tests;
