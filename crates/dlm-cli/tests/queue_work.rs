//! `dlm queue work`: every task run, crashes of workers lose nothing,
//! graceful and forced shutdown on SIGTERM.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

fn push_ids(server: &RedisServer, queue: &str, ids: &[String], payload: Option<&str>) {
    let mut args = vec!["queue", "push", queue];
    args.extend(ids.iter().map(String::as_str));
    if let Some(p) = payload {
        args.extend(["--payload", p]);
    }
    let r = run_on(server, &args);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), ids.len());
}

/// `dlm --redis URL queue work QUEUE OPTS... -- sh -c SCRIPT`, started.
fn start_worker(server: &RedisServer, queue: &str, opts: &[&str], script: &str) -> Running {
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "--json", "queue", "work", queue])
        .args(opts)
        .args(["--", "sh", "-c", script]);
    start(cmd)
}

/// The last stdout line of a finished worker: its JSON summary.
fn summary(r: &Run) -> serde_json::Value {
    json_lines(r).pop().expect("a summary line")
}

/// How many times each task id appears in `file` (first word of each line),
/// with the attempts it was run at.
fn runs(file: &Path) -> BTreeMap<String, Vec<u64>> {
    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
        let mut words = line.split_whitespace();
        let id = words.next().unwrap_or_default().to_string();
        let attempt = words.next().and_then(|a| a.parse().ok()).unwrap_or(0);
        seen.entry(id).or_default().push(attempt);
    }
    seen
}

#[test]
fn work_runs_every_task_once_and_exits_when_empty() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let file = path_in(&dir, "done");
    let ids: Vec<String> = (0..50).map(|i| format!("job-{i}")).collect();
    push_ids(&server, "w", &ids, Some("data"));
    let script = format!(
        "p=$(cat); echo \"$DLM_TASK_ID $DLM_TASK_ATTEMPT $p $DLM_QUEUE $DLM_FENCE\" >> '{}'",
        file.display()
    );
    let r = start_worker(
        &server,
        "w",
        &["--concurrency", "4", "--exit-when-empty"],
        &script,
    )
    .finish(Duration::from_secs(30));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let s = summary(&r);
    assert_eq!(s["acked"], 50, "{s}");
    assert_eq!(s["retried"], 0, "{s}");

    let text = std::fs::read_to_string(&file)?;
    let seen = runs(&file);
    assert_eq!(seen.len(), 50, "{text}");
    for id in &ids {
        assert_eq!(seen.get(id).map(Vec::len), Some(1), "{id} in {text}");
    }
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&w[1..4], ["1", "data", "w"], "{line}");
        assert!(w[4].parse::<u64>().is_ok(), "fence in {line}");
    }
    let st = queue_stats(&server, "w");
    assert_eq!(st["processed"], 50, "{st}");
    assert_eq!(st["waiting"], 0, "{st}");
    assert_eq!(st["inflight"], 0, "{st}");
    Ok(())
}

/// A pseudo-random number from the clock (no dependency needed).
fn random(below: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) % below
}

