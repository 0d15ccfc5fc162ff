//! `dlm lock acquire | release | extend | status` against a real Redis.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn acquire_keeps_the_lock_after_exit_and_release_needs_the_token() -> TestResult {
    let server = server();

    // Plain acquire prints just the token; the key outlives the process.
    let r = run_on(&server, &["lock", "acquire", "deploy", "--ttl", "30s"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let token = r.stdout.trim().to_string();
    assert_eq!(token.len(), 32, "{token:?}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.command(&["GET", &key("deploy")])?, token);

    // Status sees it held, with a TTL and a fence.
    let st = status_json(&server, "deploy");
    assert_eq!(st["name"], "deploy");
    assert_eq!(st["key"], key("deploy"));
    assert_eq!(st["held"], true);
    let ttl = st["ttl_ms"].as_u64().ok_or("ttl_ms")?;
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert!(above_floor(&st["fence"]), "{st}");
    let plain = run_on(&server, &["lock", "status", "deploy"]);
    assert_eq!(plain.code(), 0);
    assert!(plain.stdout.contains("held"), "{}", plain.stdout);

    // Held: a second acquire is a "no", also when waiting a little.
    let r = run_on(
        &server,
        &[
            "lock", "acquire", "deploy", "--ttl", "1s", "--wait", "200ms",
        ],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(5), "{:?}", r.elapsed);
    assert!(r.stdout.is_empty());
    assert!(r.stderr.starts_with("dlm: "), "{}", r.stderr);

    // Wrong token: extend and release refuse, the owner's key is untouched.
    let wrong = "0123456789abcdef0123456789abcdef";
    let pttl_before: i64 = server
        .command(&["PTTL", &key("deploy")])?
        .trim_start_matches(':')
        .parse()?;
    let r = run_on(
        &server,
        &["lock", "extend", "deploy", "--token", wrong, "--ttl", "10m"],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr);
    let r = run_on(
        &server,
        &[
            "--json", "lock", "extend", "deploy", "--token", wrong, "--ttl", "10m",
        ],
    );
    assert_eq!(r.code(), 1);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(v["extended"], false);
    assert_eq!(v["reason"], "not_held");
    let pttl_after: i64 = server
        .command(&["PTTL", &key("deploy")])?
        .trim_start_matches(':')
        .parse()?;
    assert!(
        pttl_after <= pttl_before && pttl_after > 0,
        "{pttl_before} -> {pttl_after}"
    );
    assert_eq!(server.command(&["GET", &key("deploy")])?, token);

    let r = run_on(&server, &["lock", "release", "deploy", "--token", wrong]);
    assert_eq!(r.code(), 1, "{}", r.stderr);
    assert_eq!(server.command(&["GET", &key("deploy")])?, token);

    // The right token extends and releases; a second release is a "no".
    let r = run_on(
        &server,
        &[
            "--json", "lock", "extend", "deploy", "--token", &token, "--ttl", "1m",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(v["extended"], true);
    assert_eq!(v["ttl_ms"], 60_000);
    let r = run_on(
        &server,
        &["--json", "lock", "release", "deploy", "--token", &token],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(v["released"], true);
    assert_eq!(server.command(&["EXISTS", &key("deploy")])?, ":0");
    let r = run_on(
        &server,
        &["--json", "lock", "release", "deploy", "--token", &token],
    );
    assert_eq!(r.code(), 1);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(v["released"], false);
    assert_eq!(v["reason"], "expired");

    let st = status_json(&server, "deploy");
    assert_eq!(st["held"], false);
    assert!(st["ttl_ms"].is_null());
    assert!(above_floor(&st["fence"]), "{st}");
    Ok(())
}

#[test]
fn acquire_json_has_the_fields_and_raw_key_uses_the_name() -> TestResult {
    let server = server();
    let r = run_on(
        &server,
        &["--json", "lock", "acquire", "report", "--ttl", "10s"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(v["name"], "report");
    assert_eq!(v["key"], key("report"));
    assert!(above_floor(&v["fence"]), "{v}");
    assert_eq!(v["ttl_ms"], 10_000);
    let token = v["token"].as_str().ok_or("token")?;
    assert_eq!(server.command(&["GET", &key("report")])?, token);

    // A raw key is exactly the name; global flags also work after the subcommand.
    let r = run_on(
        &server,
        &[
            "lock",
            "acquire",
            "plain-key",
            "--ttl",
            "10s",
            "--raw-key",
            "--json",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(v["key"], "plain-key");
    assert_eq!(
        server.command(&["GET", "plain-key"])?,
        v["token"].as_str().ok_or("token")?
    );

    // Never held: free, no TTL. Its fence is its counter's last one, and on
    // one Redis every lock shares the counter: the one `report` took.
    let st = status_json(&server, "never");
    assert_eq!(st["held"], false);
    assert!(st["ttl_ms"].is_null());
    assert!(above_floor(&st["fence"]), "{st}");
    Ok(())
}

/// Every fence is above 2^48 (`dlm::keys::FENCE_FLOOR`).
fn above_floor(fence: &serde_json::Value) -> bool {
    fence.as_u64().is_some_and(|f| f > 1 << 48)
}
