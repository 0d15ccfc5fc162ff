//! `dlm lock run`: exclusion across processes, exit codes, loss, crashes
//! and signal forwarding.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn run_excludes_across_processes_and_fences_increase() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let fences = path_in(&dir, "fences");
    let script = format!(
        "v=$(redis-cli -p {port} GET c); sleep 0.05; redis-cli -p {port} SET c $((v+1)) >/dev/null; \
         echo \"$DLM_FENCE $DLM_LOCK_KEY\" >> '{file}'",
        port = server.port(),
        file = fences.display()
    );
    let url = server.url();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    for _ in 0..5 {
                        let mut cmd = dlm();
                        cmd.args(["--redis", &url, "lock", "run", "counter", "--ttl", "5s"])
                            .args(["--wait", "60s", "--", "sh", "-c", &script]);
                        let r = start(cmd).finish(Duration::from_secs(60));
                        assert_eq!(r.code(), 0, "{}", r.stderr);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
    });
    assert_eq!(server.command(&["GET", "c"])?, "30");

    let lines = std::fs::read_to_string(&fences)?;
    let mut last = 0u64;
    let mut n = 0;
    for line in lines.lines() {
        let (fence, key) = line.split_once(' ').ok_or("fence line")?;
        let fence: u64 = fence.parse()?;
        assert!(fence > last, "fence {fence} after {last}");
        assert_eq!(key, common::key("counter"));
        last = fence;
        n += 1;
    }
    assert_eq!(n, 30);
    assert_eq!(status_json(&server, "counter")["held"], false);
    Ok(())
}

#[test]
fn run_exits_with_the_command_code_and_releases() -> TestResult {
    let server = server();
    let r = run_on(
        &server,
        &[
            "lock", "run", "job", "--ttl", "5s", "--", "sh", "-c", "exit 7",
        ],
    );
    assert_eq!(r.code(), 7, "{}", r.stderr);
    assert_eq!(status_json(&server, "job")["held"], false);

    let r = run_on(
        &server,
        &[
            "lock",
            "run",
            "job",
            "--ttl",
            "5s",
            "--",
            "sh",
            "-c",
            "kill -KILL $$",
        ],
    );
    assert_eq!(r.code(), 128 + 9, "{}", r.stderr);

    let r = run_on(
        &server,
        &[
            "lock",
            "run",
            "job",
            "--ttl",
            "5s",
            "--",
            "/nonexistent/cmd",
        ],
    );
    assert_eq!(r.code(), 127, "{}", r.stderr);
    assert!(r.stderr.starts_with("dlm: "), "{}", r.stderr);
    assert_eq!(status_json(&server, "job")["held"], false);

    // Busy: not acquired before --wait is exit 1 and the command does not run.
    let t = run_on(&server, &["lock", "acquire", "job", "--ttl", "30s"]);
    assert_eq!(t.code(), 0);
    let r = run_on(
        &server,
        &[
            "lock", "run", "job", "--ttl", "5s", "--wait", "100ms", "--", "sh", "-c", "exit 5",
        ],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr);
    Ok(())
}

#[test]
fn losing_the_lock_stops_the_command_and_exits_4() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let pidfile = path_in(&dir, "pid");
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "lock",
        "run",
        "lost",
        "--ttl",
        "1s",
        "--",
    ])
    .args([
        "sh",
        "-c",
        &format!("echo $$ > '{}'; exec sleep 30", pidfile.display()),
    ]);
    let running = start(cmd);
    let child = wait_for_file(&pidfile, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.command(&["DEL", &key("lost")])?, ":1");
    let r = running.finish(Duration::from_secs(15));
    assert_eq!(r.code(), 4, "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(8), "{:?}", r.elapsed);
    assert!(
        r.stderr
            .contains("dlm: lock lost lost while the command ran"),
        "{}",
        r.stderr
    );
    assert!(!alive(&child), "the command is still running");
    Ok(())
}

#[test]
fn expiry_frees_the_lock_of_a_crashed_dlm() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let pidfile = path_in(&dir, "pid");
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "lock",
        "run",
        "crash",
        "--ttl",
        "1s",
        "--",
    ])
    .args([
        "sh",
        "-c",
        &format!("echo $$ > '{}'; exec sleep 30", pidfile.display()),
    ]);
    let mut running = start(cmd);
    let child = wait_for_file(&pidfile, Duration::from_secs(10));
    running.child.kill()?; // SIGKILL: dlm cannot release
    running.child.wait()?;
    signal(&child, "KILL");
    assert_eq!(status_json(&server, "crash")["held"], true);

    let r = run_on(
        &server,
        &["lock", "acquire", "crash", "--ttl", "1s", "--wait", "5s"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(r.elapsed < Duration::from_secs(4), "{:?}", r.elapsed);
    Ok(())
}

#[test]
fn signals_are_forwarded_and_the_lock_released() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let ready = path_in(&dir, "ready");
    let script = format!(
        "trap 'exit 9' TERM; sleep 30 & echo $! > '{f}.tmp'; mv '{f}.tmp' '{f}'; wait",
        f = ready.display()
    );
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "lock",
        "run",
        "sig",
        "--ttl",
        "5s",
        "--",
    ])
    .args(["sh", "-c", &script]);
    let running = start(cmd);
    let sleeper = wait_for_file(&ready, Duration::from_secs(10));
    signal(&running.pid().to_string(), "TERM");
    let r = running.finish(Duration::from_secs(10));
    signal(&sleeper, "KILL");
    assert_eq!(r.code(), 9, "{}", r.stderr);
    assert_eq!(status_json(&server, "sig")["held"], false);
    Ok(())
}
