//! `dlm queue workers`: a running `dlm queue work` is listed (JSON and the
//! table) with the task it runs; SIGTERM removes it at exit, SIGKILL lets
//! it drop out after its TTL; an unknown queue lists none (exit 0).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// `dlm --json queue workers QUEUE`, parsed (one JSON object per line and worker).
fn workers_json(server: &RedisServer, queue: &str) -> Vec<serde_json::Value> {
    let r = run_on(server, &["--json", "queue", "workers", queue]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    json_lines(&r)
}

/// Poll `workers_json` until `ok` accepts it (at most `limit`); the last list.
fn wait_workers(
    server: &RedisServer,
    queue: &str,
    limit: Duration,
    ok: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let start = Instant::now();
    loop {
        let w = workers_json(server, queue);
        if ok(&w) || start.elapsed() > limit {
            return w;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `dlm queue work QUEUE --worker-id ID --lease 600ms -- sh -c SCRIPT`.
fn start_worker(server: &RedisServer, queue: &str, id: &str, script: &str) -> Running {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "--json", "queue", "work", queue])
        .args(["--worker-id", id, "--concurrency", "2", "--lease", "600ms"])
        .args(["--grace", "0s", "--", "sh", "-c", script]);
    start(cmd)
}

#[test]
fn a_running_worker_is_listed_and_leaves_on_exit_or_after_its_ttl() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let none = workers_json(&server, "nothing-here");
    assert!(none.is_empty(), "{none:?}");
    let r = run_on(&server, &["queue", "workers", "nothing-here"]);
    assert_eq!(r.code(), 0);
    assert_eq!(r.stdout.trim(), "no live worker on queue nothing-here");

    let r = run_on(&server, &["queue", "push", "jobs", "t1"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    // The command records its pid, to be killed at the end (a SIGKILLed
    // dlm leaves its commands running).
    let pids = path_in(&dir, "pids");
    let script = format!("echo $$ >> '{}'; exec sleep 30", pids.display());
    let worker = start_worker(&server, "jobs", "cli-1", &script);
    let listed = wait_workers(&server, "jobs", Duration::from_secs(15), |w| {
        w.len() == 1 && w[0]["in_flight"] == serde_json::json!(["t1"])
    });
    assert_eq!(listed.len(), 1, "{listed:?}");
    let w = &listed[0];
    assert_eq!(w["queue"], "jobs");
    assert_eq!(w["id"], "cli-1");
    assert_eq!(w["pid"], worker.pid());
    assert_eq!(
        (&w["busy"], &w["concurrency"]),
        (&1.into(), &2.into()),
        "{w}"
    );
    assert_eq!(
        (&w["processed"], &w["failed"]),
        (&0.into(), &0.into()),
        "{w}"
    );
    assert_eq!(w["ttl_ms"], 600, "a beat every 200 ms, three beats: {w}");
    assert_eq!(w["stopping"], false);
    for field in ["host", "version"] {
        assert!(w[field].as_str().is_some_and(|s| !s.is_empty()), "{w}");
    }
    for field in ["started_ms", "last_beat_ms", "beat_age_ms", "expires_ms"] {
        assert!(w[field].as_u64().is_some(), "{field} in {w}");
    }
    let table = run_on(&server, &["queue", "workers", "jobs"]);
    assert_eq!(table.code(), 0);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", table.stdout);
    assert!(lines[0].starts_with("ID "), "{}", table.stdout);
    assert!(
        lines[1].starts_with("cli-1 ") && lines[1].contains(" 1/2 ") && lines[1].ends_with("t1"),
        "{}",
        table.stdout
    );

    // SIGKILL: no clean exit; the record drops out after its TTL (600 ms).
    let pid = worker.pid().to_string();
    signal(&pid, "KILL");
    let killed = Instant::now();
    let _ = worker.finish(Duration::from_secs(120));
    let left = wait_workers(&server, "jobs", Duration::from_secs(5), <[_]>::is_empty);
    assert!(left.is_empty(), "{left:?}");
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "gone within its TTL: {:?}",
        killed.elapsed()
    );

    // SIGTERM: a clean exit removes the record at once.
    let worker = start_worker(&server, "jobs", "cli-2", &script);
    let listed = wait_workers(&server, "jobs", Duration::from_secs(15), |w| w.len() == 1);
    assert_eq!(listed[0]["id"], "cli-2", "{listed:?}");
    signal(&worker.pid().to_string(), "TERM");
    let r = worker.finish(Duration::from_secs(120));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(workers_json(&server, "jobs").is_empty());

    for pid in std::fs::read_to_string(&pids)?.split_whitespace() {
        signal(pid, "KILL");
    }
    // A bad --worker-id is a usage error.
    let r = run_on(
        &server,
        &["queue", "work", "jobs", "--worker-id", "", "--", "true"],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr);
    Ok(())
}