#[test]
fn killed_workers_lose_no_task() -> TestResult {
    const TASKS: usize = 300;
    const CONCURRENCY: usize = 4;
    let server = server();
    let dir = tempdir()?;
    let file = path_in(&dir, "done");
    let ids: Vec<String> = (0..TASKS).map(|i| format!("t{i}")).collect();
    push_ids(&server, "crash", &ids, None);
    // 50-90 ms per task (dash has no $RANDOM: the shell's pid varies).
    let script = format!(
        "sleep 0.0$(( $$ % 5 + 5 )); echo \"$DLM_TASK_ID $DLM_TASK_ATTEMPT\" >> '{}'",
        file.display()
    );
    let opts = ["--concurrency", "4", "--lease", "1s"];
    let mut workers: Vec<Running> = (0..3)
        .map(|_| start_worker(&server, "crash", &opts, &script))
        .collect();

    let mut kills = 0;
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(200 + random(200)));
        let victim = random(workers.len() as u64) as usize;
        let mut w = workers.swap_remove(victim);
        w.child.kill()?; // SIGKILL: no ack, no give-back; the leases must expire
        w.child.wait()?;
        kills += 1;
        workers.push(start_worker(&server, "crash", &opts, &script));
    }
    let mid = queue_stats(&server, "crash");
    println!("after {kills} kills: {mid}");

    let started = Instant::now();
    let last = start_worker(
        &server,
        "crash",
        &["--concurrency", "4", "--lease", "1s", "--exit-when-empty"],
        &script,
    )
    .finish(Duration::from_secs(60));
    assert_eq!(last.code(), 0, "{}", last.stderr);
    println!(
        "final worker drained in {:?}: {}",
        started.elapsed(),
        summary(&last)
    );
    let mut acked = summary(&last)["acked"].as_u64().unwrap_or(0);
    for w in workers {
        signal(&w.pid().to_string(), "TERM");
        let r = w.finish(Duration::from_secs(20));
        assert_eq!(r.code(), 0, "{}", r.stderr);
        acked += summary(&r)["acked"].as_u64().unwrap_or(0);
    }
    // Commands of the killed workers may still be finishing (they are short).
    std::thread::sleep(Duration::from_millis(200));

    let st = queue_stats(&server, "crash");
    for field in ["waiting", "delayed", "inflight", "dead", "failed"] {
        assert_eq!(st[field], 0, "{field} in {st}");
    }
    // Each task acked exactly once: an ack needs the current lease.
    assert_eq!(st["processed"], TASKS, "{st}");
    assert!(acked <= TASKS as u64);

    let seen = runs(&file);
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(missing.is_empty(), "lost tasks: {missing:?}");
    assert_eq!(seen.len(), TASKS, "unknown ids in the file");
    let mut duplicates = 0;
    for (id, attempts) in &seen {
        if attempts.len() > 1 {
            duplicates += attempts.len() - 1;
            // A task runs again only after its lease expired: with a higher attempt.
            let mut sorted = attempts.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                attempts.len(),
                "{id} ran twice at one attempt: {attempts:?}"
            );
        }
    }
    println!(
        "crash test: {TASKS} tasks, {kills} workers SIGKILLed, {duplicates} duplicate runs (tasks re-run after their lease expired)"
    );
    // Only the tasks a killed worker was running can run twice.
    assert!(
        duplicates <= kills * CONCURRENCY,
        "{duplicates} duplicates after {kills} kills"
    );
    Ok(())
}

#[test]
fn sigterm_lets_running_tasks_finish_within_the_grace_period() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let ready = path_in(&dir, "ready");
    push_ids(&server, "graceful", &["slow".to_string()], None);
    let script = format!("echo go > '{}'; sleep 2", ready.display());
    let w = start_worker(&server, "graceful", &["--grace", "5s"], &script);
    wait_for_file(&ready, Duration::from_secs(10));
    let term_at = Instant::now();
    signal(&w.pid().to_string(), "TERM");
    let r = w.finish(Duration::from_secs(15));
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(
        term_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        term_at.elapsed()
    );
    let s = summary(&r);
    assert_eq!(
        (s["acked"].as_u64(), s["returned"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    let st = queue_stats(&server, "graceful");
    assert_eq!(st["processed"], 1, "{st}");
    assert_eq!(st["waiting"], 0, "{st}");
    assert_eq!(st["inflight"], 0, "{st}");
    Ok(())
}

#[test]
fn sigterm_after_the_grace_period_kills_the_command_and_gives_the_task_back() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let pidfile = path_in(&dir, "pid");
    push_ids(&server, "forced", &["long".to_string()], None);
    // The command's shell leads its own process group: its pid is the group id.
    let script = format!(
        "echo $$ > '{f}.tmp'; mv '{f}.tmp' '{f}'; sleep 30; echo finished >> '{f}'",
        f = pidfile.display()
    );
    let w = start_worker(
        &server,
        "forced",
        &["--grace", "100ms", "--lease", "30s"],
        &script,
    );
    let pid = wait_for_file(&pidfile, Duration::from_secs(10));
    let term_at = Instant::now();
    signal(&w.pid().to_string(), "TERM");
    let r = w.finish(Duration::from_secs(15));
    let took = term_at.elapsed();
    // Whatever happened, leave no sleeper behind (the whole group).
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stderr(std::process::Stdio::null())
        .status();
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    assert_eq!(summary(&r)["returned"], 1, "{}", r.stdout);
    // Back at once, not after the 30 s lease.
    let st = queue_stats(&server, "forced");
    assert_eq!(st["waiting"], 1, "{st}");
    assert_eq!(st["inflight"], 0, "{st}");
    assert_eq!(st["processed"], 0, "{st}");
    assert!(!alive(&pid), "the command's shell survived dlm");
    assert_eq!(
        wait_for_file(&pidfile, Duration::from_secs(1)),
        pid,
        "it did not finish"
    );
    Ok(())
}
