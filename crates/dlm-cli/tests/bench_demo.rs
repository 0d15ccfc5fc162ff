//! Smoke tests of `dlm bench lock` (embedded default server) and `dlm demo lock`.

mod common;

use std::time::Duration;

use common::*;

const COMMON_FIELDS: [&str; 12] = [
    "impl",
    "mode",
    "concurrency",
    "ops",
    "secs",
    "ops_per_s",
    "p50_us",
    "p99_us",
    "attempts",
    "failed_attempts",
    "errors",
    "violations",
];
const CONTENDED_FIELDS: [&str; 4] = [
    "handoff_p50_us",
    "handoff_p99_us",
    "min_ops_per_worker",
    "max_ops_per_worker",
];

fn bench(mode: &str) -> Result<serde_json::Value, Box<dyn std::error::Error + Send + Sync>> {
    // No --redis and no DLM_REDIS_URL (dlm() removes it): a private server.
    let r = run(&[
        "--json",
        "bench",
        "lock",
        "--mode",
        mode,
        "--concurrency",
        "4",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    for f in COMMON_FIELDS {
        assert!(v.get(f).is_some(), "{mode}: no {f} in {v}");
    }
    assert_eq!(v["impl"], "dlm");
    assert_eq!(v["mode"], mode);
    assert_eq!(v["concurrency"], 4);
    assert!(v["ops"].as_u64().ok_or("ops")? > 0, "{v}");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    Ok(v)
}

#[test]
fn bench_distinct_on_a_private_server() -> TestResult {
    let v = bench("distinct")?;
    for f in CONTENDED_FIELDS {
        assert!(v.get(f).is_none(), "{f} in distinct mode: {v}");
    }
    Ok(())
}

#[test]
fn bench_contended_on_a_private_server() -> TestResult {
    let v = bench("contended")?;
    for f in CONTENDED_FIELDS {
        assert!(v.get(f).is_some(), "no {f} in {v}");
    }
    assert!(
        v["min_ops_per_worker"].as_u64().ok_or("min")?
            <= v["max_ops_per_worker"].as_u64().ok_or("max")?
    );
    Ok(())
}

#[test]
fn an_empty_dlm_redis_url_counts_as_unset() -> TestResult {
    let mut cmd = dlm();
    cmd.env("DLM_REDIS_URL", "").args([
        "--json",
        "bench",
        "lock",
        "--concurrency",
        "1",
        "--duration",
        "1s",
        "--warmup",
        "0s",
    ]);
    let r = start(cmd).finish(Duration::from_secs(30));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    // (1 s, not less: on a loaded machine the first acquire alone once took
    // 100 ms and a 100 ms run counted nothing.)
    assert!(v["ops"].as_u64().ok_or("ops")? > 0, "{v}");
    Ok(())
}

#[test]
fn bench_uses_the_given_redis() -> TestResult {
    let server = server();
    let r = run_on(
        &server,
        &[
            "bench",
            "lock",
            "--mode",
            "distinct",
            "--concurrency",
            "2",
            "--duration",
            "300ms",
            "--warmup",
            "0s",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("redis-server ") && !l.contains("version unknown")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains(&server.url()), "{}", r.stdout);
    // It really ran there: the fencing counters of its random keys are left behind.
    let keys = server.command(&["DBSIZE"])?;
    assert_ne!(keys, ":0");
    Ok(())
}

#[test]
fn demo_lock_is_exact_with_the_lock() -> TestResult {
    let mut cmd = dlm();
    cmd.args(["--json", "demo", "lock"]);
    let r = start(cmd).finish(Duration::from_secs(60));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let parts: Vec<serde_json::Value> = r
        .stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(parts.len(), 3, "{}", r.stdout);
    for p in &parts {
        if p["locked"] == true {
            assert_eq!(p["got"], p["expected"], "{p}");
            assert_eq!(p["lost_updates"], 0, "{p}");
        }
    }
    assert_eq!(parts[1]["expected"], 1600);
    assert_eq!(parts[2]["expected"], 20);
    Ok(())
}
