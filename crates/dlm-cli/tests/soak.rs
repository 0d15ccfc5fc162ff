//! `dlm soak`: a very short soak passes with its JSON summary; one that
//! breaks persistence on purpose catches it and names it; bad usage exits 2.

mod common;

use std::time::Duration;

use common::*;

fn soak(args: &[&str]) -> (Run, serde_json::Value) {
    let mut cmd = dlm();
    cmd.args(["--threads", "2", "--json", "soak"]).args(args);
    let r = start(cmd).finish(Duration::from_secs(240));
    let v = serde_json::from_str(r.stdout.trim()).unwrap_or_default();
    (r, v)
}

#[test]
fn a_short_soak_passes_with_its_summary() {
    let (r, v) = soak(&[
        "--duration",
        "20s",
        "--epoch",
        "4s",
        "--check-every",
        "8s",
        "--fault-every",
        "1s",
        "--seed",
        "7",
        // The Cluster and Sentinel take their turn in scripts/test.sh's soak.
        "--standalone-only",
    ]);
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(v["check"], "soak");
    assert_eq!(v["seed"], 7);
    assert!(v["duration_s"].as_f64().is_some_and(|d| d >= 20.0), "{v}");
    for kind in ["mutex", "fair", "rwlock", "semaphore", "election", "queue"] {
        assert!(
            v["operations"][kind].as_u64().is_some_and(|n| n > 0),
            "no {kind}: {v}"
        );
    }
    for client in ["library-url", "library-connection", "cli"] {
        assert!(
            v["operations_by_client"][client]
                .as_u64()
                .is_some_and(|n| n > 0),
            "no {client}: {v}"
        );
    }
    let faults: u64 = v["faults"]
        .as_object()
        .map(|m| m.values().filter_map(serde_json::Value::as_u64).sum())
        .unwrap_or(0);
    assert!(faults > 0, "{v}");
    assert!(v["checks"].as_u64().is_some_and(|n| n >= 2), "{v}");
    let violations = v["violations"].as_object().cloned().unwrap_or_default();
    assert!(violations.len() >= 2, "both checkers ran: {v}");
    assert!(violations.values().all(|n| n == 0), "{v}");
    assert_eq!(v["broken_assumptions"], serde_json::json!([]));
    assert_eq!(v["ok"], true);
}

#[test]
fn a_soak_without_persistence_catches_and_names_it() {
    let (r, v) = soak(&[
        "--duration",
        "20s",
        "--epoch",
        "4s",
        "--check-every",
        "8s",
        "--fault-every",
        "1s",
        "--break",
        "no-persistence",
    ]);
    assert_eq!(r.code(), 0, "{}\n{}", r.stdout, r.stderr);
    let broken = &v["broken_assumptions"][0];
    assert_eq!(broken["name"], "no-persistence", "{v}");
    assert!(broken["injected"].as_u64().is_some_and(|n| n > 0), "{v}");
    assert_eq!(broken["caught"], true, "{v}");
    assert!(
        v["expected_violations"]["no-persistence"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{v}"
    );
    assert!(
        v["examples"]
            .as_array()
            .is_some_and(|e| e.iter().any(|x| x["expected"] == "no-persistence")),
        "{v}"
    );
}

#[test]
fn bad_usage_exits_2() {
    let (r, _) = soak(&["--duration", "10s", "--epoch", "1s"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
    let (r, _) = soak(&["--break", "everything"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
}
