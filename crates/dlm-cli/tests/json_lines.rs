//! The `--json` convention (issue 33): every command prints one JSON object
//! per line on stdout, lists included (JSON lines, never one array), and
//! nothing else. Each command runs here with `--json` against state that
//! gives its lists several entries (two live workers, two dead tasks, two
//! schedules, ...), and every stdout line must parse as one JSON object.
//! (The debug binary also asserts it in `output::emit`.) Not run here: the
//! long ones (`soak`, `bench curves`, `bench lock`, `demo lock|seckill`,
//! which print through the same `output::emit`), and `completions` and
//! `man`, whose output is a script or a page whatever `--json` says.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// `dlm --json ARGS...`: each stdout line parsed as one JSON object; the
/// lines (fails the test on any other line or on an exit code outside `ok`).
fn objects(server: &RedisServer, args: &[&str], ok: &[i32]) -> Vec<serde_json::Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let r = run_on(server, &all);
    assert!(
        ok.contains(&r.code()),
        "dlm {}: exit {}\nstdout: {}\nstderr: {}",
        all.join(" "),
        r.code(),
        r.stdout,
        r.stderr
    );
    r.stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("dlm {}: a line that is no JSON: {l:?}: {e}", all.join(" "))
            });
            assert!(
                v.is_object(),
                "dlm {}: a line that is no JSON object: {l}",
                all.join(" ")
            );
            v
        })
        .collect()
}

/// `dlm queue work QUEUE --worker-id ID -- sh -c 'exec sleep 30'`.
fn start_worker(server: &RedisServer, queue: &str, id: &str) -> Running {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "--json", "queue", "work", queue])
        .args(["--worker-id", id, "--lease", "600ms", "--grace", "0s"])
        .args(["--", "sh", "-c", "exec sleep 30"]);
    start(cmd)
}

