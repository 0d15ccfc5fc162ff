//! Issue 31, defect 9, from the command line: `dlm queue task Q ID --json`
//! of a task that ran once after two dependencies and reported 50% keeps
//! what it was once it completed.

mod common;

use std::time::Duration;

use common::*;

fn task_json(server: &RedisServer, queue: &str, id: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "queue", "task", queue, id]);
    serde_json::from_str(r.stdout.trim()).unwrap_or_default()
}

/// Before the fix the completed task read `"deps":[]`, `"attempts":0` and
/// `"progress":null` (the first assertion failed with `left: Array []`).
#[test]
fn a_completed_task_keeps_its_view() -> TestResult {
    let server = server();
    for args in [
        &["queue", "push", "v", "a", "b"][..],
        &["queue", "push", "v", "report", "--after", "a,b"],
    ] {
        let r = run_on(&server, args);
        assert_eq!(r.code(), 0, "{args:?}: {}", r.stderr);
    }
    let script = "if [ \"$DLM_TASK_ID\" = report ]; then \
                  \"$DLM\" queue progress \"$DLM_QUEUE\" report 50 halfway >&2 || exit 1; \
                  printf 'report.pdf'; fi";
    let mut cmd = dlm();
    cmd.env("DLM", DLM)
        .args(["--redis", &server.url(), "queue", "work", "v"])
        .args(["--worker-id", "cli-worker", "--exit-when-empty"])
        .args(["--", "sh", "-c", script]);
    let done = start(cmd).finish(Duration::from_secs(30));
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let t = task_json(&server, "v", "report");
    assert_eq!(t["state"], "completed", "{t}");
    assert_eq!(t["deps"], serde_json::json!(["a", "b"]), "{t}");
    assert_eq!(t["attempts"], 1, "{t}");
    assert_eq!(t["progress"], 50, "{t}");
    assert_eq!(t["message"], "halfway", "{t}");
    assert_eq!(t["result_bytes"], 10, "{t}");
    assert_eq!(t["worker"], "cli-worker", "{t}");
    let (started, finished) = (t["started_at"].as_u64(), t["finished_at"].as_u64());
    assert!(
        started.is_some() && finished.is_some() && started <= finished,
        "{t}"
    );
    let a = task_json(&server, "v", "a");
    assert_eq!(a["dependents"], serde_json::json!(["report"]), "{a}");
    let text = run_on(&server, &["queue", "task", "v", "report"]);
    assert!(
        text.stdout.contains("after a,b") && text.stdout.contains("ran on cli-worker"),
        "{}",
        text.stdout
    );
    Ok(())
}
