//! `dlm elect run` and `dlm elect status` against a real redis-server, with
//! real candidate processes: one leader at a time (an interval history),
//! hand-over after a SIGKILL, terms that grow, and a frozen leader whose
//! late write the term refuses.
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use dlm_testkit::history::{Hold, overlapping_holds};

/// `dlm --redis URL elect run NAME --id ID --ttl TTL -- sh -c SCRIPT`.
fn candidate(server: &RedisServer, name: &str, id: &str, ttl: &str, script: &str) -> Running {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "elect", "run", name])
        .args(["--id", id, "--ttl", ttl, "--", "sh", "-c", script]);
    start(cmd)
}

/// A CMD that logs `start TERM ID NANOS` and `end TERM ID NANOS` to `log`
/// around `body`.
fn logged(log: &Path, body: &str) -> String {
    let log = log.display();
    format!(
        "echo \"start $DLM_TERM $DLM_LEADER_ID $(date +%s%N)\" >> {log}; {body}; \
         echo \"end $DLM_TERM $DLM_LEADER_ID $(date +%s%N)\" >> {log}"
    )
}

/// The intervals in `log`, one per term: (term, id, from, until).
fn intervals(log: &Path) -> Vec<(u64, String, Duration, Duration)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [what, term, id, nanos] = f[..] else {
            panic!("bad log line {line:?}")
        };
        let (term, at) = (
            term.parse::<u64>().expect("term"),
            Duration::from_nanos(nanos.parse().expect("nanos")),
        );
        match what {
            "start" => {
                starts.insert(term, (id.to_string(), at));
            }
            _ => {
                let (id, from) = starts.remove(&term).expect("a start before its end");
                out.push((term, id, from, at));
            }
        }
    }
    out.sort_by_key(|i| i.2);
    out
}

/// A CMD that writes "PID TERM" to `file` (atomically) and sleeps.
fn announce(file: &Path) -> String {
    format!(
        "echo \"$$ $DLM_TERM\" > {f}.tmp; mv {f}.tmp {f}; exec sleep 60",
        f = file.display()
    )
}

/// `dlm --json elect status NAME`.
fn status(server: &RedisServer, name: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "elect", "status", name]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    serde_json::from_str(r.stdout.trim()).expect("status prints JSON")
}

/// Three candidates at once: each runs CMD in its own term, one after the
/// other, never two at a time; terms grow; each dlm exits with CMD's code.
#[test]
fn one_leader_at_a_time_and_terms_grow() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let log = path_in(&dir, "log");
    let body = logged(&log, "sleep 0.3");
    let runs: Vec<Running> = ["a", "b", "c"]
        .iter()
        .map(|id| candidate(&server, "jobs", id, "5s", &format!("{body}; exit 3")))
        .collect();
    for r in runs {
        let r = r.finish(Duration::from_secs(30));
        assert_eq!(r.code(), 3, "CMD's code: {}", r.stderr);
    }
    let seen = intervals(&log);
    assert_eq!(seen.len(), 3, "{seen:?}");
    let holds: Vec<Hold> = seen
        .iter()
        .map(|(term, id, from, until)| Hold {
            holder: usize::from(id.as_bytes()[0]),
            lock: "jobs".into(),
            from: *from,
            until: *until,
            fence: Some(*term),
        })
        .collect();
    assert_eq!(overlapping_holds(&holds), vec![], "one leader at a time");
    let terms: Vec<u64> = seen.iter().map(|i| i.0).collect();
    assert_eq!(terms, [1, 2, 3], "terms strictly increase in leading order");
    let s = status(&server, "jobs");
    assert_eq!(s["leader"], serde_json::Value::Null);
    assert_eq!(s["last_term"], 3);
    Ok(())
}