#[test]
fn every_command_prints_one_json_object_per_line() -> TestResult {
    let server = server();
    let s = &server;

    // Locks and their kin.
    let acquired = objects(s, &["lock", "acquire", "l1", "--ttl", "30s"], &[0]);
    assert_eq!(acquired.len(), 1);
    let token = acquired[0]["token"]
        .to_string()
        .trim_matches('"')
        .to_string();
    objects(s, &["lock", "status", "l1"], &[0]);
    objects(
        s,
        &["lock", "extend", "l1", "--token", &token, "--ttl", "30s"],
        &[0],
    );
    objects(s, &["lock", "release", "l1", "--token", &token], &[0]);
    objects(s, &["lock", "run", "l2", "--ttl", "5s", "--", "true"], &[0]);
    objects(s, &["semaphore", "set", "pool", "--permits", "3"], &[0]);
    objects(s, &["semaphore", "status", "pool"], &[0]);
    objects(
        s,
        &[
            "semaphore",
            "run",
            "pool",
            "--permits",
            "3",
            "--ttl",
            "5s",
            "--",
            "true",
        ],
        &[0],
    );
    objects(
        s,
        &[
            "rwlock", "run", "doc", "--read", "--ttl", "5s", "--", "true",
        ],
        &[0],
    );
    objects(s, &["rwlock", "status", "doc"], &[0]);
    objects(s, &["elect", "status", "leader"], &[0, 1]);
    let ids = objects(s, &["id", "next", "orders", "--count", "3"], &[0]);
    assert_eq!(ids.len(), 3, "one line per id: {ids:?}");

    // A queue with something in every list.
    let pushed = objects(s, &["queue", "push", "q", "a", "b", "c", "d"], &[0]);
    assert_eq!(pushed.len(), 4, "{pushed:?}");
    assert_eq!(
        objects(s, &["queue", "peek", "q", "--count", "10"], &[0]).len(),
        4
    );
    assert_eq!(
        objects(s, &["queue", "pop", "q", "--count", "1"], &[0]).len(),
        1
    );
    objects(s, &["queue", "stats", "q"], &[0]);
    objects(s, &["queue", "task", "q", "b"], &[0]);
    objects(s, &["queue", "config", "q"], &[0]);
    objects(
        s,
        &["queue", "schedule", "q", "hourly", "--every", "1h"],
        &[0],
    );
    objects(
        s,
        &["queue", "schedule", "q", "daily", "--cron", "0 9 * * *"],
        &[0],
    );
    assert_eq!(objects(s, &["queue", "schedules", "q"], &[0]).len(), 2);
    objects(s, &["queue", "unschedule", "q", "daily"], &[0]);
    objects(s, &["queue", "pause", "q"], &[0]);
    objects(s, &["queue", "resume", "q"], &[0]);

    // Two dead tasks, one result.
    objects(s, &["queue", "push", "f", "x", "y"], &[0]);
    objects(
        s,
        &[
            "queue",
            "work",
            "f",
            "--exit-when-empty",
            "--max-attempts",
            "1",
            "--",
            "false",
        ],
        &[0],
    );
    assert_eq!(objects(s, &["queue", "dead", "f"], &[0]).len(), 2);
    objects(s, &["queue", "push", "r", "t"], &[0]);
    objects(
        s,
        &[
            "queue",
            "work",
            "r",
            "--exit-when-empty",
            "--",
            "echo",
            "out",
        ],
        &[0],
    );
    objects(s, &["queue", "result", "r", "t"], &[0]);
    objects(s, &["queue", "progress", "r", "t"], &[0, 1]);
    objects(s, &["queue", "events", "f"], &[0]);
    objects(s, &["queue", "check", "f"], &[0]);
    objects(s, &["queue", "retry", "f", "--all"], &[0]);
    objects(s, &["queue", "purge", "f", "--dead"], &[0]);

    // Two live workers: `queue workers` printed one array before issue 33.
    assert!(objects(s, &["queue", "workers", "w"], &[0]).is_empty());
    objects(s, &["queue", "push", "w", "w1", "w2"], &[0]);
    let w1 = start_worker(s, "w", "worker-1");
    let w2 = start_worker(s, "w", "worker-2");
    let started = Instant::now();
    let listed = loop {
        let l = objects(s, &["queue", "workers", "w"], &[0]);
        if l.len() == 2 || started.elapsed() > Duration::from_secs(15) {
            break l;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(listed.len(), 2, "one line per worker: {listed:?}");
    let mut names: Vec<&str> = listed.iter().filter_map(|w| w["id"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["worker-1", "worker-2"]);
    for w in &listed {
        for field in [
            "queue",
            "id",
            "host",
            "pid",
            "started_ms",
            "concurrency",
            "busy",
            "in_flight",
            "processed",
            "failed",
            "last_beat_ms",
            "beat_age_ms",
            "expires_ms",
            "ttl_ms",
            "stopping",
            "version",
        ] {
            assert!(w.get(field).is_some(), "{field} missing from {w}");
        }
    }
    for w in [w1, w2] {
        signal(&w.pid().to_string(), "TERM");
        let r = w.finish(Duration::from_secs(15));
        for l in r.stdout.lines() {
            assert!(
                serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v.is_object()),
                "{l}"
            );
        }
    }

    // The workloads: one line per report or phase.
    objects(s, &["check", "lock", "--duration", "1s"], &[0]);
    objects(s, &["check", "queue", "--tasks", "50"], &[0]);
    assert!(objects(s, &["bench", "ids", "--duration", "300ms"], &[0]).len() > 1);
    assert!(objects(s, &["bench", "queue", "--tasks", "200"], &[0]).len() > 1);
    assert!(objects(s, &["demo", "dispatch", "--tasks", "5"], &[0]).len() > 1);

    // `dlm serve --json` announces itself with one object, not a sentence.
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &s.url(),
        "--json",
        "serve",
        "--listen",
        "127.0.0.1:0",
    ]);
    let serve = start(cmd);
    std::thread::sleep(Duration::from_secs(2));
    signal(&serve.pid().to_string(), "TERM");
    let r = serve.finish(Duration::from_secs(15));
    let first = r.stdout.lines().next().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(first)
        .unwrap_or_else(|e| panic!("serve --json: {first:?}: {e}; {}", r.stderr));
    assert!(
        v["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:")),
        "{v}"
    );
    assert!(v.get("redis").is_some() && v.get("access").is_some(), "{v}");
    Ok(())
}
