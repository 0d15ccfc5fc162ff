//! `dlm check lock` and `dlm check queue` against a real Redis: a clean run
//! exits 0 with its figures, a broken lock or queue is caught (exit 1, with
//! the evidence), an unreachable Redis exits 3, and the check leaves no keys.

mod common;

use std::time::Duration;

use common::*;

fn check(server: &RedisServer, args: &[&str]) -> Run {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "--json", "check"])
        .args(args);
    start(cmd).finish(Duration::from_secs(60))
}

fn json(r: &Run) -> serde_json::Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_default()
}

#[test]
fn a_clean_lock_check_passes_and_a_broken_lock_is_caught() {
    let s = server();
    let r = check(
        &s,
        &[
            "lock",
            "--clients",
            "4",
            "--duration",
            "1500ms",
            "--ttl",
            "500ms",
        ],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    let v = json(&r);
    assert!(v["acquisitions"].as_u64().unwrap_or(0) > 5, "{v}");
    assert_eq!(v["overlaps"], 0, "{v}");
    assert_eq!(v["violations"], 0, "{v}");
    for field in [
        "operations",
        "stale_writes_accepted",
        "stale_writes_rejected",
        "errors",
    ] {
        assert!(v[field].is_u64(), "{field} in {v}");
    }

    let r = check(
        &s,
        &[
            "lock",
            "--clients",
            "4",
            "--duration",
            "1500ms",
            "--ttl",
            "500ms",
            "--break-lock",
        ],
    );
    assert_eq!(r.code(), 1, "{}{}", r.stdout, r.stderr);
    let v = json(&r);
    assert!(v["overlaps"].as_u64().unwrap_or(0) > 0, "{v}");
    assert!(
        r.stderr.contains("overlap: client"),
        "the evidence: {}",
        r.stderr
    );
    assert_eq!(
        s.command(&["DBSIZE"]).unwrap_or_default(),
        ":0",
        "no keys left"
    );
}

#[test]
fn a_clean_queue_check_passes_and_lost_tasks_are_caught() {
    let s = server();
    let r = check(&s, &["queue", "--tasks", "500", "--workers", "3"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    let v = json(&r);
    assert_eq!(
        (v["tasks"].as_u64(), v["lost"].as_u64()),
        (Some(500), Some(0)),
        "{v}"
    );
    assert!(v["duplicates"].is_u64() && v["violations"] == 0, "{v}");

    let r = check(&s, &["queue", "--tasks", "500", "--break-queue"]);
    assert_eq!(r.code(), 1, "{}{}", r.stdout, r.stderr);
    assert!(json(&r)["lost"].as_u64().unwrap_or(0) > 0, "{}", r.stdout);
    assert!(
        r.stderr.contains("lost: task"),
        "the evidence: {}",
        r.stderr
    );
    assert_eq!(
        s.command(&["DBSIZE"]).unwrap_or_default(),
        ":0",
        "no keys left"
    );
}

#[test]
fn an_unreachable_redis_exits_3() {
    let r = run(&[
        "--redis",
        "redis://127.0.0.1:1",
        "--timeout",
        "300ms",
        "check",
        "lock",
    ]);
    assert_eq!(r.code(), 3, "{}", r.stderr);
    let r = run(&[
        "--redis",
        "redis://127.0.0.1:1",
        "--timeout",
        "300ms",
        "check",
        "queue",
    ]);
    assert_eq!(r.code(), 3, "{}", r.stderr);
}