/// The leader's dlm is SIGKILLed: it never resigns, so the next candidate
/// takes over once the lease has run out (one TTL plus its look-again),
/// with a higher term; `elect status` shows each leader.
#[test]
fn a_killed_leader_is_replaced_within_a_ttl() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let (first_pid, second_pid) = (path_in(&dir, "first"), path_in(&dir, "second"));
    let first = candidate(&server, "kill", "first", "1s", &announce(&first_pid));
    let line = wait_for_file(&first_pid, Duration::from_secs(10));
    let (child, term) = line.split_once(' ').ok_or("pid term")?;
    let second = candidate(&server, "kill", "second", "1s", &announce(&second_pid));
    let s = status(&server, "kill");
    assert_eq!(
        (s["leader"].as_str(), s["term"].as_u64()),
        (Some("first"), Some(1))
    );
    assert!(s["ttl_ms"].as_u64().is_some_and(|t| t <= 1000), "{s}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !second_pid.exists(),
        "a second leader while the first leads"
    );

    let killed = Instant::now();
    signal(&first.pid().to_string(), "KILL");
    signal(child, "KILL"); // its CMD, orphaned by the SIGKILL
    let _ = first.finish(Duration::from_secs(5));
    let line2 = wait_for_file(&second_pid, Duration::from_secs(10));
    let handover = killed.elapsed();
    let (child2, term2) = line2.split_once(' ').ok_or("pid term")?;
    assert!(term2.parse::<u64>()? > term.parse::<u64>()?);
    // One TTL (1 s) plus the look-again when it ends, with room for a
    // loaded machine; a candidate that polled every few seconds, or waited
    // for the 10 s default, would miss it.
    assert!(
        handover < Duration::from_secs(4),
        "hand-over took {handover:?}"
    );
    let s = status(&server, "kill");
    assert_eq!(s["leader"], "second");
    signal(child2, "TERM");
    let r = second.finish(Duration::from_secs(10));
    assert_eq!(r.code(), 143, "CMD's SIGTERM: {}", r.stderr);
    Ok(())
}

/// A leader frozen (SIGSTOP) past its lease: a new leader is elected with
/// a higher term and writes; the frozen leader's late write, carrying its
/// old term, is refused by the fenced store; thawed, its dlm finds the
/// leadership lost, stops CMD and exits 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leaders_late_write_is_refused_by_its_term() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let (old_file, new_file) = (path_in(&dir, "old"), path_in(&dir, "new"));
    let old = candidate(&server, "frozen", "old", "600ms", &announce(&old_file));
    let line = wait_for_file(&old_file, Duration::from_secs(10));
    let (old_child, old_term) = line.split_once(' ').ok_or("pid term")?;
    let old_term = dlm::Fence::new(old_term.parse()?);
    let client = dlm::Client::connect(&server.url()).await?;
    client
        .fenced_write("report", old_term, b"old leader")
        .await?;

    signal(&old.pid().to_string(), "STOP");
    signal(old_child, "STOP");
    let new = candidate(&server, "frozen", "new", "5s", &announce(&new_file));
    let line = wait_for_file(&new_file, Duration::from_secs(10));
    let (new_child, new_term) = line.split_once(' ').ok_or("pid term")?;
    let new_term = dlm::Fence::new(new_term.parse()?);
    assert!(new_term > old_term);
    client
        .fenced_write("report", new_term, b"new leader")
        .await?;
    // The frozen leader's write, late, with the term it was given.
    let late = client.fenced_write("report", old_term, b"stale").await;
    assert!(late.is_err(), "a stale term is refused: {late:?}");
    let (_, value) = client.fenced_read("report").await?.ok_or("a value")?;
    assert_eq!(value, b"new leader");

    signal(old_child, "CONT");
    signal(&old.pid().to_string(), "CONT");
    let r = old.finish(Duration::from_secs(20));
    assert_eq!(r.code(), 4, "lost leadership: {}", r.stderr);
    assert!(!alive(old_child), "the old CMD was stopped");
    signal(new_child, "TERM");
    let _ = new.finish(Duration::from_secs(10));
    Ok(())
}

/// Bad input exits 2 and writes nothing.
#[test]
fn bad_elect_input_exits_2() -> TestResult {
    let server = server();
    let long = "x".repeat(300);
    for args in [
        vec!["elect", "run", "e", "--id", "", "--", "true"],
        vec!["elect", "run", "e", "--id", &long, "--", "true"],
        vec!["elect", "run", "e", "--ttl", "0s", "--", "true"],
        vec!["elect", "run", "e"],
    ] {
        let r = run_on(&server, &args);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.stderr);
    }
    assert_eq!(status(&server, "e")["last_term"], 0);
    Ok(())
}
