//! `dlm queue push | peek | pop | remove | stats | dead | retry | purge`
//! against a real redis-server, and bad input.

mod common;

use common::*;

fn q(server: &RedisServer, args: &[&str]) -> Run {
    let mut all = vec!["queue"];
    all.extend_from_slice(args);
    run_on(server, &all)
}

#[test]
fn push_peek_pop_remove_stats_round_trip() -> TestResult {
    let server = server();

    // Plain push output: one line per id.
    let r = q(&server, &["push", "jobs", "a", "b", "--payload", "hello"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", r.stdout);
    let score_a: u64 = lines[0]
        .strip_prefix("added a ")
        .ok_or("added a")?
        .parse()?;
    assert!(lines[1].starts_with("added b "), "{}", r.stdout);

    // Keep is the default: a second push of `a` is kept, with its score.
    let r = q(&server, &["push", "jobs", "a"]);
    assert_eq!(r.stdout.trim(), "kept a", "{}", r.stderr);
    let r = run_on(&server, &["--json", "queue", "push", "jobs", "a", "c"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v = json_lines(&r);
    assert_eq!(v[0]["id"], "a");
    assert_eq!(v[0]["status"], "kept");
    assert_eq!(v[0]["score"], score_a);
    assert_eq!(v[1]["status"], "added");

    // Peek: always JSON lines, payload as text, null when none; nothing moves.
    let r = q(&server, &["peek", "jobs", "--count", "10"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v = json_lines(&r);
    assert_eq!(v.len(), 3, "{}", r.stdout);
    assert_eq!(v[0]["id"], "a");
    assert_eq!(v[0]["score"], score_a);
    assert_eq!(v[0]["payload"], "hello");
    assert!(v[0].get("payload_base64").is_none());
    assert_eq!(v[2]["id"], "c");
    assert!(v[2]["payload"].is_null());
    let r = q(&server, &["peek", "jobs"]);
    assert_eq!(json_lines(&r).len(), 1, "default count is 1");

    // Delayed: counted, not visible in peek.
    let r = q(&server, &["push", "jobs", "later", "--delay", "10s"]);
    assert!(r.stdout.starts_with("added later "), "{}", r.stdout);
    let r = q(&server, &["peek", "jobs", "--count", "10"]);
    assert!(!r.stdout.contains("later"), "{}", r.stdout);
    let s = queue_stats(&server, "jobs");
    assert_eq!(
        (s["waiting"].as_u64(), s["delayed"].as_u64()),
        (Some(3), Some(1))
    );
    let r = q(&server, &["stats", "jobs"]);
    assert!(r.stdout.contains("waiting 3, delayed 1"), "{}", r.stdout);

    // Replace gives `a` a new score: removing with the old one exits 1.
    let r = q(
        &server,
        &["push", "jobs", "a", "--replace", "--payload", "v2"],
    );
    let score_a2: u64 = r
        .stdout
        .trim()
        .strip_prefix("replaced a ")
        .ok_or("replaced a")?
        .parse()?;
    assert!(score_a2 >= score_a);
    if score_a2 != score_a {
        let r = run_on(
            &server,
            &[
                "--json",
                "queue",
                "remove",
                "jobs",
                "a",
                "--score",
                &score_a.to_string(),
            ],
        );
        assert_eq!(r.code(), 1, "{}", r.stderr);
        assert!(r.stderr.contains("re-enqueued"), "{}", r.stderr);
        let v = json_lines(&r);
        assert_eq!(v[0]["removed"], false);
        assert_eq!(v[0]["reason"], "score_changed");
        assert_eq!(v[0]["score"], score_a2);
    }
    let r = q(&server, &["remove", "jobs", "a", "--score", "1"]);
    assert_eq!(r.code(), 1, "{}", r.stderr);
    let r = q(
        &server,
        &["remove", "jobs", "a", "--score", &score_a2.to_string()],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = run_on(
        &server,
        &[
            "--json",
            "queue",
            "remove",
            "jobs",
            "a",
            "--score",
            &score_a2.to_string(),
        ],
    );
    assert_eq!(r.code(), 1);
    assert!(r.stderr.contains("not waiting"), "{}", r.stderr);
    assert_eq!(json_lines(&r)[0]["reason"], "not_present");

    // Binary payload from a file comes back base64 with the flag.
    let dir = tempdir()?;
    let bin = path_in(&dir, "bin");
    std::fs::write(&bin, [0xff, 0x00, 0xfe, b'x'])?;
    let r = q(
        &server,
        &[
            "push",
            "bin",
            "x",
            "--payload-file",
            &bin.display().to_string(),
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = q(&server, &["pop", "bin", "--count", "5"]);
    let v = json_lines(&r);
    assert_eq!(v.len(), 1, "{}", r.stdout);
    assert_eq!(v[0]["payload"], "/wD+eA==");
    assert_eq!(v[0]["payload_base64"], true);
    // Popped: gone; an empty pop prints nothing and exits 0.
    let r = q(&server, &["pop", "bin"]);
    assert_eq!((r.code(), r.stdout.as_str()), (0, ""));

    // Pop takes in order; stats in JSON has every field.
    let r = q(&server, &["pop", "jobs", "--count", "2"]);
    let ids: Vec<String> = json_lines(&r)
        .iter()
        .map(|v| v["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids, ["b", "c"]);
    let s = queue_stats(&server, "jobs");
    for (field, want) in [
        ("waiting", 0),
        ("delayed", 1),
        ("inflight", 0),
        ("in_flight", 0),
        ("dead", 0),
        ("processed", 0),
        ("failed", 0),
    ] {
        assert_eq!(s[field], want, "{field} in {s}");
    }
    Ok(())
}

/// The ids of `peek`/`pop`'s JSON lines.
fn ids(r: &Run) -> Vec<String> {
    json_lines(r)
        .iter()
        .map(|v| v["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The seeds' API (peek, pop, remove-if-score) sees the tasks that have a
/// priority or a group, in the order a worker would claim them; it used to
/// look only where plain tasks wait and printed nothing for these.
#[test]
fn peek_pop_and_remove_see_tasks_with_a_priority_or_a_group() -> TestResult {
    let server = server();
    for (queue, feature) in [("q1", ["--priority", "5"]), ("q2", ["--group", "A"])] {
        let r = q(&server, &["push", queue, "a", feature[0], feature[1]]);
        assert_eq!(r.code(), 0, "{}", r.stderr);
        let r = q(&server, &["push", queue, "b"]);
        assert_eq!(r.code(), 0, "{}", r.stderr);
        assert_eq!(queue_stats(&server, queue)["waiting"], 2);
        let peeked = ids(&q(&server, &["peek", queue, "--count", "10"]));
        let popped = ids(&q(&server, &["pop", queue, "--count", "5"]));
        // A priority goes first; within one priority, the earlier due time.
        assert_eq!(peeked, ["a", "b"], "{queue}");
        assert_eq!(popped, peeked, "{queue}: pop takes what peek shows");
        assert_eq!(queue_stats(&server, queue)["waiting"], 0);
    }

    // remove --score with the score push printed, for a prioritized task.
    let r = run_on(
        &server,
        &["--json", "queue", "push", "q3", "p", "--priority", "3"],
    );
    let score = json_lines(&r)[0]["score"].as_u64().ok_or("score")?;
    let r = q(
        &server,
        &["remove", "q3", "p", "--score", &(score + 1).to_string()],
    );
    assert_ne!(r.code(), 0, "another score does not remove it");
    let r = q(
        &server,
        &["remove", "q3", "p", "--score", &score.to_string()],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(queue_stats(&server, "q3")["waiting"], 0);

    // A delayed prioritized task: seen once due, before and after a claim
    // moved it to where due prioritized tasks wait, in priority order.
    let r = q(
        &server,
        &["push", "q4", "late", "--priority", "9", "--delay", "300ms"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let r = q(&server, &["push", "q4", "early", "--priority", "1"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(
        ids(&q(&server, &["peek", "q4", "--count", "10"])),
        ["late", "early"]
    );
    assert_eq!(ids(&q(&server, &["pop", "q4", "--count", "1"])), ["late"]);
    assert_eq!(ids(&q(&server, &["peek", "q4"])), ["early"]);
    Ok(())
}

#[test]
fn bad_queue_input_exits_2_with_a_message() -> TestResult {
    let server = server();
    let url = server.url();
    let dir = tempdir()?;
    let big = path_in(&dir, "big");
    std::fs::write(&big, vec![b'x'; 600 * 1024])?;
    let big = big.display().to_string();
    let long = "n".repeat(2000);
    let table: Vec<(&str, Vec<&str>)> = vec![
        ("empty queue name", vec!["push", "", "a"]),
        ("queue name opening with }", vec!["stats", "}q"]),
        ("2000-byte queue name", vec!["stats", &long]),
        ("empty id", vec!["push", "q", ""]),
        ("no id", vec!["push", "q"]),
        (
            "payload over the limit",
            vec!["push", "q", "a", "--payload-file", &big],
        ),
        (
            "payload and payload file",
            vec!["push", "q", "a", "--payload", "x", "--payload-file", &big],
        ),
        (
            "missing payload file",
            vec!["push", "q", "a", "--payload-file", "/nonexistent/f"],
        ),
        ("negative delay", vec!["push", "q", "a", "--delay", "-1s"]),
        (
            "negative delay with =",
            vec!["push", "q", "a", "--delay=-1s"],
        ),
        (
            "delay over a year",
            vec!["push", "q", "a", "--delay", "400days"],
        ),
        ("count 0", vec!["peek", "q", "--count", "0"]),
        ("count 999999", vec!["pop", "q", "--count", "999999"]),
        ("dead count 0", vec!["dead", "q", "--count", "0"]),
        ("remove without score", vec!["remove", "q", "a"]),
        (
            "remove with a bad score",
            vec!["remove", "q", "a", "--score", "-5"],
        ),
        ("retry without ids or --all", vec!["retry", "q"]),
        ("purge without --dead", vec!["purge", "q"]),
        ("work without a command", vec!["work", "q"]),
        (
            "work with concurrency 0",
            vec!["work", "q", "--concurrency", "0", "--", "true"],
        ),
        (
            "work with a zero lease",
            vec!["work", "q", "--lease", "0s", "--", "true"],
        ),
        (
            "work with max attempts 0",
            vec!["work", "q", "--max-attempts", "0", "--", "true"],
        ),
    ];
    for (what, args) in table {
        let mut all = vec!["--redis", url.as_str(), "queue"];
        all.extend(args);
        let r = run(&all);
        assert_eq!(r.code(), 2, "{what}: stderr {:?}", r.stderr);
        assert!(!r.stderr.trim().is_empty(), "{what}: no message");
        assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
    }
    let r = run(&[
        "--redis",
        &url,
        "queue",
        "push",
        "q",
        "a",
        "--payload-file",
        &big,
    ]);
    assert!(
        r.stderr.contains("614400 bytes") && r.stderr.contains("limit"),
        "{}",
        r.stderr
    );
    assert_eq!(
        queue_stats(&server, "q")["waiting"],
        0,
        "nothing was pushed"
    );

    // A command that does not exist: 127, before any task is touched.
    q(&server, &["push", "q", "a"]);
    let r = q(
        &server,
        &["work", "q", "--exit-when-empty", "--", "/nonexistent/cmd"],
    );
    assert_eq!(r.code(), 127, "{}", r.stderr);
    assert_eq!(queue_stats(&server, "q")["waiting"], 1);
    Ok(())
}

#[test]
fn failing_tasks_die_and_can_be_retried_and_purged() -> TestResult {
    let server = server();
    q(&server, &["push", "fail", "t1", "--payload", "p"]);
    let work = |server: &RedisServer| {
        run_on(
            server,
            &[
                "--json",
                "queue",
                "work",
                "fail",
                "--max-attempts",
                "2",
                "--retry-base",
                "10ms",
                "--exit-when-empty",
                "--",
                "sh",
                "-c",
                "cat >/dev/null; exit 3",
            ],
        )
    };
    let r = work(&server);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let summary = json_lines(&r).pop().ok_or("summary")?;
    assert_eq!(summary["dead"], 1, "{summary}");
    assert_eq!(summary["retried"], 1, "{summary}");
    assert_eq!(summary["acked"], 0, "{summary}");

    let r = q(&server, &["dead", "fail"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let dead = json_lines(&r);
    assert_eq!(dead.len(), 1, "{}", r.stdout);
    assert_eq!(dead[0]["id"], "t1");
    assert_eq!(dead[0]["payload"], "p");
    assert!(dead[0]["died_at"].as_u64().is_some(), "{}", dead[0]);
    let error = dead[0]["error"].as_str().ok_or("error text")?;
    assert!(error.contains("exit status 3"), "{error}");
    let s = queue_stats(&server, "fail");
    assert_eq!(
        (s["dead"].as_u64(), s["failed"].as_u64()),
        (Some(1), Some(1))
    );

    let r = q(&server, &["retry", "fail", "--all"]);
    assert_eq!((r.code(), r.stdout.trim()), (0, "1"), "{}", r.stderr);
    let s = queue_stats(&server, "fail");
    assert_eq!(
        (s["waiting"].as_u64(), s["dead"].as_u64()),
        (Some(1), Some(0))
    );

    // Dies again (attempts were reset: two more tries), then purge.
    let r = work(&server);
    assert_eq!(json_lines(&r).pop().ok_or("summary")?["dead"], 1);
    let r = q(&server, &["retry", "fail", "nope"]);
    assert_eq!((r.code(), r.stdout.trim()), (0, "0"), "{}", r.stderr);
    let r = run_on(&server, &["--json", "queue", "purge", "fail", "--dead"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(json_lines(&r)[0]["purged"], 1);
    let s = queue_stats(&server, "fail");
    assert_eq!(
        (s["dead"].as_u64(), s["waiting"].as_u64()),
        (Some(0), Some(0))
    );
    let r = q(&server, &["dead", "fail"]);
    assert_eq!((r.code(), r.stdout.as_str()), (0, ""));
    Ok(())
}

/// `queue pause` / `queue resume`: the flag shows in stats (human and
/// JSON), a paused queue's worker claims nothing, and resuming lets it
/// drain.
#[test]
fn pause_and_resume_a_queue() -> TestResult {
    let server = server();
    let r = run_on(&server, &["--json", "queue", "pause", "pq"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim())?;
    assert_eq!(
        (v["paused"].as_bool(), v["was_paused"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(
        q(&server, &["push", "pq", "a", "b"]).code(),
        0,
        "enqueues go on"
    );
    assert_eq!(queue_stats(&server, "pq")["paused"], true);
    assert!(q(&server, &["stats", "pq"]).stdout.contains("(paused)"));
    // A worker on a paused queue claims nothing (and so never drains it).
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "queue",
        "work",
        "pq",
        "--exit-when-empty",
        "--",
        "true",
    ]);
    let worker = start(cmd);
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(
        queue_stats(&server, "pq")["waiting"],
        2,
        "nothing claimed while paused"
    );
    assert_eq!(q(&server, &["resume", "pq"]).stdout.trim(), "resumed pq");
    // Woken by the resume, the same worker drains the queue and exits.
    let r = worker.finish(std::time::Duration::from_secs(20));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let s = queue_stats(&server, "pq");
    assert_eq!(
        (s["paused"].as_bool(), s["waiting"].as_u64()),
        (Some(false), Some(0)),
        "{s}"
    );
    Ok(())
}
