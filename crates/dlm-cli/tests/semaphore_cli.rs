//! `dlm semaphore run | status` and `dlm lock run NAME...` (the multi-lock)
//! across processes, judged on the histories the commands write: each
//! appends `start PID NANOS` and `end PID NANOS` to a file, and the checkers
//! look at the intervals, not at counters.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use dlm_testkit::history::{Hold, PermitHold, overlapping_holds, peak_permits};

/// A shell command that records its critical section in `file`.
fn recorder(file: &Path, sleep: &str) -> String {
    format!(
        "echo \"start $$ $(date +%s%N) $DLM_PERMITS $DLM_FENCE $DLM_FENCES\" >> '{f}'; sleep {sleep}; \
         echo \"end $$ $(date +%s%N)\" >> '{f}'",
        f = file.display()
    )
}

/// The intervals in a recorder's file: per pid, (start, end) in ns, and the
/// rest of each start line.
fn intervals(file: &Path) -> Vec<(u64, u64, u64, String)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut open: HashMap<u64, (u64, String)> = HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(4, ' ');
        let (Some(kind), Some(pid), Some(t)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("bad line {line:?}");
        };
        let (pid, t): (u64, u64) = (pid.parse().expect("pid"), t.parse().expect("time"));
        match kind {
            "start" => {
                open.insert(pid, (t, parts.next().unwrap_or("").to_string()));
            }
            _ => {
                let (from, rest) = open.remove(&pid).expect("end after start");
                out.push((pid, from, t, rest));
            }
        }
    }
    assert!(open.is_empty(), "sections left open: {open:?}");
    out
}

fn ns(n: u64) -> Duration {
    Duration::from_nanos(n)
}

#[test]
fn ten_processes_never_hold_more_than_three_permits() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let file = path_in(&dir, "history");
    let script = recorder(&file, "0.2");
    let url = server.url();
    let runs: Vec<Running> = (0..10)
        .map(|_| {
            let mut cmd = dlm();
            cmd.args([
                "--redis",
                &url,
                "semaphore",
                "run",
                "pool",
                "--permits",
                "3",
            ])
            .args(["--ttl", "5s", "--wait", "60s", "--", "sh", "-c", &script]);
            start(cmd)
        })
        .collect();
    for r in runs {
        let r = r.finish(Duration::from_secs(60));
        assert_eq!(r.code(), 0, "{}", r.stderr);
    }
    let sections = intervals(&file);
    assert_eq!(sections.len(), 10);
    let holds: Vec<PermitHold> = sections
        .iter()
        .map(|(pid, from, until, _)| PermitHold {
            holder: usize::try_from(*pid).unwrap_or(0),
            from: ns(*from),
            until: ns(*until),
            permits: 1,
        })
        .collect();
    let (peak, at) = peak_permits(&holds);
    assert!(peak <= 3, "{peak} permits held at once at {at:?}");
    assert_eq!(peak, 3, "3 held at once was reached");
    let mut fences = Vec::new();
    for (_, _, _, rest) in &sections {
        let mut f = rest.split(' ');
        assert_eq!(f.next(), Some("1"), "DLM_PERMITS: {rest}");
        fences.push(f.next().ok_or("fence")?.parse::<u64>()?);
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 10, "every holder has its own DLM_FENCE");
    let st = semaphore_status(&server, "pool");
    assert_eq!(st["permits"], 3);
    assert_eq!(st["available"], 3);
    assert_eq!(st["holders"], 0);
    Ok(())
}

/// Start `dlm semaphore run NAME --permits 1 --ttl TTL` over a command that
/// writes its pid to `flag` and sleeps `secs`; wait until it runs. The
/// running dlm and the command's pid.
fn start_holder(
    server: &RedisServer,
    name: &str,
    ttl: &str,
    flag: &Path,
    secs: u32,
) -> (Running, String) {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "semaphore", "run", name])
        .args(["--permits", "1", "--ttl", ttl, "--", "sh", "-c"])
        .arg(format!("echo $$ > '{}'; exec sleep {secs}", flag.display()));
    let running = start(cmd);
    let pid = wait_for_file(flag, Duration::from_secs(10));
    (running, pid)
}

/// `dlm semaphore run ARGS` (ARGS split on spaces).
fn sem_run(server: &RedisServer, args: &str) -> Run {
    let mut all = vec!["semaphore", "run"];
    all.extend(args.split(' '));
    run_on(server, &all)
}

fn semaphore_status(server: &RedisServer, name: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "semaphore", "status", name]);
    assert_eq!(r.code(), 0, "status failed: {}", r.stderr);
    serde_json::from_str(r.stdout.trim()).expect("status prints JSON")
}

