//! Properties of what users type: `Client::builder().connect` answers any
//! string, garbage or a URL of nothing, with a typed error, quickly, and
//! never panics. (The pure properties live next to their code, as unit
//! tests: keys, tokens, durations, scores and every script-reply decoder.)

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Strings that are no reachable Redis: random text, URL-shaped garbage, and
/// well-formed URLs of closed ports, bad databases and bad options. No
/// host name needing DNS and no default port is generated, so nothing
/// leaves the machine and no real Redis is reached.
fn arb_url() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        // No letters, digits, dots or brackets: no host name, no IP address.
        "(redis|rediss|unix|redis\\+unix|http)://[ -,/:;<-@^`{-~]{0,24}",
        "redis://127\\.0\\.0\\.1:(0|1|99999|-1|x)(/[0-9a-z]{0,3})?",
        "redis://:[^@/]{0,8}@127\\.0\\.0\\.1:1/(0|15|99|x)",
        "redis://127\\.0\\.0\\.1:1/0\\?[ -~]{0,16}",
        "unix:///nonexistent/[a-z\\x00]{0,8}",
    ]
}

#[test]
fn connect_answers_any_string_with_a_typed_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut runner = TestRunner::new(Config {
        cases: 16,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&arb_url(), |url| {
        let out = rt.block_on(async {
            let connect = dlm::Client::builder()
                .timeout(Duration::from_millis(100))
                .connect(&url);
            tokio::time::timeout(Duration::from_secs(5), connect).await
        });
        match out {
            Err(_) => prop_assert!(false, "{url:?}: no answer within 5 s"),
            Ok(Ok(_)) => prop_assert!(false, "{url:?}: connected to something"),
            Ok(Err(e)) => prop_assert!(
                matches!(
                    e,
                    dlm::Error::InvalidArgument { .. }
                        | dlm::Error::Unavailable { .. }
                        | dlm::Error::Backend { .. }
                        | dlm::Error::Timeout(_)
                ),
                "{url:?}: {e}"
            ),
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
