//! Redlock through the CLI.
use std::process::Command;
use std::time::{Duration, Instant};

use dlm_testkit::RedisServer;

/// `dlm --redis URL... ARGS`. The per-node deadline is 500 ms (at most a quarter of the
/// shortest TTL here, 2 s), not the default 1% of the TTL (50 to 100 ms here): on a loaded
/// machine a node's answer took longer, the request found no majority and this test failed.
/// What it checks holds whatever the deadline.
fn dlm(nodes: &[RedisServer], args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlm"));
    cmd.env_remove("DLM_REDIS_URL")
        .args(["--timeout", "2s", "--node-timeout", "500ms"]);
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
    // It gives up after --wait (1 s, plus a connect and a node deadline), not hanging on the
    // dead nodes: 30 s is far above what that takes on a loaded machine, far below a hang.
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
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
        // A 2 s per-node timeout, not 1% of the TTL (100 ms): on a loaded machine no node
        // answered in time once, and the acquire found no majority.
        .args(["--node-timeout", "2s", "--timeout", "5s"])
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

/// `dlm` over these nodes with a 60 s `--timeout`: the per-node timeout
/// must come from the TTL, not from the call timeout.
fn dlm_timed(nodes: &[RedisServer], args: &[&str]) -> (i32, String, String, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dlm"));
    cmd.env_remove("DLM_REDIS_URL").args(["--timeout", "60s"]);
    for n in nodes {
        cmd.args(["--redis", &n.url()]);
    }
    let t0 = Instant::now();
    let out = cmd.args(args).output().expect("run dlm");
    let took = t0.elapsed();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        took,
    )
}

/// Frozen nodes (SIGSTOP: they accept connections and never answer) do not
/// cost a short-lived command the call timeout: the nodes connect in
/// parallel, each request is decided by the fastest majority, and the
/// command waits for background requests only as long as is useful.
///
/// The call timeout here is 60 s, so a command that waited for a frozen
/// node would take 60 s; the assertions allow 20 s, a margin no loaded
/// machine eats. How fast it really is (one per-node timeout, 1% of the
/// TTL, plus process start-up) is a measurement, not a test: `dlm bench
/// redlock --frozen N` and BENCHMARKS.md ("A frozen node, CLI") report it.
/// The bound used to be asserted here as 300 ms of wall-clock time, which
/// failed now and then on a loaded 2-core machine. The TTL of the acquires
/// that must succeed is 5 min, so that their per-node timeout is 3 s: with
/// 10 s (100 ms) and then 60 s (600 ms), the healthy nodes did not all answer
/// in time under a heavy load, and the acquire found no majority.
#[test]
fn frozen_nodes_cost_lock_commands_at_most_one_node_timeout() {
    let nodes = RedisServer::start_many(5).expect("5 servers");
    // Far below the 60 s call timeout, far above any real figure.
    let fast = Duration::from_secs(20);
    for frozen in 1..=2 {
        nodes[5 - frozen].pause().expect("SIGSTOP");
        let name = format!("frozen-{frozen}");
        let (code, token, err, took) = dlm_timed(
            &nodes,
            &["lock", "acquire", &name, "--ttl", "5m", "--wait", "0s"],
        );
        assert_eq!(code, 0, "{frozen} frozen: {err}");
        assert!(took < fast, "acquire with {frozen} frozen took {took:?}");
        let healthy = &nodes[..5 - frozen];
        for n in healthy {
            let key = format!("dlm:lock:{{{name}}}");
            assert_eq!(n.command(&["GET", &key]).expect("GET"), token.trim());
        }
        let (code, _, err, took) =
            dlm_timed(&nodes, &["lock", "release", &name, "--token", token.trim()]);
        assert_eq!(code, 0, "{frozen} frozen: {err}");
        assert!(took < fast, "release with {frozen} frozen took {took:?}");
        for n in healthy {
            let key = format!("dlm:lock:{{{name}}}");
            assert_eq!(
                n.command(&["GET", &key]).expect("GET"),
                "",
                "released everywhere it answers"
            );
        }
        let (code, out, err, took) = dlm_timed(&nodes, &["--json", "lock", "status", &name]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("\"held\":false"), "{out}");
        assert!(took < fast, "status with {frozen} frozen took {took:?}");
    }

    // No majority: exit 3 after the wait plus one per-node timeout, not
    // after the 60 s call timeout.
    nodes[2].pause().expect("SIGSTOP");
    for wait in [Duration::ZERO, Duration::from_millis(400)] {
        let w = format!("{}ms", wait.as_millis());
        let (code, _, err, took) = dlm_timed(
            &nodes,
            &[
                "lock",
                "acquire",
                "no-majority",
                "--ttl",
                "10s",
                "--wait",
                &w,
            ],
        );
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("no quorum"), "{err}");
        assert!(took >= wait, "wait {wait:?}: took {took:?}");
        assert!(took < fast, "wait {wait:?}: took {took:?}");
    }
    for n in &nodes[..2] {
        assert_eq!(
            n.command(&["GET", "dlm:lock:{no-majority}"]).expect("GET"),
            "",
            "a failed attempt leaves no key on the healthy nodes"
        );
    }

    // An explicit --node-timeout wins over the TTL's: with a 20 min TTL the
    // TTL's per-node timeout would be 12 s; 20 ms is asked for.
    let (code, _, err, took) = dlm_timed(
        &nodes,
        &[
            "--node-timeout",
            "20ms",
            "lock",
            "acquire",
            "no-majority",
            "--ttl",
            "20m",
        ],
    );
    assert_eq!(code, 3, "{err}");
    assert!(took < Duration::from_secs(6), "took {took:?}");
    for n in &nodes[2..] {
        n.resume().expect("SIGCONT");
    }
}

#[test]
fn bench_redlock_freezes_the_asked_nodes_and_refuses_what_it_cannot_freeze() {
    let out = Command::new(env!("CARGO_BIN_EXE_dlm"))
        .env_remove("DLM_REDIS_URL")
        .args([
            "--json",
            "bench",
            "redlock",
            "--frozen",
            "1",
            "--concurrency",
            "2",
            "--duration",
            "300ms",
            "--warmup",
            "50ms",
        ])
        .output()
        .expect("run dlm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("json");
    assert_eq!(v["nodes"], 5);
    assert_eq!(v["frozen"], 1);
    assert_eq!(v["errors"], 0, "{v}");
    assert!(v["ops"].as_u64().unwrap_or(0) > 0, "{v}");

    let out = Command::new(env!("CARGO_BIN_EXE_dlm"))
        .env_remove("DLM_REDIS_URL")
        .args([
            "bench",
            "redlock",
            "--nodes",
            "3",
            "--frozen",
            "3",
            "--duration",
            "100ms",
        ])
        .output()
        .expect("run dlm");
    assert_eq!(out.status.code(), Some(2), "cannot freeze every node");
}