#[test]
fn a_sigkilled_holders_permit_comes_back_at_its_ttl() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let (holder, child) = start_holder(&server, "crash", "1500ms", &path_in(&dir, "pid"), 30);
    let st = semaphore_status(&server, "crash");
    assert_eq!(
        (st["available"].as_u64(), st["holders"].as_u64()),
        (Some(0), Some(1))
    );
    signal(&holder.pid().to_string(), "KILL");
    let killed = Instant::now();
    let _ = holder.finish(Duration::from_secs(5));
    signal(&child, "KILL");
    let busy = sem_run(&server, "crash --permits 1 --ttl 1s -- true");
    assert_eq!(busy.code(), 1, "still held after the kill: {}", busy.stderr);
    let r = sem_run(&server, "crash --permits 1 --ttl 1s --wait 10s -- true");
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let back = killed.elapsed();
    // The last renewal was at most TTL/3 before the kill.
    assert!(
        back >= Duration::from_millis(900) && back < Duration::from_millis(3000),
        "the permit came back {back:?} after the kill (TTL 1.5 s)"
    );
    Ok(())
}

#[test]
fn exit_codes_env_and_bad_input() -> TestResult {
    let server = server();
    // The command's own code; DLM_PERMITS is --take.
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "semaphore",
        "run",
        "codes",
        "--permits",
        "3",
    ])
    .args([
        "--take",
        "2",
        "--ttl",
        "5s",
        "--",
        "sh",
        "-c",
        "exit $DLM_PERMITS$DLM_PERMITS",
    ]);
    let r = start(cmd).finish(Duration::from_secs(30));
    assert_eq!(r.code(), 22, "{}", r.stderr);
    // Bad input: exit 2, nothing run.
    for bad in [
        "codes --permits 0 --ttl 5s -- true",
        "codes --permits 3 --take 4 --ttl 5s -- true",
        "codes --permits 3 --take 0 --ttl 5s -- true",
        "codes --permits 3 --ttl 0s -- true",
    ] {
        assert_eq!(sem_run(&server, bad).code(), 2, "{bad}");
    }
    // Lost while running: exit 4, the command was stopped.
    let dir = tempdir()?;
    let (running, _) = start_holder(&server, "lost", "300ms", &path_in(&dir, "lost"), 20);
    server.command(&["DEL", "dlm:sem:{lost}:holders"])?;
    let r = running.finish(Duration::from_secs(15));
    assert_eq!(r.code(), 4, "{}", r.stderr);
    assert!(
        r.elapsed < Duration::from_secs(12),
        "stopped in {:?}",
        r.elapsed
    );
    // Not acquired before --wait: exit 1.
    let (held, pid) = start_holder(&server, "full", "5s", &path_in(&dir, "full"), 30);
    let r = sem_run(&server, "full --permits 1 --ttl 5s --wait 200ms -- true");
    assert_eq!(r.code(), 1, "{}", r.stderr);
    signal(&pid, "TERM");
    assert_eq!(
        held.finish(Duration::from_secs(10)).code(),
        143,
        "SIGTERM's code"
    );
    let st = semaphore_status(&server, "full");
    for field in ["name", "permits", "available", "holders"] {
        assert!(st.get(field).is_some(), "status has {field}: {st}");
    }
    assert_eq!(st["name"], "full");
    Ok(())
}

/// {A, B} against {B, A} from two processes in a loop: no deadlock (every
/// run ends in time), no overlap on either name.
#[test]
fn multi_lock_runs_in_crossing_orders_never_deadlock_nor_overlap() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let file = path_in(&dir, "history");
    let script = recorder(&file, "0.02");
    let url = server.url();
    std::thread::scope(|s| {
        for order in [["A", "B"], ["B", "A"]] {
            let (url, script) = (url.clone(), script.clone());
            s.spawn(move || {
                for _ in 0..12 {
                    let mut cmd = dlm();
                    cmd.args(["--redis", &url, "lock", "run", order[0], order[1]])
                        .args(["--ttl", "5s", "--wait", "30s", "--", "sh", "-c", &script]);
                    let r = start(cmd).finish(Duration::from_secs(30));
                    assert_eq!(r.code(), 0, "{}", r.stderr);
                }
            });
        }
    });
    let sections = intervals(&file);
    assert_eq!(sections.len(), 24);
    let mut holds = Vec::new();
    for (pid, from, until, rest) in &sections {
        // DLM_PERMITS is empty here: the rest is " FENCE FENCES".
        let fences = rest.trim().split(' ').nth(1).ok_or("DLM_FENCES")?;
        assert_eq!(fences.split(',').count(), 2, "{rest}");
        for name in ["A", "B"] {
            holds.push(Hold {
                holder: usize::try_from(*pid).unwrap_or(0),
                lock: name.into(),
                from: ns(*from),
                until: ns(*until),
                fence: None,
            });
        }
    }
    let overlaps = overlapping_holds(&holds);
    assert!(overlaps.is_empty(), "overlaps: {overlaps:?}");
    assert_eq!(status_json(&server, "A")["held"], false);
    // Duplicate names are bad input.
    let r = run_on(
        &server,
        &["lock", "run", "A", "A", "--ttl", "1s", "--", "true"],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr);
    Ok(())
}
