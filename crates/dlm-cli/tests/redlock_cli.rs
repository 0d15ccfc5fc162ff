//! Redlock through the CLI.
use std::process::Command;
use std::time::{Duration, Instant};

use dlm_testkit::RedisServer;

fn dlm(nodes: &[RedisServer], args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlm"));
    cmd.env_remove("DLM_REDIS_URL").args(["--timeout", "500ms"]);
    for n in nodes {
        cmd.args(["--redis", &n.url()]);
    }
    let out = cmd.args(args).output().expect("run dlm");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn several_redis_urls_make_a_redlock_with_the_same_contract() {
    let mut nodes = RedisServer::start_many(3).expect("3 servers");
    let (code, out, err) = dlm(
        &nodes,
        &["--json", "lock", "acquire", "job", "--ttl", "10s"],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert!(v["fence"].is_null(), "Redlock hands out no fence: {v}");
    let token = v["token"].as_str().expect("token").to_string();
    // Acquire returns on the first majority; the CLI lets the requests to
    // the other nodes land before it exits.
    for n in &nodes {
        assert_eq!(n.command(&["GET", "dlm:lock:{job}"]).expect("GET"), token);
    }
    let (code, out, _) = dlm(&nodes, &["--json", "lock", "status", "job"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"held\":true"), "{out}");
    let (code, _, _) = dlm(&nodes, &["lock", "acquire", "job", "--ttl", "10s"]);
    assert_eq!(code, 1, "held by the first acquire");
    let (code, _, err) = dlm(&nodes, &["lock", "release", "job", "--token", &token]);
    assert_eq!(code, 0, "{err}");

    let (code, out, err) = dlm(
        &nodes,
        &[
            "lock",
            "run",
            "job",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            "echo ${DLM_FENCE:-nofence}",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "nofence");

    nodes[0].kill();
    let (code, _, err) = dlm(&nodes, &["lock", "acquire", "one-down", "--ttl", "5s"]);
    assert_eq!(code, 0, "a majority is enough: {err}");
    nodes[1].kill();
    let t0 = Instant::now();
    let (code, _, err) = dlm(
        &nodes,
        &["lock", "acquire", "two-down", "--ttl", "5s", "--wait", "1s"],
    );
    assert_eq!(code, 3, "no quorum: {err}");
    assert!(err.contains("no quorum"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn bench_runs_a_redlock_over_private_nodes() {
    let out = Command::new(env!("CARGO_BIN_EXE_dlm"))
        .env_remove("DLM_REDIS_URL")
        .args([
            "--json",
            "bench",
            "lock",
            "--nodes",
            "3",
            "--concurrency",
            "2",
            "--duration",
            "500ms",
            "--warmup",
            "100ms",
        ])
        .output()
        .expect("run dlm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["nodes"], 3);
    assert!(v["ops"].as_u64().unwrap_or(0) > 0, "{v}");
    assert_eq!(v["violations"], 0);
}

#[test]
fn bench_redlock_defaults_to_five_nodes_and_the_baseline_adds_a_raw_line() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_dlm"))
            .env_remove("DLM_REDIS_URL")
            .args(args)
            .output()
            .expect("run dlm");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json line"))
            .collect::<Vec<_>>()
    };
    let short = [
        "--concurrency",
        "2",
        "--duration",
        "300ms",
        "--warmup",
        "100ms",
    ];
    let mut args = vec!["--json", "bench", "redlock"];
    args.extend(short);
    let lines = run(&args);
    assert_eq!(lines[0]["nodes"], 5);
    let mut args = vec!["--json", "bench", "lock", "--baseline"];
    args.extend(short);
    let lines = run(&args);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["impl"], "dlm");
    assert_eq!(lines[1]["impl"], "redis-rs-raw");
    assert!(lines[1]["ops"].as_u64().unwrap_or(0) > 0);
}

#[test]
fn dlm_redis_url_with_commas_is_a_redlock_too() {
    let nodes = RedisServer::start_many(3).expect("3 servers");
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let out = Command::new(env!("CARGO_BIN_EXE_dlm"))
        .env("DLM_REDIS_URL", urls.join(","))
        .args(["--json", "lock", "acquire", "env-job", "--ttl", "10s"])
        .output()
        .expect("run dlm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["fence"].is_null(), "Redlock: {v}");
    for n in &nodes {
        assert_eq!(
            n.command(&["GET", "dlm:lock:{env-job}"]).expect("GET"),
            v["token"].as_str().expect("token")
        );
    }
}
