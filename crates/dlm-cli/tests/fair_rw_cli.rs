//! `dlm lock run --fair` and `dlm rwlock run` across real processes: arrival
//! order, a SIGKILLed waiter, readers overlapping and writers alone (judged
//! from the intervals the commands record), and the exit codes.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// The fair queue's length, read behind dlm's back.
fn queue_len(server: &RedisServer, name: &str) -> usize {
    server
        .command(&["LLEN", &format!("dlm:fair:{{{name}}}:queue")])
        .ok()
        .and_then(|s| s.trim_start_matches(':').parse().ok())
        .unwrap_or(0)
}

fn wait_for_queue(server: &RedisServer, name: &str, n: usize) {
    let start = Instant::now();
    while queue_len(server, name) < n {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "queue of {name} never reached {n}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `dlm lock acquire --fair` and the token it printed.
fn hold_fair(server: &RedisServer, name: &str) -> String {
    let r = run_on(server, &["lock", "acquire", name, "--fair", "--ttl", "60s"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    r.stdout.trim().to_string()
}

fn release_fair(server: &RedisServer, name: &str, token: &str) {
    let r = run_on(
        server,
        &["lock", "release", name, "--fair", "--token", token],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
}

fn fair_run(server: &RedisServer, name: &str, script: &str) -> Running {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "lock", "run", name, "--fair"])
        .args(["--ttl", "10s", "--wait", "60s", "--", "sh", "-c", script]);
    start(cmd)
}

#[test]
fn twenty_fair_runs_acquire_in_the_order_they_arrived() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let order = path_in(&dir, "order");
    let token = hold_fair(&server, "fifo");
    let mut runs = Vec::new();
    for i in 0..20 {
        let script = format!("echo {i} >> '{}'", order.display());
        runs.push(fair_run(&server, "fifo", &script));
        // Known arrival order: the next starts once this one is queued.
        wait_for_queue(&server, "fifo", i + 1);
    }
    release_fair(&server, "fifo", &token);
    for r in runs {
        let r = r.finish(Duration::from_secs(60));
        assert_eq!(r.code(), 0, "{}", r.stderr);
    }
    let got: Vec<usize> = std::fs::read_to_string(&order)?
        .lines()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    assert_eq!(got, (0..20).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn a_sigkilled_waiter_delays_the_next_by_at_most_its_queue_lease() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let done = path_in(&dir, "done");
    let token = hold_fair(&server, "dead");
    let doomed = fair_run(&server, "dead", "true");
    wait_for_queue(&server, "dead", 1);
    let next = fair_run(&server, "dead", &format!("echo ok > '{}'", done.display()));
    wait_for_queue(&server, "dead", 2);
    signal(&doomed.pid().to_string(), "KILL");
    let released = Instant::now();
    release_fair(&server, "dead", &token);
    wait_for_file(&done, Duration::from_secs(10));
    let waited = released.elapsed();
    // The default queue lease is 3 s; allow for process start-up and polling.
    assert!(
        waited < Duration::from_millis(3000 + 1000),
        "the next waiter waited {waited:?} behind a dead one"
    );
    assert_eq!(next.finish(Duration::from_secs(10)).code(), 0);
    drop(doomed);
    Ok(())
}

fn rw_run(server: &RedisServer, mode: &str, script: &str) -> Running {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "rwlock", "run", "doc", mode])
        .args(["--ttl", "5s", "--wait", "30s", "--", "sh", "-c", script]);
    start(cmd)
}

/// A command's mode and its start and end (ns since the epoch).
type Interval = (String, u128, u128);

/// (mode, start ns, end ns) lines written by the commands.
fn intervals(
    path: &std::path::Path,
) -> Result<Vec<Interval>, Box<dyn std::error::Error + Send + Sync>> {
    let mut out = Vec::new();
    for line in std::fs::read_to_string(path)?.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if let [mode, from, until] = parts[..] {
            out.push((mode.to_string(), from.parse()?, until.parse()?));
        }
    }
    Ok(out)
}

#[test]
fn rwlock_run_readers_overlap_and_writers_are_alone() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let log = path_in(&dir, "log");
    let script = |mode: &str, secs: &str| {
        format!(
            "a=$(date +%s%N); sleep {secs}; echo \"{mode} $a $(date +%s%N)\" >> '{}'",
            log.display()
        )
    };
    let mut runs = Vec::new();
    for i in 0..6 {
        let (mode, secs) = if i % 3 == 2 {
            ("--write", "0.1")
        } else {
            ("--read", "0.4")
        };
        runs.push(rw_run(&server, mode, &script(mode, secs)));
        std::thread::sleep(Duration::from_millis(50));
    }
    for r in runs {
        let r = r.finish(Duration::from_secs(30));
        assert_eq!(r.code(), 0, "{}", r.stderr);
    }
    let all = intervals(&log)?;
    assert_eq!(all.len(), 6);
    let overlap = |a: &(String, u128, u128), b: &(String, u128, u128)| a.1 < b.2 && b.1 < a.2;
    let mut readers_overlapped = false;
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            if overlap(a, b) {
                assert!(a.0 == "--read" && b.0 == "--read", "{a:?} overlaps {b:?}");
                readers_overlapped = true;
            }
        }
    }
    assert!(readers_overlapped, "readers never overlapped: {all:?}");
    Ok(())
}

