//! `dlm queue check Q [--json]` and `dlm check queue --invariants` against a
//! real redis-server: a clean queue exits 0 with its counts, a queue whose
//! Redis state was corrupted by hand exits 1 naming each violation, bad
//! input exits 2 and an unreachable Redis 3.

mod common;

use common::*;

fn q(server: &RedisServer, args: &[&str]) -> Run {
    let mut all = vec!["queue"];
    all.extend_from_slice(args);
    run_on(server, &all)
}

fn one_json(r: &Run) -> serde_json::Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_default()
}

#[test]
fn a_clean_queue_exits_0_and_a_corrupted_one_exits_1() -> TestResult {
    let s = server();
    assert_eq!(q(&s, &["push", "jobs", "a", "b"]).code(), 0);
    assert_eq!(q(&s, &["push", "jobs", "later", "--delay", "1h"]).code(), 0);
    assert_eq!(q(&s, &["push", "jobs", "c", "--group", "g"]).code(), 0);

    let r = q(&s, &["check", "jobs"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
    assert!(
        r.stdout
            .starts_with("queue jobs: 0 violation(s); waiting 3, delayed 1"),
        "{}",
        r.stdout
    );

    let r = run_on(&s, &["queue", "check", "jobs", "--json"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v = one_json(&r);
    assert_eq!(v["queue"], "jobs");
    assert_eq!(v["ok"], true);
    assert_eq!(v["complete"], true);
    assert_eq!(v["violations"], serde_json::json!([]));
    for (state, n) in [
        ("waiting", 3),
        ("delayed", 1),
        ("parked", 0),
        ("in_flight", 0),
        ("blocked", 0),
        ("dead", 0),
        ("done", 0),
    ] {
        assert_eq!(v["counts"][state], n, "{state}: {v}");
    }

    // Corrupted by hand: an error left by no task, a group counted in
    // flight with nothing in flight, an id both waiting and dead.
    s.command(&["HSET", "dlm:queue:{jobs}:errors", "ghost", "x"])?;
    s.command(&["HINCRBY", "dlm:queue:{jobs}:gcount", "g", "1"])?;
    s.command(&["ZADD", "dlm:queue:{jobs}:dead", "1", "a"])?;
    let r = run_on(&s, &["--json", "queue", "check", "jobs"]);
    assert_eq!(r.code(), 1, "{}{}", r.stdout, r.stderr);
    let v = one_json(&r);
    assert_eq!(v["ok"], false);
    assert_eq!(v["complete"], true);
    let found: Vec<(String, String)> = v["violations"]
        .as_array()
        .ok_or("violations is an array")?
        .iter()
        .map(|x| {
            assert!(x["detail"].as_str().is_some_and(|d| !d.is_empty()), "{x}");
            (
                x["invariant"].as_str().unwrap_or_default().to_string(),
                x["id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for want in [
        ("orphan", "ghost"),
        ("group_count", "g"),
        ("one_state", "a"),
    ] {
        assert!(
            found
                .iter()
                .any(|(i, id)| (i.as_str(), id.as_str()) == want),
            "{want:?} in {found:?}"
        );
    }
    assert_eq!(v["counts"]["dead"], 1);

    // Plain text: one line per violation, then the summary.
    let r = q(&s, &["check", "jobs"]);
    assert_eq!(r.code(), 1, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), found.len() + 1, "{}", r.stdout);
    assert!(
        lines.iter().any(|l| l.starts_with("orphan \"ghost\": ")),
        "{}",
        r.stdout
    );
    assert!(
        lines[lines.len() - 1].starts_with(&format!("queue jobs: {} violation(s)", found.len())),
        "{}",
        r.stdout
    );

    // A bound smaller than a key: checked in part, said so.
    let r = run_on(&s, &["--json", "queue", "check", "jobs", "--max-ids", "1"]);
    assert_eq!(one_json(&r)["complete"], false, "{}", r.stdout);
    Ok(())
}

#[test]
fn bad_input_exits_2_and_an_unreachable_redis_3() {
    let s = server();
    for args in [
        &["check", "jobs", "--max-ids", "0"][..],
        &["check"][..],
        &["check", ""][..],
    ] {
        let r = q(&s, args);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.stderr);
    }
    let r = run(&[
        "--redis",
        "redis://127.0.0.1:1",
        "--timeout",
        "300ms",
        "queue",
        "check",
        "jobs",
    ]);
    assert_eq!(r.code(), 3, "{}", r.stderr);
}

#[test]
fn check_queue_with_invariants_checks_the_state_its_workload_left() {
    let s = server();
    let r = run_on(
        &s,
        &[
            "--json",
            "check",
            "queue",
            "--tasks",
            "200",
            "--workers",
            "2",
            "--invariants",
        ],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    let v = one_json(&r);
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["invariants"]["ok"], true, "{v}");
    assert_eq!(v["invariants"]["complete"], true, "{v}");
    assert_eq!(v["invariants"]["counts"]["waiting"], 0, "{v}");
    // Without the flag, no invariants field.
    let r = run_on(&s, &["--json", "check", "queue", "--tasks", "20"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(one_json(&r).get("invariants").is_none(), "{}", r.stdout);
}
