//! Issue 24 at the command line: `queue work`'s command leaves its stdout
//! as the task's result (`queue result`), reports progress from inside
//! (`queue progress` with the environment the worker gives it), and is
//! stopped at its time limit (`--task-timeout`).

mod common;

use std::time::{Duration, Instant};

use common::*;

/// `dlm --redis URL --json queue work QUEUE OPTS... -- sh -c SCRIPT`, started,
/// with `$DLM` the dlm binary for the script.
fn start_worker(server: &RedisServer, queue: &str, opts: &[&str], script: &str) -> Running {
    let mut cmd = dlm();
    cmd.env("DLM", DLM)
        .args(["--redis", &server.url(), "--json", "queue", "work", queue])
        .args(opts)
        .args(["--", "sh", "-c", script]);
    start(cmd)
}

fn summary(r: &Run) -> serde_json::Value {
    json_lines(r).pop().expect("a summary line")
}

fn dead_errors(server: &RedisServer, queue: &str) -> Vec<String> {
    let r = run_on(server, &["queue", "dead", queue]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    json_lines(&r)
        .iter()
        .map(|d| d["error"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_commands_stdout_is_the_result_and_it_reports_progress() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let seen = path_in(&dir, "progress");
    let r = run_on(&server, &["queue", "push", "r", "t1"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    // Nothing yet: exit 1.
    assert_eq!(run_on(&server, &["queue", "result", "r", "t1"]).code(), 1);
    let script = format!(
        "\"$DLM\" queue progress \"$DLM_QUEUE\" \"$DLM_TASK_ID\" 50 'half way' >&2 \
         && \"$DLM\" queue progress \"$DLM_QUEUE\" \"$DLM_TASK_ID\" > '{p}.tmp' \
         && echo \"$DLM_TASK_FENCE\" >> '{p}.tmp' && mv '{p}.tmp' '{p}'; echo hi",
        p = seen.display()
    );
    let w =
        start_worker(&server, "r", &["--exit-when-empty"], &script).finish(Duration::from_secs(30));
    assert_eq!(w.code(), 0, "{}", w.stderr);
    assert_eq!(summary(&w)["acked"], 1, "{}", w.stdout);
    let progress = std::fs::read_to_string(&seen)?;
    let mut lines = progress.lines();
    assert_eq!(lines.next(), Some("50% half way"), "{progress}");
    let fence = lines.next().unwrap_or_default().to_string();
    assert!(fence.parse::<u64>().is_ok(), "{progress}");

    let r = run_on(&server, &["queue", "result", "r", "t1"]);
    assert_eq!((r.code(), r.stdout.as_str()), (0, "hi\n"), "{}", r.stderr);
    let r = run_on(&server, &["--json", "queue", "result", "r", "t1"]);
    assert_eq!(json_lines(&r)[0]["payload"], "hi\n");

    // The lease has ended: its fence is refused (exit 1), bad input is exit 2.
    let r = run_on(
        &server,
        &["queue", "progress", "r", "t1", "70", "--fence", &fence],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr);
    let r = run_on(
        &server,
        &["queue", "progress", "r", "t1", "101", "--fence", &fence],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr);
    // Progress is gone with the run.
    assert_eq!(run_on(&server, &["queue", "progress", "r", "t1"]).code(), 1);
    Ok(())
}

#[test]
fn output_over_result_bytes_fails_the_task() -> TestResult {
    let server = server();
    assert_eq!(run_on(&server, &["queue", "push", "big", "t"]).code(), 0);
    let w = start_worker(
        &server,
        "big",
        &[
            "--exit-when-empty",
            "--max-attempts",
            "1",
            "--result-bytes",
            "4",
        ],
        "echo 123456789",
    )
    .finish(Duration::from_secs(30));
    assert_eq!(w.code(), 0, "{}", w.stderr);
    assert_eq!(summary(&w)["dead"], 1, "{}", w.stdout);
    assert_eq!(dead_errors(&server, "big"), ["result larger than 4 bytes"]);
    assert_eq!(run_on(&server, &["queue", "result", "big", "t"]).code(), 1);
    Ok(())
}

#[test]
fn result_wait_returns_when_the_task_finishes() -> TestResult {
    let server = server();
    assert_eq!(run_on(&server, &["queue", "push", "wq", "t"]).code(), 0);
    let mut waiter = dlm();
    waiter.args([
        "--redis",
        &server.url(),
        "queue",
        "result",
        "wq",
        "t",
        "--wait",
        "30s",
    ]);
    let waiter = start(waiter);
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let w = start_worker(&server, "wq", &["--exit-when-empty"], "printf done")
        .finish(Duration::from_secs(30));
    assert_eq!(summary(&w)["acked"], 1, "{}", w.stdout);
    let r = waiter.finish(Duration::from_secs(30));
    assert_eq!((r.code(), r.stdout.as_str()), (0, "done"), "{}", r.stderr);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Within --wait and nothing comes: exit 1 at the deadline.
    let r = run_on(
        &server,
        &["queue", "result", "wq", "none", "--wait", "300ms"],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr);
    assert!(r.elapsed >= Duration::from_millis(300));
    Ok(())
}

/// A `sleep 30` past its limit is killed (SIGTERM to its group) and the
/// task fails "timed out": retried, then dead. The limit comes from `queue
/// push --task-timeout` or from `queue work --task-timeout`.
#[test]
fn task_timeout_kills_the_command_and_fails_the_task() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let runs = path_in(&dir, "runs");
    let r = run_on(
        &server,
        &["queue", "push", "slow", "pushed", "--task-timeout", "300ms"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let script = format!("echo \"$DLM_TASK_ID\" >> '{}'; sleep 30", runs.display());
    let w = start_worker(
        &server,
        "slow",
        &[
            "--exit-when-empty",
            "--max-attempts",
            "2",
            "--retry-base",
            "1ms",
        ],
        &script,
    )
    .finish(Duration::from_secs(30));
    assert_eq!(w.code(), 0, "{}", w.stderr);
    let s = summary(&w);
    assert_eq!(
        (s["retried"].as_u64(), s["dead"].as_u64()),
        (Some(1), Some(1)),
        "{s}"
    );
    assert!(w.elapsed < Duration::from_secs(15), "{:?}", w.elapsed);
    assert_eq!(dead_errors(&server, "slow"), ["timed out"]);
    assert_eq!(std::fs::read_to_string(&runs)?.lines().count(), 2);

    // The worker's default, for a task pushed without one; a command that
    // ignores SIGTERM is killed after --grace.
    assert_eq!(
        run_on(&server, &["queue", "push", "slow2", "plain"]).code(),
        0
    );
    let w = start_worker(
        &server,
        "slow2",
        &[
            "--exit-when-empty",
            "--max-attempts",
            "1",
            "--task-timeout",
            "300ms",
            "--grace",
            "500ms",
        ],
        "trap '' TERM; sleep 30",
    )
    .finish(Duration::from_secs(30));
    assert_eq!(summary(&w)["dead"], 1, "{}", w.stdout);
    assert!(w.elapsed < Duration::from_secs(15), "{:?}", w.elapsed);
    assert_eq!(dead_errors(&server, "slow2"), ["timed out"]);
    Ok(())
}

#[test]
fn keep_results_is_a_queue_setting() -> TestResult {
    let server = server();
    let r = run_on(&server, &["--json", "queue", "config", "k"]);
    assert_eq!(json_lines(&r)[0]["keep_results_ms"], 3_600_000);
    let r = run_on(
        &server,
        &["--json", "queue", "config", "k", "--keep-results", "0"],
    );
    assert_eq!(json_lines(&r)[0]["keep_results_ms"], 0, "{}", r.stderr);
    assert_eq!(run_on(&server, &["queue", "push", "k", "t"]).code(), 0);
    let w = start_worker(&server, "k", &["--exit-when-empty"], "echo out")
        .finish(Duration::from_secs(30));
    assert_eq!(summary(&w)["acked"], 1, "{}", w.stdout);
    assert_eq!(run_on(&server, &["queue", "result", "k", "t"]).code(), 1);
    let r = run_on(&server, &["queue", "config", "k", "--keep-results", "31d"]);
    assert_eq!(r.code(), 2, "{}", r.stderr);
    Ok(())
}
