//! Task dependencies from the command line and under crashes: `queue push
//! --after`, `queue task`, `DLM_TASK_DEPS`, and a DAG of 10,000 tasks in 100
//! levels with diamonds, drained by `dlm queue work` processes that are
//! SIGKILLed every 500 ms, judged by `dlm_testkit::history::dag_violations`.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use dlm::queue::{NewTask, OnDuplicate};
use dlm_testkit::history::{DagRun, dag_violations};

fn push(server: &RedisServer, args: &[&str]) -> Run {
    let mut all = vec!["--json", "queue", "push"];
    all.extend(args);
    run_on(server, &all)
}

fn task_json(server: &RedisServer, queue: &str, id: &str) -> serde_json::Value {
    let r = run_on(server, &["--json", "queue", "task", queue, id]);
    serde_json::from_str(r.stdout.trim()).unwrap_or_default()
}

/// `--after`, the statuses push prints, exit 2 for a cycle or an unknown id
/// (and nothing written), `queue task --json`, `blocked` in stats.
#[test]
fn push_after_blocks_and_refuses_cycles_and_unknown_ids() -> TestResult {
    let server = server();
    assert_eq!(push(&server, &["g", "a", "b"]).code(), 0);
    let r = push(&server, &["g", "c", "--after", "a,b"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    assert!(r.stdout.contains(r#""status":"blocked""#), "{}", r.stdout);

    let unknown = push(&server, &["g", "x", "y", "--after", "a,nope"]);
    assert_eq!(unknown.code(), 2, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("nope"), "{}", unknown.stderr);
    let later = push(
        &server,
        &["g", "p", "--after", "q", "--deps-may-come-later"],
    );
    assert_eq!(later.code(), 0, "{}", later.stderr);
    let cycle = push(&server, &["g", "q", "--after", "p"]);
    assert_eq!(cycle.code(), 2, "{}", cycle.stderr);
    assert!(cycle.stderr.contains("cycle"), "{}", cycle.stderr);
    let own = push(&server, &["g", "z", "--after", "z"]);
    assert_eq!(own.code(), 2, "{}", own.stderr);
    for id in ["x", "y", "q", "z"] {
        assert_eq!(
            task_json(&server, "g", id)["state"],
            "unknown",
            "{id} was written"
        );
    }

    let c = task_json(&server, "g", "c");
    for field in [
        "id",
        "state",
        "attempts",
        "progress",
        "message",
        "deps",
        "dependents",
        "result_bytes",
        "error",
    ] {
        assert!(c.get(field).is_some(), "{field} missing in {c}");
    }
    assert_eq!(c["state"], "blocked");
    assert_eq!(c["deps"], serde_json::json!(["a", "b"]));
    assert_eq!(c["pending_deps"], 2);
    assert_eq!(
        task_json(&server, "g", "a")["dependents"],
        serde_json::json!(["c"])
    );
    let st = queue_stats(&server, "g");
    assert_eq!(
        (st["blocked"].as_u64(), st["waiting"].as_u64()),
        (Some(2), Some(2)),
        "{st}"
    );
    let missing = run_on(&server, &["queue", "task", "g", "never"]);
    assert_eq!(missing.code(), 1);
    Ok(())
}

/// A worker runs a task after its dependencies, with `DLM_TASK_DEPS`, and
/// `--exit-when-empty` waits while tasks in flight can still release blocked
/// ones; a dependency that dies takes down the dependents that fail with it.
#[test]
fn work_runs_dependents_after_their_dependencies() -> TestResult {
    let server = server();
    let dir = tempdir()?;
    let log = path_in(&dir, "log");
    assert_eq!(push(&server, &["w", "slow"]).code(), 0);
    assert_eq!(push(&server, &["w", "next", "--after", "slow"]).code(), 0);
    assert_eq!(
        push(&server, &["w", "last", "--after", "next,slow"]).code(),
        0
    );
    assert_eq!(push(&server, &["w", "bad"]).code(), 0);
    assert_eq!(push(&server, &["w", "doomed", "--after", "bad"]).code(), 0);
    let r = push(
        &server,
        &[
            "w",
            "brave",
            "--after",
            "bad",
            "--on-dependency-failure",
            "ignore",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let script = format!(
        "[ \"$DLM_TASK_ID\" = slow ] && sleep 0.5; echo \"$DLM_TASK_ID [$DLM_TASK_DEPS]\" >> '{}'; [ \"$DLM_TASK_ID\" != bad ]",
        log.display()
    );
    let mut cmd = dlm();
    cmd.args(["--redis", &server.url(), "--json", "queue", "work", "w"])
        .args([
            "--concurrency",
            "4",
            "--max-attempts",
            "1",
            "--exit-when-empty",
        ])
        .args(["--", "sh", "-c", &script]);
    let done = start(cmd).finish(Duration::from_secs(30));
    assert_eq!(done.code(), 0, "{}", done.stderr);
    let lines = std::fs::read_to_string(&log)?;
    let order: Vec<&str> = lines.lines().collect();
    let at = |l: &str| order.iter().position(|x| *x == l);
    let (slow, next, last) = (at("slow []"), at("next [slow]"), at("last [next,slow]"));
    assert!(slow < next && next < last && slow.is_some(), "{lines}");
    assert!(at("brave [bad]").is_some(), "{lines}");
    assert!(at("doomed [bad]").is_none(), "{lines}");
    let doomed = task_json(&server, "w", "doomed");
    assert_eq!(doomed["state"], "dead");
    assert_eq!(doomed["error"], "dependency 'bad' died");
    let st = queue_stats(&server, "w");
    assert_eq!(st["processed"], 4, "{st}");
    assert_eq!(st["blocked"], 0, "{st}");
    Ok(())
}

/// `queue config --events N` turns the log on; `queue events --json` prints
/// one line per task event, released ones included; a bad --from exits 2.
#[test]
fn queue_events_prints_the_log() -> TestResult {
    let server = server();
    let on = run_on(
        &server,
        &["--json", "queue", "config", "ev", "--events", "1000"],
    );
    assert_eq!(on.code(), 0, "{}", on.stderr);
    assert!(on.stdout.contains(r#""events":1000"#), "{}", on.stdout);
    assert_eq!(push(&server, &["ev", "a"]).code(), 0);
    assert_eq!(push(&server, &["ev", "b", "--after", "a"]).code(), 0);
    let mut cmd = dlm();
    cmd.args([
        "--redis",
        &server.url(),
        "queue",
        "work",
        "ev",
        "--exit-when-empty",
    ])
    .args(["--", "true"]);
    assert_eq!(start(cmd).finish(Duration::from_secs(20)).code(), 0);
    let r = run_on(&server, &["--json", "queue", "events", "ev"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    let seen: Vec<(String, String)> = json_lines(&r)
        .iter()
        .map(|e| {
            assert!(
                e["ts_ms"].as_u64().is_some() && e["cursor"].is_string(),
                "{e}"
            );
            (
                e["event"].as_str().unwrap_or_default().to_string(),
                e["id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let want = [
        ("added", "a"),
        ("added", "b"),
        ("claimed", "a"),
        ("completed", "a"),
        ("released", "b"),
        ("claimed", "b"),
        ("completed", "b"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(k, id)| (k.to_string(), id.to_string()))
        .collect();
    assert_eq!(seen, want);
    let bad = run_on(&server, &["queue", "events", "ev", "--from", "yesterday"]);
    assert_eq!(bad.code(), 2, "{}", bad.stderr);
    Ok(())
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// `levels` levels of `width` tasks; each task below the first depends on two
/// or three tasks of the level above (so diamonds abound).
fn dag(levels: usize, width: usize) -> Vec<Vec<(String, Vec<String>)>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let name = |l: usize, i: usize| format!("L{l}.{i}");
    (0..levels)
        .map(|l| {
            (0..width)
                .map(|i| {
                    let mut deps = Vec::new();
                    if l > 0 {
                        for _ in 0..2 + rng.below(2) {
                            let d = name(l - 1, rng.below(width));
                            if !deps.contains(&d) {
                                deps.push(d);
                            }
                        }
                    }
                    (name(l, i), deps)
                })
                .collect()
        })
        .collect()
}

/// start/finish lines of the handler's log -> runs.
fn runs_from(log: &str) -> Vec<DagRun> {
    let mut runs: HashMap<(String, u64), DagRun> = HashMap::new();
    for line in log.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [kind, task, fence, at] = w.as_slice() else {
            continue;
        };
        let (Ok(fence), Ok(at)) = (fence.parse::<u64>(), at.parse::<u128>()) else {
            continue;
        };
        let run = runs
            .entry((task.to_string(), fence))
            .or_insert_with(|| DagRun {
                task: task.to_string(),
                fence,
                started: at,
                finished: None,
            });
        match *kind {
            "s" => run.started = at,
            "e" => run.finished = Some(at),
            _ => {}
        }
    }
    runs.into_values().collect()
}

/// 10,000 tasks in 100 levels (`DLM_DAG_LEVELS` x `DLM_DAG_WIDTH` to change
/// it), three workers, one SIGKILLed every 500 ms and replaced: every task
/// is acked exactly once (the processed count, as an ack needs the current
/// lease and removes the task) and none starts before each of its
/// dependencies finished the run that was acked.
#[test]
fn a_dag_of_ten_thousand_tasks_survives_workers_killed_every_500ms() -> TestResult {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (levels, width) = (env("DLM_DAG_LEVELS", 100), env("DLM_DAG_WIDTH", 100));
    let total = levels * width;
    let server = server();
    let graph = dag(levels, width);
    let deps: HashMap<String, Vec<String>> = graph.iter().flatten().cloned().collect();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let client = dlm::Client::connect(&server.url()).await?;
        let q = client.queue("dag");
        for level in &graph {
            let tasks = level
                .iter()
                .map(|(id, deps)| NewTask::new(id.clone()).after(deps.iter().cloned()));
            q.enqueue(tasks, Duration::ZERO, OnDuplicate::Keep).await?;
        }
        let s = q.stats().await?;
        assert_eq!(
            (s.waiting, s.blocked),
            (width as u64, (total - width) as u64)
        );
        Ok::<(), dlm::Error>(())
    })?;

    let dir = tempdir()?;
    let log = path_in(&dir, "log");
    let script = format!(
        "printf 's %s %s %s\\n' \"$DLM_TASK_ID\" \"$DLM_FENCE\" \"${{EPOCHREALTIME/./}}\" >> '{l}'; \
         printf 'e %s %s %s\\n' \"$DLM_TASK_ID\" \"$DLM_FENCE\" \"${{EPOCHREALTIME/./}}\" >> '{l}'",
        l = log.display()
    );
    let worker = |extra: &[&str]| {
        let mut cmd = dlm();
        cmd.args(["--redis", &server.url(), "--json", "queue", "work", "dag"])
            .args(["--concurrency", "8", "--lease", "1s"])
            .args(extra)
            .args(["--", "bash", "-c", &script]);
        start(cmd)
    };
    let mut workers: Vec<Running> = (0..3).map(|_| worker(&[])).collect();
    let started = Instant::now();
    let mut kills = 0;
    let mut rng = Rng(started.elapsed().as_nanos() as u64 | 1);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let st = queue_stats(&server, "dag");
        if st["processed"].as_u64() == Some(total as u64) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "not done after 5 minutes: {st}"
        );
        let mut victim = workers.swap_remove(rng.below(workers.len()));
        victim.child.kill()?; // SIGKILL: its leases must expire
        victim.child.wait()?;
        kills += 1;
        workers.push(worker(&[]));
    }
    let took = started.elapsed();
    for w in workers {
        signal(&w.pid().to_string(), "TERM");
        let r = w.finish(Duration::from_secs(20));
        assert_eq!(r.code(), 0, "{}", r.stderr);
    }
    // Commands of killed workers may still be writing.
    std::thread::sleep(Duration::from_millis(300));
    let st = queue_stats(&server, "dag");
    for field in [
        "waiting", "delayed", "inflight", "dead", "failed", "blocked",
    ] {
        assert_eq!(st[field], 0, "{field} in {st}");
    }
    assert_eq!(st["processed"], total, "{st}");
    let runs = runs_from(&std::fs::read_to_string(&log)?);
    let violations = dag_violations(&deps, &runs);
    assert!(
        violations.is_empty(),
        "{} violations, first: {:?}",
        violations.len(),
        violations.first()
    );
    let reruns = runs.len() - total;
    println!(
        "DAG of {total} tasks in {levels} levels drained in {took:?} with {kills} workers SIGKILLed, \
         {reruns} re-runs of tasks whose lease expired"
    );
    assert!(kills > 0, "the run ended before any kill");
    Ok(())
}