#[test]
fn rwlock_run_exit_codes() -> TestResult {
    let server = server();
    // The command's own code.
    let r = run_on(
        &server,
        &[
            "rwlock", "run", "codes", "--read", "--ttl", "5s", "--", "sh", "-c", "exit 7",
        ],
    );
    assert_eq!(r.code(), 7, "{}", r.stderr);
    // Bad input: no mode, both modes, a bad TTL.
    for args in [
        &["rwlock", "run", "codes", "--ttl", "5s", "--", "true"][..],
        &[
            "rwlock", "run", "codes", "--read", "--write", "--ttl", "5s", "--", "true",
        ],
        &[
            "rwlock", "run", "codes", "--read", "--ttl", "0s", "--", "true",
        ],
        &[
            "lock",
            "run",
            "codes",
            "--fair",
            "--raw-key",
            "--ttl",
            "5s",
            "--",
            "true",
        ],
    ] {
        assert_eq!(run_on(&server, args).code(), 2, "{args:?}");
    }
    // Not acquired before --wait: 1.
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "rwlock",
        "run",
        "codes",
        "--write",
    ])
    .args(["--ttl", "300ms", "--", "sleep", "5"]);
    let writer = start(cmd);
    let key = "dlm:rw:{codes}:writer";
    let t0 = Instant::now();
    while server.command(&["EXISTS", key])? != ":1" {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the writer never held it"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = run_on(
        &server,
        &[
            "rwlock", "run", "codes", "--read", "--ttl", "5s", "--wait", "200ms", "--", "true",
        ],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr);
    // Lost while running: 4 (the key is taken away behind the writer's back).
    server.command(&["DEL", key])?;
    let r = writer.finish(Duration::from_secs(15));
    assert_eq!(r.code(), 4, "{}", r.stderr);
    Ok(())
}

/// `dlm --json ARGS` parsed (exit 0 expected).
fn json_of(server: &RedisServer, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let r = run_on(server, &all);
    assert_eq!(r.code(), 0, "{args:?}: {}", r.stderr);
    serde_json::from_str(r.stdout.trim()).expect("JSON")
}

/// `lock status --fair` shows the holder and the line; `rwlock status`
/// the writer, the readers and the waiting writers, in the JSON the
/// issue names.
#[test]
fn fair_and_rwlock_status() -> TestResult {
    let server = server();
    let token = hold_fair(&server, "st");
    let waiter = fair_run(&server, "st", "true");
    wait_for_queue(&server, "st", 1);
    let s = json_of(&server, &["lock", "status", "st", "--fair"]);
    assert_eq!(
        (s["held"].as_bool(), s["waiting"].as_u64()),
        (Some(true), Some(1)),
        "{s}"
    );
    assert_eq!(s["key"], "dlm:fair:{st}");
    release_fair(&server, "st", &token);
    assert_eq!(waiter.finish(Duration::from_secs(10)).code(), 0);
    let s = json_of(&server, &["lock", "status", "st", "--fair"]);
    assert_eq!(
        (s["held"].as_bool(), s["waiting"].as_u64()),
        (Some(false), Some(0)),
        "{s}"
    );

    let s = json_of(&server, &["rwlock", "status", "doc"]);
    for field in ["name", "writer", "readers", "waiting_writers"] {
        assert!(s.get(field).is_some(), "{field} in {s}");
    }
    assert_eq!(
        (s["writer"].as_bool(), s["readers"].as_u64()),
        (Some(false), Some(0))
    );
    let dir = tempdir()?;
    let (r1, r2) = (path_in(&dir, "r1"), path_in(&dir, "r2"));
    let hold = |p: &std::path::Path| format!("echo up > {}; sleep 3", p.display());
    let readers = [
        rw_run(&server, "--read", &hold(&r1)),
        rw_run(&server, "--read", &hold(&r2)),
    ];
    wait_for_file(&r1, Duration::from_secs(10));
    wait_for_file(&r2, Duration::from_secs(10));
    let writer = rw_run(&server, "--write", "true");
    let start = Instant::now();
    let s = loop {
        let s = json_of(&server, &["rwlock", "status", "doc"]);
        if s["waiting_writers"] == 1 || start.elapsed() > Duration::from_secs(5) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        (
            s["writer"].as_bool(),
            s["readers"].as_u64(),
            s["waiting_writers"].as_u64()
        ),
        (Some(false), Some(2), Some(1)),
        "{s}"
    );
    for r in readers {
        assert_eq!(r.finish(Duration::from_secs(20)).code(), 0);
    }
    assert_eq!(writer.finish(Duration::from_secs(20)).code(), 0);
    Ok(())
}
